"""Sockets of either family through one interface, for tests.

Python's socket module cannot bind or connect a socket of a family it does
not know (AF_SD), so bind, connect and accept go through libc with ctypes;
everything else (send, recv, options, shutdown) is Python's own, which
wraps any descriptor.  TCP sockets take the same path, so a scenario runs
identically on both.
"""
import ctypes
import errno
import os
import socket

AF_SD = 18
SOL_SD = 0x5344
SD_MMAP_OFFSETS = 1
SD_REUSEPORT = 2

# The global scope (dlopen(NULL)), not libc's own handle: under sdrun the
# shim's socket, bind, connect and accept4 come first there, as they do for
# a program that calls them directly.
libc = ctypes.CDLL(None, use_errno=True)


class SockaddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_uint8 * 4), ("zero", ctypes.c_uint8 * 8)]


class SockaddrIn6(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("flowinfo", ctypes.c_uint32), ("addr", ctypes.c_uint8 * 16),
                ("scope_id", ctypes.c_uint32)]


def sockaddr(host, port):
    """A sockaddr_in or sockaddr_in6 for host (a literal) and port."""
    if ":" in host:
        sa = SockaddrIn6(socket.AF_INET6, socket.htons(port))
        ctypes.memmove(sa.addr, socket.inet_pton(socket.AF_INET6, host), 16)
    else:
        sa = SockaddrIn(socket.AF_INET, socket.htons(port))
        ctypes.memmove(sa.addr, socket.inet_pton(socket.AF_INET, host), 4)
    return sa


class SockaddrStorage(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_uint8 * 126)]


def _decode(ss):
    if ss.family == socket.AF_INET:
        sa = ctypes.cast(ctypes.byref(ss), ctypes.POINTER(SockaddrIn)).contents
        return (socket.inet_ntop(socket.AF_INET, bytes(sa.addr)),
                socket.ntohs(sa.port))
    if ss.family == socket.AF_INET6:
        sa = ctypes.cast(ctypes.byref(ss), ctypes.POINTER(SockaddrIn6)).contents
        return (socket.inet_ntop(socket.AF_INET6, bytes(sa.addr)),
                socket.ntohs(sa.port))
    return (ss.family, None)


def _name(fn, s):
    ss = SockaddrStorage()
    n = ctypes.c_uint32(ctypes.sizeof(ss))
    if fn(s.fileno(), ctypes.byref(ss), ctypes.byref(n)):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return _decode(ss)


def sockname(s):
    """getsockname as (host, port), for any family (Python's own
    truncates the address of a family it does not know)."""
    return _name(libc.getsockname, s)


def peername(s):
    return _name(libc.getpeername, s)


def errname(code):
    return errno.errorcode.get(code, str(code)) if code else "OK"


class Family:
    """How a scenario makes sockets: 'tcp' or 'sd'."""

    def __init__(self, name):
        if name not in ("tcp", "sd"):
            raise ValueError(name)
        self.name = name

    def socket(self, v6=False, flags=0):
        domain = AF_SD if self.name == "sd" else (
            socket.AF_INET6 if v6 else socket.AF_INET)
        fd = libc.socket(domain, socket.SOCK_STREAM | flags, 0)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return socket.socket(fileno=fd)

    @staticmethod
    def bind(s, host, port=0):
        """0 or the errno name."""
        sa = sockaddr(host, port)
        rc = libc.bind(s.fileno(), ctypes.byref(sa), ctypes.sizeof(sa))
        return errname(ctypes.get_errno()) if rc else "OK"

    @staticmethod
    def connect(s, host, port):
        """'OK' or the errno name (EINPROGRESS for non-blocking)."""
        sa = sockaddr(host, port)
        rc = libc.connect(s.fileno(), ctypes.byref(sa), ctypes.sizeof(sa))
        return errname(ctypes.get_errno()) if rc else "OK"

    @staticmethod
    def accept(s, flags=0):
        fd = libc.accept4(s.fileno(), None, None, flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return socket.socket(fileno=fd)

    def listener(self, host="127.0.0.1", backlog=16, v6=False, opts=()):
        s = self.socket(v6=v6 or ":" in host)
        for level, name, value in opts:
            s.setsockopt(level, name, value)
        rc = self.bind(s, host, 0)
        if rc != "OK":
            raise OSError(errno.errorcode and getattr(errno, rc), rc)
        s.listen(backlog)
        return s, sockname(s)[1]

    def pair(self, host="127.0.0.1"):
        """A connected (client, server) pair and the listener."""
        lst, port = self.listener(host)
        c = self.socket(v6=":" in host)
        rc = self.connect(c, host, port)
        if rc != "OK":
            raise OSError(getattr(errno, rc), rc)
        s = self.accept(lst)
        return c, s, lst
