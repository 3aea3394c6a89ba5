// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD generic netlink family "sd": dumps of sockets, listeners and rules,
 * rule changes, counters.  The commands and attributes are drawn in
 * include/uapi/linux/sd.h; Documentation/netlink.rst explains them.
 *
 * Every command has a policy of its own and is validated strictly, so an
 * attribute a command does not take is rejected.  Rule changes and the
 * fabric key's commands need CAP_NET_ADMIN in the user namespace owning
 * the caller's netns (GENL_UNS_ADMIN_PERM).
 */
#include <linux/cred.h>
#include <linux/pid.h>
#include <linux/rculist.h>
#include <net/genetlink.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <net/tcp_states.h>

#include "af_sd.h"

static struct genl_family sd_genl_family;

static const struct nla_policy sd_addr_policy[SD_A_ADDR_MAX + 1] = {
	[SD_A_ADDR_IN6]		= NLA_POLICY_EXACT_LEN(sizeof(struct in6_addr)),
	[SD_A_ADDR_PREFIX]	= NLA_POLICY_MAX(NLA_U8, 128),
	[SD_A_ADDR_PORT_MIN]	= { .type = NLA_U16 },
	[SD_A_ADDR_PORT_MAX]	= { .type = NLA_U16 },
};

static const struct nla_policy sd_rule_add_policy[SD_A_MAX + 1] = {
	[SD_A_RULE_POSITION]	= { .type = NLA_U32 },
	[SD_A_RULE_ACTION]	= NLA_POLICY_RANGE(NLA_U8, SD_ACTION_ALLOW,
						   SD_ACTION_TCP),
	[SD_A_RULE_DIR]		= NLA_POLICY_MASK(NLA_U8, SD_DIR_ALL),
	[SD_A_RULE_UID_MIN]	= { .type = NLA_U32 },
	[SD_A_RULE_UID_MAX]	= { .type = NLA_U32 },
	[SD_A_RULE_GID_MIN]	= { .type = NLA_U32 },
	[SD_A_RULE_GID_MAX]	= { .type = NLA_U32 },
	[SD_A_RULE_LOCAL]	= NLA_POLICY_NESTED(sd_addr_policy),
	[SD_A_RULE_REMOTE]	= NLA_POLICY_NESTED(sd_addr_policy),
	[SD_A_RULE_COMMENT]	= { .type = NLA_NUL_STRING,
				    .len = SD_RULE_COMMENT_MAX - 1 },
};

static const struct nla_policy sd_rule_del_policy[SD_A_MAX + 1] = {
	[SD_A_RULE_ID]		= { .type = NLA_U32 },
};

/* The key's length is the policy's to check: 32 to 64 bytes. */
static const struct nla_policy sd_key_set_policy[SD_A_MAX + 1] = {
	[SD_A_KEY]		= NLA_POLICY_RANGE(NLA_BINARY, SD_KEY_MIN_LEN,
						   SD_KEY_MAX_LEN),
};

/* Commands that take no attributes at all. */
static const struct nla_policy sd_none_policy[SD_A_MAX + 1] = {};

static void *sd_genl_put(struct sk_buff *skb, struct netlink_callback *cb,
			 u8 cmd)
{
	return genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
			   cb->nlh->nlmsg_seq, &sd_genl_family, NLM_F_MULTI,
			   cmd);
}

static int sd_put_addr(struct sk_buff *skb, int type, const struct sd_addr *a)
{
	struct nlattr *nest = nla_nest_start(skb, type);

	if (!nest ||
	    nla_put_in6_addr(skb, SD_A_ADDR_IN6, &a->addr) ||
	    nla_put_u16(skb, SD_A_ADDR_PORT, ntohs(a->port)))
		return -EMSGSIZE;
	nla_nest_end(skb, nest);
	return 0;
}

/*
 * May the dump's caller see who owns @sk (its uid and process)?  Its own
 * sockets, yes; others' only with CAP_NET_ADMIN in the namespace: more
 * than sock_diag shows would let any user watch which process serves
 * what, around hidepid (Documentation/security.rst).  The verdict on the
 * capability is taken once per dump, in cb->args[2] (1 no, 2 yes).
 */
