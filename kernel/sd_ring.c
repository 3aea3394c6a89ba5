// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD rings: allocation, mapping, and the kernel's producer and consumer.
 *
 * The layout and the memory-ordering rules are those of
 * include/uapi/linux/sd.h; the rule numbers below refer to its table.
 * Ring memory is shared with user space, which may change any byte at any
 * time.  So: every shared word is read once into a local, every header is
 * checked against the data area before it is used, every position the
 * kernel relies on is its own copy, and a check that fails returns -EPROTO,
 * which the caller turns into a reset of this one connection.
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/mm.h>
#include <linux/pid.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uio.h>

#include "af_sd.h"

static_assert(sizeof(struct sd_ring_hdr) == 640);
static_assert(offsetof(struct sd_ring_hdr, consumer) == SD_RING_HDR_CONS);
static_assert(sizeof(struct sd_rec) == SD_REC_HDR_LEN);

/*
 * Rings are charged to the memory cgroup of the task that connects.  At
 * its limit the allocation fails (connect gets ENOMEM) rather than calling
 * the OOM killer on the caller: __GFP_NORETRY.
 */
#define SD_RING_GFP	(GFP_KERNEL_ACCOUNT | __GFP_NORETRY | __GFP_NOWARN)

/* Smallest record worth writing: a header and up to 8 payload bytes. */
#define SD_REC_MIN_SPACE	(SD_REC_HDR_LEN + SD_REC_ALIGN)

struct sd_ring_hdr *sd_ring_hdr(const struct sd_ring *ring)
{
	return ring->vaddr;
}

static u32 *sd_flags_word(struct sd_ring *ring, unsigned int off)
{
	return off == SD_RING_HDR_PROD ? &sd_ring_hdr(ring)->prod_flags :
					 &sd_ring_hdr(ring)->cons_flags;
}

/*
 * Flag words may be changed by user space and by other kernel paths of the
 * same side at once (poll and sendmsg), so update them atomically.
 */
void sd_ring_set_flags(struct sd_ring *ring, unsigned int off, u32 flags)
{
	atomic_or(flags, (atomic_t *)sd_flags_word(ring, off));
}

void sd_ring_clear_flags(struct sd_ring *ring, unsigned int off, u32 flags)
{
	atomic_andnot(flags, (atomic_t *)sd_flags_word(ring, off));
}

u32 sd_ring_get_flags(struct sd_ring *ring, unsigned int off)
{
	return READ_ONCE(*sd_flags_word(ring, off));
}

/*
 * The page at index @i (0: the header page), or NULL if it has not been
 * touched yet.  Lockless: a page may appear at any time (a fault in a
 * mapping), never go while @rp is referenced.  The acquire pairs with the
 * cmpxchg() that published the page, so its zeroed contents are seen.
 */
static struct page *sd_ring_page(struct sd_ring_pages *rp, unsigned int i)
{
	/* Pairs with the cmpxchg() in sd_ring_page_get(). */
	return smp_load_acquire(&rp->page[i]);
}

/*
 * The page at index @i, allocated (zeroed, charged with @gfp to the
 * caller's memory cgroup) if it is not there yet; NULL if that fails.
 * Whoever loses the race for an empty entry frees its own page and takes
 * the winner's.  Lockless.
 */
static struct page *sd_ring_page_get(struct sd_ring_pages *rp, unsigned int i,
				     gfp_t gfp)
{
	struct page *page = sd_ring_page(rp, i);
	struct page *old;

	if (page)
		return page;
	page = alloc_page(gfp | __GFP_ZERO);
	if (!page)
		return NULL;
	/* Full barrier: the zeroed page before the pointer to it. */
	old = cmpxchg(&rp->page[i], NULL, page);
	if (old) {
		__free_page(page);
		return old;
	}
	atomic_inc(&rp->present);
	return page;
}

static struct sd_ring_pages *sd_ring_pages_new(unsigned int nr)
{
	struct sd_ring_pages *rp;

	rp = kvzalloc(struct_size(rp, page, nr), SD_RING_GFP);
	if (!rp)
		return NULL;
	refcount_set(&rp->ref, 1);
	rp->nr = nr;
	return rp;
}

static void sd_ring_pages_put(struct sd_ring_pages *rp)
{
	unsigned int i;

	if (!refcount_dec_and_test(&rp->ref))
		return;
	for (i = 0; i < rp->nr; i++)
		if (rp->page[i])
			put_page(rp->page[i]);
	kvfree(rp);
}

