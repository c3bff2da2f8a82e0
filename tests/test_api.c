/* test_api.c - the public API refuses what it cannot do right, with a status and a detail
 * that names the problem, instead of crashing, overflowing or computing a wrong answer:
 * invalid specs reach no array (explicit masks), shapes and strides whose tensors pass
 * 2^63 bytes, outputs that overlap their inputs, each other or themselves, misaligned
 * pointers, a contextless failure that would erase a context's detail, a second linked
 * bundle taken for the first, a directory given as a manifest, seeds from 2^63 in JSON.
 * Host backend (every check here comes before a backend runs).
 * Run: build/tests/test_api */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "reference.h"
#include "runtime/fileio.h"
#include "runtime/tuning_db.h"

#include <jansson.h>
#include "test_util.h"

static da_spec small_spec(void) {
  return tu_spec(2, (const int64_t[]){8, 16}, (const int64_t[]){1, 2}, 2, 1, 8, DA_DTYPE_FLOAT32);
}

static int has(const da_context *ctx, const char *what) { return strstr(da_context_last_error(ctx), what) != NULL; }

/* A context whose kernel cache is a new temp folder (dir: a mkdtemp template, filled in;
 * DILATTN_CACHE_DIR set to it): kernels are compiled, not found. */
static da_context *context_in_temp_cache(char *dir) {
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("DILATTN_CACHE_DIR", dir, 1);
  da_context *ctx = NULL;
  da_context_create(&ctx);
  return ctx;
}

/* a test's temp folder and what it holds, gone */
static void rm_tree(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  TU_CHECK(system(cmd) == 0, "rm %s", dir);
}

static void test_explicit_specs(da_context *ctx) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 1, s.segment_lengths[0] = 4, s.dilation_rates[0] = 1;
  s.sparsity.layout = DA_LAYOUT_EXPLICIT, s.sparsity.block = 1; /* mask left NULL */
  da_plan *p = (da_plan *)1;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_ERR_INVALID_SPEC && p == (da_plan *)1 &&
               has(ctx, "explicit_masks[0]: NULL"),
           "explicit layout without a mask: %s", da_context_last_error(ctx));
  static uint8_t mask[16];
  for (int i = 0; i < DA_MAX_BRANCHES; i++) s.sparsity.explicit_masks[i] = mask;
  s.num_branches = 40; /* past the arrays */
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_ERR_INVALID_SPEC && has(ctx, "40 branches given"),
           "40 branches with masks: %s", da_context_last_error(ctx));
  s.num_branches = 1, s.segment_lengths[0] = (int64_t)1 << 40; /* a 2^40 x 2^40 mask */
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_ERR_INVALID_SPEC && has(ctx, "larger block"),
           "an explicit mask of 2^80 bytes: %s", da_context_last_error(ctx));
  /* da_spec_explicit_blocks: -1 past the arrays, no overflow at the extremes */
  s.num_branches = 100000;
  TU_CHECK(da_spec_explicit_blocks(&s, 99999) == -1 && da_spec_explicit_blocks(&s, DA_MAX_BRANCHES) == -1,
           "explicit blocks past DA_MAX_BRANCHES");
  s.num_branches = 1, s.segment_lengths[0] = INT64_MAX, s.dilation_rates[0] = 1, s.sparsity.block = INT64_MAX;
  TU_CHECK(da_spec_explicit_blocks(&s, 0) == 1, "ceil(INT64_MAX / INT64_MAX): %lld",
           (long long)da_spec_explicit_blocks(&s, 0));
  s.dilation_rates[0] = 2, s.sparsity.block = 1;
  TU_CHECK(da_spec_explicit_blocks(&s, 0) == INT64_MAX / 2 + 1, "ceil(INT64_MAX / 2)");
  /* and a valid explicit spec still runs */
  s.num_branches = 1, s.segment_lengths[0] = 4, s.dilation_rates[0] = 1, s.sparsity.block = 1;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "valid explicit spec: %s", da_context_last_error(ctx));
  if (p != (da_plan *)1) da_plan_destroy(p);
}

static void test_tensors(da_context *ctx) {
  da_spec s = small_spec();
  da_plan *p;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "plan: %s", da_context_last_error(ctx));
  const int64_t B = 1, N = 16, nq = B * N * 2 * 8, nk = B * N * 1 * 8;
  float *q = calloc(nq, 4), *k = calloc(nk, 4), *v = calloc(nk, 4), *o = calloc(nq, 4), *lse = calloc(B * 2 * N, 4);
  float *o0 = calloc(nq, 4);
  for (int64_t i = 0; i < nq; i++) q[i] = (float)((i * 7919) % 13) / 13.f - 0.5f;
  for (int64_t i = 0; i < nk; i++) k[i] = (float)((i * 104729) % 11) / 11.f - 0.5f, v[i] = (float)(i % 5) - 2.f;
  da_args a;
  da_args_init(&a, &s, B, N, q, k, v, o, lse);
  TU_CHECK(da_plan_execute(p, &a) == DA_OK, "plain run: %s", da_context_last_error(ctx));
  memcpy(o0, o, nq * 4);

  da_args b;
