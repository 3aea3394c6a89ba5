// SPDX-License-Identifier: LGPL-2.1-or-later
//
// libsdpreload.so: the LD_PRELOAD shim (run programs with sdrun).  It
// exports exactly the libc names of calls.def.  A call on a descriptor
// that is not an AF_SD socket costs one table lookup and goes to libc; a
// call on an AF_SD socket goes to its hook (hooks.hpp) and, when the hook
// does not handle it, to libc.  See Documentation/shim.rst.
#include <fcntl.h>
#include <climits>
#include <sys/syscall.h>
#include <linux/close_range.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hooks.hpp"
#include "signals.hpp"

using namespace sd::shim;

namespace {

// The re-entry guard: while this thread runs a hook, it is in a signal
// critical section (signals.hpp), and every intercepted call it makes
// goes straight to libc (the hook's own calls).  A signal that comes
// meanwhile is deferred until the hook returned, and its handler then
// runs outside the section, so its calls go through the shim.
using sig::inside;

// Whether the kernel restarts call c under SA_RESTART (man 7 signal): the
// poll, select and epoll_wait families never; for the socket calls the
// hook says (sig::interrupted(Restart::never) when the socket has a
// timeout).
constexpr sig::Restart restart_of(Call c) noexcept
{
	switch (c) {
	case Call::poll:
	case Call::ppoll:
	case Call::select:
	case Call::pselect:
	case Call::epoll_wait:
	case Call::epoll_pwait:
	case Call::epoll_pwait2:
	case Call::close:
		return sig::Restart::never;
	default:
		return sig::Restart::sa_restart;
	}
}

// SD_SHIM_TRACE=FILE: count, per hook, the calls that reached it and those
// it handled, and append them to FILE at exit ("PID NAME ASKED HANDLED").
// Costs nothing but one relaxed load on a hook's path when off.
constexpr unsigned ncalls = static_cast<unsigned>(Call::count_);
constinit std::atomic<bool> tracing{false};
constinit std::atomic<unsigned long> asked[ncalls] = {};
constinit std::atomic<unsigned long> handled[ncalls] = {};
char trace_path[4096];

const char *const call_names[ncalls] = {
#define SD_CALL(ret, name, params, args) #name,
#include "calls.def"
};

bool note(Call c, bool done) noexcept
{
	if (tracing.load(std::memory_order_relaxed)) [[unlikely]] {
		const auto i = static_cast<unsigned>(c);
		asked[i].fetch_add(1, std::memory_order_relaxed);
		if (done)
			handled[i].fetch_add(1, std::memory_order_relaxed);
	}
	return done;
}

__attribute__((constructor)) void shim_init()
{
	real::resolve_all();
	if (const char *p = std::getenv("SD_SHIM_TRACE"); p && *p &&
	    std::strlen(p) < sizeof(trace_path)) {
		std::strcpy(trace_path, p);
		tracing.store(true, std::memory_order_relaxed);
	}
}

__attribute__((destructor)) void shim_fini()
{
	if (!tracing.load(std::memory_order_relaxed))
		return;
	const int fd = open(trace_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	char buf[160];
	for (unsigned i = 0; i < ncalls; i++) {
		const unsigned long a = asked[i].load(std::memory_order_relaxed);
		if (!a)
			continue;
		const int n = std::snprintf(buf, sizeof(buf), "%d %s %lu %lu\n", getpid(),
					    call_names[i], a,
					    handled[i].load(std::memory_order_relaxed));
		if (n > 0)
			(void)real::write()(fd, buf, static_cast<size_t>(n));
	}
	(void)real::close()(fd);
}

// The arguments of a hook call: ARGS..., &r.
#define SD_HOOK_ARGS_(r, ...) __VA_ARGS__ __VA_OPT__(, ) &(r)
#define SD_HOOK_ARGS(r, args) SD_HOOK_ARGS_(r, SD_ARGS args)

// Run hook sd_hook_NAME with args and &r, in a signal critical section
// (sig::ask): true if it handled the call (r and errno are then the
// call's outcome, after the handlers of signals deferred meanwhile ran
// and the call was made again if the kernel would have restarted it).
#define SD_ASK(hook, r, args)                                                           \
	sig::ask(r, restart_of(Call::hook), [&]() noexcept {                           \
		return note(Call::hook, sd_hook_##hook(SD_HOOK_ARGS(r, args)));         \
	})

inline bool sd_fd(int fd) noexcept
{
	// The table first: a non-AF_SD fd pays the lookup and nothing else.
	return fds.kind(fd) == FD_SD && !inside();
}

// Any AF_SD socket among fds (poll).
bool any_sd(const pollfd *p, nfds_t n) noexcept
{
	for (nfds_t i = 0; i < n; i++)
		if (p[i].fd >= 0 && fds.kind(p[i].fd) == FD_SD)
			return true;
	return false;
}

// Any AF_SD socket among the fds below nfds in any of the sets (select).
bool any_sd(int nfds, const fd_set *r, const fd_set *w, const fd_set *e) noexcept
{
	constexpr int bits = 8 * sizeof(__fd_mask);

	for (int base = 0; base < nfds; base += bits) {
		const int word = base / bits;
		__fd_mask m = 0;
		if (r)
			m |= r->fds_bits[word];
		if (w)
			m |= w->fds_bits[word];
		if (e)
			m |= e->fds_bits[word];
		while (m) {
			const int fd = base + __builtin_ctzl(static_cast<unsigned long>(m));
			if (fd >= nfds)
				break;
			if (fds.kind(fd) == FD_SD)
				return true;
			m &= m - 1;
		}
	}
	return false;
}

// A new fd r made by a call the shim saw, of kind k (own: socket or
// accept, FdTable::own).  State left on the number is dropped first: its
// file was closed where the shim could not see it.
void created(int r, FdKind k, bool own = false) noexcept
{
	if (r < 0)
		return;
	if (!inside()) {
		sig::Section in_;
		sd_fd_new(r);
	}
	fds.set(r, k, own);
}

// A new fd r from accept on listener fd of kind k: a listener that is not
// AF_SD hands out sockets of its own family; an AF_SD one may hand out
// either (a redirected listener also accepts TCP clients), so ask later.
void accepted(int r, FdKind k) noexcept
{
	created(r, k == FD_OTHER ? FD_OTHER : FD_UNKNOWN, true);
}

} // namespace

// The generated wrappers: a call on one descriptor.
#define SD_CALL_FD(ret, name, params, args)                                             \
	extern "C" ret name params                                                      \
	{                                                                               \
		if (sd_fd(fd)) {                                                        \
			ret r{};                                                        \
			if (SD_ASK(name, r, args))                                      \
				return r;                                               \
		}                                                                       \
		return real::name() args;                                               \
	}
#define SD_CALL_OWN(ret, name, params, args)
#define SD_CALL_VA(ret, name, params, args)
#define SD_CALL_ALIAS(ret, name, params, args)
#include "calls.def"

// Descriptors: creation, copies, closing.

extern "C" int socket(int domain, int type, int protocol)
{
	if (!inside()) {
		int r = -1;
		if (SD_ASK(socket, r, (domain, type, protocol))) {
			created(r, FD_UNKNOWN, true);
			return r;
		}
	}
	const int r = real::socket()(domain, type, protocol);
	created(r, domain == AF_SD ? FD_SD : FD_OTHER, true);
	return r;
}

extern "C" int socketpair(int domain, int type, int protocol, int sv[2])
{
	FdKind k = domain == AF_SD ? FD_SD : FD_OTHER;
	int r = -1;

	if (inside() || !SD_ASK(socketpair, r, (domain, type, protocol, sv)))
		r = real::socketpair()(domain, type, protocol, sv);
	else
		k = FD_UNKNOWN;
	if (r == 0) {
		created(sv[0], k, true);
		created(sv[1], k, true);
	}
	return r;
}

extern "C" int accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	const FdKind k = fds.kind(fd);
	int r = -1;

	if (k != FD_SD || inside() || !SD_ASK(accept, r, (fd, addr, addrlen)))
		r = real::accept()(fd, addr, addrlen);
	accepted(r, k);
	return r;
}

extern "C" int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
	const FdKind k = fds.kind(fd);
	int r = -1;

