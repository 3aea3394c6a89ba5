"""Two test hosts (tests/vm/pair): this guest (A) and the peer guest (B),
each with its own af_sd.ko and a soft-RoCE device (rxe0) on the link
between them, and the link daemon (sdlinkd, Documentation/sdlinkd.rst) on
each, started by the tests with the same fabric key (sdctl key set).

Programs are unmodified Python TCP programs under sdrun on both hosts: a
connect of A to B asks A's daemon, which asks B's; a connection they agree
on is carried by the daemons over RDMA, every other one goes over TCP with
its reason counted.  Every case checks what the counters of A (and of B
where it matters) say the connection was.

Not collected by the single-guest suite (the file name does not start with
test_); scripts/check's "pair" stage runs it:

    tests/vm/pair --rdma -- python3 -m pytest -q tests/integration/pair_remote.py
"""
import hashlib
import os
import random
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import SDCTL, TOP
from pairlink import OTHER_KEY, SDRUN, WAIT, Daemons, moved, peer, \
    sdctl_key, set_up, stats  # noqa: F401

ECHO = str(TOP / "tests" / "integration" / "echo_server.py")
APP_PORT = 9191

CLIENT = """
import os, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    c = socket.create_connection((host, port))
    data = os.urandom(200000)
    c.sendall(data)
    got = b""
    while len(got) < len(data):
        d = c.recv(65536)
        assert d, "EOF before the echo was whole"
        got += d
    assert got == data, "the echo differs"
    c.close()
print("ok")
"""


@pytest.fixture
def settings(peer):
    """Redirection on both hosts, the kernel's bound on a verdict at its
    maximum, the same fabric key on both; all back as it was after, and
    no key."""
    restore = set_up(peer)
    yield
    restore()


@pytest.fixture
def daemons(peer, settings):
    """The daemons a test starts (Daemons.start_a, start_b); all stopped
    after, their logs printed."""
    d = Daemons(peer)
    yield d
    d.close()


@pytest.fixture
def linked(daemons):
    """sdlinkd on both hosts, with RDMA: B's first, so that A's first
    connect finds it."""
    daemons.start_b()
    daemons.start_a()
    return daemons


def spawn_ready(peer, argv):
    srv = peer.spawn(argv)
    line = srv.readline(WAIT)
    if line != "ready":
        srv.kill()
        pytest.fail(f"{argv} on B did not start: {line} {srv.stderr}")
    return srv


