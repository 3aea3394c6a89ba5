"""The bounded fuzzer (tests/progs/sd_fuzz.c): random sequences of AF_SD
system calls from several threads in several processes, sharing sockets,
with random options, ioctls, addresses, and random bytes written into the
mapped rings.  Any kernel splat fails the test (conftest's
clean_kernel_log) and the seed it prints replays the same calls:

    SD_FUZZ_SEED=N SD_FUZZ_SECONDS=600 tests/vm/run -- \\
        python3 -m pytest -q tests/integration/test_fuzz.py

The seed is new for every run unless SD_FUZZ_SEED is set; CI runs
SD_FUZZ_SECONDS (default 20) seconds."""
import os
import random
import socket
import subprocess

from conftest import prog
from sdsock import Family

SECONDS = int(os.environ.get("SD_FUZZ_SECONDS", "20"))


def test_fuzz_leaves_kernel_and_family_intact(no_leak):
    seed = int(os.environ.get("SD_FUZZ_SEED", random.SystemRandom().getrandbits(48)))
    print(f"sd_fuzz seed {seed}")
    r = subprocess.run([prog("sd_fuzz"), str(seed), str(SECONDS), "3", "3"],
                       capture_output=True, text=True, timeout=SECONDS + 90)
    assert r.returncode == 0, \
        f"sd_fuzz seed {seed} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert "calls in the first process" in r.stdout, r.stdout
    calls = int(r.stdout.split("sd_fuzz: ")[-1].split()[0])
    print(r.stdout)
    assert calls > 1000, f"seed {seed}: only {calls} calls"
    # The family still works after all that.
    sd = Family("sd")
    c, s, lst = sd.pair()
    c.sendall(b"after the fuzzer")
    assert s.recv(100) == b"after the fuzzer"
    s.sendall(b"ok")
    assert c.recv(10) == b"ok"
    c.shutdown(socket.SHUT_WR)
    assert s.recv(10) == b""
    for x in (c, s, lst):
        x.close()
