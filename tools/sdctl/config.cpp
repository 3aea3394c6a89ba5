// SPDX-License-Identifier: GPL-2.0
//
// sdctl config: the per-namespace settings of af_sd.ko, the files under
// /proc/sys/net/sd/ (net.sd.*).  These are sysctls, not netlink: sdctl reads
// and writes procfs exactly as sysctl(8) would, and the kernel checks every
// value (a rejected write fails with EINVAL and keeps the old value).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "command.hpp"
#include "print.hpp"

namespace sdctl {
namespace {

namespace fs = std::filesystem;

const fs::path dir = "/proc/sys/net/sd";

[[noreturn]] void not_loaded()
{
	throw Error("the af_sd module is not loaded (no " + dir.string() + ")");
}

std::vector<std::string> names()
{
	std::error_code ec;
	std::vector<std::string> out;
	for (const fs::directory_entry &e : fs::directory_iterator(dir, ec))
		if (e.is_regular_file(ec))
			out.push_back(e.path().filename().string());
	if (ec) {
		if (ec == std::errc::no_such_file_or_directory)
			not_loaded();
		throw Error(dir.string() + ": " + ec.message());
	}
	std::sort(out.begin(), out.end());
	return out;
}

std::vector<std::string> read_words(const std::string &name)
{
	std::ifstream in(dir / name);
	if (!in)
		throw Error("net.sd." + name + ": " + std::strerror(errno));
	std::vector<std::string> words;
	std::string w;
	while (in >> w)
		words.push_back(w);
	return words;
}

int show(const Options &opt, Args args)
{
	no_args(config_object, "show", args);
	std::vector<std::pair<std::string, std::vector<std::string>>> settings;
	for (const std::string &name : names())
		settings.emplace_back(name, read_words(name));

	Printer out(opt.json);
	for (const auto &[name, words] : settings) {
		const Key key(name, name);
		if (words.size() == 1)
			out.word(key, words.front());
		else
			out.field(key, words);
	}
	return 0;
}

// "net.sd.NAME" or "NAME", of a file that exists under /proc/sys/net/sd.
std::string setting(std::string_view word)
{
	std::string name(word);
	if (name.starts_with("net.sd."))
		name.erase(0, 7);
	const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
		return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
	});
	const std::vector<std::string> known = names();
	if (!plain || std::find(known.begin(), known.end(), name) == known.end()) {
		std::string list;
		for (const std::string &k : known)
			list += (list.empty() ? "" : ", ") + k;
		usage_error(config_object, "unknown setting '" + std::string(word) + "' (one of: " + list + ")");
	}
	return name;
}

[[noreturn]] void write_failed(const std::string &name, const std::string &value, int err)
{
	if ((err == EACCES || err == EPERM) && name.rfind("ring_size", 0) == 0)
		throw Error("permission denied: net.sd." + name + " = " + value +
			    " needs root (CAP_NET_ADMIN over the network namespace), and"
			    " above 4194304 CAP_NET_ADMIN in the initial user namespace");
	if (err == EACCES || err == EPERM)
		throw Error("permission denied: changing net.sd." + name +
			    " needs root (CAP_NET_ADMIN over the network namespace)");
	if (err == EINVAL)
		throw Error("net.sd." + name + ": invalid value '" + value + "'");
	if (err == ENOENT)
		not_loaded();
	throw Error("net.sd." + name + ": " + std::strerror(err));
}

int set(const Options &, Args args)
{
	if (args.size() < 2)
		usage_error(config_object, "config set needs a NAME and a VALUE");
	const std::string name = setting(args[0]);
	// Several words make one value: "config set port_range 1000 2000".
	std::string value;
	for (const std::string_view w : args.subspan(1))
		value += (value.empty() ? "" : " ") + std::string(w);

	const std::string path = (dir / name).string();
	const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		write_failed(name, value, errno);
	const std::string line = value + "\n";
	const ssize_t n = write(fd, line.data(), line.size());
	const int err = n < 0 ? errno : 0;
	close(fd);
	if (n < 0)
		write_failed(name, value, err);
	if (static_cast<std::size_t>(n) != line.size())
		throw Error("net.sd." + name + ": value too long '" + value + "'");
	return 0;
}

constexpr Verb verbs[] = {
	{"show", show, "", "every setting under /proc/sys/net/sd/ and its value"},
	{"set", set, "NAME VALUE", "write one (net.sd.NAME); the kernel rejects a bad value"},
};

} // namespace

const Object config_object = {"config", verbs, "settings (net.sd.* sysctls)"};

} // namespace sdctl
