// SPDX-License-Identifier: GPL-2.0
//
// The generic netlink family "sd" (see <linux/sd.h> and
// Documentation/netlink.rst) through libnl-3.
//
// Every request goes through talk(): build the message, send it with
// NLM_F_ACK, then read until the ACK (a do request) or NLMSG_DONE (a dump,
// however many parts it has), collecting the kernel's extended ACK message
// when it refuses.
#include "netlink.hpp"

#include <linux/sd.h>

#include <netlink/attr.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/family.h>
#include <netlink/genl/genl.h>
#include <netlink/handlers.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

namespace sdctl {
namespace {

constexpr const char *family = SD_GENL_NAME;

// How many times a dump the kernel marked NLM_F_DUMP_INTR (the list
// changed under it) is tried before sdctl prints it with a warning.
constexpr int DUMP_TRIES = 3;

struct CacheFree {
	void operator()(nl_cache *c) const noexcept { nl_cache_free(c); }
};

struct FamilyPut {
	void operator()(genl_family *f) const noexcept { genl_family_put(f); }
};

struct MsgFree {
	void operator()(nl_msg *m) const noexcept { nlmsg_free(m); }
};

struct CbPut {
	void operator()(nl_cb *c) const noexcept { nl_cb_put(c); }
};

[[noreturn]] void fail(const std::string &what, int nlerr)
{
	throw Error(what + ": " + nl_geterror(nlerr));
}

[[noreturn]] void not_loaded()
{
	throw Error(std::string("the af_sd module is not loaded (generic netlink family \"") + family +
		    "\" not found)");
}

// What each command is called in messages.
const char *command_name(std::uint8_t cmd)
{
	switch (cmd) {
	case SD_CMD_SOCK_GET: return "sockets";
	case SD_CMD_LISTENER_GET: return "listeners";
	case SD_CMD_RULE_GET: return "rules show";
	case SD_CMD_RULE_ADD: return "rules add";
	case SD_CMD_RULE_DEL: return "rules del";
	case SD_CMD_RULE_FLUSH: return "rules flush";
	case SD_CMD_STATS_GET: return "stats";
	case SD_CMD_KEY_SET: return "key set";
	case SD_CMD_KEY_DEL: return "key clear";
	case SD_CMD_KEY_GET: return "key show";
	default: return "netlink";
	}
}

bool mutating(std::uint8_t cmd)
{
	return cmd == SD_CMD_RULE_ADD || cmd == SD_CMD_RULE_DEL || cmd == SD_CMD_RULE_FLUSH;
}

bool key_command(std::uint8_t cmd)
{
	return cmd == SD_CMD_KEY_SET || cmd == SD_CMD_KEY_DEL || cmd == SD_CMD_KEY_GET;
}

// Attributes sdctl reads from the kernel.  libnl checks the minimum
// length of each typed one; the rest is checked where it is read.
// Attribute types above the maximum (a newer kernel) are ignored.
nla_policy attr_policy[SD_A_MAX + 1];
nla_policy addr_policy[SD_A_ADDR_MAX + 1];

void init_policies()
{
	static bool done;
	if (done)
		return;
	done = true;
	for (const int a : {SD_A_SOCK_STATE, SD_A_SOCK_TRANSPORT, SD_A_SOCK_FALLBACK, SD_A_RULE_ACTION,
			    SD_A_RULE_DIR})
		attr_policy[a].type = NLA_U8;
	attr_policy[SD_A_SOCK_FAMILY].type = NLA_U16;
	for (const int a : {SD_A_SOCK_UID, SD_A_SOCK_PID, SD_A_SOCK_TX_FILL, SD_A_SOCK_RX_FILL,
			    SD_A_SOCK_TX_SIZE, SD_A_SOCK_RX_SIZE, SD_A_SOCK_TX_PAGES,
			    SD_A_SOCK_RX_PAGES, SD_A_LISTEN_BACKLOG,
			    SD_A_LISTEN_QUEUED, SD_A_LISTEN_GROUP, SD_A_RULE_ID, SD_A_RULE_POSITION,
			    SD_A_RULE_UID_MIN, SD_A_RULE_UID_MAX, SD_A_RULE_GID_MIN, SD_A_RULE_GID_MAX})
		attr_policy[a].type = NLA_U32;
	for (const int a : {SD_A_SOCK_INODE, SD_A_SOCK_TX_BYTES, SD_A_SOCK_RX_BYTES, SD_A_SOCK_TX_MSGS,
			    SD_A_SOCK_RX_MSGS, SD_A_RULE_HITS, SD_A_FEATURES})
		attr_policy[a].type = NLA_U64;
	for (const int a : {SD_A_SOCK_LOCAL, SD_A_SOCK_PEER, SD_A_RULE_LOCAL, SD_A_RULE_REMOTE,
			    SD_A_STATS})
		attr_policy[a].type = NLA_NESTED;
	attr_policy[SD_A_MODULE_VERSION].type = NLA_STRING;
	addr_policy[SD_A_ADDR_IN6].minlen = 16;
	addr_policy[SD_A_ADDR_PORT].type = NLA_U16;
	addr_policy[SD_A_ADDR_PREFIX].type = NLA_U8;
	addr_policy[SD_A_ADDR_PORT_MIN].type = NLA_U16;
	addr_policy[SD_A_ADDR_PORT_MAX].type = NLA_U16;
}

// A reply the kernel sent that sdctl cannot read.
class Malformed : public std::runtime_error {
	using std::runtime_error::runtime_error;
};

using Attrs = nlattr *[SD_A_MAX + 1];
using AddrAttrs = nlattr *[SD_A_ADDR_MAX + 1];

void parse_addr(AddrAttrs tb, nlattr *nest)
{
	if (nla_parse_nested(tb, SD_A_ADDR_MAX, nest, addr_policy) < 0)
		throw Malformed("bad address nest");
}

In6 get_in6(nlattr *a)
{
	In6 addr;
	if (nla_len(a) != static_cast<int>(addr.size()))
		throw Malformed("address of the wrong length");
	std::memcpy(addr.data(), nla_data(a), addr.size());
	return addr;
}

std::optional<Endpoint> get_endpoint(nlattr *nest)
{
	if (!nest)
		return std::nullopt;
	AddrAttrs tb;
	parse_addr(tb, nest);
	Endpoint ep;
	if (tb[SD_A_ADDR_IN6])
		ep.addr = get_in6(tb[SD_A_ADDR_IN6]);
	if (tb[SD_A_ADDR_PORT])
		ep.port = nla_get_u16(tb[SD_A_ADDR_PORT]);
	return ep;
}

AddrMatch get_match(nlattr *nest)
{
	AddrMatch m;
	if (!nest)
		return m;
	AddrAttrs tb;
	parse_addr(tb, nest);
	if (tb[SD_A_ADDR_IN6])
		m.addr = get_in6(tb[SD_A_ADDR_IN6]);
	if (tb[SD_A_ADDR_PREFIX])
		m.prefix = nla_get_u8(tb[SD_A_ADDR_PREFIX]);
	if (tb[SD_A_ADDR_PORT_MIN])
		m.port_min = nla_get_u16(tb[SD_A_ADDR_PORT_MIN]);
	if (tb[SD_A_ADDR_PORT_MAX])
		m.port_max = nla_get_u16(tb[SD_A_ADDR_PORT_MAX]);
	return m;
}

template <typename T, typename Get>
std::optional<T> opt(nlattr *a, Get get)
{
	return a ? std::optional<T>(static_cast<T>(get(a))) : std::nullopt;
}

std::uint8_t u8(nlattr *a) { return a ? nla_get_u8(a) : 0; }
std::uint16_t u16(nlattr *a) { return a ? nla_get_u16(a) : 0; }
std::uint32_t u32(nlattr *a) { return a ? nla_get_u32(a) : 0; }
std::uint64_t u64(nlattr *a) { return a ? nla_get_u64(a) : 0; }

std::optional<std::uint32_t> opt_u32(nlattr *a)
{
	return a ? std::optional<std::uint32_t>(nla_get_u32(a)) : std::nullopt;
}

// A string attribute, up to its first NUL.
std::string get_string(nlattr *a)
{
	const auto *s = static_cast<const char *>(nla_data(a));
	return {s, strnlen(s, static_cast<std::size_t>(nla_len(a)))};
}

// Message-building helpers: libnl returns a negative code when the
// message is full, which a request of sdctl's never is.
void check_put(int err)
{
	if (err < 0)
		fail("building a netlink message", err);
}

void put_match(nl_msg *msg, int type, const AddrMatch &m)
{
	if (m.any())
		return;
	nlattr *nest = nla_nest_start(msg, type);
	if (!nest)
		fail("building a netlink message", -NLE_NOMEM);
	if (m.addr)
		check_put(nla_put(msg, SD_A_ADDR_IN6, static_cast<int>(m.addr->size()), m.addr->data()));
	if (m.prefix)
		check_put(nla_put_u8(msg, SD_A_ADDR_PREFIX, *m.prefix));
	if (m.port_min)
		check_put(nla_put_u16(msg, SD_A_ADDR_PORT_MIN, *m.port_min));
	if (m.port_max)
		check_put(nla_put_u16(msg, SD_A_ADDR_PORT_MAX, *m.port_max));
	check_put(nla_nest_end(msg, nest));
}

void put_u32(nl_msg *msg, int type, const std::optional<std::uint32_t> &v)
{
	if (v)
		check_put(nla_put_u32(msg, type, *v));
}

// Names of the attributes the kernel may report missing.
std::string attr_name(unsigned type)
{
	switch (type) {
	case SD_A_RULE_ID: return "SD_A_RULE_ID";
	case SD_A_RULE_ACTION: return "SD_A_RULE_ACTION";
	case SD_A_RULE_DIR: return "SD_A_RULE_DIR";
	case SD_A_KEY: return "SD_A_KEY";
	default: return "attribute " + std::to_string(type);
	}
}

// The extended ACK message of an NLMSG_ERROR or NLMSG_DONE message whose
// TLVs start payload bytes into its data.
std::string extack_of(const nlmsghdr *h, std::size_t payload)
{
	if (!(h->nlmsg_flags & NLM_F_ACK_TLVS))
		return {};
	const std::size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(payload);
	if (h->nlmsg_len <= off)
		return {};
	nlattr *tb[NLMSGERR_ATTR_MAX + 1];
	auto *head = reinterpret_cast<nlattr *>(const_cast<char *>(reinterpret_cast<const char *>(h) + off));
	if (nla_parse(tb, NLMSGERR_ATTR_MAX, head, static_cast<int>(h->nlmsg_len - off), nullptr) < 0)
		return {};
	if (tb[NLMSGERR_ATTR_MSG] && nla_len(tb[NLMSGERR_ATTR_MSG]) > 0) {
		std::string s = get_string(tb[NLMSGERR_ATTR_MSG]);
		if (!s.empty())
			return s;
	}
	if (tb[NLMSGERR_ATTR_MISS_TYPE] && nla_len(tb[NLMSGERR_ATTR_MISS_TYPE]) >= 4)
		return "missing " + attr_name(nla_get_u32(tb[NLMSGERR_ATTR_MISS_TYPE]));
	return {};
}

} // namespace

// One request and what came back.
struct Netlink::Exchange {
	std::uint8_t cmd = 0;
	bool dump = false;
	std::function<void(nl_msg *)> fill;	// adds the request's attributes
	std::function<void(nlattr **)> each;	// takes one reply message
	std::function<void()> reset;		// forgets the replies (a retried dump)

