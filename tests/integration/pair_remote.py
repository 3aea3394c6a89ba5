"""Two test hosts (tests/vm/pair): this guest (A) and the peer guest (B),
each with its own af_sd.ko and a soft-RoCE device on the link between them.

Not collected by the single-guest suite (the file name does not start with
test_); scripts/check's "pair" stage runs it:

    tests/vm/pair --rdma -- python3 -m pytest -q tests/integration/pair_remote.py
"""
import hashlib
import json
import os
import select
import subprocess
import sys
import time
import zlib

import pytest

import rdvwire
from conftest import SDCTL, TOP, ns_key
from peer import Peer

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
RDV_PORT = 748       # only root may bind it (net.sd.rendezvous_port)
APP_PORT = 9191

ECHO = str(TOP / "tests" / "integration" / "echo_server.py")
# The bridge prototype (tests/progs/sd_rdma_bridge.cpp).
BRIDGE = str(TOP / "build" / "user" / "tests" / "progs" / "sd_rdma_bridge")

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


@pytest.fixture(scope="module")
def peer():
    if not Peer.available():
        pytest.fail("no peer host: run this file through tests/vm/pair")
    return Peer()


def sysctl(key, value):
    with open(f"/proc/sys/net/sd/{key}", "w") as f:
        f.write(f"{value}\n")


def peer_sysctl(peer, key, value):
    out = peer.run(["sh", "-c", f"echo {value} > /proc/sys/net/sd/{key}"])
    assert out["rc"] == 0, out


HERE = os.path.dirname(os.path.abspath(__file__))


def keys(peer, key=rdvwire.KEY, peer_key=rdvwire.KEY):
    """The fabric keys of this host and of the peer (None: none)."""
    ns_key(None, key)
    code = (f"import sys; sys.path.insert(0, {HERE!r}); from sdgenl import "
            f"Genl; k = {peer_key!r}; g = Genl(); "
            "g.key_set(k) if k else g.key_del()")
    out = peer.run([sys.executable, "-c", code])
    assert out["rc"] == 0, out


def rendezvous_with(peer):
    """Both monitors on the test's rendezvous port, B's redirecting its
    programs' sockets (A's redirection is the settings fixture's)."""
    sysctl("rendezvous_port", RDV_PORT)
    peer_sysctl(peer, "redirect", 1)
    peer_sysctl(peer, "rendezvous_port", RDV_PORT)


def stats(peer=None):
    cmd = [SDCTL, "--json", "stats"]
    if peer:
        out = peer.run(cmd)
        assert out["rc"] == 0, out
        return json.loads(out["stdout"])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                     text=True).stdout)


@pytest.fixture
def settings(peer):
    """Redirection on here, the same fabric key on both hosts; every
    rendezvous setting back to off after, and no key."""
    sysctl("redirect", 1)
    keys(peer)
    yield
    for key, value in (("rendezvous_port", 0), ("redirect", 0)):
        sysctl(key, value)
        peer_sysctl(peer, key, value)
    keys(peer, None, None)


@pytest.fixture
def echo(peer):
    srv = peer.spawn([sys.executable, ECHO, "", str(APP_PORT)])
    assert srv.readline() == "ready"
    yield srv
    srv.kill()


