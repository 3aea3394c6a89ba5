"""The link daemon's interface (include/uapi/linux/sd_link.h), with a
stand-in daemon written here: registration, the upcall of a redirected
connect to another host, and each verdict.  Host A (the connecting one)
and host B are network namespaces joined by a veth pair."""
import errno
import socket
import struct
import threading

import pytest

from conftest import AF_SD, in_netns, netns_del, netns_pair, ns_sysctl, \
    sd_stats
from sdgenl import Genl, as_nobody, attr, attr_u8, attr_u16, attr_u32, \
    attr_u64, mapped, nest, parse_attrs
import sdgenl
from sdsock import Family, peername, sockname

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

(SD_LINK_CMD_REGISTER, SD_LINK_CMD_CONNECT, SD_LINK_CMD_VERDICT,
 SD_LINK_CMD_INCOMING, SD_LINK_CMD_KEY) = range(1, 6)
(SD_LINK_A_ID, SD_LINK_A_LOCAL, SD_LINK_A_REMOTE, SD_LINK_A_UID,
 SD_LINK_A_GID, SD_LINK_A_VERDICT, SD_LINK_A_REASON, SD_LINK_A_FD,
 SD_LINK_A_TX_SIZE, SD_LINK_A_RX_SIZE, SD_LINK_A_KEY) = range(2, 13)
SD_LINK_TCP, SD_LINK_REFUSE, SD_LINK_VIA = 1, 2, 3
SD_FALLBACK_NO_RDMA = 3
SD_A_ADDR_IN6, SD_A_ADDR_PORT = 1, 2
SD_PROTO_INET = 0x10002
SOL_SD, SD_MMAP_OFFSETS, SD_TRANSPORT, SD_LINK_ID = 0x5344, 1, 8, 16
SD_REUSEPORT = 2
SD_TRANSPORT_RDMA = 2

NS = ("sdlk0", "sdlk1")
ADDR = ("10.78.0.1", "10.78.0.2")


@pytest.fixture
def hosts():
    netns_pair(NS[0], NS[1], "sdlkv0", "sdlkv1", *ADDR)
    assert ns_sysctl(NS[0], "redirect", 1) is None
    yield
    netns_del(*NS)


def daemon(ns=NS[0]):
    with in_netns(ns):
        return Genl("sd_link")


def upcall(d, timeout=30):
    """The next SD_LINK_CMD_CONNECT the kernel sent d: its attributes."""
    d.sock.settimeout(timeout)
    while True:
        data = d.sock.recv(65536)
        n, mtype, _, seq, _ = struct.unpack_from("=IHHII", data)
        cmd = data[16]
        if mtype == d.family_id and seq == 0 and cmd == SD_LINK_CMD_CONNECT:
            return parse_attrs(data[20:n])


def addr_of(nest):
    a = parse_attrs(nest)
    ip = a[SD_A_ADDR_IN6]
    host = socket.inet_ntop(socket.AF_INET, ip[12:]) \
        if ip[:12] == b"\0" * 10 + b"\xff\xff" else \
        socket.inet_ntop(socket.AF_INET6, ip)
    return host, struct.unpack("=H", a[SD_A_ADDR_PORT])[0]


def verdict(d, cid, v, reason=None, fd=None):
    attrs = attr_u64(SD_LINK_A_ID, cid) + attr_u8(SD_LINK_A_VERDICT, v)
    if reason is not None:
        attrs += attr_u8(SD_LINK_A_REASON, reason)
    if fd is not None:
        attrs += attr_u32(SD_LINK_A_FD, fd)
    return d.request(SD_LINK_CMD_VERDICT, attrs).err


def connect_in_a(host, port, opts=()):
    """A redirected socket of host A connecting to host:port in a thread,
    after setsockopt of each (level, name, value) of opts; (thread,
    result) where result gets "sock" and "rc"."""
    res = {}

    def run():
        with in_netns(NS[0]):
            c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        for level, name, value in opts:
            c.setsockopt(level, name, value)
        res["sock"] = c
        res["rc"] = Family.connect(c, host, port)
    t = threading.Thread(target=run)
    t.start()
    return t, res


def tcp_server_in_b():
    with in_netns(NS[1]):
        s = socket.socket()
    s.bind((ADDR[1], 0))
    s.listen(4)
    s.settimeout(30)
    return s, s.getsockname()[1]


def via_listener(backlog=4):
    """A listener of host A on loopback, as the daemon's for VIA."""
    with in_netns(NS[0]):
        lst = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.bind(lst, "127.0.0.1", 0) == "OK"
    lst.listen(backlog)
    return lst


