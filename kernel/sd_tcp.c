// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD redirected sockets: the internal TCP socket.
 *
 * A redirected socket (SD_PROTO_INET, SD_PROTO_INET6: what libsd makes of
 * socket(AF_INET, SOCK_STREAM, 0) under sdrun) stands in for a TCP socket.
 * It keeps an ordinary TCP socket of its family beside it, as AF_SMC keeps
 * its CLC socket:
 *
 *   - bind binds it first, so the port is TCP's and so are the errors, and
 *     listen listens on it too: a redirected listener accepts AF_SD peers
 *     through its queue and plain TCP clients through this socket;
 *   - its IPPROTO_TCP, IPPROTO_IP and IPPROTO_IPV6 options are set on it
 *     and read from it, so they validate and answer as TCP's do;
 *   - a connect with no AF_SD listener to reach falls back to it: the
 *     file then points at the TCP socket (file->private_data), so every
 *     later call is TCP's own, and the few calls already inside AF_SD's
 *     operations are passed on (sd_tcp_sock()).
 *
 * Wake-ups: waiters that queued on the AF_SD socket before the switch (an
 * epoll entry made before connect, a poll in progress) would never hear
 * from the TCP socket, so its callbacks are wrapped to wake the AF_SD
 * socket's queue too; a listener's data_ready is wrapped to wake the AF_SD
 * listener's accept.  The wrappers find the AF_SD socket through the TCP
 * socket's sk_user_data, under sk_callback_lock; it is cleared, and the
 * callbacks restored, before either socket goes.  The pointer is marked
 * SK_USER_DATA_NOCOPY, so connections TCP clones from a listener start
 * with none (and get their callbacks back at accept).
 *
 * Locks: the AF_SD socket's lock is taken before the TCP socket's, never
 * the other way round.
 */
#define pr_fmt(fmt) "af_sd: " fmt

#include <linux/file.h>
#include <linux/net.h>
#include <linux/tcp.h>
#include <net/inet_connection_sock.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "af_sd.h"

/* The TCP socket that carries @sk's traffic, or NULL (lockless). */
struct socket *sd_tcp_sock(const struct sock *sk)
{
	const struct sd_sock *ss = sd_sk(sk);

	/* Pairs with the release in sd_tcp_switch(): tcp is set before. */
	if (!smp_load_acquire(&ss->use_tcp))
		return NULL;
	return ss->tcp;
}

/*
 * The internal TCP socket, of @family, created on first use.  A redirected
 * socket's carries its TCP options and its fallback; every AF_SD socket
 * that holds a port holds it through one, bound to the same address and
 * port, so that AF_SD and TCP share one port space
 * (Documentation/design.rst, decision 12).  Called with @sk locked.
 */
int sd_tcp_make(struct sock *sk, sa_family_t family, struct socket **tcp)
{
	struct sd_sock *ss = sd_sk(sk);
	int err;

	if (ss->tcp && ss->tcp->sk->sk_family != family) {
		/*
		 * A native socket's, unbound, holds nothing (a connect that
		 * failed left it): one of the new family replaces it.
		 */
		if (ss->redirected || ss->bound || ss->use_tcp)
			return -EAFNOSUPPORT;
		sd_tcp_release(NULL, sd_tcp_detach(sk));
		ss->tcp = NULL;
	}
	if (!ss->tcp) {
		/*
		 * A user socket (kern 0): it holds its netns, and security
		 * modules see it as the caller's, as if the program had
		 * made it itself (which, redirected, it believes it did).
		 */
		err = __sock_create(sock_net(sk), family, SOCK_STREAM,
				    IPPROTO_TCP, &ss->tcp, 0);
		if (err) {
			ss->tcp = NULL;
			return err;
		}
		/* Set before there was a TCP socket (sd_setsockopt()). */
		if (ss->nodelay)
			tcp_sock_set_nodelay(ss->tcp->sk);
		if (ss->recvmsg_inq) {
			int one = 1;

			ss->tcp->ops->setsockopt(ss->tcp, SOL_TCP, TCP_INQ,
						 KERNEL_SOCKPTR(&one),
						 sizeof(one));
		}
	}
	*tcp = ss->tcp;
	return 0;
}

