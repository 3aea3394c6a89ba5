"""Hostile zero copy (Documentation/zerocopy.rst, "Trust"): bad arguments
to SD_IOC_ZC_SEND, SD_IOC_ZC_RECV and pool mmaps; SD_REC_ZC records
written by hand with forged, replayed, mis-sized or skipped handles, read
by the kernel's path and by libsd; zero copy in a small memory cgroup;
pages queued by a sender that exits.  Each may hurt only the connection
it was tried on, and every page comes back."""
import ctypes
import errno
import fcntl
import mmap
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest

from conftest import StatsDelta, wait_for
from sdsock import Family, errname
from test_tokens import TX, Owner

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
HERE = os.path.dirname(os.path.abspath(__file__))
SDRUN = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "user",
                     "lib", "shim", "sdrun")
PAGE = mmap.PAGESIZE
POOL = 0x40000000
POOL_MAX = 64 << 30
ZC_MAX = 16 << 20
IOC_ZC_SEND = (3 << 30) | (32 << 16) | (0x53 << 8) | 0xD4
IOC_ZC_RECV = (3 << 30) | (40 << 16) | (0x53 << 8) | 0xD5
REC_VALID, REC_ZC = 1, 4
ZC_PEEK, ZC_DONTWAIT = 1, 2


def address(m):
    """Where a Python mmap (or any writable buffer) lies."""
    c = ctypes.c_char.from_buffer(m)
    a = ctypes.addressof(c)
    del c
    return a


def pool(s, pages):
    m = mmap.mmap(s.fileno(), pages * PAGE, mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=POOL)
    return m, address(m)


def zc_send(s, addr, length, flags=0, pad=0):
    buf = bytearray(struct.pack("QQQII", addr, length, 0, flags, pad))
    fcntl.ioctl(s, IOC_ZC_SEND, buf, True)
    return struct.unpack_from("Q", buf, 16)[0]


def zc_recv(s, seq, addr, length, off=0, flags=0, rec_len=None, pad=0):
    rec_len = length if rec_len is None else rec_len
    buf = bytearray(struct.pack("QQIIIIII", seq, addr, off, length, flags, 0,
                                rec_len, pad))
    return fcntl.ioctl(s, IOC_ZC_RECV, buf, True)


def zc_record(seq, length, pad=0):
    return struct.pack("QII", seq, length, pad)


def errno_of(fn, *args):
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def page_bytes(tag, n=PAGE):
    return bytes((tag * 31 + i * 7) & 0xFF for i in range(n))


def still_works(c, s, n=65536):
    """The connection carries bytes both ways (through the kernel)."""
    data = page_bytes(9, n)
    c.sendall(data)
    got = bytearray()
    while len(got) < n:
        got += s.recv(n - len(got))
    s.sendall(b"back")
    return bytes(got) == data and c.recv(4) == b"back"


# ---- bad arguments ----------------------------------------------------------

def test_zc_send_rejects_bad_arguments(no_leak):
    c, s, lst = SD.pair()
    m, base = pool(c, 16)
    m[:PAGE] = page_bytes(1)
    anon = mmap.mmap(-1, 4 * PAGE)
    d = StatsDelta()
    bad = {
        "no bytes": (base, 0),
        "not whole pages": (base, PAGE + 1),
        "unaligned": (base + 1, PAGE),
        "past the pool's end": (base + 15 * PAGE, 2 * PAGE),
        "over SD_ZC_MAX": (base, ZC_MAX + PAGE),
        "not a pool": (address(anon), PAGE),
        "NULL": (0, PAGE),
        "wraps": (2 ** 64 - PAGE, 2 * PAGE),
    }
    got = {k: errname(errno_of(zc_send, c, a, n)) for k, (a, n) in bad.items()}
    got["unknown flag"] = errname(errno_of(zc_send, c, base, PAGE, 0x80))
    got["pad"] = errname(errno_of(zc_send, c, base, PAGE, 0, 1))
    assert got == {k: "EINVAL" for k in got}
    u = SD.socket()
    assert errno_of(zc_send, u, base, PAGE) == errno.ENOTCONN
    assert errno_of(zc_send, lst, base, PAGE) == errno.ENOTCONN
    assert d()["zc_sends"] == 0
    assert still_works(c, s)
    anon.close()
    m.close()
    for x in (c, s, lst, u):
        x.close()


