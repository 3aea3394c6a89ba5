// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD connection setup: addresses, bind and ports, listen and listening
 * groups (SO_REUSEPORT), connect and dispatch, accept and work stealing,
 * and the end of a connection (shutdown, close, reset).
 *
 * Everything here is per network namespace (struct sd_net); a socket only
 * ever finds listeners of its own namespace.  Lock order: see af_sd.h.
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/cred.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/log2.h>
#include <linux/pid.h>
#include <linux/slab.h>
#include <net/addrconf.h>
#include <net/inet6_hashtables.h>
#include <net/inet_hashtables.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/route.h>
#include <net/sock.h>
#include <net/tcp_states.h>

#include <linux/sd_link.h>

#include "af_sd.h"

/* ---- addresses ---------------------------------------------------- */

static bool sd_addr_is_v4(const struct in6_addr *a)
{
	return ipv6_addr_v4mapped(a);
}

/* 0.0.0.0 (as ::ffff:0.0.0.0) or :: */
static bool sd_addr_any(const struct in6_addr *a)
{
	return ipv6_addr_any(a) || (sd_addr_is_v4(a) && !a->s6_addr32[3]);
}

/*
 * Does a socket bound to @bound receive connections for @dst?  @v6only: the
 * socket is a redirected AF_INET6 one with IPV6_V6ONLY set when it bound.
 */
static bool sd_addr_covers(const struct in6_addr *bound, bool v6only,
			   const struct in6_addr *dst)
{
	if (ipv6_addr_any(bound))		/* :: takes v4 and v6 */
		return !v6only || !sd_addr_is_v4(dst);
	if (sd_addr_is_v4(bound) && !bound->s6_addr32[3])
		return sd_addr_is_v4(dst);	/* 0.0.0.0 takes v4 */
	return ipv6_addr_equal(bound, dst);
}

static bool sd_addr_overlap(const struct in6_addr *a, bool a_v6only,
			    const struct in6_addr *b, bool b_v6only)
{
	return sd_addr_covers(a, a_v6only, b) || sd_addr_covers(b, b_v6only, a);
}

/*
 * Parse a sockaddr_in or sockaddr_in6 from user space.  A socket shows its
 * addresses in the family it first used; another family later is
 * EAFNOSUPPORT, as for TCP.
 */
static int sd_addr_parse(struct sd_sock *ss, const struct sockaddr *uaddr,
			 int len, struct sd_addr *a, sa_family_t *family)
{
	if (len < (int)sizeof(sa_family_t))
		return -EINVAL;
	/* A redirected socket takes its TCP family's addresses only. */
	if (ss->redirected) {
		if (len < (ss->redirected == AF_INET ?
			   (int)sizeof(struct sockaddr_in) : SIN6_LEN_RFC2133))
			return -EINVAL;
		if (uaddr->sa_family != ss->redirected)
			return -EAFNOSUPPORT;
	}

	switch (uaddr->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *sin = (const void *)uaddr;

		if (len < (int)sizeof(*sin))
			return -EINVAL;
		ipv6_addr_set_v4mapped(sin->sin_addr.s_addr, &a->addr);
		a->port = sin->sin_port;
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *sin6 = (const void *)uaddr;

		if (len < SIN6_LEN_RFC2133)
			return -EINVAL;
		a->addr = sin6->sin6_addr;
		a->port = sin6->sin6_port;
		break;
	}
	default:
		return -EAFNOSUPPORT;
	}

	if ((ss->bound || ss->conn) && uaddr->sa_family != ss->family)
		return -EAFNOSUPPORT;
	*family = uaddr->sa_family;
	return 0;
}

/* A wildcard of either family becomes that family's loopback address. */
static void sd_addr_any_to_loopback(struct in6_addr *a)
{
	if (!sd_addr_any(a))
		return;
	if (sd_addr_is_v4(a))
		ipv6_addr_set_v4mapped(htonl(INADDR_LOOPBACK), a);
	else
		*a = in6addr_loopback;
}

/* Is @a an address of this host in @net (or a wildcard)? */
static bool sd_addr_local(struct net *net, const struct in6_addr *a)
{
	if (sd_addr_any(a))
		return true;
	if (sd_addr_is_v4(a))
		return inet_addr_type(net, a->s6_addr32[3]) == RTN_LOCAL;
#if IS_ENABLED(CONFIG_IPV6)
	return ipv6_chk_addr(net, a, NULL, 0);
#else
	return false;
#endif
}

static int sd_addr_fill(sa_family_t family, const struct sd_addr *a,
			struct sockaddr *uaddr)
{
	struct sockaddr_in6 *sin6;

	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)uaddr;

		memset(sin, 0, sizeof(*sin));
		sin->sin_family = AF_INET;
		sin->sin_port = a->port;
		sin->sin_addr.s_addr = a->addr.s6_addr32[3];
		return sizeof(*sin);
	}

	sin6 = (struct sockaddr_in6 *)uaddr;
	memset(sin6, 0, sizeof(*sin6));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = a->port;
	sin6->sin6_addr = a->addr;
	return sizeof(*sin6);
}

int sd_getname(struct socket *sock, struct sockaddr *uaddr, int peer)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	struct sd_addr a = {};
	int len;

	if (tcp)
		return tcp->ops->getname(tcp, uaddr, peer);
	lock_sock(sk);
	if (peer) {
		if (!ss->conn || sk->sk_state == TCP_CLOSE) {
			release_sock(sk);
			return -ENOTCONN;
		}
		a = ss->peer;
	} else if (ss->bound || ss->conn) {
		/* The link daemon's stand-in has the remote address unbound. */
		a = ss->local;
	} else if (ss->family == AF_INET) {
		ipv6_addr_set_v4mapped(htonl(INADDR_ANY), &a.addr);
	}
	len = sd_addr_fill(ss->family, &a, uaddr);
	release_sock(sk);
	return len;
}

/* ---- ports ----------------------------------------------------------- */

static struct hlist_head *sd_bind_head(struct sd_net *sn, __be16 port)
{
	return &sn->bind_table[ntohs(port) & ((1 << SD_HASH_BITS) - 1)];
}

static struct sd_bind_chain *sd_bind_chain(struct sd_net *sn, __be16 port)
{
	return &sn->bind_chain[ntohs(port) & ((1 << SD_HASH_BITS) - 1)];
}

/* Count @sk in its chain's summary, or (@in false) take it out. */
static void sd_bind_count(struct sd_net *sn, struct sock *sk, bool in)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_bind_chain *c = sd_bind_chain(sn, ss->local.port);

	lockdep_assert_held(&sn->bind_lock);
	if (!in) {
		c->users--;
		c->shared -= ss->bind_shared;
		ss->bind_shared = false;
		return;
	}
	if (!c->users++)
		c->uid = sk->sk_uid;
	ss->bind_shared = sk->sk_reuseport && uid_eq(sk->sk_uid, c->uid);
	c->shared += ss->bind_shared;
}

/*
 * SD_REUSEPORT changed on @sk (locked): a bound socket's chain summary
 * follows, so that the fast path of sd_port_in_use() stays exact.
 */
void sd_bind_set_reuseport(struct sock *sk, bool on)
{
	struct sd_net *sn = sd_net(sock_net(sk));

	spin_lock(&sn->bind_lock);
	if (sd_sk(sk)->bound) {
		sd_bind_count(sn, sk, false);
		sk->sk_reuseport = on;
		sd_bind_count(sn, sk, true);
	} else {
		sk->sk_reuseport = on;
	}
	spin_unlock(&sn->bind_lock);
}

static struct hlist_head *sd_listen_head(struct sd_net *sn, __be16 port)
{
	return &sn->listen_table[ntohs(port) & ((1 << SD_HASH_BITS) - 1)];
}

/* May @sk take @a while @other holds the same port?  TCP's rules. */
static bool sd_bind_conflict(const struct sock *sk, const struct sd_addr *a,
			     const struct sock *other)
{
	const struct sd_sock *os = sd_sk(other);

	if (os->local.port != a->port ||
	    !sd_addr_overlap(&os->local.addr, os->v6only, &a->addr,
			     sd_sk(sk)->v6only))
		return false;
	if (sk->sk_reuseport && other->sk_reuseport &&
	    uid_eq(sk->sk_uid, other->sk_uid))
		return false;
	if (sk->sk_reuse && other->sk_reuse && other->sk_state != TCP_LISTEN)
		return false;
	return true;
}

static bool sd_port_in_use(struct sd_net *sn, struct sock *sk,
			   const struct sd_addr *a)
{
	struct sd_bind_chain *c = sd_bind_chain(sn, a->port);
	struct sd_sock *other;

	lockdep_assert_held(&sn->bind_lock);
	/* Everyone there shares with us by the second rule: no walk. */
	if (sk->sk_reuseport && c->shared == c->users &&
	    uid_eq(sk->sk_uid, c->uid))
		return false;
	hlist_for_each_entry(other, sd_bind_head(sn, a->port), bind_node)
		if (&other->sk != sk && sd_bind_conflict(sk, a, &other->sk))
			return true;
	return false;
}

static void sd_hash(struct sd_net *sn, struct sock *sk)
{
	lockdep_assert_held(&sn->bind_lock);
	hlist_add_head(&sd_sk(sk)->bind_node,
		       sd_bind_head(sn, sd_sk(sk)->local.port));
	sd_bind_count(sn, sk, true);
	sd_sk(sk)->bound = true;
}

/*
 * IPV6_V6ONLY as TCP saw it at bind: a :: that takes no IPv4 (AF_SD's
 * table and listening groups follow TCP there too).
 */
static void sd_note_v6only(struct sock *sk)
{
	struct sock *tsk = sd_sk(sk)->tcp->sk;

	sd_sk(sk)->v6only = tsk->sk_family == AF_INET6 && tsk->sk_ipv6only;
}

