"""Rendezvous with other hosts' monitors (Documentation/rdma.rst).

Two network namespaces joined by a veth pair stand for two hosts: each has
its own module state (its own monitor, settings and counters).  A program
under sdrun in "h1" connects to a plain TCP server in "h2"; what h2 runs on
its rendezvous port (nothing, its monitor, or a hostile stand-in) and the
fabric keys of the two (the same, none, different ones) decide the fallback
reason h1 counts, and the bytes must arrive either way.  The monitors meet
only authenticated (wire version 3, rdvwire.py): a request without the key,
forged, replayed or changed on the way is dropped and counted."""
import json
import os
import struct
import subprocess
import sys

import pytest

import rdvwire as w
from conftest import (TOP, netns_del, netns_pair, ns_key, ns_sysctl,
                      nspopen, nsrun, sd_stats, wait_for)

# In the debug kernel lane's CI subset (Documentation/testing.rst), but
# for the tests marked debug_ci_skip: connects whose outcome is only
# another verdict of the same exchange, the settings' range checks, the
# peer cache's bookkeeping and a port already in use, each of which costs
# there mostly the setting up of two namespaces and their agents.
pytestmark = pytest.mark.debug_ci

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
ECHO = str(TOP / "tests" / "integration" / "echo_server.py")
H1, H2 = "sdrv-h1", "sdrv-h2"
A1, A2 = "10.78.0.1", "10.78.0.2"
RDV_PORT = 748       # only root may bind it; so is RDV_PORT + 1
APP_PORT = 9090
MAGIC, VERSION, REQUEST, REPLY, NO_RDMA = w.MAGIC, w.VERSION, 1, 2, 1
REQ_LEN, REP_LEN = 16 + w.TAG_LEN, 16 + w.TAG_LEN
HERE = os.path.dirname(os.path.abspath(__file__))


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
        ns_key(n, w.KEY)
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


@pytest.mark.debug_ci_skip
def test_off_by_default_reaches_tcp_as_remote(echo_server):
    assert setting(H1, "rendezvous_port") == "0"
    d = Delta(H1)
    client(2)
    got = d()
    assert got.get("fallback_remote") == 2, got
    assert "rdv_asked" not in got, got


@pytest.mark.debug_ci_skip
def test_host_without_a_monitor_is_peer_no_sd_and_cached(echo_server):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    d = Delta(H1)
    client(3)
    got = d()
    assert got.get("fallback_peer_no_sd") == 3, got
    # Asked once; the other two were told by the cache.
    assert got.get("rdv_asked") == 1 and got.get("rdv_cached") == 2, got


@pytest.mark.debug_ci_skip
def test_no_cache_asks_every_time(echo_server):
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H1, "peer_cache_seconds", 0).returncode == 0
    d = Delta(H1)
    client(3)
    got = d()
    assert got.get("fallback_peer_no_sd") == 3, got
    assert got.get("rdv_asked") == 3 and "rdv_cached" not in got, got


@pytest.mark.debug_ci_skip
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


@pytest.mark.debug_ci_skip
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


@pytest.mark.debug_ci_skip
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
    ("rendezvous_port", "x"), ("rendezvous_port", "1024"),
    ("rendezvous_port", "7471"), ("rendezvous_port", "65535"),
    ("rendezvous_timeout_ms", "9"),
    ("rendezvous_timeout_ms", "60001"), ("peer_cache_seconds", "-1"),
    ("peer_cache_seconds", "86401")])
@pytest.mark.debug_ci_skip
def test_bad_settings_are_refused_and_change_nothing(hosts, key, bad):
    before = setting(H1, key)
    r = setting(H1, key, bad)
    assert r.returncode != 0, r
    assert setting(H1, key) == before


def test_the_port_must_be_one_only_root_can_bind(hosts):
    """net.sd.rendezvous_port below net.ipv4.ip_unprivileged_port_start
    only: with that lowered to 700 in h1, 748 is refused (and the kernel
    log says why) and the port stays off; with it back at 1024, 748 is
    taken, and nobody may bind it while the monitor is off."""
    def unpriv(value):
        nsrun(H1, "sysctl", "-qw",
              f"net.ipv4.ip_unprivileged_port_start={value}", check=True)

    unpriv(700)
    try:
        r = setting(H1, "rendezvous_port", RDV_PORT)
        assert r.returncode != 0, r
        assert setting(H1, "rendezvous_port") == "0"
        log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
        assert f"net.sd.rendezvous_port {RDV_PORT} refused: any user may " \
            "bind it" in log, log[-2000:]
    finally:
        unpriv(1024)
    # What the port protects against: a user's listener on it.
    code = (f"import socket; s = socket.socket(); "
            f"s.bind(('', {RDV_PORT}))")
    out = ns(H1, "setpriv", "--reuid=65534", "--regid=65534",
             "--clear-groups", sys.executable, "-c", code, check=False)
    assert out.returncode != 0 and "Permission denied" in out.stderr, out
    assert setting(H1, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H1, "rendezvous_port") == str(RDV_PORT)
    assert setting(H1, "rendezvous_port", 0).returncode == 0


