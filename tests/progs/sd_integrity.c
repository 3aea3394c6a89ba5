// SPDX-License-Identifier: GPL-2.0
/*
 * sd_integrity: the cases of issue 45 ("libsd must never lose, misdirect
 * or hang"), one subcommand each, run by test_shim_integrity.py over plain
 * TCP and under sdrun with net.sd.redirect=1.
 *
 *   sd_integrity CASE [ARGS...]      (sd_integrity list: every case)
 *
 * Each case makes its own loopback TCP connections (127.0.0.1, port 0) in
 * this one process, does its scenario, checks every byte and prints a short
 * transcript that does not depend on timing: the same over TCP and under
 * sdrun when the behaviour is right, different when the bug
 * happens.  It exits 0 when it could run the scenario (whatever the
 * transcript says), 2 when it could not set up, 3 when the watchdog saw a
 * hang (it prints "hang: STAGE" first).
 *
 * Bytes: every stream has an id 0..3, carried in the top two bits of each
 * of its bytes; the low six bits are a hash of (id, position).  A receiver
 * demultiplexes byte by byte, so two writers on one connection may
 * interleave anywhere (TCP may split a blocking send that waits for buffer
 * space or is interrupted, and lets another thread's bytes in between),
 * yet each stream's order and content are checked, and a byte of a stream
 * that does not belong on the connection is counted as foreign.
 *
 * Waiting for a thread to be inside a blocking call: it says it is about
 * to make the call, then the other thread waits until /proc shows it
 * asleep (over TCP: in the call) or 2 s passed (a shim that spins in user
 * space is in the call by then).  The outcome over TCP is the same either
 * way; no verdict depends on a sleep.
 *
 * Stderr gets "redirected N" for the first connection made, so that the
 * test can check that sdrun's run was redirected: getsockopt(SOL_SD,
 * SD_REDIRECTED), AF_INET (2) for a redirected socket, a negative errno
 * for a TCP socket.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sd.h>

#define MIB (1024UL * 1024UL)

/* ---- transcript, errors, watchdog ---------------------------------------- */

static const char *volatile stage = "start";
static pthread_mutex_t say_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&say_lock);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&say_lock);
}

static void die(const char *what)
{
	fprintf(stderr, "sd_integrity: %s: %s (stage %s)\n", what,
		strerror(errno), stage);
	exit(2);
}

static const char *errname(int e)
{
	const char *n = e ? strerrorname_np(e) : "OK";

	return n ? n : "errno?";
}

static void *watchdog_main(void *arg)
{
	struct timespec t;
	char line[128];
	int n;

	t.tv_sec = (time_t)(intptr_t)arg;
	t.tv_nsec = 0;
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) == EINTR)
		;
	n = snprintf(line, sizeof(line), "hang: %s\n", stage);
	if (write(1, line, (size_t)n) < 0)
		_exit(4);
	_exit(3);
}

/* A thread with every signal blocked, so that they go to the others. */
static pthread_t spawn_masked(void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	pthread_t t;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, fn, arg))
		die("pthread_create");
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return t;
}

static pthread_t spawn(void *(*fn)(void *), void *arg)
{
	pthread_t t;

	if (pthread_create(&t, NULL, fn, arg))
		die("pthread_create");
	return t;
}

static pid_t gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap(long usec)
{
	struct timespec t = { usec / 1000000, (usec % 1000000) * 1000 };

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* Thread tid (of this process) asleep, or 2 s passed: see the top. */
static void wait_blocked(pid_t tid)
{
	double start = now();
	char path[64], buf[512];

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	for (;;) {
		FILE *f = fopen(path, "r");
		char *p = NULL;

		if (f) {
			if (fgets(buf, sizeof(buf), f))
				p = strrchr(buf, ')');
			fclose(f);
		}
		if (p && p[1] == ' ' && p[2] == 'S' && now() - start > 0.05)
			return;
		if (now() - start > 2.0)
			return;
		nap(2000);
	}
}

/* ---- the byte pattern ----------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint8_t pat(unsigned int id, uint64_t pos)
{
	uint64_t h = mix64(((uint64_t)id << 58) ^ (pos >> 3));

	return (uint8_t)((id << 6) | ((h >> ((pos & 7) * 8)) & 63));
}

static void fill(unsigned int id, uint64_t pos, uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pat(id, pos + i);
}

struct chk {
	unsigned int mask;		/* the ids that belong here */
	uint64_t pos[4];
	uint64_t bad_at[4];
	int bad[4];
	uint64_t foreign;
};

static void chk_init(struct chk *c, unsigned int mask)
{
	memset(c, 0, sizeof(*c));
	c->mask = mask;
}

static void chk_feed(struct chk *c, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned int id = b[i] >> 6;

		if (!(c->mask & (1U << id))) {
			c->foreign++;
			continue;
		}
		if (!c->bad[id] && b[i] != pat(id, c->pos[id])) {
			c->bad[id] = 1;
			c->bad_at[id] = c->pos[id];
		}
		c->pos[id]++;
	}
}

static int chk_ok(const struct chk *c, unsigned int id, uint64_t expect)
{
	return !c->bad[id] && c->pos[id] == expect;
}

/* "PREFIXstreamID: ok N" or what went wrong. */
static void chk_say(const struct chk *c, const char *prefix, unsigned int id,
		    uint64_t expect)
{
	if (chk_ok(c, id, expect) && !expect)
		say("%sstream%u: none", prefix, id);
	else if (chk_ok(c, id, expect))
		say("%sstream%u: ok %llu", prefix, id, (unsigned long long)expect);
	else if (c->bad[id])
		say("%sstream%u: corrupt at %llu, %llu of %llu bytes", prefix, id,
		    (unsigned long long)c->bad_at[id],
		    (unsigned long long)c->pos[id], (unsigned long long)expect);
	else
		say("%sstream%u: %llu of %llu bytes", prefix, id,
		    (unsigned long long)c->pos[id], (unsigned long long)expect);
}

static void chk_say_foreign(const struct chk *c, const char *prefix)
{
	if (c->foreign)
		say("%sforeign bytes: %llu", prefix, (unsigned long long)c->foreign);
}

/* ---- connections ---------------------------------------------------------- */

static int family_noted;

/* getsockopt(SOL_SD, SD_REDIRECTED): the family a redirected socket
 * stands in for, or -errno (a TCP socket).  SO_DOMAIN would
 * not tell: libsd answers it with the family stood in for. */
static int redirected(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_SD, SD_REDIRECTED, &v, &len))
		return -errno;
	return v;
}

