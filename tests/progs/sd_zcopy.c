// SPDX-License-Identifier: GPL-2.0
/*
 * sd_zcopy: adversarial scenarios for zero copy (include/uapi/linux/sd.h,
 * "Zero copy").  Plain libc socket calls over a TCP connection on
 * 127.0.0.1 that the program makes itself; under `sdrun` with
 * net.sd.redirect=1 the sockets are AF_SD underneath, and malloc'd buffers
 * of 16 KiB or more are pool memory whose pages large sends hand over.
 * Without sdrun the same program runs over TCP: it is its own oracle.
 *
 *   sd_zcopy --list            the scenario names
 *   sd_zcopy all | NAME...     run them; each prints `ok NAME BYTES`
 *
 * Every message carries a pattern that depends on (its key, byte offset):
 * the receiver knows the schedule of messages and checks each byte it gets
 * against it, so loss, duplication, reordering or stale bytes show; the
 * first bad byte is printed with its offset, and the program exits 1.
 * Receivers also put a canary after (and before) where the bytes go and
 * check that no byte past what a call returned changed.  BYTES is the number of
 * stream bytes checked; it is the same on every transport.
 *
 * Every process sets an alarm: a hang fails the scenario instead of
 * blocking the suite.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB		((size_t)1024)
#define MiB		(1024 * KiB)
#define CANARY		0x5A
#define GUARD_SECONDS	60	/* a hang, not a slow machine */
#define POLL_MS		10000
#define NOFLIP		((size_t)-1)
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

static const char *scenario = "sd_zcopy";
static size_t page;

/* Children of this process, killed if it fails. */
static pid_t kids[16];
static int nkids;

/* ---- failing ----------------------------------------------------------- */

static void __attribute__((noreturn, format(printf, 1, 2)))
fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sd_zcopy: %s (pid %d): ", scenario, (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	for (int i = 0; i < nkids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	exit(1);
}

static void __attribute__((noreturn)) die(const char *what)
{
	fail("%s: %s", what, strerror(errno));
}

static void say(const char *str)
{
	if (write(2, str, strlen(str)) < 0)
		return;
}

/* Async-signal-safe: write, kill and _exit only. */
static void on_alarm(int sig)
{
	(void)sig;
	say("sd_zcopy: ");
	say(scenario);
	say(": timed out (a call hangs)\n");
	for (int i = 0; i < nkids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	_exit(3);
}

/* ---- the pattern ------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Word @w (bytes 8w to 8w+7) of the pattern of @key. */
static uint64_t pat_word(uint32_t key, uint64_t w)
{
	return mix64(((uint64_t)key << 44) + w + 0x9e3779b97f4a7c15ULL);
}

static unsigned char pat_byte(uint32_t key, uint64_t off)
{
	return (unsigned char)(pat_word(key, off >> 3) >> (8 * (off & 7)));
}

static void put_word(unsigned char *p, uint64_t w)
{
	for (int b = 0; b < 8; b++)
		p[b] = (unsigned char)(w >> (8 * b));
}

/* Bytes @off to @off + @n of the pattern of @key into @buf. */
static void pat_fill(unsigned char *buf, uint32_t key, uint64_t off, size_t n)
{
	while (n && (off & 7)) {
		*buf++ = pat_byte(key, off++);
		n--;
	}
	while (n >= 8) {
		put_word(buf, pat_word(key, off >> 3));
		buf += 8;
		off += 8;
		n -= 8;
	}
	while (n--)
		*buf++ = pat_byte(key, off++);
}

/* Index of the first byte of @buf that is not the pattern, or @n. */
static size_t pat_bad(const unsigned char *buf, uint32_t key, uint64_t off,
		      size_t n)
{
	size_t i = 0;
	unsigned char w[8];

	while (i < n && ((off + i) & 7)) {
		if (buf[i] != pat_byte(key, off + i))
			return i;
		i++;
	}
	while (n - i >= 8) {
		put_word(w, pat_word(key, (off + i) >> 3));
		if (memcmp(buf + i, w, 8))
			break;
		i += 8;
	}
	for (; i < n; i++)
		if (buf[i] != pat_byte(key, off + i))
			return i;
	return n;
}

/* ---- messages and the schedule ----------------------------------------- */

struct msg {
	size_t len;
	uint32_t key;
	size_t flip;	/* this byte is the pattern's, inverted; or NOFLIP */
	int op;		/* what the sender does (per scenario) */
	int buf;	/* which buffer (per scenario) */
};

struct sched {
	struct msg *m;
	size_t n, cap;
	uint64_t total;
	size_t max;
};

static struct msg *sched_add(struct sched *s, size_t len, uint32_t key)
{
	struct msg *m;

	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->m = realloc(s->m, s->cap * sizeof(*s->m));
		if (!s->m)
			die("realloc");
	}
	m = &s->m[s->n++];
	*m = (struct msg){ .len = len, .key = key, .flip = NOFLIP };
	s->total += len;
	if (len > s->max)
		s->max = len;
	return m;
}

static unsigned char msg_byte(const struct msg *m, size_t off)
{
	unsigned char b = pat_byte(m->key, off);

	return off == m->flip ? (unsigned char)~b : b;
}

static size_t msg_bad(const struct msg *m, const unsigned char *buf,
		      size_t off, size_t n)
{
	size_t bad;

	if (m->flip >= off && m->flip < off + n) {
		size_t f = m->flip - off;

		bad = pat_bad(buf, m->key, off, f);
		if (bad < f)
			return bad;
		if (buf[f] != msg_byte(m, m->flip))
			return f;
		bad = pat_bad(buf + f + 1, m->key, m->flip + 1, n - f - 1);
		return bad + f + 1;
	}
	return pat_bad(buf, m->key, off, n);
}

/* Bytes @off to @off + @n of message @m into @buf. */
static void msg_fill_range(unsigned char *buf, const struct msg *m,
			   size_t off, size_t n)
{
	pat_fill(buf, m->key, off, n);
	if (m->flip >= off && m->flip < off + n)
		buf[m->flip - off] = msg_byte(m, m->flip);
}

static void msg_fill(unsigned char *buf, const struct msg *m)
{
	msg_fill_range(buf, m, 0, m->len);
}

/* A local check: @buf holds message @m. */
static void msg_verify(const unsigned char *buf, const struct msg *m,
		       const char *what)
{
	size_t bad = msg_bad(m, buf, 0, m->len);

	if (bad < m->len)
		fail("%s: byte %zu of %zu (key %u): expected 0x%02x got 0x%02x",
		     what, bad, m->len, m->key, msg_byte(m, bad), buf[bad]);
}

/* A local check: @n bytes at @buf are all @byte. */
static void verify_fill(const unsigned char *buf, int byte, size_t n,
			const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != (unsigned char)byte)
			fail("%s: byte %zu of %zu: expected 0x%02x got 0x%02x",
			     what, i, n, (unsigned char)byte, buf[i]);
}

/* Where a receiver is in the schedule. */
struct cursor {
	const struct sched *s;
	size_t i;	/* message */
	size_t off;	/* in it */
	uint64_t pos;	/* in the stream */
};

static size_t cur_left(const struct cursor *c)
{
	return c->i < c->s->n ? c->s->m[c->i].len - c->off : 0;
}

