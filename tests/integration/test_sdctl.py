"""sdctl against the loaded module: what it shows of real sockets and
listeners, rules that allow and deny real connections as written, who may
change them, the counters, a dump of 10,000 sockets, the settings, and its
command line.  See Documentation/sdctl.8 and Documentation/netlink.rst."""
import hashlib
import json
import os
import pathlib
import re
import resource
import subprocess

import pytest

from conftest import TOP, sd_stats, wait_for
from sdgenl import as_nobody
from sdsock import SD_REUSEPORT, SOL_SD, Family, sockname

SD = Family("sd")
# SD_TEST_SDCTL runs another build of sdctl.
SDCTL = os.environ.get("SD_TEST_SDCTL",
                       str(TOP / "build" / "user" / "tools" / "sdctl" / "sdctl"))
SYSCTL = pathlib.Path("/proc/sys/net/sd")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
RULES_EPERM = "sdctl: permission denied: changing rules needs CAP_NET_ADMIN\n"
KEY_EPERM = "sdctl: permission denied: the fabric key needs CAP_NET_ADMIN\n"

STATS = ["connects", "accepts", "refused", "denied_connect", "denied_accept",
         "denied_bind", "backlog_full", "resets", "corrupt", "wakeups",
         "takeovers", "fallback_no_listener", "fallback_peer_no_sd",
         "fallback_no_rdma", "fallback_handshake", "fallback_policy",
         "fallback_tcp_client", "fallback_remote", "redirected",
         "zc_sends", "zc_pages", "zc_remapped", "zc_copied", "zc_cow",
         "fallback_peer_unknown", "fallback_busy", "zc_pinned",
         "fallback_auth", "fallback_tcp_listener",
         "link_upcalls", "link_timeouts", "link_via", "link_incoming",
         "link_resets"]
SETTINGS = ["default_policy", "port_range",
            "redirect", "rendezvous_timeout_ms",
            "ring_size", "ring_size_max", "zerocopy_threshold"]


def sdctl(*args, user=None, check=True, timeout=120, prefix=()):
    """Run sdctl; with check, it must exit 0 and print nothing on stderr."""
    if not os.path.exists(SDCTL):
        pytest.fail(f"{SDCTL} is not built: run make first")
    cmd = list(prefix) + (NOBODY if user == "nobody" else []) + [SDCTL]
    out = subprocess.run(cmd + [str(a) for a in args], capture_output=True,
                         text=True, timeout=timeout)
    if check:
        assert out.returncode == 0 and out.stderr == "", \
            f"sdctl {' '.join(map(str, args))}: exit {out.returncode}\n{out.stderr}"
    return out


def sdjson(*args, **kw):
    return json.loads(sdctl("--json", *args, **kw).stdout)


def stats():
    return sdjson("stats")


def rules():
    return sdjson("rules")


def add_rule(*args):
    """sdctl rules add ARGS; the new rule's id."""
    out = sdctl("rules", "add", *args)
    assert re.fullmatch(r"\d+\n", out.stdout), out.stdout
    return int(out.stdout)


def sysctl(name):
    return (SYSCTL / name).read_text().strip()


def write_sysctl(name, value):
    (SYSCTL / name).write_text(f"{value}\n")


@pytest.fixture
def clean_rules():
    """No rules and default_policy allow before and after the test."""
    sdctl("rules", "flush")
    policy = sysctl("default_policy") if (SYSCTL / "default_policy").exists() else None
    yield
    sdctl("rules", "flush")
    if policy is not None:
        write_sysctl("default_policy", "allow")


@pytest.fixture
def restore_settings():
    """Every net.sd.* setting as it was after the test."""
    saved = {p.name: p.read_text().strip() for p in SYSCTL.iterdir()}
    yield saved
    for name, value in saved.items():
        write_sysctl(name, value)
    assert {p.name: p.read_text().strip() for p in SYSCTL.iterdir()} == saved


def free_port(host="127.0.0.1"):
    """A port no AF_SD socket uses now."""
    s = SD.socket(v6=":" in host)
    assert SD.bind(s, host, 0) == "OK"
    port = sockname(s)[1]
    s.close()
    return port


def by_inode(entries, sock):
    ino = os.fstat(sock.fileno()).st_ino
    found = [e for e in entries if e["inode"] == ino]
    assert len(found) == 1, f"inode {ino} appears {len(found)} times"
    return found[0]


def try_connect(host, port):
    c = SD.socket(v6=":" in host)
    try:
        return SD.connect(c, host, port)
    finally:
        c.close()


def nobody_connect(host, port):
    return as_nobody(lambda: try_connect(host, port))


# ---- sockets and listeners ------------------------------------------------

