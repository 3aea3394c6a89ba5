// SPDX-License-Identifier: LGPL-2.1-or-later
//
// zc_probe: the malloc family under a preloaded allocator (run by
// test_zcmalloc).  Usage:
//
//   zc_probe MODE LIB
//
// LIB is a substring of the path of the library that must define the
// malloc this program calls (the preload took).  MODE:
//
//   glibc   every allocation is glibc's (the pool is off): large blocks
//           are not page-aligned, and libzc_anon.so, if that is LIB, says
//           no pointer is in the pool;
//   pool    libzc_anon.so with SD_ZC_TEST_THRESHOLD=65536: requests of
//           64 KiB and more (alignment at most a page) come from the pool;
//   full    the same with a pool of 64 pages: what does not fit goes to
//           glibc, and comes back to the pool once there is room;
//   foreign libjemalloc.so.2 preloaded after LIB, SD_ZEROCOPY unset: the
//           program brings its own allocator, so zero copy is off by
//           default and every allocation is jemalloc's.
//
// Whenever jemalloc is loaded (foreign, or pool with SD_ZEROCOPY=1 next
// to it), every pointer outside the pool must be jemalloc's: sallocx()
// knows it, and dallocx() frees what malloc() gave, and free() what
// mallocx() gave.
//
// All modes also run the same workload (every call of the family, moves
// between the allocators, threads, fork) and check every byte they keep.
// Exit status 0 when all went well; each failure prints its line.
//
// Built with -fno-builtin: the compiler must not fold a read of calloc'd
// memory to zero, nor drop a malloc/free pair.
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace {

constexpr std::size_t PG = 4096;
constexpr std::size_t T = 65536;	// SD_ZC_TEST_THRESHOLD in pool modes

int failures;

#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c)) {                                                             \
			std::fprintf(stderr, "zc_probe:%d: %s failed\n", __LINE__, #c); \
			failures++;                                                     \
		}                                                                       \
	} while (0)

enum Mode { GLIBC, POOL, FULL, FOREIGN } mode;

// jemalloc's own entry points, when it is loaded.
std::size_t (*sallocx_fn)(const void *, int);
void *(*mallocx_fn)(std::size_t, int);
void (*dallocx_fn)(void *, int);

bool (*in_pool_fn)(const void *, std::size_t);

// A size the compiler cannot see through (it would refuse impossible
// ones at compile time).
std::size_t opaque(std::size_t v)
{
	volatile std::size_t x = v;
	return x;
}

bool in_pool(const void *p)
{
	return in_pool_fn && in_pool_fn(p, 1);
}