/*
 * Enter @sk in AF_SD's table with the port of @a, which its TCP socket
 * holds already; AF_SD's own sockets are checked too, by TCP's rules
 * (only a socket whose port its listener holds, a connection's server
 * end, is in this table alone).
 */
static int sd_hash_port(struct sock *sk, const struct sd_addr *a)
{
	struct sd_net *sn = sd_net(sock_net(sk));
	int err = 0;

	spin_lock(&sn->bind_lock);
	if (sd_port_in_use(sn, sk, a)) {
		err = -EADDRINUSE;
	} else {
		sd_sk(sk)->local = *a;
		sd_hash(sn, sk);
	}
	spin_unlock(&sn->bind_lock);
	return err;
}

/*
 * Give @sk a free port of net.sd.port_range at @a's address, for a bind to
 * port 0 or a listen or connect of an unbound socket: its TCP socket (of
 * @family) binds @a's address, or with @tcp_any the wildcard address (a
 * connect's), at the first port from the rover that nobody holds in
 * TCP's port space (whatever their SO_REUSEADDR: sd_tcp_bind()'s
 * @exclusive), and AF_SD's table takes it.  Ports that need
 * CAP_NET_BIND_SERVICE are skipped for a caller without it.  Sets @a's
 * port.  -EADDRNOTAVAIL when none is free.  Called with @sk locked.
 */
static int sd_autobind(struct sock *sk, sa_family_t family, struct sd_addr *a,
		       bool tcp_any)
{
	struct sd_net *sn = sd_net(sock_net(sk));
	struct net *net = sock_net(sk);
	int low = READ_ONCE(sn->port_range[0]);
	int high = READ_ONCE(sn->port_range[1]);
	/* A hint only: racing callers may start at the same port. */
	u32 rover = READ_ONCE(sn->port_rover);
	bool priv = ns_capable(net->user_ns, CAP_NET_BIND_SERVICE);
	int range = high - low + 1, i, err;
	struct sd_addr wild = {}, got;
	struct sockaddr_storage st;
	int len;

	if (!tcp_any)
		wild.addr = a->addr;
	else if (family == AF_INET)
		ipv6_addr_set_v4mapped(htonl(INADDR_ANY), &wild.addr);
	for (i = 0; i < range; i++) {
		wild.port = htons(low + (rover + i) % range);
		if (!priv && inet_port_requires_bind_service(net,
							     ntohs(wild.port)))
			continue;
		len = sd_addr_fill(family, &wild, (struct sockaddr *)&st);
		err = sd_tcp_bind(sk, family, (struct sockaddr *)&st, len, true,
				  &got);
		if (err == -EADDRINUSE)
			continue;
		if (err)
			return err;
		a->port = wild.port;
		sd_note_v6only(sk);
		err = sd_hash_port(sk, a);
		if (!err) {
			WRITE_ONCE(sn->port_rover, rover + i + 1);
			return 0;
		}
		sd_tcp_unbind(sk);
	}
	return -EADDRNOTAVAIL;
}

/* Undo sd_autobind() for a connect that failed: out of both tables. */
static void sd_autounbind(struct sock *sk)
{
	sd_unhash(sk);
	sd_tcp_unbind(sk);
}

void sd_unhash(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_net *sn = sd_net(sock_net(sk));

	if (!ss->bound)
		return;
	spin_lock(&sn->bind_lock);
	hlist_del_init(&ss->bind_node);
	sd_bind_count(sn, sk, false);
	ss->bound = false;
	spin_unlock(&sn->bind_lock);
}

/* Access control of bind and listen (SD_DIR_BIND), counted if denied. */
static bool sd_bind_allowed(struct sock *sk)
{
	kuid_t uid;
	kgid_t gid;

	sd_current_ids(&uid, &gid);
	if (sd_policy_allows(sock_net(sk), SD_DIR_BIND, uid, gid,
			     &sd_sk(sk)->local, NULL))
		return true;
	sd_stat_inc(sock_net(sk), SD_STAT_DENIED_BIND);
	return false;
}

/*
 * A bind that failed after its TCP socket bound: out of AF_SD's table, and
 * the TCP socket goes too, for a socket that failed to bind must stay
 * unbound.  Called with @sk locked.
 */
static void sd_bind_undo(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp;

	sd_unhash(sk);
	tcp = sd_tcp_detach(sk);
	ss->tcp = NULL;
	sd_tcp_release(NULL, tcp);
}

/*
 * Take in AF_SD's table the port that @sk's TCP socket has just bound (to
 * @a's address), and ask the bind rules.  On failure, sd_bind_undo().
 * Called with @sk locked.
 */
static int sd_bind_tcp_port(struct sock *sk, struct sd_addr *a)
{
	int err;

	sd_note_v6only(sk);
	err = sd_hash_port(sk, a);
	if (!err && !sd_bind_allowed(sk))
		err = -EACCES;
	if (err)
		sd_bind_undo(sk);
	return err;
}

/*
 * bind(2) on a redirected socket: TCP binds first (its rules, its errors,
 * its choice for port 0), then AF_SD takes the same address and port.
 */
static int sd_bind_redirected(struct sock *sk, struct sockaddr *uaddr,
			      int addr_len)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_addr a;
	int err;

	if (ss->bound || ss->conn || sk->sk_state != TCP_CLOSE)
		return -EINVAL;
	err = sd_tcp_bind(sk, ss->redirected, uaddr, addr_len, false, &a);
	return err ? err : sd_bind_tcp_port(sk, &a);
}

/*
 * bind(2) on a native socket: its TCP socket binds the same address and
 * port first, so TCP's port space sees the port taken (and TCP's errors
 * are the program's); port 0 is a free one of net.sd.port_range.
 */
static int sd_bind_native(struct sock *sk, struct sockaddr *uaddr,
			  int addr_len, struct sd_addr *a, sa_family_t family)
{
	struct sd_addr got;
	int err;

	if (!a->port) {
		err = sd_autobind(sk, family, a, false);
		if (!err && !sd_bind_allowed(sk))
			err = -EACCES;
		if (err)
			sd_bind_undo(sk);
		return err;
	}
	err = sd_tcp_bind(sk, family, uaddr, addr_len, false, &got);
	if (err) {
		/* Its next bind may be of another family. */
		sd_bind_undo(sk);
		return err;
	}
	return sd_bind_tcp_port(sk, a);
}

int sd_bind(struct socket *sock, struct sockaddr *uaddr, int addr_len)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct net *net = sock_net(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	sa_family_t family;
	struct sd_addr a;
	int err;

	if (tcp)
		return tcp->ops->bind(tcp, uaddr, addr_len);
	lock_sock(sk);
	/*
	 * A connect of another thread may have fallen back while this one
	 * waited for the lock: the TCP socket, now the file's, answers (a
	 * failed bind below would release it under the file).
	 */
	tcp = sd_tcp_sock(sk);
	if (tcp) {
		release_sock(sk);
		return tcp->ops->bind(tcp, uaddr, addr_len);
	}
	if (ss->redirected) {
		err = sd_bind_redirected(sk, uaddr, addr_len);
		goto out;
	}
	err = sd_addr_parse(ss, uaddr, addr_len, &a, &family);
	if (err)
		goto out;

	err = -EINVAL;
	if (ss->bound || ss->conn || sk->sk_state != TCP_CLOSE)
		goto out;

	err = -EADDRNOTAVAIL;
	if (!sd_addr_local(net, &a.addr))
		goto out;

	err = sd_bind_native(sk, uaddr, addr_len, &a, family);
	if (err)
		goto out;
	ss->family = family;
out:
	release_sock(sk);
	return err;
}

/* ---- listening groups ---------------------------------------------- */

static void sd_group_put(struct sd_group *g)
{
	if (refcount_dec_and_test(&g->ref))
		kfree(g);
}

/* The group of listeners that takes a connection to @dst, with a ref. */
static struct sd_group *sd_group_lookup(struct sd_net *sn,
					const struct sd_addr *dst)
{
	struct sd_group *g, *best = NULL;

	spin_lock(&sn->bind_lock);
	hlist_for_each_entry(g, sd_listen_head(sn, dst->port), node) {
		if (g->addr.port != dst->port ||
		    !sd_addr_covers(&g->addr.addr, g->v6only, &dst->addr))
			continue;
		/* An exact address beats a wildcard, as in TCP. */
		if (!sd_addr_any(&g->addr.addr)) {
			best = g;
			break;
		}
		/*
		 * Of the wildcards, the one of the destination's family: an
		 * IPv4 client goes to 0.0.0.0 before [::], as TCP's lookup
		 * scores an AF_INET listener higher.
		 */
		if (!best || sd_addr_is_v4(&g->addr.addr) == sd_addr_is_v4(&dst->addr))
			best = g;
	}
	if (best)
		refcount_inc(&best->ref);
	spin_unlock(&sn->bind_lock);
	return best;
}

/* The TCP listener a SYN from @src to @dst over loopback finds, or NULL. */
static struct sock *sd_tcp_listener(struct net *net,
				    const struct sd_addr *src,
				    const struct sd_addr *dst)
{
	struct inet_hashinfo *h = net->ipv4.tcp_death_row.hashinfo;
	int dif = net->loopback_dev->ifindex;

	if (sd_addr_is_v4(&dst->addr))
		return __inet_lookup_listener(net, h, NULL, 0,
					      sd_addr_is_v4(&src->addr) ?
					      src->addr.s6_addr32[3] : 0,
					      src->port, dst->addr.s6_addr32[3],
					      ntohs(dst->port), dif, 0);
#if IS_ENABLED(CONFIG_IPV6)
	return inet6_lookup_listener(net, h, NULL, 0, &src->addr, src->port,
				     &dst->addr, ntohs(dst->port), dif, 0);
#else
	return NULL;
#endif
}

