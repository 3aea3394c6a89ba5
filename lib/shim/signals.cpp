// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Signals in the preload shim (signals.hpp, Documentation/shim.rst,
// "Signals"): the sigaction family's wrappers, the table of the program's
// actions, the entry function the kernel calls instead of the program's
// handlers, and the per-thread queue of signals deferred out of the shim's
// critical sections.
//
// Everything the entry function and run_pending() touch is
// async-signal-safe: the table is a seqlock per signal whose writers
// block every signal first (so a reader never waits for its own thread),
// and the queue is the thread's own, changed only with every signal
// blocked.
#include "signals.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "shim.hpp"

namespace sd::shim::sig {

constinit thread_local Thread now __attribute__((tls_model("initial-exec"))) = {};

namespace {

constexpr int NSIGS = 65; // signals 1 to 64

// The program's action for a signal, as it gave it.
struct Action {
	void *handler;
	int flags;
	std::uint64_t mask; // signal n is bit n - 1, as the kernel's sigset
};

// One signal's entry in the table.  ours: the kernel's action is the
// entry function, standing for this one (or was, until SA_RESETHAND put
// SIG_DFL back).
struct Slot {
	std::atomic<unsigned> seq;
	std::atomic<void *> handler;
	std::atomic<int> flags;
	std::atomic<std::uint64_t> mask;
	std::atomic<bool> ours;
};

constinit Slot table[NSIGS] = {};
// Serialises the writers (sigaction() and friends, with every signal
// blocked), across threads.
constinit std::atomic<bool> writing{false};
// siginterrupt(): signals whose signal() drops SA_RESTART (glibc's
// _sigintr, which the wrapped signal() cannot see).
constinit std::atomic<std::uint64_t> interrupting{0};

// A wait for another thread (a writer of the table): pause, and now and
// then let it run.
void relax(unsigned &n) noexcept
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
	if (++n % 64 == 0)
		sched_yield();
}

std::uint64_t bit(int sig) noexcept { return std::uint64_t{1} << (sig - 1); }

std::uint64_t to_bits(const sigset_t &s) noexcept
{
	std::uint64_t m = 0;
	for (int i = 1; i < NSIGS; i++)
		if (sigismember(&s, i) == 1)
			m |= bit(i);
	return m;
}

void add_bits(sigset_t &s, std::uint64_t m) noexcept
{
	for (int i = 1; i < NSIGS; i++)
		if (m & bit(i))
			sigaddset(&s, i);
}

// The action of sig, consistent even while another thread writes it;
// false when the shim does not stand for it.
bool load(int sig, Action &a) noexcept
{
	Slot &s = table[sig];
	unsigned n = 0;
	for (;;) {
		const unsigned q = s.seq.load(std::memory_order_acquire);
		if (q & 1) {
			// Another thread writes (never this one: a writer
			// blocks every signal first).
			relax(n);
			continue;
		}
		a.handler = s.handler.load(std::memory_order_relaxed);
		a.flags = s.flags.load(std::memory_order_relaxed);
		a.mask = s.mask.load(std::memory_order_relaxed);
		const bool ours = s.ours.load(std::memory_order_relaxed);
		std::atomic_thread_fence(std::memory_order_acquire);
		if (s.seq.load(std::memory_order_relaxed) == q)
			return ours;
	}
}

void store(int sig, const Action &a, bool ours) noexcept
{
	Slot &s = table[sig];
	const unsigned q = s.seq.load(std::memory_order_relaxed);
	s.seq.store(q + 1, std::memory_order_relaxed);
	std::atomic_thread_fence(std::memory_order_release);
	s.handler.store(a.handler, std::memory_order_relaxed);
	s.flags.store(a.flags, std::memory_order_relaxed);
	s.mask.store(a.mask, std::memory_order_relaxed);
	s.ours.store(ours, std::memory_order_relaxed);
	s.seq.store(q + 2, std::memory_order_release);
}

// Every signal blocked on this thread for the scope (RAII).
class Blocked {
public:
	Blocked() noexcept
	{
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old_);
	}
	~Blocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
	Blocked(const Blocked &) = delete;
	Blocked &operator=(const Blocked &) = delete;
	const sigset_t &old() const noexcept { return old_; }

private:
	sigset_t old_;
};

