// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: the link daemon's interface (<linux/sd_link.h>).  One user-space
 * daemon per network namespace owns the connections to other hosts
 * (design.rst, decision 8).  It registers a generic netlink socket; a
 * redirected connect to another host sends it the connect (upcall) and
 * waits, bounded, for its verdict.  The daemon's socket closing ends its
 * service: waiting connects are answered at once, as if there were none.
 *
 * A blocking connect waits in the call; a non-blocking one returns
 * EINPROGRESS, and its end runs as a work item when the verdict comes, the
 * daemon goes, or the time runs out, whichever is first (the wait's
 * claimed bit makes it one of them, once).
 *
 * The namespace's fabric key lives here too: its admin sets and clears it
 * (SD_CMD_KEY_SET, SD_CMD_KEY_DEL, in sd_netlink.c), sdctl sees only its
 * fingerprint (the first bytes of its SHA-256), and only the registered
 * daemon reads it (SD_LINK_CMD_KEY), to authenticate its sessions with
 * other hosts' daemons (Documentation/remote.rst).
 *
 * Locking: sd_net.link_lock (a spinlock, never held across a sleep)
 * guards link_portid, link_waits and each wait's answer; sd_net.key_lock
 * (a spinlock, nothing taken under it) the key, its length and its
 * fingerprint.  A wait lives on
 * its connecting task's stack, or in its background connect's job; it
 * leaves the list before the task returns or the job is freed.
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <crypto/hash.h>
#include <crypto/sha2.h>
#include <linux/file.h>
#include <linux/net.h>
#include <linux/netlink.h>
#include <linux/notifier.h>
#include <net/genetlink.h>
#include <net/sock.h>
#include <net/tcp_states.h>

#include <linux/sd_link.h>

#include "af_sd.h"

static struct genl_family sd_link_family;
static struct workqueue_struct *sd_link_wq;

static const struct nla_policy sd_link_verdict_policy[SD_LINK_A_MAX + 1] = {
	[SD_LINK_A_ID]		= { .type = NLA_U64 },
	[SD_LINK_A_VERDICT]	= NLA_POLICY_RANGE(NLA_U8, SD_LINK_TCP,
						   SD_LINK_VIA),
	[SD_LINK_A_REASON]	= NLA_POLICY_RANGE(NLA_U8,
						   SD_FALLBACK_NO_LISTENER,
						   __SD_FALLBACK_MAX - 1),
	[SD_LINK_A_FD]		= { .type = NLA_S32 },
};

static const struct nla_policy sd_addr_policy[SD_A_ADDR_PORT + 1] = {
	[SD_A_ADDR_IN6]		= NLA_POLICY_EXACT_LEN(sizeof(struct in6_addr)),
	[SD_A_ADDR_PORT]	= { .type = NLA_U16 },
};

static struct netlink_range_validation sd_ring_size_range __ro_after_init = {
	.min = SD_RING_MIN_SIZE,
	.max = SD_RING_MAX_SIZE,
};

static const struct nla_policy sd_link_incoming_policy[SD_LINK_A_MAX + 1] = {
	[SD_LINK_A_FD]		= { .type = NLA_S32 },
	[SD_LINK_A_LOCAL]	= NLA_POLICY_NESTED(sd_addr_policy),
	[SD_LINK_A_REMOTE]	= NLA_POLICY_NESTED(sd_addr_policy),
	[SD_LINK_A_UID]		= { .type = NLA_U32 },
	[SD_LINK_A_GID]		= { .type = NLA_U32 },
	[SD_LINK_A_TX_SIZE]	= NLA_POLICY_FULL_RANGE(NLA_U32,
							&sd_ring_size_range),
	[SD_LINK_A_RX_SIZE]	= NLA_POLICY_FULL_RANGE(NLA_U32,
							&sd_ring_size_range),
};

static const struct nla_policy sd_link_none_policy[SD_LINK_A_MAX + 1] = {};

void sd_link_net_init(struct sd_net *sn)
{
	spin_lock_init(&sn->link_lock);
	INIT_LIST_HEAD(&sn->link_waits);
	spin_lock_init(&sn->key_lock);
	sn->rdv_timeout_ms = 1000;
}

void sd_link_net_exit(struct sd_net *sn)
{
	memzero_explicit(sn->key, sizeof(sn->key));
	sn->key_len = 0;
}

