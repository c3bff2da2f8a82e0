/* test_reference.c - checks the naive reference (reference.c) against the golden vectors
 * of ../shared/golden/ and against small hand-derived cases of SEMANTICS.md.
 *
 * Deliberately self-contained: a tiny NPY reader (v1 header, '<f4' '<f2' '<f8', C order)
 * and the 15 golden configs hard-coded as da_spec initializers (from each case.json;
 * "scale": null means the default 1/sqrt(D)), so it depends on nothing but reference.c.
 *
 * Run:
 *   gcc -std=c11 -O2 -Wall -Wextra -I/work/main/include -I/work/main/tests \
 *     /work/main/tests/reference.c /work/main/tests/test_reference.c -lm \
 *     -o /tmp/test_reference && /tmp/test_reference /work/shared/golden
 * Prints one line per check and a final "N passed, M failed"; exits nonzero on failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static int g_passed, g_failed;

static void report(int ok, const char *name, const char *detail) {
  if (ok) g_passed++;
  else g_failed++;
  printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
}

/* ---------------------------------------------------------------------------------
 * Minimal NPY reader: v1 header, little-endian f4/f2/f8, C order, data as doubles.
 * --------------------------------------------------------------------------------- */
typedef struct {
  int ndim;
  int64_t shape[8];
  int64_t count;
  double *data;
} npy_array;

/* IEEE binary16 -> double, exact (subnormals, inf, nan included). */
static double half_to_double(uint16_t hbits) {
  int sign = hbits >> 15, exp = (hbits >> 10) & 0x1f, mant = hbits & 0x3ff;
  double mag;
  if (exp == 0) mag = ldexp((double)mant, -24);
  else if (exp == 31) mag = mant ? NAN : INFINITY;
  else mag = ldexp((double)(mant | 0x400), exp - 25);
  return sign ? -mag : mag;
}

static int npy_read(const char *path, npy_array *arr) {
  memset(arr, 0, sizeof(*arr));
  FILE *f = fopen(path, "rb");
  if (f == NULL) return -1;
  unsigned char pre[10];
  char header[4096];
  int rc = -1;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) goto done;
  size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
  if (hlen >= sizeof(header) || fread(header, 1, hlen, f) != hlen) goto done;
  header[hlen] = '\0';
  if (strstr(header, "'fortran_order': False") == NULL) goto done;
  const char *descr = strstr(header, "'descr': '");
  if (descr == NULL) goto done;
  descr += strlen("'descr': '");
  int width;
  if (strncmp(descr, "<f4'", 4) == 0) width = 4;
  else if (strncmp(descr, "<f2'", 4) == 0) width = 2;
  else if (strncmp(descr, "<f8'", 4) == 0) width = 8;
  else goto done;
  const char *s = strstr(header, "'shape': (");
  if (s == NULL) goto done;
  s += strlen("'shape': (");
  arr->count = 1;
  while (*s != ')') {
    char *end;
    long long dim = strtoll(s, &end, 10);
    if (end == s || dim < 0 || arr->ndim == 8) goto done;
    arr->shape[arr->ndim++] = dim;
    arr->count *= dim;
    s = end;
    while (*s == ',' || *s == ' ') s++;
  }
  unsigned char *raw = malloc((size_t)arr->count * (size_t)width + 1);
  arr->data = malloc(sizeof(double) * (size_t)arr->count + 1);
  if (raw == NULL || arr->data == NULL ||
      fread(raw, (size_t)width, (size_t)arr->count, f) != (size_t)arr->count) {
    free(raw);
    goto done;
  }
  for (int64_t i = 0; i < arr->count; i++) {
    const unsigned char *e = raw + i * width;
    if (width == 2) {
      arr->data[i] = half_to_double((uint16_t)(e[0] | (e[1] << 8)));
    } else if (width == 4) {
      float x;
      memcpy(&x, e, 4);
      arr->data[i] = x;
    } else {
      memcpy(&arr->data[i], e, 8);
    }
  }
  free(raw);
  rc = 0;
