"""A victim for test_crash.py: one end of an AF_SD connection in a given
state, to be killed with SIGKILL.  Run plainly or under sdrun (libsd).

    crash_peer.py MODE PORT      connect to 127.0.0.1:PORT, print "ready",
                                 then MODE: idle, recv (asleep in recv),
                                 send_full (blocked on a full ring),
                                 send_loop (sending small messages for
                                 ever: under sdrun it mostly holds the
                                 send token, inside a call)
    crash_peer.py listener 0     listen, print the port, never accept
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdsock import Family  # noqa: E402

SD = Family("sd")


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
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
    time.sleep(3600)


main()