#define EXPECT(label, detail)                                                                                    \
  TU_CHECK(da_plan_execute(p, &b) == DA_ERR_INVALID_ARGUMENT && has(ctx, detail), "%s: %s", label,              \
           da_context_last_error(ctx))
  b = a, b.batch = INT64_MAX / 2;
  EXPECT("batch INT64_MAX / 2", "spans more than 2^63");
  b = a, b.k_stride[1] = INT64_MAX / 4;
  EXPECT("k_stride[1] INT64_MAX / 4", "k: batch");
  b = a, b.out_stride[1] = 0;
  EXPECT("out rows on one another (stride 0)", "of out overlap");
  b = a, b.out_stride[2] = 4; /* heads 4 elements apart, 8 wide */
  EXPECT("out heads overlapping", "of out overlap");
  b = a, b.out = q;
  EXPECT("out == q", "out overlaps q");
  b = a, b.out = k, b.out_stride[0] = b.out_stride[1] = 0; /* out's rows overlap before k is looked at */
  EXPECT("out on k with 0 strides", "of out overlap");
  b = a, b.lse = q + 3;
  EXPECT("lse inside q", "lse overlaps q");
  b = a, b.lse = (float *)o + 8;
  EXPECT("lse inside out", "lse overlaps out");
  b = a, b.workspace = o, b.workspace_bytes = 64;
  EXPECT("workspace on out", "workspace overlaps out");
  b = a, b.workspace = (void *)(UINTPTR_MAX - 15), b.workspace_bytes = 4096; /* (used to run into it: SIGSEGV) */
  EXPECT("workspace past the end of the address space", "passes the end of the address space");
  b = a, b.q = (const char *)q + 2;
  EXPECT("q misaligned", "q (");
  b = a, b.lse = (float *)((char *)lse + 1);
  EXPECT("lse misaligned", "lse (");
  b = a, b.v_stride[2] = -1;
  EXPECT("negative stride", "must not be negative");
  /* nothing above touched out */
  TU_CHECK(!memcmp(o, o0, nq * 4), "a refused execution wrote out");
  /* q, k, v may share memory (read only), k and v with 0 strides too (one row for all) */
  b = a, b.v = k;
  TU_CHECK(da_plan_execute(p, &b) == DA_OK, "v == k: %s", da_context_last_error(ctx));
  b = a, b.k_stride[0] = 0;
  TU_CHECK(da_plan_execute(p, &b) == DA_OK, "k batch stride 0: %s", da_context_last_error(ctx));
  /* padded heads with rows packed tight: out_stride {.., 24, 16} holds 2 heads of 8 in 24 */
  {
    float *big = calloc(B * N * 24 + 64, 4);
    b = a, b.out = big, b.out_stride[0] = N * 24, b.out_stride[1] = 24, b.out_stride[2] = 16;
    TU_CHECK(da_plan_execute(p, &b) == DA_OK, "out heads padded to 16, rows of 24: %s", da_context_last_error(ctx));
    free(big);
  }
  /* q and out packed in one [B, N, 2, H, D] buffer (same strides, disjoint elements): taken,
   * and the result is the plain run's; shifted by one element they share elements: refused */
  {
    float *qo = calloc(B * N * 2 * 2 * 8 + 8, 4);
    for (int64_t n = 0; n < N; n++) memcpy(qo + n * 32, q + n * 16, 16 * 4); /* q into slot 0 */
    b = a, b.q = qo, b.out = qo + 16;
    for (int i = 0; i < 3; i++) b.q_stride[i] = b.out_stride[i] = i == 0 ? N * 32 : i == 1 ? 32 : 8;
    TU_CHECK(da_plan_execute(p, &b) == DA_OK, "q and out packed: %s", da_context_last_error(ctx));
    int same = 1;
    for (int64_t n = 0; n < N; n++) same &= !memcmp(qo + n * 32 + 16, o0 + n * 16, 16 * 4);
    TU_CHECK(same, "q and out packed: out differs from the plain run's");
    b.out = qo + 1;
    EXPECT("out one element into q (same strides)", "out overlaps q");
    b.out = qo, b.q = qo;
    EXPECT("out == q (in place)", "out overlaps q");
    free(qo);
  }
  /* q, k, v and out packed per token (2 + 1 + 1 + 2 heads of 8), k and v with head stride
   * 0 (one kv head: the stride picks nothing): taken, with the plain run's result */
  {
    float *pk = calloc(B * N * 48, 4);
    for (int64_t n = 0; n < N; n++) {
      memcpy(pk + n * 48, q + n * 16, 16 * 4);
      memcpy(pk + n * 48 + 16, k + n * 8, 8 * 4);
      memcpy(pk + n * 48 + 24, v + n * 8, 8 * 4);
    }
    b = a, b.q = pk, b.k = pk + 16, b.v = pk + 24, b.out = pk + 32;
    const int64_t st[3] = {N * 48, 48, 8}, kst[3] = {N * 48, 48, 0};
    memcpy(b.q_stride, st, sizeof st), memcpy(b.out_stride, st, sizeof st);
    memcpy(b.k_stride, kst, sizeof kst), memcpy(b.v_stride, kst, sizeof kst);
    TU_CHECK(da_plan_execute(p, &b) == DA_OK, "q, k, v, out packed, kv head stride 0: %s", da_context_last_error(ctx));
    int same = 1;
    for (int64_t n = 0; n < N; n++) same &= !memcmp(pk + n * 48 + 32, o0 + n * 16, 16 * 4);
    TU_CHECK(same, "q, k, v, out packed: out differs from the plain run's");
    free(pk);
  }
  /* a permuted out ([B, H, N, D]) is no overlap */
  b = a, b.out_stride[0] = 2 * N * 8, b.out_stride[1] = 8, b.out_stride[2] = N * 8;
  TU_CHECK(da_plan_execute(p, &b) == DA_OK, "out as [B, H, N, D]: %s", da_context_last_error(ctx));

  /* workspace sizes whose product overflows */
  size_t bytes = 7;
  TU_CHECK(da_plan_workspace_size(p, INT64_MAX / 2, 1, &bytes) == DA_ERR_INVALID_ARGUMENT && bytes == 7 &&
               has(ctx, "overflows 64 bits"),
           "workspace size of batch INT64_MAX / 2: %s", da_context_last_error(ctx));

  /* da_args_init: NULL args is nothing, NULL spec leaves strides 0, an overflowing batch
   * stride becomes one execute refuses */
  da_args_init(NULL, &s, 1, 1, q, k, v, o, NULL);
  da_args_init(&b, NULL, 1, 16, q, k, v, o, NULL);
  TU_CHECK(b.q == q && b.seq_len == 16 && b.q_stride[0] == 0 && b.q_stride[2] == 0, "args_init(spec NULL)");
  da_args_init(&b, &s, 1, (int64_t)1 << 62, q, k, v, o, NULL);
  TU_CHECK(b.q_stride[0] == INT64_MAX, "args_init: overflowing batch stride %lld", (long long)b.q_stride[0]);

  free(q), free(k), free(v), free(o), free(o0), free(lse);
  da_plan_destroy(p);
}

/* The overlap checks against brute force on random small layouts in one buffer: an out
 * that shares an element with q (or its own) is refused; one with q's strides that shares
 * none, and elements of its own that are distinct, is taken. */
static void test_overlap_property(da_context *ctx) {
  uint64_t rng = 0x9e3779b97f4a7c15ull;
#define RND(n) ((int64_t)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (n))
  int refused_bad = 0, taken_good = 0;
  for (int cfg = 0; cfg < 4; cfg++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = 1, s.segment_lengths[0] = 4, s.dilation_rates[0] = 1;
    s.num_heads = s.num_kv_heads = 1 + (cfg & 1), s.head_dim = 2 << (cfg >> 1);
    da_plan *p;
    if (da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) != DA_OK) {
      TU_CHECK(0, "plan: %s", da_context_last_error(ctx));
      continue;
    }
    enum { CAP = 4096 };
    float *buf = calloc(CAP, 4), *kv = calloc(CAP, 4);
    static uint8_t hitq[CAP], hito[CAP];
    for (int it = 0; it < 300; it++) {
      const int64_t H = s.num_heads, D = s.head_dim, N = 1 + RND(4), B = 1 + RND(2);
      int64_t st[2][3];
      for (int t = 0; t < 2; t++) { /* a permuted, maybe padded layout, or (out) junk */
        int64_t ext[3] = {B, N, H}, perm[3] = {0, 1, 2};
        for (int i = 2; i > 0; i--) {
          int j = (int)RND(i + 1), x = (int)perm[i];
          perm[i] = perm[j], perm[j] = x;
        }
        int64_t reach = D + RND(3);
        for (int i = 2; i >= 0; i--) st[t][perm[i]] = reach, reach = reach * ext[perm[i]] + RND(3);
        if (t == 1 && RND(4) == 0) { /* maybe self-overlapping */
          const int64_t i = RND(3);
          st[1][i] = RND(2 * D);
        }
        if (t == 1 && RND(2) == 0) memcpy(st[1], st[0], sizeof st[0]); /* q's strides */
      }
      const int64_t oq = RND(64), oo = RND(160);
      memset(hitq, 0, sizeof hitq), memset(hito, 0, sizeof hito);
      int over = 0, self = 0, fits = 1;
      for (int t = 0; t < 2; t++)
        for (int64_t b = 0; b < B; b++)
          for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
              for (int64_t d = 0; d < D; d++) {
                const int64_t e = (t ? oo : oq) + b * st[t][0] + n * st[t][1] + h * st[t][2] + d;
                if (e >= CAP) {
                  fits = 0;
                  continue;
                }
                if (t == 0) hitq[e] = 1;
                else self |= hito[e], over |= hitq[e], hito[e] = 1;
              }
      if (!fits) continue;
      da_args a;
      da_args_init(&a, &s, B, N, buf + oq, kv, kv, buf + oo, NULL);
      memcpy(a.q_stride, st[0], sizeof st[0]);
      memcpy(a.out_stride, st[1], sizeof st[1]);
      memset(a.k_stride, 0, sizeof a.k_stride), a.k_stride[2] = D; /* kv read only */
      memcpy(a.v_stride, a.k_stride, sizeof a.k_stride);
      const da_status r = da_plan_execute(p, &a);
      const int same = !memcmp(st[0], st[1], sizeof st[0]);
      if (self || over) {
        TU_CHECK(r == DA_ERR_INVALID_ARGUMENT, "layout %d/%d (self %d, shares with q %d) taken", cfg, it, self, over);
        refused_bad += r == DA_ERR_INVALID_ARGUMENT;
      } else if (same) {
        TU_CHECK(r == DA_OK, "layout %d/%d: disjoint, same strides, refused: %s", cfg, it, da_context_last_error(ctx));
        taken_good += r == DA_OK;
      }
    }
    free(buf), free(kv);
    da_plan_destroy(p);
  }
  TU_CHECK(refused_bad > 20 && taken_good > 20, "property: %d refused, %d taken: too few of either", refused_bad,
           taken_good);
  printf("overlap property: %d overlapping layouts refused, %d disjoint ones with q's strides taken\n", refused_bad,
         taken_good);