/*
 * A ring costs its header page and the page array at first; data pages
 * come as they are touched (sd_ring_data_get() and sd_ring_fault()).
 */
int sd_ring_alloc(struct sd_ring *ring, u32 size)
{
	struct page *hdr;

	memset(ring, 0, sizeof(*ring));
	sd_zc_queue_init(&ring->zq);
	if (!is_power_of_2(size) || size < SD_RING_MIN_SIZE ||
	    size > SD_RING_MAX_SIZE)
		return -EINVAL;

	ring->nr_pages = 1 + size / PAGE_SIZE;
	ring->pages = sd_ring_pages_new(ring->nr_pages);
	if (!ring->pages)
		return -ENOMEM;
	hdr = sd_ring_page_get(ring->pages, 0, SD_RING_GFP);
	if (!hdr)
		goto err_pages;
	/* Lowmem (no __GFP_HIGHMEM): the kernel's address of the page. */
	ring->vaddr = page_address(hdr);
	ring->size = size;
	return 0;

err_pages:
	sd_ring_pages_put(ring->pages);
	ring->pages = NULL;
	return -ENOMEM;
}

/* Pages still mapped by user space live on until they are unmapped. */
void sd_ring_free(struct sd_ring *ring)
{
	sd_zc_queue_purge(&ring->zq);
	if (!ring->pages)
		return;
	put_pid(ring->prod_owner);
	put_pid(ring->cons_owner);
	sd_ring_pages_put(ring->pages);
	ring->pages = NULL;
}

/* Pages of the ring in memory, the header page included (lockless). */
u32 sd_ring_pages_present(const struct sd_ring *ring)
{
	return atomic_read(&ring->pages->present);
}

void sd_ring_offsets(const struct sd_ring *ring, struct sd_ring_offset *off)
{
	off->consumer = offsetof(struct sd_ring_hdr, consumer);
	off->prod_flags = offsetof(struct sd_ring_hdr, prod_flags);
	off->cons_flags = offsetof(struct sd_ring_hdr, cons_flags);
	off->data = PAGE_SIZE;
	off->size = ring->size;
	off->mmap_len = (u64)ring->nr_pages << PAGE_SHIFT;
	off->prod_pos = offsetof(struct sd_ring_hdr, prod_pos);
	off->cons_pos = offsetof(struct sd_ring_hdr, cons_pos);
	off->cons_off = offsetof(struct sd_ring_hdr, cons_off);
	off->prod_token = offsetof(struct sd_ring_hdr, prod_token);
	off->cons_token = offsetof(struct sd_ring_hdr, cons_token);
	off->cons_lowat = offsetof(struct sd_ring_hdr, cons_lowat);
}

/* ---- mappings ------------------------------------------------------------ */

/*
 * Every mapping of a ring holds its page array (vm_private_data): a
 * mapping that outlives the connection keeps the pages it can reach, and
 * a fault in it after the ring is freed is served from the same array.
 * open() runs for every copy of a mapping (fork, mremap, a split), close()
 * for every end of one.
 */
static void sd_ring_vm_open(struct vm_area_struct *vma)
{
	struct sd_ring_pages *rp = vma->vm_private_data;

	refcount_inc(&rp->ref);
}

static void sd_ring_vm_close(struct vm_area_struct *vma)
{
	sd_ring_pages_put(vma->vm_private_data);
}

/*
 * A page of a ring mapping touched for the first time.  The page index
 * comes from the file offset, so a mapping split by munmap or mprotect
 * finds its pages.  The allocation is charged to the faulting task's
 * memory cgroup as anonymous memory is (no __GFP_NORETRY: at the limit the
 * cgroup reclaims or its OOM handling runs, as for any page a process
 * touches); if it still fails, the fault is VM_FAULT_OOM, for this
 * process only.  The pte takes a reference of its own.
 */
