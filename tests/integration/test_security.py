"""Trust boundaries of the socket layer (Documentation/security.rst): what
a second thread, another user or a TCP program can make of an AF_SD
socket's connection setup and ports.

Each test states the boundary it holds.  Where TCP has the same call, the
same sequence runs on TCP over loopback and the transcripts must agree."""
import errno
import os
import select
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import redirect, wait_for
from sdgenl import (SD_A_SOCK_INODE, SD_A_SOCK_PID, SD_A_SOCK_UID,
                    SD_CMD_SOCK_GET, Genl, as_nobody, parse_attrs)
from sdsock import Family, errname, sockname

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

HERE = os.path.dirname(os.path.abspath(__file__))
SD, TCP = Family("sd"), Family("tcp")
SYS_CONNECT = 42                      # x86_64
SDRUN = os.path.join(HERE, "..", "..", "build", "user", "lib", "shim",
                     "sdrun")


def in_syscall(tid, nr):
    """Whether thread tid of this process sleeps in system call nr."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
        with open(f"/proc/self/task/{tid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return fields and fields[0] == str(nr) and state == "S"


class Blocked:
    """fn() in a thread of its own, once it sleeps in system call nr."""

    def __init__(self, fn, nr):
        self.result = None
        self.tid = None
        ready = threading.Event()

        def run():
            self.tid = threading.get_native_id()
            ready.set()
            self.result = fn()
        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()
        ready.wait()
        assert wait_for(lambda: in_syscall(self.tid, nr), 20), \
            "the thread never slept in the call"

    def join(self, timeout=20):
        self.t.join(timeout)
        assert not self.t.is_alive(), "the call never returned"
        return self.result


def bounded(s, seconds=20):
    """Blocking calls on s (accept, recv, send) give up after seconds."""
    tv = struct.pack("ll", seconds, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    return s


def full_listener(fam):
    """A listener whose backlog (0) is full: one client queued, and the
    next connect waits.  TCP's full queue drops the SYN, so its connect
    waits too."""
    lst, port = fam.listener(backlog=0)
    bounded(lst)
    first = fam.socket()
    assert fam.connect(first, "127.0.0.1", port) == "OK"
    return lst, port, first


def waiting_connect(fam):
    """A socket whose connect, in a thread of its own, waits for room."""
    lst, port, first = full_listener(fam)
    s = fam.socket()
    waiter = Blocked(lambda: fam.connect(s, "127.0.0.1", port), SYS_CONNECT)
    return lst, port, first, s, waiter


def calls_during_connect(fam):
    """What other threads' calls say while a connect waits for room, and
    what shutdown then does to the waiting connect."""
    lst, port, first, s, waiter = waiting_connect(fam)
    out = {}
    try:
        s.listen(8)
        out["listen"] = "OK"
    except OSError as e:
        out["listen"] = errname(e.errno)
    # Non-blocking (a blocking one waits for the first one's end).
    os.set_blocking(s.fileno(), False)
    out["connect"] = fam.connect(s, "127.0.0.1", port)
    os.set_blocking(s.fileno(), True)
    out["bind"] = fam.bind(s, "127.0.0.1", 0)
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLOUT)
    out["poll"] = p.poll(0)
    try:
        s.getpeername()
        out["getpeername"] = "OK"
    except OSError as e:
        out["getpeername"] = errname(e.errno)
    # Another thread's shutdown aborts the connect, as TCP's does.
    s.shutdown(socket.SHUT_RDWR)
    out["waiter"] = waiter.join()
    out["so_error"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    # Room in the queue: nothing of the aborted connect is there.
    fam.accept(lst).close()
    lst.setblocking(False)
    try:
        fam.accept(lst)
        out["queue"] = "accepted"
    except BlockingIOError:
        out["queue"] = "EAGAIN"
    for x in (s, first, lst):
        x.close()
    return out


def test_a_waiting_connect_is_seen_by_every_other_call(no_leak):
    """Boundary: a socket's other threads.  A connect that waits for
    backlog room lets the socket lock go; meanwhile the socket is
    connecting (TCP's SYN_SENT): listen and bind are EINVAL, a second
    connect EALREADY, poll says nothing, and shutdown aborts the connect
    (ECONNRESET), all as on TCP.  (Before: listen succeeded, and the
    socket, once connected too, was freed while still in its listening
    group: a use after free and a soft lockup.)"""
    sd = calls_during_connect(SD)
    assert sd == calls_during_connect(TCP)
    assert sd == {"listen": "EINVAL", "connect": "EALREADY",
                  "bind": "EINVAL", "poll": [], "getpeername": "ENOTCONN",
                  "waiter": "ECONNRESET", "so_error": 0,
                  "queue": "EAGAIN"}, sd


def test_a_waiting_connect_goes_through_once_there_is_room(no_leak):
    """The connect that other calls saw waiting ends connected once the
    listener's queue has room, and carries bytes; a second blocking
    connect and a poll that waited meanwhile see its end.  (AF_SD only:
    TCP's client would wait for its SYN to be sent again, seconds
    later.)"""
    lst, port, first, s, waiter = waiting_connect(SD)
    with pytest.raises(OSError) as e:
        s.listen(8)
    assert e.value.errno == errno.EINVAL
    second = Blocked(lambda: SD.connect(s, "127.0.0.1", port), SYS_CONNECT)
    p = select.poll()
    p.register(s, select.POLLOUT)
    polling = Blocked(lambda: p.poll(60000), 7)         # SYS_poll
    SD.accept(lst).close()
    assert waiter.join() == "OK"
    # Those that waited for its end: a second connect says connected, as
    # TCP's does, and a poll wakes up writable.
    assert second.join() == "OK"
    assert polling.join() == [(s.fileno(), select.POLLOUT)]
    a = bounded(SD.accept(lst))
    s.sendall(b"ping")
    assert a.recv(4) == b"ping"
    for x in (s, a, first, lst):
        x.close()


CONNECT_LISTEN_CLOSE = textwrap.dedent("""
    # The sequence that hung the kernel: listen on a socket whose connect
    # waits, let the connect through, close, then dial the socket's port.
    import os, socket, sys, threading, time
    sys.path.insert(0, %r)
    from sdsock import Family, sockname
    from test_security import waiting_connect
    SD = Family("sd")
    for round in range(20):
        lst, port, first, s, w = waiting_connect(SD)
        try:
            s.listen(8)
            print("listen OK")
        except OSError:
            pass
        SD.accept(lst).close()
        assert w.join() == "OK"
        mine = sockname(s)[1]
        s.close()
        c = SD.socket()
        print(SD.connect(c, "127.0.0.1", mine), flush=True)
        for x in (c, first, lst):
            x.close()
""")


def test_connect_listen_close_sequence_ends_cleanly(no_leak):
    """The whole sequence of the original report, twenty times in a child
    process: every dial of the closed socket's port is refused, and the
    kernel log stays clean (the fixture checks)."""
    r = subprocess.run([sys.executable, "-c", CONNECT_LISTEN_CLOSE % HERE],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == ["ECONNREFUSED"] * 20, r.stdout


# ---- one port space with TCP (Documentation/design.rst, decision 12) ----

def tcp_listener(host="127.0.0.1", reuse=False):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    if reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(8)
    s.settimeout(20)
    return s, s.getsockname()[1]


@pytest.mark.parametrize("where", ["127.0.0.1", "0.0.0.0", "::"])
def test_af_sd_cannot_bind_a_port_tcp_listens_on(where, no_leak):
    """Boundary: another user's TCP server.  AF_SD binds through TCP's
    port space: a port a TCP listener holds is EADDRINUSE, at the same
    address or one that overlaps, with or without SO_REUSEADDR."""
    srv, port = tcp_listener("0.0.0.0" if where != "::" else "::")
    for reuse in (0, 1):
        s = SD.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
        assert SD.bind(s, where, port) == "EADDRINUSE"
        s.close()
    srv.close()


def port_contest(fam, reuse):
    """A socket of fam binds a port; a TCP socket tries to bind and listen
    on it; the first tries to listen while the TCP socket is open, and
    again after it closed; then a second TCP socket tries."""
    def tcp_try():
        t = socket.socket()
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
        try:
            t.bind(("127.0.0.1", port))
            t.listen(4)
            out.append("tcp OK")
        except OSError as e:
            out.append("tcp " + errname(e.errno))
        return t

    def listen():
        try:
            s.listen(4)
            out.append("listen OK")
        except OSError as e:
            out.append("listen " + errname(e.errno))

    s = fam.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
    assert fam.bind(s, "127.0.0.1", 0) == "OK"
    port = sockname(s)[1]
    out = []
    t = tcp_try()
    listen()
    t.close()
    listen()
    tcp_try().close()
    s.close()
    # Given back with the socket.
    t = socket.socket()
    t.bind(("127.0.0.1", port))
    t.close()
    return out


@pytest.mark.parametrize("reuse", [0, 1])
def test_tcp_cannot_bind_a_port_af_sd_holds(reuse, no_leak):
    """The other way round: a port an AF_SD socket bound, or listens on,
    conflicts for TCP exactly as if a TCP socket held it.  Without
    SO_REUSEADDR that is EADDRINUSE at once; with it on both sides, TCP
    lets the two share the port until one listens, and the second
    listener gets EADDRINUSE."""
    tcp = port_contest(TCP, reuse)
    assert port_contest(SD, reuse) == tcp
    if reuse:
        assert tcp == ["tcp OK", "listen EADDRINUSE", "listen OK",
                       "tcp EADDRINUSE"]
    else:
        assert tcp == ["tcp EADDRINUSE", "listen OK", "listen OK",
                       "tcp EADDRINUSE"]


def test_a_connects_port_is_held_in_tcp(no_leak):
    """The port an AF_SD connect picks is TCP's too for the connection's
    life, and given back after."""
    lst, port = SD.listener()
    bounded(lst)
    c = SD.socket()
    assert SD.connect(c, "127.0.0.1", port) == "OK"
    a = SD.accept(lst)
    mine = sockname(c)[1]
    t = socket.socket()
    with pytest.raises(OSError) as e:
        t.bind(("0.0.0.0", mine))
    assert e.value.errno == errno.EADDRINUSE
    t.close()
    for x in (c, a, lst):
        x.close()
    t = socket.socket()
    t.bind(("0.0.0.0", mine))
    t.close()


def test_a_plain_tcp_client_reaches_a_native_listener(no_leak):
    """A peer without AF_SD gets plain TCP: a native AF_SD listener holds
    its port in TCP too, and accepts TCP's clients there."""
    lst, port = SD.listener()
    bounded(lst)
    t = socket.create_connection(("127.0.0.1", port), timeout=20)
    a = SD.accept(lst)
    t.sendall(b"hello")
    assert a.recv(5) == b"hello"
    a.sendall(b"world")
    assert t.recv(5) == b"world"
    assert a.getpeername() == t.getsockname()
    for x in (t, a, lst):
        x.close()


HIJACK = textwrap.dedent("""
    import sys
    sys.path.insert(0, %r)
    from sdsock import Family
    SD = Family("sd")
    s = SD.socket()
    print(SD.bind(s, "127.0.0.1", int(sys.argv[1])))
    s2 = SD.socket()
    print(SD.bind(s2, "127.0.0.1", 80))
""")

BANNER_CLIENT = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
    print(c.recv(64).decode())
""")


def test_an_unprivileged_user_cannot_take_a_tcp_servers_clients(no_leak):
    """Boundary: another user.  With redirection on, an unprivileged user
    who binds AF_SD at the port of a root TCP server (as 127.0.0.1:5432
    while PostgreSQL holds 5432/tcp) is refused, as TCP refuses; a
    privileged port is EACCES; and a redirected client of that port
    reaches the TCP server."""
    srv, port = tcp_listener("0.0.0.0")
    with redirect():
        r = subprocess.run(
            [sys.executable, "-c", HIJACK % HERE, str(port)],
            capture_output=True, text=True, timeout=60, cwd="/",
            preexec_fn=lambda: (os.setgroups([]), os.setgid(65534),
                                os.setuid(65534)))
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["EADDRINUSE", "EACCES"], r.stdout

        def serve():
            a, _ = srv.accept()
            a.sendall(b"the tcp server")
            a.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        r = subprocess.run(
            [SDRUN, sys.executable, "-c", BANNER_CLIENT, str(port)],
            capture_output=True, text=True, timeout=60)
        t.join(20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "the tcp server"
    srv.close()


# ---- what sdctl shows of other users' sockets ----------------------------

def test_other_users_socket_owners_are_for_the_admin_only(no_leak):
    """Boundary: another user.  A dump of the sockets shows the owner (uid
    and pid) of the caller's own sockets, and of others' only to
    CAP_NET_ADMIN, as hidepid would want."""
    lst, port = SD.listener()
    ino = os.fstat(lst.fileno()).st_ino

    def owners():
        def u32(v):
            return None if v is None else int.from_bytes(v, "little")
        with Genl() as g:
            r = g.dump(SD_CMD_SOCK_GET)
            assert not r.err, r
            socks = [parse_attrs(p) for p in r.replies]
        return {int.from_bytes(a[SD_A_SOCK_INODE], "little"):
                (u32(a.get(SD_A_SOCK_UID)), u32(a.get(SD_A_SOCK_PID)))
                for a in socks}

    def own_and_others():
        mine = SD.socket()
        SD.bind(mine, "127.0.0.1", 0)
        return os.fstat(mine.fileno()).st_ino, owners()

    root_view = owners()
    assert root_view[ino] == (0, os.getpid()), root_view
    mine, nobody_view = as_nobody(own_and_others)
    assert nobody_view[ino] == (None, None), nobody_view
    assert nobody_view[mine][0] == 65534 and nobody_view[mine][1], nobody_view
    lst.close()
