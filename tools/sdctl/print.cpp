// SPDX-License-Identifier: GPL-2.0
#include "print.hpp"

#include <cinttypes>

namespace sdctl {

Printer::Printer(bool json, std::FILE *out) noexcept : json_(json), out_(out)
{
}

Printer::~Printer()
{
	if (json_)
		std::fputs(first_ ? "{}\n" : "}\n", out_);
}

void Printer::key(std::string_view k)
{
	if (!json_) {
		std::fprintf(out_, "%.*s ", static_cast<int>(k.size()), k.data());
		return;
	}
	std::fputs(first_ ? "{" : ", ", out_);
	first_ = false;
	quoted(k);
	std::fputs(": ", out_);
}

void Printer::quoted(std::string_view s)
{
	std::fputc('"', out_);
	for (const char c : s) {
		if (c == '"' || c == '\\')
			std::fprintf(out_, "\\%c", c);
		else if (static_cast<unsigned char>(c) < 0x20)
			std::fprintf(out_, "\\u%04x", static_cast<unsigned>(c));
		else
			std::fputc(c, out_);
	}
	std::fputc('"', out_);
}

void Printer::field(std::string_view k, std::string_view value)
{
	key(k);
	if (json_)
		quoted(value);
	else
		std::fprintf(out_, "%.*s\n", static_cast<int>(value.size()), value.data());
}

void Printer::field(std::string_view k, std::uint64_t value)
{
	key(k);
	std::fprintf(out_, json_ ? "%" PRIu64 : "%" PRIu64 "\n", value);
}

} // namespace sdctl