def test_sockets_show_a_connection(no_leak):
    c, s, lst = SD.pair()
    port = sockname(lst)[1]
    cport = sockname(c)[1]
    try:
        socks = sdjson("sockets")
        client, server, listener = (by_inode(socks, x) for x in (c, s, lst))

        assert client["state"] == "ESTAB" and client["tcp_state"] == 1
        assert client["local"] == f"127.0.0.1:{cport}"
        assert client["local_addr"] == "127.0.0.1"
        assert client["local_port"] == cport
        assert client["peer"] == f"127.0.0.1:{port}"
        assert client["peer_port"] == port
        assert client["family"] == "inet"
        assert client["transport"] == "shm"
        assert "fallback" not in client

        assert server["state"] == "ESTAB"
        assert server["local"] == f"127.0.0.1:{port}"
        assert server["peer"] == f"127.0.0.1:{cport}"
        assert server["transport"] == "shm"

        assert listener["state"] == "LISTEN" and listener["tcp_state"] == 10
        assert listener["local"] == f"127.0.0.1:{port}"
        assert "peer" not in listener

        for e in (client, server, listener):
            assert e["uid"] == os.getuid()
            assert e["pid"] == os.getpid()
        # One ring each way, shared: one end's TX is the other's RX.
        assert client["tx_size"] == server["rx_size"] > 0
        assert client["rx_size"] == server["tx_size"] > 0
        assert client["tx_size"] & (client["tx_size"] - 1) == 0
    finally:
        for x in (c, s, lst):
            x.close()


def test_sockets_count_bytes_and_ring_fill(no_leak):
    c, s, lst = SD.pair()
    try:
        before = by_inode(sdjson("sockets"), c)
        c.sendall(b"x" * 1000)
        socks = sdjson("sockets")
        client, server = by_inode(socks, c), by_inode(socks, s)
        assert client["tx_bytes"] == before["tx_bytes"] + 1000
        assert client["tx_msgs"] >= before["tx_msgs"] + 1
        # Unread: the bytes sit in the ring, seen from both ends.
        assert client["tx_fill"] >= 1000
        assert server["rx_fill"] >= 1000
        assert server["rx_bytes"] == 0

        got = b""
        while len(got) < 1000:
            got += s.recv(1000 - len(got))
        server = by_inode(sdjson("sockets"), s)
        assert server["rx_bytes"] == 1000
        assert server["rx_msgs"] >= 1
        assert server["rx_fill"] == 0
    finally:
        for x in (c, s, lst):
            x.close()


def test_sockets_show_the_pages_each_ring_has(no_leak):
    """A ring starts as its header page; the kernel's producer adds the
    data pages it writes, the consumer none; both ends see the same
    ring."""
    c, s, lst = SD.pair()
    try:
        socks = sdjson("sockets")
        client, server = by_inode(socks, c), by_inode(socks, s)
        assert client["tx_pages"] == client["rx_pages"] == 1
        assert server["tx_pages"] == server["rx_pages"] == 1
        c.sendall(b"x" * 10000)         # a header and 10000 bytes: 3 pages
        got = b""
        while len(got) < 10000:
            got += s.recv(10000 - len(got))
        socks = sdjson("sockets")
        client, server = by_inode(socks, c), by_inode(socks, s)
        assert client["tx_pages"] == server["rx_pages"] == 4
        assert client["rx_pages"] == server["tx_pages"] == 1
    finally:
        for x in (c, s, lst):
            x.close()


def test_sockets_ipv6(no_leak):
    c, s, lst = SD.pair("::1")
    port = sockname(lst)[1]
    try:
        socks = sdjson("sockets")
        client = by_inode(socks, c)
        assert client["family"] == "inet6"
        assert client["peer"] == f"[::1]:{port}"
        assert client["peer_addr"] == "::1"
        assert by_inode(socks, lst)["local"] == f"[::1]:{port}"
        text = sdctl("sockets").stdout
        assert f"[::1]:{port}" in text
    finally:
        for x in (c, s, lst):
            x.close()


def test_sockets_states_bound_and_close_wait(no_leak):
    b = SD.socket()
    assert SD.bind(b, "127.0.0.1", 0) == "OK"
    c, s, lst = SD.pair()
    try:
        bound = by_inode(sdjson("sockets"), b)
        assert bound["state"] == "UNCONN" and bound["tcp_state"] == 7
        assert bound["local_addr"] == "127.0.0.1"
        assert bound["transport"] == "none"
        c.close()
        assert wait_for(lambda: by_inode(sdjson("sockets"), s)["state"]
                        == "CLOSE-WAIT")
        assert by_inode(sdjson("sockets"), s)["tcp_state"] == 8
    finally:
        for x in (b, c, s, lst):
            x.close()


