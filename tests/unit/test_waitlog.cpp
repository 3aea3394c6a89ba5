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

} // namespace

int main()
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(fresh_waits_spin_until_they_keep_sleeping),
		cmocka_unit_test(probes_back_off_while_they_sleep),
		cmocka_unit_test(a_probe_that_pays_spins_again),
		cmocka_unit_test(a_brief_look_that_finds_keeps_the_pace),
		cmocka_unit_test(a_full_spin_that_finds_clears_the_brief_mode),
	};
	return cmocka_run_group_tests_name("waitlog", tests, nullptr, nullptr);
}
