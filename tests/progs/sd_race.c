// SPDX-License-Identifier: GPL-2.0
/*
 * sd_race: a bind(2) or listen(2) that waits for the socket lock while
 * another thread's connect(2) of the same redirected socket falls back to
 * TCP (test_redirect.py; 75fbe8d).
 *
 *   sd_race bind|listen ROUNDS NETNS SERVER
 *
 * Runs in a network namespace with net.sd.redirect=1 and no link daemon;
 * NETNS is the path of another namespace (/run/netns/NAME), reachable at
 * SERVER, another host as far as AF_SD is concerned.  There the program
 * listens with a plain TCP listener for the connects; here it registers
 * itself as the namespace's link daemon (generic netlink family
 * "sd_link", <linux/sd_link.h>), a stand-in that decides each connect.
 *
 * A blocking connect to another host asks the link daemon, and waits for
 * its verdict holding the socket lock.  That makes the race a sequence,
 * each round, on a fresh socket(AF_SD, SOCK_STREAM, SD_PROTO_INET):
 *
 *   1. the connecting thread connects to SERVER (the stand-in reads the
 *      upcall and says nothing yet: the connect waits, holding the lock);
 *   2. the racing thread binds the socket, or makes it listen: it finds no
 *      TCP socket yet and waits for the lock (seen in /proc: in the system
 *      call, asleep);
 *   3. the stand-in's verdict is TCP (reason handshake), so the connect
 *      falls back, gives the file the TCP socket, unlocks and connects
 *      that;
 *   4. the racing thread, woken, has the lock with a TCP socket in place.
 *
 * The two threads share one CPU, so the woken one usually runs before the
 * TCP connect goes far: its bind or listen reaches the TCP socket first.
 * The bind and the listen meet a rule that denies AF_SD binds (the test
 * adds it): a bind or listen that went down the redirected path after the
 * fallback, as before 75fbe8d, fails there (AF_SD's own check, after TCP's
 * bind succeeded), and that failure released the TCP socket the file had
 * been given (KASAN, NULL
 * pointer in fput() from __sys_bind; on the distribution kernel, a NULL
 * pointer in the connect's __inet_stream_connect()).
 *
 * Then the socket must still work: a connected one echoes through the
 * connection the TCP listener accepted (from the bound port, when the bind
 * said OK), a listening one takes a redirected client and echoes through
 * the connection it accepts.
 *
 * Prints one JSON object: the rounds, how many ended with each pair of
 * answers ("BIND_OR_LISTEN CONNECT"), the rounds whose racing call was
 * seen waiting in the kernel, the fallbacks of clients checking a
 * listener.  Exits 1 at the first pair that is not an answer of this race,
 * or the first socket that does not work, saying which.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/sd.h>
#include <linux/sd_link.h>

enum op { OP_BIND, OP_LISTEN };

static enum op op;
static struct sockaddr_in app;		/* the TCP listener, over there */
static struct sockaddr_in held;		/* bind: a port AF_SD refuses */
static int race_fd;

struct racer {
	sem_t go, done;
	int err;
	pid_t tid;
};

static struct racer connector, racer;
static sem_t started;

