// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's control plane: one thread, one epoll loop over the kernel's
// netlink socket, the control port's listening socket, every control
// connection, a timerfd and a signalfd.
//
// A control connection carries one authenticated session (session.hpp).
// This daemon dials one session per peer host for its own connects (the
// CONNECTING role), and answers the sessions other hosts' daemons dial
// (the ANSWERING role); a session is never used the other way.
//
// A connect the kernel asks about (SD_LINK_CMD_CONNECT) waits in the
// pending table for the peer's ANSWER on its host's session, at most the
// kernel's own bound (net.sd.rendezvous_timeout_ms); whatever happens to
// it ends in one SD_LINK_CMD_VERDICT (verdict.hpp says which).
//
// The data path (daemon_link.cpp): a connect the peer accepted is carried
// by one Carrier (carrier.hpp) at each end, over an RDMA device of each
// host; the exchange that sets the two up and what ends them are in
// Documentation/sdlinkd.rst, "The data path".
//
// Every peer is hostile: each connection has bounded buffers and
// deadlines, their number is bounded overall and per host, and a failure
// of one ends that connection alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "addr.hpp"
#include "carrier.hpp"
#include "clock.hpp"
#include "fd.hpp"
#include "kernel.hpp"
#include "options.hpp"
#include "peer_cache.hpp"
#include "session.hpp"
#include "verdict.hpp"

namespace sdlinkd {

// Sessions this daemon dialled, one per peer host.  Beyond this many
// hosts, the least recently used idle session makes room.
constexpr std::size_t MAX_OUTBOUND = 256;
// Sessions other hosts dialled.  A host's daemon needs one; a few more
// let a restarted one in while its old sessions wait for the keepalive
// to end them.  Both bounds keep the daemon's descriptors well under the
// default limit of 1024.
constexpr std::size_t MAX_INBOUND = 256;
constexpr std::size_t MAX_INBOUND_PER_HOST = 4;
// Connects waiting for a peer's answer.  Each is a program blocked in
// connect for at most the kernel's bound.
constexpr std::size_t MAX_PENDING = 1024;
// Bytes queued for sending on one connection: frames are at most 151
// bytes, so this is hundreds of answers a peer did not read, and then it
// is not reading at all.
constexpr std::size_t TX_MAX = 64 * 1024;
// Bytes read from one connection per wake-up, so that one busy peer
// cannot keep the loop from the others (the rest waits for the next one).
constexpr std::size_t READ_BUDGET = 16 * 1024;
// Connections accepted per wake-up, for the same reason.
constexpr int ACCEPT_BUDGET = 32;

// Connections carried at once (each holds a queue pair, its memory
// registrations and two descriptors).
constexpr std::size_t MAX_LINKS = 1024;
// RDMA devices the daemon uses at once (a host has a few).
constexpr std::size_t MAX_DEVICES = 8;
// Completion queue entries of a device, shared by its carriers
// (Carrier::CQ_SHARE each); a device that cannot have this many gets
// MIN_CQ_LEN.
constexpr int DEVICE_CQ_LEN = 64 * sdlink::Carrier::CQ_SHARE;
constexpr int MIN_CQ_LEN = 8 * sdlink::Carrier::CQ_SHARE;
// The connect's ring size when net.sd.ring_size cannot be read: its
// default.
constexpr std::uint32_t DEFAULT_RING_SIZE = 128 * 1024;

// What the daemon's data path did, over its life (--verbose prints them at
// exit; Documentation/sdlinkd.rst, "Counters").
struct LinkCounters {
	std::uint64_t carried = 0;	// connections whose two queue pairs connected
	std::uint64_t writes = 0;	// RDMA writes posted
	std::uint64_t bytes = 0;	// bytes those writes carried
	std::uint64_t copies = 0;	// bytes a CPU copied (0)
	std::uint64_t wakes = 0;	// SD_IOC_WAKE calls (wake-up system calls)
	std::uint64_t syscalls = 0;	// other system calls on carried sockets
	std::uint64_t sleeps = 0;	// epoll waits with a carrier live
	std::uint64_t resets = 0;	// carried connections that ended in a reset
	std::uint64_t mismatched = 0;	// VIA connections whose rings were not as stated
};

// A TCP connect to a peer's control port that takes longer has lost its
// SYN three times (TCP retries after 1, 2 and 4 s): the host is treated
// as having no daemon, like one that refuses.
constexpr Duration DIAL_TIMEOUT = seconds(10);
// A connected peer sends its HELLO at once, unprompted; one that has not
// within this holds a connection for nothing.
constexpr Duration HELLO_TIMEOUT = seconds(10);
// A session that received nothing for this long is pinged, both ways;
// short enough that a host that vanished is noticed within seconds of
// the next connect to it, long enough to be no load.
constexpr Duration KEEPALIVE_IDLE = seconds(5);
// A ping unanswered for this long ends the session: a round trip plus the
// retransmissions of a lossy path, as for the dial.
constexpr Duration KEEPALIVE_TIMEOUT = seconds(10);
// A dialled session with no connect for this long is closed; the next
// connect to that host dials again, which costs one round trip.
constexpr Duration OUTBOUND_IDLE = seconds(300);
// After accept() ran out of descriptors or memory, the listener rests
// this long rather than spin on a connection it cannot take.
constexpr Duration LISTEN_PAUSE = seconds(1);
// When net.sd.rendezvous_timeout_ms cannot be read: its default.
constexpr Duration DEFAULT_KERNEL_BOUND = milliseconds(1000);

class Daemon {
public:
	Daemon(const Options &opt, std::unique_ptr<Kernel> kernel);
	~Daemon();
	Daemon(const Daemon &) = delete;
	Daemon &operator=(const Daemon &) = delete;

