// SPDX-License-Identifier: LGPL-2.1-or-later
//
// sdbench: ping-pong round trips and one-way throughput between two
// processes (fork), over
//
//   shm   the ceiling: libsd's ring code (lib/ring.hpp) on two rings in a
//         MAP_SHARED anonymous mapping, both sides busy-polling; no kernel
//   unix  AF_UNIX stream sockets (socketpair)
//   tcp   TCP over loopback, TCP_NODELAY
//   sd    AF_SD stream sockets through plain system calls
//
// With --malloc the stream test moves large messages the way the zero-copy
// benchmark of the paper does: the sender sends one page-aligned malloc'd
// buffer again and again (--rewrite: after a memset of all of it), the
// receiver takes each message whole into a page-aligned malloc'd buffer of
// the message size.  Under sdrun, malloc of 16 KiB or more is pool memory
// that libsd can hand over by remapping (zero copy).
//
// The count test runs no peer: one process sends size bytes on one end
// and receives them on the other, again and again, never waiting (the
// ring is never empty for the receive nor full for the send).  Under
// callgrind --toggle-collect='*count_loop*' the instructions it counts,
// divided by the iterations, are what one send and one receive cost, the
// same on any machine (bench/guest, Documentation/bench.rst).
//
// One JSON object per line on stdout for each measured point (see
// Documentation/bench.rst); progress on stderr.  bench/run drives it and
// bench/report.py turns the lines into tables and a plot.
#include <arpa/inet.h>
#include <linux/sd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ring.hpp"

namespace {

struct Options {
	std::string where = "host";
	std::string label;			// default: the transport's name
	std::vector<std::string> transports{"shm", "unix", "tcp", "sd"};
	std::vector<std::size_t> sizes{8, 64, 512, 4096, 65536, 1048576};
	std::vector<std::string> tests{"pingpong", "stream"};
	double seconds = 1.5;
	std::size_t ring_size = 128 * 1024;	// AF_SD's default (net.sd.ring_size)
	bool pin = true;
	// The stream test with malloc'd buffers and whole messages (--malloc),
	// the sender rewriting its buffer before each send (--rewrite).
	bool malloc_bufs = false, rewrite = false;
	// The two CPUs the peers run on (-1: not pinned), chosen once at the
	// start: the parent pins itself, so its later affinity is one CPU.
	int cpu_a = -1, cpu_b = -1;
};

std::uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000U +
	       static_cast<std::uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const char *what, int err)
{
	std::fprintf(stderr, "sdbench: %s: %s\n", what, std::strerror(err));
	std::exit(1);
}

// One empty poll of a spinning peer.  Every 1024th yields the CPU, so
// that two peers that share one CPU (an overcommitted host, --no-pin)
// still make progress; an idle pair of CPUs never gets that far.
inline void cpu_relax()
{
	static thread_local unsigned spins;

	if (++spins % 1024 == 0)
		sched_yield();
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	asm volatile("yield" ::: "memory");
#endif
}

// A byte stream between the two processes.  send_all and recv_all move
// exactly len bytes (recv_all returns false at the end of the stream);
// recv_some returns what one call gives (0 at the end).
class SockChan {
public:
	explicit SockChan(int fd) : fd_(fd) {}
	SockChan(const SockChan &) = delete;
	SockChan &operator=(const SockChan &) = delete;
	~SockChan() { close(fd_); }

	void send_all(const void *buf, std::size_t len)
	{
		const char *p = static_cast<const char *>(buf);
		while (len) {
			const ssize_t n = send(fd_, p, len, MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				die("send", errno);
			}
			p += n;
			len -= static_cast<std::size_t>(n);
		}
	}
	ssize_t recv_some(void *buf, std::size_t len)
	{
		for (;;) {
			const ssize_t n = recv(fd_, buf, len, 0);
			if (n >= 0)
				return n;
			if (errno != EINTR)
				die("recv", errno);
		}
	}
	void fin() { shutdown(fd_, SHUT_WR); }

private:
	int fd_;
};

// Two rings in shared memory, one per direction; the peers spin.
class ShmChan {
public:
	ShmChan(void *tx_base, const sd_ring_offset &tx, void *rx_base, const sd_ring_offset &rx)
		: p_(tx_base, tx), c_(rx_base, rx)
	{
		if (p_.error() || c_.error())
			die("ring", EINVAL);
	}

