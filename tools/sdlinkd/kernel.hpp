// SPDX-License-Identifier: GPL-2.0
//
// All of sdlinkd's netlink: the generic netlink family "sd_link" of
// af_sd.ko (<linux/sd_link.h>, Documentation/netlink.rst, "The link
// daemon's family"), through libnl-3.  One socket carries both the
// kernel's upcalls (SD_LINK_CMD_CONNECT) and sdlinkd's requests; it is
// non-blocking, and a request never waits: the kernel answers a do
// command while it is sent, so its answer is queued before send returns,
// or lost with the socket's buffer full (then the request failed).
// Upcalls read while looking for an answer are queued for the caller.
//
// Nothing here throws but std::bad_alloc, and nothing read is trusted: a
// message not from the kernel (nl_pid 0) is dropped, a malformed upcall
// is reported as such.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>

#include "wire.hpp"

struct nl_msg;
struct nl_sock;
struct nlmsghdr;

namespace sdlinkd {

// SD_LINK_CMD_CONNECT: a redirected socket of this namespace connects to
// another host and waits (or, non-blocking, does not) for the verdict.
struct Upcall {
	std::uint64_t id = 0;
	sdlink::SockAddr local;		// port 0: not yet bound
	sdlink::SockAddr remote;
	std::uint32_t uid = 0;
	std::uint32_t gid = 0;
	// Bytes of the data area of the program's send and receive ring,
	// which a connection through this daemon gets; both 0 when the
	// module does not say (one older than SD_LINK_A_TX_SIZE in the
	// upcall: then they are net.sd.ring_size unless the program set
	// SO_SNDBUF or SO_RCVBUF).
	std::uint32_t tx_size = 0;
	std::uint32_t rx_size = 0;
};

enum class UpcallParse {
	OK,
	OTHER,		// not an SD_LINK_CMD_CONNECT of this family: not ours to read
	NO_ID,		// malformed, and no id to answer
	BAD,		// malformed, with an id (in out.id) to answer
};

// One netlink message as an upcall of the family family_id.  Every
// attribute the daemon reads must be there with exactly its size, but
// the ring sizes, which are both there (each a power of two within
// SD_RING_MIN_SIZE and SD_RING_MAX_SIZE) or neither; attributes of types
// it does not know (a newer kernel's) are skipped.
UpcallParse parse_upcall(nlmsghdr *h, int family_id, Upcall &out) noexcept;

// The namespace's fabric key (sdctl key set), wiped when it goes.
class FabricKey {
public:
	FabricKey() noexcept = default;
	~FabricKey();
	FabricKey(const FabricKey &) = delete;
	FabricKey &operator=(const FabricKey &) = delete;

	// false (and no key) unless bytes is a valid key's length.
	bool set(std::span<const std::uint8_t> bytes) noexcept;
	std::span<const std::uint8_t> bytes() const noexcept { return {buf_.data(), len_}; }

private:
	std::array<std::uint8_t, 64> buf_{};
	std::size_t len_ = 0;
};

class Kernel {
public:
	// A generic netlink socket with "sd_link" resolved: nullptr and why in
	// error when the module is not loaded or netlink fails.
	static std::unique_ptr<Kernel> open(std::string &error);
	~Kernel();
	Kernel(const Kernel &) = delete;
	Kernel &operator=(const Kernel &) = delete;

	int fd() const noexcept;

	// The requests: 0, or the errno the kernel answered (its extended
	// ACK message in extack()), or EIO when the request could not be
	// sent or its answer was lost or malformed.
	int register_daemon();
	int verdict(std::uint64_t id, std::uint8_t verdict, std::uint8_t reason);
	// SD_LINK_VIA: the connect goes into listen_fd's queue.
	int verdict_via(std::uint64_t id, int listen_fd);
	// SD_LINK_CMD_INCOMING: fd becomes the daemon's end of a connection
	// from remote to the listener at local, with rings of tx_size (the
	// daemon end's send ring) and rx_size bytes; its id in *id_out.
	int incoming(int fd, const sdlink::SockAddr &local, const sdlink::SockAddr &remote,
		     std::uint32_t uid, std::uint32_t gid, std::uint32_t tx_size,
		     std::uint32_t rx_size, std::uint64_t *id_out);
	// ENOKEY: no key set in this namespace.
	int key(FabricKey &out);
	const std::string &extack() const noexcept { return extack_; }

	// Reads everything the socket holds; upcalls go to the queue.  false
	// when the socket failed for good.
	bool receive();
	// The oldest queued upcall, if any; malformed ones come with bad set.
	bool next_upcall(Upcall &out, bool &bad);

private:
	// Upcalls waiting at most.  Each is a connect the kernel waits on
	// for a bounded time; the socket's buffer holds fewer.
	static constexpr std::size_t QUEUE_MAX = 4096;

	struct MsgFree {
		void operator()(nl_msg *m) const noexcept;
	};
	using Msg = std::unique_ptr<nl_msg, MsgFree>;

	Kernel() = default;
	// A request of cmd to fill with attributes: null when out of memory.
	Msg message(std::uint8_t cmd);
	// Sends msg and reads until its answer; a reply's SD_LINK_A_KEY goes
	// to key_out.
	int exchange(Msg msg, FabricKey *key_out, std::uint64_t *id_out = nullptr);
	// One datagram: > 0 handled, 0 nothing to read, < 0 -errno.
	int read_one();
	void handle(nlmsghdr *h);

	struct SockFree {
		void operator()(nl_sock *s) const noexcept;
	};
	std::unique_ptr<nl_sock, SockFree> sock_;
	int family_ = 0;

	struct Queued {
		Upcall up;
		bool bad = false;
	};
	std::deque<Queued> queue_;
	bool queue_full_logged_ = false;

	// The request whose answer is awaited.
	std::uint32_t awaited_seq_ = 0;
	std::uint8_t awaited_cmd_ = 0;
	bool answered_ = false;
	int answer_err_ = 0;
	bool reply_bad_ = false;
	FabricKey *key_out_ = nullptr;
	std::uint64_t *id_out_ = nullptr;
	bool key_seen_ = false;
	std::string extack_;

	alignas(8) std::array<std::uint8_t, 65536> buf_{};
};

} // namespace sdlinkd
