"""Behaviour scenarios of the differential suite.

Each scenario is written once and run against each transport (TCP over
loopback, AF_SD; later libsd).  It records what a program can observe:
return values, errno names, bytes, poll events, in a transcript.
test_differential.py runs every scenario on every transport in its own
process (so a hang or crash hits one run only) and asserts that the
transcripts are equal.  Scenarios also assert what they must show, so a
scenario that went wrong the same way on both transports still fails.

    python3 scenarios.py NAME FAMILY      prints the transcript as JSON
    python3 scenarios.py --list           the scenario names
"""
import errno
import fcntl
import json
import mmap
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdsock import Family, errname, peername, sockname  # noqa: E402

SCENARIOS = {}

# Time TCP needs over loopback to settle (an RST or FIN to arrive); AF_SD
# does not need it, but the transcripts must not depend on timing.
SETTLE = 0.05


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


class Transcript:
    def __init__(self):
        self.rows = []

    def log(self, what, value):
        self.rows.append([what, value])
        return value

    def call(self, what, fn, *args, **kw):
        """Log fn's result, or the errno name it raised; return it."""
        try:
            value = fn(*args, **kw)
        except OSError as e:
            value = errname(e.errno)
        if isinstance(value, (bytes, bytearray)):
            value = {"bytes": len(value), "crc": zlib.crc32(value)}
        return self.log(what, value)


POLL_NAMES = [(select.POLLIN, "IN"), (select.POLLOUT, "OUT"),
              (select.POLLERR, "ERR"), (select.POLLHUP, "HUP"),
              (select.POLLRDHUP, "RDHUP"), (select.POLLPRI, "PRI")]


def pollmask(s, timeout=0):
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLOUT | select.POLLRDHUP |
               select.POLLPRI)
    ev = p.poll(timeout)
    mask = ev[0][1] if ev else 0
    return "|".join(n for bit, n in POLL_NAMES if mask & bit) or "none"


