// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD data path through system calls: send, receive, poll, shutdown,
 * ioctls, socket options and mapping the rings.
 *
 * This is the path a program takes without libsd, and the reference the
 * fast path must match.  Its observable behaviour follows TCP over
 * loopback; where it cannot, Documentation/af_sd.rst says so.
 */
#include <linux/mm.h>
#include <linux/sockios.h>
#include <linux/termios.h>
#include <linux/tcp.h>
#include <linux/uio.h>
#include <net/sock.h>
#include <net/tcp_states.h>

#include <linux/sd_link.h>

#include "af_sd.h"

/* The writer may go on when this much is free: a header and some bytes. */
#define SD_TX_MIN_SPACE		(SD_REC_HDR_LEN + SD_REC_ALIGN)

/* Free space in the TX ring, or -EPROTO for a corrupt credit. */
static int sd_tx_space(struct sd_sock *ss)
{
	u32 space;
	int err = sd_ring_space(sd_tx(ss), &space);

	return err ? err : (int)min_t(u32, space, INT_MAX);
}

/* Has the peer, or this end, ended what a sender waits for? */
static bool sd_tx_done(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	return READ_ONCE(sk->sk_err) ||
	       (READ_ONCE(sk->sk_shutdown) & SEND_SHUTDOWN) ||
	       READ_ONCE(ss->conn->gone[!ss->side]);
}

/*
 * SO_RCVLOWAT as the receive path applies it: at least 1, and at most half
 * the receive ring (more could never be readable at once; TCP caps it at
 * half its buffer likewise).
 */
static int sd_rcvlowat(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	int val = max_t(int, READ_ONCE(sk->sk_rcvlowat), 1);

	if (ss->conn)
		val = min_t(u32, val, sd_rx(ss)->size / 2);
	return val;
}

bool sd_rx_unread(struct sd_sock *ss)
{
	return ss->conn && !READ_ONCE(ss->conn->gone[ss->side]) &&
	       sd_ring_readable(sd_rx(ss), NULL) != 0;
}

/*
 * Serialise whole calls of one direction (Documentation/design.rst,
 * decision 6).
 */
static int sd_call_lock(struct mutex *m, bool nonblock)
{
	if (nonblock)
		return mutex_trylock(m) ? 0 : -EAGAIN;
	return mutex_lock_interruptible(m) ? -ERESTARTSYS : 0;
}

/*
 * Start a call on one side: take its call mutex and the socket lock, and
 * take the side back if a process drives it through libsd (see "Tokens"
 * in the uapi header).  An owner that is mid-call may need these very
 * locks to finish in the kernel, so wait for it with both let go, then
 * start over.  Returns 0 with both held, or an error with neither:
 * -EAGAIN (non-blocking, or the wait for the owner outlasted the
 * direction's SO_SNDTIMEO or SO_RCVTIMEO), -ERESTARTSYS, or -ECONNRESET
 * after resetting a connection the owner left corrupt.
 */
static int sd_lock_call(struct sock *sk, bool prod, bool nonblock)
{
	struct sd_sock *ss = sd_sk(sk);
	struct mutex *m = prod ? &ss->send_mutex : &ss->recv_mutex;
	long timeo = prod ? sock_sndtimeo(sk, nonblock) :
			    sock_rcvtimeo(sk, nonblock);
	struct sd_ring *ring;
	struct pid *owner;
	int err;

	for (;;) {
		err = sd_call_lock(m, nonblock);
		if (err)
			return err;
		lock_sock(sk);
		if (!ss->conn || READ_ONCE(ss->conn->gone[ss->side]))
			return 0;
		ring = prod ? sd_tx(ss) : sd_rx(ss);
		owner = prod ? ring->prod_owner : ring->cons_owner;
		if (!owner)
			return 0;
		err = sd_ring_reclaim(ring, prod);
		if (!err) {
			sd_stat_inc(sock_net(sk), SD_STAT_TAKEOVERS);
			return 0;
		}
		if (err == -EPROTO) {
			sd_conn_corrupt(sk);
			err = -ECONNRESET;
		}
		if (err == -EAGAIN)
			owner = get_pid(owner);
		release_sock(sk);
		mutex_unlock(m);
		if (err != -EAGAIN)
			return err;
		while (!nonblock && sd_ring_owner_busy(ring, prod, owner)) {
			if (signal_pending(current)) {
				put_pid(owner);
				return -ERESTARTSYS;
			}
			/* An owner whose busy count lies must not hold us. */
			if (!timeo) {
				put_pid(owner);
				return -EAGAIN;
			}
			schedule_timeout_interruptible(1);
			if (timeo != MAX_SCHEDULE_TIMEOUT)
				timeo--;
		}
		put_pid(owner);
		if (nonblock)
			return -EAGAIN;
	}
}

static void sd_unlock_call(struct sock *sk, bool prod)
{
	struct sd_sock *ss = sd_sk(sk);

	release_sock(sk);
	mutex_unlock(prod ? &ss->send_mutex : &ss->recv_mutex);
}

/*
 * A sleeper is done with a flag it set in a ring (READER_WAIT,
 * NEED_CREDIT) and has left the wait queue.  Others may rely on the same
 * flag: another caller asleep, a poll or an epoll entry, each of which set
 * it after joining the queue, or O_ASYNC, whose SIGIO comes with every
 * wake-up.  So clear it, then (full barrier) look at the queue and set it
 * again if anyone is there; one who joins after the look sets it itself.
 */
