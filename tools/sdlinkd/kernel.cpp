// SPDX-License-Identifier: GPL-2.0
//
// The generic netlink family "sd_link" (kernel.hpp).  Requests are built
// with libnl; datagrams are read with recvmsg() into one buffer, so that
// the sender's address is checked and nothing is allocated per message.
#include "kernel.hpp"

#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/sd.h>
#include <linux/sd_link.h>

#include <netlink/attr.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <sodium.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "log.hpp"

namespace sdlinkd {
namespace {

constexpr int A_MAX = SD_LINK_A_MAX;

// The socket's receive buffer: room for this many upcalls of a burst of
// connects before the kernel drops some (it then gives those connects TCP
// at once, reason remote).  An upcall is under 200 bytes, but each takes
// an skb's truesize of the buffer, about 1 KiB.
constexpr int RCVBUF = 1 << 20;

template <typename T>
bool exact(nlattr *a, T &out) noexcept
{
	if (!a || nla_len(a) != static_cast<int>(sizeof(T)))
		return false;
	std::memcpy(&out, nla_data(a), sizeof(T));
	return true;
}

bool parse_addr(nlattr *nest, sdlink::SockAddr &out) noexcept
{
	if (!nest)
		return false;
	nlattr *tb[SD_A_ADDR_MAX + 1] = {};
	if (nla_parse_nested(tb, SD_A_ADDR_MAX, nest, nullptr) < 0)
		return false;
	nlattr *in6 = tb[SD_A_ADDR_IN6];
	if (!in6 || nla_len(in6) != static_cast<int>(out.addr.size()))
		return false;
	std::memcpy(out.addr.data(), nla_data(in6), out.addr.size());
	return exact(tb[SD_A_ADDR_PORT], out.port);
}

// The extended ACK message of an NLMSG_ERROR, if any (NETLINK_CAP_ACK is
// set: the request is not echoed).
std::string extack_of(const nlmsghdr *h)
{
	if (!(h->nlmsg_flags & NLM_F_ACK_TLVS))
		return {};
	const std::size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nlmsgerr));
	if (h->nlmsg_len <= off)
		return {};
	nlattr *tb[NLMSGERR_ATTR_MAX + 1] = {};
	auto *head = reinterpret_cast<nlattr *>(
		const_cast<char *>(reinterpret_cast<const char *>(h) + off));
	if (nla_parse(tb, NLMSGERR_ATTR_MAX, head, static_cast<int>(h->nlmsg_len - off), nullptr) < 0)
		return {};
	nlattr *m = tb[NLMSGERR_ATTR_MSG];
	if (!m || nla_len(m) <= 0)
		return {};
	const auto *s = static_cast<const char *>(nla_data(m));
	return {s, strnlen(s, static_cast<std::size_t>(nla_len(m)))};
}

// A ring size the kernel can make (SD_LINK_CMD_INCOMING's range).
bool ring_size_ok(std::uint32_t v) noexcept
{
	return v >= SD_RING_MIN_SIZE && v <= SD_RING_MAX_SIZE && !(v & (v - 1));
}

} // namespace

UpcallParse parse_upcall(nlmsghdr *h, int family_id, Upcall &out) noexcept
{
	if (h->nlmsg_type != family_id || !genlmsg_valid_hdr(h, 0))
		return UpcallParse::OTHER;
	const auto *g = static_cast<const genlmsghdr *>(nlmsg_data(h));
	if (g->cmd != SD_LINK_CMD_CONNECT)
		return UpcallParse::OTHER;
	out = Upcall{};
	nlattr *tb[A_MAX + 1] = {};
	if (genlmsg_parse(h, 0, tb, A_MAX, nullptr) < 0)
		return UpcallParse::NO_ID;
	if (!exact(tb[SD_LINK_A_ID], out.id))
		return UpcallParse::NO_ID;
	if (!parse_addr(tb[SD_LINK_A_LOCAL], out.local) || !parse_addr(tb[SD_LINK_A_REMOTE], out.remote) ||
	    !exact(tb[SD_LINK_A_UID], out.uid) || !exact(tb[SD_LINK_A_GID], out.gid))
		return UpcallParse::BAD;
	if (!tb[SD_LINK_A_TX_SIZE] && !tb[SD_LINK_A_RX_SIZE])
		return UpcallParse::OK;		// an older module's
	if (!exact(tb[SD_LINK_A_TX_SIZE], out.tx_size) || !exact(tb[SD_LINK_A_RX_SIZE], out.rx_size) ||
	    !ring_size_ok(out.tx_size) || !ring_size_ok(out.rx_size))
		return UpcallParse::BAD;
	return UpcallParse::OK;
}

