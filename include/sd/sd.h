/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libsd: the user-space side of AF_SD sockets.
 *
 * Functions return 0 or a count on success.  The ring functions return a
 * negative errno on failure and leave errno alone, as liburing does; the
 * others say below how they fail.  Nothing here throws (the functions are
 * noexcept in C++: SD_NOEXCEPT), blocks or makes a system call unless it
 * says so.
 */
#ifndef SD_SD_H
#define SD_SD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <linux/sd.h>

#ifdef __cplusplus
#define SD_NOEXCEPT noexcept
extern "C" {
#else
#define SD_NOEXCEPT
#endif

/* AF_SD, the socket family number this library was built for. */
int sd_family(void) SD_NOEXCEPT;

/* The version of libsd, "MAJOR.MINOR.PATCH"; never NULL. */
const char *sd_version(void) SD_NOEXCEPT;

/*
 * 1 if the running kernel creates AF_SD stream sockets (af_sd.ko is
 * loaded), else 0 with errno set by socket(2), EAFNOSUPPORT when the
 * module is missing.  Makes a socket(2) and a close(2) call.
 */
int sd_available(void) SD_NOEXCEPT;

/*
 * Rings.
 *
 * One ring carries one direction of one connection (see <linux/sd.h> for
 * the layout and the ordering rules).  A producer or a consumer works on a
 * ring mapped at base and described by off; exactly one of each may be
 * active at a time.  Neither makes a system call: when a call reports
 * that the other side must be woken, or that the caller may sleep, the
 * caller does it.
 */

/* Bytes a plain memory ring with a data area of size bytes needs. */
size_t sd_ring_layout_len(size_t size) SD_NOEXCEPT;

/*
 * Lay out an empty ring in buf (for tests and benchmarks; the kernel lays
 * out the real ones): zero buf_len bytes, put the producer's and the
 * consumer's fields on separate cache lines and the data area on a page
 * boundary relative to buf, and describe it in *off.  size must be a
 * power of two in [SD_RING_MIN_SIZE, SD_RING_MAX_SIZE] and buf_len at least
 * sd_ring_layout_len(size).  Returns 0 or -EINVAL.
 */
int sd_ring_layout(void *buf, size_t buf_len, size_t size,
		   struct sd_ring_offset *off) SD_NOEXCEPT;

struct sd_ring_producer;
struct sd_ring_consumer;

/*
 * Start producing at position tail (0 on a new ring) or consuming at
 * position head (likewise; a position always starts a record).  Return 0
 * and the handle in *out, -EINVAL for bad offsets or an unaligned base or
 * position, -ENOMEM.
 */
int sd_ring_producer_open(struct sd_ring_producer **out, void *base,
			  const struct sd_ring_offset *off, uint64_t tail) SD_NOEXCEPT;
int sd_ring_consumer_open(struct sd_ring_consumer **out, void *base,
			  const struct sd_ring_offset *off, uint64_t head) SD_NOEXCEPT;
void sd_ring_producer_close(struct sd_ring_producer *p) SD_NOEXCEPT;
void sd_ring_consumer_close(struct sd_ring_consumer *c) SD_NOEXCEPT;

/*
 * Write as many bytes of iov as fit now.  Returns the count, -EAGAIN if
 * nothing fits, -EPIPE after sd_ring_write_fin() or once the consumer has
 * closed, -ECONNRESET after a reset, -EPROTO if the consumer published a
 * bad credit (the ring is then dead), -EINVAL for a bad iovcnt.
 */
ssize_t sd_ring_writev(struct sd_ring_producer *p, const struct iovec *iov,
		       int iovcnt) SD_NOEXCEPT;
/* Mark the end of the stream after everything written so far. */
int sd_ring_write_fin(struct sd_ring_producer *p) SD_NOEXCEPT;

/*
 * Read up to the total length of iov; flags is 0 or MSG_PEEK (copy
 * without consuming).  Returns the count, 0 at the end of the stream,
 * -EAGAIN if the ring is empty, -ECONNRESET after a reset, -EPROTO if the
 * ring holds a corrupt record (the ring is then dead), -EINVAL.
 */
ssize_t sd_ring_readv(struct sd_ring_consumer *c, const struct iovec *iov,
		      int iovcnt, int flags) SD_NOEXCEPT;
/* Bytes a read could return now, or -EPROTO. */
ssize_t sd_ring_readable(struct sd_ring_consumer *c) SD_NOEXCEPT;

/*
 * Before sleeping: the producer asks for credit, the consumer publishes
 * its credit and says it waits for data.  Returns 1 if the caller may
 * sleep until woken, 0 if it should retry at once, or a negative errno.
 */
int sd_ring_producer_prepare_wait(struct sd_ring_producer *p) SD_NOEXCEPT;
int sd_ring_consumer_prepare_wait(struct sd_ring_consumer *c) SD_NOEXCEPT;

/*
 * 1 if a call since the last one found the other side asleep, so the
 * caller must wake it (the reader after a write or fin, the writer after
 * a read published credit), else 0.  Clears the indication.
 */
int sd_ring_producer_take_wake(struct sd_ring_producer *p) SD_NOEXCEPT;
int sd_ring_consumer_take_wake(struct sd_ring_consumer *c) SD_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* SD_SD_H */
