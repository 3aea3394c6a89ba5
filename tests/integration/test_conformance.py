"""Conformance: other projects' TCP test suites, on TCP and on AF_SD.

Each suite below runs twice in the guest: once on plain TCP, once under
``sdrun`` with ``net.sd.redirect=1``, where libsd turns every AF_INET and
AF_INET6 stream socket the tests make into an AF_SD one (both ends of
each connection are in the suite's own process tree, so both ends are
redirected and the connections go over AF_SD's rings).  The results are
compared test by test: every test that passed on TCP must pass under
sdrun, except the entries of KNOWN_DIFFERENCES (each with its reason).
Tests that cannot apply to AF_SD are in NOT_APPLICABLE with their
reason: they are kept out of the run where the suite allows it, and never
required.  Documentation/testing.rst ("Conformance: other projects'
suites") says the same for people.

The suites:

``cpython``
    CPython 3.11's own tests (Debian's ``libpython3.11-testsuite``) of
    sockets, socketserver, selectors, epoll, http.client, http.server,
    urllib over a local server and asyncio's socket, stream, sendfile and
    event loop tests, through ``python3.11 -m test`` (regrtest) with
    ``--junit-xml``, one job per test module.
``tornado``
    Tornado's TCP server, TCP client, IOStream and HTTP server tests
    (Debian's ``python3-tornado``), through Tornado's own runner
    (``tornado.test.runtests``, which also fails a run that logs), with
    per-test results from ``tests/conformance/tornado_json.py``.
``selftests``
    The Linux kernel's socket selftests that use TCP
    (``tools/testing/selftests/net`` of Debian's ``linux-source-6.1``,
    extracted and compiled by ``tests/conformance/build-selftests``, which
    ``scripts/check conformance`` runs), each a test.  Some also test UDP (and DCCP, which
    the guest has not): SELFTESTS says which parts are TCP; the
    comparison is the same for all, same result on TCP and under sdrun.

Every run (a suite's job in one mode) has a network namespace of its own,
made fresh with only ``lo`` up: runs do not share ports, two run at once
(the guest has two processors; most of the time is spent sleeping in
the tests' timeouts anyway), and the module's counters of the namespace
say what the run did.  A run under sdrun must show redirected sockets,
and the suite's runs together AF_SD connections made and accepted; a
plain run must show none.

Flaky tests: a test that failed on TCP is not required under sdrun.  A
run that does not finish in JOB_TIMEOUT seconds is killed; its tests that
did not report count as failed.

Running one suite by hand, in the guest (the namespace is optional)::

    tests/vm/run -- python3 -m pytest -q tests/integration/test_conformance.py -k tornado
    tests/vm/run -- sh -c 'echo 1 > /proc/sys/net/sd/redirect; \\
        build/user/lib/shim/sdrun python3.11 -m test -u network -v test_socketserver'

``SD_TEST_CONFORMANCE_JOBS=PATTERN`` (fnmatch over ``suite/job``, comma
separated) runs only some jobs of the selected suites.
"""
import concurrent.futures
import fnmatch
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import TOP, netns_del, sd_stats

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
BIN = TOP / "build" / "selftests" / "bin"
HERE = pathlib.Path(__file__).resolve().parent
TORNADO_JSON = str(TOP / "tests" / "conformance" / "tornado_json.py")
PY311 = "/usr/bin/python3.11"
PY3 = "/usr/bin/python3"
JOB_TIMEOUT = 240
MODES = ("tcp", "sd")

# ---- what cannot apply, and what differs on purpose ------------------------
#
# Keys are fnmatch patterns over test ids ("suite:id", ids as the suite
# names its tests); each value is the reason.  Tests of NOT_APPLICABLE are
# not run where the suite can leave them out (regrtest's -i, selftests
# not built), and are never required.

