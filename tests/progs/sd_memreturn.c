// SPDX-License-Identifier: GPL-2.0
/*
 * sd_memreturn: does freed large malloc memory go back to the system?
 * tests/integration/test_zc_pool.py runs it plainly (glibc's malloc) and
 * under sdrun (large blocks from libsd's zero-copy pool,
 * Documentation/zerocopy.rst, "Giving memory back").
 *
 *   sd_memreturn COUNT MIB [ROUNDS]
 *
 * Reads VmRSS, then ROUNDS times (default 1): mallocs COUNT blocks of MIB
 * MiB, writes every page of each, frees them all.  Prints one line:
 *
 *   start KIB peak KIB end KIB pool N faults F
 *
 * VmRSS at the start, with every block of the last round allocated, and
 * after the last free; N is how many blocks of the last round lay in a
 * pool mapping (an `sd_pool` line of /proc/self/maps); F the page faults
 * (minor and major) of every round after the first: a steady state that
 * reuses the memory it freed faults little, one that gets fresh pages
 * each round faults on each.  Exit status 1 with a message on a failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MAX_BLOCKS	1024

static long vmrss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6)) {
			kib = strtol(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kib;
}

/* Whether [p, p + n) lies in an sd_pool mapping. */
static long faults(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return -1;
	return ru.ru_minflt + ru.ru_majflt;
}

static int in_sd_pool(const void *p, size_t n)
{
	uintptr_t lo, hi, a = (uintptr_t)p;
	char line[512];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		if (strstr(line, "sd_pool") &&
		    sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			found = a >= lo && a < hi && n <= hi - a;
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	static char *blocks[MAX_BLOCKS];
	long start, peak = 0, end, f0 = 0, f1;
	int count, rounds, pool = 0;
	size_t len;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: sd_memreturn COUNT MIB [ROUNDS]\n");
		return 2;
	}
	count = atoi(argv[1]);
	len = (size_t)atoi(argv[2]) << 20;
	rounds = argc > 3 ? atoi(argv[3]) : 1;
	if (count < 1 || count > MAX_BLOCKS || !len || rounds < 1) {
		fprintf(stderr, "sd_memreturn: bad arguments\n");
		return 2;
	}
	start = vmrss_kib();
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < count; i++) {
			blocks[i] = malloc(len);
			if (!blocks[i]) {
				fprintf(stderr, "sd_memreturn: malloc failed\n");
				return 1;
			}
			memset(blocks[i], 0x5a ^ i, len);
		}
		if (r == rounds - 1) {
			peak = vmrss_kib();
			for (int i = 0; i < count; i++)
				pool += in_sd_pool(blocks[i], len);
		}
		for (int i = 0; i < count; i++)
			free(blocks[i]);
		if (r == 0)
			f0 = faults();
	}
	f1 = faults();
	end = vmrss_kib();
	if (start < 0 || peak < 0 || end < 0 || f0 < 0 || f1 < 0) {
		fprintf(stderr, "sd_memreturn: no VmRSS or rusage\n");
		return 1;
	}
	printf("start %ld peak %ld end %ld pool %d faults %ld\n", start, peak,
	       end, pool, f1 - f0);
	return 0;
}