// The writers' lock, taken with every signal blocked.
class Writing {
public:
	Writing() noexcept
	{
		unsigned n = 0;
		while (writing.exchange(true, std::memory_order_acquire))
			relax(n);
	}
	~Writing() { writing.store(false, std::memory_order_release); }
	Writing(const Writing &) = delete;
	Writing &operator=(const Writing &) = delete;
};

// A deferred signal: what the kernel passed, and the action that was in
// force when it came (the kernel chooses the handler at delivery).
struct Record {
	siginfo_t info;
	Action act;
};

// The thread's deferred signals: standard ones coalesce per number, as in
// the kernel's pending set; real-time ones queue, up to RT_QUEUE (more are
// dropped: the kernel's own queue is bounded too, by RLIMIT_SIGPENDING).
// Mapped on the thread's first deferred signal: static TLS (which a
// dlopen()ed shim shares with every other library) is too small for it.
// A thread's queue is unmapped when the thread exits (a key's destructor).
constexpr unsigned RT_QUEUE = 32;
struct Queue {
	std::uint32_t standard; // bit n - 1: signal n waits
	unsigned rt_head, rt_count;
	Record std_rec[32];
	Record rt[RT_QUEUE];
};
constinit thread_local Queue *queue_of_thread __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t queue_key;
bool queue_key_made;

void drop_queue(void *q) noexcept
{
	queue_of_thread = nullptr;
	munmap(q, sizeof(Queue));
}