def test_sockets_text_table(no_leak):
    c, s, lst = SD.pair()
    port = sockname(lst)[1]
    try:
        text = sdctl("sockets").stdout
        assert sdctl().stdout.splitlines()[0] == text.splitlines()[0]
        header = text.splitlines()[0].split()
        assert header[:4] == ["State", "Local", "Peer", "Transport"]
        for col in ("UID", "PID", "Inode", "TxBytes", "RxBytes", "TxMsgs",
                    "RxMsgs", "TxRing", "RxRing"):
            assert col in header
        lines = [ln for ln in text.splitlines()
                 if f"127.0.0.1:{port}" in ln]
        assert len(lines) == 3
        listen = [ln for ln in lines if ln.startswith("LISTEN")]
        assert len(listen) == 1 and listen[0].split()[2] == "*"
        assert sum(ln.startswith("ESTAB") for ln in lines) == 2
        inode = str(os.fstat(c.fileno()).st_ino)
        assert any(inode in ln.split() for ln in lines)
        assert len(text.splitlines()) == len(sdjson("sockets")) + 1
    finally:
        for x in (c, s, lst):
            x.close()


def test_listeners_backlog_queue_and_group(no_leak):
    lst, port = SD.listener(backlog=16)
    clients = []
    try:
        (entry,) = [e for e in sdjson("listeners") if e["local_port"] == port]
        assert entry["local"] == f"127.0.0.1:{port}"
        assert entry["backlog"] == 16
        assert entry["queued"] == 0
        assert entry["group"] == 1
        assert entry["uid"] == os.getuid() and entry["pid"] == os.getpid()
        assert entry["inode"] == os.fstat(lst.fileno()).st_ino

        for _ in range(3):
            c = SD.socket()
            assert SD.connect(c, "127.0.0.1", port) == "OK"
            clients.append(c)
        (entry,) = [e for e in sdjson("listeners") if e["local_port"] == port]
        assert entry["queued"] == 3
        clients.append(SD.accept(lst))
        (entry,) = [e for e in sdjson("listeners") if e["local_port"] == port]
        assert entry["queued"] == 2

        text = sdctl("listeners").stdout.splitlines()
        assert text[0].split() == ["Local", "Backlog", "Queued", "Group",
                                   "UID", "PID", "Inode"]
        (line,) = [ln for ln in text if f"127.0.0.1:{port}" in ln]
        assert line.split()[1:4] == ["16", "2", "1"]
    finally:
        for x in clients + [lst]:
            x.close()


def test_listeners_reuseport_group(no_leak):
    l1, port = SD.listener(opts=[(SOL_SD, SD_REUSEPORT, 1)])
    l2 = SD.socket()
    l2.setsockopt(SOL_SD, SD_REUSEPORT, 1)
    assert SD.bind(l2, "127.0.0.1", port) == "OK"
    l2.listen(8)
    try:
        group = [e for e in sdjson("listeners") if e["local_port"] == port]
        assert len(group) == 2
        assert [e["group"] for e in group] == [2, 2]
        assert sorted(e["backlog"] for e in group) == [8, 16]
        assert {e["inode"] for e in group} == {
            os.fstat(x.fileno()).st_ino for x in (l1, l2)}
    finally:
        l1.close()
        l2.close()


def test_listener_gone_after_close(no_leak):
    lst, port = SD.listener()
    lst.close()
    assert wait_for(lambda: not [e for e in sdjson("listeners")
                                 if e["local_port"] == port])
    assert not [e for e in sdjson("sockets") if e.get("local_port") == port]


# ---- rules ----------------------------------------------------------------

