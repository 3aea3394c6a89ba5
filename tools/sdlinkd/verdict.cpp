// SPDX-License-Identifier: GPL-2.0
#include "verdict.hpp"

#include <linux/sd.h>
#include <linux/sd_link.h>

#include <cerrno>

namespace sdlinkd {

KernelVerdict kernel_verdict(Outcome o) noexcept
{
	switch (o) {
	case Outcome::ACCEPTED:		// what the data path will carry
	case Outcome::NO_RDMA: return {SD_LINK_TCP, SD_FALLBACK_NO_RDMA};
	case Outcome::REFUSED: return {SD_LINK_TCP, SD_FALLBACK_NO_LISTENER};
	case Outcome::BUSY: return {SD_LINK_TCP, SD_FALLBACK_BUSY};
	case Outcome::DENIED: return {SD_LINK_REFUSE, SD_FALLBACK_NONE};
	case Outcome::POLICY: return {SD_LINK_TCP, SD_FALLBACK_POLICY};
	case Outcome::NO_DAEMON: return {SD_LINK_TCP, SD_FALLBACK_PEER_NO_SD};
	case Outcome::NO_KEY:
	case Outcome::AUTH: return {SD_LINK_TCP, SD_FALLBACK_AUTH};
	case Outcome::FAILED:
	case Outcome::TIMEOUT: break;
	}
	return {SD_LINK_TCP, SD_FALLBACK_HANDSHAKE};
}

Outcome outcome_of(sdlink::Verdict v) noexcept
{
	switch (v) {
	case sdlink::Verdict::ACCEPT: return Outcome::ACCEPTED;
	case sdlink::Verdict::REFUSED: return Outcome::REFUSED;
	case sdlink::Verdict::NO_RDMA: return Outcome::NO_RDMA;
	case sdlink::Verdict::BUSY: return Outcome::BUSY;
	case sdlink::Verdict::DENIED: return Outcome::DENIED;
	case sdlink::Verdict::POLICY: return Outcome::POLICY;
	}
	return Outcome::FAILED;
}

Outcome dial_outcome(int err) noexcept
{
	switch (err) {
	case ECONNREFUSED:	// the host is there, its control port is closed
	case EHOSTUNREACH:	// no route, or the host does not answer ARP/ND
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
	case ETIMEDOUT:		// the SYNs went unanswered
		return Outcome::NO_DAEMON;
	default:
		return Outcome::FAILED;
	}
}

Outcome session_outcome(sdlink::Err err, bool authenticated) noexcept
{
	if (err == sdlink::Err::AUTH)
		return Outcome::AUTH;
	// A daemon whose key differs from ours (or that has none) learns it
	// from our first authenticated frame, or before it sends any, and
	// closes: so a session that ends before the peer proved its key
	// failed authentication, whoever noticed.
	if (err == sdlink::Err::OK && !authenticated)
		return Outcome::AUTH;
	return Outcome::FAILED;
}

const char *reason_name(std::uint8_t reason) noexcept
{
	switch (reason) {
	case SD_FALLBACK_NO_LISTENER: return "no_listener";
	case SD_FALLBACK_PEER_NO_SD: return "peer_no_sd";
	case SD_FALLBACK_NO_RDMA: return "no_rdma";
	case SD_FALLBACK_HANDSHAKE: return "handshake";
	case SD_FALLBACK_BUSY: return "busy";
	case SD_FALLBACK_AUTH: return "auth";
	case SD_FALLBACK_POLICY: return "policy";
	default: return "other";
	}
}

const char *describe(Outcome o) noexcept
{
	switch (o) {
	case Outcome::ACCEPTED: return "the peer accepted, but this side could not carry it";
	case Outcome::NO_RDMA: return "the peer has no RDMA path";
	case Outcome::REFUSED: return "no AF_SD listener at the peer";
	case Outcome::BUSY: return "the peer's listener is busy";
	case Outcome::DENIED: return "a rule at the peer refuses it";
	case Outcome::POLICY: return "a connect rule at the peer says TCP";
	case Outcome::NO_DAEMON: return "no daemon at the peer";
	case Outcome::NO_KEY: return "no fabric key here";
	case Outcome::AUTH: return "authentication with the peer failed";
	case Outcome::FAILED: return "the session with the peer failed";
	case Outcome::TIMEOUT: return "no answer in time";
	}
	return "?";
}

} // namespace sdlinkd
