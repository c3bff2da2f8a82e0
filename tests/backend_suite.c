/* backend_suite.c - see backend_suite.h. */
#include "backend_suite.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "reference.h"
#include "runtime/fileio.h"
#include "runtime/npy.h"
#include "test_util.h"

void bs_golden(da_context *ctx, const char *dir, const char *label, bs_runner run, void *user) {
  DIR *d = opendir(dir);
  TU_CHECK(d != NULL, "cannot open %s", dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096], msg[512] = "unreadable";
    size_t len;
    snprintf(path, sizeof path, "%s/%s/case.json", dir, e->d_name);
    char *text = da__read_file(path, &len);
    da_spec s;
    int parsed = text && da_spec_from_json(text, len, &s, msg, sizeof msg) == DA_OK;
    free(text);
    if (!parsed) {
      TU_CHECK(0, "%s: %s", path, msg);
      continue;
    }
    da__npy_array a[5];
    memset(a, 0, sizeof a);
    const char *names[5] = {"q", "k", "v", "out", "lse"};
    int ok = 1;
    for (int i = 0; i < 5 && ok; i++) {
      snprintf(path, sizeof path, "%s/%s/%s.npy", dir, e->d_name, names[i]);
      ok = da__npy_load(path, &a[i], msg, sizeof msg) == DA_OK;
      TU_CHECK(ok, "%s", msg);
    }
    if (ok) {
      int64_t B = a[0].shape[0], N = a[0].shape[1];
      void *out = calloc(a[0].count, a[0].elem_size);
      float *lse = calloc(a[4].count, 4);
      da_status st = run(user, ctx, &s, B, N, a[0].data, a[1].data, a[2].data, out, lse);
      TU_CHECK(st == DA_OK, "golden %s on %s: %s", e->d_name, label, da_context_last_error(ctx));
      double vmax = 0, eo = 0, el = 0;
      for (size_t i = 0; i < a[2].count; i++) vmax = fmax(vmax, fabs(tu_load(s.dtype, a[2].data, (int64_t)i)));
      TU_CHECK(st == DA_OK && tu_compare(s.dtype, (int64_t)a[3].count, out, a[3].data, (int64_t)a[4].count, lse,
                                         a[4].data, vmax, &eo, &el),
               "golden %s on %s: out err %.3g lse err %.3g", e->d_name, label, eo, el);
      printf("golden %-30s %s out_err=%.2e lse_err=%.2e\n", e->d_name, label, eo, el);
      free(out);
      free(lse);
    }
    for (int i = 0; i < 5; i++) da__npy_free(&a[i]);
  }
  closedir(d);
}

static uint8_t *masks[DA_MAX_BRANCHES];

void bs_random_spec(int i, int64_t max_n, da_spec *s, int64_t *B, int64_t *N) {
  uint64_t st = 99 + 7919 * (uint64_t)i;
  static const int dims[] = {32, 64, 96, 128, 16, 40};
  da_spec_init(s);
  s->num_branches = 1 + (int)(tu_rand(&st) % 3);
  int64_t g = 16 << (tu_rand(&st) % 4);
  for (int b = 0; b < s->num_branches; b++) {
    s->segment_lengths[b] = (tu_rand(&st) % 2) ? g << b : 8 + (int64_t)(tu_rand(&st) % 200);
    s->dilation_rates[b] = 1 + (int64_t)(tu_rand(&st) % 4);
  }
  s->head_dim = dims[tu_rand(&st) % 6];
  s->dtype = (da_dtype)(tu_rand(&st) % 3);
  s->mode = tu_rand(&st) % 4 == 0 ? DA_MODE_GROUPED : DA_MODE_LONGNET;
  s->offsets = (da_offsets)(tu_rand(&st) % 2);
  s->causal = (int)(tu_rand(&st) % 2);
  s->num_heads = 4;
  s->num_kv_heads = tu_rand(&st) % 2 ? 2 : 4;
  s->sparsity.layout = (da_layout)(tu_rand(&st) % 7);
  s->sparsity.block = 1 + (int64_t)(tu_rand(&st) % 32);
  s->sparsity.window = 1;
  s->sparsity.global = 1;
  s->sparsity.num_strides = 1;
  s->sparsity.strides[0] = 3;
  s->sparsity.seed = tu_rand(&st) >> 2;
  s->sparsity.density = 0.4;
  if (s->sparsity.layout == DA_LAYOUT_EXPLICIT)
    for (int b = 0; b < s->num_branches; b++) {
      int64_t nb = da_spec_explicit_blocks(s, b);
      free(masks[b]);
      masks[b] = malloc((size_t)(nb * nb));
      for (int64_t x = 0; x < nb * nb; x++) masks[b][x] = (tu_rand(&st) & 3) != 0;
      s->sparsity.explicit_masks[b] = masks[b];
    }
  *B = 1 + (int64_t)(tu_rand(&st) % 2);
  *N = 100 + (int64_t)(tu_rand(&st) % (uint64_t)(max_n > 100 ? max_n - 99 : 1));
}

