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

#include <linux/ioctl.h>
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
 * create a native stream socket; other types fail with ESOCKTNOSUPPORT,
 * other protocols with EPROTONOSUPPORT.
 *
 * socket(AF_SD, SOCK_STREAM, SD_PROTO_INET or SD_PROTO_INET6) creates a
 * redirected socket: one that stands in for a TCP socket of that family
 * (libsd's socket() makes these under sdrun).  It takes only addresses of
 * its family; its bind and listen also take the TCP port, so its listener
 * accepts plain TCP clients too; a connect that finds no AF_SD listener
 * (or is told so by an SD_ACTION_TCP rule) falls back to TCP, after which
 * the descriptor is that TCP socket; its IPPROTO_TCP, IPPROTO_IP and
 * IPPROTO_IPV6 options are TCP's.  See Documentation/redirect.rst.  It is
 * refused with EPROTONOSUPPORT while the netns's net.sd.redirect is 0.
 */
#define SD_PROTO_REDIRECT	0x10000
#define SD_PROTO_INET		(SD_PROTO_REDIRECT | 2)		/* AF_INET */
#define SD_PROTO_INET6		(SD_PROTO_REDIRECT | 10)	/* AF_INET6 */

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
 * int, get only: the family a redirected socket stands in for (AF_INET or
 * AF_INET6), 0 for a native AF_SD socket.  libsd answers
 * getsockopt(SOL_SOCKET, SO_DOMAIN) with it.
 */
#define SD_REDIRECTED	3

/*
 * SD_TRANSPORT (int, get): the connection's enum sd_transport.
 *
 * Options 4 to 7 were libsd's RDMA bridge's; they are gone, and their
 * numbers are never reused (ENOPROTOOPT).
 */
#define SD_TRANSPORT	8

/*
 * ioctl numbers 0xD6 to 0xDC and 0xDE to 0xE0 were libsd's RDMA bridge's;
 * they are gone (ENOTTY) and never reused.  Connections to other hosts
 * are the link daemon's (<linux/sd_link.h>, Documentation/remote.rst).
 */

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
 * the data area the producer has not yet written is always zero.  Of a
 * record taken in part, the payload bytes taken are zero already (the
 * side may change hands in the middle of it); the header goes last.
 * Nothing can start at consumer + size or beyond: a header there is not
 * looked at (it is a record not yet consumed, seen a whole ring on).
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
/* mmap offsets (in bytes, despite the name). */
#define SD_PGOFF_TX_RING	0x00000000ULL
#define SD_PGOFF_RX_RING	0x80000000ULL

struct sd_ring_offset {
	__u64 consumer;		/* __u64 credit, written by the consumer */
	__u64 prod_flags;	/* __u32 SD_RING_* flags of the producer */
	__u64 cons_flags;	/* __u32 SD_RING_* flags of the consumer */
	__u64 data;		/* start of the data area */
	__u64 size;		/* bytes in the data area, a power of two */
	__u64 mmap_len;		/* bytes to map */
	/* Token handover (see "Tokens" below). */
	__u64 prod_pos;		/* __u64 tail, written by a user producer */
	__u64 cons_pos;		/* __u64 head, written by a user consumer */
	__u64 cons_off;		/* __u32 bytes of the record at head taken */
	__u64 prod_token;	/* __u32 owner of the producer side (kernel) */
	__u64 cons_token;	/* __u32 owner of the consumer side (kernel) */
	__u64 cons_lowat;	/* __u32 the consumer's SO_RCVLOWAT (kernel) */
};

/* In cons_lowat, with SO_RCVLOWAT: the consumer's TCP_INQ is on. */
#define SD_LOWAT_INQ		(1U << 31)

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
/* Bits 2 and 3 were the RDMA bridge's: never set, never reused. */
/* Either word: the kernel reset the connection. */
#define SD_RING_RESET		(1U << 31)

/*
 * Tokens.  Each side of a ring (producing, consuming) is driven by one
 * owner at a time: the kernel (system calls) or one process using libsd.
 * ioctl(fd, SD_IOC_ACQUIRE, &tok) with tok.dir = SD_TOKEN_TX (this end's
 * producer side) or SD_TOKEN_RX (its consumer side) makes the caller's
 * process the owner, with the busy count at tok.busy (below), and returns
 * the token number and the position to go on from (tok.pos; tok.off:
 * bytes already taken of the record at pos).  It waits for a call in
 * flight as a take-over does; a signal ends that wait with EINTR (never
 * restarted).
 * The kernel takes the side back, without asking, whenever another
 * process acquires it, a system call needs it, or SD_IOC_RELEASE.
 *
 * A user owner follows, for every operation:
 *   atomically add 1 to busy (a full barrier); load the token word: not
 *   ours -> atomically subtract 1 and acquire again (or use the system
 *   call); ... the operation ...; store the new position (prod_pos, or
 *   cons_pos and cons_off); atomically subtract 1 (release).
 * busy is a __u32 count in the owner's own memory, never in the ring
 * (which the peer maps too and could write): its address is tok.busy, and
 * the kernel reads it from the owner's address space (0: no count, the
 * side may be taken back at any moment).  A count whose image is gone
 * (exited, exec()ed) holds nobody.
 * The kernel, taking over: store the token word; full barrier; wait until
 * busy is 0 (or the owner is gone); read and check the position.  It
 * waits whoever asks, the owner's own threads included: a call in flight
 * is exclusive against every other path into the side.  busy stays 1 for
 * a whole send or receive call, sleeps included, so one call's bytes are
 * never interleaved with another's.
 *
 * ioctl(fd, SD_IOC_SEND_WAIT, &dir) with dir SD_TOKEN_TX: the caller's
 * process drives the producer side and is inside a call (busy held);
 * sleep until the ring has room for a record past the position it
 * published, as a blocking send sleeps.  0: look again.  EAGAIN:
 * SO_SNDTIMEO ran out (each wait is bounded by it).  EINTR: a signal
 * came (never restarted: the caller ends its call first and decides).
 * EPIPE: the connection can take no more bytes (the caller ends its call
 * and the system call reports why).  EBUSY: the side is not the caller's.
 *
 * ioctl(fd, SD_IOC_WAKE, &dir): after publishing records with
 * SD_RING_READER_WAIT set (dir SD_TOKEN_TX), or credit with
 * SD_RING_NEED_CREDIT set (dir SD_TOKEN_RX), wake the peer.
 */
#define SD_TOKEN_TX	0
#define SD_TOKEN_RX	1

struct sd_token {
	__u32 dir;		/* in: SD_TOKEN_TX or SD_TOKEN_RX */
	__u32 token;		/* out: the token word's new value (not 0) */
	__u64 pos;		/* out: the position to go on from */
	__u32 off;		/* out: for RX, bytes taken of the record */
	__u32 pad;		/* 0 */
	__u64 busy;		/* in: address of the caller's __u32 busy count */
};

#define SD_IOC_ACQUIRE		_IOWR('S', 0xD1, struct sd_token)
#define SD_IOC_RELEASE		_IOW('S', 0xD2, __u32)
#define SD_IOC_WAKE		_IOW('S', 0xD3, __u32)
#define SD_IOC_SEND_WAIT	_IOW('S', 0xE1, __u32)

/*
 * ioctl(fd, SD_IOC_RECV_WAIT, &other): sleep until connected socket fd
 * has something for recv (bytes, the end of the stream, an error) or the
 * file other (a descriptor) is readable, as recv sleeps: SO_RCVTIMEO
 * bounds it (EAGAIN; at once on a non-blocking socket) and a signal ends
 * it (EINTR, or the call restarts under SA_RESTART).  Returns 1 when the
 * socket has something, else 0 when other is readable.  For a thread
 * that moves bytes in user space on other's events (an RDMA completion
 * channel, say) and must also wake for the kernel's.  On 0 the
 * socket's SD_RING_READER_WAIT is taken back unless another sleeper, a
 * poll or epoll entry or O_ASYNC relies on it: the caller looks at the
 * ring again, and arms it again before it sleeps again.  EBADF: other
 * is not open; EINVAL: other is fd itself or a file that poll cannot
 * wait on with one wait queue; ENOTCONN: fd is not connected; EOPNOTSUPP:
 * fd fell back to TCP.
 */
#define SD_IOC_RECV_WAIT	_IOW('S', 0xDD, __s32)

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
#define SD_REC_ZC		(1U << 2)	/* pages handed over, see below */
#define SD_REC_FLAGS_MASK	(SD_REC_VALID | SD_REC_PAD | SD_REC_ZC)

/*
 * A consumer accepts only these headers at offset off (anything else is a
 * corrupt ring):
 *   - flags within SD_REC_FLAGS_MASK, with SD_REC_VALID set;
 *   - a data record (no SD_REC_PAD) has len > 0 and
 *     off + SD_REC_SPACE(len) <= size;
 *   - a pad record has off + SD_REC_SPACE(len) == size exactly;
 *   - a zero-copy record (SD_REC_ZC, never with SD_REC_PAD) has
 *     len == sizeof(struct sd_zc_rec), and its rec.len is 1 to SD_ZC_MAX;
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

/*
 * Zero copy (Documentation/zerocopy.rst).
 *
 * Pools.  mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
 * SD_PGOFF_POOL) on any AF_SD socket makes a page pool: memory
 * that behaves like shared anonymous memory of the calling process (pages
 * appear zeroed on first touch; a fork gives the child a copy-on-write
 * copy, as for private memory), but whose pages the kernel may hand to
 * another process without copying.  len is a multiple of the page size, at
 * most SD_POOL_MAX_LEN.  Each mmap call makes a new pool.
 *
 * Sending.  ioctl(fd, SD_IOC_ZC_SEND, &zs) on a connected socket takes the
 * zs.len bytes at zs.addr (page-aligned, whole pages, inside one pool
 * mapping of the caller, zs.len at most SD_ZC_MAX) and queues their pages
 * on the connection: the caller's pages become copy-on-write, so the bytes
 * queued are those of the moment of the call whatever the caller does
 * next.  It returns 0 and a handle in zs.seq; the caller, as the producer,
 * then writes a record with flags SD_REC_VALID | SD_REC_ZC whose payload is
 * a struct sd_zc_rec with that seq and len.  The record stands for len
 * bytes of the stream.  While the connection has SD_ZC_QUEUE_MAX bytes
 * queued, the call waits for the peer to take some (up to the socket's
 * send timeout), or with SD_ZC_DONTWAIT fails with ENOBUFS at once: send
 * by copying then.  Errors: EINVAL (not pool memory, misaligned, too long,
 * bad flags), ENOBUFS, EAGAIN (the send timeout passed), EINTR (a signal;
 * never restarted: the caller ends its call first), ENOTCONN,
 * EPIPE, EOPNOTSUPP (a connection to another host: send by copying).
 *
 * Receiving.  A consumer that meets an SD_REC_ZC record at its head, with
 * off bytes of it already taken, calls ioctl(fd, SD_IOC_ZC_RECV, &zr)
 * with zr.seq, zr.rec_len and zr.off from the record and its position,
 * zr.addr and zr.len the buffer.  The kernel places up to zr.len bytes of the record
 * from off on at zr.addr, remapping whole pages where both sides are
 * page-aligned and zr.addr is in a pool of the caller, and copying the
 * rest; it returns the number of bytes placed (zr.remapped: of them, those
 * remapped).  When the record is done (off plus the bytes placed equals its
 * len) its pages are released and the consumer consumes the record as
 * usual.  SD_ZC_PEEK copies without consuming.  A handle that is not the
 * connection's next one, or a length that is not the one its pages were
 * queued with, resets the connection (ECONNRESET); handles are per
 * connection and used once, so a peer that forges, replays or drops one
 * hurts only this connection.
 */
#define SD_PGOFF_POOL		0x40000000ULL
#define SD_POOL_MAX_LEN		(64ULL << 30)
#define SD_ZC_MAX		(16U << 20)	/* bytes per zero-copy record */
#define SD_ZC_QUEUE_MAX		(64U << 20)	/* bytes queued per direction */

struct sd_zc_rec {
	__u64 seq;		/* the handle SD_IOC_ZC_SEND returned */
	__u32 len;		/* bytes of the stream it stands for */
	__u32 pad;		/* 0 */
};

struct sd_zc_send {
	__u64 addr;		/* in: page-aligned address in a pool */
	__u64 len;		/* in: whole pages, at most SD_ZC_MAX */
	__u64 seq;		/* out: the record's handle */
	__u32 flags;		/* in: SD_ZC_DONTWAIT */
	__u32 pad;		/* 0 */
};

#define SD_ZC_PEEK		(1U << 0)	/* SD_IOC_ZC_RECV */
#define SD_ZC_DONTWAIT		(1U << 1)	/* SD_IOC_ZC_SEND */

struct sd_zc_recv {
	__u64 seq;		/* in: the record's handle */
	__u64 addr;		/* in: where to put the bytes */
	__u32 off;		/* in: bytes of the record already taken */
	__u32 len;		/* in: room at addr */
	__u32 flags;		/* in: SD_ZC_PEEK */
	__u32 remapped;		/* out: bytes placed by remapping */
	__u32 rec_len;		/* in: the record's len (struct sd_zc_rec) */
	__u32 pad;		/* 0 */
};

#define SD_IOC_ZC_SEND		_IOWR('S', 0xD4, struct sd_zc_send)
#define SD_IOC_ZC_RECV		_IOWR('S', 0xD5, struct sd_zc_recv)

/*
 * Generic netlink family "sd" (version 1): the monitor's control plane.
 * Every command acts on the caller's network namespace.  Requests are
 * validated strictly: an attribute a command does not take is an error.
 * Mutating commands, and all the KEY commands, need CAP_NET_ADMIN in the
 * namespace's user namespace.
 *
 *   SD_CMD_SOCK_GET        dump: one message per bound or connected socket
 *     SD_A_SOCK_INODE u64, SD_A_SOCK_STATE u8 (TCP_* state numbers),
 *     SD_A_SOCK_FAMILY u16, SD_A_SOCK_LOCAL / SD_A_SOCK_PEER nest {
 *       SD_A_ADDR_IN6 binary[16] (IPv4 as ::ffff:a.b.c.d), SD_A_ADDR_PORT u16
 *     }, SD_A_SOCK_UID u32, SD_A_SOCK_PID u32, SD_A_SOCK_TRANSPORT u8,
 *     SD_A_SOCK_FALLBACK u8 (SD_FALLBACK_*, transport tcp only),
 *     SD_A_SOCK_TX_BYTES, SD_A_SOCK_RX_BYTES, SD_A_SOCK_TX_MSGS,
 *     SD_A_SOCK_RX_MSGS u64 (through the kernel's path),
 *     SD_A_SOCK_TX_FILL, SD_A_SOCK_RX_FILL, SD_A_SOCK_TX_SIZE,
 *     SD_A_SOCK_RX_SIZE u32 (bytes in use and size of each ring),
 *     SD_A_SOCK_TX_PAGES, SD_A_SOCK_RX_PAGES u32 (pages of each ring in
 *     memory, its header page included: data pages come as they are
 *     first touched)
 *   SD_CMD_LISTENER_GET    dump: one message per listening socket
 *     SD_A_SOCK_INODE, SD_A_SOCK_FAMILY, SD_A_SOCK_LOCAL, SD_A_SOCK_UID,
 *     SD_A_SOCK_PID, SD_A_LISTEN_BACKLOG u32, SD_A_LISTEN_QUEUED u32,
 *     SD_A_LISTEN_GROUP u32 (members of its SO_REUSEPORT group)
 *   SD_CMD_RULE_GET        dump: the rules in order, each as SD_A_RULE_*
 *   SD_CMD_RULE_ADD        admin: SD_A_RULE_ACTION and SD_A_RULE_DIR
 *                          required, the match attributes optional,
 *                          SD_A_RULE_POSITION to insert (default: append);
 *                          the reply carries the new SD_A_RULE_ID
 *   SD_CMD_RULE_DEL        admin: SD_A_RULE_ID (ENOENT: no such rule)
 *   SD_CMD_RULE_FLUSH      admin: no attributes
 *   SD_CMD_STATS_GET       do: SD_A_STATS nest { SD_STAT_* u64 }; inside
 *                          it, attributes of type 0 (SD_STAT_UNSPEC) are
 *                          alignment padding: skip them
 *   SD_CMD_KEY_SET         admin: SD_A_KEY, SD_KEY_MIN_LEN to SD_KEY_MAX_LEN
 *                          bytes: the namespace's fabric key, replacing any
 *   SD_CMD_KEY_DEL         admin: no attributes; forgets the key (ENOENT:
 *                          there was none)
 *   SD_CMD_KEY_GET         admin: no attributes; the reply carries
 *                          SD_A_KEY_FPR when a key is set, never the key
 *   SD_CMD_FEATURES_GET    do: SD_A_MODULE_VERSION string and
 *                          SD_A_FEATURES u64 (mask of 1 << SD_FEATURE_*)
 *
 * Replies to RULE_ADD, STATS_GET, KEY_GET and FEATURES_GET carry their own
 * command number.  A
 * RULE_ADD beyond SD_RULES_MAX rules fails with ENOSPC; a position past
 * the end appends.  Dumps resume by position: an entry added or removed
 * between two parts of one dump may be missed or shown twice.
 */
/*
 * What the loaded module does, for programs and daemons that must know
 * before they rely on it (SD_CMD_FEATURES_GET).  A bit is never reused: a
 * feature that goes leaves its bit clear.
 */
enum sd_feature {
	/* SD_PROTO_INET{,6} sockets, net.sd.redirect, fallback to TCP */
	SD_FEATURE_REDIRECT,
	/* SD_IOC_ZC_*, the page pool */
	SD_FEATURE_ZEROCOPY,
	/* TCP_INQ kept; SD_LOWAT_INQ in the ring */
	SD_FEATURE_TCP_INQ,
	/* 3 to 5: the in-kernel rendezvous, its authentication and the
	 * RDMA bridge of libsd, gone: always clear
	 */
	__SD_FEATURE_RETIRED_3,
	__SD_FEATURE_RETIRED_4,
	__SD_FEATURE_RETIRED_5,
	/*
	 * the "sd_link" family: a link daemon carries connections to other
	 * hosts; SD_CMD_KEY_* hold the fabric key it authenticates with
	 */
	SD_FEATURE_LINK_DAEMON,
	__SD_FEATURE_MAX,
};

#define SD_GENL_NAME		"sd"
#define SD_GENL_VERSION		1

enum sd_cmd {
	SD_CMD_UNSPEC,
	SD_CMD_SOCK_GET,
	SD_CMD_LISTENER_GET,
	SD_CMD_RULE_GET,
	SD_CMD_RULE_ADD,
	SD_CMD_RULE_DEL,
	SD_CMD_RULE_FLUSH,
	SD_CMD_STATS_GET,
	SD_CMD_KEY_SET,
	SD_CMD_KEY_DEL,
	SD_CMD_KEY_GET,
	SD_CMD_FEATURES_GET,
	__SD_CMD_MAX,
};

#define SD_CMD_MAX (__SD_CMD_MAX - 1)

enum sd_attr {
	SD_A_UNSPEC,
	SD_A_PAD,
	SD_A_SOCK_INODE,	/* u64 */
	SD_A_SOCK_STATE,	/* u8 */
	SD_A_SOCK_FAMILY,	/* u16 */
	SD_A_SOCK_LOCAL,	/* nest: SD_A_ADDR_* */
	SD_A_SOCK_PEER,		/* nest: SD_A_ADDR_* */
	SD_A_SOCK_UID,		/* u32 */
	SD_A_SOCK_PID,		/* u32 */
	SD_A_SOCK_TRANSPORT,	/* u8: SD_TRANSPORT_* */
	SD_A_SOCK_FALLBACK,	/* u8: SD_FALLBACK_* */
	SD_A_SOCK_TX_BYTES,	/* u64 */
	SD_A_SOCK_RX_BYTES,	/* u64 */
	SD_A_SOCK_TX_MSGS,	/* u64 */
	SD_A_SOCK_RX_MSGS,	/* u64 */
	SD_A_SOCK_TX_FILL,	/* u32 */
	SD_A_SOCK_RX_FILL,	/* u32 */
	SD_A_SOCK_TX_SIZE,	/* u32 */
	SD_A_SOCK_RX_SIZE,	/* u32 */
	SD_A_LISTEN_BACKLOG,	/* u32 */
	SD_A_LISTEN_QUEUED,	/* u32 */
	SD_A_LISTEN_GROUP,	/* u32 */
	SD_A_RULE_ID,		/* u32 */
	SD_A_RULE_POSITION,	/* u32: 0-based index to insert at */
	SD_A_RULE_ACTION,	/* u8: SD_ACTION_* */
	SD_A_RULE_DIR,		/* u8: mask of SD_DIR_* */
	SD_A_RULE_UID_MIN,	/* u32 */
	SD_A_RULE_UID_MAX,	/* u32 */
	SD_A_RULE_GID_MIN,	/* u32 */
	SD_A_RULE_GID_MAX,	/* u32 */
	SD_A_RULE_LOCAL,	/* nest: SD_A_ADDR_IN6, SD_A_ADDR_PREFIX,
				 * SD_A_ADDR_PORT_MIN, SD_A_ADDR_PORT_MAX
				 */
	SD_A_RULE_REMOTE,	/* nest: as SD_A_RULE_LOCAL */
	SD_A_RULE_HITS,		/* u64, in dumps */
	SD_A_RULE_COMMENT,	/* string, at most SD_RULE_COMMENT_MAX bytes */
	SD_A_STATS,		/* nest: SD_STAT_* u64 */
	SD_A_KEY,		/* binary, SD_KEY_MIN_LEN..SD_KEY_MAX_LEN */
	SD_A_KEY_FPR,		/* binary[SD_KEY_FPR_LEN] */
	SD_A_MODULE_VERSION,	/* string */
	SD_A_FEATURES,		/* u64: mask of 1 << SD_FEATURE_* */
	SD_A_SOCK_TX_PAGES,	/* u32: pages of the TX ring in memory */
	SD_A_SOCK_RX_PAGES,	/* u32: pages of the RX ring in memory */
	__SD_A_MAX,
};

#define SD_A_MAX (__SD_A_MAX - 1)

enum sd_addr_attr {
	SD_A_ADDR_UNSPEC,
	SD_A_ADDR_IN6,		/* binary[16] */
	SD_A_ADDR_PORT,		/* u16 */
	SD_A_ADDR_PREFIX,	/* u8, 0..128, of SD_A_ADDR_IN6 */
	SD_A_ADDR_PORT_MIN,	/* u16 */
	SD_A_ADDR_PORT_MAX,	/* u16 */
	__SD_A_ADDR_MAX,
};

#define SD_A_ADDR_MAX (__SD_A_ADDR_MAX - 1)

/*
 * The fabric key of a network namespace (SD_CMD_KEY_SET): the secret its
 * link daemon shares with the daemons of the other hosts it meets
 * (Documentation/remote.rst); only the daemon reads it (SD_LINK_CMD_KEY).
 * Its fingerprint is the first SD_KEY_FPR_LEN bytes of the SHA-256 of the
 * key.
 */
#define SD_KEY_MIN_LEN		32
#define SD_KEY_MAX_LEN		64
#define SD_KEY_FPR_LEN		8

/* A rule's comment: at most SD_RULE_COMMENT_MAX - 1 bytes and a NUL. */
#define SD_RULE_COMMENT_MAX	64
#define SD_RULES_MAX		4096

enum sd_transport {
	SD_TRANSPORT_NONE,	/* not connected */
	SD_TRANSPORT_SHM,	/* rings in shared memory, this host */
	SD_TRANSPORT_RDMA,	/* rings over RDMA, another host */
	SD_TRANSPORT_TCP,	/* fell back to TCP */
	__SD_TRANSPORT_MAX,
};

enum sd_fallback {
	SD_FALLBACK_NONE,
	SD_FALLBACK_NO_LISTENER,	/* no AF_SD listener at the address */
	SD_FALLBACK_PEER_NO_SD,		/* the remote host runs no link
					 * daemon
					 */
	SD_FALLBACK_NO_RDMA,		/* a side has no RDMA device */
	SD_FALLBACK_HANDSHAKE,		/* the daemons' exchange failed, or
					 * no verdict came in time
					 */
	SD_FALLBACK_POLICY,		/* a redirect policy said TCP */
	SD_FALLBACK_TCP_CLIENT,		/* a plain TCP client of a listener */
	SD_FALLBACK_REMOTE,		/* another host, and no link daemon
					 * serves this namespace
					 */
	SD_FALLBACK_PEER_UNKNOWN,	/* a kernel socket's non-blocking
					 * connect, which does not wait for
					 * the daemon's verdict
					 */
	SD_FALLBACK_BUSY,		/* the remote listener's backlog
					 * was full
					 */
	SD_FALLBACK_AUTH,		/* no fabric key here, or the other
					 * host's daemon did not prove it
					 * holds the same one
					 */
	SD_FALLBACK_TCP_LISTENER,	/* a plain TCP listener that shares
					 * the port is the one TCP chooses
					 */
	__SD_FALLBACK_MAX,
};

enum sd_action {
	SD_ACTION_UNSPEC,
	SD_ACTION_ALLOW,
	SD_ACTION_DENY,
	/*
	 * Connect rules only: the connection goes over TCP.  A redirected
	 * socket falls back (SD_FALLBACK_POLICY); for a native socket it is
	 * SD_ACTION_DENY.
	 */
	SD_ACTION_TCP,
	__SD_ACTION_MAX,
};

/* Directions a rule applies to (SD_A_RULE_DIR is a mask of these). */
#define SD_DIR_CONNECT		(1U << 0)	/* a task connects */
#define SD_DIR_ACCEPT		(1U << 1)	/* a listener is offered one */
#define SD_DIR_BIND		(1U << 2)	/* a task binds or listens */
#define SD_DIR_ALL		(SD_DIR_CONNECT | SD_DIR_ACCEPT | SD_DIR_BIND)

/* Per-netns counters, the attribute types inside SD_A_STATS. */
enum sd_stat {
	SD_STAT_UNSPEC,
	SD_STAT_CONNECTS,	/* connections established */
	SD_STAT_ACCEPTS,	/* connections accepted */
	SD_STAT_REFUSED,	/* connects with no listener */
	SD_STAT_DENIED_CONNECT,	/* refused by a connect rule (EACCES) */
	SD_STAT_DENIED_ACCEPT,	/* refused by an accept rule (ECONNREFUSED) */
	SD_STAT_DENIED_BIND,	/* refused by a bind rule (EACCES) */
	SD_STAT_BACKLOG_FULL,	/* connects that met a full backlog */
	SD_STAT_RESETS,		/* connections reset */
	SD_STAT_CORRUPT,	/* resets for a corrupt ring */
	SD_STAT_WAKEUPS,	/* sleepers woken by the kernel's path */
	SD_STAT_TAKEOVERS,	/* send or receive tokens taken over */
	SD_STAT_FALLBACK_NO_LISTENER,	/* the SD_FALLBACK_* reasons, */
	SD_STAT_FALLBACK_PEER_NO_SD,	/* in the same order */
	SD_STAT_FALLBACK_NO_RDMA,
	SD_STAT_FALLBACK_HANDSHAKE,
	SD_STAT_FALLBACK_POLICY,
	SD_STAT_FALLBACK_TCP_CLIENT,
	SD_STAT_FALLBACK_REMOTE,
	SD_STAT_REDIRECTED,	/* redirected sockets created */
	SD_STAT_ZC_SENDS,	/* zero-copy records queued */
	SD_STAT_ZC_PAGES,	/* pages they handed over */
	SD_STAT_ZC_REMAPPED,	/* pages remapped into a receiver */
	SD_STAT_ZC_COPIED,	/* bytes of them a receiver got by copying */
	SD_STAT_ZC_COW,		/* pool pages copied on write */
	SD_STAT_FALLBACK_PEER_UNKNOWN,	/* SD_FALLBACK_PEER_UNKNOWN */
	/*
	 * 26 to 29, 31 to 35 and 38 counted the in-kernel rendezvous and
	 * the RDMA bridge, both gone: never sent, never reused.
	 */
	__SD_STAT_RETIRED_26,
	__SD_STAT_RETIRED_27,
	__SD_STAT_RETIRED_28,
	__SD_STAT_RETIRED_29,
	SD_STAT_FALLBACK_BUSY,	/* SD_FALLBACK_BUSY */
	__SD_STAT_RETIRED_31,
	__SD_STAT_RETIRED_32,
	__SD_STAT_RETIRED_33,
	__SD_STAT_RETIRED_34,
	__SD_STAT_RETIRED_35,
	SD_STAT_ZC_PINNED,	/* pool pages copied, not handed over, as
				 * they may be pinned for DMA
				 */
	SD_STAT_FALLBACK_AUTH,	/* SD_FALLBACK_AUTH */
	__SD_STAT_RETIRED_38,
	SD_STAT_FALLBACK_TCP_LISTENER,	/* SD_FALLBACK_TCP_LISTENER */
	SD_STAT_LINK_UPCALLS,	/* connects the link daemon was told of */
	SD_STAT_LINK_TIMEOUTS,	/* ...that it gave no verdict in time */
	SD_STAT_LINK_VIA,	/* connections to other hosts through it */
	SD_STAT_LINK_INCOMING,	/* connections from other hosts it queued */
	SD_STAT_LINK_RESETS,	/* of both, reset as the daemon went */
	__SD_STAT_MAX,
};

#define SD_STAT_MAX (__SD_STAT_MAX - 1)

#endif /* _UAPI_LINUX_SD_H */
