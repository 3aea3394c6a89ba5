// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The shim's signal handling (lib/shim/signals.cpp) on the host: this
// program links signals.cpp itself, so its own sigaction(), signal() and
// friends are the shim's wrappers, and it opens critical sections the way
// the wrappers do (sig::Section, sig::ask) to check that a signal is
// deferred out of them, runs as the kernel would have run it, and makes
// an interrupted call fail with EINTR or start again.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "signals.hpp"

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <cstdint>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace sig = sd::shim::sig;

namespace {

// What the handlers saw.
volatile sig_atomic_t runs;
volatile sig_atomic_t saw_inside;
volatile sig_atomic_t saw_masked_self, saw_masked_extra;
int values[8];
volatile sig_atomic_t nvalues;
sigjmp_buf jump;

void counting(int sig)
{
	runs = runs + 1;
	saw_inside = sig::inside();
	sigset_t m;
	pthread_sigmask(SIG_BLOCK, nullptr, &m);
	saw_masked_self = sigismember(&m, sig);
	saw_masked_extra = sigismember(&m, SIGUSR2);
	errno = 7;
}

void queued(int, siginfo_t *si, void *uc)
{
	if (uc && nvalues < 8) {
		values[nvalues] = si->si_value.sival_int;
		nvalues = nvalues + 1;
	}
}

void jumping(int)
{
	runs = runs + 1;
	siglongjmp(jump, 1);
}

void set(int s, void (*h)(int), int flags, int extra = 0)
{
	struct sigaction sa;
	std::memset(&sa, 0, sizeof(sa));
	sa.sa_handler = h;
	sigemptyset(&sa.sa_mask);
	if (extra)
		sigaddset(&sa.sa_mask, extra);
	sa.sa_flags = flags;
	assert_int_equal(sigaction(s, &sa, nullptr), 0);
}

// The kernel's own action, past the wrapper.
struct kaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	std::uint64_t mask;
};
kaction raw(int s)
{
	kaction k{};
	assert_int_equal(syscall(SYS_rt_sigaction, s, nullptr, &k, 8), 0);
	return k;
}

int reset(void **)
{
	runs = 0;
	saw_inside = -1;
	nvalues = 0;
	signal(SIGUSR1, SIG_DFL);
	signal(SIGRTMIN, SIG_DFL);
	return 0;
}

void reports_the_programs_action(void **)
{
	set(SIGUSR1, counting, SA_RESTART, SIGUSR2);
	struct sigaction old;
	assert_int_equal(sigaction(SIGUSR1, nullptr, &old), 0);
	assert_ptr_equal(reinterpret_cast<void *>(old.sa_handler), reinterpret_cast<void *>(counting));
	assert_true(old.sa_flags & SA_RESTART);
	assert_false(old.sa_flags & SA_SIGINFO);
	assert_int_equal(sigismember(&old.sa_mask, SIGUSR2), 1);
	// The kernel calls the shim's entry, with the program's flags.
	const kaction k = raw(SIGUSR1);
	assert_ptr_not_equal(k.handler, reinterpret_cast<void *>(counting));
	assert_true(k.flags & SA_RESTART);
	assert_true(k.mask & (1UL << (SIGUSR2 - 1)));
	// signal() reports it too, and SIG_DFL goes straight to the kernel.
	assert_ptr_equal(reinterpret_cast<void *>(signal(SIGUSR1, SIG_DFL)),
			 reinterpret_cast<void *>(counting));
	assert_null(raw(SIGUSR1).handler);
	assert_ptr_equal(reinterpret_cast<void *>(signal(SIGUSR1, counting)),
			 reinterpret_cast<void *>(SIG_DFL));
	assert_ptr_equal(reinterpret_cast<void *>(sysv_signal(SIGUSR1, SIG_IGN)),
			 reinterpret_cast<void *>(counting));
	assert_ptr_equal(raw(SIGUSR1).handler, reinterpret_cast<void *>(SIG_IGN));
}