static vm_fault_t sd_ring_fault(struct vm_fault *vmf)
{
	struct sd_ring_pages *rp = vmf->vma->vm_private_data;
	pgoff_t i = vmf->pgoff;
	struct page *page;

	if (i >= SD_PGOFF_RX_RING >> PAGE_SHIFT)
		i -= SD_PGOFF_RX_RING >> PAGE_SHIFT;
	if (i >= rp->nr)
		return VM_FAULT_SIGBUS;
	page = sd_ring_page_get(rp, i, GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!page)
		return VM_FAULT_OOM;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct sd_ring_vm_ops = {
	.open	= sd_ring_vm_open,
	.close	= sd_ring_vm_close,
	.fault	= sd_ring_fault,
};

/*
 * Map a ring: shared only (a private copy would let a process write what
 * it may not), exactly its length, never grown (mremap), never dumped.
 * Pages are faulted in as they are touched.
 */
int sd_ring_mmap(struct sd_ring *ring, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (len != (unsigned long)ring->nr_pages << PAGE_SHIFT)
		return -EINVAL;

	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
	vma->vm_ops = &sd_ring_vm_ops;
	vma->vm_private_data = ring->pages;
	refcount_inc(&ring->pages->ref);
	return 0;
}

/* ---- the data area, page by page ----------------------------------------- */

/*
 * The data area is not mapped as a whole in the kernel: every access goes
 * through these, one page at a time.  @off is an offset in the data area;
 * a header (8-byte aligned) never crosses a page, a payload may.
 */

/* The kernel's address of data byte @off, or NULL if its page is absent. */
static void *sd_ring_at(struct sd_ring *ring, u32 off)
{
	struct page *page = sd_ring_page(ring->pages, 1 + off / PAGE_SIZE);

	return page ? page_address(page) + offset_in_page(off) : NULL;
}

/* Header word at @off: 0 (empty) while its page has not been touched. */
static u64 sd_ring_load_word(struct sd_ring *ring, u32 off)
{
	u64 *word = sd_ring_at(ring, off);

	return word ? READ_ONCE(*word) : 0;
}

/* The same, acquiring (rule 1). */
static u64 sd_ring_load_acquire(struct sd_ring *ring, u32 off)
{
	u64 *word = sd_ring_at(ring, off);

	/* Pairs with the producer's release of the header. */
	return word ? smp_load_acquire(word) : 0;
}

/*
 * Producer: make the pages of bytes [@off, @off + @len) of the data area
 * present.  -ENOMEM if one cannot be allocated (those already allocated
 * stay: they are the ring's).
 */
static int sd_ring_data_get(struct sd_ring *ring, u32 off, u32 len)
{
	unsigned int i, last;

	if (!len)
		return 0;
	last = 1 + (off + len - 1) / PAGE_SIZE;
	for (i = 1 + off / PAGE_SIZE; i <= last; i++)
		if (!sd_ring_page_get(ring->pages, i, SD_RING_GFP))
			return -ENOMEM;
	return 0;
}

/*
 * Producer: copy from the iterator to present pages (sd_ring_data_get()).
 * Returns the bytes copied, short if the source faulted.
 */
static size_t sd_ring_copy_in(struct sd_ring *ring, u32 off, size_t len,
			      struct iov_iter *from)
{
	size_t done = 0;

	while (done < len) {
		size_t chunk = min_t(size_t, len - done,
				     PAGE_SIZE - offset_in_page(off));
		void *to = sd_ring_at(ring, off);
		size_t n;

		if (WARN_ON_ONCE(!to))
			break;
		n = copy_from_iter(to, chunk, from);
		done += n;
		off += n;
		if (n < chunk)
			break;
	}
	return done;
}

/*
 * Consumer: copy to the iterator.  A page never touched holds zeros: they
 * are what is copied (a producer that wrote a header over a payload it
 * never wrote gets those), without allocating.  Returns the bytes copied.
 */
static size_t sd_ring_copy_out(struct sd_ring *ring, u32 off, size_t len,
			       struct iov_iter *to)
{
	size_t done = 0;

	while (done < len) {
		size_t chunk = min_t(size_t, len - done,
				     PAGE_SIZE - offset_in_page(off));
		void *from = sd_ring_at(ring, off);
		size_t n;

		n = from ? copy_to_iter(from, chunk, to) :
			   iov_iter_zero(chunk, to);
		done += n;
		off += n;
		if (n < chunk)
			break;
	}
	return done;
}

/* Zero bytes of the data area; an absent page is zero already. */
static void sd_ring_zero(struct sd_ring *ring, u32 off, size_t len)
{
	while (len) {
		size_t chunk = min_t(size_t, len,
				     PAGE_SIZE - offset_in_page(off));
		void *at = sd_ring_at(ring, off);

		if (at)
			memset(at, 0, chunk);
		off += chunk;
		len -= chunk;
	}
}

/*
 * Producer: bytes free for the producer, from the credit the consumer
 * published (rule 2).  Credit only moves forward, never past the tail and
 * in whole records: anything else is corrupt.
 */
int sd_ring_space(struct sd_ring *ring, u32 *space)
{
	/* Rule 2: acquire the credit, then the space is the producer's. */
	u64 credit = smp_load_acquire(&sd_ring_hdr(ring)->consumer);
	u64 used = ring->tail - credit;

	if (credit - ring->credit > ring->tail - ring->credit ||
	    used > ring->size || credit % SD_REC_ALIGN)
		return -EPROTO;
	*space = ring->size - (u32)used;
	return 0;
}

/* Free space as poll sees it (lockless; a process may own the side). */
u32 sd_ring_space_hint(struct sd_ring *ring)
{
	u64 credit = READ_ONCE(sd_ring_hdr(ring)->consumer);
	u64 tail;
	u32 off;

	sd_ring_view(ring, true, &tail, &off);
	if (tail - credit > ring->size)
		return ring->size;	/* nonsense: let the writer find out */
	return ring->size - (u32)(tail - credit);
}

/* The header's page is present (sd_ring_data_get()). */
static void sd_rec_publish(struct sd_ring *ring, u32 off, u32 len, u32 flags)
{
	u64 *hdr = sd_ring_at(ring, off);
	u64 word = (u64)flags << 32 | len;

	if (WARN_ON_ONCE(!hdr))
		return;
	/* Rule 1: the payload is written; now the header, releasing it. */
	smp_store_release(hdr, word);
}

/*
 * Producer: append up to len bytes from the iterator as records.  Writes as
 * much as fits and returns 0 with *done set (possibly 0: the ring is full),
 * -EFAULT if the user buffer faulted before anything was written, -ENOMEM
 * if a page of the ring could not be allocated before anything was
 * written, or -EPROTO if the credit in the ring is corrupt.
 */
int sd_ring_write(struct sd_ring *ring, struct iov_iter *from, size_t len,
		  size_t *done)
{
	u32 mask = ring->size - 1;
	u32 space;
	int err;

	*done = 0;
	err = sd_ring_space(ring, &space);
	if (err)
		return err;
	/* What the checks compare the next credit with (producer only). */
	ring->credit = ring->tail - (ring->size - space);

	while (len) {
		u32 off = ring->tail & mask;
		u32 to_end = ring->size - off;
		u32 room, chunk, copied;

		if (to_end < SD_REC_MIN_SPACE) {
			/* Too little left before the end: pad it. */
			if (space < to_end)
				break;
			if (sd_ring_data_get(ring, off, SD_REC_HDR_LEN))
				return *done ? 0 : -ENOMEM;
			sd_rec_publish(ring, off, to_end - SD_REC_HDR_LEN,
				       SD_REC_VALID | SD_REC_PAD);
			ring->tail += to_end;
			space -= to_end;
			continue;
		}

		room = min(space, to_end);
		if (room < SD_REC_MIN_SPACE)
			break;
		chunk = min_t(size_t, len, room - SD_REC_HDR_LEN);
		if (sd_ring_data_get(ring, off, SD_REC_HDR_LEN + chunk))
			return *done ? 0 : -ENOMEM;
		copied = sd_ring_copy_in(ring, off + SD_REC_HDR_LEN, chunk,
					 from);
		if (copied < chunk) {
			/*
			 * A fault may leave bytes past what was counted;
			 * the area the producer has not claimed must stay
			 * zero (the next header goes there).
			 */
			sd_ring_zero(ring, off + SD_REC_HDR_LEN + copied,
				     chunk - copied);
		}
		if (!copied)
			return *done ? 0 : -EFAULT;

		sd_rec_publish(ring, off, copied, SD_REC_VALID);
		ring->tail += SD_REC_SPACE(copied);
		space -= SD_REC_SPACE(copied);
		len -= copied;
		*done += copied;
		if (copied < chunk)
			break;
	}
	return 0;
}

/*
 * Consumer: read and check the header at a position.  Returns 1 with the
 * header's length and flags for a record, 0 for an empty slot, -EPROTO for
 * anything a producer may not write.
 */
static int sd_rec_get(struct sd_ring *ring, u64 pos, u64 credit, u32 *len,
		      u32 *flags)
{
	u32 off = pos & (ring->size - 1);
	u64 word;

	/*
	 * pos may be a position a libsd owner published (sd_ring_view):
	 * unaligned, the header would reach past the end of the data area.
	 */
	if (off % SD_REC_ALIGN)
		return -EPROTO;
	/*
	 * Nothing can start a whole ring or more past the credit: the
	 * memory there still holds records not consumed yet (a MSG_PEEK
	 * that walked over all of them, or the one being read, meets them
	 * again).  Empty, as for the producer it is.
	 */
	if (pos - credit >= ring->size)
		return 0;
	/*
	 * Rule 1: acquire the header, then the payload may be read.  A page
	 * not touched yet is empty.
	 */
	word = sd_ring_load_acquire(ring, off);
	if (!word)
		return 0;

	*len = lower_32_bits(word);
	*flags = upper_32_bits(word);
	if (*flags & ~SD_REC_FLAGS_MASK || !(*flags & SD_REC_VALID))
		return -EPROTO;
	if (*len > ring->size - off - SD_REC_HDR_LEN)
		return -EPROTO;
	if (*flags & SD_REC_ZC) {
		if (*flags & SD_REC_PAD || *len != sizeof(struct sd_zc_rec))
			return -EPROTO;
	} else if (*flags & SD_REC_PAD) {
		if (off + SD_REC_SPACE(*len) != ring->size)
			return -EPROTO;
	} else if (!*len) {
		return -EPROTO;
	}
	/* Not beyond what the credit lets the producer write. */
	if (pos + SD_REC_SPACE(*len) - credit > ring->size)
		return -EPROTO;
	return 1;
}

/*
 * The payload of the zero-copy record at @off: its handle and the stream
 * bytes it stands for (1 to SD_ZC_MAX, else -EPROTO).  Read once, a field
 * at a time: the payload may cross a page, its aligned fields do not.
 */
static int sd_zc_rec_get(struct sd_ring *ring, u32 off, u64 *seq, u32 *len)
{
	u32 at = off + SD_REC_HDR_LEN;
	u32 *lenp = sd_ring_at(ring, at + offsetof(struct sd_zc_rec, len));

	*seq = sd_ring_load_word(ring, at + offsetof(struct sd_zc_rec, seq));
	*len = lenp ? READ_ONCE(*lenp) : 0;
	return *len && *len <= SD_ZC_MAX ? 0 : -EPROTO;
}

/*
 * Stream bytes of a checked record: its payload, or what a zero-copy
 * record stands for.
 */
static int sd_rec_bytes(struct sd_ring *ring, u64 pos, u32 rlen, u32 rflags,
			u32 *bytes)
{
	u64 seq;

	if (!(rflags & SD_REC_ZC)) {
		*bytes = rlen;
		return 0;
	}
	return sd_zc_rec_get(ring, pos & (ring->size - 1), &seq, bytes);
}

/*
 * Consumer: copy up to len bytes of records to the iterator.  A read may
 * take part of a record; the rest stays for the next read.  With peek
 * nothing is consumed.  Consumed records are zeroed (the ring's invariant)
 * but credit is published only by sd_ring_credit().  Returns 0 with *done
 * set, -EFAULT if nothing could be copied to a faulting buffer, -EPROTO for
 * a corrupt ring.
 */
int sd_ring_read(struct sd_ring *ring, struct net *net, struct iov_iter *to,
		 size_t len, bool peek, size_t *done)
{
	u64 pos = ring->head;
	u32 roff = ring->rec_off;
	int err = 0;

	*done = 0;
	while (*done < len) {
		u32 off = pos & (ring->size - 1);
		u32 rlen, rflags, hlen, n, copied;
		int ret;

		ret = sd_rec_get(ring, pos, ring->published, &rlen, &rflags);
		if (ret <= 0) {
			err = ret;
			break;
		}
		hlen = rlen;
		if (rflags & SD_REC_PAD) {
			if (!peek)
				sd_ring_zero(ring, off, SD_REC_SPACE(rlen));
			pos += SD_REC_SPACE(rlen);
			continue;
		}
		if (rflags & SD_REC_ZC) {
			u64 seq;
			u32 zlen;

			err = sd_zc_rec_get(ring, off, &seq, &zlen);
			if (err)
				break;
			n = min_t(size_t, zlen - min(roff, zlen), len - *done);
			err = sd_zc_read(ring, net, seq, zlen, roff, n, to, peek,
					 &copied);
			if (err == -EFAULT && *done)
				err = 0;
			if (err)
				break;
			/* From here on the record counts as zlen bytes. */
			rlen = zlen;
		} else {
			if (roff >= rlen) {
				err = -EPROTO;
				break;
			}
			n = min_t(size_t, rlen - roff, len - *done);
			copied = sd_ring_copy_out(ring, off + SD_REC_HDR_LEN +
						  roff, n, to);
			/*
			 * Rule 2 for a record left half read: its bytes up
			 * to rec_off are zero, so that whoever finishes it
			 * (libsd too) need clear only from there on.
			 */
			if (!peek)
				sd_ring_zero(ring, off + SD_REC_HDR_LEN + roff,
					     copied);
		}
		*done += copied;
		roff += copied;
		if (copied < n) {
			if (!*done)
				err = -EFAULT;
			break;
		}
		if (roff == rlen) {
			/*
			 * Rule 2: zero what was consumed before the credit
			 * (a copied payload is zero already: the header and
			 * the alignment after the payload are left).
			 */
			if (!peek && rflags & SD_REC_ZC) {
				sd_ring_zero(ring, off, SD_REC_SPACE(hlen));
			} else if (!peek) {
				u64 *hdr = sd_ring_at(ring, off);

				/* Present: its header was not 0. */
				if (hdr)
					WRITE_ONCE(*hdr, 0);
				sd_ring_zero(ring, off + SD_REC_HDR_LEN + hlen,
					     SD_REC_SPACE(hlen) -
					     SD_REC_HDR_LEN - hlen);
			}
			pos += SD_REC_SPACE(hlen);
			roff = 0;
		}
	}

	if (!peek) {
		ring->head = pos;
		ring->rec_off = roff;
	}
	return err;
}

/*
 * Consumer: bytes readable now, counted up to @enough at least (the walk
 * stops once it has that many).  Returns 1 if any is, 0 if none, or a
 * negative errno for a corrupt ring; *bytes (optional) gets the count.
 */
static int sd_ring_count(struct sd_ring *ring, size_t enough, size_t *bytes)
{
	u64 credit = READ_ONCE(sd_ring_hdr(ring)->consumer);
	size_t total = 0;
	u32 walked = 0;
	u64 pos;
	u32 roff;

	sd_ring_view(ring, false, &pos, &roff);
	/* The credit only bounds what is checked; never ahead of head. */
	if (pos - credit > ring->size)
		credit = pos;
	while (walked < ring->size) {
		u32 rlen, rflags, n;
		int ret = sd_rec_get(ring, pos, credit, &rlen, &rflags);

		if (ret < 0)
			return ret;
		if (!ret)
			break;
		if (!(rflags & SD_REC_PAD)) {
			/* A zero-copy record stands for more than it takes. */
			ret = sd_rec_bytes(ring, pos, rlen, rflags, &n);
			if (ret)
				return ret;
			total += n - min(roff, n);
			roff = 0;
			if (total >= enough)
				break;
		}
		pos += SD_REC_SPACE(rlen);
		walked += SD_REC_SPACE(rlen);
	}
	if (bytes)
		*bytes = total;
	return total > 0;
}

/*
 * Consumer: bytes readable now.  With bytes == NULL, only whether any is
 * (1 or 0), which is what poll asks and stops at the first record.
 */
int sd_ring_readable(struct sd_ring *ring, size_t *bytes)
{
	return sd_ring_count(ring, bytes ? SIZE_MAX : 1, bytes);
}

/*
 * Consumer: whether at least @want bytes are readable now (poll under
 * SO_RCVLOWAT): 1 or 0, or a negative errno for a corrupt ring.
 */
int sd_ring_readable_at_least(struct sd_ring *ring, size_t want)
{
	size_t bytes = 0;
	int ret = sd_ring_count(ring, want, &bytes);

	return ret < 0 ? ret : bytes >= want;
}

/*
 * Consumer: publish the credit for consumed records when it is due: after
 * half the ring, when the producer asked (SD_RING_NEED_CREDIT), or always
 * with force (the consumer found the ring empty or is about to sleep).
 * Returns true when it published, and the producer should be woken.
 */
bool sd_ring_credit(struct sd_ring *ring, bool force)
{
	u64 unpublished = ring->head - ring->published;

	if (!unpublished)
		return false;
	if (!force && unpublished < ring->size / 2 &&
	    !(sd_ring_get_flags(ring, SD_RING_HDR_PROD) & SD_RING_NEED_CREDIT))
		return false;

	/* Rule 2: consumed bytes are zero; release the credit. */
	smp_store_release(&sd_ring_hdr(ring)->consumer, ring->head);
	ring->published = ring->head;
	/* Rule 4: the store above against the producer's flag load. */
	smp_mb();
	return true;
}

/* ---- tokens ------------------------------------------------------------ */

static atomic_t sd_token_seq = ATOMIC_INIT(0);

/*
 * Where a side stands: the kernel's own position, or, while a process
 * drives it, the one that process published (for poll, FIONREAD, sdctl:
 * a hint, checked by every reader).  Lockless.
 */
void sd_ring_view(struct sd_ring *ring, bool prod, u64 *pos, u32 *off)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);

	*off = 0;
	if (prod) {
		*pos = READ_ONCE(ring->prod_owner) ? READ_ONCE(h->prod_pos) :
						     READ_ONCE(ring->tail);
	} else if (READ_ONCE(ring->cons_owner)) {
		*pos = READ_ONCE(h->cons_pos);
		*off = READ_ONCE(h->cons_off);
	} else {
		*pos = READ_ONCE(ring->head);
		*off = READ_ONCE(ring->rec_off);
	}
}

