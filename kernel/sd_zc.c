// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD zero copy: page pools, and pages handed from one end of a
 * connection to the other (Documentation/zerocopy.rst).
 *
 * A pool is memory a process maps from an AF_SD socket (SD_PGOFF_POOL).
 * Its pages are the module's: slot i of the pool holds one page, allocated
 * at the first touch.  Because the module owns the mapping, it may remove
 * a page from it and insert another, which it may not do in anonymous
 * memory.  libsd serves large malloc()s from a pool.
 *
 * Copy on write.  A slot is "shared" (SD_SLOT_SHARED) once its page may be
 * held by anyone else: a queued send, another pool that received it, a
 * child after fork.  A shared slot is never mapped writable: a write
 * faults, and the fault gives the slot a copy (sd_pool_cow()).  A slot
 * that may be mapped writable is marked SD_SLOT_WRITABLE; whoever makes it
 * shared first removes its mapping (zap), so no one writes a page after it
 * was sent.  Receiving replaces slots with the sender's pages, mapped
 * read-only, shared.
 *
 * Handing pages over.  SD_IOC_ZC_SEND takes references on the pages of a
 * range of the sender's pool and queues them on the connection (struct
 * sd_zc_queue of the sender's TX ring) under a handle, the sequence number,
 * which the sender puts in an SD_REC_ZC record.  The consumer of the ring,
 * libsd (SD_IOC_ZC_RECV) or the kernel's own receive path
 * (sd_zc_read()), gives the handle back and gets the bytes, remapped or
 * copied.  Handles index a queue private to the connection: nothing a peer
 * writes in a ring names a page, and a handle that is not the queue's next
 * resets only this connection.
 *
 * Locks (outermost first):
 *   sd_zc_queue.cons_lock  one consumer of a queue at a time (mutex; held
 *                          while copying to user memory)
 *   mmap_lock              of the calling process (page faults take it)
 *   sd_pool.lock           slots, free pages, mapping count (mutex)
 *   sd_zc_queue.lock       the entry list and counts (spinlock)
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/xarray.h>

#include "af_sd.h"

#define SD_SLOT_SHARED		XA_MARK_0	/* someone else may hold it */
#define SD_SLOT_WRITABLE	XA_MARK_1	/* may be mapped writable */

/* Pages a pool keeps for reuse instead of freeing them. */
#define SD_POOL_FREE_MAX	256

/* Pool pages: user memory, charged to the memory cgroup of the toucher. */
#define SD_POOL_GFP		(GFP_HIGHUSER | __GFP_ACCOUNT | __GFP_NOWARN)

struct sd_pool {
	refcount_t		ref;		/* the object */
	struct mutex		lock;		/* everything below */
	struct xarray		slots;		/* index -> struct page * */
	/* The mm whose mappings (VMAs) this pool backs; not referenced. */
	struct mm_struct	*mm;
	struct net		*net;		/* for counters (see sd_pool_mmap) */
	unsigned int		nr_vmas;	/* mappings; 0: slots released */
	bool			broken;		/* a fork copy ran out of memory */
	/* The copy made for the child during a fork (one per fork). */
	struct sd_pool		*fork_child;
	unsigned int		nr_free;
	struct page		*free[SD_POOL_FREE_MAX];
};

static const struct vm_operations_struct sd_pool_vm_ops;

static pgoff_t sd_pool_index(struct vm_area_struct *vma, unsigned long addr)
{
	return vma->vm_pgoff - (SD_PGOFF_POOL >> PAGE_SHIFT) +
	       ((addr - vma->vm_start) >> PAGE_SHIFT);
}

static struct sd_pool *sd_pool_new(struct mm_struct *mm, struct net *net)
{
	struct sd_pool *pool = kzalloc(sizeof(*pool), GFP_KERNEL_ACCOUNT);

