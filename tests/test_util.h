/* test_util.h - helpers shared by the tests: a tiny check/report harness, dtype
 * conversions for building inputs, and comparison against float64 results with the
 * SEMANTICS.md tolerances. */
#ifndef DA_TEST_UTIL_H
#define DA_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "dilattn.h"

extern int tu_passed, tu_failed;

#define TU_CHECK(cond, ...)                                    \
  do {                                                         \
    if (cond) {                                                \
      tu_passed++;                                             \
    } else {                                                   \
      tu_failed++;                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                            \
      fputc('\n', stderr);                                     \
    }                                                          \
  } while (0)

/* Print "N passed, M failed" and return the exit status. */
int tu_report(void);

/* fn(ctx, i, user) for i in [0, n), on `threads` threads that take the next index in turn
 * (the library's queue, da__parallel_for), each job with a context of its own (compile
 * matrices: a job's time varies). fn must not TU_CHECK: the counters are not atomic. */
void tu_parallel_jobs(int n, int threads, void (*fn)(da_context *ctx, int i, void *user), void *user);

/* A LongNet spec (mod offsets, no mask) of nb branches w[i], r[i]: H query and Hkv key /
 * value heads of head_dim D in dtype t. */
da_spec tu_spec(int nb, const int64_t *w, const int64_t *r, int H, int Hkv, int D, da_dtype t);

/* Element conversions for inputs in any dtype. */
double tu_load(da_dtype t, const void *p, int64_t i);
void tu_store(da_dtype t, void *p, int64_t i, double x); /* rounds to nearest */
size_t tu_elem_size(da_dtype t);

/* tu_compare's tolerances: out's (absolute, scaled by vmax, V's largest magnitude) and
 * lse's (absolute), by dtype. */
void tu_tolerances(da_dtype t, double vmax, double *tol_out, double *tol_lse);
/* Compare out (dtype t, [B,N,H,D]) and lse ([B,H,N] fp32) against float64 expectations
 * with the SEMANTICS.md tolerances relative to vmax = max|v|. Writes the errors seen.
 * Returns 1 when within tolerance. */
int tu_compare(da_dtype t, int64_t count_out, const void *out, const double *ref_out,
               int64_t count_lse, const float *lse, const double *ref_lse, double vmax,
               double *err_out, double *err_lse);

/* Deterministic generator for test data (splitmix64 stream). */
uint64_t tu_rand(uint64_t *state);
double tu_uniform(uint64_t *state); /* [0, 1) */

#endif