/*
 * Whether the image that owns a side may still finish a call: its process
 * is there, is not exiting (killed, or exit_group(): a zombie stays until
 * its parent reaps it, which may wait for the very call that waits here),
 * and has not exec()ed since (a thread killed by another's exec mid-call
 * leaves busy up for good).  Under RCU the task's signal_struct is stable.
 */
static bool sd_owner_alive(struct pid *owner, u64 exec_id)
{
	struct task_struct *t;
	bool alive;

	rcu_read_lock();
	t = pid_task(owner, PIDTYPE_TGID);
	alive = t && READ_ONCE(t->self_exec_id) == exec_id &&
		!(READ_ONCE(t->signal->flags) & SIGNAL_GROUP_EXIT);
	rcu_read_unlock();
	return alive;
}

/*
 * Positions only grow (an owner may have gone round the ring many times
 * since the kernel last drove it): @pos is not behind @old.
 */
static bool sd_pos_after(u64 pos, u64 old)
{
	return pos - old < (1ULL << 62);
}

/*
 * The producer side comes back: check the tail its owner published.  It
 * must be record-aligned, not behind where the kernel left off, within
 * the credit, and nothing may be written at it yet.  (The records before
 * it cannot be walked: the consumer zeroes what it takes.)  A tail that is
 * a lie yet passes loses only the liar's own bytes: every later write
 * still stays inside the ring.
 */
