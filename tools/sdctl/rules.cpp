// SPDX-License-Identifier: GPL-2.0
//
// sdctl rules: the access-control rules of this network namespace, in
// order; the first that matches decides (SD_CMD_RULE_GET, _ADD, _DEL,
// _FLUSH).  Changing them needs CAP_NET_ADMIN.
#include <linux/sd.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "addr.hpp"
#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

constexpr std::uint64_t U32_MAX = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t PORT_MAX = 65535;

struct DirName {
	std::string_view name;
	std::uint8_t bit;
};
constexpr DirName dir_names[] = {
	{"connect", SD_DIR_CONNECT},
	{"accept", SD_DIR_ACCEPT},
	{"bind", SD_DIR_BIND},
};

std::vector<std::string> dir_words(std::uint8_t mask)
{
	std::vector<std::string> words;
	for (const DirName &d : dir_names)
		if (mask & d.bit)
			words.emplace_back(d.name);
	for (unsigned bit = 0; bit < 8; bit++)
		if (mask & ~SD_DIR_ALL & (1U << bit))
			words.push_back("dir_bit_" + std::to_string(bit));
	return words;
}

std::string action_name(std::uint8_t action)
{
	switch (action) {
	case SD_ACTION_ALLOW: return "allow";
	case SD_ACTION_DENY: return "deny";
	case SD_ACTION_TCP: return "tcp";
	default: return "action_" + std::to_string(action);
	}
}

std::string range_text(const std::optional<std::uint32_t> &lo, const std::optional<std::uint32_t> &hi)
{
	if (!lo && !hi)
		return "*";
	const std::string a = lo ? std::to_string(*lo) : "0";
	const std::string b = hi ? std::to_string(*hi) : std::to_string(U32_MAX);
	return a == b ? a : a + "-" + b;
}

// The address part of a match, in the address's own family: an IPv4
// prefix P travels as ::ffff:a.b.c.d/(P + 96).
struct ShownPrefix {
	std::string addr;
	unsigned len;
	bool host;
	bool v4;
};

ShownPrefix shown(const AddrMatch &m)
{
	const In6 a = m.addr.value_or(In6{});
	const unsigned len = m.prefix.value_or(128);
	const bool v4 = is_v4_mapped(a) && len >= 96;
	return {format_addr(a, v4), v4 ? len - 96 : len, len == 128, v4};
}

std::string match_text(const AddrMatch &m)
{
	if (m.any())
		return "*";
	std::string s = "*";
	if (m.addr || m.prefix) {
		const ShownPrefix p = shown(m);
		s = p.v4 ? p.addr : "[" + p.addr + "]";
		if (!p.host)
			s += "/" + std::to_string(p.len);
	}
	s += ':';
	if (!m.port_min && !m.port_max)
		s += '*';
	else if (m.port_min.value_or(0) == m.port_max.value_or(PORT_MAX))
		s += std::to_string(m.port_min.value_or(0));
	else
		s += std::to_string(m.port_min.value_or(0)) + "-" +
		     std::to_string(m.port_max.value_or(PORT_MAX));
	return s;
}

void print_match(Printer &out, const Key &text, std::string_view side, const AddrMatch &m)
{
	out.field(text, match_text(m));
	if (m.any())
		return;
	const std::string n(side);
	out.field(Key::json_only(n), match_text(m));
	if (m.addr || m.prefix) {
		const ShownPrefix p = shown(m);
		out.field(Key::json_only(n + "_addr"), p.addr);
		out.field(Key::json_only(n + "_prefix"), std::uint64_t{p.len});
	}
	if (m.port_min)
		out.field(Key::json_only(n + "_port_min"), *m.port_min);
	if (m.port_max)
		out.field(Key::json_only(n + "_port_max"), *m.port_max);
}

constexpr Key k_pos{"position", "#", Key::RIGHT};
constexpr Key k_id{"id", "Id", Key::RIGHT};
constexpr Key k_action{"action", "Action"};
constexpr Key k_dir{"dir", "Dir"};
constexpr Key k_uid = Key::text_only("UID");
constexpr Key k_gid = Key::text_only("GID");
constexpr Key k_local = Key::text_only("Local");
constexpr Key k_remote = Key::text_only("Remote");
constexpr Key k_hits{"hits", "Hits", Key::RIGHT};
constexpr Key k_comment{"comment", "Comment"};

constexpr Key columns[] = {k_pos, k_id, k_action, k_dir, k_uid, k_gid,
			   k_local, k_remote, k_hits, k_comment};

int show(const Options &opt, Args args)
{
	no_args(rules_object, "show", args);
	const std::vector<Rule> rules = Netlink().rules();

	Printer out(opt.json);
	out.begin_list(columns);
	std::uint32_t pos = 0;
	for (const Rule &r : rules) {
		out.begin_row();
		out.field(k_pos, r.position.value_or(pos++));
		out.field(k_id, r.id);
		out.field(k_action, action_name(r.action));
		const std::vector<std::string> dirs = dir_words(r.dir);
		if (out.json() || r.dir != SD_DIR_ALL)
			out.field(k_dir, dirs, ",");
		else
			out.field(k_dir, "all");
		out.field(k_uid, range_text(r.uid_min, r.uid_max));
		if (r.uid_min)
			out.field(Key::json_only("uid_min"), *r.uid_min);
		if (r.uid_max)
			out.field(Key::json_only("uid_max"), *r.uid_max);
		out.field(k_gid, range_text(r.gid_min, r.gid_max));
		if (r.gid_min)
			out.field(Key::json_only("gid_min"), *r.gid_min);
		if (r.gid_max)
			out.field(Key::json_only("gid_max"), *r.gid_max);
		print_match(out, k_local, "local", r.local);
		print_match(out, k_remote, "remote", r.remote);
		out.field(k_hits, r.hits);
		if (r.comment)
			out.field(k_comment, *r.comment);
		out.end_row();
	}
	out.end_list();
	return 0;
}