static void sd_done_waiting(struct sock *sk, struct sd_ring *ring,
			    unsigned int which, u32 flag)
{
	struct socket_wq *wq;

	sd_ring_clear_flags(ring, which, flag);
	rcu_read_lock();
	wq = rcu_dereference(sk->sk_wq);
	/* skwq_has_sleeper() orders the clear before the look. */
	if (skwq_has_sleeper(wq) || sock_flag(sk, SOCK_FASYNC))
		sd_ring_set_flags(ring, which, flag);
	rcu_read_unlock();
}

/*
 * A background connect (sd_connect_begin()) has not ended yet: wait for
 * its end as TCP's calls wait for the handshake.
 * Returns 0 to go on, 1 when the socket fell back to TCP meanwhile (the
 * call is TCP's), -EAGAIN when @timeo is up.  Called with @sk locked.
 */
static int sd_wait_async_connect(struct sock *sk, long *timeo)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sd_sock *ss = sd_sk(sk);
	int err = 0;

	add_wait_queue(sk_sleep(sk), &wait);
	while (READ_ONCE(ss->connect_bg)) {
		if (!*timeo) {
			err = -EAGAIN;
			break;
		}
		if (signal_pending(current)) {
			err = sock_intr_errno(*timeo);
			break;
		}
		sk_wait_event(sk, timeo, !READ_ONCE(ss->connect_bg), &wait);
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	return err ? : sd_tcp_sock(sk) ? 1 : 0;
}

/*
 * sendto(MSG_FASTOPEN): as TCP's (tcp_sendmsg_fastopen()), connect to the
 * address, then send; on a connected socket the connect's own error
 * (EISCONN).  There is no handshake to carry the bytes, so they follow
 * the connect as a plain send would.  Returns 0 to send on this socket,
 * 1 when the connect fell back to TCP (the TCP socket sends), or an error.
 */
static int sd_fastopen_connect(struct socket *sock, struct msghdr *msg)
{
	struct sockaddr *addr = msg->msg_name;
	int err;

	if (!addr || msg->msg_namelen < (int)sizeof(addr->sa_family))
		return -EINVAL;
	if (addr->sa_family == AF_UNSPEC)
		return -EOPNOTSUPP;
	err = sd_connect(sock, addr, msg->msg_namelen,
			 msg->msg_flags & MSG_DONTWAIT ? O_NONBLOCK : 0);
	if (err)
		return err;
	return sd_tcp_sock(sock->sk) ? 1 : 0;
}

int sd_sendmsg(struct socket *sock, struct msghdr *msg, size_t len)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	bool nonblock = msg->msg_flags & MSG_DONTWAIT;
	bool armed = false, slept = false;
	struct socket *tcp = sd_tcp_sock(sk);
	size_t sent = 0;
	long timeo;
	int err;

	if (tcp)
		return tcp->ops->sendmsg(tcp, msg, len);
	if (msg->msg_flags & MSG_OOB)
		return -EOPNOTSUPP;
	if (unlikely(msg->msg_flags & MSG_FASTOPEN)) {
		err = sd_fastopen_connect(sock, msg);
		if (err < 0)
			return err;
		msg->msg_flags &= ~MSG_FASTOPEN;
		tcp = sd_tcp_sock(sk);
		if (err)
			return tcp->ops->sendmsg(tcp, msg, len);
	}

	err = sd_lock_call(sk, true, nonblock);
	if (err)
		return err;
	timeo = sock_sndtimeo(sk, nonblock);
	if (unlikely(ss->connect_bg)) {
		err = sd_wait_async_connect(sk, &timeo);
		if (err) {
			sd_unlock_call(sk, true);
			tcp = sd_tcp_sock(sk);
			return err > 0 ? tcp->ops->sendmsg(tcp, msg, len) : err;
		}
	}
	add_wait_queue(sk_sleep(sk), &wait);
	for (;;) {
		size_t n;

		if (READ_ONCE(sk->sk_err)) {
			if (!sent)
				err = sock_error(sk);
			break;
		}
		err = -EPIPE;
		if ((sk->sk_shutdown & SEND_SHUTDOWN) || !ss->conn)
			break;
		/* As TCP: nothing to send sends nothing, to a peer gone too. */
		err = 0;
		if (!len)
			break;
		err = -EPIPE;
		if (READ_ONCE(ss->conn->gone[!ss->side])) {
			/* TCP takes these bytes, then the RST arrives. */
			sd_conn_peer_gone(sk);
			sent = len;
			break;
		}
		err = 0;
		if (sent == len)
			break;

		err = sd_ring_write(sd_tx(ss), &msg->msg_iter, len - sent, &n);
		if (err == -EPROTO) {
			sd_conn_corrupt(sk);
			err = -ECONNRESET;
			break;
		}
		if (err)
			break;
		if (n) {
			sent += n;
			ss->tx_bytes += n;
			ss->tx_msgs++;
			sd_wake_peer(sk, true);
			continue;
		}

		/* The ring is full: rule 4, ask for credit, look once more. */
		if (!armed) {
			armed = true;
			sd_ring_set_flags(sd_tx(ss), SD_RING_HDR_PROD,
					  SD_RING_NEED_CREDIT);
			/* Flag before the credit load (pairs: sd_ring_credit) */
			smp_mb__after_atomic();
			if (sd_tx_space(ss) >= SD_TX_MIN_SPACE)
				continue;
		}
		/*
		 * Non-blocking, the flag stays: the caller may wait in poll
		 * or epoll next, edge-triggered too, for the wake-up it
		 * brings.
		 */
		err = -EAGAIN;
		if (!timeo)
			break;
		err = sock_intr_errno(timeo);
		if (signal_pending(current))
			break;
		slept = true;
		sk_wait_event(sk, &timeo,
			      sd_tx_space(ss) >= SD_TX_MIN_SPACE ||
			      sd_tx_space(ss) < 0 || sd_tx_done(sk), &wait);
		armed = false;
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	if (slept && ss->conn)
		sd_done_waiting(sk, sd_tx(ss), SD_RING_HDR_PROD,
				SD_RING_NEED_CREDIT);
	sd_unlock_call(sk, true);

	if (sent)
		return sent;
	if (err == -EPIPE && !(msg->msg_flags & MSG_NOSIGNAL))
		send_sig(SIGPIPE, current, 0);
	return err;
}

