// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: rendezvous with the monitors of other hosts.
 *
 * When net.sd.rendezvous_port is set, this netns's monitor listens on that
 * TCP port, and a redirected socket that connects to another host first
 * asks that host's monitor, on the same port, what it can offer.  The
 * answer, or its absence, decides the transport and is the fallback
 * reason that sdctl shows: no monitor (PEER_NO_SD), a monitor but no RDMA
 * on one of the sides (NO_RDMA), a handshake that failed (HANDSHAKE).
 * What was learnt about a host is cached for net.sd.peer_cache_seconds.
 * The wire format is in Documentation/rdma.rst; every message is checked
 * in full, and anything unexpected ends that one exchange.
 *
 * A socket whose process offers RDMA (libsd's bridge, SD_RDMA_LOCAL)
 * sends its half of the queue pair with the request; the other monitor
 * queues a connection at the listener and answers ACCEPTED, and from then
 * on the TCP connection between the two monitors is that connection's
 * link (struct sd_link): it carries the accepting side's half, then the
 * end of the connection (CLOSE), and its loss resets the connection.
 * The data never goes through the module: the bridges carry it.
 *
 * Locks: sn->rdv_lock (mutex) serialises the listener's start, stop and
 * accept loop.  sn->peers_lock (spinlock) covers the peer cache and the
 * job list.  A job never runs under either; the listener's data_ready
 * callback reads sk_user_data under sk_callback_lock.  A link's send_lock
 * (mutex) serialises its messages and the release of its socket; its
 * lock (spinlock) covers the halves, the eventfd and its end; conn->lock
 * may be taken under neither, and neither under conn->lock.
 */
#include <linux/eventfd.h>
#include <linux/inet.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/jiffies.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "af_sd.h"

/* The wire format, network byte order (Documentation/rdma.rst). */
#define SD_RDV_MAGIC	0x53445256	/* "SDRV" */
#define SD_RDV_VERSION	3

enum {
	SD_RDV_REQUEST = 1,
	SD_RDV_REPLY = 2,
	SD_RDV_RDMA_REQUEST = 3,	/* a client with its half */
	SD_RDV_HALF = 4,		/* on a link: the accepting side's */
	SD_RDV_CLOSE = 5,		/* on a link: the last message */
	SD_RDV_LEAVE = 6,		/* on a link: the bridge stopped */
	SD_RDV_MOVE = 7,		/* on a link: its successor's half */
	SD_RDV_LEFT = 8,		/* on a link: a LEAVE taken */
	SD_RDV_HELLO = 9,		/* first, each way: a nonce */
};

/* HELLO flags: the sender holds a fabric key. */
#define SD_RDV_HELLO_KEYED	BIT(0)

/* Reply status. */
enum {
	SD_RDV_NO_RDMA = 1,	/* no RDMA for this one: TCP */
	SD_RDV_ACCEPTED,	/* queued at the listener, over RDMA */
	SD_RDV_NO_LISTENER,	/* no AF_SD listener at that port: TCP */
	SD_RDV_REFUSED,		/* an accept rule said no */
	SD_RDV_BUSY,		/* the listener's backlog is full: TCP */
	__SD_RDV_STATUS_MAX,
};

/* CLOSE: how the connection ended. */
enum {
	SD_RDV_CLOSE_CLEAN = 1,	/* end of stream, after all the data */
	SD_RDV_CLOSE_RESET,
	__SD_RDV_CLOSE_MAX,
};

/* Capability flags, of the sender of the message. */
#define SD_RDV_F_RDMA	BIT(0)

struct sd_rdv_hdr {
	__be32	magic;
	u8	version;
	u8	type;
	__be16	len;		/* of the whole message */
} __packed;

/*
 * The first message each way, not authenticated: the nonces that key the
 * session (sd_auth.c).  Every later message ends in its tag.
 */
struct sd_rdv_hello {
	struct sd_rdv_hdr hdr;
	__be32	flags;		/* SD_RDV_HELLO_* of the sender */
	__be32	reserved;	/* zero */
	u8	nonce[SD_RDV_NONCE_LEN];
} __packed;

struct sd_rdv_request {
	struct sd_rdv_hdr hdr;
	__be32	flags;		/* SD_RDV_F_* of the asking side */
	__be16	dport;		/* the port the client connects to */
	__be16	reserved;	/* zero */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

struct sd_rdv_reply {
	struct sd_rdv_hdr hdr;
	u8	status;		/* SD_RDV_* */
	u8	reserved[3];	/* zero */
	__be32	flags;		/* SD_RDV_F_* of the answering side */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

/* The body of a request is read once the header said which it is. */
struct sd_rdv_rdma_request {
	struct sd_rdv_hdr hdr;
	__be32	flags;		/* exactly SD_RDV_F_RDMA */
	__be16	dport;		/* the port the client connects to */
	__be16	sport;		/* the client's own port */
	/* The connecting task's ids, in the sender's netns's user ns. */
	__be32	uid;
	__be32	gid;
	struct sd_rdma_half half;	/* carried as it is */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

struct sd_rdv_half {
	struct sd_rdv_hdr hdr;
	struct sd_rdma_half half;
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

struct sd_rdv_close {
	struct sd_rdv_hdr hdr;
	u8	how;		/* SD_RDV_CLOSE_* */
	u8	reserved[3];	/* zero */
	__be32	reserved2;	/* zero */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

/* Where a bridge that left stopped (struct sd_rdma_move). */
struct sd_rdv_leave {
	struct sd_rdv_hdr hdr;
	__be64	sent;
	__be64	took;
	__be64	copied;
	__be32	flags;		/* SD_RDMA_MOVE_* */
	__be32	kept;		/* landed beyond copied, kept */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

/* LEFT: the answer to a LEAVE. */
struct sd_rdv_left {
	struct sd_rdv_hdr hdr;
	__be32	reserved;	/* zero */
	__be32	reserved2;	/* zero */
	u8	tag[SD_RDV_TAG_LEN];
} __packed;

#define SD_RDV_MSG_MAX	sizeof(struct sd_rdv_rdma_request)

/*
 * The link of an RDMA connection: the TCP connection between the two
 * monitors, kept for the connection's life.  Owned by the connection
 * (conn->link); its socket is released when the local end closes.
 */
struct sd_link {
	refcount_t		ref;
	struct sd_net		*sn;
	struct mutex		send_lock;	/* messages; sock's release */
	struct socket		*sock;		/* NULL once released */
	/* Its rendezvous's session: tx under send_lock, rx rx_work's. */
	struct sd_rdv_auth	auth;
	struct work_struct	rx_work;	/* reads what the peer sends */
	struct work_struct	left_work;	/* sends LEFT */
	unsigned long		deadline;	/* of the request (jiffies) */
	/* TCP's callbacks, while ours are hooked (sk_callback_lock). */
	void			(*saved_data_ready)(struct sock *sk);
	void			(*saved_state_change)(struct sock *sk);
	void			(*saved_error_report)(struct sock *sk);
	u8			rxbuf[SD_RDV_MSG_MAX];
	unsigned int		rxlen;		/* rx_work's alone */

	spinlock_t		lock;		/* the fields below */
	struct sd_conn		*conn;		/* set by sd_link_start() */
	u8			side;		/* the local end in conn->end[] */
	bool			started;
	bool			have_local;	/* ours was sent */
	bool			have_peer;
	bool			ended;		/* CLOSE came, or the link broke */
	struct sd_rdma_half	peer;
	/*
	 * The peer's bridge left (LEAVE): where it stopped, and its
	 * successor's half once MOVE came; until our bridge read that.
	 */
	bool			peer_moving;
	bool			have_moved_half;
	struct sd_rdma_move	moved_at;
	struct sd_rdma_half	moved_half;
	/*
	 * Our LEAVE waits for its LEFT (leave_waits).  Two LEAVEs that
	 * cross on the way: the connecting side's goes on and the other's
	 * is refused (leave_err -EAGAIN); each monitor knows by itself.
	 */
	bool			leave_waits;
	int			leave_err;
	bool			no_left;	/* released: left_work no more */
	struct eventfd_ctx	*ev;		/* the bridge's, or NULL */
	wait_queue_head_t	wait;		/* SD_RDMA_PEER waits here */
};

/* Keepalive of a link: a peer gone silent is found in about 6 s. */
#define SD_LINK_KEEPIDLE	3	/* s */
#define SD_LINK_KEEPINTVL	1	/* s */
#define SD_LINK_KEEPCNT		3
#define SD_LINK_USER_TIMEOUT	6000	/* ms, unacknowledged data */

/* What is known about another host. */
enum {
	SD_PEER_NO_SD,		/* no monitor answered */
	SD_PEER_BROKEN,		/* its port does not speak the protocol */
	SD_PEER_SD,		/* a monitor; flags say what it offers */
	SD_PEER_AUTH,		/* a monitor without our key */
};

struct sd_peer {
	struct list_head	node;		/* sd_net.peers */
	struct in6_addr		addr;
	u8			verdict;	/* SD_PEER_* */
	u32			flags;		/* SD_RDV_F_*, with SD_PEER_SD */
	unsigned long		expires;	/* jiffies */
};

/* Answering a request, or asking in the background. */
struct sd_rdv_job {
	struct work_struct	work;
	struct list_head	node;		/* sd_net.rdv_jobs */
	struct sd_net		*sn;
	struct socket		*sock;		/* answer: the connection */
	struct in6_addr		addr;		/* ask: the host asked */
	bool			ask;
};

#define SD_PEERS_MAX	256	/* cached hosts per netns */
#define SD_RDV_JOBS_MAX	64	/* exchanges in flight per netns */

static struct workqueue_struct *sd_rdv_wq;

static struct net *sd_rdv_net(struct sd_net *sn)
{
	return read_pnet(&sn->net);
}

static long sd_rdv_timeo(struct sd_net *sn)
{
	return msecs_to_jiffies(READ_ONCE(sn->rdv_timeout_ms));
}

static void sd_rdv_hdr_init(struct sd_rdv_hdr *h, u8 type, size_t len)
{
	h->magic = htonl(SD_RDV_MAGIC);
	h->version = SD_RDV_VERSION;
	h->type = type;
	h->len = htons(len);
}

static bool sd_rdv_hdr_ok(const struct sd_rdv_hdr *h, u8 type, size_t len)
{
	return ntohl(h->magic) == SD_RDV_MAGIC &&
	       h->version == SD_RDV_VERSION && h->type == type &&
	       ntohs(h->len) == len;
}

/*
 * Whole-message I/O on a kernel TCP socket, bounded by @deadline: 0,
 * -ENODATA (the other side closed before the message), -EPROTO (it closed
 * in the middle), or the socket's error.
 */
static int sd_rdv_io(struct socket *sock, void *buf, size_t len, bool send,
		     unsigned long deadline)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
	long left = (long)(deadline - jiffies);
	int ret;

	if (left <= 0)
		return -ETIMEDOUT;
	if (send) {
		sock->sk->sk_sndtimeo = left;
		ret = kernel_sendmsg(sock, &msg, &iov, 1, len);
	} else {
		sock->sk->sk_rcvtimeo = left;
		ret = kernel_recvmsg(sock, &msg, &iov, 1, len, MSG_WAITALL);
	}
	if (ret < 0)
		return ret;
	if (!ret && !send)
		return -ENODATA;	/* closed before a byte */
	return ret == len ? 0 : -EPROTO;
}

static bool sd_rdv_hello_ok(const struct sd_rdv_hello *h)
{
	return sd_rdv_hdr_ok(&h->hdr, SD_RDV_HELLO, sizeof(*h)) &&
	       !(ntohl(h->flags) & ~SD_RDV_HELLO_KEYED) && !h->reserved;
}

/* Seal a whole message (its last SD_RDV_TAG_LEN bytes) and send it. */
static int sd_rdv_send(struct sd_rdv_auth *a, struct socket *sock, void *msg,
		       size_t len, unsigned long deadline)
{
	int err = sd_rdv_seal(a, msg, len);

	return err ? err : sd_rdv_io(sock, msg, len, true, deadline);
}

/*
 * The connecting side's HELLOs: ours goes at once, then the answering
 * monitor's is read, and the session is keyed.  Returns 0; -ENOKEY when
 * the other monitor holds no key (or this side lost its own meanwhile);
 * -EBADMSG when what answered is no monitor of this version; or the I/O's
 * error (-ENODATA or -EPROTO: it closed before a whole HELLO).
 */
static int sd_rdv_hello_client(struct sd_net *sn, struct socket *sock,
			       struct sd_rdv_auth *a, unsigned long deadline)
{
	struct sd_rdv_hello mine = {}, theirs;
	int err;

	sd_rdv_hdr_init(&mine.hdr, SD_RDV_HELLO, sizeof(mine));
	mine.flags = htonl(SD_RDV_HELLO_KEYED);
	get_random_bytes(mine.nonce, sizeof(mine.nonce));
	err = sd_rdv_io(sock, &mine, sizeof(mine), true, deadline);
	if (!err)
		err = sd_rdv_io(sock, &theirs, sizeof(theirs), false, deadline);
	if (err)
		return err;
	if (!sd_rdv_hello_ok(&theirs))
		return -EBADMSG;
	if (!(ntohl(theirs.flags) & SD_RDV_HELLO_KEYED))
		return -ENOKEY;
	return sd_rdv_auth_init(a, sn, true, mine.nonce, theirs.nonce);
}

/* ---- the peer cache ------------------------------------------------- */

/* The cached verdict on @addr, or -1.  Under nothing; takes peers_lock. */
static int sd_peer_lookup(struct sd_net *sn, const struct in6_addr *addr,
			  u32 *flags)
{
	struct sd_peer *p, *tmp;
	int verdict = -1;

	spin_lock(&sn->peers_lock);
	list_for_each_entry_safe(p, tmp, &sn->peers, node) {
		if (time_after_eq(jiffies, p->expires)) {
			list_del(&p->node);
			sn->nr_peers--;
			kfree(p);
			continue;
		}
		if (ipv6_addr_equal(&p->addr, addr)) {
			verdict = p->verdict;
			*flags = p->flags;
			break;
		}
	}
	spin_unlock(&sn->peers_lock);
	return verdict;
}

static void sd_peer_learn(struct sd_net *sn, const struct in6_addr *addr,
			  u8 verdict, u32 flags)
{
	unsigned int secs = READ_ONCE(sn->peer_cache_secs);
	struct sd_peer *p, *fresh;

	if (!secs)
		return;
	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	if (!fresh)
		return;		/* a cache, not a duty */
	fresh->addr = *addr;
	fresh->verdict = verdict;
	fresh->flags = flags;
	fresh->expires = jiffies + secs * HZ;

	spin_lock(&sn->peers_lock);
	list_for_each_entry(p, &sn->peers, node) {
		if (ipv6_addr_equal(&p->addr, addr)) {
			list_del(&p->node);
			sn->nr_peers--;
			kfree(p);
			break;
		}
	}
	if (sn->nr_peers >= SD_PEERS_MAX) {
		/* Newest first: the last one is the oldest. */
		p = list_last_entry(&sn->peers, struct sd_peer, node);
		list_del(&p->node);
		sn->nr_peers--;
		kfree(p);
	}
	list_add(&fresh->node, &sn->peers);
	sn->nr_peers++;
	spin_unlock(&sn->peers_lock);
}

static void sd_peers_flush(struct sd_net *sn)
{
	struct sd_peer *p, *tmp;

	spin_lock(&sn->peers_lock);
	list_for_each_entry_safe(p, tmp, &sn->peers, node) {
		list_del(&p->node);
		kfree(p);
	}
	sn->nr_peers = 0;
	spin_unlock(&sn->peers_lock);
}

/*
 * The fabric key changed: what was learnt with the old one (a monitor
 * that would not take our key) may not hold with the new one.
 */
void sd_remote_key_changed(struct sd_net *sn)
{
	sd_peers_flush(sn);
}

/* The fallback reason a verdict stands for. */
static u8 sd_peer_reason(int verdict, u32 flags)
{
	switch (verdict) {
	case SD_PEER_NO_SD:
		return SD_FALLBACK_PEER_NO_SD;
	case SD_PEER_BROKEN:
		return SD_FALLBACK_HANDSHAKE;
	case SD_PEER_AUTH:
		return SD_FALLBACK_AUTH;
	default:
		/* No RDMA transport on this side yet (rdma.rst). */
		return SD_FALLBACK_NO_RDMA;
	}
}

/* ---- jobs ----------------------------------------------------------- */

/*
 * Register a job (an answer owns its connection from then on).  Fails when
 * the netns is going, when too many exchanges are in flight, or for an ask
 * when one for the same host is; the caller then frees the job and the
 * connection.
 */
static bool sd_rdv_job_add(struct sd_net *sn, struct sd_rdv_job *job)
{
	struct sd_rdv_job *j;
	bool ok = false;

	spin_lock(&sn->peers_lock);
	if (sn->rdv_dying || sn->nr_rdv_jobs >= SD_RDV_JOBS_MAX)
		goto out;
	if (job->ask) {
		/* One background ask per host at a time. */
		list_for_each_entry(j, &sn->rdv_jobs, node)
			if (j->ask && ipv6_addr_equal(&j->addr, &job->addr))
				goto out;
	}
	list_add(&job->node, &sn->rdv_jobs);
	sn->nr_rdv_jobs++;
	ok = true;
out:
	spin_unlock(&sn->peers_lock);
	return ok;
}

static void sd_rdv_job_done(struct sd_rdv_job *job)
{
	struct sd_net *sn = job->sn;

	spin_lock(&sn->peers_lock);
	list_del(&job->node);
	sn->nr_rdv_jobs--;
	spin_unlock(&sn->peers_lock);
	if (job->sock)
		sock_release(job->sock);
	kfree(job);
}

/* ---- asking (the connecting side) ----------------------------------- */

/*
 * Open a TCP connection to the monitor at @addr (port
 * net.sd.rendezvous_port), by @deadline.  Returns 0 with *res, -EHOSTDOWN
 * when nothing answers there, or another -errno when nothing should be
 * learnt (a signal, no memory).
 */
static int sd_rdv_dial(struct sd_net *sn, const struct in6_addr *addr,
		       unsigned long deadline, struct socket **res)
{
	struct net *net = sd_rdv_net(sn);
	int port = READ_ONCE(sn->rdv_port);
	struct sockaddr_storage ss = {};
	struct socket *sock;
	int family, len, err;

	if (!port)
		return -ENOTCONN;
	if (ipv6_addr_v4mapped(addr)) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		family = AF_INET;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr.s_addr = addr->s6_addr32[3];
		len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		family = AF_INET6;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = *addr;
		len = sizeof(*sin6);
	}
	err = sock_create_kern(net, family, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (err)
		return err;
	sd_stat_inc(net, SD_STAT_RDV_ASKED);

	sock->sk->sk_sndtimeo = max_t(long, deadline - jiffies, 1);
	err = kernel_connect(sock, (struct sockaddr *)&ss, len, 0);
	switch (err) {
	case 0:
		*res = sock;
		return 0;
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ETIMEDOUT:
	case -EINPROGRESS:	/* the timeout ran out */
	case -EHOSTUNREACH:
	case -ENETUNREACH:
		/* Nothing answers there: a host without AF_SD. */
		err = -EHOSTDOWN;
		break;
	default:
		/* A signal, no memory: nothing to learn. */
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		break;
	}
	sock_release(sock);
	return err;
}

/*
 * A reply read on the connecting side, in the order that tells what went
 * wrong: its header (a monitor that does not speak the protocol), its tag
 * (one that does not hold our key: SD_STAT_RDV_AUTH_FAILED), its fields.
 * Returns 0, -EBADMSG or -EKEYREJECTED.
 */
static int sd_rdv_reply_check(struct net *net, struct sd_rdv_auth *a,
			      const struct sd_rdv_reply *rep)
{
	if (!sd_rdv_hdr_ok(&rep->hdr, SD_RDV_REPLY, sizeof(*rep)))
		return -EBADMSG;
	if (!sd_rdv_check(a, rep, sizeof(*rep))) {
		sd_stat_inc(net, SD_STAT_RDV_AUTH_FAILED);
		return -EKEYREJECTED;
	}
	if (!rep->status || rep->status >= __SD_RDV_STATUS_MAX ||
	    rep->reserved[0] || rep->reserved[1] || rep->reserved[2])
		return -EBADMSG;
	return 0;
}

/*
 * What a failed exchange teaches about the host, on the connecting side,
 * for an error of sd_rdv_hello_client(), of the request's send or of the
 * reply's read or check: SD_PEER_AUTH when the other monitor has no key
 * or not ours (it said so in its HELLO, its reply failed the check, or it
 * closed without a reply after a HELLO that promised a key: a monitor
 * drops a request that fails its check), SD_PEER_BROKEN otherwise, or -1
 * when nothing is to be learnt (a signal, no memory).  @hello: the HELLOs
 * went through.
 */
static int sd_rdv_failed_verdict(int err, bool hello)
{
	switch (err) {
	case -ERESTARTSYS:
	case -EINTR:
	case -ENOMEM:
		return -1;
	case -ENOKEY:
	case -EKEYREJECTED:
		return SD_PEER_AUTH;
	case -ENODATA:		/* closed without a word */
	case -ECONNRESET:
	case -EPIPE:
		return hello ? SD_PEER_AUTH : SD_PEER_BROKEN;
	default:
		return SD_PEER_BROKEN;
	}
}

/*
 * Ask the monitor at @addr what it offers, within
 * net.sd.rendezvous_timeout_ms in all.  Returns the SD_PEER_* verdict, or
 * -errno when nothing should be learnt (a signal, no memory).
 */
static int sd_rdv_exchange(struct sd_net *sn, const struct in6_addr *addr,
			   u16 dport, u32 *flags)
{
	struct net *net = sd_rdv_net(sn);
	unsigned long deadline = jiffies + sd_rdv_timeo(sn);
	struct sd_rdv_auth auth = {};
	struct sd_rdv_request req = {};
	struct sd_rdv_reply rep;
	struct socket *sock;
	bool hello = false;
	int err, verdict;

	err = sd_rdv_dial(sn, addr, deadline, &sock);
	if (err)
		return err == -EHOSTDOWN ? SD_PEER_NO_SD : err;
	err = sd_rdv_hello_client(sn, sock, &auth, deadline);
	if (err)
		goto failed;
	hello = true;
	sd_rdv_hdr_init(&req.hdr, SD_RDV_REQUEST, sizeof(req));
	req.flags = htonl(0);	/* this socket offers no RDMA */
	req.dport = htons(dport);
	err = sd_rdv_send(&auth, sock, &req, sizeof(req), deadline);
	if (!err)
		err = sd_rdv_io(sock, &rep, sizeof(rep), false, deadline);
	if (!err)
		err = sd_rdv_reply_check(net, &auth, &rep);
	/* A plain request gets NO_RDMA, and nothing else. */
	if (!err && rep.status != SD_RDV_NO_RDMA)
		err = -EBADMSG;
	if (err)
		goto failed;
	*flags = ntohl(rep.flags);
	err = SD_PEER_SD;
	goto out;

failed:
	/* Something listens there, but not a monitor we can talk to. */
	sd_stat_inc(net, SD_STAT_RDV_FAILED);
	verdict = sd_rdv_failed_verdict(err, hello);
	if (verdict >= 0)
		err = verdict;
	else if (err == -ERESTARTSYS)
		err = -EINTR;
out:
	sd_rdv_auth_free(&auth);
	sock_release(sock);
	return err;
}

static void sd_rdv_ask_work(struct work_struct *work)
{
	struct sd_rdv_job *job = container_of(work, struct sd_rdv_job, work);
	u32 flags = 0;
	int verdict;

	verdict = sd_rdv_exchange(job->sn, &job->addr, 0, &flags);
	if (verdict >= 0)
		sd_peer_learn(job->sn, &job->addr, verdict, flags);
	sd_rdv_job_done(job);
}

/**
 * sd_remote_ask - what a connect to another host should do
 * @net: the connecting socket's netns
 * @dst: where it connects to, a port on another host
 * @nonblock: the connect must not wait
 * @reason: the SD_FALLBACK_* reason for the TCP connection
 *
 * Called from connect with the socket locked (a blocking ask waits up to
 * net.sd.rendezvous_timeout_ms under that lock, as a TCP connect would
 * hold the caller).  A non-blocking connect to a host not in the cache
 * goes to TCP at once, and the monitor asks in the background for the
 * next one.  Returns 0; later, with the RDMA transport, a refusal.
 */
int sd_remote_ask(struct net *net, const struct sd_addr *dst, bool nonblock,
		  u8 *reason)
{
	struct sd_net *sn = sd_net(net);
	struct sd_rdv_job *job;
	u32 flags = 0;
	int verdict;

	if (!READ_ONCE(sn->rdv_port)) {
		*reason = SD_FALLBACK_REMOTE;
		return 0;
	}
	/* Never unauthenticated: no key, no rendezvous. */
	if (!sd_key_present(sn)) {
		*reason = SD_FALLBACK_AUTH;
		return 0;
	}
	verdict = sd_peer_lookup(sn, &dst->addr, &flags);
	if (verdict >= 0) {
		sd_stat_inc(net, SD_STAT_RDV_CACHED);
		*reason = sd_peer_reason(verdict, flags);
		return 0;
	}
	if (!nonblock) {
		verdict = sd_rdv_exchange(sn, &dst->addr, ntohs(dst->port),
					  &flags);
		if (verdict < 0) {
			*reason = SD_FALLBACK_HANDSHAKE;
			return 0;
		}
		sd_peer_learn(sn, &dst->addr, verdict, flags);
		*reason = sd_peer_reason(verdict, flags);
		return 0;
	}

	*reason = SD_FALLBACK_PEER_UNKNOWN;
	job = kzalloc(sizeof(*job), GFP_KERNEL);
	if (!job)
		return 0;
	INIT_WORK(&job->work, sd_rdv_ask_work);
	job->sn = sn;
	job->ask = true;
	job->addr = dst->addr;
	if (!sd_rdv_job_add(sn, job)) {
		kfree(job);
		return 0;
	}
	queue_work(sd_rdv_wq, &job->work);
	return 0;
}

/* An IPv4 or IPv6 socket address as an address of AF_SD (v4-mapped). */
static void sd_rdv_sockaddr(const struct sockaddr_storage *ss,
			    struct in6_addr *a)
{
	if (ss->ss_family == AF_INET)
		ipv6_addr_set_v4mapped(((const struct sockaddr_in *)ss)->sin_addr.s_addr,
				       a);
	else
		*a = ((const struct sockaddr_in6 *)ss)->sin6_addr;
}

/* ---- links: the monitors' connection for one RDMA connection -------- */

static void sd_link_rx_work(struct work_struct *work);
static void sd_link_left_work(struct work_struct *work);

/* A link over @sock, taking the session @auth of its rendezvous. */
static struct sd_link *sd_link_alloc(struct sd_net *sn, struct socket *sock,
				     struct sd_rdv_auth *auth)
{
	struct sd_link *link;

	link = kzalloc(sizeof(*link), GFP_KERNEL);
	if (!link)
		return NULL;
	refcount_set(&link->ref, 1);
	link->sn = sn;
	link->sock = sock;
	sd_rdv_auth_move(&link->auth, auth);
	mutex_init(&link->send_lock);
	spin_lock_init(&link->lock);
	init_waitqueue_head(&link->wait);
	INIT_WORK(&link->rx_work, sd_link_rx_work);
	INIT_WORK(&link->left_work, sd_link_left_work);
	return link;
}

/* The socket's callbacks: anything that happens on it is rx_work's. */
static void sd_link_event(struct sock *sk)
{
	struct sd_link *link;

	read_lock_bh(&sk->sk_callback_lock);
	link = sk->sk_user_data;
	if (link)
		queue_work(sd_rdv_wq, &link->rx_work);
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Signal the bridge's eventfd, if it gave one. */
void sd_link_kick(struct sd_link *link)
{
	spin_lock(&link->lock);
	if (link->ev)
		eventfd_signal(link->ev, 1);
	spin_unlock(&link->lock);
}

/*
 * The connection ended on the peer's side (@reset: CLOSE(reset), a broken
 * link, a message we do not understand): tell the local end, once.
 */
static void sd_link_end(struct sd_link *link, bool reset)
{
	struct sd_conn *conn;
	u8 side;

	spin_lock(&link->lock);
	if (link->ended) {
		spin_unlock(&link->lock);
		return;
	}
	link->ended = true;
	conn = link->conn;
	side = link->side;
	spin_unlock(&link->lock);

	if (reset)
		sd_stat_inc(sd_rdv_net(link->sn), SD_STAT_RDMA_RESETS);
	if (conn)
		sd_conn_remote_end(conn, side, reset);
	wake_up_all(&link->wait);
	sd_link_kick(link);
}

/*
 * LEAVE: the peer's bridge stopped.  Our bridge learns it from its send
 * ring (SD_RING_MOVED) and reads where with SD_IOC_RDMA_MOVED; the peer's
 * monitor gets a LEFT.  Unless our own LEAVE waits for its LEFT: the two
 * crossed.  Then the connecting side's goes on, and the accepting side's
 * is refused, which both monitors know without a word: the connecting
 * side drops the LEAVE it got, the accepting side takes it and tells its
 * bridge that its own was refused.
 */
static bool sd_link_handle_leave(struct sd_link *link)
{
	const struct sd_rdv_leave *m = (const void *)link->rxbuf;
	struct sd_rdma_move at = {
		.sent = be64_to_cpu(m->sent),
		.took = be64_to_cpu(m->took),
		.copied = be64_to_cpu(m->copied),
		.flags = ntohl(m->flags),
		.kept = ntohl(m->kept),
	};
	bool crossed = false;
	struct sd_conn *conn;
	u8 side;

	if (at.kept > SD_RDMA_STASH_MAX ||
	    at.flags & ~(SD_RDMA_MOVE_TX_FIN | SD_RDMA_MOVE_RX_FIN) ||
	    at.took > at.sent)
		return false;
	spin_lock(&link->lock);
	if (link->leave_waits) {
		crossed = true;
		if (link->side == 0) {
			spin_unlock(&link->lock);
			sd_stat_inc(sd_rdv_net(link->sn),
				    SD_STAT_RDMA_MOVES_CROSSED);
			return true;
		}
		link->leave_waits = false;
		link->leave_err = -EAGAIN;
	}
	link->moved_at = at;
	link->peer_moving = true;
	link->have_moved_half = false;
	conn = link->conn;
	side = link->side;
	/* Under link->lock: the connection stays while link->conn is set. */
	if (conn)
		sd_ring_set_flags(&conn->ring[side], SD_RING_HDR_CONS,
				  SD_RING_MOVED);
	/* The LEFT: rx_work may not take send_lock (sd_link_untie()). */
	if (!link->no_left)
		queue_work(sd_rdv_wq, &link->left_work);
	spin_unlock(&link->lock);
	if (crossed) {
		sd_stat_inc(sd_rdv_net(link->sn), SD_STAT_RDMA_MOVES_CROSSED);
		wake_up_all(&link->wait);
	}
	sd_link_kick(link);
	return true;
}

/*
 * Send the LEFT that a LEAVE asked for.  A send that fails is left at
 * that: the peer's monitor resets the connection when no LEFT comes, and
 * rx_work finds the link broken.  Cancelled by sd_link_release() before
 * it takes send_lock; takes no socket lock (sd_link_close() holds one).
 */
static void sd_link_left_work(struct work_struct *work)
{
	struct sd_link *link = container_of(work, struct sd_link, left_work);
	struct sd_rdv_left msg = {};

	sd_rdv_hdr_init(&msg.hdr, SD_RDV_LEFT, sizeof(msg));
	mutex_lock(&link->send_lock);
	if (link->sock && !READ_ONCE(link->ended))
		sd_rdv_send(&link->auth, link->sock, &msg, sizeof(msg),
			    jiffies + sd_rdv_timeo(link->sn));
	mutex_unlock(&link->send_lock);
}

/* A whole message in rxbuf: act on it.  Returns false if it is bad. */
static bool sd_link_handle(struct sd_link *link)
{
	const struct sd_rdv_hdr *h = (const void *)link->rxbuf;

	if (h->type == SD_RDV_HALF) {
		const struct sd_rdv_half *m = (const void *)link->rxbuf;

		spin_lock(&link->lock);
		link->peer = m->half;
		link->have_peer = true;
		spin_unlock(&link->lock);
		wake_up_all(&link->wait);
		sd_link_kick(link);
		return true;
	}
	if (h->type == SD_RDV_LEAVE)
		return sd_link_handle_leave(link);
	if (h->type == SD_RDV_LEFT) {
		const struct sd_rdv_left *m = (const void *)link->rxbuf;

		if (m->reserved || m->reserved2)
			return false;
		spin_lock(&link->lock);
		link->leave_waits = false;
		link->leave_err = 0;
		spin_unlock(&link->lock);
		wake_up_all(&link->wait);
		return true;
	}
	if (h->type == SD_RDV_MOVE) {
		const struct sd_rdv_half *m = (const void *)link->rxbuf;

		spin_lock(&link->lock);
		link->moved_half = m->half;
		link->have_moved_half = true;
		spin_unlock(&link->lock);
		sd_link_kick(link);
		return true;
	}
	if (h->type == SD_RDV_CLOSE) {
		const struct sd_rdv_close *m = (const void *)link->rxbuf;

		if (!m->how || m->how >= __SD_RDV_CLOSE_MAX ||
		    m->reserved[0] || m->reserved[1] || m->reserved[2] ||
		    m->reserved2)
			return false;
		sd_link_end(link, m->how == SD_RDV_CLOSE_RESET);
		return true;
	}
	return false;
}

/*
 * Whether a header may start a message on this link: HALF only towards
 * the connecting side and only once, LEAVE and MOVE in turn once it is
 * set up, CLOSE either way; the length the type's.
 */
static bool sd_link_hdr_ok(struct sd_link *link, const struct sd_rdv_hdr *h)
{
	bool first_half, ok;

	switch (h->type) {
	case SD_RDV_LEAVE:
		/* Once the link carries a connection; again after a MOVE. */
		spin_lock(&link->lock);
		ok = link->have_peer &&
		     (!link->peer_moving || link->have_moved_half);
		spin_unlock(&link->lock);
		return ok && sd_rdv_hdr_ok(h, SD_RDV_LEAVE,
					   sizeof(struct sd_rdv_leave));
	case SD_RDV_LEFT:
		/* Only an answer to our LEAVE. */
		spin_lock(&link->lock);
		ok = link->leave_waits;
		spin_unlock(&link->lock);
		return ok && sd_rdv_hdr_ok(h, SD_RDV_LEFT,
					   sizeof(struct sd_rdv_left));
	case SD_RDV_MOVE:
		spin_lock(&link->lock);
		ok = link->peer_moving && !link->have_moved_half;
		spin_unlock(&link->lock);
		return ok && sd_rdv_hdr_ok(h, SD_RDV_MOVE,
					   sizeof(struct sd_rdv_half));
	case SD_RDV_HALF:
		spin_lock(&link->lock);
		first_half = link->side == 0 && !link->have_peer;
		spin_unlock(&link->lock);
		return first_half &&
		       sd_rdv_hdr_ok(h, SD_RDV_HALF, sizeof(struct sd_rdv_half));
	case SD_RDV_CLOSE:
		return sd_rdv_hdr_ok(h, SD_RDV_CLOSE,
				     sizeof(struct sd_rdv_close));
	default:
		return false;
	}
}

/*
 * Read what the peer's monitor sent, without waiting.  Runs on sd_rdv_wq;
 * cancelled (after the callbacks are untied) before the socket goes, so
 * link->sock is there for as long as it runs.
 */
static void sd_link_rx_work(struct work_struct *work)
{
	struct sd_link *link = container_of(work, struct sd_link, rx_work);
	const struct sd_rdv_hdr *h = (const void *)link->rxbuf;

	for (;;) {
		size_t want = link->rxlen < sizeof(*h) ? sizeof(*h) :
			      ntohs(h->len);
		struct kvec iov = {
			.iov_base = link->rxbuf + link->rxlen,
			.iov_len = want - link->rxlen,
		};
		struct msghdr msg = { .msg_flags = MSG_DONTWAIT };
		int ret;

		if (READ_ONCE(link->ended))
			return;
		ret = kernel_recvmsg(link->sock, &msg, &iov, 1, iov.iov_len,
				     MSG_DONTWAIT);
		if (ret == -EAGAIN)
			return;
		if (ret <= 0) {
			/* The link broke, or closed without a CLOSE. */
			sd_link_end(link, true);
			return;
		}
		link->rxlen += ret;
		if (link->rxlen < want)
			continue;
		if (link->rxlen == sizeof(*h)) {
			/* The length is checked before it sizes a read. */
			if (!sd_link_hdr_ok(link, h))
				goto bad;
			continue;
		}
		link->rxlen = 0;
		/* Nothing of a message is believed before its tag. */
		if (!sd_rdv_check(&link->auth, link->rxbuf, want)) {
			sd_stat_inc(sd_rdv_net(link->sn),
				    SD_STAT_RDV_AUTH_FAILED);
			goto bad;
		}
		if (!sd_link_handle(link))
			goto bad;
	}
bad:
	net_dbg_ratelimited("af_sd: bad message on a link, connection reset\n");
	sd_link_end(link, true);
}

/* Hook the socket's callbacks.  Under send_lock. */
static void sd_link_tie(struct sd_link *link)
{
	struct sock *sk = link->sock->sk;

	sock_set_keepalive(sk);
	tcp_sock_set_keepidle(sk, SD_LINK_KEEPIDLE);
	tcp_sock_set_keepintvl(sk, SD_LINK_KEEPINTVL);
	tcp_sock_set_keepcnt(sk, SD_LINK_KEEPCNT);
	tcp_sock_set_user_timeout(sk, SD_LINK_USER_TIMEOUT);

	write_lock_bh(&sk->sk_callback_lock);
	link->saved_data_ready = sk->sk_data_ready;
	link->saved_state_change = sk->sk_state_change;
	link->saved_error_report = sk->sk_error_report;
	sk->sk_user_data = link;
	sk->sk_data_ready = sd_link_event;
	sk->sk_state_change = sd_link_event;
	sk->sk_error_report = sd_link_event;
	write_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Give the socket TCP's callbacks back and wait for rx_work.  Under
 * send_lock.  rx_work takes neither send_lock nor a socket lock.
 */
static void sd_link_untie(struct sd_link *link)
{
	struct sock *sk = link->sock->sk;

	if (!link->started)
		return;
	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_user_data = NULL;
	sk->sk_data_ready = link->saved_data_ready;
	sk->sk_state_change = link->saved_state_change;
	sk->sk_error_report = link->saved_error_report;
	write_unlock_bh(&sk->sk_callback_lock);
	cancel_work_sync(&link->rx_work);
}

/**
 * sd_link_attach - the link now stands for the remote end of @conn
 * @link: the link
 * @conn: the connection, not yet published
 * @side: the index of the local end in conn->end[]
 * @half: the peer's half when it came with the request (accepting side)
 *
 * @conn takes its own reference.  Nothing is read from the link until
 * sd_link_go().
 */
void sd_link_attach(struct sd_link *link, struct sd_conn *conn, u8 side,
		    const struct sd_rdma_half *half)
{
	refcount_inc(&link->ref);
	conn->link = link;
	spin_lock(&link->lock);
	link->conn = conn;
	link->side = side;
	/* The connecting side's half went with the request. */
	link->have_local = side == 0;
	if (half) {
		link->peer = *half;
		link->have_peer = true;
	}
	spin_unlock(&link->lock);
}

/* Undo sd_link_attach() of a connection that was never published. */
void sd_link_detach(struct sd_link *link, struct sd_conn *conn)
{
	spin_lock(&link->lock);
	link->conn = NULL;
	spin_unlock(&link->lock);
	conn->link = NULL;
	sd_link_put(link);
}

/* Start reading the link.  The caller holds send_lock. */
void sd_link_go(struct sd_link *link)
{
	sd_link_tie(link);
	link->started = true;
	/* What came before the callbacks were there. */
	queue_work(sd_rdv_wq, &link->rx_work);
}

/*
 * Send CLOSE(@how) unless the link ended already, without waiting: 16
 * bytes on an idle socket; if they do not fit, the peer sees a reset
 * anyway.  Under send_lock.
 */
static void sd_link_send_close(struct sd_link *link, u8 how)
{
	struct sd_rdv_close msg = {};
	struct kvec iov = { .iov_base = &msg, .iov_len = sizeof(msg) };
	struct msghdr mh = { .msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL };

	if (!link->sock || READ_ONCE(link->ended))
		return;
	sd_rdv_hdr_init(&msg.hdr, SD_RDV_CLOSE, sizeof(msg));
	msg.how = how;
	if (sd_rdv_seal(&link->auth, &msg, sizeof(msg)))
		return;		/* the peer sees the link go instead */
	kernel_sendmsg(link->sock, &mh, &iov, 1, sizeof(msg));
}

static void sd_link_release(struct sd_link *link, u8 how)
{
	/* No LEFT from now on; rx_work queues none once no_left is set. */
	spin_lock(&link->lock);
	link->no_left = true;
	spin_unlock(&link->lock);
	cancel_work_sync(&link->left_work);
	mutex_lock(&link->send_lock);
	if (!link->sock)
		goto out;
	sd_link_untie(link);
	if (how == SD_RDV_CLOSE_RESET) {
		/*
		 * A reset is TCP's: whatever is queued (a CLOSE that an outage
		 * held back) goes, and once this socket is gone the peer's
		 * next keepalive probe is answered with a reset too.
		 */
		sock_no_linger(link->sock->sk);
	} else if (how) {
		sd_link_send_close(link, how);
	}
	sock_release(link->sock);
	link->sock = NULL;
out:
	mutex_unlock(&link->send_lock);
	spin_lock(&link->lock);
	link->ended = true;
	link->conn = NULL;
	spin_unlock(&link->lock);
	wake_up_all(&link->wait);
}

void sd_link_put(struct sd_link *link)
{
	if (!refcount_dec_and_test(&link->ref))
		return;
	sd_link_release(link, 0);
	sd_rdv_auth_free(&link->auth);
	if (link->ev)
		eventfd_ctx_put(link->ev);
	mutex_destroy(&link->send_lock);
	kfree(link);
}

/**
 * sd_link_close - the local end of the connection is closing
 * @link: the connection's link
 * @clean: everything this end sent reached the peer's ring
 *
 * Tells the peer's monitor (CLOSE), then closes the link.  Called with the
 * local end's socket locked, or by the release of the bridge's descriptor
 * (no lock held) once the socket went.
 */
void sd_link_close(struct sd_link *link, bool clean)
{
	sd_link_release(link, clean ? SD_RDV_CLOSE_CLEAN : SD_RDV_CLOSE_RESET);
}

/* The bridge gave up (SD_RDMA_OP_RESET): reset both ends. */
void sd_link_fail(struct sd_link *link)
{
	mutex_lock(&link->send_lock);
	sd_link_send_close(link, SD_RDV_CLOSE_RESET);
	mutex_unlock(&link->send_lock);
	sd_link_end(link, true);
}

/* SD_RDMA_LOCAL on an accepted connection: send our half, once. */
int sd_link_set_local(struct sd_link *link, const struct sd_rdma_half *half)
{
	struct sd_rdv_half msg = {};
	int err;

	mutex_lock(&link->send_lock);
	spin_lock(&link->lock);
	if (link->have_local)
		err = -EALREADY;
	else if (link->ended || !link->sock)
		err = -ECONNRESET;
	else
		err = 0;
	spin_unlock(&link->lock);
	if (err)
		goto out;
	sd_rdv_hdr_init(&msg.hdr, SD_RDV_HALF, sizeof(msg));
	msg.half = *half;
	err = sd_rdv_send(&link->auth, link->sock, &msg, sizeof(msg),
			  jiffies + sd_rdv_timeo(link->sn));
	if (err) {
		mutex_unlock(&link->send_lock);
		sd_link_end(link, true);
		return err == -ERESTARTSYS ? err : -ECONNRESET;
	}
	spin_lock(&link->lock);
	link->have_local = true;
	spin_unlock(&link->lock);
out:
	mutex_unlock(&link->send_lock);
	return err;
}

/* Send one message on the link, bounded by the rendezvous timeout. */
static int sd_link_send_locked(struct sd_link *link, void *msg, size_t len)
{
	lockdep_assert_held(&link->send_lock);
	if (READ_ONCE(link->ended) || !link->sock)
		return -ECONNRESET;
	return sd_rdv_send(&link->auth, link->sock, msg, len,
			   jiffies + sd_rdv_timeo(link->sn));
}

/*
 * After sd_link_send_locked(), without send_lock: a send that failed
 * may have left part of a message on the link, which ends it.
 */
static int sd_link_sent(struct sd_link *link, int err)
{
	if (err && err != -ECONNRESET) {
		sd_link_end(link, true);
		if (err != -ERESTARTSYS)
			err = -ECONNRESET;
	}
	return err;
}

static int sd_link_send(struct sd_link *link, void *msg, size_t len)
{
	int err;

	mutex_lock(&link->send_lock);
	err = sd_link_send_locked(link, msg, len);
	mutex_unlock(&link->send_lock);
	return sd_link_sent(link, err);
}

/*
 * SD_IOC_RDMA_LEAVE: tell the peer's monitor where our bridge stopped,
 * and wait for its LEFT, at most the rendezvous timeout (then the
 * connection is reset).  -EAGAIN, with nothing sent, while the peer's
 * bridge is moving (SD_RING_MOVED is up), or when our LEAVE crossed the
 * peer's and the peer's goes on (sd_link_handle_leave()): either way our
 * bridge follows that move and leaves after.  So one bridge moves at a
 * time, and the other end's bridge, still there, sends again what the
 * one that left had not taken.
 */
int sd_link_leave(struct sd_link *link, const struct sd_rdma_move *at)
{
	struct sd_rdv_leave msg = {
		.sent = cpu_to_be64(at->sent),
		.took = cpu_to_be64(at->took),
		.copied = cpu_to_be64(at->copied),
		.flags = htonl(at->flags),
		.kept = htonl(at->kept),
	};
	long left = 0;
	int err = 0;

	sd_rdv_hdr_init(&msg.hdr, SD_RDV_LEAVE, sizeof(msg));
	/*
	 * send_lock from the look at the peer's move to our LEAVE on the
	 * wire.  A LEAVE of the peer's that comes meanwhile finds ours
	 * waiting (crossed), and on the accepting side its LEFT goes from
	 * left_work, which takes send_lock too: after our LEAVE.  Sent
	 * first, that LEFT would end the peer's monitor's wait, which would
	 * then take our LEAVE, refused here, as a move of ours.
	 */
	mutex_lock(&link->send_lock);
	spin_lock(&link->lock);
	if (link->ended)
		err = -ECONNRESET;
	else if (link->peer_moving)
		err = -EAGAIN;
	else if (link->leave_waits)
		err = -EALREADY;
	if (!err) {
		link->leave_waits = true;
		link->leave_err = 0;
	}
	spin_unlock(&link->lock);
	if (err) {
		mutex_unlock(&link->send_lock);
		return err;
	}
	err = sd_link_send_locked(link, &msg, sizeof(msg));
	mutex_unlock(&link->send_lock);
	err = sd_link_sent(link, err);
	if (!err)
		left = wait_event_killable_timeout(link->wait,
						   !READ_ONCE(link->leave_waits) ||
						   READ_ONCE(link->ended),
						   sd_rdv_timeo(link->sn));
	spin_lock(&link->lock);
	if (!link->leave_waits)
		err = link->leave_err;
	else if (!err)
		err = link->ended ? -ECONNRESET : left < 0 ? -EINTR : -ETIMEDOUT;
	link->leave_waits = false;
	spin_unlock(&link->lock);
	/* Nobody knows where the peer's monitor stands now: a reset. */
	if (err == -EINTR || err == -ETIMEDOUT) {
		sd_link_fail(link);
		err = -ECONNRESET;
	}
	return err;
}

/* SD_IOC_RDMA_MOVE: the new bridge's half, to the peer's monitor. */
int sd_link_move(struct sd_link *link, const struct sd_rdma_half *half)
{
	struct sd_rdv_half msg = { .half = *half };

	sd_rdv_hdr_init(&msg.hdr, SD_RDV_MOVE, sizeof(msg));
	return sd_link_send(link, &msg, sizeof(msg));
}

/*
 * SD_IOC_RDMA_MOVED: where the peer's bridge stopped, and its successor's
 * half once it came, which ends the move.
 */
int sd_link_moved(struct sd_link *link, struct sd_rdma_moved *out)
{
	int err = 0;

	memset(out, 0, sizeof(*out));
	spin_lock(&link->lock);
	if (!link->peer_moving) {
		err = link->ended ? -ECONNRESET : -ENOENT;
	} else {
		out->at = link->moved_at;
		if (link->have_moved_half) {
			out->half = link->moved_half;
			out->flags = SD_RDMA_MOVED_HALF;
			/* The peer's half now, for a bridge of ours to come. */
			link->peer = link->moved_half;
			link->peer_moving = false;
			link->have_moved_half = false;
			if (link->conn)
				sd_ring_clear_flags(&link->conn->ring[link->side],
						    SD_RING_HDR_CONS,
						    SD_RING_MOVED);
		}
	}
	spin_unlock(&link->lock);
	return err;
}

/* SD_RDMA_PEER: the peer's half, waiting up to @timeo for it. */
int sd_link_get_peer(struct sd_link *link, struct sd_rdma_half *half,
		     long timeo)
{
	long left = timeo;
	int err;

	if (timeo)
		left = wait_event_interruptible_timeout(link->wait,
							READ_ONCE(link->have_peer) ||
							READ_ONCE(link->ended),
							timeo);
	spin_lock(&link->lock);
	if (link->have_peer) {
		*half = link->peer;
		err = 0;
	} else if (link->ended) {
		err = -ECONNRESET;
	} else {
		err = left < 0 ? (int)left : -EAGAIN;
	}
	spin_unlock(&link->lock);
	return err;
}

/* SD_RDMA_EVENTFD: the bridge's eventfd, -1 for none. */
int sd_link_set_eventfd(struct sd_link *link, int fd)
{
	struct eventfd_ctx *ev = NULL, *old;

	if (fd >= 0) {
		ev = eventfd_ctx_fdget(fd);
		if (IS_ERR(ev))
			return PTR_ERR(ev);
	} else if (fd != -1) {
		return -EBADF;
	}
	spin_lock(&link->lock);
	old = link->ev;
	link->ev = ev;
	spin_unlock(&link->lock);
	if (old)
		eventfd_ctx_put(old);
	return 0;
}

/**
 * sd_link_dial - connect to the monitor of another host, for RDMA
 * @net: the connecting socket's netns
 * @dst: where the socket connects to
 * @local: this host's address on the way there
 * @reason: the fallback reason when there is no link
 *
 * Returns a link to the monitor at @dst's host, NULL when the connection
 * is to be TCP (*@reason), or an ERR_PTR.  Called with the connecting
 * socket locked; waits up to net.sd.rendezvous_timeout_ms.
 */
struct sd_link *sd_link_dial(struct net *net, const struct sd_addr *dst,
			     struct in6_addr *local, u8 *reason)
{
	struct sd_net *sn = sd_net(net);
	unsigned long deadline = jiffies + sd_rdv_timeo(sn);
	struct sockaddr_storage ss = {};
	struct sd_rdv_auth auth = {};
	struct sd_link *link;
	struct socket *sock;
	u32 flags = 0;
	int verdict, err;

	if (!READ_ONCE(sn->rdv_port)) {
		*reason = SD_FALLBACK_REMOTE;
		return NULL;
	}
	/* Never unauthenticated: no key, no rendezvous. */
	if (!sd_key_present(sn)) {
		*reason = SD_FALLBACK_AUTH;
		return NULL;
	}
	verdict = sd_peer_lookup(sn, &dst->addr, &flags);
	if (verdict >= 0 && verdict != SD_PEER_SD) {
		sd_stat_inc(net, SD_STAT_RDV_CACHED);
		*reason = sd_peer_reason(verdict, flags);
		return NULL;
	}
	err = sd_rdv_dial(sn, &dst->addr, deadline, &sock);
	if (err == -EHOSTDOWN) {
		sd_peer_learn(sn, &dst->addr, SD_PEER_NO_SD, 0);
		*reason = SD_FALLBACK_PEER_NO_SD;
		return NULL;
	}
	if (err) {
		*reason = SD_FALLBACK_HANDSHAKE;
		return NULL;
	}
	err = sd_rdv_hello_client(sn, sock, &auth, deadline);
	if (err) {
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		verdict = sd_rdv_failed_verdict(err, false);
		if (verdict >= 0)
			sd_peer_learn(sn, &dst->addr, verdict, 0);
		*reason = verdict == SD_PEER_AUTH ? SD_FALLBACK_AUTH :
						    SD_FALLBACK_HANDSHAKE;
		sock_release(sock);
		return NULL;
	}
	err = kernel_getsockname(sock, (struct sockaddr *)&ss);
	if (err < 0)
		goto out_release;
	sd_rdv_sockaddr(&ss, local);
	err = -ENOMEM;
	link = sd_link_alloc(sn, sock, &auth);
	if (!link)
		goto out_release;
	link->deadline = deadline;
	return link;

out_release:
	sd_rdv_auth_free(&auth);
	sock_release(sock);
	return ERR_PTR(err);
}

/**
 * sd_link_request - ask for an RDMA connection over a dialled link
 * @link: from sd_link_dial()
 * @conn: the connection, when it is accepted
 * @dst: where the socket connects to
 * @sport: its own port
 * @uid: the connecting task's, for the other host's connect rules
 * @gid: likewise
 * @half: its half of the queue pair
 * @reason: the fallback reason when the answer is TCP
 *
 * Returns 0 when the other monitor queued the connection at its listener
 * (@conn then holds the link, which carries the rest), 1 for TCP with
 * *@reason, or -ECONNREFUSED when an accept rule there refused it.
 */
int sd_link_request(struct sd_link *link, struct sd_conn *conn,
		    const struct sd_addr *dst, __be16 sport, kuid_t uid,
		    kgid_t gid, const struct sd_rdma_half *half, u8 *reason)
{
	struct sd_net *sn = link->sn;
	struct net *net = sd_rdv_net(sn);
	struct sd_rdv_rdma_request req = {};
	struct sd_rdv_reply rep;
	int err, verdict;

	sd_rdv_hdr_init(&req.hdr, SD_RDV_RDMA_REQUEST, sizeof(req));
	req.flags = htonl(SD_RDV_F_RDMA);
	req.dport = dst->port;
	req.sport = sport;
	req.uid = htonl(from_kuid_munged(net->user_ns, uid));
	req.gid = htonl(from_kgid_munged(net->user_ns, gid));
	req.half = *half;
	/* Alone on the link until sd_link_go(): no send_lock yet. */
	err = sd_rdv_send(&link->auth, link->sock, &req, sizeof(req),
			  link->deadline);
	if (!err)
		err = sd_rdv_io(link->sock, &rep, sizeof(rep), false,
				link->deadline);
	if (!err)
		err = sd_rdv_reply_check(net, &link->auth, &rep);
	if (err) {
		/* A signal: nothing learnt; the TCP connect sees it. */
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		verdict = sd_rdv_failed_verdict(err, true);
		if (verdict >= 0)
			sd_peer_learn(sn, &dst->addr, verdict, 0);
		*reason = verdict == SD_PEER_AUTH ? SD_FALLBACK_AUTH :
						    SD_FALLBACK_HANDSHAKE;
		return 1;
	}
	sd_peer_learn(sn, &dst->addr, SD_PEER_SD, ntohl(rep.flags));
	switch (rep.status) {
	case SD_RDV_ACCEPTED:
		sd_link_attach(link, conn, 0, NULL);
		mutex_lock(&link->send_lock);
		sd_link_go(link);
		mutex_unlock(&link->send_lock);
		return 0;
	case SD_RDV_REFUSED:
		return -ECONNREFUSED;
	case SD_RDV_NO_LISTENER:
		*reason = SD_FALLBACK_NO_LISTENER;
		return 1;
	case SD_RDV_BUSY:
		*reason = SD_FALLBACK_BUSY;
		return 1;
	default:
		*reason = SD_FALLBACK_NO_RDMA;
		return 1;
	}
}

/* ---- answering (the listening side) --------------------------------- */

/* The status an RDMA request gets for what sd_conn_remote_child() said. */
static u8 sd_rdv_status(int err)
{
	switch (err) {
	case 0:
		return SD_RDV_ACCEPTED;
	case -ENOENT:
		return SD_RDV_NO_LISTENER;
	case -ECONNREFUSED:
		return SD_RDV_REFUSED;
	case -EAGAIN:
		return SD_RDV_BUSY;
	default:
		/* No offer at the listener, no memory: TCP. */
		return SD_RDV_NO_RDMA;
	}
}

/*
 * A client with its half asks for an RDMA connection: queue it at the
 * listener, and keep the TCP connection as its link.
 */
static void sd_rdv_answer_rdma(struct sd_rdv_job *job,
			       const struct sd_rdv_rdma_request *req,
			       struct sd_rdv_auth *auth, unsigned long deadline)
{
	struct sd_net *sn = job->sn;
	struct net *net = sd_rdv_net(sn);
	struct sockaddr_storage ss = {};
	struct sd_rdv_reply rep = {};
	struct sd_addr srv, cli;
	struct sd_link *link;
	kuid_t uid;
	kgid_t gid;
	int err;

	if (ntohl(req->flags) != SD_RDV_F_RDMA)
		goto failed;
	/* The connecting task, as the other monitor vouches for it. */
	uid = make_kuid(net->user_ns, ntohl(req->uid));
	gid = make_kgid(net->user_ns, ntohl(req->gid));
	if (!uid_valid(uid) || !gid_valid(gid))
		goto failed;
	/* The address the client dialled, and the client's. */
	if (kernel_getsockname(job->sock, (struct sockaddr *)&ss) < 0)
		goto failed;
	sd_rdv_sockaddr(&ss, &srv.addr);
	if (kernel_getpeername(job->sock, (struct sockaddr *)&ss) < 0)
		goto failed;
	sd_rdv_sockaddr(&ss, &cli.addr);
	srv.port = req->dport;
	cli.port = req->sport;

	link = sd_link_alloc(sn, job->sock, auth);
	if (!link)
		goto failed;
	job->sock = NULL;	/* the link's now */

	/*
	 * Under send_lock until the reply is out: the accepting side may
	 * set its half the moment the connection is queued, and that must
	 * follow the reply on the wire.
	 */
	mutex_lock(&link->send_lock);
	err = sd_conn_remote_child(net, &srv, &cli, uid, gid, link,
				   &req->half);
	sd_rdv_hdr_init(&rep.hdr, SD_RDV_REPLY, sizeof(rep));
	rep.status = sd_rdv_status(err);
	rep.flags = htonl(SD_RDV_F_RDMA);
	err = sd_rdv_send(&link->auth, link->sock, &rep, sizeof(rep),
			  deadline);
	mutex_unlock(&link->send_lock);
	if (err && rep.status == SD_RDV_ACCEPTED)
		/* Queued, but the client never heard: it is reset. */
		sd_link_end(link, true);
	sd_stat_inc(net, err ? SD_STAT_RDV_FAILED : SD_STAT_RDV_ANSWERED);
	sd_link_put(link);
	return;

failed:
	sd_stat_inc(net, SD_STAT_RDV_FAILED);
}

/*
 * The answering side's HELLOs: ours goes at once, with no key flag when
 * this namespace has no key (the other monitor then falls back to TCP,
 * reason auth, and this one stops after its HELLO), then the connecting
 * monitor's is read and the session keyed.  Returns 0 or -errno.
 */
static int sd_rdv_hello_server(struct sd_rdv_job *job, struct sd_rdv_auth *a,
			       unsigned long deadline)
{
	struct sd_rdv_hello mine = {}, theirs;
	bool keyed = sd_key_present(job->sn);
	int err;

	sd_rdv_hdr_init(&mine.hdr, SD_RDV_HELLO, sizeof(mine));
	mine.flags = htonl(keyed ? SD_RDV_HELLO_KEYED : 0);
	get_random_bytes(mine.nonce, sizeof(mine.nonce));
	err = sd_rdv_io(job->sock, &mine, sizeof(mine), true, deadline);
	if (!err)
		err = sd_rdv_io(job->sock, &theirs, sizeof(theirs), false,
				deadline);
	if (err)
		return err;
	/* A connecting monitor has a key, or it would not have come. */
	if (!sd_rdv_hello_ok(&theirs) ||
	    !(ntohl(theirs.flags) & SD_RDV_HELLO_KEYED))
		return -EBADMSG;
	/* Its HELLO read, so that our close is no reset that loses ours. */
	if (!keyed)
		return -ENOKEY;
	return sd_rdv_auth_init(a, job->sn, false, theirs.nonce, mine.nonce);
}

static void sd_rdv_answer_work(struct work_struct *work)
{
	struct sd_rdv_job *job = container_of(work, struct sd_rdv_job, work);
	struct sd_net *sn = job->sn;
	struct net *net = sd_rdv_net(sn);
	unsigned long deadline = jiffies + sd_rdv_timeo(sn);
	union {
		struct sd_rdv_hdr hdr;
		struct sd_rdv_request req;
		struct sd_rdv_rdma_request rdma;
	} *m;
	struct sd_rdv_auth auth = {};
	struct sd_rdv_reply rep = {};
	size_t len;
	int err;

	m = kmalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		goto out;
	err = sd_rdv_hello_server(job, &auth, deadline);
	if (err)
		goto failed;
	/* The header says which request it is; its length must match. */
	err = sd_rdv_io(job->sock, &m->hdr, sizeof(m->hdr), false, deadline);
	if (err)
		goto failed;
	if (m->hdr.type == SD_RDV_REQUEST)
		len = sizeof(m->req);
	else if (m->hdr.type == SD_RDV_RDMA_REQUEST)
		len = sizeof(m->rdma);
	else
		goto failed;
	if (!sd_rdv_hdr_ok(&m->hdr, m->hdr.type, len))
		goto failed;
	err = sd_rdv_io(job->sock, (u8 *)m + sizeof(m->hdr),
			len - sizeof(m->hdr), false, deadline);
	if (err)
		goto failed;
	/*
	 * Nothing of a request is believed before its tag: one that fails
	 * gets no answer at all, whatever it asked.
	 */
	if (!sd_rdv_check(&auth, m, len)) {
		sd_stat_inc(net, SD_STAT_RDV_AUTH_FAILED);
		goto out;
	}
	if (m->hdr.type == SD_RDV_RDMA_REQUEST) {
		sd_rdv_answer_rdma(job, &m->rdma, &auth, deadline);
		goto out;
	}
	if (m->req.reserved || ntohl(m->req.flags) & ~SD_RDV_F_RDMA)
		goto failed;
	/* A client that offers no RDMA gets TCP, whatever the listener. */
	sd_rdv_hdr_init(&rep.hdr, SD_RDV_REPLY, sizeof(rep));
	rep.status = SD_RDV_NO_RDMA;
	rep.flags = htonl(SD_RDV_F_RDMA);
	err = sd_rdv_send(&auth, job->sock, &rep, sizeof(rep), deadline);
	sd_stat_inc(net, err ? SD_STAT_RDV_FAILED : SD_STAT_RDV_ANSWERED);
	goto out;

failed:
	/* Not one of us, or broken: no answer. */
	sd_stat_inc(net, SD_STAT_RDV_FAILED);
out:
	sd_rdv_auth_free(&auth);
	kfree(m);
	sd_rdv_job_done(job);
}

/*
 * The listener's sk_data_ready: connections to accept.  A connection the
 * listener made inherits it (and sk_user_data) until sd_rdv_accept_work()
 * gives it TCP's back; meanwhile it must still wake a reader.
 */
static void sd_rdv_listen_ready(struct sock *lsk)
{
	void (*ready)(struct sock *sk) = NULL;
	struct sd_net *sn;

	read_lock_bh(&lsk->sk_callback_lock);
	sn = lsk->sk_user_data;
	if (sn && lsk->sk_state == TCP_LISTEN)
		queue_work(sd_rdv_wq, &sn->rdv_accept_work);
	else if (sn)
		ready = sn->rdv_data_ready;
	read_unlock_bh(&lsk->sk_callback_lock);
	if (ready)
		ready(lsk);
}

/* Give an accepted connection TCP's own callback and no user data. */
static void sd_rdv_untie(struct sd_net *sn, struct socket *sock)
{
	write_lock_bh(&sock->sk->sk_callback_lock);
	sock->sk->sk_user_data = NULL;
	sock->sk->sk_data_ready = sn->rdv_data_ready;
	write_unlock_bh(&sock->sk->sk_callback_lock);
}

static void sd_rdv_accept_work(struct work_struct *work)
{
	struct sd_net *sn = container_of(work, struct sd_net, rdv_accept_work);
	struct sd_rdv_job *job;
	struct socket *newsock;

	mutex_lock(&sn->rdv_lock);
	while (sn->rdv_sock) {
		if (kernel_accept(sn->rdv_sock, &newsock, O_NONBLOCK))
			break;
		sd_rdv_untie(sn, newsock);
		job = kzalloc(sizeof(*job), GFP_KERNEL);
		if (!job) {
			sock_release(newsock);
			continue;
		}
		INIT_WORK(&job->work, sd_rdv_answer_work);
		job->sn = sn;
		job->sock = newsock;
		if (!sd_rdv_job_add(sn, job)) {
			/* Too many at once: this one gets a close. */
			sd_stat_inc(sd_rdv_net(sn), SD_STAT_RDV_FAILED);
			sock_release(newsock);
			kfree(job);
			continue;
		}
		queue_work(sd_rdv_wq, &job->work);
	}
	mutex_unlock(&sn->rdv_lock);
}

static int sd_rdv_listen(struct sd_net *sn, int port, struct socket **res)
{
	struct net *net = sd_rdv_net(sn);
	struct sockaddr_in6 sin6 = {
		.sin6_family = AF_INET6,
		.sin6_port = htons(port),
		.sin6_addr = IN6ADDR_ANY_INIT,
	};
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_ANY),
	};
	struct socket *sock;
	int err;

	/* IPv6 takes IPv4 too; a netns without IPv6 gets IPv4 only. */
	err = sock_create_kern(net, AF_INET6, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (!err) {
		sock_set_reuseaddr(sock->sk);
		sock->sk->sk_ipv6only = false;
		err = kernel_bind(sock, (struct sockaddr *)&sin6, sizeof(sin6));
		if (err == -EADDRNOTAVAIL || err == -EAFNOSUPPORT) {
			sock_release(sock);
			sock = NULL;
		} else if (err) {
			goto out_release;
		}
	} else {
		sock = NULL;
	}
	if (!sock) {
		err = sock_create_kern(net, AF_INET, SOCK_STREAM, IPPROTO_TCP,
				       &sock);
		if (err)
			return err;
		sock_set_reuseaddr(sock->sk);
		err = kernel_bind(sock, (struct sockaddr *)&sin, sizeof(sin));
		if (err)
			goto out_release;
	}
	err = kernel_listen(sock, SD_RDV_JOBS_MAX);
	if (err)
		goto out_release;

	write_lock_bh(&sock->sk->sk_callback_lock);
	sock->sk->sk_user_data = sn;
	sn->rdv_data_ready = sock->sk->sk_data_ready;
	sock->sk->sk_data_ready = sd_rdv_listen_ready;
	write_unlock_bh(&sock->sk->sk_callback_lock);
	*res = sock;
	return 0;

out_release:
	sock_release(sock);
	return err;
}

/* Stop and release a listener.  Under rdv_lock. */
static void sd_rdv_unlisten(struct sd_net *sn, struct socket *sock)
{
	sd_rdv_untie(sn, sock);
	sock_release(sock);
}

/*
 * Whether @port may be the rendezvous port of @net: 0 (off), or one that
 * only root can bind there (below net.ipv4.ip_unprivileged_port_start),
 * so that no user can answer other hosts' monitors in place of this one
 * while it is off, nor take the port before it starts.
 */
static bool sd_rdv_port_ok(struct net *net, int port)
{
	return !port || inet_port_requires_bind_service(net, port);
}

/**
 * sd_remote_set_port - (re)start or stop the rendezvous listener
 * @sn: the netns's state
 * @port: the new net.sd.rendezvous_port, 0 to stop
 *
 * The new listener starts before the old one goes, so a port that cannot
 * be had leaves everything as it was (and the sysctl write fails).  A port
 * any user could bind is refused (-EINVAL, with a line in the kernel log
 * that says why).
 */
int sd_remote_set_port(struct sd_net *sn, int port)
{
	struct net *net = sd_rdv_net(sn);
	struct socket *old, *fresh = NULL;
	int err = 0;

	if (port < 0 || port > 65535)
		return -EINVAL;
	if (!sd_rdv_port_ok(net, port)) {
		pr_warn_ratelimited("af_sd: net.sd.rendezvous_port %d refused: any user may bind it (net.ipv4.ip_unprivileged_port_start is %d); use a port below\n",
				    port,
				    READ_ONCE(net->ipv4.sysctl_ip_prot_sock));
		return -EINVAL;
	}
	mutex_lock(&sn->rdv_lock);
	if (port == sn->rdv_port)
		goto out;
	if (port) {
		err = sd_rdv_listen(sn, port, &fresh);
		if (err)
			goto out;
	}
	old = sn->rdv_sock;
	sn->rdv_sock = fresh;
	WRITE_ONCE(sn->rdv_port, port);
	if (old)
		sd_rdv_unlisten(sn, old);
	/* What was learnt on the old port may not hold on the new one. */
	sd_peers_flush(sn);
out:
	mutex_unlock(&sn->rdv_lock);
	return err;
}

void sd_remote_net_init(struct net *net, struct sd_net *sn)
{
	write_pnet(&sn->net, net);
	mutex_init(&sn->rdv_lock);
	INIT_WORK(&sn->rdv_accept_work, sd_rdv_accept_work);
	spin_lock_init(&sn->peers_lock);
	INIT_LIST_HEAD(&sn->peers);
	INIT_LIST_HEAD(&sn->rdv_jobs);
	sn->rdv_timeout_ms = 1000;
	sn->peer_cache_secs = 60;
}

/*
 * The netns goes: stop listening and wait for the exchanges in flight,
 * each bounded by net.sd.rendezvous_timeout_ms.  Runs before TCP's own
 * netns exit (this module registered after it), so their sockets work.
 */
void sd_remote_net_exit(struct sd_net *sn)
{
	sd_remote_set_port(sn, 0);
	cancel_work_sync(&sn->rdv_accept_work);
	spin_lock(&sn->peers_lock);
	sn->rdv_dying = true;
	spin_unlock(&sn->peers_lock);
	flush_workqueue(sd_rdv_wq);
	sd_peers_flush(sn);
}

/* Queue @work where the rendezvous jobs run (sd_connect_work()). */
void sd_remote_queue(struct work_struct *work)
{
	queue_work(sd_rdv_wq, work);
}

int sd_remote_init(void)
{
	/* Jobs may sleep up to the timeout: unbound, never the system's. */
	sd_rdv_wq = alloc_workqueue("sd_rdv", WQ_UNBOUND, 0);
	return sd_rdv_wq ? 0 : -ENOMEM;
}

void sd_remote_exit(void)
{
	destroy_workqueue(sd_rdv_wq);
}
