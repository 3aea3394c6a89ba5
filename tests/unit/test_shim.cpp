// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The preload shim (libsdpreload.so) on the host, without the module:
// it exports exactly the libc names of lib/shim/calls.def and the malloc
// family of lib/shim/malloc.def, unversioned, and passes calls on
// ordinary descriptors straight through.  The shim is dlopen()ed here, so
// its wrappers are called through dlsym, not interposed on this program
// (test_zcmalloc runs a program with it preloaded).
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

// clang-format off
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <csetjmp>
extern "C" {		// cmocka 1.1 has no C++ guards of its own
#include <cmocka.h>
}
// clang-format on

namespace {

const char *const listed[] = {
#define SD_CALL(ret, name, params, args) #name,
#include "calls.def"
#define SD_MALLOC(name) #name,
#include "malloc.def"
};

std::set<std::string> listed_names()
{
	return std::set<std::string>(std::begin(listed), std::end(listed));
}

// Defined dynamic symbols of the shim, as nm -D prints them (with any
// @VERSION suffix kept).
std::set<std::string> exported()
{
	std::set<std::string> out;
	const std::string cmd = std::string(SD_NM) + " -D --defined-only " + SD_SHIM;
	FILE *p = popen(cmd.c_str(), "r");

	assert_non_null(p);
	char line[512];
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = 0;
		const char *sym = strrchr(line, ' ');
		out.insert(sym ? sym + 1 : line);
	}
	assert_int_equal(pclose(p), 0);
	return out;
}

void exports_are_the_list(void **)
{
	const auto want = listed_names(), got = exported();
	bool ok = true;

	for (const auto &s : got)
		if (!want.count(s)) {
			print_error("libsdpreload.so exports %s, which calls.def and malloc.def "
				    "do not list\n",
				    s.c_str());
			ok = false;
		}
	for (const auto &s : want)
		if (!got.count(s)) {
			print_error("%s is listed, libsdpreload.so does not export it\n",
				    s.c_str());
			ok = false;
		}
	assert_true(ok);
	assert_int_equal(got.size(), sizeof(listed) / sizeof(listed[0]));
}

// A named version node would make the shim's send "send@@NODE", which a
// program's reference to send@GLIBC_2.2.5 would not bind to.
void exports_are_unversioned(void **)
{
	for (const auto &s : exported()) {
		if (s.find('@') != std::string::npos)
			print_error("versioned export %s\n", s.c_str());
		assert_true(s.find('@') == std::string::npos);
	}
}

void list_is_libc_names(void **)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

	assert_non_null(libc);
	for (const char *name : listed) {
		if (!dlsym(libc, name))
			print_error("%s is listed, but libc.so.6 does not have it\n", name);
		assert_non_null(dlsym(libc, name));
	}
	// Every name once.
	assert_int_equal(listed_names().size(), sizeof(listed) / sizeof(listed[0]));
	dlclose(libc);
}

void *shim;

int open_shim(void **)
{
	shim = dlopen(SD_SHIM, RTLD_NOW | RTLD_LOCAL);
	if (!shim)
		print_error("dlopen %s: %s\n", SD_SHIM, dlerror());
	return shim ? 0 : -1;
}

int close_shim(void **)
{
	return shim ? dlclose(shim) : 0;
}

template <typename F> F fn(const char *name)
{
	void *f = dlsym(shim, name);

	if (!f)
		print_error("the shim has no %s\n", name);
	assert_non_null(f);
	return reinterpret_cast<F>(f);
}

