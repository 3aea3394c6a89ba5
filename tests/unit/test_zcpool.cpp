// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The zero-copy pool's page heap (lib/shim/zcpool.hpp) over anonymous
// memory: page-granular allocation, coalescing on both sides, the top and
// its high-water mark, size classes, exhaustion, in-place resizing,
// rejection of pointers that are not live allocations, and a randomized
// run checked against the heap's invariants and byte patterns.  Also the
// process-wide pool on a host without the module: off.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <linux/sd.h>

#include "zcpool.hpp"

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

using sd::zc::PageHeap;
constexpr std::size_t PG = PageHeap::PAGE_SIZE;

// A heap over npages fresh anonymous pages, its metadata in another
// mapping.  cmocka leaves a failed test with longjmp, so the heap lives
// in memory from setup and teardown, not on the stack.
struct Fixture {
	PageHeap heap;
	unsigned char *mem = nullptr;
	void *meta = nullptr;
	std::size_t npages = 0;
};

void *map(std::size_t len)
{
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return m == MAP_FAILED ? nullptr : m;
}

template <std::size_t N> int setup(void **state)
{
	auto *f = new Fixture;

	f->npages = N;
	f->mem = static_cast<unsigned char *>(map(N * PG));
	f->meta = map(PageHeap::meta_bytes(N));
	if (!f->mem || !f->meta || !f->heap.init(f->mem, N, f->meta))
		return -1;
	*state = f;
	return 0;
}

int teardown(void **state)
{
	auto *f = static_cast<Fixture *>(*state);

	munmap(f->mem, f->npages * PG);
	munmap(f->meta, PageHeap::meta_bytes(f->npages));
	delete f;
	return 0;
}

Fixture &fx(void **state)
{
	return *static_cast<Fixture *>(*state);
}

#define assert_consistent(h)                                                    \
	do {                                                                    \
		const char *why_ = (h).check();                                 \
		if (why_)                                                       \
			print_error("heap inconsistent: %s\n", why_);           \
		assert_null(why_);                                              \
	} while (0)

// Page index of p in f's heap.
std::size_t page_of(const Fixture &f, const void *p)
{
	return static_cast<std::size_t>(static_cast<const unsigned char *>(p) - f.mem) / PG;
}

void init_rejects_bad_arguments(void **)
{
	PageHeap h;
	alignas(4096) static unsigned char mem[2 * 4096];
	static std::uint32_t meta[3 * 2];

	assert_false(h.init(nullptr, 2, meta));
	assert_false(h.init(mem, 2, nullptr));
	assert_false(h.init(mem, 0, meta));
	assert_false(h.init(mem + 1, 1, meta));
	assert_false(h.init(mem, std::size_t{PageHeap::MAX_PAGES} + 1, meta));
	assert_null(h.base());
	assert_null(h.alloc(1));
	assert_false(h.contains(mem));
	assert_true(h.init(mem, 2, meta));
	assert_consistent(h);
	assert_true(h.contains(mem));
	assert_true(h.contains(mem + 2 * 4096 - 1));
	assert_false(h.contains(mem + 2 * 4096));
}

void pages_for_rounds_up(void **)
{
	assert_int_equal(PageHeap::pages_for(0), 0);
	assert_int_equal(PageHeap::pages_for(1), 1);
	assert_int_equal(PageHeap::pages_for(PG), 1);
	assert_int_equal(PageHeap::pages_for(PG + 1), 2);
	assert_int_equal(PageHeap::pages_for(~std::size_t{0}), (~std::size_t{0} >> 12) + 1);
}

// After EAGAIN (RLIMIT_MEMLOCK) the pool tries the limit, then halves,
// in whole pages, and gives up below POOL_MIN (sends then copy).
void next_pool_len_follows_memlock(void **)
{
	constexpr std::size_t MiB = std::size_t{1} << 20;

	assert_int_equal(sd::zc::next_pool_len(sd::zc::POOL_LEN, 8 * MiB), 8 * MiB);
	assert_int_equal(sd::zc::next_pool_len(sd::zc::POOL_LEN, 8 * MiB + 123), 8 * MiB);
	assert_int_equal(sd::zc::next_pool_len(8 * MiB, 8 * MiB), 4 * MiB);
	assert_int_equal(sd::zc::next_pool_len(4 * MiB, 8 * MiB), 2 * MiB);
	assert_int_equal(sd::zc::next_pool_len(2 * MiB, 8 * MiB), 1 * MiB);
	assert_int_equal(sd::zc::next_pool_len(1 * MiB, 8 * MiB), 0);
	assert_int_equal(sd::zc::next_pool_len(sd::zc::POOL_LEN, 64 * 1024), 0);
	assert_int_equal(sd::zc::next_pool_len(sd::zc::POOL_LEN, ~std::uint64_t{0}),
			 sd::zc::POOL_LEN / 2);
	assert_int_equal(sd::zc::next_pool_len(3 * MiB + 4096, ~std::uint64_t{0}), 3 * MiB / 2);
}

