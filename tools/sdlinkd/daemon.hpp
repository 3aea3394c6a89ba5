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
// Every peer is hostile: each connection has bounded buffers and
// deadlines, their number is bounded overall and per host, and a failure
// of one ends that connection alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "addr.hpp"
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
		bool dead = false;
		Outcome end = Outcome::FAILED;
	};

	struct Pending {
		std::uint64_t conn = 0;		// its session's token
		Time deadline{};
		sdlink::Connect msg;
		bool sent = false;
	};

	// The fixed descriptors' tokens; connections' tokens are above.
	static constexpr std::uint64_t T_NETLINK = 1, T_LISTEN = 2, T_TIMER = 3, T_SIGNAL = 4,
				       T_FIRST_CONN = 16;

	void dispatch(std::uint64_t token, std::uint32_t events, Time now);
	void accept_all(Time now);
	void pause_listener(Time now);
	void on_conn(Conn &c, std::uint32_t events, Time now);
	void on_connected(Conn &c, Time now);
	void on_readable(Conn &c, Time now);
	void on_keyless(Conn &c, std::span<const std::uint8_t> bytes);
	void on_message(Conn &c, const sdlink::Message &m, Time now);
	void on_answer(Conn &c, const sdlink::Answer &a);
	sdlink::Answer answer(const Conn &c, const sdlink::Connect &req);
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

	Options opt_;
	std::unique_ptr<Kernel> kernel_;
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
	int status_ = 0;
};

} // namespace sdlinkd