/*
 * Would TCP give a connection from @src to @dst to a listener that is not
 * the TCP side of a member of @g?  Plain TCP listeners can share a port
 * with AF_SD's (SO_REUSEPORT, one owner): one of them may hold the exact
 * address where @g holds the wildcard, or be in the same reuseport group,
 * where TCP's hash of the client's address and port chooses.  The lookup
 * is TCP's own, so the answer is what TCP's SYN would find.
 */
static bool sd_tcp_takes_it_elsewhere(struct net *net, struct sd_group *g,
				      const struct sd_addr *src,
				      const struct sd_addr *dst)
{
	struct sd_sock *m;
	struct sock *l;
	bool mine = false;

	/* Listeners are freed after a grace period (SOCK_RCU_FREE). */
	rcu_read_lock();
	l = sd_tcp_listener(net, src, dst);
	if (!l) {
		rcu_read_unlock();
		return false;
	}
	/* A member's TCP socket stays while it is a member (g->lock). */
	spin_lock(&g->lock);
	list_for_each_entry(m, &g->members, group_node) {
		if (m->tcp && m->tcp->sk == l) {
			mine = true;
			break;
		}
	}
	spin_unlock(&g->lock);
	rcu_read_unlock();
	return !mine;
}

int sd_listen(struct socket *sock, int backlog)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sd_group *g, *join, *fresh;
	unsigned int somaxconn = READ_ONCE(sock_net(sk)->core.sysctl_somaxconn);
	struct socket *tcp = sd_tcp_sock(sk);
	int tcp_backlog = backlog;
	int err;

	if (tcp)
		return tcp->ops->listen(tcp, backlog);
	if ((unsigned int)backlog > somaxconn)
		backlog = somaxconn;

	lock_sock(sk);
	/* As in sd_bind(): a fallback of another thread meanwhile. */
	tcp = sd_tcp_sock(sk);
	if (tcp) {
		release_sock(sk);
		return tcp->ops->listen(tcp, tcp_backlog);
	}
	/* Not while a connect is in progress (SYN_SENT), as TCP's. */
	err = -EINVAL;
	if (sock->state != SS_UNCONNECTED || ss->conn ||
	    (sk->sk_state != TCP_CLOSE && sk->sk_state != TCP_LISTEN))
		goto out;
	if (sk->sk_state == TCP_LISTEN) {
		WRITE_ONCE(sk->sk_max_ack_backlog, backlog);
		err = sd_tcp_listen(sk, tcp_backlog);
		goto out;
	}

	if (!ss->bound && ss->redirected) {
		struct sockaddr_in6 any6 = { .sin6_family = AF_INET6 };
		struct sockaddr_in any4 = { .sin_family = AF_INET };
		struct sd_addr any;

		/* As TCP's listen: a port of TCP's choosing, any address. */
		if (ss->redirected == AF_INET)
			err = sd_tcp_bind(sk, AF_INET, (struct sockaddr *)&any4,
					  sizeof(any4), false, &any);
		else
			err = sd_tcp_bind(sk, AF_INET6,
					  (struct sockaddr *)&any6,
					  sizeof(any6), false, &any);
		if (err)
			goto out;
		err = sd_bind_tcp_port(sk, &any);
		if (err)
			goto out;
	} else if (!ss->bound) {
		struct sd_addr any = {};

		if (ss->family == AF_INET)
			ipv6_addr_set_v4mapped(htonl(INADDR_ANY), &any.addr);
		err = sd_autobind(sk, ss->family, &any, false);
		if (err) {
			sd_bind_undo(sk);
			goto out;
		}
	}
	err = -EACCES;
	if (!sd_bind_allowed(sk))
		goto out;

	err = -ENOMEM;
	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	if (!fresh)
		goto out;
	refcount_set(&fresh->ref, 1);
	spin_lock_init(&fresh->lock);
	INIT_LIST_HEAD(&fresh->members);
	fresh->addr = ss->local;
	fresh->reuseport = sk->sk_reuseport;
	fresh->v6only = ss->v6only;
	fresh->uid = sk->sk_uid;

	spin_lock(&sn->bind_lock);
	/*
	 * Other listeners on an overlapping address and this port: as TCP's,
	 * all of them and this one must have SO_REUSEPORT and one owner.
	 * The group of the same address takes this one; listeners of
	 * different addresses (0.0.0.0 and [::]) stay groups of their own,
	 * which sd_group_lookup() chooses between.
	 */
	join = NULL;
	hlist_for_each_entry(g, sd_listen_head(sn, ss->local.port), node) {
		if (g->addr.port != ss->local.port ||
		    !sd_addr_overlap(&g->addr.addr, g->v6only,
				     &ss->local.addr, ss->v6only))
			continue;
		if (!g->reuseport || !sk->sk_reuseport ||
		    !uid_eq(g->uid, sk->sk_uid)) {
			err = -EADDRINUSE;
			goto out_unlock;
		}
		if (ipv6_addr_equal(&g->addr.addr, &ss->local.addr) &&
		    g->v6only == ss->v6only)
			join = g;
	}
	g = join;
	if (!g) {
		g = fresh;
		fresh = NULL;
		hlist_add_head(&g->node, sd_listen_head(sn, ss->local.port));
	} else {
		refcount_inc(&g->ref);
	}

	spin_lock(&g->lock);
	list_add_tail(&ss->group_node, &g->members);
	g->nr_members++;
	ss->group = g;
	WRITE_ONCE(sk->sk_max_ack_backlog, backlog);
	WRITE_ONCE(sk->sk_ack_backlog, 0);
	sd_set_state(sk, TCP_LISTEN);
	spin_unlock(&g->lock);
	err = 0;
out_unlock:
	spin_unlock(&sn->bind_lock);
	kfree(fresh);
	/*
	 * Its TCP socket listens too: TCP's port space sees the port
	 * listened on (TCP's listen checks its rules again), and plain TCP
	 * clients are accepted, as TCP (sd_accept_tcp()).
	 */
	if (!err) {
		err = sd_tcp_listen(sk, tcp_backlog);
		if (err)
			sd_listen_stop(sk);
	}
out:
	release_sock(sk);
	return err;
}

/* The connections still queued when a listener stops are reset. */
static void sd_drop_child(struct sock *child)
{
	/* The listener's lock is held: another socket of the same class. */
	lock_sock_nested(child, SINGLE_DEPTH_NESTING);
	sd_conn_close(child, true);
	/* Out of the tables before the connection goes (sdctl reads it). */
	sd_unhash(child);
	sd_conn_put(sd_sk(child)->conn);
	sd_sk(child)->conn = NULL;
	sd_set_state(child, TCP_CLOSE);
	release_sock(child);
	sock_orphan(child);
	sock_put(child);
}

void sd_listen_stop(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk), *child, *tmp;
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sd_group *g = ss->group;
	LIST_HEAD(dropped);

	sd_tcp_listen_stop(sk);
	if (!g)
		return;

	spin_lock(&sn->bind_lock);
	spin_lock(&g->lock);
	list_del_init(&ss->group_node);
	list_splice_init(&ss->accept_list, &dropped);
	WRITE_ONCE(sk->sk_ack_backlog, 0);
	if (!--g->nr_members)
		hlist_del_init(&g->node);
	sd_set_state(sk, TCP_CLOSE);
	spin_unlock(&g->lock);
	spin_unlock(&sn->bind_lock);
	ss->group = NULL;
	sd_group_put(g);

	list_for_each_entry_safe(child, tmp, &dropped, accept_node) {
		list_del_init(&child->accept_node);
		sd_drop_child(&child->sk);
	}
	/* Accepts asleep on this listener see it stopped. */
	sk->sk_state_change(sk);
	wake_up_interruptible_all(&sn->backlog_wait);
}

/*
 * Queue @child on a member of @g, round robin over members whose backlog
 * has room.  Returns 0, -EAGAIN when every backlog is full, or
 * -ECONNREFUSED when the group has no member left.
 */
static int sd_group_enqueue(struct sd_group *g, struct sock *child)
{
	struct sd_sock *m, *chosen = NULL;
	unsigned int i, n;
	int err = -ECONNREFUSED;

	spin_lock(&g->lock);
	n = g->nr_members;
	for (i = 0; i < n && !chosen; i++) {
		unsigned int want = (g->next + i) % n, j = 0;

		list_for_each_entry(m, &g->members, group_node) {
			if (j++ != want)
				continue;
			if (!sk_acceptq_is_full(&m->sk)) {
				chosen = m;
				g->next = want + 1;
			}
			break;
		}
	}
	if (chosen) {
		struct sock *lsk = &chosen->sk;

		list_add_tail(&sd_sk(child)->accept_node, &chosen->accept_list);
		sk_acceptq_added(lsk);
		lsk->sk_data_ready(lsk);
		/* Nobody waits there: let an idle sibling steal it. */
		if (!skwq_has_sleeper(rcu_dereference_raw(lsk->sk_wq))) {
			list_for_each_entry(m, &g->members, group_node)
				if (m != chosen)
					m->sk.sk_data_ready(&m->sk);
		}
		err = 0;
	} else if (n) {
		err = -EAGAIN;
	}
	spin_unlock(&g->lock);
	return err;
}

/* Take a queued connection: from @sk's own queue, else from a sibling. */
static struct sock *sd_accept_dequeue(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk), *from = NULL, *m, *child = NULL;
	struct sd_group *g = ss->group;

	if (!g)
		return NULL;
	spin_lock(&g->lock);
	if (!list_empty(&ss->accept_list)) {
		from = ss;
	} else {
		list_for_each_entry(m, &g->members, group_node) {
			if (!list_empty(&m->accept_list)) {
				from = m;
				break;
			}
		}
	}
	if (from) {
		child = list_first_entry(&from->accept_list, struct sd_sock,
					 accept_node);
		list_del_init(&child->accept_node);
		sk_acceptq_removed(&from->sk);
	}
	spin_unlock(&g->lock);
	return child ? &child->sk : NULL;
}