static void note_family(int fd)
{
	if (family_noted)
		return;
	family_noted = 1;
	fprintf(stderr, "redirected %d\n", redirected(fd));
}

static int listener(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0)
		die("socket");
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)))
		die("bind");
	if (listen(l, 8))
		die("listen");
	return l;
}

static void connect_to(int s, int l)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (getsockname(l, (struct sockaddr *)&a, &len))
		die("getsockname");
	if (connect(s, (struct sockaddr *)&a, len))
		die("connect");
}

/* A connected pair through listener l: *c the client, *s the accepted. */
static void pair_from(int l, int *c, int *s)
{
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (*c < 0)
		die("socket");
	connect_to(*c, l);
	*s = accept(l, NULL, NULL);
	if (*s < 0)
		die("accept");
	note_family(*c);
}

static void pair(int *c, int *s)
{
	int l = listener();

	pair_from(l, c, s);
	close(l);
}

/* ---- send and receive variants -------------------------------------------- */

enum { S_SEND, S_WRITE, S_WRITEV, S_SENDMSG, S_SENDTO, S_SENDMMSG,
	S_DONTWAIT, S_SYSCALL, S_NVARIANTS };

/* One call of variant v; bytes sent, or -1 with errno. */
static ssize_t send_once(int fd, const uint8_t *buf, size_t len, int v)
{
	struct iovec iov[3];
	struct msghdr m = { .msg_iov = iov };
	struct mmsghdr mm[2];
	size_t h = len / 2, t = len / 3;
	ssize_t n;
	int r;

	switch (v) {
	case S_SEND:
		return send(fd, buf, len, MSG_NOSIGNAL);
	case S_WRITE:
		return write(fd, buf, len);
	case S_WRITEV:
		iov[0] = (struct iovec){ (void *)buf, t };
		iov[1] = (struct iovec){ (void *)(buf + t), t };
		iov[2] = (struct iovec){ (void *)(buf + 2 * t), len - 2 * t };
		return writev(fd, iov, 3);
	case S_SENDMSG:
		iov[0] = (struct iovec){ (void *)buf, h };
		iov[1] = (struct iovec){ (void *)(buf + h), len - h };
		m.msg_iovlen = 2;
		return sendmsg(fd, &m, MSG_NOSIGNAL);
	case S_SENDTO:
		return sendto(fd, buf, len, MSG_NOSIGNAL, NULL, 0);
	case S_SENDMMSG:
		/* two messages, the halves (one when there is one byte) */
		memset(mm, 0, sizeof(mm));
		iov[0] = (struct iovec){ (void *)buf, h ? h : len };
		iov[1] = (struct iovec){ (void *)(buf + h), len - h };
		mm[0].msg_hdr.msg_iov = &iov[0];
		mm[0].msg_hdr.msg_iovlen = 1;
		mm[1].msg_hdr.msg_iov = &iov[1];
		mm[1].msg_hdr.msg_iovlen = 1;
		r = sendmmsg(fd, mm, h ? 2 : 1, MSG_NOSIGNAL);
		if (r < 0)
			return -1;
		n = 0;
		for (int i = 0; i < r; i++)
			n += (ssize_t)mm[i].msg_len;
		return n;
	case S_DONTWAIT:
		return send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	case S_SYSCALL:
		return (ssize_t)syscall(SYS_sendto, fd, buf, len, MSG_NOSIGNAL,
					NULL, 0);
	}
	errno = EINVAL;
	return -1;
}