void bs_check(da_context *ctx, const da_spec *s, int64_t B, int64_t N, uint64_t seed, const char *what,
              bs_runner run, void *user) {
  bs_check_data(ctx, s, B, N, seed, BS_DATA_UNIFORM, what, run, user);
}

void bs_check_data(da_context *ctx, const da_spec *s, int64_t B, int64_t N, uint64_t seed, bs_data data,
                   const char *what, bs_runner run, void *user) {
  int64_t nq = B * N * s->num_heads * s->head_dim, nk = B * N * s->num_kv_heads * s->head_dim, nl = B * s->num_heads * N;
  size_t es = tu_elem_size(s->dtype);
  void *q = malloc((size_t)nq * es), *k = malloc((size_t)nk * es), *v = malloc((size_t)nk * es), *out = malloc((size_t)nq * es);
  float *lse = malloc((size_t)nl * 4);
  double *dq = malloc((size_t)nq * 8), *dk = malloc((size_t)nk * 8), *dv = malloc((size_t)nk * 8);
  double *ro = malloc((size_t)nq * 8), *rl = malloc((size_t)nl * 8), vmax = 0, eo = 0, el = 0;
  uint64_t st = seed;
  const int64_t D = s->head_dim, ramp = D / 4 > 0 ? D / 4 : 1; /* BS_DATA_RAMP: the first D / 4 dims */
  const double scale = s->scale > 0 ? s->scale : 1.0 / sqrt((double)D);
  for (int64_t i = 0; i < nq; i++) {
    double x = 2 * tu_uniform(&st) - 1;
    if (data == BS_DATA_RAMP) { /* [B][N][H][D]: sign by query row, 0.5..1 on the ramp dims */
      const int64_t d = i % D, tok = i / (D * s->num_heads) % N;
      x = d < ramp ? (tok % 2 ? -1 : 1) * (0.5 + 0.5 * tu_uniform(&st)) : 0.05 * x;
    }
    tu_store(s->dtype, q, i, x), dq[i] = tu_load(s->dtype, q, i);
  }
  for (int64_t i = 0; i < nk; i++) {
    double x = 2 * tu_uniform(&st) - 1;
    if (data == BS_DATA_RAMP) { /* [B][N][Hkv][D]: key j's ramp dims ~ j, the slope growing per kv head
                                   (score slope ~ 0.75 * scale * (D / 4) * step nats a key) */
      const int64_t d = i % D, hk = i / D % s->num_kv_heads, tok = i / (D * s->num_kv_heads) % N;
      const double step = (0.04 + 0.05 * (double)hk) / (0.75 * scale * (double)ramp);
      x = d < ramp ? step * (double)tok * (0.9 + 0.2 * tu_uniform(&st)) : 0.05 * x;
    }
    tu_store(s->dtype, k, i, x), dk[i] = tu_load(s->dtype, k, i);
    tu_store(s->dtype, v, i, 2 * tu_uniform(&st) - 1), dv[i] = tu_load(s->dtype, v, i);
    vmax = fmax(vmax, fabs(dv[i]));
  }
  da_status r = run(user, ctx, s, B, N, q, k, v, out, lse);
  TU_CHECK(r == DA_OK, "%s: %s", what, da_context_last_error(ctx));
  TU_CHECK(da_ref_attention(s, B, N, dq, dk, dv, ro, rl) == 0, "%s: reference", what);
  int good = r == DA_OK && tu_compare(s->dtype, nq, out, ro, nl, lse, rl, vmax, &eo, &el);
  if (r == DA_OK && !good) {
    char *js = da_spec_to_json(s);
    TU_CHECK(0, "%s B=%lld N=%lld: out err %.3g lse err %.3g spec %s", what, (long long)B, (long long)N, eo, el, js);
    free(js);
  }
  free(q), free(k), free(v), free(out), free(lse), free(dq), free(dk), free(dv), free(ro), free(rl);
}

