"""The rendezvous wire, version 3 (Documentation/rdma.rst), from Python.

For tests that play one of the two monitors (a fake monitor, a fake
client of a real one) and must send what a monitor never would: forged,
replayed, reflected or changed messages, or a well-formed message signed
with another key.  Network byte order throughout.

    s = Session.client_hello(sock, KEY)     # or Session.server_hello()
    sock.sendall(s.seal(rdma_request(port, sport, half)))
    body = s.open(read_msg(sock))            # None if its tag fails

A message builder returns the message without its tag, its header's
length counting the tag that seal() appends.  A session keys itself as the
module does (sd_auth.c): session key HMAC-SHA256(fabric key, LABEL ||
nonce_c || nonce_s); each message's tag HMAC-SHA256(session key, direction
|| sequence (u64) || message), direction b"C" from the connecting side,
b"S" from the answering side, sequence counted per direction from 0."""
import hashlib
import hmac
import os
import struct

MAGIC, VERSION = 0x53445256, 3
(T_REQUEST, T_REPLY, T_RDMA_REQUEST, T_HALF, T_CLOSE, T_LEAVE, T_MOVE,
 T_LEFT, T_HELLO) = range(1, 10)
ST_NO_RDMA, ST_ACCEPTED, ST_NO_LISTENER, ST_REFUSED, ST_BUSY = 1, 2, 3, 4, 5
CLOSE_CLEAN, CLOSE_RESET = 1, 2
HELLO_KEYED = 1
NONCE_LEN, TAG_LEN, HALF_LEN = 16, 32, 80
HELLO_LEN = 32
LABEL = b"AF_SD rendezvous v3"

# The fabric key the suites give both "hosts", and another one.
KEY = hashlib.sha256(b"af_sd test fabric key").digest()
OTHER_KEY = hashlib.sha256(b"another fabric").digest() * 2


def hdr(typ, length, magic=MAGIC, version=VERSION):
    return struct.pack("!IBBH", magic, version, typ, length)


def hello(nonce=None, flags=HELLO_KEYED, **kw):
    nonce = os.urandom(NONCE_LEN) if nonce is None else nonce
    return hdr(T_HELLO, HELLO_LEN, **kw) + struct.pack("!II", flags, 0) + \
        nonce


def request(dport, flags=0, reserved=0, **kw):
    return hdr(T_REQUEST, 16 + TAG_LEN, **kw) + \
        struct.pack("!IHH", flags, dport, reserved)


def reply(status, flags=1, reserved=b"\0\0\0", **kw):
    return hdr(T_REPLY, 16 + TAG_LEN, **kw) + struct.pack("!B", status) + \
        reserved + struct.pack("!I", flags)


def rdma_request(dport, sport, half, flags=1, uid=0, gid=0, **kw):
    return hdr(T_RDMA_REQUEST, 24 + HALF_LEN + TAG_LEN, **kw) + \
        struct.pack("!IHHII", flags, dport, sport, uid, gid) + half


def half_msg(half):
    return hdr(T_HALF, 8 + HALF_LEN + TAG_LEN) + half


def close_msg(how, reserved=b"\0\0\0", reserved2=0):
    return hdr(T_CLOSE, 16 + TAG_LEN) + struct.pack("!B", how) + reserved + \
        struct.pack("!I", reserved2)


def leave_msg(sent, took, copied, flags=0, kept=0):
    return hdr(T_LEAVE, 40 + TAG_LEN) + struct.pack("!QQQII", sent, took,
                                                    copied, flags, kept)


def move_msg(half):
    return hdr(T_MOVE, 8 + HALF_LEN + TAG_LEN) + half


def left_msg():
    return hdr(T_LEFT, 16 + TAG_LEN) + bytes(8)


def read_exact(sock, n):
    """n bytes, or fewer if the other side closes first."""
    got = b""
    while len(got) < n:
        d = sock.recv(n - len(got))
        if not d:
            break
        got += d
    return got


def read_msg(sock, limit=4096):
    """One message by its header's length (at most limit bytes), or what
    came before the end."""
    head = read_exact(sock, 8)
    if len(head) < 8:
        return head
    n = struct.unpack("!H", head[6:8])[0]
    return head + read_exact(sock, min(max(n, 8), limit) - 8)


def split(data):
    """Whole messages at the start of data, by their headers' lengths,
    and the rest."""
    out = []
    while len(data) >= 8:
        n = struct.unpack("!H", data[6:8])[0]
        if n < 8 or len(data) < n:
            break
        out.append(data[:n])
        data = data[n:]
    return out, data


def parse_hello(data):
    """(flags, nonce) of a HELLO as it must be; ValueError else."""
    if len(data) != HELLO_LEN or data[:8] != hdr(T_HELLO, HELLO_LEN):
        raise ValueError(f"not a HELLO: {data.hex()}")
    flags, reserved = struct.unpack("!II", data[8:16])
    if reserved or flags & ~HELLO_KEYED:
        raise ValueError(f"bad HELLO: {data.hex()}")
    return flags, data[16:]


class Session:
    def __init__(self, key, nonce_c, nonce_s, client):
        self.key = hmac.new(key, LABEL + nonce_c + nonce_s,
                            hashlib.sha256).digest()
        self.client = client
        self.tx = self.rx = 0
        self.their_hello = None

    def mac(self, direction, seq, body):
        return hmac.new(self.key, direction + struct.pack("!Q", seq) + body,
                        hashlib.sha256).digest()

    def seal(self, body):
        """body with its tag, as the next message this side sends."""
        tag = self.mac(b"C" if self.client else b"S", self.tx, body)
        self.tx += 1
        return body + tag

    def open(self, msg):
        """The message without its tag if the tag is the other side's for
        the next number, else None (and the number is not used)."""
        if len(msg) < TAG_LEN:
            return None
        body = msg[:-TAG_LEN]
        want = self.mac(b"S" if self.client else b"C", self.rx, body)
        if not hmac.compare_digest(want, msg[-TAG_LEN:]):
            return None
        self.rx += 1
        return body

    @classmethod
    def client_hello(cls, sock, key, nonce=None):
        """Our HELLO, then the monitor's: a session (None when the monitor
        says it has no key)."""
        mine = hello(nonce)
        sock.sendall(mine)
        raw = read_exact(sock, HELLO_LEN)
        flags, theirs = parse_hello(raw)
        if not flags & HELLO_KEYED:
            return None
        sess = cls(key, mine[16:], theirs, True)
        sess.their_hello = raw
        return sess

    @classmethod
    def server_hello(cls, sock, key, nonce=None):
        """Our HELLO, then the connecting monitor's: a session."""
        mine = hello(nonce)
        sock.sendall(mine)
        _, theirs = parse_hello(read_exact(sock, HELLO_LEN))
        return cls(key, theirs, mine[16:], False)
