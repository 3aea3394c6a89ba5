// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's event loop (daemon.hpp).  Handlers never close a connection
// under their own feet: end() marks it dead, and reap() closes the dead
// ones, answering the kernel for the connects that waited on them, after
// each event.  Upcalls the kernel sent are handled after that (settle()),
// as requests to the kernel may read some while looking for their answer.
#include "daemon.hpp"

#include <linux/sd_link.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <variant>

#include "log.hpp"

namespace sdlinkd {
namespace {

// Events taken from epoll per wait.
constexpr int MAX_EVENTS = 64;
// A listener's backlog: connections from many hosts' daemons at once,
// each of which stays, so a burst is rare.
constexpr int LISTEN_BACKLOG = 64;

const char *role_name(sdlink::Role r)
{
	return r == sdlink::Role::CONNECTING ? "to" : "from";
}

bool set_int(int fd, int level, int name, int value)
{
	return setsockopt(fd, level, name, &value, sizeof(value)) == 0;
}

// The kernel's bound on a connect's wait, from the namespace's sysctl (the
// daemon runs in it, so /proc/sys/net is the namespace's).
Duration read_kernel_bound()
{
	std::FILE *f = std::fopen("/proc/sys/net/sd/rendezvous_timeout_ms", "re");
	if (!f)
		return DEFAULT_KERNEL_BOUND;
	char buf[32] = {};
	const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
	std::fclose(f);
	unsigned long ms = 0;
	const auto [end, ec] = std::from_chars(buf, buf + n, ms);
	if (ec != std::errc() || end == buf || ms == 0 || ms > 3600 * 1000)
		return DEFAULT_KERNEL_BOUND;
	return milliseconds(ms);
}

} // namespace

Daemon::Daemon(const Options &opt, std::unique_ptr<Kernel> kernel)
	: opt_(opt), kernel_(std::move(kernel)), peers_(seconds(opt.peer_cache_seconds))
{
}

Daemon::~Daemon() = default;

bool Daemon::setup(std::string &error)
{
	auto fail = [&](const char *what) {
		error = std::string(what) + ": " + std::strerror(errno);
		return false;
	};

	// SIGTERM and SIGINT come through the signalfd; a peer closing
	// while we send must not kill the daemon (send() says EPIPE).
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0)
		return fail("sigprocmask");
	std::signal(SIGPIPE, SIG_IGN);
	signal_.reset(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
	if (!signal_)
		return fail("signalfd");
	timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!timer_)
		return fail("timerfd");
	epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
	if (!epoll_)
		return fail("epoll");

	// One IPv6 socket for IPv4 peers too (::ffff:a.b.c.d).
	listen_.reset(socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (!listen_)
		return fail("control port: socket");
	if (!set_int(listen_.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0) ||
	    !set_int(listen_.get(), SOL_SOCKET, SO_REUSEADDR, 1))
		return fail("control port: setsockopt");
	const sockaddr_in6 any = sockaddr_of(In6{}, opt_.port);
	if (bind(listen_.get(), reinterpret_cast<const sockaddr *>(&any), sizeof(any)) != 0) {
		error = "control port " + std::to_string(opt_.port) + ": " + std::strerror(errno);
		return false;
	}
	if (listen(listen_.get(), LISTEN_BACKLOG) != 0)
		return fail("control port: listen");

	const std::pair<int, std::uint64_t> fixed[] = {
		{kernel_->fd(), T_NETLINK}, {listen_.get(), T_LISTEN},
		{timer_.get(), T_TIMER}, {signal_.get(), T_SIGNAL},
	};
	for (const auto &[fd, token] : fixed) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.u64 = token;
		if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
			return fail("epoll_ctl");
	}
	return setup_via(error);
}