def test_rules_show_what_was_added(clean_rules):
    rid = add_rule("allow", "dir", "connect,bind", "uid", "1000-2000",
                   "gid", "10", "local", "10.0.0.0/8", "lport", "1000-2000",
                   "remote", "fd00::/16", "rport", "443",
                   "comment", "hello world")
    (r,) = rules()
    assert r["id"] == rid and r["position"] == 0
    assert r["action"] == "allow"
    assert r["dir"] == ["connect", "bind"]
    assert (r["uid_min"], r["uid_max"]) == (1000, 2000)
    assert (r["gid_min"], r["gid_max"]) == (10, 10)
    assert r["local_addr"] == "10.0.0.0" and r["local_prefix"] == 8
    assert (r["local_port_min"], r["local_port_max"]) == (1000, 2000)
    assert r["local"] == "10.0.0.0/8:1000-2000"
    assert r["remote_addr"] == "fd00::" and r["remote_prefix"] == 16
    assert (r["remote_port_min"], r["remote_port_max"]) == (443, 443)
    assert r["remote"] == "[fd00::]/16:443"
    assert r["hits"] == 0
    assert r["comment"] == "hello world"

    rid2 = add_rule("deny", "remote", "10.1.2.3")
    r2 = rules()[1]
    assert r2["id"] == rid2 and r2["position"] == 1
    assert r2["action"] == "deny"
    assert r2["dir"] == ["connect", "accept", "bind"]
    assert r2["remote_addr"] == "10.1.2.3" and r2["remote_prefix"] == 32
    assert r2["remote"] == "10.1.2.3:*"
    for key in ("uid_min", "gid_min", "local", "local_addr", "remote_port_min",
                "comment"):
        assert key not in r2            # omitted: any

    text = sdctl("rules").stdout.splitlines()
    assert text[0].split() == ["#", "Id", "Action", "Dir", "UID", "GID",
                               "Local", "Remote", "Hits", "Comment"]
    assert text[1].split() == ["0", str(rid), "allow", "connect,bind",
                               "1000-2000", "10", "10.0.0.0/8:1000-2000",
                               "[fd00::]/16:443", "0", "hello", "world"]
    assert text[2].split() == ["1", str(rid2), "deny", "all", "*", "*", "*",
                               "10.1.2.3:*", "0", "-"]


def test_rules_add_prints_the_id_in_json(clean_rules):
    out = json.loads(sdctl("--json", "rules", "add", "deny", "rport", "9").stdout)
    assert list(out) == ["id"]
    assert rules()[0]["id"] == out["id"]


def test_connect_rule_refuses_with_eacces(clean_rules, no_leak):
    lst, port = SD.listener()
    other, oport = SD.listener()
    try:
        before = stats()
        rid = add_rule("deny", "dir", "connect", "remote", "127.0.0.1",
                       "rport", port)
        assert try_connect("127.0.0.1", port) == "EACCES"
        assert try_connect("127.0.0.1", oport) == "OK"
        after = stats()
        assert after["denied_connect"] == before["denied_connect"] + 1
        assert after["denied_accept"] == before["denied_accept"]
        (r,) = rules()
        assert r["id"] == rid and r["hits"] == 1
        # Nothing reached the listener.
        lst.setblocking(False)
        with pytest.raises(BlockingIOError):
            SD.accept(lst)
    finally:
        lst.close()
        other.close()


def test_connect_rule_with_prefix_and_family(clean_rules, no_leak):
    lst, port = SD.listener("::")         # takes IPv4 and IPv6
    try:
        add_rule("deny", "dir", "connect", "remote", "::1")
        assert try_connect("::1", port) == "EACCES"
        assert try_connect("127.0.0.1", port) == "OK"
        sdctl("rules", "flush")
        add_rule("deny", "dir", "connect", "remote", "127.0.0.0/8")
        assert try_connect("127.0.0.1", port) == "EACCES"
        assert try_connect("::1", port) == "OK"
        sdctl("rules", "flush")
        add_rule("deny", "dir", "connect", "remote", "10.0.0.0/8")
        assert try_connect("127.0.0.1", port) == "OK"
    finally:
        lst.close()


def test_accept_rule_refuses_with_econnrefused(clean_rules, no_leak):
    lst, port = SD.listener()
    try:
        before = stats()
        add_rule("deny", "dir", "accept", "local", "127.0.0.1", "lport", port)
        assert try_connect("127.0.0.1", port) == "ECONNREFUSED"
        after = stats()
        assert after["denied_accept"] == before["denied_accept"] + 1
        assert after["denied_connect"] == before["denied_connect"]
        assert rules()[0]["hits"] == 1
        (entry,) = [e for e in sdjson("listeners") if e["local_port"] == port]
        assert entry["queued"] == 0
    finally:
        lst.close()


def test_bind_rule_refuses_bind_and_listen(clean_rules, no_leak):
    port = free_port()
    early = SD.socket()
    assert SD.bind(early, "127.0.0.1", free_port()) == "OK"
    eport = sockname(early)[1]
    try:
        before = stats()
        add_rule("deny", "dir", "bind", "lport", port)
        add_rule("deny", "dir", "bind", "lport", eport)
        s = SD.socket()
        assert SD.bind(s, "127.0.0.1", port) == "EACCES"
        assert SD.bind(s, "127.0.0.1", 0) == "OK"      # another port
        s.close()
        with pytest.raises(PermissionError):
            early.listen(4)                             # listen checks too
        after = stats()
        assert after["denied_bind"] == before["denied_bind"] + 2
        assert [r["hits"] for r in rules()] == [1, 1]
    finally:
        early.close()


