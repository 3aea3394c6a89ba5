// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The real libc functions behind the shim's wrappers.
#include <dlfcn.h>
#include <sys/syscall.h>

#include <cstdlib>
#include <cstring>

#include "shim.hpp"

namespace sd::shim::real {

namespace {

void say(const char *s) noexcept
{
	// Not write() nor syscall(): the shim's own would come back here.
	// libc's syscall() is resolved by the constructor; before that, or
	// without it, nothing is said.
	if (syscall_t f = syscall_slot.load(std::memory_order_acquire))
		f(SYS_write, 2, s, std::strlen(s));
}

} // namespace

void *resolve(const char *name) noexcept
{
	void *f = dlsym(RTLD_NEXT, name);

	if (f)
		return f;
	// A program can only call a name its libc has, so this means a
	// broken installation (no libc after the shim in the search order).
	say("libsdpreload: cannot find the real ");
	say(name);
	say(" after the shim (dlsym(RTLD_NEXT)); aborting\n");
	std::abort();
}

void resolve_all() noexcept
{
	// Skip names this libc does not have (close_range, epoll_pwait2 on
	// an older one): no program can call them there either.
#define SD_CALL(ret, name, params, args)                                               \
	if (!name##_slot.load(std::memory_order_relaxed))                              \
		if (void *f = dlsym(RTLD_NEXT, #name))                                 \
			name##_slot.store(reinterpret_cast<name##_t>(f), std::memory_order_release);
#include "calls.def"
}

} // namespace sd::shim::real
