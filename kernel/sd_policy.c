// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD access control: an ordered list of rules per network namespace,
 * first match wins, else net.sd.default_policy.
 *
 * Readers (every bind, listen, connect and dispatch) walk the list under
 * rcu_read_lock(); writers (netlink, CAP_NET_ADMIN) hold sd_net.rules_lock
 * and free removed rules after a grace period.
 */
#include <linux/cred.h>
#include <linux/rculist.h>
#include <linux/slab.h>
#include <net/ipv6.h>

#include "af_sd.h"

static bool sd_match_addr(const struct sd_rule_match *m,
			  const struct sd_addr *a)
{
	u16 port;

	if (!a)
		return !m->has_addr && !m->has_port;
	if (m->has_addr && !ipv6_prefix_equal(&m->addr, &a->addr, m->prefix))
		return false;
	port = ntohs(a->port);
	return !m->has_port || (port >= m->port_min && port <= m->port_max);
}

static bool sd_rule_match(const struct sd_rule *r, unsigned int dir,
			  kuid_t uid, kgid_t gid, const struct sd_addr *local,
			  const struct sd_addr *remote)
{
	if (!(r->dir & dir))
		return false;
	if (r->has_uid && (uid_lt(uid, r->uid_min) || uid_gt(uid, r->uid_max)))
		return false;
	if (r->has_gid && (gid_lt(gid, r->gid_min) || gid_gt(gid, r->gid_max)))
		return false;
	return sd_match_addr(&r->local, local) &&
	       sd_match_addr(&r->remote, remote);
}

/*
 * What may the subject (uid, gid) do for @dir between @local and @remote
 * (NULL for bind)?  SD_ACTION_ALLOW, _DENY or (connect rules only) _TCP.
 * Counts the hit on the rule that decided.
 */
int sd_policy_verdict(struct net *net, unsigned int dir, kuid_t uid,
		      kgid_t gid, const struct sd_addr *local,
		      const struct sd_addr *remote)
{
	struct sd_net *sn = sd_net(net);
	struct sd_rule *r;
	int action;

	rcu_read_lock();
	list_for_each_entry_rcu(r, &sn->rules, node) {
		if (sd_rule_match(r, dir, uid, gid, local, remote)) {
			atomic64_inc(&r->hits);
			action = r->action;
			rcu_read_unlock();
			return action;
		}
	}
	rcu_read_unlock();
	return READ_ONCE(sn->default_policy);
}

/* As sd_policy_verdict(), for the directions that know only yes or no. */
bool sd_policy_allows(struct net *net, unsigned int dir, kuid_t uid,
		      kgid_t gid, const struct sd_addr *local,
		      const struct sd_addr *remote)
{
	return sd_policy_verdict(net, dir, uid, gid, local, remote) ==
	       SD_ACTION_ALLOW;
}

/* Insert @rule at @pos (or at the end); takes the id.  rules_lock held. */
int sd_rule_insert(struct sd_net *sn, struct sd_rule *rule, u32 pos)
{
	struct list_head *where = &sn->rules;
	struct sd_rule *r;
	u32 i = 0;

	lockdep_assert_held(&sn->rules_lock);
	if (sn->nr_rules >= SD_RULES_MAX)
		return -ENOSPC;

	list_for_each_entry(r, &sn->rules, node) {
		if (i++ == pos) {
			where = &r->node;
			break;
		}
	}
	/* A fresh id: after the counter wraps, skip ids still in use. */
	do {
		rule->id = ++sn->rule_seq;
		list_for_each_entry(r, &sn->rules, node)
			if (r->id == rule->id || !rule->id) {
				rule->id = 0;
				break;
			}
	} while (!rule->id);
	/* Before @where, i.e. at index @pos; the list head means the end. */
	list_add_tail_rcu(&rule->node, where);
	sn->nr_rules++;
	return 0;
}

int sd_rule_delete(struct sd_net *sn, u32 id)
{
	struct sd_rule *r;

	lockdep_assert_held(&sn->rules_lock);
	list_for_each_entry(r, &sn->rules, node) {
		if (r->id == id) {
			list_del_rcu(&r->node);
			sn->nr_rules--;
			kfree_rcu(r, rcu);
			return 0;
		}
	}
	return -ENOENT;
}

void sd_rules_flush(struct sd_net *sn)
{
	struct sd_rule *r, *tmp;

	lockdep_assert_held(&sn->rules_lock);
	list_for_each_entry_safe(r, tmp, &sn->rules, node) {
		list_del_rcu(&r->node);
		kfree_rcu(r, rcu);
	}
	sn->nr_rules = 0;
}

/* The subject of a socket's own action: the calling task. */
void sd_current_ids(kuid_t *uid, kgid_t *gid)
{
	*uid = current_fsuid();
	*gid = current_fsgid();
}
