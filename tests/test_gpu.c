/* test_gpu.c - the CUDA backend on a real GPU (CTest label gpu). Exits 77 (CTest: skipped)
 * with the reason when no driver or GPU is present.
 *   golden:  every case in ../shared/golden on the CUDA backend
 *   default-tma: (sm_90) the default instruction, wgmma-ws-tma, on LongNet specs (fused,
 *            split, GQA at D = 128), each execution with its tensor maps (a driver that
 *            refused one would only cost speed otherwise)
 *   random:  seeded random specs (fp16/bf16 on tensor cores at D = 32/64/96/128, fp32 and
 *            odd D on the SIMT path, every layout, causal, GQA, ragged N) vs the reference
 *   large:   N = 1,048,576, H = 8, D = 64 fp16: workspace 0 (memory linear in N), first
 *            and last 4096 positions checked against the reference
 *   unaligned: random specs with q, k, v 2 bytes past 16-byte alignment (plain loads
 *            instead of cp.async); an odd pointer refused
 *   huge:    q with more than 2^31 elements: the last segment checked (64-bit offsets)
 *   graph: (in small too) executions captured into a CUDA graph, bitwise the direct ones
 *   tma-memo: (sm_90; in small too) a plan's tensor maps of earlier arguments serve only
 *            those: A, B, A again bitwise as they should be
 *   foreign: a stream of a non-primary CUDA context on the device: refused, by name; a
 *            green context's stream: taken, out as the default stream's
 *   wgmma:   (sm_90 only) the wgmma probe, then golden, random and unaligned on the wgmma
 *            path (cuda_mma = 2) wherever it applies, tile shapes, N = 1M
 *   wgmma-overlap: the same with cuda_mma = 3 (overlapped)
 *   wgmma-ws: the same with cuda_mma = 4 (warp-specialized; random specs of its fused
 *     plan too: bs_fused_ws_random), then 192-row tiles and
 *             cuda_mma = 5 (P double-buffered)
 *   wgmma-ws-tma: the same with cuda_mma = 6 (K / V by TMA; sparse specs on 4), 192-row
 *             tiles, fused plans, unaligned tensors (its fallback: wgmma-ws's copies), N = 1M, and
 *             programmatic launches of its split plans (not in small)
 *   persistent: (sm_90 only; in small too) persistent grids of the 128-row causal
 *             plans bitwise the same as the pairs (DILATTN_CTA_TILES), with TMA and without
 *   persistent-race: the same at N = 16384, H = 2 (not in small; for racecheck)
 * Run: build/tests/test_gpu ../shared/golden [golden|default-tma|random|unaligned|foreign|graph|tma-memo|pdl|persistent|persistent-race|sync|large|huge|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-tma|small|probe]
 *      (sync: golden and random with mma.sync forced, on sm_90 devices whose default is wgmma)
 *      (small = golden + a few random specs, for compute-sanitizer) */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend_suite.h"
#include "reference.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_driver.h"
#include "runtime/nvrtc.h"
#include "test_util.h"
#include "wgmma_probe.h"

static da__cuda *dev;

/* Run spec on the CUDA backend over host arrays (copied in and out). shift: bytes the
 * device copies of q, k and v start past an allocation (2: no 16-byte accesses, the
 * kernels load with plain 2-byte loads instead of cp.async). */
static da_status run_cuda(da_context *ctx, const da_spec *s, const da_plan_options *opts, int64_t B, int64_t N,
                          const void *q, const void *k, const void *v, void *out, float *lse, size_t shift) {
  da_plan *plan = NULL;
  da_status st = da_plan_create_ex(ctx, s, DA_BACKEND_CUDA, opts, &plan);
  if (st != DA_OK) return st;
  if (opts && opts->cuda_mma >= 2) { /* the wgmma suites must run what they are named for */
    da_plan_options used;
    TU_CHECK(da_plan_get_options(plan, &used) == DA_OK && used.cuda_mma == opts->cuda_mma,
             "plan did not take the wgmma path %d", opts->cuda_mma);
  }
  size_t es = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  size_t qb = (size_t)(B * N * s->num_heads * s->head_dim) * es, kb = (size_t)(B * N * s->num_kv_heads * s->head_dim) * es;
  size_t lb = (size_t)(B * s->num_heads * N) * 4;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
  /* out and lse poisoned with NaN first, so every position must be written */
  void *poison = malloc(qb > lb ? qb : lb);
  if (!poison) { da_plan_destroy(plan); return DA_ERR_NO_MEMORY; }
  memset(poison, 0xff, qb > lb ? qb : lb);
  if ((st = da__cuda_malloc(ctx, dev, qb + 16, &dq)) == DA_OK && (st = da__cuda_malloc(ctx, dev, kb + 16, &dk)) == DA_OK &&
      (st = da__cuda_malloc(ctx, dev, kb + 16, &dv)) == DA_OK && (st = da__cuda_malloc(ctx, dev, qb + 16, &dout)) == DA_OK &&
      (st = da__cuda_malloc(ctx, dev, lb, &dlse)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, (char *)dq + shift, q, qb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, (char *)dk + shift, k, kb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, (char *)dv + shift, v, kb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, (char *)dout + shift, poison, qb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, dlse, poison, lb)) == DA_OK) {
    da_args a;
    da_args_init(&a, s, B, N, (char *)dq + shift, (char *)dk + shift, (char *)dv + shift, (char *)dout + shift, dlse);
    st = da_plan_execute(plan, &a);
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, out, (char *)dout + shift, qb);
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, lse, dlse, lb);
  }
  free(poison);
  da__cuda_free(dev, dq), da__cuda_free(dev, dk), da__cuda_free(dev, dv), da__cuda_free(dev, dout), da__cuda_free(dev, dlse);
  da_plan_destroy(plan);
  return st;
}

static da_status runner(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                        const void *k, const void *v, void *out, float *lse) {
  (void)user;
  return run_cuda(ctx, s, NULL, B, N, q, k, v, out, lse, 0);
}

/* mma.sync forced (cuda_mma 1): on sm_90 devices the default is the warp-specialized wgmma
 * kernel, so the golden and random checks run this one too. */
static da_status runner_sync(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                             const void *k, const void *v, void *out, float *lse) {
  (void)user;
  da_plan_options o = {0, 0, 0, 0, 1};
  return run_cuda(ctx, s, &o, B, N, q, k, v, out, lse, 0);
}

/* The wgmma path (sm_90a) where it applies (bs_wgmma_options), user's tunables there. */
static da_status runner_wgmma(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                              const void *k, const void *v, void *out, float *lse) {
  da_plan_options o = bs_wgmma_options(s, user);
  return run_cuda(ctx, s, &o, B, N, q, k, v, out, lse, 0);
}

/* a warp-specialized variant the planner offers only without a sparse layout (tile_q 192,
 * cuda_mma 5) where offered (bs_ws_options) */
static da_status runner_ws(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                              const void *k, const void *v, void *out, float *lse) {
  da_plan_options o = bs_ws_options(s, user);
  return run_cuda(ctx, s, &o, B, N, q, k, v, out, lse, 0);
}

/* q, k, v and out one element past 16-byte alignment: the tensor-core path falls back to
 * plain loads and stores; a pointer not aligned to its element is refused. */
static da_status runner_shifted(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                                const void *k, const void *v, void *out, float *lse) {
  size_t shift = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2; /* one element: aligned to it, not to 16 bytes */
  da_plan_options o = user ? bs_ws_options(s, user) : (da_plan_options){0, 0, 0, 0, 0};
  return run_cuda(ctx, s, &o, B, N, q, k, v, out, lse, shift);
}

