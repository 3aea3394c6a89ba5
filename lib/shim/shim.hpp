// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Inside the preload shim (libsdpreload.so): the real libc functions and
// the per-descriptor table.  See Documentation/shim.rst.
//
// Nothing in the shim may call an intercepted function by its name: the
// shim exports those names itself, so the call would come back into the
// shim.  It calls real::NAME()(...) instead.
#pragma once

#include <linux/sd.h>
#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

// SD_ARGS (a, b) is a, b: strips the parentheses of a list in calls.def.
#define SD_ARGS(...) __VA_ARGS__

namespace sd::shim {

// Every call of calls.def, for the trace counters.
enum class Call : unsigned {
#define SD_CALL(ret, name, params, args) name,
#include "calls.def"
	count_
};

namespace real {

// The type of each real function: real::send_t is ssize_t (*)(int, ...).
#define SD_CALL(ret, name, params, args) using name##_t = ret(*) params;
#include "calls.def"

// dlsym(RTLD_NEXT, name); prints a message and aborts when there is none.
void *resolve(const char *name) noexcept;

// Resolve every call now (the shim's constructor does, so that a signal
// handler that runs later never enters dlsym).
void resolve_all() noexcept;

// The real function, resolved on first use and cached.  Two threads that
// race on the first use both resolve it and store the same pointer.
#define SD_CALL(ret, name, params, args)                                                  \
	inline std::atomic<name##_t> name##_slot{nullptr};                               \
	inline name##_t name() noexcept                                                   \
	{                                                                                 \
		name##_t f = name##_slot.load(std::memory_order_acquire);                 \
		if (!f) [[unlikely]] {                                                    \
			f = reinterpret_cast<name##_t>(resolve(#name));                   \
			name##_slot.store(f, std::memory_order_release);                  \
		}                                                                         \
		return f;                                                                 \
	}
#include "calls.def"

} // namespace real

// What the shim knows about a descriptor.
enum FdKind : unsigned {
	FD_UNKNOWN = 0,		// not seen yet (or not open)
	FD_OTHER = 1,		// not an AF_SD socket
	FD_SD = 2,		// an AF_SD socket
};

// The per-descriptor table: fd -> FdKind, learnt with
// getsockopt(SO_DOMAIN) the first time a call uses the fd and cached until
// the fd is closed or replaced (close, close_range, closefrom, dup2 and
// dup3 onto it).  Descriptors the shim creates (socket, accept, dup, ...)
// are entered at once.
//
// An entry is 16 bits: the kind in bits 0-1, FD_EPOLL_SD in bit 2 (an epoll
// instance with an AF_SD socket among its members), FD_OWN in bit 3 (the
// fd was made by a call of this process that the shim saw, socket or
// accept, and no copy of it was made since: nobody else can change its
// file's flags), a generation in bits 4-15 that every change bumps.  A lookup that has to ask the kernel
// stores its answer only if the generation did not move meanwhile, so a
// close that races with it cannot leave a stale FD_SD behind.  Every error
// goes towards FD_UNKNOWN or FD_OTHER, never FD_SD: passing an AF_SD fd to
// the kernel is always correct (Documentation/design.rst, decision 1),
// handing a pipe to the fast path never is.
//
// Entries live in chunks of 4096, mapped on first use; fds at or above
// MAX_FD are asked about on every call.
class FdTable {
public:
	static constexpr unsigned CHUNK_BITS = 12;
	static constexpr unsigned DIR_BITS = 12;
	static constexpr unsigned MAX_FD = 1U << (CHUNK_BITS + DIR_BITS);

	// The kind of fd, asking the kernel on first use.  Costs two loads
	// once the fd is known.
	FdKind kind(int fd) noexcept
	{
		std::uint16_t *e = entry(fd, true);

		if (!e) [[unlikely]]
			return fd < 0 ? FD_UNKNOWN : classify(fd);
		std::uint16_t v = std::atomic_ref(*e).load(std::memory_order_relaxed);
		if (v & KIND_MASK) [[likely]]
			return static_cast<FdKind>(v & KIND_MASK);
		return learn(e, v, fd);
	}

