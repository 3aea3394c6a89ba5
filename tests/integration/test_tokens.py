"""Token handover between the kernel's path and a process that drives a
ring side itself (what libsd does), following "Tokens" in
include/uapi/linux/sd.h.  The owner here is Python writing the mapped
ring by hand, so every step of the protocol is visible."""
import ctypes
import errno
import fcntl
import mmap
import os
import socket
import struct
import time

import pytest

from sdsock import Family
from test_sd_specific import offsets

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
TX, RX = 0, 1
IOC_ACQUIRE = (3 << 30) | (32 << 16) | (0x53 << 8) | 0xD1
IOC_RELEASE = (1 << 30) | (4 << 16) | (0x53 << 8) | 0xD2
IOC_WAKE = (1 << 30) | (4 << 16) | (0x53 << 8) | 0xD3
IOC_SEND_WAIT = (1 << 30) | (4 << 16) | (0x53 << 8) | 0xE1
READER_WAIT = 1


def acquire(s, d, busy=0):
    """SD_IOC_ACQUIRE; busy: the address of the caller's busy count."""
    buf = bytearray(struct.pack("IIQIIQ", d, 0, 0, 0, 0, busy))
    fcntl.ioctl(s, IOC_ACQUIRE, buf, True)
    _, token, pos, off, _, _ = struct.unpack("IIQIIQ", buf)
    return token, pos, off


class Owner:
    """A hand-made producer or consumer of one ring side."""

    def __init__(self, s, d):
        self.s, self.d = s, d
        tx, rx = offsets(s)
        self.o = tx if d == TX else rx
        self.m = mmap.mmap(s.fileno(), self.o["mmap_len"], mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE,
                           offset=0 if d == TX else 0x80000000)
        # The busy count lives in this process's memory, where the
        # kernel reads it (never in the ring, which the peer maps too).
        self.count = ctypes.c_uint32(0)
        self.token, self.pos, self.off = acquire(s, d,
                                                 ctypes.addressof(self.count))

    def u32(self, key, value=None):
        if value is None:
            return struct.unpack_from("I", self.m, self.o[key])[0]
        struct.pack_into("I", self.m, self.o[key], value)

    def u64(self, key, value=None):
        if value is None:
            return struct.unpack_from("Q", self.m, self.o[key])[0]
        struct.pack_into("Q", self.m, self.o[key], value)

    def busy(self, value=None):
        """The owner's busy count (struct sd_token.busy)."""
        if value is None:
            return self.count.value
        self.count.value = value

    def mine(self):
        return self.u32("prod_token" if self.d == TX else "cons_token") == \
            self.token

    def write(self, payload, flags=1):
        """One record, by the rules; returns False if the token is gone."""
        self.busy(1)
        if not self.mine():
            self.busy(0)
            return False
        at = self.o["data"] + (self.pos % self.o["size"])
        self.m[at + 8:at + 8 + len(payload)] = payload
        struct.pack_into("II", self.m, at, len(payload), flags)
        self.pos += 8 + (len(payload) + 7) // 8 * 8
        self.u64("prod_pos", self.pos)
        self.busy(0)
        if self.u32("cons_flags") & READER_WAIT:
            fcntl.ioctl(self.s, IOC_WAKE, struct.pack("I", TX))
        return True

    def read(self, n):
        """Up to n bytes of the record at head, by the rules."""
        self.busy(1)
        assert self.mine()
        at = self.o["data"] + (self.pos % self.o["size"])
        length, flags = struct.unpack_from("II", self.m, at)
        take = min(n, length - self.off)
        data = bytes(self.m[at + 8 + self.off:at + 8 + self.off + take])
        self.off += take
        if self.off == length:
            space = 8 + (length + 7) // 8 * 8
            self.m[at:at + space] = bytes(space)
            self.pos += space
            self.off = 0
        self.u64("cons_pos", self.pos)
        self.u32("cons_off", self.off)
        self.busy(0)
        return data