/* Check @n received bytes at @buf and move past them. */
static void cur_check(struct cursor *c, const unsigned char *buf, size_t n,
		      const char *how)
{
	while (n) {
		const struct msg *m;
		size_t k, bad;

		if (c->i >= c->s->n)
			fail("%s: %zu bytes past the end of the stream (%llu bytes)",
			     how, n, (unsigned long long)c->s->total);
		m = &c->s->m[c->i];
		k = m->len - c->off < n ? m->len - c->off : n;
		bad = msg_bad(m, buf, c->off, k);
		if (bad < k)
			fail("%s: bad byte at stream offset %llu (message %zu of %zu bytes, key %u, offset %zu): expected 0x%02x got 0x%02x",
			     how, (unsigned long long)(c->pos + bad), c->i,
			     m->len, m->key, c->off + bad,
			     msg_byte(m, c->off + bad), buf[bad]);
		buf += k;
		n -= k;
		c->pos += k;
		c->off += k;
		if (c->off == m->len) {
			c->i++;
			c->off = 0;
		}
	}
}

/* Check peeked bytes without moving. */
static void cur_peek(const struct cursor *c, const unsigned char *buf, size_t n,
		     const char *how)
{
	struct cursor copy = *c;

	cur_check(&copy, buf, n, how);
}

/* After a call placed @got of @req bytes at @buf: the rest is untouched. */
static void canary_after(const unsigned char *buf, size_t got, size_t req,
			 const char *how)
{
	size_t end = req < got + 3 * page ? req : got + 3 * page;

	for (size_t k = got; k < end; k++)
		if (buf[k] != CANARY)
			fail("%s: asked for %zu bytes, got %zu, but byte %zu after them changed (0x%02x)",
			     how, req, got, k - got, buf[k]);
}

/* ---- plumbing ---------------------------------------------------------- */

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		die("malloc");
	return p;
}

/* @len bytes at a page boundary; free *@base. */
static unsigned char *alloc_aligned(size_t len, void **base)
{
	*base = xmalloc(len + page);
	return (unsigned char *)(((uintptr_t)*base + page - 1) & ~(uintptr_t)(page - 1));
}

static void xclose(int fd)
{
	if (close(fd))
		die("close");
}

static void xshutdown(int fd)
{
	if (shutdown(fd, SHUT_WR))
		die("shutdown");
}

static void xpipe(int p[2])
{
	if (pipe(p))
		die("pipe");
}

static void write_all(int fd, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	while (n) {
		ssize_t r = write(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("write");
		p += r;
		n -= (size_t)r;
	}
}

static void read_all(int fd, void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read");
		if (r == 0)
			fail("read: early end of file (%zu bytes missing)", n);
		p += r;
		n -= (size_t)r;
	}
}

static void sync_send(int fd, char c)
{
	write_all(fd, &c, 1);
}

static void sync_wait(int fd, char want)
{
	char c;

	read_all(fd, &c, 1);
	if (c != want)
		fail("sync: expected '%c' got '%c'", want, c);
}

static void send_all(int fd, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("send");
		if (r == 0)
			fail("send returned 0");
		p += r;
		n -= (size_t)r;
	}
}

/* One recv (retrying EINTR); fails on an error or an early end. */
static size_t xrecv(int fd, void *buf, size_t n, int flags, const char *how)
{
	ssize_t r;

	do
		r = recv(fd, buf, n, flags);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		fail("%s: recv of %zu: %s", how, n, strerror(errno));
	if (r == 0)
		fail("%s: end of stream, %zu bytes asked for", how, n);
	return (size_t)r;
}

/* The stream is over: recv says so, twice, and writes nothing. */
static void expect_eof(int fd)
{
	unsigned char b[16];

	memset(b, CANARY, sizeof(b));
	for (int i = 0; i < 2; i++) {
		ssize_t r = recv(fd, b, sizeof(b), 0);

		if (r < 0 && errno == EINTR) {
			i--;
			continue;
		}
		if (r != 0)
			fail("expected the end of the stream, recv returned %zd (%s)",
			     r, r < 0 ? strerror(errno) : "data");
	}
	verify_fill(b, CANARY, sizeof(b), "recv at the end wrote to the buffer");
}

static void wait_fd(int fd, short events, const char *how)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;

	do
		r = poll(&p, 1, POLL_MS);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		die("poll");
	if (r == 0)
		fail("%s: poll: not ready in %d ms", how, POLL_MS);
	if (p.revents & (POLLERR | POLLNVAL))
		fail("%s: poll: revents 0x%x", how, p.revents);
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		die("fcntl O_NONBLOCK");
}

/* A connected TCP pair over 127.0.0.1 (AF_SD under sdrun). */
static void make_pair(int *a, int *b)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int lst = socket(AF_INET, SOCK_STREAM, 0);

	if (lst < 0)
		die("socket");
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lst, (struct sockaddr *)&sin, sizeof(sin)))
		die("bind");
	if (listen(lst, 1))
		die("listen");
	if (getsockname(lst, (struct sockaddr *)&sin, &len))
		die("getsockname");
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0)
		die("socket");
	if (connect(*a, (struct sockaddr *)&sin, sizeof(sin)))
		die("connect");
	*b = accept(lst, NULL, NULL);
	if (*b < 0)
		die("accept");
	xclose(lst);
}

static pid_t xfork(void)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		nkids = 0;
		alarm(GUARD_SECONDS);
		return 0;
	}
	if (nkids < (int)ARRAY_SIZE(kids))
		kids[nkids++] = pid;
	return pid;
}

static void forget(pid_t pid)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i] == pid)
			kids[i] = 0;
}

static int xwait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	forget(pid);
	return status;
}

static void wait_ok(pid_t pid, const char *who)
{
	int status = xwait(pid);

	if (WIFSIGNALED(status))
		fail("%s (pid %d) killed by signal %d", who, (int)pid,
		     WTERMSIG(status));
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail("%s (pid %d) exited %d", who, (int)pid,
		     WEXITSTATUS(status));
}

static void wait_killed(pid_t pid, const char *who)
{
	int status = xwait(pid);

	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail("%s (pid %d): expected death by SIGKILL, status 0x%x", who,
		     (int)pid, status);
}

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545f4914f6cdd1dULL;
}

/* ---- senders and receivers shared by the scenarios ---------------------- */

typedef void (*tx_fn)(int fd, const struct sched *s);
typedef uint64_t (*rx_fn)(int fd, const struct sched *s);

/* Sender in a child, receiver here. */
static uint64_t run_procs(tx_fn tx, rx_fn rx, const struct sched *s)
{
	uint64_t bytes;
	int a, b;
	pid_t pid;

	make_pair(&a, &b);
	pid = xfork();
	if (!pid) {
		xclose(b);
		tx(a, s);
		xclose(a);
		_exit(0);
	}
	xclose(a);
	bytes = rx(b, s);
	xclose(b);
	wait_ok(pid, "sender");
	return bytes;
}

/* Each message from a buffer of its own: malloc, fill, send, free. */
static void tx_plain(int fd, const struct sched *s)
{
	for (size_t i = 0; i < s->n; i++) {
		unsigned char *buf = xmalloc(s->m[i].len);

		msg_fill(buf, &s->m[i]);
		send_all(fd, buf, s->m[i].len);
		free(buf);
	}
	xshutdown(fd);
}

static int ow_pipe[2] = { -1, -1 };

/*
 * Turn @buf into message @m right after it was sent, by method @how:
 * memset then word stores; byte-by-byte stores from the end backwards;
 * or read() from a pipe (the kernel writing into the pages).
 */
