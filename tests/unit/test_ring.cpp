// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The ring's framing, wrap-around, partial and peeking reads, lazy credit,
// wake-up flags and end of stream, on a 4 KiB ring that ends at a guard
// page.
#include <cerrno>

#include "cmocka.hpp"

namespace {

using test::rec_word;

constexpr std::uint64_t SIZE = 4096;

// Test data: src[i] = f(i % PERIOD), so the stream byte at position n is
// src[n % PERIOD] and a chunk of up to SIZE bytes starts anywhere below
// PERIOD.  A prime period catches bytes misplaced by a power of two.
constexpr std::size_t PERIOD = 4093;
unsigned char src[2 * SIZE];
unsigned char buf[2 * SIZE];

int init_src(void **)
{
	for (std::size_t i = 0; i < sizeof(src); i++)
		src[i] = static_cast<unsigned char>((i % PERIOD) * 7 + (i % PERIOD >> 8) + 1);
	return 0;
}

void empty_ring_reads_nothing(void **state)
{
	auto &r = test::ring(state);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);
	assert_int_equal(c.peek(buf, sizeof(buf)), -EAGAIN);
	assert_int_equal(c.readable(), 0);
	assert_int_equal(c.read(buf, 0), 0);
	assert_int_equal(c.head(), 0);
	assert_true(r.data_zero(0, SIZE));
}

void round_trip(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write("hello", 5), 5);
	// The ABI: header word, then the payload, padded to 8.
	assert_int_equal(r.rd64(0), rec_word(5, SD_REC_VALID));
	assert_memory_equal(r.data() + 8, "hello", 5);
	assert_true(r.data_zero(13, SIZE));
	assert_int_equal(p.tail(), 16);

	assert_int_equal(c.readable(), 5);
	assert_int_equal(c.read(buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(c.head(), 16);
	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);
	assert_true(r.data_zero(0, SIZE));
}

void writev_gathers_and_readv_scatters(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);
	char a[2] = {'a', 'b'}, d[4] = {'c', 'd', 'e', 'f'}, g[1] = {'g'};
	const iovec in[] = {{a, 2}, {nullptr, 0}, {d, 4}, {g, 1}};
	char x[3], y[10];
	const iovec out[] = {{x, 3}, {nullptr, 0}, {y, 10}};

	assert_int_equal(p.write(in), 7);
	assert_int_equal(r.rd64(0), rec_word(7, SD_REC_VALID));	// one record
	assert_int_equal(c.read(out), 7);
	assert_memory_equal(x, "abc", 3);
	assert_memory_equal(y, "defg", 4);
}

void wrap_with_pad(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	// One record up to 8 bytes before the end: only a header fits there.
	assert_int_equal(p.write(src, 4080), 4080);
	assert_int_equal(c.read(buf, sizeof(buf)), 4080);
	assert_memory_equal(buf, src, 4080);

	assert_int_equal(p.write(src + 1, 20), 20);
	assert_int_equal(r.rd64(4088), rec_word(0, SD_REC_VALID | SD_REC_PAD));
	assert_int_equal(r.rd64(0), rec_word(20, SD_REC_VALID));
	assert_int_equal(p.tail(), 4096 + 32);

	assert_int_equal(c.readable(), 20);
	assert_int_equal(c.read(buf, sizeof(buf)), 20);
	assert_memory_equal(buf, src + 1, 20);
	assert_int_equal(c.head(), 4096 + 32);
	assert_true(r.data_zero(0, SIZE));
}

void wrap_with_split(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 4000), 4000);	// ends at 4008
	assert_int_equal(c.read(buf, sizeof(buf)), 4000);

	// 88 bytes before the end: 80 of payload there, the rest at 0.
	assert_int_equal(p.write(src + 3, 200), 200);
	assert_int_equal(r.rd64(4008), rec_word(80, SD_REC_VALID));
	assert_int_equal(r.rd64(0), rec_word(120, SD_REC_VALID));
	assert_int_equal(c.readable(), 200);
	assert_int_equal(c.read(buf, sizeof(buf)), 200);
	assert_memory_equal(buf, src + 3, 200);
	assert_true(r.data_zero(0, SIZE));
}

void record_ending_at_the_guard_page(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	// Exactly the whole data area: the payload's last byte is the last
	// byte before the PROT_NONE page.
	assert_int_equal(p.write(src, sizeof(src)), SIZE - 8);
	assert_int_equal(p.write(src, 1), -EAGAIN);
	assert_int_equal(c.read(buf, sizeof(buf)), SIZE - 8);
	assert_memory_equal(buf, src, SIZE - 8);
}