/* A redirected socket's TCP socket, for its options.  @sk locked. */
int sd_tcp_get(struct sock *sk, struct socket **tcp)
{
	struct sd_sock *ss = sd_sk(sk);

	if (!ss->redirected)
		return -EOPNOTSUPP;
	return sd_tcp_make(sk, ss->redirected, tcp);
}

/*
 * Give the TCP socket the SOL_SOCKET settings made on the AF_SD socket (the
 * program set them there, before bind, listen or connect).  Called with @sk
 * locked.
 */
void sd_tcp_sync(struct sock *sk)
{
	struct sock *tsk = sd_sk(sk)->tcp->sk;
	bool keepalive = sock_flag(sk, SOCK_KEEPOPEN);

	lock_sock(tsk);
	tsk->sk_reuse = sk->sk_reuse;
	tsk->sk_reuseport = sk->sk_reuseport;
	tsk->sk_rcvtimeo = sk->sk_rcvtimeo;
	tsk->sk_sndtimeo = sk->sk_sndtimeo;
	if (sk->sk_userlocks & SOCK_SNDBUF_LOCK) {
		WRITE_ONCE(tsk->sk_sndbuf, READ_ONCE(sk->sk_sndbuf));
		tsk->sk_userlocks |= SOCK_SNDBUF_LOCK;
	}
	if (sk->sk_userlocks & SOCK_RCVBUF_LOCK) {
		WRITE_ONCE(tsk->sk_rcvbuf, READ_ONCE(sk->sk_rcvbuf));
		tsk->sk_userlocks |= SOCK_RCVBUF_LOCK;
	}
	sock_valbool_flag(tsk, SOCK_LINGER, sock_flag(sk, SOCK_LINGER));
	tsk->sk_lingertime = sk->sk_lingertime;
	sock_valbool_flag(tsk, SOCK_URGINLINE, sock_flag(sk, SOCK_URGINLINE));
	WRITE_ONCE(tsk->sk_rcvlowat, READ_ONCE(sk->sk_rcvlowat));
	tsk->sk_priority = sk->sk_priority;
	tsk->sk_mark = sk->sk_mark;
	tsk->sk_bound_dev_if = sk->sk_bound_dev_if;
	release_sock(tsk);
	if (keepalive && !sock_flag(tsk, SOCK_KEEPOPEN))
		sock_set_keepalive(tsk);
}

/*
 * A TCP socket's own (or, with @peer, its peer's) address as an sd_addr,
 * IPv4 as v4-mapped.  0 or TCP's error.
 */
int sd_tcp_name(struct socket *tcp, bool peer, struct sd_addr *a)
{
	struct sockaddr_storage st;
	const struct sockaddr_in *sin = (const void *)&st;
	const struct sockaddr_in6 *sin6 = (const void *)&st;
	int err;

	err = peer ? kernel_getpeername(tcp, (struct sockaddr *)&st) :
		     kernel_getsockname(tcp, (struct sockaddr *)&st);
	if (err < 0)
		return err;
	memset(a, 0, sizeof(*a));
	if (st.ss_family == AF_INET) {
		ipv6_addr_set_v4mapped(sin->sin_addr.s_addr, &a->addr);
		a->port = sin->sin_port;
	} else {
		a->addr = sin6->sin6_addr;
		a->port = sin6->sin6_port;
	}
	return 0;
}

/*
 * Bind the TCP socket (of @family, made if needed) to @uaddr and return
 * the address it got in @a: TCP picks the port for port 0, and TCP's
 * checks and errors (a port another socket holds, a privileged port) are
 * the ones the program sees.  With @exclusive the bind ignores
 * SO_REUSEADDR and SO_REUSEPORT, as TCP's own choice of a port does.
 * Called with @sk locked.
 */
