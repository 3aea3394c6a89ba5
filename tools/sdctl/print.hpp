// SPDX-License-Identifier: GPL-2.0
//
// The one output path of sdctl.  Every command prints through a Printer,
// which writes either text or one JSON document:
//
//   object (the default)    text: "label  value" lines, labels aligned
//                           JSON: {"key": value, ...}
//   list (begin_list)       text: a table with a header line, like ss
//                           JSON: [{"key": value, ...}, ...]
//
// A field names its JSON key and its text label (or column) in one Key; a
// field with an empty JSON key shows only in text and one with an empty
// label only in JSON.  Commands gather all their data before they print,
// so an error never leaves half a document on stdout.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sdctl {

struct Key {
	enum Flags : unsigned {
		RIGHT = 1U << 0,	// right-align the text column
		BARE = 1U << 1,		// text: the value alone, no label
	};

	constexpr Key(const char *both) noexcept : json(both), text(both) {}
	constexpr Key(std::string_view j, std::string_view t, unsigned f = 0) noexcept
		: json(j), text(t), flags(f)
	{
	}
	static constexpr Key json_only(std::string_view j) noexcept { return {j, {}}; }
	static constexpr Key text_only(std::string_view t, unsigned f = 0) noexcept
	{
		return {{}, t, f};
	}

	std::string_view json;
	std::string_view text;
	unsigned flags = 0;
};

class Printer {
public:
	explicit Printer(bool json, std::FILE *out = stdout) noexcept;
	~Printer();
	Printer(const Printer &) = delete;
	Printer &operator=(const Printer &) = delete;

	bool json() const noexcept { return json_; }

	// A list of rows; columns gives the text table's columns in order
	// (keys with an empty label are ignored there).
	void begin_list(std::span<const Key> columns);
	void begin_row();
	void end_row();
	void end_list();

	void field(const Key &key, std::string_view value);
	void field(const Key &key, const char *value) { field(key, std::string_view(value)); }
	void field(const Key &key, const std::string &value) { field(key, std::string_view(value)); }
	void field(const Key &key, std::uint64_t value);
	void field(const Key &key, std::uint32_t value) { field(key, std::uint64_t{value}); }
	void field(const Key &key, std::uint16_t value) { field(key, std::uint64_t{value}); }
	void field(const Key &key, std::uint8_t value) { field(key, std::uint64_t{value}); }
	// A word: a JSON number if it is an integer, else a string.
	void word(const Key &key, std::string_view w);
	// A list of words: a JSON array (integers as numbers, the rest as
	// strings), in text the words joined by sep.
	void field(const Key &key, std::span<const std::string> words, std::string_view sep = " ");

	// Write what is pending (the text table, the closing brackets).
	void finish();

private:
	void json_key(std::string_view k);
	void json_string(std::string_view s);
	void text_cell(const Key &key, std::string value);
	void flush_table();

	bool json_;
	std::FILE *out_;
	bool finished_ = false;
	bool in_list_ = false;
	bool first_field_ = true;	// JSON: no comma before the next key
	bool first_row_ = true;		// JSON: no comma before the next row
	bool any_object_ = false;	// JSON: the top-level object is open

	// Text: an object's lines, or a list's header and rows.
	std::vector<Key> columns_;
	std::vector<std::vector<std::string>> rows_;
	std::vector<std::string> *row_ = nullptr;
	struct Line {
		std::string label, value;
		unsigned flags;
	};
	std::vector<Line> lines_;
};

} // namespace sdctl
