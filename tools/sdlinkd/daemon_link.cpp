// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's data path (daemon.hpp; Documentation/sdlinkd.rst, "The data
// path").  For a connect of this host the peer accepted:
//
//   connecting daemon                         answering daemon
//   CONNECT id, addresses, user, ring sizes ->
//                                             SD_LINK_CMD_INCOMING, its
//                                             carrier (queue pair, rings)
//                       <- ANSWER ACCEPT, its endpoint
//   SD_LINK_VIA; accept the connection from
//   the VIA listener, its carrier, connect
//   its queue pair
//   READY id, its endpoint ->
//                                             connect its queue pair
//                       <- READY id (no endpoint)
//   forward too
//
// The connecting side forwards nothing before the answering side's READY,
// so that no write reaches a queue pair not yet ready to receive it.
// Whatever fails after the verdict resets the program's connection (the
// carrier closes the daemon's end with SO_LINGER 0) and tells the peer
// (CLOSE RESET), which resets its end.
#include "daemon.hpp"

#include <infiniband/verbs.h>
#include <linux/sd.h>
#include <linux/sd_link.h>

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "log.hpp"

namespace sdlinkd {
namespace {

// Closes fd so that its connection is reset (the program sees ECONNRESET).
void abort_close(Fd &fd)
{
	if (!fd)
		return;
	const linger l = {1, 0};
	setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	fd.reset();
}

bool link_local(const ibv_gid &g)
{
	return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
}

bool zero(const ibv_gid &g)
{
	for (const std::uint8_t b : g.raw)
		if (b)
			return false;
	return true;
}

// One GID table entry: false when there is none at index.
bool gid_at(ibv_context *ctx, int index, ibv_gid &gid, bool &v2)
{
	ibv_gid_entry e{};
	if (ibv_query_gid_ex(ctx, 1, static_cast<std::uint32_t>(index), &e, 0) == 0) {
		gid = e.gid;
		v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
		return !zero(gid);
	}
	// An older kernel: the table alone, the type unknown.
	if (ibv_query_gid(ctx, 1, index, &gid) != 0)
		return false;
	v2 = true;
	return !zero(gid);
}

// The device and GID index to carry connections of a session whose local
// address is local: the first device (or the one named) whose port 1 has
// local in its GID table, RoCE v2 first; for a named device without it,
// its first global RoCE v2 GID.
bool find_gid(const char *named, const In6 &local, std::string &name, int &index)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return false;
	bool found = false;
	for (int i = 0; i < n && !found; i++) {
		const char *dname = ibv_get_device_name(list[i]);
		if (*named && std::strcmp(dname, named) != 0)
			continue;
		ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		ibv_port_attr port{};
		int match = -1, match_v1 = -1, other = -1;
		if (ibv_query_port(ctx, 1, &port) == 0) {
			for (int g = 0; g < port.gid_tbl_len; g++) {
				ibv_gid gid{};
				bool v2 = false;
				if (!gid_at(ctx, g, gid, v2))
					continue;
				if (std::memcmp(gid.raw, local.data(), local.size()) == 0) {
					if (v2 && match < 0)
						match = g;
					else if (match_v1 < 0)
						match_v1 = g;
				} else if (v2 && !link_local(gid) && other < 0) {
					other = g;
				}
			}
		}
		ibv_close_device(ctx);
		if (match < 0)
			match = match_v1;
		if (match < 0 && *named)
			match = other;
		if (match >= 0) {
			name = dname;
			index = match;
			found = true;
		}
	}
	ibv_free_device_list(list);
	return found;
}

std::uint32_t read_ring_size()
{
	std::FILE *f = std::fopen("/proc/sys/net/sd/ring_size", "re");
	if (!f)
		return DEFAULT_RING_SIZE;
	char buf[32] = {};
	const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
	std::fclose(f);
	std::uint32_t v = 0;
	const auto [end, ec] = std::from_chars(buf, buf + n, v);
	if (ec != std::errc() || end == buf || !v || (v & (v - 1)))
		return DEFAULT_RING_SIZE;
	return v;
}

} // namespace

std::uint32_t Daemon::ring_size() const
{
	return read_ring_size();
}

