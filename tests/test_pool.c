/* test_pool.c - the host memory pool: bucket reuse and stats, DILATTN_POOL=0 passing
 * straight through, and the plan contract: after one warm-up execution, 100 executions of
 * the same plan (fused and split strategies) make no raw allocation.
 * Run: build/tests/test_pool   (ctest -R pool) */
#include <stdlib.h>
#include <string.h>

#include "runtime/pool.h"
#include "test_util.h"

/* Count every heap allocation the process makes while `counting` is set: the library, its
 * threads and the generated kernels all resolve malloc to these. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static volatile int counting;
static long raw_calls;
void *malloc(size_t n) {
  if (counting) __atomic_add_fetch(&raw_calls, 1, __ATOMIC_RELAXED);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (counting) __atomic_add_fetch(&raw_calls, 1, __ATOMIC_RELAXED);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (counting) __atomic_add_fetch(&raw_calls, 1, __ATOMIC_RELAXED);
  return __libc_realloc(p, n);
}

static void test_unit(void) {
  da__pool *p = da__pool_create();
  da_pool_stats s;
  void *a = da__pool_alloc(p, 5000), *b = da__pool_alloc(p, 100);
  memset(a, 1, 5000);
  memset(b, 2, 100);
  da__pool_stats(p, &s);
  TU_CHECK(s.allocation_count == 2 && s.total_allocated == 8192 + 4096 && s.peak_allocated == s.total_allocated,
           "after 2 allocs: count %llu total %zu peak %zu", (unsigned long long)s.allocation_count, s.total_allocated,
           s.peak_allocated);
  da__pool_free(p, a, 5000);
  void *c = da__pool_alloc(p, 6000); /* same 8 KiB bucket: reused */
  TU_CHECK(c == a, "bucket not reused");
  da__pool_stats(p, &s);
  TU_CHECK(s.allocation_count == 2 && s.reuse_rate > 0.3 && s.reuse_rate < 0.34, "reuse: count %llu rate %g",
           (unsigned long long)s.allocation_count, s.reuse_rate);
  void *d = da__pool_alloc(p, 9000); /* next bucket: raw */
  da__pool_stats(p, &s);
  TU_CHECK(s.allocation_count == 3 && s.total_allocated == 8192 + 4096 + 16384, "third bucket");
  da__pool_free(p, b, 100), da__pool_free(p, c, 6000), da__pool_free(p, d, 9000);
  da__pool_destroy(p);

  setenv("DILATTN_POOL", "0", 1);
  p = da__pool_create();
  for (int i = 0; i < 10; i++) da__pool_free(p, da__pool_alloc(p, 1000), 1000);
  da__pool_stats(p, &s);
  TU_CHECK(s.allocation_count == 10 && s.reuse_rate == 0 && s.total_allocated == 0 && s.peak_allocated == 1000,
           "DILATTN_POOL=0: count %llu reuse %g total %zu", (unsigned long long)s.allocation_count, s.reuse_rate,
           s.total_allocated);
  da__pool_destroy(p);
  unsetenv("DILATTN_POOL");
}

static void test_plans(void) {
  da_context *ctx;
  da_context_create(&ctx);
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 64, s.segment_lengths[1] = 128;
  s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
  s.num_heads = 4, s.num_kv_heads = 2, s.head_dim = 32;
  int64_t B = 2, N = 500;
  size_t nq = (size_t)(B * N * 4 * 32), nk = (size_t)(B * N * 2 * 32);
  float *q = calloc(nq, 4), *k = calloc(nk, 4), *v = calloc(nk, 4), *out = calloc(nq, 4), *lse = calloc((size_t)(B * 4 * N), 4);
  da_plan_options opts[2] = {{0, 0, 0, 0, 0}, {0, 0, 1 << 30, 0, 0}}; /* fused, then split (needs workspace) */
  for (int o = 0; o < 2; o++) {
    da_plan *plan = NULL;
    TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &opts[o], &plan) == DA_OK, "plan: %s", da_context_last_error(ctx));
    if (!plan) continue;
    da_args a;
    da_args_init(&a, &s, B, N, q, k, v, out, lse);
    TU_CHECK(da_plan_execute(plan, &a) == DA_OK, "warm-up");
    da_pool_stats before, after;
    da_context_pool_stats(ctx, &before);
    raw_calls = 0;
    counting = 1;
    int bad = 0;
    for (int i = 0; i < 100; i++) bad += da_plan_execute(plan, &a) != DA_OK;
    counting = 0;
    TU_CHECK(bad == 0, "%d executions failed", bad);
    TU_CHECK(raw_calls == 0, "%s: 100 executions called malloc/calloc/realloc %ld times", da_plan_strategy(plan), raw_calls);
    da_context_pool_stats(ctx, &after);
    TU_CHECK(after.allocation_count == before.allocation_count,
             "%s: 100 executions made %llu raw allocations", da_plan_strategy(plan),
             (unsigned long long)(after.allocation_count - before.allocation_count));
    TU_CHECK(after.reuse_rate > 0.9, "%s: reuse rate %g", da_plan_strategy(plan), after.reuse_rate);
    printf("%s: pool total %zu bytes, peak %zu, raw allocations %llu, reuse %.3f\n", da_plan_strategy(plan),
           after.total_allocated, after.peak_allocated, (unsigned long long)after.allocation_count, after.reuse_rate);
    da_plan_destroy(plan);
  }
  free(q), free(k), free(v), free(out), free(lse);
  da_context_destroy(ctx);
}

int main(void) {
  test_unit();
  test_plans();
  return tu_report();
}
