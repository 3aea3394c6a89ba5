// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cmocka for the C++ unit tests, and a ring mapped between guard pages.
//
// Include it after the standard headers: cmocka defines macros such as
// fail() that clash with names in them.
//
// cmocka leaves a failed test with longjmp, which skips destructors: test
// bodies hold only trivially destructible objects (sd::Producer and
// sd::Consumer are) and get their memory from setup/teardown.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "ring.hpp"

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <csetjmp>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace test {

// A ring in fresh anonymous memory: its data area ends at a PROT_NONE page
// (layout() offsets), or, with data_first, starts right after one and is
// followed by the control fields.  Any access outside the data area and
// the control fields faults.
struct GuardedRing {
	unsigned char *map = nullptr;
	std::size_t map_len = 0;
	unsigned char *base = nullptr;
	sd_ring_offset off{};

	unsigned char *data() const { return base + off.data; }
	std::uint64_t rd64(std::uint64_t at) const
	{
		std::uint64_t w;
		std::memcpy(&w, data() + at, sizeof(w));
		return w;
	}
	void wr64(std::uint64_t at, std::uint64_t w) { std::memcpy(data() + at, &w, sizeof(w)); }
	std::uint64_t &consumer() const { return *reinterpret_cast<std::uint64_t *>(base + off.consumer); }
	std::uint32_t &prod_flags() const
	{
		return *reinterpret_cast<std::uint32_t *>(base + off.prod_flags);
	}
	std::uint32_t &cons_flags() const
	{
		return *reinterpret_cast<std::uint32_t *>(base + off.cons_flags);
	}
	bool data_zero(std::uint64_t from, std::uint64_t to) const
	{
		for (std::uint64_t i = from; i < to; i++)
			if (data()[i])
				return false;
		return true;
	}
};

inline std::size_t page()
{
	return static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// nullptr on failure.
inline GuardedRing *guarded_ring(std::size_t size, bool data_first = false)
{
	const std::size_t pg = page(), len = pg + size + pg + (data_first ? pg : 0);
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return nullptr;
	auto *r = new GuardedRing;
	r->map = static_cast<unsigned char *>(m);
	r->map_len = len;
	if (!data_first) {
		r->base = r->map;
		if (sd::layout(r->base, pg + size, size, r->off) ||
		    mprotect(r->map + pg + size, pg, PROT_NONE))
			return delete r, nullptr;
		return r;
	}
	// [guard][data][control][guard]
	r->base = r->map + pg;
	r->off = {.consumer = size + 128, .prod_flags = size, .cons_flags = size + 136,
		  .data = 0, .size = size, .mmap_len = size + pg,
		  .prod_pos = size + 256,
		  .cons_pos = size + 384, .cons_off = size + 392,
		  .prod_token = size + 512, .cons_token = size + 516, .cons_lowat = size + 520};
	if (mprotect(r->map, pg, PROT_NONE) || mprotect(r->base + size + pg, pg, PROT_NONE))
		return delete r, nullptr;
	return r;
}

inline void free_ring(GuardedRing *r)
{
	if (r)
		munmap(r->map, r->map_len);
	delete r;
}

// cmocka setup/teardown: *state is a GuardedRing of the size in the name.
template <std::size_t Size, bool DataFirst = false> int setup_ring(void **state)
{
	*state = guarded_ring(Size, DataFirst);
	return *state ? 0 : -1;
}

inline int teardown_ring(void **state)
{
	free_ring(static_cast<GuardedRing *>(*state));
	return 0;
}

inline GuardedRing &ring(void **state)
{
	return *static_cast<GuardedRing *>(*state);
}

inline std::uint64_t rec_word(std::uint32_t len, std::uint32_t flags)
{
	const sd_rec r{len, flags};
	std::uint64_t w;
	std::memcpy(&w, &r, sizeof(w));
	return w;
}

} // namespace test

#define ring_test(f, size) \
	cmocka_unit_test_setup_teardown(f, test::setup_ring<size>, test::teardown_ring)