/* All of buf through variant v; 0 or an errno. */
static int send_all(int fd, const uint8_t *buf, size_t len, int v)
{
	while (len) {
		ssize_t n = send_once(fd, buf, len, v);

		if (n < 0) {
			struct pollfd p = { fd, POLLOUT, 0 };

			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return errno;
			if (poll(&p, 1, 20000) == 0)
				return ETIMEDOUT;
			continue;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send len bytes of stream id from position *pos, in chunks of 1..max. */
static int send_stream(int fd, unsigned int id, uint64_t *pos, uint64_t len,
		       size_t max, int v, uint64_t seed)
{
	uint8_t *buf = malloc(max);
	uint64_t r = seed;
	int err = 0;

	if (!buf)
		die("malloc");
	while (len && !err) {
		size_t n = (size_t)(mix64(r++) % max) + 1;

		if (n > len)
			n = (size_t)len;
		fill(id, *pos, buf, n);
		err = send_all(fd, buf, n, v);
		if (!err) {
			*pos += n;
			len -= n;
		}
	}
	free(buf);
	return err;
}

enum { R_RECV, R_READ, R_READV, R_RECVMSG, R_RECVFROM, R_RECVMMSG,
	R_DONTWAIT, R_WAITALL, R_NVARIANTS };

/* One receive of variant v into buf: bytes, 0 at EOF, -1 with errno. */
static ssize_t recv_once(int fd, uint8_t *buf, size_t len, int v)
{
	struct iovec iov[2];
	struct msghdr m = { .msg_iov = iov };
	struct mmsghdr mm[2];
	struct sockaddr_storage from;
	socklen_t flen = sizeof(from);
	size_t h = len / 2;
	ssize_t n;
	int r;

	switch (v) {
	case R_RECV:
		return recv(fd, buf, len, 0);
	case R_READ:
		return read(fd, buf, len);
	case R_READV:
		iov[0] = (struct iovec){ buf, h };
		iov[1] = (struct iovec){ buf + h, len - h };
		return readv(fd, iov, 2);
	case R_RECVMSG:
		iov[0] = (struct iovec){ buf, h };
		iov[1] = (struct iovec){ buf + h, len - h };
		m.msg_iovlen = 2;
		return recvmsg(fd, &m, 0);
	case R_RECVFROM:
		return recvfrom(fd, buf, len, 0, (struct sockaddr *)&from, &flen);
	case R_RECVMMSG:
		if (!h)
			return recv(fd, buf, len, 0);
		/*
		 * Two messages, the halves of buf; the first may be short
		 * (MSG_WAITFORONE: the second is a non-blocking read of
		 * what followed), so the second's bytes move up behind it.
		 */
		memset(mm, 0, sizeof(mm));
		iov[0] = (struct iovec){ buf, h };
		iov[1] = (struct iovec){ buf + h, len - h };
		mm[0].msg_hdr.msg_iov = &iov[0];
		mm[0].msg_hdr.msg_iovlen = 1;
		mm[1].msg_hdr.msg_iov = &iov[1];
		mm[1].msg_hdr.msg_iovlen = 1;
		r = recvmmsg(fd, mm, 2, MSG_WAITFORONE, NULL);
		if (r < 0)
			return -1;
		if (r == 2 && mm[1].msg_len && mm[0].msg_len < h)
			memmove(buf + mm[0].msg_len, buf + h, mm[1].msg_len);
		n = (ssize_t)mm[0].msg_len;
		if (r == 2)
			n += (ssize_t)mm[1].msg_len;
		return n;
	case R_DONTWAIT:
		return recv(fd, buf, len, MSG_DONTWAIT);
	case R_WAITALL:
		return recv(fd, buf, len < 700 ? len : 700, MSG_WAITALL);
	}
	errno = EINVAL;
	return -1;
}

/* Receive until EOF into c; 0 or an errno (ETIMEDOUT: no byte, no EOF in
 * ms milliseconds, when ms >= 0). */
static int drain(int fd, struct chk *c, int ms)
{
	static __thread uint8_t buf[65536];

	for (;;) {
		ssize_t n;

		if (ms >= 0) {
			struct pollfd p = { fd, POLLIN, 0 };
			int r = poll(&p, 1, ms);

			if (r == 0)
				return ETIMEDOUT;
			if (r < 0 && errno != EINTR)
				return errno;
		}
		n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return errno;
		}
		chk_feed(c, buf, (size_t)n);
	}
}

static void say_end(const char *prefix, int err)
{
	if (!err)
		say("%seof: yes", prefix);
	else if (err == ETIMEDOUT)
		say("%seof: none within 10 s", prefix);
	else
		say("%srecv: %s", prefix, errname(err));
}

/* ---- 1: two senders on one connection, one of them past the fast path ---- */

#define TWO_LEN (4 * MIB)

struct sender {
	int fd;
	unsigned int id;
	int variant;
	int dup;		/* send through a dup of fd */
	uint64_t pos;
	int err;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	int fd = s->dup ? dup(s->fd) : s->fd;

	if (fd < 0)
		die("dup");
	s->err = send_stream(fd, s->id, &s->pos, TWO_LEN, 16384, s->variant,
			     s->id * 1000003ULL);
	if (s->dup)
		close(fd);
	return NULL;
}

struct receiver {
	int fd;
	struct chk c;
	int err;
};

static void *receiver_main(void *arg)
{
	struct receiver *r = arg;

	r->err = drain(r->fd, &r->c, -1);
	return NULL;
}

static int case_two_senders(int argc, char **argv)
{
	struct sender s0 = { .id = 0, .variant = S_SEND };
	struct sender s1 = { .id = 1 };
	struct receiver r;
	pthread_t t0, t1, tr;
	int a, b;

	if (argc < 1)
		return -1;
	if (!strcmp(argv[0], "dup")) {
		s1.variant = S_SEND;
		s1.dup = 1;
	} else if (!strcmp(argv[0], "syscall")) {
		s1.variant = S_SYSCALL;
	} else if (!strcmp(argv[0], "sendmmsg")) {
		s1.variant = S_SENDMMSG;
	} else {
		return -1;
	}
	stage = "two senders";
	pair(&a, &b);
	s0.fd = s1.fd = a;
	r.fd = b;
	chk_init(&r.c, 3);
	tr = spawn(receiver_main, &r);
	t0 = spawn(sender_main, &s0);
	t1 = spawn(sender_main, &s1);
	pthread_join(t0, NULL);
	pthread_join(t1, NULL);
	say("send0: %s", errname(s0.err));
	say("send1: %s", errname(s1.err));
	shutdown(a, SHUT_WR);
	pthread_join(tr, NULL);
	chk_say(&r.c, "", 0, TWO_LEN);
	chk_say(&r.c, "", 1, TWO_LEN);
	chk_say_foreign(&r.c, "");
	say_end("", r.err);
	return 0;
}

/* ---- 2: a signal handler that sends while its thread is in send() -------- */

#define HANDLER_SIGNALS 200
#define HANDLER_REC 512

static int hs_fd;
static volatile sig_atomic_t hs_handled, hs_err;
static uint64_t hs_pos;

static void hs_handler(int sig)
{
	uint8_t rec[HANDLER_REC];
	int saved = errno, err;

	(void)sig;
	if (!hs_err) {
		fill(1, hs_pos, rec, sizeof(rec));
		err = send_all(hs_fd, rec, sizeof(rec), S_SEND);
		if (err)
			hs_err = err;
		else
			hs_pos += sizeof(rec);
	}
	hs_handled = hs_handled + 1;
	errno = saved;
}

static struct {
	pthread_t thread;
	volatile int stop;
	uint64_t pos;
	int err;
} hs_sender;

static void *hs_signaller(void *arg)
{
	(void)arg;
	for (int i = 0; i < HANDLER_SIGNALS && !hs_sender.stop; i++) {
		pthread_kill(hs_sender.thread, SIGUSR1);
		while (hs_handled <= i && !hs_sender.stop)
			nap(100);
	}
	return NULL;
}

static void *hs_sender_main(void *arg)
{
	(void)arg;
	/* big sends, until 4 MiB went and every signal was handled */
	while (!hs_sender.err &&
	       (hs_sender.pos < 4 * MIB || hs_handled < HANDLER_SIGNALS))
		hs_sender.err = send_stream(hs_fd, 0, &hs_sender.pos, 256 * 1024,
					    256 * 1024, S_SEND, hs_sender.pos);
	hs_sender.stop = 1;
	return NULL;
}

static int case_handler_sends(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = hs_handler, .sa_flags = SA_RESTART };
	struct receiver r;
	pthread_t sig, tr;
	int b;

	(void)argc;
	(void)argv;
	stage = "handler sends";
	pair(&hs_fd, &b);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	r.fd = b;
	chk_init(&r.c, 3);
	tr = spawn_masked(receiver_main, &r);
	hs_sender.thread = spawn(hs_sender_main, NULL);
	sig = spawn_masked(hs_signaller, NULL);
	pthread_join(hs_sender.thread, NULL);
	pthread_join(sig, NULL);
	say("send: %s", errname(hs_sender.err));
	say("handler: %d signals, %s", (int)hs_handled, errname(hs_err));
	shutdown(hs_fd, SHUT_WR);
	pthread_join(tr, NULL);
	say("stream0: %s", chk_ok(&r.c, 0, hs_sender.pos) ? "ok, all sent" :
	    r.c.bad[0] ? "corrupt" : "short");
	chk_say(&r.c, "", 1, (uint64_t)HANDLER_SIGNALS * HANDLER_REC);
	chk_say_foreign(&r.c, "");
	say_end("", r.err);
	return 0;
}

/* ---- 3: a socket closed behind the shim's back, its number reused -------- */

#define NEW_LEN 16384

#define OLD_LEN 8192

static int case_closed_behind(int argc, char **argv)
{
	int l1, l2, a1, b1, s, b2, same, err;
	uint64_t pos = 0, pos1 = 0;
	struct chk c1, c2;

	if (argc < 1 || (strcmp(argv[0], "fdopen") && strcmp(argv[0], "syscall")))
		return -1;
	stage = "closed behind";
	l1 = listener();
	l2 = listener();
	pair_from(l1, &a1, &b1);
	/* used first, so that the shim has state for it (rings mapped) */
	err = send_stream(a1, 1, &pos1, OLD_LEN, 4096, S_SEND, 7);
	say("old send: %s", errname(err));
	if (!strcmp(argv[0], "fdopen")) {
		FILE *f = fdopen(a1, "w");

		if (!f)
			die("fdopen");
		if (fclose(f))
			die("fclose");
	} else if (syscall(SYS_close, a1)) {
		die("SYS_close");
	}
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("socket");
	same = s == a1;
	say("new socket on the same fd: %s", same ? "yes" : "no");
	connect_to(s, l2);
	b2 = accept(l2, NULL, NULL);
	if (b2 < 0)
		die("accept");
	stage = "closed behind: send";
	err = send_stream(s, 2, &pos, NEW_LEN, 4096, S_SEND, 7);
	say("send: %s", errname(err));
	close(s);
	stage = "closed behind: peers";
	chk_init(&c2, 5);
	err = drain(b2, &c2, 10000);
	chk_say(&c2, "peer2 ", 2, NEW_LEN);
	chk_say(&c2, "peer2 ", 0, 0);
	chk_say_foreign(&c2, "peer2 ");
	say_end("peer2 ", err);
	chk_init(&c1, 7);		/* its own stream 1 belongs here */
	err = drain(b1, &c1, 10000);
	chk_say(&c1, "peer1 ", 1, OLD_LEN);
	chk_say(&c1, "peer1 ", 2, 0);
	chk_say(&c1, "peer1 ", 0, 0);
	chk_say_foreign(&c1, "peer1 ");
	say_end("peer1 ", err);
	return 0;
}

/* ---- 4: close() while another thread is in recv(), a pipe on the number -- */

#define CDR_SOCK 1000
#define CDR_PIPE 64

static struct {
	int fd;
	sem_t ready;
	pid_t tid;
	ssize_t n;
	int err;
	uint8_t buf[4096];
} cdr;

static void *cdr_reader(void *arg)
{
	(void)arg;
	cdr.tid = gettid_();
	sem_post(&cdr.ready);
	/*
	 * No MSG_WAITALL: under sdrun that flag goes to the kernel at once,
	 * and this call must be libsd's, spinning or asleep, when the close
	 * comes.  The peer's one send arrives as one piece on loopback.
	 */
	cdr.n = recv(cdr.fd, cdr.buf, CDR_SOCK, 0);
	cdr.err = cdr.n < 0 ? errno : 0;
	return NULL;
}

static int case_close_during_recv(int argc, char **argv)
{
	uint8_t buf[CDR_SOCK];
	pthread_t t;
	int l, a, b, p[2], err;
	struct chk c;
	ssize_t n;

	(void)argc;
	(void)argv;
	stage = "close during recv";
	l = listener();			/* stays open: the pipe gets a's number */
	pair_from(l, &a, &b);
	cdr.fd = a;
	sem_init(&cdr.ready, 0, 0);
	t = spawn(cdr_reader, NULL);
	sem_wait(&cdr.ready);
	wait_blocked(cdr.tid);
	if (close(a))
		die("close");
	/*
	 * Over TCP the pipe gets the socket's number at once; under sdrun
	 * the close of a socket with a call in flight waits for the call
	 * (Documentation/shim.rst, "Descriptors"), so it may get another.
	 * The transcript says what both must agree on: whose bytes go where.
	 */
	if (pipe(p))
		die("pipe");
	fill(3, 0, buf, CDR_PIPE);
	if (write(p[1], buf, CDR_PIPE) != CDR_PIPE)
		die("write pipe");
	fill(0, 0, buf, CDR_SOCK);
	err = send_all(b, buf, CDR_SOCK, S_SEND);
	say("peer send: %s", errname(err));
	stage = "close during recv: the blocked recv";
	pthread_join(t, NULL);
	chk_init(&c, 9);
	if (cdr.n > 0)
		chk_feed(&c, cdr.buf, (size_t)cdr.n);
	if (cdr.n < 0)
		say("recv: %s", errname(cdr.err));
	else
		say("recv: %zd bytes", cdr.n);
	chk_say(&c, "recv ", 0, CDR_SOCK);
	chk_say(&c, "recv ", 3, 0);
	chk_say_foreign(&c, "recv ");
	/* the pipe still holds its bytes */
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	n = read(p[0], buf, sizeof(buf));
	chk_init(&c, 9);
	if (n > 0)
		chk_feed(&c, buf, (size_t)n);
	chk_say(&c, "pipe ", 3, n < 0 ? 0 : CDR_PIPE);
	chk_say(&c, "pipe ", 0, 0);
	/* the recv's end of the socket is gone: the peer sees EOF */
	stage = "close during recv: peer";
	chk_init(&c, 9);
	err = drain(b, &c, 10000);
	chk_say(&c, "peer ", 3, 0);
	chk_say_foreign(&c, "peer ");
	say_end("peer ", err);
	close(p[0]);
	close(p[1]);
	close(b);
	close(l);
	return 0;
}

/* ---- 5: siglongjmp out of a handler that interrupted recv() -------------- */

static struct {
	int fd, l;
	sigjmp_buf jb;
	sem_t ready, jumped, go;
	pid_t tid;
	int jumped_out;
	int dom_before, dom_after;
	int new_ok;
	const char *new_err;
} lj;

static void lj_handler(int sig)
{
	(void)sig;
	siglongjmp(lj.jb, 1);
}

static void *lj_thread_a(void *arg)
{
	uint8_t buf[1000], got[1000];
	int s0, s1, err;
	ssize_t n;

	(void)arg;
	lj.tid = gettid_();
	s0 = socket(AF_INET, SOCK_STREAM, 0);
	if (s0 < 0)
		die("socket");
	lj.dom_before = redirected(s0);
	close(s0);
	if (sigsetjmp(lj.jb, 1) == 0) {
		sem_post(&lj.ready);
		n = recv(lj.fd, buf, sizeof(buf), 0);
		lj.jumped_out = n < 0 ? -errno : 0;
	} else {
		lj.jumped_out = 1;
	}
	sem_post(&lj.jumped);
	sem_wait(&lj.go);
	/* a new socket of this thread, after the jump */
	s1 = socket(AF_INET, SOCK_STREAM, 0);
	if (s1 < 0)
		die("socket");
	lj.dom_after = redirected(s1);
	connect_to(s1, lj.l);
	fill(0, 0, buf, sizeof(buf));
	err = send_all(s1, buf, sizeof(buf), S_SEND);
	if (err) {
		lj.new_err = errname(err);
	} else {
		n = recv(s1, got, sizeof(got), MSG_WAITALL);
		if (n != (ssize_t)sizeof(got))
			lj.new_err = n < 0 ? errname(errno) : "short";
		else
			lj.new_ok = !memcmp(buf, got, sizeof(got));
	}
	close(s1);
	return NULL;
}

static struct {
	sem_t ready;
	pid_t tid;
	ssize_t n;
	int err;
	uint8_t buf[100];
} ljb;

static void *lj_thread_b(void *arg)
{
	(void)arg;
	ljb.tid = gettid_();
	sem_post(&ljb.ready);
	ljb.n = recv(lj.fd, ljb.buf, sizeof(ljb.buf), MSG_WAITALL);
	ljb.err = ljb.n < 0 ? errno : 0;
	return NULL;
}

static int case_longjmp_recv(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = lj_handler };
	uint8_t buf[1000];
	struct timespec until;
	pthread_t ta, tb;
	int b, c, hung = 0;
	struct chk k;

	(void)argc;
	(void)argv;
	stage = "longjmp";
	lj.l = listener();
	pair_from(lj.l, &lj.fd, &b);
	sem_init(&lj.ready, 0, 0);
	sem_init(&lj.jumped, 0, 0);
	sem_init(&lj.go, 0, 0);
	sem_init(&ljb.ready, 0, 0);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	ta = spawn(lj_thread_a, NULL);
	sem_wait(&lj.ready);
	wait_blocked(lj.tid);
	pthread_kill(ta, SIGALRM);
	stage = "longjmp: the jump";
	sem_wait(&lj.jumped);
	say("A: %s", lj.jumped_out == 1 ? "jumped out of recv" :
	    lj.jumped_out ? errname(-lj.jumped_out) : "recv returned");
	/* another thread's recv on the same socket gets the peer's bytes */
	stage = "longjmp: B's recv";
	tb = spawn(lj_thread_b, NULL);
	sem_wait(&ljb.ready);
	wait_blocked(ljb.tid);
	fill(0, 0, buf, sizeof(ljb.buf));
	say("peer send: %s", errname(send_all(b, buf, sizeof(ljb.buf), S_SEND)));
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	if (pthread_timedjoin_np(tb, NULL, &until)) {
		hung = 1;
		say("B: recv hangs");
	} else if (ljb.n < 0) {
		say("B: recv %s", errname(ljb.err));
	} else {
		chk_init(&k, 1);
		chk_feed(&k, ljb.buf, (size_t)ljb.n);
		chk_say(&k, "B: ", 0, sizeof(ljb.buf));
	}
	/* A makes a new socket and it works */
	stage = "longjmp: A's new socket";
	sem_post(&lj.go);
	c = accept(lj.l, NULL, NULL);
	if (c < 0)
		die("accept");
	if (recv(c, buf, sizeof(buf), MSG_WAITALL) == (ssize_t)sizeof(buf))
		send_all(c, buf, sizeof(buf), S_SEND);
	pthread_join(ta, NULL);
	say("A: new socket %s", lj.new_ok ? "echoes" :
	    lj.new_err ? lj.new_err : "corrupt");
	say("A: new socket %s", lj.dom_after == lj.dom_before ?
	    "redirected as before the jump" : "not made as before the jump");
	close(c);
	return hung;
}

