// SPDX-License-Identifier: GPL-2.0
/*
 * sd_fuzz: random sequences of AF_SD system calls from several threads in
 * several processes, on a shared table of sockets, for a bounded time.
 *
 *   sd_fuzz SEED SECONDS [PROCS [THREADS [NETNS ADDR]]]
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
 * flags, shutdown, poll, fcntl, and generic netlink requests to the "sd"
 * family (valid and random commands and flags, dumps, well-formed rules
 * and random, nested, truncated or lying attributes, cut or overlong
 * headers; the replies are read without waiting and thrown away).
 * Processes fork with the table open and go on sharing it, and threads
 * fork now and then, the child making a few calls before it exits.  Half
 * the calls go to a few hot slots, so that calls meet on one socket, and
 * connects to listeners with a full backlog of 0 wait (bounded by the
 * send timeout) while other threads listen, connect, shut down and close
 * the waiting socket (Documentation/security.rst).
 *
 * With NETNS (a path, /run/netns/NAME) and ADDR, another namespace
 * reachable at ADDR stands for another host, and the fuzzer plays this
 * namespace's link daemon (link_daemon()): threads connect redirected
 * sockets to ADDR, and the daemon answers, queues connections of the
 * other host, goes and comes back (do_remote()).
 *
 * The netlink requests change the rules for real (the run is root): the
 * first process flushes them at the end, and test_fuzz.py makes sure.
 *
 * Blocking is bounded: every socket gets 20 ms send and receive timeouts
 * and most calls are non-blocking; a watchdog kills the whole process
 * group when the time is up, so a call that hangs shows as the run
 * overrunning, and the kernel's own hung-task and lockup detectors see it.
 * The result is what the kernel log shows: tests/vm/run fails the run on
 * any splat.  Exits 0 after printing the number of calls made.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* setns */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
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
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/sd.h>
#include <linux/sd_link.h>
#include <linux/sockios.h>

#include "sd_rng.h"

#define SLOTS 32
#define REMOTE_BASE 42000
#define PORT_BASE 41000
#define PORTS 8

static int slots[SLOTS];
static volatile int stop;
static unsigned long calls_made;

/* Netlink, per process: what the first process's threads sent and got. */
static int nl_family = -1;		/* the "sd" family's id */
static int link_family = -1;		/* "sd_link"'s, with another host */
static int here_fd = -1, there_fd = -1;
static struct in_addr remote;
static unsigned long nl_sent, nl_ok, nl_refused, nl_added, nl_parts;
static __thread int nl_fd = -1;		/* each thread its own socket */
static __thread uint32_t nl_rule_id;	/* the last id RULE_ADD answered */

static void fill(struct rng *r, void *buf, size_t len)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)next(r);
}

/*
 * Half the calls go to the first HOT slots, so that threads and processes
 * meet on one socket often: a call while another thread's connect waits
 * for backlog room (do_jam()), a close under a call, a fork in between.
 */
#define HOT 4

static unsigned int slot(struct rng *r)
{
	return below(r, 2) ? below(r, HOT) : below(r, SLOTS);
}

static int slot_fd(struct rng *r)
{
	return __atomic_load_n(&slots[slot(r)], __ATOMIC_RELAXED);
}

static void put_fd(struct rng *r, int fd)
{
	int old = __atomic_exchange_n(&slots[slot(r)], fd, __ATOMIC_RELAXED);

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

/*
 * A connect that waits: a listener on one of the fuzzed ports with a
 * backlog of 0 and one client queued (both left in the table for others'
 * accepts and closes), then a blocking connect of a socket of the table to
 * it, which waits for room until its 20 ms send timeout, while the other
 * threads listen, connect, bind, shut down, poll and close the same socket.
 */
static void do_jam(struct rng *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int l = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int c = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int fd;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)(PORT_BASE + below(r, PORTS)));
	if (l < 0 || c < 0)
		goto out;
	timeouts(l);
	timeouts(c);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 0))
		goto out;
	connect(c, (struct sockaddr *)&a, sizeof(a));
	put_fd(r, l);
	put_fd(r, c);
	l = c = -1;
	fd = slot_fd(r);
	if (below(r, 2)) {
		/* A fresh one, in the table first so that others see it. */
		fd = socket(AF_SD, SOCK_STREAM, below(r, 4) ? 0 : SD_PROTO_INET);
		if (fd < 0)
			goto out;
		timeouts(fd);
		put_fd(r, fd);
	} else {
		fcntl(fd, F_SETFL, 0);
	}
	connect(fd, (struct sockaddr *)&a, sizeof(a));
out:
	if (l >= 0)
		close(l);
	if (c >= 0)
		close(c);
}

static void one_call(struct rng *r);

/*
 * fork with the table shared: the child makes a few calls of its own on
 * the same descriptors (some of them asleep in the parent's other
 * threads) and exits; the parent reaps it.
 */
