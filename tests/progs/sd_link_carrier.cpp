// SPDX-License-Identifier: GPL-2.0
//
// sd_link_carrier: two hosts' sdlink carriers (tools/sdlinkd/carrier.hpp,
// Documentation/remote.rst) between two network namespaces of one machine.
//
//   sd_link_carrier SCENARIO NETNS_A NETNS_B DEVICE_A DEVICE_B
//
// The process forks: the parent is host A in NETNS_A with RDMA device
// DEVICE_A, the child host B in NETNS_B with DEVICE_B (GID index 1, port
// 1).  Each host makes an AF_SD listener on 127.0.0.1 and connects to it:
// the connecting socket is the "program" (plain system calls only, no
// libsd), the accepted one the "daemon" end, which a Carrier takes.  The
// hosts exchange their Endpoints over a socketpair, connect their queue
// pairs, and a daemon thread on each runs the event loop (spin while busy,
// epoll on the completion channel and the sockets when idle) while the
// main thread plays the program:
//
//   stream     8 MiB each way at the same time, sent in chunks of varied
//              size, every byte checked, then end of stream both ways
//   small      5000 messages of 1 to 300 bytes each way at the same time,
//              every byte checked, then end of stream
//   pingpong   500 round trips of 64 bytes (A sends, B echoes), then end
//              of stream: the per-message counts of the carrier
//   halfclose  A sends 1 MiB and shuts down; B reads it to the end of
//              stream, then sends 1 MiB back and shuts down
//   reset      A sends 100000 bytes; once B has them all, A closes with
//              SO_LINGER 0: B's program reads ECONNRESET
//   mismatch   the two namespaces' rings differ in size: both carriers
//              refuse the peer (EMSGSIZE) and both programs read ECONNRESET
//   corrupt    two connections; A's program writes a corrupt record header
//              into its send ring on the first one: that connection is
//              reset on both hosts (ECONNRESET), the second carries 1 MiB
//              each way to its clean end
//
// Each host prints one JSON line: its carriers' states, errors and
// counters, the daemon loop's sleeps, and "ok".  Exit 0 only if both hosts'
// checks passed.  Nothing here waits for a time: every wait is for an
// event the other side must produce.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sd.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "carrier.hpp"