def test_zc_recv_rejects_bad_arguments_and_a_fault_loses_nothing(no_leak):
    """Unknown flags: EINVAL.  A destination that faults: EFAULT, and the
    entry stays for the next try."""
    c, s, lst = SD.pair()
    m, base = pool(c, 4)
    m[:PAGE] = page_bytes(2)
    seq = zc_send(c, base, PAGE)
    assert Owner(c, TX).write(zc_record(seq, PAGE), REC_VALID | REC_ZC)
    dst = bytearray(PAGE)
    at = address(dst)
    assert errno_of(zc_recv, s, seq, at, PAGE, 0, 0x10) == errno.EINVAL
    assert errno_of(zc_recv, s, seq, at, PAGE, 0, 0, 0) == errno.EINVAL
    assert errno_of(zc_recv, s, seq, at, PAGE, 0, 0, PAGE, 1) == errno.EINVAL
    assert errno_of(zc_recv, s, seq, 0, PAGE) == errno.EFAULT
    # The kernel's path delivers the same entry whole.
    assert s.recv(2 * PAGE) == page_bytes(2)
    assert still_works(c, s)
    # A length that is not the entry's resets the connection: ECONNRESET
    # once, then the end of the stream, as after a TCP reset.
    seq = zc_send(c, base, PAGE)
    assert errno_of(zc_recv, s, seq, at, PAGE, 0, 0, 2 * PAGE) == \
        errno.ECONNRESET
    assert s.recv(PAGE) == b""
    assert errno_of(c.send, b"x") in (errno.ECONNRESET, errno.EPIPE)
    m.close()
    for x in (c, s, lst):
        x.close()


def test_pool_mmap_rejects_bad_requests(no_leak):
    s = SD.socket()
    flags = mmap.PROT_READ | mmap.PROT_WRITE
    with pytest.raises(OSError) as e:
        mmap.mmap(s.fileno(), PAGE, mmap.MAP_PRIVATE, flags, offset=POOL)
    assert e.value.errno == errno.EINVAL
    # Any other offset is a ring's: none on an unconnected socket, and
    # no such ring on a connected one.
    c, p, lst = SD.pair()
    for x, err in ((s, errno.ENOTCONN), (c, errno.EINVAL)):
        with pytest.raises(OSError) as e:
            mmap.mmap(x.fileno(), PAGE, mmap.MAP_SHARED, flags,
                      offset=POOL + PAGE)
        assert e.value.errno == err
    for x in (c, p, lst):
        x.close()
    with pytest.raises(OSError) as e:
        mmap.mmap(s.fileno(), POOL_MAX + PAGE, mmap.MAP_SHARED, flags,
                  offset=POOL)
    assert e.value.errno == errno.EINVAL
    # A pool may not grow (mremap), and works on an unconnected socket.
    m, base = pool(s, 4)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mremap.restype = ctypes.c_void_p
    libc.mremap.argtypes = (ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_size_t, ctypes.c_int)
    r = libc.mremap(base, 4 * PAGE, 8 * PAGE, 1)     # MREMAP_MAYMOVE
    assert r == ctypes.c_void_p(-1).value
    m[:] = bytes(4 * PAGE)
    m.close()
    s.close()


# ---- hand-written records ---------------------------------------------------

