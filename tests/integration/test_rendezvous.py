"""Rendezvous with other hosts' monitors (Documentation/rdma.rst).

Two network namespaces joined by a veth pair stand for two hosts: each has
its own module state (its own monitor, settings and counters).  A program
under sdrun in "h1" connects to a plain TCP server in "h2"; what h2 runs on
its rendezvous port (nothing, its monitor, or a hostile stand-in) decides
the fallback reason h1 counts, and the bytes must arrive either way."""
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import (TOP, netns_del, netns_pair, ns_sysctl,
                      nspopen, nsrun, sd_stats, wait_for)

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
ECHO = str(TOP / "tests" / "integration" / "echo_server.py")
H1, H2 = "sdrv-h1", "sdrv-h2"
A1, A2 = "10.78.0.1", "10.78.0.2"
RDV_PORT = 7471
APP_PORT = 9090
MAGIC, VERSION, REQUEST, REPLY, NO_RDMA = 0x53445256, 2, 1, 2, 1
REQ_LEN, REP_LEN = 16, 16


def ns(name, *cmd, check=True, **kw):
    return nsrun(name, *cmd, check=check, capture_output=True, text=True,
                 **kw)


def setting(name, key, value=None):
    """net.sd.KEY's value; or, with a value, the write's outcome as a
    process's (returncode, stderr)."""
    if value is None:
        return ns_sysctl(name, key)
    err = ns_sysctl(name, key, value)
    return subprocess.CompletedProcess([key, value], 1 if err else 0, "",
                                       err or "")


class Delta:
    def __init__(self, name):
        self.name = name
        self.before = sd_stats(name)

    def __call__(self):
        now = sd_stats(self.name)
        return {k: v - self.before.get(k, 0) for k, v in now.items()
                if v != self.before.get(k, 0)}


@pytest.fixture
def hosts():
    netns_pair(H1, H2, "sdrv0", "sdrv1", A1, A2)
    for n in (H1, H2):
        assert setting(n, "redirect", 1).returncode == 0
        # The guest is slow (TCG) and busy: a generous bound.
        assert setting(n, "rendezvous_timeout_ms", 10000).returncode == 0
    yield
    netns_del(H1, H2)


@pytest.fixture
def echo_server(hosts):
    """A plain TCP echo server (not under sdrun) in h2."""
    p = nspopen(H2, sys.executable, ECHO, A2, str(APP_PORT),
                stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    yield
    p.kill()
    p.wait()


CLIENT = f"""
import socket, sys, zlib, os
n, nonblock = int(sys.argv[1]), sys.argv[2] == "1"
for i in range(n):
    c = socket.socket()
    if nonblock:
        c.setblocking(False)
        try:
            c.connect(("{A2}", {APP_PORT}))
        except BlockingIOError:
            pass
        c.setblocking(True)
    else:
        c.connect(("{A2}", {APP_PORT}))
    data = os.urandom(100000)
    c.sendall(data)
    got = b""
    while len(got) < len(data):
        got += c.recv(65536)
    assert got == data
    c.close()
print("ok", flush=True)
"""


def client(n=1, nonblock=False, timeout=60):
    """n connections from h1 under sdrun, each echoing 100 kB checked."""
    out = ns(H1, SDRUN, sys.executable, "-c", CLIENT, str(n),
             "1" if nonblock else "0", check=False, timeout=timeout)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    return out


def test_off_by_default_reaches_tcp_as_remote(echo_server):
    assert setting(H1, "rendezvous_port") == "0"
    d = Delta(H1)
    client(2)
    got = d()
    assert got.get("fallback_remote") == 2, got
    assert "rdv_asked" not in got, got


def test_host_without_a_monitor_is_peer_no_sd_and_cached(echo_server):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    d = Delta(H1)
    client(3)
    got = d()
    assert got.get("fallback_peer_no_sd") == 3, got
    # Asked once; the other two were told by the cache.
    assert got.get("rdv_asked") == 1 and got.get("rdv_cached") == 2, got


def test_no_cache_asks_every_time(echo_server):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H1, "peer_cache_seconds", 0).returncode == 0
    d = Delta(H1)
    client(3)
    got = d()
    assert got.get("fallback_peer_no_sd") == 3, got
    assert got.get("rdv_asked") == 3 and "rdv_cached" not in got, got


def test_two_monitors_agree_on_tcp_without_rdma(echo_server):
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
    d1, d2 = Delta(H1), Delta(H2)
    client(2)
    got1 = d1()
    assert got1.get("fallback_no_rdma") == 2, got1
    assert got1.get("rdv_asked") == 1 and got1.get("rdv_cached") == 1, got1
    assert wait_for(lambda: d2().get("rdv_answered") == 1), d2()
    assert "rdv_failed" not in d2(), d2()