def free_port(f):
    """A port nobody listens on in this transport's port space."""
    s = f.socket()
    f.bind(s, "127.0.0.1", 0)
    port = sockname(s)[1]
    s.close()
    return port


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def pattern(n, seed=1):
    """n deterministic bytes."""
    block = bytes((i * 7 + seed) & 0xFF for i in range(4096))
    return (block * (n // 4096 + 1))[:n]


def sockerr(s):
    return errname(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))


def fill(s):
    """Write with MSG_DONTWAIT until EAGAIN; return bytes written."""
    total = 0
    chunk = b"f" * 65536
    while True:
        try:
            total += s.send(chunk, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return total


# ---- connection setup --------------------------------------------------

@scenario
def connect_accept_names(t, f):
    lst, port = f.listener()
    c = f.socket()
    t.log("getsockname unbound", sockname(c))
    t.call("getpeername unconnected", peername, c)
    t.log("connect", f.connect(c, "127.0.0.1", port))
    s = f.accept(lst)
    cl, cp = sockname(c), peername(c)
    sl, sp = sockname(s), peername(s)
    t.log("client peer is server local", cp == sl)
    t.log("server peer is client local", sp == cl)
    t.log("client peer", cp == ("127.0.0.1", port))
    t.log("client port is ephemeral", cl[1] != 0 and cl[1] != port)
    t.log("listener name", sockname(lst) == ("127.0.0.1", port))
    t.log("SO_ACCEPTCONN listener",
          lst.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    t.log("SO_ACCEPTCONN conn",
          s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    t.log("SO_TYPE", s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE))
    t.log("SO_PROTOCOL", s.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL))
    t.log("connect again", f.connect(c, "127.0.0.1", port))
    assert cp == sl and sp == cl


@scenario
def connect_refused(t, f):
    c = f.socket()
    v = t.log("connect", f.connect(c, "127.0.0.1", free_port(f)))
    assert v == "ECONNREFUSED"
    t.log("SO_ERROR after", sockerr(c))
    t.call("getpeername", peername, c)
    # The socket can try again, and succeed.
    lst, port = f.listener()
    t.log("connect retry", f.connect(c, "127.0.0.1", port))


@scenario
def connect_nonblocking(t, f):
    lst, port = f.listener()
    c = f.socket(flags=socket.SOCK_NONBLOCK)
    v = t.log("connect", f.connect(c, "127.0.0.1", port))
    assert v == "EINPROGRESS"
    t.log("poll", pollmask(c, 2000))
    t.log("SO_ERROR", sockerr(c))
    t.log("connect 2", f.connect(c, "127.0.0.1", port))
    t.log("connect 3", f.connect(c, "127.0.0.1", port))
    s = f.accept(lst)
    c.send(b"x")
    t.log("poll server", pollmask(s, 2000))


@scenario
def connect_nonblocking_refused(t, f):
    c = f.socket(flags=socket.SOCK_NONBLOCK)
    t.log("connect", f.connect(c, "127.0.0.1", free_port(f)))
    time.sleep(SETTLE)
    t.log("poll", pollmask(c, 2000))
    v = t.log("SO_ERROR", sockerr(c))
    assert v == "ECONNREFUSED"
    t.log("SO_ERROR again", sockerr(c))


@scenario
def connect_nonblocking_refused_reported_by_connect(t, f):
    c = f.socket(flags=socket.SOCK_NONBLOCK)
    port = free_port(f)
    t.log("connect", f.connect(c, "127.0.0.1", port))
    time.sleep(SETTLE)
    t.log("connect 2", f.connect(c, "127.0.0.1", port))
    t.log("SO_ERROR", sockerr(c))


@scenario
def connect_wildcard_reaches_loopback(t, f):
    lst, port = f.listener("0.0.0.0")
    c = f.socket()
    t.log("connect 0.0.0.0", f.connect(c, "0.0.0.0", port))
    s = f.accept(lst)
    t.log("peer", peername(c)[0])
    t.log("server local", sockname(s)[0])


@scenario
def bad_addresses(t, f):
    s = f.socket()
    import ctypes
    from sdsock import libc, sockaddr
    sa = sockaddr("127.0.0.1", 0)
    rc = libc.bind(s.fileno(), ctypes.byref(sa), 8)
    t.log("bind short len", errname(ctypes.get_errno()) if rc else "OK")
    sa.family = 99
    rc = libc.bind(s.fileno(), ctypes.byref(sa), ctypes.sizeof(sa))
    t.log("bind bad family", errname(ctypes.get_errno()) if rc else "OK")
    t.log("bind non-local", f.bind(s, "192.0.2.1", 0))
    t.log("bind ok", f.bind(s, "127.0.0.1", 0))
    t.log("bind twice", f.bind(s, "127.0.0.1", 0))


@scenario
def bind_rules(t, f):
    a = f.socket()
    t.log("bind a", f.bind(a, "127.0.0.1", 0))
    port = sockname(a)[1]
    b = f.socket()
    t.log("bind b same port", f.bind(b, "127.0.0.1", port))
    t.log("bind b wildcard same port", f.bind(b, "0.0.0.0", port))
    # SO_REUSEADDR on both, neither listening: allowed.
    c = f.socket()
    d = f.socket()
    for s in (c, d):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.log("bind c", f.bind(c, "127.0.0.1", 0))
    p2 = sockname(c)[1]
    t.log("bind d reuseaddr", f.bind(d, "127.0.0.1", p2))
    c.listen(1)
    t.log("listen d", errname(_listen(d)))


def _listen(s, n=1):
    try:
        s.listen(n)
        return 0
    except OSError as e:
        return e.errno


@scenario
def bind_port_after_listener_closed(t, f):
    lst, port = f.listener()
    c = f.socket()
    f.connect(c, "127.0.0.1", port)
    s = f.accept(lst)
    lst.close()
    n = f.socket()
    t.log("rebind without reuseaddr", f.bind(n, "127.0.0.1", port))
    r = f.socket()
    r.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.log("rebind with reuseaddr", f.bind(r, "127.0.0.1", port))
    s.close()
    c.close()


@scenario
def listen_states(t, f):
    lst, port = f.listener()
    t.log("listen again", errname(_listen(lst, 4)))
    u = f.socket()
    t.log("listen unbound", errname(_listen(u)))
    t.log("unbound got a port", sockname(u)[1] != 0)
    c = f.socket()
    t.log("connect listener", f.connect(u, "127.0.0.1", port))
    t.log("connect", f.connect(c, "127.0.0.1", port))
    t.log("listen connected", errname(_listen(c)))
    t.call("recv on listener", lst.recv, 1)
    t.call("send on listener", lst.send, b"x", socket.MSG_NOSIGNAL)
    t.log("poll listener", pollmask(lst, 1000))
    t.call("FIONREAD listener", lambda: fcntl.ioctl(lst, 0x541B, b"\0" * 4))


@scenario
def accept_nonblocking_and_flags(t, f):
    lst, port = f.listener()
    lst.setblocking(False)
    t.call("accept empty", f.accept, lst)
    t.log("poll empty listener", pollmask(lst))
    c = f.socket()
    f.connect(c, "127.0.0.1", port)
    time.sleep(SETTLE)
    t.log("poll listener", pollmask(lst, 1000))
    s = f.accept(lst, socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    fl = fcntl.fcntl(s, fcntl.F_GETFL)
    fd = fcntl.fcntl(s, fcntl.F_GETFD)
    t.log("accepted O_NONBLOCK", bool(fl & os.O_NONBLOCK))
    t.log("accepted FD_CLOEXEC", bool(fd & fcntl.FD_CLOEXEC))
    t.call("recv nonblocking", s.recv, 1)
    s2 = None
    c2 = f.socket()
    f.connect(c2, "127.0.0.1", port)
    time.sleep(SETTLE)
    s2 = f.accept(lst)
    t.log("accept plain O_NONBLOCK",
          bool(fcntl.fcntl(s2, fcntl.F_GETFL) & os.O_NONBLOCK))


@scenario
def shutdown_listener(t, f):
    lst, port = f.listener()
    t.call("shutdown WR listener", lst.shutdown, socket.SHUT_WR)
    t.call("shutdown RD listener", lst.shutdown, socket.SHUT_RD)
    c = f.socket()
    t.log("connect after", f.connect(c, "127.0.0.1", port))
    lst.setblocking(False)
    t.call("accept after", f.accept, lst)


@scenario
def close_listener_with_queued(t, f):
    lst, port = f.listener()
    c = f.socket()
    f.connect(c, "127.0.0.1", port)
    c.send(b"queued")
    time.sleep(SETTLE)
    lst.close()
    time.sleep(SETTLE)
    t.call("recv", c.recv, 10)
    t.call("recv 2", c.recv, 10)
    t.call("send", c.send, b"x", socket.MSG_NOSIGNAL)


@scenario
def ipv6_loopback(t, f):
    lst, port = f.listener("::1")
    c = f.socket(v6=True)
    t.log("connect", f.connect(c, "::1", port))
    s = f.accept(lst)
    t.log("client name", sockname(c)[0])
    t.log("peer", peername(c)[:2] == ("::1", port))
    t.log("server peer is client", peername(s)[:2] == sockname(c)[:2])
    c.sendall(b"six")
    t.call("recv", s.recv, 10)


@scenario
def ipv4_to_dual_stack_listener(t, f):
    lst, port = f.listener("::")
    c = f.socket()
    t.log("connect v4", f.connect(c, "127.0.0.1", port))
    s = f.accept(lst)
    t.log("server sees mapped peer", peername(s)[0])
    t.log("server local", sockname(s)[0])
    t.log("client peer", peername(c) == ("127.0.0.1", port))


# ---- data ---------------------------------------------------------------

@scenario
def send_recv_basic(t, f):
    c, s, _ = f.pair()
    t.call("send", c.send, b"hello")
    t.call("recv", s.recv, 100)
    t.call("send 1 byte", s.send, b"!")
    t.call("recv 1 byte", c.recv, 1)
    t.call("send 0 bytes", c.send, b"")
    t.call("recv nothing waiting", s.recv, 10, socket.MSG_DONTWAIT)
    t.call("recv 0 bytes, nothing waiting", s.recv, 0)
    c.send(b"q")
    time.sleep(SETTLE)
    t.call("recv 0 bytes, data waiting", s.recv, 0)
    t.call("recv the byte", s.recv, 1)
    t.call("sendall 64KiB", c.sendall, pattern(65536))
    t.call("recv 64KiB", recv_exact, s, 65536)


@scenario
def one_mebibyte_each_way(t, f):
    c, s, _ = f.pair()
    data = pattern(1 << 20, 3)
    for a, b, name in ((c, s, "c->s"), (s, c, "s->c")):
        th = threading.Thread(target=a.sendall, args=(data,))
        th.start()
        got = recv_exact(b, len(data))
        th.join()
        t.log(name, got == data)
        assert got == data


@scenario
def vectored_io(t, f):
    c, s, _ = f.pair()
    t.call("sendmsg 3 iov", c.sendmsg, [b"ab", b"", b"cdefg"])
    buf1, buf2 = bytearray(3), bytearray(10)
    t.call("recvmsg_into", lambda: s.recvmsg_into([buf1, buf2])[0])
    t.log("bufs", [bytes(buf1).decode(), bytes(buf2[:4]).decode()])
    t.call("writev", os.writev, c.fileno(), [b"12", b"345"])
    t.call("readv", os.readv, s.fileno(), [bytearray(1), bytearray(9)])
    t.call("write", os.write, s.fileno(), b"w")
    t.call("read", os.read, c.fileno(), 5)
    c.send(b"to")
    t.call("recvfrom data", lambda: s.recvfrom(10)[0])


@scenario
def peek_and_partial(t, f):
    c, s, _ = f.pair()
    c.sendall(b"abcdef")
    c.sendall(b"ghij")
    time.sleep(SETTLE)
    t.call("peek 3", s.recv, 3, socket.MSG_PEEK)
    t.call("peek 100", s.recv, 100, socket.MSG_PEEK)
    t.call("recv 2", s.recv, 2)
    t.call("peek 3 again", s.recv, 3, socket.MSG_PEEK)
    t.call("recv 5 across records", s.recv, 5)
    t.call("recv rest", s.recv, 100)
    t.call("peek empty", s.recv, 10, socket.MSG_PEEK | socket.MSG_DONTWAIT)


@scenario
def peek_full_queue(t, f):
    """MSG_PEEK with room for more than is queued, the queue full: it
    returns a prefix of the stream, and again, and loses nothing.  (On
    AF_SD an empty ring takes one record as large as the ring; a peek
    past it meets that same record again, a whole ring on.)  The bytes
    are sent from an mmap, not from malloc: under libsd, pool memory would
    go by zero copy, which queues pages beside the ring and fills no ring
    (af_sd.rst, "Where AF_SD differs from TCP")."""
    c, s, _ = f.pair()
    data = pattern(4 << 20, seed=3)
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    view = memoryview(buf)
    sent = 0
    while sent < len(data):
        try:
            sent += c.send(view[sent:], socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    view.release()
    buf.close()
    time.sleep(SETTLE)
    t.log("filled", 0 < sent < len(data))
    first = s.recv(8 << 20, socket.MSG_PEEK)
    t.log("peek is a prefix", len(first) > 0 and data.startswith(first))
    again = s.recv(8 << 20, socket.MSG_PEEK)
    t.log("peek again is a prefix", len(again) >= len(first) and
          data.startswith(again))
    t.log("then every byte", recv_exact(s, sent) == data[:sent])
    t.call("peek empty", s.recv, 10, socket.MSG_PEEK | socket.MSG_DONTWAIT)


def ring_size():
    """Bytes of a new AF_SD ring (what the record sizes below aim at)."""
    try:
        with open("/proc/sys/net/sd/ring_size") as fh:
            return int(fh.read())
    except OSError:
        return 128 << 10


@scenario
def waitall_then_plain_recv(t, f):
    """A record taken in part by one reader and finished by another
    (under libsd: MSG_WAITALL goes through the kernel, a plain recv does
    not), then small messages where that record was: every byte, and
    nothing stale read as a header."""
    size = ring_size()
    c, s, _ = f.pair()
    first = pattern(size - 8, seed=5)
    c.sendall(first)
    got = s.recv(4096, socket.MSG_WAITALL)
    t.log("waitall part", got == first[:4096])
    t.log("the rest", recv_exact(s, len(first) - 4096) == first[4096:])
    small = [pattern(n, seed=n) for n in (8, 1, 24, 100, 4000)]
    ok = True
    for m in small:
        # The reader looks at where the next header goes before it is
        # written.
        c.sendall(m)
        ok = ok and recv_exact(s, len(m)) == m
        t.call("then nothing", s.recv, 10, socket.MSG_DONTWAIT)
    t.log("small ones after", ok)
    c.close()
    t.call("eof", s.recv, 10)


@scenario
def dontwait_and_nonblock(t, f):
    c, s, _ = f.pair()
    t.call("recv DONTWAIT", s.recv, 10, socket.MSG_DONTWAIT)
    s.setblocking(False)
    t.call("recv O_NONBLOCK", s.recv, 10)
    t.call("read O_NONBLOCK", os.read, s.fileno(), 10)
    c.send(b"data")
    time.sleep(SETTLE)
    t.call("recv O_NONBLOCK data", s.recv, 10)


@scenario
def waitall(t, f):
    c, s, _ = f.pair()

    def writer():
        for i in range(4):
            time.sleep(0.05)
            c.send(bytes([65 + i]) * 100)
    th = threading.Thread(target=writer)
    th.start()
    t.call("recv WAITALL 400", s.recv, 400, socket.MSG_WAITALL)
    th.join()
    c.send(b"xy")
    c.shutdown(socket.SHUT_WR)
    t.call("recv WAITALL past EOF", s.recv, 10, socket.MSG_WAITALL)


@scenario
def rcvtimeo_sndtimeo(t, f):
    c, s, _ = f.pair()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                 struct.pack("ll", 0, 150000))
    t0 = time.monotonic()
    t.call("recv timeout", s.recv, 10)
    t.log("waited at least 0.1s", time.monotonic() - t0 >= 0.1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 0, 150000))
    sent = 0
    err = None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            sent += c.send(b"z" * 65536)
        except OSError as e:
            err = errname(e.errno)
            break
    t.log("send until timeout", err)
    t.log("sent something", sent > 0)


@scenario
def full_ring_blocked_writer(t, f):
    c, s, _ = f.pair()
    t.log("poll writable", pollmask(c))
    n = fill(c)
    t.log("filled", n > 0)
    t.log("poll full", pollmask(c))
    t.log("peer poll", pollmask(s))
    got = bytearray()
    done = threading.Event()

    def writer():
        c.sendall(b"B" * 100000)
        done.set()
    th = threading.Thread(target=writer)
    th.start()
    time.sleep(0.2)
    t.log("writer blocked", not done.is_set())
    while len(got) < n + 100000:
        got += s.recv(1 << 20)
    th.join(10)
    t.log("writer done", done.is_set())
    t.log("bytes", len(got) == n + 100000)
    t.log("tail", bytes(got[-100000:]) == b"B" * 100000)
    t.log("poll writable again", pollmask(c, 1000))


@scenario
def writable_after_reader_drains(t, f):
    c, s, _ = f.pair()
    c.setblocking(False)
    n = fill(c)
    p = select.poll()
    p.register(c, select.POLLOUT)
    t.log("not writable", p.poll(0) == [])
    recv_exact(s, n)
    t.log("writable after drain", bool(p.poll(3000)))


# ---- the end of a connection --------------------------------------------

@scenario
def shutdown_write_then_eof(t, f):
    c, s, _ = f.pair()
    c.sendall(b"last words")
    t.call("shutdown WR", c.shutdown, socket.SHUT_WR)
    time.sleep(SETTLE)
    t.log("server poll", pollmask(s))
    t.call("recv data", s.recv, 100)
    t.call("recv EOF", s.recv, 100)
    t.call("recv EOF again", s.recv, 100)
    t.call("send after SHUT_WR", c.send, b"x", socket.MSG_NOSIGNAL)
    t.call("server still sends", s.send, b"reply")
    t.call("client reads reply", c.recv, 100)
    t.log("client poll", pollmask(c))
    s.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    t.call("client EOF", c.recv, 100)
    t.log("client poll both down", pollmask(c))


@scenario
def shutdown_read(t, f):
    c, s, _ = f.pair()
    t.call("shutdown RD", s.shutdown, socket.SHUT_RD)
    t.call("recv after SHUT_RD", s.recv, 10)
    t.log("poll", pollmask(s))
    t.call("send still works", s.send, b"x")
    t.call("peer reads", c.recv, 10)


@scenario
def shutdown_errors(t, f):
    u = f.socket()
    t.call("shutdown unconnected", u.shutdown, socket.SHUT_RDWR)
    c, s, _ = f.pair()
    import ctypes
    from sdsock import libc
    rc = libc.shutdown(c.fileno(), 7)
    t.log("shutdown bad how", errname(ctypes.get_errno()) if rc else "OK")
    t.call("shutdown RDWR", c.shutdown, socket.SHUT_RDWR)
    time.sleep(SETTLE)
    t.call("peer EOF", s.recv, 10)
    t.call("shutdown again", c.shutdown, socket.SHUT_RDWR)


@scenario
def close_with_unread_resets(t, f):
    c, s, _ = f.pair()
    c.sendall(b"never read")
    time.sleep(SETTLE)
    s.close()
    time.sleep(SETTLE)
    t.log("poll", pollmask(c))
    t.call("recv", c.recv, 10)
    t.call("recv again", c.recv, 10)
    t.call("send", c.send, b"x", socket.MSG_NOSIGNAL)
    t.call("getpeername", peername, c)


@scenario
def close_then_peer_sends(t, f):
    c, s, _ = f.pair()
    s.close()
    time.sleep(SETTLE)
    t.log("poll after peer close", pollmask(c))
    t.call("recv EOF", c.recv, 10)
    t.call("send 1", c.send, b"x", socket.MSG_NOSIGNAL)
    time.sleep(SETTLE)
    t.log("poll after send", pollmask(c))
    t.call("send 2", c.send, b"x", socket.MSG_NOSIGNAL)
    t.call("send 3", c.send, b"x", socket.MSG_NOSIGNAL)
    t.call("recv after", c.recv, 10)


@scenario
def empty_sends_after_peer_close(t, f):
    """A zero-length send is TCP's no-op while the peer is gone, until the
    reset (which the first real send brings) is seen: CPython's
    socket.create_connection() test does sendall(b'') to a client that
    already left."""
    hits = []
    signal.signal(signal.SIGPIPE, lambda *a: hits.append(1))
    c, s, _ = f.pair()
    t.call("empty send connected", c.send, b"")
    c.close()
    time.sleep(SETTLE)
    t.call("recv EOF", s.recv, 10)
    t.call("empty send", s.send, b"")
    t.call("sendall empty", s.sendall, b"")
    t.call("empty sendmsg", s.sendmsg, [b"", b""])
    t.log("SIGPIPE before", len(hits))
    t.call("send 1", s.send, b"x")
    time.sleep(SETTLE)
    t.call("empty send after reset", s.send, b"")
    t.log("SIGPIPE after reset", len(hits))
    t.call("send 2", s.send, b"x")
    t.call("empty send after EPIPE", s.send, b"")
    t.log("SIGPIPE at the end", len(hits))
    t.call("recv at the end", s.recv, 10)
    u = f.socket()
    t.call("empty send unconnected", u.send, b"")


def fastopen_sendto(sock, data, host, port):
    """sendto(MSG_FASTOPEN | MSG_NOSIGNAL) through libc (Python cannot
    spell an AF_SD address): the count, or the errno name."""
    import ctypes
    from sdsock import libc, sockaddr
    sa = sockaddr(host, port)
    n = libc.sendto(sock.fileno(), data, len(data),
                    socket.MSG_FASTOPEN | socket.MSG_NOSIGNAL,
                    ctypes.byref(sa), ctypes.sizeof(sa))
    return errname(ctypes.get_errno()) if n < 0 else n


@scenario
def sendto_fastopen(t, f):
    """TCP Fast Open's client call: sendto(MSG_FASTOPEN) with an address on
    an unconnected socket connects, then sends (the kernel's selftest
    sk_bind_sendto_listen); on a connected socket it is EISCONN."""
    lst, port = f.listener()
    c = f.socket()
    t.log("sendto unconnected", fastopen_sendto(c, b"hello", "127.0.0.1", port))
    s = f.accept(lst)
    t.call("server reads", recv_exact, s, 5)
    t.log("connected to it", peername(c) == ("127.0.0.1", port))
    t.log("sendto connected", fastopen_sendto(c, b"again", "127.0.0.1", port))
    t.call("send after", c.send, b"more")
    t.call("server reads more", recv_exact, s, 4)
    u = f.socket()
    t.log("sendto nobody", fastopen_sendto(u, b"x", "127.0.0.1", free_port(f)))


def accepted_by(listeners):
    """Which of the non-blocking listeners has a connection queued."""
    for name, lst in listeners:
        try:
            Family.accept(lst).close()
        except BlockingIOError:
            continue
        except OSError as e:
            return f"{name}: {errname(e.errno)}"
        return name
    return "none"


@scenario
def reuseport_dual_stack(t, f):
    """SO_REUSEPORT listeners of one port on 0.0.0.0 and [::] both listen
    (the kernel's selftests reuseport_dualstack and reuseport_addr_any);
    an IPv4 client reaches the IPv4 one, an IPv6 client the other."""
    from sdsock import SD_REUSEPORT, SOL_SD
    opt = ((SOL_SD, SD_REUSEPORT, 1) if f.name == "sd" else
           (socket.SOL_SOCKET, socket.SO_REUSEPORT, 1))
    l4, port = f.listener("0.0.0.0", opts=[opt])
    l6 = f.socket(v6=True)
    l6.setsockopt(*opt)
    t.log("bind [::]", f.bind(l6, "::", port))
    t.call("listen [::]", l6.listen, 8)
    other = f.socket(v6=True)
    t.log("bind [::] without SO_REUSEPORT", f.bind(other, "::", port))
    for lst in (l4, l6):
        lst.setblocking(False)
    for host in ("127.0.0.1", "::1", "127.0.0.1"):
        c = f.socket(v6=":" in host)
        t.log(f"connect {host}", f.connect(c, host, port))
        time.sleep(SETTLE)
        t.log(f"{host} accepted by", accepted_by([("0.0.0.0", l4), ("[::]", l6)]))
        c.close()


@scenario
def sigpipe(t, f):
    hits = []
    signal.signal(signal.SIGPIPE, lambda *a: hits.append(1))
    c, s, _ = f.pair()
    c.shutdown(socket.SHUT_WR)
    t.call("send after SHUT_WR", c.send, b"x")
    t.log("SIGPIPE", len(hits))
    t.call("send MSG_NOSIGNAL", c.send, b"x", socket.MSG_NOSIGNAL)
    t.log("SIGPIPE after NOSIGNAL", len(hits))
    u = f.socket()
    t.call("send unconnected", u.send, b"x")
    t.log("SIGPIPE unconnected", len(hits))
    t.call("recv unconnected", u.recv, 1)


@scenario
def close_with_data_in_flight(t, f):
    c, s, _ = f.pair()
    data = pattern(200000, 9)
    th = threading.Thread(target=lambda: (c.sendall(data), c.close()))
    th.start()
    got = recv_exact(s, len(data) + 10)
    th.join()
    t.log("all data then EOF", got == data)


@scenario
def peer_close_during_blocked_read(t, f):
    c, s, _ = f.pair()
    out = {}

    def reader():
        out["r"] = s.recv(10)
    th = threading.Thread(target=reader)
    th.start()
    time.sleep(0.2)
    c.close()
    th.join(10)
    t.log("reader woke", not th.is_alive())
    t.log("recv", repr(out.get("r")))


@scenario
def linger(t, f):
    c, s, _ = f.pair()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    t.log("SO_LINGER", struct.unpack("ii", c.getsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, 8)))
    c.close()
    time.sleep(SETTLE)
    t.call("recv after abortive close", s.recv, 10)
    c2, s2, _ = f.pair()
    c2.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 5))
    c2.sendall(b"lingered")
    t0 = time.monotonic()
    c2.close()
    t.log("close returned quickly", time.monotonic() - t0 < 4)
    t.call("recv data", s2.recv, 100)
    t.call("recv EOF", s2.recv, 100)


