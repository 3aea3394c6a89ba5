// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's command line.  Parsing allocates nothing the caller must free
// and throws nothing; a bad command line comes back as a message for the
// usage text (exit status 2).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace sdlinkd {

// The TCP port of the control connections between daemons, on every host
// of a fabric alike (a daemon dials the other host's at its own port).
constexpr std::uint16_t DEFAULT_PORT = 7471;
// How long a host found without a daemon is remembered (0: not at all).
constexpr unsigned DEFAULT_PEER_CACHE_SECONDS = 60;
// At most a day: a host that gains a daemon is tried again within that.
constexpr unsigned MAX_PEER_CACHE_SECONDS = 86400;
// How long the loop goes on polling its carriers after the last round
// that moved something, before it sleeps: as long as libsd spins in recv
// (SD_SPIN_US), so that a program and its daemon give up the CPU alike.
constexpr unsigned DEFAULT_SPIN_US = 200;
constexpr unsigned MAX_SPIN_US = 10'000'000;

struct Options {
	std::uint16_t port = DEFAULT_PORT;
	unsigned peer_cache_seconds = DEFAULT_PEER_CACHE_SECONDS;
	unsigned spin_us = DEFAULT_SPIN_US;
	// A C string, empty: found by the session's address.  Fixed size, so
	// that Options stays trivially destructible (tests/unit, cmocka).
	std::array<char, 64> rdma_device{};
	bool no_rdma = false;		// carry nothing
	bool verbose = false;
	bool help = false;		// print the usage, exit 0
	bool version = false;		// print the version, exit 0
};

struct Parsed {
	Options options;
	std::string error;		// empty: options holds the command line
	bool ok() const noexcept { return error.empty(); }
};

// args: the arguments after the program's name.
Parsed parse_args(std::span<const char *const> args);

void usage(std::FILE *out);

} // namespace sdlinkd