/* ---- 6: a signal interrupts a blocking call: EINTR, or SA_RESTART -------- */

static volatile sig_atomic_t intr_handled;

static void intr_handler(int sig)
{
	(void)sig;
	intr_handled = 1;
}

enum { I_RECV, I_POLL, I_EPOLL, I_SEND };
#define INTR_SEND (16 * MIB)
static uint8_t intr_buf[INTR_SEND];

static struct {
	int op, fd, ep;
	sem_t ready;
	pid_t tid;
	ssize_t r;
	int err, revents;
	uint8_t *buf;
} in;

static void *intr_thread(void *arg)
{
	struct pollfd p;
	struct epoll_event ev = { 0 };

	(void)arg;
	in.tid = gettid_();
	sem_post(&in.ready);
	switch (in.op) {
	case I_RECV:
		in.r = recv(in.fd, in.buf, 100, 0);
		break;
	case I_POLL:
		p = (struct pollfd){ in.fd, POLLIN, 0 };
		in.r = poll(&p, 1, -1);
		in.revents = p.revents;
		break;
	case I_EPOLL:
		in.r = epoll_wait(in.ep, &ev, 1, -1);
		in.revents = (int)ev.events;
		break;
	case I_SEND:
		in.r = send(in.fd, in.buf, INTR_SEND, MSG_NOSIGNAL);
		break;
	}
	in.err = in.r < 0 ? errno : 0;
	return NULL;
}

