// SPDX-License-Identifier: GPL-2.0
//
// A file descriptor that closes itself.
#pragma once

#include <unistd.h>

#include <utility>

namespace sdlinkd {

class Fd {
public:
	Fd() noexcept = default;
	explicit Fd(int fd) noexcept : fd_(fd) {}
	Fd(Fd &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
	Fd &operator=(Fd &&o) noexcept
	{
		if (this != &o)
			reset(std::exchange(o.fd_, -1));
		return *this;
	}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	~Fd() { reset(); }

	int get() const noexcept { return fd_; }
	// Gives the descriptor up to the caller.
	int release() noexcept { return std::exchange(fd_, -1); }
	explicit operator bool() const noexcept { return fd_ >= 0; }
	void reset(int fd = -1) noexcept
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

} // namespace sdlinkd
