// SPDX-License-Identifier: LGPL-2.1-or-later
//
// libzc_anon.so, a test build of the shim's malloc family alone
// (lib/shim/zcpool.cpp and zcmalloc.cpp built with SD_ZC_TEST_POOL): the
// pool is anonymous memory, so the whole malloc path, pool included, runs
// on the host.  SD_ZC_TEST_THRESHOLD stands for the sysctl and
// SD_ZC_TEST_POOL_PAGES sets the pool's size.  These two let zc_probe ask
// where a pointer lives.
#include <cstddef>

#include "zcpool.hpp"

extern "C" __attribute__((visibility("default"))) bool sd_zc_test_in_pool(const void *p,
									 std::size_t len)
{
	return sd::zc::in_pool(p, len);
}

extern "C" __attribute__((visibility("default"))) std::size_t sd_zc_test_threshold()
{
	return sd::zc::threshold();
}