static void do_fork(struct rng *r)
{
	struct rng cr = { next(r) };
	pid_t pid;

	pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 32; i++)
			one_call(&cr);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
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
					      SD_IOC_RECV_WAIT, FIONREAD, SIOCOUTQ,
					      SIOCOUTQNSD, SIOCATMARK, FIONBIO, 0 };
	union {
		struct sd_token tok;
		unsigned char b[64];
	} u;
	unsigned long cmd = cmds[below(r, 10)];

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
	/* The other file: fd itself, or any of ours (SO_RCVTIMEO bounds it). */
	if (cmd == SD_IOC_RECV_WAIT && below(r, 2))
		u.tok.dir = below(r, 2) ? (unsigned int)fd : below(r, 64);
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

/* ---- generic netlink ---------------------------------------------------- */

#define NLBUF 16384
/* The uapi macros trip -Wsign-conversion; these are the same sizes. */
#define A4(n) (((size_t)(n) + 3) & ~(size_t)3)
#define AHDR ((size_t)sizeof(struct nlattr))
#define MHDR ((size_t)sizeof(struct nlmsghdr))
#define GHDR ((size_t)sizeof(struct genlmsghdr))

/* The next message of a datagram of @left bytes at @h, or NULL. */
static struct nlmsghdr *msg_at(void *h, size_t left)
{
	struct nlmsghdr *m = h;

	return left >= MHDR && m->nlmsg_len >= MHDR && m->nlmsg_len <= left ? m : NULL;
}

/* The attribute at @a in a run of @left bytes, or NULL. */
static struct nlattr *attr_at(void *a, size_t left)
{
	struct nlattr *at = a;

	return left >= AHDR && at->nla_len >= AHDR && at->nla_len <= left ? at : NULL;
}

/* The payload of a @len-byte attribute @type of a family message, or NULL. */
static void *msg_attr(struct nlmsghdr *h, uint16_t type, size_t len)
{
	unsigned char *p = (unsigned char *)h + MHDR + GHDR;
	size_t left = h->nlmsg_len >= MHDR + GHDR ? h->nlmsg_len - MHDR - GHDR : 0;
	struct nlattr *a;

	while ((a = attr_at(p, left))) {
		if (a->nla_type == type && a->nla_len == AHDR + len)
			return p + AHDR;
		if (A4(a->nla_len) >= left)
			break;
		left -= A4(a->nla_len);
		p += A4(a->nla_len);
	}
	return NULL;
}

/* The errno of an NLMSG_ERROR message: 0 for an ACK. */
static int msg_err(struct nlmsghdr *h)
{
	int e = 0;

	if (h->nlmsg_len >= MHDR + sizeof(e))
		memcpy(&e, (char *)h + MHDR, sizeof(e));
	return e;
}

struct nlmsg {
	unsigned char *b;
	size_t len;		/* bytes built */
	size_t room;		/* bytes there are at b */
};

