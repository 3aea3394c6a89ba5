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
 * The pool file.  mmap() puts each new pool on a file of its own, a
 * regular file on the module's pseudo filesystem (sd_pool_file()), in
 * place of the socket's: so fallocate(PUNCH_HOLE) reaches the pool, and
 * madvise(MADV_REMOVE) frees pool pages as it does shmem's
 * (sd_pool_fallocate()).  Slots of a range that is unmapped are freed too
 * (sd_pool_vm_close()), not only when the last mapping goes.
 *
 * Memory accounting.  The pages a pool maps are charged when it is
 * mapped, to the mapping user's locked_vm and checked against its
 * RLIMIT_MEMLOCK (EAGAIN above it, unless CAP_IPC_LOCK), as io_uring's
 * registered buffers are, and to the process's pinned_vm (VmPin); the
 * charge of a range goes when the range is unmapped (sd_pool_charge()).
 * Pages are also charged to the memory cgroup of whoever touches them.
 *
 * Copy on write.  A slot is "shared" (SD_SLOT_SHARED) once its page may be
 * held by anyone else: a queued send, another pool that received it, a
 * child after fork.  A shared slot is never mapped writable: a write
 * faults, and the fault gives the slot a copy (sd_pool_cow()).  A slot
 * that may be mapped writable is marked SD_SLOT_WRITABLE; whoever makes it
 * shared first removes its mapping (zap), so no one writes a page after it
 * was sent.  The fault that makes a slot writable holds the page's lock
 * from the mark until its page table entry is in (sd_pool_mkwrite()), and
 * whoever shares it holds the same lock across the mark and the zap
 * (sd_pool_lock_writable()), so the zap never runs before the entry it
 * must remove exists.  Receiving replaces slots with the sender's pages,
 * mapped read-only, shared, and only into a mapping the caller may write
 * (VM_WRITE; else the copy fails with EFAULT, as a plain recv's does).
 *
 * Pinned pages.  A page that may be pinned for DMA (pin_user_pages(): an
 * O_DIRECT read in flight, an RDMA registration, process_vm_writev()) can
 * be written by the pin's holder without any fault: such a page is never
 * handed over, a copy of it is (sd_page_held(), counted as zc_pinned);
 * fork gives the child a copy of it, and a receive does not replace it.
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
 *   sd_pool.lock           slots, free pages, mapping count, charge (mutex)
 *   page lock              of a pool page being made writable or shared
 *   sd_zc_queue.lock       the entry list and counts (spinlock)
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/falloc.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/pagemap.h>
#include <linux/pseudo_fs.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/xarray.h>
#include <net/net_namespace.h>

#include "af_sd.h"

#define SD_SLOT_SHARED		XA_MARK_0	/* someone else may hold it */
#define SD_SLOT_WRITABLE	XA_MARK_1	/* may be mapped writable */

/* Pages a pool keeps for reuse instead of freeing them. */
#define SD_POOL_FREE_MAX	256

/* Pool pages: user memory, charged to the memory cgroup of the toucher. */
#define SD_POOL_GFP		(GFP_HIGHUSER | __GFP_ACCOUNT | __GFP_NOWARN)

/* The pool files' pseudo filesystem ("SDpl"). */
#define SD_POOL_MAGIC		0x5344706c

struct sd_pool {
	refcount_t		ref;		/* the object */
	struct mutex		lock;		/* everything below */
	struct xarray		slots;		/* index -> struct page * */
	/* The mm whose mappings (VMAs) this pool backs; not referenced. */
	struct mm_struct	*mm;
	struct net		*net;		/* for counters; referenced */
	/* Whose locked_vm the mapped pages are charged to, and how many. */
	struct user_struct	*user;
	unsigned long		charged;
	unsigned int		nr_vmas;	/* mappings; 0: slots released */
	bool			broken;		/* a fork copy ran out of memory */
	/* The copy made for the child during a fork (one per fork). */
	struct sd_pool		*fork_child;
	unsigned int		nr_free;
	struct page		*free[SD_POOL_FREE_MAX];
};

static const struct vm_operations_struct sd_pool_vm_ops;
static struct vfsmount *sd_pool_mnt;

static pgoff_t sd_pool_index(struct vm_area_struct *vma, unsigned long addr)
{
	return vma->vm_pgoff - (SD_PGOFF_POOL >> PAGE_SHIFT) +
	       ((addr - vma->vm_start) >> PAGE_SHIFT);
}

/*
 * Whether something may write @page without a fault of ours: it may be
 * pinned for DMA (pin_user_pages()), so sharing it would let the pin's
 * holder change bytes after they were sent.  Such a page is copied.
 */
static bool sd_page_held(struct page *page)
{
	return page_maybe_dma_pinned(page);
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
	pool->net = get_net(net);
	pool->user = get_uid(current_user());
	pool->nr_vmas = 1;
	return pool;
}

/*
 * Charge @pages mapped pages to the pool's user: its locked_vm, checked
 * against RLIMIT_MEMLOCK unless @force or the caller has CAP_IPC_LOCK (as
 * io_uring charges registered buffers), and the mm's pinned_vm.  -EAGAIN
 * over the limit, as mmap(MAP_LOCKED) is.  pool->lock, or a pool no one
 * else sees yet.
 */
static int sd_pool_charge(struct sd_pool *pool, unsigned long pages,
			  bool force)
{
	struct user_struct *user = pool->user;
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	unsigned long cur, new;

	if (!pages)
		return 0;
	cur = atomic_long_read(&user->locked_vm);
	do {
		new = cur + pages;
		if (!force && (new > limit || new < cur)) {
			if (!capable(CAP_IPC_LOCK))
				return -EAGAIN;
			force = true;
		}
	} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur, new));
	atomic64_add(pages, &pool->mm->pinned_vm);
	pool->charged += pages;
	return 0;
}