def test_user_producer_and_kernel_interleave_in_order(no_leak):
    c, s, lst = SD.pair()
    c.send(b"k1")                       # the kernel's record
    own = Owner(c, TX)
    assert own.pos == 16                # goes on after it
    assert own.write(b"u1")
    assert c.send(b"k2") == 2           # takes the side back, checks it
    assert not own.mine()
    assert own.write(b"late") is False  # the old owner finds out
    assert s.recv(100) == b"k1u1k2"
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_user_consumer_mid_record_then_kernel(no_leak):
    c, s, lst = SD.pair()
    c.sendall(b"abcdefgh")
    c.sendall(b"ijk")
    own = Owner(s, RX)
    assert own.read(3) == b"abc"        # part of a record
    assert s.recv(100) == b"defghijk"   # the kernel goes on from there
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_kernel_reader_is_woken_by_user_writer(no_leak):
    c, s, lst = SD.pair()
    own = Owner(c, TX)
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)                 # let the parent fall asleep
        os._exit(0 if own.write(b"wake") else 1)
    s.settimeout(None)
    assert s.recv(10) == b"wake"        # woken through SD_IOC_WAKE
    assert os.waitpid(pid, 0)[1] == 0
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_poll_sees_a_user_owned_consumer(no_leak):
    c, s, lst = SD.pair()
    own = Owner(s, RX)
    c.send(b"x")
    import select
    assert select.select([s], [], [], 2)[0] == [s]
    assert own.read(1) == b"x"
    assert select.select([s], [], [], 0)[0] == []
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_forked_child_takes_over_an_idle_parent(no_leak):
    c, s, lst = SD.pair()
    own = Owner(c, TX)
    assert own.write(b"parent;")
    pid = os.fork()
    if pid == 0:
        child = Owner(c, TX)            # takes it from the parent
        ok = child.pos == own.pos and child.write(b"child;")
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert not own.mine()
    assert c.send(b"kernel") == 6
    assert s.recv(100) == b"parent;child;kernel"
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_busy_owner_is_waited_for(no_leak):
    c, s, lst = SD.pair()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        # Another process owns the side and is mid-call: busy for 0.3 s,
        # then a record, then done.
        own = Owner(c, TX)
        own.busy(1)
        os.write(w, b"x")
        time.sleep(0.3)
        at = own.o["data"] + own.pos % own.o["size"]
        own.m[at + 8:at + 12] = b"slow"
        struct.pack_into("II", own.m, at, 4, 1)
        own.u64("prod_pos", own.pos + 16)
        own.busy(0)
        os._exit(0)
    os.read(r, 1)
    t0 = time.monotonic()
    assert c.send(b"next") == 4         # waits for the busy call
    assert time.monotonic() - t0 >= 0.2
    assert s.recv(100) == b"slownext"
    os.waitpid(pid, 0)
    for x in (c, s, lst):
        x.close()


def test_wait_for_a_lying_busy_owner_keeps_the_timeout(no_leak):
    """An owner that stays alive with its busy count up (a lie, or a stale
    count) holds the side; a sharer's send with SO_SNDTIMEO gets EAGAIN
    when the timeout is up, as any blocked send would, instead of
    waiting for the owner to exit."""
    c, s, lst = SD.pair()
    r, w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        own = Owner(c, TX)
        own.busy(1)
        os.write(w, b"x")
        os.read(done_r, 1)
        own.busy(0)
        os._exit(0)
    os.read(r, 1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 0, 200000))
    t0 = time.monotonic()
    with pytest.raises(BlockingIOError):
        c.send(b"late")
    took = time.monotonic() - t0
    assert 0.15 <= took < 5, took
    os.write(done_w, b"x")
    os.waitpid(pid, 0)
    assert c.send(b"now") == 3          # the owner is gone
    assert s.recv(10) == b"now"
    for x in (c, s, lst):
        x.close()


