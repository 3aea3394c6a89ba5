"""The generic netlink family "sd" refuses what it cannot act on.

Raw requests from Python (sdgenl.py), each malformed in one way, must be
refused with the errno the kernel's policy machinery gives: EINVAL for an
integer attribute of the wrong size, a bad mask, a bad nest, a missing or
an unexpected attribute; ERANGE for an integer out of range; EINVAL or
ERANGE for a binary or string attribute of the wrong size (the netlink core
answers ERANGE for "failed policy validation" and EINVAL for the strict
checks, and which one applies depends on how the policy spells the
length); EOPNOTSUPP for an unknown command; EPERM for a mutating command
without CAP_NET_ADMIN; ENOENT for a rule that does not exist.  It must
change nothing, must leave no splat (conftest checks the
kernel log after every test) and must leave the family working."""
import errno
import hashlib
import os
import pathlib
import random
import socket
import struct

import pytest

from sdgenl import (NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
                    SD_A_ADDR_IN6, SD_A_ADDR_PORT, SD_A_ADDR_PORT_MAX,
                    SD_A_ADDR_PORT_MIN, SD_A_ADDR_PREFIX, SD_A_MAX, SD_A_PAD,
                    SD_A_RULE_ACTION, SD_A_RULE_COMMENT, SD_A_RULE_DIR,
                    SD_A_RULE_GID_MIN, SD_A_RULE_HITS, SD_A_RULE_ID,
                    SD_A_RULE_LOCAL, SD_A_RULE_POSITION, SD_A_RULE_REMOTE,
                    SD_A_RULE_UID_MAX, SD_A_RULE_UID_MIN, SD_A_SOCK_INODE,
                    SD_A_STATS, SD_ACTION_ALLOW, SD_ACTION_DENY, SD_ACTION_TCP,
                    SD_A_KEY, SD_A_KEY_FPR, SD_CMD_KEY_DEL, SD_CMD_KEY_GET,
                    SD_A_FEATURES, SD_A_MODULE_VERSION, SD_CMD_FEATURES_GET,
                    SD_CMD_KEY_SET, SD_KEY_FPR_LEN,
                    SD_CMD_LISTENER_GET, SD_CMD_MAX, SD_CMD_RULE_ADD,
                    SD_CMD_RULE_DEL, SD_CMD_RULE_FLUSH, SD_CMD_RULE_GET,
                    SD_CMD_SOCK_GET, SD_CMD_STATS_GET, SD_CMD_UNSPEC,
                    SD_DIR_ALL, SD_DIR_CONNECT, SD_RULE_COMMENT_MAX, Genl,
                    as_nobody, attr, attr_str, attr_u8, attr_u16, attr_u32,
                    attr_u64, mapped, nest, parse_attrs)
from sdsock import Family

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci

SD = Family("sd")
ACTION = attr_u8(SD_A_RULE_ACTION, SD_ACTION_DENY)
DIR = attr_u8(SD_A_RULE_DIR, SD_DIR_CONNECT)


@pytest.fixture
def nl():
    """A family socket; the rules are empty before and after, and the
    family and the socket family still work after the test."""
    g = Genl()
    g.flush()
    # A test that adds rules itself says so, and checks what it expects.
    g.adds_rules = False
    yield g
    try:
        # No test leaves a key behind (the fuzz may clear one: none set).
        assert g.key_fpr() is None, "a test left a fabric key set"
        if not g.adds_rules:
            assert g.rules() == [], "a refused request left a rule behind"
        assert g.stats()                     # a do request still works
        c, s, lst = SD.pair()                # and so does the module
        c.sendall(b"ping")
        assert s.recv(4) == b"ping"
        for x in (c, s, lst):
            x.close()
    finally:
        g.flush()
        g.close()


def add(nl, *attrs):
    return nl.request(SD_CMD_RULE_ADD, b"".join(attrs))


# A binary or string attribute of the wrong size.
BAD_SIZE = (errno.EINVAL, errno.ERANGE)


