// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The zero-copy page pool (see zcpool.hpp): the page heap, and the
// process-wide pool over an AF_SD pool mapping.
#include "zcpool.hpp"

#include <fcntl.h>
#include <linux/sd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace sd::zc {

// The page heap.

bool PageHeap::init(void *base, std::size_t npages, void *meta) noexcept
{
	if (!base || !meta || npages == 0 || npages > MAX_PAGES ||
	    (reinterpret_cast<std::uintptr_t>(base) & (PAGE_SIZE - 1)))
		return false;
	base_ = static_cast<unsigned char *>(base);
	npages_ = static_cast<std::uint32_t>(npages);
	top_ = hw_ = used_ = free_ = nonempty_ = 0;
	tag_ = static_cast<std::uint32_t *>(meta);
	next_ = tag_ + npages;
	prev_ = next_ + npages;
	for (auto &h : head_)
		h = NIL;
	return true;
}

std::uint32_t PageHeap::index(const void *p) const noexcept
{
	const auto off = reinterpret_cast<std::uintptr_t>(p) -
			 reinterpret_cast<std::uintptr_t>(base_);

	if (!contains(p) || (off & (PAGE_SIZE - 1)))
		return NIL;
	return static_cast<std::uint32_t>(off >> PAGE_SHIFT);
}

std::uint32_t PageHeap::used_run(std::uint32_t i) const noexcept
{
	// Only the first page of a run has TAG_HEAD (interior tags are 0),
	// so this recognises the start of an allocation exactly.
	if (i >= top_)
		return 0;
	const std::uint32_t t = tag_[i];
	if ((t & (TAG_HEAD | TAG_FREE)) != TAG_HEAD)
		return 0;
	const std::uint32_t len = t & TAG_LEN;
	if (len == 0 || len > top_ - i)
		return 0;
	return len;
}

// Write the boundary tags of the run [i, i + len).  The caller has cleared
// any tag inside it that is no longer a boundary.
void PageHeap::set_run(std::uint32_t i, std::uint32_t len, bool is_free) noexcept
{
	const std::uint32_t t = len | (is_free ? TAG_FREE : 0);

	if (len == 1) {
		tag_[i] = t | TAG_HEAD | TAG_TAIL;
		return;
	}
	tag_[i] = t | TAG_HEAD;
	tag_[i + len - 1] = t | TAG_TAIL;
}

void PageHeap::link(std::uint32_t i, std::uint32_t len) noexcept
{
	const unsigned c = size_class(len);
	const std::uint32_t h = head_[c];

	next_[i] = h;
	prev_[i] = NIL;
	if (h != NIL)
		prev_[h] = i;
	head_[c] = i;
	nonempty_ |= 1U << c;
	free_ += len;
}

void PageHeap::unlink(std::uint32_t i, std::uint32_t len) noexcept
{
	const unsigned c = size_class(len);
	const std::uint32_t n = next_[i], p = prev_[i];

	if (p != NIL)
		next_[p] = n;
	else
		head_[c] = n;
	if (n != NIL)
		prev_[n] = p;
	if (head_[c] == NIL)
		nonempty_ &= ~(1U << c);
	free_ -= len;
}

// Allocate n pages from the front of the free run [i, i + len); the rest
// stays free.  Its right neighbour is not free (runs are coalesced) and
// not the top, so the rest needs no merging.
std::uint32_t PageHeap::take(std::uint32_t i, std::uint32_t len, std::uint32_t n) noexcept
{
	unlink(i, len);
	// The old run's tail tag is rewritten either way: as the rest's, or
	// as the allocation's when it takes the whole run.
	if (len > n) {
		set_run(i + n, len - n, true);
		link(i + n, len - n);
	}
	set_run(i, n, false);
	used_ += n;
	return i;
}

