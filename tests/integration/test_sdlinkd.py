"""sdlinkd, the link daemon (tools/sdlinkd, Documentation/sdlinkd.rst),
between two hosts: network namespaces A and B joined by a veth pair.  A
redirected socket of A connects to a plain TCP echo server of B; sdlinkd
runs in A, and in B when the case needs it.  Every case checks the one
fallback counter of A that the connect moved, and that the connection,
which goes over TCP, carries data both ways intact.

The kernel's bound on a connect's wait (net.sd.rendezvous_timeout_ms,
which is the daemon's too) is set to its maximum, so that no verdict here
depends on how fast the guest runs."""
import os
import pathlib
import queue
import random
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading

import pytest

from conftest import AF_SD, TOP, in_netns, netns_del, netns_pair, nspopen, \
    nsrun, ns_sysctl, rxe_pair, sd_stats
from sdgenl import Genl, attr, attr_u8, mapped, nest
import sdgenl
from sdsock import Family, sockname

SDLINKD = str(TOP / "build" / "user" / "tools" / "sdlinkd" / "sdlinkd")
SDCTL = str(TOP / "build" / "user" / "tools" / "sdctl" / "sdctl")
SD_PROTO_INET = 0x10002
PORT = 7471                     # sdlinkd's default control port

NS = ("sdld0", "sdld1")
ADDR = ("10.79.0.1", "10.79.0.2")
A, B = NS
# Generous bounds on waits that end as soon as what they wait for comes.
WAIT = 120


class Daemon:
    """sdlinkd in namespace ns (ip netns's), its log collected."""

    def __init__(self, ns, *args, ready=True):
        if not os.path.exists(SDLINKD):
            pytest.fail(f"{SDLINKD} is not built: run make first")
        self.p = nspopen(ns, SDLINKD, "--verbose", *args,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
        self.log = []
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if ready:
            self.expect("serving this network namespace")

    def _read(self):
        for line in self.p.stderr:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, text):
        """Wait for a log line with text; fail if the daemon ends first."""
        while True:
            line = self.lines.get(timeout=WAIT)
            if line is None:
                pytest.fail(f"sdlinkd ended ({self.p.wait()}) before "
                            f"'{text}':\n{''.join(self.log)}")
            if text in line:
                return line

    def stop(self, sig=signal.SIGTERM):
        """Signal it, wait for it, and return its exit status once its
        whole log is read."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.wait()

    def wait(self):
        rc = self.p.wait(WAIT)
        self.reader.join(WAIT)
        return rc

    def text(self):
        return "".join(self.log)


@pytest.fixture
def hosts():
    netns_pair(A, B, "sdldv0", "sdldv1", *ADDR)
    assert ns_sysctl(A, "redirect", 1) is None
    assert ns_sysctl(A, "rendezvous_timeout_ms", 60000) is None
    started = []
    yield started
    for d in started:
        if d.p.poll() is None:
            d.p.kill()
        d.wait()
        print(f"--- sdlinkd {d.p.args[1:]}, exit {d.p.returncode}:\n"
              f"{d.text()}")
    netns_del(*NS)


def daemon(started, ns, *args, ready=True):
    # In the list before the wait: one that never says it serves is still
    # killed at the end.
    d = Daemon(ns, *args, ready=False)
    started.append(d)
    if ready:
        d.expect("serving this network namespace")
    return d


def set_key(ns, key):
    out = nsrun(ns, SDCTL, "key", "set", "-", input=key, capture_output=True)
    assert out.returncode == 0, out.stderr


class Echo:
    """A plain TCP echo server of B, each connection in a thread."""

    def __init__(self):
        with in_netns(B):
            self.s = socket.socket()
        self.s.bind((ADDR[1], 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        with c:
            while True:
                d = c.recv(65536)
                if not d:
                    return
                c.sendall(d)

    def close(self):
        self.s.shutdown(socket.SHUT_RDWR)     # wakes the accepting thread
        self.s.close()


@pytest.fixture
def echo(hosts):
    e = Echo()
    yield e
    e.close()


def fallbacks(ns=A):
    """The counters of fallback reasons and of the daemon's work."""
    return {k: v for k, v in sd_stats(ns).items()
            if k.startswith("fallback_") or k.startswith("link_")}