/*
 * Give back up to @pages of the charge.  The pool's mm is alive: this runs
 * for one of its mappings.  pool->lock.
 */
static void sd_pool_uncharge(struct sd_pool *pool, unsigned long pages)
{
	pages = min(pages, pool->charged);
	if (!pages)
		return;
	atomic_long_sub(pages, &pool->user->locked_vm);
	atomic64_sub(pages, &pool->mm->pinned_vm);
	pool->charged -= pages;
}

/*
 * The last mapping went: drop every slot and spare page and the charge.
 * The pool never forks again, so its fork child is no longer needed
 * either: it is returned for the caller to put, outside the lock (so that
 * no chain of dead pools hangs from a live one).  pool->lock.
 */
static struct sd_pool *sd_pool_release_pages(struct sd_pool *pool)
{
	struct sd_pool *child = pool->fork_child;
	struct page *page;
	unsigned long idx;

	xa_for_each(&pool->slots, idx, page)
		put_page(page);
	xa_destroy(&pool->slots);
	while (pool->nr_free)
		put_page(pool->free[--pool->nr_free]);
	sd_pool_uncharge(pool, pool->charged);
	pool->fork_child = NULL;
	return child;
}

/*
 * Drop a reference.  A pool holds its fork child, which may hold its own:
 * the chain is released in a loop, never by recursion, whatever its
 * length (one per generation of a process tree that forks).
 */
