// SPDX-License-Identifier: GPL-2.0
/*
 * sd_zcpool: hostile uses of the zero-copy page pool (kernel/sd_zc.c,
 * Documentation/zerocopy.rst) that need threads, many processes or
 * userfaultfd; tests/integration/test_zc_pool.py drives it.  Plain system
 * calls and the uapi header only: the sender writes its SD_REC_ZC records
 * into the ring by hand, as libsd would, and the receiver takes them with
 * a plain recv() (the kernel's path).
 *
 *   sd_zcpool forkchain N  map a pool; N generations each fork once and
 *                          exit; the first then unmaps.  Prints "ok".
 *   sd_zcpool race N       a thread writes a pool page while the main
 *                          thread sends it N times, BURST at a time; the
 *                          receiver's copies (remapped into its pool)
 *                          must never change after the receive.  Prints
 *                          "ok N".
 *   sd_zcpool pinned       process_vm_writev() pins a pool page for
 *                          writing and stalls on userfaultfd; the page is
 *                          sent; then the write completes.  The receiver
 *                          must get the bytes of the send.  Prints "ok";
 *                          exits 77 if userfaultfd is missing.
 *
 * Exit status 1 with a message on a failure; an alarm fails a hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sd.h>
#include <linux/userfaultfd.h>
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
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE		4096UL
#define GUARD_SECONDS	600

static void __attribute__((noreturn, format(printf, 1, 2)))
fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "sd_zcpool: ");
	vfprintf(stderr, fmt, ap);
	if (errno)
		fprintf(stderr, " (%s)", strerror(errno));
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

/* ---- a connected pair, and the sender's ring ------------------------------ */

struct sender {
	int fd;
	unsigned char *m;
	struct sd_ring_offset o;
	uint32_t token;
	uint32_t busy;		/* its busy count (the kernel reads it here) */
	uint64_t pos;
};

static void pair(int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int lst = socket(AF_SD, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lst < 0 || bind(lst, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lst, 1) || getsockname(lst, (struct sockaddr *)&a, &len))
		fail("listener");
	*c = socket(AF_SD, SOCK_STREAM, 0);
	if (*c < 0 || connect(*c, (struct sockaddr *)&a, sizeof(a)))
		fail("connect");
	*s = accept(lst, NULL, NULL);
	if (*s < 0)
		fail("accept");
	close(lst);
}

static void sender_open(struct sender *t, int fd)
{
	struct sd_mmap_offsets off;
	socklen_t len = sizeof(off);
	struct sd_token tok = { .dir = SD_TOKEN_TX };

	t->fd = fd;
	if (getsockopt(fd, SOL_SD, SD_MMAP_OFFSETS, &off, &len))
		fail("SD_MMAP_OFFSETS");
	t->o = off.tx;
	t->m = mmap(NULL, t->o.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		    fd, SD_PGOFF_TX_RING);
	if (t->m == MAP_FAILED)
		fail("mmap TX ring");
	tok.busy = (uintptr_t)&t->busy;
	if (ioctl(fd, SD_IOC_ACQUIRE, &tok))
		fail("SD_IOC_ACQUIRE");
	t->token = tok.token;
	t->pos = tok.pos;
}

static uint32_t *u32_at(struct sender *t, uint64_t off)
{
	return (uint32_t *)(t->m + off);
}

/* One record by the rules of the ring (a pad first if it would not fit). */
static void sender_write(struct sender *t, const void *payload, uint32_t len,
			 uint32_t flags)
{
	uint64_t size = t->o.size, off = t->pos & (size - 1);
	unsigned char *at;
	uint64_t hdr;

	__atomic_store_n(&t->busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(u32_at(t, t->o.prod_token), __ATOMIC_SEQ_CST) !=
	    t->token)
		fail("lost the send token");
	if (off + SD_REC_SPACE(len) > size) {
		at = t->m + t->o.data + off;
		hdr = (uint64_t)(SD_REC_VALID | SD_REC_PAD) << 32 |
		      (uint32_t)(size - off - SD_REC_HDR_LEN);
		__atomic_store_n((uint64_t *)at, hdr, __ATOMIC_RELEASE);
		t->pos += size - off;
		off = 0;
	}
	at = t->m + t->o.data + off;
	memcpy(at + SD_REC_HDR_LEN, payload, len);
	hdr = (uint64_t)flags << 32 | len;
	__atomic_store_n((uint64_t *)at, hdr, __ATOMIC_RELEASE);
	t->pos += SD_REC_SPACE(len);
	__atomic_store_n((uint64_t *)(t->m + t->o.prod_pos), t->pos,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&t->busy, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(u32_at(t, t->o.cons_flags), __ATOMIC_SEQ_CST) &
	    SD_RING_READER_WAIT) {
		uint32_t dir = SD_TOKEN_TX;

		if (ioctl(t->fd, SD_IOC_WAKE, &dir))
			fail("SD_IOC_WAKE");
	}
}

