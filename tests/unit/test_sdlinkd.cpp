// SPDX-License-Identifier: LGPL-2.1-or-later
//
// sdlinkd's logic that needs neither the kernel nor the event loop
// (tools/sdlinkd): its command line, the cache of hosts without a daemon,
// the verdict each outcome gives the kernel, and the reading of the
// kernel's upcalls, malformed ones included.
//
// cmocka leaves a failed test with longjmp, which skips destructors: test
// bodies hold only trivially destructible objects; the cache lives in
// memory that setup and teardown manage, and netlink messages are copied
// into a static buffer before anything is asserted.
#include <linux/genetlink.h>
#include <linux/sd.h>
#include <linux/sd_link.h>

#include <netlink/attr.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <initializer_list>
#include <vector>

#include "kernel.hpp"
#include "options.hpp"
#include "peer_cache.hpp"
#include "verdict.hpp"

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <csetjmp>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace {

using namespace sdlinkd;

// ---- the command line -------------------------------------------------------

struct Got {
	bool ok = false;
	Options o;
	char error[160] = {};
};

Got parse(std::initializer_list<const char *> args)
{
	const std::vector<const char *> v(args);
	const Parsed p = parse_args(v);
	Got g;
	g.ok = p.ok();
	g.o = p.options;
	std::snprintf(g.error, sizeof(g.error), "%s", p.error.c_str());
	return g;
}

void options_defaults(void **)
{
	const Got g = parse({});
	assert_true(g.ok);
	assert_int_equal(g.o.port, 7471);
	assert_int_equal(g.o.peer_cache_seconds, 60);
	assert_int_equal(g.o.spin_us, 200);
	assert_false(g.o.verbose);
	assert_false(g.o.no_rdma);
	assert_string_equal(g.o.rdma_device.data(), "");
	assert_false(g.o.help);
	assert_false(g.o.version);
}

void options_values(void **)
{
	Got g = parse({"--port", "80", "--peer-cache-seconds", "0", "-v"});
	assert_true(g.ok);
	assert_int_equal(g.o.port, 80);
	assert_int_equal(g.o.peer_cache_seconds, 0);
	assert_true(g.o.verbose);

	g = parse({"-p", "65535", "--peer-cache-seconds=86400", "--verbose"});
	assert_true(g.ok);
	assert_int_equal(g.o.port, 65535);
	assert_int_equal(g.o.peer_cache_seconds, 86400);

	g = parse({"--spin-us", "0"});
	assert_true(g.ok);
	assert_int_equal(g.o.spin_us, 0);
	g = parse({"--spin-us=10000000"});
	assert_true(g.ok);
	assert_int_equal(g.o.spin_us, 10000000);

	g = parse({"--port=1"});
	assert_true(g.ok);
	assert_int_equal(g.o.port, 1);

	g = parse({"--port", "10", "--port", "11"});	// the last one counts
	assert_true(g.ok);
	assert_int_equal(g.o.port, 11);

	g = parse({"--rdma-device", "rxe0"});
	assert_true(g.ok);
	assert_string_equal(g.o.rdma_device.data(), "rxe0");
	g = parse({"--rdma-device=mlx5_1"});
	assert_true(g.ok);
	assert_string_equal(g.o.rdma_device.data(), "mlx5_1");
	g = parse({"--no-rdma"});
	assert_true(g.ok && g.o.no_rdma);

	g = parse({"-h"});
	assert_true(g.ok && g.o.help);
	g = parse({"--help"});
	assert_true(g.ok && g.o.help);
	g = parse({"--version"});
	assert_true(g.ok && g.o.version);
}

void options_errors(void **)
{
	// Each a command line of one or two words.
	static const char *const bad[][2] = {
		{"--port", "0"},
		{"--port", "65536"},
		{"--port", "-1"},
		{"--port", "+80"},
		{"--port", " 80"},
		{"--port", "80x"},
		{"--port", ""},
		{"--port", "0x50"},
		{"--port", "99999999999999999999999"},
		{"--port", nullptr},
		{"-p", nullptr},
		{"--port=", nullptr},
		{"--peer-cache-seconds", "86401"},
		{"--peer-cache-seconds", "-5"},
		{"--peer-cache-seconds", nullptr},
		{"--spin-us", "10000001"},
		{"--spin-us", "-1"},
		{"--spin-us", "1e3"},
		{"--spin-us", nullptr},
		{"--verbose=1", nullptr},
		{"--rdma-device", nullptr},
		{"--rdma-device=", nullptr},
		{"--rdma-device", "0123456789012345678901234567890123456789012345678901234567890123"},
		{"--no-rdma", "--rdma-device=rxe0"},
		{"--no-rdma=1", nullptr},
		{"--help=yes", nullptr},
		{"--bogus", nullptr},
		{"-x", nullptr},
		{"-", nullptr},
		{"extra", nullptr},
		{"-v", "extra"},
	};
	for (const auto &args : bad) {
		const Got g = args[1] ? parse({args[0], args[1]}) : parse({args[0]});
		if (g.ok)
			fail_msg("accepted: %s %s", args[0], args[1] ? args[1] : "");
		assert_true(g.error[0] != '\0');
	}
	assert_non_null(std::strstr(parse({"--port", "0"}).error, "1 to 65535"));
	assert_non_null(std::strstr(parse({"--bogus"}).error, "--bogus"));
	assert_non_null(std::strstr(parse({"--port"}).error, "needs a value"));
}

// ---- the peer cache ---------------------------------------------------------

PeerCache *cache;

int cache_setup(void **)
{
	cache = new PeerCache(seconds(60), 3);
	return 0;
}

int cache_teardown(void **)
{
	delete cache;
	cache = nullptr;
	return 0;
}

In6 host(std::uint8_t last)
{
	In6 a{};
	a[10] = a[11] = 0xff;
	a[12] = 10;
	a[15] = last;
	return a;
}

const Time T0 = Time() + std::chrono::hours(1000);

void cache_expiry(void **)
{
	cache->remember(host(1), T0);
	assert_true(cache->no_daemon(host(1), T0));
	assert_true(cache->no_daemon(host(1), T0 + seconds(59)));
	assert_false(cache->no_daemon(host(2), T0));
	assert_int_equal(cache->size(), 1);
	// Expired at exactly ttl, and then forgotten.
	assert_false(cache->no_daemon(host(1), T0 + seconds(60)));
	assert_int_equal(cache->size(), 0);
	assert_false(cache->no_daemon(host(1), T0 + seconds(1)));
}

void cache_refresh_and_forget(void **)
{
	cache->remember(host(1), T0);
	cache->remember(host(1), T0 + seconds(30));	// learnt again: from then
	assert_true(cache->no_daemon(host(1), T0 + seconds(80)));
	assert_false(cache->no_daemon(host(1), T0 + seconds(90)));

	cache->remember(host(2), T0);
	cache->forget(host(2));				// it dialled us
	assert_false(cache->no_daemon(host(2), T0));
	assert_int_equal(cache->size(), 0);
}

void cache_capacity(void **)
{
	// Full: the entry that expires first makes room.
	cache->remember(host(1), T0 + seconds(2));
	cache->remember(host(2), T0);
	cache->remember(host(3), T0 + seconds(1));
	cache->remember(host(4), T0 + seconds(3));
	assert_int_equal(cache->size(), 3);
	const Time t = T0 + seconds(10);
	assert_false(cache->no_daemon(host(2), t));
	assert_true(cache->no_daemon(host(1), t));
	assert_true(cache->no_daemon(host(3), t));
	assert_true(cache->no_daemon(host(4), t));

	// Expired entries go first, however many.
	const Time later = T0 + seconds(200);
	cache->remember(host(5), later);
	assert_int_equal(cache->size(), 1);
	assert_true(cache->no_daemon(host(5), later));
}

int cache_off_setup(void **)
{
	cache = new PeerCache(seconds(0));
	return 0;
}

void cache_off(void **)
{
	cache->remember(host(1), T0);
	assert_false(cache->no_daemon(host(1), T0));
	assert_int_equal(cache->size(), 0);
}

// ---- verdicts ---------------------------------------------------------------

void verdicts(void **)
{
	const struct {
		Outcome o;
		std::uint8_t reason;
	} table[] = {
		{Outcome::ACCEPTED, SD_FALLBACK_NO_RDMA},
		{Outcome::NO_RDMA, SD_FALLBACK_NO_RDMA},
		{Outcome::REFUSED, SD_FALLBACK_NO_LISTENER},
		{Outcome::BUSY, SD_FALLBACK_BUSY},
		{Outcome::POLICY, SD_FALLBACK_POLICY},
		{Outcome::NO_DAEMON, SD_FALLBACK_PEER_NO_SD},
		{Outcome::NO_KEY, SD_FALLBACK_AUTH},
		{Outcome::AUTH, SD_FALLBACK_AUTH},
		{Outcome::FAILED, SD_FALLBACK_HANDSHAKE},
		{Outcome::TIMEOUT, SD_FALLBACK_HANDSHAKE},
	};
	for (const auto &t : table) {
		const KernelVerdict v = kernel_verdict(t.o);
		assert_int_equal(v.verdict, SD_LINK_TCP);
		assert_int_equal(v.reason, t.reason);
		assert_string_not_equal(describe(t.o), "?");
	}
	assert_int_equal(kernel_verdict(Outcome::AUTH).reason, SD_FALLBACK_AUTH);
	assert_int_equal(kernel_verdict(Outcome::DENIED).verdict, SD_LINK_REFUSE);
	assert_string_not_equal(describe(Outcome::DENIED), "?");
	assert_string_equal(reason_name(SD_FALLBACK_POLICY), "policy");
	assert_string_equal(reason_name(SD_FALLBACK_PEER_NO_SD), "peer_no_sd");
	assert_string_equal(reason_name(SD_FALLBACK_AUTH), "auth");
}

void answers(void **)
{
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::ACCEPT)),
			 static_cast<int>(Outcome::ACCEPTED));
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::NO_RDMA)),
			 static_cast<int>(Outcome::NO_RDMA));
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::REFUSED)),
			 static_cast<int>(Outcome::REFUSED));
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::BUSY)),
			 static_cast<int>(Outcome::BUSY));
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::DENIED)),
			 static_cast<int>(Outcome::DENIED));
	assert_int_equal(static_cast<int>(outcome_of(sdlink::Verdict::POLICY)),
			 static_cast<int>(Outcome::POLICY));
	assert_int_equal(static_cast<int>(outcome_of(static_cast<sdlink::Verdict>(9))),
			 static_cast<int>(Outcome::FAILED));
}

