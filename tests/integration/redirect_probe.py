"""What a program sees of its TCP sockets, for test_redirect.py: run it
plainly and under sdrun (net.sd.redirect=1) and the answers must be the
same.  Prints one JSON object; "redirected" says whether the sockets were
AF_SD underneath (the one question only AF_SD answers).

    python3 redirect_probe.py answers     socket API answers, v4 and v6
    python3 redirect_probe.py epoll PORT  epoll set before a non-blocking
                                          connect to a plain TCP server
    python3 redirect_probe.py echo PORT N asyncio echo client, N rounds
    python3 redirect_probe.py echod PORT  asyncio echo server (until EOF
                                          of stdin)
"""
import asyncio
import errno
import json
import os
import select
import socket
import sys

SOL_SD = 0x5344
SD_REDIRECTED = 3


def redirected(s):
    try:
        return s.getsockopt(SOL_SD, SD_REDIRECTED)
    except OSError as e:
        return errno.errorcode[e.errno]


def attempt(fn, *args):
    try:
        r = fn(*args)
        return r if not isinstance(r, bytes) else len(r)
    except OSError as e:
        return errno.errorcode[e.errno]


def tcp_info_state(s):
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return info[0]


def answers():
    out = {}
    for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        key = "v4" if fam == socket.AF_INET else "v6"
        s = socket.socket(fam, socket.SOCK_STREAM)
        r = {
            "redirected": redirected(s),
            "domain": s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN),
            "type": s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE),
            "protocol": s.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL),
            "unbound name": s.getsockname(),
            "peer unconnected": attempt(s.getpeername),
            "nodelay": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            "keepidle": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "keepidle 0": attempt(s.setsockopt, socket.IPPROTO_TCP,
                                  socket.TCP_KEEPIDLE, 0),
            "keepidle 77": attempt(s.setsockopt, socket.IPPROTO_TCP,
                                   socket.TCP_KEEPIDLE, 77),
            "keepidle now": s.getsockopt(socket.IPPROTO_TCP,
                                         socket.TCP_KEEPIDLE),
            "keepcnt": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "bad level": attempt(s.getsockopt, 0x7777, 1),
            "state unconnected": tcp_info_state(s),
        }
        if fam == socket.AF_INET6:
            r["v6only"] = s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        lst = socket.socket(fam, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((host, 0))
        lst.listen(4)
        port = lst.getsockname()[1]
        r["listener redirected"] = redirected(lst)
        r["acceptconn"] = lst.getsockopt(socket.SOL_SOCKET,
                                         socket.SO_ACCEPTCONN)
        r["listener state"] = tcp_info_state(lst)
        r["listener name port matches"] = lst.getsockname()[1] == port
        r["second bind same port"] = attempt(
            socket.socket(fam, socket.SOCK_STREAM).bind, (host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect((host, port))
        a, peer = lst.accept()
        r["accepted redirected"] = redirected(a)
        r["accepted domain"] = a.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
        r["peer matches"] = s.getsockname()[:2] == peer[:2]
        r["nodelay set"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        r["state connected"] = tcp_info_state(s)
        r["accepted state"] = tcp_info_state(a)
        s.sendall(b"ping")
        r["recv"] = a.recv(10).decode()
        r["connect again"] = attempt(s.connect, (host, port))
        s.close()
        r["eof"] = a.recv(10).decode()
        a.close()
        lst.close()
        out[key] = r
    print(json.dumps(out))


def epoll_before_connect(port):
    """A non-blocking connect with its epoll entry made first: the entry
    must hear about the connection whatever carries it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLIN)
    rc = s.connect_ex(("127.0.0.1", port))
    events = []
    for _ in range(50):
        evs = ep.poll(0.2)
        if evs:
            events = [e for _, e in evs]
            break
    s.setblocking(True)
    s.sendall(b"over epoll")
    reply = s.recv(100)
    print(json.dumps({"connect": errno.errorcode.get(rc, rc),
                      "woken": bool(events) and bool(events[0] & select.EPOLLOUT),
                      "reply": reply.decode(),
                      "domain": s.getsockopt(socket.SOL_SOCKET,
                                             socket.SO_DOMAIN)}))


async def echo_client(port, rounds):
    total = 0
    for conn in range(4):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(rounds):
            msg = f"{conn}:{i}:".encode() + b"x" * (i * 37 % 3000) + b"\n"
            writer.write(msg)
            await writer.drain()
            back = await reader.readline()
            assert back == msg.upper(), (back[:40], msg[:40])
            total += len(back)
        writer.close()
        await writer.wait_closed()
    print(json.dumps({"bytes": total}))


async def echo_server(port):
    async def handle(reader, writer):
        while line := await reader.readline():
            writer.write(line.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port,
                                        reuse_address=True)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()
    await server.wait_closed()


def main():
    what = sys.argv[1]
    if what == "answers":
        answers()
    elif what == "epoll":
        epoll_before_connect(int(sys.argv[2]))
    elif what == "echo":
        asyncio.run(echo_client(int(sys.argv[2]), int(sys.argv[3])))
    elif what == "echod":
        asyncio.run(echo_server(int(sys.argv[2])))
    else:
        raise SystemExit(f"unknown: {what}")


if __name__ == "__main__":
    main()
