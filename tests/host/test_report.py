"""bench/report.py's section "Between hosts": the rows of bench/remote's
remote.jsonl, the medians of rows measured in rounds, and the targets of
issue #7 judged on them.  Runs on the host: python3 -m pytest tests/host"""
import importlib.util
import pathlib

TOP = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("report", TOP / "bench" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def rtt(transport, program, value, rnd=None, **extra):
    d = {"where": "pair", "transport": transport, "program": program,
         "test": "pingpong", "size": 64, "value": value, "unit": "us",
         "stat": "median round trip", **extra}
    if rnd is not None:
        d["round"] = rnd
    return d


def rate(transport, program, value):
    return {"where": "pair", "transport": transport, "program": program,
            "test": "stream", "size": 64, "value": value, "unit": "msg/s"}


def point(rm, transport, col="pingpong/64"):
    r = [r for r in rm["results"] if r["transport"] == transport]
    assert len(r) == 1, rm["results"]
    return r[0]["points"][col]


def test_one_pass_is_read_as_it_was():
    """A run without rounds (every run before them): each figure is its
    record's, and the targets compare those."""
    lines = [rtt("sd-rdma", "sockperf", 1500.0), rtt("rdma-write", "ib_write_lat", 1000.0),
             rtt("rsocket", "sockperf", 2000.0), rate("sd-rdma", "sockperf", 1e5),
             rate("rsocket", "sockperf", 1e4)]
    rm = report.remote(lines)
    p = point(rm, "sd-rdma")
    assert p["value"] == 1500.0 and "rounds" not in p
    assert p["over_rdma_write"] == 1.5
    t = rm["targets"]
    assert t["rtt_met"] is False and t["rtt_below_rsocket"] is True
    assert t["rate_above_rsocket"] is True
    assert "rtt_rounds_rdma_write" not in t


def test_rounds_give_medians_and_how_often_each_target_held():
    """Three rounds: the table's figure is the median of each row's, the
    verdict is the medians', and the rounds are compared one by one (the
    same round of each row) for how often each target held."""
    sd = [3000.0, 1200.0, 1500.0]
    wr = [1000.0, 1000.0, 1000.0]
    rs = [2000.0, 1000.0, 2000.0]
    lines = []
    for i in range(3):
        lines += [rtt("sd-rdma", "sockperf", sd[i], i, client_vcsw_per_rt=2.0 + i,
                      client_cpu_us_per_rt=100.0 * (i + 1)),
                  rtt("rdma-write", "ib_write_lat", wr[i], i),
                  rtt("rsocket", "sockperf", rs[i], i)]
    lines += [rate("sd-rdma", "sockperf", 1e5), rate("rsocket", "sockperf", 1e4)]
    rm = report.remote(lines)
    p = point(rm, "sd-rdma")
    assert p["value"] == 1500.0
    assert [r["value"] for r in p["rounds"]] == sd
    assert p["client_vcsw_per_rt"] == 3.0 and p["client_cpu_us_per_rt"] == 200.0
    assert p["over_rdma_write"] == 1.5
    t = rm["targets"]
    assert t["rtt_met"] is False            # 1500 > 1.3 x 1000
    assert t["rtt_rounds_rdma_write"] == {"rounds": 3, "held": 1,
                                          "ratios": [3.0, 1.2, 1.5]}
    assert t["rtt_below_rsocket"] is True   # 1500 < 2000
    assert t["rtt_rounds_rsocket"]["held"] == 1
    md = "\n".join(report.remote_md(rm, {}))
    assert "1.5× raw RDMA write (medians of 3 rounds; within 1.3× in 1 of 3): NOT met" in md
    assert "(sockperf) (medians of 3 rounds; below it in 1 of 3): met" in md
    assert "3,000, 1,200, 1,500" in md


def test_a_failed_round_counts_only_the_rounds_that_ran():
    """A round whose raw RDMA write failed is left out of the comparison,
    not counted as held or missed."""
    lines = [rtt("sd-rdma", "sockperf", 1000.0, 0), rtt("rdma-write", "ib_write_lat", 1000.0, 0),
             rtt("sd-rdma", "sockperf", 1000.0, 1),
             {"where": "pair", "transport": "rdma-write", "program": "ib_write_lat",
              "test": "pingpong", "size": 64, "round": 1, "failed": "inf"},
             rtt("sd-rdma", "sockperf", 1000.0, 2), rtt("rdma-write", "ib_write_lat", 500.0, 2)]
    rm = report.remote(lines)
    r = rm["targets"]["rtt_rounds_rdma_write"]
    assert r["rounds"] == 2 and r["held"] == 1 and r["ratios"] == [1.0, 2.0]
    assert point(rm, "rdma-write")["value"] == 750.0


def test_means_are_shown_beside_the_medians_verdict():
    """The rows' mean round trips (rtt_us_avg, the median over rounds) and
    AF_SD's mean over raw write's and rsocket's are reported, but the
    verdict stays the medians'."""
    lines = []
    for i, (sd, wr, rs) in enumerate(((2000.0, 1000.0, 1800.0), (1900.0, 1100.0, 1700.0),
                                      (2100.0, 900.0, 1900.0))):
        lines += [rtt("sd-rdma", "sockperf", sd, i, rtt_us_avg=sd + 200),
                  rtt("rdma-write", "ib_write_lat", wr, i, rtt_us_avg=2 * wr + 200),
                  rtt("rsocket", "sockperf", rs, i, rtt_us_avg=rs + 100)]
    lines += [rate("sd-rdma", "sockperf", 1e5), rate("rsocket", "sockperf", 1e4)]
    rm = report.remote(lines)
    assert point(rm, "sd-rdma")["rtt_us_avg"] == 2200.0
    assert point(rm, "rdma-write")["rtt_us_avg"] == 2200.0
    t = rm["targets"]
    assert t["rtt_mean_over_rdma_write"] == 1.0
    assert abs(t["rtt_mean_over_rsocket"] - 2200.0 / 1900.0) < 1e-9
    assert t["rtt_met"] is False            # the medians: 2000 > 1.3 x 1000
    md = "\n".join(report.remote_md(rm, {}))
    assert "AF_SD's mean is 1× raw RDMA write's and 1.16× rsocket's." in md
    assert "judged on the medians" in md


def test_no_means_no_line():
    """Records without rtt_us_avg (older runs) make no line of means."""
    lines = [rtt("sd-rdma", "sockperf", 1500.0), rtt("rdma-write", "ib_write_lat", 1000.0)]
    rm = report.remote(lines)
    assert "rtt_mean_over_rdma_write" not in rm["targets"]
    assert "Mean round trips" not in "\n".join(report.remote_md(rm, {}))


def test_the_pinning_is_said():
    """bench/remote's meta says where the programs ran; the report says it
    too (and nothing for runs from before the setting)."""
    lines = [rtt("sd-rdma", "sockperf", 1500.0), rtt("rdma-write", "ib_write_lat", 1000.0)]
    md = "\n".join(report.remote_md(report.remote(lines), {}))
    assert "processor" not in md and "SD_BENCH_REMOTE_PIN" not in md
    pinned = lines + [{"meta": {"where": "pair", "pin_cpu": "0",
                                "irqs_pinned": {"a": ["27"], "b": ["27"]}}}]
    md = "\n".join(report.remote_md(report.remote(pinned), {}))
    assert "Every program measured, client and server, ran on processor 0" in md
    rt_only = lines + [{"meta": {"where": "pair", "pin_cpu": "0", "throughput_pinned": False,
                                 "irqs_pinned": {"a": ["27"], "b": ["27"]}}}]
    md = "\n".join(report.remote_md(report.remote(rt_only), {}))
    assert "measured a round trip, client and server, ran on processor 0" in md
    assert "the throughputs ran where the guests' schedulers put them" in md
    off = lines + [{"meta": {"where": "pair", "pin_cpu": "off"}}]
    md = "\n".join(report.remote_md(report.remote(off), {}))
    assert "SD_BENCH_REMOTE_PIN=off" in md


def test_busy_polling_rows_are_judged_apart():
    """The busy-polling rows (both libraries spinning through the round
    trip, as ib_write_lat does) get their own round-trip verdicts beside
    the defaults', from the same rounds, and the report says what they
    polled with; a run without them says nothing of them."""
    lines = [{"where": "pair", "meta": {"poll_us": 3000}}]
    for i, (sd, sdp, wr, rs, rsp) in enumerate(((1500.0, 1000.0, 900.0, 1400.0, 1150.0),
                                                (1600.0, 1200.0, 1000.0, 1500.0, 1000.0),
                                                (1400.0, 1100.0, 800.0, 1300.0, 1250.0))):
        lines += [rtt("sd-rdma", "sockperf", sd, i), rtt("sd-rdma-poll", "sockperf", sdp, i),
                  rtt("rdma-write", "ib_write_lat", wr, i), rtt("rsocket", "sockperf", rs, i),
                  rtt("rsocket-poll", "sockperf", rsp, i)]
    lines += [rate("sd-rdma", "sockperf", 1e5), rate("rsocket", "sockperf", 1e4)]
    rm = report.remote(lines)
    t = rm["targets"]
    assert t["rtt_met"] is False and t["rtt_below_rsocket"] is False
    p = t["polling"]
    assert p["rtt_met"] is True             # 1100 <= 1.3 x 900
    assert abs(p["rtt_over_rdma_write"] - 1100.0 / 900.0) < 1e-9
    assert p["rtt_below_rsocket"] is True   # 1100 < 1150
    assert p["rtt_rounds_rsocket"] == {"rounds": 3, "held": 2,
                                       "ratios": [0.87, 1.2, 0.88]}
    md = "\n".join(report.remote_md(rm, {}))
    assert "both libraries busy-polling: round trip 1.22× raw RDMA write" in md
    assert "SD_SPIN_US=3000" in md and "polling_time 3000 µs" in md
    assert "AF_SD over RDMA, busy-polling" in md
    plain = report.remote([l for l in lines if "-poll" not in l.get("transport", "")])
    assert "polling" not in plain["targets"]
    assert "busy-polling" not in "\n".join(report.remote_md(plain, {}))


def test_bench_remote_refuses_bad_settings():
    """bench/remote checks its settings before it looks for the peer: a
    bad one ends it with a message naming it."""
    import os
    import subprocess
    import sys
    for key, bad in (("SD_BENCH_REMOTE_POLL_US", "0"), ("SD_BENCH_REMOTE_POLL_US", "3ms"),
                     ("SD_BENCH_REMOTE_PIN", "-1"), ("SD_BENCH_REMOTE_ROUNDS", "0"),
                     ("SD_BENCH_REMOTE_ROWS", "tcp,sd-bridge")):
        out = subprocess.run([sys.executable, str(TOP / "bench" / "remote"), "/nonexistent"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, **{key: bad}))
        assert out.returncode != 0 and f"{key}={bad!r}" in out.stderr, (key, bad, out)


def daemons(carried=1, writes=0, wakes=0, resets=0):
    return {"carried": carried, "writes": writes, "bytes": 0, "copies": 0,
            "wakes": wakes, "syscalls": 1, "sleeps": 0, "resets": resets,
            "mismatched": 0}


def test_the_daemons_counts_per_message():
    """The sd rows' records carry the link daemons' counters and counts per
    message: the report gives the medians of the rounds, the connections
    and resets summed, in a table of their own; the module's counters
    (module_a, module_b) are summed per row; rows without daemons are
    not in that table."""
    lines = [rtt("rdma-write", "ib_write_lat", 500.0)]
    for i, (w, k) in enumerate(((2.0, 1.0), (2.5, 0.5), (3.0, 1.0))):
        lines.append(rtt("sd-rdma", "sockperf", 1000.0, i, messages=2000,
                         writes_per_msg=w, copies_per_msg=0.0, wakes_per_msg=k,
                         syscalls_per_msg=0.001, sleeps_per_msg=1.0,
                         daemon_a=daemons(writes=2000, wakes=1000),
                         daemon_b=daemons(writes=2000, resets=i == 2),
                         module_a={"link_via": 1}, module_b={"link_incoming": 1}))
    lines.append(dict(rate("sd-rdma", "sockperf", 1e4), messages=10000,
                      writes_per_msg=0.2, writes_per_byte=0.003125,
                      rdma_bytes_per_byte=1.13, copies_per_msg=0.0,
                      daemon_a=daemons(), daemon_b=daemons()))
    lines.append(rtt("sd-fallback", "sockperf", 900.0, messages=2000,
                     daemon_a=daemons(carried=0), daemon_b=daemons(carried=0),
                     module_a={"fallback_no_rdma": 1, "link_upcalls": 1}))
    lines.append(rtt("tcp", "sockperf", 800.0))
    rm = report.remote(lines)
    p = point(rm, "sd-rdma")
    assert p["writes_per_msg"] == 2.5 and p["wakes_per_msg"] == 1.0
    assert p["daemon_totals"]["carried_a"] == 3 and p["daemon_totals"]["resets_b"] == 1
    assert rm["fallback"]["sd-rdma"]["a"] == {"link_via": 3}
    assert rm["fallback"]["sd-fallback"]["a"] == {"fallback_no_rdma": 1, "link_upcalls": 1}
    md = "\n".join(report.remote_md(rm, {}))
    assert "The link daemons' counts" in md
    row = [l for l in md.splitlines()
           if l.startswith("| AF_SD over RDMA") and "| round trip 64 B |" in l]
    assert row == ["| AF_SD over RDMA (sockperf under sdrun, sdlinkd on both guests) "
                   "| round trip 64 B | 2000 | 2.5 | – | – | 0 | 1 | 0.001 | 1 "
                   "| 3, 3 | 0, 1 |"], md
    assert "| throughput 64 B | 10000 | 0.2 | 0.00313 | 1.13 | 0 |" in md
    fb = [l for l in md.splitlines() if l.startswith("| AF_SD under sdrun, TCP fallback")]
    assert len(fb) == 2 and "| – | – | – | – | – | – | – | 0, 0 | 0, 0 |" in fb[1]
    assert not any(l.startswith("| TCP (sockperf) | round trip") for l in md.splitlines())
    assert "fallback_no_rdma 1" in md


def test_message_rates_in_rounds():
    """The 64 B message rates measured in rounds: the verdict is the
    medians', the rounds are compared one by one, and each round's rate
    is listed."""
    lines = [rtt("sd-rdma", "sockperf", 1000.0), rtt("rsocket", "sockperf", 1000.0)]
    for i, (sd, rs) in enumerate(((6e3, 9e3), (6e4, 1e4), (4e4, 8e3))):
        lines += [dict(rate("sd-rdma", "sockperf", sd), round=i),
                  dict(rate("rsocket", "sockperf", rs), round=i)]
    rm = report.remote(lines)
    t = rm["targets"]
    assert t["rate_above_rsocket"] is True
    assert abs(t["rate_over_rsocket"] - 4e4 / 9e3) < 1e-9     # the medians
    assert t["rate_rounds_rsocket"] == {"rounds": 3, "held": 2,
                                        "ratios": [0.667, 6.0, 5.0]}
    md = "\n".join(report.remote_md(rm, {}))
    assert "4.44× rsocket's rate (sockperf) (medians of 3 rounds; above it in 2 of 3): met" in md
    assert "64 B message rates of each round" in md
