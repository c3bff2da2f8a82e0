{# kernel.cu.tpl - CUDA target: the plan laid out as one module. Same control structure
   as host/kernel.c.tpl (strategies fused / split / single, per-branch attend with the
   layout predicate, skip / full / partial tiles); the warp-level work goes through
   cuda/da_device.cuh. Kernels in the module:
     <name>_fused                    (strategy fused)   one launch
     <name>_branch(branch)           (split, single)    one launch per branch
     <name>_clear                    (split, single)    positions no branch covers (clear_rows)
   A split plan's branch launches merge each row's partial (out, lse) into an fp32
   workspace; a row's last covering launch writes out and lse (control.inc.tpl
   da_split_side), so no pass sets the workspace up or copies it out. #}
{{ banner }}
{{ include("cuda/da_device.cuh") }}

/* ---- constants of this spec ---------------------------------------------------- */
#define HD {{ p.D }}
#define NUM_HEADS {{ p.H }}
#define HEADS_PER_KV {{ p.group }}
#define TQ {{ p.tile_q }}         /* queries per CTA tile */
#define TK {{ p.tile_k }}         /* keys per tile */
#define NTHREADS {{ p.threads }}
#define DA_PRODUCERS {{ p.wg_ws and 128 or 0 }} /* warp-specialized: warpgroup 0 loads K and V, the rest compute */
#define NCT (NTHREADS - DA_PRODUCERS)         /* the threads that compute */
#define CAUSAL {{ p.causal }}
#define BLOCK {{ p.block }}
#define SCALE_LOG2 ((float)({{ f64(p.scale) }} * 1.4426950408889634)) /* scale * log2(e): softmax in base 2 */
#define OUT_DIVISOR {{ p.out_divisor }}.0f
#define LN2 0.69314718055994531f
{{ dtype_c }}
{% if p.strategy == "fused" then %}
#define WIN_G {{ p.window_g }}
#define LCM_R {{ p.lcm_r }}
#define TILES_PER_WINDOW {{ p.tiles_per_window }}
__constant__ int RES_TILE_START[{{ p.lcm_r + 1 }}] = { {{ join(p.residue_tile_start) }} };
{% end %}
__constant__ da_i64 BR_TILES_PER_SEG[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.tiles_per_segment) end) }} };
{% if p.strategy ~= "fused" then %}
/* a branch launch's heads: [BR_HEAD0(br), BR_HEAD0(br) + BR_HEADS(br)), the grid's y: the
 * branch's group in grouped mode (planner.lua), else every head, by constants (a division
 * by a head count read from memory spilled 160 bytes in a warp-specialized kernel) */
{% if p.branch_heads_all then %}
#define BR_HEAD0(br) 0
#define BR_HEADS(br) NUM_HEADS
{% else %}
__constant__ int BR_HEAD0_[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.head0) end) }} };
__constant__ int BR_HEADS_[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.nheads) end) }} };
#define BR_HEAD0(br) BR_HEAD0_[br]
#define BR_HEADS(br) BR_HEADS_[br]
{% end %}
{% end %}
{% if p.tma then %}
/* wgmma-ws-tma: branch br's first class among the kernel's tensor maps (planner.lua
 * b.tmap0; class x's three maps at 3 * (BR_TMAP0 + x)): every branch's in the fused
 * kernel, the launched branch's alone in a branch kernel */
{% if p.strategy == "fused" then %}
__constant__ int BR_TMAP0_[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.tmap0) end) }} };
#define BR_TMAP0(br) BR_TMAP0_[br]
{% else %}
#define BR_TMAP0(br) 0
{% end %}
{% end %}
{% if p.lpt then %}
/* causal, a fused grid whose heads' tiles differ, or two tiles a CTA: blocks longest first
 * within groups of units (planner.lua plan_lpt) */
__constant__ da_i64 BR_LPT_GROUP[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.lpt_group) end) }} };
{% if p.lpt_order then %}
__constant__ {{ p.tiles_per_window < 65536 and "unsigned short" or "int" }} LPT_TILE[{{ p.tiles_per_window }}] = { {{ join(p.lpt_order) }} }; /* a window's tile of each depth */
{% end %}
{% if p.lpt_order_h then %}
/* without a causal mask: each head's order of a window's tiles, heaviest first (plan_lpt_heads) */
__constant__ unsigned short LPT_TILE_H[{{ p.H }}][{{ p.tiles_per_window }}] = { {{ join(p.lpt_order_h, function(o) return "{" .. join(o) .. "}" end) }} };
{% end %}
{% end %}

/* Must match da__cuda_args in runtime/cuda_args.h. */
struct da_cuda_args {
  const void *q, *k, *v;
  void *out;
  float *lse;
  da_i64 batch, seq_len;
  da_i64 q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  const unsigned char *const *masks; /* device array of per-branch device masks */
  float *ws;                         /* split: partial out [B][H][ws_len][HD], then lse [B][H][ws_len] */
  unsigned *ctr; /* run_tiles kernels: this launch's tile counter (a persistent grid, da_cta_block), or NULL */
  int branch;                        /* branch launches */
  int vec16; /* q, k, v 16-byte aligned, strides multiples of 8: cp.async; else plain loads */
  int out16; /* out likewise: 16-byte stores of out (tensor-core paths); else 2-byte stores */
  int tma;   /* wgmma-ws-tma: the tensor maps after the arguments are set (produce_tma); else cp.async */
  int tpc;   /* run_tiles kernels (WS_TILES): this launch's tiles a CTA, 1 .. WS_TILES */
  /* branch launches run over the tokens [tok0, tok0 + ws_len) (a whole number of every
   * branch's segments): the workspace holds ws_len rows a (batch, head) */
  da_i64 tok0, ws_len;
};

/* The attention kernels' parameter: the arguments, then under wgmma-ws-tma the tensor maps
 * (runtime/cuda_args.h da__cuda_kargs; runtime/cuda_backend.c encodes them), taken as a
 * __grid_constant__ so the TMA reads them where they are. Emulated kernels
 * (tests/emu) take it by reference. */
#ifdef DA_EMULATE
#define DA_PARAM_REF &
#else
#define DA_PARAM_REF
#endif
{% if p.tma then %}
#define DA_TMA 1
struct __align__(128) da_tmap { /* a CUtensorMap (cuda.h aligns it to 128 bytes since CUDA 13) */
  da_u64 w[16];
};
struct da_cuda_kargs {
  da_cuda_args a;
  da_tmap m[{{ p.tma_maps }}];
};
#define DA_KPARAM const __grid_constant__ da_cuda_kargs DA_PARAM_REF K
/* The arguments by value, as the other kernels take them, and the maps' address (in the
 * parameter space) handed to the producer through shared memory, written before the CTA
 * barrier that precedes the roles' split: the arguments read through the parameter's
 * address (a reference to K.a) were LDC loads into vector registers, where the by-value
 * ones are ULDC into uniform ones: ~10 of a consumer's 64-bit compares a key tile moved
 * off the uniform datapath (653 instructions on the full-tile path, 643 this way). */
__shared__ const da_tmap *da_maps_s;
#define DA_KARGS                 \
  const da_cuda_args A = K.a;    \
  if (threadIdx.x == 0) da_maps_s = K.m;
__device__ __forceinline__ const da_tmap *da_tmaps() { return da_maps_s; }
{% else %}
#define DA_TMA 0
#define DA_KPARAM const da_cuda_args DA_PARAM_REF A
#define DA_KARGS
{% end %}

/* A position's row of lse, [B][H][N] (the split workspace's: da_ws_row). */
__device__ __forceinline__ da_i64 da_bhn_row(const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 pos) {
  return (b * NUM_HEADS + h) * A.seq_len + pos;
}
/* The split workspace: each row's partial out (HD floats, 8-byte aligned rows: float2
 * accesses), then every row's lse; rows [B][H][ws_len] of the launch's tokens (da_ws_row). */
__device__ __forceinline__ da_i64 da_ws_row(const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 pos) {
  return (b * NUM_HEADS + h) * A.ws_len + (pos - A.tok0);
}
__device__ __forceinline__ float *da_ws_out(const da_cuda_args &A, da_i64 row) { return A.ws + row * HD; }
__device__ __forceinline__ float *da_ws_lse(const da_cuda_args &A, da_i64 row) {
  return A.ws + A.batch * NUM_HEADS * A.ws_len * HD + row;
}
/* (the emulator: a row the epilogue reads or writes lies inside the workspace) */
#define DA_CHECK_WS_ROW(row_ws, row_lse) (DA_CHECK_GLOBAL(row_ws, HD * 4, 1), DA_CHECK_GLOBAL(row_lse, 4, 1))
/* (and a row the epilogue reads, its CTA prefetched: tile_prefetch_ws) */
#define DA_CHECK_WS_READ(row_ws, row_lse) \
  (DA_CHECK_WS_ROW(row_ws, row_lse), DA_CHECK_PREFETCHED(row_ws, HD * 4), DA_CHECK_PREFETCHED(row_lse, 4))

/* The query tile of one CTA. */
struct da_qtile {
  int nq;              /* valid rows */
  da_i64 pos0, pstep;  /* row j is position pos0 + j * pstep */
};
/* Dilated indices (query a, key c) fit in {{ p.idx_bits }} bits for every branch. */
typedef {{ p.idx_bits == 32 and "int" or "da_i64" }} da_idx;

#define DA_FN __device__ __forceinline__
#define DA_CONST __constant__
#define DA_ARGS da_cuda_args
#define DA_MASKS(A) ((A)->masks)
#define DA_ABS(x) abs(x)
#define DA_UMULHI64(a, b) __umul64hi((a), (b))
#define DA_UMULHI32(a, b) __umulhi((a), (b))
{{ include_rendered("common/control.inc.tpl") }}
/* dividers: q(x) = x / d for 0 <= x < 2^62, by a constant the compiler divides by itself,
 * or by a table's da_fdiv (control.inc.tpl da_fq) where d depends on the launch's branch */
template <long long C> struct da_cdiv {
  __device__ __forceinline__ da_i64 q(da_i64 x) const { return x / C; }
};
struct da_tdiv {
  da_fdiv f;
  __device__ __forceinline__ da_i64 q(da_i64 x) const { return da_fq(x, f); }
};
{% if p.strategy ~= "fused" then %}
/* a branch launch's divisors (its grid decode; nh and tiles of a branch no head uses: 1) */
__constant__ da_fdiv BR_TPS_DIV[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(math.max(1, b.tiles_per_segment)) end) }} };
{% if p.branch_heads_all then %}
#define BR_HEADS_DIVIDER(br) da_cdiv<NUM_HEADS>()
{% else %}
__constant__ da_fdiv BR_HEADS_DIV_[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(math.max(1, b.nheads)) end) }} };
#define BR_HEADS_DIVIDER(br) da_tdiv{BR_HEADS_DIV_[br]}
{% end %}
{% if p.lpt then %}
__constant__ da_fdiv BR_LPT_GROUP_DIV[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(b.lpt_group) end) }} };
__constant__ da_fdiv BR_LPT_SPAN_DIV[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(b.lpt_group * math.max(1, b.tiles_per_segment)) end) }} }; /* group x tiles */
{% end %}
{% end %}
{% if p.strategy == "split" then %}

/* A split launch (branch slot k) merges into the workspace row of each of its positions
 * an earlier launch covers (da_split_side bit 0) at the tile's end, after the key loop.
 * The launch before wrote those rows long before, so they are in HBM, and the epilogue's
 * loads would wait on it with the tensor cores idle (once per row of the thread, before
 * tile_end loaded them in batches).
 * At the tile's start each row's `parts` threads request its 128-byte lines (the
 * thread `part` of them: lines part, part + parts, ...; the last, the lse) into L2. */
__device__ __forceinline__ void da_prefetch_ws_row(const da_cuda_args &A, da_i64 b, da_i64 h, int k, da_i64 pos,
                                                   int part, int parts) {
  if (!(da_split_side((int)h, k, pos) & 1)) return;
  const da_i64 wsrow = da_ws_row(A, b, h, pos);
  const char *row = (const char *)da_ws_out(A, wsrow);
  const int skew = (int)((da_u64)row & 127u); /* a caller's workspace need not be line-aligned */
  for (int l = part; l < (skew + HD * 4 + 127) / 128; l += parts) da_prefetch_l2(l ? row + (128 * l - skew) : row);
  if (part == parts - 1) da_prefetch_l2(da_ws_lse(A, wsrow));
}
{% end %}

/* The threads a CTA-wide step (classify's reductions) runs over: the whole CTA, or under
 * warp specialization the producer warpgroup and each consumer warpgroup on its own (their
 * reductions on named barriers 4, and 5 + the consumer warpgroup; the computing threads'
 * barrier is 1). The consumer warpgroups each classify for all the CTA's rows, as the
 * producer does, so every role walks the same tiles; sharing one reduction, the two met at
 * every tile's and lost the overlap of their turns. */
/* PROD: the caller is the producer (known where it is called: a runtime test here cost the
 * consumers' registers, and spills, under sparse layouts) */
template <bool PROD> __device__ __forceinline__ int da_role_tid() {
  return PROD ? (int)threadIdx.x : DA_PRODUCERS ? ((int)threadIdx.x - DA_PRODUCERS) & 127 : (int)threadIdx.x;
}
template <bool PROD> __device__ __forceinline__ int da_role_threads() {
  return PROD ? DA_PRODUCERS : DA_PRODUCERS ? 128 : NTHREADS;
}
/* or (and_ 0) / and (and_ 1) of p over the role's threads */
#if DA_PRODUCERS
template <bool PROD> __device__ __forceinline__ int da_role_red(int p, int and_) {
  return PROD ? da_bar_red(4, DA_PRODUCERS, p, and_)
              : (int)threadIdx.x - DA_PRODUCERS < 128 ? da_bar_red(5, 128, p, and_) : da_bar_red(6, 128, p, and_);
}
#define DA_SYNC_COMPUTE() da_named_sync(1, NTHREADS - DA_PRODUCERS) /* the computing threads only */
#else
template <bool PROD> __device__ __forceinline__ int da_role_red(int p, int and_) {
  return and_ ? __syncthreads_and(p) : __syncthreads_or(p);
}
#define DA_SYNC_COMPUTE() __syncthreads()
#endif

/* Tile class of keys [c0, c0 + TK) for queries with dilated indices a_first..a_last:
 * 0 skip (no pair allowed), 1 full (no mask needed), 2 partial. Uniform over the role
 * (the CTA, or under warp specialization the producer or each consumer warpgroup). */
template <bool PROD = false>
{% if p.wg_ws and p.sparse then %}
/* not inlined: inlined into the warp-specialized consumers, a sparse layout's pair loop
   made them spill (dense, inlined, it is a few compares) */
