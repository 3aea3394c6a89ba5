// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The fast path: send and receive on a connected AF_SD socket are loads
// and stores on its mapped rings (Documentation/libsd.rst).
//
// The shim calls these hooks only for AF_SD descriptors (hooks.hpp).  The
// rule that keeps them simple: libsd does only what can be done now, or
// after a short spin; anything else (a wait that needs to sleep, the end of
// a connection, an error, an unusual flag) goes to the kernel's path, which
// takes the ring side back from this process (the token protocol of
// include/uapi/linux/sd.h) and answers exactly as the kernel's path always
// does.  So the system-call path is the reference for every result, and
// libsd never has to imitate it.
//
// Per socket and direction: a process-local mutex serialises the threads
// of this process (uncontended for one thread), and the token says whether
// this process drives the side at all.  Each call: busy = 1, full fence,
// token still ours?  ... work ...  publish the position, busy = 0.  While
// busy is set the kernel lets no other call into the side, whichever
// thread, descriptor or system call it comes from (<linux/sd.h>, "Tokens").
//
// A data call holds a CallRef on its side from start to end, the kernel's
// path included, as the kernel holds a file reference for a system call:
// a close() of the fd meanwhile leaves the fd open until the call is out
// (Documentation/shim.rst, "Descriptors").
#include "hooks.hpp"

#include "fast.hpp"
#include "signals.hpp"
#include "zcpool.hpp"

#include <linux/futex.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>

#include <algorithm>

