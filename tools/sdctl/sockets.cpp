// SPDX-License-Identifier: GPL-2.0
//
// sdctl sockets: every bound or connected AF_SD socket of this network
// namespace, like ss (SD_CMD_SOCK_GET).
#include <linux/sd.h>

#include <sys/socket.h>

#include <string>

#include "addr.hpp"
#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

// TCP state names as ss prints them (TCP_CLOSE is "UNCONN").
std::string state_name(std::uint8_t state)
{
	static constexpr const char *names[] = {
		"UNKNOWN", "ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT",
		"UNCONN", "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING", "NEW-SYN-RECV",
	};
	if (state < std::size(names) && state)
		return names[state];
	return "UNKNOWN-" + std::to_string(state);
}

std::string transport_name(std::uint8_t t)
{
	switch (t) {
	case SD_TRANSPORT_NONE: return "none";
	case SD_TRANSPORT_SHM: return "shm";
	case SD_TRANSPORT_RDMA: return "rdma";
	case SD_TRANSPORT_TCP: return "tcp";
	default: return "transport-" + std::to_string(t);
	}
}

std::string fallback_name(std::uint8_t f)
{
	static constexpr const char *names[] = {
		"none", "no_listener", "peer_no_sd", "no_rdma", "handshake", "policy", "tcp_client",
		"remote", "peer_unknown", "busy", "auth",
		"tcp_listener",
	};
	static_assert(std::size(names) == __SD_FALLBACK_MAX);
	return f < std::size(names) ? names[f] : "fallback_" + std::to_string(f);
}

std::string family_name(std::uint16_t family)
{
	switch (family) {
	case AF_INET: return "inet";
	case AF_INET6: return "inet6";
	default: return "family_" + std::to_string(family);
	}
}

std::string ring_fill(std::uint32_t fill, std::uint32_t size)
{
	return size ? std::to_string(fill) + "/" + std::to_string(size) : "-";
}

constexpr Key k_state{"state", "State"};
constexpr Key k_local = Key::text_only("Local");
constexpr Key k_peer = Key::text_only("Peer");
constexpr Key k_transport{"transport", "Transport"};
constexpr Key k_uid{"uid", "UID", Key::RIGHT};
constexpr Key k_pid{"pid", "PID", Key::RIGHT};
constexpr Key k_inode{"inode", "Inode", Key::RIGHT};
constexpr Key k_tx_bytes{"tx_bytes", "TxBytes", Key::RIGHT};
constexpr Key k_rx_bytes{"rx_bytes", "RxBytes", Key::RIGHT};
constexpr Key k_tx_msgs{"tx_msgs", "TxMsgs", Key::RIGHT};
constexpr Key k_rx_msgs{"rx_msgs", "RxMsgs", Key::RIGHT};
constexpr Key k_tx_ring = Key::text_only("TxRing", Key::RIGHT);
constexpr Key k_rx_ring = Key::text_only("RxRing", Key::RIGHT);

constexpr Key columns[] = {
	k_state, k_local, k_peer, k_transport, k_uid, k_pid, k_inode,
	k_tx_bytes, k_rx_bytes, k_tx_msgs, k_rx_msgs, k_tx_ring, k_rx_ring,
};

int show(const Options &opt, Args args)
{
	no_args(sockets_object, "show", args);
	const std::vector<SockInfo> socks = Netlink().sockets();

	Printer out(opt.json);
	out.begin_list(columns);
	for (const SockInfo &s : socks) {
		out.begin_row();
		out.field(k_state, state_name(s.state));
		out.field(Key::json_only("tcp_state"), s.state);
		if (s.family)
			out.field(Key::json_only("family"), family_name(s.family));
		print_endpoint(out, "local", k_local, s.local, s.family);
		print_endpoint(out, "peer", k_peer, s.peer, s.family);
		if (s.transport == SD_TRANSPORT_TCP && s.fallback) {
			out.field(Key::text_only(k_transport.text),
				  "tcp(" + fallback_name(*s.fallback) + ")");
			out.field(Key::json_only(k_transport.json), transport_name(s.transport));
			out.field(Key::json_only("fallback"), fallback_name(*s.fallback));
		} else {
			out.field(k_transport, transport_name(s.transport));
		}
		if (s.uid)
			out.field(k_uid, *s.uid);
		if (s.pid)
			out.field(k_pid, *s.pid);
		out.field(k_inode, s.inode);
		out.field(k_tx_bytes, s.tx_bytes);
		out.field(k_rx_bytes, s.rx_bytes);
		out.field(k_tx_msgs, s.tx_msgs);
		out.field(k_rx_msgs, s.rx_msgs);
		out.field(k_tx_ring, ring_fill(s.tx_fill, s.tx_size));
		out.field(k_rx_ring, ring_fill(s.rx_fill, s.rx_size));
		out.field(Key::json_only("tx_fill"), s.tx_fill);
		out.field(Key::json_only("tx_size"), s.tx_size);
		out.field(Key::json_only("rx_fill"), s.rx_fill);
		out.field(Key::json_only("rx_size"), s.rx_size);
		out.field(Key::json_only("tx_pages"), s.tx_pages);
		out.field(Key::json_only("rx_pages"), s.rx_pages);
		out.end_row();
	}
	out.end_list();
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "AF_SD sockets, bound or connected (like ss)"},
};

} // namespace

const Object sockets_object = {"sockets", verbs, "AF_SD sockets"};

} // namespace sdctl
