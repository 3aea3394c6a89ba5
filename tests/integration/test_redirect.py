"""Transparent redirection and TCP fallback (Documentation/redirect.rst):
unmodified programs under sdrun, on both ends, on one end, on neither; the
answers they get; and sdctl's counters proving which transport carried
their traffic."""
import errno
import json
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import (AF_SD, REDIRECT, SDCTL, TOP, StatsDelta,
                      netns_del, netns_pair, ns_protocol_sockets,
                      ns_sysctl, nsrun, prog, redirect, sd_stats, wait_for)
from sdsock import Family, sockname

HERE = pathlib.Path(__file__).resolve().parent
SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
PROBE = str(HERE / "redirect_probe.py")
SYSCTL = REDIRECT
SOL_SD, SD_REUSEPORT, SD_REDIRECTED = 0x5344, 2, 3

# (name, server under sdrun, client under sdrun)
VARIANTS = [("both", True, True), ("server", True, False),
            ("client", False, True), ("none", False, False)]
VARIANT_IDS = [v[0] for v in VARIANTS]


@pytest.fixture(autouse=True)
def redirect_and_no_rules():
    subprocess.run([SDCTL, "rules", "flush"], check=True)
    with redirect():
        yield
    subprocess.run([SDCTL, "rules", "flush"], check=True)


stats = sd_stats
Delta = StatsDelta


def under(sd, cmd):
    return [SDRUN] + cmd if sd else cmd


def check_transport(d, variant, n):
    """n or more connections went the variant's way, and none another."""
    fell = d["fallback_no_listener"], d["fallback_tcp_client"]
    if variant == "both":
        assert d["connects"] >= n and d["accepts"] >= n, d
        assert fell == (0, 0), d
    elif variant == "server":
        assert d["fallback_tcp_client"] >= n and d["connects"] == 0, d
    elif variant == "client":
        assert d["fallback_no_listener"] >= n, d
        assert d["connects"] == 0 and d["accepts"] == 0, d
    else:
        assert d["redirected"] == 0 and d["connects"] == 0, d
        assert fell == (0, 0), d


def free_tcp_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30):
    """Wait until a TCP socket listens on port, without connecting: a probe
    connection would be a TCP client that the server may accept after the
    test started counting.  A redirected listener shows too (its internal
    TCP socket listens)."""
    def up():
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in pathlib.Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
        return False
    assert wait_for(up, timeout), f"nothing listens on {port}"


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def need(*programs):
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        pytest.fail(f"not installed: {missing} (scripts/install-deps)")


# ---- the socket API answers as TCP's ---------------------------------------