	bool done = false;
	bool interrupted = false;
	int err = 0;				// errno from the kernel
	std::string extack;
	std::string malformed;			// the first unreadable reply

	static int on_valid(nl_msg *msg, void *arg)
	{
		auto *x = static_cast<Exchange *>(arg);
		Attrs tb;
		if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, SD_A_MAX, attr_policy) < 0) {
			if (x->malformed.empty())
				x->malformed = "attributes fail validation";
			return NL_SKIP;
		}
		try {
			if (x->each)
				x->each(tb);
		} catch (const Malformed &e) {
			if (x->malformed.empty())
				x->malformed = e.what();
		}
		return NL_OK;
	}

	static int on_finish(nl_msg *msg, void *arg)
	{
		auto *x = static_cast<Exchange *>(arg);
		const nlmsghdr *h = nlmsg_hdr(msg);
		x->done = true;
		// A dump that failed part way ends with the negative errno in
		// NLMSG_DONE.
		int code = 0;
		if (h->nlmsg_len >= NLMSG_HDRLEN + sizeof(code))
			std::memcpy(&code, nlmsg_data(h), sizeof(code));
		if (code < 0) {
			x->err = -code;
			x->extack = extack_of(h, sizeof(code));
		}
		return NL_STOP;
	}

	static int on_ack(nl_msg *, void *arg)
	{
		static_cast<Exchange *>(arg)->done = true;
		return NL_STOP;
	}

	static int on_dump_intr(nl_msg *, void *arg)
	{
		static_cast<Exchange *>(arg)->interrupted = true;
		return NL_OK;
	}

	static int on_error(sockaddr_nl *, nlmsgerr *e, void *arg)
	{
		auto *x = static_cast<Exchange *>(arg);
		const auto *h = reinterpret_cast<const nlmsghdr *>(reinterpret_cast<const char *>(e) -
								    NLMSG_HDRLEN);
		x->done = true;
		x->err = -e->error;
		std::size_t payload = sizeof(*e);
		if (!(h->nlmsg_flags & NLM_F_CAPPED) && e->msg.nlmsg_len >= NLMSG_HDRLEN)
			payload += NLMSG_ALIGN(e->msg.nlmsg_len - NLMSG_HDRLEN);
		x->extack = extack_of(h, payload);
		return NL_STOP;
	}
};

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
	init_policies();
	if (!sock_)
		throw Error("cannot allocate a netlink socket");
	if (const int err = genl_connect(sock_.get()))
		fail("generic netlink", err);
	// The kernel's reason for a refusal, when it gives one.  Kernels
	// without extended ACKs refuse the option; sdctl then prints only
	// the errno.
	const int one = 1;
	(void)setsockopt(nl_socket_get_fd(sock_.get()), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	// Let libnl size its receive buffer to each dump part.
	nl_socket_enable_msg_peek(sock_.get());

	// Asking for the family by name loads af_sd.ko when it is installed
	// and not loaded (MODULE_ALIAS_GENL_FAMILY); the list of families
	// then gives its version.
	const int id = genl_ctrl_resolve(sock_.get(), family);
	if (id == -NLE_OBJ_NOTFOUND)
		not_loaded();
	if (id < 0)
		fail("generic netlink family \"" + std::string(family) + "\"", id);

	nl_cache *raw = nullptr;
	if (const int err = genl_ctrl_alloc_cache(sock_.get(), &raw))
		fail("generic netlink families", err);
	const std::unique_ptr<nl_cache, CacheFree> cache(raw);

	const std::unique_ptr<genl_family, FamilyPut> fam(genl_ctrl_search_by_name(cache.get(), family));
	if (!fam)
		not_loaded();
	id_ = genl_family_get_id(fam.get());
	version_ = genl_family_get_version(fam.get());
}

