"""What the suites across two hosts (tests/vm/pair) share: the peer host,
the settings of both, and a link daemon (sdlinkd) on each.

This guest is A; the peer guest B is driven through its agent
(peer.py, class Peer).  Every connection between them goes through the
daemons (Documentation/sdlinkd.rst): a redirected connect of A asks A's
sdlinkd, which asks B's, and a connection they agree on is carried by
RDMA writes between the two soft-RoCE devices (rxe0 on each guest's NIC).

Both suites (pair_remote.py, pair_differential.py) import from here."""
import json
import queue
import signal
import subprocess
import sys
import threading

import pytest

from conftest import SDCTL, TOP, sd_stats
from peer import Peer

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
SDLINKD = str(TOP / "build" / "user" / "tools" / "sdlinkd" / "sdlinkd")
KEY = bytes(range(1, 49))
OTHER_KEY = bytes(range(101, 149))
# Generous bounds on waits that end as soon as what they wait for comes.
WAIT = 120
# The kernel's bound on a connect's wait for the daemon's verdict, at its
# maximum: no verdict depends on how fast the guests run.
VERDICT_MS = 60000


@pytest.fixture(scope="module")
def peer():
    if not Peer.available():
        pytest.fail("no peer host: run this file through tests/vm/pair")
    return Peer()


def sysctl(key, value=None):
    """net.sd.KEY of this host: its value, after setting it to value."""
    path = f"/proc/sys/net/sd/{key}"
    if value is not None:
        with open(path, "w") as f:
            f.write(f"{value}\n")
    with open(path) as f:
        return f.read().strip()


def peer_sysctl(peer, key, value=None):
    cmd = f"cat /proc/sys/net/sd/{key}"
    if value is not None:
        cmd = f"echo {value} > /proc/sys/net/sd/{key} && " + cmd
    out = peer.run(["sh", "-c", cmd])
    assert out["rc"] == 0, out
    return out["stdout"].strip()


def sdctl_key(key, peer=None, none_ok=False):
    """Set (bytes) or clear (None) the fabric key of this host, or of
    peer's, with sdctl (key set -, key clear); none_ok: clearing no key
    is fine."""
    argv = [SDCTL, "key", "set", "-"] if key is not None else \
        [SDCTL, "key", "clear"]
    if peer is None:
        out = subprocess.run(argv, input=key, capture_output=True,
                             timeout=WAIT)
        assert out.returncode == 0 or none_ok and \
            b"no key is set" in out.stderr, out.stderr
        return
    code = ("import subprocess, sys; p = subprocess.run(sys.argv[1:], "
            f"input={key!r}); sys.exit(p.returncode)")
    out = peer.run([sys.executable, "-c", code] + argv)
    assert out["rc"] == 0 or none_ok and "no key is set" in out["stderr"], out


def stats(peer=None):
    """The module's counters of this host (over generic netlink), or of
    peer's (sdctl --json stats there)."""
    if peer is None:
        return sd_stats()
    out = peer.run([SDCTL, "--json", "stats"])
    assert out["rc"] == 0, out
    return json.loads(out["stdout"])


def delta(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items()
            if v != before.get(k, 0)}


def moved(before, after, prefixes=("fallback_", "link_")):
    """The counters of fallback reasons and of the daemons' work that
    moved from before to after."""
    return {k: v for k, v in delta(before, after).items()
            if k.startswith(prefixes)}


