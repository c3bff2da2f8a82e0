/* cuda_backend.c - CUDA plans: NVRTC compile for the device's exact arch through the
 * context's kernel cache (artifact key = source key + arch + NVRTC version + options),
 * module load, explicit masks copied to the device, and the launch sequence of each
 * strategy (DESIGN.md decision 4):
 *   fused:  <name>_fused                         grid (ceil(N/g) * tiles_per_window, H, B)
 *   split:  _clear (where some row no branch covers: clear_rows), _branch per branch
 *           (split_first >= 0 first); workspace fp32 [B][H][N][D] then [B][H][N]: each row's
 *           covering launches merge into it, the last writes out and lse
 *   single: _clear (likewise), _branch per branch
 *   a _branch launch's grid (ceil(N/w) * tiles, the branch's heads, B): every head in LongNet
 *   mode, its group's in grouped mode (branch_head0 / branch_heads); a plan with ws_tiles > 1
 *   launches those blocks ws_tiles a CTA, in x alone: kernel.cu.tpl run_tiles
 * Everything is asynchronous on the caller's stream; the split workspace, when the caller
 * does not pass one, comes from the device's stream-ordered memory pool. */
#include "runtime/cuda_backend.h"

#include "runtime/cuda_driver.h"
#include "runtime/log.h"
#include "runtime/nvrtc.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DILATTN_CTA_TILES (README): unset, the runtime's choice (persistent grids where a launch
 * has DA_CUDA_PERSIST_WAVES waves, pairs where one, else a tile a CTA); 1, 2: one or two
 * tiles a CTA in every launch; pairs: two where a launch has a wave, never persistent (the
 * default before persistent grids); persistent: every launch of a wave or more persistent */
enum { CTA_TILES_AUTO, CTA_TILES_ONE, CTA_TILES_TWO, CTA_TILES_PAIRS, CTA_TILES_PERSISTENT };

struct da__cuda_plan {
  da__cuda *dev;
  da__rendered r; /* facts (the strings are not kept) */
  int heads, head_dim;
  da__cuda_kernel k[DA_CUDA_K_COUNT];
  void *dmasks;     /* device: pointer table followed by the masks */
  int pdl;          /* launches after a sequence's first are programmatic dependent ones */
  int cta_tiles;    /* DILATTN_CTA_TILES at plan creation: CTA_TILES_* */
  da__tmap_memo *memo; /* its tensor maps of recent arguments (NULL: the plan has none) */
};

/* A driver and a device: NVRTC is needed only to compile a kernel that no bundle (nor
 * the disk cache) holds, and its absence is then that plan's error (build_cubin), not a
 * reason for DA_BACKEND_AUTO to give the host backend a program's device pointers */
da_status da__cuda_backend_available(const da_context *ctx) {
  da__cuda *c;
  return da__cuda_get(ctx, &c);
}

static const char *const NVRTC_OPTS[] = {"-lineinfo"};

const char *const *da__cuda_nvrtc_opts(int *n) {
  *n = (int)(sizeof NVRTC_OPTS / sizeof NVRTC_OPTS[0]);
  return NVRTC_OPTS;
}

void da__cuda_artifact_key(const char *source_key, const char *arch, int maj, int min, char key[65]) {
  char text[512];
  snprintf(text, sizeof text, "dilattn-cubin schema=%d source=%s arch=%s nvrtc=%d.%d opts=%s", DA_CACHE_SCHEMA_VERSION,
           source_key, arch, maj, min, NVRTC_OPTS[0]);
  da__sha256_hex(text, strlen(text), key);
}

da_status da__cuda_check_regs(const da_context *ctx, const char *kernel, int launch_regs, int registers) {
  DA_RETURN_IF(launch_regs > 0 && registers < 0, DA_ERR_COMPILE,
               "%s: NVRTC's log has no ptxas report of its registers, and the warp-specialized kernel must have "
               "exactly %d (its setmaxnreg split of the register file); not loading it unchecked",
               kernel, launch_regs);
  DA_RETURN_IF(launch_regs > 0 && registers != launch_regs, DA_ERR_COMPILE,
               "%s: ptxas gave %d registers per thread, the warp-specialized kernel needs %d (its setmaxnreg split of "
               "the register file would make the consumers wait forever)",
               kernel, registers, launch_regs);
  return DA_OK;
}

/* Kernel parameters past 4 KiB (a wgmma-ws-tma kernel's tensor maps) need CUDA 12.1's
 * driver and NVRTC; before them both take 4096 bytes (the CUDA C++ Programming Guide's
 * function parameters). */
#define BIG_PARAMS_VERSION 12010
#define OLD_PARAMS_MAX 4096

typedef struct {
  da__kernel_cache *cache;
  const char *source, *name, *arch, *key, *source_key;
  int launch_regs;
  const da_context *ctx;
  da__cuda *dev;
  size_t params;     /* the kernels' parameter bytes (past 4 KiB: NVRTC 12.1 or later) */
  char refused[512]; /* a bundle's cubin of another NVRTC this driver refused: why */
} nvrtc_job;

static da_status build_cubin(const da_context *ctx, void *arg, void **bytes, size_t *n, int *no_compiler) {
  const nvrtc_job *j = arg;
  char file[300];
  snprintf(file, sizeof file, "%s.cu", j->name);
  int maj, min;
  *no_compiler = 1; /* (until NVRTC is found, and new enough for the kernel) */
  if (da__nvrtc_version(ctx, &maj, &min) != DA_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", da_context_last_error(ctx));
    if (j->refused[0]) /* (the bundle holds it, built by another NVRTC) */
      return da__set_error(ctx, DA_ERR_UNSUPPORTED,
                           "kernel %s for %s: this driver refuses the build of it by another NVRTC (%s), "
                           "and it cannot be compiled here: %s; update the driver or install NVRTC",
                           j->name, j->arch, j->refused, why);
    return da__set_error(ctx, DA_ERR_UNSUPPORTED,
                         "kernel %s for %s is in no registered bundle and not in the disk cache, and cannot be "
                         "compiled here: %s",
                         j->name, j->arch, why);
  }
  DA_RETURN_IF(j->params > OLD_PARAMS_MAX && 1000 * maj + 10 * min < BIG_PARAMS_VERSION, DA_ERR_UNSUPPORTED,
               "%s: its kernels take %zu bytes of parameters, past the 4096 that NVRTC before CUDA 12.1 compiles (%d.%d "
               "here; a bundle's build of it would serve): update NVRTC, or use cuda_mma 4 (wgmma-ws)",
               j->name, j->params, maj, min);
  *no_compiler = 0;
  da__nvrtc_result res;
  DA_TRY(da__nvrtc_compile(ctx, j->source, file, j->arch, NVRTC_OPTS, 1, &res));
  da_status st = da__cuda_check_regs(ctx, j->name, j->launch_regs, res.registers);
  if (st != DA_OK) {
    da__nvrtc_result_free(&res);
    return st;
  }
  if (res.wgmma_serialized > 0) /* still correct, but the wgmma path's overlap is gone */
    da__log(DA_LOG_WARN, "%s (%s): ptxas serialized its wgmma (%d notes in the compile log)", j->name, j->arch,
            res.wgmma_serialized);
  *bytes = res.cubin;
  *n = res.cubin_size;
  res.cubin = NULL;
  da__nvrtc_result_free(&res);
  return DA_OK;
}

