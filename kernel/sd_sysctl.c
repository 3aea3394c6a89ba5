// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: per network namespace settings under net.sd.
 *
 * Every handler parses into a scratch copy and stores only a value that
 * passed its checks, so a rejected write (-EINVAL) keeps the old value.
 */
#include <linux/capability.h>
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysctl.h>
#include <linux/user_namespace.h>
#include <net/net_namespace.h>

#include "af_sd.h"

static DEFINE_MUTEX(sd_sysctl_mutex);

/* net.sd.port_range: "LOW HIGH", the ports bind and connect pick from. */
static int sd_port_range_handler(struct ctl_table *table, int write,
				 void *buffer, size_t *lenp, loff_t *ppos)
{
	int *range = table->data;
	int val[2];
	struct ctl_table tmp = {
		.data = val,
		.maxlen = sizeof(val),
		.mode = table->mode,
	};
	int err;

	mutex_lock(&sd_sysctl_mutex);
	val[0] = READ_ONCE(range[0]);
	/* A write must give both numbers: -1 stays if the second is missing. */
	val[1] = write ? -1 : READ_ONCE(range[1]);
	err = proc_dointvec(&tmp, write, buffer, lenp, ppos);
	if (write && !err) {
		if (val[0] < 1 || val[1] > 65535 || val[0] > val[1]) {
			err = -EINVAL;
		} else {
			WRITE_ONCE(range[0], val[0]);
			WRITE_ONCE(range[1], val[1]);
		}
	}
	mutex_unlock(&sd_sysctl_mutex);
	return err;
}

/*
 * Rings above this size cost more kernel memory per connection than a
 * namespace's own root may impose: only CAP_NET_ADMIN in the initial user
 * namespace sets net.sd.ring_size or ring_size_max above it.  A user
 * namespace's root (who owns the sysctls of the network namespaces it
 * makes) is held to 4 MiB, the default of ring_size_max.
 */
#define SD_RING_UNPRIV_MAX	(4U << 20)

/*
 * net.sd.ring_size: bytes of each new ring, a power of two in bounds
 * (EINVAL), and above SD_RING_UNPRIV_MAX only for the initial namespace's
 * CAP_NET_ADMIN (EPERM).  The capability is the writer's, checked at the
 * write (current is the task writing the file).
 */
static int sd_ring_size_handler(struct ctl_table *table, int write,
				void *buffer, size_t *lenp, loff_t *ppos)
{
	int *size = table->data;
	int val = READ_ONCE(*size);
	struct ctl_table tmp = {
		.data = &val,
		.maxlen = sizeof(val),
		.mode = table->mode,
	};
	int err;

	err = proc_dointvec(&tmp, write, buffer, lenp, ppos);
	if (write && !err) {
		if (val < SD_RING_MIN_SIZE || val > SD_RING_MAX_SIZE ||
		    !is_power_of_2(val))
			return -EINVAL;
		if (val > SD_RING_UNPRIV_MAX &&
		    !ns_capable(&init_user_ns, CAP_NET_ADMIN))
			return -EPERM;
		WRITE_ONCE(*size, val);
	}
	return err;
}

/* net.sd.ring_size_max: bound of rings sized from SO_SNDBUF/SO_RCVBUF. */
static int sd_ring_max_handler(struct ctl_table *table, int write,
			       void *buffer, size_t *lenp, loff_t *ppos)
{
	return sd_ring_size_handler(table, write, buffer, lenp, ppos);
}

/* net.sd.default_policy: "allow" or "deny", when no rule matches. */
static int sd_policy_handler(struct ctl_table *table, int write,
			     void *buffer, size_t *lenp, loff_t *ppos)
{
	int *policy = table->data;
	char val[8];
	struct ctl_table tmp = {
		.data = val,
		.maxlen = sizeof(val),
		.mode = table->mode,
	};
	int err;

	strscpy(val, READ_ONCE(*policy) == SD_ACTION_DENY ? "deny" : "allow",
		sizeof(val));
	err = proc_dostring(&tmp, write, buffer, lenp, ppos);
	if (!write || err)
		return err;
	if (!strcmp(val, "allow"))
		WRITE_ONCE(*policy, SD_ACTION_ALLOW);
	else if (!strcmp(val, "deny"))
		WRITE_ONCE(*policy, SD_ACTION_DENY);
	else
		return -EINVAL;
	return 0;
}

static int sd_zero;
static int sd_one = 1;
static int sd_zc_threshold_max = 1 << 30;
static int sd_rdv_timeout_min = 10;
static int sd_rdv_timeout_max = 60000;

static const struct ctl_table sd_sysctl_template[] = {
	{
		.procname	= "port_range",
		.maxlen		= 2 * sizeof(int),
		.mode		= 0644,
		.proc_handler	= sd_port_range_handler,
	},
	{
		.procname	= "ring_size",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= sd_ring_size_handler,
	},
	{
		.procname	= "ring_size_max",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= sd_ring_max_handler,
	},
	{
		.procname	= "default_policy",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= sd_policy_handler,
	},
	{
		/* 0: off, 1: libsd redirects AF_INET stream sockets */
		.procname	= "redirect",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= proc_dointvec_minmax,
		.extra1		= &sd_zero,
		.extra2		= &sd_one,
	},
	{
		/*
		 * libsd sends and receives this many bytes or more by
		 * handing pages over (Documentation/zerocopy.rst); 0: off
		 */
		.procname	= "zerocopy_threshold",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= proc_dointvec_minmax,
		.extra1		= &sd_zero,
		.extra2		= &sd_zc_threshold_max,
	},
	{
		/*
		 * bound of a connect's wait for the link daemon's verdict,
		 * in milliseconds
		 */
		.procname	= "rendezvous_timeout_ms",
		.maxlen		= sizeof(int),
		.mode		= 0644,
		.proc_handler	= proc_dointvec_minmax,
		.extra1		= &sd_rdv_timeout_min,
		.extra2		= &sd_rdv_timeout_max,
	},
	{ }
};

int sd_sysctl_register(struct net *net, struct sd_net *sn)
{
	struct ctl_table *table;

	table = kmemdup(sd_sysctl_template, sizeof(sd_sysctl_template),
			GFP_KERNEL);
	if (!table)
		return -ENOMEM;

	table[0].data = sn->port_range;
	table[1].data = &sn->ring_size;
	table[2].data = &sn->ring_size_max;
	table[3].data = &sn->default_policy;
	table[4].data = &sn->redirect;
	table[5].data = &sn->zerocopy_threshold;
	table[6].data = &sn->rdv_timeout_ms;

	sn->sysctl_hdr = register_net_sysctl(net, "net/sd", table);
	if (!sn->sysctl_hdr) {
		kfree(table);
		return -ENOMEM;
	}
	return 0;
}

void sd_sysctl_unregister(struct sd_net *sn)
{
	struct ctl_table *table = sn->sysctl_hdr->ctl_table_arg;

	unregister_net_sysctl_table(sn->sysctl_hdr);
	kfree(table);
}