__device__ __noinline__ int classify(
{% else %}
__device__ int classify(
{% end %}int br, const da_cuda_args &A, da_i64 c0, da_i64 kend, da_i64 a_first, da_i64 a_last) {
  bool full = (!CAUSAL || c0 + TK - 1 <= a_first) && c0 + TK <= kend;
{% if p.sparse then %}
  da_i64 qb0 = a_first / BLOCK, qb1 = a_last / BLOCK;
  da_i64 kb0 = c0 / BLOCK, kb1 = (min(c0 + TK, kend) - 1) / BLOCK;
  da_i64 pairs = (qb1 - qb0 + 1) * (kb1 - kb0 + 1);
  if (pairs <= (da_i64)TQ * TK) { /* 32-bit from here: a 64-bit division per pair is a call */
    int any = 0, all = 1;
    const int np = (int)pairs, nkc = (int)(kb1 - kb0 + 1);
    for (int i = da_role_tid<PROD>(); i < np; i += da_role_threads<PROD>()) {
      bool ok = da_allowed(br, &A, (da_idx)(qb0 + i / nkc), (da_idx)(kb0 + i % nkc));
      any |= ok;
      all &= ok;
    }
    any = da_role_red<PROD>(any, 0);
    all = da_role_red<PROD>(all, 1);
    if (!any) return 0;
    full = full && all;
  } else {
    full = false;
  }
{% end %}
  return full ? 1 : 2;
}

{% if p.cuda_path ~= "simt" then %}
{% if p.wgmma then %}
/* ========= tensor-core path, wgmma (sm_90a): a warpgroup (4 warps) per 64 query rows =========
 * TQ = 64 or 128 rows: one or two warpgroups share the K and V tiles. Q, K and V tiles sit in shared memory in the 128-byte-swizzle layout wgmma reads through
 * descriptors (da_device.cuh "wgmma"); S = Q K^T is one chain of wgmma.mma_async (both
 * operands in shared memory), O += P V another (P from registers). Each warp owns 16 query
 * rows of both accumulators, in the mma C-fragment layout, so the masking and the online
 * softmax below are the mma.sync path's, with MT = 1. */
{{ include_rendered("cuda/wgmma.inc.tpl") }}
#define DA_CHUNK(rows, r, c) (da_sw128_off((rows), (r), (c)) >> 1) /* halves */
#define ROWH HD /* halves per tile row (a stage of TK rows is TK * ROWH halves) */
#define DA_BAR_OUT 9 /* named barriers 9, 10: a warpgroup's own, before its rows of out replace its Q rows */

/* The descriptors of k16 step kk: of the Q tile (the warpgroup's 64 rows at qa, K-major,
 * head dims 16kk..16kk+15), of a K tile at ka (K-major, same dims) and of a V tile at va
 * (MN-major, keys 16kk..16kk+15). The wgmma probe (tests/wgmma_probe.c) maps what the
 * hardware reads through exactly these. */
__device__ __forceinline__ da_u64 da_wg_desc_q(da_u32 qa, int kk) {
  return da_wgmma_desc_add(da_wgmma_desc(qa, 16, 1024), (kk >> 2) * TQ * 128 + (kk & 3) * 32);
}
__device__ __forceinline__ da_u64 da_wg_desc_k(da_u32 ka, int kk) {
  return da_wgmma_desc_add(da_wgmma_desc(ka, 16, 1024), (kk >> 2) * TK * 128 + (kk & 3) * 32);
}
__device__ __forceinline__ da_u64 da_wg_desc_v(da_u32 va, int kk) {
  return da_wgmma_desc_add(da_wgmma_desc(va, TK * 128, 1024), kk * 2048);
}

/* s (this thread's TK / 2 accumulators of S, 64 x TK) = Q K^T: one chain of HD / 16
 * wgmma over the tiles at shared addresses qa (TQ rows) and ka (TK rows), K-major; the
 * first step ignores s's old values (scale-d 0), so s needs no zeroing. Waits for the
 * result. */
__device__ __forceinline__ void da_wg_qk_issue(float *s, da_u32 qa, da_u32 ka) { /* without the wait */
  da_wgmma_fence_operand<TK / 2>(s);
  da_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) {
    if (kk == 0) da_wg_scores_first(s, da_wg_desc_q(qa, kk), da_wg_desc_k(ka, kk));
    else da_wg_scores(s, da_wg_desc_q(qa, kk), da_wg_desc_k(ka, kk));
  }
  da_wgmma_commit();
}
__device__ __forceinline__ void da_wg_qk(float *s, da_u32 qa, da_u32 ka) {
  da_wg_qk_issue(s, qa, ka);
  da_wgmma_wait<0>();
  da_wgmma_fence_operand<TK / 2>(s);
}

/* o (this thread's HD / 2 accumulators of O, 64 x HD) += P V: one chain of TK / 16 wgmma,
 * P from registers (pa[kk]: the A fragment of keys 16kk..16kk+15), V (TK rows at shared
 * address va) read MN-major. Waits for the result. */
__device__ __forceinline__ void da_wg_pv_issue(float *o, const da_u32 (*pa)[4], da_u32 va) { /* without the wait */
  da_wgmma_fence_operand<HD / 2>(o);
  da_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < TK / 16; kk++) da_wg_pv(o, pa[kk], da_wg_desc_v(va, kk));
  da_wgmma_commit();
}
__device__ __forceinline__ void da_wg_pv_tile(float *o, const da_u32 (*pa)[4], da_u32 va) {
  da_wg_pv_issue(o, pa, va);
  da_wgmma_wait<0>();
  da_wgmma_fence_operand<HD / 2>(o);
}

{% else %}
/* ======================= tensor-core path (mma.sync m16n8k16) ======================= */
#define DP {{ p.smem_row }}  /* padded smem row, halves */
#define DA_CHUNK(rows, r, c) ((r) * DP + (c) * 8)
#define ROWH DP
{% end %}
#define BLK_COLS (TK / BLOCK + 2) /* key blocks a TK-key tile can touch */
#define NT_S (TK / 8)        /* n8 tiles of the score block */
#define NT_O (HD / 8)        /* n8 tiles of the output block */
#define KS_D (HD / 16)       /* k16 steps over head_dim */
#define MT {{ p.warp_mtiles }}  /* m16 tiles per warp: each K / V fragment feeds MT mma */
#define STAGES {{ p.stages }}  /* K / V tiles in shared memory (cp.async pipeline depth) */
#define WROWS (16 * MT)      /* query rows per warp; TQ = NTHREADS / 32 * WROWS */

struct da_state {        /* per thread: rows g, g + 8 of each of its warp's MT m16 tiles */
  float o[MT][NT_O][4];
  float m[MT][2], l[MT][2];
{% if p.wgmma then %}
  da_u32 q_addr; /* shared address of the Q tile (wgmma reads it through descriptors) */
{% elseif p.q_smem then %}
  const da_u16 *qs; /* this lane's ldmatrix row of the Q tile: fragments are read per key tile */
{% else %}
  da_u32 qf[MT][KS_D][4];
{% end %}
};

/* This thread's index among the computing threads (threadIdx.x but for warp
 * specialization, where the producer warpgroup comes first). */
__device__ __forceinline__ int da_ct() { return (int)threadIdx.x - DA_PRODUCERS; }

/* Whether threads tid of NTHR copy a tile's rows stepped (below): where the planner allows
 * (p.stepped_copies) and a step is a whole number of 8-row groups (keeps a row's swizzle,
 * wgmma). */
template <int NTHR> __device__ __forceinline__ constexpr bool da_stepped() {
  return {{ p.stepped_copies and "true" or "false" }} && NTHR % (HD / 8) == 0 && (NTHR / (HD / 8)) % 8 == 0;
}
/* A stepped copy's per-thread part of the source offset (first row tid / chunks, chunk
 * tid % chunks; 0 where copies are not stepped). Callers that copy tile after tile fold it
 * into their base offset once (da_keys): recomputed for each tile it was ~20 of a key tile's
 * instructions per tensor. */
template <int NTHR> __device__ __forceinline__ da_i64 da_copy_thr(int tid, da_i64 step) {
  return da_stepped<NTHR>() ? (da_i64)(tid / (HD / 8)) * step + (tid % (HD / 8)) * 8 : 0;
}

/* Copy rows of a [ROWS][HD] tile into smem (chunk layout DA_CHUNK); row i is at element
 * offset off_thr - thr + i * step of base, where thr = da_copy_thr<NTHR>(tid, step) is the
 * part the caller folded into off_thr (load_rows below folds it); rows >= nrows are
 * zero-filled. With vec16 (the caller's tensors allow
 * 16-byte accesses) through cp.async; otherwise with plain 2-byte loads, which land before
 * the barrier that follows the cp.async wait, so the pipeline is the same. Threads tid of
 * NTHR share the copy. Stepped (da_stepped), each thread copies one chunk column, source and
 * destination stepped by constants: a copy is then ~9.5 instructions, 3 of them the `@!PT
 * LDS` ptxas puts before every LDGSTS (the general loop took ~32, a fifth of a wgmma tile's
 * issue slots). Unrolled by 2 (14 a copy rolled; unrolled whole, ptxas computed every copy's
 * 64-bit address up front: +5 to +18 registers). */
template <int ROWS, int NTHR>
__device__ __forceinline__ void load_rows_thr(da_u16 *smem, const void *base, int nrows, bool vec16, da_i64 off_thr,
                                              da_i64 step, int tid) {
  constexpr int chunks = HD / 8, total = ROWS * chunks;
  if (da_stepped<NTHR>() && vec16) {
    constexpr int rstep = NTHR / chunks;
    const int r0 = tid / chunks;
    const da_u16 *src = (const da_u16 *)base + off_thr;
    const da_i64 jump = (da_i64)rstep * step;
    da_u16 *dst = smem + DA_CHUNK(ROWS, r0, tid % chunks);
    /* ROWS need not be a multiple of rstep (16-key tiles at D = 32: 32 rows a step), nor
     * above it: then the thread's last row may lie past the tile */
#pragma unroll 2
    for (int i = 0; i < (ROWS + rstep - 1) / rstep; i++, src += jump, dst += DA_CHUNK(ROWS, rstep, 0))
      if (ROWS % rstep == 0 || r0 + i * rstep < ROWS) da_cp_async16(dst, src, r0 + i * rstep < nrows);
  } else { /* not unrolled: the fallback for tensors without 16-byte alignment and odd shapes
              (unrolled, ptxas took a third longer over a wgmma kernel) */
    const da_i64 off0 = off_thr - da_copy_thr<NTHR>(tid, step);
#pragma unroll 1
    for (int i = tid; i < total; i += NTHR) { /* (base + off0 held across the loop: 17 more registers) */
      const int r = i / chunks, c = i % chunks;
      const bool ok = r < nrows;
      const da_u16 *src = (const da_u16 *)base + (ok ? off0 + (da_i64)r * step + c * 8 : 0);
      if (vec16) da_cp_async16(smem + DA_CHUNK(ROWS, r, c), src, ok);
      else da_copy16_sync(smem + DA_CHUNK(ROWS, r, c), src, ok);
    }
  }
}
/* The same with row i at element offset off0 + i * step. */
template <int ROWS, int NTHR>
__device__ __forceinline__ void load_rows(da_u16 *smem, const void *base, int nrows, bool vec16, da_i64 off0, da_i64 step,
                                          int tid) {
  load_rows_thr<ROWS, NTHR>(smem, base, nrows, vec16, off0 + da_copy_thr<NTHR>(tid, step), step, tid);
}

{% if p.sparse then %}
#define DA_SPARSE_ARGS_DECL , const unsigned char *blk_ok, da_idx kb_first, int nkb
#define DA_SPARSE_ARGS , blk_ok, kb_first, nkb
/* Partial tile: the layout's verdict per (query row, key block), computed once by the
 * computing threads into shared memory (blk_ok), so the unrolled element loop only looks
 * it up. Uniform over them (a barrier inside for cls == 2). Warp-specialized, each consumer
 * warpgroup computes its own 64 rows' verdicts (barrier 7 + warpgroup): both on all rows
 * met at a barrier every partial tile. */
__device__ __forceinline__ void tile_blocks(unsigned char *blk_ok, int br, const da_cuda_args &A, da_i64 c0, da_i64 kend,
                                            da_i64 a0, da_i64 astride, int nq, int cls, da_idx *kb_first, int *nkb) {
  *kb_first = (da_idx)(c0 / BLOCK);
  *nkb = (int)((min(c0 + TK, kend) - 1) / BLOCK - *kb_first + 1);
  if (cls == 2) {
{% if p.wg_ws then %}
    const int wg = da_ct() >> 7, n = 128, row0 = wg * 64, rows = 64;
    for (int i = da_ct() & 127; i < rows * *nkb; i += n) {
      int row = row0 + i / *nkb, kbi = i % *nkb;
{% else %}
    for (int i = da_ct(); i < TQ * *nkb; i += NCT) {
      int row = i / *nkb, kbi = i % *nkb;
{% end %}
      da_idx a = (da_idx)a0 + (da_idx)row * (da_idx)astride;
      blk_ok[row * BLK_COLS + kbi] = row < nq && da_allowed(br, &A, a / BLOCK, *kb_first + kbi);
    }
{% if p.wg_ws then %}
    da_named_sync(7 + wg, 128);
{% else %}
    DA_SYNC_COMPUTE();
{% end %}
  }
}
{% else %}
#define DA_SPARSE_ARGS_DECL
#define DA_SPARSE_ARGS
{% end %}

/* The warp's own verdict on key tile c0 (the CTA's is cls): its rows may all lie past nq
 * or (causal) before every key of it, and need no mask where the CTA's rows as a whole
 * do; a query tile of the fused strategy spans TQ * LCM_R positions, so this skips most of
 * the causal work its rows do not need. Warp-uniform: no barrier inside. */
__device__ __forceinline__ int warp_tile_class(int cls, int warp, int lane, da_i64 c0, da_i64 kend, da_i64 a0,
                                               da_i64 astride, int nq DA_SPARSE_ARGS_DECL) {
  const int wr0 = warp * WROWS, wr1 = min(wr0 + WROWS - 1, nq - 1);
  int wcls = wr0 < nq ? cls : 0;
  (void)lane, (void)kend;
  if (wcls == 2) {
    const da_i64 wa0 = a0 + (da_i64)wr0 * astride, wa1 = a0 + (da_i64)wr1 * astride;
    (void)wa0; /* unused where the layout is sparse (blk_ok decides those tiles) */
    if (CAUSAL && c0 > wa1) wcls = 0;
{% if not p.sparse then %}
    else if ((!CAUSAL || c0 + TK - 1 <= wa0) && c0 + TK <= kend && wr1 == wr0 + WROWS - 1) wcls = 1;
{% end %}
  }
{% if p.sparse then %}
  if (wcls == 2) { /* the layout allows none of the warp's (row, key block) pairs */
    int any = 0;
    for (int i = lane; i < WROWS * nkb; i += 32) any |= blk_ok[(wr0 + i / nkb) * BLK_COLS + i % nkb];
    if (!__any_sync(0xffffffffu, any)) wcls = 0;
  }
{% end %}
  return wcls;
}

/* The output's rows times corr (the online softmax's rescale). */
__device__ __forceinline__ void softmax_rescale_o(da_state &S, const float (&corr)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int dt = 0; dt < NT_O; dt++) {
      S.o[mt][dt][0] *= corr[mt][0];
      S.o[mt][dt][1] *= corr[mt][0];
      S.o[mt][dt][2] *= corr[mt][1];
      S.o[mt][dt][3] *= corr[mt][1];
    }
}

/* Scores of a partial key tile that no pair may see (past nq or kend, causal, the layout's
 * verdict) become -inf. */
__device__ __forceinline__ void mask_partial(float (&s)[MT][NT_S][4], int wr0, int lane, da_i64 c0, da_i64 kend, da_i64 a0,
                                              da_i64 astride, int nq DA_SPARSE_ARGS_DECL) {
{% if not p.sparse then %}
  /* Without a layout a row sees the keys c0 + col with col <= lim (c < kend and, causal,
   * c <= a; none past nq): one limit per fragment row, clamped to the tile, so each score
   * is a compare with a constant, not two 64-bit compares (the causal warp-specialized key
   * loop: 736 -> 669 SASS instructions; 1.00x to 1.03x on an H200, within noise). */
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      const int row = wr0 + mt * 16 + da_frag_c_row(lane, 2 * hf);
      da_i64 last = kend - 1;
      if (CAUSAL) last = min(last, a0 + (da_i64)row * astride);
      const int lim = row < nq ? (int)max(min(last - c0, (da_i64)TK), (da_i64)-1) : -1;
      const int rel = lim - da_frag_c_col(lane, 0); /* col = nt * 8 + e + da_frag_c_col(lane, 0) */
#pragma unroll
      for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++)
          if (nt * 8 + e > rel) s[mt][nt][2 * hf + e] = -INFINITY;
    }
{% else %}
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        int row = wr0 + mt * 16 + da_frag_c_row(lane, j);
        da_idx c = (da_idx)c0 + nt * 8 + da_frag_c_col(lane, j), a = (da_idx)a0 + (da_idx)row * (da_idx)astride;
        bool ok = row < nq && c < (da_idx)kend && (!CAUSAL || c <= a) && blk_ok[row * BLK_COLS + (c / BLOCK - kb_first)];
        if (!ok) s[mt][nt][j] = -INFINITY;
      }
{% end %}
}