def exchange(port, nonblocking=False):
    """A redirected socket of A connects to B's port, sends a few KiB and
    reads them back.  Returns the counters of fallback reasons and of the
    daemon's work (link_*) of A that moved: with a daemon in A, one upcall
    and the daemon's reason, never a timeout."""
    before = fallbacks()
    with in_netns(A):
        c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    try:
        if nonblocking:
            # The verdict ends it in the background; then TCP's connect.
            c.setblocking(False)
            assert Family.connect(c, ADDR[1], port) == "EINPROGRESS"
            _, w, _ = select.select([], [c], [], WAIT)
            assert w == [c]
            assert c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        else:
            assert Family.connect(c, ADDR[1], port) == "OK"
        c.settimeout(WAIT)
        data = os.urandom(6 * 1024 + 7)
        c.sendall(data)
        got = b""
        while len(got) < len(data):
            d = c.recv(65536)
            assert d, f"EOF after {len(got)} of {len(data)} bytes"
            got += d
        assert got == data
    finally:
        c.close()
    after = fallbacks()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def decided(reason):
    """What a connect the daemon of A decided moves."""
    return {f"fallback_{reason}": 1, "link_upcalls": 1}


KEY = bytes(range(1, 49))
OTHER_KEY = bytes(range(101, 149))


def test_no_daemon_at_the_peer(hosts, echo):
    """B runs no daemon: peer_no_sd, and the next connect is decided by
    the cache, without dialling (a listener now on B's control port sees
    nothing)."""
    set_key(A, KEY)
    d = daemon(hosts, A)
    assert exchange(echo.port) == decided("peer_no_sd")
    d.expect("no daemon there")
    with in_netns(B):
        trap = socket.socket(socket.AF_INET6)
    trap.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    trap.bind(("::", PORT))
    trap.listen(4)
    trap.setblocking(False)
    assert exchange(echo.port) == decided("peer_no_sd")
    with pytest.raises(BlockingIOError):
        trap.accept()
    trap.close()
    assert d.stop() == 0
    assert "(remembered)" in d.text()


def test_no_cache_dials_every_time(hosts, echo):
    """--peer-cache-seconds 0: each connect dials, and finds the daemon
    B started meanwhile."""
    set_key(A, KEY)
    set_key(B, KEY)
    d = daemon(hosts, A, "--peer-cache-seconds", "0")
    assert exchange(echo.port) == decided("peer_no_sd")
    daemon(hosts, B)
    assert exchange(echo.port) == decided("no_rdma")
    assert d.stop() == 0


def test_same_key_no_rdma(hosts, echo):
    """Daemons on both hosts with the same key: B answers NO_RDMA (no
    data path yet).  Two connects share one session."""
    set_key(A, KEY)
    set_key(B, KEY)
    da = daemon(hosts, A)
    db = daemon(hosts, B)
    assert exchange(echo.port) == decided("no_rdma")
    assert exchange(echo.port) == decided("no_rdma")
    assert db.stop() == 0
    assert da.stop() == 0
    assert db.text().count(f"session from {ADDR[0]}:") >= 1
    assert db.text().count(": up\n") == 1, db.text()
    assert da.text().count(f"session to {ADDR[1]}:{PORT}: up\n") == 1, \
        da.text()


def test_nonblocking_connect_waits_for_the_verdict(hosts, echo):
    set_key(A, KEY)
    set_key(B, KEY)
    daemon(hosts, A)
    daemon(hosts, B)
    assert exchange(echo.port, nonblocking=True) == decided("no_rdma")