void partial_reads_across_records(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write("abc", 3), 3);
	assert_int_equal(p.write("defgh", 5), 5);
	assert_int_equal(p.write("ij", 2), 2);

	assert_int_equal(c.read(buf, 2), 2);
	assert_memory_equal(buf, "ab", 2);
	// Consumed payload is zero at once; the header stays until the end
	// of its record.
	assert_true(r.data_zero(8, 10));
	assert_int_equal(r.data()[10], 'c');
	assert_int_equal(r.rd64(0), rec_word(3, SD_REC_VALID));
	assert_int_equal(c.head(), 0);
	assert_int_equal(c.readable(), 8);

	assert_int_equal(c.read(buf, 4), 4);	// across a record boundary
	assert_memory_equal(buf, "cdef", 4);
	assert_int_equal(c.head(), 16);
	assert_int_equal(c.read(buf, 1), 1);
	assert_memory_equal(buf, "g", 1);
	assert_int_equal(c.read(buf, 100), 3);
	assert_memory_equal(buf, "hij", 3);
	assert_int_equal(c.read(buf, 100), -EAGAIN);
	assert_true(r.data_zero(0, SIZE));
}

void peek_does_not_consume(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);
	static unsigned char before[SIZE];

	assert_int_equal(p.write("abc", 3), 3);
	assert_int_equal(p.write("defgh", 5), 5);
	std::memcpy(before, r.data(), SIZE);

	assert_int_equal(c.peek(buf, 4), 4);
	assert_memory_equal(buf, "abcd", 4);
	assert_int_equal(c.peek(buf, 100), 8);
	assert_memory_equal(buf, "abcdefgh", 8);
	assert_memory_equal(before, r.data(), SIZE);
	assert_int_equal(c.head(), 0);
	assert_int_equal(c.readable(), 8);

	assert_int_equal(c.read(buf, 1), 1);
	assert_int_equal(c.peek(buf, 100), 7);	// from inside the record
	assert_memory_equal(buf, "bcdefgh", 7);
	assert_int_equal(c.read(buf, 100), 7);
	assert_memory_equal(buf, "bcdefgh", 7);
	assert_int_equal(c.peek(buf, 100), -EAGAIN);
}

void readable_walks_records(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 3900), 3900);
	assert_int_equal(c.read(buf, 3900), 3900);
	// One record before the end, one split across it, three after.
	for (int i = 1; i <= 5; i++)
		assert_int_equal(p.write(src, 100), 100);
	assert_int_equal(c.readable(), 500);
	assert_int_equal(c.read(buf, 150), 150);
	assert_int_equal(c.readable(), 350);
}

void readable_stops_at_the_credit(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	// A full ring; after a partial read the word at head + size is the
	// current record's own header, which must not be counted again.
	assert_int_equal(p.write(src, SIZE), SIZE - 8);
	assert_int_equal(c.read(buf, 100), 100);
	assert_int_equal(c.readable(), SIZE - 108);
	assert_int_equal(c.peek(buf, sizeof(buf)), SIZE - 108);
}

void writable_is_what_a_write_takes(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.writable(), SIZE - 8);
	for (const std::size_t n : {100u, 2900u, 37u, 1000u}) {
		assert_int_equal(p.write(src, n), n);
		assert_int_equal(c.read(buf, n), n);
		c.flush();
		const ssize_t w = p.writable();
		assert_true(w > 0);
		assert_int_equal(p.write(src, sizeof(src)), w);
		assert_int_equal(p.writable(), 0);
		assert_int_equal(p.write(src, 1), -EAGAIN);
		assert_int_equal(c.read(buf, sizeof(buf)), w);
		assert_memory_equal(buf, src, static_cast<std::size_t>(w));
		c.flush();
	}
}

void credit_is_lazy(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 100), 100);
	assert_int_equal(c.read(buf, 100), 100);
	assert_int_equal(c.head(), 112);
	assert_int_equal(r.consumer(), 0);	// not after a small read

	assert_int_equal(p.write(src, 1900), 1900);
	assert_int_equal(c.read(buf, 1000), 1000);
	assert_int_equal(r.consumer(), 0);	// nor inside a record
	assert_int_equal(c.read(buf, 1000), 900);
	assert_int_equal(c.head(), 112 + 1912);
	assert_int_equal(r.consumer(), 0);	// 2024 < half

	assert_int_equal(p.write(src, 20), 20);
	assert_int_equal(c.read(buf, 20), 20);
	assert_int_equal(r.consumer(), 2024 + 32);	// half the ring
	assert_int_equal(c.published(), 2056);
	assert_false(c.take_wake());
}

void need_credit_publishes_at_once(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	while (p.write(src, 1000) > 0)
		;
	assert_int_equal(p.write(src, 1), -EAGAIN);
	assert_int_equal(p.prepare_wait(), 1);
	assert_int_equal(r.prod_flags(), SD_RING_NEED_CREDIT);

	assert_int_equal(c.read(buf, 1000), 1000);	// one record: 1008 bytes
	assert_int_equal(r.consumer(), 1008);
	assert_true(c.take_wake());
	assert_false(c.take_wake());

	assert_int_equal(p.write(src, 500), 500);
	assert_int_equal(r.prod_flags(), 0);
}

