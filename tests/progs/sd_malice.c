// SPDX-License-Identifier: GPL-2.0
/*
 * sd_malice: a malicious peer and its victim, for
 * tests/integration/test_malicious_peer.py.
 *
 *   sd_malice attack SEED SECONDS
 *	Listens on 127.0.0.1 (AF_SD), prints {"port": N}, then for SECONDS
 *	accepts one connection after another and, on each, for a random
 *	0.05 to 0.8 s, mixes ordinary sends and receives with writes into
 *	both of its mapped rings: record headers (crafted and random),
 *	records written by hand as a producer (of valid and invalid
 *	lengths, padding, zero-copy records with real, forged, replayed and
 *	mis-sized handles), the data area, credit, positions, flag words,
 *	token and busy words, and the family's ioctls (acquire, release,
 *	wake, zero-copy send).  Closes the listener and prints a summary.
 *
 *   sd_malice victim PORT SEED
 *	Connects to the attacker round after round (until it refuses) and
 *	on each connection receives (plain, non-blocking, peek, waitall,
 *	read), sends, polls and asks FIONREAD, while it also moves checked
 *	bytes through a second, clean connection of its own.  It prints one
 *	JSON summary and exits 0, or exits 1 after printing why: a byte
 *	received on the attacked connection that the attacker cannot have
 *	put there, bytes lost or changed on the clean connection, a round
 *	that did not end in time (a hang).
 *
 * Every byte the attacker can make the victim receive comes from a known
 * set (ALLOWED below): the data bytes it writes or sends are from DATA,
 * every word it writes into the data area is made of allowed bytes (the
 * attacker checks itself), and the kernel's own record headers for its
 * sends (lengths that are multiples of 8 below 8192, flags 1 or 3) are
 * made of allowed bytes too.  The victim sends bytes of VICTIM and its
 * clean connection carries bytes of CLEAN, both outside the set: seeing
 * one of them, or any other byte outside it, on the attacked connection
 * means bytes came from somewhere else (the kernel's memory, the other
 * ring, the other connection).
 *
 * The same SEED replays the same choices; the interleaving of the two
 * processes is the scheduler's.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/sd.h>
#include <linux/sockios.h>

#include "sd_rng.h"

#define PAGE 4096U
#define ROUND_MIN_MS 50
#define ROUND_MAX_MS 800
/* A round the victim sees last longer than this has hung. */
#define ROUND_HANG_MS (ROUND_MAX_MS + 10000)
#define POOL_PAGES 4
#define ZC_SENDS_MAX 12		/* handles stay below 0x20 */
#define RECVBUF 65536

static const unsigned char DATA[] = { 0xa1, 0xb3, 0xc5, 0xd7, 0xe9 };
static const unsigned char VICTIM[] = { 0x23, 0x45, 0x67, 0x89, 0xab };
static const unsigned char CLEAN[] = { 0x31, 0x53, 0x75, 0x97, 0xb9 };

static unsigned char allowed[256];
static unsigned char allowed_list[256];
static unsigned int nallowed;

/*
 * The bytes the victim may receive on the attacked connection: 0 (rings
 * start zeroed and consumers zero what they take), DATA, and the bytes of
 * record headers and zero-copy records: lengths that are multiples of 8
 * (low byte) below 8192 (second byte 0 to 0x1f), small flags and handles
 * (0 to 0x1f), and 0x7f, 0x80, 0xf9, 0xff for the huge and negative
 * values (0xfffffff9 wraps SD_REC_SPACE in 32 bits).
 */