	void send_all(const void *buf, std::size_t len)
	{
		const char *p = static_cast<const char *>(buf);
		while (len) {
			const ssize_t n = p_.write(p, len);
			if (n == -EAGAIN) {
				wait_credit();
				continue;
			}
			if (n < 0)
				die("ring write", static_cast<int>(-n));
			p += n;
			len -= static_cast<std::size_t>(n);
		}
	}
	ssize_t recv_some(void *buf, std::size_t len)
	{
		for (;;) {
			const ssize_t n = c_.read(buf, len);
			if (n >= 0)
				return n;
			if (n != -EAGAIN)
				die("ring read", static_cast<int>(-n));
			cpu_relax();
		}
	}
	void fin()
	{
		if (const int e = p_.fin())
			die("ring fin", -e);
	}

private:
	// The ring is full: set NEED_CREDIT (the consumer then publishes its
	// credit on its next read, not only after half a ring) and spin on
	// the credit, as the kernel's path would sleep on it.
	void wait_credit()
	{
		int w = p_.prepare_wait();
		while (w == 1) {
			cpu_relax();
			const ssize_t room = p_.writable();
			if (room < 0)
				w = static_cast<int>(room);
			else if (room > 0)
				w = 0;
		}
		if (w < 0)
			die("ring credit", -w);
	}

	sd::Producer p_;
	sd::Consumer c_;
};

template <typename Chan> bool recv_all(Chan &ch, void *buf, std::size_t len)
{
	char *p = static_cast<char *>(buf);
	while (len) {
		const ssize_t n = ch.recv_some(p, len);
		if (n == 0)
			return false;
		p += n;
		len -= static_cast<std::size_t>(n);
	}
	return true;
}

struct PingResult {
	std::uint64_t round_trips = 0;
	double seconds = 0, median_us = 0, p99_us = 0, min_us = 0, mean_us = 0;
};

struct StreamResult {
	std::uint64_t msgs = 0, bytes = 0;
	double seconds = 0;
	bool malloc_aligned = false;	// --malloc: both peers' malloc gave whole pages
};

// At most this many round-trip samples (16 MiB): a point that reaches it
// ends early.
constexpr std::size_t max_samples = 4U << 20;

template <typename Chan> PingResult ping_client(Chan &ch, std::size_t size, double seconds)
{
	std::vector<char> buf(size), back(size);
	std::vector<std::uint32_t> rtt;
	rtt.reserve(max_samples);

	auto one = [&](std::uint64_t i) {
		std::memcpy(buf.data(), &i, std::min(size, sizeof(i)));
		ch.send_all(buf.data(), size);
		if (!recv_all(ch, back.data(), size))
			die("ping-pong", EPIPE);
		if (std::memcmp(buf.data(), back.data(), std::min(size, sizeof(i))))
			die("ping-pong echo", EBADMSG);
	};

	// Warm up for a tenth of the time.
	const auto span = static_cast<std::uint64_t>(seconds * 1e9);
	std::uint64_t i = 0, t0 = now_ns(), t = t0;
	while (t - t0 < span / 10) {
		one(i++);
		t = now_ns();
	}

	const std::uint64_t start = now_ns();
	std::uint64_t prev = start;
	double sum = 0;
	for (;;) {
		one(i++);
		t = now_ns();
		const std::uint64_t d = t - prev;
		prev = t;
		rtt.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(d, UINT32_MAX)));
		sum += static_cast<double>(d);
		if (t - start >= span || rtt.size() == max_samples)
			break;
	}
	ch.fin();

	PingResult r;
	r.round_trips = rtt.size();
	r.seconds = static_cast<double>(t - start) / 1e9;
	r.mean_us = sum / static_cast<double>(rtt.size()) / 1e3;
	const auto at = [&](double q) {
		const auto k = static_cast<std::size_t>(q * static_cast<double>(rtt.size() - 1));
		std::nth_element(rtt.begin(), rtt.begin() + static_cast<std::ptrdiff_t>(k), rtt.end());
		return static_cast<double>(rtt[k]) / 1e3;
	};
	r.median_us = at(0.5);
	r.p99_us = at(0.99);
	r.min_us = static_cast<double>(*std::min_element(rtt.begin(), rtt.end())) / 1e3;
	return r;
}

