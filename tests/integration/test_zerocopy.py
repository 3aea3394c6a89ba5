"""Zero copy (include/uapi/linux/sd.h, "Zero copy"): the adversarial
scenarios of tests/progs/sd_zcopy.c, each run three ways: over TCP (no
sdrun: the oracle), under sdrun with redirection on (AF_SD with zero copy)
and under sdrun with SD_ZEROCOPY=0.  Every byte is checked inside the
program; here the three runs must agree on the bytes, and sdctl's counters
must show that zero copy happened exactly when it should.  Also the
net.sd.zerocopy_threshold sysctl."""
import errno
import functools
import os
import pathlib
import subprocess

import pytest

from conftest import StatsDelta, TOP, prog

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
THRESHOLD = pathlib.Path("/proc/sys/net/sd/zerocopy_threshold")
DEFAULT_THRESHOLD = 16384

# The counters of enum sd_stat for zero copy (sdctl's names).
ZC = ("zc_sends", "zc_pages", "zc_remapped", "zc_copied")

# Scenario -> how its receiver takes the large messages:
#   aligned    into pool memory at page boundaries: pages are remapped
#   unaligned  where no page can be remapped: all copied, none remapped
#   copied     pieces smaller than a page among others: some copied
#   any        a mix; only that the records were received somehow
SCENARIOS = {
    "overwrite": "aligned",
    "free-reuse": "aligned",
    "same-twice": "aligned",
    "fork-between": "aligned",
    "fork-recv": "aligned",
    "recv-aligned": "aligned",
    "recv-unaligned": "unaligned",
    "partial": "copied",
    "mixed": "any",
    "iov": "any",
    "receiver-exits": "aligned",
    "receiver-killed": "aligned",
    "sender-exits": "aligned",
    "sender-killed": "aligned",
    "nonblocking": "aligned",
    "threads": "aligned",
    "relay": "aligned",
}
# The receiver goes away with bytes unread: TCP would send a reset too.
RESETS = {"receiver-exits", "receiver-killed"}


class Delta(StatsDelta):
    """sdctl's counters since construction; the zero-copy ones must exist."""

    def __call__(self):
        d = super().__call__()
        for name in ZC + ("zc_cow",):
            assert name in d, f"sdctl stats has no {name}: {sorted(d)}"
        return d


def run(name, sd, zerocopy=True, timeout=120):
    """Run one scenario; return the bytes it checked."""
    cmd = ([SDRUN] if sd else []) + [prog("sd_zcopy"), name]
    env = dict(os.environ)
    env["SD_ZEROCOPY"] = "1"
    if not zerocopy:
        env["SD_ZEROCOPY"] = "0"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         timeout=timeout)
    how = ("sdrun " if sd else "") + ("" if zerocopy else "SD_ZEROCOPY=0 ")
    assert out.returncode == 0, \
        f"{how}{name} exited {out.returncode}:\n{out.stdout}{out.stderr}"
    words = out.stdout.split()
    assert len(words) == 3 and words[:2] == ["ok", name], out.stdout
    return int(words[2])


@functools.lru_cache(maxsize=None)
def tcp_bytes(name):
    """The oracle: the scenario over TCP (no sdrun, no AF_SD at all)."""
    d = Delta()
    n = run(name, sd=False)
    got = d()
    assert got["connects"] == 0 and got["redirected"] == 0, got
    assert all(got[k] == 0 for k in ZC), got
    return n


def check_transport(name, d):
    """The scenario's sockets were AF_SD (redirected) and its connections
    ended as TCP's would have."""
    conns = 2 if name == "relay" else 1
    assert d["redirected"] >= 2 * conns, d
    assert d["connects"] >= conns and d["accepts"] >= conns, d
    assert d["fallback_no_listener"] == 0, d
    assert d["corrupt"] == 0, d
    if name in RESETS:
        assert d["resets"] >= 1, d
    else:
        assert d["resets"] == 0, d


def check_zero_copy(name, d):
    kind = SCENARIOS[name]
    assert d["zc_sends"] > 0, d
    assert d["zc_pages"] >= d["zc_sends"], d
    assert d["zc_remapped"] <= d["zc_pages"], d
    assert d["zc_remapped"] + d["zc_copied"] > 0, d
    if kind == "aligned":
        assert d["zc_remapped"] > 0, d
    elif kind == "unaligned":
        assert d["zc_copied"] > 0 and d["zc_remapped"] == 0, d
    elif kind == "copied":
        assert d["zc_copied"] > 0, d
    if name == "overwrite":
        # The sender rewrites each buffer while the pages are still queued.
        assert d["zc_cow"] > 0, d


def check_no_zero_copy(d):
    assert all(d[k] == 0 for k in ZC), d


def test_every_scenario_is_tested():
    out = subprocess.run([prog("sd_zcopy"), "--list"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert sorted(out) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_tcp(name, no_leak):
    assert tcp_bytes(name) > 0


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_zero_copy(name, redirect_on, no_leak):
    want = tcp_bytes(name)
    d = Delta()
    got = run(name, sd=True)
    delta = d()
    assert got == want
    check_transport(name, delta)
    check_zero_copy(name, delta)


@pytest.mark.parametrize("name", SCENARIOS)
def test_zero_copy_off(name, redirect_on, no_leak):
    """SD_ZEROCOPY=0: the same bytes over AF_SD, no page handed over."""
    want = tcp_bytes(name)
    d = Delta()
    got = run(name, sd=True, zerocopy=False)
    delta = d()
    assert got == want
    check_transport(name, delta)
    check_no_zero_copy(delta)


# ---- net.sd.zerocopy_threshold ----------------------------------------------

def write_threshold(value):
    """Write the sysctl; "OK" or the errno's name."""
    try:
        THRESHOLD.write_text(value)
        return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]


@pytest.fixture
def threshold():
    """The sysctl's value, put back after the test whatever it did."""
    old = THRESHOLD.read_text()
    try:
        yield old.strip()
    finally:
        THRESHOLD.write_text(old)
    assert THRESHOLD.read_text() == old


def test_threshold_default(threshold):
    assert int(threshold) == DEFAULT_THRESHOLD


def test_threshold_zero_turns_zero_copy_off(threshold, redirect_on, no_leak):
    want = tcp_bytes("overwrite")
    assert write_threshold("0\n") == "OK"
    assert THRESHOLD.read_text().strip() == "0"
    d = Delta()
    assert run("overwrite", sd=True) == want
    delta = d()
    check_transport("overwrite", delta)
    check_no_zero_copy(delta)

    assert write_threshold(threshold + "\n") == "OK"
    d = Delta()
    assert run("overwrite", sd=True) == want
    check_zero_copy("overwrite", d())


def test_threshold_above_every_message(threshold, redirect_on, no_leak):
    """mixed sends 1 MiB + 1 at most: with a 2 MiB threshold nothing goes
    by zero copy, and every byte still arrives."""
    want = tcp_bytes("mixed")
    assert write_threshold(str(2 << 20)) == "OK"
    d = Delta()
    assert run("mixed", sd=True) == want
    delta = d()
    check_transport("mixed", delta)
    check_no_zero_copy(delta)


@pytest.mark.parametrize("bad", ["-1", "-16384", "x", "16k", "1e6",
                                 "99999999999999999999"])
def test_threshold_rejects_bad_values(threshold, bad):
    assert write_threshold(bad + "\n") == "EINVAL", bad
    assert THRESHOLD.read_text().strip() == threshold