void *PageHeap::alloc(std::size_t want, std::size_t *dirty) noexcept
{
	if (want == 0 || want > npages_)
		return nullptr;
	const auto n = static_cast<std::uint32_t>(want);
	const unsigned c = size_class(n);
	std::uint32_t i = head_[c], best = NIL, best_len = 0;

	// 1. Best fit among the first few runs of n's own class (an exact
	// fit ends the search): the runs there are at most twice as long
	// as n, but may be shorter.
	for (unsigned k = 0; k < SCAN && i != NIL; k++, i = next_[i]) {
		const std::uint32_t len = tag_[i] & TAG_LEN;
		if (len >= n && (best == NIL || len < best_len)) {
			best = i;
			best_len = len;
			if (len == n)
				break;
		}
	}
	if (best != NIL) {
		i = best;
		goto found;
	}
	// 2. Any run of a larger class is long enough: the smallest class.
	if (const std::uint32_t m = c + 1 < NCLASS ? nonempty_ & ~((2U << c) - 1) : 0) {
		i = head_[__builtin_ctz(m)];
		goto found;
	}
	// 3. The top: pages never handed out since top last moved down.
	if (npages_ - top_ >= n) {
		i = top_;
		top_ += n;
		set_run(i, n, false);
		used_ += n;
		if (dirty)
			*dirty = hw_ > i ? (hw_ - i < n ? hw_ - i : n) : 0;
		if (top_ > hw_)
			hw_ = top_;
		return base_ + (std::size_t{i} << PAGE_SHIFT);
	}
	// 4. The rest of n's own class: the last place a fit can be.
	for (; i != NIL; i = next_[i])
		if ((tag_[i] & TAG_LEN) >= n)
			goto found;
	return nullptr;

found:
	take(i, tag_[i] & TAG_LEN, n);
	// Every free run lies below top, hence below high_water.
	if (dirty)
		*dirty = n;
	return base_ + (std::size_t{i} << PAGE_SHIFT);
}

// Give back the used run [i, i + len), whose own tags the caller no
// longer needs: merge it with free neighbours, and into the top if it
// ends there.  Tags that stop being boundaries are cleared.
void PageHeap::release(std::uint32_t i, std::uint32_t len) noexcept
{
	std::uint32_t start = i, end = i + len;

	used_ -= len;
	if (start > 0 && (tag_[start - 1] & TAG_FREE)) {
		const std::uint32_t l = tag_[start - 1] & TAG_LEN;
		unlink(start - l, l);
		tag_[start - 1] = 0;
		tag_[start] = 0;
		start -= l;
	}
	if (end < top_ && (tag_[end] & TAG_FREE)) {
		const std::uint32_t r = tag_[end] & TAG_LEN;
		unlink(end, r);
		tag_[end - 1] = 0;
		tag_[end] = 0;
		end += r;
	}
	if (end == top_) {
		// Into the top: no tags at or above top.
		tag_[start] = 0;
		tag_[end - 1] = 0;
		top_ = start;
		return;
	}
	set_run(start, end - start, true);
	link(start, end - start);
}

bool PageHeap::free(void *p) noexcept
{
	const std::uint32_t i = index(p);
	const std::uint32_t len = i == NIL ? 0 : used_run(i);

	if (!len)
		return false;
	release(i, len);
	return true;
}

bool PageHeap::resize(void *p, std::size_t want) noexcept
{
	const std::uint32_t i = index(p);
	const std::uint32_t len = i == NIL ? 0 : used_run(i);

	if (!len || want == 0 || want > npages_)
		return false;
	const auto n = static_cast<std::uint32_t>(want);
	if (n == len)
		return true;
	if (n < len) {
		// Split off the tail as a used run and release it (its
		// last tag is the old run's, rewritten).
		set_run(i, n, false);
		set_run(i + n, len - n, false);
		release(i + n, len - n);
		return true;
	}

	const std::uint32_t end = i + len, more = n - len;
	if (end == top_) {
		if (npages_ - top_ < more)
			return false;
		top_ += more;
		if (top_ > hw_)
			hw_ = top_;
	} else if ((tag_[end] & TAG_FREE) && (tag_[end] & TAG_LEN) >= more) {
		const std::uint32_t r = tag_[end] & TAG_LEN;
		// Its head becomes interior (or our tail); its tail becomes
		// the rest's tail or ours, rewritten below either way.
		unlink(end, r);
		tag_[end] = 0;
		if (r > more) {
			set_run(end + more, r - more, true);
			link(end + more, r - more);
		}
	} else {
		return false;
	}
	tag_[end - 1] = 0;	// our old tail (or head, rewritten)
	set_run(i, n, false);
	used_ += more;
	return true;
}

std::size_t PageHeap::usable_size(const void *p) const noexcept
{
	const std::uint32_t i = index(p);

	return i == NIL ? 0 : std::size_t{used_run(i)} << PAGE_SHIFT;
}