void Netlink::talk(Exchange &x)
{
	const std::string what = command_name(x.cmd);
	for (int attempt = 1;; attempt++) {
		x.done = x.interrupted = false;
		x.err = 0;
		x.extack.clear();
		x.malformed.clear();
		if (x.reset)
			x.reset();

		const std::unique_ptr<nl_msg, MsgFree> msg(nlmsg_alloc());
		if (!msg)
			fail(what, -NLE_NOMEM);
		if (!genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, static_cast<int>(id_), 0,
				 x.dump ? NLM_F_DUMP : 0, x.cmd, SD_GENL_VERSION))
			fail(what, -NLE_NOMEM);
		if (x.fill)
			x.fill(msg.get());
		if (const int err = nl_send_auto(sock_.get(), msg.get()); err < 0)
			fail(what, err);

		const std::unique_ptr<nl_cb, CbPut> cb(nl_cb_alloc(NL_CB_DEFAULT));
		if (!cb)
			fail(what, -NLE_NOMEM);
		nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, Exchange::on_valid, &x);
		nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, Exchange::on_finish, &x);
		nl_cb_set(cb.get(), NL_CB_ACK, NL_CB_CUSTOM, Exchange::on_ack, &x);
		nl_cb_set(cb.get(), NL_CB_DUMP_INTR, NL_CB_CUSTOM, Exchange::on_dump_intr, &x);
		nl_cb_err(cb.get(), NL_CB_CUSTOM, Exchange::on_error, &x);

		while (!x.done) {
			const int err = nl_recvmsgs(sock_.get(), cb.get());
			if (err < 0 && !x.err)
				fail(what, err);
		}

		if (x.err == EPERM && mutating(x.cmd))
			throw KernelError("permission denied: changing rules needs CAP_NET_ADMIN", x.err,
					  x.extack);
		if (x.err == EPERM && key_command(x.cmd))
			throw KernelError("permission denied: the fabric key needs CAP_NET_ADMIN", x.err,
					  x.extack);
		if (x.err == ENOENT && x.cmd == SD_CMD_KEY_DEL)
			throw KernelError("key clear: no key is set", x.err, x.extack);
		if (x.err) {
			std::string m = what + ": " + std::strerror(x.err);
			if (!x.extack.empty())
				m += " (kernel: " + x.extack + ")";
			throw KernelError(m, x.err, x.extack);
		}
		if (!x.malformed.empty())
			throw Error(what + ": malformed reply from the kernel (" + x.malformed + ")");
		if (x.interrupted && attempt < DUMP_TRIES)
			continue;
		if (x.interrupted)
			std::fprintf(stderr, "sdctl: warning: %s changed during the dump; "
				     "the list may be inconsistent\n", what.c_str());
		return;
	}
}