namespace {

using sdlink::Carrier;
using sdlink::Device;
using sdlink::Endpoint;
using sdlink::State;

char host = '?';
bool ok = true;

void complain(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	std::fprintf(stderr, "sd_link_carrier[%c]: ", host);
	std::vfprintf(stderr, fmt, ap);
	std::fputc('\n', stderr);
	va_end(ap);
	ok = false;
}

[[noreturn]] void die(const char *what, int err = errno)
{
	std::fprintf(stderr, "sd_link_carrier[%c]: %s: %s\n", host, what, std::strerror(err));
	std::exit(1);
}

// Byte i of the stream that host h sends on connection c.
unsigned char pattern(char h, unsigned c, std::uint64_t i)
{
	const std::uint64_t salt = static_cast<unsigned char>(h) ^ (c * 0x35u);
	return static_cast<unsigned char>(((i * 2654435761u) >> 13) ^ salt);
}

// A small deterministic generator for message sizes.
struct Rng {
	std::uint64_t s;
	std::uint32_t next()
	{
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		return static_cast<std::uint32_t>(s >> 33);
	}
};

void write_all(int fd, const void *p, std::size_t len)
{
	const auto *b = static_cast<const unsigned char *>(p);
	while (len) {
		const ssize_t n = write(fd, b, len);
		if (n <= 0)
			die("write");
		b += n;
		len -= static_cast<std::size_t>(n);
	}
}

void read_all(int fd, void *p, std::size_t len)
{
	auto *b = static_cast<unsigned char *>(p);
	while (len) {
		const ssize_t n = read(fd, b, len);
		if (n <= 0)
			die("read", n ? errno : EPIPE);
		b += n;
		len -= static_cast<std::size_t>(n);
	}
}

// ---- the program's side: plain system calls ----------------------------------

// Send bytes [0, total) of our pattern in chunks of 1 to max bytes.
// Returns 0 or the errno that stopped it.
int send_stream(int fd, unsigned conn, std::uint64_t total, std::uint32_t max, std::uint64_t seed)
{
	std::vector<unsigned char> buf(max);
	Rng rng{seed};
	for (std::uint64_t sent = 0; sent < total;) {
		const std::size_t n = static_cast<std::size_t>(
			std::min<std::uint64_t>(1 + rng.next() % max, total - sent));
		for (std::size_t i = 0; i < n; i++)
			buf[i] = pattern(host, conn, sent + i);
		std::size_t off = 0;
		while (off < n) {
			const ssize_t w = send(fd, buf.data() + off, n - off, MSG_NOSIGNAL);
			if (w < 0)
				return errno;
			off += static_cast<std::size_t>(w);
		}
		sent += n;
	}
	return 0;
}

// Read the peer's pattern until the end of the stream (or an error, whose
// errno goes to *err), checking every byte.  Returns the bytes read, or
// stops early at want bytes when want is not 0.
std::uint64_t recv_stream(int fd, unsigned conn, std::uint64_t want, int *err)
{
	const char peer = host == 'a' ? 'b' : 'a';
	std::vector<unsigned char> buf(65536);
	std::uint64_t got = 0;
	*err = 0;
	for (;;) {
		std::size_t ask = buf.size();
		if (want)
			ask = static_cast<std::size_t>(std::min<std::uint64_t>(ask, want - got));
		if (!ask)
			return got;
		const ssize_t n = recv(fd, buf.data(), ask, 0);
		if (n < 0) {
			*err = errno;
			return got;
		}
		if (n == 0)
			return got;
		for (ssize_t i = 0; i < n; i++)
			if (buf[static_cast<std::size_t>(i)] !=
			    pattern(peer, conn, got + static_cast<std::uint64_t>(i))) {
				complain("connection %u: byte %llu differs", conn,
					 static_cast<unsigned long long>(got) +
						 static_cast<unsigned long long>(i));
				*err = EILSEQ;
				return got;
			}
		got += static_cast<std::uint64_t>(n);
	}
}

// Both ways at once on connection conn: bytes each, then end of stream.
void exchange(int fd, unsigned conn, std::uint64_t bytes, std::uint32_t max_chunk)
{
	int send_err = 0;
	std::thread writer([&] {
		send_err = send_stream(fd, conn, bytes, max_chunk, 0x5d + conn + (host == 'b'));
		if (!send_err && shutdown(fd, SHUT_WR))
			send_err = errno;
	});
	int err = 0;
	const std::uint64_t got = recv_stream(fd, conn, 0, &err);
	writer.join();
	if (send_err)
		complain("connection %u: send: %s", conn, std::strerror(send_err));
	if (err)
		complain("connection %u: recv: %s", conn, std::strerror(err));
	if (got != bytes)
		complain("connection %u: %llu of %llu bytes, then the end of stream", conn,
			 static_cast<unsigned long long>(got), static_cast<unsigned long long>(bytes));
}

// The peer's stream must end in ECONNRESET, after whatever of it came.
void expect_reset(int fd, unsigned conn)
{
	int err = 0;
	recv_stream(fd, conn, 0, &err);
	if (err != ECONNRESET)
		complain("connection %u: expected ECONNRESET, got %s", conn,
			 err ? std::strerror(err) : "the end of stream");
}

// ---- the daemon's side: the event loop ------------------------------------------

struct LoopStats {
	std::uint64_t steps = 0;
	std::uint64_t sleeps = 0;	// epoll_wait calls
};

bool live(const Carrier &c)
{
	return c.state() == State::NEW || c.state() == State::RUNNING;
}

// Spin while there is work; when a few steps in a row found none, arm
// every wake-up and sleep in epoll until a completion or a socket event.
void run_loop(Device &dev, const std::vector<Carrier *> &cs, LoopStats &st)
{
	const char *spin_env = std::getenv("SD_CARRIER_SPIN");
	const unsigned spin = spin_env ? static_cast<unsigned>(std::atoi(spin_env)) : 64;
	// Debugging only: say where every carrier stands after a while asleep.
	const bool debug = std::getenv("SD_CARRIER_DEBUG") != nullptr;
	const int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.u64 = ~0ULL;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, dev.event_fd(), &ev))
		die("epoll_ctl");
	for (std::size_t i = 0; i < cs.size(); i++) {
		if (cs[i]->fd() < 0)
			continue;
		ev.events = Carrier::epoll_events();
		ev.data.u64 = i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i]->fd(), &ev))
			die("epoll_ctl");
	}
	unsigned idle = 0;
	for (;;) {
		st.steps++;
		bool busy = dev.poll(), any = false;
		for (Carrier *c : cs) {
			busy |= c->poll();
			any |= live(*c);
		}
		if (!any)
			break;
		if (busy) {
			idle = 0;
			continue;
		}
		if (++idle < spin)
			continue;
		idle = 0;
		if (dev.arm())
			continue;
		bool sleep = true;
		for (Carrier *c : cs)
			sleep &= c->prepare_sleep();
		if (!sleep)
			continue;
		epoll_event evs[16];
		st.sleeps++;
		const int n = epoll_wait(ep, evs, 16, debug ? 5000 : -1);
		if (debug && n == 0)
			for (Carrier *c : cs) {
				char line[1024];
				c->describe(line, sizeof(line));
				std::fprintf(stderr, "sd_link_carrier[%c]: asleep: %s\n", host, line);
			}
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		for (int i = 0; i < n; i++)
			if (evs[i].data.u64 == ~0ULL)
				dev.take_events();
	}
	close(ep);
}