// The listener whose queue takes the connections of this host's carried
// connects (SD_LINK_VIA): a native AF_SD socket on 127.0.0.1.
bool Daemon::setup_via(std::string &error)
{
	if (opt_.no_rdma)
		return true;
	via_.reset(socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!via_ || bind(via_.get(), reinterpret_cast<const sockaddr *>(&sa), sizeof(sa)) != 0 ||
	    listen(via_.get(), SOMAXCONN) != 0) {
		error = std::string("the VIA listener: ") + std::strerror(errno);
		return false;
	}
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.u64 = T_VIA;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, via_.get(), &ev) != 0) {
		error = std::string("epoll_ctl: ") + std::strerror(errno);
		return false;
	}
	return true;
}

sdlink::Device *Daemon::device_for(Conn &c)
{
	if (opt_.no_rdma)
		return nullptr;
	if (c.dev_known)
		return c.dev;
	c.dev_known = true;
	sockaddr_in6 sa{};
	socklen_t len = sizeof(sa);
	In6 local{};
	if (getsockname(c.fd.get(), reinterpret_cast<sockaddr *>(&sa), &len) == 0 &&
	    sa.sin6_family == AF_INET6)
		local = in6_of(sa);
	std::string name;
	int index = -1;
	if (!find_gid(opt_.rdma_device.data(), local, name, index)) {
		if (!logged_no_device_) {
			if (opt_.rdma_device[0])
				note("RDMA device %s: not found, or no global GID: connects go over TCP",
				     opt_.rdma_device.data());
			else
				note("no RDMA device has %s in its GID table: connects over it go over TCP",
				     text(local).c_str());
		}
		logged_no_device_ = true;
		return nullptr;
	}
	for (const Dev &d : devs_)
		if (d.name == name && d.gid_index == index)
			return c.dev = d.dev.get();
	if (devs_.size() >= MAX_DEVICES)
		return nullptr;
	int err = 0;
	std::unique_ptr<sdlink::Device> dev = sdlink::Device::open(name.c_str(), index, DEVICE_CQ_LEN, &err);
	if (!dev)
		dev = sdlink::Device::open(name.c_str(), index, MIN_CQ_LEN, &err);
	if (!dev) {
		note("RDMA device %s: %s: connects go over TCP", name.c_str(), std::strerror(-err));
		return nullptr;
	}
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.u64 = T_FIRST_DEVICE + devs_.size();
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, dev->event_fd(), &ev) != 0) {
		note("epoll_ctl: %s", std::strerror(errno));
		return nullptr;
	}
	note("RDMA device %s, GID index %d, carries connections", name.c_str(), index);
	logged_no_device_ = false;
	devs_.push_back(Dev{name, index, std::move(dev)});
	return c.dev = devs_.back().dev.get();
}

// ---- the answering side -------------------------------------------------------