static void rewrite(unsigned char *buf, const struct msg *m, size_t how)
{
	switch (how % 3) {
	case 0:
		memset(buf, 0xA5, m->len);
		msg_fill(buf, m);
		break;
	case 1: {
		/* volatile: one store per byte, not merged into a memcpy */
		volatile unsigned char *v = buf;
		uint64_t w = 0;

		for (size_t off = m->len; off-- > 0;) {
			if (off == m->len - 1 || (off & 7) == 7)
				w = pat_word(m->key, off >> 3);
			v[off] = (unsigned char)(w >> (8 * (off & 7)));
		}
		if (m->flip != NOFLIP)
			v[m->flip] = msg_byte(m, m->flip);
		break;
	}
	default: {
		/* Under a pipe's capacity, at offsets that are not aligned. */
		const size_t chunk = 60001;
		unsigned char *tmp = xmalloc(chunk);

		if (ow_pipe[0] < 0)
			xpipe(ow_pipe);
		for (size_t off = 0; off < m->len; off += chunk) {
			size_t n = m->len - off < chunk ? m->len - off : chunk;

			msg_fill_range(tmp, m, off, n);
			write_all(ow_pipe[1], tmp, n);
			read_all(ow_pipe[0], buf + off, n);
		}
		free(tmp);
		break;
	}
	}
}

/*
 * Consecutive messages of one length go from one buffer, rewritten with
 * the next message at once after each send; the last is scribbled over
 * and freed at once.
 */
static void tx_overwrite(int fd, const struct sched *s)
{
	size_t i = 0;

	while (i < s->n) {
		size_t len = s->m[i].len;
		unsigned char *buf = xmalloc(len);

		msg_fill(buf, &s->m[i]);
		for (;;) {
			send_all(fd, buf, len);
			if (i + 1 < s->n && s->m[i + 1].len == len) {
				rewrite(buf, &s->m[i + 1], i);
				i++;
				continue;
			}
			memset(buf, 0xEE, len);
			free(buf);
			i++;
			break;
		}
	}
	xshutdown(fd);
}

/*
 * Receive each message into the start of a page-aligned buffer, asking for
 * exactly what is left of it: one buffer for all (filled with the canary
 * first) or a fresh, untouched one per message.
 */
static uint64_t rx_messages(int fd, const struct sched *s, int fresh)
{
	struct cursor c = { .s = s };
	void *base = NULL;
	unsigned char *buf = fresh ? NULL : alloc_aligned(s->max + 4 * page, &base);

	while (c.i < s->n) {
		size_t i = c.i, want = cur_left(&c), got = 0;
		void *fbase = NULL;
		unsigned char *dst = fresh ? alloc_aligned(want + page, &fbase) : buf;

		/* A fresh buffer is left untouched but for the page after it. */
		if (fresh)
			memset(dst + want, CANARY, page);
		else
			memset(dst, CANARY, want + 3 * page);
		while (c.i == i) {
			size_t r = xrecv(fd, dst + got, want - got, 0,
					 "aligned recv");

			cur_check(&c, dst + got, r, "aligned recv");
			got += r;
			if (!fresh)
				canary_after(dst, got, want + 3 * page,
					     "aligned recv");
		}
		if (fresh)
			verify_fill(dst + want, CANARY, page,
				    "aligned recv wrote past the message into a fresh buffer");
		free(fbase);
	}
	expect_eof(fd);
	free(base);
	return c.pos;
}

static uint64_t rx_reuse(int fd, const struct sched *s)
{
	return rx_messages(fd, s, 0);
}

static uint64_t rx_fresh(int fd, const struct sched *s)
{
	return rx_messages(fd, s, 1);
}

/* @count messages of each length, keys from *@key on. */
struct group {
	size_t len;
	int count;
};

static void add_groups(struct sched *s, const struct group *g, size_t n,
		       uint32_t *key)
{
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < g[i].count; k++)
			sched_add(s, g[i].len, (*key)++);
}

/* ---- the scenarios ----------------------------------------------------- */

static const struct group ow_groups[] = {
	{ 16 * KiB, 24 }, { 64 * KiB, 12 }, { 20000, 8 }, { 1 * MiB, 3 },
	{ 4 * MiB + 123, 2 }, { 100000, 6 }, { 1 * MiB + 4095, 1 },
	{ 16 * KiB + 1, 6 },
};

/* Overwrite the buffer (three ways) as soon as each send returns. */
static uint64_t sc_overwrite(void)
{
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, ow_groups, ARRAY_SIZE(ow_groups), &key);
	return run_procs(tx_overwrite, rx_reuse, &s);
}

/* The same with both ends threads of one process (one address space). */
struct targ {
	int fd;
	const struct sched *s;
	uint64_t bytes;
};

static void *tx_thread(void *p)
{
	struct targ *t = p;

	tx_overwrite(t->fd, t->s);
	return NULL;
}

static void *rx_thread(void *p)
{
	struct targ *t = p;

	t->bytes = rx_messages(t->fd, t->s, 0);
	return NULL;
}

static uint64_t sc_threads(void)
{
	static const struct group g[] = {
		{ 16 * KiB, 12 }, { 1 * MiB, 3 }, { 64 * KiB, 8 },
		{ 4 * MiB + 123, 1 }, { 20000, 4 }, { 1 * MiB + 1, 2 },
	};
	struct sched s = { 0 };
	uint32_t key = 1;
	struct targ tx, rx;
	pthread_t ttx, trx;
	int a, b, e;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	make_pair(&a, &b);
	tx = (struct targ){ .fd = a, .s = &s };
	rx = (struct targ){ .fd = b, .s = &s };
	e = pthread_create(&trx, NULL, rx_thread, &rx);
	if (!e)
		e = pthread_create(&ttx, NULL, tx_thread, &tx);
	if (e) {
		errno = e;
		die("pthread_create");
	}
	if (pthread_join(ttx, NULL) || pthread_join(trx, NULL))
		fail("pthread_join");
	xclose(a);
	xclose(b);
	return rx.bytes;
}

/* free-reuse: what the sender does with each message's buffer. */
enum {
	FR_SCRIBBLE,	/* malloc, fill, send, scribble over it, free */
	FR_MALLOC,	/* malloc, fill, send, free */
	FR_CALLOC,	/* calloc (must be zeros), fill, send, free */
	FR_REALLOC,	/* realloc the kept buffer (prefix kept), fill, send */
	FR_REALLOC_FREE,	/* the same, then free */
};

static void tx_free_reuse(int fd, const struct sched *s)
{
	unsigned char *kept = NULL;
	size_t kept_len = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct msg *m = &s->m[i];
		unsigned char *buf;

		switch (m->op) {
		case FR_CALLOC:
			buf = calloc(1, m->len);
			if (!buf)
				die("calloc");
			verify_fill(buf, 0, m->len,
				    "calloc after a send and free is not zeroed");
			break;
		case FR_REALLOC:
		case FR_REALLOC_FREE:
			buf = realloc(kept, m->len);
			if (!buf)
				die("realloc");
			if (kept) {
				struct msg prev = s->m[i - 1];

				prev.len = kept_len < m->len ? kept_len : m->len;
				msg_verify(buf, &prev,
					   "realloc after a send lost the bytes");
			}
			kept = buf;
			kept_len = m->len;
			break;
		default:
			buf = xmalloc(m->len);
			break;
		}
		msg_fill(buf, m);
		send_all(fd, buf, m->len);
		switch (m->op) {
		case FR_SCRIBBLE:
			memset(buf, 0xDD, m->len);
			free(buf);
			break;
		case FR_MALLOC:
		case FR_CALLOC:
			free(buf);
			break;
		case FR_REALLOC_FREE:
			memset(buf, 0xDE, m->len);
			free(buf);
			kept = NULL;
			kept_len = 0;
			break;
		}
	}
	free(kept);
	xshutdown(fd);
}

