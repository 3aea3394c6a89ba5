"""libsd must never lose, misdirect or hang (issue 45).

Each case of tests/progs/sd_integrity.c runs twice: over plain TCP, where
its transcript must be the one written here (so the TCP run checks the
test itself), and under sdrun with net.sd.redirect=1, where its sockets
must be redirected (AF_SD underneath) and its transcript the same.  The program checks every byte
and detects hangs itself (it prints "hang: STAGE" and exits 3); no verdict
depends on timing.  What each case does and why TCP answers so is in the
program; the cases are numbered as in the issue.
"""
import os
import subprocess

import pytest

from conftest import SDCTL, TOP, prog, redirect

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
AF_INET = 2

TWO_SENDERS = """\
send0: OK
send1: OK
stream0: ok 4194304
stream1: ok 4194304
eof: yes
"""

CLOSED_BEHIND = """\
old send: OK
new socket on the same fd: yes
send: OK
peer2 stream2: ok 16384
peer2 stream0: none
peer2 eof: yes
peer1 stream1: ok 8192
peer1 stream2: none
peer1 stream0: none
peer1 eof: yes
"""

EINTR_SEND = """\
handler: ran
send: partial
peer: got what send said, intact
peer eof: yes
"""

STRESS = "".join(
    [f"sender{k}: OK\n" for k in range(4)]
    + [line for c in range(2) for line in
       [f"conn{c} stream{k}: ok 524288\n" for k in range(4)]
       + [f"conn{c} eof: yes\n"]])

# (arguments, what TCP prints)
CASES = [
    # 1. Two threads send 4 MiB each on one connection, one with send(),
    # the other through a path past the fast path.
    ("two-senders dup", TWO_SENDERS),
    ("two-senders syscall", TWO_SENDERS),
    ("two-senders sendmmsg", TWO_SENDERS),
    # 2. A SIGUSR1 handler sends 512 bytes, 200 times, into the big send()
    # loop of the thread it interrupts.
    ("handler-sends", """\
send: OK
handler: 200 signals, OK
stream0: ok, all sent
stream1: ok 102400
eof: yes
"""),
    # 3. A socket closed behind the shim's back; a new socket on its
    # number, connected elsewhere, must write there, and the old peer
    # sees end of stream.
    ("closed-behind fdopen", CLOSED_BEHIND),
    ("closed-behind syscall", CLOSED_BEHIND),
    # 4. close() while another thread is in recv(), then a pipe on the
    # number: the recv returns the socket's bytes, the pipe keeps its own,
    # the peer sees end of stream once the recv returned.
    ("close-during-recv", """\
peer send: OK
recv: 1000 bytes
recv stream0: ok 1000
recv stream3: none
pipe stream3: ok 64
pipe stream0: none
peer stream3: none
peer eof: yes
"""),
    # 5. siglongjmp out of a SIGALRM handler that interrupted recv():
    # another thread's recv on the socket still gets data, and the
    # thread's next socket is made and works as its first was.
    ("longjmp-recv", """\
A: jumped out of recv
peer send: OK
B: stream0: ok 100
A: new socket echoes
A: new socket redirected as before the jump
"""),
    # 6. A signal whose handler has no SA_RESTART interrupts a blocking
    # recv, poll, epoll_wait or a full send: EINTR (a send that had
    # copied some returns its count).  With SA_RESTART the recv goes on
    # and returns the data sent after the handler ran; poll and
    # epoll_wait are never restarted (signal(7)).
    ("eintr recv norestart", "handler: ran\nrecv: EINTR\n"),
    ("eintr recv restart", "handler: ran\nrecv: 100 bytes\n"),
    ("eintr poll norestart", "handler: ran\npoll: EINTR\n"),
    ("eintr poll restart", "handler: ran\npoll: EINTR\n"),
    ("eintr epoll norestart", "handler: ran\nepoll: EINTR\n"),
    ("eintr epoll restart", "handler: ran\nepoll: EINTR\n"),
    ("eintr send norestart", EINTR_SEND),
    ("eintr send restart", EINTR_SEND),
    # 7. fork() while another thread waits in epoll_wait: the child's
    # epoll_ctl and epoll_wait work, it exits, the parent's waiter wakes.
    ("fork-epoll", """\
child: del OK, add OK, wait 0
child: exit 0
waiter: 1 OK
"""),
    # 8. SO_RCVLOWAT 10 with 3 bytes there: not readable, recv waits.
    ("rcvlowat", """\
recv before: EAGAIN
poll 0 ms: 0, events 0
poll 100 ms: 0, events 0
recv: 13 bytes
recv stream0: ok 13
"""),
    # 9. O_NONBLOCK set, then cleared through a dup: recv blocks.
    # 11. a vfork child closes a socket another thread of its parent is in
    # recv() on: the child has its own descriptor table, the parent's
    # socket and its call in flight are untouched.
    ("vfork-close", """\
child: closed and left
peer send: OK
recv: 100 bytes, intact
send after: OK
peer eof: yes
peer stream1: ok 100
"""),
    # pthread_cancel of a thread blocked in recv(): it never returns from
    # the call, and the close() after it still closes the socket.
    ("cancel-recv", """\
reader: cancelled
close: OK
peer eof: yes
"""),
    ("nonblock-dup", """\
recv while non-blocking: EAGAIN
flags of the original: blocking
recv: 7 bytes, intact
"""),
    # 10. 100 MiB of 4 MiB blocks, freed: RSS back within 32 MiB.
    ("memory", "rss at the peak: +100 MiB\nrss: ok\n"),
    # Four senders and four receivers on two connections, every call.
    ("stress", STRESS),
]


