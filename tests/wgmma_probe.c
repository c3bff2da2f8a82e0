/* wgmma_probe.c - see wgmma_probe.h. */
#include "wgmma_probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "runtime/internal.h"
#include "test_util.h"

/* The probe kernel: the plan's DA_SMEM_DECL, load_rows, da_wg_qk and da_wg_pv_tile. */
static const char PROBE[] =
    "\n/* ---- wgmma probe (tests/wgmma_probe.c) ---- */\n"
    "extern \"C\" __global__ void __launch_bounds__(128, 1) " WGP_KERNEL
    "(const da_u16 *q, const da_u16 *k, const da_u16 *v, const da_u32 *p, float *s_out, float *o_out) {\n"
    "  DA_SMEM_DECL\n"
    "  load_rows<TQ, NTHREADS>(Qs, q, TQ, true, 0, HD, threadIdx.x);\n"
    "  load_rows<TK, NTHREADS>(Ks, k, TK, true, 0, HD, threadIdx.x);\n"
    "  load_rows<TK, NTHREADS>(Vs, v, TK, true, 0, HD, threadIdx.x);\n"
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

/* The map kernel (see wgmma_probe.h); %s: the RS wgmma with a K-major B operand of TK
 * columns the plan itself never issues (rendered by map_rs below). */
static const char MAP[] =
    "\n/* ---- wgmma operand map (tests/wgmma_probe.c) ---- */\n"
    "%s"
    "extern \"C\" __global__ void __launch_bounds__(128, 1) " WGP_MAP_KERNEL
    "(const da_u16 *q, const da_u16 *k, const da_u16 *v, const da_u16 *khot, float *out) {\n"
    "  DA_SMEM_DECL\n"
    "  const int t = threadIdx.x, lane = t & 31, row = 16 * (t >> 5) + (lane >> 2);\n"
    "  da_u32 hot[4]; /* A one-hot: A[m][j] = 1 where j = m %% 16 */\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    int m = (row + 8 * (i & 1)) & 15, j = 2 * (lane & 3) + 8 * (i >> 1);\n"
    "    hot[i] = DA_PACK(m == j ? 1.f : 0.f, m == j + 1 ? 1.f : 0.f);\n"
    "  }\n"
    "  const da_u32 qa = da_smem_addr(Qs), ka = da_smem_addr(Ks), va = da_smem_addr(Vs);\n"
    "  for (int pass = 0; pass < %d; pass++) {\n"
    "    load_rows<TQ, NTHREADS>(Qs, q + pass * TQ * HD, TQ, true, 0, HD, threadIdx.x);\n"
    "    load_rows<TK, NTHREADS>(Ks, k + pass * TK * HD, TK, true, 0, HD, threadIdx.x);\n"
    "    load_rows<TK, NTHREADS>(Vs, v + pass * TK * HD, TK, true, 0, HD, threadIdx.x);\n"
    "    da_cp_async_commit();\n"
    "    da_cp_async_wait<0>();\n"
    "    da_fence_proxy_async();\n"
    "    __syncthreads();\n"
    "    float *o = out + (da_i64)pass * %d * 8 * 128 * 64;\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < HD / 16; kk++) { /* K, the B operand of S = Q K^T */\n"
    "      float d[TK / 2];\n"
    "      da_wgmma_fence();\n"
    "      da_wgp_rs_kmajor(d, hot, da_wg_desc_k(ka, kk));\n"
    "      da_wgmma_commit();\n"
    "      da_wgmma_wait<0>();\n"
    "      da_wgmma_fence_operand<TK / 2>(d);\n"
    "      for (int i = 0; i < TK / 2; i++) o[((%d * 8 + kk) * 128 + t) * 64 + i] = d[i];\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < TK / 16; kk++) { /* V, the B operand of O = P V */\n"
    "      float d[HD / 2];\n"
    "      for (int i = 0; i < HD / 2; i++) d[i] = 0.f;\n"
    "      da_wgmma_fence_operand<HD / 2>(d);\n"
    "      da_wgmma_fence();\n"
    "      da_wg_pv(d, hot, da_wg_desc_v(va, kk));\n"
    "      da_wgmma_commit();\n"
    "      da_wgmma_wait<0>();\n"
    "      da_wgmma_fence_operand<HD / 2>(d);\n"
    "      for (int i = 0; i < HD / 2; i++) o[((%d * 8 + kk) * 128 + t) * 64 + i] = d[i];\n"
    "    }\n"
    "    __syncthreads();\n"
    "    load_rows<TK, NTHREADS>(Ks, khot, TK, true, 0, HD, threadIdx.x);\n"
    "    da_cp_async_commit();\n"
    "    da_cp_async_wait<0>();\n"
    "    da_fence_proxy_async();\n"
    "    __syncthreads();\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < HD / 16; kk++) { /* Q, the A operand of S = Q K^T; B one-hot */\n"
    "      float d[TK / 2];\n"
    "      da_wgmma_fence();\n"
    "      da_wg_scores_first(d, da_wg_desc_q(qa, kk), da_wg_desc_k(ka, 0));\n"
    "      da_wgmma_commit();\n"
    "      da_wgmma_wait<0>();\n"
    "      da_wgmma_fence_operand<TK / 2>(d);\n"
    "      for (int i = 0; i < TK / 2; i++) o[((%d * 8 + kk) * 128 + t) * 64 + i] = d[i];\n"
    "    }\n"
    "    __syncthreads();\n"
    "  }\n"
    "}\n";

