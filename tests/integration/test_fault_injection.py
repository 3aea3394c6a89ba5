"""Allocation failures (issue 9): on a kernel with fault injection (the
debug lane, make check-debug), kmalloc and the page allocator fail at
random inside AF_SD's system calls, and every call must end in a clean
error or in success: no splat, no leaked socket, no wrong byte, and the
family works afterwards.  kmemleak (judged by tests/vm/run at the end of
the lane) finds what an error path forgot to free.

Only the calls of one child process are made to fail (task-filter and
/proc/self/make-it-fail, set around each AF_SD call alone, so that the
interpreter's own system calls are spared).  SD_TEST_FAULT_SEED and
SD_TEST_FAULT_ROUNDS replay and size it."""
import json
import os
import pathlib
import random
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DEBUGFS = pathlib.Path("/sys/kernel/debug")
POINTS = ("failslab", "fail_page_alloc")

pytestmark = [pytest.mark.debug_ci, pytest.mark.skipif(
    not all((DEBUGFS / p / "probability").exists() for p in POINTS),
    reason="needs FAILSLAB and FAIL_PAGE_ALLOC: the debug kernel lane "
           "(make check-debug)")]

CHILD = textwrap.dedent("""
    import errno, json, mmap, os, random, socket, struct, sys
    sys.path.insert(0, %r)
    from sdsock import Family, SOL_SD, SD_MMAP_OFFSETS, sockname
    from sdgenl import Genl

    seed, rounds = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    sd = Family("sd")
    fail = os.open("/proc/self/make-it-fail", os.O_WRONLY)
    out = {"ok": 0, "errors": {}, "wrong": [], "ops": 0}

    def faulty(fn, *args):
        # One AF_SD call with failures on; the errno name or None.
        out["ops"] += 1
        os.pwrite(fail, b"1", 0)
        try:
            r = fn(*args)
        except OSError as e:
            # A socket timeout has no errno.
            name = ("TIMEOUT" if e.errno is None else
                    errno.errorcode.get(e.errno, str(e.errno)))
            out["errors"][name] = out["errors"].get(name, 0) + 1
            return None, name
        finally:
            os.pwrite(fail, b"0", 0)
        out["ok"] += 1
        return r, None

    def checked(rc):
        # Family.connect and .bind answer "OK" or an errno name.
        if rc != "OK":
            raise OSError(getattr(errno, rc), rc)

    genl = Genl("sd", timeout=1)

    def stats():
        # An answer lost to a failed allocation is a timeout.
        r = genl.request(7)                   # SD_CMD_STATS_GET
        if r.err:
            raise OSError(r.err, "stats")
    for i in range(rounds):
        socks = []
        try:
            lst, e = faulty(sd.socket)
            if e:
                continue
            socks.append(lst)
            _, e = faulty(lambda: checked(sd.bind(lst, "127.0.0.1")))
            if e:
                continue
            _, e = faulty(lst.listen, 4)
            if e:
                continue
            port = sockname(lst)[1]
            c, e = faulty(sd.socket)
            if e:
                continue
            socks.append(c)
            # Timeouts only after connect and accept: Python's make the
            # descriptor non-blocking, and these two are libc's calls.
            _, e = faulty(lambda: checked(sd.connect(c, "127.0.0.1", port)))
            if e:
                continue
            c.settimeout(2)
            s, e = faulty(sd.accept, lst)
            if e:
                continue
            socks.append(s)
            s.settimeout(2)
            raw, e = faulty(c.getsockopt, SOL_SD, SD_MMAP_OFFSETS, 192)
            if not e and rng.random() < 0.5:
                # The first ring's mmap_len (sixth u64; see offsets() in
                # test_sd_specific.py).
                mlen = struct.unpack_from("6Q", raw)[5]
                m, e = faulty(mmap.mmap, c.fileno(), mlen, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
                if m is not None:
                    m.close()
            data = bytes(rng.randrange(256) for _ in range(rng.choice((1, 100, 5000))))
            n, e = faulty(c.send, data)
            if n:
                got = b""
                while len(got) < n:
                    b, e = faulty(s.recv, n - len(got))
                    if e or not b:
                        break
                    got += b
                if got != data[:len(got)]:
                    out["wrong"].append(i)
            if rng.random() < 0.3:
                faulty(stats)
            if rng.random() < 0.3:
                faulty(s.shutdown, socket.SHUT_WR)
        finally:
            for x in socks:
                x.close()
    genl.close()
    print(json.dumps(out))
""")


