"""The bounded fuzzer (tests/progs/sd_fuzz.c): random sequences of AF_SD
system calls from several threads in several processes, sharing sockets,
with random options, ioctls, addresses, random bytes written into the
mapped rings, forks, connects that wait at a full backlog while other
threads listen, connect, shut down and close the same socket (half the
calls go to a few hot slots), and random generic netlink requests to the
"sd" family
(which change the rules for real: the fuzzer flushes them at the end,
and the test checks that none are left).  Any kernel splat fails the
test (conftest's clean_kernel_log) and the seed it prints replays the
same calls:

    SD_FUZZ_SEED=N SD_FUZZ_SECONDS=600 tests/vm/run -- \\
        python3 -m pytest -q tests/integration/test_fuzz.py

The seed is new for every run unless SD_FUZZ_SEED is set; CI runs
SD_FUZZ_SECONDS (default 20) seconds."""
import os
import random
import re
import socket
import subprocess

import pytest

import sdgenl
from conftest import (netns_del, netns_pair, ns_sysctl, nsrun, prog,
                      sd_stats)
from sdsock import Family

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SECONDS = int(os.environ.get("SD_FUZZ_SECONDS", "20"))
SDRUN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "user", "lib", "shim", "sdrun")


@pytest.fixture
def no_rules_left():
    """The fuzzer's netlink requests add, delete and flush rules in this
    network namespace: whatever happens to the run, later tests must not
    find its rules.  The check itself is in the test."""
    yield
    with sdgenl.Genl() as nl:
        nl.flush()


NETLINK = re.compile(r"sd_fuzz: netlink: (\d+) requests, (\d+) acked, "
                     r"(\d+) refused, (\d+) rules added, (\d+) dump parts")


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_fuzz_leaves_kernel_and_family_intact(libsd, redirect_on, no_leak,
                                              no_rules_left):
    """Under sdrun the same calls also go through libsd, whose rings the
    fuzzer scribbles on and closes under other threads: no process of
    it may die of a signal.  Each run gets half of SD_FUZZ_SECONDS.
    Redirection is on: the fuzzer makes redirected sockets too."""
    seed = int(os.environ.get("SD_FUZZ_SEED", random.SystemRandom().getrandbits(48)))
    print(f"sd_fuzz seed {seed}")
    secs = max(1, SECONDS // 2)
    cmd = [prog("sd_fuzz"), str(seed), str(secs), "3", "3"]
    r = subprocess.run(([SDRUN] if libsd else []) + cmd,
                       capture_output=True, text=True, timeout=secs + 90)
    assert r.returncode == 0, \
        f"sd_fuzz seed {seed} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert "calls in the first process" in r.stdout, r.stdout
    calls = int(r.stdout.split("sd_fuzz: ")[-1].split()[0])
    print(r.stdout)
    # How many calls fit in the time is the machine's business (the debug
    # kernel on a busy host makes a few thousand; connects that wait for
    # backlog room and forks take their time): the bounds only say that
    # the run was not stuck from the start.
    assert calls > 200, f"seed {seed}: only {calls} calls"
    # The netlink requests reached the family: some were carried out
    # (rules added, ACKs), more were refused, dumps came in parts.
    m = NETLINK.search(r.stdout)
    assert m, r.stdout
    sent, acked, refused, added, parts = map(int, m.groups())
    assert sent > 20 and acked > 0 and refused > 0 and added > 0 \
        and parts > 0, f"seed {seed}: {m.group(0)}"
    with sdgenl.Genl() as nl:
        assert nl.rules() == [], "the fuzzer left rules behind"
        # The family still answers and still changes rules.
        assert nl.stats()[1] >= 0
        r = nl.rule_add(sdgenl.SD_ACTION_DENY, sdgenl.SD_DIR_BIND)
        assert r.err == 0, r
        assert [x[sdgenl.SD_A_RULE_ID] for x in nl.rules()] == \
            [r.id.to_bytes(4, "little")]
        nl.flush()
    # The family still works after all that.
    sd = Family("sd")
    c, s, lst = sd.pair()
    c.sendall(b"after the fuzzer")
    assert s.recv(100) == b"after the fuzzer"
    s.sendall(b"ok")
    assert c.recv(10) == b"ok"
    c.shutdown(socket.SHUT_WR)
    assert s.recv(10) == b""
    for x in (c, s, lst):
        x.close()


FUZZ_NS = ("sdfz-h1", "sdfz-h2")
FUZZ_ADDR = ("10.78.0.1", "10.78.0.2")


@pytest.fixture
def fuzz_hosts():
    """Two namespaces, two hosts to AF_SD, redirection on in both; the
    fuzzer is h1's link daemon.  A verdict that does not come ends the
    connect after a second."""
    h1, h2 = FUZZ_NS
    netns_pair(h1, h2, "sdfz0", "sdfz1", *FUZZ_ADDR)
    for n in FUZZ_NS:
        for key, value in (("redirect", 1), ("rendezvous_timeout_ms", 1000)):
            err = ns_sysctl(n, key, value)
            assert err is None, err
    yield h1, h2
    netns_del(*FUZZ_NS)


def test_fuzz_against_another_host(fuzz_hosts, no_leak):
    """The same calls in one namespace, with another namespace standing for
    another host: redirected clients here connecting to it, and the fuzzer
    playing this namespace's link daemon (tests/progs/sd_fuzz.c,
    link_daemon()): random verdicts, connections of the other host queued
    here, the daemon going and coming back under threads that use, shut
    down and close what it carried (security.rst).  Each run gets half of
    SD_FUZZ_SECONDS."""
    h1, h2 = fuzz_hosts
    seed = int(os.environ.get("SD_FUZZ_SEED", random.SystemRandom().getrandbits(48)))
    print(f"sd_fuzz seed {seed}")
    secs = max(1, SECONDS // 2)
    before = sd_stats(h1)
    r = nsrun(h1, prog("sd_fuzz"), str(seed), str(secs), "2", "3",
              f"/run/netns/{h2}", FUZZ_ADDR[1], capture_output=True,
              text=True, timeout=secs + 90)
    assert r.returncode == 0, \
        f"sd_fuzz seed {seed} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    print(r.stdout)
    after = sd_stats(h1)
    delta = {k: v - before.get(k, 0) for k, v in after.items()}
    print({k: v for k, v in delta.items() if v})
    # The daemon heard of connects, carried connections both ways, and
    # its going reset them (link_first() makes one of each for certain).
    assert delta["link_upcalls"] > 0, delta
    assert delta["link_via"] > 0 and delta["link_incoming"] > 0, delta
    assert delta["link_resets"] >= 2, delta
