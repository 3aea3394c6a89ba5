"""kill -9 of one end in each state leaves the other end with the end of
the stream (EOF) or ECONNRESET within a bounded time, and leaves no AF_SD
socket behind (no_leak).  The victim runs through system calls or under
sdrun (libsd, so that it dies owning ring sides, inside a call or
between calls)."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from sdsock import Family

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SDRUN = os.path.join(TOP, "build", "user", "lib", "shim", "sdrun")
PEER = os.path.join(HERE, "crash_peer.py")
SD = Family("sd")
BOUND = 5.0     # seconds the survivor may wait for the end


def spawn(mode, port, libsd):
    cmd = ([SDRUN] if libsd else []) + [sys.executable, PEER, mode, str(port)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return p


def until_end(s, drain=True):
    """Read until EOF or an error; return what ended it and the bytes."""
    s.settimeout(BOUND)
    got = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < BOUND + 30:
        try:
            b = s.recv(1 << 20)
        except ConnectionResetError:
            return "ECONNRESET", got
        except socket.timeout:
            return "TIMEOUT", got
        if not b:
            return "EOF", got
        got += len(b)
    return "TOO MUCH DATA", got


def send_fails(s):
    """A send after the peer died fails (EPIPE or ECONNRESET) within a few
    tries, as on TCP where the first may still be taken."""
    s.settimeout(BOUND)
    for _ in range(4):
        try:
            s.send(b"x", socket.MSG_NOSIGNAL)
        except (BrokenPipeError, ConnectionResetError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
@pytest.mark.parametrize("mode", ["idle", "recv", "send_full", "send_loop"])
def test_kill_one_end(mode, libsd, no_leak):
    lst, port = SD.listener()
    p = spawn(mode, port, libsd)
    try:
        s = SD.accept(lst)
        assert s.recv(5) == b"hello"
        assert p.stdout.readline().strip() == "ready"
        stop = threading.Event()
        drained = [0]
        if mode == "send_loop":
            # Keep reading, so the victim stays busy in its sends.
            def drain():
                s.settimeout(0.2)
                while not stop.is_set():
                    try:
                        b = s.recv(1 << 16)
                        if not b:
                            return
                        drained[0] += len(b)
                    except (socket.timeout, ConnectionResetError):
                        return
            th = threading.Thread(target=drain)
            th.start()
            time.sleep(0.5)
        else:
            time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        if mode == "send_loop":
            stop.set()
            th.join(10)
            assert drained[0] > 0, "the victim never sent"
        how, _ = until_end(s)
        assert how in ("EOF", "ECONNRESET"), f"{mode}: survivor saw {how}"
        assert time.monotonic() - t0 < BOUND + 5
        assert send_fails(s), f"{mode}: sends to a dead peer still succeed"
        s.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        lst.close()


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_kill_listener_with_queued_connections(libsd, no_leak):
    p = spawn("listener", 0, libsd)
    try:
        port = int(p.stdout.readline())
        clients = []
        for _ in range(3):
            c = SD.socket()
            assert SD.connect(c, "127.0.0.1", port) == "OK"
            clients.append(c)
        clients[0].sendall(b"never accepted")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        for c in clients:
            how, _ = until_end(c)
            assert how in ("EOF", "ECONNRESET"), how
            c.close()
        # The port is free again.
        again = SD.socket()
        assert SD.bind(again, "127.0.0.1", port) == "OK"
        again.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