/* SHA-256 of @key, shortened to the fingerprint.  May sleep. */
static int sd_key_fingerprint(const u8 *key, unsigned int len,
			      u8 fpr[SD_KEY_FPR_LEN])
{
	u8 digest[SHA256_DIGEST_SIZE];
	struct crypto_shash *tfm;
	int err;

	tfm = crypto_alloc_shash("sha256", 0, 0);
	if (IS_ERR(tfm))
		return PTR_ERR(tfm);
	err = crypto_shash_tfm_digest(tfm, key, len, digest);
	crypto_free_shash(tfm);
	if (!err)
		memcpy(fpr, digest, SD_KEY_FPR_LEN);
	memzero_explicit(digest, sizeof(digest));
	return err;
}

/**
 * sd_key_set - set the namespace's fabric key
 * @sn: the namespace's state
 * @key: the key
 * @len: its length, SD_KEY_MIN_LEN to SD_KEY_MAX_LEN (the netlink policy
 *	checked it)
 *
 * Replaces any key.  The daemon reads it again for its next session;
 * sessions it keyed before keep their keys.
 */
int sd_key_set(struct sd_net *sn, const u8 *key, unsigned int len)
{
	u8 fpr[SD_KEY_FPR_LEN];
	int err;

	if (len < SD_KEY_MIN_LEN || len > SD_KEY_MAX_LEN)
		return -EINVAL;
	err = sd_key_fingerprint(key, len, fpr);
	if (err)
		return err;
	spin_lock(&sn->key_lock);
	memzero_explicit(sn->key, sizeof(sn->key));
	memcpy(sn->key, key, len);
	sn->key_len = len;
	memcpy(sn->key_fpr, fpr, sizeof(fpr));
	spin_unlock(&sn->key_lock);
	return 0;
}

/* Forget the key: -ENOENT when there was none. */
int sd_key_del(struct sd_net *sn)
{
	int err = 0;

	spin_lock(&sn->key_lock);
	if (!sn->key_len)
		err = -ENOENT;
	memzero_explicit(sn->key, sizeof(sn->key));
	sn->key_len = 0;
	memset(sn->key_fpr, 0, sizeof(sn->key_fpr));
	spin_unlock(&sn->key_lock);
	return err;
}

/* The key's fingerprint in @fpr: false when no key is set. */
bool sd_key_get_fpr(struct sd_net *sn, u8 fpr[SD_KEY_FPR_LEN])
{
	bool set;

	spin_lock(&sn->key_lock);
	set = sn->key_len;
	memcpy(fpr, sn->key_fpr, SD_KEY_FPR_LEN);
	spin_unlock(&sn->key_lock);
	return set;
}

/*
 * Copy the key out into @buf (SD_KEY_MAX_LEN bytes): its length, 0 when
 * none is set.  The caller wipes @buf.
 */
static unsigned int sd_key_copy(struct sd_net *sn, u8 *buf)
{
	unsigned int len;

	spin_lock(&sn->key_lock);
	len = sn->key_len;
	memcpy(buf, sn->key, len);
	spin_unlock(&sn->key_lock);
	return len;
}

bool sd_link_serves(struct net *net)
{
	return READ_ONCE(sd_net(net)->link_portid) != 0;
}

/* Commands other than REGISTER come from the registered socket only. */
static int sd_link_from_daemon(struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));

	if (READ_ONCE(sn->link_portid) != info->snd_portid) {
		NL_SET_ERR_MSG(info->extack, "not this namespace's daemon");
		return -EPERM;
	}
	return 0;
}

static int sd_link_register(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	int err = 0;

	spin_lock(&sn->link_lock);
	if (sn->link_portid && sn->link_portid != info->snd_portid) {
		NL_SET_ERR_MSG(info->extack,
			       "another daemon serves this namespace");
		err = -EBUSY;
	} else {
		WRITE_ONCE(sn->link_portid, info->snd_portid);
	}
	spin_unlock(&sn->link_lock);
	return err;
}

/* The answer is in @w, or none will come: its connect goes on. */
static void sd_link_wake(struct sd_link_wait *w)
{
	if (!w->work)
		complete(&w->done);
	else if (!test_and_set_bit(0, &w->claimed))
		queue_work(sd_link_wq, w->work);
}

/* A background connect's time ran out. */
static void sd_link_expire(struct timer_list *t)
{
	struct sd_link_wait *w = from_timer(w, t, timer);

	/* Only the claimer touches expired, read after del_timer_sync(). */
	if (!test_and_set_bit(0, &w->claimed)) {
		w->expired = true;
		queue_work(sd_link_wq, w->work);
	}
}