FabricKey::~FabricKey()
{
	sodium_memzero(buf_.data(), buf_.size());
}

bool FabricKey::set(std::span<const std::uint8_t> bytes) noexcept
{
	sodium_memzero(buf_.data(), buf_.size());
	len_ = 0;
	if (bytes.size() < SD_KEY_MIN_LEN || bytes.size() > SD_KEY_MAX_LEN || bytes.size() > buf_.size())
		return false;
	std::memcpy(buf_.data(), bytes.data(), bytes.size());
	len_ = bytes.size();
	return true;
}

void Kernel::SockFree::operator()(nl_sock *s) const noexcept
{
	nl_socket_free(s);
}

void Kernel::MsgFree::operator()(nl_msg *m) const noexcept
{
	nlmsg_free(m);
}

std::unique_ptr<Kernel> Kernel::open(std::string &error)
{
	std::unique_ptr<Kernel> k(new Kernel);
	k->sock_.reset(nl_socket_alloc());
	if (!k->sock_) {
		error = "cannot allocate a netlink socket";
		return nullptr;
	}
	nl_sock *sk = k->sock_.get();
	if (const int err = genl_connect(sk)) {
		error = std::string("generic netlink: ") + nl_geterror(err);
		return nullptr;
	}
	const int fd = nl_socket_get_fd(sk);
	const int one = 1;
	// The kernel's reason for a refusal, for the log; and errors without
	// a copy of the request.  Older kernels refuse these options.
	(void)setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	(void)setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	(void)nl_socket_set_buffer_size(sk, RCVBUF, 0);

	const int id = genl_ctrl_resolve(sk, SD_LINK_GENL_NAME);
	if (id == -NLE_OBJ_NOTFOUND) {
		error = "the af_sd module is not loaded, or has no link daemon interface "
			"(generic netlink family \"" SD_LINK_GENL_NAME "\" not found)";
		return nullptr;
	}
	if (id < 0) {
		error = std::string("generic netlink family \"" SD_LINK_GENL_NAME "\": ") + nl_geterror(id);
		return nullptr;
	}
	k->family_ = id;
	if (const int err = nl_socket_set_nonblocking(sk)) {
		error = std::string("netlink socket: ") + nl_geterror(err);
		return nullptr;
	}
	return k;
}

Kernel::~Kernel() = default;

int Kernel::fd() const noexcept
{
	return nl_socket_get_fd(sock_.get());
}

Kernel::Msg Kernel::message(std::uint8_t cmd)
{
	Msg msg(nlmsg_alloc());
	if (msg && !genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, family_, 0, 0, cmd,
				SD_LINK_GENL_VERSION))
		msg.reset();
	return msg;
}

int Kernel::read_one()
{
	sockaddr_nl from{};
	iovec iov{buf_.data(), buf_.size()};
	msghdr mh{};
	mh.msg_name = &from;
	mh.msg_namelen = sizeof(from);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	ssize_t n;
	do
		n = recvmsg(fd(), &mh, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0)
		return 0;
	if (mh.msg_flags & MSG_TRUNC) {
		note("netlink: a message longer than %zu bytes, dropped", buf_.size());
		return 1;
	}
	if (from.nl_family != AF_NETLINK || from.nl_pid != 0) {
		note("netlink: a message from port %u, not from the kernel, dropped", from.nl_pid);
		return 1;
	}
	int rem = static_cast<int>(n);
	for (auto *h = reinterpret_cast<nlmsghdr *>(buf_.data()); nlmsg_ok(h, rem); h = nlmsg_next(h, &rem))
		handle(h);
	return 1;
}

