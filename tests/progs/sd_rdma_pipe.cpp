// SPDX-License-Identifier: GPL-2.0
//
// sd_rdma_pipe: a ring mirrored over RDMA (make bench's raw baseline,
// Documentation/bench.rst), between two processes on two hosts, without
// the module or a daemon: the ring code of libsd
// (lib/ring.hpp) on memory of each process, mirrored by one-sided RDMA
// writes with immediate, credits returned by RDMA writes of the consumer
// position.  The two halves of the queue pairs are swapped over a TCP
// connection.
//
//   sd_rdma_pipe server PORT BYTES            echo BYTES back, then exit
//   sd_rdma_pipe client HOST PORT BYTES ITERS  stream BYTES of a seeded
//       pattern and check the echo, then ITERS 64-byte round trips
//
// The client prints one JSON object: bytes checked, the round trips'
// median in microseconds, writes posted.  Exit 0 only when every byte came
// back as sent.  Device rxe0 (or $SD_RDMA_DEVICE), GID index 1 (or
// $SD_RDMA_GID).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rdma_verbs.hpp"
#include "ring.hpp"

const char *sdt::prog = "sd_rdma_pipe";

namespace {

using namespace sdt;

constexpr std::size_t ring_size = 64 * 1024;

// What one side tells the other: its queue pair and where its rings are.
struct Half {
	std::uint32_t qpn, psn, rkey, pad;
	std::uint64_t rx_base;	// its receive ring: our records go there
	std::uint64_t tx_base;	// its send ring's copy: our credits go there
	std::uint8_t gid[16];
};

void io(int fd, void *buf, std::size_t len, bool out)
{
	auto *p = static_cast<char *>(buf);
	while (len) {
		const ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
		if (n <= 0)
			die("exchange", n ? errno : EPIPE);
		p += n;
		len -= static_cast<std::size_t>(n);
	}
}

class Link {
public:
	explicit Link(int fd)
	{
		pd_.reset(ibv_alloc_pd(dev_.ctx.get()));
		cq_.reset(ibv_create_cq(dev_.ctx.get(), 256, nullptr, nullptr, 0));
		if (!pd_ || !cq_)
			die("ibv_alloc_pd/ibv_create_cq");

		// One registration: the receive ring (the peer writes records)
		// and the send ring (the peer writes credit into its consumer
		// field).
		const std::size_t len = sd::layout_len(ring_size);
		mem_.resize(2 * len + 4096);
		auto *base = reinterpret_cast<unsigned char *>(
			(reinterpret_cast<std::uintptr_t>(mem_.data()) + 4095) & ~std::uintptr_t{4095});
		rx_base_ = base;
		tx_base_ = base + len;
		if (sd::layout(rx_base_, len, ring_size, rx_off_) ||
		    sd::layout(tx_base_, len, ring_size, tx_off_))
			die("sd::layout", EINVAL);
		mr_.reset(ibv_reg_mr(pd_.get(), base, 2 * len,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
		if (!mr_)
			die("ibv_reg_mr");
		prod_ = std::make_unique<sd::Producer>(tx_base_, tx_off_);
		cons_ = std::make_unique<sd::Consumer>(rx_base_, rx_off_);
		cons_->set_limit(0);	// nothing has arrived

		ibv_qp_init_attr qa = {};
		qa.send_cq = cq_.get();
		qa.recv_cq = cq_.get();
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = 128;
		qa.cap.max_recv_wr = 128;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		qp_.reset(ibv_create_qp(pd_.get(), &qa));
		if (!qp_)
			die("ibv_create_qp");

		Half mine = {};
		mine.qpn = htonl(qp_->qp_num);
		mine.psn = htonl(static_cast<std::uint32_t>(std::rand()) & 0xffffff);
		mine.rkey = htonl(mr_->rkey);
		mine.rx_base = htobe64(reinterpret_cast<std::uint64_t>(rx_base_));
		mine.tx_base = htobe64(reinterpret_cast<std::uint64_t>(tx_base_));
		std::memcpy(mine.gid, dev_.gid.raw, 16);
		io(fd, &mine, sizeof(mine), true);
		io(fd, &peer_, sizeof(peer_), false);
		connect(ntohl(mine.psn));
		// Both ready before the first write.
		char c = 'r';
		io(fd, &c, 1, true);
		io(fd, &c, 1, false);
	}

	// Send all of buf: into the local send ring, then mirrored.
	void send(const void *buf, std::size_t len)
	{
		const auto *p = static_cast<const unsigned char *>(buf);
		while (len) {
			const std::uint64_t from = prod_->tail();
			const ssize_t n = prod_->write(p, len);
			if (n == -EAGAIN) {
				poll();	// credit arrives by RDMA write
				continue;
			}
			if (n < 0)
				die("Producer::write", static_cast<int>(-n));
			mirror(from, prod_->tail());
			p += n;
			len -= static_cast<std::size_t>(n);
		}
	}

	// Receive up to len bytes (at least one).
	std::size_t recv(void *buf, std::size_t len)
	{
		for (;;) {
			const ssize_t n = cons_->read(buf, len);
			if (n > 0) {
				credit();
				return static_cast<std::size_t>(n);
			}
			if (n != -EAGAIN)
				die("Consumer::read", n ? static_cast<int>(-n) : EPIPE);
			poll();
		}
	}

	std::uint64_t writes() const { return writes_; }

private:
	void connect(std::uint32_t my_psn)
	{
		qp_init(qp_.get());
		// Receives only take write-with-immediate completions.
		for (int i = 0; i < 64; i++)
			post_recv();
		qp_connect(qp_.get(), dev_, peer_.gid, ntohl(peer_.qpn), ntohl(peer_.psn), my_psn,
			   IBV_MTU_1024);
	}

	void post_recv()
	{
		ibv_recv_wr wr = {}, *bad = nullptr;
		wr.wr_id = 1;
		if (ibv_post_recv(qp_.get(), &wr, &bad))
			die("ibv_post_recv");
	}

	void write(unsigned char *local, std::size_t len, std::uint64_t remote, bool imm,
		   std::uint32_t immdata)
	{
		ibv_sge sge = {};
		sge.addr = reinterpret_cast<std::uint64_t>(local);
		sge.length = static_cast<std::uint32_t>(len);
		sge.lkey = mr_->lkey;
		ibv_send_wr wr = {}, *bad = nullptr;
		wr.wr_id = 2;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.imm_data = htonl(immdata);
		wr.wr.rdma.remote_addr = remote;
		wr.wr.rdma.rkey = ntohl(peer_.rkey);
		while (inflight_ >= 100)
			poll();
		if (ibv_post_send(qp_.get(), &wr, &bad))
			die("ibv_post_send");
		inflight_++;
		writes_++;
	}

	// The data area bytes [from, to) of the send ring, to the same
	// offsets of the peer's receive ring; the last write carries the
	// new tail, so that the peer's completion follows every byte.
	void mirror(std::uint64_t from, std::uint64_t to)
	{
		const std::uint64_t mask = ring_size - 1;
		const std::uint64_t peer_data = be64toh(peer_.rx_base) + rx_off_.data;
		while (from < to) {
			const std::uint64_t off = from & mask;
			const std::uint64_t n = std::min(to - from, ring_size - off);
			write(tx_base_ + tx_off_.data + off, n, peer_data + off, from + n == to,
			      static_cast<std::uint32_t>(to));
			from += n;
		}
	}

	// After a read: the credit the consumer published, to the peer's
	// copy of the send ring's consumer field.
	void credit()
	{
		const std::uint64_t pub = cons_->published();
		if (pub == sent_credit_)
			return;
		sent_credit_ = pub;
		write(rx_base_ + rx_off_.consumer, 8, be64toh(peer_.tx_base) + tx_off_.consumer,
		      false, 0);
	}

	/*
	 * RDMA does not order the placement of the bytes of one write, and a
	 * record's header comes before its payload in memory: the consumer
	 * reads only up to the end that the completion announces (the low 32
	 * bits of the peer's tail; a completion follows every byte before
	 * it).
	 */
	void land(std::uint32_t imm)
	{
		std::uint64_t end = (landed_ & ~std::uint64_t{0xffffffff}) | imm;
		if (end < landed_)
			end += std::uint64_t{1} << 32;
		if (end - landed_ > ring_size)
			die("a completion past the ring", EPROTO);
		landed_ = end;
		cons_->set_limit(end);
	}

	void poll()
	{
		ibv_wc wc[16];
		const int n = ibv_poll_cq(cq_.get(), 16, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				std::fprintf(stderr, "sd_rdma_pipe: completion: %s\n",
					     ibv_wc_status_str(wc[i].status));
				std::exit(1);
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				land(ntohl(wc[i].imm_data));
				post_recv();
			} else {
				inflight_--;
			}
		}
	}

	Device dev_;
	Pd pd_;
	Cq cq_;
	Qp qp_;
	Mr mr_;
	std::vector<unsigned char> mem_;
	unsigned char *rx_base_ = nullptr, *tx_base_ = nullptr;
	std::uint64_t landed_ = 0;	// the end the last completion announced
	sd_ring_offset rx_off_ = {}, tx_off_ = {};
	std::unique_ptr<sd::Producer> prod_;
	std::unique_ptr<sd::Consumer> cons_;
	Half peer_ = {};
	unsigned inflight_ = 0;
	std::uint64_t writes_ = 0;
	std::uint64_t sent_credit_ = 0;
};

unsigned char pattern(std::uint64_t i)
{
	return static_cast<unsigned char>((i * 2654435761u) >> 13);
}

int serve(const char *port, std::uint64_t bytes)
{
	addrinfo hints = {}, *ai = nullptr;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(nullptr, port, &hints, &ai))
		die("getaddrinfo", EINVAL);
	const int lst = socket(AF_INET, SOCK_STREAM, 0);
	const int one = 1;
	setsockopt(lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lst < 0 || bind(lst, ai->ai_addr, ai->ai_addrlen) || listen(lst, 1))
		die("listen");
	freeaddrinfo(ai);
	std::printf("ready\n");
	std::fflush(stdout);
	const int fd = accept(lst, nullptr, nullptr);
	if (fd < 0)
		die("accept");
	Link link(fd);
	std::vector<unsigned char> buf(32768);
	// The stream, then the round trips: echo everything, up to the
	// client's one-byte goodbye "q".
	for (std::uint64_t got = 0; got < bytes;) {
		const std::size_t n = link.recv(buf.data(), buf.size());
		link.send(buf.data(), n);
		got += n;
	}
	for (;;) {
		const std::size_t n = link.recv(buf.data(), 64);
		link.send(buf.data(), n);
		if (n == 1 && buf[0] == 'q')
			break;
	}
	close(fd);
	close(lst);
	return 0;
}

int client(const char *host, const char *port, std::uint64_t bytes, unsigned iters)
{
	addrinfo hints = {}, *ai = nullptr;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, port, &hints, &ai))
		die("getaddrinfo", EINVAL);
	const int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || ::connect(fd, ai->ai_addr, ai->ai_addrlen))
		die("connect");
	freeaddrinfo(ai);
	Link link(fd);

	// Stream: send in 24 KiB pieces, read the echo as it comes.
	std::vector<unsigned char> out(24576), in(32768);
	std::uint64_t sent = 0, got = 0;
	while (got < bytes) {
		if (sent < bytes && sent - got < ring_size / 2) {
			const std::size_t n = static_cast<std::size_t>(
				std::min<std::uint64_t>(out.size(), bytes - sent));
			for (std::size_t i = 0; i < n; i++)
				out[i] = pattern(sent + i);
			link.send(out.data(), n);
			sent += n;
			continue;
		}
		const std::size_t n = link.recv(in.data(), in.size());
		for (std::size_t i = 0; i < n; i++)
			if (in[i] != pattern(got + i)) {
				std::fprintf(stderr, "sd_rdma_pipe: byte %llu differs\n",
					     static_cast<unsigned long long>(got + i));
				return 1;
			}
		got += n;
	}

	// Round trips of 64 bytes.
	std::vector<double> rtt;
	unsigned char msg[64];
	std::memset(msg, 'p', sizeof(msg));
	for (unsigned i = 0; i < iters; i++) {
		const auto t0 = std::chrono::steady_clock::now();
		link.send(msg, sizeof(msg));
		std::size_t n = 0;
		while (n < sizeof(msg))
			n += link.recv(in.data() + n, sizeof(msg) - n);
		rtt.push_back(std::chrono::duration<double, std::micro>(
				      std::chrono::steady_clock::now() - t0).count());
		if (std::memcmp(in.data(), msg, sizeof(msg))) {
			std::fprintf(stderr, "sd_rdma_pipe: the echo differs\n");
			return 1;
		}
	}
	const unsigned char q = 'q';
	link.send(&q, 1);
	link.recv(in.data(), 1);
	std::sort(rtt.begin(), rtt.end());
	std::printf("{\"bytes_checked\": %llu, \"round_trips\": %u, \"rtt_us_median\": %.1f, "
		    "\"writes\": %llu}\n",
		    static_cast<unsigned long long>(got), iters,
		    rtt.empty() ? 0.0 : rtt[rtt.size() / 2],
		    static_cast<unsigned long long>(link.writes()));
	close(fd);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc == 4 && !std::strcmp(argv[1], "server"))
		return serve(argv[2], std::strtoull(argv[3], nullptr, 0));
	if (argc == 6 && !std::strcmp(argv[1], "client"))
		return client(argv[2], argv[3], std::strtoull(argv[4], nullptr, 0),
			      static_cast<unsigned>(std::atoi(argv[5])));
	std::fprintf(stderr, "usage: sd_rdma_pipe server PORT BYTES\n"
			     "       sd_rdma_pipe client HOST PORT BYTES ITERS\n");
	return 2;
}
