"""Raw generic netlink for the family "sd" of af_sd.ko, from Python, for
tests that must send what sdctl never would (malformed requests) or many
requests quickly.  Constants mirror include/uapi/linux/sd.h; see
Documentation/netlink.rst.

    nl = Genl()                      # resolves the family id
    r = nl.request(SD_CMD_RULE_ADD, attr_u8(SD_A_RULE_ACTION, 1) + ...)
    r.err, r.extack, r.replies       # errno (0 ok), kernel message, payloads
"""
import errno
import os
import socket
import struct

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_DUMP = 0x300
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200

NLMSGERR_ATTR_MSG = 1
NLMSGERR_ATTR_OFFS = 2
NLMSGERR_ATTR_MISS_TYPE = 5

GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

NLA_F_NESTED = 1 << 15

# enum sd_cmd
(SD_CMD_UNSPEC, SD_CMD_SOCK_GET, SD_CMD_LISTENER_GET, SD_CMD_RULE_GET,
 SD_CMD_RULE_ADD, SD_CMD_RULE_DEL, SD_CMD_RULE_FLUSH,
 SD_CMD_STATS_GET, SD_CMD_KEY_SET, SD_CMD_KEY_DEL,
 SD_CMD_KEY_GET, SD_CMD_FEATURES_GET) = range(12)
SD_CMD_MAX = SD_CMD_FEATURES_GET

# enum sd_attr
(SD_A_UNSPEC, SD_A_PAD, SD_A_SOCK_INODE, SD_A_SOCK_STATE, SD_A_SOCK_FAMILY,
 SD_A_SOCK_LOCAL, SD_A_SOCK_PEER, SD_A_SOCK_UID, SD_A_SOCK_PID,
 SD_A_SOCK_TRANSPORT, SD_A_SOCK_FALLBACK, SD_A_SOCK_TX_BYTES,
 SD_A_SOCK_RX_BYTES, SD_A_SOCK_TX_MSGS, SD_A_SOCK_RX_MSGS, SD_A_SOCK_TX_FILL,
 SD_A_SOCK_RX_FILL, SD_A_SOCK_TX_SIZE, SD_A_SOCK_RX_SIZE, SD_A_LISTEN_BACKLOG,
 SD_A_LISTEN_QUEUED, SD_A_LISTEN_GROUP, SD_A_RULE_ID, SD_A_RULE_POSITION,
 SD_A_RULE_ACTION, SD_A_RULE_DIR, SD_A_RULE_UID_MIN, SD_A_RULE_UID_MAX,
 SD_A_RULE_GID_MIN, SD_A_RULE_GID_MAX, SD_A_RULE_LOCAL, SD_A_RULE_REMOTE,
 SD_A_RULE_HITS, SD_A_RULE_COMMENT, SD_A_STATS, SD_A_KEY,
 SD_A_KEY_FPR, SD_A_MODULE_VERSION, SD_A_FEATURES, SD_A_SOCK_TX_PAGES,
 SD_A_SOCK_RX_PAGES) = range(41)
SD_A_MAX = SD_A_SOCK_RX_PAGES

# enum sd_addr_attr
(SD_A_ADDR_UNSPEC, SD_A_ADDR_IN6, SD_A_ADDR_PORT, SD_A_ADDR_PREFIX,
 SD_A_ADDR_PORT_MIN, SD_A_ADDR_PORT_MAX) = range(6)

SD_ACTION_ALLOW, SD_ACTION_DENY, SD_ACTION_TCP = 1, 2, 3
SD_DIR_CONNECT, SD_DIR_ACCEPT, SD_DIR_BIND = 1, 2, 4
SD_DIR_ALL = 7
SD_RULE_COMMENT_MAX = 64
SD_KEY_MIN_LEN, SD_KEY_MAX_LEN, SD_KEY_FPR_LEN = 32, 64, 8
SD_GENL_VERSION = 1


