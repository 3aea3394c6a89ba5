/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * AF_SD: socket family for shared-memory (and RDMA) stream sockets.
 *
 * This is the one ABI shared by af_sd.ko, libsd and sdctl.  It compiles as
 * C and C++, in the kernel and in user space.  Structures only ever grow at
 * the tail; the kernel accepts a shorter optlen from older programs.
 */
#ifndef _UAPI_LINUX_SD_H
#define _UAPI_LINUX_SD_H

#include <linux/types.h>

/*
 * The family number.
 *
 * sock_register() accepts only numbers below AF_MAX (46 in Linux 6.1), so
 * AF_SD must reuse a slot that the mainline kernel defines but never
 * implements.  18 is AF_ASH: the name was reserved in the 2.1 days and no
 * socket family, in or out of tree, ever registered it (unlike AF_WANPIPE,
 * AF_SNA and AF_NETBEUI, which had out-of-tree implementations, or AF_IB
 * and AF_MPLS, which the kernel uses for addresses and netlink).
 *
 * User space learns the number from this header.  A loaded module also
 * reports it in /sys/module/af_sd/parameters/family (read-only), so a
 * program can check that the running module speaks the same ABI.
 */
#define AF_SD		18
#define PF_SD		AF_SD

/*
 * Addresses are those of IPv4 and IPv6 (struct sockaddr_in, sockaddr_in6),
 * exactly as for TCP, so a program redirected from AF_INET keeps them.
 * socket(AF_SD, SOCK_STREAM, 0) and socket(AF_SD, SOCK_STREAM, IPPROTO_TCP)
 * create a stream socket; other types fail with ESOCKTNOSUPPORT, other
 * protocols with EPROTONOSUPPORT.
 */

/* Socket option level of the options below ('S' 'D'). */
#define SOL_SD		0x5344

/* getsockopt(SOL_SD, SD_MMAP_OFFSETS): struct sd_mmap_offsets. */
#define SD_MMAP_OFFSETS	1
/*
 * int, get and set: SO_REUSEPORT for AF_SD.  Linux refuses
 * setsockopt(SOL_SOCKET, SO_REUSEPORT) on sockets of families other than
 * AF_INET and AF_INET6 before the family sees it; libsd maps SO_REUSEPORT
 * on an AF_SD socket to this.  getsockopt(SOL_SOCKET, SO_REUSEPORT) reads
 * the same setting.
 */
#define SD_REUSEPORT	2

/*
 * Rings.
 *
 * A connected AF_SD socket has two rings: TX, which this end produces and
 * the peer consumes, and RX, the other way round.  Each ring is mapped by
 * mmap(fd, offset = SD_PGOFF_TX_RING or SD_PGOFF_RX_RING, length = the
 * ring's mmap_len).  Both ends map the same pages: one end's TX ring is the
 * other end's RX ring.  Where each field lives inside the mapping is
 * published by SD_MMAP_OFFSETS, never fixed here, so the kernel may change
 * its padding without breaking anyone.
 *
 * The data area holds records back to back.  A record is an 8-byte header
 * (struct sd_rec) followed by len payload bytes, padded to SD_REC_ALIGN.  A
 * record never crosses the end of the data area: where the next record
 * does not fit, the producer writes an SD_REC_PAD record that covers the
 * rest of the area, or splits the payload (the stream is a byte stream; a
 * reader may take part of a record, or several).
 *
 * Positions are free-running 64-bit byte counts; the offset in the data
 * area is position & (size - 1).  The producer keeps its position (tail)
 * and the consumer its position (head) to themselves.  The consumer
 * publishes `consumer` (credit) lazily: after it has consumed about half the
 * ring, when the producer has set SD_RING_NEED_CREDIT, and before it
 * sleeps.  The producer may write up to consumer + size.
 *
 * A header word of 0 means "nothing here yet".  The consumer zeroes every
 * byte it consumes before it publishes the credit for them, so the part of
 * the data area the producer has not yet written is always zero.
 *
 * Memory ordering (the only rules; "release" and "acquire" are the C11
 * orders, "full" a full barrier):
 *
 *   producer                          consumer
 *   1. write payload                  load-acquire header at head
 *      store-release header           (valid) read payload
 *   2. load-acquire consumer          zero consumed bytes
 *      (then reuse the space)         store-release consumer
 *   3. store-release header           store SD_RING_READER_WAIT
 *      full barrier                   full barrier
 *      load READER_WAIT: if set,      load header at head: if still 0,
 *      make the wake-up call          sleep in the kernel
 *   4. store SD_RING_NEED_CREDIT      store-release consumer
 *      full barrier                   full barrier
 *      load consumer: if no room,     load NEED_CREDIT: if set,
 *      sleep in the kernel            make the wake-up call
 *   5. store-release header of the    header is 0: load-acquire prod_flags;
 *      last record, then              if SD_RING_FIN, load the header
 *      store-release SD_RING_FIN      again: still 0 means end of stream
 *
 * The kernel trusts nothing in a ring: it keeps its own copy of every
 * position it relies on, reads each header once, checks it against the
 * data area, and treats a bad one as a reset of that connection only.
 */
