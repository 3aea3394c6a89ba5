// SPDX-License-Identifier: LGPL-2.1-or-later
#include "ring.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace sd {
namespace {

constexpr std::uint64_t HDR = SD_REC_HDR_LEN;
// A zero-copy record: its header and its struct sd_zc_rec.
constexpr std::uint64_t ZC_SPACE = rec_space(sizeof(sd_zc_rec));
// Producer and consumer fields apart by two cache lines, so that the
// adjacent-line prefetcher does not make them share one either.
constexpr std::size_t CACHE_GAP = 128;

static_assert(sizeof(sd_rec) == sizeof(std::uint64_t));
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::uint32_t>::is_always_lock_free);

template <class T> T load(T *p, std::memory_order mo) noexcept
{
	return std::atomic_ref<T>(*p).load(mo);
}

template <class T> void store(T *p, T v, std::memory_order mo) noexcept
{
	std::atomic_ref<T>(*p).store(v, mo);
}

void set_flag(std::uint32_t *p, std::uint32_t f, std::memory_order mo) noexcept
{
	std::atomic_ref<std::uint32_t>(*p).fetch_or(f, mo);
}

void clear_flag(std::uint32_t *p, std::uint32_t f) noexcept
{
	std::atomic_ref<std::uint32_t>(*p).fetch_and(~f, std::memory_order_relaxed);
}

void full_barrier() noexcept
{
	std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool valid_size(std::uint64_t size) noexcept
{
	return std::has_single_bit(size) && size >= SD_RING_MIN_SIZE && size <= SD_RING_MAX_SIZE;
}

// [at, at + len) lies in [0, limit) and at is a multiple of align.
bool inside(std::uint64_t at, std::uint64_t len, std::uint64_t align, std::uint64_t limit) noexcept
{
	return at % align == 0 && at <= limit && len <= limit - at;
}

bool disjoint(std::uint64_t a, std::uint64_t alen, std::uint64_t b, std::uint64_t blen) noexcept
{
	return a + alen <= b || b + blen <= a;	// no overflow: both lie inside mmap_len
}

std::size_t page_size() noexcept
{
	const long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? static_cast<std::size_t>(p) : 4096;
}

// Walks an iovec array; skips empty entries so it never touches their base.
class IovIter {
public:
	explicit IovIter(std::span<const iovec> iov) noexcept : iov_(iov) { skip(); }

	// Sum of the lengths, capped at SSIZE_MAX.
	static std::size_t total(std::span<const iovec> iov) noexcept
	{
		std::size_t n = 0;
		for (const iovec &v : iov)
			n += std::min(v.iov_len, std::size_t{SSIZE_MAX} - n);
		return n;
	}

	// Copy n bytes (no more than are left) out of the iovecs to dst.
	void gather(unsigned char *dst, std::size_t n) noexcept
	{
		while (n) {
			const std::size_t k = step(n);
			std::memcpy(dst, base() + off_, k);
			dst += k;
			n -= k;
			advance(k);
		}
	}

	// Copy n bytes from src into the iovecs.
	void scatter(const unsigned char *src, std::size_t n) noexcept
	{
		while (n) {
			const std::size_t k = step(n);
			std::memcpy(base() + off_, src, k);
			src += k;
			n -= k;
			advance(k);
		}
	}

private:
	unsigned char *base() const noexcept { return static_cast<unsigned char *>(iov_[i_].iov_base); }
	std::size_t step(std::size_t n) const noexcept { return std::min(n, iov_[i_].iov_len - off_); }

	void advance(std::size_t k) noexcept
	{
		off_ += k;
		skip();
	}

	void skip() noexcept
	{
		while (i_ < iov_.size() && off_ == iov_[i_].iov_len) {
			++i_;
			off_ = 0;
		}
	}

	std::span<const iovec> iov_;
	std::size_t i_ = 0;
	std::size_t off_ = 0;
};

std::span<const iovec> one(iovec &v, void *buf, std::size_t len) noexcept
{
	v = {buf, len};
	return {&v, 1};
}

} // namespace

