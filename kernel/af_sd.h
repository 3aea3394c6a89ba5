/* SPDX-License-Identifier: GPL-2.0 */
/*
 * AF_SD: definitions shared by the files of af_sd.ko.
 *
 * Objects and locks (outermost first; never take them the other way):
 *
 *   lock_sock(sk)          an endpoint's own state; held by every call on
 *                          that socket (and across send or receive waits
 *                          through sk_wait_event, which drops it)
 *   sd_net.bind_lock       the per-netns tables of bound sockets and of
 *                          listening groups (spinlock)
 *   sd_group.lock          membership and accept queues of one listening
 *                          group (spinlock)
 *   sd_conn.lock           the two endpoints' sk_shutdown and sk_err and
 *                          conn->end[] (spinlock)
 *
 * Apart from these, sd_link.c's sd_net.link_lock and sd_net.key_lock
 * (spinlocks; nothing is taken under either).
 *
 * A connection (struct sd_conn) joins two endpoints and owns the two rings.
 * Each endpoint holds one reference on it.  conn->end[] is published with
 * RCU: an endpoint that wakes its peer reads conn->end[] under
 * rcu_read_lock(), and every AF_SD socket is freed after a grace period
 * (SOCK_RCU_FREE), so the peer's struct sock stays valid for the wake-up
 * even while it is being closed.
 *
 * Per ring, the producing endpoint's socket lock serialises the kernel's
 * producer state and the consuming endpoint's socket lock the consumer
 * state; the two sides meet only in ring memory, by the ordering rules of
 * include/uapi/linux/sd.h.
 */
#ifndef _AF_SD_H
#define _AF_SD_H

#include <linux/in6.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/wait.h>
#include <net/sock.h>
#include <linux/sd.h>

/* The project's version, from VERSION at the top of the tree (Kbuild). */
#ifndef SD_MODULE_VERSION
#error "SD_MODULE_VERSION comes from VERSION through kernel/Kbuild"
#endif

struct sd_group;

/*
 * Pages handed over by zero-copy sends on one ring, in record order
 * (sd_zc.c).  The producer appends; consumers, one at a time (cons_lock),
 * take from the front.
 */
struct sd_zc_queue {
	struct mutex		cons_lock;	/* one consumer at a time */
	spinlock_t		lock;		/* entries, seq, queued */
	wait_queue_head_t	wait;		/* producers waiting for room */
	struct list_head	entries;	/* struct sd_zc_entry */
	u64			seq;		/* last handle given out */
	u32			queued;		/* bytes in entries */
};

/*
 * The kernel's view of one ring.  hdr and data point into the vmap of the
 * ring's pages, which user space may write at any time: read every shared
 * field once, and check it.
 */
/*
 * A ring's pages: the header page, allocated with the ring, then the data
 * pages, each NULL until first touched (by the kernel's producer, or by a
 * fault in a mapping).  A page, once there, stays until the last reference
 * goes: the ring holds one, and so does every mapping of it, which may
 * outlive the ring.  Lockless: an entry is published with cmpxchg() and
 * read with smp_load_acquire().
 */
struct sd_ring_pages {
	refcount_t	ref;
	unsigned int	nr;		/* header page and data pages */
	atomic_t	present;	/* entries not NULL */
	struct page	*page[];
};

struct sd_ring {
	struct sd_ring_pages *pages;
	unsigned int	nr_pages;
	void		*vaddr;		/* the header page */
	u32		size;		/* bytes in the data area (power of 2) */

	/* Producer state: the producing endpoint's socket lock. */
	u64		tail;
	u64		credit;		/* last credit accepted */

	/* Consumer state: the consuming endpoint's socket lock. */
	u64		head;		/* position of the current record */
	u32		rec_off;	/* bytes of it already consumed */
	u64		published;	/* last credit written to the ring */