def test_one_daemon_per_namespace(hosts):
    d1, d2 = daemon(), daemon()
    assert d1.request(SD_LINK_CMD_REGISTER).err == 0
    assert d1.request(SD_LINK_CMD_REGISTER).err == 0    # again: itself
    assert d2.request(SD_LINK_CMD_REGISTER).err == errno.EBUSY
    d3 = daemon(NS[1])
    assert d3.request(SD_LINK_CMD_REGISTER).err == 0    # B has its own
    d1.close()
    assert d2.request(SD_LINK_CMD_REGISTER).err == 0    # A's went
    got = as_nobody(lambda: Genl("sd_link").request(SD_LINK_CMD_REGISTER).err)
    assert got == errno.EPERM
    for d in (d2, d3):
        d.close()


def test_only_the_daemon_gives_verdicts_of_waiting_connects(hosts):
    d, other = daemon(), daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    assert verdict(other, 1, SD_LINK_REFUSE) == errno.EPERM
    assert verdict(d, 12345, SD_LINK_REFUSE) == errno.ENOENT
    assert verdict(d, 1, 9) == errno.ERANGE         # no such verdict
    assert verdict(d, 1, SD_LINK_TCP) == errno.EINVAL  # no reason
    assert verdict(d, 1, SD_LINK_VIA) == errno.EINVAL  # no listener
    # VIA takes only a listening AF_SD socket of the daemon's namespace.
    with in_netns(NS[0]):
        tcp = socket.socket()
        unlistened = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    with in_netns(NS[1]):
        elsewhere = socket.socket(AF_SD, socket.SOCK_STREAM, 0)
    assert Family.bind(elsewhere, "127.0.0.1", 0) == "OK"
    elsewhere.listen(1)
    for s in (tcp, unlistened, elsewhere):
        assert verdict(d, 1, SD_LINK_VIA, fd=s.fileno()) == errno.EINVAL
    assert verdict(d, 1, SD_LINK_VIA, fd=9999) == errno.EBADF
    for s in (d, other, tcp, unlistened, elsewhere):
        s.close()


def test_refuse(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    t, res = connect_in_a(ADDR[1], 4242)
    up = upcall(d)
    assert addr_of(up[SD_LINK_A_REMOTE]) == (ADDR[1], 4242)
    # Bound before the daemon hears of it, at the route's source address.
    here, port = addr_of(up[SD_LINK_A_LOCAL])
    assert here == ADDR[0] and port != 0
    assert struct.unpack("=I", up[SD_LINK_A_UID])[0] == 0
    cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_REFUSE) == 0
    t.join(30)
    assert res["rc"] == "ECONNREFUSED"
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT  # answered
    res["sock"].close()
    # A bound socket's own address and port, a wildcard one's route.
    for bind_to in (ADDR[0], "0.0.0.0"):
        with in_netns(NS[0]):
            c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        assert Family.bind(c, bind_to, 0) == "OK"
        mine = sockname(c)[1]

        def run(c=c):
            res["rc"] = Family.connect(c, ADDR[1], 4242)
        t = threading.Thread(target=run)
        t.start()
        up = upcall(d)
        assert addr_of(up[SD_LINK_A_LOCAL]) == (ADDR[0], mine)
        cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
        assert verdict(d, cid, SD_LINK_REFUSE) == 0
        t.join(30)
        assert res["rc"] == "ECONNREFUSED"
        assert sockname(c) == (bind_to, mine)     # as it was
        c.close()
    d.close()


def test_tcp_with_the_daemons_reason(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    t, res = connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_TCP, SD_FALLBACK_NO_RDMA) == 0
    t.join(30)
    assert res["rc"] == "OK"
    a, _ = srv.accept()
    res["sock"].sendall(b"over tcp")
    assert a.recv(64) == b"over tcp"
    after = sd_stats(NS[0])
    assert after["fallback_no_rdma"] - before["fallback_no_rdma"] == 1
    for s in (a, srv, res["sock"], d):
        s.close()