def refused(r, err):
    errs = err if isinstance(err, tuple) else (err,)
    names = "/".join(errno.errorcode[e] for e in errs)
    assert r.err in errs, f"expected {names}, got {r}"
    return r


# ---- commands ------------------------------------------------------------

@pytest.mark.parametrize("cmd", [SD_CMD_UNSPEC, SD_CMD_MAX + 1, 99, 255])
def test_unknown_command(nl, cmd):
    refused(nl.request(cmd), errno.EOPNOTSUPP)
    refused(nl.dump(cmd), errno.EOPNOTSUPP)


def test_dump_of_a_do_only_command(nl):
    refused(nl.request(SD_CMD_RULE_ADD, ACTION + DIR,
                       flags=NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP),
            errno.EOPNOTSUPP)


@pytest.mark.parametrize("cmd", [SD_CMD_SOCK_GET, SD_CMD_LISTENER_GET,
                                 SD_CMD_RULE_GET])
def test_do_of_a_dump_only_command(nl, cmd):
    refused(nl.request(cmd), errno.EOPNOTSUPP)


# ---- attribute lengths and types ------------------------------------------

@pytest.mark.parametrize("bad", [
    attr(SD_A_RULE_POSITION, b"\0\0"),            # u32 of 2 bytes
    attr(SD_A_RULE_POSITION, b"\0" * 8),          # u32 of 8 bytes
    attr(SD_A_RULE_UID_MIN, b""),                 # u32 of 0 bytes
], ids=["u32-short", "u32-long", "u32-empty"])
def test_attribute_of_wrong_length(nl, bad):
    refused(add(nl, ACTION, DIR, bad), errno.EINVAL)


def test_address_of_wrong_length(nl):
    refused(add(nl, ACTION, DIR,
                nest(SD_A_RULE_LOCAL, attr(SD_A_ADDR_IN6, b"\x7f\0\0\1"))),
            BAD_SIZE)
    refused(add(nl, ACTION, DIR,
                nest(SD_A_RULE_REMOTE, attr(SD_A_ADDR_IN6, b"\0" * 17))),
            BAD_SIZE)


@pytest.mark.parametrize("bad", [
    attr_u32(SD_A_RULE_ACTION, SD_ACTION_DENY),   # u32 where u8
    attr_u16(SD_A_RULE_ACTION, SD_ACTION_DENY),   # u16 where u8
    attr_u64(SD_A_RULE_ACTION, SD_ACTION_DENY),   # u64 where u8
], ids=["u32", "u16", "u64"])
def test_attribute_of_wrong_type(nl, bad):
    refused(add(nl, bad, DIR), errno.EINVAL)


def test_port_of_wrong_type(nl):
    refused(add(nl, ACTION, DIR,
                nest(SD_A_RULE_LOCAL, attr_u32(SD_A_ADDR_PORT_MIN, 80))),
            errno.EINVAL)


# ---- required attributes --------------------------------------------------

def test_rule_add_without_action(nl):
    r = refused(add(nl, DIR), errno.EINVAL)
    assert r.miss_type == SD_A_RULE_ACTION or r.extack, r


def test_rule_add_without_dir(nl):
    r = refused(add(nl, ACTION), errno.EINVAL)
    assert r.miss_type == SD_A_RULE_DIR or r.extack, r


def test_rule_add_without_anything(nl):
    refused(add(nl), errno.EINVAL)


def test_rule_del_without_id(nl):
    r = refused(nl.request(SD_CMD_RULE_DEL), errno.EINVAL)
    assert r.miss_type == SD_A_RULE_ID or r.extack, r


# ---- values out of range --------------------------------------------------

@pytest.mark.parametrize("bad,err", [
    (attr_u8(SD_A_RULE_ACTION, 7), errno.ERANGE),
    (attr_u8(SD_A_RULE_ACTION, 0), errno.ERANGE),
    (attr_u8(SD_A_RULE_ACTION, 255), errno.ERANGE),
], ids=["action-7", "action-0", "action-255"])
def test_action_out_of_range(nl, bad, err):
    r = refused(add(nl, bad, DIR), err)
    assert r.extack, "no extended ACK message"