def knobs(point):
    d = DEBUGFS / point
    names = ["probability", "interval", "times", "space", "verbose",
             "task-filter", "ignore-gfp-wait"]
    if point == "fail_page_alloc":
        names += ["min-order", "ignore-gfp-highmem"]
    return {n: (d / n).read_text().strip() for n in names if (d / n).exists()}


def set_knobs(point, values):
    for name, v in values.items():
        (DEBUGFS / point / name).write_text(str(v))


TIMES = 1_000_000


@pytest.fixture
def faults():
    """Fault injection on for tasks that ask (task-filter), quietly (no
    stack trace per failure), for sleeping allocations too; put back
    afterwards.  Yields a function that says how many failures were
    injected so far."""
    saved = {p: knobs(p) for p in POINTS}
    try:
        for p in POINTS:
            set_knobs(p, {"task-filter": "Y", "verbose": 0, "interval": 1,
                          "probability": 5, "space": 0, "times": TIMES,
                          "ignore-gfp-wait": "N"})
        set_knobs("fail_page_alloc", {"min-order": 0,
                                      "ignore-gfp-highmem": "N"})
        yield lambda: sum(TIMES - int((DEBUGFS / p / "times").read_text())
                          for p in POINTS)
    finally:
        for p in POINTS:
            set_knobs(p, {"probability": 0, "times": 1})
            set_knobs(p, saved[p])


def test_allocation_failures_end_in_clean_errors(faults, no_leak):
    seed = int(os.environ.get("SD_TEST_FAULT_SEED", random.randrange(1 << 30)))
    rounds = int(os.environ.get("SD_TEST_FAULT_ROUNDS", "300"))
    why = f"(replay: SD_TEST_FAULT_SEED={seed})"
    r = subprocess.run([sys.executable, "-c", CHILD % HERE, str(seed),
                        str(rounds)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"{why}\n{r.stdout}\n{r.stderr}"
    out = json.loads(r.stdout.splitlines()[-1])
    injected = faults()
    print(f"fault injection {why}: {out['ops']} calls, {out['ok']} ok, "
          f"errors {out['errors']}, {injected} failures injected")
    # The failures were real, and reached AF_SD's calls.
    assert injected > 0, why
    assert sum(out["errors"].values()) > 0, why
    # Bytes that arrived are the bytes sent.
    assert out["wrong"] == [], why
    # Only errors an allocation failure may cause (or its consequences on
    # the other end of the same connection, or a timeout of the child's
    # own short socket timeouts: an error, not a hang).
    allowed = {"TIMEOUT", "ENOMEM", "ENOBUFS", "EAGAIN", "ECONNRESET", "EPIPE",
               "ECONNREFUSED", "ENOTCONN", "ETIMEDOUT", "EMFILE", "ENFILE",
               "EINVAL", "ECONNABORTED", "EADDRINUSE"}
    assert set(out["errors"]) <= allowed, f"{out['errors']} {why}"


def test_family_works_after_fault_injection(no_leak):
    """Run after the one above (file order): fault injection is off, and
    connections carry data as ever."""
    from sdsock import Family
    sd = Family("sd")
    for _ in range(20):
        c, s, lst = sd.pair()
        c.sendall(b"x" * 70000)
        got = b""
        while len(got) < 70000:
            got += s.recv(1 << 16)
        assert got == b"x" * 70000
        for x in (c, s, lst):
            x.close()