bool aligned(const void *p, std::size_t a)
{
	return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

// Where a request of n bytes must land: the pool in pool modes from the
// threshold on (FULL: if there is room, so only "not in the pool below").
void where(const void *p, std::size_t n)
{
	if (!p)
		return;
	if (mode == GLIBC || mode == FOREIGN || n < T)
		CHECK(!in_pool(p));
	else if (mode == POOL)
		CHECK(in_pool(p));
	if (in_pool(p))
		CHECK(aligned(p, PG));
	else if (sallocx_fn)
		CHECK(sallocx_fn(p, 0) >= n);	// jemalloc's: it knows the block
}

// The shim's malloc and jemalloc's own entry points mix freely.
void jemalloc_mix()
{
	CHECK(sallocx_fn && mallocx_fn && dallocx_fn);
	if (!sallocx_fn || !mallocx_fn || !dallocx_fn)
		return;
	for (std::size_t n : {std::size_t{100}, 2 * T}) {
		void *p = malloc(n);
		CHECK(p);
		where(p, n);
		if (!in_pool(p))
			dallocx_fn(p, 0);
		else
			free(p);
		p = mallocx_fn(n, 0);
		CHECK(p && sallocx_fn(p, 0) >= n && !in_pool(p));
		CHECK(malloc_usable_size(p) == sallocx_fn(p, 0));
		free(p);
	}
}

void fill(void *p, std::size_t n, unsigned seed)
{
	auto *b = static_cast<unsigned char *>(p);
	for (std::size_t i = 0; i < n; i++)
		b[i] = static_cast<unsigned char>((i * 31 + seed) ^ (i >> 9));
}

bool filled(const void *p, std::size_t n, unsigned seed)
{
	auto *b = static_cast<const unsigned char *>(p);
	for (std::size_t i = 0; i < n; i++)
		if (b[i] != static_cast<unsigned char>((i * 31 + seed) ^ (i >> 9)))
			return false;
	return true;
}

bool zero(const void *p, std::size_t n)
{
	auto *b = static_cast<const unsigned char *>(p);
	for (std::size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

void interposed(const char *lib)
{
	Dl_info info{};
	void *(*m)(std::size_t) = &malloc;

	CHECK(dladdr(reinterpret_cast<void *>(m), &info) != 0);
	CHECK(info.dli_fname && std::strstr(info.dli_fname, lib));
	if (info.dli_fname && !std::strstr(info.dli_fname, lib))
		std::fprintf(stderr, "zc_probe: malloc is in %s, not %s\n", info.dli_fname, lib);
}

void sizes()
{
	const std::size_t ns[] = {1, 100, 4096, T - 1, T, T + 1, 1 << 20, (4 << 20) + 3};
	for (std::size_t n : ns) {
		void *p = malloc(n);
		CHECK(p);
		where(p, n);
		CHECK(malloc_usable_size(p) >= n);
		if (in_pool(p))
			CHECK(malloc_usable_size(p) == (n + PG - 1) / PG * PG);
		fill(p, n, 7);
		CHECK(filled(p, n, 7));
		free(p);
	}
	// glibc's large blocks are mmapped after a header: never page-aligned.
	if (mode == GLIBC) {
		void *p = malloc(1 << 20);
		CHECK(!aligned(p, PG));
		free(p);
	}
	CHECK(malloc_usable_size(nullptr) == 0);
	free(nullptr);
	// errno survives success, free included.
	errno = EXDEV;
	void *p = malloc(T * 2), *q = malloc(10);
	free(p);
	free(q);
	CHECK(errno == EXDEV);
	// Impossible sizes fail as glibc's do.
	errno = 0;
	CHECK(malloc(opaque(~std::size_t{0} - 100)) == nullptr);
	CHECK(errno == ENOMEM);
}

void callocs()
{
	// Dirty a large block, free it, and ask for zeroes: the same pages
	// come back (pool) and must be cleared.
	for (int round = 0; round < 3; round++) {
		const std::size_t n = (1 << 20) + 123 * static_cast<std::size_t>(round);
		auto *d = static_cast<unsigned char *>(malloc(n));
		CHECK(d);
		std::memset(d, 0xab, n);
		free(d);
		auto *z = static_cast<unsigned char *>(calloc(1, n));
		CHECK(z);
		where(z, n);
		CHECK(zero(z, n));
		std::memset(z, 0xcd, n);
		free(z);
		z = static_cast<unsigned char *>(calloc(n / 8, 8));
		CHECK(z && zero(z, n / 8 * 8));
		free(z);
	}
	void *s = calloc(3, 5);
	CHECK(s && zero(s, 15));
	free(s);
	errno = 0;
	CHECK(calloc(opaque(~std::size_t{0} / 2), 3) == nullptr);
	CHECK(errno == ENOMEM);
}

void reallocs()
{
	// small (glibc) -> large -> larger -> small -> 0, contents kept.
	auto *p = static_cast<unsigned char *>(malloc(1000));
	fill(p, 1000, 1);
	p = static_cast<unsigned char *>(realloc(p, 3 * T));
	CHECK(p);
	where(p, 3 * T);
	CHECK(filled(p, 1000, 1));
	fill(p, 3 * T, 2);
	p = static_cast<unsigned char *>(realloc(p, 5 * T + 17));
	CHECK(p);
	where(p, 5 * T + 17);
	CHECK(filled(p, 3 * T, 2));
	fill(p, 5 * T + 17, 3);
	p = static_cast<unsigned char *>(realloc(p, 2 * T));	// shrink in the pool
	CHECK(p);
	where(p, 2 * T);
	CHECK(filled(p, 2 * T, 3));
	p = static_cast<unsigned char *>(realloc(p, 500));	// back to glibc
	CHECK(p);
	where(p, 500);
	CHECK(filled(p, 500, 3));
	CHECK(realloc(p, 0) == nullptr);			// frees, as glibc

	// Large to 0, and from NULL.
	p = static_cast<unsigned char *>(realloc(nullptr, 2 * T));
	CHECK(p);
	where(p, 2 * T);
	CHECK(realloc(p, 0) == nullptr);

	// A growing buffer, doubling: the contents follow every move.
	std::size_t n = 64;
	p = static_cast<unsigned char *>(malloc(n));
	fill(p, n, 4);
	while (n < (8 << 20)) {
		p = static_cast<unsigned char *>(realloc(p, n * 2));
		CHECK(p);
		if (!p)
			return;
		CHECK(filled(p, n, 4));
		n *= 2;
		where(p, n);
		fill(p, n, 4);
	}
	free(p);

	// reallocarray: overflow is ENOMEM and leaves the block alone (a
	// call through a pointer: the compiler would take p as freed).
	void *(*volatile ra)(void *, std::size_t, std::size_t) = reallocarray;
	p = static_cast<unsigned char *>(malloc(2 * T));
	fill(p, 2 * T, 5);
	errno = 0;
	CHECK(ra(p, opaque(~std::size_t{0} / 2), 4) == nullptr);
	CHECK(errno == ENOMEM);
	CHECK(filled(p, 2 * T, 5));
	p = static_cast<unsigned char *>(ra(p, 4, T));
	CHECK(p && filled(p, 2 * T, 5));
	where(p, 4 * T);
	free(p);
}

void alignments()
{
	void *p = nullptr;

	CHECK(posix_memalign(&p, PG, T) == 0);
	where(p, T);
	CHECK(aligned(p, PG));
	free(p);
	// Beyond a page: glibc's, still aligned.
	CHECK(posix_memalign(&p, 2 * PG, T) == 0);
	CHECK(!in_pool(p));
	CHECK(aligned(p, 2 * PG));
	free(p);
	CHECK(posix_memalign(&p, 64, 100) == 0);
	CHECK(!in_pool(p) && aligned(p, 64));
	free(p);
	p = &p;
	CHECK(posix_memalign(&p, 3, T) == EINVAL);
	CHECK(posix_memalign(&p, 0, T) == EINVAL);
	CHECK(posix_memalign(&p, 4, T) == EINVAL);	// below sizeof(void *)
	CHECK(p == &p);

	p = aligned_alloc(64, 2 * T);
	where(p, 2 * T);
	CHECK(p && aligned(p, 64));
	free(p);
	p = memalign(256, 2 * T);
	where(p, 2 * T);
	CHECK(p && aligned(p, 256));
	free(p);
	p = memalign(1 << 16, 2 * T);
	CHECK(p && aligned(p, 1 << 16) && !in_pool(p));
	free(p);
	p = valloc(T);
	where(p, T);
	CHECK(p && aligned(p, PG));
	free(p);
	p = valloc(100);
	CHECK(p && aligned(p, PG) && !in_pool(p));
	free(p);
	// jemalloc has no pvalloc: glibc's would answer, and jemalloc's free
	// could not take its block, with or without the shim.
	if (sallocx_fn)
		return;
	p = pvalloc(T + 1);
	where(p, T + 1);
	CHECK(p && aligned(p, PG) && malloc_usable_size(p) >= T + PG);
	free(p);
}

// Threads allocating, resizing and freeing large and small blocks at
// once, each checking its own bytes.
void *worker(void *arg)
{
	const auto seed = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(arg));
	std::uint64_t r = seed * 0x9e3779b97f4a7c15ULL + 1;
	struct {
		unsigned char *p;
		std::size_t n;
	} slot[16] = {};
	long bad = 0;

	for (int i = 0; i < 3000; i++) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		auto &s = slot[r % 16];
		const std::size_t n = (r >> 8) % 4 ? 16 + (r >> 12) % 2000
						   : T + (r >> 12) % (4 * T);
		if (s.p && !filled(s.p, s.n, static_cast<unsigned>(s.n) ^ seed))
			bad++;
		if (!s.p) {
			s.p = static_cast<unsigned char *>((r >> 5) & 1 ? malloc(n) : calloc(1, n));
			s.n = n;
		} else if ((r >> 6) % 3 == 0) {
			auto *q = static_cast<unsigned char *>(realloc(s.p, n));
			if (!q) {
				bad++;
				continue;
			}
			if (!filled(q, s.n < n ? s.n : n, static_cast<unsigned>(s.n) ^ seed))
				bad++;
			s.p = q;
			s.n = n;
		} else {
			free(s.p);
			s.p = nullptr;
			continue;
		}
		if (!s.p) {
			bad++;
			continue;
		}
		fill(s.p, s.n, static_cast<unsigned>(s.n) ^ seed);
	}
	for (auto &s : slot)
		free(s.p);
	return reinterpret_cast<void *>(bad);
}

void threads()
{
	pthread_t t[4];

	for (unsigned i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], nullptr, worker,
				     reinterpret_cast<void *>(std::uintptr_t{i} + 1)) == 0);
	for (auto &x : t) {
		void *bad = nullptr;
		CHECK(pthread_join(x, &bad) == 0);
		CHECK(bad == nullptr);
	}
}

