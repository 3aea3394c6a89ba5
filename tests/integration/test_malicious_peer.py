"""A malicious peer (tests/progs/sd_malice.c): one process holds one end
of a connection after another and, for a bounded time, writes random and
crafted values into every part of both rings it can reach (record
headers, hand-written records, zero-copy records and handles, the data
area, credit, positions, flag words, token and busy words) while it also
sends, receives and calls the family's ioctls; its victim, through system
calls or under sdrun (libsd), reads and writes the same connection.

The victim must get an error or the end of the stream on that connection,
every round, within a bound (no hang), and never die of a signal; every
byte it receives must be one the attacker can have put there (a set the
attacker keeps to: see sd_malice.c), so a byte from anywhere else (the
kernel's memory, the victim's own ring, another connection) fails it; a
clean connection of the victim's and one of this process carry checked
bytes during and after the attack; the kernel logs at most what its
ratelimit lets through.

The seed is new for every run unless SD_TEST_MALICE_SEED is set, and is
in every failure message; SD_TEST_MALICE_SECONDS (default 10) is split
between the two paths:

    SD_TEST_MALICE_SEED=N SD_TEST_MALICE_SECONDS=120 tests/vm/run -- \\
        python3 -m pytest -q tests/integration/test_malicious_peer.py
"""
import json
import math
import os
import random
import re
import subprocess
import time

import pytest

from conftest import TOP, StatsDelta, kernel_log, prog
from sdsock import Family

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SECONDS = float(os.environ.get("SD_TEST_MALICE_SECONDS", "10"))
SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
SD = Family("sd")
# What the module logs for a corrupt ring (net_warn_ratelimited in
# kernel/sd_conn.c), and what the ratelimit prints for what it dropped.
LOGGED = re.compile(r"af_sd: |net_ratelimit: \d+ callbacks suppressed")


def net_ratelimit():
    """net_ratelimit()'s interval (s) and burst: net.core.message_*."""
    with open("/proc/sys/net/core/message_cost") as f:
        cost = int(f.read())
    with open("/proc/sys/net/core/message_burst") as f:
        burst = int(f.read())
    return cost, burst


def exchange(c, s, n, tag):
    """n checked bytes from c to s and back."""
    data = bytes((n * 7 + i * 13) & 0xFF for i in range(n))
    c.sendall(data)
    got = bytearray()
    while len(got) < n:
        b = s.recv(n - len(got))
        assert b, f"{tag}: the test's own connection ended"
        got += b
    assert bytes(got) == data, f"{tag}: the test's own connection lost bytes"
    s.sendall(got)
    back = bytearray()
    while len(back) < n:
        back += c.recv(n - len(back))
    assert bytes(back) == data, f"{tag}: the test's own connection lost bytes"


@pytest.mark.parametrize("path", ["syscalls", "libsd"])
def test_malicious_peer_hurts_only_its_connection(path, no_leak):
    seed = int(os.environ.get("SD_TEST_MALICE_SEED",
                              random.SystemRandom().getrandbits(48)))
    tag = f"SD_TEST_MALICE_SEED={seed} ({path})"
    print(tag)
    c, s, lst = SD.pair()               # the test's own, across the attack
    try:
        run(path, seed, tag, c, s)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        # A hang (a timeout), a broken connection of this process's own:
        # with the seed to replay it.
        pytest.fail(f"{tag}: {e!r}")
    finally:
        for x in (c, s, lst):
            x.close()


def run(path, seed, tag, c, s):
    secs = max(1.0, SECONDS / 2)
    cost, burst = net_ratelimit()
    c.settimeout(10)
    s.settimeout(10)
    before = len(kernel_log().splitlines())
    stats = StatsDelta()
    t0 = time.monotonic()
    atk = subprocess.Popen([prog("sd_malice"), "attack", str(seed), str(secs)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    vic = None
    try:
        port = json.loads(atk.stdout.readline())["port"]
        vic = subprocess.Popen(([SDRUN] if path == "libsd" else []) +
                               [prog("sd_malice"), "victim", str(port),
                                str(seed)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        # This process's connection works all through the attack.
        pings = 0
        while vic.poll() is None and time.monotonic() - t0 < secs + 120:
            exchange(c, s, 1 + pings % 3000, tag)
            pings += 1
            time.sleep(0.1)
        vout, verr = vic.communicate(timeout=max(1, secs + 120 -
                                                 (time.monotonic() - t0)))
        aout, aerr = atk.communicate(timeout=30)
    finally:
        for p in (atk, vic):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    elapsed = time.monotonic() - t0
    print(f"{tag}: {elapsed:.1f} s\nattacker: {aout}victim: {vout}")

    assert atk.returncode == 0, \
        f"{tag}: the attacker exited {atk.returncode}:\n{aout}\n{aerr}"
    # No signal (a negative code), no finding (1, with the reason).
    assert vic.returncode == 0, \
        f"{tag}: the victim exited {vic.returncode}:\n{vout}\n{verr}"
    v = json.loads(vout.splitlines()[-1])
    a = json.loads(aout.splitlines()[-1])
    assert v["rounds"] >= 2 and a["rounds"] >= v["rounds"] - 1, \
        f"{tag}: too few rounds: {v} {a}"
    # Every round ended with an error or the end of the stream.
    assert v["eof"] + v["econnreset"] + v["epipe"] == v["rounds"], f"{tag}: {v}"
    # ... and nothing else went wrong on the way (odd errno values).
    assert v["odd_errno"] == {}, f"{tag}: unexpected errors: {v}"
    assert v["clean_steps"] > 16 and v["clean_bytes"] > 0, f"{tag}: {v}"
    # Under sdrun libsd drove the victim's sides (the attacker saw their
    # token words set before it wrote any); without it nothing did.
    if path == "libsd":
        assert a["victim_owned"] > 0, f"{tag}: libsd never owned a side: {a}"
    else:
        assert a["victim_owned"] == 0, f"{tag}: {a}"

    # The rings were found corrupt (and said so) at least once.
    d = stats()
    assert d["corrupt"] > 0, f"{tag}: no corrupt ring detected: {d}"
    logged = [line for line in kernel_log().splitlines()[before:]
              if LOGGED.search(line)]
    other = [line for line in logged if "corrupt ring" not in line and
             "callbacks suppressed" not in line]
    assert not other, f"{tag}: the module logged:\n" + "\n".join(other)
    # At most burst lines per interval, and one saying how many it dropped.
    windows = math.ceil(elapsed / cost) + 1
    assert len(logged) <= windows * (burst + 1), \
        (f"{tag}: {len(logged)} lines logged in {elapsed:.0f} s for "
         f"{d['corrupt']} corrupt rings (ratelimit {burst} per {cost} s):\n"
         + "\n".join(logged[-40:]))
    print(f"{tag}: {d['corrupt']} corrupt rings, {len(logged)} lines logged")

    # Only the attacked connections were hurt.
    exchange(c, s, 65536, tag)
    c2, s2, lst2 = SD.pair()
    try:
        exchange(c2, s2, 65536, tag)
    finally:
        for x in (c2, s2, lst2):
            x.close()