/* Answer every waiting connect with no verdict.  Under link_lock. */
static void sd_link_release_waits(struct sd_net *sn)
{
	struct sd_link_wait *w;

	list_for_each_entry(w, &sn->link_waits, node)
		sd_link_wake(w);
}

/* A daemon's socket went: its namespace has none until one registers. */
static int sd_link_notify(struct notifier_block *nb, unsigned long state,
			  void *ptr)
{
	struct netlink_notify *n = ptr;
	struct sd_net *sn;

	if (state != NETLINK_URELEASE || n->protocol != NETLINK_GENERIC ||
	    !n->portid)
		return NOTIFY_DONE;
	sn = sd_net(n->net);
	spin_lock(&sn->link_lock);
	if (sn->link_portid == n->portid) {
		WRITE_ONCE(sn->link_portid, 0);
		sd_link_release_waits(sn);
	}
	spin_unlock(&sn->link_lock);
	return NOTIFY_DONE;
}

static struct notifier_block sd_link_notifier = {
	.notifier_call = sd_link_notify,
};

static int sd_link_put_addr(struct sk_buff *skb, int type,
			    const struct sd_addr *a)
{
	struct nlattr *nest = nla_nest_start(skb, type);

	if (!nest ||
	    nla_put(skb, SD_A_ADDR_IN6, sizeof(a->addr), &a->addr) ||
	    nla_put_u16(skb, SD_A_ADDR_PORT, ntohs(a->port)))
		return -EMSGSIZE;
	nla_nest_end(skb, nest);
	return 0;
}

static int sd_link_send_connect(struct net *net, u32 portid,
				const struct sd_link_wait *w,
				const struct sd_addr *src,
				const struct sd_addr *dst, kuid_t uid,
				kgid_t gid)
{
	struct user_namespace *ns = net->user_ns;
	struct sk_buff *skb;
	void *hdr;

	skb = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!skb)
		return -ENOMEM;
	hdr = genlmsg_put(skb, 0, 0, &sd_link_family, 0, SD_LINK_CMD_CONNECT);
	if (!hdr ||
	    nla_put_u64_64bit(skb, SD_LINK_A_ID, w->id, SD_LINK_A_PAD) ||
	    sd_link_put_addr(skb, SD_LINK_A_LOCAL, src) ||
	    sd_link_put_addr(skb, SD_LINK_A_REMOTE, dst) ||
	    nla_put_u32(skb, SD_LINK_A_UID, from_kuid_munged(ns, uid)) ||
	    nla_put_u32(skb, SD_LINK_A_GID, from_kgid_munged(ns, gid)) ||
	    nla_put_u32(skb, SD_LINK_A_TX_SIZE, w->tx_size) ||
	    nla_put_u32(skb, SD_LINK_A_RX_SIZE, w->rx_size)) {
		nlmsg_free(skb);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return genlmsg_unicast(net, skb, portid);
}

/*
 * Put @w on the list under a new id (a background one with its timer
 * armed for @timeo, in the same section, so that no verdict finds it
 * unarmed) and tell the daemon of the connect.  -ENOENT when no daemon
 * serves the namespace; an error of telling it.  A background wait whose
 * timer claimed it meanwhile is left to its work: 0.
 */
static int sd_link_send(struct net *net, const struct sd_addr *src,
			const struct sd_addr *dst, kuid_t uid, kgid_t gid,
			struct sd_link_wait *w, long timeo)
{
	struct sd_net *sn = sd_net(net);
	u32 portid;
	int err;

	spin_lock(&sn->link_lock);
	portid = sn->link_portid;
	if (!portid) {
		spin_unlock(&sn->link_lock);
		return -ENOENT;
	}
	w->id = ++sn->link_next_id;
	list_add_tail(&w->node, &sn->link_waits);
	if (w->work)
		mod_timer(&w->timer, jiffies + timeo);
	spin_unlock(&sn->link_lock);

	err = sd_link_send_connect(net, portid, w, src, dst, uid, gid);
	if (!err) {
		sd_stat_inc(net, SD_STAT_LINK_UPCALLS);
		return 0;
	}
	if (w->work) {
		if (test_and_set_bit(0, &w->claimed))
			return 0;
		del_timer_sync(&w->timer);
	}
	spin_lock(&sn->link_lock);
	list_del(&w->node);
	spin_unlock(&sn->link_lock);
	return err;
}