done:
  fclose(f);
  if (rc != 0) {
    free(arr->data);
    arr->data = NULL;
  }
  return rc;
}

static int shape_is(const npy_array *a, int ndim, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3) {
  int64_t want[4] = {d0, d1, d2, d3};
  if (a->ndim != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (a->shape[i] != want[i]) return 0;
  return 1;
}

/* ---------------------------------------------------------------------------------
 * Golden cases: the configs of /work/shared/golden/<name>/case.json.
 * --------------------------------------------------------------------------------- */
typedef struct {
  const char *name;
  da_spec spec;
} golden_case;

#define LONGNET_MOD .mode = DA_MODE_LONGNET, .offsets = DA_OFFSETS_MOD
static const golden_case kGolden[] = {
  {"custom_scale", {.num_branches = 2, .segment_lengths = {32, 64}, .dilation_rates = {1, 2},
                    LONGNET_MOD, .has_scale = 1, .scale = 0.05, .num_heads = 2,
                    .num_kv_heads = 2, .head_dim = 64, .dtype = DA_DTYPE_FLOAT32}},
  {"dense_equivalent", {.num_branches = 1, .segment_lengths = {64}, .dilation_rates = {1},
                        LONGNET_MOD, .num_heads = 2, .num_kv_heads = 2, .head_dim = 16}},
  {"gqa_4_to_1", {.num_branches = 2, .segment_lengths = {32, 64}, .dilation_rates = {1, 2},
                  LONGNET_MOD, .num_heads = 8, .num_kv_heads = 2, .head_dim = 32}},
  {"grouped_uneven_heads",
   {.num_branches = 3, .segment_lengths = {16, 32, 64}, .dilation_rates = {1, 2, 4},
    .mode = DA_MODE_GROUPED, .offsets = DA_OFFSETS_MOD, .num_heads = 5, .num_kv_heads = 5,
    .head_dim = 16}},
  {"half_inputs", {.num_branches = 2, .segment_lengths = {64, 128}, .dilation_rates = {1, 2},
                   LONGNET_MOD, .num_heads = 2, .num_kv_heads = 2, .head_dim = 64,
                   .dtype = DA_DTYPE_FLOAT16}},
  {"longnet_block_offsets",
   {.num_branches = 2, .segment_lengths = {32, 64}, .dilation_rates = {2, 4},
    .mode = DA_MODE_LONGNET, .offsets = DA_OFFSETS_BLOCK, .num_heads = 6, .num_kv_heads = 6,
    .head_dim = 16}},
  {"longnet_causal", {.num_branches = 2, .segment_lengths = {16, 32}, .dilation_rates = {1, 2},
                      LONGNET_MOD, .causal = 1, .num_heads = 4, .num_kv_heads = 4,
                      .head_dim = 16}},
  {"longnet_ragged_tail",
   {.num_branches = 2, .segment_lengths = {32, 64}, .dilation_rates = {1, 4}, LONGNET_MOD,
    .num_heads = 3, .num_kv_heads = 3, .head_dim = 16}},
  {"longnet_three_branches",
   {.num_branches = 3, .segment_lengths = {16, 32, 64}, .dilation_rates = {1, 2, 4},
    LONGNET_MOD, .num_heads = 4, .num_kv_heads = 4, .head_dim = 32}},
  {"longnet_w_not_multiple_of_r",
   {.num_branches = 3, .segment_lengths = {16, 40, 96}, .dilation_rates = {1, 3, 6},
    LONGNET_MOD, .num_heads = 6, .num_kv_heads = 3, .head_dim = 16}},
  {"sparse_dilated",
   {.num_branches = 1, .segment_lengths = {256}, .dilation_rates = {1}, LONGNET_MOD,
    .num_heads = 2, .num_kv_heads = 2, .head_dim = 16,
    .sparsity = {.layout = DA_LAYOUT_DILATED_SPARSE, .block = 16, .num_strides = 2,
                 .strides = {2, 4}}}},
  {"sparse_global_local",
   {.num_branches = 2, .segment_lengths = {128, 256}, .dilation_rates = {1, 2}, LONGNET_MOD,
    .num_heads = 2, .num_kv_heads = 2, .head_dim = 16,
    .sparsity = {.layout = DA_LAYOUT_GLOBAL_LOCAL, .block = 8, .window = 1, .global = 2}}},
  {"sparse_local_window_causal",
   {.num_branches = 2, .segment_lengths = {64, 128}, .dilation_rates = {1, 2}, LONGNET_MOD,
    .causal = 1, .num_heads = 2, .num_kv_heads = 2, .head_dim = 16,
    .sparsity = {.layout = DA_LAYOUT_LOCAL_WINDOW, .block = 8, .window = 1}}},
  {"sparse_random",
   {.num_branches = 2, .segment_lengths = {128, 256}, .dilation_rates = {1, 4}, LONGNET_MOD,
    .num_heads = 2, .num_kv_heads = 2, .head_dim = 16,
    .sparsity = {.layout = DA_LAYOUT_RANDOM, .block = 8, .seed = 1234567, .density = 0.3}}},
  {"uncovered_positions", {.num_branches = 1, .segment_lengths = {32}, .dilation_rates = {2},
                           LONGNET_MOD, .num_heads = 1, .num_kv_heads = 1, .head_dim = 16}},
};
#define NUM_GOLDEN ((int)(sizeof(kGolden) / sizeof(kGolden[0])))

static void run_golden(const char *dir, const golden_case *gc) {
  char path[1024], detail[1200];
  const char *names[5] = {"q", "k", "v", "out", "lse"};
  npy_array a[5];
  memset(a, 0, sizeof(a));
  const da_spec *sp = &gc->spec;
  double *out = NULL, *lse = NULL;
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof(path), "%s/%s/%s.npy", dir, gc->name, names[i]);
    if (npy_read(path, &a[i]) != 0) {
      snprintf(detail, sizeof(detail), "cannot read %s", path);
      report(0, gc->name, detail);
      goto done;
    }
  }
  int64_t B = a[0].shape[0], N = a[0].shape[1];
  int64_t H = sp->num_heads, Hkv = sp->num_kv_heads, D = sp->head_dim;
  if (!shape_is(&a[0], 4, B, N, H, D) || !shape_is(&a[1], 4, B, N, Hkv, D) ||
      !shape_is(&a[2], 4, B, N, Hkv, D) || !shape_is(&a[3], 4, B, N, H, D) ||
      !shape_is(&a[4], 3, B, H, N, 0)) {
    report(0, gc->name, "array shapes do not match the config");
    goto done;
  }
  out = malloc(sizeof(double) * (size_t)a[3].count);
  lse = malloc(sizeof(double) * (size_t)a[4].count);
  if (out == NULL || lse == NULL ||
      da_ref_attention(sp, B, N, a[0].data, a[1].data, a[2].data, out, lse) != 0) {
    report(0, gc->name, "da_ref_attention failed");
    goto done;
  }
  double vmax = 0.0, out_err = 0.0, lse_err = 0.0;
  int bad = 0; /* NaN anywhere, or a -inf mismatch */
  int64_t n_inf = 0;
  for (int64_t i = 0; i < a[2].count; i++) vmax = fmax(vmax, fabs(a[2].data[i]));
  for (int64_t i = 0; i < a[3].count; i++) {
    if (isnan(out[i])) bad = 1;
    out_err = fmax(out_err, fabs(out[i] - a[3].data[i]));
  }
  for (int64_t i = 0; i < a[4].count; i++) {
    double want = a[4].data[i], got = lse[i];
    if (isnan(got)) bad = 1;
    if (isinf(want) || isinf(got)) {
      if (want != got) bad = 1;
      n_inf += isinf(want) ? 1 : 0;
    } else {
      lse_err = fmax(lse_err, fabs(got - want));
    }
  }
  /* SEMANTICS.md: fp32 2e-5 * max|v|. Half inputs are converted exactly, so the float64
   * reference must match the float64 golden just as tightly: 1e-6 * max|v|. */
  double out_tol = (sp->dtype == DA_DTYPE_FLOAT32 ? 2e-5 : 1e-6) * vmax;
  int ok = !bad && out_err <= out_tol && lse_err <= 1e-4;
  snprintf(detail, sizeof(detail),
           "B=%lld N=%lld out max abs err %.3e (%.3e of max|v|, tol %.1e), "
           "lse max abs err %.3e, -inf lse %lld%s",
           (long long)B, (long long)N, out_err, vmax > 0 ? out_err / vmax : 0.0, out_tol,
           lse_err, (long long)n_inf, bad ? ", NaN or -inf mismatch" : "");
  report(ok, gc->name, detail);
