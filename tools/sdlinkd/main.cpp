// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd: the AF_SD link daemon of one network namespace (design.rst,
// decision 8; Documentation/sdlinkd.rst).  It registers with af_sd.ko
// over the generic netlink family "sd_link", listens on the control port
// for other hosts' daemons, and decides each redirected connect to
// another host with that host's daemon.
//
// Exit status: 0 stopped by SIGTERM or SIGINT, 1 failure, 2 usage error.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>

#include "daemon.hpp"
#include "kernel.hpp"
#include "log.hpp"
#include "options.hpp"

namespace {

int run(int argc, char **argv)
{
	using namespace sdlinkd;
	const Parsed p = parse_args(std::span<const char *const>(argv + 1, static_cast<std::size_t>(argc - 1)));
	if (!p.ok()) {
		std::fprintf(stderr, "sdlinkd: %s\n", p.error.c_str());
		usage(stderr);
		return 2;
	}
	if (p.options.help) {
		usage(stdout);
		return 0;
	}
	if (p.options.version) {
		std::printf("sdlinkd %s\n", PROJECT_VERSION_STRING);
		return 0;
	}
	set_verbose(p.options.verbose);

	std::string error;
	std::unique_ptr<Kernel> kernel = Kernel::open(error);
	if (!kernel) {
		note("%s", error.c_str());
		return 1;
	}
	// The registration lasts as long as the netlink socket: it ends
	// with the process, however that ends.
	switch (const int err = kernel->register_daemon()) {
	case 0:
		break;
	case EBUSY:
		note("another link daemon serves this network namespace");
		return 1;
	case EPERM:
		note("registering with the kernel needs CAP_NET_ADMIN in this network namespace");
		return 1;
	default:
		note("registering with the kernel: %s%s%s", std::strerror(err),
		     kernel->extack().empty() ? "" : ": ", kernel->extack().c_str());
		return 1;
	}

	Daemon daemon(p.options, std::move(kernel));
	if (!daemon.setup(error)) {
		note("%s", error.c_str());
		return 1;
	}
	return daemon.run();
}

} // namespace

int main(int argc, char **argv)
{
	// Nothing throws but an allocation that fails; then the daemon ends,
	// and the kernel answers the connects that waited on it (TCP, reason
	// remote).
	try {
		return run(argc, argv);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "sdlinkd: %s\n", e.what());
		return 1;
	}
}