/* A bundle's (or, where nothing compiles here, the disk cache's) cubin of this kernel that
 * another NVRTC built: taken where this driver loads it (a cubin of a newer CUDA than the
 * driver's is refused there; then it is compiled here) */
static int accept_cubin(void *user, const char *origin, const char *compiler, const void *bytes, size_t n) {
  nvrtc_job *j = user;
  (void)n, (void)compiler; /* (NVRTC's options are the key's: -lineinfo, whichever version) */
  if (da__cuda_probe(j->ctx, j->dev, bytes) == DA_OK) return 1;
  snprintf(j->refused, sizeof j->refused, "%.200s: %.300s", origin, da_context_last_error(j->ctx));
  da__log_once(NULL, DA_LOG_WARN, "kernel %s for %s, built by another NVRTC, does not load here (%s)", j->name, j->arch,
          j->refused);
  da__clear_error(j->ctx);
  return 0;
}

static da_status produce_cubin(const da_context *ctx, void *arg, da__kpayload *out) {
  const nvrtc_job *j = arg;
  char path[4400], meta[300];
  snprintf(meta, sizeof meta, "\"kernel\":\"%.200s\"", j->name);
  return da__kernel_cache_find_or_build(ctx, j->cache, j->arch, j->key, j->source_key, j->name, build_cubin, (void *)j,
                                        accept_cubin, meta, &out->blob, &out->blob_size, path, sizeof path, &out->from);
}

static da_status load_masks(const da_context *ctx, da__cuda_plan *p, const da_spec *spec) {
  if (spec->sparsity.layout != DA_LAYOUT_EXPLICIT) return DA_OK;
  int nb = spec->num_branches;
  size_t total = (size_t)nb * sizeof(void *), offs[DA_MAX_BRANCHES];
  for (int i = 0; i < nb; i++) {
    int64_t n = da_spec_explicit_blocks(spec, i);
    offs[i] = total;
    total += (size_t)(n * n + 15) & ~(size_t)15;
  }
  unsigned char *host = calloc(1, total);
  DA_RETURN_IF(!host, DA_ERR_NO_MEMORY, "explicit masks: out of memory");
  da_status st = da__cuda_malloc(ctx, p->dev, total, &p->dmasks);
  if (st == DA_OK) {
    for (int i = 0; i < nb; i++) {
      int64_t n = da_spec_explicit_blocks(spec, i);
      void *dptr = (unsigned char *)p->dmasks + offs[i];
      memcpy(host + (size_t)i * sizeof(void *), &dptr, sizeof dptr);
      memcpy(host + offs[i], spec->sparsity.explicit_masks[i], (size_t)(n * n));
    }
    st = da__cuda_memcpy_htod(ctx, p->dev, p->dmasks, host, total);
  }
  free(host);
  return st;
}

int da__cuda_wgmma_arch(const char *arch) { return !strcmp(arch, "sm_90") || !strcmp(arch, "sm_90a"); }



/* The driver's and NVRTC's versions as 1000 * major + 10 * minor, the lesser; 0 where
 * either is unknown (no device, no NVRTC). */
static int toolchain_version(const da_context *ctx) {
  da__cuda *dev;
  int maj, min;
  if (da__cuda_get(ctx, &dev) != DA_OK) return 0;
  const int drv = da__cuda_driver_version(dev);
  if (da__nvrtc_version(ctx, &maj, &min) != DA_OK) { /* no NVRTC: kernels come built (bundles) */
    da__clear_error(ctx);
    return drv;
  }
  const int nv = 1000 * maj + 10 * min;
  return nv < drv ? nv : drv;
}

int da__cuda_big_params(const da_context *ctx) { return toolchain_version(ctx) >= BIG_PARAMS_VERSION; }

int da__cuda_wgmma_level(const da_context *ctx) {
  da__cuda *dev;
  if (da__cuda_get(ctx, &dev) != DA_OK || !da__cuda_wgmma_arch(da__cuda_arch(dev))) return 0;
  return 1 + da__cuda_big_params(ctx);
}

int da__cuda_wgmma_device_serves(const da_context *ctx, const da_spec *spec) {
  return da__wgmma_serves(spec) ? da__cuda_wgmma_level(ctx) : 0;
}

size_t da__cuda_param_bytes(const da__rendered *r) {
  return r->tma_maps > 0 ? offsetof(da__cuda_kargs, m) + (size_t)r->tma_maps * sizeof(da__cuda_tmap)
                         : sizeof(da__cuda_args);
}

da_status da__cuda_compile_arch(const da_context *ctx, const char *arch, const char *cuda_path, char out[16]) {
  if (strcmp(cuda_path, "wgmma") != 0) {
    snprintf(out, 16, "%s", arch);
    return DA_OK;
  }
  DA_RETURN_IF(!da__cuda_wgmma_arch(arch), DA_ERR_UNSUPPORTED,
               "the wgmma instructions (cuda_mma 2 and up: wgmma, wgmma-overlap, wgmma-ws, wgmma-ws-p2, "
               "wgmma-ws-tma) need an sm_90 device or --arch sm_90; this is %s", arch);
  snprintf(out, 16, "sm_90a");
  return DA_OK;
}