/* Publish credit if due (or @force) and wake the peer's writers. */
static void sd_rx_credit(struct sock *sk, bool force)
{
	struct sd_sock *ss = sd_sk(sk);

	if (sd_ring_credit(sd_rx(ss), force))
		sd_wake_peer(sk, false);
}

static bool sd_rx_wake_cond(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);

	return sd_ring_readable(sd_rx(ss), NULL) != 0 ||
	       READ_ONCE(sk->sk_err) ||
	       (READ_ONCE(sk->sk_shutdown) & RCV_SHUTDOWN);
}

/*
 * TCP_INQ: after a receive, a control message with the bytes left to read,
 * as TCP's: 1 when there are none but the stream has ended, so that a
 * reader goes on to see the end.  put_cmsg() marks MSG_CTRUNC when the
 * caller gave no room for it.
 */
static void sd_put_inq(struct sock *sk, struct msghdr *msg)
{
	struct sd_sock *ss = sd_sk(sk);
	size_t bytes = 0;
	int inq;

	if (!READ_ONCE(ss->conn->gone[ss->side]) &&
	    sd_ring_readable(sd_rx(ss), &bytes) < 0)
		bytes = 0;
	inq = min_t(size_t, bytes, INT_MAX);
	if (!inq && (READ_ONCE(sk->sk_shutdown) & RCV_SHUTDOWN))
		inq = 1;
	put_cmsg(msg, SOL_TCP, TCP_CM_INQ, sizeof(inq), &inq);
}

int sd_recvmsg(struct socket *sock, struct msghdr *msg, size_t len,
	       int flags)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	bool nonblock = flags & MSG_DONTWAIT;
	bool peek = flags & MSG_PEEK;
	bool armed = false, slept = false;
	struct socket *tcp = sd_tcp_sock(sk);
	int copied = 0;
	long timeo;
	int target;
	int err;

	if (tcp)
		return tcp->ops->recvmsg(tcp, msg, len, flags);
	if (flags & MSG_OOB)
		return -EINVAL;
	if (flags & MSG_ERRQUEUE)
		return -EAGAIN;

	err = sd_lock_call(sk, false, nonblock);
	if (err)
		return err;
	timeo = sock_rcvtimeo(sk, nonblock);
	if (unlikely(ss->connect_bg)) {
		err = sd_wait_async_connect(sk, &timeo);
		if (err) {
			sd_unlock_call(sk, false);
			tcp = sd_tcp_sock(sk);
			return err > 0 ? tcp->ops->recvmsg(tcp, msg, len, flags) : err;
		}
	}
	err = -ENOTCONN;
	if (sk->sk_state == TCP_LISTEN || !ss->conn)
		goto out;

	/* As TCP: asking for nothing returns nothing, at once. */
	err = 0;
	if (!len)
		goto out;
	len = min_t(size_t, len, INT_MAX);
	target = (flags & MSG_WAITALL) ? len : min_t(size_t, sd_rcvlowat(sk), len);
	add_wait_queue(sk_sleep(sk), &wait);
	for (;;) {
		u8 shutdown = READ_ONCE(sk->sk_shutdown);
		size_t n = 0;

		/* Rule 5: end of stream is seen before the last look. */
		smp_rmb();
		if (!READ_ONCE(ss->conn->gone[ss->side])) {
			err = sd_ring_read(sd_rx(ss), sock_net(sk),
					   &msg->msg_iter, len - copied, peek,
					   &n);
			if (err == -EPROTO) {
				sd_conn_corrupt(sk);
				if (!copied)
					copied = -ECONNRESET;
				break;
			}
			if (err && !copied) {
				copied = err;
				break;
			}
		}
		copied += n;
		if (copied >= target || (peek && copied))
			break;
		if (READ_ONCE(sk->sk_err)) {
			if (!copied)
				copied = sock_error(sk);
			break;
		}
		if (shutdown & RCV_SHUTDOWN)
			break;
		/* Rule 3: a writer in user space wakes us only if asked. */
		if (!armed) {
			armed = true;
			sd_ring_set_flags(sd_rx(ss), SD_RING_HDR_CONS,
					  SD_RING_READER_WAIT);
			/* Flag before the header load (pairs: the writer's) */
			smp_mb__after_atomic();
			if (sd_ring_readable(sd_rx(ss), NULL))
				continue;
		}
		/*
		 * Non-blocking, the flag stays: the caller may wait in poll
		 * or epoll next, edge-triggered too, for the wake-up it
		 * brings.
		 */
		if (!timeo) {
			if (!copied)
				copied = -EAGAIN;
			break;
		}
		if (signal_pending(current)) {
			if (!copied)
				copied = sock_intr_errno(timeo);
			break;
		}
		/* About to sleep: give the writer all the room there is. */
		if (!peek)
			sd_rx_credit(sk, true);
		slept = true;
		sk_wait_event(sk, &timeo, sd_rx_wake_cond(sk), &wait);
		armed = false;
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	if (slept)
		sd_done_waiting(sk, sd_rx(ss), SD_RING_HDR_CONS,
				SD_RING_READER_WAIT);
	if (!peek && ss->conn && !READ_ONCE(ss->conn->gone[ss->side]))
		sd_rx_credit(sk, sd_ring_readable(sd_rx(ss), NULL) == 0);
	if (!peek && copied > 0) {
		ss->rx_bytes += copied;
		ss->rx_msgs++;
	}
	err = copied;
out:
	if (err >= 0 && READ_ONCE(ss->recvmsg_inq))
		sd_put_inq(sk, msg);
	sd_unlock_call(sk, false);
	return err;
}