def forged(c, base, how):
    """Write, as c's producer, the records of case how; return the bytes
    the reader must get before its connection is reset."""
    o = Owner(c, TX)
    zc = REC_VALID | REC_ZC
    if how == "unknown handle":
        o.write(zc_record(12345, PAGE), zc)
        return b""
    if how == "handle 0":
        o.write(zc_record(0, PAGE), zc)
        return b""
    seq = zc_send(c, base, PAGE)
    if how == "replayed":
        o.write(zc_record(seq, PAGE), zc)
        o.write(zc_record(seq, PAGE), zc)
        return page_bytes(3)
    if how == "wrong length":
        o.write(zc_record(seq, 2 * PAGE), zc)
    elif how == "no length":
        o.write(zc_record(seq, 0), zc)
    elif how == "over SD_ZC_MAX":
        o.write(zc_record(seq, ZC_MAX + 1), zc)
    elif how == "short record":
        o.write(struct.pack("Q", seq), zc)
    elif how == "pad and zc":
        o.write(zc_record(seq, PAGE), zc | 2)
    elif how == "a later handle first":
        later = zc_send(c, base + PAGE, PAGE)
        o.write(zc_record(later, PAGE), zc)
        o.write(zc_record(seq, PAGE), zc)
        return page_bytes(4)
    else:
        raise AssertionError(how)
    return b""


CASES = ["unknown handle", "handle 0", "replayed", "wrong length",
         "no length", "over SD_ZC_MAX", "short record", "pad and zc",
         "a later handle first"]


@pytest.mark.parametrize("how", CASES)
def test_forged_handle_resets_only_its_connection(how, no_leak):
    """Read by the kernel's path: the good bytes before it, then
    ECONNRESET; a second connection of the same processes is untouched."""
    c, s, lst = SD.pair()
    c2, s2, lst2 = SD.pair()
    m, base = pool(c, 4)
    m[:PAGE] = page_bytes(3)
    m[PAGE:2 * PAGE] = page_bytes(4)
    want = forged(c, base, how)
    got = bytearray()
    while len(got) < len(want):
        got += s.recv(len(want) - len(got))
    assert bytes(got) == want
    assert errno_of(s.recv, 4 * PAGE) == errno.ECONNRESET
    assert still_works(c2, s2)
    m.close()
    for x in (c, s, lst, c2, s2, lst2):
        x.close()


LIBSD_READER = textwrap.dedent("""
    import os, socket, sys, zlib
    sys.path.insert(0, %r)
    from sdsock import Family, errname
    sd = Family("sd")
    c = sd.socket()
    assert sd.connect(c, "127.0.0.1", int(sys.argv[1])) == "OK"
    os.write(1, b"connected\\n")
    sys.stdin.readline()            # the records are in the ring: read
    want, got = int(sys.argv[2]), bytearray()
    try:
        while len(got) < want:
            b = c.recv(want - len(got))
            if not b:
                break
            got += b
    finally:
        print(len(got), zlib.crc32(got))
    try:
        print("no error, then", len(c.recv(1 << 20)), "bytes")
    except OSError as e:
        print(errname(e.errno))
""") % HERE


@pytest.mark.parametrize("how", ["unknown handle", "replayed",
                                 "wrong length", "a later handle first"])