void dial_errors(void **)
{
	for (const int e : {ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ETIMEDOUT, EHOSTDOWN, ENETDOWN})
		assert_int_equal(static_cast<int>(dial_outcome(e)), static_cast<int>(Outcome::NO_DAEMON));
	// Our own trouble says nothing of the peer.
	for (const int e : {EMFILE, ENFILE, ENOMEM, EINVAL, EADDRNOTAVAIL, EACCES, EPERM, 0})
		assert_int_equal(static_cast<int>(dial_outcome(e)), static_cast<int>(Outcome::FAILED));
}

void session_ends(void **)
{
	using sdlink::Err;
	auto is = [](Outcome got, Outcome want) { assert_int_equal(static_cast<int>(got), static_cast<int>(want)); };
	is(session_outcome(Err::AUTH, false), Outcome::AUTH);
	is(session_outcome(Err::AUTH, true), Outcome::AUTH);
	// Closed before the peer proved its key: authentication.
	is(session_outcome(Err::OK, false), Outcome::AUTH);
	// Closed after: the session failed.
	is(session_outcome(Err::OK, true), Outcome::FAILED);
	for (const Err e : {Err::BAD_MAGIC, Err::BAD_VERSION, Err::BAD_TYPE, Err::BAD_LENGTH, Err::BAD_FIELD,
			    Err::NO_COMMON_VERSION, Err::BAD_ROLE, Err::UNEXPECTED, Err::TOO_LONG,
			    Err::EXHAUSTED}) {
		is(session_outcome(e, false), Outcome::FAILED);
		is(session_outcome(e, true), Outcome::FAILED);
	}
}