	if (k != FD_SD || inside() || !SD_ASK(accept4, r, (fd, addr, addrlen, flags)))
		r = real::accept4()(fd, addr, addrlen, flags);
	accepted(r, k);
	return r;
}

// The entry is forgotten before the fd is closed and again after: before,
// so that no lookup trusts it once close() returned; after, so that a
// lookup that raced with the close cannot store a stale kind (shim.hpp).
extern "C" int close(int fd)
{
	int r = -1;

	if ((fds.peek(fd) == FD_SD || sd_fd_tracked(fd)) && !inside() && SD_ASK(close, r, (fd))) {
		fds.forget(fd);
		return r;
	}
	fds.forget(fd);
	r = real::close()(fd);
	fds.forget(fd);
	return r;
}

extern "C" int close_range(unsigned int first, unsigned int last, int flags)
{
	const bool closing = !(static_cast<unsigned>(flags) & CLOSE_RANGE_CLOEXEC);
	int r = -1;

	if (first <= last && !inside() && (fds.any_sd(first, last) || sd_fds_deferred()) &&
	    SD_ASK(close_range, r, (first, last, flags))) {
		if (closing && r == 0)
			fds.forget_range(first, last);
		return r;
	}
	if (closing)
		fds.forget_range(first, last);
	r = real::close_range()(first, last, flags);
	if (closing && r == 0)
		fds.forget_range(first, last);
	return r;
}