# ---- options, ioctls, readiness -------------------------------------------

@scenario
def socket_options(t, f):
    c, s, _ = f.pair()
    for opt in ("SO_SNDBUF", "SO_RCVBUF"):
        o = getattr(socket, opt)
        c.setsockopt(socket.SOL_SOCKET, o, 65536)
        t.log(opt, c.getsockopt(socket.SOL_SOCKET, o))
    t.log("TCP_NODELAY default", c.getsockopt(socket.IPPROTO_TCP,
                                              socket.TCP_NODELAY))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t.log("TCP_NODELAY", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    t.log("SO_ERROR", sockerr(c))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    t.log("SO_KEEPALIVE", c.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE))
    t.log("SO_REUSEADDR", c.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR))
    c.sendall(b"still works")
    t.call("recv", s.recv, 100)


@scenario
def fionread_and_outq(t, f):
    c, s, _ = f.pair()
    c.sendall(b"x" * 100)
    c.sendall(b"y" * 23)
    time.sleep(SETTLE)
    pollmask(s, 1000)

    def ioctl_int(sock, req):
        return struct.unpack("i", fcntl.ioctl(sock, req, b"\0" * 4))[0]
    t.log("FIONREAD", ioctl_int(s, 0x541B))
    s.recv(50)
    t.log("FIONREAD after 50", ioctl_int(s, 0x541B))
    t.log("SIOCOUTQ", ioctl_int(c, 0x5411))
    t.log("FIONREAD sender", ioctl_int(c, 0x541B))