def test_nonblocking_connect_does_not_wait_and_learns(echo_server):
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
    d1, d2 = Delta(H1), Delta(H2)
    client(1, nonblock=True)
    got = d1()
    assert got.get("fallback_peer_unknown") == 1, got
    # The monitor asked in the background; the next connect knows.
    assert wait_for(lambda: d1().get("rdv_asked") == 1), d1()
    client(1, nonblock=True)
    got = d1()
    assert got.get("fallback_no_rdma") == 1 and got.get("rdv_cached") == 1, \
        (got, d2())


def test_changing_the_port_forgets_what_was_learnt(echo_server):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    client(1)
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    # h1 still believes h2 has no monitor ...
    d = Delta(H1)
    client(1)
    assert d().get("fallback_peer_no_sd") == 1, d()
    # ... until its own port changes (and back).
    assert setting(H1, "rendezvous_port", RDV_PORT + 1).returncode == 0
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    d = Delta(H1)
    client(1)
    assert d().get("fallback_no_rdma") == 1, d()


# ---- settings ------------------------------------------------------------

@pytest.mark.parametrize("key,bad", [
    ("rendezvous_port", "-1"), ("rendezvous_port", "65536"),
    ("rendezvous_port", "x"), ("rendezvous_timeout_ms", "9"),
    ("rendezvous_timeout_ms", "60001"), ("peer_cache_seconds", "-1"),
    ("peer_cache_seconds", "86401")])
def test_bad_settings_are_refused_and_change_nothing(hosts, key, bad):
    before = setting(H1, key)
    r = setting(H1, key, bad)
    assert r.returncode != 0, r
    assert setting(H1, key) == before