namespace sd::shim::fast {

void SideLock::wait() noexcept
{
	// EAGAIN (the word changed) and EINTR (a signal) both mean look
	// again; errno is the program's.
	const int saved = errno;
	(void)real::syscall()(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, 2L, 0L, 0L, 0L);
	errno = saved;
}

void SideLock::wake() noexcept
{
	const int saved = errno;
	(void)real::syscall()(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1L, 0L, 0L, 0L);
	errno = saved;
}

std::atomic<Conn *> conns[MAX_CONNS];
std::int64_t spin_ns = SPIN_NS;

namespace {

template <typename T> T *at(void *map, std::uint64_t off)
{
	return reinterpret_cast<T *>(static_cast<unsigned char *>(map) + off);
}

void init_side(Side &s, void *map, const sd_ring_offset &o, bool prod)
{
	// busy is this process's own (the kernel reads it from here), never
	// in the ring, which the peer could write.
	s.busy = 0;
	s.tok = sd::TokenSide(at<std::uint32_t>(map, prod ? o.prod_token : o.cons_token),
			      &s.busy);
	s.prod_flags = at<std::uint32_t>(map, o.prod_flags);
	s.cons_flags = at<std::uint32_t>(map, o.cons_flags);
	s.pos = at<std::uint64_t>(map, prod ? o.prod_pos : o.cons_pos);
	s.off = prod ? nullptr : at<std::uint32_t>(map, o.cons_off);
	s.lowat = prod ? nullptr : at<std::uint32_t>(map, o.cons_lowat);
	s.credit = at<std::uint64_t>(map, o.consumer);
	s.size = o.size;
}

// Connection state is never freed, only unmapped and kept for reuse: a
// thread that loaded a Conn just before another thread closed its fd may
// still lock it (type-stable memory), then finds conns[fd] changed and
// leaves it alone (Conn::still()).
pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
Conn *spare;

Conn *new_conn()
{
	pthread_mutex_lock(&spare_lock);
	Conn *c = spare;
	if (c)
		spare = c->next_spare;
	pthread_mutex_unlock(&spare_lock);
	if (c)
		return c;
	c = static_cast<Conn *>(calloc(1, sizeof(Conn)));
	if (c) {
		c->tx.lock.reset();
		c->rx.lock.reset();
	}
	return c;
}

void keep_spare(Conn *c)
{
	pthread_mutex_lock(&spare_lock);
	c->next_spare = spare;
	spare = c;
	pthread_mutex_unlock(&spare_lock);
}

// Whether a data call is in flight on c (CallRef).
bool in_flight(const Conn *c)
{
	return c->tx.calls.load(std::memory_order_seq_cst) ||
	       c->rx.calls.load(std::memory_order_seq_cst);
}

// Unmap c if no call is inside it (a call holds a side lock while it uses
// the rings, and a CallRef until it returns).  Never waits: a send may
// sleep in the kernel with the lock.
bool try_unmap(Conn *c)
{
	if (in_flight(c) || c->defer_fd.load(std::memory_order_seq_cst) >= 0)
		return false;
	if (!c->tx.lock.try_lock())
		return false;
	if (!c->rx.lock.try_lock()) {
		c->tx.lock.unlock();
		return false;
	}
	munmap(c->tx_map, c->off.tx.mmap_len);
	munmap(c->rx_map, c->off.rx.mmap_len);
	c->tx_map = c->rx_map = nullptr;
	c->rx.lock.unlock();
	c->tx.lock.unlock();
	return true;
}

// Closed while a call was inside: unmapped later, when the call is out.
Conn *zombies;

// Unmap a Conn no longer in conns[] and keep it for reuse, now or (a call
// of another thread still inside it) at a later drop.  drop(nullptr)
// only looks at those left for later.
void drop(Conn *c)
{
	pthread_mutex_lock(&spare_lock);
	if (c) {
		c->next_spare = zombies;
		zombies = c;
	}
	Conn *all = zombies;
	zombies = nullptr;
	pthread_mutex_unlock(&spare_lock);
	while (all) {
		Conn *next = all->next_spare;
		if (try_unmap(all)) {
			keep_spare(all);
		} else {
			pthread_mutex_lock(&spare_lock);
			all->next_spare = zombies;
			zombies = all;
			pthread_mutex_unlock(&spare_lock);
		}
		all = next;
	}
}

} // namespace

Conn *get(int fd)
{
	if (fd < 0 || static_cast<unsigned>(fd) >= MAX_CONNS)
		return nullptr;
	Conn *c = conns[fd].load(std::memory_order_acquire);
	if (c)
		return c;

	sd_mmap_offsets off;
	socklen_t len = sizeof(off);
	if (real::getsockopt()(fd, SOL_SD, SD_MMAP_OFFSETS, &off, &len) || len != sizeof(off)) {
		// Not AF_SD's any more (a redirected socket that fell back to
		// TCP, whose IPv4 says EOPNOTSUPP to the level, IPv6
		// ENOPROTOOPT).  Let the table find out what it is.
		if (errno == ENOPROTOOPT || errno == EOPNOTSUPP)
			fds.set(fd, FD_UNKNOWN);
		return nullptr;
	}
	void *tx = mmap(nullptr, off.tx.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			SD_PGOFF_TX_RING);
	if (tx == MAP_FAILED)
		return nullptr;
	void *rx = mmap(nullptr, off.rx.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			SD_PGOFF_RX_RING);
	if (rx == MAP_FAILED) {
		munmap(tx, off.tx.mmap_len);
		return nullptr;
	}
	c = new_conn();
	if (!c) {
		munmap(tx, off.tx.mmap_len);
		munmap(rx, off.rx.mmap_len);
		return nullptr;
	}
	// A reused Conn may still be locked for a moment by a thread that
	// is about to find it is not its own any more.
	c->tx.lock.lock();
	c->rx.lock.lock();
	c->fd = fd;
	c->tx_map = tx;
	c->rx_map = rx;
	c->off = off;
	c->shared.store(!fds.own(fd), std::memory_order_relaxed);
	c->defer_fd.store(-1, std::memory_order_relaxed);
	int fl = real::fcntl()(fd, F_GETFL);
	c->nonblock.store(fl > 0 && (fl & O_NONBLOCK), std::memory_order_relaxed);
	c->async.store(fl > 0 && (fl & O_ASYNC), std::memory_order_relaxed);
	c->rd_shut.store(false, std::memory_order_relaxed);
	c->wr_shut.store(false, std::memory_order_relaxed);
	init_side(c->tx, tx, off.tx, true);
	init_side(c->rx, rx, off.rx, false);
	c->rx.lock.unlock();
	c->tx.lock.unlock();

	Conn *none = nullptr;
	if (!conns[fd].compare_exchange_strong(none, c, std::memory_order_acq_rel)) {
		drop(c);
		return none;
	}
	return c;
}

namespace {

void forget(int fd)
{
	if (fd < 0 || static_cast<unsigned>(fd) >= MAX_CONNS)
		return;
	if (Conn *c = conns[fd].exchange(nullptr, std::memory_order_acq_rel))
		drop(c);
}

// Numbers whose close() waits for a call in flight (close_deferred()): to
// the program they are closed, so a second close() of one is EBADF and
// close_range() leaves it alone; dup2() onto one cancels the wait.
std::atomic<bool> deferred[MAX_CONNS];
std::atomic<int> deferred_count;

void mark_deferred(int fd, bool on)
{
	if (deferred[fd].exchange(on, std::memory_order_relaxed) != on)
		deferred_count.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
}

// The last call in flight on c is out: carry out the close() it held up,
// and unmap c if it was forgotten meanwhile.
void finish_close(Conn *c)
{
	const int fd = c->defer_fd.exchange(-1, std::memory_order_seq_cst);

	if (fd >= 0) {
		const int saved = errno;
		mark_deferred(fd, false);
		(void)real::close()(fd);
		errno = saved;
	}
	drop(nullptr);
}

// fd is being closed: its state goes, and the close itself waits for the
// data calls in flight on it (true: it was left to the last of them, and
// the fd stays open until then, close-on-exec).  c->defer_fd before the
// counts, each call's count before its look at defer_fd (CallRef): of a
// close and a call leaving at once, at least one sees the other, and
// exchange() lets only one of them close.
bool close_deferred(int fd)
{
	if (fd < 0 || static_cast<unsigned>(fd) >= MAX_CONNS)
		return false;
	Conn *c = conns[fd].exchange(nullptr, std::memory_order_acq_rel);
	if (!c)
		return false;
	mark_deferred(fd, true);
	c->defer_fd.store(fd, std::memory_order_seq_cst);
	if (in_flight(c)) {
		const int saved = errno;
		(void)real::fcntl()(fd, F_SETFD, FD_CLOEXEC);
		errno = saved;
		drop(c);
		return true;
	}
	const bool mine = c->defer_fd.exchange(-1, std::memory_order_seq_cst) >= 0;
	if (mine)
		mark_deferred(fd, false);
	drop(c);
	// A call that left meanwhile took the close (it is done or under way).
	return !mine;
}

// dup2() or dup3() onto fd: a close of fd that waits for a call no longer
// closes it (the number is the new file's from now on).
void undefer(int fd)
{
	if (fd < 0 || static_cast<unsigned>(fd) >= MAX_CONNS ||
	    !deferred[fd].load(std::memory_order_relaxed))
		return;
	mark_deferred(fd, false);
	pthread_mutex_lock(&spare_lock);
	for (Conn *c = zombies; c; c = c->next_spare) {
		int want = fd;
		c->defer_fd.compare_exchange_strong(want, -1, std::memory_order_seq_cst);
	}
	pthread_mutex_unlock(&spare_lock);
}

// Whether this is a child of vfork: it shares the parent's memory, so a
// close or dup2 there must leave the parent's state alone (one getpid
// system call, on the close of an AF_SD socket only).
bool vfork_child()
{
	return sig::in_vfork_child();
}

void leave(Conn *c, Side &s)
{
	s.calls.fetch_sub(1, std::memory_order_seq_cst);
	// Nothing to carry out (the common case) costs two loads.
	if ((c->defer_fd.load(std::memory_order_seq_cst) >= 0 || !c->still(c->fd)) &&
	    !in_flight(c))
		finish_close(c);
}

// The CallRef a thread holds, if any.  A call is left without its
// destructor when a signal handler that ran during its kernel call
// longjmp()s out, or when pthread_cancel() unwinds it (the shim has no
// exception tables): the thread's next call, or its exit, lets go of it.
struct Held {
	Conn *c;
	Side *s;
};
thread_local Held held __attribute__((tls_model("initial-exec")));
thread_local bool held_keyed __attribute__((tls_model("initial-exec")));
pthread_key_t held_key;
pthread_once_t held_once = PTHREAD_ONCE_INIT;

void release_held()
{
	if (Conn *c = held.c) {
		Side *s = held.s;
		held = {};
		leave(c, *s);
	}
}

void held_at_exit(void *)
{
	release_held();
}

void held_key_init()
{
	(void)pthread_key_create(&held_key, held_at_exit);
}

// A data call on one side, from the hook's start to its end.
class CallRef {
public:
	CallRef(Conn *c, Side &s) noexcept : c_(c), s_(s)
	{
		release_held();
		s.calls.fetch_add(1, std::memory_order_seq_cst);
		held = {c, &s};
		// Once per thread: the key's value only has to be non-null for
		// its destructor to run at the thread's exit.
		if (!held_keyed) [[unlikely]] {
			pthread_once(&held_once, held_key_init);
			held_keyed = !pthread_setspecific(held_key, &held);
		}
	}
	~CallRef()
	{
		held = {};
		leave(c_, s_);
	}
	CallRef(const CallRef &) = delete;
	CallRef &operator=(const CallRef &) = delete;

private:
	Conn *c_;
	Side &s_;
};

void stopped_by_signal(int fd, bool send);

// The kernel's path for a call the fast path does not finish, made here
// under the call's CallRef (so the fd is the socket's throughout) and with
// signals delivered as they come, as around any system call.  A signal
// held back before it ends the call first (nothing was done yet).
template <typename Kernel> bool kernel_path(int fd, bool send, Kernel &kernel, ssize_t *result)
{
	if (sig::pending()) {
		stopped_by_signal(fd, send);
		*result = -1;
		return true;
	}
	sig::Open open;
	*result = kernel();
	return true;
}

// A call on fd stops for a signal the shim held back (signals.hpp): the
// kernel would restart it under SA_RESTART unless the socket has a timeout
// for that direction (man 7 signal), which is asked here, on this rare
// path only.
void stopped_by_signal(int fd, bool send)
{
	timeval tv = {};
	socklen_t len = sizeof(tv);
	const int saved = errno;
	const bool timed = real::getsockopt()(fd, SOL_SOCKET, send ? SO_SNDTIMEO : SO_RCVTIMEO,
					      &tv, &len) == 0 &&
			   (tv.tv_sec || tv.tv_usec);

	errno = saved;
	sig::interrupted(timed ? sig::Restart::never : sig::Restart::sa_restart);
}

// Whether a call on c that found nothing to do must not wait.  The file's
// O_NONBLOCK is cached, and read again when someone the shim cannot follow
// may have changed it (Conn::shared).
bool nonblocking(int fd, Conn *c, int flags)
{
	if (flags & MSG_DONTWAIT)
		return true;
	if (c->shared.load(std::memory_order_relaxed)) {
		const int saved = errno;
		const int fl = real::fcntl()(fd, F_GETFL);
		errno = saved;
		if (fl >= 0)
			c->nonblock.store(fl & O_NONBLOCK, std::memory_order_relaxed);
	}
	return c->nonblock.load(std::memory_order_relaxed);
}

// Become the owner of a side (SD_IOC_ACQUIRE) and set up its ring code:
// the new token, or 0.
std::uint32_t acquire(Conn *c, Side &s, bool prod)
{
	sd_token tok = {};
	tok.dir = prod ? SD_TOKEN_TX : SD_TOKEN_RX;
	tok.busy = reinterpret_cast<std::uintptr_t>(&s.busy);
	if (real::ioctl()(c->fd, SD_IOC_ACQUIRE, &tok) || !tok.token)
		return 0;
	if (prod)
		new (s.prod) sd::Producer(c->tx_map, c->off.tx, tok.pos);
	else
		new (s.cons) sd::Consumer(c->rx_map, c->off.rx, tok.pos, tok.off);
	return tok.token;
}

// The threads of this process take turns on a side.  Always taken, even
// while glibc's __libc_single_threaded says there is one thread: a thread
// made by a raw clone() leaves it set.  Uncontended, it costs an atomic
// instruction each way.
inline void lock_side(Side &s)
{
	if (!s.lock.try_lock()) [[unlikely]] {
		// Another thread's call holds it, maybe for a long sleep for
		// room: wait with signals delivered as they come (nothing is
		// held here), as a call waiting for the socket in the kernel.
		sig::Open open;
		s.lock.lock();
	}
}

inline void unlock_side(Side &s)
{
	s.lock.unlock();
}

// Start a call as the owner (lib/token.hpp).
bool begin(Conn *c, Side &s, bool prod)
{
	return s.tok.begin([&] { return acquire(c, s, prod); });
}

void end(Side &s)
{
	s.tok.end();
}

// The bytes a call asks for; 0, for the kernel's path, when one of its
// buffers is null (the kernel fails it with EFAULT, where a copy here
// would crash the program).
size_t total(const iovec *iov, int n)
{
	size_t t = 0;
	for (int i = 0; i < n; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return 0;
		t += iov[i].iov_len;
	}
	return t;
}

// The iovecs past the first done bytes, in scratch (at most n entries).
int advance(const iovec *iov, int n, size_t done, iovec *scratch)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (done >= iov[i].iov_len) {
			done -= iov[i].iov_len;
			continue;
		}
		scratch[k].iov_base = static_cast<char *>(iov[i].iov_base) + done;
		scratch[k].iov_len = iov[i].iov_len - done;
		done = 0;
		k++;
	}
	return k;
}