/* Writable as poll sees it: a quarter of the ring free, as TCP's third. */
static bool sd_tx_writable(struct sd_sock *ss)
{
	return sd_ring_space_hint(sd_tx(ss)) >=
	       max_t(u32, sd_tx(ss)->size / 4, SD_TX_MIN_SPACE);
}

/*
 * Whether the receive ring has something; if not, rule 3: ask a
 * user-space writer to wake us, and look again.  The caller checked that
 * the connection is there and its side not gone.
 */
static bool sd_rx_ready_armed(struct sd_sock *ss)
{
	/* As TCP's poll: readable once SO_RCVLOWAT bytes are there. */
	size_t want = sd_rcvlowat(&ss->sk);

	if (sd_ring_readable_at_least(sd_rx(ss), want))
		return true;
	sd_ring_set_flags(sd_rx(ss), SD_RING_HDR_CONS, SD_RING_READER_WAIT);
	/* Flag store before the header load (pairs: the writer's) */
	smp_mb__after_atomic();
	return sd_ring_readable_at_least(sd_rx(ss), want) != 0;
}

__poll_t sd_poll(struct file *file, struct socket *sock,
		 struct poll_table_struct *wait)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	struct sd_conn *conn;
	__poll_t mask = 0;
	u8 shutdown;
	int state;

	if (tcp)
		return tcp->ops->poll(file, tcp, wait);
	sock_poll_wait(file, sock, wait);

	/* A background connect (sd_connect_work()): nothing yet. */
	if (smp_load_acquire(&ss->connect_bg))
		return 0;
	state = sd_get_state(sk);
	/* Another thread's connect waits (sd_conn_establish()): as TCP's. */
	if (state == TCP_SYN_SENT)
		return READ_ONCE(sk->sk_err) ? EPOLLERR : 0;
	if (state == TCP_LISTEN)
		return list_empty_careful(&ss->accept_list) &&
		       !sd_tcp_accept_ready(sk) ? 0 : EPOLLIN | EPOLLRDNORM;

	shutdown = READ_ONCE(sk->sk_shutdown);
	if (shutdown == SHUTDOWN_MASK || state == TCP_CLOSE)
		mask |= EPOLLHUP;
	if (shutdown & RCV_SHUTDOWN)
		mask |= EPOLLIN | EPOLLRDNORM | EPOLLRDHUP;

	/* Pairs with the release in sd_conn_establish(). */
	conn = smp_load_acquire(&ss->conn);
	if (conn && !READ_ONCE(conn->gone[ss->side]) && sd_rx_ready_armed(ss))
		mask |= EPOLLIN | EPOLLRDNORM;

	if (shutdown & SEND_SHUTDOWN || !conn) {
		/* A write would not block (it fails at once). */
		mask |= EPOLLOUT | EPOLLWRNORM;
	} else if (sd_tx_writable(ss)) {
		mask |= EPOLLOUT | EPOLLWRNORM;
	} else {
		/* Rule 4: ask for credit; look again in case it came. */
		sd_ring_set_flags(sd_tx(ss), SD_RING_HDR_PROD,
				  SD_RING_NEED_CREDIT);
		/* Flag store before the credit load (pairs: sd_ring_credit) */
		smp_mb__after_atomic();
		if (sd_tx_writable(ss))
			mask |= EPOLLOUT | EPOLLWRNORM;
	}

	/* sk_err is written before the state and shutdown read above. */
	smp_rmb();
	if (READ_ONCE(sk->sk_err))
		mask |= EPOLLERR;
	return mask;
}

int sd_shutdown(struct socket *sock, int how)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	int err = 0;

	if (tcp)
		return tcp->ops->shutdown(tcp, how);
	/* SHUT_RD, SHUT_WR, SHUT_RDWR to RCV_, SEND_ and both. */
	how++;
	if (how <= 0 || how > SHUTDOWN_MASK)
		return -EINVAL;

	lock_sock(sk);
	/*
	 * A connect to another host is on its way in the background: shut
	 * down what it ends with.
	 */
	if (unlikely(ss->connect_bg)) {
		long timeo = MAX_SCHEDULE_TIMEOUT;

		err = sd_wait_async_connect(sk, &timeo);
		if (err) {
			release_sock(sk);
			tcp = sd_tcp_sock(sk);
			return err > 0 ? tcp->ops->shutdown(tcp, how - 1) : err;
		}
	}
	if (ss->connect_waits) {
		/*
		 * Another thread's connect waits for backlog room
		 * (sd_conn_establish()): abort it, as TCP's shutdown of a
		 * SYN_SENT socket does.  That call ends the connect itself:
		 * until it has, the socket stays connecting for every other.
		 */
		WRITE_ONCE(sk->sk_err, ECONNRESET);
		ss->connect_abort = true;
		wake_up_interruptible_all(&sd_net(sock_net(sk))->backlog_wait);
		release_sock(sk);
		return 0;
	}
	if (sock->state == SS_CONNECTING)
		sock->state = SS_CONNECTED;

	if (sk->sk_state == TCP_LISTEN) {
		if (how & RCV_SHUTDOWN)
			sd_listen_stop(sk);
	} else if (!ss->conn || sk->sk_state == TCP_CLOSE) {
		/* As TCP: ENOTCONN, but the flags are set and waiters woken. */
		err = -ENOTCONN;
		WRITE_ONCE(sk->sk_shutdown, sk->sk_shutdown | how);
		sk->sk_state_change(sk);
	} else {
		sd_conn_shutdown(sk, how);
	}
	release_sock(sk);
	return err;
}