done:
  for (int i = 0; i < 5; i++) free(a[i].data);
  free(out);
  free(lse);
}

/* ---------------------------------------------------------------------------------
 * Self-checks that need no golden files.
 * --------------------------------------------------------------------------------- */
static uint64_t g_rng = 0x12345678u;
static double rnd(void) { /* uniform in [-1, 1) */
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}
static double *rnd_array(int64_t n) {
  double *x = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) x[i] = rnd();
  return x;
}

static da_spec base_spec(int64_t w, int64_t r, int H, int Hkv, int D) {
  da_spec s;
  memset(&s, 0, sizeof(s));
  s.num_branches = 1;
  s.segment_lengths[0] = w;
  s.dilation_rates[0] = r;
  s.num_heads = H;
  s.num_kv_heads = Hkv;
  s.head_dim = D;
  return s;
}

static void check_splitmix(void) {
  report(da_ref_splitmix64(0) == 0xE220A8397B1DCDAFull, "splitmix64(0) == 0xE220A8397B1DCDAF",
         "");
}

/* One branch (w = N, r = 1) is plain softmax attention; checked with GQA and causal. */
static void check_dense(int causal) {
  const int64_t B = 2, N = 24, H = 4, Hkv = 2, D = 8;
  da_spec s = base_spec(N, 1, (int)H, (int)Hkv, (int)D);
  s.causal = causal;
  double *q = rnd_array(B * N * H * D), *k = rnd_array(B * N * Hkv * D);
  double *v = rnd_array(B * N * Hkv * D);
  double *out = malloc(sizeof(double) * (size_t)(B * N * H * D));
  double *lse = malloc(sizeof(double) * (size_t)(B * H * N));
  int ok = da_ref_attention(&s, B, N, q, k, v, out, lse) == 0;
  double err = 0.0, scale = 1.0 / sqrt((double)D);
  for (int64_t b = 0; b < B; b++)
    for (int64_t p = 0; p < N; p++)
      for (int64_t h = 0; h < H; h++) {
        int64_t hk = h / (H / Hkv), tend = causal ? p + 1 : N;
        double den = 0.0, acc[8] = {0};
        for (int64_t t = 0; t < tend; t++) { /* unshifted exp: values are small */
          double dot = 0.0;
          for (int64_t d = 0; d < D; d++)
            dot += q[((b * N + p) * H + h) * D + d] * k[((b * N + t) * Hkv + hk) * D + d];
          double e = exp(scale * dot);
          den += e;
          for (int64_t d = 0; d < D; d++) acc[d] += e * v[((b * N + t) * Hkv + hk) * D + d];
        }
        for (int64_t d = 0; d < D; d++)
          err = fmax(err, fabs(acc[d] / den - out[((b * N + p) * H + h) * D + d]));
        err = fmax(err, fabs(log(den) - lse[(b * H + h) * N + p]));
      }
  char detail[64];
  snprintf(detail, sizeof(detail), "max err %.3e", err);
  report(ok && err < 1e-12, causal ? "dense r=1 causal == plain softmax"
                                   : "dense r=1 == plain softmax", detail);
  free(q), free(k), free(v), free(out), free(lse);
}

