#!/usr/bin/env python3
"""The main job of `make demo`, run inside the test VM with af_sd.ko loaded
(tests/vm/run -- tests/demo.py).

Unmodified programs, plain TCP and then under sdrun on AF_SD:
redis-benchmark against redis-server and sockperf ping-pong, with a table
of what each did; then `sdctl sockets` while a redirected server holds
connections open, a plain TCP client reaching that server (fallback), a
deny rule refusing a connect and its removal, and the counters.

Every step checks what it shows (the AF_SD runs really went through
AF_SD, the fallback client got its answer, the rule denied, ...) and the
script ends with status 1 and a "demo: FAILED" line when one does not.
Timings are only printed, never judged.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP = pathlib.Path(__file__).resolve().parents[1]
SDRUN = str(TOP / "build/user/lib/shim/sdrun")
SDCTL = str(TOP / "build/user/tools/sdctl/sdctl")
REDIRECT = pathlib.Path("/proc/sys/net/sd/redirect")

REQUESTS = int(os.environ.get("SD_DEMO_REQUESTS", "6000"))
CLIENTS = 4
PINGPONG_SECONDS = os.environ.get("SD_DEMO_SECONDS", "4")


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def heading(text):
    print(f"\n== {text}", flush=True)


def say(text=""):
    print(text, flush=True)


def indent(text, by="  "):
    return "\n".join(by + line for line in text.rstrip("\n").splitlines())


def run(cmd, timeout=300, ok=True):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if ok and out.returncode:
        raise Failed(f"{' '.join(cmd)} exited {out.returncode}: "
                     f"{(out.stderr or out.stdout).strip()[-300:]}")
    return out


def sdctl(*args):
    return run([SDCTL, *args]).stdout


def stats():
    return json.loads(sdctl("--json", "stats"))


def delta(before):
    now = stats()
    return {k: now[k] - before.get(k, 0) for k in now}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Plain TCP connects that wait_port made: a redirected server counts each
# as a TCP client (fallback_tcp_client).
probes = 0


def wait_port(port, timeout=60):
    global probes
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            probes += 1
            return
        except OSError:
            time.sleep(0.2)
    raise Failed(f"nothing listens on port {port} after {timeout}s")


class Proc:
    """A background program, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, cmd, port=None, **kw):
        self.cmd = cmd
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        self.proc = subprocess.Popen(cmd, **kw)
        if port:
            try:
                wait_port(port)
            except Failed:
                self.stop()
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def redis_server(pre, port, tmp):
    return Proc(pre + ["redis-server", "--port", str(port), "--save", "",
                       "--appendonly", "no", "--dir", tmp,
                       "--logfile", f"{tmp}/redis.log"], port)


def redis_bench(pre, port):
    """requests/s and median latency (ms) of SET and GET."""
    out = run(pre + ["redis-benchmark", "-p", str(port), "-c", str(CLIENTS),
                     "-n", str(REQUESTS), "-t", "set,get", "--csv"])
    rows = [[f.strip('"') for f in line.split(",")]
            for line in out.stdout.splitlines() if line.strip()]
    check(rows and rows[0][0] == "test",
          f"redis-benchmark --csv printed no header: {out.stdout[-300:]!r}")
    head = rows[0]
    res = {}
    for r in rows[1:]:
        f = dict(zip(head, r))
        res[r[0]] = (float(f["rps"]), float(f["p50_latency_ms"]))
    check("SET" in res and "GET" in res,
          f"redis-benchmark gave no SET or GET figure: {out.stdout[-300:]!r}")
    return res


def sockperf_pingpong(pre, port):
    """Median round-trip latency (us) of 64-byte ping-pong."""
    with Proc(pre + ["sockperf", "server", "--tcp", "-i", "127.0.0.1",
                     "-p", str(port)], port):
        out = run(pre + ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1",
                         "-p", str(port), "-t", PINGPONG_SECONDS, "-m", "64"])
    text = out.stdout + out.stderr
    m = re.search(r"percentile 50\.000 =\s*([\d.]+)", text)
    check(m and "ERROR" not in text,
          f"sockperf ping-pong printed no median: {text[-300:]!r}")
    return float(m.group(1))


