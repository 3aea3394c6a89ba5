// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Transparent redirection (Documentation/redirect.rst): under sdrun,
// socket(AF_INET or AF_INET6, SOCK_STREAM, 0 or IPPROTO_TCP) creates a
// redirected AF_SD socket (SD_PROTO_INET, SD_PROTO_INET6) instead.  The
// kernel decides: it refuses while the netns's net.sd.redirect is 0, and a
// refusal, or a kernel without AF_SD, gives the program its real socket.
//
// A redirected socket answers the socket API as TCP would.  The kernel
// does most of that (addresses, TCP's options, TCP fallback); the one
// answer it cannot give is SO_DOMAIN, which Linux takes from the socket's
// family before the family is asked, so it is given here.
#include "hooks.hpp"

#include "fast.hpp"

#include <errno.h>
#include <netinet/in.h>

#include <atomic>

using namespace sd::shim;

namespace {

// Set once socket(AF_SD) fails for want of the family: no module loaded.
// Asking again would make the kernel look for the module at every socket().
constinit std::atomic<bool> no_family{false};

bool redirectable(int domain, int type, int protocol) noexcept
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

} // namespace

bool sd_hook_socket(int domain, int type, int protocol, int *result) noexcept
{
	if (!redirectable(domain, type, protocol) || no_family.load(std::memory_order_relaxed))
		return false;
	const int saved = errno;
	const int fd = real::socket()(AF_SD, type,
				      domain == AF_INET ? SD_PROTO_INET : SD_PROTO_INET6);
	if (fd < 0) {
		if (errno == EAFNOSUPPORT)
			no_family.store(true, std::memory_order_relaxed);
		errno = saved;
		return false;	// the real socket, then
	}
	*result = fd;
	return true;
}

bool sd_hook_getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen,
			int *result) noexcept
{
	*result = real::getsockopt()(fd, level, optname, optval, optlen);
	if (*result != 0 || level != SOL_SOCKET || optname != SO_DOMAIN ||
	    *optlen < sizeof(int) || *static_cast<int *>(optval) != AF_SD)
		return true;

	const int saved = errno;
	int family = 0;
	socklen_t len = sizeof(family);
	if (real::getsockopt()(fd, SOL_SD, SD_REDIRECTED, &family, &len) == 0 && family)
		*static_cast<int *>(optval) = family;
	errno = saved;
	return true;
}

// A redirected socket that falls back to TCP is a TCP socket from then on
// (its file points there): forget what the table knew, and the next call
// finds out.  (A lookup that races with the connect may learn FD_SD again;
// fast::get() corrects that when the fast path finds no rings.)  Not for a
// socket whose rings are mapped: that one is connected already, and its
// close must still reach the fast path, which unmaps them.
bool sd_hook_connect(int fd, const struct sockaddr *, socklen_t, int *) noexcept
{
	if (fd >= 0 && static_cast<unsigned>(fd) < fast::MAX_CONNS &&
	    !fast::conns[fd].load(std::memory_order_acquire))
		fds.set(fd, FD_UNKNOWN);
	return false;
}