static bool sd_owner_visible(struct netlink_callback *cb, struct sock *sk)
{
	if (uid_eq(NETLINK_CB(cb->skb).creds.uid, sk->sk_uid))
		return true;
	if (!cb->args[2])
		cb->args[2] = netlink_net_capable(cb->skb, CAP_NET_ADMIN) ? 2 : 1;
	return cb->args[2] == 2;
}

static int sd_put_owner(struct sk_buff *skb, struct netlink_callback *cb,
			struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	if (nla_put_u64_64bit(skb, SD_A_SOCK_INODE, sock_i_ino(sk),
			      SD_A_PAD) ||
	    nla_put_u16(skb, SD_A_SOCK_FAMILY, ss->family))
		return -EMSGSIZE;
	if (!sd_owner_visible(cb, sk))
		return 0;
	return nla_put_u32(skb, SD_A_SOCK_UID,
			   from_kuid_munged(current_user_ns(), sk->sk_uid)) ||
	       nla_put_u32(skb, SD_A_SOCK_PID, ss->owner ?
			   pid_vnr(ss->owner) : 0);
}

/* Bytes in use of a ring as the kernel last saw it (for display). */
static u32 sd_ring_fill(const struct sd_ring *ring, bool tx)
{
	u64 used;

	if (tx)
		used = READ_ONCE(ring->tail) - READ_ONCE(ring->credit);
	else
		used = READ_ONCE(ring->tail) - READ_ONCE(ring->head);
	return min_t(u64, used, ring->size);
}

/* Called with bind_lock held: the socket stays hashed, its conn alive. */
static int sd_fill_sock(struct sk_buff *skb, struct netlink_callback *cb,
			struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_conn *conn = READ_ONCE(ss->conn);
	/* A hashed socket's TCP socket is released only after unhashing. */
	struct socket *tcp = sd_tcp_sock(sk);
	u64 tx_bytes = READ_ONCE(ss->tx_bytes), rx_bytes = READ_ONCE(ss->rx_bytes);
	u64 tx_msgs = READ_ONCE(ss->tx_msgs), rx_msgs = READ_ONCE(ss->rx_msgs);
	u8 state = READ_ONCE(sk->sk_state);
	u8 transport = !conn ? SD_TRANSPORT_NONE :
		       conn->link_id ? SD_TRANSPORT_RDMA : SD_TRANSPORT_SHM;
	void *hdr;

	if (tcp) {
		const struct tcp_sock *tp = tcp_sk(tcp->sk);

		/* TCP's own counters: what it acknowledged and received. */
		transport = SD_TRANSPORT_TCP;
		state = READ_ONCE(tcp->sk->sk_state);
		tx_bytes = READ_ONCE(tp->bytes_acked);
		rx_bytes = READ_ONCE(tp->bytes_received);
		tx_msgs = READ_ONCE(tp->data_segs_out);
		rx_msgs = READ_ONCE(tp->data_segs_in);
	}
	hdr = sd_genl_put(skb, cb, SD_CMD_SOCK_GET);
	if (!hdr)
		return -EMSGSIZE;
	if (sd_put_owner(skb, cb, sk) ||
	    nla_put_u8(skb, SD_A_SOCK_STATE, state) ||
	    sd_put_addr(skb, SD_A_SOCK_LOCAL, &ss->local) ||
	    nla_put_u8(skb, SD_A_SOCK_TRANSPORT, transport) ||
	    nla_put_u64_64bit(skb, SD_A_SOCK_TX_BYTES, tx_bytes, SD_A_PAD) ||
	    nla_put_u64_64bit(skb, SD_A_SOCK_RX_BYTES, rx_bytes, SD_A_PAD) ||
	    nla_put_u64_64bit(skb, SD_A_SOCK_TX_MSGS, tx_msgs, SD_A_PAD) ||
	    nla_put_u64_64bit(skb, SD_A_SOCK_RX_MSGS, rx_msgs, SD_A_PAD))
		goto cancel;
	if (tcp && (nla_put_u8(skb, SD_A_SOCK_FALLBACK, ss->fallback) ||
		    sd_put_addr(skb, SD_A_SOCK_PEER, &ss->peer)))
		goto cancel;
	if (conn) {
		const struct sd_ring *tx = &conn->ring[ss->side];
		const struct sd_ring *rx = &conn->ring[!ss->side];

		if (sd_put_addr(skb, SD_A_SOCK_PEER, &ss->peer) ||
		    nla_put_u32(skb, SD_A_SOCK_TX_FILL, sd_ring_fill(tx, true)) ||
		    nla_put_u32(skb, SD_A_SOCK_RX_FILL, sd_ring_fill(rx, false)) ||
		    nla_put_u32(skb, SD_A_SOCK_TX_SIZE, tx->size) ||
		    nla_put_u32(skb, SD_A_SOCK_RX_SIZE, rx->size) ||
		    nla_put_u32(skb, SD_A_SOCK_TX_PAGES,
				sd_ring_pages_present(tx)) ||
		    nla_put_u32(skb, SD_A_SOCK_RX_PAGES,
				sd_ring_pages_present(rx)))
			goto cancel;
	}
	genlmsg_end(skb, hdr);
	return 0;

cancel:
	genlmsg_cancel(skb, hdr);
	return -EMSGSIZE;
}