static void test_unaligned(da_context *ctx, const da_plan_options *wg) {
  bs_random(ctx, 0, 8, 1000, runner_shifted, (void *)wg);
  /* (those eight specs are none of them fp16 / bf16 at D 64 or 128: no wgmma path takes
   * them) the warp-specialized kernels' plain-load copies on specs they serve */
  if (wg && wg->cuda_mma >= 4) bs_fused_ws_random(ctx, 40, 4, "cuda unaligned", runner_shifted, wg->cuda_mma);
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 1, s.segment_lengths[0] = 64, s.dilation_rates[0] = 1;
  s.num_heads = s.num_kv_heads = 1, s.head_dim = 64, s.dtype = DA_DTYPE_FLOAT16;
  da_plan *plan = NULL;
  void *buf = NULL;
  if (da_plan_create(ctx, &s, DA_BACKEND_CUDA, &plan) == DA_OK && da__cuda_malloc(ctx, dev, 4096, &buf) == DA_OK) {
    da_args a;
    da_args_init(&a, &s, 1, 8, (char *)buf + 1, buf, buf, (char *)buf + 2048, NULL);
    TU_CHECK(da_plan_execute(plan, &a) == DA_ERR_INVALID_ARGUMENT, "odd q pointer accepted");
  }
  da__cuda_free(dev, buf);
  da_plan_destroy(plan);
  /* a split plan's caller-given workspace must be 16-byte aligned (8-byte vector accesses) */
  s.num_branches = 2, s.segment_lengths[1] = 128, s.dilation_rates[1] = 4;
  plan = NULL, buf = NULL;
  size_t need = 0;
  const da_plan_options split = {0, 0, 1 << 20, 0, 0}; /* no fused tile holds that many queries: split */
  if (da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &split, &plan) == DA_OK &&
      da_plan_workspace_size(plan, 1, 128, &need) == DA_OK &&
      need > 0 && da__cuda_malloc(ctx, dev, 3 * 128 * 64 * 2 + need + 64, &buf) == DA_OK) {
    da_args a;
    char *q = buf, *ws = q + 3 * 128 * 64 * 2;
    da_args_init(&a, &s, 1, 128, q, q + 128 * 64 * 2, q, q + 2 * 128 * 64 * 2, NULL);
    a.workspace = ws + 8, a.workspace_bytes = need;
    TU_CHECK(da_plan_execute(plan, &a) == DA_ERR_INVALID_ARGUMENT, "workspace 8 bytes past 16-byte alignment accepted");
    a.workspace = ws, a.workspace_bytes = 0;
    TU_CHECK(da_plan_execute(plan, &a) == DA_ERR_INVALID_ARGUMENT, "a workspace of 0 bytes taken");
    a.workspace_bytes = need;
    TU_CHECK(da_plan_execute(plan, &a) == DA_OK && da__cuda_sync(ctx, dev, NULL) == DA_OK, "aligned workspace: %s",
             da_context_last_error(ctx));
  } else {
    TU_CHECK(0, "split plan with a workspace: %s", da_context_last_error(ctx));
  }
  da__cuda_free(dev, buf);
  da_plan_destroy(plan);
}

/* One window of whole segments of test_long's output against the float64 reference
 * (segments are independent, so it has the same answer as the whole sequence); a thread
 * each, the reference being most of the test's time (~20 s a window at H = 16, D = 128). */
typedef struct {
  const da_spec *s;
  const uint16_t *in, *out;
  const float *lse;
  int64_t N, W, p0;
  double eo, el;
} long_window;

static void *long_window_check(void *arg) {
  long_window *j = arg;
  const int64_t H = j->s->num_heads, D = j->s->head_dim, m = j->W * H * D;
  double *dq = calloc((size_t)m, 8), *ro = malloc((size_t)m * 8), *rl = malloc((size_t)(H * j->W) * 8);
  j->eo = j->el = INFINITY;
  if (dq && ro && rl) {
    for (int64_t i = 0; i < m; i++) dq[i] = tu_load(DA_DTYPE_FLOAT16, j->in, j->p0 * H * D + i);
    if (da_ref_attention(j->s, 1, j->W, dq, dq, dq, ro, rl) == 0) {
      j->eo = j->el = 0;
      /* a NaN (an unwritten, poisoned position) is an error too, and stays (fmax drops it) */
      for (int64_t i = 0; i < m; i++) {
        const double d = fabs(tu_load(DA_DTYPE_FLOAT16, j->out, j->p0 * H * D + i) - ro[i]);
        if (isnan(d) || d > j->eo) j->eo = d;
      }
      for (int64_t h = 0; h < H; h++)
        for (int64_t p = 0; p < j->W; p++) {
          const double d = fabs(j->lse[h * j->N + j->p0 + p] - rl[h * j->W + p]);
          if (isnan(d) || d > j->el) j->el = d;
        }
    }
  }
  free(dq), free(ro), free(rl);
  return NULL;
}

/* Long sequence: run on the device, check a prefix and the tail against the reference.
 * Only those two windows hold random inputs, the rest zeros (calloc: nothing to generate
 * for 2^31 elements), which the windows never see; a kernel reading a wrong segment for
 * them would see zeros and fail. */
static void test_long(da_context *ctx, int64_t N, int H, int D, int cuda_mma, const char *what) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 2048, s.segment_lengths[1] = 4096;
  s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
  s.num_heads = s.num_kv_heads = H;
  s.head_dim = D;
  s.dtype = DA_DTYPE_FLOAT16;
  s.causal = 1;
  da_plan *plan = NULL;
  da_plan_options o = {0, 0, 0, 0, cuda_mma};
  if (da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &o, &plan) != DA_OK) {
    TU_CHECK(0, "%s: plan: %s", what, da_context_last_error(ctx));
    return;
  }
  size_t ws = 1;
  da_plan_workspace_size(plan, 1, N, &ws);
  /* (a persistent launch's counter at most: 4 bytes) */
  TU_CHECK(ws <= 4, "%s: workspace %zu bytes; the fused plan should need none but a persistent launch's counter", what,
           ws);
  size_t n = (size_t)N * (size_t)H * (size_t)D, bytes = n * 2;
  const int64_t W = 4096, starts[2] = {0, N - W};
  uint16_t *host = calloc(n, 2), *out = malloc(bytes);
  float *lse = malloc((size_t)H * (size_t)N * 4);
  if (!host || !out || !lse) {
    TU_CHECK(0, "%s: %zu bytes of host memory", what, 2 * bytes);
    free(host), free(out), free(lse);
    da_plan_destroy(plan);
    return;
  }
  memset(out, 0xff, bytes); /* NaN: out and lse are poisoned on the device first */
  memset(lse, 0xff, (size_t)H * (size_t)N * 4);
  uint64_t st = 5;
  for (int w = 0; w < 2; w++)
    for (int64_t i = starts[w] * H * D; i < (starts[w] + W) * H * D; i++)
      tu_store(DA_DTYPE_FLOAT16, host, i, 2 * tu_uniform(&st) - 1);
  void *dq = NULL, *dout = NULL, *dlse = NULL;
  da_status r = da__cuda_malloc(ctx, dev, bytes, &dq);
  if (r == DA_OK) r = da__cuda_malloc(ctx, dev, bytes, &dout);
  if (r == DA_OK) r = da__cuda_malloc(ctx, dev, (size_t)H * (size_t)N * 4, &dlse);
  if (r == DA_OK) r = da__cuda_memcpy_htod(ctx, dev, dq, host, bytes);
  if (r == DA_OK) r = da__cuda_memcpy_htod(ctx, dev, dout, out, bytes);
  if (r == DA_OK) r = da__cuda_memcpy_htod(ctx, dev, dlse, lse, (size_t)H * (size_t)N * 4);
  TU_CHECK(r == DA_OK, "%s: device memory: %s", what, da_context_last_error(ctx));
  if (r == DA_OK) {
    da_args a;
    da_args_init(&a, &s, 1, N, dq, dq, dq, dout, dlse); /* q = k = v: one copy of the input */
    r = da_plan_execute(plan, &a);
    if (r == DA_OK) r = da__cuda_sync(ctx, dev, NULL);
    TU_CHECK(r == DA_OK, "%s: execute: %s", what, da_context_last_error(ctx));
    if (r == DA_OK) {
      r = da__cuda_memcpy_dtoh(ctx, dev, out, dout, bytes);
      if (r == DA_OK) r = da__cuda_memcpy_dtoh(ctx, dev, lse, dlse, (size_t)H * (size_t)N * 4);
      TU_CHECK(r == DA_OK, "%s: copy back: %s", what, da_context_last_error(ctx));
    }
    if (r == DA_OK) {
      long_window jobs[2];
      pthread_t th[2];
      int started[2] = {0, 0};
      for (int w = 0; w < 2; w++) {
        jobs[w] = (long_window){&s, host, out, lse, N, W, starts[w], INFINITY, INFINITY};
        started[w] = pthread_create(&th[w], NULL, long_window_check, &jobs[w]) == 0;
        if (!started[w]) long_window_check(&jobs[w]);
      }
      for (int w = 0; w < 2; w++) {
        if (started[w]) pthread_join(th[w], NULL);
        const long_window *j = &jobs[w];
        TU_CHECK(j->eo <= 1e-2 && j->el <= 1e-2, "%s window %lld: out err %.3g lse err %.3g", what, (long long)j->p0,
                 j->eo, j->el);
        printf("%s: window at %lld: out_err=%.2e lse_err=%.2e\n", what, (long long)j->p0, j->eo, j->el);
      }
    }
  }
  da__cuda_free(dev, dq), da__cuda_free(dev, dout), da__cuda_free(dev, dlse);
  free(host), free(out), free(lse);
  da_plan_destroy(plan);
}