/*
 * Tell the daemon about a connect from @src to @dst and wait up to @timeo
 * for its verdict in @w (sd_link_wait, whose fields the caller zeroed but
 * for the ring sizes, which the daemon is told and a connection through
 * it gets).
 * 0 with the answer in @w: verdict SD_LINK_*, or 0 when the daemon went
 * (or, @timeo 0, when nothing was awaited: the daemon only hears of it)
 * or when the time ran out (expired); for SD_LINK_VIA, @w->via is its
 * listener, with a ref for the caller to drop.  -ENOENT: no daemon serves
 * the namespace; -EINTR (or the restart error) on a signal.
 */
int sd_link_ask(struct net *net, const struct sd_addr *src,
		const struct sd_addr *dst, kuid_t uid, kgid_t gid, long timeo,
		struct sd_link_wait *w)
{
	struct sd_net *sn = sd_net(net);
	long left = 1;
	int err;

	init_completion(&w->done);
	err = sd_link_send(net, src, dst, uid, gid, w, 0);
	if (err)
		return err;
	if (timeo)
		left = wait_for_completion_interruptible_timeout(&w->done,
								 timeo);
	/* A verdict that came meanwhile counts, whatever the wait says. */
	spin_lock(&sn->link_lock);
	list_del(&w->node);
	spin_unlock(&sn->link_lock);
	if (w->verdict || !timeo)
		return 0;
	if (left < 0)
		return left;
	w->expired = !left;
	return 0;
}

/**
 * sd_link_ask_async - tell the daemon of a non-blocking connect
 * @net: the connecting socket's namespace
 * @src: its address (or the wildcard)
 * @dst: the other host's
 * @uid: the connecting task's user
 * @gid: and group
 * @timeo: how long the daemon has to answer (jiffies, not 0)
 * @w: the wait, zeroed but for its ring sizes, in the connect's job
 * @work: the job's end, which runs once when the verdict comes, the daemon
 *        goes or @timeo runs out; it calls sd_link_async_end() first
 *
 * Returns 0 (@work will run), -ENOENT when no daemon serves the namespace
 * or the error of telling it (@work will not run).
 */
int sd_link_ask_async(struct net *net, const struct sd_addr *src,
		      const struct sd_addr *dst, kuid_t uid, kgid_t gid,
		      long timeo, struct sd_link_wait *w,
		      struct work_struct *work)
{
	init_completion(&w->done);
	w->work = work;
	timer_setup(&w->timer, sd_link_expire, 0);
	return sd_link_send(net, src, dst, uid, gid, w, timeo);
}

/*
 * In a background connect's work: the wait leaves the list, its timer is
 * gone, and @w holds the answer as sd_link_ask() leaves it.
 */
void sd_link_async_end(struct net *net, struct sd_link_wait *w)
{
	struct sd_net *sn = sd_net(net);

	del_timer_sync(&w->timer);
	spin_lock(&sn->link_lock);
	list_del(&w->node);
	spin_unlock(&sn->link_lock);
}

static int sd_link_verdict(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	struct sock *via = NULL;
	struct sd_link_wait *w;
	u8 verdict, reason = 0;
	int err;
	u64 id;

	if (GENL_REQ_ATTR_CHECK(info, SD_LINK_A_ID) ||
	    GENL_REQ_ATTR_CHECK(info, SD_LINK_A_VERDICT))
		return -EINVAL;
	err = sd_link_from_daemon(info);
	if (err)
		return err;
	id = nla_get_u64(info->attrs[SD_LINK_A_ID]);
	verdict = nla_get_u8(info->attrs[SD_LINK_A_VERDICT]);
	if (verdict == SD_LINK_TCP) {
		if (GENL_REQ_ATTR_CHECK(info, SD_LINK_A_REASON))
			return -EINVAL;
		reason = nla_get_u8(info->attrs[SD_LINK_A_REASON]);
	}
	if (verdict == SD_LINK_VIA) {
		struct socket *sock;

		if (GENL_REQ_ATTR_CHECK(info, SD_LINK_A_FD))
			return -EINVAL;
		sock = sockfd_lookup(nla_get_s32(info->attrs[SD_LINK_A_FD]),
				     &err);
		if (!sock)
			return err;
		err = -EINVAL;
		/* Of this namespace: connections never cross one. */
		if (sock->sk->sk_family != PF_SD ||
		    !net_eq(sock_net(sock->sk), genl_info_net(info)) ||
		    READ_ONCE(sock->sk->sk_state) != TCP_LISTEN) {
			NL_SET_ERR_MSG(info->extack,
				       "not a listening AF_SD socket of this namespace");
			sockfd_put(sock);
			return err;
		}
		via = sock->sk;
		sock_hold(via);
		sockfd_put(sock);
	}

	err = -ENOENT;
	spin_lock(&sn->link_lock);
	list_for_each_entry(w, &sn->link_waits, node) {
		/* Answered, or a background one already ending. */
		if (w->id != id || w->verdict || test_bit(0, &w->claimed))
			continue;
		w->verdict = verdict;
		w->reason = reason;
		w->via = via;
		via = NULL;
		sd_link_wake(w);
		err = 0;
		break;
	}
	spin_unlock(&sn->link_lock);
	if (via)
		sock_put(via);
	if (err)
		NL_SET_ERR_MSG(info->extack, "no such connect waits");
	return err;
}