// What this host answers a connect of a program of the peer host: its end
// of the connection, in the listener's queue (SD_LINK_CMD_INCOMING, with
// rings the size of the connecting program's), and the carrier of it.
sdlink::Answer Daemon::answer(Conn &c, const sdlink::Connect &req, Time now)
{
	using sdlink::Verdict;
	const unsigned long long n = req.id;
	sdlink::Answer a{req.id, Verdict::NO_RDMA, {}};
	sdlink::Device *dev = req.send_size ? device_for(c) : nullptr;
	if (!dev || find_link(c, req.id)) {
		debug("connect %llu from %s: NO_RDMA", n, text(c.host).c_str());
		return a;
	}
	if (links_.size() >= MAX_LINKS) {
		if (!logged_links_full_)
			note("%zu connections carried: the next go over TCP", MAX_LINKS);
		logged_links_full_ = true;
		a.verdict = Verdict::BUSY;
		return a;
	}
	logged_links_full_ = false;
	Fd fd(socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (!fd) {
		note("connect %llu from %s: socket: %s", n, text(c.host).c_str(), std::strerror(errno));
		return a;
	}
	std::uint64_t kid = 0;
	const int err = kernel_->incoming(fd.get(), req.dst, req.src, req.uid, req.gid, req.send_size,
					  req.recv_size, &kid);
	switch (err) {
	case 0:
		break;
	case ECONNREFUSED: a.verdict = Verdict::REFUSED; break;
	case EACCES: a.verdict = Verdict::DENIED; break;
	case EOPNOTSUPP: a.verdict = Verdict::POLICY; break;
	case EAGAIN: a.verdict = Verdict::BUSY; break;
	default:
		note("connect %llu from %s: incoming: %s%s%s", n, text(c.host).c_str(), std::strerror(err),
		     kernel_->extack().empty() ? "" : ": ", kernel_->extack().c_str());
		break;
	}
	if (err) {
		debug("connect %llu from %s (uid %u) to %s: %s", n, text(c.host).c_str(), req.uid,
		      text(req.dst.addr, req.dst.port).c_str(), std::strerror(err));
		return a;
	}
	int cerr = 0;
	std::unique_ptr<sdlink::Carrier> car = sdlink::Carrier::create(*dev, fd.release(), &cerr);
	if (!car) {
		// The connection was made, and is reset: the program may have
		// accepted it already.  The connecting program goes over TCP.
		note("connect %llu from %s: its carrier: %s", n, text(c.host).c_str(), std::strerror(-cerr));
		return a;
	}
	// The peer's READY must come within its own bound on the connect,
	// and a keepalive's.
	Link *l = add_link(c, req.id, sdlink::Role::ANSWERING, std::move(car),
			   now + kernel_bound() + KEEPALIVE_TIMEOUT);
	if (!l)
		return a;
	debug("connect %llu from %s (uid %u) to %s: accepted, connection %llu", n, text(c.host).c_str(),
	      req.uid, text(req.dst.addr, req.dst.port).c_str(), static_cast<unsigned long long>(kid));
	a.verdict = Verdict::ACCEPT;
	a.endpoint = l->carrier->endpoint();
	return a;
}

// ---- the connecting side ----------------------------------------------------

// The connections of this host's carried connects, as the program's
// connects complete into the VIA listener's queue.
void Daemon::accept_via(Time now)
{
	for (int i = 0; i < ACCEPT_BUDGET; i++) {
		Fd fd(accept4(via_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
		if (!fd) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				note("the VIA listener: accept: %s", std::strerror(errno));
			return;
		}
		std::uint64_t id = 0;
		socklen_t len = sizeof(id);
		if (getsockopt(fd.get(), SOL_SD, SD_LINK_ID, &id, &len) != 0 || len != sizeof(id)) {
			debug("the VIA listener: a connection without its id: %s", std::strerror(errno));
			abort_close(fd);
			continue;
		}
		const unsigned long long n = id;
		const auto it = vias_.find(id);
		if (it == vias_.end()) {
			debug("connect %llu: its connection came, but nothing waits for it", n);
			abort_close(fd);
			continue;
		}
		const Via v = it->second;
		vias_.erase(it);
		Conn *c = find(v.conn);
		if (!c) {
			abort_close(fd);
			continue;
		}
		// The program's rings must be the ones the peer mirrors.
		sd_mmap_offsets off{};
		socklen_t olen = sizeof(off);
		if (getsockopt(fd.get(), SOL_SD, SD_MMAP_OFFSETS, &off, &olen) != 0 ||
		    off.rx.size != v.send_size || off.tx.size != v.recv_size) {
			note("connect %llu: the program's rings are %llu and %llu bytes, not %u and %u "
			     "(SO_SNDBUF or SO_RCVBUF): reset",
			     n, static_cast<unsigned long long>(off.rx.size),
			     static_cast<unsigned long long>(off.tx.size), v.send_size, v.recv_size);
			counters_.mismatched++;
			abort_close(fd);
			tell_reset(c->token, id);
			continue;
		}
		int err = 0;
		std::unique_ptr<sdlink::Carrier> car = sdlink::Carrier::create(*v.dev, fd.release(), &err);
		if (!car) {
			note("connect %llu: its carrier: %s: reset", n, std::strerror(-err));
			tell_reset(c->token, id);
			continue;
		}
		err = car->connect(v.peer);
		if (err) {
			note("connect %llu: the peer's endpoint: %s: reset", n, std::strerror(-err));
			tell_reset(c->token, id);
			continue;
		}
		Link *l = add_link(*c, id, sdlink::Role::CONNECTING, std::move(car),
				   now + KEEPALIVE_IDLE + KEEPALIVE_TIMEOUT);
		if (!l) {
			tell_reset(c->token, id);
			continue;
		}
		debug("connect %llu: carried, queue pair connected", n);
		send(*c, sdlink::Ready{id, l->carrier->endpoint()});
	}
}

// READY: on a session of the peer's, the connecting side's endpoint (its
// queue pair is connected: connect ours, and say so); on one of ours, the
// answering side did.
void Daemon::on_ready(Conn &c, const sdlink::Ready &r)
{
	const unsigned long long n = r.id;
	Link *l = find_link(c, r.id);
	if (!l || l->go) {
		// Reset meanwhile (a CLOSE RESET crosses this), or never made.
		debug("session %s %s: READY for %llu, which nothing waits for",
		      c.role == sdlink::Role::CONNECTING ? "to" : "from", text(c.host, c.port).c_str(), n);
		return;
	}
	if (c.role == sdlink::Role::ANSWERING) {
		const int err = l->carrier->connect(r.endpoint);
		if (err) {
			note("connect %llu from %s: the peer's endpoint: %s: reset", n, text(c.host).c_str(),
			     std::strerror(-err));
			return;		// the carrier reset: pump() finishes it
		}
		send(c, sdlink::Ready{r.id, {}});
	}
	l->go = true;
	counters_.carried++;
	debug("connect %llu: carried", n);
}

void Daemon::on_close(Conn &c, const sdlink::Close &cl)
{
	debug("session %s %s: CLOSE %s of %llu", c.role == sdlink::Role::CONNECTING ? "to" : "from",
	      text(c.host, c.port).c_str(), cl.reason == sdlink::Reason::RESET ? "RESET" : "FIN",
	      static_cast<unsigned long long>(cl.id));
	if (cl.reason != sdlink::Reason::RESET)
		return;
	if (c.role == sdlink::Role::CONNECTING) {
		const auto it = vias_.find(cl.id);
		if (it != vias_.end() && it->second.conn == c.token)
			vias_.erase(it);	// its connection is reset when it comes
	}
	if (Link *l = find_link(c, cl.id)) {
		l->peer_told = true;
		l->carrier->reset(-ECONNRESET);
	}
}

// ---- carried connections ----------------------------------------------------

Daemon::Link *Daemon::add_link(Conn &c, std::uint64_t id, sdlink::Role role,
			       std::unique_ptr<sdlink::Carrier> carrier, Time deadline)
{
	auto l = std::make_unique<Link>();
	l->token = next_token_++;
	l->conn = c.token;
	l->id = id;
	l->role = role;
	l->deadline = deadline;
	l->carrier = std::move(carrier);
	epoll_event ev{};
	ev.events = sdlink::Carrier::epoll_events();
	ev.data.u64 = l->token;
	if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, l->carrier->fd(), &ev) != 0) {
		note("epoll_ctl: %s", std::strerror(errno));
		return nullptr;		// the carrier goes, and resets
	}
	Link *ref = l.get();
	link_ids_[{c.token, id}] = l->token;
	links_.emplace(l->token, std::move(l));
	c.links++;
	busy_at_ = Clock::now();	// its first message finds the loop polling
	return ref;
}

