// SPDX-License-Identifier: GPL-2.0
//
// sdlink_carrier: the bytes of one AF_SD connection between two hosts'
// sdlinkd daemons, over one RDMA reliable-connected queue pair, with no
// copy by a CPU (Documentation/remote.rst, "The carrier").
//
// The daemon holds its end of a connected AF_SD socket whose other end is
// the program's.  The carrier maps both rings of that socket and takes
// the daemon end's tokens: the consumer side of its RX ring (the ring the
// program sends into) and the producer side of its TX ring (the ring the
// program receives from).  The rings of the two hosts mirror each other:
// the record at stream position p of one program's send ring is written,
// as it is, by one-sided RDMA writes to the same offset of the other
// program's receive ring, whose daemon then only publishes it.
//
// Use: one Device per RDMA device, shared by the carriers of that device
// (its completion queue and channel); one Carrier per connection.
//
//   auto dev = Device::open("rxe0", 1, 4096, &err);
//   auto c = Carrier::create(*dev, fd, &err);   // the carrier owns fd
//   send c->endpoint() to the peer daemon, receive its Endpoint, then
//   c->connect(peer);
//   loop: busy = dev->poll(); busy |= c->poll() (each carrier);
//         spin while busy; when idle: if dev->arm() or !c->prepare_sleep()
//         go on, else epoll_wait on dev->event_fd() and every carrier's
//         fd() (c->epoll_events(), edge-triggered), then dev->take_events().
//   a carrier is over once state() is DONE or RESET: destroy it.
//
// Nothing here throws or lets an exception out; every call is noexcept and
// reports errors as negative errno values.  Not thread-safe: one thread
// drives a Device and its carriers.
#pragma once

#include <infiniband/verbs.h>
#include <linux/sd.h>
#include <sys/epoll.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "wire.hpp"

namespace sdlink {

class Carrier;

// An RDMA device as the carriers share it: its context, protection
// domain, completion channel and one completion queue for every carrier.
class Device {
public:
	// Open device name, port 1, GID gid_index, with a completion queue of
	// cq_len entries (each carrier takes Carrier::CQ_SHARE of them).
	// nullptr and *err (a negative errno) on failure.
	static std::unique_ptr<Device> open(const char *name, int gid_index, int cq_len,
					    int *err) noexcept;
	~Device();
	Device(const Device &) = delete;
	Device &operator=(const Device &) = delete;

	// The completion channel's descriptor (non-blocking): readable after
	// arm() when a completion came.
	int event_fd() const noexcept;
	// Take every completion there is and hand each to its carrier.
	// True if there was any.
	bool poll() noexcept;
	// Before sleeping: ask for an event on the next completion, then
	// look once more.  True if completions came meanwhile (do not sleep).
	bool arm() noexcept;
	// After event_fd() was readable: consume its events.
	void take_events() noexcept;

	// Completion queue errors seen (the queue overran, or polling failed).
	std::uint64_t cq_errors() const noexcept { return cq_errors_; }

private:
	friend class Carrier;
	Device() noexcept = default;
	int add(Carrier *c, std::uint64_t *id) noexcept;
	void remove(std::uint64_t id) noexcept;

	ibv_context *ctx_ = nullptr;
	ibv_pd *pd_ = nullptr;
	ibv_comp_channel *chan_ = nullptr;
	ibv_cq *cq_ = nullptr;
	ibv_gid gid_ = {};
	ibv_port_attr port_ = {};
	int gid_index_ = 0;
	int cq_len_ = 0;
	int cq_used_ = 0;
	std::uint64_t next_id_ = 1;
	std::uint64_t cq_errors_ = 0;
	std::unordered_map<std::uint64_t, Carrier *> carriers_;
};

// What one connection's carrier did, for `make bench` and sdctl.
struct Counters {
	std::uint64_t writes = 0;	// RDMA writes posted (every kind)
	std::uint64_t bytes = 0;	// bytes those writes carried
	std::uint64_t batches = 0;	// batches of records (one immediate each)
	std::uint64_t records = 0;	// data records forwarded (pads not counted)
	std::uint64_t credit_writes = 0;	// credit words written to the peer
	std::uint64_t copies = 0;	// bytes a CPU copied: nothing does, 0
	std::uint64_t zeroed = 0;	// bytes zeroed in the send ring (the ABI's rule 2)
	std::uint64_t wakes = 0;	// SD_IOC_WAKE calls (wake-up system calls)
	std::uint64_t syscalls = 0;	// other system calls after connect (shutdown)
	std::uint64_t imms = 0;		// immediates received from the peer
	std::uint64_t rx_bytes = 0;	// record bytes the peer put in the receive ring
};

enum class State : std::uint8_t {
	NEW,		// created: endpoint() is ready, connect() next
	RUNNING,	// connected; poll() carries the bytes
	DONE,		// both directions ended and the peer said so: destroy
	RESET,		// the connection was reset (error() says why): destroy
};

class Carrier {
public:
	// The queue pair's sizes: writes in flight, receives posted, and the
	// completion queue entries the carrier takes from its device.
	static constexpr unsigned SQ_DEPTH = 64;
	static constexpr unsigned RQ_DEPTH = 128;
	static constexpr int CQ_SHARE = SQ_DEPTH + RQ_DEPTH;

