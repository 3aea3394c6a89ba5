// SPDX-License-Identifier: GPL-2.0
//
// sdlink_carrier: see carrier.hpp and Documentation/remote.rst, "The
// carrier".
//
// Memory ordering.  Each atomic below implements one rule of the table in
// <linux/sd.h> ("Rings"), for the two sides this end drives:
//
//   send ring (RX), consumer    rule 1  forward(): load-acquire each header
//                               rule 2  retire(): zero, store-release consumer
//                               rule 3  prepare_sleep(): READER_WAIT, full,
//                                       load the header at the scan position
//                               rule 4  retire(): (consumer stored) full,
//                                       load NEED_CREDIT: wake the program
//                               rule 5  forward(): header 0, load-acquire
//                                       prod_flags, load the header again
//   receive ring (TX), producer rule 1  the peer's RDMA writes: the first
//                                       header last (see post_batch())
//                               rule 2  credit_back(): load-acquire consumer
//                               rule 3  take_in(): (records landed) full,
//                                       load READER_WAIT: wake the program
//                               rule 4  prepare_sleep(): NEED_CREDIT, full,
//                                       load consumer
//                               rule 5  take_in(): shutdown(SHUT_WR) after
//                                       the last records landed
//
// Tokens: every step on a side is bracketed by enter() and leave(), the
// busy count of <linux/sd.h>'s "Tokens".  A side the kernel took back is a
// reset: the mirror of the two rings cannot survive another consumer or
// producer of this end.
#include "carrier.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <new>

#include "ring.hpp"

namespace sdlink {

namespace {

// What a work request is, in the low byte of its wr_id (the carrier's
// number above it).
enum Kind : std::uint8_t {
	K_RECV = 1,
	K_BATCH,	// records, the last write carrying the immediate
	K_CREDIT,	// our credit word
	K_CTRL,		// a zero-length write: FIN or WANT alone
	K_BYE,		// a zero-length write: BYE
	K_RESET,	// a zero-length write: RESET
};

// Send queue entries a kind of write may not take, so that the rarer ones
// always find room: a RESET is posted at most once and last.
constexpr unsigned KEEP_BATCH = 4;
constexpr unsigned KEEP_CREDIT = 2;
constexpr unsigned KEEP_CTRL = 1;

// The local ACK timeout: 4.096 us * 2^17 = 537 ms, as the test programs'
// (tests/progs/rdma_verbs.hpp): a loaded soft-RoCE host must not resend
// writes whose acknowledgement was only late.
constexpr std::uint8_t ACK_TIMEOUT = 17;

std::uint64_t load_acquire(const std::uint64_t *p) noexcept
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

std::uint32_t load_acquire(const std::uint32_t *p) noexcept
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

void full_barrier() noexcept
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

bool pow2_size(std::uint64_t size) noexcept
{
	return size >= SD_RING_MIN_SIZE && size <= SD_RING_MAX_SIZE && !(size & (size - 1));
}

// A token or position field of a ring: inside the mapping, aligned, not
// in the data area.
bool field_ok(std::uint64_t at, std::uint64_t len, const sd_ring_offset &off) noexcept
{
	return at % len == 0 && at <= off.mmap_len && len <= off.mmap_len - at &&
	       (at + len <= off.data || at >= off.data + off.size);
}

} // namespace

// ---- the device -------------------------------------------------------------

std::unique_ptr<Device> Device::open(const char *name, int gid_index, int cq_len,
				     int *err) noexcept
{
	std::unique_ptr<Device> d(new (std::nothrow) Device());
	if (!d) {
		*err = -ENOMEM;
		return nullptr;
	}
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		*err = errno ? -errno : -ENODEV;
		return nullptr;
	}
	for (int i = 0; i < n && !d->ctx_; i++)
		if (!std::strcmp(ibv_get_device_name(list[i]), name))
			d->ctx_ = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!d->ctx_) {
		*err = -ENODEV;
		return nullptr;
	}
	d->gid_index_ = gid_index;
	d->cq_len_ = cq_len;
	if (ibv_query_port(d->ctx_, 1, &d->port_) ||
	    ibv_query_gid(d->ctx_, 1, gid_index, &d->gid_)) {
		*err = -EINVAL;
		return nullptr;
	}
	d->pd_ = ibv_alloc_pd(d->ctx_);
	d->chan_ = d->pd_ ? ibv_create_comp_channel(d->ctx_) : nullptr;
	if (!d->chan_) {
		*err = errno ? -errno : -ENOMEM;
		return nullptr;
	}
	const int fl = fcntl(d->chan_->fd, F_GETFL);
	if (fl < 0 || fcntl(d->chan_->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		*err = -errno;
		return nullptr;
	}
	d->cq_ = ibv_create_cq(d->ctx_, cq_len, nullptr, d->chan_, 0);
	if (!d->cq_) {
		*err = errno ? -errno : -ENOMEM;
		return nullptr;
	}
	*err = 0;
	return d;
}