#define SD_PGOFF_TX_RING	0x00000000ULL
#define SD_PGOFF_RX_RING	0x80000000ULL

struct sd_ring_offset {
	__u64 consumer;		/* __u64 credit, written by the consumer */
	__u64 prod_flags;	/* __u32 SD_RING_* flags of the producer */
	__u64 cons_flags;	/* __u32 SD_RING_* flags of the consumer */
	__u64 data;		/* start of the data area */
	__u64 size;		/* bytes in the data area, a power of two */
	__u64 mmap_len;		/* bytes to map */
};

struct sd_mmap_offsets {
	struct sd_ring_offset tx;
	struct sd_ring_offset rx;
};

/* prod_flags, written only by the producer's side. */
#define SD_RING_FIN		(1U << 0)	/* no more records */
#define SD_RING_NEED_CREDIT	(1U << 1)	/* producer waits for room */
/* cons_flags, written only by the consumer's side. */
#define SD_RING_READER_WAIT	(1U << 0)	/* consumer sleeps for data */
#define SD_RING_CLOSED		(1U << 1)	/* consumer reads no more */
/* Either word: the kernel reset the connection. */
#define SD_RING_RESET		(1U << 31)

/*
 * A record header, stored as one naturally aligned 64-bit word (len in the
 * low half on little-endian machines): the producer writes it with a single
 * 64-bit release store after the payload.
 */
struct sd_rec {
	__u32 len;		/* payload bytes that follow */
	__u32 flags;		/* SD_REC_* */
};

#define SD_REC_VALID		(1U << 0)	/* the record is complete */
#define SD_REC_PAD		(1U << 1)	/* skip to the end of the area */
#define SD_REC_FLAGS_MASK	(SD_REC_VALID | SD_REC_PAD)

/*
 * A consumer accepts only these headers at offset off (anything else is a
 * corrupt ring):
 *   - flags within SD_REC_FLAGS_MASK, with SD_REC_VALID set;
 *   - a data record (no SD_REC_PAD) has len > 0 and
 *     off + SD_REC_SPACE(len) <= size;
 *   - a pad record has off + SD_REC_SPACE(len) == size exactly;
 *   - the record ends within credit + size (the producer cannot have
 *     written further).
 * Flag words (prod_flags, cons_flags) are changed only with atomic
 * read-modify-write operations: the kernel may set SD_RING_RESET in either
 * at any time.  The side that sets SD_RING_NEED_CREDIT or
 * SD_RING_READER_WAIT clears it when it goes on.
 */

#define SD_REC_ALIGN		8U
#define SD_REC_HDR_LEN		8U
/*
 * Bytes a record with len payload bytes takes in the data area, computed
 * in 64 bits so that no 32-bit len wraps.
 */
#define SD_REC_SPACE(len)	(SD_REC_HDR_LEN + \
				 (((__u64)(len) + SD_REC_ALIGN - 1) & \
				  ~(__u64)(SD_REC_ALIGN - 1)))

/* Bounds of a ring's data area (per-netns sysctls pick inside them). */
#define SD_RING_MIN_SIZE	4096U
#define SD_RING_MAX_SIZE	(64U << 20)

#endif /* _UAPI_LINUX_SD_H */