/* A reply to @info carrying @len bytes of @data as attribute @type. */
static int sd_link_reply(struct genl_info *info, int type, const void *data,
			 int len)
{
	struct sk_buff *skb;
	void *hdr;

	skb = genlmsg_new(nla_total_size(len), GFP_KERNEL);
	if (!skb)
		return -ENOMEM;
	hdr = genlmsg_put_reply(skb, info, &sd_link_family, 0,
				info->genlhdr->cmd);
	if (!hdr || nla_put(skb, type, len, data)) {
		nlmsg_free(skb);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return genlmsg_reply(skb, info);
}

/*
 * SD_LINK_CMD_KEY: the fabric key, for the daemon's sessions with other
 * hosts' daemons.  Only the registered daemon reads it (security.rst).
 */
static int sd_link_key(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	u8 key[SD_KEY_MAX_LEN];
	unsigned int len;
	int err;

	err = sd_link_from_daemon(info);
	if (err)
		return err;
	len = sd_key_copy(sn, key);
	if (!len) {
		NL_SET_ERR_MSG(info->extack, "no fabric key is set");
		return -ENOKEY;
	}
	err = sd_link_reply(info, SD_LINK_A_KEY, key, len);
	memzero_explicit(key, sizeof(key));
	return err;
}

/* An address nest: IPv6 (IPv4 mapped) and port, both present. */
static int sd_link_get_addr(struct genl_info *info, int type,
			    struct sd_addr *a)
{
	struct nlattr *tb[SD_A_ADDR_PORT + 1];
	int err;

	err = nla_parse_nested(tb, SD_A_ADDR_PORT, info->attrs[type],
			       sd_addr_policy, info->extack);
	if (err)
		return err;
	if (!tb[SD_A_ADDR_IN6] || !tb[SD_A_ADDR_PORT]) {
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[type],
				    "an address needs SD_A_ADDR_IN6 and SD_A_ADDR_PORT");
		return -EINVAL;
	}
	memset(a, 0, sizeof(*a));
	nla_memcpy(&a->addr, tb[SD_A_ADDR_IN6], sizeof(a->addr));
	a->port = htons(nla_get_u16(tb[SD_A_ADDR_PORT]));
	return 0;
}

/*
 * SD_LINK_CMD_INCOMING: a program of another host connects to a listener
 * here, and the daemon's socket is its stand-in (sd_conn_link_incoming()).
 */
