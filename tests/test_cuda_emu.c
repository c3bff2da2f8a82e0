/* test_cuda_emu.c - the generated CUDA kernels, unchanged, run on the CPU: each spec is
 * rendered for the CUDA target, compiled by g++ with -DDA_EMULATE (tests/emu/da_emu.h
 * stands in for the warp-level primitives, on top of the PTX references of
 * templates/cuda/da_device.cuh) and launched in the order the CUDA backend launches them
 * (da__cuda_launch_sequence) by the fiber emulator of tests/emu/emu_runtime.cpp, which
 * also checks barriers, cp.async, ldmatrix and global accesses (see da_emu.h).
 *
 * This is how a machine without a GPU tests what the CUDA kernels compute: the tile
 * classification, the fused residue mapping, the mma fragment plumbing, the -inf
 * handling of the online softmax, the split merge and the grids. What it cannot test is
 * whether the hardware agrees with the references (test_gpu does that on a device).
 *
 * tiles: random specs with tile_q 128 (two m16 tiles per warp) and 64-key tiles.
 * wide: a batch stride of 2^31 + 4096 elements (64-bit offsets) and the tail CTAs of an
 * N = 2^24 launch, both in sparse address space.
 * wgmma: the sm_90a path (cuda_mma = 2) on the golden cases, the edge shapes, unaligned
 * tensors and random specs wherever it applies (fp16 / bf16, head_dim 64 or 128), with
 * one and two warpgroups per CTA and both key tiles; wgmma-overlap: the same with
 * cuda_mma = 3 (the next tile's scores in flight during the softmax).
 * runs: split plans in runs of tokens (a workspace below all of them), bit for bit one run's.
 * Run: build/tests/test_cuda_emu INCLUDE_DIR GOLDEN_DIR [golden|random|edge|wide|tiles|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-tma|idle-wgs|runs|all] [FIRST COUNT]
 *      (wgmma-random FIRST COUNT replays random specs on the wgmma path)
 * (ctest runs the golden cases and shards of the random specs). */
#include <dlfcn.h>
#include <math.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_suite.h"
#include "reference.h"
#include "emu/emu_plan.h"
#include "emu/emu_runtime.h"
#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "runtime/nvrtc.h"
#include "test_util.h"
#include "wgmma_probe.h"

/* Contiguous host arrays, out and lse poisoned with NaN first so every position must be
 * written; opts NULL: the planner's defaults; budget: workspace bytes (0: none, else the
 * branch launches of a split plan run over the tokens in the runs it allows). */
static da_status run_emu_budget(const da_plan_options *opts, size_t budget, da_context *ctx, const da_spec *s,
                                int64_t B, int64_t N, const void *q, const void *k, const void *v, void *out,
                                float *lse) {
  size_t es = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  size_t qb = (size_t)(B * N * s->num_heads * s->head_dim) * es, kb = (size_t)(B * N * s->num_kv_heads * s->head_dim) * es;
  size_t lb = (size_t)(B * s->num_heads * N) * 4;
  memset(out, 0xff, qb);
  memset(lse, 0xff, lb);
  da_args args;
  da_args_init(&args, s, B, N, q, k, v, out, lse);
  args.workspace_bytes = budget;
  return da_emu_execute(ctx, s, opts, &args, qb, kb, qb, lb);
}

/* The suite's runner (user: the options, NULL for the defaults). */
static da_status run_emu(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                         const void *k, const void *v, void *out, float *lse) {
  return run_emu_budget(user, 0, ctx, s, B, N, q, k, v, out, lse);
}

/* run_emu with tile_q 128 where the planner offers it (head_dim <= 96), the key tile of
 * user's options everywhere. */
static da_status run_emu_tq128(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                               const void *k, const void *v, void *out, float *lse) {
  da_plan_options o = *(const da_plan_options *)user;
  o.tile_q = s->head_dim <= 96 ? 128 : 0;
  return run_emu(&o, ctx, s, B, N, q, k, v, out, lse);
}

/* run_emu on the wgmma path (sm_90a; cuda_mma = 2) where the planner offers it (fp16 /
 * bf16 at head_dim 64 or 128), the key tile of user's options there; other specs as
 * run_emu with the defaults. */
static da_status run_emu_wgmma(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                               const void *k, const void *v, void *out, float *lse) {
  da_plan_options o = bs_wgmma_options(s, user);
  return run_emu(&o, ctx, s, B, N, q, k, v, out, lse);
}

/* run_emu on a warp-specialized variant the planner offers only without a sparse layout
 * (user: tile_q 192 with cuda_mma 4, or cuda_mma 5; bs_ws_options), else as run_emu_wgmma. */
static da_status run_emu_ws(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                               const void *k, const void *v, void *out, float *lse) {
  da_plan_options o = bs_ws_options(s, user);
  return run_emu(&o, ctx, s, B, N, q, k, v, out, lse);
}

static void wide_spec(da_spec *s, da_dtype t, int heads, int d, int64_t w0, int64_t w1) {
  da_spec_init(s);
  s->num_branches = 2;
  s->segment_lengths[0] = w0, s->segment_lengths[1] = w1;
  s->dilation_rates[0] = 1, s->dilation_rates[1] = 2;
  s->num_heads = s->num_kv_heads = heads;
  s->head_dim = d;
  s->dtype = t;
  s->causal = 1;
}

/* Shapes the random family rarely reaches: the LongNet tiling with several branches and
 * a ragged tail on the tensor-core path, each dtype; fused with lcm(r) > 1; split and
 * single forced; D = 128 (the largest mma tile); fp32 on the SIMT path. */
static void test_edge(da_context *ctx, bs_runner run, void *user) {
  struct {
    int nb;
    int64_t w[3], r[3];
    int d, causal, mode, heads, kv;
    da_dtype t;
    da_layout lay;
    int64_t n;
  } cases[] = {
      {3, {64, 128, 256}, {1, 2, 4}, 64, 1, DA_MODE_LONGNET, 4, 2, DA_DTYPE_FLOAT16, DA_LAYOUT_NONE, 700},
      {3, {64, 128, 256}, {1, 2, 4}, 64, 0, DA_MODE_LONGNET, 4, 4, DA_DTYPE_BFLOAT16, DA_LAYOUT_NONE, 520},
      {2, {128, 256}, {2, 4}, 128, 1, DA_MODE_LONGNET, 2, 1, DA_DTYPE_FLOAT16, DA_LAYOUT_NONE, 300},
      {2, {256, 512}, {1, 2}, 32, 1, DA_MODE_GROUPED, 4, 2, DA_DTYPE_BFLOAT16, DA_LAYOUT_LOCAL_WINDOW, 600},
      {1, {512, 0, 0}, {1, 0, 0}, 96, 1, DA_MODE_LONGNET, 2, 2, DA_DTYPE_FLOAT16, DA_LAYOUT_GLOBAL_LOCAL, 512},
      {2, {64, 128}, {1, 2}, 64, 1, DA_MODE_LONGNET, 2, 2, DA_DTYPE_FLOAT32, DA_LAYOUT_NONE, 333},
      /* grouped, dense, causal: each branch launch holds its group's heads alone (BR_HEAD0:
       * 2, 2 and 1 of 5 heads), through the longest-first grid of one tile a CTA (mma.sync)
       * and two (the warp-specialized run_tiles), and without a causal mask */
      {3, {128, 256, 512}, {1, 2, 4}, 64, 1, DA_MODE_GROUPED, 5, 5, DA_DTYPE_FLOAT16, DA_LAYOUT_NONE, 1100},
      {3, {128, 256, 512}, {1, 2, 4}, 64, 0, DA_MODE_GROUPED, 5, 5, DA_DTYPE_BFLOAT16, DA_LAYOUT_NONE, 900},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = cases[i].nb;
    for (int b = 0; b < s.num_branches; b++) s.segment_lengths[b] = cases[i].w[b], s.dilation_rates[b] = cases[i].r[b];
    s.head_dim = cases[i].d;
    s.causal = cases[i].causal;
    s.mode = (da_mode)cases[i].mode;
    s.num_heads = cases[i].heads;
    s.num_kv_heads = cases[i].kv;
    s.dtype = cases[i].t;
    s.sparsity.layout = cases[i].lay;
    s.sparsity.block = 16;
    s.sparsity.window = 2;
    s.sparsity.global = 1;
    char what[64];
    snprintf(what, sizeof what, "edge case %zu", i);
    bs_check(ctx, &s, 1, cases[i].n, 77 + i, what, run, user);
  }
  /* the online softmax folds a positive scale into the max and the exp2's FFMA; zero and
   * negative scales keep the multiply first: both kinds on the tensor-core path */
  static const double scales[3] = {0.3, -0.125, 0.0};
  for (int i = 0; i < 3; i++) {
    da_spec s;
    wide_spec(&s, i == 1 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, 64, 128, 256);
    s.causal = i != 2;
    s.has_scale = 1;
    s.scale = scales[i];
    char what[64];
    snprintf(what, sizeof what, "scale %g", scales[i]);
    bs_check(ctx, &s, 1, 300, 500 + (uint64_t)i, what, run, user);
  }
}

