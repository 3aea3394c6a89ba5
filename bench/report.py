#!/usr/bin/env python3
"""Turn sdbench's JSON lines into bench/out/results.{json,md,png}.

usage: bench/report.py [--out DIR] [--remote FILE] [--keep DIR] RAW_DIR_OR_FILES...

Reads every *.jsonl (one JSON object per line, as sdbench prints them, plus
the meta lines bench/run adds) and libsd-trace.txt (the shim's trace of
the libsd probe run) and writes:

  results.json  one record per where (guest/host), transport and message
                size: median and p99 round trip in microseconds, messages
                per second and MB/s one way; with the meta data and whether
                libsd's fast path was enabled
  results.md    the same as tables, plus ratios against the raw
                shared-memory queue, AF_UNIX and TCP, and the large-message
                (zero-copy) table: sdbench --malloc lines, under "large"
                in results.json
  results.png   round trip and throughput against message size (needs
                python3-matplotlib; skipped with a message without it)

Lines whose "where" is "pair" (bench/remote's remote.jsonl, in an input
folder or given with --remote) make the "Between hosts" section instead:
"remote" in results.json.

results.md and results.json begin with what the run was: its commit, date
and place, the kernel, the processor and the accelerator (run_info()).
With --keep DIR it also writes DIR/DATE-PLACE.md, results.md under a line
that says it is generated: the file to commit when a run is worth keeping
(make bench-keep writes bench/results/).  PLACE is $SD_BENCH_PLACE, else
the place bench/run recorded, else this machine's short host name.

See Documentation/bench.rst.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import socket
import statistics
import subprocess
import sys

TOP = pathlib.Path(__file__).resolve().parents[1]

ORDER = ["shm", "libsd", "sd", "unix", "tcp"]
NAMES = {
    "shm": "shm ring (ceiling)",
    "unix": "AF_UNIX",
    "tcp": "TCP loopback",
    "sd": "AF_SD syscalls",
    "libsd": "libsd",
}
REFS = ["shm", "unix", "tcp"]
COLORS = {"shm": "tab:blue", "libsd": "tab:purple", "sd": "tab:orange",
          "unix": "tab:green", "tcp": "tab:red"}
# The calls whose hooks carry data: the fast path is on when they handle
# some.
DATA_CALLS = {"send", "sendto", "sendmsg", "sendmmsg", "recv", "recvfrom",
              "recvmsg", "recvmmsg", "read", "write", "readv", "writev"}
NOT_ENABLED = ("fast path not yet enabled: these are AF_SD system calls "
               "under sdrun, not libsd figures")


def read_inputs(paths, extra=()):
    lines, trace = [], []
    files = []
    for p in map(pathlib.Path, list(paths) + list(extra)):
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
            if (p / "libsd-trace.txt").exists():
                trace.append(p / "libsd-trace.txt")
        elif p.name.endswith(".txt"):
            trace.append(p)
        else:
            files.append(p)
    seen = set()
    for f in files:
        if f.resolve() in seen:         # remote.jsonl both ways
            continue
        seen.add(f.resolve())
        for n, line in enumerate(f.read_text().splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"report: {f}:{n}: {e}")
    return lines, trace


def read_apps(paths):
    """bench/apps' records (apps.json in an input folder)."""
    apps = []
    for p in map(pathlib.Path, paths):
        f = p / "apps.json" if p.is_dir() else None
        if f and f.exists():
            apps += [json.loads(line) for line in f.read_text().splitlines()
                     if line.strip()]
    return apps


# The figure that matters per row of bench/apps, and whether more is better.
APP_METRICS = (("requests_per_s", True), ("msgs_per_s", True),
               ("latency_us", False))


def apps_table(apps):
    """Per program and test: the plain TCP figure, the sdrun figure and
    sdrun's ratio to TCP (above 1 is better, whichever the metric)."""
    rows, failed = [], [a for a in apps if "failed" in a]
    by = {}
    for a in apps:
        if "failed" not in a:
            by.setdefault((a["app"], a["test"]), {})[a["mode"]] = a
    for (app, test), modes in by.items():
        tcp, sd = modes.get("tcp"), modes.get("sdrun")
        for key, higher in APP_METRICS:
            if tcp and sd and key in tcp and key in sd:
                ratio = sd[key] / tcp[key] if higher else tcp[key] / sd[key]
                row = {"app": app, "test": test, "metric": key,
                       "tcp": tcp[key], "sdrun": sd[key],
                       "speedup": round(ratio, 2)}
                if "latency_ms_p50" in tcp and "latency_ms_p50" in sd:
                    row["p50_ms_tcp"] = tcp["latency_ms_p50"]
                    row["p50_ms_sdrun"] = sd["latency_ms_p50"]
                rows.append(row)
    return rows, failed


def apps_md(rows, failed):
    md = ["## Unmodified programs (guest)", "",
          "Both ends plain (TCP over loopback) and both ends under `sdrun` with "
          "`net.sd.redirect=1` (bench/apps).  Speedup is sdrun over TCP: for a "
          "rate sdrun/TCP, for a latency TCP/sdrun.  Guest figures: TCG makes "
          "TCP's system calls dearer than on hardware.", ""]
    if rows:
        md += ["| program | test | metric | TCP | sdrun | speedup | p50 TCP | p50 sdrun |",
               "|---|---|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            p50 = (f"{r['p50_ms_tcp']:.3f} ms | {r['p50_ms_sdrun']:.3f} ms"
                   if "p50_ms_tcp" in r else "- | -")
            md.append(f"| {r['app']} | {r['test']} | {r['metric']} | "
                      f"{r['tcp']:.1f} | {r['sdrun']:.1f} | {r['speedup']:.2f}x | {p50} |")
    for f in failed:
        md.append(f"- {f['app']} ({f['mode']}): failed: {f['failed']}")
    return md + [""]


def fast_path(trace_files):
    """What the libsd probe's trace says: data calls seen and handled."""
    if not trace_files:
        return None
    asked = handled = 0
    by_call = {}
    for f in trace_files:
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue
            _, name, a, h = parts
            c = by_call.setdefault(name, [0, 0])
            c[0] += int(a)
            c[1] += int(h)
            if name in DATA_CALLS:
                asked += int(a)
                handled += int(h)
    return {"enabled": handled > 0, "data_calls_hooked": asked,
            "data_calls_handled": handled,
            "by_call": {k: {"hooked": v[0], "handled": v[1]}
                        for k, v in sorted(by_call.items())}}


def collect(lines):
    meta, records, skipped = {}, {}, []
    for d in lines:
        if "meta" in d:
            m = d["meta"]
            meta.setdefault(m.get("where", "?"), {}).update(
                {k: v for k, v in m.items() if k != "where"})
            continue
        if is_large(d):                 # large_messages()
            continue
        if "skipped" in d or "failed" in d:
            skipped.append(d)
            continue
        if "@" in d["transport"]:       # a paired round: pairs()
            continue
        if d.get("test") == "count":    # instruction_counts()
            continue
        key = (d["where"], d["transport"], d["size"])
        r = records.setdefault(key, {"where": d["where"], "transport": d["transport"],
                                     "via": d["via"], "size": d["size"]})
        if d["test"] == "pingpong":
            r.update(rtt_us_median=d["rtt_us_median"], rtt_us_p99=d["rtt_us_p99"],
                     rtt_us_min=d["rtt_us_min"], round_trips=d["round_trips"])
        else:
            r.update(msgs_per_s=d["msgs_per_s"], mb_per_s=d["mb_per_s"],
                     stream_msgs=d["msgs"])
    return meta, records, skipped