template <typename Chan> void ping_server(Chan &ch, std::size_t size)
{
	std::vector<char> buf(size);
	while (recv_all(ch, buf.data(), size))
		ch.send_all(buf.data(), size);
}

template <typename Chan> StreamResult stream_sender(Chan &ch, std::size_t size, double seconds)
{
	std::vector<char> buf(size, 'x');
	// Read the clock about every 4 KiB sent.
	const std::uint64_t every = std::max<std::size_t>(1, 4096 / size);
	const auto span = static_cast<std::uint64_t>(seconds * 1e9);
	StreamResult r;

	const std::uint64_t start = now_ns();
	for (;;) {
		ch.send_all(buf.data(), size);
		if (++r.msgs % every == 0 && now_ns() - start >= span)
			break;
	}
	ch.fin();
	// The receiver answers with the byte count once it saw the end.
	std::uint64_t got = 0;
	if (!recv_all(ch, &got, sizeof(got)))
		die("stream: no count from the receiver", EPIPE);
	r.seconds = static_cast<double>(now_ns() - start) / 1e9;
	r.bytes = r.msgs * size;
	if (got != r.bytes) {
		std::fprintf(stderr, "sdbench: stream: sent %" PRIu64 " bytes, received %" PRIu64 "\n",
			     r.bytes, got);
		std::exit(1);
	}
	return r;
}

template <typename Chan> void stream_receiver(Chan &ch)
{
	std::vector<char> buf(256 * 1024);
	std::uint64_t total = 0;
	for (;;) {
		const ssize_t n = ch.recv_some(buf.data(), buf.size());
		if (n == 0)
			break;
		total += static_cast<std::uint64_t>(n);
	}
	ch.send_all(&total, sizeof(total));
	ch.fin();
}

// --malloc: a buffer of size bytes from malloc, starting on a page.  Under
// sdrun, malloc of 16 KiB or more returns whole pages of a pool, and the
// buffer is malloc's block itself (aligned is true); glibc's malloc does
// not align, so there the block is a page longer and the buffer starts at
// its first page boundary.
class PageBuf {
public:
	explicit PageBuf(std::size_t size)
	{
		const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
		raw_ = std::malloc(size);
		if (raw_ && reinterpret_cast<std::uintptr_t>(raw_) % page == 0) {
			aligned_ = true;
			p_ = static_cast<char *>(raw_);
			return;
		}
		std::free(raw_);
		raw_ = std::malloc(size + page);
		if (!raw_)
			die("malloc", ENOMEM);
		const auto a = (reinterpret_cast<std::uintptr_t>(raw_) + page - 1) & ~(page - 1);
		p_ = static_cast<char *>(raw_) + (a - reinterpret_cast<std::uintptr_t>(raw_));
	}
	PageBuf(const PageBuf &) = delete;
	PageBuf &operator=(const PageBuf &) = delete;
	~PageBuf() { std::free(raw_); }

	char *data() const { return p_; }
	bool malloc_aligned() const { return aligned_; }

private:
	void *raw_ = nullptr;
	char *p_ = nullptr;
	bool aligned_ = false;
};

// --malloc: the byte every message k is made of: one value throughout
// when the sender reuses its buffer, a new one per message (never 0, the
// value of fresh pages) when it rewrites it.
inline char fill_byte(bool rewrite, std::uint64_t k)
{
	return static_cast<char>(rewrite ? 1 + k % 255 : 0x5a);
}

// The receiver's answer in --malloc mode.
struct StreamAnswer {
	std::uint64_t bytes;
	std::uint32_t malloc_aligned;	// its buffer was malloc's block itself
	std::uint32_t bad;		// a message did not hold its bytes
};

template <typename Chan>
StreamResult stream_sender_malloc(Chan &ch, std::size_t size, double seconds, bool rewrite)
{
	PageBuf buf(size);
	// Written once before the clock starts (the reused buffer's content).
	std::memset(buf.data(), fill_byte(rewrite, 0), size);
	const auto span = static_cast<std::uint64_t>(seconds * 1e9);
	StreamResult r;

	const std::uint64_t start = now_ns();
	for (;;) {
		if (rewrite)
			std::memset(buf.data(), fill_byte(true, r.msgs), size);
		ch.send_all(buf.data(), size);
		r.msgs++;
		if (now_ns() - start >= span)
			break;
	}
	ch.fin();
	StreamAnswer a{};
	if (!recv_all(ch, &a, sizeof(a)))
		die("stream: no count from the receiver", EPIPE);
	r.seconds = static_cast<double>(now_ns() - start) / 1e9;
	r.bytes = r.msgs * size;
	r.malloc_aligned = buf.malloc_aligned() && a.malloc_aligned;
	if (a.bytes != r.bytes || a.bad) {
		std::fprintf(stderr, "sdbench: stream: sent %" PRIu64 " bytes, received %" PRIu64
			     "%s\n", r.bytes, a.bytes, a.bad ? ", some of them wrong" : "");
		std::exit(1);
	}
	return r;
}