/* Hand [addr, addr + len) of the sender's pool over, and say so. */
static void zc_send(struct sender *t, void *addr, size_t len)
{
	struct sd_zc_send zs = { .addr = (uintptr_t)addr, .len = len };
	struct sd_zc_rec rec = { 0 };

	if (ioctl(t->fd, SD_IOC_ZC_SEND, &zs))
		fail("SD_IOC_ZC_SEND");
	rec.seq = zs.seq;
	rec.len = (uint32_t)len;
	sender_write(t, &rec, sizeof(rec), SD_REC_VALID | SD_REC_ZC);
}

static void recv_all(int fd, void *buf, size_t n)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = recv(fd, (char *)buf + got, n - got, 0);
		if (r <= 0)
			fail("recv: %zd", r);
		got += (size_t)r;
	}
}

static void *pool(int fd, size_t len)
{
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       SD_PGOFF_POOL);

	if (m == MAP_FAILED)
		fail("mmap pool");
	return m;
}

/* ---- forkchain ---------------------------------------------------------- */

/*
 * Each generation's pool is a fork copy of its parent's.  On a kernel that
 * kept the copies chained and released the chain by recursion, the first
 * generation's unmap overflowed the kernel stack.
 */
static int forkchain(long n)
{
	int s = socket(AF_SD, SOCK_STREAM, 0), p[2];
	unsigned char *m;
	pid_t pid;
	char c;
	size_t at;
	long i;

	if (s < 0 || pipe(p))
		fail("socket or pipe");
	m = pool(s, 4 * PAGE);
	memset(m, 0x5a, 4 * PAGE);
	pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid) {
		close(p[1]);
		if (read(p[0], &c, 1) != 1 || c != 'z')
			fail("the chain broke");
		waitpid(pid, NULL, 0);
		if (munmap(m, 4 * PAGE))
			fail("munmap");
		close(s);
		printf("ok\n");
		return 0;
	}
	/* Generation 1 on: fork, and let the child go on; the last tells. */
	for (i = 1; i < n; i++) {
		at = (size_t)(i % 4) * PAGE;
		if (m[at] != 0x5a)
			fail("generation %ld: pool bytes changed", i);
		m[at + 1] = (unsigned char)i;
		pid = fork();
		if (pid < 0)
			fail("fork at generation %ld", i);
		if (pid)
			_exit(0);
	}
	if (write(p[1], "z", 1) != 1)
		fail("write");
	_exit(0);
}

/* ---- race --------------------------------------------------------------- */

/* Sends made back to back before their pages are received. */
#define BURST		16

static volatile uint64_t *wpage;
static pid_t writer_tid;
static uint64_t writes;
static int stop;

static void *writer(void *arg)
{
	uint64_t k = 0;

	(void)arg;
	writer_tid = (pid_t)syscall(SYS_gettid);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		wpage[0] = ++k;
		wpage[511] = k;
		__atomic_store_n(&writes, k, __ATOMIC_RELEASE);
	}
	return NULL;
}

/*
 * Reads the page the writer writes.  After each send both fault on it:
 * the reader's fault holds the page lock while it maps the page, so the
 * writer's page_mkwrite may have to wait for it between marking the slot
 * writable and mapping it writable, which is where a send must not slip
 * in.  It makes the race more likely; the check does not depend on it.
 */
static void *reader(void *arg)
{
	uint64_t sum = 0;

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
		sum += wpage[256];
	return (void *)(uintptr_t)sum;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Print where the kernel holds thread @tid. */
static void kernel_stack(pid_t tid)
{
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stack", tid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		fprintf(stderr, "writer thread's kernel stack:\n%s", buf);
	}
}

/*
 * Wait until the writer wrote @more times since @from.  The bound only
 * turns a writer that never moves again into a failure, with where it
 * is stuck; it decides nothing else.
 */
static void writer_moves(uint64_t from, uint64_t more)
{
	double until = now() + 120;
	long spins = 0;

	while (__atomic_load_n(&writes, __ATOMIC_ACQUIRE) < from + more) {
		if (++spins % 256 == 0) {
			sched_yield();
			if (now() > until) {
				kernel_stack(writer_tid);
				errno = 0;
				fail("the writer thread has not moved for 120 s (at %llu)",
				     (unsigned long long)from);
			}
		}
	}
}

/*
 * The writer's first write after each send faults (the send removed its
 * mapping): the fault makes the slot writable (page_mkwrite) and then
 * installs the writable entry, while the next send shares the page.  A
 * send that slipped in between left the sender a writable entry for a
 * page the receiver now maps: its bytes would change under the receiver.
 */