std::vector<SockInfo> Netlink::sockets()
{
	std::vector<SockInfo> out;
	Exchange x;
	x.cmd = SD_CMD_SOCK_GET;
	x.dump = true;
	x.reset = [&] { out.clear(); };
	x.each = [&](nlattr **tb) {
		SockInfo s;
		s.inode = u64(tb[SD_A_SOCK_INODE]);
		s.state = u8(tb[SD_A_SOCK_STATE]);
		s.family = u16(tb[SD_A_SOCK_FAMILY]);
		s.local = get_endpoint(tb[SD_A_SOCK_LOCAL]);
		s.peer = get_endpoint(tb[SD_A_SOCK_PEER]);
		s.uid = opt_u32(tb[SD_A_SOCK_UID]);
		s.pid = opt_u32(tb[SD_A_SOCK_PID]);
		s.transport = u8(tb[SD_A_SOCK_TRANSPORT]);
		s.fallback = opt<std::uint8_t>(tb[SD_A_SOCK_FALLBACK], nla_get_u8);
		s.tx_bytes = u64(tb[SD_A_SOCK_TX_BYTES]);
		s.rx_bytes = u64(tb[SD_A_SOCK_RX_BYTES]);
		s.tx_msgs = u64(tb[SD_A_SOCK_TX_MSGS]);
		s.rx_msgs = u64(tb[SD_A_SOCK_RX_MSGS]);
		s.tx_fill = u32(tb[SD_A_SOCK_TX_FILL]);
		s.rx_fill = u32(tb[SD_A_SOCK_RX_FILL]);
		s.tx_size = u32(tb[SD_A_SOCK_TX_SIZE]);
		s.rx_size = u32(tb[SD_A_SOCK_RX_SIZE]);
		s.tx_pages = u32(tb[SD_A_SOCK_TX_PAGES]);
		s.rx_pages = u32(tb[SD_A_SOCK_RX_PAGES]);
		out.push_back(std::move(s));
	};
	talk(x);
	return out;
}

