"""What a connection costs: ring pages come as the traffic touches them.

A ring is allocated as its header page and a page array; its data pages
are allocated when the kernel's producer first writes them, or when a
mapping first touches them (Documentation/af_sd.rst, "Namespaces, memory,
module lifetime").  These tests measure it from the memory cgroup: both
ends of the connections live in processes of a cgroup of their own, whose
memory.current counts every page and kernel object charged to it.  Less
its "anon" and "file" (memory.stat: the processes' own heap, which
Python's allocator keeps as it likes, and the page cache) that is the
kernel memory the connections cost: ring pages, sockets, files, the
descriptor table.  The cost of a connection is the growth of that from
before the connections were made to after, divided by their number.
"""
import hashlib
import mmap
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import wait_for
from sdsock import Family
from test_sd_specific import offsets

SD = Family("sd")
HERE = os.path.dirname(os.path.abspath(__file__))
CG = "/sys/fs/cgroup/sdringmem"
IDLE = 2000                     # idle connections
IDLE_MAX = 32 << 10             # bytes an idle connection may cost
BUSY = 50                       # connections that carry half a ring
FULL = 8                        # connections that go round the ring

# One end of the connections: commands on stdin, answers on stdout.
PEER = textwrap.dedent("""
    import hashlib, os, resource, sys
    sys.path.insert(0, %r)
    from sdsock import Family
    with open(sys.argv[1] + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_NOFILE, (10000, 10000))
    sd = Family("sd")
    conns, lst = [], None

    def pattern(seed, n):
        block = hashlib.sha256(seed.encode()).digest() * 128
        return (block * (n // len(block) + 1))[:n]

    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "listen":
            lst, port = sd.listener(backlog=4096)
            out = port
        elif cmd == "accept":
            for _ in range(int(args[0])):
                conns.append(sd.accept(lst))
            out = len(conns)
        elif cmd == "connect":
            for _ in range(int(args[1])):
                c = sd.socket()
                r = sd.connect(c, "127.0.0.1", int(args[0]))
                if r != "OK":
                    break
                conns.append(c)
            out = len(conns)
        elif cmd == "send":
            data = pattern(args[2], int(args[1]))
            conns[int(args[0])].sendall(data)
            out = hashlib.sha256(data).hexdigest()
        elif cmd == "recv":
            h, left = hashlib.sha256(), int(args[1])
            while left:
                b = conns[int(args[0])].recv(min(left, 1 << 16))
                if not b:
                    break
                h.update(b)
                left -= len(b)
            out = h.hexdigest()
        print(out, flush=True)
""") % HERE


def memory_current():
    """Kernel memory charged to the cgroup: memory.current less the
    processes' anonymous memory and the page cache."""
    with open(CG + "/memory.current") as f:
        current = int(f.read())
    with open(CG + "/memory.stat") as f:
        stat = dict(line.split() for line in f)
    return current - int(stat["anon"]) - int(stat["file"])


class Peer:
    def __init__(self):
        self.p = subprocess.Popen([sys.executable, "-c", PEER, CG],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def ask(self, *words):
        self.p.stdin.write(" ".join(map(str, words)) + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def send(self, *words):
        self.p.stdin.write(" ".join(map(str, words)) + "\n")
        self.p.stdin.flush()

    def answer(self):
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


@pytest.fixture
def cgroup():
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    os.makedirs(CG, exist_ok=True)
    try:
        yield CG
    finally:
        wait_for(lambda: not open(CG + "/cgroup.procs").read().strip(),
                 timeout=30)
        os.rmdir(CG)


def ring_size():
    with open("/proc/sys/net/sd/ring_size") as f:
        return int(f.read())


def test_idle_connections_cost_little_and_rings_grow_with_traffic(
        no_leak, cgroup):
    """2,000 idle connections cost under 32 KiB each (their rings were 264
    KiB each when rings were allocated whole); half a ring of traffic on
    some grows the memory by at least those pages; going round the ring
    many times grows it to no more than the ring's pages; every byte
    arrives intact; and it is all given back when the connections end."""
    size = ring_size()
    server, client = Peer(), Peer()
    try:
        port = server.ask("listen")
        # Both processes have started and made what they make once.
        assert client.ask("connect", port, 1) == "1"
        assert server.ask("accept", 1) == "1"
        before = memory_current()

        assert client.ask("connect", port, IDLE) == str(IDLE + 1)
        assert server.ask("accept", IDLE) == str(IDLE + 1)
        idle = memory_current()
        per_conn = (idle - before) / IDLE
        print(f"kernel memory per idle connection: {per_conn:.0f} bytes")
        assert per_conn < IDLE_MAX, \
            f"an idle connection costs {per_conn:.0f} bytes"

        # Half a ring on each of BUSY connections, not read yet: the
        # pages it takes are there.
        half = size // 2
        for i in range(BUSY):
            want = client.ask("send", i, half, f"busy{i}")
            server.send("recv", i, half)
            assert server.answer() == want, f"connection {i}"
        busy = memory_current()
        assert busy - idle >= BUSY * half, \
            f"{BUSY} connections with {half} bytes each grew the " \
            f"memory by {busy - idle} bytes only"

        # Round the ring 8 times on FULL connections: their rings grow to
        # their whole data area and no more.
        many = 8 * size
        for i in range(FULL):
            client.send("send", i, many, f"full{i}")
            server.send("recv", i, many)
            want = client.answer()
            assert server.answer() == want, f"connection {i}"
        full = memory_current()
        ceiling = FULL * (size + 4096) + BUSY * (size // 2 + 8192)
        assert full - idle <= ceiling + (2 << 20), \
            f"rings grew by {full - idle} bytes, over {ceiling}"
        assert full - busy >= FULL * (size - half - 4096) * 3 // 4
    finally:
        server.close()
        client.close()
    # Everything the connections held is given back (what stays is what
    # the processes left in caches they share, well under a connection's
    # worth per connection).
    assert wait_for(lambda: memory_current() - before < IDLE * 2048,
                    timeout=30), \
        f"{memory_current() - before} bytes stay charged after the end"


def test_a_mapping_sees_the_pages_the_kernel_wrote_and_faults_in_the_rest(
        no_leak):
    """A mapping of a ring finds the pages the kernel's producer wrote
    (the same pages), a page never touched reads as zero, a child of
    fork() sees the same, and the pages outlive the connection while
    mapped."""
    c, s, lst = SD.pair()
    _, rx = offsets(s)
    m = mmap.mmap(s.fileno(), rx["mmap_len"], mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE, offset=0x80000000)
    payload = hashlib.sha256(b"x").digest() * 300     # crosses pages
    c.sendall(payload)
    data = rx["data"]
    assert m[data + 8:data + 8 + len(payload)] == payload
    last = rx["mmap_len"] - 4096
    assert m[last:last + 4096] == bytes(4096)

    pid = os.fork()
    if pid == 0:
        ok = (m[data + 8:data + 8 + len(payload)] == payload and
              m[last + 100] == 0)
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0

    got = b""
    while len(got) < len(payload):
        got += s.recv(65536)
    assert got == payload
    # Consumed records are zero in the ring, as the ABI says.
    assert m[data:data + 8 + len(payload)] == bytes(8 + len(payload))
    for x in (c, s, lst):
        x.close()
    # The mapping outlives the sockets: its pages are still there.
    m[last] = 1
    assert m[last] == 1
    m.close()
