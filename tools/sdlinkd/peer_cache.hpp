// SPDX-License-Identifier: GPL-2.0
//
// The hosts found without a link daemon (the TCP connect to their control
// port was refused or found no route), remembered for a while so that
// connects to them are decided at once, without dialling again.  An entry
// lasts ttl from when it was learnt; a ttl of 0 remembers nothing.  The
// cache holds at most a fixed number of hosts: when full, the entry that
// would expire first makes room.
#pragma once

#include <cstddef>
#include <map>

#include "addr.hpp"
#include "clock.hpp"

namespace sdlinkd {

class PeerCache {
public:
	// Hosts remembered at most.  Each is a connect that would otherwise
	// dial; beyond this many distinct hosts, the oldest are dialled again.
	static constexpr std::size_t CAPACITY = 4096;

	explicit PeerCache(Duration ttl, std::size_t capacity = CAPACITY) noexcept
		: ttl_(ttl), capacity_(capacity)
	{
	}

	// host has no daemon, as learnt at now.
	void remember(const In6 &host, Time now);
	// Whether host is remembered without a daemon at now; an expired
	// entry is dropped.
	bool no_daemon(const In6 &host, Time now);
	// host shows it has a daemon (it dialled us): forget what was learnt.
	void forget(const In6 &host) { until_.erase(host); }

	std::size_t size() const noexcept { return until_.size(); }
	Duration ttl() const noexcept { return ttl_; }

private:
	Duration ttl_;
	std::size_t capacity_;
	std::map<In6, Time> until_;	// host -> when the entry expires
};

} // namespace sdlinkd