// This thread's queue; nullptr if it cannot have one (no memory).
Queue *queue() noexcept
{
	if (Queue *q = queue_of_thread) [[likely]]
		return q;
	void *m = mmap(nullptr, sizeof(Queue), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		return nullptr;
	queue_of_thread = static_cast<Queue *>(m);
	// A key below PTHREAD_KEY_2NDLEVEL_SIZE lives in the thread's own
	// block: setting it allocates nothing, so it may be done here, in a
	// signal handler.  A later key: the queue stays for the process.
	if (queue_key_made && queue_key < 32)
		pthread_setspecific(queue_key, m);
	return queue_of_thread;
}

void defer(int sig, const siginfo_t *si, const Action &a) noexcept
{
	Blocked b; // a nested signal must not see a half-written record
	Queue *qp = queue();
	if (!qp)
		return; // lost, as when the kernel cannot queue a signal
	Queue &q = *qp;
	Record *r = nullptr;
	if (sig < 32) {
		r = &q.std_rec[sig];
		q.standard |= 1U << (sig - 1);
	} else if (q.rt_count < RT_QUEUE) {
		r = &q.rt[(q.rt_head + q.rt_count++) % RT_QUEUE];
	}
	if (r) {
		std::memcpy(&r->info, si, sizeof(r->info));
		r->act = a;
	}
	now.pending.store(true, std::memory_order_relaxed);
}

// The next deferred signal, in the kernel's order (standard ones by
// number, then real-time ones in arrival order); call with every signal
// blocked.
bool pop(Record &out) noexcept
{
	Queue *qp = queue_of_thread;
	if (!qp)
		return false;
	Queue &q = *qp;
	if (q.standard) {
		const int sig = __builtin_ctz(q.standard) + 1;
		q.standard &= ~(1U << (sig - 1));
		out = q.std_rec[sig];
		return true;
	}
	if (q.rt_count) {
		out = q.rt[q.rt_head];
		q.rt_head = (q.rt_head + 1) % RT_QUEUE;
		q.rt_count--;
		return true;
	}
	return false;
}

// Run the program's handler for sig, with the thread's state set aside:
// the handler is outside every section, and a longjmp out of it leaves the
// thread so.  counts: the interrupted call (ask()) takes note of it.
void invoke(int sig, siginfo_t *si, void *uc, const Action &a, bool counts) noexcept
{
	const unsigned depth = now.depth, open = now.open;
	const bool interrupted = now.interrupted, ran = now.ran, no = now.ran_no_restart;
	const Restart restart = now.restart;

	now.depth = 0;
	now.open = 0;
	std::atomic_signal_fence(std::memory_order_seq_cst);
	if (a.flags & SA_SIGINFO)
		reinterpret_cast<void (*)(int, siginfo_t *, void *)>(a.handler)(sig, si, uc);
	else
		reinterpret_cast<void (*)(int)>(a.handler)(sig);
	std::atomic_signal_fence(std::memory_order_seq_cst);
	now.depth = depth;
	now.open = open;
	now.interrupted = interrupted;
	now.restart = restart;
	now.ran = ran;
	now.ran_no_restart = no;
	if (counts) {
		now.ran = true;
		if (!(a.flags & SA_RESTART))
			now.ran_no_restart = true;
	}
}

// The table says SIG_DFL or SIG_IGN while the kernel still called the
// entry (a sigaction() on another thread at this moment): do what that
// action does.
void fallback(int sig, const Action &a) noexcept
{
	if (a.handler == reinterpret_cast<void *>(SIG_IGN))
		return;
	switch (sig) {
	case SIGCHLD:
	case SIGURG:
	case SIGWINCH:
	case SIGCONT:
		return; // ignored by default
	default:
		// The kernel has SIG_DFL by now (sigaction() changes the
		// kernel's action before the table's); sig is blocked until
		// the entry returns, and then takes its default action.
		syscall(SYS_tgkill, getpid(), gettid(), sig);
	}
}

// What the kernel calls for every signal the shim stands for.
void entry(int sig, siginfo_t *si, void *uc) noexcept
{
	const int saved = errno;
	Action a;

	if (!load(sig, a) || a.handler == reinterpret_cast<void *>(SIG_DFL) ||
	    a.handler == reinterpret_cast<void *>(SIG_IGN))
		fallback(sig, a);
	else if (now.depth && !now.open)
		defer(sig, si, a);
	else
		invoke(sig, si, uc, a, now.depth != 0);
	errno = saved;
}

void *entry_address() noexcept { return reinterpret_cast<void *>(&entry); }

// The kernel's action for sig with the shim's entry replaced by the
// program's own action (what the program would see without the shim).
void report(int sig, const struct sigaction &k, struct sigaction *out) noexcept
{
	*out = k;
	Action a;
	if (!load(sig, a))
		return;
	const bool entry_in = reinterpret_cast<void *>(k.sa_sigaction) == entry_address();
	const bool reset = k.sa_handler == SIG_DFL && (static_cast<unsigned>(k.sa_flags) & SA_RESETHAND);
	if (!entry_in && !reset)
		return; // changed behind the shim's back (a raw system call)
	if (entry_in)
		out->sa_sigaction = reinterpret_cast<void (*)(int, siginfo_t *, void *)>(a.handler);
	out->sa_flags = (k.sa_flags & ~SA_SIGINFO) | (a.flags & SA_SIGINFO);
}

int do_sigaction(int sig, const struct sigaction *act, struct sigaction *oldact) noexcept
{
	if (!wrapped(sig))
		return real::sigaction()(sig, act, oldact);
	// A child of vfork runs on its parent's memory: the table is the
	// parent's, and CPython's subprocess resets every handler there
	// before exec.  The child's changes go to the kernel only, where
	// they are its own; what it is told it had is the parent's view.
	if (in_vfork_child()) {
		struct sigaction k;
		if (real::sigaction()(sig, act, &k) != 0)
			return -1;
		if (oldact)
			report(sig, k, oldact);
		return 0;
	}

	Blocked b;
	Writing w;
	struct sigaction k;
	if (real::sigaction()(sig, nullptr, &k) != 0)
		return -1;
	struct sigaction was;
	report(sig, k, &was);
	if (act) {
		const void *h = reinterpret_cast<void *>(act->sa_handler);
		if (h == reinterpret_cast<void *>(SIG_DFL) || h == reinterpret_cast<void *>(SIG_IGN)) {
			// The kernel's action first: the entry never finds the
			// table at SIG_DFL while the kernel still calls it,
			// but for a race with this call (fallback()).
			if (real::sigaction()(sig, act, nullptr) != 0)
				return -1;
			store(sig, {const_cast<void *>(h), act->sa_flags, to_bits(act->sa_mask)},
			      false);
		} else {
			Action old;
			const bool old_ours = load(sig, old);
			store(sig,
			      {reinterpret_cast<void *>(act->sa_sigaction), act->sa_flags,
			       to_bits(act->sa_mask)},
			      true);
			struct sigaction mine = *act;
			mine.sa_sigaction = &entry;
			mine.sa_flags |= SA_SIGINFO;
			if (real::sigaction()(sig, &mine, nullptr) != 0) {
				const int err = errno;
				store(sig, old, old_ours);
				errno = err;
				return -1;
			}
		}
	}
	if (oldact)
		*oldact = was;
	return 0;
}

// signal() and sysv_signal(): handler with flags, sig itself masked or
// not; the handler before it, or SIG_ERR.
sighandler_t set_handler(int sig, sighandler_t handler, int flags, bool mask_self) noexcept
{
	if (handler == SIG_ERR || sig < 1 || sig >= NSIGS) {
		errno = EINVAL;
		return SIG_ERR;
	}
	struct sigaction act, old;
	std::memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	if (mask_self)
		sigaddset(&act.sa_mask, sig);
	act.sa_flags = flags;
	if (do_sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

// glibc's signal() (BSD semantics): sig itself masked, SA_RESTART unless
// siginterrupt() said otherwise.
sighandler_t bsd(int sig, sighandler_t handler) noexcept
{
	const bool intr = sig >= 1 && sig < NSIGS &&
			  (interrupting.load(std::memory_order_relaxed) & bit(sig));
	return set_handler(sig, handler, intr ? 0 : SA_RESTART, true);
}

// glibc's sysv_signal(): one shot, not masked, not restarted.
sighandler_t sysv(int sig, sighandler_t handler) noexcept
{
	return set_handler(sig, handler,
			   static_cast<int>(SA_RESETHAND | SA_NODEFER | SA_INTERRUPT) & ~SA_RESTART,
			   false);
}

// This process's id, set at load and in every fork child: a vfork child
// runs no fork handlers, so its getpid() differs.
std::atomic<pid_t> own_pid{0};

// In the fork child: the parent's deferred signals are not the child's
// (the kernel gives a child none of its parent's pending signals), and a
// lock or a write another thread held is nobody's now.
void forked() noexcept
{
	own_pid.store(getpid(), std::memory_order_relaxed);
	if (Queue *q = queue_of_thread) {
		q->standard = 0;
		q->rt_head = q->rt_count = 0;
	}
	now.pending.store(false, std::memory_order_relaxed);
	writing.store(false, std::memory_order_relaxed);
	for (Slot &s : table) {
		const unsigned q = s.seq.load(std::memory_order_relaxed);
		if (q & 1)
			s.seq.store(q + 1, std::memory_order_relaxed);
	}
}

__attribute__((constructor)) void signals_init()
{
	own_pid.store(getpid(), std::memory_order_relaxed);
	queue_key_made = pthread_key_create(&queue_key, drop_queue) == 0;
	pthread_atfork(nullptr, nullptr, forked);
}

} // namespace

bool in_vfork_child() noexcept
{
	const pid_t me = own_pid.load(std::memory_order_relaxed);

	return me && getpid() != me;
}

bool wrapped(int sig) noexcept
{
	switch (sig) {
	case SIGKILL:
	case SIGSTOP:
	case SIGSEGV:
	case SIGBUS:
	case SIGFPE:
	case SIGILL:
	case SIGTRAP:
	case SIGSYS:
	case SIGABRT:
		return false;
	default:
		return sig >= 1 && sig < NSIGS && (sig < 32 || sig >= SIGRTMIN);
	}
}

void run_pending() noexcept
{
	const int saved = errno;

	for (;;) {
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		Record r;
		const bool got = pop(r);
		// Cleared with the last one taken, before its handler runs:
		// a handler that jumps out must not leave it set.
		if (const Queue *q = queue_of_thread; !q || (!q->standard && !q->rt_count))
			now.pending.store(false, std::memory_order_relaxed);
		if (!got) {
			pthread_sigmask(SIG_SETMASK, &old, nullptr);
			break;
		}
		// The mask the kernel would have set for the handler.
		const int sig = r.info.si_signo;
		sigset_t mask = old;
		add_bits(mask, r.act.mask);
		if (!(r.act.flags & SA_NODEFER))
			sigaddset(&mask, sig);
		ucontext_t uc;
		std::memset(&uc, 0, sizeof(uc));
		if (r.act.flags & SA_SIGINFO) {
			getcontext(&uc);
			uc.uc_sigmask = old;
		}
		pthread_sigmask(SIG_SETMASK, &mask, nullptr);
		invoke(sig, &r.info, &uc, r.act, true);
		pthread_sigmask(SIG_SETMASK, &old, nullptr);
	}
	errno = saved;
}

} // namespace sd::shim::sig

using namespace sd::shim;

extern "C" int sigaction(int sig, const struct sigaction *act, struct sigaction *oldact) noexcept
{
	return sig::do_sigaction(sig, act, oldact);
}

extern "C" int __sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	return sig::do_sigaction(sig, act, oldact);
}