def test_subject_is_the_connecting_task_or_the_listener_owner(clean_rules,
                                                             no_leak):
    lst, port = SD.listener()
    try:
        # accept rules look at the listener's owner (root), not the client.
        add_rule("deny", "dir", "accept", "uid", "65534")
        assert nobody_connect("127.0.0.1", port) == "OK"
        add_rule("deny", "dir", "accept", "uid", "0", "position", "0")
        assert nobody_connect("127.0.0.1", port) == "ECONNREFUSED"
        sdctl("rules", "flush")
        # connect rules look at the connecting task.
        add_rule("deny", "dir", "connect", "uid", "65534")
        assert nobody_connect("127.0.0.1", port) == "EACCES"
        assert try_connect("127.0.0.1", port) == "OK"
        sdctl("rules", "flush")
        add_rule("deny", "dir", "connect", "gid", "65534")
        assert nobody_connect("127.0.0.1", port) == "EACCES"
        assert try_connect("127.0.0.1", port) == "OK"
    finally:
        lst.close()


def test_first_match_wins_position_del_flush(clean_rules, no_leak):
    lst, port = SD.listener()
    try:
        a = add_rule("allow", "dir", "connect", "rport", port, "comment", "a")
        b = add_rule("deny", "dir", "connect", "rport", port, "comment", "b")
        assert try_connect("127.0.0.1", port) == "OK"      # a matches first
        assert [r["hits"] for r in rules()] == [1, 0]

        c = add_rule("deny", "dir", "connect", "rport", port,
                     "position", "0", "comment", "c")
        d = add_rule("allow", "dir", "bind", "position", "1", "comment", "d")
        listed = rules()
        assert [r["id"] for r in listed] == [c, d, a, b]
        assert [r["comment"] for r in listed] == ["c", "d", "a", "b"]
        assert [r["position"] for r in listed] == [0, 1, 2, 3]
        assert len({a, b, c, d}) == 4
        assert try_connect("127.0.0.1", port) == "EACCES"  # c now first
        assert [r["hits"] for r in rules()] == [1, 0, 1, 0]

        sdctl("rules", "del", c)
        assert [r["id"] for r in rules()] == [d, a, b]
        assert try_connect("127.0.0.1", port) == "OK"
        sdctl("rules", "del", a)
        assert try_connect("127.0.0.1", port) == "EACCES"  # b decides

        out = sdctl("rules", "del", a, check=False)
        assert out.returncode == 1
        assert out.stderr == f"sdctl: rules del: no rule with id {a}\n"

        sdctl("rules", "flush")
        assert rules() == []
        assert sdctl("rules").stdout.splitlines()[1:] == []
        assert try_connect("127.0.0.1", port) == "OK"
    finally:
        lst.close()


def test_default_policy_deny_then_allow_rules(clean_rules, no_leak):
    lst, port = SD.listener()
    other, oport = SD.listener()
    try:
        sdctl("config", "set", "default_policy", "deny")
        assert try_connect("127.0.0.1", port) == "EACCES"
        # The connect is allowed; then the listener's accept is denied.
        add_rule("allow", "dir", "connect", "remote", "127.0.0.1",
                 "rport", port)
        assert try_connect("127.0.0.1", port) == "ECONNREFUSED"
        add_rule("allow", "dir", "accept", "local", "127.0.0.1",
                 "lport", port)
        assert try_connect("127.0.0.1", port) == "OK"
        assert try_connect("127.0.0.1", oport) == "EACCES"
        s = SD.socket()
        assert SD.bind(s, "127.0.0.1", 0) == "EACCES"      # bind too
        s.close()
        sdctl("config", "set", "default_policy", "allow")
        assert try_connect("127.0.0.1", oport) == "OK"
    finally:
        lst.close()
        other.close()


def test_rules_kernel_errors_are_reported(clean_rules):
    out = sdctl("rules", "add", "allow", "lport", "2000-1000", check=False)
    assert out.returncode == 1
    assert re.fullmatch(r"sdctl: rules add: Invalid argument \(kernel: .+\)\n",
                        out.stderr), out.stderr
    out = sdctl("rules", "add", "allow", "comment", "c" * 64, check=False)
    assert out.returncode == 1
    assert out.stderr.startswith("sdctl: rules add: "), out.stderr
    assert "(kernel: " in out.stderr
    assert rules() == []
    sdctl("rules", "add", "allow", "comment", "c" * 63)
    assert rules()[0]["comment"] == "c" * 63