Device::~Device()
{
	if (cq_)
		ibv_destroy_cq(cq_);
	if (chan_)
		ibv_destroy_comp_channel(chan_);
	if (pd_)
		ibv_dealloc_pd(pd_);
	if (ctx_)
		ibv_close_device(ctx_);
}

int Device::event_fd() const noexcept
{
	return chan_->fd;
}

int Device::add(Carrier *c, std::uint64_t *id) noexcept
{
	if (cq_used_ + Carrier::CQ_SHARE > cq_len_)
		return -ENOSPC;
	try {
		carriers_.emplace(next_id_, c);
	} catch (...) {
		return -ENOMEM;
	}
	cq_used_ += Carrier::CQ_SHARE;
	*id = next_id_++;
	return 0;
}

void Device::remove(std::uint64_t id) noexcept
{
	if (carriers_.erase(id))
		cq_used_ -= Carrier::CQ_SHARE;
}

bool Device::poll() noexcept
{
	ibv_wc wc[32];
	bool any = false;

	// Bounded, so that one busy device cannot starve the rest of a loop.
	for (int round = 0; round < 8; round++) {
		const int n = ibv_poll_cq(cq_, 32, wc);
		if (n < 0) {
			cq_errors_++;
			break;
		}
		for (int i = 0; i < n; i++) {
			// A carrier destroyed since leaves completions behind: ignored.
			const auto it = carriers_.find(wc[i].wr_id >> 8);
			if (it != carriers_.end())
				it->second->on_wc(wc[i]);
		}
		any |= n > 0;
		if (n < 32)
			break;
	}
	return any;
}

bool Device::arm() noexcept
{
	if (ibv_req_notify_cq(cq_, 0))
		cq_errors_++;
	return poll();
}

void Device::take_events() noexcept
{
	ibv_cq *cq;
	void *ctx;

	while (!ibv_get_cq_event(chan_, &cq, &ctx))
		ibv_ack_cq_events(cq, 1);
}

// ---- setting up -------------------------------------------------------------

std::unique_ptr<Carrier> Carrier::create(Device &dev, int fd, int *err) noexcept
{
	std::unique_ptr<Carrier> c(new (std::nothrow) Carrier(dev));
	if (!c) {
		close(fd);
		*err = -ENOMEM;
		return nullptr;
	}
	*err = c->setup(fd);
	if (*err)
		return nullptr;		// the destructor resets the connection
	return c;
}