/* SD_IOC_ACQUIRE and SD_IOC_RELEASE: hand a side to libsd, or back. */
static int sd_token_ioctl(struct sock *sk, unsigned int cmd,
			  void __user *arg)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_token tok = {};
	bool prod;
	u32 dir;
	int err;

	if (cmd == SD_IOC_ACQUIRE) {
		if (copy_from_user(&tok, arg, sizeof(tok)))
			return -EFAULT;
		if (tok.pad || tok.busy % sizeof(u32))
			return -EINVAL;
		dir = tok.dir;
	} else if (get_user(dir, (u32 __user *)arg)) {
		return -EFAULT;
	}
	if (dir != SD_TOKEN_TX && dir != SD_TOKEN_RX)
		return -EINVAL;
	prod = dir == SD_TOKEN_TX;

	/*
	 * A signal ends the wait for the owner's call with EINTR, never a
	 * restart: libsd asks from inside a call of its own and must end it
	 * for the handler to run.
	 */
	err = sd_lock_call(sk, prod, false);
	if (err)
		return err == -ERESTARTSYS ? -EINTR : err;
	err = -ENOTCONN;
	if (!ss->conn || cmd == SD_IOC_RELEASE) {
		err = ss->conn ? 0 : -ENOTCONN;
		goto out;
	}
	/* A connection that ended is the system calls' to report. */
	err = -EPIPE;
	if (READ_ONCE(ss->conn->gone[ss->side]) || READ_ONCE(sk->sk_err))
		goto out;
	sd_ring_grant(prod ? sd_tx(ss) : sd_rx(ss), prod, &tok);
	err = copy_to_user(arg, &tok, sizeof(tok)) ? -EFAULT : 0;
out:
	sd_unlock_call(sk, prod);
	return err;
}

/*
 * SD_IOC_ZC_SEND and SD_IOC_ZC_RECV.  No socket lock: the zero-copy queue
 * has its own, and the calls come from inside a libsd send or receive,
 * which may hold the token of that side (the socket lock is not needed to
 * drive a side one owns).  The connection is stable once seen.
 */
static int sd_zc_ioctl(struct sock *sk, unsigned int cmd, void __user *arg)
{
	struct sd_sock *ss = sd_sk(sk);
	/* Pairs with the release in sd_conn_establish(). */
	struct sd_conn *conn = smp_load_acquire(&ss->conn);
	struct sd_zc_recv zr;
	int ret;

	if (!conn)
		return -ENOTCONN;
	if (cmd == SD_IOC_ZC_SEND) {
		struct sd_zc_send zs;

		if (copy_from_user(&zs, arg, sizeof(zs)))
			return -EFAULT;
		if (READ_ONCE(sk->sk_shutdown) & SEND_SHUTDOWN ||
		    READ_ONCE(conn->gone[!ss->side]))
			return -EPIPE;
		/*
		 * Pages cannot cross to another host: libsd copies (the link
		 * daemon's carrier resets a connection that has a zero-copy
		 * record).
		 */
		if (conn->link_id)
			return -EOPNOTSUPP;
		ret = sd_zc_send(sk, sd_tx(ss), &zs);
		if (ret)
			return ret;
		return put_user(zs.seq, &((struct sd_zc_send __user *)arg)->seq);
	}

	if (copy_from_user(&zr, arg, sizeof(zr)))
		return -EFAULT;
	ret = sd_zc_recv(sk, sd_rx(ss), &zr);
	if (ret == -EPROTO) {
		lock_sock(sk);
		if (!READ_ONCE(conn->gone[ss->side]))
			sd_conn_corrupt(sk);
		release_sock(sk);
		return -ECONNRESET;
	}
	if (ret >= 0 &&
	    put_user(zr.remapped, &((struct sd_zc_recv __user *)arg)->remapped))
		return -EFAULT;
	return ret;
}

/*
 * SD_IOC_RECV_WAIT: one entry on another file's wait queue, which wakes
 * the waiting task as its entry on the socket's queue would (WQ_FLAG_WOKEN,
 * for wait_woken()).  The other file is held for the whole wait.  A file
 * whose queue goes away while it is held (POLLFREE) unhooks the entry
 * under that queue's lock; the removal then finds head NULL (as epoll's).
 */
struct sd_xwait {
	poll_table pt;
	wait_queue_entry_t entry;
	wait_queue_head_t *head;
	wait_queue_entry_t *owner;
	unsigned int queues;
	bool freed;
};

