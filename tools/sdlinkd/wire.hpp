// SPDX-License-Identifier: GPL-2.0
//
// sdlink: what two sdlinkd daemons say to each other over their TCP
// control connection (Documentation/design.rst, decision 8).  Version 1.
// Every integer is big-endian; every field has a fixed size.
//
//   frame   = header payload [tag]
//   header  = magic u32 0x53444c4b ("SDLK") | version u8 | type u8
//             | flags u16 (0) | length u32 (of the payload, <= 4096)   12 bytes
//   tag     = 32 bytes, after every frame but a HELLO (session.hpp)
//
//   type          payload                                             bytes
//   1  HELLO      min_version u8 | max_version u8 | role u8            36
//                 | reserved u8 (0) | nonce [32]
//   2  CONNECT    id u64 | src addr[16] port u16 | dst addr[16]        60
//                 port u16 | uid u32 | gid u32 | send_size u32
//                 | recv_size u32
//   3  ANSWER     id u64 | verdict u8 | endpoint                       64
//   4  CLOSE      id u64 | reason u8                                    9
//   5  PING       cookie u64                                            8
//   6  PONG       cookie u64                                            8
//   7  READY      id u64 | endpoint                                    63
//
//   endpoint      gid[16] | qpn u32 | psn u32 | lid u16 | mtu u8      55
//                 | ring
//   ring          data_addr u64 | data_rkey u32 | data_len u32         28
//                 | index_addr u64 | index_rkey u32
//
//   role          0 connecting, 1 answering
//   verdict       0 ACCEPT, 1 REFUSED, 2 NO_RDMA, 3 BUSY, 4 DENIED,
//                 5 POLICY
//   send_size     bytes of the data area of the connecting program's send
//   recv_size     and receive ring: each a power of two; both 0 when the
//                 connecting side cannot carry the connection (no RDMA
//                 device for that peer), which the answer is then NO_RDMA
//   reason        0 FIN, 1 RESET
//   addr          IPv6, IPv4 as ::ffff:a.b.c.d
//
// A HELLO's header always says version 1, whatever versions its payload
// offers, so that any version can read it; every later frame carries the
// version the two HELLOs agreed on (the highest both offer).  A payload
// has exactly its type's size.  Unknown types, unknown enumeration values,
// nonzero flags or reserved bytes are errors, and an error ends the
// session: there is nothing to skip or ignore.
//
// Nothing here allocates or throws.  Decoding never reads past the bytes
// it is given and trusts no length it reads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

namespace sdlink {

constexpr std::uint32_t MAGIC = 0x53444c4b;	// "SDLK"
constexpr std::uint8_t VERSION_MIN = 1;		// the versions this build speaks
constexpr std::uint8_t VERSION_MAX = 1;
constexpr std::uint8_t HELLO_VERSION = 1;	// in every HELLO's header
constexpr std::size_t HEADER_LEN = 12;
constexpr std::size_t TAG_LEN = 32;
constexpr std::size_t NONCE_LEN = 32;
constexpr std::size_t MAX_PAYLOAD = 4096;	// a longer length field is an error
constexpr std::size_t MAX_FRAME = HEADER_LEN + MAX_PAYLOAD + TAG_LEN;

// Why something failed.  INCOMPLETE alone is no failure: the bytes so far
// are a valid beginning, and more must come.
enum class Err : std::uint8_t {
	OK,
	INCOMPLETE,		// more bytes needed
	BAD_MAGIC,
	BAD_VERSION,		// a header's version is not one we speak (or not 1 in a HELLO,
				// or not the agreed one after it)
	BAD_FLAGS,
	TOO_LONG,		// length field over MAX_PAYLOAD
	BAD_TYPE,		// unknown message type
	BAD_LENGTH,		// length field not the size of its type's payload
	BAD_FIELD,		// a field out of its range (enumeration, reserved, versions)
	NO_SPACE,		// the output buffer is too small
	NO_COMMON_VERSION,	// the HELLOs share no version
	BAD_ROLE,		// the peer claims our own role
	UNEXPECTED,		// a message not allowed here (not a HELLO first, a HELLO later)
	NOT_READY,		// the session cannot do that yet (no HELLO each way)
	AUTH,			// a tag did not verify
	BAD_KEY,		// a fabric key not 32 to 64 bytes long
	CRYPTO,			// libsodium could not initialise
	EXHAUSTED,		// 2^64 messages one way: the sequence would wrap
	FAILED,			// the session already ended at an earlier error
};

// A short English description, for logs ("authentication failed").
const char *describe(Err err) noexcept;

// A value or why there is none.
template <typename T>
class [[nodiscard]] Result {
public:
	Result(const T &value) noexcept : value_(value) {}
	Result(Err err) noexcept : err_(err) {}