/* Address space without memory: pages are only backed where they are written. */
static void *sparse_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}


/* 64-bit offsets: batch 1 of q, k and v starts 2^31 + 4096 elements after batch 0 (a
 * batch stride the caller may pass), so every offset the kernels form for it exceeds
 * 2^31; a 32-bit product anywhere reads the wrong rows or leaves the buffers. Tensor-core
 * (fp16) and SIMT (fp32) paths. */
static void test_wide_offsets(da_context *ctx) {
  const da_dtype types[2] = {DA_DTYPE_FLOAT16, DA_DTYPE_FLOAT32};
  for (int ti = 0; ti < 2; ti++) {
    da_spec s;
    wide_spec(&s, types[ti], 2, 64, 128, 256);
    const int64_t B = 2, N = 384, row = 2 * 64, SB = ((int64_t)1 << 31) + 4096, n = B * N * row;
    size_t es = tu_elem_size(s.dtype), bytes = (size_t)(SB + N * row) * es;
    void *t[3];
    double *dt[3];
    uint64_t st = 31 + (uint64_t)ti;
    for (int i = 0; i < 3; i++) {
      t[i] = sparse_alloc(bytes);
      dt[i] = malloc((size_t)n * 8);
      TU_CHECK(t[i] && dt[i], "no address space for %zu bytes", bytes);
      if (!t[i] || !dt[i]) return;
      for (int64_t j = 0; j < n; j++) {
        int64_t b = j / (N * row), at = b * SB + j % (N * row);
        tu_store(s.dtype, t[i], at, 2 * tu_uniform(&st) - 1);
        dt[i][j] = tu_load(s.dtype, t[i], at);
      }
    }
    void *out = malloc((size_t)n * es);
    float *lse = malloc((size_t)(B * 2 * N) * 4);
    double *ro = malloc((size_t)n * 8), *rl = malloc((size_t)(B * 2 * N) * 8), vmax = 0, eo = 0, el = 0;
    for (int64_t j = 0; j < n; j++) vmax = fmax(vmax, fabs(dt[2][j]));
    da_args a;
    da_args_init(&a, &s, B, N, t[0], t[1], t[2], out, lse);
    a.q_stride[0] = a.k_stride[0] = a.v_stride[0] = SB;
    da_status r = da_emu_execute(ctx, &s, NULL, &a, bytes, bytes, (size_t)n * es, (size_t)(B * 2 * N) * 4);
    TU_CHECK(r == DA_OK, "wide offsets (%s): %s", (s.dtype == DA_DTYPE_FLOAT16 ? "fp16" : "fp32"), da_context_last_error(ctx));
    da_ref_attention(&s, B, N, dt[0], dt[1], dt[2], ro, rl);
    TU_CHECK(r == DA_OK && tu_compare(s.dtype, n, out, ro, B * 2 * N, lse, rl, vmax, &eo, &el),
             "wide offsets (%s): out err %.3g lse err %.3g", (s.dtype == DA_DTYPE_FLOAT16 ? "fp16" : "fp32"), eo, el);
    printf("batch stride 2^31 + 4096 elements, %s: out_err=%.2e lse_err=%.2e\n", (s.dtype == DA_DTYPE_FLOAT16 ? "fp16" : "fp32"), eo, el);
    for (int i = 0; i < 3; i++) munmap(t[i], bytes), free(dt[i]);
    free(out), free(lse), free(ro), free(rl);
  }
}

/* test_long_grid's block filter: the CTAs with a tile of the windows from `first` on. A
 * causal fused grid (one head, one batch here) runs longest first: blocks take groups of
 * `group` windows (the last group the rest too), depth-major inside a group (kernel.cu.tpl
 * da_lpt_unit), so a block's window is its rank in its group's windows; a CTA runs blocks
 * x * per .. x * per + per - 1 (run_tiles). */
typedef struct {
  int64_t first, tpw, group, windows, per;
} long_grid_filter;
static int keep_from(void *user, unsigned x, unsigned y, unsigned z) {
  (void)y, (void)z;
  const long_grid_filter *f = user;
  if (!f->group) return x / f->tpw >= f->first;
  for (int64_t l = (int64_t)x * f->per; l < ((int64_t)x + 1) * f->per && l < f->windows * f->tpw; l++) {
    const int64_t last = (f->windows / f->group > 1 ? f->windows / f->group : 1) - 1; /* it takes the rest */
    const int64_t grp = l / (f->group * f->tpw);
    const int64_t g0 = (grp < last ? grp : last) * f->group, rem = l - g0 * f->tpw;
    const int64_t n = g0 < last * f->group ? f->group : f->windows - g0;
    if (g0 + rem % n >= f->first) return 1;
  }
  return 0;
}

/* N = 2^24 tokens: the fused grid for the whole sequence is launched and the CTAs of the
 * last 4096 positions run; segments are independent, so that window must equal the
 * reference on the window alone. opts NULL: mma.sync at D = 32; else (warp-specialized,
 * two tiles a CTA) D = 64. */
static void test_long_grid(da_context *ctx, const da_plan_options *opts) {
  da_spec s;
  const int64_t N = (int64_t)1 << 24, W = 4096, row = opts ? 64 : 32;
  wide_spec(&s, DA_DTYPE_FLOAT16, 1, (int)row, 2048, 4096);
  da__rendered r;
  if (da__render_ex(ctx, &s, DA_TARGET_CUDA, opts, &r) != DA_OK) {
    TU_CHECK(0, "render: %s", da_context_last_error(ctx));
    return;
  }
  TU_CHECK(!strcmp(r.strategy, "fused"), "N = 2^24: strategy %s, expected fused", r.strategy);
  long_grid_filter first = {(N - W) / r.window_g, r.tiles_per_window, r.lpt_group, (N + r.window_g - 1) / r.window_g,
                            r.ws_tiles};
  TU_CHECK(r.lpt_group > 0 && N / r.window_g > r.lpt_group && r.ws_tiles == (opts ? 2 : 1),
           "N = 2^24: a causal grid in more than one group of windows (%d tiles a CTA)", r.ws_tiles);
  da__rendered_free(&r);
  size_t bytes = (size_t)(N * row) * 2;
  uint16_t *qkv = sparse_alloc(bytes), *out = sparse_alloc(bytes);
  float *lse = sparse_alloc((size_t)N * 4);
  double *dq = malloc((size_t)(W * row) * 8), *ro = malloc((size_t)(W * row) * 8), *rl = malloc((size_t)W * 8);
  TU_CHECK(qkv && out && lse && dq && ro && rl, "N = 2^24: no address space");
  if (!qkv || !out || !lse || !dq || !ro || !rl) return;
  uint64_t st = 5;
  double vmax = 0, eo = 0, el = 0;
  for (int64_t j = 0; j < W * row; j++) {
    tu_store(DA_DTYPE_FLOAT16, qkv, (N - W) * row + j, 2 * tu_uniform(&st) - 1);
    dq[j] = tu_load(DA_DTYPE_FLOAT16, qkv, (N - W) * row + j);
    vmax = fmax(vmax, fabs(dq[j]));
  }
  memset(out + (N - W) * row, 0xff, (size_t)(W * row) * 2);
  memset(lse + N - W, 0xff, (size_t)W * 4);
  da_args a;
  da_args_init(&a, &s, 1, N, qkv, qkv, qkv, out, lse); /* q = k = v: one copy of the input */
  da_emu_set_block_filter(keep_from, &first);
  da_status rc = da_emu_execute(ctx, &s, opts, &a, bytes, bytes, bytes, (size_t)N * 4);
  da_emu_set_block_filter(NULL, NULL);
  const char *what = opts ? "wgmma-ws, two tiles a CTA" : "mma.sync";
  TU_CHECK(rc == DA_OK, "N = 2^24 (%s): %s", what, da_context_last_error(ctx));
  da_ref_attention(&s, 1, W, dq, dq, dq, ro, rl);
  TU_CHECK(rc == DA_OK && tu_compare(s.dtype, W * row, out + (N - W) * row, ro, W, lse + N - W, rl, vmax, &eo, &el),
           "N = 2^24 (%s), last %lld positions: out err %.3g lse err %.3g", what, (long long)W, eo, el);
  printf("N = 2^24 (%s), last %lld positions: out_err=%.2e lse_err=%.2e\n", what, (long long)W, eo, el);
  munmap(qkv, bytes), munmap(out, bytes), munmap(lse, (size_t)N * 4);
  free(dq), free(ro), free(rl);
}