/* One CTA of 128 threads of kernel `name` from cubin over n device copies of buf[j]
 * (bytes[j]; all copied in, so outputs start as the host filled them), the outputs
 * (j >= nin) copied back. */
static da_status wgp_run(da_context *ctx, const void *cubin, const char *name, int smem, int n, int nin,
                         void *const *buf, const size_t *bytes) {
  da__cuda_kernel k = {0};
  void *d[8] = {0}, *params[8];
  da_status st = da__cuda_load(ctx, dev, cubin, name, smem, &k);
  for (int j = 0; j < n && st == DA_OK; j++) st = da__cuda_malloc(ctx, dev, bytes[j], &d[j]), params[j] = &d[j];
  for (int j = 0; j < n && st == DA_OK; j++) st = da__cuda_memcpy_htod(ctx, dev, d[j], buf[j], bytes[j]);
  if (st == DA_OK) st = da__cuda_launch(ctx, dev, &k, 1, 1, 1, 128, 1, 1, (unsigned)smem, NULL, params);
  if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
  for (int j = nin; j < n && st == DA_OK; j++) st = da__cuda_memcpy_dtoh(ctx, dev, buf[j], d[j], bytes[j]);
  for (int j = 0; j < n; j++) da__cuda_free(dev, d[j]);
  if (k.module) da__cuda_unload(dev, &k);
  return st;
}

/* The wgmma probe (tests/wgmma_probe.h) on the device, before the end-to-end suites: the
 * two chains of one warpgroup against exact products, naming the first wrong element;
 * then the operand map (which tile element the hardware reads for every operand element;
 * with DILATTN_WGMMA_MAP_DIR set, any wrong reads go to a file there, for a diagnosis
 * after the session). */
static void test_wgmma_probe(da_context *ctx) {
  const wgp_shape *cases = WGP_SHAPES;
  const char *dump_dir = getenv("DILATTN_WGMMA_MAP_DIR");
  for (size_t i = 0; i < WGP_NSHAPES; i++) {
    wgp_case c;
    const char *dt = cases[i].dtype == DA_DTYPE_FLOAT16 ? "fp16" : "bf16";
    if (wgp_init(ctx, &c, cases[i].dtype, cases[i].D, cases[i].TK) != DA_OK) {
      TU_CHECK(0, "wgmma probe %zu: %s", i, da_context_last_error(ctx));
      continue;
    }
    int nopts = 0;
    const char *const *opts = da__cuda_nvrtc_opts(&nopts);
    da__nvrtc_result res;
    da_status st = da__nvrtc_compile(ctx, c.source, "wgmma_probe.cu", "sm_90a", opts, nopts, &res);
    TU_CHECK(st == DA_OK, "wgmma probe %zu: %s", i, da_context_last_error(ctx));
    if (st != DA_OK) {
      wgp_free(&c);
      continue;
    }
    void *buf[6] = {c.q, c.k, c.v, c.p, c.s_out, c.o_out};
    size_t bytes[6] = {c.q_bytes, c.kv_bytes, c.kv_bytes, c.p_bytes, c.s_bytes, c.o_bytes};
    st = wgp_run(ctx, res.cubin, WGP_KERNEL, c.smem, 6, 4, buf, bytes);
    TU_CHECK(st == DA_OK, "wgmma probe %zu: %s", i, da_context_last_error(ctx));
    char msg[256] = "";
    int ok = st == DA_OK && wgp_check(&c, msg, sizeof msg);
    TU_CHECK(st != DA_OK || ok, "wgmma probe %s D=%d TK=%d: %s", dt, cases[i].D, cases[i].TK, msg);
    printf("wgmma probe %s D=%d TK=%d: %s\n", dt, cases[i].D, cases[i].TK, ok ? "exact" : "wrong");
    void *mbuf[5] = {c.mq, c.mk, c.mv, c.khot, c.map_out};
    size_t mbytes[5] = {c.mq_bytes, c.mkv_bytes, c.mkv_bytes, c.kv_bytes, c.map_bytes};
    st = wgp_run(ctx, res.cubin, WGP_MAP_KERNEL, c.smem, 5, 4, mbuf, mbytes);
    TU_CHECK(st == DA_OK, "wgmma map %zu: %s", i, da_context_last_error(ctx));
    if (st == DA_OK) {
      char mmsg[768] = "", path[1024] = "";
      if (dump_dir) snprintf(path, sizeof path, "%s/wgmma-map-%s-D%d-TK%d.txt", dump_dir, dt, cases[i].D, cases[i].TK);
      int mok = wgp_check_map(&c, mmsg, sizeof mmsg, dump_dir ? path : NULL);
      TU_CHECK(mok, "wgmma map %s D=%d TK=%d: %s", dt, cases[i].D, cases[i].TK, mmsg);
      printf("wgmma map %s D=%d TK=%d: %s\n", dt, cases[i].D, cases[i].TK, mok ? "every read right" : "wrong");
    }
    da__nvrtc_result_free(&res);
    wgp_free(&c);
  }
}

static void test_pdl(da_context *ctx, int mma);
static void test_persistent(da_context *ctx, int64_t N, int H);

/* That the TMA kernel's executions since *with / *without all took their tensor maps (at
 * least one, none without): a real driver that refused a map (its rules stricter than
 * the emulator's reading of them) would cost only speed, wgmma-ws's copies taking over.
 * Updates the counts. */
static void check_tma_used(const char *what, unsigned long long *with, unsigned long long *without) {
  unsigned long long w, wo;
  const char *why;
  da__cuda_tma_stats(&w, &wo, &why);
  TU_CHECK(w > *with && wo == *without, "%s: %llu executions with tensor maps, %llu without (the last: %s)", what,
           w - *with, wo - *without, why ? why : "-");
  *with = w, *without = wo;
}

/* The default instruction on an sm_90 device whose driver and NVRTC take kernel parameters
 * past 4 KiB: wgmma-ws-tma, with its maps (LongNet 2-branch fused, 5-branch split, GQA),
 * right against the reference. */
static void test_default_tma(da_context *ctx) {
  /* LongNet's rates at a quarter of its lengths: whole segments and a partial one at N =
   * 3000 (the float64 reference's cost: seconds) */
  static const int64_t w[5] = {512, 1024, 2048, 4096, 8192}, r[5] = {1, 2, 4, 6, 12};
  if (!da__cuda_big_params(ctx)) {
    printf("default TMA: skipped, the driver or NVRTC predates CUDA 12.1 (the default is wgmma-ws there)\n");
    return;
  }
  /* the default itself: no instruction, record or map switch from the environment */
  static const char *const vars[3] = {"DILATTN_CUDA_MMA", "DILATTN_TUNING", "DILATTN_TMA"};
  char saved[3][64];
  int had[3];
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    had[i] = v != NULL;
    snprintf(saved[i], sizeof saved[i], "%s", v ? v : "");
    unsetenv(vars[i]);
  }
  setenv("DILATTN_TUNING", "0", 1);
  unsigned long long with, without;
  const char *why;
  da__cuda_tma_stats(&with, &without, &why);
  for (int i = 0; i < 3; i++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = i == 0 ? 2 : 5;
    memcpy(s.segment_lengths, w, sizeof w), memcpy(s.dilation_rates, r, sizeof r);
    s.num_heads = 2, s.num_kv_heads = i == 2 ? 1 : 2, s.head_dim = i == 2 ? 128 : 64;
    s.dtype = i == 1 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16, s.causal = i == 1;
    da_plan *p = NULL;
    const da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &p);
    const char *name = p ? da_plan_kernel_name(p) : da_context_last_error(ctx);
    TU_CHECK(st == DA_OK && strstr(name, "_wgmmat"), "default plan %d: the TMA kernel (%s)", i, name);
    da_plan_destroy(p);
    char what[64];
    snprintf(what, sizeof what, "default TMA, case %d", i);
    bs_check(ctx, &s, 1, 3000, 1400 + (uint64_t)i, what, runner, NULL);
    check_tma_used(what, &with, &without);
  }
  for (int i = 0; i < 3; i++) {
    if (had[i]) setenv(vars[i], saved[i], 1);
    else unsetenv(vars[i]);
  }
}