def test_via_the_daemons_listener(hosts):
    """The connection is a local one into the daemon's listener; the
    program's peer is the remote address it asked for."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst = via_listener()
    t, res = connect_in_a(ADDR[1], 4243)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
    t.join(30)
    assert res["rc"] == "OK"
    c = res["sock"]
    assert peername(c) == (ADDR[1], 4243)
    assert sockname(c)[0] == ADDR[0]
    a = Family.accept(lst)
    got = struct.unpack("=Q", a.getsockopt(SOL_SD, SD_LINK_ID, 8))[0]
    assert got == cid
    with pytest.raises(OSError) as e:
        c.getsockopt(SOL_SD, SD_LINK_ID, 8)     # the program's end
    assert e.value.errno == errno.ENOENT
    c.sendall(b"to the daemon")
    assert a.recv(64) == b"to the daemon"
    a.sendall(b"from afar")
    assert c.recv(64) == b"from afar"
    for s in (a, c, lst, d):
        s.close()


@pytest.mark.parametrize("nonblocking", [False, True])
def test_this_hosts_connect_rules_come_first(hosts, nonblocking):
    """A connect rule of host A decides before the daemon hears of the
    connect, as for a local one: deny is EACCES, tcp is TCP with reason
    policy; neither is an upcall."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    with in_netns(NS[0]):
        nl = Genl()
    try:
        for action, want in ((sdgenl.SD_ACTION_DENY, "EACCES"),
                             (sdgenl.SD_ACTION_TCP, "OK")):
            nl.flush()
            r = nl.rule_add(action, sdgenl.SD_DIR_CONNECT, b"")
            assert r.err == 0
            with in_netns(NS[0]):
                c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
            before = sd_stats(NS[0])
            if nonblocking:
                c.setblocking(False)
                rc = Family.connect(c, ADDR[1], port)
                if rc == "EINPROGRESS":
                    assert connect_ended(c) == 0
                    rc = "OK"
            else:
                rc = Family.connect(c, ADDR[1], port)
            assert rc == want, action
            after = sd_stats(NS[0])
            moved = {k: after[k] - before[k] for k in after
                     if after[k] != before[k]}
            if action == sdgenl.SD_ACTION_DENY:
                assert moved == {"denied_connect": 1}, moved
            else:
                assert moved.get("fallback_policy") == 1, moved
                assert "link_upcalls" not in moved, moved
                a, _ = srv.accept()
                a.close()
            c.close()
    finally:
        nl.flush()
        nl.close()
    for s in (srv, d):
        s.close()


def test_a_full_daemon_listener_leaves_tcp(hosts):
    """VIA through a listener whose queue is full: a non-blocking connect
    does not wait for room; the daemon failed it, and it goes over TCP
    (reason busy) instead of ending in an error TCP never gives."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    lst = via_listener(1)
    fillers = []
    while True:
        with in_netns(NS[0]):
            f = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        f.setblocking(False)
        fillers.append(f)
        rc = Family.connect(f, *sockname(lst))
        if rc != "EINPROGRESS" or connect_ended(f) != 0:
            break
        assert len(fillers) < 16, "the queue never filled"
    before = sd_stats(NS[0])
    c = nonblocking_connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
    assert connect_ended(c) == 0
    a, _ = srv.accept()
    c.sendall(b"over tcp")
    assert a.recv(64) == b"over tcp"
    after = sd_stats(NS[0])
    assert after["fallback_busy"] - before["fallback_busy"] == 1
    assert after["link_via"] == before["link_via"]
    for s in (a, c, srv, lst, d, *fillers):
        s.close()


def upcall_sizes(up):
    """The upcall's (SD_LINK_A_TX_SIZE, SD_LINK_A_RX_SIZE)."""
    return (struct.unpack("=I", up[SD_LINK_A_TX_SIZE])[0],
            struct.unpack("=I", up[SD_LINK_A_RX_SIZE])[0])


SO_SNDBUFFORCE = 32
KIB = 1024


def test_the_upcall_states_the_ring_sizes(hosts):
    """The upcall carries the sizes of the connecting socket's send and
    receive ring: the namespace's default, or SO_SNDBUF and SO_RCVBUF
    (half the value the kernel keeps, rounded up to a power of two,
    within ring_size_max).  Through the daemon's listener the rings are
    those, and the daemon's end mirrors them."""
    assert ns_sysctl(NS[0], "ring_size", 64 * KIB) is None
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst = via_listener()
    sol = socket.SOL_SOCKET
    cases = [
        ((), (64 * KIB, 64 * KIB)),
        (((sol, socket.SO_SNDBUF, 20000), (sol, socket.SO_RCVBUF, 100000)),
         (32 * KIB, 128 * KIB)),
        (((sol, socket.SO_RCVBUF, 8 * KIB),), (64 * KIB, 8 * KIB)),
        # Past ring_size_max (4 MiB): held to it.
        (((sol, SO_SNDBUFFORCE, 8 * 1024 * KIB),), (4096 * KIB, 64 * KIB)),
    ]
    for opts, sizes in cases:
        t, res = connect_in_a(ADDR[1], 4247, opts)
        up = upcall(d)
        assert upcall_sizes(up) == sizes, opts
        cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
        assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
        t.join(30)
        assert res["rc"] == "OK"
        c = res["sock"]
        a = Family.accept(lst)
        assert ring_sizes(c) == sizes, opts
        assert ring_sizes(a) == sizes[::-1], opts
        c.sendall(b"sized")
        assert a.recv(64) == b"sized"
        for s in (a, c):
            s.close()
    for s in (lst, d):
        s.close()