static int sd_xwait_wake(wait_queue_entry_t *entry, unsigned int mode,
			 int sync, void *key)
{
	struct sd_xwait *x = container_of(entry, struct sd_xwait, entry);
	__poll_t events = key_to_poll(key);

	if (events & POLLFREE) {
		/* Read by the sleeper in sd_recv_wait(), not under the queue's lock. */
		WRITE_ONCE(x->freed, true);
		list_del_init(&entry->entry);
		/* Pairs with the acquire in sd_xwait_remove(). */
		smp_store_release(&x->head, NULL);
	} else if (events && !(events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
		return 0;
	}
	return woken_wake_function(x->owner, mode, sync, key);
}

static void sd_xwait_queue(struct file *file, wait_queue_head_t *head,
			   poll_table *pt)
{
	struct sd_xwait *x = container_of(pt, struct sd_xwait, pt);

	/* A second queue is refused by the caller: its wakes would be lost. */
	if (x->queues++)
		return;
	init_waitqueue_func_entry(&x->entry, sd_xwait_wake);
	x->head = head;
	add_wait_queue(head, &x->entry);
}

static void sd_xwait_remove(struct sd_xwait *x)
{
	wait_queue_head_t *head;

	/* A queue that POLLFREE unhooked lives until a grace period ends. */
	rcu_read_lock();
	/* Pairs with the release in sd_xwait_wake(). */
	head = smp_load_acquire(&x->head);
	if (head)
		remove_wait_queue(head, &x->entry);
	rcu_read_unlock();
}

#define SD_XWAIT_READY (EPOLLIN | EPOLLERR | EPOLLHUP)

static int sd_recv_wait(struct socket *sock, int __user *arg)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct sd_xwait x = { .owner = &wait };
	struct file *other;
	bool ready;
	long timeo;
	int err = 0;
	int fd;

	if (get_user(fd, arg))
		return -EFAULT;
	/* conn is stable while the file is held (struct sd_sock). */
	if (sd_get_state(sk) == TCP_LISTEN || !smp_load_acquire(&ss->conn))
		return -ENOTCONN;
	other = fget(fd);
	if (!other)
		return -EBADF;
	if (other == sock->file || !file_can_poll(other)) {
		err = -EINVAL;
		goto out_put;
	}
	timeo = sock_rcvtimeo(sk, sock->file->f_flags & O_NONBLOCK);

	add_wait_queue(sk_sleep(sk), &wait);
	init_poll_funcptr(&x.pt, sd_xwait_queue);
	x.pt._key = SD_XWAIT_READY;
	ready = vfs_poll(other, &x.pt) & SD_XWAIT_READY;
	if (x.queues > 1) {
		err = -EINVAL;
		goto out_remove;
	}
	for (;;) {
		if (READ_ONCE(sk->sk_err) ||
		    (READ_ONCE(sk->sk_shutdown) & RCV_SHUTDOWN) ||
		    READ_ONCE(ss->conn->gone[ss->side]) ||
		    sd_get_state(sk) == TCP_CLOSE || sd_rx_ready_armed(ss)) {
			err = 1;
			break;
		}
		if (ready || READ_ONCE(x.freed))
			break;
		if (!timeo) {
			err = -EAGAIN;
			break;
		}
		if (signal_pending(current)) {
			err = sock_intr_errno(timeo);
			break;
		}
		timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, timeo);
		ready = vfs_poll(other, NULL) & SD_XWAIT_READY;
	}
out_remove:
	sd_xwait_remove(&x);
	remove_wait_queue(sk_sleep(sk), &wait);
	/*
	 * The other file woke us: the caller moves what came into the ring
	 * itself and looks at it again, so the writer need not wake anyone
	 * for it unless someone else waits (one system call less for every
	 * message that wakes the caller).
	 */
	if (!err)
		sd_done_waiting(sk, sd_rx(ss), SD_RING_HDR_CONS,
				SD_RING_READER_WAIT);
out_put:
	fput(other);
	return err;
}

/*
 * SD_IOC_SEND_WAIT: the caller's process drives the producer side and is
 * inside a send (busy held, <linux/sd.h>); sleep until the ring has room
 * past the tail it published, the connection can take no more, SO_SNDTIMEO
 * runs out or a signal comes.  The side stays the caller's throughout, so
 * no other call's bytes come between the ones its send wrote before and
 * after.  Takes the socket lock (sk_wait_event() lets go of it while
 * asleep); not the send mutex, which a call waiting for busy to clear may
 * hold and let go of only by polling (sd_lock_call()).
 */
static int sd_send_wait(struct sock *sk, u32 __user *arg)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sd_sock *ss = sd_sk(sk);
	bool armed = false;
	struct sd_ring *ring;
	long timeo;
	u32 dir;
	int err;

	if (get_user(dir, arg))
		return -EFAULT;
	if (dir != SD_TOKEN_TX)
		return -EINVAL;
	lock_sock(sk);
	err = -ENOTCONN;
	if (!ss->conn)
		goto out;
	ring = sd_tx(ss);
	err = -EBUSY;
	if (READ_ONCE(ring->prod_owner) != task_tgid(current))
		goto out;
	timeo = sock_sndtimeo(sk, false);
	add_wait_queue(sk_sleep(sk), &wait);
	for (;;) {
		err = -EPIPE;
		if (sd_tx_done(sk))
			break;
		err = 0;
		if (sd_ring_space_hint(ring) >= SD_TX_MIN_SPACE)
			break;
		/* Rule 4: ask for credit, then look once more. */
		if (!armed) {
			armed = true;
			sd_ring_set_flags(ring, SD_RING_HDR_PROD,
					  SD_RING_NEED_CREDIT);
			/* Flag before the credit load (pairs: sd_ring_credit) */
			smp_mb__after_atomic();
			continue;
		}
		err = -EAGAIN;
		if (!timeo)
			break;
		err = -EINTR;
		if (signal_pending(current))
			break;
		sk_wait_event(sk, &timeo,
			      sd_ring_space_hint(ring) >= SD_TX_MIN_SPACE ||
			      sd_tx_done(sk), &wait);
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	if (armed && ss->conn)
		sd_done_waiting(sk, ring, SD_RING_HDR_PROD,
				SD_RING_NEED_CREDIT);
out:
	release_sock(sk);
	return err;
}