# The targets of the performance issue, the paper's figures: at 8 bytes,
# a round trip within 1.2x of the raw ring's and a throughput of at least
# 85 % of it; and, counted rather than timed, at most 1.3x the ring's
# instructions per send and receive.
RTT_TARGET = 1.2
TPUT_TARGET = 0.85
INSTR_TARGET = 1.3


def instruction_counts(lines):
    """Instructions per 8-byte send and receive (bench/guest: sdbench's
    count test under callgrind) of the raw ring (shm) and of libsd, and
    libsd's over the ring's; None unless both were counted."""
    per = {}
    for d in lines:
        if (d.get("test") == "count" and d.get("instructions") and
                d.get("iterations") and "failed" not in d):
            per[d["transport"]] = d["instructions"] / d["iterations"]
    if "shm" not in per or "libsd" not in per:
        return None
    ratio = per["libsd"] / per["shm"]
    return {"size": 8, "shm": per["shm"], "libsd": per["libsd"], "ratio": ratio,
            "target": INSTR_TARGET, "met": ratio <= INSTR_TARGET}


def instructions_md(c):
    if not c:
        return []
    return ["## Target: instructions per 8-byte send and receive (callgrind)", "",
            "One process sends 8 bytes on one end and receives them on the other, "
            "20,000 times, never waiting (`sdbench --tests count`); callgrind counts "
            "the user-space instructions, the same on any machine.", "",
            *table(["path", "instructions per send + receive"],
                   [["shm ring", f"{c['shm']:.0f}"], ["libsd", f"{c['libsd']:.0f}"]]),
            "",
            f"libsd takes **{c['ratio']:.2f}×** the ring's instructions (target ≤ "
            f"{INSTR_TARGET}×: {'met' if c['met'] else 'not met'}).", ""]


def pairs(lines):
    """The paired rounds (labels shm@N and libsd@N): per round, libsd's round
    trip and throughput over the ring's, and their medians."""
    rounds = {}
    for d in lines:
        if ("meta" in d or is_large(d) or "test" not in d or "skipped" in d or
                "failed" in d or "@" not in d.get("transport", "")):
            continue
        base, _, n = d["transport"].partition("@")
        r = rounds.setdefault(int(n), {}).setdefault(base, {})
        if d["test"] == "pingpong":
            r["rtt_us_median"] = d["rtt_us_median"]
        else:
            r["msgs_per_s"] = d["msgs_per_s"]
    rows = []
    for n in sorted(rounds):
        a, b = rounds[n].get("libsd", {}), rounds[n].get("shm", {})
        if not (a.get("rtt_us_median") and b.get("rtt_us_median") and
                a.get("msgs_per_s") and b.get("msgs_per_s")):
            continue
        rows.append({"round": n, "shm": b, "libsd": a,
                     "rtt_ratio": a["rtt_us_median"] / b["rtt_us_median"],
                     "tput_ratio": a["msgs_per_s"] / b["msgs_per_s"]})
    if not rows:
        return None
    rtt = statistics.median(r["rtt_ratio"] for r in rows)
    tput = statistics.median(r["tput_ratio"] for r in rows)
    return {"size": 8, "rounds": rows, "rtt_ratio_median": rtt,
            "tput_ratio_median": tput,
            "rtt_target": RTT_TARGET, "tput_target": TPUT_TARGET,
            "rtt_met": rtt <= RTT_TARGET, "tput_met": tput >= TPUT_TARGET}


def targets_md(t):
    if not t:
        return []
    md = ["## Targets: libsd against the raw ring, 8 B, paired rounds (guest)", "",
          "Each round measures the shm ring and libsd one after the other; the "
          "ratio of each round compares points taken under the same conditions, "
          "and the verdict uses the median ratio.", ""]
    rows = [[str(r["round"]), us(r["shm"]["rtt_us_median"]),
             us(r["libsd"]["rtt_us_median"]), f"{r['rtt_ratio']:.2f}×",
             si(r["shm"]["msgs_per_s"]) + "/s", si(r["libsd"]["msgs_per_s"]) + "/s",
             f"{100 * r['tput_ratio']:.0f} %"] for r in t["rounds"]]
    md += table(["round", "shm RTT µs", "libsd RTT µs", "RTT ratio", "shm msg/s",
                 "libsd msg/s", "libsd / shm"], rows) + [""]
    md += [f"Median round-trip ratio **{t['rtt_ratio_median']:.2f}×** "
           f"(target ≤ {RTT_TARGET}×: {'met' if t['rtt_met'] else 'not met'}); "
           f"median throughput **{100 * t['tput_ratio_median']:.0f} %** of the ring "
           f"(target ≥ {100 * TPUT_TARGET:.0f} %: "
           f"{'met' if t['tput_met'] else 'not met'}).  How to find where the "
           "time goes: Documentation/bench.rst, \"Reading the results\".", ""]
    return md


# Large messages (sdbench --malloc): one-way streams of 16 KiB to 8 MiB
# messages between malloc'd buffers; AF_SD through libsd with zero copy on
# and off (and both with the sender rewriting its buffer before each send),
# against the shm ring, AF_UNIX and TCP.  Documentation/bench.rst.
LARGE_ORDER = ["libsd-zc", "libsd-zc-rewrite", "libsd-copy", "libsd-copy-rewrite",
               "shm", "unix", "tcp"]
LARGE_NAMES = {
    "libsd-zc": "libsd, zero copy",
    "libsd-zc-rewrite": "libsd, zero copy, sender rewrites",
    "libsd-copy": "libsd, copy path (SD_ZEROCOPY=0)",
    "libsd-copy-rewrite": "libsd, copy path, sender rewrites",
    "shm": "shm ring (copy ceiling)",
    "unix": "AF_UNIX",
    "tcp": "TCP loopback",
}
# The targets of the zero-copy issue, guest figures at 1 MiB.
ZC_SIZE = 1 << 20
ZC_OVER_COPY_TARGET = 3.0
ZC_OVER_TCP_TARGET = 10.0
# The module's counters (enum sd_stat) that zero copy moves; sdctl names
# them without the SD_STAT_ prefix, or stat_N when it does not know them.
ZC_COUNTERS = {"zc_sends": 20, "zc_pages": 21, "zc_remapped": 22,
               "zc_copied": 23, "zc_cow": 24}
# Ratios of the large-message table: (name, numerator, denominator).
LARGE_RATIOS = [
    ("zero copy ÷ copy path", "libsd-zc", "libsd-copy"),
    ("zero copy ÷ TCP", "libsd-zc", "tcp"),
    ("zero copy ÷ AF_UNIX", "libsd-zc", "unix"),
    ("zero copy ÷ shm ring", "libsd-zc", "shm"),
    ("copy path ÷ shm ring", "libsd-copy", "shm"),
    ("rewriting: zero copy ÷ copy path", "libsd-zc-rewrite", "libsd-copy-rewrite"),
]


def is_large(d):
    return d.get("buffers") == "malloc"


def counter_delta(rec):
    """The zero-copy counters' increase over one run (None: not known)."""
    c = rec.get("zc_counters") or {}
    before, after = c.get("before"), c.get("after")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return None
    out = {}
    for name, num in ZC_COUNTERS.items():
        for key in (name, f"stat_{num}"):
            if key in before and key in after:
                out[name] = after[key] - before[key]
                break
    return out or None