void faults_and_glibcs_signals_pass_through(void **)
{
	set(SIGSEGV, counting, 0);
	assert_ptr_equal(raw(SIGSEGV).handler, reinterpret_cast<void *>(counting));
	signal(SIGSEGV, SIG_DFL);
	assert_false(sig::wrapped(SIGSEGV));
	assert_false(sig::wrapped(SIGBUS));
	assert_false(sig::wrapped(32));
	assert_false(sig::wrapped(33));
	assert_true(sig::wrapped(SIGINT));
	assert_true(sig::wrapped(SIGRTMAX));
	// glibc refuses its own.
	struct sigaction sa;
	std::memset(&sa, 0, sizeof(sa));
	sa.sa_handler = counting;
	assert_int_equal(sigaction(32, &sa, nullptr), -1);
	assert_int_equal(errno, EINVAL);
}

void deferred_until_the_section_ends(void **)
{
	set(SIGUSR1, counting, 0, SIGUSR2);
	errno = 42;
	{
		sig::Section s;
		raise(SIGUSR1);
		assert_int_equal(runs, 0);
		assert_true(sig::pending());
		assert_true(sig::inside());
		errno = 42;
	}
	assert_int_equal(runs, 1);
	assert_int_equal(errno, 42); // the handler's errno 7 does not leak
	assert_false(sig::pending());
	assert_int_equal(saw_inside, 0);
	// The mask the kernel would have set, and put back after.
	assert_int_equal(saw_masked_self, 1);
	assert_int_equal(saw_masked_extra, 1);
	sigset_t m;
	pthread_sigmask(SIG_BLOCK, nullptr, &m);
	assert_int_equal(sigismember(&m, SIGUSR1), 0);
	assert_int_equal(sigismember(&m, SIGUSR2), 0);
	// Outside a section: at once.
	raise(SIGUSR1);
	assert_int_equal(runs, 2);
}

void nodefer_leaves_the_signal_unmasked(void **)
{
	set(SIGUSR1, counting, SA_NODEFER);
	{
		sig::Section s;
		raise(SIGUSR1);
	}
	assert_int_equal(runs, 1);
	assert_int_equal(saw_masked_self, 0);
}

void standard_coalesce_realtime_queue(void **)
{
	set(SIGUSR1, counting, 0);
	struct sigaction sa;
	std::memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = queued;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGRTMIN, &sa, nullptr), 0);
	{
		sig::Section s;
		raise(SIGUSR1);
		raise(SIGUSR1);
		for (int i = 1; i <= 3; i++)
			assert_int_equal(sigqueue(getpid(), SIGRTMIN, sigval{i}), 0);
		assert_int_equal(runs, 0);
		assert_int_equal(nvalues, 0);
	}
	assert_int_equal(runs, 1);
	assert_int_equal(nvalues, 3);
	assert_int_equal(values[0], 1);
	assert_int_equal(values[1], 2);
	assert_int_equal(values[2], 3);
}

void open_region_runs_at_once(void **)
{
	set(SIGUSR1, counting, 0);
	{
		sig::Section s;
		{
			sig::Open o;
			raise(SIGUSR1);
			assert_int_equal(runs, 1);
			assert_int_equal(saw_inside, 0);
		}
		assert_true(sig::inside());
	}
	assert_int_equal(runs, 1);
}

// A hook that stops for a signal on its first call (raise, then
// interrupted()) and returns 7 on the next.
struct Hook {
	int calls = 0;
	long partial = -1;
	sig::Restart how = sig::Restart::sa_restart;
	long r = 0;
	bool operator()() noexcept
	{
		if (calls++ == 0) {
			raise(SIGUSR1);
			if (!sig::pending())
				return false; // not deferred: the test fails below
			sig::interrupted(how);
			r = partial;
			errno = EAGAIN;
			return true;
		}
		r = 7;
		return true;
	}
};

void restarted_under_sa_restart(void **)
{
	set(SIGUSR1, counting, SA_RESTART);
	Hook h;
	assert_true(sig::ask(h.r, sig::Restart::sa_restart, h));
	assert_int_equal(h.calls, 2);
	assert_int_equal(h.r, 7);
	assert_int_equal(runs, 1);
}