def test_a_thread_of_the_owner_waits_for_its_call(no_leak):
    """The owner's own process gets no shortcut: a system call from
    another of its threads (a raw syscall, a dup()ed descriptor) waits for
    the call in flight like anyone's, or its bytes would land where the
    owner's copy is writing."""
    c, s, lst = SD.pair()
    own = Owner(c, TX)                  # this process drives the side
    assert own.write(b"first")
    own.busy(1)             # ... and is mid-call
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 0, 200000))
    with pytest.raises(BlockingIOError):
        c.send(b"late")                 # waited, then SO_SNDTIMEO
    own.busy(0)
    assert c.send(b"next") == 4
    assert s.recv(100) == b"firstnext"
    own.m.close()
    for x in (c, s, lst):
        x.close()


def test_a_busy_count_left_by_an_image_that_exec_ed_holds_nobody(no_leak):
    """A process that exec()s with a call in flight (another of its
    threads killed mid-call) leaves busy up for good: the kernel takes the
    side back without waiting once the owner's image is gone, even while
    the process lives on."""
    c, s, lst = SD.pair()
    r, w = os.pipe()                    # w is close-on-exec: EOF at exec
    pid = os.fork()
    if pid == 0:
        os.close(r)
        own = Owner(c, TX)
        assert own.write(b"mine")
        own.busy(1)
        os.execv("/bin/sleep", ["sleep", "60"])
    os.close(w)
    assert os.read(r, 1) == b""         # the child's exec happened
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 5, 0))
    try:
        assert c.send(b"+") == 1        # not EAGAIN after 5 s
        assert s.recv(100) == b"mine+"
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    for x in (c, s, lst):
        x.close()


def send_wait(sock, d=TX):
    fcntl.ioctl(sock, IOC_SEND_WAIT, struct.pack("I", d))


def test_send_wait_sleeps_for_room_holding_the_side(no_leak):
    """SD_IOC_SEND_WAIT, libsd's sleep for room mid-send: only for the
    producer side the caller's process drives, it returns at once when
    there is room, sleeps without giving the side back while the ring is
    full, and ends with SO_SNDTIMEO (EAGAIN) or when the peer is gone
    (EPIPE)."""
    c, s, lst = SD.pair()
    for d in (RX, 2, 0xFFFFFFFF):
        with pytest.raises(OSError) as e:
            send_wait(c, d)
        assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        send_wait(c)                    # the kernel drives the side
    assert e.value.errno == errno.EBUSY
    u = SD.socket()
    with pytest.raises(OSError) as e:
        send_wait(u)
    assert e.value.errno == errno.ENOTCONN
    own = Owner(c, TX)
    send_wait(c)                        # room: at once
    chunk = b"x" * 4000
    while own.pos + 4008 - own.u64("consumer") <= own.o["size"]:
        assert own.write(chunk)
    free = own.o["size"] - (own.pos - own.u64("consumer"))
    assert own.write(b"y" * (free - 8))  # not a byte left
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 0, 200000))
    with pytest.raises(BlockingIOError):
        send_wait(c)                    # full: the timeout
    assert own.mine()                   # still ours
    # Room comes: the reader takes over half the ring, which publishes
    # its credit (the consumer does so lazily until then).
    took = 0
    while took <= own.o["size"] // 2:
        took += len(s.recv(65536))
    send_wait(c)
    assert own.mine()
    s.close()                           # the peer is gone: no wait
    with pytest.raises(OSError) as e:
        send_wait(c)
    assert e.value.errno == errno.EPIPE
    own.m.close()
    for x in (c, lst, u):
        x.close()


def test_dead_busy_owner_does_not_hang_the_kernel(no_leak):
    c, s, lst = SD.pair()
    pid = os.fork()
    if pid == 0:
        child = Owner(c, TX)
        child.write(b"mine")
        child.busy(1)       # dies in the middle of a call
        os._exit(0)
    os.waitpid(pid, 0)
    assert c.send(b"+") == 1
    assert s.recv(100) == b"mine+"
    # The count the child left up holds nobody after it: this process
    # owns the side next (another busy word), and its own system call
    # then takes it back at once.
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                 struct.pack("ll", 2, 0))
    own = Owner(c, TX)
    assert own.write(b"own")
    assert c.send(b"!") == 1            # not EAGAIN after 2 s
    assert s.recv(100) == b"own!"
    own.m.close()
    for x in (c, s, lst):
        x.close()


