// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Readiness without system calls: poll, ppoll, select, pselect and the
// epoll_wait family look at the mapped rings of AF_SD connections in user
// space (Documentation/libsd.rst, "Readiness").
//
// The kernel's poll (sd_poll) is the reference, as for the data calls.
// User space answers only for a connection in the plain state (both ways
// open, no reset, no error), only for the sides this process drives (it
// holds their tokens), and only with the two answers the rings give
// there: readable (POLLIN) and writable (POLLOUT, by the kernel's
// threshold).  Every other descriptor and every other state is the
// kernel's to answer.  A call then goes like this:
//
//   - something of ours is ready: the other descriptors, if any, are
//     asked with one non-blocking call, the answers merged, and the call
//     returns; with none, it returns without entering the kernel;
//   - nothing of ours is ready and there are no other descriptors: spin
//     and yield as recv does (SPIN_NS), then sleep in the kernel;
//   - nothing of ours is ready and there are others: sleep in the kernel
//     at once (spinning on the rings would delay the others' events).
//
// Sleeping is always the kernel's call on the whole set, so no wake-up is
// lost: sd_poll sets READER_WAIT or NEED_CREDIT on any ring it finds idle,
// and a writer in user space then wakes the sleeper (rules 3 and 4 of
// <linux/sd.h>).
//
// epoll needs the interest list, which the kernel does not show: the shim
// tracks it for epoll fds created in this process (epoll_create and
// epoll_ctl), keyed to the fd's generation in the descriptor table so that
// a close, dup or replacement of the epoll fd drops it.  A member closed
// without EPOLL_CTL_DEL is taken as gone (ep_prune).  fork drops every
// tracked list in both processes, since they now share the kernel's.  An
// epoll fd the shim does not track goes to the kernel as before.
#include "hooks.hpp"

#include "fast.hpp"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

