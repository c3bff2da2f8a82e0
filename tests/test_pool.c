/* test_pool.c - the host memory pool: bucket reuse and stats, DILATTN_POOL=0 passing
 * straight through, and the plan contract: after one warm-up execution, 100 executions of
 * the same plan (fused and split strategies) make no raw allocation.
 * Run: build/tests/test_pool   (ctest -R pool) */
#include <stdlib.h>
#include <string.h>

#include "runtime/pool.h"
#include "test_util.h"

/* Count every heap allocation the process makes while `counting` is set: the library, its
 * threads and the generated kernels all resolve malloc to these. Not under AddressSanitizer
 * (-DDILATTN_SANITIZE=ON): it owns malloc, and replacing it trips its own checks; the
 * pool's counters are checked there still. */
#if defined(__SANITIZE_ADDRESS__)
#define DA_COUNT_MALLOC 0
static volatile int counting;
static long raw_calls;
#else
#define DA_COUNT_MALLOC 1
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
#endif

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
  /* an allocation the system refuses (2^58 bytes) is no allocation made */
  TU_CHECK(da__pool_alloc(p, (size_t)1 << 58) == NULL, "2^58 bytes allocated?");
  da__pool_stats(p, &s);
  TU_CHECK(s.allocation_count == 3 && s.total_allocated == 8192 + 4096 + 16384,
           "after a failed allocation: count %llu (want 3), total %zu", (unsigned long long)s.allocation_count,
           s.total_allocated);
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

/* LongNet w = 64, 128, r = 1, 2 at H = 4, D = 32 (fp32), Hkv kv heads. */
static da_spec two_branches(int hkv) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 64, s.segment_lengths[1] = 128;
  s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
  s.num_heads = 4, s.num_kv_heads = hkv, s.head_dim = 32;
  return s;
}

