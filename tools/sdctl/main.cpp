// SPDX-License-Identifier: GPL-2.0
//
// sdctl: inspect and configure AF_SD (af_sd.ko) over generic netlink.
//
//   sdctl [-j|--json] [VERB [ARGS]]
//
// Exit status: 0 success, 1 failure (module not loaded, netlink error),
// 2 usage error.
#include <sd/sd.h>

#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

constexpr int EXIT_USAGE = 2;

struct Options {
	bool json = false;
};

using Args = std::span<const std::string_view>;

struct Verb {
	std::string_view name;
	int (*run)(const Options &, Args);
	std::string_view help;
};

int cmd_version(const Options &, Args);
int cmd_help(const Options &, Args);

// The first verb is the default.
constexpr Verb verbs[] = {
	{"version", cmd_version, "versions of sdctl, libsd and the loaded af_sd module"},
	{"help", cmd_help, "this help"},
};

void usage(std::FILE *out)
{
	std::fputs("usage: sdctl [OPTIONS] [VERB]\n\nverbs:\n", out);
	for (const Verb &v : verbs)
		std::fprintf(out, "  %-10.*s %.*s%s\n", static_cast<int>(v.name.size()), v.name.data(),
			     static_cast<int>(v.help.size()), v.help.data(),
			     &v == verbs ? " (default)" : "");
	std::fputs("\noptions:\n"
		   "  -j, --json  print JSON instead of text\n"
		   "  -h, --help  print this help\n", out);
}

int usage_error(const char *msg, std::string_view what)
{
	std::fprintf(stderr, "sdctl: %s '%.*s'\n", msg, static_cast<int>(what.size()), what.data());
	usage(stderr);
	return EXIT_USAGE;
}

int cmd_version(const Options &opt, Args args)
{
	if (!args.empty())
		return usage_error("version takes no arguments:", args.front());

	Printer out(opt.json);
	out.field("sdctl", PROJECT_VERSION_STRING);
	out.field("libsd", sd_version());
	const Netlink nl;
	out.field("family", Netlink::family_name());
	out.field("family_id", nl.family_id());
	out.field("family_version", nl.family_version());
	return 0;
}

int cmd_help(const Options &, Args args)
{
	if (!args.empty())
		return usage_error("help takes no arguments:", args.front());
	usage(stdout);
	return 0;
}

int run(std::span<char *const> argv)
{
	Options opt;
	std::vector<std::string_view> words;
	bool options = true;

	// Global options may stand anywhere before "--".
	for (const std::string_view a : argv) {
		if (options && a == "--")
			options = false;
		else if (options && (a == "-j" || a == "--json"))
			opt.json = true;
		else if (options && (a == "-h" || a == "--help"))
			return cmd_help(opt, {});
		else if (options && a.size() > 1 && a.front() == '-')
			return usage_error("unknown option", a);
		else
			words.push_back(a);
	}
	if (words.empty())
		return verbs[0].run(opt, {});
	for (const Verb &v : verbs)
		if (v.name == words.front())
			return v.run(opt, Args(words).subspan(1));
	return usage_error("unknown verb", words.front());
}

} // namespace
} // namespace sdctl

int main(int argc, char **argv)
{
	try {
		return sdctl::run({argv + 1, static_cast<std::size_t>(argc > 0 ? argc - 1 : 0)});
	} catch (const sdctl::Error &e) {
		std::fflush(stdout);
		std::fprintf(stderr, "sdctl: %s\n", e.what());
		return e.status();
	} catch (const std::exception &e) {
		std::fflush(stdout);
		std::fprintf(stderr, "sdctl: %s\n", e.what());
		return 1;
	}
}
