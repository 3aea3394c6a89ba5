// SPDX-License-Identifier: GPL-2.0
//
// sd_rdma_bridge: an AF_SD connection between two hosts, set up by the
// monitors and carried over RDMA (Documentation/rdma.rst).  The program
// itself only makes plain system calls on its socket (socket, connect or
// accept, send, recv, shutdown), as a program without libsd would; a
// bridge thread, the prototype of libsd's, stands in for the remote end of
// the module's two rings: it consumes the send ring into RDMA writes with
// immediate, lands the peer's writes and produces them into the receive
// ring, and returns credits the same way.
//
//   sd_rdma_bridge server ADDR PORT           accept one connection and
//       echo it to its end of stream
//   sd_rdma_bridge client ADDR PORT BYTES ITERS [DELAY_MS]   ITERS
//       64-byte round trips, then stream BYTES of a seeded pattern and
//       check the echo, read only DELAY_MS after the stream started (the
//       echo then waits in the rings and the landing area)
//
// Both need net.sd.redirect=1 and the same net.sd.rendezvous_port on the
// two hosts.  The client prints one JSON object.  Exit 0 only when every
// byte came back as sent.  Device rxe0 (or $SD_RDMA_DEVICE), GID index 1
// (or $SD_RDMA_GID).
//
// The wire between the bridges: the peer's landing area (a byte ring of
// ring_size bytes, in its half) receives stream bytes at their stream
// offset modulo its size; each write carries immediate data: the byte
// count, or IMM_FIN (no more bytes), or IMM_CREDIT (the 8-byte word at
// the half's credit_addr now holds how many landing bytes the peer took).
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/sd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "rdma_verbs.hpp"
#include "ring.hpp"

const char *sdt::prog = "sd_rdma_bridge";

