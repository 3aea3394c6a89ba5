// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The C API of libsd.so, from C: identity, availability and a ring driven
 * through the C wrappers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sd/sd.h>

#define RING 4096

static void family_is_af_sd(void **state)
{
	(void)state;
	assert_int_equal(sd_family(), 18);
	assert_int_equal(sd_family(), AF_SD);
	assert_int_equal(PF_SD, AF_SD);
}

static void version_is_the_project_version(void **state)
{
	(void)state;
	assert_non_null(sd_version());
	assert_true(strlen(sd_version()) > 0);
	assert_string_equal(sd_version(), SD_TEST_VERSION);
}

/* sd_available() agrees with socket(2) and keeps its errno. */
static void available_matches_socket(void **state)
{
	int fd, want_errno, got;

	(void)state;
	fd = socket(AF_SD, SOCK_STREAM, 0);
	want_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);

	errno = 0;
	got = sd_available();
	assert_int_equal(got, fd >= 0);
	if (!got) {
		assert_int_equal(errno, want_errno);
		assert_true(errno != 0);
	}
}

static void *ring_mem(struct sd_ring_offset *off)
{
	size_t len = sd_ring_layout_len(RING);
	void *buf = aligned_alloc((size_t)sysconf(_SC_PAGESIZE), len);

	if (buf && sd_ring_layout(buf, len, RING, off)) {
		free(buf);
		buf = NULL;
	}
	return buf;
}

static void layout_places_fields_apart(void **state)
{
	struct sd_ring_offset off;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *buf = ring_mem(&off);

	(void)state;
	assert_non_null(buf);
	assert_int_equal(off.size, RING);
	assert_int_equal(off.data % page, 0);
	assert_int_equal(off.mmap_len, off.data + RING);
	assert_int_equal(sd_ring_layout_len(RING), off.mmap_len);
	assert_true(off.consumer >= off.prod_flags + 128);
	assert_true(off.cons_flags >= off.prod_flags + 128);
	assert_int_equal(sd_ring_layout(buf, off.mmap_len - 1, RING, &off), -EINVAL);
	assert_int_equal(sd_ring_layout(buf, off.mmap_len, RING + 1, &off), -EINVAL);
	assert_int_equal(sd_ring_layout(buf, off.mmap_len, RING, NULL), -EINVAL);
	assert_int_equal(sd_ring_layout(NULL, off.mmap_len, RING, &off), -EINVAL);
	free(buf);
}

static void ring_round_trip(void **state)
{
	struct sd_ring_offset off;
	struct sd_ring_producer *p = NULL;
	struct sd_ring_consumer *c = NULL;
	char a[] = "hello, ", b[] = "ring", out[32] = "";
	struct iovec in[2] = { { a, 7 }, { b, 4 } };
	struct iovec o = { out, sizeof(out) };
	void *buf = ring_mem(&off);

	(void)state;
	assert_non_null(buf);
	assert_int_equal(sd_ring_producer_open(&p, buf, &off, 0), 0);
	assert_int_equal(sd_ring_consumer_open(&c, buf, &off, 0), 0);

	assert_int_equal(sd_ring_readv(c, &o, 1, 0), -EAGAIN);
	assert_int_equal(sd_ring_consumer_prepare_wait(c), 1);
	assert_int_equal(sd_ring_writev(p, in, 2), 11);
	assert_int_equal(sd_ring_producer_take_wake(p), 1);
	assert_int_equal(sd_ring_producer_take_wake(p), 0);
	assert_int_equal(sd_ring_readable(c), 11);

	assert_int_equal(sd_ring_readv(c, &o, 1, MSG_PEEK), 11);
	assert_memory_equal(out, "hello, ring", 11);
	memset(out, 0, sizeof(out));
	assert_int_equal(sd_ring_readv(c, &o, 1, 0), 11);
	assert_memory_equal(out, "hello, ring", 11);
	assert_int_equal(sd_ring_readable(c), 0);
	assert_int_equal(sd_ring_consumer_take_wake(c), 0);

	assert_int_equal(sd_ring_write_fin(p), 0);
	assert_int_equal(sd_ring_writev(p, in, 1), -EPIPE);
	assert_int_equal(sd_ring_readv(c, &o, 1, 0), 0);
	assert_int_equal(sd_ring_producer_prepare_wait(p), -EPIPE);

	sd_ring_producer_close(p);
	sd_ring_consumer_close(c);
	free(buf);
}

static void ring_arguments_are_checked(void **state)
{
	struct sd_ring_offset off, bad;
	struct sd_ring_producer *p = NULL;
	struct sd_ring_consumer *c = NULL;
	char x = 'x';
	struct iovec v = { &x, 1 };
	void *buf = ring_mem(&off);

	(void)state;
	assert_non_null(buf);
	bad = off;
	bad.size = 3000;
	p = (struct sd_ring_producer *)buf;
	assert_int_equal(sd_ring_producer_open(&p, buf, &bad, 0), -EINVAL);
	assert_null(p);
	assert_int_equal(sd_ring_consumer_open(&c, buf, &off, 4), -EINVAL);
	assert_null(c);
	assert_int_equal(sd_ring_producer_open(NULL, buf, &off, 0), -EINVAL);
	assert_int_equal(sd_ring_consumer_open(&c, buf, NULL, 0), -EINVAL);

	assert_int_equal(sd_ring_producer_open(&p, buf, &off, 0), 0);
	assert_int_equal(sd_ring_consumer_open(&c, buf, &off, 0), 0);
	assert_int_equal(sd_ring_writev(p, &v, -1), -EINVAL);
	assert_int_equal(sd_ring_writev(p, NULL, 1), -EINVAL);
	assert_int_equal(sd_ring_writev(p, NULL, 0), 0);
	assert_int_equal(sd_ring_writev(NULL, &v, 1), -EINVAL);
	assert_int_equal(sd_ring_readv(c, &v, 1, MSG_DONTWAIT), -EINVAL);
	assert_int_equal(sd_ring_readv(c, &v, 100000, 0), -EINVAL);
	assert_int_equal(sd_ring_readv(NULL, &v, 1, 0), -EINVAL);
	assert_int_equal(sd_ring_readable(NULL), -EINVAL);
	assert_int_equal(sd_ring_write_fin(NULL), -EINVAL);
	assert_int_equal(sd_ring_producer_prepare_wait(NULL), -EINVAL);
	assert_int_equal(sd_ring_consumer_prepare_wait(NULL), -EINVAL);
	assert_int_equal(sd_ring_producer_take_wake(NULL), 0);
	assert_int_equal(sd_ring_consumer_take_wake(NULL), 0);
	sd_ring_producer_close(p);
	sd_ring_consumer_close(c);
	sd_ring_producer_close(NULL);
	sd_ring_consumer_close(NULL);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(family_is_af_sd),
		cmocka_unit_test(version_is_the_project_version),
		cmocka_unit_test(available_matches_socket),
		cmocka_unit_test(layout_places_fields_apart),
		cmocka_unit_test(ring_round_trip),
		cmocka_unit_test(ring_arguments_are_checked),
	};
	return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