void bs_idle_wgs(da_context *ctx, bs_runner run, const char *label, int mma) {
  /* residue classes of gcd(w) / lcm(r) = 64 or 128 rows, one tile each, over more key tiles
   * (5 to 10) than the kernel has stages, so the producer waits on the stages' releases;
   * then the same specs split (fused_min_queries): offset classes of w / r = 64 to 1024
   * rows whose last tile keeps one or two warpgroups, and rows the two branches share merge
   * in the epilogue of the later launch, which writes out (odd rows: _clear) */
  static const struct {
    int tq;
    int64_t w0, w1, cls;
  } shapes[3] = {{192, 1024, 2048, 64}, {192, 2048, 4096, 128}, {128, 1024, 2048, 64}};
  for (int split = 0; split < 2; split++)
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < 4; i++) {
      da_spec s;
      da_spec_init(&s);
      s.num_branches = 2;
      s.segment_lengths[0] = shapes[t].w0, s.segment_lengths[1] = shapes[t].w1;
      s.dilation_rates[0] = 2, s.dilation_rates[1] = 16;
      s.num_heads = s.num_kv_heads = 1;
      s.head_dim = i < 2 ? 64 : 128;
      s.dtype = i & 1 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
      s.causal = i % 3 == 0;
      da_plan_options o = {shapes[t].tq, 0, split ? 1 << 30 : 0, 0, mma};
      char what[96];
      snprintf(what, sizeof what, "%s, %d-row tiles of %lld-row classes%s", label, shapes[t].tq, (long long)shapes[t].cls,
               split ? ", split" : "");
      bs_check(ctx, &s, 1, 2 * shapes[t].w1 + shapes[t].cls / 2 + 5, 860 + 16 * (uint64_t)split + 4 * (uint64_t)t + (uint64_t)i,
               what, run, &o);
    }
}

void bs_ramp(da_context *ctx, bs_runner run, void *user) {
  for (int i = 0; i < 4; i++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = i == 3 ? 1 : 2;
    s.segment_lengths[0] = i == 3 ? 640 : 256, s.segment_lengths[1] = 512;
    s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
    s.num_heads = s.num_kv_heads = 4;
    s.head_dim = i < 2 ? 64 : 128;
    s.dtype = i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
    s.causal = i < 2;
    char what[64];
    snprintf(what, sizeof what, "rising scores, case %d", i);
    bs_check_data(ctx, &s, 1, 700, 1300 + (uint64_t)i, BS_DATA_RAMP, what, run, user);
  }
}

void bs_random(da_context *ctx, int first, int count, int64_t max_n, bs_runner run, void *user) {
  for (int i = first; i < first + count; i++) {
    da_spec s;
    int64_t B, N;
    bs_random_spec(i, max_n, &s, &B, &N);
    char what[64];
    snprintf(what, sizeof what, "random spec %d", i);
    bs_check(ctx, &s, B, N, 1000 + (uint64_t)i, what, run, user);
  }
}

/* Random specs of the plan sm_90 devices run most, the warp-specialized kernel with the
 * fused tiling: the random family reaches it rarely (a campaign: 74 of 1783 specs on that
 * kernel were fused). Classes of g / R = 64 to 1024 rows (g = gcd(w) 256 to 1024, R =
 * lcm(r) <= 4), 2 or 3 branches, fp16 / bf16 at D 64 or 128, causal or not, longnet or
 * grouped, dense or a local window, each query tile shape; most of them must plan fused. */