/* da_wgp_rs_kmajor: d = A B, m64n{TK}k16, A from registers, B K-major (tnspB 0) */
static char *map_rs(int TK, int bf16) {
  const char *t = bf16 ? "bf16" : "f16";
  size_t cap = 8192, n = 0;
  char *s = malloc(cap);
  n += (size_t)snprintf(s + n, cap - n,
                        "__device__ __forceinline__ void da_wgp_rs_kmajor(float *d, const da_u32 a[4], da_u64 b) {\n"
                        "#if defined(__CUDACC__)\n  asm volatile(\"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
                        TK, t, t);
  for (int i = 0; i < TK / 2; i++) n += (size_t)snprintf(s + n, cap - n, "%s%%%d", i ? ", " : "", i);
  n += (size_t)snprintf(s + n, cap - n, "}, {%%%d, %%%d, %%%d, %%%d}, %%%d, 0, 1, 1, 0;\\n\"\n               : ", TK / 2,
                        TK / 2 + 1, TK / 2 + 2, TK / 2 + 3, TK / 2 + 4);
  for (int i = 0; i < TK / 2; i++) n += (size_t)snprintf(s + n, cap - n, "%s\"=f\"(d[%d])", i ? ", " : "", i);
  n += (size_t)snprintf(s + n, cap - n,
                        "\n               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b));\n"
                        "#else\n  da_emu_wgmma(d, %d, %d, 0, a, b, 0, 0);\n#endif\n}\n",
                        TK, bf16);
  return s;
}

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
  char *rs = map_rs(TK, dtype == DA_DTYPE_BFLOAT16);
  size_t n = strlen(r.source), cap = n + sizeof PROBE + sizeof MAP + strlen(rs) + 64;
  c->source = malloc(cap);
  memcpy(c->source, r.source, n);
  memcpy(c->source + n, PROBE, sizeof PROBE);
  n += sizeof PROBE - 1;
  snprintf(c->source + n, cap - n, MAP, rs, WGP_MAP_PASSES, WGP_MAP_OPS, WGP_MAP_K, WGP_MAP_V, WGP_MAP_Q);
  free(rs);
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
  /* the map: element (r, col) of each tile holds five bits per pass of its index r * D + col
   * (13 bits) and its tile's tag (K 1, V 2, Q 3: bits 13 and 14), small integers exact in
   * fp16 and bf16 */
  c->mq_bytes = WGP_MAP_PASSES * c->q_bytes, c->mkv_bytes = WGP_MAP_PASSES * c->kv_bytes;
  c->map_bytes = (size_t)WGP_MAP_PASSES * WGP_MAP_OPS * 8 * 128 * 64 * sizeof(float);
  c->mq = malloc(c->mq_bytes), c->mk = malloc(c->mkv_bytes), c->mv = malloc(c->mkv_bytes);
  c->khot = calloc(1, c->kv_bytes), c->map_out = malloc(c->map_bytes);
  if (64 * D > WGP_MAP_IDX || TK * D > WGP_MAP_IDX) return da__set_error(ctx, DA_ERR_INVALID_ARGUMENT, "wgmma map: tiles too large");
  for (int pass = 0; pass < WGP_MAP_PASSES; pass++) {
    for (int i = 0; i < 64 * D; i++)
      tu_store(dtype, c->mq, (int64_t)pass * 64 * D + i, ((3 * WGP_MAP_IDX + i) >> (5 * pass)) & 31);
    for (int i = 0; i < TK * D; i++) {
      tu_store(dtype, c->mk, (int64_t)pass * TK * D + i, ((1 * WGP_MAP_IDX + i) >> (5 * pass)) & 31);
      tu_store(dtype, c->mv, (int64_t)pass * TK * D + i, ((2 * WGP_MAP_IDX + i) >> (5 * pass)) & 31);
    }
  }
  for (int j = 0; j < 16; j++) tu_store(dtype, c->khot, j * D + j, 1.0); /* K[n][j] = 1 where n = j */
  memset(c->map_out, 0xff, c->map_bytes);
  return DA_OK;
}

