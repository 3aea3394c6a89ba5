// SPDX-License-Identifier: GPL-2.0
//
// The one output path of sdctl: each command prints fields through a
// Printer, which writes "key value" lines or one JSON object.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace sdctl {

class Printer {
public:
	explicit Printer(bool json, std::FILE *out = stdout) noexcept;
	~Printer();
	Printer(const Printer &) = delete;
	Printer &operator=(const Printer &) = delete;

	void field(std::string_view key, std::string_view value);
	void field(std::string_view key, std::uint64_t value);

private:
	void key(std::string_view k);
	void quoted(std::string_view s);

	bool json_;
	bool first_ = true;
	std::FILE *out_;
};

} // namespace sdctl
