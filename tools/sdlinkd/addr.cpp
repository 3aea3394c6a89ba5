// SPDX-License-Identifier: GPL-2.0
#include "addr.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace sdlinkd {

bool is_v4_mapped(const In6 &addr) noexcept
{
	static constexpr std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return std::memcmp(addr.data(), prefix, sizeof(prefix)) == 0;
}

AddrText text(const In6 &addr) noexcept
{
	AddrText t;
	const bool v4 = is_v4_mapped(addr);
	if (!inet_ntop(v4 ? AF_INET : AF_INET6, addr.data() + (v4 ? 12 : 0), t.s, sizeof(t.s)))
		std::snprintf(t.s, sizeof(t.s), "?");
	return t;
}

AddrText text(const In6 &addr, std::uint16_t port) noexcept
{
	const AddrText a = text(addr);
	AddrText t;
	std::snprintf(t.s, sizeof(t.s), is_v4_mapped(addr) ? "%s:%u" : "[%s]:%u", a.s, port);
	return t;
}

In6 in6_of(const sockaddr_in6 &sa) noexcept
{
	In6 a;
	std::memcpy(a.data(), &sa.sin6_addr, a.size());
	return a;
}

sockaddr_in6 sockaddr_of(const In6 &addr, std::uint16_t port) noexcept
{
	sockaddr_in6 sa{};
	sa.sin6_family = AF_INET6;
	sa.sin6_port = htons(port);
	std::memcpy(&sa.sin6_addr, addr.data(), addr.size());
	return sa;
}

} // namespace sdlinkd