NOT_APPLICABLE = {
    "cpython:*VSOCK*":
        "AF_VSOCK sockets: another family, which libsd leaves alone; "
        "left out of the run (-i '*VSOCK*')",
    # The kernel's selftests that are not built at all:
    "selftests:msg_zerocopy":
        "MSG_ZEROCOPY completions come from TCP's error queue of skbs; "
        "AF_SD has its own zero copy (zerocopy.rst)",
    "selftests:tls":
        "kernel TLS is a TCP upper-layer protocol (TCP_ULP \"tls\"); "
        "AF_SD sockets have no ULPs",
    "selftests:io_uring_zerocopy_tx":
        "io_uring's zero-copy send (IORING_OP_SEND_ZC) of TCP/UDP skbs",
    "selftests:tcp_mmap -z":
        "TCP_ZEROCOPY_RECEIVE maps TCP's received skb pages; "
        "tcp_mmap runs without -z here",
    "selftests:fin_ack_lat":
        "measures the delay of TCP's ACK to a FIN segment: timing of "
        "segments AF_SD does not send",
    "selftests:txtimestamp": "SO_TIMESTAMPING of TCP segments and skbs",
    "selftests:rxtimestamp": "receive timestamps of skbs",
    "selftests:reuseport_bpf_cpu":
        "reuseport steering by the CPU a packet arrived on",
    "selftests:reuseport_bpf_numa":
        "reuseport steering by the NUMA node a packet arrived on",
    "selftests:nettest/fcnal-test":
        "VRF devices, routes and veth between namespaces: routing of "
        "packets, not the socket API over loopback",
}

KNOWN_DIFFERENCES = {
    "selftests:reuseport_bpf":
        "its TCP part steers connections with reuseport BPF programs that "
        "read the SYN's Fast Open data; AF_SD's groups dispatch round "
        "robin and never run them (af_sd.rst; "
        "test_sd_specific.py::test_reuseport_bpf_program_is_kept_not_run)",
}

# ---- the suites -------------------------------------------------------------


def _cpython(module, extra=()):
    return dict(
        suite="cpython", name=module, kind="junit",
        argv=[PY311, "-m", "test", "-v", "-u", "network", "--timeout", "200",
              "-i", "*VSOCK*", *extra, "--junit-xml", "{out}", module])


CPYTHON = [
    _cpython("test_socket"),
    _cpython("test_socketserver"),
    _cpython("test_selectors"),
    _cpython("test_epoll"),
    _cpython("test_httplib"),
    _cpython("test_httpservers"),
    _cpython("test_urllib2_localnet"),
    _cpython("test_asyncio.test_sock_lowlevel"),
    _cpython("test_asyncio.test_streams"),
    _cpython("test_asyncio.test_sendfile"),
    _cpython("test_asyncio.test_events"),
]

TORNADO = [
    dict(suite="tornado", name=m, kind="json",
         # Tornado's async tests give up after 5 s by default, which
         # TCG's slowness reaches on plain TCP too (test_flow_control).
         argv=["env", "ASYNC_TEST_TIMEOUT=60", PY3, TORNADO_JSON, "{out}",
               f"tornado.test.{m}"])
    for m in ("tcpserver_test", "tcpclient_test", "iostream_test",
              "httpserver_test")
]

# tcp_mmap: the server runs in the background and prints "received N MB"
# when a connection ends; the client sends 64 MiB (build-selftests makes
# FILE_SZ 2^26 instead of 2^35: 32 GiB take too long under TCG) without
# -z, plain send() and recv().
_TCP_MMAP = r"""
b={bin}; fam=$1; host=$2
$b/tcp_mmap -s $fam -p 5201 > srv.out 2>&1 & srv=$!
i=0
until $b/tcp_mmap $fam -H $host -p 5201; do
    i=$((i + 1)); [ $i -lt 100 ] || { kill $srv; exit 1; }; sleep 0.1
done
i=0
until grep -q received srv.out; do
    i=$((i + 1)); [ $i -lt 300 ] || break; sleep 0.1
done
kill $srv; wait $srv 2>/dev/null
cat srv.out
grep -q 'received 64 MB' srv.out
"""


def _st(name, *args, setup=(), tcp="", sh=None):
    argv = ["sh", "-c", sh, "sh", *args] if sh else \
        [str(BIN / name.split()[0]), *args]
    return dict(suite="selftests", name=" ".join([name, *args]).strip()
                if not sh else f"{name} {' '.join(args)}",
                kind="exit", argv=argv, setup=list(setup), tcp=tcp)