@pytest.mark.parametrize("dirs", [SD_DIR_ALL, 0x04, 0x03])
def test_tcp_action_is_for_connect_only(nl, dirs):
    r = refused(add(nl, attr_u8(SD_A_RULE_ACTION, SD_ACTION_TCP),
                    attr_u8(SD_A_RULE_DIR, dirs)), errno.EINVAL)
    assert "connect" in (r.extack or ""), r.extack


@pytest.mark.parametrize("value", [0x80, 0x08, 0xff])
def test_dir_with_unknown_bits(nl, value):
    r = refused(add(nl, ACTION, attr_u8(SD_A_RULE_DIR, value)), errno.EINVAL)
    assert r.extack, "no extended ACK message"


def test_dir_without_any_direction(nl):
    # A rule that applies to nothing would never be acted on.
    refused(add(nl, ACTION, attr_u8(SD_A_RULE_DIR, 0)), errno.EINVAL)


@pytest.mark.parametrize("prefix", [129, 200, 255])
def test_prefix_out_of_range(nl, prefix):
    r = refused(add(nl, ACTION, DIR,
                    nest(SD_A_RULE_REMOTE,
                         attr(SD_A_ADDR_IN6, mapped("10.0.0.0")),
                         attr_u8(SD_A_ADDR_PREFIX, prefix))), errno.ERANGE)
    assert r.extack, "no extended ACK message"


def test_port_range_min_above_max(nl):
    r = refused(add(nl, ACTION, DIR,
                    nest(SD_A_RULE_LOCAL, attr_u16(SD_A_ADDR_PORT_MIN, 2000),
                         attr_u16(SD_A_ADDR_PORT_MAX, 1000))), errno.EINVAL)
    assert r.extack, "no extended ACK message"


def test_uid_range_min_above_max(nl):
    refused(add(nl, ACTION, DIR, attr_u32(SD_A_RULE_UID_MIN, 10),
                attr_u32(SD_A_RULE_UID_MAX, 5)), errno.EINVAL)


# ---- strings ----------------------------------------------------------------

def test_comment_too_long(nl):
    nl.adds_rules = True
    # SD_RULE_COMMENT_MAX bytes, the NUL included.
    longest = "c" * (SD_RULE_COMMENT_MAX - 1)
    r = add(nl, ACTION, DIR, attr_str(SD_A_RULE_COMMENT, longest))
    assert r.err == 0, r
    (rule,) = nl.rules()
    assert rule[SD_A_RULE_COMMENT].rstrip(b"\0").decode() == longest
    nl.flush()
    refused(add(nl, ACTION, DIR,
                attr_str(SD_A_RULE_COMMENT, "c" * SD_RULE_COMMENT_MAX)),
            BAD_SIZE)
    refused(add(nl, ACTION, DIR, attr_str(SD_A_RULE_COMMENT, "c" * 4000)),
            BAD_SIZE)
    assert nl.rules() == []


# ---- attributes a command does not take -----------------------------------

@pytest.mark.parametrize("bad", [
    attr_u64(SD_A_RULE_HITS, 5),
    attr_u64(SD_A_SOCK_INODE, 1234),
    attr_u32(SD_A_RULE_ID, 1),
    attr(SD_A_PAD, b""),
    nest(SD_A_STATS),
    attr_u32(SD_A_MAX + 1, 0),
    attr_u32(200, 0),
], ids=["hits", "inode", "id", "pad", "stats", "max+1", "200"])
def test_rule_add_with_attribute_it_does_not_take(nl, bad):
    r = refused(add(nl, ACTION, DIR, bad), errno.EINVAL)
    assert r.extack, "no extended ACK message"