// ---- one host -------------------------------------------------------------------

const char *state_name(State s)
{
	switch (s) {
	case State::NEW: return "new";
	case State::RUNNING: return "running";
	case State::DONE: return "done";
	case State::RESET: return "reset";
	}
	return "?";
}

void enter_netns(const char *name)
{
	const std::string path = std::string("/run/netns/") + name;
	const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		die(path.c_str());
	close(fd);
}

// A connected pair on this host: the program's socket and the daemon's.
void local_pair(int lst, const sockaddr_in &sin, int *prog, int *daemon)
{
	*prog = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*prog < 0 || connect(*prog, reinterpret_cast<const sockaddr *>(&sin), sizeof(sin)))
		die("connect");
	*daemon = accept4(lst, nullptr, nullptr, SOCK_CLOEXEC);
	if (*daemon < 0)
		die("accept");
}

// The hostile program: a header no producer may write (an unknown flag),
// at the start of its own send ring, and the wake-up call for it.
void corrupt_send_ring(int prog)
{
	sd_mmap_offsets off = {};
	socklen_t len = sizeof(off);
	if (getsockopt(prog, SOL_SD, SD_MMAP_OFFSETS, &off, &len))
		die("SD_MMAP_OFFSETS");
	void *m = mmap(nullptr, off.tx.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, prog,
		       SD_PGOFF_TX_RING);
	if (m == MAP_FAILED)
		die("mmap");
	auto *hdr = reinterpret_cast<std::uint64_t *>(static_cast<unsigned char *>(m) + off.tx.data);
	const std::uint64_t word = std::uint64_t{SD_REC_VALID | 0x100} << 32 | 8;
	__atomic_store_n(hdr, word, __ATOMIC_RELEASE);
	const std::uint32_t dir = SD_TOKEN_TX;
	if (ioctl(prog, SD_IOC_WAKE, &dir))
		die("SD_IOC_WAKE");
	munmap(m, off.tx.mmap_len);
}

