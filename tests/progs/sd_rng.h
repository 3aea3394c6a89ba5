// SPDX-License-Identifier: GPL-2.0
/*
 * The seeded generator of the test programs that draw random actions
 * (sd_fuzz, sd_malice): splitmix64, so that a seed replays a run.
 */
#ifndef SD_TEST_RNG_H
#define SD_TEST_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s;
};

static inline uint64_t next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline unsigned int below(struct rng *r, unsigned int n)
{
	return (unsigned int)(next(r) % n);
}

#endif