TCP_INQ = 36
TCP_CM_INQ = TCP_INQ


def recvmsg_inq(s, n, room=True):
    """recvmsg() with or without room for a control message: the bytes,
    the TCP_CM_INQ values and whether MSG_CTRUNC came back."""
    data, anc, flags, _ = s.recvmsg(n, socket.CMSG_SPACE(4) if room else 0)
    inq = [struct.unpack("i", d)[0] for lvl, typ, d in anc
           if lvl == socket.IPPROTO_TCP and typ == TCP_CM_INQ]
    return [len(data), inq, bool(flags & socket.MSG_CTRUNC)]


@scenario
def tcp_inq(t, f):
    """TCP_INQ: each receive tells in a control message how many bytes
    are left (1 at the end of the stream); the kernel's tcp_inq
    selftest.  Accepted sockets take it from their listener."""
    lst, port = f.listener(opts=[(socket.IPPROTO_TCP, TCP_INQ, 1)])
    t.log("listener TCP_INQ", lst.getsockopt(socket.IPPROTO_TCP, TCP_INQ))
    c = f.socket()
    t.log("default", c.getsockopt(socket.IPPROTO_TCP, TCP_INQ))
    t.call("set 2", c.setsockopt, socket.IPPROTO_TCP, TCP_INQ, 2)
    t.call("set -1", c.setsockopt, socket.IPPROTO_TCP, TCP_INQ, -1)
    t.call("set short", c.setsockopt, socket.IPPROTO_TCP, TCP_INQ, b"\1")
    t.call("set before connect", c.setsockopt, socket.IPPROTO_TCP,
           TCP_INQ, 1)
    t.log("connect", f.connect(c, "127.0.0.1", port))
    s = f.accept(lst)
    t.log("accepted TCP_INQ", s.getsockopt(socket.IPPROTO_TCP, TCP_INQ))
    t.log("client TCP_INQ", c.getsockopt(socket.IPPROTO_TCP, TCP_INQ))
    c.sendall(pattern(1000))
    time.sleep(SETTLE)
    pollmask(s, 1000)
    assert t.call("recvmsg 400", recvmsg_inq, s, 400) == [400, [600], False]
    t.call("recvmsg 100 no room", recvmsg_inq, s, 100, False)
    t.call("recvmsg the rest", recvmsg_inq, s, 1000)
    s.setsockopt(socket.IPPROTO_TCP, TCP_INQ, 0)
    t.log("off", s.getsockopt(socket.IPPROTO_TCP, TCP_INQ))
    c.sendall(b"y" * 10)
    time.sleep(SETTLE)
    pollmask(s, 1000)
    t.call("recvmsg off", recvmsg_inq, s, 4)
    s.setsockopt(socket.IPPROTO_TCP, TCP_INQ, 1)
    t.call("recvmsg on again", recvmsg_inq, s, 4)
    c.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    pollmask(s, 1000)
    t.call("recvmsg last", recvmsg_inq, s, 100)
    assert t.call("recvmsg at the end", recvmsg_inq, s, 100) == [0, [1], False]
    s.sendall(b"back")
    time.sleep(SETTLE)
    pollmask(c, 1000)
    t.call("client recvmsg", recvmsg_inq, c, 100)