int Daemon::run()
{
	note("serving this network namespace: control port %u, hosts without a daemon "
	     "remembered %u s",
	     opt_.port, opt_.peer_cache_seconds);
	std::array<epoll_event, MAX_EVENTS> events;
	while (!stop_) {
		// Carriers first: while one moves bytes, and for opt_.spin_us
		// after, the loop polls them, and looks at its other descriptors
		// without sleeping.  A message that comes meanwhile costs no
		// wake-up of the daemon (Documentation/remote.rst, "Polling and
		// sleeping").
		const Time now = Clock::now();
		const bool spin = !links_.empty() &&
				  now - busy_at_ < std::chrono::microseconds(opt_.spin_us);
		int timeout = -1;
		if (pump()) {
			busy_at_ = now;
			timeout = 0;
		} else if (spin || !may_sleep()) {
			timeout = 0;
		} else if (!links_.empty()) {
			counters_.sleeps++;
		}
		arm_timer(now);
		const int n = epoll_wait(epoll_.get(), events.data(), MAX_EVENTS, timeout);
		if (n < 0 && errno != EINTR) {
			note("epoll_wait: %s", std::strerror(errno));
			status_ = 1;
			break;
		}
		for (int i = 0; i < n && !stop_; i++) {
			dispatch(events[static_cast<std::size_t>(i)].data.u64,
				 events[static_cast<std::size_t>(i)].events, Clock::now());
			settle(Clock::now());
		}
		expire(Clock::now());
		settle(Clock::now());
	}
	stop_links();
	return status_;
}

Daemon::Conn *Daemon::find(std::uint64_t token)
{
	const auto it = conns_.find(token);
	return it == conns_.end() || it->second->dead ? nullptr : it->second.get();
}

void Daemon::dispatch(std::uint64_t token, std::uint32_t events, Time now)
{
	switch (token) {
	case T_NETLINK:
		if (!kernel_->receive()) {
			note("the netlink socket failed: exiting");
			stop_ = true;
			status_ = 1;
		}
		return;
	case T_LISTEN:
		accept_all(now);
		return;
	case T_TIMER: {
		std::uint64_t ticks;
		(void)!read(timer_.get(), &ticks, sizeof(ticks));
		return;
	}
	case T_VIA:
		accept_via(now);
		return;
	case T_SIGNAL: {
		signalfd_siginfo si;
		while (read(signal_.get(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
			const char *name = sigabbrev_np(static_cast<int>(si.ssi_signo));
			note("SIG%s: exiting", name ? name : "?");
			stop_ = true;
		}
		return;
	}
	default:
		if (token >= T_FIRST_DEVICE && token < T_FIRST_DEVICE + devs_.size()) {
			devs_[token - T_FIRST_DEVICE].dev->take_events();
			return;
		}
		// A carrier's socket: pump() after the events looks at it.
		if (Conn *c = find(token))
			on_conn(*c, events, now);
		return;
	}
}

// ---- connections other hosts' daemons dial ---------------------------------

void Daemon::accept_all(Time now)
{
	for (int i = 0; i < ACCEPT_BUDGET; i++) {
		sockaddr_in6 sa{};
		socklen_t len = sizeof(sa);
		Fd fd(accept4(listen_.get(), reinterpret_cast<sockaddr *>(&sa), &len,
			      SOCK_NONBLOCK | SOCK_CLOEXEC));
		if (!fd) {
			switch (errno) {
			case EAGAIN:
				return;
			case EINTR:
			case ECONNABORTED:
			case EPROTO:
				continue;
			case EMFILE:
			case ENFILE:
			case ENOBUFS:
			case ENOMEM:
				if (!logged_accept_failed_)
					note("control port: accept: %s; trying again every %lld ms",
					     std::strerror(errno),
					     static_cast<long long>(
						     std::chrono::duration_cast<milliseconds>(LISTEN_PAUSE)
							     .count()));
				logged_accept_failed_ = true;
				pause_listener(now);
				return;
			default:
				note("control port: accept: %s", std::strerror(errno));
				return;
			}
		}
		if (logged_accept_failed_)
			note("control port: accepting again");
		logged_accept_failed_ = false;
		if (len < sizeof(sa) || sa.sin6_family != AF_INET6)
			continue;
		const In6 host = in6_of(sa);
		const std::uint16_t port = ntohs(sa.sin6_port);
		if (inbound_ >= MAX_INBOUND) {
			if (!logged_inbound_full_)
				note("%zu sessions from other hosts: refusing more", MAX_INBOUND);
			logged_inbound_full_ = true;
			continue;
		}
		logged_inbound_full_ = false;
		std::size_t same = 0;
		for (const auto &[t, c] : conns_)
			same += !c->dead && c->role == sdlink::Role::ANSWERING && c->host == host;
		if (same >= MAX_INBOUND_PER_HOST) {
			if (!logged_host_full_)
				note("session from %s refused: it has %zu already", text(host, port).c_str(),
				     same);
			logged_host_full_ = true;
			continue;
		}
		logged_host_full_ = false;

		auto c = std::make_unique<Conn>();
		c->token = next_token_++;
		c->fd = std::move(fd);
		c->role = sdlink::Role::ANSWERING;
		c->host = host;
		c->port = port;
		c->phase = Phase::HELLO;
		c->phase_since = c->last_rx = c->last_use = now;

		// The key of this moment: `sdctl key set` counts for the
		// sessions that start after it.
		FabricKey key;
		const int err = kernel_->key(key);
		if (!err) {
			auto s = std::make_unique<sdlink::Session>(sdlink::Role::ANSWERING);
			const sdlink::Result<sdlink::Frame> hello = s->start(key.bytes());
			if (!hello) {
				note("session from %s: %s", text(host, port).c_str(),
				     sdlink::describe(hello.error()));
				continue;
			}
			c->session = std::move(s);
			c->tx.assign(hello->bytes().begin(), hello->bytes().end());
		} else if (err != ENOKEY) {
			note("session from %s: the fabric key: %s%s%s", text(host, port).c_str(),
			     std::strerror(err), kernel_->extack().empty() ? "" : ": ",
			     kernel_->extack().c_str());
			continue;
		}
		set_int(c->fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.u64 = c->token;
		if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) {
			note("epoll_ctl: %s", std::strerror(errno));
			continue;
		}
		debug("session %s %s: connected", role_name(c->role), text(host, port).c_str());
		Conn &ref = *c;
		conns_.emplace(c->token, std::move(c));
		inbound_++;
		flush(ref);
	}
}

void Daemon::pause_listener(Time now)
{
	epoll_event ev{};
	ev.data.u64 = T_LISTEN;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev) == 0) {
		listening_ = false;
		listen_resume_ = now + LISTEN_PAUSE;
	}
}