@pytest.mark.debug_ci_skip
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
# What answers on h2's port sends something else than a HELLO (the fake
# monitors of test_rdma_setup.py misbehave after theirs).

def hdr(version=VERSION, typ=REPLY, length=REP_LEN, magic=MAGIC):
    return struct.pack("!IBBH", magic, version, typ, length)


# The monitor speaks the RDMA requests (test_rdma_setup.py): flag bit 0.
GOOD_REPLY = hdr() + struct.pack("!B3xI", NO_RDMA, 1)
GOOD_HELLO = w.hello()

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
    "reply_for_hello": GOOD_REPLY + bytes(w.TAG_LEN),
    "hello_bad_version": w.hello(version=2),
    "hello_bad_flags": w.hello(flags=6),
    "hello_short": GOOD_HELLO[:20],
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


# Of the hostile monitors, the debug lane's CI subset leaves out those
# whose replies fail the same field checks as the others'.
DEBUG_CI_SAME_WAY = {"bad_magic", "bad_version", "bad_type", "bad_length",
                     "bad_status", "zero_status", "reserved_set", "huge"}


@pytest.mark.parametrize("mode", [
    pytest.param(m, marks=pytest.mark.debug_ci_skip)
    if m in DEBUG_CI_SAME_WAY else m for m in sorted(HOSTILE_REPLIES)])
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
# Each case: what takes the place of the client's HELLO ("raw"), or what
# follows a good HELLO, sealed with the session ("sealed") or not
# ("plain").

GOOD_REQUEST = w.request(APP_PORT)
HOSTILE_REQUESTS = {
    "garbage": ("raw", os.urandom(48)),
    "empty": ("raw", b""),
    "hello_short": ("raw", GOOD_HELLO[:6]),
    "hello_bad_magic": ("raw", w.hello(magic=1)),
    "hello_bad_version": ("raw", w.hello(version=2)),
    "hello_unkeyed": ("raw", w.hello(flags=0)),
    "v2_request": ("raw", struct.pack("!IBBH", MAGIC, 2, REQUEST, 16) +
                   struct.pack("!IHH", 0, APP_PORT, 0)),
    "huge": ("raw", os.urandom(1 << 20)),
    "short": ("sealed", hdr(typ=REQUEST, length=REQ_LEN)[:6]),
    "bad_magic": ("sealed", hdr(magic=1, typ=REQUEST, length=REQ_LEN) +
                  bytes(8)),
    "bad_version": ("sealed", hdr(version=0, typ=REQUEST, length=REQ_LEN) +
                    bytes(8)),
    "reply_type": ("sealed", hdr(typ=REPLY, length=REQ_LEN) + bytes(8)),
    "hello_again": ("plain", w.hello()),
    "bad_length": ("sealed", hdr(typ=REQUEST, length=0xFFFF) + bytes(8)),
    "unknown_flags": ("sealed", w.request(APP_PORT, flags=0x80000000)),
    "reserved_set": ("sealed", w.request(80, reserved=7)),
    # No tag at all: shorter than its header says.
    "unsealed": ("plain", GOOD_REQUEST),
}

# Requests that fail authentication.  A session's own nonce is given so
# that a recorded exchange can be replayed.
FORGED_REQUESTS = ["zero_tag", "other_key", "tampered",
                   "replayed", "reflected", "out_of_order", "flipped_tag"]