// Each message whole into the buffer, then a look at its first and last
// byte.  A wrong message is reported and the stream read to its end (an
// shm sender would wait for credit forever otherwise).
template <typename Chan> void stream_receiver_malloc(Chan &ch, std::size_t size, bool rewrite)
{
	PageBuf buf(size);
	std::memset(buf.data(), 0, size);
	char *const p = buf.data();
	StreamAnswer a{0, buf.malloc_aligned(), 0};
	for (std::uint64_t k = 0;; k++) {
		std::size_t got = 0;
		while (got < size) {
			const ssize_t n = ch.recv_some(p + got, size - got);
			if (n == 0)
				break;
			got += static_cast<std::size_t>(n);
		}
		a.bytes += got;
		if (got < size)
			break;
		const char want = fill_byte(rewrite, k);
		if ((p[0] != want || p[size - 1] != want) && !a.bad++)
			std::fprintf(stderr, "sdbench: stream: message %" PRIu64 " holds %#x..%#x, "
				     "not %#x\n", k, p[0] & 0xff, p[size - 1] & 0xff, want & 0xff);
	}
	ch.send_all(&a, sizeof(a));
	ch.fin();
}

// The two CPUs to pin the peers to, or -1.
void pick_cpus(int &a, int &b)
{
	cpu_set_t set;
	a = b = -1;
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (unsigned c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set)) {
			if (a < 0) {
				a = static_cast<int>(c);
			} else {
				b = static_cast<int>(c);
				return;
			}
		}
	a = b = -1;
}

void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(static_cast<unsigned>(cpu), &set);
	sched_setaffinity(0, sizeof(set), &set);
}

// A connected pair of stream sockets of the transport, or an errno.
int sock_pair(const std::string &via, int fds[2])
{
	if (via == "unix")
		return socketpair(AF_UNIX, SOCK_STREAM, 0, fds) ? errno : 0;

	const int family = via == "sd" ? AF_SD : AF_INET;
	const int lst = socket(family, SOCK_STREAM, 0);
	if (lst < 0)
		return errno;
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(sa);
	int err = 0;
	if (bind(lst, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) || listen(lst, 4) ||
	    getsockname(lst, reinterpret_cast<sockaddr *>(&sa), &len)) {
		err = errno;
		close(lst);
		return err;
	}
	fds[0] = socket(family, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], reinterpret_cast<sockaddr *>(&sa), sizeof(sa))) {
		err = errno;
		if (fds[0] >= 0)
			close(fds[0]);
		close(lst);
		return err;
	}
	fds[1] = accept(lst, nullptr, nullptr);
	err = fds[1] < 0 ? errno : 0;
	close(lst);
	if (err) {
		close(fds[0]);
		return err;
	}
	const int one = 1;
	for (int i = 0; i < 2; i++)	// AF_SD takes it too (a no-op there)
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

void json_head(const Options &o, const std::string &via, const char *test, std::size_t size)
{
	std::printf("{\"where\": \"%s\", \"transport\": \"%s\", \"via\": \"%s\", "
		    "\"test\": \"%s\", \"size\": %zu, \"pinned\": %s",
		    o.where.c_str(), (o.label.empty() ? via : o.label).c_str(), via.c_str(), test,
		    size, o.pin ? "true" : "false");
	if (via == "shm")
		std::printf(", \"ring_size\": %zu", o.ring_size);
	if (o.malloc_bufs && !std::strcmp(test, "stream"))
		std::printf(", \"buffers\": \"malloc\", \"rewrite\": %s",
			    o.rewrite ? "true" : "false");
}

// Iterations of the count test: a warm-up (the first send makes libsd
// take the side), then the counted ones.
constexpr std::uint64_t COUNT_WARM = 1000, COUNT_ITERS = 20000;