	/*
	 * A process that drives a side through libsd (NULL: the kernel
	 * does, and the positions above are current).  Each under the lock
	 * of its side, like the positions.
	 */
	struct pid	*prod_owner;
	struct pid	*cons_owner;
	/*
	 * The owner's image (its self_exec_id when granted): a busy count
	 * an image left up when it exec()ed holds nobody.
	 */
	u64		prod_exec;
	u64		cons_exec;
	/* Where each owner's busy count is, in its memory (sd_token.busy). */
	u64		prod_busy;
	u64		cons_busy;
	u32		token_seq;	/* under conn->lock */

	struct sd_zc_queue zq;		/* zero-copy pages, this direction */
};

/*
 * Layout of a ring's first page (private: user space gets offsets).  Each
 * writer has its own pair of cache lines (128 bytes: the adjacent-line
 * prefetcher pairs them).
 */
struct sd_ring_hdr {
	u32	prod_flags;			/* producer, shared */
	u8	pad0[124];
	u64	consumer;			/* consumer, shared */
	u32	cons_flags;
	u8	pad1[116];
	u64	prod_pos;			/* producer, private */
	u8	pad2[120];
	u64	cons_pos;			/* consumer, private */
	u32	cons_off;
	u8	pad3[116];
	u32	prod_token;			/* kernel, read-mostly */
	u32	cons_token;
	u32	cons_lowat;			/* the consumer's SO_RCVLOWAT */
	u8	pad4[116];
};

#define SD_RING_HDR_PROD	0
#define SD_RING_HDR_CONS	128

/* Connection state shared by the two endpoints. */
struct sd_conn {
	refcount_t		ref;
	spinlock_t		lock;		/* end[], both sk_shutdown/sk_err */
	struct sock __rcu	*end[2];	/* 0: connecting side */
	struct sd_ring		ring[2];	/* ring[i]: end[i] produces */
	/* end[i] closed or reset: written under lock, read with READ_ONCE. */
	bool			gone[2];
	bool			reset;
	/*
	 * Carried by the link daemon (sd_link.c): made through its listener
	 * (sd_connect_via()), the waiting connect's id, or queued by its
	 * SD_LINK_CMD_INCOMING, that command's id, which the daemon reads
	 * on its end (SD_LINK_ID); never 0.  link_end is the daemon's end
	 * (1 for the first, 0 for the second).  Both set before the
	 * connection is queued, never changed.
	 */
	u64			link_id;
	u8			link_end;
};

/* Address of an endpoint: IPv4 is kept as a v4-mapped IPv6 address. */
struct sd_addr {
	struct in6_addr	addr;
	__be16		port;
};

/* One AF_SD socket.  struct sock comes first (sk_alloc sizes it). */
struct sd_sock {
	struct sock		sk;

	/* How addresses are shown: AF_INET or AF_INET6. */
	sa_family_t		family;
	bool			bound;		/* has a local port */
	bool			nodelay;	/* TCP_NODELAY, stored only */
	bool			recvmsg_inq;	/* TCP_INQ: recvmsg() tells */
	/*
	 * A non-blocking connect to another host waits in the background
	 * for the link daemon's verdict (sd_connect_begin()); written under
	 * the socket lock.
	 */
	bool			connect_bg;
	bool			v6only;		/* bound :: takes no IPv4 */
	/*
	 * A local connect waits for backlog room with the socket lock let
	 * go (sd_conn_establish()): the socket stays TCP_SYN_SENT and
	 * SS_CONNECTING until that call itself leaves, so that no other
	 * call can make it a listener or start another connect meanwhile;
	 * sd_shutdown() only asks it to stop (connect_abort).  Both under
	 * the socket lock.
	 */
	bool			connect_waits;
	bool			connect_abort;
	u8			side;		/* index in conn->end[] */

	struct sd_addr		local;
	struct sd_addr		peer;

	/* In sd_net.bind_table while bound; under bind_lock. */
	struct hlist_node	bind_node;
	/* Counted in its chain's shared (struct sd_bind_chain). */
	bool			bind_shared;

	/*
	 * The connection, from connect or accept until release: it is never
	 * cleared earlier, so a lockless reader (poll, mmap) that saw it may
	 * use it for as long as it holds the file.
	 */
	struct sd_conn		*conn;

