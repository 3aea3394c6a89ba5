// SPDX-License-Identifier: GPL-2.0
#include "netlink.hpp"

#include <netlink/genl/ctrl.h>
#include <netlink/genl/family.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

namespace sdctl {
namespace {

// The generic netlink family of af_sd.ko.  TODO(uapi): take the name from
// <linux/sd.h> once the netlink part of the ABI is there.
constexpr const char *family = "sd";

struct CacheFree {
	void operator()(nl_cache *c) const noexcept { nl_cache_free(c); }
};

struct FamilyPut {
	void operator()(genl_family *f) const noexcept { genl_family_put(f); }
};

[[noreturn]] void fail(const char *what, int err)
{
	throw Error(std::string(what) + ": " + nl_geterror(err));
}

} // namespace

void Netlink::SockFree::operator()(nl_sock *s) const noexcept
{
	nl_socket_free(s);
}

const char *Netlink::family_name() noexcept
{
	return family;
}

Netlink::Netlink() : sock_(nl_socket_alloc())
{
	if (!sock_)
		throw Error("cannot allocate a netlink socket");
	if (const int err = genl_connect(sock_.get()))
		fail("generic netlink", err);

	nl_cache *raw = nullptr;
	if (const int err = genl_ctrl_alloc_cache(sock_.get(), &raw))
		fail("generic netlink families", err);
	const std::unique_ptr<nl_cache, CacheFree> cache(raw);

	const std::unique_ptr<genl_family, FamilyPut> fam(genl_ctrl_search_by_name(cache.get(), family));
	if (!fam)
		throw Error(std::string("the af_sd module is not loaded (generic netlink family \"") +
			    family + "\" not found)");
	id_ = genl_family_get_id(fam.get());
	version_ = genl_family_get_version(fam.get());
}

} // namespace sdctl