/* the index (r * D + col) the passes of accumulator value v of thread t spell, -1 when a
 * pass holds something else than a 5-bit digit */
static long map_read(const wgp_case *c, int op, int kk, int t, int v) {
  long idx = 0;
  for (int pass = 0; pass < WGP_MAP_PASSES; pass++) {
    float x = c->map_out[((((size_t)pass * WGP_MAP_OPS + op) * 8 + kk) * 128 + t) * 64 + v];
    if (!(x >= 0 && x <= 31 && x == (float)(int)x)) return -1;
    idx |= (long)x << (5 * pass);
  }
  return idx;
}

int wgp_check_map(const wgp_case *c, char *msg, size_t cap, const char *dump_path) {
  static const char *const tag[4] = {"zero", "K", "V", "Q"};
  FILE *dump = NULL;
  static const char *const what[WGP_MAP_OPS] = {"K (B of S = Q K^T, K-major)", "V (B of O = P V, MN-major)",
                                                "Q (A of S = Q K^T, K-major)"};
  const int D = c->D, TK = c->TK;
  long wrong = 0;
  msg[0] = 0;
  for (int op = 0; op < WGP_MAP_OPS; op++) {
    const int steps = op == WGP_MAP_V ? TK / 16 : D / 16, nv = op == WGP_MAP_V ? D / 2 : TK / 2;
    for (int kk = 0; kk < steps; kk++)
      for (int t = 0; t < 128; t++)
        for (int v = 0; v < nv; v++) {
          int m, n, wr, wc;
          d_pos(t, v, &m, &n);
          int wt = op == WGP_MAP_K ? 1 : op == WGP_MAP_V ? 2 : 3;
          if (op == WGP_MAP_K) wr = n, wc = 16 * kk + m % 16; /* B[k][n] = K[n][16kk + k], k = m % 16 */
          else if (op == WGP_MAP_V) wr = 16 * kk + m % 16, wc = n; /* B[k][n] = V[16kk + k][n] */
          else if (n < 16) wr = m, wc = 16 * kk + n; /* D[m][n] = Q[m][16kk + n] */
          else wr = 0, wc = 0, wt = 0;              /* one-hot B is zero past column 15 */
          long got = map_read(c, op, kk, t, v);
          if (got == (long)wt * WGP_MAP_IDX + (long)wr * D + wc) continue;
          int gt = got < 0 ? -1 : (int)(got / WGP_MAP_IDX), gi = got < 0 ? -1 : (int)(got % WGP_MAP_IDX);
          int gr = got < 0 ? -1 : gi / D, gc = got < 0 ? -1 : gi % D;
          if (!wrong++) {
            char read[96];
            if (got < 0 || gt > 3) snprintf(read, sizeof read, "a value no tile element holds (outside the tiles?)");
            else snprintf(read, sizeof read, "%s tile element [%d][%d]", tag[gt], gr, gc);
            snprintf(msg, cap, "%s, k16 step %d: operand element %s[%d][%d] read %s, want %s [%d][%d]%s", what[op], kk,
                     op == WGP_MAP_Q ? "A" : "B", op == WGP_MAP_Q ? m : m % 16, n, read, tag[wt], wr, wc,
                     op == WGP_MAP_Q ? " (this map trusts K's first k16 step)" : " (this map trusts the A fragment layout)");
            if (dump_path && (dump = fopen(dump_path, "w")))
              fprintf(dump, "# operand step row col want_tile want_row want_col got_tile got_row got_col (wrong reads only)\n");
          }
          if (dump) fprintf(dump, "%c %d %d %d %d %d %d %d %d %d\n", "KVQ"[op], kk, m, n, wt, wr, wc, gt, gr, gc);
        }
  }
  if (wrong) {
    size_t l = strlen(msg);
    snprintf(msg + l, cap - l, " (%ld wrong reads%s%s)", wrong, dump ? ", every one in " : "", dump ? dump_path : "");
  }
  if (dump) fclose(dump);
  return wrong == 0;
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
  free(c->mq), free(c->mk), free(c->mv), free(c->khot), free(c->map_out);
  memset(c, 0, sizeof *c);
}
