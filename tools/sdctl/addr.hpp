// SPDX-License-Identifier: GPL-2.0
//
// Addresses as sdctl reads and writes them.  The kernel speaks IPv6 only,
// IPv4 as ::ffff:a.b.c.d (and an IPv4 prefix P as P + 96); sdctl shows an
// IPv4 socket's addresses and IPv4 rules in dotted quads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {

bool is_v4_mapped(const In6 &a) noexcept;

// The address alone: dotted quad when v4 and the address is v4-mapped,
// else RFC 5952 IPv6.
std::string format_addr(const In6 &a, bool v4);

// "ADDR:PORT", IPv6 in brackets.  family is the socket's (AF_INET shows a
// v4-mapped address as IPv4; 0 means "v4-mapped is IPv4").  With
// star_port, port 0 shows as "*", as in ss.
std::string format_endpoint(const Endpoint &ep, std::uint16_t family, bool star_port);

// A socket's endpoint: in text one column (text, "*" when absent); in
// JSON "NAME": "ADDR:PORT", "NAME_addr" and "NAME_port" (absent when the
// kernel sent none).
void print_endpoint(Printer &out, std::string_view name, const Key &text,
		    const std::optional<Endpoint> &ep, std::uint16_t family);

// Whether a socket of this family shows its addresses as IPv4.
bool shows_v4(const In6 &a, std::uint16_t family) noexcept;

// ADDR[/PREFIX], IPv4 or IPv6, as the kernel wants it: IPv4 mapped, its
// prefix plus 96; no prefix means the host (/32 or /128).  nullopt when
// the word is not an address or the prefix is out of range.
struct Prefix {
	In6 addr{};
	std::uint8_t len = 128;	// in IPv6 terms
};
std::optional<Prefix> parse_prefix(std::string_view word);

} // namespace sdctl
