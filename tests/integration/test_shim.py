"""The preload shim (libsdpreload.so) and sdrun, in the guest.

While libsd's fast path is not there, every hook declines, so a program
under sdrun must behave exactly as without it: the same output, the same
exit status, the same bytes on TCP and on AF_SD.  The shim's own work is
checked too: calls on AF_SD sockets reach the hooks (SD_SHIM_TRACE), calls
on other descriptors never do, the fortify variants are caught, and
SO_REUSEPORT on an AF_SD socket becomes SOL_SD/SD_REUSEPORT.
"""
import collections
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import TOP, prog

SHIM_DIR = TOP / "build" / "user" / "lib" / "shim"
SDRUN = SHIM_DIR / "sdrun"
# SDRUN_SHIM (sdrun's own setting) tests another build of the shim.
SHIM = pathlib.Path(os.environ.get("SDRUN_SHIM") or SHIM_DIR / "libsdpreload.so")
TRAFFIC = pathlib.Path(__file__).with_name("shim_traffic.py")
PY = sys.executable
# Hooks of calls that take one descriptor and carry data or set it up.
FD_HOOKS = {"send", "sendto", "sendmsg", "sendmmsg", "recv", "recvfrom",
            "recvmsg", "recvmmsg", "read", "write", "readv", "writev",
            "bind", "listen", "connect", "accept", "accept4", "shutdown",
            "getsockopt", "setsockopt", "close", "dup", "dup2", "dup3",
            "fcntl", "ioctl", "poll", "ppoll", "select", "pselect",
            "epoll_wait", "epoll_pwait", "epoll_pwait2"}
# epoll_create, epoll_create1 and epoll_ctl reach their hooks on every call
# (the fast path keeps track of interest lists), as fork does.


@pytest.fixture(scope="module", autouse=True)
def built():
    for path in (SDRUN, SHIM):
        if not path.exists():
            pytest.fail(f"{path} is not built: run make first")


def run(args, sdrun=False, env=None, timeout=120, text=True):
    full = ([str(SDRUN)] if sdrun else []) + [str(a) for a in args]
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    return subprocess.run(full, capture_output=True, text=text, timeout=timeout, env=e)


def both(args, **kw):
    """Run args without and with sdrun; return both results."""
    return run(args, **kw), run(args, sdrun=True, **kw)


def same(args, **kw):
    plain, shimmed = both(args, **kw)
    assert (shimmed.returncode, shimmed.stdout, shimmed.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr), \
        f"{args} differs under sdrun:\nplain: {plain}\nsdrun: {shimmed}"
    return plain


def traced(args, tmp_path, name="trace"):
    """Run args under sdrun with SD_SHIM_TRACE; return the result and
    {hook: [reached, handled]} summed over the processes."""
    trace = tmp_path / name
    r = run(args, sdrun=True, env={"SD_SHIM_TRACE": str(trace)})
    counts = collections.defaultdict(lambda: [0, 0])
    if trace.exists():
        for line in trace.read_text().splitlines():
            _, call, asked, handled = line.split()
            counts[call][0] += int(asked)
            counts[call][1] += int(handled)
    return r, dict(counts)


# sdrun itself.

def test_sdrun_help():
    r = run([SDRUN, "--help"])
    assert r.returncode == 0
    assert r.stdout.startswith("usage: sdrun")
    assert str(SHIM_DIR / "libsdpreload.so") in r.stdout


def test_sdrun_errors(tmp_path):
    r = run([SDRUN])
    assert r.returncode == 2 and "no program given" in r.stderr
    r = run([SDRUN, "no-such-program-anywhere"])
    assert r.returncode == 127
    assert "no-such-program-anywhere: command not found" in r.stderr
    r = run([SDRUN, tmp_path / "missing"])
    assert r.returncode == 127 and "no such file" in r.stderr
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    r = run([SDRUN, plain])
    assert r.returncode == 126 and "not an executable file" in r.stderr
    r = run([SDRUN, "--bogus", "true"])
    assert r.returncode == 2 and "unknown option" in r.stderr
    r = run([SDRUN, "true"], env={"SDRUN_SHIM": str(tmp_path / "nope.so")})
    assert r.returncode == 2 and "no shim at" in r.stderr