static void cnt(unsigned long *c)
{
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* One attribute (silently dropped if it does not fit), padded to 4. */
static void put(struct nlmsg *m, uint16_t type, const void *p, size_t n)
{
	struct nlattr *a = (struct nlattr *)(m->b + m->len);

	if (m->len + AHDR + A4(n) > m->room)
		return;
	a->nla_len = (uint16_t)(AHDR + n);
	a->nla_type = type;
	if (n)
		memcpy(m->b + m->len + AHDR, p, n);
	memset(m->b + m->len + AHDR + n, 0, A4(n) - n);
	m->len += AHDR + A4(n);
}

static void put_u8(struct nlmsg *m, uint16_t type, uint8_t v)
{
	put(m, type, &v, 1);
}

static void put_u16(struct nlmsg *m, uint16_t type, uint16_t v)
{
	put(m, type, &v, 2);
}

static void put_u32(struct nlmsg *m, uint16_t type, uint32_t v)
{
	put(m, type, &v, 4);
}

/* A nest: open it, put its attributes, close it (its length set). */
static size_t nest_open(struct nlmsg *m, uint16_t type)
{
	size_t at = m->len;

	if (m->len + AHDR > m->room)
		return (size_t)-1;
	put(m, type, NULL, 0);
	return at;
}

static void nest_close(struct nlmsg *m, size_t at)
{
	if (at != (size_t)-1)
		((struct nlattr *)(m->b + at))->nla_len = (uint16_t)(m->len - at);
}

/* A rule's side, mostly well formed: address and prefix, ports. */
static void addr_attrs(struct rng *r, struct nlmsg *m)
{
	if (below(r, 2)) {
		struct in6_addr a = in6addr_loopback;

		if (below(r, 2)) {	/* ::ffff:127.0.0.1 */
			memset(&a, 0, sizeof(a));
			a.s6_addr[10] = a.s6_addr[11] = 0xff;
			a.s6_addr[12] = 127;
			a.s6_addr[15] = 1;
		} else if (below(r, 4) == 0) {
			fill(r, &a, sizeof(a));
		}
		put(m, SD_A_ADDR_IN6, &a, sizeof(a));
	}
	if (below(r, 2))
		put_u8(m, SD_A_ADDR_PREFIX, (uint8_t)(below(r, 8) ? 96 + below(r, 33) :
							    below(r, 256)));
	if (below(r, 2)) {
		uint16_t lo = (uint16_t)(PORT_BASE + below(r, PORTS));

		put_u16(m, SD_A_ADDR_PORT_MIN, lo);
		put_u16(m, SD_A_ADDR_PORT_MAX, (uint16_t)(lo + below(r, PORTS) -
							  (below(r, 8) ? 0 : PORTS / 2)));
	}
	if (below(r, 16) == 0)
		put_u16(m, SD_A_ADDR_PORT, (uint16_t)next(r));	/* refused here */
}

/* The attributes of a rule, valid but for the odd range or value. */
static void rule_attrs(struct rng *r, struct nlmsg *m)
{
	static const uint8_t actions[] = { SD_ACTION_ALLOW, SD_ACTION_ALLOW, SD_ACTION_DENY,
					   SD_ACTION_TCP };
	uint8_t action = below(r, 16) ? actions[below(r, 4)] : (uint8_t)below(r, 6);
	uint8_t dir = action == SD_ACTION_TCP && below(r, 8) ? SD_DIR_CONNECT :
		      (uint8_t)(below(r, 16) ? 1 + below(r, SD_DIR_ALL) : below(r, 256));
	size_t at;

	if (below(r, 32))
		put_u8(m, SD_A_RULE_ACTION, action);
	if (below(r, 32))
		put_u8(m, SD_A_RULE_DIR, dir);
	if (below(r, 4) == 0)
		put_u32(m, SD_A_RULE_POSITION, below(r, 4) ? below(r, 8) : (uint32_t)next(r));
	for (uint16_t t = SD_A_RULE_UID_MIN; t <= SD_A_RULE_GID_MIN; t += 2) {
		if (below(r, 4) == 0) {
			uint32_t lo = below(r, 4) ? below(r, 2000) : (uint32_t)next(r);

			put_u32(m, t, lo);
			put_u32(m, (uint16_t)(t + 1), below(r, 8) ? lo + below(r, 2000) :
								     (uint32_t)next(r));
		}
	}
	for (uint16_t t = SD_A_RULE_LOCAL; t <= SD_A_RULE_REMOTE; t++) {
		if (below(r, 3) == 0) {
			at = nest_open(m, (uint16_t)(t | (below(r, 16) ? NLA_F_NESTED : 0)));
			addr_attrs(r, m);
			nest_close(m, at);
		}
	}
	if (below(r, 4) == 0) {
		char c[SD_RULE_COMMENT_MAX + 8];
		size_t n = below(r, 4) ? 1 + below(r, SD_RULE_COMMENT_MAX) :
					 below(r, sizeof(c));

		memset(c, 'f', sizeof(c));
		if (n && below(r, 8))
			c[n - 1] = 0;
		put(m, SD_A_RULE_COMMENT, c, n);
	}
}

/* Random attributes: any type, any length, nests of more of the same. */
static void junk_attrs(struct rng *r, struct nlmsg *m, int depth)
{
	static const size_t lens[] = { 0, 1, 2, 3, 4, 8, 16, 17, 64 };
	unsigned int n = below(r, 6);

	for (unsigned int i = 0; i < n; i++) {
		uint16_t type = below(r, 4) ? (uint16_t)below(r, SD_A_MAX + 3) :
					      (uint16_t)next(r);
		unsigned char buf[200];
		size_t len;

		if (depth < 3 && below(r, 4) == 0) {
			size_t at = nest_open(m, (uint16_t)(type | (below(r, 4) ?
								    NLA_F_NESTED : 0)));

			if (below(r, 2))
				addr_attrs(r, m);
			else
				junk_attrs(r, m, depth + 1);
			nest_close(m, at);
			continue;
		}
		len = below(r, 2) ? lens[below(r, 9)] : below(r, sizeof(buf));
		fill(r, buf, len);
		if (len && below(r, 2))
			buf[0] = (unsigned char)below(r, 8);	/* a small value */
		put(m, type, buf, len);
	}
}

static int nl_open(struct rng *r)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK,
			NETLINK_GENERIC);
	int one = 1;

	if (fd < 0)
		return -1;
	if (!r)
		return fd;
	if (below(r, 2))
		setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	if (below(r, 4) == 0)
		setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	if (below(r, 4) == 0) {
		/* A small buffer: dumps come in many parts, replies get dropped. */
		int sz = 1024 << below(r, 4);

		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	return fd;
}

/* Read what has come, without waiting; count it and keep a rule's id. */
static void nl_drain(int fd, unsigned int max)
{
	static __thread unsigned char buf[NLBUF];

	for (unsigned int i = 0; i < max; i++) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		struct nlmsghdr *h;

		if (n < 0 && errno == ENOBUFS)
			continue;	/* replies were dropped: go on */
		if (n <= 0)
			return;
		for (size_t off = 0; off < (size_t)n && (h = msg_at(buf + off, (size_t)n - off));
		     off += A4(h->nlmsg_len)) {
			uint32_t *id;

			if (h->nlmsg_flags & NLM_F_MULTI)
				cnt(&nl_parts);
			if (h->nlmsg_type == NLMSG_ERROR) {
				cnt(msg_err(h) ? &nl_refused : &nl_ok);
			} else if (h->nlmsg_type == (uint16_t)nl_family &&
				   h->nlmsg_len >= MHDR + GHDR &&
				   ((struct genlmsghdr *)(h + 1))->cmd == SD_CMD_RULE_ADD) {
				cnt(&nl_added);
				id = msg_attr(h, SD_A_RULE_ID, 4);
				if (id)
					memcpy(&nl_rule_id, id, 4);
			}
		}
	}
}

