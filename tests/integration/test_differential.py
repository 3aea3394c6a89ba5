"""The differential suite: every scenario of scenarios.py runs on TCP over
loopback, on AF_SD through plain system calls, on AF_SD through libsd
(the same program under sdrun, so its calls take the fast path), and
redirected (the TCP program under sdrun with net.sd.redirect=1, so its
AF_INET sockets are AF_SD underneath), each in its own process, and all
must observe the same thing.  Two of the four run at once (the guest has
two processors, and most of a run is the interpreter starting).  Deliberate differences are listed in DIFFERENCES, each with
the reason (Documentation/af_sd.rst says the same)."""
import json
import os
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys

import pytest

from conftest import redirect
from scenarios import SCENARIOS

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SDRUN = os.path.join(TOP, "build", "user", "lib", "shim", "sdrun")
TRANSPORTS = ("tcp", "sd", "libsd", "redirect")

# scenario -> {row label: reason}: rows whose values may differ.
DIFFERENCES = {}


@pytest.fixture(scope="module", autouse=True)
def redirect_for_module():
    with redirect():
        yield


def run(name, transport):
    fam = {"libsd": "sd", "redirect": "tcp"}.get(transport, transport)
    cmd = [sys.executable, os.path.join(HERE, "scenarios.py"), name, fam]
    env = dict(os.environ)
    if transport in ("libsd", "redirect"):
        cmd = [SDRUN] + cmd
    if transport == "redirect":
        # scenarios.py then checks that each socket it makes is AF_SD.
        env["SD_SCENARIO_REDIRECT"] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, \
        f"{name} on {transport} failed ({out.returncode}):\n{out.stderr}"
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_tcp(name):
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {t: pool.submit(run, name, t) for t in TRANSPORTS}
        results = {t: r.result() for t, r in runs.items()}
    allowed = DIFFERENCES.get(name, {})
    ref = results["tcp"]
    for t in TRANSPORTS[1:]:
        got = results[t]
        assert [r[0] for r in got] == [r[0] for r in ref], \
            f"{t} took other steps than tcp:\n{got}\n{ref}"
        diff = [(lbl, want, have) for (lbl, want), (_, have) in zip(ref, got)
                if want != have and lbl not in allowed]
        assert not diff, f"{t} differs from tcp in {name}:\n" + "\n".join(
            f"  {lbl}: tcp={want!r} {t}={have!r}" for lbl, want, have in diff)