static void die(const char *what)
{
	fprintf(stderr, "sd_race: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(int round, const char *what)
{
	fprintf(stderr, "sd_race: round %d: %s\n", round, what);
	exit(1);
}

static const char *errname(int e)
{
	static char other[32];

	switch (e) {
	case 0: return "OK";
	case EINVAL: return "EINVAL";
	case EADDRINUSE: return "EADDRINUSE";
	case EACCES: return "EACCES";
	case EISCONN: return "EISCONN";
	case EALREADY: return "EALREADY";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EBADF: return "EBADF";
	case ENOTSOCK: return "ENOTSOCK";
	default:
		snprintf(other, sizeof(other), "errno%d", e);
		return other;
	}
}

static void pin(size_t cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
}

static void *connector_main(void *arg)
{
	(void)arg;
	pin(0);
	connector.tid = (pid_t)syscall(SYS_gettid);
	sem_post(&started);
	for (;;) {
		sem_wait(&connector.go);
		connector.err = connect(race_fd, (struct sockaddr *)&app,
					sizeof(app)) ? errno : 0;
		sem_post(&connector.done);
	}
	return NULL;
}

static void *racer_main(void *arg)
{
	(void)arg;
	pin(0);		/* the connector's CPU */
	racer.tid = (pid_t)syscall(SYS_gettid);
	sem_post(&started);
	for (;;) {
		sem_wait(&racer.go);
		if (op == OP_BIND)
			racer.err = bind(race_fd, (struct sockaddr *)&held,
					 sizeof(held)) ? errno : 0;
		else
			racer.err = listen(race_fd, 8) ? errno : 0;
		sem_post(&racer.done);
	}
	return NULL;
}

static int wait_done(struct racer *r, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (sem_timedwait(&r->done, &ts))
		if (errno != EINTR)
			return -1;
	return 0;
}

/* Is the racer asleep inside bind or listen? */
static int racer_waits(void)
{
	char path[64], buf[64];
	long nr = op == OP_BIND ? SYS_bind : SYS_listen;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", racer.tid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* "running" while it runs; the number and arguments while blocked. */
	return strtol(buf, NULL, 10) == nr && buf[0] != 'r';
}

static int redirected_socket(void)
{
	int fd = socket(AF_SD, SOCK_STREAM, SD_PROTO_INET);

	if (fd < 0)
		die("socket(AF_SD, SOCK_STREAM, SD_PROTO_INET)");
	return fd;
}

static int domain_of(int fd)
{
	int domain = -1;
	socklen_t len = sizeof(domain);

	/* The raw answer: the family of whatever the file now points at. */
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len))
		return -errno;
	return domain;
}

static int port_of(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (peer ? getpeername(fd, (struct sockaddr *)&a, &len) :
		   getsockname(fd, (struct sockaddr *)&a, &len))
		return -errno;
	return ntohs(a.sin_port);
}

/* Close without TIME_WAIT: the next rounds bind the same port. */
static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static int accept_within(int lst, int ms)
{
	struct pollfd p = { .fd = lst, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return -1;
	return accept(lst, NULL, NULL);
}

static int read_within(int fd, char *buf, size_t n, int ms)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, ms) != 1)
			return -1;
		r = read(fd, buf + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* A message from @a to @b and back. */
static void echo(int round, int a, int b)
{
	char msg[32], in[32];
	size_t n;

	n = (size_t)snprintf(msg, sizeof(msg), "round %d", round);
	if (write(a, msg, n) != (ssize_t)n || read_within(b, in, n, 10000))
		fail(round, "no echo: the message did not come through");
	if (write(b, in, n) != (ssize_t)n || read_within(a, in, n, 10000) ||
	    memcmp(in, msg, n))
		fail(round, "no echo: the reply did not come back");
}

/* A connected socket (fallen back) works: the listener has its peer. */
static void check_connected(int round, int lst, int s, int bound)
{
	int conn = accept_within(lst, 10000);

	if (conn < 0)
		fail(round, "connect said OK, the TCP listener has nobody");
	if (domain_of(s) != AF_INET)
		fail(round, "connected, yet the descriptor is not TCP's");
	if (port_of(s, 0) != port_of(conn, 1))
		fail(round, "the listener's peer is not this socket");
	if (bound && port_of(s, 0) != ntohs(held.sin_port))
		fail(round, "bind said OK, the connection has another port");
	echo(round, s, conn);
	reset_close(s);
	close(conn);
}

/* A listening socket works: a redirected client reaches it. */
static void check_listening(int round, int s)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int c, conn, port;

	if (domain_of(s) != AF_INET)
		fail(round, "listening after the fallback, yet not TCP");
	port = port_of(s, 0);
	if (port <= 0)
		fail(round, "the listener has no port");
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	c = redirected_socket();
	if (connect(c, (struct sockaddr *)&a, sizeof(a)))
		fail(round, "a client cannot connect to the listener");
	conn = accept_within(s, 10000);
	if (conn < 0)
		fail(round, "the listener accepts nobody (the client is not "
		     "in the queue of the descriptor's socket)");
	echo(round, c, conn);
	reset_close(c);
	close(conn);
}