def test_a_port_in_use_is_refused_and_the_old_one_kept(hosts):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    holder = nspopen(
        H1, sys.executable, "-c",
        f"import socket,time; s=socket.create_server(('', {RDV_PORT + 1}));"
        "print('ready', flush=True); time.sleep(60)",
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = setting(H1, "rendezvous_port", RDV_PORT + 1)
        assert r.returncode != 0, r
    finally:
        holder.kill()
        holder.wait()
    assert setting(H1, "rendezvous_port") == str(RDV_PORT)
    out = ns(H1, "ss", "-Hltn", f"sport = :{RDV_PORT}").stdout
    assert out.strip(), "the monitor no longer listens"
    assert setting(H1, "rendezvous_port", 0).returncode == 0
    out = ns(H1, "ss", "-Hltn", f"sport = :{RDV_PORT}").stdout
    assert not out.strip(), "the monitor still listens"


# ---- hostile monitors ------------------------------------------------------

def hdr(version=VERSION, typ=REPLY, length=REP_LEN, magic=MAGIC):
    return struct.pack("!IBBH", magic, version, typ, length)


# The monitor speaks the RDMA requests (test_rdma_setup.py): flag bit 0.
GOOD_REPLY = hdr() + struct.pack("!B3xI", NO_RDMA, 1)

HOSTILE_REPLIES = {
    "garbage": os.urandom(16),
    "closes": b"",
    "short": GOOD_REPLY[:9],
    "bad_magic": hdr(magic=0x12345678) + GOOD_REPLY[8:],
    "bad_version": hdr(version=9) + GOOD_REPLY[8:],
    "bad_type": hdr(typ=1) + GOOD_REPLY[8:],
    "bad_length": hdr(length=4000) + GOOD_REPLY[8:],
    "bad_status": hdr() + struct.pack("!B3xI", 77, 0),
    "zero_status": hdr() + struct.pack("!B3xI", 0, 0),
    "reserved_set": hdr() + struct.pack("!B3BI", NO_RDMA, 1, 2, 3, 0),
    "silent": None,
    "huge": None,       # 1 MiB of random bytes, made by the fake
}

FAKE = """
import os, socket, sys, threading, time
mode, payload = sys.argv[1], bytes.fromhex(sys.argv[2])
s = socket.create_server(("", int(sys.argv[3])))
print("ready", flush=True)
def serve(c):
    with c:
        try:
            c.recv(64)
            if mode == "silent":
                time.sleep(30)
            elif mode == "huge":
                c.sendall(os.urandom(1 << 20))
            elif payload:
                c.sendall(payload)
            time.sleep(1)
        except OSError:
            pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


@pytest.mark.parametrize("mode", sorted(HOSTILE_REPLIES))
def test_hostile_monitor_means_tcp_with_reason_handshake(echo_server, mode):
    payload = HOSTILE_REPLIES[mode] or b""
    fake = nspopen(H2, sys.executable, "-c", FAKE, mode, payload.hex(),
                   str(RDV_PORT), stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout.readline().strip() == "ready"
        assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
        assert setting(H1, "rendezvous_timeout_ms", 300).returncode == 0
        d = Delta(H1)
        client(2)
        got = d()
        assert got.get("fallback_handshake") == 2, got
        assert got.get("rdv_asked") == 1 and got.get("rdv_failed") == 1, got
        assert got.get("rdv_cached") == 1, got
    finally:
        fake.kill()
        fake.wait()


# ---- hostile clients of the monitor ----------------------------------------

HOSTILE_REQUESTS = {
    "garbage": os.urandom(16),
    "empty": b"",
    "short": hdr(typ=REQUEST, length=REQ_LEN)[:6],
    "bad_magic": hdr(magic=1, typ=REQUEST, length=REQ_LEN) + bytes(8),
    "bad_version": hdr(version=0, typ=REQUEST, length=REQ_LEN) + bytes(8),
    "reply_type": hdr(typ=REPLY, length=REQ_LEN) + bytes(8),
    "bad_length": hdr(typ=REQUEST, length=0xFFFF) + bytes(8),
    "unknown_flags": hdr(typ=REQUEST, length=REQ_LEN) +
    struct.pack("!IHH", 0x80000000, 80, 0),
    "reserved_set": hdr(typ=REQUEST, length=REQ_LEN) +
    struct.pack("!IHH", 0, 80, 7),
    "huge": os.urandom(1 << 20),
}
GOOD_REQUEST = hdr(typ=REQUEST, length=REQ_LEN) + struct.pack("!IHH", 0,
                                                              APP_PORT, 0)


PROBE = f"""
import json, socket, sys
cases = json.load(sys.stdin)
out = {{}}
for name, hexdata in cases.items():
    c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
    got = b""
    try:
        c.sendall(bytes.fromhex(hexdata))
        c.shutdown(socket.SHUT_WR)
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    c.close()
    out[name] = got.hex()
print(json.dumps(out))
"""


def test_monitor_answers_a_good_request_and_nothing_else(hosts):
    """Each malformed request gets no answer (a close), only the good one
    is answered; the monitor counts every failure."""
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H2, "rendezvous_timeout_ms", 500).returncode == 0
    cases = {k: v.hex() for k, v in HOSTILE_REQUESTS.items()}
    cases["good"] = GOOD_REQUEST.hex()
    d = Delta(H2)
    out = ns(H1, sys.executable, "-c", PROBE, input=json.dumps(cases),
             timeout=120)
    got = {k: bytes.fromhex(v) for k, v in json.loads(out.stdout).items()}
    assert got["good"] == GOOD_REPLY, got["good"]
    for name in HOSTILE_REQUESTS:
        assert got[name] == b"", (name, got[name])
    delta = d()
    assert delta.get("rdv_answered") == 1, delta
    assert delta.get("rdv_failed") == len(HOSTILE_REQUESTS), delta


def test_monitor_survives_a_flood_of_idle_clients(hosts):
    """More idle connections than the monitor takes at once: the excess
    is closed, the rest time out, and then a good request is answered."""
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H2, "rendezvous_timeout_ms", 300).returncode == 0
    code = f"""
import socket, time
idle = [socket.create_connection(("{A2}", {RDV_PORT})) for _ in range(200)]
time.sleep(2)
for s in idle:
    s.close()
c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
c.sendall(bytes.fromhex("{GOOD_REQUEST.hex()}"))
print(c.recv(64).hex())
"""
    d = Delta(H2)
    out = ns(H1, sys.executable, "-c", code, timeout=120)
    assert bytes.fromhex(out.stdout.strip()) == GOOD_REPLY
    delta = d()
    assert delta.get("rdv_answered") == 1, delta
    # Every idle one failed: closed at once beyond 64, else timed out.
    assert delta.get("rdv_failed") == 200, delta


def test_netns_goes_with_exchanges_in_flight(hosts):
    """Namespaces deleted while their monitors wait: h2's on a client that
    says nothing, h1's asking a host that does not exist.  Nothing may be
    left behind (the harness checks rmmod and the kernel log)."""
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
        assert setting(n, "rendezvous_timeout_ms", 5000).returncode == 0
    idle = nspopen(
        H1, sys.executable, "-c",
        f"import socket,time; s=socket.create_connection(('{A2}', "
        f"{RDV_PORT})); print('ready', flush=True); time.sleep(60)",
        stdout=subprocess.PIPE, text=True)
    try:
        assert idle.stdout.readline().strip() == "ready"
        # A non-blocking connect to nobody: h1 asks in the background.
        code = ("import socket; c = socket.socket(); c.setblocking(False)\n"
                "try:\n    c.connect(('10.78.0.3', 80))\n"
                "except BlockingIOError:\n    pass\n")
        d = Delta(H1)
        ns(H1, SDRUN, sys.executable, "-c", code)
        assert d().get("fallback_peer_unknown") == 1, d()
        subprocess.run(["ip", "netns", "del", H2], check=True)
    finally:
        idle.kill()
        idle.wait()
    subprocess.run(["ip", "netns", "del", H1], check=True)
