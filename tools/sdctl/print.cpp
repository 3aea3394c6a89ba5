// SPDX-License-Identifier: GPL-2.0
#include "print.hpp"

#include <algorithm>
#include <cinttypes>
#include <string>

namespace sdctl {
namespace {

// A word that JSON can carry as a number: an optional minus sign and
// digits, without leading zeros, short enough for any parser's int64.
bool json_integer(std::string_view w)
{
	const std::string_view digits = !w.empty() && w.front() == '-' ? w.substr(1) : w;
	if (digits.empty() || digits.size() > 18)
		return false;
	if (digits.size() > 1 && digits.front() == '0')
		return false;
	return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string join(std::span<const std::string> words, std::string_view sep)
{
	std::string s;
	for (const std::string &w : words) {
		if (!s.empty())
			s += sep;
		s += w;
	}
	return s;
}

} // namespace

Printer::Printer(bool json, std::FILE *out) noexcept : json_(json), out_(out)
{
}

Printer::~Printer()
{
	finish();
}

void Printer::finish()
{
	if (finished_)
		return;
	if (in_list_)
		end_list();
	finished_ = true;
	if (json_) {
		std::fputs(any_object_ ? "}\n" : "{}\n", out_);
		return;
	}
	std::size_t width = 0, value_width = 0;
	for (const Line &l : lines_) {
		if (!(l.flags & Key::BARE))
			width = std::max(width, l.label.size());
		if (l.flags & Key::RIGHT)
			value_width = std::max(value_width, l.value.size());
	}
	for (const Line &l : lines_) {
		if (l.flags & Key::BARE)
			std::fprintf(out_, "%s\n", l.value.c_str());
		else
			std::fprintf(out_, "%-*s  %*s\n", static_cast<int>(width), l.label.c_str(),
				     l.flags & Key::RIGHT ? static_cast<int>(value_width) : 0,
				     l.value.c_str());
	}
	lines_.clear();
}

void Printer::begin_list(std::span<const Key> columns)
{
	in_list_ = true;
	first_row_ = true;
	if (json_) {
		std::fputc('[', out_);
		return;
	}
	columns_.clear();
	for (const Key &k : columns)
		if (!k.text.empty())
			columns_.push_back(k);
	rows_.clear();
}

void Printer::begin_row()
{
	if (json_) {
		std::fputs(first_row_ ? "{" : ",\n {", out_);
		first_row_ = false;
		first_field_ = true;
		return;
	}
	rows_.emplace_back(columns_.size());
	row_ = &rows_.back();
}

void Printer::end_row()
{
	if (json_)
		std::fputc('}', out_);
	row_ = nullptr;
}

void Printer::end_list()
{
	in_list_ = false;
	if (json_) {
		std::fputs("]\n", out_);
		// A list is the whole document: nothing more to close.
		finished_ = true;
		return;
	}
	flush_table();
}

void Printer::flush_table()
{
	std::vector<std::size_t> width(columns_.size());
	for (std::size_t i = 0; i < columns_.size(); i++) {
		width[i] = columns_[i].text.size();
		for (const auto &row : rows_)
			width[i] = std::max(width[i], row[i].size());
	}
	auto line = [&](auto cell) {
		std::string s;
		for (std::size_t i = 0; i < columns_.size(); i++) {
			const std::string_view c = cell(i);
			const std::size_t pad = width[i] - c.size();
			const bool last = i + 1 == columns_.size();
			if (i)
				s += "  ";
			if (columns_[i].flags & Key::RIGHT) {
				s.append(pad, ' ');
				s += c;
			} else {
				s += c;
				if (!last)
					s.append(pad, ' ');
			}
		}
		while (!s.empty() && s.back() == ' ')
			s.pop_back();
		std::fprintf(out_, "%s\n", s.c_str());
	};
	line([&](std::size_t i) { return columns_[i].text; });
	for (const auto &row : rows_)
		line([&](std::size_t i) {
			return row[i].empty() ? std::string_view("-") : std::string_view(row[i]);
		});
	rows_.clear();
}

void Printer::json_key(std::string_view k)
{
	if (!in_list_ && !any_object_) {
		std::fputc('{', out_);
		any_object_ = true;
	} else if (!first_field_) {
		std::fputs(", ", out_);
	}
	first_field_ = false;
	json_string(k);
	std::fputs(": ", out_);
}

void Printer::json_string(std::string_view s)
{
	std::fputc('"', out_);
	for (const char c : s) {
		const auto u = static_cast<unsigned char>(c);
		if (c == '"' || c == '\\')
			std::fprintf(out_, "\\%c", c);
		else if (u < 0x20 || u == 0x7f)
			std::fprintf(out_, "\\u%04x", static_cast<unsigned>(u));
		else
			std::fputc(c, out_);
	}
	std::fputc('"', out_);
}

void Printer::text_cell(const Key &key, std::string value)
{
	if (key.text.empty())
		return;
	// A table cell is one line, and nothing in it reaches the terminal
	// as a control character (a rule's comment is any string).
	for (char &c : value)
		if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
			c = '?';
	if (!in_list_) {
		lines_.push_back({std::string(key.text), std::move(value), key.flags});
		return;
	}
	if (!row_)
		return;
	for (std::size_t i = 0; i < columns_.size(); i++) {
		if (columns_[i].text == key.text) {
			(*row_)[i] = std::move(value);
			return;
		}
	}
}

void Printer::field(const Key &key, std::string_view value)
{
	if (!json_) {
		text_cell(key, std::string(value));
		return;
	}
	if (key.json.empty())
		return;
	json_key(key.json);
	json_string(value);
}

void Printer::field(const Key &key, std::uint64_t value)
{
	if (!json_) {
		text_cell(key, std::to_string(value));
		return;
	}
	if (key.json.empty())
		return;
	json_key(key.json);
	std::fprintf(out_, "%" PRIu64, value);
}

void Printer::word(const Key &key, std::string_view w)
{
	if (!json_) {
		text_cell(key, std::string(w));
		return;
	}
	if (key.json.empty())
		return;
	json_key(key.json);
	if (json_integer(w))
		std::fprintf(out_, "%.*s", static_cast<int>(w.size()), w.data());
	else
		json_string(w);
}

void Printer::field(const Key &key, std::span<const std::string> words, std::string_view sep)
{
	if (!json_) {
		text_cell(key, join(words, sep));
		return;
	}
	if (key.json.empty())
		return;
	json_key(key.json);
	std::fputc('[', out_);
	for (std::size_t i = 0; i < words.size(); i++) {
		if (i)
			std::fputs(", ", out_);
		if (json_integer(words[i]))
			std::fputs(words[i].c_str(), out_);
		else
			json_string(words[i]);
	}
	std::fputc(']', out_);
}

} // namespace sdctl
