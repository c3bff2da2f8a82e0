/* test_tune_candidates.c - what `dilattn tune` sweeps on CUDA (da__tune_candidates): on an
 * sm_90 device every candidate is one the planner accepts (a refused one would only cost
 * the sweep a slot), the warp-specialized kernel is swept at both key tiles (at D = 128
 * under a sparse layout only 64 keys compile without spills), and every
 * warp-specialized candidate compiles under NVRTC for sm_90a with zero spill bytes and the
 * register count its setmaxnreg split needs (the tuner would drop a spilling one as a
 * compile failure and never time it). The sweep itself runs only on a GPU.
 * Skips the compiles (not the rest) when NVRTC is not installed.
 * Run: build/tests/test_tune_candidates */
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "runtime/nvrtc.h"
#include "runtime/tuning_db.h"
#include "test_util.h"

#define CAP 64

typedef struct {
  da_spec spec;
  da_plan_options o;
  char err[600];
  int regs, spill;
} job_t;

static job_t jobs[512];
static int njobs, have_nvrtc;

static void longnet(da_spec *s, int branches, int head_dim, int causal) {
  da_spec_init(s);
  static const int64_t w[5] = {2048, 4096, 8192, 16384, 32768}, r[5] = {1, 2, 4, 6, 12};
  s->num_branches = branches;
  for (int b = 0; b < branches; b++) s->segment_lengths[b] = w[b], s->dilation_rates[b] = r[b];
  s->num_heads = s->num_kv_heads = 8;
  s->head_dim = head_dim;
  s->dtype = DA_DTYPE_FLOAT16;
  s->causal = causal;
}

static void compile_job(da_context *ctx, int i, void *user) {
  (void)user;
  job_t *j = &jobs[i];
  da__rendered r;
  if (da__render_ex(ctx, &j->spec, DA_TARGET_CUDA, &j->o, &r) != DA_OK) {
    snprintf(j->err, sizeof j->err, "refused: %s", da_context_last_error(ctx));
    return;
  }
  if (have_nvrtc && j->o.cuda_mma >= 4) {
    da__nvrtc_result res;
    char file[300];
    snprintf(file, sizeof file, "%s.cu", r.kernel_name);
    if (da__nvrtc_compile(ctx, r.source, file, "sm_90a", NULL, 0, &res) != DA_OK) {
      snprintf(j->err, sizeof j->err, "compile: %.500s", da_context_last_error(ctx));
    } else {
      j->regs = res.registers, j->spill = res.spill_bytes;
      if (da__cuda_check_regs(ctx, r.kernel_name, r.launch_regs, res.registers) != DA_OK)
        snprintf(j->err, sizeof j->err, "%.500s", da_context_last_error(ctx));
      da__nvrtc_result_free(&res);
    }
  }
  da__rendered_free(&r);
}