/*
 * Is (the racing call's answer, the connect's) one of this race?  The
 * racing call runs after the fallback, so it is TCP's call on TCP's socket.
 * TCP's connect begins before the socket becomes TCP's (sd_tcp_switch()),
 * so today it always finds that connect under way: EINVAL (the tests ask
 * for that); the other answers below are TCP's for a call that comes
 * first.
 */
static int allowed(int oe, int ce)
{
	if (op == OP_BIND)
		/*
		 * OK: the bind came before TCP's connect bound the socket
		 * (which then connects from that port).  EINVAL: after, as
		 * TCP answers a bind of a bound socket.  The connect
		 * succeeds either way.  (AF_SD's EADDRINUSE would be the
		 * redirected path.)
		 */
		return ce == 0 && (oe == 0 || oe == EINVAL);
	/*
	 * OK: the listen came before TCP's connect: a TCP listener, and the
	 * connect gets TCP's EISCONN.  EINVAL: after, TCP's answer for a
	 * connecting or connected socket.  (AF_SD's EACCES would be the
	 * redirected path.)
	 */
	return (oe == 0 && ce == EISCONN) || (oe == EINVAL && ce == 0);
}

/* ---- the stand-in link daemon: just enough generic netlink ---- */

/* <linux/netlink.h>'s NLA_ macros mix signs; these sizes are plain. */
#define ATTR_HDR	((size_t)sizeof(struct nlattr))
#define ALIGN4(n)	(((size_t)(n) + 3) & ~(size_t)3)
#define GENL_HDR	((size_t)sizeof(struct genlmsghdr))

static int nl_fd;
static __u16 link_family;
static __u32 nl_seq;

struct nl_msg {
	struct nlmsghdr n;
	struct genlmsghdr g;
	char attrs[256];
};

static void nl_start(struct nl_msg *m, __u16 type, __u8 cmd, __u16 flags)
{
	memset(m, 0, sizeof(*m));
	m->n.nlmsg_len = (__u32)(sizeof(struct nlmsghdr) + GENL_HDR);
	m->n.nlmsg_type = type;
	m->n.nlmsg_flags = NLM_F_REQUEST | flags;
	m->n.nlmsg_seq = ++nl_seq;
	m->g.cmd = cmd;
	m->g.version = 1;
}

static void nl_put(struct nl_msg *m, __u16 type, const void *data, size_t len)
{
	size_t at = ALIGN4(m->n.nlmsg_len);
	struct nlattr *a = (struct nlattr *)((char *)m + at);

	a->nla_type = type;
	a->nla_len = (__u16)(ATTR_HDR + len);
	memcpy((char *)a + ATTR_HDR, data, len);
	m->n.nlmsg_len = (__u32)(at + ALIGN4(a->nla_len));
}

/*
 * The next message for us within @ms into @buf: its length, or -1 when
 * none came.
 */
static ssize_t nl_recv(char *buf, size_t len, int ms)
{
	struct pollfd p = { .fd = nl_fd, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return -1;
	return recv(nl_fd, buf, len, 0);
}

/* Send @m and read its answer: 0 or -errno; a reply's payload in @reply. */
static int nl_call(struct nl_msg *m, char *reply, size_t rlen)
{
	char buf[8192];
	ssize_t n;

	if (send(nl_fd, m, m->n.nlmsg_len, 0) < 0)
		die("netlink send");
	for (;;) {
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		n = nl_recv(buf, sizeof(buf), 20000);
		if (n < 0)
			die("netlink: no answer");
		for (; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != m->n.nlmsg_seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR)
				return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
			if (reply)
				memcpy(reply, h, h->nlmsg_len < rlen ?
				       h->nlmsg_len : rlen);
			return 0;
		}
	}
}

/* The attribute @type of generic netlink message @h, or NULL. */
static struct nlattr *nl_attr(struct nlmsghdr *h, __u16 type)
{
	size_t off = sizeof(struct nlmsghdr) + GENL_HDR;