// A child sees the parent's blocks as they were, and allocates on its
// own; the parent's stay as they are.
void fork_copies()
{
	auto *p = static_cast<unsigned char *>(malloc(4 * T));
	fill(p, 4 * T, 9);
	const pid_t pid = fork();
	if (pid == 0) {
		alarm(20);
		int ok = filled(p, 4 * T, 9);
		fill(p, 4 * T, 10);
		void *q = malloc(8 * T);
		ok &= q != nullptr;
		if (q)
			std::memset(q, 1, 8 * T);
		free(q);
		free(p);
		_exit(ok ? 0 : 1);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(filled(p, 4 * T, 9));
	free(p);
}

// Forks while other threads allocate large blocks: the pool's lock must
// be free in every child (pthread_atfork), or the child hangs.
volatile bool stop;

void *hammer(void *)
{
	while (!stop) {
		void *p = malloc(2 * T);
		void *q = malloc(5 * T);
		free(p);
		q = realloc(q, 3 * T);
		free(q);
	}
	return nullptr;
}

void fork_while_allocating()
{
	pthread_t t[2];

	stop = false;
	for (auto &x : t)
		CHECK(pthread_create(&x, nullptr, hammer, nullptr) == 0);
	for (int i = 0; i < 100; i++) {
		const pid_t pid = fork();
		if (pid == 0) {
			alarm(10);	// a child stuck on the lock dies of SIGALRM
			void *p = malloc(3 * T);
			void *q = calloc(1, 2 * T);
			const bool ok = p && q && zero(q, 2 * T);
			free(p);
			free(q);
			_exit(ok ? 0 : 1);
		}
		int st = 0;
		CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			std::fprintf(stderr, "zc_probe: fork %d: child status %#x\n", i, st);
			break;
		}
	}
	stop = true;
	for (auto &x : t)
		CHECK(pthread_join(x, nullptr) == 0);
}