int Carrier::setup(int fd) noexcept
{
	fd_ = fd;
	int err = dev_.add(this, &id_);
	if (err)
		return err;
	err = map_rings();
	if (err)
		return err;

	// The daemon end's two sides.  A stream that does not start at 0
	// both ways cannot mirror the peer's (whose rings start at 0 too).
	std::uint64_t pos = 0;
	std::uint32_t off = 0;
	err = acquire(rx_side_, SD_TOKEN_RX, &pos, &off);
	if (err)
		return err;
	if (pos || off)
		return -EINVAL;
	err = acquire(tx_side_, SD_TOKEN_TX, &pos, &off);
	if (err)
		return err;
	if (pos)
		return -EINVAL;

	// The send ring is the source of our writes, the receive ring and
	// the credit word the peer's targets.
	ibv_pd *pd = dev_.pd_;
	rx_mr_ = ibv_reg_mr(pd, rx_data_, size_, 0);
	tx_mr_ = ibv_reg_mr(pd, tx_data_, tx_size_,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	peer_credit_mr_ = ibv_reg_mr(pd, &peer_credit_word_, sizeof(peer_credit_word_),
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	my_credit_mr_ = ibv_reg_mr(pd, &my_credit_word_, sizeof(my_credit_word_), 0);
	if (!rx_mr_ || !tx_mr_ || !peer_credit_mr_ || !my_credit_mr_)
		return errno ? -errno : -ENOMEM;

	ibv_qp_init_attr qa = {};
	qa.send_cq = dev_.cq_;
	qa.recv_cq = dev_.cq_;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	qa.cap.max_send_wr = SQ_DEPTH;
	qa.cap.max_recv_wr = RQ_DEPTH;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qp_ = ibv_create_qp(pd, &qa);
	if (!qp_)
		return errno ? -errno : -ENOMEM;
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -EIO;
	for (unsigned i = 0; i < RQ_DEPTH; i++)
		post_recv();
	if (qp_broken_)
		return -EIO;

	std::uint32_t psn = 0;
	if (getrandom(&psn, sizeof(psn), 0) != sizeof(psn))
		return -EIO;
	std::memcpy(mine_.gid.data(), dev_.gid_.raw, 16);
	mine_.qpn = qp_->qp_num;
	// A first PSN of its own, so that nothing left of another
	// connection's packets falls into this one's window.
	mine_.psn = psn & 0xffffff;
	mine_.lid = dev_.port_.lid;
	mine_.mtu = static_cast<std::uint8_t>(dev_.port_.active_mtu);
	mine_.ring.data_addr = reinterpret_cast<std::uintptr_t>(tx_data_);
	mine_.ring.data_rkey = tx_mr_->rkey;
	mine_.ring.data_len = static_cast<std::uint32_t>(tx_size_);
	mine_.ring.index_addr = reinterpret_cast<std::uintptr_t>(&peer_credit_word_);
	mine_.ring.index_rkey = peer_credit_mr_->rkey;
	return 0;
}

int Carrier::map_rings() noexcept
{
	socklen_t len = sizeof(off_);
	if (getsockopt(fd_, SOL_SD, SD_MMAP_OFFSETS, &off_, &len))
		return -errno;
	if (len < sizeof(off_))
		return -EINVAL;
	void *tx = mmap(nullptr, off_.tx.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
			SD_PGOFF_TX_RING);
	if (tx == MAP_FAILED)
		return -errno;
	tx_map_ = tx;
	void *rx = mmap(nullptr, off_.rx.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
			SD_PGOFF_RX_RING);
	if (rx == MAP_FAILED)
		return -errno;
	rx_map_ = rx;
	const sd_ring_offset &t = off_.tx, &r = off_.rx;
	if (sd::check_ring(tx, t) || sd::check_ring(rx, r) || !pow2_size(t.size) ||
	    !pow2_size(r.size) || !field_ok(t.prod_pos, 8, t) || !field_ok(t.prod_token, 4, t) ||
	    !field_ok(t.cons_pos, 8, t) || !field_ok(r.cons_pos, 8, r) ||
	    !field_ok(r.cons_off, 4, r) ||
	    !field_ok(r.cons_token, 4, r))
		return -EINVAL;
	auto *tb = static_cast<unsigned char *>(tx);
	auto *rb = static_cast<unsigned char *>(rx);
	tx_data_ = tb + t.data;
	tx_size_ = t.size;
	tx_consumer_ = reinterpret_cast<std::uint64_t *>(tb + t.consumer);
	tx_prod_flags_ = reinterpret_cast<std::uint32_t *>(tb + t.prod_flags);
	tx_cons_flags_ = reinterpret_cast<std::uint32_t *>(tb + t.cons_flags);
	tx_prod_pos_ = reinterpret_cast<std::uint64_t *>(tb + t.prod_pos);
	tx_cons_pos_ = reinterpret_cast<std::uint64_t *>(tb + t.cons_pos);
	tx_side_.token_word = reinterpret_cast<std::uint32_t *>(tb + t.prod_token);
	rx_data_ = rb + r.data;
	size_ = r.size;
	rx_consumer_ = reinterpret_cast<std::uint64_t *>(rb + r.consumer);
	rx_prod_flags_ = reinterpret_cast<std::uint32_t *>(rb + r.prod_flags);
	rx_cons_flags_ = reinterpret_cast<std::uint32_t *>(rb + r.cons_flags);
	rx_cons_pos_ = reinterpret_cast<std::uint64_t *>(rb + r.cons_pos);
	rx_cons_off_ = reinterpret_cast<std::uint32_t *>(rb + r.cons_off);
	rx_side_.token_word = reinterpret_cast<std::uint32_t *>(rb + r.cons_token);
	return 0;
}

int Carrier::acquire(Side &s, std::uint32_t dir, std::uint64_t *pos, std::uint32_t *off) noexcept
{
	sd_token tok = {};
	tok.dir = dir;
	tok.busy = reinterpret_cast<std::uintptr_t>(&s.busy);
	if (ioctl(fd_, SD_IOC_ACQUIRE, &tok))
		return -errno;
	s.token = tok.token;
	*pos = tok.pos;
	*off = tok.off;
	return 0;
}

// Start a step on a side: our 1 in busy (a full barrier), then the token.
bool Carrier::enter(Side &s) noexcept
{
	__atomic_fetch_add(&s.busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(s.token_word, __ATOMIC_RELAXED) == s.token)
		return true;
	__atomic_fetch_sub(&s.busy, 1, __ATOMIC_RELEASE);
	return false;
}

// End it: the step's stores, the position among them, before busy drops.
void Carrier::leave(Side &s) noexcept
{
	__atomic_fetch_sub(&s.busy, 1, __ATOMIC_RELEASE);
}

int Carrier::connect(const Endpoint &peer) noexcept
{
	if (state_ != State::NEW || resetting_)
		return -EALREADY;
	int err = 0;
	const Ring &r = peer.ring;
	if (peer.qpn > 0xffffff || !peer.qpn || peer.psn > 0xffffff || peer.mtu < IBV_MTU_256 ||
	    peer.mtu > IBV_MTU_4096 || !pow2_size(r.data_len) || !r.data_addr || !r.index_addr ||
	    r.index_addr % 8)
		err = -EINVAL;
	else if (r.data_len != size_)
		err = -EMSGSIZE;	// our send ring cannot mirror its receive ring
	if (err) {
		fail(err, false,
		     err == -EMSGSIZE ? "the peer's ring is not our size" : "a bad endpoint from the peer");
		maybe_finish();
		return err;
	}
	peer_ = peer;

	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = static_cast<ibv_mtu>(std::min(mine_.mtu, peer.mtu));
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.dlid = peer.lid;
	std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
	a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(dev_.gid_index_);
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		err = errno ? -errno : -EIO;
		fail(err, false, "the queue pair refused the peer (RTR)");
		maybe_finish();
		return err;
	}
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ACK_TIMEOUT;
	// 6, not 7: rxe (soft-RoCE) takes a retry count of 7 as "retry for
	// ever", as the specification says only of the RNR count
	// (rxe_comp.c: "if (qp->comp.retry_cnt != 7) retry_cnt--"), and a
	// path that lost every packet then never fails the connection.
	a.retry_cnt = 6;
	a.rnr_retry = 7;
	a.sq_psn = mine_.psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		err = errno ? -errno : -EIO;
		fail(err, false, "the queue pair refused the peer (RTS)");
		maybe_finish();
		return err;
	}
	state_ = State::RUNNING;
	return 0;
}