void Kernel::handle(nlmsghdr *h)
{
	if (h->nlmsg_type == NLMSG_ERROR) {
		if (h->nlmsg_seq != awaited_seq_ || answered_)
			return;
		answered_ = true;
		if (h->nlmsg_len < NLMSG_HDRLEN + sizeof(nlmsgerr)) {
			reply_bad_ = true;
			return;
		}
		const auto *e = static_cast<const nlmsgerr *>(nlmsg_data(h));
		answer_err_ = e->error < 0 && e->error > -4096 ? -e->error : (e->error ? EIO : 0);
		if (answer_err_)
			extack_ = extack_of(h);
		return;
	}
	if (h->nlmsg_type != family_)
		return;		// NLMSG_DONE, NLMSG_NOOP, NLMSG_OVERRUN: nothing of ours

	Upcall up;
	const UpcallParse parsed = parse_upcall(h, family_, up);
	switch (parsed) {
	case UpcallParse::OK:
	case UpcallParse::BAD:
		if (queue_.size() >= QUEUE_MAX) {
			// The kernel bounds its wait: these connects go over
			// TCP with reason handshake.
			if (!queue_full_logged_)
				note("netlink: over %zu connects waiting; dropping upcalls", QUEUE_MAX);
			queue_full_logged_ = true;
			return;
		}
		queue_full_logged_ = false;
		queue_.push_back({up, parsed == UpcallParse::BAD});
		return;
	case UpcallParse::NO_ID:
		note("netlink: a malformed connect upcall without an id, dropped");
		return;
	case UpcallParse::OTHER:
		break;
	}

	// A reply to the awaited request (the ACK follows it).
	if (h->nlmsg_seq != awaited_seq_ || answered_ || !genlmsg_valid_hdr(h, 0))
		return;
	const auto *g = static_cast<const genlmsghdr *>(nlmsg_data(h));
	if (g->cmd != awaited_cmd_ || (!key_out_ && !id_out_))
		return;
	nlattr *tb[A_MAX + 1] = {};
	if (id_out_) {
		if (genlmsg_parse(h, 0, tb, A_MAX, nullptr) < 0 || !exact(tb[SD_LINK_A_ID], *id_out_))
			reply_bad_ = true;
		else
			key_seen_ = true;
		return;
	}
	if (genlmsg_parse(h, 0, tb, A_MAX, nullptr) < 0 || !tb[SD_LINK_A_KEY] ||
	    !key_out_->set({static_cast<const std::uint8_t *>(nla_data(tb[SD_LINK_A_KEY])),
			    static_cast<std::size_t>(nla_len(tb[SD_LINK_A_KEY]))})) {
		reply_bad_ = true;
		return;
	}
	key_seen_ = true;
}

int Kernel::exchange(Msg msg, FabricKey *key_out, std::uint64_t *id_out)
{
	extack_.clear();
	if (!msg)
		return ENOMEM;
	const int sent = nl_send_auto(sock_.get(), msg.get());
	if (sent < 0) {
		extack_ = nl_geterror(sent);
		return EIO;
	}
	const nlmsghdr *h = nlmsg_hdr(msg.get());
	awaited_seq_ = h->nlmsg_seq;
	awaited_cmd_ = static_cast<const genlmsghdr *>(nlmsg_data(h))->cmd;
	answered_ = reply_bad_ = key_seen_ = false;
	answer_err_ = 0;
	key_out_ = key_out;
	id_out_ = id_out;

	// The answer is already queued (kernel.hpp): read until it, or until
	// nothing is left.
	while (!answered_) {
		const int r = read_one();
		if (r == 0)
			break;
		if (r == -ENOBUFS) {
			note("netlink: receive buffer overrun; upcalls lost (the kernel gave those "
			     "connects TCP)");
			continue;
		}
		if (r < 0) {
			extack_ = std::strerror(-r);
			break;
		}
	}
	key_out_ = nullptr;
	id_out_ = nullptr;
	awaited_seq_ = 0;
	if (!answered_) {
		if (extack_.empty())
			extack_ = "no answer from the kernel";
		return EIO;
	}
	if (answer_err_)
		return answer_err_;
	if (reply_bad_ || ((key_out || id_out) && !key_seen_)) {
		extack_ = "malformed reply from the kernel";
		return EIO;
	}
	return 0;
}

