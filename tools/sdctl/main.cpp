// SPDX-License-Identifier: GPL-2.0
//
// sdctl: inspect and configure AF_SD (af_sd.ko) over generic netlink.
//
//   sdctl [-j|--json] [OBJECT [VERB] [ARGS...]]
//
// Objects live one per file (sockets.cpp, listeners.cpp, rules.cpp,
// stats.cpp, config.cpp, key.cpp), each with a verb table whose first verb is the
// default; version and help are here.  With no object, sdctl shows the
// sockets.
//
// Exit status: 0 success, 1 failure (module not loaded, netlink or kernel
// error, permission), 2 usage error.
#include <sd/sd.h>

#include <charconv>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {

extern const Object version_object;
extern const Object help_object;

namespace {

// In the order the usage text lists them; the first is the default.
const Object *const objects[] = {
	&sockets_object, &listeners_object, &rules_object, &stats_object,
	&config_object, &key_object, &version_object, &help_object,
};

bool bare(const Object &o)
{
	return o.verbs.size() == 1 && o.verbs.front().name.empty();
}

void object_usage(std::FILE *out, const Object &o)
{
	for (const Verb &v : o.verbs) {
		std::string line = "  sdctl " + std::string(o.name);
		if (!v.name.empty())
			line += &v == o.verbs.data() ? " [" + std::string(v.name) + "]" : " " + std::string(v.name);
		if (!v.synopsis.empty())
			line += " " + std::string(v.synopsis);
		std::fprintf(out, "%s\n      %.*s\n", line.c_str(), static_cast<int>(v.help.size()),
			     v.help.data());
	}
}

void usage(std::FILE *out, const Object *only = nullptr)
{
	std::fputs("usage: sdctl [-j|--json] [OBJECT [VERB] [ARGS...]]\n", out);
	if (only) {
		std::fputc('\n', out);
		object_usage(out, *only);
		return;
	}
	std::fputs("\nWith no object, sdctl shows the sockets.  The first verb of an object is\n"
		   "its default.\n\n",
		   out);
	for (const Object *o : objects)
		object_usage(out, *o);
	std::fputs("\noptions:\n"
		   "  -j, --json  print JSON instead of text (read commands and rules add)\n"
		   "  -h, --help  print this help\n"
		   "\nexit status: 0 success, 1 failure, 2 usage error\n",
		   out);
}

// An exact name, or a prefix of exactly one name.
template <typename T, typename Name>
const T *lookup(std::span<const T> table, std::string_view word, Name name)
{
	const T *found = nullptr;
	int prefixed = 0;
	for (const T &t : table) {
		if (name(t) == word)
			return &t;
		if (!word.empty() && name(t).starts_with(word)) {
			found = &t;
			prefixed++;
		}
	}
	return prefixed == 1 ? found : nullptr;
}

// The names of the SD_FEATURE_* bits set in mask, lowest first.
std::vector<std::string> feature_names(std::uint64_t mask)
{
	static constexpr const char *names[] = {
		// Bits 3 to 5 are retired (<linux/sd.h>): a module never sets them.
		"redirect", "zerocopy", "tcp_inq", nullptr, nullptr, nullptr, "link_daemon",
	};
	static_assert(std::size(names) == __SD_FEATURE_MAX, "a name for every SD_FEATURE_*");
	std::vector<std::string> out;
	for (unsigned bit = 0; bit < 64; bit++) {
		if (!(mask & (std::uint64_t{1} << bit)))
			continue;
		out.emplace_back(bit < std::size(names) && names[bit] ? names[bit]
								   : "feature_" + std::to_string(bit));
	}
	return out;
}

int cmd_version(const Options &opt, Args args)
{
	if (!args.empty())
		usage_error(version_object, "version takes no arguments: '" + std::string(args.front()) + "'");

	// The family is asked first, so that a missing module leaves a
	// complete document (the user-space versions) and exit status 1.
	std::optional<Netlink> nl;
	std::optional<Features> features;
	std::string error;
	try {
		nl.emplace();
		features = nl->features();
	} catch (const Error &e) {
		error = e.what();
	}
	{
		Printer out(opt.json);
		out.field("sdctl", PROJECT_VERSION_STRING);
		out.field("libsd", sd_version());
		if (nl) {
			out.field("family", Netlink::family_name());
			out.field("family_id", nl->family_id());
			out.field("family_version", nl->family_version());
		}
		if (features) {
			out.field("module", features->module);
			out.field("features", feature_names(features->mask));
		}
	}
	if (!error.empty())
		throw Error(error);
	return 0;
}

int cmd_help(const Options &, Args args)
{
	if (args.size() > 1)
		usage_error(help_object, "help takes at most one object");
	if (args.empty()) {
		usage(stdout);
		return 0;
	}
	const Object *const *o = lookup(std::span<const Object *const>(objects), args.front(),
					[](const Object *x) { return x->name; });
	if (!o)
		usage_error(help_object, "unknown object '" + std::string(args.front()) + "'");
	usage(stdout, *o);
	return 0;
}

constexpr Verb version_verbs[] = {
	{"", cmd_version, "", "versions of sdctl, libsd and the loaded module's netlink family"},
};
constexpr Verb help_verbs[] = {
	{"", cmd_help, "[OBJECT]", "this help, or one object's"},
};

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
		else if (options && a.size() > 1 && a.front() == '-' &&
			 !(a[1] >= '0' && a[1] <= '9'))
			throw UsageError("unknown option '" + std::string(a) + "'");
		else
			words.push_back(a);
	}
	if (words.empty())
		return objects[0]->verbs.front().run(opt, {});

	const Object *const *found = lookup(std::span<const Object *const>(objects), words.front(),
					    [](const Object *x) { return x->name; });
	if (!found)
		throw UsageError("unknown object '" + std::string(words.front()) + "'");
	const Object &obj = **found;
	const Args rest = Args(words).subspan(1);
	if (bare(obj))
		return obj.verbs.front().run(opt, rest);
	if (rest.empty())
		return obj.verbs.front().run(opt, rest);
	const Verb *verb = lookup(obj.verbs, rest.front(), [](const Verb &v) { return v.name; });
	if (!verb)
		usage_error(obj, "unknown verb '" + std::string(rest.front()) + "' for " + std::string(obj.name));
	return verb->run(opt, rest.subspan(1));
}

} // namespace

