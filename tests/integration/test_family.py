"""The module registers AF_SD: socket creation, unsupported types and
protocols, and clean close (issue: foundation)."""
import pathlib
import socket

import pytest

from conftest import AF_SD, prog, protocol_sockets, run_json, wait_for

# In the debug kernel lane's CI subset (Documentation/testing.rst).
pytestmark = pytest.mark.debug_ci


def probe():
    return {(r["type"], r["protocol"]): r for r in run_json(prog("sd_socket"), "probe")}


def test_family_number_is_published():
    param = pathlib.Path("/sys/module/af_sd/parameters/family").read_text()
    assert int(param) == AF_SD


def test_stream_socket_is_a_real_fd():
    r = probe()[("SOCK_STREAM", 0)]
    assert r["result"] == "OK"
    assert r["is_socket"] == 1
    assert r["so_domain"] == AF_SD
    assert r["close"] == 0


def test_stream_with_tcp_protocol_and_flags():
    rows = probe()
    assert rows[("SOCK_STREAM", socket.IPPROTO_TCP)]["result"] == "OK"
    assert rows[("SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC", 0)]["result"] == "OK"


def test_unsupported_types():
    rows = probe()
    for t in ("SOCK_DGRAM", "SOCK_SEQPACKET", "SOCK_RAW", "SOCK_RDM"):
        assert rows[(t, 0)]["result"] == "ESOCKTNOSUPPORT", t


def test_unsupported_protocols():
    rows = probe()
    for p in (socket.IPPROTO_UDP, 255):
        assert rows[("SOCK_STREAM", p)]["result"] == "EPROTONOSUPPORT", p


def test_churn_leaves_no_socket(no_leak):
    before = protocol_sockets()
    [r] = run_json(prog("sd_socket"), "churn", "2000")
    assert r == {"call": "churn", "asked": 2000, "created": 2000,
                 "closed": 2000, "error": "OK"}
    assert wait_for(lambda: protocol_sockets() == before)


def test_sockets_are_counted_while_open(no_leak):
    before = protocol_sockets()
    socks = [socket.socket(AF_SD, socket.SOCK_STREAM) for _ in range(10)]
    try:
        assert protocol_sockets() == before + 10
    finally:
        for s in socks:
            s.close()
    assert wait_for(lambda: protocol_sockets() == before)