def test_different_keys_fail_authentication(hosts, echo):
    set_key(A, KEY)
    set_key(B, OTHER_KEY)
    da = daemon(hosts, A)
    db = daemon(hosts, B)
    assert exchange(echo.port) == decided("auth")
    db.expect("authentication failed")
    assert da.stop() == 0 and db.stop() == 0


def test_no_key_here_is_auth_without_dialling(hosts, echo):
    set_key(B, KEY)
    da = daemon(hosts, A)
    db = daemon(hosts, B)
    assert exchange(echo.port) == decided("auth")
    da.expect("no fabric key in this namespace")
    assert da.stop() == 0 and db.stop() == 0
    assert "session from" not in db.text()


def test_no_key_at_the_peer_is_auth(hosts, echo):
    """B's daemon has no key: it closes after A's HELLO, and A counts an
    authentication failure."""
    set_key(A, KEY)
    da = daemon(hosts, A)
    db = daemon(hosts, B)
    assert exchange(echo.port) == decided("auth")
    db.expect("no fabric key here")
    assert da.stop() == 0 and db.stop() == 0


def test_a_killed_peer_daemon(hosts, echo):
    """B's daemon killed: A's next connect falls back at once (B's control
    port refuses, or the session ends under the connect), and the one
    after it too."""
    set_key(A, KEY)
    set_key(B, KEY)
    da = daemon(hosts, A)
    db = daemon(hosts, B)
    assert exchange(echo.port) == decided("no_rdma")
    assert db.stop(signal.SIGKILL) == -signal.SIGKILL
    moved = exchange(echo.port)
    assert moved in (decided("peer_no_sd"),
                     decided("handshake")), moved
    assert exchange(echo.port) == decided("peer_no_sd")
    assert da.stop() == 0


def test_sigterm_leaves_tcp_as_before(hosts, echo):
    set_key(A, KEY)
    d = daemon(hosts, A)
    assert exchange(echo.port) == decided("peer_no_sd")
    assert d.stop() == 0
    assert "SIGTERM: exiting" in d.text()
    # No daemon: the kernel's own path, no rendezvous configured.
    assert exchange(echo.port) == {"fallback_remote": 1}


def test_one_daemon_per_namespace(hosts):
    daemon(hosts, A)
    second = daemon(hosts, A, ready=False)
    assert second.wait() == 1
    assert "another link daemon serves this network namespace" in \
        second.text()


def test_command_line():
    for args, rc in ((["--help"], 0), (["--bogus"], 2), (["--port", "0"], 2),
                     (["extra"], 2)):
        out = subprocess.run([SDLINKD] + args, capture_output=True,
                             text=True, timeout=WAIT)
        assert out.returncode == rc, (args, out)
        assert "usage: sdlinkd" in (out.stdout if rc == 0 else out.stderr)