const char *PageHeap::check() const noexcept
{
	if (!base_)
		return "not initialised";
	if (top_ > hw_ || hw_ > npages_)
		return "top > high_water or high_water > npages";

	std::uint32_t runs_free = 0, pages_free = 0, pages_used = 0;
	std::uint32_t per_class[NCLASS] = {};
	bool prev_free = false;
	for (std::uint32_t i = 0; i < top_;) {
		const std::uint32_t t = tag_[i], len = t & TAG_LEN;
		if (!(t & TAG_HEAD) || len == 0)
			return "a run does not start with a head tag";
		if (len > top_ - i)
			return "a run extends past top";
		const std::uint32_t last = i + len - 1;
		const std::uint32_t want_tail = len | (t & TAG_FREE) | TAG_TAIL;
		if (len == 1 ? t != (want_tail | TAG_HEAD) : t != (len | (t & TAG_FREE) | TAG_HEAD))
			return "a head tag has stray bits";
		if (len > 1 && tag_[last] != want_tail)
			return "a run's tail tag does not match its head";
		for (std::uint32_t j = i + 1; j < last; j++)
			if (tag_[j])
				return "an interior page has a tag";
		if (t & TAG_FREE) {
			if (prev_free)
				return "two free runs are adjacent";
			if (last + 1 == top_)
				return "a free run ends at top";
			runs_free++;
			pages_free += len;
			per_class[size_class(len)]++;
			prev_free = true;
		} else {
			pages_used += len;
			prev_free = false;
		}
		i += len;
	}
	for (std::uint32_t j = top_; j < hw_; j++)
		if (tag_[j])
			return "a page above top has a tag";
	if (pages_free != free_)
		return "free page count is wrong";
	if (pages_used != used_)
		return "used page count is wrong";

	std::uint32_t listed = 0;
	for (unsigned c = 0; c < NCLASS; c++) {
		std::uint32_t n = 0, prev = NIL;
		for (std::uint32_t i = head_[c]; i != NIL; prev = i, i = next_[i]) {
			if (i >= top_)
				return "a free list entry is not below top";
			const std::uint32_t t = tag_[i];
			if ((t & (TAG_FREE | TAG_HEAD)) != (TAG_FREE | TAG_HEAD))
				return "a free list entry is not the head of a free run";
			if (size_class(t & TAG_LEN) != c)
				return "a free run is on the wrong list";
			if (prev_[i] != prev)
				return "a free list's prev link is wrong";
			if (++n > per_class[c])
				return "a free list holds more runs than are free (or a cycle)";
		}
		if (n != per_class[c])
			return "a free run is on no list";
		if (((nonempty_ >> c) & 1) != (n != 0))
			return "the nonempty bitmap is wrong";
		listed += n;
	}
	if (listed != runs_free)
		return "free list total is wrong";
	return nullptr;
}

// The process-wide pool.

static_assert(POOL_LEN <= SD_POOL_MAX_LEN && POOL_LEN % PageHeap::PAGE_SIZE == 0);
static_assert(POOL_MIN % PageHeap::PAGE_SIZE == 0 && POOL_MIN <= POOL_LEN);

std::size_t next_pool_len(std::size_t failed, std::uint64_t memlock) noexcept
{
	std::size_t n = memlock < failed ? static_cast<std::size_t>(memlock) : failed / 2;

	n &= ~(PageHeap::PAGE_SIZE - 1);
	return n >= POOL_MIN ? n : 0;
}
static_assert(POOL_LEN / PageHeap::PAGE_SIZE <= PageHeap::MAX_PAGES);