int sd_ioctl(struct socket *sock, unsigned int cmd, unsigned long arg)
{
	struct sock *sk = sock->sk;
	struct sd_sock *ss = sd_sk(sk);
	struct socket *tcp = sd_tcp_sock(sk);
	size_t bytes = 0;
	int err = 0;

	if (tcp)
		return cmd == SD_IOC_RECV_WAIT ? -EOPNOTSUPP :
						  tcp->ops->ioctl(tcp, cmd, arg);
	switch (cmd) {
	case SD_IOC_ACQUIRE:
	case SD_IOC_RELEASE:
		return sd_token_ioctl(sk, cmd, (void __user *)arg);
	case SD_IOC_ZC_SEND:
	case SD_IOC_ZC_RECV:
		return sd_zc_ioctl(sk, cmd, (void __user *)arg);
	case SD_IOC_WAKE: {
		u32 dir;

		if (get_user(dir, (u32 __user *)arg))
			return -EFAULT;
		if (dir != SD_TOKEN_TX && dir != SD_TOKEN_RX)
			return -EINVAL;
		/* conn is stable while the file is held (struct sd_sock). */
		if (!smp_load_acquire(&ss->conn))
			return -ENOTCONN;
		sd_wake_peer(sk, dir == SD_TOKEN_TX);
		return 0;
	}
	case SD_IOC_RECV_WAIT:
		return sd_recv_wait(sock, (int __user *)arg);
	case SD_IOC_SEND_WAIT:
		return sd_send_wait(sk, (u32 __user *)arg);
	case SIOCINQ:
		lock_sock(sk);
		if (sk->sk_state == TCP_LISTEN)
			err = -EINVAL;
		else if (ss->conn && !READ_ONCE(ss->conn->gone[ss->side]))
			err = sd_ring_readable(sd_rx(ss), &bytes);
		release_sock(sk);
		if (err == -EPROTO) {
			bytes = 0;
			err = 0;
		}
		break;
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		/*
		 * What was sent is already in the peer's receive ring, as
		 * TCP data is once acknowledged: nothing waits to go out.
		 */
		if (sd_get_state(sk) == TCP_LISTEN)
			err = -EINVAL;
		break;
	default:
		return -ENOIOCTLCMD;
	}
	if (err < 0)
		return err;
	return put_user((int)min_t(size_t, bytes, INT_MAX), (int __user *)arg);
}

/*
 * Mirror SO_RCVLOWAT and TCP_INQ into the receive ring for libsd, which
 * decides there whether a blocking receive may return what it found, and
 * whether a receive without room for control messages is MSG_CTRUNC.
 * Only libsd reads it, for its own calls: the kernel's paths use
 * sk_rcvlowat and recvmsg_inq.  Under the socket lock.
 */
static void sd_mirror_rcvlowat(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	u32 val = sd_rcvlowat(sk);

	if (ss->recvmsg_inq)
		val |= SD_LOWAT_INQ;
	if (ss->conn)
		WRITE_ONCE(sd_ring_hdr(sd_rx(ss))->cons_lowat, val);
}

/*
 * TCP's options are TCP's (sd_tcp.c), except two kept by AF_SD itself,
 * for redirected and native sockets alike: TCP_NODELAY (nearly every
 * server sets it on every connection; every send is visible at once, so
 * it is only stored) and TCP_INQ (it changes only what recvmsg() tells,
 * sd_put_inq()).  Neither needs a TCP socket; one that exists gets them
 * too, as does one made later (sd_tcp_get()), so that a fallback keeps
 * them.
 */
static bool sd_tcp_opt_kept(int level, int optname)
{
	return level == SOL_TCP &&
	       (optname == TCP_NODELAY || optname == TCP_INQ);
}

static int sd_set_kept_opt(struct sock *sk, int optname, sockptr_t optval,
			   unsigned int optlen)
{
	struct sd_sock *ss = sd_sk(sk);
	int val, err = 0;

	if (optlen < sizeof(int))
		return -EINVAL;
	if (copy_from_sockptr(&val, optval, sizeof(val)))
		return -EFAULT;
	/* As TCP's: TCP_INQ takes 0 or 1, TCP_NODELAY any value. */
	if (optname == TCP_INQ && (val < 0 || val > 1))
		return -EINVAL;
	lock_sock(sk);
	if (optname == TCP_NODELAY)
		WRITE_ONCE(ss->nodelay, !!val);
	else
		WRITE_ONCE(ss->recvmsg_inq, val);
	sd_mirror_rcvlowat(sk);
	if (ss->tcp)
		err = ss->tcp->ops->setsockopt(ss->tcp, SOL_TCP, optname,
					       KERNEL_SOCKPTR(&val),
					       sizeof(val));
	release_sock(sk);
	return err;
}

int sd_setsockopt(struct socket *sock, int level, int optname,
		  sockptr_t optval, unsigned int optlen)
{
	struct sd_sock *ss = sd_sk(sock->sk);
	struct socket *tcp = sd_tcp_sock(sock->sk);
	int val;

	if (tcp)
		return tcp->ops->setsockopt(tcp, level, optname, optval,
					    optlen);
	/*
	 * Linux 6.1 refuses SO_REUSEPORT on sockets that are not
	 * AF_INET/AF_INET6 before any family sees it, so AF_SD offers the
	 * same switch as SOL_SD/SD_REUSEPORT (libsd maps one to the other).
	 */
	if (level == SOL_SD && optname == SD_REUSEPORT) {
		if (optlen < sizeof(int))
			return -EINVAL;
		if (copy_from_sockptr(&val, optval, sizeof(val)))
			return -EFAULT;
		lock_sock(sock->sk);
		sd_bind_set_reuseport(sock->sk, val);
		release_sock(sock->sk);
		return 0;
	}
	if (sd_tcp_opt_kept(level, optname))
		return sd_set_kept_opt(sock->sk, optname, optval, optlen);
	if (ss->redirected && level != SOL_SD)
		return sd_tcp_setsockopt(sock->sk, level, optname, optval,
					 optlen);
	return -ENOPROTOOPT;
}

/*
 * proto_ops.set_rcvlowat: setsockopt(SOL_SOCKET, SO_RCVLOWAT), with the
 * socket locked (sk_setsockopt()).  A socket that fell back passes it on
 * to its TCP socket, whose receive path applies it from then on.
 */
