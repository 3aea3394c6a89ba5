// SPDX-License-Identifier: LGPL-2.1-or-later
//
// sdlinkd's wire format (tools/sdlinkd/wire.hpp): the exact bytes of each
// message, round trips, and what a decoder does with bytes that are
// truncated, malformed or random.  Every decoded buffer ends right before
// a PROT_NONE page: a read past its end crashes the test.
#include <array>
#include <initializer_list>
#include <random>

#include "sdlink.hpp"

namespace {

using namespace sdlink;
using test::ALL_TYPES;
using test::at_guard;
using test::Bytes;
using test::sample;
using test::unhex;

#define assert_err(expr, err) assert_int_equal(static_cast<int>(expr), static_cast<int>(Err::err))

// A frame as it goes on the wire: encode_frame() plus, but for a HELLO, a
// tag (not checked here: that is the session's).
struct Wire {
	std::array<std::uint8_t, HEADER_LEN + MAX_BODY + TAG_LEN> buf{};
	std::size_t len = 0;
	Bytes bytes() const { return {buf.data(), len}; }
};

Wire wire_of(const Message &msg)
{
	Wire w;
	const Result<std::size_t> n = encode_frame(msg, VERSION_MAX, w.buf);
	assert_true(n.ok());
	w.len = *n;
	if (type_of(msg) != Type::HELLO) {
		std::memset(w.buf.data() + w.len, 0xa5, TAG_LEN);
		w.len += TAG_LEN;
	}
	return w;
}

// Decodes a whole frame; the message, or why not.
Result<Message> decode(Bytes bytes)
{
	const Result<FrameView> f = split_frame(at_guard(bytes));
	if (!f)
		return f.error();
	return decode_payload(f->header.type, f->payload);
}

void expect_bytes(const Message &msg, const char *hex)
{
	std::array<std::uint8_t, 256> want{};
	const std::size_t n = unhex(hex, want);
	std::array<std::uint8_t, 256> got{};
	const Result<std::size_t> len = encode_frame(msg, 1, got);
	assert_true(len.ok());
	assert_int_equal(*len, n);
	assert_memory_equal(got.data(), want.data(), n);
}

// The exact bytes of each message type: big-endian, fields in the order of
// the table in wire.hpp.
void golden_bytes(void **)
{
	expect_bytes(sample(Type::HELLO), "53444c4b 01 01 0000 00000024  01 01 01 00"
					  " 000102030405060708090a0b0c0d0e0f"
					  " 101112131415161718191a1b1c1d1e1f");
	expect_bytes(sample(Type::CONNECT),
		     "53444c4b 01 02 0000 0000003c  8102030405060708"
		     " 00000000000000000000ffff0a000001 1234"
		     " 20010db8000000000000000000000002 abcd"
		     " a1a2a3a4 b1b2b3b4 00200000 00010000");
	expect_bytes(sample(Type::ANSWER),
		     "53444c4b 01 03 0000 00000040  1122334455667788 03"
		     " f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff 00c1c2c3 00d1d2d3 e1e2 05"
		     " 1011121314151617 20212223 30313233 4041424344454647 50515253");
	expect_bytes(sample(Type::CLOSE), "53444c4b 01 04 0000 00000009  1122334455667788 01");
	expect_bytes(sample(Type::PING), "53444c4b 01 05 0000 00000008  0102030405060708");
	expect_bytes(sample(Type::PONG), "53444c4b 01 06 0000 00000008  fffffffffffffffe");
	expect_bytes(sample(Type::READY),
		     "53444c4b 01 07 0000 0000003f  8877665544332211"
		     " f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff 00c1c2c3 00d1d2d3 e1e2 05"
		     " 1011121314151617 20212223 30313233 4041424344454647 50515253");
}

void round_trip(const Message &msg)
{
	const Wire w = wire_of(msg);
	const Result<FrameView> f = split_frame(at_guard(w.bytes()));
	assert_true(f.ok());
	assert_int_equal(f->size, w.len);
	assert_int_equal(f->header.version, 1);
	assert_int_equal(static_cast<int>(f->header.type), static_cast<int>(type_of(msg)));
	assert_int_equal(f->header.length, payload_len(type_of(msg)));
	assert_int_equal(f->tag.size(), type_of(msg) == Type::HELLO ? 0 : TAG_LEN);
	const Result<Message> m = decode_payload(f->header.type, f->payload);
	assert_true(m.ok());
	assert_true(*m == msg);
}

void round_trips(void **)
{
	for (const Type t : ALL_TYPES)
		round_trip(sample(t));

	// Every enumerator, and extreme values.
	for (const Verdict v : {Verdict::ACCEPT, Verdict::REFUSED, Verdict::NO_RDMA, Verdict::BUSY,
				Verdict::DENIED, Verdict::POLICY})
		round_trip(Answer{~std::uint64_t{0}, v, test::sample_endpoint()});
	round_trip(Close{0, Reason::FIN});
	round_trip(Close{~std::uint64_t{0}, Reason::RESET});
	round_trip(Ping{0});
	round_trip(Pong{0});
	round_trip(Connect{0, {}, {}, 0, 0, 1, 1});
	round_trip(Connect{});
	round_trip(Answer{});
	round_trip(Ready{});
	Hello h = test::sample_hello();
	h.role = Role::CONNECTING;
	h.min_version = 1;
	h.max_version = 255;
	round_trip(h);
	h.nonce.fill(0xff);
	round_trip(h);

	Connect c = test::sample_connect();
	c.send_size = c.recv_size = 0x80000000;
	round_trip(c);
	Ready r{~std::uint64_t{0}, test::sample_endpoint()};
	r.endpoint.ring = {~std::uint64_t{0}, ~0u, ~0u, ~std::uint64_t{0}, ~0u};
	r.endpoint.qpn = r.endpoint.psn = ~0u;
	r.endpoint.lid = 0xffff;
	r.endpoint.mtu = 0xff;
	round_trip(r);
}

void sizes(void **)
{
	assert_int_equal(payload_len(Type::HELLO), 36);
	assert_int_equal(payload_len(Type::CONNECT), 60);
	assert_int_equal(payload_len(Type::ANSWER), 64);
	assert_int_equal(payload_len(Type::CLOSE), 9);
	assert_int_equal(payload_len(Type::PING), 8);
	assert_int_equal(payload_len(Type::PONG), 8);
	assert_int_equal(payload_len(Type::READY), 63);
	for (const Type t : ALL_TYPES) {
		assert_true(payload_len(t) <= MAX_BODY);
		assert_int_equal(static_cast<int>(type_of(sample(t))), static_cast<int>(t));
	}
	assert_int_equal(MAX_FRAME, 12 + 4096 + 32);
}

// Every proper prefix of every frame is a valid beginning: INCOMPLETE, and
// nothing read beyond it.  A payload one byte short or long is BAD_LENGTH.
void truncated_frames(void **)
{
	for (const Type t : ALL_TYPES) {
		const Wire w = wire_of(sample(t));
		for (std::size_t k = 0; k < w.len; k++) {
			const Bytes b = at_guard(w.bytes().first(k));
			assert_err(split_frame(b).error(), INCOMPLETE);
			const Err want = k < HEADER_LEN ? Err::INCOMPLETE : Err::OK;
			assert_int_equal(static_cast<int>(decode_header(b).error()), static_cast<int>(want));
			assert_int_equal(static_cast<int>(peek_length(b).error()), static_cast<int>(want));
		}
		assert_true(split_frame(at_guard(w.bytes())).ok());

		const Bytes payload = w.bytes().subspan(HEADER_LEN, payload_len(t));
		for (std::size_t k = 0; k < payload.size(); k++) {
			assert_err(decode_payload(t, at_guard(payload.first(k))).error(), BAD_LENGTH);
		}
		const Bytes longer = w.bytes().subspan(HEADER_LEN, payload.size() + 1);
		assert_err(decode_payload(t, at_guard(longer)).error(), BAD_LENGTH);
	}
}

// A frame followed by more bytes: only the frame is taken.
void trailing_bytes_are_the_next_frame(void **)
{
	std::array<std::uint8_t, 2 * (HEADER_LEN + MAX_BODY + TAG_LEN)> two{};
	const Wire a = wire_of(sample(Type::PING)), b = wire_of(sample(Type::CLOSE));
	std::memcpy(two.data(), a.buf.data(), a.len);
	std::memcpy(two.data() + a.len, b.buf.data(), b.len);
	const Result<FrameView> f = split_frame(at_guard(Bytes(two.data(), a.len + b.len)));
	assert_true(f.ok());
	assert_int_equal(f->size, a.len);
}

// A header with one field changed.
Err header_error(Type t, std::size_t at, std::uint8_t value)
{
	Wire w = wire_of(sample(t));
	w.buf[at] = value;
	return decode(w.bytes()).error();
}

Err header_length_error(Type t, std::uint32_t len)
{
	Wire w = wire_of(sample(t));
	for (int i = 0; i < 4; i++)
		w.buf[8 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(len >> (24 - 8 * i));
	return decode(w.bytes()).error();
}

void bad_headers(void **)
{
	for (const Type t : ALL_TYPES) {
		for (std::size_t i = 0; i < 4; i++) {
			const std::uint8_t other = i == 0 ? 0x54 : 0;
			assert_err(header_error(t, i, other), BAD_MAGIC);
		}
		assert_err(header_error(t, 4, 0), BAD_VERSION);
		assert_err(header_error(t, 4, 2), BAD_VERSION);
		assert_err(header_error(t, 4, 0xff), BAD_VERSION);
		for (int bit = 0; bit < 8; bit++) {
			assert_err(header_error(t, 6, static_cast<std::uint8_t>(1u << bit)), BAD_FLAGS);
			assert_err(header_error(t, 7, static_cast<std::uint8_t>(1u << bit)), BAD_FLAGS);
		}
		assert_err(header_length_error(t, 4097), TOO_LONG);
		assert_err(header_length_error(t, 0x80000000), TOO_LONG);
		assert_err(header_length_error(t, 0xffffffff), TOO_LONG);
		assert_err(header_length_error(t, 4096), BAD_LENGTH);
		assert_err(header_length_error(t, 0), BAD_LENGTH);
		const auto len = static_cast<std::uint32_t>(payload_len(t));
		assert_err(header_length_error(t, len - 1), BAD_LENGTH);
		assert_err(header_length_error(t, len + 1), BAD_LENGTH);
	}
	for (const std::uint8_t type : std::initializer_list<std::uint8_t>{0, 8, 9, 0x80, 0xff})
		assert_err(header_error(Type::PING, 5, type), BAD_TYPE);
	assert_err(decode_payload(static_cast<Type>(0), {}).error(), BAD_TYPE);
	assert_err(decode_payload(static_cast<Type>(8), {}).error(), BAD_TYPE);

	// The header alone, with less than a frame behind it, is judged at once.
	std::array<std::uint8_t, 16> h{};
	assert_int_equal(unhex("53444c4b 01 05 0000 00001001", h), HEADER_LEN);
	assert_err(decode_header(at_guard(Bytes(h.data(), HEADER_LEN))).error(), TOO_LONG);
	assert_err(split_frame(at_guard(Bytes(h.data(), HEADER_LEN))).error(), TOO_LONG);
	assert_err(peek_length(at_guard(Bytes(h.data(), HEADER_LEN))).error(), TOO_LONG);
	assert_int_equal(unhex("53444c4b 01 05 0000 00001000", h), HEADER_LEN);
	assert_err(split_frame(at_guard(Bytes(h.data(), HEADER_LEN))).error(), BAD_LENGTH);
	const Result<std::uint32_t> len = peek_length(at_guard(Bytes(h.data(), HEADER_LEN)));
	assert_true(len.ok());
	assert_int_equal(*len, 4096);
	// peek_length() believes nothing but the length.
	assert_int_equal(unhex("00000000 00 00 ffff 00000010", h), HEADER_LEN);
	assert_int_equal(*peek_length(at_guard(Bytes(h.data(), HEADER_LEN))), 16);
}

// A payload with one byte changed.
Err field_error(const Message &msg, std::size_t at, std::uint8_t value)
{
	Wire w = wire_of(msg);
	w.buf[HEADER_LEN + at] = value;
	return decode(w.bytes()).error();
}

void bad_fields(void **)
{
	const Message answer = sample(Type::ANSWER), close = sample(Type::CLOSE), hello = sample(Type::HELLO);
	for (const std::uint8_t v : std::initializer_list<std::uint8_t>{6, 7, 0x7f, 0x80, 0xff})
		assert_err(field_error(answer, 8, v), BAD_FIELD);
	for (std::uint8_t v = 0; v < 6; v++)
		assert_err(field_error(answer, 8, v), OK);
	// CONNECT: ring sizes not a power of two, or one of them 0.
	const Message connect = sample(Type::CONNECT);
	for (const std::size_t at : {std::size_t{52}, std::size_t{56}}) {
		Wire w = wire_of(connect);
		std::memset(&w.buf[HEADER_LEN + at], 0, 4);
		assert_err(decode(w.bytes()).error(), BAD_FIELD);
		w.buf[HEADER_LEN + at + 3] = 3;
		assert_err(decode(w.bytes()).error(), BAD_FIELD);
		w.buf[HEADER_LEN + at + 3] = 4;
		assert_err(decode(w.bytes()).error(), OK);
	}
	for (const std::uint8_t v : std::initializer_list<std::uint8_t>{2, 3, 0xff})
		assert_err(field_error(close, 8, v), BAD_FIELD);
	// HELLO: min_version 0, min above max, role, reserved.
	assert_err(field_error(hello, 0, 0), BAD_FIELD);
	assert_err(field_error(hello, 0, 2), BAD_FIELD);
	assert_err(field_error(hello, 1, 0), BAD_FIELD);
	assert_err(field_error(hello, 1, 9), OK);
	assert_err(field_error(hello, 2, 2), BAD_FIELD);
	assert_err(field_error(hello, 2, 0xff), BAD_FIELD);
	assert_err(field_error(hello, 3, 1), BAD_FIELD);
	assert_err(field_error(hello, 3, 0x80), BAD_FIELD);
	// A HELLO says version 1 in its header, whatever it offers.
	Hello later = test::sample_hello();
	later.min_version = 2;
	later.max_version = 3;
	assert_true(decode(wire_of(later).bytes()).ok());
}

// The encoder refuses what the decoder would, and short buffers.
void encode_errors(void **)
{
	std::array<std::uint8_t, HEADER_LEN + MAX_BODY> out{};
	assert_err(encode_frame(Answer{1, static_cast<Verdict>(6), {}}, 1, out).error(), BAD_FIELD);
	assert_err(encode_frame(Connect{0, {}, {}, 0, 0, 3, 4}, 1, out).error(), BAD_FIELD);
	assert_err(encode_frame(Connect{0, {}, {}, 0, 0, 0, 4}, 1, out).error(), BAD_FIELD);
	assert_err(encode_frame(Close{1, static_cast<Reason>(2)}, 1, out).error(), BAD_FIELD);
	Hello h = test::sample_hello();
	h.reserved = 1;
	assert_err(encode_frame(h, 1, out).error(), BAD_FIELD);
	h = test::sample_hello();
	h.role = static_cast<Role>(2);
	assert_err(encode_frame(h, 1, out).error(), BAD_FIELD);
	h = test::sample_hello();
	h.min_version = 2;
	h.max_version = 1;
	assert_err(encode_frame(h, 1, out).error(), BAD_FIELD);
	assert_err(encode_frame(Ping{1}, 0, out).error(), BAD_VERSION);
	assert_err(encode_frame(Ping{1}, 2, out).error(), BAD_VERSION);

	for (const Type t : ALL_TYPES) {
		const std::size_t need = HEADER_LEN + payload_len(t);
		for (std::size_t k = 0; k < need; k++)
			assert_err(encode_frame(sample(t), 1, std::span(out).first(k)).error(), NO_SPACE);
		const Result<std::size_t> n = encode_frame(sample(t), 1, std::span(out).first(need));
		assert_true(n.ok());
		assert_int_equal(*n, need);
	}
}

void versions(void **)
{
	const auto pick = [](int amin, int amax, int bmin, int bmax) -> int {
		Hello a, b;
		a.min_version = static_cast<std::uint8_t>(amin);
		a.max_version = static_cast<std::uint8_t>(amax);
		b.min_version = static_cast<std::uint8_t>(bmin);
		b.max_version = static_cast<std::uint8_t>(bmax);
		const std::optional<std::uint8_t> v = pick_version(a, b);
		assert_true(v == pick_version(b, a));
		return v ? *v : -1;
	};
	assert_int_equal(pick(1, 1, 1, 1), 1);
	assert_int_equal(pick(1, 3, 1, 1), 1);
	assert_int_equal(pick(1, 3, 2, 5), 3);
	assert_int_equal(pick(1, 5, 3, 4), 4);
	assert_int_equal(pick(2, 2, 2, 9), 2);
	assert_int_equal(pick(1, 1, 2, 3), -1);
	assert_int_equal(pick(4, 5, 1, 3), -1);
	assert_int_equal(pick(0, 0, 0, 0), -1);
	assert_int_equal(pick(255, 255, 1, 255), 255);
}

void descriptions(void **)
{
	for (int e = 0; e <= static_cast<int>(Err::FAILED); e++) {
		const char *d = describe(static_cast<Err>(e));
		assert_non_null(d);
		assert_true(std::strlen(d) > 0);
		assert_string_not_equal(d, "unknown error");
		for (int f = 0; f < e; f++)
			assert_string_not_equal(d, describe(static_cast<Err>(f)));
	}
	assert_string_equal(describe(static_cast<Err>(200)), "unknown error");
}

// If a decoder accepts bytes, they are exactly what encoding the message
// gives back: every byte is a field, and no two encodings mean the same.
void assert_canonical(Bytes frame, const FrameView &f, const Message &m)
{
	std::array<std::uint8_t, HEADER_LEN + MAX_BODY> again{};
	const Result<std::size_t> n = encode_frame(m, f.header.version, again);
	assert_true(n.ok());
	assert_int_equal(*n, HEADER_LEN + f.header.length);
	assert_memory_equal(again.data(), frame.data(), *n);
}

// Random bytes, and random bytes behind a plausible header: never a crash,
// never a read past the end, and whatever decodes is canonical.
void random_bytes(void **)
{
	std::mt19937 rng(20240601);
	std::array<std::uint8_t, 300> buf{};
	int decoded = 0, rejected = 0, incomplete = 0;

	for (int i = 0; i < 20000; i++) {
		const std::size_t len = rng() % buf.size();
		for (std::size_t j = 0; j < len; j++)
			buf[j] = static_cast<std::uint8_t>(rng());
		if (i % 2 && len >= HEADER_LEN) {
			const Type t = ALL_TYPES[rng() % std::size(ALL_TYPES)];
			unhex("53444c4b 01 00 0000 00000000", buf);
			buf[5] = rng() % 8 ? static_cast<std::uint8_t>(t) : static_cast<std::uint8_t>(rng());
			buf[11] = static_cast<std::uint8_t>(rng() % 4 ? payload_len(t) : rng() % 256);
		}
		const Bytes b = at_guard(Bytes(buf.data(), len));
		(void)peek_length(b);
		(void)decode_header(b);
		const Result<FrameView> f = split_frame(b);
		if (f.error() == Err::INCOMPLETE) {
			incomplete++;
			continue;
		}
		if (!f) {
			rejected++;
			continue;
		}
		assert_true(f->size <= len);
		const Result<Message> m = decode_payload(f->header.type, f->payload);
		if (!m) {
			assert_err(m.error(), BAD_FIELD);
			rejected++;
			continue;
		}
		assert_canonical(b, *f, *m);
		decoded++;
	}
	// Each outcome came up often enough to have been exercised.
	assert_true(decoded > 1000);
	assert_true(rejected > 1000);
	assert_true(incomplete > 1000);
}

// Random payloads of the right size for each type: each decodes or is
// BAD_FIELD, and decodes canonically.
void random_payloads(void **)
{
	std::mt19937 rng(7);
	std::array<std::uint8_t, HEADER_LEN + MAX_BODY> frame{};
	for (const Type t : ALL_TYPES) {
		int ok = 0;
		const std::size_t len = payload_len(t);
		for (int i = 0; i < 2000; i++) {
			for (std::size_t j = 0; j < len; j++)
				frame[HEADER_LEN + j] = static_cast<std::uint8_t>(rng());
			// Most with the enumerations in range.
			if (i % 4 && t == Type::HELLO) {
				frame[HEADER_LEN + 0] = 1;
				frame[HEADER_LEN + 2] &= 1;
				frame[HEADER_LEN + 3] = 0;
			}
			if (i % 4 && t == Type::ANSWER)
				frame[HEADER_LEN + 8] &= 3;
			if (i % 4 && t == Type::CONNECT) {
				// Ring sizes: one bit each.
				std::memset(&frame[HEADER_LEN + 52], 0, 8);
				frame[HEADER_LEN + 53 + rng() % 3] = static_cast<std::uint8_t>(1u << rng() % 8);
				frame[HEADER_LEN + 57 + rng() % 3] = static_cast<std::uint8_t>(1u << rng() % 8);
			}
			if (i % 4 && t == Type::CLOSE)
				frame[HEADER_LEN + 8] &= 1;
			const Bytes payload = at_guard(Bytes(frame.data() + HEADER_LEN, len));
			const Result<Message> m = decode_payload(t, payload);
			if (!m) {
				assert_err(m.error(), BAD_FIELD);
				continue;
			}
			ok++;
			assert_int_equal(static_cast<int>(type_of(*m)), static_cast<int>(t));
			std::array<std::uint8_t, HEADER_LEN + MAX_BODY> again{};
			const Result<std::size_t> n = encode_frame(*m, 1, again);
			assert_true(n.ok());
			assert_memory_equal(again.data() + HEADER_LEN, frame.data() + HEADER_LEN, len);
		}
		assert_true(ok > 1000);
	}
}

// Every single bit of every frame flipped.
void bit_flips(void **)
{
	for (const Type t : ALL_TYPES) {
		const Wire w = wire_of(sample(t));
		for (std::size_t at = 0; at < w.len; at++) {
			for (int bit = 0; bit < 8; bit++) {
				Wire x = w;
				x.buf[at] ^= static_cast<std::uint8_t>(1u << bit);
				const Bytes b = at_guard(x.bytes());
				const Result<FrameView> f = split_frame(b);
				if (at < HEADER_LEN) {
					// Any change to the header is an error, or
					// a longer frame than there is.
					assert_false(f.ok());
					continue;
				}
				// The payload and tag are not the header's business.
				assert_true(f.ok());
				const Result<Message> m = decode_payload(f->header.type, f->payload);
				if (m)
					assert_canonical(b, *f, *m);
				else
					assert_err(m.error(), BAD_FIELD);
			}
		}
	}
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(golden_bytes),
		cmocka_unit_test(round_trips),
		cmocka_unit_test(sizes),
		cmocka_unit_test(truncated_frames),
		cmocka_unit_test(trailing_bytes_are_the_next_frame),
		cmocka_unit_test(bad_headers),
		cmocka_unit_test(bad_fields),
		cmocka_unit_test(encode_errors),
		cmocka_unit_test(versions),
		cmocka_unit_test(descriptions),
		cmocka_unit_test(random_bytes),
		cmocka_unit_test(random_payloads),
		cmocka_unit_test(bit_flips),
	};
	return cmocka_run_group_tests_name("sdlink_wire", tests, nullptr, nullptr);
}
