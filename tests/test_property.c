/* test_property.c - property test: seeded random specs and shapes on the host backend
 * against the naive float64 reference (tests/reference.c): ragged N, H not divisible by
 * r, grouped-query heads, causal with every sparsity layout (explicit masks included),
 * both modes and offset policies, all dtypes, custom scales, padded strides, and the
 * planner's strategies forced in turn (default, split, fused with tiny tiles).
 * Run: build/tests/test_property SHARD NSHARDS [NSPECS]   (ctest -L property)
 * A failure prints the seed and the spec JSON to replay it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "test_util.h"

static int64_t pick(uint64_t *s, int64_t lo, int64_t hi) { /* inclusive */
  return lo + (int64_t)(tu_rand(s) % (uint64_t)(hi - lo + 1));
}

/* Random valid spec; masks (explicit layout) are allocated into masks[]. */
static void random_spec(uint64_t *s, da_spec *sp, uint8_t **masks) {
  da_spec_init(sp);
  int nb = (int)pick(s, 1, 4);
  sp->num_branches = nb;
  int aligned = pick(s, 0, 2) == 0; /* segment lengths sharing a large gcd: fused tiling */
  int64_t g = pick(s, 2, 6) * 4;
  for (int i = 0; i < nb; i++) {
    int64_t w = aligned ? g * pick(s, 1, 3) : pick(s, 1, 48);
    sp->segment_lengths[i] = w;
    sp->dilation_rates[i] = pick(s, 1, w < 6 ? w : 6);
    if (aligned && pick(s, 0, 1)) sp->dilation_rates[i] = pick(s, 0, 1) ? 1 : 2;
  }
  sp->mode = pick(s, 0, 3) == 0 ? DA_MODE_GROUPED : DA_MODE_LONGNET;
  sp->offsets = pick(s, 0, 1) ? DA_OFFSETS_BLOCK : DA_OFFSETS_MOD;
  sp->causal = (int)pick(s, 0, 1);
  sp->num_heads = (int)pick(s, 1, 6);
  int divs[6], nd = 0;
  for (int d = 1; d <= sp->num_heads; d++)
    if (sp->num_heads % d == 0) divs[nd++] = d;
  sp->num_kv_heads = divs[pick(s, 0, nd - 1)];
  static const int dims[] = {1, 3, 8, 16, 33};
  sp->head_dim = dims[pick(s, 0, 4)];
  sp->dtype = (da_dtype)pick(s, 0, 2);
  if (pick(s, 0, 2) == 0) {
    sp->has_scale = 1;
    sp->scale = 0.05 + tu_uniform(s);
  }
  da_layout lay = (da_layout)pick(s, 0, 6);
  sp->sparsity.layout = lay;
  sp->sparsity.block = pick(s, 1, 6);
  sp->sparsity.window = pick(s, 0, 2);
  sp->sparsity.global = pick(s, 0, 2);
  sp->sparsity.num_strides = (int)pick(s, 0, 3);
  for (int j = 0; j < sp->sparsity.num_strides; j++) sp->sparsity.strides[j] = pick(s, 1, 5);
  sp->sparsity.seed = tu_rand(s) >> 1;
  sp->sparsity.density = tu_uniform(s);
  if (lay == DA_LAYOUT_EXPLICIT) {
    for (int i = 0; i < nb; i++) {
      int64_t n = da_spec_explicit_blocks(sp, i);
      masks[i] = malloc((size_t)(n * n));
      for (int64_t j = 0; j < n * n; j++) masks[i][j] = pick(s, 0, 2) != 0;
      sp->sparsity.explicit_masks[i] = masks[i];
    }
  }
}