/* Tensors that do not allow 16-byte accesses (base 2 bytes past 16-byte alignment, row
 * strides not multiples of 8): the tensor-core path loads them with plain 2-byte loads
 * instead of cp.async (vec16 = 0), stores out with 2-byte stores (out16 = 0), and must give
 * the same answer. */
/* A [B][N][H][D] tensor of 2-byte dtype dt, uniform values in [-1, 1), element (b, p, h, d)
 * at b * st[0] + p * st[1] + h * st[2] + d from shift elements past the start of a 16-byte
 * aligned buffer of span elements whose other bytes are 0x7f (padding, not data). Returns
 * the buffer (to free); *t is the tensor, *dbl (malloc'ed) its values in [B][N][H][D]
 * order as float64. */
static unsigned char *strided_tensor(da_dtype dt, int64_t B, int64_t N, int64_t H, int64_t D, const int64_t st[3],
                                     int64_t span, int64_t shift, uint64_t *rng, void **t, double **dbl) {
  unsigned char *raw = aligned_alloc(16, (size_t)(span * 2 + 15) / 16 * 16);
  memset(raw, 0x7f, (size_t)span * 2);
  *t = raw + 2 * shift;
  const int64_t n = B * N * H * D;
  *dbl = malloc((size_t)n * 8);
  for (int64_t j = 0; j < n; j++) {
    const int64_t d = j % D, h = j / D % H, p = j / (D * H) % N, b = j / (D * H * N);
    const int64_t at = b * st[0] + p * st[1] + h * st[2] + d;
    tu_store(dt, *t, at, 2 * tu_uniform(rng) - 1);
    (*dbl)[j] = tu_load(dt, *t, at);
  }
  return raw;
}

static void test_unaligned(da_context *ctx, const da_plan_options *opts) {
  /* variants 0, 1: the split strategy (out from the epilogue of each row's last covering
   * branch launch, rows picked by a ballot); 2: fused, 3: single (every row from the
   * attention kernel's epilogue) */
  for (int variant = 0; variant < 4; variant++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = variant == 3 ? 1 : 2;
    s.segment_lengths[0] = variant < 2 ? 64 : 128, s.segment_lengths[1] = variant < 2 ? 128 : 256;
    s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
    s.num_heads = 2, s.num_kv_heads = 1;
    s.head_dim = 64;
    s.causal = variant != 3;
    s.dtype = variant & 1 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
    const int64_t B = 2, N = 300, D = 64, pad = variant & 1 ? 4 : 3, shift = variant & 1 ? 0 : 1; /* elements */
    const int64_t heads[3] = {2, 1, 1};
    unsigned char *raw[3];
    void *t[3];
    double *dt[3];
    int64_t stride[3][3], bytes[3];
    uint64_t st = 400 + (uint64_t)variant;
    for (int i = 0; i < 3; i++) {
      int64_t row = heads[i] * D + pad;
      stride[i][0] = N * row, stride[i][1] = row, stride[i][2] = D;
      bytes[i] = (B * N * row + shift) * 2;
      raw[i] = strided_tensor(s.dtype, B, N, heads[i], D, stride[i], B * N * row + shift, shift, &st, &t[i], &dt[i]);
    }
    int64_t nq = B * N * 2 * D, nl = B * 2 * N;
    /* out laid out like q (same padded rows, same base shift): 2-byte stores of out */
    unsigned char *oraw = aligned_alloc(16, (size_t)(bytes[0] + 15) / 16 * 16);
    memset(oraw, 0xff, (size_t)bytes[0]);
    void *ostrided = oraw + 2 * shift, *out = malloc((size_t)nq * 2);
    float *lse = malloc((size_t)nl * 4);
    double *ro = malloc((size_t)nq * 8), *rl = malloc((size_t)nl * 8), vmax = 0, eo = 0, el = 0;
    for (int64_t j = 0; j < B * N * D; j++) vmax = fmax(vmax, fabs(dt[2][j]));
    da_args a;
    da_args_init(&a, &s, B, N, t[0], t[1], t[2], out, lse);
    memcpy(a.q_stride, stride[0], sizeof a.q_stride);
    memcpy(a.k_stride, stride[1], sizeof a.k_stride);
    memcpy(a.v_stride, stride[2], sizeof a.v_stride);
    a.out = ostrided;
    memcpy(a.out_stride, stride[0], sizeof a.out_stride);
    da__cuda_args ca;
    da__cuda_args_fill(&ca, &a);
    TU_CHECK(ca.vec16 == 0 && ca.out16 == 0, "unaligned variant %d: vec16 or out16 set", variant);
    da_status r = da_emu_execute(ctx, &s, opts, &a, (size_t)bytes[0] - 2 * shift, (size_t)bytes[1] - 2 * shift,
                                 (size_t)bytes[0] - 2 * shift, (size_t)nl * 4);
    for (int64_t j = 0; j < nq; j++) { /* gather out into [B][N][H][D] */
      int64_t d = j % D, h = (j / D) % 2, p = (j / (D * 2)) % N, b = j / (D * 2 * N);
      ((uint16_t *)out)[j] = ((const uint16_t *)ostrided)[b * stride[0][0] + p * stride[0][1] + h * stride[0][2] + d];
    }
    TU_CHECK(r == DA_OK, "unaligned variant %d: %s", variant, da_context_last_error(ctx));
    da_ref_attention(&s, B, N, dt[0], dt[1], dt[2], ro, rl);
    TU_CHECK(r == DA_OK && tu_compare(s.dtype, nq, out, ro, nl, lse, rl, vmax, &eo, &el),
             "unaligned variant %d: out err %.3g lse err %.3g", variant, eo, el);
    printf("unaligned q/k/v/out (%s, %d branch(es), row stride H*D+%lld, base +%lld bytes): out_err=%.2e lse_err=%.2e\n",
           variant & 1 ? "bf16" : "fp16", s.num_branches, (long long)pad, (long long)(2 * shift), eo, el);
    for (int i = 0; i < 3; i++) free(raw[i]), free(dt[i]);
    free(oraw), free(out), free(lse), free(ro), free(rl);
  }
}

typedef struct {
  const void *q, *k, *v, *p;
  float *s, *o;
} wgp_args;

static void wgp_invoke(void *kernel, const void *args) {
  const wgp_args *a = args;
  ((void (*)(const void *, const void *, const void *, const void *, float *, float *))kernel)(a->q, a->k, a->v, a->p,
                                                                                             a->s, a->o);
}
static void wgp_map_invoke(void *kernel, const void *args) { /* p: the one-hot K tile; s: the map */
  const wgp_args *a = args;
  ((void (*)(const void *, const void *, const void *, const void *, float *))kernel)(a->q, a->k, a->v, a->p, a->s);
}

/* The wgmma probe (tests/wgmma_probe.h) in the emulator: each (dtype, D, TK) the path
 * takes, the outputs exact. */
