// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: module glue.  Registers the protocol, the per-netns state and the
 * socket family, creates and releases sockets; each concern of the socket
 * lives in its own file (sd_conn.c, sd_data.c, sd_ring.c, sd_sysctl.c).
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/module.h>
#include <linux/net.h>
#include <linux/in.h>
#include <linux/cred.h>
#include <linux/pid.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>
#include <net/netns/generic.h>
#include <net/sock.h>

#include <linux/sd_link.h>

#include "af_sd.h"

/* Read-only: lets user space check the family number of this module. */
static int family = AF_SD;
module_param(family, int, 0444);
MODULE_PARM_DESC(family, "the address family number AF_SD uses (read-only)");

static unsigned int sd_net_id __read_mostly;

struct sd_net *sd_net(const struct net *net)
{
	return net_generic(net, sd_net_id);
}

struct proto sd_proto = {
	.name		= "AF_SD",
	.owner		= THIS_MODULE,
	.obj_size	= sizeof(struct sd_sock),
};

static void sd_destruct(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	mutex_destroy(&ss->send_mutex);
	mutex_destroy(&ss->recv_mutex);
	put_pid(ss->owner);
	sock_prot_inuse_add(sock_net(sk), sk->sk_prot, -1);
}

/*
 * A new AF_SD sock, for socket() (sock set) or for the server end of a
 * connection (sock NULL, grafted at accept).
 */
struct sock *sd_sk_alloc(struct net *net, struct socket *sock, int kern)
{
	struct sd_sock *ss;
	struct sock *sk;

	sk = sk_alloc(net, PF_SD, GFP_KERNEL, &sd_proto, kern);
	if (!sk)
		return NULL;

	sock_init_data(sock, sk);
	sk->sk_type = SOCK_STREAM;
	sk->sk_protocol = IPPROTO_TCP;
	sk->sk_state = TCP_CLOSE;
	sk->sk_destruct = sd_destruct;
	/* Peers find each other under RCU (see af_sd.h). */
	sock_set_flag(sk, SOCK_RCU_FREE);

	ss = sd_sk(sk);
	ss->family = AF_INET;
	INIT_HLIST_NODE(&ss->bind_node);
	INIT_LIST_HEAD(&ss->group_node);
	INIT_LIST_HEAD(&ss->accept_list);
	INIT_LIST_HEAD(&ss->accept_node);
	mutex_init(&ss->send_mutex);
	mutex_init(&ss->recv_mutex);
	ss->owner = get_task_pid(current, PIDTYPE_TGID);
	ss->gid = current_fsgid();

	sock_prot_inuse_add(net, &sd_proto, 1);
	return sk;
}

static int sd_release(struct socket *sock)
{
	struct sock *sk = sock->sk;
	struct socket *tcp;
	struct sd_sock *ss;
	bool abort;

	if (!sk)
		return 0;
	ss = sd_sk(sk);

	lock_sock(sk);
	/* A member of a listening group leaves it, whatever its state. */
	if (sk->sk_state == TCP_LISTEN || ss->group) {
		sd_listen_stop(sk);
	} else if (ss->conn) {
		/*
		 * As TCP: closing with unread data, or with SO_LINGER and a
		 * zero timeout, resets the connection; otherwise the peer
		 * reads what was sent, then end of stream.  Sent data is
		 * already in the peer's ring, so a lingering close has
		 * nothing to wait for.
		 */
		abort = sd_rx_unread(ss) ||
			(sock_flag(sk, SOCK_LINGER) && !sk->sk_lingertime);
		/*
		 * The link daemon's end of a connection to another host,
		 * closed as the daemon exits (or is killed): the host is out
		 * of reach, so the program sees a reset, not an end.
		 */
		if (ss->conn->link_id && ss->side == ss->conn->link_end &&
		    (current->flags & PF_EXITING)) {
			abort = true;
			sd_stat_inc(sock_net(sk), SD_STAT_LINK_RESETS);
		}
		sd_conn_close(sk, abort);
	}
	/* Out of the tables before the connection goes (sdctl reads it). */
	sd_unhash(sk);
	if (ss->conn) {
		sd_conn_put(ss->conn);
		ss->conn = NULL;
	}
	sd_set_state(sk, TCP_CLOSE);
	/* Unhashed first: sdctl reads the TCP socket of hashed ones. */
	tcp = sd_tcp_detach(sk);
	release_sock(sk);
	/* Unlocked: a TCP close may linger (SO_LINGER). */
	sd_tcp_release(sock, tcp);

	sock_orphan(sk);
	sock->sk = NULL;
#if defined(SD_SELFTEST_BREAK) && SD_SELFTEST_BREAK == 2
	/* Harness self-test: leak the socket, which pins the module. */
	return 0;
#endif
	sock_put(sk);
	return 0;
}