int sd_set_rcvlowat(struct sock *sk, int val)
{
	struct socket *tcp = sd_tcp_sock(sk);
	int err = 0;

	WRITE_ONCE(sk->sk_rcvlowat, val ? : 1);
	if (tcp) {
		lock_sock(tcp->sk);
		if (tcp->ops->set_rcvlowat)
			err = tcp->ops->set_rcvlowat(tcp->sk, val);
		else
			WRITE_ONCE(tcp->sk->sk_rcvlowat, val ? : 1);
		release_sock(tcp->sk);
		return err;
	}
	sd_mirror_rcvlowat(sk);
	/* A reader asleep may have enough now, as TCP's wakes it. */
	sk->sk_data_ready(sk);
	return 0;
}

static int sd_get_mmap_offsets(struct sock *sk, char __user *optval,
			       int __user *optlen)
{
	struct sd_sock *ss = sd_sk(sk);
	struct sd_mmap_offsets off = {};
	int len;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < (int)sizeof(off))
		return -EINVAL;

	lock_sock(sk);
	if (!ss->conn) {
		release_sock(sk);
		return -ENOTCONN;
	}
	sd_ring_offsets(sd_tx(ss), &off.tx);
	sd_ring_offsets(sd_rx(ss), &off.rx);
	sd_mirror_rcvlowat(sk);
	release_sock(sk);

	len = sizeof(off);
	if (copy_to_user(optval, &off, len) || put_user(len, optlen))
		return -EFAULT;
	return 0;
}

/* SD_TRANSPORT: a connection the link daemon carries is RDMA's. */
static int sd_transport(struct sock *sk)
{
	/* Pairs with the store-release that publishes the connection. */
	struct sd_conn *conn = smp_load_acquire(&sd_sk(sk)->conn);

	if (!conn)
		return SD_TRANSPORT_NONE;
	return conn->link_id ? SD_TRANSPORT_RDMA : SD_TRANSPORT_SHM;
}

/* SD_LINK_ID: which of the link daemon's connects made this connection. */
static int sd_get_link_id(struct sock *sk, char __user *optval,
			  int __user *optlen)
{
	struct sd_conn *conn;
	int len, err;
	u64 id = 0;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < (int)sizeof(id))
		return -EINVAL;
	lock_sock(sk);
	conn = sd_sk(sk)->conn;
	err = -ENOTCONN;
	if (conn) {
		/* The daemon's end only. */
		id = sd_sk(sk)->side == conn->link_end ? conn->link_id : 0;
		err = id ? 0 : -ENOENT;
	}
	release_sock(sk);
	if (err)
		return err;
	len = sizeof(id);
	if (put_user(len, optlen) || copy_to_user(optval, &id, len))
		return -EFAULT;
	return 0;
}

int sd_getsockopt(struct socket *sock, int level, int optname,
		  char __user *optval, int __user *optlen)
{
	struct sock *sk = sock->sk;
	struct socket *tcp = sd_tcp_sock(sk);
	int len, val;

	if (tcp)
		return tcp->ops->getsockopt(tcp, level, optname, optval,
					    optlen);
	if (level == SOL_SD && optname == SD_MMAP_OFFSETS)
		return sd_get_mmap_offsets(sk, optval, optlen);
	if (level == SOL_SD && optname == SD_LINK_ID)
		return sd_get_link_id(sk, optval, optlen);
	/* TCP_NODELAY and TCP_INQ are kept here, the rest by TCP. */
	if (level != SOL_SD && sd_sk(sk)->redirected &&
	    !sd_tcp_opt_kept(level, optname))
		return sd_tcp_getsockopt(sk, level, optname, optval, optlen);
	if (level == SOL_SD && optname == SD_REUSEPORT)
		val = sk->sk_reuseport;
	else if (level == SOL_SD && optname == SD_REDIRECTED)
		val = sd_sk(sk)->redirected;
	else if (level == SOL_SD && optname == SD_TRANSPORT)
		val = sd_transport(sk);
	else if (level == SOL_TCP && optname == TCP_NODELAY)
		val = READ_ONCE(sd_sk(sk)->nodelay);
	else if (level == SOL_TCP && optname == TCP_INQ)
		val = READ_ONCE(sd_sk(sk)->recvmsg_inq);
	else
		return -ENOPROTOOPT;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < 0)
		return -EINVAL;
	len = min_t(int, len, sizeof(int));
	if (put_user(len, optlen) || copy_to_user(optval, &val, len))
		return -EFAULT;
	return 0;
}

/*
 * Map a ring.  No socket lock here: mmap runs under mmap_lock, which the
 * data path takes (page faults) while holding the socket lock.  The
 * connection is stable once seen (see struct sd_sock).
 */
int sd_mmap(struct file *file, struct socket *sock,
	    struct vm_area_struct *vma)
{
	struct sd_sock *ss = sd_sk(sock->sk);
	/* Pairs with the release in sd_conn_establish(). */
	struct sd_conn *conn = smp_load_acquire(&ss->conn);
	struct socket *tcp = sd_tcp_sock(sock->sk);
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;

	if (tcp)
		return tcp->ops->mmap(file, tcp, vma);
	if (off == SD_PGOFF_POOL)
		return sd_pool_mmap(sock->sk, vma);
	if (!conn)
		return -ENOTCONN;
	switch (off) {
	case SD_PGOFF_TX_RING:
		return sd_ring_mmap(&conn->ring[ss->side], vma);
	case SD_PGOFF_RX_RING:
		return sd_ring_mmap(&conn->ring[!ss->side], vma);
	default:
		return -EINVAL;
	}
}