std::uint8_t parse_dirs(std::string_view word)
{
	std::uint8_t mask = 0;
	std::size_t start = 0;
	while (start <= word.size()) {
		const std::size_t comma = std::min(word.find(',', start), word.size());
		const std::string_view w = word.substr(start, comma - start);
		start = comma + 1;
		if (w == "all") {
			mask |= SD_DIR_ALL;
			continue;
		}
		bool known = false;
		for (const DirName &d : dir_names) {
			if (d.name == w) {
				mask |= d.bit;
				known = true;
			}
		}
		if (!known)
			usage_error(rules_object, "bad direction '" + std::string(w) +
							  "' (connect, accept, bind or all)");
	}
	return mask;
}

void parse_addr_into(AddrMatch &m, std::string_view word)
{
	const std::optional<Prefix> p = parse_prefix(word);
	if (!p)
		usage_error(rules_object, "bad address '" + std::string(word) + "' (ADDR[/PREFIX], IPv4 or IPv6)");
	m.addr = p->addr;
	m.prefix = p->len;
}

void parse_ports_into(AddrMatch &m, std::string_view what, std::string_view word)
{
	const auto [lo, hi] = parse_range(rules_object, what, word, PORT_MAX);
	m.port_min = static_cast<std::uint16_t>(lo);
	m.port_max = static_cast<std::uint16_t>(hi);
}

int add(const Options &opt, Args args)
{
	Rule rule;
	if (args.empty())
		usage_error(rules_object, "rules add needs an action: allow, deny or tcp");
	if (args[0] == "allow")
		rule.action = SD_ACTION_ALLOW;
	else if (args[0] == "deny")
		rule.action = SD_ACTION_DENY;
	else if (args[0] == "tcp")
		rule.action = SD_ACTION_TCP;
	else
		usage_error(rules_object,
			    "bad action '" + std::string(args[0]) + "' (allow, deny or tcp)");
	// A tcp rule is a connect rule (the only direction it may have).
	rule.dir = rule.action == SD_ACTION_TCP ? SD_DIR_CONNECT : SD_DIR_ALL;

	std::vector<std::string_view> seen;
	for (std::size_t i = 1; i < args.size(); i += 2) {
		const std::string_view kw = args[i];
		if (i + 1 >= args.size())
			usage_error(rules_object, "'" + std::string(kw) + "' needs a value");
		const std::string_view val = args[i + 1];
		for (const std::string_view s : seen)
			if (s == kw)
				usage_error(rules_object, "'" + std::string(kw) + "' given twice");
		seen.push_back(kw);

		if (kw == "dir") {
			rule.dir = parse_dirs(val);
		} else if (kw == "uid") {
			const auto [lo, hi] = parse_range(rules_object, "uid", val, U32_MAX);
			rule.uid_min = static_cast<std::uint32_t>(lo);
			rule.uid_max = static_cast<std::uint32_t>(hi);
		} else if (kw == "gid") {
			const auto [lo, hi] = parse_range(rules_object, "gid", val, U32_MAX);
			rule.gid_min = static_cast<std::uint32_t>(lo);
			rule.gid_max = static_cast<std::uint32_t>(hi);
		} else if (kw == "local") {
			parse_addr_into(rule.local, val);
		} else if (kw == "lport") {
			parse_ports_into(rule.local, "port", val);
		} else if (kw == "remote") {
			parse_addr_into(rule.remote, val);
		} else if (kw == "rport") {
			parse_ports_into(rule.remote, "port", val);
		} else if (kw == "position") {
			rule.position = static_cast<std::uint32_t>(parse_number(rules_object, "position", val, U32_MAX));
		} else if (kw == "comment") {
			rule.comment = std::string(val);
		} else {
			usage_error(rules_object, "unknown rule keyword '" + std::string(kw) + "'");
		}
	}

	const std::uint32_t id = Netlink().rule_add(rule);
	Printer out(opt.json);
	out.field(Key("id", "id", Key::BARE), id);
	return 0;
}

int del(const Options &, Args args)
{
	if (args.size() != 1)
		usage_error(rules_object, "rules del takes one rule id");
	const auto id = static_cast<std::uint32_t>(parse_number(rules_object, "rule id", args[0], U32_MAX));
	try {
		Netlink().rule_del(id);
	} catch (const KernelError &e) {
		if (e.err() == ENOENT)
			throw Error("rules del: no rule with id " + std::to_string(id));
		throw;
	}
	return 0;
}

int flush(const Options &, Args args)
{
	no_args(rules_object, "flush", args);
	Netlink().rule_flush();
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "the rules in order (the first that matches decides)"},
	{"add", add,
	 "allow|deny|tcp [dir connect,accept,bind|all] [uid N[-M]] [gid N[-M]]\n"
	 "                  [local ADDR[/PREFIX]] [lport N[-M]] [remote ADDR[/PREFIX]] [rport N[-M]]\n"
	 "                  [position N] [comment TEXT]",
	 "add a rule (at the end, or before the rule at 0-based position N); prints its id"},
	{"del", del, "ID", "delete the rule with this id"},
	{"flush", flush, "", "delete every rule"},
};

} // namespace

const Object rules_object = {"rules", verbs, "access-control rules"};

} // namespace sdctl