const struct proto_ops sd_stream_ops = {
	.family		= PF_SD,
	.owner		= THIS_MODULE,
	.release	= sd_release,
	.bind		= sd_bind,
	.connect	= sd_connect,
	.socketpair	= sock_no_socketpair,
	.accept		= sd_accept,
	.getname	= sd_getname,
	.poll		= sd_poll,
	.ioctl		= sd_ioctl,
	.listen		= sd_listen,
	.shutdown	= sd_shutdown,
	.setsockopt	= sd_setsockopt,
	.getsockopt	= sd_getsockopt,
	.set_rcvlowat	= sd_set_rcvlowat,
	.sendmsg	= sd_sendmsg,
	.recvmsg	= sd_recvmsg,
	.mmap		= sd_mmap,
	.sendpage	= sock_no_sendpage,
};

static int sd_create(struct net *net, struct socket *sock, int protocol,
		     int kern)
{
	bool redirect = protocol == SD_PROTO_INET ||
			protocol == SD_PROTO_INET6;
	struct sock *sk;

	if (sock->type != SOCK_STREAM)
		return -ESOCKTNOSUPPORT;
	if (protocol != 0 && protocol != IPPROTO_TCP && !redirect)
		return -EPROTONOSUPPORT;
	/* net.sd.redirect off: libsd makes the real socket instead. */
	if (redirect && !READ_ONCE(sd_net(net)->redirect))
		return -EPROTONOSUPPORT;

	sock->ops = &sd_stream_ops;
	sock->state = SS_UNCONNECTED;
	sk = sd_sk_alloc(net, sock, kern);
	if (!sk)
		return -ENOMEM;
	if (redirect) {
		sd_sk(sk)->redirected = protocol & ~SD_PROTO_REDIRECT;
		sd_sk(sk)->family = sd_sk(sk)->redirected;
		sd_stat_inc(net, SD_STAT_REDIRECTED);
	}
	return 0;
}

static const struct net_proto_family sd_family_ops = {
	.family	= PF_SD,
	.create	= sd_create,
	.owner	= THIS_MODULE,
};

static int __net_init sd_net_init(struct net *net)
{
	struct sd_net *sn = sd_net(net);
	int i;

	spin_lock_init(&sn->bind_lock);
	for (i = 0; i < ARRAY_SIZE(sn->bind_table); i++) {
		INIT_HLIST_HEAD(&sn->bind_table[i]);
		INIT_HLIST_HEAD(&sn->listen_table[i]);
	}
	init_waitqueue_head(&sn->backlog_wait);
	sn->port_rover = get_random_u32();
	mutex_init(&sn->rules_lock);
	INIT_LIST_HEAD(&sn->rules);
	sn->port_range[0] = 32768;
	sn->port_range[1] = 60999;
	sn->ring_size = 128 * 1024;
	sn->zerocopy_threshold = 16 * 1024;
	sn->ring_size_max = 4 * 1024 * 1024;
	sn->default_policy = SD_ACTION_ALLOW;
	sd_link_net_init(sn);
	return sd_sysctl_register(net, sn);
}

static void __net_exit sd_net_exit(struct net *net)
{
	struct sd_net *sn = sd_net(net);

	sd_sysctl_unregister(sn);
	mutex_lock(&sn->rules_lock);
	sd_rules_flush(sn);
	mutex_unlock(&sn->rules_lock);
	sd_link_net_exit(sn);
}

static struct pernet_operations sd_net_ops = {
	.init	= sd_net_init,
	.exit	= sd_net_exit,
	.id	= &sd_net_id,
	.size	= sizeof(struct sd_net),
};

static int __init sd_init(void)
{
	int err;

	err = proto_register(&sd_proto, 0);
	if (err)
		goto out;

	err = sd_zc_init();
	if (err)
		goto out_proto;

	err = register_pernet_subsys(&sd_net_ops);
	if (err)
		goto out_zc;

	err = sd_netlink_init();
	if (err)
		goto out_pernet;

	err = sd_link_init();
	if (err)
		goto out_netlink;

	err = sock_register(&sd_family_ops);
	if (err)
		goto out_link;

#if defined(SD_SELFTEST_BREAK) && SD_SELFTEST_BREAK == 1
	/* Harness self-test: a splat the harness must catch. */
	WARN(1, "af_sd: deliberate warning for the harness self-test\n");
#endif
	pr_info("AF_SD %s registered as family %d\n", SD_MODULE_VERSION,
		PF_SD);
	return 0;

out_link:
	sd_link_exit();
out_netlink:
	sd_netlink_exit();
out_pernet:
	unregister_pernet_subsys(&sd_net_ops);
out_zc:
	sd_zc_exit();
out_proto:
	proto_unregister(&sd_proto);
out:
	return err;
}

static void __exit sd_exit(void)
{
	sock_unregister(PF_SD);
	sd_link_exit();
	sd_netlink_exit();
	unregister_pernet_subsys(&sd_net_ops);
	sd_zc_exit();
	/* Rules freed with kfree_rcu() must be gone before the code is. */
	rcu_barrier();
	proto_unregister(&sd_proto);
}

module_init(sd_init);
module_exit(sd_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("AF_SD shared-memory and RDMA stream sockets");
MODULE_VERSION(SD_MODULE_VERSION);
MODULE_ALIAS_NETPROTO(PF_SD);
MODULE_ALIAS_GENL_FAMILY(SD_GENL_NAME);
MODULE_ALIAS_GENL_FAMILY(SD_LINK_GENL_NAME);