/* Sockets by bind-table bucket; args[0] bucket, args[1] done in it. */
static int sd_sock_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct sd_net *sn = sd_net(sock_net(skb->sk));
	unsigned long b = cb->args[0], done = cb->args[1];

	for (; b < ARRAY_SIZE(sn->bind_table); b++, done = 0) {
		struct sd_sock *ss;
		unsigned long i = 0;

		spin_lock(&sn->bind_lock);
		hlist_for_each_entry(ss, &sn->bind_table[b], bind_node) {
			if (i++ < done)
				continue;
			if (sd_fill_sock(skb, cb, &ss->sk)) {
				spin_unlock(&sn->bind_lock);
				cb->args[0] = b;
				cb->args[1] = i - 1;
				return skb->len;
			}
		}
		spin_unlock(&sn->bind_lock);
	}
	cb->args[0] = b;
	cb->args[1] = 0;
	return skb->len;
}

static int sd_fill_listener(struct sk_buff *skb, struct netlink_callback *cb,
			    struct sock *sk, unsigned int members)
{
	void *hdr = sd_genl_put(skb, cb, SD_CMD_LISTENER_GET);

	if (!hdr)
		return -EMSGSIZE;
	if (sd_put_owner(skb, cb, sk) ||
	    sd_put_addr(skb, SD_A_SOCK_LOCAL, &sd_sk(sk)->local) ||
	    nla_put_u32(skb, SD_A_LISTEN_BACKLOG,
			READ_ONCE(sk->sk_max_ack_backlog)) ||
	    nla_put_u32(skb, SD_A_LISTEN_QUEUED,
			READ_ONCE(sk->sk_ack_backlog)) ||
	    nla_put_u32(skb, SD_A_LISTEN_GROUP, members)) {
		genlmsg_cancel(skb, hdr);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

/* Listeners by group bucket; args[0] bucket, args[1] done in it. */
static int sd_listener_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct sd_net *sn = sd_net(sock_net(skb->sk));
	unsigned long b = cb->args[0], done = cb->args[1];

	for (; b < ARRAY_SIZE(sn->listen_table); b++, done = 0) {
		unsigned long i = 0;
		struct sd_group *g;
		int err = 0;

		spin_lock(&sn->bind_lock);
		hlist_for_each_entry(g, &sn->listen_table[b], node) {
			struct sd_sock *m;

			spin_lock(&g->lock);
			list_for_each_entry(m, &g->members, group_node) {
				if (i++ < done)
					continue;
				err = sd_fill_listener(skb, cb, &m->sk,
						       g->nr_members);
				if (err)
					break;
			}
			spin_unlock(&g->lock);
			if (err)
				break;
		}
		spin_unlock(&sn->bind_lock);
		if (err) {
			cb->args[0] = b;
			cb->args[1] = i - 1;
			return skb->len;
		}
	}
	cb->args[0] = b;
	cb->args[1] = 0;
	return skb->len;
}

static int sd_put_match(struct sk_buff *skb, int type,
			const struct sd_rule_match *m)
{
	struct nlattr *nest;

	if (!m->has_addr && !m->has_port)
		return 0;
	nest = nla_nest_start(skb, type);
	if (!nest)
		return -EMSGSIZE;
	if (m->has_addr &&
	    (nla_put_in6_addr(skb, SD_A_ADDR_IN6, &m->addr) ||
	     nla_put_u8(skb, SD_A_ADDR_PREFIX, m->prefix)))
		return -EMSGSIZE;
	if (m->has_port &&
	    (nla_put_u16(skb, SD_A_ADDR_PORT_MIN, m->port_min) ||
	     nla_put_u16(skb, SD_A_ADDR_PORT_MAX, m->port_max)))
		return -EMSGSIZE;
	nla_nest_end(skb, nest);
	return 0;
}

static int sd_fill_rule(struct sk_buff *skb, const struct sd_rule *r)
{
	struct user_namespace *ns = current_user_ns();

	if (nla_put_u32(skb, SD_A_RULE_ID, r->id) ||
	    nla_put_u8(skb, SD_A_RULE_ACTION, r->action) ||
	    nla_put_u8(skb, SD_A_RULE_DIR, r->dir) ||
	    nla_put_u64_64bit(skb, SD_A_RULE_HITS, atomic64_read(&r->hits),
			      SD_A_PAD))
		return -EMSGSIZE;
	if (r->has_uid &&
	    (nla_put_u32(skb, SD_A_RULE_UID_MIN, from_kuid_munged(ns, r->uid_min)) ||
	     nla_put_u32(skb, SD_A_RULE_UID_MAX, from_kuid_munged(ns, r->uid_max))))
		return -EMSGSIZE;
	if (r->has_gid &&
	    (nla_put_u32(skb, SD_A_RULE_GID_MIN, from_kgid_munged(ns, r->gid_min)) ||
	     nla_put_u32(skb, SD_A_RULE_GID_MAX, from_kgid_munged(ns, r->gid_max))))
		return -EMSGSIZE;
	if (sd_put_match(skb, SD_A_RULE_LOCAL, &r->local) ||
	    sd_put_match(skb, SD_A_RULE_REMOTE, &r->remote))
		return -EMSGSIZE;
	if (r->comment[0] && nla_put_string(skb, SD_A_RULE_COMMENT, r->comment))
		return -EMSGSIZE;
	return 0;
}

/* Rules in order; args[0] is how many were sent. */
static int sd_rule_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct sd_net *sn = sd_net(sock_net(skb->sk));
	unsigned long i = 0;
	struct sd_rule *r;