static int sd_take_prod(struct sd_ring *ring)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);
	/* Rule 2: the credit, then what it frees is the producer's. */
	u64 credit = smp_load_acquire(&h->consumer);
	u64 pos = READ_ONCE(h->prod_pos);

	if (pos % SD_REC_ALIGN || !sd_pos_after(pos, ring->tail) ||
	    credit - ring->credit > pos - ring->credit || pos - credit > ring->size)
		return -EPROTO;
	if (pos - credit < ring->size &&
	    sd_ring_load_word(ring, pos & (ring->size - 1)))
		return -EPROTO;
	ring->tail = pos;
	ring->credit = credit;
	return 0;
}

/* The consumer side comes back: check the head its owner published. */
static int sd_take_cons(struct sd_ring *ring)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);
	u64 credit = READ_ONCE(h->consumer);
	u64 pos = READ_ONCE(h->cons_pos);
	u32 off = READ_ONCE(h->cons_off);

	if (pos % SD_REC_ALIGN || !sd_pos_after(pos, ring->head) ||
	    credit - ring->published > pos - ring->published)
		return -EPROTO;
	if (off) {
		u32 rlen, rflags;

		if (sd_rec_get(ring, pos, credit, &rlen, &rflags) != 1 ||
		    rflags & SD_REC_PAD ||
		    sd_rec_bytes(ring, pos, rlen, rflags, &rlen) || off >= rlen)
			return -EPROTO;
	}
	ring->head = pos;
	ring->rec_off = off;
	ring->published = credit;
	return 0;
}

