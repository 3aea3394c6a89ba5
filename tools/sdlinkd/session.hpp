// SPDX-License-Identifier: GPL-2.0
//
// sdlink's authenticated session: one side of a control connection between
// two sdlinkd daemons, over any byte stream.  The session owns no socket:
// the caller sends the frames it makes (start(), seal()) and hands it the
// bytes it receives (feed()), then takes out whole, checked messages
// (next()).
//
//   1. Each side sends its HELLO first (start()), with a fresh random
//      nonce, without waiting for the other's.  HELLOs are not
//      authenticated.
//   2. Receiving the peer's HELLO, each side picks the version (the highest
//      both offer) and derives the session key
//
//        BLAKE2b-256, keyed with the fabric key, of
//        "AF_SD sdlink v1" || HELLO payload of the connecting side
//                          || HELLO payload of the answering side
//
//      (the payloads whole, nonces and versions offered, so that HELLOs
//      changed on the way give the two sides different keys)
//
//      and forgets the fabric key.
//   3. Every later frame ends in the tag
//
//        HMAC-SHA512-256(session key, direction || sequence || header || payload)
//
//      direction the byte 'C' from the connecting side and 'S' from the
//      answering side, sequence the number of frames sent before it that
//      way after the HELLO (big-endian u64, from 0).
//
// A received frame's tag is checked, in constant time, before anything in
// it but its length field is believed.  So a frame forged without the key,
// changed on the way, replayed (from this session, or from another one,
// whose nonces differ), reflected back to its sender (the direction
// differs), reordered or following a dropped one (the sequence differs)
// ends the session with Err::AUTH.  So does the first frame after HELLOs
// that were tampered with, or between daemons that hold different keys:
// they derive different session keys.
//
// Any error but INCOMPLETE and NOT_READY ends the session for good: next()
// repeats it, seal() answers Err::FAILED, and the caller should close the
// connection.  The session neither allocates nor throws; it is not safe to
// use from two threads at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire.hpp"

namespace sdlink {

constexpr std::size_t KEY_MIN = 32;	// fabric key lengths
constexpr std::size_t KEY_MAX = 64;

class Session {
public:
	explicit Session(Role role) noexcept;
	~Session();
	Session(const Session &) = delete;
	Session &operator=(const Session &) = delete;

	// Takes a copy of the fabric key (KEY_MIN to KEY_MAX bytes, else
	// BAD_KEY) and returns this side's HELLO, to send before anything
	// else.  Once per session (UNEXPECTED after that).
	Result<Frame> start(std::span<const std::uint8_t> fabric_key) noexcept;

	// Appends received bytes, and returns how many it took: all of them
	// unless its buffer (one frame of the largest size) is full, when the
	// caller takes messages out with next() and feeds the rest.  0 once
	// the session has failed.
	std::size_t feed(std::span<const std::uint8_t> bytes) noexcept;

	// The next whole message received: the peer's HELLO once, first, then
	// authenticated messages, never a HELLO.  INCOMPLETE until a whole
	// frame is there; NOT_READY before start().
	Result<Message> next() noexcept;

	// The frame carrying msg, tagged, to send.  NOT_READY until a HELLO
	// went each way; UNEXPECTED for a HELLO; BAD_FIELD for a field out
	// of range.  These three leave the session as it was.
	Result<Frame> seal(const Message &msg) noexcept;

	Role role() const noexcept { return role_; }
	// A HELLO went each way: seal() works.
	bool established() const noexcept { return started_ && version_ != 0 && !failed(); }
	bool failed() const noexcept { return err_ != Err::OK; }
	// What ended the session (OK while it lasts).
	Err error() const noexcept { return err_; }
	// The agreed version, 0 before the peer's HELLO.
	std::uint8_t version() const noexcept { return version_; }

private:
	static constexpr std::size_t PREFIX = 9;	// direction, sequence

	Err fail(Err err) noexcept;
	Result<Message> hello_in() noexcept;
	Result<Message> sealed_in() noexcept;
	void consume(std::size_t n) noexcept;

	Role role_;
	bool started_ = false;
	Err err_ = Err::OK;
	std::uint8_t version_ = 0;
	Nonce nonce_{};
	std::array<std::uint8_t, KEY_MAX> fabric_key_{};
	std::size_t fabric_key_len_ = 0;
	std::array<std::uint8_t, 32> key_{};	// the session key
	std::uint64_t tx_seq_ = 0, rx_seq_ = 0;
	// Received bytes from rx_[PREFIX], at most one frame of MAX_FRAME;
	// the PREFIX bytes before a frame take its direction and sequence
	// while its tag is checked.
	std::array<std::uint8_t, PREFIX + MAX_FRAME> rx_{};
	std::size_t rx_len_ = 0;
};

} // namespace sdlink
