// SPDX-License-Identifier: GPL-2.0
#include "peer_cache.hpp"

#include <algorithm>
#include <iterator>

namespace sdlinkd {

void PeerCache::remember(const In6 &host, Time now)
{
	if (ttl_ <= Duration::zero() || capacity_ == 0)
		return;
	if (auto it = until_.find(host); it != until_.end()) {
		it->second = now + ttl_;
		return;
	}
	if (until_.size() >= capacity_) {
		std::erase_if(until_, [now](const auto &e) { return e.second <= now; });
		if (until_.size() >= capacity_)
			until_.erase(std::min_element(until_.begin(), until_.end(), [](const auto &a,
										   const auto &b) {
				return a.second < b.second;
			}));
	}
	until_.emplace(host, now + ttl_);
}

bool PeerCache::no_daemon(const In6 &host, Time now)
{
	const auto it = until_.find(host);
	if (it == until_.end())
		return false;
	if (it->second <= now) {
		until_.erase(it);
		return false;
	}
	return true;
}

} // namespace sdlinkd