	if (!pool)
		return NULL;
	refcount_set(&pool->ref, 1);
	mutex_init(&pool->lock);
	xa_init(&pool->slots);
	pool->mm = mm;
	pool->net = net;
	pool->nr_vmas = 1;
	return pool;
}

/* Drop every slot and spare page: the last mapping went.  pool->lock. */
static void sd_pool_release_pages(struct sd_pool *pool)
{
	struct page *page;
	unsigned long idx;

	xa_for_each(&pool->slots, idx, page)
		put_page(page);
	xa_destroy(&pool->slots);
	while (pool->nr_free)
		put_page(pool->free[--pool->nr_free]);
}

static void sd_pool_put(struct sd_pool *pool)
{
	if (!refcount_dec_and_test(&pool->ref))
		return;
	if (pool->fork_child)
		sd_pool_put(pool->fork_child);
	mutex_destroy(&pool->lock);
	kfree(pool);
}

/*
 * A fresh page for a slot, from the spares if there are any.  @gfp adds
 * to SD_POOL_GFP (a system call asks for __GFP_NORETRY: out of memory it
 * fails with ENOMEM rather than calling the OOM killer, as a page fault
 * does).  pool->lock.
 */
static struct page *sd_pool_page(struct sd_pool *pool, bool zero, gfp_t gfp)
{
	struct page *page;

	if (pool->nr_free) {
		page = pool->free[--pool->nr_free];
		if (zero)
			clear_highpage(page);
		return page;
	}
	return alloc_page(SD_POOL_GFP | gfp | (zero ? __GFP_ZERO : 0));
}

/*
 * A slot let go of @page (its mappings already removed).  Nobody else
 * holds it: keep it as a spare.  pool->lock.
 */
static void sd_pool_unref(struct sd_pool *pool, struct page *page)
{
	if (page_ref_count(page) == 1 && pool->nr_free < SD_POOL_FREE_MAX)
		pool->free[pool->nr_free++] = page;
	else
		put_page(page);
}

/*
 * The page of slot @idx, allocated (zeroed) if the slot is empty.  NULL
 * when out of memory.  pool->lock.
 */
static struct page *sd_pool_slot(struct sd_pool *pool, pgoff_t idx,
				 gfp_t gfp)
{
	struct page *page = xa_load(&pool->slots, idx);

	if (page)
		return page;
	page = sd_pool_page(pool, true, gfp);
	if (!page)
		return NULL;
	if (xa_err(xa_store(&pool->slots, idx, page,
			    GFP_KERNEL_ACCOUNT | gfp))) {
		sd_pool_unref(pool, page);
		return NULL;
	}
	return page;
}

/*
 * Give slot @idx a private copy of its shared page @old.  The caller
 * removes @old's mapping, if any, and then calls sd_pool_unref() on it.
 * Returns the copy, or NULL when out of memory.  pool->lock.
 */
static struct page *sd_pool_cow(struct sd_pool *pool, pgoff_t idx,
				struct page *old)
{
	struct page *page = sd_pool_page(pool, false, 0);

	if (!page)
		return NULL;
	copy_highpage(page, old);
	/* Replacing a present entry allocates nothing: it cannot fail. */
	xa_store(&pool->slots, idx, page, GFP_KERNEL_ACCOUNT);
	xa_clear_mark(&pool->slots, idx, SD_SLOT_SHARED);
	xa_clear_mark(&pool->slots, idx, SD_SLOT_WRITABLE);
	sd_stat_inc(pool->net, SD_STAT_ZC_COW);
	return page;
}

/*
 * Mark slots [@first, @first + @nr) shared and take a reference on each
 * page for @pages, allocating the pages of empty slots.  *@zap is set if
 * any may be mapped writable (the caller removes those mappings).  One
 * walk under the xarray's lock, rather than a lookup per page and mark;
 * only an empty slot (never touched) leaves it.  Returns how many were
 * taken: fewer than @nr when out of memory.  pool->lock.
 */
