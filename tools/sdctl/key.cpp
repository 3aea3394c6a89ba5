// SPDX-License-Identifier: GPL-2.0
//
// sdctl key: the namespace's fabric key, which the link daemons of the
// hosts that meet share (SD_CMD_KEY_SET, _DEL, _GET).  The
// key is read from a file or from standard input, never from the command
// line (where ps and the shell's history would show it), and the kernel
// never gives it back: show prints its fingerprint.
#include <linux/sd.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "command.hpp"
#include "netlink.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

// Reads all of fd, at most SD_KEY_MAX_LEN + 1 bytes (one more tells that
// it is too long).
std::vector<std::uint8_t> read_key(int fd, const std::string &what)
{
	std::vector<std::uint8_t> key(SD_KEY_MAX_LEN + 1);
	std::size_t got = 0;
	while (got < key.size()) {
		const ssize_t n = read(fd, key.data() + got, key.size() - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			throw Error(what + ": " + std::strerror(errno));
		if (n == 0)
			break;
		got += static_cast<std::size_t>(n);
	}
	key.resize(got);
	return key;
}

int show(const Options &opt, Args args)
{
	no_args(key_object, "show", args);
	const std::optional<KeyFpr> fpr = Netlink().key_fingerprint();

	Printer out(opt.json);
	out.field("key", fpr ? "set" : "none");
	if (fpr) {
		std::string hex;
		for (const std::uint8_t b : *fpr) {
			static constexpr char digits[] = "0123456789abcdef";
			hex += digits[b >> 4];
			hex += digits[b & 15];
		}
		out.field("fingerprint", hex);
	}
	return 0;
}

int set(const Options &, Args args)
{
	if (args.size() != 1)
		usage_error(key_object, "key set takes one FILE, or - for standard input");
	const std::string path(args.front());
	std::vector<std::uint8_t> key;
	if (path == "-") {
		key = read_key(STDIN_FILENO, "standard input");
	} else {
		const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			throw Error(path + ": " + std::strerror(errno));
		try {
			key = read_key(fd, path);
		} catch (...) {
			close(fd);
			throw;
		}
		close(fd);
	}
	if (key.size() < SD_KEY_MIN_LEN || key.size() > SD_KEY_MAX_LEN) {
		const std::string n = key.size() > SD_KEY_MAX_LEN ? "more than " + std::to_string(SD_KEY_MAX_LEN)
								 : std::to_string(key.size());
		std::memset(key.data(), 0, key.size());
		throw Error("key set: the key is " + n + " bytes; it must be " +
			    std::to_string(SD_KEY_MIN_LEN) + " to " + std::to_string(SD_KEY_MAX_LEN) +
			    " bytes");
	}
	try {
		Netlink().key_set(key);
	} catch (...) {
		std::memset(key.data(), 0, key.size());
		throw;
	}
	std::memset(key.data(), 0, key.size());
	return 0;
}

int clear(const Options &, Args args)
{
	no_args(key_object, "clear", args);
	Netlink().key_del();
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "whether the namespace has a fabric key, and its fingerprint"},
	{"set", set, "FILE|-",
	 "set the fabric key: the bytes of FILE, or of standard input with -, 32 to 64 of them"},
	{"clear", clear, "", "forget the fabric key: remote connections then use TCP"},
};

} // namespace

const Object key_object = {"key", verbs, "the fabric key of the link daemons"};

} // namespace sdctl
