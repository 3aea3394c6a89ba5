// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The shim's per-descriptor table (see shim.hpp).
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "shim.hpp"

namespace sd::shim {

constinit FdTable fds;

std::uint16_t *FdTable::grow(unsigned chunk) const noexcept
{
	// mmap, not malloc: async-signal-safe, and zeroed.
	const std::size_t len = CHUNK * sizeof(std::uint16_t);
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return nullptr;
	std::uint16_t *mine = static_cast<std::uint16_t *>(m), *cur = nullptr;
	if (dir_[chunk].compare_exchange_strong(cur, mine, std::memory_order_acq_rel,
						std::memory_order_acquire))
		return mine;
	munmap(m, len);		// another thread was first
	return cur;
}

FdKind FdTable::classify(int fd) noexcept
{
	const int saved = errno;
	int domain = 0;
	socklen_t len = sizeof(domain);
	const int rc = real::getsockopt()(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
	const int err = errno;

	errno = saved;		// the caller's call sets errno, not this one
	if (rc == 0)
		return domain == AF_SD ? FD_SD : FD_OTHER;
	// ENOTSOCK for files, pipes, eventfds...; EBADF for a closed fd
	// (or an O_PATH one), which stays unknown.
	return err == EBADF ? FD_UNKNOWN : FD_OTHER;
}

FdKind FdTable::learn(std::uint16_t *e, std::uint16_t seen, int fd) noexcept
{
	const FdKind k = classify(fd);

	// Fails, leaving the entry unknown, if the fd was closed or replaced
	// (or joined an epoll set) while we asked.
	if (k != FD_UNKNOWN)
		std::atomic_ref(*e).compare_exchange_strong(
			seen, static_cast<std::uint16_t>((seen & ~unsigned{KIND_MASK}) | k),
			std::memory_order_relaxed);
	return k;
}

void FdTable::replace_entry(std::uint16_t *e, std::uint16_t low) noexcept
{
	std::atomic_ref ref(*e);
	std::uint16_t v = ref.load(std::memory_order_relaxed), nv;

	do
		nv = static_cast<std::uint16_t>(((v & ~unsigned{LOW_MASK}) + GEN_ONE) | low);
	while (!ref.compare_exchange_weak(v, nv, std::memory_order_relaxed));
}

void FdTable::replace(int fd, std::uint16_t low) noexcept
{
	// Forgetting needs no chunk: an fd without one was never known.
	if (std::uint16_t *e = entry(fd, low != 0))
		replace_entry(e, low);
}

void FdTable::forget_range(unsigned first, unsigned last) noexcept
{
	last = std::min(last, MAX_FD - 1);
	for (unsigned fd = first; fd <= last;) {
		std::uint16_t *c = dir_[fd >> CHUNK_BITS].load(std::memory_order_acquire);
		const unsigned end = std::min(last, fd | (CHUNK - 1));

		for (; c && fd <= end; fd++)
			replace_entry(&c[fd & (CHUNK - 1)], 0);
		fd = end + 1;
	}
}

bool FdTable::any_sd(unsigned first, unsigned last) const noexcept
{
	last = std::min(last, MAX_FD - 1);
	for (unsigned fd = first; fd <= last;) {
		std::uint16_t *c = dir_[fd >> CHUNK_BITS].load(std::memory_order_acquire);
		const unsigned end = std::min(last, fd | (CHUNK - 1));

		for (; c && fd <= end; fd++)
			if ((std::atomic_ref(c[fd & (CHUNK - 1)]).load(std::memory_order_relaxed) &
			     KIND_MASK) == FD_SD)
				return true;
		fd = end + 1;
	}
	return false;
}

void FdTable::mark_epoll(int epfd) noexcept
{
	if (std::uint16_t *e = entry(epfd, true))
		std::atomic_ref(*e).fetch_or(FD_EPOLL_SD, std::memory_order_relaxed);
}

} // namespace sd::shim
