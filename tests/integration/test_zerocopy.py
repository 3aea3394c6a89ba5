"""Zero copy (include/uapi/linux/sd.h, "Zero copy"): the adversarial
scenarios of tests/progs/sd_zcopy.c, each run three ways: over TCP (no
sdrun: the oracle), under sdrun with redirection on (AF_SD with zero copy)
and under sdrun with SD_ZEROCOPY=0; a few also with SD_ZEROCOPY unset
(on by default next to glibc's malloc) and next to jemalloc (off by
default, on with SD_ZEROCOPY=1).  Every byte is checked inside the
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

# In the debug kernel lane's CI subset (Documentation/testing.rst), but
# for the tests marked debug_ci_skip: the plain TCP reference runs, the
# copy-only runs and the runs with zero copy on by default, whose calls
# are those of the runs with SD_ZEROCOPY=1.
pytestmark = pytest.mark.debug_ci

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
# A program's own allocator (Debian's libjemalloc2, which Redis links).
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
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
    "fionread": "aligned",
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


def run(name, sd, zerocopy="1", timeout=120, jemalloc=False):
    """Run one scenario; return the bytes it checked.  zerocopy is the
    value of SD_ZEROCOPY, or None to leave it unset; jemalloc puts
    libjemalloc.so.2 after the shim in LD_PRELOAD, so that the program's
    malloc is jemalloc's, as if it linked it."""
    cmd = [prog("sd_zcopy"), name]
    if jemalloc:
        assert os.path.exists(JEMALLOC), \
            f"{JEMALLOC} is missing (libjemalloc2: scripts/install-deps)"
        cmd = ["sh", "-c", f'LD_PRELOAD="$LD_PRELOAD {JEMALLOC}" exec "$@"',
               "sh"] + cmd
    if sd:
        cmd = [SDRUN] + cmd
    env = dict(os.environ)
    env.pop("SD_ZEROCOPY", None)
    if zerocopy is not None:
        env["SD_ZEROCOPY"] = zerocopy
    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         timeout=timeout)
    how = (("sdrun " if sd else "") + ("jemalloc " if jemalloc else "") +
           ("" if zerocopy is None else f"SD_ZEROCOPY={zerocopy} "))
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


@pytest.mark.debug_ci_skip
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_tcp(name, no_leak):
    assert tcp_bytes(name) > 0


def under_sdrun(name, **kw):
    """Run the scenario under sdrun (run()'s keywords): the same bytes as
    over TCP, on AF_SD connections; the counters' delta."""
    want = tcp_bytes(name)
    d = Delta()
    got = run(name, sd=True, **kw)
    delta = d()
    assert got == want
    check_transport(name, delta)
    return delta


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_zero_copy(name, redirect_on, no_leak):
    check_zero_copy(name, under_sdrun(name))


@pytest.mark.debug_ci_skip
@pytest.mark.parametrize("name", SCENARIOS)
def test_zero_copy_off(name, redirect_on, no_leak):
    """SD_ZEROCOPY=0: the same bytes over AF_SD, no page handed over."""
    check_no_zero_copy(under_sdrun(name, zerocopy="0"))


# ---- SD_ZEROCOPY unset, and next to another allocator ------------------------

DEFAULT_SCENARIOS = ["overwrite", "fork-between", "threads", "relay"]


@pytest.mark.debug_ci_skip
@pytest.mark.parametrize("name", DEFAULT_SCENARIOS)
def test_zero_copy_by_default(name, redirect_on, no_leak):
    """SD_ZEROCOPY unset, glibc's malloc: zero copy is on."""
    check_zero_copy(name, under_sdrun(name, zerocopy=None))


@pytest.mark.debug_ci_skip
@pytest.mark.parametrize("name", DEFAULT_SCENARIOS)
def test_jemalloc_default_off(name, redirect_on, no_leak):
    """The program's malloc is jemalloc's: the shim forwards to it and
    stays out (no pool, no page handed over), and every byte arrives."""
    check_no_zero_copy(under_sdrun(name, zerocopy=None, jemalloc=True))


@pytest.mark.parametrize("name", DEFAULT_SCENARIOS)
def test_jemalloc_forced_on(name, redirect_on, no_leak):
    """SD_ZEROCOPY=1 next to jemalloc: large blocks from the pool, small
    ones jemalloc's, and zero copy as with glibc."""
    check_zero_copy(name, under_sdrun(name, jemalloc=True))


NONBLOCKING_FILL = """
import socket
lst = socket.create_server(("127.0.0.1", 0))
c = socket.create_connection(lst.getsockname())
s, _ = lst.accept()
data = bytes(range(256)) * (4 << 12)        # 4 MiB, from malloc
c.setblocking(False)
sent = 0
while sent < len(data):
    try:
        sent += c.send(memoryview(data)[sent:])
    except BlockingIOError:
        break
c.setblocking(True)
c.shutdown(socket.SHUT_WR)
got = bytearray()
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    got += b
assert bytes(got) == data[:sent]
print(sent)
"""


@pytest.mark.parametrize("zerocopy", [
    None, pytest.param("0", marks=pytest.mark.debug_ci_skip)],
    ids=["zc", "copy"])
def test_nonblocking_send_queues_pages_beside_the_ring(zerocopy, redirect_on,
                                                       no_leak):
    """A deliberate difference from TCP (af_sd.rst): with zero copy a
    non-blocking send of pool memory queues its pages beside the ring
    and takes all of 4 MiB; by copying it stops when the ring is full."""
    env = dict(os.environ)
    env.pop("SD_ZEROCOPY", None)
    if zerocopy is not None:
        env["SD_ZEROCOPY"] = zerocopy
    d = Delta()
    r = subprocess.run([SDRUN, "python3", "-c", NONBLOCKING_FILL], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sent = int(r.stdout)
    delta = d()
    assert delta["redirected"] >= 2, delta
    if zerocopy is None:
        assert sent == 4 << 20
        assert delta["zc_sends"] > 0, delta
    else:
        assert 0 < sent < 1 << 20
        check_no_zero_copy(delta)


def test_jemalloc_without_sdrun():
    """The oracle side of the jemalloc runs works too (TCP, no shim)."""
    assert run("overwrite", sd=False, jemalloc=True) == tcp_bytes("overwrite")


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