def test_unprivileged_user_reads_but_cannot_change_rules(clean_rules):
    rid = add_rule("deny", "rport", "1")
    for args in (["rules", "add", "allow"], ["rules", "del", rid],
                 ["rules", "flush"]):
        out = sdctl(*args, user="nobody", check=False)
        assert out.returncode == 1, args
        assert out.stderr == RULES_EPERM, out.stderr
        assert out.stdout == ""
    assert [r["id"] for r in rules()] == [rid]
    assert [r["id"] for r in sdjson("rules", user="nobody")] == [rid]
    for args in (["sockets"], ["listeners"], ["stats"], ["config"],
                 ["version"]):
        sdjson(*args, user="nobody")
        sdctl(*args, user="nobody")
    out = sdctl("config", "set", "redirect", "0", user="nobody", check=False)
    assert out.returncode == 1
    assert out.stderr.startswith("sdctl: permission denied: changing net.sd.redirect")


# ---- the fabric key ---------------------------------------------------------

@pytest.fixture
def no_key():
    """The test namespace has no fabric key before and after."""
    sdctl("key", "clear", check=False)
    yield
    sdctl("key", "clear", check=False)


def fpr(key):
    return hashlib.sha256(key).hexdigest()[:16]


def test_key_set_from_a_file_or_stdin_show_and_clear(no_key, tmp_path):
    assert sdjson("key") == {"key": "none"}
    assert sdctl("key").stdout.split() == ["key", "none"]
    f = tmp_path / "fabric.key"
    key = os.urandom(48)
    f.write_bytes(key)
    assert sdctl("key", "set", f).stdout == ""
    assert sdjson("key", "show") == {"key": "set", "fingerprint": fpr(key)}
    assert sdctl("key").stdout.split() == ["key", "set", "fingerprint",
                                           fpr(key)]
    # Standard input, replacing it; the key is never printed.
    key2 = os.urandom(32)
    out = subprocess.run([SDCTL, "key", "set", "-"], input=key2,
                         capture_output=True, timeout=60)
    assert out.returncode == 0 and out.stdout == b"" and out.stderr == b"", out
    assert sdjson("key") == {"key": "set", "fingerprint": fpr(key2)}
    sdctl("key", "clear")
    assert sdjson("key") == {"key": "none"}
    out = sdctl("key", "clear", check=False)
    assert out.returncode == 1 and out.stderr == "sdctl: key clear: no key is set\n"


@pytest.mark.parametrize("length", [0, 31, 65, 4096])
def test_key_of_a_bad_length_is_refused(no_key, tmp_path, length):
    f = tmp_path / "k"
    f.write_bytes(b"k" * length)
    out = sdctl("key", "set", f, check=False)
    assert out.returncode == 1, out
    assert "it must be 32 to 64 bytes" in out.stderr, out.stderr
    assert sdjson("key") == {"key": "none"}


def test_key_set_of_a_missing_file(no_key, tmp_path):
    out = sdctl("key", "set", tmp_path / "nothing", check=False)
    assert out.returncode == 1 and "No such file" in out.stderr, out.stderr


def test_key_is_the_admin_s_even_to_look(no_key, tmp_path):
    f = tmp_path / "k"
    f.write_bytes(os.urandom(32))
    for args in (["key"], ["key", "clear"]):
        out = sdctl(*args, user="nobody", check=False)
        assert out.returncode == 1, args
        assert out.stderr == KEY_EPERM, out.stderr
        assert out.stdout == ""
    out = subprocess.run(NOBODY + [SDCTL, "key", "set", "-"],
                         input=os.urandom(32), capture_output=True,
                         timeout=60)
    assert out.returncode == 1 and out.stderr.decode() == KEY_EPERM, out
    assert sdjson("key") == {"key": "none"}
    sdctl("key", "set", f)
    out = sdctl("key", "clear", user="nobody", check=False)
    assert out.stderr == KEY_EPERM
    assert sdjson("key")["key"] == "set"


def test_key_is_per_namespace(no_key, tmp_path):
    f = tmp_path / "k"
    f.write_bytes(os.urandom(32))
    sdctl("key", "set", f)
    assert sdjson("key", prefix=["unshare", "--net"]) == {"key": "none"}
    # Root of a new user namespace owns its network namespace's key.
    out = sdctl("key", "set", f, prefix=["unshare", "--user",
                                          "--map-root-user", "--net"])
    assert out.stdout == ""
    assert sdjson("key")["fingerprint"] == fpr(f.read_bytes())


def test_rules_and_settings_are_per_namespace(clean_rules, restore_settings):
    add_rule("deny", "rport", "1")
    netns = ["unshare", "--net"]
    assert sdjson("rules", prefix=netns) == []
    assert sdjson("sockets", prefix=netns) == []
    assert sdjson("config", prefix=netns)["default_policy"] == "allow"
    # Root of a new user namespace owns its new network namespace's rules.
    sdctl("rules", "add", "deny", prefix=["unshare", "--user",
                                          "--map-root-user", "--net"])
    assert len(rules()) == 1


# ---- counters ---------------------------------------------------------------