static void test_wgmma_probe(da_context *ctx, const char *include_dir) {
  const wgp_shape *cases = WGP_SHAPES;
  char dir[] = "/tmp/dilattn-wgp-XXXXXX";
  if (!mkdtemp(dir)) {
    TU_CHECK(0, "mkdtemp");
    return;
  }
  for (size_t i = 0; i < WGP_NSHAPES; i++) {
    wgp_case c;
    char so[512], err[4096], name[32];
    if (wgp_init(ctx, &c, cases[i].dtype, cases[i].D, cases[i].TK) != DA_OK) {
      TU_CHECK(0, "wgmma probe %zu: %s", i, da_context_last_error(ctx));
      continue;
    }
    snprintf(name, sizeof name, "wgp%zu", i);
    int maj, min; /* the source test_gpu compiles: NVRTC for sm_90a, where NVRTC is installed */
    if (da__nvrtc_version(ctx, &maj, &min) == DA_OK) {
      da__nvrtc_result res;
      int nopts = 0;
      const char *const *opts = da__cuda_nvrtc_opts(&nopts);
      da_status st = da__nvrtc_compile(ctx, c.source, "wgmma_probe.cu", "sm_90a", opts, nopts, &res);
      TU_CHECK(st == DA_OK, "wgmma probe %zu: NVRTC: %s", i, da_context_last_error(ctx));
      if (st == DA_OK) {
        TU_CHECK(res.spill_bytes <= 0, "wgmma probe %zu: %d spill bytes", i, res.spill_bytes);
        da__nvrtc_result_free(&res);
      }
    }
    void *lib = NULL, *fn = NULL, *map = NULL;
    int ok = da_emu_compile(c.source, dir, name, include_dir, so, sizeof so, err, sizeof err) == 0 &&
             (lib = dlopen(so, RTLD_NOW | RTLD_LOCAL)) && (fn = dlsym(lib, WGP_KERNEL)) && (map = dlsym(lib, WGP_MAP_KERNEL));
    TU_CHECK(ok, "wgmma probe %zu: build: %s", i, err);
    if (ok) { /* the operand map: every read where the kernel's descriptors say */
      da_emu_reset_buffers();
      da_emu_register_buffer(c.mq, c.mq_bytes, 0);
      da_emu_register_buffer(c.mk, c.mkv_bytes, 0);
      da_emu_register_buffer(c.mv, c.mkv_bytes, 0);
      da_emu_register_buffer(c.khot, c.kv_bytes, 0);
      wgp_args a = {c.mq, c.mk, c.mv, c.khot, c.map_out, NULL};
      int rc = da_emu_launch(wgp_map_invoke, map, &a, 1, 1, 1, 128, (size_t)c.smem, 17 + i, err, sizeof err);
      TU_CHECK(rc == 0, "wgmma map %zu: launch: %s", i, err);
      char msg[512] = "";
      TU_CHECK(rc == 0 && wgp_check_map(&c, msg, sizeof msg, NULL), "wgmma map %s D=%d TK=%d: %s",
               cases[i].dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16", cases[i].D, cases[i].TK, msg);
      printf("wgmma map %s D=%d TK=%d: %s\n", cases[i].dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16", cases[i].D,
             cases[i].TK, rc == 0 && !msg[0] ? "every read right" : "wrong");
    }
    if (ok) {
      da_emu_reset_buffers();
      da_emu_register_buffer(c.q, c.q_bytes, 0);
      da_emu_register_buffer(c.k, c.kv_bytes, 0);
      da_emu_register_buffer(c.v, c.kv_bytes, 0);
      wgp_args a = {c.q, c.k, c.v, c.p, c.s_out, c.o_out};
      int rc = da_emu_launch(wgp_invoke, fn, &a, 1, 1, 1, 128, (size_t)c.smem, 7 + i, err, sizeof err);
      TU_CHECK(rc == 0, "wgmma probe %zu: launch: %s", i, err);
      char msg[256] = "";
      TU_CHECK(rc == 0 && wgp_check(&c, msg, sizeof msg), "wgmma probe %s D=%d TK=%d: %s",
               cases[i].dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16", cases[i].D, cases[i].TK, msg);
      printf("wgmma probe %s D=%d TK=%d: %s\n", cases[i].dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16", cases[i].D,
             cases[i].TK, rc == 0 && !msg[0] ? "exact" : "wrong");
    }
    if (lib) dlclose(lib);
    wgp_free(&c);
  }
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The wgmma path (cuda_mma = mma: 2, 3 overlapped, 4 warp-specialized) wherever it applies: golden cases,
 * edge shapes, unaligned tensors, random specs with the default and other tile shapes,
 * full 128-row tiles (two warpgroups), D = 128 with 32-key tiles. */
/* run_emu with a workspace budget (user: size_t bytes, then the options): the branch
 * launches of a split plan run over the tokens in the runs that budget allows. */
typedef struct {
  size_t budget;
  da_plan_options o;
} runs_opts;
static da_status run_emu_runs(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                              const void *k, const void *v, void *out, float *lse) {
  const runs_opts *r = user;
  return run_emu_budget(&r->o, r->budget, ctx, s, B, N, q, k, v, out, lse);
}

/* Split plans whose workspace holds less than all the tokens (da_plan_workspace_min_size):
 * their branch launches run over the tokens in runs of whole periods (the lcm of the w),
 * the workspace indexed by the run; out and lse must be bit for bit those of one run, and
 * right (the reference). LongNet mode with offsets that differ by head (so rows merge
 * across launches in every run), a ragged last run, batch 2, causal and not, mma.sync, the
 * warp-specialized kernel that runs two tiles a CTA and the fp32 (SIMT) path, grouped-query
 * heads and two sparse layouts. */
static void test_runs(da_context *ctx) {
  static const struct {
    int64_t w[3], r[3];
    int causal, mma, tq;
    int64_t n;
    int hkv;
    da_layout layout;
  } cases[] = {
      {{64, 128, 256}, {1, 2, 4}, 0, 1, 0, 868, 4, DA_LAYOUT_NONE}, /* period 256: runs of 256 and 512 */
      {{64, 128, 256}, {1, 2, 4}, 1, 1, 0, 868, 4, DA_LAYOUT_NONE},
      {{128, 192, 384}, {1, 3, 2}, 1, 1, 64, 1000, 4, DA_LAYOUT_NONE}, /* period 384 (w not powers of two) */
      {{128, 256, 512}, {1, 2, 4}, 1, 4, 128, 1300, 4, DA_LAYOUT_NONE}, /* wgmma-ws: two tiles a CTA */
      {{128, 256, 512}, {1, 2, 4}, 0, 4, 128, 1100, 4, DA_LAYOUT_NONE},
      {{64, 128, 256}, {1, 2, 4}, 1, 0, 0, 768, 4, DA_LAYOUT_NONE}, /* float32 (the SIMT path), N a whole number of runs */
      {{64, 128, 256}, {1, 2, 4}, 0, 1, 0, 868, 2, DA_LAYOUT_NONE}, /* grouped-query heads (2 kv heads) */
      {{64, 128, 256}, {1, 2, 4}, 1, 1, 0, 868, 4, DA_LAYOUT_LOCAL_WINDOW}, /* sparse layouts: blocks of each */
      {{128, 256, 512}, {1, 2, 4}, 0, 4, 128, 1100, 4, DA_LAYOUT_DILATED_SPARSE}, /* segment, run or not */
      {{128, 256, 512}, {1, 2, 4}, 1, 6, 128, 1300, 4, DA_LAYOUT_NONE}, /* wgmma-ws-tma: maps kept across runs */
      {{128, 256, 512}, {1, 2, 4}, 0, 6, 0, 1100, 2, DA_LAYOUT_NONE},
  };
  for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = 3;
    for (int i = 0; i < 3; i++) s.segment_lengths[i] = cases[c].w[i], s.dilation_rates[i] = cases[c].r[i];
    s.num_heads = 4, s.num_kv_heads = cases[c].hkv;
    s.sparsity.layout = cases[c].layout;
    s.sparsity.block = 16, s.sparsity.window = 1;
    s.sparsity.num_strides = 2, s.sparsity.strides[0] = 2, s.sparsity.strides[1] = 5;
    s.head_dim = 64;
    s.dtype = c == 5 ? DA_DTYPE_FLOAT32 : c % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
    s.causal = cases[c].causal;
    const int64_t B = 2, N = cases[c].n;
    runs_opts one = {0, {cases[c].tq, 0, 1 << 30, 0, cases[c].mma}}; /* fused_min_queries: split */
    da__rendered r;
    if (da__render_ex(ctx, &s, DA_TARGET_CUDA, &one.o, &r) != DA_OK) {
      TU_CHECK(0, "runs case %d: render: %s", c, da_context_last_error(ctx));
      continue;
    }
    const int64_t period = da__cuda_ws_min_tokens(&r, N);
    const size_t per_token = (size_t)B * 4 * (size_t)r.ws_floats_per_token * 4, full = per_token * (size_t)N;
    TU_CHECK(!strcmp(r.strategy, "split") && r.ws_runs && period < N, "runs case %d: %s plan, period %lld", c,
             r.strategy, (long long)period);
    TU_CHECK(cases[c].mma != 4 || !s.causal || r.ws_tiles == 2, "runs case %d: %d tiles a CTA", c, r.ws_tiles);
    da__rendered_free(&r);
    size_t es = tu_elem_size(s.dtype), qb = (size_t)(B * N * 4 * 64) * es, lb = (size_t)(B * 4 * N) * 4;
    unsigned char *q = malloc(qb), *k = malloc(qb), *v = malloc(qb), *out1 = malloc(qb), *out2 = malloc(qb);
    float *lse1 = malloc(lb), *lse2 = malloc(lb);
    uint64_t st = 4242 + (uint64_t)c;
    for (int64_t i = 0; i < B * N * 4 * 64; i++) {
      tu_store(s.dtype, q, i, 2 * tu_uniform(&st) - 1);
      tu_store(s.dtype, k, i, 2 * tu_uniform(&st) - 1);
      tu_store(s.dtype, v, i, 2 * tu_uniform(&st) - 1);
    }
    TU_CHECK(run_emu_runs(&one, ctx, &s, B, N, q, k, v, out1, lse1) == DA_OK, "runs case %d, one run: %s", c,
             da_context_last_error(ctx));
    /* one period, two periods and a byte short of three, all the tokens but a byte */
    const size_t budgets[4] = {per_token * (size_t)period, per_token * (size_t)period * 2,
                               per_token * (size_t)period * 3 - 1, full - 1};
    for (int b = 0; b < 4; b++) {
      runs_opts ro = one;
      ro.budget = budgets[b];
      const int before = da_emu_plan_launches();
      da_status rc = run_emu_runs(&ro, ctx, &s, B, N, q, k, v, out2, lse2);
      const int launches = da_emu_plan_launches() - before;
      TU_CHECK(rc == DA_OK, "runs case %d, budget %zu: %s", c, budgets[b], da_context_last_error(ctx));
      const int64_t run = budgets[b] >= full ? N : (int64_t)(budgets[b] / per_token) / period * period;
      const int expect = (int)((N + run - 1) / run) * 3; /* three branch launches a run (+ _clear where needed) */
      TU_CHECK(launches == expect || launches == expect + 1, "runs case %d, budget %zu: %d launches, %d expected", c,
               budgets[b], launches, expect);
      TU_CHECK(!memcmp(out1, out2, qb) && !memcmp(lse1, lse2, lb),
               "runs case %d, runs of %lld tokens: out / lse differ from one run", c, (long long)run);
    }
    runs_opts small = one; /* below one period: refused */
    small.budget = per_token * (size_t)period - 1;
    TU_CHECK(run_emu_runs(&small, ctx, &s, B, N, q, k, v, out2, lse2) == DA_ERR_INVALID_ARGUMENT,
             "runs case %d: a budget below one period was not refused", c);
    char what[80];
    snprintf(what, sizeof what, "runs of one period, case %d", c);
    runs_opts least = one;
    least.budget = per_token * (size_t)period;
    bs_check(ctx, &s, B, N, 990 + (uint64_t)c, what, run_emu_runs, &least);
    free(q), free(k), free(v), free(out1), free(out2), free(lse1), free(lse2);
  }
}

static void test_wgmma_suite(da_context *ctx, const char *golden, int mma) {
  da_plan_options wg = {0, 0, 0, 0, mma};
  static const int counts[4] = {8, 6, 6, 8};
  unsigned long long before = da_emu_wgmma_count();
  bs_wgmma(ctx, golden, mma == 4 ? "cuda-emu wgmma-ws" : mma == 3 ? "cuda-emu wgmma-overlap" : "cuda-emu wgmma", mma, 200, counts,
           400, run_emu_wgmma);
  test_edge(ctx, run_emu_wgmma, &wg);
  test_unaligned(ctx, &wg);
  bs_ramp(ctx, run_emu_wgmma, &wg);
  for (int i = 0; i < 4; i++) { /* two warpgroups over full 128-row tiles: segments of 512 and 1024 */
    da_spec s;
    wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, i < 2 ? 64 : 128, 512, 1024);
    s.causal = i % 3 == 0;
    da_plan_options o = {128, 0, 0, 0, mma};
    bs_check(ctx, &s, 1, 1100, 800 + (uint64_t)i, "wgmma, 128-row tiles", run_emu, &o);
  }
  /* the warp-specialized variants of non-default shape: P in two register sets
   * (wgmma-ws-p2, its exps under the P V before; full tiles with even and odd numbers of
   * key tiles exercise both sets) and three consumer warpgroups (tile_q 192, the turn goes
   * round three; full 192-row tiles and ragged ones) */
  static const struct {
    da_plan_options o;
    const char *name;
    int first, w0, w1;
    int64_t n[2];
  } ws_variants[2] = {{{128, 0, 0, 0, 5}, "wgmma-ws-p2", 240, 512, 1024, {1024, 1100}},
                      {{192, 0, 0, 0, 4}, "wgmma-ws 192", 230, 768, 1536, {1536, 1000}}};
  if (mma == 4) bs_idle_wgs(ctx, run_emu_ws, "cuda-emu wgmma-ws", 4);
  if (mma == 4) bs_segment_isolation(ctx, run_emu, &wg, "cuda-emu wgmma-ws");
  bs_nan_inputs(ctx, run_emu, &wg, mma == 2 ? "cuda-emu wgmma" : mma == 3 ? "cuda-emu wgmma-overlap" : "cuda-emu wgmma-ws", 0);
  bs_extreme_scores(ctx, run_emu, &wg, mma == 2 ? "cuda-emu wgmma" : mma == 3 ? "cuda-emu wgmma-overlap" : "cuda-emu wgmma-ws",
                    0, 0);
  for (int v = 0; v < 2 && mma == 4; v++) {
    da_plan_options o = ws_variants[v].o;
    char label[64];
    snprintf(label, sizeof label, "cuda-emu %s", ws_variants[v].name);
    bs_golden(ctx, golden, label, run_emu_ws, &o);
    bs_random(ctx, ws_variants[v].first, 8, 400, run_emu_ws, &o);
    bs_ramp(ctx, run_emu_ws, &o);
    for (int i = 0; i < 4; i++) {
      da_spec s;
      wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, i < 2 ? 64 : 128, ws_variants[v].w0, ws_variants[v].w1);
      s.causal = i % 3 == 0;
      bs_check(ctx, &s, 1, ws_variants[v].n[i >= 2], (v ? 820 : 840) + (uint64_t)i, label, run_emu, &o);
    }
  }
  for (int i = 0; i < 2; i++) { /* D = 128 with 32-key tiles (a tuner candidate), both dtypes */
    da_spec s;
    wide_spec(&s, i ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, 128, 128, 256);
    s.causal = i == 0;
    da_plan_options o = {64, 32, 0, 0, mma};
    bs_check(ctx, &s, 1, 290 + 37 * i, 700 + (uint64_t)i, "wgmma D = 128, 32-key tiles", run_emu, &o);
  }
  for (int i = 0; i < 4; i++) { /* sparse layouts over two warpgroups (128-row tiles): each
                                   computes its own rows' block verdicts on partial tiles */
    da_spec s;
    wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, 64, 512, 1024);
    s.causal = i < 2;
    s.sparsity.layout = i % 2 ? DA_LAYOUT_DILATED_SPARSE : DA_LAYOUT_LOCAL_WINDOW;
    s.sparsity.block = i < 2 ? 32 : 48;
    s.sparsity.window = 1;
    s.sparsity.num_strides = 2, s.sparsity.strides[0] = 2, s.sparsity.strides[1] = 5;
    da_plan_options o = {128, 0, 0, 0, mma};
    char what[64];
    snprintf(what, sizeof what, "sparse, 128-row tiles, case %d", i);
    bs_check(ctx, &s, 1, 1100 + 61 * i, 820 + (uint64_t)i, what, run_emu, &o);
  }
  printf("cuda_mma %d: %llu warpgroup wgmma issued\n", mma, da_emu_wgmma_count() - before);
  TU_CHECK(da_emu_wgmma_count() > before, "the wgmma runs issued no wgmma");
}

