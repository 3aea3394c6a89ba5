// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The malloc family of the preload shim: requests of at least
// sd::zc::threshold() bytes (alignment at most a page) are served from the
// zero-copy pool (zcpool.hpp), so that a large buffer a program sends can
// have its pages handed over instead of copied.  Everything else, and
// everything while the pool is off or full, goes to glibc's allocator
// through the __libc_* names glibc exports for exactly this use.
//
// free(), realloc() and malloc_usable_size() tell the pool's pointers by
// address (one range check) and pass every other pointer to glibc, so
// memory glibc handed out before the shim was loaded, or while the pool
// was off, stays glibc's.
//
// These run before any constructor (ld.so allocates through them while
// it loads the program) and must never come back into themselves: the
// pool is made with raw system calls and mmap, never with malloc.  This
// file is built with -fno-builtin, so that the compiler does not turn a
// loop or an allocation and memset here into a call to malloc or calloc.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "zcpool.hpp"

extern "C" {
void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *__libc_calloc(size_t nmemb, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void *__libc_valloc(size_t n);
void *__libc_pvalloc(size_t n);
}

namespace {

using namespace sd::zc;

constexpr std::size_t PAGE_SIZE = PageHeap::PAGE_SIZE;

// Whether a request of n bytes, aligned to align, belongs in the pool.
inline bool wants_pool(std::size_t n, std::size_t align = 1) noexcept
{
	const std::size_t t = threshold();

	return t && n >= t && align <= PAGE_SIZE;
}

// glibc's malloc_usable_size.  glibc exports no __libc_ name for it, so
// it is found with dlsym(RTLD_NEXT) on first use (and by the constructor,
// so that later calls need no dlsym); two threads racing on the first use
// store the same pointer.
using usable_size_t = size_t (*)(void *);
constinit std::atomic<usable_size_t> libc_usable_size_fn{nullptr};

usable_size_t resolve_usable_size() noexcept
{
	usable_size_t f = libc_usable_size_fn.load(std::memory_order_acquire);

	if (f) [[likely]]
		return f;
	// glibc's own, not the next one: a program may bring an allocator
	// (jemalloc in Redis) whose malloc_usable_size does not know glibc's
	// pointers, which are the ones this malloc hands out.
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	f = libc ? reinterpret_cast<usable_size_t>(dlsym(libc, "malloc_usable_size")) : nullptr;
	if (libc)
		dlclose(libc);
	if (!f) {
		static const char msg[] =
			"libsdpreload: cannot find glibc's malloc_usable_size; aborting\n";
		(void)syscall(SYS_write, 2, msg, sizeof(msg) - 1);
		std::abort();
	}
	libc_usable_size_fn.store(f, std::memory_order_release);
	return f;
}

__attribute__((constructor)) void zcmalloc_init()
{
	(void)resolve_usable_size();
}

inline std::size_t min(std::size_t a, std::size_t b) noexcept
{
	return a < b ? a : b;
}

// memalign and friends: the pool's pages are page-aligned.
void *aligned(std::size_t align, std::size_t n) noexcept
{
	if (wants_pool(n, align))
		if (void *p = pool_alloc(n, false))
			return p;
	return __libc_memalign(align, n);
}

// realloc of a pool pointer p to n > 0 bytes.
void *realloc_pool(void *p, std::size_t n) noexcept
{
	const std::size_t old = pool_usable_size(p);
	void *q = nullptr;

	if (wants_pool(n)) {
		if (pool_resize(p, n))
			return p;
		q = pool_alloc(n, false);
	}
	// Below the threshold, or the pool is full: to glibc.
	if (!q)
		q = __libc_malloc(n);
	if (!q)
		return nullptr;		// p untouched, errno ENOMEM
	std::memcpy(q, p, min(old, n));
	pool_free(p);
	return q;
}

} // namespace

extern "C" {

void *malloc(size_t n) noexcept
{
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return __libc_malloc(n);
}

void free(void *p) noexcept
{
	if (!p)
		return;
	if (pool_contains(p))
		pool_free(p);
	else
		__libc_free(p);
}

void *calloc(size_t nmemb, size_t size) noexcept
{
	size_t n;

	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return nullptr;
	}
	if (wants_pool(n))
		if (void *p = pool_alloc(n, true))
			return p;
	return __libc_calloc(nmemb, size);
}

void *realloc(void *p, size_t n) noexcept
{
	if (!p)
		return malloc(n);
	if (pool_contains(p)) {
		if (n == 0) {
			// As glibc: realloc(p, 0) frees p and returns NULL.
			pool_free(p);
			return nullptr;
		}
		return realloc_pool(p, n);
	}
	// A glibc pointer that grows past the threshold moves to the pool.
	if (wants_pool(n))
		if (void *q = pool_alloc(n, false)) {
			std::memcpy(q, p, min(resolve_usable_size()(p), n));
			__libc_free(p);
			return q;
		}
	return __libc_realloc(p, n);
}

void *reallocarray(void *p, size_t nmemb, size_t size) noexcept
{
	size_t n;

	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return nullptr;
	}
	return realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n) noexcept
{
	// A power of two and a multiple of sizeof(void *).
	if (align % sizeof(void *) || (align & (align - 1)) || !align)
		return EINVAL;
	const int saved = errno;
	void *p = aligned(align, n);
	if (!p) {
		errno = saved;
		return ENOMEM;
	}
	*out = p;
	return 0;
}

// glibc 2.36's aligned_alloc is its memalign (it rounds any alignment up
// to a power of two): keep that.
void *aligned_alloc(size_t align, size_t n) noexcept
{
	return aligned(align, n);
}

void *memalign(size_t align, size_t n) noexcept
{
	return aligned(align, n);
}

void *valloc(size_t n) noexcept
{
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return __libc_valloc(n);
}

void *pvalloc(size_t n) noexcept
{
	if (wants_pool(n))
		if (void *p = pool_alloc(n, false))
			return p;
	return __libc_pvalloc(n);
}

size_t malloc_usable_size(void *p) noexcept
{
	if (!p)
		return 0;
	if (pool_contains(p))
		return pool_usable_size(p);
	return resolve_usable_size()(p);
}

} // extern "C"
