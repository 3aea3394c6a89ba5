// SPDX-License-Identifier: GPL-2.0
#include "log.hpp"

#include <cstdarg>
#include <cstdio>

namespace sdlinkd {
namespace {

bool verbose_;

void vlog(const char *fmt, va_list ap) noexcept
{
	// One write per line, so that lines from a restarted daemon or
	// another one in the same journal never interleave.
	char line[1024];
	const int n = std::snprintf(line, sizeof(line), "sdlinkd: ");
	std::vsnprintf(line + n, sizeof(line) - static_cast<std::size_t>(n), fmt, ap);
	std::fprintf(stderr, "%s\n", line);
	std::fflush(stderr);
}

} // namespace

void set_verbose(bool on) noexcept
{
	verbose_ = on;
}

bool verbose() noexcept
{
	return verbose_;
}

void note(const char *fmt, ...) noexcept
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void debug(const char *fmt, ...) noexcept
{
	if (!verbose_)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

} // namespace sdlinkd