// A pool of 64 pages (SD_ZC_TEST_POOL_PAGES=64) holds four 16-page
// blocks: the fifth comes from glibc, and all behave the same.
void full_pool()
{
	void *p[6];
	int pooled = 0;

	for (auto &x : p) {
		x = malloc(T);
		CHECK(x);
		pooled += in_pool(x);
		fill(x, T, 11);
	}
	CHECK(pooled == 4);
	CHECK(!in_pool(p[4]) && !in_pool(p[5]));
	// Growing a pool block that cannot grow in place, with the pool
	// full: it moves to glibc.
	p[1] = realloc(p[1], 2 * T);
	CHECK(p[1] && !in_pool(p[1]) && filled(p[1], T, 11));
	for (auto &x : p) {
		CHECK(filled(x, T, 11));
		free(x);
	}
	// Room again.
	void *q = malloc(4 * T);
	CHECK(in_pool(q));
	void *r = malloc(T);
	CHECK(!in_pool(r));
	free(q);
	free(r);
}

long vmrss_kib()
{
	char line[256];
	long kib = -1;
	std::FILE *f = std::fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (std::fgets(line, sizeof(line), f))
		if (!std::strncmp(line, "VmRSS:", 6)) {
			kib = std::strtol(line + 6, nullptr, 10);
			break;
		}
	std::fclose(f);
	return kib;
}