/* The wgmma path (cuda_mma = mma: 2, 3 overlapped, 4 warp-specialized, 6 its TMA copies) wherever it applies: golden, random
 * specs with the default and other tile shapes (one and two warpgroups), unaligned
 * tensors, N = 1M. small: a few of each (for compute-sanitizer). */
static void test_wgmma_suite(da_context *ctx, const char *golden, int mma, int small) {
  da_plan_options wg = {0, 0, 0, 0, mma};
  /* the variants (3, 4) share all but their loop with 2: fewer random specs (each is an
   * NVRTC compile, most of a GPU session's time) */
  static const int plain[4] = {60, 20, 20, 20}, variant[4] = {20, 8, 8, 10}, few[4] = {6, 0, 0, 2};
  const int *counts = small ? few : mma == 2 ? plain : variant;
  static const char *const name[7] = {"", "", "wgmma", "wgmma-overlap", "wgmma-ws", "", "wgmma-ws-tma"};
  /* wgmma-ws-tma has no sparse form: its sparse specs take wgmma-ws (bs_ws_options) */
  const bs_runner run = mma == 6 ? runner_ws : runner_wgmma;
  char label[64], what[96];
  snprintf(label, sizeof label, "cuda %s", name[mma]);
  snprintf(what, sizeof what, "%s N=1048576 H=8 D=64", name[mma]);
  unsigned long long with, without;
  const char *why;
  da__cuda_tma_stats(&with, &without, &why);
  bs_wgmma(ctx, golden, label, mma, 0, counts, 1000, run);
  if (mma == 6) check_tma_used(label, &with, &without); /* aligned tensors: the maps every time */
  bs_ramp(ctx, run, &wg); /* running maxima that grow: both rescale paths */
  test_unaligned(ctx, &wg);
  if (mma >= 4) bs_segment_isolation(ctx, runner_ws, &wg, label); /* an Inf in V stays in its segment */
  bs_nan_inputs(ctx, run, &wg, label, 0); /* NaN in q and k: NaN rows where the reference has them */
  bs_extreme_scores(ctx, run, &wg, label, 0, 0); /* scale 1e6, -inf scores */
  if (mma == 6) { /* three consumer warpgroups; the sm_90 default's fused plans */
    da_plan_options o = {192, 0, 0, 0, 6};
    bs_random(ctx, 230, small ? 3 : 12, 1000, runner_ws, &o);
    if (!small) bs_fused_ws_random(ctx, 0, 8, "cuda wgmma-ws-tma", runner_ws, 6);
  }
  /* P in two register sets (wgmma-ws-p2, cuda_mma 5) and three consumer warpgroups (tile_q 192) */
  static const da_plan_options ws_variants[2] = {{128, 0, 0, 0, 5}, {192, 0, 0, 0, 4}};
  if (mma == 4 || mma == 6) bs_idle_wgs(ctx, runner_ws, label, mma); /* warpgroups without rows; the default is 6 */
  if (mma == 4 && !small) bs_fused_ws_random(ctx, 0, 8, "cuda wgmma-ws", runner_ws, 4); /* (6's: above) */
  for (int v = 0; v < 2 && mma == 4; v++) {
    da_plan_options o = ws_variants[v];
    char vlabel[64];
    snprintf(vlabel, sizeof vlabel, "cuda %s", v ? "wgmma-ws 192" : "wgmma-ws-p2");
    bs_golden(ctx, golden, vlabel, runner_ws, &o);
    bs_random(ctx, v ? 230 : 240, small ? 3 : 12, 1000, runner_ws, &o);
    bs_ramp(ctx, runner_ws, &o);
  }
  if (!small) test_long(ctx, 1 << 20, 8, 64, mma, what);
  if (mma == 6 && !small) test_pdl(ctx, 6); /* its split plans, under programmatic launches */
}

/* LongNet's first `branches` branches (w = 2048 .. 32768, r = 1, 2, 4, 6, 12), fp16, D =
 * 64, heads query and K/V heads */
static da_spec longnet_spec(int branches, int heads, int causal) {
  static const int64_t w[5] = {2048, 4096, 8192, 16384, 32768}, r[5] = {1, 2, 4, 6, 12};
  da_spec s;
  da_spec_init(&s);
  s.num_branches = branches;
  memcpy(s.segment_lengths, w, sizeof w), memcpy(s.dilation_rates, r, sizeof r);
  s.num_heads = s.num_kv_heads = heads, s.head_dim = 64, s.dtype = DA_DTYPE_FLOAT16, s.causal = causal;
  return s;
}

/* Programmatic dependent launches (split and single plans on sm_90 and later): the plan
 * with them gives the same bits as the same plan with DILATTN_PDL=0, over back-to-back
 * executions sharing one workspace on one stream (a launch touching memory before its
 * griddepcontrol.wait would race the launch before it). Both plans in one context: the
 * switch is read when a plan is created. Every other execution runs in runs of tokens
 * (a caller's workspace of da_plan_workspace_min_size: three runs of 32768 tokens, each
 * run's first launch reusing the workspace rows the run before just read), and one more
 * under DILATTN_WORKSPACE_LIMIT (the plan's own workspace, the same runs). */
static void test_pdl(da_context *ctx, int mma) {
  const da_spec s = longnet_spec(5, 2, 1);
  const int64_t N = 2 * 32768 + 1000, n = N * 2 * 64, reps = 20;
  printf("pdl (cuda_mma %d): %s\n", mma, da__cuda_pdl(dev) ? "programmatic dependent launches available" : "not available here");
  const char *was = getenv("DILATTN_PDL");
  char saved[16] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  da_plan *on = NULL, *off = NULL, *limited = NULL;
  const da_plan_options split = {0, 0, 1 << 30, 0, mma}; /* split on every device (fused_min_queries) */
  const char *limit_was = getenv("DILATTN_WORKSPACE_LIMIT");
  char limit_saved[64] = "";
  if (limit_was) snprintf(limit_saved, sizeof limit_saved, "%s", limit_was);
  unsetenv("DILATTN_WORKSPACE_LIMIT"); /* `on` runs in one piece unless given less */
  da_status st = da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &split, &on);
  size_t least = 0, most = 0;
  if (st == DA_OK) st = da_plan_workspace_min_size(on, 1, N, &least);
  if (st == DA_OK) st = da_plan_workspace_size(on, 1, N, &most);
  TU_CHECK(st == DA_OK && least == (size_t)32768 * 2 * 65 * 4 && most == (size_t)N * 2 * 65 * 4,
           "pdl: workspace %zu bytes, least %zu", most, least);
  char limit[32];
  snprintf(limit, sizeof limit, "%zu", least);
  setenv("DILATTN_WORKSPACE_LIMIT", limit, 1);
  if (st == DA_OK) st = da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &split, &limited);
  if (limit_was) setenv("DILATTN_WORKSPACE_LIMIT", limit_saved, 1);
  else unsetenv("DILATTN_WORKSPACE_LIMIT");
  setenv("DILATTN_PDL", "0", 1);
  if (st == DA_OK) st = da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &split, &off);
  if (was) setenv("DILATTN_PDL", saved, 1);
  else unsetenv("DILATTN_PDL");
  TU_CHECK(st == DA_OK && !strcmp(da_plan_strategy(on), "split"), "pdl: plans: %s", da_context_last_error(ctx));
  uint16_t *hq = malloc((size_t)n * 2), *ho = malloc((size_t)n * 2 * (reps + 2));
  void *dq = NULL, *dout = NULL, *dlse = NULL, *dws = NULL;
  if (st == DA_OK && hq && ho) {
    uint64_t seed = 11;
    for (int64_t i = 0; i < n; i++) tu_store(DA_DTYPE_FLOAT16, hq, i, 2 * tu_uniform(&seed) - 1);
    st = da__cuda_malloc(ctx, dev, (size_t)n * 2, &dq);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)n * 2 * (reps + 2), &dout);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)(2 * N) * 4, &dlse);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, least, &dws);
    if (st == DA_OK) st = da__cuda_memcpy_htod(ctx, dev, dq, hq, (size_t)n * 2);
    /* the reference run without, then reps runs with (every other in runs of tokens), one
     * after the other on the stream, then one under the limit */
    for (int i = 0; i <= reps + 1 && st == DA_OK; i++) {
      da_args a;
      da_args_init(&a, &s, 1, N, dq, dq, dq, (char *)dout + (size_t)i * (size_t)n * 2, dlse);
      if (i % 2 == 0 && i > 0 && i <= reps) a.workspace = dws, a.workspace_bytes = least;
      st = da_plan_execute(i > reps ? limited : i ? on : off, &a);
    }
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, ho, dout, (size_t)n * 2 * (reps + 2));
    TU_CHECK(st == DA_OK, "pdl: runs: %s", da_context_last_error(ctx));
    int differ = 0;
    for (int i = 1; i <= reps + 1 && st == DA_OK; i++) differ += memcmp(ho, ho + (size_t)i * (size_t)n, (size_t)n * 2) != 0;
    TU_CHECK(st == DA_OK && differ == 0, "pdl: %d of %lld runs differ from the run without", differ, (long long)reps + 1);
    if (st == DA_OK)
      printf("pdl: %lld runs of a split plan (cuda_mma %d; half of them and one more in runs of 32768 tokens), bitwise the "
             "same as without\n",
             (long long)reps + 1, mma);
  }
  da__cuda_free(dev, dq), da__cuda_free(dev, dout), da__cuda_free(dev, dlse), da__cuda_free(dev, dws);
  free(hq), free(ho);
  da_plan_destroy(on), da_plan_destroy(off), da_plan_destroy(limited);
}