PROBE = f"""
import json, socket, sys
sys.path.insert(0, {HERE!r})
import rdvwire as w
key = bytes.fromhex(sys.argv[1])
cases = json.load(sys.stdin)
out = {{}}
recorded = {{}}


def talk(name, mode, data, nonce=None):
    # The monitor's HELLO, then what came after ours and data.
    c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
    hello, got, sess = b"", b"", None
    try:
        if mode == "raw":
            # The monitor's HELLO first: a close that resets the
            # connection (our bytes unread) would take it with it.
            hello = w.read_exact(c, w.HELLO_LEN)
            c.sendall(data)
        else:
            sess = w.Session.client_hello(c, key, nonce)
            hello = sess.their_hello
            if mode == "sealed":
                c.sendall(sess.seal(data))
            elif mode == "plain":
                c.sendall(data)
            else:
                c.sendall(forge(mode, sess, data))
        c.shutdown(socket.SHUT_WR)
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    c.close()
    return hello + got, sess


def forge(how, sess, body):
    if how == "zero_tag":
        return body + bytes(w.TAG_LEN)
    if how == "other_key":
        return w.Session(w.OTHER_KEY, b"c" * 16, b"s" * 16, True).seal(body)
    if how == "tampered":
        m = bytearray(sess.seal(body))
        m[13] ^= 1                      # the port asked for
        return bytes(m)
    if how == "replayed":
        return recorded["good"]
    if how == "reflected":
        sess.client = False             # as if the monitor had sent it
        return sess.seal(body)
    if how == "out_of_order":
        sess.seal(body)                 # number 0 never sent
        return sess.seal(body)
    if how == "flipped_tag":
        m = sess.seal(body)
        return m[:-1] + bytes([m[-1] ^ 1])
    raise ValueError(how)


for name, (mode, hexdata) in cases.items():
    data = bytes.fromhex(hexdata)
    if name == "good":
        # Recorded, with its own nonce, for the replay.
        nonce = b"n" * w.NONCE_LEN
        c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
        sess = w.Session.client_hello(c, key, nonce)
        sealed = sess.seal(data)
        recorded["good"] = sealed
        c.sendall(sealed)
        rep = w.read_msg(c)
        c.close()
        body = sess.open(rep)
        out[name] = [body.hex() if body is not None else "bad:" + rep.hex()]
        continue
    nonce = b"n" * w.NONCE_LEN if mode == "replayed" else None
    got, _ = talk(name, mode, data, nonce)
    out[name] = [got.hex()]
print(json.dumps(out))
"""


def probe(cases, key=w.KEY, timeout=180):
    """Each case against h2's monitor from h1: {name: bytes it answered}."""
    out = ns(H1, sys.executable, "-c", PROBE, key.hex(),
             input=json.dumps({k: [m, d.hex()] for k, (m, d) in
                               cases.items()}), timeout=timeout)
    return {k: bytes.fromhex(v[0]) if not v[0].startswith("bad:") else v[0]
            for k, v in json.loads(out.stdout).items()}


def is_hello(data, keyed=True):
    """data is a HELLO of the monitor's (with a key or not), and no more."""
    flags, _ = w.parse_hello(data)
    return bool(flags & w.HELLO_KEYED) == keyed


def answered_once(hostile, timeout_ms, good_first):
    """h2's monitor probed with the good request and each hostile one (the
    good one first or last): the good one is answered, each hostile one
    gets nothing after the HELLO.  Returns h2's counter changes."""
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H2, "rendezvous_timeout_ms", timeout_ms).returncode == 0
    good = {"good": ("sealed", GOOD_REQUEST)}
    cases = {**good, **hostile} if good_first else {**hostile, **good}
    d = Delta(H2)
    got = probe(cases)
    assert got["good"] == GOOD_REPLY, got["good"]
    for name in hostile:
        assert is_hello(got[name]), (name, got[name])
    delta = d()
    assert delta.get("rdv_answered") == 1, delta
    return delta


def test_monitor_answers_a_good_request_and_nothing_else(hosts):
    """Each malformed request, in place of a HELLO or after one, gets no
    answer beyond the monitor's HELLO (then a close); only the good one is
    answered; the monitor counts every failure, none of them as one of
    authentication."""
    delta = answered_once(HOSTILE_REQUESTS, 500, good_first=False)
    assert delta.get("rdv_failed") == len(HOSTILE_REQUESTS), delta
    assert "rdv_auth_failed" not in delta, delta


def test_forged_replayed_or_changed_requests_are_dropped_and_counted(hosts):
    """A request that is well formed but whose tag does not check (zeros,
    another fabric key, a byte changed after sealing, a good request of an
    earlier exchange replayed with the same client nonce, a message sealed
    in the monitor's direction, the second message's number first, a bit
    of the tag flipped) gets nothing after the HELLO, counted in
    rdv_auth_failed; the good one before them was answered."""
    forged = {name: (name, GOOD_REQUEST) for name in FORGED_REQUESTS}
    delta = answered_once(forged, 2000, good_first=True)
    assert delta.get("rdv_auth_failed") == len(FORGED_REQUESTS), delta
    assert "rdv_failed" not in delta, delta