namespace {

enum : int { POOL_UNTRIED, POOL_READY, POOL_OFF };

// heap, its metadata and pool_state change only under pool_lock.
// pool_lo/pool_hi are set once, when the pool is made (hi last, with
// release): 0 and 0 until then, so in_pool() needs no lock.
constinit PageHeap heap;
constinit pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
constinit std::atomic<int> pool_state{POOL_UNTRIED};
constinit std::atomic<std::uintptr_t> pool_lo{0};
constinit std::atomic<std::uintptr_t> pool_hi{0};

constexpr std::size_t THRESHOLD_UNKNOWN = ~std::size_t{0};
constinit std::atomic<std::size_t> cached_threshold{THRESHOLD_UNKNOWN};
constinit std::atomic<Allocator> program_allocator{Allocator::unknown};
// Whether the warning about a bad SD_ZEROCOPY was written (threads that
// race on the first threshold() write it once).
constinit std::atomic<bool> warned_env{false};

// pthread_atfork registration: 0 not yet, 1 under way, 2 done.
constinit std::atomic<int> atfork_state{0};

void say(const char *s) noexcept
{
	// Raw: the shim's own write() is a wrapper, and this runs in malloc.
	(void)syscall(SYS_write, 2, s, std::strlen(s));
}

[[noreturn]] void corrupt(const char *what) noexcept
{
	say("libsdpreload: ");
	say(what);
	say(": not the start of a live allocation in the zero-copy pool; aborting\n");
	std::abort();
}

// A decimal number at the start of s (digits only), saturating.
std::size_t parse(const char *s, std::size_t n) noexcept
{
	std::size_t v = 0;

	for (std::size_t i = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		const auto d = static_cast<std::size_t>(s[i] - '0');
		if (v > (THRESHOLD_UNKNOWN - 1 - d) / 10)
			return THRESHOLD_UNKNOWN - 1;
		v = v * 10 + d;
	}
	return v;
}

#ifdef SD_ZC_TEST_POOL
// The test build (tests/unit, libzc_anon.so): the pool is private
// anonymous memory, which a fork copies as it does a real pool;
// SD_ZC_TEST_THRESHOLD stands for the sysctl and SD_ZC_TEST_POOL_PAGES
// for the pool's size.
std::size_t env_number(const char *name, std::size_t dflt) noexcept
{
	const char *v = std::getenv(name);

	return v && *v ? parse(v, std::strlen(v)) : dflt;
}

std::size_t read_sysctl() noexcept
{
	return env_number("SD_ZC_TEST_THRESHOLD", 0);
}

std::size_t pool_len() noexcept
{
	constexpr std::size_t max = POOL_LEN / PageHeap::PAGE_SIZE;
	const std::size_t pages = env_number("SD_ZC_TEST_POOL_PAGES", max);

	return (pages > max ? max : pages) * PageHeap::PAGE_SIZE;
}

void *map_pool(std::size_t *len) noexcept
{
	return mmap(nullptr, *len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

// Private anonymous memory has no MADV_REMOVE: MADV_DONTNEED frees it the
// same way (the pages read zeroes afterwards).
void release_pages(void *p, std::size_t n) noexcept
{
	(void)madvise(p, n, MADV_DONTNEED);
}
#else
// net.sd.zerocopy_threshold, read with raw system calls (this runs inside
// malloc: no stdio, and not the shim's own open/read/close); 0 if the
// sysctl does not exist (no module).
std::size_t read_sysctl() noexcept
{
	char buf[32];
	const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/sys/net/sd/zerocopy_threshold",
				O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	const long n = syscall(SYS_read, fd, buf, sizeof(buf));
	(void)syscall(SYS_close, fd);
	return n > 0 ? parse(buf, static_cast<std::size_t>(n)) : 0;
}

std::size_t pool_len() noexcept
{
	return POOL_LEN;
}

// A pool of *len bytes on a throw-away AF_SD socket: the raw system call,
// never the shim's socket(), which would take this socket for one of the
// program's.  The mapping keeps what it needs of the socket.  Over
// RLIMIT_MEMLOCK (EAGAIN) it tries smaller pools (next_pool_len()) and
// sets *len to the one it made.
void *map_pool(std::size_t *len) noexcept
{
	const long fd = syscall(SYS_socket, AF_SD, SOCK_STREAM | SOCK_CLOEXEC, 0);
	void *m = MAP_FAILED;

	if (fd < 0)
		return MAP_FAILED;
	constexpr auto off = static_cast<off_t>(SD_PGOFF_POOL);
	for (std::size_t n = *len; n;) {
		m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
			 static_cast<int>(fd), off);
		if (m != MAP_FAILED) {
			*len = n;
			break;
		}
		struct rlimit rl;
		if (errno != EAGAIN || getrlimit(RLIMIT_MEMLOCK, &rl))
			break;
		n = next_pool_len(n, rl.rlim_cur);
	}
	(void)syscall(SYS_close, fd);
	return m;
}

// Give the pages of [p, p + n), a pool allocation leaving the cache (or
// the tail a shrink cuts off), back to the kernel: the pool's slots are
// freed, and read zeroes if used again.
void release_pages(void *p, std::size_t n) noexcept
{
	(void)madvise(p, n, MADV_REMOVE);
}
#endif

// Make the pool; pool_lock held, pool_state POOL_UNTRIED.  Sets pool_state
// to POOL_READY or, for good, POOL_OFF.
void make_pool() noexcept
{
	const int saved = errno;
	std::size_t len = pool_len();
	void *m = MAP_FAILED, *meta = MAP_FAILED;

	if (getpagesize() == static_cast<int>(PageHeap::PAGE_SIZE) && len)
		m = map_pool(&len);
	const std::size_t npages = len / PageHeap::PAGE_SIZE;
	if (m != MAP_FAILED)
		meta = mmap(nullptr, PageHeap::meta_bytes(npages), PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (meta == MAP_FAILED || !heap.init(m, npages, meta)) {
		if (meta != MAP_FAILED)
			munmap(meta, PageHeap::meta_bytes(npages));
		if (m != MAP_FAILED)
			munmap(m, len);
		pool_state.store(POOL_OFF, std::memory_order_relaxed);
		errno = saved;
		return;
	}
	pool_lo.store(reinterpret_cast<std::uintptr_t>(m), std::memory_order_relaxed);
	pool_hi.store(reinterpret_cast<std::uintptr_t>(m) + len, std::memory_order_release);
	pool_state.store(POOL_READY, std::memory_order_relaxed);
	errno = saved;
}

// Fork: the child must not inherit pool_lock held by a thread that does
// not exist in it, nor the heap half-changed.  As glibc does for its own
// arenas: take the lock before the fork, release it in the parent, and
// make it anew in the child (whose only thread is the forking one).
void fork_prepare() noexcept
{
	pthread_mutex_lock(&pool_lock);
}

void fork_parent() noexcept
{
	pthread_mutex_unlock(&pool_lock);
}

void fork_child() noexcept
{
	pthread_mutex_init(&pool_lock, nullptr);
}

// Register the fork handlers once, before the lock is first taken for
// the pool, and never with it held: fork runs the prepare handlers under
// glibc's atfork lock, so pthread_atfork under pool_lock would invert
// the order.  False while the registration is under way (in another
// thread, or in this one: pthread_atfork may allocate): the caller then
// leaves the pool alone, so that no thread holds pool_lock while a fork
// could still miss the handlers.
bool register_atfork() noexcept
{
	int s = atfork_state.load(std::memory_order_acquire);

	if (s == 2) [[likely]]
		return true;
	if (s == 1)
		return false;
	if (!atfork_state.compare_exchange_strong(s, 1, std::memory_order_acq_rel))
		return s == 2;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atfork_state.store(2, std::memory_order_release);
	return true;
}

class Locked {
public:
	Locked() noexcept { pthread_mutex_lock(&pool_lock); }
	~Locked() { pthread_mutex_unlock(&pool_lock); }
	Locked(const Locked &) = delete;
	Locked &operator=(const Locked &) = delete;
};

// The cache of freed allocations (zcpool.hpp, "Giving memory back").  A
// freed allocation stays live in the heap and resident, on this list,
// oldest first, until a pool_alloc() of about its size takes it again or
// it is evicted: released (release_pages()) and freed in the heap.  So
// every free run of the heap has been released, and what the pool keeps
// resident beyond what the program uses is at most cache_limit().
// Changed only under pool_lock.
constexpr unsigned CACHE_SLOTS = 128;
constexpr std::uint32_t MIB_PAGES = (std::uint32_t{1} << 20) >> PageHeap::PAGE_SHIFT;
constexpr std::uint32_t CACHE_MIN_PAGES = 16 * MIB_PAGES;
constexpr std::uint32_t CACHE_MAX_PAGES = 64 * MIB_PAGES;

struct Block {
	void *p;
	std::uint32_t pages;
};

struct Cache {
	Block b[CACHE_SLOTS];
	unsigned n;		// entries, b[0] the oldest
	std::uint32_t pages;	// their total
};
constinit Cache cache{};

// Blocks to give back, at most all the cache's and one more.
struct Victims {
	Block b[CACHE_SLOTS + 1];
	unsigned n = 0;
};

// How many pages the cache may hold: an eighth of what the program has
// in use, but at least CACHE_MIN_PAGES and at most CACHE_MAX_PAGES.
std::uint32_t cache_limit() noexcept
{
	const std::uint32_t in_use = (heap.used_pages() - cache.pages) / 8;

	return in_use < CACHE_MIN_PAGES	  ? CACHE_MIN_PAGES
	       : in_use > CACHE_MAX_PAGES ? CACHE_MAX_PAGES
					  : in_use;
}

void cache_remove(unsigned k) noexcept
{
	cache.pages -= cache.b[k].pages;
	cache.n--;
	std::memmove(&cache.b[k], &cache.b[k + 1], (cache.n - k) * sizeof(Block));
}

bool cached(const void *p) noexcept
{
	for (unsigned k = 0; k < cache.n; k++)
		if (cache.b[k].p == p)
			return true;
	return false;
}

// A cached block of n pages up to an eighth more (the smallest such,
// the newest of equals), taken off the cache; nullptr if none.  *pages is
// set to its length.
void *cache_take(std::uint32_t n, std::uint32_t *pages) noexcept
{
	const std::uint32_t most = n + n / 8;
	unsigned best = CACHE_SLOTS;

	for (unsigned k = cache.n; k-- > 0;) {
		const std::uint32_t len = cache.b[k].pages;
		if (len >= n && len <= most && (best == CACHE_SLOTS || len < cache.b[best].pages)) {
			best = k;
			if (len == n)
				break;
		}
	}
	if (best == CACHE_SLOTS)
		return nullptr;
	void *p = cache.b[best].p;
	*pages = cache.b[best].pages;
	cache_remove(best);
	return p;
}

// Cache the freed allocation b; what must go back to the system instead
// (b itself if it is larger than the cache may hold, else the oldest
// blocks beyond the limit) is added to v.
void cache_put(Block b, Victims &v) noexcept
{
	if (cache.n == CACHE_SLOTS) {
		v.b[v.n++] = cache.b[0];
		cache_remove(0);
	}
	cache.b[cache.n++] = b;
	cache.pages += b.pages;
	const std::uint32_t limit = cache_limit();
	if (b.pages > limit) {
		cache_remove(cache.n - 1);
		v.b[v.n++] = b;
		return;
	}
	while (cache.pages > limit) {
		v.b[v.n++] = cache.b[0];
		cache_remove(0);
	}
}

// Empty the cache into v.
void cache_drain(Victims &v) noexcept
{
	while (cache.n) {
		v.b[v.n++] = cache.b[0];
		cache_remove(0);
	}
}

// Give the blocks of v back: their pages to the system while the ranges
// are still live allocations (once the heap has one, another thread may
// take it), then the ranges to the heap.  pool_lock not held.
void give_back(const Victims &v) noexcept
{
	if (!v.n)
		return;
	const int saved = errno;
	for (unsigned k = 0; k < v.n; k++)
		release_pages(v.b[k].p, std::size_t{v.b[k].pages} << PageHeap::PAGE_SHIFT);
	errno = saved;
	bool ok = true;
	{
		Locked l;
		for (unsigned k = 0; k < v.n; k++)
			ok &= heap.free(v.b[k].p);
	}
	if (!ok)
		corrupt("free()");
}

} // namespace

void set_allocator(Allocator a) noexcept
{
	program_allocator.store(a, std::memory_order_release);
}

Allocator allocator() noexcept
{
	return program_allocator.load(std::memory_order_acquire);
}

namespace {

// Whether zero copy is on for a program whose malloc is a's (see
// threshold() in zcpool.hpp).  The default follows the allocator: next to
// glibc's, the pool is the only allocator that ever sees a pool pointer;
// a program that brings its own (Redis links jemalloc) may pass malloc's
// pointers to that allocator's other entry points (mallocx, sdallocx,
// mallctl, defrag hints), which the shim does not interpose and which
// know nothing of the pool.
bool zerocopy_on(Allocator a) noexcept
{
	const char *env = std::getenv("SD_ZEROCOPY");

	if (!env)
		return a == Allocator::glibc;
	if (env[0] == '1' && !env[1])
		return true;
	if (env[0] == '0' && !env[1])
		return false;
	if (!warned_env.exchange(true, std::memory_order_relaxed)) {
		// One line: the value up to its first control character,
		// and at most 40 bytes of it.
		std::size_t n = 0;
		while (n < 40 && static_cast<unsigned char>(env[n]) >= 0x20)
			n++;
		say("libsdpreload: SD_ZEROCOPY=");
		(void)syscall(SYS_write, 2, env, n);
		say(a == Allocator::glibc
			    ? " is neither 0 nor 1; ignored (zero copy stays on: glibc's malloc)\n"
			    : " is neither 0 nor 1; ignored (zero copy stays off: the program "
			      "brings its own malloc)\n");
	}
	return a == Allocator::glibc;
}

} // namespace

std::size_t threshold() noexcept
{
	std::size_t t = cached_threshold.load(std::memory_order_relaxed);

	if (t != THRESHOLD_UNKNOWN) [[likely]]
		return t;
	// Before libc's own initialisation (ld.so allocating while it loads
	// the program) there is no environment to read yet, and before
	// zcmalloc.cpp resolved the next allocator it is not known whose it
	// is: answer "off" now and decide on a later call.  Nothing can be
	// in the pool before either.
	if (!environ)
		return 0;
	const Allocator a = allocator();
	if (a == Allocator::unknown)
		return 0;
	t = zerocopy_on(a) ? read_sysctl() : 0;
	// Zero copy moves whole pages: nothing smaller than one qualifies.
	if (t && t < PageHeap::PAGE_SIZE)
		t = PageHeap::PAGE_SIZE;
	cached_threshold.store(t, std::memory_order_relaxed);
	return t;
}

bool in_pool(const void *p, std::size_t len) noexcept
{
	const std::uintptr_t hi = pool_hi.load(std::memory_order_acquire);

	if (!hi)
		return false;
	const std::uintptr_t lo = pool_lo.load(std::memory_order_relaxed);
	const auto u = reinterpret_cast<std::uintptr_t>(p);
	return u >= lo && u < hi && len <= hi - u;
}

void pool_prepare() noexcept
{
	if (!threshold() || !register_atfork())
		return;
	Locked l;
	if (pool_state.load(std::memory_order_relaxed) == POOL_UNTRIED)
		make_pool();
}

void *pool_alloc(std::size_t n, bool zero) noexcept
{
	if (pool_state.load(std::memory_order_relaxed) == POOL_OFF || n == 0 || n > POOL_LEN ||
	    !register_atfork())
		return nullptr;

	const auto want = static_cast<std::uint32_t>(PageHeap::pages_for(n));
	void *p;
	std::size_t dirty = 0;
	Victims v;
	{
		Locked l;
		if (pool_state.load(std::memory_order_relaxed) == POOL_UNTRIED)
			make_pool();
		if (pool_state.load(std::memory_order_relaxed) != POOL_READY)
			return nullptr;
		std::uint32_t got;
		if ((p = cache_take(want, &got)))
			dirty = got;
		else if (!(p = heap.alloc(want, &dirty)))
			cache_drain(v);
	}
	// No room but in the cache: give it back, and try once more.
	if (v.n) {
		give_back(v);
		Locked l;
		p = heap.alloc(want, &dirty);
	}
	// Pages at or above the high-water mark are still the pool's
	// zeroes; clear only those that were used before.
	if (p && zero && dirty) {
		const std::size_t d = dirty << PageHeap::PAGE_SHIFT;
		std::memset(p, 0, d < n ? d : n);
	}
	return p;
}

void pool_free(void *p) noexcept
{
	Victims v;
	std::size_t n;
	{
		Locked l;
		n = cached(p) ? 0 : heap.usable_size(p);
		if (n)
			cache_put({p, static_cast<std::uint32_t>(n >> PageHeap::PAGE_SHIFT)}, v);
	}
	if (!n)
		corrupt("free()");
	give_back(v);
}

bool pool_resize(void *p, std::size_t n) noexcept
{
	const std::size_t want = PageHeap::pages_for(n) << PageHeap::PAGE_SHIFT;
	std::size_t len;
	{
		Locked l;
		len = cached(p) ? 0 : heap.usable_size(p);
		if (!len || want == 0)
			return false;
		if (want >= len)
			return heap.resize(p, want >> PageHeap::PAGE_SHIFT);
	}
	// Shrinking: the tail goes back to the system before the heap has
	// it, as a freed block's pages do (its free runs are all released).
	const int saved = errno;
	release_pages(static_cast<unsigned char *>(p) + want, len - want);
	errno = saved;
	Locked l;
	return heap.resize(p, want >> PageHeap::PAGE_SHIFT);
}

std::size_t pool_usable_size(const void *p) noexcept
{
	std::size_t n;
	{
		Locked l;
		n = cached(p) ? 0 : heap.usable_size(p);
	}
	if (!n)
		corrupt("malloc_usable_size() or realloc()");
	return n;
}

} // namespace sd::zc
