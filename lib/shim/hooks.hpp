// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The hooks: where the fast path plugs into the preload shim.
//
// For each call of calls.def of kind SD_CALL_FD or SD_CALL_OWN there is
//
//	bool sd_hook_NAME(PARAMS..., RET *result) noexcept;
//
// e.g. bool sd_hook_send(int fd, const void *buf, size_t len, int flags,
// ssize_t *result).  A hook returns true when it handled the call: *result
// is then what the call returns, and errno is set as the call would set it.
// It returns false when it did not; the shim then makes the real call with
// the same arguments, so a hook that returns false must not have consumed
// or changed anything.
//
// When the shim calls a hook:
//   - for calls on one descriptor: only when the fd is an AF_SD socket
//     (FdTable::kind), never for any other fd;
//   - socket, socketpair, fork: on every call (redirection of AF_INET
//     and the token hand-over on fork need them whatever the family);
//   - poll, ppoll, select, pselect: when one of the fds is an AF_SD socket;
//     epoll_wait, epoll_pwait, epoll_pwait2: when an AF_SD socket was added
//     to that epoll fd; epoll_create, epoll_create1 and epoll_ctl: on every
//     call (the fast path keeps track of interest lists);
//   - close_range (and closefrom, which calls the close_range hook with
//     last = ~0U and flags 0): when the range holds a known AF_SD fd; close
//     and the target of dup2 and dup3: when the fd is known to be AF_SD
//     (a descriptor no call has used yet has no fast-path state);
//   - sendfile: when either fd is an AF_SD socket;
//   - the aliases go to these hooks: fcntl64 to fcntl, sendfile64 to
//     sendfile, __read_chk to read, __recv_chk to recv, __recvfrom_chk to
//     recvfrom, __poll_chk to poll, __ppoll_chk to ppoll (after glibc's
//     length check passed).
//
// Never re-entered on one thread: while a hook runs, every intercepted call
// its thread makes (the hook's own system calls, a signal handler's calls)
// goes straight to libc.  The shim keeps the descriptor table itself,
// also for calls a hook handled: a hook that creates an fd need not enter
// it, and the table learns an fd's kind on first use.  The exception is
// epoll_create and epoll_create1: a hook that handles them enters the new
// fd (as FD_OTHER) itself.
//
// fcntl and ioctl are variadic: their hooks get the optional argument as
// void * (what glibc passes on to the kernel).
//
// The defaults in hooks.cpp are weak and return false, so every call takes
// the kernel's path.  A strong definition in another object file of the
// shim replaces a default (an object file, not a static library: the
// linker does not search an archive for a symbol that a weak definition
// already satisfies).
#pragma once

#include "shim.hpp"

namespace sd {
class Consumer;
}

#define SD_HOOK_PARAMS_(ret, ...) __VA_ARGS__ __VA_OPT__(, ) ret *result
// The parameters of a hook: PARAMS..., RET *result.
#define SD_HOOK_PARAMS(ret, params) SD_HOOK_PARAMS_(ret, SD_ARGS params)

#define SD_CALL_FD(ret, name, params, args) \
	bool sd_hook_##name(SD_HOOK_PARAMS(ret, params)) noexcept;
#define SD_CALL_OWN(ret, name, params, args) \
	bool sd_hook_##name(SD_HOOK_PARAMS(ret, params)) noexcept;
#define SD_CALL_VA(ret, name, params, args)
#define SD_CALL_ALIAS(ret, name, params, args)
#include "calls.def"

bool sd_hook_fcntl(int fd, int cmd, void *arg, int *result) noexcept;
// fd was just made by a call the shim saw (socket, accept, open, pipe,
// ...): whatever the fast path kept for that number belongs to a file
// closed where the shim could not see it.
void sd_fd_new(int fd) noexcept;
// Whether the fast path keeps anything for fd whatever the descriptor
// table says (its close and dup2 must reach their hooks).
bool sd_fd_tracked(int fd) noexcept;
// Whether a close waits for a call anywhere (close_range must reach its
// hook).
bool sd_fds_deferred() noexcept;
bool sd_hook_ioctl(int fd, unsigned long request, void *arg, int *result) noexcept;