// ---- work requests ----------------------------------------------------------

void Carrier::post_recv() noexcept
{
	ibv_recv_wr wr = {}, *bad = nullptr;
	wr.wr_id = id_ << 8 | K_RECV;
	if (ibv_post_recv(qp_, &wr, &bad))
		qp_broken_ = true;
}

bool Carrier::post_write(std::uint8_t kind, std::uint64_t local, std::uint32_t lkey,
			 std::uint32_t len, std::uint64_t remote, std::uint32_t rkey,
			 std::uint32_t imm_val) noexcept
{
	ibv_sge sge = {};
	sge.addr = local;
	sge.length = len;
	sge.lkey = lkey;
	ibv_send_wr wr = {}, *bad = nullptr;
	wr.wr_id = id_ << 8 | kind;
	wr.sg_list = len ? &sge : nullptr;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm_val);
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp_, &wr, &bad)) {
		qp_broken_ = true;
		fail(-EIO, false, "posting a write failed");
		return false;
	}
	Inflight &f = ring_[(inflight_head_ + inflight_n_++) % SQ_DEPTH];
	f = {kind, 1, (imm_val & imm::CTRL) == 0 && (imm_val & imm::FIN), 0};
	sq_used_++;
	cnt_.writes++;
	cnt_.bytes += len;
	return true;
}

// The records of the send ring in [start, end), into the same offsets of
// the peer's receive ring: the bytes after the first header first (two
// writes if the range wraps), then the 8-byte first header, with the
// immediate.  The peer's program polls that header: the writes of one RC
// queue pair are placed in order (RoCE adapters, rxe), so once it sees the
// header every byte of the batch is in place.
bool Carrier::post_batch(std::uint64_t start, std::uint64_t end, std::uint32_t imm_val) noexcept
{
	const std::uint64_t mask = size_ - 1;
	const std::uint64_t off = start & mask;
	const std::uint64_t n = end - start;
	const std::uint64_t first = std::min(n, size_ - off);
	const std::uint64_t base = reinterpret_cast<std::uintptr_t>(rx_data_);
	ibv_sge sge[3] = {};
	ibv_send_wr wr[3] = {}, *bad = nullptr;
	int k = 0;

	auto add = [&](std::uint64_t at, std::uint64_t len) {
		sge[k].addr = base + at;
		sge[k].length = static_cast<std::uint32_t>(len);
		sge[k].lkey = rx_mr_->lkey;
		wr[k].wr_id = id_ << 8 | K_BATCH;
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].opcode = IBV_WR_RDMA_WRITE;
		wr[k].wr.rdma.remote_addr = peer_.ring.data_addr + at;
		wr[k].wr.rdma.rkey = peer_.ring.data_rkey;
		if (k)
			wr[k - 1].next = &wr[k];
		k++;
	};
	if (first > SD_REC_HDR_LEN)
		add(off + SD_REC_HDR_LEN, first - SD_REC_HDR_LEN);
	if (n > first)
		add(0, n - first);
	add(off, SD_REC_HDR_LEN);
	wr[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr[k - 1].send_flags = IBV_SEND_SIGNALED;
	wr[k - 1].imm_data = htonl(imm_val);
	if (ibv_post_send(qp_, wr, &bad)) {
		qp_broken_ = true;
		fail(-EIO, false, "posting a batch failed");
		return false;
	}
	Inflight &f = ring_[(inflight_head_ + inflight_n_++) % SQ_DEPTH];
	f = {K_BATCH, static_cast<std::uint8_t>(k), (imm_val & imm::FIN) != 0, end};
	sq_used_ += static_cast<unsigned>(k);
	cnt_.writes += static_cast<unsigned>(k);
	cnt_.bytes += n;
	cnt_.batches++;
	return true;
}

// ---- completions ------------------------------------------------------------