// ---- upcalls ----------------------------------------------------------------

constexpr int FAMILY = 0x1234;

// A message built with libnl, copied out of it.
alignas(8) std::uint8_t msgbuf[4096];

enum Field : unsigned {
	F_ID = 1, F_LOCAL = 2, F_REMOTE = 4, F_UID = 8, F_GID = 16,
	F_ALL = 31,
	F_ID_U32 = 32,		// the id as a u32
	F_SHORT_IN6 = 64,	// REMOTE's address 4 bytes long
	F_NO_PORT = 128,	// REMOTE without its port
	F_UNKNOWN = 256,	// an attribute of a type from the future
	F_UID_U8 = 512,		// the uid as a u8
	F_TX = 1024,		// SD_LINK_A_TX_SIZE
	F_RX = 2048,		// SD_LINK_A_RX_SIZE
	F_SIZES = F_TX | F_RX,
	F_TX_ODD = 4096,	// TX_SIZE not a power of two
	F_RX_BIG = 8192,	// RX_SIZE above SD_RING_MAX_SIZE
	F_RX_SMALL = 16384,	// RX_SIZE below SD_RING_MIN_SIZE
	F_TX_U64 = 32768,	// TX_SIZE as a u64
};

const In6 REMOTE = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

void put_addr(nl_msg *m, int type, const In6 &a, std::uint16_t port, unsigned fields)
{
	nlattr *nest = nla_nest_start(m, type);
	nla_put(m, SD_A_ADDR_IN6, fields & F_SHORT_IN6 ? 4 : 16, a.data());
	if (!(fields & F_NO_PORT))
		nla_put_u16(m, SD_A_ADDR_PORT, port);
	nla_nest_end(m, nest);
}