int sd_tcp_bind(struct sock *sk, sa_family_t family, struct sockaddr *uaddr,
		int len, bool exclusive, struct sd_addr *a)
{
	struct socket *tcp;
	struct sock *tsk;
	int err;

	err = sd_tcp_make(sk, family, &tcp);
	if (err)
		return err;
	sd_tcp_sync(sk);
	tsk = tcp->sk;
	if (exclusive) {
		lock_sock(tsk);
		tsk->sk_reuse = SK_NO_REUSE;
		tsk->sk_reuseport = 0;
		release_sock(tsk);
	}
	err = kernel_bind(tcp, uaddr, len);
	if (exclusive)
		sd_tcp_sync(sk);
	return err ? err : sd_tcp_name(tcp, false, a);
}

/*
 * Give back the port a connect took for @sk's TCP socket, once that
 * connect failed, as TCP gives back the port its own connect took
 * (tcp_set_state() to TCP_CLOSE): a later bind, or TCP's own connect,
 * starts afresh.  Called with @sk locked.
 */
void sd_tcp_unbind(struct sock *sk)
{
	struct socket *tcp = sd_sk(sk)->tcp;
	struct sock *tsk;

	if (!tcp)
		return;
	tsk = tcp->sk;
	lock_sock(tsk);
	if (tsk->sk_state == TCP_CLOSE && inet_csk(tsk)->icsk_bind_hash) {
		inet_put_port(tsk);
		inet_sk(tsk)->inet_sport = 0;
		tsk->sk_userlocks &= ~SOCK_BINDPORT_LOCK;
	}
	release_sock(tsk);
}

/*
 * The AF_SD socket of a TCP socket, under tsk->sk_callback_lock (read).
 * The lock keeps it: sd_tcp_hook() and the unhook set and clear it with
 * the lock held for writing.  The accessor checks for an RCU reader all
 * the same (a BH-disabled section does not count for lockdep), so the
 * load is made inside one.
 */
static struct sock *sd_tcp_owner(struct sock *tsk)
{
	struct sock *sk;

	lockdep_assert_held(&tsk->sk_callback_lock);
	rcu_read_lock();
	sk = __rcu_dereference_sk_user_data_with_flags(tsk,
						       SK_USER_DATA_NOCOPY);
	rcu_read_unlock();
	return sk;
}

/* A TCP client completed its handshake: wake the AF_SD listener. */
static void sd_tcp_listen_ready(struct sock *tsk)
{
	struct sock *sk;

	read_lock_bh(&tsk->sk_callback_lock);
	sk = sd_tcp_owner(tsk);
	if (sk) {
		sd_sk(sk)->tcp_data_ready(tsk);
		sk->sk_data_ready(sk);
	}
	read_unlock_bh(&tsk->sk_callback_lock);
}

/* Wake the AF_SD socket's own waiters with @key (0: all of them). */
static void sd_tcp_forward(struct sock *sk, __poll_t key)
{
	struct socket_wq *wq;

	rcu_read_lock();
	wq = rcu_dereference(sk->sk_wq);
	if (skwq_has_sleeper(wq)) {
		if (key)
			wake_up_interruptible_poll(&wq->wait, key);
		else
			wake_up_interruptible_all(&wq->wait);
	}
	rcu_read_unlock();
}

enum sd_tcp_cb { SD_CB_DATA, SD_CB_SPACE, SD_CB_STATE, SD_CB_ERROR };

