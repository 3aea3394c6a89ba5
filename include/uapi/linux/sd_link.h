/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The link daemon's interface to af_sd.ko: generic netlink family
 * "sd_link".  One daemon per network namespace (sdlinkd) owns every
 * connection to another host; programs never use this family.
 *
 *   SD_LINK_CMD_REGISTER   admin, do: the sending netlink socket serves
 *                          its namespace from now until it is closed
 *                          (EBUSY: another one does)
 *   SD_LINK_CMD_CONNECT    kernel to daemon, unicast to the registered
 *                          socket: a redirected socket connects to an
 *                          address of another host and waits for the
 *                          verdict.  SD_LINK_A_ID, SD_LINK_A_LOCAL,
 *                          SD_LINK_A_REMOTE, SD_LINK_A_UID, SD_LINK_A_GID
 *   SD_LINK_CMD_VERDICT    admin, do, from the registered socket only:
 *                          SD_LINK_A_ID and SD_LINK_A_VERDICT; with
 *                          SD_LINK_TCP an SD_LINK_A_REASON (SD_FALLBACK_*),
 *                          with SD_LINK_VIA an SD_LINK_A_FD, a listening
 *                          AF_SD socket of the daemon whose queue takes
 *                          the connection (ENOENT: no such connect waits,
 *                          it gave up)
 *
 * Addresses are nests of SD_A_ADDR_IN6 and SD_A_ADDR_PORT (<linux/sd.h>).
 */
#ifndef _UAPI_LINUX_SD_LINK_H
#define _UAPI_LINUX_SD_LINK_H

/*
 * getsockopt(SOL_SD, SD_LINK_ID), u64: on the daemon's end of a connection
 * made through its listener (SD_LINK_VIA), the id of the connect it
 * answered.  ENOENT on any other connection, ENOTCONN unconnected.
 */
#define SD_LINK_ID		16

#define SD_LINK_GENL_NAME	"sd_link"
#define SD_LINK_GENL_VERSION	1

enum sd_link_cmd {
	SD_LINK_CMD_UNSPEC,
	SD_LINK_CMD_REGISTER,
	SD_LINK_CMD_CONNECT,
	SD_LINK_CMD_VERDICT,
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
	SD_LINK_A_FD,		/* s32: a listening AF_SD socket */
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