@pytest.mark.parametrize("lie", ["past", "unaligned", "backwards",
                                 "beyond credit", "onto a record"])
def test_a_lying_owner_resets_only_its_connection(lie, no_leak):
    c, s, lst = SD.pair()
    c.send(b"k")
    own = Owner(c, TX)
    own.write(b"u")
    size = own.o["size"]
    bad = {"past": own.pos + size + 16, "unaligned": own.pos + 3,
           "backwards": 0, "beyond credit": own.pos + size,
           "onto a record": own.pos - 16}[lie]
    own.u64("prod_pos", bad)
    with pytest.raises(ConnectionResetError):
        c.send(b"x")
    other_c, other_s, _ = SD.pair()
    other_c.send(b"ok")
    assert other_s.recv(10) == b"ok"
    own.m.close()
    for x in (c, s, lst, other_c, other_s):
        x.close()


@pytest.mark.parametrize("lie", ["end of the ring", "unaligned", "far ahead"])
def test_views_of_a_lying_consumer_position(lie, no_leak):
    """poll, FIONREAD and close look at the position a libsd consumer
    published without taking the side back; a lie there (found by
    sd_fuzz: a header read past the end of the data area) must be
    harmless."""
    import select
    c, s, lst = SD.pair()
    c.send(b"data")
    own = Owner(s, RX)
    size = own.o["size"]
    bad = {"end of the ring": own.pos + size - 1, "unaligned": own.pos + 5,
           "far ahead": own.pos + (1 << 40) + 4}[lie]
    own.u64("cons_pos", bad)
    select.select([s], [s], [s], 0)
    struct.unpack("i", fcntl.ioctl(s, 0x541B, b"\0" * 4))
    own.m.close()
    s.close()               # close looks for unread data
    for x in (c, lst):
        x.close()
    other_c, other_s, other_l = SD.pair()
    other_c.send(b"ok")
    assert other_s.recv(10) == b"ok"
    for x in (other_c, other_s, other_l):
        x.close()


def test_a_tail_lying_forward_loses_only_the_liars_bytes(no_leak):
    c, s, lst = SD.pair()
    own = Owner(c, TX)
    own.write(b"seen")
    own.u64("prod_pos", own.pos + 64)      # a gap nobody wrote
    assert c.send(b"after the gap") == 13   # the kernel goes on there
    s.setblocking(False)
    assert s.recv(100) == b"seen"           # the reader stops at the gap
    with pytest.raises(BlockingIOError):
        s.recv(100)
    other_c, other_s, _ = SD.pair()
    other_c.send(b"ok")
    assert other_s.recv(10) == b"ok"
    own.m.close()
    for x in (c, s, lst, other_c, other_s):
        x.close()


def test_token_ioctls_reject_bad_input(no_leak):
    c, s, lst = SD.pair()
    for d in (2, 0xFFFFFFFF):
        with pytest.raises(OSError) as e:
            acquire(c, d)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(OSError) as e:
            fcntl.ioctl(c, IOC_WAKE, struct.pack("I", d))
        assert e.value.errno == errno.EINVAL
    for busy in (1, 2, 0x1003):             # a __u32 is aligned
        with pytest.raises(OSError) as e:
            acquire(c, TX, busy)
        assert e.value.errno == errno.EINVAL
    # An address that is not the caller's memory, or the kernel's: the
    # grant stands, and the count reads as 0 (a lie hurts only the liar).
    for busy in (0x1000, 0xFFFFFFFFFFFFF000):
        acquire(c, TX, busy)
        assert c.send(b"k") == 1
    assert s.recv(10) == b"kk"
    u = SD.socket()
    with pytest.raises(OSError) as e:
        acquire(u, TX)
    assert e.value.errno == errno.ENOTCONN
    fcntl.ioctl(c, IOC_RELEASE, struct.pack("I", TX))   # nothing to release
    for x in (c, s, lst, u):
        x.close()