static u32 sd_pool_share(struct sd_pool *pool, pgoff_t first, u32 nr,
			 struct page **pages, bool *zap)
{
	XA_STATE(xas, &pool->slots, first);
	struct page *page;
	u32 i;

	xas_lock(&xas);
	for (i = 0; i < nr; i++) {
		page = i ? xas_next(&xas) : xas_load(&xas);
		if (!page) {
			xas_unlock(&xas);
			page = sd_pool_slot(pool, first + i, __GFP_NORETRY);
			if (!page)
				return i;
			xas_set(&xas, first + i);
			xas_lock(&xas);
			xas_load(&xas);
		}
		if (xas_get_mark(&xas, SD_SLOT_WRITABLE)) {
			xas_clear_mark(&xas, SD_SLOT_WRITABLE);
			*zap = true;
		}
		xas_set_mark(&xas, SD_SLOT_SHARED);
		get_page(page);
		pages[i] = page;
	}
	xas_unlock(&xas);
	return nr;
}

/*
 * Put @pages into slots [@first, @first + @nr), shared, not writable, and
 * return what the slots held in @old (NULL for an empty one).  The same
 * single walk; an empty slot needs a node, which is allocated outside the
 * lock and may fail.  Returns how many were placed.  pool->lock.
 */
static u32 sd_pool_replace(struct sd_pool *pool, pgoff_t first, u32 nr,
			   struct page **pages, struct page **old)
{
	XA_STATE(xas, &pool->slots, first);
	struct page *prev;
	u32 i;

	xas_lock(&xas);
	for (i = 0; i < nr; i++) {
		prev = i ? xas_next(&xas) : xas_load(&xas);
		if (!prev) {
			xas_unlock(&xas);
			prev = xa_store(&pool->slots, first + i, pages[i],
					GFP_KERNEL_ACCOUNT | __GFP_NORETRY);
			if (xa_is_err(prev))
				return i;
			xas_set(&xas, first + i);
			xas_lock(&xas);
			xas_load(&xas);
		} else {
			xas_store(&xas, pages[i]);
		}
		xas_set_mark(&xas, SD_SLOT_SHARED);
		xas_clear_mark(&xas, SD_SLOT_WRITABLE);
		get_page(pages[i]);
		old[i] = prev;
	}
	xas_unlock(&xas);
	return nr;
}

/* ---- the mapping --------------------------------------------------------- */

/*
 * fork: the child's mapping @vma must not share pages with the parent's
 * writably.  Give the child its own pool holding the same pages, mark
 * them shared on both sides, and remove the parent's mappings of them so
 * that the next write on either side copies.  dup_mmap() calls this with
 * both mms write-locked, before it copies page tables (none are left to
 * copy).  One child pool serves all the parent's mappings of @parent.
 */
static void sd_pool_fork(struct sd_pool *parent, struct vm_area_struct *vma)
{
	pgoff_t first = sd_pool_index(vma, vma->vm_start);
	pgoff_t last = sd_pool_index(vma, vma->vm_end - 1);
	struct vm_area_struct *pvma;
	struct sd_pool *child;
	struct page *page;
	unsigned long idx;

	/*
	 * Lock order: a pool before the pools of its children, which are
	 * made here and so never their parent's ancestors (a grandchild's
	 * fork nests its parent, our child, the same way).  Lockdep sees
	 * one class, hence the nesting level.
	 */
	mutex_lock(&parent->lock);
	child = parent->fork_child;
	if (child && (child->mm != vma->vm_mm || !child->nr_vmas))
		child = NULL;
	if (child) {
		refcount_inc(&child->ref);
		mutex_lock_nested(&child->lock, SINGLE_DEPTH_NESTING);
		child->nr_vmas++;
	} else {
		child = sd_pool_new(vma->vm_mm, parent->net);
		if (!child) {
			/* Nothing to back it with: faults there fail. */
			vma->vm_private_data = NULL;
			goto out;
		}
		mutex_lock_nested(&child->lock, SINGLE_DEPTH_NESTING);
		if (parent->fork_child)
			sd_pool_put(parent->fork_child);
		refcount_inc(&child->ref);
		parent->fork_child = child;
	}
	vma->vm_private_data = child;

	xa_for_each_range(&parent->slots, idx, page, first, last) {
		if (xa_err(xa_store(&child->slots, idx, page,
				    GFP_KERNEL_ACCOUNT))) {
			child->broken = true;
			break;
		}
		get_page(page);
		xa_set_mark(&child->slots, idx, SD_SLOT_SHARED);
		xa_set_mark(&parent->slots, idx, SD_SLOT_SHARED);
		xa_clear_mark(&parent->slots, idx, SD_SLOT_WRITABLE);
	}
	mutex_unlock(&child->lock);

	/* current is the parent, its mm the pool's. */
	pvma = find_vma(current->mm, vma->vm_start);
	if (pvma && pvma->vm_ops == &sd_pool_vm_ops &&
	    pvma->vm_private_data == parent && pvma->vm_start <= vma->vm_start)
		zap_page_range(pvma, vma->vm_start,
			       vma->vm_end - vma->vm_start);
out:
	mutex_unlock(&parent->lock);
}