int check_ring(const void *base, const sd_ring_offset &off) noexcept
{
	const std::uint64_t len = off.mmap_len;

	if (!base || reinterpret_cast<std::uintptr_t>(base) % alignof(std::uint64_t))
		return -EINVAL;
	if (!valid_size(off.size) || !inside(off.data, off.size, SD_REC_ALIGN, len))
		return -EINVAL;
	if (!inside(off.consumer, 8, 8, len) || !inside(off.prod_flags, 4, 4, len) ||
	    !inside(off.cons_flags, 4, 4, len))
		return -EINVAL;
	if (!disjoint(off.consumer, 8, off.data, off.size) ||
	    !disjoint(off.prod_flags, 4, off.data, off.size) ||
	    !disjoint(off.cons_flags, 4, off.data, off.size) ||
	    !disjoint(off.consumer, 8, off.prod_flags, 4) ||
	    !disjoint(off.consumer, 8, off.cons_flags, 4) ||
	    !disjoint(off.prod_flags, 4, off.cons_flags, 4))
		return -EINVAL;
	return 0;
}

std::size_t layout_len(std::size_t size) noexcept
{
	return page_size() + size;
}

int layout(void *buf, std::size_t buf_len, std::size_t size, sd_ring_offset &off) noexcept
{
	const std::size_t page = page_size();

	if (!buf || reinterpret_cast<std::uintptr_t>(buf) % alignof(std::uint64_t) ||
	    !valid_size(size) || buf_len < page + size)
		return -EINVAL;
	std::memset(buf, 0, buf_len);
	// The kernel's layout: each writer on its own pair of cache lines.
	off = {
		.consumer = CACHE_GAP,
		.prod_flags = 0,
		.cons_flags = CACHE_GAP + sizeof(std::uint64_t),
		.data = page,
		.size = size,
		.mmap_len = page + size,
		.prod_pos = 2 * CACHE_GAP,
		.cons_pos = 3 * CACHE_GAP,
		.cons_off = 3 * CACHE_GAP + sizeof(std::uint64_t),
		.prod_token = 4 * CACHE_GAP,
		.cons_token = 4 * CACHE_GAP + sizeof(std::uint32_t),
		.cons_lowat = 4 * CACHE_GAP + 2 * sizeof(std::uint32_t),
	};
	return 0;
}

namespace detail {

RingMap::RingMap(void *base, const sd_ring_offset &off, std::uint64_t pos) noexcept
{
	if (check_ring(base, off) || pos % SD_REC_ALIGN) {
		err_ = -EINVAL;
		return;
	}
	auto *b = static_cast<unsigned char *>(base);
	consumer_ = reinterpret_cast<std::uint64_t *>(b + off.consumer);
	prod_flags_ = reinterpret_cast<std::uint32_t *>(b + off.prod_flags);
	cons_flags_ = reinterpret_cast<std::uint32_t *>(b + off.cons_flags);
	data_ = b + off.data;
	size_ = off.size;
	mask_ = off.size - 1;
}

std::uint64_t *RingMap::hdr(std::uint64_t pos) const noexcept
{
	return reinterpret_cast<std::uint64_t *>(data_ + (pos & mask_));
}

} // namespace detail

// ---- producer ------------------------------------------------------------

Producer::Producer(void *base, const sd_ring_offset &off, std::uint64_t tail) noexcept
	: RingMap(base, off, tail), tail_(tail), credit_(tail - size_)
{
}

// Rule 2: the acquire pairs with the consumer's store-release of the
// credit, made after it zeroed the bytes we are about to reuse.
int Producer::refresh() noexcept
{
	const std::uint64_t c = load(consumer_, std::memory_order_acquire);

	if (tail_ - c > size_ || c % SD_REC_ALIGN)	// tail - size <= c <= tail
		return err_ = -EPROTO;
	credit_ = c;
	return 0;
}