void bs_fused_ws_random(da_context *ctx, int first, int count, const char *label, bs_runner run, int mma) {
  int fused = 0;
  for (int i = first; i < first + count; i++) {
    uint64_t st = 4242 + 7919 * (uint64_t)i;
    da_spec s;
    da_spec_init(&s);
    s.num_branches = 2 + (int)(tu_rand(&st) % 2);
    const int64_t g = (int64_t)256 << (tu_rand(&st) % 3);
    int64_t wmax = 0;
    for (int b = 0; b < s.num_branches; b++) {
      s.segment_lengths[b] = g * (b == 0 ? 1 : 1 + (int64_t)(tu_rand(&st) % 4)); /* gcd g */
      s.dilation_rates[b] = (int64_t)1 << (tu_rand(&st) % 3);
      if (s.segment_lengths[b] > wmax) wmax = s.segment_lengths[b];
    }
    s.head_dim = tu_rand(&st) % 2 ? 64 : 128;
    s.dtype = tu_rand(&st) % 2 ? DA_DTYPE_FLOAT16 : DA_DTYPE_BFLOAT16;
    s.causal = (int)(tu_rand(&st) % 2);
    s.mode = tu_rand(&st) % 8 == 0 ? DA_MODE_GROUPED : DA_MODE_LONGNET; /* grouped: single */
    s.offsets = (da_offsets)(tu_rand(&st) % 2);
    s.num_heads = 4;
    s.num_kv_heads = tu_rand(&st) % 2 ? 2 : 4;
    const int lay = (int)(tu_rand(&st) % 6);
    s.sparsity.layout = lay == 0 ? DA_LAYOUT_DENSE : lay == 1 ? DA_LAYOUT_LOCAL_WINDOW : DA_LAYOUT_NONE;
    s.sparsity.block = (int64_t)16 << (tu_rand(&st) % 3);
    s.sparsity.window = 1;
    static const int tiles[] = {0, 64, 128, 192};
    /* fused_min_queries at its default value, set: the planner keeps the fused tiling
     * rather than trading it for split on its tile-fill estimate */
    da_plan_options base = {tiles[tu_rand(&st) % 4], 0, 16, 0, mma};
    const int64_t span = 2 * wmax < 2400 ? 2 * wmax : 2400;
    const int64_t N = 150 + (int64_t)(tu_rand(&st) % (uint64_t)span);
    da_plan_options o = bs_ws_options(&s, &base);
    da__rendered r;
    if (da__render_ex(ctx, &s, DA_TARGET_CUDA, &o, &r) == DA_OK) {
      fused += !strcmp(r.strategy, "fused");
      da__rendered_free(&r);
    }
    char what[64];
    snprintf(what, sizeof what, "%s fused-ws random spec %d (tile_q %d)", label, i, o.tile_q);
    bs_check(ctx, &s, 1, N, 5000 + (uint64_t)i, what, run, &o);
  }
  printf("%s fused-ws-random %d..%d: %d of %d specs planned fused\n", label, first, first + count - 1, fused, count);
  TU_CHECK(2 * fused >= count, "%s fused-ws-random: only %d of %d specs planned fused", label, fused, count);
}

da_plan_options bs_wgmma_options(const da_spec *s, const da_plan_options *base) {
  da_plan_options o = {0, 0, 0, 0, 0};
  if (da__wgmma_serves(s)) {
    if (base) o = *base;
    o.cuda_mma = base && base->cuda_mma >= 2 ? base->cuda_mma : 2; /* 2 .. 6 */
  }
  return o;
}

da_plan_options bs_ws_options(const da_spec *s, const da_plan_options *base) {
  da_plan_options o = bs_wgmma_options(s, base);
  if (s->sparsity.layout != DA_LAYOUT_NONE && s->sparsity.layout != DA_LAYOUT_DENSE) {
    if (o.tile_q == 192) o.tile_q = 0;
    if (o.cuda_mma == 5) o.cuda_mma = 4, o.tile_q = 0;
    if (o.cuda_mma == 6) o.cuda_mma = 4;
  }
  return o;
}

void bs_wgmma(da_context *ctx, const char *golden, const char *label, int mma, int first, const int counts[4],
              int64_t max_n, bs_runner run) {
  da_plan_options shapes[4] = {{0, 0, 0, 0, mma}, {0, 64, 0, 0, mma}, {64, 0, 0, 0, mma}, {128, 0, 0, 0, mma}};
  bs_golden(ctx, golden, label, run, &shapes[0]);
  for (int k = 0; k < 4; k++) {
    bs_random(ctx, first, counts[k], max_n, run, &shapes[k]);
    first += counts[k];
  }
}

/* The small specs of bs_segment_isolation and bs_nan_inputs: 2 heads, LongNet 2-branch
 * (128, 256; r 1, 2) where two, else one branch of 192 */
