// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The RDMA bridge of the preload shim (Documentation/rdma.rst, "The bridge
// in libsd").  An AF_SD connection to another host that both monitors
// agreed to carry over RDMA has its two rings here as on one host; this
// process's bridge stands in for the remote end of both.  It consumes the
// send ring into RDMA writes with immediate into the peer's landing area,
// lands the peer's writes into the receive ring, and returns credits the
// same way.  The program's own calls (libsd's fast path or the kernel's)
// see an ordinary AF_SD connection.
//
// One device per process (the first whose GID table holds the local
// address of a connection), one protection domain, one bridge thread with
// one completion channel and one completion queue that all connections of
// the process share, grown as they come (a second only on a device whose
// largest queue cannot hold them all).  Adaptive batching: a send
// finds the link idle and goes as one write at once; while writes are in
// flight what the program sends gathers in the send ring and the next
// write takes all of it.
//
// libibverbs is opened with dlopen on first use, so a process on a machine
// without rdma-core, or without a device, runs as before: its sockets never
// offer RDMA, and its connections to other hosts are TCP.
//
// The wire between two bridges (the same as tests/progs/sd_rdma_bridge's):
// the peer's landing area (a byte ring of ring_size bytes, in its half)
// receives stream bytes at their stream offset modulo its size; each write
// carries immediate data: the byte count, or IMM_FIN (no more bytes), or
// IMM_CREDIT (the 8-byte word at the half's credit_addr now holds how many
// landing bytes the peer took).
#include "hooks.hpp"

#include "../ring.hpp"
#include "fast.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <new>

using namespace sd::shim;

namespace {

constexpr std::uint32_t LAND_SIZE = 256 * 1024;
constexpr std::uint32_t IMM_FIN = 1U << 31;
constexpr std::uint32_t IMM_CREDIT = 1U << 30;
constexpr unsigned DATA_INFLIGHT = 8;	// data writes in flight, per connection
constexpr unsigned SEND_WR = 16;	// all writes in flight (data, credit, fin)
constexpr unsigned RECVS = 2 * SEND_WR;	// the peer's writes we can take
// Receives taken are posted again this many at a time, in one call (a
// lock and a queue update in the provider): at least RECVS - RECV_BATCH + 1
// stay posted, more than the peer has writes in flight.
constexpr unsigned RECV_BATCH = 8;
constexpr std::uint64_t CREDIT_BATCH = LAND_SIZE / 4;	// see credit_due()
constexpr unsigned CQE_PER_LINK = SEND_WR + RECVS;	// its completions in flight at most
// The queue pair's local ACK timeout, 4.096 us * 2^17 = 537 ms: a write
// whose acknowledgement takes longer goes again (ACK_RETRIES times before
// the queue pair fails).  At 2^14, 67 ms, a loaded soft-RoCE host resent a
// few tens of writes and a thousand packets per 20 MB (rdma.rst); the
// rdma_cm's queue pairs over RoCE wait longer still (2^19).
constexpr std::uint8_t ACK_TIMEOUT = 17;
constexpr std::uint8_t ACK_RETRIES = 7;
// Writes this small carry their bytes in the request itself: the device
// need not read them from our memory region (an adapter's read across the
// bus; rxe's key lookup and page walk), as rsocket's and perftest's small
// writes (rdma.rst).
constexpr std::uint32_t INLINE_MAX = 256;
constexpr unsigned CQ_FIRST_LINKS = 8;	// a new completion queue's room, then doubled
constexpr unsigned MAX_LINKS = 1024;
constexpr unsigned MAX_CQS = 16;	// MAX_LINKS on devices of 64 links a queue
constexpr int WAIT_MS = 1000;		// a sleeping bridge looks around this often
constexpr int BLIND_MS = 20;		// and this often while it leaves completions to
					// a program thread (wait_events()) whether it
					// still sleeps,
constexpr int BLIND_LOOK_MS = 100;	// and this often at everything else
constexpr std::int64_t EXIT_STALL_NS = 3'000'000'000;	// exit: no progress this long
constexpr std::int64_t IDLE_EXIT_NS = 2'000'000'000;	// no connection: the thread ends
constexpr std::int64_t ALONE_CHECK_NS = 1'000'000'000;	// is it the last thread?
constexpr std::int64_t ADOPT_POLL_NS = 100'000'000;	// a child looks for a left bridge
constexpr std::int64_t MOVE_WAIT_NS = 10'000'000'000;	// the peer's successor comes by then
constexpr std::int64_t HANDOVER_RETRY_NS = 1'000'000'000;	// after a refused handover
constexpr unsigned MAX_ORPHANS = 64;
constexpr unsigned MAX_PENDING = 64;
constexpr std::int64_t PENDING_GIVE_UP_NS = 120'000'000'000;	// beyond any rendezvous

// ---- libibverbs, opened on first use --------------------------------------

// The functions of libibverbs used here (the rest are inline in its
// header, through the context's operations).
#define SD_VERBS(X)                                                                \
	X(ibv_get_device_list) X(ibv_free_device_list) X(ibv_open_device)          \
	X(ibv_close_device) X(ibv_query_gid) X(ibv_alloc_pd)                       \
	X(ibv_create_comp_channel) X(ibv_create_cq) X(ibv_destroy_cq)              \
	X(ibv_create_qp) X(ibv_destroy_qp) X(ibv_modify_qp) X(ibv_reg_mr)          \
	X(ibv_dereg_mr) X(ibv_get_cq_event) X(ibv_ack_cq_events)                   \
	X(ibv_query_device) X(ibv_resize_cq)

struct Verbs {
#define SD_VERB(name) decltype(&::name) name;
	SD_VERBS(SD_VERB)
#undef SD_VERB

	bool load() noexcept
	{
		void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!h)
			return false;
		bool ok = true;
#define SD_VERB(name)                                                              \
	name = reinterpret_cast<decltype(name)>(dlsym(h, #name));                  \
	ok = ok && name;
		SD_VERBS(SD_VERB)
#undef SD_VERB
		return ok;	// h stays open: its objects live as long as we do
	}
};

constinit Verbs v = {};

// ---- one connection ------------------------------------------------------

// WAIT_PEER: our queue pair waits for the peer's half.  RUN: connected.
// MOVING: the peer's bridge left (its process exited while a child holds
// its socket); ours waits for its successor's half.
enum class State { WAIT_PEER, RUN, MOVING };

struct Link {
	int bfd = -1;			// the bridge's descriptor (SD_IOC_RDMA_BRIDGE)
	int sfd = -1;			// the socket's, when the bridge was made
	ino_t sino = 0;			// and its inode (a child looks for it)
	unsigned slot = 0;
	int cqi = -1;			// its queue pair's completion queue
	std::uint32_t gen = 0;
	State state = State::WAIT_PEER;
	ibv_qp *qp = nullptr;
	ibv_mr *mr = nullptr;		// landing | peer_took: the peer writes there
	ibv_mr *lmr = nullptr;		// mirror | my_took: only we read them
	unsigned char *mem = nullptr;	// landing | peer_took | mirror | my_took
	std::size_t mem_len = 0;
	std::uint32_t max_inline = 0;	// the largest write the device takes inline
	unsigned char *landing = nullptr, *mirror = nullptr;
	std::uint64_t *peer_took = nullptr, *my_took = nullptr;
	void *tx_map = MAP_FAILED, *rx_map = MAP_FAILED;
	std::size_t tx_len = 0, rx_len = 0;
	const std::uint32_t *rx_cons_flags = nullptr;
	const std::uint32_t *tx_cons_flags = nullptr;
	alignas(sd::Producer) unsigned char prod_buf[sizeof(sd::Producer)];
	alignas(sd::Consumer) unsigned char cons_buf[sizeof(sd::Consumer)];
	bool have_rings = false;
	bool started = false;		// the thread's (under hub.lock)
	sd_rdma_half mine = {}, peer = {};
	std::uint64_t sent = 0, arrived = 0, copied = 0, credited = 0;
	std::uint64_t pushed = 0;	// taken from the send ring into the mirror
	unsigned inflight = 0, data_inflight = 0;
	unsigned recvs_owed = 0;	// receives taken, not posted again yet
	bool tx_done = false, rx_done = false, peer_fin = false, failed = false;
	bool closed_seen = false;	// the peer's clean end, seen before a poll
	bool refin = false;		// our end of stream goes again (a move)
	bool credit_now = false;	// a credit goes even if nothing landed
	bool hold = false;		// a successor: nothing goes before the peer's first write
	bool leaving = false;		// exit: stop, let the writes complete, leave
	bool leave_tried = false;
	bool handing = false;		// the same to hand over (SD_IOC_RDMA_HANDOVER)
	bool execing = false;		// the same for the process's next image
	std::int64_t handover_at = 0;	// the last look at that
	std::int64_t moving_since = 0;