namespace sd::shim::fast {

namespace {

constexpr int EV_IN = POLLIN | POLLRDNORM;
constexpr int EV_OUT = POLLOUT | POLLWRNORM;
static_assert(EV_IN == (EPOLLIN | EPOLLRDNORM) && EV_OUT == (EPOLLOUT | EPOLLWRNORM));

// The kernel's writable threshold (sd_tx_writable in kernel/sd_data.c).
constexpr std::uint64_t TX_MIN_SPACE = SD_REC_HDR_LEN + SD_REC_ALIGN;

// At most this many descriptors in a poll or select, and members in an
// epoll set, are looked at in user space; larger sets go to the kernel,
// whose epoll costs nothing per idle member.
constexpr unsigned MAX_SET = 256;
// At most this many members the kernel answers for in a tracked epoll set.
constexpr unsigned MAX_KERNEL = 16;

std::uint32_t flags_of(const std::uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

// What sd_poll would report for fd among want (EV_IN, EV_OUT), from the
// rings alone; -1 when they cannot tell and the kernel must answer.
int ring_events(int fd, unsigned want)
{
	Conn *c = lookup(fd);

	if (!c || c->rd_shut.load(std::memory_order_relaxed) ||
	    c->wr_shut.load(std::memory_order_relaxed))
		return -1;
	// The receive side's lock first: while it is held the rings stay
	// mapped (a close of fd unmaps them only when no call is inside).  A
	// thread of ours busy on the side: let the kernel say.
	Side &rs = c->rx;
	if (!rs.lock.try_lock())
		return -1;
	int got = -1;
	// The end of either stream, a reset, an error: HUP, RDHUP, ERR are
	// the kernel's to report.
	constexpr std::uint32_t prod_end = SD_RING_FIN | SD_RING_RESET;
	constexpr std::uint32_t cons_end = SD_RING_CLOSED | SD_RING_RESET;
	if (!c->still(fd) || (flags_of(c->rx.prod_flags) & prod_end) ||
	    (flags_of(c->rx.cons_flags) & cons_end) || (flags_of(c->tx.prod_flags) & prod_end) ||
	    (flags_of(c->tx.cons_flags) & cons_end))
		goto out;

	got = 0;
	if (want & EV_IN) {
		ssize_t n = -1;
		// The consumer's state is ours only while the token is; what
		// it reads is then rechecked (the kernel may take the side
		// back meanwhile, and its answer would be a guess).
		if (rs.ours()) {
			n = rs.consumer().readable();
			if (!rs.ours())
				n = -1;
		}
		if (n < 0) {
			got = -1;
			goto out;
		}
		// As sd_poll: readable once SO_RCVLOWAT bytes are there (the
		// kernel's value, mirrored in the ring).
		if (n > 0 && static_cast<std::uint64_t>(n) >=
				     (__atomic_load_n(rs.lowat, __ATOMIC_RELAXED) & ~SD_LOWAT_INQ))
			got |= EV_IN;
	}
	if (want & EV_OUT) {
		Side &ts = c->tx;
		std::int64_t room = -1;

		if (!ts.lock.try_lock()) {
			got = -1;
			goto out;
		}
		if (ts.ours()) {
			const std::uint64_t credit = __atomic_load_n(ts.credit, __ATOMIC_ACQUIRE);
			const std::uint64_t used = ts.producer().tail() - credit;
			if (used <= ts.size && ts.ours())
				room = static_cast<std::int64_t>(ts.size - used);
		}
		ts.lock.unlock();
		if (room < 0)
			got = -1;
		else if (static_cast<std::uint64_t>(room) >= std::max(ts.size / 4, TX_MIN_SPACE))
			got |= EV_OUT;
	}
out:
	rs.lock.unlock();
	return got;
}

// ---- poll and select -----------------------------------------------------

// A timeout: none (wait for ever), zero, or some.
enum class Wait { forever, zero, some };

Wait wait_ms(int ms)
{
	return ms < 0 ? Wait::forever : ms == 0 ? Wait::zero : Wait::some;
}

Wait wait_ts(const timespec *ts)
{
	return !ts ? Wait::forever : (!ts->tv_sec && !ts->tv_nsec) ? Wait::zero : Wait::some;
}

Wait wait_tv(const timeval *tv)
{
	return !tv ? Wait::forever : (!tv->tv_sec && !tv->tv_usec) ? Wait::zero : Wait::some;
}

// A wait that a signal the shim held back ended: EINTR, never restarted
// (man 7 signal: poll, select and epoll_wait are not, whatever SA_RESTART
// says).  The wrapper sets errno once the handlers ran.
bool interrupted(int *result)
{
	sig::interrupted(sig::Restart::never);
	*result = -1;
	return true;
}

// Our answers for p[0..n): mine[i] is the revents of an entry user space
// answers, or -1 for one the kernel must.  Returns how many of ours are
// ready; *kernel says whether the kernel has any to answer.
int scan_poll(const pollfd *p, nfds_t n, int *mine, bool *kernel)
{
	int ready = 0;

	*kernel = false;
	for (nfds_t i = 0; i < n; i++) {
		mine[i] = -1;
		if (p[i].fd < 0) {
			mine[i] = 0;
			continue;
		}
		if (fds.peek(p[i].fd) == FD_SD) {
			const unsigned want = static_cast<unsigned short>(p[i].events) &
					      (EV_IN | EV_OUT);
			const int ev = ring_events(p[i].fd, want);
			if (ev >= 0) {
				mine[i] = ev & p[i].events;
				ready += mine[i] != 0;
				continue;
			}
		}
		*kernel = true;
	}
	return ready;
}

// poll and ppoll.  false: the kernel does the whole call.
bool ready_poll(pollfd *p, nfds_t n, Wait w, int *result)
{
	int mine[MAX_SET];
	bool kernel;
	Backoff backoff;

	if (!n || n > MAX_SET)
		return false;
	for (;;) {
		if (scan_poll(p, n, mine, &kernel) > 0)
			break;
		if (kernel)
			return false;
		if (w == Wait::zero) {
			for (nfds_t i = 0; i < n; i++)
				p[i].revents = 0;
			*result = 0;
			return true;
		}
		if (backoff.again())
			continue;
		if (backoff.interrupted) {
			for (nfds_t i = 0; i < n; i++)
				p[i].revents = 0;
			return interrupted(result);
		}
		return false;
	}
	if (kernel) {
		pollfd q[MAX_SET];

		for (nfds_t i = 0; i < n; i++) {
			q[i] = p[i];
			if (mine[i] >= 0)
				q[i].fd = -1;
		}
		if (real::poll()(q, n, 0) < 0) {
			*result = -1;
			return true;
		}
		for (nfds_t i = 0; i < n; i++)
			if (mine[i] < 0)
				mine[i] = q[i].revents;
	}
	int count = 0;
	for (nfds_t i = 0; i < n; i++) {
		p[i].revents = static_cast<short>(mine[i]);
		count += mine[i] != 0;
	}
	*result = count;
	return true;
}

// select and pselect, through a poll array of the fds in the sets.
bool ready_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, Wait w, int *result)
{
	pollfd p[MAX_SET];
	nfds_t n = 0;

	if (nfds <= 0 || nfds > FD_SETSIZE)
		return false;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (!ev)
			continue;
		if (n == MAX_SET)
			return false;
		p[n++] = {fd, ev, 0};
	}