extern "C" void closefrom(int lowfd)
{
	const unsigned first = lowfd < 0 ? 0 : static_cast<unsigned>(lowfd);
	int r = -1;

	if (!inside() && (fds.any_sd(first, ~0U) || sd_fds_deferred()) &&
	    SD_ASK(close_range, r, (first, ~0U, 0)) && r == 0) {
		fds.forget_range(first, ~0U);
		return;
	}
	fds.forget_range(first, ~0U);
	real::closefrom()(lowfd);
	fds.forget_range(first, ~0U);
}

extern "C" int dup(int fd)
{
	int r = -1;

	if (!sd_fd(fd) || !SD_ASK(dup, r, (fd)))
		r = real::dup()(fd);
	if (r >= 0) {
		created(r, FD_UNKNOWN);
		fds.copy(fd, r);
	}
	return r;
}

// dup2 and dup3 close newfd first (unless it is fd).
template <typename Real, typename Hook>
static int dup_onto(int fd, int newfd, Real real_call, Hook hook)
{
	int r = -1;

	if (!inside() &&
	    (fds.kind(fd) == FD_SD ||
	     (newfd != fd && (fds.peek(newfd) == FD_SD || sd_fd_tracked(newfd)))) &&
	    hook(r)) {
		if (r >= 0 && newfd != fd)
			fds.copy(fd, newfd);
		return r;
	}
	if (newfd != fd)
		fds.forget(newfd);
	r = real_call();
	if (newfd != fd) {
		if (r >= 0)
			fds.copy(fd, newfd);
		else
			fds.forget(newfd);
	}
	return r;
}

extern "C" int dup2(int fd, int newfd)
{
	return dup_onto(
		fd, newfd, [&] { return real::dup2()(fd, newfd); },
		[&](int &r) { return SD_ASK(dup2, r, (fd, newfd)); });
}

extern "C" int dup3(int fd, int newfd, int flags)
{
	return dup_onto(
		fd, newfd, [&] { return real::dup3()(fd, newfd, flags); },
		[&](int &r) { return SD_ASK(dup3, r, (fd, newfd, flags)); });
}

// fcntl and fcntl64 are one call on 64-bit machines; each goes to its own
// real function and both to the fcntl hook.  glibc too reads the optional
// argument as a void *, whatever cmd is.
template <typename Real> static int do_fcntl(Real real_fcntl, int fd, int cmd, void *arg)
{
	int r = -1;

	if (!sd_fd(fd) || !SD_ASK(fcntl, r, (fd, cmd, arg)))
		r = real_fcntl(fd, cmd, arg);
	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
		created(r, FD_UNKNOWN);
		fds.copy(fd, r);
	}
	return r;
}

extern "C" int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(real::fcntl(), fd, cmd, arg);
}

extern "C" int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(real::fcntl64(), fd, cmd, arg);
}

extern "C" int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	va_start(ap, request);
	void *arg = va_arg(ap, void *);
	va_end(ap);

	int r = -1;
	if (sd_fd(fd) && SD_ASK(ioctl, r, (fd, request, arg)))
		return r;
	return real::ioctl()(fd, request, arg);
}

extern "C" pid_t fork()
{
	pid_t r = -1;

	if (!inside() && SD_ASK(fork, r, ()))
		return r;
	return real::fork()();
}

// Connection setup and options (the rest are generated).