	// The listener, signals, timer and epoll: false and why in error on
	// failure.
	bool setup(std::string &error);
	// Until SIGTERM or SIGINT (0), or the netlink socket fails (1).
	int run();

private:
	enum class Phase : std::uint8_t { DIALING, HELLO, UP };

	struct Conn {
		std::uint64_t token = 0;
		Fd fd;
		sdlink::Role role = sdlink::Role::CONNECTING;
		In6 host{};
		std::uint16_t port = 0;
		Phase phase = Phase::DIALING;
		// null: an answering connection with no key here, closed
		// once the peer's HELLO came (keyless_in counts its bytes).
		std::unique_ptr<sdlink::Session> session;
		std::size_t keyless_in = 0;
		std::vector<std::uint8_t> tx;	// unsent bytes
		bool want_out = false;		// EPOLLOUT asked for
		Time phase_since{};
		Time last_rx{};			// the last whole frame came
		Time last_use{};		// the last connect sent on it
		bool ping_out = false;
		std::uint64_t ping_cookie = 0;
		Time ping_sent{};
		bool authenticated = false;	// an authenticated frame came
		std::size_t pending = 0;	// connects waiting on it
		std::size_t links = 0;		// connections it carries
		// The RDMA device for its peer, found once (null: none).
		sdlink::Device *dev = nullptr;
		bool dev_known = false;
		bool dead = false;
		Outcome end = Outcome::FAILED;
	};

	struct Pending {
		std::uint64_t conn = 0;		// its session's token
		Time deadline{};
		sdlink::Connect msg;
		bool sent = false;
		sdlink::Device *dev = nullptr;	// set once sent
	};

	// A connect of this host given VIA, whose connection is not accepted
	// from the VIA listener yet.
	struct Via {
		std::uint64_t conn = 0;
		sdlink::Device *dev = nullptr;
		sdlink::Endpoint peer;
		std::uint32_t send_size = 0, recv_size = 0;
		Time deadline{};
	};

	// One carried connection.  CONNECTING: a connect of this host, by
	// the kernel's id; ANSWERING: a connect of the peer's, by its id.
	struct Link {
		std::uint64_t token = 0;
		std::uint64_t conn = 0;		// its session
		std::uint64_t id = 0;		// the id on the wire
		sdlink::Role role = sdlink::Role::CONNECTING;
		std::unique_ptr<sdlink::Carrier> carrier;
		bool go = false;		// both queue pairs connected: poll it
		bool peer_told = false;		// the peer knows it is over
		Time deadline{};		// until go: the peer's next step by then
	};

	struct Dev {
		std::string name;
		int gid_index = 0;
		std::unique_ptr<sdlink::Device> dev;
	};