void alloc_is_page_granular(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;
	std::size_t dirty = 99;

	void *a = h.alloc(1, &dirty);
	assert_ptr_equal(a, f.mem);
	assert_int_equal(dirty, 0);
	void *b = h.alloc(3);
	assert_ptr_equal(b, f.mem + PG);
	void *c = h.alloc(2);
	assert_ptr_equal(c, f.mem + 4 * PG);
	assert_int_equal(h.top(), 6);
	assert_int_equal(h.high_water(), 6);
	assert_int_equal(h.used_pages(), 6);
	assert_int_equal(h.free_pages(), 0);
	assert_int_equal(h.usable_size(a), PG);
	assert_int_equal(h.usable_size(b), 3 * PG);
	assert_int_equal(h.usable_size(c), 2 * PG);
	assert_null(h.alloc(0));
	assert_consistent(h);
	// The memory is usable, every byte of it.
	std::memset(a, 1, PG);
	std::memset(b, 2, 3 * PG);
	std::memset(c, 3, 2 * PG);
	assert_int_equal(f.mem[PG - 1], 1);
	assert_int_equal(f.mem[PG], 2);
	assert_int_equal(f.mem[4 * PG - 1], 2);
	assert_int_equal(f.mem[4 * PG], 3);
	assert_true(h.free(a));
	assert_true(h.free(b));
	assert_true(h.free(c));
	assert_int_equal(h.top(), 0);
	assert_int_equal(h.used_pages(), 0);
	assert_int_equal(h.free_pages(), 0);
	assert_consistent(h);
}

// Five runs A..E and a guard F against the top; freeing merges each freed
// run with free neighbours on its left, its right, and both.
void free_coalesces(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;
	void *r[6];
	const std::size_t len[6] = {2, 3, 4, 1, 5, 1};

	for (int i = 0; i < 6; i++)
		assert_non_null(r[i] = h.alloc(len[i]));
	assert_int_equal(h.top(), 16);

	// B alone: a free run of 3, nothing to merge with.
	assert_true(h.free(r[1]));
	assert_int_equal(h.free_pages(), 3);
	assert_consistent(h);
	// A: merges with B on its right, [0, 5).
	assert_true(h.free(r[0]));
	assert_int_equal(h.free_pages(), 5);
	assert_consistent(h);
	// C: merges with [0, 5) on its left, [0, 9).
	assert_true(h.free(r[2]));
	assert_int_equal(h.free_pages(), 9);
	assert_consistent(h);
	// E, then D: D merges on both sides, [0, 15).
	assert_true(h.free(r[4]));
	assert_int_equal(h.free_pages(), 14);
	assert_true(h.free(r[3]));
	assert_int_equal(h.free_pages(), 15);
	assert_consistent(h);
	// One run: a request for all 15 pages fits at 0.
	void *all = h.alloc(15);
	assert_ptr_equal(all, f.mem);
	assert_int_equal(h.free_pages(), 0);
	assert_int_equal(h.top(), 16);
	assert_true(h.free(all));
	assert_true(h.free(r[5]));
	assert_int_equal(h.top(), 0);
	assert_int_equal(h.free_pages(), 0);
	assert_consistent(h);
}

void freed_run_at_top_lowers_top(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;

	void *a = h.alloc(2), *b = h.alloc(3), *c = h.alloc(4);
	assert_int_equal(h.top(), 9);
	// c ends at top: top goes down to its start.
	assert_true(h.free(c));
	assert_int_equal(h.top(), 5);
	assert_int_equal(h.free_pages(), 0);
	assert_consistent(h);
	// a is free below b; freeing b merges with a and both go to the top.
	assert_true(h.free(a));
	assert_int_equal(h.top(), 5);
	assert_int_equal(h.free_pages(), 2);
	assert_true(h.free(b));
	assert_int_equal(h.top(), 0);
	assert_int_equal(h.free_pages(), 0);
	assert_int_equal(h.high_water(), 9);
	assert_consistent(h);
}