/* K and V head-major ([B][Hkv][N][D], rows padded by 8 elements, 16-byte aligned: TMA
 * takes them, the maps' head stride then larger than their row stride), q and out as
 * usual; causal and not, both dtypes, D = 64 and 128, two branches (r = 1, 2). */
static void test_tma_layout(da_context *ctx, const da_plan_options *opts) {
  for (int variant = 0; variant < 4; variant++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = 2;
    s.segment_lengths[0] = 128, s.segment_lengths[1] = 256;
    s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
    s.num_heads = 4, s.num_kv_heads = 2;
    s.head_dim = variant < 2 ? 64 : 128;
    s.causal = variant % 2;
    s.dtype = variant == 1 || variant == 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
    const int64_t B = 2, N = 300 + 37 * variant, D = s.head_dim, H = 4, HKV = 2, row = D + 8;
    const int64_t nq = B * N * H * D, nkv = B * N * HKV * D, nl = B * H * N, span = B * HKV * N * row;
    uint16_t *q = malloc((size_t)nq * 2), *out = malloc((size_t)nq * 2);
    unsigned char *kv[2];
    double *dq = malloc((size_t)nq * 8), *dkv[2], *ro = malloc((size_t)nq * 8), *rl = malloc((size_t)nl * 8);
    float *lse = malloc((size_t)nl * 4);
    double vmax = 0, eo = 0, el = 0;
    uint64_t st = 470 + (uint64_t)variant;
    for (int64_t j = 0; j < nq; j++) tu_store(s.dtype, q, j, 2 * tu_uniform(&st) - 1), dq[j] = tu_load(s.dtype, q, j);
    const int64_t kst[3] = {HKV * N * row, row, N * row}; /* head-major: [B][Hkv][N] rows of D + 8 */
    void *kvt[2];
    for (int t = 0; t < 2; t++) kv[t] = strided_tensor(s.dtype, B, N, HKV, D, kst, span, 0, &st, &kvt[t], &dkv[t]);
    for (int64_t j = 0; j < nkv; j++) vmax = fmax(vmax, fabs(dkv[1][j]));
    da_args a;
    da_args_init(&a, &s, B, N, q, kv[0], kv[1], out, lse);
    memcpy(a.k_stride, kst, sizeof kst);
    memcpy(a.v_stride, kst, sizeof kst);
    da__cuda_args ca;
    da__cuda_args_fill(&ca, &a);
    TU_CHECK(ca.vec16, "head-major variant %d: not 16-byte aligned", variant);
    const unsigned long long before = da_emu_tma_count();
    da_status r = da_emu_execute(ctx, &s, opts, &a, (size_t)nq * 2, (size_t)span * 2, (size_t)nq * 2, (size_t)nl * 4);
    TU_CHECK(r == DA_OK, "head-major variant %d: %s", variant, da_context_last_error(ctx));
    TU_CHECK(da_emu_tma_count() > before, "head-major variant %d: no TMA copy", variant);
    da_ref_attention(&s, B, N, dq, dkv[0], dkv[1], ro, rl);
    TU_CHECK(r == DA_OK && tu_compare(s.dtype, nq, out, ro, nl, lse, rl, vmax, &eo, &el),
             "head-major variant %d: out err %.3g lse err %.3g", variant, eo, el);
    printf("head-major k/v (%s, D = %lld%s): out_err=%.2e lse_err=%.2e\n", s.dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16",
           (long long)D, s.causal ? ", causal" : "", eo, el);
    free(q), free(out), free(dq), free(ro), free(rl), free(lse);
    for (int t = 0; t < 2; t++) free(kv[t]), free(dkv[t]);
  }
}

