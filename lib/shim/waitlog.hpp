// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Whether a wait for RDMA data spins or only looks briefly and sleeps
// (fast.cpp, ready.cpp; Documentation/libsd.rst, "What goes fast").
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace sd::shim::fast {

// A wait for RDMA data (a receive on an RDMA connection, or poll and
// epoll waits in a process with RDMA connections) whose last
// RDMA_BRIEF_AFTER spins all ended in a sleep (the peer is farther away
// than a spin) only looks briefly and sleeps, but for a probe now and
// then, which spins in full to see whether that changed: after
// RDMA_PROBE_EVERY brief waits, and after twice as many each time a probe
// did not pay, up to RDMA_PROBE_EVERY << RDMA_PROBE_SHIFT_MAX (1,024).  A
// probe spins as long as a fresh connection's first waits, and between
// the test hosts, where the round trip is longer than a spin, one probe
// in every 16 waits took processor time the round trip needed (commit
// 57f4d51 has the measurements).
constexpr unsigned RDMA_BRIEF_AFTER = 4;
constexpr unsigned RDMA_PROBE_EVERY = 16;
constexpr unsigned RDMA_PROBE_SHIFT_MAX = 6;
constexpr unsigned RDMA_MISSES_MAX = 250;

// The count of a wait that found its data before any sleep: halved, and
// below RDMA_BRIEF_AFTER if it spun in full (that spin paid, so the next
// wait spins in full too; else a spin that always paid stayed one in
// RDMA_PROBE_EVERY, the count halved to no lower than
// RDMA_PROBE_EVERY / 2 each time).
inline unsigned misses_after_hit(unsigned m, bool full)
{
	m /= 2;
	return full && m >= RDMA_BRIEF_AFTER ? RDMA_BRIEF_AFTER - 1 : m;
}

// How the waits for RDMA data of a connection (a receive's) or a thread
// (poll and epoll waits) went lately.
struct WaitLog {
	std::uint8_t misses = 0;	// in a row whose spin ended in a sleep
	std::uint8_t shift = 0;		// probes in a row that did not pay
	std::uint16_t since = 0;	// brief waits since the last probe

	// A wait begins (nothing was there): whether it only looks briefly
	// and sleeps.  Otherwise it spins in full: a fresh connection, one
	// whose spins paid lately, or a probe.
	bool begin()
	{
		if (misses < RDMA_BRIEF_AFTER)
			return false;
		if (since + 1U >= RDMA_PROBE_EVERY << shift) {
			since = 0;
			return false;
		}
		since++;
		return true;
	}
	// The wait's first sleep (its spin or brief look found nothing).  A
	// probe that did not pay makes the next one wait twice as long.
	void slept(bool brief)
	{
		if (!brief && misses >= RDMA_BRIEF_AFTER && shift < RDMA_PROBE_SHIFT_MAX)
			shift++;
		if (misses < RDMA_MISSES_MAX)
			misses++;
	}
	// The wait found its data before any sleep.  After a spin in full
	// (not brief) spinning pays here: the next wait spins in full too,
	// and probes come at the first pace again.
	void hit(bool brief)
	{
		if (!brief)
			shift = 0;
		misses = static_cast<std::uint8_t>(misses_after_hit(misses, !brief));
	}
};
static_assert(std::atomic<WaitLog>::is_always_lock_free);

// How long a wait spins in a process with RDMA connections, unless
// SD_SPIN_US says: the default spin, or RDMA_SPIN_RTTS of the links'
// round trips where that is longer, up to RDMA_SPIN_MAX_NS.  The round
// trip is a write's, from its post to its completion (the peer's
// acknowledgement, which no program on the peer's side has to make), as
// spinning threads saw it: a few microseconds on RDMA hardware, where
// the default spin covers a reply many times over, and hundreds between
// the test hosts, where a reply comes after the default spin ends and
// every wait slept (Documentation/libsd.rst).
constexpr std::int64_t RDMA_SPIN_RTTS = 4;
constexpr std::int64_t RDMA_SPIN_MAX_NS = 2'000'000;

inline std::int64_t rdma_spin_ns(std::int64_t spin, std::int64_t rtt)
{
	return std::max(spin, std::min(RDMA_SPIN_MAX_NS, rtt * RDMA_SPIN_RTTS));
}

// The links' round trip after a timed write's completion came s after
// its post, found by a thread that spun: a quarter of the way to it, or
// s itself for the first.  Bounded: what is above the longest spin's
// share changes nothing.
inline std::int64_t rtt_sample(std::int64_t rtt, std::int64_t s)
{
	constexpr std::int64_t top = RDMA_SPIN_MAX_NS / RDMA_SPIN_RTTS;
	s = std::clamp<std::int64_t>(s, 0, top);
	return rtt > 0 ? rtt + (s - rtt) / 4 : s;
}

// A spin of spun ran out while the timed write posted since ago was in
// flight: the round trip is longer than since, so the next spin is
// longer, but at most twice this one's (a write whose completion no one
// looked for a while is not a round trip).
inline std::int64_t rtt_floor(std::int64_t rtt, std::int64_t since, std::int64_t spun)
{
	constexpr std::int64_t top = RDMA_SPIN_MAX_NS / RDMA_SPIN_RTTS;
	return std::max(rtt, std::clamp<std::int64_t>(std::min(since, 2 * spun), 0, top));
}

} // namespace sd::shim::fast