nlmsghdr *build(unsigned fields, std::uint8_t cmd = SD_LINK_CMD_CONNECT, int family = FAMILY)
{
	nl_msg *m = nlmsg_alloc();
	genlmsg_put(m, 0, 0, family, 0, 0, cmd, SD_LINK_GENL_VERSION);
	if (fields & F_ID_U32)
		nla_put_u32(m, SD_LINK_A_ID, 7);
	else if (fields & F_ID)
		nla_put_u64(m, SD_LINK_A_ID, 0x1122334455667788ULL);
	if (fields & F_LOCAL)
		put_addr(m, SD_LINK_A_LOCAL, host(1), 0, 0);
	if (fields & F_REMOTE)
		put_addr(m, SD_LINK_A_REMOTE, REMOTE, 4242, fields);
	if (fields & F_UID_U8)
		nla_put_u8(m, SD_LINK_A_UID, 1);
	else if (fields & F_UID)
		nla_put_u32(m, SD_LINK_A_UID, 1000);
	if (fields & F_GID)
		nla_put_u32(m, SD_LINK_A_GID, 100);
	if (fields & F_TX_U64)
		nla_put_u64(m, SD_LINK_A_TX_SIZE, 1 << 16);
	else if (fields & F_TX)
		nla_put_u32(m, SD_LINK_A_TX_SIZE, fields & F_TX_ODD ? 3 << 14 : 1 << 21);
	if (fields & F_RX)
		nla_put_u32(m, SD_LINK_A_RX_SIZE,
			    fields & F_RX_BIG ? SD_RING_MAX_SIZE << 1 :
			    fields & F_RX_SMALL ? SD_RING_MIN_SIZE >> 1 : 1 << 13);
	if (fields & F_UNKNOWN)
		nla_put_u32(m, 200, 5);
	const nlmsghdr *h = nlmsg_hdr(m);
	const std::size_t len = h->nlmsg_len <= sizeof(msgbuf) ? h->nlmsg_len : 0;
	std::memcpy(msgbuf, h, len);
	nlmsg_free(m);
	assert_true(len > 0);
	return reinterpret_cast<nlmsghdr *>(msgbuf);
}

#define assert_parse(h, want) \
	do { \
		Upcall up_; \
		assert_int_equal(static_cast<int>(parse_upcall((h), FAMILY, up_)), \
				 static_cast<int>(UpcallParse::want)); \
	} while (0)

void upcall_whole(void **)
{
	Upcall up;
	assert_int_equal(static_cast<int>(parse_upcall(build(F_ALL), FAMILY, up)),
			 static_cast<int>(UpcallParse::OK));
	assert_true(up.id == 0x1122334455667788ULL);
	assert_memory_equal(up.remote.addr.data(), REMOTE.data(), 16);
	assert_int_equal(up.remote.port, 4242);
	assert_memory_equal(up.local.addr.data(), host(1).data(), 16);
	assert_int_equal(up.local.port, 0);
	assert_int_equal(up.uid, 1000);
	assert_int_equal(up.gid, 100);
	// An older module's: no ring sizes.
	assert_int_equal(up.tx_size, 0);
	assert_int_equal(up.rx_size, 0);
	// A newer kernel's attribute is skipped.
	assert_parse(build(F_ALL | F_UNKNOWN), OK);
}