def test_ring_sizes_are_fixed_as_the_connect_begins(hosts):
    """Settings changed while a connect waits for the verdict change
    nothing: its rings are the sizes the daemon was told, which the
    other host has mirrored meanwhile (blocking: net.sd.ring_size and
    ring_size_max; non-blocking: SO_SNDBUF and SO_RCVBUF too)."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst = via_listener()
    t, res = connect_in_a(ADDR[1], 4248,
                          [(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * KIB)])
    up = upcall(d)
    assert upcall_sizes(up) == (128 * KIB, 16 * KIB)
    assert ns_sysctl(NS[0], "ring_size", 8 * KIB) is None
    assert ns_sysctl(NS[0], "ring_size_max", 8 * KIB) is None
    cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
    t.join(30)
    assert res["rc"] == "OK"
    a = Family.accept(lst)
    assert ring_sizes(res["sock"]) == (128 * KIB, 16 * KIB)
    assert ring_sizes(a) == (16 * KIB, 128 * KIB)
    for s in (a, res["sock"]):
        s.close()

    c = nonblocking_connect_in_a(ADDR[1], 4249)
    up = upcall(d)
    assert upcall_sizes(up) == (8 * KIB, 8 * KIB)
    assert ns_sysctl(NS[0], "ring_size_max", 4096 * KIB) is None
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * KIB)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KIB)
    cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
    assert connect_ended(c) == 0
    a = Family.accept(lst)
    assert ring_sizes(c) == (8 * KIB, 8 * KIB)
    assert ring_sizes(a) == (8 * KIB, 8 * KIB)
    for s in (a, c, lst, d):
        s.close()


def test_a_daemon_that_goes_leaves_tcp(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    t, res = connect_in_a(ADDR[1], port)
    upcall(d)
    d.close()
    t.join(30)
    assert res["rc"] == "OK"
    a, _ = srv.accept()
    after = sd_stats(NS[0])
    assert after["fallback_remote"] - before["fallback_remote"] == 1
    for s in (a, srv, res["sock"]):
        s.close()


def test_a_daemon_that_does_not_answer_is_a_failed_rendezvous(hosts):
    assert ns_sysctl(NS[0], "rendezvous_timeout_ms", 200) is None
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    t, res = connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    t.join(30)
    assert res["rc"] == "OK"
    after = sd_stats(NS[0])
    assert after["fallback_handshake"] - before["fallback_handshake"] == 1
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT   # too late
    a, _ = srv.accept()
    for s in (a, srv, res["sock"], d):
        s.close()


def nonblocking_connect_in_a(host, port):
    with in_netns(NS[0]):
        c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    c.setblocking(False)
    assert Family.connect(c, host, port) == "EINPROGRESS"
    return c


def connect_ended(c, timeout=30):
    """Wait for a non-blocking connect's end; its SO_ERROR."""
    import select
    p = select.poll()
    p.register(c, select.POLLOUT)
    assert p.poll(timeout * 1000), "the connect did not end"
    return c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


def still_connecting(c):
    """Poll says nothing while the verdict is awaited; a second connect
    says EALREADY."""
    import select
    p = select.poll()
    p.register(c, select.POLLOUT | select.POLLIN)
    assert p.poll(0) == []
    assert Family.connect(c, ADDR[1], 1) == "EALREADY"