/* A row keeps its running maximum until a key tile raises it by more than this (base-2
 * units), so P = exp2(s - m) stays below 2^DA_MAX_SLACK (fp16 / bf16 hold that exactly as
 * well as any other value). Where no row of a warp grows that much, the tile skips the
 * rescale of the output and the sums (FlashAttention-4's conditional rescaling): O, l and m
 * stay consistent, so the softmax is the same one; only the rounding moves. */
#define DA_MAX_SLACK 8.0f
static_assert(DA_MAX_SLACK < 16.0f, "P = exp2(s - m) must stay below fp16's largest value (65504)");

/* t[0] = the maximum of t[0 .. N-1], as a balanced tree (any N; t is clobbered) */
template <int N> struct da_tree_max {
  static __device__ __forceinline__ void run(float *t) {
    constexpr int H = (N + 1) / 2;
#pragma unroll
    for (int i = 0; i < N / 2; i++) t[i] = fmaxf(t[i], t[i + H]);
    da_tree_max<H>::run(t);
  }
};
template <> struct da_tree_max<1> {
  static __device__ __forceinline__ void run(float *) {}
};

/* Mask (wcls 2: partial tile) and the first half of the online softmax (base 2) of one key
 * tile's scores s for this warp's rows: the new row maxima, S's max and sum rescaled to
 * them, the output too; m_use gets what softmax_exp subtracts. wcls 0 (none of the warp's
 * rows sees a key of the tile) comes here only from the wgmma loops, whose mma take the
 * warp's rows along: the partial-tile mask masks every score (warp_tile_class's reasons are
 * its own), so P = 0 on the path every tile takes (P = 0 as a select, or on a branch of its
 * own, made ptxas zero every P register on every tile: 16 to 45 instructions). Where no
 * row's maximum grew by more than DA_MAX_SLACK nothing changes (m_use is the kept
 * maximum). With corr_out the output is left alone (a wgmma may still accumulate into it)
 * and its rescale goes there: apply it (softmax_rescale_o) where this returns true.
 * Warp-uniform. */
__device__ __forceinline__ bool softmax_max(da_state &S, float (&s)[MT][NT_S][4], int wcls, int wr0, int lane, da_i64 c0,
                                            da_i64 kend, da_i64 a0, da_i64 astride, int nq DA_SPARSE_ARGS_DECL,
                                            float (&m_use)[MT][2], float (*corr_out)[2] = nullptr) {
{% if p.scale <= 0 then %}
  /* scale (not positive: it cannot be folded into the max) */
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++) s[mt][nt][j] *= SCALE_LOG2;
{% end %}
  /* mask partial tiles, on a branch of its own: interleaved with the max, ptxas
   * predicated the mask's compares and selects into every tile (3 instructions per score,
   * a quarter of a wgmma tile's issue slots); the scale (positive) is folded into the max
   * here and into one FFMA before each exp2 in softmax_exp */
  if (wcls != 1) mask_partial(s, wr0, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS);
  float mx[MT][2];
  bool grow = false;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
  for (int hr = 0; hr < 2; hr++) { /* the thread's two rows of each m16 tile */
    /* a balanced tree over the row's scores, not one chain of NT_S dependent FMNMX: the
     * exps wait for this maximum, and the warp has little else to issue meanwhile */
    float t[NT_S];
#pragma unroll
    for (int nt = 0; nt < NT_S; nt++) t[nt] = fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]);
    da_tree_max<NT_S>::run(t);
    /* (rounded: softmax_exp's FFMA takes each key's s x SCALE_LOG2 unrounded, so the
     * maximum's own P is 2^(its rounding), within 2^+-1 up to |m| = 2^24, 2^8 at 2^27,
     * which the slack's 2^8 takes to fp16's Inf: README "Numerical range". Subtracting
     * first, (s - max) x SCALE_LOG2, is a second instruction a score; rounding up moves
     * the failure to P = 0 a binade later, silent where Inf is not) */
    mx[mt][hr] = da_warp_max4(t[0]){% if p.scale > 0 then %} * SCALE_LOG2{% end %};
    /* a difference, not S.m + slack: at |S.m| >= 2^27 the sum rounds by 16, so a tile 16
     * above the kept maximum would keep it and P = 2^16 overflow fp16. Finite - (-inf) =
     * inf: the first key seen grows; -inf - (-inf) = NaN: a row with no key yet keeps. */
    grow |= mx[mt][hr] - S.m[mt][hr] > DA_MAX_SLACK;
  }
  if (!__any_sync(0xffffffffu, grow)) { /* keep every maximum: no rescale */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) m_use[mt][hr] = S.m[mt][hr] == -INFINITY ? 0.f : S.m[mt][hr];
    return false;
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float m_new = fmaxf(S.m[mt][hr], mx[mt][hr]);
    m_use[mt][hr] = m_new == -INFINITY ? 0.f : m_new;
    float corr = da_exp2(S.m[mt][hr] - m_use[mt][hr]);
    S.l[mt][hr] *= corr;
    S.m[mt][hr] = m_new;
    if (corr_out) {
      corr_out[mt][hr] = corr;
      continue;
    }
#pragma unroll
    for (int dt = 0; dt < NT_O; dt++) {
      S.o[mt][dt][2 * hr] *= corr;
      S.o[mt][dt][2 * hr + 1] *= corr;
    }
  }
  return true;
}

/* The second half: s becomes P (unnormalized, base 2) and its row sums join S's (masked
 * scores, -inf, give 0). */
__device__ __forceinline__ void softmax_exp(da_state &S, float (&s)[MT][NT_S][4], const float (&m_use)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT_S; nt++) {
{% if p.scale > 0 then %}
      s[mt][nt][2 * hr] = da_exp2(fmaf(s[mt][nt][2 * hr], SCALE_LOG2, -m_use[mt][hr]));
      s[mt][nt][2 * hr + 1] = da_exp2(fmaf(s[mt][nt][2 * hr + 1], SCALE_LOG2, -m_use[mt][hr]));
{% else %}
      s[mt][nt][2 * hr] = da_exp2(s[mt][nt][2 * hr] - m_use[mt][hr]);
      s[mt][nt][2 * hr + 1] = da_exp2(s[mt][nt][2 * hr + 1] - m_use[mt][hr]);
{% end %}
      sum += s[mt][nt][2 * hr] + s[mt][nt][2 * hr + 1];
    }
    S.l[mt][hr] += sum;
  }
}

/* softmax_exp for the wgmma loops: P goes straight into the RS A fragments pa (packed per
 * k16 step) and s is only read, so in the overlapped loop no instruction writes a wgmma
 * accumulator while the next tile's scores are in flight. */
__device__ __forceinline__ void softmax_exp_pack(da_state &S, const float (&s)[MT][NT_S][4],
                                                 const float (&m_use)[MT][2], da_u32 (*pa)[4]) {
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < NT_S; nt++) {
    float p[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
{% if p.scale > 0 then %}
      p[j] = da_exp2(fmaf(s[0][nt][j], SCALE_LOG2, -m_use[0][j >> 1]));
{% else %}
      p[j] = da_exp2(s[0][nt][j] - m_use[0][j >> 1]);
{% end %}
    sum[0] += p[0] + p[1];
    sum[1] += p[2] + p[3];
    /* n8 tile nt is half of k16 step nt / 2: regs 0, 1 (first half) or 2, 3 (second) */
    pa[nt >> 1][2 * (nt & 1)] = DA_PACK(p[0], p[1]);
    pa[nt >> 1][2 * (nt & 1) + 1] = DA_PACK(p[2], p[3]);
  }
  S.l[0][0] += sum[0], S.l[0][1] += sum[1];
}

/* Both halves: mask and the online softmax of one key tile (see above). */
__device__ __forceinline__ void softmax_tile(da_state &S, float (&s)[MT][NT_S][4], int wcls, int wr0, int lane, da_i64 c0,
                                             da_i64 kend, da_i64 a0, da_i64 astride, int nq DA_SPARSE_ARGS_DECL) {
  float m_use[MT][2];
  softmax_max(S, s, wcls, wr0, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS, m_use);
  softmax_exp(S, s, m_use);
}

/* The key tiles one attend() walks: branch br's offset class at s0 + off, for queries
 * with dilated indices a_first..a_last. CTA-uniform. */
struct da_key_walk {
  int br;
  const da_cuda_args &A;
  da_i64 a_first, a_last, kend, kb, vb, kstep, vstep;
  /* the first tile at or after `from` that is not skipped (the layout's jumps, then
   * classify), or kend and up when none */
  template <bool PROD = false> __device__ __forceinline__ da_i64 next(da_i64 from, int *cls) const {
    da_i64 c = da_next_key_tile(from, a_first, a_last);
    int k = 0;
    while (c < kend && (k = classify<PROD>(br, A, c, kend, a_first, a_last)) == 0)
      c = da_next_key_tile(c + TK, a_first, a_last);
    *cls = k;
    return c;
  }
  /* tile c into stage st of Ks / Vs (zeros past kend), copied by threads tid of NTHR (those
   * da_keys was given); which: 1 K, 2 V, 3 both */
  template <int NTHR = NTHREADS>
  __device__ __forceinline__ void fill(da_u16 *Ks, da_u16 *Vs, da_i64 c, int st, int tid = threadIdx.x, int which = 3) const {
    int nk = (int)min((da_i64)TK, kend - c);
    if (which & 1) load_rows_thr<TK, NTHR>(Ks + st * TK * ROWH, A.k, nk, A.vec16, kb + c * kstep, kstep, tid);
    if (which & 2) load_rows_thr<TK, NTHR>(Vs + st * TK * ROWH, A.v, nk, A.vec16, vb + c * vstep, vstep, tid);
  }
  /* tile c into stage st (nothing past kend), one cp.async group either way */
  __device__ __forceinline__ void load(da_u16 *Ks, da_u16 *Vs, da_i64 c, int st) const {
    if (c < kend) fill(Ks, Vs, c, st);
    da_cp_async_commit();
  }
};

/* The key walk of one attend(), for tiles copied by threads tid of NTHR (fill): their own
 * part of each copy's offset folded into kb and vb (da_copy_thr). */
template <int NTHR = NTHREADS>
__device__ __forceinline__ da_key_walk da_keys(int br, const da_cuda_args &A, da_i64 b, da_i64 hkv, da_i64 s0,
                                               da_i64 off, da_i64 a0, da_i64 astride, int nq, int tid = threadIdx.x) {
  const da_i64 r = BR_R[br], L = da_class_len(br, s0, off, A.seq_len), a_last = a0 + (da_i64)(nq - 1) * astride;
  const da_i64 kstep = r * A.k_stride[1], vstep = r * A.v_stride[1];
  return da_key_walk{br,
                     A,
                     a0,
                     a_last,
                     CAUSAL ? min(L, a_last + 1) : L,
                     b * A.k_stride[0] + (s0 + off) * A.k_stride[1] + hkv * A.k_stride[2] + da_copy_thr<NTHR>(tid, kstep),
                     b * A.v_stride[0] + (s0 + off) * A.v_stride[1] + hkv * A.v_stride[2] + da_copy_thr<NTHR>(tid, vstep),
                     kstep,
                     vstep};
}

{% if p.wg_ws then %}
/* wgmma, warp-specialized (FlashAttention-3's schedule, with cp.async in place of TMA):
 * warpgroup 0 (the producer, DA_PRODUCERS threads, few registers) walks the key tiles and
 * copies each into a ring of STAGES stages; the other NCWG warpgroups (64 query rows each,
 * the registers the producer gave up) compute. K and V of a stage pass from producer to
 * consumers each through a "full" mbarrier (the producer's arrivals, after its copies
 * land) and back each through an "empty" one (every consumer thread's): K as soon as the
 * scores are done, V after the P V, a tile later, so the producer refills K slots early.
 * With two consumer warpgroups, they take turns issuing their wgmma (S = Q K^T of one tile
 * with P V of the tile before), so one's softmax runs while the other's tensor-core work
 * does; the turn passes through named barriers DA_BAR_TURN + warpgroup. No CTA barrier
 * after the start: all three warpgroups walk the same key tiles, each classifying them
 * over its own threads; under a sparse layout each consumer warpgroup computes its own
 * rows' verdicts on a partial tile (blk_ok, two buffers: a warp may start the next tile's
 * while another of its warpgroup still reads this one's, but not the one after, which waits
 * at the warpgroup's barrier in tile_blocks). */
#define NCWG (NCT / 128)  /* consumer warpgroups */
#define DA_BAR_TURN 2     /* named barriers 2 to 1 + NCWG: the consumer warpgroups' turns (1: DA_SYNC_COMPUTE,
                             4 to 6: classify's reductions, 7 and 8: tile_blocks, both sparse only,
                             where NCWG <= 2; 9 to 8 + NCWG: DA_BAR_OUT) */
#define DA_WS_ARGS , P, bars
struct da_pipe { /* the next tile's stage and the parity of that stage's current use */
  int st;
  da_u32 ph;
  int nv; /* consumers, sparse layouts: partial tiles so far (blk_bufs[nv & 1] is the next one's);
             kept across attend() calls, so a new branch does not start on the buffer the last
             partial tile of the one before may still be read from */
};
__device__ __forceinline__ void da_pipe_next(da_pipe &P) {
  if (++P.st == STAGES) P.st = 0, P.ph ^= 1;
}
/* The consumer warpgroups a tile of nq query rows keeps. Where the planner expects many
 * tiles with a warpgroup none of whose rows is a query (p.ws_skip_idle: the last tile of
 * each residue class or segment; 1024 rows in 192-row tiles leave two of three idle), those
 * help load Q, then leave (run_tile), so the rest have the tensor cores to themselves: the
 * turns go round the kept ones and the empty barriers count only their threads. Elsewhere
 * every warpgroup stays (an idle one computes rows nobody stores): the hand-over from nq
 * costs the key loop 7 to 25 SASS instructions a tile. */
{% if p.ws_skip_idle then %}
#define DA_KEPT_WGS(nq) min(NCWG, ((nq) + 63) >> 6)
{% else %}
#define DA_KEPT_WGS(nq) NCWG
{% end %}
/* The turn goes round the kept warpgroups: warpgroup w waits on barrier DA_BAR_TURN + w,
 * then hands over to the next (w + 1, the last kept one to 0); each barrier holds the two
 * warpgroups that meet there (256 threads); one warpgroup alone takes no turns. */
__device__ __forceinline__ void da_turn_begin(int nq) {
  (void)nq;
  if (NCWG > 1 && DA_KEPT_WGS(nq) > 1) da_named_sync(DA_BAR_TURN + (da_ct() >> 7), 256);
}
__device__ __forceinline__ void da_turn_end(int nq) {
  const int wg = da_ct() >> 7;
{% if p.ws_skip_idle then %}
  const int kept = DA_KEPT_WGS(nq);
  if (NCWG > 1 && kept > 1) da_named_arrive(DA_BAR_TURN + (wg + 1 >= kept ? 0 : wg + 1), 256);
{% else %}
  (void)nq; /* (wg + 1) % NCWG as ptxas takes it best: % cost a sparse kernel a spill */
  if (NCWG > 1) da_named_arrive(DA_BAR_TURN + (NCWG == 2 ? wg ^ 1 : wg + 1 == NCWG ? 0 : wg + 1), 256);
{% end %}
}