	while (off + ATTR_HDR <= h->nlmsg_len) {
		struct nlattr *a = (struct nlattr *)((char *)h + off);

		if (a->nla_len < ATTR_HDR || off + a->nla_len > h->nlmsg_len)
			break;
		if ((a->nla_type & NLA_TYPE_MASK) == type)
			return a;
		off += ALIGN4(a->nla_len);
	}
	return NULL;
}

/* Find the family and serve this namespace from now on. */
static void link_register(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	char reply[8192];
	struct nl_msg m;
	struct nlattr *a;
	int err;

	nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	if (nl_fd < 0 || bind(nl_fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("netlink socket");
	nl_start(&m, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
	nl_put(&m, CTRL_ATTR_FAMILY_NAME, SD_LINK_GENL_NAME,
	       sizeof(SD_LINK_GENL_NAME));
	err = nl_call(&m, reply, sizeof(reply));
	a = err ? NULL : nl_attr((struct nlmsghdr *)reply, CTRL_ATTR_FAMILY_ID);
	if (!a) {
		errno = -err;
		die("the sd_link family");
	}
	memcpy(&link_family, (char *)a + ATTR_HDR, sizeof(link_family));
	nl_start(&m, link_family, SD_LINK_CMD_REGISTER, NLM_F_ACK);
	err = nl_call(&m, NULL, 0);
	if (err) {
		errno = -err;
		die("SD_LINK_CMD_REGISTER");
	}
}

/* The id of the next connect the kernel tells us of, 0 if none comes. */
static __u64 link_upcall(int ms)
{
	char buf[8192];
	ssize_t n;
	__u64 id = 0;

	while (!id) {
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		n = nl_recv(buf, sizeof(buf), ms);
		if (n < 0)
			return 0;
		for (; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			struct genlmsghdr *g = NLMSG_DATA(h);
			struct nlattr *a;

			if (h->nlmsg_type != link_family ||
			    g->cmd != SD_LINK_CMD_CONNECT)
				continue;
			a = nl_attr(h, SD_LINK_A_ID);
			if (a)
				memcpy(&id, (char *)a + ATTR_HDR, sizeof(id));
		}
	}
	return id;
}

/* The verdict for connect @id: over TCP, the daemons' exchange failed. */
static void link_verdict_tcp(int round, __u64 id)
{
	__u8 verdict = SD_LINK_TCP, reason = SD_FALLBACK_HANDSHAKE;
	struct nl_msg m;

	nl_start(&m, link_family, SD_LINK_CMD_VERDICT, NLM_F_ACK);
	nl_put(&m, SD_LINK_A_ID, &id, sizeof(id));
	nl_put(&m, SD_LINK_A_VERDICT, &verdict, sizeof(verdict));
	nl_put(&m, SD_LINK_A_REASON, &reason, sizeof(reason));
	if (nl_call(&m, NULL, 0))
		fail(round, "the kernel took no verdict for the connect");
}

struct tally {
	char key[40];
	int n;
};

static int listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
				 sizeof(one)) ||
	    bind(fd, (struct sockaddr *)a, sizeof(*a)) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)a, &len))
		die("listener on the other host");
	return fd;
}