def check_all_sd(d, what, conns, probed):
    """What the counters must show after a run with both ends under sdrun;
    the demo's own readiness probes (plain TCP) are the only TCP clients."""
    check(d["redirected"] >= conns,
          f"{what}: only {d['redirected']} sockets were redirected to AF_SD "
          f"(sdctl stats 'redirected'), expected at least {conns}")
    check(d["connects"] >= conns and d["accepts"] >= conns,
          f"{what}: {d['connects']} AF_SD connects and {d['accepts']} accepts, "
          f"expected at least {conns} of each: the programs did not use AF_SD")
    fell = {k: v for k, v in d.items() if k.startswith("fallback_") and v}
    if fell.get("fallback_tcp_client") == probed:
        del fell["fallback_tcp_client"]
    check(not fell, f"{what}: connections fell back to TCP: {fell}")


def check_no_sd(d, what):
    check(d["redirected"] == 0 and d["connects"] == 0,
          f"{what}: plain TCP programs created AF_SD sockets: {d}")


def ratio(sd, tcp):
    if not tcp:
        return "-"
    r = sd / tcp
    if r >= 10:
        return f"{r:.0f}x"
    return f"{r:.2f}x" if r >= 0.1 else f"1/{1 / r:.0f}"


def table(rows):
    """rows of cells; first row is the header; numbers right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  " + "  ".join(cells).rstrip())
        if n == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def benchmarks(tmp):
    heading("1. The same unmodified programs over TCP, then over AF_SD")
    say(f"redis-benchmark -c {CLIENTS} -n {REQUESTS} -t set,get against "
        f"redis-server, and sockperf\nping-pong (64-byte messages, "
        f"{PINGPONG_SECONDS} s). 'TCP': both ends plain, over loopback.\n"
        f"'AF_SD': both ends started as `sdrun PROGRAM`, so their TCP "
        f"sockets are AF_SD\nsockets whose data moves through shared-memory "
        f"rings.")
    res = {}
    for mode, pre in (("TCP", []), ("AF_SD", [SDRUN])):
        say(f"  running {mode} ...")
        total = stats()
        for prog, conns in (("redis", CLIENTS), ("sockperf", 1)):
            before, probed = stats(), probes
            if prog == "redis":
                port = free_port()
                with redis_server(pre, port, tmp):
                    res[mode, prog] = redis_bench(pre, port)
            else:
                res[mode, prog] = sockperf_pingpong(pre, free_port())
            d = delta(before)
            if mode == "TCP":
                check_no_sd(d, f"the TCP run of {prog}")
            else:
                check_all_sd(d, f"the AF_SD run of {prog}", conns,
                             probes - probed)
        d = delta(total)
        if mode == "TCP":
            say("  checked: no AF_SD socket was used (sdctl stats unchanged)")
        else:
            say(f"  checked: {d['redirected']} sockets redirected to AF_SD, "
                f"{d['connects']} AF_SD connections, none fell back to TCP")

    rows = [["workload", "measure", "TCP", "AF_SD", "AF_SD/TCP"]]
    for test in ("SET", "GET"):
        t, s = res["TCP", "redis"][test], res["AF_SD", "redis"][test]
        rows.append([f"redis {test}", "requests/s", f"{t[0]:,.0f}",
                     f"{s[0]:,.0f}", ratio(s[0], t[0])])
        rows.append(["", "median latency", f"{t[1]:.3f} ms", f"{s[1]:.3f} ms",
                     ratio(s[1], t[1])])
    t, s = res["TCP", "sockperf"], res["AF_SD", "sockperf"]
    rows.append(["sockperf ping-pong", "median round trip", f"{t:,.1f} us",
                 f"{s:,.1f} us", ratio(s, t)])
    say()
    say(table(rows))
    say("\n  GUEST FIGURES: measured inside a QEMU guest under TCG (an "
        "instruction\n  emulator, no KVM) on a machine that may be busy: "
        "they show that both\n  paths work, not how fast either is on real "
        "hardware. Requests/s: higher\n  is better; latency: lower is "
        "better. `make bench` measures for real.")


def live_connections(tmp):
    heading("2. A redirected server with an AF_SD client and a plain TCP "
            "client")
    port = free_port()
    say(f"sdrun redis-server --port {port}, then two clients that wait "
        f"(BLPOP) on it:\none under sdrun (AF_SD), one plain redis-cli "
        f"(TCP, not under sdrun).")
    before, probed = stats(), probes
    with redis_server([SDRUN], port, tmp):
        cli = ["redis-cli", "-p", str(port)]
        with Proc([SDRUN] + cli + ["BLPOP", "demo:sd", "60"],
                  stdout=subprocess.PIPE, text=True) as sd_cli, \
             Proc(cli + ["BLPOP", "demo:tcp", "60"],
                  stdout=subprocess.PIPE, text=True) as tcp_cli:
            # Both clients are connected and blocked once the server
            # counts two blocked clients.
            end = time.monotonic() + 60
            while time.monotonic() < end:
                info = run(cli + ["INFO", "clients"]).stdout
                m = re.search(r"blocked_clients:(\d+)", info)
                if m and int(m.group(1)) >= 2:
                    break
                time.sleep(0.2)
            else:
                raise Failed("the two BLPOP clients never blocked on the "
                             "server")
            say(f"\n$ sdctl sockets      (while both clients wait)")
            socks = sdctl("sockets")
            say(indent(socks))
            js = json.loads(sdctl("--json", "sockets"))
            shm = [s for s in js if s.get("transport") == "shm"
                   and s.get("state") == "ESTAB"]
            tcp = [s for s in js if s.get("transport") == "tcp"
                   and s.get("fallback") == "tcp_client"
                   and s.get("state") == "ESTAB"]
            check(len(shm) >= 2,
                  "sdctl sockets shows no AF_SD (shm) connection between "
                  "the redirected client and server")
            check(tcp, "sdctl sockets shows no tcp(tcp_client) connection "
                  "for the plain client")
            say("  shm: the AF_SD client's connection, one line for each "
                "end (shared-memory\n  rings; the data moves without "
                "system calls, so the byte counters stay 0).\n  "
                "tcp(tcp_client): the plain redis-cli, which the redirected "
                "server took\n  over TCP.  LISTEN: redis listens on "
                "0.0.0.0 and [::], both redirected.")
            say(f"\n$ redis-cli -p {port} RPUSH demo:tcp hello-tcp   "
                f"(plain TCP, wakes the plain client)")
            say(indent(run(cli + ["RPUSH", "demo:tcp", "hello-tcp"]).stdout))
            say(f"$ sdrun redis-cli -p {port} RPUSH demo:sd hello-sd   "
                f"(AF_SD, wakes the AF_SD client)")
            say(indent(run([SDRUN] + cli + ["RPUSH", "demo:sd",
                                            "hello-sd"]).stdout))
            got_tcp = tcp_cli.proc.communicate(timeout=60)[0]
            got_sd = sd_cli.proc.communicate(timeout=60)[0]
            say(f"  the plain TCP client got:  {' '.join(got_tcp.split())}")
            say(f"  the AF_SD client got:      {' '.join(got_sd.split())}")
            check(tcp_cli.proc.returncode == 0 and "hello-tcp" in got_tcp,
                  f"the plain TCP client did not get its answer from the "
                  f"redirected server: {got_tcp!r}")
            check(sd_cli.proc.returncode == 0 and "hello-sd" in got_sd,
                  f"the AF_SD client did not get its answer: {got_sd!r}")
        d = delta(before)
        # the plain BLPOP client, the RPUSH one, the readiness probe and
        # the INFO polls are all plain TCP clients
        check(d["fallback_tcp_client"] >= 3 + probes - probed,
              f"the redirected server took {d['fallback_tcp_client']} plain "
              f"TCP clients (fallback_tcp_client), expected at least "
              f"{3 + probes - probed}")
        say(f"  checked: both clients got their answers; fallback_tcp_client "
            f"+{d['fallback_tcp_client']} (the plain\n  redis-cli runs, and "
            f"the demo's own readiness probe and INFO polls)")

        heading("3. A rule denies AF_SD connects to the server's port, "
                "then goes")
        say(f"$ sdctl rules add deny dir connect rport {port} comment demo")
        rid = sdctl("rules", "add", "deny", "dir", "connect", "rport",
                    str(port), "comment", "demo").strip()
        say(indent(rid))
        try:
            say("$ sdctl rules")
            say(indent(sdctl("rules")))
            before = stats()
            say(f"$ sdrun redis-cli -p {port} PING")
            out = run([SDRUN] + cli + ["PING"], ok=False)
            text = (out.stdout + out.stderr).strip()
            say(indent(text))
            d = delta(before)
            check("PONG" not in text and d["denied_connect"] >= 1,
                  f"the deny rule did not deny: redis-cli said {text!r}, "
                  f"denied_connect went up by {d['denied_connect']}")
            check("Permission denied" in text,
                  f"the denied connect did not fail with EACCES: {text!r}")
            say(f"  checked: refused with EACCES (denied_connect "
                f"+{d['denied_connect']})")
        finally:
            say(f"$ sdctl rules del {rid}")
            sdctl("rules", "del", rid)
        say(f"$ sdrun redis-cli -p {port} PING")
        out = run([SDRUN] + cli + ["PING"], ok=False)
        say(indent((out.stdout + out.stderr).strip()))
        check(out.returncode == 0 and out.stdout.strip() == "PONG",
              f"with the rule gone the connect still fails: "
              f"{(out.stdout + out.stderr).strip()!r}")
        check(not json.loads(sdctl("--json", "rules")),
              "the demo's rule is still there")
        say("  checked: with the rule gone the connect is allowed again")


DESCR = {
    "connects": "AF_SD connections established",
    "accepts": "connections accepted (AF_SD and plain TCP clients)",
    "refused": "connects that found no listener",
    "denied_connect": "connects refused by a connect rule",
    "denied_accept": "connects refused by an accept rule",
    "denied_bind": "binds and listens refused by a bind rule",
    "backlog_full": "connects that met a full backlog",
    "resets": "connections reset",
    "wakeups": "sleepers woken by the kernel's path",
    "takeovers": "send or receive tokens taken over",
    "fallback_tcp_client": "plain TCP clients taken by a redirected server",
    "fallback_no_listener": "redirected connects to a non-AF_SD server",
    "fallback_policy": "connects sent to TCP by a 'tcp' rule",
    "redirected": "TCP sockets created as AF_SD under sdrun",
}


def counters():
    heading("4. sdctl stats: the counters that moved (zeros left out)")
    st = stats()
    rows = [(k, v) for k, v in st.items() if v]
    w = max(len(k) for k, _ in rows)
    vw = max(len(str(v)) for _, v in rows)
    for k, v in rows:
        say(f"  {k.ljust(w)}  {str(v).rjust(vw)}  {DESCR.get(k, '')}".rstrip())
    say("  (`sdctl stats` lists every counter; `sdctl --json stats` for "
        "scripts)")


def main():
    for prog in ("redis-server", "redis-benchmark", "redis-cli", "sockperf"):
        if not shutil.which(prog):
            raise Failed(f"{prog} is not installed: run scripts/install-deps")
    heading("AF_SD demo, inside the test VM")
    check(pathlib.Path("/sys/module/af_sd").is_dir(),
          "af_sd.ko is not loaded (run the demo with make demo, or "
          "tests/vm/run -- tests/demo.py)")
    for path in (SDRUN, SDCTL):
        check(os.access(path, os.X_OK), f"{path} is missing: run make")
    ver = pathlib.Path("/sys/module/af_sd/version").read_text().strip()
    fam = pathlib.Path("/sys/module/af_sd/parameters/family").read_text()
    say(f"af_sd {ver} loaded (address family {fam.strip()}); "
        f"sysctl net.sd.redirect=1 so that sdrun redirects")
    old = REDIRECT.read_text()
    REDIRECT.write_text("1\n")
    tmp = tempfile.mkdtemp(prefix="sd-demo-", dir="/tmp")
    try:
        benchmarks(tmp)
        live_connections(tmp)
        counters()
    finally:
        REDIRECT.write_text(old)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    start = time.monotonic()
    try:
        main()
    except (Failed, subprocess.TimeoutExpired, OSError) as e:
        sys.stdout.flush()
        print(f"\ndemo: FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"\ndemo: OK, every step checked ({time.monotonic() - start:.0f} s "
          f"in the guest)", flush=True)