// Free runs of 1, 2, 3, 4, 7 and 8 pages, each between used guards.
void size_classes(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;
	const std::size_t lens[] = {1, 2, 3, 4, 7, 8};
	void *run[6], *guard[6];

	for (int i = 0; i < 6; i++) {
		assert_non_null(run[i] = h.alloc(lens[i]));
		assert_non_null(guard[i] = h.alloc(1));
	}
	for (auto *p : run)
		assert_true(h.free(p));
	assert_int_equal(h.free_pages(), 25);
	assert_consistent(h);

	// A power of two takes a run of its own class: exact fits.
	assert_ptr_equal(h.alloc(4), run[3]);
	assert_ptr_equal(h.alloc(1), run[0]);
	assert_ptr_equal(h.alloc(8), run[5]);
	// 5 pages: class [4, 8) holds the 7-run, which fits; 2 stay free.
	assert_ptr_equal(h.alloc(5), run[4]);
	assert_int_equal(h.usable_size(run[4]), 5 * PG);
	assert_consistent(h);
	// 3 pages: its class [2, 4) holds the 3-run (and the 2-run).
	assert_ptr_equal(h.alloc(3), run[2]);
	// 2 pages: the 2-run (class 1 holds it and the 2 left of the 7-run).
	void *two = h.alloc(2);
	assert_true(two == run[1] || two == static_cast<unsigned char *>(run[4]) + 5 * PG);
	void *two_more = h.alloc(2);
	assert_true(two_more == run[1] ||
		    two_more == static_cast<unsigned char *>(run[4]) + 5 * PG);
	assert_ptr_not_equal(two, two_more);
	assert_int_equal(h.free_pages(), 0);
	// 16 pages: no free run that long, so from the top.
	const std::uint32_t top = h.top();
	assert_ptr_equal(h.alloc(16), f.mem + top * PG);
	assert_consistent(h);
}

// A larger class serves a request when its own class has nothing.
void larger_class_is_split(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;

	void *big = h.alloc(20);
	void *guard = h.alloc(1);
	assert_non_null(guard);
	assert_true(h.free(big));
	void *a = h.alloc(3);
	assert_ptr_equal(a, big);
	assert_int_equal(h.free_pages(), 17);
	void *b = h.alloc(3);
	assert_ptr_equal(b, f.mem + 3 * PG);
	assert_int_equal(h.free_pages(), 14);
	assert_consistent(h);
	// Freeing both restores the one run of 20.
	assert_true(h.free(a));
	assert_true(h.free(b));
	assert_int_equal(h.free_pages(), 20);
	assert_ptr_equal(h.alloc(20), big);
	assert_consistent(h);
}

void exhaustion_returns_null(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;		// 16 pages
	void *p[16];

	assert_null(h.alloc(17));
	void *all = h.alloc(16);
	assert_ptr_equal(all, f.mem);
	assert_null(h.alloc(1));
	assert_true(h.free(all));
	// Sixteen single pages, then every other one freed: 8 free pages,
	// no two together.
	for (auto &q : p)
		assert_non_null(q = h.alloc(1));
	assert_null(h.alloc(1));
	for (int i = 0; i < 16; i += 2)
		assert_true(h.free(p[i]));
	assert_int_equal(h.free_pages(), 8);
	assert_null(h.alloc(2));
	assert_consistent(h);
	for (int i = 0; i < 16; i += 2)
		assert_ptr_equal(h.alloc(1), p[14 - i]);	// LIFO
	assert_null(h.alloc(1));
	// Free runs [1, 4), [5, 8), [9, 12), [13, 14), and the top at 15:
	// three 3-page requests fit, then no 2-page one.
	for (int i = 1; i < 16; i += 2)
		assert_true(h.free(p[i]));
	for (int i = 2; i < 14; i += 4)
		assert_true(h.free(p[i]));
	assert_int_equal(h.top(), 15);
	assert_int_equal(h.free_pages(), 10);
	assert_consistent(h);
	assert_non_null(h.alloc(3));
	assert_non_null(h.alloc(3));
	assert_non_null(h.alloc(3));
	assert_null(h.alloc(2));
	assert_non_null(h.alloc(1));
	assert_non_null(h.alloc(1));
	assert_null(h.alloc(1));
	assert_consistent(h);
}

