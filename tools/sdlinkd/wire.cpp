// SPDX-License-Identifier: GPL-2.0
//
// The sdlink wire format (wire.hpp).  Each payload's fields are listed once,
// in walk(), which the encoder, the decoder and the compile-time size check
// all go through, so the three cannot disagree.
#include "wire.hpp"

#include <algorithm>
#include <concepts>
#include <cstring>
#include <type_traits>

namespace sdlink {
namespace {

template <typename T, typename U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

template <typename IO, Is<Hello> M>
constexpr void walk(IO &io, M &m)
{
	io(m.min_version);
	io(m.max_version);
	io(m.role);
	io(m.reserved);
	io(m.nonce);
}

template <typename IO, Is<SockAddr> M>
constexpr void walk(IO &io, M &m)
{
	io(m.addr);
	io(m.port);
}

template <typename IO, Is<Ring> M>
constexpr void walk(IO &io, M &m)
{
	io(m.data_addr);
	io(m.data_rkey);
	io(m.data_len);
	io(m.index_addr);
	io(m.index_rkey);
}

template <typename IO, Is<Endpoint> M>
constexpr void walk(IO &io, M &m)
{
	io(m.gid);
	io(m.qpn);
	io(m.psn);
	io(m.lid);
	io(m.mtu);
	walk(io, m.ring);
}

template <typename IO, Is<Connect> M>
constexpr void walk(IO &io, M &m)
{
	io(m.id);
	walk(io, m.src);
	walk(io, m.dst);
	io(m.uid);
	io(m.gid);
	io(m.send_size);
	io(m.recv_size);
}

template <typename IO, Is<Ready> M>
constexpr void walk(IO &io, M &m)
{
	io(m.id);
	walk(io, m.endpoint);
}

template <typename IO, Is<Answer> M>
constexpr void walk(IO &io, M &m)
{
	io(m.id);
	io(m.verdict);
	walk(io, m.endpoint);
}

template <typename IO, Is<Close> M>
constexpr void walk(IO &io, M &m)
{
	io(m.id);
	io(m.reason);
}

template <typename IO, typename M>
	requires Is<M, Ping> || Is<M, Pong>
constexpr void walk(IO &io, M &m)
{
	io(m.cookie);
}

// Counts the bytes walk() visits.
struct Sizer {
	std::size_t n = 0;
	template <typename V>
	constexpr void operator()(const V &)
	{
		n += sizeof(V);
	}
};

template <typename M>
constexpr std::size_t walked_size()
{
	Sizer s;
	M m{};
	walk(s, m);
	return s.n;
}

static_assert(walked_size<Hello>() == payload_len(Type::HELLO));
static_assert(walked_size<Connect>() == payload_len(Type::CONNECT));
static_assert(walked_size<Answer>() == payload_len(Type::ANSWER));
static_assert(walked_size<Close>() == payload_len(Type::CLOSE));
static_assert(walked_size<Ping>() == payload_len(Type::PING));
static_assert(walked_size<Pong>() == payload_len(Type::PONG));
static_assert(walked_size<Ready>() == payload_len(Type::READY));
static_assert(walked_size<Answer>() == MAX_BODY);
static_assert(walked_size<Hello>() == 4 + NONCE_LEN);

// Appends big-endian fields to out; once one does not fit, nothing more
// is written and ok() is false.
class Writer {
public:
	explicit Writer(std::span<std::uint8_t> out) noexcept : out_(out) {}

	void operator()(std::uint8_t v) noexcept { put(&v, 1); }
	void operator()(std::uint16_t v) noexcept { be(v); }
	void operator()(std::uint32_t v) noexcept { be(v); }
	void operator()(std::uint64_t v) noexcept { be(v); }
	template <std::size_t N>
	void operator()(const std::array<std::uint8_t, N> &a) noexcept
	{
		put(a.data(), N);
	}
	template <typename E>
		requires std::is_enum_v<E>
	void operator()(E e) noexcept
	{
		(*this)(static_cast<std::underlying_type_t<E>>(e));
	}

	bool ok() const noexcept { return ok_; }
	std::size_t size() const noexcept { return at_; }

private:
	template <typename U>
	void be(U v) noexcept
	{
		std::uint8_t b[sizeof(U)];
		for (std::size_t i = 0; i < sizeof(U); i++)
			b[i] = static_cast<std::uint8_t>(v >> (8 * (sizeof(U) - 1 - i)));
		put(b, sizeof(U));
	}
	void put(const std::uint8_t *p, std::size_t n) noexcept
	{
		if (!ok_ || out_.size() - at_ < n) {
			ok_ = false;
			return;
		}
		std::memcpy(out_.data() + at_, p, n);
		at_ += n;
	}

