// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The shim's malloc family on the host: zc_probe (every call of the
// family, moves between the pool and glibc, threads, fork) runs under
// LD_PRELOAD of
//
//   - libsdpreload.so itself: with no af_sd.ko there is no sysctl and no
//     AF_SD socket, so zero copy is off and everything is glibc's;
//   - libzc_anon.so, the same allocator over an anonymous pool (see
//     zc_anon.cpp): the pool path, a full pool, and SD_ZEROCOPY=0;
//   - either with Debian's libjemalloc.so.2 preloaded after it, standing
//     for a program that brings its own allocator (Redis): the shim
//     forwards to jemalloc, and zero copy is off unless SD_ZEROCOPY=1.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

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

// Run zc_probe MODE LIBNAME with LIB preloaded and the environment of this
// process (less anything that would steer the allocator) plus env; its
// exit status.
int probe(const char *lib, const char *mode, const char *libname,
	  std::initializer_list<const char *> env)
{
	std::vector<std::string> keep;
	for (char **e = environ; *e; e++) {
		const char *v = *e;
		if (!std::strncmp(v, "LD_PRELOAD=", 11) || !std::strncmp(v, "SD_ZEROCOPY=", 12) ||
		    !std::strncmp(v, "SD_ZC_TEST_", 11))
			continue;
		keep.emplace_back(v);
	}
	keep.push_back(std::string("LD_PRELOAD=") + lib);
	for (const char *v : env)
		keep.emplace_back(v);
	std::vector<char *> envp;
	for (auto &s : keep)
		envp.push_back(s.data());
	envp.push_back(nullptr);
	char *argv[] = {const_cast<char *>(SD_ZC_PROBE), const_cast<char *>(mode),
			const_cast<char *>(libname), nullptr};

	const pid_t pid = fork();
	if (pid == 0) {
		execve(SD_ZC_PROBE, argv, envp.data());
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	if (!WIFEXITED(st)) {
		print_error("zc_probe %s: killed by signal %d\n", mode, WTERMSIG(st));
		return -1;
	}
	return WEXITSTATUS(st);
}

// The real shim, no module: the pool is off, glibc serves everything.
void shim_without_module(void **)
{
	assert_int_equal(probe(SD_SHIM, "glibc", "libsdpreload", {}), 0);
}

// Even with a threshold in the environment of the test build, the real
// shim reads only the sysctl (absent here).
void shim_ignores_test_threshold(void **)
{
	assert_int_equal(probe(SD_SHIM, "glibc", "libsdpreload", {"SD_ZC_TEST_THRESHOLD=65536"}),
			 0);
}

void anon_pool(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "pool", "libzc_anon", {"SD_ZC_TEST_THRESHOLD=65536", "SD_ZEROCOPY=1"}),
			 0);
}

void anon_pool_full(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "full", "libzc_anon",
			       {"SD_ZC_TEST_THRESHOLD=65536", "SD_ZC_TEST_POOL_PAGES=64", "SD_ZEROCOPY=1"}),
			 0);
}

void anon_pool_zerocopy_env_off(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "glibc", "libzc_anon",
			       {"SD_ZC_TEST_THRESHOLD=65536", "SD_ZEROCOPY=0"}),
			 0);
}

// No threshold at all (the sysctl missing): off.
void anon_pool_no_threshold(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "glibc", "libzc_anon", {}), 0);
}

// Next to glibc's malloc, zero copy is on without being asked for.
void anon_pool_default_on(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "pool", "libzc_anon", {"SD_ZC_TEST_THRESHOLD=65536"}),
			 0);
}

// A value that is neither 0 nor 1 counts as unset (after a warning).
void anon_pool_bad_env(void **)
{
	assert_int_equal(probe(SD_ZC_ANON, "pool", "libzc_anon",
			       {"SD_ZC_TEST_THRESHOLD=65536", "SD_ZEROCOPY=yes"}),
			 0);
}

// LIB, then jemalloc, in LD_PRELOAD.
std::string with_jemalloc(const char *lib)
{
	if (!*SD_JEMALLOC)
		fail_msg("libjemalloc.so.2 was not found at configure time "
			 "(Debian's libjemalloc2: scripts/install-deps)");
	return std::string(lib) + " " + SD_JEMALLOC;
}

// The program's allocator is jemalloc: everything is jemalloc's, and
// zero copy stays off.
void anon_pool_jemalloc_default_off(void **)
{
	assert_int_equal(probe(with_jemalloc(SD_ZC_ANON).c_str(), "foreign", "libzc_anon",
			       {"SD_ZC_TEST_THRESHOLD=65536"}),
			 0);
}

// SD_ZEROCOPY=1 turns the pool on next to jemalloc; the small blocks
// are still jemalloc's.
void anon_pool_jemalloc_forced_on(void **)
{
	assert_int_equal(probe(with_jemalloc(SD_ZC_ANON).c_str(), "pool", "libzc_anon",
			       {"SD_ZC_TEST_THRESHOLD=65536", "SD_ZEROCOPY=1"}),
			 0);
}

// The real shim in front of jemalloc.
void shim_jemalloc(void **)
{
	assert_int_equal(probe(with_jemalloc(SD_SHIM).c_str(), "foreign", "libsdpreload", {}), 0);
}

} // namespace

int main()
{
	const CMUnitTest tests[] = {
		cmocka_unit_test(shim_without_module),
		cmocka_unit_test(shim_ignores_test_threshold),
		cmocka_unit_test(anon_pool),
		cmocka_unit_test(anon_pool_full),
		cmocka_unit_test(anon_pool_zerocopy_env_off),
		cmocka_unit_test(anon_pool_no_threshold),
		cmocka_unit_test(anon_pool_default_on),
		cmocka_unit_test(anon_pool_bad_env),
		cmocka_unit_test(anon_pool_jemalloc_default_off),
		cmocka_unit_test(anon_pool_jemalloc_forced_on),
		cmocka_unit_test(shim_jemalloc),
	};
	return cmocka_run_group_tests_name("zcmalloc", tests, nullptr, nullptr);
}
