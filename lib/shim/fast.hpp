// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The fast path's per-connection state, shared by the data calls
// (fast.cpp) and readiness (ready.cpp).  See Documentation/libsd.rst.
#pragma once

#include "shim.hpp"
#include "signals.hpp"

#include "../ring.hpp"
#include "../token.hpp"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <new>

namespace sd::shim::fast {

// Busy-poll this long, then yield a few times, then sleep in the kernel.
// SD_SPIN_US in the environment overrides it (spin_ns).
constexpr std::int64_t SPIN_NS = 200'000;
constexpr std::int64_t SPIN_US_MAX = 10'000'000;
extern std::int64_t spin_ns;
constexpr int YIELDS = 8;

constexpr unsigned MAX_CONNS = 1U << 16;

// The lock by which the threads of this process take turns on a side: a
// word on a futex, 0 free, 1 held, 2 held with a thread perhaps asleep
// for it (the mutex of Drepper's "Futexes Are Tricky").  Uncontended,
// lock and unlock are one atomic instruction each and no call.  Zero is
// free (a Conn comes from calloc); reset() frees it in a fork's child,
// where the thread that held it does not exist.
class SideLock {
public:
	bool try_lock() noexcept
	{
		std::uint32_t free = 0;
		return word_.compare_exchange_strong(free, 1, std::memory_order_acquire,
						     std::memory_order_relaxed);
	}
	// Sleeps while another thread holds it; a signal's handler may run
	// meanwhile, if the caller opened a region for it (sig::Open).
	void lock() noexcept
	{
		std::uint32_t c = 0;
		if (word_.compare_exchange_strong(c, 1, std::memory_order_acquire,
						  std::memory_order_relaxed))
			return;
		if (c != 2)
			c = word_.exchange(2, std::memory_order_acquire);
		while (c) {
			wait();
			c = word_.exchange(2, std::memory_order_acquire);
		}
	}
	void unlock() noexcept
	{
		if (word_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
			wake();
	}
	void reset() noexcept { word_.store(0, std::memory_order_relaxed); }

private:
	void wait() noexcept;		// FUTEX_WAIT while the word is 2
	void wake() noexcept;		// FUTEX_WAKE one
	std::atomic<std::uint32_t> word_;
};
static_assert(sizeof(SideLock) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

// One direction of a connection as this process drives it.
struct Side {
	SideLock lock;			// the threads of this process
	// Data calls in flight on this side (CallRef), from the hook's start
	// to its end, the kernel's path included: a close() of the fd while
	// one is in flight is carried out when the last one is out.
	std::atomic<unsigned> calls;
	sd::TokenSide tok;		// whether this process drives the side
	std::uint32_t busy;		// its busy count (the kernel reads it here)
	std::uint32_t *prod_flags;
	std::uint32_t *cons_flags;
	std::uint64_t *pos;
	std::uint32_t *off;		// consumer only
	std::uint32_t *lowat;		// consumer only: SO_RCVLOWAT (the kernel's)
	std::uint64_t *credit;		// the consumer word: the credit
	std::uint64_t size;
	alignas(sd::Producer) unsigned char prod[sizeof(sd::Producer)];
	alignas(sd::Consumer) unsigned char cons[sizeof(sd::Consumer)];

	sd::Producer &producer() { return *std::launder(reinterpret_cast<sd::Producer *>(prod)); }
	sd::Consumer &consumer() { return *std::launder(reinterpret_cast<sd::Consumer *>(cons)); }

	// Whether this process holds the token now (a hint: the kernel may
	// take it back the moment after).
	bool ours() const { return tok.ours(); }
};

struct Conn {
	int fd;
	void *tx_map;
	void *rx_map;
	sd_mmap_offsets off;
	std::atomic<bool> nonblock;
	std::atomic<bool> rd_shut;
	std::atomic<bool> wr_shut;
	std::atomic<bool> async;	// O_ASYNC: the kernel must see data
	// The file's flags may change where this process cannot see it (a
	// copy of the fd, a fork, an fd this process did not make): read
	// them again before acting on O_NONBLOCK (fast.cpp, nonblocking()).
	std::atomic<bool> shared;
	// The fd a close() left open because a call was in flight (CallRef);
	// -1: none.  Whoever takes it (exchange) closes it.
	std::atomic<int> defer_fd;
	Side tx, rx;
	Conn *next_spare;		// kept for reuse, never freed (fast.cpp)

	// Whether this is still fd's state: checked under a side lock, which
	// keeps the rings mapped (a close waits for the locks to unmap).
	bool still(int as) const;
};

extern std::atomic<Conn *> conns[MAX_CONNS];

inline bool Conn::still(int as) const
{
	return conns[as].load(std::memory_order_acquire) == this;
}

// The fast-path state of fd if it has some already (no system call).
inline Conn *lookup(int fd)
{
	if (fd < 0 || static_cast<unsigned>(fd) >= MAX_CONNS)
		return nullptr;
	return conns[fd].load(std::memory_order_acquire);
}

// The fast-path state of a connected AF_SD socket, made on first use;
// nullptr when there is none (not connected, out of range, no memory).
Conn *get(int fd);

inline std::int64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// Spin, then yield, then give up (the caller goes to the kernel).  A
// signal whose handler the shim holds back ends the spin at once, with
// interrupted set: the call returns EINTR as a sleep in the kernel would.
struct Backoff {
	std::int64_t deadline = 0;
	int yields = 0;
	std::uint64_t n = 0;
	std::uint64_t look = 64;	// the turn of the next look at the clock
	bool interrupted = false;	// a signal ended it

	bool again()
	{
		if (sig::pending()) [[unlikely]] {
			interrupted = true;
			return false;
		}
		if (yields) {
			if (yields++ < YIELDS) {
				sched_yield();
				return true;
			}
			return false;
		}
		++n;
		__builtin_ia32_pause();
		// The clock first after 64 turns (most waits end sooner), then
		// each time after as many turns again as went by, 65,536 at
		// most: where the clock source is not the TSC (the test
		// guests' HPET) a look costs a system call and a device
		// access.  So a spin outlasts spin_ns by less than it spun,
		// and by 65,536 turns at most.
		if (n < look)
			return true;
		look = n + std::min<std::uint64_t>(n, 1U << 16);
		const std::int64_t t = now_ns();
		if (!deadline)
			deadline = t + spin_ns;
		if (t < deadline)
			return true;
		yields = 1;
		sched_yield();
		return true;
	}
};

// Forget every epoll set this process tracks (fork: parent and child now
// share their interest lists).
void epoll_forget_all();
// The same in a forked child, whose tracking locks another thread of the
// parent may have held at the fork.
void epoll_after_fork_child();

} // namespace sd::shim::fast