std::vector<ListenerInfo> Netlink::listeners()
{
	std::vector<ListenerInfo> out;
	Exchange x;
	x.cmd = SD_CMD_LISTENER_GET;
	x.dump = true;
	x.reset = [&] { out.clear(); };
	x.each = [&](nlattr **tb) {
		ListenerInfo l;
		l.inode = u64(tb[SD_A_SOCK_INODE]);
		l.family = u16(tb[SD_A_SOCK_FAMILY]);
		l.local = get_endpoint(tb[SD_A_SOCK_LOCAL]);
		l.uid = opt_u32(tb[SD_A_SOCK_UID]);
		l.pid = opt_u32(tb[SD_A_SOCK_PID]);
		l.backlog = u32(tb[SD_A_LISTEN_BACKLOG]);
		l.queued = u32(tb[SD_A_LISTEN_QUEUED]);
		l.group = u32(tb[SD_A_LISTEN_GROUP]);
		out.push_back(std::move(l));
	};
	talk(x);
	return out;
}

std::vector<Rule> Netlink::rules()
{
	std::vector<Rule> out;
	Exchange x;
	x.cmd = SD_CMD_RULE_GET;
	x.dump = true;
	x.reset = [&] { out.clear(); };
	x.each = [&](nlattr **tb) {
		Rule r;
		r.id = u32(tb[SD_A_RULE_ID]);
		r.position = opt_u32(tb[SD_A_RULE_POSITION]);
		r.action = u8(tb[SD_A_RULE_ACTION]);
		r.dir = u8(tb[SD_A_RULE_DIR]);
		r.uid_min = opt_u32(tb[SD_A_RULE_UID_MIN]);
		r.uid_max = opt_u32(tb[SD_A_RULE_UID_MAX]);
		r.gid_min = opt_u32(tb[SD_A_RULE_GID_MIN]);
		r.gid_max = opt_u32(tb[SD_A_RULE_GID_MAX]);
		r.local = get_match(tb[SD_A_RULE_LOCAL]);
		r.remote = get_match(tb[SD_A_RULE_REMOTE]);
		r.hits = u64(tb[SD_A_RULE_HITS]);
		if (tb[SD_A_RULE_COMMENT])
			r.comment = get_string(tb[SD_A_RULE_COMMENT]);
		out.push_back(std::move(r));
	};
	talk(x);
	return out;
}