	int mine[MAX_SET];
	bool kernel;
	Backoff backoff;
	for (;;) {
		if (scan_poll(p, n, mine, &kernel) > 0)
			break;
		if (kernel || !n)
			return false;
		if (w == Wait::zero) {
			if (rd)
				FD_ZERO(rd);
			if (wr)
				FD_ZERO(wr);
			if (ex)
				FD_ZERO(ex);
			*result = 0;
			return true;
		}
		if (!backoff.again()) {
			if (backoff.interrupted)
				return interrupted(result);
			return false;
		}
	}

	// The kernel answers for its own fds, without waiting.
	fd_set krd, kwr, kex;
	FD_ZERO(&krd);
	FD_ZERO(&kwr);
	FD_ZERO(&kex);
	if (kernel) {
		int top = 0;
		for (nfds_t i = 0; i < n; i++) {
			if (mine[i] >= 0)
				continue;
			const int fd = p[i].fd;
			if (rd && FD_ISSET(fd, rd))
				FD_SET(fd, &krd);
			if (wr && FD_ISSET(fd, wr))
				FD_SET(fd, &kwr);
			if (ex && FD_ISSET(fd, ex))
				FD_SET(fd, &kex);
			top = fd + 1;
		}
		timeval none = {0, 0};
		if (real::select()(top, &krd, &kwr, &kex, &none) < 0) {
			*result = -1;
			return true;
		}
	}
	int count = 0;
	for (nfds_t i = 0; i < n; i++) {
		const int fd = p[i].fd;
		bool r, wri, e;
		if (mine[i] < 0) {
			r = FD_ISSET(fd, &krd);
			wri = FD_ISSET(fd, &kwr);
			e = FD_ISSET(fd, &kex);
		} else {
			r = mine[i] & EV_IN;
			wri = mine[i] & EV_OUT;
			e = false;
		}
		if (rd && FD_ISSET(fd, rd) && !r)
			FD_CLR(fd, rd);
		if (wr && FD_ISSET(fd, wr) && !wri)
			FD_CLR(fd, wr);
		if (ex && FD_ISSET(fd, ex) && !e)
			FD_CLR(fd, ex);
		count += (rd && r) + (wr && wri) + (ex && e);
	}
	*result = count;
	return true;
}

// ---- epoll ---------------------------------------------------------------

struct Member {
	int fd;
	std::uint16_t gen;	// of fd when added: another means closed
	std::uint32_t events;
	epoll_data_t data;
};

// The interest list of an epoll fd made in this process.  Never freed: a
// new epoll fd on the same number reuses it, so a thread still holding
// the old pointer finds a generation that no longer matches.
struct Ep {
	pthread_mutex_t lock;
	std::atomic<bool> broken;	// not tracked (any more): the kernel's
	std::uint16_t gen;		// of the epoll fd
	unsigned n, cap;
	Member *m;
	// pos[fd]: 1 + the index of fd's member in m, 0 none (fd < npos), so
	// that epoll_ctl costs the same whatever the size of the set.
	std::uint32_t *pos;
	unsigned npos;
	unsigned next;			// where the next scan starts (fairness)
	bool kernel_turn;		// maxevents 1: take turns with the kernel
};

std::atomic<Ep *> eps[MAX_CONNS];

Ep *ep_of(int epfd)
{
	if (epfd < 0 || static_cast<unsigned>(epfd) >= MAX_CONNS)
		return nullptr;
	return eps[epfd].load(std::memory_order_acquire);
}

// A new epoll fd: start tracking it (an empty list).
void ep_created(int epfd)
{
	if (epfd < 0 || static_cast<unsigned>(epfd) >= MAX_CONNS)
		return;
	Ep *e = ep_of(epfd);
	if (!e) {
		e = static_cast<Ep *>(calloc(1, sizeof(Ep)));
		if (!e)
			return;
		pthread_mutex_init(&e->lock, nullptr);
		e->broken.store(true, std::memory_order_relaxed);
		Ep *none = nullptr;
		if (!eps[epfd].compare_exchange_strong(none, e, std::memory_order_acq_rel)) {
			free(e);
			e = none;
		}
	}
	pthread_mutex_lock(&e->lock);
	e->gen = fds.generation(epfd);
	for (unsigned i = 0; i < e->n; i++)
		e->pos[e->m[i].fd] = 0;
	e->n = 0;
	e->next = 0;
	// Generation 0 is the entry of an fd the table cannot hold.
	e->broken.store(e->gen == 0, std::memory_order_relaxed);
	pthread_mutex_unlock(&e->lock);
}

// Whether e still describes epfd.  Called with e->lock held.
bool ep_valid(Ep *e, int epfd)
{
	if (e->broken.load(std::memory_order_relaxed))
		return false;
	if (e->gen != fds.generation(epfd)) {
		e->broken.store(true, std::memory_order_relaxed);
		return false;
	}
	return true;
}

// Take member i out (the last one takes its place).  Called with e->lock
// held, as all of these.
void ep_remove(Ep *e, unsigned i)
{
	e->pos[e->m[i].fd] = 0;
	if (i != --e->n) {
		e->m[i] = e->m[e->n];
		e->pos[e->m[i].fd] = i + 1;
	}
}

// Whether member m's fd was closed (or replaced) since it was added.
bool ep_stale(const Member &m)
{
	return m.gen != fds.generation(m.fd);
}

// Drop the members closed (or replaced) without EPOLL_CTL_DEL.  Closing
// the last copy of a file takes it out of every epoll set; a copy that
// lives on (dup, fork) keeps it there, the case epoll(7) warns about, and
// is taken as gone all the same.
void ep_prune(Ep *e)
{
	for (unsigned i = 0; i < e->n;)
		if (ep_stale(e->m[i]))
			ep_remove(e, i);
		else
			i++;
}

Member *ep_find(Ep *e, int fd)
{
	if (static_cast<unsigned>(fd) >= e->npos || !e->pos[fd])
		return nullptr;
	return &e->m[e->pos[fd] - 1];
}

// Room for one more member, of descriptor fd (below MAX_CONNS, as every
// fd with a generation).  Stale members go first, when the array is
// full, so that the work is a constant per epoll_ctl.
bool ep_room(Ep *e, int fd)
{
	if (static_cast<unsigned>(fd) >= e->npos) {
		const unsigned npos = std::min<unsigned>(
			MAX_CONNS, std::max<unsigned>(2 * e->npos, static_cast<unsigned>(fd) + 1));
		auto *np = static_cast<std::uint32_t *>(realloc(e->pos, npos * sizeof(std::uint32_t)));
		if (!np)
			return false;
		std::fill(np + e->npos, np + npos, 0);
		e->pos = np;
		e->npos = npos;
	}
	if (e->n == e->cap)
		ep_prune(e);
	if (e->n == e->cap) {
		const unsigned cap = e->cap ? 2 * e->cap : 16;
		auto *nm = static_cast<Member *>(realloc(e->m, cap * sizeof(Member)));
		if (!nm)
			return false;
		e->m = nm;
		e->cap = cap;
	}
	return true;
}

// Follow a successful epoll_ctl.
void ep_apply(Ep *e, int op, int fd, const epoll_event *ev)
{
	Member *m = ep_find(e, fd);

	switch (op) {
	case EPOLL_CTL_ADD: {
		(void)fds.kind(fd);	// gives fd an entry, and so a generation
		const std::uint16_t gen = fds.generation(fd);
		// A member of that number closed without EPOLL_CTL_DEL: gone.
		if (m && ep_stale(*m)) {
			ep_remove(e, static_cast<unsigned>(m - e->m));
			m = nullptr;
		}
		if (m || !gen || !ep_room(e, fd)) {
			e->broken.store(true, std::memory_order_relaxed);
			return;
		}
		e->m[e->n++] = {fd, gen, ev->events, ev->data};
		e->pos[fd] = e->n;
		break;
	}
	case EPOLL_CTL_MOD:
		if (!m || ep_stale(*m)) {
			e->broken.store(true, std::memory_order_relaxed);
			return;
		}
		m->events = ev->events;
		m->data = ev->data;
		break;
	case EPOLL_CTL_DEL:
		if (m)
			ep_remove(e, static_cast<unsigned>(m - e->m));
		break;
	default:
		e->broken.store(true, std::memory_order_relaxed);
	}
}

// The epoll_wait family.  false: the kernel does the whole call.
bool ready_epoll(int epfd, epoll_event *out, int maxevents, Wait w, int *result)
{
	Ep *e = ep_of(epfd);
	Backoff backoff;
	int found = 0;
	bool kernel = false;
	std::uint64_t kdata[MAX_KERNEL];
	unsigned nk = 0;

	if (!e || maxevents <= 0 || e->broken.load(std::memory_order_relaxed))
		return false;
	for (;;) {
		int ev[MAX_SET];

		pthread_mutex_lock(&e->lock);
		if (!ep_valid(e, epfd) || e->n > MAX_SET) {
			pthread_mutex_unlock(&e->lock);
			return false;
		}
		// Who answers for each member: ev[i] >= 0 us, -1 the kernel.
		ep_prune(e);
		nk = 0;
		kernel = false;
		for (unsigned i = 0; i < e->n; i++) {
			const Member &m = e->m[i];
			ev[i] = -1;
			if (fds.peek(m.fd) == FD_SD &&
			    !(m.events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)))
				ev[i] = ring_events(m.fd, m.events & (EV_IN | EV_OUT));
			if (ev[i] >= 0)
				continue;
			if (nk == MAX_KERNEL) {
				pthread_mutex_unlock(&e->lock);
				return false;
			}
			kdata[nk++] = m.data.u64;
			kernel = true;
		}
		// The kernel's events are told from ours by their data: it
		// must not be shared between the two groups.
		for (unsigned i = 0; i < e->n && nk; i++)
			if (ev[i] >= 0 && std::find(kdata, kdata + nk, e->m[i].data.u64) !=
						  kdata + nk) {
				pthread_mutex_unlock(&e->lock);
				return false;
			}
		// With others to ask, leave them room (and with room for one
		// event only, take turns).
		int room = maxevents;
		if (kernel && maxevents > 1)
			room = maxevents - 1;
		if (kernel && maxevents == 1 && (e->kernel_turn = !e->kernel_turn)) {
			pthread_mutex_unlock(&e->lock);
			return false;
		}
		found = 0;
		const unsigned start = e->n ? e->next % e->n : 0;
		for (unsigned j = 0; j < e->n && found < room; j++) {
			const unsigned i = (start + j) % e->n;
			const unsigned r = ev[i] >= 0 ? static_cast<unsigned>(ev[i]) & e->m[i].events : 0;
			if (!r)
				continue;
			out[found].events = r;
			out[found].data = e->m[i].data;
			found++;
			e->next = i + 1;
		}
		pthread_mutex_unlock(&e->lock);
		if (found)
			break;
		if (kernel)
			return false;
		if (w == Wait::zero) {
			*result = 0;
			return true;
		}
		if (backoff.again())
			continue;
		if (backoff.interrupted)
			return interrupted(result);
		return false;
	}
	if (kernel && found < maxevents) {
		epoll_event k[64];
		const int cap = std::min(maxevents - found, 64);
		const int r = real::epoll_wait()(epfd, k, cap, 0);
		for (int i = 0; i < r; i++)
			if (std::find(kdata, kdata + nk, k[i].data.u64) != kdata + nk)
				out[found++] = k[i];
	}
	*result = found;
	return true;
}

} // namespace