static void small_spec(da_spec *s, int two, int64_t d, da_dtype t) {
  da_spec_init(s);
  s->num_branches = two ? 2 : 1;
  s->segment_lengths[0] = two ? 128 : 192, s->segment_lengths[1] = 256;
  s->dilation_rates[0] = 1, s->dilation_rates[1] = 2;
  s->num_heads = s->num_kv_heads = 2;
  s->head_dim = d;
  s->dtype = t;
}
/* q, k and v (n elements each, dtype t) uniform in [-1, 1), interleaved from seed */
static void fill_qkv(da_dtype t, void *q, void *k, void *v, int64_t n, uint64_t seed) {
  for (int64_t j = 0; j < n; j++) {
    tu_store(t, q, j, 2 * tu_uniform(&seed) - 1);
    tu_store(t, k, j, 2 * tu_uniform(&seed) - 1);
    tu_store(t, v, j, 2 * tu_uniform(&seed) - 1);
  }
}

/* See backend_suite.h. */
void bs_segment_isolation(da_context *ctx, bs_runner run, void *user, const char *label) {
  for (int variant = 0; variant < 4; variant++) {
    da_spec s;
    const int two = variant >= 2;
    small_spec(&s, two, variant % 2 ? 128 : 64, variant % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16);
    const int64_t B = 1, N = two ? 640 : 500, D = s.head_dim, H = 2, first = two ? 256 : 192;
    const int64_t nq = B * N * H * D, nl = B * H * N;
    uint16_t *q = malloc((size_t)nq * 2), *k = malloc((size_t)nq * 2), *v = malloc((size_t)nq * 2);
    uint16_t *out[2] = {malloc((size_t)nq * 2), malloc((size_t)nq * 2)};
    float *lse[2] = {malloc((size_t)nl * 4), malloc((size_t)nl * 4)};
    fill_qkv(s.dtype, q, k, v, nq, 990 + (uint64_t)variant);
    da_status r[2];
    for (int pass = 0; pass < 2; pass++) { /* V at position `first`: Inf, then 0 */
      const uint16_t inf = s.dtype == DA_DTYPE_FLOAT16 ? 0x7c00 : 0x7f80;
      for (int64_t j = first * H * D; j < (first + 1) * H * D; j++) v[j] = pass ? 0 : inf;
      memset(out[pass], 0xff, (size_t)nq * 2);
      memset(lse[pass], 0xff, (size_t)nl * 4);
      r[pass] = run(user, ctx, &s, B, N, q, k, v, out[pass], lse[pass]);
    }
    TU_CHECK(r[0] == DA_OK && r[1] == DA_OK, "%s segment isolation %d: %s", label, variant, da_context_last_error(ctx));
    int64_t bad = 0;
    for (int64_t j = 0; j < first * H * D; j++) bad += out[0][j] != out[1][j];
    for (int64_t h = 0; h < H; h++)
      for (int64_t p = 0; p < first; p++) bad += memcmp(&lse[0][h * N + p], &lse[1][h * N + p], 4) != 0;
    TU_CHECK(bad == 0,
             "%s segment isolation %d (%s, D = %lld, %d branch(es)): %lld values before position %lld changed by an Inf "
             "in V there",
             label, variant, variant % 2 ? "bf16" : "fp16", (long long)D, s.num_branches, (long long)bad, (long long)first);
    free(q), free(k), free(v);
    for (int i = 0; i < 2; i++) free(out[i]), free(lse[i]);
  }
}

/* The inputs and float64 results of one special-input case: the small spec of variant
 * (0 fp16, 1 bf16 causal, 2 fp16 D = 128 one branch causal, 3 bf16, 4 float32; two branches
 * but in 2 where two), B = 1, N = 512, q k v uniform from seed (then edited by the caller
 * before special_reference) */
typedef struct {
  da_spec s;
  int64_t N, H, D, nq, nl;
  void *q, *k, *v, *out;
  float *lse;
  double *dq, *dk, *dv, *ro, *rl;
} special_t;

static void special_make(special_t *c, int variant, int two, uint64_t seed) {
  small_spec(&c->s, two && variant != 2, variant == 2 ? 128 : 64,
             variant == 4 ? DA_DTYPE_FLOAT32 : variant % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16);
  c->s.causal = variant == 1 || variant == 2;
  c->N = 512, c->H = 2, c->D = c->s.head_dim;
  c->nq = c->N * c->H * c->D, c->nl = c->H * c->N;
  const size_t es = c->s.dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  c->q = malloc((size_t)c->nq * es), c->k = malloc((size_t)c->nq * es), c->v = malloc((size_t)c->nq * es);
  c->out = malloc((size_t)c->nq * es), c->lse = malloc((size_t)c->nl * 4);
  c->dq = malloc((size_t)c->nq * 8), c->dk = malloc((size_t)c->nq * 8), c->dv = malloc((size_t)c->nq * 8);
  c->ro = malloc((size_t)c->nq * 8), c->rl = malloc((size_t)c->nl * 8);
  fill_qkv(c->s.dtype, c->q, c->k, c->v, c->nq, seed);
}