/* wgmma-ws-tma (cuda_mma 6, the sm_90 default): the producer's copies by the tensor memory
 * accelerator, one thread, tensor maps per offset class. The
 * wgmma suite's shapes (golden, random specs under four tile shapes, sparse ones on
 * wgmma-ws, bs_ws_options), edge cases, the unaligned tensors of the fallback (wgmma-ws's
 * copies), rising maxima, three consumer warpgroups, warpgroups without rows
 * (bs_idle_wgs), and a few specs with no encoder
 * (the fallback over 16-byte-aligned tensors). Fails if no copy went through TMA. */
/* The plan of s under o, rendered: its tiles a CTA (0 where it fails), whether it runs the
 * ring (*ring) and fused (*fused) */
static int plan_tiles(da_context *ctx, const da_spec *s, const da_plan_options *o, int *ring, int *fused) {
  da__rendered r;
  *ring = *fused = 0;
  if (da__render_ex(ctx, s, DA_TARGET_CUDA, o, &r) != DA_OK) return 0;
  const int ws_tiles = r.ws_tiles;
  *ring = r.ws_ring, *fused = !strcmp(r.strategy, "fused");
  da__rendered_free(&r);
  return ws_tiles;
}

/* bs_check of s under o on the emulator with (no_maps) or without tensor maps, sms
 * emulated SMs and persistent grids (persist: from one wave) or none, the emulator set back
 * after; the persistent launches it made */
static int emu_grid_check(da_context *ctx, const da_spec *s, const da_plan_options *o, int64_t B, int64_t N,
                          uint64_t seed, const char *what, int no_maps, int sms, int persist) {
  const int before = da_emu_plan_persistent_launches();
  da_emu_plan_set_tma(!no_maps);
  da_emu_plan_set_sms(sms);
  da_emu_plan_set_persist(persist);
  bs_check(ctx, s, B, N, seed, what, run_emu, (void *)o);
  da_emu_plan_set_tma(1);
  da_emu_plan_set_sms(1);
  da_emu_plan_set_persist(0);
  return da_emu_plan_persistent_launches() - before;
}

/* Random specs of the ring (kernel.cu.tpl run_tiles in 128-row tiles on wgmma-ws-tma: fp16
 * or bf16, D = 64 or 128, no sparse layout; causal, or split and single without a causal
 * mask), seeds first .. first + count - 1: 1 to 3 branches of w 64 to 1024 and r 1 to 4,
 * LongNet or grouped heads, 2 or 4 heads on fewer K/V heads, a batch of 1 or 2, N 100 to
 * 1500, every launch of a wave of blocks a persistent grid on 2 to 5 CTAs (an emulated SM
 * each), every other one without tensor maps. Specs whose plan runs no ring are drawn again. */
static void persistent_random(da_context *ctx, int first, int count) {
  int launched = 0;
  for (int i = first; i < first + count; i++) {
    uint64_t seed = 0x9e11ull * (uint64_t)(i + 1);
    da_spec s;
    da_plan_options o;
    int ring = 0;
    for (int tries = 0; tries < 64 && !ring; tries++) {
      da_spec_init(&s);
      s.num_branches = 1 + (int)(tu_rand(&seed) % 3);
      int64_t w = 64 + (int64_t)(tu_rand(&seed) % 256);
      for (int b = 0; b < s.num_branches; b++, w *= 2)
        s.segment_lengths[b] = w, s.dilation_rates[b] = 1 + (int64_t)(tu_rand(&seed) % 4);
      s.num_heads = tu_rand(&seed) % 2 ? 4 : 2;
      s.num_kv_heads = s.num_heads >> (int)(tu_rand(&seed) % 2);
      s.mode = s.num_branches > 1 && tu_rand(&seed) % 3 == 0 ? DA_MODE_GROUPED : DA_MODE_LONGNET;
      s.head_dim = tu_rand(&seed) % 3 ? 64 : 128;
      s.dtype = tu_rand(&seed) % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
      s.causal = tu_rand(&seed) % 3 != 0;
      o = (da_plan_options){128, 0, tu_rand(&seed) % 2 ? 1 << 30 : 0, 0, 6};
      int fused;
      plan_tiles(ctx, &s, &o, &ring, &fused);
    }
    TU_CHECK(ring, "persistent random %d: no spec of the ring drawn", i);
    if (!ring) continue;
    const int64_t B = 1 + (int64_t)(tu_rand(&seed) % 2), N = 100 + (int64_t)(tu_rand(&seed) % 1401);
    const int sms = 2 + (int)(tu_rand(&seed) % 4);
    char what[160];
    snprintf(what, sizeof what, "persistent random %d (%d branches from w %lld, H %d / %d, D %d, %s%s, B %lld, N %lld%s)",
             i, s.num_branches, (long long)s.segment_lengths[0], s.num_heads, s.num_kv_heads, s.head_dim,
             s.causal ? "causal" : "no mask", s.mode == DA_MODE_GROUPED ? ", grouped" : "", (long long)B, (long long)N,
             i % 2 ? ", no maps" : "");
    launched += emu_grid_check(ctx, &s, &o, B, N, 1000 + (uint64_t)i, what, i % 2, sms, 1);
  }
  TU_CHECK(launched > 0, "random specs of the ring: no persistent launch");
}

