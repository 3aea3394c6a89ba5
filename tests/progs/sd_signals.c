// SPDX-License-Identifier: GPL-2.0-only
//
// sd_signals SCENARIO: signals and socket calls on loopback TCP, with a
// transcript on stdout that must be the same plainly and under sdrun
// (tests/integration/test_shim_signals.py).  Under sdrun with
// net.sd.redirect=1 the sockets are AF_SD and the shim's fast path runs
// the calls that the signals interrupt.
//
// Each scenario that waits has a backstop: the peer sends (or reads)
// after BACKSTOP_MS, so a signal the call did not see shows as a
// different line rather than a hang.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BACKSTOP_MS 3000
#define BIG (4 << 20)

static int a, b; // a connected pair: a is the caller's, b the peer's
static volatile sig_atomic_t handled;
static sigjmp_buf jump;

static void die(const char *what)
{
	printf("%s: %s\n", what, strerror(errno));
	exit(1);
}

static void pair(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&sa, len) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &len))
		die("listen");
	a = socket(AF_INET, SOCK_STREAM, 0);
	if (a < 0 || connect(a, (struct sockaddr *)&sa, len))
		die("connect");
	b = accept(l, NULL, NULL);
	if (b < 0)
		die("accept");
	close(l);
}

static void msleep(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void on_signal(int sig)
{
	(void)sig;
	handled++;
}

static void on_signal_info(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (si->si_signo == sig)
		handled++;
}

static void install(int sig, int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	if (flags & SA_SIGINFO)
		sa.sa_sigaction = on_signal_info;
	else
		sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = flags;
	if (sigaction(sig, &sa, NULL))
		die("sigaction");
}

// SIGALRM once, after ms.
static void alarm_ms(int ms)
{
	struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
}

static void *send_later(void *arg)
{
	msleep((int)(long)arg);
	if (send(b, "late!", 5, MSG_NOSIGNAL) != 5)
		die("send_later");
	return NULL;
}

static pthread_t later(int ms)
{
	pthread_t t;
	pthread_create(&t, NULL, send_later, (void *)(long)ms);
	return t;
}

static const char *err(long r)
{
	return r >= 0 ? "ok" : errno == EINTR ? "EINTR" : errno == EAGAIN ? "EAGAIN" : "other";
}

static void print_action(const char *name, int sig, void (*mine)(int))
{
	struct sigaction old;
	struct sigaction *o = &old;

	if (sigaction(sig, NULL, o))
		die("sigaction query");
	printf("%s: handler=%s flags=%#x mask_usr2=%d\n", name,
	       o->sa_handler == SIG_DFL	  ? "DFL"
	       : o->sa_handler == SIG_IGN ? "IGN"
	       : o->sa_handler == mine	  ? "mine"
	       : o->sa_sigaction == on_signal_info ? "mine_info"
						    : "OTHER",
	       (unsigned)o->sa_flags, sigismember(&o->sa_mask, SIGUSR2));
}

// What the program set is what it reads back, through every interface.
static void actions(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal_info;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	sigaction(SIGUSR1, &sa, NULL);
	print_action("usr1 siginfo+restart", SIGUSR1, on_signal);
	printf("signal(usr1) returned %s\n",
	       signal(SIGUSR1, on_signal) == (sighandler_t)(void (*)(void))on_signal_info
		       ? "mine_info"
		       : "OTHER");
	print_action("usr1 signal()", SIGUSR1, on_signal);
	raise(SIGUSR1);
	printf("handled=%d\n", handled);
	printf("signal(usr1, IGN) returned %s\n",
	       signal(SIGUSR1, SIG_IGN) == on_signal ? "mine" : "OTHER");
	print_action("usr1 ignored", SIGUSR1, on_signal);
	install(SIGUSR2, (int)SA_RESETHAND);
	print_action("usr2 resethand", SIGUSR2, on_signal);
	raise(SIGUSR2);
	printf("handled=%d\n", handled);
	print_action("usr2 after delivery", SIGUSR2, on_signal);
	sysv_signal(SIGUSR2, on_signal);
	print_action("usr2 sysv_signal", SIGUSR2, on_signal);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	siginterrupt(SIGUSR2, 1);
	print_action("usr2 siginterrupt", SIGUSR2, on_signal);
	printf("sigset(usr2, DFL) returned %s\n",
	       sigset(SIGUSR2, SIG_DFL) == on_signal ? "mine" : "OTHER");
#pragma GCC diagnostic pop
	print_action("usr2 sigset", SIGUSR2, on_signal);
	print_action("segv untouched", SIGSEGV, on_signal);
}

// A blocking receive with nothing to read.
static void recv_signal(int flags, int ms_data, int timeout_s)
{
	char buf[16];

	pair();
	install(SIGALRM, flags);
	if (timeout_s) {
		struct timeval tv = {timeout_s, 0};
		setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	pthread_t t = later(ms_data);
	alarm_ms(200);
	long r = recv(a, buf, sizeof(buf), 0);
	printf("recv: %ld %s handled=%d\n", r, err(r), handled);
	pthread_join(t, NULL);
}

static void poll_signal(int flags, int use_epoll)
{
	pair();
	install(SIGALRM, flags);
	pthread_t t = later(BACKSTOP_MS);
	alarm_ms(200);
	long r;
	if (use_epoll) {
		int ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = a};
		epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev);
		r = epoll_wait(ep, &ev, 1, 10000);
	} else {
		struct pollfd p = {.fd = a, .events = POLLIN};
		r = poll(&p, 1, 10000);
	}
	printf("%s: %ld %s handled=%d\n", use_epoll ? "epoll_wait" : "poll", r, err(r), handled);
	pthread_join(t, NULL);
}

