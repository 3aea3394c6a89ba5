// SPDX-License-Identifier: GPL-2.0
/*
 * sd_fuzz: random sequences of AF_SD system calls from several threads in
 * several processes, on a shared table of sockets, for a bounded time.
 *
 *   sd_fuzz SEED SECONDS [PROCS [THREADS]]
 *
 * Each thread draws its calls from its own generator, seeded from SEED and
 * its process and thread numbers, so a SEED replays the same calls (their
 * interleaving is the scheduler's).  The calls: socket, close, dup, bind,
 * listen, connect, accept4 (on random slots of the table, with random,
 * often invalid, addresses and lengths), setsockopt and getsockopt (random
 * levels, names, lengths and bytes), ioctl (the family's and random
 * ones, with random or invalid arguments), mmap of random offsets and
 * lengths and random bytes written into whatever got mapped (ring
 * headers, positions, tokens, data), send and recv of random sizes and
 * flags, shutdown, poll, fcntl.  Processes fork with the table open and
 * go on sharing it.
 *
 * Blocking is bounded: every socket gets 20 ms send and receive timeouts
 * and most calls are non-blocking; a watchdog kills the whole process
 * group when the time is up, so a call that hangs shows as the run
 * overrunning, and the kernel's own hung-task and lockup detectors see it.
 * The result is what the kernel log shows: tests/vm/run fails the run on
 * any splat.  Exits 0 after printing the number of calls made.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sd.h>
#include <linux/sockios.h>

#define SLOTS 32
#define PORT_BASE 41000
#define PORTS 8

static int slots[SLOTS];
static volatile int stop;
static unsigned long calls_made;

struct rng {
	uint64_t s;
};

static uint64_t next(struct rng *r)
{
	/* splitmix64 */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static unsigned int below(struct rng *r, unsigned int n)
{
	return (unsigned int)(next(r) % n);
}

static void fill(struct rng *r, void *buf, size_t len)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)next(r);
}

static int slot_fd(struct rng *r)
{
	return __atomic_load_n(&slots[below(r, SLOTS)], __ATOMIC_RELAXED);
}

static void put_fd(struct rng *r, int fd)
{
	int old = __atomic_exchange_n(&slots[below(r, SLOTS)], fd, __ATOMIC_RELAXED);

	if (old >= 0)
		close(old);
}

static void timeouts(int fd)
{
	struct timeval tv = { 0, 20000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A random address: mostly loopback on the few fuzzed ports, sometimes
 * IPv6, a wildcard, another family, or garbage; a random length. */
static socklen_t addr(struct rng *r, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	switch (below(r, 8)) {
	case 0:
		fill(r, ss, sizeof(*ss));
		return (socklen_t)below(r, sizeof(*ss) + 8);
	case 1: {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)(PORT_BASE + below(r, PORTS)));
		a->sin6_addr = in6addr_loopback;
		return below(r, 4) ? sizeof(*a) : (socklen_t)below(r, sizeof(*a));
	}
	default: {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = below(r, 16) ? AF_INET : (sa_family_t)below(r, 64);
		a->sin_port = below(r, 8) ? htons((uint16_t)(PORT_BASE + below(r, PORTS))) : 0;
		a->sin_addr.s_addr = below(r, 6) ? htonl(INADDR_LOOPBACK) :
				     below(r, 2) ? 0 : (in_addr_t)next(r);
		return below(r, 8) ? sizeof(*a) : (socklen_t)below(r, 32);
	}
	}
}

static void do_socket(struct rng *r)
{
	static const int types[] = { SOCK_STREAM, SOCK_STREAM, SOCK_STREAM, SOCK_DGRAM,
				     SOCK_SEQPACKET, 0 };
	int type = types[below(r, 6)] | SOCK_NONBLOCK | (below(r, 2) ? SOCK_CLOEXEC : 0);
	/* Redirected sockets too (net.sd.redirect=1 in test_fuzz.py). */
	static const int protos[] = { 0, 0, 0, 0, SD_PROTO_INET, SD_PROTO_INET6,
				      SD_PROTO_INET, -1 };
	int proto = protos[below(r, 8)];
	int fd;

	if (proto < 0)
		proto = (int)below(r, 300);
	fd = socket(AF_SD, type, proto);

	if (fd < 0)
		return;
	timeouts(fd);
	if (below(r, 3) == 0) {
		int one = 1;

		setsockopt(fd, SOL_SD, SD_REUSEPORT, &one, sizeof(one));
	}
	put_fd(r, fd);
}

static void do_pair(struct rng *r)
{
	/* A listener and a connection to it, so data calls have peers. */
	struct sockaddr_in a = { .sin_family = AF_INET };
	/* Native, or redirected on either end (a TCP fallback, or not). */
	int lp = below(r, 3) ? 0 : SD_PROTO_INET, cp = below(r, 3) ? 0 : SD_PROTO_INET;
	int l = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, lp);
	int c = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, cp);
	int s;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || c < 0)
		goto out;
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		goto out;
	socklen_t len = sizeof(a);
	if (getsockname(l, (struct sockaddr *)&a, &len))
		goto out;
	connect(c, (struct sockaddr *)&a, sizeof(a));
	s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
	timeouts(c);
	put_fd(r, c);
	c = -1;
	if (s >= 0) {
		timeouts(s);
		put_fd(r, s);
	}