da_status da__cuda_plan_create(const da_context *ctx, da__kernel_cache *cache, const da__rendered *r,
                               const da_spec *spec, da__cuda_plan **out) {
  da__cuda *dev;
  DA_TRY(da__cuda_get(ctx, &dev));
  int maj = 0, min = 0; /* 0.0 without NVRTC: then only a bundle's build serves (its key
                           * names no compiler here; build_cubin says why it cannot compile) */
  if (da__nvrtc_version(ctx, &maj, &min) != DA_OK) da__clear_error(ctx);
  /* past 4 KiB of parameters: a driver of CUDA 12.1 or later launches them, NVRTC 12.1 or
   * later compiles them (build_cubin: a bundle's build needs the driver alone) */
  const size_t params = da__cuda_param_bytes(r);
  const int drv = da__cuda_driver_version(dev);
  if (params > OLD_PARAMS_MAX && drv < BIG_PARAMS_VERSION)
    return da__set_error(ctx, DA_ERR_UNSUPPORTED,
                         "%s: its kernels take %zu bytes of parameters (%d tensor maps), past the 4096 that a driver "
                         "before CUDA 12.1 accepts (%d.%d here); update it, or use cuda_mma 4 (wgmma-ws)",
                         r->kernel_name, params, r->tma_maps, drv / 1000, drv % 1000 / 10);
  char arch[16], key[65];
  DA_TRY(da__cuda_compile_arch(ctx, da__cuda_arch(dev), r->cuda_path, arch));
  da__cuda_artifact_key(r->key, arch, maj, min, key);
  nvrtc_job job = {cache, r->source, r->kernel_name, arch, key, r->key, r->launch_regs, ctx, dev, params, ""};
  const da__kpayload *pl;
  DA_TRY(da__kernel_cache_get(ctx, cache, key, produce_cubin, &job, &pl));
  /* split plans' rows and persistent grids' counters come from the pool at every
   * execution without a caller's workspace: the pool made now, not inside a caller's
   * stream capture (tests/test_gpu.c graph) */
  if ((r->ws_ring || r->ws_floats_per_token) && da__cuda_stream_ordered(dev)) DA_TRY(da__cuda_pool_prepare(ctx, dev));
  da__cuda_plan *p = calloc(1, sizeof *p);
  DA_RETURN_IF(!p, DA_ERR_NO_MEMORY, "cuda plan: out of memory");
  p->dev = dev;
  p->r = *r;
  p->r.source = p->r.kernel_name = NULL;
  p->heads = spec->num_heads;
  p->head_dim = spec->head_dim;
  /* programmatic dependent launches: for plans of several launches, on sm_90 or later, and
   * only for kernels whose source waits for the launch before them (a kernel without
   * griddepcontrol.wait launched so would race it; compiled for an older arch it has none) */
  p->pdl = strcmp(r->strategy, "fused") && da__cuda_pdl(dev) && atoi(arch + 3) >= 90 &&
           r->source && strstr(r->source, "griddepcontrol.wait") != NULL;
  const char *ct = getenv("DILATTN_CTA_TILES"); /* (an A/B of launch_main's choice: README) */
  static const char *const CT[] = {"", "1", "2", "pairs", "persistent"};
  p->cta_tiles = CTA_TILES_AUTO;
  for (int i = 1; ct && i < (int)(sizeof CT / sizeof *CT); i++)
    if (!strcmp(ct, CT[i])) p->cta_tiles = i;
  if (ct && *ct && p->cta_tiles == CTA_TILES_AUTO)
    da__log(DA_LOG_WARN, "DILATTN_CTA_TILES=%s: not 1, 2, pairs or persistent; the runtime's choice", ct);
  da_status st = DA_OK;
  for (int i = 0; i < DA_CUDA_K_COUNT && st == DA_OK; i++) {
    const char *suffix = da__cuda_kernel_suffix(r->strategy, i);
    if (!suffix) continue;
    char fn[300];
    snprintf(fn, sizeof fn, "%s%s", r->kernel_name, suffix);
    st = da__cuda_load(ctx, dev, pl->blob, fn, i == DA_CUDA_K_MAIN ? r->smem_bytes : 0, &p->k[i]);
  }
  if (st == DA_OK) st = load_masks(ctx, p, spec);
  if (st == DA_OK && r->tma_maps > 0 && !(p->memo = da__tmap_memo_create()))
    st = da__set_error(ctx, DA_ERR_NO_MEMORY, "cuda plan: out of memory");
  if (st != DA_OK) {
    da__cuda_plan_destroy(p);
    return st;
  }
  *out = p;
  return DA_OK;
}

void da__cuda_plan_destroy(da__cuda_plan *p) {
  if (!p) return;
  for (int i = 0; i < DA_CUDA_K_COUNT; i++)
    if (p->k[i].module) da__cuda_unload(p->dev, &p->k[i]);
  da__cuda_free(p->dev, p->dmasks);
  da__tmap_memo_destroy(p->memo);
  free(p);
}

const char *da__cuda_kernel_suffix(const char *strategy, int which) {
  static const char *const suffix[2][DA_CUDA_K_COUNT] = {{"_fused", NULL}, {"_branch", "_clear"}};
  if (which < 0 || which >= DA_CUDA_K_COUNT) return NULL;
  return suffix[strcmp(strategy, "fused") != 0][which]; /* split and single: the same kernels */
}

size_t da__cuda_workspace_bytes(const da__rendered *r, int heads, int64_t batch, int64_t seq_len) {
  if (r->ws_floats_per_token == 0) return 0;
  double bytes = (double)batch * heads * (double)seq_len * (double)r->ws_floats_per_token * 4.0;
  if (bytes > (double)SIZE_MAX / 2) return SIZE_MAX;
  return (size_t)batch * (size_t)heads * (size_t)seq_len * (size_t)r->ws_floats_per_token * 4u;
}

/* The tokens a run of a split plan is a whole number of (the planner's lcm of the w: no
 * segment crosses a run); seq_len where that is no shorter (one run). */
static int64_t run_period(const da__rendered *r, int64_t seq_len) {
  return r->run_period < seq_len ? r->run_period : seq_len;
}

