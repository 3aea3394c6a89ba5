/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The link daemon's interface to af_sd.ko: generic netlink family
 * "sd_link".  One daemon per network namespace (sdlinkd) owns every
 * connection to another host; programs never use this family.
 *
 *   SD_LINK_CMD_REGISTER   admin, do: the sending netlink socket serves
 *                          its namespace from now until it is closed
 *                          (EBUSY: another one does).  Connections it
 *                          carried are reset when it goes.
 *   SD_LINK_CMD_CONNECT    kernel to daemon, unicast to the registered
 *                          socket: a redirected socket connects to an
 *                          address of another host and waits for the
 *                          verdict.  SD_LINK_A_ID, SD_LINK_A_LOCAL,
 *                          SD_LINK_A_REMOTE, SD_LINK_A_UID, SD_LINK_A_GID,
 *                          SD_LINK_A_TX_SIZE, SD_LINK_A_RX_SIZE: bytes in
 *                          the data area of the connecting socket's send
 *                          and receive ring, the sizes its rings get if
 *                          the verdict is SD_LINK_VIA (from SO_SNDBUF,
 *                          SO_RCVBUF and net.sd.ring_size as the connect
 *                          began; a module without them: net.sd.ring_size)
 *   SD_LINK_CMD_VERDICT    admin, do, from the registered socket only:
 *                          SD_LINK_A_ID and SD_LINK_A_VERDICT; with
 *                          SD_LINK_TCP an SD_LINK_A_REASON (SD_FALLBACK_*),
 *                          with SD_LINK_VIA an SD_LINK_A_FD, a listening
 *                          AF_SD socket of the daemon whose queue takes
 *                          the connection (ENOENT: no such connect waits,
 *                          it gave up)
 *   SD_LINK_CMD_INCOMING   admin, do, from the registered socket only: a
 *                          program of another host connects to a listener
 *                          of this namespace.  SD_LINK_A_FD: an AF_SD
 *                          stream socket of the daemon, unbound and
 *                          unconnected, which becomes the daemon's end of
 *                          the connection; SD_LINK_A_LOCAL: the address the
 *                          remote program dialled; SD_LINK_A_REMOTE: the
 *                          remote program's address (the accepted socket's
 *                          peer); SD_LINK_A_UID, SD_LINK_A_GID: the remote
 *                          user as the daemons proved it, in the
 *                          namespace's user namespace; SD_LINK_A_TX_SIZE,
 *                          SD_LINK_A_RX_SIZE (optional): bytes in the data
 *                          area of the daemon end's send and receive ring,
 *                          each a power of two within SD_RING_MIN_SIZE and
 *                          SD_RING_MAX_SIZE (default: net.sd.ring_size),
 *                          so that they can match the other host's.
 *                          The connect rules apply to that user, then the
 *                          listener's accept rules, as for a local connect.
 *                          Never waits.  The reply carries SD_LINK_A_ID,
 *                          the connection's id (SD_LINK_ID on the fd).
 *                          ECONNREFUSED: no AF_SD listener at LOCAL, or
 *                          TCP would give it to a plain TCP listener;
 *                          EACCES: a rule refuses; EOPNOTSUPP: a connect
 *                          rule says TCP; EAGAIN: the backlog is full;
 *                          EISCONN, EINVAL: the socket cannot be the end
 *   SD_LINK_CMD_KEY        admin, do, from the registered socket only: the
 *                          reply carries the namespace's fabric key
 *                          (sdctl key) in SD_LINK_A_KEY; ENOKEY: none set
 *
 * Addresses are nests of SD_A_ADDR_IN6 and SD_A_ADDR_PORT (<linux/sd.h>).
 */
#ifndef _UAPI_LINUX_SD_LINK_H
#define _UAPI_LINUX_SD_LINK_H

/*
 * getsockopt(SOL_SD, SD_LINK_ID), u64: on the daemon's end of a connection
 * made through its listener (SD_LINK_VIA), the id of the connect it
 * answered; on a socket SD_LINK_CMD_INCOMING connected, the id its reply
 * gave.  ENOENT on any other connection, ENOTCONN unconnected.
 */
#define SD_LINK_ID		16

#define SD_LINK_GENL_NAME	"sd_link"
#define SD_LINK_GENL_VERSION	1

enum sd_link_cmd {
	SD_LINK_CMD_UNSPEC,
	SD_LINK_CMD_REGISTER,
	SD_LINK_CMD_CONNECT,
	SD_LINK_CMD_VERDICT,
	SD_LINK_CMD_INCOMING,
	SD_LINK_CMD_KEY,
	__SD_LINK_CMD_MAX,
};

#define SD_LINK_CMD_MAX (__SD_LINK_CMD_MAX - 1)

enum sd_link_attr {
	SD_LINK_A_UNSPEC,
	SD_LINK_A_PAD,
	SD_LINK_A_ID,		/* u64: the waiting connect */
	SD_LINK_A_LOCAL,	/* nest: SD_A_ADDR_* */
	SD_LINK_A_REMOTE,	/* nest: SD_A_ADDR_* */
	SD_LINK_A_UID,		/* u32, in the namespace's user namespace */
	SD_LINK_A_GID,		/* u32 */
	SD_LINK_A_VERDICT,	/* u8: SD_LINK_TCP, _REFUSE, _VIA */
	SD_LINK_A_REASON,	/* u8: SD_FALLBACK_* */
	SD_LINK_A_FD,		/* s32: an AF_SD socket of the daemon */
	SD_LINK_A_TX_SIZE,	/* u32: bytes in a ring's data area */
	SD_LINK_A_RX_SIZE,	/* u32 */
	SD_LINK_A_KEY,		/* binary: the fabric key */
	__SD_LINK_A_MAX,
};

#define SD_LINK_A_MAX (__SD_LINK_A_MAX - 1)

enum sd_link_verdict {
	SD_LINK_UNSPEC,
	SD_LINK_TCP,		/* connect over TCP, counted with the reason */
	SD_LINK_REFUSE,		/* ECONNREFUSED */
	SD_LINK_VIA,		/* through the daemon's listener */
	__SD_LINK_VERDICT_MAX,
};

#endif /* _UAPI_LINUX_SD_LINK_H */