#undef RND
}

/* one context's failure keeps its detail when another context, or a call without one,
 * fails after it on the same thread */
static void test_last_error(void) {
  da_context *a, *b;
  da_context_create(&a);
  da_context_create(&b);
  da_spec s;
  da_spec_init(&s); /* no branches */
  da_plan *p;
  TU_CHECK(da_plan_create(a, &s, DA_BACKEND_HOST, &p) == DA_ERR_INVALID_SPEC, "a");
  TU_CHECK(da_plan_create(b, &s, (da_backend)99, &p) != DA_OK, "b");
  size_t n;
  TU_CHECK(da_plan_workspace_size(NULL, 1, 1, &n) == DA_ERR_INVALID_ARGUMENT, "no context");
  TU_CHECK(has(a, "0 branches given"), "a's detail after b and a contextless failure: '%s'", da_context_last_error(a));
  TU_CHECK(has(b, "0 branches given"), "b's detail: '%s'", da_context_last_error(b));
  TU_CHECK(has(NULL, "must not be NULL"), "the contextless detail: '%s'", da_context_last_error(NULL));
  da_context_destroy(a);
  da_context_destroy(b);
}

static void test_bundles_and_json(da_context *ctx) {
  /* a second unnamed linked bundle is its own bundle: an invalid one is refused */
  char good[512], bad[512];
  snprintf(good, sizeof good, "{\"format\":\"dilattn-bundle\",\"library\":\"%s\",\"schema\":%d,\"kernels\":[]}",
           da_version(), DA_CACHE_SCHEMA_VERSION);
  snprintf(bad, sizeof bad,
           "{\"format\":\"dilattn-bundle\",\"library\":\"%s\",\"schema\":%d,\"kernels\":[{\"kernel\":\"K2\"}]}",
           da_version(), DA_CACHE_SCHEMA_VERSION);
  da_bundle_data A = {NULL, good, strlen(good), 0, NULL, NULL, NULL}, Bd = {NULL, bad, strlen(bad), 0, NULL, NULL, NULL};
  TU_CHECK(da_context_register_bundle_data(ctx, &A) == DA_OK, "good linked bundle: %s", da_context_last_error(ctx));
  TU_CHECK(da_context_register_bundle_data(ctx, &Bd) == DA_ERR_PARSE && has(ctx, "kernels[0]"),
           "a second, invalid linked bundle: %s", da_context_last_error(ctx));
  /* a directory is no manifest */
  TU_CHECK(da_context_register_bundle(ctx, "/") == DA_ERR_IO && has(ctx, "directory"),
           "register_bundle(\"/\"): %s", da_context_last_error(ctx));

  /* seeds from 2^63: written as their bit pattern, read back */
  da_spec s = small_spec(), r;
  s.sparsity.layout = DA_LAYOUT_RANDOM, s.sparsity.block = 4, s.sparsity.density = 0.5;
  s.sparsity.seed = UINT64_MAX - 5;
  char *js = da_spec_to_json(&s), msg[256] = "";
  TU_CHECK(js && da_spec_from_json(js, strlen(js), &r, msg, sizeof msg) == DA_OK && r.sparsity.seed == s.sparsity.seed,
           "seed 2^64 - 6 round trip: %s (%s)", msg, js ? js : "no JSON");
  free(js);
}

/* DILATTN_BACKEND picks the backend of AUTO plans only: a backend the caller names wins
 * (a host plan given a program's device pointers would read them as host memory) */
static void test_backend_env(da_context *ctx) {
  da_spec s = small_spec();
  da_plan *p = NULL;
  setenv("DILATTN_BACKEND", "host", 1);
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_AUTO, &p) == DA_OK && da_plan_backend(p) == DA_BACKEND_HOST,
           "DILATTN_BACKEND=host, AUTO: %s", da_context_last_error(ctx));
  da_plan_destroy(p), p = NULL;
  const da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &p);
  TU_CHECK(st == DA_OK ? da_plan_backend(p) == DA_BACKEND_CUDA : st == DA_ERR_UNSUPPORTED && !p,
           "DILATTN_BACKEND=host, CUDA asked for: %s, a %s plan", da_status_name(st),
           p && da_plan_backend(p) == DA_BACKEND_HOST ? "host" : "CUDA or no");
  da_plan_destroy(p), p = NULL;
  setenv("DILATTN_BACKEND", "cuda", 1);
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK && da_plan_backend(p) == DA_BACKEND_HOST,
           "DILATTN_BACKEND=cuda, host asked for: %s", da_context_last_error(ctx));
  da_plan_destroy(p), p = NULL;
  setenv("DILATTN_BACKEND", "gpu", 1);
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_ERR_INVALID_ARGUMENT && has(ctx, "DILATTN_BACKEND"),
           "DILATTN_BACKEND=gpu: %s", da_context_last_error(ctx));
  unsetenv("DILATTN_BACKEND");
}

/* CC is words, as make takes it: "cc -O1" runs cc with -O1 (it was one program name);
 * DILATTN_DUMP_DIR gets the host kernel's source too (it got NVRTC's only) */
