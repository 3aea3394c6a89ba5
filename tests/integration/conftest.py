"""Shared fixtures of the integration suite, which runs inside the test VM
(tests/vm/run) with af_sd.ko loaded."""
import contextlib
import json
import os
import pathlib
import re
import subprocess
import time

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
PROGS = TOP / "build" / "user" / "tests" / "progs"
AF_SD = 18

# As tests/vm/run's (which says why "lockdep" alone is not in it).
SPLAT = re.compile(r"WARNING:|BUG:|Oops|general protection|refcount_t|"
                   r"lockdep is turned off|DEBUG_LOCKS_WARN_ON|"
                   r"suspicious RCU usage|fasync list not empty|KASAN|UBSAN|"
                   r"unreferenced object|"
                   r"blocked for more than|Call Trace:")


def prog(name):
    """Path of a test program built by CMake."""
    path = PROGS / name
    if not path.exists():
        pytest.fail(f"{path} is not built: run make first")
    return str(path)


def run_json(*args, check=True, timeout=120):
    """Run a test program and parse the JSON object it prints per line."""
    out = subprocess.run(list(args), capture_output=True, text=True,
                         timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{args} exited {out.returncode}: {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line]


SDCTL = str(TOP / "build" / "user" / "tools" / "sdctl" / "sdctl")


def sd_stats():
    """The module's counters, as sdctl --json stats prints them."""
    out = subprocess.run([SDCTL, "--json", "stats"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


class StatsDelta:
    """sdctl's counters since construction: call it for the differences."""

    def __init__(self):
        self.before = sd_stats()

    def __call__(self):
        now = sd_stats()
        return {k: now[k] - self.before.get(k, 0) for k in now}


REDIRECT = pathlib.Path("/proc/sys/net/sd/redirect")


@contextlib.contextmanager
def redirect(value=1):
    """net.sd.redirect set to value for the block, then as it was."""
    old = REDIRECT.read_text()
    REDIRECT.write_text(f"{value}\n")
    try:
        yield
    finally:
        REDIRECT.write_text(old)


@pytest.fixture
def redirect_on():
    """Redirection on (libsd's socket() makes AF_SD ones) for the test."""
    with redirect():
        yield


def kernel_log():
    return subprocess.run(["dmesg"], capture_output=True, text=True).stdout


def protocol_sockets(name="AF_SD"):
    """The 'sockets' column of /proc/net/protocols for a protocol."""
    for line in pathlib.Path("/proc/net/protocols").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return int(fields[2])
    raise AssertionError(f"{name} is not in /proc/net/protocols")


def wait_for(pred, timeout=5.0):
    """Poll pred until it is true or timeout seconds passed; return it."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > end:
            return value
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def clean_kernel_log(request):
    """Fail the test that left a kernel splat, naming it (the harness
    catches any splat at the end too, but not which test made it)."""
    before = len(kernel_log().splitlines())
    yield
    new = kernel_log().splitlines()[before:]
    bad = [line for line in new if SPLAT.search(line)]
    assert not bad, "kernel splat during the test:\n" + "\n".join(new[-80:])


@pytest.fixture
def no_leak():
    """Check that the test leaves as many AF_SD sockets as it found."""
    before = protocol_sockets()
    yield
    assert wait_for(lambda: protocol_sockets() == before), \
        f"AF_SD sockets in use: {protocol_sockets()} after, {before} before"


@pytest.fixture(scope="session", autouse=True)
def module_loaded():
    if not os.path.exists("/sys/module/af_sd"):
        pytest.exit("af_sd is not loaded: run this suite through tests/vm/run",
                    returncode=3)