const Object version_object = {"version", version_verbs, "versions"};
const Object help_object = {"help", help_verbs, "help"};

void usage_error(const Object &object, const std::string &msg)
{
	throw UsageError(msg, &object);
}

void no_args(const Object &object, std::string_view verb, Args args)
{
	if (!args.empty())
		usage_error(object, std::string(object.name) + " " + std::string(verb) +
					    " takes no arguments: '" + std::string(args.front()) + "'");
}

std::uint64_t parse_number(const Object &object, std::string_view what, std::string_view word,
			   std::uint64_t max)
{
	std::uint64_t v = 0;
	const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
	if (word.empty() || ec != std::errc() || end != word.data() + word.size() || v > max)
		usage_error(object, "bad " + std::string(what) + " '" + std::string(word) + "' (0.." +
					    std::to_string(max) + ")");
	return v;
}

std::pair<std::uint64_t, std::uint64_t> parse_range(const Object &object, std::string_view what,
						    std::string_view word, std::uint64_t max)
{
	const std::size_t dash = word.find('-');
	if (dash == std::string_view::npos) {
		const std::uint64_t v = parse_number(object, what, word, max);
		return {v, v};
	}
	return {parse_number(object, what, word.substr(0, dash), max),
		parse_number(object, what, word.substr(dash + 1), max)};
}

} // namespace sdctl

int main(int argc, char **argv)
{
	try {
		return sdctl::run({argv + 1, static_cast<std::size_t>(argc > 0 ? argc - 1 : 0)});
	} catch (const sdctl::UsageError &e) {
		std::fflush(stdout);
		std::fprintf(stderr, "sdctl: %s\n", e.what());
		if (e.object())
			sdctl::usage(stderr, e.object());
		else
			std::fputs("run 'sdctl help' for the usage\n", stderr);
		return e.status();
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