static void test_cc_words(void) {
  /* an empty kernel cache of its own: the kernel is compiled here, not found */
  char dir[] = "/tmp/dilattn-test-api-XXXXXX";
  da_context *ctx = context_in_temp_cache(dir);
  da_spec s = small_spec();
  da_plan *p = NULL;
  setenv("CC", "cc -O1 -DDA_TEST_CC_WORDS", 1);
  char dump[300], file[600];
  snprintf(dump, sizeof dump, "%s/dump/sub", dir); /* DILATTN_DUMP_DIR: its folders are made */
  setenv("DILATTN_DUMP_DIR", dump, 1);
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "CC='cc -O1 ...': %s", da_context_last_error(ctx));
  snprintf(file, sizeof file, "%s/%s.c", dump, p ? da_plan_kernel_name(p) : "");
  FILE *f = fopen(file, "r");
  TU_CHECK(f != NULL, "DILATTN_DUMP_DIR: no host source %s", file);
  if (f) fclose(f);
  /* another variant of the same kernel (other tiles: the same name, another source) keeps
   * its own dump beside the first, <kernel>.<12 hex>.c (it replaced the first: helper-55) */
  char cmd[800];
  snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) = 1", dump);
  TU_CHECK(system(cmd) == 0, "DILATTN_DUMP_DIR: one dump for one kernel");
  da_plan_options o = {16, 8, 0, 0, 0};
  da_plan *p2 = NULL;
  TU_CHECK(da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &o, &p2) == DA_OK && p && p2 &&
               !strcmp(da_plan_kernel_name(p), da_plan_kernel_name(p2)) &&
               strcmp(da_plan_cache_key(p), da_plan_cache_key(p2)),
           "a variant of the kernel: %s", da_context_last_error(ctx));
  snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) = 2 && ls '%s' | grep -q '\\.[0-9a-f]\\{12\\}\\.c$'", dump, dump);
  TU_CHECK(system(cmd) == 0, "DILATTN_DUMP_DIR: a variant's dump is not beside the first (%s)", dump);
  da_plan_destroy(p2);
  unsetenv("DILATTN_DUMP_DIR");
  da_plan_destroy(p), p = NULL;
  /* a wrapper first (ccache cc): the words before the first option are the command */
  setenv("CC", "env cc -O1 -DDA_TEST_CC_WRAPPER", 1);
  s.has_scale = 1, s.scale = 0.3125; /* not the plan above */
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "CC='env cc -O1 ...': %s", da_context_last_error(ctx));
  da_plan_destroy(p), p = NULL;
  s.has_scale = 1, s.scale = 0.3126; /* not the plans above */
  setenv("CC", " \t ", 1);
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_ERR_UNSUPPORTED && has(ctx, "names no C compiler"),
           "CC blank: %s", da_context_last_error(ctx));
  unsetenv("CC");
  da_context_destroy(ctx);
  rm_tree(dir);
  unsetenv("DILATTN_CACHE_DIR");
}

/* The instruction of a CUDA plan whose options leave cuda_mma 0 (dilattn.h: the default,
 * with tunables set or not). Before, a request that set fused_min_queries (to force the
 * split tiling, as bench_gpu.py's 0x0/split did) or a tuning record of the default
 * candidate (all 0) rendered mma.sync on sm_90 devices, 0.6x the warp-specialized kernel
 * (bench/results/gpu-h200-117dd5d-check_full.json: every /split kernel lacks _wgmmaw). */
static void test_default_mma(void) {
  da_plan_options o, eff;
  int fb = -1;
  memset(&o, 0, sizeof o);
  /* serves 2: sm_90, a driver and NVRTC of CUDA 12.1 or later: wgmma-ws-tma */
  const da_plan_options *r = da__default_mma(NULL, 0, 2, 0, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 6 && !eff.tile_q && fb == DA__FALLBACK_WS,
           "no options on sm_90: warp-specialized with TMA, wgmma-ws if it fails (%d, %d)", r ? r->cuda_mma : -1, fb);
  r = da__default_mma(NULL, 0, 2, 1, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 4 && !fb, "no options on sm_90, a sparse layout: warp-specialized (%d)",
           r ? r->cuda_mma : -1);
  /* serves 1: kernel parameters stop at 4 KiB (before CUDA 12.1): wgmma-ws */
  r = da__default_mma(NULL, 0, 1, 0, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 4 && !eff.tile_q && !fb, "no options, a CUDA 12.0 driver: warp-specialized (%d)",
           r ? r->cuda_mma : -1);
  r = da__default_mma(&o, 0, 2, 0, &eff, &fb); /* a tuning record of the default candidate */
  TU_CHECK(r == &eff && eff.cuda_mma == 6 && fb == DA__FALLBACK_WS, "all-zero options on sm_90: the default");
  o.fused_min_queries = 1 << 30; /* force split */
  r = da__default_mma(&o, 0, 2, 0, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 6 && eff.fused_min_queries == 1 << 30 &&
               fb == (DA__FALLBACK_WS | DA__FALLBACK_SYNC),
           "fused_min_queries set, cuda_mma 0: the default with the option kept, wgmma-ws then mma.sync if refused "
           "(%d, %d)",
           r->cuda_mma, fb);
  o.fused_min_queries = 0, o.tile_q = 64;
  r = da__default_mma(&o, 5, 1, 1, &eff, &fb); /* DILATTN_CUDA_MMA=wgmma-ws-p2, sparse */
  TU_CHECK(r == &eff && eff.cuda_mma == 4 && eff.tile_q == 64 && fb == DA__FALLBACK_SYNC,
           "wgmma-ws-p2 under a sparse layout: 4");
  r = da__default_mma(&o, 5, 1, 0, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 5, "wgmma-ws-p2 from the environment");
  r = da__default_mma(&o, 6, 1, 1, &eff, &fb); /* DILATTN_CUDA_MMA=wgmma-ws-tma, sparse */
  TU_CHECK(r == &eff && eff.cuda_mma == 4, "wgmma-ws-tma under a sparse layout: 4");
  r = da__default_mma(&o, 6, 1, 0, &eff, &fb);
  TU_CHECK(r == &eff && eff.cuda_mma == 6 && fb == DA__FALLBACK_SYNC, "wgmma-ws-tma from the environment (no wgmma-ws "
           "fallback: it was asked for)");
  r = da__default_mma(&o, 1, 1, 0, &eff, &fb); /* DILATTN_CUDA_MMA=sync */
  TU_CHECK(r == &o && !fb, "DILATTN_CUDA_MMA=sync: the options as given");
  r = da__default_mma(&o, 0, 0, 0, &eff, &fb); /* not an sm_90 device, or a spec wgmma does not serve */
  TU_CHECK(r == &o && !fb, "no wgmma path: the options as given (mma.sync)");
  o.cuda_mma = 1;
  r = da__default_mma(&o, 0, 2, 0, &eff, &fb);
  TU_CHECK(r == &o && !fb, "cuda_mma named: kept");
}

/* A program that ignores SIGCHLD (daemons, servers) has its children reaped for it:
 * waitpid fails with ECHILD and the compiler's exit status is lost. A failed host compile
 * must still be DA_ERR_COMPILE with the compiler's log, not a success whose kernel.so is
 * missing (it was DA_ERR_IO "cannot read back .../kernel.so"). */
static void test_sigchld_ignored(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX";
  da_context *ctx = context_in_temp_cache(dir);
  da_spec s = small_spec();
  s.has_scale = 1, s.scale = 0.4375; /* a kernel of its own */
  setenv("CC", "false", 1);
  const char *tmpdir = getenv("TMPDIR");
  char *saved_tmp = tmpdir ? strdup(tmpdir) : NULL;
  setenv("TMPDIR", dir, 1); /* the failed build's folder, kept for inspection, goes with dir */
  void (*old)(int) = signal(SIGCHLD, SIG_IGN);
  da_plan *p = NULL;
  const da_status st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &p);
  signal(SIGCHLD, old);
  if (saved_tmp) setenv("TMPDIR", saved_tmp, 1);
  else unsetenv("TMPDIR");
  free(saved_tmp);
  TU_CHECK(st == DA_ERR_COMPILE && !p && has(ctx, "host compile: false failed"),
           "CC=false under SIGCHLD ignored: %s: %s", da_status_name(st), da_context_last_error(ctx));
  da_plan_destroy(p);
  unsetenv("CC");
  da_context_destroy(ctx);
  rm_tree(dir);
  unsetenv("DILATTN_CACHE_DIR");
}