def test_rule_match_with_single_port(nl):
    # Rules match port ranges (PORT_MIN/MAX); PORT belongs to sockets.
    refused(add(nl, ACTION, DIR,
                nest(SD_A_RULE_LOCAL, attr_u16(SD_A_ADDR_PORT, 80))),
            errno.EINVAL)


def test_rule_match_with_unknown_nested_type(nl):
    refused(add(nl, ACTION, DIR, nest(SD_A_RULE_LOCAL, attr_u32(40, 1))),
            errno.EINVAL)


def test_rule_del_with_extra_attribute(nl):
    nl.adds_rules = True
    r = nl.rule_add(extra=b"")
    assert r.err == 0, r
    refused(nl.request(SD_CMD_RULE_DEL, attr_u32(SD_A_RULE_ID, r.id) +
                       ACTION), errno.EINVAL)
    assert len(nl.rules()) == 1
    nl.flush()


@pytest.mark.parametrize("cmd", [SD_CMD_RULE_FLUSH, SD_CMD_STATS_GET])
def test_attribute_on_a_command_without_attributes(nl, cmd):
    refused(nl.request(cmd, attr_u32(SD_A_RULE_ID, 1)), errno.EINVAL)


@pytest.mark.parametrize("cmd", [SD_CMD_SOCK_GET, SD_CMD_LISTENER_GET,
                                 SD_CMD_RULE_GET])
def test_attribute_on_a_dump(nl, cmd):
    refused(nl.dump(cmd, attr_u32(SD_A_RULE_ID, 1)), errno.EINVAL)


def test_flush_with_attribute_keeps_the_rules(nl):
    nl.adds_rules = True
    assert nl.rule_add().err == 0
    refused(nl.request(SD_CMD_RULE_FLUSH, ACTION), errno.EINVAL)
    assert len(nl.rules()) == 1
    nl.flush()


# ---- nests ------------------------------------------------------------------

@pytest.mark.parametrize("inner", [
    b"\x01\x02\x03",                             # not even a header
    b"\xff\x00\x01\x00" + b"\0" * 4,             # attribute longer than nest
    b"\x02\x00\x01\x00",                         # attribute shorter than header
    struct.pack("=HH", 8, SD_A_ADDR_PREFIX) + b"\x10\0\0\0" + b"\xde\xad",
], ids=["garbage", "overlong", "underlong", "trailing"])
def test_nest_with_garbage(nl, inner):
    bad = struct.pack("=HH", 4 + len(inner), SD_A_RULE_LOCAL | NLA_F_NESTED)
    bad += inner + b"\0" * (-len(inner) % 4)
    # A nest too short for one attribute header fails the policy (ERANGE);
    # attributes that do not fill it exactly are leftovers (EINVAL).
    refused(add(nl, ACTION, DIR, bad), BAD_SIZE if len(inner) < 4
            else errno.EINVAL)


def test_nest_without_the_nested_flag(nl):
    inner = attr_u16(SD_A_ADDR_PORT_MIN, 80) + attr_u16(SD_A_ADDR_PORT_MAX, 80)
    refused(add(nl, ACTION, DIR, attr(SD_A_RULE_LOCAL, inner)), errno.EINVAL)


def test_scalar_where_a_nest_belongs(nl):
    refused(add(nl, ACTION, DIR, attr_u32(SD_A_RULE_LOCAL, 1)), errno.EINVAL)


def test_prefix_without_address(nl):
    refused(add(nl, ACTION, DIR,
                nest(SD_A_RULE_LOCAL, attr_u8(SD_A_ADDR_PREFIX, 8))),
            errno.EINVAL)


# ---- truncated messages -------------------------------------------------------

def test_message_shorter_than_the_genl_header(nl):
    msg = bytearray(nl.message(SD_CMD_STATS_GET))
    msg = msg[:18]                               # 2 of 4 genl header bytes
    struct.pack_into("=I", msg, 0, len(msg))
    nl.send_raw(bytes(msg))
    refused(nl.receive(), errno.EINVAL)


