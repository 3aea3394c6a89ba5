// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A producer thread and a consumer thread move a byte stream through one
// ring with random write and read sizes, random iovec splits, peeks and
// readable() calls, sleeping and waking each other the way the protocol
// says (a condition variable stands in for the kernel).  Every byte is
// checked, a lost wake-up shows as a sleep that times out, and at the end
// the data area must be zero again.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "cmocka.hpp"

namespace {

// The stream byte at position n is pattern[n % PERIOD]; a prime period
// catches bytes moved by any power of two.
constexpr std::size_t PERIOD = 1000003;
constexpr std::size_t MAX_IO = 1 << 20;
unsigned char pattern[PERIOD + MAX_IO];

int init_pattern(void **)
{
	std::mt19937 rng(7);
	for (std::size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = i < PERIOD ? static_cast<unsigned char>(rng()) : pattern[i - PERIOD];
	return 0;
}

// The kernel's part: sleep until woken, with a sequence number taken
// before prepare_wait() so a wake-up in between is not lost.
class Waiter {
public:
	unsigned snap()
	{
		const std::lock_guard lock(m_);
		return seq_;
	}

	// False if nobody woke us for a long time: a lost wake-up.
	bool sleep(unsigned seen)
	{
		std::unique_lock lock(m_);
		return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return seq_ != seen || abort_; });
	}

	void wake()
	{
		{
			const std::lock_guard lock(m_);
			seq_++;
		}
		cv_.notify_all();
	}

	void abort()
	{
		{
			const std::lock_guard lock(m_);
			abort_ = true;
		}
		cv_.notify_all();
	}

private:
	std::mutex m_;
	std::condition_variable cv_;
	unsigned seq_ = 0;
	bool abort_ = false;
};

struct Params {
	std::size_t ring;	// bytes in the data area
	std::size_t total;	// bytes to move
	std::size_t small;	// largest I/O of the common kind
	bool big;		// 1 in 32 is up to three rings' worth
	std::uint64_t seed;
};

struct Shared {
	Params par;
	test::GuardedRing *ring;
	Waiter reader, writer;
	std::atomic<bool> stop{false};
	char error[160] = "";			// first failure, set once
	std::atomic_flag failed = ATOMIC_FLAG_INIT;
	std::size_t received = 0;
	std::atomic<std::uint64_t> sleeps{0};	// both sides, for the record

	void stop_with(const char *what, long long a, long long b)
	{
		if (!failed.test_and_set())
			std::snprintf(error, sizeof(error), "%s (%lld, %lld)", what, a, b);
		stop = true;
		reader.abort();
		writer.abort();
	}
};

// Split [p, p + n) into up to three iovecs at random points.
std::size_t split(std::mt19937_64 &rng, unsigned char *p, std::size_t n, iovec (&iov)[3])
{
	std::size_t a = rng() % (n + 1), b = rng() % (n + 1);
	if (a > b)
		std::swap(a, b);
	iov[0] = {p, a};
	iov[1] = {p + a, b - a};
	iov[2] = {p + b, n - b};
	return 3;
}

// Mostly up to par.small, often a few bytes, now and then (par.big) up to
// three rings' worth.
std::size_t io_size(std::mt19937_64 &rng, const Params &par)
{
	switch (rng() % 32) {
	case 0: return 1 + rng() % (par.big ? std::min(3 * par.ring, MAX_IO) : par.small);
	case 1: case 2: case 3: case 4: return 1 + rng() % 8;
	default: return 1 + rng() % par.small;
	}
}

void producer(Shared &s)
{
	std::mt19937_64 rng(s.par.seed);
	sd::Producer p(s.ring->base, s.ring->off);
	std::size_t sent = 0;
	iovec iov[3];

	while (sent < s.par.total && !s.stop) {
		const std::size_t n = std::min(io_size(rng, s.par), s.par.total - sent);
		split(rng, pattern + sent % PERIOD, n, iov);
		const ssize_t w = p.write(iov);
		if (w > 0) {
			sent += static_cast<std::size_t>(w);
			if (p.take_wake())
				s.reader.wake();
			continue;
		}
		if (w != -EAGAIN)
			return s.stop_with("write", w, static_cast<long long>(sent));
		const unsigned seen = s.writer.snap();
		const int r = p.prepare_wait();
		if (r < 0)
			return s.stop_with("producer prepare_wait", r, 0);
		if (r == 1) {
			s.sleeps++;
			if (!s.writer.sleep(seen) && !s.stop)
				return s.stop_with("producer never woken at", static_cast<long long>(sent), 0);
		}
	}
	if (p.fin())
		return s.stop_with("fin", p.error(), 0);
	if (p.take_wake())
		s.reader.wake();
}

