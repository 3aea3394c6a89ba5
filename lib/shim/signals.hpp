// Stub until the shim-signals branch lands.
#pragma once
namespace sd::shim::sig {
inline bool pending() noexcept { return false; }
inline void interrupted() noexcept {}
struct Open {
	Open() noexcept {}
	~Open() {}
	Open(const Open &) = delete;
	Open &operator=(const Open &) = delete;
};
} // namespace sd::shim::sig