	sd::Producer &prod() { return *std::launder(reinterpret_cast<sd::Producer *>(prod_buf)); }
	sd::Consumer &cons() { return *std::launder(reinterpret_cast<sd::Consumer *>(cons_buf)); }
};

// ---- the process's device and its bridge thread ----------------------------

struct Hub {
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;	// all but the thread's own
	int avail = 0;			// 0: not known yet, 1: a device, -1: none
	ibv_context *ctx = nullptr;
	std::uint8_t gid_index = 0;
	ibv_gid gid = {};
	ibv_pd *pd = nullptr;
	ibv_comp_channel *chan = nullptr;
	// The completion queues, made in order and kept; each holds entries
	// for cq_room[c] links and carries cq_links[c] (under lock).
	ibv_cq *cq[MAX_CQS] = {};
	unsigned cq_room[MAX_CQS] = {};
	unsigned cq_links[MAX_CQS] = {};
	unsigned max_cqe = 0;		// the device's largest queue, less the spare
	// For SD_SHIM_TRACE (sd_rdma_trace()): the queues made, and the most
	// links carried at once.
	std::atomic<unsigned> n_cqs{0}, links_peak{0};
	// And the writes of data: those that skipped the send ring
	// (sd_rdma_send()), those from it (pump()).  Counted under lock
	// (count()), read without.
	std::atomic<std::uint64_t> direct_writes{0}, ring_writes{0};
	// And the receives that took landed bytes straight into the
	// program's buffers (sd_rdma_recv()), and the landings into a
	// receive ring (land()).
	std::atomic<std::uint64_t> direct_reads{0}, ring_landings{0};
	// The links' round trip (ns, 0: not yet; sd_rdma_rtt()), and the
	// post of the write being timed (0: none; time_write()).  Written
	// under lock by the completions, and without by a spin that ran out
	// (sd_rdma_spun()): a guess either way, so plain loads and stores.
	std::atomic<std::int64_t> rtt{0}, timed_at{0};
	unsigned timed_skip = 0;	// writes not timed (under lock)
	int ev = -1;			// the module's kicks and ours
	bool thread = false;
	// A child's copies of its parent's connections: the socket's
	// descriptor and inode, until it makes their bridge or they end.
	struct Orphan {
		int fd;
		ino_t ino;
	} orphans[MAX_ORPHANS] = {};
	unsigned n_orphans = 0;
	// Non-blocking connects whose rendezvous the module makes in the
	// background (sd_rdma_connect()): the program's descriptor, our
	// copy of it (so that the socket is the same one when it ends), the
	// socket's inode, and the link made for it.
	struct Pending {
		int fd, dup;
		ino_t ino;
		Link *l;
		std::int64_t since;
	} pending[MAX_PENDING] = {};
	unsigned n_pending = 0;
	std::atomic<bool> exiting{false};
	bool ask_now = false;		// a new image's orphans: no wait for an exec
	bool execing = false;		// the process execs: no orphan taken up
	pid_t pid = 0;			// whose hub this is (a vfork child's is not)
	std::atomic<bool> last{false};	// the thread outlived the program's
	// Slots: set under lock by the hooks, taken by the thread.
	Link *slots[MAX_LINKS] = {};
	std::uint32_t gens[MAX_LINKS] = {};
	std::atomic<std::uint64_t> progress{0};
	std::atomic<unsigned> waiters{0};	// program threads in sd_rdma_wait()
	std::atomic<unsigned> naps{0};		// and how many went there so far
	std::atomic<unsigned> spinners{0};	// program threads spinning for data
	// A sleep ended for the channel, and its event is still to be taken
	// (after_sleep()).  Under lock.
	bool events_owed = false;
};

constinit Hub hub;

// The link made from each socket descriptor's connection: its slot + 1,
// 0 for none.  Written under hub.lock; a program thread reads it without,
// and checks the slot under hub.lock (sd_rdma_wake(), sd_rdma_wait()), so
// a stale entry only makes it help another of this process's links.
std::atomic<std::uint16_t> link_of[fast::MAX_CONNS];
unsigned top = 0;		// slots in use are below it (under hub.lock)

// The connection whose blocking receive this thread is in, while it
// waits for data (sd_rdma_receiving()): this thread's own help leaves
// what lands for it in the landing area (left), for the receive to take
// into the program's buffers itself (sd_rdma_recv()).  Other threads, the
// bridge's among them, land it in the ring as ever.
struct Receiving {
	int fd = -1;
	bool left = false;
};
constinit thread_local Receiving receiving __attribute__((tls_model("initial-exec")));

// This thread spins for data (sd_rdma_spinning()): a completion it polls
// came within a turn of its spin, so a timed write's is a round trip.
constinit thread_local bool spinner __attribute__((tls_model("initial-exec")));

// A work request's id: the link's slot (bits 0-31) and generation (32-60),
// and what it is: a timed write (bit 61, time_write()), a receive (bit
// 62), a write of data (bit 63).
constexpr std::uint64_t WR_TIMED = 1ULL << 61;
constexpr std::uint64_t WR_RECV = 1ULL << 62;
constexpr std::uint64_t WR_DATA = 1ULL << 63;
constexpr std::uint32_t GEN_MASK = 0x1fffffff;

// One more in a counter that only holders of hub.lock change: no locked
// instruction (dearer than the plain ones under TCG) on a write's path.
void count(std::atomic<std::uint64_t> &c) noexcept
{
	c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

std::uint64_t wr_id(const Link &l)
{
	return (std::uint64_t{l.gen & GEN_MASK} << 32) | l.slot;
}

void kick() noexcept
{
	const std::uint64_t one = 1;
	(void)!real::write()(hub.ev, &one, sizeof(one));
}

// Whether the kernel has any RDMA device (sysfs; no libibverbs yet).
bool any_device() noexcept
{
	DIR *d = opendir("/sys/class/infiniband");
	bool any = false;

	if (!d)
		return false;
	while (const dirent *e = readdir(d)) {
		if (e->d_name[0] != '.') {
			any = true;
			break;
		}
	}
	closedir(d);
	return any;
}

// Whether the libibverbs of this machine lists any device (cached).  Under
// hub.lock.
bool available_locked() noexcept
{
	if (hub.avail)
		return hub.avail > 0;
	hub.avail = -1;
	if (const char *e = getenv("SD_RDMA"); e && !strcmp(e, "0"))
		return false;
	// Without a device, not even libibverbs (it loads every provider).
	if (!any_device())
		return false;
	if (!v.load())
		return false;
	int n = 0;
	ibv_device **devs = v.ibv_get_device_list(&n);
	if (devs) {
		if (n > 0)
			hub.avail = 1;
		v.ibv_free_device_list(devs);
	}
	return hub.avail > 0;
}

bool available() noexcept
{
	pthread_mutex_lock(&hub.lock);
	const bool a = available_locked();
	pthread_mutex_unlock(&hub.lock);
	return a;
}

// The GID of local address a on ctx's port 1, or -1.
int gid_of(ibv_context *ctx, const in6_addr &a, ibv_gid *gid) noexcept
{
	for (int i = 0; i < 256; i++) {
		if (v.ibv_query_gid(ctx, 1, i, gid))
			return -1;
		if (!memcmp(gid->raw, a.s6_addr, 16))
			return i;
	}
	return -1;
}

// Open the device whose GID table holds local address a (the process's
// device once chosen: one per process), with its PD, channel and event
// descriptor.  Under hub.lock.
bool device_for(const in6_addr &a) noexcept
{
	ibv_gid gid;

	if (!available_locked())
		return false;
	if (hub.ctx)
		return gid_of(hub.ctx, a, &gid) >= 0;
	int n = 0;
	ibv_device **devs = v.ibv_get_device_list(&n);
	if (!devs)
		return false;
	const char *want = getenv("SD_RDMA_DEVICE");
	for (int i = 0; i < n && !hub.ctx; i++) {
		if (want && strcmp(devs[i]->name, want))
			continue;
		ibv_context *ctx = v.ibv_open_device(devs[i]);
		if (!ctx)
			continue;
		const int idx = gid_of(ctx, a, &gid);
		if (idx < 0) {
			v.ibv_close_device(ctx);
			continue;
		}
		hub.pd = v.ibv_alloc_pd(ctx);
		hub.chan = v.ibv_create_comp_channel(ctx);
		hub.ev = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		// Non-blocking: a program thread may take an event the
		// thread was woken for (sd_rdma_wait()).
		if (!hub.pd || !hub.chan || hub.ev < 0 ||
		    real::fcntl()(hub.chan->fd, F_SETFL,
				  real::fcntl()(hub.chan->fd, F_GETFL) | O_NONBLOCK)) {
			// Not worth unwinding: this process will not try again.
			hub.avail = -1;
			break;
		}
		hub.ctx = ctx;
		hub.gid_index = static_cast<std::uint8_t>(idx);
		hub.gid = gid;
		// The largest completion queue it makes, one link's worth
		// kept spare (cq_entries()); a device that does not say gets
		// queues of 64 links.
		ibv_device_attr da = {};
		const unsigned most = v.ibv_query_device(ctx, &da) || da.max_cqe <= 0 ?
					      65 * CQE_PER_LINK : static_cast<unsigned>(da.max_cqe);
		hub.max_cqe = most > CQE_PER_LINK ? most - CQE_PER_LINK : 0;
	}
	v.ibv_free_device_list(devs);
	return hub.ctx != nullptr;
}

// ---- setting up a connection ---------------------------------------------

void link_free(Link *l) noexcept
{
	if (l->sfd >= 0 && static_cast<unsigned>(l->sfd) < fast::MAX_CONNS) {
		std::uint16_t mine = static_cast<std::uint16_t>(l->slot + 1);
		link_of[l->sfd].compare_exchange_strong(mine, 0, std::memory_order_relaxed);
	}
	if (l->have_rings) {
		l->prod().~Producer();
		l->cons().~Consumer();
	}
	if (l->tx_map != MAP_FAILED)
		munmap(l->tx_map, l->tx_len);
	if (l->rx_map != MAP_FAILED)
		munmap(l->rx_map, l->rx_len);
	if (l->qp)
		v.ibv_destroy_qp(l->qp);
	if (l->cqi >= 0)
		hub.cq_links[l->cqi]--;
	if (l->mr)
		v.ibv_dereg_mr(l->mr);
	if (l->lmr)
		v.ibv_dereg_mr(l->lmr);
	if (l->mem)
		munmap(l->mem, l->mem_len);
	// Last: closing it tells the module the bridge let go.
	if (l->bfd >= 0)
		real::close()(l->bfd);
	l->~Link();
	free(l);
}

// The entries of a completion queue for room links: one link's more, for
// what a link that went may have left in it unpolled.
int cq_entries(unsigned room) noexcept
{
	return static_cast<int>((room + 1) * CQE_PER_LINK);
}

// Whether completion queue c can take one more link: it has room, or is
// grown to have it (doubled, up to the device's largest).  Under hub.lock.
bool cq_fits(unsigned c) noexcept
{
	const unsigned need = hub.cq_links[c] + 1;
	if (need <= hub.cq_room[c])
		return true;
	const unsigned room = std::min(std::max(2 * hub.cq_room[c], need),
				       hub.max_cqe / CQE_PER_LINK);
	// Resizing keeps what the queue holds, and its arming; no other
	// thread polls it meanwhile (hub.lock).
	if (room < need || v.ibv_resize_cq(hub.cq[c], cq_entries(room)))
		return false;
	hub.cq_room[c] = room;
	return true;
}

// The completion queue for one more link: the first that has or can make
// room, or a new one.  Under hub.lock.  -1 when the device has no more.
int cq_take() noexcept
{
	for (unsigned c = 0; c < MAX_CQS; c++) {
		if (hub.cq[c]) {
			if (!cq_fits(c))
				continue;
		} else {
			const unsigned room = std::min(CQ_FIRST_LINKS, hub.max_cqe / CQE_PER_LINK);
			if (!room)
				return -1;
			hub.cq[c] = v.ibv_create_cq(hub.ctx, cq_entries(room), nullptr,
						    hub.chan, 0);
			if (!hub.cq[c])
				return -1;
			hub.cq_room[c] = room;
			hub.n_cqs.store(c + 1, std::memory_order_relaxed);
			ibv_req_notify_cq(hub.cq[c], 0);
		}
		hub.cq_links[c]++;
		return static_cast<int>(c);
	}
	return -1;
}

// A slot, a completion queue, and the link in it.  Under hub.lock.  False
// when the process has no slot or queue left.
bool slot_take(Link *l) noexcept
{
	for (unsigned i = 0; i < MAX_LINKS; i++) {
		if (hub.slots[i])
			continue;
		l->cqi = cq_take();
		if (l->cqi < 0)
			return false;
		l->slot = i;
		l->gen = ++hub.gens[i];
		hub.slots[i] = l;
		top = std::max(top, i + 1);
		unsigned n = 0;
		for (unsigned c = 0; c < MAX_CQS; c++)
			n += hub.cq_links[c];
		if (n > hub.links_peak.load(std::memory_order_relaxed))
			hub.links_peak.store(n, std::memory_order_relaxed);
		return true;
	}
	return false;
}

// n receives (no bytes: the peer's writes carry an immediate only) on
// one call.
void post_recvs(Link *l, unsigned n) noexcept
{
	ibv_recv_wr wr[RECV_BATCH] = {}, *bad = nullptr;

	while (n) {
		const unsigned k = std::min(n, RECV_BATCH);
		for (unsigned i = 0; i < k; i++) {
			wr[i].wr_id = wr_id(*l) | WR_RECV;
			wr[i].next = i + 1 < k ? &wr[i + 1] : nullptr;
		}
		if (ibv_post_recv(l->qp, wr, &bad)) {
			l->failed = true;
			return;
		}
		n -= k;
	}
}

// The queue pair to INIT (from RESET), with its receives posted.
bool qp_init(Link *l) noexcept
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (v.ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS))
		return false;
	l->recvs_owed = 0;
	post_recvs(l, RECVS);
	return !l->failed;
}

// A queue pair towards nobody yet (INIT), its memory registered, and our
// half.  Under hub.lock, with the device open.
bool link_prepare(Link *l) noexcept
{
	const std::size_t half = std::size_t{LAND_SIZE} + 4096;
	l->mem_len = 2 * half;
	void *m = mmap(nullptr, l->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		return false;
	l->mem = static_cast<unsigned char *>(m);
	// A child of fork gets none of it (it has no bridge; see after_fork).
	madvise(l->mem, l->mem_len, MADV_DONTFORK);
	l->landing = l->mem;
	l->peer_took = reinterpret_cast<std::uint64_t *>(l->mem + LAND_SIZE);
	l->mirror = l->mem + half;
	l->my_took = reinterpret_cast<std::uint64_t *>(l->mirror + LAND_SIZE);
	// Registered once per connection.  The peer may write only the
	// landing area and the credit word; what we send from is ours alone.
	l->mr = (v.ibv_reg_mr)(hub.pd, l->mem, half,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	l->lmr = (v.ibv_reg_mr)(hub.pd, l->mirror, half, IBV_ACCESS_LOCAL_WRITE);
	if (!l->mr || !l->lmr || !slot_take(l))
		return false;

	ibv_qp_init_attr qa = {};
	qa.send_cq = hub.cq[l->cqi];
	qa.recv_cq = qa.send_cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = SEND_WR;
	qa.cap.max_recv_wr = RECVS;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = INLINE_MAX;
	l->qp = v.ibv_create_qp(hub.pd, &qa);
	if (!l->qp) {
		// A device that takes less inline (or none): none then.
		qa.cap.max_inline_data = 0;
		l->qp = v.ibv_create_qp(hub.pd, &qa);
	}
	if (!l->qp || !qp_init(l))
		return false;
	l->max_inline = std::min(qa.cap.max_inline_data, INLINE_MAX);

	unsigned seed = 0;
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	seed = static_cast<unsigned>(ts.tv_nsec) ^ l->qp->qp_num;
	memcpy(l->mine.gid, hub.gid.raw, 16);
	l->mine.qpn = l->qp->qp_num;
	l->mine.psn = rand_r(&seed) & 0xffffff;
	l->mine.ring_addr = reinterpret_cast<std::uint64_t>(l->landing);
	l->mine.ring_rkey = l->mr->rkey;
	l->mine.ring_size = LAND_SIZE;
	l->mine.credit_addr = reinterpret_cast<std::uint64_t>(l->peer_took);
	l->mine.credit_rkey = l->mr->rkey;
	l->mine.mtu = IBV_MTU_1024;
	return !l->failed;
}

// The peer's half, checked (it came from another host), and the queue
// pair connected to it (RTR, RTS).
bool link_connect(Link *l, const sd_rdma_half &p) noexcept
{
	static const std::uint32_t zero[5] = {};

	if (p.qpn > 0xffffff || p.psn > 0xffffff || p.ring_size != LAND_SIZE ||
	    p.mtu < IBV_MTU_256 || p.mtu > IBV_MTU_4096 || p.flags ||
	    memcmp(p.reserved, zero, sizeof(zero)))
		return false;
	l->peer = p;
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = static_cast<ibv_mtu>(std::min<std::uint32_t>(p.mtu, IBV_MTU_1024));
	a.dest_qp_num = p.qpn;
	a.rq_psn = p.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, p.gid, 16);
	a.ah_attr.grh.sgid_index = hub.gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (v.ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER))
		return false;
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ACK_TIMEOUT;
	a.retry_cnt = ACK_RETRIES;
	a.rnr_retry = 7;
	a.sq_psn = l->mine.psn;
	a.max_rd_atomic = 1;
	if (v.ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return false;
	l->state = State::RUN;
	return true;
}

// Where the descriptors of our own go: half the descriptor limit, out of
// the way of a program that expects the lowest free one.
int high_fd() noexcept
{
	rlimit rl = {};
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur > 1024)
		return static_cast<int>(std::min<rlim_t>(rl.rlim_cur / 2, 1 << 20));
	if (rl.rlim_cur > 512)
		return static_cast<int>(rl.rlim_cur / 2);
	return 256;
}

// The bridge's descriptor of socket fd, placed above the program's usual
// descriptors (a process that exits closes its descriptors in order: the
// socket should go first, see Documentation/rdma.rst), the rings mapped
// through it, and the module's kicks on our eventfd.
bool link_attach(Link *l, int fd, int b = -1, const sd_rdma_move *at = nullptr) noexcept
{
	struct stat st;

	if (b < 0)
		b = real::ioctl()(fd, SD_IOC_RDMA_BRIDGE, nullptr);
	if (b < 0)
		return false;
	l->sfd = fd;
	if (!fstat(fd, &st))
		l->sino = st.st_ino;
	const int high = real::fcntl()(b, F_DUPFD_CLOEXEC, high_fd());
	if (high >= 0) {
		real::close()(b);
		l->bfd = high;
	} else {
		l->bfd = b;
	}

	sd_mmap_offsets off = {};
	socklen_t len = sizeof(off);
	if (real::getsockopt()(fd, SOL_SD, SD_MMAP_OFFSETS, &off, &len) ||
	    real::setsockopt()(fd, SOL_SD, SD_RDMA_EVENTFD, &hub.ev, sizeof(hub.ev)))
		return false;
	l->tx_len = off.tx.mmap_len;
	l->rx_len = off.rx.mmap_len;
	l->tx_map = mmap(nullptr, l->tx_len, PROT_READ | PROT_WRITE, MAP_SHARED, l->bfd,
			 SD_PGOFF_TX_RING);
	l->rx_map = mmap(nullptr, l->rx_len, PROT_READ | PROT_WRITE, MAP_SHARED, l->bfd,
			 SD_PGOFF_RX_RING);
	if (l->tx_map == MAP_FAILED || l->rx_map == MAP_FAILED)
		return false;
	madvise(l->tx_map, l->tx_len, MADV_DONTFORK);
	madvise(l->rx_map, l->rx_len, MADV_DONTFORK);
	if (sd::check_ring(l->tx_map, off.tx) || sd::check_ring(l->rx_map, off.rx) ||
	    off.rx.cons_flags + sizeof(std::uint32_t) > off.rx.mmap_len ||
	    off.tx.cons_flags + sizeof(std::uint32_t) > off.tx.mmap_len)
		return false;
	// A successor goes on where the bridge that left stopped.
	if (at) {
		new (l->cons_buf) sd::Consumer(l->tx_map, off.tx, at->tx_head, at->tx_rec_off);
		new (l->prod_buf) sd::Producer(l->rx_map, off.rx, at->rx_tail);
	} else {
		new (l->cons_buf) sd::Consumer(l->tx_map, off.tx);
		new (l->prod_buf) sd::Producer(l->rx_map, off.rx);
	}
	l->have_rings = true;
	l->rx_cons_flags = reinterpret_cast<const std::uint32_t *>(
		static_cast<unsigned char *>(l->rx_map) + off.rx.cons_flags);
	l->tx_cons_flags = reinterpret_cast<const std::uint32_t *>(
		static_cast<unsigned char *>(l->tx_map) + off.tx.cons_flags);
	return true;
}

void *bridge_main(void *) noexcept;

// The bridge thread, if it is not running.  Under hub.lock.
bool thread_start() noexcept
{
	if (hub.thread)
		return true;
	pthread_attr_t at;
	pthread_t t;
	sigset_t all, old;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	// The program's signals are for its own threads.
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	const int err = pthread_create(&t, &at, bridge_main, nullptr);
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
	pthread_attr_destroy(&at);
	hub.thread = !err;
	return hub.thread;
}

// Hand a set-up link to the bridge thread (started on first use).  Under
// hub.lock.
bool link_start(Link *l) noexcept
{
	if (!thread_start())
		return false;
	l->started = true;
	fast::rdma_links.fetch_add(1, std::memory_order_relaxed);
	if (static_cast<unsigned>(l->sfd) < fast::MAX_CONNS)
		link_of[l->sfd].store(static_cast<std::uint16_t>(l->slot + 1),
				      std::memory_order_relaxed);
	kick();
	return true;
}

Link *link_new() noexcept
{
	void *p = calloc(1, sizeof(Link));
	return p ? new (p) Link : nullptr;
}

// Slot i is free again; top comes down past the free slots at the end,
// so that the loops over the slots (the bridge's, every turn) stop at the
// last link in use rather than at MAX_LINKS.  Under hub.lock.
void slot_free(unsigned i) noexcept
{
	hub.slots[i] = nullptr;
	while (top && !hub.slots[top - 1])
		top--;
}

// Drop a link that never reached the thread.  Under hub.lock.
void link_drop(Link *l) noexcept
{
	if (hub.slots[l->slot] == l)
		slot_free(l->slot);
	link_free(l);
}

// This end's address for a connection to dst: the source of the route
// there.  False when dst is on this host (the connection is local).
bool route_source(const sockaddr *dst, socklen_t len, in6_addr *src) noexcept
{
	sockaddr_storage ss = {};
	socklen_t sl = sizeof(ss);
	in6_addr d = {};

	if (dst->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
		const auto *s = reinterpret_cast<const sockaddr_in *>(dst);
		d.s6_addr[10] = d.s6_addr[11] = 0xff;
		memcpy(&d.s6_addr[12], &s->sin_addr, 4);
		if ((ntohl(s->sin_addr.s_addr) >> 24) == 127)
			return false;
	} else if (dst->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
		d = reinterpret_cast<const sockaddr_in6 *>(dst)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(&d) ||
		    (IN6_IS_ADDR_V4MAPPED(&d) && d.s6_addr[12] == 127))
			return false;
	} else {
		return false;
	}
	const int u = real::socket()(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (u < 0)
		return false;
	const bool ok = !real::connect()(u, dst, len) &&
			!getsockname(u, reinterpret_cast<sockaddr *>(&ss), &sl);
	real::close()(u);
	if (!ok)
		return false;
	if (ss.ss_family == AF_INET) {
		*src = {};
		src->s6_addr[10] = src->s6_addr[11] = 0xff;
		memcpy(&src->s6_addr[12], &reinterpret_cast<sockaddr_in *>(&ss)->sin_addr, 4);
	} else {
		*src = reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_addr;
	}
	return memcmp(src, &d, sizeof(d)) != 0;
}

int transport(int fd) noexcept
{
	int t = -1;
	socklen_t len = sizeof(t);
	if (real::getsockopt()(fd, SOL_SD, SD_TRANSPORT, &t, &len))
		return -1;
	return t;
}

// Listeners this process offered RDMA on (a stale mark costs one
// getsockopt on an accepted socket, nothing else).
std::atomic<bool> offered[fast::MAX_CONNS];

bool is_offered(int fd) noexcept
{
	return fd >= 0 && static_cast<unsigned>(fd) < fast::MAX_CONNS &&
	       offered[fd].load(std::memory_order_relaxed);
}

// ---- the bridge thread ---------------------------------------------------

void op(Link *l, std::uint32_t o) noexcept
{
	(void)real::ioctl()(l->bfd, SD_IOC_RDMA, &o);
}

void fail(Link *l) noexcept
{
	if (l->failed)
		return;
	l->failed = true;
	op(l, SD_RDMA_OP_RESET);
}

// A write of data is timed when none is (sd_rdma_rtt()): a look at the
// clock for each (where the clock is not the TSC, a system call).  One
// whose completion never came (its link went) is given up after
// TIMED_STALE_NS, looked at every STALE_LOOK_EVERY writes.  Under
// hub.lock.
constexpr std::int64_t TIMED_STALE_NS = 1'000'000'000;
constexpr unsigned STALE_LOOK_EVERY = 64;

bool time_write() noexcept
{
	const std::int64_t at = hub.timed_at.load(std::memory_order_relaxed);

	if (at && (++hub.timed_skip % STALE_LOOK_EVERY || fast::now_ns() - at < TIMED_STALE_NS))
		return false;
	hub.timed_at.store(fast::now_ns(), std::memory_order_relaxed);
	return true;
}

// A timed write completed: a round trip if a spinning thread found it.
// Under hub.lock.
void timed_done() noexcept
{
	const std::int64_t at = hub.timed_at.load(std::memory_order_relaxed);

	hub.timed_at.store(0, std::memory_order_relaxed);
	if (!at || !spinner)
		return;
	const std::int64_t rtt = hub.rtt.load(std::memory_order_relaxed);
	hub.rtt.store(fast::rtt_sample(rtt, fast::now_ns() - at), std::memory_order_relaxed);
}

void write_imm(Link *l, const void *local, std::uint32_t len, std::uint64_t remote,
	       std::uint32_t rkey, std::uint32_t imm) noexcept
{
	ibv_sge sge = {};
	sge.addr = reinterpret_cast<std::uint64_t>(local);
	sge.length = len;
	sge.lkey = l->lmr->lkey;
	ibv_send_wr wr = {}, *bad = nullptr;
	const bool data = len && imm == len;
	wr.wr_id = wr_id(*l) | (data ? WR_DATA : 0) | (data && time_write() ? WR_TIMED : 0);
	wr.sg_list = len ? &sge : nullptr;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	// Solicited: its arrival raises an event at the peer even when the
	// peer's queue is armed for those alone (arm_cqs()).
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	if (len && len <= l->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(l->qp, &wr, &bad)) {
		fail(l);
		return;
	}
	l->inflight++;
	if (data)
		l->data_inflight++;
}

// The end of this end's stream: a write of no bytes.
void send_fin(Link *l) noexcept
{
	write_imm(l, nullptr, 0, l->peer.ring_addr, l->peer.ring_rkey, IMM_FIN);
	l->tx_done = true;
}

void completion(Link *l, const ibv_wc &wc) noexcept
{
	const bool recv = wc.wr_id & WR_RECV;

	if (!recv) {
		if (l->inflight)
			l->inflight--;
		if ((wc.wr_id & WR_DATA) && l->data_inflight)
			l->data_inflight--;
	}
	if (wc.status != IBV_WC_SUCCESS) {
		// Once both directions ended, the peer may be gone already.
		if (!(l->tx_done && l->peer_fin))
			fail(l);
		return;
	}
	if (!recv)
		return;
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
		fail(l);
		return;
	}
	const std::uint32_t imm = ntohl(wc.imm_data);
	if (++l->recvs_owed == RECV_BATCH) {
		l->recvs_owed = 0;
		post_recvs(l, RECV_BATCH);
	}
	l->hold = false;
	if (imm == IMM_FIN)
		l->peer_fin = true;
	else if (imm == IMM_CREDIT)
		return;		// *peer_took moved
	else if (imm < IMM_CREDIT && !l->peer_fin && l->arrived + imm - l->copied <= LAND_SIZE)
		l->arrived += imm;
	else
		fail(l);
}