/* A scratch folder (dir, a mkdtemp template) with the path of a tuning database in it, and
 * a context for the test */
static da_context *tuning_scratch(char *dir, char *db, size_t cap) {
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(db, cap, "%s/tuning.jsonl", dir);
  da_context *ctx;
  da_context_create(&ctx);
  return ctx;
}

/* The tuning database holds one record per (spec, backend, shape bucket, tile parameters)
 * (DESIGN.md decision 9): a sweep at another batch in the same bucket replaces the one
 * before. Records of two batches used to stand side by side and plan creation compared
 * their times: the smaller batch's fastest candidate won whatever was tuned after it
 * (`dilattn tune --batch 8` after a batch-1 sweep changed no plan). */
/* da__tuning_best's rules (helper-60, helper-62), on records in memory: under sync_only a
 * CUDA sweep's default record (no tunables: timed as the device's default instruction, wgmma
 * on sm_90) is not the mma.sync best; a correctness failure at another bucket excludes the
 * tunables, a runtime failure there (out of memory at 2^24) does not */
static void test_tuning_best_rules(void) {
  da__tune_record r[4];
  memset(r, 0, sizeof r);
  static const double ms[4] = {1.0, 2.0, 0.5, -1};
  for (int i = 0; i < 4; i++) {
    memset(r[i].spec_hash, 'b', 64);
    snprintf(r[i].backend, sizeof r[i].backend, "cuda");
    snprintf(r[i].status, sizeof r[i].status, "ok");
    r[i].seq_len = 65536, r[i].bucket = 16, r[i].reps = 3;
    r[i].median_ms = r[i].min_ms = r[i].max_ms = ms[i];
  }
  /* 0: the default's; 1: mma.sync 64 x 64; 2: wgmma-ws; 3: mma.sync 64 x 64 at 2^24, failed */
  r[1].params.cuda_mma = 1, r[1].params.tile_q = 64, r[1].params.tile_k = 64;
  r[2].params.cuda_mma = 4;
  r[3].params = r[1].params, r[3].seq_len = 1 << 24, r[3].bucket = 24;
  char hash[65];
  memset(hash, 'b', 64), hash[64] = '\0';
  const da__tune_record *b = da__tuning_best(r, 3, hash, "cuda", 16, 0);
  TU_CHECK(b == &r[2], "best of any instruction: record %d (want the wgmma-ws one, 2)", b ? (int)(b - r) : -1);
  b = da__tuning_best(r, 3, hash, "cuda", 16, 1);
  TU_CHECK(b == &r[1], "best under sync: record %d (want the mma.sync one, 1: not the default's, 0)",
           b ? (int)(b - r) : -1);
  snprintf(r[3].status, sizeof r[3].status, "runtime");
  b = da__tuning_best(r, 4, hash, "cuda", 16, 1);
  TU_CHECK(b == &r[1], "a runtime failure of its tunables at 2^24: record %d (want 1)", b ? (int)(b - r) : -1);
  snprintf(r[3].status, sizeof r[3].status, "correctness");
  b = da__tuning_best(r, 4, hash, "cuda", 16, 1);
  TU_CHECK(!b, "a correctness failure of its tunables at 2^24: record %d taken (want none)", b ? (int)(b - r) : -1);
  /* the host's default record is not skipped (no instruction there) */
  for (int i = 0; i < 3; i++) snprintf(r[i].backend, sizeof r[i].backend, "host");
  b = da__tuning_best(r, 1, hash, "host", 16, 1);
  TU_CHECK(b == &r[0], "the host's default record under sync_only: record %d (want 0)", b ? (int)(b - r) : -1);
}

static void test_tuning_batches(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX", db[200];
  da_context *ctx = tuning_scratch(dir, db, sizeof db);
  da__tune_record r[2];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 2; i++) {
    memset(r[i].spec_hash, 'a', 64);
    snprintf(r[i].backend, sizeof r[i].backend, "host");
    snprintf(r[i].status, sizeof r[i].status, "ok");
    snprintf(r[i].strategy, sizeof r[i].strategy, "fused");
    r[i].seq_len = 4096, r[i].bucket = da__tuning_bucket(4096), r[i].reps = 3;
    r[i].params.tile_q = 8 << i, r[i].params.tile_k = 16 << i; /* A: 8 x 16, B: 16 x 32 */
  }
  /* batch 1: A 1 ms, B 2 ms; then batch 8: A 10 ms, B 5 ms (B is the best of the last sweep) */
  r[0].batch = r[1].batch = 1, r[0].median_ms = 1.0, r[1].median_ms = 2.0;
  for (int i = 0; i < 2; i++) r[i].min_ms = r[i].max_ms = r[i].median_ms; /* (whole timings, as the tuner's) */
  TU_CHECK(da__tuning_db_merge(ctx, db, r, 2) == DA_OK, "merge batch 1: %s", da_context_last_error(ctx));
  r[0].batch = r[1].batch = 8, r[0].median_ms = 10.0, r[1].median_ms = 5.0;
  for (int i = 0; i < 2; i++) r[i].min_ms = r[i].max_ms = r[i].median_ms;
  TU_CHECK(da__tuning_db_merge(ctx, db, r, 2) == DA_OK, "merge batch 8: %s", da_context_last_error(ctx));
  da__tune_record *recs = NULL;
  int mismatch = 0;
  const int n = da__tuning_db_read(db, &recs, &mismatch);
  char hash[65];
  memset(hash, 'a', 64), hash[64] = '\0';
  const da__tune_record *best = n > 0 ? da__tuning_best(recs, n, hash, "host", da__tuning_bucket(4096), 0) : NULL;
  TU_CHECK(n == 2, "%d records after two sweeps of one bucket (one per tile parameters)", n);
  TU_CHECK(best && best->params.tile_q == 16 && best->batch == 8,
           "best after a batch-8 sweep: tile_q %d of batch %lld (%.1f ms)", best ? best->params.tile_q : -1,
           best ? (long long)best->batch : -1LL, best ? best->median_ms : -1.0);
  free(recs);
  da_context_destroy(ctx);
  rm_tree(dir);
}

/* A database's header fields count only where records depend on them: a file of another
 * CPU (the host's field) that holds only CUDA records takes a host sweep, its header's cpu
 * made this machine's and the CUDA records kept; with a host record of that other CPU in
 * it, the sweep is refused and nothing changes */