	/* Listening: its group and accept queue; queued: the link. */
	struct sd_group		*group;
	struct list_head	group_node;	/* listener: in group->members */
	struct list_head	accept_list;	/* listener: queue head */
	struct list_head	accept_node;	/* child: link in a queue */

	/* Owner, for sdctl: the creating (or accepting) process. */
	struct pid		*owner;
	kgid_t			gid;

	/* Traffic through the kernel's path (under the socket lock). */
	u64			tx_bytes, rx_bytes;
	u64			tx_msgs, rx_msgs;

	/* One sender and one receiver at a time, for whole calls. */
	struct mutex		send_mutex;	/* whole sendmsg calls */
	struct mutex		recv_mutex;	/* whole recvmsg calls */

	/*
	 * Redirected sockets (sd_tcp.c): the family this one stands in for
	 * (0: a native AF_SD socket), and the internal TCP socket, created
	 * when first needed, written under the socket lock and released
	 * with the socket.  Once use_tcp is set (never cleared; store-
	 * release after tcp), tcp carries this socket's traffic and its
	 * file points at tcp: every call the socket still gets goes there.
	 */
	sa_family_t		redirected;
	bool			use_tcp;
	u8			fallback;	/* SD_FALLBACK_*, with use_tcp */
	bool			tcp_hooked;	/* tcp's callbacks forward */
	struct socket		*tcp;
	/* tcp's own callbacks, while tcp_hooked (sk_callback_lock). */
	void			(*tcp_data_ready)(struct sock *tsk);
	void			(*tcp_write_space)(struct sock *tsk);
	void			(*tcp_state_change)(struct sock *tsk);
	void			(*tcp_error_report)(struct sock *tsk);
};

static inline struct sd_sock *sd_sk(const struct sock *sk)
{
	return (struct sd_sock *)sk;
}

/*
 * sk_state holds TCP's state values (generic code such as SO_ACCEPTCONN
 * looks for TCP_LISTEN).  Not inet_sk_state_store(): its tracepoint reads
 * struct inet_sock, which an AF_SD socket is not.
 */
static inline void sd_set_state(struct sock *sk, int state)
{
	/* Pairs with sd_get_state(): state after what it describes. */
	smp_store_release(&sk->sk_state, state);
}

static inline int sd_get_state(const struct sock *sk)
{
	/* Pairs with sd_set_state(). */
	return smp_load_acquire(&sk->sk_state);
}

static inline struct sd_ring *sd_tx(struct sd_sock *ss)
{
	return &ss->conn->ring[ss->side];
}

static inline struct sd_ring *sd_rx(struct sd_sock *ss)
{
	return &ss->conn->ring[!ss->side];
}

/*
 * A listening group: the listeners of one address and port (several only
 * with SO_REUSEPORT).  Connections are dispatched round robin over the
 * members; an accept on an empty queue takes from a sibling's.
 */
struct sd_group {
	refcount_t		ref;
	spinlock_t		lock;		/* members, their accept queues */
	struct hlist_node	node;		/* sd_net.listen_table */
	struct sd_addr		addr;
	bool			reuseport;
	bool			v6only;		/* its :: takes no IPv4 */
	kuid_t			uid;		/* owner, for SO_REUSEPORT */
	unsigned int		nr_members;
	unsigned int		next;		/* round-robin cursor */
	struct list_head	members;	/* sd_sock.group_node */
};

/* One side of an access-control rule; absent parts match anything. */
struct sd_rule_match {
	struct in6_addr	addr;
	u8		prefix;
	bool		has_addr;
	bool		has_port;
	u16		port_min;
	u16		port_max;
};

/* An access-control rule (sd_policy.c). */
struct sd_rule {
	struct list_head	node;		/* sd_net.rules, RCU */
	struct rcu_head		rcu;
	u32			id;
	u8			action;		/* SD_ACTION_* */
	u8			dir;		/* SD_DIR_* mask */
	bool			has_uid;
	bool			has_gid;
	kuid_t			uid_min, uid_max;
	kgid_t			gid_min, gid_max;
	struct sd_rule_match	local;
	struct sd_rule_match	remote;
	atomic64_t		hits;
	char			comment[SD_RULE_COMMENT_MAX];
};

