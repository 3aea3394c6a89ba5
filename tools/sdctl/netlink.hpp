// SPDX-License-Identifier: GPL-2.0
//
// All of sdctl's netlink: a generic netlink socket bound to the family "sd"
// of af_sd.ko, and one call per command of the family.  The rest of sdctl
// sees plain structures and never a netlink attribute.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error.hpp"

struct nl_sock;

namespace sdctl {

// An error the kernel answered a request with.  what() is the whole
// message ("rules add: Invalid argument (kernel: ...)"); err() is the
// errno and extack() the kernel's extended ACK message, if any.
class KernelError : public Error {
public:
	KernelError(const std::string &msg, int err, std::string extack)
		: Error(msg), err_(err), extack_(std::move(extack))
	{
	}
	int err() const noexcept { return err_; }
	const std::string &extack() const noexcept { return extack_; }

private:
	int err_;
	std::string extack_;
};

// An IPv6 address (IPv4 as ::ffff:a.b.c.d), network order.
using In6 = std::array<std::uint8_t, 16>;

struct Endpoint {
	In6 addr{};
	std::uint16_t port = 0;
};

// SD_CMD_SOCK_GET: one bound or connected socket.
struct SockInfo {
	std::uint64_t inode = 0;
	std::uint8_t state = 0;		// TCP_* state number
	std::uint16_t family = 0;	// AF_INET or AF_INET6
	std::optional<Endpoint> local;
	std::optional<Endpoint> peer;
	std::optional<std::uint32_t> uid;
	std::optional<std::uint32_t> pid;
	std::uint8_t transport = 0;	// SD_TRANSPORT_*
	std::optional<std::uint8_t> fallback;	// SD_FALLBACK_*
	std::uint64_t tx_bytes = 0, rx_bytes = 0, tx_msgs = 0, rx_msgs = 0;
	std::uint32_t tx_fill = 0, rx_fill = 0, tx_size = 0, rx_size = 0;
	std::uint32_t tx_pages = 0, rx_pages = 0;	/* in memory */
};

// SD_CMD_LISTENER_GET: one listening socket.
struct ListenerInfo {
	std::uint64_t inode = 0;
	std::uint16_t family = 0;
	std::optional<Endpoint> local;
	std::optional<std::uint32_t> uid;
	std::optional<std::uint32_t> pid;
	std::uint32_t backlog = 0, queued = 0, group = 0;
};

// One side of a rule: an address prefix and a port range, each optional
// (absent means any).
struct AddrMatch {
	std::optional<In6> addr;
	std::optional<std::uint8_t> prefix;	// of addr, 0..128
	std::optional<std::uint16_t> port_min;
	std::optional<std::uint16_t> port_max;

	bool any() const noexcept { return !addr && !prefix && !port_min && !port_max; }
};

// SD_CMD_RULE_GET / SD_CMD_RULE_ADD: one access-control rule.  Absent
// match fields mean "any".
struct Rule {
	std::uint32_t id = 0;
	std::optional<std::uint32_t> position;	// add: where to insert
	std::uint8_t action = 0;		// SD_ACTION_*
	std::uint8_t dir = 0;			// mask of SD_DIR_*
	std::optional<std::uint32_t> uid_min, uid_max, gid_min, gid_max;
	AddrMatch local, remote;
	std::uint64_t hits = 0;
	std::optional<std::string> comment;
};

// SD_CMD_KEY_GET: the fingerprint of the fabric key.
using KeyFpr = std::array<std::uint8_t, 8>;

// SD_CMD_FEATURES_GET: the module's version and mask of 1 << SD_FEATURE_*.
struct Features {
	std::string module;
	std::uint64_t mask = 0;
};

// SD_CMD_STATS_GET: (SD_STAT_* number, value), in the kernel's order.
using Stats = std::vector<std::pair<unsigned, std::uint64_t>>;

class Netlink {
public:
	// Connect and resolve the family; throws Error (status 1) if the
	// module is not loaded or netlink fails.
	Netlink();

	unsigned family_id() const noexcept { return id_; }
	unsigned family_version() const noexcept { return version_; }
	static const char *family_name() noexcept;

	// Dumps: every entry, however many parts the kernel sends.
	std::vector<SockInfo> sockets();
	std::vector<ListenerInfo> listeners();
	std::vector<Rule> rules();
	Stats stats();

	// Mutations (CAP_NET_ADMIN).  rule_add returns the new rule's id.
	std::uint32_t rule_add(const Rule &rule);
	void rule_del(std::uint32_t id);
	void rule_flush();

	// The fabric key (CAP_NET_ADMIN, even to look): set, clear (ENOENT
	// when none is set), and its fingerprint (none when no key is set).
	void key_set(const std::vector<std::uint8_t> &key);
	void key_del();
	std::optional<KeyFpr> key_fingerprint();

	// What the loaded module does (any user).
	Features features();

private:
	struct SockFree {
		void operator()(nl_sock *s) const noexcept;
	};
	struct Exchange;
	void talk(Exchange &x);

	std::unique_ptr<nl_sock, SockFree> sock_;
	unsigned id_ = 0;
	unsigned version_ = 0;
};

} // namespace sdctl