static void test_tuning_other_backend(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX", db[200];
  da_context *ctx = tuning_scratch(dir, db, sizeof db);
  for (int with_host = 0; with_host < 2; with_host++) {
    /* this environment's header with another cpu, a CUDA record, and (second case) a host one */
    json_t *h = json_loads(da__tuning_env(), 0, NULL);
    json_object_set_new(json_object_get(h, "env"), "cpu", json_string("another CPU"));
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    FILE *f = fopen(db, "w");
    fprintf(f, "%s\n", hs);
    static const char *const rec = "{\"backend\":\"%s\",\"batch\":1,\"bucket\":12,\"cuda_mma\":0,\"default\":true,"
                                   "\"fused_min_queries\":0,\"label\":\"\",\"max_ms\":1,\"median_ms\":1,\"min_ms\":1,\"reps\":1,"
                                   "\"seq_len\":4096,\"spec_hash\":\"%064d\",\"status\":\"ok\",\"strategy\":\"fused\","
                                   "\"tile_k\":0,\"tile_q\":0}\n";
    fprintf(f, rec, "cuda", 1);
    if (with_host) fprintf(f, rec, "host", 2);
    fclose(f);
    free(hs);
    da__tune_record r;
    memset(&r, 0, sizeof r);
    memset(r.spec_hash, 'b', 64);
    snprintf(r.backend, sizeof r.backend, "host");
    snprintf(r.status, sizeof r.status, "ok");
    snprintf(r.strategy, sizeof r.strategy, "fused");
    r.seq_len = 4096, r.batch = 1, r.bucket = da__tuning_bucket(4096), r.reps = 1, r.median_ms = 1.0;
    const da_status chk = da__tuning_db_check(ctx, db, "host"), st = da__tuning_db_merge(ctx, db, &r, 1);
    size_t len = 0;
    char *text = da__read_file(db, &len);
    const int other_cpu = text && strstr(text, "another CPU") != NULL, cuda_kept = text && strstr(text, "\"cuda\"");
    if (!with_host)
      TU_CHECK(chk == DA_OK && st == DA_OK && !other_cpu && cuda_kept,
               "a host sweep into another CPU's file of CUDA records: check %s, merge %s, cpu %s, CUDA record %s",
               da_status_name(chk), da_status_name(st), other_cpu ? "kept" : "made this one's",
               cuda_kept ? "kept" : "lost");
    else
      TU_CHECK(chk == DA_ERR_IO && st == DA_ERR_IO && other_cpu && strstr(da_context_last_error(ctx), "cpu"),
               "a host sweep into another CPU's file with a host record: check %s, merge %s (%s)", da_status_name(chk),
               da_status_name(st), da_context_last_error(ctx));
    free(text);
  }
  da_context_destroy(ctx);
  rm_tree(dir);
}

/* Files that are no regular files where the library reads one: a FIFO as a bundle
 * manifest (register_bundle, DILATTN_BUNDLES) or as DILATTN_TUNING_DB, /dev/zero as the
 * latter. Each used to block in open() for a writer that never comes, or (/dev/zero) read
 * one endless line into memory; now each is refused at once (a bundle: DA_ERR_IO, a
 * tuning database: not read, the planner's defaults). An alarm turns a hang into a
 * failure. */
static void fifo_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_api: a read of a FIFO or /dev/zero hung (10 s)\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

static void test_not_regular_files(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX", fifo[200], db[200];
  da_context *ctx = tuning_scratch(dir, db, sizeof db);
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  TU_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
  signal(SIGALRM, fifo_alarm);
  alarm(10);
  TU_CHECK(da_context_register_bundle(ctx, fifo) == DA_ERR_IO, "register_bundle(a FIFO): %s", da_context_last_error(ctx));
  setenv("DILATTN_BUNDLES", fifo, 1);
  da_context *c2 = NULL;
  TU_CHECK(da_context_create(&c2) == DA_OK, "DILATTN_BUNDLES=a FIFO: context");
  da_context_destroy(c2);
  unsetenv("DILATTN_BUNDLES");
  const char *const dbs[2] = {fifo, "/dev/zero"};
  for (int i = 0; i < 2; i++) {
    setenv("DILATTN_TUNING_DB", dbs[i], 1);
    da_context *c3 = NULL;
    da_plan *p = NULL;
    const da_spec s = small_spec();
    da_context_create(&c3);
    TU_CHECK(da_plan_create(c3, &s, DA_BACKEND_HOST, &p) == DA_OK, "DILATTN_TUNING_DB=%s: plan: %s", dbs[i],
             da_context_last_error(c3));
    da_plan_destroy(p);
    da_context_destroy(c3);
  }
  unsetenv("DILATTN_TUNING_DB");
  alarm(0);
  signal(SIGALRM, SIG_DFL);
  da_context_destroy(ctx);
  rm_tree(dir);
}

/* Edges of the small calls (helper-54): the JSON of a spec JSON cannot say is NULL, not
 * another spec's; an empty shape needs no workspace and has density 1 (no pair dropped);
 * a negative preload thread count is refused. */
static void test_api_edges(da_context *ctx) {
  da_spec s = small_spec();
  char *js = da_spec_to_json(&s);
  TU_CHECK(js != NULL, "to_json of a valid spec");
  free(js);
  struct {
    const char *what;
    da_spec s;
  } bad[7];
  for (int i = 0; i < 7; i++) bad[i].s = s;
  bad[0].what = "mode 7", bad[0].s.mode = (da_mode)7;
  bad[1].what = "dtype 9", bad[1].s.dtype = (da_dtype)9;
  bad[2].what = "offsets -1", bad[2].s.offsets = (da_offsets)-1;
  bad[3].what = "layout 42", bad[3].s.sparsity.layout = (da_layout)42;
  bad[4].what = "NaN scale", bad[4].s.has_scale = 1, bad[4].s.scale = NAN;
  bad[5].what = "1000 branches", bad[5].s.num_branches = 1000;
  bad[6].what = "random layout, infinite density", bad[6].s.sparsity.layout = DA_LAYOUT_RANDOM,
  bad[6].s.sparsity.block = 4, bad[6].s.sparsity.density = INFINITY;
  for (int i = 0; i < 7; i++) {
    js = da_spec_to_json(&bad[i].s);
    TU_CHECK(js == NULL, "to_json of a spec with %s: %s (want NULL)", bad[i].what, js);
    free(js);
  }
  s.dilation_rates[0] = 3; /* invalid (w 8 is no multiple of 3) but sayable: written as it is */
  js = da_spec_to_json(&s);
  TU_CHECK(js && strstr(js, "\"dilation_rates\":[3"), "to_json of an invalid spec: %s", js ? js : "NULL");
  free(js);
  s = small_spec();
  da_plan *p = NULL;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "plan: %s", da_context_last_error(ctx));
  size_t bytes = 7;
  double d = -1;
  TU_CHECK(da_plan_workspace_size(p, 0, 16, &bytes) == DA_OK && bytes == 0, "workspace of batch 0: %zu bytes", bytes);
  TU_CHECK(da_plan_workspace_size(p, 1, 0, &bytes) == DA_OK && bytes == 0, "workspace of seq_len 0: %zu bytes", bytes);
  TU_CHECK(da_plan_density(p, 0, &d) == DA_OK && d == 1.0, "density at seq_len 0: %g (want 1)", d);
  da_plan_destroy(p);
  TU_CHECK(da_plan_preload(ctx, &s, 1, DA_BACKEND_HOST, -1, NULL, NULL, NULL) == DA_ERR_INVALID_ARGUMENT &&
               has(ctx, "num_threads"),
           "preload with -1 threads: %s", da_context_last_error(ctx));
}

