// SPDX-License-Identifier: GPL-2.0
//
// What every object file of sdctl shares: the options, the verb and object
// tables, and the parsing of command-line words.
//
// An object (sockets, rules, ...) has a table of verbs; the first is the
// default, run when the command line names the object alone.  An object
// whose only verb has an empty name (version, help) takes its arguments
// directly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "error.hpp"

namespace sdctl {

struct Options {
	bool json = false;
};

using Args = std::span<const std::string_view>;

struct Verb {
	std::string_view name;
	int (*run)(const Options &, Args);
	std::string_view synopsis;	// the arguments, for the usage text
	std::string_view help;
};

struct Object {
	std::string_view name;
	std::span<const Verb> verbs;
	std::string_view help;
};

extern const Object sockets_object;
extern const Object listeners_object;
extern const Object rules_object;
extern const Object stats_object;
extern const Object config_object;
extern const Object key_object;

// Usage errors name the object whose usage main() prints.
[[noreturn]] void usage_error(const Object &object, const std::string &msg);

// A verb that takes no arguments.
void no_args(const Object &object, std::string_view verb, Args args);

// An unsigned decimal number up to max; what names it in the error.
std::uint64_t parse_number(const Object &object, std::string_view what, std::string_view word,
			   std::uint64_t max);

// "N" or "N-M" (M may be below N: the kernel judges ranges).
std::pair<std::uint64_t, std::uint64_t> parse_range(const Object &object, std::string_view what,
						    std::string_view word, std::uint64_t max);

} // namespace sdctl
