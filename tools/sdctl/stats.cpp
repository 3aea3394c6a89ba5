// SPDX-License-Identifier: GPL-2.0
//
// sdctl stats: the per-namespace counters of enum sd_stat
// (SD_CMD_STATS_GET), by name: lower case, without the SD_STAT_ prefix.
#include <linux/sd.h>

#include <string>

#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

// Indexed by SD_STAT_*.
constexpr const char *names[] = {
	"unspec",
	"connects",
	"accepts",
	"refused",
	"denied_connect",
	"denied_accept",
	"denied_bind",
	"backlog_full",
	"resets",
	"corrupt",
	"wakeups",
	"takeovers",
	"fallback_no_listener",
	"fallback_peer_no_sd",
	"fallback_no_rdma",
	"fallback_handshake",
	"fallback_policy",
	"fallback_tcp_client",
	"fallback_remote",
	"redirected",
	"zc_sends",
	"zc_pages",
	"zc_remapped",
	"zc_copied",
	"zc_cow",
	"fallback_peer_unknown",
	nullptr, // 26 to 29, 31 to 35 and 38: retired (<linux/sd.h>)
	nullptr,
	nullptr,
	nullptr,
	"fallback_busy",
	nullptr,
	nullptr,
	nullptr,
	nullptr,
	nullptr,
	"zc_pinned",
	"fallback_auth",
	nullptr,
	"fallback_tcp_listener",
	"link_upcalls",
	"link_timeouts",
	"link_via",
	"link_incoming",
	"link_resets",
};
static_assert(std::size(names) == __SD_STAT_MAX, "a name for every SD_STAT_*");

int show(const Options &opt, Args args)
{
	no_args(stats_object, "show", args);
	const Stats stats = Netlink().stats();

	Printer out(opt.json);
	for (const auto &[type, value] : stats) {
		// A counter of a newer module keeps its number; a retired one
		// is not sent, and not shown if an older module sends it.
		if (type < std::size(names) && !names[type])
			continue;
		const std::string name =
			type < std::size(names) ? names[type] : "stat_" + std::to_string(type);
		out.field(Key(name, name, Key::RIGHT), value);
	}
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "the namespace's counters"},
};

} // namespace

const Object stats_object = {"stats", verbs, "counters"};

} // namespace sdctl