// ---- connections of either side ---------------------------------------------

void Daemon::on_conn(Conn &c, std::uint32_t events, Time now)
{
	if (c.phase == Phase::DIALING) {
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			err = errno;
		if (err) {
			end(c, dial_outcome(err), std::strerror(err));
			return;
		}
		on_connected(c, now);
		return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		on_readable(c, now);
	if (!c.dead && (events & EPOLLOUT))
		flush(c);
}

void Daemon::on_connected(Conn &c, Time now)
{
	debug("session to %s: connected", text(c.host, c.port).c_str());
	c.phase = Phase::HELLO;
	c.phase_since = c.last_rx = now;
	set_int(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
	flush(c);	// the HELLO, queued when dialling
}

void Daemon::on_readable(Conn &c, Time now)
{
	std::array<std::uint8_t, 4096> buf;
	for (std::size_t total = 0; total < READ_BUDGET && !c.dead;) {
		const ssize_t n = recv(c.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			end(c, session_outcome(sdlink::Err::OK, c.authenticated),
			    n == 0 ? "closed by the peer" : std::strerror(errno));
			return;
		}
		total += static_cast<std::size_t>(n);
		std::span<const std::uint8_t> rest(buf.data(), static_cast<std::size_t>(n));
		if (!c.session) {
			on_keyless(c, rest);
			return;
		}
		while (!c.dead) {
			const std::size_t took = c.session->feed(rest);
			rest = rest.subspan(took);
			std::size_t msgs = 0;
			for (;;) {
				const sdlink::Result<sdlink::Message> m = c.session->next();
				if (m.error() == sdlink::Err::INCOMPLETE)
					break;
				if (!m) {
					end(c, session_outcome(m.error(), c.authenticated),
					    sdlink::describe(m.error()));
					return;
				}
				msgs++;
				on_message(c, *m, now);
				if (c.dead)
					return;
			}
			if (rest.empty())
				break;
			if (!took && !msgs) {
				// Cannot happen: the session holds a whole frame.
				end(c, Outcome::FAILED, "receive buffer stuck");
				return;
			}
		}
	}
}

// An answering connection with no key here: the peer's HELLO (validated,
// so that the log tells a daemon from anything else), then the end.
void Daemon::on_keyless(Conn &c, std::span<const std::uint8_t> bytes)
{
	constexpr std::size_t HELLO_FRAME = sdlink::HEADER_LEN + sdlink::payload_len(sdlink::Type::HELLO);
	static_assert(HELLO_FRAME <= 4096);
	// Only the first frame's bytes matter; keep nothing but a count
	// and check what fits in this read (a HELLO is sent in one).
	if (c.keyless_in == 0) {
		const sdlink::Result<sdlink::FrameView> f = sdlink::split_frame(bytes);
		if (f && f->header.type == sdlink::Type::HELLO) {
			end(c, Outcome::NO_KEY, "no fabric key here: closed after its HELLO");
			return;
		}
		if (f.error() != sdlink::Err::INCOMPLETE) {
			end(c, Outcome::FAILED, "not a HELLO");
			return;
		}
	}
	c.keyless_in += bytes.size();
	if (c.keyless_in >= HELLO_FRAME)
		end(c, Outcome::NO_KEY, "no fabric key here: closed after its HELLO");
}

void Daemon::on_message(Conn &c, const sdlink::Message &m, Time now)
{
	using namespace sdlink;
	// Whole frames only keep a session alive: a peer that trickles bytes
	// of one is pinged, and cut off, like a silent one.
	c.last_rx = now;
	if (std::holds_alternative<Hello>(m)) {
		c.phase = Phase::UP;
		c.phase_since = now;
		debug("session %s %s: HELLOs exchanged, version %u", role_name(c.role),
		      text(c.host, c.port).c_str(), c.session->version());
		if (c.role == Role::CONNECTING) {
			std::vector<std::uint64_t> ids;
			for (const auto &[id, p] : pending_)
				if (p.conn == c.token && !p.sent)
					ids.push_back(id);
			for (const std::uint64_t id : ids) {
				const auto it = pending_.find(id);
				if (it != pending_.end() && !c.dead)
					ask(c, it->second);
			}
		}
		return;
	}
	if (!c.authenticated) {
		c.authenticated = true;
		if (c.role == Role::ANSWERING)
			peers_.forget(c.host);	// it runs a daemon
		note("session %s %s: up", role_name(c.role), text(c.host, c.port).c_str());
	}
	c.ping_out = false;

	if (const auto *req = std::get_if<Connect>(&m)) {
		if (c.role != Role::ANSWERING) {
			end(c, Outcome::FAILED, "a CONNECT on a session of ours");
			return;
		}
		send(c, answer(c, *req, now));
	} else if (const auto *a = std::get_if<Answer>(&m)) {
		if (c.role != Role::CONNECTING) {
			end(c, Outcome::FAILED, "an ANSWER on a session of the peer's");
			return;
		}
		on_answer(c, *a);
	} else if (const auto *cl = std::get_if<Close>(&m)) {
		on_close(c, *cl);
	} else if (const auto *r = std::get_if<Ready>(&m)) {
		on_ready(c, *r);
	} else if (const auto *ping = std::get_if<Ping>(&m)) {
		send(c, Pong{ping->cookie});
	} else if (const auto *pong = std::get_if<Pong>(&m)) {
		if (pong->cookie != c.ping_cookie)
			debug("session %s %s: a PONG we did not ask for", role_name(c.role),
			      text(c.host, c.port).c_str());
	}
}

void Daemon::on_answer(Conn &c, const sdlink::Answer &a)
{
	const auto it = pending_.find(a.id);
	if (it == pending_.end() || it->second.conn != c.token || !it->second.sent) {
		// Late (the connect's time ran out), or never asked: nothing
		// waits for it.
		debug("session to %s: an ANSWER for %llu, which nothing waits for",
		      text(c.host, c.port).c_str(), static_cast<unsigned long long>(a.id));
		// Let the peer free what it made for it.
		if (a.verdict == sdlink::Verdict::ACCEPT)
			send(c, sdlink::Close{a.id, sdlink::Reason::RESET});
		return;
	}
	const Pending p = it->second;
	pending_.erase(it);
	c.pending--;
	const Outcome o = outcome_of(a.verdict);
	if (o != Outcome::ACCEPTED || !p.dev) {
		if (o == Outcome::ACCEPTED)
			send(c, sdlink::Close{a.id, sdlink::Reason::RESET});
		decide(a.id, o);
		return;
	}
	// The program's connect goes into the VIA listener's queue; its
	// connection is carried once accept_via() takes it.
	const int err = kernel_->verdict_via(a.id, via_.get());
	const unsigned long long n = a.id;
	if (err) {
		if (err == ENOENT)
			debug("connect %llu: gave up before the verdict (via)", n);
		else
			note("connect %llu: verdict via: %s%s%s", n, std::strerror(err),
			     kernel_->extack().empty() ? "" : ": ", kernel_->extack().c_str());
		send(c, sdlink::Close{a.id, sdlink::Reason::RESET});
		return;
	}
	debug("connect %llu: via this daemon", n);
	Via v;
	v.conn = c.token;
	v.dev = p.dev;
	v.peer = a.endpoint;
	v.send_size = p.msg.send_size;
	v.recv_size = p.msg.recv_size;
	v.deadline = Clock::now() + kernel_bound();
	vias_[a.id] = v;
}

// Sends a connect's CONNECT on its session, now up.  Without an RDMA
// device for that peer it says so (ring sizes 0), and the peer, making
// nothing, answers what keeps the fallback reasons as they would be: no
// daemon, authentication, or NO_RDMA.
void Daemon::ask(Conn &c, Pending &p)
{
	p.sent = true;
	p.dev = device_for(c);
	if (!p.dev)
		p.msg.send_size = p.msg.recv_size = 0;
	send(c, p.msg);
}

// ---- this daemon's connects -------------------------------------------------

void Daemon::on_upcall(const Upcall &up, bool bad, Time now)
{
	const unsigned long long id = up.id;
	if (bad) {
		note("connect %llu: malformed upcall from the kernel", id);
		decide(up.id, Outcome::FAILED);
		return;
	}
	debug("connect %llu (uid %u) from %s to %s, rings %u and %u", id, up.uid,
	      text(up.local.addr, up.local.port).c_str(), text(up.remote.addr, up.remote.port).c_str(),
	      up.tx_size, up.rx_size);
	if (pending_.contains(up.id)) {
		note("connect %llu: asked about twice; ignoring the second", id);
		return;
	}
	if (peers_.no_daemon(up.remote.addr, now)) {
		debug("connect %llu: %s has no daemon (remembered)", id, text(up.remote.addr).c_str());
		decide(up.id, Outcome::NO_DAEMON);
		return;
	}
	if (pending_.size() >= MAX_PENDING) {
		if (!logged_pending_full_)
			note("%zu connects waiting for other hosts: the next go over TCP at once",
			     MAX_PENDING);
		logged_pending_full_ = true;
		decide(up.id, Outcome::FAILED);
		return;
	}
	logged_pending_full_ = false;

	Conn *c = nullptr;
	if (const auto it = outbound_.find(up.remote.addr); it != outbound_.end())
		c = find(it->second);
	if (!c) {
		Outcome why = Outcome::FAILED;
		c = dial(up.remote.addr, now, why);
		if (!c) {
			decide(up.id, why);
			return;
		}
	}
	Pending p;
	p.conn = c->token;
	p.deadline = now + kernel_bound();
	p.msg.id = up.id;
	p.msg.src = up.local;
	p.msg.dst = up.remote;
	p.msg.uid = up.uid;
	p.msg.gid = up.gid;
	// The program's rings, which the peer mirrors.  A module that does
	// not say gives them net.sd.ring_size, unless the program set
	// SO_SNDBUF or SO_RCVBUF: then accept_via() finds them otherwise,
	// and resets it.
	if (up.tx_size) {
		p.msg.send_size = up.tx_size;
		p.msg.recv_size = up.rx_size;
	} else {
		p.msg.send_size = p.msg.recv_size = ring_size();
	}
	c->pending++;
	c->last_use = now;
	auto [it, fresh] = pending_.emplace(up.id, p);
	if (c->phase == Phase::UP && !c->dead)
		ask(*c, it->second);
}

Daemon::Conn *Daemon::dial(const In6 &host, Time now, Outcome &why)
{
	why = Outcome::FAILED;
	if (outbound_.size() >= MAX_OUTBOUND && !make_room()) {
		if (!logged_outbound_full_)
			note("%zu sessions to other hosts, all busy: connects to new hosts go over TCP",
			     MAX_OUTBOUND);
		logged_outbound_full_ = true;
		return nullptr;
	}
	logged_outbound_full_ = false;

	FabricKey key;
	if (const int err = kernel_->key(key)) {
		if (err == ENOKEY) {
			why = Outcome::NO_KEY;
			if (!logged_no_key_)
				note("no fabric key in this namespace (sdctl key set): connects to other "
				     "hosts go over TCP");
			logged_no_key_ = true;
		} else {
			note("the fabric key: %s%s%s", std::strerror(err),
			     kernel_->extack().empty() ? "" : ": ", kernel_->extack().c_str());
		}
		return nullptr;
	}
	logged_no_key_ = false;
	auto session = std::make_unique<sdlink::Session>(sdlink::Role::CONNECTING);
	const sdlink::Result<sdlink::Frame> hello = session->start(key.bytes());
	if (!hello) {
		note("session to %s: %s", text(host).c_str(), sdlink::describe(hello.error()));
		return nullptr;
	}

	Fd fd(socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (!fd) {
		note("session to %s: socket: %s", text(host).c_str(), std::strerror(errno));
		return nullptr;
	}
	set_int(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0);
	const sockaddr_in6 sa = sockaddr_of(host, opt_.port);
	const int rc = connect(fd.get(), reinterpret_cast<const sockaddr *>(&sa), sizeof(sa));
	if (rc != 0 && errno != EINPROGRESS) {
		const int err = errno;
		why = dial_outcome(err);
		if (why == Outcome::NO_DAEMON) {
			peers_.remember(host, now);
			note("session to %s: %s: no daemon there%s", text(host, opt_.port).c_str(),
			     std::strerror(err), peers_.ttl() > Duration::zero() ? " (remembered)" : "");
		} else {
			note("session to %s: %s", text(host, opt_.port).c_str(), std::strerror(err));
		}
		return nullptr;
	}

	auto c = std::make_unique<Conn>();
	c->token = next_token_++;
	c->fd = std::move(fd);
	c->role = sdlink::Role::CONNECTING;
	c->host = host;
	c->port = opt_.port;
	c->phase = Phase::DIALING;
	c->phase_since = c->last_rx = c->last_use = now;
	c->session = std::move(session);
	c->tx.assign(hello->bytes().begin(), hello->bytes().end());
	epoll_event ev{};
	ev.events = EPOLLIN | EPOLLOUT;
	ev.data.u64 = c->token;
	c->want_out = true;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) {
		note("epoll_ctl: %s", std::strerror(errno));
		return nullptr;
	}
	debug("session to %s: dialling", text(host, opt_.port).c_str());
	Conn &ref = *c;
	conns_.emplace(c->token, std::move(c));
	outbound_[host] = ref.token;
	if (rc == 0)
		on_connected(ref, now);
	return &ref;
}

// Ends the least recently used dialled session that no connect waits on.
bool Daemon::make_room()
{
	Conn *lru = nullptr;
	for (const auto &[host, token] : outbound_) {
		Conn *c = find(token);
		if (c && !c->pending && !c->links && (!lru || c->last_use < lru->last_use))
			lru = c;
	}
	if (!lru)
		return false;
	end(*lru, Outcome::FAILED, "making room for another host");
	return true;
}

// ---- sending ----------------------------------------------------------------

bool Daemon::send(Conn &c, const sdlink::Message &m)
{
	if (c.dead)
		return false;
	const sdlink::Result<sdlink::Frame> f = c.session->seal(m);
	if (!f) {
		end(c, Outcome::FAILED, sdlink::describe(f.error()));
		return false;
	}
	if (!queue(c, f->bytes()))
		return false;
	flush(c);
	return !c.dead;
}

bool Daemon::queue(Conn &c, std::span<const std::uint8_t> bytes)
{
	if (c.tx.size() + bytes.size() > TX_MAX) {
		end(c, Outcome::FAILED, "the peer does not read");
		return false;
	}
	c.tx.insert(c.tx.end(), bytes.begin(), bytes.end());
	return true;
}

void Daemon::flush(Conn &c)
{
	if (c.dead || c.phase == Phase::DIALING)
		return;
	std::size_t off = 0;
	while (off < c.tx.size()) {
		const ssize_t n = ::send(c.fd.get(), c.tx.data() + off, c.tx.size() - off,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			end(c, session_outcome(sdlink::Err::OK, c.authenticated), std::strerror(errno));
			return;
		}
		off += static_cast<std::size_t>(n);
	}
	c.tx.erase(c.tx.begin(), c.tx.begin() + static_cast<std::ptrdiff_t>(off));
	watch(c);
}

// EPOLLOUT while bytes wait to go (or the dial to complete).
void Daemon::watch(Conn &c)
{
	const bool want = c.phase == Phase::DIALING || !c.tx.empty();
	if (want == c.want_out)
		return;
	epoll_event ev{};
	ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
	ev.data.u64 = c.token;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) == 0)
		c.want_out = want;
}

