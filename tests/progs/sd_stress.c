// SPDX-License-Identifier: GPL-2.0
/*
 * sd_stress: move data through many connections between two processes and
 * check every byte; or hold many connections open at once.
 *
 *   sd_stress bytes FAMILY CONNS TOTAL SEED
 *       CONNS connections from a child process to this one; each carries
 *       TOTAL/CONNS bytes in sends of random size (1 byte to 256 KiB,
 *       seeded), both ways at once.  Every byte received is compared with
 *       the stream the sender generated.
 *   sd_stress soak FAMILY CONNS SECONDS SEED
 *       CONNS slots in a child process, each making one connection after
 *       another to this process until SECONDS are up (churn: connections
 *       open and close all through the run).  Each connection carries a
 *       session both ways at once, of a length its slot and number pick
 *       from SEED (0 to 4 MiB, log-uniform), in sends of random size;
 *       every byte is checked at both ends, and the two processes must
 *       agree on the number of connections.
 *   sd_stress conns FAMILY COUNT
 *       COUNT connections from a child process, all open at once; each
 *       carries one ping-pong, then all are closed.
 *
 * FAMILY is sd or tcp.  Prints one JSON object; exits non-zero on any
 * mismatch or error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sd.h>

static int family_domain;

static void die(const char *what)
{
	fprintf(stderr, "sd_stress: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A reproducible byte stream: xorshift64* words, consumed byte by byte. */
struct stream {
	uint64_t state;
	uint64_t word;
	unsigned int left;	/* bytes of word not yet used */
};

static void stream_init(struct stream *s, uint64_t seed)
{
	s->state = seed * 0x9E3779B97F4A7C15ULL + 1;
	s->left = 0;
}

static uint64_t next64(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1DULL;
}

static void stream_fill(struct stream *s, unsigned char *buf, size_t n)
{
	while (n && s->left) {
		*buf++ = (unsigned char)(s->word >> (8 * (8 - s->left)));
		s->left--;
		n--;
	}
	while (n >= 8) {
		uint64_t w = next64(&s->state);

		memcpy(buf, &w, 8);
		buf += 8;
		n -= 8;
	}
	if (n) {
		s->word = next64(&s->state);
		s->left = 8;
		stream_fill(s, buf, n);
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Room for @want descriptors (raising the hard limit needs root). */
static void raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_max < want) {
		struct rlimit more = { want, want };

		if (!setrlimit(RLIMIT_NOFILE, &more))
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

static int make_listener(int backlog, uint16_t *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int fd = socket(family_domain, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(fd, backlog) ||
	    getsockname(fd, (struct sockaddr *)&sin, &len))
		die("listener");
	*port = ntohs(sin.sin_port);
	return fd;
}

static int dial(uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd = socket(family_domain, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(port);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)))
		die("connect");
	return fd;
}

/* ---- bytes ------------------------------------------------------------- */

struct flow {
	int fd;
	uint64_t seed;		/* of the stream this end sends */
	uint64_t peer_seed;	/* of the stream it receives */
	size_t bytes;
	int bad;
	uint64_t checksum;
};

#define MAX_CHUNK (256 * 1024)

static void *sender(void *arg)
{
	struct flow *f = arg;
	unsigned char *buf = malloc(MAX_CHUNK);
	uint64_t sizes = f->seed ^ 0xABCDEF;
	struct stream s;
	size_t sent = 0;

	if (!buf)
		die("malloc");
	stream_init(&s, f->seed);
	while (sent < f->bytes) {
		size_t n = 1 + next64(&sizes) % MAX_CHUNK;
		size_t off = 0;

		/* Mostly small, sometimes large. */
		if (next64(&sizes) % 4)
			n = 1 + n % 4096;
		if (n > f->bytes - sent)
			n = f->bytes - sent;
		stream_fill(&s, buf, n);
		while (off < n) {
			ssize_t r = send(f->fd, buf + off, n - off, MSG_NOSIGNAL);

			if (r < 0) {
				if (errno == EINTR)
					continue;
				f->bad = 1;
				free(buf);
				return NULL;
			}
			off += (size_t)r;
		}
		sent += n;
	}
	shutdown(f->fd, SHUT_WR);
	free(buf);
	return NULL;
}