static void sd_pool_vm_open(struct vm_area_struct *vma)
{
	struct sd_pool *pool = vma->vm_private_data;

	if (!pool)
		return;
	if (vma->vm_mm != pool->mm) {
		sd_pool_fork(pool, vma);
		return;
	}
	/* Split or moved within the same process. */
	refcount_inc(&pool->ref);
	mutex_lock(&pool->lock);
	pool->nr_vmas++;
	mutex_unlock(&pool->lock);
}

static void sd_pool_vm_close(struct vm_area_struct *vma)
{
	struct sd_pool *pool = vma->vm_private_data;

	if (!pool)
		return;
	mutex_lock(&pool->lock);
	if (!--pool->nr_vmas)
		sd_pool_release_pages(pool);
	mutex_unlock(&pool->lock);
	sd_pool_put(pool);
}

static vm_fault_t sd_pool_fault(struct vm_fault *vmf)
{
	struct sd_pool *pool = vmf->vma->vm_private_data;
	pgoff_t idx = sd_pool_index(vmf->vma, vmf->address);
	vm_fault_t ret = VM_FAULT_OOM;
	struct page *page, *old;

	if (!pool)
		return VM_FAULT_OOM;
	mutex_lock(&pool->lock);
	if (pool->broken)
		goto out;
	page = sd_pool_slot(pool, idx, 0);
	if (!page)
		goto out;
	if ((vmf->flags & FAULT_FLAG_WRITE) &&
	    xa_get_mark(&pool->slots, idx, SD_SLOT_SHARED)) {
		/* Not mapped here (we are faulting): no mapping to remove. */
		old = page;
		page = sd_pool_cow(pool, idx, old);
		if (!page)
			goto out;
		sd_pool_unref(pool, old);
	}
	get_page(page);
	vmf->page = page;
	ret = 0;
out:
	mutex_unlock(&pool->lock);
	return ret;
}

/*
 * A write to a page mapped read-only.  An unshared slot becomes writable;
 * a shared one gets a copy, and the fault is retried on it.
 */
static vm_fault_t sd_pool_mkwrite(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct sd_pool *pool = vma->vm_private_data;
	unsigned long addr = vmf->address & PAGE_MASK;
	pgoff_t idx = sd_pool_index(vma, addr);
	struct page *page, *copy;

	if (!pool)
		return VM_FAULT_SIGBUS;
	mutex_lock(&pool->lock);
	page = xa_load(&pool->slots, idx);
	if (page != vmf->page ||
	    xa_get_mark(&pool->slots, idx, SD_SLOT_SHARED)) {
		if (page == vmf->page) {
			copy = sd_pool_cow(pool, idx, page);
			if (!copy) {
				mutex_unlock(&pool->lock);
				return VM_FAULT_OOM;
			}
		}
		/* Retry on whatever the slot holds now. */
		zap_page_range(vma, addr, PAGE_SIZE);
		if (page == vmf->page)
			sd_pool_unref(pool, page);
		mutex_unlock(&pool->lock);
		return VM_FAULT_NOPAGE;
	}
	xa_set_mark(&pool->slots, idx, SD_SLOT_WRITABLE);
	mutex_unlock(&pool->lock);
	/*
	 * If the slot is shared after this, whoever shared it removed this
	 * mapping first, and the fault finds its page table entry changed.
	 */
	lock_page(page);
	return VM_FAULT_LOCKED;
}