constexpr int MAX_IOV = 64;

// Wake the peer that flagged it sleeps (dir: the side we just moved).
void wake_peer(int fd, std::uint32_t dir)
{
	real::ioctl()(fd, SD_IOC_WAKE, &dir);
}

// A non-blocking call found nothing to do, and its caller may now sleep in
// the kernel (epoll, edge-triggered too): arm the ring so that the other
// side wakes it, and say whether to look once more (rules 3 and 4 of
// <linux/sd.h>).  An error goes to n.
template <typename End> bool arm_and_retry(End &e, int &tries, ssize_t &n)
{
	const int w = e.prepare_wait();

	if (w == 0 && tries++ < 2)
		return true;
	if (w < 0)
		n = w;
	return false;
}

// What a send that could not finish at once ran into (send_rest()).
enum class Stop {
	NONE,		// it finished, or the last write said why not (n)
	AGAIN,		// non-blocking, or SO_SNDTIMEO ran out
	SIGNAL,		// a signal came while it waited
	KERNEL,		// the connection ended: the kernel's path says how
};

// Sleep in the kernel until the ring has room, holding the side: busy
// stays set, so that no other call's bytes come between ours, and the
// kernel lets no other path in meanwhile (SD_IOC_SEND_WAIT).
Stop wait_room(int fd)
{
	for (;;) {
		std::uint32_t dir = SD_TOKEN_TX;

		// (One that comes between this look and the sleep is seen
		// when the sleep ends: Documentation/shim.rst, "Signals".)
		if (sig::pending())
			return Stop::SIGNAL;
		if (real::ioctl()(fd, SD_IOC_SEND_WAIT, &dir) == 0)
			return Stop::NONE;
		if (errno == EAGAIN)
			return Stop::AGAIN;
		if (errno != EINTR)
			return Stop::KERNEL;
		// A signal whose handler the shim holds back (signals.hpp)
		// ends the call; a stop and continue, or a handler the shim
		// does not know (it ran already), is slept through, as the
		// kernel restarts its own wait.
		if (sig::pending())
			return Stop::SIGNAL;
	}
}