constexpr int POLL_BATCH = 32;

// Under hub.lock.
bool poll_cqs() noexcept
{
	bool any = false;
	for (unsigned c = 0; c < MAX_CQS && hub.cq[c]; c++) {
		ibv_wc wc[POLL_BATCH];
		int n;
		// A short batch means the queue was empty: no second poll
		// to find that out again.
		do {
			n = ibv_poll_cq(hub.cq[c], POLL_BATCH, wc);
			if (n <= 0)
				break;
			any = true;
			for (int i = 0; i < n; i++) {
				const unsigned slot = static_cast<std::uint32_t>(wc[i].wr_id);
				if (wc[i].wr_id & WR_TIMED)
					timed_done();
				const std::uint32_t gen =
					static_cast<std::uint32_t>(wc[i].wr_id >> 32) & GEN_MASK;
				if (slot >= MAX_LINKS)
					continue;
				Link *l = hub.slots[slot];
				// Completions of a link that is gone are dropped.
				if (l && (l->gen & GEN_MASK) == gen)
					completion(l, wc[i]);
			}
		} while (n == POLL_BATCH);
	}
	return any;
}

// The socket closed (its last descriptor went): the module marked its
// receive ring.
bool sock_closed(const Link *l) noexcept
{
	return __atomic_load_n(l->rx_cons_flags, __ATOMIC_ACQUIRE) & SD_RING_CLOSED;
}

// The peer's bridge let go cleanly: its monitor's CLOSE came, and the
// module marked our send ring.
bool peer_closed(const Link *l) noexcept
{
	return __atomic_load_n(l->tx_cons_flags, __ATOMIC_ACQUIRE) & SD_RING_CLOSED;
}

// Whether our queue pair may write: connected, the peer's successor
// ready (its first write came), and not leaving.
bool can_write(const Link *l) noexcept
{
	return l->state == State::RUN && !l->hold && !l->leaving;
}

// Whether the credit for what we took goes now.  A credit is a write of
// its own, so it waits until a quarter of the landing area was taken:
// the peer always has three quarters to write into, and one that filled
// it all is sent credit once we took it.  It goes at once at the ends (the
// peer's end of stream, our socket's close, our exit: the end of a
// connection needs all credit given) and when asked.
bool credit_due(const Link *l) noexcept
{
	return l->credit_now || l->copied - l->credited >= CREDIT_BATCH || l->peer_fin ||
	       sock_closed(l) || hub.exiting.load(std::memory_order_relaxed);
}

