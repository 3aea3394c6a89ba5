// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The token protocol of <linux/sd.h> ("Tokens"): libsd's half
// (lib/token.hpp) against a model of the kernel's half that does what
// sd_ring_reclaim() and sd_ring_grant() do: revoke the token word, full
// barrier, look at busy; grant a fresh token.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <pthread.h>

#include "token.hpp"

#include "cmocka.hpp"

namespace {

struct Kernel {
	std::uint32_t word = 0;
	std::uint32_t busy = 0;
	std::uint32_t seq = 0;

	// Take the side back: false while an owner is inside a call (the
	// kernel then waits and tries again).
	bool reclaim()
	{
		__atomic_store_n(&word, 0, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		return __atomic_load_n(&busy, __ATOMIC_ACQUIRE) == 0;
	}

	std::uint32_t grant()
	{
		if (!++seq)
			++seq;
		__atomic_store_n(&word, seq, __ATOMIC_RELEASE);
		return seq;
	}

	// SD_IOC_ACQUIRE: reclaim from whoever has it, then grant.
	std::uint32_t acquire()
	{
		return reclaim() ? grant() : 0;
	}
};

// counter + 1 as a load and a store, not one atomic step: two threads
// inside at once lose increments.
void bump(long &counter)
{
	const long v = std::atomic_ref(counter).load(std::memory_order_relaxed);
	std::atomic_ref(counter).store(v + 1, std::memory_order_relaxed);
}

void first_call_acquires_once(void **)
{
	Kernel k;
	sd::TokenSide t(&k.word, &k.busy);
	int asked = 0;
	auto acq = [&] {
		asked++;
		return k.acquire();
	};

	assert_false(t.ours());
	assert_true(t.begin(acq));
	assert_int_equal(asked, 1);
	assert_int_equal(k.busy, 1);
	assert_true(t.ours());
	t.end();
	assert_int_equal(k.busy, 0);
	for (int i = 0; i < 10; i++) {
		assert_true(t.begin(acq));
		t.end();
	}
	assert_int_equal(asked, 1);
	assert_int_equal(k.busy, 0);
}

void refused_acquire_leaves_busy_alone(void **)
{
	Kernel k;
	sd::TokenSide t(&k.word, &k.busy);

	assert_false(t.begin([] { return std::uint32_t{0}; }));
	assert_int_equal(k.busy, 0);
	assert_int_equal(t.token(), 0);
}

void taken_back_between_calls(void **)
{
	Kernel k;
	sd::TokenSide t(&k.word, &k.busy);
	int asked = 0;
	auto acq = [&] {
		asked++;
		return k.acquire();
	};

	assert_true(t.begin(acq));
	t.end();
	assert_true(k.reclaim());		// idle owner: at once
	assert_false(t.ours());
	assert_true(t.begin(acq));		// asks again
	assert_int_equal(asked, 2);
	assert_int_equal(k.busy, 1);
	t.end();
	assert_int_equal(k.busy, 0);
}

void taken_back_mid_call_waits(void **)
{
	Kernel k;
	sd::TokenSide t(&k.word, &k.busy);

	assert_true(t.begin([&] { return k.acquire(); }));
	assert_false(k.reclaim());		// busy: the kernel must wait
	assert_false(t.ours());			// ... but the token is revoked
	t.end();
	assert_true(k.reclaim());		// and now it has it
}

void stale_owner_keeps_new_owners_mark(void **)
{
	Kernel k;
	sd::TokenSide a(&k.word, &k.busy), b(&k.word, &k.busy);

	assert_true(a.begin([&] { return k.acquire(); }));
	a.end();
	// b takes the side and is inside a call.
	assert_true(b.begin([&] { return k.acquire(); }));
	assert_int_equal(k.busy, 1);
	// a still thinks it owns it: its attempt adds and takes back its 1.
	int asked = 0;
	assert_false(a.begin([&] {
		asked++;
		return std::uint32_t{0};	// the kernel refuses: b is busy
	}));
	assert_int_equal(asked, 1);
	assert_int_equal(k.busy, 1);		// b's mark is intact
	assert_false(k.reclaim());
	b.end();
	assert_true(k.reclaim());
}

void lost_token_is_asked_for_again(void **)
{
	Kernel k;
	sd::TokenSide t(&k.word, &k.busy);
	int asked = 0;
	auto acq = [&] {
		asked++;
		return k.acquire();
	};

	assert_true(t.begin(acq));
	t.end();
	t.lost();
	assert_false(t.ours());
	assert_true(t.begin(acq));
	t.end();
	assert_int_equal(asked, 2);
}

// Three "processes" (each its own TokenSide) and the kernel fight over one
// side.  Whoever is inside must be alone: an owner between a successful
// begin() and end(), or the kernel between a successful reclaim and
// letting go.  A plain counter bumped only inside shows any overlap as a
// lost increment.
void owners_and_kernel_never_overlap(void **)
{
	constexpr int OWNERS = 3, CALLS = 20000, KERNEL_TURNS = 2000;
	Kernel k;
	pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;
	std::atomic<int> inside{0}, overlaps{0}, owners_done{0};
	long counter = 0, expected = 0;
	std::atomic<long> done_calls{0};

	auto enter = [&] {
		if (inside.fetch_add(1, std::memory_order_relaxed) != 0)
			overlaps.fetch_add(1, std::memory_order_relaxed);
	};
	auto leave = [&] { inside.fetch_sub(1, std::memory_order_relaxed); };

	std::vector<std::thread> th;
	for (int o = 0; o < OWNERS; o++)
		th.emplace_back([&] {
			sd::TokenSide t(&k.word, &k.busy);
			auto acq = [&] {
				pthread_mutex_lock(&kernel_lock);
				const std::uint32_t tok = k.acquire();
				pthread_mutex_unlock(&kernel_lock);
				return tok;
			};
			for (int i = 0; i < CALLS;) {
				if (!t.begin(acq)) {
					std::this_thread::yield();
					continue;
				}
				enter();
				bump(counter);
				leave();
				t.end();
				done_calls.fetch_add(1, std::memory_order_relaxed);
				i++;
			}
			owners_done.fetch_add(1);
		});
	th.emplace_back([&] {
		for (int turn = 0; turn < KERNEL_TURNS && owners_done.load() < OWNERS;) {
			pthread_mutex_lock(&kernel_lock);
			if (k.reclaim()) {
				enter();
				bump(counter);
				leave();
				turn++;
				expected++;
			}
			pthread_mutex_unlock(&kernel_lock);
			std::this_thread::yield();
		}
	});
	for (auto &x : th)
		x.join();
	assert_int_equal(overlaps.load(), 0);
	assert_int_equal(counter, expected + done_calls.load());
	assert_int_equal(done_calls.load(), OWNERS * CALLS);
	assert_int_equal(k.busy, 0);
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(first_call_acquires_once),
		cmocka_unit_test(refused_acquire_leaves_busy_alone),
		cmocka_unit_test(taken_back_between_calls),
		cmocka_unit_test(taken_back_mid_call_waits),
		cmocka_unit_test(stale_owner_keeps_new_owners_mark),
		cmocka_unit_test(lost_token_is_asked_for_again),
		cmocka_unit_test(owners_and_kernel_never_overlap),
	};
	return cmocka_run_group_tests_name("token", tests, nullptr, nullptr);
}