// POOL: freed blocks are cached and reused, and what the cache does not
// hold goes back to the system (Documentation/zerocopy.rst, "Giving
// memory back").
void giving_back()
{
	constexpr std::size_t MIB = std::size_t{1} << 20;
	const std::size_t n = opaque(4 * MIB);

	// The steady state: the block just freed serves the next request of
	// its size, and calloc clears what it held.
	auto *p = static_cast<unsigned char *>(malloc(n));
	CHECK(p && in_pool(p));
	if (!p)
		return;
	std::memset(p, 0xa5, n);
	free(p);
	auto *q = static_cast<unsigned char *>(calloc(1, n));
	CHECK(q == p);
	if (q) {
		bool zero = true;
		for (std::size_t i = 0; i < n; i += 512)
			zero &= q[i] == 0 && q[i + 511] == 0;
		CHECK(zero);
	}
	free(q);

	// 100 MiB written and freed: back within 32 MiB of the start.
	void *blocks[25];
	const long start = vmrss_kib();
	for (auto &b : blocks) {
		b = malloc(n);
		CHECK(b && in_pool(b));
		if (b)
			std::memset(b, 0x5a, n);
	}
	const long peak = vmrss_kib();
	for (auto *b : blocks)
		free(b);
	const long end = vmrss_kib();
	CHECK(start > 0 && peak - start >= 95 * 1024);
	CHECK(end - start <= 32 * 1024);
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::fprintf(stderr, "usage: zc_probe glibc|pool|full|foreign LIB\n");
		return 2;
	}
	alarm(120);
	if (!std::strcmp(argv[1], "glibc"))
		mode = GLIBC;
	else if (!std::strcmp(argv[1], "pool"))
		mode = POOL;
	else if (!std::strcmp(argv[1], "full"))
		mode = FULL;
	else if (!std::strcmp(argv[1], "foreign"))
		mode = FOREIGN;
	else
		return 2;
	in_pool_fn = reinterpret_cast<bool (*)(const void *, std::size_t)>(
		dlsym(RTLD_DEFAULT, "sd_zc_test_in_pool"));
	if (mode == POOL || mode == FULL)
		CHECK(in_pool_fn != nullptr);
	sallocx_fn = reinterpret_cast<std::size_t (*)(const void *, int)>(
		dlsym(RTLD_DEFAULT, "sallocx"));
	mallocx_fn = reinterpret_cast<void *(*)(std::size_t, int)>(dlsym(RTLD_DEFAULT, "mallocx"));
	dallocx_fn = reinterpret_cast<void (*)(void *, int)>(dlsym(RTLD_DEFAULT, "dallocx"));
	if (mode == FOREIGN)
		CHECK(sallocx_fn != nullptr);
	auto th = reinterpret_cast<std::size_t (*)()>(dlsym(RTLD_DEFAULT, "sd_zc_test_threshold"));
	if (th)
		CHECK(th() == (mode == GLIBC || mode == FOREIGN ? 0 : T));

	interposed(argv[2]);
	if (mode == FULL) {
		full_pool();
	} else {
		sizes();
		callocs();
		reallocs();
		alignments();
		if (mode == POOL)
			giving_back();
	}
	if (sallocx_fn)
		jemalloc_mix();
	threads();
	fork_copies();
	fork_while_allocating();
	if (failures)
		std::fprintf(stderr, "zc_probe %s: %d checks failed\n", argv[1], failures);
	return failures ? 1 : 0;
}