/* One request of the family's header, command and attributes, built at b. */
static size_t nl_request(struct rng *r, unsigned char *b, size_t room)
{
	struct nlmsg m = { b, MHDR + GHDR, room };
	struct nlmsghdr *h = (struct nlmsghdr *)b;
	struct genlmsghdr *g = (struct genlmsghdr *)(b + MHDR);
	unsigned int cmd = below(r, 8) ? below(r, SD_CMD_MAX + 2) : below(r, 256);
	uint16_t flags = NLM_F_REQUEST;

	if (room < m.len)
		return 0;
	memset(b, 0, m.len);
	if (below(r, 2))
		flags |= NLM_F_ACK;
	if (cmd == SD_CMD_SOCK_GET || cmd == SD_CMD_LISTENER_GET || cmd == SD_CMD_RULE_GET ?
	    below(r, 8) != 0 : below(r, 8) == 0)
		flags |= NLM_F_DUMP;
	if (below(r, 16) == 0)
		flags = (uint16_t)next(r);	/* anything, REQUEST or not */
	h->nlmsg_type = (uint16_t)nl_family;
	h->nlmsg_flags = flags;
	h->nlmsg_seq = (uint32_t)next(r);
	/* Now and then the link daemon's family, from a socket of no daemon. */
	if (link_family >= 0 && below(r, 16) == 0) {
		h->nlmsg_type = (uint16_t)link_family;
		cmd = below(r, SD_LINK_CMD_MAX + 2);
	}
	g->cmd = (uint8_t)cmd;
	g->version = below(r, 8) ? SD_GENL_VERSION : (uint8_t)next(r);
	if (below(r, 16) == 0)
		g->reserved = (uint16_t)next(r);

	switch (below(r, 8)) {
	case 0:
	case 1:
	case 2:		/* a rule, for RULE_ADD mostly */
		if (below(r, 4))
			g->cmd = SD_CMD_RULE_ADD;
		rule_attrs(r, &m);
		if (below(r, 4) == 0)
			junk_attrs(r, &m, 0);
		break;
	case 3:		/* delete one, often one that exists */
		if (below(r, 4))
			g->cmd = SD_CMD_RULE_DEL;
		put_u32(&m, SD_A_RULE_ID, below(r, 2) ? nl_rule_id - 1 + below(r, 3) :
					  below(r, 2) ? below(r, 64) : (uint32_t)next(r));
		break;
	case 4:		/* none: dumps, stats, flush as they are */
		break;
	default:
		junk_attrs(r, &m, 0);
		break;
	}
	/* Lie in an attribute's header: a length or a type. */
	if (m.len > MHDR + GHDR && below(r, 8) == 0) {
		size_t at = MHDR + GHDR +
			    (below(r, (unsigned int)(m.len - MHDR - GHDR)) & ~3U);
		uint16_t v = below(r, 2) ? (uint16_t)next(r) : (uint16_t)below(r, 8);

		memcpy(b + at + (below(r, 4) ? 0 : 2), &v, 2);
	}
	h->nlmsg_len = (uint32_t)m.len;
	return m.len;
}

/* A request to the family that the control family answers for. */
static size_t ctrl_request(struct rng *r, unsigned char *b)
{
	struct nlmsg m = { b, MHDR + GHDR, NLBUF };
	struct nlmsghdr *h = (struct nlmsghdr *)b;
	struct genlmsghdr *g = (struct genlmsghdr *)(b + MHDR);
	int policy = (int)below(r, 2);

	memset(b, 0, m.len);
	h->nlmsg_type = GENL_ID_CTRL;
	h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | (policy || below(r, 4) == 0 ? NLM_F_DUMP : 0);
	g->cmd = policy ? CTRL_CMD_GETPOLICY : CTRL_CMD_GETFAMILY;
	g->version = 1;
	if (below(r, 2))
		put(&m, CTRL_ATTR_FAMILY_NAME, SD_GENL_NAME, sizeof(SD_GENL_NAME));
	else
		put_u16(&m, CTRL_ATTR_FAMILY_ID, (uint16_t)nl_family);
	if (policy && below(r, 2))
		put_u32(&m, CTRL_ATTR_OP, below(r, SD_CMD_MAX + 2));
	h->nlmsg_len = (uint32_t)m.len;
	return m.len;
}

/*
 * Random generic netlink requests to the "sd" family: one, or several in a
 * datagram; cut short, or with a header that claims more or less than
 * there is.  Whatever comes back is read without waiting.
 */
