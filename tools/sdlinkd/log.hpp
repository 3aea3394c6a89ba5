// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's log: one line per event on standard error ("sdlinkd: ..."),
// which systemd puts in the journal.  note() is for what an administrator
// wants to see (the daemon starting and stopping, sessions coming and
// going, failures, limits reached); debug() for every connect and frame,
// with --verbose only.
#pragma once

namespace sdlinkd {

void set_verbose(bool on) noexcept;
bool verbose() noexcept;

[[gnu::format(printf, 1, 2)]] void note(const char *fmt, ...) noexcept;
[[gnu::format(printf, 1, 2)]] void debug(const char *fmt, ...) noexcept;

} // namespace sdlinkd