// The rest of a send that the first write did not finish: more writes,
// spinning for room, then sleeping for it.  Out of line, so that the
// common case (everything fits at once) keeps a small frame.  Returns the
// last write's result; done and stop say what happened.
[[gnu::noinline]] ssize_t send_rest(int fd, Conn *c, Side &s, const iovec *iov, int iovcnt,
				    int flags, size_t want, size_t &done, Stop &stop)
{
	sd::Producer &p = s.producer();
	iovec rest[MAX_IOV];
	ssize_t n = 0;
	Backoff backoff;
	int rearm = 0;

	while (done < want) {
		int k = advance(iov, iovcnt, done, rest);

		n = p.write(std::span<const iovec>(rest, static_cast<size_t>(k)));
		// Even a write that only padded the end moved the tail.
		__atomic_store_n(s.pos, p.tail(), __ATOMIC_RELAXED);
		if (n > 0) {
			done += static_cast<size_t>(n);
			if (p.take_wake())
				wake_peer(fd, SD_TOKEN_TX);
			continue;
		}
		if (n != -EAGAIN)
			break;
		if (nonblocking(fd, c, flags)) {
			if (arm_and_retry(p, rearm, n))
				continue;
			stop = Stop::AGAIN;
			break;
		}
		if (backoff.again())
			continue;
		if (backoff.interrupted) {
			stop = Stop::SIGNAL;
			break;
		}
		stop = wait_room(fd);
		if (stop != Stop::NONE)
			break;
		backoff = Backoff();
	}
	return n;
}

constexpr size_t PAGE = 4096;

// Copy [b, b + len) into the ring as send_rest() would, adding to done.
// Returns the last write's result (negative: stop).
ssize_t send_copy(int fd, Conn *c, Side &s, void *b, size_t len, int flags, size_t &done,
		  Stop &stop)
{
	sd::Producer &p = s.producer();
	iovec v{b, len};
	size_t pd = 0;
	ssize_t n = p.write(std::span<const iovec>(&v, 1));

	__atomic_store_n(s.pos, p.tail(), __ATOMIC_RELAXED);
	if (n > 0) {
		pd = static_cast<size_t>(n);
		if (p.take_wake())
			wake_peer(fd, SD_TOKEN_TX);
	}
	if (pd < len && (n > 0 || n == -EAGAIN))
		n = send_rest(fd, c, s, &v, 1, flags, len, pd, stop);
	done += pd;
	return pd < len ? (n < 0 ? n : -EAGAIN) : n;
}

// Hand [b, b + len) (whole pages of pool memory) to the kernel and put
// records for it in the ring (Documentation/zerocopy.rst).  What cannot go
// that way (no room for a record, a full queue without waiting, a buffer
// the kernel refuses) is copied instead.  Returns as send_copy().
ssize_t send_pages(int fd, Conn *c, Side &s, unsigned char *b, size_t len, int flags,
		   size_t &done, Stop &stop)
{
	sd::Producer &p = s.producer();

	while (len) {
		const size_t chunk = std::min<size_t>(len, SD_ZC_MAX);
		const int room = p.zc_room();

		if (room < 0)
			return room;
		if (sig::pending()) {
			stop = Stop::SIGNAL;
			return -EINTR;
		}
		sd_zc_send zs = {};
		zs.addr = reinterpret_cast<std::uintptr_t>(b);
		zs.len = chunk;
		zs.flags = nonblocking(fd, c, flags) ? SD_ZC_DONTWAIT : 0;
		if (!room || real::ioctl()(fd, SD_IOC_ZC_SEND, &zs) < 0) {
			if (room && (errno == EPIPE || errno == ENOTCONN)) {
				stop = Stop::KERNEL;	/* the kernel reports it */
				return -EPIPE;
			}
			// The queue's wait ends on a signal (never restarted):
			// one the shim holds back ends the send, any other
			// (a stop, a handler the shim does not know) is slept
			// through again.
			if (room && errno == EINTR) {
				if (sig::pending()) {
					stop = Stop::SIGNAL;
					return -EINTR;
				}
				continue;
			}
			return send_copy(fd, c, s, b, len, flags, done, stop);
		}
		// Room was there, and only this thread produces: it fits.
		const ssize_t n = p.write_zc(zs.seq, static_cast<std::uint32_t>(chunk));
		__atomic_store_n(s.pos, p.tail(), __ATOMIC_RELAXED);
		if (n < 0)
			return n;
		if (p.take_wake())
			wake_peer(fd, SD_TOKEN_TX);
		done += chunk;
		b += chunk;
		len -= chunk;
	}
	return 1;
}