/* Runs s on random data (B = 1) and returns out and lse (caller frees). */
static int run_random(const da_spec *s, int64_t N, double **out, double **lse, double **v) {
  int64_t H = s->num_heads, Hkv = s->num_kv_heads, D = s->head_dim;
  double *q = rnd_array(N * H * D), *k = rnd_array(N * Hkv * D);
  *v = rnd_array(N * Hkv * D);
  *out = malloc(sizeof(double) * (size_t)(N * H * D));
  *lse = malloc(sizeof(double) * (size_t)(H * N));
  int rc = da_ref_attention(s, 1, N, q, k, *v, *out, *lse);
  free(q), free(k);
  return rc;
}

/* Every query whose keys are all masked, or that no branch covers, gets 0 and -inf. */
static void check_empty(void) {
  const int64_t N = 16, D = 4;
  /* (a) explicit all-zero mask: nothing is attended anywhere. */
  da_spec s = base_spec(8, 2, 1, 1, (int)D);
  uint8_t zeros[16] = {0}; /* nb = ceil(ceil(8/2)/2) = 2 -> 4 bytes used */
  s.sparsity.layout = DA_LAYOUT_EXPLICIT;
  s.sparsity.block = 2;
  s.sparsity.explicit_masks[0] = zeros;
  double *out, *lse, *v;
  int ok = run_random(&s, N, &out, &lse, &v) == 0;
  for (int64_t p = 0; p < N; p++) {
    ok = ok && isinf(lse[p]) && lse[p] < 0;
    for (int64_t d = 0; d < D; d++) ok = ok && out[p * D + d] == 0.0;
  }
  report(ok, "all keys masked -> out 0, lse -inf", "");
  free(out), free(lse), free(v);
  /* (b) w = 8, r = 2, head 0: odd offsets in a segment are not covered. */
  s = base_spec(8, 2, 1, 1, (int)D);
  ok = run_random(&s, N, &out, &lse, &v) == 0;
  for (int64_t p = 0; p < N; p++) {
    int covered = (p % 8) % 2 == 0;
    ok = ok && (covered ? isfinite(lse[p]) : (isinf(lse[p]) && lse[p] < 0));
    for (int64_t d = 0; d < D && !covered; d++) ok = ok && out[p * D + d] == 0.0;
  }
  report(ok, "uncovered query -> out 0, lse -inf", "");
  free(out), free(lse), free(v);
}