static int run_one(da_context *ctx, uint64_t seed) {
  uint64_t s = seed;
  da_spec spec;
  uint8_t *masks[DA_MAX_BRANCHES] = {0};
  random_spec(&s, &spec, masks);
  char msg[512];
  int ok = 1;
  if (da_spec_validate(&spec, msg, sizeof msg) != DA_OK) {
    TU_CHECK(0, "seed %llu: generated an invalid spec: %s", (unsigned long long)seed, msg);
    ok = 0;
    goto done;
  }
  da_plan_options opts[3] = {{0, 0, 0, 0, 0}, {0, 0, 1 << 30, 0, 0}, {(int)pick(&s, 1, 7), (int)pick(&s, 1, 9), 1, 0, 0}};
  da_plan_options *o = &opts[pick(&s, 0, 2)];
  da_plan *plan = NULL;
  if (da_plan_create_ex(ctx, &spec, DA_BACKEND_HOST, o, &plan) != DA_OK) {
    TU_CHECK(0, "seed %llu: plan: %s", (unsigned long long)seed, da_context_last_error(ctx));
    ok = 0;
    goto done;
  }
  for (int shape = 0; shape < 2 && ok; shape++) {
    int64_t B = pick(&s, 1, 2), N = pick(&s, 1, 130);
    int64_t H = spec.num_heads, Hkv = spec.num_kv_heads, D = spec.head_dim;
    int pad = (int)pick(&s, 0, 1) * (int)pick(&s, 1, 5); /* extra elements per row/head */
    int64_t qh = D + pad, qn = H * qh + pad, kh = D + pad, kn = Hkv * kh + pad;
    int64_t qcount = B * N * qn, kcount = B * N * kn;
    da_dtype t = spec.dtype;
    size_t es = tu_elem_size(t);
    void *q = calloc((size_t)qcount, es), *k = calloc((size_t)kcount, es), *v = calloc((size_t)kcount, es);
    void *out = calloc((size_t)qcount, es);
    float *lse = pick(&s, 0, 3) ? malloc(sizeof(float) * (size_t)(B * H * N)) : NULL;
    double *dq = malloc(sizeof(double) * (size_t)(B * N * H * D));
    double *dk = malloc(sizeof(double) * (size_t)(B * N * Hkv * D));
    double *dv = malloc(sizeof(double) * (size_t)(B * N * Hkv * D));
    double *rout = malloc(sizeof(double) * (size_t)(B * N * H * D));
    double *rlse = malloc(sizeof(double) * (size_t)(B * H * N));
    double *gout = malloc(sizeof(double) * (size_t)(B * N * H * D));
    double vmax = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t n = 0; n < N; n++) {
        for (int64_t h = 0; h < H; h++)
          for (int64_t d = 0; d < D; d++) {
            int64_t i = b * N * qn + n * qn + h * qh + d;
            tu_store(t, q, i, 2.0 * tu_uniform(&s) - 1.0);
            dq[((b * N + n) * H + h) * D + d] = tu_load(t, q, i);
          }
        for (int64_t h = 0; h < Hkv; h++)
          for (int64_t d = 0; d < D; d++) {
            int64_t i = b * N * kn + n * kn + h * kh + d, j = ((b * N + n) * Hkv + h) * D + d;
            tu_store(t, k, i, 2.0 * tu_uniform(&s) - 1.0);
            tu_store(t, v, i, 2.0 * tu_uniform(&s) - 1.0);
            dk[j] = tu_load(t, k, i);
            dv[j] = tu_load(t, v, i);
            if (fabs(dv[j]) > vmax) vmax = fabs(dv[j]);
          }
      }
    da_args a;
    da_args_init(&a, &spec, B, N, q, k, v, out, lse);
    int64_t qst[3] = {N * qn, qn, qh}, kst[3] = {N * kn, kn, kh};
    memcpy(a.q_stride, qst, sizeof qst);
    memcpy(a.out_stride, qst, sizeof qst);
    memcpy(a.k_stride, kst, sizeof kst);
    memcpy(a.v_stride, kst, sizeof kst);
    da_status st = da_plan_execute(plan, &a);
    TU_CHECK(st == DA_OK, "seed %llu: execute: %s", (unsigned long long)seed, da_context_last_error(ctx));
    int rr = da_ref_attention(&spec, B, N, dq, dk, dv, rout, rlse);
    TU_CHECK(rr == 0, "seed %llu: reference refused the spec", (unsigned long long)seed);
    /* gather the padded output into dense order for comparison */
    void *dense = calloc((size_t)(B * N * H * D), es);
    for (int64_t b = 0; b < B; b++)
      for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t d = 0; d < D; d++)
            memcpy((char *)dense + (size_t)(((b * N + n) * H + h) * D + d) * es,
                   (char *)out + (size_t)(b * N * qn + n * qn + h * qh + d) * es, es);
    double eo = 0, el = 0;
    int good = st == DA_OK && rr == 0 &&
               tu_compare(t, B * N * H * D, dense, rout, B * H * N, lse, rlse, vmax, &eo, &el);
    if (!good) {
      char *js = da_spec_to_json(&spec);
      TU_CHECK(0, "seed %llu B=%lld N=%lld pad=%d strategy=%s tiles=%d/%d fmin=%d: out err %.3g (vmax %.3g) lse err %.3g\n  spec %s",
               (unsigned long long)seed, (long long)B, (long long)N, pad, da_plan_strategy(plan),
               o->tile_q, o->tile_k, o->fused_min_queries, eo, vmax, el, js);
      free(js);
      ok = 0;
    } else {
      tu_passed++;
    }
    (void)gout;
    free(dense);
    free(q), free(k), free(v), free(out), free(lse), free(dq), free(dk), free(dv);
    free(rout), free(rlse), free(gout);
  }
  da_plan_destroy(plan);
done:
  for (int i = 0; i < DA_MAX_BRANCHES; i++) free(masks[i]);
  return ok;
}

int main(int argc, char **argv) {
  int shard = argc > 1 ? atoi(argv[1]) : 0, nshards = argc > 2 ? atoi(argv[2]) : 1;
  int nspecs = argc > 3 ? atoi(argv[3]) : 300;
  const char *env = getenv("DILATTN_PROPERTY_SEED");
  uint64_t base = env ? strtoull(env, NULL, 10) : 20261125ull;
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) return 1;
  int failures = 0;
  for (int i = shard; i < nspecs; i += nshards)
    if (!run_one(ctx, base + (uint64_t)i) && ++failures >= 5) break;
  da_context_destroy(ctx);
  return tu_report();
}
