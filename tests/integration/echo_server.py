"""A plain TCP echo server for the tests across hosts (pair_remote.py,
redirect_probe.py): python3 echo_server.py ADDR PORT.  Prints "ready" once it
listens, then echoes every connection, each in a thread, until killed."""
import socket
import sys
import threading


def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)


def main(addr, port):
    s = socket.create_server((addr, int(port)))
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main(*sys.argv[1:])