/* Per network namespace state. */
#define SD_HASH_BITS	10

struct sd_net;
struct sd_net *sd_net(const struct net *net);

/*
 * What a chain of sd_net.bind_table holds, for binds with SO_REUSEPORT:
 * when every socket there had it when hashed and has @uid, a bind by
 * another such socket cannot conflict (sd_bind_conflict()'s second rule)
 * and skips the walk, as TCP's fastreuseport buckets do.  Under bind_lock.
 */
struct sd_bind_chain {
	u32			users;		/* sockets in the chain */
	u32			shared;		/* of them, bind_shared */
	kuid_t			uid;		/* set when users was 0 */
};

struct sd_net {
	spinlock_t		bind_lock;	/* bind_table, listen_table */
	struct hlist_head	bind_table[1 << SD_HASH_BITS];
	struct sd_bind_chain	bind_chain[1 << SD_HASH_BITS];
	struct hlist_head	listen_table[1 << SD_HASH_BITS];
	/* Connects that wait for room in a full backlog. */
	wait_queue_head_t	backlog_wait;
	u32			port_rover;

	/* Access control: readers under RCU, writers hold rules_lock. */
	struct mutex		rules_lock;	/* writers of rules */
	struct list_head	rules;
	unsigned int		nr_rules;
	u32			rule_seq;

	atomic64_t		stats[__SD_STAT_MAX];

	/* sysctls (net.sd.*), see sd_sysctl.c */
	int			port_range[2];
	int			ring_size;
	int			ring_size_max;
	int			default_policy;	/* SD_ACTION_ALLOW or _DENY */
	int			redirect;
	int			zerocopy_threshold;	/* bytes; 0: off */
	int			rdv_timeout_ms;	/* bound of a daemon's verdict */
	struct ctl_table_header	*sysctl_hdr;

	/* The link daemon (sd_link.c): all under link_lock. */
	spinlock_t		link_lock;
	u32			link_portid;	/* its netlink socket, or 0 */
	u64			link_next_id;
	struct list_head	link_waits;	/* struct sd_link_wait */

	/* The fabric key (sd_link.c), never shown: key_fpr stands for it. */
	spinlock_t		key_lock;	/* key, key_len, key_fpr */
	u8			key[SD_KEY_MAX_LEN];
	u8			key_len;	/* 0: no key */
	u8			key_fpr[SD_KEY_FPR_LEN];
};

static inline void sd_stat_inc(struct net *net, enum sd_stat stat)
{
	atomic64_inc(&sd_net(net)->stats[stat]);
}

/* sd_main.c */
extern struct proto sd_proto;
extern const struct proto_ops sd_stream_ops;
struct sock *sd_sk_alloc(struct net *net, struct socket *sock, int kern);

/* sd_ring.c */
int sd_ring_alloc(struct sd_ring *ring, u32 size);
void sd_ring_free(struct sd_ring *ring);
u32 sd_ring_pages_present(const struct sd_ring *ring);
struct sd_ring_hdr *sd_ring_hdr(const struct sd_ring *ring);
int sd_ring_write(struct sd_ring *ring, struct iov_iter *from, size_t len,
		  size_t *done);
int sd_ring_read(struct sd_ring *ring, struct net *net, struct iov_iter *to,
		 size_t len, bool peek, size_t *done);
