"""sdlinkd's carrier (tools/sdlinkd/carrier.hpp, Documentation/remote.rst,
"The carrier"): one AF_SD connection's bytes between two hosts' daemons by
RDMA writes, with no copy.

Two network namespaces stand for the two hosts, each with its own AF_SD
listener, sysctls and rings.  The RDMA between them is two soft-RoCE
devices on the two ends of a veth pair: those stay in the initial
namespace, because rdma_rxe of the guest's kernel (6.1) sends and receives
only there (its UDP socket and its route lookups are the initial
namespace's; an rxe device on a veth end moved into another namespace
fails every work request with "local QP operation error").  Policy routing
makes each device's packets to the other's address leave by its own veth
end rather than loop back locally, so every write crosses the veth pair.
The verbs devices themselves are visible from every namespace (rdma
"shared" mode): host A's carrier uses the device on one end, host B's the
one on the other.

tests/progs/sd_link_carrier.cpp runs both hosts (a fork in each
namespace): programs on plain system calls, daemon ends carried by a
Carrier each; every wait in it is for an event of the other side, none for
a time.  Each test checks what the two hosts report."""
import json
import subprocess

import pytest

from conftest import netns_del, ns_sysctl, nsrun, prog, rxe_pair

A, B = "sdcar-a", "sdcar-b"
VETH_A, VETH_B = "sdcv0", "sdcv1"
DEV_A, DEV_B = "sdcar0", "sdcar1"
ADDR_A, ADDR_B = "10.82.0.1", "10.82.0.2"
TABLE_A, TABLE_B = 182, 183
RING = 256 * 1024
# A hang guard only: the scenarios end on events, never on a time.
HANG = 900


@pytest.fixture(scope="module")
def hosts():
    netns_del(A, B)
    with rxe_pair((VETH_A, VETH_B), (DEV_A, DEV_B), (ADDR_A, ADDR_B),
                  (TABLE_A, TABLE_B)):
        try:
            for n in (A, B):
                subprocess.run(["ip", "netns", "add", n], check=True)
                nsrun(n, "ip", "link", "set", "lo", "up", check=True)
            yield
        finally:
            netns_del(A, B)


def carry(scenario, ring_a=RING, ring_b=RING):
    """Run one scenario; return host A's and host B's reports."""
    for n, size in ((A, ring_a), (B, ring_b)):
        err = ns_sysctl(n, "ring_size", size)
        assert err is None, err
    out = subprocess.run([prog("sd_link_carrier"), scenario, A, B, DEV_A, DEV_B],
                         capture_output=True, text=True, timeout=HANG)
    reports = {}
    for line in out.stdout.splitlines():
        rep = json.loads(line)
        reports[rep["host"]] = rep
    assert out.returncode == 0, \
        f"{scenario}: exit {out.returncode}\n{out.stderr}\n{out.stdout}"
    assert set(reports) == {"a", "b"}, out.stdout
    for rep in reports.values():
        assert rep["ok"], rep
        for c in rep["carriers"]:
            assert c["copies"] == 0, c
    return reports["a"], reports["b"]


def test_8_mib_each_way_at_once(hosts):
    a, b = carry("stream")
    for me, peer in ((a, b), (b, a)):
        c, p = me["carriers"][0], peer["carriers"][0]
        assert c["state"] == "done", c
        # All of our program's records went out, and the peer took in
        # exactly what we wrote (headers and pads included).
        assert c["bytes"] >= 8 << 20
        assert p["rx_bytes"] == c["zeroed"], (c, p)


def test_many_small_messages(hosts):
    a, b = carry("small")
    for me in (a, b):
        c = me["carriers"][0]
        assert c["state"] == "done", c
        assert c["records"] >= me["messages"], c


def test_round_trips_cost_two_writes_a_message(hosts):
    a, b = carry("pingpong")
    for me in (a, b):
        c = me["carriers"][0]
        assert c["state"] == "done", c
        # One message in flight at a time: a batch per record, whose
        # payload and header are two writes; besides, only credit words
        # and the end (FIN alone, BYE).
        assert c["records"] == me["messages"] == 500, c
        assert c["batches"] == c["records"], c
        ctrl = c["writes"] - 2 * c["batches"] - c["credit_writes"]
        assert 1 <= ctrl <= 2, c
        # At most one wake-up call per message received (the program
        # slept in recv), plus the end.
        assert c["wakes"] <= me["messages"] + 2, c


def test_half_close_then_reply(hosts):
    a, b = carry("halfclose")
    assert a["carriers"][0]["state"] == b["carriers"][0]["state"] == "done"


def test_reset_reaches_the_other_program(hosts):
    a, b = carry("reset")
    # The sd_link_carrier checks: B's program read ECONNRESET after every
    # byte, both carriers ended reset.
    assert a["carriers"][0]["state"] == b["carriers"][0]["state"] == "reset"


def test_ring_size_mismatch_is_refused(hosts):
    a, b = carry("mismatch", ring_a=RING, ring_b=2 * RING)
    for me in (a, b):
        c = me["carriers"][0]
        assert c["state"] == "reset" and c["writes"] == 0, c


def test_corrupt_record_resets_only_its_connection(hosts):
    a, b = carry("corrupt")
    assert [c["state"] for c in a["carriers"]] == ["reset", "done"], a
    assert [c["state"] for c in b["carriers"]] == ["reset", "done"], b
    # Nothing of the corrupt connection reached B's program.
    assert b["carriers"][0]["rx_bytes"] == 0, b