static uint64_t sc_free_reuse(void)
{
	static const size_t sizes[] = {
		64 * KiB, 1 * MiB, 16 * KiB, 20000, 100000, 16 * KiB + 1,
		64 * KiB, 16 * KiB,
	};
	static const size_t chain[] = {
		64 * KiB, 1 * MiB, 20000, 2 * MiB + 5, 16 * KiB + 5,
		16 * KiB, 100000, 1 * MiB + 1, 12 * KiB,
	};
	struct sched s = { 0 };
	uint32_t key = 1;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		sched_add(&s, sizes[i], key++)->op = FR_SCRIBBLE;
		sched_add(&s, sizes[i], key++)->op = FR_MALLOC;
		sched_add(&s, sizes[i], key++)->op = FR_CALLOC;
	}
	for (size_t i = 0; i < ARRAY_SIZE(chain); i++)
		sched_add(&s, chain[i], key++)->op =
			i == 4 || i + 1 == ARRAY_SIZE(chain) ? FR_REALLOC_FREE :
			FR_REALLOC;
	/* The same large size again, from calloc: zeros, not old bytes. */
	sched_add(&s, 4 * MiB + 123, key++)->op = FR_SCRIBBLE;
	sched_add(&s, 4 * MiB + 123, key++)->op = FR_CALLOC;
	return run_procs(tx_free_reuse, rx_fresh, &s);
}

/*
 * same-twice: per length, five messages from one buffer: send it, send it
 * again unchanged, invert one byte and send it, rewrite it all and send it
 * twice in one writev (both iovecs the same buffer).
 */
static void tx_same_twice(int fd, const struct sched *s)
{
	for (size_t i = 0; i + 5 <= s->n; i += 5) {
		const struct msg *m = &s->m[i];
		unsigned char *buf = xmalloc(m->len);
		struct iovec iov[2] = {
			{ buf, m->len }, { buf, m->len },
		};
		size_t left = 2 * m->len;
		struct iovec *v = iov;
		int cnt = 2;

		msg_fill(buf, m);
		send_all(fd, buf, m->len);
		send_all(fd, buf, m->len);
		buf[s->m[i + 2].flip] = msg_byte(&s->m[i + 2], s->m[i + 2].flip);
		send_all(fd, buf, m->len);
		msg_fill(buf, &s->m[i + 3]);
		while (left) {
			ssize_t r = writev(fd, v, cnt);
			size_t done;

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("writev");
			left -= (size_t)r;
			done = (size_t)r;
			while (done && done >= v->iov_len) {
				done -= v->iov_len;
				v++;
				cnt--;
			}
			if (done) {
				v->iov_base = (char *)v->iov_base + done;
				v->iov_len -= done;
			}
		}
		memset(buf, 0x99, m->len);
		free(buf);
	}
	xshutdown(fd);
}

static uint64_t sc_same_twice(void)
{
	static const size_t sizes[] = {
		16 * KiB, 64 * KiB, 1 * MiB, 20000, 1 * MiB + 1, 300000,
	};
	struct sched s = { 0 };
	uint32_t key = 1;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		size_t len = sizes[i];
		size_t flips[] = { len / 2, len - 1, 0, page + 1, 3 * page };

		sched_add(&s, len, key);
		sched_add(&s, len, key);
		sched_add(&s, len, key)->flip = flips[i % ARRAY_SIZE(flips)] % len;
		key++;
		sched_add(&s, len, key);
		sched_add(&s, len, key);
		key++;
	}
	return run_procs(tx_same_twice, rx_fresh, &s);
}

/*
 * fork-between: after each send the sender forks; the child checks that
 * its copy still holds the message, scribbles over it (or exits at once)
 * and exits; the parent scribbles at once too and checks, once the child
 * is gone, that its own bytes are its own.
 */
static void tx_fork_between(int fd, const struct sched *s)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct msg *m = &s->m[i];
		unsigned char *buf = xmalloc(m->len);
		pid_t pid;

		msg_fill(buf, m);
		send_all(fd, buf, m->len);
		pid = xfork();
		if (!pid) {
			if (i % 3 != 2) {
				msg_verify(buf, m, "child after fork: its copy");
				memset(buf, 0x77, m->len);
				if (i % 3 == 1) {
					struct msg other = *m;

					other.key += 10000;
					msg_fill(buf, &other);
					msg_verify(buf, &other, "child's writes");
				}
			}
			_exit(0);
		}
		memset(buf, 0x88, m->len);
		wait_ok(pid, "forked child of the sender");
		verify_fill(buf, 0x88, m->len,
			    "sender's bytes changed by its child's writes");
		free(buf);
	}
	xshutdown(fd);
}

static uint64_t sc_fork_between(void)
{
	static const struct group g[] = {
		{ 64 * KiB, 1 }, { 1 * MiB, 1 }, { 16 * KiB, 1 },
		{ 4 * MiB + 123, 1 }, { 100000, 1 }, { 20000, 1 },
		{ 1 * MiB + 1, 1 }, { 16 * KiB + 1, 1 }, { 64 * KiB, 1 },
	};
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	return run_procs(tx_fork_between, rx_reuse, &s);
}

/*
 * fork-recv: the receiver gets a message into a fresh aligned buffer; the
 * sender then writes over its own buffer, and the receiver's copy must not
 * change; the receiver forks, child and parent each write over the buffer
 * in turn (sequenced by pipes) and each checks that its copy is its own;
 * the sender checks that the receiver's writes did not reach it.
 */
static uint64_t sc_fork_recv(void)
{
	static const struct group g[] = {
		{ 64 * KiB, 1 }, { 1 * MiB, 1 }, { 4 * MiB + 123, 1 },
		{ 16 * KiB, 1 }, { 20000, 1 }, { 1 * MiB + 4095, 1 },
	};
	struct sched s = { 0 };
	struct cursor c = { .s = &s };
	uint32_t key = 1;
	int a, b, r2s[2], s2r[2];
	pid_t pid;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	make_pair(&a, &b);
	xpipe(r2s);
	xpipe(s2r);
	pid = xfork();
	if (!pid) {
		xclose(b);
		xclose(r2s[1]);
		xclose(s2r[0]);
		for (size_t i = 0; i < s.n; i++) {
			unsigned char *buf = xmalloc(s.m[i].len);

			msg_fill(buf, &s.m[i]);
			send_all(a, buf, s.m[i].len);
			sync_wait(r2s[0], 'R');
			memset(buf, 0xC3, s.m[i].len);
			sync_send(s2r[1], 'W');
			sync_wait(r2s[0], 'C');
			verify_fill(buf, 0xC3, s.m[i].len,
				    "sender's bytes changed by the receiver's writes");
			free(buf);
		}
		xshutdown(a);
		xclose(a);
		_exit(0);
	}
	xclose(a);
	xclose(r2s[0]);
	xclose(s2r[1]);
	for (size_t i = 0; i < s.n; i++) {
		const struct msg *m = &s.m[i];
		void *base;
		unsigned char *buf = alloc_aligned(m->len, &base);
		size_t got = 0;
		int p2g[2], g2p[2];
		pid_t gpid;

		while (got < m->len) {
			size_t r = xrecv(b, buf + got, m->len - got, 0, "recv");

			cur_check(&c, buf + got, r, "recv");
			got += r;
		}
		sync_send(r2s[1], 'R');
		sync_wait(s2r[0], 'W');
		msg_verify(buf, m, "receiver's bytes after the sender wrote over its buffer");
		xpipe(p2g);
		xpipe(g2p);
		gpid = xfork();
		if (!gpid) {
			sync_wait(p2g[0], '1');
			msg_verify(buf, m, "receiver's child: its copy");
			memset(buf, 0x11, m->len);
			sync_send(g2p[1], '2');
			sync_wait(p2g[0], '3');
			verify_fill(buf, 0x11, m->len,
				    "receiver's child: bytes changed by the parent's writes");
			_exit(0);
		}
		sync_send(p2g[1], '1');
		sync_wait(g2p[0], '2');
		msg_verify(buf, m, "receiver: bytes changed by its child's writes");
		memset(buf, 0x22, m->len);
		sync_send(p2g[1], '3');
		wait_ok(gpid, "receiver's child");
		verify_fill(buf, 0x22, m->len, "receiver's own writes");
		xclose(p2g[0]);
		xclose(p2g[1]);
		xclose(g2p[0]);
		xclose(g2p[1]);
		sync_send(r2s[1], 'C');
		free(base);
	}
	expect_eof(b);
	xclose(b);
	xclose(r2s[1]);
	xclose(s2r[0]);
	wait_ok(pid, "sender");
	return c.pos;
}

