/* dilattn 0.1.0 generated kernel: do not edit, regenerate with `dilattn gen`.
 * target: cuda, kernel: da_fwd_lnmod_w2048_4096_8192_16384_32768_r1_2_4_6_12_h8_8_d128_f16_a42e063f6feb, strategy: split
 * spec: {"causal":false,"dilation_rates":[1,2,4,6,12],"dtype":"float16","head_dim":128,"mode":"longnet","num_heads":8,"num_kv_heads":8,"offsets":"mod","scale":null,"segment_lengths":[2048,4096,8192,16384,32768]}
 * cache key: 5dae8bb22ad45d1e693908743f44d7be564e9928b8d238b7c6060ce5e98d6d83
 */
/* da_device.cuh - the warp-level surface of every CUDA kernel dilattn generates, kept
 * small (DESIGN.md decision 4): cp.async, ldmatrix, mma.sync m16n8k16 (f16 and bf16,
 * fp32 accumulate), conversions and the splitmix64 finaliser. Kernels call only these.
 *
 * The lane -> element maps of the PTX ISA ("Matrix fragments for mma.m16n8k16",
 * "ldmatrix") are written once as DA_HD functions used by the kernels to compute
 * addresses, and a plain C++ reference of each instruction's documented semantics sits
 * beside it (below, outside NVRTC), so tests/test_device_ref.cpp checks on the host that
 * the addresses the kernels use produce the fragments mma expects, and a GPU session can
 * check each primitive once against its reference.
 *
 * Self-contained for NVRTC: no includes; fp16/bf16 are raw 16-bit patterns. With
 * DA_EMULATE (g++, never NVRTC) the same names come from tests/emu/da_emu.h, which runs
 * a generated kernel on the CPU on top of the references. */
#ifndef DA_DEVICE_CUH
#define DA_DEVICE_CUH

typedef unsigned short da_u16;
typedef unsigned int da_u32;
typedef long long da_i64;
typedef unsigned long long da_u64;

#if defined(__CUDACC__)
#define DA_HD __host__ __device__ __forceinline__
#else
#define DA_HD static inline
#endif

/* ---- fragment maps (PTX ISA, mma.m16n8k16 with .f16/.bf16 operands) ------------------
 * groupID = lane >> 2, tig = lane & 3.
 * A (16x16, row): reg i in 0..3, half e in 0..1:
 *   row = groupID + 8 * (i & 1), col = 2 * tig + e + 8 * (i >> 1)
 * B (16x8, col):  reg i in 0..1: k = 2 * tig + e + 8 * i, n = groupID
 * C (16x8 f32):   idx j in 0..3: row = groupID + 8 * (j >> 1), col = 2 * tig + (j & 1) */
DA_HD int da_frag_a_row(int lane, int i) { return (lane >> 2) + 8 * (i & 1); }
DA_HD int da_frag_a_col(int lane, int i, int e) { return 2 * (lane & 3) + e + 8 * (i >> 1); }
DA_HD int da_frag_b_k(int lane, int i, int e) { return 2 * (lane & 3) + e + 8 * i; }
DA_HD int da_frag_b_n(int lane) { return lane >> 2; }
DA_HD int da_frag_c_row(int lane, int j) { return (lane >> 2) + 8 * (j >> 1); }
DA_HD int da_frag_c_col(int lane, int j) { return 2 * (lane & 3) + (j & 1); }

/* ---- ldmatrix row addresses ------------------------------------------------------------
 * ldmatrix .x4: lanes 8m .. 8m+7 give the row addresses of 8x8 matrix m; matrix m lands
 * in register m. Without .trans lane l receives row l/4, cols 2(l%4), 2(l%4)+1 of each
 * matrix; with .trans it receives rows 2(l%4), 2(l%4)+1 of col l/4.
 *
 * A operand from a row-major [row][col] tile at (r0, c0): matrices (rows 0-7, cols 0-7),
 * (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) = a0..a3. */