// Landed bytes into the receive ring, then the credit back.  Bytes that
// come after the socket closed meet a closed socket, which TCP answers
// with a reset: looked at in the ring's own flags, which the producer's
// cached copy may not show yet.
bool land(Link *l) noexcept
{
	const std::uint64_t from = l->copied;
	if (l->copied < l->arrived && sock_closed(l)) {
		fail(l);
		return true;
	}
	while (l->copied < l->arrived) {
		const std::uint64_t off = l->copied % LAND_SIZE;
		const std::uint64_t n = std::min<std::uint64_t>(l->arrived - l->copied,
								 LAND_SIZE - off);
		const ssize_t w = l->prod().write(l->landing + off, n);
		if (w == -EAGAIN)
			break;
		if (w < 0) {
			// The socket closed with the peer's data still coming
			// (TCP answers it with a reset too), or the ring broke.
			fail(l);
			return true;
		}
		l->copied += static_cast<std::uint64_t>(w);
	}
	if (l->copied != from)
		count(hub.ring_landings);
	if (l->prod().take_wake())
		op(l, SD_RDMA_OP_DATA);
	if ((l->copied != l->credited || l->credit_now) && credit_due(l) &&
	    l->inflight < SEND_WR && can_write(l)) {
		l->credit_now = false;
		*l->my_took = l->copied;
		write_imm(l, l->my_took, 8, l->peer.credit_addr, l->peer.credit_rkey, IMM_CREDIT);
		l->credited = l->copied;
	}
	if (l->peer_fin && l->copied == l->arrived && !l->rx_done) {
		l->rx_done = true;
		if (l->prod().fin() == 0)
			op(l, SD_RDMA_OP_FIN);
	}
	return l->copied != from;
}

// The send ring, through the mirror, into the peer's landing area: one
// write as soon as there is something and a write may go; whatever
// gathered meanwhile goes in the next (adaptive batching).
bool pump(Link *l) noexcept
{
	bool moved = false;
	const std::uint64_t size = l->peer.ring_size;
	if (!can_write(l))
		return false;
	while (!l->tx_done && l->data_inflight < DATA_INFLIGHT && l->inflight < SEND_WR) {
		const std::uint64_t took = __atomic_load_n(l->peer_took, __ATOMIC_ACQUIRE);
		if (took > l->sent) {
			fail(l);
			return true;
		}
		const std::uint64_t room = size - (l->sent - took);
		if (!room)
			break;
		const std::uint64_t off = l->sent % size;
		const std::uint64_t want = std::min(room, size - off);
		// After the peer's bridge moved: what its predecessor did not
		// take is still in the mirror, and goes again.
		if (l->sent < l->pushed) {
			const std::uint64_t n = std::min(want, l->pushed - l->sent);
			write_imm(l, l->mirror + off, static_cast<std::uint32_t>(n),
				  l->peer.ring_addr + off, l->peer.ring_rkey,
				  static_cast<std::uint32_t>(n));
			l->sent += n;
			moved = true;
			continue;
		}
		if (l->refin) {
			l->refin = false;
			send_fin(l);
			moved = true;
			continue;
		}
		const ssize_t r = l->cons().read(l->mirror + off, want);
		if (r == -EAGAIN)
			break;
		if (r < 0) {
			fail(l);
			return true;
		}
		l->cons().flush();
		if (r == 0) {
			send_fin(l);
		} else {
			write_imm(l, l->mirror + off, static_cast<std::uint32_t>(r),
				  l->peer.ring_addr + off, l->peer.ring_rkey,
				  static_cast<std::uint32_t>(r));
			l->sent += static_cast<std::uint64_t>(r);
			l->pushed = l->sent;
			count(hub.ring_writes);
		}
		moved = true;
	}
	if (l->cons().take_wake())
		op(l, SD_RDMA_OP_ROOM);
	return moved;
}

// The peer's bridge let go cleanly, but bytes we sent that it never
// took, or send now, reached a closed socket, which TCP answers with a
// reset.
bool peer_dropped(Link *l) noexcept
{
	if (!peer_closed(l))
		return false;
	if (__atomic_load_n(l->peer_took, __ATOMIC_ACQUIRE) != l->sent)
		return true;
	return l->cons().readable() > 0;
}

// The peer's bridge let go cleanly after taking all we sent: its queue
// pair may be gone, and a write of ours still in flight (its last credit,
// say) may never complete (soft-RoCE does not always fail it), so there
// is nothing to wait for.
bool peer_ended(Link *l) noexcept
{
	return peer_closed(l) && !peer_dropped(l);
}

// The peer's monitor said the peer ended cleanly, but its end of stream
// never came.  Its bridge lets go only once its FIN completed, which puts
// the FIN's completion in our queue before its monitor's message leaves;
// so once the queue was polled after the flag was seen, a missing FIN
// means the peer went without sending one (killed with nothing left to
// send): a reset, not an end of stream that never comes.
bool peer_lost_fin(Link *l, bool *moved) noexcept
{
	if (l->peer_fin || !peer_closed(l))
		return false;
	if (!l->closed_seen) {
		l->closed_seen = true;	// look again after the next poll
		*moved = true;
		return false;
	}
	return true;
}

// ---- moves: a bridge whose process exits while a child holds the socket ----

// Our queue pair back to INIT, ready for a new peer: what was posted goes
// without completions we would take (the generation changes).
bool qp_renew(Link *l) noexcept
{
	l->gen = ++hub.gens[l->slot];
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RESET;
	if (v.ibv_modify_qp(l->qp, &a, IBV_QP_STATE))
		return false;
	l->inflight = l->data_inflight = 0;
	return qp_init(l);
}

// The peer's bridge stopped at *at (it came from the other host: checked).
// What it did not take of ours goes again from the mirror (credit only
// follows what it took, so the mirror still holds it), but for what it
// landed and kept for its successor (at.kept beyond at.copied, which
// its successor's landing area holds); what it wrote is all in our
// landing area (ours did not leave meanwhile: the module moves one end at
// a time).  Our queue pair waits for its successor.
bool peer_left(Link *l, const sd_rdma_move &at) noexcept
{
	const std::uint64_t took = __atomic_load_n(l->peer_took, __ATOMIC_ACQUIRE);
	const bool fin = at.flags & SD_RDMA_MOVE_TX_FIN;
	const std::uint64_t landed = at.copied + at.kept;

	if (at.copied < took || at.kept > LAND_SIZE || landed > l->pushed ||
	    at.sent < l->arrived || at.sent - l->copied > LAND_SIZE ||
	    (l->peer_fin && !fin))
		return false;
	if (l->state != State::MOVING && !qp_renew(l))
		return false;
	if (l->tx_done && !(at.flags & SD_RDMA_MOVE_RX_FIN)) {
		l->tx_done = false;
		l->refin = true;
	}
	l->sent = landed;
	__atomic_store_n(l->peer_took, at.copied, __ATOMIC_RELEASE);
	l->arrived = at.sent;
	l->peer_fin = fin;
	l->closed_seen = false;
	// A leave of ours that waited for its writes starts again once the
	// peer's successor is there: what goes again, and our credit, first.
	l->leaving = false;
	if (l->state != State::MOVING) {
		l->state = State::MOVING;
		l->moving_since = fast::now_ns();
	}
	return true;
}

// SD_RING_MOVED on our send ring: the peer's bridge left, and maybe its
// successor's half came.  Returns whether anything moved.
bool follow_move(Link *l) noexcept
{
	sd_rdma_moved m;

	if (!(__atomic_load_n(l->tx_cons_flags, __ATOMIC_ACQUIRE) & SD_RING_MOVED))
		return false;
	if (real::ioctl()(l->bfd, SD_IOC_RDMA_MOVED, &m)) {
		if (errno != ENOENT)
			fail(l);
		return false;
	}
	const bool was_moving = l->state == State::MOVING;
	if (!peer_left(l, m.at)) {
		fail(l);
		return true;
	}
	if (!(m.flags & SD_RDMA_MOVED_HALF))
		return !was_moving;
	if (!link_connect(l, m.half)) {
		fail(l);
		return true;
	}
	// Our credit at once: the successor writes nothing before it.  We
	// may be a successor ourselves, still waiting for the first write
	// of the bridge that left: that one wrote to us before it left.
	l->hold = false;
	l->credit_now = true;
	return true;
}

// One look at a link whose peer's bridge left.  Until the successor comes
// we only land what the predecessor wrote.  Its socket may close first
// (the child did not take it up): then that was the end of its stream
// (its monitor's CLOSE), unless what we sent was not all taken.
bool step_moving(Link *l, bool *done) noexcept
{
	bool moved = land(l);

	if (peer_closed(l)) {
		if (l->sent != l->pushed || l->refin || l->cons().readable() > 0) {
			fail(l);
			return true;
		}
		if (!l->peer_fin) {
			l->peer_fin = true;
			moved = true;
		}
		*done = l->rx_done && sock_closed(l);
	} else if (fast::now_ns() - l->moving_since > MOVE_WAIT_NS) {
		// Nobody took it up (a process without libsd holds it).
		fail(l);
	}
	return moved;
}

// The peer's bytes that landed but are not in the receive ring yet, for
// our successor (SD_IOC_RDMA_STASH), in stream order.  Whether they are.
bool stash(Link *l) noexcept
{
	const std::uint64_t n = l->arrived - l->copied;
	if (!n)
		return true;
	unsigned char *buf = static_cast<unsigned char *>(malloc(n));
	if (!buf)
		return false;
	const std::uint64_t off = l->copied % LAND_SIZE;
	const std::uint64_t first = std::min<std::uint64_t>(n, LAND_SIZE - off);
	memcpy(buf, l->landing + off, first);
	memcpy(buf + first, l->landing, n - first);
	sd_rdma_stash st = {};
	st.addr = reinterpret_cast<std::uint64_t>(buf);
	st.len = static_cast<std::uint32_t>(n);
	const bool ok = real::ioctl()(l->bfd, SD_IOC_RDMA_STASH, &st) == 0;
	free(buf);
	return ok;
}

// What the bridge before us stashed (stash()), into our landing area
// from at.copied on: the peer sends again only what follows it.
bool unstash(Link *l, const sd_rdma_move &at) noexcept
{
	if (!at.kept)
		return true;
	if (at.kept > LAND_SIZE)
		return false;
	unsigned char *buf = static_cast<unsigned char *>(malloc(at.kept));
	if (!buf)
		return false;
	sd_rdma_stash st = {};
	st.addr = reinterpret_cast<std::uint64_t>(buf);
	st.len = at.kept;
	const bool ok = real::ioctl()(l->bfd, SD_IOC_RDMA_UNSTASH, &st) ==
			static_cast<int>(at.kept);
	if (ok) {
		const std::uint64_t off = at.copied % LAND_SIZE;
		const std::uint64_t first = std::min<std::uint64_t>(at.kept, LAND_SIZE - off);
		memcpy(l->landing + off, buf, first);
		memcpy(l->landing, buf + first, at.kept - first);
	}
	free(buf);
	return ok;
}

// Why a bridge leaves (try_leave()).
enum class Leave {
	EXIT,		// the process exits; the socket may be another's too
	HANDOVER,	// the program let go of it, another process asks for it
	EXEC,		// the process execs, keeping it: its next image takes it up
};

// Link l's bridge leaves, if the module agrees: once nothing of ours is
// in flight, it says where it stopped (SD_IOC_RDMA_LEAVE, or
// SD_IOC_RDMA_HANDOVER) and is done.  Refused, it goes on: at exit it
// ends the connection as usual; a handover is tried again later.
bool try_leave(Link *l, bool *done, Leave why) noexcept
{
	if (why == Leave::EXIT && l->leave_tried)
		return false;
	// Still taking the connection up (the peer's half, or a successor's
	// first write from the peer, is on its way): an exit or an exec waits
	// for that, then leaves; what it says then holds.
	// So does one whose peer is moving: it leaves once connected to the
	// peer's successor.
	if (why != Leave::HANDOVER &&
	    (l->state == State::WAIT_PEER || l->state == State::MOVING || l->hold) &&
	    !sock_closed(l) && !peer_closed(l))
		return false;
	// Not moving: nothing holds the socket any more, the peer went, or
	// (a handover) its end is moving: tried again later.
	if (l->state != State::RUN || l->hold || sock_closed(l) || peer_closed(l)) {
		l->leaving = l->handing = l->execing = false;
		l->leave_tried |= why == Leave::EXIT;
		return false;
	}
	// What the peer's move asked of us again goes first: a successor
	// resumes at the send ring's head, and only our mirror holds that.
	if (l->sent != l->pushed || l->refin) {
		l->leaving = false;
		return false;
	}
	l->leaving = true;
	if (l->inflight)
		return false;
	sd_rdma_move at = {};
	at.sent = l->sent;
	at.took = __atomic_load_n(l->peer_took, __ATOMIC_ACQUIRE);
	at.copied = l->copied;
	at.flags = (l->tx_done ? SD_RDMA_MOVE_TX_FIN : 0) |
		   (l->rx_done ? SD_RDMA_MOVE_RX_FIN : 0);
	at.how = why == Leave::EXEC ? SD_RDMA_LEAVE_EXEC : 0;
	l->cons().flush();
	at.tx_head = l->cons().head();
	at.tx_rec_off = l->cons().rec_off();
	at.rx_tail = l->prod().tail();
	l->leave_tried |= why == Leave::EXIT;
	l->leaving = l->handing = l->execing = false;
	// What landed but is not in the ring yet goes to the successor;
	// nothing carries the connection on without it.
	if (!stash(l)) {
		fail(l);
		return true;
	}
	if (real::ioctl()(l->bfd, why == Leave::HANDOVER ? SD_IOC_RDMA_HANDOVER : SD_IOC_RDMA_LEAVE,
			  &at) == 0) {
		*done = true;	// closing its descriptor does not reset now
	} else if (errno == EAGAIN) {
		// The peer's bridge left just now: follow it, then leave.
		l->leave_tried = false;
		l->execing = why == Leave::EXEC;
	}
	return true;
}