def test_nonblocking_connect_waits_in_the_background(hosts):
    """EINPROGRESS at once; the daemon's verdict (here TCP) ends it."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    c = nonblocking_connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    still_connecting(c)
    assert verdict(d, cid, SD_LINK_TCP, SD_FALLBACK_NO_RDMA) == 0
    assert connect_ended(c) == 0
    a, _ = srv.accept()
    c.setblocking(True)
    c.sendall(b"late but tcp")
    assert a.recv(64) == b"late but tcp"
    after = sd_stats(NS[0])
    assert after["fallback_no_rdma"] - before["fallback_no_rdma"] == 1
    assert after["link_upcalls"] - before["link_upcalls"] == 1
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT  # answered
    for s in (a, srv, c, d):
        s.close()


def test_a_background_fallback_never_polls_hung_up(hosts):
    """While a non-blocking connect falls back to TCP in the background
    (the daemon's verdict: TCP), poll never says more than TCP's own
    connect would: nothing, then writable.  A socket that became TCP's
    before TCP's connect had begun would poll writable and hung up
    (POLLOUT|POLLHUP), which an event loop takes for a failed connect.  A
    thread polls each socket without a pause, from before the verdict
    until it is writable, ten connects in a row."""
    import select
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    for i in range(10):
        c = nonblocking_connect_in_a(ADDR[1], port)
        cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
        seen, started = [], threading.Event()

        def watch():
            p = select.poll()
            p.register(c, select.POLLIN | select.POLLOUT | select.POLLRDHUP)
            started.set()
            while True:
                ev = p.poll(0)
                m = ev[0][1] if ev else 0
                if m and m not in seen:
                    seen.append(m)
                if m & select.POLLOUT:
                    return
        t = threading.Thread(target=watch)
        t.start()
        assert started.wait(30)
        assert verdict(d, cid, SD_LINK_TCP, SD_FALLBACK_NO_RDMA) == 0
        t.join(60)
        assert not t.is_alive(), "the connect never polled writable"
        assert seen == [select.POLLOUT], (i, seen)
        a, _ = srv.accept()
        c.setblocking(True)
        c.sendall(b"round %d" % i)
        assert a.recv(64) == b"round %d" % i
        a.close()
        c.close()
    after = sd_stats(NS[0])
    assert after["fallback_no_rdma"] - before["fallback_no_rdma"] == 10
    for s in (srv, d):
        s.close()


def test_nonblocking_connect_via_the_daemon(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst = via_listener()
    before = sd_stats(NS[0])
    c = nonblocking_connect_in_a(ADDR[1], 4245)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
    assert connect_ended(c) == 0
    assert peername(c) == (ADDR[1], 4245)
    assert c.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    a = Family.accept(lst)
    assert struct.unpack("=Q", a.getsockopt(SOL_SD, SD_LINK_ID, 8))[0] == cid
    c.setblocking(True)
    c.sendall(b"through the daemon")
    assert a.recv(64) == b"through the daemon"
    after = sd_stats(NS[0])
    assert after["link_via"] - before["link_via"] == 1
    for s in (a, c, lst, d):
        s.close()


def test_nonblocking_connect_refused(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    c = nonblocking_connect_in_a(ADDR[1], 4246)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_REFUSE) == 0
    assert connect_ended(c) == errno.ECONNREFUSED
    for s in (c, d):
        s.close()


def test_nonblocking_connect_without_a_verdict_in_time(hosts):
    """The rendezvous's bound ends it: TCP, a failed rendezvous."""
    assert ns_sysctl(NS[0], "rendezvous_timeout_ms", 200) is None
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    c = nonblocking_connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert connect_ended(c) == 0
    a, _ = srv.accept()
    after = sd_stats(NS[0])
    assert after["fallback_handshake"] - before["fallback_handshake"] == 1
    assert after["link_timeouts"] - before["link_timeouts"] == 1
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT  # too late
    for s in (a, srv, c, d):
        s.close()


def test_nonblocking_connect_when_the_daemon_goes(hosts):
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    c = nonblocking_connect_in_a(ADDR[1], port)
    upcall(d)
    d.close()
    assert connect_ended(c) == 0
    a, _ = srv.accept()
    after = sd_stats(NS[0])
    assert after["fallback_remote"] - before["fallback_remote"] == 1
    for s in (a, srv, c):
        s.close()


@pytest.mark.parametrize("then", ["tcp", "via", "none"])
def test_closed_while_the_verdict_is_awaited(hosts, then):
    """The program closes its socket first: the verdict still finds the
    connect, which ends with nobody to tell; nothing leaks (the module
    unloads at the end of the run), and through the daemon's listener
    the connection is made and ends at once."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    lst = via_listener()
    c = nonblocking_connect_in_a(ADDR[1], port)
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    c.close()
    if then == "tcp":
        # TCP's connect starts, and its socket goes with the file.
        assert verdict(d, cid, SD_LINK_TCP, SD_FALLBACK_NO_RDMA) == 0
    elif then == "via":
        assert verdict(d, cid, SD_LINK_VIA, fd=lst.fileno()) == 0
        a = Family.accept(lst)
        a.settimeout(30)
        assert a.recv(1) == b""
        a.close()
    else:
        d.close()
    for s in (srv, lst, d):
        s.close()


def addr_nest(t, host, port):
    return nest(t, attr(SD_A_ADDR_IN6, mapped(host)),
                attr_u16(SD_A_ADDR_PORT, port))


def incoming(d, fd, local, remote, uid=1000, gid=1000, tx=None, rx=None,
             extra=b""):
    """SD_LINK_CMD_INCOMING: (errno, id)."""
    attrs = attr_u32(SD_LINK_A_FD, fd) + \
        addr_nest(SD_LINK_A_LOCAL, *local) + \
        addr_nest(SD_LINK_A_REMOTE, *remote) + \
        attr_u32(SD_LINK_A_UID, uid) + attr_u32(SD_LINK_A_GID, gid) + extra
    if tx is not None:
        attrs += attr_u32(SD_LINK_A_TX_SIZE, tx)
    if rx is not None:
        attrs += attr_u32(SD_LINK_A_RX_SIZE, rx)
    r = d.request(SD_LINK_CMD_INCOMING, attrs)
    if r.err:
        return r.err, None
    return 0, struct.unpack("=Q", parse_attrs(r.replies[0])[SD_LINK_A_ID])[0]


def listener_in_b(backlog=4):
    with in_netns(NS[1]):
        lst = socket.socket(AF_SD, socket.SOCK_STREAM, 0)
    assert Family.bind(lst, ADDR[1], 0) == "OK"
    lst.listen(backlog)
    return lst, sockname(lst)[1]


def sock_in_b():
    with in_netns(NS[1]):
        return socket.socket(AF_SD, socket.SOCK_STREAM, 0)


def ring_sizes(s):
    """(tx, rx): bytes in the data area of each ring of s."""
    off = struct.unpack("=24Q", s.getsockopt(SOL_SD, SD_MMAP_OFFSETS, 192))
    return off[4], off[12 + 4]


def test_incoming_connection_from_another_host(hosts):
    """The daemon's socket becomes the stand-in of the remote program:
    the listener accepts a connection whose peer is the remote address,
    carried by the daemon (transport rdma), with the rings it asked for."""
    d = daemon(NS[1])
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst, port = listener_in_b()
    s = sock_in_b()
    before = sd_stats(NS[1])
    err, cid = incoming(d, s.fileno(), (ADDR[1], port), ("10.99.0.5", 4321),
                        tx=8192, rx=1 << 16)
    assert err == 0 and cid
    a = Family.accept(lst)
    assert peername(a) == ("10.99.0.5", 4321)
    assert sockname(a) == (ADDR[1], port)
    assert sockname(s) == ("10.99.0.5", 4321)
    assert a.getsockopt(SOL_SD, SD_TRANSPORT) == SD_TRANSPORT_RDMA
    assert struct.unpack("=Q", s.getsockopt(SOL_SD, SD_LINK_ID, 8))[0] == cid
    with pytest.raises(OSError) as e:
        a.getsockopt(SOL_SD, SD_LINK_ID, 8)     # the program's end
    assert e.value.errno == errno.ENOENT
    assert ring_sizes(s) == (8192, 1 << 16)
    assert ring_sizes(a) == (1 << 16, 8192)
    s.sendall(b"from afar")
    assert a.recv(64) == b"from afar"
    a.sendall(b"back")
    assert s.recv(64) == b"back"
    after = sd_stats(NS[1])
    assert after["link_incoming"] - before["link_incoming"] == 1
    assert after["accepts"] - before["accepts"] == 1
    # The second time the socket is connected already.
    assert incoming(d, s.fileno(), (ADDR[1], port),
                    ("10.99.0.5", 4322))[0] == errno.EISCONN
    for x in (a, s, lst, d):
        x.close()


def test_incoming_is_the_daemons_and_checked(hosts):
    d, other = daemon(NS[1]), daemon(NS[1])
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    lst, port = listener_in_b()
    s = sock_in_b()
    here, there = (ADDR[1], port), ("10.99.0.5", 4321)
    assert incoming(other, s.fileno(), here, there)[0] == errno.EPERM
    got = as_nobody(lambda: Genl("sd_link").request(
        SD_LINK_CMD_INCOMING).err)
    assert got == errno.EPERM
    # Missing attributes, bad sizes, ports 0, wildcards.
    assert d.request(SD_LINK_CMD_INCOMING,
                     attr_u32(SD_LINK_A_FD, s.fileno())).err == errno.EINVAL
    for tx, rx in ((3000, None), (None, 1 << 27), (1024, None),
                   (None, 12288)):
        err = incoming(d, s.fileno(), here, there, tx=tx, rx=rx)[0]
        assert err in (errno.EINVAL, errno.ERANGE), (tx, rx, err)
    assert incoming(d, s.fileno(), (ADDR[1], 0), there)[0] == errno.EINVAL
    assert incoming(d, s.fileno(), here, ("10.99.0.5", 0))[0] == errno.EINVAL
    assert incoming(d, s.fileno(), here, ("0.0.0.0", 5))[0] == errno.EINVAL
    # Not an unconnected AF_SD stream socket of the namespace.
    with in_netns(NS[1]):
        tcp = socket.socket()
    with in_netns(NS[0]):
        elsewhere = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    bound = sock_in_b()
    assert Family.bind(bound, ADDR[1], 0) == "OK"
    for x in (tcp, elsewhere, bound):
        assert incoming(d, x.fileno(), here, there)[0] == errno.EINVAL
    assert incoming(d, 9999, here, there)[0] == errno.EBADF
    # Nothing was queued by any of it, and the socket is still usable.
    assert incoming(d, s.fileno(), here, there)[0] == 0
    a = Family.accept(lst)
    assert peername(a) == there
    for x in (a, s, lst, tcp, elsewhere, bound, d, other):
        x.close()


def test_incoming_meets_the_rules_and_the_backlog(hosts):
    d = daemon(NS[1])
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    here, there = (ADDR[1], 0), ("10.99.0.5", 4321)
    # No AF_SD listener there.
    s = sock_in_b()
    assert incoming(d, s.fileno(), (ADDR[1], 4999), there)[0] == \
        errno.ECONNREFUSED
    # An address of another host is no listener of this one.
    assert incoming(d, s.fileno(), ("10.98.0.1", 4999), there)[0] == \
        errno.ECONNREFUSED
    lst, port = listener_in_b(backlog=1)
    here = (ADDR[1], port)
    with in_netns(NS[1]):
        nl = Genl()
    try:
        # A connect rule that refuses uid 2000 refuses the remote user
        # the daemons proved, and only that one.
        r = nl.rule_add(sdgenl.SD_ACTION_DENY, sdgenl.SD_DIR_CONNECT,
                        attr_u32(sdgenl.SD_A_RULE_UID_MIN, 2000) +
                        attr_u32(sdgenl.SD_A_RULE_UID_MAX, 2000))
        assert r.err == 0
        assert incoming(d, s.fileno(), here, there, uid=2000)[0] == \
            errno.EACCES
        # One that says TCP.
        nl.flush()
        r = nl.rule_add(sdgenl.SD_ACTION_TCP, sdgenl.SD_DIR_CONNECT,
                        attr_u32(sdgenl.SD_A_RULE_UID_MIN, 2001) +
                        attr_u32(sdgenl.SD_A_RULE_UID_MAX, 2001))
        assert r.err == 0
        assert incoming(d, s.fileno(), here, there, uid=2001)[0] == \
            errno.EOPNOTSUPP
        # An accept rule that refuses the remote address.
        nl.flush()
        r = nl.rule_add(sdgenl.SD_ACTION_DENY, sdgenl.SD_DIR_ACCEPT,
                        nest(sdgenl.SD_A_RULE_REMOTE,
                             attr(SD_A_ADDR_IN6, mapped("10.99.0.5")),
                             attr_u8(sdgenl.SD_A_ADDR_PREFIX, 128)))
        assert r.err == 0
        before = sd_stats(NS[1])
        assert incoming(d, s.fileno(), here, there)[0] == errno.EACCES
        assert incoming(d, s.fileno(), here, ("10.99.0.6", 1))[0] == 0
        after = sd_stats(NS[1])
        assert after["denied_accept"] - before["denied_accept"] == 1
        # Filling the backlog (1, which takes two, as TCP's) ends in
        # EAGAIN, never a wait.
        more = [sock_in_b() for _ in range(3)]
        errs = [incoming(d, x.fileno(), here, ("10.99.0.6", 2 + i))[0]
                for i, x in enumerate(more)]
        assert errs[-1] == errno.EAGAIN and 0 in errs, errs
        a = Family.accept(lst)
        assert peername(a) == ("10.99.0.6", 1)
        assert incoming(d, more[-1].fileno(), here, ("10.99.0.6", 9))[0] == 0
    finally:
        nl.flush()
        nl.close()
    for x in [a, s, lst, d] + more:
        x.close()


def test_incoming_goes_where_tcp_would(hosts):
    """A redirected AF_SD listener on 0.0.0.0 and a plain TCP listener of
    the same owner on B's address share a port: TCP would give the other
    host's connection to the plain one, so the daemon is refused (the
    other host then connects over TCP); to an address of B that only the
    AF_SD listener covers, it is queued."""
    assert ns_sysctl(NS[1], "redirect", 1) is None
    d = daemon(NS[1])
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    with in_netns(NS[1]):
        sd_lst = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
        tcp_lst = socket.socket()
    sd_lst.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert Family.bind(sd_lst, "0.0.0.0", 0) == "OK"
    sd_lst.listen(4)
    port = sockname(sd_lst)[1]
    tcp_lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    tcp_lst.bind((ADDR[1], port))
    tcp_lst.listen(4)
    s = sock_in_b()
    there = ("10.99.0.5", 4321)
    assert incoming(d, s.fileno(), (ADDR[1], port), there)[0] == \
        errno.ECONNREFUSED
    assert incoming(d, s.fileno(), ("127.0.0.1", port), there)[0] == 0
    a = Family.accept(sd_lst)
    assert peername(a) == there
    for x in (a, s, sd_lst, tcp_lst, d):
        x.close()


INCOMING_DAEMON = r"""
import socket, struct, sys
sys.path.insert(0, sys.argv[1])
import test_link as t
d = t.Genl("sd_link")
assert d.request(t.SD_LINK_CMD_REGISTER).err == 0
s = socket.socket(t.AF_SD, socket.SOCK_STREAM, 0)
err, cid = t.incoming(d, s.fileno(), (sys.argv[2], int(sys.argv[3])),
                      ("10.99.0.5", 4321))