def test_last_attribute_cut_short(nl):
    msg = bytearray(nl.message(SD_CMD_RULE_ADD,
                               ACTION + DIR + attr_u32(SD_A_RULE_POSITION, 0)))
    msg = msg[:-2]                               # the u32's last 2 bytes
    struct.pack_into("=I", msg, 0, len(msg))
    nl.send_raw(bytes(msg))
    refused(nl.receive(), errno.EINVAL)


def test_message_longer_than_what_was_sent(nl):
    # The netlink core drops a message whose length overruns the
    # datagram, without an answer; the next request is answered.
    msg = bytearray(nl.message(SD_CMD_RULE_ADD, ACTION + DIR))
    struct.pack_into("=I", msg, 0, len(msg) + 64)
    nl.send_raw(bytes(msg))
    nl.sock.settimeout(1.0)
    with pytest.raises(socket.timeout):
        nl.receive()
    nl.sock.settimeout(5.0)
    assert nl.request(SD_CMD_STATS_GET).err == 0


# ---- permissions and ids ----------------------------------------------------

def test_mutating_commands_need_cap_net_admin(nl):
    nl.adds_rules = True
    assert nl.rule_add().err == 0
    rid = nl.rules()[0][SD_A_RULE_ID]

    def attempt():
        with Genl() as g:
            return {
                "add": g.request(SD_CMD_RULE_ADD, ACTION + DIR).err,
                "del": g.request(SD_CMD_RULE_DEL, attr(SD_A_RULE_ID, rid)).err,
                "flush": g.request(SD_CMD_RULE_FLUSH).err,
                "rules": g.dump(SD_CMD_RULE_GET).err,
                "socks": g.dump(SD_CMD_SOCK_GET).err,
                "listeners": g.dump(SD_CMD_LISTENER_GET).err,
                "stats": g.request(SD_CMD_STATS_GET).err,
            }

    got = as_nobody(attempt)
    assert got == {"add": errno.EPERM, "del": errno.EPERM,
                   "flush": errno.EPERM, "rules": 0, "socks": 0,
                   "listeners": 0, "stats": 0}
    assert len(nl.rules()) == 1                  # nothing changed
    nl.flush()


def test_key_commands_need_cap_net_admin(nl):
    """Setting, clearing and even looking at the fabric key are the
    admin's: nobody gets EPERM, before any validation, and changes
    nothing."""
    key = os.urandom(32)
    nl.key_set(key)
    try:
        def attempt():
            with Genl() as g:
                return {
                    "set": g.request(SD_CMD_KEY_SET,
                                     attr(SD_A_KEY, os.urandom(32))).err,
                    "set_bad": g.request(SD_CMD_KEY_SET,
                                         attr(SD_A_KEY, b"x")).err,
                    "del": g.request(SD_CMD_KEY_DEL).err,
                    "get": g.request(SD_CMD_KEY_GET).err,
                }

        assert as_nobody(attempt) == {"set": errno.EPERM,
                                      "set_bad": errno.EPERM,
                                      "del": errno.EPERM,
                                      "get": errno.EPERM}
        assert nl.key_fpr() == hashlib.sha256(key).digest()[:SD_KEY_FPR_LEN]
    finally:
        nl.key_del()


@pytest.mark.parametrize("length", [0, 1, 31, 65, 200])
def test_key_of_a_bad_length_is_refused(nl, length):
    r = refused(nl.request(SD_CMD_KEY_SET, attr(SD_A_KEY, b"k" * length)),
                BAD_SIZE)
    assert r.extack, "no extended ACK message"
    assert nl.key_fpr() is None


@pytest.mark.parametrize("body", [
    b"", attr_u32(SD_A_RULE_ID, 1),
    attr(SD_A_KEY_FPR, bytes(8)),
    attr(SD_A_KEY, bytes(32)) + attr_u32(SD_A_RULE_ID, 1),
], ids=["missing", "other", "fingerprint", "key_and_other"])
def test_key_set_takes_the_key_and_nothing_else(nl, body):
    r = refused(nl.request(SD_CMD_KEY_SET, body), errno.EINVAL)
    if not body:
        assert r.miss_type == SD_A_KEY, r
    assert nl.key_fpr() is None