def attr(atype, payload):
    """One netlink attribute, padded to 4 bytes."""
    n = 4 + len(payload)
    return struct.pack("=HH", n, atype) + payload + b"\0" * (-n % 4)


def attr_u8(t, v):
    return attr(t, struct.pack("=B", v))


def attr_u16(t, v):
    return attr(t, struct.pack("=H", v))


def attr_u32(t, v):
    return attr(t, struct.pack("=I", v))


def attr_u64(t, v):
    return attr(t, struct.pack("=Q", v))


def attr_str(t, s):
    return attr(t, s.encode() + b"\0")


def nest(t, *inner):
    return attr(t | NLA_F_NESTED, b"".join(inner))


def mapped(v4):
    """::ffff:a.b.c.d as 16 bytes."""
    return b"\0" * 10 + b"\xff\xff" + socket.inet_aton(v4)


def parse_attrs(data):
    """{type: payload} (the last of each type wins), flags stripped."""
    out = {}
    while len(data) >= 4:
        n, t = struct.unpack_from("=HH", data)
        if n < 4 or n > len(data):
            break
        out[t & 0x3fff] = data[4:n]
        data = data[(n + 3) & ~3:]
    return out


def attr_list(data):
    """[(type, payload)] in order."""
    out = []
    while len(data) >= 4:
        n, t = struct.unpack_from("=HH", data)
        if n < 4 or n > len(data):
            break
        out.append((t & 0x3fff, data[4:n]))
        data = data[(n + 3) & ~3:]
    return out


class Reply:
    def __init__(self):
        self.err = 0            # errno, 0 for success
        self.extack = ""        # the kernel's message, if any
        self.miss_type = None   # NLMSGERR_ATTR_MISS_TYPE
        self.replies = []       # genl payloads (attributes), in order
        self.answered = False   # an ACK, an error or NLMSG_DONE came

    def __repr__(self):
        return (f"Reply(err={errno.errorcode.get(self.err, self.err)}, "
                f"extack={self.extack!r}, replies={len(self.replies)})")