void producer_wait_sees_late_credit(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, sizeof(src)), SIZE - 8);
	assert_int_equal(c.read(buf, sizeof(buf)), SIZE - 8);	// publishes
	// The producer's cached credit is stale; prepare_wait reads it.
	assert_int_equal(p.prepare_wait(), 0);
	assert_int_equal(r.prod_flags(), 0);
	assert_int_equal(p.write(src, 10), 10);
}

void consumer_publishes_before_sleeping(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 100), 100);
	assert_int_equal(c.read(buf, 100), 100);
	assert_int_equal(r.consumer(), 0);
	assert_int_equal(c.prepare_wait(), 1);
	assert_int_equal(r.consumer(), 112);
	assert_int_equal(r.cons_flags(), SD_RING_READER_WAIT);

	assert_int_equal(p.write(src, 1), 1);
	assert_true(p.take_wake());
	assert_false(p.take_wake());
	assert_int_equal(c.prepare_wait(), 0);	// data is there
	assert_int_equal(r.cons_flags(), 0);
	assert_int_equal(c.read(buf, 10), 1);
}

void read_clears_reader_wait(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(c.prepare_wait(), 1);
	assert_int_equal(c.read(buf, 10), -EAGAIN);	// woken for nothing
	assert_int_equal(r.cons_flags(), 0);
	assert_int_equal(p.write(src, 1), 1);
	assert_false(p.take_wake());
}

void prepare_wait_inside_a_record(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 10), 10);
	assert_int_equal(c.read(buf, 4), 4);
	assert_int_equal(c.prepare_wait(), 0);
	assert_int_equal(r.cons_flags(), 0);
}

void fin_only_after_all_data(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write("xyz", 3), 3);
	assert_int_equal(p.fin(), 0);
	assert_int_equal(r.prod_flags(), SD_RING_FIN);
	assert_int_equal(p.write("w", 1), -EPIPE);
	assert_int_equal(p.fin(), 0);
	assert_int_equal(p.prepare_wait(), -EPIPE);

	assert_int_equal(c.prepare_wait(), 0);
	assert_int_equal(c.read(buf, 1), 1);
	assert_int_equal(c.peek(buf, 10), 2);
	assert_int_equal(c.read(buf, 10), 2);
	assert_memory_equal(buf, "yz", 2);
	assert_int_equal(c.read(buf, 10), 0);
	assert_int_equal(c.peek(buf, 10), 0);
	assert_int_equal(c.readable(), 0);
	assert_int_equal(c.prepare_wait(), 0);
	assert_int_equal(c.read(buf, 10), 0);
}

void fin_wakes_the_reader(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(c.prepare_wait(), 1);
	assert_int_equal(p.fin(), 0);
	assert_true(p.take_wake());
	assert_int_equal(c.prepare_wait(), 0);
	assert_int_equal(c.read(buf, 10), 0);
}

void reset_and_closed(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	r.prod_flags() |= SD_RING_RESET;
	assert_int_equal(c.read(buf, 10), -ECONNRESET);
	assert_int_equal(c.prepare_wait(), -ECONNRESET);

	assert_int_equal(p.write(src, 1), 1);
	r.cons_flags() |= SD_RING_CLOSED;
	assert_int_equal(p.write(src, 1), 1);	// not seen yet
	assert_int_equal(p.write(src, 1), -EPIPE);
	r.cons_flags() = SD_RING_RESET;
	assert_int_equal(p.prepare_wait(), -ECONNRESET);
	assert_int_equal(p.write(src, 1), -ECONNRESET);
}

void positions_wrap_at_2_64(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t start = 0 - 3 * SIZE;
	sd::Producer p(r.base, r.off, start);
	sd::Consumer c(r.base, r.off, start);
	std::size_t sent = 0, got = 0;

	assert_int_equal(r.consumer(), start);
	for (std::size_t n = 1; sent < 10 * SIZE; n = n * 5 % 1999 + 1) {
		const ssize_t w = p.write(src + sent % PERIOD, n);
		assert_true(w > 0);
		sent += static_cast<std::size_t>(w);
		for (ssize_t k; (k = c.read(buf, 700)) > 0; got += static_cast<std::size_t>(k))
			assert_memory_equal(buf, src + got % PERIOD, static_cast<std::size_t>(k));
	}
	assert_int_equal(got, sent);
	assert_true(p.tail() < start);	// passed 2^64
	assert_int_equal(c.head(), p.tail());
	assert_true(r.data_zero(0, SIZE));
}