// Whether to hand link l over (try_leave()): the program closed its number
// of the socket, and another process that holds the socket was refused a
// bridge for it (SD_RING_WANTED: the child of a forking server whose
// parent closed its copy).  Looked at as often as such a child asks; after
// a refusal (this process holds the socket under another number, or the
// child stopped asking), only every second.
bool want_handover(Link *l) noexcept
{
	if (l->sfd >= 0 || l->state != State::RUN || l->hold || l->leaving || l->execing ||
	    !(__atomic_load_n(l->tx_cons_flags, __ATOMIC_ACQUIRE) & SD_RING_WANTED))
		return false;
	const std::int64_t now = fast::now_ns();
	if (now < l->handover_at)
		return false;
	l->handover_at = now + HANDOVER_RETRY_NS;
	return true;
}

// One look at a link.  Returns whether anything moved; *done when the
// link is finished (let go of it).
bool step(Link *l, bool *done) noexcept
{
	bool moved = false;

	*done = false;
	if (l->state == State::WAIT_PEER && !l->failed) {
		sd_rdma_half p;
		if (real::ioctl()(l->bfd, SD_IOC_RDMA_PEER, &p) == 0) {
			if (!link_connect(l, p))
				fail(l);
			moved = true;
		} else if (errno != EAGAIN) {
			fail(l);
		}
	}
	if ((l->state == State::RUN || l->state == State::MOVING) && !l->failed)
		moved |= follow_move(l);
	if (l->state == State::MOVING && !l->failed) {
		moved |= step_moving(l, done);
		if (!l->failed)
			return moved;
	}
	if (l->state == State::RUN && !l->failed) {
		moved |= land(l);
		moved |= pump(l);
		// A successor's peer writes first; one that ends instead
		// never took up the connection.
		if (l->hold ? peer_closed(l) : (peer_dropped(l) || peer_lost_fin(l, &moved)))
			fail(l);
	}
	if (l->execing && !l->failed) {
		moved |= try_leave(l, done, Leave::EXEC);
		if (*done)
			return true;
	}
	if (hub.exiting.load(std::memory_order_relaxed) && !l->failed) {
		moved |= try_leave(l, done, Leave::EXIT);
		if (*done)
			return true;
	} else if (!l->failed && (l->handing || want_handover(l))) {
		l->handing = true;
		moved |= try_leave(l, done, Leave::HANDOVER);
		if (*done)
			return true;
	}
	if (l->failed) {
		// Nothing more goes out; what is posted flushes or completes.
		*done = true;
		return true;
	}
	// After the socket closed and its end of stream went out, the
	// connection is over for this end.
	if (l->tx_done && l->credited == l->copied && sock_closed(l) &&
	    (!l->inflight || peer_ended(l)))
		*done = true;
	// A process that exits sends its end of stream once all it sent is out
	// (and its bridge could not leave: nobody else holds the socket).
	if (hub.exiting.load(std::memory_order_relaxed) && l->state == State::RUN &&
	    l->leave_tried && !l->tx_done && !l->leaving && !l->data_inflight && l->inflight < SEND_WR &&
	    l->cons().readable() == 0 && l->sent == l->pushed && !l->hold) {
		send_fin(l);
		moved = true;
	}
	return moved;
}

// Whether something waits for the completion of one of our own writes:
// a link whose writes fill its share of the send queue (the rest of its
// send ring, or its credit, waits for a slot), or one that ends or leaves
// (it waits until nothing is in flight).  Under hub.lock.
bool send_waited() noexcept
{
	const bool exiting = hub.exiting.load(std::memory_order_relaxed);
	for (unsigned i = 0; i < top; i++) {
		const Link *l = hub.slots[i];
		if (!l || !l->started || l->failed || !l->inflight)
			continue;
		if (l->data_inflight >= DATA_INFLIGHT || l->inflight >= SEND_WR || exiting ||
		    l->state != State::RUN || l->tx_done || l->leaving || l->handing ||
		    l->execing || sock_closed(l))
			return true;
	}
	return false;
}

// Completions from now on raise an event on the channel: every one while
// something waits for our own writes to complete, else only the peers'
// writes (all solicited, write_imm()) and errors.  A write of ours
// completing when nothing waits for it would only wake a thread that
// sleeps for the peer's answer to it: one wake-up more per message.
// Returns whether it armed for every completion.  Under hub.lock.
bool arm_cqs() noexcept
{
	const bool all = send_waited();
	for (unsigned c = 0; c < MAX_CQS && hub.cq[c]; c++)
		ibv_req_notify_cq(hub.cq[c], all ? 0 : 1);
	return all;
}

// The channel's events, taken (it is non-blocking), so that it polls
// readable only for new ones.  A queue raises one event per arming, so
// there are rarely more than queues: no read beyond that to find it empty
// (one left over only makes the next sleep end at once).  Under hub.lock.
void take_events() noexcept
{
	ibv_cq *cq;
	void *ctx;
	hub.events_owed = false;
	for (unsigned c = 0; c < MAX_CQS && hub.cq[c]; c++) {
		if (v.ibv_get_cq_event(hub.chan, &cq, &ctx))
			break;
		v.ibv_ack_cq_events(cq, 1);
	}
}

// A program thread's share of the bridge's work (the paper's section 4.2:
// the thread that sends posts its own write, the one that waits for data
// polls for it): completions, then what link l (or every link, for
// nullptr) has to land and to send.  Only connections that run, and not
// while the process exits (the thread's leaving protocol).  The thread
// still does everything else, and all of this when no program thread
// calls.  Not full: the links only if a completion came.  Returns
// whether bytes landed in a receive ring, or were left for this thread's
// receive (Receiving).  Under hub.lock.
bool help_locked(Link *only, bool full = true) noexcept
{
	bool landed = false;

	if (hub.exiting.load(std::memory_order_relaxed))
		return false;
	if (!poll_cqs() && !full)
		return false;
	for (unsigned i = 0; i < top; i++) {
		Link *l = hub.slots[i];
		if (!l || (only && l != only) || !l->started || l->state != State::RUN ||
		    l->failed)
			continue;
		// This thread's receive takes these itself (sd_rdma_recv()):
		// as good as landed, for a caller about to sleep.
		if (receiving.fd >= 0 && l->sfd == receiving.fd && l->copied < l->arrived &&
		    !l->peer_fin) {
			receiving.left = landed = true;
			pump(l);
			continue;
		}
		landed |= land(l);
		pump(l);
	}
	return landed;
}

// The running link made from socket descriptor fd, nullptr for none or
// while the process exits (the thread's leaving protocol lands its
// bytes).  Under hub.lock.
Link *running_link(int fd) noexcept
{
	const unsigned slot = link_of[fd].load(std::memory_order_relaxed);
	Link *l = slot ? hub.slots[slot - 1] : nullptr;

	if (!l || l->sfd != fd || !l->started || l->state != State::RUN || l->failed ||
	    hub.exiting.load(std::memory_order_relaxed))
		return nullptr;
	return l;
}

// A program thread is about to sleep on the completion channel (and on
// something of its own): the queues armed first, so that what completes
// after its look raises an event, then its share of the work for the link
// of connection fd (fd < 0: every link), under hub.lock.  Returns the
// channel's descriptor (it lives as long as the process), -1 when there
// is nothing to sleep on here (no channel, the process exits, fd is not
// a running RDMA connection of ours), -2 when bytes landed: the caller
// looks again instead of sleeping.
int before_sleep(int fd) noexcept
{
	int chan = -1;

	pthread_mutex_lock(&hub.lock);
	Link *only = nullptr;
	if (fd >= 0 && !(only = running_link(fd)))
		goto out;
	if (hub.chan && !hub.exiting.load(std::memory_order_relaxed)) {
		// The event that ended this thread's last sleep, taken now
		// that the sleep to come needs the channel quiet.
		if (hub.events_owed)
			take_events();
		const bool all = arm_cqs();
		bool landed = help_locked(only);
		// Its own share may have filled a link's send queue: armed
		// again for every completion, and one more look.
		if (!all && send_waited()) {
			arm_cqs();
			landed |= help_locked(only);
		}
		chan = landed ? -2 : hub.chan->fd;
	}
out:
	pthread_mutex_unlock(&hub.lock);
	if (chan >= 0) {
		hub.waiters.fetch_add(1, std::memory_order_relaxed);
		hub.naps.fetch_add(1, std::memory_order_relaxed);
	}
	return chan;
}

// The sleep that before_sleep() gave a descriptor for ended; woken by the
// channel, the thread moves what came.  The channel's event is taken only
// before the next sleep on it (before_sleep(), wait_events()): reading it
// now would put a system call between the peer's message and the
// program's answer to it: about 40 µs of the 250 µs from the thread's
// waking to its answer's departure on the test hosts (rdma.rst).  An
// event read later is not counted against the queue (uverbs counts the
// ones read), and one never read goes with the queue.
void after_sleep(bool woken_by_chan) noexcept
{
	hub.waiters.fetch_sub(1, std::memory_order_relaxed);
	if (!woken_by_chan)
		return;
	pthread_mutex_lock(&hub.lock);
	hub.events_owed = true;
	help_locked(nullptr);
	pthread_mutex_unlock(&hub.lock);
}

// ---- non-blocking connects -------------------------------------------------

// bridge_up() under hub.lock, through descriptor fd of the socket; sfd is
// the program's number for it (-1: none any more).
void bridge_up_locked(int fd, Link *l, int sfd) noexcept
{
	if (link_attach(l, fd)) {
		l->sfd = sfd;
		if (link_start(l))
			return;
	}
	if (l->bfd < 0) {
		std::uint32_t o = SD_RDMA_OP_RESET;
		(void)real::ioctl()(fd, SD_IOC_RDMA, &o);
	}
	link_drop(l);	// closing the bridge's descriptor resets
}

// A non-blocking connect of socket fd offering RDMA with link l said
// EINPROGRESS: the module makes the rendezvous in the background.  The
// thread follows it, with a copy of the descriptor of its own (the
// program may close or reuse its number meanwhile), and sets up the
// bridge when it ends (pending_check()).  Under hub.lock.  False when it
// cannot follow it.
bool pending_add(int fd, Link *l) noexcept
{
	struct stat st;

	if (hub.n_pending == MAX_PENDING || fstat(fd, &st) || !thread_start())
		return false;
	const int dup = real::fcntl()(fd, F_DUPFD_CLOEXEC, high_fd());
	if (dup < 0)
		return false;
	hub.pending[hub.n_pending++] = {fd, dup, st.st_ino, l, fast::now_ns()};
	kick();
	return true;
}

// The end of pending connect i, whose transport is t now: its bridge if
// the monitors agreed on RDMA (reset if it cannot be had), its link
// dropped otherwise.  Under hub.lock.
void pending_end(unsigned i, int t) noexcept
{
	const Hub::Pending p = hub.pending[i];
	struct stat st;

	hub.pending[i] = hub.pending[--hub.n_pending];
	// With the program's number for it, if it still is this socket's.
	if (t == SD_TRANSPORT_RDMA)
		bridge_up_locked(p.dup, p.l,
				 !fstat(p.fd, &st) && st.st_ino == p.ino ? p.fd : -1);
	else
		link_drop(p.l);
	real::close()(p.dup);
}

// Pending connects that ended, each set up or dropped: poll says so of
// the socket (writable, or an error), or it fell back to TCP (whose own
// connect may take long; transport() fails on a TCP socket).  Under
// hub.lock.  Returns whether any ended.
bool pending_check() noexcept
{
	pollfd p[MAX_PENDING];
	const unsigned n = hub.n_pending;
	bool any = false;

	if (!n)
		return false;
	for (unsigned i = 0; i < n; i++)
		p[i] = {hub.pending[i].dup, POLLOUT, 0};
	if (real::poll()(p, n, 0) < 0)
		return false;
	const std::int64_t now = fast::now_ns();
	// Backwards: an end moves the last one into its place.
	for (unsigned i = n; i-- > 0;) {
		const int t = transport(hub.pending[i].dup);
		if (!p[i].revents && t == SD_TRANSPORT_NONE &&
		    now - hub.pending[i].since < PENDING_GIVE_UP_NS)
			continue;
		pending_end(i, t);
		any = true;
	}
	return any;
}

