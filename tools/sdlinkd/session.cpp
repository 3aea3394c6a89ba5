// SPDX-License-Identifier: GPL-2.0
//
// sdlink's authenticated session (session.hpp).  The primitives are
// libsodium's, named explicitly (crypto_generichash_blake2b,
// crypto_auth_hmacsha512256) rather than through its defaults, so that the
// wire format cannot change with a libsodium release.
#include "session.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace sdlink {
namespace {

static_assert(TAG_LEN == crypto_auth_hmacsha512256_BYTES);
static_assert(32 == crypto_auth_hmacsha512256_KEYBYTES);
static_assert(KEY_MIN >= crypto_generichash_blake2b_KEYBYTES_MIN);
static_assert(KEY_MAX <= crypto_generichash_blake2b_KEYBYTES_MAX);

constexpr char LABEL[] = "AF_SD sdlink v1";	// without its NUL on the wire
constexpr std::size_t LABEL_LEN = sizeof(LABEL) - 1;

bool sodium_ready() noexcept
{
	// sodium_init() may be called again and from several threads; this
	// only saves the calls.
	static const bool ready = sodium_init() >= 0;
	return ready;
}

std::uint8_t direction(Role from) noexcept
{
	return from == Role::CONNECTING ? 'C' : 'S';
}

void put_prefix(std::uint8_t *p, Role from, std::uint64_t seq) noexcept
{
	p[0] = direction(from);
	for (int i = 0; i < 8; i++)
		p[1 + i] = static_cast<std::uint8_t>(seq >> (56 - 8 * i));
}

Role other(Role r) noexcept
{
	return r == Role::CONNECTING ? Role::ANSWERING : Role::CONNECTING;
}

} // namespace

Session::Session(Role role) noexcept : role_(role) {}

Session::~Session()
{
	sodium_memzero(fabric_key_.data(), fabric_key_.size());
	sodium_memzero(key_.data(), key_.size());
}

Err Session::fail(Err err) noexcept
{
	if (err_ == Err::OK)
		err_ = err;
	sodium_memzero(fabric_key_.data(), fabric_key_.size());
	sodium_memzero(key_.data(), key_.size());
	fabric_key_len_ = 0;
	return err_;
}

Result<Frame> Session::start(std::span<const std::uint8_t> fabric_key) noexcept
{
	if (failed())
		return Err::FAILED;
	if (started_)
		return Err::UNEXPECTED;
	if (!sodium_ready())
		return fail(Err::CRYPTO);
	if (fabric_key.size() < KEY_MIN || fabric_key.size() > KEY_MAX)
		return fail(Err::BAD_KEY);
	std::memcpy(fabric_key_.data(), fabric_key.data(), fabric_key.size());
	fabric_key_len_ = fabric_key.size();
	randombytes_buf(nonce_.data(), nonce_.size());

	const Hello hello{VERSION_MIN, VERSION_MAX, role_, 0, nonce_};
	Frame f;
	const Result<std::size_t> n = encode_frame(hello, HELLO_VERSION, f.buf);
	if (!n)
		return fail(n.error());
	f.len = *n;
	started_ = true;
	return f;
}

std::size_t Session::feed(std::span<const std::uint8_t> bytes) noexcept
{
	if (failed())
		return 0;
	const std::size_t n = std::min(bytes.size(), MAX_FRAME - rx_len_);
	if (n)
		std::memcpy(rx_.data() + PREFIX + rx_len_, bytes.data(), n);
	rx_len_ += n;
	return n;
}

void Session::consume(std::size_t n) noexcept
{
	std::memmove(rx_.data() + PREFIX, rx_.data() + PREFIX + n, rx_len_ - n);
	rx_len_ -= n;
}

Result<Message> Session::next() noexcept
{
	if (failed())
		return err_;
	if (!started_)
		return Err::NOT_READY;
	return version_ == 0 ? hello_in() : sealed_in();
}