int sd_ring_readable(struct sd_ring *ring, size_t *bytes);
int sd_ring_readable_at_least(struct sd_ring *ring, size_t want);
int sd_ring_space(struct sd_ring *ring, u32 *space);
u32 sd_ring_space_hint(struct sd_ring *ring);
bool sd_ring_credit(struct sd_ring *ring, bool force);
void sd_ring_set_flags(struct sd_ring *ring, unsigned int off, u32 flags);
void sd_ring_clear_flags(struct sd_ring *ring, unsigned int off, u32 flags);
u32 sd_ring_get_flags(struct sd_ring *ring, unsigned int off);
int sd_ring_mmap(struct sd_ring *ring, struct vm_area_struct *vma);
int sd_ring_reclaim(struct sd_ring *ring, bool prod);
bool sd_ring_owner_busy(struct sd_ring *ring, bool prod, struct pid *owner);
void sd_ring_grant(struct sd_ring *ring, bool prod, struct sd_token *tok);
void sd_ring_view(struct sd_ring *ring, bool prod, u64 *pos, u32 *off);
void sd_ring_offsets(const struct sd_ring *ring, struct sd_ring_offset *off);
bool sd_ring_drained(struct sd_ring *ring);

/* sd_zc.c: zero copy */
void sd_zc_queue_init(struct sd_zc_queue *zq);
void sd_zc_queue_purge(struct sd_zc_queue *zq);
int sd_zc_init(void);
void sd_zc_exit(void);
int sd_pool_mmap(struct sock *sk, struct vm_area_struct *vma);
int sd_zc_send(struct sock *sk, struct sd_ring *ring, struct sd_zc_send *zs);
int sd_zc_recv(struct sock *sk, struct sd_ring *ring, struct sd_zc_recv *zr);
int sd_zc_read(struct sd_ring *ring, struct net *net, u64 seq, u32 len,
	       u32 off, u32 want, struct iov_iter *to, bool peek, u32 *done);

/* sd_conn.c: addresses, bind, listen, connect, accept, close */
int sd_bind(struct socket *sock, struct sockaddr *uaddr, int addr_len);
int sd_listen(struct socket *sock, int backlog);
int sd_connect(struct socket *sock, struct sockaddr *uaddr, int addr_len,
	       int flags);
int sd_accept(struct socket *sock, struct socket *newsock, int flags,
	      bool kern);
int sd_getname(struct socket *sock, struct sockaddr *uaddr, int peer);
void sd_unhash(struct sock *sk);
void sd_bind_set_reuseport(struct sock *sk, bool on);
void sd_listen_stop(struct sock *sk);
void sd_conn_put(struct sd_conn *conn);
void sd_conn_close(struct sock *sk, bool reset);
void sd_conn_shutdown(struct sock *sk, int how);
void sd_conn_peer_gone(struct sock *sk);
void sd_conn_corrupt(struct sock *sk);
void sd_wake_peer(struct sock *sk, bool data);

/* sd_data.c: send, receive, poll, ioctl, options */
int sd_sendmsg(struct socket *sock, struct msghdr *msg, size_t len);
int sd_recvmsg(struct socket *sock, struct msghdr *msg, size_t len,
	       int flags);
__poll_t sd_poll(struct file *file, struct socket *sock,
		 struct poll_table_struct *wait);
int sd_ioctl(struct socket *sock, unsigned int cmd, unsigned long arg);
int sd_setsockopt(struct socket *sock, int level, int optname,
		  sockptr_t optval, unsigned int optlen);
int sd_set_rcvlowat(struct sock *sk, int val);
int sd_getsockopt(struct socket *sock, int level, int optname,
		  char __user *optval, int __user *optlen);
int sd_mmap(struct file *file, struct socket *sock,
	    struct vm_area_struct *vma);
int sd_shutdown(struct socket *sock, int how);
bool sd_rx_unread(struct sd_sock *ss);

/* sd_tcp.c: the internal TCP socket of redirected sockets */
int sd_tcp_make(struct sock *sk, sa_family_t family, struct socket **tcp);
int sd_tcp_get(struct sock *sk, struct socket **tcp);
struct socket *sd_tcp_sock(const struct sock *sk);
void sd_tcp_sync(struct sock *sk);
int sd_tcp_name(struct socket *tcp, bool peer, struct sd_addr *a);
int sd_tcp_bind(struct sock *sk, sa_family_t family, struct sockaddr *uaddr,
		int len, bool exclusive, struct sd_addr *a);
