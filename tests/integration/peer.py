"""The other test host of a pair (tests/vm/pair).

Guest B runs the agent; tests in guest A drive it through class Peer:

    python3 peer.py serve ADDR PORT     the agent (guest B)
    python3 peer.py wait                wait until the agent answers
    python3 peer.py quit                stop the agent (guest B powers off)

Guest A learns where the agent is from SD_PEER_AGENT (ADDR:PORT) and its
own and the peer's link addresses from SD_PEER_LOCAL and SD_PEER_REMOTE;
tests/vm/pair sets all three.  Without them Peer.available() is False.

The protocol is one JSON object per line over TCP; each connection carries
one request:

    {"op": "run", "argv": [...], "env": {...}, "timeout": S}
        -> {"rc": N, "stdout": "...", "stderr": "..."}
    {"op": "spawn", "argv": [...], "env": {...}}
        -> {"pid": N}, then {"out": LINE} for each line the process
           prints, then {"rc": N, "stderr": "..."} when it exits.
           Closing the connection kills the process (SIGKILL).
    {"op": "quit"} -> {"ok": true}, and the agent exits.

The agent runs every command as root in the tree (both guests mount it at
the same path), with the environment of the agent plus "env".  It trusts
its client: it listens only on the private link between the two guests.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def _lines(sock):
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            if buf:
                yield json.loads(buf)
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


# ---- the agent (guest B) ---------------------------------------------------

def _env(extra):
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def _serve_one(conn, stop):
    with conn:
        try:
            req = next(_lines(conn))
        except (StopIteration, ValueError, OSError):
            return
        op = req.get("op")
        if op == "quit":
            _send(conn, {"ok": True})
            stop.set()
            return
        if op == "run":
            try:
                p = subprocess.run(req["argv"], env=_env(req.get("env")),
                                   cwd=TOP, capture_output=True, text=True,
                                   timeout=req.get("timeout", 300))
                _send(conn, {"rc": p.returncode, "stdout": p.stdout,
                             "stderr": p.stderr})
            except (OSError, subprocess.TimeoutExpired) as e:
                _send(conn, {"rc": -1, "stdout": "", "stderr": str(e)})
            return
        if op != "spawn":
            _send(conn, {"error": f"unknown op {op!r}"})
            return
        try:
            p = subprocess.Popen(req["argv"], env=_env(req.get("env")),
                                 cwd=TOP, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        except OSError as e:
            _send(conn, {"rc": -1, "stderr": str(e)})
            return
        _send(conn, {"pid": p.pid})

        def watch_client():
            # The client hung up: the process goes too.
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            if p.poll() is None:
                p.kill()

        threading.Thread(target=watch_client, daemon=True).start()
        try:
            for line in p.stdout:
                _send(conn, {"out": line.rstrip("\n")})
            err = p.stderr.read()
            _send(conn, {"rc": p.wait(), "stderr": err})
        except OSError:
            p.kill()
            p.wait()


def serve(addr, port):
    stop = threading.Event()
    lst = socket.create_server((addr, port), reuse_port=False)
    lst.settimeout(0.5)
    print(f"peer: agent on {addr}:{port}", file=sys.stderr, flush=True)
    while not stop.is_set():
        try:
            conn, _ = lst.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        threading.Thread(target=_serve_one, args=(conn, stop),
                         daemon=True).start()
    return 0


# ---- the client (guest A) --------------------------------------------------

class Spawned:
    """A process on the peer: its output lines as they come, its end."""

    def __init__(self, sock, pid):
        self.sock = sock
        self.pid = pid
        self._lines = _lines(sock)
        self.rc = None
        self.stderr = ""

    def readline(self, timeout=60):
        """The next line the process printed (None once it has exited)."""
        self.sock.settimeout(timeout)
        for msg in self._lines:
            if "out" in msg:
                return msg["out"]
            self.rc, self.stderr = msg["rc"], msg.get("stderr", "")
            return None
        return None

    def wait(self, timeout=60):
        """Its exit status; the lines it printed meanwhile are dropped."""
        while self.rc is None:
            if self.readline(timeout) is None and self.rc is None:
                raise ConnectionError("the agent hung up")
        return self.rc

    def kill(self):
        """SIGKILL it, by hanging up on the agent."""
        self.sock.close()


class Peer:
    def __init__(self):
        host, port = os.environ["SD_PEER_AGENT"].rsplit(":", 1)
        self.agent = (host, int(port))
        self.local = os.environ["SD_PEER_LOCAL"]
        self.remote = os.environ["SD_PEER_REMOTE"]

    @staticmethod
    def available():
        return all(k in os.environ for k in
                   ("SD_PEER_AGENT", "SD_PEER_LOCAL", "SD_PEER_REMOTE"))

    def _request(self, req, timeout):
        s = socket.create_connection(self.agent, timeout=timeout)
        _send(s, req)
        return s

    def run(self, argv, env=None, timeout=300):
        with self._request({"op": "run", "argv": argv, "env": env or {},
                            "timeout": timeout}, timeout + 10) as s:
            return next(_lines(s))

    def spawn(self, argv, env=None):
        s = self._request({"op": "spawn", "argv": argv, "env": env or {}},
                          30)
        first = next(_lines(s))
        if "pid" not in first:
            s.close()
            raise OSError(f"peer could not start {argv}: {first}")
        return Spawned(s, first["pid"])


def main(argv):
    if len(argv) == 3 and argv[0] == "serve":
        return serve(argv[1], int(argv[2]))
    if argv == ["wait"] or argv == ["quit"]:
        peer = Peer()
        deadline = time.monotonic() + 600
        while True:
            try:
                s = socket.create_connection(peer.agent, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    print("peer: the agent never answered", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        if argv == ["quit"]:
            _send(s, {"op": "quit"})
            next(_lines(s), None)
        s.close()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
