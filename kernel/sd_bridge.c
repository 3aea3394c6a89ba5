// SPDX-License-Identifier: GPL-2.0
/*
 * AF_SD: the bridge's own descriptor of an RDMA connection.
 *
 * libsd's bridge stands in for the remote end of an RDMA connection's two
 * rings (Documentation/rdma.rst).  It cannot know when the program's last
 * descriptor of the socket goes (dup, fork, SCM_RIGHTS), so it does not
 * hold the socket: it holds this descriptor, which holds the connection
 * (its rings and its link) and the netns, but not the socket.  The
 * program's last close releases the socket at once; the bridge sees the
 * end in the rings, carries what is left and closes this descriptor, and
 * only then is the peer's monitor told how the connection ended.
 *
 * Who tells the peer's monitor is decided under conn->lock: the socket's
 * close leaves it to a bridge that is still there (conn->bridged and not
 * conn->bridge_gone), and a bridge that goes while the socket is still
 * open resets the connection, unless the socket is closing too (a process
 * that exits without closing it): then its close tells.
 *
 * A bridge whose process exits while another process still holds the
 * socket (fork) leaves instead (SD_IOC_RDMA_LEAVE): it stops with nothing
 * in flight, the peer's monitor learns where, and its release leaves the
 * connection waiting for a bridge in a process that holds the socket,
 * which resumes from there (SD_IOC_RDMA_RESUME, SD_IOC_RDMA_MOVE).  A
 * bridge whose process lives on but closed its copy hands over the same
 * way (SD_IOC_RDMA_HANDOVER), once a process that holds the socket asked
 * for it (its SD_IOC_RDMA_BRIDGE was refused: conn->wanted).  A bridge
 * whose process execs leaves for the process's next image
 * (SD_RDMA_LEAVE_EXEC), which alone may take it up while it lives
 * (conn->heir): not a child of vfork that execs first, say.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/fdtable.h>
#include <linux/jiffies.h>
#include <linux/pid.h>
#include <linux/sched/signal.h>
#include <linux/sched/mm.h>
#include <linux/uaccess.h>
#include <net/net_namespace.h>

#include "af_sd.h"

struct sd_bridge {
	struct sd_conn	*conn;		/* a reference */
	struct net	*net;		/* a reference: the link's netns */
	u8		side;		/* the socket's index in conn->end[] */
	/* Under conn->lock: */
	bool		leaving;	/* SD_IOC_RDMA_LEAVE under way or done */
	bool		left;		/* it was: this bridge carries nothing */
	bool		successor;	/* made after one left */
	bool		moved;		/* its half went (SD_IOC_RDMA_MOVE) */
	void		*stash;		/* SD_IOC_RDMA_STASH's, kvmalloc */
	u32		stash_len;
};

/*
 * The socket of the bridge's connection, with a reference, or NULL once
 * it closed.  Every AF_SD socket is freed after a grace period, so it may
 * be looked at under RCU while its last reference goes.
 */
static struct sock *sd_bridge_sock(struct sd_bridge *b)
{
	struct sock *sk;

	rcu_read_lock();
	sk = rcu_dereference(b->conn->end[b->side]);
	if (sk && !refcount_inc_not_zero(&sk->sk_refcnt))
		sk = NULL;
	rcu_read_unlock();
	return sk;
}

/**
 * sd_rdma_op - an SD_IOC_RDMA operation from the bridge
 * @sk: the connection's socket, or NULL when it is closed
 * @link: the connection's link
 * @op: SD_RDMA_OP_*
 *
 * Wake-ups and the end of the peer's stream go to a socket that is still
 * there (and are nothing otherwise); a reset goes to both ends.
 */
int sd_rdma_op(struct sock *sk, struct sd_link *link, u32 op)
{
	switch (op) {
	case SD_RDMA_OP_DATA:
		if (sk)
			sk->sk_data_ready(sk);
		return 0;
	case SD_RDMA_OP_ROOM:
		if (sk)
			sk->sk_write_space(sk);
		return 0;
	case SD_RDMA_OP_FIN:
		if (sk) {
			lock_sock(sk);
			sd_conn_remote_fin(sk);
			release_sock(sk);
		}
		return 0;
	case SD_RDMA_OP_RESET:
		sd_link_fail(link);
		return 0;
	default:
		return -EINVAL;
	}
}

static int sd_fd_is(const void *p, struct file *file, unsigned int fd)
{
	return file == p ? fd + 1 : 0;
}