# (each: what the program tests; "tcp" says which part is TCP)
SELFTESTS = [
    _st("tcp_inq", "-4", tcp="all: TCP_INQ control message and getsockopt"),
    _st("tcp_inq", "-6", tcp="all"),
    _st("reuseaddr_conflict",
        tcp="all: SO_REUSEADDR binds of v4 and v6 listeners"),
    _st("reuseport_dualstack",
        tcp="TCP and UDP: reuseport groups of v4 and v6 sockets"),
    _st("reuseport_addr_any",
        tcp="TCP, UDP and DCCP (DCCP: no module, skipped in both)"),
    _st("sk_connect_zero_addr", tcp="all: connect() to 0.0.0.0 / ::"),
    _st("sk_bind_sendto_listen",
        tcp="all: sendto() on a bound socket, then listen()"),
    _st("bind_bhash", "443", "ipv4", "10.8.8.8",
        setup=["ip addr add 10.8.8.8/32 dev lo"],
        tcp="all: 24,000 SO_REUSEPORT binds to one port, then another "
            "address"),
    _st("bind_bhash", "443", "ipv6", "2001:db8:0:f101::1",
        setup=["ip addr add 2001:db8:0:f101::1/128 dev lo nodad"],
        tcp="all"),
    _st("tcp_mmap", "-4", "127.0.0.1", sh=_TCP_MMAP.replace("{bin}", str(BIN)),
        tcp="all: 64 MiB with send() and recv() (no -z)"),
    _st("tcp_mmap", "-6", "::1", sh=_TCP_MMAP.replace("{bin}", str(BIN)),
        tcp="all"),
    _st("socket", tcp="socket() of several families and types"),
    _st("reuseaddr_ports_exhausted",
        setup=["sysctl -qw net.ipv4.ip_local_port_range='32768 32768'",
               "sysctl -qw net.ipv4.ip_autobind_reuse=1"],
        tcp="all: bind and connect with one ephemeral port"),
    _st("stress_reuseport_listen", "10", "8",
        setup=["sysctl -qw net.ipv6.ip_nonlocal_bind=1"],
        tcp="all: 80 listeners of one port on 10 addresses (the "
            "kernel's script makes 24,000)"),
    _st("so_netns_cookie", tcp="all: SO_NETNS_COOKIE"),
    _st("reuseport_bpf",
        tcp="mostly UDP; TCP: reuseport groups steered by classic and "
            "extended BPF programs"),
    *[_st("tcp_fastopen_backup_key", a,
          setup=["sysctl -qw net.ipv4.tcp_fastopen=3"],
          tcp="all: TCP Fast Open with a backup key")
      for a in ("-4", "-6", "-4s", "-6s")],
]

SUITES = {"cpython": CPYTHON, "tornado": TORNADO, "selftests": SELFTESTS}

# ---- running ----------------------------------------------------------------


def _selected(job):
    pats = os.environ.get("SD_TEST_CONFORMANCE_JOBS")
    if not pats:
        return True
    key = f"{job['suite']}/{job['name']}"
    return any(fnmatch.fnmatch(key, p) for p in pats.split(","))


def _raise_nofile():
    # bind_bhash holds 24,000 sockets; its script raises the limit too.
    resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))
    os.setsid()


def _ns(name, *lines):
    subprocess.run(["ip", "netns", "exec", name, "sh", "-ec",
                    "\n".join(lines)], check=True, capture_output=True,
                   text=True)


def parse_junit(path):
    """regrtest's JUnit XML: {id: [status, text]}."""
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        tid = tc.get("name")
        if tid.startswith("test."):
            tid = tid[len("test."):]
        bad = [e for e in tc if e.tag in ("failure", "error")]
        if bad:
            text = "\n".join((e.get("message") or "") + "\n" + (e.text or "")
                             for e in bad)
            out[tid] = ["fail", text]
        elif tc.find("skipped") is not None:
            out[tid] = ["skip", tc.find("skipped").text or ""]
        else:
            out[tid] = ["pass", ""]
    return out


VERBOSE = re.compile(r"^(\w+) \((?:test\.)?([\w.]+)\)(?:\n(?!\w+ \().*)?"
                     r" \.\.\. ?(ok|FAIL|ERROR|skipped|expected failure|"
                     r"unexpected success)?", re.M)


def parse_verbose(text):
    """regrtest -v's lines, when a run left no JUnit XML (killed by its
    --timeout): {id: [status, text]}; the test that never ended fails."""
    out = {}
    for m in VERBOSE.finditer(text):
        st = {"ok": "pass", "skipped": "skip", "expected failure": "skip",
              None: "fail"}.get(m.group(3), "fail")
        out[m.group(2)] = [st, "" if st != "fail" else
                           "hung: " + text[-3000:] if m.group(3) is None
                           else text[m.start():m.start() + 3000]]
    return out