def test_a_peer_that_speaks_garbage(hosts, echo):
    """Not a daemon on B's control port, sending bytes that are no frame:
    handshake, and A's daemon lives on for the next connect."""
    set_key(A, KEY)
    with in_netns(B):
        bad = socket.socket(socket.AF_INET6)
    bad.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    bad.bind(("::", PORT))
    bad.listen(4)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = bad.accept()
            except OSError:
                return
            try:
                c.sendall(b"\xff" * 4096)
            except OSError:
                pass
            threading.Thread(target=lambda c=c: (stop.wait(), c.close()),
                             daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    d = daemon(hosts, A)
    assert exchange(echo.port) == decided("handshake")
    assert exchange(echo.port) == decided("handshake")
    stop.set()
    bad.shutdown(socket.SHUT_RDWR)
    bad.close()
    assert d.p.poll() is None
    assert d.stop() == 0


def test_out_of_descriptors(hosts, echo):
    """With no descriptor to spare, a connect gets handshake at once and
    the control port's listener waits; with descriptors again, both work
    (the waiting connection gets A's HELLO)."""
    set_key(A, KEY)
    d = daemon(hosts, A)
    fds = [int(f) for f in os.listdir(f"/proc/{d.p.pid}/fd")]
    assert sorted(fds) == list(range(len(fds)))    # no hole to reuse
    soft, hard = resource.prlimit(d.p.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(d.p.pid, resource.RLIMIT_NOFILE, (len(fds), hard))
    assert exchange(echo.port) == decided("handshake")
    d.expect("Too many open files")
    with in_netns(B):
        c = socket.create_connection((ADDR[0], PORT), timeout=WAIT)
    d.expect("control port: accept: Too many open files")
    resource.prlimit(d.p.pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert exchange(echo.port) == decided("peer_no_sd")
    d.expect("control port: accepting again")
    got = b""
    while len(got) < 12 + 36:
        chunk = c.recv(4096)
        assert chunk, got
        got += chunk
    assert got[:4] == b"SDLK"
    c.close()
    assert d.stop() == 0


def test_garbage_into_the_control_port(hosts):
    """A connection to A's daemon that sends no HELLO but garbage gets A's
    HELLO, then is closed; the daemon lives on."""
    set_key(A, KEY)
    d = daemon(hosts, A)
    with in_netns(B):
        c = socket.create_connection((ADDR[0], PORT), timeout=WAIT)
    c.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\0" * 100)
    got = b""
    while True:
        try:
            chunk = c.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    c.close()
    assert got[:4] == b"SDLK" and len(got) == 12 + 36
    d.expect("session from")
    assert d.p.poll() is None
    assert d.stop() == 0


# ---- the data path: connections carried over RDMA -------------------------
#
# The RDMA between the hosts is two soft-RoCE devices on the two ends of
# another veth pair, which stays in the initial namespace: rdma_rxe of the
# guest's kernel sends and receives only there (tests/integration/
# test_carrier.py says more).  Policy routing makes each device's packets
# to the other's address leave by its own veth end.  The verbs devices are
# visible from every namespace, so each daemon is told its own
# (--rdma-device): neither has the control session's address in its GID
# table.

RVETH = ("sdlrv0", "sdlrv1")
RDEV = ("sdlr0", "sdlr1")
RADDR = ("10.84.0.1", "10.84.0.2")
RTABLE = (184, 185)
SOL_SD, SD_MMAP_OFFSETS, SD_TRANSPORT, SD_TRANSPORT_RDMA = 0x5344, 1, 8, 2
SO_RCVBUFFORCE = 33
SDRUN = TOP / "build" / "user" / "lib" / "shim" / "sdrun"
KIB = 1024
MIB = 1024 * KIB


@pytest.fixture(scope="module")
def rdma():
    with rxe_pair(RVETH, RDEV, RADDR, RTABLE):
        yield


@pytest.fixture
def linked(rdma, hosts):
    """Daemons in A and B with the same key, each on its own device."""
    set_key(A, KEY)
    set_key(B, KEY)
    da = daemon(hosts, A, "--rdma-device", RDEV[0])
    db = daemon(hosts, B, "--rdma-device", RDEV[1])
    return hosts, da, db


def sd_listener():
    """A native AF_SD listener of B on B's address; (socket, port)."""
    with in_netns(B):
        s = socket.socket(AF_SD, socket.SOCK_STREAM, 0)
    assert Family.bind(s, ADDR[1], 0) == "OK"
    s.listen(16)
    return s, sockname(s)[1]


def client(port, opts=()):
    """A redirected socket of A connected to B's port."""
    with in_netns(A):
        c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    for level, name, value in opts:
        c.setsockopt(level, name, value)
    assert Family.connect(c, ADDR[1], port) == "OK"
    c.settimeout(WAIT)
    return c


def link_counts():
    a, b = sd_stats(A), sd_stats(B)
    return {"via": a["link_via"], "incoming": b["link_incoming"]}


def carried_pair(lst, port):
    """A client of A and its accepted end in B, both over RDMA."""
    before = link_counts()
    c = client(port)
    s = accept(lst)
    for end in (c, s):
        assert end.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    after = link_counts()
    assert {k: after[k] - before[k] for k in after} == {"via": 1, "incoming": 1}
    return c, s


def accept(lst):
    """The next connection of listener lst (socket.accept() knows no AF_SD
    address), waiting at most WAIT."""
    r, _, _ = select.select([lst], [], [], WAIT)
    assert r == [lst], "no connection came"
    s = Family.accept(lst)
    s.settimeout(WAIT)
    return s


def recv_all(s, n):
    got = bytearray()
    while len(got) < n:
        d = s.recv(min(MIB, n - len(got)))
        assert d, f"EOF after {len(got)} of {n} bytes"
        got += d
    return bytes(got)


def expect_eof(s):
    assert s.recv(4096) == b""


def one_carried_and_done(da, db):
    """Both daemons ended the one connection they carried; stop them (exit
    0), so that their counters line is logged."""
    for d in (da, db):
        d.expect("connect 1: done")
    assert da.stop() == 0 and db.stop() == 0


def both_ways(c, s, nbytes):
    """nbytes of random data from c to s and from s to c at once, every
    byte checked."""
    up, down = os.urandom(nbytes), os.urandom(nbytes)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("up", recv_all(s, len(up))))
    t.start()
    w = threading.Thread(target=s.sendall, args=(down,))
    w.start()
    c.sendall(up)
    assert recv_all(c, len(down)) == down
    t.join(WAIT)
    w.join(WAIT)
    assert got["up"] == up


def expect_end(s):
    """EOF or a reset, as TCP gives either to a program whose peer ended
    (after the bytes it read)."""
    try:
        while s.recv(MIB):
            pass
    except ConnectionResetError:
        pass


def counters(d):
    """The counters line sdlinkd --verbose prints at exit."""
    m = re.search(r"counters: (.*)", d.text())
    assert m, d.text()
    words = m.group(1).split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])}


