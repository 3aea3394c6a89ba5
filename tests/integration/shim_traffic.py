"""Socket traffic for test_shim.py, run with and without sdrun: the
transcript it prints (one JSON object) must be the same both ways.

usage: shim_traffic.py tcp|sd

Goes through most calls the shim intercepts: socket, bind, listen,
connect, accept4, send, recv, sendmsg, recvmsg, recv_into, read, write,
select, poll, epoll, fcntl, dup, dup2, fork, shutdown, close.
"""
import hashlib
import json
import os
import select
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdsock import Family  # noqa: E402


def recv_exactly(s, n):
    out = b""
    while len(out) < n:
        select.select([s], [], [], 10)
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def main(name):
    fam = Family(name)
    log = {}
    c, s, lst = fam.pair()

    c.sendall(b"hello")
    log["recv"] = recv_exactly(s, 5).decode()

    # A large transfer from another thread, read with select.
    data = bytes(range(256)) * 1024
    t = threading.Thread(target=c.sendall, args=(data,))
    t.start()
    got = recv_exactly(s, len(data))
    t.join()
    log["bulk"] = [len(got), hashlib.sha256(got).hexdigest()[:16]]

    s.sendmsg([b"ab", b"cd"])
    log["recvmsg"] = recv_exactly(c, 4).decode()
    c.sendmsg([b"xy"])
    msg, _, flags, _ = s.recvmsg(16)
    log["recvmsg2"] = [msg.decode(), flags]

    c.send(b"into")
    buf = bytearray(8)
    select.select([s], [], [], 10)
    log["recv_into"] = [s.recv_into(buf), bytes(buf[:4]).decode()]

    p = select.poll()
    p.register(s, select.POLLIN)
    log["poll_empty"] = p.poll(0)
    c.send(b"p")
    log["poll"] = [ev for _, ev in p.poll(10000)]
    log["poll_read"] = s.recv(1).decode()

    e = select.epoll()
    e.register(s.fileno(), select.EPOLLIN)
    c.send(b"e")
    log["epoll"] = [ev for _, ev in e.poll(10)]
    log["epoll_read"] = s.recv(1).decode()
    e.close()

    os.write(c.fileno(), b"w")
    select.select([s], [], [], 10)
    log["os_read"] = os.read(s.fileno(), 1).decode()

    d = os.dup(s.fileno())
    c.send(b"d")
    select.select([d], [], [], 10)
    log["dup_read"] = os.read(d, 1).decode()
    os.dup2(d, 90)
    os.close(d)
    c.send(b"2")
    select.select([90], [], [], 10)
    log["dup2_read"] = os.read(90, 1).decode()
    os.close(90)

    s.setblocking(False)
    try:
        s.recv(1)
        log["nonblock"] = "data"
    except BlockingIOError as err:
        log["nonblock"] = err.errno
    s.setblocking(True)

    pid = os.fork()
    if pid == 0:
        try:
            c.sendall(b"child")
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    log["fork"] = [recv_exactly(s, 5).decode(), status]

    c.shutdown(socket.SHUT_WR)
    log["eof"] = s.recv(1)
    log["eof"] = log["eof"].decode()
    s.sendall(b"after")
    log["half_closed"] = recv_exactly(c, 5).decode()

    for sock in (c, s, lst):
        sock.close()
    try:
        os.fstat(c.fileno())
        log["closed"] = "open"
    except (OSError, ValueError):
        log["closed"] = "closed"
    print(json.dumps(log, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
