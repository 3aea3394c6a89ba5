// SPDX-License-Identifier: GPL-2.0
//
// How sdctl fails: every error is an exception that main() turns into
// "sdctl: MESSAGE" on stderr and an exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace sdctl {

constexpr int EXIT_RUNTIME = 1;
constexpr int EXIT_USAGE = 2;

// A failure that ends sdctl: what() goes to stderr after "sdctl: ", and
// sdctl exits with status().
class Error : public std::runtime_error {
public:
	explicit Error(const std::string &msg, int status = EXIT_RUNTIME)
		: std::runtime_error(msg), status_(status)
	{
	}
	int status() const noexcept { return status_; }

private:
	int status_;
};

struct Object;

// A bad command line (exit status 2).  main() prints the usage of object,
// or of sdctl when it is null, after the message.
class UsageError : public Error {
public:
	explicit UsageError(const std::string &msg, const Object *object = nullptr)
		: Error(msg, EXIT_USAGE), object_(object)
	{
	}
	const Object *object() const noexcept { return object_; }

private:
	const Object *object_;
};

} // namespace sdctl