DA_HD int da_ldsm_a_row(int lane) { return lane & 15; }
DA_HD int da_ldsm_a_col(int lane) { return (lane >> 4) * 8; }
/* B operand of S = Q K^T from K stored [key][d]: one x4 covers two n8 tiles (keys
 * n0..n0+15) of one k16 step: matrices (keys 0-7, d 0-7) = b0 of tile 0, (keys 0-7,
 * d 8-15) = b1 of tile 0, (keys 8-15, d 0-7) = b0 of tile 1, (keys 8-15, d 8-15) = b1. */
DA_HD int da_ldsm_k_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
DA_HD int da_ldsm_k_col(int lane) { return ((lane >> 3) & 1) * 8; }
/* B operand of O = P V from V stored [key][d] with .trans: one x4 covers one k16 step
 * (keys k0..k0+15) of two n8 tiles (d n0..n0+15): matrices (keys 0-7, d 0-7) = b0 of
 * tile 0, (keys 8-15, d 0-7) = b1 of tile 0, (keys 0-7, d 8-15) = b0 of tile 1, (keys
 * 8-15, d 8-15) = b1 of tile 1. */
DA_HD int da_ldsm_v_row(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
DA_HD int da_ldsm_v_col(int lane) { return (lane >> 4) * 8; }

DA_HD da_u64 da_splitmix64(da_u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

#if defined(__CUDACC__)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define DA_DYN_SMEM(T, name) extern __shared__ __align__(16) T name[]
/* ---- device primitives ----------------------------------------------------------------- */
__device__ __forceinline__ da_u32 da_smem_addr(const void *p) {
  return (da_u32)__cvta_generic_to_shared(p);
}

/* 16-byte async copy global -> shared; when !valid the 16 bytes are zero-filled and
 * nothing is read (src-size 0). */
__device__ __forceinline__ void da_cp_async16(void *smem, const void *gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(da_smem_addr(smem)),
               "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void da_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void da_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void da_ldmatrix_x4(da_u32 r[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(da_smem_addr(smem)));
}
__device__ __forceinline__ void da_ldmatrix_x4_trans(da_u32 r[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(da_smem_addr(smem)));
}

/* d = a * b + d, m16n8k16, fp32 accumulate. */
__device__ __forceinline__ void da_mma_f16(float d[4], const da_u32 a[4], da_u32 b0, da_u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void da_mma_bf16(float d[4], const da_u32 a[4], da_u32 b0, da_u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> packed pair, lo in the low 16 bits (the lower column), round to nearest. */
__device__ __forceinline__ da_u32 da_pack_f16x2(float lo, float hi) {
  da_u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ da_u32 da_pack_bf16x2(float lo, float hi) {
  da_u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float da_f16_to_f32(da_u16 h) {
  float f;
  asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }\n" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float da_bf16_to_f32(da_u16 h) { return __uint_as_float(((da_u32)h) << 16); }
__device__ __forceinline__ da_u16 da_f32_to_f16(float f) {
  da_u16 h;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ da_u16 da_f32_to_bf16(float f) {
  da_u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}
#define DA_CHECK_GLOBAL(p, bytes, write) ((void)0)
#else
/* ---- plain C++ references of the documented PTX semantics (host only) ----------------
 * A warp's registers are modelled as arrays indexed by lane. smem is a byte array;
 * addr[lane] is the byte offset that lane passes. */
#include <cstring>
template <class To, class From> static inline To da_bitcast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of one size");
  To t;
  std::memcpy(&t, &x, sizeof t);
  return t;
}
/* cvt.rn between f32 and f16 / bf16: round to nearest even. */
static inline da_u16 da_f32_to_f16(float f) { return da_bitcast<da_u16>((_Float16)f); }
static inline float da_f16_to_f32(da_u16 u) { return (float)da_bitcast<_Float16>(u); }
static inline float da_bf16_to_f32(da_u16 h) { return da_bitcast<float>((da_u32)h << 16); }
static inline da_u16 da_f32_to_bf16(float f) {
  da_u32 u = da_bitcast<da_u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff; /* canonical NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (da_u16)(u >> 16);
}
/* ldmatrix.m8n8.x4(.trans).b16 */
static inline void da_ref_ldmatrix_x4(const unsigned char *smem, const da_u32 addr[32], bool trans,
                                      da_u32 out[32][4]) {
  for (int lane = 0; lane < 32; lane++)
    for (int m = 0; m < 4; m++) {
      da_u16 e[2];
      for (int k = 0; k < 2; k++) {
        int row = trans ? 2 * (lane & 3) + k : lane >> 2, col = trans ? lane >> 2 : 2 * (lane & 3) + k;
        std::memcpy(&e[k], smem + addr[8 * m + row] + 2 * col, 2);
      }
      out[lane][m] = (da_u32)e[0] | ((da_u32)e[1] << 16);
    }
}
/* mma.m16n8k16 with operands already converted to float: a[lane][i][e], b[lane][i][e],
 * c[lane][j]; d = A B + C using the fragment maps above. */
static inline void da_ref_mma(const float a[32][4][2], const float b[32][2][2], float c[32][4]) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    for (int i = 0; i < 4; i++)
      for (int e = 0; e < 2; e++) A[da_frag_a_row(l, i)][da_frag_a_col(l, i, e)] = a[l][i][e];
    for (int i = 0; i < 2; i++)
      for (int e = 0; e < 2; e++) B[da_frag_b_k(l, i, e)][da_frag_b_n(l)] = b[l][i][e];
  }
  for (int l = 0; l < 32; l++)
    for (int j = 0; j < 4; j++) {
      float s = 0;
      for (int k = 0; k < 16; k++) s += A[da_frag_c_row(l, j)][k] * B[k][da_frag_c_col(l, j)];
      c[l][j] += s;
    }
}
#if defined(DA_EMULATE) /* on the CPU, under g++: tests/emu */
#include "da_emu.h"
#endif
#endif

#if defined(__CUDACC__) || defined(DA_EMULATE)
/* ---- built on the primitives: global loads / stores by dtype, 4-lane reductions ------- */
__device__ __forceinline__ float da_ld_f32(const void *p, da_i64 i) {
  DA_CHECK_GLOBAL((const float *)p + i, 4, 0);
  return ((const float *)p)[i];
}
__device__ __forceinline__ float da_ld_f16(const void *p, da_i64 i) {
  DA_CHECK_GLOBAL((const da_u16 *)p + i, 2, 0);
  return da_f16_to_f32(((const da_u16 *)p)[i]);
}
__device__ __forceinline__ float da_ld_bf16(const void *p, da_i64 i) {
  DA_CHECK_GLOBAL((const da_u16 *)p + i, 2, 0);
  return da_bf16_to_f32(((const da_u16 *)p)[i]);
}
__device__ __forceinline__ void da_st_f32(void *p, da_i64 i, float x) {
  DA_CHECK_GLOBAL((float *)p + i, 4, 1);
  ((float *)p)[i] = x;
}
__device__ __forceinline__ void da_st_f16(void *p, da_i64 i, float x) {
  DA_CHECK_GLOBAL((da_u16 *)p + i, 2, 1);
  ((da_u16 *)p)[i] = da_f32_to_f16(x);
}
__device__ __forceinline__ void da_st_bf16(void *p, da_i64 i, float x) {
  DA_CHECK_GLOBAL((da_u16 *)p + i, 2, 1);
  ((da_u16 *)p)[i] = da_f32_to_bf16(x);
}
/* 8 halves global -> shared with 2-byte loads (any element-aligned source); zeros when
 * !valid. The fallback of da_cp_async16 for tensors that do not allow 16-byte accesses. */
__device__ __forceinline__ void da_copy16_sync(void *smem, const void *gmem, bool valid) {
  da_u16 *d = (da_u16 *)smem;
  const da_u16 *g = (const da_u16 *)gmem;
  if (valid) DA_CHECK_GLOBAL(g, 16, 0);
#pragma unroll
  for (int e = 0; e < 8; e++) d[e] = valid ? g[e] : (da_u16)0;
}
__device__ __forceinline__ float da_warp_max4(float x) { /* over the 4 lanes of a group */
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float da_warp_sum4(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
#endif
#endif


/* ---- constants of this spec ---------------------------------------------------- */
#define HD 128
#define NUM_HEADS 8
#define HEADS_PER_KV 1
#define TQ 64         /* queries per CTA tile */
#define TK 64         /* keys per tile */
#define NTHREADS 128
#define CAUSAL 0
#define BLOCK 1
#define SCALE_LOG2 ((float)(0.088388347648318433 * 1.4426950408889634)) /* scale * log2(e): softmax in base 2 */
#define OUT_DIVISOR 1.0f
#define LN2 0.69314718055994531f
#define LD(p, i) da_ld_f16((p), (i)) /* float16 in, fp32 compute */
#define ST(p, i, x) da_st_f16((p), (i), (x))
#define DA_MMA da_mma_f16
#define DA_PACK da_pack_f16x2
__constant__ da_i64 BR_TILES_PER_SEG[5] = { 32, 32, 32, 43, 43 };

/* Must match da__cuda_args in runtime/cuda_args.h. */
struct da_cuda_args {
  const void *q, *k, *v;
  void *out;
  float *lse;
  da_i64 batch, seq_len;
  da_i64 q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  const unsigned char *const *masks; /* device array of per-branch device masks */
  float *ws;                         /* split: [B][H][N][HD + 1] */
  int branch;                        /* branch launches */
  int vec16; /* q, k, v 16-byte aligned, strides multiples of 8: cp.async; else plain loads */
};

/* The query tile of one CTA. */
struct da_qtile {
  int nq;              /* valid rows */
  da_i64 pos0, pstep;  /* row j is position pos0 + j * pstep */
};
/* Dilated indices (query a, key c) fit in 32 bits for every branch. */
typedef int da_idx;

#define DA_FN __device__ __forceinline__
#define DA_CONST __constant__
#define DA_ARGS da_cuda_args
#define DA_MASKS(A) ((A)->masks)
#define DA_ABS(x) abs(x)
/* ---- shared control structure (templates/common/control.inc.tpl) ------------------ */
/* (branch, offset) pairs of each query head */
DA_CONST int HEAD_NBR[NUM_HEADS] = { 5, 5, 5, 5, 5, 5, 5, 5 };
DA_CONST int HEAD_BR[NUM_HEADS][5] = { {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4} };
DA_CONST da_i64 HEAD_OFF[NUM_HEADS][5] = { {0, 0, 0, 0, 0}, {0, 1, 1, 1, 1}, {0, 0, 2, 2, 2}, {0, 1, 3, 3, 3}, {0, 0, 0, 4, 4}, {0, 1, 1, 5, 5}, {0, 0, 2, 0, 6}, {0, 1, 3, 1, 7} };
DA_CONST da_i64 BR_W[5] = { 2048, 4096, 8192, 16384, 32768 };
DA_CONST da_i64 BR_R[5] = { 1, 2, 4, 6, 12 };

/* branch 0 (segment length 2048, dilation rate 1): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b0(const DA_ARGS *A, da_idx qb, da_idx kb) {
  (void)A, (void)qb, (void)kb;
  return true;
}

/* branch 1 (segment length 4096, dilation rate 2): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b1(const DA_ARGS *A, da_idx qb, da_idx kb) {
  (void)A, (void)qb, (void)kb;
  return true;
}

/* branch 2 (segment length 8192, dilation rate 4): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b2(const DA_ARGS *A, da_idx qb, da_idx kb) {
  (void)A, (void)qb, (void)kb;
  return true;
}

/* branch 3 (segment length 16384, dilation rate 6): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b3(const DA_ARGS *A, da_idx qb, da_idx kb) {
  (void)A, (void)qb, (void)kb;
  return true;
}

/* branch 4 (segment length 32768, dilation rate 12): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b4(const DA_ARGS *A, da_idx qb, da_idx kb) {
  (void)A, (void)qb, (void)kb;
  return true;
}

/* The same for branch br at run time (outside the per-branch inner loops). */
DA_FN bool da_allowed(int br, const DA_ARGS *A, da_idx qb, da_idx kb) {
  switch (br) {
  case 0: return da_allowed_b0(A, qb, kb);
  case 1: return da_allowed_b1(A, qb, kb);
  case 2: return da_allowed_b2(A, qb, kb);
  case 3: return da_allowed_b3(A, qb, kb);
  case 4: return da_allowed_b4(A, qb, kb);
  default: return false;
  }
}

/* The first key tile at or after c (a multiple of TK) that the layout may allow for some
 * query of dilated indices a_first..a_last, or a value >= every kend when none: exact
 * jumps for the parametric layouts, so a long segment's skipped tiles cost nothing; the
 * random and explicit layouts step tile by tile (their tables are data, not formulas). */
DA_FN da_i64 da_next_key_tile(da_i64 c, da_i64 a_first, da_i64 a_last) {
  (void)a_first, (void)a_last;
  return c;
}

/* Keys of branch br's offset class off in the segment starting at s0 (keys s0 + off +
 * c * r, c in [0, L)): L, or 0 when the segment is shorter than off. */
DA_FN da_i64 da_class_len(int br, da_i64 s0, da_i64 off, da_i64 seq_len) {
  const da_i64 w = BR_W[br], r = BR_R[br];
  const da_i64 seg_len = seq_len - s0 < w ? seq_len - s0 : w;
  return off < seg_len ? (seg_len - off + r - 1) / r : 0;
}


/* Tile class of keys [c0, c0 + TK) for queries with dilated indices a_first..a_last:
 * 0 skip (no pair allowed), 1 full (no mask needed), 2 partial. Block-uniform. */
__device__ int classify(int br, const da_cuda_args &A, da_i64 c0, da_i64 kend, da_i64 a_first, da_i64 a_last) {
  bool full = (!CAUSAL || c0 + TK - 1 <= a_first) && c0 + TK <= kend;
  return full ? 1 : 2;
}

/* ======================= tensor-core path (mma.sync m16n8k16) ======================= */
#define DP 136  /* padded smem row, halves */
#define BLK_COLS (TK / BLOCK + 2) /* key blocks a TK-key tile can touch */
#define NT_S (TK / 8)        /* n8 tiles of the score block */
#define NT_O (HD / 8)        /* n8 tiles of the output block */
#define KS_D (HD / 16)       /* k16 steps over head_dim */
#define MT 1  /* m16 tiles per warp: each K / V fragment feeds MT mma */
#define WROWS (16 * MT)      /* query rows per warp; TQ = 4 * WROWS */

struct da_state {        /* per thread: rows g, g + 8 of each of its warp's MT m16 tiles */
  float o[MT][NT_O][4];
  float m[MT][2], l[MT][2];
  da_u32 qf[MT][KS_D][4];
};

/* Copy rows of a [rows][HD] tile into smem (row stride DP); row i is at element offset
 * row_off(i) of base; rows >= nrows are zero-filled. With vec16 (the caller's tensors
 * allow 16-byte accesses) through cp.async; otherwise with plain 2-byte loads, which land
 * before the barrier that follows the cp.async wait, so the pipeline is the same. */
template <typename F>
__device__ __forceinline__ void load_rows(da_u16 *smem, const void *base, int rows, int nrows, bool vec16, F row_off) {
  const int chunks = HD / 8;
  for (int i = threadIdx.x; i < rows * chunks; i += NTHREADS) {
    int r = i / chunks, c = i % chunks;
    bool ok = r < nrows;
    const da_u16 *src = (const da_u16 *)base + (ok ? row_off(r) + c * 8 : 0);
    if (vec16) da_cp_async16(smem + r * DP + c * 8, src, ok);
    else da_copy16_sync(smem + r * DP + c * 8, src, ok);
  }
}

__device__ void attend(int br, da_state &S, da_u16 *Ks, da_u16 *Vs, const da_cuda_args &A, da_i64 b, da_i64 hkv,
                       da_i64 s0, da_i64 off, da_i64 a0, da_i64 astride, int nq) {
  const da_i64 r = BR_R[br], L = da_class_len(br, s0, off, A.seq_len);
  const da_i64 a_first = a0, a_last = a0 + (da_i64)(nq - 1) * astride;
  const da_i64 kend = CAUSAL ? min(L, a_last + 1) : L;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const da_i64 kb_ = b * A.k_stride[0] + (s0 + off) * A.k_stride[1] + hkv * A.k_stride[2];
  const da_i64 vb_ = b * A.v_stride[0] + (s0 + off) * A.v_stride[1] + hkv * A.v_stride[2];
  const da_i64 kstep = r * A.k_stride[1], vstep = r * A.v_stride[1];
  /* find the first tile that is not skipped (the layout's jumps first, then classify) */
  da_i64 c0 = da_next_key_tile(0, a_first, a_last);
  int cls = 0;
  while (c0 < kend && (cls = classify(br, A, c0, kend, a_first, a_last)) == 0)
    c0 = da_next_key_tile(c0 + TK, a_first, a_last);
  if (c0 >= kend) return;
  int stage = 0;
  {
    int nk = (int)min((da_i64)TK, kend - c0);
    da_i64 cc = c0;
    load_rows(Ks, A.k, TK, nk, A.vec16, [&](int i) { return kb_ + (cc + i) * kstep; });
    load_rows(Vs, A.v, TK, nk, A.vec16, [&](int i) { return vb_ + (cc + i) * vstep; });
    da_cp_async_commit();
  }
  while (c0 < kend) {
    /* prefetch the next tile that is not skipped into the other stage */
    da_i64 n0 = da_next_key_tile(c0 + TK, a_first, a_last);
    int ncls = 0;
    while (n0 < kend && (ncls = classify(br, A, n0, kend, a_first, a_last)) == 0)
      n0 = da_next_key_tile(n0 + TK, a_first, a_last);
    if (n0 < kend) {
      int nk = (int)min((da_i64)TK, kend - n0);
      da_u16 *kn = Ks + (stage ^ 1) * TK * DP, *vn = Vs + (stage ^ 1) * TK * DP;
      load_rows(kn, A.k, TK, nk, A.vec16, [&](int i) { return kb_ + (n0 + i) * kstep; });
      load_rows(vn, A.v, TK, nk, A.vec16, [&](int i) { return vb_ + (n0 + i) * vstep; });
    }
    da_cp_async_commit();
    da_cp_async_wait<1>();
    __syncthreads();
    const da_u16 *kt = Ks + stage * TK * DP, *vt = Vs + stage * TK * DP;
    /* the warp's own verdict on the tile: its rows may all lie past nq or (causal)
     * before every key of it, and need no mask where the CTA's rows as a whole do; a
     * query tile of the fused strategy spans TQ * LCM_R positions, so this skips most of
     * the causal work its rows do not need. Warp-uniform: no barrier inside. */
    const int wr0 = warp * WROWS, wr1 = min(wr0 + WROWS - 1, nq - 1);
    int wcls = wr0 < nq ? cls : 0;
    if (wcls == 2) {
      const da_i64 wa0 = a0 + (da_i64)wr0 * astride, wa1 = a0 + (da_i64)wr1 * astride;
      if (CAUSAL && c0 > wa1) wcls = 0;
      else if ((!CAUSAL || c0 + TK - 1 <= wa0) && c0 + TK <= kend && wr1 == wr0 + WROWS - 1) wcls = 1;
    }
    if (wcls != 0) {
      /* S = Q K^T for this warp's rows: each K fragment serves its MT m16 tiles */
      float s[MT][NT_S][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT_S; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS_D; kk++)
#pragma unroll
        for (int np = 0; np < NT_S / 2; np++) {
          da_u32 kf[4];
          da_ldmatrix_x4(kf, kt + (np * 16 + da_ldsm_k_row(lane)) * DP + kk * 16 + da_ldsm_k_col(lane));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            DA_MMA(s[mt][2 * np], S.qf[mt][kk], kf[0], kf[1]);
            DA_MMA(s[mt][2 * np + 1], S.qf[mt][kk], kf[2], kf[3]);
          }
        }
      /* scale, mask partial tiles, online softmax (base 2) */
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float x = s[mt][nt][j] * SCALE_LOG2;
          if (wcls == 2) {
            int row = wr0 + mt * 16 + da_frag_c_row(lane, j);
            da_idx c = (da_idx)c0 + nt * 8 + da_frag_c_col(lane, j), a = (da_idx)a0 + (da_idx)row * (da_idx)astride;
            bool ok = row < nq && c < (da_idx)kend && (!CAUSAL || c <= a);
            if (!ok) x = -INFINITY;
          }
          s[mt][nt][j] = x;
        }
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) { /* the thread's two rows of each m16 tile */
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT_S; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = da_warp_max4(mx);
        float m_new = fmaxf(S.m[mt][hr], mx);
        float m_use = m_new == -INFINITY ? 0.f : m_new;
        float corr = exp2f(S.m[mt][hr] - m_use);
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT_S; nt++) {
          s[mt][nt][2 * hr] = exp2f(s[mt][nt][2 * hr] - m_use);
          s[mt][nt][2 * hr + 1] = exp2f(s[mt][nt][2 * hr + 1] - m_use);
          sum += s[mt][nt][2 * hr] + s[mt][nt][2 * hr + 1];
        }
        S.l[mt][hr] = S.l[mt][hr] * corr + sum;
        S.m[mt][hr] = m_new;
#pragma unroll
        for (int dt = 0; dt < NT_O; dt++) {
          S.o[mt][dt][2 * hr] *= corr;
          S.o[mt][dt][2 * hr + 1] *= corr;
        }
      }
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
    }
    __syncthreads(); /* this stage is overwritten by the next prefetch */
    c0 = n0;
    cls = ncls;
    stage ^= 1;
  }
  da_cp_async_wait<0>();
}

/* Load the query tile into smem and registers; reset the softmax state. */
__device__ void tile_begin(da_state &S, da_u16 *Qs, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const da_i64 base = b * A.q_stride[0] + T.pos0 * A.q_stride[1] + h * A.q_stride[2];
  const da_i64 step = T.pstep * A.q_stride[1];
  load_rows(Qs, A.q, TQ, T.nq, A.vec16, [&](int i) { return base + i * step; });
  da_cp_async_commit();
  da_cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int kk = 0; kk < KS_D; kk++)
      da_ldmatrix_x4(S.qf[mt][kk],
                     Qs + (warp * WROWS + mt * 16 + da_ldsm_a_row(lane)) * DP + kk * 16 + da_ldsm_a_col(lane));
#pragma unroll
    for (int dt = 0; dt < NT_O; dt++) S.o[mt][dt][0] = S.o[mt][dt][1] = S.o[mt][dt][2] = S.o[mt][dt][3] = 0.f;
    S.m[mt][0] = S.m[mt][1] = -INFINITY;
    S.l[mt][0] = S.l[mt][1] = 0.f;
  }
  __syncthreads();
}

/* Finish the tile: mode 0 writes out/lse, mode 1 merges into the split workspace. */
__device__ void tile_end(da_state &S, const da_cuda_args &A, da_i64 b, da_i64 h, const da_qtile &T, int mode) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float lsum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) lsum[mt][hr] = da_warp_sum4(S.l[mt][hr]); /* whole warp, before rows diverge */
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    int row = warp * WROWS + mt * 16 + (lane >> 2) + 8 * hr;
    float l = lsum[mt][hr];
    float inv = l > 0.f ? 1.f / l : 0.f;
    float lse = l > 0.f ? (S.m[mt][hr] + log2f(l)) * LN2 : -INFINITY;
    if (row >= T.nq) continue; /* the row's 4 lanes skip together */
    da_i64 pos = T.pos0 + (da_i64)row * T.pstep;
    if (mode == 0) {
      da_i64 ob = b * A.out_stride[0] + pos * A.out_stride[1] + h * A.out_stride[2];
#pragma unroll
      for (int dt = 0; dt < NT_O; dt++) {
        int col = dt * 8 + 2 * (lane & 3);
        ST(A.out, ob + col, S.o[mt][dt][2 * hr] * inv / OUT_DIVISOR);
        ST(A.out, ob + col + 1, S.o[mt][dt][2 * hr + 1] * inv / OUT_DIVISOR);
      }
      if (A.lse && (lane & 3) == 0) A.lse[(b * NUM_HEADS + h) * A.seq_len + pos] = lse;
    } else {
      float *row_ws = A.ws + ((b * NUM_HEADS + h) * A.seq_len + pos) * (HD + 1);
      float old = row_ws[HD];
      float mx = fmaxf(old, lse);
      float wa = mx == -INFINITY ? 0.f : __expf(old - mx), wb = mx == -INFINITY ? 0.f : __expf(lse - mx);
      float norm = wa + wb > 0.f ? 1.f / (wa + wb) : 0.f;
#pragma unroll
      for (int dt = 0; dt < NT_O; dt++) {
        int col = dt * 8 + 2 * (lane & 3);
        row_ws[col] = (row_ws[col] * wa + S.o[mt][dt][2 * hr] * inv * wb) * norm;
        row_ws[col + 1] = (row_ws[col + 1] * wa + S.o[mt][dt][2 * hr + 1] * inv * wb) * norm;
      }
      __syncwarp(0xfu << (lane & 28)); /* the row's 4 lanes have read the old lse */
      if ((lane & 3) == 0 && mx != -INFINITY) row_ws[HD] = mx + __logf(wa + wb);
    }
  }
}