static void sd_pool_put(struct sd_pool *pool)
{
	struct sd_pool *child;

	while (pool && refcount_dec_and_test(&pool->ref)) {
		child = pool->fork_child;
		put_net(pool->net);
		free_uid(pool->user);
		mutex_destroy(&pool->lock);
		kfree(pool);
		pool = child;
	}
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
 * Empty the slots [@first, @last], whose mappings the caller removed.
 * Returns how many held a page.  pool->lock.
 */
static unsigned long sd_pool_punch(struct sd_pool *pool, pgoff_t first,
				   pgoff_t last)
{
	unsigned long idx, n = 0;
	struct page *page;

	xa_for_each_range(&pool->slots, idx, page, first, last) {
		xa_erase(&pool->slots, idx);
		sd_pool_unref(pool, page);
		n++;
	}
	return n;
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
 * Lock the page of every slot in [@first, @last] that may be mapped
 * writable, and return how many.  sd_pool_mkwrite() marks a slot writable
 * under pool->lock with its page locked, and keeps the page locked until
 * its writable page table entry is in: with pool->lock (no new marks) and
 * these page locks, every writable entry of the range exists, and one zap
 * removes them all.  sd_pool_unlock_writable() ends it.  pool->lock.
 */
static unsigned long sd_pool_lock_writable(struct sd_pool *pool,
					   pgoff_t first, pgoff_t last)
{
	unsigned long idx = first, n = 0;
	struct page *page;

	for (page = xa_find(&pool->slots, &idx, last, SD_SLOT_WRITABLE); page;
	     page = xa_find_after(&pool->slots, &idx, last, SD_SLOT_WRITABLE)) {
		lock_page(page);
		n++;
	}
	return n;
}

/*
 * After the zap: the slots of sd_pool_lock_writable() are mapped writable
 * no more; unmark them and unlock their pages.  pool->lock.
 */
static void sd_pool_unlock_writable(struct sd_pool *pool, pgoff_t first,
				    pgoff_t last)
{
	unsigned long idx = first;
	struct page *page;

	for (page = xa_find(&pool->slots, &idx, last, SD_SLOT_WRITABLE); page;
	     page = xa_find_after(&pool->slots, &idx, last, SD_SLOT_WRITABLE)) {
		xa_clear_mark(&pool->slots, idx, SD_SLOT_WRITABLE);
		unlock_page(page);
	}
}

/*
 * Wait for the faults that are making slots of [@first, @last] writable:
 * once each writable slot's page lock was taken and dropped, their
 * entries are in, and the caller's zap removes them.  For a caller that
 * replaces the slots (their marks go with the pages).  pool->lock.
 */
static void sd_pool_wait_writable(struct sd_pool *pool, pgoff_t first,
				  pgoff_t last)
{
	unsigned long idx = first;
	struct page *page;

	for (page = xa_find(&pool->slots, &idx, last, SD_SLOT_WRITABLE); page;
	     page = xa_find_after(&pool->slots, &idx, last, SD_SLOT_WRITABLE)) {
		lock_page(page);
		unlock_page(page);
	}
}

/*
 * Mark slots [@first, @first + @nr) shared and take a reference on each
 * page for @pages, allocating the pages of empty slots.  A page that may
 * be pinned (sd_page_held()) stays the slot's, unshared, and @pages gets
 * a copy of it.  Writable marks stay: the caller locked those pages,
 * zaps, and unmarks (sd_pool_unlock_writable()).  One walk under the
 * xarray's lock, rather than a lookup per page and mark; an empty slot
 * or a pinned page leaves it.  Returns how many were taken: fewer than
 * @nr when out of memory.  pool->lock.
 */
static u32 sd_pool_share(struct sd_pool *pool, pgoff_t first, u32 nr,
			 struct page **pages)
{
	XA_STATE(xas, &pool->slots, first);
	struct page *page, *copy;
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
		if (sd_page_held(page)) {
			xas_unlock(&xas);
			copy = alloc_page(SD_POOL_GFP | __GFP_NORETRY);
			if (!copy)
				return i;
			copy_highpage(copy, page);
			pages[i] = copy;
			sd_stat_inc(pool->net, SD_STAT_ZC_PINNED);
			xas_set(&xas, first + i);
			xas_lock(&xas);
			xas_load(&xas);
			continue;
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
 * lock and may fail.  A slot whose page may be pinned keeps it (the pin's
 * holder would write a page the slot no longer has): the walk stops
 * there.  Returns how many were placed.  pool->lock.
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
			if (sd_page_held(prev))
				break;
			xas_store(&xas, pages[i]);
		}
		xas_set_mark(&xas, SD_SLOT_SHARED);
		xas_clear_mark(&xas, SD_SLOT_WRITABLE);
		get_page(pages[i]);
		old[i] = prev;
	}
	xas_unlock(&xas);
	return i;
}

/* ---- the pool file ------------------------------------------------------- */

/*
 * fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE), as
 * madvise(MADV_REMOVE) calls it: free the slots of the whole pages in
 * [@offset, @offset + @len) of the caller's mappings of @file (a file
 * offset is the mapping's: SD_PGOFF_POOL plus the slot's), which read
 * zeroes afterwards.  Other processes' pools on the same file (fork
 * copies) keep theirs.
 */
static long sd_pool_fallocate(struct file *file, int mode, loff_t offset,
			      loff_t len)
{
	pgoff_t first = DIV_ROUND_UP(offset, PAGE_SIZE);
	pgoff_t end = (offset + len) >> PAGE_SHIFT;
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	pgoff_t lo, hi, idx;
	unsigned long addr;
	struct sd_pool *pool;

	if (mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP;
	if (!mm || first >= end)
		return 0;
	if (mmap_read_lock_killable(mm))
		return -EINTR;
	{
		VMA_ITERATOR(vmi, mm, 0);

		for_each_vma(vmi, vma) {
			pool = vma->vm_private_data;
			if (vma->vm_file != file ||
			    vma->vm_ops != &sd_pool_vm_ops || !pool)
				continue;
			lo = max(first, vma->vm_pgoff);
			hi = min(end, vma->vm_pgoff + vma_pages(vma));
			if (lo >= hi)
				continue;
			addr = vma->vm_start + ((lo - vma->vm_pgoff) << PAGE_SHIFT);
			idx = sd_pool_index(vma, addr);
			mutex_lock(&pool->lock);
			zap_page_range(vma, addr, (hi - lo) << PAGE_SHIFT);
			sd_pool_punch(pool, idx, idx + (hi - lo) - 1);
			mutex_unlock(&pool->lock);
		}
	}
	mmap_read_unlock(mm);
	return 0;
}

static const struct file_operations sd_pool_fops = {
	.owner		= THIS_MODULE,
	.fallocate	= sd_pool_fallocate,
};

static int sd_pool_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, SD_POOL_MAGIC) ? 0 : -ENOMEM;
}

