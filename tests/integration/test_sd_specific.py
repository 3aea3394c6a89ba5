"""AF_SD behaviour that has no TCP counterpart to compare with, or that
differs from TCP on purpose: listening groups, backlogs, namespaces, the
rings and their mapping, settings, memory accounting, module lifetime."""
import ctypes
import errno
import mmap
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import SDCTL, protocol_sockets, sd_stats, wait_for
from sdsock import (SD_MMAP_OFFSETS, SD_REUSEPORT, SOL_SD, Family, errname,
                    sockname)

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
REUSEPORT = [(SOL_SD, SD_REUSEPORT, 1)]
SYSCTL = "/proc/sys/net/sd/"


def nonblocking_accepts(lst):
    lst.setblocking(False)
    got = []
    while True:
        try:
            got.append(SD.accept(lst))
        except BlockingIOError:
            return got


def connect_n(port, n):
    socks = []
    for _ in range(n):
        c = SD.socket()
        assert SD.connect(c, "127.0.0.1", port) == "OK"
        socks.append(c)
    return socks


# ---- listening groups ----------------------------------------------------

def reuseport_pair():
    l1, port = SD.listener(opts=REUSEPORT)
    l2 = SD.socket()
    l2.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(l2, "127.0.0.1", port) == "OK"
    l2.listen(16)
    return l1, l2, port


def test_reuseport_dispatches_round_robin(no_leak):
    l1, l2, port = reuseport_pair()
    clients = connect_n(port, 10)
    # Closing l1 resets exactly the connections queued on it: half.
    l1.close()
    reset = 0
    for c in clients:
        try:
            c.recv(1, socket.MSG_DONTWAIT)
        except ConnectionResetError:
            reset += 1
        except BlockingIOError:
            pass
    assert reset == 5
    assert len(nonblocking_accepts(l2)) == 5
    for s in clients + [l2]:
        s.close()


SO_ATTACH_REUSEPORT_CBPF = 51
SO_DETACH_REUSEPORT_BPF = 68


def test_reuseport_bpf_program_is_kept_not_run(no_leak):
    """A reuseport BPF program reads the SYN's packet; an AF_SD connection
    has none, so the group dispatches round robin whatever the program
    says (af_sd.rst, "Where AF_SD differs from TCP"; the kernel's
    reuseport_bpf selftest).  This one would send every connection to
    the group's first socket."""
    ret0 = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))
    prog = struct.pack("@HP", 1, ctypes.addressof(ret0))
    l1, port = SD.listener(opts=REUSEPORT + [
        (socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, prog)])
    l2 = SD.socket()
    l2.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    l2.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, prog)
    assert SD.bind(l2, "127.0.0.1", port) == "OK"
    l2.listen(16)
    # As TCP's: detaching works, and a socket without SO_REUSEPORT takes
    # no program.
    l2.setsockopt(socket.SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, 0)
    l2.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, prog)
    plain = SD.socket()
    with pytest.raises(OSError) as e:
        plain.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, prog)
    assert e.value.errno == errno.EINVAL
    clients = connect_n(port, 10)
    # Accepts steal from siblings; closing l1 resets exactly the
    # connections queued on it: half, where the program wanted all.
    l1.close()
    reset = 0
    for c in clients:
        try:
            c.recv(1, socket.MSG_DONTWAIT)
        except ConnectionResetError:
            reset += 1
        except BlockingIOError:
            pass
    assert reset == 5
    assert len(nonblocking_accepts(l2)) == 5
    for s in clients + [l2, plain]:
        s.close()


def test_so_reuseport_is_refused_by_the_core_and_read_back(no_leak):
    s = SD.socket()
    with pytest.raises(OSError) as e:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    assert e.value.errno == errno.EOPNOTSUPP
    s.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    assert s.getsockopt(SOL_SD, SD_REUSEPORT) == 1
    s.close()