/* Persistent grids (kernel.cu.tpl run_tiles' ring of tiles; DILATTN_CTA_TILES, read at plan
 * creation): causal plans in 128-row tiles at N = 65536, H = 8 (LongNet 5-branch, split:
 * its w = 2048 and 4096 launches have 4096 and 2048 blocks, past the 16 waves of a
 * persistent grid on 132 SMs; dense 2048, fused: 4096; or shorter, where the default rule
 * is DILATTN_CTA_TILES=persistent again) give the same bits with every
 * launch of a wave persistent, with the default rule, with none (pairs: the reference),
 * and persistent with the producers' own copies (DILATTN_TMA=0: every producer thread
 * finds the tiles, the ring's named barrier), two executions each back to back on one
 * stream (each execution's counters from the pool, zeroed on the stream first; the default
 * rule's in one caller's workspace of da_plan_workspace_size bytes, both executions: the
 * second finds the first's counters there, spent, unless it zeroes them). */
static void test_persistent(da_context *ctx, int64_t N, int H) {
  struct {
    const char *ct;
    int no_tma;
  } modes[4] = {{"pairs", 0}, {"persistent", 0}, {NULL, 0}, {"persistent", 1}};
  /* (shorter: no launch has the default rule's 16 waves, so the caller's workspace goes to
   * a persistent plan) */
  if (N * H < 65536 * 8) modes[2].ct = "persistent";
  const int64_t n = N * H * 64, reps = 2;
  const int nout = 4 * (int)reps;
  const char *ct_was = getenv("DILATTN_CTA_TILES"), *tma_was = getenv("DILATTN_TMA");
  char ct_saved[32] = "", tma_saved[32] = "";
  if (ct_was) snprintf(ct_saved, sizeof ct_saved, "%s", ct_was);
  if (tma_was) snprintf(tma_saved, sizeof tma_saved, "%s", tma_was);
  uint16_t *hq = malloc((size_t)n * 2), *ho = malloc((size_t)n * 2 * (size_t)nout);
  for (int sp = 0; sp < 2 && hq && ho; sp++) {
    const da_spec s = longnet_spec(sp ? 1 : 5, H, 1);
    const char *name = sp ? "dense 2048 causal" : "LongNet 5-branch causal";
    da_plan *plans[4] = {NULL, NULL, NULL, NULL};
    da_status st = DA_OK;
    for (int m = 0; m < 4 && st == DA_OK; m++) {
      if (modes[m].ct) setenv("DILATTN_CTA_TILES", modes[m].ct, 1);
      else unsetenv("DILATTN_CTA_TILES");
      /* (the causal defaults, named: no tuning database; LongNet 5-branch split, as its default) */
      const da_plan_options o = {128, 0, sp ? 0 : 1 << 30, 0, 6};
      st = da_plan_create_ex(ctx, &s, DA_BACKEND_CUDA, &o, &plans[m]);
      da_plan_options used;
      if (st == DA_OK && da_plan_get_options(plans[m], &used) == DA_OK &&
          (used.cuda_mma != 6 || used.tile_q != 128 || strcmp(da_plan_strategy(plans[m]), sp ? "single" : "split"))) {
        printf("persistent: %s: not wgmma-ws-tma in 128-row tiles here (cuda_mma %d, tile_q %d): skipped\n", name,
               used.cuda_mma, used.tile_q);
        st = DA_ERR_UNSUPPORTED;
      }
    }
    if (ct_was) setenv("DILATTN_CTA_TILES", ct_saved, 1);
    else unsetenv("DILATTN_CTA_TILES");
    void *dq = NULL, *dout = NULL, *dlse = NULL, *dws = NULL;
    size_t ws_bytes = 0;
    if (st == DA_OK) st = da_plan_workspace_size(plans[2], 1, N, &ws_bytes);
    if (st == DA_OK && ws_bytes) st = da__cuda_malloc(ctx, dev, ws_bytes, &dws);
    if (st == DA_OK) {
      uint64_t seed = 23 + (uint64_t)sp;
      for (int64_t i = 0; i < n; i++) tu_store(DA_DTYPE_FLOAT16, hq, i, 2 * tu_uniform(&seed) - 1);
      st = da__cuda_malloc(ctx, dev, (size_t)n * 2, &dq);
      if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)n * 2 * (size_t)nout, &dout);
      if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)(H * N) * 4, &dlse);
      if (st == DA_OK) st = da__cuda_memcpy_htod(ctx, dev, dq, hq, (size_t)n * 2);
      for (int i = 0; i < nout && st == DA_OK; i++) {
        const int m = i / (int)reps;
        if (modes[m].no_tma) setenv("DILATTN_TMA", "0", 1);
        da_args a;
        da_args_init(&a, &s, 1, N, dq, dq, dq, (char *)dout + (size_t)i * (size_t)n * 2, dlse);
        if (m == 2) a.workspace = dws, a.workspace_bytes = ws_bytes;
        unsigned long long with, without;
        const char *why;
        da__cuda_tma_stats(&with, &without, &why);
        const unsigned long long before = da__cuda_persistent_launches();
        st = da_plan_execute(plans[m], &a);
        if (tma_was) setenv("DILATTN_TMA", tma_saved, 1);
        else unsetenv("DILATTN_TMA");
        /* each mode did what it is named for (a fallback to the pairs would match them) */
        const unsigned long long pers = da__cuda_persistent_launches() - before, w0 = with, wo0 = without;
        da__cuda_tma_stats(&with, &without, &why);
        TU_CHECK(st != DA_OK || ((pers > 0) == (m != 0) && (modes[m].no_tma ? without > wo0 : with > w0)),
                 "persistent: %s, %s%s%s: %llu persistent launches, tensor maps %s", name,
                 modes[m].ct ? modes[m].ct : "default", modes[m].no_tma ? " without TMA" : "",
                 m == 2 ? " (a caller's workspace)" : "", pers, with > w0 ? "used" : "not used");
      }
      if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
      if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, ho, dout, (size_t)n * 2 * (size_t)nout);
      TU_CHECK(st == DA_OK, "persistent: %s: runs: %s", name, da_context_last_error(ctx));
      int differ = 0, nans = 0;
      for (int64_t i = 0; i < n && st == DA_OK; i++) nans += ho[i] == 0xffff || (ho[i] & 0x7c00) == 0x7c00;
      for (int i = 1; i < nout && st == DA_OK; i++) differ += memcmp(ho, ho + (size_t)i * (size_t)n, (size_t)n * 2) != 0;
      TU_CHECK(st == DA_OK && !differ && !nans, "persistent: %s: %d of %d runs differ from pairs' first (%d Inf / NaN there)",
               name, differ, nout - 1, nans);
      if (st == DA_OK && !differ)
        printf("persistent: %s at N = %lld, H = %d: persistent, %s (a caller's workspace of %zu bytes), without TMA "
               "and pairs bitwise the same (%d runs)\n", name, (long long)N, H, modes[2].ct ? modes[2].ct : "default",
               ws_bytes, nout);
    } else if (st != DA_ERR_UNSUPPORTED) {
      TU_CHECK(0, "persistent: %s: plans: %s", name, da_context_last_error(ctx));
    }
    da__cuda_free(dev, dq), da__cuda_free(dev, dout), da__cuda_free(dev, dlse), da__cuda_free(dev, dws);
    for (int m = 0; m < 4; m++) da_plan_destroy(plans[m]);
  }
  free(hq), free(ho);
}