@scenario
def poll_lifecycle(t, f):
    u = f.socket()
    t.log("fresh", pollmask(u))
    c, s, _ = f.pair()
    t.log("idle", pollmask(c))
    c.send(b"x")
    time.sleep(SETTLE)
    t.log("data", pollmask(s))
    s.recv(1)
    t.log("drained", pollmask(s))
    c.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    t.log("peer shut WR", pollmask(s))
    t.log("self shut WR", pollmask(c))
    s.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    t.log("both shut", pollmask(c))


@scenario
def select_readiness(t, f):
    c, s, _ = f.pair()
    r, w, x = select.select([s], [c], [s], 0)
    t.log("select idle", [len(r), len(w), len(x)])
    c.send(b"x")
    r, w, x = select.select([s], [], [], 2)
    t.log("select data", len(r))


@scenario
def epoll_level_and_edge(t, f):
    c, s, _ = f.pair()
    lt = select.epoll()
    et = select.epoll()
    lt.register(s, select.EPOLLIN | select.EPOLLRDHUP)
    et.register(s, select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET)
    t.log("LT idle", lt.poll(0))
    c.send(b"a")
    time.sleep(SETTLE)
    t.log("LT data", [e for _, e in lt.poll(1)])
    t.log("LT data again", [e for _, e in lt.poll(0)])
    t.log("ET data", [e for _, e in et.poll(1)])
    t.log("ET data again", [e for _, e in et.poll(0)])
    c.send(b"b")
    time.sleep(SETTLE)
    t.log("ET more data", [e for _, e in et.poll(1)])
    s.recv(10)
    t.log("LT drained", lt.poll(0))
    c.shutdown(socket.SHUT_WR)
    time.sleep(SETTLE)
    t.log("LT rdhup", [e for _, e in lt.poll(1)])
    t.log("ET rdhup", [e for _, e in et.poll(1)])
    c.close()
    time.sleep(SETTLE)
    s.send(b"x")
    time.sleep(SETTLE)
    full = select.epoll()
    full.register(s, select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP)
    t.log("after reset", [e for _, e in full.poll(1)])