// A run that fits, behind more than SCAN runs of the same class that do
// not, is still found when nothing else can serve the request.
void deep_fit_is_found(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;		// 64 pages
	void *three = h.alloc(3), *twos[12];

	assert_non_null(h.alloc(1));
	for (auto &t : twos) {
		assert_non_null(t = h.alloc(2));
		assert_non_null(h.alloc(1));
	}
	assert_non_null(h.alloc(h.pages() - h.top()));	// no top left
	// Freed first, so last on the list of class [2, 4).
	assert_true(h.free(three));
	for (auto *t : twos)
		assert_true(h.free(t));
	assert_consistent(h);
	assert_ptr_equal(h.alloc(3), three);
	assert_null(h.alloc(3));
	assert_consistent(h);
}

void usable_size_and_bad_pointers(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;

	void *a = h.alloc(3), *b = h.alloc(1);
	unsigned char *ua = static_cast<unsigned char *>(a);
	assert_int_equal(h.usable_size(a), 3 * PG);
	assert_int_equal(h.usable_size(b), PG);
	// Not the start of an allocation: inside, unaligned, its last
	// page, the top, outside the heap.
	assert_int_equal(h.usable_size(ua + PG), 0);
	assert_int_equal(h.usable_size(ua + 2 * PG), 0);
	assert_int_equal(h.usable_size(ua + 1), 0);
	assert_int_equal(h.usable_size(f.mem + 4 * PG), 0);
	assert_int_equal(h.usable_size(f.mem + 16 * PG), 0);
	assert_int_equal(h.usable_size(&f), 0);
	assert_false(h.free(ua + PG));
	assert_false(h.free(ua + 2 * PG));
	assert_false(h.free(ua + 8));
	assert_false(h.free(f.mem + 4 * PG));
	assert_false(h.free(&f));
	assert_false(h.resize(ua + PG, 1));
	assert_int_equal(h.used_pages(), 4);
	assert_consistent(h);
	// A double free is refused, below top and at it.
	assert_true(h.free(a));
	assert_false(h.free(a));
	assert_int_equal(h.usable_size(a), 0);
	assert_true(h.free(b));
	assert_false(h.free(b));
	assert_int_equal(h.top(), 0);
	assert_consistent(h);
}

void high_water_marks_fresh_pages(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;
	std::size_t dirty = 99;

	void *a = h.alloc(4, &dirty);
	assert_int_equal(dirty, 0);
	assert_int_equal(h.high_water(), 4);
	assert_true(h.free(a));			// top back to 0
	assert_int_equal(h.top(), 0);
	assert_int_equal(h.high_water(), 4);
	void *b = h.alloc(2, &dirty);		// [0, 2): used before
	assert_int_equal(dirty, 2);
	void *c = h.alloc(4, &dirty);		// [2, 6): [2, 4) used before
	assert_ptr_equal(c, f.mem + 2 * PG);
	assert_int_equal(dirty, 2);
	assert_int_equal(h.high_water(), 6);
	void *d = h.alloc(3, &dirty);		// [6, 9): fresh
	assert_int_equal(dirty, 0);
	assert_true(h.free(b));
	void *e = h.alloc(1, &dirty);		// from a free run
	assert_ptr_equal(e, f.mem);
	assert_int_equal(dirty, 1);
	assert_int_equal(h.high_water(), 9);
	assert_non_null(d);
	assert_consistent(h);
	// Growing in place at the top raises the mark too.
	assert_true(h.resize(d, 5));
	assert_int_equal(h.high_water(), 11);
	assert_consistent(h);
}