/* graph: executions captured into a CUDA graph (cuStreamBeginCapture_v2, global mode, as an
 * inference engine records a step) give the bits of the same executions run directly,
 * over two launches of the graph with out cleared between them (a second launch that
 * found the first's spent persistent counters would leave rows zero): LongNet 5-branch
 * causal (split: the pool's rows and counters, allocated, zeroed and freed inside the
 * graph; programmatic launches), the same from a caller's workspace (a memset node), dense
 * 2048 causal (single) and LongNet 5-branch without a causal mask (192-row tiles), at
 * N = 65536, H = 8. */
typedef int (*graph_begin_fn)(void *, int);
typedef int (*graph_end_fn)(void *, void **);
typedef int (*graph_inst_fn)(void **, void *, unsigned long long);
typedef int (*graph_launch_fn)(void *, void *);
static void test_graph(da_context *ctx) {
  /* (the driver the library opened: DILATTN_CUDA_LIB, the fake one here, runs the code) */
  const char *lib = getenv("DILATTN_CUDA_LIB");
  void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  typedef int (*retain_fn)(void **, int);
  typedef int (*release_fn)(int);
  typedef int (*ctx_out_fn2)(void **);
  retain_fn retain = h ? (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain") : NULL;
  release_fn release = h ? (release_fn)dlsym(h, "cuDevicePrimaryCtxRelease_v2") : NULL;
  int (*push)(void *) = h ? (int (*)(void *))dlsym(h, "cuCtxPushCurrent_v2") : NULL;
  ctx_out_fn2 pop = h ? (ctx_out_fn2)dlsym(h, "cuCtxPopCurrent_v2") : NULL;
  int (*screate)(void **, unsigned) = h ? (int (*)(void **, unsigned))dlsym(h, "cuStreamCreate") : NULL;
  int (*sdestroy)(void *) = h ? (int (*)(void *))dlsym(h, "cuStreamDestroy_v2") : NULL;
  graph_begin_fn begin = h ? (graph_begin_fn)dlsym(h, "cuStreamBeginCapture_v2") : NULL;
  graph_end_fn end = h ? (graph_end_fn)dlsym(h, "cuStreamEndCapture") : NULL;
  graph_inst_fn inst = h ? (graph_inst_fn)dlsym(h, "cuGraphInstantiateWithFlags") : NULL;
  graph_launch_fn glaunch = h ? (graph_launch_fn)dlsym(h, "cuGraphLaunch") : NULL;
  int (*gxdestroy)(void *) = h ? (int (*)(void *))dlsym(h, "cuGraphExecDestroy") : NULL;
  int (*gdestroy)(void *) = h ? (int (*)(void *))dlsym(h, "cuGraphDestroy") : NULL;
  if (!retain || !release || !push || !pop || !screate || !sdestroy || !begin || !end || !inst || !glaunch ||
      !gxdestroy || !gdestroy) {
    printf("graph: skipped, the driver lacks stream capture or graph calls\n");
    return;
  }
  void *pctx = NULL, *popped = NULL, *stream = NULL;
  const int ordinal = da__cuda_device_ordinal(dev);
  int rc = retain(&pctx, ordinal);
  if (rc == 0) rc = push(pctx);
  if (rc == 0) {
    rc = screate(&stream, 1 /* non-blocking */);
    pop(&popped);
  }
  TU_CHECK(rc == 0 && stream, "graph: a stream of the primary context: %d", rc);
  static const struct {
    int branches, causal, caller_ws;
    const char *what;
  } C[] = {{5, 1, 0, "LongNet 5-branch causal, the pool's workspace"},
           {5, 1, 1, "LongNet 5-branch causal, a caller's workspace"},
           {1, 1, 0, "dense 2048 causal"},
           {5, 0, 0, "LongNet 5-branch"}};
  const int64_t N = 65536, n = N * 8 * 64;
  uint16_t *hq = malloc((size_t)n * 2), *ho = malloc((size_t)n * 2 * 2);
  for (size_t c = 0; c < sizeof C / sizeof C[0] && rc == 0 && hq && ho; c++) {
    const da_spec s = longnet_spec(C[c].branches, 8, C[c].causal);
    da_plan *plan = NULL;
    void *dq = NULL, *dout = NULL, *dlse = NULL, *dws = NULL, *graph = NULL, *exec = NULL;
    size_t wsb = 0;
    da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &plan);
    if (st == DA_OK) st = da_plan_workspace_size(plan, 1, N, &wsb);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)n * 2, &dq);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)n * 2 * 2, &dout);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)(8 * N) * 4, &dlse);
    if (st == DA_OK && C[c].caller_ws && wsb) st = da__cuda_malloc(ctx, dev, wsb, &dws);
    uint64_t seed = 41 + c;
    for (int64_t i = 0; i < n; i++) tu_store(DA_DTYPE_FLOAT16, hq, i, 2 * tu_uniform(&seed) - 1);
    if (st == DA_OK) st = da__cuda_memcpy_htod(ctx, dev, dq, hq, (size_t)n * 2);
    da_args a;
    da_args_init(&a, &s, 1, N, dq, dq, dq, dout, dlse);
    a.stream = stream;
    if (dws) a.workspace = dws, a.workspace_bytes = wsb;
    if (st == DA_OK) st = da_plan_execute(plan, &a); /* directly: out slot 0 */
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, stream);
    a.out = (char *)dout + (size_t)n * 2;
    int brc = st == DA_OK ? begin(stream, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */) : -1, erc = -1, irc = -1, lrc = -1;
    da_status cst = brc == 0 ? da_plan_execute(plan, &a) : DA_ERR_DEVICE;
    if (brc == 0) erc = end(stream, &graph);
    push(pctx); /* (the graph calls work in the current context) */
    if (erc == 0 && cst == DA_OK) irc = inst(&exec, graph, 0);
    lrc = irc;
    for (int l = 0; l < 2 && lrc == 0; l++) {
      da_status zs = da__cuda_zero_async(ctx, dev, a.out, (size_t)n / 2, stream);
      lrc = zs == DA_OK ? glaunch(exec, stream) : -2;
    }
    pop(&popped);
    if (lrc == 0) st = da__cuda_sync(ctx, dev, stream);
    if (lrc == 0 && st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, ho, dout, (size_t)n * 2 * 2);
    TU_CHECK(st == DA_OK && brc == 0 && cst == DA_OK && erc == 0 && irc == 0 && lrc == 0,
             "graph: %s: capture %d, execute %s (%s), end %d, instantiate %d, launches %d, then %s", C[c].what, brc,
             da_status_name(cst), cst ? da_context_last_error(ctx) : "", erc, irc, lrc, da_status_name(st));
    if (st == DA_OK && lrc == 0) {
      const int same = !memcmp(ho, ho + n, (size_t)n * 2);
      TU_CHECK(same, "graph: %s: the graph's out differs from the direct execution's", C[c].what);
      if (same)
        printf("graph: %s at N = %lld (%s, workspace %zu bytes%s): two graph launches bitwise the direct run\n",
               C[c].what, (long long)N, da_plan_strategy(plan), wsb, dws ? ", the caller's" : "");
    }
    push(pctx);
    if (exec) gxdestroy(exec);
    if (graph) gdestroy(graph);
    pop(&popped);
    da__cuda_free(dev, dq), da__cuda_free(dev, dout), da__cuda_free(dev, dlse), da__cuda_free(dev, dws);
    da_plan_destroy(plan);
  }
  free(hq), free(ho);
  if (stream) {
    push(pctx);
    sdestroy(stream);
    pop(&popped);
  }
  if (pctx) release(ordinal);
}