	// Carry the connection of fd, the daemon's end of a connected AF_SD
	// socket; the carrier owns fd from now on (it closes it, also when
	// this fails).  Maps both rings, takes the two tokens, registers the
	// memory and makes the queue pair.  nullptr and *err on failure:
	// -EINVAL (bad ring offsets, or a side already used: the stream must
	// start at 0 both ways), -EPIPE (the connection ended), -ENOSPC (the
	// device's completion queue is fully shared), a verbs error.
	static std::unique_ptr<Carrier> create(Device &dev, int fd, int *err) noexcept;
	~Carrier();
	Carrier(const Carrier &) = delete;
	Carrier &operator=(const Carrier &) = delete;

	// This side's half, for the peer daemon.
	const Endpoint &endpoint() const noexcept { return mine_; }

	// Connect the queue pair to the peer's half, checked first (it comes
	// from another host).  -EMSGSIZE: its ring's size is not ours (the
	// rings could not mirror each other); -EINVAL: a bad field; -EALREADY.
	// Any failure resets the connection (the program sees ECONNRESET).
	int connect(const Endpoint &peer) noexcept;

	// One step, never blocking: take in what the peer wrote, forward the
	// records the program sent, return credit, end or reset.  True if
	// anything moved (call again before sleeping).
	bool poll() noexcept;

	// Before the caller sleeps: ask to be woken (SD_RING_READER_WAIT on
	// the send ring, SD_RING_NEED_CREDIT on the receive ring when the peer
	// waits for credit) and look once more.  True: nothing to do, sleep;
	// false: work came, poll() again.
	bool prepare_sleep() noexcept;

	// The socket while the carrier has it (-1 once it closed it), and the
	// epoll events to wait for on it (edge-triggered).
	int fd() const noexcept { return fd_; }
	static constexpr std::uint32_t epoll_events() noexcept
	{
		return EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
	}

	// Reset the connection from this side: the program sees ECONNRESET,
	// the peer is told.  why: a negative errno for error().
	void reset(int why) noexcept;

	State state() const noexcept { return state_; }
	int error() const noexcept { return err_; }
	// Where it stands, in one line of text, for logs and sdctl: the
	// positions, flags and queue.  Returns what snprintf() does.
	int describe(char *buf, std::size_t len) const noexcept;
	// Why, in words, for logs ("" while it was not reset).
	const char *reason() const noexcept { return what_; }
	const Counters &counters() const noexcept { return cnt_; }
	std::uint32_t ring_size() const noexcept { return static_cast<std::uint32_t>(size_); }

private:
	friend class Device;
	explicit Carrier(Device &dev) noexcept : dev_(dev) {}

	// One ring side with its token (<linux/sd.h>, "Tokens").
	struct Side {
		std::uint32_t *token_word = nullptr;
		std::uint32_t token = 0;
		std::uint32_t busy = 0;		// the count the kernel reads
	};
	// A signalled write in flight, in posting order.
	struct Inflight {
		std::uint8_t kind = 0;
		std::uint8_t wrs = 0;		// send queue entries it retires
		bool fin = false;		// it carried imm::FIN
		std::uint64_t end = 0;		// a batch's end in the stream
	};

	int setup(int fd) noexcept;
	int map_rings() noexcept;
	int acquire(Side &s, std::uint32_t dir, std::uint64_t *pos, std::uint32_t *off) noexcept;
	bool enter(Side &s) noexcept;
	static void leave(Side &s) noexcept;

	void on_wc(const ibv_wc &wc) noexcept;
	void on_imm(std::uint32_t imm) noexcept;
	bool take_in() noexcept;
	bool forward() noexcept;
	bool credit_back() noexcept;
	bool retire_batches() noexcept;
	bool check_flags() noexcept;
	bool post_write(std::uint8_t kind, std::uint64_t local, std::uint32_t lkey,
			std::uint32_t len, std::uint64_t remote, std::uint32_t rkey,
			std::uint32_t imm) noexcept;
	bool post_batch(std::uint64_t start, std::uint64_t end, std::uint32_t imm) noexcept;
	bool sq_room(unsigned wrs, unsigned keep) const noexcept
	{
		return sq_used_ + wrs + keep <= SQ_DEPTH;
	}
	bool mapped() const noexcept { return rx_map_ != nullptr; }
	// How far our program read its receive ring: its credit, or its
	// published read position when that is further (mapped() only).
	std::uint64_t program_read() const noexcept
	{
		const std::uint64_t c = __atomic_load_n(tx_consumer_, __ATOMIC_ACQUIRE);
		const std::uint64_t r = __atomic_load_n(tx_cons_pos_, __ATOMIC_ACQUIRE);
		return static_cast<std::int64_t>(r - c) > 0 ? r : c;
	}
	void post_recv() noexcept;
	int hdr_check(std::uint64_t word, std::uint64_t pos, std::uint64_t *space,
		      bool *pad) const noexcept;
	void publish_head(std::uint64_t head) noexcept;
	void fail(int why, bool tell_peer, const char *what) noexcept;
	void close_socket(bool abort) noexcept;
	void maybe_finish() noexcept;
	void teardown() noexcept;