	bool ok() const noexcept { return err_ == Err::OK; }
	explicit operator bool() const noexcept { return ok(); }
	Err error() const noexcept { return err_; }
	// Only when ok().
	const T &value() const noexcept { return value_; }
	const T &operator*() const noexcept { return value_; }
	const T *operator->() const noexcept { return &value_; }

private:
	T value_{};
	Err err_ = Err::OK;
};

enum class Type : std::uint8_t { HELLO = 1, CONNECT, ANSWER, CLOSE, PING, PONG, READY };
enum class Role : std::uint8_t { CONNECTING = 0, ANSWERING = 1 };
// REFUSED: no AF_SD listener there (the program goes over TCP); DENIED:
// a rule there refuses the connect (ECONNREFUSED for the program);
// POLICY: a connect rule there says TCP.
enum class Verdict : std::uint8_t {
	ACCEPT = 0, REFUSED = 1, NO_RDMA = 2, BUSY = 3, DENIED = 4, POLICY = 5,
};
enum class Reason : std::uint8_t { FIN = 0, RESET = 1 };

using Nonce = std::array<std::uint8_t, NONCE_LEN>;
using In6 = std::array<std::uint8_t, 16>;

struct Hello {
	std::uint8_t min_version = VERSION_MIN;
	std::uint8_t max_version = VERSION_MAX;
	Role role = Role::CONNECTING;
	std::uint8_t reserved = 0;
	Nonce nonce{};
	bool operator==(const Hello &) const = default;
};

struct SockAddr {
	In6 addr{};
	std::uint16_t port = 0;
	bool operator==(const SockAddr &) const = default;
};

// Where the peer's RDMA writes go: the data ring and its index word.
struct Ring {
	std::uint64_t data_addr = 0;
	std::uint32_t data_rkey = 0;
	std::uint32_t data_len = 0;
	std::uint64_t index_addr = 0;
	std::uint32_t index_rkey = 0;
	bool operator==(const Ring &) const = default;
};

// One side of a queue pair.
struct Endpoint {
	std::array<std::uint8_t, 16> gid{};
	std::uint32_t qpn = 0;
	std::uint32_t psn = 0;
	std::uint16_t lid = 0;
	std::uint8_t mtu = 0;		// enum ibv_mtu, not checked here
	Ring ring;
	bool operator==(const Endpoint &) const = default;
};

struct Connect {
	std::uint64_t id = 0;
	SockAddr src, dst;
	std::uint32_t uid = 0;
	std::uint32_t gid = 0;
	// The connecting program's rings, which the answering side's mirror;
	// both 0: the connecting side has no data path (answer NO_RDMA).
	std::uint32_t send_size = 0;
	std::uint32_t recv_size = 0;
	bool operator==(const Connect &) const = default;
};

struct Answer {
	std::uint64_t id = 0;
	Verdict verdict = Verdict::ACCEPT;
	Endpoint endpoint;		// meaningful for ACCEPT only
	bool operator==(const Answer &) const = default;
};

// The connecting side's half, once its end of the connection exists
// (after the peer's ACCEPT): both sides then connect their queue pairs.
struct Ready {
	std::uint64_t id = 0;
	Endpoint endpoint;
	bool operator==(const Ready &) const = default;
};

struct Close {
	std::uint64_t id = 0;
	Reason reason = Reason::FIN;
	bool operator==(const Close &) const = default;
};

struct Ping {
	std::uint64_t cookie = 0;
	bool operator==(const Ping &) const = default;
};

struct Pong {
	std::uint64_t cookie = 0;
	bool operator==(const Pong &) const = default;
};

// In Type order: a message's type is its index + 1.
using Message = std::variant<Hello, Connect, Answer, Close, Ping, Pong, Ready>;

Type type_of(const Message &msg) noexcept;

// The payload size of each type, and the largest (a frame encode_frame()
// can write is at most HEADER_LEN + MAX_BODY + TAG_LEN).
constexpr std::size_t payload_len(Type type) noexcept
{
	switch (type) {
	case Type::HELLO: return 36;
	case Type::CONNECT: return 60;
	case Type::ANSWER: return 64;
	case Type::READY: return 63;
	case Type::CLOSE: return 9;
	case Type::PING:
	case Type::PONG: return 8;
	}
	return 0;
}
constexpr std::size_t MAX_BODY = 64;

struct Header {
	std::uint8_t version = 0;
	Type type = Type::HELLO;
	std::uint32_t length = 0;	// of the payload
};

// The header at the start of bytes, every field checked: INCOMPLETE when
// fewer than HEADER_LEN bytes, else BAD_MAGIC, BAD_VERSION, BAD_FLAGS,
// BAD_TYPE, TOO_LONG or BAD_LENGTH.
Result<Header> decode_header(std::span<const std::uint8_t> bytes) noexcept;

// The length field alone, for a frame whose tag must be checked before any
// other field is believed: INCOMPLETE or TOO_LONG.
Result<std::uint32_t> peek_length(std::span<const std::uint8_t> bytes) noexcept;

// A whole frame at the start of bytes, as decode_header() checks it, with
// a tag unless it is a HELLO: INCOMPLETE until all of it is there.
struct FrameView {
	Header header;
	std::span<const std::uint8_t> payload;
	std::span<const std::uint8_t> tag;	// empty for a HELLO
	std::size_t size = 0;			// header + payload + tag
};
Result<FrameView> split_frame(std::span<const std::uint8_t> bytes) noexcept;

// A payload of the given type: BAD_LENGTH unless it has exactly the
// type's size, BAD_FIELD for a value out of range, BAD_TYPE for an
// unknown type.
Result<Message> decode_payload(Type type, std::span<const std::uint8_t> payload) noexcept;

// Writes msg's header (with this version) and payload to out, and returns
// how many bytes that took; a HELLO is then complete, any other message
// needs the session's tag after it.  BAD_FIELD for a message that
// decode_payload() would reject, NO_SPACE when out is too small.
Result<std::size_t> encode_frame(const Message &msg, std::uint8_t version,
				 std::span<std::uint8_t> out) noexcept;

// The version two HELLOs agree on: the highest both offer.
std::optional<std::uint8_t> pick_version(const Hello &a, const Hello &b) noexcept;

// An encoded frame, ready to send.
struct Frame {
	std::array<std::uint8_t, HEADER_LEN + MAX_BODY + TAG_LEN> buf{};
	std::size_t len = 0;
	std::span<const std::uint8_t> bytes() const noexcept { return {buf.data(), len}; }
};

} // namespace sdlink
