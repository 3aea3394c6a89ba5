"""kill -9 of one end in each state leaves the other end with the end of
the stream (EOF) or ECONNRESET within a bounded time, and leaves no AF_SD
socket behind (no_leak).  The victim runs through system calls or under
sdrun (libsd, so that it dies owning ring sides, inside a call or
between calls).  States: idle, asleep in recv, blocked on a full ring,
sending in a loop, a listener with connections queued, a client asleep
in connect at a full backlog, a client gone before its connection was
accepted, and one of two processes sharing a socket killed while it
holds the send side and the other waits for it (or the other way
round).  The last test checks that the module's reference count and the
family's tables are back where they were before the file ran."""
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import sdgenl
from conftest import StatsDelta, protocol_sockets, settled_sockets, wait_for
from sdsock import Family

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SDRUN = os.path.join(TOP, "build", "user", "lib", "shim", "sdrun")
PEER = os.path.join(HERE, "crash_peer.py")
SD = Family("sd")
BOUND = 5.0     # seconds the survivor may wait for the end


def spawn(mode, port, libsd):
    cmd = ([SDRUN] if libsd else []) + [sys.executable, PEER, mode, str(port)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return p


def until_end(s, drain=True):
    """Read until EOF or an error; return what ended it and the bytes."""
    s.settimeout(BOUND)
    got = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < BOUND + 30:
        try:
            b = s.recv(1 << 20)
        except ConnectionResetError:
            return "ECONNRESET", got
        except socket.timeout:
            return "TIMEOUT", got
        if not b:
            return "EOF", got
        got += len(b)
    return "TOO MUCH DATA", got


def send_fails(s):
    """A send after the peer died fails (EPIPE or ECONNRESET) within a few
    tries, as on TCP where the first may still be taken."""
    s.settimeout(BOUND)
    for _ in range(4):
        try:
            s.send(b"x", socket.MSG_NOSIGNAL)
        except (BrokenPipeError, ConnectionResetError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
@pytest.mark.parametrize("mode", ["idle", "recv", "send_full", "send_loop"])
def test_kill_one_end(mode, libsd, no_leak):
    lst, port = SD.listener()
    p = spawn(mode, port, libsd)
    try:
        s = SD.accept(lst)
        assert s.recv(5) == b"hello"
        assert p.stdout.readline().strip() == "ready"
        stop = threading.Event()
        drained = [0]
        if mode == "send_loop":
            # Keep reading, so the victim stays busy in its sends.
            def drain():
                s.settimeout(0.2)
                while not stop.is_set():
                    try:
                        b = s.recv(1 << 16)
                        if not b:
                            return
                        drained[0] += len(b)
                    except (socket.timeout, ConnectionResetError):
                        return
            th = threading.Thread(target=drain)
            th.start()
            time.sleep(0.5)
        else:
            time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        if mode == "send_loop":
            stop.set()
            th.join(10)
            assert drained[0] > 0, "the victim never sent"
        how, _ = until_end(s)
        assert how in ("EOF", "ECONNRESET"), f"{mode}: survivor saw {how}"
        assert time.monotonic() - t0 < BOUND + 5
        assert send_fails(s), f"{mode}: sends to a dead peer still succeed"
        s.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        lst.close()


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_kill_listener_with_queued_connections(libsd, no_leak):
    p = spawn("listener", 0, libsd)
    try:
        port = int(p.stdout.readline())
        clients = []
        for _ in range(3):
            c = SD.socket()
            assert SD.connect(c, "127.0.0.1", port) == "OK"
            clients.append(c)
        clients[0].sendall(b"never accepted")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        for c in clients:
            how, _ = until_end(c)
            assert how in ("EOF", "ECONNRESET"), how
            c.close()
        # The port is free again.
        again = SD.socket()
        assert SD.bind(again, "127.0.0.1", port) == "OK"
        again.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def fill_backlog(port, queued):
    """Queue clients (appended to queued) until the listener's backlog is
    full: a non-blocking connect is queued (EINPROGRESS) or meets a full
    backlog (EAGAIN)."""
    for _ in range(64):
        c = SD.socket(flags=socket.SOCK_NONBLOCK)
        rc = SD.connect(c, "127.0.0.1", port)
        if rc == "EAGAIN":
            c.close()
            return
        queued.append(c)
        assert rc == "EINPROGRESS", rc
        c.setblocking(True)
    raise AssertionError("the backlog never filled")


def exchange(c, s, data=b"still works"):
    c.sendall(data)
    s.settimeout(BOUND)
    assert s.recv(100) == data
    s.sendall(data[::-1])
    c.settimeout(BOUND)
    assert c.recv(100) == data[::-1]


def accept_within(lst, timeout=BOUND):
    ready, _, _ = select.select([lst], [], [], timeout)
    assert ready, f"nothing to accept within {timeout} s"
    return SD.accept(lst)


def still_accepts(lst, port):
    """A new client gets in and the connection works."""
    c = SD.socket()
    assert SD.connect(c, "127.0.0.1", port) == "OK"
    s = accept_within(lst)
    exchange(c, s)
    c.close()
    s.close()


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_kill_client_asleep_in_connect(libsd, no_leak):
    """A client asleep in connect because the backlog is full dies there:
    it never joins the queue, the clients queued before it and the
    listener carry on, and a new client gets in once there is room."""
    lst, port = SD.listener(backlog=1)
    queued, p = [], None
    try:
        fill_backlog(port, queued)
        d = StatsDelta()
        p = spawn("connect", port, libsd)
        assert p.stdout.readline().strip() == "connecting"
        assert wait_for(lambda: d()["backlog_full"] >= 1, timeout=BOUND), \
            "the victim's connect did not meet the full backlog"
        time.sleep(0.2)
        assert p.poll() is None, "connect returned at a full backlog"
        p.send_signal(signal.SIGKILL)
        assert p.wait(BOUND) == -signal.SIGKILL
        # Exactly the clients queued before it, in order, all working.
        for c in queued:
            exchange(c, accept_within(lst))
        lst.setblocking(False)
        with pytest.raises(BlockingIOError):
            lst.accept()
        lst.setblocking(True)
        assert d()["connects"] == 0, "the dead client's connect counted"
        still_accepts(lst, port)
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        for c in queued:
            c.close()
        lst.close()


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_kill_client_before_accept(libsd, no_leak):
    """A client connected, sent, and died before the server accepted: the
    server still accepts its connection and reads what it sent, then EOF
    or ECONNRESET; the listener goes on accepting."""
    lst, port = SD.listener()
    p = spawn("idle", port, libsd)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGKILL)
        assert p.wait(BOUND) == -signal.SIGKILL
        t0 = time.monotonic()
        s = accept_within(lst)
        s.settimeout(BOUND)
        got = b""
        how = None
        while how is None:
            try:
                b = s.recv(100)
                got += b
                how = None if b else "EOF"
            except ConnectionResetError:
                how = "ECONNRESET"
        assert how == "ECONNRESET" or got == b"hello", (how, got)
        assert time.monotonic() - t0 < BOUND
        assert send_fails(s)
        s.close()
        still_accepts(lst, port)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        lst.close()


def read_all(s, into, limit=BOUND + 20):
    """Read s until EOF or an error into the bytearray into; return what
    ended it."""
    s.settimeout(limit)
    while True:
        try:
            b = s.recv(1 << 20)
        except ConnectionResetError:
            return "ECONNRESET"
        except socket.timeout:
            return "TIMEOUT"
        if not b:
            return "EOF"
        into += b


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
@pytest.mark.parametrize("victim", ["holder", "sharer"])
def test_kill_sharer_of_the_send_side(victim, libsd, no_leak):
    """Two processes share a connection (fork).  The holder sends 1 MiB
    into a ring nobody reads and sleeps in its send, owning the send side
    (under libsd: the send token, busy); the sharer then sends and waits
    for the side.  kill -9 of either: the other must get the side and
    finish its send within the bound, and the reader sees whole sends
    only (no send torn by the other's or by the kill), then EOF."""
    lst, port = SD.listener()
    p = spawn("shared", port, libsd)
    pids = {}
    s = SD.accept(lst)
    try:
        assert s.recv(5) == b"hello"
        assert p.stdout.readline().strip() == "ready"
        for _ in range(2):
            who, pid = p.stdout.readline().split()
            pids[who] = int(pid)
        assert set(pids) == {"holder", "sharer"}
        time.sleep(0.5)             # the sharer is waiting in its send
        got = bytearray()
        t0 = time.monotonic()
        os.kill(pids[victim], signal.SIGKILL)
        how = read_all(s, got)
        took = time.monotonic() - t0
        lines = []
        while True:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        p.wait(BOUND)
        survivor = "sharer" if victim == "holder" else "holder"
        assert f"{survivor} sent" in lines, (lines, how, len(got))
        assert how == "EOF", (how, lines)
        assert took < BOUND, took
        data = bytes(got)
        if victim == "holder":
            # Some of the holder's bytes, then all of the sharer's.
            rest = data.lstrip(b"H")
            assert rest == b"S" * 1000 + b"END", \
                (len(data), len(rest), rest[:40], rest[-40:])
        else:
            # All of the holder's.  The sharer's send is in whole, between
            # two of the holder's, or not at all: killed asleep, it may
            # still get the side before it sees the signal (as on TCP,
            # where a send waiting for the socket lock goes on with the
            # signal pending while there is room).
            at = data.find(b"S")
            if at >= 0:
                assert at % 8192 == 0 and \
                    data[at:at + 1003] == b"S" * 1000 + b"END", \
                    (at, data[at:at + 1003])
                data = data[:at] + data[at + 1003:]
            assert data == b"H" * (1 << 20), (len(data), data.strip(b"H")[:40])
    finally:
        s.close()
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        lst.close()


REFCNT = pathlib.Path("/sys/module/af_sd/refcnt")


def tables():
    """Entries of the family's socket and listener dumps."""
    with sdgenl.Genl() as nl:
        return (len(nl.dump(sdgenl.SD_CMD_SOCK_GET).replies),
                len(nl.dump(sdgenl.SD_CMD_LISTENER_GET).replies))


@pytest.fixture(scope="module", autouse=True)
def baseline():
    """The module's reference count (one per socket, and more), the
    family's sockets and its tables before the first test of the file."""
    sockets = settled_sockets()
    return int(REFCNT.read_text()), sockets, tables()


def test_zz_nothing_left_behind(baseline):
    """After every crash above (this runs last): the module's reference
    count, the sockets in use and the socket and listener tables are back
    to where they were, so no kernel object outlived its process."""
    refcnt, sockets, tabs = baseline
    assert wait_for(lambda: int(REFCNT.read_text()) == refcnt, timeout=10), \
        f"af_sd refcnt {REFCNT.read_text().strip()}, {refcnt} before"
    assert wait_for(lambda: protocol_sockets() <= sockets), \
        f"{protocol_sockets()} AF_SD sockets, {sockets} before"
    assert tables() == tabs