int run_host(const std::string &scenario, const char *netns, const char *devname, int ctl)
{
	enter_netns(netns);
	const unsigned nconn = scenario == "corrupt" ? 2 : 1;

	sockaddr_in sin = {};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(7400);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	const int lst = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lst < 0 || bind(lst, reinterpret_cast<const sockaddr *>(&sin), sizeof(sin)) ||
	    listen(lst, 8))
		die("listen");

	int err = 0;
	std::unique_ptr<Device> dev = Device::open(devname, 1, 4096, &err);
	if (!dev)
		die(devname, -err);

	std::vector<int> progs(nconn);
	std::vector<std::unique_ptr<Carrier>> owned(nconn);
	std::vector<Carrier *> cs(nconn);
	for (unsigned i = 0; i < nconn; i++) {
		int d;
		local_pair(lst, sin, &progs[i], &d);
		owned[i] = Carrier::create(*dev, d, &err);
		if (!owned[i])
			die("Carrier::create", -err);
		cs[i] = owned[i].get();
	}

	// The halves cross, then each host connects its queue pairs, then
	// both say they are ready (so that no write meets a queue pair that
	// is not ready to receive yet).
	for (Carrier *c : cs)
		write_all(ctl, &c->endpoint(), sizeof(Endpoint));
	std::vector<int> conn_err(nconn);
	for (unsigned i = 0; i < nconn; i++) {
		Endpoint peer;
		read_all(ctl, &peer, sizeof(peer));
		conn_err[i] = cs[i]->connect(peer);
	}
	char sync = 'r';
	write_all(ctl, &sync, 1);
	read_all(ctl, &sync, 1);

	LoopStats st;
	std::thread daemon([&] { run_loop(*dev, cs, st); });

	std::uint64_t messages = 0;
	if (scenario == "stream") {
		exchange(progs[0], 0, 8ULL << 20, 65536);
	} else if (scenario == "small") {
		messages = 5000;
		std::thread writer([&] {
			Rng rng{host == 'a' ? 1U : 2U};
			std::uint64_t at = 0;
			unsigned char buf[300];
			for (std::uint64_t m = 0; m < messages; m++) {
				const std::size_t n = 1 + rng.next() % sizeof(buf);
				for (std::size_t i = 0; i < n; i++)
					buf[i] = pattern(host, 0, at + i);
				if (send(progs[0], buf, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
					complain("send of message %llu", static_cast<unsigned long long>(m));
				at += n;
			}
			shutdown(progs[0], SHUT_WR);
		});
		// What the peer sends: the same sizes from its seed.
		Rng rng{host == 'a' ? 2U : 1U};
		std::uint64_t total = 0;
		for (std::uint64_t m = 0; m < messages; m++)
			total += 1 + rng.next() % 300;
		int rerr = 0;
		const std::uint64_t got = recv_stream(progs[0], 0, 0, &rerr);
		writer.join();
		if (rerr || got != total)
			complain("small: %llu of %llu bytes (%s)", static_cast<unsigned long long>(got),
				 static_cast<unsigned long long>(total), std::strerror(rerr));
	} else if (scenario == "pingpong") {
		messages = 500;
		unsigned char msg[64], in[64];
		for (std::uint64_t m = 0; m < messages; m++) {
			if (host == 'a') {
				std::memset(msg, static_cast<int>('A' + m % 26), sizeof(msg));
				if (send(progs[0], msg, sizeof(msg), MSG_NOSIGNAL) != sizeof(msg))
					die("send");
			}
			std::size_t n = 0;
			while (n < sizeof(in)) {
				const ssize_t r = recv(progs[0], in + n, sizeof(in) - n, 0);
				if (r <= 0)
					die("recv", r ? errno : EPIPE);
				n += static_cast<std::size_t>(r);
			}
			if (host == 'b' && send(progs[0], in, sizeof(in), MSG_NOSIGNAL) != sizeof(in))
				die("send");
			if (host == 'a' && std::memcmp(in, msg, sizeof(msg)))
				complain("round trip %llu: the echo differs",
					 static_cast<unsigned long long>(m));
		}
		shutdown(progs[0], SHUT_WR);
		int rerr = 0;
		if (recv_stream(progs[0], 0, 0, &rerr) || rerr)
			complain("pingpong: no clean end of stream");
	} else if (scenario == "halfclose") {
		const std::uint64_t bytes = 1ULL << 20;
		int rerr = 0;
		if (host == 'a') {
			if (send_stream(progs[0], 0, bytes, 32768, 7) || shutdown(progs[0], SHUT_WR))
				complain("halfclose: send");
			if (recv_stream(progs[0], 0, 0, &rerr) != bytes || rerr)
				complain("halfclose: the reply did not come whole");
		} else {
			if (recv_stream(progs[0], 0, 0, &rerr) != bytes || rerr)
				complain("halfclose: the stream did not come whole");
			if (send_stream(progs[0], 0, bytes, 32768, 8) || shutdown(progs[0], SHUT_WR))
				complain("halfclose: send back");
		}
	} else if (scenario == "reset") {
		const std::uint64_t bytes = 100000;
		if (host == 'a') {
			if (send_stream(progs[0], 0, bytes, 4096, 9))
				complain("reset: send");
			read_all(ctl, &sync, 1);	// B has every byte
			const linger l = {1, 0};
			if (setsockopt(progs[0], SOL_SOCKET, SO_LINGER, &l, sizeof(l)))
				die("SO_LINGER");
			close(progs[0]);
			progs[0] = -1;
		} else {
			int rerr = 0;
			if (recv_stream(progs[0], 0, bytes, &rerr) != bytes || rerr)
				complain("reset: the bytes before the reset did not come");
			write_all(ctl, &sync, 1);
			expect_reset(progs[0], 0);
		}
	} else if (scenario == "mismatch") {
		if (conn_err[0] != -EMSGSIZE) {
			complain("mismatch: connect gave %d, not -EMSGSIZE", conn_err[0]);
			cs[0]->reset(-EMSGSIZE);	// so that the program's recv ends
		}
		expect_reset(progs[0], 0);
	} else if (scenario == "corrupt") {
		std::thread clean([&] { exchange(progs[1], 1, 1ULL << 20, 16384); });
		if (host == 'a')
			corrupt_send_ring(progs[0]);
		expect_reset(progs[0], 0);
		clean.join();
	} else {
		complain("no scenario %s", scenario.c_str());
		for (Carrier *c : cs)
			c->reset(-ECANCELED);
	}
	daemon.join();

	// What each connection must have ended as.
	for (unsigned i = 0; i < nconn; i++) {
		const Carrier &c = *cs[i];
		State want = State::DONE;
		int why = 0;
		if (scenario == "reset" || scenario == "mismatch" ||
		    (scenario == "corrupt" && i == 0)) {
			want = State::RESET;
			why = -ECONNRESET;
			if (scenario == "mismatch")
				why = -EMSGSIZE;
			else if (scenario == "corrupt" && host == 'a')
				why = -EPROTO;
		}
		if (c.state() != want || c.error() != why)
			complain("connection %u: carrier %s (%d: %s), expected %s (%d)", i,
				 state_name(c.state()), c.error(), c.reason(), state_name(want), why);
		if (c.counters().copies)
			complain("connection %u: %llu bytes copied", i,
				 static_cast<unsigned long long>(c.counters().copies));
	}

	std::string out = "{\"host\": \"" + std::string(1, host) + "\", \"scenario\": \"" +
			  scenario + "\", \"messages\": " + std::to_string(messages) +
			  ", \"loop_steps\": " + std::to_string(st.steps) +
			  ", \"sleeps\": " + std::to_string(st.sleeps) + ", \"carriers\": [";
	for (unsigned i = 0; i < nconn; i++) {
		const Carrier &c = *cs[i];
		const sdlink::Counters &k = c.counters();
		char buf[512];
		std::snprintf(buf, sizeof(buf),
			      "%s{\"state\": \"%s\", \"error\": %d, \"ring_size\": %u, "
			      "\"writes\": %llu, \"bytes\": %llu, \"batches\": %llu, "
			      "\"records\": %llu, \"credit_writes\": %llu, \"copies\": %llu, "
			      "\"zeroed\": %llu, \"wakes\": %llu, \"syscalls\": %llu, "
			      "\"imms\": %llu, \"rx_bytes\": %llu}",
			      i ? ", " : "", state_name(c.state()), c.error(), c.ring_size(),
			      static_cast<unsigned long long>(k.writes),
			      static_cast<unsigned long long>(k.bytes),
			      static_cast<unsigned long long>(k.batches),
			      static_cast<unsigned long long>(k.records),
			      static_cast<unsigned long long>(k.credit_writes),
			      static_cast<unsigned long long>(k.copies),
			      static_cast<unsigned long long>(k.zeroed),
			      static_cast<unsigned long long>(k.wakes),
			      static_cast<unsigned long long>(k.syscalls),
			      static_cast<unsigned long long>(k.imms),
			      static_cast<unsigned long long>(k.rx_bytes));
		out += buf;
	}
	out += "], \"ok\": " + std::string(ok ? "true" : "false") + "}\n";
	write_all(STDOUT_FILENO, out.data(), out.size());

	for (int p : progs)
		if (p >= 0)
			close(p);
	owned.clear();
	dev.reset();
	close(lst);
	return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 6) {
		std::fprintf(stderr, "usage: sd_link_carrier SCENARIO NETNS_A NETNS_B DEVICE_A DEVICE_B\n");
		return 2;
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		die("socketpair");
	std::fflush(stdout);
	const pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		host = 'b';
		close(sp[0]);
		std::_Exit(run_host(argv[1], argv[3], argv[5], sp[1]));
	}
	host = 'a';
	close(sp[1]);
	const int rc = run_host(argv[1], argv[2], argv[4], sp[0]);
	int status = 0;
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		std::fprintf(stderr, "sd_link_carrier: host b failed (status %d)\n", status);
		return 1;
	}
	return rc;
}