// Send and receive size bytes iterations times, tx and rx being the two
// ends of one stream.  Not inlined: callgrind counts by its name.
template <typename Tx, typename Rx>
[[gnu::noinline]] void exchange(Tx &tx, Rx &rx, char *buf, std::size_t size,
				std::uint64_t iterations)
{
	for (std::uint64_t i = 0; i < iterations; i++) {
		tx.send_all(buf, size);
		if (!recv_all(rx, buf, size))
			die("count: end of stream", EPIPE);
	}
}

// Only what runs inside count_loop is counted, not the warm-up.
template <typename Tx, typename Rx>
[[gnu::noinline]] void warm_up(Tx &tx, Rx &rx, char *buf, std::size_t size)
{
	exchange(tx, rx, buf, size, COUNT_WARM);
}

template <typename Tx, typename Rx>
[[gnu::noinline]] void count_loop(Tx &tx, Rx &rx, char *buf, std::size_t size)
{
	exchange(tx, rx, buf, size, COUNT_ITERS);
}

template <typename Tx, typename Rx> void count_test(Tx &tx, Rx &rx, std::size_t size)
{
	std::vector<char> buf(size, 'x');
	warm_up(tx, rx, buf.data(), size);
	count_loop(tx, rx, buf.data(), size);
}

// The count test: both ends in this process, no peer.
bool run_count(const Options &o, const std::string &via, std::size_t size)
{
	if (via == "shm") {
		const std::size_t one = sd::layout_len(o.ring_size);
		void *m = mmap(nullptr, one, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
		sd_ring_offset off{};
		if (m == MAP_FAILED)
			die("mmap", errno);
		if (sd::layout(static_cast<unsigned char *>(m), one, o.ring_size, off))
			die("ring layout (--ring-size must be a power of two)", EINVAL);
		{
			// One ring, written and read here.
			ShmChan ch(m, off, m, off);
			count_test(ch, ch, size);
		}
		munmap(m, one);
	} else {
		int fds[2] = {-1, -1};
		if (const int err = sock_pair(via, fds)) {
			json_head(o, via, "count", size);
			std::printf(", \"skipped\": \"%s\"}\n", std::strerror(err));
			std::fflush(stdout);
			return false;
		}
		SockChan tx(fds[0]), rx(fds[1]);
		count_test(tx, rx, size);
	}
	json_head(o, via, "count", size);
	std::printf(", \"warm_up\": %" PRIu64 ", \"iterations\": %" PRIu64 "}\n", COUNT_WARM,
		    COUNT_ITERS);
	std::fflush(stdout);
	return true;
}

// Runs the child's side in a forked process and the parent's here.
// Returns false if the transport is not available (a line says why).
bool run_point(const Options &o, const std::string &via, const std::string &test,
	       std::size_t size)
{
	if (test == "count")
		return run_count(o, via, size);
	const int cpu_a = o.cpu_a, cpu_b = o.cpu_b;
	int fds[2] = {-1, -1};
	unsigned char *map = nullptr;	// shm: ring 0 at map, ring 1 at map + second
	std::size_t map_len = 0, second = 0;
	sd_ring_offset off[2]{};
	if (via == "shm") {
		const std::size_t one = sd::layout_len(o.ring_size);
		map_len = 2 * one;
		void *m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			die("mmap", errno);
		map = static_cast<unsigned char *>(m);
		if (sd::layout(map, one, o.ring_size, off[0]) ||
		    sd::layout(map + one, one, o.ring_size, off[1]))
			die("ring layout (--ring-size must be a power of two)", EINVAL);
		second = one;
	} else if (const int err = sock_pair(via, fds)) {
		json_head(o, via, test.c_str(), size);
		std::printf(", \"skipped\": \"%s\"}\n", std::strerror(err));
		std::fflush(stdout);
		return false;
	}

	std::fflush(stdout);
	const pid_t pid = fork();
	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		pin(cpu_b);
		auto serve = [&](auto &ch) {
			if (test == "pingpong")
				ping_server(ch, size);
			else if (o.malloc_bufs)
				stream_receiver_malloc(ch, size, o.rewrite);
			else
				stream_receiver(ch);
		};
		if (map) {
			// The child writes ring 1 and reads ring 0.
			ShmChan ch(map + second, off[1], map, off[0]);
			serve(ch);
		} else {
			close(fds[0]);
			SockChan ch(fds[1]);
			serve(ch);
		}
		_exit(0);
	}
	pin(cpu_a);

	PingResult pr;
	StreamResult sr;
	auto drive = [&](auto &ch) {
		if (test == "pingpong")
			pr = ping_client(ch, size, o.seconds);
		else if (o.malloc_bufs)
			sr = stream_sender_malloc(ch, size, o.seconds, o.rewrite);
		else
			sr = stream_sender(ch, size, o.seconds);
	};
	if (map) {
		ShmChan ch(map, off[0], map + second, off[1]);
		drive(ch);
	} else {
		close(fds[1]);
		SockChan ch(fds[0]);
		drive(ch);
	}
	int status = 0;
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid", errno);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		std::fprintf(stderr, "sdbench: the %s %s peer failed (status %#x)\n", via.c_str(),
			     test.c_str(), status);
		std::exit(1);
	}
	if (map)
		munmap(map, map_len);

	json_head(o, via, test.c_str(), size);
	if (test == "pingpong")
		std::printf(", \"seconds\": %.3f, \"round_trips\": %" PRIu64
			    ", \"rtt_us_median\": %.3f, \"rtt_us_p99\": %.3f"
			    ", \"rtt_us_min\": %.3f, \"rtt_us_mean\": %.3f}\n",
			    pr.seconds, pr.round_trips, pr.median_us, pr.p99_us, pr.min_us,
			    pr.mean_us);
	else {
		if (o.malloc_bufs)
			std::printf(", \"malloc_aligned\": %s", sr.malloc_aligned ? "true" : "false");
		std::printf(", \"seconds\": %.3f, \"msgs\": %" PRIu64 ", \"bytes\": %" PRIu64
			    ", \"msgs_per_s\": %.1f, \"mb_per_s\": %.3f}\n",
			    sr.seconds, sr.msgs, sr.bytes,
			    static_cast<double>(sr.msgs) / sr.seconds,
			    static_cast<double>(sr.bytes) / sr.seconds / 1e6);
	}
	std::fflush(stdout);
	return true;
}