static int case_eintr(int argc, char **argv)
{
	static const char *const ops[] = { "recv", "poll", "epoll", "send" };
	struct sigaction sa = { .sa_handler = intr_handler };
	struct epoll_event ev = { .events = EPOLLIN };
	struct receiver r;
	pthread_t t, tr = 0;
	uint8_t buf[100];
	int a, b, restart;
	double start;

	if (argc < 2)
		return -1;
	in.op = -1;
	for (int i = 0; i < 4; i++)
		if (!strcmp(argv[0], ops[i]))
			in.op = i;
	if (in.op < 0)
		return -1;
	if (!strcmp(argv[1], "restart"))
		restart = 1;
	else if (!strcmp(argv[1], "norestart"))
		restart = 0;
	else
		return -1;
	stage = "eintr";
	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	pair(&a, &b);
	in.fd = a;
	/*
	 * Not malloc(): under sdrun a block this large comes from the
	 * zero-copy pool, whose pages the connection queues (up to
	 * SD_ZC_QUEUE_MAX, more than this) without the peer reading, so the
	 * send would not block.  A copied send blocks once the ring is full,
	 * as TCP's does once its buffers are.
	 */
	in.buf = intr_buf;
	fill(0, 0, in.buf, INTR_SEND);
	in.ep = epoll_create1(0);
	if (in.ep < 0 || epoll_ctl(in.ep, EPOLL_CTL_ADD, a, &ev))
		die("epoll");
	sem_init(&in.ready, 0, 0);
	t = spawn(intr_thread, NULL);
	sem_wait(&in.ready);
	wait_blocked(in.tid);
	pthread_kill(t, SIGUSR1);
	stage = "eintr: the handler";
	start = now();
	while (!intr_handled && now() - start < 2)
		nap(1000);
	say("handler: %s", intr_handled ? "ran" : "did not run within 2 s");
	/* now the data the call waited for */
	stage = "eintr: the call";
	if (in.op == I_SEND) {
		r.fd = b;
		chk_init(&r.c, 1);
		tr = spawn(receiver_main, &r);
	} else {
		fill(0, 0, buf, sizeof(buf));
		send_all(b, buf, sizeof(buf), S_SEND);
	}
	pthread_join(t, NULL);
	if (in.r < 0)
		say("%s: %s", ops[in.op], errname(in.err));
	else if (in.op == I_SEND)
		say("send: %s", in.r == INTR_SEND ? "complete" : "partial");
	else if (in.op == I_RECV)
		say("recv: %zd bytes%s", in.r, memcmp(in.buf, buf, (size_t)in.r) ?
		    ", corrupt" : "");
	else
		say("%s: %zd, events %#x", ops[in.op], in.r, in.revents);
	if (in.op == I_SEND) {
		shutdown(a, SHUT_WR);
		stage = "eintr: the peer";
		pthread_join(tr, NULL);
		say("peer: %s", chk_ok(&r.c, 0, in.r > 0 ? (uint64_t)in.r : 0) ?
		    "got what send said, intact" : "differs from what send said");
		say_end("peer ", r.err);
	}
	return 0;
}