assert err == 0, err
s.sendall(b"hello")
print("carrying", flush=True)
sys.stdin.read()
"""


def test_a_killed_daemon_resets_the_incoming_it_carried(hosts):
    import signal
    import subprocess
    import sys
    from conftest import nspopen
    lst, port = listener_in_b()
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    p = nspopen(NS[1], sys.executable, "-c", INCOMING_DAEMON, here, ADDR[1],
                str(port), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)
    try:
        assert p.stdout.readline() == "carrying\n"
        a = Family.accept(lst)
        assert a.recv(5) == b"hello"
        before = sd_stats(NS[1])
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        a.settimeout(30)
        with pytest.raises(ConnectionResetError):
            a.recv(5)
        after = sd_stats(NS[1])
        assert after["link_resets"] - before["link_resets"] == 1
        a.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lst.close()


def test_the_fabric_key_is_the_daemons_to_read(hosts):
    d, other = daemon(NS[1]), daemon(NS[1])
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    assert d.request(SD_LINK_CMD_KEY).err == errno.ENOKEY
    key = bytes(range(40))
    with in_netns(NS[1]):
        nl = Genl()
    try:
        nl.key_set(key)
        r = d.request(SD_LINK_CMD_KEY)
        assert r.err == 0
        assert parse_attrs(r.replies[0])[SD_LINK_A_KEY] == key
        assert other.request(SD_LINK_CMD_KEY).err == errno.EPERM
        got = as_nobody(lambda: Genl("sd_link").request(
            SD_LINK_CMD_KEY).err)
        assert got == errno.EPERM
        # Another namespace's daemon reads its own (none).
        d0 = daemon(NS[0])
        assert d0.request(SD_LINK_CMD_REGISTER).err == 0
        assert d0.request(SD_LINK_CMD_KEY).err == errno.ENOKEY
        d0.close()
    finally:
        nl.key_del()
        nl.close()
    for x in (d, other):
        x.close()


DAEMON = r"""
import socket, struct, sys
sys.path.insert(0, sys.argv[1])
from sdgenl import Genl, attr_u8, attr_u32, attr_u64, parse_attrs
from sdsock import Family
d = Genl("sd_link")
assert d.request(1).err == 0
lst = socket.socket(int(sys.argv[2]), socket.SOCK_STREAM, 0x10002)
assert Family.bind(lst, "127.0.0.1", 0) == "OK"
lst.listen(4)
print("ready", flush=True)
d.sock.settimeout(60)
while True:
    data = d.sock.recv(65536)
    if struct.unpack_from("=I", data, 12)[0] == 0 and data[16] == 2:
        break