void Carrier::on_wc(const ibv_wc &wc) noexcept
{
	const auto kind = static_cast<std::uint8_t>(wc.wr_id & 0xff);

	if (wc.status != IBV_WC_SUCCESS) {
		// A queue pair in error flushes everything: nothing more goes.
		qp_broken_ = true;
		fail(wc.status == IBV_WC_WR_FLUSH_ERR ? -ECONNRESET : -EIO, false, "a work request failed");
		return;
	}
	if (kind == K_RECV) {
		if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
			fail(-EPROTO, true, "the peer sent, not wrote");
			return;
		}
		cnt_.imms++;
		// Also while resetting: a peer whose writes met no receive
		// would retry them for ever (RNR), and never drain its queue.
		post_recv();
		on_imm(ntohl(wc.imm_data));
		return;
	}
	if (!inflight_n_) {
		fail(-EPROTO, false, "a completion nobody waited for");
		return;
	}
	const Inflight f = ring_[inflight_head_];
	inflight_head_ = (inflight_head_ + 1) % SQ_DEPTH;
	inflight_n_--;
	sq_used_ -= f.wrs;
	if (f.kind != kind) {
		fail(-EPROTO, false, "completions out of order");
		return;
	}
	if (f.kind == K_BATCH)
		landed_ = f.end;
	if (f.fin)
		fin_done_ = true;
	if (f.kind == K_BYE)
		bye_done_ = true;
}

// What the peer's write-with-immediate says.  Everything is checked: the
// peer is another host.
void Carrier::on_imm(std::uint32_t v) noexcept
{
	if (v == imm::RESET)
		peer_reset_ = true;
	if (resetting_)
		return;
	if (v & imm::CTRL) {
		if (v == imm::RESET)
			fail(-ECONNRESET, false, "the peer reset the connection");
		else if (v == imm::BYE && peer_fin_ && !peer_bye_)
			peer_bye_ = true;
		else
			fail(-EPROTO, true, "a bad control immediate");
		return;
	}
	if (v & imm::CREDIT)
		credit_dirty_ = true;
	const std::uint32_t n = v & imm::LEN_MASK;
	if (n) {
		// Records only before the end, whole, and within the credit
		// we gave (nothing else can have been written).  Our program
		// may have read past tail_ already (the records landed before
		// their immediate came), and that credit gone to the peer.
		if (peer_fin_ || (v & imm::CREDIT) || n % SD_REC_ALIGN ||
		    tail_ + n > credit_posted_ + tx_size_) {
			fail(-EPROTO, true, "a bad record count from the peer");
			return;
		}
		// Our program closed: as TCP's RST to data after a close; not
		// for records it read before we took in their immediate.  What
		// it read is its credit, or further on the read position a
		// libsd owner publishes at every call (its credit goes out
		// only every so often); the program's own word, trusted only
		// to spare its own connection the reset.
		if (mapped() && (load_acquire(tx_cons_flags_) & SD_RING_CLOSED) &&
		    static_cast<std::int64_t>(program_read() - (tail_ + n)) < 0) {
			fail(-ECONNRESET, true, "data for a program that closed");
			return;
		}
		tail_ += n;
		cnt_.rx_bytes += n;
	}
	if (v & imm::WANT)
		peer_wants_ = true;
	if (v & imm::FIN) {
		if (peer_fin_) {
			fail(-EPROTO, true, "a second FIN from the peer");
			return;
		}
		peer_fin_ = true;
	}
}

// ---- the receive ring (the peer's records) -----------------------------------

bool Carrier::take_in() noexcept
{
	bool work = false;

	if (tail_ != published_) {
		if (!enter(tx_side_)) {
			fail(-EBUSY, true, "the receive ring's token was taken");
			return true;
		}
		__atomic_store_n(tx_prod_pos_, tail_, __ATOMIC_RELAXED);
		leave(tx_side_);
		published_ = tail_;
		// Rule 3: the records landed before their completion; wake a
		// program that sleeps for them.
		full_barrier();
		if (__atomic_load_n(tx_cons_flags_, __ATOMIC_RELAXED) & SD_RING_READER_WAIT) {
			const std::uint32_t dir = SD_TOKEN_TX;
			ioctl(fd_, SD_IOC_WAKE, &dir);
			cnt_.wakes++;
		}
		work = true;
	}
	// Rule 5: the end of the peer's stream after its last records.
	if (peer_fin_ && !shut_) {
		shutdown(fd_, SHUT_WR);
		cnt_.syscalls++;
		shut_ = true;
		work = true;
	}
	return work;
}

