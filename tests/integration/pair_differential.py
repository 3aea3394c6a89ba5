"""The differential suite across two hosts (tests/vm/pair): every scenario of
xhost.py runs with its server half on host B and its client half on host A,
three ways, and both halves must observe the same thing every way:

  tcp       plain TCP, no sdrun on either host;
  rdma      both halves under sdrun with net.sd.redirect=1 and the
            rendezvous on both hosts: an AF_SD connection over RDMA, carried
            by libsd's bridge (the monitors count it, or the test fails);
  fallback  the same, but B's process has no RDMA (SD_RDMA=0): the monitors
            agree on TCP and the AF_SD sockets fall back to it.

Deliberate differences would be listed in DIFFERENCES with the reason
(Documentation/rdma.rst says the same); there are none.  Not collected by the single-guest
suite; scripts/check's "pair" stage runs it.
"""
import json
import subprocess
import sys

import pytest

from conftest import TOP
from pair_remote import keys, peer_sysctl, stats, sysctl as local_sysctl
from peer import Peer
from xhost import SCENARIOS

SDRUN = str(TOP / "build" / "user" / "lib" / "shim" / "sdrun")
XHOST = str(TOP / "tests" / "integration" / "xhost.py")
RDV_PORT = 748
MODES = ("tcp", "rdma", "fallback")

# scenario -> {row label: reason}: rows whose values may differ, each with
# the reason.  None today.
DIFFERENCES: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def peer():
    if not Peer.available():
        pytest.fail("no peer host: run this file through tests/vm/pair")
    return Peer()


@pytest.fixture(scope="module")
def hosts(peer):
    """Redirection, the rendezvous and the same fabric key on both hosts,
    off again after."""
    keys(peer)
    for key, value in (("redirect", 1), ("rendezvous_port", RDV_PORT)):
        local_sysctl(key, value)
        peer_sysctl(peer, key, value)
    yield
    for key, value in (("rendezvous_port", 0), ("redirect", 0)):
        local_sysctl(key, value)
        peer_sysctl(peer, key, value)
    keys(peer, None, None)


def run(peer, name, mode, port):
    """Both halves of scenario name; their transcripts and A's counters."""
    srv_cmd = [sys.executable, XHOST, "server", name, str(port)]
    cli_cmd = [sys.executable, XHOST, "client", name, peer.remote, str(port)]
    env = {}
    if mode != "tcp":
        srv_cmd = [SDRUN] + srv_cmd
        cli_cmd = [SDRUN] + cli_cmd
    if mode == "fallback":
        env["SD_RDMA"] = "0"
    before = stats()
    srv = peer.spawn(srv_cmd, env=env)
    try:
        assert srv.readline() == "ready", srv.stderr
        out = subprocess.run(cli_cmd, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, \
            f"{name} client on {mode} failed:\n{out.stderr}"
        line = srv.readline(600)
        assert line is not None, f"{name} server on {mode}: {srv.stderr}"
        assert srv.wait(120) == 0, srv.stderr
    finally:
        srv.kill()
    after = stats()
    d = {k: v - before.get(k, 0) for k, v in after.items()
         if v != before.get(k, 0)}
    return json.loads(line), json.loads(out.stdout), d


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_tcp_across_hosts(peer, hosts, name):
    port = 9600 + sorted(SCENARIOS).index(name) * 4
    results = {m: run(peer, name, m, port + i) for i, m in enumerate(MODES)}
    # Each mode is what it says: the monitors count it.
    conns = results["rdma"][2].get("rdma_connects", 0)
    assert conns >= 1, results["rdma"][2]
    assert not any(k.startswith("fallback") for k in results["rdma"][2]), \
        results["rdma"][2]
    assert results["fallback"][2].get("fallback_no_rdma", 0) == conns, \
        results["fallback"][2]
    assert "rdma_connects" not in results["fallback"][2]
    allowed = DIFFERENCES.get(name, {})
    for half, i in (("server", 0), ("client", 1)):
        ref = results["tcp"][i]
        for m in MODES[1:]:
            got = results[m][i]
            assert [r[0] for r in got] == [r[0] for r in ref], \
                f"{half} on {m} took other steps than tcp:\n{got}\n{ref}"
            diff = [(lbl, want, have) for (lbl, want), (_, have)
                    in zip(ref, got) if want != have and lbl not in allowed]
            assert not diff, f"{half} on {m} differs from tcp in {name}:\n" + \
                "\n".join(f"  {lbl}: tcp={w!r} {m}={h!r}"
                          for lbl, w, h in diff)
    # What every scenario must show, whatever the transport.
    for m in MODES:
        for row in results[m][0] + results[m][1]:
            if row[1] is False:
                pytest.fail(f"{name} on {m}: {row[0]} is false")