static bool sd_accept_ready(struct sock *sk)
{
	struct sd_group *g = sd_sk(sk)->group;
	struct sd_sock *m;
	bool ready = false;

	if (!g || sk->sk_state != TCP_LISTEN)
		return true;
	spin_lock(&g->lock);
	list_for_each_entry(m, &g->members, group_node) {
		if (!list_empty(&m->accept_list)) {
			ready = true;
			break;
		}
	}
	spin_unlock(&g->lock);
	return ready;
}

/*
 * A plain TCP client of redirected listener @sk: wrap @newtcp in an AF_SD
 * socket, shown by sdctl as a TCP fallback.  Called with @sk locked.
 */
static int sd_accept_tcp(struct sock *sk, struct socket *newtcp,
			 struct sock **childp)
{
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sock *child;

	child = sd_sk_alloc(sock_net(sk), NULL, 0);
	if (!child) {
		sock_release(newtcp);
		return -ENOMEM;
	}
	sd_tcp_adopt(child, newtcp, sk);
	sd_set_state(child, TCP_ESTABLISHED);
	spin_lock(&sn->bind_lock);
	sd_hash(sn, child);
	spin_unlock(&sn->bind_lock);
	sd_stat_inc(sock_net(sk), SD_STAT_FALLBACK_TCP_CLIENT);
	*childp = child;
	return 0;
}

int sd_accept(struct socket *sock, struct socket *newsock, int flags,
	      bool kern)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sock *sk = sock->sk;
	struct socket *newtcp = NULL;
	struct sock *child = NULL;
	long timeo;
	int err;

	/* A fallen-back socket never listens as AF_SD: TCP's EINVAL. */
	if (sd_tcp_sock(sk))
		return -EINVAL;
	lock_sock(sk);
	timeo = sock_rcvtimeo(sk, flags & O_NONBLOCK);
	add_wait_queue(sk_sleep(sk), &wait);
	for (;;) {
		err = -EINVAL;
		if (sk->sk_state != TCP_LISTEN)
			break;
		child = sd_accept_dequeue(sk);
		if (child) {
			err = 0;
			break;
		}
		/* A redirected listener's plain TCP clients come next. */
		err = sd_tcp_accept(sk, &newtcp);
		if (err != -EAGAIN)
			break;
		if (!timeo)
			break;
		err = sock_intr_errno(timeo);
		if (signal_pending(current))
			break;
		sk_wait_event(sk, &timeo,
			      sd_accept_ready(sk) || sd_tcp_accept_ready(sk),
			      &wait);
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	if (!err && newtcp)
		err = sd_accept_tcp(sk, newtcp, &child);
	release_sock(sk);
	if (err)
		return err;

	if (!newtcp)
		wake_up_interruptible(&sd_net(sock_net(sk))->backlog_wait);
	sd_stat_inc(sock_net(sk), SD_STAT_ACCEPTS);

	lock_sock(child);
	/* The accepting process owns it now (sdctl shows it). */
	put_pid(sd_sk(child)->owner);
	sd_sk(child)->owner = get_task_pid(current, PIDTYPE_TGID);
	sd_sk(child)->gid = current_fsgid();
	sock_graft(child, newsock);
	newsock->state = SS_CONNECTED;
	if (newtcp)
		sd_tcp_graft(child, newsock);
	release_sock(child);
	return 0;
}

/* ---- connections ---------------------------------------------------- */

void sd_conn_put(struct sd_conn *conn)
{
	if (!refcount_dec_and_test(&conn->ref))
		return;
	sd_ring_free(&conn->ring[0]);
	sd_ring_free(&conn->ring[1]);
	kfree(conn);
}

/*
 * Ring size from SO_SNDBUF/SO_RCVBUF when the user set one on @sk, else
 * the sysctl.
 */
static u32 sd_ring_size(struct net *net, struct sock *sk, bool tx)
{
	int def = READ_ONCE(sd_net(net)->ring_size);
	int want = def;

	if (tx && (sk->sk_userlocks & SOCK_SNDBUF_LOCK))
		want = READ_ONCE(sk->sk_sndbuf) / 2;
	else if (!tx && (sk->sk_userlocks & SOCK_RCVBUF_LOCK))
		want = READ_ONCE(sk->sk_rcvbuf) / 2;
	want = clamp_t(int, want, SD_RING_MIN_SIZE,
		       max(def, READ_ONCE(sd_net(net)->ring_size_max)));
	return roundup_pow_of_two(want);
}

/*
 * A new connection whose end 0 is @sk: rings sized from @sk and the
 * sysctls, or @size0 and @size1 (bytes of the data area of the ring end 0
 * produces, and of the other) when not 0.
 */
static struct sd_conn *sd_conn_alloc_sized(struct net *net, struct sock *sk,
					   u32 size0, u32 size1)
{
	struct sd_conn *conn;
	int err;

	conn = kzalloc(sizeof(*conn),
		       GFP_KERNEL_ACCOUNT | __GFP_NORETRY | __GFP_NOWARN);
	if (!conn)
		return NULL;
	refcount_set(&conn->ref, 1);
	spin_lock_init(&conn->lock);

	err = sd_ring_alloc(&conn->ring[0],
			    size0 ? : sd_ring_size(net, sk, true));
	if (err)
		goto err_free;
	err = sd_ring_alloc(&conn->ring[1],
			    size1 ? : sd_ring_size(net, sk, false));
	if (err)
		goto err_ring0;
	return conn;

err_ring0:
	sd_ring_free(&conn->ring[0]);
err_free:
	kfree(conn);
	return NULL;
}

/* Settings an accepted socket takes from its listener, as in TCP. */
static void sd_child_inherit(struct sock *child, const struct sock *lsk)
{
	child->sk_uid = lsk->sk_uid;
	child->sk_rcvtimeo = lsk->sk_rcvtimeo;
	child->sk_sndtimeo = lsk->sk_sndtimeo;
	child->sk_lingertime = lsk->sk_lingertime;
	sock_valbool_flag(child, SOCK_LINGER, sock_flag(lsk, SOCK_LINGER));
	child->sk_reuse = lsk->sk_reuse;
	child->sk_reuseport = lsk->sk_reuseport;
	child->sk_sndbuf = lsk->sk_sndbuf;
	child->sk_rcvbuf = lsk->sk_rcvbuf;
	child->sk_userlocks = lsk->sk_userlocks;
	sd_sk(child)->nodelay = sd_sk(lsk)->nodelay;
	sd_sk(child)->recvmsg_inq = sd_sk(lsk)->recvmsg_inq;
}

/*
 * Whether the listeners of @g take @cli, who dialled @dialled: the accept
 * rules (-ECONNREFUSED), which speak for the listener (its owner, its
 * address, the one dialled when it listens on a wildcard), the client as
 * remote.  Sets *@srv to that address.
 */
static int sd_accept_allowed(struct net *net, struct sd_group *g,
			     const struct sd_addr *dialled,
			     const struct sd_addr *cli, struct sd_addr *srv)
{
	kgid_t gid = GLOBAL_ROOT_GID;

	srv->addr = sd_addr_any(&g->addr.addr) ? dialled->addr : g->addr.addr;
	srv->port = g->addr.port;
	spin_lock(&g->lock);
	if (!list_empty(&g->members)) {
		struct sd_sock *m = list_first_entry(&g->members,
						     struct sd_sock, group_node);

		gid = m->gid;
	}
	spin_unlock(&g->lock);
	if (sd_policy_allows(net, SD_DIR_ACCEPT, g->uid, gid, srv, cli))
		return 0;
	sd_stat_inc(net, SD_STAT_DENIED_ACCEPT);
	return -ECONNREFUSED;
}

/*
 * Undo sd_child_new() and the connection's creation: nobody but us (and
 * sdctl) has seen either.
 */
static void sd_child_unmake(struct sock *child, struct sd_conn *conn)
{
	sd_unhash(child);
	RCU_INIT_POINTER(conn->end[0], NULL);
	RCU_INIT_POINTER(conn->end[1], NULL);
	sd_sk(child)->conn = NULL;
	sd_conn_put(conn);
	sd_conn_put(conn);
	sock_put(child);
}

/*
 * The server end of a new connection to group @g: @srv its address, @cli
 * the client's; it takes a reference on @conn and is hashed (sdctl sees
 * it), but not yet queued.
 */
static struct sock *sd_child_new(struct net *net, struct sd_group *g,
				 struct sd_conn *conn,
				 const struct sd_addr *srv,
				 const struct sd_addr *cli)
{
	struct sd_net *sn = sd_net(net);
	struct sd_sock *cs;
	struct sock *child;

	child = sd_sk_alloc(net, NULL, 0);
	if (!child)
		return NULL;
	cs = sd_sk(child);

	cs->local = *srv;
	cs->peer = *cli;
	cs->side = 1;
	cs->conn = conn;
	refcount_inc(&conn->ref);
	rcu_assign_pointer(conn->end[1], child);
	sd_set_state(child, TCP_ESTABLISHED);

	/* Take the listener's settings from any member. */
	spin_lock(&g->lock);
	if (!list_empty(&g->members)) {
		struct sd_sock *m = list_first_entry(&g->members,
						     struct sd_sock, group_node);

		sd_child_inherit(child, &m->sk);
		cs->family = m->family;
		cs->redirected = m->redirected;
	}
	spin_unlock(&g->lock);

	spin_lock(&sn->bind_lock);
	sd_hash(sn, child);
	spin_unlock(&sn->bind_lock);
	return child;
}