/* The consumers' fence after a full barrier's wait: cp.async wrote the tile through the
 * generic proxy, which wgmma (the async proxy) sees only after a proxy fence; none where
 * the tile came by TMA (A.tma), which writes through the async proxy */
#define DA_KV_FENCE()                  \
  do {                                 \
    if (!(DA_TMA && A.tma)) da_fence_proxy_async(); \
  } while (0)
/* The full barriers' arrivals: the producer warpgroup's threads' cp.async, or where the
 * tiles come by TMA (A.tma) the one producing thread's (produce_tma) */
#define DA_FULL_ARRIVALS(A) (DA_TMA && (A).tma ? 1 : DA_PRODUCERS)
/* bars: the full barriers of K and of V, then the empty ones, STAGES each */
#define FULL_K(st) (&bars[(st)])
#define FULL_V(st) (&bars[STAGES + (st)])
#define EMPTY_K(st) (&bars[2 * STAGES + (st)])
#define EMPTY_V(st) (&bars[3 * STAGES + (st)])
static_assert(STAGES >= 2, "a consumer holds the V of one tile while it waits for the next");

{% if p.tma then %}
/* produce() by the tensor memory accelerator (one thread; where the runtime set the maps,
 * A.tma): a tile's K (then V) is a box of 64 head dims x TK rows (one box per 64 head
 * dims) written into the stage in the 128-byte swizzle wgmma reads; the full barrier
 * counts this thread's arrival and the box's bytes. The maps of class x of branch br (3 *
 * (BR_TMAP0(br) + x), runtime/cuda_backend.c encode_tmaps): K and V of the positions x mod
 * r (the tile's first key is row (s0 + off) / r + c, segment 0, of map x = (s0 + off) %
 * r), and V of the offset-x class of every whole segment (row c of segment s0 / w). K's
 * rows past the class's end (the next segment's, or a causal tile's future keys) are real
 * keys there: their scores are masked. V comes from the per-segment map where the segment
 * is whole, so rows past its end are zeros, as the cp.async paths make them (0 x Inf would
 * be NaN: an Inf in V must not reach the segment before); the last, partial segment's rows
 * end where the tensor does. (Within a causal tile, keys past the query tile's last row
 * are real rows of V: the cp.async paths zero those, which a box of TK rows cannot.) Where
 * the runtime set no maps (!A.tma: tensors not 16-byte aligned, int32 coordinates
 * exceeded, a driver without the encoder, DILATTN_TMA=0) the producer warpgroup copies as
 * wgmma-ws's does (produce() below; the full barriers count its 128 arrivals, the
 * consumers fence): the same speed. (Beside the TMA loop in one loop, those copies'
 * offsets spilled 40 bytes of the producer's 32 registers; with 64-bit divisions here, 40
 * bytes of a D = 128 causal kernel's consumers.) */
__device__ void produce_tma(int br, da_pipe &P, da_u64 *bars, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b,
                            da_i64 hkv, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
  const da_key_walk W = da_keys<1>(br, A, b, hkv, s0, off, a0, astride, nq, 0);
  const da_i64 r = BR_R[br], w = BR_W[br], first = s0 + off;
  int cls;
  /* The maps' slots; int32 coordinates (the runtime's tma_unusable: N < 2^31 - 1024);
   * every map 5-d (the by-position ones with a segment dimension of 1), so K and V share
   * one form of the instruction */
  const int row0 = (int)da_fq(first, BR_R_DIV[br]), ih = (int)hkv, ib = (int)b;
  const int kslot = 3 * (BR_TMAP0(br) + (int)(first - row0 * r));
  const bool whole = s0 + w <= A.seq_len; /* V by segment */
  const int vslot = whole ? 3 * (BR_TMAP0(br) + (int)off) + 2 : kslot + 1;
  const int vrow0 = whole ? 0 : row0, vseg = whole ? (int)da_fq(s0, BR_W_DIV[br]) : 0;
  for (da_i64 c = W.next<true>(0, &cls); c < W.kend; c = W.next<true>(c + TK, &cls)) {
#pragma unroll
    for (int which = 1; which <= 2; which++) { /* K, then V */
      da_mbar_wait(which == 1 ? EMPTY_K(P.st) : EMPTY_V(P.st), P.ph ^ 1); /* the consumers are done with the slot */
      da_u64 *full = which == 1 ? FULL_K(P.st) : FULL_V(P.st);
      da_u16 *dst = (which == 1 ? Ks : Vs) + P.st * TK * ROWH;
      da_mbar_arrive_expect_tx(full, TK * HD * 2);
#pragma unroll
      for (int d = 0; d < HD / 64; d++) /* a 64-dim panel: TK rows of 128 bytes (DA_CHUNK) */
        da_tma_load5(dst + d * TK * 64, da_tmaps() + (which == 1 ? kslot : vslot), d * 64,
                     (which == 1 ? row0 : vrow0) + (int)c, which == 1 ? 0 : vseg, ih, ib, full);
    }
    da_pipe_next(P);
  }
}
{% end %}

/* The producer's share of attend(): every tile the consumers will take, in order. */
__device__ void produce(int br, da_pipe &P, da_u64 *bars, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b,
                        da_i64 hkv, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
{% if p.tma then %}
  if (A.tma) return produce_tma(br, P, bars, Ks, Vs, A, b, hkv, s0, off, a0, astride, nq);
{% end %}
  const da_key_walk W = da_keys<DA_PRODUCERS>(br, A, b, hkv, s0, off, a0, astride, nq, threadIdx.x);
  int cls;
  for (da_i64 c = W.next<true>(0, &cls); c < W.kend; c = W.next<true>(c + TK, &cls)) {
#pragma unroll
    for (int which = 1; which <= 2; which++) { /* K, then V */
      da_mbar_wait(which == 1 ? EMPTY_K(P.st) : EMPTY_V(P.st), P.ph ^ 1); /* the consumers are done with the slot */
      W.fill<DA_PRODUCERS>(Ks, Vs, c, P.st, threadIdx.x, which);
      da_u64 *full = which == 1 ? FULL_K(P.st) : FULL_V(P.st);
      if (A.vec16) {
        da_cp_async_mbar_arrive(full); /* arrives when this thread's copies have landed */
      } else {
        da_fence_proxy_async(); /* plain stores: this thread's own fence, then the release */
        da_mbar_arrive(full);
      }
    }
    da_pipe_next(P);
  }
}

/* The consumers' attend(): per tile, in its turn, S = Q K^T of the tile and P V of the one
 * before; then (K goes back to the producer) the masking and maxima while that P V still
 * runs, the output's rescale once it is done (and V goes back), and P of this tile. */
__device__ void attend(int br, da_state &S, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b, da_i64 hkv,
                       da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq, da_pipe &P, da_u64 *bars) {
  /* <1>: no thread offsets to fold, the consumers copy nothing */
  const da_key_walk W = da_keys<1>(br, A, b, hkv, s0, off, a0, astride, nq);
  const da_i64 kend = W.kend;
  const int ct = da_ct(), lane = ct & 31, warp = ct >> 5, wr0 = warp * WROWS;
  int cls = 0;
  da_i64 c = W.next(0, &cls);
  if (c >= kend) return;
  float s[MT][NT_S][4], m_use[MT][2];
  da_u32 pa[TK / 16][4]; /* P of the tile before, the A operand of its P V */
{% if p.sparse then %}
  __shared__ unsigned char blk_bufs[2][TQ * BLK_COLS];
  da_idx kb_first;
  int nkb;
  unsigned char *blk_ok;
{% end %}
  /* the first tile: its S = Q K^T alone. The loop below always has a P V in flight with
   * the scores (a path without it would leave ptxas unable to tell which wgmma a wait
   * retires: it serializes them, C7514) */
  da_mbar_wait(FULL_K(P.st), P.ph); /* K of tile c has landed */
  DA_KV_FENCE();                    /* ... and wgmma (the async proxy) sees it */
  da_turn_begin(nq);
  da_wg_qk_issue(&s[0][0][0], S.q_addr, da_smem_addr(Ks + P.st * TK * ROWH));
  da_turn_end(nq);
  da_wgmma_wait<0>();
  da_wgmma_fence_operand<NT_S * 4>(&s[0][0][0]);
  da_mbar_arrive(EMPTY_K(P.st));
{% if p.sparse then %}
  blk_ok = blk_bufs[P.nv++ & 1];
  tile_blocks(blk_ok, br, A, c, kend, a0, astride, nq, cls, &kb_first, &nkb);
{% end %}
  int wcls = warp_tile_class(cls, warp, lane, c, kend, a0, astride, nq DA_SPARSE_ARGS);
  softmax_max(S, s, wcls, wr0, lane, c, kend, a0, astride, nq DA_SPARSE_ARGS, m_use);
  softmax_exp_pack(S, s, m_use, pa);
  da_pipe pv = P; /* the stage and parity of the tile whose P V is pending */
  da_pipe_next(P);
  /* tile c with P of the tile before in pc, its own P into pn. wgmma-ws-p2 (p.ws_pbuf2):
   * pn is the other register set, so this tile's exps run while the P V before still reads
   * pc (FlashAttention-3 computes them under that P V too); else pn is pc, written once
   * that P V is done. */
  auto step = [&](da_u32 (&pc)[TK / 16][4], da_u32 (&pn)[TK / 16][4]) {
    da_mbar_wait(FULL_K(P.st), P.ph);
    da_mbar_wait(FULL_V(pv.st), pv.ph);
    DA_KV_FENCE();
    da_turn_begin(nq);
    da_wg_qk_issue(&s[0][0][0], S.q_addr, da_smem_addr(Ks + P.st * TK * ROWH));
    da_wg_pv_issue(&S.o[0][0][0], pc, da_smem_addr(Vs + pv.st * TK * ROWH));
    da_turn_end(nq);
    float corr[MT][2];
    da_wgmma_wait<1>(); /* this tile's scores; the P V may still run */
    da_wgmma_fence_operand<NT_S * 4>(&s[0][0][0]);
    da_mbar_arrive(EMPTY_K(P.st)); /* K goes back to the producer now */
{% if p.sparse then %}
    /* this tile's own (captured, ptxas re-derived the verdict addresses: +66 instructions) */
    unsigned char *blk_ok = blk_bufs[P.nv++ & 1];
    da_idx kb_first;
    int nkb;
    tile_blocks(blk_ok, br, A, c, kend, a0, astride, nq, cls, &kb_first, &nkb);
{% end %}
    const int wcls = warp_tile_class(cls, warp, lane, c, kend, a0, astride, nq DA_SPARSE_ARGS);
    const bool rescale = softmax_max(S, s, wcls, wr0, lane, c, kend, a0, astride, nq DA_SPARSE_ARGS, m_use, corr);
{% if p.ws_pbuf2 then %}
    softmax_exp_pack(S, s, m_use, pn); /* under the P V */
{% end %}
    da_wgmma_wait<0>();
    da_wgmma_fence_operand<NT_O * 4>(&S.o[0][0][0]);
    da_mbar_arrive(EMPTY_V(pv.st)); /* V, once its P V is done */
    if (rescale) softmax_rescale_o(S, corr);
{% if not p.ws_pbuf2 then %}
    softmax_exp_pack(S, s, m_use, pn);
{% end %}
    pv = P;
    da_pipe_next(P);
  };
  /* the last tile's P V, from the set its P is in */
  auto last = [&](const da_u32 (&pc)[TK / 16][4]) {
    da_mbar_wait(FULL_V(pv.st), pv.ph);
    DA_KV_FENCE();
    da_turn_begin(nq);
    da_wg_pv_issue(&S.o[0][0][0], pc, da_smem_addr(Vs + pv.st * TK * ROWH));
    da_turn_end(nq);
    da_wgmma_wait<0>();
    da_wgmma_fence_operand<NT_O * 4>(&S.o[0][0][0]);
    da_mbar_arrive(EMPTY_V(pv.st));
  };
{% if p.ws_pbuf2 then %}
  da_u32 pb[TK / 16][4];
  for (;;) { /* the sets alternate: the step runs with its arguments exchanged */
    if ((c = W.next(c + TK, &cls)) >= kend) return last(pa);
    step(pa, pb);
    if ((c = W.next(c + TK, &cls)) >= kend) return last(pb);
    step(pb, pa);
  }
{% else %}
  while ((c = W.next(c + TK, &cls)) < kend) step(pa, pa);
  last(pa);
{% end %}
}
{% elseif p.wg_overlap then %}
/* wgmma, overlapped: tile j+1's S = Q K^T is issued before tile j's softmax, so the
 * warpgroup's tensor cores work while its warps compute exp2 (FlashAttention-3's
 * intra-warpgroup overlap); S of tiles j and j+1 live in two register sets, swapped by
 * running the step with its arguments exchanged. Three K/V stages: tile j (V for P V),
 * tile j + 1 (K for the next S) and tile j + 2 loading. One CTA barrier per tile. */