// Linux refuses SOL_SOCKET/SO_REUSEPORT on AF_SD sockets (EOPNOTSUPP)
// before the family sees it; the family offers the same switch as
// SOL_SD/SD_REUSEPORT (<linux/sd.h>).  The mapping holds inside hooks too.
extern "C" int setsockopt(int fd, int level, int optname, const void *optval, socklen_t optlen)
{
	if (fds.kind(fd) == FD_SD) {
		if (level == SOL_SOCKET && optname == SO_REUSEPORT) {
			level = SOL_SD;
			optname = SD_REUSEPORT;
		}
		int r = -1;
		if (!inside() && SD_ASK(setsockopt, r, (fd, level, optname, optval, optlen)))
			return r;
	}
	return real::setsockopt()(fd, level, optname, optval, optlen);
}

// Data (the rest are generated).

extern "C" ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	ssize_t r = -1;

	if ((fds.kind(out_fd) == FD_SD || fds.kind(in_fd) == FD_SD) && !inside() &&
	    SD_ASK(sendfile, r, (out_fd, in_fd, offset, count)))
		return r;
	return real::sendfile()(out_fd, in_fd, offset, count);
}

extern "C" ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	static_assert(sizeof(off_t) == sizeof(off64_t), "sendfile64 is sendfile here");
	ssize_t r = -1;

	if ((fds.kind(out_fd) == FD_SD || fds.kind(in_fd) == FD_SD) && !inside() &&
	    SD_ASK(sendfile, r, (out_fd, in_fd, reinterpret_cast<off_t *>(offset), count)))
		return r;
	return real::sendfile64()(out_fd, in_fd, offset, count);
}

// Readiness.

extern "C" int poll(struct pollfd *p, nfds_t n, int timeout)
{
	int r = -1;

	if (!inside() && any_sd(p, n) && SD_ASK(poll, r, (p, n, timeout)))
		return r;
	return real::poll()(p, n, timeout);
}

extern "C" int ppoll(struct pollfd *p, nfds_t n, const struct timespec *timeout,
		     const sigset_t *sigmask)
{
	int r = -1;

	if (!inside() && any_sd(p, n) && SD_ASK(ppoll, r, (p, n, timeout, sigmask)))
		return r;
	return real::ppoll()(p, n, timeout, sigmask);
}

extern "C" int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *timeout)
{
	int r = -1;

	if (!inside() && any_sd(nfds, rd, wr, ex) && SD_ASK(select, r, (nfds, rd, wr, ex, timeout)))
		return r;
	return real::select()(nfds, rd, wr, ex, timeout);
}

extern "C" int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
		       const struct timespec *timeout, const sigset_t *sigmask)
{
	int r = -1;

	if (!inside() && any_sd(nfds, rd, wr, ex) &&
	    SD_ASK(pselect, r, (nfds, rd, wr, ex, timeout, sigmask)))
		return r;
	return real::pselect()(nfds, rd, wr, ex, timeout, sigmask);
}

// An epoll fd is not a socket: entered as FD_OTHER, by the hook when it
// handles the call (it keys its own state to the entry's generation).
extern "C" int epoll_create(int size)
{
	int r = -1;

	if (!inside() && SD_ASK(epoll_create, r, (size)))
		return r;
	r = real::epoll_create()(size);
	created(r, FD_OTHER);
	return r;
}

extern "C" int epoll_create1(int flags)
{
	int r = -1;

	if (!inside() && SD_ASK(epoll_create1, r, (flags)))
		return r;
	r = real::epoll_create1()(flags);
	created(r, FD_OTHER);
	return r;
}

extern "C" int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	const bool sd = fds.kind(fd) == FD_SD;
	int r = -1;

	if (inside() || !SD_ASK(epoll_ctl, r, (epfd, op, fd, event)))
		r = real::epoll_ctl()(epfd, op, fd, event);
	// An epoll fd inside another passes its mark on.
	if (r == 0 && op == EPOLL_CTL_ADD && (sd || fds.epoll_has_sd(fd)))
		fds.mark_epoll(epfd);
	return r;
}

extern "C" int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	int r = -1;

	if (fds.epoll_has_sd(epfd) && !inside() &&
	    SD_ASK(epoll_wait, r, (epfd, events, maxevents, timeout)))
		return r;
	return real::epoll_wait()(epfd, events, maxevents, timeout);
}

