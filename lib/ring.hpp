// SPDX-License-Identifier: LGPL-2.1-or-later
//
// One AF_SD ring: the producer and the consumer of the byte stream that
// <linux/sd.h> defines.  Neither makes a system call or blocks; they report
// when the caller should sleep or wake the other side, and the caller does.
//
// Memory ordering.  Every atomic below implements one rule of the ordering
// table in <linux/sd.h>:
//
//   rule 1  Producer::put()       payload, then store-release of the header
//           Consumer::load_hdr()  load-acquire of the header, then payload
//   rule 2  Consumer::publish()   zero consumed bytes, store-release consumer
//           Producer::refresh()   load-acquire consumer, then reuse space
//   rule 3  Producer::notify()    (header stored) full barrier, load
//                                 READER_WAIT
//           Consumer::prepare_wait()  store READER_WAIT, full barrier, load
//                                 the header at head
//   rule 4  Producer::prepare_wait()  store NEED_CREDIT, full barrier, load
//                                 consumer
//           Consumer::publish()   store-release consumer, full barrier, load
//                                 NEED_CREDIT
//   rule 5  Producer::fin()       (last header stored) release RMW of FIN
//           Consumer::at_empty()  header 0: load-acquire prod_flags, then
//                                 load the header again
//
// The flag words are changed with atomic read-modify-writes because the
// kernel may set SD_RING_RESET in either of them at any time.
//
// Records.  Every record header has SD_REC_VALID.  A data record has
// 0 < len and fits before the end of the data area; a pad record has
// SD_REC_VALID | SD_REC_PAD and len = the bytes after its header up to the
// end of the area.  The producer splits a payload at the end of the area
// and pads only where nothing but a header fits (8 bytes).  Anything else
// the consumer reads, or a record that reaches past the credit it has
// published plus the ring size, is corruption: the call returns -EPROTO and
// every later one too.  The consumer reads each header once and never
// touches memory outside the data area.
#pragma once

#include <linux/sd.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace sd {

// Bytes a record with len payload bytes takes in the data area.  Unlike
// SD_REC_SPACE() it cannot wrap for any 32-bit len.
constexpr std::uint64_t rec_space(std::uint64_t len) noexcept
{
	return SD_REC_HDR_LEN + ((len + SD_REC_ALIGN - 1) & ~std::uint64_t{SD_REC_ALIGN - 1});
}

// 0 if off describes a usable ring at base (size a power of two within the
// bounds, every field aligned, inside mmap_len and outside the data area),
// else -EINVAL.
int check_ring(const void *base, const sd_ring_offset &off) noexcept;

// A ring in plain memory, for tests and benchmarks: the producer's fields
// on one cache line, the consumer's 128 bytes further, the data area one
// page after buf.  layout() zeroes buf_len bytes and fills off; it returns
// 0 or -EINVAL (bad size, buf_len < layout_len(size), unaligned buf).
std::size_t layout_len(std::size_t size) noexcept;
int layout(void *buf, std::size_t buf_len, std::size_t size, sd_ring_offset &off) noexcept;

namespace detail {

class RingMap {
protected:
	RingMap(void *base, const sd_ring_offset &off, std::uint64_t pos) noexcept;

	std::uint64_t *hdr(std::uint64_t pos) const noexcept;

	std::uint64_t *consumer_ = nullptr;
	std::uint32_t *prod_flags_ = nullptr;
	std::uint32_t *cons_flags_ = nullptr;
	unsigned char *data_ = nullptr;
	std::uint64_t size_ = 0;
	std::uint64_t mask_ = 0;
	int err_ = 0;		// sticky: -EINVAL, -EPROTO
};

} // namespace detail

class Producer : detail::RingMap {
public:
	// Produce from position tail (0 on a new ring; a multiple of 8).  Bad
	// offsets or position leave the producer failing every call with
	// -EINVAL (see error()).
	Producer(void *base, const sd_ring_offset &off, std::uint64_t tail = 0) noexcept;
	Producer(const Producer &) = delete;
	Producer &operator=(const Producer &) = delete;

	// Write as much of iov as fits, gathered into as few records as the
	// end of the area allows.  Returns the bytes written (0 only for an
	// empty iov), -EAGAIN if nothing fits, -EPIPE after fin() or once the
	// consumer set SD_RING_CLOSED, -ECONNRESET after SD_RING_RESET,
	// -EPROTO for a bad credit.
	ssize_t write(std::span<const iovec> iov) noexcept;
	ssize_t write(const void *buf, std::size_t len) noexcept;

	// Payload bytes a write could take now (reads the credit), or -EPROTO.
	ssize_t writable() noexcept;

	// Zero copy (<linux/sd.h>): 1 if a zero-copy record fits now (with
	// the pad before it that the end of the area may need), 0 if not, or
	// a negative errno as for write().
	int zc_room() noexcept;
	// Write the record for handle seq, standing for len stream bytes.
	// Returns len, -EAGAIN without room, or a negative errno as for
	// write().
	ssize_t write_zc(std::uint64_t seq, std::uint32_t len) noexcept;

	// End the stream after the records written so far.  0 or error().
	int fin() noexcept;

	// Before sleeping for credit: 1 to sleep until woken, 0 if there is
	// room now, or a negative errno as for write().
	int prepare_wait() noexcept;