static void do_netlink(struct rng *r)
{
	static __thread unsigned char buf[NLBUF];
	size_t len = 0, first;

	if (nl_family < 0)
		return;
	if (nl_fd < 0) {
		nl_fd = nl_open(r);
		if (nl_fd < 0)
			return;
	}
	if (below(r, 16) == 0) {
		len = ctrl_request(r, buf);
	} else {
		unsigned int n = below(r, 8) ? 1 : 2 + below(r, 3);

		for (unsigned int i = 0; i < n && len + 64 < sizeof(buf); i++)
			len += A4(nl_request(r, buf + len, sizeof(buf) - len));
	}
	first = ((struct nlmsghdr *)buf)->nlmsg_len;
	switch (below(r, 16)) {
	case 0:		/* a header cut short */
		len = below(r, MHDR + GHDR + 1);
		break;
	case 1:		/* claims more than is sent: dropped by the core */
		((struct nlmsghdr *)buf)->nlmsg_len = (uint32_t)(first + 1 + below(r, 4096));
		break;
	case 2:		/* claims less: attributes cut, or not even a header */
		((struct nlmsghdr *)buf)->nlmsg_len = below(r, (unsigned int)first + 1);
		break;
	case 3:		/* the datagram cut in the middle */
		len = below(r, (unsigned int)len + 1);
		break;
	default:
		break;
	}
	if (send(nl_fd, buf, len, MSG_DONTWAIT) >= 0)
		cnt(&nl_sent);
	nl_drain(nl_fd, below(r, 4) ? 16 : below(r, 2));
	/* Close, sometimes with a dump under way (its state freed on close). */
	if (below(r, 32) == 0) {
		close(nl_fd);
		nl_fd = -1;
	}
}

/* A request and its answer, waiting at most a second: 0, or -errno. */
static int nl_call(int fd, uint16_t type, uint8_t cmd, const void *attrs, size_t alen,
		   unsigned char *reply, size_t rlen)
{
	unsigned char b[256];
	struct nlmsghdr *h = (struct nlmsghdr *)b;
	struct genlmsghdr *g = (struct genlmsghdr *)(b + MHDR);
	size_t len = MHDR + GHDR + alen;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	memset(b, 0, sizeof(b));
	h->nlmsg_len = (uint32_t)len;
	h->nlmsg_type = type;
	h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	h->nlmsg_seq = 1;
	g->cmd = cmd;
	g->version = 1;
	memcpy(b + MHDR + GHDR, attrs, alen);
	if (send(fd, b, len, 0) != (ssize_t)len)
		return -errno;
	for (;;) {
		unsigned char *at = reply;
		ssize_t n;

		if (poll(&p, 1, 1000) != 1)
			return -ETIMEDOUT;
		n = recv(fd, reply, rlen, MSG_DONTWAIT);
		if (n < 0)
			return -errno;
		for (size_t off = 0; off < (size_t)n && (h = msg_at(at + off, (size_t)n - off));
		     off += A4(h->nlmsg_len)) {
			if (h->nlmsg_type == NLMSG_ERROR)
				return msg_err(h);
			if (h->nlmsg_type == type)
				return 0;	/* the answer, in reply */
		}
	}
}

/* Family @name's id, from the control family; -1 if it is not there. */
static int nl_resolve(const char *name)
{
	unsigned char a[AHDR + 16], reply[4096];
	struct nlattr *at = (struct nlattr *)a;
	struct nlmsghdr *h = (struct nlmsghdr *)reply;
	int fd = nl_open(NULL), id = -1;

	if (fd < 0)
		return -1;
	at->nla_len = (uint16_t)(AHDR + strlen(name) + 1);
	at->nla_type = CTRL_ATTR_FAMILY_NAME;
	memcpy(a + AHDR, name, strlen(name) + 1);
	memset(reply, 0, sizeof(reply));
	/* The family message comes first, then the ACK. */
	nl_call(fd, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, a, A4(at->nla_len), reply,
		sizeof(reply));
	if (msg_at(h, sizeof(reply)) && h->nlmsg_type == GENL_ID_CTRL) {
		uint16_t *v = msg_attr(h, CTRL_ATTR_FAMILY_ID, 2);

		if (v)
			id = *v;
	}
	close(fd);
	return id;
}

/* Flush the rules the run made: 0, or -errno. */
static int nl_flush(void)
{
	unsigned char reply[4096];
	int fd = nl_open(NULL), err;

	if (fd < 0)
		return -errno;
	err = nl_call(fd, (uint16_t)nl_family, SD_CMD_RULE_FLUSH, NULL, 0, reply,
		      sizeof(reply));
	close(fd);
	return err;
}

/* ---- another host, and the fuzzer as its link daemon -------------------- */

/*
 * Each process runs a thread that plays the namespace's link daemon
 * (<linux/sd_link.h>): one registers at a time (the others are refused,
 * EBUSY, and try again later).  The registered one answers each upcall at
 * random: TCP with a reason (in range or not), REFUSE, VIA through an AF_SD
 * listener of its own or any descriptor of the table, with the connect's
 * id or another, or not at all (the connect's bound runs out).  It queues
 * connections of "the other host" at this namespace's listeners
 * (INCOMING, its end a fresh socket or any descriptor, the addresses and
 * ring sizes valid or not), reads the key, and now and then closes its
 * socket, which resets every connection it carried while other threads
 * use them, and registers again.  What it makes goes into the table.
 */