out:
	if (l >= 0)
		close(l);
	if (c >= 0)
		close(c);
}

static void do_opt(struct rng *r, int fd)
{
	static const int levels[] = { SOL_SD, SOL_SD, SOL_SOCKET, IPPROTO_TCP, 0, 0x5345,
				      IPPROTO_IPV6 };
	unsigned char buf[256];
	int level = levels[below(r, 7)];
	int name = (int)below(r, 72);
	socklen_t len = below(r, 4) ? (socklen_t)(4 << below(r, 3)) : (socklen_t)below(r, 256);

	/* Not the timeouts: the run must stay bounded. */
	if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO ||
				    name == SO_RCVTIMEO_NEW || name == SO_SNDTIMEO_NEW ||
				    name == SO_LINGER))
		return;
	fill(r, buf, sizeof(buf));
	if (below(r, 2))
		setsockopt(fd, level, name, below(r, 16) ? buf : NULL, len);
	else
		getsockopt(fd, level, name, below(r, 16) ? buf : NULL, &len);
}

static void do_ioctl(struct rng *r, int fd)
{
	static const unsigned long cmds[] = { SD_IOC_ACQUIRE, SD_IOC_RELEASE, SD_IOC_WAKE,
					      FIONREAD, SIOCOUTQ, SIOCOUTQNSD, SIOCATMARK,
					      FIONBIO, 0 };
	union {
		struct sd_token tok;
		unsigned char b[64];
	} u;
	unsigned long cmd = cmds[below(r, 9)];

	/*
	 * A random one, but not a generic socket ioctl (0x89xx): the run is
	 * root in the guest, and those configure interfaces (SIOCSIFFLAGS
	 * could take loopback down) or aim SIGIO at a random process
	 * (FIOSETOWN).
	 */
	if (!cmd) {
		cmd = (unsigned long)next(r) & 0xffffffffUL;
		if ((cmd & 0xffffff00UL) == 0x8900)
			return;
	}
	fill(r, &u, sizeof(u));
	if (below(r, 2))
		u.tok.dir = below(r, 3);
	if (cmd == FIONBIO)	/* blocking would defeat the bound */
		u.tok.dir = 1;
	ioctl(fd, cmd, below(r, 20) ? (void *)&u : below(r, 2) ? NULL : (void *)16);
}

/* Map something of fd and scribble on it: the kernel trusts nothing there. */
static void do_mmap(struct rng *r, int fd)
{
	struct sd_mmap_offsets o;
	socklen_t ol = sizeof(o);
	int rx = (int)below(r, 2);
	off_t off = rx ? (off_t)SD_PGOFF_RX_RING : (off_t)SD_PGOFF_TX_RING;
	size_t len = (size_t)4096 << below(r, 7);
	int prot = below(r, 4) ? PROT_READ | PROT_WRITE : PROT_READ;

	if (!getsockopt(fd, SOL_SD, SD_MMAP_OFFSETS, &o, &ol) && below(r, 8))
		len = rx ? o.rx.mmap_len : o.tx.mmap_len;
	if (below(r, 16) == 0)
		off = below(r, 2) ? off + 4096 : (off_t)(next(r) & 0xfffff000ULL);
	unsigned char *m = mmap(NULL, len, prot, below(r, 16) ? MAP_SHARED : MAP_PRIVATE,
				fd, off);
	if (m == MAP_FAILED)
		return;
	/*
	 * The kernel maps exactly the ring or fails, so all of [m, m + len)
	 * is there.  Mostly the first page: flags, credit, positions,
	 * tokens, busy counts.
	 */
	if (prot & PROT_WRITE) {
		unsigned int n = below(r, 16);

		for (unsigned int i = 0; i < n; i++) {
			size_t at = below(r, 4) ? below(r, 4096) & ~7U :
						  below(r, (unsigned int)len) & ~7U;
			uint64_t v = below(r, 3) ? next(r) : below(r, 2) ? 0 : ~0ULL;

			memcpy(m + at, &v, 8);
		}
	}
	munmap(m, len);
}

static void do_data(struct rng *r, int fd)
{
	static unsigned char big[1 << 17];
	size_t len = below(r, 4) ? below(r, 512) : below(r, sizeof(big));
	int flags = MSG_DONTWAIT | MSG_NOSIGNAL;

	if (below(r, 8) == 0)
		flags |= (int)(next(r) & (MSG_PEEK | MSG_OOB | MSG_TRUNC | MSG_WAITALL |
					  MSG_MORE | MSG_ERRQUEUE));
	if (below(r, 2)) {
		send(fd, big, len, flags);
	} else {
		unsigned char buf[4096];

		recv(fd, below(r, 32) ? buf : NULL, len % sizeof(buf), flags & ~MSG_WAITALL);
	}
}