/* The host backend's out and lse for spec at (B = 1, N) against the float64 reference. */
static int matches_reference(da_context *ctx, const da_spec *s, const da_plan_options *opts, int64_t N) {
  da_plan *p = NULL;
  if (da_plan_create_ex(ctx, s, DA_BACKEND_HOST, opts, &p) != DA_OK) {
    fprintf(stderr, "  plan: %s\n", da_context_last_error(ctx));
    return 0;
  }
  const int64_t H = s->num_heads, Hkv = s->num_kv_heads, D = s->head_dim, nq = N * H * D, nk = N * Hkv * D;
  float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *o = malloc(4 * nq), *lse = malloc(4 * H * N);
  double *dq = malloc(8 * nq), *dk = malloc(8 * nk), *dv = malloc(8 * nk), *ro = malloc(8 * nq), *rl = malloc(8 * H * N);
  uint64_t st = 7;
  double vmax = 0, eo = 0, el = 0;
  for (int64_t i = 0; i < nq; i++) dq[i] = q[i] = (float)(2 * tu_uniform(&st) - 1);
  for (int64_t i = 0; i < nk; i++) {
    dk[i] = k[i] = (float)(2 * tu_uniform(&st) - 1);
    dv[i] = v[i] = (float)(2 * tu_uniform(&st) - 1);
    if (fabs(dv[i]) > vmax) vmax = fabs(dv[i]);
  }
  da_args a;
  da_args_init(&a, s, 1, N, q, k, v, o, lse);
  int ok = da_plan_execute(p, &a) == DA_OK && da_ref_attention(s, 1, N, dq, dk, dv, ro, rl) == 0 &&
           tu_compare(DA_DTYPE_FLOAT32, nq, o, ro, H * N, lse, rl, vmax, &eo, &el);
  if (!ok) fprintf(stderr, "  %s plan: out err %.3g, lse err %.3g\n", da_plan_strategy(p), eo, el);
  free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv), free(ro), free(rl);
  da_plan_destroy(p);
  return ok;
}

/* Rates whose lcm passes 2^64 (77158673929 * 239075442 = 2^64 + 2) must not wrap to a small
 * lcm that makes a fused plan (LCM_R 2: every even position taken as covered). */
static void test_lcm_overflow(da_context *ctx) {
  da_spec s = tu_spec(2, (const int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40},
                      (const int64_t[]){77158673929LL, 239075442LL}, 1, 1, 4, DA_DTYPE_FLOAT32);
  TU_CHECK(matches_reference(ctx, &s, NULL, 8), "rates with an lcm past 2^64: wrong results");
}

/* 16 branches of long segments: a valid spec whose kernel name (w and r spelled out) ran
 * past the runtime's symbol buffers (host: "<name>_scratch_bytes" in 400 bytes, CUDA: 300)
 * and NAME_MAX, so the host plan failed with DA_ERR_COMPILE naming a truncated symbol. */
static void test_long_kernel_name(da_context *ctx) {
  int64_t w[16], r[16];
  for (int i = 0; i < 16; i++) w[i] = (int64_t)1 << 40, r[i] = ((int64_t)1 << 40) - i;
  da_spec s = tu_spec(16, w, r, 2, 1, 4, DA_DTYPE_FLOAT32);
  TU_CHECK(matches_reference(ctx, &s, NULL, 8), "16 branches of w = 2^40: %s", da_context_last_error(ctx));
}

/* tile_q = tile_k = 1 at head_dim <= 2: the host kernel as the system cc (gcc 12.2, -O2)
 * compiles it keeps only the last key tile of each row (out = v of the last key); -O0,
 * -O3, -fno-strict-aliasing, -fno-tree-slp-vectorize or clang get it right. */
static void test_unit_tiles(da_context *ctx) {
  da_spec s = tu_spec(1, (const int64_t[]){8}, (const int64_t[]){1}, 1, 1, 2, DA_DTYPE_FLOAT32);
  da_plan_options o = {1, 1, 0, 0, 0};
  TU_CHECK(matches_reference(ctx, &s, &o, 8), "tile_q = tile_k = 1, head_dim 2: wrong results");
}

/* A field the layout does not use is not validated, so it may hold anything: plan creation
 * must not read by it (the plan memo's key took num_strides strides under every layout:
 * 10^8 read 800 MB past the array, INT_MIN looped for ever doubling a buffer). */
static void test_unused_fields(da_context *ctx) {
  da_spec s = small_spec();
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, s.sparsity.block = 2, s.sparsity.window = 1;
  s.sparsity.num_strides = 100000000; /* local_window reads no strides */
  char msg[256];
  TU_CHECK(da_spec_validate(&s, msg, sizeof msg) == DA_OK, "local_window with junk num_strides is valid: %s", msg);
  da_plan *p = NULL;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "local_window, num_strides 10^8: %s",
           da_context_last_error(ctx));
  da_plan_destroy(p);
}

/* fn(arg) in a child process whose stderr goes to a file; its text in out (the child's exit
 * status returned, -1 where it did not exit). A child starts with this process's
 * once-a-process warnings as they stand: call before anything has warned. */
