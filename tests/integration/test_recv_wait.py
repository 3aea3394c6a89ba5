"""SD_IOC_RECV_WAIT (include/uapi/linux/sd.h): a receive's sleep that a
second file ends too, for a thread that moves bytes in user space on
another file's events and must wake for the socket's too.  Its answers, its bounds (SO_RCVTIMEO,
O_NONBLOCK, signals), its refusals, and the wait flag it takes back."""
import errno
import fcntl
import mmap
import os
import select
import signal
import socket
import struct
import threading
import time

import pytest

from sdsock import Family

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
IOC_RECV_WAIT = (1 << 30) | (4 << 16) | (0x53 << 8) | 0xDD


def recv_wait(s, other):
    """The ioctl's return value (OSError on failure)."""
    arg = bytearray(struct.pack("i", other))
    return fcntl.ioctl(s.fileno(), IOC_RECV_WAIT, arg, True)


def errno_of(s, other):
    with pytest.raises(OSError) as e:
        recv_wait(s, other)
    return errno.errorcode[e.value.errno]


def later(delay, fn):
    t = threading.Timer(delay, fn)
    t.start()
    return t


@pytest.fixture
def conn(no_leak):
    c, s, lst = SD.pair()
    r, w = os.pipe()
    yield c, s, r, w
    for x in (c, s, lst):
        x.close()
    os.close(r)
    os.close(w)


def test_returns_1_at_once_when_the_socket_has_data(conn):
    c, s, r, _ = conn
    c.sendall(b"x")
    assert recv_wait(s, r) == 1
    assert s.recv(1) == b"x"


def test_returns_0_at_once_when_the_other_file_is_readable(conn):
    c, s, r, w = conn
    os.write(w, b"e")
    assert recv_wait(s, r) == 0


def test_sleeps_until_data_comes(conn):
    c, s, r, _ = conn
    t0 = time.monotonic()
    t = later(0.3, lambda: c.sendall(b"late"))
    assert recv_wait(s, r) == 1
    assert time.monotonic() - t0 >= 0.25
    t.join()
    assert s.recv(4) == b"late"


def test_sleeps_until_the_other_file_is_readable(conn):
    c, s, r, w = conn
    t0 = time.monotonic()
    t = later(0.3, lambda: os.write(w, b"e"))
    assert recv_wait(s, r) == 0
    assert time.monotonic() - t0 >= 0.25
    t.join()


def test_the_end_of_the_stream_ends_it(conn):
    c, s, r, _ = conn
    t = later(0.2, c.close)
    assert recv_wait(s, r) == 1
    t.join()
    assert s.recv(1) == b""


def test_so_rcvtimeo_bounds_it(conn):
    c, s, r, _ = conn
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
    t0 = time.monotonic()
    assert errno_of(s, r) == "EAGAIN"
    assert 0.25 <= time.monotonic() - t0 < 5


def test_a_nonblocking_socket_does_not_sleep(conn):
    c, s, r, _ = conn
    s.setblocking(False)
    t0 = time.monotonic()
    assert errno_of(s, r) == "EAGAIN"
    assert time.monotonic() - t0 < 1


class Alarm(Exception):
    pass


def test_a_signal_ends_it(conn):
    c, s, r, _ = conn

    def handler(sig, frame):
        raise Alarm()
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        with pytest.raises(Alarm):
            recv_wait(s, r)
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # Nothing was taken or left behind: the socket still works.
    c.sendall(b"y")
    assert recv_wait(s, r) == 1 and s.recv(1) == b"y"