/*
 * Whether a process other than the caller's holds @sk's file: a
 * descriptor elsewhere (a child of fork), or one in flight (SCM_RIGHTS).
 * The caller's own references are its descriptors and its mappings of the
 * socket; a reference another of its threads holds for a moment (a call
 * in progress on the socket) counts as another holder, which costs a
 * needless move, nothing else.  *@fds: whether the caller holds a
 * descriptor of it; *@kept: one that exec keeps (not close-on-exec).
 */
static bool sd_sock_held_elsewhere(struct sock *sk, bool *fds, bool *kept)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	struct file *file = NULL;
	long own = 1;		/* ours, below */
	unsigned int n = 0;
	int r;

	*fds = false;
	*kept = false;

	/* As in sd_bridge_sock_closing(): a file is freed after a grace period. */
	rcu_read_lock();
	read_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_socket && sk->sk_socket->file &&
	    get_file_rcu(sk->sk_socket->file))
		file = sk->sk_socket->file;
	read_unlock_bh(&sk->sk_callback_lock);
	rcu_read_unlock();
	if (!file)
		return false;
	while ((r = iterate_fd(current->files, n, sd_fd_is, file)) > 0) {
		own++;
		n = r;
		/* The table may be replaced meanwhile; RCU keeps the old. */
		rcu_read_lock();
		if (!close_on_exec(r - 1, files_fdtable(current->files)))
			*kept = true;
		rcu_read_unlock();
	}
	*fds = own > 1;
	if (mm) {
		VMA_ITERATOR(vmi, mm, 0);

		mmap_read_lock(mm);
		for_each_vma(vmi, vma)
			if (vma->vm_file == file)
				own++;
		mmap_read_unlock(mm);
	}
	r = file_count(file) > own;
	fput(file);
	return r;
}

/*
 * A process that is refused a bridge while one is there asks again every
 * 100 ms (libsd) for as long as it holds the socket: one that has not for
 * this long gave up.
 */
#define SD_WANTED_FOR	HZ

/*
 * Whether a process still waits to bridge @conn (SD_IOC_RDMA_HANDOVER);
 * when none does, the flag that told the bridge is cleared.  Under
 * conn->lock.
 */
static bool sd_bridge_wanted(struct sd_conn *conn, u8 side)
{
	if (conn->wanted &&
	    time_before(jiffies, conn->wanted_at + SD_WANTED_FOR))
		return true;
	conn->wanted = false;
	sd_ring_clear_flags(&conn->ring[side], SD_RING_HDR_CONS,
			    SD_RING_WANTED);
	return false;
}

/*
 * SD_IOC_RDMA_LEAVE: the bridge stopped at @at, nothing in flight, and its
 * process goes while another holds the socket, or execs while it holds it
 * itself (SD_RDMA_LEAVE_EXEC: its new image takes it up).  SD_IOC_RDMA_HANDOVER
 * (@handover): the same while its process lives on but holds no
 * descriptor of the socket, for a process that waits to bridge it.  The
 * peer's monitor is told first, then the connection waits for the next
 * bridge.  -EAGAIN while the peer's bridge moves (sd_link_leave()).
 */
static int __sd_bridge_leave(struct sd_bridge *b, const struct sd_rdma_move *at,
			     bool handover)
{
	struct sd_conn *conn = b->conn;
	struct sd_rdma_move to = *at;
	bool held, fds, kept, exec;
	struct sock *sk;
	int err;

	/* The ring positions are the successor's to check (libsd's rings). */
	if (at->kept || at->how & ~SD_RDMA_LEAVE_EXEC ||
	    (handover && at->how) ||
	    at->flags & ~(SD_RDMA_MOVE_TX_FIN | SD_RDMA_MOVE_RX_FIN) ||
	    at->took > at->sent)
		return -EINVAL;
	exec = at->how & SD_RDMA_LEAVE_EXEC;
	to.how = 0;
	sk = sd_bridge_sock(b);
	if (!sk)
		return -EPIPE;
	held = sd_sock_held_elsewhere(sk, &fds, &kept);
	sock_put(sk);
	/*
	 * An exec needs a descriptor that exec keeps; any other leave needs
	 * another holder of the socket, and a handover also that the caller
	 * keeps no descriptor of it.
	 */
	if (exec ? !kept : (!held || (handover && fds)))
		return -EBUSY;

	spin_lock(&conn->lock);
	if (READ_ONCE(conn->reset))
		err = -ECONNRESET;
	else if (handover && !sd_bridge_wanted(conn, b->side))
		err = -EBUSY;
	else if (conn->gone[0] || conn->gone[1])
		err = -EPIPE;
	else if (b->leaving)
		err = -EALREADY;
	else
		err = 0;
	/* A handover refused for now may come later. */
	if (!err)
		b->leaving = true;
	/* The stash cannot change now (sd_bridge_stash()). */
	to.kept = b->stash_len;
	spin_unlock(&conn->lock);
	if (err)
		return err;

	/*
	 * Told before the connection is marked: a socket that closes
	 * meanwhile still leaves its end to us, and our release tells
	 * (after the LEAVE, which the peer's bridge needs first).
	 */
	err = sd_link_leave(conn->link, &to);
	if (err == -EAGAIN) {
		/* The peer's bridge moves first: ours may leave after. */
		spin_lock(&conn->lock);
		b->leaving = false;
		spin_unlock(&conn->lock);
	}
	if (err)
		return err;
	spin_lock(&conn->lock);
	b->left = true;
	conn->left = true;
	conn->moved = true;
	conn->moved_at = to;
	/* The last successor may not have taken the one before. */
	swap(conn->stash, b->stash);
	conn->stash_len = b->stash_len;
	if (exec) {
		put_pid(conn->heir);
		conn->heir = get_pid(task_tgid(current));
	}
	spin_unlock(&conn->lock);
	sd_stat_inc(b->net, SD_STAT_RDMA_MOVES);
	return 0;
}