// ---- endings ----------------------------------------------------------------

void Daemon::end(Conn &c, Outcome o, const char *why)
{
	if (c.dead)
		return;
	c.dead = true;
	c.end = o;
	dead_.push_back(c.token);
	if (c.role == sdlink::Role::CONNECTING) {
		if (const auto it = outbound_.find(c.host); it != outbound_.end() && it->second == c.token)
			outbound_.erase(it);
		if (o == Outcome::NO_DAEMON)
			peers_.remember(c.host, Clock::now());
	}
	const AddrText peer = text(c.host, c.port);
	if (o == Outcome::NO_DAEMON)
		note("session to %s: %s: no daemon there%s", peer.c_str(), why,
		     peers_.ttl() > Duration::zero() ? " (remembered)" : "");
	else if (o == Outcome::AUTH && std::strcmp(why, sdlink::describe(sdlink::Err::AUTH)) == 0)
		note("session %s %s: %s (different fabric keys?)", role_name(c.role), peer.c_str(), why);
	else if (o == Outcome::AUTH)
		note("session %s %s: %s: authentication failed (different fabric keys?)",
		     role_name(c.role), peer.c_str(), why);
	else if (c.authenticated || c.pending || o != Outcome::FAILED || c.role == sdlink::Role::ANSWERING)
		note("session %s %s: %s", role_name(c.role), peer.c_str(), why);
	else
		debug("session %s %s: %s", role_name(c.role), peer.c_str(), why);
}