namespace {

using namespace sdt;

constexpr std::uint32_t land_size = 256 * 1024;
constexpr std::uint32_t IMM_FIN = 1U << 31;
constexpr std::uint32_t IMM_CREDIT = 1U << 30;
constexpr unsigned RECVS = 256;
constexpr unsigned MAX_INFLIGHT = 64;

// One mapped ring of the module.
struct Map {
	void *base = MAP_FAILED;
	std::size_t len = 0;
	~Map()
	{
		if (base != MAP_FAILED)
			munmap(base, len);
	}
};

class Bridge {
public:
	// The queue pair, and our half for the module to carry.
	explicit Bridge(int fd) : fd_(fd)
	{
		pd_.reset(ibv_alloc_pd(dev_.ctx.get()));
		chan_.reset(ibv_create_comp_channel(dev_.ctx.get()));
		if (!pd_ || !chan_)
			die("ibv_alloc_pd/ibv_create_comp_channel");
		cq_.reset(ibv_create_cq(dev_.ctx.get(), 2 * RECVS + 2 * MAX_INFLIGHT, nullptr,
					chan_.get(), 0));
		if (!cq_)
			die("ibv_create_cq");

		// landing | mirror (what we send, at the peer's offsets) | words
		mem_.resize(2 * land_size + 2 * 4096);
		base_ = reinterpret_cast<unsigned char *>(
			(reinterpret_cast<std::uintptr_t>(mem_.data()) + 4095) & ~std::uintptr_t{4095});
		landing_ = base_;
		mirror_ = base_ + land_size;
		peer_took_ = reinterpret_cast<std::uint64_t *>(base_ + 2 * land_size);
		my_took_ = peer_took_ + 8;
		mr_.reset(ibv_reg_mr(pd_.get(), base_, 2 * land_size + 4096,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
		if (!mr_)
			die("ibv_reg_mr");

		ibv_qp_init_attr qa = {};
		qa.send_cq = cq_.get();
		qa.recv_cq = cq_.get();
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = 2 * MAX_INFLIGHT;
		qa.cap.max_recv_wr = RECVS;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		qp_.reset(ibv_create_qp(pd_.get(), &qa));
		if (!qp_)
			die("ibv_create_qp");
		qp_init(qp_.get());
		for (unsigned i = 0; i < RECVS; i++)
			post_recv();

		std::memcpy(mine_.gid, dev_.gid.raw, 16);
		mine_.qpn = qp_->qp_num;
		// A first PSN of its own, so that nothing left of another
		// connection's packets falls into this one's window.
		mine_.psn = std::random_device{}() & 0xffffff;
		mine_.ring_addr = reinterpret_cast<std::uint64_t>(landing_);
		mine_.ring_rkey = mr_->rkey;
		mine_.ring_size = land_size;
		mine_.credit_addr = reinterpret_cast<std::uint64_t>(peer_took_);
		mine_.credit_rkey = mr_->rkey;
		mine_.mtu = IBV_MTU_1024;
	}

	~Bridge()
	{
		if (bfd_ >= 0)
			close(bfd_);
	}

	const sd_rdma_half &mine() const { return mine_; }

	// The peer's half, checked (it came from another host), and the
	// queue pair connected to it.
	void connect(const sd_rdma_half &peer)
	{
		// The mirror matches the peer's landing area byte for byte.
		if (peer.qpn > 0xffffff || peer.psn > 0xffffff || peer.ring_size != land_size ||
		    peer.mtu < IBV_MTU_256 || peer.mtu > IBV_MTU_4096 || peer.flags)
			die("a bad half from the peer", EPROTO);
		peer_ = peer;
		qp_connect(qp_.get(), dev_, peer.gid, peer.qpn, peer.psn, mine_.psn,
			   static_cast<ibv_mtu>(std::min<std::uint32_t>(peer.mtu, IBV_MTU_1024)));
	}

	// The bridge's descriptor, and the module's rings mapped through it:
	// we consume the send ring and produce the receive ring, in place of
	// the remote end.  Before the queue pair can take the peer's first
	// write: while the descriptor exists, the end of the peer's stream is
	// ours to give (SD_RDMA_OP_FIN, once its data landed), not the peer's
	// monitor's, whose clean end may come before the last writes landed.
	// Numbered above the socket, so that an exit releases the socket
	// first and ends the connection as a close would.
	void map()
	{
		const int b = ioctl(fd_, SD_IOC_RDMA_BRIDGE, nullptr);
		if (b < 0)
			die("SD_IOC_RDMA_BRIDGE");
		bfd_ = fcntl(b, F_DUPFD_CLOEXEC, fd_ + 1);
		close(b);
		if (bfd_ < 0)
			die("fcntl");
		sd_mmap_offsets off = {};
		socklen_t len = sizeof(off);
		if (getsockopt(fd_, SOL_SD, SD_MMAP_OFFSETS, &off, &len))
			die("SD_MMAP_OFFSETS");
		tx_.len = off.tx.mmap_len;
		rx_.len = off.rx.mmap_len;
		tx_.base = mmap(nullptr, tx_.len, PROT_READ | PROT_WRITE, MAP_SHARED, bfd_,
				SD_PGOFF_TX_RING);
		rx_.base = mmap(nullptr, rx_.len, PROT_READ | PROT_WRITE, MAP_SHARED, bfd_,
				SD_PGOFF_RX_RING);
		if (tx_.base == MAP_FAILED || rx_.base == MAP_FAILED)
			die("mmap");
		cons_ = std::make_unique<sd::Consumer>(tx_.base, off.tx);
		prod_ = std::make_unique<sd::Producer>(rx_.base, off.rx);
		ev_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (ev_ < 0 || setsockopt(fd_, SOL_SD, SD_RDMA_EVENTFD, &ev_, sizeof(ev_)))
			die("SD_RDMA_EVENTFD");
	}

	// Until both directions ended (or the connection failed).  Once they
	// did, the writes still in flight get a while to complete: the peer
	// may have gone as soon as it had our end of stream, and soft-RoCE
	// does not always fail a write to a queue pair that went.
	void run()
	{
		std::chrono::steady_clock::time_point ended;
		for (;;) {
			bool moved = poll_cq();
			moved |= land();
			moved |= pump();
			if (failed_)
				break;
			if (tx_done_ && rx_done_ && credited_ == copied_) {
				const auto now = std::chrono::steady_clock::now();
				if (!inflight_)
					break;
				if (ended == std::chrono::steady_clock::time_point{})
					ended = now;
				else if (now - ended > std::chrono::seconds(2))
					break;
			}
			if (!moved)
				wait();
		}
		cons_.reset();
		prod_.reset();
		close(ev_);
		// The mappings hold the bridge's descriptor's file, which
		// the destructor closes once the program closed the socket.
		munmap(tx_.base, tx_.len);
		munmap(rx_.base, rx_.len);
		tx_.base = rx_.base = MAP_FAILED;
	}

	std::uint64_t writes() const { return writes_; }

private:
	void op(std::uint32_t o)
	{
		if (ioctl(bfd_, SD_IOC_RDMA, &o))
			die("SD_IOC_RDMA");
	}

	void fail(const char *why)
	{
		std::fprintf(stderr, "sd_rdma_bridge: %s: connection reset\n", why);
		std::uint32_t o = SD_RDMA_OP_RESET;
		ioctl(bfd_, SD_IOC_RDMA, &o);
		failed_ = true;
	}

	// A queue pair in error flushes every other request, and the
	// completion that says why may come after those of the flushed
	// receives: name it, and which side it was.
	void fail_with(const ibv_wc *wc, const ibv_wc *end)
	{
		const ibv_wc *why = wc;
		for (const ibv_wc *w = wc; w < end; w++) {
			if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR) {
				why = w;
				break;
			}
		}
		char msg[160];
		std::snprintf(msg, sizeof(msg), "%s (%s, vendor error %u)",
			      ibv_wc_status_str(why->status),
			      why->wr_id == 1 ? "receive" : "write", why->vendor_err);
		fail(msg);
	}

	void post_recv()
	{
		ibv_recv_wr wr = {}, *bad = nullptr;
		wr.wr_id = 1;
		if (ibv_post_recv(qp_.get(), &wr, &bad))
			die("ibv_post_recv");
	}

	void write(const void *local, std::uint32_t len, std::uint64_t remote, std::uint32_t imm)
	{
		ibv_sge sge = {};
		sge.addr = reinterpret_cast<std::uint64_t>(local);
		sge.length = len;
		sge.lkey = mr_->lkey;
		ibv_send_wr wr = {}, *bad = nullptr;
		wr.wr_id = 2;
		wr.sg_list = len ? &sge : nullptr;
		wr.num_sge = len ? 1 : 0;
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.imm_data = htonl(imm);
		wr.wr.rdma.remote_addr = remote;
		wr.wr.rdma.rkey = remote == peer_.credit_addr ? peer_.credit_rkey : peer_.ring_rkey;
		if (ibv_post_send(qp_.get(), &wr, &bad))
			die("ibv_post_send");
		inflight_++;
		writes_++;
	}

	bool poll_cq()
	{
		ibv_wc wc[32];
		const int n = ibv_poll_cq(cq_.get(), 32, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fail_with(wc + i, wc + n);
				return true;
			}
			if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
				inflight_--;
				continue;
			}
			const std::uint32_t imm = ntohl(wc[i].imm_data);
			post_recv();
			if (imm == IMM_FIN)
				peer_fin_ = true;
			else if (imm == IMM_CREDIT)
				continue;	// *peer_took_ moved
			else if (imm < IMM_CREDIT && !peer_fin_ &&
				 arrived_ + imm - copied_ <= land_size)
				arrived_ += imm;
			else
				fail("a bad write from the peer");
		}
		return n > 0;
	}