@pytest.mark.parametrize("cmd", [SD_CMD_KEY_GET, SD_CMD_KEY_DEL])
def test_key_get_and_del_take_no_attributes(nl, cmd):
    nl.key_set(bytes(range(40)))
    try:
        refused(nl.request(cmd, attr(SD_A_KEY, bytes(32))), errno.EINVAL)
        assert nl.key_fpr() == hashlib.sha256(bytes(range(40))).digest()[:8]
    finally:
        nl.key_del()


def test_key_is_never_given_back(nl):
    """GET answers with the SHA-256 fingerprint of the key, and no
    attribute of the reply holds the key or any 8 bytes of it; DEL forgets
    it (GET then has no fingerprint), and a second DEL is ENOENT."""
    for key in (os.urandom(32), os.urandom(64)):
        nl.key_set(key)
        r = nl.request(SD_CMD_KEY_GET)
        assert r.err == 0 and len(r.replies) == 1, r
        got = parse_attrs(r.replies[0])
        assert set(got) == {SD_A_KEY_FPR}, got
        assert got[SD_A_KEY_FPR] == hashlib.sha256(key).digest()[:8]
        for i in range(len(key) - 7):
            assert key[i:i + 8] not in r.replies[0]
    assert nl.request(SD_CMD_KEY_DEL).err == 0
    r = nl.request(SD_CMD_KEY_GET)
    assert r.err == 0 and parse_attrs(r.replies[0]) == {}, r
    r = refused(nl.request(SD_CMD_KEY_DEL), errno.ENOENT)
    assert r.extack, "no extended ACK message"


# ---- features -----------------------------------------------------------

# SD_FEATURE_*: redirect, zerocopy, tcp_inq and link_daemon, all of which
# this module has; bits 3 to 5 are retired and stay clear.
FEATURES = 0b1000111


def features(g):
    r = g.request(SD_CMD_FEATURES_GET)
    assert r.err == 0 and len(r.replies) == 1, r
    return parse_attrs(r.replies[0])


def test_features_answer_anyone_with_the_module_version(nl):
    """Any user learns the module's version (as modinfo's) and features:
    a program or daemon asks before it relies on one."""
    for got in (features(nl), as_nobody(lambda: features(Genl()))):
        assert set(got) - {SD_A_PAD} == {SD_A_MODULE_VERSION, SD_A_FEATURES}
        version = pathlib.Path("/sys/module/af_sd/version").read_text()
        assert got[SD_A_MODULE_VERSION] == version.strip().encode() + b"\0"
        assert struct.unpack("=Q", got[SD_A_FEATURES])[0] == FEATURES


def test_features_take_no_attributes_and_no_dump(nl):
    refused(nl.request(SD_CMD_FEATURES_GET, attr_u32(SD_A_RULE_ID, 1)),
            errno.EINVAL)
    refused(nl.dump(SD_CMD_FEATURES_GET), errno.EOPNOTSUPP)


def test_permission_is_checked_before_the_attributes(nl):
    # An unprivileged caller learns nothing from validation errors.
    got = as_nobody(lambda: Genl().request(
        SD_CMD_RULE_ADD, attr_u8(SD_A_RULE_ACTION, 7)).err)
    assert got == errno.EPERM


def test_rule_del_of_an_id_that_does_not_exist(nl):
    nl.adds_rules = True
    r = refused(nl.request(SD_CMD_RULE_DEL, attr_u32(SD_A_RULE_ID, 0xfffffff0)),
                errno.ENOENT)
    assert r.extack, "no extended ACK message"
    r = nl.rule_add()
    assert r.err == 0
    assert nl.request(SD_CMD_RULE_DEL, attr_u32(SD_A_RULE_ID, r.id)).err == 0
    refused(nl.request(SD_CMD_RULE_DEL, attr_u32(SD_A_RULE_ID, r.id)),
            errno.ENOENT)
    assert nl.rules() == []