// Sleep until a completion or a kick (bounded).
void wait_events() noexcept
{
	// While a program thread sleeps for its data it wakes for the
	// completion channel and moves what comes itself (sd_rdma_wait()).
	// Woken too, the thread would only contend with it for the lock and
	// for a processor: it leaves the channel alone then, and looks again
	// every BLIND_MS, in case that thread went on to something else.
	// A thread that spins moves what comes or is to go itself, sooner
	// than this one would (sd_rdma_spinning()): blind, and no look first.
	const bool blind = hub.waiters.load(std::memory_order_relaxed) != 0;
	const bool spun = hub.spinners.load(std::memory_order_relaxed) != 0;
	pthread_mutex_lock(&hub.lock);
	if (!blind) {
		if (hub.events_owed)
			take_events();
		arm_cqs();
	}
	bool now = !spun && poll_cqs();
	for (unsigned i = 0; i < top && !now; i++) {
		Link *l = hub.slots[i];
		if (!l || !l->started || l->state == State::WAIT_PEER)
			continue;
		// Tell the program's side of each ring that we sleep (and,
		// unless a thread spins, look again if it has something).
		if (l->state == State::RUN && !l->tx_done && l->cons().prepare_wait() == 0)
			now = !spun;
		else if (l->copied < l->arrived && l->prod().prepare_wait() == 0)
			now = !spun;
	}
	const int ms = hub.n_orphans ? static_cast<int>(ADOPT_POLL_NS / 1'000'000) : WAIT_MS;
	// The ends of pending connects wake us too (pending_check()).  Only
	// this thread closes their copies, so they stay open while it polls.
	pollfd p[2 + MAX_PENDING];
	const unsigned nfds = 2 + hub.n_pending;
	for (unsigned i = 2; i < nfds; i++)
		p[i] = {hub.pending[i - 2].dup, POLLOUT, 0};
	pthread_mutex_unlock(&hub.lock);
	if (now)
		return;
	if (!hub.chan) {
		// A child with no connection of its own yet, only its parent's.
		const timespec ts = {0, ADOPT_POLL_NS};
		nanosleep(&ts, nullptr);
		return;
	}
	p[0] = {blind ? -1 : hub.chan->fd, POLLIN, 0};
	p[1] = {hub.ev, POLLIN, 0};
	int r;
	if (blind) {
		// Blind, it looks every BLIND_MS whether program threads
		// still sleep on the channel (one does now, or one went to
		// sleep since the last look: a thread between a request and
		// its answer), and at everything else only once none does, or
		// every BLIND_LOOK_MS.  Taking the lock and going round the
		// loop every BLIND_MS cost a few system calls each time, and
		// made the sleeping thread wait for the lock when its answer
		// came.
		unsigned naps = hub.naps.load(std::memory_order_relaxed);
		for (int left = std::min(ms, BLIND_LOOK_MS);; left -= BLIND_MS) {
			r = real::poll()(p, nfds, std::min(left, BLIND_MS));
			const unsigned now_naps = hub.naps.load(std::memory_order_relaxed);
			if (r || left <= BLIND_MS ||
			    (!hub.waiters.load(std::memory_order_relaxed) && now_naps == naps))
				break;
			naps = now_naps;
		}
	} else {
		r = real::poll()(p, nfds, ms);
	}
	if (r <= 0)
		return;
	if (p[0].revents & POLLIN) {
		pthread_mutex_lock(&hub.lock);
		take_events();
		pthread_mutex_unlock(&hub.lock);
	}
	if (p[1].revents & POLLIN) {
		std::uint64_t n;
		(void)!real::read()(hub.ev, &n, sizeof(n));
	}
}

// Every connection carried out what it was sent and its end of stream
// (or failed, or the peer went with all of it).  Under hub.lock.
bool drained_locked() noexcept
{
	for (unsigned i = 0; i < top; i++) {
		Link *l = hub.slots[i];
		if (l && l->started && !l->failed &&
		    (!l->tx_done || (l->inflight && !peer_ended(l))))
			return false;
	}
	return true;
}

// A task of this process that has not ended: state (the field after the
// command's ')') other than Z (a main thread that ended stays a zombie
// until the whole process does) or X.
bool task_lives(const char *name) noexcept
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%s/stat", name);
	const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[512];
	const ssize_t n = real::read()(fd, buf, sizeof(buf) - 1);
	real::close()(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

// Whether the bridge thread is all that is left of the process: every
// thread of the program ended (main with pthread_exit), and without us
// the process would have exited, with status 0.
bool alone() noexcept
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return false;
	unsigned live = 0;
	while (const dirent *e = readdir(d))
		if (e->d_name[0] != '.' && task_lives(e->d_name) && ++live > 1)
			break;
	closedir(d);
	return live == 1;
}

// This end's address of connected socket fd, as a GID would hold it.
bool local_of(int fd, in6_addr *local) noexcept
{
	sockaddr_storage ss = {};
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl))
		return false;
	*local = {};
	if (ss.ss_family == AF_INET) {
		local->s6_addr[10] = local->s6_addr[11] = 0xff;
		memcpy(&local->s6_addr[12], &reinterpret_cast<sockaddr_in *>(&ss)->sin_addr, 4);
	} else {
		*local = reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_addr;
	}
	return true;
}

// The descriptor of an orphan's socket in this process now, or -1: where
// it was, or any other of the same socket (the program may have moved it).
int orphan_fd(const Hub::Orphan &o) noexcept
{
	struct stat st;

	if (!fstat(o.fd, &st) && S_ISSOCK(st.st_mode) && st.st_ino == o.ino)
		return o.fd;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int found = -1;
	while (const dirent *e = readdir(d)) {
		const int fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd != dirfd(d) && !fstat(fd, &st) &&
		    S_ISSOCK(st.st_mode) && st.st_ino == o.ino) {
			found = fd;
			break;
		}
	}
	closedir(d);
	return found;
}

enum class Adopt { WAIT, DONE, DROP };

// Take up connection fd, which our parent's bridge carried, once that
// bridge left (its process exited): a queue pair and landing area of ours,
// from where it stopped; the peer's bridge rebuilds its end when our half
// comes (SD_IOC_RDMA_MOVE), and writes first.  Under hub.lock.
Adopt adopt(int fd) noexcept
{
	sd_rdma_move at;
	sd_rdma_half peer;
	in6_addr local;
	Link *l = nullptr;

	if (transport(fd) != SD_TRANSPORT_RDMA)
		return Adopt::DROP;
	const int b = real::ioctl()(fd, SD_IOC_RDMA_BRIDGE, nullptr);
	if (b < 0)
		return errno == EBUSY ? Adopt::WAIT : Adopt::DROP;
	bool ok = !real::ioctl()(b, SD_IOC_RDMA_RESUME, &at) &&
		  !real::ioctl()(b, SD_IOC_RDMA_PEER, &peer) && local_of(fd, &local) &&
		  device_for(local) && (l = link_new()) && link_prepare(l) &&
		  link_attach(l, fd, b, &at);
	if (ok) {
		l->sent = l->pushed = at.sent;
		*l->peer_took = at.took;
		l->copied = l->credited = at.copied;
		l->arrived = at.copied + at.kept;
		l->tx_done = at.flags & SD_RDMA_MOVE_TX_FIN;
		l->peer_fin = l->rx_done = at.flags & SD_RDMA_MOVE_RX_FIN;
		l->hold = true;
		ok = unstash(l, at) && link_connect(l, peer) &&
		     !real::ioctl()(l->bfd, SD_IOC_RDMA_MOVE, &l->mine) &&
		     link_start(l);
	}
	if (!ok) {
		// Nothing can carry it: closing the bridge's descriptor resets.
		if (!l || l->bfd < 0)
			real::close()(b);
		if (l)
			link_drop(l);
	}
	return Adopt::DONE;
}

// Look for the orphans whose bridge left, among those whose descriptor is
// first to last (an orphan this process holds no more is dropped).  Under
// hub.lock.
bool adopt_orphans(unsigned first = 0, unsigned last = ~0U) noexcept
{
	bool moved = false;
	// The next image takes them up: a bridge made now would end with the exec.
	if (hub.execing)
		return false;
	for (unsigned i = 0; i < hub.n_orphans;) {
		const int fd = orphan_fd(hub.orphans[i]);
		const bool in = fd < 0 || (static_cast<unsigned>(fd) >= first &&
					   static_cast<unsigned>(fd) <= last);
		if (!in || (fd >= 0 && adopt(fd) == Adopt::WAIT)) {
			i++;
			continue;
		}
		hub.orphans[i] = hub.orphans[--hub.n_orphans];
		moved = true;
	}
	return moved;
}

// The RDMA connections among this process's descriptors that no bridge of
// ours carries, as orphans: those of a new image after exec (its old one
// left them to it, or its parent's bridge carries them) or of one whose
// exec failed.  The thread takes them up once their bridge left, and asks
// for them meanwhile (a parent that closed its copy hands them over).
// Under hub.lock.
void find_inherited() noexcept
{
	if (const char *e = getenv("SD_RDMA"); e && !strcmp(e, "0"))
		return;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	while (const dirent *e = readdir(d)) {
		const int fd = atoi(e->d_name);
		struct stat st;
		if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) ||
		    !S_ISSOCK(st.st_mode) || transport(fd) != SD_TRANSPORT_RDMA ||
		    (static_cast<unsigned>(fd) < fast::MAX_CONNS &&
		     link_of[fd].load(std::memory_order_relaxed)))
			continue;
		bool known = false;
		for (unsigned i = 0; i < hub.n_orphans && !known; i++)
			known = hub.orphans[i].ino == st.st_ino;
		if (!known && hub.n_orphans < MAX_ORPHANS)
			hub.orphans[hub.n_orphans++] = {fd, st.st_ino};
	}
	closedir(d);
}

// The bridge thread.  It ends once the process had no RDMA connection
// for a while (the next one starts it again).  If it outlives the
// program's threads (main ended with pthread_exit while connections were
// open), it carries out what they sent and their ends of stream, and
// exits the process with status 0, as the last thread's end would have.
void *bridge_main(void *) noexcept
{
	// A child's first ask for its parent's connections comes a moment
	// after the fork: one that execs at once (a program without libsd,
	// maybe) never asks, so its parent's bridge does not hand them over.
	// Its times are all a second or more apart but a tenth's (adoption):
	// the coarse clock, which costs no system call where the clock
	// source is not the TSC (fast.hpp).
	std::int64_t idle_since = 0, checked = fast::coarse_ns(), last_move = 0,
		     looked = hub.ask_now ? 0 : fast::coarse_ns();

	for (;;) {
		pthread_mutex_lock(&hub.lock);
		// The program's threads all ended while connections were open:
		// carry them out, then exit as the process would have.
		if (hub.last.load(std::memory_order_relaxed) &&
		    (drained_locked() || fast::coarse_ns() - last_move > EXIT_STALL_NS)) {
			pthread_mutex_unlock(&hub.lock);
			exit(0);
		}
		if (!fast::rdma_links.load(std::memory_order_relaxed) && !hub.n_orphans &&
		    !hub.n_pending) {
			const std::int64_t now = fast::coarse_ns();
			if (!idle_since) {
				idle_since = now;
			} else if (now - idle_since > IDLE_EXIT_NS) {
				hub.thread = false;
				pthread_mutex_unlock(&hub.lock);
				return nullptr;
			}
		} else {
			idle_since = 0;
		}
		bool moved = false;
		if (hub.n_orphans && fast::coarse_ns() - looked > ADOPT_POLL_NS) {
			looked = fast::coarse_ns();
			moved = adopt_orphans();
		}
		moved |= pending_check();
		moved |= poll_cqs();
		for (unsigned i = 0; i < top; i++) {
			Link *l = hub.slots[i];
			bool done;
			if (!l || !l->started)
				continue;
			moved |= step(l, &done);
			if (done) {
				slot_free(i);
				link_free(l);
				fast::rdma_links.fetch_sub(1, std::memory_order_relaxed);
				moved = true;
			}
		}
		pthread_mutex_unlock(&hub.lock);
		const std::int64_t now = fast::coarse_ns();
		if (moved) {
			hub.progress.fetch_add(1, std::memory_order_relaxed);
			last_move = now;
		}
		if (now - checked > ALONE_CHECK_NS && fast::rdma_links.load(std::memory_order_relaxed) &&
		    !hub.last.load(std::memory_order_relaxed)) {
			checked = now;
			if (alone()) {
				last_move = now;
				hub.exiting.store(true, std::memory_order_relaxed);
				hub.last.store(true, std::memory_order_relaxed);
				continue;
			}
		}
		// A program thread that spins does this work as it comes
		// (sd_rdma_spin()): going round again would only contend with
		// it for the lock and the processor.
		if (!moved || hub.spinners.load(std::memory_order_relaxed))
			wait_events();
	}
	return nullptr;
}

// ---- exit and fork ---------------------------------------------------------

// Wait until done() (tried under hub.lock) says the bridge thread did
// what it was asked, for as long as it makes progress: it gives up after
// EXIT_STALL_NS without any.
template <typename Done> void wait_for_bridge(Done done) noexcept
{
	std::uint64_t seen = hub.progress.load(std::memory_order_relaxed);
	std::int64_t since = fast::now_ns();
	for (;;) {
		pthread_mutex_lock(&hub.lock);
		const bool all = done();
		pthread_mutex_unlock(&hub.lock);
		if (all)
			return;
		const std::uint64_t now = hub.progress.load(std::memory_order_relaxed);
		if (now != seen) {
			seen = now;
			since = fast::now_ns();
		} else if (fast::now_ns() - since > EXIT_STALL_NS) {
			return;
		}
		const timespec ts = {0, 1'000'000};
		nanosleep(&ts, nullptr);
	}
}

// A process that exits carries out what it sent and its end of stream
// before it goes, for as long as that makes progress.
void drain() noexcept
{
	// (Not when the thread itself exits: it drained already.)
	if (!fast::rdma_links.load(std::memory_order_relaxed) || hub.last.load(std::memory_order_relaxed))
		return;
	hub.exiting.store(true, std::memory_order_relaxed);
	kick();
	wait_for_bridge([]() noexcept {
		return !fast::rdma_links.load(std::memory_order_relaxed) || drained_locked();
	});
}