static void make_allowed(void)
{
	for (unsigned int b = 0; b < 256; b++) {
		allowed[b] = b < 0x20 || b % 8 == 0 || b == 0x7f ||
			     b == 0x80 || b == 0xf9 || b == 0xff;
	}
	for (unsigned int i = 0; i < sizeof(DATA); i++)
		allowed[DATA[i]] = 1;
	for (unsigned int b = 0; b < 256; b++)
		if (allowed[b])
			allowed_list[nallowed++] = (unsigned char)b;
}

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("{\"error\": \"");
	vprintf(fmt, ap);
	printf("\"}\n");
	va_end(ap);
	fflush(stdout);
	exit(1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void timeouts(int fd, long us)
{
	struct timeval tv = { us / 1000000, us % 1000000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { 0 };

	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int listener(uint16_t *port)
{
	struct sockaddr_in a = loopback(0);
	socklen_t n = sizeof(a);
	int fd = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(fd, 4) || getsockname(fd, (struct sockaddr *)&a, &n))
		die("listener: %s", strerror(errno));
	*port = ntohs(a.sin_port);
	return fd;
}

/* ---- the attacker ---------------------------------------------------- */

struct ring {
	unsigned char *m;
	struct sd_ring_offset o;
};

struct attack {
	struct rng r;
	int fd;
	struct ring tx, rx;		/* tx: the victim reads it */
	uint64_t pos;			/* where it writes its next record */
	uint64_t seq;			/* its last zero-copy handle */
	unsigned int zc_sends;
	unsigned char *pool;
	unsigned long actions, resets;
	/* Whether this round wrote a token word, and rounds in which the
	 * victim's side was seen owned by a process (libsd). */
	int wrote_token, saw_owner;
	unsigned long owned_rounds;
};

/* The victim's sides: its consumer of tx, its producer of rx. */
static void look_for_owner(struct attack *a)
{
	if (a->wrote_token || a->saw_owner)
		return;
	if (__atomic_load_n((uint32_t *)(a->tx.m + a->tx.o.cons_token), __ATOMIC_RELAXED) ||
	    __atomic_load_n((uint32_t *)(a->rx.m + a->rx.o.prod_token), __ATOMIC_RELAXED)) {
		a->saw_owner = 1;
		a->owned_rounds++;
	}
}

static unsigned char data_byte(struct rng *r)
{
	return DATA[below(r, sizeof(DATA))];
}

static unsigned char allowed_byte(struct rng *r)
{
	return allowed_list[below(r, nallowed)];
}

/* Every word written into the data area goes through here. */
static void put64(struct attack *a, unsigned char *at, uint64_t w, int release)
{
	for (int i = 0; i < 8; i++)
		if (!allowed[(w >> (8 * i)) & 0xff])
			die("attacker: word %#llx has a byte outside the set",
			    (unsigned long long)w);
	if (release)
		__atomic_store_n((uint64_t *)at, w, __ATOMIC_RELEASE);
	else
		memcpy(at, &w, sizeof(w));
	(void)a;
}

static uint64_t header(uint32_t len, uint32_t flags)
{
	return (uint64_t)flags << 32 | len;
}

/* A record length: crafted edges, or a random multiple of 8. */
static uint32_t crafted_len(struct attack *a, uint32_t size, uint32_t off)
{
	static const uint32_t edge[] = {
		0, 1, 7, 8, 9, 15, 16, 17, 24, 0x7fffffff, 0xffffffff,
		0xfffffff8, 0xfffffff9, 0x80000000, 0x80000008,
	};
	struct rng *r = &a->r;

	switch (below(r, 8)) {
	case 0:
		return edge[below(r, sizeof(edge) / sizeof(edge[0]))];
	case 1:		/* the rest of the area: a pad's, or one past it */
		return size - off - SD_REC_HDR_LEN + (below(r, 3) - 1) * 8;
	case 2:
		return size - SD_REC_HDR_LEN - 8 * below(r, 3);
	case 3:
		return size + 8 * below(r, 2);
	default:
		/* Unaligned lengths only below 0x20: the low byte stays in the set. */
		return below(r, 4) ? 8 * below(r, 64) : below(r, 0x20);
	}
}

static uint32_t crafted_flags(struct rng *r)
{
	static const uint32_t flags[] = {
		0, SD_REC_VALID, SD_REC_PAD, SD_REC_VALID | SD_REC_PAD,
		SD_REC_ZC, SD_REC_VALID | SD_REC_ZC,
		SD_REC_VALID | SD_REC_ZC | SD_REC_PAD, 8, 9, 0xff, 0x101,
		0x80000001, 0xffffffff,
	};

	if (below(r, 3))
		return SD_REC_VALID;
	return flags[below(r, sizeof(flags) / sizeof(flags[0]))];
}

static uint64_t random_allowed_word(struct rng *r)
{
	uint64_t w = 0;

	for (int i = 0; i < 8; i++)
		w |= (uint64_t)allowed_byte(r) << (8 * i);
	return w;
}

static unsigned char *data_at(struct ring *g, uint64_t pos)
{
	return g->m + g->o.data + (pos & (g->o.size - 1));
}

/* A header at a chosen offset of the ring the victim reads. */
static void act_header(struct attack *a)
{
	struct rng *r = &a->r;
	uint32_t size = (uint32_t)a->tx.o.size;
	uint32_t off;
	uint64_t w;

	switch (below(r, 6)) {
	case 0:
	case 1:
		off = (uint32_t)(a->pos & (size - 1));
		break;
	case 2:
		off = size - 8;
		break;
	case 3:		/* unaligned */
		off = below(r, size - 7);
		break;
	default:
		off = 8 * below(r, size / 8);
		break;
	}
	if (below(r, 4))
		w = header(crafted_len(a, size, off & ~7U), crafted_flags(r));
	else
		w = random_allowed_word(r);
	put64(a, a->tx.m + a->tx.o.data + off, w, off % 8 == 0);
	/* Sometimes go on after it, as if it were a record. */
	if (below(r, 2) && off % 8 == 0)
		a->pos = (a->pos & ~(uint64_t)(size - 1)) + off +
			 SD_REC_SPACE((uint32_t)w % size);
}

static void wake(struct attack *a, uint32_t dir)
{
	ioctl(a->fd, SD_IOC_WAKE, &dir);
}

static void maybe_wake(struct attack *a)
{
	uint32_t f = __atomic_load_n((uint32_t *)(a->tx.m + a->tx.o.cons_flags),
				     __ATOMIC_SEQ_CST);

	if (f & SD_RING_READER_WAIT || !below(&a->r, 4))
		wake(a, SD_TOKEN_TX);
}

/* A record written by hand at pos, as a producer would (or nearly). */
static void act_record(struct attack *a)
{
	struct rng *r = &a->r;
	uint32_t size = (uint32_t)a->tx.o.size;
	uint32_t off = (uint32_t)(a->pos & (size - 1));
	uint32_t len = 8 * (1 + below(r, 32)), fill, flags = SD_REC_VALID;
	unsigned char *at = a->tx.m + a->tx.o.data + off;

	if (below(r, 8) == 0)
		len = crafted_len(a, size, off);
	if (off + 8 >= size)
		return;
	fill = len < size - off - 8 ? len : size - off - 8;
	if (below(r, 4) == 0)
		fill = below(r, fill + 1);	/* says more than it wrote */
	for (uint32_t i = 0; i < fill; i++)
		at[8 + i] = data_byte(r);
	if (below(r, 10) == 0)
		flags = crafted_flags(r);
	if (len < 8 && below(r, 2))
		len = 8;
	put64(a, at, header(len, flags), 1);
	a->pos += SD_REC_SPACE(len);
	if (below(r, 2))
		__atomic_store_n((uint64_t *)(a->tx.m + a->tx.o.prod_pos),
				 a->pos, __ATOMIC_RELEASE);
	maybe_wake(a);
}

/* A zero-copy record: a real handle, or a forged, replayed or skipped
 * one, of the right length or not. */
static void act_zc(struct attack *a)
{
	struct rng *r = &a->r;
	uint32_t size = (uint32_t)a->tx.o.size;
	uint32_t off = (uint32_t)(a->pos & (size - 1));
	uint32_t pages = 1 + below(r, POOL_PAGES);
	static const uint32_t lens[] = {
		0, 1, PAGE, 2 * PAGE, SD_ZC_MAX, SD_ZC_MAX + 8, 0xffffffff,
	};
	uint32_t len = pages * PAGE, rlen = 16, flags = SD_REC_VALID | SD_REC_ZC;
	uint64_t seq;

	if (a->pool && a->zc_sends < ZC_SENDS_MAX && below(r, 3)) {
		struct sd_zc_send zs = { 0 };

		zs.addr = (uintptr_t)a->pool;
		zs.len = len;
		zs.flags = SD_ZC_DONTWAIT;
		if (!ioctl(a->fd, SD_IOC_ZC_SEND, &zs)) {
			a->seq = zs.seq;
			a->zc_sends++;
		}
	}
	seq = a->seq;
	switch (below(r, 10)) {
	case 0:
		seq++;
		break;
	case 1:
		seq = seq ? seq - 1 : 0;
		break;
	case 2:
		seq = below(r, 2) ? ~0ULL : 1ULL << 63;
		break;
	case 3:
		seq = below(r, 3);
		break;
	}
	if (below(r, 4) == 0)
		len = lens[below(r, sizeof(lens) / sizeof(lens[0]))];
	if (below(r, 8) == 0)
		rlen = below(r, 2) ? 8 : 24;
	if (below(r, 10) == 0)
		flags |= SD_REC_PAD;
	if (off + 8 + 16 > size)
		return;
	put64(a, data_at(&a->tx, a->pos) + 8, seq, 0);
	put64(a, data_at(&a->tx, a->pos) + 16,
	      (uint64_t)(below(r, 8) ? 0 : 0xff) << 32 | len, 0);
	put64(a, data_at(&a->tx, a->pos), header(rlen, flags), 1);
	a->pos += SD_REC_SPACE(rlen);
	maybe_wake(a);
}

/* Bytes sprayed over a data area (the victim's TX ring's too). */
static void act_spray(struct attack *a)
{
	struct rng *r = &a->r;
	struct ring *g = below(r, 3) ? &a->tx : &a->rx;
	uint32_t size = (uint32_t)g->o.size;
	uint32_t n = 1 + below(r, 256);
	uint32_t off = below(r, size - n + 1);
	unsigned char *at = g->m + g->o.data + off;
	int zero = below(r, 4) == 0;

	for (uint32_t i = 0; i < n; i++)
		at[i] = zero ? 0 : below(r, 2) ? data_byte(r) : allowed_byte(r);
}

/* A word of a ring's first page: credit, positions, flags, tokens, busy. */
static void act_word(struct attack *a)
{
	struct rng *r = &a->r;
	struct ring *g = below(r, 2) ? &a->tx : &a->rx;
	const struct sd_ring_offset *o = &g->o;
	uint64_t cur, v;
	unsigned int which = below(r, 8);
	uint64_t field[] = { o->consumer, o->prod_pos, o->cons_pos,
			     o->prod_flags, o->cons_flags, o->cons_off,
			     o->prod_token, o->cons_token };
	unsigned char *at = g->m + field[which];

	if (which >= 6)
		a->wrote_token = 1;

	if (which < 3) {
		static const uint64_t edge[] = {
			0, 3, 8, 1ULL << 40, ~7ULL, ~0ULL, 1ULL << 62,
			1ULL << 63,
		};

		cur = __atomic_load_n((uint64_t *)at, __ATOMIC_RELAXED);
		switch (below(r, 6)) {
		case 0:
			v = edge[below(r, sizeof(edge) / sizeof(edge[0]))];
			break;
		case 1:
			v = next(r);
			break;
		case 2:
			v = cur + 8 * (below(r, 16) + 1);
			break;
		case 3:
			v = cur - 8 * (below(r, 16) + 1);
			break;
		case 4:
			v = cur + o->size * (below(r, 3) + 1);
			break;
		default:
			v = a->pos + 8 * below(r, 4);
			break;
		}
		__atomic_store_n((uint64_t *)at, v, __ATOMIC_RELEASE);
		return;
	}
	{
		static const uint32_t edge[] = {
			0, 1, 2, 3, 0x80000000, 0x80000003, 0xffffffff,
			0x7fffffff,
		};
		uint32_t w = below(r, 3) ? edge[below(r, 8)] : (uint32_t)next(r);

		switch (below(r, 4)) {
		case 0:
			__atomic_fetch_or((uint32_t *)at, w, __ATOMIC_SEQ_CST);
			break;
		case 1:
			__atomic_fetch_and((uint32_t *)at, ~w, __ATOMIC_SEQ_CST);
			break;
		case 2:
			__atomic_fetch_add((uint32_t *)at, w, __ATOMIC_SEQ_CST);
			break;
		default:
			__atomic_store_n((uint32_t *)at, w, __ATOMIC_RELEASE);
			break;
		}
	}
}

static void act_token(struct attack *a)
{
	struct rng *r = &a->r;
	/* The attacker's busy counts: its own memory, as any owner's. */
	static uint32_t busy[2];
	struct sd_token tok = { 0 };
	uint32_t dir = below(r, 2);

	if (below(r, 4) == 0) {
		ioctl(a->fd, SD_IOC_RELEASE, &dir);
		return;
	}
	tok.dir = below(r, 16) ? dir : (uint32_t)next(r);
	tok.busy = below(r, 16) ? (uintptr_t)&busy[dir] : next(r);
	if (ioctl(a->fd, SD_IOC_ACQUIRE, &tok))
		return;
	if (tok.dir == SD_TOKEN_TX)
		a->pos = tok.pos;
	/* An owner that stays busy, or leaves, or lies about busy. */
	if (below(r, 4) == 0 && tok.dir <= SD_TOKEN_RX)
		__atomic_fetch_add(&busy[tok.dir], 1, __ATOMIC_SEQ_CST);
}

static void act_send(struct attack *a)
{
	struct rng *r = &a->r;
	unsigned char buf[4096];
	/* Multiples of 8: the kernel's record lengths stay multiples of 8. */
	size_t n = 8 * (1 + below(r, sizeof(buf) / 8));

	for (size_t i = 0; i < n; i++)
		buf[i] = data_byte(r);
	if (send(a->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
	    (errno == ECONNRESET || errno == EPIPE))
		a->resets++;
}

static void act_recv(struct attack *a)
{
	static unsigned char buf[65536];
	struct rng *r = &a->r;
	int flags = MSG_DONTWAIT | (below(r, 8) ? 0 : MSG_PEEK);

	look_for_owner(a);
	if (recv(a->fd, buf, 1 + below(r, sizeof(buf)), flags) < 0 &&
	    errno == ECONNRESET)
		a->resets++;
}

static void act_misc(struct attack *a)
{
	struct rng *r = &a->r;
	struct pollfd p = { a->fd, POLLIN | POLLOUT, 0 };
	int n;

	switch (below(r, 5)) {
	case 0:
		poll(&p, 1, 0);
		break;
	case 1:
		ioctl(a->fd, SIOCINQ, &n);
		break;
	case 2:
		wake(a, below(r, 8) ? below(r, 2) : (uint32_t)next(r));
		break;
	case 3:
		usleep(below(r, 2000));
		break;
	default:
		if (below(r, 100) == 0)
			shutdown(a->fd, SHUT_WR);
		break;
	}
}

static void *map_ring(int fd, uint64_t off, uint64_t len)
{
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);

	if (m == MAP_FAILED)
		die("attacker: mmap of a ring: %s", strerror(errno));
	return m;
}

static void attack_round(struct attack *a, uint64_t until)
{
	struct rng *r = &a->r;
	struct sd_mmap_offsets off;
	socklen_t n = sizeof(off);
	unsigned long resets = a->resets, after = 0;
	unsigned int hostile;

	if (getsockopt(a->fd, SOL_SD, SD_MMAP_OFFSETS, &off, &n))
		die("attacker: SD_MMAP_OFFSETS: %s", strerror(errno));
	a->tx.o = off.tx;
	a->rx.o = off.rx;
	a->tx.m = map_ring(a->fd, SD_PGOFF_TX_RING, off.tx.mmap_len);
	a->rx.m = map_ring(a->fd, SD_PGOFF_RX_RING, off.rx.mmap_len);
	if (off.tx.size > 8192)
		die("attacker: the victim's ring is %llu bytes, more than 8192",
		    (unsigned long long)off.tx.size);
	a->pos = 0;
	a->seq = 0;
	a->wrote_token = 0;
	a->saw_owner = 0;
	a->zc_sends = 0;
	a->pool = mmap(NULL, POOL_PAGES * PAGE, PROT_READ | PROT_WRITE,
		       MAP_SHARED, a->fd, SD_PGOFF_POOL);
	if (a->pool == MAP_FAILED) {
		a->pool = NULL;
	} else {
		for (unsigned int i = 0; i < POOL_PAGES * PAGE; i++)
			a->pool[i] = data_byte(r);
	}

	/* Half the rounds start with a few honest sends. */
	if (below(r, 2)) {
		for (unsigned int i = below(r, 8); i; i--)
			act_send(a);
	}
	/*
	 * How hostile this round is: the share of actions that write into
	 * the rings or play with tokens, against honest sends and receives.
	 */
	hostile = (const unsigned int[]){ 1, 5, 20, 60, 100 }[below(r, 5)];
	while (now_ms() < until) {
		unsigned int w = below(r, 100);

		/* The connection is gone: a little more, then the next. */
		if (a->resets > resets && ++after > 200)
			break;
		a->actions++;
		if (below(r, 100) >= hostile)
			w = w < 60 ? 0 : w < 90 ? 15 : 99;
		if (w < 12)
			act_send(a);
		else if (w < 20)
			act_recv(a);
		else if (w < 25)
			act_token(a);
		else if (w < 40)
			act_record(a);
		else if (w < 55)
			act_header(a);
		else if (w < 62)
			act_zc(a);
		else if (w < 72)
			act_spray(a);
		else if (w < 90)
			act_word(a);
		else
			act_misc(a);
	}
	if (a->pool)
		munmap(a->pool, POOL_PAGES * PAGE);
	munmap(a->tx.m, a->tx.o.mmap_len);
	munmap(a->rx.m, a->rx.o.mmap_len);
}

static int attacker(uint64_t seed, double seconds)
{
	uint16_t port;
	int lfd = listener(&port);
	uint64_t end = now_ms() + (uint64_t)(seconds * 1000);
	struct attack a = { 0 };
	unsigned long rounds = 0;

	printf("{\"port\": %u}\n", port);
	fflush(stdout);
	while (now_ms() < end) {
		struct pollfd p = { lfd, POLLIN, 0 };
		uint64_t until;

		if (poll(&p, 1, 100) <= 0)
			continue;
		a.fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (a.fd < 0)
			continue;
		timeouts(a.fd, 50000);
		a.r.s = seed * 0x100000001b3ULL + rounds;
		until = now_ms() + ROUND_MIN_MS +
			below(&a.r, ROUND_MAX_MS - ROUND_MIN_MS);
		if (until > end)
			until = end;
		attack_round(&a, until);
		close(a.fd);
		rounds++;
	}
	close(lfd);
	printf("{\"rounds\": %lu, \"actions\": %lu, \"resets_seen\": %lu, "
	       "\"victim_owned\": %lu}\n",
	       rounds, a.actions, a.resets, a.owned_rounds);
	return 0;
}

/* ---- the victim ---------------------------------------------------------- */

struct clean {
	int c, s;
	uint64_t sent[2], got[2];	/* [0]: c to s, [1]: s to c */
	unsigned long steps;
};

static unsigned char clean_byte(uint64_t i, int dir)
{
	return CLEAN[(i + i / 7 + (uint64_t)dir) % sizeof(CLEAN)];
}

/* Move n checked bytes one way through the clean connection. */
static void clean_step(struct clean *k, struct rng *r)
{
	int dir = (int)below(r, 2);
	int from = dir ? k->s : k->c, to = dir ? k->c : k->s;
	unsigned char buf[8192];
	size_t n = 1 + below(r, sizeof(buf));
	uint64_t deadline = now_ms() + 10000;

	for (size_t i = 0; i < n; i++)
		buf[i] = clean_byte(k->sent[dir] + i, dir);
	for (size_t done = 0; done < n;) {
		ssize_t m = send(from, buf + done, n - done, MSG_NOSIGNAL);

		if (m < 0 && errno != EAGAIN && errno != EINTR)
			die("clean connection: send: %s", strerror(errno));
		if (m > 0)
			done += (size_t)m;
		if (now_ms() > deadline)
			die("clean connection: send hangs");
	}
	k->sent[dir] += n;
	while (k->got[dir] < k->sent[dir]) {
		ssize_t m = recv(to, buf, sizeof(buf), 0);

		if (m < 0 && errno != EAGAIN && errno != EINTR)
			die("clean connection: recv: %s", strerror(errno));
		if (m == 0)
			die("clean connection: unexpected end of stream");
		for (ssize_t i = 0; i < m; i++)
			if (buf[i] != clean_byte(k->got[dir] + (uint64_t)i, dir))
				die("clean connection: byte %llu is %#x, not %#x",
				    (unsigned long long)(k->got[dir] + (uint64_t)i),
				    buf[i], clean_byte(k->got[dir] + (uint64_t)i, dir));
		if (m > 0)
			k->got[dir] += (uint64_t)m;
		if (now_ms() > deadline)
			die("clean connection: recv hangs (%llu of %llu bytes)",
			    (unsigned long long)k->got[dir],
			    (unsigned long long)k->sent[dir]);
	}
	k->steps++;
}

static void clean_open(struct clean *k)
{
	uint16_t port;
	int lfd = listener(&port);
	struct sockaddr_in a = loopback(port);

	memset(k, 0, sizeof(*k));
	k->c = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (k->c < 0 || connect(k->c, (struct sockaddr *)&a, sizeof(a)))
		die("clean connection: connect: %s", strerror(errno));
	k->s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (k->s < 0)
		die("clean connection: accept: %s", strerror(errno));
	close(lfd);
	timeouts(k->c, 2000000);
	timeouts(k->s, 2000000);
}

struct victim {
	struct rng r;
	int fd;
	unsigned char *sendbuf, *recvbuf;
	size_t sendbuf_len;
	unsigned long long received, sent, peeked;
	unsigned long rounds, ends[3];	/* EOF, ECONNRESET, EPIPE */
	unsigned long odd_errno[8];
	int odd_errno_val[8];
	unsigned int nodd;
	uint64_t longest_ms;
};

enum { END_EOF, END_RESET, END_PIPE };

static void odd(struct victim *v, int e)
{
	for (unsigned int i = 0; i < v->nodd; i++)
		if (v->odd_errno_val[i] == e) {
			v->odd_errno[i]++;
			return;
		}
	if (v->nodd < 8) {
		v->odd_errno_val[v->nodd] = e;
		v->odd_errno[v->nodd++] = 1;
	}
}

static void check_bytes(struct victim *v, const unsigned char *b, ssize_t n,
			const char *how)
{
	for (ssize_t i = 0; i < n; i++)
		if (!allowed[b[i]])
			die("round %lu: %s got byte %#x at %lld of %lld (after %llu bytes): not the attacker's",
			    v->rounds, how, b[i], (long long)i, (long long)n,
			    v->received);
}

/* -1: the round goes on; else how it ended. */
static int ended(struct victim *v, ssize_t n, int is_recv)
{
	if (n > 0)
		return -1;
	if (n == 0 && is_recv)
		return END_EOF;
	if (n == 0)
		return -1;
	switch (errno) {
	case EAGAIN:
	case EINTR:
		return -1;
	case ECONNRESET:
		return END_RESET;
	case EPIPE:
		return END_PIPE;
	default:
		odd(v, errno);
		return -1;
	}
}

static int victim_step(struct victim *v, struct clean *k)
{
	unsigned char *buf = v->recvbuf;
	struct rng *r = &v->r;
	unsigned int w = below(r, 100);
	ssize_t n;

	if (w < 40) {
		size_t len = 1 + below(r, w < 5 ? 64 : RECVBUF);
		int flags = 0;
		const char *how = "recv";

		switch (below(r, 8)) {
		case 0:
			flags = MSG_PEEK | MSG_DONTWAIT;
			how = "recv(MSG_PEEK)";
			break;
		case 1:
			flags = MSG_WAITALL;
			how = "recv(MSG_WAITALL)";
			len = 1 + below(r, 64);
			break;
		case 2:
		case 3:
			flags = MSG_DONTWAIT;
			break;
		case 4:
			how = "read";
			n = read(v->fd, buf, len);
			goto got;
		}
		n = recv(v->fd, buf, len, flags);
got:
		if (n > 0) {
			check_bytes(v, buf, n, how);
			if (flags & MSG_PEEK)
				v->peeked += (unsigned long long)n;
			else
				v->received += (unsigned long long)n;
		}
		return ended(v, n, 1);
	}
	if (w < 65) {
		size_t len = below(r, 10) ? 1 + below(r, 8192) :
			     16384 + below(r, (unsigned int)v->sendbuf_len - 16384);
		size_t at = below(r, (unsigned int)(v->sendbuf_len - len + 1));

		if (below(r, 4) == 0)
			at &= ~(size_t)(PAGE - 1);
		n = send(v->fd, v->sendbuf + at, len,
			 MSG_NOSIGNAL | (below(r, 2) ? MSG_DONTWAIT : 0));
		if (n > 0)
			v->sent += (unsigned long long)n;
		return ended(v, n, 0);
	}
	if (w < 75) {
		struct pollfd p = { v->fd, POLLIN | POLLOUT, 0 };

		n = poll(&p, 1, (int)below(r, 20));
		if (n > 0 && p.revents & POLLNVAL)
			die("round %lu: poll says POLLNVAL", v->rounds);
		return -1;
	}
	if (w < 80) {
		int q;

		if (ioctl(v->fd, SIOCINQ, &q))
			odd(v, errno);
		return -1;
	}
	clean_step(k, r);
	return -1;
}

static int victim(uint16_t port, uint64_t seed)
{
	struct sockaddr_in a = loopback(port);
	struct victim v = { 0 };
	struct clean k;
	uint64_t start = now_ms();

	v.r.s = ~seed;
	v.sendbuf_len = 256 * 1024;
	v.sendbuf = malloc(v.sendbuf_len);
	/* Under sdrun both come from the zero-copy pool (pages remapped). */
	v.recvbuf = malloc(RECVBUF);
	if (!v.sendbuf || !v.recvbuf)
		die("malloc");
	for (size_t i = 0; i < v.sendbuf_len; i++)
		v.sendbuf[i] = VICTIM[i % sizeof(VICTIM)];
	clean_open(&k);
	clean_step(&k, &v.r);

	for (;;) {
		static const int sizes[] = { 8192, 16384, 32768 };
		int rcv = below(&v.r, 2) ? 4096 : 8192;	/* ring 4 or 8 KiB */
		int snd = sizes[below(&v.r, 3)];
		uint64_t t0;
		int end = -1;

		v.fd = socket(AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (v.fd < 0)
			die("socket: %s", strerror(errno));
		setsockopt(v.fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
		setsockopt(v.fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
		timeouts(v.fd, 100000);
		if (connect(v.fd, (struct sockaddr *)&a, sizeof(a))) {
			close(v.fd);
			if (errno == ECONNREFUSED)
				break;		/* the attacker is done */
			die("connect: %s", strerror(errno));
		}
		t0 = now_ms();
		while (end < 0) {
			end = victim_step(&v, &k);
			if (now_ms() - t0 > ROUND_HANG_MS)
				die("round %lu: no end after %llu ms (hang)",
				    v.rounds, (unsigned long long)(now_ms() - t0));
		}
		if (now_ms() - t0 > v.longest_ms)
			v.longest_ms = now_ms() - t0;
		v.ends[end]++;
		v.rounds++;
		close(v.fd);
		if (now_ms() - start > 600000)
			die("still connecting after 600 s");
	}
	/* The clean connection carries on after the attack. */
	for (int i = 0; i < 16; i++)
		clean_step(&k, &v.r);
	close(k.c);
	close(k.s);

	printf("{\"rounds\": %lu, \"eof\": %lu, \"econnreset\": %lu, \"epipe\": %lu, "
	       "\"received\": %llu, \"peeked\": %llu, \"sent\": %llu, "
	       "\"clean_steps\": %lu, \"clean_bytes\": %llu, \"longest_round_ms\": %llu, "
	       "\"allowed\": %u, \"odd_errno\": {",
	       v.rounds, v.ends[END_EOF], v.ends[END_RESET], v.ends[END_PIPE],
	       v.received, v.peeked, v.sent, k.steps,
	       (unsigned long long)(k.got[0] + k.got[1]),
	       (unsigned long long)v.longest_ms, nallowed);
	for (unsigned int i = 0; i < v.nodd; i++)
		printf("%s\"%s\": %lu", i ? ", " : "", strerror(v.odd_errno_val[i]),
		       v.odd_errno[i]);
	printf("}}\n");
	free(v.sendbuf);
	free(v.recvbuf);
	return 0;
}

int main(int argc, char **argv)
{
	make_allowed();
	for (unsigned int i = 0; i < sizeof(VICTIM); i++)
		if (allowed[VICTIM[i]] || allowed[CLEAN[i]])
			die("VICTIM and CLEAN must be outside the set");
	if (argc == 4 && !strcmp(argv[1], "attack"))
		return attacker(strtoull(argv[2], NULL, 0), strtod(argv[3], NULL));
	if (argc == 4 && !strcmp(argv[1], "victim"))
		return victim((uint16_t)atoi(argv[2]), strtoull(argv[3], NULL, 0));
	fprintf(stderr, "usage: sd_malice attack SEED SECONDS | victim PORT SEED\n");
	return 2;
}