/* ---- 7: fork while another thread waits in epoll_wait -------------------- */

static struct {
	int ep;
	sem_t ready;
	pid_t tid;
	int r;
	int err;
} few;

static void *few_waiter(void *arg)
{
	struct epoll_event ev;

	(void)arg;
	few.tid = gettid_();
	sem_post(&few.ready);
	few.r = epoll_wait(few.ep, &ev, 1, -1);
	few.err = few.r < 0 ? errno : 0;
	return NULL;
}

static int case_fork_epoll(int argc, char **argv)
{
	struct epoll_event ev = { .events = EPOLLIN };
	char line[256];
	int a, b, p[2], status, hung = 0;
	pthread_t t;
	pid_t pid;
	size_t got = 0;
	double start;

	(void)argc;
	(void)argv;
	stage = "fork epoll";
	pair(&a, &b);
	few.ep = epoll_create1(0);
	if (few.ep < 0 || epoll_ctl(few.ep, EPOLL_CTL_ADD, a, &ev))
		die("epoll");
	if (pipe(p))
		die("pipe");
	sem_init(&few.ready, 0, 0);
	t = spawn(few_waiter, NULL);
	sem_wait(&few.ready);
	wait_blocked(few.tid);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct epoll_event e = { .events = EPOLLIN };
		int del, add, w;
		char out[128];
		int n;

		close(p[0]);
		del = epoll_ctl(few.ep, EPOLL_CTL_DEL, a, NULL) ? errno : 0;
		add = epoll_ctl(few.ep, EPOLL_CTL_ADD, a, &e) ? errno : 0;
		w = epoll_wait(few.ep, &e, 1, 0);
		n = snprintf(out, sizeof(out), "child: del %s, add %s, wait %d\n",
			     errname(del), errname(add), w);
		if (write(p[1], out, (size_t)n) != n)
			_exit(1);
		exit(0);
	}
	close(p[1]);
	stage = "fork epoll: the child";
	for (;;) {
		struct pollfd pp = { p[0], POLLIN, 0 };
		ssize_t n;

		if (poll(&pp, 1, 10000) == 0) {
			say("child: hangs");
			kill(pid, SIGKILL);
			hung = 1;
			break;
		}
		n = read(p[0], line + got, sizeof(line) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	line[got] = 0;
	if (got && line[got - 1] == '\n')
		line[got - 1] = 0;
	if (got)
		say("%s", line);
	start = now();
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now() - start > 10) {
			say("child: does not exit");
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			hung = 1;
			break;
		}
		nap(5000);
	}
	if (!hung)
		say("child: exit %d", WIFEXITED(status) ? WEXITSTATUS(status) :
		    128 + WTERMSIG(status));
	/* the parent's waiter still wakes */
	stage = "fork epoll: the waiter";
	if (send(b, "x", 1, MSG_NOSIGNAL) != 1)
		die("send");
	pthread_join(t, NULL);
	say("waiter: %d %s", few.r, errname(few.err));
	return 0;
}

/* ---- 8: SO_RCVLOWAT ------------------------------------------------------- */

/* Once thread tid is in its recv, the peer sends len bytes of stream 0
 * from position 3. */
static struct {
	int fd;
	pid_t tid;
	size_t len;
} rl;

static void *rl_peer(void *arg)
{
	uint8_t buf[16];

	(void)arg;
	wait_blocked(rl.tid);
	fill(0, 3, buf, rl.len);
	send_all(rl.fd, buf, rl.len, S_SEND);
	return NULL;
}

static int case_rcvlowat(int argc, char **argv)
{
	int a, b, lowat = 10, avail = 0;
	uint8_t buf[100];
	struct pollfd p;
	pthread_t t;
	ssize_t n;
	struct chk c;
	double start;

	(void)argc;
	(void)argv;
	stage = "rcvlowat";
	pair(&a, &b);
	if (setsockopt(a, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)))
		die("SO_RCVLOWAT");
	/*
	 * Under sdrun this makes libsd the reader of the ring, so that the
	 * polls below are answered from the ring in user space.
	 */
	n = recv(a, buf, sizeof(buf), MSG_DONTWAIT);
	say("recv before: %s", n < 0 ? errname(errno) : "data?");
	fill(0, 0, buf, 3);
	send_all(b, buf, 3, S_SEND);
	/* wait for the 3 bytes to be there (FIONREAD takes nothing) */
	start = now();
	while (ioctl(a, FIONREAD, &avail) || avail < 3) {
		if (now() - start > 10) {
			say("3 bytes never arrived");
			return 1;
		}
		nap(1000);
	}
	p = (struct pollfd){ a, POLLIN, 0 };
	say("poll 0 ms: %d, events %#x", poll(&p, 1, 0), p.revents);
	p = (struct pollfd){ a, POLLIN, 0 };
	say("poll 100 ms: %d, events %#x", poll(&p, 1, 100), p.revents);
	/*
	 * TCP's recv copies the 3 bytes, then sleeps until 10 more than it
	 * took are there (tcp_data_ready() counts from copied_seq): 7 more
	 * would leave it asleep.  With 10 more it returns all 13, and so
	 * must anything that waits for the low-water mark.
	 */
	rl.fd = b;
	rl.tid = gettid_();
	rl.len = 10;
	t = spawn(rl_peer, NULL);
	n = recv(a, buf, sizeof(buf), 0);
	pthread_join(t, NULL);
	if (n < 0) {
		say("recv: %s", errname(errno));
	} else {
		chk_init(&c, 1);
		chk_feed(&c, buf, (size_t)n);
		say("recv: %zd bytes", n);
		chk_say(&c, "recv ", 0, (uint64_t)n);
	}
	return 0;
}