def test_rdma_8_mib_each_way_then_fin(linked):
    """8 MiB each way at once, every byte checked; then each side's FIN
    reaches the other after all its bytes."""
    _, da, db = linked
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    both_ways(c, s, 8 * MIB)
    # FIN from A, then bytes and FIN from B.
    c.shutdown(socket.SHUT_WR)
    expect_eof(s)
    s.sendall(b"after the fin")
    s.shutdown(socket.SHUT_WR)
    assert recv_all(c, 13) == b"after the fin"
    expect_eof(c)
    c.close()
    s.close()
    lst.close()
    # Both carriers end on their own (no reset) once both programs closed.
    one_carried_and_done(da, db)
    for d in (da, db):
        k = counters(d)
        assert k["carried"] == 1 and k["copies"] == 0 and k["resets"] == 0, k
        assert k["bytes"] >= 8 * MIB, k


def test_rdma_many_small_messages(linked):
    _, da, db = linked
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    rng = random.Random(5)
    msgs = [rng.randbytes(rng.randrange(1, 300)) for _ in range(3000)]
    total = sum(map(len, msgs))
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("b", recv_all(s, total)))
    t.start()
    for m in msgs:
        c.send(m)
    t.join(WAIT)
    assert got["b"] == b"".join(msgs)
    # And back, one at a time: each a round trip.
    for m in msgs[:200]:
        s.sendall(m)
        assert recv_all(c, len(m)) == m
    c.close()
    expect_eof(s)
    s.close()
    assert da.stop() == 0 and db.stop() == 0