// The first line: what was measured where.
void json_meta(const Options &o)
{
	utsname u{};
	uname(&u);
	std::string model = "unknown";
	if (FILE *f = std::fopen("/proc/cpuinfo", "r")) {
		char line[512];
		while (std::fgets(line, sizeof(line), f))
			if (!std::strncmp(line, "model name", 10)) {
				const char *c = std::strchr(line, ':');
				model = c ? c + 2 : line;
				model.erase(model.find_last_not_of(" \n") + 1);
				break;
			}
		std::fclose(f);
	}
	for (auto &ch : model)
		if (ch == '"' || ch == '\\')
			ch = '\'';
	double load[3] = {};
	if (getloadavg(load, 3) < 0)
		load[0] = -1;
	std::printf("{\"meta\": {\"where\": \"%s\", \"kernel\": \"%s\", \"machine\": \"%s\", "
		    "\"cpu_model\": \"%s\", \"cpus\": %ld, \"loadavg\": %.2f, "
		    "\"seconds_per_point\": %.3f, \"ring_size\": %zu, \"pinned\": %s, "
		    "\"cpus_used\": [%d, %d]}}\n",
		    o.where.c_str(), u.release, u.machine, model.c_str(), sysconf(_SC_NPROCESSORS_ONLN),
		    load[0], o.seconds, o.ring_size, o.pin ? "true" : "false", o.cpu_a, o.cpu_b);
	std::fflush(stdout);
}

void usage(FILE *f)
{
	std::fprintf(f, "usage: sdbench [OPTIONS]\n"
			"\n"
			"  --transports LIST  of shm, unix, tcp, sd (default: all four)\n"
			"  --sizes LIST       message sizes in bytes, K and M suffixes\n"
			"                     (default: $SD_BENCH_SIZES or 8,64,512,4K,64K,1M)\n"
			"  --tests LIST       of pingpong, stream, count (default: pingpong,stream;\n"
			"                     count: one process sends and receives, for\n"
			"                     callgrind --toggle-collect='*count_loop*')\n"
			"  --seconds S        per point (default: $SD_BENCH_SECONDS or 1.5)\n"
			"  --where NAME       label of the machine: guest or host (default: host)\n"
			"  --label NAME       transport name to print (default: the transport)\n"
			"  --ring-size N      bytes of each shm ring (default: 128K)\n"
			"  --no-pin           do not pin the two processes to two CPUs\n"
			"  --malloc           stream: send one page-aligned malloc'd buffer, receive\n"
			"                     each message whole into one (the zero-copy benchmark)\n"
			"  --rewrite          with --malloc: memset the buffer before each send\n"
			"  -h, --help         this text\n"
			"\n"
			"Prints one JSON object per point; see Documentation/bench.rst.\n");
}