/* A key in two branches counts twice: two identical branches = one branch, lse + log 2. */
static void check_multiset(void) {
  const int64_t N = 20, D = 4;
  da_spec one = base_spec(12, 3, 2, 2, (int)D), two = one;
  two.num_branches = 2;
  two.segment_lengths[1] = 12;
  two.dilation_rates[1] = 3;
  uint64_t seed = g_rng;
  double *o1, *l1, *v1, *o2, *l2, *v2;
  int ok = run_random(&one, N, &o1, &l1, &v1) == 0;
  g_rng = seed; /* same data */
  ok = ok && run_random(&two, N, &o2, &l2, &v2) == 0;
  double err = 0.0;
  for (int64_t i = 0; i < N * 2 * D; i++) err = fmax(err, fabs(o1[i] - o2[i]));
  for (int64_t i = 0; i < 2 * N; i++) {
    if (isinf(l1[i])) ok = ok && isinf(l2[i]);
    else err = fmax(err, fabs(l1[i] + log(2.0) - l2[i]));
  }
  report(ok && err < 1e-12, "multiset union: duplicate branch adds log 2", "");
  free(o1), free(l1), free(v1), free(o2), free(l2), free(v2);
}

/* Grouped mode, H = 5, k = 3: groups {0,1}, {2,3}, {4}. Each branch's key set is just the
 * query itself (w = r = g + 1, o = g % r = g), so a head's coverage pattern names its
 * group: group g covers p iff p % (g + 1) == g, and there out = v_p / 3. */