def large_messages(lines, fp):
    """Records, ratios, counters and the 1 MiB targets of the large-message
    rows, or None when there are none."""
    lines = [d for d in lines if "meta" not in d and is_large(d)]
    if not lines:
        return None
    records, counters, skipped, rounds = {}, {}, [], {}
    for d in lines:
        if "zc_counters" in d:
            counters[d["transport"]] = counter_delta(d)
        elif "skipped" in d or "failed" in d:
            skipped.append(d)
        elif d.get("test") != "stream":
            continue
        elif "@" in d["transport"]:
            base, _, n = d["transport"].partition("@")
            rounds.setdefault(int(n), {})[base] = d["msgs_per_s"]
        else:
            records[(d["where"], d["transport"], d["size"])] = {
                "where": d["where"], "transport": d["transport"], "via": d["via"],
                "size": d["size"], "rewrite": d.get("rewrite", False),
                "malloc_aligned": d.get("malloc_aligned"),
                "msgs_per_s": d["msgs_per_s"], "mb_per_s": d["mb_per_s"],
                "gb_per_s": round(d["mb_per_s"] / 1e3, 4), "msgs": d["msgs"],
                "seconds": d["seconds"]}

    # What each row really measured: the fast path (libsd rows), the pool
    # (malloc gave whole pages under sdrun) and the zero-copy counters.
    notes = {}
    for t in {k[1] for k in records}:
        if not t.startswith("libsd"):
            continue
        n = []
        if fp is None:
            n.append("fast-path status unknown (no probe trace)")
        elif not fp["enabled"]:
            n.append("fast path not yet enabled (AF_SD system calls)")
        zc = t.startswith("libsd-zc")
        # With SD_ZEROCOPY=0 there is no pool: glibc's malloc, as meant.
        if zc and any(r["malloc_aligned"] is False
                      for k, r in records.items() if k[1] == t):
            n.append("malloc gave no whole pages (no pool memory)")
        c = counters.get(t)
        if c is None or "zc_sends" not in c:
            n.append("zero-copy counters unavailable")
        elif zc and c["zc_sends"] == 0:
            n.append("no pages handed over: zero copy not in effect")
        elif not zc and c["zc_sends"]:
            n.append(f"{c['zc_sends']} zero-copy sends although SD_ZEROCOPY=0")
        if n:
            notes[t] = "; ".join(n)

    results = []
    for key in sorted(records, key=lambda k: (k[0], large_rank(k[1]), k[2])):
        r = dict(records[key])
        r["name"] = LARGE_NAMES.get(r["transport"], r["transport"])
        if r["transport"] in notes:
            r["note"] = notes[r["transport"]]
        results.append(r)

    ratios = []
    for where in ("guest", "host"):
        for name, a, b in LARGE_RATIOS:
            row = {}
            for (w, t, size), r in records.items():
                other = records.get((w, b, size))
                if w == where and t == a and other:
                    row[size] = r["msgs_per_s"] / other["msgs_per_s"]
            if row:
                ratios.append({"where": where, "ratio": name, "of": a, "over": b,
                               "by_size": {str(k): round(v, 3)
                                           for k, v in sorted(row.items())}})

    return {"sizes": sorted({k[2] for k in records}), "results": results,
            "ratios": ratios, "zc_counters": counters, "notes": notes,
            "targets": zc_targets(rounds, records), "skipped": skipped}


def large_rank(t):
    return (LARGE_ORDER.index(t) if t in LARGE_ORDER else len(LARGE_ORDER), t)


def zc_targets(rounds, records):
    """At 1 MiB: zero copy over the copy path and over TCP, per paired round
    (labels libsd-zc@N, libsd-copy@N, tcp@N) and their medians; without
    rounds, from the guest's sweep."""
    rows = []
    for n in sorted(rounds):
        r = rounds[n]
        if r.get("libsd-zc") and r.get("libsd-copy") and r.get("tcp"):
            rows.append({"round": n, "libsd-zc": r["libsd-zc"],
                         "libsd-copy": r["libsd-copy"], "tcp": r["tcp"],
                         "zc_over_copy": round(r["libsd-zc"] / r["libsd-copy"], 3),
                         "zc_over_tcp": round(r["libsd-zc"] / r["tcp"], 3)})
    source = "rounds"
    if not rows:
        g = {t: records.get(("guest", t, ZC_SIZE), {}).get("msgs_per_s")
             for t in ("libsd-zc", "libsd-copy", "tcp")}
        if not all(g.values()):
            return None
        rows = [{"round": 0, **g,
                 "zc_over_copy": round(g["libsd-zc"] / g["libsd-copy"], 3),
                 "zc_over_tcp": round(g["libsd-zc"] / g["tcp"], 3)}]
        source = "sweep"
    copy = statistics.median(r["zc_over_copy"] for r in rows)
    tcp = statistics.median(r["zc_over_tcp"] for r in rows)
    return {"size": ZC_SIZE, "from": source, "rounds": rows,
            "zc_over_copy_median": copy, "zc_over_tcp_median": tcp,
            "zc_over_copy_target": ZC_OVER_COPY_TARGET,
            "zc_over_tcp_target": ZC_OVER_TCP_TARGET,
            "zc_over_copy_met": copy >= ZC_OVER_COPY_TARGET,
            "zc_over_tcp_met": tcp >= ZC_OVER_TCP_TARGET}


def large_md(lg, meta):
    if not lg:
        return []
    md = ["## Large messages and zero copy", "",
          f"**Targets (guest figures, {size_name(ZC_SIZE)} messages): zero copy ≥ "
          f"{ZC_OVER_COPY_TARGET:g}× the copy path (libsd with SD_ZEROCOPY=0) and "
          f"≥ {ZC_OVER_TCP_TARGET:g}× TCP loopback.**", "",
          "One-way stream: the sender sends one page-aligned malloc'd buffer of the "
          "size again and again (\"sender rewrites\": after a memset of all of it, "
          "so the copy-on-write cost shows), the receiver takes each message whole "
          "into a page-aligned malloc'd buffer of the size.  libsd rows run under "
          "sdrun (malloc'd buffers are pool memory), the others plain.  GB/s "
          "(10^9 bytes) and messages per second.  The host rows are the copy path "
          "measured natively, without the module.", ""]
    g = meta.get("guest", {})
    zct = g.get("zerocopy_threshold")
    if zct == 0:
        md += ["**Guest net.sd.zerocopy_threshold is 0: zero copy was off for "
               "every process.**", ""]
    elif zct is not None:
        md += [f"Guest net.sd.zerocopy_threshold: {zct} bytes.", ""]
    for t, note in sorted(lg["notes"].items(), key=lambda x: large_rank(x[0])):
        md += [f"**{LARGE_NAMES.get(t, t)}: ⚠ {note}.**", ""]
    for t, c in sorted(lg["zc_counters"].items(), key=lambda x: large_rank(x[0])):
        if c:
            md += [f"- {LARGE_NAMES.get(t, t)}: module counters over the run: " +
                   ", ".join(f"{k} {v}" for k, v in c.items())]
    if any(lg["zc_counters"].values()):
        md += [""]

    sizes = lg["sizes"]
    head = ["where", "transport"] + [size_name(s) for s in sizes]
    by = {(r["where"], r["transport"], r["size"]): r for r in lg["results"]}
    rows = []
    for where in ("guest", "host"):
        for t in sorted({k[1] for k in by if k[0] == where}, key=large_rank):
            name = LARGE_NAMES.get(t, t) + (" ⚠" if t in lg["notes"] else "")
            row = [where, name]
            for s in sizes:
                r = by.get((where, t, s))
                row.append(f"{r['gb_per_s']:.3g} ({si(r['msgs_per_s'])}/s)" if r else "–")
            rows.append(row)
    md += [f"### One-way throughput, GB/s (messages/s); target at "
           f"{size_name(ZC_SIZE)}, guest: zero copy ≥ {ZC_OVER_COPY_TARGET:g}× copy "
           f"path, ≥ {ZC_OVER_TCP_TARGET:g}× TCP", ""]
    md += table(head, rows, left=2) + [""]

    rows = []
    for r in lg["ratios"]:
        row = [r["where"], r["ratio"]]
        for s in sizes:
            v = r["by_size"].get(str(s))
            row.append(f"{v:.3g}×" if v else "–")
        rows.append(row)
    if rows:
        md += [f"### Ratios (messages/s; target at {size_name(ZC_SIZE)}, guest: "
               f"zero copy ÷ copy path ≥ {ZC_OVER_COPY_TARGET:g}×, zero copy ÷ TCP ≥ "
               f"{ZC_OVER_TCP_TARGET:g}×)", ""]
        md += table(["where", "ratio"] + [size_name(s) for s in sizes], rows,
                    left=2) + [""]

    t = lg["targets"]
    if t:
        if t["from"] == "rounds":
            md += [f"Paired rounds at {size_name(t['size'])} (guest): each round "
                   "measures zero copy, the copy path and TCP one after the other; "
                   "the verdict uses the median ratios.", ""]
            md += table(["round", "zero copy msg/s", "copy path msg/s", "TCP msg/s",
                         "zc ÷ copy", "zc ÷ TCP"],
                        [[str(r["round"]), si(r["libsd-zc"]) + "/s",
                          si(r["libsd-copy"]) + "/s", si(r["tcp"]) + "/s",
                          f"{r['zc_over_copy']:.2f}×", f"{r['zc_over_tcp']:.2f}×"]
                         for r in t["rounds"]]) + [""]
        else:
            md += [f"No paired rounds: the verdict uses the sweep's "
                   f"{size_name(t['size'])} points.", ""]
        md += [f"Zero copy ÷ copy path **{t['zc_over_copy_median']:.2f}×** (target ≥ "
               f"{ZC_OVER_COPY_TARGET:g}×: {'met' if t['zc_over_copy_met'] else 'not met'}); "
               f"zero copy ÷ TCP **{t['zc_over_tcp_median']:.2f}×** (target ≥ "
               f"{ZC_OVER_TCP_TARGET:g}×: {'met' if t['zc_over_tcp_met'] else 'not met'})"
               + ("; ⚠ see the notes above: these are not zero-copy figures"
                  if "libsd-zc" in lg["notes"] else "") + ".", ""]
    for d in lg["skipped"]:
        what = "Failed" if "failed" in d else "Skipped"
        md += [f"**{what}: {d['where']} {d['transport']} (large messages): "
               f"{d.get('failed', d.get('skipped'))}**", ""]
    return md