static void *receiver(void *arg)
{
	struct flow *f = arg;
	unsigned char *buf = malloc(MAX_CHUNK), *want = malloc(MAX_CHUNK);
	uint64_t sizes = f->peer_seed ^ 0x123457;
	struct stream s;
	size_t got = 0;

	if (!buf || !want)
		die("malloc");
	stream_init(&s, f->peer_seed);
	for (;;) {
		size_t n = 1 + next64(&sizes) % MAX_CHUNK;
		ssize_t r = recv(f->fd, buf, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			f->bad = 1;
			break;
		}
		if (r == 0)
			break;
		stream_fill(&s, want, (size_t)r);
		if (memcmp(buf, want, (size_t)r)) {
			fprintf(stderr, "sd_stress: mismatch at byte %zu\n", got);
			f->bad = 1;
			break;
		}
		for (ssize_t i = 0; i < r; i += 64)
			f->checksum = f->checksum * 31 + buf[i];
		got += (size_t)r;
	}
	if (got != f->bytes) {
		fprintf(stderr, "sd_stress: got %zu of %zu bytes\n", got, f->bytes);
		f->bad = 1;
	}
	free(buf);
	free(want);
	return NULL;
}

/* Both directions of each connection at once; returns mismatches. */
static int run_flows(int *fds, int n, size_t per_conn, uint64_t seed,
		     int server)
{
	struct flow *tx = calloc((size_t)n, sizeof(*tx));
	struct flow *rx = calloc((size_t)n, sizeof(*rx));
	pthread_t *th = calloc(2 * (size_t)n, sizeof(*th));
	int bad = 0;

	if (!tx || !rx || !th)
		die("calloc");
	for (int i = 0; i < n; i++) {
		uint64_t up = seed * 1000003 + (uint64_t)i * 2;	/* client->server */
		uint64_t down = up + 1;				/* server->client */

		tx[i] = (struct flow){ .fd = fds[i], .seed = server ? down : up,
				       .bytes = per_conn };
		rx[i] = (struct flow){ .fd = fds[i],
				       .peer_seed = server ? up : down,
				       .bytes = per_conn };
		if (pthread_create(&th[2 * i], NULL, sender, &tx[i]) ||
		    pthread_create(&th[2 * i + 1], NULL, receiver, &rx[i]))
			die("pthread_create");
	}
	for (int i = 0; i < 2 * n; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < n; i++)
		bad += tx[i].bad + rx[i].bad;
	free(tx);
	free(rx);
	free(th);
	return bad;
}

/* The client's connections are made in index order and accepted in the
 * same order, so both ends agree which stream each carries: the client
 * sends its index first. */
static int bytes_mode(int conns, size_t total, uint64_t seed)
{
	size_t per_conn = total / (size_t)conns;
	int *fds = calloc((size_t)conns, sizeof(int));
	uint16_t port;
	int lst, status, bad;
	double t0;
	pid_t pid;

	if (!fds)
		die("calloc");
	lst = make_listener(conns, &port);
	t0 = now();
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		for (int i = 0; i < conns; i++) {
			fds[i] = dial(port);
			if (send(fds[i], &i, sizeof(i), 0) != sizeof(i))
				die("send index");
		}
		bad = run_flows(fds, conns, per_conn, seed, 0);
		_exit(bad ? 1 : 0);
	}
	for (int i = 0; i < conns; i++) {
		int fd = accept(lst, NULL, NULL), idx;

		if (fd < 0 || recv(fd, &idx, sizeof(idx), MSG_WAITALL) !=
		    sizeof(idx) || idx < 0 || idx >= conns)
			die("accept");
		fds[idx] = fd;
	}
	bad = run_flows(fds, conns, per_conn, seed, 1);
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		bad++;
	printf("{\"mode\": \"bytes\", \"conns\": %d, \"bytes_each_way\": %zu, "
	       "\"seconds\": %.2f, \"mismatches\": %d}\n", conns,
	       per_conn * (size_t)conns, now() - t0, bad);
	return bad ? 1 : 0;
}

/* ---- conns ------------------------------------------------------------ */

static long meminfo(const char *key)
{
	char line[256];
	long val = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			val = atol(line + strlen(key) + 1);
	fclose(f);
	return val;
}