extern "C" int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			   const sigset_t *sigmask)
{
	int r = -1;

	if (fds.epoll_has_sd(epfd) && !inside() &&
	    SD_ASK(epoll_pwait, r, (epfd, events, maxevents, timeout, sigmask)))
		return r;
	return real::epoll_pwait()(epfd, events, maxevents, timeout, sigmask);
}

extern "C" int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			    const struct timespec *timeout, const sigset_t *sigmask)
{
	int r = -1;

	if (fds.epoll_has_sd(epfd) && !inside() &&
	    SD_ASK(epoll_pwait2, r, (epfd, events, maxevents, timeout, sigmask)))
		return r;
	return real::epoll_pwait2()(epfd, events, maxevents, timeout, sigmask);
}

// Fortify variants.  A length check that fails goes to glibc's own
// variant, which reports the overflow and aborts; otherwise they are the
// plain call.

extern "C" ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	ssize_t r = -1;

	if (len <= buflen && sd_fd(fd) && SD_ASK(read, r, (fd, buf, len)))
		return r;
	return real::__read_chk()(fd, buf, len, buflen);
}

extern "C" ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	ssize_t r = -1;

	if (len <= buflen && sd_fd(fd) && SD_ASK(recv, r, (fd, buf, len, flags)))
		return r;
	return real::__recv_chk()(fd, buf, len, buflen, flags);
}

extern "C" ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				  struct sockaddr *addr, socklen_t *addrlen)
{
	ssize_t r = -1;

	if (len <= buflen && sd_fd(fd) && SD_ASK(recvfrom, r, (fd, buf, len, flags, addr, addrlen)))
		return r;
	return real::__recvfrom_chk()(fd, buf, len, buflen, flags, addr, addrlen);
}

extern "C" int __poll_chk(struct pollfd *p, nfds_t n, int timeout, size_t fdslen)
{
	int r = -1;

	if (fdslen / sizeof(*p) >= n && !inside() && any_sd(p, n) && SD_ASK(poll, r, (p, n, timeout)))
		return r;
	return real::__poll_chk()(p, n, timeout, fdslen);
}

extern "C" int __ppoll_chk(struct pollfd *p, nfds_t n, const struct timespec *timeout,
			   const sigset_t *sigmask, size_t fdslen)
{
	int r = -1;

	if (fdslen / sizeof(*p) >= n && !inside() && any_sd(p, n) &&
	    SD_ASK(ppoll, r, (p, n, timeout, sigmask)))
		return r;
	return real::__ppoll_chk()(p, n, timeout, sigmask, fdslen);
}

// Descriptors made or closed by calls that are not about sockets.

namespace {

// fd is closed inside glibc (fclose, freopen), where no deferral is
// possible: its state goes now.
void closing_inside(int fd) noexcept
{
	if (fd >= 0 && fds.peek(fd) == FD_SD && !inside()) {
		sig::Section in_;
		sd_fd_new(fd);
	}
	fds.forget(fd);
}

int made(int r) noexcept
{
	created(r, FD_UNKNOWN);
	return r;
}

FILE *made(FILE *f) noexcept
{
	if (f)
		created(fileno(f), FD_OTHER);
	return f;
}

// open's optional mode: read only when the flags say there is one, as
// glibc's own open does.
mode_t open_mode(int flags, va_list ap) noexcept
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

} // namespace

extern "C" int fclose(FILE *stream)
{
	const int fd = stream ? fileno(stream) : -1;

	closing_inside(fd);
	const int r = real::fclose()(stream);
	fds.forget(fd);
	return r;
}

extern "C" FILE *freopen(const char *path, const char *mode, FILE *stream)
{
	const int fd = stream ? fileno(stream) : -1;

	closing_inside(fd);
	FILE *f = real::freopen()(path, mode, stream);
	fds.forget(fd);
	return made(f);
}

extern "C" FILE *fopen(const char *path, const char *mode)
{
	return made(real::fopen()(path, mode));
}

extern "C" FILE *fopen64(const char *path, const char *mode)
{
	return made(real::fopen64()(path, mode));
}

extern "C" int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	const mode_t m = open_mode(flags, ap);
	va_end(ap);
	return made(real::open()(path, flags, m));
}

extern "C" int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	const mode_t m = open_mode(flags, ap);
	va_end(ap);
	return made(real::open64()(path, flags, m));
}

extern "C" int __open_2(const char *path, int flags)
{
	return made(real::__open_2()(path, flags));
}