static void test_tma_suite(da_context *ctx, const char *golden) {
  static const int counts[4] = {6, 4, 4, 6};
  da_plan_options tma = {0, 0, 0, 0, 6}, tma192 = {192, 0, 0, 0, 6};
  const unsigned long long before = da_emu_tma_count();
  bs_wgmma(ctx, golden, "cuda-emu wgmma-ws-tma", 6, 260, counts, 400, run_emu_ws);
  test_edge(ctx, run_emu_ws, &tma);
  test_unaligned(ctx, &tma);
  test_tma_layout(ctx, &tma);
  bs_segment_isolation(ctx, run_emu, &tma, "cuda-emu wgmma-ws-tma");
  bs_segment_isolation(ctx, run_emu, &tma192, "cuda-emu wgmma-ws-tma 192");
  bs_nan_inputs(ctx, run_emu, &tma, "cuda-emu wgmma-ws-tma", 0);
  bs_extreme_scores(ctx, run_emu, &tma, "cuda-emu wgmma-ws-tma", 0, 0);
  bs_ramp(ctx, run_emu_ws, &tma);
  bs_random(ctx, 290, 6, 400, run_emu_ws, &tma192);
  bs_fused_ws_random(ctx, 20, 6, "cuda-emu wgmma-ws-tma", run_emu, 6); /* fused: every branch's maps */
  bs_idle_wgs(ctx, run_emu_ws, "cuda-emu wgmma-ws-tma", 6); /* warpgroups without rows (the sm_90 default now) */
  for (int i = 0; i < 4; i++) { /* full 192- and 128-row tiles, more key tiles than stages */
    da_spec s;
    wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, i < 2 ? 64 : 128, 768, 1536);
    s.causal = i % 3 == 0;
    bs_check(ctx, &s, 1, i % 2 ? 1536 : 1000, 860 + (uint64_t)i, "wgmma-ws-tma", run_emu, i < 2 ? &tma192 : &tma);
  }
  /* plans of several tiles a CTA (run_tiles) beside the causal ones above: split and
   * single without a causal mask in 192-row tiles (the D = 64 default's two tiles a CTA at
   * most, their merges a row at a time) and in 128-row ones (the ring of tiles: D = 64 with
   * tile_q 128, D = 128's default), a batch of two, units of 3 and 5 tiles (w0 = 576),
   * splits without tensor maps (every producer thread copies: the named barrier of the
   * ring); kernels of two
   * tiles a CTA run with one (the runtime's a->tpc 1 where pairs would leave fewer CTAs than
   * SMs: the emulator's SM count raised), causal and not, a causal fused plan among them;
   * then persistent grids (a counter a launch: one CTA, which draws every tile after its
   * first, the slots of the ring and their parities going round many times; or 2 to 5
   * CTAs, the later ones drawing past the end), fused and split, causal and not, with and
   * without tensor maps. Each plan must render several tiles a CTA, the fused ones fused,
   * and the persistent cases launch persistent grids (the others none). */
  enum { PAIRS, ONE_TILE, PERSIST };
  static const struct {
    int tq, d, causal, single, fused, b, no_maps, how, sms;
    int64_t w0, n;
    da_dtype t;
  } ring[] = {
      {192, 64, 0, 0, 0, 1, 0, PAIRS, 1, 576, 1700, DA_DTYPE_FLOAT16},
      {192, 64, 0, 0, 0, 2, 1, PAIRS, 1, 768, 1100, DA_DTYPE_BFLOAT16},
      {192, 64, 1, 0, 0, 1, 0, ONE_TILE, 1 << 20, 768, 1700, DA_DTYPE_FLOAT16},
      {128, 64, 0, 0, 0, 1, 0, PAIRS, 1, 576, 1700, DA_DTYPE_FLOAT16},
      {128, 64, 0, 0, 0, 2, 0, PAIRS, 1, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 128, 0, 0, 0, 1, 0, PAIRS, 1, 768, 1700, DA_DTYPE_FLOAT16},
      {0, 128, 0, 1, 0, 1, 0, PAIRS, 1, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 64, 0, 0, 0, 1, 1, PAIRS, 1, 768, 1700, DA_DTYPE_FLOAT16},
      {128, 64, 0, 0, 0, 1, 0, ONE_TILE, 1 << 20, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 64, 1, 0, 0, 1, 0, ONE_TILE, 1 << 20, 768, 1700, DA_DTYPE_FLOAT16},
      {0, 64, 1, 0, 1, 1, 0, ONE_TILE, 1 << 20, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 64, 1, 0, 0, 1, 0, PERSIST, 1, 768, 1700, DA_DTYPE_FLOAT16},
      {0, 64, 1, 0, 1, 2, 0, PERSIST, 3, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 128, 0, 0, 0, 1, 1, PERSIST, 2, 768, 1700, DA_DTYPE_FLOAT16},
      {0, 128, 0, 1, 0, 1, 0, PERSIST, 5, 768, 1100, DA_DTYPE_BFLOAT16},
      {128, 64, 1, 0, 0, 1, 1, PERSIST, 1, 576, 1300, DA_DTYPE_BFLOAT16},
  };
  for (size_t i = 0; i < sizeof ring / sizeof ring[0]; i++) {
    da_spec s;
    wide_spec(&s, ring[i].t, 2, ring[i].d, ring[i].w0, 1536);
    s.causal = ring[i].causal;
    if (ring[i].single) s.num_branches = 1;
    /* (tile_q 0: the default plan; else split, fused_min_queries 2^30) */
    const da_plan_options o = {ring[i].tq, 0, ring[i].tq ? 1 << 30 : 0, 0, 6};
    int ring_plan, fused;
    const int ws_tiles = plan_tiles(ctx, &s, &o, &ring_plan, &fused);
    TU_CHECK(ws_tiles == 2 && fused == ring[i].fused, "ring case %zu: a %s plan of %d tiles a CTA (%s)", i,
             fused ? "fused" : "branch", ws_tiles, da_context_last_error(ctx));
    char what[96];
    snprintf(what, sizeof what, "wgmma-ws-tma ring case %zu (%s%s)", i,
             ring[i].how == PAIRS ? "pairs" : ring[i].how == ONE_TILE ? "one tile a CTA" : "persistent",
             ring[i].no_maps ? ", no tensor maps" : "");
    const int persistent = emu_grid_check(ctx, &s, &o, ring[i].b, ring[i].n, 870 + (uint64_t)i, what, ring[i].no_maps,
                                          ring[i].sms, ring[i].how == PERSIST);
    TU_CHECK((persistent > 0) == (ring[i].how == PERSIST), "%s: %d persistent launches", what, persistent);
  }
  /* persistent grids over more heads than the cases above: 4 heads on 2 K/V heads (the
   * ring's tiles carry hkv), split and fused, and the grouped head mode (each head's one
   * branch: BR_HEAD0 in the launch's blocks), with and without tensor maps, on 2 CTAs */
  static const struct {
    int kv, grouped, fused, no_maps;
  } heads4[] = {{2, 0, 0, 0}, {2, 0, 1, 1}, {4, 1, 0, 1}, {2, 1, 0, 0}};
  for (size_t i = 0; i < sizeof heads4 / sizeof heads4[0]; i++) {
    da_spec s;
    wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 4, 64, 576, 1536);
    s.num_kv_heads = heads4[i].kv;
    s.mode = heads4[i].grouped ? DA_MODE_GROUPED : DA_MODE_LONGNET;
    const da_plan_options o = {128, 0, heads4[i].fused ? 0 : 1 << 30, 0, 6};
    int ring_plan, fused;
    plan_tiles(ctx, &s, &o, &ring_plan, &fused);
    TU_CHECK(ring_plan && fused == heads4[i].fused, "heads case %zu: a %s ring plan (%s)", i, fused ? "fused" : "branch",
             da_context_last_error(ctx));
    char what[112];
    snprintf(what, sizeof what, "wgmma-ws-tma persistent, 4 heads on %d K/V heads%s%s", heads4[i].kv,
             heads4[i].grouped ? ", grouped" : "", heads4[i].no_maps ? ", no tensor maps" : "");
    TU_CHECK(emu_grid_check(ctx, &s, &o, 1 + (int)(i % 2), 1300, 890 + (uint64_t)i, what, heads4[i].no_maps, 2, 1) > 0,
             "%s: no persistent launch", what);
  }
  persistent_random(ctx, 0, 6); /* random specs of the ring, persistent */
  TU_CHECK(da_emu_tma_count() > before, "the wgmma-ws-tma runs issued no TMA copy");
  const unsigned long long with_maps = da_emu_tma_count();
  da_emu_plan_set_tma(0);
  for (int i = 0; i < 2; i++) {
    da_spec s;
    wide_spec(&s, i ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, 64 * (i + 1), 512, 1024);
    s.causal = i == 0;
    bs_check(ctx, &s, 1, 1100, 880 + (uint64_t)i, "wgmma-ws-tma without tensor maps", run_emu, &tma);
  }
  da_emu_plan_set_tma(1);
  TU_CHECK(da_emu_tma_count() == with_maps, "TMA copies issued without tensor maps");
  printf("wgmma-ws-tma: %llu TMA copies\n", da_emu_tma_count() - before);
}

/* The emulator itself: a launch that fails in one fiber while the others wait at a
 * barrier, a divergent barrier, a deadlock, each reported with its reason; the fibers
 * those launches leave behind never run again, and launches after them compute right
 * (the fibers start afresh, their stacks reused). */
typedef struct {
  int *out;
  int mode;
} self_args;
static void self_invoke(void *kernel, const void *args) {
  ((void (*)(self_args))kernel)(*(const self_args *)args);
}
static const char SELF_SRC[] =
    "#include \"../../templates/cuda/da_device.cuh\" /* da_emu.h under DA_EMULATE */\n"
    "struct self_args { int *out; int mode; };\n"
    "extern \"C\" __global__ void self_kernel(self_args a) {\n"
    "  __shared__ int acc[4];\n"
    "  const int t = threadIdx.x, lane = t % 32;\n"
    "  if (t < 4) acc[t] = 0;\n"
    "  __syncthreads();\n"
    "  if (a.mode == 1 && t == 77) __syncwarp(1u);          /* names lane 0 only: fails */\n"
    "  if (a.mode == 2 && t == 5) { __syncthreads_or(1); return; } /* another barrier kind */\n"
    "  if (a.mode == 3) {                    /* warp 0 but lane 1 waits for lane 1, which waits */\n"
    "    if (t < 32 && t != 1) __syncwarp(); /* in __syncthreads for them */\n"
    "    else __syncthreads();\n"
    "  }\n"
    "  float v = (float)t;\n"
    "  for (int m = 1; m < 32; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);\n"
    "  __syncthreads();\n"
    "  if (lane == 0) acc[t / 32] = (int)v;\n"
    "  __syncthreads();\n"
    "  a.out[blockIdx.x * blockDim.x + t] = acc[t / 32] * 1000 + t + (int)blockIdx.x * 7;\n"
    "}\n";