static unsigned long link_upcalls, link_verdicts, link_incoming;

/* A new socket registered as the daemon, or -1 (another one is). */
static int link_register(void)
{
	unsigned char reply[4096];
	int fd = nl_open(NULL);

	if (fd < 0)
		return -1;
	if (nl_call(fd, (uint16_t)link_family, SD_LINK_CMD_REGISTER, NULL, 0, reply,
		    sizeof(reply))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Start a request of the daemon's at @b. */
static struct nlmsg link_msg(unsigned char *b, size_t room, uint8_t cmd, uint16_t flags)
{
	struct nlmsg m = { b, MHDR + GHDR, room };
	struct nlmsghdr *h = (struct nlmsghdr *)b;
	struct genlmsghdr *g = (struct genlmsghdr *)(b + MHDR);

	memset(b, 0, MHDR + GHDR);
	h->nlmsg_type = (uint16_t)link_family;
	h->nlmsg_flags = NLM_F_REQUEST | flags;
	g->cmd = cmd;
	g->version = SD_LINK_GENL_VERSION;
	return m;
}

/* Send it without waiting: its answer is the daemon's loop's to read. */
static void link_send(int fd, struct nlmsg *m)
{
	((struct nlmsghdr *)m->b)->nlmsg_len = (uint32_t)m->len;
	send(fd, m->b, m->len, MSG_DONTWAIT);
}

static void link_addr(struct nlmsg *m, uint16_t type, struct in_addr a, uint16_t port)
{
	struct in6_addr a6 = { .s6_addr = { [10] = 0xff, [11] = 0xff } };
	/* The family validates strictly: a nest says it is one. */
	size_t at = nest_open(m, type | NLA_F_NESTED);

	memcpy(&a6.s6_addr[12], &a, 4);
	put(m, SD_A_ADDR_IN6, &a6, sizeof(a6));
	put_u16(m, SD_A_ADDR_PORT, port);
	nest_close(m, at);
}

static void put_u64(struct nlmsg *m, uint16_t type, uint64_t v)
{
	put(m, type, &v, 8);
}

/* An AF_SD listener of the daemon's own, on loopback; -1 if none. */
static int link_listener(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The verdict on connect @id. */
static void link_answer(struct rng *r, int fd, uint64_t id, int lst)
{
	unsigned char b[512];
	struct nlmsg m = link_msg(b, sizeof(b), SD_LINK_CMD_VERDICT, 0);

	if (below(r, 8) == 0)
		return;		/* none: the connect's bound runs out */
	put_u64(&m, SD_LINK_A_ID, below(r, 8) ? id : id + below(r, 3) - 1);
	switch (below(r, 8)) {
	case 0:
		put_u8(&m, SD_LINK_A_VERDICT, SD_LINK_TCP);
		put_u8(&m, SD_LINK_A_REASON, (uint8_t)below(r, __SD_FALLBACK_MAX + 2));
		break;
	case 1:
		put_u8(&m, SD_LINK_A_VERDICT, SD_LINK_REFUSE);
		break;
	case 2:
		put_u8(&m, SD_LINK_A_VERDICT, (uint8_t)next(r));
		junk_attrs(r, &m, 0);
		break;
	default:
		put_u8(&m, SD_LINK_A_VERDICT, SD_LINK_VIA);
		put(&m, SD_LINK_A_FD, &(int32_t){ below(r, 4) ? lst : slot_fd(r) }, 4);
		break;
	}
	link_send(fd, &m);
	cnt(&link_verdicts);
}

/* A connection of the other host, queued at a listener here. */
static void link_incoming_one(struct rng *r, int fd)
{
	unsigned char b[512];
	struct nlmsg m = link_msg(b, sizeof(b), SD_LINK_CMD_INCOMING, 0);
	struct in_addr lo = { htonl(INADDR_LOOPBACK) };
	bool fresh = below(r, 4);
	int s = fresh ? socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0) : slot_fd(r);

	put(&m, SD_LINK_A_FD, &s, 4);
	link_addr(&m, SD_LINK_A_LOCAL, below(r, 8) ? lo : remote,
		  (uint16_t)(PORT_BASE + below(r, PORTS)));
	link_addr(&m, SD_LINK_A_REMOTE, remote, (uint16_t)(below(r, 8) ? 1 + below(r, 60000) : 0));
	put_u32(&m, SD_LINK_A_UID, below(r, 2) ? 0 : (uint32_t)next(r));
	put_u32(&m, SD_LINK_A_GID, below(r, 2) ? 0 : below(r, 70000));
	if (below(r, 2)) {
		put_u32(&m, SD_LINK_A_TX_SIZE, below(r, 8) ? 4096u << below(r, 9) : (uint32_t)next(r));
		put_u32(&m, SD_LINK_A_RX_SIZE, below(r, 8) ? 4096u << below(r, 9) : (uint32_t)next(r));
	}
	if (below(r, 16) == 0)
		junk_attrs(r, &m, 0);
	link_send(fd, &m);
	if (fresh && s >= 0) {
		timeouts(s);
		put_fd(r, s);
	}
}

/* What came to the daemon's socket: answer the upcalls, count the rest. */
static void link_read(struct rng *r, int fd, int lst)
{
	static __thread unsigned char buf[NLBUF];
	struct nlmsghdr *h;
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

	for (size_t off = 0; n > 0 && off < (size_t)n && (h = msg_at(buf + off, (size_t)n - off));
	     off += A4(h->nlmsg_len)) {
		struct genlmsghdr *g = (struct genlmsghdr *)(h + 1);
		uint64_t *id;

		if (h->nlmsg_type != (uint16_t)link_family || h->nlmsg_len < MHDR + GHDR)
			continue;
		if (g->cmd == SD_LINK_CMD_INCOMING) {
			cnt(&link_incoming);
		} else if (g->cmd == SD_LINK_CMD_CONNECT) {
			cnt(&link_upcalls);
			id = msg_attr(h, SD_LINK_A_ID, 8);
			if (id)
				link_answer(r, fd, *id, lst);
		}
	}
}

static void *link_daemon(void *arg)
{
	struct rng r = { *(uint64_t *)arg };
	int fd = -1, lst = link_listener();

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		struct pollfd p;
		int c;

		if (fd < 0) {
			fd = link_register();
			if (fd < 0) {
				usleep(1000 * (1 + below(&r, 50)));
				continue;
			}
		}
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10) == 1)
			link_read(&r, fd, lst);
		/* Its end of what came through its listener, for the table. */
		c = accept4(lst, NULL, NULL, SOCK_NONBLOCK);
		if (c >= 0) {
			timeouts(c);
			put_fd(&r, c);
		}
		switch (below(&r, 16)) {
		case 0:
		case 1:
			link_incoming_one(&r, fd);
			break;
		case 2: {
			unsigned char b[64];
			struct nlmsg m = link_msg(b, sizeof(b), SD_LINK_CMD_KEY, 0);

			link_send(fd, &m);
			break;
		}
		case 3:
			if (below(&r, 16) == 0) {
				/* It goes: what it carried is reset. */
				close(fd);
				fd = -1;
			}
			break;
		default:
			break;
		}
	}
	if (fd >= 0)
		close(fd);
	if (lst >= 0)
		close(lst);
	return NULL;
}

