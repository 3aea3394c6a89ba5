"""Shared fixtures of the integration suite, which runs inside the test VM
(tests/vm/run) with af_sd.ko loaded."""
import contextlib
import ctypes
import json
import os
import pathlib
import re
import subprocess
import time

import pytest

from sdgenl import Genl

TOP = pathlib.Path(__file__).resolve().parents[2]
PROGS = TOP / "build" / "user" / "tests" / "progs"
AF_SD = 18

# As tests/vm/run's (which says why "lockdep" alone is not in it).
SPLAT = re.compile(r"WARNING:|BUG:|Oops|general protection|refcount_t|"
                   r"lockdep is turned off|DEBUG_LOCKS_WARN_ON|"
                   r"suspicious RCU usage|fasync list not empty|KASAN|UBSAN|"
                   r"unreferenced object|"
                   r"blocked for more than|Call Trace:")


def pytest_configure(config):
    """The markers that choose lanes (scripts/check)."""
    config.addinivalue_line(
        "markers", "debug_ci: in the debug kernel lane's CI subset "
        "(scripts/check debug-ci)")
    config.addinivalue_line(
        "markers", "debug_ci_skip: left out of that subset although its "
        "file is in it")


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


def _stat_names():
    """SD_STAT_* of the uapi header by value, lower case without the
    prefix: the names sdctl prints (tools/sdctl/stats.cpp); None for a
    retired one (__SD_STAT_RETIRED_N), which the module never sends."""
    text = (TOP / "include" / "uapi" / "linux" / "sd.h").read_text()
    body = re.search(r"enum sd_stat \{(.*?)__SD_STAT_MAX", text, re.S)
    if not body:
        raise AssertionError("no enum sd_stat in the uapi header")
    return [None if retired else name.lower() for retired, name in
            re.findall(r"^\s*(__)?SD_STAT_(?:RETIRED_)?(\w+),", body.group(1),
                       re.M)]


STAT_NAMES = _stat_names()


def sd_stats(netns=None):
    """The module's counters (of network namespace netns, ip netns's, else
    the calling thread's), by the names sdctl --json stats prints; asked
    in this process over generic netlink (sdgenl.py), since an sdctl
    process per call costs about half a second on the debug kernel.
    test_sdctl.py tests sdctl's own."""
    with in_netns(netns) if netns else contextlib.nullcontext():
        with Genl() as nl:
            got = nl.stats()
    unknown = [t for t in got if t >= len(STAT_NAMES) or not STAT_NAMES[t]]
    assert not unknown, \
        f"counters the uapi header does not name, or retired: {unknown}"
    return {STAT_NAMES[t]: v for t, v in got.items()}


def ns_key(netns, key):
    """Set (bytes) or clear (None) the fabric key of network namespace
    netns (ip netns's; None: the calling thread's), over generic netlink."""
    with in_netns(netns) if netns else contextlib.nullcontext():
        with Genl() as nl:
            if key is None:
                nl.key_del()
            else:
                nl.key_set(key)


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


class KernelLog:
    """The kernel log's records from now on, read from /dev/kmsg: no dmesg
    process per test, which costs about a second on the debug kernel."""

    def __init__(self):
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK |
                          os.O_CLOEXEC)
        os.lseek(self.fd, 0, os.SEEK_END)

    def new(self):
        """The records logged since the last call, as dmesg prints them."""
        lines = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                return lines
            except BrokenPipeError:
                # Records were overwritten before we read them (the
                # harness still reads the whole log from the console).
                lines.append("kernel log: records lost (kmsg overrun)")
                continue
            head, _, text = rec.decode(errors="replace").partition(";")
            fields = head.split(",")
            usec = int(fields[2]) if len(fields) > 2 else 0
            # A record's message is its first line; " KEY=VALUE" lines
            # after it are dictionary entries.
            lines.append(f"[{usec / 1e6:12.6f}] {text.split(chr(10))[0]}")

    def close(self):
        os.close(self.fd)


@pytest.fixture(scope="session")
def kmsg():
    log = KernelLog()
    yield log
    log.close()


def protocol_sockets(name="AF_SD", proc="/proc/net"):
    """The 'sockets' column of /proc/net/protocols for a protocol (of
    the calling thread's namespace with proc="/proc/thread-self/net")."""
    for line in pathlib.Path(proc, "protocols").read_text().splitlines():
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
def clean_kernel_log(kmsg):
    """Fail the test that left a kernel splat, naming it (the harness
    catches any splat at the end too, but not which test made it)."""
    kmsg.new()
    yield
    new = kmsg.new()
    bad = [line for line in new if SPLAT.search(line)]
    assert not bad, "kernel splat during the test:\n" + "\n".join(new[-80:])


def settled_sockets():
    """AF_SD sockets in use once those of the tests before have gone: a
    closed socket is freed after an RCU grace period, so a test that
    follows at once may still count some.  Waits up to 2 s for none."""
    wait_for(lambda: protocol_sockets() == 0, 2)
    return protocol_sockets()


@pytest.fixture
def no_leak():
    """Check that the test leaves no more AF_SD sockets than it found."""
    before = settled_sockets()
    yield
    assert wait_for(lambda: protocol_sockets() <= before), \
        f"AF_SD sockets in use: {protocol_sockets()} after, {before} before"


@pytest.fixture(scope="session", autouse=True)
def module_loaded():
    if not os.path.exists("/sys/module/af_sd"):
        pytest.exit("af_sd is not loaded: run this suite through tests/vm/run",
                    returncode=3)


