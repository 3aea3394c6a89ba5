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
 * The RDMA transport itself is not built yet: this monitor offers no
 * RDMA, so every connection to another host ends as TCP, with the reason.
 *
 * Locks: sn->rdv_lock (mutex) serialises the listener's start, stop and
 * accept loop.  sn->peers_lock (spinlock) covers the peer cache and the
 * job list.  A job never runs under either; the listener's data_ready
 * callback reads sk_user_data under sk_callback_lock.
 */
#include <linux/inet.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/jiffies.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <net/ipv6.h>
#include <net/sock.h>

#include "af_sd.h"

/* The wire format, network byte order (Documentation/rdma.rst). */
#define SD_RDV_MAGIC	0x53445256	/* "SDRV" */
#define SD_RDV_VERSION	1

enum {
	SD_RDV_REQUEST = 1,
	SD_RDV_REPLY = 2,
};

/* Reply status. */
enum {
	SD_RDV_NO_RDMA = 1,	/* this monitor offers no RDMA */
	__SD_RDV_STATUS_MAX,
};

/* Capability flags, of the sender of the message. */
#define SD_RDV_F_RDMA	BIT(0)

struct sd_rdv_hdr {
	__be32	magic;
	u8	version;
	u8	type;
	__be16	len;		/* of the whole message */
} __packed;

struct sd_rdv_request {
	struct sd_rdv_hdr hdr;
	__be32	flags;		/* SD_RDV_F_* of the asking side */
	__be16	dport;		/* the port the client connects to */
	__be16	reserved;	/* zero */
} __packed;

struct sd_rdv_reply {
	struct sd_rdv_hdr hdr;
	u8	status;		/* SD_RDV_* */
	u8	reserved[3];	/* zero */
	__be32	flags;		/* SD_RDV_F_* of the answering side */
} __packed;

/* What is known about another host. */
enum {
	SD_PEER_NO_SD,		/* no monitor answered */
	SD_PEER_BROKEN,		/* its port does not speak the protocol */
	SD_PEER_SD,		/* a monitor; flags say what it offers */
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

/* Whole-message I/O on a kernel TCP socket, bounded by @deadline. */
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
	return ret == len ? 0 : -EPROTO;
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

/* The fallback reason a verdict stands for. */
static u8 sd_peer_reason(int verdict, u32 flags)
{
	switch (verdict) {
	case SD_PEER_NO_SD:
		return SD_FALLBACK_PEER_NO_SD;
	case SD_PEER_BROKEN:
		return SD_FALLBACK_HANDSHAKE;
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
 * Ask the monitor at @addr (port net.sd.rendezvous_port), within
 * net.sd.rendezvous_timeout_ms in all.  Returns the SD_PEER_* verdict, or
 * -errno when nothing should be learnt (a signal, no memory).
 */
static int sd_rdv_exchange(struct sd_net *sn, const struct in6_addr *addr,
			   u16 dport, u32 *flags)
{
	struct net *net = sd_rdv_net(sn);
	unsigned long deadline = jiffies + sd_rdv_timeo(sn);
	int port = READ_ONCE(sn->rdv_port);
	struct sd_rdv_request req = {};
	struct sd_rdv_reply rep;
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
		break;
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ETIMEDOUT:
	case -EINPROGRESS:	/* the timeout ran out */
	case -EHOSTUNREACH:
	case -ENETUNREACH:
		/* Nothing answers there: a host without AF_SD. */
		err = SD_PEER_NO_SD;
		goto out;
	default:
		/* A signal, no memory: nothing to learn. */
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		goto out;
	}

	sd_rdv_hdr_init(&req.hdr, SD_RDV_REQUEST, sizeof(req));
	req.flags = htonl(0);	/* no RDMA offered from here yet */
	req.dport = htons(dport);
	err = sd_rdv_io(sock, &req, sizeof(req), true, deadline);
	if (!err)
		err = sd_rdv_io(sock, &rep, sizeof(rep), false, deadline);
	if (err == -ERESTARTSYS || err == -EINTR) {
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		goto out;
	}
	if (err || !sd_rdv_hdr_ok(&rep.hdr, SD_RDV_REPLY, sizeof(rep)) ||
	    !rep.status || rep.status >= __SD_RDV_STATUS_MAX ||
	    rep.reserved[0] || rep.reserved[1] || rep.reserved[2]) {
		/* Something listens there, but not a monitor we understand. */
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		err = SD_PEER_BROKEN;
		goto out;
	}
	*flags = ntohl(rep.flags);
	err = SD_PEER_SD;
out:
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

/* ---- answering (the listening side) --------------------------------- */

static void sd_rdv_answer_work(struct work_struct *work)
{
	struct sd_rdv_job *job = container_of(work, struct sd_rdv_job, work);
	struct sd_net *sn = job->sn;
	struct net *net = sd_rdv_net(sn);
	unsigned long deadline = jiffies + sd_rdv_timeo(sn);
	struct sd_rdv_request req;
	struct sd_rdv_reply rep = {};
	int err;

	err = sd_rdv_io(job->sock, &req, sizeof(req), false, deadline);
	if (err || !sd_rdv_hdr_ok(&req.hdr, SD_RDV_REQUEST, sizeof(req)) ||
	    req.reserved || ntohl(req.flags) & ~SD_RDV_F_RDMA) {
		/* Not one of us, or broken: no answer. */
		sd_stat_inc(net, SD_STAT_RDV_FAILED);
		goto out;
	}
	/*
	 * Without an RDMA transport on this host the connection is TCP
	 * whatever the listener; the port is looked at once there is one.
	 */
	sd_rdv_hdr_init(&rep.hdr, SD_RDV_REPLY, sizeof(rep));
	rep.status = SD_RDV_NO_RDMA;
	rep.flags = htonl(0);
	err = sd_rdv_io(job->sock, &rep, sizeof(rep), true, deadline);
	sd_stat_inc(net, err ? SD_STAT_RDV_FAILED : SD_STAT_RDV_ANSWERED);
out:
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

/**
 * sd_remote_set_port - (re)start or stop the rendezvous listener
 * @sn: the netns's state
 * @port: the new net.sd.rendezvous_port, 0 to stop
 *
 * The new listener starts before the old one goes, so a port that cannot
 * be had leaves everything as it was (and the sysctl write fails).
 */
int sd_remote_set_port(struct sd_net *sn, int port)
{
	struct socket *old, *fresh = NULL;
	int err = 0;

	if (port < 0 || port > 65535)
		return -EINVAL;
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