void resize_in_place(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;

	void *a = h.alloc(4);
	std::memset(a, 0x5a, 4 * PG);
	// Same size, shrink: the tail goes to the top.
	assert_true(h.resize(a, 4));
	assert_true(h.resize(a, 2));
	assert_int_equal(h.usable_size(a), 2 * PG);
	assert_int_equal(h.top(), 2);
	assert_consistent(h);
	// Grow at the top.
	assert_true(h.resize(a, 5));
	assert_int_equal(h.top(), 5);
	assert_int_equal(static_cast<unsigned char *>(a)[2 * PG - 1], 0x5a);
	void *b = h.alloc(3);			// [5, 8)
	void *c = h.alloc(1);			// [8, 9)
	assert_non_null(c);
	// Cannot grow into a used neighbour, nor past the heap.
	assert_false(h.resize(a, 6));
	assert_false(h.resize(c, 9));
	assert_false(h.resize(a, 0));
	assert_consistent(h);
	// Grow into a free neighbour: part of it, then the rest.
	assert_true(h.free(b));
	assert_true(h.resize(a, 6));
	assert_int_equal(h.free_pages(), 2);
	assert_consistent(h);
	assert_true(h.resize(a, 8));
	assert_int_equal(h.free_pages(), 0);
	assert_false(h.resize(a, 9));
	assert_consistent(h);
	// Shrinking next to a free run merges the tail into it.
	assert_true(h.resize(a, 3));		// [3, 8) free
	assert_int_equal(h.free_pages(), 5);
	assert_true(h.resize(a, 1));		// [1, 8) free
	assert_int_equal(h.free_pages(), 7);
	assert_consistent(h);
	assert_true(h.free(c));			// everything above a to the top
	assert_int_equal(h.top(), 1);
	assert_int_equal(h.free_pages(), 0);
	assert_int_equal(static_cast<unsigned char *>(a)[0], 0x5a);
	assert_consistent(h);
}

// Random allocations, frees and resizes over 4096 pages.  Every page of a
// live allocation holds its owner's id and its page number in its first
// and last 8 bytes; they are checked, with the invariants, as it goes.
// A shadow map of which allocation owns each page checks that no two
// overlap, and that an allocation is refused exactly when no n unowned
// pages lie together.
constexpr std::size_t STRESS_PAGES = 4096;
constexpr unsigned SLOTS = 512;

struct Live {
	unsigned char *p;
	std::size_t pages;
	std::uint32_t id;
};

std::uint64_t rng_state;
std::uint32_t owner[STRESS_PAGES];

// Give pages [first, first + n) to id (0: free them); each must have been
// owned by was.
bool own(std::size_t first, std::size_t n, std::uint32_t was, std::uint32_t id)
{
	for (std::size_t i = first; i < first + n; i++) {
		if (owner[i] != was)
			return false;
		owner[i] = id;
	}
	return true;
}

std::size_t longest_unowned()
{
	std::size_t best = 0, run = 0;

	for (auto o : owner) {
		run = o ? 0 : run + 1;
		best = run > best ? run : best;
	}
	return best;
}