/* TCP's own callback @cb, then the same wake-up for the AF_SD socket. */
static void sd_tcp_relay(struct sock *tsk, enum sd_tcp_cb cb)
{
	struct sd_sock *ss;
	struct sock *sk;

	read_lock_bh(&tsk->sk_callback_lock);
	sk = sd_tcp_owner(tsk);
	if (!sk)
		goto out;
	ss = sd_sk(sk);
	switch (cb) {
	case SD_CB_DATA:
		ss->tcp_data_ready(tsk);
		sd_tcp_forward(sk, EPOLLIN | EPOLLRDNORM | EPOLLRDBAND);
		break;
	case SD_CB_SPACE:
		ss->tcp_write_space(tsk);
		sd_tcp_forward(sk, EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
		break;
	case SD_CB_STATE:
		ss->tcp_state_change(tsk);
		sd_tcp_forward(sk, 0);
		break;
	case SD_CB_ERROR:
		ss->tcp_error_report(tsk);
		sd_tcp_forward(sk, 0);
		break;
	}
out:
	read_unlock_bh(&tsk->sk_callback_lock);
}

static void sd_tcp_data_ready(struct sock *tsk)
{
	sd_tcp_relay(tsk, SD_CB_DATA);
}

static void sd_tcp_write_space(struct sock *tsk)
{
	sd_tcp_relay(tsk, SD_CB_SPACE);
}

static void sd_tcp_state_change(struct sock *tsk)
{
	sd_tcp_relay(tsk, SD_CB_STATE);
}

static void sd_tcp_error_report(struct sock *tsk)
{
	sd_tcp_relay(tsk, SD_CB_ERROR);
}

/* Wrap the TCP socket's callbacks (@all: the four, else data_ready). */
static void sd_tcp_hook(struct sock *sk, bool all)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sock *tsk = ss->tcp->sk;

	if (ss->tcp_hooked)
		return;
	write_lock_bh(&tsk->sk_callback_lock);
	ss->tcp_data_ready = tsk->sk_data_ready;
	ss->tcp_write_space = tsk->sk_write_space;
	ss->tcp_state_change = tsk->sk_state_change;
	ss->tcp_error_report = tsk->sk_error_report;
	__rcu_assign_sk_user_data_with_flags(tsk, sk, SK_USER_DATA_NOCOPY);
	if (all) {
		WRITE_ONCE(tsk->sk_data_ready, sd_tcp_data_ready);
		WRITE_ONCE(tsk->sk_write_space, sd_tcp_write_space);
		WRITE_ONCE(tsk->sk_state_change, sd_tcp_state_change);
		WRITE_ONCE(tsk->sk_error_report, sd_tcp_error_report);
	} else {
		WRITE_ONCE(tsk->sk_data_ready, sd_tcp_listen_ready);
	}
	ss->tcp_hooked = true;
	write_unlock_bh(&tsk->sk_callback_lock);
}

static void sd_tcp_unhook(struct sock *sk, struct socket *tcp)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sock *tsk = tcp->sk;

	if (!ss->tcp_hooked)
		return;
	write_lock_bh(&tsk->sk_callback_lock);
	rcu_assign_sk_user_data(tsk, NULL);
	WRITE_ONCE(tsk->sk_data_ready, ss->tcp_data_ready);
	WRITE_ONCE(tsk->sk_write_space, ss->tcp_write_space);
	WRITE_ONCE(tsk->sk_state_change, ss->tcp_state_change);
	WRITE_ONCE(tsk->sk_error_report, ss->tcp_error_report);
	ss->tcp_hooked = false;
	write_unlock_bh(&tsk->sk_callback_lock);
}

/*
 * listen(2) on a redirected socket: the TCP socket listens too (it was
 * bound by sd_bind() or sd_listen()).  Called with @sk locked.
 */
int sd_tcp_listen(struct sock *sk, int backlog)
{
	struct sd_sock *ss = sd_sk(sk);
	int err;

	sd_tcp_sync(sk);
	sd_tcp_hook(sk, false);
	err = kernel_listen(ss->tcp, backlog);
	if (err)
		sd_tcp_unhook(sk, ss->tcp);
	return err;
}