static void *drain_later(void *arg)
{
	static char buf[1 << 16];
	long left = (long)arg;

	msleep(BACKSTOP_MS);
	while (left > 0) {
		long n = recv(b, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		left -= n;
	}
	return NULL;
}

// A blocking send larger than the connection holds, nobody reading.
static void send_signal(int flags)
{
	static char buf[64 << 20];
	pthread_t t;

	pair();
	install(SIGALRM, flags);
	pthread_create(&t, NULL, drain_later, (void *)(long)sizeof(buf));
	alarm_ms(200);
	long r = send(a, buf, sizeof(buf), MSG_NOSIGNAL);
	printf("send: %s handled=%d\n",
	       r == (long)sizeof(buf) ? "all"
	       : r > 0		      ? "partial"
				      : err(r),
	       handled);
	shutdown(a, SHUT_WR);
	pthread_join(t, NULL);
}

// A handler that sends while the thread is inside a large send: the peer
// must see the stream whole, the handler's bytes between two pieces of it.
static unsigned char marker[16];

static void send_marker(int sig)
{
	(void)sig;
	if (send(a, marker, sizeof(marker), MSG_NOSIGNAL) == sizeof(marker))
		handled++;
}

static void *check_stream(void *arg)
{
	static unsigned char buf[1 << 16];
	long pos = 0, marks = 0, bad = 0;
	int in_mark = 0, marked = 0;

	(void)arg;
	for (;;) {
		long n = recv(b, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		for (long i = 0; i < n; i++) {
			if (buf[i] == 0xff) {
				if (!in_mark && marked)
					bad++;
				in_mark = marked = 1;
				marks++;
				continue;
			}
			in_mark = 0;
			if (buf[i] != (unsigned char)(pos % 251))
				bad++;
			pos++;
		}
	}
	printf("stream: %ld bytes, %ld marker bytes, %s\n", pos, marks, bad ? "CORRUPT" : "intact");
	return NULL;
}

static void handler_sends(void)
{
	static unsigned char buf[BIG];
	pthread_t t;
	struct sigaction sa;

	memset(marker, 0xff, sizeof(marker));
	for (long i = 0; i < BIG; i++)
		buf[i] = (unsigned char)(i % 251);
	pair();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = send_marker;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	// The reader starts with SIGALRM blocked (a thread inherits the
	// mask), so the handler runs on the sending thread, as the scenario
	// means.  Run by the reader, its send could wait for room that only
	// the reader makes: a deadlock on TCP as on AF_SD.
	sigset_t alrm, old;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, &old);
	pthread_create(&t, NULL, check_stream, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	struct itimerval it = {{0, 0}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, NULL);
	long done = 0;
	while (done < BIG) {
		long r = send(a, buf + done, (size_t)(BIG - done), MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("send");
		done += r;
	}
	while (!handled)
		msleep(1);
	shutdown(a, SHUT_WR);
	pthread_join(t, NULL);
	printf("handler sent: %d\n", handled);
}

// longjmp out of a handler that interrupted a blocking recv: the socket
// must work after, from this thread and from another.
static void jump_out(int sig)
{
	(void)sig;
	handled++;
	siglongjmp(jump, 1);
}

static void *recv_other(void *arg)
{
	char buf[16];
	(void)arg;
	long r = recv(a, buf, sizeof(buf), 0);
	printf("other thread recv: %ld\n", r);
	return NULL;
}

static void longjmp_out(void)
{
	char buf[16];
	struct sigaction sa;

	pair();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = jump_out;
	sigaction(SIGALRM, &sa, NULL);
	pthread_t t = later(BACKSTOP_MS);
	if (sigsetjmp(jump, 1) == 0) {
		alarm_ms(200);
		long r = recv(a, buf, sizeof(buf), 0);
		printf("recv returned %ld (no jump)\n", r);
	} else {
		printf("jumped out, handled=%d\n", handled);
	}
	pthread_join(t, NULL);
	// The backstop's bytes: from another thread.
	pthread_t o;
	pthread_create(&o, NULL, recv_other, NULL);
	pthread_join(o, NULL);
	if (send(b, "again", 5, MSG_NOSIGNAL) != 5)
		die("send");
	long r = recv(a, buf, sizeof(buf), 0);
	printf("this thread recv: %ld\n", r);
}

// A child of vfork resets every handler before it execs (CPython's
// subprocess does, on its parent's memory): the parent's SIGCHLD handler,
// which writes to a pipe as Python's set_wakeup_fd, still runs when the
// child exits, and reads back as the parent's.
static int wake_w = -1;

static void on_child(int sig)
{
	char c = (char)sig;

	handled++;
	if (write(wake_w, &c, 1) < 0)
		handled += 100;
}

static void vfork_reset(void)
{
	struct sigaction sa;
	int p[2], status;

	if (pipe(p))
		die("pipe");
	wake_w = p[1];
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_child;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL))
		die("sigaction");
	pid_t pid = vfork();
	if (pid < 0)
		die("vfork");
	if (pid == 0) {
		struct sigaction dfl;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		for (int sig = 1; sig < NSIG; sig++) {
			struct sigaction cur;

			if (sigaction(sig, NULL, &cur) == 0 &&
			    cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN)
				sigaction(sig, &dfl, NULL);
		}
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	int n;

	do
		n = poll(&pf, 1, BACKSTOP_MS * 10);
	while (n < 0 && errno == EINTR);
	printf("wakeup pipe readable: %s\n", n == 1 ? "yes" : "no");
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	printf("child exit %d, handled %d\n", WEXITSTATUS(status), handled);
	print_action("SIGCHLD after", SIGCHLD, on_child);
}

int main(int argc, char **argv)
{
	const char *s = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(s, "actions"))
		actions();
	else if (!strcmp(s, "recv_eintr"))
		recv_signal(0, BACKSTOP_MS, 0);
	else if (!strcmp(s, "recv_siginfo_eintr"))
		recv_signal(SA_SIGINFO, BACKSTOP_MS, 0);
	else if (!strcmp(s, "recv_restart"))
		recv_signal(SA_RESTART, 600, 0);
	else if (!strcmp(s, "recv_timeout_eintr"))
		recv_signal(SA_RESTART, BACKSTOP_MS, 5);
	else if (!strcmp(s, "poll_eintr"))
		poll_signal(SA_RESTART, 0);
	else if (!strcmp(s, "epoll_eintr"))
		poll_signal(SA_RESTART, 1);
	else if (!strcmp(s, "send_eintr"))
		send_signal(0);
	else if (!strcmp(s, "handler_sends"))
		handler_sends();
	else if (!strcmp(s, "longjmp"))
		longjmp_out();
	else if (!strcmp(s, "vfork_reset"))
		vfork_reset();
	else {
		fprintf(stderr, "usage: sd_signals SCENARIO\n");
		return 2;
	}
	return 0;
}