@scenario
def epoll_wakes_blocked_waiter(t, f):
    c, s, _ = f.pair()
    ep = select.epoll()
    ep.register(s, select.EPOLLIN)
    threading.Timer(0.2, lambda: c.send(b"wake")).start()
    t.log("woken", [e for _, e in ep.poll(5)])


def warm(c, s):
    """Carry data both ways, so that libsd has mapped the rings and drives
    both sides of both ends (readiness then comes from user space)."""
    c.sendall(b"ping")
    recv_exact(s, 4)
    s.sendall(b"pong")
    recv_exact(c, 4)


POLLBITS = [(select.POLLIN, "IN"), (select.POLLOUT, "OUT"),
            (select.POLLERR, "ERR"), (select.POLLHUP, "HUP")]


def named(events, names):
    """[(fd, mask)] as sorted 'name:IN|OUT' strings."""
    return sorted(names[fd] + ":" + ("|".join(n for b, n in POLLBITS
                                             if m & b) or "none")
                  for fd, m in events)


@scenario
def readiness_poll_select_mixed(t, f):
    c, s, _ = f.pair()
    warm(c, s)
    r, w = os.pipe()
    names = {s.fileno(): "s", c.fileno(): "c", r: "pipe"}
    t.log("poll idle", pollmask(s))
    c.send(b"12345")
    time.sleep(SETTLE)
    t.log("poll data", pollmask(s))
    p = select.poll()
    p.register(s, select.POLLIN)
    p.register(r, select.POLLIN)
    p.register(c, select.POLLOUT)
    t.log("poll socket ready", named(p.poll(1000), names))
    os.write(w, b"x")
    t.log("poll both ready", named(p.poll(1000), names))
    t.call("recv", s.recv, 100)
    t.log("poll pipe only", named(p.poll(1000), names))
    os.read(r, 1)
    t.log("poll writable only", named(p.poll(0), names))
    p.unregister(c)
    t.log("poll none", named(p.poll(0), names))
    c.send(b"late")
    t.log("poll woken", named(p.poll(5000), names))
    t.call("recv late", s.recv, 100)

    def sel(rd, wr, timeout):
        a, b, _ = select.select(rd, wr, [], timeout)
        return sorted(names[x.fileno() if hasattr(x, "fileno") else x] +
                      ":" + k for k, lst in (("r", a), ("w", b)) for x in lst)
    t.log("select idle", sel([s, r], [c], 0))
    c.send(b"y")
    t.log("select data", sel([s, r], [], 2))
    os.write(w, b"z")
    t.log("select both", sel([s, r], [c], 2))
    s.recv(10)
    os.read(r, 1)
    t.log("select none", sel([s, r], [], 0))
    threading.Timer(0.2, lambda: c.send(b"wake")).start()
    t.log("select woken", sel([s, r], [], 5))
    os.close(r)
    os.close(w)