TAP = re.compile(r"^\s*(not ok|ok) \d+ (?:- )?(.*?)(?:\s+#\s*(SKIP).*)?$")


def parse_exit(job, rc, text):
    """A program's exit status, and its kselftest TAP lines if any."""
    name = job["name"]
    status = "pass" if rc == 0 else "skip" if rc == 4 else "fail"
    out = {name: [status, "" if status == "pass" else text]}
    for line in text.splitlines():
        m = TAP.match(line)
        if m and m.group(2):
            st = "skip" if m.group(3) else \
                "pass" if m.group(1) == "ok" else "fail"
            out[f"{name}::{m.group(2)}"] = [st, "" if st == "pass" else text]
    return out


def run_job(job, mode, idx, workdir):
    """Run one job in one mode in a fresh namespace; its results."""
    ns = f"conf{idx}"
    netns_del(ns)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        _ns(ns, "ip link set lo up",
            f"echo {1 if mode == 'sd' else 0} > /proc/sys/net/sd/redirect",
            *job.get("setup", []))
        wd = pathlib.Path(workdir) / re.sub(
            r"[^\w.-]+", "_", f"{job['suite']}-{job['name']}-{mode}")
        wd.mkdir()
        log = wd / "output"
        out = wd / "results"
        argv = [a.replace("{out}", str(out)) for a in job["argv"]]
        if mode == "sd":
            argv = [SDRUN] + argv
        before = sd_stats(ns)
        start = time.monotonic()
        with open(log, "w") as f:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv],
                                    cwd=wd, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL,
                                    preexec_fn=_raise_nofile)
        try:
            proc.wait(timeout=JOB_TIMEOUT)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        text = log.read_text(errors="replace")
        took = time.monotonic() - start
        after = sd_stats(ns)
        stats = {k: after[k] - before.get(k, 0) for k in after}
        rc = proc.returncode
        if job["kind"] == "exit":
            res = parse_exit(job, rc, text)
        else:
            res = {}
            if out.exists():
                try:
                    res = parse_junit(out) if job["kind"] == "junit" else \
                        json.loads(out.read_text())
                except (ET.ParseError, json.JSONDecodeError) as e:
                    text += f"\n[conformance: results unreadable: {e}]"
            elif job["kind"] == "junit":
                res = parse_verbose(text)
            # The run as a whole: its exit status (a crash, a hang, a
            # test that logged under Tornado's runner).
            res[f"{job['name']} (the run)"] = [
                "pass" if rc == 0 and not timed_out else "fail",
                text[-3000:]]
        if timed_out:
            text += f"\n[conformance: killed after {JOB_TIMEOUT} s]"
        return dict(job=job, mode=mode, rc=rc, timed_out=timed_out,
                    took=took, stats=stats, results=res, text=text)
    finally:
        netns_del(ns)


class Lane:
    """Runs the selected suites' jobs, both modes, two at a time."""

    def __init__(self, suites, say=print):
        self.runs = {}          # (suite, job name, mode) -> run dict
        # Under the tree, so that the host sees each run's output as it
        # goes (and after): build/conformance/SUITE-JOB-MODE/output.
        self.workdir = TOP / "build" / "conformance"
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.start = time.monotonic()
        jobs = [j for s in suites for j in SUITES[s] if _selected(j)]
        # The longest first, so that the two workers end together.
        order = {"test_socket": 0, "test_asyncio.test_events": 1,
                 "test_selectors": 2, "iostream_test": 3}
        jobs.sort(key=lambda j: order.get(j["name"], 9))
        work = [(j, m) for j in jobs for m in MODES]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futs = {pool.submit(run_job, j, m, i, self.workdir): (j, m)
                    for i, (j, m) in enumerate(work)}
            for f in concurrent.futures.as_completed(futs):
                j, m = futs[f]
                r = self.runs[(j["suite"], j["name"], m)] = f.result()
                n = sum(1 for v in r["results"].values() if v[0] == "pass")
                say(f"conformance: {time.monotonic() - self.start:4.0f} s "
                    f"{j['suite']}/{j['name']} [{m}]: rc {r['rc']}, "
                    f"{n}/{len(r['results'])} passed, {r['took']:.0f} s")
        self.took = time.monotonic() - self.start