int main(int argc, char **argv)
{
	struct tally tally[8];
	int ntally = 0, waited = 0, client_fallbacks = 0;
	int rounds, lst, here, there;
	pthread_t thr;
	int i, j;

	if (argc != 5 || (strcmp(argv[1], "bind") && strcmp(argv[1], "listen"))) {
		fprintf(stderr, "usage: sd_race bind|listen ROUNDS NETNS SERVER\n");
		return 2;
	}
	memset(tally, 0, sizeof(tally));
	op = strcmp(argv[1], "bind") ? OP_LISTEN : OP_BIND;
	rounds = atoi(argv[2]);

	/* The other host's listener, made in its namespace. */
	here = open("/proc/self/ns/net", O_RDONLY);
	there = open(argv[3], O_RDONLY);
	if (here < 0 || there < 0 || setns(there, CLONE_NEWNET))
		die(argv[3]);
	app.sin_family = AF_INET;
	if (inet_pton(AF_INET, argv[4], &app.sin_addr) != 1)
		die("SERVER");
	lst = listener(&app);
	if (setns(here, CLONE_NEWNET))
		die("back to this namespace");
	close(here);
	close(there);
	link_register();

	if (op == OP_BIND) {
		/*
		 * A free port, which a rule that denies AF_SD binds (the
		 * test adds it) keeps from a redirected socket: TCP's bind of
		 * it succeeds, AF_SD's check after it fails, and the TCP
		 * socket goes with the failed bind, so TCP can bind it after.
		 */
		socklen_t len = sizeof(held);

		held.sin_family = AF_INET;
		i = socket(AF_INET, SOCK_STREAM, 0);
		if (i < 0 || bind(i, (struct sockaddr *)&held, sizeof(held)) ||
		    getsockname(i, (struct sockaddr *)&held, &len))
			die("a free port");
		close(i);
		i = redirected_socket();
		if (bind(i, (struct sockaddr *)&held, sizeof(held)) == 0 ||
		    errno != EACCES)
			fail(0, "a redirected bind that a rule denies "
			     "is not EACCES");
		close(i);
		i = socket(AF_INET, SOCK_STREAM, 0);
		if (i < 0 || bind(i, (struct sockaddr *)&held, sizeof(held)))
			fail(0, "a denied redirected bind kept the TCP port");
		close(i);
	}

	if (sem_init(&connector.go, 0, 0) || sem_init(&connector.done, 0, 0) ||
	    sem_init(&racer.go, 0, 0) || sem_init(&racer.done, 0, 0) ||
	    sem_init(&started, 0, 0))
		die("sem_init");
	if (pthread_create(&thr, NULL, connector_main, NULL) ||
	    pthread_create(&thr, NULL, racer_main, NULL))
		die("pthread_create");
	/* Both pinned, and the racer's thread id known. */
	sem_wait(&started);
	sem_wait(&started);
	{
		cpu_set_t set;

		/* This thread watches from another CPU, if there is one. */
		if (sched_getaffinity(0, sizeof(set), &set) == 0 &&
		    CPU_COUNT(&set) > 1)
			pin(1);
	}

	for (i = 1; i <= rounds; i++) {
		char key[40];
		int s, ce, oe, tries;
		__u64 id;

		s = redirected_socket();
		race_fd = s;
		sem_post(&connector.go);
		/* 1: the connect asks the daemon, and holds the lock. */
		id = link_upcall(20000);
		if (!id)
			fail(i, "the connect asked no link daemon");
		/* 2: the racing call waits for the lock. */
		sem_post(&racer.go);
		for (tries = 0; tries < 20000 && !racer_waits(); tries++) {
			if (sem_trywait(&racer.done) == 0)
				fail(i, "the racing call did not wait for the "
				     "connect's lock");
			usleep(100);
		}
		if (tries < 20000)
			waited++;
		/* 3: the verdict is TCP, the connect falls back. */
		link_verdict_tcp(i, id);
		if (wait_done(&connector, 30000) || wait_done(&racer, 30000))
			fail(i, "connect or racing call hangs");
		ce = connector.err;
		oe = racer.err;

		snprintf(key, sizeof(key), "%s %s", errname(oe), errname(ce));
		for (j = 0; j < ntally && strcmp(tally[j].key, key); j++)
			;
		if (j == ntally && ntally < 8)
			strcpy(tally[ntally++].key, key);
		if (j < 8)
			tally[j].n++;
		if (!allowed(oe, ce)) {
			char what[120];

			snprintf(what, sizeof(what), "%s %s, connect %s: not an "
				 "answer of this race", argv[1], errname(oe),
				 errname(ce));
			fail(i, what);
		}
		if (ce == 0) {
			check_connected(i, lst, s, op == OP_BIND && oe == 0);
		} else {
			check_listening(i, s);
			client_fallbacks++;
			close(s);
		}
	}

	printf("{\"op\": \"%s\", \"rounds\": %d, \"waited\": %d, "
	       "\"client_fallbacks\": %d, \"answers\": {", argv[1], rounds,
	       waited, client_fallbacks);
	for (j = 0; j < ntally; j++)
		printf("%s\"%s\": %d", j ? ", " : "", tally[j].key, tally[j].n);
	printf("}}\n");
	close(nl_fd);
	close(lst);
	return 0;
}