void upcall_ring_sizes(void **)
{
	Upcall up;
	assert_int_equal(static_cast<int>(parse_upcall(build(F_ALL | F_SIZES), FAMILY, up)),
			 static_cast<int>(UpcallParse::OK));
	assert_int_equal(up.tx_size, 1 << 21);
	assert_int_equal(up.rx_size, 1 << 13);
	assert_true(up.id == 0x1122334455667788ULL);
	// Both or neither, each a u32 the kernel could make a ring of.
	assert_parse(build(F_ALL | F_TX), BAD);
	assert_parse(build(F_ALL | F_RX), BAD);
	assert_parse(build(F_ALL | F_SIZES | F_TX_ODD), BAD);
	assert_parse(build(F_ALL | F_SIZES | F_RX_BIG), BAD);
	assert_parse(build(F_ALL | F_SIZES | F_RX_SMALL), BAD);
	assert_parse(build(F_ALL | F_SIZES | F_TX_U64), BAD);
	// Without an id, still nothing to answer.
	assert_parse(build((F_ALL & ~F_ID) | F_SIZES), NO_ID);
}

void upcall_malformed(void **)
{
	// Without an id there is nothing to answer.
	assert_parse(build(F_ALL & ~F_ID), NO_ID);
	assert_parse(build(F_ALL | F_ID_U32), NO_ID);
	// With one, the kernel is answered (handshake).
	assert_parse(build(F_ALL & ~F_REMOTE), BAD);
	assert_parse(build(F_ALL & ~F_LOCAL), BAD);
	assert_parse(build(F_ALL & ~F_UID), BAD);
	assert_parse(build(F_ALL & ~F_GID), BAD);
	assert_parse(build(F_ALL | F_SHORT_IN6), BAD);
	assert_parse(build(F_ALL | F_NO_PORT), BAD);
	assert_parse(build(F_ALL | F_UID_U8), BAD);
	// Not an upcall: another command, another family, no room for a
	// generic netlink header.
	assert_parse(build(F_ALL, SD_LINK_CMD_VERDICT), OTHER);
	assert_parse(build(F_ALL, SD_LINK_CMD_CONNECT, FAMILY + 1), OTHER);
	nlmsghdr *h = build(F_ALL);
	h->nlmsg_len = NLMSG_HDRLEN + 2;
	assert_parse(h, OTHER);
	// An attribute whose length runs past the message.
	h = build(F_ALL);
	auto *a = reinterpret_cast<nlattr *>(reinterpret_cast<std::uint8_t *>(h) + NLMSG_HDRLEN + GENL_HDRLEN);
	a->nla_len = 0xfff0;
	Upcall up;
	assert_int_not_equal(static_cast<int>(parse_upcall(h, FAMILY, up)), static_cast<int>(UpcallParse::OK));
}

void fabric_key_lengths(void **)
{
	// A key is static, so that a failed assertion leaks nothing.
	static FabricKey key;
	std::array<std::uint8_t, 80> bytes{};
	for (std::size_t i = 0; i < bytes.size(); i++)
		bytes[i] = static_cast<std::uint8_t>(i + 1);
	assert_false(key.set({bytes.data(), 31}));
	assert_int_equal(key.bytes().size(), 0);
	assert_true(key.set({bytes.data(), 32}));
	assert_int_equal(key.bytes().size(), 32);
	assert_memory_equal(key.bytes().data(), bytes.data(), 32);
	assert_true(key.set({bytes.data(), 64}));
	assert_int_equal(key.bytes().size(), 64);
	assert_false(key.set({bytes.data(), 65}));
	assert_int_equal(key.bytes().size(), 0);
}

} // namespace

int main(void)
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(options_defaults),
		cmocka_unit_test(options_values),
		cmocka_unit_test(options_errors),
		cmocka_unit_test_setup_teardown(cache_expiry, cache_setup, cache_teardown),
		cmocka_unit_test_setup_teardown(cache_refresh_and_forget, cache_setup, cache_teardown),
		cmocka_unit_test_setup_teardown(cache_capacity, cache_setup, cache_teardown),
		cmocka_unit_test_setup_teardown(cache_off, cache_off_setup, cache_teardown),
		cmocka_unit_test(verdicts),
		cmocka_unit_test(answers),
		cmocka_unit_test(dial_errors),
		cmocka_unit_test(session_ends),
		cmocka_unit_test(upcall_whole),
		cmocka_unit_test(upcall_malformed),
		cmocka_unit_test(upcall_ring_sizes),
		cmocka_unit_test(fabric_key_lengths),
	};
	return cmocka_run_group_tests_name("sdlinkd", tests, nullptr, nullptr);
}