	// Landed bytes into the receive ring, then the credit back.
	bool land()
	{
		const std::uint64_t from = copied_;
		while (copied_ < arrived_) {
			const std::uint64_t off = copied_ % land_size;
			const std::uint64_t n = std::min(arrived_ - copied_, land_size - off);
			const ssize_t w = prod_->write(landing_ + off, n);
			if (w == -EAGAIN)
				break;
			if (w < 0) {
				fail("the receive ring");
				return true;
			}
			copied_ += static_cast<std::uint64_t>(w);
		}
		if (prod_->take_wake())
			op(SD_RDMA_OP_DATA);
		if (copied_ != credited_ && inflight_ < 2 * MAX_INFLIGHT - 2) {
			*my_took_ = copied_;
			write(my_took_, 8, peer_.credit_addr, IMM_CREDIT);
			credited_ = copied_;
		}
		if (peer_fin_ && copied_ == arrived_ && !rx_done_) {
			prod_->fin();
			op(SD_RDMA_OP_FIN);
			rx_done_ = true;
		}
		return copied_ != from;
	}

	// The send ring, through the mirror, into the peer's landing area.
	bool pump()
	{
		bool moved = false;
		while (!tx_done_ && inflight_ < MAX_INFLIGHT) {
			const std::uint64_t took = __atomic_load_n(peer_took_, __ATOMIC_ACQUIRE);
			if (took > sent_) {
				fail("a bad credit from the peer");
				return true;
			}
			const std::uint64_t room = peer_.ring_size - (sent_ - took);
			if (!room)
				break;
			const std::uint64_t off = sent_ % peer_.ring_size;
			const std::uint64_t want = std::min<std::uint64_t>(
				{room, peer_.ring_size - off, land_size - off % land_size});
			const ssize_t r = cons_->read(mirror_ + off % land_size, want);
			if (r == -EAGAIN)
				break;
			if (r < 0) {
				fail("the send ring");
				return true;
			}
			cons_->flush();
			if (r == 0) {
				write(nullptr, 0, peer_.ring_addr, IMM_FIN);
				tx_done_ = true;
			} else {
				write(mirror_ + off % land_size, static_cast<std::uint32_t>(r),
				      peer_.ring_addr + off, static_cast<std::uint32_t>(r));
				sent_ += static_cast<std::uint64_t>(r);
			}
			moved = true;
		}
		if (cons_->take_wake())
			op(SD_RDMA_OP_ROOM);
		return moved;
	}