/*
 * Before the fuzzing, one connection each way for certain: a redirected
 * client here through the daemon's listener (VIA), and one of the other
 * host queued at a listener here (INCOMING); then the daemon goes, and
 * both are reset.  Says so on stderr when the kernel would not (the test
 * then finds the counters short).
 */
static void link_first(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = remote,
				 .sin_port = htons(REMOTE_BASE) };
	struct sockaddr_in here = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				    .sin_port = htons(REMOTE_BASE) };
	unsigned char b[512], reply[NLBUF];
	int fd, lst, c, s, hl, d, e;
	uint64_t id = 0;
	struct nlmsg m;

	fd = link_register();
	lst = link_listener();
	hl = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0 || lst < 0 || hl < 0 || bind(hl, (struct sockaddr *)&here, sizeof(here)) ||
	    listen(hl, 4)) {
		perror("sd_fuzz: the first daemon");
		return;
	}
	c = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, SD_PROTO_INET);
	if (c < 0 || !connect(c, (struct sockaddr *)&a, sizeof(a)) || errno != EINPROGRESS)
		perror("sd_fuzz: the first connect to the other host");
	for (int i = 0; i < 1000 && !id; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;
		struct nlmsghdr *h = (struct nlmsghdr *)reply;

		if (poll(&p, 1, 10) != 1)
			continue;
		n = recv(fd, reply, sizeof(reply), MSG_DONTWAIT);
		if (n > 0 && msg_at(h, (size_t)n) && h->nlmsg_type == (uint16_t)link_family &&
		    msg_attr(h, SD_LINK_A_ID, 8))
			memcpy(&id, msg_attr(h, SD_LINK_A_ID, 8), 8);
	}
	m = link_msg(b, sizeof(b), SD_LINK_CMD_VERDICT, 0);
	put_u64(&m, SD_LINK_A_ID, id);
	put_u8(&m, SD_LINK_A_VERDICT, SD_LINK_VIA);
	put(&m, SD_LINK_A_FD, &lst, 4);
	link_send(fd, &m);
	{
		struct pollfd p = { .fd = c, .events = POLLOUT };
		socklen_t len = sizeof(e);

		e = -1;
		if (poll(&p, 1, 10000) != 1 || getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &len) || e)
			fprintf(stderr, "sd_fuzz: the first connect through the daemon: %s\n",
				e > 0 ? strerror(e) : "no answer");
	}
	s = accept4(lst, NULL, NULL, SOCK_NONBLOCK);
	d = socket(AF_SD, SOCK_STREAM | SOCK_NONBLOCK, 0);
	m = link_msg(b, sizeof(b), SD_LINK_CMD_INCOMING, 0);
	put(&m, SD_LINK_A_FD, &d, 4);
	link_addr(&m, SD_LINK_A_LOCAL, here.sin_addr, REMOTE_BASE);
	link_addr(&m, SD_LINK_A_REMOTE, remote, REMOTE_BASE + 1);
	put_u32(&m, SD_LINK_A_UID, 0);
	put_u32(&m, SD_LINK_A_GID, 0);
	link_send(fd, &m);
	e = accept4(hl, NULL, NULL, SOCK_NONBLOCK);
	if (s < 0 || e < 0)
		fprintf(stderr, "sd_fuzz: the first connections through the daemon: %s\n",
			strerror(errno));
	/* The daemon goes: both connections are reset. */
	close(fd);
	close(lst);
	slots[0] = c;
	slots[1] = s;
	slots[2] = hl;
	slots[3] = d;
	slots[4] = e;
	for (int i = 0; i < 5; i++)
		if (slots[i] >= 0)
			timeouts(slots[i]);
}

