// SPDX-License-Identifier: LGPL-2.1-or-later
//
// sdlinkd's authenticated session (tools/sdlinkd/session.hpp) between two
// sessions in memory: the handshake, messages both ways, and every way a
// frame can be forged, changed, replayed, reflected, reordered or come
// from another session, each of which must end the session.  The test
// derives the session key and the tags itself, from session.hpp's
// description, with libsodium, so the key schedule is pinned too.
#include <sodium.h>

#include <array>
#include <initializer_list>
#include <random>

#include "session.hpp"
#include "sdlink.hpp"

namespace {

using namespace sdlink;
using test::Bytes;
using test::sample;

#define assert_err(expr, err) assert_int_equal(static_cast<int>(expr), static_cast<int>(Err::err))

std::array<std::uint8_t, 64> KEY, OTHER_KEY;

// Two ends of one control connection, and the HELLOs they sent.
struct Pair {
	Session c{Role::CONNECTING};
	Session s{Role::ANSWERING};
	Frame hello_c, hello_s;
};

// Pairs for one test; fresh() replaces one with a new pair.
constexpr int PAIRS = 2;
struct Fixture {
	Pair *p[PAIRS] = {};
};

Fixture *fx;

int setup(void **)
{
	fx = new Fixture;
	for (Pair *&p : fx->p)
		p = new Pair;
	return 0;
}

int teardown(void **)
{
	for (Pair *p : fx->p)
		delete p;
	delete fx;
	fx = nullptr;
	return 0;
}

Pair &fresh(int i = 0)
{
	delete fx->p[i];
	fx->p[i] = new Pair;
	return *fx->p[i];
}

Pair &pair(int i = 0)
{
	return *fx->p[i];
}

void deliver(Session &to, Bytes bytes)
{
	assert_int_equal(to.feed(bytes), bytes.size());
}

void deliver(Session &to, const Frame &f)
{
	deliver(to, f.bytes());
}

Message receive(Session &at)
{
	const Result<Message> m = at.next();
	if (!m)
		fail_msg("next(): %s", describe(m.error()));
	return *m;
}

Frame seal(Session &from, const Message &msg)
{
	const Result<Frame> f = from.seal(msg);
	if (!f)
		fail_msg("seal(): %s", describe(f.error()));
	return *f;
}

// Both HELLOs sent and received; each side's key may differ.
Pair &handshake(Pair &p, Bytes key_c = KEY, Bytes key_s = KEY)
{
	const Result<Frame> hc = p.c.start(key_c), hs = p.s.start(key_s);
	assert_true(hc.ok());
	assert_true(hs.ok());
	p.hello_c = *hc;
	p.hello_s = *hs;
	assert_false(p.c.established());
	deliver(p.s, p.hello_c);
	deliver(p.c, p.hello_s);
	const Message from_c = receive(p.s), from_s = receive(p.c);
	assert_true(std::get<Hello>(from_c).role == Role::CONNECTING);
	assert_true(std::get<Hello>(from_s).role == Role::ANSWERING);
	assert_true(p.c.established());
	assert_true(p.s.established());
	assert_int_equal(p.c.version(), 1);
	assert_int_equal(p.s.version(), 1);
	assert_err(p.c.next().error(), INCOMPLETE);
	assert_err(p.s.next().error(), INCOMPLETE);
	return p;
}

// from's frame reaches to and ends its session with err; to's next()
// keeps saying so, and it takes no more bytes.
void assert_rejects(Session &to, const Frame &f, Err err)
{
	deliver(to, f);
	assert_int_equal(static_cast<int>(to.next().error()), static_cast<int>(err));
	assert_true(to.failed());
	assert_int_equal(static_cast<int>(to.error()), static_cast<int>(err));
	assert_int_equal(static_cast<int>(to.next().error()), static_cast<int>(err));
	assert_int_equal(to.feed(f.bytes()), 0);
	assert_err(to.seal(Ping{1}).error(), FAILED);
	assert_false(to.established());
}

// The handshake, then every message type each way, several times, with
// frames fed one at a time, byte by byte, and many at once.
void messages_both_ways(void **)
{
	Pair &p = handshake(pair());
	for (int round = 0; round < 3; round++) {
		for (const Type t : test::ALL_TYPES) {
			if (t == Type::HELLO)
				continue;
			const Message m = sample(t);
			deliver(p.s, seal(p.c, m));
			assert_true(receive(p.s) == m);
			deliver(p.c, seal(p.s, m));
			assert_true(receive(p.c) == m);
		}
	}

	// Byte by byte: INCOMPLETE until the last one.
	const Frame f = seal(p.c, sample(Type::CONNECT));
	for (std::size_t i = 0; i < f.len; i++) {
		assert_err(p.s.next().error(), INCOMPLETE);
		deliver(p.s, f.bytes().subspan(i, 1));
	}
	assert_true(receive(p.s) == sample(Type::CONNECT));
	assert_err(p.s.next().error(), INCOMPLETE);

	// Several frames and half of one in a single feed.
	std::array<std::uint8_t, 4 * sizeof(Frame)> buf{};
	std::size_t n = 0;
	for (std::uint64_t i = 0; i < 4; i++) {
		const Frame g = seal(p.s, Pong{i});
		std::memcpy(buf.data() + n, g.buf.data(), g.len);
		n += g.len;
	}
	deliver(p.c, Bytes(buf.data(), n - 10));
	for (std::uint64_t i = 0; i < 3; i++)
		assert_true(receive(p.c) == Message(Pong{i}));
	assert_err(p.c.next().error(), INCOMPLETE);
	deliver(p.c, Bytes(buf.data() + n - 10, 10));
	assert_true(receive(p.c) == Message(Pong{3}));
	assert_false(p.c.failed());
	assert_false(p.s.failed());
}

// The answering side gets the connecting side's HELLO and its first
// messages in one piece; and a side may get the peer's HELLO before it
// starts (the bytes wait).
void hello_and_messages_together(void **)
{
	Pair &p = pair();
	const Result<Frame> hs = p.s.start(KEY);
	assert_true(hs.ok());
	deliver(p.c, *hs);
	assert_err(p.c.next().error(), NOT_READY);
	const Result<Frame> hc = p.c.start(KEY);
	assert_true(hc.ok());
	assert_true(std::get<Hello>(receive(p.c)).role == Role::ANSWERING);
	assert_true(p.c.established());
	assert_false(p.s.established());
	assert_err(p.s.seal(Ping{1}).error(), NOT_READY);

	deliver(p.s, *hc);
	deliver(p.s, seal(p.c, sample(Type::CONNECT)));
	deliver(p.s, seal(p.c, Ping{9}));
	assert_true(std::holds_alternative<Hello>(receive(p.s)));
	assert_true(receive(p.s) == sample(Type::CONNECT));
	assert_true(receive(p.s) == Message(Ping{9}));
	assert_err(p.s.next().error(), INCOMPLETE);
}

// More than the receive buffer holds: feed() takes what fits, next()
// makes room.
void feed_takes_what_fits(void **)
{
	static std::array<std::uint8_t, 200 * (HEADER_LEN + 8 + TAG_LEN)> buf;
	Pair &p = handshake(pair());
	std::size_t n = 0;
	for (std::uint64_t i = 0; i < 200; i++) {
		const Frame f = seal(p.c, Ping{i});
		std::memcpy(buf.data() + n, f.buf.data(), f.len);
		n += f.len;
	}
	assert_true(n > MAX_FRAME);

	std::size_t at = 0;
	std::uint64_t want = 0;
	bool partial = false;
	while (at < n) {
		const std::size_t took = p.s.feed(Bytes(buf.data() + at, n - at));
		partial = partial || took < n - at;
		at += took;
		Result<Message> m = p.s.next();
		for (; m.ok(); m = p.s.next())
			assert_true(*m == Message(Ping{want++}));
		assert_err(m.error(), INCOMPLETE);
	}
	assert_true(partial);
	assert_int_equal(want, 200);
}

// Daemons with different keys agree on nothing: the first authenticated
// message fails, on both sides.
void wrong_key(void **)
{
	Pair &p = handshake(pair(), KEY, OTHER_KEY);
	const Frame to_s = seal(p.c, sample(Type::CONNECT)), to_c = seal(p.s, Ping{1});
	assert_rejects(p.s, to_s, Err::AUTH);
	assert_rejects(p.c, to_c, Err::AUTH);

	// A key that differs in its last byte only, or is a prefix of the
	// other: still different.
	std::array<std::uint8_t, 64> k = KEY;
	k[63] ^= 1;
	Pair &q = handshake(fresh(), KEY, k);
	assert_rejects(q.s, seal(q.c, Ping{1}), Err::AUTH);
	Pair &r = handshake(fresh(), Bytes(KEY).first(32), Bytes(KEY).first(33));
	assert_rejects(r.c, seal(r.s, Ping{1}), Err::AUTH);
}

// Any byte of a frame changed, header, payload or tag: rejected.  A
// changed length field may make the receiver wait for more; what follows
// then fails it.
void tampered_frames(void **)
{
	const Message msgs[] = {sample(Type::CONNECT), sample(Type::CLOSE)};
	for (const Message &m : msgs) {
		for (std::size_t at = 0;; at++) {
			Pair &p = handshake(fresh());
			Frame f = seal(p.c, m);
			if (at == f.len)
				break;
			f.buf[at] ^= static_cast<std::uint8_t>(1u << (at % 8));
			deliver(p.s, f);
			Result<Message> r = p.s.next();
			if (r.error() == Err::INCOMPLETE) {
				assert_true(at >= 8 && at < HEADER_LEN);	// the length field
				static const std::array<std::uint8_t, MAX_FRAME> zeros{};
				(void)p.s.feed(zeros);
				r = p.s.next();
			}
			assert_false(r.ok());
			assert_true(r.error() == Err::AUTH || r.error() == Err::TOO_LONG);
			assert_true(p.s.failed());
		}
	}
}

// The peer's HELLO changed on the way (its nonce, or the versions it
// offers, a downgrade): the keys differ and the first messages fail.
void tampered_hello(void **)
{
	for (std::size_t at : {HEADER_LEN + 1, HEADER_LEN + 4, HEADER_LEN + 35}) {
		Pair &p = fresh();
		const Result<Frame> hc = p.c.start(KEY), hs = p.s.start(KEY);
		assert_true(hc.ok() && hs.ok());
		Frame bad = *hc;
		bad.buf[at] = static_cast<std::uint8_t>(bad.buf[at] + 1);	// max_version 2, or nonce
		deliver(p.s, bad);
		deliver(p.c, *hs);
		assert_true(std::holds_alternative<Hello>(receive(p.s)));
		assert_true(std::holds_alternative<Hello>(receive(p.c)));
		const Frame to_s = seal(p.c, Ping{1}), to_c = seal(p.s, Ping{1});
		assert_rejects(p.s, to_s, Err::AUTH);
		assert_rejects(p.c, to_c, Err::AUTH);
	}
}

// A frame received again, in the same session.
void replay(void **)
{
	Pair &p = handshake(pair());
	const Frame f = seal(p.c, sample(Type::CONNECT));
	deliver(p.s, f);
	assert_true(receive(p.s) == sample(Type::CONNECT));
	assert_rejects(p.s, f, Err::AUTH);

	// Replayed later, after other messages.
	Pair &q = handshake(fresh());
	const Frame g = seal(q.s, Ping{1});
	deliver(q.c, g);
	(void)receive(q.c);
	deliver(q.c, seal(q.s, Ping{2}));
	(void)receive(q.c);
	assert_rejects(q.c, g, Err::AUTH);
}

// A frame sent back to its sender: it has the sender's direction.  Even
// at the sequence number the sender expects next.
void reflection(void **)
{
	Pair &p = handshake(pair());
	assert_rejects(p.c, seal(p.c, Ping{1}), Err::AUTH);
	assert_rejects(p.s, seal(p.s, Pong{1}), Err::AUTH);
}

// Two frames swapped, or the first one lost.
void reorder_and_drop(void **)
{
	Pair &p = handshake(pair());
	const Frame a = seal(p.c, Ping{1}), b = seal(p.c, Ping{2});
	assert_rejects(p.s, b, Err::AUTH);
	(void)a;

	Pair &q = handshake(fresh());
	const Frame c = seal(q.s, Close{1, Reason::FIN});
	const Frame d = seal(q.s, Close{2, Reason::RESET});
	(void)c;
	assert_rejects(q.c, d, Err::AUTH);

	// Sequences count per direction: traffic one way does not move the
	// other way's count.
	Pair &r = handshake(fresh());
	for (std::uint64_t i = 0; i < 5; i++) {
		deliver(r.s, seal(r.c, Ping{i}));
		assert_true(receive(r.s) == Message(Ping{i}));
	}
	deliver(r.c, seal(r.s, Pong{7}));
	assert_true(receive(r.c) == Message(Pong{7}));
}

// A frame of another session with the same key, at the same sequence
// number and direction: the nonces differ, so does the key.
void other_session(void **)
{
	Pair &p = handshake(pair(0));
	Pair &q = handshake(pair(1));
	const Frame from_p = seal(p.c, sample(Type::CONNECT));
	(void)seal(q.c, sample(Type::CONNECT));
	assert_rejects(q.s, from_p, Err::AUTH);
	assert_rejects(q.c, seal(p.s, Ping{3}), Err::AUTH);
}

// Random bytes instead of frames, after the handshake: never a message.
// Before it: an error or a wait, never a crash.
void random_input(void **)
{
	std::mt19937 rng(99);
	std::array<std::uint8_t, 512> buf{};
	for (int i = 0; i < 2000; i++) {
		Pair &p = fresh();
		const bool keyed = i % 2;
		if (keyed)
			handshake(p);
		else
			assert_true(p.s.start(KEY).ok());
		const std::size_t len = rng() % buf.size();
		for (std::size_t j = 0; j < len; j++)
			buf[j] = static_cast<std::uint8_t>(rng());
		if (i % 4 >= 2 && len >= HEADER_LEN) {
			// Behind a plausible header.
			test::unhex("53444c4b 01 00 0000 00000000", buf);
			buf[5] = static_cast<std::uint8_t>(1 + rng() % 6);
			buf[11] = static_cast<std::uint8_t>(rng() % 120);
		}
		(void)p.s.feed(Bytes(buf.data(), len));
		Result<Message> m = p.s.next();
		if (!keyed && m.ok()) {
			// A random HELLO can be valid; nothing after it is.
			assert_true(std::holds_alternative<Hello>(*m));
			m = p.s.next();
		}
		assert_false(m.ok());
		if (m.error() != Err::INCOMPLETE)
			assert_true(p.s.failed());
	}
}

// Only 32 to 64 bytes of fabric key.
void key_lengths(void **)
{
	for (const std::size_t len : std::initializer_list<std::size_t>{0, 1, 16, 31, 65, 128}) {
		Pair &p = fresh();
		static std::array<std::uint8_t, 128> big{};
		assert_err(p.c.start(Bytes(big.data(), len)).error(), BAD_KEY);
		assert_true(p.c.failed());
		assert_err(p.c.start(KEY).error(), FAILED);
	}
	for (const std::size_t len : std::initializer_list<std::size_t>{32, 33, 48, 63, 64}) {
		Pair &p = handshake(fresh(), Bytes(KEY).first(len), Bytes(KEY).first(len));
		deliver(p.s, seal(p.c, Ping{len}));
		assert_true(receive(p.s) == Message(Ping{len}));
	}
}

Frame hello_frame(std::uint8_t min, std::uint8_t max, Role role)
{
	Hello h;
	h.min_version = min;
	h.max_version = max;
	h.role = role;
	Frame f;
	const Result<std::size_t> n = encode_frame(h, HELLO_VERSION, f.buf);
	assert_true(n.ok());
	f.len = *n;
	return f;
}

// A peer offering only later versions; a peer offering later ones too.
void versions(void **)
{
	Pair &p = pair();
	assert_true(p.s.start(KEY).ok());
	deliver(p.s, hello_frame(2, 9, Role::CONNECTING));
	assert_err(p.s.next().error(), NO_COMMON_VERSION);
	assert_true(p.s.failed());

	Pair &q = fresh();
	assert_true(q.s.start(KEY).ok());
	deliver(q.s, hello_frame(1, 7, Role::CONNECTING));
	const Hello h = std::get<Hello>(receive(q.s));
	assert_int_equal(h.max_version, 7);
	assert_int_equal(q.s.version(), 1);
	assert_true(q.s.established());
}

// What may come when, and what the session refuses to do.
void protocol_errors(void **)
{
	// Nothing before start(), and start() once.
	Pair &p = pair();
	assert_err(p.c.seal(Ping{1}).error(), NOT_READY);
	assert_err(p.c.next().error(), NOT_READY);
	assert_true(p.c.start(KEY).ok());
	assert_err(p.c.start(KEY).error(), UNEXPECTED);
	assert_err(p.c.seal(Ping{1}).error(), NOT_READY);
	assert_false(p.c.failed());

	// Both sides claiming the same role.
	Pair &q = fresh();
	assert_true(q.s.start(KEY).ok());
	deliver(q.s, hello_frame(1, 1, Role::ANSWERING));
	assert_err(q.s.next().error(), BAD_ROLE);

	// Anything but a HELLO first, even a well-formed frame: judged on its
	// header, without waiting for the rest.
	Pair &r = fresh();
	assert_true(r.s.start(KEY).ok());
	std::array<std::uint8_t, 12> h{};
	test::unhex("53444c4b 01 05 0000 00000008", h);
	deliver(r.s, h);
	assert_err(r.s.next().error(), UNEXPECTED);

	// A bad HELLO.
	Pair &s = fresh();
	assert_true(s.s.start(KEY).ok());
	Frame bad = hello_frame(1, 1, Role::CONNECTING);
	bad.buf[HEADER_LEN + 3] = 1;	// reserved
	deliver(s.s, bad);
	assert_err(s.s.next().error(), BAD_FIELD);

	// A second HELLO, unauthenticated as HELLOs are: what follows it is
	// taken for its tag.
	Pair &t = handshake(fresh());
	deliver(t.s, hello_frame(1, 1, Role::CONNECTING));
	assert_err(t.s.next().error(), INCOMPLETE);
	assert_rejects(t.s, seal(t.c, Ping{1}), Err::AUTH);

	// seal() refuses a HELLO and fields out of range, and the session
	// lives on.
	Pair &u = handshake(fresh());
	assert_err(u.c.seal(Hello{}).error(), UNEXPECTED);
	assert_err(u.c.seal(Answer{1, static_cast<Verdict>(7), {}}).error(), BAD_FIELD);
	assert_err(u.c.seal(Close{1, static_cast<Reason>(2)}).error(), BAD_FIELD);
	assert_false(u.c.failed());
	deliver(u.s, seal(u.c, Ping{5}));
	assert_true(receive(u.s) == Message(Ping{5}));
}

// The key schedule of session.hpp, computed here with libsodium directly.
struct Keys {
	std::array<std::uint8_t, 32> session{};
};

Keys derive(const Pair &p, Bytes fabric_key)
{
	const Result<FrameView> fc = split_frame(p.hello_c.bytes()), fs = split_frame(p.hello_s.bytes());
	assert_true(fc.ok() && fs.ok());
	std::array<std::uint8_t, 15 + 72> in{};
	assert_int_equal(fc->payload.size(), 36);
	assert_int_equal(fs->payload.size(), 36);
	std::memcpy(in.data(), "AF_SD sdlink v1", 15);
	std::memcpy(in.data() + 15, fc->payload.data(), 36);
	std::memcpy(in.data() + 51, fs->payload.data(), 36);
	Keys k;
	const int rc = crypto_generichash_blake2b(k.session.data(), k.session.size(), in.data(), in.size(),
						 fabric_key.data(), fabric_key.size());
	assert_int_equal(rc, 0);
	return k;
}

// header || payload || tag, the tag computed here.
Frame craft(const Keys &k, char direction, std::uint64_t seq, const char *hex)
{
	std::array<std::uint8_t, 9 + sizeof(Frame::buf)> in{};
	in[0] = static_cast<std::uint8_t>(direction);
	for (int i = 0; i < 8; i++)
		in[1 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(seq >> (56 - 8 * i));
	std::array<std::uint8_t, sizeof(Frame::buf)> body{};
	const std::size_t n = test::unhex(hex, body);
	std::memcpy(in.data() + 9, body.data(), n);
	Frame f;
	std::memcpy(f.buf.data(), body.data(), n);
	crypto_auth_hmacsha512256(f.buf.data() + n, in.data(), 9 + n, k.session.data());
	f.len = n + TAG_LEN;
	return f;
}

// The tags the sessions make are the ones session.hpp describes.
void documented_tags(void **)
{
	Pair &p = handshake(pair(), Bytes(KEY).first(40), Bytes(KEY).first(40));
	const Keys k = derive(p, Bytes(KEY).first(40));
	const char *ping0 = "53444c4b 01 05 0000 00000008 0000000000000000";
	const char *ping1 = "53444c4b 01 05 0000 00000008 0000000000000001";

	const Frame want_c0 = craft(k, 'C', 0, ping0), want_c1 = craft(k, 'C', 1, ping1);
	const Frame want_s0 = craft(k, 'S', 0, ping0);
	const Frame c0 = seal(p.c, Ping{0}), c1 = seal(p.c, Ping{1}), s0 = seal(p.s, Ping{0});
	assert_int_equal(c0.len, want_c0.len);
	assert_memory_equal(c0.buf.data(), want_c0.buf.data(), c0.len);
	assert_memory_equal(c1.buf.data(), want_c1.buf.data(), c1.len);
	assert_memory_equal(s0.buf.data(), want_s0.buf.data(), s0.len);

	deliver(p.s, c0);
	deliver(p.s, c1);
	deliver(p.c, s0);
	assert_true(receive(p.s) == Message(Ping{0}));
	assert_true(receive(p.s) == Message(Ping{1}));
	assert_true(receive(p.c) == Message(Ping{0}));

	// And a frame made here is accepted.
	deliver(p.s, craft(k, 'C', 2, "53444c4b 01 06 0000 00000008 00000000000000aa"));
	deliver(p.c, craft(k, 'S', 1, "53444c4b 01 04 0000 00000009 0000000000000001 00"));
	assert_true(receive(p.s) == Message(Pong{0xaa}));
	assert_true(receive(p.c) == Message(Close{1, Reason::FIN}));
}

// Frames with a good tag are still checked: the peer holds the key but may
// be broken, or of another version.
void authenticated_but_malformed(void **)
{
	struct Case {
		const char *hex;
		Err err;
	} const cases[] = {
		{"53444c4c 01 05 0000 00000008 0000000000000000", Err::BAD_MAGIC},
		{"53444c4b 02 05 0000 00000008 0000000000000000", Err::BAD_VERSION},
		{"53444c4b 01 05 0100 00000008 0000000000000000", Err::BAD_FLAGS},
		{"53444c4b 01 09 0000 00000008 0000000000000000", Err::BAD_TYPE},
		{"53444c4b 01 05 0000 00000009 000000000000000000", Err::BAD_LENGTH},
		{"53444c4b 01 05 0000 00000000", Err::BAD_LENGTH},
		{"53444c4b 01 04 0000 00000009 0000000000000001 02", Err::BAD_FIELD},
		{"53444c4b 01 01 0000 00000024 01010000"
		 " 0000000000000000000000000000000000000000000000000000000000000000",
		 Err::UNEXPECTED},
	};
	for (const Case &c : cases) {
		Pair &p = handshake(fresh(), KEY, KEY);
		const Keys k = derive(p, KEY);
		assert_rejects(p.s, craft(k, 'C', 0, c.hex), c.err);
	}
	// The right frame at the wrong sequence number.
	Pair &p = handshake(fresh(), KEY, KEY);
	assert_rejects(p.s, craft(derive(p, KEY), 'C', 1, "53444c4b 01 05 0000 00000008 0000000000000000"),
		       Err::AUTH);
}

// Only the length field is believed before the tag is checked: over the
// cap ends the session at once; up to it, the session waits for the
// whole frame, then checks the tag.
void length_before_tag(void **)
{
	Pair &p = handshake(pair());
	std::array<std::uint8_t, 12> h{};
	test::unhex("53444c4b 01 05 0000 00001001", h);
	deliver(p.s, h);
	assert_err(p.s.next().error(), TOO_LONG);

	Pair &q = handshake(fresh());
	test::unhex("00000000 00 00 0000 00001000", h);	// not even the magic
	deliver(q.s, h);
	static const std::array<std::uint8_t, MAX_PAYLOAD + TAG_LEN> zeros{};
	deliver(q.s, Bytes(zeros).first(zeros.size() - 1));
	assert_err(q.s.next().error(), INCOMPLETE);
	deliver(q.s, Bytes(zeros).first(1));
	assert_err(q.s.next().error(), AUTH);
}

} // namespace

#define session_test(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	for (std::size_t i = 0; i < KEY.size(); i++) {
		KEY[i] = static_cast<std::uint8_t>(0x40 + i);
		OTHER_KEY[i] = static_cast<std::uint8_t>(0x80 + i);
	}
	if (sodium_init() < 0)
		return 1;

	const CMUnitTest tests[] = {
		session_test(messages_both_ways),
		session_test(hello_and_messages_together),
		session_test(feed_takes_what_fits),
		session_test(wrong_key),
		session_test(tampered_frames),
		session_test(tampered_hello),
		session_test(replay),
		session_test(reflection),
		session_test(reorder_and_drop),
		session_test(other_session),
		session_test(random_input),
		session_test(key_lengths),
		session_test(versions),
		session_test(protocol_errors),
		session_test(documented_tags),
		session_test(authenticated_but_malformed),
		session_test(length_before_tag),
	};
	return cmocka_run_group_tests_name("sdlink_session", tests, nullptr, nullptr);
}