int64_t da__cuda_ws_tokens(const da__rendered *r, int heads, int64_t batch, int64_t seq_len, size_t budget) {
  if (!r->ws_floats_per_token || budget == SIZE_MAX) return seq_len;
  const size_t full = da__cuda_workspace_bytes(r, heads, batch, seq_len);
  if (full < SIZE_MAX && full <= budget) return seq_len;
  uint64_t per_token;
  if (!r->ws_runs || batch < 1 ||
      __builtin_mul_overflow((uint64_t)batch, (uint64_t)heads * (uint64_t)r->ws_floats_per_token * 4u, &per_token))
    return 0;
  const int64_t period = run_period(r, seq_len);
  const int64_t runs = (int64_t)(budget / per_token / (uint64_t)period);
  return runs > 0 ? runs * period : 0;
}

int64_t da__cuda_ws_min_tokens(const da__rendered *r, int64_t seq_len) {
  return r->ws_floats_per_token && r->ws_runs ? run_period(r, seq_len) : seq_len;
}

/* The launch rule of a plan's executions (DILATTN_CTA_TILES): the SMs launch_main fills
 * (1: no launch fills a wave of pairs, INT_MAX; 2: every one does, 0) and the waves of tiles
 * from which a launch is persistent (0: none; ring plans only, where the driver zeroes the
 * counters on the stream and allocates on it) */
static int launch_rule(const da__cuda_plan *p, int *waves) {
  *waves = p->cta_tiles == CTA_TILES_AUTO ? DA_CUDA_PERSIST_WAVES : p->cta_tiles == CTA_TILES_PERSISTENT ? 1 : 0;
  if (!p->r.ws_ring || !da__cuda_stream_ordered(p->dev)) *waves = 0;
  return p->cta_tiles == CTA_TILES_ONE ? INT_MAX : p->cta_tiles == CTA_TILES_TWO ? 0 : da__cuda_sm_count(p->dev);
}

/* Counts the persistent launches of a sequence (run without launching) */
static da_status count_persistent(void *user, int which, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                                  unsigned smem, da__cuda_args *a, int persistent) {
  (void)which, (void)gx, (void)gy, (void)gz, (void)threads, (void)smem, (void)a;
  *(int *)user += persistent;
  return DA_OK;
}

/* The workspace of an execution of a's shape in runs of run tokens: the partial rows
 * (da__cuda_workspace_bytes), then from the next 16 bytes a counter (4 bytes) for each
 * persistent launch, *nctrs of them. Where budget (the caller's workspace or the limit)
 * has no room for the counters, none (*nctrs 0): those launches run two tiles a CTA, with
 * the same results. SIZE_MAX where the rows' size overflows. */
static size_t exec_bytes(const da_context *ctx, const da__cuda_plan *p, const da__cuda_args *a, int64_t run, size_t budget,
                         int *nctrs) {
  *nctrs = 0;
  const size_t rows = da__cuda_workspace_bytes(&p->r, p->heads, a->batch, run);
  int waves;
  const int sms = launch_rule(p, &waves);
  if (!waves || rows > SIZE_MAX - 64) return rows;
  /* a dry run of the sequence, no maps encoded (nor counted in da__cuda_tma_stats); where
   * it fails (its error left in ctx), the launches meet the failure again */
  da__cuda_args dry = *a;
  dry.ws_len = run;
  da__rendered dr = p->r;
  dr.tma_maps = 0;
  int n = 0;
  if (da__cuda_launch_sequence(ctx, &dr, p->heads, p->head_dim, sms, waves, &dry, count_persistent, &n, NULL, NULL) != DA_OK)
    return rows;
  const size_t off = (rows + 15) & ~(size_t)15;
  if (!n || off + (size_t)n * sizeof(unsigned) > budget) return rows;
  *nctrs = n;
  return off + (size_t)n * sizeof(unsigned);
}

size_t da__cuda_plan_workspace(const da_context *ctx, const da__cuda_plan *p, int64_t batch, int64_t seq_len,
                               size_t budget) {
  int64_t run = da__cuda_ws_tokens(&p->r, p->heads, batch, seq_len, budget);
  if (run == 0) run = da__cuda_ws_min_tokens(&p->r, seq_len); /* a limit below one run: the least */
  da__cuda_args a;
  memset(&a, 0, sizeof a);
  a.batch = batch, a.seq_len = seq_len;
  int nctrs;
  return exec_bytes(ctx, p, &a, run, budget, &nctrs);
}

size_t da__cuda_plan_workspace_min(const da__cuda_plan *p, int64_t batch, int64_t seq_len) {
  return da__cuda_workspace_bytes(&p->r, p->heads, batch, da__cuda_ws_min_tokens(&p->r, seq_len));
}

static int aligned16(const void *ptr, const int64_t *stride) {
  return ((uintptr_t)ptr % 16) == 0 && stride[0] % 8 == 0 && stride[1] % 8 == 0 && stride[2] % 8 == 0;
}

/* The row kernel (_clear): grid (ceil(N * ceil(D / 8) / 256), H, B) of 256
 * threads, a thread per 8 head dims of a row (kernel.cu.tpl da_row_chunk). */
static da_status launch_rows(const da_context *ctx, int heads, int head_dim, int which, da__cuda_args *a,
                             da__cuda_launch_fn launch, void *user) {
  int64_t blocks = (a->seq_len * ((head_dim + 7) / 8) + 255) / 256;
  DA_RETURN_IF(blocks > 0x7fffffff, DA_ERR_INVALID_ARGUMENT, "grid too large for seq_len %lld", (long long)a->seq_len);
  if (blocks < 1) blocks = 1;
  return launch(user, which, (unsigned)blocks, (unsigned)heads, (unsigned)a->batch, 256, 0, a, 0);
}

/* The attention kernel's grid: (gx, heads, B) blocks of a tile each, or where the plan runs
 * several tiles a CTA (ws_tiles > 1, kernel.cu.tpl run_tiles), those blocks in x:
 *  - where persist_waves > 0 and the launch has that many waves of blocks on the device's
 *    sms SMs (r->ctas_per_sm CTAs each), a persistent grid: as many CTAs as the SMs hold,
 *    each taking the next block of the longest-first order as it goes from a counter the
 *    launch callback sets (a->ctr);
 *  - else a->tpc a CTA: ws_tiles where that leaves the launch a wave of CTAs (or sms is not
 *    known: 0), else one. Fewer CTAs than SMs would leave SMs idle that one tile a CTA keeps
 *    busy: bench/lpt_model.py --pair-waves 1 models LongNet 5-branch at N = 16K 1.02x to
 *    1.04x faster than one tile a CTA that way, 0.92x to 0.94x with every launch paired
 *    (its small branch launches); causal 5-branch 1.04x to 1.07x against 0.97x to 1.00x. */