	rcu_read_lock();
	list_for_each_entry_rcu(r, &sn->rules, node) {
		void *hdr;

		if (i++ < cb->args[0])
			continue;
		hdr = sd_genl_put(skb, cb, SD_CMD_RULE_GET);
		if (!hdr)
			goto full;
		if (sd_fill_rule(skb, r)) {
			genlmsg_cancel(skb, hdr);
			goto full;
		}
		genlmsg_end(skb, hdr);
		cb->args[0] = i;
	}
full:
	rcu_read_unlock();
	return skb->len;
}

static int sd_parse_match(struct nlattr *nest, struct sd_rule_match *m,
			  struct netlink_ext_ack *extack)
{
	struct nlattr *tb[SD_A_ADDR_MAX + 1];
	int err;

	if (!nest)
		return 0;
	err = nla_parse_nested(tb, SD_A_ADDR_MAX, nest, sd_addr_policy,
			       extack);
	if (err)
		return err;
	if (tb[SD_A_ADDR_PORT]) {
		NL_SET_ERR_MSG_ATTR(extack, tb[SD_A_ADDR_PORT],
				    "a rule matches port ranges: use PORT_MIN/MAX");
		return -EINVAL;
	}
	if (tb[SD_A_ADDR_PREFIX] && !tb[SD_A_ADDR_IN6]) {
		NL_SET_ERR_MSG_ATTR(extack, tb[SD_A_ADDR_PREFIX],
				    "prefix without an address");
		return -EINVAL;
	}
	if (tb[SD_A_ADDR_IN6]) {
		struct in6_addr full = nla_get_in6_addr(tb[SD_A_ADDR_IN6]);

		m->has_addr = true;
		m->prefix = tb[SD_A_ADDR_PREFIX] ?
			    nla_get_u8(tb[SD_A_ADDR_PREFIX]) : 128;
		/*
		 * Keep it canonical: no bits past the prefix.  (Not in
		 * place: ipv6_addr_prefix() clears its destination first.)
		 */
		ipv6_addr_prefix(&m->addr, &full, m->prefix);
	}
	if (tb[SD_A_ADDR_PORT_MIN] || tb[SD_A_ADDR_PORT_MAX]) {
		m->has_port = true;
		m->port_min = tb[SD_A_ADDR_PORT_MIN] ?
			      nla_get_u16(tb[SD_A_ADDR_PORT_MIN]) : 0;
		m->port_max = tb[SD_A_ADDR_PORT_MAX] ?
			      nla_get_u16(tb[SD_A_ADDR_PORT_MAX]) : 65535;
		if (m->port_min > m->port_max) {
			NL_SET_ERR_MSG(extack, "port range min > max");
			return -EINVAL;
		}
	}
	return 0;
}

