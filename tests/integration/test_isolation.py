"""Isolation (issue 9): what a process cannot do to AF_SD connections
that are not its own, and limits it cannot get around through AF_SD.
(Network namespaces: test_sd_specific.py; memory cgroups:
test_sd_specific.py and test_zc_hostile.py.)"""
import errno
import mmap
import os
import subprocess
import sys
import textwrap

import pytest

from sdsock import Family
from test_sd_specific import offsets

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
HERE = os.path.dirname(os.path.abspath(__file__))
NOBODY = 65534


RLIMIT_PROG = textwrap.dedent("""
    import os, resource, sys
    sys.path.insert(0, %r)
    from sdsock import Family, errname
    sd = Family("sd")
    lst, port = sd.listener(backlog=64)
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
    dups = []
    try:
        while True:
            dups.append(os.dup(0))
    except OSError as e:
        print("dup", errname(e.errno))
    try:
        sd.socket()
        print("socket made")
    except OSError as e:
        print("socket", errname(e.errno))
    os.close(dups.pop())
    c = sd.socket()                       # the last descriptor
    print("connect", sd.connect(c, "127.0.0.1", port))
    try:
        sd.accept(lst)
        print("accepted")
    except OSError as e:
        print("accept", errname(e.errno))
    # The connection waited in the queue: with room again, accept takes
    # it, and it carries bytes.
    os.close(dups.pop())
    a = sd.accept(lst)
    c.sendall(b"still-here")
    print(a.recv(100).decode())
""")


def test_rlimit_nofile_is_kept_and_nothing_leaks(no_leak):
    r = subprocess.run([sys.executable, "-c", RLIMIT_PROG % HERE],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "dup EMFILE", "socket EMFILE", "connect OK", "accept EMFILE",
        "still-here"]


def as_nobody(prog, *args):
    """Run prog as an unprivileged user (no capabilities)."""
    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run([sys.executable, "-c", prog, *map(str, args)],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=drop, cwd="/")


PEEK_PROG = textwrap.dedent("""
    import os, sys
    pid, fd = sys.argv[1], sys.argv[2]
    out = []
    for what, fn in (
            ("fd", lambda: os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)),
            ("mem", lambda: os.open(f"/proc/{pid}/mem", os.O_RDONLY)),
            ("map_files", lambda: os.listdir(f"/proc/{pid}/map_files")),
            ("pidfd_getfd", lambda: os.pidfd_open(int(pid)))):
        try:
            r = fn()
            if what == "pidfd_getfd":
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                got = libc.syscall(438, r, int(fd), 0)   # pidfd_getfd
                if got < 0:
                    raise OSError(ctypes.get_errno(), "pidfd_getfd")
            out.append(what + "=open")
        except OSError as e:
            out.append(what + "=" + str(e.errno))
    print(" ".join(out))
""")


def test_another_user_cannot_reach_a_connections_rings(no_leak):
    """The rings are reachable only through the endpoint's descriptor:
    another user's process can neither open it through /proc, nor read
    the endpoint's memory, nor list its mappings, nor take the
    descriptor with pidfd_getfd."""
    c, s, lst = SD.pair()
    tx, _ = offsets(c)
    m = mmap.mmap(c.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    c.sendall(b"secret")
    r = as_nobody(PEEK_PROG, os.getpid(), c.fileno())
    assert r.returncode == 0, r.stderr
    got = dict(x.split("=") for x in r.stdout.split())
    assert got["fd"] in (str(errno.EACCES), str(errno.ENXIO)), got
    assert got["mem"] == str(errno.EACCES), got
    assert got["map_files"] in (str(errno.EACCES), str(errno.EPERM)), got
    # pidfd_open works on any process; taking a descriptor needs
    # PTRACE_MODE_ATTACH, which another user does not have.
    assert got["pidfd_getfd"] == str(errno.EPERM), got
    assert s.recv(6) == b"secret"
    m.close()
    for x in (c, s, lst):
        x.close()


def test_a_mapping_keeps_its_connection_and_no_more(no_leak):
    """A ring mapping holds the socket's file as a duplicate descriptor
    would (as AF_XDP's and packet sockets' mappings do): after close()
    the connection lives until munmap, and then the peer sees the end.  A
    new connection's rings start zeroed: nothing of an old ring shows."""
    c, s, lst = SD.pair()
    tx, _ = offsets(c)
    m = mmap.mmap(c.fileno(), tx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    c.sendall(b"old bytes " * 1000)
    got = b""
    while len(got) < 10000:
        got += s.recv(10000)
    c.close()
    s.settimeout(1)
    with pytest.raises(TimeoutError):
        s.recv(10)
    m.close()
    s.settimeout(10)
    assert s.recv(10) == b""
    c2, s2, lst2 = SD.pair()
    tx2, rx2 = offsets(c2)
    for off, ring in ((0, tx2), (0x80000000, rx2)):
        m2 = mmap.mmap(c2.fileno(), ring["mmap_len"], mmap.MAP_SHARED,
                       mmap.PROT_READ, offset=off)
        assert m2[ring["data"]:ring["data"] + ring["size"]] == \
            bytes(ring["size"])
        m2.close()
    c2.sendall(b"fresh")
    assert s2.recv(10) == b"fresh"
    for x in (s, lst, c2, s2, lst2):
        x.close()