static da_status launch_main(const da_context *ctx, const da__rendered *r, int64_t gx, int heads, int sms,
                             int persist_waves, da__cuda_args *a, da__cuda_launch_fn launch, void *user) {
  unsigned threads = (unsigned)r->threads, smem = (unsigned)r->smem_bytes;
  /* (the kernels number the blocks in 32 bits: kernel.cu.tpl da_lpt_unit, da_unit_bih) */
  const int64_t blocks = gx * heads * a->batch;
  DA_RETURN_IF(gx > 0x7fffffff || blocks > (int64_t)UINT32_MAX, DA_ERR_INVALID_ARGUMENT,
               "grid too large for seq_len %lld and batch %lld", (long long)a->seq_len, (long long)a->batch);
  a->tpc = 1;
  if (r->ws_tiles > 1) {
    const int64_t resident = (int64_t)sms * (r->ctas_per_sm > 0 ? r->ctas_per_sm : 1);
    /* (the counter, 32 bits, runs to blocks plus two draws a CTA past the end) */
    if (r->ws_ring && persist_waves > 0 && sms > 0 && blocks >= (int64_t)persist_waves * resident &&
        blocks + 4 * resident < (int64_t)UINT32_MAX)
      return launch(user, DA_CUDA_K_MAIN, (unsigned)(resident < blocks ? resident : blocks), 1, 1, threads, smem, a, 1);
    a->tpc = sms <= 0 || blocks >= (int64_t)r->ws_tiles * sms ? r->ws_tiles : 1;
    const int64_t ctas = (blocks + a->tpc - 1) / a->tpc;
    DA_RETURN_IF(ctas > 0x7fffffff, DA_ERR_INVALID_ARGUMENT,
                 "grid too large for seq_len %lld and batch %lld", (long long)a->seq_len, (long long)a->batch);
    return launch(user, DA_CUDA_K_MAIN, (unsigned)(ctas > 0 ? ctas : 1), 1, 1, threads, smem, a, 0);
  }
  return launch(user, DA_CUDA_K_MAIN, (unsigned)gx, (unsigned)heads, (unsigned)a->batch, threads, smem, a, 0);
}

/* wgmma-ws-tma: the tensor maps of branch br's classes x < r into m[3x .. 3x + 2]
 * (kernel.cu.tpl produce_tma), all 5-d: K and V of the positions x mod r, [head_dim,
 * ceil((N - x) / r), 1, kv heads, batch] from position x on with a row stride of r
 * positions; and V of the offset-x class of every whole segment, [head_dim,
 * ceil((w - x) / r), N / w segments, kv heads, batch] (none where no segment is whole: no
 * tile reads it). Boxes of 64 head
 * dims x tile_k rows into the 128-byte-swizzled tiles wgmma reads, zeros past each
 * dimension's end. 0 where the encoder refuses one. */
static int encode_tmaps(const da__rendered *r, const da__cuda_args *a, int head_dim, int br, da__tmap_encode_fn enc,
                        da__cuda_tmap *m) {
  const int64_t rate = r->branch_r[br], w = r->branch_w[br], n = a->seq_len;
  const uint32_t box[5] = {64, (uint32_t)r->tile_k, 1, 1, 1}, ones[5] = {1, 1, 1, 1, 1};
  for (int64_t x = 0; x < rate; x++)
    for (int t = 0; t < 3; t++) {
      const int64_t *st = t ? a->v_stride : a->k_stride;
      da__cuda_tmap *map = &m[3 * x + t];
      memset(map, 0, sizeof *map);
      char *base = (char *)(uintptr_t)(t ? a->v : a->k) + x * st[1] * 2;
      /* rows, segments: of the positions x mod r (one "segment"), or of every whole segment */
      const int64_t rows = t < 2 ? (n - x + rate - 1) / rate : (w - x + rate - 1) / rate, segs = t < 2 ? 1 : n / w;
      if (x >= n || segs == 0) continue; /* no tile reads it */
      const uint64_t dims[5] = {(uint64_t)head_dim, (uint64_t)rows, (uint64_t)segs, (uint64_t)r->kv_heads,
                                (uint64_t)a->batch};
      /* (the by-position maps' segment dimension holds one: its stride is the rows', which
       * the encoder takes wherever the rows' is) */
      const uint64_t strides[4] = {(uint64_t)(rate * st[1] * 2), (uint64_t)((t < 2 ? rate : w) * st[1] * 2),
                                   (uint64_t)(st[2] * 2), (uint64_t)(st[0] * 2)};
      if (enc(map, DA__TMAP_UINT16, 5, base, dims, strides, box, ones, 0, DA__TMAP_SWIZZLE_128B, DA__TMAP_L2_128B, 0))
        return 0;
    }
  return 1;
}

/* Why a wgmma-ws-tma plan's kernels may not take their copies by TMA for these arguments
 * (NULL: they may): 16-byte aligned tensors and strides (TMA's rule too), positive
 * strides, and coordinates within int32 (the instruction's). */
static const char *tma_unusable(const da__rendered *r, const da__cuda_args *a, da__tmap_encode_fn enc) {
  if (!enc) return "no tensor-map encoder (a driver before CUDA 12, or DILATTN_TMA=0)";
  if (r->tma_maps <= 0 || r->tma_maps > DA_CUDA_TMAPS_MAX || r->kv_heads < 1) return "the plan's map count";
  if (!a->vec16) return "q, k or v not 16-byte aligned, or a stride not a multiple of 8 elements";
  if (a->seq_len >= ((int64_t)1 << 31) - 1024 || a->batch >= ((int64_t)1 << 31)) return "coordinates past int32";
  for (int i = 0; i < 3; i++)
    if (a->k_stride[i] <= 0 || a->v_stride[i] <= 0) return "a stride of k or v not positive";
  return NULL;
}

