/* wgmma_probe.c - see wgmma_probe.h. */
#include "wgmma_probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "test_util.h"

/* The probe kernel: the plan's DA_SMEM_DECL, load_rows, da_wg_qk and da_wg_pv_tile. */
static const char PROBE[] =
    "\n/* ---- wgmma probe (tests/wgmma_probe.c) ---- */\n"
    "extern \"C\" __global__ void __launch_bounds__(128, 1) " WGP_KERNEL
    "(const da_u16 *q, const da_u16 *k, const da_u16 *v, const da_u32 *p, float *s_out, float *o_out) {\n"
    "  DA_SMEM_DECL\n"
    "  load_rows(Qs, q, TQ, TQ, true, [&](int i) { return (da_i64)i * HD; });\n"
    "  load_rows(Ks, k, TK, TK, true, [&](int i) { return (da_i64)i * HD; });\n"
    "  load_rows(Vs, v, TK, TK, true, [&](int i) { return (da_i64)i * HD; });\n"
    "  da_cp_async_commit();\n"
    "  da_cp_async_wait<0>();\n"
    "  da_fence_proxy_async();\n"
    "  __syncthreads();\n"
    "  const int t = threadIdx.x;\n"
    "  float s[TK / 2], o[HD / 2];\n"
    "  for (int i = 0; i < TK / 2; i++) s[i] = -INFINITY; /* the chain's first step must ignore it */\n"
    "  for (int i = 0; i < HD / 2; i++) o[i] = 0.f;\n"
    "  da_wg_qk(s, da_smem_addr(Qs), da_smem_addr(Ks));\n"
    "  da_u32 pa[TK / 16][4];\n"
    "  for (int kk = 0; kk < TK / 16; kk++)\n"
    "    for (int i = 0; i < 4; i++) pa[kk][i] = p[(t * (TK / 16) + kk) * 4 + i];\n"
    "  da_wg_pv_tile(o, pa, da_smem_addr(Vs));\n"
    "  for (int i = 0; i < TK / 2; i++) s_out[t * (TK / 2) + i] = s[i];\n"
    "  for (int i = 0; i < HD / 2; i++) o_out[t * (HD / 2) + i] = o[i];\n"
    "}\n";

const wgp_shape WGP_SHAPES[WGP_NSHAPES] = {
    {DA_DTYPE_FLOAT16, 64, 128}, {DA_DTYPE_BFLOAT16, 64, 64}, {DA_DTYPE_FLOAT16, 128, 64}, {DA_DTYPE_BFLOAT16, 128, 32}};

/* value j of a deterministic sequence: a multiple of 1/8 in [-1, 1] */
static double val(uint64_t *st) { return (double)((int)(tu_uniform(st) * 17) - 8) / 8.0; }

/* the accumulator element value i of thread t holds (m64nNk16 f32: the mma C fragment of
 * warp t / 32's 16 rows, per n8 block) */
static void d_pos(int t, int i, int *row, int *col) {
  int lane = t & 31;
  *row = 16 * (t >> 5) + (lane >> 2) + 8 * ((i >> 1) & 1);
  *col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}

