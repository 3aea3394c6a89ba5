// SPDX-License-Identifier: LGPL-2.1-or-later
//
// librsfix.so: preloaded before rdma-core's librspreload.so for the bench's
// rsocket row (bench/remote), so that sockperf runs on rsocket.
//
// sockperf's client sends with sendto() and the server's address on its
// connected TCP socket.  Linux's TCP ignores the address of a stream
// socket (short of MSG_FASTOPEN); rsocket refuses the call with EISCONN.
// This sendto() drops the address when the socket is connected and hands
// the call on to the next library (librspreload.so), which is what TCP
// does with it.  Nothing else is touched.  Not for datagram sockets, whose
// sendto() may name another peer than the connected one.
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace {

using sendto_fn = ssize_t (*)(int, const void *, size_t, int,
			      const struct sockaddr *, socklen_t);

// A connected socket: librspreload answers getpeername() for its rsockets
// (the descriptor itself is a placeholder socket of another type, so the
// kernel cannot say).  The bench preloads this only under sockperf --tcp,
// whose every socket is a stream socket.
bool connected(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return getpeername(fd, reinterpret_cast<struct sockaddr *>(&ss), &len) == 0;
}

} // namespace

extern "C" ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t alen)
{
	static const auto next = reinterpret_cast<sendto_fn>(dlsym(RTLD_NEXT, "sendto"));

	if (!next) {
		errno = ENOSYS;
		return -1;
	}
	if (addr && !(flags & MSG_FASTOPEN) && connected(fd)) {
		addr = nullptr;
		alen = 0;
	}
	return next(fd, buf, len, flags, addr, alen);
}
