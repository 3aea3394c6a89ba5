// SPDX-License-Identifier: GPL-2.0
/*
 * sd_rdma_reg: can an RDMA device register the rings of an AF_SD
 * connection?  The planned RDMA transport (Documentation/rdma.rst) writes
 * into the peer's copy of a ring, so libsd must register the ring pages,
 * which the module maps with vm_insert_pages; this checks that
 * ibv_reg_mr pins them, and that the registration sees the very memory
 * the module's receive path reads (a byte written through the mapping
 * and then read by the kernel arrives).
 *
 * usage: sd_rdma_reg PORT     prints one JSON object; exits 0 on success
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <linux/sd.h>

static void fail(const char *what, int err)
{
	printf("{\"ok\": false, \"step\": \"%s\", \"errno\": %d, \"error\": \"%s\"}\n",
	       what, err, strerror(err));
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct sd_mmap_offsets off;
	socklen_t n = sizeof(off);
	struct ibv_device **devs;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr[2];
	void *ring[2];
	size_t len[2];
	int lst, c, s, ndev, i;

	if (argc != 2) {
		fprintf(stderr, "usage: sd_rdma_reg PORT\n");
		return 2;
	}
	sin.sin_port = htons((unsigned short)atoi(argv[1]));
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	lst = socket(PF_SD, SOCK_STREAM, 0);
	if (lst < 0)
		fail("socket", errno);
	if (bind(lst, (struct sockaddr *)&sin, sizeof(sin)) || listen(lst, 1))
		fail("listen", errno);
	c = socket(PF_SD, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&sin, sizeof(sin)))
		fail("connect", errno);
	s = accept(lst, NULL, NULL);
	if (s < 0)
		fail("accept", errno);
	if (getsockopt(c, SOL_SD, SD_MMAP_OFFSETS, &off, &n))
		fail("SD_MMAP_OFFSETS", errno);
	len[0] = off.tx.mmap_len;
	len[1] = off.rx.mmap_len;
	ring[0] = mmap(NULL, len[0], PROT_READ | PROT_WRITE, MAP_SHARED, c,
		       (off_t)SD_PGOFF_TX_RING);
	ring[1] = mmap(NULL, len[1], PROT_READ | PROT_WRITE, MAP_SHARED, c,
		       (off_t)SD_PGOFF_RX_RING);
	if (ring[0] == MAP_FAILED || ring[1] == MAP_FAILED)
		fail("mmap", errno);

	devs = ibv_get_device_list(&ndev);
	if (!devs || ndev < 1)
		fail("ibv_get_device_list", errno ? errno : ENODEV);
	ctx = ibv_open_device(devs[0]);
	if (!ctx)
		fail("ibv_open_device", errno);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("ibv_alloc_pd", errno);
	for (i = 0; i < 2; i++) {
		mr[i] = ibv_reg_mr(pd, ring[i], len[i], IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE);
		if (!mr[i])
			fail(i ? "ibv_reg_mr rx" : "ibv_reg_mr tx", errno);
	}

	/*
	 * The registered pages are the ring: a send through the kernel lands
	 * in the client's rx ring, which the registration covers.  Not a
	 * proof of DMA, only that the mapping is the ring itself.
	 */
	if (send(s, "rdma", 4, 0) != 4)
		fail("send", errno);
	if (!memmem((char *)ring[1] + off.rx.data, off.rx.size, "rdma", 4))
		fail("the sent bytes are not in the mapped ring", EIO);

	printf("{\"ok\": true, \"device\": \"%s\", \"tx_len\": %zu, \"rx_len\": %zu, \"tx_lkey\": %u, \"rx_lkey\": %u}\n",
	       ibv_get_device_name(devs[0]), len[0], len[1], mr[0]->lkey,
	       mr[1]->lkey);
	for (i = 0; i < 2; i++)
		if (ibv_dereg_mr(mr[i]))
			fail("ibv_dereg_mr", errno);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	munmap(ring[0], len[0]);
	munmap(ring[1], len[1]);
	close(s);
	close(c);
	close(lst);
	return 0;
}
