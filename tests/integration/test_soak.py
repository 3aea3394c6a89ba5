"""Soak: many connections streaming checksummed data both ways for a
configurable time, with connections opened and closed all through the
run (tests/progs/sd_stress.c, mode soak).  Every byte is checked at both
ends against the stream its sender generated.

SD_TEST_SOAK_SECONDS (default 120) is the whole file's time: the run
through system calls and the run under sdrun (libsd) get half each.
SD_TEST_SOAK_CONNS (default 32) is the number of connections streaming
at once.  SD_TEST_SOAK_SEED replays a run's lengths and bytes."""
import json
import os
import random
import subprocess
import time

import pytest

from conftest import TOP, StatsDelta, prog, protocol_sockets

SECONDS = float(os.environ.get("SD_TEST_SOAK_SECONDS", "120"))
CONNS = int(os.environ.get("SD_TEST_SOAK_CONNS", "32"))
SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")


@pytest.mark.parametrize("libsd", [False, True], ids=["syscalls", "libsd"])
def test_soak_checksummed_streams_with_churn(libsd, no_leak):
    seed = int(os.environ.get("SD_TEST_SOAK_SEED",
                              random.SystemRandom().getrandbits(32)))
    secs = max(2.0, SECONDS / 2)
    print(f"soak seed {seed}, {secs} s, {CONNS} connections at once")
    before = protocol_sockets()
    stats = StatsDelta()
    cmd = ([SDRUN] if libsd else []) + [
        prog("sd_stress"), "soak", "sd", str(CONNS), str(secs), str(seed)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    # Nothing piles up while it runs: one connection per slot (two
    # sockets) and the listener, with room for ends still closing (a
    # socket is counted until an RCU grace period after its close).
    most = 0
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < secs + 300:
        most = max(most, protocol_sockets() - before)
        time.sleep(0.5)
    if p.poll() is None:
        p.kill()
    out, err = p.communicate()
    assert p.returncode == 0, f"seed {seed}: exited {p.returncode}\n{out}{err}"
    r = json.loads(out)
    print(r, f"at most {most} AF_SD sockets at once")
    assert r["mismatches"] == 0, f"seed {seed}: {r}\n{err}"
    assert r["seconds"] < secs + 120, r
    # Every byte of every session, both ways, was checked.
    assert r["bytes_checked"] == 2 * r["bytes_each_way"] > 0, r
    # Churn: every slot went through several connections.
    assert r["connections"] >= 4 * CONNS, r
    assert most <= 8 * CONNS + 64, f"{most} AF_SD sockets at once"
    d = stats()
    assert d["connects"] >= r["connections"], d
    assert d["accepts"] >= r["connections"], d
    assert d["resets"] == 0 and d["corrupt"] == 0, d