cid = parse_attrs(data[20:])[2]
attrs = attr_u64(2, struct.unpack("=Q", cid)[0]) + attr_u8(7, 3) + \
    attr_u32(9, lst.fileno())
assert d.request(3, attrs).err == 0
a = Family.accept(lst)
a.sendall(b"hello")
print("carrying", flush=True)
sys.stdin.read()
"""


def test_a_killed_daemon_resets_what_it_carried(hosts):
    """kill -9 of the daemon: the program's connection through it is
    reset (ECONNRESET), and a connect after it goes over TCP."""
    import signal
    import subprocess
    import sys
    from conftest import nspopen
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    p = nspopen(NS[0], sys.executable, "-c", DAEMON, here, str(AF_SD),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        t, res = connect_in_a(ADDR[1], 4244)
        t.join(30)
        assert res["rc"] == "OK"
        assert p.stdout.readline() == "carrying\n"
        c = res["sock"]
        assert c.recv(5) == b"hello"
        before = sd_stats(NS[0])
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        c.settimeout(30)
        with pytest.raises(ConnectionResetError):
            c.recv(5)
        after = sd_stats(NS[0])
        assert after["resets"] - before["resets"] >= 1
        assert after["link_resets"] - before["link_resets"] == 1
        c.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    srv, port = tcp_server_in_b()
    t, res = connect_in_a(ADDR[1], port)
    t.join(30)
    assert res["rc"] == "OK"
    a, _ = srv.accept()
    for s in (a, srv, res["sock"]):
        s.close()