/* Run the case through run and the float64 reference on the inputs as they are now: the
 * run's status (what names the check in messages) */
static da_status special_run(special_t *c, da_context *ctx, bs_runner run, void *user, const char *what) {
  for (int64_t j = 0; j < c->nq; j++)
    c->dq[j] = tu_load(c->s.dtype, c->q, j), c->dk[j] = tu_load(c->s.dtype, c->k, j),
    c->dv[j] = tu_load(c->s.dtype, c->v, j);
  const da_status r = run(user, ctx, &c->s, 1, c->N, c->q, c->k, c->v, c->out, c->lse);
  TU_CHECK(r == DA_OK, "%s: %s", what, da_context_last_error(ctx));
  TU_CHECK(da_ref_attention(&c->s, 1, c->N, c->dq, c->dk, c->dv, c->ro, c->rl) == 0, "%s: reference", what);
  return r;
}

static void special_free(special_t *c) {
  free(c->q), free(c->k), free(c->v), free(c->out), free(c->lse);
  free(c->dq), free(c->dk), free(c->dv), free(c->ro), free(c->rl);
}

static const char *variant_dtype(int variant) { return variant == 4 ? "f32" : variant % 2 ? "bf16" : "fp16"; }

/* See backend_suite.h. */
void bs_nan_inputs(da_context *ctx, bs_runner run, void *user, const char *label, int f32) {
  for (int variant = 0; variant < (f32 ? 5 : 4); variant++) {
    special_t c;
    special_make(&c, variant, 1, 4711 + (uint64_t)variant);
    const da_spec s = c.s;
    const int64_t N = c.N, D = c.D, H = c.H, qrow = 100, key = 300;
    /* [B][N][H][D]: query row qrow of head 1, and key `key` of kv head 0 */
    tu_store(s.dtype, c.q, (qrow * H + 1) * D + 3, NAN);
    tu_store(s.dtype, c.k, (key * H + 0) * D + 5, NAN);
    char what[200];
    snprintf(what, sizeof what, "%s NaN inputs %d", label, variant);
    const da_status r = special_run(&c, ctx, run, user, what);
    const void *out = c.out;
    const float *lse = c.lse;
    const double *ro = c.ro, *rl = c.rl;
    double tol_out, tol_lse; /* (v uniform in [-1, 1): vmax 1) */
    tu_tolerances(s.dtype, 1.0, &tol_out, &tol_lse);
    int64_t nan_rows = 0, hidden = 0, spread = 0, wrong = 0, first_bad = -1;
    for (int64_t h = 0; h < H && r == DA_OK; h++)
      for (int64_t p = 0; p < N; p++) {
        const int64_t row = h * N + p, o0 = (p * H + h) * D;
        if (isnan(rl[row])) {
          nan_rows++;
          int all = isnan(lse[row]);
          for (int64_t d = 0; d < D; d++) all &= isnan(tu_load(s.dtype, out, o0 + d));
          if (!all && hidden++ == 0) first_bad = row;
          continue;
        }
        int ok = isinf(rl[row]) ? lse[row] == rl[row] : fabs(lse[row] - rl[row]) <= tol_lse;
        for (int64_t d = 0; d < D; d++) {
          const double x = tu_load(s.dtype, out, o0 + d);
          ok &= !isnan(x) && fabs(x - ro[o0 + d]) <= tol_out;
        }
        if (!ok && (isnan(lse[row]) ? spread++ : wrong++) == 0 && first_bad < 0) first_bad = row;
      }
    TU_CHECK(nan_rows >= 2, "%s: the reference has %lld NaN rows (the query's, and the key's)", what,
             (long long)nan_rows);
    TU_CHECK(!hidden && !spread && !wrong,
             "%s (%s, D = %lld, %d branch(es)%s): of the reference's %lld NaN rows %lld not NaN here; "
             "%lld rows NaN here only, %lld others off (first: head %lld position %lld)",
             what, variant_dtype(variant), (long long)D, s.num_branches, s.causal ? ", causal" : "",
             (long long)nan_rows, (long long)hidden, (long long)spread, (long long)wrong, (long long)(first_bad / N),
             (long long)(first_bad % N));
    special_free(&c);
  }
}