def test_reuseport_needs_the_option_on_both(no_leak):
    l1, port = SD.listener(opts=REUSEPORT)
    l2 = SD.socket()
    assert SD.bind(l2, "127.0.0.1", port) == "EADDRINUSE"
    l1.close()
    l2.close()


def test_reuseport_turned_off_after_bind_holds_the_port(no_leak):
    """A bind with SD_REUSEPORT skips the walk of the port's sockets when
    all of them share it (the chain summary): one that turns the option
    off after its bind must still hold the port."""
    a = SD.socket()
    a.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(a, "127.0.0.1", 0) == "OK"
    port = sockname(a)[1]
    b = SD.socket()
    b.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(b, "127.0.0.1", port) == "OK"
    b.close()
    a.setsockopt(SOL_SD, SD_REUSEPORT, 0)
    c = SD.socket()
    c.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(c, "127.0.0.1", port) == "EADDRINUSE"
    a.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(c, "127.0.0.1", port) == "OK"
    for s in (a, c):
        s.close()


def test_accept_steals_from_a_sibling(no_leak):
    l1, l2, port = reuseport_pair()
    clients = connect_n(port, 2)        # one in each queue
    got = nonblocking_accepts(l1)       # own, then the sibling's
    assert len(got) == 2
    assert nonblocking_accepts(l2) == []
    for s in got + clients + [l1, l2]:
        s.close()


def test_blocked_accept_is_woken_for_a_sibling_queue(no_leak):
    l1, l2, port = reuseport_pair()
    got = []
    th = threading.Thread(target=lambda: got.append(SD.accept(l1)))
    th.start()
    time.sleep(0.2)
    clients = connect_n(port, 2)        # the second goes to l2's queue
    th.join(5)
    assert not th.is_alive() and len(got) == 1
    rest = nonblocking_accepts(l1)
    assert len(rest) == 1               # stolen from l2
    for s in got + rest + clients + [l1, l2]:
        s.close()


def test_backlog_is_per_listener_and_full_backlog_blocks(no_leak):
    lst, port = SD.listener(backlog=1)
    # As TCP, a backlog of n holds n + 1 connections.
    clients = connect_n(port, 2)
    c = SD.socket(flags=socket.SOCK_NONBLOCK)
    # Deliberate difference: TCP drops the SYN and retries; AF_SD says so.
    assert SD.connect(c, "127.0.0.1", port) == "EAGAIN"
    blocked = SD.socket()
    res = []
    th = threading.Thread(
        target=lambda: res.append(SD.connect(blocked, "127.0.0.1", port)))
    th.start()
    time.sleep(0.3)
    assert th.is_alive()                # waits for room
    SD.accept(lst).close()
    th.join(5)
    assert res == ["OK"]
    for s in clients + [c, blocked, lst]:
        s.close()


def test_connect_timeout_on_full_backlog(no_leak):
    lst, port = SD.listener(backlog=0)
    first = connect_n(port, 1)
    c = SD.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 0, 200000))
    t0 = time.monotonic()
    assert SD.connect(c, "127.0.0.1", port) == "EAGAIN"
    assert time.monotonic() - t0 >= 0.15
    for s in first + [c, lst]:
        s.close()