// The child of fork has no bridge thread and may not use its parent's
// device objects: it lets go of its copies of the bridges' descriptors
// and of the device's (the rings and landing areas were not copied,
// MADV_DONTFORK), and starts afresh: its own first RDMA connection (a
// worker accepting on its parent's listener) opens the device again.  The
// parent's objects stay behind in its memory, unused.
void after_fork_child() noexcept
{
	// The parent's pending connects are its own to follow.
	for (unsigned i = 0; i < hub.n_pending; i++)
		real::close()(hub.pending[i].dup);
	hub.n_pending = 0;
	hub.n_orphans = 0;
	for (unsigned i = 0; i < top; i++) {
		const Link *l = hub.slots[i];
		// One whose descriptor the parent closed may live on in a
		// copy (dup): it is looked for by its inode.
		if (l && l->started && !l->failed && hub.n_orphans < MAX_ORPHANS)
			hub.orphans[hub.n_orphans++] = {l->sfd, l->sino};
		if (l && l->bfd >= 0)
			real::close()(l->bfd);
		if (l && static_cast<unsigned>(l->sfd) < fast::MAX_CONNS)
			link_of[l->sfd].store(0, std::memory_order_relaxed);
		hub.slots[i] = nullptr;
	}
	if (hub.ev >= 0)
		real::close()(hub.ev);
	if (hub.chan)
		real::close()(hub.chan->fd);
	if (hub.ctx) {
		real::close()(hub.ctx->async_fd);
		real::close()(hub.ctx->cmd_fd);
	}
	hub.ev = -1;
	top = 0;
	hub.waiters.store(0, std::memory_order_relaxed);	// its parent's threads
	hub.spinners.store(0, std::memory_order_relaxed);
	hub.events_owed = false;
	hub.thread = false;
	fast::rdma_links.store(0, std::memory_order_relaxed);
	hub.ctx = nullptr;
	hub.pd = nullptr;
	hub.chan = nullptr;
	for (unsigned c = 0; c < MAX_CQS; c++) {
		hub.cq[c] = nullptr;
		hub.cq_room[c] = 0;
		hub.cq_links[c] = 0;
	}
	hub.n_cqs.store(0, std::memory_order_relaxed);
	hub.links_peak.store(0, std::memory_order_relaxed);
	if (hub.avail > 0)
		hub.avail = 0;
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	hub.lock = fresh;
	hub.exiting.store(false, std::memory_order_relaxed);
	hub.ask_now = false;
	hub.execing = false;
	hub.pid = getpid();
	// Its parent's connections are its own too: it watches for their
	// bridge to leave (the parent exits), and takes them up.
	if (hub.n_orphans)
		thread_start();
}

__attribute__((destructor)) void rdma_fini()
{
	drain();
}

void before_fork() noexcept
{
	pthread_mutex_lock(&hub.lock);
}

void after_fork_parent() noexcept
{
	pthread_mutex_unlock(&hub.lock);
}

[[gnu::constructor]] void rdma_init()
{
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
	hub.pid = getpid();
	// A new image takes up the connections exec kept, as a child of
	// fork does its parent's; it asks at once (it is the program now).
	pthread_mutex_lock(&hub.lock);
	find_inherited();
	if (hub.n_orphans) {
		hub.ask_now = true;
		thread_start();
	}
	pthread_mutex_unlock(&hub.lock);
}

// The process execs: each RDMA connection's bridge leaves for the next
// image (SD_RDMA_LEAVE_EXEC), which the module allows for those exec
// keeps (a descriptor without close-on-exec); the others stay, and exec
// ends them as before (the socket closes with the bridge's descriptor).
// Waits for the bridge thread to have tried each, as exit waits for it.
void before_exec() noexcept
{
	// A child of vfork shares its parent's memory, hub and all, but not
	// its connections' bridges: its exec leaves them to the parent.
	if (getpid() != hub.pid)
		return;
	bool any = false;
	// Also after a take-up in progress (the thread holds the lock), and
	// none from now on.
	pthread_mutex_lock(&hub.lock);
	hub.execing = true;
	for (unsigned i = 0; i < top; i++) {
		Link *l = hub.slots[i];
		if (l && l->started && !l->failed) {
			l->execing = true;
			any = true;
		}
	}
	pthread_mutex_unlock(&hub.lock);
	if (!any)
		return;
	kick();
	wait_for_bridge([]() noexcept {
		for (unsigned i = 0; i < top; i++)
			if (hub.slots[i] && hub.slots[i]->execing)
				return false;
		return true;
	});
}

// The exec failed: this image goes on, and takes up again what its
// bridges left for the next.
void after_exec_failed() noexcept
{
	if (getpid() != hub.pid)
		return;
	pthread_mutex_lock(&hub.lock);
	hub.execing = false;
	for (unsigned i = 0; i < top; i++)
		if (hub.slots[i])
			hub.slots[i]->execing = false;
	const unsigned had = hub.n_orphans;
	find_inherited();
	if (hub.n_orphans != had) {
		adopt_orphans();
		if (hub.n_orphans)
			thread_start();
	}
	pthread_mutex_unlock(&hub.lock);
}

// Set up the bridge of RDMA connection fd, just connected, from link l,
// which holds our half already; the peer's comes when its program
// accepts, and the thread waits for it.  On failure the connection is
// reset: nothing could carry it.
void bridge_up(int fd, Link *l) noexcept
{
	pthread_mutex_lock(&hub.lock);
	bridge_up_locked(fd, l, fd);
	pthread_mutex_unlock(&hub.lock);
}

// Link l's landed bytes, from l->copied on, into iov (want bytes at most,
// as many as landed): how many.  Under hub.lock.
std::size_t take_landed(Link *l, const struct iovec *iov, int iovcnt, std::size_t want) noexcept
{
	std::size_t got = 0;
	const std::size_t n = std::min<std::uint64_t>(want, l->arrived - l->copied);

	for (int i = 0; i < iovcnt && got < n; i++) {
		unsigned char *to = static_cast<unsigned char *>(iov[i].iov_base);
		std::size_t room = std::min(iov[i].iov_len, n - got);
		while (room) {
			const std::uint64_t off = (l->copied + got) % LAND_SIZE;
			const std::size_t k = std::min<std::uint64_t>(room, LAND_SIZE - off);
			memcpy(to, l->landing + off, k);
			to += k;
			room -= k;
			got += k;
		}
	}
	l->copied += got;
	return got;
}

} // namespace

// ---- the hooks -------------------------------------------------------------

int sd_rdma_trace(char *buf, std::size_t len) noexcept
{
	const unsigned n = hub.n_cqs.load(std::memory_order_relaxed);
	if (!n)
		return 0;
	const unsigned long long direct = hub.direct_writes.load(std::memory_order_relaxed);
	const unsigned long long ring = hub.ring_writes.load(std::memory_order_relaxed);
	const unsigned long long rdirect = hub.direct_reads.load(std::memory_order_relaxed);
	const unsigned long long landed = hub.ring_landings.load(std::memory_order_relaxed);
	const long long rtt = hub.rtt.load(std::memory_order_relaxed);
	const long long spin = fast::spin_given ? fast::spin_ns : fast::rdma_spin_ns(fast::spin_ns, rtt);
	return snprintf(buf, len,
			"%d rdma_cqs %u %u\n%d rdma_writes %llu %llu\n%d rdma_reads %llu %llu\n"
			"%d rdma_spin %lld %lld\n",
			getpid(), n, hub.links_peak.load(std::memory_order_relaxed), getpid(),
			direct, ring, getpid(), rdirect, landed, getpid(), rtt / 1000, spin / 1000);
}

// A program thread spins, waiting (fast::Backoff): it polls the
// completion queues and moves what came or is to go, so that a reply
// lands without waking the bridge thread.  But for every 64th turn
// (full) it goes through the links only when a completion came (what
// else they have to do waits for that, or for the next full turn).
// Never waits for hub.lock: the thread that holds it moves the same
// bytes.
void sd_rdma_spin(bool full) noexcept
{
	if (pthread_mutex_trylock(&hub.lock))
		return;
	const int saved = errno;
	help_locked(nullptr, full);
	errno = saved;
	pthread_mutex_unlock(&hub.lock);
}

// While a program thread spins for its data it polls the completion
// queues itself (above): it counts as a waiter, so that the bridge thread
// neither arms the queues nor wakes for their events meanwhile
// (wait_events()), which would only take the processor and the lock from
// it when the data comes.
void sd_rdma_spinning(bool on) noexcept
{
	spinner = on;
	if (on) {
		hub.spinners.fetch_add(1, std::memory_order_relaxed);
		hub.waiters.fetch_add(1, std::memory_order_relaxed);
		hub.naps.fetch_add(1, std::memory_order_relaxed);
	} else {
		hub.waiters.fetch_sub(1, std::memory_order_relaxed);
		hub.spinners.fetch_sub(1, std::memory_order_relaxed);
	}
}

// A blocking receive on fd found its ring empty after its spin, and
// armed it (READER_WAIT).  If fd is an RDMA connection of ours, this
// thread sleeps in the kernel until the socket has something or a
// completion comes (SD_IOC_RECV_WAIT), and polls for it itself: the bytes
// land without the bridge thread's wake-up in between.  Returns 0 when fd
// is not one (the caller goes on as without), 1 to look again, 2 when the
// kernel says the socket has something (data, its end, an error), -1 with
// errno EINTR or EAGAIN (a signal, SO_RCVTIMEO) for the call to fail with.
int sd_rdma_wait(int fd) noexcept
{
	if (fd < 0 || static_cast<unsigned>(fd) >= fast::MAX_CONNS)
		return 0;
	const unsigned slot = link_of[fd].load(std::memory_order_relaxed);
	if (!slot)
		return 0;
	const int saved = errno;
	int chan = before_sleep(fd);
	if (chan < 0)
		return chan == -2 ? 1 : 0;
	const int r = real::ioctl()(fd, SD_IOC_RECV_WAIT, &chan);
	const int err = errno;
	// 0: the channel woke it (the socket itself has something at 1).
	after_sleep(r == 0);
	if (r < 0)
		return err == EINTR || err == EAGAIN ? (errno = err, -1) : (errno = saved, 0);
	errno = saved;
	return r == 1 ? 2 : 1;
}