void Daemon::reap()
{
	while (!dead_.empty()) {
		const std::uint64_t token = dead_.back();
		dead_.pop_back();
		const auto it = conns_.find(token);
		if (it == conns_.end())
			continue;
		std::unique_ptr<Conn> c = std::move(it->second);
		conns_.erase(it);
		if (c->role == sdlink::Role::ANSWERING)
			inbound_--;
		(void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
		drop_links(token);
		std::vector<std::uint64_t> ids;
		for (const auto &[id, p] : pending_)
			if (p.conn == token)
				ids.push_back(id);
		for (const std::uint64_t id : ids) {
			pending_.erase(id);
			decide(id, c->end);
		}
	}
}

void Daemon::decide(std::uint64_t id, Outcome o)
{
	const KernelVerdict v = kernel_verdict(o);
	const int err = kernel_->verdict(id, v.verdict, v.reason);
	const unsigned long long n = id;
	if (!err)
		debug("connect %llu: TCP, %s: %s", n, reason_name(v.reason), describe(o));
	else if (err == ENOENT)
		debug("connect %llu: gave up before the verdict (%s)", n, reason_name(v.reason));
	else
		note("connect %llu: verdict: %s%s%s", n, std::strerror(err),
		     kernel_->extack().empty() ? "" : ": ", kernel_->extack().c_str());
}

// ---- time -------------------------------------------------------------------

Duration Daemon::kernel_bound() const
{
	return read_kernel_bound();
}

void Daemon::expire(Time now)
{
	std::vector<std::uint64_t> late;
	for (const auto &[id, p] : pending_)
		if (now >= p.deadline)
			late.push_back(id);
	for (const std::uint64_t id : late) {
		const auto it = pending_.find(id);
		if (Conn *c = find(it->second.conn))
			c->pending--;
		pending_.erase(it);
		decide(id, Outcome::TIMEOUT);
	}
	expire_links(now);

	for (const auto &[token, cp] : conns_) {
		Conn &c = *cp;
		if (c.dead)
			continue;
		switch (c.phase) {
		case Phase::DIALING:
			if (now >= c.phase_since + DIAL_TIMEOUT)
				end(c, Outcome::NO_DAEMON, "no answer to the TCP connect");
			break;
		case Phase::HELLO:
			if (now >= c.phase_since + HELLO_TIMEOUT)
				end(c, Outcome::FAILED, "no HELLO in time");
			break;
		case Phase::UP:
			if (c.ping_out && now >= c.ping_sent + KEEPALIVE_TIMEOUT) {
				end(c, Outcome::FAILED, "no answer to a ping");
			} else if (!c.ping_out && now >= c.last_rx + KEEPALIVE_IDLE) {
				c.ping_out = true;
				c.ping_sent = now;
				c.ping_cookie = next_cookie_++;
				send(c, sdlink::Ping{c.ping_cookie});
			}
			if (!c.dead && c.role == sdlink::Role::CONNECTING && !c.pending && !c.links &&
			    now >= c.last_use + OUTBOUND_IDLE)
				end(c, Outcome::FAILED, "idle");
			break;
		}
	}

	if (!listening_ && now >= listen_resume_) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.u64 = T_LISTEN;
		if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev) == 0)
			listening_ = true;
	}
}

