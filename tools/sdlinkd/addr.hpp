// SPDX-License-Identifier: GPL-2.0
//
// Addresses as sdlinkd keeps them: IPv6, IPv4 as ::ffff:a.b.c.d, in
// network order (sdlink::In6, as on the wire and in the kernel's
// SD_A_ADDR_IN6), and their text for logs, without allocating.
#pragma once

#include <netinet/in.h>

#include <cstdint>

#include "wire.hpp"

namespace sdlinkd {

using sdlink::In6;

// "10.0.0.2", "2001:db8::2"; with a port "10.0.0.2:80", "[2001:db8::2]:80".
struct AddrText {
	char s[INET6_ADDRSTRLEN + 8] = {};
	const char *c_str() const noexcept { return s; }
};
AddrText text(const In6 &addr) noexcept;
AddrText text(const In6 &addr, std::uint16_t port) noexcept;

bool is_v4_mapped(const In6 &addr) noexcept;

In6 in6_of(const sockaddr_in6 &sa) noexcept;
sockaddr_in6 sockaddr_of(const In6 &addr, std::uint16_t port) noexcept;

} // namespace sdlinkd