# ---- network namespaces without a process per step --------------------------
#
# `ip netns exec NAME CMD` is two processes (ip, then CMD), and a process
# costs about half a second on the debug kernel: the namespace tests used
# to spend most of their time there.  in_netns() moves the calling thread
# into the namespace instead (setns(2) changes only that thread), so that
# what it reads under /proc/sys/net and /proc/thread-self/net, the sockets
# it makes and the processes it starts are the namespace's.

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name):
    """The calling thread in network namespace NAME (ip netns's) for the
    block, and back where it was after it."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(fd)
        finally:
            os.close(fd)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def nsrun(name, *cmd, **kw):
    """subprocess.run(cmd, **kw) in namespace NAME."""
    with in_netns(name):
        return subprocess.run(list(cmd), **kw)


def nspopen(name, *cmd, **kw):
    """subprocess.Popen(cmd, **kw) in namespace NAME."""
    with in_netns(name):
        return subprocess.Popen(list(cmd), **kw)


def ns_sysctl(name, key, value=None):
    """net.sd.KEY of namespace NAME: its value when value is None, else
    written, returning None or the error the write met (as text)."""
    path = f"/proc/sys/net/sd/{key}"
    with in_netns(name):
        if value is None:
            return pathlib.Path(path).read_text().strip()
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError as e:
            return f"{path}: {e.strerror}"
        try:
            os.write(fd, f"{value}\n".encode())
        except OSError as e:
            return f"{path} = {value}: {e.strerror}"
        finally:
            os.close(fd)
        return None


def ns_protocol_sockets(name, proto="AF_SD"):
    with in_netns(name):
        return protocol_sockets(proto, "/proc/thread-self/net")


def netns_del(*names):
    """Delete the namespaces of names that exist, with one ip process."""
    names = [n for n in names if os.path.exists(f"/run/netns/{n}")]
    if names:
        subprocess.run(["ip", "-batch", "-"], check=True, text=True,
                       input="".join(f"netns del {n}\n" for n in names),
                       capture_output=True)


def netns_pair(a, b, veth_a, veth_b, addr_a, addr_b):
    """Namespaces a and b, made anew, with lo up and joined by a veth pair
    (veth_a in a with addr_a/24, veth_b in b with addr_b/24): four ip
    processes where one per step took fifteen."""
    netns_del(a, b)
    for n in (a, b):
        subprocess.run(["ip", "netns", "add", n], check=True)

    def batch(name, *lines):
        nsrun(name, "ip", "-batch", "-", check=True, text=True,
              input="".join(f"{line}\n" for line in lines),
              capture_output=True)

    batch(a, "link set lo up",
          f"link add {veth_a} type veth peer name {veth_b} netns {b}",
          f"addr add {addr_a}/24 dev {veth_a}", f"link set {veth_a} up")
    batch(b, "link set lo up", f"addr add {addr_b}/24 dev {veth_b}",
          f"link set {veth_b} up")


@contextlib.contextmanager
def rxe_pair(veths, devs, addrs, tables):
    """Two soft-RoCE devices devs on the two ends veths of a veth pair, in
    the initial namespace (6.1's rxe works there only), with addresses
    addrs, and policy routing (tables) that sends each end's packets to
    the other's address out of its own end, so that every RDMA write
    crosses the pair.  Everything is undone at the end."""
    def sh(*cmd, check=True):
        out = subprocess.run(list(cmd), capture_output=True, text=True)
        if check and out.returncode:
            raise AssertionError(f"{cmd} exited {out.returncode}: "
                                 f"{out.stderr.strip()}")
    for mod in ("veth", "rdma_rxe", "ib_uverbs"):
        sh("modprobe", mod)
    sh("ip", "link", "del", veths[0], check=False)
    conf = pathlib.Path("/proc/sys/net/ipv4/conf")
    saved = {}
    rules = False
    try:
        sh("ip", "link", "add", veths[0], "type", "veth", "peer", "name",
           veths[1])
        for veth, addr in zip(veths, addrs):
            sh("ip", "addr", "add", f"{addr}/32", "dev", veth)
        for dev in ("all",) + tuple(veths):
            for key, value in (("rp_filter", "0"), ("accept_local", "1")):
                path = conf / dev / key
                saved[path] = path.read_text().strip()
                path.write_text(value)
        for veth in veths:
            sh("ip", "link", "set", veth, "up")
        sh("ip", "route", "add", addrs[1], "dev", veths[0], "table",
           str(tables[0]))
        sh("ip", "route", "add", addrs[0], "dev", veths[1], "table",
           str(tables[1]))
        rules = True
        sh("ip", "rule", "add", "pref", "10", "oif", veths[0], "lookup",
           str(tables[0]))
        sh("ip", "rule", "add", "pref", "11", "oif", veths[1], "lookup",
           str(tables[1]))
        # The local table after those two, so that each end's packets to
        # the other's address go out on the wire.
        sh("ip", "rule", "add", "pref", "100", "lookup", "local")
        sh("ip", "rule", "del", "pref", "0")
        for dev, veth in zip(devs, veths):
            sh("rdma", "link", "add", dev, "type", "rxe", "netdev", veth)
        yield
    finally:
        for dev in devs:
            sh("rdma", "link", "delete", dev, check=False)
        sh("ip", "link", "del", veths[0], check=False)
        if rules:
            sh("ip", "rule", "add", "pref", "0", "lookup", "local",
               check=False)
            for pref in ("100", "10", "11"):
                sh("ip", "rule", "del", "pref", pref, check=False)
        for path, value in saved.items():
            if path.parent.name == "all":
                path.write_text(value)