// The peer's HELLO, unauthenticated: every field is checked as it is.
Result<Message> Session::hello_in() noexcept
{
	const std::span<const std::uint8_t> bytes{rx_.data() + PREFIX, rx_len_};
	const Result<Header> h = decode_header(bytes);
	if (h.error() == Err::INCOMPLETE)
		return Err::INCOMPLETE;
	if (!h)
		return fail(h.error());
	if (h->type != Type::HELLO)
		return fail(Err::UNEXPECTED);
	const Result<FrameView> f = split_frame(bytes);
	if (f.error() == Err::INCOMPLETE)
		return Err::INCOMPLETE;
	if (!f)
		return fail(f.error());
	const Result<Message> m = decode_payload(Type::HELLO, f->payload);
	if (!m)
		return fail(m.error());
	const Hello &peer = *std::get_if<Hello>(&*m);
	if (peer.role == role_)
		return fail(Err::BAD_ROLE);
	const Hello ours{VERSION_MIN, VERSION_MAX, role_, 0, nonce_};
	const std::optional<std::uint8_t> v = pick_version(ours, peer);
	if (!v)
		return fail(Err::NO_COMMON_VERSION);

	// Both whole HELLO payloads, not only the nonces: versions offered
	// and changed on the way make the keys differ, so a downgrade fails
	// at the first authenticated frame.
	constexpr std::size_t HELLO_LEN = payload_len(Type::HELLO);
	Frame mine;
	const Result<std::size_t> n = encode_frame(ours, HELLO_VERSION, mine.buf);
	if (!n || *n != HEADER_LEN + HELLO_LEN || f->payload.size() != HELLO_LEN)
		return fail(Err::FAILED);
	const std::span<const std::uint8_t> our_payload{mine.buf.data() + HEADER_LEN, HELLO_LEN};
	const bool connecting = role_ == Role::CONNECTING;
	std::array<std::uint8_t, LABEL_LEN + 2 * HELLO_LEN> in;
	std::memcpy(in.data(), LABEL, LABEL_LEN);
	std::memcpy(in.data() + LABEL_LEN, (connecting ? our_payload : f->payload).data(), HELLO_LEN);
	std::memcpy(in.data() + LABEL_LEN + HELLO_LEN, (connecting ? f->payload : our_payload).data(),
		    HELLO_LEN);
	const int rc = crypto_generichash_blake2b(key_.data(), key_.size(), in.data(), in.size(),
						  fabric_key_.data(), fabric_key_len_);
	sodium_memzero(fabric_key_.data(), fabric_key_.size());
	fabric_key_len_ = 0;
	if (rc != 0)
		return fail(Err::CRYPTO);

	version_ = *v;
	consume(f->size);
	return m;
}

// An authenticated frame: only its length field is read before its tag is
// checked.
Result<Message> Session::sealed_in() noexcept
{
	const std::span<const std::uint8_t> bytes{rx_.data() + PREFIX, rx_len_};
	const Result<std::uint32_t> len = peek_length(bytes);
	if (len.error() == Err::INCOMPLETE)
		return Err::INCOMPLETE;
	if (!len)
		return fail(len.error());
	const std::size_t body = HEADER_LEN + *len;
	if (bytes.size() < body + TAG_LEN)
		return Err::INCOMPLETE;
	if (rx_seq_ == std::numeric_limits<std::uint64_t>::max())
		return fail(Err::EXHAUSTED);

	put_prefix(rx_.data(), other(role_), rx_seq_);
	const std::uint8_t *tag = bytes.data() + body;
	if (crypto_auth_hmacsha512256_verify(tag, rx_.data(), PREFIX + body, key_.data()) != 0)
		return fail(Err::AUTH);
	rx_seq_++;

	// Now the peer vouches for every byte; still, it is checked.
	const Result<Header> h = decode_header(bytes);
	if (!h)
		return fail(h.error());
	if (h->version != version_)
		return fail(Err::BAD_VERSION);
	if (h->type == Type::HELLO)
		return fail(Err::UNEXPECTED);
	const Result<Message> m = decode_payload(h->type, bytes.subspan(HEADER_LEN, h->length));
	if (!m)
		return fail(m.error());
	consume(body + TAG_LEN);
	return m;
}

Result<Frame> Session::seal(const Message &msg) noexcept
{
	if (failed())
		return Err::FAILED;
	if (!established())
		return Err::NOT_READY;
	if (type_of(msg) == Type::HELLO)
		return Err::UNEXPECTED;

	std::array<std::uint8_t, PREFIX + HEADER_LEN + MAX_BODY> in;
	const Result<std::size_t> n = encode_frame(msg, version_, std::span(in).subspan(PREFIX));
	if (!n)
		return n.error();
	if (tx_seq_ == std::numeric_limits<std::uint64_t>::max())
		return fail(Err::EXHAUSTED);
	put_prefix(in.data(), role_, tx_seq_);

	Frame f;
	std::memcpy(f.buf.data(), in.data() + PREFIX, *n);
	crypto_auth_hmacsha512256(f.buf.data() + *n, in.data(), PREFIX + *n, key_.data());
	f.len = *n + TAG_LEN;
	tx_seq_++;
	return f;
}

} // namespace sdlink