def test_forged_handle_against_a_libsd_reader(how, no_leak):
    """The same records read by libsd (SD_IOC_ZC_RECV; they are in the
    ring before it reads): the good bytes, then ECONNRESET from recv; the
    reader does not crash or hang."""
    lst, port = SD.listener()
    pool_owner = SD.socket()
    m, base = pool(pool_owner, 4)
    m[:PAGE] = page_bytes(3)
    m[PAGE:2 * PAGE] = page_bytes(4)
    want_len = PAGE if how in ("replayed", "a later handle first") else 0
    r = subprocess.Popen([SDRUN, sys.executable, "-c", LIBSD_READER,
                          str(port), str(want_len)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert r.stdout.readline() == "connected\n"
        c = SD.accept(lst)
        want = forged(c, base, how)
        out, err = r.communicate("go\n", timeout=30)
    finally:
        if r.poll() is None:
            r.kill()
    assert r.returncode == 0, err
    lines = out.split()
    assert lines == [str(len(want)), str(zlib.crc32(want)), "ECONNRESET"]
    m.close()
    for x in (c, lst, pool_owner):
        x.close()


# ---- memory -------------------------------------------------------------------

CG = "/sys/fs/cgroup/sdzc"

# Runs in the cgroup: imports only what it needs (no pytest), all of it
# before it joins.
CG_PROG = textwrap.dedent("""
    import ctypes, fcntl, mmap, os, struct, sys
    sys.path.insert(0, %r)
    from sdsock import Family, errname
    PAGE, ZC_DONTWAIT = mmap.PAGESIZE, 2
    def pool(s, pages):
        m = mmap.mmap(s.fileno(), pages * PAGE, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=0x40000000)
        c = ctypes.c_char.from_buffer(m)
        a = ctypes.addressof(c)
        del c
        return m, a
    def zc_send(s, addr, length, flags=0):
        buf = bytearray(struct.pack("QQQII", addr, length, 0, flags, 0))
        fcntl.ioctl(s, %d, buf, True)
    def errno_of(fn, *args):
        try:
            fn(*args)
        except OSError as e:
            return e.errno
        return 0
    with open(%r + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    sd = Family("sd")
    c = sd.socket()
    assert sd.connect(c, "127.0.0.1", int(sys.argv[1])) == "OK"
    m, base = pool(c, 8192)                  # 32 MiB of pool
    if sys.argv[2] == "untouched":
        # Every page must be made: more than the cgroup may have.  The
        # pages made stay the pool's until it goes.
        e = errno_of(zc_send, c, base, 16 << 20)
        m.close()
        print(errname(e))
        print("alive")
    else:
        m[:] = b"q" * len(m)                 # 32 MiB charged here
        seqs = [zc_send(c, base + i * (8 << 20), 8 << 20, ZC_DONTWAIT)
                for i in range(4)]
        print(len(seqs), "queued")
        # The queue is capped at 64 MiB: the same pages again, then no more.
        more = 0
        while errno_of(zc_send, c, base, 8 << 20, ZC_DONTWAIT) == 0:
            more += 1
        print(more, "more")
    sys.stdout.flush()
    os._exit(0)                              # pages queued, no records
""")


def cg_prog():
    return CG_PROG % (HERE, IOC_ZC_SEND, CG)


def memory_current():
    with open(CG + "/memory.current") as f:
        return int(f.read())


@pytest.fixture
def memcg():
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    os.makedirs(CG, exist_ok=True)
    try:
        yield CG
    finally:
        wait_for(lambda: not open(CG + "/cgroup.procs").read().strip())
        os.rmdir(CG)


def test_zc_send_in_a_small_memory_cgroup_fails_cleanly(memcg, no_leak):
    with open(CG + "/memory.max", "w") as f:
        f.write(str(12 << 20))
    lst, port = SD.listener()
    r = subprocess.run([sys.executable, "-c", cg_prog(),
                        str(port), "untouched"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ENOMEM", "alive"]
    lst.close()


def test_pages_queued_by_a_sender_that_exits_come_back(memcg, no_leak):
    """32 MiB queued four times over (the 64 MiB cap), then the sender
    exits without writing a record: while the other end is open the pages
    stay charged to the sender's cgroup; when it closes they are freed."""
    lst, port = SD.listener()
    r = subprocess.Popen([sys.executable, "-c", cg_prog(),
                          str(port), "touched"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    s = SD.accept(lst)
    out, err = r.communicate(timeout=120)
    assert r.returncode == 0, err
    assert out.split() == ["4", "queued", "4", "more"]
    assert memory_current() > 24 << 20
    # Nothing readable: the records never came.  EOF, not the pages.
    assert s.recv(PAGE) == b""
    s.close()
    lst.close()
    assert wait_for(lambda: memory_current() < 4 << 20, timeout=10), \
        f"{memory_current()} bytes still charged"