/* Drop the bridge's stash. */
static void sd_bridge_unstash(struct sd_bridge *b)
{
	void *old;

	spin_lock(&b->conn->lock);
	old = b->stash;
	b->stash = NULL;
	b->stash_len = 0;
	spin_unlock(&b->conn->lock);
	kvfree(old);
}

/* A leave that fails drops the stash: the bridge carries on with it. */
static int sd_bridge_leave(struct sd_bridge *b, const struct sd_rdma_move *at,
			   bool handover)
{
	int err = __sd_bridge_leave(b, at, handover);

	sd_bridge_unstash(b);
	return err;
}

/*
 * SD_IOC_RDMA_STASH: the peer's bytes that landed but are not in the ring,
 * for the successor, replacing any stashed before.  Not while leaving.
 */
static int sd_bridge_stash(struct sd_bridge *b, const struct sd_rdma_stash *st)
{
	struct sd_conn *conn = b->conn;
	void *buf = NULL;
	int err = 0;

	if (st->reserved || st->len > SD_RDMA_STASH_MAX)
		return -EINVAL;
	if (st->len) {
		buf = kvmalloc(st->len, GFP_KERNEL_ACCOUNT);
		if (!buf)
			return -ENOMEM;
		if (copy_from_user(buf, u64_to_user_ptr(st->addr), st->len)) {
			kvfree(buf);
			return -EFAULT;
		}
	}
	spin_lock(&conn->lock);
	if (b->leaving) {
		err = -EBUSY;
	} else {
		swap(b->stash, buf);
		b->stash_len = st->len;
	}
	spin_unlock(&conn->lock);
	kvfree(buf);	/* the one replaced, or ours if refused */
	return err;
}

/*
 * SD_IOC_RDMA_UNSTASH: a successor takes what the bridge before it
 * stashed, once.  Returns its length.
 */
static int sd_bridge_take_stash(struct sd_bridge *b,
				const struct sd_rdma_stash *st)
{
	struct sd_conn *conn = b->conn;
	void *buf;
	u32 len;
	int err = 0;

	if (st->reserved)
		return -EINVAL;
	spin_lock(&conn->lock);
	buf = conn->stash;
	len = conn->stash_len;
	if (!b->successor)
		err = -ENOENT;
	else if (st->len < len)
		err = -EMSGSIZE;
	if (!err) {
		conn->stash = NULL;
		conn->stash_len = 0;
	}
	spin_unlock(&conn->lock);
	if (err)
		return err;
	if (len && copy_to_user(u64_to_user_ptr(st->addr), buf, len))
		err = -EFAULT;
	kvfree(buf);
	return err ?: len;
}

/* SD_IOC_RDMA_MOVE: a successor's half, to the peer's monitor, once. */
static int sd_bridge_move(struct sd_bridge *b, const struct sd_rdma_half *half)
{
	struct sd_conn *conn = b->conn;
	int err = 0;

	if (half->flags || memchr_inv(half->reserved, 0, sizeof(half->reserved)))
		return -EINVAL;
	spin_lock(&conn->lock);
	if (!b->successor || b->leaving)
		err = -EINVAL;
	else if (b->moved)
		err = -EALREADY;
	b->moved = true;
	spin_unlock(&conn->lock);
	if (err)
		return err;
	return sd_link_move(conn->link, half);
}