def echo_clients(peer, port, n, sdrun_server=True):
    """The echo server on B's port (under sdrun, or not), and CLIENT under
    sdrun here making n connections to it, each echoing 200 kB of random
    bytes checked: the counters of A and B that moved."""
    before, pbefore = stats(), stats(peer)
    argv = [sys.executable, ECHO, "", str(port)]
    srv = spawn_ready(peer, [SDRUN] + argv if sdrun_server else argv)
    try:
        out = subprocess.run([SDRUN, sys.executable, "-c", CLIENT,
                              peer.remote, str(port), str(n)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    finally:
        srv.kill()
    return moved(before, stats()), moved(pbefore, stats(peer))


def carried(n):
    """What n connections the daemons carried move on A and on B."""
    return {"link_upcalls": n, "link_via": n}, {"link_incoming": n}


def pingpong(peer, iters, port=18515, timeout=240):
    """A reliable-connected ping-pong between the two rxe devices
    (ibv_rc_pingpong, its server on B): A's end's output, and B's end's
    exit status (None when A's end failed)."""
    cmd = ["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", str(iters),
           "-p", str(port)]
    srv = peer.spawn(cmd)
    try:
        time.sleep(1)
        out = subprocess.run(cmd + [peer.remote], capture_output=True,
                             text=True, timeout=timeout)
        return out, srv.wait(timeout) if out.returncode == 0 else None
    finally:
        srv.kill()


def test_the_rdma_devices_talk(peer):
    """The test bed itself: a reliable-connected ping-pong between the two
    rxe devices (ibv_rc_pingpong), both ends must succeed."""
    out, srv_rc = pingpong(peer, 20)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "20 iters" in out.stdout, out.stdout
    assert srv_rc == 0, srv_rc


def test_unmodified_programs_over_rdma(peer, linked):
    """An echo server under sdrun on B, a client under sdrun on A: three
    connections, 200 kB each echoed and checked, each carried by the
    daemons (A's link_via, B's link_incoming, both daemons' logs), no
    fallback and no reset."""
    a, b = echo_clients(peer, APP_PORT, 3)
    assert (a, b) == carried(3)
    for d in (linked.a, linked.b):
        assert d.stop() == 0
        k = d.counters()
        assert k["carried"] == 3 and k["resets"] == 0 and k["copies"] == 0, k
        assert k["bytes"] >= 3 * 200000, k


def test_host_without_a_daemon_gets_tcp(peer, daemons):
    """Only A runs a daemon: peer_no_sd, the first connect by dialling,
    the next from the daemon's peer cache."""
    da = daemons.start_a()
    a, b = echo_clients(peer, APP_PORT + 1, 2)
    assert a == {"link_upcalls": 2, "fallback_peer_no_sd": 2}, a
    assert b == {"fallback_tcp_client": 2}, b
    assert da.stop() == 0
    assert "(remembered)" in da.text()


def test_no_rdma_gives_tcp(peer, daemons):
    """B's daemon has no RDMA (--no-rdma): the daemons agree on TCP,
    reason no_rdma, and the connections carry their bytes over it."""
    daemons.start_b("--no-rdma")
    daemons.start_a()
    a, b = echo_clients(peer, APP_PORT + 2, 2)
    assert a == {"link_upcalls": 2, "fallback_no_rdma": 2}, a
    assert b == {"fallback_tcp_client": 2}, b


def test_plain_tcp_server_gets_tcp(peer, linked):
    """B's server is not under sdrun (a plain TCP listener): B's daemon
    finds no AF_SD listener there, no_listener."""
    a, b = echo_clients(peer, APP_PORT + 3, 2, sdrun_server=False)
    assert a == {"link_upcalls": 2, "fallback_no_listener": 2}, a
    assert not b, b


@pytest.mark.parametrize("peer_key", [OTHER_KEY, None],
                         ids=["other_key", "no_key"])
def test_wrong_key_at_the_peer_is_auth(peer, daemons, peer_key):
    """B's daemon has another fabric key, or none: the session fails
    authentication, and A's connects go over TCP with reason auth,
    counted, and shown so by sdctl stats."""
    sdctl_key(peer_key, peer)
    db = daemons.start_b()
    daemons.start_a()
    before = stats()
    a, b = echo_clients(peer, APP_PORT + 4, 1)
    assert a == {"link_upcalls": 1, "fallback_auth": 1}, a
    assert b == {"fallback_tcp_client": 1}, b
    db.expect("authentication failed" if peer_key else "no fabric key here")
    text = subprocess.run([SDCTL, "stats"], capture_output=True, text=True,
                          timeout=WAIT, check=True).stdout
    shown = re.search(r"^\s*fallback_auth\b\D*(\d+)\s*$", text, re.M)
    assert shown and int(shown.group(1)) == before["fallback_auth"] + 1, text


SINK_SUM = """
import hashlib, socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
print("accepted", flush=True)
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(65536)
    if not d:
        break
    h.update(d)
    n += len(d)
print(n, h.hexdigest(), flush=True)
"""

FORKER = r"""
import os, random, socket, sys
n = int(sys.argv[3])
data = random.Random(7).randbytes(2 * n)
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(data[:n // 2])
os.set_inheritable(c.fileno(), True)
if os.fork() == 0:
    # The child sends some, then becomes another program, which sends
    # the rest; its parent has exited meanwhile.
    c.sendall(data[n // 2:n])
    os.execv(sys.executable, [sys.executable, "-c",
        "import os, random, socket, sys, time; "
        "n = int(sys.argv[2]); "
        "data = random.Random(7).randbytes(2 * n); "
        "c = socket.socket(fileno=int(sys.argv[1])); "
        "time.sleep(0.5); "
        "c.sendall(data[n:]); c.close()", str(c.fileno()), str(n)])
os._exit(0)
"""


def test_fork_exec_exit_mid_stream(peer, linked):
    """A program under sdrun on A sends, forks and exits; its child sends
    more and execs another program, which sends the rest: B's sink gets
    every byte (checked by SHA-256), then the end of stream, over a
    connection the daemons carried."""
    n = 2 << 20
    port = APP_PORT + 5
    before, pbefore = stats(), stats(peer)
    srv = spawn_ready(peer, [SDRUN, sys.executable, "-c", SINK_SUM,
                             str(port)])
    try:
        out = subprocess.run([SDRUN, sys.executable, "-c", FORKER,
                              peer.remote, str(port), str(n)],
                             capture_output=True, text=True, timeout=WAIT)
        assert out.returncode == 0, out.stderr
        assert srv.readline(WAIT) == "accepted"
        want = random.Random(7).randbytes(2 * n)
        line = srv.readline(600)
        assert line == f"{len(want)} {hashlib.sha256(want).hexdigest()}", \
            (line, srv.rc, srv.stderr)
        assert srv.wait(WAIT) == 0, srv.stderr
    finally:
        srv.kill()
    assert (moved(before, stats()), moved(pbefore, stats(peer))) == \
        carried(1)


STREAMER = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
sys.stdin.readline()
chunk = b"s" * 65536
sent = 0
try:
    while True:
        c.sendall(chunk)
        sent += len(chunk)
        if sent == 1 << 20:
            print("streaming", flush=True)
except OSError as e:
    print("error", type(e).__name__, flush=True)
"""

SINK = """
import socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
print("accepted", flush=True)
try:
    while c.recv(1 << 20):
        pass
    print("end EOF", flush=True)
except OSError as e:
    print("end", type(e).__name__, flush=True)
"""


class Stream:
    """STREAMER under sdrun here sending without end to SINK under sdrun
    on B's port, over a connection the daemons carry; the counters of
    both hosts from before it."""

    def __init__(self, peer, port):
        self.before, self.pbefore = stats(), stats(peer)
        self.srv = spawn_ready(peer, [SDRUN, sys.executable, "-c", SINK,
                                      str(port)])
        self.cli = subprocess.Popen([SDRUN, sys.executable, "-c", STREAMER,
                                     peer.remote, str(port)],
                                    stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
        assert self.cli.stdout.readline() == "connected\n"
        assert self.srv.readline(WAIT) == "accepted"
        assert moved(self.before, stats()) == carried(1)[0]
        self.cli.stdin.write("go\n")
        self.cli.stdin.flush()
        assert self.cli.stdout.readline() == "streaming\n"

    def client_end(self, why=lambda: ""):
        """What the client's sends ended in, and the seconds it took; it
        fails when they did not end within WAIT (with why())."""
        t0 = time.monotonic()
        r, _, _ = select.select([self.cli.stdout], [], [], WAIT)
        if not r:
            pytest.fail(f"the client still sends after {WAIT} s: {why()}")
        line = self.cli.stdout.readline().split()
        took = time.monotonic() - t0
        assert self.cli.wait(WAIT) == 0
        return line, took

    def close(self):
        if self.cli.poll() is None:
            self.cli.kill()
        self.cli.wait()
        self.srv.kill()


@pytest.fixture
def stream(peer, linked):
    made = []

    def make(port):
        s = Stream(peer, port)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def test_peer_killed_mid_transfer_is_an_error_not_a_hang(peer, stream):
    """The sink on B is killed while A streams to it over RDMA: A's sends
    end in an error (a reset or a broken pipe), not a hang."""
    s = stream(APP_PORT + 6)
    s.srv.kill()
    line, took = s.client_end()
    assert line[:1] == ["error"] and line[1] in (
        "ConnectionResetError", "BrokenPipeError"), line
    print(f"the client failed {took:.1f} s after the kill: {line}")


IDLE_SERVER = """
import socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
print("got", c.recv(100).decode(), flush=True)
try:
    print("recv", repr(c.recv(100)), flush=True)
except OSError as e:
    print("recv", type(e).__name__, flush=True)
"""

IDLE_CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"hello")
print("sent", flush=True)
time.sleep(600)
"""


def test_idle_peer_killed_ends_the_connection(peer, linked):
    """A client under sdrun sends a request and waits; the server on B
    reads it and waits for more.  The client is killed (SIGKILL): the
    server's recv returns the end of stream (or a reset) instead of
    waiting for ever."""
    port = APP_PORT + 7
    before = stats()
    srv = spawn_ready(peer, [SDRUN, sys.executable, "-c", IDLE_SERVER,
                             str(port)])
    cli = None
    try:
        cli = subprocess.Popen([SDRUN, sys.executable, "-c", IDLE_CLIENT,
                                peer.remote, str(port)],
                               stdout=subprocess.PIPE, text=True)
        assert cli.stdout.readline().strip() == "sent"
        assert srv.readline(WAIT) == "got hello"
        cli.kill()
        cli.wait(WAIT)
        line = srv.readline(WAIT)
        assert line in ("recv ConnectionResetError", "recv b''"), line
    finally:
        if cli and cli.poll() is None:
            cli.kill()
        srv.kill()
    assert moved(before, stats()) == carried(1)[0]


ONE_ECHO = """
import socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
c.close()
lst.close()
"""

REUSER = """
import socket, sys
host, port, mine = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = socket.socket()
c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
c.bind(("", mine))
c.connect((host, port))
c.sendall(b"ping")
assert c.recv(4) == b"ping"
c.close()
print("ok", flush=True)
"""


def test_a_closed_connections_ports_are_reusable(peer, linked):
    """Three rounds: a server under sdrun on B listens on the same port,
    a client under sdrun on A connects from the same port, and they echo
    over a carried connection, then both close.  Each round's ports are
    free again for the next."""
    port, mine = APP_PORT + 8, APP_PORT + 9
    before, pbefore = stats(), stats(peer)
    for _ in range(3):
        srv = spawn_ready(peer, [SDRUN, sys.executable, "-c", ONE_ECHO,
                                 str(port)])
        try:
            out = subprocess.run([SDRUN, sys.executable, "-c", REUSER,
                                  peer.remote, str(port), str(mine)],
                                 capture_output=True, text=True, timeout=WAIT)
            assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
            # It has closed its listener and its connection: gone.
            assert srv.wait(WAIT) == 0, srv.stderr
        finally:
            srv.kill()
    assert (moved(before, stats()), moved(pbefore, stats(peer))) == \
        carried(3)


def test_peer_daemon_killed_mid_stream(peer, stream, linked):
    """B's sdlinkd killed with SIGKILL while A streams: A's program sees a
    reset (its daemon's session with B ends, and with it what it
    carried), B's kernel counts the reset of its daemon's end, and with
    B's daemon started again the next connection is carried."""
    s = stream(APP_PORT + 10)
    assert linked.b.stop(signal.SIGKILL) == -signal.SIGKILL
    line, took = s.client_end()
    assert line == ["error", "ConnectionResetError"], line
    assert s.srv.readline(WAIT) == "end ConnectionResetError"
    assert moved(s.pbefore, stats(peer)) == {"link_incoming": 1,
                                             "link_resets": 1}
    print(f"the client failed {took:.1f} s after the kill")
    linked.start_b()
    a, b = echo_clients(peer, APP_PORT + 11, 1)
    assert (a, b) == carried(1)


def test_own_daemon_killed_mid_stream(peer, stream, linked):
    """A's sdlinkd killed with SIGKILL while A streams: the kernel resets
    A's program's connection (link_resets), B's program sees its end
    reset too; with A's daemon started again the next connection is
    carried."""
    s = stream(APP_PORT + 12)
    assert linked.a.stop(signal.SIGKILL) == -signal.SIGKILL
    line, took = s.client_end()
    assert line == ["error", "ConnectionResetError"], line
    assert moved(s.before, stats()) == {"link_upcalls": 1, "link_via": 1,
                                        "link_resets": 1}
    assert s.srv.readline(WAIT) == "end ConnectionResetError"
    print(f"the client failed {took:.1f} s after the kill")
    linked.start_a()
    a, b = echo_clients(peer, APP_PORT + 13, 1)
    assert (a, b) == carried(1)


ROCE_PORT = 4791
RXE_COUNTERS = ("grep -r . /sys/class/infiniband/*/ports/1/hw_counters/ "
                "2>/dev/null | sed 's|.*/hw_counters/||'")


def nic():
    return next(n for n in sorted(os.listdir("/sys/class/net")) if n != "lo")


def drop_roce(dev):
    """Drop every RoCE v2 packet (UDP port 4791) that reaches A's NIC: the
    RDMA path between the hosts breaks both ways (B's writes, and the
    acknowledgements of A's, are lost), the control sessions (TCP) and the
    agent's connections do not.  Only received packets: a packet dropped
    on its way out fails rxe's send, and rxe posts it again at once, for
    ever (Debian's 6.1: rxe_xmit_packet()'s -EAGAIN), where a lost one
    is retried within its bound.  Returns what puts it back."""
    def tc(*args, check=True):
        return subprocess.run(["tc", *args], capture_output=True, text=True,
                              check=check)
    tc("qdisc", "add", "dev", dev, "clsact")
    try:
        tc("filter", "add", "dev", dev, "ingress", "protocol", "ip",
           "flower", "ip_proto", "udp", "dst_port", str(ROCE_PORT),
           "action", "drop")
    except subprocess.CalledProcessError as e:
        tc("qdisc", "del", "dev", dev, "clsact", check=False)
        pytest.fail(f"tc: {e.stderr}")
    return lambda: tc("qdisc", "del", "dev", dev, "clsact")


def rdma_path_back(peer):
    """Wait (bounded) until a queue pair between the two devices works
    again, so that what follows does not meet what is left of the
    outage."""
    deadline = time.monotonic() + WAIT
    port = 18600
    while True:
        port += 1
        out, srv_rc = pingpong(peer, 5, port, timeout=60)
        if srv_rc == 0:
            return
        assert time.monotonic() < deadline, \
            "the RDMA path did not come back:\n" + out.stdout + out.stderr
        time.sleep(1)


def test_rdma_path_lost_mid_transfer_is_a_reset(peer, stream, linked):
    """The RDMA path between the hosts breaks while A streams (A's NIC
    drops every RoCE packet; the control session, over TCP, lives on):
    the queue pair's retries run out, the carrier resets the connection,
    and A's program sees ECONNRESET within a bound rather than hanging;
    B's program sees its end reset (A's daemon tells B's).  With the
    path back, the next connection is carried."""
    s = stream(APP_PORT + 14)
    dev = nic()
    restore = drop_roce(dev)

    def why():
        return subprocess.run(
            ["sh", "-c", f"tc -s filter show dev {dev} ingress; "
             f"{RXE_COUNTERS}"],
            capture_output=True, text=True).stdout
    try:
        line, took = s.client_end(why)
        assert line == ["error", "ConnectionResetError"], line
        assert s.srv.readline(WAIT) == "end ConnectionResetError"
    finally:
        restore()
    print(f"the client failed {took:.1f} s after the path broke")
    rdma_path_back(peer)
    a, b = echo_clients(peer, APP_PORT + 15, 1)
    assert (a, b) == carried(1)