static void test_emu_self(const char *include_dir) {
  char dir[] = "/tmp/dilattn-emuself-XXXXXX";
  if (!mkdtemp(dir)) {
    TU_CHECK(0, "mkdtemp");
    return;
  }
  char so[512], err[4096];
  void *lib = NULL, *fn = NULL;
  int ok = da_emu_compile(SELF_SRC, dir, "self", include_dir, so, sizeof so, err, sizeof err) == 0 &&
           (lib = dlopen(so, RTLD_NOW | RTLD_LOCAL)) && (fn = dlsym(lib, "self_kernel"));
  TU_CHECK(ok, "emulator self-check: build: %s", err);
  if (!ok) return;
  enum { T = 128, G = 3 };
  static int out[G * T];
  static const char *const want[4] = {NULL, "thread 77: __syncwarp with mask 0x00000001 that does not name lane 13",
                                            "while other threads wait", "deadlock"};
  for (int round = 0; round < 3; round++)
    for (int mode = 0; mode < 4; mode++) {
      da_emu_reset_buffers();
      da_emu_register_buffer(out, sizeof out, 1);
      memset(out, 0xff, sizeof out);
      self_args a = {out, mode};
      err[0] = '\0';
      const int rc = da_emu_launch(self_invoke, fn, &a, G, 1, 1, T, 0, 31 + (unsigned)(4 * round + mode), err, sizeof err);
      if (!want[mode]) {
        int bad = -1;
        for (int i = 0; i < G * T && bad < 0; i++) { /* a warp's lanes sum to 32 * 32w + 496 */
          const int b = i / T, t = i % T, w = t / 32;
          if (out[i] != (1024 * w + 496) * 1000 + t + 7 * b) bad = i;
        }
        TU_CHECK(rc == 0 && bad < 0, "emulator self-check round %d: rc %d (%s), first wrong output %d", round, rc, err,
                 bad);
      } else {
        TU_CHECK(rc != 0 && strstr(err, want[mode]), "emulator self-check mode %d: rc %d, '%s' lacks '%s'", mode, rc,
                 err, want[mode]);
      }
    }
  printf("emulator self-check: failures and a deadlock reported, launches after them right\n");
  dlclose(lib);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  TU_CHECK(system(cmd) == 0, "%s", cmd);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_cuda_emu INCLUDE_DIR GOLDEN_DIR [golden|random|edge|wide|tiles|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-tma|idle-wgs|runs|all|wgmma-random|wgmma-ws-random|fused-ws-random|persistent-random] [FIRST COUNT]\n");
    return 2;
  }
  const char *which = argc > 3 ? argv[3] : "all";
  int first = argc > 4 ? atoi(argv[4]) : 0, count = argc > 5 ? atoi(argv[5]) : 24;
  if (da_emu_plan_init(argv[1])) return 1;
  da_context *ctx;
  da_context_create(&ctx);
  int all = !strcmp(which, "all");
  if (all || !strcmp(which, "golden")) {
    test_emu_self(argv[1]);
    bs_golden(ctx, argv[2], "cuda-emu", run_emu, NULL);
  }
  if (all || !strcmp(which, "edge")) {
    test_edge(ctx, run_emu, NULL);
    test_unaligned(ctx, NULL);
    bs_segment_isolation(ctx, run_emu, NULL, "cuda-emu");
    bs_nan_inputs(ctx, run_emu, NULL, "cuda-emu", 1); /* mma.sync; float32's SIMT */
    bs_extreme_scores(ctx, run_emu, NULL, "cuda-emu", 1, 0);
    bs_ramp(ctx, run_emu, NULL);
    da_plan_options t128 = {128, 64, 0, 0, 0}; /* 32-row warps, 64-key tiles (D = 64) */
    bs_ramp(ctx, run_emu_tq128, &t128);
  }
  if (all || !strcmp(which, "runs")) test_runs(ctx); /* split plans in runs of tokens */
  if (all || !strcmp(which, "wgmma")) { /* the sm_90a path: probe, golden, edge, unaligned, random, tile shapes */
    test_wgmma_probe(ctx, argv[1]);
    test_wgmma_suite(ctx, argv[2], 2);
  }
  if (all || !strcmp(which, "wgmma-overlap")) test_wgmma_suite(ctx, argv[2], 3); /* the same, overlapped */
  if (all || !strcmp(which, "wgmma-ws")) test_wgmma_suite(ctx, argv[2], 4);      /* the same, warp-specialized */
  if (all || !strcmp(which, "wgmma-ws-tma")) test_tma_suite(ctx, argv[2]); /* the same, TMA copies */
  if (!strcmp(which, "idle-wgs")) bs_idle_wgs(ctx, run_emu_ws, "cuda-emu wgmma-ws", 4); /* that suite's idle-warpgroup part */
  if (!strcmp(which, "idle-wgs-tma")) bs_idle_wgs(ctx, run_emu_ws, "cuda-emu wgmma-ws-tma", 6);
  if (all || !strcmp(which, "tiles")) { /* 32 query rows per warp (tile_q 128), 32-key tiles */
    da_plan_options dflt = {0, 0, 0, 0, 0}, k64 = {0, 64, 0, 0, 0};
    bs_random(ctx, 100, 10, 400, run_emu_tq128, &dflt);
    bs_random(ctx, 110, 6, 400, run_emu_tq128, &k64);
    /* Q fragments read from shared memory per key tile (32-row warps, 128 x 64 at D = 64,
     * 128 x 32 at D = 96), both dtypes, causal and not */
    for (int i = 0; i < 4; i++) {
      da_spec s;
      wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, i < 2 ? 64 : 96, 128, 256);
      s.causal = i % 3 == 0;
      da_plan_options o = {128, i < 2 ? 64 : 32, 0, 0, 0};
      char what[64];
      snprintf(what, sizeof what, "Q from shared memory, case %d", i);
      bs_check(ctx, &s, 1, 333 + 64 * i, 900 + (uint64_t)i, what, run_emu, &o);
    }
  }
  if (all || !strcmp(which, "tiles")) { /* key tiles with fewer rows than one step of a thread's
                                            copies (128 threads: 64 rows a step at D = 16, 32 at
                                            D = 32), so some threads copy none of a tile */
    static const int cases[][3] = {{16, 64, 16}, {16, 64, 32}, {16, 128, 32}, {32, 64, 16}, {32, 128, 16}};
    for (int i = 0; i < 5; i++) {
      da_spec s;
      wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, cases[i][0], 64, 128);
      s.causal = i % 2 == 0;
      da_plan_options o = {cases[i][1], cases[i][2], 0, 0, 0};
      char what[80];
      snprintf(what, sizeof what, "D = %d, %d x %d tiles", cases[i][0], cases[i][1], cases[i][2]);
      bs_check(ctx, &s, 1, 300 + 17 * i, 950 + (uint64_t)i, what, run_emu, &o);
    }
  }
  if (all || !strcmp(which, "tiles")) { /* key tiles of 48, 80 and 112 keys: 6, 10 and 14 n8 score tiles,
                                            not a power of two (the row maximum's tree), with a
                                            large scale */
    static const int tks[3] = {48, 80, 112};
    for (int i = 0; i < 3; i++) {
      da_spec s;
      wide_spec(&s, i % 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, 2, 32, 128, 256);
      s.causal = i != 1;
      /* scores tens of units apart in log2: a row maximum that missed a score tile lets P
       * overflow (a wrong maximum is otherwise invisible: the softmax is shift-invariant) */
      s.has_scale = 1, s.scale = 6.0;
      da_plan_options o = {64, tks[i], 0, 0, 0};
      char what[80];
      snprintf(what, sizeof what, "D = 32, 64 x %d tiles", tks[i]);
      bs_check(ctx, &s, 1, 290 + 31 * i, 970 + (uint64_t)i, what, run_emu, &o);
    }
  }
  if (all || !strcmp(which, "random")) bs_random(ctx, first, count, 400, run_emu, NULL);
  if (!strcmp(which, "wgmma-random")) bs_random(ctx, first, count, 400, run_emu_wgmma, NULL); /* replay on the wgmma path */
  if (!strcmp(which, "fused-ws-random")) bs_fused_ws_random(ctx, first, count, "cuda-emu", run_emu, 4);
  if (!strcmp(which, "persistent-random")) persistent_random(ctx, first, count); /* more of the suite's */
  if (!strcmp(which, "wgmma-ws-random")) { /* the same on the warp-specialized variant, two consumer warpgroups */
    da_plan_options ws = {128, 0, 0, 0, 4};
    bs_random(ctx, first, count, 400, run_emu_wgmma, &ws);
  }
  if (all || !strcmp(which, "wide")) {
    test_wide_offsets(ctx);
    test_long_grid(ctx, NULL);
    da_plan_options ws = {0, 0, 0, 0, 4};
    test_long_grid(ctx, &ws);
  }
  printf("%d emulated launches\n", da_emu_plan_launches());
  da_context_destroy(ctx);
  da_emu_plan_done(!tu_failed);
  return tu_report();
}