def ping_pong_counts(started, spin_us, rounds):
    """Daemons that poll their carriers spin_us after the last work, then
    sleep; rounds round trips of 64 bytes on one carried connection;
    both daemons' counters."""
    set_key(A, KEY)
    set_key(B, KEY)
    da = daemon(started, A, "--rdma-device", RDEV[0], "--spin-us", str(spin_us))
    db = daemon(started, B, "--rdma-device", RDEV[1], "--spin-us", str(spin_us))
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    for i in range(rounds):
        m = i.to_bytes(2, "big") * 32
        c.sendall(m)
        assert recv_all(s, len(m)) == m
        s.sendall(m)
        assert recv_all(c, len(m)) == m
    c.close()
    expect_eof(s)
    s.close()
    lst.close()
    one_carried_and_done(da, db)
    return counters(da), counters(db)


@pytest.mark.parametrize("spin_us", [0, 10_000_000])
def test_rdma_daemons_poll_before_they_sleep(rdma, hosts, spin_us):
    """--spin-us: a daemon polls its carriers that long after the last
    round that moved something.  With 0 it sleeps as soon as a round moves
    nothing, so in a ping-pong it sleeps while the other side answers,
    about once a round trip.  With the longest spin, longer than any gap
    between two messages of this ping-pong, it never sleeps while the
    connection lives (Documentation/remote.rst, "Polling and sleeping")."""
    rounds = 100
    for k in ping_pong_counts(hosts, spin_us, rounds):
        assert k["carried"] == 1 and k["resets"] == 0, k
        if spin_us:
            assert k["sleeps"] == 0, k
        else:
            assert k["sleeps"] >= rounds // 2, k


CHILD = r"""
import os, socket, sys
sys.path.insert(0, {here!r})
from conftest import AF_SD
from sdsock import Family
c = socket.socket(AF_SD, socket.SOCK_STREAM, {proto})
assert Family.connect(c, {host!r}, {port}) == "OK"
print("connected", flush=True)
block = bytes(range(256)) * 256
while True:
    c.sendall(block)
"""


