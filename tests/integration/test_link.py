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
from sdgenl import Genl, as_nobody, attr_u8, attr_u32, attr_u64, \
    parse_attrs
from sdsock import Family, peername, sockname

SD_LINK_CMD_REGISTER, SD_LINK_CMD_CONNECT, SD_LINK_CMD_VERDICT = 1, 2, 3
(SD_LINK_A_ID, SD_LINK_A_LOCAL, SD_LINK_A_REMOTE, SD_LINK_A_UID,
 SD_LINK_A_GID, SD_LINK_A_VERDICT, SD_LINK_A_REASON, SD_LINK_A_FD) = \
    range(2, 10)
SD_LINK_TCP, SD_LINK_REFUSE, SD_LINK_VIA = 1, 2, 3
SD_FALLBACK_NO_RDMA = 3
SD_A_ADDR_IN6, SD_A_ADDR_PORT = 1, 2
SD_PROTO_INET = 0x10002
SOL_SD, SD_LINK_ID = 0x5344, 16

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


def connect_in_a(host, port):
    """A redirected socket of host A connecting to host:port in a thread;
    (thread, result) where result gets "sock" and "rc"."""
    res = {}

    def run():
        with in_netns(NS[0]):
            c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
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
    assert struct.unpack("=I", up[SD_LINK_A_UID])[0] == 0
    cid = struct.unpack("=Q", up[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_REFUSE) == 0
    t.join(30)
    assert res["rc"] == "ECONNREFUSED"
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT  # answered
    res["sock"].close()
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
    with in_netns(NS[0]):
        lst = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    assert Family.bind(lst, "127.0.0.1", 0) == "OK"
    lst.listen(4)
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


def test_nonblocking_connect_does_not_wait(hosts):
    """The daemon hears of it and learns; the connect goes over TCP at
    once (peer_unknown), and a verdict for it finds no one waiting."""
    d = daemon()
    assert d.request(SD_LINK_CMD_REGISTER).err == 0
    srv, port = tcp_server_in_b()
    before = sd_stats(NS[0])
    with in_netns(NS[0]):
        c = socket.socket(AF_SD, socket.SOCK_STREAM, SD_PROTO_INET)
    c.setblocking(False)
    assert Family.connect(c, ADDR[1], port) == "EINPROGRESS"
    cid = struct.unpack("=Q", upcall(d)[SD_LINK_A_ID])[0]
    assert verdict(d, cid, SD_LINK_REFUSE) == errno.ENOENT
    a, _ = srv.accept()
    after = sd_stats(NS[0])
    assert after["fallback_peer_unknown"] - \
        before["fallback_peer_unknown"] == 1
    for s in (a, srv, c, d):
        s.close()


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