da_status wgp_init(da_context *ctx, wgp_case *c, da_dtype dtype, int D, int TK) {
  memset(c, 0, sizeof *c);
  c->dtype = dtype, c->D = D, c->TK = TK;
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 1, s.segment_lengths[0] = 256, s.dilation_rates[0] = 1;
  s.num_heads = s.num_kv_heads = 1, s.head_dim = D, s.dtype = dtype;
  da_plan_options o = {64, TK, 0, 0, 2};
  da__rendered r;
  da_status st = da__render_ex(ctx, &s, DA_TARGET_CUDA, &o, &r);
  if (st != DA_OK) return st;
  size_t n = strlen(r.source);
  c->source = malloc(n + sizeof PROBE);
  memcpy(c->source, r.source, n);
  memcpy(c->source + n, PROBE, sizeof PROBE);
  c->smem = r.smem_bytes;
  da__rendered_free(&r);
  c->q_bytes = (size_t)64 * D * 2, c->kv_bytes = (size_t)TK * D * 2, c->p_bytes = (size_t)128 * (TK / 16) * 16;
  c->s_bytes = (size_t)128 * (TK / 2) * 4, c->o_bytes = (size_t)128 * (D / 2) * 4;
  c->q = malloc(c->q_bytes), c->k = malloc(c->kv_bytes), c->v = malloc(c->kv_bytes), c->p = malloc(c->p_bytes);
  c->s_out = malloc(c->s_bytes), c->o_out = malloc(c->o_bytes);
  uint64_t st_ = 0x9e37 + (uint64_t)(D * 1000 + TK) + (uint64_t)dtype;
  for (int i = 0; i < 64 * D; i++) tu_store(dtype, c->q, i, val(&st_));
  for (int i = 0; i < TK * D; i++) tu_store(dtype, c->k, i, val(&st_)), tu_store(dtype, c->v, i, val(&st_));
  /* P [64][TK] packed into the RS A fragment of each warp: reg i, half e of key step kk
   * holds row 16w + lane/4 + 8(i&1), key 16kk + 2(lane&3) + e + 8(i>>1) */
  for (int t = 0; t < 128; t++)
    for (int kk = 0; kk < TK / 16; kk++)
      for (int i = 0; i < 4; i++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) tu_store(dtype, &h[e], 0, val(&st_));
        c->p[(t * (TK / 16) + kk) * 4 + i] = h[0] | (uint32_t)h[1] << 16;
      }
  memset(c->s_out, 0xff, c->s_bytes), memset(c->o_out, 0xff, c->o_bytes);
  return DA_OK;
}

int wgp_check(const wgp_case *c, char *msg, size_t cap) {
  const int D = c->D, TK = c->TK;
  double *P = calloc((size_t)64 * TK, sizeof(double));
  for (int t = 0; t < 128; t++)
    for (int kk = 0; kk < TK / 16; kk++)
      for (int i = 0; i < 4; i++)
        for (int e = 0; e < 2; e++) {
          uint16_t h = (uint16_t)(c->p[(t * (TK / 16) + kk) * 4 + i] >> (16 * e));
          int lane = t & 31, row = 16 * (t >> 5) + (lane >> 2) + 8 * (i & 1), key = 16 * kk + 2 * (lane & 3) + e + 8 * (i >> 1);
          P[row * TK + key] = tu_load(c->dtype, &h, 0);
        }
  int ok = 1;
  for (int t = 0; t < 128 && ok; t++)
    for (int i = 0; i < TK / 2 && ok; i++) {
      int row, col;
      d_pos(t, i, &row, &col);
      double want = 0;
      for (int d = 0; d < D; d++) want += tu_load(c->dtype, c->q, row * D + d) * tu_load(c->dtype, c->k, col * D + d);
      float got = c->s_out[t * (TK / 2) + i];
      if (got != (float)want) {
        snprintf(msg, cap, "S = Q K^T wrong at row %d, key %d (thread %d, value %d): %g, want %g", row, col, t, i, got, want);
        ok = 0;
      }
    }
  for (int t = 0; t < 128 && ok; t++)
    for (int i = 0; i < D / 2 && ok; i++) {
      int row, col;
      d_pos(t, i, &row, &col);
      double want = 0;
      for (int j = 0; j < TK; j++) want += P[row * TK + j] * tu_load(c->dtype, c->v, j * D + col);
      float got = c->o_out[t * (D / 2) + i];
      if (got != (float)want) {
        snprintf(msg, cap, "O = P V wrong at row %d, dim %d (thread %d, value %d): %g, want %g", row, col, t, i, got, want);
        ok = 0;
      }
    }
  free(P);
  return ok;
}

void wgp_free(wgp_case *c) {
  free(c->source), free(c->q), free(c->k), free(c->v), free(c->p), free(c->s_out), free(c->o_out);
  memset(c, 0, sizeof *c);
}