	std::span<std::uint8_t> out_;
	std::size_t at_ = 0;
	bool ok_ = true;
};

// Reads big-endian fields from in; once one is not there, every later
// field reads as zero and ok() is false.
class Reader {
public:
	explicit Reader(std::span<const std::uint8_t> in) noexcept : in_(in) {}

	void operator()(std::uint8_t &v) noexcept { get(&v, 1); }
	void operator()(std::uint16_t &v) noexcept { be(v); }
	void operator()(std::uint32_t &v) noexcept { be(v); }
	void operator()(std::uint64_t &v) noexcept { be(v); }
	template <std::size_t N>
	void operator()(std::array<std::uint8_t, N> &a) noexcept
	{
		get(a.data(), N);
	}
	// Any value of the underlying type; valid() says whether it is one
	// of the enumerators.
	template <typename E>
		requires std::is_enum_v<E>
	void operator()(E &e) noexcept
	{
		std::underlying_type_t<E> v;
		(*this)(v);
		e = static_cast<E>(v);
	}

	// Every byte read, and no more.
	bool done() const noexcept { return ok_ && at_ == in_.size(); }

private:
	template <typename U>
	void be(U &v) noexcept
	{
		std::uint8_t b[sizeof(U)];
		get(b, sizeof(U));
		v = 0;
		for (std::size_t i = 0; i < sizeof(U); i++)
			v = static_cast<U>(static_cast<U>(v << 8) | b[i]);
	}
	void get(std::uint8_t *p, std::size_t n) noexcept
	{
		if (!ok_ || in_.size() - at_ < n) {
			ok_ = false;
			std::memset(p, 0, n);
			return;
		}
		std::memcpy(p, in_.data() + at_, n);
		at_ += n;
	}

