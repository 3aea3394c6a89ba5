// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cmocka for the tests of sdlinkd's wire format and session
// (tools/sdlinkd), sample messages, and bytes placed right before a
// PROT_NONE page, so that a decoder reading one byte too far crashes.
//
// cmocka leaves a failed test with longjmp, which skips destructors: test
// bodies hold only trivially destructible objects (Result, Frame and
// Message are); sessions live in memory that setup and teardown manage.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "wire.hpp"

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <csetjmp>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace test {

using Bytes = std::span<const std::uint8_t>;

// Two pages of data followed by a PROT_NONE page, mapped once.
inline std::uint8_t *guard_area()
{
	static std::uint8_t *area = [] {
		const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
		void *p = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			std::abort();
		std::uint8_t *start = static_cast<std::uint8_t *>(p);
		if (mprotect(start + 2 * page, page, PROT_NONE) != 0)
			std::abort();
		return start;
	}();
	return area;
}

inline std::size_t guard_capacity()
{
	return 2 * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// A copy of bytes whose last byte is the last one before the guard page.
inline Bytes at_guard(Bytes bytes)
{
	assert_true(bytes.size() <= guard_capacity());
	std::uint8_t *end = guard_area() + guard_capacity();
	if (!bytes.empty())
		std::memmove(end - bytes.size(), bytes.data(), bytes.size());
	return {end - bytes.size(), bytes.size()};
}

// "53444c4b 01..." to bytes, spaces ignored; returns the count.
template <std::size_t N>
std::size_t unhex(const char *hex, std::array<std::uint8_t, N> &out)
{
	std::size_t n = 0;
	int hi = -1;
	for (const char *p = hex; *p; p++) {
		if (*p == ' ')
			continue;
		const int v = *p <= '9' ? *p - '0' : *p - 'a' + 10;
		assert_true(v >= 0 && v < 16);
		if (hi < 0) {
			hi = v;
			continue;
		}
		assert_true(n < N);
		out[n++] = static_cast<std::uint8_t>(hi << 4 | v);
		hi = -1;
	}
	assert_int_equal(hi, -1);
	return n;
}

// Fields with distinct bytes, high bits set in some, so that swapped,
// shifted or truncated fields show.
inline sdlink::Endpoint sample_endpoint()
{
	sdlink::Endpoint e;
	for (std::size_t i = 0; i < e.gid.size(); i++)
		e.gid[i] = static_cast<std::uint8_t>(0xf0 + i);
	e.qpn = 0x00c1c2c3;
	e.psn = 0x00d1d2d3;
	e.lid = 0xe1e2;
	e.mtu = 5;
	e.ring = {0x1011121314151617, 0x20212223, 0x30313233, 0x4041424344454647, 0x50515253};
	return e;
}

inline sdlink::Connect sample_connect()
{
	sdlink::Connect c;
	c.id = 0x8102030405060708;
	c.src.addr = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
	c.src.port = 0x1234;
	c.dst.addr = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
	c.dst.port = 0xabcd;
	c.uid = 0xa1a2a3a4;
	c.gid = 0xb1b2b3b4;
	c.send_size = 0x00200000;
	c.recv_size = 0x00010000;
	return c;
}

inline sdlink::Hello sample_hello()
{
	sdlink::Hello h;
	h.role = sdlink::Role::ANSWERING;
	for (std::size_t i = 0; i < h.nonce.size(); i++)
		h.nonce[i] = static_cast<std::uint8_t>(i);
	return h;
}

// One message of each type.
inline sdlink::Message sample(sdlink::Type type)
{
	using namespace sdlink;
	switch (type) {
	case Type::HELLO: return sample_hello();
	case Type::CONNECT: return sample_connect();
	case Type::ANSWER: return Answer{0x1122334455667788, Verdict::BUSY, sample_endpoint()};
	case Type::CLOSE: return Close{0x1122334455667788, Reason::RESET};
	case Type::PING: return Ping{0x0102030405060708};
	case Type::PONG: return Pong{0xfffffffffffffffe};
	case Type::READY: return Ready{0x8877665544332211, sample_endpoint()};
	}
	return Ping{};
}

constexpr sdlink::Type ALL_TYPES[] = {sdlink::Type::HELLO, sdlink::Type::CONNECT, sdlink::Type::ANSWER,
				      sdlink::Type::CLOSE,  sdlink::Type::PING,    sdlink::Type::PONG,
				      sdlink::Type::READY};

} // namespace test