	std::uint64_t *hdr(std::uint64_t pos) const noexcept
	{
		return reinterpret_cast<std::uint64_t *>(rx_data_ + (pos & (size_ - 1)));
	}

	Device &dev_;
	std::uint64_t id_ = 0;
	int fd_ = -1;
	State state_ = State::NEW;
	int err_ = 0;
	const char *what_ = "";
	Counters cnt_;

	// The rings as mapped: RX is the program's send ring (we consume it),
	// TX its receive ring (we produce it; the peer writes its bytes).
	sd_mmap_offsets off_ = {};
	void *rx_map_ = nullptr, *tx_map_ = nullptr;
	unsigned char *rx_data_ = nullptr, *tx_data_ = nullptr;
	std::uint64_t *rx_consumer_ = nullptr, *tx_consumer_ = nullptr;
	std::uint32_t *rx_prod_flags_ = nullptr, *rx_cons_flags_ = nullptr;
	std::uint32_t *tx_prod_flags_ = nullptr, *tx_cons_flags_ = nullptr;
	std::uint64_t *rx_cons_pos_ = nullptr, *tx_prod_pos_ = nullptr;
	std::uint64_t *tx_cons_pos_ = nullptr;	// the program's read position (a hint)
	std::uint32_t *rx_cons_off_ = nullptr;
	std::uint64_t size_ = 0;	// of the send ring (RX)
	std::uint64_t tx_size_ = 0;	// of the receive ring (TX)
	Side rx_side_, tx_side_;

	// Verbs objects of this connection.
	ibv_qp *qp_ = nullptr;
	ibv_mr *rx_mr_ = nullptr, *tx_mr_ = nullptr, *peer_credit_mr_ = nullptr,
	       *my_credit_mr_ = nullptr;
	// The peer writes how far its program consumed into peer_credit_;
	// my_credit_ is the source of ours.  Each on its own cache line.
	alignas(64) std::uint64_t peer_credit_word_ = 0;
	alignas(64) std::uint64_t my_credit_word_ = 0;
	Endpoint mine_, peer_;

	// Sending (our program's send ring to the peer's receive ring).
	std::uint64_t head_ = 0;	// consumed: forwarded, landed, zeroed
	std::uint64_t sent_ = 0;	// posted up to here
	std::uint64_t landed_ = 0;	// the peer acknowledged up to here
	std::uint64_t peer_credit_ = 0;	// the peer's program consumed this far
	bool credit_dirty_ = false;	// an immediate said the word moved
	bool blocked_ = false;		// a record waits for the peer's credit
	bool want_sent_ = false;	// we told the peer we wait for credit
	bool fin_seen_ = false;		// our program's stream ended at sent_
	bool fin_posted_ = false;
	bool fin_done_ = false;		// and the peer has it

	// Receiving (the peer's writes into our program's receive ring).
	std::uint64_t tail_ = 0;	// records landed up to here
	std::uint64_t published_ = 0;	// prod_pos as published
	std::uint64_t prog_credit_ = 0;	// our program consumed this far
	std::uint64_t credit_posted_ = 0;	// the credit we gave the peer
	bool peer_wants_ = false;	// the peer waits for credit
	bool peer_fin_ = false;		// the peer's stream ended at tail_
	bool shut_ = false;		// we passed it on (shutdown(SHUT_WR))
	bool peer_bye_ = false, bye_posted_ = false, bye_done_ = false;
	bool peer_reset_ = false;	// the peer sent RESET

	// The send queue.
	std::array<Inflight, SQ_DEPTH> ring_ = {};
	unsigned inflight_head_ = 0, inflight_n_ = 0;
	unsigned sq_used_ = 0;		// entries posted and not yet retired
	bool qp_broken_ = false;	// a completion failed: post nothing more
	bool resetting_ = false;	// reset: finish once the queue drained
};

// The immediate of every write-with-immediate (host order here; network
// order on the wire).  Low 28 bits: bytes of records a batch adds.
namespace imm {
constexpr std::uint32_t LEN_MASK = (1U << 28) - 1;
constexpr std::uint32_t WANT = 1U << 28;	// the sender waits for credit
constexpr std::uint32_t CREDIT = 1U << 29;	// the credit word was written
constexpr std::uint32_t FIN = 1U << 30;		// no records after these
constexpr std::uint32_t CTRL = 1U << 31;	// with RESET or BYE below
constexpr std::uint32_t RESET = CTRL | 1;	// the connection is reset
constexpr std::uint32_t BYE = CTRL | 2;		// both ends done: nothing more comes
} // namespace imm

} // namespace sdlink