def test_refusals(conn, tmp_path):
    c, s, r, w = conn
    assert errno_of(s, 1 << 20) == "EBADF"
    assert errno_of(s, -1) == "EBADF"
    assert errno_of(s, s.fileno()) == "EINVAL"
    # A regular file cannot be waited on; a FIFO open both ways has two
    # wait queues, of which one entry would miss the other's wakes.
    f = tmp_path / "plain"
    f.write_bytes(b"")
    fd = os.open(f, os.O_RDONLY)
    try:
        assert errno_of(s, fd) == "EINVAL"
    finally:
        os.close(fd)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)
    try:
        assert errno_of(s, fd) == "EINVAL"
    finally:
        os.close(fd)
    # Only a connected socket waits.
    lone = SD.socket()
    lst, _ = SD.listener()
    try:
        assert errno_of(lone, r) == "ENOTCONN"
        assert errno_of(lst, r) == "ENOTCONN"
    finally:
        lone.close()
        lst.close()
    # None of it harmed the connection.
    c.sendall(b"z")
    assert recv_wait(s, r) == 1 and s.recv(1) == b"z"


def test_many_waits_leave_nothing_behind(conn):
    """Each wait unhooks itself from both queues: many waits, then wakes
    through both files, then the module's unload (the harness's rmmod)."""
    c, s, r, w = conn
    for i in range(200):
        if i % 2:
            os.write(w, b"e")
            assert recv_wait(s, r) == 0
            os.read(r, 1)
        else:
            c.sendall(b"d")
            assert recv_wait(s, r) == 1
            assert s.recv(1) == b"d"


READER_WAIT = 1


def rx_cons_flags(s):
    """s's receive ring's consumer flags, read through a mapping."""
    from test_sd_specific import offsets
    _, rx = offsets(s)
    m = mmap.mmap(s.fileno(), rx["mmap_len"], mmap.MAP_SHARED, mmap.PROT_READ,
                  offset=0x80000000)
    try:
        return struct.unpack_from("I", m, rx["cons_flags"])[0]
    finally:
        m.close()


def test_woken_by_the_other_file_it_takes_the_flag_back(conn):
    """The caller moves what woke it into the ring itself: no writer need
    wake anyone for it, so the flag the wait armed is cleared ..."""
    c, s, r, w = conn
    os.write(w, b"e")
    assert recv_wait(s, r) == 0
    assert not rx_cons_flags(s) & READER_WAIT
    os.read(r, 1)
    # ... and set again by the next wait, which a writer then ends.
    t = later(0.2, lambda: c.sendall(b"d"))
    assert recv_wait(s, r) == 1
    t.join()
    assert s.recv(1) == b"d"


def test_the_flag_stays_for_another_sleeper(conn):
    """... unless someone else relies on it: a thread asleep in poll on
    the socket, which the writer must still wake."""
    c, s, r, w = conn
    woke = []
    p = select.poll()
    p.register(s, select.POLLIN)
    t = threading.Thread(target=lambda: woke.append(p.poll(10000)))
    t.start()
    time.sleep(0.3)
    os.write(w, b"e")
    assert recv_wait(s, r) == 0
    assert rx_cons_flags(s) & READER_WAIT
    c.sendall(b"d")
    t.join(10)
    assert woke and woke[0] and woke[0][0][1] & select.POLLIN
    assert s.recv(1) == b"d"


@pytest.mark.parametrize("how", ["epoll", "O_ASYNC"])
def test_the_flag_stays_for_epoll_and_sigio(conn, how):
    """An epoll entry on the socket, or O_ASYNC (SIGIO comes with every
    wake-up), keeps it too."""
    c, s, r, w = conn
    if how == "epoll":
        ep = select.epoll()
        ep.register(s, select.EPOLLIN | select.EPOLLET)
    else:
        old = signal.signal(signal.SIGIO, signal.SIG_IGN)
        fcntl.fcntl(s, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(s, fcntl.F_SETFL, fcntl.fcntl(s, fcntl.F_GETFL) | os.O_ASYNC)
    try:
        os.write(w, b"e")
        assert recv_wait(s, r) == 0
        assert rx_cons_flags(s) & READER_WAIT
    finally:
        if how == "epoll":
            ep.close()
        else:
            fcntl.fcntl(s, fcntl.F_SETFL, fcntl.fcntl(s, fcntl.F_GETFL) & ~os.O_ASYNC)
            signal.signal(signal.SIGIO, old)