/*
 * Take a side back from the process that drives it, without its help:
 * revoke the token, wait until the owner is between calls (or gone), then
 * check and adopt its position.  Called with the side's socket locked
 * and its call mutex held.  -EAGAIN: the owner is mid-call; drop
 * both, wait for sd_ring_owner_busy() to clear, and call again.
 * -EPROTO: the owner left the ring corrupt.
 */
/*
 * The busy count of a side's owner, read from the owner's memory (the
 * address it gave with SD_IOC_ACQUIRE): 0 if there is none or it cannot
 * be read (an owner that lies or unmaps it only loses its own side).  The
 * owner's own threads read it directly, others through its mm.  May
 * sleep (a fault, the owner's mmap_lock): the caller holds no spinlock.
 */
static u32 sd_ring_busy(struct sd_ring *ring, bool prod, struct pid *owner)
{
	u64 addr = prod ? READ_ONCE(ring->prod_busy) : READ_ONCE(ring->cons_busy);
	struct task_struct *t;
	u32 busy = 0;

	if (!addr)
		return 0;
	if (owner == task_tgid(current)) {
		if (get_user(busy, (u32 __user *)(unsigned long)addr))
			return 0;
		return busy;
	}
	t = get_pid_task(owner, PIDTYPE_TGID);
	if (!t)
		return 0;
	if (access_process_vm(t, addr, &busy, sizeof(busy), 0) != sizeof(busy))
		busy = 0;
	put_task_struct(t);
	return busy;
}