int main(void) {
  da_context *ctx;
  da_context_create(&ctx);
  int maj, min;
  have_nvrtc = da__nvrtc_version(ctx, &maj, &min) == DA_OK;
  if (!have_nvrtc) printf("NVRTC not available (%s): rendering only\n", da_context_last_error(ctx));
  /* the bench configs (LongNet 2- and 5-branch, causal or not) at D = 64 and 128, a dense
   * spec, and dilated-sparse ones at D = 64 and 128 */
  da_spec specs[12];
  int ns = 0;
  for (int d = 0; d < 2; d++) {
    longnet(&specs[ns++], 2, 64 << d, 1);
    longnet(&specs[ns++], 5, 64 << d, 0);
    longnet(&specs[ns++], 5, 64 << d, 1);
  }
  longnet(&specs[ns++], 1, 64, 0);
  longnet(&specs[ns++], 1, 64, 1); /* dense causal: the 64-row TMA candidate's case */
  for (int d = 0; d < 2; d++) {
    longnet(&specs[ns], 2, 64 << d, 1);
    specs[ns].sparsity.layout = DA_LAYOUT_DILATED_SPARSE;
    specs[ns].sparsity.block = 64;
    specs[ns].sparsity.num_strides = 3;
    specs[ns].sparsity.strides[0] = 1, specs[ns].sparsity.strides[1] = 3, specs[ns].sparsity.strides[2] = 7;
    ns++;
  }
  for (int i = 0; i < ns; i++) {
    da_plan_options o[CAP], host[CAP], nogpu[CAP];
    int n = da__tune_candidates(&specs[i], 1, 1, o, CAP);
    TU_CHECK(n > 1 && n <= DA_TUNE_MAX_CANDIDATES, "spec %d: %d candidates, the tuner takes at most %d (the rest would be "
             "dropped unseen)", i, n, DA_TUNE_MAX_CANDIDATES);
    TU_CHECK(!memcmp(&o[0], &(da_plan_options){0}, sizeof o[0]), "spec %d: the first candidate is not the default", i);
    /* without wgmma (sm_80) a prefix of the same list; the host sweeps its own tiles */
    int n80 = da__tune_candidates(&specs[i], 1, 0, nogpu, CAP);
    TU_CHECK(n80 < n && !memcmp(nogpu, o, sizeof o[0] * (size_t)n80), "spec %d: the sm_80 sweep is no prefix", i);
    int nh = da__tune_candidates(&specs[i], 0, 0, host, CAP);
    for (int k = 0; k < nh; k++) TU_CHECK(host[k].cuda_mma == 0, "spec %d: host candidate %d names cuda_mma", i, k);
    /* where the default is wgmma-ws-tma (2: a CUDA 12.1 driver), no candidate repeats c[0]'s
     * kernel: a spec of one strategy drops its one TMA candidate of the planner's tiles, a
     * multi-branch spec keeps both, each forcing a strategy; the 64-row TMA candidate (one
     * consumer warpgroup, fused or single) stays either way */
    da_plan_options o2[CAP];
    const int n2 = da__tune_candidates(&specs[i], 1, 2, o2, CAP);
    const int multi = specs[i].mode == DA_MODE_LONGNET && specs[i].num_branches > 1;
    int tma2 = 0;
    for (int k = 1; k < n2; k++) {
      tma2 += o2[k].cuda_mma == 6;
      TU_CHECK(o2[k].cuda_mma != 6 || o2[k].fused_min_queries || o2[k].tile_q || o2[k].tile_k,
               "spec %d: candidate %d times the default kernel (wgmma-ws-tma, the planner's choices) again", i, k);
    }
    const int sparse2 = specs[i].sparsity.layout == DA_LAYOUT_DILATED_SPARSE;
    TU_CHECK(tma2 == (sparse2 ? 0 : multi ? 3 : 1), "spec %d: %d TMA candidates where the default is TMA", i, tma2);
    int tma64 = 0;
    for (int k = 1; k < n2; k++) tma64 += o2[k].cuda_mma == 6 && o2[k].tile_q == 64 && o2[k].fused_min_queries <= 1;
    TU_CHECK(tma64 == !sparse2, "spec %d: %d 64-row TMA candidates (fused or single)", i, tma64);
    int ws_k[2] = {0, 0}, dup = 0, tma = 0;
    for (int k = 0; k < n; k++) {
      if (o[k].cuda_mma == 4 && o[k].tile_k) ws_k[o[k].tile_k == 128]++;
      tma += o[k].cuda_mma == 6;
      for (int m = 0; m < k; m++) dup += !memcmp(&o[m], &o[k], sizeof o[k]) && k > 0;
    }
    TU_CHECK(!dup, "spec %d: %d candidates repeat another", i, dup);
    /* every CUDA candidate but the default names its instruction: cuda_mma 0 is the default
     * one (da__default_mma), so an mma.sync candidate left at 0 would time wgmma-ws twice */
    for (int k = 1; k < n; k++) TU_CHECK(o[k].cuda_mma != 0, "spec %d: CUDA candidate %d leaves cuda_mma 0", i, k);
    const int sparse = specs[i].sparsity.layout == DA_LAYOUT_DILATED_SPARSE;
    TU_CHECK(ws_k[0] && (ws_k[1] > 0) == !(sparse && specs[i].head_dim > 64), "spec %d: the warp-specialized kernel is swept at 64 keys %d times, 128 keys %d times",
             i, ws_k[0], ws_k[1]);
    TU_CHECK((tma > 0) == !sparse, "spec %d: %d TMA candidates", i, tma);
    for (int k = 1; k < n && njobs < 512; k++) {
      jobs[njobs].spec = specs[i];
      jobs[njobs++].o = o[k];
    }
  }
  tu_parallel_jobs(njobs, 2, compile_job, NULL);
  int compiled = 0;
  for (int i = 0; i < njobs; i++) {
    const job_t *j = &jobs[i];
    TU_CHECK(!j->err[0] && j->spill == 0, "candidate %d (D %d, %d branches%s; tile_q %d, tile_k %d, cuda_mma %d): %s%d spill bytes",
             i, j->spec.head_dim, j->spec.num_branches, j->spec.causal ? ", causal" : "", j->o.tile_q, j->o.tile_k,
             j->o.cuda_mma, j->err, j->spill);
    compiled += have_nvrtc && j->o.cuda_mma >= 4;
  }
  printf("%d specs, %d candidates, %d warp-specialized ones compiled for sm_90a\n", ns, njobs, compiled);
  da_context_destroy(ctx);
  return tu_report();
}