// Ordinary descriptors through the shim's wrappers: the same results, and
// the shim's own getsockopt(SO_DOMAIN) on first use leaves errno alone.
void pass_through(void **)
{
	auto sp = fn<int (*)(int, int, int, int *)>("socketpair");
	auto wr = fn<ssize_t (*)(int, const void *, size_t)>("write");
	auto rd = fn<ssize_t (*)(int, void *, size_t)>("read");
	auto snd = fn<ssize_t (*)(int, const void *, size_t, int)>("send");
	auto rcv = fn<ssize_t (*)(int, void *, size_t, int)>("recv");
	auto cl = fn<int (*)(int)>("close");
	auto dp = fn<int (*)(int)>("dup");
	auto dp2 = fn<int (*)(int, int)>("dup2");
	auto fc = fn<int (*)(int, int, ...)>("fcntl");
	auto pl = fn<int (*)(pollfd *, nfds_t, int)>("poll");
	int sv[2], pfd[2];
	char buf[16] = {};

	assert_int_equal(sp(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	errno = EXDEV;
	assert_int_equal(wr(sv[0], "hello", 5), 5);
	assert_int_equal(errno, EXDEV);
	assert_int_equal(rd(sv[1], buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(snd(sv[1], "back", 4, 0), 4);
	assert_int_equal(rcv(sv[0], buf, sizeof(buf), 0), 4);
	assert_memory_equal(buf, "back", 4);

	// A pipe: not a socket, first use asks the kernel (ENOTSOCK), and
	// errno stays what it was.
	assert_int_equal(pipe(pfd), 0);
	errno = EXDEV;
	assert_int_equal(wr(pfd[1], "p", 1), 1);
	assert_int_equal(errno, EXDEV);
	pollfd p = {pfd[0], POLLIN, 0};
	assert_int_equal(pl(&p, 1, 0), 1);
	assert_int_equal(rd(pfd[0], buf, 1), 1);

	// Copies and closes go through and keep working.
	const int d = dp(sv[0]);
	assert_true(d >= 0);
	assert_int_equal(wr(d, "x", 1), 1);
	assert_int_equal(rd(sv[1], buf, 1), 1);
	const int d2 = fc(sv[0], F_DUPFD_CLOEXEC, 100);
	assert_true(d2 >= 100);
	assert_int_equal(fc(d2, F_GETFD), FD_CLOEXEC);
	assert_int_equal(dp2(pfd[1], d), d);	// d was a socket, now the pipe
	assert_int_equal(wr(d, "q", 1), 1);
	assert_int_equal(rd(pfd[0], buf, 1), 1);
	assert_int_equal(buf[0], 'q');

	// Errors come back as libc reports them.
	errno = 0;
	assert_int_equal(cl(-1), -1);
	assert_int_equal(errno, EBADF);
	errno = 0;
	assert_int_equal(rd(d2 + 1000, buf, 1), -1);
	assert_int_equal(errno, EBADF);

	for (int fd : {sv[0], sv[1], pfd[0], pfd[1], d, d2})
		assert_int_equal(cl(fd), 0);
	errno = 0;
	assert_int_equal(wr(d, "x", 1), -1);	// closed through the shim
	assert_int_equal(errno, EBADF);
}

// SO_REUSEPORT on a socket that is not AF_SD is left alone.
void reuseport_untouched_elsewhere(void **)
{
	auto sk = fn<int (*)(int, int, int)>("socket");
	auto sso = fn<int (*)(int, int, int, const void *, socklen_t)>("setsockopt");
	auto gso = fn<int (*)(int, int, int, void *, socklen_t *)>("getsockopt");
	auto cl = fn<int (*)(int)>("close");
	const int one = 1;
	int v = 0;
	socklen_t len = sizeof(v);

	const int fd = sk(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(sso(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	assert_int_equal(gso(fd, SOL_SOCKET, SO_REUSEPORT, &v, &len), 0);
	assert_int_equal(v, 1);
	assert_int_equal(cl(fd), 0);
}

} // namespace

int main()
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(exports_are_the_list),
		cmocka_unit_test(exports_are_unversioned),
		cmocka_unit_test(list_is_libc_names),
		cmocka_unit_test(pass_through),
		cmocka_unit_test(reuseport_untouched_elsewhere),
	};
	return cmocka_run_group_tests_name("shim", tests, open_shim, close_shim);
}