/*
 * Still worth waiting for @owner (a reference the caller holds) to finish
 * its call on a side?  Lockless.
 */
bool sd_ring_owner_busy(struct sd_ring *ring, bool prod, struct pid *owner)
{
	return sd_ring_busy(ring, prod, owner) &&
	       sd_owner_alive(owner, prod ? READ_ONCE(ring->prod_exec) :
					    READ_ONCE(ring->cons_exec));
}

/*
 * Whether the consumer took all that was produced: its credit against the
 * kernel's tail, or a user producer's published position.  Both may be
 * written by user space; a wrong answer only makes a close a reset.
 * Under the producing end's socket lock.
 */
bool sd_ring_drained(struct sd_ring *ring)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);
	u64 tail = ring->prod_owner ? READ_ONCE(h->prod_pos) : ring->tail;

	return READ_ONCE(h->consumer) == tail;
}

int sd_ring_reclaim(struct sd_ring *ring, bool prod)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);
	struct pid **owner = prod ? &ring->prod_owner : &ring->cons_owner;
	u32 *token = prod ? &h->prod_token : &h->cons_token;
	int err;

	if (!*owner)
		return 0;
	WRITE_ONCE(*token, 0);
	/* The token store before the busy load; pairs with the owner's. */
	smp_mb();
	/*
	 * The owner is mid-call: the caller must let go of its locks (the
	 * owner may need them to finish in the kernel), wait, and retry.
	 * Whoever the caller is: another thread of the owner's process (a
	 * raw system call, a dup()ed descriptor) waits as any process does,
	 * or its bytes would land where the owner's copy is writing.  An
	 * owner that must sleep mid-call does so holding the side
	 * (SD_IOC_SEND_WAIT), never through the system calls.
	 */
	if (sd_owner_alive(*owner, prod ? ring->prod_exec : ring->cons_exec) &&
	    sd_ring_busy(ring, prod, *owner))
		return -EAGAIN;
	err = prod ? sd_take_prod(ring) : sd_take_cons(ring);
	put_pid(*owner);
	WRITE_ONCE(*owner, NULL);
	return err;
}

