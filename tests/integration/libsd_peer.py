"""Programs for test_libsd.py, run under sdrun (or not)."""
import os
import struct
import sys
import threading
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdsock import Family  # noqa: E402

SD = Family("sd")
HDR = struct.Struct("<IIII")        # writer, seq, len, crc


def message(writer, seq):
    n = 1 + (writer * 7919 + seq * 104729) % 3000
    body = bytes((writer + seq + i) & 0xFF for i in range(n))
    return HDR.pack(writer, seq, n, zlib.crc32(body)) + body


def check_stream(data, writers, each):
    """Every message whole, each writer's in order, none lost or doubled."""
    seen = {w: 0 for w in range(writers)}
    at = 0
    while at < len(data):
        w, seq, n, crc = HDR.unpack_from(data, at)
        body = data[at + HDR.size:at + HDR.size + n]
        assert w in seen and seq == seen[w], f"writer {w} seq {seq} at {at}"
        assert len(body) == n and zlib.crc32(body) == crc, f"torn at {at}"
        seen[w] += 1
        at += HDR.size + n
    assert all(v == each for v in seen.values()), seen


def read_all(s):
    chunks = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def shared(mode, writers, each):
    c, s, lst = SD.pair()
    if mode == "threads":
        def run(w):
            for i in range(each):
                c.sendall(message(w, i))
        ts = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
        for t in ts:
            t.start()
        got = []
        rt = threading.Thread(target=lambda: got.append(read_all(s)))
        rt.start()
        for t in ts:
            t.join()
    else:
        pids = []
        for w in range(writers):
            pid = os.fork()
            if pid == 0:
                for i in range(each):
                    c.sendall(message(w, i))
                os._exit(0)
            pids.append(pid)
        got = []
        rt = threading.Thread(target=lambda: got.append(read_all(s)))
        rt.start()
        for pid in pids:
            assert os.waitpid(pid, 0)[1] == 0
    c.shutdown(socket_SHUT_WR())
    rt.join()
    check_stream(got[0], writers, each)
    print(len(got[0]))


def socket_SHUT_WR():
    import socket
    return socket.SHUT_WR


def sender(n):
    """n 8-byte sends; the reader reads only after (so it never sleeps)."""
    lst, port = SD.listener()
    pid = os.fork()
    if pid == 0:
        c = SD.socket()
        SD.connect(c, "127.0.0.1", port)
        for i in range(n):
            c.send(struct.pack("<Q", i))
        c.close()
        os._exit(0)
    s = SD.accept(lst)
    os.waitpid(pid, 0)
    data = read_all(s)
    assert data == b"".join(struct.pack("<Q", i) for i in range(n))
    print(len(data))


def addressed(n):
    """n round trips of 8 bytes as sockperf makes them: sendto with the
    peer's address and MSG_NOSIGNAL on the connected socket, recvfrom with
    an address buffer and MSG_NOSIGNAL, which gets no address (length 0,
    as TCP gives)."""
    import ctypes
    import socket
    libc = ctypes.CDLL(None, use_errno=True)
    nosig = socket.MSG_NOSIGNAL
    lst, port = SD.listener()
    pid = os.fork()
    if pid == 0:
        side, first = SD.socket(), True
        SD.connect(side, "127.0.0.1", port)
    else:
        side, first = SD.accept(lst), False
    to = struct.pack("<HH4s8x", socket.AF_INET, socket.htons(port),
                     socket.inet_aton("127.0.0.1"))
    buf = ctypes.create_string_buffer(8)
    frm = ctypes.create_string_buffer(128)
    flen = ctypes.c_uint32()
    for i in range(n):
        msg = struct.pack("<Q", i)
        if first:
            assert libc.sendto(side.fileno(), msg, 8, nosig, to, len(to)) == 8
        flen.value = 128
        got = libc.recvfrom(side.fileno(), buf, 8, nosig, frm, ctypes.byref(flen))
        assert got == 8 and buf.raw == msg, (i, got, ctypes.get_errno())
        assert flen.value == 0, flen.value
        if not first:
            assert libc.sendto(side.fileno(), msg, 8, nosig, to, len(to)) == 8
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    print(n)


def nullbuf():
    """A null buffer with a length, on a connection with bytes to read:
    EFAULT from send, recv and recvfrom, with MSG_NOSIGNAL and without,
    and the bytes are still there after."""
    import ctypes
    import socket
    libc = ctypes.CDLL(None, use_errno=True)
    c, s, lst = SD.pair()
    c.sendall(b"abc")
    for flags in (0, socket.MSG_NOSIGNAL, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL):
        for call in (lambda: libc.send(c.fileno(), None, 10, flags),
                     lambda: libc.recv(s.fileno(), None, 10, flags),
                     lambda: libc.recvfrom(s.fileno(), None, 10, flags, None, None)):
            ctypes.set_errno(0)
            assert call() == -1 and ctypes.get_errno() == 14, ctypes.get_errno()
    assert s.recv(10) == b"abc"
    print("ok")


def wait_readable(how, s, ep):
    import select
    if how == "poll":
        p = select.poll()
        p.register(s, select.POLLIN)
        assert p.poll(10000), "poll timed out"
    elif how == "select":
        assert select.select([s], [], [], 10)[0], "select timed out"
    else:
        assert ep.poll(10), "epoll timed out"


def pingpong(how, n):
    """n round trips of 8 bytes between two processes on non-blocking
    sockets, each waiting for readiness with how (poll, select, epoll)."""
    import select
    lst, port = SD.listener()
    pid = os.fork()
    if pid == 0:
        c = SD.socket()
        SD.connect(c, "127.0.0.1", port)
        side, first = c, True
    else:
        side, first = SD.accept(lst), False
    side.setblocking(False)
    ep = None
    if how == "epoll":
        ep = select.epoll()
        ep.register(side, select.EPOLLIN)
    for i in range(n):
        if first:
            side.send(struct.pack("<Q", i))
        wait_readable(how, side, ep)
        got = side.recv(8)
        assert got == struct.pack("<Q", i), (i, got)
        if not first:
            side.send(got)
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    print(n)


if __name__ == "__main__":
    if sys.argv[1] == "pingpong":
        pingpong(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    if sys.argv[1] == "shared":
        shared(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "nullbuf":
        nullbuf()
    elif sys.argv[1] == "addressed":
        addressed(int(sys.argv[2]))
    elif sys.argv[1] == "sender":
        sender(int(sys.argv[2]))