/*
 * recv-aligned: page-aligned destinations, rotating: a fresh buffer
 * (untouched pages); a reused one full of canary, asking for what is
 * left of the message; the same asking for 5000 more (it may take part
 * of the next); a page into the buffer.  Nothing past what each recv
 * returned may change.
 */
static uint64_t rx_aligned(int fd, const struct sched *s)
{
	struct cursor c = { .s = s };
	void *base;
	size_t room = s->max + 16 * page;
	unsigned char *area = alloc_aligned(room, &base);

	while (c.i < s->n) {
		size_t i = c.i, want = cur_left(&c), got = 0;
		int how = (int)(i % 4);
		void *fbase = NULL;
		unsigned char *dst;

		if (how == 0) {
			dst = alloc_aligned(want, &fbase);
		} else {
			dst = area + (how == 3 ? page : 0);
			if (how == 3)
				dst[-1] = CANARY;
			memset(dst, CANARY, want + 5000 + page);
		}
		while (c.i == i) {
			size_t req = want - got + (how == 2 ? 5000 : 0), r;

			r = xrecv(fd, dst + got, req, 0, "aligned recv");
			cur_check(&c, dst + got, r, "aligned recv");
			if (how)
				canary_after(dst + got, r, req + page,
					     "aligned recv");
			if (how == 3 && dst[-1] != CANARY)
				fail("aligned recv wrote before its buffer");
			got += r;
		}
		free(fbase);
	}
	/* Past the end: a large aligned recv gets nothing and writes nothing. */
	memset(area, CANARY, 2 * page);
	expect_eof(fd);
	verify_fill(area, CANARY, 2 * page, "recv at the end of the stream");
	free(base);
	return c.pos;
}

static const struct group recv_groups[] = {
	{ 16 * KiB, 1 }, { 64 * KiB, 1 }, { 1 * MiB, 1 }, { 4 * MiB + 123, 1 },
	{ 20000, 1 }, { 100000, 1 }, { 1 * MiB + 4095, 1 }, { 16 * KiB + 1, 1 },
	{ 12 * KiB, 1 }, { 300000, 1 }, { 64 * KiB, 1 }, { 1 * MiB, 1 },
};

static uint64_t sc_recv_aligned(void)
{
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, recv_groups, ARRAY_SIZE(recv_groups), &key);
	return run_procs(tx_plain, rx_aligned, &s);
}

#define STATIC_ROOM (4 * MiB + 64 * KiB)
static unsigned char static_buf[STATIC_ROOM] __attribute__((aligned(4096)));

/*
 * recv-unaligned: destinations no page can be remapped into, rotating:
 * heap + 1, heap + 4095, the stack (64 KiB at a time), a static buffer
 * (page-aligned, not pool memory), anonymous mmap (the same).
 */
static uint64_t rx_unaligned(int fd, const struct sched *s)
{
	unsigned char stack[64 * KiB + 2 * 4096];
	struct cursor c = { .s = s };
	size_t room = s->max + 16 * page;
	unsigned char *heap = xmalloc(room);
	unsigned char *map;

	if (s->max + page > STATIC_ROOM)
		fail("static buffer too small");
	map = mmap(NULL, room, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		die("mmap");
	while (c.i < s->n) {
		size_t i = c.i, want = cur_left(&c), got = 0, limit = SIZE_MAX;
		unsigned char *dst;

		switch (i % 5) {
		case 0:
			dst = heap + 1;
			break;
		case 1:
			dst = heap + 4095;
			break;
		case 2:
			dst = stack + 1;
			limit = 64 * KiB;
			break;
		case 3:
			dst = static_buf;
			break;
		default:
			dst = map;
			break;
		}
		if (dst != static_buf && dst != map)
			dst[-1] = CANARY;
		if (limit == SIZE_MAX)
			memset(dst, CANARY, want + page);
		while (c.i == i) {
			size_t req = want - got, r, end;
			unsigned char *at = limit == SIZE_MAX ? dst + got : dst;

			if (limit != SIZE_MAX) {
				if (req > limit)
					req = limit;
				memset(at, CANARY, req);
			}
			end = limit == SIZE_MAX ? req + page : req;
			r = xrecv(fd, at, req, 0, "unaligned recv");
			cur_check(&c, at, r, "unaligned recv");
			canary_after(at, r, end, "unaligned recv");
			got += r;
		}
		if (dst != static_buf && dst != map && dst[-1] != CANARY)
			fail("unaligned recv wrote before its buffer");
	}
	expect_eof(fd);
	if (munmap(map, room))
		die("munmap");
	free(heap);
	return c.pos;
}

static uint64_t sc_recv_unaligned(void)
{
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, recv_groups, ARRAY_SIZE(recv_groups), &key);
	return run_procs(tx_plain, rx_unaligned, &s);
}

/*
 * partial: receive sizes that ignore message boundaries (1, 4095, 4097,
 * 65536, random...), sometimes MSG_PEEK first, sometimes MSG_WAITALL
 * (which must return all asked for, or all that is left), sometimes at an
 * odd address.
 */
static uint64_t rx_partial(int fd, const struct sched *s)
{
	static const size_t sizes[] = {
		1, 4095, 4097, 65536, 0, 16384, 1, 1 * MiB, 7, 0, 4096,
		12289, 0, 2 * 4096,
	};
	struct cursor c = { .s = s };
	uint64_t rnd = 0x5eed;
	void *base;
	unsigned char *area = alloc_aligned(1 * MiB + 8 * page, &base);

	for (size_t k = 0; c.pos < s->total; k++) {
		size_t n = sizes[k % ARRAY_SIZE(sizes)], r;
		unsigned char *dst = area + (k % 3 == 2 ? 1 : 0);
		int mode = (int)(k % 4);

		if (!n)
			n = 1 + (size_t)(next_rand(&rnd) % 300000);
		if (mode & 1) {
			memset(dst, CANARY, n + page);
			r = xrecv(fd, dst, n, MSG_PEEK, "peek");
			cur_peek(&c, dst, r, "peek");
			canary_after(dst, r, n + page, "peek");
		}
		memset(dst, CANARY, n + page);
		r = xrecv(fd, dst, n, mode & 2 ? MSG_WAITALL : 0,
			  mode & 2 ? "recv MSG_WAITALL" : "recv");
		if (mode & 2) {
			uint64_t left = s->total - c.pos;

			if (r != (left < n ? left : n))
				fail("recv MSG_WAITALL of %zu returned %zu (%llu left)",
				     n, r, (unsigned long long)left);
		}
		cur_check(&c, dst, r, "recv");
		canary_after(dst, r, n + page, "recv");
	}
	memset(area, CANARY, page);
	if (recv(fd, area, page, MSG_PEEK) != 0)
		fail("MSG_PEEK at the end of the stream did not return 0");
	expect_eof(fd);
	verify_fill(area, CANARY, page, "recv at the end of the stream");
	free(base);
	return c.pos;
}