def test_aborted_waiting_connect_stays_connecting_until_it_ends(no_leak):
    """shutdown() aborts a connect that waits for backlog room; until that
    call has left, the socket stays connecting for every other thread (a
    connect waits for it, listen is EINVAL), so that the leaving call
    cannot undo what another thread made of the socket meanwhile.  Once it
    has left, the socket may listen, and then it listens for real (the
    fuzzer found a listener that the aborted call had turned back to
    closed: it was freed while still in its group)."""
    lst, port = SD.listener(backlog=0)
    first = connect_n(port, 1)
    for _ in range(100):
        c = SD.socket()
        res = []
        full = sd_stats()["backlog_full"]
        th = threading.Thread(
            target=lambda: res.append(SD.connect(c, "127.0.0.1", port)))
        th.start()
        # The connect met the full backlog, so it waits (SYN_SENT, set
        # under the socket lock that shutdown takes) when it is aborted.
        assert wait_for(lambda: sd_stats()["backlog_full"] > full, 30)
        c.shutdown(socket.SHUT_RDWR)
        # Another thread's connect and listen, racing the aborted call
        # (non-blocking: the backlog is still full).
        c.setblocking(False)
        again = SD.connect(c, "127.0.0.1", port)
        c.setblocking(True)
        try:
            c.listen(4)
            listened = True
        except OSError as e:
            assert e.errno == errno.EINVAL, e
            listened = False
        th.join(10)
        assert not th.is_alive()
        assert res == ["ECONNRESET"], res
        # Still connecting, or a new connect that found the backlog full.
        assert again in ("EALREADY", "EAGAIN"), again
        if listened:
            assert c.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        c.close()
    # The listeners' table is intact: sdctl lists them.
    out = subprocess.run([SDCTL, "listeners"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    for s in first + [lst]:
        s.close()


# ---- network namespaces -------------------------------------------------

NETNS_PROBE = textwrap.dedent("""
    import sys
    sys.path.insert(0, %r)
    from sdsock import Family
    sd = Family("sd")
    c = sd.socket()
    print(sd.connect(c, "127.0.0.1", int(sys.argv[1])))
    l, port = sd.listener()
    print(port)
    print(open("/proc/sys/net/sd/ring_size").read().strip())
""")


@pytest.fixture
def netns():
    name = f"sdtest{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo",
                    "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=True)


def test_namespaces_do_not_see_each_other(netns, no_leak):
    lst, port = SD.listener("0.0.0.0")
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                          NETNS_PROBE % here, str(port)],
                         capture_output=True, text=True, check=True)
    refused, other_port, ring = out.stdout.split()
    assert refused == "ECONNREFUSED"
    # Its settings are its own (defaults), whatever this netns has.
    assert int(ring) == 131072
    c = SD.socket()
    # The other namespace's listener is gone with its process, and was
    # never reachable from here either.
    assert SD.connect(c, "127.0.0.1", int(other_port)) == "ECONNREFUSED"
    c.close()
    lst.close()


# ---- rings ---------------------------------------------------------------

def offsets(s):
    raw = s.getsockopt(SOL_SD, SD_MMAP_OFFSETS, 192)
    vals = struct.unpack("24Q", raw)
    keys = ("consumer", "prod_flags", "cons_flags", "data", "size", "mmap_len",
            "prod_pos", "cons_pos", "cons_off", "prod_token", "cons_token",
            "cons_lowat")
    return dict(zip(keys, vals[:12])), dict(zip(keys, vals[12:]))


def test_mmap_offsets_describe_both_rings(no_leak):
    c, s, lst = SD.pair()
    tx, rx = offsets(c)
    assert tx["size"] == rx["size"] == 131072
    assert tx["data"] == mmap.PAGESIZE
    assert tx["mmap_len"] == tx["size"] + mmap.PAGESIZE
    assert tx["consumer"] != tx["prod_flags"]
    assert abs(tx["consumer"] - tx["prod_flags"]) >= 64   # own cache lines
    u = SD.socket()
    with pytest.raises(OSError) as e:
        offsets(u)
    assert e.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as e:
        c.getsockopt(SOL_SD, SD_MMAP_OFFSETS, 16)
    assert e.value.errno == errno.EINVAL
    for x in (c, s, lst, u):
        x.close()


