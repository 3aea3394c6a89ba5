"""Signals under the preload shim (issue 45, items 2, 5 and 6).

tests/progs/sd_signals runs one scenario per run: handlers installed with
sigaction, signal, sysv_signal, sigset and siginterrupt and read back;
signals that interrupt blocking recv, poll, epoll_wait and send on
loopback TCP (with and without SA_RESTART, with SO_RCVTIMEO); a handler
that sends while its thread is inside a large send; a handler that
longjmps out of a recv; a vfork child that resets every handler
before exec, as CPython's subprocess does on its parent's memory.  Each prints a transcript that must be the same
plainly and under sdrun with net.sd.redirect=1 (the sockets are then
AF_SD and the fast path runs the interrupted calls).

The scenarios where a signal must end a fast-path spin (recv_*, poll_*,
epoll_*, send_eintr) need the fast path to poll sig::pending() and
report sig::interrupted() (lib/shim/signals.hpp): until it does they
fail with the backstop's data instead of EINTR.
"""
import pytest

from conftest import prog
from test_shim import run

SCENARIOS = ["actions", "recv_eintr", "recv_siginfo_eintr", "recv_restart",
             "recv_timeout_eintr", "poll_eintr", "epoll_eintr", "send_eintr",
             "handler_sends", "longjmp", "vfork_reset"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_signals_as_on_tcp(scenario, redirect_on):
    args = [prog("sd_signals"), scenario]
    plain = run(args, timeout=60)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    shimmed = run(args, sdrun=True, timeout=60)
    assert (shimmed.returncode, shimmed.stdout, shimmed.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr), \
        f"{scenario} differs under sdrun:\nplain: {plain}\nsdrun: {shimmed}"
