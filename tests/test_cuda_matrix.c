/* test_cuda_matrix.c - the CUDA target over a matrix of 216 specs (head dims 32/64/96/128
 * and odd ones, fp16/bf16/fp32, both modes and offset policies, causal, every sparsity
 * layout, grouped-query heads, branch sets including the LongNet paper's w = 2048 ..
 * 32768, r = 1, 2, 4, 6, 12): every spec renders and compiles under NVRTC for sm_80 and
 * sm_90 with zero spill bytes and shared memory within the arch's limit. Every 6th spec
 * also runs on the host backend with the CUDA plan's tile sizes against the reference,
 * since the host runs the same tiling and masking decisions.
 * Skips (exit 0, "skipped" line) when NVRTC is not installed.
 * Run: build/tests/test_cuda_matrix [NSPECS]   (ctest -R cuda_matrix) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen/render.h"
#include "reference.h"
#include "runtime/cuda_backend.h"
#include "runtime/nvrtc.h"
#include "test_util.h"

#define MAX_SPECS 400

typedef struct {
  da_spec spec;
  da_plan_options opts; /* all 0: the planner's defaults */
  int clone;            /* shares the masks of the spec it copies */
  uint8_t *masks[DA_MAX_BRANCHES];
  char name[256], strategy[16], path[8];
  int regs[2], spill[2], smem[2], dyn_smem, status[2], skip[2], serialized[2], stack[2];
  char err[512];
} job_t;

static job_t jobs[MAX_SPECS];
static int njobs;
static const char *archs[2] = {"sm_80", "sm_90"};
static const int smem_limit[2] = {163 * 1024, 227 * 1024};

/* a copy of spec i under other options (its masks, if any, are the original's) */
static job_t *clone_job(int i) {
  job_t *j = &jobs[njobs++];
  *j = jobs[i];
  memset(j->masks, 0, sizeof j->masks);
  j->clone = 1;
  return j;
}