static void check_grouped_groups(void) {
  const int64_t N = 12, D = 4, H = 5;
  da_spec s = base_spec(1, 1, (int)H, (int)H, (int)D);
  s.mode = DA_MODE_GROUPED;
  s.num_branches = 3;
  for (int g = 0; g < 3; g++) s.segment_lengths[g] = s.dilation_rates[g] = g + 1;
  double *out, *lse, *v;
  int ok = run_random(&s, N, &out, &lse, &v) == 0;
  const int want_group[5] = {0, 0, 1, 1, 2};
  for (int64_t h = 0; h < H; h++) {
    int g = want_group[h];
    for (int64_t p = 0; p < N; p++) {
      int covered = p % (g + 1) == g;
      ok = ok && (covered ? isfinite(lse[h * N + p]) : isinf(lse[h * N + p]));
      for (int64_t d = 0; d < D; d++) {
        double want = covered ? v[(p * H + h) * D + d] / 3.0 : 0.0;
        ok = ok && fabs(out[(p * H + h) * D + d] - want) < 1e-15;
      }
    }
  }
  report(ok, "grouped H=5 k=3 -> group sizes 2,2,1", "");
  free(out), free(lse), free(v);
}

/* Offsets with H = 6, r = w = 4: each head is covered only at p % 4 == o, attending
 * itself. block: Hp = 8, o = h / 2 -> 0,0,1,1,2,2; mod: o = h % 4 -> 0,1,2,3,0,1. */
static void check_offsets(da_offsets mode) {
  const int64_t N = 8, D = 4, H = 6;
  da_spec s = base_spec(4, 4, (int)H, (int)H, (int)D);
  s.offsets = mode;
  double *out, *lse, *v;
  int ok = run_random(&s, N, &out, &lse, &v) == 0;
  for (int64_t h = 0; h < H; h++) {
    int64_t o = mode == DA_OFFSETS_BLOCK ? h / 2 : h % 4;
    for (int64_t p = 0; p < N; p++) {
      int covered = p % 4 == o;
      ok = ok && (covered ? isfinite(lse[h * N + p]) : isinf(lse[h * N + p]));
      for (int64_t d = 0; d < D; d++) {
        double want = covered ? v[(p * H + h) * D + d] : 0.0;
        ok = ok && fabs(out[(p * H + h) * D + d] - want) < 1e-15;
      }
    }
  }
  report(ok, mode == DA_OFFSETS_BLOCK ? "block offsets H=6 r=4 -> o = h/2"
                                      : "mod offsets H=6 r=4 -> o = h%4", "");
  free(out), free(lse), free(v);
}