	std::span<const std::uint8_t> in_;
	std::size_t at_ = 0;
	bool ok_ = true;
};

std::uint16_t get16(const std::uint8_t *p) noexcept
{
	return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

std::uint32_t get32(const std::uint8_t *p) noexcept
{
	return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

bool known_type(std::uint8_t t) noexcept
{
	return t >= static_cast<std::uint8_t>(Type::HELLO) && t <= static_cast<std::uint8_t>(Type::READY);
}

// Whether every field is in range: what decode_payload() accepts and
// encode_frame() writes.
bool valid(const Message &msg) noexcept
{
	if (const auto *h = std::get_if<Hello>(&msg))
		return h->min_version >= 1 && h->min_version <= h->max_version &&
		       (h->role == Role::CONNECTING || h->role == Role::ANSWERING) && h->reserved == 0;
	if (const auto *a = std::get_if<Answer>(&msg))
		return static_cast<std::uint8_t>(a->verdict) <= static_cast<std::uint8_t>(Verdict::POLICY);
	if (const auto *c = std::get_if<Connect>(&msg)) {
		// Both 0: the connecting side has no data path.
		auto pow2 = [](std::uint32_t v) { return v && !(v & (v - 1)); };
		return (pow2(c->send_size) && pow2(c->recv_size)) || (!c->send_size && !c->recv_size);
	}
	if (const auto *c = std::get_if<Close>(&msg))
		return c->reason == Reason::FIN || c->reason == Reason::RESET;
	return true;
}

template <typename M>
Result<Message> read_as(std::span<const std::uint8_t> payload) noexcept
{
	M m{};
	Reader r(payload);
	walk(r, m);
	if (!r.done())
		return Err::BAD_LENGTH;
	const Message msg = m;
	if (!valid(msg))
		return Err::BAD_FIELD;
	return msg;
}

} // namespace

const char *describe(Err err) noexcept
{
	switch (err) {
	case Err::OK: return "no error";
	case Err::INCOMPLETE: return "incomplete frame";
	case Err::BAD_MAGIC: return "bad magic";
	case Err::BAD_VERSION: return "bad version";
	case Err::BAD_FLAGS: return "unknown flags";
	case Err::TOO_LONG: return "payload too long";
	case Err::BAD_TYPE: return "unknown message type";
	case Err::BAD_LENGTH: return "wrong payload length for its type";
	case Err::BAD_FIELD: return "field out of range";
	case Err::NO_SPACE: return "output buffer too small";
	case Err::NO_COMMON_VERSION: return "no common version";
	case Err::BAD_ROLE: return "peer claims our role";
	case Err::UNEXPECTED: return "unexpected message";
	case Err::NOT_READY: return "session not established";
	case Err::AUTH: return "authentication failed";
	case Err::BAD_KEY: return "fabric key not 32 to 64 bytes";
	case Err::CRYPTO: return "libsodium initialisation failed";
	case Err::EXHAUSTED: return "message sequence exhausted";
	case Err::FAILED: return "session failed earlier";
	}
	return "unknown error";
}

Type type_of(const Message &msg) noexcept
{
	return static_cast<Type>(msg.index() + 1);
}

Result<Header> decode_header(std::span<const std::uint8_t> bytes) noexcept
{
	if (bytes.size() < HEADER_LEN)
		return Err::INCOMPLETE;
	const std::uint8_t *p = bytes.data();
	if (get32(p) != MAGIC)
		return Err::BAD_MAGIC;
	const std::uint8_t version = p[4], type = p[5];
	if (version < VERSION_MIN || version > VERSION_MAX)
		return Err::BAD_VERSION;
	if (get16(p + 6) != 0)
		return Err::BAD_FLAGS;
	if (!known_type(type))
		return Err::BAD_TYPE;
	const Header h{version, static_cast<Type>(type), get32(p + 8)};
	if (h.type == Type::HELLO && version != HELLO_VERSION)
		return Err::BAD_VERSION;
	if (h.length > MAX_PAYLOAD)
		return Err::TOO_LONG;
	if (h.length != payload_len(h.type))
		return Err::BAD_LENGTH;
	return h;
}

Result<std::uint32_t> peek_length(std::span<const std::uint8_t> bytes) noexcept
{
	if (bytes.size() < HEADER_LEN)
		return Err::INCOMPLETE;
	const std::uint32_t len = get32(bytes.data() + 8);
	if (len > MAX_PAYLOAD)
		return Err::TOO_LONG;
	return len;
}

Result<FrameView> split_frame(std::span<const std::uint8_t> bytes) noexcept
{
	const Result<Header> h = decode_header(bytes);
	if (!h)
		return h.error();
	const std::size_t tag = h->type == Type::HELLO ? 0 : TAG_LEN;
	const std::size_t size = HEADER_LEN + h->length + tag;
	if (bytes.size() < size)
		return Err::INCOMPLETE;
	return FrameView{*h, bytes.subspan(HEADER_LEN, h->length), bytes.subspan(HEADER_LEN + h->length, tag),
			 size};
}

Result<Message> decode_payload(Type type, std::span<const std::uint8_t> payload) noexcept
{
	if (!known_type(static_cast<std::uint8_t>(type)))
		return Err::BAD_TYPE;
	if (payload.size() != payload_len(type))
		return Err::BAD_LENGTH;
	switch (type) {
	case Type::HELLO: return read_as<Hello>(payload);
	case Type::CONNECT: return read_as<Connect>(payload);
	case Type::ANSWER: return read_as<Answer>(payload);
	case Type::CLOSE: return read_as<Close>(payload);
	case Type::PING: return read_as<Ping>(payload);
	case Type::PONG: return read_as<Pong>(payload);
	case Type::READY: return read_as<Ready>(payload);
	}
	return Err::BAD_TYPE;
}

Result<std::size_t> encode_frame(const Message &msg, std::uint8_t version,
				 std::span<std::uint8_t> out) noexcept
{
	const Type type = type_of(msg);
	if (version < VERSION_MIN || version > VERSION_MAX)
		return Err::BAD_VERSION;
	if (type == Type::HELLO && version != HELLO_VERSION)
		return Err::BAD_VERSION;
	if (!valid(msg))
		return Err::BAD_FIELD;
	const std::size_t len = payload_len(type);
	if (out.size() < HEADER_LEN + len)
		return Err::NO_SPACE;

	Writer w(out);
	w(MAGIC);
	w(version);
	w(type);
	w(std::uint16_t{0});
	w(static_cast<std::uint32_t>(len));
	std::visit([&w](const auto &m) { walk(w, m); }, msg);
	if (!w.ok() || w.size() != HEADER_LEN + len)
		return Err::NO_SPACE;	// cannot happen: sizes are checked above
	return w.size();
}

std::optional<std::uint8_t> pick_version(const Hello &a, const Hello &b) noexcept
{
	const std::uint8_t lo = std::max({a.min_version, b.min_version, VERSION_MIN});
	const std::uint8_t hi = std::min(a.max_version, b.max_version);
	if (lo > hi)
		return std::nullopt;
	return hi;
}

} // namespace sdlink