static int in_child_stderr(void (*fn)(void *), void *arg, char *out, size_t cap) {
  char path[] = "/tmp/dilattn-test-api-err-XXXXXX";
  const int fd = mkstemp(path);
  out[0] = '\0';
  if (fd < 0) return -1;
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const ssize_t n = pread(fd, out, cap - 1, 0);
  out[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_of(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* a warning (DILATTN_BACKEND against the backend named) twice and a debug line (a
 * context's creation), under the DILATTN_LOG_LEVEL in arg; no compile */
static void log_level_child(void *arg) {
  const char *level = arg;
  if (level) setenv("DILATTN_LOG_LEVEL", level, 1);
  else unsetenv("DILATTN_LOG_LEVEL");
  setenv("DILATTN_BACKEND", "host", 1);
  setenv("DILATTN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1); /* (no plan made, whatever the machine) */
  da_context *c = NULL;
  da_context_create(&c);
  da_spec s = small_spec();
  da_plan *p = NULL;
  for (int i = 0; i < 2; i++) da_plan_create(c, &s, DA_BACKEND_CUDA, &p), da_plan_destroy(p), p = NULL;
  da_context_destroy(c);
}

/* DILATTN_LOG_LEVEL (README, Environment): off and error keep warnings out, warn (the
 * default, also for an empty value) and info keep debug lines out, debug shows both; any
 * other value is warn, with one warning a process that names it */
static void test_log_level(void) {
  static const struct {
    const char *level;
    int warn, debug, junk;
  } cases[] = {{NULL, 1, 0, 0},  {"", 1, 0, 0},     {"off", 0, 0, 0},  {"error", 0, 0, 0},
               {"warn", 1, 0, 0}, {"info", 1, 0, 0}, {"debug", 1, 1, 0}, {"loud", 1, 0, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char err[8192];
    const int rc = in_child_stderr(log_level_child, (void *)cases[i].level, err, sizeof err);
    const int warned = strstr(err, "warning: DILATTN_BACKEND=host ignored") != NULL,
              debug = strstr(err, "debug: context") != NULL,
              junk = count_of(err, "DILATTN_LOG_LEVEL=loud is not off, error, warn, info or debug; using warn");
    TU_CHECK(rc == 0 && warned == cases[i].warn && debug == cases[i].debug && junk == cases[i].junk &&
                 (cases[i].warn || !err[0]),
             "DILATTN_LOG_LEVEL=%s: exit %d, warning %d (want %d), debug %d (want %d), junk warnings %d (want %d): %s",
             cases[i].level ? cases[i].level : "(unset)", rc, warned, cases[i].warn, debug, cases[i].debug, junk,
             cases[i].junk, err);
  }
}

/* da_set_log_callback: the lines go to the program's function (level, text without the
 * "dilattn: " prefix or a newline, its user pointer), none to stderr; NULL: stderr again.
 * In a child (its stderr a file) under DILATTN_LOG_LEVEL=debug */
typedef struct {
  int n, warn, debug;
  char first[300];
} log_sink;
static void log_to_sink(int level, const char *text, void *user) {
  log_sink *k = user;
  if (!k->n++) snprintf(k->first, sizeof k->first, "%s", text);
  k->warn += level == 1 && strstr(text, "DILATTN_BACKEND=host ignored") != NULL;
  k->debug += level == 3 && !strncmp(text, "context ", 8);
}
static void log_callback_child(void *arg) {
  (void)arg;
  static log_sink k;
  da_set_log_callback(log_to_sink, &k);
  log_level_child("debug");
  const int ok = k.warn >= 1 && k.debug >= 1 && strncmp(k.first, "dilattn", 7) && !strchr(k.first, '\n');
  da_set_log_callback(NULL, NULL);
  /* (said on stderr, now the callback is gone: the parent reads it there, and the debug
   * line after it; the warning is said once a process, to the callback) */
  fprintf(stderr, "sink %s: %d lines, %d warnings, %d debug, first '%s'\n", ok ? "ok" : "wrong", k.n, k.warn, k.debug,
          k.first);
  log_level_child("debug");
}
static void test_log_callback(void) {
  char err[8192];
  const int rc = in_child_stderr(log_callback_child, NULL, err, sizeof err);
  /* before the sink line nothing reached stderr; after it (callback NULL) a line did */
  const char *sink = strstr(err, "sink ok");
  TU_CHECK(rc == 0 && sink == err && strstr(sink, "dilattn: debug: context"),
           "da_set_log_callback: exit %d, sink line at %ld: %s", rc, sink ? (long)(sink - err) : -1L, err);
}

/* DILATTN_DUMP_DIR gets every rendered source, as DESIGN.md says: a kernel found in the
 * disk cache (a second context: nothing compiles) and a CUDA source rendered without a
 * compile (it got the compiled ones only) */
static void test_dump_dir_rendered(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX", dump[300], file[600];
  da_context *ctx = context_in_temp_cache(dir);
  da_spec s = small_spec();
  s.has_scale = 1, s.scale = 0.375; /* (a kernel of its own) */
  da_plan *p = NULL;
  TU_CHECK(da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) == DA_OK, "plan: %s", da_context_last_error(ctx));
  da_context_destroy(ctx);
  snprintf(dump, sizeof dump, "%s/dump", dir);
  setenv("DILATTN_DUMP_DIR", dump, 1);
  da_context *c2 = NULL;
  da_context_create(&c2);
  da_plan *p2 = NULL;
  TU_CHECK(da_plan_create(c2, &s, DA_BACKEND_HOST, &p2) == DA_OK, "plan from the disk cache: %s",
           da_context_last_error(c2));
  snprintf(file, sizeof file, "%s/%s.c", dump, p2 ? da_plan_kernel_name(p2) : "");
  TU_CHECK(access(file, R_OK) == 0, "DILATTN_DUMP_DIR: no source %s for a kernel found in the disk cache", file);
  char *src = NULL, *name = NULL;
  TU_CHECK(da_render(c2, &s, DA_TARGET_CUDA, &src, &name) == DA_OK, "render: %s", da_context_last_error(c2));
  snprintf(file, sizeof file, "%s/%s.cu", dump, name ? name : "");
  TU_CHECK(access(file, R_OK) == 0, "DILATTN_DUMP_DIR: no source %s for a CUDA kernel rendered", file);
  free(src), free(name);
  unsetenv("DILATTN_DUMP_DIR");
  da_plan_destroy(p), da_plan_destroy(p2);
  da_context_destroy(c2);
  rm_tree(dir);
}

/* DILATTN_DUMP_DIR that cannot be made (a regular file on its path): the kernel compiles and
 * the plan works all the same, with one warning a process that names the folder */
static void dump_dir_child(void *arg) {
  const char *dir = arg;
  char blocker[300], dump[400];
  snprintf(blocker, sizeof blocker, "%s/file", dir);
  FILE *f = fopen(blocker, "w");
  if (f) fclose(f);
  snprintf(dump, sizeof dump, "%s/sub", blocker);
  setenv("DILATTN_DUMP_DIR", dump, 1);
  setenv("DILATTN_CACHE_DIR", dir, 1);
  da_context *c = NULL;
  da_context_create(&c);
  da_spec s = small_spec();
  int ok = 1;
  for (int i = 0; i < 2; i++) { /* two kernels compiled (two scales) */
    s.has_scale = 1, s.scale = 0.25 + 0.125 * i;
    da_plan *p = NULL;
    ok &= da_plan_create(c, &s, DA_BACKEND_HOST, &p) == DA_OK;
    da_plan_destroy(p);
  }
  da_context_destroy(c);
  fflush(stderr);
  _exit(ok ? 0 : 3);
}

static void test_dump_dir_unwritable(void) {
  char dir[] = "/tmp/dilattn-test-api-XXXXXX", err[8192];
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  const int rc = in_child_stderr(dump_dir_child, dir, err, sizeof err);
  TU_CHECK(rc == 0 && count_of(err, "DILATTN_DUMP_DIR: cannot write") == 1 && strstr(err, "/file/sub"),
           "DILATTN_DUMP_DIR under a regular file: exit %d (3: no plan), stderr: %s", rc, err);
  rm_tree(dir);
}

/* every status has its own name and a message (da_status_message was never called) */
static void test_status_strings(void) {
  for (int i = 0; i < DA_STATUS_COUNT; i++) {
    const char *n = da_status_name((da_status)i), *m = da_status_message((da_status)i);
    TU_CHECK(n && !strncmp(n, "DA_", 3) && strcmp(n, "DA_UNKNOWN_STATUS") && m && m[0] && strcmp(m, "unknown status"),
             "status %d: name %s, message %s", i, n ? n : "NULL", m ? m : "NULL");
    for (int j = 0; j < i; j++)
      TU_CHECK(strcmp(n, da_status_name((da_status)j)) && strcmp(m, da_status_message((da_status)j)),
               "statuses %d and %d share a name or message (%s, %s)", j, i, n, m);
  }
  TU_CHECK(!strcmp(da_status_name(DA_ERR_COMPILE), "DA_ERR_COMPILE") &&
               !strcmp(da_status_message(DA_ERR_COMPILE), "kernel compilation failed") &&
               !strcmp(da_status_message(DA_OK), "success"),
           "DA_ERR_COMPILE: %s, %s", da_status_name(DA_ERR_COMPILE), da_status_message(DA_ERR_COMPILE));
  const da_status odd[] = {DA_STATUS_COUNT, (da_status)-1, (da_status)1000};
  for (int i = 0; i < 3; i++)
    TU_CHECK(!strcmp(da_status_name(odd[i]), "DA_UNKNOWN_STATUS") && !strcmp(da_status_message(odd[i]), "unknown status"),
             "status %d: %s, %s", (int)odd[i], da_status_name(odd[i]), da_status_message(odd[i]));
}

int main(void) {
  test_log_level();
  test_log_callback(); /* first: its children must not inherit a warning already given */
  test_dump_dir_unwritable();
  test_status_strings();
  da_context *ctx;
  TU_CHECK(da_context_create(&ctx) == DA_OK, "context");
  test_explicit_specs(ctx);
  test_tensors(ctx);
  test_overlap_property(ctx);
  test_last_error();
  test_bundles_and_json(ctx);
  test_backend_env(ctx);
  test_cc_words();
  test_dump_dir_rendered();
  test_default_mma();
  test_sigchld_ignored();
  test_tuning_batches();
  test_tuning_best_rules();
  test_tuning_other_backend();
  test_not_regular_files();
  test_api_edges(ctx);
  test_lcm_overflow(ctx);
  test_long_kernel_name(ctx);
  test_unit_tiles(ctx);
  test_unused_fields(ctx);
  da_context_destroy(ctx);
  return tu_report();
}