/* tma-memo: (sm_90; in small too) a plan's tensor maps kept for the arguments it last ran
 * with (cuda_backend.c memo) serve only those: one plan runs on inputs A, then B, then A
 * again (its maps from the memo) and a new plan on B (maps encoded afresh). A's two outputs
 * must be bitwise equal, and B's bitwise the new plan's and unlike A's: a memo that took
 * B's arguments for A's would give B A's output. LongNet 2-branch (fused) and 5-branch
 * causal (split), N = 16384, H = 8, D = 64. */
static void test_tma_memo(da_context *ctx) {
  const int64_t N = 16384, n = N * 8 * 64;
  uint16_t *h = malloc((size_t)n * 2), *ho = malloc((size_t)n * 2 * 4);
  for (int c = 0; c < 2 && h && ho; c++) {
    const da_spec s = longnet_spec(c ? 5 : 2, 8, c);
    da_plan *p = NULL, *fresh = NULL;
    void *d[2] = {NULL, NULL}, *dout = NULL, *dlse = NULL;
    da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &p);
    if (st == DA_OK) st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &fresh);
    for (int i = 0; i < 2 && st == DA_OK; i++) {
      uint64_t seed = 71 + 2 * (uint64_t)c + (uint64_t)i;
      for (int64_t j = 0; j < n; j++) tu_store(DA_DTYPE_FLOAT16, h, j, 2 * tu_uniform(&seed) - 1);
      st = da__cuda_malloc(ctx, dev, (size_t)n * 2, &d[i]);
      if (st == DA_OK) st = da__cuda_memcpy_htod(ctx, dev, d[i], h, (size_t)n * 2);
    }
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)n * 2 * 4, &dout);
    if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)(8 * N) * 4, &dlse);
    unsigned long long with0, without0, with1, without1;
    const char *why;
    da__cuda_tma_stats(&with0, &without0, &why);
    /* out slots: 0 A, 1 B, 2 A again, 3 B by the new plan */
    static const int input[4] = {0, 1, 0, 1};
    for (int run = 0; run < 4 && st == DA_OK; run++) {
      da_args a;
      da_args_init(&a, &s, 1, N, d[input[run]], d[input[run]], d[input[run]], (char *)dout + (size_t)run * n * 2, dlse);
      st = da_plan_execute(run == 3 ? fresh : p, &a);
    }
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, ho, dout, (size_t)n * 2 * 4);
    da__cuda_tma_stats(&with1, &without1, &why);
    TU_CHECK(st == DA_OK && with1 - with0 == 4 && without1 == without0,
             "tma-memo %d: %s; %llu executions with maps of 4", c, st ? da_context_last_error(ctx) : "ok", with1 - with0);
    if (st == DA_OK) {
      const int a_same = !memcmp(ho, ho + 2 * n, (size_t)n * 2), b_same = !memcmp(ho + n, ho + 3 * n, (size_t)n * 2),
                ab = !memcmp(ho, ho + n, (size_t)n * 2);
      TU_CHECK(a_same && b_same && !ab, "tma-memo, %s: A then A again bitwise %s, B and a new plan's B %s, A and B %s",
               c ? "LongNet 5-branch causal" : "LongNet 2-branch", a_same ? "equal" : "DIFFERENT",
               b_same ? "equal" : "DIFFERENT", ab ? "EQUAL" : "different");
      if (a_same && b_same && !ab) printf("tma-memo: %s (%s): A, B, A, a new plan's B as they should be\n",
                                          c ? "LongNet 5-branch causal" : "LongNet 2-branch", da_plan_strategy(p));
    }
    da__cuda_free(dev, d[0]), da__cuda_free(dev, d[1]), da__cuda_free(dev, dout), da__cuda_free(dev, dlse);
    da_plan_destroy(p), da_plan_destroy(fresh);
  }
  free(h), free(ho);
}

/* foreign: a stream of a CUDA context other than the device's primary one (a C engine on
 * the driver API makes its own with cuCtxCreate). The plans' modules and memory live in the
 * primary context, so such a stream must be refused with a clear error, never launched
 * into; and the primary context must stay usable after. */
typedef int (*ctx_create_v2_fn)(void **, unsigned, int);
typedef int (*ctx_create_v4_fn)(void **, void *, unsigned, int);
typedef int (*ctx_fn)(void *);
typedef int (*ctx_out_fn)(void **);
typedef int (*stream_create_fn)(void **, unsigned);
/* A green context's stream (CUDA 12.4+, cuGreenCtxStreamCreate; flashinfer's
 * split_device_green_ctx hands PyTorch such streams): its context is the primary one with
 * the green context's SMs (cuda.h, cuCtxFromGreenCtx), so it is taken, and out is the
 * default stream's, bit for bit. */
typedef int (*get_res_fn)(int, void *, int);
typedef int (*gen_desc_fn)(void **, void *, unsigned);
typedef int (*green_create_fn)(void **, void *, int, unsigned);
typedef int (*green_stream_fn)(void **, void *, unsigned, int);
static void test_green_stream(da_context *ctx, void *h, da_plan *plan, da_args a, void *q, void *o, size_t bytes) {
  get_res_fn get_res = (get_res_fn)dlsym(h, "cuDeviceGetDevResource");
  gen_desc_fn gen_desc = (gen_desc_fn)dlsym(h, "cuDevResourceGenerateDesc");
  green_create_fn gcreate = (green_create_fn)dlsym(h, "cuGreenCtxCreate");
  green_stream_fn gstream = (green_stream_fn)dlsym(h, "cuGreenCtxStreamCreate");
  ctx_fn gdestroy = (ctx_fn)dlsym(h, "cuGreenCtxDestroy"), sdestroy = (ctx_fn)dlsym(h, "cuStreamDestroy_v2");
  if (!get_res || !gen_desc || !gcreate || !gstream || !gdestroy || !sdestroy) {
    printf("green stream: skipped, the driver predates green contexts (CUDA 12.4)\n");
    return;
  }
  _Alignas(16) unsigned char res[1024]; /* a CUdevResource (144 bytes in CUDA 13's ABI) */
  memset(res, 0, sizeof res);
  void *desc = NULL, *green = NULL, *gs = NULL;
  const int ord = da__cuda_device_ordinal(dev);
  int rc = get_res(ord, res, 1 /* CU_DEV_RESOURCE_TYPE_SM */);
  if (rc == 0) rc = gen_desc(&desc, res, 1);
  if (rc == 0) rc = gcreate(&green, desc, ord, 1 /* CU_GREEN_CTX_DEFAULT_STREAM */);
  if (rc == 0) rc = gstream(&gs, green, 1 /* CU_STREAM_NON_BLOCKING */, 0);
  TU_CHECK(rc == 0, "a green context of the whole device and its stream: CUresult %d", rc);
  const size_t n = bytes / 2;
  uint16_t *hq = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
  da_status st = rc == 0 && hq && want && got ? DA_OK : DA_ERR_NO_MEMORY;
  for (size_t i = 0; st == DA_OK && i < n; i++) hq[i] = (uint16_t)(0x3800u | (i * 37u % 1024u)); /* [0.5, 1) */
  if (st == DA_OK) st = da__cuda_memcpy_htod(ctx, dev, q, hq, bytes);
  a.stream = NULL;
  if (st == DA_OK) st = da_plan_execute(plan, &a);
  if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
  if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, want, o, bytes);
  if (st == DA_OK) memset(got, 0, bytes), st = da__cuda_memcpy_htod(ctx, dev, o, got, bytes);
  TU_CHECK(rc != 0 || st == DA_OK, "green stream: the default stream's run: %s", da_context_last_error(ctx));
  if (st == DA_OK) {
    a.stream = gs;
    st = da_plan_execute(plan, &a);
    printf("green stream: da_plan_execute -> %s%s%s\n", da_status_name(st), st ? ": " : "", st ? da_context_last_error(ctx) : "");
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, gs);
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, got, o, bytes);
    TU_CHECK(st == DA_OK && !memcmp(want, got, bytes), "a green context's stream: taken, and out as the default "
             "stream's (%s: %s)", da_status_name(st), st ? da_context_last_error(ctx) : "out differs");
  }
  free(hq), free(want), free(got);
  if (gs) sdestroy(gs);
  if (green) gdestroy(green);
}