def test_stats_has_every_counter():
    st = stats()
    assert list(st) == STATS
    assert all(isinstance(v, int) and v >= 0 for v in st.values())
    lines = sdctl("stats").stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == STATS
    assert [int(ln.split()[1]) for ln in lines] == [stats()[k] for k in STATS]


def test_suite_counters_are_sdctl_s():
    """The suite asks for the counters itself (conftest.sd_stats, names
    from the uapi header): the same names and order as sdctl's."""
    assert list(sd_stats()) == list(stats()) == STATS


def test_counters_move(clean_rules, no_leak):
    lst, port = SD.listener()
    try:
        before = stats()
        c = SD.socket()
        assert SD.connect(c, "127.0.0.1", port) == "OK"
        mid = stats()
        assert mid["connects"] == before["connects"] + 1
        s = SD.accept(lst)
        after = stats()
        assert after["accepts"] == before["accepts"] + 1
        c.close()
        s.close()

        before = stats()
        assert try_connect("127.0.0.1", free_port()) == "ECONNREFUSED"
        after = stats()
        assert after["refused"] == before["refused"] + 1
        assert after["connects"] == before["connects"]

        add_rule("deny", "dir", "connect", "rport", port)
        before = stats()
        assert try_connect("127.0.0.1", port) == "EACCES"
        assert try_connect("127.0.0.1", port) == "EACCES"
        after = stats()
        assert after["denied_connect"] == before["denied_connect"] + 2
        assert after["connects"] == before["connects"]
        assert rules()[0]["hits"] == 2
    finally:
        lst.close()


# ---- a big dump ---------------------------------------------------------------

def test_dump_of_10000_sockets_is_complete(restore_settings):
    pairs = 5000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * pairs + 100
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    sdctl("config", "set", "ring_size", "4096")
    socks = []
    lst, port = SD.listener(backlog=128)
    try:
        for _ in range(pairs):
            c = SD.socket()
            assert SD.connect(c, "127.0.0.1", port) == "OK"
            socks.append(c)
            socks.append(SD.accept(lst))
        entries = sdjson("sockets", timeout=600)
        mine = [e for e in entries
                if e.get("local_port") == port or e.get("peer_port") == port]
        assert len(mine) == 2 * pairs + 1
        inodes = {e["inode"] for e in entries}
        assert len(inodes) == len(entries), "an entry appears twice"
        assert {os.fstat(x.fileno()).st_ino for x in socks + [lst]} <= inodes
        assert all(e["tx_size"] == 4096 for e in mine if e["state"] == "ESTAB")
        text = sdctl("sockets", timeout=600).stdout.splitlines()
        assert len(text) == len(entries) + 1
    finally:
        for x in socks:
            x.close()
        lst.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---- settings -----------------------------------------------------------------

def test_config_show(restore_settings):
    cfg = sdjson("config")
    assert sorted(cfg) == sorted(p.name for p in SYSCTL.iterdir())
    assert set(SETTINGS) <= set(cfg)
    low, high = (int(x) for x in sysctl("port_range").split())
    assert cfg["port_range"] == [low, high]
    assert cfg["ring_size"] == int(sysctl("ring_size"))
    assert cfg["ring_size_max"] == int(sysctl("ring_size_max"))
    assert cfg["default_policy"] in ("allow", "deny")
    assert cfg["redirect"] in (0, 1)
    text = dict(ln.split(None, 1) for ln in sdctl("config").stdout.splitlines())
    assert text["port_range"] == f"{low} {high}"
    assert text["ring_size"] == sysctl("ring_size")


def test_config_defaults():
    # A fresh namespace shows the defaults.
    cfg = sdjson("config", prefix=["unshare", "--net"])
    assert cfg["ring_size"] == 131072
    assert cfg["default_policy"] == "allow"
    assert cfg["redirect"] == 0