/* The listener stops: so does its TCP side.  Called with @sk locked. */
void sd_tcp_listen_stop(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	if (!ss->tcp || ss->use_tcp)
		return;
	sd_tcp_unhook(sk, ss->tcp);
	/* As shutdown(SHUT_RD) on a TCP listener: it stops, stays bound. */
	if (READ_ONCE(ss->tcp->sk->sk_state) == TCP_LISTEN)
		kernel_sock_shutdown(ss->tcp, SHUT_RD);
}

/*
 * Has the TCP side of a listener a connection to accept?  Lockless, for a
 * socket seen listening: a listener's TCP socket stays until release (only
 * a failed bind, of an unbound socket, replaces one).
 */
bool sd_tcp_accept_ready(const struct sock *sk)
{
	const struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = READ_ONCE(ss->tcp);

	return tcp && !READ_ONCE(ss->use_tcp) &&
	       READ_ONCE(tcp->sk->sk_state) == TCP_LISTEN &&
	       !reqsk_queue_empty(&inet_csk(tcp->sk)->icsk_accept_queue);
}

/*
 * Take a TCP client from a listener's TCP side: -EAGAIN when none waits.
 * Called with @sk locked.
 */
int sd_tcp_accept(struct sock *sk, struct socket **newtcp)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sock *tsk;
	int err;

	if (!ss->tcp || ss->use_tcp)
		return -EAGAIN;
	err = kernel_accept(ss->tcp, newtcp, O_NONBLOCK);
	if (err)
		return err;

	/* The clone copied the listener's wrapped data_ready: undo. */
	tsk = (*newtcp)->sk;
	write_lock_bh(&tsk->sk_callback_lock);
	if (tsk->sk_data_ready == sd_tcp_listen_ready)
		WRITE_ONCE(tsk->sk_data_ready, ss->tcp_data_ready);
	write_unlock_bh(&tsk->sk_callback_lock);
	return 0;
}

/*
 * Make @child, a fresh AF_SD socket, the stand-in of @newtcp, a TCP client
 * accepted by @lsk.  Its addresses are TCP's.
 */
void sd_tcp_adopt(struct sock *child, struct socket *newtcp,
		  const struct sock *lsk)
{
	struct sd_sock *cs = sd_sk(child);

	cs->redirected = sd_sk(lsk)->redirected;
	cs->family = sd_sk(lsk)->family;
	cs->tcp = newtcp;
	cs->fallback = SD_FALLBACK_TCP_CLIENT;
	/* For sdctl only: a failure leaves the address zero. */
	sd_tcp_name(newtcp, false, &cs->local);
	sd_tcp_name(newtcp, true, &cs->peer);
	/* Nothing can have seen the child yet: no ordering needed. */
	cs->use_tcp = true;
}

/*
 * accept(2) handed @child (an adopted TCP client) the new socket: point the
 * new file at the TCP socket, which answers every call from now on.
 */
void sd_tcp_graft(struct sock *child, struct socket *newsock)
{
	struct socket *tcp = sd_sk(child)->tcp;

	if (!newsock->file)
		return;
	tcp->file = newsock->file;
	/* Nobody else holds the file before accept returns it. */
	WRITE_ONCE(newsock->file->private_data, tcp);
}

/* The counter of a fallback reason (SD_FALLBACK_* other than NONE). */
static enum sd_stat sd_fallback_stat(u8 reason)
{
	/* The first seven are in the same order in both enums. */
	BUILD_BUG_ON(SD_STAT_FALLBACK_REMOTE - SD_STAT_FALLBACK_NO_LISTENER !=
		     SD_FALLBACK_REMOTE - SD_FALLBACK_NO_LISTENER);
	if (reason == SD_FALLBACK_PEER_UNKNOWN)
		return SD_STAT_FALLBACK_PEER_UNKNOWN;
	if (reason == SD_FALLBACK_BUSY)
		return SD_STAT_FALLBACK_BUSY;
	if (reason == SD_FALLBACK_AUTH)
		return SD_STAT_FALLBACK_AUTH;
	if (reason == SD_FALLBACK_TCP_LISTENER)
		return SD_STAT_FALLBACK_TCP_LISTENER;
	if (WARN_ON_ONCE(reason < SD_FALLBACK_NO_LISTENER ||
			 reason > SD_FALLBACK_REMOTE))
		return SD_STAT_UNSPEC;
	return SD_STAT_FALLBACK_NO_LISTENER + reason - SD_FALLBACK_NO_LISTENER;
}