	// The kind as known now, without asking the kernel.
	FdKind peek(int fd) const noexcept { return static_cast<FdKind>(raw(fd) & KIND_MASK); }

	// fd was just created, of kind k (FD_UNKNOWN: find out on first use);
	// own: by socket or accept in this process (FD_OWN).
	void set(int fd, FdKind k, bool own = false) noexcept
	{
		replace(fd, static_cast<std::uint16_t>(k | (own ? FD_OWN : 0)));
	}
	// Whether fd's file is this process's alone (FD_OWN).
	bool own(int fd) const noexcept { return raw(fd) & FD_OWN; }
	// fd is being or was closed.
	void forget(int fd) noexcept { replace(fd, 0); }
	// to is now a copy of from (dup, dup2, dup3, F_DUPFD).  from's
	// generation moves too: state keyed to it (an epoll fd's tracked
	// interest list) cannot follow changes made through the copy.
	// Neither is FD_OWN any more.
	void copy(int from, int to) noexcept
	{
		const std::uint16_t low = raw(from) & (KIND_MASK | FD_EPOLL_SD);

		replace(to, low);
		if (std::uint16_t *e = entry(from, false))
			replace_entry(e, low);
	}

	// The generation of fd's entry (0 if it has none): it moves whenever
	// the fd is closed, replaced or copied.
	std::uint16_t generation(int fd) const noexcept
	{
		return static_cast<std::uint16_t>(raw(fd) & ~unsigned{LOW_MASK});
	}
	// Every fd in [first, last] is being or was closed.
	void forget_range(unsigned first, unsigned last) noexcept;
	// Whether a known AF_SD fd lies in [first, last] (fds never seen
	// have no fast-path state to act on).
	bool any_sd(unsigned first, unsigned last) const noexcept;

	// An AF_SD socket (or an epoll fd holding one) joined epoll fd epfd.
	void mark_epoll(int epfd) noexcept;
	bool epoll_has_sd(int epfd) const noexcept { return raw(epfd) & FD_EPOLL_SD; }

private:
	static constexpr std::uint16_t KIND_MASK = 3;
	static constexpr std::uint16_t FD_EPOLL_SD = 4;
	static constexpr std::uint16_t FD_OWN = 8;
	static constexpr std::uint16_t GEN_ONE = 16;
	static constexpr std::uint16_t LOW_MASK = GEN_ONE - 1;
	static constexpr unsigned CHUNK = 1U << CHUNK_BITS;

	std::uint16_t *entry(int fd, bool create) const noexcept
	{
		if (fd < 0 || static_cast<unsigned>(fd) >= MAX_FD) [[unlikely]]
			return nullptr;
		const unsigned u = static_cast<unsigned>(fd);
		std::uint16_t *c = dir_[u >> CHUNK_BITS].load(std::memory_order_acquire);
		if (!c) [[unlikely]] {
			if (!create)
				return nullptr;
			c = grow(u >> CHUNK_BITS);
			if (!c)
				return nullptr;
		}
		return &c[u & (CHUNK - 1)];
	}
	std::uint16_t raw(int fd) const noexcept
	{
		std::uint16_t *e = entry(fd, false);
		return e ? std::atomic_ref(*e).load(std::memory_order_relaxed) : 0;
	}

	std::uint16_t *grow(unsigned chunk) const noexcept;
	FdKind learn(std::uint16_t *e, std::uint16_t seen, int fd) noexcept;
	void replace(int fd, std::uint16_t low) noexcept;
	static void replace_entry(std::uint16_t *e, std::uint16_t low) noexcept;
	static FdKind classify(int fd) noexcept;

	mutable std::atomic<std::uint16_t *> dir_[1U << DIR_BITS] = {};
};

extern constinit FdTable fds;

} // namespace sd::shim