/* A uid or gid range in the caller's user namespace. */
static int sd_parse_ids(struct genl_info *info, int amin, int amax,
			u32 *lo, u32 *hi, bool *has)
{
	struct nlattr **a = info->attrs;

	if (!a[amin] && !a[amax])
		return 0;
	*has = true;
	*lo = a[amin] ? nla_get_u32(a[amin]) : 0;
	*hi = a[amax] ? nla_get_u32(a[amax]) : (u32)-2;
	if (*lo > *hi) {
		NL_SET_ERR_MSG(info->extack, "id range min > max");
		return -EINVAL;
	}
	return 0;
}

static int sd_rule_add(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	struct user_namespace *ns = current_user_ns();
	struct nlattr **a = info->attrs;
	u32 lo = 0, hi = 0, pos = U32_MAX;
	struct sk_buff *reply;
	struct sd_rule *rule;
	void *hdr;
	int err;

	if (GENL_REQ_ATTR_CHECK(info, SD_A_RULE_ACTION) ||
	    GENL_REQ_ATTR_CHECK(info, SD_A_RULE_DIR))
		return -EINVAL;
	if (!nla_get_u8(a[SD_A_RULE_DIR])) {
		NL_SET_ERR_MSG_ATTR(info->extack, a[SD_A_RULE_DIR],
				    "a rule needs at least one direction");
		return -EINVAL;
	}
	if (nla_get_u8(a[SD_A_RULE_ACTION]) == SD_ACTION_TCP &&
	    nla_get_u8(a[SD_A_RULE_DIR]) != SD_DIR_CONNECT) {
		NL_SET_ERR_MSG_ATTR(info->extack, a[SD_A_RULE_DIR],
				    "action tcp is for connect rules only");
		return -EINVAL;
	}

	rule = kzalloc(sizeof(*rule), GFP_KERNEL_ACCOUNT);
	if (!rule)
		return -ENOMEM;
	rule->action = nla_get_u8(a[SD_A_RULE_ACTION]);
	rule->dir = nla_get_u8(a[SD_A_RULE_DIR]);

	err = sd_parse_ids(info, SD_A_RULE_UID_MIN, SD_A_RULE_UID_MAX, &lo, &hi,
			   &rule->has_uid);
	if (err)
		goto err_free;
	rule->uid_min = make_kuid(ns, lo);
	rule->uid_max = make_kuid(ns, hi);
	err = sd_parse_ids(info, SD_A_RULE_GID_MIN, SD_A_RULE_GID_MAX, &lo, &hi,
			   &rule->has_gid);
	if (err)
		goto err_free;
	rule->gid_min = make_kgid(ns, lo);
	rule->gid_max = make_kgid(ns, hi);
	err = -EINVAL;
	if ((rule->has_uid && (!uid_valid(rule->uid_min) ||
			       !uid_valid(rule->uid_max))) ||
	    (rule->has_gid && (!gid_valid(rule->gid_min) ||
			       !gid_valid(rule->gid_max)))) {
		NL_SET_ERR_MSG(info->extack, "id not mapped in this namespace");
		goto err_free;
	}

	err = sd_parse_match(a[SD_A_RULE_LOCAL], &rule->local, info->extack);
	if (err)
		goto err_free;
	err = sd_parse_match(a[SD_A_RULE_REMOTE], &rule->remote, info->extack);
	if (err)
		goto err_free;
	if (a[SD_A_RULE_COMMENT])
		nla_strscpy(rule->comment, a[SD_A_RULE_COMMENT],
			    sizeof(rule->comment));
	if (a[SD_A_RULE_POSITION])
		pos = nla_get_u32(a[SD_A_RULE_POSITION]);

	reply = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	err = -ENOMEM;
	if (!reply)
		goto err_free;

	mutex_lock(&sn->rules_lock);
	err = sd_rule_insert(sn, rule, pos);
	if (err)
		NL_SET_ERR_MSG(info->extack, "too many rules");
	else
		lo = rule->id;
	mutex_unlock(&sn->rules_lock);
	if (err)
		goto err_reply;

	hdr = genlmsg_put_reply(reply, info, &sd_genl_family, 0,
				SD_CMD_RULE_ADD);
	if (!hdr || nla_put_u32(reply, SD_A_RULE_ID, lo)) {
		nlmsg_free(reply);
		return -EMSGSIZE;
	}
	genlmsg_end(reply, hdr);
	return genlmsg_reply(reply, info);

err_reply:
	nlmsg_free(reply);
err_free:
	kfree(rule);
	return err;
}