#define DA_SMEM_DECL                                   \
  DA_DYN_SMEM(da_u16, smem);                           \
  da_u16 *Qs = smem, *Ks = smem + TQ * DP, *Vs = Ks + 2 * TK * DP;

/* ============================== kernels =============================================== */
/* grid (ceil(N / w_branch) * BR_TILES_PER_SEG[branch], H, B), one launch per branch */
extern "C" __global__ void __launch_bounds__(NTHREADS, 1) da_fwd_lnmod_w2048_4096_8192_16384_32768_r1_2_4_6_12_h8_8_d128_f16_a42e063f6feb_branch(const da_cuda_args A) {
  DA_SMEM_DECL
  const da_i64 b = blockIdx.z, h = blockIdx.y, hkv = h / HEADS_PER_KV;
  const int br = A.branch;
  int k = 0;
  while (k < HEAD_NBR[h] && HEAD_BR[h][k] != br) k++;
  if (k == HEAD_NBR[h]) return; /* this head does not use the branch (grouped mode) */
  const da_i64 w = BR_W[br], r = BR_R[br], off = HEAD_OFF[h][k];
  const da_i64 seg = blockIdx.x / BR_TILES_PER_SEG[br], a0 = (blockIdx.x % BR_TILES_PER_SEG[br]) * (da_i64)TQ;
  const da_i64 s0 = seg * w;
  if (s0 >= A.seq_len) return;
  const da_i64 L = da_class_len(br, s0, off, A.seq_len);
  if (a0 >= L) return;
  da_qtile T;
  T.nq = (int)min((da_i64)TQ, L - a0);
  T.pos0 = s0 + off + a0 * r;
  T.pstep = r;
  da_state S;
  tile_begin(S, Qs, A, b, h, T);
  attend(br, S, Ks, Vs, A, b, hkv, s0, off, a0, 1, T.nq);
  tile_end(S, A, b, h, T, 1);
}