/* The layouts' block rules, checked at a few hand-picked points. */
static void check_layouts(void) {
  da_spec s = base_spec(64, 2, 1, 1, 4);
  int ok = da_ref_block_allowed(&s, 0, 0, 9) == 1; /* NONE */
  s.sparsity.block = 4;
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.window = 1;
  ok = ok && da_ref_block_allowed(&s, 0, 3, 4) && da_ref_block_allowed(&s, 0, 4, 3) &&
       !da_ref_block_allowed(&s, 0, 5, 3);
  s.sparsity.layout = DA_LAYOUT_GLOBAL_LOCAL;
  s.sparsity.global = 2;
  ok = ok && da_ref_block_allowed(&s, 0, 7, 1) && da_ref_block_allowed(&s, 0, 1, 7) &&
       !da_ref_block_allowed(&s, 0, 7, 2);
  s.sparsity.layout = DA_LAYOUT_DILATED_SPARSE;
  s.sparsity.num_strides = 2;
  s.sparsity.strides[0] = 2;
  s.sparsity.strides[1] = 4;
  ok = ok && da_ref_block_allowed(&s, 0, 5, 5) && da_ref_block_allowed(&s, 0, 1, 5) &&
       da_ref_block_allowed(&s, 0, 5, 3) && !da_ref_block_allowed(&s, 0, 5, 4);
  s.sparsity.layout = DA_LAYOUT_RANDOM;
  s.sparsity.density = 0.0;
  ok = ok && da_ref_block_allowed(&s, 0, 3, 3) && !da_ref_block_allowed(&s, 0, 3, 4);
  s.sparsity.density = 1.0;
  ok = ok && da_ref_block_allowed(&s, 0, 3, 4);
  /* Random with density 0.5: the hash of (seed, i, qb, kb) decides, spelled out here. */
  s.sparsity.density = 0.5;
  s.sparsity.seed = 99;
  uint64_t x = da_ref_splitmix64(99ull ^ ((1ull << 48) ^ (2ull << 24) ^ 5ull)) >> 11;
  ok = ok && da_ref_block_allowed(&s, 1, 2, 5) == (x < (1ull << 52));
  uint8_t mask[4] = {1, 0, 1, 1}; /* nb = ceil(ceil(64/2)/16) = 2 */
  s.sparsity.layout = DA_LAYOUT_EXPLICIT;
  s.sparsity.block = 16;
  s.sparsity.explicit_masks[0] = mask;
  ok = ok && da_ref_block_allowed(&s, 0, 0, 0) && !da_ref_block_allowed(&s, 0, 0, 1) &&
       da_ref_block_allowed(&s, 0, 1, 0) && da_ref_block_allowed(&s, 0, 1, 1);
  report(ok, "layout block rules", "");
}

/* Ragged tail with w % r != 0: N = 10, w = 7, r = 3, head 1 (o = 1). Segment 0 is
 * [0, 7): covered 1, 4 (a = 0, 1); segment 1 is [7, 10): covered 8 only. With one-hot
 * v rows we read off exactly which keys each query used. */
static void check_ragged(void) {
  const int64_t N = 10, D = 10, H = 2;
  da_spec s = base_spec(7, 3, (int)H, (int)H, (int)D);
  double *q = calloc((size_t)(N * H * D), sizeof(double));
  double *k = calloc((size_t)(N * H * D), sizeof(double));
  double *v = calloc((size_t)(N * H * D), sizeof(double));
  double *out = malloc(sizeof(double) * (size_t)(N * H * D));
  double *lse = malloc(sizeof(double) * (size_t)(H * N));
  for (int64_t t = 0; t < N; t++) v[(t * H + 1) * D + t] = 1.0; /* q = k = 0: uniform */
  int ok = da_ref_attention(&s, 1, N, q, k, v, out, lse) == 0;
  const double *o4 = out + (4 * H + 1) * D, *o8 = out + (8 * H + 1) * D;
  ok = ok && o4[1] == 0.5 && o4[4] == 0.5 && o8[8] == 1.0 && fabs(lse[N + 4] - log(2.0)) < 1e-15;
  ok = ok && lse[N + 8] == 0.0 && isinf(lse[N + 9]) && isinf(lse[N + 7]);
  report(ok, "ragged tail, w % r != 0 (offsets from segment start)", "");
  free(q), free(k), free(v), free(out), free(lse);
}

int main(int argc, char **argv) {
  check_splitmix();
  check_dense(0);
  check_dense(1);
  check_empty();
  check_multiset();
  check_grouped_groups();
  check_offsets(DA_OFFSETS_BLOCK);
  check_offsets(DA_OFFSETS_MOD);
  check_layouts();
  check_ragged();
  if (argc > 1) {
    for (int i = 0; i < NUM_GOLDEN; i++) run_golden(argv[1], &kGolden[i]);
  } else {
    printf("note: no golden directory given (argv[1]); golden cases skipped\n");
  }
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