	// Sleep until a completion or the module's kick (bounded).
	void wait()
	{
		if (ibv_req_notify_cq(cq_.get(), 0))
			die("ibv_req_notify_cq", EIO);
		if (poll_cq())
			return;
		// Tell the producer of the send ring (and, when the receive
		// ring is full, its consumer) that we sleep.
		if (!tx_done_ && cons_->prepare_wait() == 0)
			return;
		if (copied_ < arrived_ && prod_->prepare_wait() == 0)
			return;
		pollfd p[2] = {{chan_->fd, POLLIN, 0}, {ev_, POLLIN, 0}};
		if (::poll(p, 2, 200) < 0 && errno != EINTR)
			die("poll");
		if (p[0].revents & POLLIN) {
			ibv_cq *cq;
			void *ctx;
			if (!ibv_get_cq_event(chan_.get(), &cq, &ctx))
				ibv_ack_cq_events(cq, 1);
		}
		if (p[1].revents & POLLIN) {
			std::uint64_t v;
			(void)!read(ev_, &v, sizeof(v));
		}
	}

	int fd_;
	int bfd_ = -1;
	int ev_ = -1;
	Device dev_;
	Pd pd_;
	Chan chan_;
	Cq cq_;
	Qp qp_;
	Mr mr_;
	std::vector<unsigned char> mem_;
	unsigned char *base_ = nullptr, *landing_ = nullptr, *mirror_ = nullptr;
	std::uint64_t *peer_took_ = nullptr, *my_took_ = nullptr;
	sd_rdma_half mine_ = {}, peer_ = {};
	Map tx_, rx_;
	std::unique_ptr<sd::Consumer> cons_;
	std::unique_ptr<sd::Producer> prod_;
	std::uint64_t sent_ = 0, arrived_ = 0, copied_ = 0, credited_ = 0, writes_ = 0;
	unsigned inflight_ = 0;
	bool tx_done_ = false, rx_done_ = false, peer_fin_ = false, failed_ = false;
};