GOOD = {
    "port_range": [("20000 30000", [20000, 30000]), ("1 65535", [1, 65535]),
                   ("5000 5000", [5000, 5000])],
    "ring_size": [("8192", 8192), ("4096", 4096), ("67108864", 67108864)],
    "ring_size_max": [("1048576", 1048576), ("131072", 131072),
                      ("67108864", 67108864)],
    "default_policy": [("deny", "deny"), ("allow", "allow")],
    "redirect": [("1", 1), ("0", 0)],
}
BAD = {
    "port_range": ["30000 20000", "0 100", "1000 70000", "abc", "5000",
                   "-1 100"],
    "ring_size": ["4095", "6000", "2048", "134217728", "0", "-4096", "abc"],
    "ring_size_max": ["100", "134217728", "-1", "abc"],
    "default_policy": ["maybe", "1", "allowed", "deny allow"],
    "redirect": ["2", "-1", "on"],
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_config_set_and_rejects(name, restore_settings):
    for value, shown in GOOD[name]:
        sdctl("config", "set", name, *value.split())
        assert sdjson("config")[name] == shown, value
        assert sysctl(name).split() == [str(x) for x in
                                        (shown if isinstance(shown, list)
                                         else [shown])]
    # A rejected value keeps the one before.
    sdctl("config", "set", f"net.sd.{name}", *GOOD[name][0][0].split())
    kept = sysctl(name)
    for value in BAD[name]:
        out = sdctl("config", "set", name, value, check=False)
        assert out.returncode == 1, value
        assert out.stderr == f"sdctl: net.sd.{name}: invalid value '{value}'\n"
        assert sysctl(name) == kept, value


def test_config_set_usage_errors():
    for args in (["config", "set"], ["config", "set", "ring_size"],
                 ["config", "set", "nonexistent", "1"],
                 ["config", "set", "../ring_size", "4096"],
                 ["config", "set", "net.sd.", "1"]):
        out = sdctl(*args, check=False)
        assert out.returncode == 2, args
        assert out.stderr.startswith("sdctl: "), args


# ---- the command line -----------------------------------------------------------

def test_version():
    v = sdjson("version")
    assert v["family"] == "sd" and v["family_version"] == 1
    assert v["family_id"] > 0x10
    assert v["sdctl"] == v["libsd"]
    modinfo = pathlib.Path("/sys/module/af_sd/version").read_text().strip()
    assert v["module"] == modinfo
    assert set(v["features"]) == {"redirect", "zerocopy", "tcp_inq",
                                  "link_daemon"}
    text = sdctl("version").stdout.splitlines()
    assert text[0].split()[0] == "sdctl"


def test_every_read_command_prints_one_json_document(clean_rules):
    add_rule("allow", "comment", 'quote " backslash \\ tab \t end')
    for args in (["sockets"], ["sockets", "show"], ["listeners"], ["rules"],
                 ["rules", "show"], ["stats"], ["config"], ["config", "show"],
                 ["key"], ["key", "show"], ["version"], []):
        out = sdctl("--json", *args).stdout
        json.loads(out)
        assert out.endswith("\n") and out.count("\n") >= 1
    assert rules()[0]["comment"] == 'quote " backslash \\ tab \t end'
    # -j and a prefix of the object work too.
    assert isinstance(json.loads(sdctl("rul", "-j").stdout), list)


def test_help():
    out = sdctl("help").stdout
    for obj in ("sockets", "listeners", "rules", "stats", "config", "key",
                "version"):
        assert f"sdctl {obj}" in out
    assert sdctl("--help").stdout == out
    assert "rules add" in sdctl("help", "rules").stdout


@pytest.mark.parametrize("args", [
    ["bogus"], ["s"], ["sockets", "bogus"], ["sockets", "show", "x"],
    ["--bogus"], ["-x", "sockets"], ["listeners", "show", "1"],
    ["rules", "add"], ["rules", "add", "maybe"],
    ["rules", "add", "allow", "dir"], ["rules", "add", "allow", "dir", "up"],
    ["rules", "add", "allow", "dir", "connect,"],
    ["rules", "add", "allow", "uid", "x"], ["rules", "add", "allow", "uid", "-1"],
    ["rules", "add", "allow", "uid", "4294967296"],
    ["rules", "add", "allow", "local", "300.1.1.1"],
    ["rules", "add", "allow", "local", "10.0.0.0/33"],
    ["rules", "add", "allow", "local", "::1/129"],
    ["rules", "add", "allow", "local", "host.example"],
    ["rules", "add", "allow", "lport", "70000"],
    ["rules", "add", "allow", "rport", "1-"],
    ["rules", "add", "allow", "position", "x"],
    ["rules", "add", "allow", "comment", "a", "comment", "b"],
    ["rules", "add", "allow", "sideways", "1"],
    ["rules", "del"], ["rules", "del", "abc"], ["rules", "del", "1", "2"],
    ["rules", "flush", "now"], ["rules", "bogus"],
    ["stats", "extra"], ["config", "bogus"], ["config", "show", "x"],
    ["key", "set"], ["key", "set", "a", "b"], ["key", "show", "x"],
    ["key", "clear", "x"], ["key", "bogus"],
    ["version", "extra"], ["help", "nothing"], ["help", "a", "b"],
])
def test_bad_command_lines_exit_2(args):
    out = sdctl(*args, check=False)
    assert out.returncode == 2, (args, out.stderr)
    assert out.stderr.startswith("sdctl: "), out.stderr
    assert out.stdout == ""


def test_mutating_usage_errors_change_nothing(clean_rules):
    sdctl("rules", "add", "allow", "lport", "70000", check=False)
    assert rules() == []