static void build_matrix(int n) {
  static const int64_t sets[6][5][2] = {
      {{2048, 1}, {4096, 2}, {8192, 4}, {16384, 6}, {32768, 12}},
      {{2048, 1}, {4096, 2}},
      {{16, 1}, {40, 3}, {96, 6}},
      {{64, 1}, {128, 2}},
      {{256, 1}},
      {{512, 2}, {1024, 4}, {2048, 8}}};
  static const int set_n[6] = {5, 2, 3, 2, 1, 3};
  static const int dims[6] = {32, 64, 96, 128, 16, 40};
  uint64_t st = 42;
  for (int i = 0; i < n && i < MAX_SPECS; i++) {
    job_t *j = &jobs[njobs++];
    da_spec *s = &j->spec;
    da_spec_init(s);
    int set = i % 6;
    s->num_branches = set_n[set];
    for (int b = 0; b < s->num_branches; b++) {
      s->segment_lengths[b] = sets[set][b][0];
      s->dilation_rates[b] = sets[set][b][1];
    }
    s->head_dim = dims[(i / 6) % 4];
    if (i % 17 == 0) s->head_dim = dims[4 + (i / 17) % 2]; /* odd dims: SIMT path */
    s->dtype = (da_dtype)((i / 2) % 3);
    if (s->dtype == DA_DTYPE_FLOAT32 && (i / 5) % 2) s->dtype = DA_DTYPE_FLOAT16; /* favour half */
    s->mode = (i % 5 == 4) ? DA_MODE_GROUPED : DA_MODE_LONGNET;
    s->offsets = (i % 3 == 1) ? DA_OFFSETS_BLOCK : DA_OFFSETS_MOD;
    s->causal = (i / 3) % 2;
    s->num_heads = 8;
    s->num_kv_heads = (i % 4 == 0) ? 2 : 8;
    if (i % 7 == 3) s->num_heads = s->num_kv_heads = 6;
    da_layout lay = (da_layout)((i / 4) % 7);
    s->sparsity.layout = lay;
    s->sparsity.block = 16 << (i % 3);
    s->sparsity.window = 1 + i % 2;
    s->sparsity.global = 1;
    s->sparsity.num_strides = 2;
    s->sparsity.strides[0] = 2;
    s->sparsity.strides[1] = 5;
    s->sparsity.seed = 1234 + (uint64_t)i;
    s->sparsity.density = 0.3;
    if (lay == DA_LAYOUT_EXPLICIT)
      for (int b = 0; b < s->num_branches; b++) {
        int64_t nb = da_spec_explicit_blocks(s, b);
        j->masks[b] = malloc((size_t)(nb * nb));
        for (int64_t x = 0; x < nb * nb; x++) j->masks[b][x] = (tu_rand(&st) & 3) != 0;
        s->sparsity.explicit_masks[b] = j->masks[b];
      }
  }
  /* 32 query rows per warp (tile_q 128) where the planner allows it (mma path, D <= 96),
   * on every third such spec; every second D = 64 one with 64-key tiles (Q fragments then
   * come from shared memory, as at D = 96) */
  int base = njobs;
  for (int i = 0; i < base && njobs < MAX_SPECS; i += 3) {
    const da_spec *s = &jobs[i].spec;
    if (s->dtype == DA_DTYPE_FLOAT32 || s->head_dim % 16 || s->head_dim > 96) continue;
    job_t *j = clone_job(i);
    j->opts.tile_q = 128;
    if (s->head_dim == 64 && (i / 3) % 2) j->opts.tile_k = 64;
  }
  /* the wgmma path (sm_90a only) on the fp16 / bf16 specs at D = 64 or 128: every second
   * one in turn with its defaults, the other key tile, one warpgroup per CTA, overlapped
   * and warp-specialized; every third one warp-specialized again, with one and two
   * consumer warpgroups and both key tiles */
  base = njobs;
  for (int i = 0, n = 0; i < base && njobs < MAX_SPECS; i++) {
    const da_spec *s = &jobs[i].spec;
    if (jobs[i].clone || !da__wgmma_serves(s)) continue;
    const int k = n++;
    if (k % 2 == 0) {
      job_t *j = clone_job(i);
      const int m = k / 2;
      j->opts.cuda_mma = m % 5 == 3 ? 3 : m % 5 == 4 ? 4 : 2; /* overlapped, warp-specialized */
      if (m % 5 == 1) j->opts.tile_k = s->head_dim == 64 ? 64 : 32;
      if (m % 5 == 2) j->opts.tile_q = 64; /* one warpgroup (the default takes two where tiles fill) */
    }
    if (k % 3 == 0 && njobs < MAX_SPECS) {
      job_t *j = clone_job(i);
      j->opts.cuda_mma = 4;
      if ((k + 1) % 2 == 0) j->opts.tile_q = 64;
      if (((k + 1) / 2) % 2) j->opts.tile_k = 64;
    }
    /* every fourth: three consumer warpgroups (tile_q 192), and another the P double-buffered
     * variant (cuda_mma 5); neither under a sparse layout */
    const int dense = s->sparsity.layout == DA_LAYOUT_NONE || s->sparsity.layout == DA_LAYOUT_DENSE;
    if (k % 4 == 1 && njobs < MAX_SPECS && dense) {
      job_t *j = clone_job(i);
      j->opts.cuda_mma = 4;
      j->opts.tile_q = 192;
    }
    if (k % 4 == 3 && njobs < MAX_SPECS && dense) {
      job_t *j = clone_job(i);
      j->opts.cuda_mma = 5;
    }
    /* every fourth again: the TMA copies (cuda_mma 6), in turn with the defaults, three
     * consumer warpgroups and one (not under a sparse layout: refused) */
    if (k % 4 == 2 && njobs < MAX_SPECS && dense) {
      job_t *j = clone_job(i);
      j->opts.cuda_mma = 6;
      j->opts.tile_q = (k / 4) % 3 == 1 ? 192 : (k / 4) % 3 == 2 ? 64 : 0;
    }
  }
  /* dilated-sparse layouts with several strides on the fused LongNet 2-branch tiling: the
   * warp-specialized producer evaluates the predicate in its key walk, on few registers */
  static const int64_t strides[2][4] = {{1, 3, 7, 0}, {1, 2, 4, 8}};
  for (int c = 0; c < 8 && njobs < MAX_SPECS; c++) {
    job_t *j = &jobs[njobs++];
    da_spec *s = &j->spec;
    da_spec_init(s);
    s->num_branches = 2;
    s->segment_lengths[0] = 2048, s->segment_lengths[1] = 4096;
    s->dilation_rates[0] = 1, s->dilation_rates[1] = 2;
    s->num_heads = s->num_kv_heads = 8;
    s->head_dim = c & 1 ? 128 : 64;
    s->dtype = c & 2 ? DA_DTYPE_BFLOAT16 : DA_DTYPE_FLOAT16;
    s->causal = (c >> 2) & 1;
    s->sparsity.layout = DA_LAYOUT_DILATED_SPARSE;
    s->sparsity.block = c & 2 ? 32 : 64;
    s->sparsity.num_strides = c & 2 ? 4 : 3;
    memcpy(s->sparsity.strides, strides[(c >> 1) & 1], sizeof strides[0]);
    memset(&j->opts, 0, sizeof j->opts);
    j->opts.cuda_mma = 4;
  }
  /* many strides (the predicate's tables grow with them) on the mma.sync defaults, causal,
   * D = 48 and 64, LongNet 2- and 3-branch: the planner keeps 32-key tiles under sparse
   * layouts for 32-row warps (64 keys spilled 140 to 308 bytes here) */
  for (int c = 0; c < 4 && njobs < MAX_SPECS; c++) {
    job_t *j = &jobs[njobs++];
    da_spec *s = &j->spec;
    da_spec_init(s);
    s->num_branches = 2 + (c >> 1);
    for (int b = 0; b < s->num_branches; b++) s->segment_lengths[b] = 2048 << b, s->dilation_rates[b] = 1 << b;
    s->num_heads = s->num_kv_heads = 8;
    s->head_dim = c & 1 ? 48 : 64;
    s->dtype = DA_DTYPE_FLOAT16;
    s->causal = 1;
    s->sparsity.layout = DA_LAYOUT_DILATED_SPARSE;
    static const int64_t fib[12] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233};
    s->sparsity.block = 32;
    s->sparsity.num_strides = c >> 1 ? 12 : 8;
    memcpy(s->sparsity.strides, fib, sizeof fib);
    memset(&j->opts, 0, sizeof j->opts);
  }
}