/* ---- 9: O_NONBLOCK cleared through a dup ---------------------------------- */

/* ---- 11: a vfork child closes a socket another thread is in recv() on -- */

/*
 * The child of vfork runs on its parent's memory but has its own copy of
 * the descriptor table: its close() must leave the parent's socket, and
 * the call in flight on it, alone.
 */
static int case_vfork_close(int argc, char **argv)
{
	uint8_t buf[100];
	pthread_t t;
	int a, b, status;
	pid_t pid;
	struct chk c;

	(void)argc;
	(void)argv;
	stage = "vfork close";
	pair(&a, &b);
	cdr.fd = a;
	sem_init(&cdr.ready, 0, 0);
	t = spawn(cdr_reader, NULL);
	sem_wait(&cdr.ready);
	wait_blocked(cdr.tid);
	pid = vfork();
	if (pid < 0)
		die("vfork");
	if (!pid) {
		close(a);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	say("child: %s", WIFEXITED(status) && !WEXITSTATUS(status) ? "closed and left" :
	    "failed");
	fill(0, 0, buf, sizeof(buf));
	say("peer send: %s", errname(send_all(b, buf, sizeof(buf), S_SEND)));
	stage = "vfork close: the recv";
	pthread_join(t, NULL);
	if (cdr.n < 0)
		say("recv: %s", errname(cdr.err));
	else
		say("recv: %zd bytes%s", cdr.n, cdr.n == (ssize_t)sizeof(buf) &&
		    !memcmp(cdr.buf, buf, sizeof(buf)) ? ", intact" : "");
	/* the parent's socket still works both ways */
	fill(1, 0, buf, sizeof(buf));
	say("send after: %s", errname(send_all(a, buf, sizeof(buf), S_SEND)));
	stage = "vfork close: the peer";
	chk_init(&c, 2);
	shutdown(a, SHUT_WR);
	say_end("peer ", drain(b, &c, 10000));
	chk_say(&c, "peer ", 1, sizeof(buf));
	close(a);
	close(b);
	return 0;
}

/* ---- pthread_cancel of a thread blocked in recv(), then close() -------- */

/*
 * A thread cancelled inside recv() never returns from it: the close()
 * after it must still close the socket (the peer sees the end of the
 * stream), as over TCP.
 */
static int case_cancel_recv(int argc, char **argv)
{
	pthread_t t;
	void *ret;
	int a, b;
	struct chk c;

	(void)argc;
	(void)argv;
	stage = "cancel recv";
	pair(&a, &b);
	cdr.fd = a;
	sem_init(&cdr.ready, 0, 0);
	t = spawn(cdr_reader, NULL);
	sem_wait(&cdr.ready);
	wait_blocked(cdr.tid);
	pthread_cancel(t);
	pthread_join(t, &ret);
	say("reader: %s", ret == PTHREAD_CANCELED ? "cancelled" : "returned");
	say("close: %s", close(a) ? errname(errno) : "OK");
	stage = "cancel recv: the peer";
	chk_init(&c, 1);
	say_end("peer ", drain(b, &c, 10000));
	close(b);
	return 0;
}

static int case_nonblock_dup(int argc, char **argv)
{
	int a, b, d, fl;
	uint8_t buf[100];
	pthread_t t;
	ssize_t n;

	(void)argc;
	(void)argv;
	stage = "nonblock dup";
	pair(&a, &b);
	fl = fcntl(a, F_GETFL);
	if (fl < 0 || fcntl(a, F_SETFL, fl | O_NONBLOCK))
		die("fcntl");
	/* the shim may learn the flag here */
	n = recv(a, buf, sizeof(buf), 0);
	say("recv while non-blocking: %s", n < 0 ? errname(errno) : "data?");
	d = dup(a);
	if (d < 0)
		die("dup");
	fl = fcntl(d, F_GETFL);
	if (fl < 0 || fcntl(d, F_SETFL, fl & ~O_NONBLOCK))
		die("fcntl dup");
	say("flags of the original: %s",
	    fcntl(a, F_GETFL) & O_NONBLOCK ? "non-blocking" : "blocking");
	rl.fd = b;
	rl.tid = gettid_();
	rl.len = 7;
	t = spawn(rl_peer, NULL);
	stage = "nonblock dup: recv";
	n = recv(a, buf, sizeof(buf), 0);
	pthread_join(t, NULL);
	if (n < 0) {
		say("recv: %s", errname(errno));
	} else {
		uint8_t want[7];

		fill(0, 3, want, sizeof(want));
		say("recv: %zd bytes%s", n, n == 7 && !memcmp(buf, want, 7) ?
		    ", intact" : "");
	}
	close(d);
	return 0;
}

/* ---- 10: large blocks go back to the system ------------------------------- */

static long rss_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		die("/proc/self/status");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

static int case_memory(int argc, char **argv)
{
	enum { N = 25 };
	char *blocks[N];
	long before, peak, after;

	(void)argc;
	(void)argv;
	stage = "memory";
	before = rss_kib();
	for (int i = 0; i < N; i++) {
		blocks[i] = malloc(4 * MIB);
		if (!blocks[i])
			die("malloc");
		memset(blocks[i], i + 1, 4 * MIB);
	}
	peak = rss_kib();
	for (int i = 0; i < N; i++)
		free(blocks[i]);
	after = rss_kib();
	say("rss at the peak: %s", peak - before >= 90 * 1024 ? "+100 MiB" :
	    "did not grow");
	if (after - before <= 32 * 1024)
		say("rss: ok");
	else
		say("rss: %ld MiB above the start", (after - before) / 1024);
	return 0;
}

/* ---- stress: threads mixing every send and receive on shared sockets ----- */

#define ST_CONNS 2
#define ST_THREADS 4
#define ST_LEN (512 * 1024)

static struct {
	int x[ST_CONNS], y[ST_CONNS];
	pthread_mutex_t lock[ST_CONNS];
	struct chk c[ST_CONNS];
	int eof[ST_CONNS];
	int rerr[ST_CONNS];
	int serr[ST_THREADS];
} st;

/* Sender k: stream k on each connection, chunk by chunk, alternating the
 * connection and the call. */
static void *st_sender(void *arg)
{
	int k = (int)(intptr_t)arg;
	uint64_t pos[ST_CONNS] = { 0 };
	uint8_t *buf = malloc(16384);
	uint64_t r = 1000 + (uint64_t)k;
	unsigned int i = 0;

	if (!buf)
		die("malloc");
	while (!st.serr[k]) {
		int conn = (int)((i + (unsigned int)k) % ST_CONNS);
		int v = (int)((i / 2 + (unsigned int)k) % S_NVARIANTS);
		size_t n = (size_t)(mix64(r++) % 16384) + 1;

		if (pos[0] == ST_LEN && pos[1] == ST_LEN)
			break;
		if (pos[conn] == ST_LEN)
			conn ^= 1;
		if (n > ST_LEN - pos[conn])
			n = (size_t)(ST_LEN - pos[conn]);
		fill((unsigned int)k, pos[conn], buf, n);
		st.serr[k] = send_all(st.x[conn], buf, n, v);
		pos[conn] += n;
		i++;
	}
	free(buf);
	return NULL;
}

/* Receiver j: reads connection j % 2, the call and size changing each
 * time; the two receivers of a connection take turns under its lock, so
 * that the order of what they read is the order of the stream. */
static void *st_receiver(void *arg)
{
	int j = (int)(intptr_t)arg, conn = j % ST_CONNS;
	uint8_t *buf = malloc(32768);
	uint64_t r = 2000 + (uint64_t)j;
	unsigned int i = (unsigned int)j;

	if (!buf)
		die("malloc");
	for (;;) {
		int v = (int)(i++ % R_NVARIANTS);
		size_t len = (size_t)(mix64(r++) % 32768) + 1;
		ssize_t n;

		pthread_mutex_lock(&st.lock[conn]);
		if (st.eof[conn] || st.rerr[conn]) {
			pthread_mutex_unlock(&st.lock[conn]);
			break;
		}
		n = recv_once(st.y[conn], buf, len, v);
		if (n > 0)
			chk_feed(&st.c[conn], buf, (size_t)n);
		else if (n == 0)
			st.eof[conn] = 1;
		else if (errno != EAGAIN && errno != EINTR)
			st.rerr[conn] = errno;
		pthread_mutex_unlock(&st.lock[conn]);
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { st.y[conn], POLLIN, 0 };

			poll(&p, 1, 20000);
		}
	}
	free(buf);
	return NULL;
}