// Our program's credit to the peer: when a quarter of the ring was freed,
// or at once while the peer waits for it.
bool Carrier::credit_back() noexcept
{
	if (peer_fin_)
		return false;		// the peer sends nothing more
	// Rule 2 (producer): the credit, then the space is the peer's.
	// Our program may have read records that landed before we took in
	// their immediate: its credit is bounded by what the peer may write.
	const std::uint64_t c = load_acquire(tx_consumer_);
	if (c % SD_REC_ALIGN || c - prog_credit_ > credit_posted_ + tx_size_ - prog_credit_) {
		fail(-EPROTO, true, "a bad credit from our program");
		return true;
	}
	prog_credit_ = c;
	if (c == credit_posted_ || (c - credit_posted_ < tx_size_ / 4 && !peer_wants_) ||
	    !sq_room(1, KEEP_CREDIT))
		return false;
	__atomic_store_n(&my_credit_word_, c, __ATOMIC_RELEASE);
	if (!post_write(K_CREDIT, reinterpret_cast<std::uintptr_t>(&my_credit_word_),
			my_credit_mr_->lkey, sizeof(my_credit_word_), peer_.ring.index_addr,
			peer_.ring.index_rkey, imm::CREDIT))
		return true;
	credit_posted_ = c;
	peer_wants_ = false;
	cnt_.credit_writes++;
	return true;
}

// ---- the send ring (our program's records) ------------------------------------

// A header at stream position pos, as <linux/sd.h> says a consumer checks
// it.  1 and its space, -EPROTO for anything else (a zero-copy record
// too: its pages cannot cross to another host).
int Carrier::hdr_check(std::uint64_t word, std::uint64_t pos, std::uint64_t *space,
		       bool *pad) const noexcept
{
	const auto len = static_cast<std::uint32_t>(word);
	const auto flags = static_cast<std::uint32_t>(word >> 32);
	const std::uint64_t off = pos & (size_ - 1);

	if ((flags & ~SD_REC_FLAGS_MASK) || !(flags & SD_REC_VALID) || (flags & SD_REC_ZC))
		return -EPROTO;
	const std::uint64_t sp = sd::rec_space(len);
	*pad = flags & SD_REC_PAD;
	if (*pad ? off + sp != size_ : (!len || off + sp > size_))
		return -EPROTO;
	// Nothing can end beyond our credit plus the size.
	if (pos + sp - head_ > size_)
		return -EPROTO;
	*space = sp;
	return 1;
}

bool Carrier::forward() noexcept
{
	// The peer's credit word, written by its RDMA write.
	const std::uint64_t pc = load_acquire(&peer_credit_word_);
	credit_dirty_ = false;
	if (pc % SD_REC_ALIGN || pc - peer_credit_ > sent_ - peer_credit_) {
		fail(-EPROTO, true, "a bad credit from the peer");
		return true;
	}
	if (pc != peer_credit_) {
		peer_credit_ = pc;
		want_sent_ = false;
	}
	if (fin_posted_)
		return false;
	if (!enter(rx_side_)) {
		fail(-EBUSY, true, "the send ring's token was taken");
		return true;
	}
	bool work = false;
	// A batch: up to a quarter of the ring, or one record.
	const std::uint64_t cap = std::max<std::uint64_t>(size_ / 4, SD_REC_HDR_LEN);
	blocked_ = false;
	while (sq_room(3, KEEP_BATCH)) {
		const std::uint64_t start = sent_;
		std::uint64_t pos = start, records = 0;
		bool fin = false;
		for (;;) {
			// Nothing starts at our credit plus the size (that header
			// is a record in flight, a whole ring back); nothing the
			// peer has no room for goes.
			if (pos - head_ >= size_)
				break;
			if (pos - peer_credit_ >= size_) {
				blocked_ = true;
				break;
			}
			std::uint64_t word = load_acquire(hdr(pos));
			if (!word) {
				// Rule 5: FIN after the last header; look again.
				// The kernel sets RESET before FIN in this word:
				// with it, the end is a reset, never a FIN.
				const std::uint32_t pf = load_acquire(rx_prod_flags_);
				if (pf & SD_RING_RESET) {
					leave(rx_side_);
					fail(-ECONNRESET, true,
					     "the kernel reset the connection");
					return true;
				}
				if ((pf & SD_RING_FIN) && !load_acquire(hdr(pos)))
					fin = true;
				break;
			}
			std::uint64_t sp = 0;
			bool pad = false;
			if (hdr_check(word, pos, &sp, &pad) < 0) {
				leave(rx_side_);
				fail(-EPROTO, true, "a corrupt record in the send ring");
				return true;
			}
			if (pos + sp - peer_credit_ > size_) {
				blocked_ = true;
				break;
			}
			if (pos != start && pos + sp - start > cap)
				break;
			pos += sp;
			records += !pad;
		}
		std::uint32_t v = static_cast<std::uint32_t>(pos - start);
		if (fin)
			v |= imm::FIN;
		if (blocked_ && !want_sent_)
			v |= imm::WANT;
		if (pos != start) {
			if (!post_batch(start, pos, v))
				break;
			sent_ = pos;
			cnt_.records += records;
		} else if (v) {
			if (!post_write(K_CTRL, 0, 0, 0, peer_.ring.data_addr, peer_.ring.data_rkey, v))
				break;
		} else {
			break;
		}
		work = true;
		if (v & imm::WANT)
			want_sent_ = true;
		if (fin) {
			fin_posted_ = true;
			break;
		}
		if (blocked_)
			break;
	}
	leave(rx_side_);
	return work;
}