/* A connection the link daemon carries, as it is made (sd_link.c). */
struct sd_link_made {
	u64	id;		/* conn->link_id */
	u8	end;		/* the daemon's: conn->link_end */
	u32	size0;		/* its rings' sizes (sd_conn_alloc_sized()) */
	u32	size1;
};

/*
 * Build a connection from @sk to the group @g: the server end, the rings,
 * and a place in a listener's queue; @lm says how the link daemon carries
 * it, NULL for a local one.  Waits for room in a full backlog unless
 * @timeo is 0 (then -EAGAIN).  Called with @sk locked; the lock is
 * dropped while waiting, with the socket in TCP_SYN_SENT and SS_CONNECTING
 * meanwhile.
 */
static int sd_conn_establish(struct sock *sk, struct sd_group *g,
			     const struct sd_addr *dst,
			     const struct sd_link_made *lm, long *timeo)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sd_sock *ss = sd_sk(sk), *cs;
	struct net *net = sock_net(sk);
	struct sd_net *sn = sd_net(net);
	struct sd_conn *conn;
	struct sock *child;
	bool waited = false;
	struct sd_addr srv;
	int err;

	err = sd_accept_allowed(net, g, dst, &ss->local, &srv);
	if (err)
		return err;

	conn = sd_conn_alloc_sized(net, sk, lm ? lm->size0 : 0,
				   lm ? lm->size1 : 0);
	if (!conn)
		return -ENOMEM;
	if (lm) {
		conn->link_id = lm->id;
		conn->link_end = lm->end;
	}
	child = sd_child_new(net, g, conn, &srv, &ss->local);
	if (!child) {
		sd_conn_put(conn);
		return -ENOMEM;
	}
	cs = sd_sk(child);

	ss->peer = *dst;
	ss->peer.addr = cs->local.addr;
	ss->side = 0;
	rcu_assign_pointer(conn->end[0], sk);

	add_wait_queue(&sn->backlog_wait, &wait);
	for (;;) {
		err = sd_group_enqueue(g, child);
		if (err == -EAGAIN)
			sd_stat_inc(net, SD_STAT_BACKLOG_FULL);
		if (err != -EAGAIN || !*timeo)
			break;
		err = sock_intr_errno(*timeo);
		if (signal_pending(current))
			break;
		/*
		 * The lock goes while we wait: from here on the socket is
		 * connecting, as a TCP socket in SYN_SENT, so that every
		 * other call sees a connect in progress (listen and bind
		 * EINVAL, connect EALREADY, poll nothing) and shutdown
		 * aborts it.
		 */
		if (!waited) {
			waited = true;
			ss->connect_waits = true;
			sd_set_state(sk, TCP_SYN_SENT);
			sk->sk_socket->state = SS_CONNECTING;
		}
		release_sock(sk);
		*timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, *timeo);
		lock_sock(sk);
		if (ss->connect_abort) {
			/* sd_shutdown() aborted it meanwhile. */
			err = sock_error(sk) ? : -ECONNRESET;
			break;
		}
		err = -EAGAIN;
	}
	remove_wait_queue(&sn->backlog_wait, &wait);
	if (waited) {
		/*
		 * Only this call moves the socket out of SYN_SENT (see
		 * connect_waits).  The caller says connected, or not, and
		 * wakes the calls that wait for this connect's end
		 * (sd_connect_wait()).
		 */
		ss->connect_waits = false;
		ss->connect_abort = false;
		sd_set_state(sk, TCP_CLOSE);
		sk->sk_socket->state = SS_UNCONNECTED;
		if (err)
			sk->sk_state_change(sk);
	}
	if (!err) {
		/* Lockless readers (mmap) load it with acquire. */
		smp_store_release(&ss->conn, conn);
		return 0;
	}

	sd_child_unmake(child, conn);
	return err;
}

/* A non-blocking connect to another host, in the background. */
struct sd_connect_job {
	struct work_struct	work;
	struct file		*file;		/* held: the socket's */
	struct sock		*sk;
	struct sd_link_wait	lw;		/* the link daemon's verdict */
	u8			undo;		/* sd_link_bind()'s */
	struct sd_addr		dst;
	kuid_t			uid;
	kgid_t			gid;
	int			addr_len;
	struct sockaddr_storage	addr;		/* for TCP's connect */
};

static int sd_connect_tcp(struct sock *sk, struct sockaddr *uaddr,
			  int addr_len, int flags, u8 reason,
			  const struct sd_addr *dst);
static void sd_wake(struct sock *sk);

/*
 * The end of a background connect that made no connection: @err for
 * SO_ERROR and poll.  Called with @sk locked.
 */
static void sd_connect_failed(struct sock *sk, int err)
{
	if (err == -ECONNREFUSED)
		WRITE_ONCE(sk->sk_shutdown, SHUTDOWN_MASK);
	sd_set_state(sk, TCP_CLOSE);
	WRITE_ONCE(sk->sk_err, -err);
	sk_error_report(sk);
}

/* The background connect ended, its outcome in place (pairs: sd_poll()). */
static void sd_connect_done(struct sd_sock *ss)
{
	/* The state, connection and error before the flag. */
	smp_store_release(&ss->connect_bg, false);
}

/*
 * A background connect starts: the socket is connecting, with connect_bg
 * keeping the other calls off it until its end (sd_connect_bg_end()):
 * poll says nothing until then, and sends, receives and shutdown wait
 * for it (EAGAIN when non-blocking); bind and listen find it bound or
 * connecting.  Called with @sk locked.
 */
static void sd_connect_begin(struct sock *sk)
{
	WRITE_ONCE(sd_sk(sk)->connect_bg, true);
	sd_set_state(sk, TCP_SYN_SENT);
	sk->sk_socket->state = SS_CONNECTING;
}

/*
 * The end of a background connect, with @sk locked: @err 0 connected
 * (poll finds it writable, the next connect returns 0), 1 over TCP for
 * @reason (whose own non-blocking connect goes on from here), or the
 * error for SO_ERROR.  Unlocks, wakes, and frees @job.
 */
static void sd_connect_bg_end(struct sd_connect_job *job, int err,
			      u8 reason)
{
	struct sock *sk = job->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp;

	if (!err) {
		sd_stat_inc(sock_net(sk), SD_STAT_CONNECTS);
		sd_connect_done(ss);
		release_sock(sk);
		goto out;
	}
	if (err < 0) {
		sd_connect_failed(sk, err);
		sd_connect_done(ss);
		release_sock(sk);
		goto out;
	}
	sd_set_state(sk, TCP_CLOSE);
	/*
	 * Unlocks; TCP's connect goes on without us.  The background
	 * connect ends only once the socket is TCP's and connecting: until
	 * then poll says nothing (pairs: sd_poll()).
	 */
	err = sd_connect_tcp(sk, (struct sockaddr *)&job->addr, job->addr_len,
			     O_NONBLOCK, reason, &job->dst);
	if (err && err != -EINPROGRESS) {
		/* It failed at once: SO_ERROR says so, as poll does. */
		lock_sock(sk);
		tcp = sd_tcp_sock(sk);
		if (tcp) {
			WRITE_ONCE(tcp->sk->sk_err, -err);
			sk_error_report(tcp->sk);
		} else {
			sd_connect_failed(sk, err);
		}
		release_sock(sk);
	}
	sd_connect_done(ss);
out:
	sd_wake(sk);
	/* The file last: its release may free the socket (it held sk). */
	fput(job->file);
	kfree(job);
}

/*
 * A background connect's job, of @sk to @dst (@uaddr for TCP's), ending
 * in @fn.
 */
static void sd_connect_job_init(struct sd_connect_job *job, struct sock *sk,
				struct sockaddr *uaddr, int addr_len,
				const struct sd_addr *dst, work_func_t fn)
{
	job->dst = *dst;
	sd_current_ids(&job->uid, &job->gid);
	/* sys_connect copied at most a sockaddr_storage. */
	job->addr_len = min_t(int, addr_len, sizeof(job->addr));
	memcpy(&job->addr, uaddr, job->addr_len);
	/*
	 * The file, not only the socket: a close meanwhile must not release
	 * the TCP socket that the work may connect (the connect call holds
	 * the file the same way).
	 */
	job->file = get_file(sk->sk_socket->file);
	job->sk = sk;
	INIT_WORK(&job->work, fn);
}

/*
 * A redirected socket found no AF_SD peer (@reason): it becomes its TCP
 * socket, which connects.  Called with @sk locked; returns unlocked: the
 * error that kept it from switching, or TCP's answer to the connect.
 */
static int sd_connect_tcp(struct sock *sk, struct sockaddr *uaddr,
			  int addr_len, int flags, u8 reason,
			  const struct sd_addr *dst)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sd_addr local;
	struct socket *tcp;
	int err, cerr;

	err = sd_tcp_switch(sk, reason, uaddr, addr_len, &cerr);
	release_sock(sk);
	if (err)
		return err;
	tcp = ss->tcp;
	err = cerr;
	/*
	 * The AF_SD socket is unlocked: a blocking connect waits in TCP,
	 * whose connect of a connecting socket waits for its end.  It says
	 * EALREADY where the first call would have said EINPROGRESS (its
	 * SO_SNDTIMEO ran out).
	 */
	if (err == -EINPROGRESS && !(flags & O_NONBLOCK)) {
		err = tcp->ops->connect(tcp, uaddr, addr_len, flags);
		if (err == -EALREADY)
			err = -EINPROGRESS;
	}
	if (err && err != -EINPROGRESS)
		return err;

	/* Into the table, for sdctl: the addresses are TCP's. */
	if (sd_tcp_name(tcp, false, &local))
		return err;
	lock_sock(sk);
	spin_lock(&sn->bind_lock);
	ss->peer = *dst;
	if (ss->bound) {
		ss->local.addr = local.addr;
	} else {
		ss->local = local;
		sd_hash(sn, sk);
	}
	spin_unlock(&sn->bind_lock);
	release_sock(sk);
	return err;
}