def test_well_formed_rule_round_trips(nl):
    nl.adds_rules = True
    # The control: everything a rule can carry is accepted and read back.
    r = nl.rule_add(SD_ACTION_ALLOW, SD_DIR_ALL,
                    attr_u32(SD_A_RULE_UID_MIN, 1000) +
                    attr_u32(SD_A_RULE_UID_MAX, 2000) +
                    attr_u32(SD_A_RULE_GID_MIN, 5) +
                    nest(SD_A_RULE_LOCAL, attr(SD_A_ADDR_IN6, mapped("10.0.0.0")),
                         attr_u8(SD_A_ADDR_PREFIX, 104),
                         attr_u16(SD_A_ADDR_PORT_MIN, 1000),
                         attr_u16(SD_A_ADDR_PORT_MAX, 2000)) +
                    nest(SD_A_RULE_REMOTE,
                         attr(SD_A_ADDR_IN6, socket.inet_pton(socket.AF_INET6,
                                                              "fd00::")),
                         attr_u8(SD_A_ADDR_PREFIX, 16)) +
                    attr_u32(SD_A_RULE_POSITION, 0) +
                    attr_str(SD_A_RULE_COMMENT, "round trip"))
    assert r.err == 0, r
    (rule,) = nl.rules()
    assert struct.unpack("=I", rule[SD_A_RULE_ID])[0] == r.id
    assert rule[SD_A_RULE_ACTION] == bytes([SD_ACTION_ALLOW])
    assert rule[SD_A_RULE_DIR] == bytes([SD_DIR_ALL])
    assert struct.unpack("=I", rule[SD_A_RULE_UID_MIN])[0] == 1000
    assert struct.unpack("=I", rule[SD_A_RULE_UID_MAX])[0] == 2000
    local = parse_attrs(rule[SD_A_RULE_LOCAL])
    assert local[SD_A_ADDR_IN6] == mapped("10.0.0.0")
    assert local[SD_A_ADDR_PREFIX] == b"\x68"
    assert struct.unpack("=H", local[SD_A_ADDR_PORT_MIN])[0] == 1000
    assert struct.unpack("=H", local[SD_A_ADDR_PORT_MAX])[0] == 2000
    remote = parse_attrs(rule[SD_A_RULE_REMOTE])
    assert remote[SD_A_ADDR_PREFIX] == b"\x10"
    assert struct.unpack("=Q", rule[SD_A_RULE_HITS])[0] == 0
    assert rule[SD_A_RULE_COMMENT].rstrip(b"\0") == b"round trip"
    nl.flush()


# ---- fuzz ---------------------------------------------------------------------

def test_random_requests_are_answered_and_harmless(nl):
    """Random bodies for every command: each gets an answer, none splats
    (the rules a valid-by-chance body adds are flushed)."""
    nl.adds_rules = True
    rng = random.Random(0x5d)
    types = list(range(0, SD_A_MAX + 3))
    for i in range(400):
        cmd = rng.randrange(0, SD_CMD_MAX + 2)
        body = b""
        for _ in range(rng.randrange(0, 6)):
            t = rng.choice(types)
            kind = rng.randrange(5)
            if kind == 0:
                body += attr(t, bytes(rng.randrange(256)
                                      for _ in range(rng.randrange(0, 24))))
            elif kind == 1:
                body += attr_u8(t, rng.randrange(256))
            elif kind == 2:
                body += attr_u32(t, rng.getrandbits(32))
            elif kind == 3:
                body += nest(t, attr(rng.randrange(0, 8),
                                     bytes(rng.randrange(256)
                                           for _ in range(rng.randrange(0, 20)))))
            else:
                body += bytes(rng.randrange(256)
                              for _ in range(rng.randrange(1, 8)))
        flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_DUMP if i % 3 == 0 else 0)
        r = nl.request(cmd, body, flags=flags)
        assert r.answered
    nl.flush()