def probe(sd, *args):
    out = subprocess.run(under(sd, [sys.executable, PROBE, *args]),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_answers_as_tcp(no_leak):
    """Every answer a probe of v4 and v6 sockets gets is TCP's, while the
    sockets underneath are AF_SD (the one thing it may tell apart)."""
    plain, redir = probe(False, "answers"), probe(True, "answers")
    for fam, want in (("v4", socket.AF_INET), ("v6", socket.AF_INET6)):
        for key in ("redirected", "listener redirected", "accepted redirected"):
            # TCP's own error for an unknown level (IPv4 and IPv6 differ).
            assert plain[fam].pop(key) in ("EOPNOTSUPP", "ENOTSUP",
                                           "ENOPROTOOPT")
            assert redir[fam].pop(key) == want, (fam, key)
    assert plain == redir
    assert plain["v4"]["domain"] == socket.AF_INET
    assert plain["v4"]["recv"] == "ping" and plain["v6"]["eof"] == ""


def test_redirect_off_gives_real_sockets():
    SYSCTL.write_text("0\n")
    d = Delta()
    answers = probe(True, "answers")
    assert answers["v4"]["redirected"] in ("EOPNOTSUPP", "ENOTSUP")
    assert d()["redirected"] == 0
    SYSCTL.write_text("1\n")
    answers = probe(True, "answers")
    assert answers["v4"]["redirected"] == socket.AF_INET
    assert d()["redirected"] >= 4


def test_bad_redirect_sysctl_rejected():
    for bad in ("2", "-1", "x"):
        with pytest.raises(OSError):
            SYSCTL.write_text(bad + "\n")
    assert SYSCTL.read_text().strip() == "1"


# ---- fallback: the matrix, with an asyncio echo server and client ------------

@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_asyncio_echo(variant, sd_server, sd_client, no_leak):
    port = free_tcp_port()
    srv = subprocess.Popen(under(sd_server, [sys.executable, PROBE, "echod",
                                             str(port)]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        d = Delta()
        out = probe(sd_client, "echo", str(port), "40")
        assert out["bytes"] == sum(len(f"{c}:{i}:") + i * 37 % 3000 + 1
                                   for c in range(4) for i in range(40))
        check_transport(d(), variant, 4)
    finally:
        srv.stdin.close()
        srv.wait(timeout=30)
    assert srv.returncode == 0


def test_epoll_entry_made_before_fallback(no_leak):
    """A fallback changes what the descriptor is; an epoll entry made before
    the connect must still be woken (forwarded from the TCP socket)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    port = lst.getsockname()[1]
    d = Delta()
    cli = subprocess.Popen(under(True, [sys.executable, PROBE, "epoll",
                                        str(port)]),
                           stdout=subprocess.PIPE, text=True)
    conn, _ = lst.accept()
    assert conn.recv(100) == b"over epoll"
    conn.sendall(b"back")
    out, _ = cli.communicate(timeout=30)
    res = json.loads(out)
    assert res == {"connect": "EINPROGRESS", "woken": True, "reply": "back",
                   "domain": socket.AF_INET}
    assert d()["fallback_no_listener"] == 1
    conn.close()
    lst.close()


def test_racing_connects_fall_back_once(no_leak):
    """Two threads connect one redirected socket at once to a port that
    only TCP listens on: the socket falls back once (counted once), one
    connect succeeds and the other gets TCP's own answer.  (A second
    fallback dropped the SIGIO entries of the TCP socket: the debug
    lane's kmemleak found one.)"""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(128)
    port = lst.getsockname()[1]
    rounds = 50
    d = Delta()
    with redirect():
        for _ in range(rounds):
            s = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
            both = threading.Barrier(2)
            got = []

            def connect(s=s, both=both, got=got):
                both.wait()
                got.append(Family.connect(s, "127.0.0.1", port))
            threads = [threading.Thread(target=connect) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert "OK" in got and set(got) <= {"OK", "EISCONN", "EALREADY"}, got
            conn, _ = lst.accept()
            conn.close()
            s.close()
    assert d()["fallback_no_listener"] == rounds
    lst.close()


# A bind or listen that waits for the socket lock while the connect of
# another thread falls back (75fbe8d).  To make that wait certain rather
# than lucky, the connect goes to "another host" (a second netns over a
# veth): a blocking connect there asks the link daemon with the socket
# locked, and the daemon, a stand-in in sd_race, keeps it waiting until the
# racing call is seen asleep in the kernel, then says TCP (the
# connect falls back, reason handshake).  See tests/progs/sd_race.c.
RACE_NS = ("sdrc-h1", "sdrc-h2")
RACE_ADDR = ("10.79.0.1", "10.79.0.2")
RACE_ROUNDS = 150


def in_ns(name, *cmd, **kw):
    return nsrun(name, *cmd, capture_output=True, text=True, **kw)


@pytest.fixture
def race_hosts():
    """h1 (redirect on; sd_race is its link daemon) and h2."""
    h1, h2 = RACE_NS
    netns_pair(h1, h2, "sdrc0", "sdrc1", *RACE_ADDR)
    for key, value in (("redirect", 1), ("rendezvous_timeout_ms", 30000)):
        err = ns_sysctl(h1, key, value)
        assert err is None, err
    yield h1
    netns_del(*RACE_NS)


def ns_sd_sockets(name):
    """AF_SD sockets in use in a netns (no_leak counts the suite's own)."""
    return ns_protocol_sockets(name)


def race_fallback(h1, op):
    """sd_race OP in h1 against h2, with a rule in h1 that denies AF_SD
    binds; its JSON, with h1's counter changes."""
    before = sd_stats(h1)
    start = time.monotonic()
    in_ns(h1, SDCTL, "rules", "add", "deny", "dir", "bind", check=True)
    try:
        out = in_ns(h1, prog("sd_race"), op, str(RACE_ROUNDS),
                    f"/run/netns/{RACE_NS[1]}", RACE_ADDR[1], timeout=300)
    finally:
        in_ns(h1, SDCTL, "rules", "flush", check=True)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    res["seconds"] = time.monotonic() - start
    after = sd_stats(h1)
    res["delta"] = {k: v - before.get(k, 0) for k, v in after.items()}
    print({**res, "delta": {k: v for k, v in res["delta"].items() if v}})
    assert wait_for(lambda: ns_sd_sockets(h1) == 0), \
        f"{ns_sd_sockets(h1)} AF_SD sockets left in {h1}"
    return res


def test_bind_waiting_for_a_connect_that_falls_back(race_hosts):
    """bind() of a redirected socket that waited for the lock while another
    thread's connect fell back is TCP's bind on TCP's socket, which TCP's
    connect bound before the socket became TCP's (sd_tcp_switch()): it
    fails with TCP's EINVAL, as a bind that came after a TCP connect
    does; never AF_SD's redirected bind, whose failure (here: EACCES, a
    rule denies AF_SD binds) released the TCP socket that the file had
    just been given.  The connection works every time."""
    res = race_fallback(race_hosts, "bind")
    answers, delta = res["answers"], res["delta"]
    assert answers == {"EINVAL OK": RACE_ROUNDS}, answers
    # Each bind was seen waiting for the lock that the connect held.
    assert res["waited"] == RACE_ROUNDS, res
    # Each connect fell back once, after asking the stand-in.
    assert delta["fallback_handshake"] == RACE_ROUNDS, delta
    assert delta["link_upcalls"] == RACE_ROUNDS, delta
    assert delta["fallback_no_listener"] == 0, delta


def test_listen_waiting_for_a_connect_that_falls_back(race_hosts):
    """listen() in the same race is TCP's listen on TCP's socket, whose
    connect is under way: TCP's EINVAL, and the connection works; never
    AF_SD's listen, whose failure (here: EACCES, a rule denies AF_SD
    binds) released the TCP socket under the file."""
    res = race_fallback(race_hosts, "listen")
    answers, delta = res["answers"], res["delta"]
    assert answers == {"EINVAL OK": RACE_ROUNDS}, answers
    assert res["waited"] == RACE_ROUNDS, res
    assert delta["fallback_handshake"] == RACE_ROUNDS, delta
    # No listener came of it, so no client of one.
    assert delta["fallback_no_listener"] == res["client_fallbacks"] == 0, \
        (res, delta)
    assert delta["denied_bind"] == 0, delta


def test_policy_rule_sends_over_tcp(no_leak):
    """sdctl rules add tcp: a redirected client falls back (reason policy)
    even to a redirected listener, which takes it as a TCP client."""
    port = free_tcp_port()
    subprocess.run([SDCTL, "rules", "add", "tcp", "rport", str(port)],
                   check=True, capture_output=True)
    d = Delta()
    srv = subprocess.Popen(under(True, [sys.executable, PROBE, "echod",
                                        str(port)]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        probe(True, "echo", str(port), "5")
        got = d()
        assert got["fallback_policy"] == 4 and got["connects"] == 0, got
        assert got["fallback_tcp_client"] == 4, got
    finally:
        srv.stdin.close()
        srv.wait(timeout=30)
    # A tcp rule is a connect rule only.
    bad = subprocess.run([SDCTL, "rules", "add", "tcp", "dir", "bind"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "connect" in bad.stderr


def test_sockets_show_transport_and_reason(no_leak):
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    port = lst.getsockname()[1]
    code = ("import socket,sys,time; c=socket.create_connection(("
            f"'127.0.0.1',{port})); c.sendall(b'x'*1000); print('up',flush=True);"
            " sys.stdin.read()")
    cli = subprocess.Popen(under(True, [sys.executable, "-c", code]),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert cli.stdout.readline().strip() == "up"
        conn, _ = lst.accept()
        assert len(conn.recv(1000, socket.MSG_WAITALL)) == 1000
        socks = json.loads(subprocess.run([SDCTL, "--json", "sockets"],
                                          check=True, capture_output=True,
                                          text=True).stdout)
        mine = [s for s in socks if s["peer"].endswith(f":{port}")]
        assert len(mine) == 1, socks
        assert mine[0]["transport"] == "tcp"
        assert mine[0]["fallback"] == "no_listener"
        assert mine[0]["state"] == "ESTAB"
        assert mine[0]["tx_bytes"] >= 1000
    finally:
        cli.stdin.close()
        cli.wait(timeout=30)
        lst.close()


def test_socket_passed_between_processes(no_leak):
    """A redirected connection (shm) passed over SCM_RIGHTS keeps working
    in the receiving process, which is under sdrun too."""
    code = r"""
import array, os, socket, sys
lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(1)
c = socket.create_connection(lst.getsockname()); s, _ = lst.accept()
a, b = socket.socketpair(socket.AF_UNIX)
if os.fork() == 0:
    msg, anc, _, _ = b.recvmsg(10, socket.CMSG_SPACE(4))
    fd = array.array("i", anc[0][2])[0]
    t = socket.socket(fileno=fd)
    t.sendall(t.recv(100).upper())
    os._exit(0)
a.sendmsg([b"f"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [s.fileno()]))])
s.close()
c.sendall(b"passed")
print(c.recv(100).decode(), c.getsockopt(0x5344, 3))
os.wait()
"""
    d = Delta()
    out = subprocess.run(under(True, [sys.executable, "-c", code]),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PASSED", str(int(socket.AF_INET))]
    assert d()["connects"] == 1


# ---- real programs -------------------------------------------------------------

@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_redis(variant, sd_server, sd_client, tmp_path, no_leak):
    need("redis-server", "redis-cli", "redis-benchmark")
    port = free_tcp_port()
    srv = subprocess.Popen(under(sd_server, [
        "redis-server", "--port", str(port), "--save", "", "--appendonly",
        "no", "--dir", str(tmp_path), "--logfile", str(tmp_path / "log")]))
    try:
        wait_port(port)
        d = Delta()
        cli = ["redis-cli", "-p", str(port)]
        run = lambda *a: subprocess.run(under(sd_client, cli + list(a)),  # noqa: E731
                                        capture_output=True, text=True,
                                        timeout=60, check=True).stdout.strip()
        assert run("set", "greeting", "hello world") == "OK"
        for pipeline in ("1", "16"):
            out = subprocess.run(under(sd_client, [
                "redis-benchmark", "-p", str(port), "-n", "1000", "-c", "4",
                "-P", pipeline, "-t", "set,get,incr", "-q"]),
                capture_output=True, text=True, timeout=120, check=True)
            assert "GET:" in out.stdout and "SET:" in out.stdout, out.stdout
        assert run("get", "greeting") == "hello world"
        assert run("set", "n", "0") == "OK"
        for _ in range(5):
            run("incr", "n")
        assert run("get", "n") == "5"
        check_transport(d(), variant, 8)
    finally:
        stop(srv)


NGINX_CONF = """
user root;
worker_processes 3;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
    }}
}}
"""


@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_nginx(variant, sd_server, sd_client, tmp_path, no_leak):
    need("nginx", "curl", "wrk")
    port = free_tcp_port()
    (tmp_path / "www").mkdir()
    body = os.urandom(100_000).hex()
    (tmp_path / "www" / "index.html").write_text("hello from nginx\n")
    (tmp_path / "www" / "big.txt").write_text(body)
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp_path, port=port))
    srv = subprocess.Popen(under(sd_server, ["nginx", "-c", str(conf),
                                             "-e", str(tmp_path / "error.log")]))
    try:
        wait_port(port)
        d = Delta()
        base = f"http://127.0.0.1:{port}"
        get = lambda path: subprocess.run(  # noqa: E731
            under(sd_client, ["curl", "-sS", "--fail", base + path]),
            capture_output=True, text=True, timeout=60, check=True).stdout
        assert get("/") == "hello from nginx\n"
        assert get("/big.txt") == body
        out = subprocess.run(under(sd_client, [
            "wrk", "-t", "2", "-c", "8", "-d", "2s", base + "/"]),
            capture_output=True, text=True, timeout=60, check=True).stdout
        assert "Requests/sec" in out and "Socket errors" not in out, out
        check_transport(d(), variant, 8)
    finally:
        stop(srv)


@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_iperf3(variant, sd_server, sd_client, no_leak):
    need("iperf3")
    port = free_tcp_port()
    d = Delta()
    srv = subprocess.Popen(under(sd_server, ["iperf3", "-s", "-1", "-p",
                                             str(port)]),
                           stdout=subprocess.DEVNULL)
    try:
        time.sleep(1)
        out = subprocess.run(under(sd_client, [
            "iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J"]),
            capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        res = json.loads(out.stdout)
        # The receiver's total is taken when the test ends, so it may lag
        # the sender's by what was still in flight (on TCP too).
        sent = res["end"]["sum_sent"]["bytes"]
        got = res["end"]["sum_received"]["bytes"]
        assert sent > 0 and sent // 2 <= got <= sent, (sent, got)
        check_transport(d(), variant, 2)
        srv.wait(timeout=30)
        assert srv.returncode == 0
    finally:
        stop(srv)


@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_sockperf(variant, sd_server, sd_client, no_leak):
    need("sockperf")
    port = free_tcp_port()
    srv = subprocess.Popen(under(sd_server, ["sockperf", "server", "--tcp",
                                             "-i", "127.0.0.1", "-p",
                                             str(port)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        d = Delta()
        for mode in ("ping-pong", "throughput"):
            out = subprocess.run(under(sd_client, [
                "sockperf", mode, "--tcp", "-i", "127.0.0.1", "-p", str(port),
                "-t", "1", "-m", "64"]),
                capture_output=True, text=True, timeout=120)
            text = out.stdout + out.stderr
            assert out.returncode == 0, text
            assert "Summary:" in text and "ERROR" not in text, text
        check_transport(d(), variant, 2)
    finally:
        stop(srv)


@pytest.fixture(scope="module")
def pg_cluster():
    """An initialised PostgreSQL data directory owned by postgres."""
    need("pgbench")
    bindir = pathlib.Path("/usr/lib/postgresql/15/bin")
    if not (bindir / "initdb").exists():
        pytest.fail("PostgreSQL 15 is not installed (scripts/install-deps)")
    # Not under pytest's own folder, which only root may enter.
    base = pathlib.Path(tempfile.mkdtemp(prefix="sd-pg-", dir="/tmp"))
    os.chmod(base, 0o777)
    data = base / "data"
    subprocess.run(["runuser", "-u", "postgres", "--", str(bindir / "initdb"),
                    "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True, timeout=600)
    yield bindir, base, data
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("variant,sd_server,sd_client", VARIANTS,
                         ids=VARIANT_IDS)
def test_postgres_pgbench(variant, sd_server, sd_client, pg_cluster, no_leak):
    bindir, base, data = pg_cluster
    port = free_tcp_port()
    sockdir = base / f"sock-{variant}"
    sockdir.mkdir()
    os.chmod(sockdir, 0o777)
    srv = subprocess.Popen(["runuser", "-u", "postgres", "--"] + under(
        sd_server, [str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                    "-c", "listen_addresses=127.0.0.1",
                    "-c", f"unix_socket_directories={sockdir}",
                    "-c", "fsync=off"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 120)
        d = Delta()
        pg = ["runuser", "-u", "postgres", "--"]
        common = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
        subprocess.run(pg + under(sd_client, [str(bindir / "pgbench"), "-i",
                                              "-s", "1", "-q"] + common +
                                  ["postgres"]),
                       check=True, capture_output=True, timeout=300)
        out = subprocess.run(pg + under(sd_client, [
            str(bindir / "pgbench"), "-n", "-c", "3", "-t", "30", "-C"] +
            common + ["postgres"]), capture_output=True, text=True,
            timeout=300, check=True).stdout
        assert "number of transactions actually processed: 90/90" in out, out
        rows = subprocess.run(pg + under(sd_client, [
            str(bindir / "psql"), "-At", "-c",
            "select count(*) from pgbench_accounts"] + common + ["postgres"]),
            capture_output=True, text=True, timeout=120, check=True).stdout
        assert rows.strip() == "100000"
        check_transport(d(), variant, 90)
    finally:
        stop(srv)


# ---- the protocol values, a listener's end, reuseport ------------------------

SD_PROTO_INET, SD_PROTO_INET6 = 0x10002, 0x1000A


def test_redirected_protocols_follow_the_sysctl(no_leak):
    for proto, fam in ((SD_PROTO_INET, socket.AF_INET),
                       (SD_PROTO_INET6, socket.AF_INET6)):
        s = socket.socket(AF_SD, socket.SOCK_STREAM, proto)
        assert s.getsockopt(SOL_SD, SD_REDIRECTED) == fam
        s.close()
        SYSCTL.write_text("0\n")
        with pytest.raises(OSError) as e:
            socket.socket(AF_SD, socket.SOCK_STREAM, proto)
        assert e.value.errno == errno.EPROTONOSUPPORT
        SYSCTL.write_text("1\n")
    # Neighbours of the two values are no protocol at all.
    for proto in (0x10000, 0x10001, 0x10003, SD_PROTO_INET6 + 1, 0x20002):
        with pytest.raises(OSError) as e:
            socket.socket(AF_SD, socket.SOCK_STREAM, proto)
        assert e.value.errno == errno.EPROTONOSUPPORT, hex(proto)
    s = socket.socket(AF_SD, socket.SOCK_STREAM, 0)
    assert s.getsockopt(SOL_SD, SD_REDIRECTED) == 0
    s.close()


def test_listener_closed_with_both_kinds_queued(no_leak):
    """A redirected listener with an AF_SD client and a plain TCP client
    queued, closed unaccepted: both clients see the end, nothing leaks,
    and the port is free again for TCP and AF_SD."""
    # Python's socket module knows no AF_SD addresses: sdsock's calls.
    lst = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.bind(lst, "127.0.0.1", 0) == "OK"
    lst.listen(4)
    port = sockname(lst)[1]
    sd_client = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.connect(sd_client, "127.0.0.1", port) == "OK"
    tcp_client = socket.create_connection(("127.0.0.1", port))
    assert wait_for(lambda: select.select([lst], [], [], 0)[0])
    lst.close()
    for c in (sd_client, tcp_client):
        c.settimeout(5)
        try:
            assert c.recv(10) == b""
        except ConnectionResetError:
            pass
        c.close()
    again = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.bind(again, "127.0.0.1", port) == "OK"
    again.close()


def test_reuseport_listeners_share_tcp_clients(no_leak):
    """Two redirected listeners with SO_REUSEPORT (SD_REUSEPORT) on one
    port: both get plain TCP clients, through their TCP sockets."""
    lsts = []
    port = 0
    for _ in range(2):
        s = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        s.setsockopt(SOL_SD, SD_REUSEPORT, 1)
        assert Family.bind(s, "127.0.0.1", port) == "OK"
        port = sockname(s)[1]
        s.listen(64)
        s.setblocking(False)
        lsts.append(s)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    got = [0, 0]
    deadline = time.monotonic() + 10
    while sum(got) < len(clients) and time.monotonic() < deadline:
        for i, s in enumerate(lsts):
            try:
                c = Family.accept(s)
            except BlockingIOError:
                continue
            assert c.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN) == \
                socket.AF_INET    # a plain TCP socket now
            got[i] += 1
            c.close()
    assert sum(got) == len(clients) and min(got) > 0, got
    for c in clients + lsts:
        c.close()


def sd_reuseport_listener(host, port):
    """A redirected listener (an AF_SD socket with a TCP side) with
    SD_REUSEPORT, as libsd makes of SO_REUSEPORT."""
    s = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    s.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert Family.bind(s, host, port) == "OK"
    s.listen(64)
    return s


def tcp_reuseport_listener(host, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(64)
    return s


def sd_connect(host, port):
    """A redirected client, connected (over AF_SD or its TCP fallback)."""
    c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.connect(c, host, port) == "OK"
    return c


def domain(s):
    return s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)


def test_plain_tcp_listener_of_the_exact_address_takes_redirected_clients(
        no_leak):
    """An AF_SD listener on 0.0.0.0 and a plain TCP listener of the same
    owner on 127.0.0.1 share a port (SO_REUSEPORT): a redirected client
    of 127.0.0.1 goes to the plain one, as TCP's would, over TCP (reason
    tcp_listener); one of 127.0.0.2 goes to the AF_SD one."""
    sd_lst = sd_reuseport_listener("0.0.0.0", 0)
    port = sockname(sd_lst)[1]
    tcp_lst = tcp_reuseport_listener("127.0.0.1", port)
    d = Delta()
    c = sd_connect("127.0.0.1", port)
    tcp_lst.settimeout(10)
    a, peer = tcp_lst.accept()
    assert peer[1] == sockname(c)[1]
    c.sendall(b"to the plain one")
    assert a.recv(64) == b"to the plain one"
    got = d()
    assert got["fallback_tcp_listener"] == 1, got
    assert got["connects"] == 0 and got["accepts"] == 0, got
    assert not select.select([sd_lst], [], [], 0)[0]

    d = Delta()
    c2 = sd_connect("127.0.0.2", port)
    sd_lst.settimeout(10)
    a2 = Family.accept(sd_lst)
    assert domain(a2) == AF_SD
    c2.sendall(b"to the AF_SD one")
    assert a2.recv(64) == b"to the AF_SD one"
    got = d()
    assert got["connects"] == 1 and got["fallback_tcp_listener"] == 0, got
    assert not select.select([tcp_lst], [], [], 0)[0]
    for s in (c, a, c2, a2, tcp_lst, sd_lst):
        s.close()


def test_plain_tcp_listener_in_the_reuseport_group_gets_its_share(no_leak):
    """An AF_SD listener and a plain TCP listener in one reuseport group:
    TCP's hash of each redirected client's port chooses, the plain one's
    clients come over TCP from the port that was hashed (so none lands on
    the AF_SD listener's TCP side), and each gets some of 32."""
    sd_lst = sd_reuseport_listener("127.0.0.1", 0)
    port = sockname(sd_lst)[1]
    tcp_lst = tcp_reuseport_listener("127.0.0.1", port)
    d = Delta()
    clients = [sd_connect("127.0.0.1", port) for _ in range(32)]
    ports = {sockname(c)[1] for c in clients}
    sd_got = tcp_got = 0
    accepted = []

    def accept_ready():
        nonlocal sd_got, tcp_got
        r, _, _ = select.select([sd_lst, tcp_lst], [], [], 1)
        if sd_lst in r:
            a = Family.accept(sd_lst)
            assert domain(a) == AF_SD    # no TCP client on its TCP side
            sd_got += 1
            accepted.append(a)
        if tcp_lst in r:
            a, peer = tcp_lst.accept()
            assert peer[1] in ports
            tcp_got += 1
            accepted.append(a)
        return sd_got + tcp_got == len(clients)
    # TCP queues a child when the client's last ACK has been processed.
    assert wait_for(accept_ready, 60), (sd_got, tcp_got)
    got = d()
    assert got["fallback_tcp_listener"] == tcp_got, got
    assert got["connects"] == sd_got, got
    # 32 ports hashed over two sockets: all on one happens once in 2^31.
    assert sd_got and tcp_got, (sd_got, tcp_got)
    for s in clients + accepted + [tcp_lst, sd_lst]:
        s.close()