/*
 * Fall back to TCP for a connect to @uaddr: from now on the TCP socket
 * carries this socket, and the file points at it.  TCP's connect begins,
 * non-blocking, before that: a TCP socket that has not begun to connect
 * polls writable and hung up, and a program that polls the file meanwhile
 * would take that for a failed connect.  Returns the error that kept the
 * socket from switching, or 0 with TCP's answer in *@cerr (-EINPROGRESS,
 * 0 or its error; a blocking connect then waits in TCP, see
 * sd_connect_tcp()).  Called with @sk locked (then TCP's lock is taken).
 */
int sd_tcp_switch(struct sock *sk, u8 reason, struct sockaddr *uaddr,
		  int addr_len, int *cerr)
{
	struct sd_sock *ss = sd_sk(sk);
	struct socket *sock = sk->sk_socket;
	struct socket *tcp;
	int err;

	err = sd_tcp_get(sk, &tcp);
	if (err)
		return err;
	sd_tcp_sync(sk);
	sd_tcp_hook(sk, true);
	*cerr = tcp->ops->connect(tcp, uaddr, addr_len, O_NONBLOCK);
	if (sock && sock->file) {
		tcp->file = sock->file;
		/*
		 * Move, not share, the SIGIO list: the file's fasync entry
		 * is removed through private_data at close.
		 */
		tcp->wq.fasync_list = sock->wq.fasync_list;
		sock->wq.fasync_list = NULL;
		WRITE_ONCE(sock->file->private_data, tcp);
	}
	ss->fallback = reason;
	/* Pairs with sd_tcp_sock(): tcp and the file before the flag. */
	smp_store_release(&ss->use_tcp, true);
	sd_stat_inc(sock_net(sk), sd_fallback_stat(reason));
	return 0;
}

/*
 * Take the TCP socket off @sk for release: the callbacks are TCP's own
 * again.  Called with @sk locked; sd_tcp_release() after unlocking.
 */
struct socket *sd_tcp_detach(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = ss->tcp;

	if (!tcp)
		return NULL;
	sd_tcp_unhook(sk, tcp);
	return tcp;
}

/* Release a detached TCP socket; @sock is the AF_SD socket it served. */
void sd_tcp_release(struct socket *sock, struct socket *tcp)
{
	if (!tcp)
		return;
	if (tcp->file) {
		/*
		 * The file is closing: it is the AF_SD socket's again.  An
		 * fcntl(O_ASYNC) that read private_data before
		 * sd_tcp_switch() changed it adds the file to the AF_SD
		 * socket's SIGIO list after the list moved; __fput() took
		 * the file off the TCP socket's list only, so take it off
		 * this one too (nothing if it is not there).
		 */
		if (sock) {
			fasync_helper(-1, tcp->file, 0, &sock->wq.fasync_list);
			WRITE_ONCE(tcp->file->private_data, sock);
		}
		/* A socket with a file leaves its inode to the file. */
		tcp->file = NULL;
	}
	sock_release(tcp);
}

/*
 * TCP_INFO of a redirected socket whose connection is AF_SD's: TCP's
 * structure with what is known (state, segment sizes of a loopback path,
 * bytes through the kernel's path); the rest stays zero.
 */