def test_a_monitor_without_a_key_answers_nobody(hosts):
    """h2 without a key says so in its HELLO and answers no request, not
    even one sealed with the key h1 holds."""
    ns_key(H2, None)
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    d = Delta(H2)
    c = f"""
import socket, sys
sys.path.insert(0, {HERE!r})
import rdvwire as w
c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
mine = w.hello()
c.sendall(mine)
theirs = w.read_exact(c, w.HELLO_LEN)
s = w.Session(w.KEY, mine[16:], theirs[16:], True)
rest = b""
try:
    # The monitor closes after our HELLO: these may meet its reset.
    c.sendall(s.seal(w.request({APP_PORT})))
    c.shutdown(socket.SHUT_WR)
    while True:
        x = c.recv(4096)
        if not x:
            break
        rest += x
except OSError:
    pass
print(theirs.hex(), rest.hex())
"""
    out = ns(H1, sys.executable, "-c", c, timeout=60).stdout.split()
    assert is_hello(bytes.fromhex(out[0]), keyed=False), out
    assert len(out) == 1, out
    delta = d()
    assert "rdv_answered" not in delta and delta.get("rdv_failed") == 1, delta


def test_monitor_survives_a_flood_of_idle_clients(hosts):
    """More idle connections than the monitor takes at once: the excess
    is closed, the rest time out, and then a good request is answered."""
    assert setting(H2, "rendezvous_port", RDV_PORT).returncode == 0
    assert setting(H2, "rendezvous_timeout_ms", 300).returncode == 0
    code = f"""
import socket, sys, time
sys.path.insert(0, {HERE!r})
import rdvwire as w
idle = [socket.create_connection(("{A2}", {RDV_PORT})) for _ in range(200)]
time.sleep(2)
for s in idle:
    s.close()
c = socket.create_connection(("{A2}", {RDV_PORT}), timeout=10)
sess = w.Session.client_hello(c, w.KEY)
c.sendall(sess.seal(w.request({APP_PORT})))
print(sess.open(w.read_msg(c)).hex())
"""
    d = Delta(H2)
    out = ns(H1, sys.executable, "-c", code, timeout=120)
    assert bytes.fromhex(out.stdout.strip()) == GOOD_REPLY
    delta = d()
    assert delta.get("rdv_answered") == 1, delta
    # Every idle one failed: closed at once beyond 64, else timed out.
    assert delta.get("rdv_failed") == 200, delta


# ---- fabric keys -------------------------------------------------------------

def test_no_key_means_tcp_with_reason_auth_and_no_rendezvous(echo_server):
    """Without a key h1 never meets h2's monitor unauthenticated: TCP at
    once, reason auth, nothing asked."""
    ns_key(H1, None)
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
    d1, d2 = Delta(H1), Delta(H2)
    client(2)
    got = d1()
    assert got.get("fallback_auth") == 2, got
    assert "rdv_asked" not in got and "fallback_no_rdma" not in got, got
    assert "rdv_answered" not in d2() and "rdv_failed" not in d2(), d2()


def test_other_host_without_a_key_means_auth_and_is_cached(echo_server):
    ns_key(H2, None)
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
    d1, d2 = Delta(H1), Delta(H2)
    client(2)
    got = d1()
    assert got.get("fallback_auth") == 2, got
    assert got.get("rdv_asked") == 1 and got.get("rdv_cached") == 1, got
    assert wait_for(lambda: d2().get("rdv_failed") == 1), d2()
    assert "rdv_answered" not in d2(), d2()


def test_different_keys_mean_tcp_with_reason_auth(echo_server):
    """h1 and h2 with different keys: h2 drops h1's request (its tag does
    not check), h1 falls back to TCP with reason auth and the bytes echo;
    then h2 gets h1's key, and once h1's key is set again (which forgets
    what h1 learnt) the monitors agree."""
    ns_key(H2, w.OTHER_KEY)
    for n in (H1, H2):
        assert setting(n, "rendezvous_port", RDV_PORT).returncode == 0
    d1, d2 = Delta(H1), Delta(H2)
    client(2)
    got = d1()
    assert got.get("fallback_auth") == 2, got
    assert got.get("rdv_asked") == 1 and got.get("rdv_cached") == 1, got
    assert wait_for(lambda: d2().get("rdv_auth_failed") == 1), d2()
    assert "rdv_answered" not in d2(), d2()
    ns_key(H2, w.KEY)
    d1 = Delta(H1)
    client(1)
    assert d1().get("fallback_auth") == 1 and d1().get("rdv_cached") == 1
    ns_key(H1, w.KEY)
    d1 = Delta(H1)
    client(1)
    got = d1()
    assert got.get("fallback_no_rdma") == 1 and got.get("rdv_asked") == 1, \
        got


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