__device__ void attend(int br, da_state &S, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b, da_i64 hkv,
                       da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
  const da_key_walk W = da_keys(br, A, b, hkv, s0, off, a0, astride, nq);
  const da_i64 kend = W.kend;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wr0 = warp * WROWS;
{% if p.sparse then %}
  __shared__ unsigned char blk_ok[TQ * BLK_COLS];
{% end %}
  int cls0 = 0, cls1 = 0, st = 0;
  da_i64 c0 = W.next(0, &cls0);
  if (c0 >= kend) return;
  W.load(Ks, Vs, c0, 0);
  da_i64 c1 = W.next(c0 + TK, &cls1);
  W.load(Ks, Vs, c1, 1);
  da_cp_async_wait<1>(); /* tile c0 */
  da_fence_proxy_async();
  __syncthreads();
  float sa[MT][NT_S][4], sb[MT][NT_S][4];
  da_wg_qk(&sa[0][0][0], S.q_addr, da_smem_addr(Ks));
  /* tile c0 sits in stage st with its scores in sc; tile c1 (if any) is in flight to the
   * next stage */
  auto step = [&](float (&sc)[MT][NT_S][4], float (&sn)[MT][NT_S][4]) -> bool {
    da_cp_async_wait<0>(); /* tile c1 */
    da_fence_proxy_async();
    __syncthreads(); /* tile c1 visible; every warp is done with the tile before c0 */
    const int st1 = st == 2 ? 0 : st + 1, st2 = st1 == 2 ? 0 : st1 + 1;
    int cls2 = 0;
    const da_i64 c2 = c1 < kend ? W.next(c1 + TK, &cls2) : kend;
    W.load(Ks, Vs, c2, st2); /* into the stage of the tile before c0 */
{% if p.sparse then %}
    da_idx kb_first;
    int nkb;
    tile_blocks(blk_ok, br, A, c0, kend, a0, astride, nq, cls0, &kb_first, &nkb);
{% end %}
    /* this tile's maxima and the output's rescale come first: no instruction may write an
     * accumulator of the wgmma pipeline once it has started (ptxas would serialize it) */
    const int wcls = warp_tile_class(cls0, warp, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS);
    float m_use[MT][2];
    softmax_max(S, sc, wcls, wr0, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS, m_use);
    if (c1 < kend) /* the next tile's scores, in flight during this tile's exp2 */
      da_wg_qk_issue(&sn[0][0][0], S.q_addr, da_smem_addr(Ks + st1 * TK * ROWH));
    da_u32 pa[TK / 16][4];
    softmax_exp_pack(S, sc, m_use, pa);
    da_wg_pv_issue(&S.o[0][0][0], pa, da_smem_addr(Vs + st * TK * ROWH));
    da_wgmma_wait<0>(); /* the next S and this P V */
    da_wgmma_fence_operand<NT_O * 4>(&S.o[0][0][0]);
    da_wgmma_fence_operand<NT_S * 4>(&sn[0][0][0]);
    c0 = c1, cls0 = cls1, c1 = c2, cls1 = cls2, st = st1;
    return c0 < kend;
  };
  while (step(sa, sb) && step(sb, sa)) {
  }
  da_cp_async_wait<0>();
  __syncthreads(); /* the other warpgroup's last P V still reads its stage: the next branch loads there */
}
{% else %}
__device__ void attend(int br, da_state &S, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b, da_i64 hkv,
                       da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
  const da_key_walk W = da_keys(br, A, b, hkv, s0, off, a0, astride, nq);
  const da_i64 kend = W.kend;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
{% if p.sparse then %}
  __shared__ unsigned char blk_ok[TQ * BLK_COLS];
{% end %}
  int cls = 0, stage = 0;
  da_i64 c0 = W.next(0, &cls);
  if (c0 >= kend) return;
  W.load(Ks, Vs, c0, 0);
  while (c0 < kend) {
    /* prefetch the next tile that is not skipped into the other stage */
    int ncls = 0;
    const da_i64 n0 = W.next(c0 + TK, &ncls);
    W.load(Ks, Vs, n0, stage ^ 1);
    da_cp_async_wait<1>();
{% if p.wgmma then %}
    da_fence_proxy_async(); /* this thread's copies into the tile, visible to wgmma's reads */
{% end %}
    __syncthreads();
    const da_u16 *kt = Ks + stage * TK * ROWH, *vt = Vs + stage * TK * ROWH;
{% if p.sparse then %}
    da_idx kb_first;
    int nkb;
    tile_blocks(blk_ok, br, A, c0, kend, a0, astride, nq, cls, &kb_first, &nkb);
{% end %}
    const int wr0 = warp * WROWS, wcls = warp_tile_class(cls, warp, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS);
{% if p.wgmma then %}
    if (cls != 0) { /* CTA-uniform: the warpgroup's wgmma need all four warps */
      /* S = Q K^T, 64 x TK, one chain of KS_D wgmma (k16 steps over the head dim) */
      float s[MT][NT_S][4];
      da_wg_qk(&s[0][0][0], S.q_addr, da_smem_addr(kt));
      float m_use[MT][2];
      softmax_max(S, s, wcls, wr0, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS, m_use);
      da_u32 pa[TK / 16][4]; /* P, packed straight into the A fragments of O += P V */
      softmax_exp_pack(S, s, m_use, pa);
{% else %}
    if (wcls != 0) {
      /* S = Q K^T for this warp's rows: each K fragment serves its MT m16 tiles */
      float s[MT][NT_S][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT_S; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS_D; kk++) {
{% if p.q_smem then %}
        da_u32 qf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) da_ldmatrix_x4(qf[mt], S.qs + mt * 16 * DP + kk * 16);
{% end %}
#pragma unroll
        for (int np = 0; np < NT_S / 2; np++) {
          da_u32 kf[4];
          da_ldmatrix_x4(kf, kt + (np * 16 + da_ldsm_k_row(lane)) * DP + kk * 16 + da_ldsm_k_col(lane));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            DA_MMA(s[mt][2 * np], {{ p.q_smem and "qf[mt]" or "S.qf[mt][kk]" }}, kf[0], kf[1]);
            DA_MMA(s[mt][2 * np + 1], {{ p.q_smem and "qf[mt]" or "S.qf[mt][kk]" }}, kf[2], kf[3]);
          }
        }
      }
      softmax_tile(S, s, wcls, wr0, lane, c0, kend, a0, astride, nq DA_SPARSE_ARGS);
{% end %}
{% if p.wgmma then %}
      /* O += P V, 64 x HD: P is the register A operand of TK / 16 wgmma; V is read
       * MN-major (tnspB) from the same layout as K */
      da_wg_pv_tile(&S.o[0][0][0], pa, da_smem_addr(vt));
{% else %}
      /* O += P V: P reuses the score fragments as the A operand; each V fragment serves
       * the warp's MT m16 tiles */
#pragma unroll
      for (int kk = 0; kk < TK / 16; kk++) {
        da_u32 pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          pa[mt][0] = DA_PACK(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = DA_PACK(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = DA_PACK(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = DA_PACK(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < NT_O / 2; dp++) {
          da_u32 vf[4];
          da_ldmatrix_x4_trans(vf, vt + (kk * 16 + da_ldsm_v_row(lane)) * DP + dp * 16 + da_ldsm_v_col(lane));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            DA_MMA(S.o[mt][2 * dp], pa[mt], vf[0], vf[1]);
            DA_MMA(S.o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
          }
        }
      }
{% end %}
    }
    __syncthreads(); /* this stage is overwritten by the next prefetch */
    c0 = n0;
    cls = ncls;
    stage ^= 1;
  }
  da_cp_async_wait<0>();
}

{% end %}

{% if not p.wg_ws then %}
#define DA_WS_ARGS
{% end %}
/* Request the tile's Q rows into Qs (cp.async where q is 16-byte aligned; the caller
 * commits the group). */
__device__ __forceinline__ void tile_load_q(da_u16 *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T) {
  const da_i64 base = b * A.q_stride[0] + T.pos0 * A.q_stride[1] + h * A.q_stride[2];
  load_rows<TQ, NCT>(Qs, A.q, T.nq, A.vec16, base, T.pstep * A.q_stride[1], da_ct());
}

/* Load the query tile into smem (and registers on the mma path); reset the softmax state.
 * first_turn: the CTA's first tile (warp-specialized: the consumers' first turn is handed
 * out here). q_later < 0: load the tile's Q into Qs now; else its Q is a cp.async group
 * requested before (tile_load_q), q_later (0 or 1) groups after it may stay in flight. */
__device__ void tile_begin(da_state &S, da_u16 *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T,
                           bool first_turn = true, int q_later = -1) {
  const int lane = da_ct() & 31, warp = da_ct() >> 5;
  if (q_later < 0) {
    tile_load_q(Qs, A, b, h, T);
    da_cp_async_commit();
  }
  if (q_later > 0) da_cp_async_wait<1>();
  else da_cp_async_wait<0>();
{% if p.wgmma then %}
  da_fence_proxy_async();
  S.q_addr = da_smem_addr(Qs) + (da_ct() >> 7) * 64 * 128; /* this warpgroup's 64 rows */
  (void)lane, (void)warp;
{% end %}
{% if p.wg_ws then %}
  /* consumer warpgroup 0 takes the first turn: the last one hands it over (an arrive by
   * warpgroup 0 itself before its own sync would be two barrier instructions of one warp
   * in one phase, which the ISA warns against) */
  if (NCWG > 1 && first_turn && DA_KEPT_WGS(T.nq) > 1 && da_ct() >> 7 == DA_KEPT_WGS(T.nq) - 1)
    da_named_arrive(DA_BAR_TURN, 256);
{% else %}
  (void)first_turn;
{% end %}
  DA_SYNC_COMPUTE();
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
{% if p.q_smem then %}
    S.qs = Qs + (warp * WROWS + da_ldsm_a_row(lane)) * DP + da_ldsm_a_col(lane);
{% elseif not p.wgmma then %}
#pragma unroll
    for (int kk = 0; kk < KS_D; kk++)
      da_ldmatrix_x4(S.qf[mt][kk],
                     Qs + (warp * WROWS + mt * 16 + da_ldsm_a_row(lane)) * DP + kk * 16 + da_ldsm_a_col(lane));
{% end %}
#pragma unroll
    for (int dt = 0; dt < NT_O; dt++) S.o[mt][dt][0] = S.o[mt][dt][1] = S.o[mt][dt][2] = S.o[mt][dt][3] = 0.f;
    S.m[mt][0] = S.m[mt][1] = -INFINITY;
    S.l[mt][0] = S.l[mt][1] = 0.f;
  }
{% if not p.wgmma then %}
  DA_SYNC_COMPUTE();
{% end %}
}

/* Copy the warp's rows staged in the Q tile (those set in `rows`, bit i for the warp's row
 * i; rows past nq never) to out, a 16-byte chunk per lane. */
__device__ __forceinline__ void tile_copy_out(const da_u16 *Qs, const da_cuda_args &A, da_i64 b, da_i64 h,
                                              const da_qtile &T, da_u32 rows) {
  const int lane = da_ct() & 31, warp = da_ct() >> 5;
  __syncwarp();
  constexpr int CPR = HD / 8; /* 16-byte chunks per row */
  const da_i64 ob = b * A.out_stride[0] + h * A.out_stride[2];
  /* the lane's chunks i = lane, lane + 32, ...: chunk c of the warp's row r, each step
   * 32 / CPR rows and 32 % CPR chunks on (one more row where c wraps), so its address
   * steps by constants (where 32 lanes cover whole rows, HD 32, 64, 128, c never wraps);
   * recomputing each chunk's 64-bit address took ~12 instructions */
  constexpr int RSTEP = 32 / CPR, CSTEP = 32 % CPR;
  const da_i64 rstride = T.pstep * A.out_stride[1];
  int r = lane / CPR, c = lane % CPR;
  da_u16 *dst = (da_u16 *)A.out + ob + (T.pos0 + (da_i64)(warp * WROWS + r) * T.pstep) * A.out_stride[1] + c * 8;
#pragma unroll
  for (int i = lane; i < WROWS * CPR; i += 32) {
    const int row = warp * WROWS + r;
    if (row >= T.nq) break; /* rows grow with i */
    if (rows >> r & 1u) {
      const da_u32x4 v = *(const da_u32x4 *)(Qs + DA_CHUNK(TQ, row, c));
      if (A.out16) da_st_v16(dst, v);
      else da_st_v16_halves(dst, v); /* element-aligned out */
    }
    r += RSTEP, c += CSTEP, dst += RSTEP * rstride + CSTEP * 8;
    if (CSTEP && c >= CPR) r++, c -= CPR, dst += rstride - CPR * 8;
  }
}

/* Row (mt, hr) of this lane's fragments, finished: its output normalized (the lane's two
 * values of each n8 tile) into f, and its lse returned (-inf where it attended nothing).
 * A row that attended anything has l >= ~1 (its maximum's own term is exp2(0)) and far
 * below 2^126 (keys x 2^8 at most), where the approximate reciprocal (2 ulp, then
 * rounded to 16 bits) and log2 (MUFU.LG2: absolute error 2^-22 on [0.5, 2], 2 ulp of the
 * result above: ~5e-6 of an lse at l = 2^40) are exact enough: the IEEE ones were a
 * range test and a slow-path call, and ~25 dependent FFMAs, a row. */
__device__ __forceinline__ float tile_row_result(const da_state &S, const float (&lsum)[MT][2], int mt, int hr,
                                                 float (&f)[NT_O][2]) {
  /* (l == 0, not l > 0: a NaN score, NaN in q or k, makes l NaN, and the row NaN as the
   * reference has it; l > 0 made it "attended nothing", out 0 and lse -inf) */
  const float l = lsum[mt][hr], inv = l == 0.f ? 0.f : __fdividef(1.f, l);
#pragma unroll
  for (int dt = 0; dt < NT_O; dt++) f[dt][0] = S.o[mt][dt][2 * hr] * inv, f[dt][1] = S.o[mt][dt][2 * hr + 1] * inv;
  return l == 0.f ? -INFINITY : (S.m[mt][hr] + __log2f(l)) * LN2;
}

/* Those values, converted (grouped divisor applied), into the row's place in the Q tile,
 * which tile_copy_out then copies to out. */
__device__ __forceinline__ void tile_stage_row(da_u16 *Qs, int row, int lane, const float (&f)[NT_O][2]) {
{% if p.wgmma then %}
  /* da_sw128_off(TQ, row, dt) + 4 * (lane & 3) bytes: the row's part once (the lane's
   * bytes 4 * (lane & 3) in bits 2-3), an XOR a chunk, where each chunk's whole swizzled
   * address took ~4 instructions */
  const int base = da_sw128_row(row) | (lane & 3) << 2;
#pragma unroll
  for (int dt = 0; dt < NT_O; dt++) {
    da_u16 *at = (da_u16 *)((char *)Qs + da_sw128_at(TQ, base, dt));
{% else %}
#pragma unroll
  for (int dt = 0; dt < NT_O; dt++) {
    da_u16 *at = Qs + DA_CHUNK(TQ, row, dt) + 2 * (lane & 3);
{% end %}
    *(da_u32 *)at = DA_PACK(f[dt][0] / OUT_DIVISOR, f[dt][1] / OUT_DIVISOR);
    DA_NOTE_SMEM_WRITE(at, 4);
  }
}

/* Mode 0's out and lse. Each warp puts its rows of out (normalized, converted) into its
 * own rows of the Q tile, in the tile's layout (DA_CHUNK: the 128-byte swizzle on wgmma,
 * padded rows on mma.sync; conflict-free either way), then copies them to out a 16-byte
 * chunk per lane: each 8 lanes a whole 128-byte row, where the fragments' own stores were
 * 2-byte ones scattered over 8 rows (16 times the store instructions, and the stores'
 * register reads held up the next rows' math). The Q rows are free: on mma.sync a warp
 * reads only its own; on wgmma its warpgroup's last S = Q K^T has completed, for every
 * warp of it once the warpgroup's barrier is passed. */
__device__ __forceinline__ void tile_store_out(const da_state &S, const float (&lsum)[MT][2], da_u16 *Qs,
                                               const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T) {
  const int lane = da_ct() & 31, warp = da_ct() >> 5;
{% if p.wgmma then %}
  da_named_sync(DA_BAR_OUT + (da_ct() >> 7), 128);
{% end %}
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int row = warp * WROWS + mt * 16 + (lane >> 2) + 8 * hr;
      float f[NT_O][2];
      const float lse = tile_row_result(S, lsum, mt, hr, f);
      tile_stage_row(Qs, row, lane, f);
      if (A.lse && (lane & 3) == 0 && row < T.nq) A.lse[da_bhn_row(A, b, h, T.pos0 + (da_i64)row * T.pstep)] = lse;
    }
  tile_copy_out(Qs, A, b, h, T, ~0u);
}

/* A split launch's tile (mode 1 + its branch slot) requests the workspace rows it merges
 * into at its end (da_prefetch_ws_row): a row's 4 lanes, the thread's rows. The first
 * launch (SPLIT_RANK 0) merges into none. */
__device__ __forceinline__ void tile_prefetch_ws(const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T,
                                                 int mode) {
{% if p.strategy == "split" then %}
  if (mode <= 0 || SPLIT_RANK[mode - 1] == 0) return;
  const int lane = da_ct() & 31, warp = da_ct() >> 5;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int row = warp * WROWS + mt * 16 + (lane >> 2) + 8 * hr;
      if (row < T.nq) da_prefetch_ws_row(A, b, h, mode - 1, T.pos0 + (da_i64)row * T.pstep, lane & 3, 4);
    }
{% else %}
  (void)A, (void)b, (void)h, (void)T, (void)mode;
{% end %}
}

{% if p.strategy == "split" then %}
/* A workspace row's partial as the thread holds it: the lse and its NT_O pairs of out */
__device__ __forceinline__ void tile_load_partial(const da_cuda_args &A, da_i64 wsrow, int lane, float &old,
                                                  da_f32x2 (&w)[NT_O]) {
  const float *row_ws = da_ws_out(A, wsrow), *row_lse = da_ws_lse(A, wsrow);
  DA_CHECK_WS_READ(row_ws, row_lse);
  old = *row_lse;
#pragma unroll
  for (int dt = 0; dt < NT_O; dt++) w[dt] = *(const da_f32x2 *)(row_ws + dt * 8 + 2 * (lane & 3));
}
{% end %}