static void test_plans(void) {
  da_context *ctx;
  da_context_create(&ctx);
  da_spec s = two_branches(2);
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
    TU_CHECK(!DA_COUNT_MALLOC || raw_calls == 0, "%s: 100 executions called malloc/calloc/realloc %ld times",
             da_plan_strategy(plan), raw_calls);
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

/* The workspace contract on the host backend: da_plan_workspace_min_size is one worker's
 * rows; a caller's workspace between it and da_plan_workspace_size runs fewer workers with
 * the same results, one below it is refused; DILATTN_WORKSPACE_LIMIT bounds the workspace a
 * plan allocates (read when the plan is made; malformed: plan creation fails). */
static void test_workspace(void) {
  da_context *ctx;
  da_context_create(&ctx);
  da_spec s = two_branches(4);
  const int64_t B = 2, N = 300;
  const size_t nq = (size_t)(B * N * 4 * 32), nl = (size_t)(B * 4 * N);
  float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nq * 4), *out1 = malloc(nq * 4), *out2 = malloc(nq * 4);
  float *lse1 = malloc(nl * 4), *lse2 = malloc(nl * 4);
  uint64_t st = 77;
  for (size_t i = 0; i < nq; i++) q[i] = (float)tu_uniform(&st) - 0.5f, k[i] = (float)tu_uniform(&st) - 0.5f,
                                   v[i] = (float)tu_uniform(&st) - 0.5f;
  const char *env_names[2] = {"DILATTN_NUM_THREADS", "DILATTN_WORKSPACE_LIMIT"};
  char *env_saved[2];
  for (int i = 0; i < 2; i++) env_saved[i] = getenv(env_names[i]) ? strdup(getenv(env_names[i])) : NULL;
  unsetenv("DILATTN_WORKSPACE_LIMIT");
  setenv("DILATTN_NUM_THREADS", "4", 1);
  da_plan_options split = {0, 0, 1 << 30, 0, 0};
  da_plan *plan = NULL;
  TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan) == DA_OK, "plan: %s", da_context_last_error(ctx));
  if (plan) {
    const size_t one = (size_t)N * 33 * 4;
    size_t most = 0, least = 0;
    TU_CHECK(da_plan_workspace_size(plan, B, N, &most) == DA_OK && most == 4 * one, "workspace size %zu, %zu expected",
             most, 4 * one);
    TU_CHECK(da_plan_workspace_min_size(plan, B, N, &least) == DA_OK && least == one, "min size %zu, %zu expected", least,
             one);
    da_args a;
    da_args_init(&a, &s, B, N, q, k, v, out1, lse1);
    TU_CHECK(da_plan_execute(plan, &a) == DA_OK, "execute: %s", da_context_last_error(ctx));
    float *ws = malloc(most);
    const size_t given[3] = {least, least * 2 + 100, most};
    for (int i = 0; i < 3; i++) {
      da_args_init(&a, &s, B, N, q, k, v, out2, lse2);
      memset(out2, 0xff, nq * 4);
      a.workspace = ws, a.workspace_bytes = given[i];
      TU_CHECK(da_plan_execute(plan, &a) == DA_OK, "workspace of %zu bytes: %s", given[i], da_context_last_error(ctx));
      TU_CHECK(!memcmp(out1, out2, nq * 4) && !memcmp(lse1, lse2, nl * 4), "workspace of %zu bytes: other results",
               given[i]);
    }
    a.workspace_bytes = least - 1;
    TU_CHECK(da_plan_execute(plan, &a) == DA_ERR_INVALID_ARGUMENT, "a workspace below the least was taken");
    a.workspace_bytes = 0; /* a pointer without a size: no bytes */
    TU_CHECK(da_plan_execute(plan, &a) == DA_ERR_INVALID_ARGUMENT, "a workspace of 0 bytes was taken");
    free(ws);
    da_plan_destroy(plan);
  }
  static const struct {
    const char *text;
    size_t bytes; /* 0: refused */
  } limits[] = {{"100000", 100000}, {"2M", 2u << 20}, {"1KiB", 1024}, {"3kb", 3072}, {"1G", 1u << 30},
                {"abc", 0},        {"0", 0},          {"-5", 0},      {"12X", 0},     {"4MiBs", 0},
                {" -1", 0},        {"\t5", 0},        {"5 ", 0},      {"4B", 0},      {"16777216T", 0},
                {"+5", 0},         {"0x10", 0},       {"1e3", 0},     {"18446744073709551615", 0},
                {"16777215T", (size_t)16777215 << 40}, {"18014398509481983K", (size_t)18014398509481983u << 10}};
  for (int i = 0; i < (int)(sizeof limits / sizeof limits[0]); i++) {
    setenv("DILATTN_WORKSPACE_LIMIT", limits[i].text, 1);
    plan = NULL;
    da_status rc = da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan);
    if (!limits[i].bytes) {
      TU_CHECK(rc == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "DILATTN_WORKSPACE_LIMIT"),
               "DILATTN_WORKSPACE_LIMIT=%s: plan creation gave %s", limits[i].text, da_status_name(rc));
      da_plan_destroy(plan);
      continue;
    }
    TU_CHECK(rc == DA_OK, "DILATTN_WORKSPACE_LIMIT=%s: %s", limits[i].text, da_context_last_error(ctx));
    if (!plan) continue;
    const size_t one = (size_t)N * 33 * 4, workers = limits[i].bytes / one;
    size_t most = 0;
    da_plan_workspace_size(plan, B, N, &most);
    TU_CHECK(most == (workers > 4 ? 4 : workers ? workers : 1) * one, "DILATTN_WORKSPACE_LIMIT=%s: workspace size %zu",
             limits[i].text, most);
    da_args a;
    da_args_init(&a, &s, B, N, q, k, v, out2, lse2);
    rc = da_plan_execute(plan, &a);
    if (workers) {
      TU_CHECK(rc == DA_OK && !memcmp(out1, out2, nq * 4), "DILATTN_WORKSPACE_LIMIT=%s: %s", limits[i].text,
               da_context_last_error(ctx));
    } else {
      TU_CHECK(rc == DA_ERR_NO_MEMORY && strstr(da_context_last_error(ctx), "DILATTN_WORKSPACE_LIMIT"),
               "DILATTN_WORKSPACE_LIMIT=%s below one worker's rows: %s (%s)", limits[i].text, da_status_name(rc),
               da_context_last_error(ctx));
    }
    da_plan_destroy(plan);
  }
  unsetenv("DILATTN_WORKSPACE_LIMIT");
  /* DILATTN_NUM_THREADS that is not a number of threads: the default (the online CPUs, one
   * worker's rows each here), as unset, not the digits before the junk (it took "2x" for 2,
   * "abc" for 1) */
  static const char *const threads[] = {"abc", "3x", " 3", "+3", "0x3", "-3"};
  size_t dflt = 0;
  unsetenv("DILATTN_NUM_THREADS");
  plan = NULL;
  if (da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan) == DA_OK) da_plan_workspace_size(plan, B, N, &dflt);
  da_plan_destroy(plan);
  for (int i = 0; i < (int)(sizeof threads / sizeof threads[0]); i++) {
    setenv("DILATTN_NUM_THREADS", threads[i], 1);
    size_t got = 0;
    plan = NULL;
    TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan) == DA_OK &&
                 da_plan_workspace_size(plan, B, N, &got) == DA_OK && got == dflt,
             "DILATTN_NUM_THREADS=%s: workspace %zu, %zu as unset", threads[i], got, dflt);
    da_plan_destroy(plan);
  }
  /* digits past a long are a larger number than 256: 256, as 1000 is (README), not junk */
  size_t many[2] = {0, 1};
  for (int i = 0; i < 2; i++) {
    setenv("DILATTN_NUM_THREADS", i ? "99999999999999999999" : "1000", 1);
    plan = NULL;
    if (da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan) == DA_OK) da_plan_workspace_size(plan, B, N, &many[i]);
    da_plan_destroy(plan);
  }
  TU_CHECK(many[0] == many[1] && many[0] >= dflt, "DILATTN_NUM_THREADS=99999999999999999999: workspace %zu, %zu at 1000",
           many[1], many[0]);
  setenv("DILATTN_NUM_THREADS", "3", 1);
  size_t three = 0;
  plan = NULL;
  TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &split, &plan) == DA_OK &&
               da_plan_workspace_size(plan, B, N, &three) == DA_OK && three == 3 * (size_t)N * 33 * 4,
           "DILATTN_NUM_THREADS=3: workspace %zu", three);
  da_plan_destroy(plan);
  plan = NULL; /* a fused plan needs none */
  size_t none = 1, none_min = 1;
  TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, NULL, &plan) == DA_OK && !strcmp(da_plan_strategy(plan), "fused") &&
               da_plan_workspace_size(plan, B, N, &none) == DA_OK && da_plan_workspace_min_size(plan, B, N, &none_min) == DA_OK &&
               none == 0 && none_min == 0,
           "fused plan: workspace %zu / %zu", none, none_min);
  da_plan_destroy(plan);
  for (int i = 0; i < 2; i++) { /* the caller's environment back */
    if (env_saved[i]) setenv(env_names[i], env_saved[i], 1);
    else unsetenv(env_names[i]);
    free(env_saved[i]);
  }
  free(q), free(k), free(v), free(out1), free(out2), free(lse1), free(lse2);
  da_context_destroy(ctx);
}

int main(void) {
  test_unit();
  test_plans();
  test_workspace();
  return tu_report();
}