static int sd_rule_del(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	int err;

	if (GENL_REQ_ATTR_CHECK(info, SD_A_RULE_ID))
		return -EINVAL;
	mutex_lock(&sn->rules_lock);
	err = sd_rule_delete(sn, nla_get_u32(info->attrs[SD_A_RULE_ID]));
	mutex_unlock(&sn->rules_lock);
	if (err)
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[SD_A_RULE_ID],
				    "no rule with this id");
	return err;
}

static int sd_rule_flush(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));

	mutex_lock(&sn->rules_lock);
	sd_rules_flush(sn);
	mutex_unlock(&sn->rules_lock);
	return 0;
}

/*
 * Answer a do command with one message carrying its command number, whose
 * attributes @fill puts (0, or -EMSGSIZE when they do not fit).
 */
static int sd_reply(struct genl_info *info,
		    int (*fill)(struct sk_buff *reply, struct genl_info *info))
{
	struct sk_buff *reply;
	void *hdr;
	int err;

	reply = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!reply)
		return -ENOMEM;
	err = -EMSGSIZE;
	hdr = genlmsg_put_reply(reply, info, &sd_genl_family, 0,
				info->genlhdr->cmd);
	if (!hdr)
		goto err;
	err = fill(reply, info);
	if (err)
		goto err;
	genlmsg_end(reply, hdr);
	return genlmsg_reply(reply, info);

err:
	nlmsg_free(reply);
	return err;
}

/* Counters <linux/sd.h> retired: never sent. */
static bool sd_stat_retired(int i)
{
	switch (i) {
	case __SD_STAT_RETIRED_26 ... __SD_STAT_RETIRED_29:
	case __SD_STAT_RETIRED_31 ... __SD_STAT_RETIRED_35:
	case __SD_STAT_RETIRED_38:
		return true;
	}
	return false;
}

static int sd_stats_fill(struct sk_buff *reply, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));
	struct nlattr *nest;
	int i;

	nest = nla_nest_start(reply, SD_A_STATS);
	if (!nest)
		return -EMSGSIZE;
	/* Type 0 (SD_STAT_UNSPEC) pads the 64-bit values. */
	for (i = SD_STAT_UNSPEC + 1; i <= SD_STAT_MAX; i++)
		if (!sd_stat_retired(i) &&
		    nla_put_u64_64bit(reply, i, atomic64_read(&sn->stats[i]),
				      SD_STAT_UNSPEC))
			return -EMSGSIZE;
	nla_nest_end(reply, nest);
	return 0;
}

static int sd_stats_get(struct sk_buff *skb, struct genl_info *info)
{
	return sd_reply(info, sd_stats_fill);
}