@scenario
def readiness_epoll_tracked(t, f):
    c, s, _ = f.pair()
    c2, s2, _ = f.pair()
    warm(c, s)
    warm(c2, s2)
    r, w = os.pipe()
    names = {s.fileno(): "s", c.fileno(): "c", s2.fileno(): "s2", r: "pipe"}
    ep = select.epoll()
    ep.register(s, select.EPOLLIN)
    ep.register(c, select.EPOLLOUT)
    ep.register(s2, select.EPOLLIN)
    t.log("idle", named(ep.poll(0), names))
    c.send(b"abc")
    t.log("data", named(ep.poll(2), names))
    t.log("data again (level)", named(ep.poll(0), names))
    t.call("recv part", s.recv, 1)
    t.log("rest still ready", named(ep.poll(0), names))
    t.call("recv rest", s.recv, 10)
    t.log("drained", named(ep.poll(0), names))
    ep.register(r, select.EPOLLIN)
    os.write(w, b"p")
    t.log("pipe", named(ep.poll(2), names))
    c2.send(b"q")
    t.log("pipe and s2", named(ep.poll(2), names))
    seen = set()
    for _ in range(8):
        seen.update(names[fd] for fd, _ in ep.poll(0, 1))
    t.log("maxevents 1 reaches all", sorted(seen))
    ep.modify(c, select.EPOLLIN)
    t.log("modified c to IN", named(ep.poll(0), names))
    ep.unregister(r)
    t.log("pipe unregistered", named(ep.poll(0), names))
    s2.close()
    t.log("member closed without DEL", named(ep.poll(0), names))
    threading.Timer(0.2, lambda: c.send(b"wake")).start()
    t.log("woken", named(ep.poll(5), names))
    os.close(r)
    os.close(w)


@scenario
def epoll_set_grows_and_shrinks(t, f):
    """An epoll set grown past what libsd scans itself (256 members, then
    the kernel answers), shrunk below it again, with members closed
    without EPOLL_CTL_DEL whose numbers come back as new members."""
    c, s, _ = f.pair()
    warm(c, s)
    ep = select.epoll()
    ep.register(s, select.EPOLLIN)
    pipes = [os.pipe() for _ in range(300)]
    for r, _ in pipes:
        ep.register(r, select.EPOLLIN)
    names = {s.fileno(): "s"}
    names.update({r: f"p{i}" for i, (r, _) in enumerate(pipes)})

    def ready(timeout=0):
        return sorted(names.get(fd, fd) for fd, _ in ep.poll(timeout))
    t.log("301 idle", ready())
    c.send(b"a")
    pollmask(s, 1000)
    os.write(pipes[299][1], b"x")
    t.log("301 with data", ready(2))
    t.call("recv", s.recv, 10)
    for r, w in pipes[:250]:
        ep.unregister(r)
    t.log("51 left", ready())
    # Closed without EPOLL_CTL_DEL: out of the set; the numbers come back.
    for r, w in pipes[250:270]:
        os.close(r)
        os.close(w)
    again = [os.pipe() for _ in range(20)]
    for i, (r, _) in enumerate(again):
        names[r] = f"q{i}"
        ep.register(r, select.EPOLLOUT)
        ep.modify(r, select.EPOLLIN)
    os.write(again[3][1], b"y")
    t.log("reused numbers", ready(2))
    os.read(pipes[299][0], 1)
    os.read(again[3][0], 1)
    c.send(b"b")
    t.log("s again", ready(2))
    t.call("recv again", s.recv, 10)
    t.log("drained", ready())
    for r, w in pipes[:250] + pipes[270:] + again:
        os.close(r)
        os.close(w)
    ep.close()