int Kernel::register_daemon()
{
	return exchange(message(SD_LINK_CMD_REGISTER), nullptr);
}

int Kernel::verdict(std::uint64_t id, std::uint8_t verdict, std::uint8_t reason)
{
	Msg msg = message(SD_LINK_CMD_VERDICT);
	if (msg && (nla_put_u64(msg.get(), SD_LINK_A_ID, id) < 0 ||
		    nla_put_u8(msg.get(), SD_LINK_A_VERDICT, verdict) < 0 ||
		    (verdict == SD_LINK_TCP && nla_put_u8(msg.get(), SD_LINK_A_REASON, reason) < 0)))
		msg.reset();
	return exchange(std::move(msg), nullptr);
}

int Kernel::verdict_via(std::uint64_t id, int listen_fd)
{
	Msg msg = message(SD_LINK_CMD_VERDICT);
	if (msg && (nla_put_u64(msg.get(), SD_LINK_A_ID, id) < 0 ||
		    nla_put_u8(msg.get(), SD_LINK_A_VERDICT, SD_LINK_VIA) < 0 ||
		    nla_put_s32(msg.get(), SD_LINK_A_FD, listen_fd) < 0))
		msg.reset();
	return exchange(std::move(msg), nullptr);
}

namespace {

bool put_addr(nl_msg *msg, int type, const sdlink::SockAddr &a)
{
	nlattr *nest = nla_nest_start(msg, type);
	if (!nest || nla_put(msg, SD_A_ADDR_IN6, static_cast<int>(a.addr.size()), a.addr.data()) < 0 ||
	    nla_put_u16(msg, SD_A_ADDR_PORT, a.port) < 0)
		return false;
	nla_nest_end(msg, nest);
	return true;
}

} // namespace

int Kernel::incoming(int fd, const sdlink::SockAddr &local, const sdlink::SockAddr &remote,
		     std::uint32_t uid, std::uint32_t gid, std::uint32_t tx_size,
		     std::uint32_t rx_size, std::uint64_t *id_out)
{
	Msg msg = message(SD_LINK_CMD_INCOMING);
	if (msg && (nla_put_s32(msg.get(), SD_LINK_A_FD, fd) < 0 ||
		    !put_addr(msg.get(), SD_LINK_A_LOCAL, local) ||
		    !put_addr(msg.get(), SD_LINK_A_REMOTE, remote) ||
		    nla_put_u32(msg.get(), SD_LINK_A_UID, uid) < 0 ||
		    nla_put_u32(msg.get(), SD_LINK_A_GID, gid) < 0 ||
		    nla_put_u32(msg.get(), SD_LINK_A_TX_SIZE, tx_size) < 0 ||
		    nla_put_u32(msg.get(), SD_LINK_A_RX_SIZE, rx_size) < 0))
		msg.reset();
	return exchange(std::move(msg), nullptr, id_out);
}

int Kernel::key(FabricKey &out)
{
	out.set({});
	return exchange(message(SD_LINK_CMD_KEY), &out);
}

bool Kernel::receive()
{
	for (;;) {
		const int r = read_one();
		if (r == 0)
			return true;
		if (r == -ENOBUFS) {
			note("netlink: receive buffer overrun; upcalls lost (the kernel gave those "
			     "connects TCP)");
			continue;
		}
		if (r < 0) {
			note("netlink: %s", std::strerror(-r));
			return false;
		}
	}
}

bool Kernel::next_upcall(Upcall &out, bool &bad)
{
	if (queue_.empty())
		return false;
	out = queue_.front().up;
	bad = queue_.front().bad;
	queue_.pop_front();
	return true;
}

} // namespace sdlinkd
