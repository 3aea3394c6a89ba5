// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The zero-copy page pool of the preload shim: large malloc'd buffers live
// in pool memory (<linux/sd.h>, "Zero copy"), whose pages the kernel can
// hand to another process without copying.
//
// Two layers:
//
//   PageHeap   a page-granular allocator over a contiguous range of pages,
//              kernel-free and not thread-safe, its metadata in side arrays
//              the caller provides (the unit tests run it over anonymous
//              memory on the host);
//   the pool   one process-wide PageHeap over a pool mapping of an AF_SD
//              socket, made on first use, behind a lock (zcpool.cpp); the
//              malloc family of zcmalloc.cpp is its only allocating user.
//
// Nothing here calls malloc, throws or needs the C++ runtime: it runs
// inside malloc, possibly before any constructor.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sd::zc {

// A page-granular heap over npages pages at base.
//
// A run is a maximal range of pages that is either one allocation (used)
// or free.  The pages [0, top) are covered by runs, back to back; the
// pages [top, npages) have never been handed out since top last moved
// down ("the top"), and are served by bumping top.
//
// Boundary tags: tag[i] is non-zero exactly at the first and the last
// page of each run below top (one word when the run has one page); it
// holds the run's length, TAG_FREE for a free run, TAG_HEAD on the first
// page and TAG_TAIL on the last.  Every other tag is zero: interior pages
// of runs and everything at or above top.  So free() recognises the start
// of an allocation exactly, and a free run finds its neighbours' lengths
// in O(1) at tag[first - 1] and tag[last + 1].
//
// Free runs are kept coalesced (no two are adjacent) and none ends at top
// (it would have become part of the top).  Each is on the free list of its
// size class, floor(log2(length)), doubly linked through next[] and prev[]
// at its first page (NIL ends a list); `nonempty` has bit c set iff list c
// is not empty.
//
// high_water is the highest top ever reached: pages at or above it were
// never handed out, and so still hold the zeroes the memory started with.
class PageHeap {
public:
	static constexpr unsigned PAGE_SHIFT = 12;
	static constexpr std::size_t PAGE_SIZE = std::size_t{1} << PAGE_SHIFT;
	// Run lengths must fit the tag's length field.
	static constexpr std::uint32_t MAX_PAGES = (1U << 29) - 1;
	static constexpr unsigned NCLASS = 32;
	static constexpr std::uint32_t NIL = 0xffffffffU;

	// Bytes of the side arrays for npages pages (3 words a page).
	static constexpr std::size_t meta_bytes(std::size_t npages) noexcept
	{
		return 3 * sizeof(std::uint32_t) * npages;
	}

	// Pages needed for n bytes (no overflow for any n).
	static constexpr std::size_t pages_for(std::size_t n) noexcept
	{
		return (n >> PAGE_SHIFT) + ((n & (PAGE_SIZE - 1)) != 0);
	}

	constexpr PageHeap() noexcept = default;
	PageHeap(const PageHeap &) = delete;
	PageHeap &operator=(const PageHeap &) = delete;

	// Manage npages pages at base (page-aligned), with meta_bytes(npages)
	// bytes of zeroed memory at meta for the side arrays.  False (and
	// nothing changed) for bad arguments.  The memory at base is never
	// touched by the heap itself.
	bool init(void *base, std::size_t npages, void *meta) noexcept;

	// n contiguous pages, or nullptr (n is 0, or no free run and not the
	// top can hold n pages).  *dirty, if given, is set to the number of
	// leading pages of the result that may have been used before; the
	// rest are below no previous allocation and still zero.
	void *alloc(std::size_t n, std::size_t *dirty = nullptr) noexcept;

	// Free the allocation that starts at p.  False, and nothing changed,
	// if p is not the start of a live allocation of this heap.
	bool free(void *p) noexcept;

