// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Signals in the preload shim: the shim wraps sigaction and its friends
// (signals.cpp) so that the program's handlers of asynchronous signals run
// through the shim's own entry function.  A signal that arrives while its
// thread is inside a shim critical section (a hook holding a side lock, a
// ring's busy count, mid-copy) is recorded and its handler runs when the
// outermost section ends, with every lock dropped, as the kernel would
// have run it.  See Documentation/shim.rst, "Signals".
//
// What the fast path does with it:
//
//   - Every spin polls sig::pending() (one TLS load) and, when it is true,
//     stops: it calls sig::interrupted() and the hook returns true with
//     *result -1 (nothing done yet) or the partial count.  The wrapper
//     then runs the handlers and either makes the whole call again (every
//     handler that ran had SA_RESTART and the call is one the kernel
//     restarts) or returns -1 with errno EINTR (or the partial count).
//   - A hook about to sleep in the kernel with no lock and no busy count
//     held (a poll() in ready.cpp) first checks sig::pending() (a signal
//     that came during the spin interrupts the call, as above), then
//     sleeps inside a sig::Open scope: a signal then runs its handler at
//     once, the kernel call returns EINTR, and the hook calls
//     sig::interrupted() and returns -1 as well.
//
// All of it is async-signal-safe and lock-free on the thread's side.
#pragma once

#include <signal.h>

#include <atomic>
#include <cerrno>

namespace sd::shim::sig {

// Whether the kernel would restart an interrupted call under SA_RESTART
// (man 7 signal, "Interruption of system calls and library functions by
// signal handlers").
enum class Restart : unsigned char {
	// Restarted when every handler that ran had SA_RESTART: accept,
	// connect, recv*, send*, read, write, readv, writev on a socket
	// without SO_RCVTIMEO/SO_SNDTIMEO.
	sa_restart,
	// Never restarted, EINTR whatever SA_RESTART says: poll, ppoll,
	// select, pselect, the epoll_wait family; the socket calls above
	// when the socket has a timeout (SO_RCVTIMEO for accept and the
	// receives, SO_SNDTIMEO for connect and the sends); recvmmsg with a
	// timeout.
	never,
};

// The thread's state.  Public only so that the inline calls below are one
// TLS access; use the functions.
struct Thread {
	// A deferred signal waits (set by the entry function, cleared when
	// the queue is run).
	std::atomic<bool> pending;
	// Critical sections open on this thread (Section), and the Open
	// regions among them.
	unsigned depth;
	unsigned open;
	// The call in progress (ask()): its hook stopped for a signal, and
	// how; handlers ran during it; one of them had no SA_RESTART.
	bool interrupted;
	Restart restart;
	bool ran;
	bool ran_no_restart;
};

extern thread_local Thread now __attribute__((tls_model("initial-exec")));

// True when a deferred signal waits on this thread.  Call it in every
// iteration of a spin; when true, stop (see interrupted()).
inline bool pending() noexcept { return now.pending.load(std::memory_order_relaxed); }

// The hook stops because of a pending signal (or a kernel call it made in
// an Open region returned EINTR): it must then return true, with *result
// -1 if it did nothing yet (errno is set by the wrapper) or the count
// done so far.  how: Restart::never when the kernel would return EINTR
// even under SA_RESTART (the socket has a timeout); a call of the poll
// family never restarts whatever the hook says.
inline void interrupted(Restart how = Restart::sa_restart) noexcept
{
	now.interrupted = true;
	if (how == Restart::never)
		now.restart = Restart::never;
}

// Whether this thread runs in a critical section: every intercepted call
// it makes then goes straight to libc (the re-entry guard).  A handler
// never sees it set: the shim runs handlers only outside every section,
// or in an Open region with the thread's state set aside.
inline bool inside() noexcept { return now.depth != 0; }

// Run the deferred handlers (after the outermost section ended).
void run_pending() noexcept;

// A critical section (RAII): signals that arrive meanwhile are deferred
// until the outermost one ends.  Nests.  The shim's wrappers open one
// around every hook (ask()); the fast path need not open its own.
class Section {
public:
	Section() noexcept
	{
		now.depth++;
		std::atomic_signal_fence(std::memory_order_seq_cst);
	}
	~Section()
	{
		std::atomic_signal_fence(std::memory_order_seq_cst);
		if (--now.depth == 0 && pending()) [[unlikely]]
			run_pending();
	}
	Section(const Section &) = delete;
	Section &operator=(const Section &) = delete;
};

// Inside a section, a region where a signal's handler runs at once (the
// shim holds no lock and no busy count there and is about to sleep in the
// kernel, so that EINTR and SA_RESTART come from the kernel as on TCP).
// The handler runs with the thread's state set aside: it sees no section
// (its own socket calls go through the shim) and a longjmp out of it
// leaves the thread outside every section.  Does not run what is already
// pending: check pending() before opening one.
class Open {
public:
	Open() noexcept
	{
		now.open++;
		std::atomic_signal_fence(std::memory_order_seq_cst);
	}
	~Open()
	{
		std::atomic_signal_fence(std::memory_order_seq_cst);
		now.open--;
	}
	Open(const Open &) = delete;
	Open &operator=(const Open &) = delete;
};

// One intercepted call through its hook (the wrappers' SD_ASK): hook() is
// bool() noexcept, true when it handled the call with its result in r.
// It runs inside a section; when the section ends the deferred handlers
// run; if the hook said interrupted() and r is -1, the call is made again
// when the kernel would restart it (how and the hook's word allow it, a
// handler ran and every one that ran had SA_RESTART), else errno is EINTR.
// Returns hook()'s answer (false: the wrapper makes the real call).
template <typename R, typename Hook> bool ask(R &r, Restart how, Hook &&hook) noexcept
{
	// A call made inside a section (exec_hooked's hooks) is part of the
	// outer one: it neither resets nor restarts anything.
	if (now.depth) {
		Section s;
		return hook();
	}
	for (;;) {
		now.interrupted = false;
		now.restart = how;
		now.ran = false;
		now.ran_no_restart = false;
		bool done;
		{
			Section s;
			done = hook();
		} // the deferred handlers run here (run_pending() keeps errno)
		if (!done || !now.interrupted)
			return done;
		if (r != static_cast<R>(-1))
			return true;
		if (now.ran && !now.ran_no_restart && now.restart == Restart::sa_restart)
			continue;
		errno = EINTR;
		return true;
	}
}

// Signals the shim never wraps: the synchronous faults (deferring one
// would fault again), SIGABRT (abort() raises it and must not return
// before its handler ran), SIGKILL and SIGSTOP, and glibc's own (32, 33).
bool wrapped(int sig) noexcept;

// Whether the caller is a child of vfork, running on its parent's memory
// (and having run no fork handlers) until it execs or exits: the shim's
// state there is the parent's and must stay as it is.  One getpid().
bool in_vfork_child() noexcept;

} // namespace sd::shim::sig