static const struct vm_operations_struct sd_pool_vm_ops = {
	.open		= sd_pool_vm_open,
	.close		= sd_pool_vm_close,
	.fault		= sd_pool_fault,
	.page_mkwrite	= sd_pool_mkwrite,
};

/*
 * mmap(SD_PGOFF_POOL) on an AF_SD socket: a new pool.  The mapping holds
 * the socket's file, which holds its network namespace, so pool->net
 * stays valid while a mapping exists; fork copies share that file.
 */
int sd_pool_mmap(struct sock *sk, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	struct sd_pool *pool;

	if (vma->vm_pgoff != SD_PGOFF_POOL >> PAGE_SHIFT)
		return -EINVAL;
	if (!(vma->vm_flags & VM_SHARED) || len > SD_POOL_MAX_LEN)
		return -EINVAL;
	pool = sd_pool_new(vma->vm_mm, sock_net(sk));
	if (!pool)
		return -ENOMEM;
	/* MIXEDMAP: sd_zc_remap() inserts pages with vm_insert_pages(). */
	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND;
	vma->vm_ops = &sd_pool_vm_ops;
	vma->vm_private_data = pool;
	return 0;
}

/* ---- the queue ----------------------------------------------------------- */

struct sd_zc_entry {
	struct list_head	node;
	u64			seq;
	u32			len;
	u32			nr_pages;
	struct page		*pages[];
};

void sd_zc_queue_init(struct sd_zc_queue *zq)
{
	mutex_init(&zq->cons_lock);
	spin_lock_init(&zq->lock);
	INIT_LIST_HEAD(&zq->entries);
	init_waitqueue_head(&zq->wait);
	zq->seq = 0;
	zq->queued = 0;
}

static void sd_zc_entry_free(struct sd_zc_entry *e)
{
	u32 i;

	for (i = 0; i < e->nr_pages; i++)
		put_page(e->pages[i]);
	kvfree(e);
}

/* The connection is gone: release everything still queued. */
void sd_zc_queue_purge(struct sd_zc_queue *zq)
{
	struct sd_zc_entry *e, *tmp;

	list_for_each_entry_safe(e, tmp, &zq->entries, node) {
		list_del(&e->node);
		sd_zc_entry_free(e);
	}
	zq->queued = 0;
}

static void sd_zc_unlink(struct sd_zc_queue *zq, struct sd_zc_entry *e)
{
	spin_lock(&zq->lock);
	list_del(&e->node);
	zq->queued -= e->len;
	spin_unlock(&zq->lock);
	sd_zc_entry_free(e);
	wake_up_interruptible(&zq->wait);
}

/*
 * The entry of handle @seq.  Consuming, it must be the queue's next:
 * entries before it were skipped by their consumer, and their bytes are
 * its loss.  Peeking looks further on and removes nothing.  Called with
 * cons_lock held (only its holders remove entries).
 */
static struct sd_zc_entry *sd_zc_find(struct sd_zc_queue *zq, u64 seq,
				      bool peek)
{
	struct sd_zc_entry *e, *found = NULL;

	if (peek) {
		spin_lock(&zq->lock);
		list_for_each_entry(e, &zq->entries, node) {
			if (e->seq == seq) {
				found = e;
				break;
			}
		}
		spin_unlock(&zq->lock);
		return found;
	}
	for (;;) {
		spin_lock(&zq->lock);
		e = list_first_entry_or_null(&zq->entries, struct sd_zc_entry,
					     node);
		spin_unlock(&zq->lock);
		if (!e || e->seq > seq)
			return NULL;
		if (e->seq == seq)
			return e;
		sd_zc_unlink(zq, e);
	}
}