void eintr_without_sa_restart(void **)
{
	set(SIGUSR1, counting, 0);
	Hook h;
	errno = 0;
	assert_true(sig::ask(h.r, sig::Restart::sa_restart, h));
	assert_int_equal(h.calls, 1);
	assert_int_equal(h.r, -1);
	assert_int_equal(errno, EINTR);
	assert_int_equal(runs, 1);
}

void never_restarted_calls(void **)
{
	set(SIGUSR1, counting, SA_RESTART);
	Hook poll_like;
	assert_true(sig::ask(poll_like.r, sig::Restart::never, poll_like));
	assert_int_equal(poll_like.calls, 1);
	assert_int_equal(poll_like.r, -1);
	assert_int_equal(errno, EINTR);
	// The hook's word: a socket with a timeout.
	Hook timed;
	timed.how = sig::Restart::never;
	assert_true(sig::ask(timed.r, sig::Restart::sa_restart, timed));
	assert_int_equal(timed.calls, 1);
	assert_int_equal(errno, EINTR);
	assert_int_equal(runs, 2);
}

void partial_count_is_returned(void **)
{
	set(SIGUSR1, counting, SA_RESTART);
	Hook h;
	h.partial = 3;
	assert_true(sig::ask(h.r, sig::Restart::sa_restart, h));
	assert_int_equal(h.calls, 1);
	assert_int_equal(h.r, 3);
	assert_int_equal(runs, 1);
}

void longjmp_out_of_a_deferred_handler(void **)
{
	set(SIGUSR1, jumping, 0);
	if (sigsetjmp(jump, 1) == 0) {
		sig::Section s;
		raise(SIGUSR1);
		assert_int_equal(runs, 0);
		// The section ends here, the handler jumps out of its end.
	}
	assert_int_equal(runs, 1);
	assert_false(sig::inside());
	assert_false(sig::pending());
	// Still works.
	set(SIGUSR1, counting, 0);
	{
		sig::Section s;
		raise(SIGUSR1);
	}
	assert_int_equal(runs, 2);
}

void resethand(void **)
{
	set(SIGUSR1, counting, static_cast<int>(SA_RESETHAND));
	{
		sig::Section s;
		raise(SIGUSR1);
	}
	assert_int_equal(runs, 1);
	struct sigaction old;
	assert_int_equal(sigaction(SIGUSR1, nullptr, &old), 0);
	assert_ptr_equal(reinterpret_cast<void *>(old.sa_handler), reinterpret_cast<void *>(SIG_DFL));
	assert_true(static_cast<unsigned>(old.sa_flags) & SA_RESETHAND);
	assert_false(old.sa_flags & SA_SIGINFO);
}

void fork_child_drops_the_parents_deferred_signals(void **)
{
	set(SIGUSR1, counting, 0);
	pid_t pid;
	{
		sig::Section s;
		raise(SIGUSR1);
		pid = fork();
		if (pid == 0) {
			// The section ends in the child too: nothing to run.
		}
	}
	if (pid == 0)
		_exit(runs == 0 && !sig::pending() ? 0 : 1);
	assert_true(pid > 0);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(runs, 1);
}

} // namespace

int main()
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(reports_the_programs_action, reset),
		cmocka_unit_test_setup(faults_and_glibcs_signals_pass_through, reset),
		cmocka_unit_test_setup(deferred_until_the_section_ends, reset),
		cmocka_unit_test_setup(nodefer_leaves_the_signal_unmasked, reset),
		cmocka_unit_test_setup(standard_coalesce_realtime_queue, reset),
		cmocka_unit_test_setup(open_region_runs_at_once, reset),
		cmocka_unit_test_setup(restarted_under_sa_restart, reset),
		cmocka_unit_test_setup(eintr_without_sa_restart, reset),
		cmocka_unit_test_setup(never_restarted_calls, reset),
		cmocka_unit_test_setup(partial_count_is_returned, reset),
		cmocka_unit_test_setup(longjmp_out_of_a_deferred_handler, reset),
		cmocka_unit_test_setup(resethand, reset),
		cmocka_unit_test_setup(fork_child_drops_the_parents_deferred_signals, reset),
	};
	return cmocka_run_group_tests_name("signals", tests, nullptr, nullptr);
}
