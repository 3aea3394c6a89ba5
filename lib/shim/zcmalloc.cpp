// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The malloc family of the preload shim: requests of at least
// sd::zc::threshold() bytes (alignment at most a page) are served from the
// zero-copy pool (zcpool.hpp), so that a large buffer a program sends can
// have its pages handed over instead of copied.  Everything else, and
// everything while the pool is off or full, goes to the *next* definition
// of the same function: dlsym(RTLD_NEXT, name), which is the allocator
// the program would have used without the shim: the one it links
// (libjemalloc.so.2 in Debian's Redis, libtcmalloc), or glibc's.  Each
// name is resolved on its own, so one that allocator lacks (jemalloc has
// no pvalloc or reallocarray) is glibc's, exactly as without the shim.
//
// So the shim is transparent: a program whose malloc is jemalloc's gets
// jemalloc's pointers from malloc, and can pass them to mallocx, sdallocx
// or mallctl, which go to jemalloc directly.  Only pool pointers are the
// shim's, and zcpool.cpp's threshold() keeps the pool off by default next
// to such an allocator (zerocopy.rst).
//
// free(), realloc() and malloc_usable_size() tell the pool's pointers by
// address (one range check) and pass every other pointer on, so memory
// handed out before the shim was loaded, or while the pool was off, stays
// with its allocator.
//
// These run before any constructor (ld.so allocates through them while
// it loads the program) and must never come back into themselves: the
// pool is made with raw system calls and mmap, never with malloc.  The
// next allocator is found with dlopen and dlsym, which allocate
// themselves (dlerror's buffers, ld.so's lookups): while a thread
// resolves, and before libc is initialised, this thread's calls are
// served by a small bump arena ("bootstrap" below).  This file is built
// with -fno-builtin, so that the compiler does not turn a loop or an
// allocation and memset here into a call to malloc or calloc, and it uses
// nothing that allocates or needs the C++ runtime.
#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "zcpool.hpp"