Daemon::Link *Daemon::find_link(const Conn &c, std::uint64_t id)
{
	const auto it = link_ids_.find({c.token, id});
	if (it == link_ids_.end())
		return nullptr;
	const auto l = links_.find(it->second);
	return l == links_.end() ? nullptr : l->second.get();
}

void Daemon::tell_reset(std::uint64_t conn, std::uint64_t id)
{
	if (Conn *c = find(conn))
		send(*c, sdlink::Close{id, sdlink::Reason::RESET});
}

// A session ended: every connection it carried is reset (the peer's
// daemon does the same with its own when it notices).
void Daemon::drop_links(std::uint64_t conn)
{
	for (auto it = vias_.begin(); it != vias_.end();)
		it = it->second.conn == conn ? vias_.erase(it) : std::next(it);
	for (auto &[token, l] : links_) {
		if (l->conn != conn)
			continue;
		l->peer_told = true;
		l->carrier->reset(-ECONNRESET);
	}
}

// One step of every carrier; the ones that ended go.  True if anything
// moved.
bool Daemon::pump()
{
	if (links_.empty())
		return false;
	bool busy = false;
	for (const Dev &d : devs_)
		busy |= d.dev->poll();
	std::vector<std::uint64_t> over;
	for (auto &[token, l] : links_) {
		sdlink::Carrier &car = *l->carrier;
		if (l->go && car.state() == sdlink::State::RUNNING)
			busy |= car.poll();
		if (car.state() == sdlink::State::DONE || car.state() == sdlink::State::RESET)
			over.push_back(token);
	}
	for (const std::uint64_t token : over) {
		const auto it = links_.find(token);
		finish(*it->second);
		links_.erase(it);
	}
	return busy || !over.empty();
}