void *bridge_main(void *arg)
{
	static_cast<Bridge *>(arg)->run();
	return nullptr;
}

unsigned char pattern(std::uint64_t i)
{
	return static_cast<unsigned char>((i * 2654435761u) >> 13);
}

sockaddr_in address(const char *addr, const char *port)
{
	sockaddr_in sin = {};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port)));
	if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
		die("address", EINVAL);
	return sin;
}

int transport(int fd)
{
	int t = -1;
	socklen_t len = sizeof(t);
	if (getsockopt(fd, SOL_SD, SD_TRANSPORT, &t, &len))
		return -errno;
	return t;
}

void send_all(int fd, const unsigned char *p, std::size_t len)
{
	while (len) {
		const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			die("send");
		p += n;
		len -= static_cast<std::size_t>(n);
	}
}

int serve(const char *addr, const char *port)
{
	const sockaddr_in sin = address(addr, port);
	const int one = 1;
	const int lst = socket(AF_SD, SOCK_STREAM, SD_PROTO_INET);
	if (lst < 0 || setsockopt(lst, SOL_SD, SD_RDMA_OFFER, &one, sizeof(one)) ||
	    bind(lst, reinterpret_cast<const sockaddr *>(&sin), sizeof(sin)) || listen(lst, 4))
		die("listen");
	std::printf("ready\n");
	std::fflush(stdout);
	const int fd = accept(lst, nullptr, nullptr);
	if (fd < 0)
		die("accept");
	if (transport(fd) != SD_TRANSPORT_RDMA)
		die("not an RDMA connection", EPROTO);
	sd_rdma_half peer;
	socklen_t len = sizeof(peer);
	if (getsockopt(fd, SOL_SD, SD_RDMA_PEER, &peer, &len))
		die("SD_RDMA_PEER");
	Bridge b(fd);
	b.map();
	b.connect(peer);
	if (setsockopt(fd, SOL_SD, SD_RDMA_LOCAL, &b.mine(), sizeof(b.mine())))
		die("SD_RDMA_LOCAL");
	pthread_t t;
	if (pthread_create(&t, nullptr, bridge_main, &b))
		die("pthread_create");

	std::vector<unsigned char> buf(65536);
	for (;;) {
		const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
		if (n < 0)
			die("recv");
		if (n == 0)
			break;
		send_all(fd, buf.data(), static_cast<std::size_t>(n));
	}
	shutdown(fd, SHUT_WR);
	pthread_join(t, nullptr);
	close(fd);
	close(lst);
	return 0;
}

struct Writer {
	int fd;
	std::uint64_t bytes;
};

void *writer_main(void *arg)
{
	const auto *w = static_cast<Writer *>(arg);
	std::vector<unsigned char> out(24576);
	for (std::uint64_t sent = 0; sent < w->bytes;) {
		const std::size_t n =
			static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), w->bytes - sent));
		for (std::size_t i = 0; i < n; i++)
			out[i] = pattern(sent + i);
		send_all(w->fd, out.data(), n);
		sent += n;
	}
	shutdown(w->fd, SHUT_WR);
	return nullptr;
}