/* workspace rows: acc = 0, lse = -inf.  grid-stride over B * H * N rows */
extern "C" __global__ void da_fwd_lnmod_w2048_4096_8192_16384_32768_r1_2_4_6_12_h8_8_d128_f16_a42e063f6feb_init(const da_cuda_args A) {
  const da_i64 rows = A.batch * NUM_HEADS * A.seq_len;
  for (da_i64 i = blockIdx.x * (da_i64)blockDim.x + threadIdx.x; i < rows * (HD + 1); i += (da_i64)gridDim.x * blockDim.x)
    A.ws[i] = (i % (HD + 1)) == HD ? -INFINITY : 0.f;
}

/* out = merged workspace (grouped divisor applied), lse = merged lse */
extern "C" __global__ void da_fwd_lnmod_w2048_4096_8192_16384_32768_r1_2_4_6_12_h8_8_d128_f16_a42e063f6feb_finish(const da_cuda_args A) {
  const da_i64 rows = A.batch * NUM_HEADS * A.seq_len;
  for (da_i64 i = blockIdx.x * (da_i64)blockDim.x + threadIdx.x; i < rows * HD; i += (da_i64)gridDim.x * blockDim.x) {
    da_i64 row = i / HD, d = i % HD, pos = row % A.seq_len, bh = row / A.seq_len;
    da_i64 b = bh / NUM_HEADS, h = bh % NUM_HEADS;
    const float *ws = A.ws + row * (HD + 1);
    ST(A.out, b * A.out_stride[0] + pos * A.out_stride[1] + h * A.out_stride[2] + d, ws[d] / OUT_DIVISOR);
    if (d == 0 && A.lse) A.lse[row] = ws[HD];
  }
}