def test_rdma_program_killed_mid_stream(linked):
    """A program of A killed while it sends: B's end sees EOF or a reset,
    as over TCP, after the bytes that came."""
    hosts, da, db = linked
    lst, port = sd_listener()
    here = str(pathlib.Path(__file__).parent)
    p = nspopen(A, sys.executable, "-c",
                CHILD.format(here=here, proto=SD_PROTO_INET, host=ADDR[1], port=port),
                stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "connected\n"
        s = accept(lst)
        assert s.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
        block = bytes(range(256)) * 256
        assert recv_all(s, 4 * len(block)) == block * 4
    finally:
        p.kill()
        p.wait()
    expect_end(s)
    s.close()
    assert da.stop() == 0 and db.stop() == 0


def test_rdma_peer_daemon_killed_mid_stream(linked):
    """B's daemon killed with SIGKILL while A's program sends: the program
    sees ECONNRESET (A's session ends, and with it what it carried); a
    daemon started again in B carries the next connect."""
    hosts, da, db = linked
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    c.sendall(b"x" * 65536)        # within the rings: no reader needed
    assert recv_all(s, 65536) == b"x" * 65536
    assert db.stop(signal.SIGKILL) == -signal.SIGKILL
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        # Until the reset comes (the daemon's end, then the program's).
        while True:
            c.sendall(b"y" * 65536)
    c.close()
    s.close()
    daemon(hosts, B, "--rdma-device", RDEV[1])
    c, s = carried_pair(lst, port)
    c.sendall(b"again")
    assert recv_all(s, 5) == b"again"
    c.close()
    expect_eof(s)
    s.close()
    assert da.stop() == 0


def test_rdma_no_listener_is_tcp(linked, echo):
    """A plain TCP listener in B, no AF_SD one: TCP, reason no_listener."""
    assert exchange(echo.port) == decided("no_listener")


def test_rdma_accept_rule_refuses(linked):
    """An accept rule of B refuses A's address: ECONNREFUSED in A."""
    lst, port = sd_listener()
    with in_netns(B):
        nl = Genl()
    try:
        r = nl.rule_add(sdgenl.SD_ACTION_DENY, sdgenl.SD_DIR_ACCEPT,
                        nest(sdgenl.SD_A_RULE_REMOTE,
                             attr(sdgenl.SD_A_ADDR_IN6, mapped(ADDR[0])),
                             attr_u8(sdgenl.SD_A_ADDR_PREFIX, 128)))
        assert r.err == 0
        with in_netns(A):
            c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        assert Family.connect(c, ADDR[1], port) == "ECONNREFUSED"
        c.close()
    finally:
        nl.flush()
        nl.close()
    lst.close()


def ring_sizes(s):
    """(tx, rx): bytes in the data area of each ring of s."""
    off = struct.unpack("=24Q", s.getsockopt(SOL_SD, SD_MMAP_OFFSETS, 192))
    return off[4], off[12 + 4]


def test_rdma_rings_sized_by_the_program(linked):
    """A program of A that sized its send and receive ring itself
    (SO_SNDBUF, SO_RCVBUF: 16 KiB and 1 MiB, the default being 128 KiB)
    is carried with those rings, B's end mirroring them whatever B's
    listener set (8 KiB and 256 KiB: an accepted socket's rings are its
    client's, as locally); 768 KiB each way at once arrive intact, and
    no daemon finds a ring of another size."""
    _, da, db = linked
    lst, port = sd_listener()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * KIB)
    lst.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 * KIB)
    before = link_counts()
    c = client(port, [(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * KIB),
                      (socket.SOL_SOCKET, SO_RCVBUFFORCE, MIB)])
    s = accept(lst)
    for end in (c, s):
        assert end.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    after = link_counts()
    assert {k: after[k] - before[k] for k in after} == {"via": 1, "incoming": 1}
    da.expect(f"rings {16 * KIB} and {MIB}")
    assert ring_sizes(c) == (16 * KIB, MIB)
    assert ring_sizes(s) == (MIB, 16 * KIB)
    both_ways(c, s, 768 * KIB)
    c.close()
    expect_eof(s)
    s.close()
    lst.close()
    one_carried_and_done(da, db)
    for d in (da, db):
        k = counters(d)
        assert k["carried"] == 1 and k["resets"] == 0 and \
            k["mismatched"] == 0, k
        assert "SO_SNDBUF or SO_RCVBUF" not in d.text()


def test_rdma_ring_sizes_hold_while_the_peer_answers(linked):
    """The mismatch this test used to provoke, a program that set
    SO_SNDBUF unlike net.sd.ring_size, and the one a net.sd.ring_size
    changed while the connect waited for B's answer would have made, no
    longer happen: the kernel fixes the sizes as the connect begins and
    states them in the upcall, and the connection gets them.  (Only with
    a module whose upcall states no sizes can the daemon still find the
    program's rings otherwise, and reset the connection.)  B's daemon is
    stopped until A's daemon has the upcall, and A's ring_size changes
    meanwhile; the connection is carried, with the rings of the upcall."""
    _, da, db = linked
    lst, port = sd_listener()
    db.p.send_signal(signal.SIGSTOP)
    try:
        res = {}

        def connect():
            res["c"] = client(port, [(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                      32 * KIB)])
        t = threading.Thread(target=connect)
        t.start()
        da.expect(f"rings {32 * KIB} and {128 * KIB}")
        assert ns_sysctl(A, "ring_size", 8 * KIB) is None
    finally:
        db.p.send_signal(signal.SIGCONT)
    t.join(WAIT)
    c = res["c"]
    s = accept(lst)
    for end in (c, s):
        assert end.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    assert ring_sizes(c) == (32 * KIB, 128 * KIB)
    assert ring_sizes(s) == (128 * KIB, 32 * KIB)
    # More than the rings hold: the reader runs meanwhile.
    data = os.urandom(200 * KIB)
    w = threading.Thread(target=c.sendall, args=(data,))
    w.start()
    assert recv_all(s, len(data)) == data
    w.join(WAIT)
    w = threading.Thread(target=s.sendall, args=(data[::-1],))
    w.start()
    assert recv_all(c, len(data)) == data[::-1]
    w.join(WAIT)
    c.close()
    expect_eof(s)
    s.close()
    one_carried_and_done(da, db)
    k = counters(da)
    assert k["carried"] == 1 and k["mismatched"] == 0 and k["resets"] == 0, k