static int race(long n)
{
	volatile uint64_t *r;
	uint64_t v0[BURST], w;
	unsigned char *rbuf;
	struct sender t;
	pthread_t th, rd;
	int c, s;
	long i, j;

	pair(&c, &s);
	sender_open(&t, c);
	wpage = pool(c, PAGE);
	rbuf = pool(s, BURST * PAGE);
	wpage[0] = 0;
	if (pthread_create(&th, NULL, writer, NULL) ||
	    pthread_create(&rd, NULL, reader, NULL))
		fail("pthread_create");
	for (i = 0; i < n; i += BURST) {
		/* Back to back: each send meets the fault the one before caused. */
		for (j = 0; j < BURST; j++)
			zc_send(&t, (void *)wpage, PAGE);
		recv_all(s, rbuf, BURST * PAGE);
		for (j = 0; j < BURST; j++)
			v0[j] = ((volatile uint64_t *)(rbuf + (size_t)j * PAGE))[0];
		w = __atomic_load_n(&writes, __ATOMIC_ACQUIRE);
		writer_moves(w, 3);
		for (j = 0; j < BURST; j++) {
			r = (volatile uint64_t *)(rbuf + (size_t)j * PAGE);
			if (r[0] != v0[j] || r[511] > v0[j]) {
				errno = 0;
				fail("send %ld: the received page changed from %llu to %llu/%llu after the receive",
				     i + j, (unsigned long long)v0[j],
				     (unsigned long long)r[0],
				     (unsigned long long)r[511]);
			}
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	pthread_join(rd, NULL);
	printf("ok %ld\n", n);
	return 0;
}

/* ---- pinned ------------------------------------------------------------- */

struct pvw {
	void *local, *remote;
	ssize_t ret;
	int err;
};

static void *pin_writer(void *arg)
{
	struct pvw *w = arg;
	struct iovec l = { w->local, PAGE }, r = { w->remote, PAGE };

	w->ret = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
	w->err = errno;
	return NULL;
}

/*
 * process_vm_writev() pins the remote page (FOLL_PIN | FOLL_WRITE) and
 * then copies into it from the local buffer; the local buffer is missing
 * under userfaultfd, so the copy stops with the pin held until the fault
 * is resolved: a write to a pool page that no fault of the pool sees,
 * as an O_DIRECT read in flight is.  The page is sent meanwhile.
 */
static int pinned(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { 0 };
	struct uffdio_copy cp = { 0 };
	struct uffd_msg msg;
	unsigned char *m, *local, *src, *got;
	struct pollfd pfd;
	struct sender t;
	struct pvw w;
	pthread_t th;
	int c, s, uffd;

	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0) {
		printf("skip: userfaultfd: %s\n", strerror(errno));
		return 77;
	}
	if (ioctl(uffd, UFFDIO_API, &api))
		fail("UFFDIO_API");
	local = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	src = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	got = malloc(PAGE);
	if (local == MAP_FAILED || src == MAP_FAILED || !got)
		fail("mmap");
	reg.range.start = (uintptr_t)local;
	reg.range.len = PAGE;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		fail("UFFDIO_REGISTER");

	pair(&c, &s);
	sender_open(&t, c);
	m = pool(c, PAGE);
	memset(m, 'A', PAGE);

	w.local = local;
	w.remote = m;
	if (pthread_create(&th, NULL, pin_writer, &w))
		fail("pthread_create");
	pfd.fd = uffd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 60000) != 1)
		fail("no userfault from process_vm_writev");
	if (read(uffd, &msg, sizeof(msg)) != sizeof(msg) ||
	    msg.event != UFFD_EVENT_PAGEFAULT)
		fail("userfaultfd message");
	/* The page is pinned, its writer waiting: send it. */
	zc_send(&t, m, PAGE);
	/* Let the write through the pin complete. */
	memset(src, 'B', PAGE);
	cp.dst = (uintptr_t)local;
	cp.src = (uintptr_t)src;
	cp.len = PAGE;
	if (ioctl(uffd, UFFDIO_COPY, &cp))
		fail("UFFDIO_COPY");
	pthread_join(th, NULL);
	if (w.ret != (ssize_t)PAGE) {
		errno = w.err;
		fail("process_vm_writev: %zd", w.ret);
	}
	/* The write went into the sender's page... */
	if (m[0] != 'B' || m[PAGE - 1] != 'B')
		fail("the pinned write did not reach the sender's pool page");
	/* ...and not into the bytes sent. */
	recv_all(s, got, PAGE);
	for (size_t i = 0; i < PAGE; i++)
		if (got[i] != 'A') {
			errno = 0;
			fail("byte %zu received as '%c': written through a pin after the send",
			     i, got[i]);
		}
	printf("ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	alarm(GUARD_SECONDS);
	if (argc == 3 && !strcmp(argv[1], "forkchain"))
		return forkchain(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "race"))
		return race(atol(argv[2]));
	if (argc == 2 && !strcmp(argv[1], "pinned"))
		return pinned();
	fprintf(stderr, "usage: sd_zcpool forkchain N | race N | pinned\n");
	return 2;
}
