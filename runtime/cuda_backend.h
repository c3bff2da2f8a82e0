/* cuda_backend.h - the CUDA side of a plan: compile (NVRTC, through the context's kernel
 * cache) the module a rendered CUDA source makes, load it, and launch its kernels for
 * the plan's strategy on the caller's stream. */
#ifndef DA_CUDA_BACKEND_H
#define DA_CUDA_BACKEND_H

#include "gen/render.h"
#include "runtime/cuda_args.h"
#include "runtime/kernel_cache.h"

typedef struct da__cuda_plan da__cuda_plan;

/* Is a CUDA device usable? DA_OK or DA_ERR_UNSUPPORTED with the reason. */
DA_HIDDEN da_status da__cuda_backend_available(const da_context *ctx);

/* Artifact key of a CUDA source for arch: SHA-256 over the source key, the arch, the
 * NVRTC version and the compile options. */
/* The arch a plan's kernels are compiled for on a device (or offline) of arch: itself, or
 * sm_90a for the wgmma path, which needs sm_90 (DA_ERR_UNSUPPORTED otherwise). */
DA_HIDDEN da_status da__cuda_compile_arch(const da_context *ctx, const char *arch, const char *cuda_path, char out[16]);
/* Whether arch ("sm_90", "sm_90a", ...) runs the wgmma paths. */
DA_HIDDEN int da__cuda_wgmma_arch(const char *arch);
/* The context's device and the wgmma paths: 0 not an sm_90 GPU; 1 one; 2 one whose driver
 * and NVRTC take kernel parameters past 4 KiB (da__cuda_big_params: the default is then
 * wgmma-ws-tma, plan.c da__default_mma). _device_serves: that level where the wgmma paths
 * serve spec (da__wgmma_serves), else 0: what the default, DILATTN_CUDA_MMA and the
 * tuner's wgmma candidates all ask. */
DA_HIDDEN int da__cuda_wgmma_level(const da_context *ctx);
DA_HIDDEN int da__cuda_wgmma_device_serves(const da_context *ctx, const da_spec *spec);
/* Whether the driver and NVRTC both take kernel parameters past 4 KiB (CUDA 12.1 or later):
 * where they do not, a wgmma-ws-tma plan whose maps make more is refused, and the default
 * instruction is wgmma-ws (plan.c da__default_mma). */
DA_HIDDEN int da__cuda_big_params(const da_context *ctx);
/* The bytes of parameters r's attention kernels take: the arguments, then its tensor maps. */
DA_HIDDEN size_t da__cuda_param_bytes(const da__rendered *r);
/* A compiled kernel's register count against what its plan needs (r->launch_regs: the
 * warp-specialized kernel's setmaxnreg split fills the register file only at that count;
 * with fewer its consumers would wait forever). DA_ERR_COMPILE when they differ. */
DA_HIDDEN da_status da__cuda_check_regs(const da_context *ctx, const char *kernel, int launch_regs, int registers);
DA_HIDDEN void da__cuda_artifact_key(const char *source_key, const char *arch, int nvrtc_major,
                                     int nvrtc_minor, char key[65]);

/* The NVRTC options every CUDA artifact is compiled with (part of its key): JIT and
 * `dilattn gen --compile` use the same. */
DA_HIDDEN const char *const *da__cuda_nvrtc_opts(int *n);

/* Compile (or fetch) r's module for the current device and load it. spec supplies the
 * explicit masks, copied to the device. */
DA_HIDDEN da_status da__cuda_plan_create(const da_context *ctx, da__kernel_cache *cache,
                                         const da__rendered *r, const da_spec *spec,
                                         da__cuda_plan **out);
DA_HIDDEN void da__cuda_plan_destroy(da__cuda_plan *p);
/* Workspace bytes an execution takes under budget (bytes; SIZE_MAX: no limit): the rows of
 * one run of all the tokens where that fits, else of the longest runs that fit, else (a
 * budget below one run) of the least; then, from the next 16 bytes, 4 bytes for each of
 * that execution's persistent launches' counters where budget has room for them. _min:
 * the rows of the least, one run of the shortest a plan allows (da__cuda_ws_min_tokens). */
DA_HIDDEN size_t da__cuda_plan_workspace(const da_context *ctx, const da__cuda_plan *p, int64_t batch, int64_t seq_len,
                                         size_t budget);