// A send with buffers of at least the zero-copy threshold: each such
// buffer in pool memory goes as its unaligned head (copied), its whole
// pages (handed over) and its tail (copied).
[[gnu::noinline]] ssize_t send_zc(int fd, Conn *c, Side &s, const iovec *iov, int iovcnt,
				  int flags, size_t threshold, size_t &done, Stop &stop)
{
	ssize_t n = 0;

	for (int i = 0; i < iovcnt && n >= 0; i++) {
		auto *b = static_cast<unsigned char *>(iov[i].iov_base);
		const size_t len = iov[i].iov_len;
		size_t head = len, mid = 0;

		if (len >= threshold && sd::zc::in_pool(b, len)) {
			head = (PAGE - reinterpret_cast<std::uintptr_t>(b) % PAGE) % PAGE;
			mid = head < len ? (len - head) & ~(PAGE - 1) : 0;
			if (!mid)
				head = len;
		}
		if (head)
			n = send_copy(fd, c, s, b, head, flags, done, stop);
		if (mid && n >= 0)
			n = send_pages(fd, c, s, b + head, mid, flags, done, stop);
		if (head + mid < len && n >= 0)
			n = send_copy(fd, c, s, b + head + mid, len - head - mid, flags, done,
				      stop);
	}
	return n;
}

// What a send that wrote done bytes, whose last step returned n and that
// stopped as stop says, tells its caller: true with *result (and errno),
// or false for the kernel's path to report the end of the connection.
// Bytes written are always reported, as TCP reports a send that a signal,
// a timeout or an error cut short.
bool send_result(int fd, size_t done, ssize_t n, Stop stop, ssize_t *result)
{
	if (stop == Stop::SIGNAL)
		stopped_by_signal(fd, true);
	if (done) {
		*result = static_cast<ssize_t>(done);
		return true;
	}
	if (stop == Stop::SIGNAL) {
		*result = -1;
		errno = EINTR;
		return true;
	}
	if (stop == Stop::AGAIN || (stop == Stop::NONE && n == -EAGAIN)) {
		*result = -1;
		errno = EAGAIN;
		return true;
	}
	return false;
}

template <typename Kernel>
bool fast_send(int fd, const iovec *iov, int iovcnt, int flags, ssize_t *result, Kernel kernel)
{
	if ((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) || iovcnt < 1 || iovcnt > MAX_IOV)
		return false;
	const size_t want = total(iov, iovcnt);
	Conn *c = lookup(fd);
	if (!c) [[unlikely]] {
		c = want ? get(fd) : nullptr;
		if (!c)
			return false;
	}
	if (!want)
		return false;
	Side &s = c->tx;
	CallRef ref(c, s);

	lock_side(s);
	if (!c->still(fd) || !begin(c, s, true)) {
		unlock_side(s);
		return kernel_path(fd, true, kernel, result);
	}
	// The connection ended or was reset, or this end shut down writing:
	// the kernel's path reports exactly what TCP would.
	if ((__atomic_load_n(s.prod_flags, __ATOMIC_ACQUIRE) & (SD_RING_FIN | SD_RING_RESET)) ||
	    (__atomic_load_n(s.cons_flags, __ATOMIC_ACQUIRE) & (SD_RING_CLOSED | SD_RING_RESET))) {
		end(s);
		unlock_side(s);
		return kernel_path(fd, true, kernel, result);
	}
	sd::Producer &p = s.producer();
	size_t done = 0;
	Stop stop = Stop::NONE;
	ssize_t n;
	const size_t zt = want >= PAGE ? sd::zc::threshold() : 0;
	if (zt && want >= zt) [[unlikely]] {
		n = send_zc(fd, c, s, iov, iovcnt, flags, zt, done, stop);
	} else {
		n = p.write(std::span<const iovec>(iov, static_cast<size_t>(iovcnt)));
		__atomic_store_n(s.pos, p.tail(), __ATOMIC_RELAXED);
		if (n > 0) {
			done = static_cast<size_t>(n);
			if (p.take_wake())
				wake_peer(fd, SD_TOKEN_TX);
		}
		if (done < want && (n > 0 || n == -EAGAIN)) [[unlikely]]
			n = send_rest(fd, c, s, iov, iovcnt, flags, want, done, stop);
	}
	end(s);
	unlock_side(s);
	if (done == want && stop == Stop::NONE) [[likely]] {
		*result = static_cast<ssize_t>(done);
		return true;
	}
	if (send_result(fd, done, n, stop, result))
		return true;
	return kernel_path(fd, true, kernel, result);
}

// The record at the head of the ring is zero-copy: the kernel places its
// bytes (remapping whole pages into pool memory).  Then whatever else is
// there now, zero-copy or not, up to want.  Returns the bytes received, or
// a negative errno if none were.
[[gnu::noinline]] ssize_t recv_zc(int fd, Side &s, const iovec *iov, int iovcnt, size_t want)
{
	sd::Consumer &q = s.consumer();
	iovec rest[MAX_IOV];
	size_t done = 0;

	for (;;) {
		sd::Consumer::ZcHead z;
		advance(iov, iovcnt, done, rest);
		if (q.zc_head(z))
			return done ? static_cast<ssize_t>(done) : -EPROTO;
		sd_zc_recv zr = {};
		zr.seq = z.seq;
		zr.addr = reinterpret_cast<std::uintptr_t>(rest[0].iov_base);
		zr.off = z.off;
		zr.rec_len = z.len;
		zr.len = static_cast<std::uint32_t>(std::min<size_t>(rest[0].iov_len, z.len - z.off));
		const int r = real::ioctl()(fd, SD_IOC_ZC_RECV, &zr);
		if (r < 0)
			return done ? static_cast<ssize_t>(done) : -errno;
		q.zc_consumed(static_cast<std::uint32_t>(r));
		done += static_cast<size_t>(r);
		__atomic_store_n(s.pos, q.head(), __ATOMIC_RELAXED);
		__atomic_store_n(s.off, q.rec_off(), __ATOMIC_RELAXED);
		for (;;) {
			if (done == want)
				return static_cast<ssize_t>(done);
			const int k = advance(iov, iovcnt, done, rest);
			const ssize_t m = q.read(std::span<const iovec>(rest, static_cast<size_t>(k)));
			if (m > 0) {
				done += static_cast<size_t>(m);
				__atomic_store_n(s.pos, q.head(), __ATOMIC_RELAXED);
				__atomic_store_n(s.off, q.rec_off(), __ATOMIC_RELAXED);
				continue;
			}
			if (m == -EXDEV)
				break;
			return static_cast<ssize_t>(done);
		}
	}
}