/* The source address a packet from this namespace to @dst would carry. */
static int sd_route_src(struct net *net, const struct in6_addr *dst,
			struct in6_addr *src)
{
	if (sd_addr_is_v4(dst)) {
		struct flowi4 fl4 = { .daddr = dst->s6_addr32[3] };
		struct rtable *rt = ip_route_output_key(net, &fl4);

		if (IS_ERR(rt))
			return PTR_ERR(rt);
		ip_rt_put(rt);
		ipv6_addr_set_v4mapped(fl4.saddr, src);
		return 0;
	}
#if IS_ENABLED(CONFIG_IPV6)
	return ipv6_dev_get_saddr(net, NULL, dst, 0, src);
#else
	return -EAFNOSUPPORT;
#endif
}

/*
 * Connect @sk to another host's @dst through the link daemon: into the
 * queue of its listener @via, as a local connect, whose peer then shows
 * @dst, with the rings of the daemon's answer @w (the sizes it was told,
 * which the other host mirrors).  0 when connected.  @nonblock: no wait
 * for room in its backlog (a background connect).  Called with @sk locked.
 */
static int sd_connect_via(struct sock *sk, const struct sd_addr *dst,
			  const struct sd_link_wait *w, bool nonblock)
{
	struct sock *via = w->via;
	struct sd_sock *ss = sd_sk(sk), *ls = sd_sk(via);
	struct sd_link_made lm = {
		.id = w->id, .end = 1, .size0 = w->tx_size, .size1 = w->rx_size,
	};
	long timeo = sock_sndtimeo(sk, nonblock);
	struct sd_group *g = NULL;
	struct sd_addr any = {}, srv;
	bool autobound = false;
	int err;

	/* Two sockets of one class: the listener nests in the client. */
	lock_sock_nested(via, SINGLE_DEPTH_NESTING);
	if (via->sk_state == TCP_LISTEN && ls->group) {
		g = ls->group;
		refcount_inc(&g->ref);
		srv = ls->local;
	}
	release_sock(via);
	if (!g)
		return -ECONNREFUSED;
	/* A wildcard listener is reached at loopback, as any local one. */
	sd_addr_any_to_loopback(&srv.addr);

	if (!ss->bound) {
		err = sd_route_src(sock_net(sk), &dst->addr, &any.addr);
		if (err)
			goto out;
		err = sd_autobind(sk, ss->redirected, &any, true);
		if (err)
			goto out;
		autobound = true;
	}
	err = sd_conn_establish(sk, g, &srv, &lm, &timeo);
	if (err) {
		if (autobound)
			sd_autounbind(sk);
		goto out;
	}
	sd_stat_inc(sock_net(sk), SD_STAT_LINK_VIA);
	ss->peer = *dst;
	sd_set_state(sk, TCP_ESTABLISHED);
	sk->sk_state_change(sk);
out:
	sd_group_put(g);
	return err;
}

/**
 * sd_conn_link_incoming - connect the link daemon's socket to a listener
 * @sk: the daemon's socket, unbound and unconnected: its end
 * @srv: the address that a program of another host dialled
 * @cli: that program's address
 * @uid: its user, as the daemons proved it
 * @gid: likewise
 * @tx_size: bytes of the ring @sk produces (0: as any connection)
 * @rx_size: bytes of the other
 * @id: the connection's id (SD_LINK_ID)
 *
 * For SD_LINK_CMD_INCOMING.  This host's connect rules see the remote
 * user (local @cli, remote @srv), as its own host's did, then the accept
 * rules the listener, with @cli as the client, whose address the accepted
 * socket shows as its peer.  @sk takes @cli as its own address, with no
 * place in the bind table: the port is the other host's.  Never waits.
 * Returns 0 when queued, -ECONNREFUSED (no AF_SD listener at @srv, or TCP
 * would give that host's connection to a plain TCP listener),
 * -EACCES (a connect or accept rule refuses), -EOPNOTSUPP (a connect rule
 * says TCP), -EAGAIN (the backlog is full), -EISCONN or -EINVAL (@sk
 * cannot be the end), -ENOMEM.
 */
int sd_conn_link_incoming(struct sock *sk, const struct sd_addr *srv,
			  const struct sd_addr *cli, kuid_t uid, kgid_t gid,
			  u32 tx_size, u32 rx_size, u64 id)
{
	struct sd_link_made lm = {
		.id = id, .end = 0, .size0 = tx_size, .size1 = rx_size,
	};
	struct net *net = sock_net(sk);
	struct sd_sock *ss = sd_sk(sk);
	struct sd_group *g;
	struct sd_addr a;
	long timeo = 0;
	int err;

	lock_sock(sk);
	err = -EISCONN;
	if (ss->conn || sk->sk_state != TCP_CLOSE ||
	    sk->sk_socket->state != SS_UNCONNECTED)
		goto out;
	err = -EINVAL;
	if (ss->bound || ss->redirected || ss->group || sd_tcp_sock(sk) ||
	    READ_ONCE(ss->connect_bg) ||
	    sd_addr_any(&cli->addr) || sd_addr_any(&srv->addr))
		goto out;

	switch (sd_policy_verdict(net, SD_DIR_CONNECT, uid, gid, cli, srv)) {
	case SD_ACTION_ALLOW:
		break;
	case SD_ACTION_TCP:
		err = -EOPNOTSUPP;
		goto out;
	default:
		sd_stat_inc(net, SD_STAT_DENIED_CONNECT);
		err = -EACCES;
		goto out;
	}
	err = -ECONNREFUSED;
	if (!sd_addr_local(net, &srv->addr))
		goto out;
	g = sd_group_lookup(sd_net(net), srv);
	if (!g)
		goto out;
	/*
	 * Where TCP's SYN from that host would go to a plain TCP listener,
	 * so does the connection: the other host connects over TCP
	 * (decision 12, as for a local redirected client).
	 */
	if (sd_tcp_takes_it_elsewhere(net, g, cli, srv))
		goto put;
	/*
	 * Asked here too, so that a refusal says EACCES: later, in
	 * sd_conn_establish(), ECONNREFUSED means the listener went.
	 */
	err = sd_accept_allowed(net, g, srv, cli, &a);
	if (err) {
		err = -EACCES;
		goto put;
	}
	ss->local = *cli;
	ss->family = sd_addr_is_v4(&cli->addr) ? AF_INET : AF_INET6;
	err = sd_conn_establish(sk, g, srv, &lm, &timeo);
	if (err) {
		memset(&ss->local, 0, sizeof(ss->local));
		goto put;
	}
	sd_set_state(sk, TCP_ESTABLISHED);
	sk->sk_socket->state = SS_CONNECTED;
	sk->sk_state_change(sk);
	sd_stat_inc(net, SD_STAT_LINK_INCOMING);
put:
	sd_group_put(g);
out:
	release_sock(sk);
	return err;
}

/* What sd_link_bind() did, for sd_link_unbind() to undo. */
enum { SD_LINK_BOUND_NONE, SD_LINK_BOUND_PORT, SD_LINK_BOUND_ADDR };

/*
 * Before the link daemon hears of a connect of @sk to @dst: an unbound
 * socket takes the address a packet to @dst would leave from and a port,
 * one bound to the wildcard that address, as its connection through the
 * daemon will show them (and as TCP's connect would keep them).  *@undo
 * says what was done.  Called with @sk locked.
 */
static int sd_link_bind(struct sock *sk, const struct sd_addr *dst, u8 *undo)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_addr any = {};
	int err;

	*undo = SD_LINK_BOUND_NONE;
	if (ss->bound && !sd_addr_any(&ss->local.addr))
		return 0;
	err = sd_route_src(sock_net(sk), &dst->addr, &any.addr);
	if (err)
		return err;
	if (ss->bound) {
		ss->local.addr = any.addr;
		*undo = SD_LINK_BOUND_ADDR;
		return 0;
	}
	err = sd_autobind(sk, ss->redirected, &any, true);
	if (!err)
		*undo = SD_LINK_BOUND_PORT;
	return err;
}

/* A connect that made no connection gives back what sd_link_bind() took. */
static void sd_link_unbind(struct sock *sk, u8 undo)
{
	if (undo == SD_LINK_BOUND_PORT)
		sd_autounbind(sk);
	else if (undo == SD_LINK_BOUND_ADDR)
		memset(&sd_sk(sk)->local.addr, 0, sizeof(struct in6_addr));
}

/*
 * What the link daemon's answer @w makes of a connect of @sk to @dst: 0
 * connected through the daemon, 1 to go over TCP for *@reason, or -errno
 * (-ECONNREFUSED: refused).  Drops the answer's ref on its listener.
 * Called with @sk locked.
 */
static int sd_link_outcome(struct sock *sk, const struct sd_addr *dst,
			   struct sd_link_wait *w, bool nonblock, u8 *reason)
{
	int err;

	switch (w->verdict) {
	case SD_LINK_TCP:
		*reason = w->reason;
		return 1;
	case SD_LINK_REFUSE:
		return -ECONNREFUSED;
	case SD_LINK_VIA:
		err = sd_connect_via(sk, dst, w, nonblock);
		sock_put(w->via);
		w->via = NULL;
		/*
		 * The daemon's listener went, or its queue stayed full: the
		 * daemon failed this one, and TCP takes it as after a failed
		 * exchange (a signal still ends the call).
		 */
		if (err == -ECONNREFUSED || err == -EAGAIN) {
			*reason = err == -EAGAIN ? SD_FALLBACK_BUSY :
						   SD_FALLBACK_HANDSHAKE;
			return 1;
		}
		return err;
	}
	/*
	 * A daemon that does not answer in time is a failed rendezvous; one
	 * that went leaves the connect to TCP, as if there were none.
	 */
	if (w->expired) {
		sd_stat_inc(sock_net(sk), SD_STAT_LINK_TIMEOUTS);
		*reason = SD_FALLBACK_HANDSHAKE;
	} else {
		*reason = SD_FALLBACK_REMOTE;
	}
	return 1;
}