static int conns_mode(int count)
{
	int *fds = calloc((size_t)count, sizeof(int));
	int up[2], down[2], status, bad = 0;	/* child->parent, parent->child */
	long avail0 = meminfo("MemAvailable"), avail1;
	uint16_t port;
	char c;
	int lst;
	pid_t pid;

	if (!fds || pipe(up) || pipe(down))
		die("setup");
	lst = make_listener(count, &port);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		long n = 0;

		for (int i = 0; i < count; i++)
			fds[i] = dial(port);
		/* Everything is open: a ping-pong on each, then wait. */
		for (int i = 0; i < count; i++) {
			char b = (char)i, r;

			if (send(fds[i], &b, 1, 0) != 1 ||
			    recv(fds[i], &r, 1, MSG_WAITALL) != 1 || r != (char)~b)
				_exit(1);
			n++;
		}
		if (write(up[1], "x", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(1);
		_exit(n == count ? 0 : 1);
	}
	/* Accept all first: the child dials them all before any ping. */
	for (int i = 0; i < count; i++) {
		fds[i] = accept(lst, NULL, NULL);
		if (fds[i] < 0)
			die("accept");
	}
	for (int i = 0; i < count; i++) {
		char b;

		if (recv(fds[i], &b, 1, MSG_WAITALL) != 1)
			die("recv");
		b = (char)~b;
		if (send(fds[i], &b, 1, 0) != 1)
			die("send");
	}
	if (read(up[0], &c, 1) != 1)
		bad++;
	avail1 = meminfo("MemAvailable");
	if (write(down[1], "x", 1) != 1)
		bad++;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		bad++;
	for (int i = 0; i < count; i++)
		close(fds[i]);
	printf("{\"mode\": \"conns\", \"conns\": %d, \"open_at_once\": %d, "
	       "\"mem_kib\": %ld, \"mem_kib_per_conn\": %.1f, \"errors\": %d}\n",
	       count, count, avail0 - avail1,
	       (double)(avail0 - avail1) / count, bad);
	return bad ? 1 : 0;
}

/* ---- soak ------------------------------------------------------------- */

/*
 * A connection's session: its number in its slot picks its length (0 to
 * 4 MiB, log-uniform, the same at both ends) and the streams each way.
 */
static size_t session_len(uint64_t seed, uint32_t slot, uint32_t num)
{
	uint64_t x = (seed * 1000003 + slot) * 1000003 + num + 1;
	unsigned int bits;

	next64(&x);
	bits = (unsigned int)(next64(&x) % 23);
	return (size_t)(next64(&x) & ((1ULL << bits) - 1));
}

static uint64_t session_seed(uint64_t seed, uint32_t slot, uint32_t num,
			     int down)
{
	return ((seed * 1000003 + slot) * 1000003 + num) * 2 + (uint64_t)down;
}

static struct {
	uint64_t seed;
	double end;
	uint16_t port;
	unsigned long conns, bytes, bad, active;
} soak;

/* Both directions of one session on @fd, every byte checked. */
static void session(int fd, uint32_t slot, uint32_t num, int server)
{
	size_t len = session_len(soak.seed, slot, num);
	struct flow tx = { .fd = fd, .bytes = len,
			   .seed = session_seed(soak.seed, slot, num, server) };
	struct flow rx = { .fd = fd, .bytes = len,
			   .peer_seed = session_seed(soak.seed, slot, num,
						     !server) };
	pthread_t th;

	if (pthread_create(&th, NULL, sender, &tx))
		die("pthread_create");
	receiver(&rx);
	pthread_join(th, NULL);
	if (tx.bad || rx.bad) {
		fprintf(stderr, "sd_stress: soak: %s end of slot %u connection %u (%zu bytes each way) failed\n",
			server ? "server" : "client", slot, num, len);
		__atomic_fetch_add(&soak.bad, 1, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&soak.bytes, len, __ATOMIC_RELAXED);
	__atomic_fetch_add(&soak.conns, 1, __ATOMIC_RELAXED);
}

/* Client: one slot, dialling one connection after another until the end. */
static void *soak_slot(void *arg)
{
	uint32_t slot = (uint32_t)(uintptr_t)arg;

	for (uint32_t num = 0; now() < soak.end; num++) {
		uint32_t hdr[2] = { slot, num };
		int fd = dial(soak.port);

		if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != sizeof(hdr))
			die("send header");
		session(fd, slot, num, 0);
		close(fd);
	}
	return NULL;
}

/* Server: one accepted connection. */
static void *soak_serve(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint32_t hdr[2];

	if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr)) {
		fprintf(stderr, "sd_stress: soak: no header\n");
		__atomic_fetch_add(&soak.bad, 1, __ATOMIC_RELAXED);
	} else {
		session(fd, hdr[0], hdr[1], 1);
	}
	close(fd);
	__atomic_fetch_sub(&soak.active, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct soak_report {
	unsigned long conns, bytes, bad;
};

static int soak_mode(int slots, double seconds, uint64_t seed)
{
	struct soak_report client;
	int done[2], status, lst, bad = 0;
	pthread_attr_t attr;
	double t0 = now();
	pid_t pid;

	soak.seed = seed;
	soak.end = t0 + seconds;
	lst = make_listener(2 * slots, &soak.port);
	if (pipe(done))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		pthread_t *th = calloc((size_t)slots, sizeof(*th));

		close(done[0]);
		close(lst);
		if (!th)
			die("calloc");
		for (int i = 0; i < slots; i++)
			if (pthread_create(&th[i], NULL, soak_slot,
					   (void *)(uintptr_t)i))
				die("pthread_create");
		for (int i = 0; i < slots; i++)
			pthread_join(th[i], NULL);
		client = (struct soak_report){ soak.conns, soak.bytes,
					       soak.bad };
		if (write(done[1], &client, sizeof(client)) != sizeof(client))
			_exit(1);
		_exit(0);
	}
	close(done[1]);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* Serve until the client says it is done (or is gone). */
	for (;;) {
		struct pollfd p[2] = { { .fd = lst, .events = POLLIN },
				       { .fd = done[0], .events = POLLIN } };
		pthread_t th;
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		if (p[1].revents)
			break;
		fd = accept(lst, NULL, NULL);
		if (fd < 0)
			die("accept");
		__atomic_fetch_add(&soak.active, 1, __ATOMIC_RELAXED);
		if (pthread_create(&th, &attr, soak_serve, (void *)(intptr_t)fd))
			die("pthread_create");
	}
	memset(&client, 0, sizeof(client));
	if (read(done[0], &client, sizeof(client)) != sizeof(client))
		bad++;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		bad++;
	/* The client closed its last connection: the servers finish. */
	for (int i = 0; __atomic_load_n(&soak.active, __ATOMIC_ACQUIRE); i++) {
		if (i == 30000) {
			fprintf(stderr, "sd_stress: soak: %lu connections never ended\n",
				soak.active);
			bad++;
			break;
		}
		usleep(1000);
	}
	close(lst);
	if (client.conns != soak.conns) {
		fprintf(stderr, "sd_stress: soak: client made %lu connections, server served %lu\n",
			client.conns, soak.conns);
		bad++;
	}
	bad += (int)(client.bad + soak.bad);
	printf("{\"mode\": \"soak\", \"slots\": %d, \"seconds\": %.2f, "
	       "\"connections\": %lu, \"bytes_each_way\": %lu, "
	       "\"bytes_checked\": %lu, \"mismatches\": %d}\n", slots,
	       now() - t0, soak.conns, soak.bytes, soak.bytes + client.bytes,
	       bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		goto usage;
	if (!strcmp(argv[2], "sd"))
		family_domain = AF_SD;
	else if (!strcmp(argv[2], "tcp"))
		family_domain = AF_INET;
	else
		goto usage;
	raise_nofile(argc > 3 ? (rlim_t)atol(argv[3]) + 64 : 0);
	if (!strcmp(argv[1], "bytes") && argc == 6) {
		int conns = atoi(argv[3]);
		long long total = atoll(argv[4]);

		if (conns < 1 || conns > 4096 || total < conns)
			goto usage;
		return bytes_mode(conns, (size_t)total,
				  strtoull(argv[5], NULL, 0));
	}
	if (!strcmp(argv[1], "soak") && argc == 6) {
		int slots = atoi(argv[3]);
		double secs = atof(argv[4]);

		if (slots < 1 || slots > 1024 || secs <= 0)
			goto usage;
		return soak_mode(slots, secs, strtoull(argv[5], NULL, 0));
	}
	if (!strcmp(argv[1], "conns") && argc == 4) {
		int count = atoi(argv[3]);

		if (count < 1)
			goto usage;
		return conns_mode(count);
	}
usage:
	fprintf(stderr, "usage: sd_stress bytes sd|tcp CONNS TOTAL SEED\n"
			"       sd_stress soak sd|tcp CONNS SECONDS SEED\n"
			"       sd_stress conns sd|tcp COUNT\n");
	return 2;
}