/* Finish the tile: mode 0 writes out / lse; a split plan's branch launch passes 1 + its
 * branch slot: each row then merges the partial of the earlier launches that cover it
 * (da_split_side bit 0) and goes to the workspace when a later launch covers it too (bit
 * 1), else, its last launch, to out / lse through the Q tile as mode 0's rows do. */
__device__ void tile_end(da_state &S, da_u16 *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T,
                         int mode) {
  const int lane = da_ct() & 31, warp = da_ct() >> 5;
  float lsum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) lsum[mt][hr] = da_warp_sum4(S.l[mt][hr]); /* whole warp, before rows diverge */
  if (mode == 0) {
    tile_store_out(S, lsum, Qs, A, b, h, T);
    return;
  }
{% if p.strategy == "split" then %}
{% if p.wgmma then %}
  da_named_sync(DA_BAR_OUT + (da_ct() >> 7), 128); /* the warpgroup's Q rows are free (tile_store_out) */
{% end %}
  da_u32 out_rows = 0; /* the warp's rows that go to out */
  /* the earlier launches' partials of the thread's rows (row i = 2 mt + hr), loaded BATCH
   * rows at a time before any of them is merged: one wait on memory a batch, not one a row
   * (a row's stores to the workspace keep the compiler from moving the next row's loads
   * above them: it cannot tell the rows apart). All rows up to D = 64 (NT_O <= 8: two on
   * the wgmma path, four on mma.sync), else one, after its row's result (ptxas, the
   * warp-specialized kernel at D = 128: 852 bytes spilled with both; a lambda holding every
   * row's side and partial, 684 or 716 bytes with one before or after the result; the
   * 192-row consumers' 160 registers with two tiles a CTA, 948 bytes with two rows) */
  constexpr int BATCH = NT_O <= 8 && {{ (p.ws_tiles > 1 and p.tile_q == 192) and "false" or "true" }} ? 2 * MT : 1;
  float olds[BATCH];
  da_f32x2 ws_o[BATCH][NT_O];
  int sides[BATCH]; /* each row's da_split_side, found once */
  auto load_batch = [&](int i0) {
#pragma unroll
    for (int i = i0; i < i0 + BATCH; i++) {
      const int row = warp * WROWS + (i >> 1) * 16 + (lane >> 2) + 8 * (i & 1);
      const da_i64 pos = T.pos0 + (da_i64)row * T.pstep;
      sides[i - i0] = row < T.nq ? da_split_side((int)h, mode - 1, pos) : 2;
      if (sides[i - i0] & 1) tile_load_partial(A, da_ws_row(A, b, h, pos), lane, olds[i - i0], ws_o[i - i0]);
    }
  };
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    const int i = mt * 2 + hr, slot = i % BATCH;
    if (BATCH > 1 && slot == 0) load_batch(i);
    const int row = warp * WROWS + mt * 16 + (lane >> 2) + 8 * hr;
    float f[NT_O][2];
    float lse = tile_row_result(S, lsum, mt, hr, f);
    const da_i64 pos = T.pos0 + (da_i64)row * T.pstep, wrow = da_bhn_row(A, b, h, pos);
    /* the row's 4 lanes take the same branches */
    const int side = BATCH > 1 ? sides[slot] : row < T.nq ? da_split_side((int)h, mode - 1, pos) : 2;
    const da_i64 wsrow = da_ws_row(A, b, h, pos);
    float *row_ws = da_ws_out(A, wsrow), *row_lse = da_ws_lse(A, wsrow);
    if (row < T.nq && (side & 1)) {
      if (BATCH == 1) tile_load_partial(A, wsrow, lane, olds[0], ws_o[0]);
      const float old = olds[slot], mx = old > lse ? old : lse; /* (a NaN stays: not fmaxf) */
      const float wa = mx == -INFINITY ? 0.f : __expf(old - mx), wb = mx == -INFINITY ? 0.f : __expf(lse - mx);
      const float norm = wa + wb == 0.f ? 0.f : 1.f / (wa + wb);
#pragma unroll
      for (int dt = 0; dt < NT_O; dt++) {
        const da_f32x2 w = ws_o[slot][dt];
        f[dt][0] = (w.x * wa + f[dt][0] * wb) * norm, f[dt][1] = (w.y * wa + f[dt][1] * wb) * norm;
      }
      lse = mx == -INFINITY ? -INFINITY : mx + __logf(wa + wb);
      __syncwarp(0xfu << (lane & 28)); /* the row's 4 lanes have read the old lse */
    }
    if (row < T.nq && (side & 2)) {
      DA_CHECK_WS_ROW(row_ws, row_lse);
#pragma unroll
      for (int dt = 0; dt < NT_O; dt++) *(da_f32x2 *)(row_ws + dt * 8 + 2 * (lane & 3)) = da_f32x2{f[dt][0], f[dt][1]};
      if ((lane & 3) == 0) *row_lse = lse;
    }
    tile_stage_row(Qs, row, lane, f); /* rows for the workspace too: the copy skips them */
    if (A.lse && (lane & 3) == 0 && !(side & 2)) A.lse[wrow] = lse;
    /* bit 4r of the ballot is row r of the 8 (4 lanes a row) */
    const da_u32 v = __ballot_sync(0xffffffffu, !(side & 2));
#pragma unroll
    for (int r8 = 0; r8 < 8; r8++) out_rows |= (v >> (4 * r8) & 1u) << (mt * 16 + 8 * hr + r8);
  }
  tile_copy_out(Qs, A, b, h, T, out_rows);
{% end %}
}

{% if p.wgmma then %}
/* the tiles start at a 1024-byte-aligned shared address (the swizzle atom); the plan
 * reserves the 1024 bytes this may skip */
#define DA_SMEM_DECL                                                                         \
  DA_DYN_SMEM(da_u16, smem_raw);                                                             \
  da_u16 *Qs = smem_raw + ((1024u - (da_smem_addr(smem_raw) & 1023u)) & 1023u) / 2,          \
         *Ks = Qs + TQ * ROWH, *Vs = Ks + STAGES * TK * ROWH;
{% else %}
#define DA_SMEM_DECL                                   \
  DA_DYN_SMEM(da_u16, smem);                           \
  da_u16 *Qs = smem, *Ks = smem + TQ * ROWH, *Vs = Ks + STAGES * TK * ROWH;
{% end %}
{% else %}
/* ============================ SIMT path (fp32 FMAs) ================================= */
#define TPR {{ p.tpr }} /* threads per query row */
#define DPT {{ p.dpt }} /* head dims per thread: d = sub + TPR * x */

struct da_state {
  float q[DPT], o[DPT];
  float m, l;
};

__device__ void attend(int br, da_state &S, float *Ks, float *Vs, const da_cuda_args &A, da_i64 b, da_i64 hkv,
                       da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
  const da_i64 r = BR_R[br], L = da_class_len(br, s0, off, A.seq_len);
  const da_i64 a_first = a0, a_last = a0 + (da_i64)(nq - 1) * astride;
  const da_i64 kend = CAUSAL ? min(L, a_last + 1) : L;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  const da_i64 a = a0 + (da_i64)row * astride;
  for (da_i64 c0 = da_next_key_tile(0, a_first, a_last); c0 < kend; c0 = da_next_key_tile(c0 + TK, a_first, a_last)) {
    int cls = classify(br, A, c0, kend, a_first, a_last);
    if (cls == 0) continue;
    int nk = (int)min((da_i64)TK, kend - c0);
    __syncthreads();
    for (int i = threadIdx.x; i < nk * HD; i += NTHREADS) {
      da_i64 t = s0 + off + (c0 + i / HD) * r;
      Ks[i] = LD(A.k, b * A.k_stride[0] + t * A.k_stride[1] + hkv * A.k_stride[2] + i % HD);
      Vs[i] = LD(A.v, b * A.v_stride[0] + t * A.v_stride[1] + hkv * A.v_stride[2] + i % HD);
    }
    __syncthreads();
    for (int c = 0; c < nk; c++) {
      float dot = 0.f;
#pragma unroll
      for (int x = 0; x < DPT; x++) {
        int d = sub + TPR * x;
        if (d < HD) dot += S.q[x] * Ks[c * HD + d];
      }
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      float xs = dot * SCALE_LOG2;
      bool ok = row < nq && (cls == 1 || ((!CAUSAL || c0 + c <= a)
{% if p.sparse then %}
                                          && da_allowed(br, &A, (da_idx)(a / BLOCK), (da_idx)((c0 + c) / BLOCK))
{% end %}
                                          ));
      if (!ok) continue;
      if (xs > S.m) {
        float corr = exp2f(S.m - xs);
        S.l *= corr;
#pragma unroll
        for (int x = 0; x < DPT; x++) S.o[x] *= corr;
        S.m = xs;
      }
      /* a -inf score weighs 0: before any finite one (S.m -inf too), -inf - -inf was NaN */
      float pr = xs == -INFINITY ? 0.f : exp2f(xs - S.m);
      S.l += pr;
#pragma unroll
      for (int x = 0; x < DPT; x++) {
        int d = sub + TPR * x;
        if (d < HD) S.o[x] += pr * Vs[c * HD + d];
      }
    }
  }
}

__device__ void tile_begin(da_state &S, float *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T) {
  (void)Qs;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  da_i64 pos = T.pos0 + (da_i64)row * T.pstep;
  da_i64 base = b * A.q_stride[0] + pos * A.q_stride[1] + h * A.q_stride[2];
#pragma unroll
  for (int x = 0; x < DPT; x++) {
    int d = sub + TPR * x;
    S.q[x] = (row < T.nq && d < HD) ? LD(A.q, base + d) : 0.f;
    S.o[x] = 0.f;
  }
  S.m = -INFINITY;
  S.l = 0.f;
}

/* as on the tensor-core paths: a row's TPR threads (which prefetch different lines of it:
 * the emulator's DA_CHECK_PREFETCHED in tile_end counts on a CTA barrier between, which
 * attend's first key tile always has) */
__device__ __forceinline__ void tile_prefetch_ws(const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T,
                                                 int mode) {
{% if p.strategy == "split" then %}
  if (mode <= 0 || SPLIT_RANK[mode - 1] == 0) return;
  const int row = threadIdx.x / TPR;
  if (row < T.nq) da_prefetch_ws_row(A, b, h, mode - 1, T.pos0 + (da_i64)row * T.pstep, threadIdx.x % TPR, TPR);
{% else %}
  (void)A, (void)b, (void)h, (void)T, (void)mode;
{% end %}
}

__device__ void tile_end(da_state &S, float *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T, int mode) {
  (void)Qs;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  if (row >= T.nq) return;
  const da_i64 pos = T.pos0 + (da_i64)row * T.pstep, wrow = da_bhn_row(A, b, h, pos);
  float inv = S.l == 0.f ? 0.f : 1.f / S.l; /* (NaN l: a NaN row, as on the tensor-core paths) */
  float lse = S.l == 0.f ? -INFINITY : (S.m + log2f(S.l)) * LN2;
  float f[DPT];
  for (int x = 0; x < DPT; x++) f[x] = S.o[x] * inv;
{% if p.strategy == "split" then %}
  if (mode > 0) { /* a split plan's branch launch: 1 + its branch slot (as on the tensor-core paths) */
    const int side = da_split_side((int)h, mode - 1, pos);
    const da_i64 wsrow = da_ws_row(A, b, h, pos);
    float *row_ws = da_ws_out(A, wsrow), *row_lse = da_ws_lse(A, wsrow);
    if (side & 1) {
      DA_CHECK_WS_READ(row_ws, row_lse);
      const float old = *row_lse, mx = old > lse ? old : lse; /* (a NaN stays: not fmaxf) */
      const float wa = mx == -INFINITY ? 0.f : __expf(old - mx), wb = mx == -INFINITY ? 0.f : __expf(lse - mx);
      const float norm = wa + wb == 0.f ? 0.f : 1.f / (wa + wb);
      for (int x = 0; x < DPT; x++) {
        int d = sub + TPR * x;
        if (d < HD) f[x] = (row_ws[d] * wa + f[x] * wb) * norm;
      }
      lse = mx == -INFINITY ? -INFINITY : mx + __logf(wa + wb);
      /* the row's TPR lanes (rows past nq returned together) have read the old lse */
      __syncwarp(TPR == 32 ? 0xffffffffu : ((1u << TPR) - 1u) << ((threadIdx.x & 31) & ~(TPR - 1)));
    }
    if (side & 2) {
      DA_CHECK_WS_ROW(row_ws, row_lse);
      for (int x = 0; x < DPT; x++) {
        int d = sub + TPR * x;
        if (d < HD) row_ws[d] = f[x];
      }
      if (sub == 0) *row_lse = lse;
      return;
    }
  }
{% end %}
  da_i64 ob = b * A.out_stride[0] + pos * A.out_stride[1] + h * A.out_stride[2];
  for (int x = 0; x < DPT; x++) {
    int d = sub + TPR * x;
    if (d < HD) ST(A.out, ob + d, f[x] / OUT_DIVISOR);
  }
  if (A.lse && sub == 0) A.lse[wrow] = lse;
{% if p.strategy ~= "split" then %}
  (void)mode;
{% end %}
}

#define DA_SMEM_DECL                               \
  DA_DYN_SMEM(float, smem);                        \
  float *Qs = nullptr, *Ks = smem, *Vs = smem + TK * HD;
{% end %}

/* ============================== kernels =============================================== */
#ifndef DA_WS_ARGS
#define DA_WS_ARGS
#endif
/* One query tile: the softmax state, then attend() for each (branch, s0, off, a0, astride)
 * `each` hands out, then the output (tile_end: mode 0 out / lse; a split plan's branch
 * launch 1 + its branch slot, each row to the workspace or out). */
template <class E, class F>
__device__ __forceinline__ void run_tile(E *Qs, E *Ks, E *Vs, const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 hkv,
                                         const da_qtile &T, int mode, F each) {
{% if p.wg_ws then %}
  __shared__ da_u64 bars[4 * STAGES]; /* full K, full V: the producer's arrivals; empty K, empty V: the consumers' */
  if (threadIdx.x == 0) {
    for (int i = 0; i < 4 * STAGES; i++)
      da_mbar_init(&bars[i], i < 2 * STAGES ? DA_FULL_ARRIVALS(A) : DA_KEPT_WGS(T.nq) * 128);
    if (DA_TMA) da_fence_mbar_init(); /* TMA completes on them through the async proxy */
  }
  __syncthreads(); /* the last CTA barrier: producer and consumers go their own ways */
  da_pipe P = {0, 0, 0};
  if (threadIdx.x < DA_PRODUCERS) {
{% if p.setmaxnreg then %}
    da_setmaxnreg_dec<{{ p.setmaxnreg[1] }}>(); /* the producer needs few registers ... */
{% end %}
    if (DA_TMA && A.tma && threadIdx.x) return; /* one thread issues every copy (produce_tma) */
    each([&](int br, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride) {
      produce(br, P, bars, Ks, Vs, A, b, hkv, s0, off, a0, astride, T.nq);
    });
    da_cp_async_commit();
    da_cp_async_wait<0>();
    return;
  }
{% if p.setmaxnreg then %}
  da_setmaxnreg_inc<{{ p.setmaxnreg[2] }}>(); /* ... the consumers take them */
{% end %}
{% end %}
  da_state S;
  tile_begin(S, Qs, A, b, h, T);
{% if p.ws_skip_idle then %}
  if (da_ct() >> 7 >= DA_KEPT_WGS(T.nq)) return; /* none of its rows is a query (DA_KEPT_WGS) */
{% end %}
  tile_prefetch_ws(A, b, h, T, mode);
  each([&](int br, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride) {
    attend(br, S, Ks, Vs, A, b, hkv, s0, off, a0, astride, T.nq DA_WS_ARGS);
  });
{% if p.strategy ~= "fused" then %}
  da_grid_wait(); /* the launch before (a dependent one): out, lse and the workspace are written after it */
{% end %}
  tile_end(S, Qs, A, b, h, T, mode);
}