// *inq, if given, is whether the socket's TCP_INQ is on (when the fast
// path took the call): recvmsg's caller gave no room for its control
// message, which TCP marks MSG_CTRUNC.
template <typename Kernel>
bool fast_recv(int fd, const iovec *iov, int iovcnt, int flags, ssize_t *result, Kernel kernel,
	       bool *inq = nullptr)
{
	// MSG_NOSIGNAL means nothing to a receive (the kernel ignores it).
	if ((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) || iovcnt < 1 || iovcnt > MAX_IOV)
		return false;
	const size_t want = total(iov, iovcnt);
	Conn *c = lookup(fd);
	if (!c) [[unlikely]]
		c = want ? get(fd) : nullptr;
	if (!c || !want || c->rd_shut.load(std::memory_order_relaxed))
		return false;
	Side &s = c->rx;
	CallRef ref(c, s);
	// O_NONBLOCK is looked at only when there is nothing to take.
	int nb = -1;
	auto is_nonblock = [&] {
		if (nb < 0)
			nb = nonblocking(fd, c, flags);
		return nb != 0;
	};

	lock_side(s);
	if (!c->still(fd) || !begin(c, s, false)) {
		unlock_side(s);
		return kernel_path(fd, false, kernel, result);
	}
	sd::Consumer &q = s.consumer();
	// SO_RCVLOWAT (mirrored by the kernel): a blocking receive returns
	// no fewer bytes than that, or than it asked for.  Short of them,
	// the kernel's path waits.
	const std::uint32_t mirror = __atomic_load_n(s.lowat, __ATOMIC_RELAXED);
	if (inq)
		*inq = mirror & SD_LOWAT_INQ;
	if (const std::uint32_t lowat = mirror & ~SD_LOWAT_INQ; lowat > 1 && !is_nonblock())
		[[unlikely]] {
		const ssize_t have = q.readable();
		if (have >= 0 && static_cast<size_t>(have) < std::min<size_t>(lowat, want)) {
			end(s);
			unlock_side(s);
			return kernel_path(fd, false, kernel, result);
		}
	}
	Backoff backoff;
	int rearm = 0;
	bool reset = false;
	ssize_t n;
	const std::span<const iovec> to(iov, static_cast<size_t>(iovcnt));

	for (;;) {
		n = q.read(to);
		if (n == -EXDEV) [[unlikely]] {
			n = recv_zc(fd, s, iov, iovcnt, want);
			reset = n == -ECONNRESET;
		}
		if (n > 0) {
			if (q.take_wake())
				wake_peer(fd, SD_TOKEN_RX);
			break;
		}
		if (n != -EAGAIN)
			break;
		if (is_nonblock()) {
			if (arm_and_retry(q, rearm, n))
				continue;
			break;
		}
		if (!backoff.again())
			break;
	}
	// Where the kernel goes on from if it takes the side back.  Even a
	// read that found nothing may have moved the head past padding.
	__atomic_store_n(s.pos, q.head(), __ATOMIC_RELAXED);
	__atomic_store_n(s.off, q.rec_off(), __ATOMIC_RELAXED);
	// Credit published while looking: the writer may wait for it.
	if (n <= 0 && q.take_wake())
		wake_peer(fd, SD_TOKEN_RX);
	// O_ASYNC wants SIGIO for every arrival, which only the kernel's
	// wake-up raises: keep asking writers for it (rule 3).
	if (c->async.load(std::memory_order_relaxed))
		__atomic_fetch_or(s.cons_flags, SD_RING_READER_WAIT, __ATOMIC_SEQ_CST);
	end(s);
	unlock_side(s);

	if (n > 0) {
		*result = n;
		return true;
	}
	if (n == -EAGAIN && is_nonblock()) {
		*result = -1;
		errno = EAGAIN;
		return true;
	}
	// A signal the shim holds back came while this call spun: it ends
	// with EINTR, as a sleep in the kernel would (signals.hpp restarts it
	// if every handler asked for that).
	if (n == -EAGAIN && backoff.interrupted) {
		stopped_by_signal(fd, false);
		*result = -1;
		errno = EINTR;
		return true;
	}
	// The kernel reset the connection over the zero-copy record it was
	// asked for (a handle that is not the connection's next): this call
	// reports it, as the kernel's own path does, and the next one finds
	// the end of the stream there.
	if (reset) [[unlikely]] {
		*result = -1;
		errno = ECONNRESET;
		return true;
	}
	/* A wait to sleep through, the end of the stream, an error: kernel. */
	return kernel_path(fd, false, kernel, result);
}

void after_fork_parent();

// The parent after a fork: its tracked epoll sets are the child's too now.
void after_fork_parent_all()
{
	epoll_forget_all();
	after_fork_parent();
}

// After a fork both processes hold every file: either may change its
// flags (Conn::shared).
void after_fork_parent()
{
	for (auto &slot : conns)
		if (Conn *c = slot.load(std::memory_order_relaxed))
			c->shared.store(true, std::memory_order_relaxed);
}

// A forked child owns nothing: its parent does (and may go on).  Every
// lock is free in the child, whichever thread of the parent held it, and
// no call of the parent is in flight here.
void after_fork_child()
{
	for (auto &slot : conns) {
		Conn *c = slot.load(std::memory_order_relaxed);
		if (!c)
			continue;
		c->tx.lock.reset();
		c->rx.lock.reset();
		c->tx.calls.store(0, std::memory_order_relaxed);
		c->rx.calls.store(0, std::memory_order_relaxed);
		c->tx.busy = c->rx.busy = 0;	/* the parent's calls are its own */
		c->tx.tok.lost();
		c->rx.tok.lost();
		c->shared.store(true, std::memory_order_relaxed);
	}
	// The spares' locks too: a thread of the parent may have held one.
	pthread_mutex_init(&spare_lock, nullptr);
	// A close that waited for a call of the parent's: no call of the
	// parent runs here, so the child's copy of the fd is closed now.
	for (Conn *c = zombies; c; c = c->next_spare) {
		const int fd = c->defer_fd.exchange(-1, std::memory_order_relaxed);
		if (fd >= 0) {
			mark_deferred(fd, false);
			(void)real::close()(fd);
		}
	}
	for (Conn *list : {spare, zombies})
		for (Conn *c = list; c; c = c->next_spare) {
			c->tx.lock.reset();
			c->rx.lock.reset();
			c->tx.calls.store(0, std::memory_order_relaxed);
			c->rx.calls.store(0, std::memory_order_relaxed);
		}
	drop(nullptr);
	epoll_after_fork_child();
}