/*
 * Hand a side to the calling process (the kernel has it: reclaim first).
 * Publishes the position to go on from and a fresh token.
 */
void sd_ring_grant(struct sd_ring *ring, bool prod, struct sd_token *tok)
{
	struct sd_ring_hdr *h = sd_ring_hdr(ring);
	u32 token = atomic_inc_return(&sd_token_seq) ? : 1;

	tok->token = token;
	tok->off = 0;
	if (prod) {
		WRITE_ONCE(ring->prod_busy, tok->busy);
		tok->pos = ring->tail;
		WRITE_ONCE(h->prod_pos, ring->tail);
		WRITE_ONCE(ring->prod_exec, current->self_exec_id);
		WRITE_ONCE(ring->prod_owner, get_task_pid(current, PIDTYPE_TGID));
		/* Position before the token that makes it the owner's. */
		smp_store_release(&h->prod_token, token);
	} else {
		sd_ring_credit(ring, true);
		WRITE_ONCE(ring->cons_busy, tok->busy);
		tok->pos = ring->head;
		tok->off = ring->rec_off;
		WRITE_ONCE(h->cons_pos, ring->head);
		WRITE_ONCE(h->cons_off, ring->rec_off);
		WRITE_ONCE(ring->cons_exec, current->self_exec_id);
		WRITE_ONCE(ring->cons_owner, get_task_pid(current, PIDTYPE_TGID));
		/* Position before the token that makes it the owner's. */
		smp_store_release(&h->cons_token, token);
	}
}