@pytest.fixture(scope="module")
def lane(request):
    wanted = set()
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if cs and item.module.__name__ == __name__ and "suite" in cs.params:
            wanted.add(cs.params["suite"])
    need = [p for p in (SDRUN, PY311, PY3) if not os.path.exists(p)]
    if "selftests" in wanted:
        need += sorted({j["argv"][0] for j in SELFTESTS
                        if j["argv"][0] != "sh"
                        and not os.path.exists(j["argv"][0])})
        if not (BIN / "tcp_mmap").exists():
            need.append(str(BIN / "tcp_mmap"))
    if need:
        pytest.fail(f"missing: {need} (tests/conformance/build-selftests; scripts/install-deps)")
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def say(line):
        # Progress on the console, past pytest's capture.
        with capman.global_and_fixture_disabled():
            print(line, flush=True)

    say("")
    lane = Lane(sorted(wanted), say)
    say(f"conformance: {len(lane.runs)} runs in {lane.took:.0f} s")
    return lane


def _matches(table, suite, tid):
    key = f"{suite}:{tid}"
    return next((r for p, r in table.items() if fnmatch.fnmatch(key, p)),
                None)


def _excerpt(text, lines=25):
    text = (text or "").strip().splitlines()
    return "\n".join("      " + t for t in text[-lines:])


def compare(suite, runs):
    """(summary lines, differences) of a suite's runs of both modes."""
    tcp, sd = {}, {}
    for r in runs:
        (tcp if r["mode"] == "tcp" else sd).update(r["results"])
    count = {m: {s: sum(1 for v in d.values() if v[0] == s)
                 for s in ("pass", "fail", "skip")}
             for m, d in (("tcp", tcp), ("sd", sd))}
    diffs, known, gained = [], [], []
    for tid in sorted(tcp):
        if tcp[tid][0] != "pass":
            if sd.get(tid, ["?"])[0] == "pass":
                gained.append(tid)
            continue
        got = sd.get(tid, ["missing", "(the test did not report under "
                           "sdrun)"])
        if got[0] in ("pass",):
            continue
        if _matches(NOT_APPLICABLE, suite, tid):
            known.append((tid, _matches(NOT_APPLICABLE, suite, tid)))
        elif _matches(KNOWN_DIFFERENCES, suite, tid):
            known.append((tid, _matches(KNOWN_DIFFERENCES, suite, tid)))
        else:
            diffs.append((tid, got[0], got[1]))
    summary = [f"{suite}: tcp {len(tcp)} tests, {count['tcp']}; "
               f"sdrun {len(sd)} tests, {count['sd']}"]
    summary += [f"  known: {t}: {r}" for t, r in known]
    summary += [f"  failed on TCP, passed under sdrun: {t}" for t in gained]
    return summary, diffs


@pytest.mark.parametrize("suite", list(SUITES))
def test_suite_same_on_af_sd(suite, lane):
    """Every test of the suite that passes on TCP passes under sdrun, and
    sdrun's runs really went over AF_SD."""
    runs = [r for k, r in lane.runs.items() if k[0] == suite]
    if not runs:
        pytest.skip("no job selected")
    for r in sorted(runs, key=lambda r: (r["job"]["name"], r["mode"])):
        s = r["stats"]
        print(f"  {r['job']['name']} [{r['mode']}] rc={r['rc']} "
              f"{r['took']:.0f} s, redirected {s['redirected']}, "
              f"connects {s['connects']}, accepts {s['accepts']}, "
              f"fallback_no_listener {s['fallback_no_listener']}")
    summary, diffs = compare(suite, runs)
    print("\n".join(summary))
    problems = []
    for r in runs:
        s, name = r["stats"], f"{r['job']['name']} [{r['mode']}]"
        if r["mode"] == "tcp" and (s["redirected"] or s["connects"]):
            problems.append(f"{name}: AF_SD used on plain TCP: {s}")
        if r["mode"] == "sd" and not s["redirected"]:
            problems.append(f"{name}: no socket was redirected")
    sd_runs = [r for r in runs if r["mode"] == "sd"]
    if not sum(r["stats"]["connects"] for r in sd_runs) or \
            not sum(r["stats"]["accepts"] for r in sd_runs):
        problems.append("no AF_SD connection was made under sdrun")
    for tid, status, text in diffs:
        problems.append(f"{tid}: passed on TCP, {status} under sdrun:\n"
                        f"{_excerpt(text)}")
    assert not problems, (f"{len(diffs)} tests pass on TCP but not on "
                          "AF_SD\n" + "\n".join(summary) + "\n" +
                          "\n".join(problems))
