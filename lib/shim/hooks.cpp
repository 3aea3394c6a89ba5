// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Default hooks: none handles anything, so every call on an AF_SD socket
// takes the kernel's path.  Each is weak; the fast path replaces it with a
// strong definition (see hooks.hpp).
#include "hooks.hpp"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define SD_CALL_FD(ret, name, params, args) \
	[[gnu::weak]] bool sd_hook_##name(SD_HOOK_PARAMS(ret, params)) noexcept { return false; }
#define SD_CALL_OWN(ret, name, params, args) \
	[[gnu::weak]] bool sd_hook_##name(SD_HOOK_PARAMS(ret, params)) noexcept { return false; }
#define SD_CALL_VA(ret, name, params, args)
#define SD_CALL_ALIAS(ret, name, params, args)
#include "calls.def"

[[gnu::weak]] bool sd_hook_fcntl(int fd, int cmd, void *arg, int *result) noexcept
{
	return false;
}

[[gnu::weak]] bool sd_hook_ioctl(int fd, unsigned long request, void *arg, int *result) noexcept
{
	return false;
}

[[gnu::weak]] void sd_fd_new(int fd) noexcept {}

[[gnu::weak]] bool sd_fd_tracked(int fd) noexcept
{
	return false;
}

[[gnu::weak]] bool sd_fds_deferred() noexcept
{
	return false;
}