static void test_foreign_stream(da_context *ctx) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ctx_create_v2_fn create2 = h ? (ctx_create_v2_fn)dlsym(h, "cuCtxCreate_v2") : NULL;
  ctx_create_v4_fn create4 = h ? (ctx_create_v4_fn)dlsym(h, "cuCtxCreate_v4") : NULL;
  ctx_out_fn pop = h ? (ctx_out_fn)dlsym(h, "cuCtxPopCurrent_v2") : NULL;
  ctx_fn push = h ? (ctx_fn)dlsym(h, "cuCtxPushCurrent_v2") : NULL, destroy = h ? (ctx_fn)dlsym(h, "cuCtxDestroy_v2") : NULL;
  stream_create_fn screate = h ? (stream_create_fn)dlsym(h, "cuStreamCreate") : NULL;
  ctx_fn sdestroy = h ? (ctx_fn)dlsym(h, "cuStreamDestroy_v2") : NULL;
  if ((!create2 && !create4) || !pop || !push || !destroy || !screate || !sdestroy) {
    printf("foreign stream: skipped, the driver lacks cuCtxCreate\n");
    return;
  }
  void *fctx = NULL, *fstream = NULL, *popped = NULL;
  int rc = create4 ? create4(&fctx, NULL, 0, da__cuda_device_ordinal(dev)) : create2(&fctx, 0, da__cuda_device_ordinal(dev));
  TU_CHECK(rc == 0 && fctx, "cuCtxCreate: %d", rc);
  if (rc) return;
  rc = screate(&fstream, 1 /* non-blocking */);
  TU_CHECK(rc == 0, "cuStreamCreate in the new context: %d", rc);
  pop(&popped); /* the new context is current after cuCtxCreate */
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 1, s.segment_lengths[0] = 256, s.dilation_rates[0] = 1;
  s.num_heads = s.num_kv_heads = 2, s.head_dim = 64, s.dtype = DA_DTYPE_FLOAT16;
  const int64_t N = 512;
  const size_t bytes = (size_t)N * 2 * 64 * 2;
  da_plan *plan = NULL;
  void *q = NULL, *o = NULL, *lse = NULL;
  da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &plan);
  if (st == DA_OK) st = da__cuda_malloc(ctx, dev, bytes, &q);
  if (st == DA_OK) st = da__cuda_malloc(ctx, dev, bytes, &o);
  if (st == DA_OK) st = da__cuda_malloc(ctx, dev, (size_t)N * 2 * 4, &lse);
  TU_CHECK(st == DA_OK, "plan and buffers: %s", da_context_last_error(ctx));
  if (st == DA_OK) {
    da_args a;
    da_args_init(&a, &s, 1, N, q, q, q, o, lse);
    a.stream = fstream;
    st = da_plan_execute(plan, &a);
    printf("foreign stream: da_plan_execute -> %s: %s\n", da_status_name(st), st ? da_context_last_error(ctx) : "");
    if (st == DA_OK) { /* launched: what the driver made of it */
      push(fctx);
      typedef int (*sync_fn)(void *);
      sync_fn ssync = (sync_fn)dlsym(h, "cuStreamSynchronize");
      rc = ssync ? ssync(fstream) : -1;
      pop(&popped);
      printf("foreign stream: cuStreamSynchronize -> %d\n", rc);
    }
    TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "context"),
             "a stream of another CUDA context on this device: %s (%s)", da_status_name(st),
             da_context_last_error(ctx));
    a.stream = NULL; /* the primary context is still usable */
    st = da_plan_execute(plan, &a);
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
    TU_CHECK(st == DA_OK, "after the foreign stream, the default stream: %s", da_context_last_error(ctx));
    test_green_stream(ctx, h, plan, a, q, o, bytes);
  }
  da__cuda_free(dev, q), da__cuda_free(dev, o), da__cuda_free(dev, lse);
  da_plan_destroy(plan);
  push(fctx);
  sdestroy(fstream);
  pop(&popped);
  destroy(fctx);
}

int main(int argc, char **argv) {
  const char *golden = argc > 1 ? argv[1] : "../shared/golden";
  const char *which = argc > 2 ? argv[2] : "all";
  da_context *ctx;
  da_context_create(&ctx);
  if (da__cuda_get(ctx, &dev) != DA_OK) {
    printf("skipped: no usable GPU: %s\n", da_context_last_error(ctx));
    da_context_destroy(ctx);
    return 77;
  }
  printf("device: %s (%s), driver %d\n", da__cuda_device_name(dev), da__cuda_arch(dev), da__cuda_driver_version(dev));
  if (!strcmp(which, "probe")) {
    da_context_destroy(ctx);
    return 0;
  }
  int all = !strcmp(which, "all"), small = !strcmp(which, "small");
  if (all || small || !strcmp(which, "golden")) bs_golden(ctx, golden, "cuda", runner, NULL);
  if ((all || small || !strcmp(which, "default-tma")) && da__cuda_wgmma_arch(da__cuda_arch(dev))) test_default_tma(ctx);
  if (all || small || !strcmp(which, "random")) {
    bs_random(ctx, 0, small ? 6 : 60, 1000, runner, NULL);
    bs_ramp(ctx, runner, NULL); /* running maxima that grow: both rescale paths */
    bs_nan_inputs(ctx, runner, NULL, "cuda", 1); /* NaN in q and k (the default plan; float32's SIMT) */
    bs_extreme_scores(ctx, runner, NULL, "cuda", 1, 0); /* scale 1e6, -inf scores */
  }
  if (all || small || !strcmp(which, "unaligned")) test_unaligned(ctx, NULL);
  if (all || small || !strcmp(which, "pdl")) { /* mma.sync, and the warp-specialized kernel where it runs */
    test_pdl(ctx, 1);
    if (da__cuda_wgmma_arch(da__cuda_arch(dev))) test_pdl(ctx, 4);
    if (da__cuda_wgmma_arch(da__cuda_arch(dev))) test_pdl(ctx, 6); /* the default: its maps in every run */
  }
  if ((all || small || !strcmp(which, "persistent")) && da__cuda_wgmma_arch(da__cuda_arch(dev)))
    test_persistent(ctx, 65536, 8); /* persistent grids against the pairs */
  /* (short enough for racecheck: the ring's slots, found by every producer thread alike
   * where they all copy) */
  if (!strcmp(which, "persistent-race") && da__cuda_wgmma_arch(da__cuda_arch(dev))) test_persistent(ctx, 16384, 2);
  if ((all || small || !strcmp(which, "sync")) && da__cuda_wgmma_arch(da__cuda_arch(dev))) {
    /* the default above was the wgmma path: mma.sync too */
    bs_golden(ctx, golden, "cuda sync", runner_sync, NULL);
    bs_random(ctx, 0, small ? 6 : 30, 1000, runner_sync, NULL);
  }
  for (int mma = 2; mma <= 6; mma++) {
    const char *mode = mma == 2 ? "wgmma" : mma == 3 ? "wgmma-overlap" : mma == 4 ? "wgmma-ws" : "wgmma-ws-tma";
    if (mma == 5 || (!all && !small && strcmp(which, mode)) || (small && mma == 6)) continue;
    if (!da__cuda_wgmma_arch(da__cuda_arch(dev))) {
      printf("%s: skipped, the path needs sm_90 (this is %s)\n", mode, da__cuda_arch(dev));
      continue;
    }
    if (mma == 2) test_wgmma_probe(ctx);
    test_wgmma_suite(ctx, golden, mma, small);
  }
  if ((all || small || !strcmp(which, "tma-memo")) && da__cuda_wgmma_arch(da__cuda_arch(dev)) &&
      da__cuda_big_params(ctx))
    test_tma_memo(ctx);
  if (all || small || !strcmp(which, "foreign")) test_foreign_stream(ctx);
  if (all || small || !strcmp(which, "graph")) test_graph(ctx);
  if (all || !strcmp(which, "large")) test_long(ctx, 1 << 20, 8, 64, 0, "N=1048576 H=8 D=64");
  if (all || !strcmp(which, "huge")) test_long(ctx, (1 << 20) + 4096, 16, 128, 0, "q > 2^31 elements");
  da_context_destroy(ctx);
  return tu_report();
}