	// The fixed descriptors' tokens; connections' tokens are above.
	static constexpr std::uint64_t T_NETLINK = 1, T_LISTEN = 2, T_TIMER = 3, T_SIGNAL = 4,
				       T_VIA = 5, T_FIRST_DEVICE = 8, T_FIRST_CONN = 16;
	static_assert(T_FIRST_DEVICE + MAX_DEVICES <= T_FIRST_CONN);

	void dispatch(std::uint64_t token, std::uint32_t events, Time now);
	void accept_all(Time now);
	void pause_listener(Time now);
	void on_conn(Conn &c, std::uint32_t events, Time now);
	void on_connected(Conn &c, Time now);
	void on_readable(Conn &c, Time now);
	void on_keyless(Conn &c, std::span<const std::uint8_t> bytes);
	void on_message(Conn &c, const sdlink::Message &m, Time now);
	void on_answer(Conn &c, const sdlink::Answer &a);
	sdlink::Answer answer(Conn &c, const sdlink::Connect &req, Time now);
	void ask(Conn &c, Pending &p);
	void on_upcall(const Upcall &up, bool bad, Time now);
	Conn *dial(const In6 &host, Time now, Outcome &why);
	bool make_room();

	bool send(Conn &c, const sdlink::Message &m);
	bool queue(Conn &c, std::span<const std::uint8_t> bytes);
	void flush(Conn &c);
	void watch(Conn &c);
	void end(Conn &c, Outcome o, const char *why);

	void decide(std::uint64_t id, Outcome o);
	void expire(Time now);
	Time next_deadline() const;
	void arm_timer(Time now);
	void settle(Time now);
	void reap();
	Duration kernel_bound() const;
	Conn *find(std::uint64_t token);

	// The data path (daemon_link.cpp).
	bool setup_via(std::string &error);
	sdlink::Device *device_for(Conn &c);
	void accept_via(Time now);
	void on_ready(Conn &c, const sdlink::Ready &r);
	void on_close(Conn &c, const sdlink::Close &cl);
	Link *add_link(Conn &c, std::uint64_t id, sdlink::Role role,
		       std::unique_ptr<sdlink::Carrier> carrier, Time deadline);
	Link *find_link(const Conn &c, std::uint64_t id);
	void tell_reset(std::uint64_t conn, std::uint64_t id);
	void drop_links(std::uint64_t conn);
	bool pump();
	bool may_sleep();
	void finish(Link &l);
	void expire_links(Time now);
	Time links_deadline() const;
	void stop_links();
	std::uint32_t ring_size() const;

	Options opt_;
	std::unique_ptr<Kernel> kernel_;
	// Devices before links: carriers go first.
	std::vector<Dev> devs_;
	Fd via_;				// the VIA listener
	std::map<std::uint64_t, Via> vias_;	// by the kernel's connect id
	std::map<std::uint64_t, std::unique_ptr<Link>> links_;	// by token
	std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> link_ids_;	// (conn, id)
	LinkCounters counters_;
	bool logged_no_device_ = false;
	bool logged_links_full_ = false;
	PeerCache peers_;
	Fd epoll_, listen_, timer_, signal_;
	bool listening_ = true;
	Time listen_resume_{};

	std::map<std::uint64_t, std::unique_ptr<Conn>> conns_;
	std::map<In6, std::uint64_t> outbound_;	// host -> its live dialled session
	std::size_t inbound_ = 0;
	std::uint64_t next_token_ = T_FIRST_CONN;
	std::vector<std::uint64_t> dead_;
	std::map<std::uint64_t, Pending> pending_;	// by the kernel's connect id
	std::uint64_t next_cookie_ = 1;

	// Conditions logged once until they clear, so that a flood of
	// connects or connections does not flood the log.
	bool logged_no_key_ = false;
	bool logged_pending_full_ = false;
	bool logged_inbound_full_ = false;
	bool logged_host_full_ = false;
	bool logged_accept_failed_ = false;
	bool logged_outbound_full_ = false;

	bool stop_ = false;
	// When a round of the loop last moved something (or a carrier came):
	// the loop polls on until opt_.spin_us after it, then sleeps.
	Time busy_at_{};
	int status_ = 0;
};

} // namespace sdlinkd