/* No owner: the module's own mount must not pin the module. */
static struct file_system_type sd_pool_fs_type = {
	.name			= "sd_pool",
	.init_fs_context	= sd_pool_init_fs_context,
	.kill_sb		= kill_anon_super,
};

/*
 * A new pool file: a regular file (fallocate wants one) of the module's
 * pseudo filesystem.  Each holds the module, as a socket does.
 */
static struct file *sd_pool_file(void)
{
	struct inode *inode;
	struct file *file;

	inode = alloc_anon_inode(sd_pool_mnt->mnt_sb);
	if (IS_ERR(inode))
		return ERR_CAST(inode);
	inode->i_mode |= S_IFREG;
	/* Our caller runs in the module for a socket, which holds it. */
	__module_get(THIS_MODULE);
	file = alloc_file_pseudo(inode, sd_pool_mnt, "sd_pool", O_RDWR,
				 &sd_pool_fops);
	if (IS_ERR(file)) {
		module_put(THIS_MODULE);
		iput(inode);
	}
	return file;
}

int __init sd_zc_init(void)
{
	sd_pool_mnt = kern_mount(&sd_pool_fs_type);
	return PTR_ERR_OR_ZERO(sd_pool_mnt);
}

void sd_zc_exit(void)
{
	kern_unmount(sd_pool_mnt);
}

/* ---- the mapping --------------------------------------------------------- */

/*
 * fork: the child's mapping @vma must not share pages with the parent's
 * writably.  Give the child its own pool holding the same pages, mark
 * them shared on both sides, and remove the mappings of them, the
 * parent's and the child's, so that the next write on either side
 * copies.  dup_mmap() calls this with both mms write-locked.  Whether it
 * calls ->open() before or after copy_page_range() differs between 6.1
 * releases: before, the parent's entries are gone when page tables are
 * copied, and the child's zap finds none; after, the child got the
 * parent's entries, writable ones included, and its zap removes them.  A
 * page that may be pinned is copied for the child instead (as fork does
 * for anonymous memory), so the pin keeps writing the parent's.  One
 * child pool serves all the parent's mappings of @parent.  The child's
 * mappings are charged without the limit: fork cannot fail here.
 */
