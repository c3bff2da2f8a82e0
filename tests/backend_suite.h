/* backend_suite.h - the checks a kernel backend must pass, shared by the GPU suite
 * (test_gpu, real device) and the emulated one (test_cuda_emu, the CUDA kernels on the
 * CPU): every golden case, and seeded random specs against the float64 reference.
 * A runner executes one spec over host arrays and returns its status. */
#ifndef DA_BACKEND_SUITE_H
#define DA_BACKEND_SUITE_H

#include "dilattn.h"

typedef da_status (*bs_runner)(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N,
                               const void *q, const void *k, const void *v, void *out, float *lse);

/* Every case of the golden folder; label names the backend in messages. */
void bs_golden(da_context *ctx, const char *dir, const char *label, bs_runner run, void *user);

/* Random spec i of a seeded family (fp16/bf16 at D = 32/64/96/128, fp32 and odd D, every
 * layout including explicit masks, causal, GQA, grouped mode, both offset policies).
 * max_n bounds N (at least 100). Masks of explicit specs live until the next call. */
void bs_random_spec(int i, int64_t max_n, da_spec *s, int64_t *B, int64_t *N);

/* Random specs first .. first + count - 1 of that family (N <= max_n), each checked. */
void bs_random(da_context *ctx, int first, int count, int64_t max_n, bs_runner run, void *user);

/* Plan options for the wgmma path where it applies to s (fp16 / bf16 at head_dim 64 or
 * 128): base's tunables (all 0 when NULL) with base's cuda_mma if it names a wgmma
 * variant that serves s (2, 3, 4), else 2; elsewhere all 0 (the planner's defaults). */
da_plan_options bs_wgmma_options(const da_spec *s, const da_plan_options *base);
/* bs_wgmma_options, with tile_q 192 (the warp-specialized kernel's three consumer
 * warpgroups) dropped to the planner's choice, and cuda_mma 5 (wgmma-ws-p2) to 4 with it,
 * and cuda_mma 6 (wgmma-ws-tma) to 4, under a sparse layout, where they are refused. */
da_plan_options bs_ws_options(const da_spec *s, const da_plan_options *base);

/* Random specs first .. first + count - 1 of the warp-specialized fused plan (cuda_mma
 * mma: 4, the sm_90 default for LongNet without a causal mask, or 6, its TMA copies; sparse
 * specs on 4), which bs_random rarely reaches; run's user is the spec's da_plan_options
 * (run uses them as they are). At least half must plan fused. */
void bs_fused_ws_random(da_context *ctx, int first, int count, const char *label, bs_runner run, int mma);

/* The wgmma path (cuda_mma = mma) through run, whose user is a da_plan_options that run
 * maps with bs_wgmma_options: every golden case, then random specs from first under four
 * tile shapes (the defaults, 64-key tiles, one and two warpgroups per CTA), counts[k] of
 * shape k, N <= max_n. */
void bs_wgmma(da_context *ctx, const char *golden, const char *label, int mma, int first, const int counts[4],
              int64_t max_n, bs_runner run);

/* Run spec on random data and compare with the reference; what names it. */
void bs_check(da_context *ctx, const da_spec *s, int64_t B, int64_t N, uint64_t seed, const char *what,
              bs_runner run, void *user);

/* Input families for bs_check_data. */
typedef enum {
  BS_DATA_UNIFORM, /* q, k, v uniform in [-1, 1) */
  BS_DATA_RAMP     /* scores that rise (even query rows) or fall (odd rows) steadily along the
                      keys, by up to ~0.1 nats a key, more with each kv head: every row's running
                      maximum keeps growing, by more or less than a key tile's worth, or stays at
                      its first key; the online softmax's rescale paths all run */
} bs_data;

/* bs_check on inputs of the given family. */
void bs_check_data(da_context *ctx, const da_spec *s, int64_t B, int64_t N, uint64_t seed, bs_data data,
                   const char *what, bs_runner run, void *user);

/* BS_DATA_RAMP on four specs (one and two branches, causal and not, fp16 and bf16, head_dim
 * 64 and 128, N = 700): running maxima that grow tile after tile by less or more than a
 * rescale's slack, and rows of one warp that disagree. (Not float32: scores of ~100 nats
 * carry ~1e-5 of rounding into the output, past float32's tolerance, on any kernel that
 * sums the dot products in float32.) */
void bs_ramp(da_context *ctx, bs_runner run, void *user);

/* The warp-specialized kernel (cuda_mma 4) on tiles that leave consumer warpgroups
 * without a query row (residue classes of 64 and 128 rows in 192- and 128-row tiles, more
 * key tiles than stages, a ragged tail window; both dtypes, head_dim 64 and 128, causal and
 * not): where the planner
 * lets those leave (p.ws_skip_idle), the turns and the stages' releases go round the rest.
 * run applies bs_ws_options to its user, a da_plan_options. */
void bs_idle_wgs(da_context *ctx, bs_runner run, const char *label, int mma);

/* Segments are independent: an Inf in V at the first position of a segment (a key no
 * query before it attends) leaves every earlier query's out and lse bit for bit as a 0
 * there does (key tiles past a class's end must not bring the next segment's rows into
 * the P V: 0 x Inf = NaN). One branch of 192 (not a multiple of the key tile) and LongNet
 * 2-branch (128, 256; r = 1, 2), not causal, fp16 and bf16, D = 64 and 128; user is run's. */
void bs_segment_isolation(da_context *ctx, bs_runner run, void *user, const char *label);

/* NaN in, NaN out, as the float64 reference (and SDPA, FlashAttention) give it: a NaN in
 * one query row's q and in one key's k. Every row the reference makes NaN (that query's,
 * and each row that attends that key) must be NaN in lse and in every element of out;
 * every other row matches the reference. (The kernels' maxima drop a NaN score: a row
 * whose every score was NaN, or whose l was, used to finish as "attended nothing", out 0
 * and lse -inf, hiding a divergence.) LongNet 2-branch (128, 256; r 1, 2) causal and not,
 * one branch of 192, fp16 and bf16, D = 64 and 128; with f32 also a float32 spec (the
 * SIMT and host paths). user is run's. */
void bs_nan_inputs(da_context *ctx, bs_runner run, void *user, const char *label, int f32);

/* Scores far from the usual range, finite inputs all, against the float64 reference:
 * -inf scores at every 64th key (k -inf against q's 1: the float32 SIMT path made NaN a
 * row whose first key was one; a row of -inf scores only is out 0, lse -inf), and, on one
 * branch, one key of every 64 far above the rest (q 0.9, k 0.1 and 0.9) at scale 1e6 (5e7
 * nats), and with huge 1e8 and 1e20 too, past the tensor-core kernels' range (README
 * "Numerical range"). lse within float32's rounding of the large values. The specs of
 * bs_nan_inputs; user is run's. */
void bs_extreme_scores(da_context *ctx, bs_runner run, void *user, const char *label, int f32, int huge);

#endif
