// SPDX-License-Identifier: GPL-2.0
//
// sdctl listeners: every listening AF_SD socket of this network namespace
// (SD_CMD_LISTENER_GET), with its backlog, its queue and the size of its
// SO_REUSEPORT group.
#include <linux/sd.h>

#include <sys/socket.h>

#include <string>

#include "addr.hpp"
#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

constexpr Key k_local = Key::text_only("Local");
constexpr Key k_backlog{"backlog", "Backlog", Key::RIGHT};
constexpr Key k_queued{"queued", "Queued", Key::RIGHT};
constexpr Key k_group{"group", "Group", Key::RIGHT};
constexpr Key k_uid{"uid", "UID", Key::RIGHT};
constexpr Key k_pid{"pid", "PID", Key::RIGHT};
constexpr Key k_inode{"inode", "Inode", Key::RIGHT};

constexpr Key columns[] = {k_local, k_backlog, k_queued, k_group, k_uid, k_pid, k_inode};

int show(const Options &opt, Args args)
{
	no_args(listeners_object, "show", args);
	const std::vector<ListenerInfo> list = Netlink().listeners();

	Printer out(opt.json);
	out.begin_list(columns);
	for (const ListenerInfo &l : list) {
		out.begin_row();
		if (l.family)
			out.field(Key::json_only("family"), l.family == AF_INET6 ? "inet6"
							    : l.family == AF_INET ? "inet"
							    : "family_" + std::to_string(l.family));
		print_endpoint(out, "local", k_local, l.local, l.family);
		out.field(k_backlog, l.backlog);
		out.field(k_queued, l.queued);
		out.field(k_group, l.group);
		if (l.uid)
			out.field(k_uid, *l.uid);
		if (l.pid)
			out.field(k_pid, *l.pid);
		out.field(k_inode, l.inode);
		out.end_row();
	}
	out.end_list();
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "listening sockets: backlog, queued connections, SO_REUSEPORT group size"},
};

} // namespace

const Object listeners_object = {"listeners", verbs, "listening AF_SD sockets"};

} // namespace sdctl