def client(peer, n=2, env=None):
    out = subprocess.run([SDRUN, sys.executable, "-c", CLIENT, peer.remote,
                          str(APP_PORT), str(n)], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


RXE_COUNTERS = ("grep -r . /sys/class/infiniband/*/ports/1/hw_counters/ "
                "2>/dev/null | sed 's|.*/hw_counters/||'")


def rxe_counters(peer=None):
    """The soft-RoCE device's counters (retries, RNR and sequence NAKs,
    duplicates), of this host or of peer's: what the transport went
    through, for a failure's message."""
    if peer:
        text = peer.run(["sh", "-c", RXE_COUNTERS])["stdout"]
    else:
        text = subprocess.run(["sh", "-c", RXE_COUNTERS], text=True,
                              capture_output=True).stdout
    pairs = (line.rsplit(":", 1) for line in text.split())
    return {k: int(v) for k, v in pairs if k != "lifespan" and v.isdigit()}


def delta(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items()
            if v != before.get(k, 0)}


def assert_rdma_without_resets(peer, before, pbefore, n):
    """A connected n RDMA connections and B queued n, and neither host
    counted a reset since before and pbefore."""
    d, pd = delta(before, stats()), delta(pbefore, stats(peer))
    assert d.get("rdma_connects") == n and "rdma_resets" not in d, d
    assert pd.get("rdma_queued") == n and "rdma_resets" not in pd, pd


def client_of_echo(peer, port, script, args=(), n=1, env=None, timeout=600):
    """Python script, under sdrun on A, against B's echo server (under
    sdrun too) on port, with B's address, port and args as its arguments:
    it prints "ok", A connected n RDMA connections, B queued n, and
    neither host counted a reset."""
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    srv = peer.spawn([SDRUN, sys.executable, ECHO, "", str(port)])
    try:
        assert srv.readline() == "ready"
        out = subprocess.run([SDRUN, sys.executable, "-c", script, peer.remote,
                              str(port), *args], capture_output=True, text=True,
                             timeout=timeout, env=dict(os.environ, **(env or {})))
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    finally:
        srv.kill()
    assert_rdma_without_resets(peer, before, pbefore, n)


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


def test_host_without_a_monitor_gets_tcp(peer, settings, echo):
    sysctl("rendezvous_port", RDV_PORT)
    before = stats()
    client(peer)
    d = delta(before, stats())
    assert d.get("fallback_peer_no_sd") == 2, d
    assert d.get("rdv_asked") == 1 and d.get("rdv_cached") == 1, d


def test_two_monitors_agree_on_tcp_without_rdma(peer, settings, echo):
    """The client's process offers no RDMA (SD_RDMA=0): no_rdma, asked
    once, then cached.  Offering it (libsd does when the host has a
    device) to a plain TCP server: the other monitor finds no AF_SD
    listener there, no_listener, asked for each connection."""
    sysctl("rendezvous_port", RDV_PORT)
    peer_sysctl(peer, "rendezvous_port", RDV_PORT)
    before, pbefore = stats(), stats(peer)
    client(peer, env={"SD_RDMA": "0"})
    d, pd = delta(before, stats()), delta(pbefore, stats(peer))
    assert d.get("fallback_no_rdma") == 2, d
    assert d.get("rdv_asked") == 1, d
    assert pd.get("rdv_answered") == 1 and "rdv_failed" not in pd, pd
    before, pbefore = stats(), stats(peer)
    client(peer)
    d, pd = delta(before, stats()), delta(pbefore, stats(peer))
    assert d.get("fallback_no_listener") == 2 and d.get("rdv_asked") == 2, d
    assert pd.get("rdv_answered") == 2 and "rdv_failed" not in pd, pd


def test_peer_killed_mid_transfer_is_an_error_not_a_hang(peer, settings):
    """The server on B is killed while A streams to it: A's send or
    receive ends in an error or EOF, within the test's timeout."""
    sysctl("rendezvous_port", RDV_PORT)
    peer_sysctl(peer, "rendezvous_port", RDV_PORT)
    sink = peer.spawn([sys.executable, "-c", f"""
import socket
s = socket.create_server(("", {APP_PORT}))
print("ready", flush=True)
c, _ = s.accept()
print("accepted", flush=True)
while c.recv(1 << 16):
    pass
"""])
    assert sink.readline() == "ready"
    code = f"""
import socket, sys
c = socket.create_connection(("{peer.remote}", {APP_PORT}))
print("connected", flush=True)
sys.stdin.readline()
try:
    while True:
        c.sendall(b"x" * 65536)
except OSError as e:
    print("error", e.errno, flush=True)
"""
    p = subprocess.Popen([SDRUN, sys.executable, "-c", code],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "connected"
        assert sink.readline() == "accepted"
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(1)
        sink.kill()
        line = p.stdout.readline().split()
        assert line and line[0] == "error", line
        assert p.wait(timeout=120) == 0
    finally:
        p.kill()
        p.wait()


def test_rings_can_be_registered_with_the_rdma_device():
    """The planned RDMA transport registers the module's ring pages with
    the device (Documentation/rdma.rst): ibv_reg_mr must pin both rings of
    a connection, and the mapping it pins must be the ring the kernel
    writes to."""
    out = subprocess.run([str(TOP / "build" / "user" / "tests" / "progs" /
                              "sd_rdma_reg"), "9292"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    assert got["ok"] and got["device"] == "rxe0", got


def test_ring_mirrored_over_rdma_carries_every_byte(peer):
    """The prototype of the RDMA data path (tests/progs/sd_rdma_pipe.cpp):
    libsd's ring code on each side, records mirrored by RDMA write with
    immediate, credits by RDMA write; 1 MB echoed back must arrive
    exactly, then 64-byte round trips."""
    prog = str(TOP / "build" / "user" / "tests" / "progs" / "sd_rdma_pipe")
    srv = peer.spawn([prog, "server", "9393", "1000000"])
    assert srv.readline() == "ready"
    out = subprocess.run([prog, "client", peer.remote, "9393", "1000000",
                          "20"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    assert got["bytes_checked"] == 1000000 and got["round_trips"] == 20, got
    assert srv.wait(120) == 0, srv.stderr


def test_af_sd_connection_over_rdma_through_the_monitors(peer, settings):
    """An AF_SD connection between the two hosts, set up by the monitors
    (SD_RDMA_OFFER, SD_RDMA_LOCAL, SD_RDMA_PEER) and carried over RDMA by
    the bridge prototype (tests/progs/sd_rdma_bridge.cpp), while the
    programs on both ends only call send and recv on their sockets: 64-byte
    round trips, then 2 MB echoed and checked byte for byte, then the end
    of stream both ways, and both monitors count one RDMA connection."""
    bridge_echo(peer, 9494, 2000000, 20)


def test_what_landed_outlives_the_peer_monitors_end(peer, settings):
    """The bridge prototype's client streams 300 kB and reads the echo only
    3 s later: the echo fills A's receive ring and waits in its bridge's
    landing area while B's server ends and its monitor's clean CLOSE
    reaches A first.  Every byte still comes back, then the end of stream:
    the bridge gives the end (SD_RDMA_OP_FIN), not the peer's monitor."""
    bridge_echo(peer, 9495, 300000, 1, delay_ms=3000)


def bridge_echo(peer, port, nbytes, iters, delay_ms=0):
    """The bridge prototype's server on B and its client here: iters round
    trips, then nbytes echoed (read delay_ms late), every byte checked, an
    RDMA connection both ends, with no reset."""
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    srv = peer.spawn([BRIDGE, "server", peer.remote, str(port)])
    assert srv.readline() == "ready"
    out = subprocess.run([BRIDGE, "client", peer.remote, str(port),
                          str(nbytes), str(iters), str(delay_ms)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    assert got["transport"] == "rdma" and got["bytes_checked"] == nbytes, got
    assert srv.wait(120) == 0, srv.stderr
    assert_rdma_without_resets(peer, before, pbefore, 1)


def test_unmodified_programs_over_rdma(peer, settings):
    """Plain TCP programs under sdrun on both hosts (Python's socket
    module: an echo server on B, a client on A), nothing in them about
    AF_SD or RDMA: libsd offers RDMA on the listener and on the connect,
    its bridge carries both connections, every byte of 2 x 200 kB comes
    back as sent, and both monitors count two RDMA connections and no
    reset."""
    client_of_echo(peer, APP_PORT + 1, CLIENT, ["2"], n=2)


TWO_WAITS = """
import os, select, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
idle = socket.create_connection((host, port))
busy = socket.create_connection((host, port))
got = []
t = threading.Thread(target=lambda: got.append(idle.recv(3)))
t.start()
for i in range(200):
    msg = os.urandom(1 + i * 37 % 3000)
    busy.sendall(msg)
    echo = b""
    ep = select.epoll()
    ep.register(busy, select.EPOLLIN)
    while len(echo) < len(msg):
        if i % 2:
            assert select.select([busy], [], [], 30)[0], f"select timed out at {i}"
        else:
            assert ep.poll(30), f"epoll timed out at {i}"
        echo += busy.recv(65536)
    ep.close()
    assert echo == msg, f"echo {i} differs"
assert t.is_alive(), "the idle receive returned early"
idle.sendall(b"bye")
t.join(30)
assert got == [b"bye"], got
idle.close()
busy.close()
print("ok")
"""


def test_waits_of_two_threads_on_two_connections(peer, settings):
    """A program's thread sleeps in a receive on an idle RDMA connection
    (on the completion channel, the bridge thread out of its way) while
    another ping-pongs 200 times on a second one, waiting in select (which
    sleeps in the kernel alone) and epoll (on the channel too): every echo
    comes whole, through whichever thread is woken, the idle receive gets
    its bytes at the end, and neither host counts a reset."""
    client_of_echo(peer, APP_PORT + 8, TWO_WAITS, n=2)


SPIN_PINGPONG = """
import select, socket, struct, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
wait, misses = sys.argv[4], int(sys.argv[5])
c = socket.create_connection((host, port))
if wait == "epoll":
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN)
    ready = lambda t=-1: ep.poll(t)
elif wait == "poll":
    pl = select.poll()
    pl.register(c.fileno(), select.POLLIN)
    ready = lambda t=-1: pl.poll(t * 1000 if t >= 0 else None)
elif wait == "select":
    ready = lambda t=-1: select.select([c], [], [], t if t >= 0 else None)[0]
else:
    ready = None
# Waits on the idle connection that outlast the spin (nothing comes):
# they tell the library that spinning does not pay.  A receive's with
# SO_RCVTIMEO, its socket still blocking (Python's own timeout would
# wait in poll instead).
for _ in range(misses):
    if ready:
        assert not ready(0.3), "something came on the idle connection"
        continue
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
    try:
        c.recv(1)
        raise AssertionError("something came on the idle connection")
    except BlockingIOError:
        pass
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
for i in range(n):
    msg = i.to_bytes(8, "little") * 8
    c.sendall(msg)
    got = b""
    while len(got) < len(msg):
        if ready:
            ready()
        d = c.recv(len(msg) - len(got))
        assert d, f"EOF at message {i}"
        got += d
    assert got == msg, f"echo {i} differs"
c.close()
print("ok")
"""

# The calls of a thread that wakes or sleeps for a message: the channel's
# event read, the sleep itself (ppoll for poll and epoll, the kernel's
# select), the lock fought over by two threads.  Not ioctl: a socket that
# the kernel's poll once found idle keeps asking whoever lands its bytes
# for a wake-up through the kernel (one ioctl each), in case a poll or
# epoll sleeps there.  Not poll: the bridge thread's looks every 20 ms,
# as many as the run takes.
SLEEP_CALLS = {"futex", "read", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect6"}


def bridge_calls(peer, port, n, trace, wait="recv", misses=0):
    """The calls in SLEEP_CALLS of an n-message ping-pong over RDMA to B's
    echo server, waiting for each answer in wait ("recv" alone, or
    "epoll", "poll" or "select" first) and spinning 200 ms (SD_SPIN_US,
    longer than any answer takes), after misses waits of 300 ms on the
    idle connection, counted by strace -f: (their number, strace's
    table)."""
    out = subprocess.run(["strace", "-f", "-c", "-o", str(trace), SDRUN,
                          sys.executable, "-c", SPIN_PINGPONG, peer.remote,
                          str(port), str(n), wait, str(misses)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, SD_SPIN_US="200000"))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    text = trace.read_text()
    count = 0
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] in SLEEP_CALLS and f[3].isdigit():
            count += int(f[3])
    return count, text


@pytest.mark.parametrize("wait,misses", [("recv", 0), ("recv", 6), ("epoll", 0),
                                         ("epoll", 6), ("poll", 6), ("select", 0)])
def test_a_spinning_wait_leaves_the_bridge_asleep(peer, settings, tmp_path, wait, misses):
    """A wait for an RDMA connection's data (a receive, or poll, epoll or
    select first) that spins polls the completion queues itself, every turn
    of its spin (Documentation/libsd.rst): the bridge thread of its process
    stays asleep meanwhile instead of waking for every message the peer
    writes and fighting the spinning thread for the lock.  After waits
    that outlasted their spin (misses), which make a wait only look
    briefly and sleep, one spin that paid makes them spin again.  So
    1,000 more round trips cost far fewer than 1,000 more of the calls a
    wake-up or a sleep makes (a bridge woken for every message: some
    2,800; a wait left looking briefly: a sleep for almost every answer;
    the bridge still looks around every 100 ms, and catches the program
    between two waits at times, when it wakes for messages for a while:
    300 to 520 calls), every echo comes back as sent, and no host counts
    a reset."""
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    port = APP_PORT + 12
    srv = peer.spawn([SDRUN, sys.executable, ECHO, "", str(port)])
    try:
        assert srv.readline() == "ready"
        few, _ = bridge_calls(peer, port, 100, tmp_path / "few", wait, misses)
        many, text = bridge_calls(peer, port, 1100, tmp_path / "many", wait, misses)
    finally:
        srv.kill()
    assert many - few < 700, f"{few} -> {many}\n{text}"
    assert_rdma_without_resets(peer, before, pbefore, 2)


MANY_CLIENT = """
import os, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conns = [socket.create_connection((host, port)) for _ in range(n)]
for rnd in range(4):
    sent = [os.urandom(1 + (i * 389 + rnd * 1009) % 3000) for i in range(n)]
    for c, d in zip(conns, sent):
        c.sendall(d)
    for i, (c, d) in enumerate(zip(conns, sent)):
        got = b""
        while len(got) < len(d):
            chunk = c.recv(65536)
            assert chunk, f"EOF on connection {i} in round {rnd}"
            got += chunk
        assert got == d, f"connection {i} echoed other bytes in round {rnd}"
for c in conns:
    c.close()
print("ok")
"""

MANY_SERVER = """
import socket, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
lst = socket.create_server(("", port), backlog=n)
print("ready", flush=True)
def serve(c):
    with c:
        while d := c.recv(65536):
            c.sendall(d)
threads = []
for _ in range(n):
    c, _ = lst.accept()
    threads.append(threading.Thread(target=serve, args=(c,)))
    threads[-1].start()
for t in threads:
    t.join()
print("done", flush=True)
"""


def rdma_cqs(trace):
    """SD_SHIM_TRACE's rdma_cqs line: (completion queues, most connections
    at once) of the one process that wrote one."""
    lines = [ln.split() for ln in trace.splitlines()
             if ln.split()[1:2] == ["rdma_cqs"]]
    assert len(lines) == 1, trace
    return int(lines[0][2]), int(lines[0][3])


def test_many_connections_share_one_completion_queue(peer, settings, tmp_path):
    """100 RDMA connections open at once in one process on each host (a
    client, and a server with a thread per connection), each carrying four
    rounds of echoes, every byte checked: both processes' bridges carry all
    of them through one completion queue, grown as the connections came
    (SD_SHIM_TRACE's rdma_cqs line), and neither host counts a reset."""
    n = 100
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    port = APP_PORT + 11
    ptrace = f"/tmp/sd-many-{os.getpid()}.trace"
    peer.run(["rm", "-f", ptrace])
    srv = peer.spawn([SDRUN, sys.executable, "-c", MANY_SERVER, str(port), str(n)],
                     env={"SD_SHIM_TRACE": ptrace})
    try:
        assert srv.readline() == "ready"
        trace = tmp_path / "client.trace"
        out = subprocess.run([SDRUN, sys.executable, "-c", MANY_CLIENT, peer.remote,
                              str(port), str(n)], capture_output=True, text=True,
                             timeout=600,
                             env=dict(os.environ, SD_SHIM_TRACE=str(trace)))
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
        assert srv.readline() == "done"
        assert srv.wait(60) == 0
    finally:
        srv.kill()
    assert rdma_cqs(trace.read_text()) == (1, n)
    got = peer.run(["cat", ptrace])
    assert got["rc"] == 0, got
    assert rdma_cqs(got["stdout"]) == (1, n)
    assert_rdma_without_resets(peer, before, pbefore, n)


DIRECT_MIX = """
import random, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
c = socket.create_connection((host, port))
def echo(msg):
    c.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = c.recv(len(msg) - len(got))
        assert d, "EOF in the ping-pong"
        got += d
    assert got == msg, "an echo differs"
# Ping-pong: every send finds the link idle and the ring empty.
for i in range(300):
    echo(rng.randbytes(rng.randint(1, 4096)))
# A burst read back by a second thread: small sends behind large ones and
# behind each other, with writes in flight when most of them come.
msgs = [rng.randbytes(rng.choice((rng.randint(1, 512), rng.randint(4097, 20000))))
        for _ in range(400)]
want = b"".join(msgs)
got = bytearray()
def reader():
    while len(got) < len(want):
        d = c.recv(65536)
        if not d:
            break
        got.extend(d)
t = threading.Thread(target=reader)
t.start()
for m in msgs:
    c.sendall(m)
t.join(300)
assert bytes(got) == want, f"the burst came back as {len(got)} bytes, not as sent"
echo(b"end")
c.close()
print("ok")
"""


def rdma_counts(trace, what):
    """SD_SHIM_TRACE's line `what` (rdma_writes: writes of data that
    skipped the send ring, writes from it; rdma_reads: receives that took
    landed bytes straight, landings into the receive ring; rdma_spin: the
    links' round trip and the spin it makes, µs) of the one process that
    wrote one."""
    lines = [ln.split() for ln in trace.splitlines()
             if ln.split()[1:2] == [what]]
    assert len(lines) == 1, trace
    return int(lines[0][2]), int(lines[0][3])


def test_idle_sends_and_waiting_receives_skip_the_ring(peer, settings, tmp_path):
    """A send of at most 4 KiB on an idle RDMA link whose send ring is
    empty goes from the program's buffer into the mirror and out, the
    others by the ring; a blocking receive that waited takes what landed
    for it straight from the landing area, the rest going into the ring
    behind it.  A ping-pong of 300 messages of 1 to 4,096 bytes, read
    back in pieces of the size still missing, then a burst of 400 small
    and large sends (up to 20,000 bytes) read back by a second thread,
    every byte checked.  Most of the ping-pong's sends skipped the send
    ring and the burst's large ones went by it; most of its receives took
    their bytes straight, and the burst's echo landed in the receive ring
    too (SD_SHIM_TRACE's rdma_writes and rdma_reads lines); neither host
    counts a reset."""
    trace = tmp_path / "client.trace"
    client_of_echo(peer, APP_PORT + 13, DIRECT_MIX, env={"SD_SHIM_TRACE": str(trace)})
    direct, ring = rdma_counts(trace.read_text(), "rdma_writes")
    assert direct >= 150 and ring >= 1, (direct, ring)
    direct, landed = rdma_counts(trace.read_text(), "rdma_reads")
    assert direct >= 150 and landed >= 1, (direct, landed)

def test_a_wait_spins_for_a_few_of_the_links_round_trips(peer, settings, tmp_path):
    """A process with RDMA connections times a write of data whenever
    none is being timed, from its post to its completion when a spinning
    thread finds it (or longer than a spin that ran out), and
    its waits spin for four of those round trips where that is longer than
    the default 200 µs, up to 2 ms (Documentation/libsd.rst); SD_SPIN_US
    fixes the spin instead.  A ping-pong of 300 messages, every byte
    checked: SD_SHIM_TRACE's rdma_spin line has a round trip measured and
    the spin that follows from it, and with SD_SPIN_US=300 a spin of
    300 µs whatever the round trip (which a 300 µs spin may not have
    seen: the ping-pong's waits stop spinning once 4 of them slept)."""
    for port, env in ((APP_PORT + 20, {}), (APP_PORT + 21, {"SD_SPIN_US": "300"})):
        trace = tmp_path / f"client-{port}.trace"
        client_of_echo(peer, port, SPIN_PINGPONG, args=("300", "recv", "0"),
                       env={"SD_SHIM_TRACE": str(trace), **env})
        rtt, spin = rdma_counts(trace.read_text(), "rdma_spin")
        assert 0 <= rtt <= 500, (rtt, spin)
        if env:
            assert spin == 300, (rtt, spin)
        else:
            # The first waits spin in full: their spins found the timed
            # write's completion, or ran out with it in flight.
            assert rtt > 0, (rtt, spin)
            # Both in whole µs, rounded down from ns.
            assert max(200, min(2000, 4 * rtt)) <= spin <= max(200, min(2000, 4 * rtt + 3)), \
                (rtt, spin)


REUSED = """
import os, socket, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
r, w = os.pipe()
lst = socket.create_server(("127.0.0.1", 0))
far = socket.create_connection((host, port))
far.sendall(b"ping")
assert far.recv(4) == b"ping"
if os.fork() == 0:
    os.read(r, 1)       # holds the connection until told to go
    os._exit(0)
n = far.fileno()
far.close()
near = socket.create_connection(lst.getsockname())
assert near.fileno() == n, f"the local connection got {near.fileno()}, not {n}"
other, _ = lst.accept()
got = []
for rx, tx in ((other, near), (near, other)):
    t = threading.Thread(target=lambda: got.append(rx.recv(5)), daemon=True)
    t.start()
    time.sleep(1)       # asleep in its receive by now
    tx.sendall(b"hello")
    t.join(15)          # a wake-up takes milliseconds
    if t.is_alive():
        print(f"receive {len(got)} was not woken", file=sys.stderr, flush=True)
        os.write(w, b"x")
        os._exit(1)
assert got == [b"hello", b"hello"], got
os.write(w, b"x")
os.wait()
print("ok")
"""


def test_a_closed_connections_number_is_the_next_sockets_own(peer, settings):
    """The client closes its RDMA connection while a forked child still
    holds it, so the bridge carries it on, and the next socket, a local
    connection, gets the same descriptor number.  A receive asleep on the
    other end of that local connection must be woken by a send on it, and
    a receive asleep on it by a send from the other end: the number is
    the local connection's now, not the bridge's (a send on it once
    skipped the wake-up, the bridge having nothing to do).  The RDMA
    connection ends cleanly when the child goes."""
    client_of_echo(peer, APP_PORT + 9, REUSED, timeout=300)


SINK_SUM = """
import hashlib, socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(65536)
    if not d:
        break
    h.update(d)
    n += len(d)
print(n, h.hexdigest(), flush=True)
"""

def sink_gets_all(peer, port, data, run_client):
    """SINK_SUM under sdrun on B's port; run_client() sends it data: B
    must get exactly that, then the end of stream."""
    srv = peer.spawn([SDRUN, sys.executable, "-c", SINK_SUM, str(port)])
    try:
        assert srv.readline() == "ready"
        run_client()
        line = srv.readline(120)
        assert line == f"{len(data)} {hashlib.sha256(data).hexdigest()}", \
            (line, srv.rc, srv.stderr)
        assert srv.wait(60) == 0, srv.stderr
    finally:
        srv.kill()


LEAVER = """
import ctypes, os, socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(bytes(range(256)) * 1000)
print("sent", flush=True)
if sys.argv[3] == "pthread_exit":
    ctypes.CDLL(None).pthread_exit(None)
os._exit(0)
"""


@pytest.mark.parametrize("how", ["pthread_exit", "_exit"])
def test_program_ends_with_a_connection_open(peer, settings, how):
    """A program under sdrun ends without closing its RDMA connection: its
    only thread ends with pthread_exit, or it calls _exit.  It exits with
    status 0, as on TCP (libsd's bridge thread does not keep it alive), and
    the other host gets every byte, then the end of stream, with no reset
    counted on either host: the bridge carries the rest before the process
    goes, and the socket's close, not the bridge's descriptor (released
    just before it), tells the peer's monitor how the connection ended."""
    port = {"pthread_exit": APP_PORT + 2, "_exit": APP_PORT + 3}[how]
    rendezvous_with(peer)
    data = bytes(range(256)) * 1000
    before, pbefore = stats(), stats(peer)

    def leaver():
        out = subprocess.run([SDRUN, sys.executable, "-c", LEAVER, peer.remote,
                              str(port), how], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "sent", out.stderr
    sink_gets_all(peer, port, data, leaver)
    assert_rdma_without_resets(peer, before, pbefore, 1)


XHOST = str(TOP / "tests" / "integration" / "xhost.py")


def run_scenario(peer, name, port):
    """The xhost scenario's server half under sdrun on B and its client
    half under sdrun here: both transcripts' rows, with no check failed."""
    srv = peer.spawn([SDRUN, sys.executable, XHOST, "server", name, str(port)])
    try:
        assert srv.readline() == "ready", srv.stderr
        out = subprocess.run([SDRUN, sys.executable, XHOST, "client", name,
                              peer.remote, str(port)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        line = srv.readline(300)
        assert line is not None, srv.stderr
        assert srv.wait(60) == 0, srv.stderr
    finally:
        srv.kill()
    rows = json.loads(line) + json.loads(out.stdout)
    assert [r for r in rows if r[1] is False] == [], rows
    return rows


def test_forked_child_takes_up_the_connection(peer, settings):
    """The client under sdrun forks and exits at once while its child holds
    the RDMA connection, most of the server's answer still on its way (the
    xhost scenario parent_exits_child_carries_on).  The parent's bridge
    leaves (counted as rdma_moves), the child's takes the connection up
    from where it stopped, the server's bridge sends again what the parent
    had not taken, and every byte arrives both ways, with no reset on
    either host."""
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    rows = run_scenario(peer, "parent_exits_child_carries_on", APP_PORT + 5)
    assert ["last", {"bytes": 6, "crc": zlib.crc32(b"thanks")}] in rows, rows
    assert delta(before, stats()).get("rdma_moves") == 1, delta(before, stats())
    assert_rdma_without_resets(peer, before, pbefore, 1)


def delay_link_from(peer, port, ms):
    """B's packets from TCP port (its monitor's side of the links) wait ms
    before they leave B, and nothing else does: a prio qdisc on B's NIC
    whose third band, where the filter sends them, is netem.  Returns the
    command that takes it away."""
    dev = peer.run(["sh", "-c", f"ip -o addr show to {peer.remote} | cut -d' ' -f2"])
    dev = dev["stdout"].strip()
    assert dev, f"no device of B holds {peer.remote}"
    for cmd in (["qdisc", "add", "dev", dev, "root", "handle", "1:", "prio"],
                ["qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:",
                 "netem", "delay", f"{ms}ms"],
                ["filter", "add", "dev", dev, "protocol", "ip", "parent", "1:0",
                 "prio", "1", "u32", "match", "ip", "sport", str(port), "0xffff",
                 "flowid", "1:3"]):
        out = peer.run(["tc"] + cmd)
        assert out["rc"] == 0, out
    return ["tc", "qdisc", "del", "dev", dev, "root"]


@pytest.mark.parametrize("when", ["in_turn", "at_once"])
def test_both_ends_move(peer, settings, when):
    """Both ends' parents exit while their children hold the connection,
    the server's first (the xhost scenario both_parents_exit): both
    bridges leave, and every byte arrives both ways, with one move and no
    reset counted on each host.  in_turn: the client's bridge finds the
    server's moving when its own process exits, follows that move and
    leaves after.  at_once: B's messages on the link wait 1 s on the way,
    so the client's bridge leaves before the server's LEAVE arrived; the
    two LEAVEs cross, which both monitors count.  The client's (the
    connecting side's) goes on; the server's bridge is refused, follows
    that move, and leaves after."""
    rendezvous_with(peer)
    undo = None
    try:
        if when == "at_once":
            for key in ("rendezvous_timeout_ms",):
                sysctl(key, 10000)
                peer_sysctl(peer, key, 10000)
            undo = delay_link_from(peer, RDV_PORT, 1000)
        before, pbefore = stats(), stats(peer)
        try:
            run_scenario(peer, "both_parents_exit",
                         APP_PORT + {"in_turn": 16, "at_once": 17}[when])
        except AssertionError as e:
            # What each monitor counted, for the cause (a move that did
            # not happen, crossed or not, a reset).
            raise AssertionError(f"{e}\nA: {delta(before, stats())}\n"
                                 f"B: {delta(pbefore, stats(peer))}") from None
        d, pd = delta(before, stats()), delta(pbefore, stats(peer))
    finally:
        if undo:
            peer.run(undo)
        sysctl("rendezvous_timeout_ms", 1000)
        peer_sysctl(peer, "rendezvous_timeout_ms", 1000)
    crossed = 1 if when == "at_once" else None
    assert d.get("rdma_moves") == 1 and d.get("rdma_moves_crossed") == crossed, d
    assert pd.get("rdma_moves") == 1 and pd.get("rdma_moves_crossed") == crossed, pd
    assert_rdma_without_resets(peer, before, pbefore, 1)


def test_child_takes_up_the_connection_its_living_parent_closed(peer, settings):
    """The client under sdrun forks and closes its copy of the RDMA
    connection, most of the server's answer still on its way, and lives on
    until its child is done (the xhost scenario
    parent_lives_child_carries_on, the postgres pattern).  The child asks
    for the connection, the parent's bridge hands it over (counted as
    rdma_moves) and the child's carries it: every byte arrives both ways,
    with no reset on either host."""
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    rows = run_scenario(peer, "parent_lives_child_carries_on", APP_PORT + 10)
    assert ["child", 0] in rows, rows
    assert delta(before, stats()).get("rdma_moves") == 1, delta(before, stats())
    assert_rdma_without_resets(peer, before, pbefore, 1)


EXEC_CLIENT = """
import os, socket, subprocess, sys, time
sys.path.insert(0, {here!r})
from xhost import ANSWER, pattern, recv_all, recv_exact


def rest(s, got=100000):
    # The rest of the answer, 1 MiB back, the last word.
    rest = recv_exact(s, ANSWER - got)
    s.sendall(pattern(1 << 20, 10))
    s.shutdown(socket.SHUT_WR)
    ok = rest == pattern(ANSWER, 9)[got:] and recv_all(s) == b"thanks"
    s.close()
    sys.exit(0 if ok else 1)


if sys.argv[1] == "next":
    rest(socket.socket(fileno=int(sys.argv[2])), int(sys.argv[3]))
s = socket.create_connection((sys.argv[2], int(sys.argv[3])))
s.sendall(pattern(100000, 8))
assert recv_exact(s, 100000) == pattern(ANSWER, 9)[:100000]
if sys.argv[1] == "spawn":
    # Children (Python's subprocess: fork and exec) that run a program and
    # exit, one keeping the socket, one closing everything first.
    for close in (False, True):
        subprocess.run([sys.executable, "-c", "pass"], check=True,
                       close_fds=close, pass_fds=() if close else (s.fileno(),))
    rest(s)
s.set_inheritable(True)
if sys.argv[1] == "failed":
    # An exec that fails: this image takes the connection back.
    try:
        os.execv("/nonexistent/program", ["program"])
    except FileNotFoundError:
        rest(s)
    sys.exit(1)
if sys.argv[1] == "vfork":
    # sd_vfork runs true in a child of vfork, reads 1 MiB of the answer
    # itself, and execs the next image.
    fd = str(s.fileno())
    os.execv({vfork!r}, [{vfork!r}, "/bin/true", fd, str(1 << 20), "--",
                         sys.executable, __file__, "next", fd, str(100000 + (1 << 20))])
if sys.argv[1] == "fork":
    pid = os.fork()
    if pid:
        s.close()
        _, st = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(st))
    time.sleep(0.5)     # its parent's bridge hands the connection over
os.execv(sys.executable, [sys.executable, __file__, "next", str(s.fileno()), "100000"])
"""


@pytest.mark.parametrize("how", ["exec", "failed", "fork", "spawn", "vfork"])
def test_next_image_takes_up_the_connection(peer, settings, tmp_path, how):
    """The client under sdrun execs, most of the server's answer still on
    its way, and its next image (under sdrun too) carries the connection on
    from the descriptor exec kept: it reads the rest, sends 1 MiB and reads
    the server's last word.  exec: the process that made the connection
    execs (its bridge leaves for the next image: one move).  failed: its
    exec fails, and the same image takes the connection back (one move).
    fork: its
    child, half a second after its parent closed its copy (the parent's
    bridge hands it over), execs (a second move).  spawn: the process runs
    two short programs through Python's subprocess (fork and exec; one
    child keeping the socket, one closing everything) and carries on
    itself: no move.  vfork: it execs sd_vfork (a move), which runs true
    in a child of vfork (the child's exec leaves the bridge to its parent:
    no move), reads 1 MiB more itself (its bridge carries it) and execs the
    next image (a second move).  Every byte is checked, and neither host
    counts a reset."""
    port = APP_PORT + {"exec": 11, "fork": 12, "spawn": 13, "vfork": 14, "failed": 15}[how]
    script = tmp_path / "exec_client.py"
    script.write_text(EXEC_CLIENT.format(here=str(TOP / "tests" / "integration"),
                                         vfork=str(TOP / "build" / "user" / "tests" /
                                                   "progs" / "sd_vfork")))
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    name = "parent_exits_child_carries_on"
    srv = peer.spawn([SDRUN, sys.executable, XHOST, "server", name, str(port)])
    try:
        assert srv.readline() == "ready", srv.stderr
        out = subprocess.run([SDRUN, sys.executable, str(script), how, peer.remote,
                              str(port)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        line = srv.readline(300)
        assert line is not None, srv.stderr
        assert srv.wait(60) == 0, srv.stderr
    finally:
        srv.kill()
    rows = json.loads(line)
    assert [r for r in rows if r[1] is not True] == [], rows
    moves = {"exec": 1, "failed": 1, "fork": 2, "spawn": None, "vfork": 2}[how]
    assert delta(before, stats()).get("rdma_moves") == moves, delta(before, stats())
    assert_rdma_without_resets(peer, before, pbefore, 1)


def run_until_it_left(script, peer, port):
    """Run a client script under sdrun against B's port; it forks and says
    "left" as its parent goes."""
    out = subprocess.run([SDRUN, sys.executable, "-c", script, peer.remote,
                          str(port)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "left", out.stderr


HANDER = """
import os, socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"hello")
os.set_inheritable(c.fileno(), True)
if os.fork() == 0:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.execve("/bin/sleep", ["sleep", "60"], env)
time.sleep(1)
print("left", flush=True)
"""


def test_connection_left_to_a_process_without_libsd_is_reset(peer, settings):
    """The client under sdrun forks a child that execs a program without
    libsd (sleep) holding the socket, and exits.  Its bridge leaves, but
    no successor comes: the server's bridge resets the connection after
    its 10 s wait, and the server's recv fails instead of waiting for
    ever."""
    port = APP_PORT + 6
    rendezvous_with(peer)
    before = stats()
    srv = peer.spawn([SDRUN, sys.executable, "-c", IDLE_SERVER, str(port)])
    try:
        assert srv.readline() == "ready"
        run_until_it_left(HANDER, peer, port)
        assert srv.readline(60) == "got hello"
        t0 = time.monotonic()
        line = srv.readline(60)
        took = time.monotonic() - t0
        assert line == "recv ConnectionResetError", line
        print(f"the server's recv failed {took:.1f} s after the client left")
    finally:
        srv.kill()
        subprocess.run(["pkill", "-x", "sleep"])
    d = delta(before, stats())
    assert d.get("rdma_moves") == 1 and d.get("rdma_resets") == 1, d


QUICK_CHILD = """
import os, socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"hello")
r, w = os.pipe()
if os.fork() == 0:
    os.close(w)
    os.read(r, 1)                   # EOF: the parent is gone
    c.sendall(bytes(range(256)) * 256)
    c.close()
    sys.exit(0)                     # at once, as a short-lived worker
os.close(r)
print("left", flush=True)
"""


def test_child_ending_before_it_took_up_the_connection_still_delivers(peer, settings):
    """The client under sdrun forks and exits; its child waits for the
    parent to be gone, sends 64 KiB, closes and exits at once, sooner than
    its bridge thread's next look for connections to take up.  Its exit
    takes the connection up first and carries the bytes out: the server
    gets every byte, then the end of stream, with no reset on either
    host."""
    port = APP_PORT + 7
    rendezvous_with(peer)
    data = b"hello" + bytes(range(256)) * 256
    before, pbefore = stats(), stats(peer)
    sink_gets_all(peer, port, data, lambda: run_until_it_left(QUICK_CHILD, peer, port))
    assert delta(before, stats()).get("rdma_moves") == 1, delta(before, stats())
    assert_rdma_without_resets(peer, before, pbefore, 1)


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


def test_idle_peer_killed_ends_the_connection(peer, settings):
    """A client under sdrun sends a request and waits; the server on the
    other host reads it and waits for more.  The client is killed (SIGKILL:
    nothing of libsd runs, no end of stream goes over RDMA).  The server's
    recv returns within seconds instead of waiting for ever: its monitor
    hears a clean close (nothing was left unsent), its bridge sees that no
    end of stream came and resets the connection (ECONNRESET where TCP
    gives the end of stream; either is accepted here)."""
    port = APP_PORT + 4
    rendezvous_with(peer)
    before = stats()
    srv = peer.spawn([SDRUN, sys.executable, "-c", IDLE_SERVER, str(port)])
    cli = None
    try:
        assert srv.readline() == "ready"
        cli = subprocess.Popen([SDRUN, sys.executable, "-c", IDLE_CLIENT,
                                peer.remote, str(port)],
                               stdout=subprocess.PIPE, text=True)
        assert cli.stdout.readline().strip() == "sent"
        assert srv.readline(120) == "got hello"
        time.sleep(1)
        cli.kill()
        cli.wait(30)
        t0 = time.monotonic()
        line = srv.readline(60)
        took = time.monotonic() - t0
        assert line in ("recv ConnectionResetError", "recv b''"), line
        print(f"the server's recv returned {took:.1f} s after the kill: {line}")
    finally:
        if cli and cli.poll() is None:
            cli.kill()
        srv.kill()
    assert delta(before, stats()).get("rdma_connects") == 1


@pytest.mark.parametrize("how", ["kill", "link", "device"])
def test_rdma_failure_mid_transfer_is_an_error(peer, settings, how):
    """A client on A streams over an RDMA connection (the bridge prototype)
    to a server on B; the server is killed, or the link between the hosts
    drops (A's NIC goes down), or B's RDMA device is removed: the client's calls end in an error within the bound (the
    other monitor's CLOSE, the link's keepalive, or the queue pair's
    retries), never a hang; after a broken link or device both sides
    count the reset."""
    port = {"kill": 9501, "link": 9502, "device": 9503}[how]
    rendezvous_with(peer)
    before, pbefore = stats(), stats(peer)
    rxe = rxe_counters(), rxe_counters(peer)
    srv = peer.spawn([BRIDGE, "server", peer.remote, str(port)])
    assert srv.readline() == "ready"
    cli = subprocess.Popen([BRIDGE, "client", peer.remote, str(port),
                            str(1 << 40), "3"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(5)
    out, err, took = break_and_wait(how, srv, cli, peer, rxe)
    assert cli.returncode == 1, (out, err)
    assert "reset" in err.lower() or "broken pipe" in err.lower(), err
    # A server killed when it had taken every byte that landed ends
    # cleanly (its monitor's CLOSE), and the client's next send meets a
    # closed socket (EPIPE, as after TCP's FIN and RST): no reset counted
    # here then.  A broken link or device is always a reset.
    if how != "kill":
        assert delta(before, stats()).get("rdma_resets", 0) >= 1
    print(f"{how}: the client failed {took:.1f} s after", err.strip())
    if how == "kill":
        return
    # B's end is reset too (its monitor got A's CLOSE, or its link broke):
    # the server fails rather than waits.  Asked over a new connection:
    # the agent's old ones may still be backing off from the outage.
    deadline = time.monotonic() + 120
    while stats(peer).get("rdma_resets", 0) - pbefore.get("rdma_resets", 0) < 1:
        if os.environ.get("SD_DIAG"):
            print("A:", subprocess.run(["ss", "-tnoiae"], capture_output=True, text=True).stdout)
            print("B:", peer.run(["ss", "-tnoiae"])["stdout"])
        assert time.monotonic() < deadline, "B's end was never reset"
        time.sleep(1 if not os.environ.get("SD_DIAG") else 10)


STREAMER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("connected", flush=True)
chunk = b"s" * 65536
try:
    while True:
        c.sendall(chunk)
except OSError as e:
    print(type(e).__name__, e, file=sys.stderr)
    sys.exit(1)
"""

SINK = """
import socket, sys
lst = socket.create_server(("", int(sys.argv[1])))
print("ready", flush=True)
c, _ = lst.accept()
while c.recv(1 << 20):
    pass
"""


@pytest.mark.parametrize("how", ["kill", "link", "device"])
def test_libsd_bridge_failure_is_an_error(peer, settings, how):
    """Plain programs under sdrun, carried by libsd's bridge: A streams to
    a sink on B; the sink is killed, A's NIC goes down, or the NIC under
    A's RDMA device leaves its driver: A's send fails
    (a reset or a broken pipe) within the bound, never a hang; after a
    broken link or device A counts the reset."""
    port = {"kill": 9511, "link": 9512, "device": 9513}[how]
    rendezvous_with(peer)
    before = stats()
    rxe = rxe_counters(), rxe_counters(peer)
    srv = peer.spawn([SDRUN, sys.executable, "-c", SINK, str(port)])
    assert srv.readline() == "ready"
    cli = subprocess.Popen([SDRUN, sys.executable, "-c", STREAMER,
                            peer.remote, str(port)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert cli.stdout.readline().strip() == "connected"
        time.sleep(5)
        assert delta(before, stats()).get("rdma_connects") == 1
        out, err, took = break_and_wait(how, srv, cli, peer, rxe)
    finally:
        cli.kill()
        srv.kill()
    assert cli.returncode == 1, (out, err)
    assert "ConnectionResetError" in err or "BrokenPipeError" in err, err
    # A sink killed with nothing unread in its ring closes cleanly (its
    # monitor's CLOSE); A's bridge then resets its own end because what it
    # sent was never taken, but that link had ended already: counted only
    # after a broken link or device.
    if how != "kill":
        assert delta(before, stats()).get("rdma_resets", 0) >= 1
    print(f"{how}: the client failed {took:.1f} s after", err.strip())


def rdma_path_back(peer):
    """After a broken link or device: wait (bounded) until a queue pair
    between the two devices works again both ways, so that the next test
    does not meet what is left of the outage (B's neighbour entry for A,
    A's address table) instead of what it tests."""
    deadline = time.monotonic() + 60
    port = 18600
    while True:
        port += 1
        out, srv_rc = pingpong(peer, 5, port, timeout=30)
        if srv_rc == 0:
            return
        assert time.monotonic() < deadline, \
            "the RDMA path did not come back:\n" + out.stdout + out.stderr
        time.sleep(1)


def break_and_wait(how, srv, cli, peer, rxe):
    """The client still streaming, break the path (break_path), and wait
    for the client's end (bounded): its output and the seconds it took.
    The client is killed and the path restored whatever happens, and
    found working again (rdma_path_back).  rxe: both hosts' rxe_counters()
    from before the client started."""
    restore = None
    try:
        if cli.poll() is not None:
            # What the server on B said, and the counters, name the
            # side that failed first.
            out, err = cli.communicate()
            try:
                srv.wait(10)
            except (OSError, ConnectionError):
                pass
            pytest.fail(f"the client ended before the path broke "
                        f"(status {cli.returncode}): {out}{err}"
                        f"server on B (status {srv.rc}): {srv.stderr}\n"
                        f"counters: A {stats()}\nB {stats(peer)}\n"
                        f"rxe since the start: A "
                        f"{delta(rxe[0], rxe_counters())}\nB "
                        f"{delta(rxe[1], rxe_counters(peer))}")
        restore = break_path(how, srv)
        t0 = time.monotonic()
        if how == "link":
            # Up again once the client reported its failure: rxe's queue
            # pair destroy (at the client's exit) waits for packets held
            # by the downed NIC and warns after 50 s (rxe_pool.c, a
            # driver bug, not AF_SD's).
            while cli.poll() is None and time.monotonic() - t0 < 60 and \
                    not select.select([cli.stderr], [], [], 0.2)[0]:
                pass
            restore()
            restore = None
        out, err = cli.communicate(timeout=120)
        return out, err, time.monotonic() - t0
    finally:
        cli.kill()
        cli.wait()
        if restore:
            restore()
        if how != "kill":
            rdma_path_back(peer)


def break_path(how, srv):
    """Kill the server on B ("kill"), take A's NIC down ("link": A's side
    of the link, since B's agent is reached over it), or take A's RDMA
    device away ("device": rxe has no way to take a device from its users,
    deleting it waits for them, so it goes as hardware would: the NIC
    under A's rxe0 leaves its driver).  Returns what puts it back, or
    None."""
    local_dev = next(n for n in sorted(os.listdir("/sys/class/net"))
                     if n != "lo")
    if how == "kill":
        srv.kill()
        return None
    if how == "link":
        subprocess.run(["ip", "link", "set", local_dev, "down"], check=True)
        return lambda: subprocess.run(["ip", "link", "set", local_dev, "up"],
                                      check=True)
    addr = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev",
                           local_dev], check=True, text=True,
                          capture_output=True).stdout.split()[3]
    nic = os.path.basename(os.readlink(f"/sys/class/net/{local_dev}/device"))
    # First every packet the NIC is given is dropped, and the ones it sent
    # are reaped.  Else a packet rxe sent just before the unbind stays in
    # the dead NIC's queue, holding its queue pair, until the unbind is
    # over; the unbind waits for rxe0 to go, rxe0 for its users, and the
    # client's queue pair destroy (at its exit) for that packet: rxe breaks
    # the cycle after 50 s with a WARN (rxe_pool.c).  0.3 s is well within
    # the queue pair's retries (7 of 67 ms), so the device still leaves
    # mid-transfer.
    subprocess.run(["tc", "qdisc", "replace", "dev", local_dev, "root",
                    "netem", "loss", "100%"], check=True)
    time.sleep(0.3)
    with open("/sys/bus/virtio/drivers/virtio_net/unbind", "w") as f:
        f.write(nic)
    return lambda: restore_nic(nic, addr)


def restore_nic(nic, addr):
    """Give A its NIC back as guest-init set it up, with rxe0 on it."""
    with open("/sys/bus/virtio/drivers/virtio_net/bind", "w") as f:
        f.write(nic)
    deadline = time.monotonic() + 30
    while True:
        devs = [n for n in os.listdir("/sys/class/net") if n != "lo"]
        if devs or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert devs, "the NIC did not come back"
    subprocess.run(["ip", "addr", "add", addr, "dev", devs[0]], check=True)
    subprocess.run(["ip", "link", "set", devs[0], "up"], check=True)
    # The old rxe0 goes once its last user did.
    while True:
        out = subprocess.run(["rdma", "link", "add", "rxe0", "type", "rxe",
                              "netdev", devs[0]], capture_output=True,
                             text=True)
        if out.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert out.returncode == 0, out.stderr