static long sd_bridge_ioctl(struct file *file, unsigned int cmd,
			    unsigned long arg)
{
	struct sd_bridge *b = file->private_data;
	struct sd_link *link = b->conn->link;
	struct sd_rdma_moved moved;
	struct sd_rdma_stash stash;
	struct sd_rdma_half half;
	struct sd_rdma_move at;
	struct sock *sk;
	u32 op;
	int err;

	switch (cmd) {
	case SD_IOC_RDMA:
		if (get_user(op, (u32 __user *)arg))
			return -EFAULT;
		sk = sd_bridge_sock(b);
		err = sd_rdma_op(sk, link, op);
		if (sk)
			sock_put(sk);
		/* Even after the peer's clean end, which may not have landed. */
		if (!err && op == SD_RDMA_OP_RESET)
			sd_conn_bridge_fail(b->conn, b->side);
		return err;
	case SD_IOC_RDMA_PEER:
		err = sd_link_get_peer(link, &half, 0);
		if (err)
			return err;
		if (copy_to_user((void __user *)arg, &half, sizeof(half)))
			return -EFAULT;
		return 0;
	case SD_IOC_RDMA_LEAVE:
		if (copy_from_user(&at, (void __user *)arg, sizeof(at)))
			return -EFAULT;
		return sd_bridge_leave(b, &at, false);
	case SD_IOC_RDMA_HANDOVER:
		if (copy_from_user(&at, (void __user *)arg, sizeof(at)))
			return -EFAULT;
		return sd_bridge_leave(b, &at, true);
	case SD_IOC_RDMA_RESUME:
		spin_lock(&b->conn->lock);
		err = b->successor ? 0 : -ENOENT;
		at = b->conn->moved_at;
		spin_unlock(&b->conn->lock);
		if (err)
			return err;
		if (copy_to_user((void __user *)arg, &at, sizeof(at)))
			return -EFAULT;
		return 0;
	case SD_IOC_RDMA_MOVE:
		if (copy_from_user(&half, (void __user *)arg, sizeof(half)))
			return -EFAULT;
		return sd_bridge_move(b, &half);
	case SD_IOC_RDMA_STASH:
	case SD_IOC_RDMA_UNSTASH:
		if (copy_from_user(&stash, (void __user *)arg, sizeof(stash)))
			return -EFAULT;
		if (cmd == SD_IOC_RDMA_STASH)
			return sd_bridge_stash(b, &stash);
		return sd_bridge_take_stash(b, &stash);
	case SD_IOC_RDMA_MOVED:
		err = sd_link_moved(link, &moved);
		if (err)
			return err;
		if (copy_to_user((void __user *)arg, &moved, sizeof(moved)))
			return -EFAULT;
		return 0;
	default:
		return -ENOTTY;
	}
}

/* The rings, at the socket's offsets. */
static int sd_bridge_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct sd_bridge *b = file->private_data;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;

	switch (off) {
	case SD_PGOFF_TX_RING:
		return sd_ring_mmap(&b->conn->ring[b->side], vma);
	case SD_PGOFF_RX_RING:
		return sd_ring_mmap(&b->conn->ring[!b->side], vma);
	default:
		return -EINVAL;
	}
}

/*
 * Whether the socket is closing already: the last reference to its file
 * went and the release is queued.  A process that exits closes all its
 * descriptors first and then releases their files, the last closed first,
 * so the bridge's descriptor (numbered higher) goes just before the socket
 * of a connection the program never closed.  Files and AF_SD sockets are
 * freed after a grace period, so both may be looked at under RCU;
 * sk_callback_lock keeps sk_socket (sock_orphan clears it).
 */
static bool sd_bridge_sock_closing(struct sd_bridge *b)
{
	struct socket *sock;
	struct file *file;
	struct sock *sk;
	bool closing = false;

	rcu_read_lock();
	sk = rcu_dereference(b->conn->end[b->side]);
	if (sk) {
		read_lock_bh(&sk->sk_callback_lock);
		sock = sk->sk_socket;
		file = sock ? READ_ONCE(sock->file) : NULL;
		closing = file && !file_count(file);
		read_unlock_bh(&sk->sk_callback_lock);
	}
	rcu_read_unlock();
	return closing;
}

/*
 * The bridge let go (its last descriptor and mapping went).  If the socket
 * closed first, this is the end of the connection: the peer's monitor
 * hears it was clean if the bridge took everything the socket sent.  If
 * the socket is closing too, its close tells.  If it is still open,
 * nothing carries its data any more: reset; unless the bridge left, and
 * then the connection waits for the next one.
 */
