// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: the link daemon's interface (<linux/sd_link.h>).  One user-space
 * daemon per network namespace owns the connections to other hosts
 * (design.rst, decision 8).  It registers a generic netlink socket; a
 * redirected connect to another host sends it the connect (upcall) and
 * waits, bounded, for its verdict.  The daemon's socket closing ends its
 * service: waiting connects are answered at once, as if there were none.
 *
 * Locking: sd_net.link_lock (a spinlock, never held across a sleep)
 * guards link_portid, link_waits and each wait's answer.  A wait lives on
 * its connecting task's stack; it leaves the list before the task returns.
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/file.h>
#include <linux/net.h>
#include <linux/netlink.h>
#include <linux/notifier.h>
#include <net/genetlink.h>
#include <net/sock.h>
#include <net/tcp_states.h>

#include <linux/sd_link.h>

#include "af_sd.h"

struct sd_link_wait {
	struct list_head	node;		/* sd_net.link_waits */
	u64			id;
	struct completion	done;
	u8			verdict;	/* SD_LINK_*, 0: none came */
	u8			reason;
	struct sock		*via;		/* with a ref, for SD_LINK_VIA */
};

static struct genl_family sd_link_family;

static const struct nla_policy sd_link_verdict_policy[SD_LINK_A_MAX + 1] = {
	[SD_LINK_A_ID]		= { .type = NLA_U64 },
	[SD_LINK_A_VERDICT]	= NLA_POLICY_RANGE(NLA_U8, SD_LINK_TCP,
						   SD_LINK_VIA),
	[SD_LINK_A_REASON]	= NLA_POLICY_RANGE(NLA_U8,
						   SD_FALLBACK_NO_LISTENER,
						   __SD_FALLBACK_MAX - 1),
	[SD_LINK_A_FD]		= { .type = NLA_S32 },
};

static const struct nla_policy sd_link_none_policy[SD_LINK_A_MAX + 1] = {};

void sd_link_net_init(struct sd_net *sn)
{
	spin_lock_init(&sn->link_lock);
	INIT_LIST_HEAD(&sn->link_waits);
}

bool sd_link_serves(struct net *net)
{
	return READ_ONCE(sd_net(net)->link_portid) != 0;
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

/* Answer every waiting connect with no verdict.  Under link_lock. */
static void sd_link_release_waits(struct sd_net *sn)
{
	struct sd_link_wait *w;

	list_for_each_entry(w, &sn->link_waits, node)
		complete(&w->done);
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

static int sd_link_send_connect(struct net *net, u32 portid, u64 id,
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
	    nla_put_u64_64bit(skb, SD_LINK_A_ID, id, SD_LINK_A_PAD) ||
	    sd_link_put_addr(skb, SD_LINK_A_LOCAL, src) ||
	    sd_link_put_addr(skb, SD_LINK_A_REMOTE, dst) ||
	    nla_put_u32(skb, SD_LINK_A_UID, from_kuid_munged(ns, uid)) ||
	    nla_put_u32(skb, SD_LINK_A_GID, from_kgid_munged(ns, gid))) {
		nlmsg_free(skb);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return genlmsg_unicast(net, skb, portid);
}

/*
 * Tell the daemon about a connect from @src to @dst and wait up to @timeo
 * for its verdict (@timeo 0: only tell it, for it to learn).  0 with the
 * verdict in @v (SD_LINK_*, 0 when the daemon went, there was none, or
 * nothing was awaited) and @reason; for SD_LINK_VIA, *@via is its
 * listener, with a ref for the caller to drop, and *@id the connect's id.
 * -EINTR (or the restart error) on a signal, -ETIMEDOUT when the time ran
 * out.
 */
int sd_link_ask(struct net *net, const struct sd_addr *src,
		const struct sd_addr *dst, kuid_t uid, kgid_t gid, long timeo,
		u64 *id, u8 *v, u8 *reason, struct sock **via)
{
	struct sd_net *sn = sd_net(net);
	struct sd_link_wait w = {};
	long left;
	u32 portid;
	int err;

	*v = 0;
	*via = NULL;
	init_completion(&w.done);
	spin_lock(&sn->link_lock);
	portid = sn->link_portid;
	if (!portid) {
		spin_unlock(&sn->link_lock);
		return 0;
	}
	w.id = ++sn->link_next_id;
	*id = w.id;
	if (!timeo) {
		spin_unlock(&sn->link_lock);
		sd_link_send_connect(net, portid, w.id, src, dst, uid, gid);
		return 0;
	}
	list_add_tail(&w.node, &sn->link_waits);
	spin_unlock(&sn->link_lock);

	err = sd_link_send_connect(net, portid, w.id, src, dst, uid, gid);
	left = 1;
	if (!err)
		left = wait_for_completion_interruptible_timeout(&w.done,
								 timeo);

	spin_lock(&sn->link_lock);
	list_del(&w.node);
	*v = w.verdict;
	*reason = w.reason;
	*via = w.via;
	spin_unlock(&sn->link_lock);
	if (err || *v)
		return 0;	/* no daemon to hear, or its answer */
	if (left < 0)
		return left;
	return left ? 0 : -ETIMEDOUT;
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
	if (READ_ONCE(sn->link_portid) != info->snd_portid) {
		NL_SET_ERR_MSG(info->extack, "not this namespace's daemon");
		return -EPERM;
	}
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
		if (w->id != id || w->verdict)
			continue;
		w->verdict = verdict;
		w->reason = reason;
		w->via = via;
		via = NULL;
		complete(&w->done);
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

	err = netlink_register_notifier(&sd_link_notifier);
	if (err)
		return err;
	err = genl_register_family(&sd_link_family);
	if (err)
		netlink_unregister_notifier(&sd_link_notifier);
	return err;
}

void sd_link_exit(void)
{
	genl_unregister_family(&sd_link_family);
	netlink_unregister_notifier(&sd_link_notifier);
}