// Before sleeping: every device asked for an event, every running carrier
// for a wake-up.  False if work came meanwhile.
bool Daemon::may_sleep()
{
	if (links_.empty())
		return true;
	bool sleep = true;
	for (const Dev &d : devs_)
		if (d.dev->arm())
			sleep = false;
	for (auto &[token, l] : links_)
		if (l->go && l->carrier->state() == sdlink::State::RUNNING &&
		    !l->carrier->prepare_sleep())
			sleep = false;
	return sleep;
}

void Daemon::finish(Link &l)
{
	const sdlink::Carrier &car = *l.carrier;
	const sdlink::Counters &k = car.counters();
	counters_.writes += k.writes;
	counters_.bytes += k.bytes;
	counters_.copies += k.copies;
	counters_.wakes += k.wakes;
	counters_.syscalls += k.syscalls;
	const unsigned long long n = l.id;
	// Not DONE: reset, or being reset (at exit the queue does not drain).
	if (car.state() != sdlink::State::DONE) {
		counters_.resets++;
		debug("connect %llu: reset (%s: %s)", n, std::strerror(-car.error()), car.reason());
		if (!l.peer_told)
			tell_reset(l.conn, l.id);
	} else {
		debug("connect %llu: done, %llu bytes sent in %llu writes", n,
		      static_cast<unsigned long long>(k.bytes), static_cast<unsigned long long>(k.writes));
	}
	if (const auto it = conns_.find(l.conn); it != conns_.end())
		it->second->links--;
	link_ids_.erase({l.conn, l.id});
}

// A carrier whose peer did not take the next step in time is reset.
void Daemon::expire_links(Time now)
{
	for (auto it = vias_.begin(); it != vias_.end();) {
		if (now < it->second.deadline) {
			++it;
			continue;
		}
		debug("connect %llu: its connection never came", static_cast<unsigned long long>(it->first));
		tell_reset(it->second.conn, it->first);
		it = vias_.erase(it);
	}
	for (auto &[token, l] : links_) {
		if (l->go || now < l->deadline || l->carrier->state() != sdlink::State::NEW)
			continue;
		note("connect %llu: no READY in time: reset", static_cast<unsigned long long>(l->id));
		l->carrier->reset(-ETIMEDOUT);
	}
}

Time Daemon::links_deadline() const
{
	Time t = Time::max();
	for (const auto &[id, v] : vias_)
		t = std::min(t, v.deadline);
	for (const auto &[token, l] : links_)
		if (!l->go)
			t = std::min(t, l->deadline);
	return t;
}

// Exiting: every carried connection is reset, and the peers told.
void Daemon::stop_links()
{
	for (auto &[token, l] : links_) {
		if (!l->peer_told)
			tell_reset(l->conn, l->id);
		l->peer_told = true;
		l->carrier->reset(-ECONNRESET);
		finish(*l);
	}
	links_.clear();
	for (const auto &[id, v] : vias_)
		tell_reset(v.conn, id);
	vias_.clear();
	if (verbose())
		note("counters: carried %llu writes %llu bytes %llu copies %llu wakes %llu syscalls %llu "
		     "sleeps %llu resets %llu mismatched %llu",
		     static_cast<unsigned long long>(counters_.carried),
		     static_cast<unsigned long long>(counters_.writes),
		     static_cast<unsigned long long>(counters_.bytes),
		     static_cast<unsigned long long>(counters_.copies),
		     static_cast<unsigned long long>(counters_.wakes),
		     static_cast<unsigned long long>(counters_.syscalls),
		     static_cast<unsigned long long>(counters_.sleeps),
		     static_cast<unsigned long long>(counters_.resets),
		     static_cast<unsigned long long>(counters_.mismatched));
}

} // namespace sdlinkd