/*
 * This host's connect rules on a connect of @sk (from its bound address)
 * to @dst, by @uid and @gid: 0 to go on, 1 for TCP (a rule says so,
 * *@reason; only a redirected socket has TCP to go to), -EACCES when a
 * rule refuses (the caller lacks the right: not a refusal).
 */
static int sd_connect_rules(struct sock *sk, const struct sd_addr *dst,
			    kuid_t uid, kgid_t gid, u8 *reason)
{
	struct net *net = sock_net(sk);

	switch (sd_policy_verdict(net, SD_DIR_CONNECT, uid, gid,
				  &sd_sk(sk)->local, dst)) {
	case SD_ACTION_ALLOW:
		return 0;
	case SD_ACTION_TCP:
		if (sd_sk(sk)->redirected) {
			*reason = SD_FALLBACK_POLICY;
			return 1;
		}
		fallthrough;
	default:
		sd_stat_inc(net, SD_STAT_DENIED_CONNECT);
		return -EACCES;
	}
}

/*
 * A redirected blocking connect to another host, in a namespace whose
 * link daemon serves it (sd_link.c): the daemon's verdict, as
 * sd_link_outcome() says, waited for up to SO_SNDTIMEO and the
 * rendezvous's own bound.  @nonblock: a kernel socket's non-blocking
 * connect, which has no file for a background job: the daemon only hears
 * of it, and it goes over TCP now (peer_unknown).  Called with @sk locked;
 * other calls on the socket wait for it.
 */
static int sd_connect_link(struct sock *sk, const struct sd_addr *dst,
			   bool nonblock, u8 *reason)
{
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sd_link_wait w = {};
	long timeo = 0;
	u8 undo;
	kuid_t uid;
	kgid_t gid;
	int err;

	if (!nonblock)
		timeo = min_t(long, sock_sndtimeo(sk, false),
			      msecs_to_jiffies(READ_ONCE(sn->rdv_timeout_ms)));
	err = sd_link_bind(sk, dst, &undo);
	if (err)
		return err;
	sd_current_ids(&uid, &gid);
	err = sd_connect_rules(sk, dst, uid, gid, reason);
	if (err)
		goto out;
	w.tx_size = sd_ring_size(sock_net(sk), sk, true);
	w.rx_size = sd_ring_size(sock_net(sk), sk, false);
	err = sd_link_ask(sock_net(sk), &sd_sk(sk)->local, dst, uid, gid,
			  timeo, &w);
	if (err == -ENOENT) {
		*reason = SD_FALLBACK_REMOTE;
		err = 1;
	} else if (!err && nonblock && !w.verdict) {
		*reason = SD_FALLBACK_PEER_UNKNOWN;
		err = 1;
	} else if (!err) {
		err = sd_link_outcome(sk, dst, &w, false, reason);
	}
out:
	/* TCP keeps the port; anything else but a connection gives it up. */
	if (err < 0)
		sd_link_unbind(sk, undo);
	return err;
}

/* A background connect's verdict came (or none will): its end. */
static void sd_connect_link_work(struct work_struct *work)
{
	struct sd_connect_job *job = container_of(work, struct sd_connect_job,
						  work);
	struct sock *sk = job->sk;
	u8 reason = SD_FALLBACK_REMOTE;
	int err;

	sd_link_async_end(sock_net(sk), &job->lw);
	lock_sock(sk);
	err = sd_link_outcome(sk, &job->dst, &job->lw, true, &reason);
	/* As in sd_connect_link(). */
	if (err < 0)
		sd_link_unbind(sk, job->undo);
	sd_connect_bg_end(job, err, reason);
}

/*
 * A redirected non-blocking connect to another host, in a namespace
 * whose link daemon serves it: EINPROGRESS, and the daemon's verdict (or
 * the rendezvous's bound running out) ends it in the background.  1 for
 * TCP now (*@reason): a connect rule says so, or no daemon serves the
 * namespace after all.  Called with @sk locked.
 */
static int sd_connect_link_async(struct sock *sk, struct sockaddr *uaddr,
				 int addr_len, const struct sd_addr *dst,
				 u8 *reason)
{
	struct sd_net *sn = sd_net(sock_net(sk));
	struct sd_connect_job *job;
	int err;

	job = kzalloc(sizeof(*job), GFP_KERNEL_ACCOUNT);
	if (!job)
		return -ENOMEM;
	err = sd_link_bind(sk, dst, &job->undo);
	if (err) {
		kfree(job);
		return err;
	}
	sd_connect_job_init(job, sk, uaddr, addr_len, dst,
			    sd_connect_link_work);
	err = sd_connect_rules(sk, dst, job->uid, job->gid, reason);
	if (err)
		goto out;
	job->lw.tx_size = sd_ring_size(sock_net(sk), sk, true);
	job->lw.rx_size = sd_ring_size(sock_net(sk), sk, false);
	sd_connect_begin(sk);
	err = sd_link_ask_async(sock_net(sk), &sd_sk(sk)->local, dst,
				job->uid, job->gid,
				msecs_to_jiffies(READ_ONCE(sn->rdv_timeout_ms)),
				&job->lw, &job->work);
	if (!err)
		return -EINPROGRESS;
	/* Not started: as before the call (the caller holds the file too). */
	sd_set_state(sk, TCP_CLOSE);
	sk->sk_socket->state = SS_UNCONNECTED;
	sd_connect_done(sd_sk(sk));
	if (err == -ENOENT) {
		*reason = SD_FALLBACK_REMOTE;
		err = 1;
	}
out:
	if (err < 0)
		sd_link_unbind(sk, job->undo);
	fput(job->file);
	kfree(job);
	return err;
}

/*
 * Wait, up to SO_SNDTIMEO, for another thread's connect that waits for
 * backlog room (sd_conn_establish()) to end.  0 when it ended (or the time
 * ran out), or the error of a signal.  Called with @sk locked.
 */
static int sd_connect_wait(struct sock *sk)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	long timeo = sock_sndtimeo(sk, false);
	int err = 0;

	add_wait_queue(sk_sleep(sk), &wait);
	while (sk->sk_state == TCP_SYN_SENT && timeo) {
		if (signal_pending(current)) {
			err = sock_intr_errno(timeo);
			break;
		}
		sk_wait_event(sk, &timeo, sk->sk_state != TCP_SYN_SENT, &wait);
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	return err;
}