class Genl:
    def __init__(self, family="sd", timeout=5.0):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                  NETLINK_GENERIC)
        self.sock.bind((0, 0))
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self.sock.settimeout(timeout)
        self.seq = 1
        self.family_id = GENL_ID_CTRL
        if family:
            r = self.request(CTRL_CMD_GETFAMILY,
                             attr_str(CTRL_ATTR_FAMILY_NAME, family),
                             msg_type=GENL_ID_CTRL, version=1)
            if r.err:
                raise OSError(r.err, f"genl family {family}: {r.extack}")
            self.family_id = struct.unpack(
                "=H", parse_attrs(r.replies[0])[CTRL_ATTR_FAMILY_ID])[0]

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def message(self, cmd, attrs=b"", flags=NLM_F_REQUEST | NLM_F_ACK,
                msg_type=None, version=SD_GENL_VERSION):
        """The bytes of one request (with its sequence number)."""
        self.seq += 1
        body = struct.pack("=BBH", cmd, version, 0) + attrs
        return struct.pack("=IHHII", 16 + len(body),
                           self.family_id if msg_type is None else msg_type,
                           flags, self.seq, 0) + body

    def send_raw(self, data):
        self.sock.send(data)

    def receive(self, seq=None):
        """Read until an ACK, an error or NLMSG_DONE; a Reply.  Raises
        socket.timeout if the kernel answers nothing."""
        seq = self.seq if seq is None else seq
        r = Reply()
        while not r.answered:
            data = self.sock.recv(1 << 20)
            while len(data) >= 16:
                n, mtype, flags, mseq, _ = struct.unpack_from("=IHHII", data)
                if n < 16 or n > len(data):
                    break
                msg, data = data[:n], data[(n + 3) & ~3:]
                if mseq != seq:
                    continue        # a late answer to an earlier request
                if mtype == NLMSG_ERROR:
                    code = struct.unpack_from("=i", msg, 16)[0]
                    r.err = -code
                    r.answered = True
                    off = 16 + 20
                    if not flags & NLM_F_CAPPED:
                        orig_len = struct.unpack_from("=I", msg, 20)[0]
                        off += (orig_len - 16 + 3) & ~3
                    if flags & NLM_F_ACK_TLVS:
                        self._extack(r, msg[off:])
                elif mtype == NLMSG_DONE:
                    r.answered = True
                    if len(msg) >= 20:
                        code = struct.unpack_from("=i", msg, 16)[0]
                        if code < 0:
                            r.err = -code
                    if flags & NLM_F_ACK_TLVS:
                        self._extack(r, msg[20:])
                else:
                    r.replies.append(msg[20:])
                    if not flags & NLM_F_MULTI:
                        # A do request's reply: the ACK follows.
                        pass
        return r

    @staticmethod
    def _extack(r, tlvs):
        a = parse_attrs(tlvs)
        if NLMSGERR_ATTR_MSG in a:
            r.extack = a[NLMSGERR_ATTR_MSG].rstrip(b"\0").decode(
                errors="replace")
        if NLMSGERR_ATTR_MISS_TYPE in a:
            r.miss_type = struct.unpack("=I", a[NLMSGERR_ATTR_MISS_TYPE])[0]

    def request(self, cmd, attrs=b"", flags=NLM_F_REQUEST | NLM_F_ACK,
                msg_type=None, version=SD_GENL_VERSION):
        self.send_raw(self.message(cmd, attrs, flags, msg_type, version))
        return self.receive()

    def dump(self, cmd, attrs=b""):
        return self.request(cmd, attrs,
                            flags=NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP)

    # ---- the family's commands, well formed ----------------------------

    def stats(self):
        r = self.request(SD_CMD_STATS_GET)
        if r.err:
            raise OSError(r.err, r.extack)
        nest_ = parse_attrs(r.replies[0])[SD_A_STATS]
        return {t: struct.unpack("=Q", v)[0] for t, v in attr_list(nest_)
                if t != 0}

    def rules(self):
        r = self.dump(SD_CMD_RULE_GET)
        if r.err:
            raise OSError(r.err, r.extack)
        return [parse_attrs(p) for p in r.replies]

    def rule_add(self, action=SD_ACTION_ALLOW, direction=SD_DIR_ALL,
                 extra=b""):
        r = self.request(SD_CMD_RULE_ADD,
                         attr_u8(SD_A_RULE_ACTION, action) +
                         attr_u8(SD_A_RULE_DIR, direction) + extra)
        if r.err:
            return r
        r.id = struct.unpack("=I", parse_attrs(r.replies[0])[SD_A_RULE_ID])[0]
        return r

    def flush(self):
        r = self.request(SD_CMD_RULE_FLUSH)
        if r.err:
            raise OSError(r.err, r.extack)

    def key_set(self, key):
        r = self.request(SD_CMD_KEY_SET, attr(SD_A_KEY, key))
        if r.err:
            raise OSError(r.err, r.extack)

    def key_del(self):
        """Forget the key; True if there was one."""
        r = self.request(SD_CMD_KEY_DEL)
        if r.err and r.err != errno.ENOENT:
            raise OSError(r.err, r.extack)
        return not r.err

    def key_fpr(self):
        """The key's fingerprint, None without a key."""
        r = self.request(SD_CMD_KEY_GET)
        if r.err:
            raise OSError(r.err, r.extack)
        return parse_attrs(r.replies[0]).get(SD_A_KEY_FPR)


def as_nobody(fn):
    """Run fn() in a child that dropped to uid/gid 65534 without
    capabilities; return what it returned (a small picklable value)."""
    import pickle
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            res = fn()
            os.write(wfd, pickle.dumps(("ok", res)))
        except BaseException as e:   # noqa: B902 - report everything
            os.write(wfd, pickle.dumps(("exc", repr(e))))
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise AssertionError(f"child failed: {value}")
    return value
