// SPDX-License-Identifier: GPL-2.0
//
// How a connect to another host ended, as sdlinkd saw it, and the verdict
// it gives the kernel for it (SD_LINK_CMD_VERDICT) when it does not carry
// it: SD_LINK_TCP with the reason, which the kernel counts (sdctl stats,
// "fallback_*"), or SD_LINK_REFUSE.  A carried connect's verdict is
// SD_LINK_VIA (daemon.cpp).
#pragma once

#include <cstdint>

#include "wire.hpp"

namespace sdlinkd {

enum class Outcome : std::uint8_t {
	ACCEPTED,	// the peer answered ACCEPT, and this side could not carry it
	NO_RDMA,	// the peer answered NO_RDMA
	REFUSED,	// the peer answered REFUSED: no AF_SD listener there
	BUSY,		// the peer answered BUSY: the listener's backlog is full
	DENIED,		// the peer answered DENIED: a rule there refuses (ECONNREFUSED)
	POLICY,		// the peer answered POLICY: a connect rule there says TCP
	NO_DAEMON,	// the peer's control port refused or was out of reach
	NO_KEY,		// no fabric key in this namespace
	AUTH,		// the session failed authentication, or the peer
			// closed it before any authenticated frame
	FAILED,		// any other session or protocol failure, a limit here
	TIMEOUT,	// no answer within the kernel's bound
};

struct KernelVerdict {
	std::uint8_t verdict = 0;	// SD_LINK_*
	std::uint8_t reason = 0;	// SD_FALLBACK_*, with SD_LINK_TCP
};

KernelVerdict kernel_verdict(Outcome o) noexcept;

// What a peer's ANSWER means here.
Outcome outcome_of(sdlink::Verdict v) noexcept;

// A dial of the peer's control port that failed with errno err.
Outcome dial_outcome(int err) noexcept;

// A session that ended: with the session's error (Err::OK when the
// connection ended without one: closed, reset, or a limit), after an
// authenticated frame came from the peer or not.
Outcome session_outcome(sdlink::Err err, bool authenticated) noexcept;

// For logs: "no_rdma", "peer_no_sd", ...: the kernel's counter the
// verdict moves, without "fallback_".
const char *reason_name(std::uint8_t reason) noexcept;
const char *describe(Outcome o) noexcept;

} // namespace sdlinkd