int sd_tcp_info(struct sock *sk, char __user *optval, int __user *optlen)
{
	struct sd_sock *ss = sd_sk(sk);
	struct tcp_info info = {};
	int len;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < 0)
		return -EINVAL;
	info.tcpi_state = sd_get_state(sk);
	if (info.tcpi_state != TCP_LISTEN && ss->conn) {
		info.tcpi_rto = jiffies_to_usecs(TCP_RTO_MIN);
		info.tcpi_ato = jiffies_to_usecs(TCP_ATO_MIN);
		info.tcpi_snd_mss = 65483;
		info.tcpi_rcv_mss = 65483;
		info.tcpi_advmss = 65483;
		info.tcpi_pmtu = 65535;
		info.tcpi_snd_cwnd = TCP_INIT_CWND;
		info.tcpi_snd_ssthresh = TCP_INFINITE_SSTHRESH;
		info.tcpi_rcv_space = sd_rx(ss)->size;
		info.tcpi_bytes_acked = READ_ONCE(ss->tx_bytes);
		info.tcpi_bytes_sent = READ_ONCE(ss->tx_bytes);
		info.tcpi_bytes_received = READ_ONCE(ss->rx_bytes);
		info.tcpi_segs_out = READ_ONCE(ss->tx_msgs);
		info.tcpi_segs_in = READ_ONCE(ss->rx_msgs);
		info.tcpi_data_segs_out = info.tcpi_segs_out;
		info.tcpi_data_segs_in = info.tcpi_segs_in;
	} else if (info.tcpi_state == TCP_LISTEN) {
		info.tcpi_unacked = READ_ONCE(sk->sk_ack_backlog);
		info.tcpi_sacked = READ_ONCE(sk->sk_max_ack_backlog);
	}
	len = min_t(int, len, sizeof(info));
	if (put_user(len, optlen) || copy_to_user(optval, &info, len))
		return -EFAULT;
	return 0;
}

/*
 * Options a redirected socket must not pass to a TCP socket that carries
 * none of its data: they change how TCP itself moves the bytes.
 */
static bool sd_tcp_opt_refused(int level, int optname)
{
	if (level != SOL_TCP)
		return false;
	switch (optname) {
	case TCP_ULP:
	case TCP_REPAIR:
	case TCP_REPAIR_QUEUE:
	case TCP_REPAIR_OPTIONS:
	case TCP_REPAIR_WINDOW:
	case TCP_QUEUE_SEQ:
	case TCP_ZEROCOPY_RECEIVE:
		return true;
	default:
		return false;
	}
}

/*
 * setsockopt at any level but SOL_SOCKET and SOL_SD on a redirected socket
 * carried by AF_SD: TCP validates and keeps it (IPPROTO_TCP, IPPROTO_IP,
 * IPPROTO_IPV6), or refuses it with its own error.
 */
int sd_tcp_setsockopt(struct sock *sk, int level, int optname,
		      sockptr_t optval, unsigned int optlen)
{
	struct socket *tcp;
	int err;

	if (sd_tcp_opt_refused(level, optname))
		return -EOPNOTSUPP;
	/* Locked throughout: a failed bind may replace the TCP socket. */
	lock_sock(sk);
	err = sd_tcp_get(sk, &tcp);
	if (!err)
		err = tcp->ops->setsockopt(tcp, level, optname, optval, optlen);
	release_sock(sk);
	return err;
}

int sd_tcp_getsockopt(struct sock *sk, int level, int optname,
		      char __user *optval, int __user *optlen)
{
	struct socket *tcp;
	int err;

	if (level == SOL_TCP && optname == TCP_INFO)
		return sd_tcp_info(sk, optval, optlen);
	if (sd_tcp_opt_refused(level, optname))
		return -EOPNOTSUPP;
	/* Locked throughout: a failed bind may replace the TCP socket. */
	lock_sock(sk);
	err = sd_tcp_get(sk, &tcp);
	if (!err)
		err = tcp->ops->getsockopt(tcp, level, optname, optval, optlen);
	release_sock(sk);
	return err;
}