void consumer(Shared &s)
{
	std::mt19937_64 rng(s.par.seed + 1);
	sd::Consumer c(s.ring->base, s.ring->off);
	static unsigned char buf[MAX_IO];
	std::size_t got = 0;
	iovec iov[3];

	while (!s.stop) {
		const std::size_t n = io_size(rng, s.par);
		split(rng, buf, n, iov);
		if (rng() % 16 == 0) {
			const ssize_t k = c.peek(iov);
			const ssize_t avail = c.readable();	// only grows meanwhile
			if (avail < 0 || (k > 0 && (k > avail || k > static_cast<ssize_t>(n))))
				return s.stop_with("peek/readable", k, avail);
			if (k > 0 && std::memcmp(buf, pattern + got % PERIOD, static_cast<std::size_t>(k)))
				return s.stop_with("peeked bytes differ at", static_cast<long long>(got), k);
		}
		const ssize_t k = c.read(iov);
		if (k > 0) {
			if (std::memcmp(buf, pattern + got % PERIOD, static_cast<std::size_t>(k)))
				return s.stop_with("bytes differ at", static_cast<long long>(got), k);
			got += static_cast<std::size_t>(k);
			if (c.take_wake())
				s.writer.wake();
			continue;
		}
		if (k == 0)
			break;
		if (k != -EAGAIN)
			return s.stop_with("read", k, static_cast<long long>(got));
		const unsigned seen = s.reader.snap();
		const int r = c.prepare_wait();
		if (c.take_wake())
			s.writer.wake();
		if (r < 0)
			return s.stop_with("consumer prepare_wait", r, 0);
		if (r == 1) {
			s.sleeps++;
			if (!s.reader.sleep(seen) && !s.stop)
				return s.stop_with("consumer never woken at", static_cast<long long>(got), 0);
		}
	}
	c.flush();
	s.received = got;
}

struct Outcome {
	char error[160];
	std::size_t received;
	std::uint64_t credit;
	bool zero;
};

// Everything with a destructor lives here, so that the asserts after it
// (which longjmp on failure) skip none.
Outcome run(const Params &par)
{
	Outcome o{};
	test::GuardedRing *ring = test::guarded_ring(par.ring);
	if (!ring) {
		std::snprintf(o.error, sizeof(o.error), "no memory for the ring");
		return o;
	}
	Shared s;
	s.par = par;
	s.ring = ring;

	const auto t0 = std::chrono::steady_clock::now();
	{
		std::jthread prod([&] { producer(s); });
		consumer(s);
	}
	const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
	std::fprintf(stderr, "ring %zu KiB, I/O up to %zu%s: %zu MiB in %.2f s, %llu sleeps\n",
		     par.ring >> 10, par.small, par.big ? " and big" : "", par.total >> 20,
		     dt.count(), static_cast<unsigned long long>(s.sleeps.load()));

	std::memcpy(o.error, s.error, sizeof(o.error));
	o.received = s.received;
	o.credit = ring->consumer();
	o.zero = ring->data_zero(0, par.ring);
	test::free_ring(ring);
	return o;
}

void stress(const Params &par)
{
	const Outcome o = run(par);

	if (o.error[0])
		fail_msg("%s", o.error);
	assert_int_equal(o.received, par.total);
	assert_true(o.zero);
	assert_true(o.credit >= par.total);	// every record consumed and credited
}

void stress_64k_ring_64mib(void **)
{
	stress({.ring = 64 << 10, .total = 64 << 20, .small = 4096, .big = true, .seed = 1});
}

void stress_4k_ring_64mib(void **)
{
	stress({.ring = 4 << 10, .total = 64 << 20, .small = 1024, .big = true, .seed = 2});
}

void stress_1m_ring_64mib(void **)
{
	stress({.ring = 1 << 20, .total = 64 << 20, .small = 64 << 10, .big = true, .seed = 3});
}

void stress_64k_ring_tiny_records(void **)
{
	stress({.ring = 64 << 10, .total = 8 << 20, .small = 64, .big = false, .seed = 4});
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(stress_64k_ring_64mib),
		cmocka_unit_test(stress_4k_ring_64mib),
		cmocka_unit_test(stress_1m_ring_64mib),
		cmocka_unit_test(stress_64k_ring_tiny_records),
	};
	return cmocka_run_group_tests_name("ring_stress", tests, init_pattern, nullptr);
}