static int sd_bridge_release(struct inode *inode, struct file *file)
{
	struct sd_bridge *b = file->private_data;
	struct sd_conn *conn = b->conn;
	bool open, clean, closing;

	/*
	 * Looked at first: a socket closing now ends the connection itself,
	 * after the flag below (sd_conn_close), or did already (gone).
	 */
	closing = sd_bridge_sock_closing(b);
	spin_lock(&conn->lock);
	open = !conn->gone[b->side];
	if (b->left)
		conn->bridged = false;	/* the next may come */
	else
		conn->bridge_gone = true;
	spin_unlock(&conn->lock);

	if (open) {
		if (!closing && !b->left) {
			sd_link_fail(conn->link);
			sd_conn_bridge_fail(conn, b->side);
		}
	} else {
		/* The socket is gone: nobody produces into the send ring. */
		clean = !READ_ONCE(conn->reset) &&
			sd_ring_drained(&conn->ring[b->side]);
		sd_link_close(conn->link, clean);
	}
	kvfree(b->stash);
	sd_conn_put(conn);
	put_net(b->net);
	kfree(b);
	return 0;
}

static const struct file_operations sd_bridge_fops = {
	.owner		= THIS_MODULE,
	.release	= sd_bridge_release,
	.unlocked_ioctl	= sd_bridge_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.mmap		= sd_bridge_mmap,
	.llseek		= noop_llseek,
};

/**
 * sd_bridge_open - SD_IOC_RDMA_BRIDGE: the bridge's descriptor
 * @sk: an AF_SD socket
 *
 * Returns the new descriptor, -ENOTCONN when @sk is not an RDMA
 * connection, -EBUSY when its connection has a bridge already (or had
 * one), or its last bridge left it to the next image of a process that
 * still lives and is not the caller's, -EPIPE when it is closing.  Takes
 * @sk's lock.
 */
int sd_bridge_open(struct sock *sk)
{
	struct sd_sock *ss = sd_sk(sk);
	struct pid *heir;
	struct sd_conn *conn;
	struct sd_bridge *b;
	bool kick = false;
	int err, fd;

	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;

	lock_sock(sk);
	conn = ss->conn;
	err = -ENOTCONN;
	if (!conn || !conn->link)
		goto out_unlock;
	spin_lock(&conn->lock);
	if (conn->bridged) {
		err = -EBUSY;
		/*
		 * A bridge carries it: tell it that this process would take
		 * the connection up, should its own let go of the socket.
		 */
		if (!conn->bridge_gone && !conn->left) {
			kick = !conn->wanted ||
			       !time_before(jiffies, conn->wanted_at + SD_WANTED_FOR);
			conn->wanted = true;
			conn->wanted_at = jiffies;
			sd_ring_set_flags(&conn->ring[ss->side],
					  SD_RING_HDR_CONS, SD_RING_WANTED);
		}
	} else if (conn->gone[ss->side] || READ_ONCE(conn->reset)) {
		err = -EPIPE;
	} else if (conn->heir && conn->heir != task_tgid(current) &&
		   pid_has_task(conn->heir, PIDTYPE_TGID)) {
		/* Left for the next image of a process that still lives. */
		err = -EBUSY;
	} else {
		err = 0;
	}
	b->successor = conn->left;
	spin_unlock(&conn->lock);
	/* Outside conn->lock, which is never taken under the link's. */
	if (kick)
		sd_link_kick(conn->link);
	if (err)
		goto out_unlock;
	refcount_inc(&conn->ref);
	b->conn = conn;
	b->side = ss->side;
	b->net = get_net(sock_net(sk));

	fd = anon_inode_getfd("[sd_bridge]", &sd_bridge_fops, b,
			      O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		err = fd;
		goto out_put;
	}
	/*
	 * Published only once the descriptor exists, so that the socket's
	 * close never leaves the end to a bridge that will not be (the
	 * socket cannot close meanwhile: we hold its lock).  Another
	 * thread may close the new descriptor before this: that release
	 * found the socket open and reset the connection, and bridged is
	 * then harmless (bridge_gone is set).
	 */
	spin_lock(&conn->lock);
	conn->bridged = true;
	conn->left = false;
	conn->wanted = false;
	heir = conn->heir;
	conn->heir = NULL;
	sd_ring_clear_flags(&conn->ring[ss->side], SD_RING_HDR_CONS,
			    SD_RING_WANTED);
	spin_unlock(&conn->lock);
	release_sock(sk);
	put_pid(heir);
	return fd;

out_put:
	put_net(b->net);
	sd_conn_put(conn);
out_unlock:
	release_sock(sk);
	kfree(b);
	return err;
}