class Daemon:
    """One sdlinkd --verbose, here (peer None) or on peer; its log lines
    collected as they come (text()), for the test's output."""

    def __init__(self, peer, args, started=None):
        self.peer = peer
        self.args = list(args)
        self.where = "B" if peer else "A"
        self.log = []
        self.lines = queue.Queue()
        self.rc = None
        argv = [SDLINKD, "--verbose", *self.args]
        if peer is None:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
            self.pid = self.p.pid
            source = self.p.stderr
        else:
            # exec: the agent's process is the daemon itself, whose log
            # comes as its output lines.
            self.p = peer.spawn(["sh", "-c", 'exec "$0" "$@" 2>&1', *argv])
            self.pid = self.p.pid
            source = None
        self.reader = threading.Thread(target=self._read, args=(source,),
                                       daemon=True)
        self.reader.start()
        # In the list before the wait: one that never says it serves is
        # still stopped at the end, and leaves the namespace to the next.
        if started is not None:
            started.append(self)
        self.expect("serving this network namespace")

    def _read(self, source):
        if source is not None:
            for line in source:
                self.log.append(line.rstrip("\n"))
                self.lines.put(line)
            self.rc = self.p.wait()
        else:
            try:
                while True:
                    line = self.p.readline(timeout=None)
                    if line is None:
                        break
                    self.log.append(line)
                    self.lines.put(line)
                self.rc = self.p.rc
            except (OSError, ValueError):
                pass
        self.lines.put(None)

    def expect(self, text, timeout=WAIT):
        """Wait for a log line with text; fail if the daemon ends first."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"sdlinkd of {self.where}: no '{text}' within "
                            f"{timeout} s:\n{self.text()}")
            if line is None:
                self.lines.put(None)
                pytest.fail(f"sdlinkd of {self.where} ended ({self.rc}) "
                            f"before '{text}':\n{self.text()}")
            if text in line:
                return line

    def running(self):
        return self.rc is None and self.reader.is_alive()

    def send_signal(self, sig):
        if not self.running():
            return
        if self.peer is None:
            self.p.send_signal(sig)
        else:
            out = self.peer.run(["kill", f"-{int(sig)}", str(self.pid)])
            assert out["rc"] == 0 or not self.running(), out

    def stop(self, sig=signal.SIGTERM):
        """Signal it and wait for its end; its exit status."""
        self.send_signal(sig)
        return self.wait()

    def wait(self):
        self.reader.join(WAIT)
        assert not self.reader.is_alive(), \
            f"sdlinkd of {self.where} did not end:\n{self.text()}"
        return self.rc

    def kill(self):
        """What the fixture does at the end, whatever the test did."""
        if self.running():
            if self.peer is None:
                self.p.kill()
            else:
                self.p.kill()       # the agent SIGKILLs it
        self.reader.join(WAIT)

    def text(self):
        return "\n".join(self.log)

    def counters(self):
        """The counters line sdlinkd --verbose prints at exit."""
        for line in self.log:
            if "counters: " in line:
                words = line.split("counters: ", 1)[1].split()
                return {k: int(v) for k, v in zip(words[::2], words[1::2])}
        raise AssertionError(f"no counters line:\n{self.text()}")


class Daemons:
    """The daemons a test started, on both hosts: start() one, and at the
    end every one is stopped and its log printed (pytest shows it when
    the test failed)."""

    def __init__(self, peer):
        self.peer = peer
        self.started = []
        self.a = self.b = None

    def start_a(self, *args):
        self.a = Daemon(None, args, self.started)
        return self.a

    def start_b(self, *args):
        self.b = Daemon(self.peer, args, self.started)
        return self.b

    def close(self):
        for d in self.started:
            if d.running():
                d.send_signal(signal.SIGTERM)
        for d in self.started:
            try:
                d.wait()
            except AssertionError:
                d.kill()
        for d in self.started:
            print(f"--- sdlinkd of {d.where} {' '.join(d.args)}, exit "
                  f"{d.rc}:\n{d.text()}")


def set_up(peer, key=KEY, peer_key=KEY):
    """Redirection, the kernel's bound on a verdict and the fabric key on
    both hosts; returns what puts them back."""
    old = {k: (sysctl(k), peer_sysctl(peer, k))
           for k in ("redirect", "rendezvous_timeout_ms")}
    for k, v in (("redirect", 1), ("rendezvous_timeout_ms", VERDICT_MS)):
        sysctl(k, v)
        peer_sysctl(peer, k, v)
    sdctl_key(key)
    sdctl_key(peer_key, peer)

    def restore():
        for k, (here, there) in old.items():
            sysctl(k, here)
            peer_sysctl(peer, k, there)
        sdctl_key(None, none_ok=True)
        sdctl_key(None, peer, none_ok=True)
    return restore