// Rule 1: the payload is in place; one 64-bit store-release publishes it.
void Producer::put(std::uint64_t off, std::uint32_t len, std::uint32_t flags) noexcept
{
	store(reinterpret_cast<std::uint64_t *>(data_ + off),
	      std::bit_cast<std::uint64_t>(sd_rec{len, flags}), std::memory_order_release);
}

// Rule 3: after the header stores, a full barrier, then READER_WAIT.
void Producer::notify() noexcept
{
	full_barrier();
	peer_ = load(cons_flags_, std::memory_order_relaxed);
	if (peer_ & SD_RING_READER_WAIT)
		wake_ = true;
}

void Producer::clear_need_credit() noexcept
{
	clear_flag(prod_flags_, SD_RING_NEED_CREDIT);
	need_credit_ = false;
}

// Payload bytes that fit now under the cached credit: up to the end of the
// area (a pad if only a header fits there), then from its start.
std::uint64_t Producer::space() const noexcept
{
	std::uint64_t room = credit_ + size_ - tail_, off = tail_ & mask_, n = 0;

	while (room > HDR) {
		const std::uint64_t a = std::min(room, size_ - off);

		if (a > HDR)
			n += a - HDR;
		room -= a;
		off = 0;
	}
	return n;
}

// Why nothing may be written now (0: it may).
int Producer::stopped() const noexcept
{
	if (err_)
		return err_;
	if (fin_)
		return -EPIPE;
	if (peer_ & SD_RING_RESET)
		return -ECONNRESET;
	if (peer_ & SD_RING_CLOSED)
		return -EPIPE;
	return 0;
}

ssize_t Producer::write(std::span<const iovec> iov) noexcept
{
	if (const int e = stopped())
		return e;
	if (need_credit_)
		clear_need_credit();

	std::size_t left = IovIter::total(iov), done = 0;
	IovIter it(iov);

	if (!left)
		return 0;
	// The cached credit is refreshed only when it cannot take everything.
	if (credit_ + size_ - tail_ < rec_space(left) + HDR && refresh())
		return err_;
	while (left) {
		const std::uint64_t off = tail_ & mask_, contig = size_ - off;
		const std::uint64_t room = credit_ + size_ - tail_;

		if (contig == HDR && room > HDR) {	// only a header fits: pad
			put(off, 0, SD_REC_VALID | SD_REC_PAD);
			tail_ += HDR;
			continue;
		}
		const std::uint64_t avail = std::min(room, contig);
		if (avail <= HDR)
			break;
		const std::size_t n = std::min(left, avail - HDR);
		it.gather(data_ + off + HDR, n);
		put(off, static_cast<std::uint32_t>(n), SD_REC_VALID);
		tail_ += rec_space(n);
		left -= n;
		done += n;
	}
	if (!done)
		return -EAGAIN;
	notify();
	return static_cast<ssize_t>(done);
}

ssize_t Producer::write(const void *buf, std::size_t len) noexcept
{
	iovec v;
	return write(one(v, const_cast<void *>(buf), len));
}

ssize_t Producer::writable() noexcept
{
	if (err_ || refresh())
		return err_;
	return static_cast<ssize_t>(space());
}

int Producer::zc_room() noexcept
{
	if (const int e = stopped())
		return e;
	const std::uint64_t contig = size_ - (tail_ & mask_);
	const std::uint64_t need = contig < ZC_SPACE ? contig + ZC_SPACE : ZC_SPACE;

	if (credit_ + size_ - tail_ < need && refresh())
		return err_;
	return credit_ + size_ - tail_ >= need;
}

ssize_t Producer::write_zc(std::uint64_t seq, std::uint32_t len) noexcept
{
	const int room = zc_room();

	if (room <= 0)
		return room ? room : -EAGAIN;
	if (need_credit_)
		clear_need_credit();
	std::uint64_t off = tail_ & mask_;
	if (size_ - off < ZC_SPACE) {		// the record would cross the end
		put(off, static_cast<std::uint32_t>(size_ - off - HDR), SD_REC_VALID | SD_REC_PAD);
		tail_ += size_ - off;
		off = 0;
	}
	const sd_zc_rec r{seq, len, 0};
	std::memcpy(data_ + off + HDR, &r, sizeof(r));
	put(off, sizeof(r), SD_REC_VALID | SD_REC_ZC);
	tail_ += ZC_SPACE;
	notify();
	return len;
}