Stats Netlink::stats()
{
	Stats out;
	bool seen = false;
	Exchange x;
	x.cmd = SD_CMD_STATS_GET;
	x.each = [&](nlattr **tb) {
		nlattr *nest = tb[SD_A_STATS];
		if (!nest)
			throw Malformed("no SD_A_STATS");
		seen = true;
		int rem = nla_len(nest);
		for (nlattr *a = static_cast<nlattr *>(nla_data(nest)); nla_ok(a, rem); a = nla_next(a, &rem)) {
			// Type 0 (SD_STAT_UNSPEC) pads the u64 values where
			// the architecture needs it.
			if (nla_type(a) == SD_STAT_UNSPEC)
				continue;
			if (nla_len(a) < 8)
				throw Malformed("counter shorter than u64");
			out.emplace_back(static_cast<unsigned>(nla_type(a)), nla_get_u64(a));
		}
	};
	talk(x);
	if (!seen)
		throw Error("stats: no reply from the kernel");
	return out;
}

std::uint32_t Netlink::rule_add(const Rule &rule)
{
	std::optional<std::uint32_t> id;
	Exchange x;
	x.cmd = SD_CMD_RULE_ADD;
	x.fill = [&](nl_msg *msg) {
		check_put(nla_put_u8(msg, SD_A_RULE_ACTION, rule.action));
		check_put(nla_put_u8(msg, SD_A_RULE_DIR, rule.dir));
		put_u32(msg, SD_A_RULE_POSITION, rule.position);
		put_u32(msg, SD_A_RULE_UID_MIN, rule.uid_min);
		put_u32(msg, SD_A_RULE_UID_MAX, rule.uid_max);
		put_u32(msg, SD_A_RULE_GID_MIN, rule.gid_min);
		put_u32(msg, SD_A_RULE_GID_MAX, rule.gid_max);
		put_match(msg, SD_A_RULE_LOCAL, rule.local);
		put_match(msg, SD_A_RULE_REMOTE, rule.remote);
		if (rule.comment)
			check_put(nla_put_string(msg, SD_A_RULE_COMMENT, rule.comment->c_str()));
	};
	x.each = [&](nlattr **tb) {
		if (tb[SD_A_RULE_ID])
			id = nla_get_u32(tb[SD_A_RULE_ID]);
	};
	talk(x);
	if (!id)
		throw Error("rules add: the kernel's reply has no SD_A_RULE_ID");
	return *id;
}