std::vector<std::string> split(const char *s)
{
	std::vector<std::string> out;
	std::string cur;
	for (; *s; s++) {
		if (*s == ',') {
			if (!cur.empty())
				out.push_back(cur);
			cur.clear();
		} else {
			cur += *s;
		}
	}
	if (!cur.empty())
		out.push_back(cur);
	return out;
}

std::size_t parse_size(const std::string &s)
{
	char *end = nullptr;
	errno = 0;
	unsigned long long v = std::strtoull(s.c_str(), &end, 10);
	if (errno || end == s.c_str() || v == 0)
		goto bad;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end || v > (256ULL << 20))
		goto bad;
	return static_cast<std::size_t>(v);
bad:
	std::fprintf(stderr, "sdbench: bad size '%s'\n", s.c_str());
	std::exit(2);
}

} // namespace

int main(int argc, char **argv)
{
	Options o;
	if (const char *s = std::getenv("SD_BENCH_SECONDS"); s && *s)
		o.seconds = std::atof(s);
	if (const char *s = std::getenv("SD_BENCH_SIZES"); s && *s) {
		o.sizes.clear();
		for (const auto &z : split(s))
			o.sizes.push_back(parse_size(z));
	}

	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		auto value = [&]() -> const char * {
			if (i + 1 >= argc) {
				std::fprintf(stderr, "sdbench: %s needs a value\n", a.c_str());
				std::exit(2);
			}
			return argv[++i];
		};
		if (a == "-h" || a == "--help") {
			usage(stdout);
			return 0;
		} else if (a == "--transports") {
			o.transports = split(value());
		} else if (a == "--sizes") {
			o.sizes.clear();
			for (const auto &s : split(value()))
				o.sizes.push_back(parse_size(s));
		} else if (a == "--tests") {
			o.tests = split(value());
		} else if (a == "--seconds") {
			o.seconds = std::atof(value());
		} else if (a == "--where") {
			o.where = value();
		} else if (a == "--label") {
			o.label = value();
		} else if (a == "--ring-size") {
			o.ring_size = parse_size(value());
		} else if (a == "--no-pin") {
			o.pin = false;
		} else if (a == "--malloc") {
			o.malloc_bufs = true;
		} else if (a == "--rewrite") {
			o.rewrite = true;
		} else {
			std::fprintf(stderr, "sdbench: unknown option '%s'\n", a.c_str());
			usage(stderr);
			return 2;
		}
	}
	if (o.rewrite && !o.malloc_bufs) {
		std::fprintf(stderr, "sdbench: --rewrite needs --malloc\n");
		return 2;
	}
	if (!(o.seconds > 0 && o.seconds <= 600)) {
		std::fprintf(stderr, "sdbench: --seconds must be in (0, 600]\n");
		return 2;
	}
	for (const auto &t : o.transports)
		if (t != "shm" && t != "unix" && t != "tcp" && t != "sd") {
			std::fprintf(stderr, "sdbench: unknown transport '%s'\n", t.c_str());
			return 2;
		}
	for (const auto &t : o.tests)
		if (t != "pingpong" && t != "stream" && t != "count") {
			std::fprintf(stderr, "sdbench: unknown test '%s'\n", t.c_str());
			return 2;
		}

	if (o.pin) {
		pick_cpus(o.cpu_a, o.cpu_b);
		o.pin = o.cpu_a >= 0;
	}
	json_meta(o);

	// A transport that is not available (sd without the module) says so
	// once and is skipped.
	auto run_transport = [&](const std::string &via) {
		for (const auto &test : o.tests)
			for (const std::size_t size : o.sizes) {
				std::fprintf(stderr, "sdbench: %s %s %s %zu B\n", o.where.c_str(),
					     (o.label.empty() ? via : o.label).c_str(),
					     test.c_str(), size);
				if (!run_point(o, via, test, size))
					return;
			}
	};
	for (const auto &via : o.transports)
		run_transport(via);
	return 0;
}