/* The first map slot of branch br in the fused kernel's layout: 3 * the r of the branches
 * before it (br = num_branches: the count) */
static int64_t map_slot(const da__rendered *r, int br) {
  int64_t slot = 0;
  for (int i = 0; i < br; i++) slot += 3 * r->branch_r[i];
  return slot;
}

/* A plan's tensor maps of its last DA_TMAP_MEMO_SLOTS argument sets (least recently used
 * out). A map holds addresses, sizes and strides, nothing of the data, so the maps encoded
 * for one (k, v, their strides, N, batch) serve every later execution with the same ones,
 * a freed and reallocated buffer at the same address included (PyTorch's caching allocator
 * hands a model's layers the same addresses every step). The rest of what encode_tmaps
 * reads is the plan's. 64 slots: a model's layers sharing one plan, up to 64 of them,
 * each hit; a slot takes the plan's maps (at most DA_CUDA_TMAPS_MAX x 128 bytes). */
#define DA_TMAP_MEMO_SLOTS 64
typedef struct {
  const void *k, *v;
  int64_t k_stride[3], v_stride[3], seq_len, batch;
} tmap_key;
struct da__tmap_memo {
  pthread_mutex_t mu;
  uint64_t clock;
  struct {
    tmap_key key;
    uint64_t used; /* 0: empty */
    da__cuda_tmap *maps;
  } slot[DA_TMAP_MEMO_SLOTS];
};

da__tmap_memo *da__tmap_memo_create(void) {
  da__tmap_memo *m = calloc(1, sizeof *m);
  if (m && pthread_mutex_init(&m->mu, NULL)) {
    free(m);
    return NULL;
  }
  return m;
}