def test_both_ends_map_the_same_ring(no_leak):
    c, s, lst = SD.pair()
    tx, _ = offsets(c)
    ctx = mmap.mmap(c.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                    mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    srx = mmap.mmap(s.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                    mmap.PROT_READ | mmap.PROT_WRITE, offset=0x80000000)
    c.send(b"hello")
    d = tx["data"]
    for m in (ctx, srx):
        length, flags = struct.unpack_from("II", m, d)
        assert (length, flags) == (5, 1)
        assert m[d + 8:d + 13] == b"hello"
    assert s.recv(10) == b"hello"
    # Consumed bytes are zero again, and the credit came back (the ring
    # went empty, so it was published at once).
    assert ctx[d:d + 16] == bytes(16)
    assert struct.unpack_from("Q", ctx, tx["consumer"])[0] == 16
    ctx.close()
    srx.close()
    for x in (c, s, lst):
        x.close()


def test_mmap_rejects_bad_requests(no_leak):
    c, s, lst = SD.pair()
    tx, _ = offsets(c)
    n = tx["mmap_len"]
    for kw, why in ((dict(flags=mmap.MAP_PRIVATE), "private"),
                    (dict(offset=0x1000), "bad offset"),
                    (dict(length=n - mmap.PAGESIZE), "short"),
                    (dict(length=n + mmap.PAGESIZE), "long")):
        args = dict(length=n, flags=mmap.MAP_SHARED, offset=0)
        args.update(kw)
        with pytest.raises(OSError) as e:
            mmap.mmap(c.fileno(), args["length"], args["flags"],
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=args["offset"])
        assert e.value.errno == errno.EINVAL, why
    u = SD.socket()
    with pytest.raises(OSError) as e:
        mmap.mmap(u.fileno(), n, mmap.MAP_SHARED, mmap.PROT_READ)
    assert e.value.errno == errno.ENOTCONN
    for x in (c, s, lst, u):
        x.close()


def corrupt(m, off, data):
    m[off:off + len(data)] = data


@pytest.mark.parametrize("header", [
    struct.pack("II", 10, 0xFF),                # unknown flags
    struct.pack("II", 10, 0),                   # not valid, not zero
    struct.pack("II", 0, 1),                    # empty data record
    struct.pack("II", 0xFFFFFFF9, 1),           # wraps SD_REC_SPACE in 32 bits
    struct.pack("II", 200000, 1),               # crosses the end
    struct.pack("II", 16, 3),                   # pad not to the end
])
def test_corrupt_record_resets_only_that_connection(header, no_leak):
    c, s, lst = SD.pair()
    other_c, other_s, _ = SD.pair()
    tx, _ = offsets(c)
    m = mmap.mmap(c.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    corrupt(m, tx["data"], header)
    with pytest.raises(ConnectionResetError):
        s.recv(100)
    assert s.recv(100) == b""
    # The producer learns it too.
    with pytest.raises(OSError) as e:
        c.send(b"x", socket.MSG_NOSIGNAL)
    assert e.value.errno in (errno.ECONNRESET, errno.EPIPE)
    # Another connection is untouched.
    other_c.sendall(b"fine")
    assert other_s.recv(10) == b"fine"
    m.close()
    for x in (c, s, lst, other_c, other_s):
        x.close()


@pytest.mark.parametrize("credit", [1 << 40, 3, 2 ** 64 - 8])
def test_corrupt_credit_resets_the_producer(credit, no_leak):
    c, s, lst = SD.pair()
    _, rx = offsets(c)              # the ring the server produces
    m = mmap.mmap(c.fileno(), rx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0x80000000)
    struct.pack_into("Q", m, rx["consumer"], credit)
    with pytest.raises(ConnectionResetError):
        s.send(b"x")
    m.close()
    for x in (c, s, lst):
        x.close()


def test_consumer_scribbling_data_area_is_harmless(no_leak):
    c, s, lst = SD.pair()
    tx, _ = offsets(c)
    m = mmap.mmap(s.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0x80000000)
    # A consumer that flips flag words and fills the area the producer has
    # not written: the producer's next record overwrites its header slot.
    struct.pack_into("I", m, tx["prod_flags"], 0xFFFFFFFF)
    c.send(b"abc")
    got = s.recv(10)
    assert got == b"abc"
    m.close()
    for x in (c, s, lst):
        x.close()


# ---- settings --------------------------------------------------------------

def sysctl(name, value=None):
    path = SYSCTL + name
    if value is None:
        with open(path) as f:
            return f.read().split()
    try:
        with open(path, "w") as f:
            f.write(value)
        return "OK"
    except OSError as e:
        return errname(e.errno)


def test_ring_size_sysctl(no_leak):
    old = sysctl("ring_size")
    try:
        for bad in ("1000", "2048", "0", "-4096", "134217728", "x"):
            assert sysctl("ring_size", bad) == "EINVAL", bad
            assert sysctl("ring_size") == old
        assert sysctl("ring_size", "8192") == "OK"
        c, s, lst = SD.pair()
        tx, rx = offsets(c)
        assert tx["size"] == rx["size"] == 8192
        for x in (c, s, lst):
            x.close()
    finally:
        sysctl("ring_size", old[0])


def test_sndbuf_rcvbuf_size_the_rings(no_leak):
    lst, port = SD.listener()
    c = SD.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    SD.connect(c, "127.0.0.1", port)
    tx, rx = offsets(c)
    assert (tx["size"], rx["size"]) == (16384, 8192)
    s = SD.accept(lst)
    stx, srx = offsets(s)
    assert (stx["size"], srx["size"]) == (8192, 16384)
    for x in (c, s, lst):
        x.close()


def test_port_range_sysctl(no_leak):
    old = sysctl("port_range")
    try:
        for bad in ("100 50", "0 10", "1 70000", "5"):
            assert sysctl("port_range", bad) == "EINVAL", bad
            assert sysctl("port_range") == old
        assert sysctl("port_range", "40000 40003") == "OK"
        socks = []
        for _ in range(4):
            s = SD.socket()
            assert SD.bind(s, "127.0.0.1", 0) == "OK"
            assert 40000 <= sockname(s)[1] <= 40003
            socks.append(s)
        s = SD.socket()
        assert SD.bind(s, "127.0.0.1", 0) == "EADDRNOTAVAIL"
        socks.append(s)
        for x in socks:
            x.close()
    finally:
        sysctl("port_range", " ".join(old))


def test_privileged_ports_need_the_capability(no_leak):
    probe = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, %r)
        from sdsock import Family
        os.setuid(65534)
        sd = Family("sd")
        print(sd.bind(sd.socket(), "127.0.0.1", 80),
              sd.bind(sd.socket(), "127.0.0.1", 8080))
    """) % os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["EACCES", "OK"]


# ---- memory and module lifetime -----------------------------------------

def test_rings_are_charged_to_the_memory_cgroup(no_leak):
    """A ring's header page is charged at connect, its data pages to the
    task whose send first writes them: at the cgroup's limit a send gets
    ENOMEM (the allocation does not call the OOM killer) and the process
    lives on."""
    cg = "/sys/fs/cgroup/sdtest"
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    os.makedirs(cg, exist_ok=True)
    try:
        with open(cg + "/memory.max", "w") as f:
            f.write(str(16 << 20))
        probe = textwrap.dedent("""
            import errno, os, socket, sys
            sys.path.insert(0, %r)
            from sdsock import Family
            buf = b"x" * (128 << 10)
            with open(%r + "/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
            sd = Family("sd")
            lst, port = sd.listener(backlog=4096)
            keep = []
            for _ in range(200):
                c = sd.socket()
                if sd.connect(c, "127.0.0.1", port) != "OK":
                    os._exit(254)
                keep.append((c, sd.accept(lst)))
            # 200 idle connections fit; 200 full rings (25 MiB) do not.
            # The cgroup is full to the page then: a write to a pipe or
            # an open would need a page of it.  The exit status says it.
            for i, (c, _) in enumerate(keep):
                try:
                    c.send(buf, socket.MSG_DONTWAIT)
                except OSError as e:
                    os._exit(i // 4 if e.errno == errno.ENOMEM else 253)
            os._exit(255)
        """) % (os.path.dirname(os.path.abspath(__file__)), cg)
        out = subprocess.run([sys.executable, "-c", probe],
                             capture_output=True, text=True, timeout=300)
        # 128 KiB of ring per send against 16 MiB: it must stop early,
        # with ENOMEM, and the process must survive (no OOM kill, which
        # would be -9).
        assert 5 < out.returncode < 50, (out.returncode, out.stderr)
    finally:
        wait_for(lambda: not open(cg + "/cgroup.procs").read().strip())
        os.rmdir(cg)


def test_module_cannot_unload_while_a_socket_exists(no_leak):
    s = SD.socket()
    r = subprocess.run(["rmmod", "af_sd"], capture_output=True, text=True)
    assert r.returncode != 0
    assert os.path.exists("/sys/module/af_sd")
    s.close()


@pytest.mark.parametrize("name,bad,good", [
    ("ring_size", ["1000", "2048", "0", "-4096", "134217728", "x"],
     "8192"),
    ("ring_size_max", ["3000", "0", "134217728", "1e6"], "1048576"),
    ("port_range", ["100 50", "0 10", "1 70000", "5", "a b"], "40000 50000"),
    ("default_policy", ["bogus", "ALLOW", "allow deny", "1"], "deny"),
    ("redirect", ["2", "-1", "x", "9999999999"], "1"),
])
def test_every_sysctl_rejects_bad_values_and_keeps_the_old(name, bad, good):
    old = sysctl(name)
    try:
        for value in bad:
            assert sysctl(name, value) == "EINVAL", (name, value)
            assert sysctl(name) == old, (name, value)
        assert sysctl(name, good) == "OK"
        assert sysctl(name) == good.split()
    finally:
        sysctl(name, " ".join(old))
    assert sysctl(name) == old


def test_sysctls_need_privilege():
    probe = textwrap.dedent("""
        import os
        os.setuid(65534)
        try:
            open("/proc/sys/net/sd/ring_size", "w").write("8192")
            print("written")
        except OSError as e:
            print(e.errno)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() in (str(errno.EACCES), str(errno.EPERM))


def test_ring_sizes_above_4mib_need_init_ns_cap_net_admin():
    """A user namespace's root owns the sysctls of the network namespace it
    makes, but may not make each connection there cost more than 2 x 4 MiB
    of kernel memory: net.sd.ring_size and ring_size_max above 4 MiB need
    CAP_NET_ADMIN in the initial user namespace (EPERM), and the refused
    write keeps the old value.  The initial namespace's root may."""
    probe = textwrap.dedent("""
        import errno
        def put(name, value):
            path = "/proc/sys/net/sd/" + name
            try:
                with open(path, "w") as f:
                    f.write(value)
                return "OK"
            except OSError as e:
                return errno.errorcode[e.errno]
        def get(name):
            return open("/proc/sys/net/sd/" + name).read().strip()
        for name in ("ring_size", "ring_size_max"):
            print(name, put(name, "4194304"), get(name),
                  put(name, "8388608"), get(name),
                  put(name, "67108864"), get(name))
    """)
    out = subprocess.run(["unshare", "--user", "--map-root-user", "--net",
                          sys.executable, "-c", probe],
                         capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    for name, line in zip(("ring_size", "ring_size_max"), lines):
        assert line.split() == [name, "OK", "4194304", "EPERM", "4194304",
                                "EPERM", "4194304"], out.stdout
    # The initial namespace's root (the test runs as root) still may.
    for name in ("ring_size", "ring_size_max"):
        old = sysctl(name)
        try:
            assert sysctl(name, "8388608") == "OK"
            assert sysctl(name) == ["8388608"]
        finally:
            sysctl(name, old[0])