static uint64_t sc_partial(void)
{
	static const struct group g[] = {
		{ 1 * MiB, 1 }, { 64 * KiB, 1 }, { 4 * MiB + 123, 1 },
		{ 16 * KiB, 1 }, { 300000, 1 }, { 1 * MiB + 4095, 1 },
		{ 16 * KiB + 1, 1 }, { 64 * KiB, 1 }, { 1 * MiB, 1 },
	};
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	return run_procs(tx_plain, rx_partial, &s);
}

/*
 * mixed: small and large messages interleaved, each length from a buffer
 * of its own, scribbled over after each send and rewritten for the next
 * message of that length.  The receiver takes one message at a time (even
 * rounds) or 16 KiB at a time.
 */
static const size_t mixed_sizes[] = {
	1, 100, 16 * KiB - 1, 16 * KiB, 16 * KiB + 1, 1 * MiB, 1, 16 * KiB,
	100, 1 * MiB + 1, 16 * KiB + 1, 16 * KiB - 1, 64 * KiB, 2,
};

static void tx_mixed(int fd, const struct sched *s)
{
	unsigned char *bufs[ARRAY_SIZE(mixed_sizes)] = { 0 };

	for (size_t i = 0; i < s->n; i++) {
		const struct msg *m = &s->m[i];
		size_t b = (size_t)m->buf;

		if (!bufs[b])
			bufs[b] = xmalloc(m->len);
		msg_fill(bufs[b], m);
		send_all(fd, bufs[b], m->len);
		memset(bufs[b], 0xEE, m->len);
	}
	for (size_t b = 0; b < ARRAY_SIZE(bufs); b++)
		free(bufs[b]);
	xshutdown(fd);
}

static uint64_t rx_mixed(int fd, const struct sched *s)
{
	struct cursor c = { .s = s };
	void *base;
	unsigned char *area = alloc_aligned(s->max + 4 * page, &base);

	while (c.pos < s->total) {
		size_t i = c.i, want = cur_left(&c), got = 0, r;

		if ((i / ARRAY_SIZE(mixed_sizes)) % 2) {
			memset(area, CANARY, 16 * KiB + page);
			r = xrecv(fd, area, 16 * KiB, 0, "recv");
			cur_check(&c, area, r, "recv");
			canary_after(area, r, 16 * KiB + page, "recv");
			continue;
		}
		memset(area, CANARY, want + page);
		while (c.i == i) {
			r = xrecv(fd, area + got, want - got, 0, "recv");
			cur_check(&c, area + got, r, "recv");
			canary_after(area + got, r, want - got + page, "recv");
			got += r;
		}
	}
	expect_eof(fd);
	free(base);
	return c.pos;
}

static uint64_t sc_mixed(void)
{
	struct sched s = { 0 };
	uint32_t key = 1;

	for (int round = 0; round < 4; round++)
		for (size_t i = 0; i < ARRAY_SIZE(mixed_sizes); i++)
			sched_add(&s, mixed_sizes[i], key++)->buf = (int)i;
	return run_procs(tx_mixed, rx_mixed, &s);
}

/*
 * fionread: large messages (zero-copy records under sdrun, each standing
 * for more stream bytes than it takes in the ring) between small ones,
 * all sent before the end of the stream: once that is seen, FIONREAD
 * counts every byte, then they are received and checked.
 */
static uint64_t rx_fionread(int fd, const struct sched *s)
{
	int n = -1;

	wait_fd(fd, POLLRDHUP, "fionread");
	if (ioctl(fd, FIONREAD, &n))
		die("FIONREAD");
	if ((uint64_t)n != s->total)
		fail("FIONREAD says %d bytes, %llu were sent", n,
		     (unsigned long long)s->total);
	return rx_reuse(fd, s);
}

static uint64_t sc_fionread(void)
{
	static const size_t sizes[] = { 20 * KiB, 100, 20 * KiB, 100, 7 };
	struct sched s = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		sched_add(&s, sizes[i], (uint32_t)i + 1);
	return run_procs(tx_plain, rx_fionread, &s);
}

/*
 * iov: writev and sendmsg with several large iovecs (one buffer twice in
 * one call, too), every buffer scribbled over as soon as the call is
 * done; readv and recvmsg into iovecs aligned and not.
 */
static const size_t iov_bufs[] = {
	16 * KiB, 100, 1 * MiB, 64 * KiB + 1, 4 * MiB + 123, 20000, 1,
	16 * KiB + 1,
};

static const signed char iov_calls[][8] = {
	/* buffer numbers; -1 ends */
	{ 0, 1, 2, 3, -1 },
	{ 2, 6, 4, 5, 0, -1 },
	{ 0, 0, 3, -1 },
	{ 7, 2, 1, 5, -1 },
	{ 0, 7, 0, 7, 0, 7, 3, -1 },
	{ 5, 2, -1 },
};

static void tx_iov(int fd, const struct sched *s)
{
	unsigned char *bufs[ARRAY_SIZE(iov_bufs)];
	struct iovec iov[8];
	size_t i = 0;

	for (size_t b = 0; b < ARRAY_SIZE(iov_bufs); b++)
		bufs[b] = xmalloc(iov_bufs[b]);
	while (i < s->n) {
		int call = s->m[i].op, cnt = 0;
		size_t left = 0;
		struct iovec *v = iov;

		for (; i < s->n && s->m[i].op == call; i++) {
			const struct msg *m = &s->m[i];

			msg_fill(bufs[m->buf], m);
			iov[cnt].iov_base = bufs[m->buf];
			iov[cnt++].iov_len = m->len;
			left += m->len;
		}
		while (left) {
			struct msghdr mh = { .msg_iov = v,
					     .msg_iovlen = (size_t)cnt };
			ssize_t r = call % 2 ? sendmsg(fd, &mh, MSG_NOSIGNAL) :
					       writev(fd, v, cnt);
			size_t done;

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die(call % 2 ? "sendmsg" : "writev");
			left -= (size_t)r;
			done = (size_t)r;
			while (done && done >= v->iov_len) {
				done -= v->iov_len;
				v++;
				cnt--;
			}
			if (done) {
				v->iov_base = (char *)v->iov_base + done;
				v->iov_len -= done;
			}
		}
		for (size_t b = 0; b < ARRAY_SIZE(iov_bufs); b++)
			memset(bufs[b], 0xE1, iov_bufs[b]);
	}
	for (size_t b = 0; b < ARRAY_SIZE(iov_bufs); b++)
		free(bufs[b]);
	xshutdown(fd);
}

static uint64_t rx_iov(int fd, const struct sched *s)
{
	unsigned char stack[4096 + 64];
	struct cursor c = { .s = s };
	void *b1, *b2, *b3, *b4;
	unsigned char *a16 = alloc_aligned(16 * KiB + 2 * page, &b1);
	unsigned char *a1m = alloc_aligned(1 * MiB + 2 * page, &b2);
	unsigned char *a64 = alloc_aligned(64 * KiB + 2 * page, &b3);
	unsigned char *a4m = alloc_aligned(4 * MiB + 123 + 2 * page, &b4);
	unsigned char *heap = xmalloc(65537 + 2 * page);
	struct iovec lay[2][5] = {
		{ { a16, 16 * KiB }, { heap + 1, 1000 }, { a1m, 1 * MiB },
		  { stack + 3, 4096 }, { a64, 64 * KiB } },
		{ { a1m, 1 * MiB }, { heap + 1, 65537 }, { a4m, 4 * MiB + 123 },
		  { a64 + 1, 100 }, { a16, 16 * KiB } },
	};

	/* All canary; after each call, the bytes that came are reset. */
	for (int l = 0; l < 2; l++)
		for (int j = 0; j < 5; j++)
			memset(lay[l][j].iov_base, CANARY, lay[l][j].iov_len);
	heap[0] = CANARY;
	for (int k = 0; c.pos < s->total; k++) {
		struct iovec *iov = lay[k % 2];
		size_t r, left;
		ssize_t n;
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 5 };

		do
			n = k % 2 ? recvmsg(fd, &mh, 0) : readv(fd, iov, 5);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			die(k % 2 ? "recvmsg" : "readv");
		if (n == 0)
			fail("end of stream after %llu bytes",
			     (unsigned long long)c.pos);
		if (k % 2 && mh.msg_flags)
			fail("recvmsg: msg_flags 0x%x", mh.msg_flags);
		r = (size_t)n;
		left = r;
		for (int j = 0; j < 5; j++) {
			size_t t = left < iov[j].iov_len ? left : iov[j].iov_len;

			cur_check(&c, iov[j].iov_base, t,
				  k % 2 ? "recvmsg" : "readv");
			canary_after(iov[j].iov_base, t, iov[j].iov_len,
				     k % 2 ? "recvmsg" : "readv");
			memset(iov[j].iov_base, CANARY, t);
			left -= t;
		}
		if (heap[0] != CANARY)
			fail("readv/recvmsg wrote before an iovec");
	}
	expect_eof(fd);
	free(b1);
	free(b2);
	free(b3);
	free(b4);
	free(heap);
	return c.pos;
}

