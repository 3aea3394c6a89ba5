# Differences the conformance lane found (Documentation/testing.rst): run
# plainly and under sdrun with net.sd.redirect=1, in the guest, and compare.
import errno, signal, socket
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
def e(f):
    try: return f()
    except OSError as x: return errno.errorcode[x.errno]
print("TCP_INQ:", e(lambda: socket.socket().setsockopt(socket.IPPROTO_TCP, 36, 1)))
a = socket.socket(socket.AF_INET6); a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
a.bind(("::1", 0)); p = a.getsockname()[1]
print("bound, sendto(MSG_FASTOPEN) itself:", e(lambda: a.sendto(b"", socket.MSG_FASTOPEN, ("::1", p))))
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.socket()
print("sendto(b'x', MSG_FASTOPEN) to a listener:", e(lambda: c.sendto(b"x", socket.MSG_FASTOPEN, l.getsockname())))
x = socket.socket(); x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); x.bind(("0.0.0.0", 0)); x.listen()
y = socket.socket(socket.AF_INET6); y.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
print("v6 [::]:P after v4 0.0.0.0:P, reuseport: bind", e(lambda: y.bind(("::", x.getsockname()[1]))), "listen", e(lambda: y.listen()))