void sd_tcp_unbind(struct sock *sk);
int sd_tcp_listen(struct sock *sk, int backlog);
void sd_tcp_listen_stop(struct sock *sk);
bool sd_tcp_accept_ready(const struct sock *sk);
int sd_tcp_accept(struct sock *sk, struct socket **newtcp);
void sd_tcp_adopt(struct sock *child, struct socket *newtcp,
		  const struct sock *lsk);
void sd_tcp_graft(struct sock *child, struct socket *newsock);
int sd_tcp_switch(struct sock *sk, u8 reason, struct sockaddr *uaddr,
		  int addr_len, int *cerr);
struct socket *sd_tcp_detach(struct sock *sk);
void sd_tcp_release(struct socket *sock, struct socket *tcp);
int sd_tcp_info(struct sock *sk, char __user *optval, int __user *optlen);
int sd_tcp_setsockopt(struct sock *sk, int level, int optname,
		      sockptr_t optval, unsigned int optlen);
int sd_tcp_getsockopt(struct sock *sk, int level, int optname,
		      char __user *optval, int __user *optlen);

/* sd_policy.c */
int sd_policy_verdict(struct net *net, unsigned int dir, kuid_t uid,
		      kgid_t gid, const struct sd_addr *local,
		      const struct sd_addr *remote);
bool sd_policy_allows(struct net *net, unsigned int dir, kuid_t uid,
		      kgid_t gid, const struct sd_addr *local,
		      const struct sd_addr *remote);
int sd_rule_insert(struct sd_net *sn, struct sd_rule *rule, u32 pos);
int sd_rule_delete(struct sd_net *sn, u32 id);
void sd_rules_flush(struct sd_net *sn);
void sd_current_ids(kuid_t *uid, kgid_t *gid);

/* sd_link.c */
int sd_link_init(void);
void sd_link_exit(void);
void sd_link_net_init(struct sd_net *sn);
void sd_link_net_exit(struct sd_net *sn);
bool sd_link_serves(struct net *net);
/*
 * A connect's wait for the link daemon's verdict, on the connecting
 * task's stack or in its background job (sd_link.c says how).
 */
struct sd_link_wait {
	struct list_head	node;		/* sd_net.link_waits */
	u64			id;
	struct completion	done;
	u8			verdict;	/* SD_LINK_*, 0: none came */
	u8			reason;
	bool			expired;	/* no verdict in time */
	struct sock		*via;		/* with a ref, for SD_LINK_VIA */
	/* The rings the connection will have, as the daemon was told. */
	u32			tx_size;
	u32			rx_size;
	/* A background connect's end, and its deadline. */
	struct work_struct	*work;
	struct timer_list	timer;
	unsigned long		claimed;	/* bit 0: work queued */
};

int sd_link_ask(struct net *net, const struct sd_addr *src,
		const struct sd_addr *dst, kuid_t uid, kgid_t gid, long timeo,
		struct sd_link_wait *w);
int sd_link_ask_async(struct net *net, const struct sd_addr *src,
		      const struct sd_addr *dst, kuid_t uid, kgid_t gid,
		      long timeo, struct sd_link_wait *w,
		      struct work_struct *work);
void sd_link_async_end(struct net *net, struct sd_link_wait *w);
int sd_conn_link_incoming(struct sock *sk, const struct sd_addr *srv,
			  const struct sd_addr *cli, kuid_t uid, kgid_t gid,
			  u32 tx_size, u32 rx_size, u64 id);

int sd_key_set(struct sd_net *sn, const u8 *key, unsigned int len);
int sd_key_del(struct sd_net *sn);
bool sd_key_get_fpr(struct sd_net *sn, u8 fpr[SD_KEY_FPR_LEN]);

/* sd_netlink.c */
int sd_netlink_init(void);
void sd_netlink_exit(void);

/* sd_sysctl.c */
int sd_sysctl_register(struct net *net, struct sd_net *sn);
void sd_sysctl_unregister(struct sd_net *sn);

#endif /* _AF_SD_H */
