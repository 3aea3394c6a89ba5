// SPDX-License-Identifier: LGPL-2.1-or-later
//
// When a wait for RDMA data spins and when it only looks briefly and
// sleeps (lib/shim/waitlog.hpp): brief after RDMA_BRIEF_AFTER waits that
// slept, a probe that spins after RDMA_PROBE_EVERY brief waits, twice as
// long a gap after every probe that slept, and back to spinning when one
// paid.
#include "waitlog.hpp"

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <csetjmp>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace {

using sd::shim::fast::RDMA_BRIEF_AFTER;
using sd::shim::fast::RDMA_MISSES_MAX;
using sd::shim::fast::RDMA_PROBE_EVERY;
using sd::shim::fast::RDMA_PROBE_SHIFT_MAX;
using sd::shim::fast::RDMA_SPIN_MAX_NS;
using sd::shim::fast::RDMA_SPIN_RTTS;
using sd::shim::fast::rdma_spin_ns;
using sd::shim::fast::rtt_floor;
using sd::shim::fast::rtt_sample;
using sd::shim::fast::WaitLog;

// Waits that all sleep, from log: how many begin() before the first probe
// (a wait that spins in full once brief), at most limit.
unsigned waits_to_probe(WaitLog &log, unsigned limit)
{
	for (unsigned n = 1; n <= limit; n++) {
		const bool brief = log.begin();
		log.slept(brief);
		if (!brief)
			return n;
	}
	return 0;
}

// A log whose waits turned brief: RDMA_BRIEF_AFTER waits that spun and
// slept.
WaitLog slow_peer()
{
	WaitLog log;
	for (unsigned i = 0; i < RDMA_BRIEF_AFTER; i++) {
		assert_false(log.begin());
		log.slept(false);
	}
	return log;
}

void fresh_waits_spin_until_they_keep_sleeping(void **)
{
	WaitLog log;
	for (unsigned i = 0; i < RDMA_BRIEF_AFTER; i++) {
		assert_false(log.begin());
		log.slept(false);
	}
	assert_true(log.begin());
	assert_int_equal(log.shift, 0);
}

void probes_back_off_while_they_sleep(void **)
{
	WaitLog log = slow_peer();
	unsigned gap = RDMA_PROBE_EVERY;
	for (unsigned probe = 0; probe < RDMA_PROBE_SHIFT_MAX + 3; probe++) {
		// The probe is the gap-th wait: gap - 1 brief ones before it.
		assert_int_equal(waits_to_probe(log, 4096), gap);
		if (probe < RDMA_PROBE_SHIFT_MAX)
			gap *= 2;
	}
	assert_int_equal(gap, RDMA_PROBE_EVERY << RDMA_PROBE_SHIFT_MAX);
	assert_int_equal(log.shift, RDMA_PROBE_SHIFT_MAX);
	assert_int_equal(log.misses, RDMA_MISSES_MAX);
}

void a_probe_that_pays_spins_again(void **)
{
	WaitLog log = slow_peer();
	assert_int_equal(waits_to_probe(log, 4096), RDMA_PROBE_EVERY);
	assert_int_equal(waits_to_probe(log, 4096), 2 * RDMA_PROBE_EVERY);
	// The next probe finds its data in its spin.
	for (unsigned i = 1; i < 4 * RDMA_PROBE_EVERY; i++) {
		assert_true(log.begin());
		log.slept(true);
	}
	assert_false(log.begin());
	log.hit(false);
	assert_int_equal(log.shift, 0);
	// The waits after it spin in full, until they sleep again.
	assert_true(log.misses < RDMA_BRIEF_AFTER);
	while (log.misses < RDMA_BRIEF_AFTER) {
		assert_false(log.begin());
		log.slept(false);
	}
	// Probes at the first pace again.
	assert_int_equal(waits_to_probe(log, 4096), RDMA_PROBE_EVERY);
}

void a_brief_look_that_finds_keeps_the_pace(void **)
{
	WaitLog log = slow_peer();
	assert_int_equal(waits_to_probe(log, 4096), RDMA_PROBE_EVERY);
	for (unsigned i = 0; i < 20; i++) {
		assert_true(log.begin());
		log.slept(true);
	}
	// A brief look found the data: the count halves, the pace stays.
	const unsigned m = log.misses;
	assert_true(log.begin());
	log.hit(true);
	assert_int_equal(log.misses, m / 2);
	assert_int_equal(log.shift, 1);
}

void a_full_spin_that_finds_clears_the_brief_mode(void **)
{
	WaitLog log;
	log.slept(false);
	log.slept(false);
	assert_false(log.begin());
	log.hit(false);
	assert_int_equal(log.misses, 1);
	assert_false(log.begin());
}

// A short round trip (RDMA hardware's) leaves the default spin as it
// is; a long one spins a few of them, up to the bound.
void the_spin_covers_a_few_round_trips(void **)
{
	constexpr std::int64_t spin = 200'000;
	assert_int_equal(rdma_spin_ns(spin, 0), spin);
	assert_int_equal(rdma_spin_ns(spin, 3'000), spin);
	assert_int_equal(rdma_spin_ns(spin, 300'000), 300'000 * RDMA_SPIN_RTTS);
	assert_int_equal(rdma_spin_ns(spin, 100'000'000), RDMA_SPIN_MAX_NS);
	// A longer default is kept.
	assert_int_equal(rdma_spin_ns(5'000'000, 300'000), 5'000'000);
}

// The first sample is taken whole, the next a quarter of the way; no
// sample leaves it negative or past what can lengthen a spin.
void samples_move_the_round_trip_a_quarter(void **)
{
	constexpr std::int64_t top = RDMA_SPIN_MAX_NS / RDMA_SPIN_RTTS;
	std::int64_t rtt = rtt_sample(0, 200'000);
	assert_int_equal(rtt, 200'000);
	rtt = rtt_sample(rtt, 480'000);
	assert_int_equal(rtt, 270'000);
	rtt = rtt_sample(rtt, 100);
	assert_int_equal(rtt, 270'000 + (100 - 270'000) / 4);
	assert_int_equal(rtt_sample(0, -5), 0);
	assert_int_equal(rtt_sample(0, INT64_MAX), top);
	std::int64_t r = top;
	for (int i = 0; i < 100; i++)
		r = rtt_sample(r, INT64_MAX);
	assert_int_equal(r, top);
}

// A spin that ran out with the timed write in flight raises the round
// trip to what that write waited, at most twice the spin, never lowers it.
void a_spin_that_ran_out_lengthens_the_next(void **)
{
	constexpr std::int64_t top = RDMA_SPIN_MAX_NS / RDMA_SPIN_RTTS;
	assert_int_equal(rtt_floor(0, 210'000, 200'000), 210'000);
	assert_int_equal(rtt_floor(0, 10'000'000, 200'000), 400'000);
	assert_int_equal(rtt_floor(450'000, 210'000, 200'000), 450'000);
	assert_int_equal(rtt_floor(0, INT64_MAX, INT64_MAX / 2), top);
	// So a link slower than the spin reaches a spin that covers it.
	std::int64_t rtt = 0, spin = 200'000;
	for (int i = 0; i < 8 && spin < 700'000; i++) {
		rtt = rtt_floor(rtt, spin + 10'000, spin);
		spin = rdma_spin_ns(200'000, rtt);
	}
	assert_true(spin > 700'000);
}

} // namespace

int main()
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(fresh_waits_spin_until_they_keep_sleeping),
		cmocka_unit_test(probes_back_off_while_they_sleep),
		cmocka_unit_test(a_probe_that_pays_spins_again),
		cmocka_unit_test(a_brief_look_that_finds_keeps_the_pace),
		cmocka_unit_test(a_full_spin_that_finds_clears_the_brief_mode),
		cmocka_unit_test(the_spin_covers_a_few_round_trips),
		cmocka_unit_test(samples_move_the_round_trip_a_quarter),
		cmocka_unit_test(a_spin_that_ran_out_lengthens_the_next),
	};
	return cmocka_run_group_tests_name("waitlog", tests, nullptr, nullptr);
}