int client(const char *addr, const char *port, std::uint64_t bytes, unsigned iters,
	   unsigned delay_ms)
{
	const sockaddr_in sin = address(addr, port);
	const int one = 1;
	const int fd = socket(AF_SD, SOCK_STREAM, SD_PROTO_INET);
	if (fd < 0 || setsockopt(fd, SOL_SD, SD_RDMA_OFFER, &one, sizeof(one)))
		die("socket");
	Bridge b(fd);
	if (setsockopt(fd, SOL_SD, SD_RDMA_LOCAL, &b.mine(), sizeof(b.mine())))
		die("SD_RDMA_LOCAL");
	if (connect(fd, reinterpret_cast<const sockaddr *>(&sin), sizeof(sin)))
		die("connect");
	const int t = transport(fd);
	if (t != SD_TRANSPORT_RDMA) {
		std::fprintf(stderr, "sd_rdma_bridge: transport %d, not RDMA\n", t);
		return 1;
	}
	// Blocks until the server accepted and set its half.
	sd_rdma_half peer;
	socklen_t len = sizeof(peer);
	if (getsockopt(fd, SOL_SD, SD_RDMA_PEER, &peer, &len))
		die("SD_RDMA_PEER");
	b.map();
	b.connect(peer);
	pthread_t bt;
	if (pthread_create(&bt, nullptr, bridge_main, &b))
		die("pthread_create");

	// Round trips of 64 bytes, through recv and send.
	std::vector<double> rtt;
	unsigned char msg[64], in[65536];
	std::memset(msg, 'p', sizeof(msg));
	for (unsigned i = 0; i < iters; i++) {
		const auto t0 = std::chrono::steady_clock::now();
		send_all(fd, msg, sizeof(msg));
		std::size_t n = 0;
		while (n < sizeof(msg)) {
			const ssize_t r = recv(fd, in + n, sizeof(msg) - n, 0);
			if (r <= 0)
				die("recv", r ? errno : EPIPE);
			n += static_cast<std::size_t>(r);
		}
		rtt.push_back(std::chrono::duration<double, std::micro>(
				      std::chrono::steady_clock::now() - t0).count());
		if (std::memcmp(in, msg, sizeof(msg))) {
			std::fprintf(stderr, "sd_rdma_bridge: the echo differs\n");
			return 1;
		}
	}

	// The stream: a writer thread, the echo checked here, then the end.
	Writer w = {fd, bytes};
	pthread_t wt;
	if (pthread_create(&wt, nullptr, writer_main, &w))
		die("pthread_create");
	if (delay_ms)
		usleep(delay_ms * 1000U);
	std::uint64_t got = 0;
	for (;;) {
		const ssize_t r = recv(fd, in, sizeof(in), 0);
		if (r < 0)
			die("recv");
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (in[i] != pattern(got + static_cast<std::uint64_t>(i))) {
				std::fprintf(stderr, "sd_rdma_bridge: byte %llu differs\n",
					     static_cast<unsigned long long>(got) + static_cast<unsigned long long>(i));
				return 1;
			}
		got += static_cast<std::uint64_t>(r);
	}
	pthread_join(wt, nullptr);
	pthread_join(bt, nullptr);
	if (got != bytes) {
		std::fprintf(stderr, "sd_rdma_bridge: %llu of %llu bytes came back\n",
			     static_cast<unsigned long long>(got),
			     static_cast<unsigned long long>(bytes));
		return 1;
	}
	std::sort(rtt.begin(), rtt.end());
	std::printf("{\"transport\": \"rdma\", \"bytes_checked\": %llu, \"round_trips\": %u, "
		    "\"rtt_us_median\": %.1f, \"writes\": %llu}\n",
		    static_cast<unsigned long long>(got), iters,
		    rtt.empty() ? 0.0 : rtt[rtt.size() / 2],
		    static_cast<unsigned long long>(b.writes()));
	close(fd);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc == 4 && !std::strcmp(argv[1], "server"))
		return serve(argv[2], argv[3]);
	if ((argc == 6 || argc == 7) && !std::strcmp(argv[1], "client"))
		return client(argv[2], argv[3], std::strtoull(argv[4], nullptr, 0),
			      static_cast<unsigned>(std::atoi(argv[5])),
			      argc == 7 ? static_cast<unsigned>(std::atoi(argv[6])) : 0);
	std::fprintf(stderr, "usage: sd_rdma_bridge server ADDR PORT\n"
			     "       sd_rdma_bridge client ADDR PORT BYTES ITERS [DELAY_MS]\n");
	return 2;
}