static int sd_key_set_cmd(struct sk_buff *skb, struct genl_info *info)
{
	struct sd_net *sn = sd_net(genl_info_net(info));

	if (GENL_REQ_ATTR_CHECK(info, SD_A_KEY))
		return -EINVAL;
	return sd_key_set(sn, nla_data(info->attrs[SD_A_KEY]),
			  nla_len(info->attrs[SD_A_KEY]));
}

static int sd_key_del_cmd(struct sk_buff *skb, struct genl_info *info)
{
	int err = sd_key_del(sd_net(genl_info_net(info)));

	if (err)
		NL_SET_ERR_MSG(info->extack, "no key is set");
	return err;
}

/* The fingerprint only: the key itself never leaves the kernel. */
static int sd_key_fpr_fill(struct sk_buff *reply, struct genl_info *info)
{
	u8 fpr[SD_KEY_FPR_LEN];

	if (sd_key_get_fpr(sd_net(genl_info_net(info)), fpr) &&
	    nla_put(reply, SD_A_KEY_FPR, sizeof(fpr), fpr))
		return -EMSGSIZE;
	return 0;
}

static int sd_key_get_cmd(struct sk_buff *skb, struct genl_info *info)
{
	return sd_reply(info, sd_key_fpr_fill);
}

/* Every feature this module has; none depends on a setting. */
#define SD_FEATURES (BIT_ULL(SD_FEATURE_REDIRECT) |			\
		     BIT_ULL(SD_FEATURE_ZEROCOPY) |			\
		     BIT_ULL(SD_FEATURE_TCP_INQ) |			\
		     BIT_ULL(SD_FEATURE_LINK_DAEMON))

static int sd_features_fill(struct sk_buff *reply, struct genl_info *info)
{
	BUILD_BUG_ON(__SD_FEATURE_MAX > 64);
	if (nla_put_string(reply, SD_A_MODULE_VERSION, SD_MODULE_VERSION) ||
	    nla_put_u64_64bit(reply, SD_A_FEATURES, SD_FEATURES, SD_A_PAD))
		return -EMSGSIZE;
	return 0;
}

static int sd_features_get(struct sk_buff *skb, struct genl_info *info)
{
	return sd_reply(info, sd_features_fill);
}

static const struct genl_ops sd_genl_ops[] = {
	{
		.cmd	= SD_CMD_SOCK_GET,
		.dumpit	= sd_sock_dump,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
	},
	{
		.cmd	= SD_CMD_LISTENER_GET,
		.dumpit	= sd_listener_dump,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
	},
	{
		.cmd	= SD_CMD_RULE_GET,
		.dumpit	= sd_rule_dump,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
	},
	{
		.cmd	= SD_CMD_RULE_ADD,
		.doit	= sd_rule_add,
		.policy	= sd_rule_add_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_CMD_RULE_DEL,
		.doit	= sd_rule_del,
		.policy	= sd_rule_del_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_CMD_RULE_FLUSH,
		.doit	= sd_rule_flush,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_CMD_STATS_GET,
		.doit	= sd_stats_get,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
	},
	{
		.cmd	= SD_CMD_KEY_SET,
		.doit	= sd_key_set_cmd,
		.policy	= sd_key_set_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_CMD_KEY_DEL,
		.doit	= sd_key_del_cmd,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		/* Even a fingerprint is the admin's. */
		.cmd	= SD_CMD_KEY_GET,
		.doit	= sd_key_get_cmd,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
		.flags	= GENL_UNS_ADMIN_PERM,
	},
	{
		.cmd	= SD_CMD_FEATURES_GET,
		.doit	= sd_features_get,
		.policy	= sd_none_policy,
		.maxattr = SD_A_MAX,
	},
};

static struct genl_family sd_genl_family __ro_after_init = {
	.name		= SD_GENL_NAME,
	.version	= SD_GENL_VERSION,
	.maxattr	= SD_A_MAX,
	.netnsok	= true,
	.module		= THIS_MODULE,
	.ops		= sd_genl_ops,
	.n_ops		= ARRAY_SIZE(sd_genl_ops),
};

int __init sd_netlink_init(void)
{
	return genl_register_family(&sd_genl_family);
}

void sd_netlink_exit(void)
{
	genl_unregister_family(&sd_genl_family);
}