static int case_stress(int argc, char **argv)
{
	pthread_t s[ST_THREADS], r[ST_THREADS];
	char prefix[32];

	(void)argc;
	(void)argv;
	stage = "stress";
	for (int c = 0; c < ST_CONNS; c++) {
		pair(&st.x[c], &st.y[c]);
		pthread_mutex_init(&st.lock[c], NULL);
		chk_init(&st.c[c], 15);
	}
	for (int k = 0; k < ST_THREADS; k++) {
		r[k] = spawn(st_receiver, (void *)(intptr_t)k);
		s[k] = spawn(st_sender, (void *)(intptr_t)k);
	}
	for (int k = 0; k < ST_THREADS; k++)
		pthread_join(s[k], NULL);
	for (int k = 0; k < ST_THREADS; k++)
		say("sender%d: %s", k, errname(st.serr[k]));
	for (int c = 0; c < ST_CONNS; c++)
		shutdown(st.x[c], SHUT_WR);
	stage = "stress: receivers";
	for (int k = 0; k < ST_THREADS; k++)
		pthread_join(r[k], NULL);
	for (int c = 0; c < ST_CONNS; c++) {
		snprintf(prefix, sizeof(prefix), "conn%d ", c);
		for (unsigned int k = 0; k < ST_THREADS; k++)
			chk_say(&st.c[c], prefix, k, ST_LEN);
		chk_say_foreign(&st.c[c], prefix);
		say_end(prefix, st.rerr[c]);
	}
	return 0;
}

/* ---- main ----------------------------------------------------------------- */

static const struct {
	const char *name, *args;
	int (*fn)(int argc, char **argv);
	int timeout;
} cases[] = {
	{ "two-senders", "dup|syscall|sendmmsg", case_two_senders, 60 },
	{ "handler-sends", "", case_handler_sends, 60 },
	{ "closed-behind", "fdopen|syscall", case_closed_behind, 40 },
	{ "close-during-recv", "", case_close_during_recv, 40 },
	{ "longjmp-recv", "", case_longjmp_recv, 40 },
	{ "eintr", "recv|poll|epoll|send restart|norestart", case_eintr, 40 },
	{ "fork-epoll", "", case_fork_epoll, 40 },
	{ "rcvlowat", "", case_rcvlowat, 30 },
	{ "nonblock-dup", "", case_nonblock_dup, 30 },
	{ "vfork-close", "", case_vfork_close, 30 },
	{ "cancel-recv", "", case_cancel_recv, 30 },
	{ "memory", "", case_memory, 60 },
	{ "stress", "", case_stress, 120 },
};

int main(int argc, char **argv)
{
	size_t i;
	int r;

	if (argc < 2 || !strcmp(argv[1], "list")) {
		for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			printf("%s %s\n", cases[i].name, cases[i].args);
		return argc < 2 ? 2 : 0;
	}
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name))
			break;
	if (i == sizeof(cases) / sizeof(cases[0])) {
		fprintf(stderr, "sd_integrity: no case %s\n", argv[1]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	spawn_masked(watchdog_main, (void *)(intptr_t)cases[i].timeout);
	r = cases[i].fn(argc - 2, argv + 2);
	if (r < 0) {
		fprintf(stderr, "usage: sd_integrity %s %s\n", cases[i].name,
			cases[i].args);
		return 2;
	}
	fflush(stdout);
	/* threads left in a hung call must not hold the exit up */
	_exit(r ? 1 : 0);
}