extern "C" sighandler_t signal(int sig, sighandler_t handler) noexcept
{
	return sig::bsd(sig, handler);
}

extern "C" sighandler_t bsd_signal(int sig, sighandler_t handler)
{
	return sig::bsd(sig, handler);
}

extern "C" sighandler_t ssignal(int sig, sighandler_t handler) noexcept
{
	return sig::bsd(sig, handler);
}

extern "C" sighandler_t sysv_signal(int sig, sighandler_t handler) noexcept
{
	return sig::sysv(sig, handler);
}

extern "C" sighandler_t __sysv_signal(int sig, sighandler_t handler) noexcept
{
	return sig::sysv(sig, handler);
}

// glibc's sigset() (System V), over the wrapped sigaction.
extern "C" sighandler_t sigset(int sig, sighandler_t disp) noexcept
{
	sigset_t set, oset;
	sigemptyset(&set);
	if (sigaddset(&set, sig) < 0)
		return SIG_ERR;
	struct sigaction act, oact;
	if (disp == SIG_HOLD) {
		if (sigprocmask(SIG_BLOCK, &set, &oset) < 0)
			return SIG_ERR;
		if (sigismember(&oset, sig))
			return SIG_HOLD;
		if (sig::do_sigaction(sig, nullptr, &oact) < 0)
			return SIG_ERR;
		return oact.sa_handler;
	}
	std::memset(&act, 0, sizeof(act));
	act.sa_handler = disp;
	sigemptyset(&act.sa_mask);
	act.sa_flags = 0;
	if (sig::do_sigaction(sig, &act, &oact) < 0)
		return SIG_ERR;
	if (sigprocmask(SIG_UNBLOCK, &set, &oset) < 0)
		return SIG_ERR;
	return sigismember(&oset, sig) ? SIG_HOLD : oact.sa_handler;
}

// glibc's siginterrupt(), which keeps the set signal() reads.
extern "C" int siginterrupt(int sig, int interrupt) noexcept
{
	struct sigaction act;
	if (sig::do_sigaction(sig, nullptr, &act) < 0)
		return -1;
	if (sig >= 1 && sig < 65) {
		const std::uint64_t b = std::uint64_t{1} << (sig - 1);
		if (interrupt)
			sig::interrupting.fetch_or(b, std::memory_order_relaxed);
		else
			sig::interrupting.fetch_and(~b, std::memory_order_relaxed);
	}
	if (interrupt)
		act.sa_flags &= ~SA_RESTART;
	else
		act.sa_flags |= SA_RESTART;
	return sig::do_sigaction(sig, &act, nullptr);
}