/* See backend_suite.h. */
void bs_extreme_scores(da_context *ctx, bs_runner run, void *user, const char *label, int f32, int huge) {
  /* 0: -inf scores at the default scale; the large scales past the tensor-core kernels'
   * range (README "Numerical range") only where huge */
  static const double scales[4] = {0, 1e6, 1e8, 1e20};
  const int kinds = huge ? 4 : 2; /* (each scale is a kernel of its own: test_gpu compiles them) */
  for (int variant = 0; variant < (f32 ? 5 : 4) * kinds; variant++) {
    const int dv = variant / kinds, kind = variant % kinds;
    special_t c;
    /* the large scales on one branch: merging branches through their lse (split plans; a
     * caller's own merge) has float32's absolute error on lse, 512 at 5e9 (README) */
    special_make(&c, dv, kind == 0, 5150 + (uint64_t)variant);
    if (scales[kind] > 0) c.s.has_scale = 1, c.s.scale = scales[kind];
    const da_spec s = c.s;
    const int64_t N = c.N, D = c.D, H = c.H;
    for (int64_t t = 0; t < N; t++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++) {
          const int64_t j = (t * H + h) * D + d;
          if (kind > 0) { /* q 0.9; k 0.1 but 0.9 at every 64th key from 5: one key far above the rest */
            tu_store(s.dtype, c.q, j, 0.9);
            tu_store(s.dtype, c.k, j, t % 64 == 5 ? 0.9 : 0.1);
          } else if (d == 0) { /* q's first element 1, k's -inf at every 64th key: scores -inf, the
                                  first key a row sees among them */
            tu_store(s.dtype, c.q, j, 1.0);
            if (t % 64 == 0) tu_store(s.dtype, c.k, j, -INFINITY);
          }
        }
    char what[200];
    snprintf(what, sizeof what, "%s extreme scores %d", label, variant);
    const da_status r = special_run(&c, ctx, run, user, what);
    const double *ro = c.ro, *rl = c.rl;
    double tol_out, tol_lse; /* (v uniform in [-1, 1): vmax 1) */
    tu_tolerances(s.dtype, 1.0, &tol_out, &tol_lse);
    int64_t wrong = 0, first_bad = -1;
    double worst_o = 0, worst_l = 0;
    for (int64_t h = 0; h < H && r == DA_OK; h++)
      for (int64_t p = 0; p < N; p++) {
        const int64_t row = h * N + p, o0 = (p * H + h) * D;
        /* lse: float32's own rounding where |lse| is large (1e8 x 51.84: an ulp is 512; the
         * scores' float32 dot products are off by a few ulps, 2^-17 of them) */
        const double rlse = isnan(rl[row]) && kind == 0 ? -INFINITY : rl[row];
        const double el = isinf(rlse) ? (c.lse[row] == rlse ? 0 : INFINITY) : fabs(c.lse[row] - rlse);
        int ok = el <= tol_lse + ldexp(fabs(rlse), -17);
        worst_l = fmax(worst_l, el);
        for (int64_t d = 0; d < D; d++) {
          /* a row whose every score is -inf: out 0 and lse -inf here, the reference's 0 / 0
           * NaN (README) */
          const double want = isnan(rl[row]) && kind == 0 ? 0.0 : ro[o0 + d];
          const double e = fabs(tu_load(s.dtype, c.out, o0 + d) - want);
          ok &= e <= tol_out;
          worst_o = isnan(e) ? INFINITY : fmax(worst_o, e);
        }
        if (!ok && wrong++ == 0) first_bad = row;
      }
    TU_CHECK(!wrong,
             "%s (%s, D = %lld, %d branch(es)%s, scale %g; 0: -inf scores): %lld rows off the reference (first: "
             "head %lld position %lld; worst out error %.3g, lse %.3g)",
             what, variant_dtype(dv), (long long)D, s.num_branches, s.causal ? ", causal" : "", scales[kind],
             (long long)wrong, (long long)(first_bad / N), (long long)(first_bad % N), worst_o, worst_l);
    special_free(&c);
  }
}