# The cases where a thread must be inside a blocking call when the other
# thread acts (a signal, a close, a fork) run under sdrun with a long spin:
# libsd's blocking calls spin in user space (200 us by default, SD_SPIN_US)
# before they sleep in the kernel, whose answers are TCP's.  The bugs of
# issue 45 live in that spin; with the default one the test's signal or
# close would nearly always come after it.  The program waits for such a
# thread for at most 2 s (asleep, over TCP: in the call), so with a 5 s
# spin it acts while the thread spins.  A right answer does not depend on
# how long libsd spins.
SPIN = {"SD_SPIN_US": "5000000"}
IN_CALL = ("close-during-recv", "longjmp-recv", "eintr", "fork-epoll", "vfork-close",
           "rcvlowat", "nonblock-dup")


@pytest.fixture(autouse=True)
def redirect_and_no_rules():
    subprocess.run([SDCTL, "rules", "flush"], check=True)
    with redirect():
        yield
    subprocess.run([SDCTL, "rules", "flush"], check=True)


def run(args, sdrun, extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(extra or {})
    cmd = ([SDRUN] if sdrun else []) + [prog("sd_integrity")] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=200,
                          env=env)


def redirected(r):
    """getsockopt(SOL_SD, SD_REDIRECTED) of the case's first socket (stderr
    "redirected N"): AF_INET when it was redirected, -errno for TCP."""
    for line in r.stderr.splitlines():
        if line.startswith("redirected "):
            return int(line.split()[1])
    return None


@pytest.mark.parametrize("case,expected", CASES, ids=[c[0] for c in CASES])
def test_same_as_tcp(case, expected):
    args = case.split()
    tcp = run(args, sdrun=False)
    assert (tcp.returncode, tcp.stdout) == (0, expected), \
        f"over TCP: exit {tcp.returncode}\n{tcp.stdout}{tcp.stderr}"
    sockets = case != "memory"
    if sockets:
        assert redirected(tcp) < 0, tcp.stderr
    sd = run(args, sdrun=True, extra=SPIN if args[0] in IN_CALL else None)
    if sockets:
        assert redirected(sd) == AF_INET, f"not redirected: {sd.stderr}"
    diff = [f"  {a!r:45} | {b!r}" for a, b in
            zip(tcp.stdout.splitlines() + [""] * 20,
                sd.stdout.splitlines() + [""] * 20) if a != b]
    assert (sd.returncode, sd.stdout) == (0, tcp.stdout), \
        (f"under sdrun: exit {sd.returncode}; lines that differ (TCP | sdrun):\n"
         + "\n".join(diff) + f"\nstderr: {sd.stderr}")