std::uint64_t rnd()
{
	// xorshift64*
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

std::uint64_t mark(std::uint32_t id, std::size_t page)
{
	return (std::uint64_t{id} << 32) ^ page ^ 0xa5a5000000000000ULL;
}

void stamp(const Live &l, std::size_t from)
{
	for (std::size_t i = from; i < l.pages; i++) {
		const std::uint64_t m = mark(l.id, i);
		std::memcpy(l.p + i * PG, &m, 8);
		std::memcpy(l.p + i * PG + PG - 8, &m, 8);
	}
}

bool stamped(const Live &l)
{
	for (std::size_t i = 0; i < l.pages; i++) {
		const std::uint64_t m = mark(l.id, i);
		if (std::memcmp(l.p + i * PG, &m, 8) || std::memcmp(l.p + i * PG + PG - 8, &m, 8))
			return false;
	}
	return true;
}

void randomized(void **state)
{
	auto &f = fx(state);
	auto &h = f.heap;
	static Live live[SLOTS];
	std::uint32_t next_id = 1;
	std::size_t failed = 0, used = 0;

	rng_state = 0x9e3779b97f4a7c15ULL;
	std::memset(live, 0, sizeof(live));
	std::memset(owner, 0, sizeof(owner));
	for (unsigned op = 0; op < 200000; op++) {
		Live &l = live[rnd() % SLOTS];
		const unsigned what = static_cast<unsigned>(rnd() % 8);

		if (!l.p) {
			// Mostly small runs, sometimes large ones.
			const std::size_t n = rnd() % 8 ? 1 + rnd() % 8 : 1 + rnd() % 256;
			std::size_t dirty;
			l.p = static_cast<unsigned char *>(h.alloc(n, &dirty));
			if (!l.p) {
				failed++;
				assert_true(longest_unowned() < n);
				continue;
			}
			l.id = next_id++;
			assert_true(own(page_of(f, l.p), n, 0, l.id));
			assert_true(dirty <= n);
			if (dirty < n) {
				// Never-used pages are still zero.
				const unsigned char *fresh = l.p + dirty * PG;
				for (std::size_t i = 0; i < (n - dirty) * PG; i += 512)
					assert_int_equal(fresh[i], 0);
			}
			l.pages = n;
			used += n;
			stamp(l, 0);
		} else if (what < 5) {
			assert_true(stamped(l));
			assert_true(h.free(l.p));
			assert_true(own(page_of(f, l.p), l.pages, l.id, 0));
			used -= l.pages;
			l.p = nullptr;
		} else {
			assert_true(stamped(l));
			const std::size_t n = 1 + rnd() % 64;
			const std::size_t old = l.pages, first = page_of(f, l.p);
			if (h.resize(l.p, n)) {
				used = used - old + n;
				l.pages = n;
				if (n > old) {
					assert_true(own(first + old, n - old, 0, l.id));
					stamp(l, old);
				} else {
					assert_true(own(first + n, old - n, l.id, 0));
				}
			} else {
				// Only growth fails, when the pages after it are
				// not all free.
				assert_true(n > old);
				bool room = first + n <= STRESS_PAGES;
				for (std::size_t i = first + old; room && i < first + n; i++)
					room = !owner[i];
				assert_false(room);
			}
			assert_true(stamped(l));
		}
		assert_int_equal(h.used_pages(), used);
		if (op % 4096 == 0) {
			assert_consistent(h);
			for (const auto &x : live)
				if (x.p)
					assert_true(stamped(x));
		}
	}
	assert_consistent(h);
	for (auto &x : live)
		if (x.p) {
			assert_true(stamped(x));
			assert_true(h.free(x.p));
			assert_true(own(page_of(f, x.p), x.pages, x.id, 0));
			x.p = nullptr;
		}
	assert_int_equal(h.used_pages(), 0);
	assert_int_equal(h.free_pages(), 0);
	assert_int_equal(h.top(), 0);
	assert_consistent(h);
	print_message("randomized: %zu allocations refused, high water %u pages\n", failed,
		      h.high_water());
}

// On a host without af_sd.ko: no sysctl, so zero copy is off, and the
// pool cannot be made (no AF_SD socket); errno is left alone.
void process_pool_off_without_module(void **)
{
	const long fd = syscall(SYS_socket, AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		close(static_cast<int>(fd));
		skip();		// the module is loaded here
	}
	assert_int_equal(sd::zc::threshold(), 0);
	errno = EXDEV;
	assert_null(sd::zc::pool_alloc(1 << 20, false));
	assert_null(sd::zc::pool_alloc(1 << 20, true));
	assert_int_equal(errno, EXDEV);
	int x;
	assert_false(sd::zc::in_pool(&x, sizeof(x)));
	assert_false(sd::zc::in_pool(nullptr, 0));
	assert_false(sd::zc::pool_contains(&x));
}

} // namespace

int main()
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(init_rejects_bad_arguments),
		cmocka_unit_test(pages_for_rounds_up),
		cmocka_unit_test(next_pool_len_follows_memlock),
		cmocka_unit_test_setup_teardown(alloc_is_page_granular, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(free_coalesces, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(freed_run_at_top_lowers_top, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(size_classes, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(larger_class_is_split, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(exhaustion_returns_null, setup<16>, teardown),
		cmocka_unit_test_setup_teardown(deep_fit_is_found, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(usable_size_and_bad_pointers, setup<16>, teardown),
		cmocka_unit_test_setup_teardown(high_water_marks_fresh_pages, setup<64>, teardown),
		cmocka_unit_test_setup_teardown(resize_in_place, setup<9>, teardown),
		cmocka_unit_test_setup_teardown(randomized, setup<STRESS_PAGES>, teardown),
		cmocka_unit_test(process_pool_off_without_module),
	};
	return cmocka_run_group_tests_name("zcpool", tests, nullptr, nullptr);
}
