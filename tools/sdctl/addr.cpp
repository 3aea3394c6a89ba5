// SPDX-License-Identifier: GPL-2.0
#include "addr.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>

namespace sdctl {

bool is_v4_mapped(const In6 &a) noexcept
{
	static constexpr std::uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return std::memcmp(a.data(), mapped, sizeof(mapped)) == 0;
}

bool shows_v4(const In6 &a, std::uint16_t family) noexcept
{
	return is_v4_mapped(a) && family != AF_INET6;
}

std::string format_addr(const In6 &a, bool v4)
{
	char buf[INET6_ADDRSTRLEN];
	if (v4 && is_v4_mapped(a))
		inet_ntop(AF_INET, a.data() + 12, buf, sizeof(buf));
	else
		inet_ntop(AF_INET6, a.data(), buf, sizeof(buf));
	return buf;
}

std::string format_endpoint(const Endpoint &ep, std::uint16_t family, bool star_port)
{
	const bool v4 = shows_v4(ep.addr, family);
	std::string s = format_addr(ep.addr, v4);
	if (!v4)
		s = "[" + s + "]";
	s += ':';
	s += star_port && ep.port == 0 ? std::string("*") : std::to_string(ep.port);
	return s;
}

void print_endpoint(Printer &out, std::string_view name, const Key &text,
		    const std::optional<Endpoint> &ep, std::uint16_t family)
{
	if (!ep) {
		out.field(text, "*");
		return;
	}
	out.field(text, format_endpoint(*ep, family, true));
	const std::string n(name), addr = n + "_addr", port = n + "_port";
	out.field(Key::json_only(n), format_endpoint(*ep, family, false));
	out.field(Key::json_only(addr), format_addr(ep->addr, shows_v4(ep->addr, family)));
	out.field(Key::json_only(port), ep->port);
}

std::optional<Prefix> parse_prefix(std::string_view word)
{
	const std::size_t slash = word.find('/');
	const std::string host(word.substr(0, slash));
	Prefix p;
	unsigned max;
	if (inet_pton(AF_INET, host.c_str(), p.addr.data() + 12) == 1) {
		p.addr[10] = p.addr[11] = 0xff;
		max = 32;
	} else if (host.find(':') != std::string::npos &&
		   inet_pton(AF_INET6, host.c_str(), p.addr.data()) == 1) {
		max = 128;
	} else {
		return std::nullopt;
	}
	unsigned len = max;
	if (slash != std::string_view::npos) {
		const std::string_view digits = word.substr(slash + 1);
		const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
		if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || len > max)
			return std::nullopt;
	}
	p.len = static_cast<std::uint8_t>(len + 128 - max);
	return p;
}

} // namespace sdctl