static void sd_pool_fork(struct sd_pool *parent, struct vm_area_struct *vma)
{
	pgoff_t first = sd_pool_index(vma, vma->vm_start);
	pgoff_t last = sd_pool_index(vma, vma->vm_end - 1);
	struct sd_pool *child, *old = NULL;
	struct vm_area_struct *pvma;
	struct page *page, *copy;
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
			goto zap;
		}
		mutex_lock_nested(&child->lock, SINGLE_DEPTH_NESTING);
		old = parent->fork_child;
		refcount_inc(&child->ref);
		parent->fork_child = child;
	}
	vma->vm_private_data = child;
	sd_pool_charge(child, vma_pages(vma), true);

	xa_for_each_range(&parent->slots, idx, page, first, last) {
		copy = NULL;
		if (sd_page_held(page)) {
			copy = alloc_page(SD_POOL_GFP);
			if (!copy) {
				child->broken = true;
				break;
			}
			copy_highpage(copy, page);
		}
		if (xa_err(xa_store(&child->slots, idx, copy ?: page,
				    GFP_KERNEL_ACCOUNT))) {
			if (copy)
				put_page(copy);
			child->broken = true;
			break;
		}
		if (copy) {
			sd_stat_inc(parent->net, SD_STAT_ZC_PINNED);
			continue;
		}
		get_page(page);
		xa_set_mark(&child->slots, idx, SD_SLOT_SHARED);
		xa_set_mark(&parent->slots, idx, SD_SLOT_SHARED);
		xa_clear_mark(&parent->slots, idx, SD_SLOT_WRITABLE);
	}
	mutex_unlock(&child->lock);

zap:
	/* current is the parent, its mm the pool's. */
	pvma = find_vma(current->mm, vma->vm_start);
	if (pvma && pvma->vm_ops == &sd_pool_vm_ops &&
	    pvma->vm_private_data == parent && pvma->vm_start <= vma->vm_start)
		zap_page_range(pvma, vma->vm_start,
			       vma->vm_end - vma->vm_start);
	zap_page_range(vma, vma->vm_start, vma->vm_end - vma->vm_start);
	mutex_unlock(&parent->lock);
	sd_pool_put(old);
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
	/* Split or moved within the same process: already charged. */
	refcount_inc(&pool->ref);
	mutex_lock(&pool->lock);
	pool->nr_vmas++;
	mutex_unlock(&pool->lock);
}

/*
 * Whether another mapping of @vma's pool covers any of its slots.  Only
 * while mremap() moves a mapping: the new one exists before the old goes
 * (and, when the move fails, the old one still exists when the new goes).
 * munmap() removes the VMAs it closes from the tree first.  exit_mmap()
 * frees VMAs as it closes them, still in the tree: with no users left the
 * whole mm goes, and the answer is yes (the last close frees the lot).
 * mmap_lock.
 */
static bool sd_pool_mapped_elsewhere(struct vm_area_struct *vma)
{
	pgoff_t first = vma->vm_pgoff, last = first + vma_pages(vma) - 1;
	struct mm_struct *mm = vma->vm_mm;
	struct vm_area_struct *v;

	if (!atomic_read(&mm->mm_users))
		return true;
	VMA_ITERATOR(vmi, mm, 0);
	for_each_vma(vmi, v) {
		if (v == vma || v->vm_ops != &sd_pool_vm_ops ||
		    v->vm_private_data != vma->vm_private_data ||
		    v->vm_end <= v->vm_start)
			continue;
		if (v->vm_pgoff <= last &&
		    first <= v->vm_pgoff + vma_pages(v) - 1)
			return true;
	}
	return false;
}

/*
 * A mapping went.  Its slots are freed and its charge given back unless
 * another mapping of the pool still covers them (mremap); the last
 * mapping frees everything.  A failed split closes an empty copy.
 */
static void sd_pool_vm_close(struct vm_area_struct *vma)
{
	struct sd_pool *pool = vma->vm_private_data, *child = NULL;
	bool alone;

	if (!pool)
		return;
	alone = vma->vm_end > vma->vm_start && !sd_pool_mapped_elsewhere(vma);
	mutex_lock(&pool->lock);
	if (!--pool->nr_vmas) {
		child = sd_pool_release_pages(pool);
	} else if (alone) {
		sd_pool_punch(pool, sd_pool_index(vma, vma->vm_start),
			      sd_pool_index(vma, vma->vm_end - 1));
		sd_pool_uncharge(pool, vma_pages(vma));
	}
	mutex_unlock(&pool->lock);
	sd_pool_put(child);
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
	/*
	 * The page is locked before the slot is marked writable, and stays
	 * locked until the fault has put in its writable entry
	 * (VM_FAULT_LOCKED: the fault unlocks it after finish_fault()).
	 * Whoever shares the slot takes this lock before its zap
	 * (sd_pool_lock_writable()), so the zap finds the entry and
	 * removes it; one that comes later sees the slot shared here.
	 */
	lock_page(page);
	xa_set_mark(&pool->slots, idx, SD_SLOT_WRITABLE);
	mutex_unlock(&pool->lock);
	return VM_FAULT_LOCKED;
}