static uint64_t sc_iov(void)
{
	struct sched s = { 0 };
	uint32_t key = 1;

	for (size_t call = 0; call < ARRAY_SIZE(iov_calls); call++) {
		const signed char *b = iov_calls[call];
		uint32_t first = key;

		for (int j = 0; b[j] >= 0; j++) {
			struct msg *m;
			uint32_t k = key++;

			/* One buffer twice in a call: the same bytes twice. */
			for (int e = 0; e < j; e++)
				if (b[e] == b[j]) {
					k = first + (uint32_t)e;
					break;
				}
			m = sched_add(&s, iov_bufs[(size_t)b[j]], k);
			m->op = (int)call;
			m->buf = b[j];
		}
	}
	return run_procs(tx_iov, rx_iov, &s);
}

/*
 * receiver-exits, receiver-killed: the receiver takes a 1 MiB message,
 * leaves a second one unread and exits (or is killed) holding both; the
 * sender then writes over and frees its buffers, and its sends must fail
 * with EPIPE or ECONNRESET, soon, not hang.
 */
static uint64_t receiver_gone(int killed)
{
	struct sched s = { 0 };
	int a, b, up[2], down[2], tries;
	uint64_t bytes;
	unsigned char *b0, *b1, *more;
	pid_t pid;

	sched_add(&s, 1 * MiB, 1);
	sched_add(&s, 16 * KiB, 2);
	sched_add(&s, 1 * MiB, 3);	/* sent after the receiver is gone */
	make_pair(&a, &b);
	xpipe(up);
	xpipe(down);
	pid = xfork();
	if (!pid) {
		struct cursor c = { .s = &s };
		void *base;
		unsigned char *buf = alloc_aligned(1 * MiB, &base);
		size_t got = 0;

		xclose(a);
		xclose(up[0]);
		xclose(down[1]);
		while (c.i == 0) {
			size_t r = xrecv(b, buf + got, 1 * MiB - got, 0, "recv");

			cur_check(&c, buf + got, r, "recv");
			got += r;
		}
		sync_wait(down[0], 'G');
		write_all(up[1], &c.pos, sizeof(c.pos));
		if (killed)
			for (;;)
				pause();
		_exit(0);
	}
	xclose(b);
	xclose(up[1]);
	xclose(down[0]);
	b0 = xmalloc(s.m[0].len);
	b1 = xmalloc(s.m[1].len);
	msg_fill(b0, &s.m[0]);
	send_all(a, b0, s.m[0].len);
	msg_fill(b1, &s.m[1]);
	send_all(a, b1, s.m[1].len);
	sync_send(down[1], 'G');
	read_all(up[0], &bytes, sizeof(bytes));
	if (killed) {
		if (kill(pid, SIGKILL))
			die("kill");
		wait_killed(pid, "receiver");
	} else {
		wait_ok(pid, "receiver");
	}
	memset(b0, 0x31, s.m[0].len);
	memset(b1, 0x32, s.m[1].len);
	free(b0);
	free(b1);
	more = xmalloc(s.m[2].len);
	msg_fill(more, &s.m[2]);
	for (tries = 0;; tries++) {
		ssize_t r = send(a, more, s.m[2].len, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EPIPE || errno == ECONNRESET))
			break;
		if (r < 0)
			die("send after the receiver went away");
		if (tries >= 50)
			fail("%d sends succeeded after the receiver went away",
			     tries + 1);
		usleep(2000);
	}
	memset(more, 0x33, s.m[2].len);
	free(more);
	xclose(a);
	xclose(up[0]);
	xclose(down[1]);
	return bytes;
}

static uint64_t sc_receiver_exits(void)
{
	return receiver_gone(0);
}

static uint64_t sc_receiver_killed(void)
{
	return receiver_gone(1);
}

/*
 * sender-exits, sender-killed: the sender sends large messages and exits
 * at once (no close, no free), or is killed as soon as its sends
 * returned; the receiver, which waits for that before reading when it
 * can, gets every byte, then the end of the stream.
 */
struct gone {
	int killed;
	int pipe;	/* read end: 'S' (sent, to be killed) or EOF (exited) */
	int pending;	/* that is still to come */
	pid_t pid;
};

static void sender_done(struct gone *g)
{
	char ch;
	ssize_t n;

	do
		n = read(g->pipe, &ch, 1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("read");
	if (g->killed && (n != 1 || ch != 'S'))
		fail("sender died before it was killed");
	if (!g->killed && n != 0)
		fail("sender wrote to the pipe");
	if (g->killed) {
		if (kill(g->pid, SIGKILL))
			die("kill");
		wait_killed(g->pid, "sender");
	}
	g->pending = 0;
}

static uint64_t sender_gone(int killed)
{
	static const struct group gr[] = {
		{ 1 * MiB, 1 }, { 4 * MiB + 123, 1 }, { 64 * KiB, 1 },
		{ 16 * KiB, 1 }, { 300000, 1 }, { 1 * MiB + 1, 1 },
		{ 16 * KiB + 1, 1 },
	};
	struct sched s = { 0 };
	struct cursor c = { .s = &s };
	struct gone g = { .killed = killed, .pending = 1 };
	uint32_t key = 1;
	int a, b, done[2];
	struct pollfd p1;
	void *base;
	unsigned char *buf;
	int r;

	add_groups(&s, gr, ARRAY_SIZE(gr), &key);
	make_pair(&a, &b);
	xpipe(done);
	g.pid = xfork();
	if (!g.pid) {
		xclose(b);
		xclose(done[0]);
		for (size_t i = 0; i < s.n; i++) {
			unsigned char *p = xmalloc(s.m[i].len);

			msg_fill(p, &s.m[i]);
			send_all(a, p, s.m[i].len);
			if (i % 2)
				memset(p, 0x44, s.m[i].len);
		}
		if (killed) {
			sync_send(done[1], 'S');
			for (;;)
				pause();
		}
		_exit(0);	/* no close, no shutdown, no free */
	}
	xclose(a);
	xclose(done[1]);
	g.pipe = done[0];
	buf = alloc_aligned(s.max, &base);
	/* Over TCP the sender waits for us to read: do not wait long. */
	p1 = (struct pollfd){ .fd = done[0], .events = POLLIN };
	do
		r = poll(&p1, 1, 200);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		die("poll");
	if (r > 0)
		sender_done(&g);
	while (c.pos < s.total) {
		struct pollfd p[2] = {
			{ .fd = b, .events = POLLIN },
			{ .fd = g.pending ? done[0] : -1, .events = POLLIN },
		};

		r = poll(p, 2, POLL_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("poll");
		if (r == 0)
			fail("nothing to read for %d ms, %llu of %llu bytes in",
			     POLL_MS, (unsigned long long)c.pos,
			     (unsigned long long)s.total);
		if (p[1].revents)
			sender_done(&g);
		if (p[0].revents) {
			size_t n = xrecv(b, buf, cur_left(&c), 0, "recv");

			cur_check(&c, buf, n, "recv");
		}
	}
	if (g.pending) {
		wait_fd(done[0], POLLIN, "sender's pipe");
		sender_done(&g);
	}
	expect_eof(b);
	if (!killed)
		wait_ok(g.pid, "sender");
	xclose(b);
	xclose(done[0]);
	free(base);
	return c.pos;
}

static uint64_t sc_sender_exits(void)
{
	return sender_gone(0);
}

static uint64_t sc_sender_killed(void)
{
	return sender_gone(1);
}

/*
 * nonblocking: sends with MSG_DONTWAIT, then on an O_NONBLOCK socket,
 * waiting in poll on EAGAIN; after a partial send the part taken is
 * scribbled over before the rest goes.  The receiver is non-blocking too.
 */
static void tx_nonblocking(int fd, const struct sched *s)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct msg *m = &s->m[i];
		unsigned char *buf = xmalloc(m->len);
		int flags = MSG_NOSIGNAL;
		size_t off = 0;

		if (i == s->n / 2)
			set_nonblock(fd);
		if (i < s->n / 2)
			flags |= MSG_DONTWAIT;
		msg_fill(buf, m);
		while (off < m->len) {
			ssize_t r = send(fd, buf + off, m->len - off, flags);

			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				wait_fd(fd, POLLOUT, "send");
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("send");
			/* What was taken is the sender's to change. */
			memset(buf + off, 0xEE, (size_t)r);
			off += (size_t)r;
		}
		free(buf);
	}
	xshutdown(fd);
}

