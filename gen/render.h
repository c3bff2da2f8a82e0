/* render.h - spec -> source: drives the Lua generator (planner + templates) and stamps
 * the cache key into the banner. */
#ifndef DA_RENDER_H
#define DA_RENDER_H

#include "runtime/internal.h"

/* Tunable plan parameters (public, experimental); 0 = the planner's default. */
typedef da_plan_options da__render_opts;

typedef struct {
  char *source;        /* whole source, banner with the key first */
  char *kernel_name;   /* entry symbol; encodes the spec */
  char key[65];        /* SHA-256 hex cache key */
  char strategy[16];   /* fused | split | single */
  int64_t ws_floats_per_token;
  int tile_q, tile_k;
  /* CUDA target */
  char cuda_path[8];   /* mma | wgmma | simt */
  int cuda_mma;        /* da_plan_options.cuda_mma the plan resolved to: 1 mma, 2 wgmma, 3 overlapped,
                          4 warp-specialized, 5 that with P double-buffered, 6 that with TMA copies, 0 else */
  int threads;         /* threads per CTA */
  int split_first;     /* split: the branch launched first (r = 1, it covers every row); -1: none */
  int clear_rows;      /* split, single: some row no branch covers, so _clear runs first; 0: the branches write all */
  int launch_regs;     /* registers per thread the kernel must be compiled with (its setmaxnreg split
                          adds up to the register file only then), 0: any */
  int smem_bytes;      /* dynamic shared memory per CTA */
  int64_t tiles_per_window, window_g;  /* fused grid: ceil(N / g) * tiles_per_window */
  int64_t lpt_group;   /* fused causal: the grid's blocks run longest first in groups of this many
                          (batch, head, window) units (kernel.cu.tpl da_lpt_unit); 0: grid order */
  int ws_tiles;        /* tiles a CTA runs (kernel.cu.tpl run_tiles): > 1 launches the grid's
                          blocks that many a CTA, in x, or as a persistent grid; 1: the grid as it is */
  int ctas_per_sm;     /* CTAs of the attention kernel an SM holds (its shared memory and
                          __launch_bounds__): a persistent grid's CTAs are this many an SM */
  int ws_ring;         /* run_tiles takes any number of tiles a CTA (a ring of them): a launch may
                          run as a persistent grid; 0: ws_tiles at most */
  int ws_runs;         /* CUDA: the branch kernels take a run of tokens (da_cuda_args tok0, ws_len), so a
                          split plan may launch the sequence in runs with a workspace of one run's rows */
  int64_t run_period;  /* runs are whole numbers of it (the lcm of the w; 0: runs unknown to the plan) */
  int num_branches;
  int64_t branch_w[DA_MAX_BRANCHES], branch_tiles[DA_MAX_BRANCHES]; /* branch grid: ceil(N / w) * tiles */
  int64_t branch_head0[DA_MAX_BRANCHES], branch_heads[DA_MAX_BRANCHES]; /* and the heads [head0, head0 + heads)
                                                                           that use the branch: the grid's y
                                                                           (0 heads: not launched) */
  int64_t branch_r[DA_MAX_BRANCHES];
  int64_t kv_heads;
  int tma_maps;        /* wgmma-ws-tma: tensor maps the kernel takes after its arguments (a K and a V map
                          per offset class of every branch, fused, or of the launched one; kernel.cu.tpl
                          da_cuda_kargs), 0: none */
} da__rendered;

DA_HIDDEN da_status da__render_ex(da_context *ctx, const da_spec *spec, da_target target,
                                  const da__render_opts *opts, da__rendered *out);
DA_HIDDEN void da__rendered_free(da__rendered *r);

/* Whether the wgmma paths (cuda_mma 2, 3, 4) serve spec: float16 / bfloat16 at head_dim 64 or
 * 128 (the planner's rule, gen/lua/planner.lua plan_cuda). */
DA_HIDDEN int da__wgmma_serves(const da_spec *spec);
/* 1 when spec has a sparse layout (not none or dense): the kernels wgmma-ws-p2 and
 * wgmma-ws-tma have no form for it. */
DA_HIDDEN int da__spec_sparse(const da_spec *spec);
/* s, or where its num_kv_heads is unset (0: da_spec_init's) and it has one head, a copy in
 * *tmp with num_kv_heads 1; with more heads an unset num_kv_heads stays 0, which
 * da_spec_validate refuses (s NULL: NULL) */
DA_HIDDEN const da_spec *da__spec_resolved(const da_spec *s, da_spec *tmp);
/* The names of da_plan_options.cuda_mma 1..DA__CUDA_MMA_MAX (gen --mma, DILATTN_CUDA_MMA, the
 * planner's opts.mma): "sync", "wgmma", "wgmma-overlap", "wgmma-ws", "wgmma-ws-p2",
 * "wgmma-ws-tma". parse: 0 for any other text. */
#define DA__CUDA_MMA_MAX 6
DA_HIDDEN const char *da__cuda_mma_name(int cuda_mma);
DA_HIDDEN int da__cuda_mma_parse(const char *name);

/* Render an arbitrary template text (tests of the sandbox and the template engine):
 * the text is rendered like a kernel template, with the plan of spec as `p`.
 * *out is malloc'ed. */
DA_HIDDEN da_status da__render_template_text(da_context *ctx, const da_spec *spec,
                                             const char *text, const char *chunkname,
                                             long long instr_budget, size_t mem_limit,
                                             char **out);

/* SHA-256 of data as 64 lowercase hex digits + NUL. */
DA_HIDDEN void da__sha256_hex(const void *data, size_t len, char hex[65]);

/* 1 when s is exactly n lowercase hex digits (a key, a checksum: n = 64; a disk-cache
 * folder: 2); 0 otherwise, s NULL included. */
DA_HIDDEN int da__is_hex(const char *s, size_t n);

#define DA_CACHE_SCHEMA_VERSION 1

#endif