DA_HIDDEN size_t da__cuda_plan_workspace_min(const da__cuda_plan *p, int64_t batch, int64_t seq_len);
/* The kernels of a strategy and the order they run in (DESIGN.md decision 4):
 *   fused:  <name>_fused                 grid (ceil(N/g) * tiles_per_window, H, B)
 *   split:  _clear (only where some row no branch covers: clear_rows), _branch per branch,
 *           split_first >= 0 first; a row's last covering launch writes out and lse
 *   single: _clear (likewise), _branch per branch
 *   (ws_tiles > 1: the attention kernel's blocks in x alone, run by a persistent grid where
 *   persist_waves > 0 and the launch has that many waves of blocks on sms SMs or more: a
 *   CTA an SM, each drawing its next block from a counter the launch callback sets in
 *   a->ctr (zero before the launch); else a->tpc a CTA: ws_tiles where that leaves a launch
 *   a wave of CTAs on sms SMs, 0: unknown, always; else 1)
 * da__cuda_kernel_suffix names kernel slot `which` (DA_CUDA_K_*) of a strategy, NULL when
 * the strategy has none. da__cuda_launch_sequence calls launch once per launch, in order,
 * with a->branch set for branch launches, and the branches in runs of a->ws_len tokens (0
 * or seq_len: one run) with a->tok0 set; it stops at the first failure. The CUDA backend
 * launches through the driver; tests/emu launches the same sequence on the CPU. a points
 * to a da__cuda_kargs at every launch: a wgmma-ws-tma plan's maps (r->tma_maps) encoded
 * through enc and a->tma set where its arguments allow (NULL enc: never), or taken from
 * memo (NULL: none), which keeps those of a plan's recent arguments. */
enum { DA_CUDA_K_MAIN, DA_CUDA_K_AUX1, DA_CUDA_K_COUNT };
typedef struct da__tmap_memo da__tmap_memo;
DA_HIDDEN da__tmap_memo *da__tmap_memo_create(void);
DA_HIDDEN void da__tmap_memo_destroy(da__tmap_memo *m);
DA_HIDDEN const char *da__cuda_kernel_suffix(const char *strategy, int which);
typedef da_status (*da__cuda_launch_fn)(void *user, int which, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned threads, unsigned smem, da__cuda_args *a, int persistent);
/* A launch of at least this many waves of blocks runs as a persistent grid (the default;
 * DILATTN_CTA_TILES, README). bench/lpt_model.py --persist-waves: a kernel that claims a
 * tile ahead (run_tiles) loses to the pairs at 16K and 32K on LongNet 2-branch causal
 * (0.94, 0.99; 8 to 16 waves) and gains 1.5 to 10% from 16 waves up; the counter's memset
 * costs each such execution about 2 us besides. */
#define DA_CUDA_PERSIST_WAVES 16
/* The process's wgmma-ws-tma executions so far: with their tensor maps, without them (the
 * fallback: wgmma-ws's copies), and the reason of the last fallback (NULL: none). For
 * tests: a driver that refuses the maps would otherwise cost only speed. */
DA_HIDDEN void da__cuda_tma_stats(unsigned long long *with, unsigned long long *without, const char **why);
/* The process's launches that ran as persistent grids so far (tests: a fallback to the
 * pairs would otherwise cost only speed). */
DA_HIDDEN unsigned long long da__cuda_persistent_launches(void);
DA_HIDDEN da_status da__cuda_launch_sequence(const da_context *ctx, const da__rendered *r, int heads, int head_dim,
                                             int sms, int persist_waves, da__cuda_args *a, da__cuda_launch_fn launch,
                                             void *user, da__tmap_encode_fn enc, da__tmap_memo *memo);
/* Pointers, sizes and strides of args (masks, ws and branch zero). */
DA_HIDDEN void da__cuda_args_fill(da__cuda_args *a, const da_args *args);
/* Bytes of split workspace for (batch, seq_len), or for runs of seq_len tokens; 0 when the
 * strategy needs none, SIZE_MAX on overflow. */
DA_HIDDEN size_t da__cuda_workspace_bytes(const da__rendered *r, int heads, int64_t batch, int64_t seq_len);
/* Runs of tokens (da__cuda_args.ws_len; da__cuda_launch_sequence launches every branch over
 * a run before the next): seq_len where no workspace is needed, budget is SIZE_MAX (none) or
 * holds all the tokens; else the most whole periods (the lcm of the branches' w) budget
 * holds, 0 where not one (or the templates predate runs: r->ws_runs; or the size overflows).
 * _min: the shortest run. */
DA_HIDDEN int64_t da__cuda_ws_tokens(const da__rendered *r, int heads, int64_t batch, int64_t seq_len, size_t budget);
DA_HIDDEN int64_t da__cuda_ws_min_tokens(const da__rendered *r, int64_t seq_len);

/* Launch on args->stream. Device pointers. limit: workspace bytes the plan may allocate
 * when args brings none (SIZE_MAX: no limit; DILATTN_WORKSPACE_LIMIT). */
DA_HIDDEN da_status da__cuda_plan_execute(const da_context *ctx, da__cuda_plan *p, const da_args *args, size_t limit);

#endif