void da__tmap_memo_destroy(da__tmap_memo *m) {
  if (!m) return;
  for (int i = 0; i < DA_TMAP_MEMO_SLOTS; i++) free(m->slot[i].maps);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

static tmap_key key_of(const da__cuda_args *a) {
  tmap_key key;
  memset(&key, 0, sizeof key);
  key.k = a->k, key.v = a->v, key.seq_len = a->seq_len, key.batch = a->batch;
  memcpy(key.k_stride, a->k_stride, sizeof key.k_stride);
  memcpy(key.v_stride, a->v_stride, sizeof key.v_stride);
  return key;
}

/* (k first: a miss compares 64 keys, most of them at once) */
static int same_key(const tmap_key *a, const tmap_key *b) { return a->k == b->k && !memcmp(a, b, sizeof *a); }

/* The maps of key into m (count of them), from the memo: whether it held them */
static int memo_get(da__tmap_memo *memo, const tmap_key *key, da__cuda_tmap *m, int64_t count) {
  int hit = 0;
  pthread_mutex_lock(&memo->mu);
  for (int i = 0; i < DA_TMAP_MEMO_SLOTS && !hit; i++)
    if (same_key(&memo->slot[i].key, key) && memo->slot[i].used) {
      memcpy(m, memo->slot[i].maps, (size_t)count * sizeof *m);
      memo->slot[i].used = ++memo->clock;
      hit = 1;
    }
  pthread_mutex_unlock(&memo->mu);
  return hit;
}

/* m (count maps), encoded for key, into the memo's empty or least recently used slot
 * (nothing where no memory: the memo is only speed) */
static void memo_put(da__tmap_memo *memo, const tmap_key *key, const da__cuda_tmap *m, int64_t count) {
  pthread_mutex_lock(&memo->mu);
  int at = 0;
  for (int i = 0; i < DA_TMAP_MEMO_SLOTS; i++) {
    if (same_key(&memo->slot[i].key, key) && memo->slot[i].used) { /* another thread's, meanwhile */
      at = -1;
      break;
    }
    if (memo->slot[i].used < memo->slot[at].used) at = i;
  }
  if (at >= 0) {
    if (!memo->slot[at].maps) memo->slot[at].maps = aligned_alloc(_Alignof(da__cuda_tmap), (size_t)count * sizeof *m);
    if (memo->slot[at].maps) {
      memcpy(memo->slot[at].maps, m, (size_t)count * sizeof *m);
      memo->slot[at].key = *key;
      memo->slot[at].used = ++memo->clock;
    }
  }
  pthread_mutex_unlock(&memo->mu);
}

/* Every branch's maps, encoded once an execution (or taken from memo, where not NULL and it
 * has those of these arguments), at map_slot: the fused kernel's layout (kernel.cu.tpl
 * BR_TMAP0), of which a branch launch takes its branch's slice (its kernel's BR_TMAP0 is
 * 0). malloc'ed; NULL, with *why said, where the plan has no maps, the arguments do not
 * allow them (tma_unusable: the kernels then copy K and V as wgmma-ws's do) or the encoder
 * refuses one. */
static da__cuda_tmap *encode_all(const da__rendered *r, const da__cuda_args *a, int head_dim, da__tmap_encode_fn enc,
                                 da__tmap_memo *memo, const char **why) {
  *why = NULL;
  if (r->tma_maps <= 0) return NULL;
  if ((*why = tma_unusable(r, a, enc)) != NULL) return NULL;
  const int64_t count = map_slot(r, r->num_branches);
  da__cuda_tmap *m = aligned_alloc(_Alignof(da__cuda_tmap), (size_t)count * sizeof *m);
  if (!m) {
    *why = "out of host memory";
    return NULL;
  }
  const tmap_key key = key_of(a);
  if (memo && memo_get(memo, &key, m, count)) return m;
  for (int i = 0; i < r->num_branches; i++)
    if (!encode_tmaps(r, a, head_dim, i, enc, &m[map_slot(r, i)])) {
      free(m);
      *why = "the driver refused a tensor map: strides or sizes";
      return NULL;
    }
  if (memo) memo_put(memo, &key, m, count);
  return m;
}

/* A launch's maps into m: every branch's (the fused kernel, br < 0) or branch br's slice of
 * encode_all's; whether it has them (within the plan's count). */
static int take_maps(const da__rendered *r, const da__cuda_tmap *maps, int br, da__cuda_tmap *m) {
  if (!maps) return 0;
  const int64_t lo = br < 0 ? 0 : map_slot(r, br), hi = br < 0 ? map_slot(r, r->num_branches) : map_slot(r, br + 1);
  if (hi - lo > r->tma_maps || hi - lo > DA_CUDA_TMAPS_MAX) return 0;
  memcpy(m, maps + lo, (size_t)(hi - lo) * sizeof *maps);
  return 1;
}

/* wgmma-ws-tma executions with their tensor maps and without (the fallback), and the last
 * fallback's reason (a string literal), a process's: da__cuda_tma_stats; launches that ran
 * as persistent grids (da__cuda_persistent_launches) */
static unsigned long long tma_with, tma_without, persistent_launches;
static const char *tma_why;

unsigned long long da__cuda_persistent_launches(void) { return __atomic_load_n(&persistent_launches, __ATOMIC_RELAXED); }

void da__cuda_tma_stats(unsigned long long *with, unsigned long long *without, const char **why) {
  *with = __atomic_load_n(&tma_with, __ATOMIC_RELAXED);
  *without = __atomic_load_n(&tma_without, __ATOMIC_RELAXED);
  *why = __atomic_load_n(&tma_why, __ATOMIC_RELAXED);
}

da_status da__cuda_launch_sequence(const da_context *ctx, const da__rendered *r, int heads, int head_dim, int sms,
                                   int persist_waves, da__cuda_args *args, da__cuda_launch_fn launch, void *user,
                                   da__tmap_encode_fn enc, da__tmap_memo *memo) {
  /* every launch takes the kernels' full parameter (the arguments, then a wgmma-ws-tma
   * kernel's tensor maps: other kernels read the prefix) */
  da__cuda_kargs K;
  K.a = *args;
  da__cuda_args *a = &K.a;
  const char *why;
  da__cuda_tmap *maps = encode_all(r, a, head_dim, enc, memo, &why);
  if (why) {
    da__log(DA_LOG_DEBUG, "cuda: wgmma-ws-tma without tensor maps (%s): K and V copied as wgmma-ws copies them", why);
    __atomic_add_fetch(&tma_without, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&tma_why, why, __ATOMIC_RELAXED);
  } else if (maps) {
    __atomic_add_fetch(&tma_with, 1, __ATOMIC_RELAXED);
  }
  a->tma = 0; /* (_clear: none) */
  da_status st = DA_OK;
  if (!strcmp(r->strategy, "fused")) {
    a->tma = take_maps(r, maps, -1, K.m);
    st = launch_main(ctx, r, (a->seq_len + r->window_g - 1) / r->window_g * r->tiles_per_window, heads, sms,
                     persist_waves, a, launch, user);
    goto out;
  }
  /* _clear, unless the branches write every row; a split plan's branch with r = 1 first
   * (split_first: kernel.cu.tpl's tile_end knows the order from da_split_side); the
   * branches run over the tokens in runs of a->ws_len (a whole number of every branch's w),
   * every branch over one run before the next run starts, so the workspace holds one run */
  const int first = !strcmp(r->strategy, "split") ? r->split_first : -1;
  const int64_t n = a->seq_len, run = a->ws_len > 0 && a->ws_len < n ? a->ws_len : n;
  for (int i = 0; i < r->num_branches && run < n; i++)
    if (run % r->branch_w[i]) {
      st = da__set_error(ctx, DA_ERR_INTERNAL, "runs of %lld tokens cut the segments of w = %lld", (long long)run,
                         (long long)r->branch_w[i]);
      goto out;
    }
  if (r->clear_rows && (st = launch_rows(ctx, heads, head_dim, DA_CUDA_K_AUX1, a, launch, user)) != DA_OK) goto out;
  for (int64_t t0 = 0; t0 < n && st == DA_OK; t0 += run) {
    a->tok0 = t0, a->ws_len = run;
    for (int i = 0; i < r->num_branches && st == DA_OK; i++) {
      const int br = first < 0 ? i : i == 0 ? first : i <= first ? i - 1 : i;
      const int64_t tokens = n - t0 < run ? n - t0 : run;
      /* the heads that use the branch (kernel.cu.tpl BR_HEAD0: the grid's y counts from
       * there); none: not launched (grouped mode with fewer heads than branches) */
      const int bh = (int)r->branch_heads[br];
      if (bh <= 0) continue;
      a->branch = br;
      a->tma = take_maps(r, maps, br, K.m);
      st = launch_main(ctx, r, (tokens + r->branch_w[br] - 1) / r->branch_w[br] * r->branch_tiles[br], bh, sms,
                       persist_waves, a, launch, user);
    }
  }
out:
  free(maps);
  *args = *a;
  return st;
}

void da__cuda_args_fill(da__cuda_args *a, const da_args *args) {
  memset(a, 0, sizeof *a);
  a->q = args->q, a->k = args->k, a->v = args->v, a->out = args->out, a->lse = args->lse;
  a->batch = args->batch, a->seq_len = args->seq_len;
  memcpy(a->q_stride, args->q_stride, sizeof a->q_stride);
  memcpy(a->k_stride, args->k_stride, sizeof a->k_stride);
  memcpy(a->v_stride, args->v_stride, sizeof a->v_stride);
  memcpy(a->out_stride, args->out_stride, sizeof a->out_stride);
  a->vec16 = aligned16(args->q, args->q_stride) && aligned16(args->k, args->k_stride) && aligned16(args->v, args->v_stride);
  a->out16 = aligned16(args->out, args->out_stride);
}

typedef struct {
  const da_context *ctx;
  da__cuda_plan *p;
  void *stream;
  int launches; /* so far in this sequence */
  unsigned *ctrs; /* the persistent launches' counters, zeroed on the stream before the first */
  int nctrs, used;
} driver_launch;

/* Every launch of a sequence but the first is a programmatic dependent one where the plan
 * allows (p->pdl): it may start while the launch before it finishes, running up to its
 * griddepcontrol.wait (kernel.cu.tpl da_grid_wait), so one branch's key loops overlap the
 * last wave of the branch before. The first waits for everything before it on the stream,
 * an earlier execution's last branch launch reading the same workspace say. */
static da_status launch_on_driver(void *user, int which, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                                  unsigned smem, da__cuda_args *a, int persistent) {
  driver_launch *d = user;
  if (persistent && d->used >= d->nctrs)
    return da__set_error(d->ctx, DA_ERR_INTERNAL, "cuda: a persistent launch without a counter");
  a->ctr = persistent ? d->ctrs + d->used++ : NULL;
  if (persistent) __atomic_add_fetch(&persistent_launches, 1, __ATOMIC_RELAXED);
  void *params[] = {a};
  const int dependent = d->p->pdl && d->launches++ > 0;
  return da__cuda_launch_ex(d->ctx, d->p->dev, &d->p->k[which], gx, gy, gz, threads, 1, 1, smem, d->stream, params,
                            dependent);
}

/* Free device memory of this execution on its stream, or where the driver cannot (no pool,
 * a context it could not make current) wait for the stream, then free it */
static da_status free_on(const da_context *ctx, da__cuda *dev, void *ptr, void *stream) {
  if (da__cuda_free_async(dev, ptr, stream)) return DA_OK;
  const da_status st = da__cuda_sync(ctx, dev, stream);
  da__cuda_free(dev, ptr);
  return st;
}

da_status da__cuda_plan_execute(const da_context *ctx, da__cuda_plan *p, const da_args *args, size_t limit) {
  DA_RETURN_IF(args->batch > 65535, DA_ERR_INVALID_ARGUMENT,
               "batch %lld: the CUDA backend takes at most 65535 per call", (long long)args->batch);
  DA_TRY(da__cuda_check_stream(ctx, p->dev, args->stream)); /* a stream of another device */
  /* element alignment: checked for every backend (plan.c check_tensors); 16-byte
   * alignment only selects cp.async (vec16) */
  da__cuda_args a;
  da__cuda_args_fill(&a, args);
  a.masks = p->dmasks;
  void *stream = args->stream, *owned = NULL;
  /* the workspace: one run's rows (da__cuda_launch_sequence), all the tokens where it fits
   * the caller's workspace, or the limit (DILATTN_WORKSPACE_LIMIT), or the device's pool;
   * then the persistent launches' counters where there is room (exec_bytes) */
  const size_t budget = args->workspace ? args->workspace_bytes : limit;
  const int64_t least = da__cuda_ws_min_tokens(&p->r, args->seq_len);
  int64_t run = da__cuda_ws_tokens(&p->r, p->heads, args->batch, args->seq_len, budget);
  int nctrs = 0;
  size_t need = run ? exec_bytes(ctx, p, &a, run, budget, &nctrs)
                    : da__cuda_workspace_bytes(&p->r, p->heads, args->batch, least);
  DA_RETURN_IF(need == SIZE_MAX, DA_ERR_INVALID_ARGUMENT, "workspace size overflows");
  DA_RETURN_IF(!run, args->workspace ? DA_ERR_INVALID_ARGUMENT : DA_ERR_NO_MEMORY,
               "workspace: %zu bytes %s, %zu needed (runs of %lld tokens; %zu for one run of all %lld: "
               "da_plan_workspace_min_size, da_plan_workspace_size)",
               budget, args->workspace ? "given" : "allowed by DILATTN_WORKSPACE_LIMIT", need, (long long)least,
               da__cuda_plan_workspace(ctx, p, args->batch, args->seq_len, SIZE_MAX), (long long)args->seq_len);
  void *ws = args->workspace;
  if (ws) {
    /* the kernels access the rows in 8-byte vectors: a misaligned one would fault the
     * context (the counters alone, at its start: 4 bytes, plan.c's check) */
    DA_RETURN_IF(da__cuda_workspace_bytes(&p->r, p->heads, args->batch, run) && (uintptr_t)ws % 16,
                 DA_ERR_INVALID_ARGUMENT, "workspace: %p is not 16-byte aligned", ws);
  } else if (need) {
    /* stream-ordered pool; where it fails, the rows without the counters (the pairs: the
     * same results), then where the device has not that much free, shorter runs */
    da_status st;
    int retried = 0;
    while ((st = da__cuda_malloc_async(ctx, p->dev, need, stream, &owned)) != DA_OK) {
      if (nctrs) {
        da__log(DA_LOG_INFO, "workspace: %zu bytes not available (%s); no persistent grid", need,
                da_context_last_error(ctx));
        nctrs = 0, need = da__cuda_workspace_bytes(&p->r, p->heads, args->batch, run);
      } else if (st == DA_ERR_NO_MEMORY && run > least) {
        const int64_t shorter = run / 2 / least * least;
        run = shorter > least ? shorter : least;
        da__log(DA_LOG_INFO, "workspace: %zu bytes not available on the device; runs of %lld tokens instead", need,
                (long long)run);
        need = exec_bytes(ctx, p, &a, run, budget, &nctrs);
      } else {
        break;
      }
      retried = 1;
      if (!need) {
        st = DA_OK;
        break;
      }
    }
    DA_TRY(st);
    if (retried) da__clear_error(ctx); /* the failure of a larger allocation, taken care of */
    ws = owned;
  }
  a.ws = da__cuda_workspace_bytes(&p->r, p->heads, args->batch, run) ? ws : NULL;
  a.ws_len = run;
  driver_launch d = {ctx, p, stream, 0, NULL, 0, 0};
  int waves;
  const int sms = launch_rule(p, &waves);
  if (nctrs) {
    /* the counters, this execution's own (several may run at once, on streams of their
     * own), zero on the stream before the first launch */
    unsigned *ctrs = (unsigned *)((char *)ws + (need - (size_t)nctrs * sizeof(unsigned)));
    if (da__cuda_zero_async(ctx, p->dev, ctrs, (size_t)nctrs, stream) == DA_OK)
      d.ctrs = ctrs, d.nctrs = nctrs;
    else { /* the pairs then: the same results */
      da__log(DA_LOG_INFO, "cuda: no persistent grid (%s)", da_context_last_error(ctx));
      da__clear_error(ctx);
    }
  }
  if (!d.nctrs) waves = 0;
  da_status st = da__cuda_launch_sequence(ctx, &p->r, p->heads, p->head_dim, sms, waves, &a, launch_on_driver, &d,
                                          da__cuda_tmap_encoder(p->dev), p->memo);
  if (owned) {
    const da_status s2 = free_on(ctx, p->dev, owned, stream);
    if (st == DA_OK) st = s2;
  }
  return st;
}