// Rule 5: release after the last header (put() already ordered it).
int Producer::fin() noexcept
{
	if (err_)
		return err_;
	if (!fin_) {
		fin_ = true;
		set_flag(prod_flags_, SD_RING_FIN, std::memory_order_release);
		notify();
	}
	return 0;
}

// Rule 4: NEED_CREDIT, full barrier, then the credit.
int Producer::prepare_wait() noexcept
{
	if (err_)
		return err_;
	if (fin_)
		return -EPIPE;
	if (!need_credit_) {
		set_flag(prod_flags_, SD_RING_NEED_CREDIT, std::memory_order_relaxed);
		need_credit_ = true;
	}
	full_barrier();
	if (refresh())
		return err_;
	peer_ = load(cons_flags_, std::memory_order_relaxed);
	if (peer_ & SD_RING_RESET)
		return -ECONNRESET;
	if (peer_ & SD_RING_CLOSED)
		return -EPIPE;
	if (space()) {
		clear_need_credit();
		return 0;
	}
	return 1;
}

// ---- consumer ------------------------------------------------------------

Consumer::Consumer(void *base, const sd_ring_offset &off, std::uint64_t head) noexcept
	: RingMap(base, off, head), head_(head), pub_(head)
{
	if (!err_)
		store(consumer_, head, std::memory_order_release);
}

Consumer::Consumer(void *base, const sd_ring_offset &off, std::uint64_t head,
		   std::uint32_t rec_off) noexcept
	: Consumer(base, off, head)
{
	if (err_ || !rec_off)
		return;
	const std::uint64_t w = load_hdr(head);
	const auto r = std::bit_cast<sd_rec>(w);
	std::uint32_t len = r.len;

	if (!w || !check(w, head) || (r.flags & SD_REC_PAD) ||
	    ((r.flags & SD_REC_ZC) && zc_len(head, nullptr, &len)) || rec_off >= len) {
		err_ = -EPROTO;
		return;
	}
	cur_len_ = len;
	cur_zc_ = r.flags & SD_REC_ZC;
	rec_off_ = rec_off;
}

// The handle and stream length of the zero-copy record at pos (checked
// already), read once: 0, or -EPROTO for a length out of bounds.
int Consumer::zc_len(std::uint64_t pos, std::uint64_t *seq, std::uint32_t *len) const noexcept
{
	const auto *z = reinterpret_cast<sd_zc_rec *>(data_ + (pos & mask_) + HDR);
	const std::uint32_t n = load(&z->len, std::memory_order_relaxed);

	if (!n || n > SD_ZC_MAX)
		return -EPROTO;
	if (seq)
		*seq = load(&z->seq, std::memory_order_relaxed);
	*len = n;
	return 0;
}

// Ring bytes the current record takes.
std::uint64_t Consumer::cur_space() const noexcept
{
	return cur_zc_ ? ZC_SPACE : rec_space(cur_len_);
}

// Rule 1: the acquire pairs with the producer's store-release of the
// header.  Nothing can start at or beyond pub_ + size; the memory there
// belongs to a record we have not finished, so it is not read at all.
std::uint64_t Consumer::load_hdr(std::uint64_t pos) const noexcept
{
	if (pos - pub_ >= size_ || beyond(pos, 0))
		return 0;
	return load(hdr(pos), std::memory_order_acquire);
}

// With a limit (set_limit()): the record at pos taking space bytes (0: its
// header alone) has not wholly arrived.  Positions wrap at 2^64, and the
// limit is never more than a ring ahead of them.
bool Consumer::beyond(std::uint64_t pos, std::uint64_t space) const noexcept
{
	return bounded_ && static_cast<std::int64_t>(pos + (space ? space : HDR) - limit_) > 0;
}