void epoll_forget_all()
{
	for (auto &slot : eps)
		if (Ep *e = slot.load(std::memory_order_relaxed))
			e->broken.store(true, std::memory_order_relaxed);
}

void epoll_after_fork_child()
{
	for (auto &slot : eps)
		if (Ep *e = slot.load(std::memory_order_relaxed)) {
			pthread_mutex_init(&e->lock, nullptr);
			e->broken.store(true, std::memory_order_relaxed);
		}
}

} // namespace sd::shim::fast

using namespace sd::shim;
using namespace sd::shim::fast;

// ---- the hooks -------------------------------------------------------------

bool sd_hook_poll(struct pollfd *p, nfds_t nfds, int timeout, int *result) noexcept
{
	return ready_poll(p, nfds, wait_ms(timeout), result);
}

bool sd_hook_ppoll(struct pollfd *p, nfds_t nfds, const struct timespec *timeout,
		   const sigset_t *sigmask, int *result) noexcept
{
	// Returning at once with events matches ppoll: the kernel restores
	// the caller's mask before returning events, so no signal that
	// sigmask would let through is delivered then either.
	(void)sigmask;
	return ready_poll(p, nfds, wait_ts(timeout), result);
}

bool sd_hook_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *timeout,
		    int *result) noexcept
{
	return ready_select(nfds, rd, wr, ex, wait_tv(timeout), result);
}