int sd_connect(struct socket *sock, struct sockaddr *uaddr, int addr_len,
	       int flags)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct net *net = sock_net(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	bool nonblock = flags & O_NONBLOCK;
	bool autobound = false;
	u8 reason = SD_FALLBACK_NONE;
	struct sd_group *g;
	kuid_t uid;
	kgid_t gid;
	sa_family_t family;
	struct sd_addr dst;
	long timeo;
	int err;

	if (tcp)
		return tcp->ops->connect(tcp, uaddr, addr_len, flags);
	/* Its end is the background job's (sd_connect_link_work()). */
	if (READ_ONCE(ss->connect_bg))
		return -EALREADY;
	lock_sock(sk);
	/*
	 * A connect of another thread may have fallen back while this one
	 * waited for the lock: the TCP socket answers, as it answers every
	 * call made from now on.  (Switching twice would also drop the
	 * SIGIO list that the TCP socket gathered in between.)
	 */
	tcp = sd_tcp_sock(sk);
	if (tcp) {
		release_sock(sk);
		return tcp->ops->connect(tcp, uaddr, addr_len, flags);
	}
	switch (sock->state) {
	case SS_CONNECTED:
		err = -EISCONN;
		goto out;
	case SS_CONNECTING:
		/*
		 * A connect of another thread is in progress (waiting for
		 * backlog room, or the daemon's verdict), or a non-blocking
		 * connect was told EINPROGRESS: report.
		 */
		if (ss->connect_bg) {
			err = -EALREADY;
			goto out;
		}
		/* As TCP's: a blocking one waits for the other's end. */
		if (sk->sk_state == TCP_SYN_SENT && !nonblock)
			err = sd_connect_wait(sk);
		if (sk->sk_state == TCP_SYN_SENT) {
			err = err ? : -EALREADY;
		} else if (ss->conn && sk->sk_state != TCP_CLOSE) {
			sock->state = SS_CONNECTED;
			err = 0;
		} else {
			err = sock_error(sk) ? : -ECONNABORTED;
			sock->state = SS_UNCONNECTED;
		}
		goto out;
	default:
		break;
	}
	err = -EISCONN;
	if (sk->sk_state != TCP_CLOSE || ss->conn)
		goto out;

	err = sd_addr_parse(ss, uaddr, addr_len, &dst, &family);
	if (err)
		goto out;
	/* A new attempt after a refused one starts afresh, as in TCP. */
	WRITE_ONCE(sk->sk_shutdown, 0);

	/* Connecting to a wildcard reaches this host, as with TCP. */
	sd_addr_any_to_loopback(&dst.addr);

	err = -ECONNREFUSED;
	if (!dst.port) {
		reason = SD_FALLBACK_NO_LISTENER;
		goto refused;
	}
	if (!sd_addr_local(net, &dst.addr)) {
		/*
		 * Another host.  Only a redirected socket has a TCP path to
		 * fall back on; the link daemon, if one serves the
		 * namespace, decides which (sd_link.c).
		 */
		reason = SD_FALLBACK_REMOTE;
		if (ss->redirected && sd_link_serves(net)) {
			ss->family = family;
			if (nonblock && sock->file) {
				err = sd_connect_link_async(sk, uaddr, addr_len,
							    &dst, &reason);
				if (err <= 0)
					goto out;
				err = -ECONNREFUSED;
				goto refused;
			}
			err = sd_connect_link(sk, &dst, nonblock, &reason);
			if (!err) {
				sd_stat_inc(net, SD_STAT_CONNECTS);
				goto connected;
			}
			if (err < 0 && err != -ECONNREFUSED)
				goto out;
			if (err < 0)
				reason = SD_FALLBACK_NONE;
			err = -ECONNREFUSED;
		}
		goto refused;
	}

	if (!ss->bound) {
		struct sd_addr any = {};

		any.addr = dst.addr;
		err = sd_autobind(sk, ss->redirected ? : family, &any, true);
		if (err)
			goto out;
		autobound = true;
	} else if (sd_addr_any(&ss->local.addr)) {
		ss->local.addr = dst.addr;
	}
	ss->family = family;

	sd_current_ids(&uid, &gid);
	err = sd_connect_rules(sk, &dst, uid, gid, &reason);
	if (err > 0) {
		err = -ECONNREFUSED;
		goto refused;
	}
	if (err) {
		if (autobound)
			sd_autounbind(sk);
		goto out;
	}

	err = -ECONNREFUSED;
	g = sd_group_lookup(sd_net(net), &dst);
	if (!g) {
		reason = SD_FALLBACK_NO_LISTENER;
		if (!ss->redirected)
			sd_stat_inc(net, SD_STAT_REFUSED);
		goto refused;
	}
	/*
	 * A redirected client goes where TCP would send it (design.rst,
	 * decision 12).  It keeps its port: TCP's SYN leaves from it, so
	 * TCP's reuseport choice is the one made here.
	 */
	if (ss->redirected &&
	    sd_tcp_takes_it_elsewhere(net, g, &ss->local, &dst)) {
		sd_group_put(g);
		reason = SD_FALLBACK_TCP_LISTENER;
		autobound = false;
		goto refused;
	}

	timeo = sock_sndtimeo(sk, nonblock);
	err = sd_conn_establish(sk, g, &dst, NULL, &timeo);
	sd_group_put(g);
	if (err)
		goto refused;

	sd_set_state(sk, TCP_ESTABLISHED);
	/* Another thread's connect may wait for this one (sd_connect_wait). */
	sk->sk_state_change(sk);
	sd_stat_inc(net, SD_STAT_CONNECTS);
connected:
	if (nonblock) {
		/* As TCP: the outcome is for poll and SO_ERROR to tell. */
		sock->state = SS_CONNECTING;
		err = -EINPROGRESS;
	} else {
		sock->state = SS_CONNECTED;
	}
	goto out;

refused:
	if (autobound)
		sd_autounbind(sk);
	if (ss->redirected && reason != SD_FALLBACK_NONE)
		return sd_connect_tcp(sk, uaddr, addr_len, flags, reason, &dst);
	/* TCP's refused socket is shut both ways (tcp_done). */
	if (err == -ECONNREFUSED)
		WRITE_ONCE(sk->sk_shutdown, SHUTDOWN_MASK);
	if (nonblock && err == -ECONNREFUSED) {
		WRITE_ONCE(sk->sk_err, ECONNREFUSED);
		sock->state = SS_CONNECTING;
		sk_error_report(sk);
		err = -EINPROGRESS;
	}
out:
	release_sock(sk);
	return err;
}

/* ---- the end of a connection ----------------------------------------- */

static void sd_wake(struct sock *sk)
{
	sk->sk_state_change(sk);
	sk->sk_data_ready(sk);
	sk->sk_write_space(sk);
}

/* Wake the peer's readers (@data) or its writers. */
void sd_wake_peer(struct sock *sk, bool data)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sock *peer;

	rcu_read_lock();
	peer = rcu_dereference(ss->conn->end[!ss->side]);
	if (peer) {
		if (skwq_has_sleeper(rcu_dereference(peer->sk_wq)))
			sd_stat_inc(sock_net(sk), SD_STAT_WAKEUPS);
		if (data)
			peer->sk_data_ready(peer);
		else
			peer->sk_write_space(peer);
	}
	rcu_read_unlock();
}

/*
 * End @side of @conn leaves: its rings say so, and the other end, @peer
 * if it is on this host, sees the end of stream or the reset.  Called
 * under conn->lock and rcu_read_lock(); the caller wakes @peer.
 */
static void sd_conn_leave(struct sd_conn *conn, u8 side, struct sock *peer,
			  bool reset)
{
	WRITE_ONCE(conn->gone[side], true);
	/*
	 * RESET before FIN in the same flags word: a reader that sees the
	 * FIN sees the reset too (one location's stores are seen in order),
	 * so the link daemon reading the send ring meanwhile never carries a
	 * reset to the other host as a clean end of stream.
	 */
	if (reset) {
		WRITE_ONCE(conn->reset, true);
		sd_ring_set_flags(&conn->ring[side], SD_RING_HDR_PROD,
				  SD_RING_RESET);
		sd_ring_set_flags(&conn->ring[!side], SD_RING_HDR_CONS,
				  SD_RING_RESET);
	}
	sd_ring_set_flags(&conn->ring[side], SD_RING_HDR_PROD, SD_RING_FIN);
	sd_ring_set_flags(&conn->ring[!side], SD_RING_HDR_CONS,
			  SD_RING_CLOSED);
	if (!peer)
		return;
	if (reset) {
		WRITE_ONCE(peer->sk_err,
			   peer->sk_shutdown & RCV_SHUTDOWN ?
			   EPIPE : ECONNRESET);
		WRITE_ONCE(peer->sk_shutdown, SHUTDOWN_MASK);
		sd_set_state(peer, TCP_CLOSE);
	} else {
		WRITE_ONCE(peer->sk_shutdown,
			   peer->sk_shutdown | RCV_SHUTDOWN);
		if (peer->sk_state == TCP_ESTABLISHED)
			sd_set_state(peer, TCP_CLOSE_WAIT);
	}
}

/*
 * This end leaves the connection (the connection object itself stays with
 * the socket until release, so lockless readers never see it go).  A reset
 * (close with unread data, or SO_LINGER 0) gives the peer ECONNRESET, or
 * EPIPE if it had seen the end of stream already, as TCP's RST does; a
 * plain close gives it end of stream after the data in flight.  Called
 * with @sk locked.
 */
void sd_conn_close(struct sock *sk, bool reset)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_conn *conn = ss->conn;
	struct sock *peer;

	if (!conn || READ_ONCE(conn->gone[ss->side]))
		return;
	if (reset)
		sd_stat_inc(sock_net(sk), SD_STAT_RESETS);

	rcu_read_lock();
	spin_lock(&conn->lock);
	peer = rcu_dereference_protected(conn->end[!ss->side],
					 lockdep_is_held(&conn->lock));
	RCU_INIT_POINTER(conn->end[ss->side], NULL);
	sd_conn_leave(conn, ss->side, peer, reset);
	spin_unlock(&conn->lock);
	if (peer) {
		sd_wake(peer);
		if (reset)
			sk_error_report(peer);
	}
	rcu_read_unlock();
}

/*
 * The peer closed and this end sends anyway: TCP would accept the bytes
 * and the peer's RST would then fail the next call with EPIPE.  Do the
 * same.  Called with @sk locked.
 */
void sd_conn_peer_gone(struct sock *sk)
{
	struct sd_conn *conn = sd_sk(sk)->conn;

	spin_lock(&conn->lock);
	WRITE_ONCE(sk->sk_err, EPIPE);
	WRITE_ONCE(sk->sk_shutdown, SHUTDOWN_MASK);
	sd_set_state(sk, TCP_CLOSE);
	spin_unlock(&conn->lock);
	sk_error_report(sk);
	sd_wake(sk);
}

/*
 * A corrupt ring resets the connection, for both ends.  The caller reports
 * ECONNRESET itself; later calls see a closed socket (0 or EPIPE), as after
 * a TCP reset.
 */
void sd_conn_corrupt(struct sock *sk)
{
	net_warn_ratelimited("corrupt ring, connection reset (pid %d)\n",
			     task_pid_nr(current));
	sd_stat_inc(sock_net(sk), SD_STAT_CORRUPT);
	spin_lock(&sd_sk(sk)->conn->lock);
	WRITE_ONCE(sk->sk_shutdown, SHUTDOWN_MASK);
	sd_set_state(sk, TCP_CLOSE);
	spin_unlock(&sd_sk(sk)->conn->lock);
	sd_conn_close(sk, true);
	sd_wake(sk);
}

/* shutdown(2) on a connected socket.  Called with @sk locked. */
void sd_conn_shutdown(struct sock *sk, int how)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_conn *conn = ss->conn;
	struct sock *peer = NULL;

	rcu_read_lock();
	spin_lock(&conn->lock);
	WRITE_ONCE(sk->sk_shutdown, sk->sk_shutdown | how);
	if (how & SEND_SHUTDOWN) {
		/* Rule 5: the last record is out; then the end of stream. */
		sd_ring_set_flags(sd_tx(ss), SD_RING_HDR_PROD, SD_RING_FIN);
		peer = rcu_dereference_protected(conn->end[!ss->side],
						 lockdep_is_held(&conn->lock));
		if (peer) {
			WRITE_ONCE(peer->sk_shutdown,
				   peer->sk_shutdown | RCV_SHUTDOWN);
			if (peer->sk_state == TCP_ESTABLISHED)
				sd_set_state(peer, TCP_CLOSE_WAIT);
		}
	}
	spin_unlock(&conn->lock);
	if (peer)
		sd_wake(peer);
	rcu_read_unlock();
	sd_wake(sk);
}