Time Daemon::next_deadline() const
{
	Time t = Time::max();
	for (const auto &[id, p] : pending_)
		t = std::min(t, p.deadline);
	for (const auto &[token, cp] : conns_) {
		const Conn &c = *cp;
		if (c.dead)
			continue;
		switch (c.phase) {
		case Phase::DIALING:
			t = std::min(t, c.phase_since + DIAL_TIMEOUT);
			break;
		case Phase::HELLO:
			t = std::min(t, c.phase_since + HELLO_TIMEOUT);
			break;
		case Phase::UP:
			t = std::min(t, c.ping_out ? c.ping_sent + KEEPALIVE_TIMEOUT
						   : c.last_rx + KEEPALIVE_IDLE);
			if (c.role == sdlink::Role::CONNECTING && !c.pending && !c.links)
				t = std::min(t, c.last_use + OUTBOUND_IDLE);
			break;
		}
	}
	if (!listening_)
		t = std::min(t, listen_resume_);
	return std::min(t, links_deadline());
}

void Daemon::arm_timer(Time now)
{
	itimerspec its{};
	const Time t = next_deadline();
	if (t != Time::max()) {
		// CLOCK_MONOTONIC is steady_clock's; a deadline past or now
		// fires at once (a zero it_value would disarm).
		const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
					std::max(t, now).time_since_epoch())
					.count();
		its.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
		its.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
		if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
			its.it_value.tv_nsec = 1;
	}
	if (timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr) != 0)
		note("timerfd_settime: %s", std::strerror(errno));
}

void Daemon::settle(Time now)
{
	for (;;) {
		reap();
		Upcall up;
		bool bad = false;
		if (stop_ || !kernel_->next_upcall(up, bad))
			return;
		on_upcall(up, bad, now);
	}
}

} // namespace sdlinkd