// SD_SPIN_US: microseconds to spin before sleeping, 0 to SPIN_US_MAX.
void read_spin()
{
	const char *v = getenv("SD_SPIN_US");
	if (!v || !*v)
		return;
	char *end;
	errno = 0;
	const long long us = strtoll(v, &end, 10);
	if (errno || *end || us < 0 || us > SPIN_US_MAX) {
		char msg[160];
		const int n = snprintf(msg, sizeof(msg),
				       "libsd: SD_SPIN_US=%.32s is not a number of microseconds "
				       "from 0 to %lld; spinning %lld\n",
				       v, static_cast<long long>(SPIN_US_MAX),
				       static_cast<long long>(SPIN_NS / 1000));
		if (n > 0)
			(void)real::write()(2, msg, std::min(static_cast<size_t>(n), sizeof(msg) - 1));
		return;
	}
	spin_ns = us * 1000;
}

[[gnu::constructor]] void fast_init()
{
	const int saved = errno;

	read_spin();
	errno = saved;
	pthread_atfork(nullptr, after_fork_parent_all, after_fork_child);
}

} // namespace
} // namespace sd::shim::fast

using namespace sd::shim;
using namespace sd::shim::fast;

// ---- the hooks (strong definitions replace the weak defaults) -----------

bool sd_hook_send(int fd, const void *buf, size_t len, int flags, ssize_t *result) noexcept
{
	iovec v = {const_cast<void *>(buf), len};
	return fast_send(fd, &v, 1, flags, result,
			 [&] { return real::send()(fd, buf, len, flags); });
}

// A connected stream socket ignores a destination address, as TCP's does:
// the kernel only checks its length (sockperf gives one with each send).
bool sd_hook_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
		    socklen_t addrlen, ssize_t *result) noexcept
{
	if (addr && addrlen > sizeof(sockaddr_storage))
		return false;
	iovec v = {const_cast<void *>(buf), len};
	return fast_send(fd, &v, 1, flags, result,
			 [&] { return real::sendto()(fd, buf, len, flags, addr, addrlen); });
}

bool sd_hook_write(int fd, const void *buf, size_t len, ssize_t *result) noexcept
{
	iovec v = {const_cast<void *>(buf), len};
	return fast_send(fd, &v, 1, 0, result, [&] { return real::write()(fd, buf, len); });
}

bool sd_hook_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *result) noexcept
{
	return fast_send(fd, iov, iovcnt, 0, result,
			 [&] { return real::writev()(fd, iov, iovcnt); });
}

bool sd_hook_sendmsg(int fd, const struct msghdr *msg, int flags, ssize_t *result) noexcept
{
	if ((msg->msg_name && static_cast<int>(msg->msg_namelen) < 0) || msg->msg_controllen ||
	    msg->msg_iovlen > MAX_IOV)
		return false;
	return fast_send(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, result,
			 [&] { return real::sendmsg()(fd, msg, flags); });
}

// sendmmsg and recvmmsg on a stream socket: one sendmsg or recvmsg per
// message, as the kernel's are (at most UIO_MAXIOV of them): the count of
// messages done, or -1 if the first failed.  one(i) makes message i's call
// (the hook, else the kernel's) and returns its result.
template <typename One> int each_message(struct mmsghdr *vec, unsigned int vlen, One one)
{
	constexpr unsigned MAX_VLEN = 1024;
	unsigned i = 0;

	for (vlen = std::min(vlen, MAX_VLEN); i < vlen; i++) {
		const ssize_t r = one(i);
		if (r < 0) {
			if (!i)
				return -1;
			break;
		}
		vec[i].msg_len = static_cast<unsigned>(r);
	}
	return static_cast<int>(i);
}

bool sd_hook_sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		      int *result) noexcept
{
	*result = each_message(vec, vlen, [&](unsigned i) {
		ssize_t r;
		if (sd_hook_sendmsg(fd, &vec[i].msg_hdr, flags, &r))
			return r;
		sig::Open open;
		return real::sendmsg()(fd, &vec[i].msg_hdr, flags);
	});
	return true;
}

bool sd_hook_recv(int fd, void *buf, size_t len, int flags, ssize_t *result) noexcept
{
	iovec v = {buf, len};
	return fast_recv(fd, &v, 1, flags, result,
			 [&] { return real::recv()(fd, buf, len, flags); });
}

// A stream socket has no source address to give: the kernel stores a
// length of 0 (a bad length pointer or a negative length is its to fail).
bool sd_hook_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
		      socklen_t *addrlen, ssize_t *result) noexcept
{
	if (addr && (!addrlen || static_cast<int>(*addrlen) < 0))
		return false;
	iovec v = {buf, len};
	bool kernel = false;
	if (!fast_recv(fd, &v, 1, flags, result, [&] {
		    kernel = true;
		    return real::recvfrom()(fd, buf, len, flags, addr, addrlen);
	    }))
		return false;
	if (addr && *result >= 0 && !kernel)
		*addrlen = 0;
	return true;
}

bool sd_hook_read(int fd, void *buf, size_t len, ssize_t *result) noexcept
{
	iovec v = {buf, len};
	return fast_recv(fd, &v, 1, 0, result, [&] { return real::read()(fd, buf, len); });
}

bool sd_hook_readv(int fd, const struct iovec *iov, int iovcnt, ssize_t *result) noexcept
{
	return fast_recv(fd, iov, iovcnt, 0, result,
			 [&] { return real::readv()(fd, iov, iovcnt); });
}

bool sd_hook_recvmsg(int fd, struct msghdr *msg, int flags, ssize_t *result) noexcept
{
	if ((msg->msg_name && static_cast<int>(msg->msg_namelen) < 0) || msg->msg_control ||
	    msg->msg_iovlen > MAX_IOV)
		return false;
	bool kernel = false, inq = false;
	if (!fast_recv(
		    fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags, result,
		    [&] {
			    kernel = true;
			    return real::recvmsg()(fd, msg, flags);
		    },
		    &inq))
		return false;
	if (!kernel) {
		// No room for TCP_INQ's control message (a call that gives
		// room goes to the kernel, which writes it).
		msg->msg_flags = inq ? MSG_CTRUNC : 0;
		if (msg->msg_name)
			msg->msg_namelen = 0;	/* as recvfrom */
	}
	return true;
}