@scenario
def epoll_edge_nonblocking_rounds(t, f):
    """Edge-triggered epoll with a non-blocking reader that reads until
    EAGAIN, against a writer that sends after the reader went to sleep:
    every round must wake (a missed wake-up hangs here)."""
    c, s, _ = f.pair()
    warm(c, s)
    s.setblocking(False)
    ep = select.epoll()
    ep.register(s, select.EPOLLIN | select.EPOLLET)
    woken = 0
    got = bytearray()
    for i in range(30):
        threading.Timer(0.01, lambda i=i: c.send(b"%04d" % i)).start()
        if ep.poll(5):
            woken += 1
        while True:
            try:
                b = s.recv(100)
            except BlockingIOError:
                break
            if not b:
                break
            got += b
    while len(got) < 120 and ep.poll(5):
        try:
            got += s.recv(100)
        except BlockingIOError:
            pass
    t.log("every round woke", woken == 30)
    t.log("bytes", bytes(got) == b"".join(b"%04d" % i for i in range(30)))


@scenario
def epoll_edge_nonblocking_writer(t, f):
    """Edge-triggered EPOLLOUT for a writer that writes until EAGAIN."""
    c, s, _ = f.pair()
    warm(c, s)
    c.setblocking(False)
    ep = select.epoll()
    ep.register(c, select.EPOLLOUT | select.EPOLLET)
    t.log("writable", [e & select.EPOLLOUT for _, e in ep.poll(1)])
    sent = fill(c)
    t.log("full", ep.poll(0))
    out = bytearray()

    def drain():
        while len(out) < sent:
            out.extend(s.recv(1 << 16))
    th = threading.Thread(target=drain)
    threading.Timer(0.1, th.start).start()
    t.log("woken writable", [e & select.EPOLLOUT for _, e in ep.poll(5)])
    time.sleep(0.2)
    th.join(10)
    t.log("drained all", len(out) == sent)


@scenario
def sigio(t, f):
    hits = []
    signal.signal(signal.SIGIO, lambda *a: hits.append(1))
    c, s, _ = f.pair()
    fcntl.fcntl(s, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(s, fcntl.F_SETFL, fcntl.fcntl(s, fcntl.F_GETFL) | os.O_ASYNC)
    c.send(b"x")
    time.sleep(0.2)
    t.log("SIGIO", len(hits) > 0)


# ---- descriptors: fork, dup, SCM_RIGHTS, close-on-exec --------------------

@scenario
def fork_shares_connection(t, f):
    c, s, _ = f.pair()
    pid = os.fork()
    if pid == 0:
        try:
            c.sendall(b"from child")
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    t.log("child status", status)
    t.call("recv", s.recv, 100)
    c.sendall(b"from parent")
    t.call("recv 2", s.recv, 100)


@scenario
def dup_keeps_connection(t, f):
    c, s, _ = f.pair()
    d = c.dup()
    c.close()
    d.sendall(b"via dup")
    t.call("recv", s.recv, 100)
    t.call("peer poll before close", pollmask, s)
    d.close()
    time.sleep(SETTLE)
    t.call("EOF after last close", s.recv, 100)


@scenario
def scm_rights_passing(t, f):
    c, s, _ = f.pair()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        a.close()
        msg, anc, _, _ = b.recvmsg(10, socket.CMSG_SPACE(4))
        fd = struct.unpack("i", anc[0][2][:4])[0]
        os.write(fd, b"passed socket")
        os._exit(0)
    b.close()
    a.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                         struct.pack("i", c.fileno()))])
    c.close()
    _, status = os.waitpid(pid, 0)
    t.log("child status", status)
    t.call("recv", s.recv, 100)
    t.call("EOF", s.recv, 100)


@scenario
def fd_limit_reached(t, f):
    """RLIMIT_NOFILE reached: socket() and accept() fail with EMFILE, the
    connection stays queued and is accepted once a descriptor is free, and
    the sockets already open keep working."""
    import resource
    lst, port = f.listener()
    c, s, _ = f.pair()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers = []
    try:
        nfd = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (nfd + 8, hard))
        while True:
            try:
                fillers.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as e:
                t.log("filling stops with", errname(e.errno))
                break
        t.call("socket at the limit", lambda: f.socket().fileno())
        os.close(fillers.pop())
        waiting = f.socket()
        t.log("connect", f.connect(waiting, "127.0.0.1", port))
        t.call("accept at the limit", lambda: f.accept(lst))
        c.sendall(b"still")
        t.call("old pair works", s.recv, 100)
        os.close(fillers.pop())
        got = f.accept(lst)
        waiting.sendall(b"queued one")
        t.call("accepted after a close", got.recv, 100)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@scenario
def close_on_exec(t, f):
    lst, port = f.listener()
    keep = f.socket()
    f.connect(keep, "127.0.0.1", port)
    gone = f.socket(flags=socket.SOCK_CLOEXEC)
    f.connect(gone, "127.0.0.1", port)
    os.set_inheritable(keep.fileno(), True)
    probe = ("import os,sys; print([os.path.exists('/proc/self/fd/%d' % int(x))"
             " for x in sys.argv[1:]])")
    import subprocess
    out = subprocess.run([sys.executable, "-c", probe, str(keep.fileno()),
                          str(gone.fileno())], close_fds=False,
                         capture_output=True, text=True).stdout.strip()
    t.log("inherited, closed-on-exec", out)


def expect_redirected():
    """Under sdrun with net.sd.redirect=1: fail unless every socket the
    scenario makes is a redirected AF_SD socket (SOL_SD/SD_REDIRECTED)."""
    make = Family.socket

    def checked(self, v6=False, flags=0):
        s = make(self, v6, flags)
        want = socket.AF_INET6 if v6 else socket.AF_INET
        got = s.getsockopt(0x5344, 3)
        assert got == want, f"socket not redirected ({got})"
        return s
    Family.socket = checked


def main():
    if sys.argv[1:] == ["--list"]:
        print("\n".join(SCENARIOS))
        return 0
    name, fam = sys.argv[1], sys.argv[2]
    t = Transcript()
    if os.environ.get("SD_SCENARIO_REDIRECT") == "1":
        expect_redirected()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(60)
    SCENARIOS[name](t, Family(fam))
    print(json.dumps(t.rows))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
