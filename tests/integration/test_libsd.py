"""libsd's fast path: sharing a socket between threads and processes, and
system calls that do not grow with the number of messages.  (The
differential suite runs every behaviour through libsd as its third
column.)"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SDRUN = os.path.join(TOP, "build", "user", "lib", "shim", "sdrun")
PEER = os.path.join(HERE, "libsd_peer.py")


def run(*args, sdrun=True, timeout=600):
    cmd = ([SDRUN] if sdrun else []) + [sys.executable, PEER, *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("mode", ["threads", "processes"])
@pytest.mark.parametrize("sdrun", [True, False], ids=["libsd", "syscalls"])
def test_shared_socket_never_tears_a_send(mode, sdrun, no_leak):
    # 4 writers x 150 framed messages of up to 3 KB on one socket: each
    # message arrives whole, each writer's in order (checked in the peer).
    assert int(run("shared", mode, 4, 150, sdrun=sdrun)) > 4 * 150 * 16


def strace_count(args, names, env=None):
    """Run args under sdrun and strace -f -c; the calls of the names."""
    trace = os.path.join("/tmp", "strace-" + "-".join(map(str, args)) + ".txt")
    out = subprocess.run(["strace", "-f", "-c", "-o", trace, SDRUN,
                          sys.executable, PEER, *map(str, args)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    text = open(trace).read()
    count = 0
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$",
                     line)
        if m and m.group(2) in names:
            count += int(m.group(1))
    return count, text


def syscalls(n):
    # Only the calls a data path would make.
    return strace_count(("sender", n),
                        ("sendto", "recvfrom", "write", "read", "sendmsg",
                         "recvmsg", "ioctl", "poll", "ppoll", "sched_yield",
                         "futex"))


WAITS = ("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait")


def wait_syscalls(how, n):
    """Readiness and data system calls of an n-round-trip ping-pong
    that waits with how; libsd spins long enough (SD_SPIN_US) that no
    wait has to sleep in the kernel, so every one can be answered from
    the rings.  Not ioctl: a reader that once slept in the kernel's poll
    leaves READER_WAIT set, and the writer then wakes it with one ioctl
    per send (Documentation/libsd.rst, "Readiness")."""
    return strace_count(("pingpong", how, n),
                        WAITS + ("sendto", "recvfrom", "sched_yield", "futex"),
                        env=dict(os.environ, SD_SPIN_US="200000"))


@pytest.mark.parametrize("how", ["poll", "select", "epoll"])
def test_readiness_without_syscalls(how):
    few, _ = wait_syscalls(how, 100)
    many, text = wait_syscalls(how, 1000)
    # 900 more round trips: each side waits 900 more times.
    assert many - few < 90, f"{how}: {few} -> {many}\n{text}"


@pytest.mark.parametrize("sdrun", [True, False], ids=["libsd", "syscalls"])
def test_a_null_buffer_is_efault_not_a_crash(sdrun, no_leak):
    """What the kernel fails with EFAULT, libsd leaves to it (found by
    the fuzzer once receives with MSG_NOSIGNAL went the fast path)."""
    assert run("nullbuf", sdrun=sdrun).strip() == "ok"


def test_addressed_calls_take_the_fast_path():
    """sendto with the peer's address and recvfrom with an address buffer
    (sockperf's calls, MSG_NOSIGNAL on both) cost no system call per
    message either; libsd spins long enough that no receive sleeps."""
    names = ("sendto", "recvfrom", "ioctl", "sched_yield", "futex")
    env = dict(os.environ, SD_SPIN_US="200000")
    few, _ = strace_count(("addressed", 100), names, env=env)
    many, text = strace_count(("addressed", 1000), names, env=env)
    assert many - few < 90, f"{few} -> {many}\n{text}"


def test_syscalls_do_not_grow_with_messages():
    few, _ = syscalls(200)
    many, text = syscalls(5000)
    # The reader's reads after the sender is done are bounded by bytes,
    # 64 KiB each; the sender's 4,800 extra sends must cost nothing.
    assert many - few < 60, f"{few} -> {many}\n{text}"