/* DA_MATRIX_ONLY=i compiles spec i alone (the number a failure names), to look at it */
static int only = -1;

static void compile_job(da_context *ctx, int i, void *user) {
  (void)user;
  job_t *j = &jobs[i];
  if (only >= 0 && i != only) return; /* DA_MATRIX_ONLY */
  da__rendered r;
  if (da__render_ex(ctx, &j->spec, DA_TARGET_CUDA, &j->opts, &r) != DA_OK) {
    snprintf(j->err, sizeof j->err, "render: %s", da_context_last_error(ctx));
    j->status[0] = j->status[1] = -1;
    return;
  }
  snprintf(j->name, sizeof j->name, "%s", r.kernel_name);
  snprintf(j->strategy, sizeof j->strategy, "%s", r.strategy);
  snprintf(j->path, sizeof j->path, "%s", r.cuda_path);
  j->dyn_smem = r.smem_bytes;
  for (int a = 0; a < 2; a++) {
    da__nvrtc_result res;
    char file[300], arch[16];
    snprintf(file, sizeof file, "%s.cu", r.kernel_name);
    if (da__cuda_compile_arch(ctx, archs[a], r.cuda_path, arch) != DA_OK) { /* wgmma on sm_80 */
      j->skip[a] = 1;
      continue;
    }
    if (da__nvrtc_compile(ctx, r.source, file, arch, NULL, 0, &res) != DA_OK) {
      snprintf(j->err, sizeof j->err, "%s: %.400s", archs[a], da_context_last_error(ctx));
      j->status[a] = -1;
      continue;
    }
    if (da__cuda_check_regs(ctx, r.kernel_name, r.launch_regs, res.registers) != DA_OK) {
      snprintf(j->err, sizeof j->err, "%s: %.400s", archs[a], da_context_last_error(ctx));
      j->status[a] = -1;
    }
    j->regs[a] = res.registers;
    j->spill[a] = res.spill_bytes;
    j->stack[a] = res.stack_bytes;
    j->serialized[a] = res.wgmma_serialized;
    j->smem[a] = r.smem_bytes + (res.shared_bytes > 0 ? res.shared_bytes : 0);
    da__nvrtc_result_free(&res);
  }
  da__rendered_free(&r);
}