{% if p.lpt then %}
/* Causal grids run longest first (planner.lua plan_lpt): the grid's blocks, in order, take
 * groups of `group` consecutive units (unit u: head u % H, then the window or segment,
 * then the batch; a unit has tpu tiles), and inside a group depth-major: depth 0 of each
 * unit, then depth 1, ... The last group takes the units left over too (a group of a few
 * units at the end would run its heaviest tiles last; bench/lpt_model.py). The unit of
 * block l (of units * tpu); *depth its tile's rank inside the unit. */
template <class G, class S>
__device__ __forceinline__ da_i64 da_lpt_unit(da_i64 l, da_i64 units, da_i64 tpu, da_i64 group, G gdiv, S span_div,
                                              da_i64 *depth) {
  /* gdiv.q(x) = x / group, span_div.q(x) = x / (group * tpu): constants the compiler
   * divides by (fused), or a table's multipliers (branch kernels: da_tdiv) */
  const da_i64 last = max(gdiv.q(units), (da_i64)1) - 1; /* the last group's index */
  const da_i64 g0 = min(span_div.q(l), last) * group, rem = l - g0 * tpu;
  if (g0 < last * group) {
    *depth = gdiv.q(rem);
    return g0 + rem - *depth * group;
  }
  /* the last group, of the units left over: 32 bits, as the grid has fewer than 2^32
   * blocks (cuda_backend.c launch_main; a 64-bit division here, a call, spilled up to 340
   * bytes of warp-specialized kernels) */
  const da_u32 n = (da_u32)(units - g0), d = (da_u32)rem / n;
  *depth = d;
  return g0 + ((da_u32)rem - d * n);
}
/* unit u's (batch, inner, head) of units heads fastest, then nin inner units (windows or
 * segments) a batch: nh by hdiv (a constant or a table's multipliers); nin, a launch's,
 * by a 32-bit division (u is a block's: under 2^32) only where the batch has several */
template <class H>
__device__ __forceinline__ void da_unit_bih(da_i64 u, da_i64 nh, H hdiv, da_i64 nin, const da_cuda_args &A, da_i64 *b,
                                            da_i64 *in, da_i64 *h) {
  const da_i64 uh = hdiv.q(u);
  *h = u - uh * nh;
  if (A.batch == 1) {
    *b = 0, *in = uh;
  } else {
    const da_u32 bb = (da_u32)uh / (da_u32)nin;
    *b = bb, *in = (da_u32)uh - bb * (da_u32)nin;
  }
}
{% end %}

{% if p.strategy == "fused" then %}
/* A query tile of the fused grid: its batch, head and rows, what tile_end does with them
 * (mode 0), and what its branches attend (da_job_each). The fused kernel finds its tiles
 * through these, one a CTA or (run_tiles) several. (The branch kernel passes values, not
 * a job, da_branch_tile: through a job like this one, ptxas spilled 8 to 120 bytes of its
 * warp-specialized producer or 192-row consumers on split, single and grouped specs.) */
struct da_job {
  da_i64 b, h, hkv;
  da_qtile T;
  int mode;
  da_i64 gs, first, j0; /* the g-window's start, the residue class's first position, the tile's first row in it */
};
/* Tile tt of g-window win of (b, h); false where it holds no query (the last window's). */
__device__ __forceinline__ bool da_job_at(da_job &J, const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 win, da_i64 tt) {
  int c = 0;
  while (c + 1 < LCM_R && RES_TILE_START[c + 1] <= tt) c++;
  const da_i64 gs = win * WIN_G, ge = min(gs + WIN_G, A.seq_len), first = gs + c;
  if (first >= ge) return false;
  const da_i64 count = (ge - first + LCM_R - 1) / LCM_R, j0 = (tt - RES_TILE_START[c]) * (da_i64)TQ;
  if (j0 >= count) return false;
  J.b = b, J.h = h, J.hkv = h / HEADS_PER_KV, J.mode = 0;
  J.gs = gs, J.first = first, J.j0 = j0;
  J.T.nq = (int)min((da_i64)TQ, count - j0);
  J.T.pos0 = first + j0 * LCM_R;
  J.T.pstep = LCM_R;
  return true;
}
template <class F> __device__ __forceinline__ void da_job_each(const da_job &J, const da_cuda_args &A, F &&f) {
  (void)A;
  for (int k = 0; k < HEAD_NBR[J.h]; k++) {
    int br;
    da_i64 s0, off, a0, astride;
    if (da_fused_branch((int)J.h, k, J.gs, J.first, J.j0, &br, &s0, &off, &a0, &astride)) f(br, s0, off, a0, astride);
  }
}
{% if p.lpt then %}
/* Block l of the causal (or longest-first) grid: its job (1), a block without a query (2),
 * or 0 past the grid */
__device__ __forceinline__ int da_block_job(da_i64 l, const da_cuda_args &A, da_job &J) {
  const da_i64 nwin = (A.seq_len + WIN_G - 1) / WIN_G, units = nwin * NUM_HEADS * A.batch;
  if (l >= units * TILES_PER_WINDOW) return 0;
  da_i64 depth;
  const da_i64 u = da_lpt_unit(l, units, TILES_PER_WINDOW, {{ p.lpt_group }}, da_cdiv<{{ p.lpt_group }}>(),
                               da_cdiv<{{ p.lpt_group }}LL * TILES_PER_WINDOW>(), &depth);
{% if p.lpt_order_h then %}
  const da_i64 tt = LPT_TILE_H[u % NUM_HEADS][depth]; /* the head's tiles of the window heaviest first */
{% elseif p.lpt_order then %}
  const da_i64 tt = LPT_TILE[depth]; /* the window's tiles heaviest first */
{% else %}
  const da_i64 tt = TILES_PER_WINDOW - 1 - depth; /* residue classes last to first, each class's tiles latest first */
{% end %}
  da_i64 b, win, h;
  da_unit_bih(u, NUM_HEADS, da_cdiv<NUM_HEADS>(), nwin, A, &b, &win, &h);
  return da_job_at(J, A, b, h, win, tt) ? 1 : 2;
}
{% end %}
/* run_tiles' view of a tile: found before the roles split (da_block_ref), run by each
 * side (da_with_ref: body(b, h, hkv, T, mode, each)) */
typedef da_job da_ref;
#define da_block_ref da_block_job
template <class B> __device__ __forceinline__ void da_with_ref(const da_cuda_args &A, const da_ref &J, B &&body) {
  body(J.b, J.h, J.hkv, J.T, J.mode, [&](auto &&f) { da_job_each(J, A, f); });
}
{% else %}
/* The slot of branch br among head h's (HEAD_BR[h][k] == br): a branch launch's heads all
 * use its branch (BR_HEAD0, BR_HEADS), in LongNet mode slot br of every head, in grouped
 * mode a head's one (planner.lua; a search of HEAD_BR was ~17 instructions a tile) */
#define DA_HEAD_SLOT(br) {{ p.mode == "grouped" and "0" or "(br)" }}
/* A branch launch's tile: (b, h, segment, first dilated row), and what the rest of the
 * kernel derives from them */
struct da_btile {
  da_i64 b, h, seg, a0;
  da_i64 s0, off; /* the segment's first token, the head's offset in it */
  da_qtile T;
};
/* Tile a0 (its first dilated row) of segment seg of (b, h) in this launch's branch, seg
 * counted from the launch's first token tok0, into X; false where it holds no query (past
 * the sequence, past the residue class's end) */
__device__ __forceinline__ bool da_branch_find(const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 seg, da_i64 a0,
                                               da_btile &X) {
  const int br = A.branch;
  const da_i64 w = BR_W[br], r = BR_R[br], off = HEAD_OFF[h][DA_HEAD_SLOT(br)];
  const da_i64 s0 = A.tok0 + seg * w;
  if (s0 >= A.seq_len) return false;
  const da_i64 L = da_class_len(br, s0, off, A.seq_len);
  if (a0 >= L) return false;
  X.b = b, X.h = h, X.seg = seg, X.a0 = a0, X.s0 = s0, X.off = off;
  X.T.nq = (int)min((da_i64)TQ, L - a0);
  X.T.pos0 = s0 + off + a0 * r;
  X.T.pstep = r;
  return true;
}
/* body(b, h, hkv, T, mode, each) of tile X */
template <class B> __device__ __forceinline__ void da_branch_run(const da_cuda_args &A, const da_btile &X, B &&body) {
  const int br = A.branch;
  body(X.b, X.h, X.h / HEADS_PER_KV, X.T, {{ p.strategy == "split" and "1 + DA_HEAD_SLOT(br)" or "0" }}, /* split: tile_end's rows by slot */
       [&](auto &&f) { f(br, X.s0, X.off, X.a0, (da_i64)1); });
}
/* da_branch_find, then body as da_branch_run does (true), or false */
template <class B>
__device__ __forceinline__ bool da_branch_tile(const da_cuda_args &A, da_i64 b, da_i64 h, da_i64 seg, da_i64 a0, B &&body) {
  da_btile X;
  if (!da_branch_find(A, b, h, seg, a0, X)) return false;
  da_branch_run(A, X, body);
  return true;
}
{% if p.lpt then %}
/* Block l of a branch launch's longest-first grid (units = nseg segments x its heads x the
 * batch, BR_TILES_PER_SEG tiles each): its batch, head, segment and first dilated row, a
 * segment's latest (heaviest) tile first. (Out-parameters: through a struct, ptxas spilled
 * 120 bytes of the producer on small split specs with one tile a CTA.) */
__device__ __forceinline__ void da_branch_block(da_i64 l, da_i64 nseg, da_i64 units, const da_cuda_args &A, da_i64 *b,
                                                da_i64 *h, da_i64 *seg, da_i64 *a0) {
  const int br = A.branch;
  const da_i64 tps = BR_TILES_PER_SEG[br], nh = BR_HEADS(br);
  da_i64 depth;
  const da_i64 u = da_lpt_unit(l, units, tps, BR_LPT_GROUP[br], da_tdiv{BR_LPT_GROUP_DIV[br]},
                               da_tdiv{BR_LPT_SPAN_DIV[br]}, &depth);
  da_unit_bih(u, nh, BR_HEADS_DIVIDER(br), nseg, A, b, seg, h);
  *h += BR_HEAD0(br);
  *a0 = (tps - 1 - depth) * (da_i64)TQ;
}
{% end %}
{% if p.ws_tiles > 1 then %}
/* run_tiles' view of a tile: found whole where few registers are live (the decode and
 * da_branch_find, into shared memory), read by each side (da_branch_run). Each side had
 * derived it from (b, h, segment, first row) again, the consumers twice (their Q requests,
 * then the tile): ~250 of the ~660 instructions from the CTA's barrier to its first wgmma.
 * Block l's tile (1), a block without a query (2: past its class's end), or 0 past the
 * grid. */
typedef da_btile da_ref;
__device__ __forceinline__ int da_block_ref(da_i64 l, const da_cuda_args &A, da_ref &R) {
  const int br = A.branch;
  const da_i64 w = BR_W[br];
  const da_i64 nseg = da_fq(min(A.seq_len - A.tok0, A.ws_len) + w - 1, BR_W_DIV[br]); /* the launch's segments */
  const da_i64 units = nseg * BR_HEADS(br) * A.batch;
  if (l >= units * BR_TILES_PER_SEG[br]) return 0;
  da_i64 b, h, seg, a0;
  da_branch_block(l, nseg, units, A, &b, &h, &seg, &a0);
  return da_branch_find(A, b, h, seg, a0, R) ? 1 : 2;
}
template <class B> __device__ __forceinline__ void da_with_ref(const da_cuda_args &A, const da_ref &R, B &&body) {
  da_branch_run(A, R, body);
}
{% end %}
{% end %}

{% if p.ws_tiles > 1 then %}
/* Several tiles a CTA, blocks of the longest-first grid (da_cta_block): a persistent
 * grid's CTAs (A.ctr: a CTA per SM, each drawing its next block from the launch's counter
 * as it goes) or A.tpc consecutive blocks (the runtime's choice per launch,
 * cuda_backend.c launch_main). The producer walks their key tiles one after the other
 * without a pause, so the next tile's K / V load while the consumers write this one's out
 * and load its Q (a CTA per tile leaves the SM without loads then, and starts the next
 * CTA's pipeline cold). The stages and their parities run on across tiles; so does the
 * consumers' turn: each warpgroup takes as many turns a tile, and the hand-over the last
 * warpgroup makes at the CTA's first tile stays pending at every tile's end for warpgroup
 * 0's first turn of the next.
 * The tiles pass through a ring of DA_REF_SLOTS slots in shared memory (refs, has_ref),
 * each found whole (da_block_ref) where few registers are live: tiles 0 and 1 by threads
 * 0 and 1 before the CTA's barrier, tile k + 2 by the producer once it has issued tile k's
 * copies, into the slot tile k + 2 - DA_REF_SLOTS left (ref_empty: the consumers'
 * arrivals at that tile's end), announced through ref_full (thread 0's arrival). The
 * consumers take tile k from slot k % DA_REF_SLOTS and request tile k + 1's Q at tile k's
 * start, so it lands during tile k's key loop. has_ref: 1 a tile; 2 a block without a
 * query (past its class's end: passed over, its slot released); 0 the end of the CTA's
 * blocks. Only in plans of p.ws_ring (128-row tiles); the others run WS_TILES tiles at
 * most, tiles 0 and 1 of the ring, the loops unrolled (planner.lua plan_lpt: a loop's
 * count spilled their consumers). */
#define WS_TILES {{ p.ws_tiles }}
/* The emulator runs __shared__ variables as C statics, which keep the CTA before's values:
 * a slot is filled with 0x7f bytes before it is found, so a read of one that holds no tile
 * (has_ref 0 or 2: da_block_ref writes nothing) shows */
#ifdef DA_EMULATE
#define DA_POISON_REF(r) memset((void *)(r), 0x7f, sizeof(da_ref))
#else
#define DA_POISON_REF(r) ((void)0)
#endif
#define DA_REF_SLOTS 4
#define DA_RING {{ p.ws_ring and 1 or 0 }} /* any number of tiles a CTA (a persistent grid's); 0: WS_TILES at most */
#define DA_BAR_PROD 15 /* the producers' named barrier (where they all copy) */
{% if p.ws_skip_idle or p.sparse or not p.wg_ws then %}
#error "run_tiles: every consumer warpgroup on every tile (the turn hand-over, the empty barriers' counts), no sparse layout, warp-specialized"
{% end %}
{% if p.ws_tiles ~= 2 then %}
#error "run_tiles: tiles 0 and 1 found before the CTA barrier (a->tpc at most 2), two Q tiles (Qs, Q2)"
{% end %}
/* The block of the grid order the CTA's tile k is (< 0: none): in a persistent grid
 * (A.ctr) block blockIdx.x, then gridDim.x + each ticket it draws from the launch's
 * counter (ticket: that draw, k > 0), in order, so the CTAs take the blocks longest first as
 * they free; else blocks blockIdx.x * A.tpc to blockIdx.x * A.tpc + A.tpc - 1. */
__device__ __forceinline__ da_i64 da_cta_block(const da_cuda_args &A, int k, unsigned ticket) {
  if (A.ctr) return k ? (da_i64)gridDim.x + ticket : (da_i64)blockIdx.x;
  return k < A.tpc ? (da_i64)blockIdx.x * A.tpc + k : -1;
}
/* Store slot R of the ring from X, where every producer thread found X alike: a 32-bit word
 * of it a thread (racecheck sees no two threads write one byte, as it would had each
 * stored it whole); thread 0 alone stores it whole where it alone issues the copies */
