// SPDX-License-Identifier: GPL-2.0
//
// What sd_rdma_pipe needs of the verbs: the
// device as the test hosts have it (rxe0, or $SD_RDMA_DEVICE; GID index 1,
// the IPv4 one, or $SD_RDMA_GID; port 1), owning pointers for verbs
// objects, and the steps of a reliable-connected queue pair.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace sdt {

// The program's name, for its messages.
extern const char *prog;

[[noreturn]] inline void die(const char *what, int err = errno)
{
	std::fprintf(stderr, "%s: %s: %s\n", prog, what, std::strerror(err));
	std::exit(1);
}

template <typename T, auto Fn> struct Del {
	void operator()(T *p) const noexcept { Fn(p); }
};
using Ctx = std::unique_ptr<ibv_context, Del<ibv_context, ibv_close_device>>;
using Pd = std::unique_ptr<ibv_pd, Del<ibv_pd, ibv_dealloc_pd>>;
using Chan = std::unique_ptr<ibv_comp_channel, Del<ibv_comp_channel, ibv_destroy_comp_channel>>;
using Cq = std::unique_ptr<ibv_cq, Del<ibv_cq, ibv_destroy_cq>>;
using Qp = std::unique_ptr<ibv_qp, Del<ibv_qp, ibv_destroy_qp>>;
using Mr = std::unique_ptr<ibv_mr, Del<ibv_mr, ibv_dereg_mr>>;

// The test hosts' device, opened, with its GID index and that GID.
struct Device {
	Ctx ctx;
	int gid_index = 1;
	ibv_gid gid = {};

	Device()
	{
		const char *name = std::getenv("SD_RDMA_DEVICE");
		const char *gidenv = std::getenv("SD_RDMA_GID");
		gid_index = gidenv ? std::atoi(gidenv) : 1;
		int n = 0;
		ibv_device **devs = ibv_get_device_list(&n);
		if (!devs)
			die("ibv_get_device_list");
		for (int i = 0; i < n && !ctx; i++)
			if (!std::strcmp(ibv_get_device_name(devs[i]), name ? name : "rxe0"))
				ctx.reset(ibv_open_device(devs[i]));
		ibv_free_device_list(devs);
		if (!ctx)
			die("no such RDMA device", ENODEV);
		if (ibv_query_gid(ctx.get(), 1, gid_index, &gid))
			die("ibv_query_gid");
	}
};

// A new queue pair to INIT: the peer may write into our memory.
inline void qp_init(ibv_qp *qp)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("QP to INIT");
}

// The local ACK timeout, 4.096 us * 2^17 = 537 ms, as libsd's
// (lib/shim/rdma.cpp): shorter, a loaded soft-RoCE host resends writes
// whose acknowledgement was only late.
constexpr std::uint8_t ACK_TIMEOUT = 17;

// INIT to RTR to RTS, towards the peer's queue pair qpn at gid.
inline void qp_connect(ibv_qp *qp, const Device &dev, const std::uint8_t gid[16],
		       std::uint32_t qpn, std::uint32_t peer_psn, std::uint32_t my_psn,
		       ibv_mtu mtu)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = qpn;
	a.rq_psn = peer_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
	a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(dev.gid_index);
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("QP to RTR");
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ACK_TIMEOUT;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("QP to RTS");
}

} // namespace sdt