/* Host backend with the CUDA plan's tile shape against the reference on a short input. */
static void host_check(da_context *ctx, job_t *j) {
  da_spec s = j->spec;
  int64_t B = 1, N = 300 + (int64_t)(strlen(j->name) % 37);
  int64_t H = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
  da_plan_options o = {0, 64, strcmp(j->strategy, "split") ? 0 : 1 << 30, 0, 0}; /* the CUDA plan's strategy */
  if (!strcmp(j->path, "simt")) o.tile_k = 0;
  da_plan *plan = NULL;
  if (da_plan_create_ex(ctx, &s, DA_BACKEND_HOST, &o, &plan) != DA_OK) {
    TU_CHECK(0, "%s: host plan: %s", j->name, da_context_last_error(ctx));
    return;
  }
  TU_CHECK(!strcmp(da_plan_strategy(plan), j->strategy), "%s: host strategy %s, cuda %s", j->name,
           da_plan_strategy(plan), j->strategy);
  size_t es = tu_elem_size(s.dtype);
  int64_t nq = B * N * H * D, nk = B * N * Hkv * D;
  void *q = malloc((size_t)nq * es), *k = malloc((size_t)nk * es), *v = malloc((size_t)nk * es), *out = malloc((size_t)nq * es);
  float *lse = malloc(sizeof(float) * (size_t)(B * H * N));
  double *dq = malloc(sizeof(double) * (size_t)nq), *dk = malloc(sizeof(double) * (size_t)nk), *dv = malloc(sizeof(double) * (size_t)nk);
  double *ro = malloc(sizeof(double) * (size_t)nq), *rl = malloc(sizeof(double) * (size_t)(B * H * N));
  uint64_t st = 7;
  double vmax = 0;
  for (int64_t i = 0; i < nq; i++) tu_store(s.dtype, q, i, 2 * tu_uniform(&st) - 1), dq[i] = tu_load(s.dtype, q, i);
  for (int64_t i = 0; i < nk; i++) {
    tu_store(s.dtype, k, i, 2 * tu_uniform(&st) - 1), dk[i] = tu_load(s.dtype, k, i);
    tu_store(s.dtype, v, i, 2 * tu_uniform(&st) - 1), dv[i] = tu_load(s.dtype, v, i);
    vmax = fmax(vmax, fabs(dv[i]));
  }
  da_args a;
  da_args_init(&a, &s, B, N, q, k, v, out, lse);
  TU_CHECK(da_plan_execute(plan, &a) == DA_OK, "%s: execute", j->name);
  TU_CHECK(da_ref_attention(&s, B, N, dq, dk, dv, ro, rl) == 0, "%s: reference", j->name);
  double eo, el;
  TU_CHECK(tu_compare(s.dtype, nq, out, ro, B * H * N, lse, rl, vmax, &eo, &el),
           "%s: host with CUDA tiles: out err %.3g lse err %.3g", j->name, eo, el);
  free(q), free(k), free(v), free(out), free(lse), free(dq), free(dk), free(dv), free(ro), free(rl);
  da_plan_destroy(plan);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 216;
  da_context *ctx;
  da_context_create(&ctx);
  int maj, min;
  if (da__nvrtc_version(ctx, &maj, &min) != DA_OK) {
    printf("skipped: NVRTC not available (%s)\n", da_context_last_error(ctx));
    da_context_destroy(ctx);
    return 0;
  }
  build_matrix(n);
  if (getenv("DA_MATRIX_ONLY")) only = atoi(getenv("DA_MATRIX_ONLY"));
  tu_parallel_jobs(njobs, 2, compile_job, NULL);
  if (only >= 0 && only < njobs) {
    const job_t *j = &jobs[only];
    for (int a = 0; a < 2; a++)
      printf("spec %d %s on %s (tile_q %d, tile_k %d, cuda_mma %d): %s%d registers, %d spill bytes%s%s\n", only,
             j->name, archs[a], j->opts.tile_q, j->opts.tile_k, j->opts.cuda_mma, j->skip[a] ? "skipped, " : "",
             j->regs[a], j->spill[a], j->status[a] ? ": " : "", j->status[a] ? j->err : "");
    da_context_destroy(ctx);
    return 0;
  }
  int strategies[3] = {0, 0, 0}, paths[3] = {0, 0, 0}, maxregs = 0, variants[7] = {0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < njobs; i++) {
    job_t *j = &jobs[i];
    for (int a = 0; a < 2; a++) {
      TU_CHECK(j->status[a] == 0, "spec %d %s: %s", i, j->name, j->err);
      if (j->status[a] || j->skip[a]) continue;
      TU_CHECK(j->spill[a] == 0, "spec %d %s on %s (tile_q %d, tile_k %d, cuda_mma %d): %d spill bytes", i, j->name,
               archs[a], j->opts.tile_q, j->opts.tile_k, j->opts.cuda_mma, j->spill[a]);
      /* TMA reads its maps where they are, in the parameter space: a copy of them on the
       * stack would leave a local address in the instruction */
      TU_CHECK(j->skip[a] || j->opts.cuda_mma != 6 || j->stack[a] == 0, "spec %d %s on %s (cuda_mma 6): a %d-byte stack frame", i,
               j->name, archs[a], j->stack[a]);
      TU_CHECK(j->serialized[a] == 0, "spec %d %s on %s: ptxas serialized its wgmma", i, j->name, archs[a]);
      TU_CHECK(j->regs[a] > 0 && j->regs[a] <= 255, "spec %d %s on %s: %d registers", i, j->name, archs[a], j->regs[a]);
      TU_CHECK(j->smem[a] <= smem_limit[a], "spec %d %s on %s: %d bytes smem", i, j->name, archs[a], j->smem[a]);
      if (j->regs[a] > maxregs) maxregs = j->regs[a];
    }
    strategies[!strcmp(j->strategy, "fused") ? 0 : !strcmp(j->strategy, "split") ? 1 : 2]++;
    paths[!strcmp(j->path, "mma") ? 0 : !strcmp(j->path, "wgmma") ? 2 : 1]++;
    variants[j->opts.cuda_mma]++;
    TU_CHECK(!strcmp(j->path, "wgmma") == (j->opts.cuda_mma >= 2), "spec %d %s: path %s", i, j->name, j->path);
    if (i % 6 == 0 && j->status[0] == 0) host_check(ctx, j);
  }
  printf("%d specs x 2 archs (wgmma: sm_90a only): fused %d, split %d, single %d; mma %d, wgmma %d (overlapped %d, "
         "warp-specialized %d, P double-buffered %d, TMA copies %d), simt %d; max registers %d\n",
         njobs, strategies[0], strategies[1], strategies[2], paths[0], paths[2], variants[3], variants[4], variants[5],
         variants[6], paths[1], maxregs);
  TU_CHECK(variants[3] && variants[4] && variants[5] && variants[6], "matrix misses a wgmma variant");
  /* the warp-specialized kernel's register pool: only the count its setmaxnreg split needs */
  TU_CHECK(da__cuda_check_regs(ctx, "k", 168, 168) == DA_OK && da__cuda_check_regs(ctx, "k", 0, 200) == DA_OK &&
               da__cuda_check_regs(ctx, "k", 168, 160) == DA_ERR_COMPILE &&
               strstr(da_context_last_error(ctx), "160 registers") != NULL,
           "register-pool check: %s", da_context_last_error(ctx));
  /* no ptxas report in NVRTC's log (registers -1: NVRTC 12.9's own cache served the compile
   * before --no-cache): refused, and the message says so, not "ptxas gave -1 registers" */
  TU_CHECK(da__cuda_check_regs(ctx, "k", 168, -1) == DA_ERR_COMPILE &&
               strstr(da_context_last_error(ctx), "no ptxas report") != NULL,
           "register-pool check without a ptxas report: %s", da_context_last_error(ctx));
  char arch[16];
  TU_CHECK(da__cuda_compile_arch(ctx, "sm_80", "wgmma", arch) == DA_ERR_UNSUPPORTED, "wgmma accepted for sm_80");
  TU_CHECK(da__cuda_compile_arch(ctx, "sm_90", "wgmma", arch) == DA_OK && !strcmp(arch, "sm_90a"), "wgmma on sm_90: %s", arch);
  TU_CHECK(da__cuda_compile_arch(ctx, "sm_90", "mma", arch) == DA_OK && !strcmp(arch, "sm_90"), "mma on sm_90: %s", arch);
  /* tile shapes the planner refuses, with a message that says why */
  {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = 2, s.segment_lengths[0] = 2048, s.segment_lengths[1] = 4096;
    s.dilation_rates[0] = 1, s.dilation_rates[1] = 2;
    s.num_heads = s.num_kv_heads = 8, s.head_dim = 64, s.dtype = DA_DTYPE_FLOAT16;
    static const struct {
      int tq, tk, mma, d, sparse;
      const char *msg;
    } refused[] = {{192, 0, 4, 64, 1, "sparse layout"}, {192, 0, 2, 64, 0, "tile_q must be"},
                   {192, 0, 1, 64, 0, "tile_q must be"}, {64, 128, 4, 128, 0, "two CTAs per SM"},
                   {64, 0, 5, 64, 0, "wgmma-ws-p2"}, {0, 0, 5, 64, 1, "wgmma-ws-p2"},
                   {0, 0, 6, 64, 1, "wgmma-ws-tma"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
      da_spec t = s;
      t.head_dim = refused[i].d;
      if (refused[i].sparse) t.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, t.sparsity.block = 64, t.sparsity.window = 1;
      da_plan_options o = {refused[i].tq, refused[i].tk, 0, 0, refused[i].mma};
      da__rendered r;
      da_status st = da__render_ex(ctx, &t, DA_TARGET_CUDA, &o, &r);
      if (st == DA_OK) da__rendered_free(&r);
      TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), refused[i].msg) &&
                   !strstr(da_context_last_error(ctx), "traceback"),
               "refused shape %zu: status %d, %s", i, (int)st, da_context_last_error(ctx));
    }
  }
  /* the warp-specialized defaults measured on an H200 (bench/results/gpu-h200-ebf7fe1.md):
   * three consumer warpgroups at D = 64 without a causal mask or a layout; the fused
   * strategy kept unless split fills its 64-row warpgroups 5 points more
   * (gpu-h200-58e46dd.md: LongNet 5-branch ran split 1.06x to 1.12x faster, LongNet
   * 2-branch and the 5-branch's groups, branches 0..2 and 3..4, fused 1.04x to 1.16x) */
  {
    static const struct {
      int first, nb, d, causal, sparse, tq;
      const char *strategy;
    } defaults[] = {{0, 1, 64, 0, 0, 192, "single"}, {0, 2, 64, 0, 0, 192, "fused"}, {0, 5, 64, 0, 0, 192, "split"},
                    {0, 3, 64, 0, 0, 192, "fused"},  {3, 2, 64, 0, 0, 192, "fused"}, {0, 2, 64, 1, 0, 128, "fused"},
                    {0, 5, 64, 1, 0, 128, "split"},  {0, 2, 128, 0, 0, 128, "fused"}, {0, 2, 64, 0, 1, 128, "fused"}};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
      da_spec t;
      da_spec_init(&t);
      t.num_branches = defaults[i].nb;
      static const int64_t sw[5] = {2048, 4096, 8192, 16384, 32768}, sr[5] = {1, 2, 4, 6, 12};
      for (int b = 0; b < defaults[i].nb; b++)
        t.segment_lengths[b] = sw[defaults[i].first + b], t.dilation_rates[b] = sr[defaults[i].first + b];
      t.num_heads = t.num_kv_heads = 8, t.head_dim = defaults[i].d, t.dtype = DA_DTYPE_FLOAT16;
      t.causal = defaults[i].causal;
      if (defaults[i].sparse) t.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, t.sparsity.block = 64, t.sparsity.window = 1;
      /* wgmma-ws and, where there is no layout, wgmma-ws-tma (the sm_90 default): the same */
      for (int mma = 4; mma <= 6; mma += 2) {
        if (mma == 6 && defaults[i].sparse) continue;
        da_plan_options o = {0, 0, 0, 0, mma};
        da__rendered r;
        da_status st = da__render_ex(ctx, &t, DA_TARGET_CUDA, &o, &r);
        TU_CHECK(st == DA_OK && r.tile_q == defaults[i].tq && !strcmp(r.strategy, defaults[i].strategy),
                 "default %zu, cuda_mma %d: status %d, tile_q %d (want %d), %s (want %s)", i, mma, (int)st,
                 st == DA_OK ? r.tile_q : 0, defaults[i].tq, st == DA_OK ? r.strategy : "-", defaults[i].strategy);
        if (st == DA_OK) da__rendered_free(&r);
      }
    }
  }
  /* A LongNet schedule past 4096 residue classes: w = 8192 * 2^k, r = 2^k, k = 0..13 (g =
   * 8192, lcm(r) = 8192) runs split, and its offset classes (8192 rows each) fill 128- and
   * 192-row tiles like any LongNet schedule's: the defaults of the other split plans, not
   * the 64-row tiles a fused plan's fill rule gives past 4096 classes */
  for (int i = 0; i < 3; i++) {
    da_spec t;
    da_spec_init(&t);
    t.num_branches = 14;
    for (int k = 0; k < 14; k++) t.segment_lengths[k] = (int64_t)8192 << k, t.dilation_rates[k] = (int64_t)1 << k;
    t.num_heads = t.num_kv_heads = 16, t.head_dim = 64, t.dtype = DA_DTYPE_FLOAT16, t.causal = i == 1;
    da_plan_options o = {0, 0, 0, 0, i < 2 ? 4 : 1};
    da__rendered r;
    da_status st = da__render_ex(ctx, &t, DA_TARGET_CUDA, &o, &r);
    const int want = i == 0 ? 192 : 128;
    TU_CHECK(st == DA_OK && !strcmp(r.strategy, "split") && r.tile_q == want,
             "LongNet 14 branches (case %d): status %d, %s, tile_q %d (want split, %d)", i, (int)st,
             st == DA_OK ? r.strategy : "-", st == DA_OK ? r.tile_q : 0, want);
    if (st == DA_OK) da__rendered_free(&r);
  }
  /* causal grids run longest first (planner.lua plan_lpt): LongNet 2-branch in 128-row
   * tiles has 8 tiles per residue class, 16 a window; its table of a window's tile per depth
   * is a permutation that starts with the two classes' last tiles (7, 15: the most keys)
   * and ends with their first (0, 8); groups of ceil(264 / 16) = 17 windows; two tiles a
   * CTA (run_tiles), each with a Q tile of its own after the four stages (16 KiB more
   * shared memory). Without a causal mask the grid runs longest first by each head's own
   * order (plan_lpt_heads: LPT_TILE_H; head 0 runs class 0, which branch 2 covers too, then
   * class 1; head 1 the other way round), same groups, a tile a CTA, one Q tile. */
  for (int causal = 0; causal < 2; causal++) {
    da_spec t;
    da_spec_init(&t);
    t.num_branches = 2, t.segment_lengths[0] = 2048, t.segment_lengths[1] = 4096;
    t.dilation_rates[0] = 1, t.dilation_rates[1] = 2;
    t.num_heads = t.num_kv_heads = 8, t.head_dim = 64, t.dtype = DA_DTYPE_FLOAT16, t.causal = causal;
    da_plan_options o = {128, 0, 0, 0, 4};
    da__rendered r;
    if (da__render_ex(ctx, &t, DA_TARGET_CUDA, &o, &r) != DA_OK) {
      TU_CHECK(0, "lpt render: %s", da_context_last_error(ctx));
      continue;
    }
    const char *tab = strstr(r.source, "LPT_TILE[16] = { ");
    const char *tab_h = strstr(r.source, "LPT_TILE_H[8][16] = { {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, "
                                         "15}, {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}, {0, ");
    TU_CHECK(!tab_h == !!causal, "lpt (causal %d): each head's order %s", causal, tab_h ? "present" : "absent");
    TU_CHECK(r.tiles_per_window == 16 && r.lpt_group == 17 && !tab == !causal &&
                 r.ws_tiles == (causal ? 2 : 1) && !strstr(r.source, "run_tiles(Qs") == !causal,
             "lpt (causal %d): %lld tiles a window, group %lld, table %s, %d tiles a CTA", causal,
             (long long)r.tiles_per_window, (long long)r.lpt_group, tab ? "present" : "absent", r.ws_tiles);
    const int stages_smem = 1024 + (128 + 2 * 4 * 128) * 64 * 2;
    TU_CHECK(r.smem_bytes == stages_smem + (causal ? 128 * 64 * 2 : 0) && !strstr(r.source, "*const Q2 = Vs") == !causal,
             "lpt (causal %d): %d bytes of shared memory (Q tiles and four stages: %d)", causal, r.smem_bytes,
             stages_smem + (causal ? 128 * 64 * 2 : 0));
    if (tab) {
      int order[16], seen = 0;
      char *e = (char *)tab + strlen("LPT_TILE[16] = { ");
      for (int i = 0; i < 16; i++) order[i] = (int)strtol(e, &e, 10), e += *e == ',';
      for (int i = 0; i < 16; i++) seen |= order[i] >= 0 && order[i] < 16 ? 1 << order[i] : 0;
      TU_CHECK(seen == 0xffff && order[0] + order[1] == 22 && order[0] * order[1] == 105 && order[14] + order[15] == 8 &&
                   order[14] * order[15] == 0,
               "lpt order: %d %d ... %d %d (a permutation of 0..15: %s)", order[0], order[1], order[14], order[15],
               seen == 0xffff ? "yes" : "no");
    }
    da__rendered_free(&r);
  }
  { /* the split plan of LongNet 5-branch causal: its branch launches two tiles a CTA too */
    da_spec t;
    da_spec_init(&t);
    t.num_branches = 5;
    static const int64_t sw[5] = {2048, 4096, 8192, 16384, 32768}, sr[5] = {1, 2, 4, 6, 12};
    memcpy(t.segment_lengths, sw, sizeof sw), memcpy(t.dilation_rates, sr, sizeof sr);
    t.num_heads = t.num_kv_heads = 8, t.head_dim = 64, t.dtype = DA_DTYPE_FLOAT16, t.causal = 1;
    da_plan_options o = {0, 0, 0, 0, 4};
    da__rendered r;
    da_status st = da__render_ex(ctx, &t, DA_TARGET_CUDA, &o, &r);
    TU_CHECK(st == DA_OK && !strcmp(r.strategy, "split") && r.ws_tiles == 2 && strstr(r.source, "run_tiles(Qs"),
             "LongNet 5-branch causal: status %d, %s, %d tiles a CTA", (int)st, st == DA_OK ? r.strategy : "-",
             st == DA_OK ? r.ws_tiles : 0);
    if (st == DA_OK) da__rendered_free(&r);
  }
  TU_CHECK(njobs >= 200 || n < 200, "matrix has %d specs", njobs);
  TU_CHECK((strategies[0] && strategies[1] && strategies[2] && paths[0] && paths[1] && paths[2]) || n < 50,
           "matrix misses a strategy or path");
  for (int i = 0; i < njobs; i++)
    for (int b = 0; b < DA_MAX_BRANCHES; b++) free(jobs[i].masks[b]);
  da_context_destroy(ctx);
  return tu_report();
}