extern "C" int __open64_2(const char *path, int flags)
{
	return made(real::__open64_2()(path, flags));
}

extern "C" int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	const mode_t m = open_mode(flags, ap);
	va_end(ap);
	return made(real::openat()(dirfd, path, flags, m));
}

extern "C" int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	const mode_t m = open_mode(flags, ap);
	va_end(ap);
	return made(real::openat64()(dirfd, path, flags, m));
}

extern "C" int __openat_2(int dirfd, const char *path, int flags)
{
	return made(real::__openat_2()(dirfd, path, flags));
}

extern "C" int __openat64_2(int dirfd, const char *path, int flags)
{
	return made(real::__openat64_2()(dirfd, path, flags));
}

extern "C" int creat(const char *path, mode_t mode)
{
	return made(real::creat()(path, mode));
}

extern "C" int creat64(const char *path, mode_t mode)
{
	return made(real::creat64()(path, mode));
}

extern "C" int pipe(int p[2]) noexcept
{
	const int r = real::pipe()(p);
	if (r == 0) {
		created(p[0], FD_OTHER);
		created(p[1], FD_OTHER);
	}
	return r;
}

extern "C" int pipe2(int p[2], int flags) noexcept
{
	const int r = real::pipe2()(p, flags);
	if (r == 0) {
		created(p[0], FD_OTHER);
		created(p[1], FD_OTHER);
	}
	return r;
}

extern "C" int eventfd(unsigned int count, int flags) noexcept
{
	return made(real::eventfd()(count, flags));
}

extern "C" int memfd_create(const char *name, unsigned int flags) noexcept
{
	return made(real::memfd_create()(name, flags));
}

extern "C" int timerfd_create(int clockid, int flags) noexcept
{
	return made(real::timerfd_create()(clockid, flags));
}

// signalfd with fd -1 makes a descriptor; with another fd it changes it.
extern "C" int signalfd(int fd, const sigset_t *mask, int flags) noexcept
{
	const int r = real::signalfd()(fd, mask, flags);
	return fd == -1 ? made(r) : r;
}

// syscall(): the calls that close or copy descriptors go through the
// shim's own wrappers, as if the program had called libc's; those that
// make one are followed.  The rest (a raw sendto or recvfrom included)
// reach the kernel as they are: the kernel keeps them apart from any fast
// path call in flight (<linux/sd.h>, "Tokens").
extern "C" long syscall(long number, ...)
{
	va_list ap;
	va_start(ap, number);
	long a[6];
	for (long &v : a)
		v = va_arg(ap, long);
	va_end(ap);

	switch (number) {
	case SYS_close:
		return close(static_cast<int>(a[0]));
	case SYS_close_range:
		return close_range(static_cast<unsigned>(a[0]), static_cast<unsigned>(a[1]),
				   static_cast<int>(a[2]));
	case SYS_dup:
		return dup(static_cast<int>(a[0]));
	case SYS_dup2:
		return dup2(static_cast<int>(a[0]), static_cast<int>(a[1]));
	case SYS_dup3:
		return dup3(static_cast<int>(a[0]), static_cast<int>(a[1]), static_cast<int>(a[2]));
	default:
		break;
	}
	const long r = real::syscall()(number, a[0], a[1], a[2], a[3], a[4], a[5]);
	switch (number) {
	case SYS_socket:
	case SYS_accept:
	case SYS_accept4:
	case SYS_open:
	case SYS_openat:
	case SYS_openat2:
	case SYS_creat:
	case SYS_eventfd:
	case SYS_eventfd2:
	case SYS_memfd_create:
	case SYS_epoll_create:
	case SYS_epoll_create1:
	case SYS_timerfd_create:
	case SYS_signalfd:
	case SYS_signalfd4:
	case SYS_inotify_init:
	case SYS_inotify_init1:
	case SYS_pidfd_open:
	case SYS_pidfd_getfd:
		if (r >= 0 && r <= INT_MAX)
			created(static_cast<int>(r), FD_UNKNOWN);
		break;
	case SYS_pipe:
	case SYS_pipe2:
	case SYS_socketpair:
		if (r == 0) {
			int *p = reinterpret_cast<int *>(number == SYS_socketpair ? a[3] : a[0]);
			created(p[0], FD_UNKNOWN);
			created(p[1], FD_UNKNOWN);
		}
		break;
	default:
		break;
	}
	return r;
}