static void do_remote(struct rng *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = remote };
	int fd;

	a.sin_port = htons((uint16_t)(REMOTE_BASE + below(r, PORTS)));
	if (below(r, 4) == 0) {
		/* A listener over there, for what falls back to TCP. */
		if (setns(there_fd, CLONE_NEWNET))
			return;
		fd = socket(below(r, 2) ? AF_INET : AF_SD, SOCK_STREAM | SOCK_NONBLOCK,
			    below(r, 2) ? 0 : SD_PROTO_INET);
		if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
				listen(fd, (int)below(r, 3)))) {
			close(fd);
			fd = -1;
		}
		/* Back here, or every later call of this thread is wrong. */
		if (setns(here_fd, CLONE_NEWNET))
			abort();
		if (fd >= 0) {
			timeouts(fd);
			put_fd(r, fd);
		}
		return;
	}
	/* A client here, non-blocking or bounded by its send timeout. */
	fd = socket(AF_SD, SOCK_STREAM | (below(r, 2) ? SOCK_NONBLOCK : 0), SD_PROTO_INET);
	if (fd < 0)
		return;
	timeouts(fd);
	put_fd(r, fd);
	connect(fd, (struct sockaddr *)&a, sizeof(a));
}

static void one_call(struct rng *r)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = slot_fd(r);

	switch (below(r, there_fd < 0 ? 23 : 26)) {
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
	case 19:
		do_netlink(r);
		break;
	case 20:
		do_jam(r);
		break;
	case 21:
		/* Rare: a fork costs more than a hundred calls. */
		if (below(r, 16) == 0)
			do_fork(r);
		else
			do_jam(r);
		break;
	case 23:
	case 24:
	case 25:
		do_remote(r);
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
	if (nl_fd >= 0)
		close(nl_fd);
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc == 6 || argc > 7) {
		fprintf(stderr, "usage: sd_fuzz SEED SECONDS [PROCS [THREADS [NETNS ADDR]]]\n");
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
	if (argc == 7) {
		here_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		there_fd = open(argv[5], O_RDONLY | O_CLOEXEC);
		if (here_fd < 0 || there_fd < 0 || inet_pton(AF_INET, argv[6], &remote) != 1) {
			fprintf(stderr, "sd_fuzz: bad NETNS or ADDR\n");
			return 2;
		}
	}
	for (int i = 0; i < SLOTS; i++)
		slots[i] = -1;
	setpgid(0, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGIO, SIG_IGN);
	signal(SIGURG, SIG_IGN);
	nl_family = nl_resolve(SD_GENL_NAME);
	if (nl_family < 0) {
		fprintf(stderr, "sd_fuzz: no generic netlink family \"%s\"\n", SD_GENL_NAME);
		return 1;
	}
	if (there_fd >= 0) {
		link_family = nl_resolve(SD_LINK_GENL_NAME);
		if (link_family < 0) {
			fprintf(stderr, "sd_fuzz: no generic netlink family \"%s\"\n",
				SD_LINK_GENL_NAME);
			return 1;
		}
		link_first();
	}
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
	pthread_t daemon;
	uint64_t daemon_seed = seed * 1000003ULL + 999;
	int has_daemon = there_fd >= 0 &&
			 !pthread_create(&daemon, NULL, link_daemon, &daemon_seed);
	for (int t = 0; t < threads; t++)
		pthread_join(w[t].th, NULL);
	if (has_daemon)
		pthread_join(daemon, NULL);
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
	/* The requests changed the rules for real: leave none behind. */
	int err = nl_flush();

	if (err) {
		fprintf(stderr, "sd_fuzz: flushing the rules: %s\n", strerror(-err));
		bad = 1;
	}
	if (bad)
		return 1;
	printf("sd_fuzz: netlink: %lu requests, %lu acked, %lu refused, %lu rules added, "
	       "%lu dump parts\n", nl_sent, nl_ok, nl_refused, nl_added, nl_parts);
	if (there_fd >= 0)
		printf("sd_fuzz: link daemon: %lu upcalls, %lu verdicts, %lu incoming queued\n",
		       link_upcalls, link_verdicts, link_incoming);
	printf("sd_fuzz: %lu calls in the first process\n", calls_made);
	return 0;
}