FORKER = r"""
import os, random, socket, sys
data = random.Random(7).randbytes(2 * {n})
c = socket.create_connection(({host!r}, {port}))
c.sendall(data[:{n}])
os.set_inheritable(c.fileno(), True)
if os.fork() == 0:
    os.execv(sys.executable, [sys.executable, "-c",
        "import random, socket, sys; "
        "data = random.Random(7).randbytes(2 * {n}); "
        "c = socket.socket(fileno=int(sys.argv[1])); "
        "c.sendall(data[{n}:]); c.close()", str(c.fileno())])
os._exit(0)
"""


def test_rdma_sdrun_fork_exec_exit_mid_stream(linked):
    """A program under sdrun forks, execs and exits while its connection
    is carried; the child sends the rest, and B gets every byte."""
    _, da, db = linked
    if not SDRUN.exists():
        pytest.fail(f"{SDRUN} is not built")
    lst, port = sd_listener()
    n = 2 * MIB
    p = nspopen(A, str(SDRUN), sys.executable, "-c",
                FORKER.format(n=n, host=ADDR[1], port=port),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    s = accept(lst)
    assert s.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    want = random.Random(7).randbytes(2 * n)
    assert recv_all(s, 2 * n) == want
    expect_eof(s)
    _, err = p.communicate(timeout=WAIT)
    assert p.returncode == 0, err
    s.close()
    assert da.stop() == 0 and db.stop() == 0


def test_rdma_sigterm_resets_carried_connections(linked):
    """SIGTERM: the daemon resets what it carries, tells the peer, and
    exits 0; both programs see their connection end."""
    _, da, db = linked
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    c.sendall(b"before")
    assert recv_all(s, 6) == b"before"
    assert da.stop() == 0
    with pytest.raises(ConnectionResetError):
        c.recv(1)
    expect_end(s)
    c.close()
    s.close()
    k = counters(da)
    assert k["carried"] == 1 and k["resets"] == 1, k
    db.expect("CLOSE RESET of 1")
    assert db.stop() == 0


@pytest.mark.parametrize("where", ["here", "there"])
def test_rdma_no_rdma_option(rdma, hosts, where):
    """--no-rdma on either side: TCP, reason no_rdma, with an AF_SD
    listener there that would have been carried."""
    set_key(A, KEY)
    set_key(B, KEY)
    daemon(hosts, A, *(["--no-rdma"] if where == "here" else ["--rdma-device", RDEV[0]]))
    daemon(hosts, B, *(["--no-rdma"] if where == "there" else ["--rdma-device", RDEV[1]]))
    lst, port = sd_listener()
    before = fallbacks()
    c = client(port)        # TCP to B's AF_SD listener's port
    c.close()
    lst.close()
    after = fallbacks()
    moved = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    assert moved == decided("no_rdma"), moved


def test_rdma_session_lost_resets_carried_connections(linked):
    """The control session's path between the hosts goes down (the RDMA
    path stays): the keepalive ends the session, and A's daemon resets
    the connection it carried, which A's program sees as ECONNRESET."""
    _, da, db = linked
    lst, port = sd_listener()
    c, s = carried_pair(lst, port)
    c.sendall(b"up")
    assert recv_all(s, 2) == b"up"
    nsrun(B, "ip", "link", "set", "sdldv1", "down", check=True)
    with pytest.raises(ConnectionResetError):
        c.recv(1)           # the keepalive's bound, then the reset
    da.expect("no answer to a ping")
    c.close()
    s.close()
    assert da.stop() == 0
    assert counters(da)["resets"] == 1