/* ---- sending ------------------------------------------------------------- */

/* Lockless: whether @len more bytes would fit now (a hint). */
static bool sd_zc_fits(struct sd_zc_queue *zq, u32 len)
{
	return READ_ONCE(zq->queued) + len <= SD_ZC_QUEUE_MAX;
}

static bool sd_zc_room(struct sd_zc_queue *zq, u32 len)
{
	bool room;

	spin_lock(&zq->lock);
	room = zq->queued + len <= SD_ZC_QUEUE_MAX;
	if (room)
		zq->queued += len;
	spin_unlock(&zq->lock);
	return room;
}

/* The connection can take no more: the peer left, or this end shut down. */
static bool sd_zc_dead(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	return READ_ONCE(sk->sk_shutdown) & SEND_SHUTDOWN ||
	       READ_ONCE(sk->sk_err) || READ_ONCE(ss->conn->gone[!ss->side]);
}

/*
 * Count @len more bytes as queued, waiting for room (up to the send
 * timeout) unless @nowait.  The wait is re-checked periodically too, so
 * that the end of the connection is seen without a wake-up of its own.
 */
static int sd_zc_reserve(struct sock *sk, struct sd_zc_queue *zq, u32 len,
			 bool nowait)
{
	long timeo = sock_sndtimeo(sk, nowait);
	unsigned long deadline = jiffies + timeo;

	while (!sd_zc_room(zq, len)) {
		if (!timeo)
			return nowait ? -ENOBUFS : -EAGAIN;
		if (sd_zc_dead(sk))
			return -EPIPE;
		if (signal_pending(current))
			return sock_intr_errno(timeo);
		wait_event_interruptible_timeout(zq->wait,
						 sd_zc_fits(zq, len),
						 min_t(long, timeo, HZ / 10));
		if (timeo != MAX_SCHEDULE_TIMEOUT)
			timeo = time_after_eq(jiffies, deadline) ? 0 :
				deadline - jiffies;
	}
	return 0;
}

/*
 * SD_IOC_ZC_SEND: queue the pages of [addr, addr + len) of the caller's
 * pool on @ring (this end's TX ring).  The caller then writes the record.
 */