	// Make the allocation at p n pages long without moving it: shrinking
	// always succeeds, growing if the pages after it are free (or the
	// top).  False, and nothing changed, otherwise (or if p is not the
	// start of a live allocation, or n is 0).
	bool resize(void *p, std::size_t n) noexcept;

	// Bytes usable at p (whole pages); 0 if p is not the start of a live
	// allocation.
	std::size_t usable_size(const void *p) const noexcept;

	// Whether p points into the pages this heap manages.
	bool contains(const void *p) const noexcept
	{
		const auto u = reinterpret_cast<std::uintptr_t>(p);
		const auto b = reinterpret_cast<std::uintptr_t>(base_);

		return base_ && u >= b && u - b < (std::uintptr_t{npages_} << PAGE_SHIFT);
	}

	// Check every invariant above; nullptr if they hold, else what is
	// wrong.  Walks every page below high_water: for tests.
	const char *check() const noexcept;

	std::uint32_t pages() const noexcept { return npages_; }
	std::uint32_t top() const noexcept { return top_; }
	std::uint32_t high_water() const noexcept { return hw_; }
	std::uint32_t used_pages() const noexcept { return used_; }
	// Pages in free runs (not counting the top).
	std::uint32_t free_pages() const noexcept { return free_; }
	void *base() const noexcept { return base_; }

private:
	static constexpr std::uint32_t TAG_LEN = (1U << 29) - 1;
	static constexpr std::uint32_t TAG_HEAD = 1U << 29;
	static constexpr std::uint32_t TAG_TAIL = 1U << 30;
	static constexpr std::uint32_t TAG_FREE = 1U << 31;
	// Entries of a size class's list looked at before trying larger
	// classes (a run in the request's own class may be too short).
	static constexpr unsigned SCAN = 8;

	static unsigned size_class(std::uint32_t len) noexcept
	{
		return 31U - static_cast<unsigned>(__builtin_clz(len));
	}
	// Index of the page p starts, or NIL if p is not a page of ours.
	std::uint32_t index(const void *p) const noexcept;
	// The length of the live allocation that starts at page i, or 0.
	std::uint32_t used_run(std::uint32_t i) const noexcept;
	void set_run(std::uint32_t i, std::uint32_t len, bool is_free) noexcept;
	void link(std::uint32_t i, std::uint32_t len) noexcept;
	void unlink(std::uint32_t i, std::uint32_t len) noexcept;
	std::uint32_t take(std::uint32_t i, std::uint32_t len, std::uint32_t n) noexcept;
	void release(std::uint32_t i, std::uint32_t len) noexcept;

	unsigned char *base_ = nullptr;
	std::uint32_t npages_ = 0;
	std::uint32_t top_ = 0;
	std::uint32_t hw_ = 0;
	std::uint32_t used_ = 0;
	std::uint32_t free_ = 0;
	std::uint32_t nonempty_ = 0;
	std::uint32_t *tag_ = nullptr;
	std::uint32_t *next_ = nullptr;
	std::uint32_t *prev_ = nullptr;
	std::uint32_t head_[NCLASS] = {};
};

// The process-wide pool.
//
// Made on the first pool_alloc() (socket(AF_SD), mmap of a POOL_LEN pool,
// or as much as RLIMIT_MEMLOCK allows (next_pool_len()), close); if that
// fails, the pool is off for the life of the process and every
// pool_alloc() returns nullptr: large buffers come from the next
// allocator, and their sends copy.  Thread-safe (one lock) and fork-safe
// (pthread_atfork: the child keeps a copy-on-write copy of the pool and
// of its metadata, and a free lock).
//
// Giving memory back (Documentation/zerocopy.rst, "Giving memory back"):
// pool_free() puts the allocation in a cache of freed blocks, which stay
// resident and serve the next pool_alloc() of about their size without a
// system call.  The cache holds at most 128 blocks and an eighth of the
// pool memory in use, clamped to [16 MiB, 64 MiB]; what leaves it, oldest
// first, or never fits in it, goes back to the kernel (MADV_REMOVE)
// before the heap may reuse its range.  So every free run of the heap has
// been released, and a program that frees everything keeps at most
// 16 MiB of freed pool memory resident.

