// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A ring written by someone else: corrupt headers, bad credit and bad
// offsets are reported, never followed.  The data area is fenced by
// PROT_NONE pages, so any access outside it crashes the test.
#include <cerrno>
#include <random>

#include "cmocka.hpp"

namespace {

using test::rec_word;

constexpr std::uint64_t SIZE = 4096;
constexpr std::uint32_t V = SD_REC_VALID, P = SD_REC_PAD;

unsigned char buf[2 * SIZE];

// Each of read, peek and readable reports -EPROTO for a consumer at head
// and keeps doing so.
void assert_corrupt(test::GuardedRing &r, std::uint64_t head)
{
	sd::Consumer a(r.base, r.off, head), b(r.base, r.off, head), c(r.base, r.off, head);

	assert_int_equal(a.read(buf, sizeof(buf)), -EPROTO);
	assert_int_equal(a.read(buf, sizeof(buf)), -EPROTO);
	assert_int_equal(a.readable(), -EPROTO);
	assert_int_equal(b.peek(buf, sizeof(buf)), -EPROTO);
	assert_int_equal(c.readable(), -EPROTO);
	assert_int_equal(c.prepare_wait(), -EPROTO);
}

void bad_headers(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t words[] = {
		rec_word(5, 0),			// not VALID
		rec_word(0, P),			// pad without VALID
		rec_word(5, V | 4),		// unknown flag
		rec_word(5, V | SD_RING_RESET),
		rec_word(0, V),			// empty record
		rec_word(SIZE - 7, V),		// one byte past the end
		rec_word(0xffffffff, V),	// SD_REC_SPACE() wraps to 8
		rec_word(0xfffffff9, V),
		rec_word(0, V | P),		// pad short of the end
		rec_word(SIZE, V | P),		// pad past the end
		~std::uint64_t{0},
	};

	for (const std::uint64_t w : words) {
		r.wr64(0, w);
		assert_corrupt(r, 0);
	}
}

void records_must_not_cross_the_end(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t head = SIZE - 16;

	r.wr64(head, rec_word(9, V));		// needs 24 bytes, 16 left
	assert_corrupt(r, head);
	r.wr64(head, rec_word(0, V | P));	// pad of 8 in 16
	assert_corrupt(r, head);

	r.wr64(head, rec_word(8, V));		// exactly to the guard page
	std::memset(r.data() + head + 8, 'x', 8);
	sd::Consumer c(r.base, r.off, head);
	assert_int_equal(c.read(buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "xxxxxxxx", 8);
	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);

	r.wr64(head, rec_word(8, V | P));	// a pad to the end is fine too
	sd::Consumer d(r.base, r.off, head);
	assert_int_equal(d.readable(), 0);
	assert_int_equal(d.read(buf, sizeof(buf)), -EAGAIN);
	assert_int_equal(d.head(), SIZE);
}

void records_must_stay_within_the_credit(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t head = SIZE / 2;

	// From head, one record to the end; then one from 0 that runs into
	// the first (whose credit the consumer has not given back).
	r.wr64(head, rec_word(SIZE / 2 - 8, V));
	r.wr64(0, rec_word(SIZE / 2, V));
	sd::Consumer c(r.base, r.off, head);
	assert_int_equal(c.readable(), -EPROTO);
	sd::Consumer d(r.base, r.off, head);
	assert_int_equal(d.read(buf, sizeof(buf)), SIZE / 2 - 8);	// the good one
	assert_int_equal(d.read(buf, sizeof(buf)), -EPROTO);

	r.wr64(head, rec_word(SIZE / 2 - 8, V));	// (consumed by d)
	r.wr64(0, rec_word(SIZE / 2 - 8, V));		// exactly up to head: fine
	sd::Consumer e(r.base, r.off, head);
	assert_int_equal(e.readable(), SIZE - 16);
}

void corruption_after_data_is_reported_next(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write("abc", 3), 3);
	r.wr64(16, rec_word(3, V | 8));
	assert_int_equal(c.read(buf, sizeof(buf)), 3);
	assert_int_equal(c.read(buf, sizeof(buf)), -EPROTO);
	assert_int_equal(c.error(), -EPROTO);
}

void bad_credit_is_rejected(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t tail = 3 * SIZE + 64;
	const std::uint64_t bad[] = {tail + 8, tail - SIZE - 8, tail - 4, tail + SIZE, 0 - tail};

	for (const std::uint64_t c : bad) {
		sd::Producer p(r.base, r.off, tail);
		r.consumer() = c;
		assert_int_equal(p.writable(), -EPROTO);
		assert_int_equal(p.write("x", 1), -EPROTO);
		assert_int_equal(p.prepare_wait(), -EPROTO);
		assert_int_equal(p.error(), -EPROTO);
	}

	sd::Producer full(r.base, r.off, tail);
	r.consumer() = tail - SIZE;			// the lowest good credit
	assert_int_equal(full.writable(), 0);
	assert_int_equal(full.write("x", 1), -EAGAIN);
	r.consumer() = tail;				// the highest
	assert_int_equal(full.writable(), SIZE - 8 * 2);	// 64 before the end: split
	assert_int_equal(full.write("x", 1), 1);

	// Once corrupt, always: a good credit later does not revive it.
	sd::Producer p(r.base, r.off, tail);
	r.consumer() = tail + 8;
	assert_int_equal(p.write("x", 1), -EPROTO);
	r.consumer() = tail;
	assert_int_equal(p.write("x", 1), -EPROTO);
}