int sd_zc_send(struct sock *sk, struct sd_ring *ring, struct sd_zc_send *zs)
{
	struct sd_zc_queue *zq = &ring->zq;
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	struct sd_zc_entry *e;
	struct sd_pool *pool;
	bool zap = false;
	pgoff_t first;
	u32 i, nr;
	int err;

	if (zs->flags & ~SD_ZC_DONTWAIT || zs->pad)
		return -EINVAL;
	if (!zs->len || zs->len > SD_ZC_MAX || !PAGE_ALIGNED(zs->len) ||
	    !PAGE_ALIGNED(zs->addr) || zs->addr + zs->len < zs->addr)
		return -EINVAL;
	nr = zs->len >> PAGE_SHIFT;
	e = kvmalloc(struct_size(e, pages, nr), GFP_KERNEL_ACCOUNT);
	if (!e)
		return -ENOMEM;

	/* Room first, so that a full queue costs no page work. */
	err = sd_zc_reserve(sk, zq, zs->len, zs->flags & SD_ZC_DONTWAIT);
	if (err)
		goto err_free;

	mmap_read_lock(mm);
	vma = vma_lookup(mm, zs->addr);
	err = -EINVAL;
	if (!vma || vma->vm_ops != &sd_pool_vm_ops || !vma->vm_private_data ||
	    zs->addr + zs->len > vma->vm_end)
		goto err_unlock_mm;
	pool = vma->vm_private_data;
	mutex_lock(&pool->lock);
	err = -ENOMEM;
	if (pool->broken)
		goto err_unlock_pool;
	first = sd_pool_index(vma, zs->addr);
	i = sd_pool_share(pool, first, nr, e->pages, &zap);
	if (i < nr)
		goto err_put_pages;
	/* From here on every write of the sender faults and copies. */
	if (zap)
		zap_page_range(vma, zs->addr, zs->len);
	mutex_unlock(&pool->lock);
	mmap_read_unlock(mm);

	e->nr_pages = nr;
	e->len = zs->len;
	spin_lock(&zq->lock);
	e->seq = ++zq->seq;
	list_add_tail(&e->node, &zq->entries);
	spin_unlock(&zq->lock);
	zs->seq = e->seq;
	sd_stat_inc(sock_net(sk), SD_STAT_ZC_SENDS);
	atomic64_add(nr, &sd_net(sock_net(sk))->stats[SD_STAT_ZC_PAGES]);
	return 0;

err_put_pages:
	/* Marks set so far stay: shared too soon only costs a copy. */
	while (i--)
		put_page(e->pages[i]);
err_unlock_pool:
	mutex_unlock(&pool->lock);
err_unlock_mm:
	mmap_read_unlock(mm);
	spin_lock(&zq->lock);
	zq->queued -= zs->len;
	spin_unlock(&zq->lock);
err_free:
	kvfree(e);
	return err;
}

/* ---- receiving ----------------------------------------------------------- */

/*
 * Put @nr pages into the caller's pool mapping at @addr (page-aligned),
 * replacing what its slots held, with one unmap and one TLB flush for the
 * lot.  Returns how many were placed (the rest is the caller's to copy):
 * 0 if @addr is not in a pool.
 */
static u32 sd_zc_remap(struct net *net, unsigned long addr,
		       struct page **pages, u32 nr)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	unsigned long left;
	struct sd_pool *pool;
	struct page **old;
	u32 i, done = 0;

	old = kvmalloc_array(nr, sizeof(*old), GFP_KERNEL);
	if (!old)
		return 0;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, addr);
	if (!vma || vma->vm_ops != &sd_pool_vm_ops || !vma->vm_private_data)
		goto out;
	pool = vma->vm_private_data;
	nr = min_t(unsigned long, nr, (vma->vm_end - addr) >> PAGE_SHIFT);
	mutex_lock(&pool->lock);
	if (pool->broken)
		goto out_unlock;
	done = sd_pool_replace(pool, sd_pool_index(vma, addr), nr, pages, old);
	if (done) {
		/*
		 * Out with the old pages, in with the new, read-only (the
		 * slots are shared, so a write faults and copies).  What
		 * fails to be inserted is mapped at the next touch.
		 */
		zap_page_range(vma, addr, (unsigned long)done << PAGE_SHIFT);
		left = done;
		vm_insert_pages(vma, addr, pages, &left);
		for (i = 0; i < done; i++)
			if (old[i])
				sd_pool_unref(pool, old[i]);
	}
out_unlock:
	mutex_unlock(&pool->lock);
out:
	mmap_read_unlock(mm);
	kvfree(old);
	if (done)
		atomic64_add(done, &sd_net(net)->stats[SD_STAT_ZC_REMAPPED]);
	return done;
}

/* Copy @len bytes of @e from byte @off to the iterator. */
static size_t sd_zc_copy(struct sd_zc_entry *e, u32 off, u32 len,
			 struct iov_iter *to)
{
	size_t done = 0;

	while (done < len) {
		u32 at = off + done;
		u32 poff = at & ~PAGE_MASK;
		u32 n = min_t(u32, len - done, PAGE_SIZE - poff);
		size_t c = copy_page_to_iter(e->pages[at >> PAGE_SHIFT], poff,
					     n, to);

		done += c;
		if (c < n)
			break;
	}
	return done;
}