static int sd_link_incoming(struct sk_buff *skb, struct genl_info *info)
{
	struct net *net = genl_info_net(info);
	struct sd_net *sn = sd_net(net);
	struct user_namespace *ns = net->user_ns;
	u32 tx_size = 0, rx_size = 0;
	struct sd_addr srv, cli;
	struct socket *sock;
	kuid_t uid;
	kgid_t gid;
	int err;
	u64 id;

	err = sd_link_from_daemon(info);
	if (err)
		return err;
	if (GENL_REQ_ATTR_CHECK(info, SD_LINK_A_FD) ||
	    GENL_REQ_ATTR_CHECK(info, SD_LINK_A_LOCAL) ||
	    GENL_REQ_ATTR_CHECK(info, SD_LINK_A_REMOTE) ||
	    GENL_REQ_ATTR_CHECK(info, SD_LINK_A_UID) ||
	    GENL_REQ_ATTR_CHECK(info, SD_LINK_A_GID))
		return -EINVAL;
	err = sd_link_get_addr(info, SD_LINK_A_LOCAL, &srv);
	if (!err)
		err = sd_link_get_addr(info, SD_LINK_A_REMOTE, &cli);
	if (err)
		return err;
	if (!srv.port || !cli.port) {
		NL_SET_ERR_MSG(info->extack, "an address with port 0");
		return -EINVAL;
	}
	uid = make_kuid(ns, nla_get_u32(info->attrs[SD_LINK_A_UID]));
	gid = make_kgid(ns, nla_get_u32(info->attrs[SD_LINK_A_GID]));
	if (!uid_valid(uid) || !gid_valid(gid)) {
		NL_SET_ERR_MSG(info->extack,
			       "a user or group the namespace does not map");
		return -EINVAL;
	}
	if (info->attrs[SD_LINK_A_TX_SIZE])
		tx_size = nla_get_u32(info->attrs[SD_LINK_A_TX_SIZE]);
	if (info->attrs[SD_LINK_A_RX_SIZE])
		rx_size = nla_get_u32(info->attrs[SD_LINK_A_RX_SIZE]);
	if ((tx_size && !is_power_of_2(tx_size)) ||
	    (rx_size && !is_power_of_2(rx_size))) {
		NL_SET_ERR_MSG(info->extack, "a ring size not a power of two");
		return -EINVAL;
	}

	sock = sockfd_lookup(nla_get_s32(info->attrs[SD_LINK_A_FD]), &err);
	if (!sock)
		return err;
	/* Of this namespace: connections never cross one. */
	if (sock->sk->sk_family != PF_SD || sock->type != SOCK_STREAM ||
	    !net_eq(sock_net(sock->sk), net)) {
		NL_SET_ERR_MSG(info->extack,
			       "not an AF_SD stream socket of this namespace");
		err = -EINVAL;
		goto out;
	}
	spin_lock(&sn->link_lock);
	id = ++sn->link_next_id;
	spin_unlock(&sn->link_lock);
	err = sd_conn_link_incoming(sock->sk, &srv, &cli, uid, gid, tx_size,
				    rx_size, id);
	if (!err)
		err = sd_link_reply(info, SD_LINK_A_ID, &id, sizeof(id));
out:
	sockfd_put(sock);
	return err;
}

static const struct genl_ops sd_link_ops[] = {
	{
		.cmd	= SD_LINK_CMD_REGISTER,
		.doit	= sd_link_register,
		.policy	= sd_link_none_policy,
		.maxattr = SD_LINK_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_LINK_CMD_VERDICT,
		.doit	= sd_link_verdict,
		.policy	= sd_link_verdict_policy,
		.maxattr = SD_LINK_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_LINK_CMD_INCOMING,
		.doit	= sd_link_incoming,
		.policy	= sd_link_incoming_policy,
		.maxattr = SD_LINK_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_LINK_CMD_KEY,
		.doit	= sd_link_key,
		.policy	= sd_link_none_policy,
		.maxattr = SD_LINK_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
};

static struct genl_family sd_link_family __ro_after_init = {
	.name		= SD_LINK_GENL_NAME,
	.version	= SD_LINK_GENL_VERSION,
	.maxattr	= SD_LINK_A_MAX,
	.netnsok	= true,
	.module		= THIS_MODULE,
	.ops		= sd_link_ops,
	.n_ops		= ARRAY_SIZE(sd_link_ops),
};

int __init sd_link_init(void)
{
	int err;

	/* Background connects' ends: they take socket locks, and sleep. */
	sd_link_wq = alloc_workqueue("sd_link", WQ_UNBOUND, 0);
	if (!sd_link_wq)
		return -ENOMEM;
	err = netlink_register_notifier(&sd_link_notifier);
	if (err)
		goto err_wq;
	err = genl_register_family(&sd_link_family);
	if (err)
		goto err_notifier;
	return 0;

err_notifier:
	netlink_unregister_notifier(&sd_link_notifier);
err_wq:
	destroy_workqueue(sd_link_wq);
	return err;
}

void sd_link_exit(void)
{
	genl_unregister_family(&sd_link_family);
	netlink_unregister_notifier(&sd_link_notifier);
	/* Each job holds its socket's file: none is left by now. */
	destroy_workqueue(sd_link_wq);
}