__device__ __forceinline__ void da_ref_store(da_ref &R, const da_ref &X, bool alone) {
  static_assert(sizeof(da_ref) % 4 == 0 && sizeof(da_ref) / 4 <= DA_PRODUCERS, "da_ref: a word a producer thread");
  if (alone) {
    R = X;
    return;
  }
  unsigned w[sizeof(da_ref) / 4];
  memcpy(w, &X, sizeof w);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(da_ref) / 4); i++)
    if (threadIdx.x == i) reinterpret_cast<unsigned *>(&R)[i] = w[i];
}
/* Request tile R's Q rows into Qt (a cp.async group the caller commits) */
template <class E> __device__ __forceinline__ void da_ref_load_q(E *Qt, const da_cuda_args &A, const da_ref &R) {
  da_with_ref(A, R, [&](da_i64 b, da_i64 h, da_i64, const da_qtile &T, int, auto &&) { tile_load_q(Qt, A, b, h, T); });
}
template <class E>
__device__ __forceinline__ void run_tiles(E *Qs, E *Ks, E *Vs, const da_cuda_args &A) {
{% if p.q_bufs == 2 then %}
  E *const Q2 = Vs + STAGES * TK * ROWH; /* odd tiles' Q (and out) tile, after the stages */
{% end %}
  __shared__ da_u64 bars[4 * STAGES]; /* as in run_tile (no warpgroup leaves a tile: DA_KEPT_WGS is NCWG) */
  __shared__ da_ref refs[DA_REF_SLOTS];
  __shared__ int has_ref[DA_REF_SLOTS];
{% if p.ws_ring then %}
  __shared__ da_u64 ref_full[DA_REF_SLOTS], ref_empty[DA_REF_SLOTS];
  __shared__ unsigned ticket; /* a persistent grid's next draw (thread 0's), for the other producers */
{% end %}
  /* (thread 32, warp 1: beside warp 0's decode below, not before it. One thread's loop:
   * mbarrier.init takes a uniform address, a lane each made ptxas loop over the lanes) */
  if (threadIdx.x == 32) {
    for (int i = 0; i < 4 * STAGES; i++) da_mbar_init(&bars[i], i < 2 * STAGES ? DA_FULL_ARRIVALS(A) : NCWG * 128);
{% if p.ws_ring then %}
    for (int i = 0; i < DA_REF_SLOTS; i++) da_mbar_init(&ref_full[i], 1), da_mbar_init(&ref_empty[i], NCWG * 128);
{% end %}
    if (DA_TMA) da_fence_mbar_init(); /* TMA completes on them through the async proxy */
  }
  if (threadIdx.x < 2) { /* tiles 0 and 1 */
    DA_POISON_REF(&refs[threadIdx.x]);
    const da_i64 l = da_cta_block(A, threadIdx.x, threadIdx.x && A.ctr ? da_atomic_inc(A.ctr) : 0u);
    has_ref[threadIdx.x] = l >= 0 ? da_block_ref(l, A, refs[threadIdx.x]) : 0;
  }
  __syncthreads(); /* the last CTA barrier */
  da_pipe P = {0, 0, 0};
  if (threadIdx.x < DA_PRODUCERS) {
{% if p.setmaxnreg then %}
    da_setmaxnreg_dec<{{ p.setmaxnreg[1] }}>();
{% end %}
    const bool lead = threadIdx.x == 0;
    if (DA_TMA && A.tma && !lead) return; /* one thread issues every copy (produce_tma) */
{% if p.ws_ring then %}
    if (lead) da_mbar_arrive(&ref_full[0]), da_mbar_arrive(&ref_full[1]); /* (their phase 0, as later slots') */
    for (int k = 0; has_ref[k % DA_REF_SLOTS]; k++) {
{% else %}
#pragma unroll /* (k a constant: the producer's registers hold no loop state) */
    for (int k = 0; k < WS_TILES && has_ref[k]; k++) {
{% end %}
      if (has_ref[k % DA_REF_SLOTS] == 1)
        da_with_ref(A, refs[k % DA_REF_SLOTS], [&](da_i64 b, da_i64 h, da_i64 hkv, const da_qtile &T, int mode, auto &&each) {
          (void)h, (void)mode;
          each([&](int br, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride) {
            produce(br, P, bars, Ks, Vs, A, b, hkv, s0, off, a0, astride, T.nq);
          });
        });
{% if p.ws_ring then %}
      /* tile k + 2, into the slot tile k + 2 - DA_REF_SLOTS's consumers have left, found by
       * every producer thread still here alike (thread 0 alone where it issues TMA copies):
       * thread 0 alone where all copy spilled 108 to 164 bytes, a loop in which the others
       * waited on ref_full 356 to 528 (bench/results/untimed-since-30da0bd.md, session 24).
       * A persistent grid's ticket is thread 0's draw; the others read it after the barrier */
      const int k2 = k + 2, s2 = k2 % DA_REF_SLOTS;
      unsigned drawn = 0;
      if (lead && A.ctr) ticket = drawn = da_atomic_inc(A.ctr);
      if (!(DA_TMA && A.tma)) da_named_sync(DA_BAR_PROD, DA_PRODUCERS);
      if (k2 >= DA_REF_SLOTS) da_mbar_wait(&ref_empty[s2], (k2 / DA_REF_SLOTS - 1) & 1);
      const da_i64 l = da_cta_block(A, k2, lead ? drawn : ticket);
      /* (storing thread 0's alone where every producer copies, a branch, spilled 8 bytes of
       * LongNet 2-branch causal: a word of it each) */
      da_ref X;
      DA_POISON_REF(&X); /* (emulation: what the decode leaves unwritten shows) */
      const int has = l >= 0 ? da_block_ref(l, A, X) : 0;
      da_ref_store(refs[s2], X, DA_TMA && A.tma);
      if (lead) has_ref[s2] = has;
      /* where every producer copies: each has written the slot before thread 0 announces it
       * (its arrival releases what the barrier ordered before it), and has read tile k's,
       * which tile k + 4 takes, and the ticket before thread 0 draws the next */
      if (!(DA_TMA && A.tma)) da_named_sync(DA_BAR_PROD, DA_PRODUCERS);
      if (lead) da_mbar_arrive(&ref_full[s2]);
{% end %}
    }
    da_cp_async_commit();
    da_cp_async_wait<0>();
    return;
  }
{% if p.setmaxnreg then %}
  da_setmaxnreg_inc<{{ p.setmaxnreg[2] }}>();
{% end %}
{% if p.q_bufs == 2 then %}
  if (has_ref[0] == 1) da_ref_load_q(Qs, A, refs[0]); /* tile 0's Q (tile k + 1's at tile k's start; 2: no query) */
  da_cp_async_commit();
{% end %}
  bool first = true; /* the CTA's first tile (its turn hand-over: tile_begin) */
{% if p.ws_ring then %}
  for (int k = 0;; k++) {
    const int s = k % DA_REF_SLOTS;
    da_mbar_wait(&ref_full[s], (k / DA_REF_SLOTS) & 1);
{% else %}
#pragma unroll /* (k a constant: the 192-row consumers' 160 registers hold no loop state) */
  for (int k = 0; k < WS_TILES; k++) {
    const int s = k; /* (tiles 0 and 1, found before the CTA barrier) */
{% end %}
    const int has = has_ref[s];
    if (!has) break;
{% if p.q_bufs == 2 then %}
    /* tile k + 1's Q into the other Q tile once every consumer has copied tile k - 1's out
     * from it; before tile_begin sets the accumulators, so their registers are not live
     * while the request's addresses are worked out */
    {
      const int s1 = (k + 1) % DA_REF_SLOTS;
{% if p.ws_ring then %}
      if (k) DA_SYNC_COMPUTE();
      da_mbar_wait(&ref_full[s1], ((k + 1) / DA_REF_SLOTS) & 1);
      if (has_ref[s1] == 1) da_ref_load_q(k & 1 ? Qs : Q2, A, refs[s1]);
{% else %}
      /* (two tiles at most: tile 1's Q goes to Q2, which tile 0 never used, and no tile
       * comes after it: no barrier) */
      if (k + 1 < WS_TILES && has_ref[s1] == 1) da_ref_load_q(Q2, A, refs[s1]);
{% end %}
      da_cp_async_commit();
    }
{% end %}
    if (has == 1)
      da_with_ref(A, refs[s], [&](da_i64 b, da_i64 h, da_i64 hkv, const da_qtile &T, int mode, auto &&each) {
        da_state S;
{% if p.q_bufs == 2 then %}
        tile_begin(S, k & 1 ? Q2 : Qs, A, b, h, T, first, 1); /* (its Q: the group before tile k + 1's) */
{% else %}
        if (!first) DA_SYNC_COMPUTE(); /* every warp has copied the tile before's rows of out from the Q tile */
        tile_begin(S, Qs, A, b, h, T, first);
{% end %}
        first = false;
        tile_prefetch_ws(A, b, h, T, mode);
        each([&](int br, da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride) {
          attend(br, S, Ks, Vs, A, b, hkv, s0, off, a0, astride, T.nq, P, bars);
        });
{% if p.strategy ~= "fused" then %}
        da_grid_wait(); /* the launch before: out, lse and the workspace are written after it */
{% end %}
        /* (b, h and T read again from shared memory, not held across the key loop) */
        const da_ref &R = refs[s];
        tile_end(S, {{ p.q_bufs == 2 and "k & 1 ? Q2 : Qs" or "Qs" }}, A, R.b, R.h, R.T, mode);
      });
{% if p.ws_ring then %}
    da_mbar_arrive(&ref_empty[s]);
{% end %}
  }
{% if p.q_bufs == 2 then %}
  da_cp_async_wait<0>(); /* the group of the slot without a tile */
{% end %}
{% if p.strategy ~= "fused" then %}
  da_grid_wait(); /* a CTA without a tile too (see _branch) */
{% end %}
}
{% end %}
{% if p.strategy == "fused" then %}
/* grid (ceil(N / WIN_G) * TILES_PER_WINDOW, H, B){% if p.ws_tiles > 1 then %}; here those blocks WS_TILES a CTA, in x{% end %} */
extern "C" __global__ void __launch_bounds__(NTHREADS, {{ p.min_blocks or 1 }}) {{ p.name }}_fused(DA_KPARAM) {
  DA_KARGS
  DA_SMEM_DECL
{% if p.ws_tiles > 1 then %}
  run_tiles(Qs, Ks, Vs, A);
{% else %}
  da_job J;
{% if p.lpt then %}
  if (da_block_job(blockIdx.x + (da_i64)gridDim.x * (blockIdx.y + (da_i64)gridDim.y * blockIdx.z), A, J) != 1) return;
{% else %}
  if (!da_job_at(J, A, blockIdx.z, blockIdx.y, blockIdx.x / TILES_PER_WINDOW, blockIdx.x % TILES_PER_WINDOW)) return;
{% end %}
  run_tile(Qs, Ks, Vs, A, J.b, J.h, J.hkv, J.T, J.mode, [&](auto &&f) { da_job_each(J, A, f); });
{% end %}
}
{% else %}
/* grid (ceil(n / w_branch) * BR_TILES_PER_SEG[branch], BR_HEADS(branch), B), one launch per branch and
 * run of n = min(ws_len, N - tok0) tokens{% if p.ws_tiles > 1 then %}; here those blocks WS_TILES a CTA, in x{% end %} */
extern "C" __global__ void __launch_bounds__(NTHREADS, {{ p.min_blocks or 1 }}) {{ p.name }}_branch(DA_KPARAM) {
  DA_KARGS
  DA_SMEM_DECL
  /* the next launch may start its CTAs as this one's last wave runs. Every CTA waits for
   * the launch before (da_grid_wait) before it exits, those without a tile too, so this
   * launch completes only after that one has: a wait in the next launch then covers the
   * whole chain */
  da_grid_launch_dependents();
{% if p.ws_tiles > 1 then %}
  run_tiles(Qs, Ks, Vs, A);
{% else %}
{% if p.lpt then %}
  /* (the grid: (nseg x BR_TILES_PER_SEG, BR_HEADS, B), launch_main) */
  const da_i64 nseg = da_fq(gridDim.x, BR_TPS_DIV[A.branch]);
  da_i64 b, h, seg, a0;
  da_branch_block(blockIdx.x + (da_i64)gridDim.x * (blockIdx.y + (da_i64)gridDim.y * blockIdx.z), nseg,
                  nseg * gridDim.y * gridDim.z, A, &b, &h, &seg, &a0);
{% else %}
  const da_i64 b = blockIdx.z, h = BR_HEAD0(A.branch) + blockIdx.y, tps = BR_TILES_PER_SEG[A.branch];
  const da_i64 seg = da_fq(blockIdx.x, BR_TPS_DIV[A.branch]), a0 = (blockIdx.x - seg * tps) * (da_i64)TQ;
{% end %}
  if (!da_branch_tile(A, b, h, seg, a0, [&](da_i64 b, da_i64 h, da_i64 hkv, const da_qtile &T, int mode, auto &&each) {
        run_tile(Qs, Ks, Vs, A, b, h, hkv, T, mode, each);
      }))
    da_grid_wait();
{% end %}
}
{% end %}
{% if p.strategy ~= "fused" then %}

/* The row kernel (_clear): grid (ceil(N * RCH / 256), H, B) of 256
 * threads, a thread per 8 head dims of one row: no division by a runtime value (the old
 * grid-stride form spent most of its time in 64-bit divisions by seq_len) */
#define RCH ((HD + 7) / 8) /* threads per row */
/* The row kernel's start: let the next launch start (da_grid_launch_dependents), wait for
 * the one before (they are dependent launches: it writes the rows), then this thread's
 * chunk; false past the sequence. */
__device__ __forceinline__ bool da_row_chunk(const da_cuda_args &A, da_i64 &row, da_i64 &pos, int &d0, int &d1) {
  da_grid_launch_dependents();
  da_grid_wait();
  const da_i64 t = blockIdx.x * (da_i64)blockDim.x + threadIdx.x;
  pos = t / RCH;
  d0 = (int)(t % RCH) * 8;
  d1 = min(d0 + 8, HD);
  row = da_bhn_row(A, blockIdx.z, blockIdx.y, pos);
  return pos < A.seq_len;
}
__device__ __forceinline__ da_i64 da_out_row(const da_cuda_args &A, da_i64 pos) {
  return blockIdx.z * A.out_stride[0] + pos * A.out_stride[1] + blockIdx.y * A.out_stride[2];
}

/* out = 0, lse = -inf; the branch launches then write the rows they cover. Launched only
 * where some row is left uncovered (p.clear_rows: a head without a branch of r = 1) */
extern "C" __global__ void {{ p.name }}_clear(const da_cuda_args DA_PARAM_REF A) {
  da_i64 row, pos;
  int d0, d1;
  if (!da_row_chunk(A, row, pos, d0, d1)) return;
  const da_i64 o = da_out_row(A, pos);
{% if p.dtype_name ~= "float32" then %}
  /* a whole chunk in one 16-byte store where out allows them (the tensor-core paths' test):
   * eight 2-byte stores at a 16-byte stride across the lanes made each warp instruction 16
   * partial sector writes, ~17M at N = 65536, H = 8, D = 64 (now 2.1M whole ones), about
   * 0.1 ms of L2 requests (single and split plans that leave rows uncovered ran 0.10 to
   * 0.15 ms over their share of the work there on an H200, bench/results/gpu-h200-58e46dd.md) */
  if (A.out16 && d1 - d0 == 8) {
    da_st_v16((da_u16 *)A.out + o + d0, da_u32x4{0u, 0u, 0u, 0u});
  } else {
    for (int d = d0; d < d1; d++) ST(A.out, o + d, 0.f);
  }
{% else %}
  for (int d = d0; d < d1; d++) ST(A.out, o + d, 0.f);
{% end %}
  if (d0 == 0 && A.lse) A.lse[row] = -INFINITY;
}
{% end %}