void Netlink::rule_del(std::uint32_t id)
{
	Exchange x;
	x.cmd = SD_CMD_RULE_DEL;
	x.fill = [&](nl_msg *msg) { check_put(nla_put_u32(msg, SD_A_RULE_ID, id)); };
	talk(x);
}

void Netlink::rule_flush()
{
	Exchange x;
	x.cmd = SD_CMD_RULE_FLUSH;
	talk(x);
}

void Netlink::key_set(const std::vector<std::uint8_t> &key)
{
	Exchange x;
	x.cmd = SD_CMD_KEY_SET;
	x.fill = [&](nl_msg *msg) {
		check_put(nla_put(msg, SD_A_KEY, static_cast<int>(key.size()), key.data()));
	};
	talk(x);
}

void Netlink::key_del()
{
	Exchange x;
	x.cmd = SD_CMD_KEY_DEL;
	talk(x);
}

std::optional<KeyFpr> Netlink::key_fingerprint()
{
	std::optional<KeyFpr> out;
	bool seen = false;
	Exchange x;
	x.cmd = SD_CMD_KEY_GET;
	x.each = [&](nlattr **tb) {
		seen = true;
		if (!tb[SD_A_KEY_FPR])
			return;
		if (nla_len(tb[SD_A_KEY_FPR]) != SD_KEY_FPR_LEN)
			throw Malformed("fingerprint of the wrong length");
		KeyFpr f;
		std::memcpy(f.data(), nla_data(tb[SD_A_KEY_FPR]), f.size());
		out = f;
	};
	talk(x);
	if (!seen)
		throw Error("key show: no reply from the kernel");
	return out;
}

Features Netlink::features()
{
	std::optional<Features> out;
	Exchange x;
	x.cmd = SD_CMD_FEATURES_GET;
	x.each = [&](nlattr **tb) {
		if (!tb[SD_A_MODULE_VERSION] || !tb[SD_A_FEATURES])
			throw Malformed("no SD_A_MODULE_VERSION or SD_A_FEATURES");
		out = Features{nla_get_string(tb[SD_A_MODULE_VERSION]), nla_get_u64(tb[SD_A_FEATURES])};
	};
	talk(x);
	if (!out)
		throw Error("version: no reply from the kernel");
	return *out;
}

} // namespace sdctl