// The bytes the record whose header word is w, at pos, takes; 0 if corrupt.
std::uint64_t Consumer::check(std::uint64_t w, std::uint64_t pos) const noexcept
{
	const auto r = std::bit_cast<sd_rec>(w);
	const std::uint64_t rest = size_ - (pos & mask_);
	std::uint64_t space = rec_space(r.len);

	if ((r.flags & ~SD_REC_FLAGS_MASK) || !(r.flags & SD_REC_VALID))
		return 0;
	if (r.flags & SD_REC_ZC) {
		if ((r.flags & SD_REC_PAD) || r.len != sizeof(sd_zc_rec) || space > rest)
			return 0;
	} else if (r.flags & SD_REC_PAD) {
		if (space != rest)
			return 0;
	} else if (!r.len || space > rest) {
		return 0;
	}
	if (pos + space - pub_ > size_)		// more than the producer had credit for
		return 0;
	return space;
}

// Rule 5: the header at pos is 0.  Returns 0 at the end of the stream, 1 if
// a record arrived after all, or -EAGAIN / -ECONNRESET.
int Consumer::at_empty(std::uint64_t pos) const noexcept
{
	const std::uint32_t f = load(prod_flags_, std::memory_order_acquire);

	if (f & SD_RING_RESET)
		return -ECONNRESET;
	if (!(f & SD_RING_FIN))
		return -EAGAIN;
	return load_hdr(pos) ? 1 : 0;
}

// The record at pos is consumed: clear its header (atomically: the kernel
// may be reading it) and its bytes from `from` to its end.  The payload
// before `from` was zeroed as it was read.
void Consumer::retire(std::uint64_t pos, std::uint64_t from, std::uint64_t space) noexcept
{
	unsigned char *rec = data_ + (pos & mask_);

	store(reinterpret_cast<std::uint64_t *>(rec), std::uint64_t{0}, std::memory_order_relaxed);
	std::memset(rec + from, 0, space - from);
}

template <bool Consume>
ssize_t Consumer::copy(std::span<const iovec> iov) noexcept
{
	if (err_)
		return err_;
	if (Consume && waiting_)
		clear_reader_wait();

	const std::size_t want = IovIter::total(iov);
	IovIter it(iov);
	std::uint64_t pos = head_;
	std::uint32_t len = cur_len_, roff = rec_off_;
	bool zc = cur_zc_;
	std::size_t done = 0;
	int ret = 0;

	while (done < want) {
		if (!len) {
			const std::uint64_t w = load_hdr(pos);

			if (!w) {
				if (done || (ret = at_empty(pos)) < 1)
					break;
				continue;
			}
			const std::uint64_t space = check(w, pos);
			if (!space) {
				ret = err_ = -EPROTO;
				break;
			}
			if (beyond(pos, space)) {	// the rest is yet to come
				if (!done)
					ret = -EAGAIN;
				break;
			}
			const auto r = std::bit_cast<sd_rec>(w);
			if (r.flags & SD_REC_PAD) {
				if (Consume)
					retire(pos, HDR, space);
				pos += space;
				continue;
			}
			zc = r.flags & SD_REC_ZC;
			len = r.len;
			if (zc && zc_len(pos, nullptr, &len)) {
				ret = err_ = -EPROTO;
				break;
			}
		}
		if (zc) {		// the kernel's to deliver
			zc_pos_ = pos;
			if (!done)
				ret = -EXDEV;
			break;
		}
		const std::size_t n = std::min<std::size_t>(len - roff, want - done);
		unsigned char *p = data_ + (pos & mask_) + HDR + roff;

		it.scatter(p, n);
		if (Consume)
			std::memset(p, 0, n);
		done += n;
		roff += static_cast<std::uint32_t>(n);
		if (roff == len) {
			if (Consume)
				retire(pos, HDR + len, rec_space(len));
			pos += rec_space(len);
			len = roff = 0;
		}
	}
	if (Consume) {
		head_ = pos;
		cur_len_ = len;
		cur_zc_ = zc && len;
		rec_off_ = roff;
		maybe_publish();
	}
	return done ? static_cast<ssize_t>(done) : ret;
}