// Writes the peer acknowledged: their bytes are consumed.  Rule 2: zero
// them, then publish the credit; rule 4: wake a program that waits for it.
bool Carrier::retire_batches() noexcept
{
	if (landed_ == head_)
		return false;
	if (!enter(rx_side_)) {
		fail(-EBUSY, true, "the send ring's token was taken");
		return true;
	}
	const std::uint64_t from = head_ & (size_ - 1);
	const std::uint64_t n = landed_ - head_;
	const std::uint64_t first = std::min(n, size_ - from);
	std::memset(rx_data_ + from, 0, first);
	if (n > first)
		std::memset(rx_data_, 0, n - first);
	cnt_.zeroed += n;
	publish_head(landed_);
	leave(rx_side_);
	full_barrier();
	if (__atomic_load_n(rx_prod_flags_, __ATOMIC_RELAXED) & SD_RING_NEED_CREDIT) {
		const std::uint32_t dir = SD_TOKEN_RX;
		ioctl(fd_, SD_IOC_WAKE, &dir);
		cnt_.wakes++;
	}
	return true;
}

void Carrier::publish_head(std::uint64_t head) noexcept
{
	head_ = head;
	__atomic_store_n(rx_cons_pos_, head, __ATOMIC_RELAXED);
	__atomic_store_n(rx_cons_off_, 0U, __ATOMIC_RELAXED);
	__atomic_store_n(rx_consumer_, head, __ATOMIC_RELEASE);
}

// ---- the step ---------------------------------------------------------------

// The kernel reset the connection (the program's reset, a corrupt ring it
// found): the peer is told.
bool Carrier::check_flags() noexcept
{
	const std::uint32_t f = __atomic_load_n(rx_prod_flags_, __ATOMIC_RELAXED) |
				__atomic_load_n(rx_cons_flags_, __ATOMIC_RELAXED) |
				__atomic_load_n(tx_prod_flags_, __ATOMIC_RELAXED) |
				__atomic_load_n(tx_cons_flags_, __ATOMIC_RELAXED);
	if (!(f & SD_RING_RESET))
		return false;
	fail(-ECONNRESET, true, "the kernel reset the connection");
	return true;
}

bool Carrier::poll() noexcept
{
	if (state_ == State::DONE || state_ == State::RESET)
		return false;
	bool work = false;
	if (state_ == State::RUNNING && !resetting_) {
		// Awake and looking: the wait flags of our sides are not needed,
		// whoever set them (prepare_sleep(), or the kernel's poll of
		// the socket, which arms both when epoll looks at it).
		if (__atomic_load_n(rx_cons_flags_, __ATOMIC_RELAXED) & SD_RING_READER_WAIT)
			__atomic_fetch_and(rx_cons_flags_, ~SD_RING_READER_WAIT, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(tx_prod_flags_, __ATOMIC_RELAXED) & SD_RING_NEED_CREDIT)
			__atomic_fetch_and(tx_prod_flags_, ~SD_RING_NEED_CREDIT, __ATOMIC_SEQ_CST);
		work |= check_flags();
		if (!resetting_)
			work |= retire_batches();
		if (!resetting_)
			work |= take_in();
		if (!resetting_)
			work |= forward();
		if (!resetting_)
			work |= credit_back();
	}
	const State before = state_;
	maybe_finish();
	return work || state_ != before;
}

bool Carrier::prepare_sleep() noexcept
{
	if (state_ != State::RUNNING || resetting_)
		return true;		// a completion comes, or nothing does
	if (landed_ != head_ || tail_ != published_ || credit_dirty_ ||
	    (peer_fin_ && !shut_) || check_flags())
		return false;
	// Rule 3: records or FIN on the send ring wake us.
	// (Not while the whole ring is in flight: a completion comes.)
	if (!fin_posted_ && !blocked_ && sq_room(3, KEEP_BATCH) && sent_ - head_ < size_) {
		__atomic_fetch_or(rx_cons_flags_, SD_RING_READER_WAIT, __ATOMIC_SEQ_CST);
		full_barrier();
		if (load_acquire(hdr(sent_)) || (load_acquire(rx_prod_flags_) & SD_RING_FIN))
			return false;
	}
	// Rule 4: the peer waits for credit our program has not published.
	if (!peer_fin_ && peer_wants_ && sq_room(1, KEEP_CREDIT)) {
		__atomic_fetch_or(tx_prod_flags_, SD_RING_NEED_CREDIT, __ATOMIC_SEQ_CST);
		full_barrier();
		if (load_acquire(tx_consumer_) != credit_posted_)
			return false;
	}
	return true;
}

