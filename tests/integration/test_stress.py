"""Stress: a GiB through many connections with every byte checked, and
10,000 connections open at once between two processes.

SD_TEST_STRESS_BYTES (default 1 GiB) and SD_TEST_CONNS (default 10000)
size the runs; the figures are printed with -s and kept in
build/test-results/stress.json."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import TOP, prog, protocol_sockets, wait_for

RESULTS = TOP / "build" / "test-results" / "stress.json"
TOTAL = int(os.environ.get("SD_TEST_STRESS_BYTES", 1 << 30))
CONNS = int(os.environ.get("SD_TEST_CONNS", 10000))


def record(key, value):
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


def stress(*args, timeout=1200):
    out = subprocess.run([prog("sd_stress"), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("conns,seed", [(16, 1), (64, 2)])
def test_gibibyte_through_many_connections(conns, seed, no_leak):
    # Half the total each way, at once, in random-sized sends.
    r = stress("bytes", "sd", conns, TOTAL // 2, seed)
    assert r["mismatches"] == 0
    assert r["bytes_each_way"] * 2 >= TOTAL - conns * 2
    r["mib_per_s"] = round(r["bytes_each_way"] * 2 / r["seconds"] / 2**20, 1)
    record(f"bytes_{conns}", r)
    print(r)


@pytest.fixture
def small_rings():
    path = pathlib.Path("/proc/sys/net/sd/ring_size")
    old = path.read_text()
    path.write_text("4096")
    yield 4096
    path.write_text(old)


def test_ten_thousand_connections(small_rings, no_leak):
    before = protocol_sockets()
    r = stress("conns", "sd", CONNS)
    assert r["errors"] == 0 and r["open_at_once"] == CONNS
    record("conns", dict(r, ring_size=small_rings))
    print(r)
    assert wait_for(lambda: protocol_sockets() == before, timeout=30)