static void one_call(struct rng *r)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = slot_fd(r);

	switch (below(r, 20)) {
	case 0:
		do_socket(r);
		break;
	case 1:
		do_pair(r);
		break;
	case 2:
		if (fd >= 0 && below(r, 4) == 0) {
			/* Take it out of the table first: no double close. */
			for (int i = 0; i < SLOTS; i++)
				if (__atomic_compare_exchange_n(&slots[i], &fd, -1, 0,
								__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
					close(fd);
					break;
				}
		}
		break;
	case 3:
		if (fd >= 0) {
			int d = dup(fd);

			if (d >= 0)
				put_fd(r, d);
		}
		break;
	case 4:
		len = addr(r, &ss);
		bind(fd, (struct sockaddr *)&ss, len);
		break;
	case 5:
		listen(fd, (int)below(r, 8) - 1);
		break;
	case 6:
		len = addr(r, &ss);
		connect(fd, (struct sockaddr *)&ss, len);
		break;
	case 7: {
		int c;

		len = sizeof(ss);
		c = accept4(fd, below(r, 2) ? (struct sockaddr *)&ss : NULL,
			    below(r, 2) ? &len : NULL, SOCK_NONBLOCK);
		if (c >= 0) {
			timeouts(c);
			put_fd(r, c);
		}
		break;
	}
	case 8:
	case 9:
		do_opt(r, fd);
		break;
	case 10:
		do_ioctl(r, fd);
		break;
	case 11:
		do_mmap(r, fd);
		break;
	case 12:
	case 13:
	case 14:
		do_data(r, fd);
		break;
	case 15:
		shutdown(fd, (int)below(r, 5) - 1);
		break;
	case 16: {
		struct pollfd p = { .fd = fd, .events = (short)next(r) };

		poll(&p, 1, 0);
		break;
	}
	case 17:
		len = sizeof(ss);
		if (below(r, 2))
			getsockname(fd, (struct sockaddr *)&ss, &len);
		else
			getpeername(fd, (struct sockaddr *)&ss, &len);
		break;
	case 18:
		fcntl(fd, F_SETFL, O_NONBLOCK | (below(r, 2) ? O_ASYNC : 0));
		break;
	default: {
		struct sd_token t = { .dir = below(r, 2) };

		/* Acquire a side, then use it through the kernel too. */
		if (!ioctl(fd, SD_IOC_ACQUIRE, &t))
			do_data(r, fd);
		break;
	}
	}
	__atomic_fetch_add(&calls_made, 1, __ATOMIC_RELAXED);
}

struct worker {
	pthread_t th;
	uint64_t seed;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	struct rng r = { w->seed };

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		one_call(&r);
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: sd_fuzz SEED SECONDS [PROCS [THREADS]]\n");
		return 2;
	}
	char *end;
	uint64_t seed = strtoull(argv[1], &end, 0);
	long secs = strtol(argv[2], NULL, 10);
	int procs = argc > 3 ? atoi(argv[3]) : 3;
	int threads = argc > 4 ? atoi(argv[4]) : 3;

	if (*end || secs <= 0 || secs > 3600 || procs < 1 || procs > 16 || threads < 1 ||
	    threads > 16) {
		fprintf(stderr, "sd_fuzz: bad arguments\n");
		return 2;
	}
	for (int i = 0; i < SLOTS; i++)
		slots[i] = -1;
	setpgid(0, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGIO, SIG_IGN);
	signal(SIGURG, SIG_IGN);
	printf("sd_fuzz: seed %llu, %ld s, %d processes of %d threads\n",
	       (unsigned long long)seed, secs, procs, threads);
	fflush(stdout);

	pid_t kids[16];
	int nkids = 0;
	for (int p = 1; p < procs; p++) {
		pid_t pid = fork();

		if (pid == 0) {
			seed += (uint64_t)(unsigned int)p << 32;
			nkids = 0;
			break;
		}
		if (pid > 0)
			kids[nkids++] = pid;
	}

	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	alarm((unsigned int)secs);

	struct worker w[16];
	for (int t = 0; t < threads; t++) {
		w[t].seed = seed * 1000003ULL + (uint64_t)(unsigned int)t;
		pthread_create(&w[t].th, NULL, run, &w[t]);
	}
	for (int t = 0; t < threads; t++)
		pthread_join(w[t].th, NULL);
	for (int i = 0; i < SLOTS; i++)
		if (slots[i] >= 0)
			close(slots[i]);

	if (nkids == 0 && getpid() != getpgrp())
		_exit(0);
	/* The first process: collect the others, killing stragglers. */
	alarm(10);
	int bad = 0;
	for (int k = 0; k < nkids; k++) {
		int status;

		if (waitpid(kids[k], &status, 0) < 0) {
			if (errno == EINTR) {
				fprintf(stderr, "sd_fuzz: a process did not finish in time\n");
				kill(0, SIGKILL);
			}
			continue;
		}
		if (WIFSIGNALED(status)) {
			fprintf(stderr, "sd_fuzz: process %d died of signal %d\n", (int)kids[k],
				WTERMSIG(status));
			bad = 1;
		}
	}
	if (bad)
		return 1;
	printf("sd_fuzz: %lu calls in the first process\n", calls_made);
	return 0;
}