def test_sdrun_appends_to_ld_preload():
    r = run([SDRUN, "sh", "-c", 'echo "$LD_PRELOAD"'],
            env={"LD_PRELOAD": "libm.so.6"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["libm.so.6", str(SHIM)]
    # Nested sdrun adds it once.
    r = run([SDRUN, SDRUN, "sh", "-c", 'echo "$LD_PRELOAD"'])
    assert r.stdout.split() == [str(SHIM)]


def test_shim_is_loaded_and_needs_no_cxx_runtime():
    r = run(["cat", "/proc/self/maps"], sdrun=True)
    assert r.returncode == 0
    assert str(SHIM) in r.stdout
    needed = subprocess.run(["objdump", "-p", str(SHIM)], capture_output=True,
                            text=True).stdout
    libs = [l.split()[1] for l in needed.splitlines() if l.strip().startswith("NEEDED")]
    # No C++ runtime in every program run under sdrun.
    assert "libc.so.6" in libs
    assert not [lib for lib in libs if "stdc++" in lib], libs


# Pass-through.

def test_cat_and_sh_unchanged(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(os.urandom(300000))
    r = same(["cat", f], text=False)
    assert r.returncode == 0 and r.stdout == f.read_bytes()
    r = same(["sh", "-c", f'printf "a\\nb\\n"; wc -c < "{f}"; cat "{f}" | od -An -tx1 | '
              f'tail -n1; echo err >&2; exit 7'])
    assert r.returncode == 7 and r.stdout.startswith("a\nb\n300000\n")
    same(["sh", "-c", "exec 3>&1; echo via-dup >&3; exec 3>&-; echo done"])


@pytest.mark.parametrize("family", ["tcp", "sd"])
def test_python_traffic_unchanged(family, no_leak):
    r = same([PY, TRAFFIC, family])
    assert r.returncode == 0, r.stderr
    assert '"bulk": [262144' in r.stdout


# What reaches the hooks.

def test_hooks_never_see_other_descriptors(tmp_path, no_leak):
    r, counts = traced([PY, TRAFFIC, "tcp"], tmp_path)
    assert r.returncode == 0, r.stderr
    # fork and the epoll set-up calls go to their hooks whatever the
    # family; nothing on a TCP socket, a pipe or a file does.
    assert counts.get("fork", [0])[0] >= 1
    assert not FD_HOOKS & set(counts), counts
    r, counts = traced(["sh", "-c", "cat /etc/hostname | wc -c"], tmp_path, "sh")
    assert r.returncode == 0
    assert not FD_HOOKS & set(counts), counts


def test_hooks_see_af_sd(tmp_path, no_leak):
    r, counts = traced([PY, TRAFFIC, "sd"], tmp_path)
    assert r.returncode == 0, r.stderr
    # What Python's socket, select and os modules call.  (sdsock makes
    # socket, bind, connect and accept4 through a ctypes handle of libc
    # itself, which the shim does not see; sd_fortify covers those.)
    for hook in ("listen", "send", "recv", "sendmsg", "recvmsg", "read",
                 "write", "select", "poll", "epoll_ctl", "epoll_wait",
                 "dup2", "shutdown", "close"):
        assert counts.get(hook, [0, 0])[0] > 0, f"{hook} never reached: {counts}"
    # os.dup is fcntl(F_DUPFD_CLOEXEC), setblocking ioctl(FIONBIO).
    assert counts.get("fcntl") or counts.get("dup"), counts
    # The default hooks handle nothing; the fast path's handle some.
    assert all(handled <= reached for reached, handled in counts.values()), counts


@pytest.mark.parametrize("family", ["sd", "tcp"])
def test_fortify_variants_reach_the_hooks(family, tmp_path, no_leak):
    exe = prog("sd_fortify")
    imports = subprocess.run(["nm", "-D", "--undefined-only", exe],
                             capture_output=True, text=True).stdout
    for chk in ("__read_chk", "__recv_chk", "__recvfrom_chk", "__poll_chk", "__ppoll_chk"):
        assert chk in imports, f"sd_fortify does not call {chk}"
    assert same([exe, family]).stdout == "ok\n"
    r, counts = traced([exe, family], tmp_path)
    assert r.stdout == "ok\n", r.stderr
    for hook in ("read", "recv", "recvfrom", "poll", "ppoll", "bind", "listen",
                 "connect", "accept", "write", "close"):
        reached = counts.get(hook, [0, 0])[0]
        assert (reached > 0) == (family == "sd"), f"{family} {hook}: {counts}"


# SO_REUSEPORT on AF_SD.

REUSEPORT = r"""
import errno, socket, sys
sys.path.insert(0, sys.argv[1])
from sdsock import Family, SOL_SD, SD_REUSEPORT, sockname
sd = Family("sd")
a = sd.socket()
try:
    a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
except OSError as e:
    print("refused", "EOPNOTSUPP" if e.errno == errno.EOPNOTSUPP else e.errno)
    sys.exit(0)
print("set", a.getsockopt(SOL_SD, SD_REUSEPORT),
      a.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))
assert sd.bind(a, "127.0.0.1", 0) == "OK"
a.listen(4)
port = sockname(a)[1]
b = sd.socket()
b.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
print("second bind", sd.bind(b, "127.0.0.1", port))
b.listen(4)
c = sd.socket()
print("connect", sd.connect(c, "127.0.0.1", port))
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
print("tcp", t.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))
for s in (a, b, c, t):
    s.close()
"""


def test_so_reuseport_maps_to_sd_reuseport(no_leak):
    here = str(pathlib.Path(__file__).parent)
    plain, shimmed = both([PY, "-c", REUSEPORT, here])
    assert plain.returncode == 0, plain.stderr
    # The kernel alone refuses it for AF_SD ...
    assert plain.stdout == "refused EOPNOTSUPP\n"
    # ... the shim maps it, and the kernel reads the same setting back.
    assert shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout.splitlines() == [
        "set 1 1", "second bind OK", "connect OK", "tcp 1"]