def size_name(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def si(x):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def us(x):
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def transport_name(t, fp):
    if t == "libsd" and not (fp and fp["enabled"]):
        return "libsd ⚠ fast path not yet enabled (= AF_SD syscalls)"
    return NAMES.get(t, t)


def rank(t):
    return (ORDER.index(t) if t in ORDER else len(ORDER), t)


def ordered(transports):
    return sorted(transports, key=rank)


def table(head, rows, left=1):
    """A markdown table, its first left columns aligned left, the rest right."""
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i < left else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def where_title(where, meta):
    m = meta.get(where, {})
    if where == "guest":
        accel = m.get("accel", "unknown").upper()
        return (f"Guest: QEMU {accel}, {m.get('vcpus', '?')} vCPUs, "
                f"kernel {m.get('kernel', '?')}, af_sd.ko loaded")
    return (f"Host: natively, no module, {m.get('cpus', '?')} CPUs "
            f"({m.get('cpu_model', '?')}), kernel {m.get('kernel', '?')}")


# The first line of a kept run (--keep).
KEEP_NOTICE = ("*Generated by `make bench` (bench/report.py) from the raw lines of "
               "one run: do not edit by hand.  Documentation/bench.rst, "
               "\"Keeping a run\".*")


def place_name(s):
    """s as a part of a file name: letters, digits, '.', '_' and '-'."""
    s = re.sub(r"[^A-Za-z0-9._-]", "_", (s or "").strip()).strip("._")
    return s or "unknown"


def git_describe():
    try:
        out = subprocess.run(["git", "-C", str(TOP), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def cpu_model():
    """This machine's processor: /proc/cpuinfo's first "model name"."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_info(meta, rm, generated):
    """What the run was, for the header: the meta line of bench/run (where
    "run": date, place, commit), sdbench's (kernel, processor), bench/run's
    guest and pair lines (accelerator, vCPUs, memory); what they lack is
    taken from this machine and tree now."""
    run, g, h = (meta.get(k, {}) for k in ("run", "guest", "host"))
    p = (rm or {}).get("meta", {})
    date = str(run.get("date") or generated)
    day = date[:10] if re.fullmatch(r"\d{4}-\d{2}-\d{2}", date[:10]) else generated[:10]
    place = place_name(os.environ.get("SD_BENCH_PLACE") or run.get("place")
                       or socket.gethostname().split(".")[0])
    host_kernel = h.get("kernel") or platform.release()
    guest_kernel = g.get("kernel") or p.get("kernel")
    kernel = (f"{guest_kernel} (guest); host {host_kernel}" if guest_kernel
              else f"{host_kernel} (host)")
    cpus = h.get("cpus") or os.cpu_count()
    cpu = f"{h.get('cpu_model') or cpu_model()}, {cpus} CPUs"
    accel = []
    for what, m in (("guest", g), ("pair, per guest", p)):
        if m.get("accel"):
            accel.append(f"{m['accel']}, {m.get('vcpus', '?')} vCPUs, "
                         f"{m.get('memory', '?')} memory ({what})")
    return {"commit": run.get("commit") or git_describe(), "date": date, "day": day,
            "place": place, "kernel": kernel, "cpu": cpu,
            "accelerator": "; ".join(accel) or "none (no guest in this run)"}


def header_md(info):
    return [f"- commit: `{info['commit']}`", f"- date: {info['date']}",
            f"- place: {info['place']}", f"- kernel: {info['kernel']}",
            f"- CPU: {info['cpu']}", f"- accelerator: {info['accelerator']}", ""]


def markdown(meta, records, skipped, fp, generated, info, targets=None,
             large=None, instructions=None):
    md = [f"# AF_SD benchmark: {info['day']}, {info['place']}", "",
          f"Generated {generated} by `make bench` (bench/run, bench/report.py); "
          "see Documentation/bench.rst.", ""]
    md += header_md(info)
    g = meta.get("guest", {})
    accel = g.get("accel", "unknown").upper()
    # A run of the host part alone (sdbench by hand) has no guest to warn
    # of, and no libsd.
    if g or any(k[0] == "guest" for k in records):
        md += [f"**The guest figures are guest ({accel}) figures.** Under TCG every "
               "system call costs several times what it costs on hardware while "
               "user-space memory traffic does not, so a ratio against a kernel path "
               "flatters AF_SD and libsd in the guest; the ratio against the raw "
               "shared-memory queue is the honest one.  The host section measures the "
               "same ring code natively (no module) against AF_UNIX and TCP.", ""]
        if fp is None:
            md += ["libsd: no probe trace, fast-path status unknown.", ""]
        elif not fp["enabled"]:
            md += [f"**libsd: {NOT_ENABLED}.**  The probe run under sdrun reached the "
                   f"shim's data hooks {fp['data_calls_hooked']} times and they "
                   f"handled {fp['data_calls_handled']}.  The libsd rows below are "
                   "therefore not libsd results; they show that the shim adds no "
                   "measurable cost to the system-call path.", ""]
        else:
            md += [f"libsd: fast path enabled (the probe's data hooks handled "
                   f"{fp['data_calls_handled']} of {fp['data_calls_hooked']} calls).",
                   ""]
    md += targets_md(targets)
    md += instructions_md(instructions)
    md += ["Round trip: a message of the size goes to the peer process, which sends "
           "it back; median (p99 in parentheses), in microseconds.  Throughput: one "
           "process sends messages of the size for the whole time, the other reads "
           "them; messages per second (MB/s in parentheses, 1 MB = 10^6 bytes).", ""]

    for where in ("guest", "host"):
        recs = {k: v for k, v in records.items() if k[0] == where}
        if not recs:
            continue
        m = meta.get(where, {})
        transports = ordered({k[1] for k in recs})
        sizes = sorted({k[2] for k in recs})
        md += [f"## {where_title(where, meta)}", ""]
        md += [f"{m.get('seconds_per_point', '?')} s per point, peers pinned to two "
               f"CPUs: {m.get('pinned', '?')}, shm ring {m.get('ring_size', '?')} bytes, "
               f"load average at the start {m.get('loadavg', '?')}.", ""]
        head = ["transport"] + [size_name(s) for s in sizes]

        rows = []
        for t in transports:
            row = [transport_name(t, fp)]
            for s in sizes:
                r = recs.get((where, t, s), {})
                row.append(f"{us(r['rtt_us_median'])} ({us(r['rtt_us_p99'])})"
                           if "rtt_us_median" in r else "–")
            rows.append(row)
        md += ["### Round trip, µs: median (p99)", ""] + table(head, rows) + [""]

        rows = []
        for t in transports:
            row = [transport_name(t, fp)]
            for s in sizes:
                r = recs.get((where, t, s), {})
                row.append(f"{si(r['msgs_per_s'])}/s ({r['mb_per_s']:.4g})"
                           if "msgs_per_s" in r else "–")
            rows.append(row)
        md += ["### One-way throughput: messages/s (MB/s)", ""] + table(head, rows) + [""]

        md += ["### Ratios", "",
               "Round trip: transport ÷ reference (below 1 is faster than the "
               "reference).  Throughput: transport ÷ reference (above 1 is more "
               "messages per second).", ""]
        for ref in REFS:
            if ref not in transports:
                continue
            others = [t for t in transports if t != ref]
            if not others:
                continue
            for metric, label in (("rtt_us_median", "Round trip"),
                                  ("msgs_per_s", "Throughput")):
                rows = []
                for t in others:
                    row = [transport_name(t, fp)]
                    for s in sizes:
                        a = recs.get((where, t, s), {}).get(metric)
                        b = recs.get((where, ref, s), {}).get(metric)
                        row.append(f"{a / b:.3g}×" if a and b else "–")
                    rows.append(row)
                md += [f"{label} relative to {NAMES[ref]}:", ""] + table(head, rows) + [""]

    md += large_md(large, meta)

    for d in skipped:
        if "failed" in d:
            md += [f"**Failed: {d['where']} {d['transport']}: {d['failed']}** "
                   "(the points before the failure are in the tables).", ""]
        else:
            md += [f"Skipped: {d['where']} {d['transport']}: {d['skipped']}."]
    if skipped:
        md += [""]
    return "\n".join(md) + "\n"


def plot(records, fp, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: no matplotlib (apt-get install python3-matplotlib): "
              "results.png not written", file=sys.stderr)
        return False
    wheres = [w for w in ("guest", "host") if any(k[0] == w for k in records)]
    fig, axes = plt.subplots(len(wheres), 2, figsize=(12, 4.5 * len(wheres)),
                             squeeze=False)
    for row, where in enumerate(wheres):
        recs = {k: v for k, v in records.items() if k[0] == where}
        for t in ordered({k[1] for k in recs}):
            pts = sorted((k[2], v) for k, v in recs.items() if k[1] == t)
            label = transport_name(t, fp)
            style = "--" if t == "libsd" else "-"
            for col, metric in enumerate(("rtt_us_median", "mb_per_s")):
                xs = [s for s, v in pts if metric in v]
                ys = [v[metric] for s, v in pts if metric in v]
                if xs:
                    axes[row][col].plot(xs, ys, style, marker="o", label=label,
                                        color=COLORS.get(t))
        for col, (title, unit) in enumerate((("round trip, median", "µs"),
                                             ("one-way throughput", "MB/s"))):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(unit)
            ax.set_title(f"{where}: {title}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ---- Between hosts (bench/remote, issue #7) --------------------------------

def is_pair(d):
    return d.get("where") == "pair" or d.get("meta", {}).get("where") == "pair"


REMOTE_ORDER = ["sd-rdma", "sd-rdma-poll", "sd-rdma-proto", "rdma-write",
                "rsocket", "rsocket-poll", "sd-fallback", "tcp"]
REMOTE_NAMES = {
    "sd-rdma": "AF_SD over RDMA",
    "sd-rdma-poll": "AF_SD over RDMA, busy-polling",
    "sd-rdma-proto": "libsd's ring over RDMA, prototype",
    "rdma-write": "raw RDMA write",
    "rsocket": "rsocket",
    "rsocket-poll": "rsocket, busy-polling",
    "sd-fallback": "AF_SD under sdrun, TCP fallback",
    "tcp": "TCP",
}
REMOTE_HOW = {
    "sd-rdma": "sockperf under sdrun, sdlinkd on both guests",
    "sd-rdma-poll": "the same with SD_SPIN_US",
    "rsocket-poll": "the same with polling_time",
    "sd-rdma-proto": "sd_rdma_pipe, no module, 64 B round trips",
    "rdma-write": "perftest ib_write_lat, ib_write_bw",
    ("rsocket", "sockperf"): "sockperf, LD_PRELOAD=librsfix.so librspreload.so",
    ("rsocket", "rstream"): "rstream (rdmacm-utils), blocking",
    "sd-fallback": "sockperf under sdrun, B's sdlinkd --no-rdma",
    "tcp": "sockperf",
}
# The link daemons' counts per message that bench/remote records for the
# sd rows (both daemons together), and per payload byte for a throughput.
DAEMON_PER_MSG = ("writes_per_msg", "copies_per_msg", "wakes_per_msg",
                  "syscalls_per_msg", "sleeps_per_msg", "writes_per_byte",
                  "rdma_bytes_per_byte")
# The targets of issue #7 ("Between hosts").
REMOTE_RTT_TARGET = 1.3
SMALL_REMOTE = 64       # bench/remote's SMALL: the round trip's size


def remote_key(d):
    """A row: transport and program (perftest's two programs are one)."""
    t = d["transport"]
    if t == "rdma-write":
        return (t, None)
    return (t, d.get("program"))


def remote_name(key):
    t, prog = key
    how = REMOTE_HOW.get(key) or REMOTE_HOW.get(t) or prog or ""
    return f"{REMOTE_NAMES.get(t, t)} ({how})" if how else REMOTE_NAMES.get(t, t)


def daemon_totals(ds):
    """The link daemons' connections carried, resets, mismatched rings and
    bytes copied, summed over the records ds, per side (None when a
    record has no daemons' counters)."""
    if not all(d.get("daemon_a") and d.get("daemon_b") for d in ds):
        return None
    return {f"{k}_{side}": sum(d[f"daemon_{side}"].get(k, 0) for d in ds)
            for k in ("carried", "resets", "mismatched", "copies") for side in "ab"}


def remote_point(ds):
    """One figure from the records of one row, test and size: the first
    pass's record with the median of every round's value (and the rounds'
    values, in their order, when there were more)."""
    totals = daemon_totals(ds)
    if len(ds) == 1:
        return {**ds[0], "daemon_totals": totals} if totals else ds[0]
    ds = sorted(ds, key=lambda d: d.get("round", 0))
    p = dict(ds[0])
    p["value"] = statistics.median([d["value"] for d in ds])
    p["stat"] = f"median of {len(ds)} rounds' {ds[0].get('stat', 'figures')}"
    p["rounds"] = [{"round": d.get("round", 0), "value": d["value"]} for d in ds]
    if totals:
        p["daemon_totals"] = totals
    for k in ("client_vcsw_per_rt", "client_cpu_us_per_rt", "rtt_us_avg",
              "messages") + DAEMON_PER_MSG:
        if all(k in d for d in ds):
            p[k] = statistics.median([d[k] for d in ds])
    return p


def remote(lines):
    """The inter-host rows, their ratios against raw RDMA write and the
    targets (None without bench/remote lines).  A row measured in several
    rounds (bench/remote's "round") shows the median."""
    lines = [d for d in lines if is_pair(d)]
    if not lines:
        return None
    meta, many, failed = {}, {}, []
    fallback = {}
    for d in lines:
        if "meta" in d:
            meta.update({k: v for k, v in d["meta"].items() if k != "where"})
            continue
        col = (d["test"], d["size"])
        if "not_built" in d:    # runs from before the transport was built
            continue
        if "failed" in d:
            failed.append(d)
            many.setdefault(remote_key(d), {})
            continue
        many.setdefault(remote_key(d), {}).setdefault(col, []).append(d)
        for side in ("a", "b"):
            fb = fallback.setdefault(d["transport"], {"a": {}, "b": {}})
            # module_*: the module's fallback_* and link_* counters that
            # moved; fallback_*: the same in runs before the daemon.
            for k, v in (d.get(f"module_{side}") or d.get(f"fallback_{side}")
                         or {}).items():
                fb[side][k] = fb[side].get(k, 0) + v
    rows = {key: {col: remote_point(ds) for col, ds in cols.items()}
            for key, cols in many.items()}
    cols = sorted({(d["test"], d["size"]) for d in lines if "test" in d},
                  key=lambda c: (c[0] != "pingpong", c[1]))
    ref = rows.get(("rdma-write", None), {})
    results = []
    for key in sorted(rows, key=lambda k: (REMOTE_ORDER.index(k[0])
                                           if k[0] in REMOTE_ORDER else 99,
                                           k[1] or "")):
        r = {"transport": key[0], "program": key[1], "name": remote_name(key),
             "points": {}}
        for test, size in cols:
            d = rows[key].get((test, size))
            if not d:
                continue
            p = {k: v for k, v in d.items()
                 if k not in ("where", "transport", "program", "test", "size")}
            p["program"] = d.get("program")
            b = ref.get((test, size))
            if b and b.get("value"):
                # Round trip: row ÷ RDMA write (below 1 is faster);
                # throughput: row ÷ RDMA write (above 1 is more).
                p["over_rdma_write"] = d["value"] / b["value"]
            r["points"][f"{test}/{size}"] = p
        results.append(r)
    targets = remote_targets(rows, many)
    return {"meta": meta, "columns": [f"{t}/{s}" for t, s in cols],
            "results": results, "failed": failed, "fallback": fallback,
            "targets": targets}


def by_round(many, key, col):
    return {d.get("round", 0): d["value"] for d in many.get(key, {}).get(col, [])}


def rounds_held(many, key, other_key, col, held):
    """key's and other_key's figures at col compared round by round (the
    rounds both have): how many held(mine, other's), and the ratios; None
    with fewer than two such rounds."""
    mine, other = by_round(many, key, col), by_round(many, other_key, col)
    both = sorted(set(mine) & set(other))
    if len(both) < 2:
        return None
    return {"rounds": len(both),
            "held": sum(1 for n in both if other[n] and held(mine[n], other[n])),
            "ratios": [round(mine[n] / other[n], 3) if other[n] else None
                       for n in both]}


def rounds_md(r, what):
    """" (medians of 5 rounds; WHAT in 3 of 5)" for rounds_held()'s r."""
    if not r:
        return ""
    return f" (medians of {r['rounds']} rounds; {what} in {r['held']} of {r['rounds']})"


def remote_targets(rows, many=None):
    """Issue #7's targets from the rows of one run: AF_SD's 64 B round trip
    within REMOTE_RTT_TARGET x raw RDMA write's, and AF_SD above rsocket
    (sockperf through librspreload, the same program) in round trip and in
    64 B message throughput.  Judged on the medians; with rounds (many: the
    records of each row and column), also how many rounds each round-trip
    target held in, comparing the figures of the same round."""
    def value(key, col, field="value"):
        d = rows.get(key, {}).get(col)
        return d.get(field) if d else None
    rtt, small = ("pingpong", SMALL_REMOTE), ("stream", SMALL_REMOTE)
    sd_rtt = value(("sd-rdma", "sockperf"), rtt)
    wr_rtt = value(("rdma-write", None), rtt)
    sd_rate = value(("sd-rdma", "sockperf"), small)
    # rsocket through sockperf when that ran, else rsocket's own rstream.
    rs_prog = "sockperf"
    rs_rtt = value(("rsocket", "sockperf"), rtt)
    rs_rate = value(("rsocket", "sockperf"), small)
    if rs_rtt is None or rs_rate is None:
        rs_prog = "rstream"
        rs_rtt = value(("rsocket", "rstream"), rtt)
        rs_rate = value(("rsocket", "rstream"), small)
    t = {"rtt_within_of_rdma_write": REMOTE_RTT_TARGET,
         "above_rsocket": ["round trip", "message throughput"],
         "rsocket_program": rs_prog,
         "measurable": None not in (sd_rtt, wr_rtt, rs_rtt, sd_rate, rs_rate)}
    def round_trips(sd_key, rs_key):
        """The round-trip targets of sd_key's row against raw RDMA write
        and rs_key's row."""
        r = {}
        sd_rtt, rs_rtt = value(sd_key, rtt), value(rs_key, rtt)
        if sd_rtt and wr_rtt:
            r["rtt_over_rdma_write"] = sd_rtt / wr_rtt
            r["rtt_met"] = sd_rtt <= REMOTE_RTT_TARGET * wr_rtt
        if sd_rtt and rs_rtt:
            r["rtt_over_rsocket"] = sd_rtt / rs_rtt
            r["rtt_below_rsocket"] = sd_rtt < rs_rtt
        if many:
            for name, key, ok in (
                    ("rdma_write", ("rdma-write", None),
                     lambda a, b: a <= REMOTE_RTT_TARGET * b),
                    ("rsocket", rs_key, lambda a, b: a < b)):
                held = rounds_held(many, sd_key, key, rtt, ok)
                if held:
                    r[f"rtt_rounds_{name}"] = held
        return r
    t.update(round_trips(("sd-rdma", "sockperf"), ("rsocket", rs_prog)))
    # Both libraries busy-polling through the round trip, as ib_write_lat
    # does (bench/remote's SD_BENCH_REMOTE_POLL_US): the ceiling's own way
    # of waiting, beside the verdict on each library's default.
    polling = round_trips(("sd-rdma-poll", "sockperf"), ("rsocket-poll", "sockperf"))
    if polling:
        t["polling"] = polling
    # The means, beside the verdict (which is the medians'): a program that
    # busy-polls, as ib_write_lat does, has its slow round trips in a tail
    # that the median does not see (Documentation/bench.rst, "Between
    # hosts").
    sd_mean = value(("sd-rdma", "sockperf"), rtt, "rtt_us_avg")
    for name, key in (("rdma_write", ("rdma-write", None)),
                      ("rsocket", ("rsocket", rs_prog))):
        other = value(key, rtt, "rtt_us_avg")
        if sd_mean and other:
            t[f"rtt_mean_over_{name}"] = sd_mean / other
    if sd_rate and rs_rate:
        t["rate_over_rsocket"] = sd_rate / rs_rate
        t["rate_above_rsocket"] = sd_rate > rs_rate
    held = many and rounds_held(many, ("sd-rdma", "sockperf"), ("rsocket", rs_prog),
                                small, lambda a, b: a > b)
    if held:
        t["rate_rounds_rsocket"] = held
    return t


def verdict(ok):
    return "met" if ok else "NOT met"


def round_trips_md(t, program):
    """The round-trip targets' part of remote_targets_md, for the
    defaults (t) or busy-polling (t["polling"])."""
    def rounds(name, what):
        return rounds_md(t.get(f"rtt_rounds_{name}"), what)
    parts = []
    if "rtt_met" in t:
        parts.append(f"round trip {t['rtt_over_rdma_write']:.3g}× raw RDMA write"
                     f"{rounds('rdma_write', f'within {REMOTE_RTT_TARGET:g}×')}: "
                     f"{verdict(t['rtt_met'])}")
    else:
        parts.append("round trip against raw RDMA write: not measured")
    if "rtt_below_rsocket" in t:
        parts.append(f"round trip {t['rtt_over_rsocket']:.3g}× rsocket's "
                     f"({program}){rounds('rsocket', 'below it')}: "
                     f"{verdict(t['rtt_below_rsocket'])}")
    else:
        parts.append("round trip against rsocket: not measured")
    return parts


def remote_targets_md(t):
    parts = round_trips_md(t, t["rsocket_program"])
    if "rate_above_rsocket" in t:
        held = rounds_md(t.get("rate_rounds_rsocket"), "above it")
        parts.append(f"64 B messages {t['rate_over_rsocket']:.3g}× rsocket's rate "
                     f"({t['rsocket_program']}){held}: "
                     f"{verdict(t['rate_above_rsocket'])}")
    else:
        parts.append("message rate against rsocket: not measured")
    if t.get("polling"):
        parts.append("both libraries busy-polling: " +
                     ", ".join(round_trips_md(t["polling"], "sockperf")))
    return "; ".join(parts)


def g3(x):
    return "–" if x is None else f"{x:.3g}"


def daemon_counts_md(rm):
    """The table of the link daemons' counts per message (and per byte),
    for the rows that have them."""
    rows = []
    for r in rm["results"]:
        for c in rm["columns"]:
            p = r["points"].get(c)
            if not p or not p.get("daemon_totals"):
                continue
            test, size = c.split("/")
            t = p["daemon_totals"]
            rows.append([
                r["name"],
                f"{'round trip' if test == 'pingpong' else 'throughput'} "
                f"{size_name(int(size))}",
                str(round(p["messages"])) if "messages" in p else "–",
                g3(p.get("writes_per_msg")),
                g3(p.get("writes_per_byte")),
                g3(p.get("rdma_bytes_per_byte")),
                g3(p.get("copies_per_msg")),
                g3(p.get("wakes_per_msg")),
                g3(p.get("syscalls_per_msg")),
                g3(p.get("sleeps_per_msg")),
                f"{t['carried_a']}, {t['carried_b']}",
                f"{t['resets_a']}, {t['resets_b']}"])
    if not rows:
        return []
    return ["The link daemons' counts (sdlinkd --verbose, its counters at exit; "
            "both daemons together), per message of sockperf's run (its messages "
            "sent, and for a round trip the replies, warm-up included): RDMA "
            "writes posted (data, credit and control), bytes a CPU copied, "
            "wake-up system calls for the programs (SD_IOC_WAKE), other system "
            "calls on carried sockets, and the daemons' sleeps with a carried "
            "connection open; for a throughput also RDMA writes and RDMA bytes "
            "per payload byte.  They do not depend on the emulator's speed; "
            "with rounds, the medians of the rounds, and the connections and "
            "resets summed over them.  A dash: the row's connection was not "
            "carried.", ""] + table(
        ["transport", "test", "messages", "RDMA writes/msg", "writes/byte",
         "RDMA bytes/byte", "bytes copied/msg", "wake-ups/msg", "other syscalls/msg",
         "sleeps/msg", "carried (A, B)", "resets (A, B)"], rows, left=2) + [""]


def remote_md(rm, meta):
    if not rm:
        return []
    m = rm["meta"]
    pm = meta.get("pair", {})
    accel = (pm.get("accel") or m.get("accel") or "tcg").upper()
    md = ["## Between hosts (two guests, TCG, soft-RoCE)", "",
          f"**Targets (issue #7): AF_SD round trip within {REMOTE_RTT_TARGET:g}× of "
          "raw RDMA write; AF_SD above rsocket in round trip and in message "
          "throughput.  In this run (guest figures): "
          f"{remote_targets_md(rm['targets'])}.**", "",
          f"Two QEMU guests ({accel}, kernel {m.get('kernel', '?')}) joined by a "
          "QEMU stream link (a Unix socket of the host), each with af_sd.ko and "
          "a soft-RoCE device "
          f"({m.get('device', 'rxe0')}) on its NIC (tests/vm/pair --rdma, "
          "bench/remote): the client runs in guest A "
          f"({m.get('local', '10.77.0.1')}), the server in guest B "
          f"({m.get('remote', '10.77.0.2')}).  **These are guest figures: TCG "
          "emulates every instruction and rxe does RDMA in the guests' kernels, "
          "so read them only as ratios within this run, never as RDMA or network "
          "speeds.**", "",
          "Round trip: median, µs (sockperf --full-rtt; ib_write_lat: twice "
          "t_typical, which is half the round trip; rstream: twice usec/xfer, a "
          "mean).  Throughput: one-way messages per second (MB/s).  Each ratio "
          "is the row ÷ raw RDMA write at the same test and size: for the round "
          "trip below 1 is faster, for throughput above 1 is more.", ""]
    pin = m.get("pin_cpu")
    if pin == "off":
        md += ["The programs ran wherever each guest's scheduler put them "
               "(SD_BENCH_REMOTE_PIN=off).", ""]
    elif pin is not None:
        if m.get("throughput_pinned") is False:
            md += [f"Every program that measured a round trip, client and server, "
                   f"ran on processor {pin} of its guest, which also took the "
                   "interrupts of the guest's network queues (SD_BENCH_REMOTE_PIN); "
                   "the throughputs ran where the guests' schedulers put them.", ""]
        else:
            md += [f"Every program measured, client and server, ran on processor "
                   f"{pin} of its guest, which also took the interrupts of the "
                   "guest's network queues (SD_BENCH_REMOTE_PIN).", ""]
    if any(r["transport"].startswith("sd-rdma") or r["transport"] == "sd-fallback"
           for r in rm["results"]):
        md += ["AF_SD rows: each measurement has a link daemon (sdlinkd) of its own "
               "on each guest, with the same fabric key: AF_SD over RDMA, both "
               "daemons with the guests' soft-RoCE devices; TCP fallback, guest B's "
               "daemon with --no-rdma (the connection counted as fallback_no_rdma).",
               ""]
    if m.get("poll_us") is not None:
        md += [f"Busy-polling rows: AF_SD with SD_SPIN_US={m['poll_us']} (libsd "
               "spins that long before a blocking call sleeps), rsocket "
               f"with polling_time {m['poll_us']} µs (/etc/rdma/rsocket), both "
               "spinning through the round trip as ib_write_lat does "
               "(SD_BENCH_REMOTE_POLL_US); the other rows wait as each library "
               "does by default.", ""]
    if m.get("failed"):
        md += [f"**Failed: the pair part: {m['failed']}** (what it measured before "
               "is below; raw/pair.log has the guests' console).", ""]
    cols = rm["columns"]

    def colname(c):
        test, size = c.split("/")
        return (f"round trip {size_name(int(size))}" if test == "pingpong"
                else f"throughput {size_name(int(size))}")

    head = ["transport"]
    for c in cols:
        head += [colname(c), "÷ RDMA write"]
    rows = []
    for r in rm["results"]:
        row = [r["name"]]
        for c in cols:
            p = r["points"].get(c)
            if not p:
                row += ["failed" if any(
                    remote_key(f) == (r["transport"], r["program"]) and
                    f"{f['test']}/{f['size']}" == c for f in rm["failed"])
                    else "–", "–"]
            elif p["unit"] == "us":
                row += [us(p["value"]), f"{p['over_rdma_write']:.3g}×"
                        if "over_rdma_write" in p else "–"]
            else:
                mb = p.get("mb_per_s")
                row += [f"{si(p['value'])}/s" + (f" ({mb:.3g})" if mb is not None
                                                 else ""),
                        f"{p['over_rdma_write']:.3g}×"
                        if "over_rdma_write" in p else "–"]
        rows.append(row)
    if rows:
        md += table(head, rows) + [""]
    md += daemon_counts_md(rm)
    rtt = f"pingpong/{SMALL_REMOTE}"
    by = [(r["name"], r["points"][rtt]) for r in rm["results"]
          if rtt in r["points"]]
    rounds = [(n, p["rounds"]) for n, p in by if p.get("rounds")]
    if rounds:
        md += ["Round trips of each round (µs; the table has their medians): "
               + "; ".join(f"{n}: " + ", ".join(us(x["value"]) for x in rs)
                           for n, rs in rounds) + ".", ""]
    rate = f"stream/{SMALL_REMOTE}"
    rates = [(r["name"], r["points"][rate]["rounds"]) for r in rm["results"]
             if r["points"].get(rate, {}).get("rounds")]
    if rates:
        md += [f"{size_name(SMALL_REMOTE)} message rates of each round (a second; "
               "the table has their medians): "
               + "; ".join(f"{n}: " + ", ".join(si(x["value"]) for x in rs)
                           for n, rs in rates) + ".", ""]
    means = [(n, p["rtt_us_avg"]) for n, p in by if "rtt_us_avg" in p]
    if means:
        t = rm["targets"]
        ratios = [f"{t[f'rtt_mean_over_{k}']:.3g}× {what}'s" for k, what in
                  (("rdma_write", "raw RDMA write"), ("rsocket", "rsocket"))
                  if f"rtt_mean_over_{k}" in t]
        md += ["Mean round trips (µs; with rounds, the median of the rounds' "
               "means; the targets are judged on the medians above): "
               + "; ".join(f"{n}: {us(v)}" for n, v in means) + "."
               + (f"  AF_SD's mean is {' and '.join(ratios)}." if ratios else ""),
               ""]
    csw = [(n, p) for n, p in by if "client_vcsw_per_rt" in p]
    if csw:
        md += ["What the client's process spent per round trip (getrusage, all "
               "its threads, its start and connection setup included; voluntary "
               "context switches, processor time in µs): "
               + "; ".join(f"{n}: {p['client_vcsw_per_rt']:.2f}, "
                           f"{us(p['client_cpu_us_per_rt'])}" for n, p in csw)
               + ".", ""]
    def counts(c):
        return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"
    for t, fb in sorted(rm["fallback"].items()):
        if fb["a"] or fb["b"]:
            md += [f"{REMOTE_NAMES.get(t, t)}: the module's counters over those "
                   f"runs (sdctl stats): guest A (connecting) {counts(fb['a'])}; "
                   f"guest B (listening) {counts(fb['b'])}.", ""]
    groups = {}
    for f in rm["failed"]:
        k = (remote_name(remote_key(f)), f["failed"])
        groups.setdefault(k, []).append(
            f"{'round trip' if f['test'] == 'pingpong' else 'throughput'} "
            f"{size_name(f['size'])}")
    for (name, why), what in groups.items():
        md += [f"**Failed: {name}, {', '.join(what)}: {why}**", ""]
    extra = []
    if m.get("seconds") is not None:
        extra.append(f"bench/remote took {m['seconds']:g} s")
    if m.get("sockperf_seconds") is not None:
        extra.append(f"{m['sockperf_seconds']:g} s per sockperf run")
    if m.get("perftest_iterations") is not None:
        extra.append(f"{m['perftest_iterations']} iterations per perftest "
                     "and rstream round-trip run")
    if m.get("servers_left_on_b"):
        extra.append(f"⚠ servers left on B: {m['servers_left_on_b']}")
    if extra:
        md += ["; ".join(extra) + ".", ""]
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "out"))
    ap.add_argument("--remote", action="append", default=[],
                    help="bench/remote's remote.jsonl (also read from an input "
                    "folder)")
    ap.add_argument("--keep", metavar="DIR",
                    help="also write DIR/DATE-PLACE.md, the run to commit "
                    "(make bench-keep: bench/results)")
    ap.add_argument("inputs", nargs="+")
    args = ap.parse_args()

    lines, trace = read_inputs(args.inputs, args.remote)
    pair_lines = [d for d in lines if is_pair(d)]
    lines = [d for d in lines if not is_pair(d)]
    rm = remote(pair_lines)
    meta, records, skipped = collect(lines)
    if not records and not rm:
        sys.exit("report: no measurements in the input")
    fp = fast_path(trace)
    targets = pairs(lines)
    instructions = instruction_counts(lines)
    large = large_messages(lines, fp)
    app_rows, app_failed = apps_table(read_apps(args.inputs))
    generated = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    info = run_info(meta, rm, generated)

    results = []
    for key in sorted(records, key=lambda k: (k[0], rank(k[1]), k[2])):
        r = dict(records[key])
        if r["transport"] == "libsd":
            r["fast_path"] = bool(fp and fp["enabled"])
            if not r["fast_path"]:
                r["note"] = NOT_ENABLED
        results.append(r)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"generated": generated, "run": info,
           "note": "guest figures come from a QEMU guest (see meta.guest.accel; "
                   "TCG makes system calls dearer than on hardware); compare "
                   "against the raw shared-memory queue (transport shm)",
           "meta": meta, "libsd_fast_path": fp, "skipped": skipped,
           "targets": targets, "instructions": instructions, "results": results,
           "large": large,
           "apps": {"rows": app_rows, "failed": app_failed}}
    if rm:
        doc["remote"] = rm
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    body = (markdown(meta, records, skipped, fp, generated, info, targets, large,
                     instructions) +
            ("\n".join(apps_md(app_rows, app_failed)) + "\n"
             if app_rows or app_failed else "") +
            ("\n" + "\n".join(remote_md(rm, meta)) + "\n" if rm else ""))
    wrote = bool(records) and plot(records, fp, out / "results.png")
    (out / "results.md").write_text(body + "\n" + ("Plot: results.png.  " if wrote else "")
                                    + "Raw lines: raw/.\n")
    print(f"report: wrote {out}/results.json, results.md"
          + (", results.png" if wrote else ""), file=sys.stderr)
    if args.keep:
        keep = pathlib.Path(args.keep)
        keep.mkdir(parents=True, exist_ok=True)
        f = keep / f"{info['day']}-{info['place']}.md"
        verb = "replaced" if f.exists() else "wrote"
        f.write_text(KEEP_NOTICE + "\n\n" + body)
        print(f"report: {verb} {f}: commit it to keep the run", file=sys.stderr)


if __name__ == "__main__":
    main()