/*
 * Deliver up to @want bytes of the entry of handle @seq, from its byte
 * @off, to @to: whole pages remapped where the iterator's first segment
 * lines up in a pool of the caller, the rest copied.  @len, unless 0, is
 * the length the record claims, which must be the entry's.  A consumed
 * entry is released.  Returns 0 with *done (and *mapped of it) set,
 * -EFAULT if nothing could be placed, or -EPROTO for a handle that is not
 * the connection's next.
 */
static int sd_zc_deliver(struct sd_zc_queue *zq, struct net *net, u64 seq,
			 u32 len, u32 off, u32 want, struct iov_iter *to,
			 bool peek, u32 *mapped, u32 *done)
{
	struct sd_zc_entry *e;
	u32 copied;
	int err = 0;

	*done = 0;
	*mapped = 0;
	mutex_lock(&zq->cons_lock);
	e = sd_zc_find(zq, seq, peek);
	if (!e || (len && e->len != len) || off >= e->len) {
		err = -EPROTO;
		goto out;
	}
	want = min(want, e->len - off);
	if (!peek && PAGE_ALIGNED(off) && want >= PAGE_SIZE) {
		unsigned long addr = 0, seg = 0;

		if (iter_is_ubuf(to)) {
			addr = (unsigned long)to->ubuf + to->iov_offset;
			seg = to->count;
		} else if (iter_is_iovec(to)) {
			struct iovec v = iov_iter_iovec(to);

			addr = (unsigned long)v.iov_base;
			seg = v.iov_len;
		}
		seg = min_t(unsigned long, seg, want);
		if (PAGE_ALIGNED(addr) && seg >= PAGE_SIZE)
			*mapped = sd_zc_remap(net, addr,
					      e->pages + (off >> PAGE_SHIFT),
					      seg >> PAGE_SHIFT) << PAGE_SHIFT;
		iov_iter_advance(to, *mapped);
	}
	copied = sd_zc_copy(e, off + *mapped, want - *mapped, to);
	*done = *mapped + copied;
	if (!*done && want) {
		err = -EFAULT;
		goto out;
	}
	atomic64_add(copied, &sd_net(net)->stats[SD_STAT_ZC_COPIED]);
	if (!peek && off + *done == e->len)
		sd_zc_unlink(zq, e);
out:
	mutex_unlock(&zq->cons_lock);
	return err;
}

/*
 * The kernel's receive path met a zero-copy record with handle @seq
 * standing for @len bytes, @off of them taken: deliver up to @want of them
 * (a receiver that slept here, or uses no libsd, gets pages remapped too).
 */
int sd_zc_read(struct sd_ring *ring, struct net *net, u64 seq, u32 len,
	       u32 off, u32 want, struct iov_iter *to, bool peek, u32 *done)
{
	u32 mapped;

	return sd_zc_deliver(&ring->zq, net, seq, len, off, want, to, peek,
			     &mapped, done);
}

/*
 * SD_IOC_ZC_RECV: libsd, consuming @ring, met a zero-copy record.  Returns
 * the bytes placed, -EINVAL, -EFAULT, or -EPROTO (the caller resets the
 * connection).
 */
int sd_zc_recv(struct sock *sk, struct sd_ring *ring, struct sd_zc_recv *zr)
{
	struct iov_iter to;
	struct iovec iov;
	u32 mapped, done;
	int err;

	if (zr->flags & ~SD_ZC_PEEK || zr->pad || !zr->rec_len)
		return -EINVAL;
	zr->remapped = 0;
	err = import_single_range(ITER_DEST, u64_to_user_ptr(zr->addr),
				  zr->len, &iov, &to);
	if (err)
		return err;
	err = sd_zc_deliver(&ring->zq, sock_net(sk), zr->seq, zr->rec_len,
			    zr->off, zr->len, &to, zr->flags & SD_ZC_PEEK,
			    &mapped, &done);
	if (err)
		return err;
	zr->remapped = mapped;
	return done;
}