// Bytes of the pool mapping (SD_POOL_MAX_LEN at most), when the kernel
// lets the process lock that much (CAP_IPC_LOCK, or an RLIMIT_MEMLOCK that
// large): the kernel charges a pool mapping's whole length to the user's
// locked memory, and refuses one over RLIMIT_MEMLOCK with EAGAIN.
inline constexpr std::size_t POOL_LEN = std::size_t{16} << 30;
// The smallest pool worth making; below it there is no pool, and every
// send copies.
inline constexpr std::size_t POOL_MIN = std::size_t{1} << 20;

// The pool length to try after a mapping of `failed` bytes was refused
// for RLIMIT_MEMLOCK (EAGAIN), whose soft limit is `memlock` bytes: the
// limit, if it is below `failed`, else half of `failed` (other locked
// memory of the same user counts too), in whole pages; 0 when that is
// below POOL_MIN (give up: sends copy).
std::size_t next_pool_len(std::size_t failed, std::uint64_t memlock) noexcept;

// Whose malloc the shim's forwards to (zcmalloc.cpp): glibc's own, or
// one the program brought (jemalloc, tcmalloc...), which may be handed
// pool pointers through entry points the shim does not see (mallocx,
// sdallocx, mallctl...).  Unknown until zcmalloc.cpp has resolved the
// functions it forwards to; it then calls set_allocator() once (or once
// per racing thread, all with the same answer).
enum class Allocator : int { unknown, glibc, foreign };
void set_allocator(Allocator a) noexcept;
Allocator allocator() noexcept;

// The size from which a malloc goes to the pool, and from which a send
// may take the zero-copy path: 0 means zero copy is off.  It is the
// net.sd.zerocopy_threshold sysctl (0 if missing) when zero copy is on:
//
//   SD_ZEROCOPY=1   on, whatever the allocator (next to a foreign one at
//                   the user's risk: see Documentation/zerocopy.rst);
//   SD_ZEROCOPY=0   off;
//   unset           on if allocator() is glibc, else off;
//   anything else   as unset, after one warning on stderr.
//
// Values below a page count as a page.  Read once and cached, except that
// a call made before libc set up the environment, or before allocator()
// is known, answers 0 and caches nothing (no pool memory can exist yet).
std::size_t threshold() noexcept;

// Whether [p, p + len) lies inside the pool mapping.  Lock-free: two
// loads.
bool in_pool(const void *p, std::size_t len) noexcept;

// Whether p points into the pool mapping (free() asks this of every
// pointer).
inline bool pool_contains(const void *p) noexcept
{
	return in_pool(p, 1);
}

// Make the pool now if zero copy is on (threshold() not 0), as the process
// starts: children of fork then share it (copy on write), where a pool
// made on first use after a fork would be one per process, each charged
// to the user's RLIMIT_MEMLOCK, which two may not fit.
void pool_prepare() noexcept;

// Page-aligned memory for n bytes from the pool (zeroed if zero), or
// nullptr: the pool is off or cannot be made, or it has no room (or, for
// the few calls that race with the very first one, its fork handlers are
// still being registered).
void *pool_alloc(std::size_t n, bool zero) noexcept;

// Free p, which pool_contains(): into the cache, or back to the kernel
// (above).  Aborts with a message if p is not the start of a live pool
// allocation (a cached block is not live).
void pool_free(void *p) noexcept;

// Resize the pool allocation p to n bytes in place, if possible; the
// pages a shrink cuts off go back to the kernel.
bool pool_resize(void *p, std::size_t n) noexcept;

// Usable bytes of the pool allocation p (aborts like pool_free).
std::size_t pool_usable_size(const void *p) noexcept;

} // namespace sd::zc
