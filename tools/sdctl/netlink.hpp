// SPDX-License-Identifier: GPL-2.0
//
// All of sdctl's netlink: a generic netlink socket bound to the family of
// af_sd.ko.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

struct nl_sock;

namespace sdctl {

// A failure that ends sdctl: what() goes to stderr after "sdctl: ".
class Error : public std::runtime_error {
public:
	explicit Error(const std::string &msg, int status = 1)
		: std::runtime_error(msg), status_(status)
	{
	}
	int status() const noexcept { return status_; }

private:
	int status_;
};

class Netlink {
public:
	// Connect and resolve the family; throws Error (status 1) if the
	// module is not loaded or netlink fails.
	Netlink();

	unsigned family_id() const noexcept { return id_; }
	unsigned family_version() const noexcept { return version_; }
	static const char *family_name() noexcept;

private:
	struct SockFree {
		void operator()(nl_sock *s) const noexcept;
	};
	std::unique_ptr<nl_sock, SockFree> sock_;
	unsigned id_ = 0;
	unsigned version_ = 0;
};

} // namespace sdctl