static const struct vm_operations_struct sd_pool_vm_ops = {
	.open		= sd_pool_vm_open,
	.close		= sd_pool_vm_close,
	.fault		= sd_pool_fault,
	.page_mkwrite	= sd_pool_mkwrite,
};

/*
 * mmap(SD_PGOFF_POOL) on an AF_SD socket: a new pool, on a new pool file
 * that takes the socket's place in the mapping.  The pool holds its
 * network namespace (for the counters).  Its length is charged to the
 * caller's RLIMIT_MEMLOCK (EAGAIN above it).
 */
int sd_pool_mmap(struct sock *sk, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	struct sd_pool *pool;
	struct file *file;
	int err;

	if (vma->vm_pgoff != SD_PGOFF_POOL >> PAGE_SHIFT)
		return -EINVAL;
	if (!(vma->vm_flags & VM_SHARED) || len > SD_POOL_MAX_LEN)
		return -EINVAL;
	pool = sd_pool_new(vma->vm_mm, sock_net(sk));
	if (!pool)
		return -ENOMEM;
	err = sd_pool_charge(pool, len >> PAGE_SHIFT, false);
	if (err)
		goto err_put;
	file = sd_pool_file();
	if (IS_ERR(file)) {
		err = PTR_ERR(file);
		goto err_uncharge;
	}
	/* MIXEDMAP: sd_zc_remap() inserts pages with vm_insert_pages(). */
	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND;
	vma->vm_ops = &sd_pool_vm_ops;
	vma->vm_private_data = pool;
	vma_set_file(vma, file);
	fput(file);		/* the mapping holds it now */
	return 0;

err_uncharge:
	sd_pool_uncharge(pool, pool->charged);
err_put:
	pool->nr_vmas = 0;
	sd_pool_put(pool);
	return err;
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
		/*
		 * Never restarted: libsd calls this mid-send, holding the
		 * side, and must end its call for the handler to run.
		 */
		if (signal_pending(current))
			return -EINTR;
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
	pgoff_t first;
	bool zap;
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
	/*
	 * Pages that may be mapped writable stay locked across the marks
	 * and the zap, so no fault maps one writable after it was shared.
	 * The zap covers the whole range even when the share stops short:
	 * the writable marks all go.
	 */
	zap = sd_pool_lock_writable(pool, first, first + nr - 1);
	i = sd_pool_share(pool, first, nr, e->pages);
	/* From here on every write of the sender faults and copies. */
	if (zap)
		zap_page_range(vma, zs->addr, zs->len);
	sd_pool_unlock_writable(pool, first, first + nr - 1);
	if (i < nr)
		goto err_put_pages;
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
 * 0 if @addr is not in a pool, or in one the caller may not write.
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
	pgoff_t first;

	old = kvmalloc_array(nr, sizeof(*old), GFP_KERNEL);
	if (!old)
		return 0;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, addr);
	if (!vma || vma->vm_ops != &sd_pool_vm_ops || !vma->vm_private_data)
		goto out;
	/*
	 * Receiving is writing: into a mapping without VM_WRITE nothing is
	 * placed, and the caller's copy fails with EFAULT, as a copying
	 * recv's does.
	 */
	if (!(vma->vm_flags & VM_WRITE))
		goto out;
	pool = vma->vm_private_data;
	nr = min_t(unsigned long, nr, (vma->vm_end - addr) >> PAGE_SHIFT);
	first = sd_pool_index(vma, addr);
	mutex_lock(&pool->lock);
	if (pool->broken)
		goto out_unlock;
	/* Writable entries still being put in are in before the zap. */
	sd_pool_wait_writable(pool, first, first + nr - 1);
	done = sd_pool_replace(pool, first, nr, pages, old);
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