// poll, ppoll and the epoll_wait family found nothing of ours ready after
// their spin, in a process with RDMA connections.  Before the kernel's own
// call, the thread sleeps on the completion channel and on set[0..n)
// together (an epoll set's descriptor, or a poll set), with mask as the
// call's (ppoll), until *until (CLOCK_MONOTONIC; nullptr: no bound).
// Returns 1 when completions came (the caller looks again), 0 for the
// caller to make its kernel call as without (set has events, or nothing to
// do here), -1 with errno EINTR, -2 when the time is up.
int sd_rdma_sleep_on(const pollfd *set, unsigned n, const timespec *until,
		     const sigset_t *mask) noexcept
{
	constexpr unsigned MAX = 256;

	if (!fast::rdma_links.load(std::memory_order_relaxed) || n > MAX)
		return 0;
	const int saved = errno;
	const int chan = before_sleep(-1);
	if (chan < 0)
		return chan == -2 ? 1 : 0;
	timespec left = {};
	if (until) {
		timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		const std::int64_t ns = std::max<std::int64_t>(
			(until->tv_sec - now.tv_sec) * 1'000'000'000LL + until->tv_nsec - now.tv_nsec,
			0);
		left.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
		left.tv_nsec = static_cast<long>(ns % 1'000'000'000);
	}
	pollfd p[MAX + 1];
	std::copy(set, set + n, p);
	p[n] = {chan, POLLIN, 0};
	const int r = real::ppoll()(p, n + 1, until ? &left : nullptr, mask);
	const int err = errno;
	after_sleep(r > 0 && p[n].revents);
	if (r < 0) {
		errno = err == EINTR ? err : saved;
		return err == EINTR ? -1 : 0;
	}
	errno = saved;
	if (!r)
		return -2;
	return r > 1 || !p[n].revents ? 0 : 1;
}

// f(link) under hub.lock for the link made from socket descriptor fd, if
// there is one and the lock is free (its holder moves the same bytes);
// errno as it was.  Returns what f returned, false without a call.
template <typename F> bool with_link(int fd, F f) noexcept
{
	if (fd < 0 || static_cast<unsigned>(fd) >= fast::MAX_CONNS)
		return false;
	const unsigned slot = link_of[fd].load(std::memory_order_relaxed);
	if (!slot || pthread_mutex_trylock(&hub.lock))
		return false;
	const int saved = errno;
	Link *l = hub.slots[slot - 1];
	const bool r = l && l->sfd == fd && f(l);
	errno = saved;
	pthread_mutex_unlock(&hub.lock);
	return r;
}

// The program wrote into fd's send ring (dir SD_TOKEN_TX) or took from
// its receive ring (SD_TOKEN_RX) and found the bridge asleep: it does the
// bridge's work for that connection itself, and says whether the bridge
// need not be woken after all (nothing left that only it would move).
bool sd_rdma_wake(int fd, std::uint32_t dir) noexcept
{
	return with_link(fd, [dir](Link *l) {
		help_locked(l);
		const bool done = l->started && l->state == State::RUN && !l->failed &&
				  !hub.exiting.load(std::memory_order_relaxed) &&
				  (dir == SD_TOKEN_TX ? l->cons().readable() == 0
						      : l->copied == l->arrived);
		// This call took the flag that says the bridge sleeps: set
		// again for it, so that the next send comes here too.  The
		// bridge's queue may be armed for the peer's writes only, and
		// our write's completion would not wake it to look.
		return done && (dir != SD_TOKEN_TX || l->cons().prepare_wait() == 1);
	});
}

// The program wrote into fd's send ring, and the bridge did not ask to be
// woken for it.  If no write of the connection's data is in flight, the
// link is idle and nothing would send the bytes before this thread or the
// bridge next helps: this thread posts the write now (the paper's section
// 4.2: one write per send while the link is idle; with writes in flight,
// what the program sends meanwhile waits for their completions and goes
// in one write).
void sd_rdma_push(int fd) noexcept
{
	with_link(fd, [](Link *l) {
		if (!l->data_inflight)
			help_locked(l);
		return true;
	});
}

// A send of want bytes on connection fd, straight from the program's
// buffers into the mirror and out in one write: when the link is idle (no
// write of data in flight, the paper's one write per send), its send ring
// is empty (nothing sent before waits there) and the peer's landing area
// has room for all of it in one piece.  The bytes skip the send ring: one
// copy on this host instead of two.  The caller holds the send side (its
// lock and token), so nothing writes into the ring meanwhile, and
// hub.lock keeps the bridge's own sending out.  False: the caller writes
// into the ring as before.
bool sd_rdma_send(int fd, const struct iovec *iov, int iovcnt, std::size_t want) noexcept
{
	return with_link(fd, [&](Link *l) {
		if (!l->started || !can_write(l) || l->failed || l->tx_done || l->refin ||
		    l->data_inflight || l->inflight >= SEND_WR || l->sent != l->pushed ||
		    l->handing || l->execing || hub.exiting.load(std::memory_order_relaxed))
			return false;
		// Bytes or an error in the ring: they go first, by the ring.
		// (Never the end of the stream: fast_send() leaves a side
		// that shut down writing to the kernel.)  Nor to a peer that
		// let go: what reaches it is pump()'s to answer with a reset.
		if (l->cons().readable() != 0 || peer_closed(l))
			return false;
		const std::uint64_t size = l->peer.ring_size;
		const std::uint64_t took = __atomic_load_n(l->peer_took, __ATOMIC_ACQUIRE);
		const std::uint64_t off = l->sent % size;
		if (took > l->sent || want > size - (l->sent - took) || want > size - off)
			return false;
		unsigned char *to = l->mirror + off;
		for (int i = 0; i < iovcnt; i++) {
			memcpy(to, iov[i].iov_base, iov[i].iov_len);
			to += iov[i].iov_len;
		}
		write_imm(l, l->mirror + off, static_cast<std::uint32_t>(want),
			  l->peer.ring_addr + off, l->peer.ring_rkey,
			  static_cast<std::uint32_t>(want));
		l->sent += want;
		l->pushed = l->sent;
		count(hub.direct_writes);
		return true;
	});
}

// A blocking receive on fd begins to wait for data: if fd is an RDMA
// connection of ours, this thread's help leaves what lands for it to the
// receive (Receiving, sd_rdma_recv()) until sd_rdma_received().  Whether
// it is one.
bool sd_rdma_receiving(int fd) noexcept
{
	if (fd < 0 || static_cast<unsigned>(fd) >= fast::MAX_CONNS ||
	    !link_of[fd].load(std::memory_order_relaxed))
		return false;
	receiving = {fd, false};
	return true;
}

// Whether this thread's help left bytes for its receive since its last
// look (sd_rdma_recv()).
bool sd_rdma_left() noexcept
{
	return receiving.left;
}

// The receive on fd (sd_rdma_receiving()) owns its receive ring q and
// found it empty, and this thread's help left bytes for it: they go from
// the landing area straight into iov (at most want bytes), one copy
// instead of two, and the rest into the ring behind them, with the credit
// and the end of the stream as land() gives them.  Returns the bytes
// taken, 0 when the ring must be read instead (it holds bytes another
// thread landed first; anything else: land() put them there).
ssize_t sd_rdma_recv(int fd, const struct iovec *iov, int iovcnt, std::size_t want,
		     sd::Consumer &q) noexcept
{
	std::size_t got = 0;

	receiving.left = false;
	pthread_mutex_lock(&hub.lock);
	const int saved = errno;
	if (Link *l = running_link(fd)) {
		if (l->copied < l->arrived && !sock_closed(l) && q.readable() == 0) {
			got = take_landed(l, iov, iovcnt, want);
			count(hub.direct_reads);
		}
		land(l);
	}
	errno = saved;
	pthread_mutex_unlock(&hub.lock);
	return static_cast<ssize_t>(got);
}

// The receive on fd ends (sd_rdma_receiving()): what this thread's help
// left for it and it did not take goes into the ring now.
void sd_rdma_received(int fd) noexcept
{
	const bool left = receiving.left;

	receiving = {};
	if (!left)
		return;
	pthread_mutex_lock(&hub.lock);
	const int saved = errno;
	if (Link *l = running_link(fd))
		land(l);
	errno = saved;
	pthread_mutex_unlock(&hub.lock);
}

// exec, in all its forms: the shim makes the call (hooks.hpp).
void sd_exec_prepare() noexcept
{
	before_exec();
}

void sd_exec_failed() noexcept
{
	after_exec_failed();
}

// _exit: no destructor runs, so drain here.
bool sd_hook__exit(int, void *) noexcept
{
	drain();
	return false;
}

// Descriptors first to last of this process close (close, close_range,
// the target of dup2).  An orphan's socket among them whose parent's
// bridge left already has nothing carrying it until the bridge thread's
// next look, and a short-lived child may be gone before that: the bytes it
// put in the ring would end the connection with a reset.  It is taken up
// now, while the descriptor is there; the successor then carries the rest
// and the end of stream, and exit waits for that (drain).  One whose
// parent's bridge is still there stays with it.
//
// A connection of ours among them stays with the bridge (it carries what
// was sent, the end of stream, or all of it while another process holds
// the socket, until it hands it over: want_handover()), but the number is
// no longer its: the program's calls on the next socket to get it must
// not take the bridge's ways (a wake skipped because the bridge had
// nothing to do).
void sd_rdma_closing(unsigned int first, unsigned int last) noexcept
{
	const bool orphans = __atomic_load_n(&hub.n_orphans, __ATOMIC_RELAXED) != 0;
	const unsigned end = std::min(last, fast::MAX_CONNS - 1);
	bool ours = false;

	if (fast::rdma_links.load(std::memory_order_relaxed))
		for (unsigned fd = first; fd <= end && !ours; fd++)
			ours = link_of[fd].load(std::memory_order_relaxed) != 0;
	if (!orphans && !ours)
		return;
	const int saved = errno;
	pthread_mutex_lock(&hub.lock);
	if (orphans)
		adopt_orphans(first, last);
	bool wanted = false;
	for (unsigned fd = first; fd <= end; fd++) {
		const unsigned slot = link_of[fd].load(std::memory_order_relaxed);
		if (!slot)
			continue;
		Link *l = hub.slots[slot - 1];
		if (l && l->sfd == static_cast<int>(fd)) {
			l->sfd = -1;
			wanted |= l->tx_cons_flags &&
				  (__atomic_load_n(l->tx_cons_flags, __ATOMIC_ACQUIRE) &
				   SD_RING_WANTED);
		}
		link_of[fd].store(0, std::memory_order_relaxed);
	}
	pthread_mutex_unlock(&hub.lock);
	// A process waits to take it up: the bridge hands it over now.
	if (wanted)
		kick();
	errno = saved;
}

// A redirected listener offers RDMA when this process has a device.
bool sd_hook_listen(int fd, int, int *) noexcept
{
	if (fd < 0 || static_cast<unsigned>(fd) >= fast::MAX_CONNS || !available())
		return false;
	const int saved = errno;
	const int one = 1;
	const bool ok = !real::setsockopt()(fd, SOL_SD, SD_RDMA_OFFER, &one, sizeof(one));
	offered[fd].store(ok, std::memory_order_relaxed);
	errno = saved;
	return false;	// the real listen, now
}

// Set up the bridge of an accepted RDMA connection: its half came with the
// request; ours goes back through the monitors.
static void accepted(int fd) noexcept
{
	if (transport(fd) != SD_TRANSPORT_RDMA)
		return;
	sd_rdma_half peer;
	socklen_t len = sizeof(peer);
	in6_addr local = {};
	Link *l = nullptr;
	bool ok = !real::getsockopt()(fd, SOL_SD, SD_RDMA_PEER, &peer, &len) &&
		  local_of(fd, &local);
	pthread_mutex_lock(&hub.lock);
	// Our queue pair ready for the peer's writes before our half goes.
	ok = ok && device_for(local) && (l = link_new()) && link_prepare(l) &&
	     link_attach(l, fd) && link_connect(l, peer);
	pthread_mutex_unlock(&hub.lock);
	ok = ok && !real::setsockopt()(fd, SOL_SD, SD_RDMA_LOCAL, &l->mine, sizeof(l->mine));
	pthread_mutex_lock(&hub.lock);
	ok = ok && link_start(l);
	if (!ok) {
		// Nothing can carry it: reset (closing the bridge's descriptor
		// does too).
		if (!l || l->bfd < 0) {
			std::uint32_t o = SD_RDMA_OP_RESET;
			(void)real::ioctl()(fd, SD_IOC_RDMA, &o);
		}
		if (l)
			link_drop(l);
	}
	pthread_mutex_unlock(&hub.lock);
}

bool sd_hook_accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags,
		     int *result) noexcept
{
	if (!is_offered(fd))
		return false;
	*result = real::accept4()(fd, addr, alen, flags);
	if (*result >= 0) {
		const int saved = errno;
		accepted(*result);
		errno = saved;
	}
	return true;
}

// accept is accept4 without flags.
bool sd_hook_accept(int fd, struct sockaddr *addr, socklen_t *alen, int *result) noexcept
{
	return sd_hook_accept4(fd, addr, alen, 0, result);
}

// Before a connect to another host: our half, offered through the
// monitors.  True when the connect was made here (*result), false when
// the real connect is still to make.
bool sd_rdma_connect(int fd, const struct sockaddr *addr, socklen_t len, int *result) noexcept
{
	in6_addr src;
	Link *l = nullptr;

	// Only a socket's first connect: the next ones (after EINPROGRESS)
	// only ask how it went, and one that fell back is TCP's.
	if (!addr || !available())
		return false;
	const int saved = errno;
	if (transport(fd) != SD_TRANSPORT_NONE || !route_source(addr, len, &src)) {
		errno = saved;
		return false;
	}
	const int one = 1;
	pthread_mutex_lock(&hub.lock);
	bool ok = device_for(src) && (l = link_new()) && link_prepare(l);
	pthread_mutex_unlock(&hub.lock);
	ok = ok && !real::setsockopt()(fd, SOL_SD, SD_RDMA_OFFER, &one, sizeof(one)) &&
	     !real::setsockopt()(fd, SOL_SD, SD_RDMA_LOCAL, &l->mine, sizeof(l->mine));
	if (!ok) {
		if (l) {
			pthread_mutex_lock(&hub.lock);
			link_drop(l);
			pthread_mutex_unlock(&hub.lock);
		}
		errno = saved;
		return false;
	}
	*result = real::connect()(fd, addr, len);
	const int err = errno;
	const bool inprogress = *result < 0 && err == EINPROGRESS;
	const int t = *result == 0 || inprogress ? transport(fd) : -1;
	if (t == SD_TRANSPORT_RDMA) {
		bridge_up(fd, l);
	} else if (inprogress && t == SD_TRANSPORT_NONE) {
		// Non-blocking: the module makes the rendezvous in the
		// background, and the thread sets up the bridge after it.
		pthread_mutex_lock(&hub.lock);
		const bool followed = pending_add(fd, l);
		pthread_mutex_unlock(&hub.lock);
		if (!followed) {
			// No room to follow it: wait for its end here.
			pollfd p = {fd, POLLOUT, 0};
			while (real::poll()(&p, 1, -1) < 0 && errno == EINTR) {
			}
			if (transport(fd) == SD_TRANSPORT_RDMA) {
				bridge_up(fd, l);
			} else {
				pthread_mutex_lock(&hub.lock);
				link_drop(l);
				pthread_mutex_unlock(&hub.lock);
			}
		}
	} else {
		pthread_mutex_lock(&hub.lock);
		link_drop(l);
		pthread_mutex_unlock(&hub.lock);
	}
	errno = err;
	return true;
}

// How long the links' writes take to complete, as threads that spun saw
// it (Hub::rtt): fast::Backoff spins for a few of them where that is
// longer than its default.
std::int64_t sd_rdma_rtt() noexcept
{
	return hub.rtt.load(std::memory_order_relaxed);
}

// A thread's spin of spun ran out at now.  A timed write posted before
// now and not complete yet says the round trip is longer than what it
// waited (fast::rtt_floor()).
void sd_rdma_spun(std::int64_t now, std::int64_t spun) noexcept
{
	const std::int64_t at = hub.timed_at.load(std::memory_order_relaxed);

	if (!at || at > now)
		return;
	const std::int64_t rtt = hub.rtt.load(std::memory_order_relaxed);
	hub.rtt.store(fast::rtt_floor(rtt, now - at, spun), std::memory_order_relaxed);
}
