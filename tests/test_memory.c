/* test_memory.c - the host backend works on tiles, never an N x N buffer: at N = 65,536,
 * H = 4, D = 64 the peak resident memory an execution adds stays within half of
 * q + k + v + out together, for the fused and the split strategies. The first 512
 * positions (whole segments, so independent of the rest) are checked against the
 * reference.
 * Run: build/tests/test_memory   (ctest -R memory) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "reference.h"
#include "test_util.h"

static long peak_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

int main(void) {
  const int64_t B = 1, N = 65536, H = 4, D = 64, P = 512;
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 128;
  s.segment_lengths[1] = 256;
  s.dilation_rates[0] = 1;
  s.dilation_rates[1] = 2;
  s.num_heads = (int)H;
  s.num_kv_heads = (int)H;
  s.head_dim = (int)D;
  s.causal = 1;
  size_t n = (size_t)(B * N * H * D), bytes = n * sizeof(float);
  float *q = malloc(bytes), *k = malloc(bytes), *v = malloc(bytes), *out = malloc(bytes);
  float *lse = malloc((size_t)(B * H * N) * sizeof(float));
  uint64_t st = 1;
  for (size_t i = 0; i < n; i++) {
    q[i] = (float)(2 * tu_uniform(&st) - 1);
    k[i] = (float)(2 * tu_uniform(&st) - 1);
    v[i] = (float)(2 * tu_uniform(&st) - 1);
    out[i] = 0;
  }
  memset(lse, 0, (size_t)(B * H * N) * sizeof(float));
  /* reference on the prefix */
  double *dq = malloc(sizeof(double) * (size_t)(P * H * D)), *dk = malloc(sizeof(double) * (size_t)(P * H * D));
  double *dv = malloc(sizeof(double) * (size_t)(P * H * D)), *ro = malloc(sizeof(double) * (size_t)(P * H * D));
  double *rl = malloc(sizeof(double) * (size_t)(H * P));
  for (int64_t i = 0; i < P * H * D; i++) dq[i] = q[i], dk[i] = k[i], dv[i] = v[i];
  TU_CHECK(da_ref_attention(&s, 1, P, dq, dk, dv, ro, rl) == 0, "reference");

  da_context *ctx;
  da_context_create(&ctx);
  da_plan_options variants[2] = {{0, 0, 0, 0, 0}, {0, 0, 1 << 30, 0, 0}};
  for (int vi = 0; vi < 2; vi++) {
    da_plan *plan = NULL;
    TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &variants[vi], &plan) == DA_OK, "plan: %s",
             da_context_last_error(ctx));
    if (!plan) continue;
    da_args a;
    da_args_init(&a, &s, B, N, q, k, v, out, lse);
    long before = peak_kib();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    TU_CHECK(da_plan_execute(plan, &a) == DA_OK, "execute: %s", da_context_last_error(ctx));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long grown = peak_kib() - before;
    double limit_kib = 4.0 * (double)bytes / 1024 / 2;
    printf("%s: peak grew %ld KiB during execute (limit %.0f KiB = half of q+k+v+out), %.2f s\n",
           da_plan_strategy(plan), grown, limit_kib,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    TU_CHECK(grown <= limit_kib, "%s: execute grew the peak by %ld KiB, more than %.0f KiB",
             da_plan_strategy(plan), grown, limit_kib);
    /* prefix against the reference: out is [1, N, H, D], lse [1, H, N] */
    double eo = 0, el = 0;
    for (int64_t p = 0; p < P; p++)
      for (int64_t h = 0; h < H; h++) {
        for (int64_t d = 0; d < D; d++) {
          double e = fabs(out[(p * H + h) * D + d] - ro[(p * H + h) * D + d]);
          eo = e > eo ? e : eo;
        }
        double e = fabs(lse[h * N + p] - rl[h * P + p]);
        el = e > el ? e : el;
      }
    TU_CHECK(eo <= 2e-5 && el <= 1e-4, "%s: prefix out err %.3g lse err %.3g", da_plan_strategy(plan), eo, el);
    int nan = 0;
    for (size_t i = 0; i < n; i++) nan |= isnan(out[i]);
    TU_CHECK(!nan, "NaN in out");
    da_plan_destroy(plan);
  }
  da_context_destroy(ctx);
  free(q), free(k), free(v), free(out), free(lse), free(dq), free(dk), free(dv), free(ro), free(rl);
  return tu_report();
}
