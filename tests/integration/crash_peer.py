"""A victim for test_crash.py: one end of an AF_SD connection in a given
state, to be killed with SIGKILL.  Run plainly or under sdrun (libsd).

    crash_peer.py MODE PORT      connect to 127.0.0.1:PORT, print "ready",
                                 then MODE: idle, recv (asleep in recv),
                                 send_full (blocked on a full ring),
                                 send_loop (sending small messages for
                                 ever: under sdrun it mostly holds the
                                 send token, inside a call), shared
                                 (fork: the child, "holder PID", sends
                                 1 MiB in 8 KiB sends into the ring
                                 nobody reads and sleeps in a send
                                 holding the send side; then the
                                 parent, "sharer PID", sends 1000 bytes
                                 and b"END" and waits for the side;
                                 each prints "WHO sent" or "WHO error
                                 ERRNO" and then shuts its writing
                                 down)
    crash_peer.py connect PORT   print "connecting", connect (to a full
                                 backlog: it waits there), print the
                                 result
    crash_peer.py listener 0     listen, print the port, never accept
"""
import errno
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdsock import Family  # noqa: E402

SD = Family("sd")


def send_and_report(s, who, *data):
    try:
        for d in data:
            s.sendall(d)
        print(f"{who} sent", flush=True)
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        print(f"{who} error {errno.errorcode.get(e.errno, e.errno)}",
              flush=True)


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "connect":
        s = SD.socket()
        print("connecting", flush=True)
        print(SD.connect(s, "127.0.0.1", port), flush=True)
        time.sleep(3600)
    if mode == "listener":
        lst, port = SD.listener(backlog=8)
        print(port, flush=True)
        time.sleep(3600)
    s = SD.socket()
    rc = SD.connect(s, "127.0.0.1", port)
    assert rc == "OK", rc
    s.sendall(b"hello")            # the test reads it: the link works
    print("ready", flush=True)
    if mode == "idle":
        time.sleep(3600)
    elif mode == "recv":
        s.recv(10)
    elif mode == "send_full":
        s.sendall(b"F" * (64 << 20))
    elif mode == "send_loop":
        while True:
            s.send(b"L" * 64)
    elif mode == "shared":
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            print(f"holder {os.getpid()}", flush=True)
            os.write(w, b"x")
            # Sends below the zero-copy threshold: into the ring.
            send_and_report(s, "holder", *[b"H" * 8192] * 128)
            os._exit(0)
        os.read(r, 1)
        time.sleep(0.5)     # the holder fills the ring, asleep in its send
        print(f"sharer {os.getpid()}", flush=True)
        send_and_report(s, "sharer", b"S" * 1000 + b"END")
        os.waitpid(pid, 0)  # (killed, or done)
        sys.exit(0)
    time.sleep(3600)


main()
