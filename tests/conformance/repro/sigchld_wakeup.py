# Differences the conformance lane found (Documentation/testing.rst): run
# plainly and under sdrun with net.sd.redirect=1, in the guest, and compare.
import os, select, signal, socket, sys, time, subprocess
class Boom(Exception): pass
def h(*a): raise Boom()
signal.signal(signal.SIGALRM, h)
r, w = os.pipe()
with_sock = len(sys.argv) > 1
if with_sock:
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
for name in ("epoll", "select", "poll"):
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    t = time.monotonic()
    try:
        if name == "epoll":
            ep = select.epoll(); ep.register(r, select.EPOLLIN)
            if with_sock: ep.register(a, select.EPOLLIN)
            ep.poll(4)
        elif name == "select":
            select.select([r] + ([a] if with_sock else []), [], [], 4)
        else:
            p = select.poll(); p.register(r, select.POLLIN)
            if with_sock: p.register(a, select.POLLIN)
            p.poll(4000)
        got = "returned"
    except Boom:
        got = "handler ran (Boom)"
    print(f"{name}{' +socket' if with_sock else ''}: {got} after {time.monotonic() - t:.1f} s", flush=True)
# SIGCHLD through set_wakeup_fd, as asyncio's SafeChildWatcher
rr, ww = os.pipe(); os.set_blocking(ww, False)
signal.set_wakeup_fd(ww)
signal.signal(signal.SIGCHLD, lambda *a: None)
ep = select.epoll(); ep.register(rr, select.EPOLLIN)
if with_sock: ep.register(a, select.EPOLLIN)
pr = subprocess.Popen(["sh", "-c", "exit 7"])
t = time.monotonic(); ev = ep.poll(4)
print(f"SIGCHLD wakeup fd{' +socket' if with_sock else ''}: {ev} after {time.monotonic() - t:.1f} s", flush=True)
