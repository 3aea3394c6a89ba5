// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's command line (options.hpp).  Numbers are decimal, unsigned,
// without sign, spaces or suffixes; "--name VALUE" and "--name=VALUE" are
// the same.
#include "options.hpp"

#include <charconv>
#include <string_view>

namespace sdlinkd {
namespace {

// value as a number in [min, max], or false.
bool number(std::string_view value, unsigned long min, unsigned long max, unsigned long &out)
{
	if (value.empty() || value.front() < '0' || value.front() > '9')
		return false;
	unsigned long n = 0;
	const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
	if (ec != std::errc() || end != value.data() + value.size() || n < min || n > max)
		return false;
	out = n;
	return true;
}

} // namespace

void usage(std::FILE *out)
{
	std::fprintf(out,
		     "usage: sdlinkd [-p|--port PORT] [--peer-cache-seconds N] [--spin-us N]\n"
		     "               [--rdma-device NAME | --no-rdma] [-v|--verbose]\n"
		     "       sdlinkd -h|--help | --version\n"
		     "\n"
		     "The AF_SD link daemon of the network namespace it runs in: decides each\n"
		     "redirected connect to another host with that host's daemon.\n"
		     "\n"
		     "  -p, --port PORT             TCP port of the control connections between\n"
		     "                              daemons, the same on every host (default %u)\n"
		     "      --peer-cache-seconds N  remember a host without a daemon for N seconds,\n"
		     "                              0 to %u (default %u; 0: ask every time)\n"
		     "      --spin-us N             poll the carried connections N microseconds\n"
		     "                              after the last one moved, then sleep, 0 to %u\n"
		     "                              (default %u)\n"
		     "      --rdma-device NAME      carry connections on this RDMA device (default:\n"
		     "                              the first whose GID table holds the address of\n"
		     "                              the session with the other host)\n"
		     "      --no-rdma               carry nothing: every connect goes over TCP\n"
		     "  -v, --verbose               log every connect and session event, and the\n"
		     "                              counters at exit\n"
		     "  -h, --help                  print this help\n"
		     "      --version               print the version\n"
		     "\n"
		     "exit status: 0 stopped by SIGTERM or SIGINT, 1 failure, 2 usage error\n",
		     DEFAULT_PORT, MAX_PEER_CACHE_SECONDS, DEFAULT_PEER_CACHE_SECONDS, MAX_SPIN_US,
		     DEFAULT_SPIN_US);
}

Parsed parse_args(std::span<const char *const> args)
{
	Parsed p;
	for (std::size_t i = 0; i < args.size(); i++) {
		std::string_view arg = args[i] ? args[i] : "";
		std::string_view value;
		bool inline_value = false;
		if (arg.starts_with("--")) {
			if (const std::size_t eq = arg.find('='); eq != std::string_view::npos) {
				value = arg.substr(eq + 1);
				arg = arg.substr(0, eq);
				inline_value = true;
			}
		}
		const bool takes_value = arg == "-p" || arg == "--port" || arg == "--peer-cache-seconds" ||
					 arg == "--spin-us" || arg == "--rdma-device";
		if (inline_value && !takes_value) {
			p.error = "option " + std::string(arg) + " takes no value";
			return p;
		}
		if (takes_value && !inline_value) {
			if (i + 1 >= args.size() || !args[i + 1]) {
				p.error = "option " + std::string(arg) + " needs a value";
				return p;
			}
			value = args[++i];
		}

		unsigned long n = 0;
		if (arg == "-p" || arg == "--port") {
			if (!number(value, 1, 65535, n)) {
				p.error = "bad port '" + std::string(value) + "': 1 to 65535";
				return p;
			}
			p.options.port = static_cast<std::uint16_t>(n);
		} else if (arg == "--peer-cache-seconds") {
			if (!number(value, 0, MAX_PEER_CACHE_SECONDS, n)) {
				p.error = "bad --peer-cache-seconds '" + std::string(value) + "': 0 to " +
					  std::to_string(MAX_PEER_CACHE_SECONDS);
				return p;
			}
			p.options.peer_cache_seconds = static_cast<unsigned>(n);
		} else if (arg == "--spin-us") {
			if (!number(value, 0, MAX_SPIN_US, n)) {
				p.error = "bad --spin-us '" + std::string(value) + "': 0 to " +
					  std::to_string(MAX_SPIN_US);
				return p;
			}
			p.options.spin_us = static_cast<unsigned>(n);
		} else if (arg == "--rdma-device") {
			if (value.empty() || value.size() > 63) {
				p.error = "bad --rdma-device '" + std::string(value) + "'";
				return p;
			}
			value.copy(p.options.rdma_device.data(), value.size());
			p.options.rdma_device[value.size()] = '\0';
		} else if (arg == "--no-rdma") {
			p.options.no_rdma = true;
		} else if (arg == "-v" || arg == "--verbose") {
			p.options.verbose = true;
		} else if (arg == "-h" || arg == "--help") {
			p.options.help = true;
		} else if (arg == "--version") {
			p.options.version = true;
		} else if (arg.starts_with("-")) {
			p.error = "unknown option '" + std::string(arg) + "'";
			return p;
		} else {
			p.error = "unexpected argument '" + std::string(arg) + "'";
			return p;
		}
	}
	if (p.options.no_rdma && p.options.rdma_device[0])
		p.error = "--no-rdma and --rdma-device together";
	return p;
}

} // namespace sdlinkd