namespace {

using namespace sd::zc;

constexpr std::size_t PAGE_SIZE = PageHeap::PAGE_SIZE;

void say(const char *s) noexcept
{
	// Raw: the shim's own write() is a wrapper, and this runs in malloc.
	(void)syscall(SYS_write, 2, s, std::strlen(s));
}

// The next allocator.
//
// One slot per name of malloc.def, holding the function that name means
// without the shim.  Filled by
// resolve() on the first call of any of them (or by the constructor,
// whichever is first), then published by `resolved`; a name that nothing
// after the shim defines gets a stub that aborts when called, so every
// slot is callable once `resolved` is set.  Threads that race on the
// first call each resolve and store the same pointers.
//
// The types are spelt out: decltype(&::malloc) would carry glibc's
// attributes (malloc, alloc_size) into std::atomic<>, which ignores them
// with a warning.  The definitions below must match glibc's declarations,
// so the compiler checks these.
using malloc_fn = void *(*)(size_t) noexcept;
using free_fn = void (*)(void *) noexcept;
using calloc_fn = void *(*)(size_t, size_t) noexcept;
using realloc_fn = void *(*)(void *, size_t) noexcept;
using reallocarray_fn = void *(*)(void *, size_t, size_t) noexcept;
using posix_memalign_fn = int (*)(void **, size_t, size_t) noexcept;
using aligned_alloc_fn = void *(*)(size_t, size_t) noexcept;
using memalign_fn = void *(*)(size_t, size_t) noexcept;
using valloc_fn = void *(*)(size_t) noexcept;
using pvalloc_fn = void *(*)(size_t) noexcept;
using malloc_usable_size_fn = size_t (*)(void *) noexcept;

#define SD_MALLOC(name)                                                                 \
	constexpr char name##_name[] = #name;                                           \
	constinit std::atomic<name##_fn> next_##name{nullptr};
#include "malloc.def"

constinit std::atomic<bool> resolved{false};
// Set while this thread runs resolve(): its allocations then come from
// the bootstrap arena (initial-exec TLS: one load, no __tls_get_addr,
// which could allocate).
constinit thread_local bool resolving __attribute__((tls_model("initial-exec"))) = false;

[[noreturn]] void missing(const char *name) noexcept
{
	say("libsdpreload: cannot find ");
	say(name);
	say(" after the shim (dlsym(RTLD_NEXT)); aborting\n");
	std::abort();
}

// The stub of a name nothing after the shim defines: only a broken
// installation (no libc after the shim in the search order) or a libc
// without that name (a program built against it cannot call it).
template <const char *Name, typename F> struct Missing;
template <const char *Name, typename R, typename... A> struct Missing<Name, R (*)(A...) noexcept> {
	static R call(A...) noexcept { missing(Name); }
};

// Fill every slot, note whose allocator it is (set_allocator), and set
// `resolved`.  False, and nothing done, if this thread is already at it
// (the call came from dlopen or dlsym inside it).
bool resolve() noexcept
{
	if (resolved.load(std::memory_order_acquire))
		return true;
	if (resolving)
		return false;
	resolving = true;
	const int saved = errno;
	// glibc's own definitions, to compare with the next ones: the
	// program's allocator is glibc's if every name resolves to libc.
	void *libc = dlopen(LIBC_SO, RTLD_NOW | RTLD_NOLOAD);
	bool glibc = libc != nullptr;
#define SD_MALLOC(name)                                                                  \
	{                                                                                \
		void *f = dlsym(RTLD_NEXT, #name);                                       \
		if (!libc || f != dlsym(libc, #name))                                    \
			glibc = false;                                                   \
		next_##name.store(f ? reinterpret_cast<name##_fn>(f)                     \
				    : &Missing<name##_name, name##_fn>::call,            \
				  std::memory_order_relaxed);                            \
	}
#include "malloc.def"
	if (libc)
		dlclose(libc);
	// A name not found left an error behind, which the program's next
	// dlerror() must not report.
	(void)dlerror();
	// Before `resolved`: the first allocation that can reach the pool
	// must find threshold() decided.
	set_allocator(glibc ? Allocator::glibc : Allocator::foreign);
	resolved.store(true, std::memory_order_release);
	resolving = false;
	errno = saved;
	return true;
}

__attribute__((constructor)) void zcmalloc_init()
{
	// Later calls, a signal handler's included, need no dlsym.  libc
	// is initialised by now (the shim's constructors run after libc's).
	if (resolve())
		sd::zc::pool_prepare();
}

// The bootstrap arena: 64 KiB, handed out by bumping an atomic offset and
// never reused, so that free() of its blocks does nothing, their memory
// is still zero for calloc, and no lock is needed.  Each block's size is
// kept in the word before it, for realloc() and malloc_usable_size().
// dlsym, dlopen and dlerror take a few hundred bytes; ld.so, before libc
// is initialised, rarely anything.
constexpr std::size_t BOOT_LEN = std::size_t{64} << 10;
constexpr std::size_t BOOT_ALIGN = 16;	// malloc's alignment on x86-64 and arm64
alignas(BOOT_ALIGN) constinit unsigned char boot[BOOT_LEN];
constinit std::atomic<std::size_t> boot_top{0};

bool boot_contains(const void *p) noexcept
{
	return reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(boot) <
	       BOOT_LEN;
}

// n bytes aligned to align (a power of two), or nullptr and ENOMEM.
void *boot_alloc(std::size_t n, std::size_t align = BOOT_ALIGN) noexcept
{
	if (align < BOOT_ALIGN)
		align = BOOT_ALIGN;
	if (align > BOOT_LEN) {
		errno = ENOMEM;
		return nullptr;
	}
	const auto base = reinterpret_cast<std::uintptr_t>(boot);
	std::size_t top = boot_top.load(std::memory_order_relaxed), start;
	do {
		// Room for the size word before the block, then aligned.
		start = ((base + top + sizeof(std::size_t) + align - 1) & ~(align - 1)) - base;
		if (start > BOOT_LEN || n > BOOT_LEN - start) {
			errno = ENOMEM;
			return nullptr;
		}
	} while (!boot_top.compare_exchange_weak(top, start + n, std::memory_order_relaxed));
	std::memcpy(boot + start - sizeof(std::size_t), &n, sizeof(n));
	return boot + start;
}

std::size_t boot_size(const void *p) noexcept
{
	std::size_t n;

	std::memcpy(&n, static_cast<const unsigned char *>(p) - sizeof(n), sizeof(n));
	return n;
}

// Whether the slots can be called: true once resolved (resolving first if
// need be).  False while this thread resolves, and before libc is
// initialised (no environment yet: dlsym is not safe so early), when the
// caller serves the request from the bootstrap arena instead.
bool resolve_slow() noexcept
{
	if (!environ)
		return false;
	return resolve();
}

inline bool ready() noexcept
{
	if (resolved.load(std::memory_order_acquire)) [[likely]]
		return true;
	return resolve_slow();
}

// The slot of name, once ready().
#define NEXT(name) (next_##name.load(std::memory_order_relaxed))

// Whether a request of n bytes, aligned to align, belongs in the pool.
// Only once ready(): threshold() depends on whose allocator it is.
inline bool wants_pool(std::size_t n, std::size_t align = 1) noexcept
{
	const std::size_t t = threshold();

	return t && n >= t && align <= PAGE_SIZE;
}

inline bool power_of_two(std::size_t a) noexcept
{
	return a && !(a & (a - 1));
}

inline std::size_t min(std::size_t a, std::size_t b) noexcept
{
	return a < b ? a : b;
}

// realloc of a pool pointer p to n > 0 bytes (ready() holds: the pool
// hands out nothing before).
void *realloc_pool(void *p, std::size_t n) noexcept
{
	const std::size_t old = pool_usable_size(p);
	void *q = nullptr;

	if (wants_pool(n)) {
		if (pool_resize(p, n))
			return p;
		q = pool_alloc(n, false);
	}
	// Below the threshold, or the pool is full: to the next allocator.
	if (!q)
		q = NEXT(malloc)(n);
	if (!q)
		return nullptr;		// p untouched, errno ENOMEM
	std::memcpy(q, p, min(old, n));
	pool_free(p);
	return q;
}

// realloc of a bootstrap block: copied out (the arena is never reused).
void *realloc_boot(void *p, std::size_t n) noexcept
{
	void *q = malloc(n);

	if (q)
		std::memcpy(q, p, min(boot_size(p), n));
	return q;
}

// The aligned family before ready(): alignments as glibc takes them
// (any, rounded up to a power of two).
void *boot_aligned(std::size_t align, std::size_t n) noexcept
{
	std::size_t a = BOOT_ALIGN;

	while (a < align && a <= BOOT_LEN)
		a <<= 1;
	return boot_alloc(n, a);
}

} // namespace

extern "C" {

void *malloc(size_t n) noexcept
{
	if (!ready()) [[unlikely]]
		return boot_alloc(n);
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return NEXT(malloc)(n);
}

void free(void *p) noexcept
{
	if (!p)
		return;
	if (pool_contains(p)) {
		pool_free(p);
		return;
	}
	// The bootstrap arena is never reused.  Anything else before
	// ready() cannot be ours nor the next allocator's: left alone.
	if (boot_contains(p) || !ready()) [[unlikely]]
		return;
	NEXT(free)(p);
}

void *calloc(size_t nmemb, size_t size) noexcept
{
	size_t n;
	const bool overflow = __builtin_mul_overflow(nmemb, size, &n);

	if (!ready()) [[unlikely]] {
		if (overflow) {
			errno = ENOMEM;
			return nullptr;
		}
		return boot_alloc(n);		// never used: still zero
	}
	if (!overflow && wants_pool(n))
		if (void *p = pool_alloc(n, true))
			return p;
	// Overflow too: the next calloc fails it as it would without us.
	return NEXT(calloc)(nmemb, size);
}

void *realloc(void *p, size_t n) noexcept
{
	if (p && pool_contains(p)) {
		if (n == 0) {
			// As glibc: realloc(p, 0) frees p and returns NULL.
			pool_free(p);
			return nullptr;
		}
		return realloc_pool(p, n);
	}
	if (p && boot_contains(p)) [[unlikely]]
		return realloc_boot(p, n);
	if (!ready()) [[unlikely]] {
		if (!p)
			return boot_alloc(n);
		errno = ENOMEM;		// see free(): not a pointer of ours
		return nullptr;
	}
	// A pointer of the next allocator that grows past the threshold
	// moves to the pool.
	if (wants_pool(n))
		if (void *q = pool_alloc(n, false)) {
			if (p) {
				std::memcpy(q, p, min(NEXT(malloc_usable_size)(p), n));
				NEXT(free)(p);
			}
			return q;
		}
	return NEXT(realloc)(p, n);
}

void *reallocarray(void *p, size_t nmemb, size_t size) noexcept
{
	size_t n;
	const bool overflow = __builtin_mul_overflow(nmemb, size, &n);

	// Pool and bootstrap blocks, and anything before ready(), are ours
	// to realloc; and so is every move into the pool.
	if (!ready() || (p && (pool_contains(p) || boot_contains(p))) ||
	    (!overflow && wants_pool(n))) {
		if (overflow) {
			errno = ENOMEM;
			return nullptr;
		}
		return realloc(p, n);
	}
	// glibc's, if the next allocator has none, calls realloc (ours,
	// through the PLT), which forwards to the next allocator's.
	return NEXT(reallocarray)(p, nmemb, size);
}

int posix_memalign(void **out, size_t align, size_t n) noexcept
{
	// A power of two and a multiple of sizeof(void *).
	const bool valid = power_of_two(align) && !(align % sizeof(void *));

	if (!ready()) [[unlikely]] {
		if (!valid)
			return EINVAL;
		const int saved = errno;
		void *p = boot_alloc(n, align);
		errno = saved;
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	// The pool's pages are page-aligned.
	if (valid && wants_pool(n, align))
		if (void *p = pool_alloc(n, false)) {
			*out = p;
			return 0;
		}
	return NEXT(posix_memalign)(out, align, n);
}

// aligned_alloc and memalign: the pool takes alignments that are powers
// of two up to a page; the next allocator decides about every other one
// (glibc 2.36 rounds them up, jemalloc refuses them).
void *aligned_alloc(size_t align, size_t n) noexcept
{
	if (!ready()) [[unlikely]]
		return boot_aligned(align, n);
	if (power_of_two(align) && wants_pool(n, align))
		if (void *p = pool_alloc(n, false))
			return p;
	return NEXT(aligned_alloc)(align, n);
}

void *memalign(size_t align, size_t n) noexcept
{
	if (!ready()) [[unlikely]]
		return boot_aligned(align, n);
	if (power_of_two(align) && wants_pool(n, align))
		if (void *p = pool_alloc(n, false))
			return p;
	return NEXT(memalign)(align, n);
}

void *valloc(size_t n) noexcept
{
	if (!ready()) [[unlikely]]
		return boot_alloc(n, PAGE_SIZE);
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return NEXT(valloc)(n);
}

void *pvalloc(size_t n) noexcept
{
	if (!ready()) [[unlikely]]
		return boot_alloc(PageHeap::pages_for(n) * PAGE_SIZE, PAGE_SIZE);
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return NEXT(pvalloc)(n);
}

size_t malloc_usable_size(void *p) noexcept
{
	if (!p)
		return 0;
	if (pool_contains(p))
		return pool_usable_size(p);
	if (boot_contains(p)) [[unlikely]]
		return boot_size(p);
	if (!ready()) [[unlikely]]
		return 0;
	return NEXT(malloc_usable_size)(p);
}

} // extern "C"

// The slot types are those of the functions (an implicit conversion
// between function pointer types compiles only when they agree).
#define SD_MALLOC(name) static_assert(name##_fn{&::name} != nullptr);
#include "malloc.def"