static uint64_t rx_nonblocking(int fd, const struct sched *s)
{
	struct cursor c = { .s = s };
	void *base;
	unsigned char *buf = alloc_aligned(s->max, &base);

	set_nonblock(fd);
	while (c.pos < s->total) {
		ssize_t r = recv(fd, buf, cur_left(&c), 0);

		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			wait_fd(fd, POLLIN, "recv");
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("recv");
		if (r == 0)
			fail("end of stream after %llu bytes",
			     (unsigned long long)c.pos);
		cur_check(&c, buf, (size_t)r, "non-blocking recv");
	}
	for (;;) {
		char ch;
		ssize_t r = recv(fd, &ch, 1, 0);

		if (r == 0)
			break;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			wait_fd(fd, POLLIN, "recv at the end");
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		fail("expected the end of the stream, recv returned %zd", r);
	}
	free(base);
	return c.pos;
}

static uint64_t sc_nonblocking(void)
{
	static const struct group g[] = {
		{ 1 * MiB, 1 }, { 4 * MiB + 123, 1 }, { 64 * KiB, 1 },
		{ 16 * KiB + 1, 1 }, { 16 * KiB, 1 }, { 300000, 1 },
		{ 1 * MiB, 1 }, { 20000, 1 }, { 4 * MiB, 1 }, { 64 * KiB, 2 },
	};
	struct sched s = { 0 };
	uint32_t key = 1;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	return run_procs(tx_nonblocking, rx_nonblocking, &s);
}

/*
 * relay: A sends to B with overwrites; B receives each message into one
 * aligned buffer, sends it on to C at once and receives the next into the
 * same buffer; C checks.
 */
static uint64_t sc_relay(void)
{
	static const struct group g[] = {
		{ 1 * MiB, 2 }, { 64 * KiB, 3 }, { 4 * MiB + 123, 1 },
		{ 16 * KiB, 4 }, { 20000, 2 }, { 1 * MiB + 1, 2 },
	};
	struct sched s = { 0 };
	uint32_t key = 1;
	int a1, b1, a2, b2;
	uint64_t bytes;
	pid_t tx, mid;

	add_groups(&s, g, ARRAY_SIZE(g), &key);
	make_pair(&a1, &b1);
	make_pair(&a2, &b2);
	tx = xfork();
	if (!tx) {
		xclose(b1);
		xclose(a2);
		xclose(b2);
		tx_overwrite(a1, &s);
		xclose(a1);
		_exit(0);
	}
	xclose(a1);
	mid = xfork();
	if (!mid) {
		struct cursor c = { .s = &s };
		void *base;
		unsigned char *buf = alloc_aligned(s.max, &base);

		xclose(b2);
		while (c.i < s.n) {
			size_t i = c.i, want = cur_left(&c), got = 0;

			while (c.i == i) {
				size_t r = xrecv(b1, buf + got, want - got, 0,
						 "relay recv");

				cur_check(&c, buf + got, r, "relay recv");
				got += r;
			}
			send_all(a2, buf, got);
		}
		expect_eof(b1);
		xshutdown(a2);
		free(base);
		_exit(0);
	}
	xclose(b1);
	xclose(a2);
	bytes = rx_fresh(b2, &s);
	xclose(b2);
	wait_ok(tx, "sender");
	wait_ok(mid, "relay");
	return bytes;
}

/* ---- main -------------------------------------------------------------- */

static const struct {
	const char *name;
	uint64_t (*run)(void);
} scenarios[] = {
	{ "overwrite", sc_overwrite },
	{ "free-reuse", sc_free_reuse },
	{ "same-twice", sc_same_twice },
	{ "fork-between", sc_fork_between },
	{ "fork-recv", sc_fork_recv },
	{ "recv-aligned", sc_recv_aligned },
	{ "recv-unaligned", sc_recv_unaligned },
	{ "partial", sc_partial },
	{ "mixed", sc_mixed },
	{ "fionread", sc_fionread },
	{ "iov", sc_iov },
	{ "receiver-exits", sc_receiver_exits },
	{ "receiver-killed", sc_receiver_killed },
	{ "sender-exits", sc_sender_exits },
	{ "sender-killed", sc_sender_killed },
	{ "nonblocking", sc_nonblocking },
	{ "threads", sc_threads },
	{ "relay", sc_relay },
};

static void run_one(size_t i)
{
	uint64_t bytes;

	scenario = scenarios[i].name;
	alarm(GUARD_SECONDS);
	bytes = scenarios[i].run();
	alarm(0);
	printf("ok %s %llu\n", scenarios[i].name, (unsigned long long)bytes);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	long ps = sysconf(_SC_PAGESIZE);

	if (ps <= 0)
		die("sysconf");
	page = (size_t)ps;
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || sigaction(SIGALRM, &sa, NULL))
		die("signal");
	if (argc < 2) {
		fprintf(stderr, "usage: sd_zcopy --list | all | SCENARIO...\n");
		return 2;
	}
	if (!strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < ARRAY_SIZE(scenarios); i++)
			printf("%s\n", scenarios[i].name);
		return 0;
	}
	for (int a = 1; a < argc; a++) {
		size_t i;

		if (!strcmp(argv[a], "all")) {
			for (i = 0; i < ARRAY_SIZE(scenarios); i++)
				run_one(i);
			continue;
		}
		for (i = 0; i < ARRAY_SIZE(scenarios); i++)
			if (!strcmp(argv[a], scenarios[i].name))
				break;
		if (i == ARRAY_SIZE(scenarios)) {
			fprintf(stderr, "sd_zcopy: no scenario %s (--list)\n",
				argv[a]);
			return 2;
		}
		run_one(i);
	}
	return 0;
}