	// True once if a write or fin found the reader asleep: wake it.
	bool take_wake() noexcept { return std::exchange(wake_, false); }

	std::uint64_t tail() const noexcept { return tail_; }
	int error() const noexcept { return err_; }

private:
	int stopped() const noexcept;
	int refresh() noexcept;
	void put(std::uint64_t off, std::uint32_t len, std::uint32_t flags) noexcept;
	void notify() noexcept;
	void clear_need_credit() noexcept;
	std::uint64_t space() const noexcept;

	std::uint64_t tail_;
	std::uint64_t credit_;		// last consumer value read and checked
	std::uint32_t peer_ = 0;	// cons_flags as last read
	bool fin_ = false;
	bool need_credit_ = false;	// we set SD_RING_NEED_CREDIT
	bool wake_ = false;
};

class Consumer : detail::RingMap {
public:
	// Consume from position head (0 on a new ring; it starts a record).
	// Publishes head as the credit.  Bad offsets or position leave the
	// consumer failing every call with -EINVAL.
	Consumer(void *base, const sd_ring_offset &off, std::uint64_t head = 0) noexcept;
	// Consume from inside the record at head, rec_off bytes of which were
	// taken already (a token handed over mid-record).
	Consumer(void *base, const sd_ring_offset &off, std::uint64_t head,
		 std::uint32_t rec_off) noexcept;
	Consumer(const Consumer &) = delete;
	Consumer &operator=(const Consumer &) = delete;

	// Copy up to the length of iov out of the ring and consume it (a
	// read may end inside a record; the next continues there).  Returns
	// the bytes read (0 also for an empty iov), 0 at the end of the
	// stream, -EAGAIN if empty, -ECONNRESET after SD_RING_RESET, -EPROTO
	// for corruption.  Publishes credit lazily: once half the ring is
	// consumed or the producer set SD_RING_NEED_CREDIT.
	ssize_t read(std::span<const iovec> iov) noexcept;
	ssize_t read(void *buf, std::size_t len) noexcept;

	// The same without consuming anything (MSG_PEEK).
	ssize_t peek(std::span<const iovec> iov) noexcept;
	ssize_t peek(void *buf, std::size_t len) noexcept;

	// Bytes read() would return now with a large enough buffer, or -EPROTO.
	ssize_t readable() noexcept;

	// Zero copy.  read() and peek() stop at a zero-copy record, which the
	// kernel must deliver (SD_IOC_ZC_RECV); with nothing read before it
	// they return -EXDEV.  zc_head() then describes it: its handle, its
	// length, and the bytes already taken (0 or -EPROTO).  After the
	// kernel placed n bytes of it, zc_consumed(n) moves on (read only).
	struct ZcHead {
		std::uint64_t seq;
		std::uint32_t len;
		std::uint32_t off;
	};
	int zc_head(ZcHead &z) noexcept;
	void zc_consumed(std::uint32_t n) noexcept;

	// Publish the credit for everything consumed so far.
	void flush() noexcept;

	// Read nothing at or past stream position end: a record counts as
	// not arrived yet unless it ends at or before end.  For a ring whose
	// writer does not order the placement of a write's bytes (a device's
	// write into it), end is where the last completion said the stream
	// ends.  Without a call, the ring is read up to its credit, as the
	// rules above allow.
	void set_limit(std::uint64_t end) noexcept
	{
		limit_ = end;
		bounded_ = true;
	}

	// Before sleeping for data: publishes credit, sets READER_WAIT; 1 to
	// sleep until woken, 0 if there is data or the end of the stream, or
	// -ECONNRESET / error().
	int prepare_wait() noexcept;

	// True once if publishing credit found the writer asleep: wake it.
	bool take_wake() noexcept { return std::exchange(wake_, false); }

	std::uint64_t head() const noexcept { return head_; }
	std::uint32_t rec_off() const noexcept { return rec_off_; }
	std::uint64_t published() const noexcept { return pub_; }
	int error() const noexcept { return err_; }

private:
	template <bool Consume> ssize_t copy(std::span<const iovec> iov) noexcept;
	std::uint64_t load_hdr(std::uint64_t pos) const noexcept;
	bool beyond(std::uint64_t pos, std::uint64_t space) const noexcept;
	int zc_len(std::uint64_t pos, std::uint64_t *seq, std::uint32_t *len) const noexcept;
	std::uint64_t cur_space() const noexcept;
	std::uint64_t check(std::uint64_t word, std::uint64_t pos) const noexcept;
	int at_empty(std::uint64_t pos) const noexcept;
	void retire(std::uint64_t pos, std::uint64_t from, std::uint64_t space) noexcept;
	void maybe_publish() noexcept;
	void publish() noexcept;
	void clear_reader_wait() noexcept;

	std::uint64_t head_;		// start of the current record
	std::uint64_t pub_;		// last credit published
	std::uint64_t limit_ = 0;	// with bounded_: see set_limit()
	bool bounded_ = false;
	std::uint64_t zc_pos_ = 0;	// where read() or peek() met a zc record
	std::uint32_t cur_len_ = 0;	// bytes of the current record, 0: none
	std::uint32_t rec_off_ = 0;	// bytes of it already consumed
	bool cur_zc_ = false;		// the current record is zero-copy
	bool waiting_ = false;		// we set SD_RING_READER_WAIT
	bool wake_ = false;
};

} // namespace sd