int Carrier::describe(char *buf, std::size_t len) const noexcept
{
	const std::uint32_t rxf = mapped() ? __atomic_load_n(rx_prod_flags_, __ATOMIC_RELAXED) : 0;
	const std::uint32_t rxc = mapped() ? __atomic_load_n(rx_cons_flags_, __ATOMIC_RELAXED) : 0;
	const std::uint32_t txf = mapped() ? __atomic_load_n(tx_prod_flags_, __ATOMIC_RELAXED) : 0;
	const std::uint32_t txc = mapped() ? __atomic_load_n(tx_cons_flags_, __ATOMIC_RELAXED) : 0;
	const std::uint64_t txcons = mapped() ? __atomic_load_n(tx_consumer_, __ATOMIC_RELAXED) : 0;
	const std::uint64_t at = mapped() && sent_ - head_ < size_ ?
					 __atomic_load_n(hdr(sent_), __ATOMIC_RELAXED) : 0;
	return std::snprintf(
		buf, len,
		"state %d%s send: head %llu landed %llu sent %llu peer_credit %llu hdr@sent %#llx "
		"blocked %d want_sent %d fin %d/%d/%d flags %#x/%#x | receive: tail %llu "
		"published %llu consumer %llu prog_credit %llu posted %llu peer_wants %d "
		"peer_fin %d shut %d flags %#x/%#x | sq %u inflight %u bye %d/%d/%d | %s",
		static_cast<int>(state_), resetting_ ? " resetting" : "",
		static_cast<unsigned long long>(head_), static_cast<unsigned long long>(landed_),
		static_cast<unsigned long long>(sent_), static_cast<unsigned long long>(peer_credit_),
		static_cast<unsigned long long>(at), blocked_, want_sent_, fin_seen_, fin_posted_,
		fin_done_, rxf, rxc, static_cast<unsigned long long>(tail_),
		static_cast<unsigned long long>(published_), static_cast<unsigned long long>(txcons),
		static_cast<unsigned long long>(prog_credit_),
		static_cast<unsigned long long>(credit_posted_), peer_wants_, peer_fin_, shut_, txf,
		txc, sq_used_, inflight_n_, bye_posted_, bye_done_, peer_bye_, what_);
}

// ---- the end ----------------------------------------------------------------

void Carrier::maybe_finish() noexcept
{
	if (state_ == State::DONE || state_ == State::RESET)
		return;
	if (resetting_) {
		// Once the peer has our RESET (our queue drained), or sent its
		// own (it ends without waiting for ours), or the queue pair
		// broke.
		if (qp_broken_ || !sq_used_ || peer_reset_ || state_ == State::NEW)
			teardown();
		return;
	}
	if (state_ != State::RUNNING)
		return;
	// Both streams ended and the peer has ours: say nothing more will
	// come, and end once the peer said the same (so that neither's
	// queue pair goes while the other may still write to it).
	if (fin_done_ && peer_fin_ && shut_ && !bye_posted_ && sq_room(1, KEEP_CTRL)) {
		bye_posted_ = true;
		post_write(K_BYE, 0, 0, 0, peer_.ring.data_addr, peer_.ring.data_rkey, imm::BYE);
	}
	if (bye_done_ && peer_bye_ && !sq_used_)
		teardown();
}

void Carrier::fail(int why, bool tell_peer, const char *what) noexcept
{
	if (resetting_ || state_ == State::DONE || state_ == State::RESET)
		return;
	resetting_ = true;
	err_ = why;
	what_ = what;
	close_socket(true);
	if (tell_peer && state_ == State::RUNNING && !qp_broken_ && sq_room(1, 0))
		post_write(K_RESET, 0, 0, 0, peer_.ring.data_addr, peer_.ring.data_rkey, imm::RESET);
}

void Carrier::reset(int why) noexcept
{
	fail(why, true, "reset by the daemon");
	maybe_finish();
}

// Unmap the rings (they hold the socket's file), then close: with abort,
// as SO_LINGER 0 does, a reset (ECONNRESET for the program).
void Carrier::close_socket(bool abort) noexcept
{
	if (rx_map_)
		munmap(rx_map_, off_.rx.mmap_len);
	if (tx_map_)
		munmap(tx_map_, off_.tx.mmap_len);
	rx_map_ = tx_map_ = nullptr;
	if (fd_ < 0)
		return;
	if (abort) {
		const linger l = {1, 0};
		setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	close(fd_);
	fd_ = -1;
}

void Carrier::teardown() noexcept
{
	if (qp_)
		ibv_destroy_qp(qp_);
	qp_ = nullptr;
	for (ibv_mr **mr : {&rx_mr_, &tx_mr_, &peer_credit_mr_, &my_credit_mr_}) {
		if (*mr)
			ibv_dereg_mr(*mr);
		*mr = nullptr;
	}
	close_socket(resetting_);
	state_ = resetting_ ? State::RESET : State::DONE;
}

Carrier::~Carrier()
{
	if (state_ != State::DONE && state_ != State::RESET) {
		if (!resetting_) {
			resetting_ = true;
			err_ = -ECONNABORTED;
		}
		teardown();
	}
	if (id_)
		dev_.remove(id_);
}

} // namespace sdlink