// MSG_WAITFORONE makes the receives after the first non-blocking.  A
// timeout is the kernel's to keep.
bool sd_hook_recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		      struct timespec *timeout, int *result) noexcept
{
	if (timeout)
		return false;
	*result = each_message(vec, vlen, [&](unsigned i) {
		int fl = flags & ~MSG_WAITFORONE;
		if (i && (flags & MSG_WAITFORONE))
			fl |= MSG_DONTWAIT;
		ssize_t r;
		if (sd_hook_recvmsg(fd, &vec[i].msg_hdr, fl, &r))
			return r;
		sig::Open open;
		return real::recvmsg()(fd, &vec[i].msg_hdr, fl);
	});
	return true;
}

// close() waits for no call in flight on fd: it is carried out when the
// last is out, and returns 0 now (close_deferred()).
bool sd_hook_close(int fd, int *result) noexcept
{
	if (vfork_child())
		return false;
	release_held();
	if (fd >= 0 && static_cast<unsigned>(fd) < MAX_CONNS &&
	    deferred[fd].load(std::memory_order_relaxed)) {
		*result = -1;
		errno = EBADF;		/* closed already, as far as the program knows */
		return true;
	}
	if (!close_deferred(fd))
		return false;
	*result = 0;
	return true;
}

// As close() for each fd of the range: those with calls in flight are
// closed when the calls are out, the rest by close_range() over the gaps.
bool sd_hook_close_range(unsigned int first, unsigned int last, int flags, int *result) noexcept
{
	if ((static_cast<unsigned>(flags) & CLOSE_RANGE_CLOEXEC) || vfork_child())
		return false;
	release_held();
	unsigned from = first;
	bool split = false;
	for (unsigned fd = first; fd <= last && fd < MAX_CONNS; fd++) {
		// Closed already (its close waits for a call), or closed now
		// but held open for a call in flight: either stays open.
		if (!deferred[fd].load(std::memory_order_relaxed) &&
		    (!conns[fd].load(std::memory_order_relaxed) ||
		     !close_deferred(static_cast<int>(fd))))
			continue;
		// fd stays open for now: close what lies before it.
		if (fd > from && real::close_range()(from, fd - 1, flags)) {
			*result = -1;
			return true;
		}
		split = true;
		from = fd + 1;
		if (fd == last)
			break;
	}
	if (!split)
		return false;
	*result = from > last ? 0 : real::close_range()(from, last, flags);
	return true;
}

// A copy of fd: its file's flags can now change through the copy.
static void copied(int fd)
{
	if (Conn *c = lookup(fd))
		c->shared.store(true, std::memory_order_relaxed);
}

bool sd_hook_dup(int fd, int *result) noexcept
{
	copied(fd);
	(void)result;
	return false;
}

bool sd_hook_dup2(int fd, int newfd, int *result) noexcept
{
	if (vfork_child())
		return false;
	copied(fd);
	if (fd != newfd && newfd >= 0) {
		undefer(newfd);
		forget(newfd);
	}
	(void)result;
	return false;
}

bool sd_hook_dup3(int fd, int newfd, int flags, int *result) noexcept
{
	(void)flags;
	return sd_hook_dup2(fd, newfd, result);
}

// Whether the fast path keeps anything for fd: state of its own, or a
// close that waits for a call (the wrappers of close and dup2 then ask
// their hooks whatever the descriptor table says).
bool sd_fds_deferred() noexcept
{
	return deferred_count.load(std::memory_order_relaxed) > 0;
}

bool sd_fd_tracked(int fd) noexcept
{
	return lookup(fd) || (fd >= 0 && static_cast<unsigned>(fd) < MAX_CONNS &&
			      deferred[fd].load(std::memory_order_relaxed));
}

// A new fd: any state left on its number is a closed file's (closed where
// the shim could not see it, fclose() or a raw close system call): drop it.
void sd_fd_new(int fd) noexcept
{
	if (lookup(fd)) {
		const int saved = errno;
		forget(fd);
		errno = saved;
	}
}

bool sd_hook_shutdown(int fd, int how, int *result) noexcept
{
	if (Conn *c = lookup(fd)) {
		if (how == SHUT_RD || how == SHUT_RDWR)
			c->rd_shut.store(true, std::memory_order_relaxed);
		if (how == SHUT_WR || how == SHUT_RDWR)
			c->wr_shut.store(true, std::memory_order_relaxed);
	}
	(void)result;
	return false;
}

// O_NONBLOCK is read once per socket and followed through fcntl and ioctl
// (and read again where others may change it: Conn::shared).
bool sd_hook_fcntl(int fd, int cmd, void *arg, int *result) noexcept
{
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		copied(fd);
	if (cmd != F_SETFL)
		return false;
	const long fl = reinterpret_cast<long>(arg);
	if (Conn *c = get(fd)) {
		c->nonblock.store(fl & O_NONBLOCK, std::memory_order_relaxed);
		c->async.store(fl & O_ASYNC, std::memory_order_relaxed);
		if (fl & O_ASYNC) {
			c->rx.lock.lock();
			if (c->still(fd))
				__atomic_fetch_or(c->rx.cons_flags, SD_RING_READER_WAIT,
						  __ATOMIC_SEQ_CST);
			c->rx.lock.unlock();
		}
	}
	(void)result;
	return false;
}

// FIONBIO: the kernel reads the flag first, so that a bad pointer gets its
// EFAULT, and only a pointer it could read is read here.
bool sd_hook_ioctl(int fd, unsigned long request, void *arg, int *result) noexcept
{
	Conn *c = request == FIONBIO ? lookup(fd) : nullptr;

	if (!c)
		return false;
	*result = real::ioctl()(fd, request, arg);
	if (*result == 0)
		c->nonblock.store(*static_cast<int *>(arg) != 0, std::memory_order_relaxed);
	return true;
}