bool sd_hook_pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *timeout,
		     const sigset_t *sigmask, int *result) noexcept
{
	(void)sigmask;
	return ready_select(nfds, rd, wr, ex, wait_ts(timeout), result);
}

// A new epoll fd r (or an error): enter it and start following it.
static bool epoll_created(int r, int *result)
{
	*result = r;
	if (r >= 0) {
		const int saved = errno;
		sd_fd_new(r);
		fds.set(r, FD_OTHER);
		ep_created(r);
		errno = saved;
	}
	return true;
}

bool sd_hook_epoll_create(int size, int *result) noexcept
{
	return epoll_created(real::epoll_create()(size), result);
}

bool sd_hook_epoll_create1(int flags, int *result) noexcept
{
	return epoll_created(real::epoll_create1()(flags), result);
}

bool sd_hook_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event, int *result) noexcept
{
	const int r = real::epoll_ctl()(epfd, op, fd, event);
	const int saved = errno;

	if (Ep *e = ep_of(epfd)) {
		pthread_mutex_lock(&e->lock);
		if (r == 0 && ep_valid(e, epfd))
			ep_apply(e, op, fd, event);
		pthread_mutex_unlock(&e->lock);
	}
	// A connection joining a set: map its rings now, so that the first
	// wait can already look at them.
	if (r == 0 && op == EPOLL_CTL_ADD && fds.peek(fd) == FD_SD)
		(void)get(fd);
	errno = saved;
	*result = r;
	return true;
}

bool sd_hook_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			int *result) noexcept
{
	return ready_epoll(epfd, events, maxevents, wait_ms(timeout), result);
}

bool sd_hook_epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			 const sigset_t *sigmask, int *result) noexcept
{
	(void)sigmask;
	return ready_epoll(epfd, events, maxevents, wait_ms(timeout), result);
}

bool sd_hook_epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			  const struct timespec *timeout, const sigset_t *sigmask,
			  int *result) noexcept
{
	(void)sigmask;
	return ready_epoll(epfd, events, maxevents, wait_ts(timeout), result);
}