void bad_offsets_are_rejected(void **state)
{
	auto &r = test::ring(state);
	const sd_ring_offset good = r.off;
	sd_ring_offset o;

	assert_int_equal(sd::check_ring(r.base, good), 0);
	assert_int_equal(sd::check_ring(nullptr, good), -EINVAL);
	assert_int_equal(sd::check_ring(r.base + 4, good), -EINVAL);

	const auto bad = [&](auto &&change) {
		o = good;
		change(o);
		assert_int_equal(sd::check_ring(r.base, o), -EINVAL);
		sd::Producer p(r.base, o);
		sd::Consumer c(r.base, o);
		assert_int_equal(p.error(), -EINVAL);
		assert_int_equal(p.write("x", 1), -EINVAL);
		assert_int_equal(c.error(), -EINVAL);
		assert_int_equal(c.read(buf, 1), -EINVAL);
		assert_int_equal(c.readable(), -EINVAL);
	};
	bad([](sd_ring_offset &x) { x.size = 3 * 1024; });
	bad([](sd_ring_offset &x) { x.size = SD_RING_MIN_SIZE / 2; });
	bad([](sd_ring_offset &x) { x.size = std::uint64_t{SD_RING_MAX_SIZE} * 2; });
	bad([](sd_ring_offset &x) { x.size = 0; });
	bad([](sd_ring_offset &x) { x.data += 4; });
	bad([](sd_ring_offset &x) { x.mmap_len -= 8; });
	bad([](sd_ring_offset &x) { x.data = ~std::uint64_t{0} - 4095; });
	bad([](sd_ring_offset &x) { x.consumer = x.data + 64; });
	bad([](sd_ring_offset &x) { x.consumer = x.mmap_len - 4; });
	bad([](sd_ring_offset &x) { x.consumer += 4; });
	bad([](sd_ring_offset &x) { x.prod_flags = x.consumer + 4; });
	bad([](sd_ring_offset &x) { x.cons_flags = x.prod_flags; });
	bad([](sd_ring_offset &x) { x.cons_flags = x.data + x.size - 4; });
	bad([](sd_ring_offset &x) { x.prod_flags = 2; });

	// Positions start records, so they are multiples of 8.
	sd::Producer p(r.base, good, 4);
	sd::Consumer c(r.base, good, 12);
	assert_int_equal(p.write("x", 1), -EINVAL);
	assert_int_equal(c.read(buf, 1), -EINVAL);
}

// Random headers (mostly plausible, often slightly wrong) at random
// places, then random reads, peeks and readable() until the ring is
// empty or found corrupt.  The guard pages catch any stray access.
void fuzz(test::GuardedRing &r, std::uint64_t seed)
{
	std::mt19937_64 rng(seed);
	const auto pick = [&](std::uint64_t n) { return rng() % n; };
	std::uint64_t corrupt = 0, clean = 0;

	for (int iter = 0; iter < 100000; iter++) {
		std::memset(r.data(), 0, SIZE);
		const std::uint64_t head = (pick(4) ? pick(SIZE / 8) * 8 : SIZE - 8) + pick(3) * SIZE;
		std::uint64_t pos = head;
		for (int n = static_cast<int>(pick(6)); n >= 0; n--) {
			const std::uint64_t off = pos & (SIZE - 1), rest = SIZE - off;
			std::uint64_t len;
			switch (pick(6)) {
			case 0: len = rest - 8; break;
			case 1: len = rest - 8 + pick(16); break;
			case 2: len = pick(0x100000000); break;
			default: len = pick(std::min<std::uint64_t>(rest, 600)); break;
			}
			std::uint32_t flags = pick(8) ? V : static_cast<std::uint32_t>(rng());
			if (!pick(6))
				flags |= P;
			if (!pick(10))
				r.wr64(off, rng());
			else
				r.wr64(off, rec_word(static_cast<std::uint32_t>(len), flags));
			pos += sd::rec_space(len & 0xffffffff);
		}

		sd::Consumer c(r.base, r.off, head);
		ssize_t ret = 0;
		for (int ops = 0; ops < 16 && ret != -EPROTO && ret != -EAGAIN; ops++) {
			const std::size_t want = 1 + pick(pick(2) ? 64 : sizeof(buf) - 1);
			switch (pick(3)) {
			case 0: ret = c.read(buf, want); break;
			case 1: ret = c.peek(buf, want); break;
			default: ret = c.readable(); break;
			}
			assert_true(ret == -EPROTO || ret == -EAGAIN || ret >= 0);
			assert_true(ret <= static_cast<ssize_t>(SIZE));
		}
		if (ret == -EPROTO) {
			assert_int_equal(c.read(buf, sizeof(buf)), -EPROTO);
			corrupt++;
		} else {
			clean++;
		}
	}
	// Both outcomes are common, so both paths were exercised.
	assert_true(corrupt > 5000);
	assert_true(clean > 5000);
}

void fuzz_data_before_guard(void **state)
{
	fuzz(test::ring(state), 1);
}

void fuzz_data_after_guard(void **state)
{
	fuzz(test::ring(state), 2);
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		ring_test(bad_headers, SIZE),
		ring_test(records_must_not_cross_the_end, SIZE),
		ring_test(records_must_stay_within_the_credit, SIZE),
		ring_test(corruption_after_data_is_reported_next, SIZE),
		ring_test(bad_credit_is_rejected, SIZE),
		ring_test(bad_offsets_are_rejected, SIZE),
		ring_test(fuzz_data_before_guard, SIZE),
		cmocka_unit_test_setup_teardown(fuzz_data_after_guard, (test::setup_ring<SIZE, true>),
						test::teardown_ring),
	};
	return cmocka_run_group_tests_name("ring_corrupt", tests, nullptr, nullptr);
}