// set_limit(): a ring written by RDMA is read only up to the end the last
// completion announced; a record is all there or not at all.
void limit_hides_what_has_not_arrived(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 5), 5);		// record [0, 16)
	const std::uint64_t first = p.tail();
	assert_int_equal(p.write(src + 5, 100), 100);	// record [16, 124)
	c.set_limit(0);
	assert_int_equal(c.readable(), 0);
	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);
	assert_int_equal(c.peek(buf, sizeof(buf)), -EAGAIN);
	// Up to the end of the first record: that one only.
	c.set_limit(first);
	assert_int_equal(c.readable(), 5);
	assert_int_equal(c.read(buf, sizeof(buf)), 5);
	assert_memory_equal(buf, src, 5);
	// Inside the second: still nothing of it (its payload may be missing).
	c.set_limit(first + 60);
	assert_int_equal(c.readable(), 0);
	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);
	c.set_limit(p.tail());
	assert_int_equal(c.readable(), 100);
	assert_int_equal(c.read(buf, sizeof(buf)), 100);
	assert_memory_equal(buf, src + 5, 100);
	assert_int_equal(c.head(), p.tail());
}

void limit_inside_a_partly_read_record(void **state)
{
	auto &r = test::ring(state);
	sd::Producer p(r.base, r.off);
	sd::Consumer c(r.base, r.off);

	assert_int_equal(p.write(src, 40), 40);
	const std::uint64_t first = p.tail();
	assert_int_equal(p.write(src + 40, 40), 40);
	c.set_limit(first);
	assert_int_equal(c.read(buf, 10), 10);		// part of the first
	assert_int_equal(c.read(buf + 10, sizeof(buf) - 10), 30);
	assert_memory_equal(buf, src, 40);
	assert_int_equal(c.read(buf, sizeof(buf)), -EAGAIN);
	c.set_limit(p.tail());
	assert_int_equal(c.read(buf, sizeof(buf)), 40);
	assert_memory_equal(buf, src + 40, 40);
}

void limit_across_the_wrap(void **state)
{
	auto &r = test::ring(state);
	const std::uint64_t start = 0 - SIZE / 2;	// wraps 2^64 and the area
	sd::Producer p(r.base, r.off, start);
	sd::Consumer c(r.base, r.off, start);
	std::size_t sent = 0, got = 0;

	for (std::size_t n = 1; sent < 6 * SIZE; n = n * 7 % 1499 + 1) {
		const std::uint64_t before = p.tail();
		const ssize_t w = p.write(src + sent % PERIOD, n);
		assert_true(w > 0);
		sent += static_cast<std::size_t>(w);
		// Announced: everything before this write, not the write.
		c.set_limit(before);
		for (ssize_t k; (k = c.read(buf, 700)) > 0; got += static_cast<std::size_t>(k))
			assert_memory_equal(buf, src + got % PERIOD, static_cast<std::size_t>(k));
		assert_int_equal(c.head(), before);
		c.set_limit(p.tail());
		for (ssize_t k; (k = c.read(buf, 700)) > 0; got += static_cast<std::size_t>(k))
			assert_memory_equal(buf, src + got % PERIOD, static_cast<std::size_t>(k));
	}
	assert_int_equal(got, sent);
	assert_int_equal(c.head(), p.tail());
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		ring_test(empty_ring_reads_nothing, SIZE),
		ring_test(round_trip, SIZE),
		ring_test(writev_gathers_and_readv_scatters, SIZE),
		ring_test(wrap_with_pad, SIZE),
		ring_test(wrap_with_split, SIZE),
		ring_test(record_ending_at_the_guard_page, SIZE),
		ring_test(partial_reads_across_records, SIZE),
		ring_test(peek_does_not_consume, SIZE),
		ring_test(readable_walks_records, SIZE),
		ring_test(readable_stops_at_the_credit, SIZE),
		ring_test(writable_is_what_a_write_takes, SIZE),
		ring_test(credit_is_lazy, SIZE),
		ring_test(need_credit_publishes_at_once, SIZE),
		ring_test(producer_wait_sees_late_credit, SIZE),
		ring_test(consumer_publishes_before_sleeping, SIZE),
		ring_test(read_clears_reader_wait, SIZE),
		ring_test(prepare_wait_inside_a_record, SIZE),
		ring_test(fin_only_after_all_data, SIZE),
		ring_test(fin_wakes_the_reader, SIZE),
		ring_test(reset_and_closed, SIZE),
		ring_test(positions_wrap_at_2_64, SIZE),
		ring_test(limit_hides_what_has_not_arrived, SIZE),
		ring_test(limit_inside_a_partly_read_record, SIZE),
		ring_test(limit_across_the_wrap, SIZE),
	};
	return cmocka_run_group_tests_name("ring", tests, init_src, nullptr);
}