int Consumer::zc_head(ZcHead &z) noexcept
{
	if (err_)
		return err_;
	const std::uint64_t w = load_hdr(zc_pos_);

	if (!w || !check(w, zc_pos_) || !(std::bit_cast<sd_rec>(w).flags & SD_REC_ZC) ||
	    zc_len(zc_pos_, &z.seq, &z.len))
		return err_ = -EPROTO;
	z.off = zc_pos_ == head_ ? rec_off_ : 0;
	if (z.off >= z.len || (zc_pos_ == head_ && cur_len_ && cur_len_ != z.len))
		return err_ = -EPROTO;
	return 0;
}

void Consumer::zc_consumed(std::uint32_t n) noexcept
{
	if (err_ || !cur_zc_ || zc_pos_ != head_)
		return;
	rec_off_ += n;
	if (rec_off_ < cur_len_)
		return;
	retire(head_, HDR, ZC_SPACE);
	head_ += ZC_SPACE;
	cur_len_ = rec_off_ = 0;
	cur_zc_ = false;
	maybe_publish();
}

ssize_t Consumer::read(std::span<const iovec> iov) noexcept
{
	return copy<true>(iov);
}

ssize_t Consumer::read(void *buf, std::size_t len) noexcept
{
	iovec v;
	return copy<true>(one(v, buf, len));
}

ssize_t Consumer::peek(std::span<const iovec> iov) noexcept
{
	return copy<false>(iov);
}

ssize_t Consumer::peek(void *buf, std::size_t len) noexcept
{
	iovec v;
	return copy<false>(one(v, buf, len));
}

ssize_t Consumer::readable() noexcept
{
	if (err_)
		return err_;

	std::uint64_t pos = head_, n = 0;
	if (cur_len_) {
		n = cur_len_ - rec_off_;
		pos += cur_space();
	}
	for (std::uint64_t w; (w = load_hdr(pos));) {
		const std::uint64_t space = check(w, pos);
		const auto r = std::bit_cast<sd_rec>(w);
		std::uint32_t len = r.len;

		if (!space || ((r.flags & SD_REC_ZC) && zc_len(pos, nullptr, &len)))
			return err_ = -EPROTO;
		if (beyond(pos, space))
			break;
		if (!(r.flags & SD_REC_PAD))
			n += len;
		pos += space;
	}
	return static_cast<ssize_t>(n);
}

// Rules 2 and 4: the consumed bytes are zero; store-release the credit,
// full barrier, then look for a producer waiting for it.
void Consumer::publish() noexcept
{
	store(consumer_, head_, std::memory_order_release);
	pub_ = head_;
	full_barrier();
	if (load(prod_flags_, std::memory_order_relaxed) & SD_RING_NEED_CREDIT)
		wake_ = true;
}

void Consumer::maybe_publish() noexcept
{
	if (head_ == pub_)
		return;
	if (head_ - pub_ >= size_ / 2 ||
	    (load(prod_flags_, std::memory_order_relaxed) & SD_RING_NEED_CREDIT))
		publish();
}

void Consumer::flush() noexcept
{
	if (!err_ && head_ != pub_)
		publish();
}

void Consumer::clear_reader_wait() noexcept
{
	clear_flag(cons_flags_, SD_RING_READER_WAIT);
	waiting_ = false;
}

// Rule 3: READER_WAIT, full barrier, then the header at head.
int Consumer::prepare_wait() noexcept
{
	if (err_)
		return err_;
	if (cur_len_)
		return 0;
	flush();
	if (!waiting_) {
		set_flag(cons_flags_, SD_RING_READER_WAIT, std::memory_order_relaxed);
		waiting_ = true;
	}
	full_barrier();
	int ret = load_hdr(head_) ? 0 : at_empty(head_);
	if (ret == -EAGAIN)
		return 1;
	clear_reader_wait();
	return ret == -ECONNRESET ? ret : 0;
}

} // namespace sd
