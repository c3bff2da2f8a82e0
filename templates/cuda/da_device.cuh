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
struct alignas(16) da_u32x4 { /* 16 bytes: one vector load or store */
  da_u32 x, y, z, w;
};
struct alignas(8) da_f32x2 { /* 8 bytes: one vector load or store */
  float x, y;
};

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

/* ---- wgmma (sm_90a): shared-memory operands in the 128-byte-swizzle layout ----------------
 * A tile of `rows` rows (tokens) x HD halves, HD a multiple of 64, rows a multiple of 8,
 * based at a 1024-byte-aligned shared address: column block cb = d / 64 holds rows x 128
 * bytes; row r of it is 128 bytes at r * 128, its 16-byte chunk j (halves 8j..8j+7 of the
 * block) stored at chunk position j ^ (r % 8) (CUTLASS Swizzle<3,4,3>: address bits 4-6
 * ^= bits 7-9). This is the canonical SW128 layout of the PTX ISA ("Shared Memory Matrix
 * Layout") read two ways:
 *   K-major (Q and K as the A / B operand of S = Q K^T, K dim = d): element (mn, k) of a
 *     k16 step at start + (mn / 8) * SBO + (mn % 8) * 128 + 2k, swizzled; SBO = 1024,
 *     LBO unused; step kk starts at cb * rows * 128 + (kk % 4) * 32.
 *   MN-major (V as the B operand of O = P V, N = d, K dim = key; instruction tnspB = 1):
 *     element (mn, k) at start + (mn / 64) * LBO + (k / 8) * SBO + (k % 8) * 128 + 2 (mn % 64),
 *     swizzled; SBO = 1024, LBO = rows * 128 (the next column block); step kk (keys
 *     16kk..16kk+15) starts at kk * 2048.
 * Descriptor (PTX "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 LBO >> 4,
 * 32-45 SBO >> 4, 49-51 base offset (0: atoms 1024-aligned), 62-63 swizzle (1 = 128B). */
/* Row r's part of the offset (its 128 bytes, the swizzle's bits 4-6 set from r % 8), to
 * which bits 0-3 (a byte within the chunk) may be OR'ed, then each chunk's offset from it
 * by an XOR: a row's several chunks cost one instruction each (tile_stage_row). */
DA_HD int da_sw128_row(int r) { return r * 128 | (r & 7) << 4; }
DA_HD int da_sw128_at(int rows, int row_off, int chunk) { return (chunk >> 3) * rows * 128 + (row_off ^ (chunk & 7) << 4); }
DA_HD int da_sw128_off(int rows, int r, int chunk) { /* byte offset of 16-byte chunk `chunk` of row r */
  return da_sw128_at(rows, da_sw128_row(r), chunk);
}
DA_HD da_u64 da_wgmma_desc(da_u32 addr, da_u32 lbo, da_u32 sbo) {
  return (da_u64)((addr & 0x3FFFFu) >> 4) | ((da_u64)((lbo >> 4) & 0x3FFFu) << 16) |
         ((da_u64)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
/* desc with its start address moved on by off bytes (a multiple of 16): the start field is
 * the low 14 bits of address >> 4 and shared addresses stay below 2^18, so the field
 * cannot carry out; one 32-bit add on the low word (as CUTLASS's descriptor iterator
 * does), where rebuilding the descriptor took ~8 instructions a wgmma. */
#ifdef DA_EMULATE
#include <cassert>
#endif
DA_HD da_u64 da_wgmma_desc_add(da_u64 desc, da_u32 off) {
#ifdef DA_EMULATE
  assert(off % 16 == 0 && ((da_u32)desc & 0x3FFFu) + (off >> 4) <= 0x3FFFu); /* no low bits lost, no carry */
#endif
  return (desc & 0xFFFFFFFF00000000ull) | (da_u32)((da_u32)desc + (off >> 4));
}
/* The shared address the hardware reads for element (mn, k) of an operand described by
 * desc (SW128 only), per the canonical layouts above. */
DA_HD da_u32 da_wgmma_elem_addr(da_u64 desc, int mn_major, int mn, int k) {
  da_u32 start = (da_u32)(desc & 0x3FFFu) << 4, lbo = (da_u32)((desc >> 16) & 0x3FFFu) << 4,
         sbo = (da_u32)((desc >> 32) & 0x3FFFu) << 4;
  da_u32 a = mn_major ? start + (da_u32)(mn / 64) * lbo + (da_u32)(k / 8) * sbo + (da_u32)(k % 8) * 128 + (da_u32)(mn % 64) * 2
                      : start + (da_u32)(mn / 8) * sbo + (da_u32)(mn % 8) * 128 + (da_u32)k * 2;
  return a ^ (((a >> 7) & 7u) << 4);
}
/* Accumulator fragment of wgmma m64nNk16 (f32), thread t of the warpgroup, value v of its
 * N / 2: warp w = t / 32 owns rows 16w..16w+15 and the layout of each n8 block is the mma
 * C fragment (da_frag_c_*) of that warp. The A fragment of the register-source form is
 * the mma A fragment (da_frag_a_*) of the warp's 16 rows. */
DA_HD int da_wg_d_row(int t, int v) { return 16 * (t >> 5) + da_frag_c_row(t & 31, v & 3); }
DA_HD int da_wg_d_col(int t, int v) { return 8 * (v >> 2) + da_frag_c_col(t & 31, v & 3); }

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
 * nothing is read (the ignore-src predicate: gmem need not point anywhere then, so callers
 * pass the row's address as it is, without a select of a valid one: 2 instructions a copy). */
__device__ __forceinline__ void da_cp_async16(void *smem, const void *gmem, bool valid) {
  asm volatile("{\n .reg .pred ign;\n setp.eq.u32 ign, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, ign;\n}\n" ::"r"(
                   da_smem_addr(smem)),
               "l"(gmem), "r"((da_u32)valid)
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

/* wgmma (sm_90a) control; the shape-specific mma_async wrappers are rendered per plan
 * (cuda/wgmma.inc.tpl). fence: orders this thread's earlier register and shared-memory
 * accesses before the next wgmma; commit / wait: async groups; fence_proxy_async: makes
 * shared-memory writes of the generic proxy (cp.async, st.shared) visible to the async
 * proxy wgmma reads through; fence_operand: keeps the compiler from moving accesses of
 * accumulator registers across the async region. */
__device__ __forceinline__ void da_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void da_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void da_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void da_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void da_wgmma_fence_operand(float *r) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

/* Warp specialization (sm_90a). mbarrier: a shared-memory barrier object, initialised by
 * one thread before a CTA barrier; arrive releases this thread's earlier writes;
 * cp_async_mbar_arrive arrives once this thread's earlier cp.async copies have landed (the
 * .noinc form: the arrival is one of the `count` the barrier was initialised with);
 * wait(parity) returns once the barrier's phase of that parity has completed, acquiring
 * what its arrivals released. Named barriers 1..15 over `count` threads: sync waits for
 * them, arrive counts without waiting. setmaxnreg moves registers between warpgroups. */
__device__ __forceinline__ void da_mbar_init(da_u64 *bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(da_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void da_mbar_arrive(da_u64 *bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(da_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void da_cp_async_mbar_arrive(da_u64 *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(da_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void da_mbar_wait(da_u64 *bar, da_u32 parity) {
  asm volatile("{\n.reg .pred done;\nDA_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra DA_WAIT;\n}\n" ::"r"(da_smem_addr(bar)),
               "r"(parity)
               : "memory");
}
__device__ __forceinline__ void da_named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void da_named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/* named barrier with a reduction: or (and_ 0) / and (and_ 1) of p over the count threads */
__device__ __forceinline__ int da_bar_red(int id, int count, int p, int and_) {
  da_u32 r;
  if (and_)
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbarrier.cta.red.and.pred p, %2, %3, q;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r)
                 : "r"(p), "r"(id), "r"(count)
                 : "memory");
  else
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbarrier.cta.red.or.pred p, %2, %3, q;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r)
                 : "r"(p), "r"(id), "r"(count)
                 : "memory");
  return (int)r;
}
/* Tensor memory accelerator (sm_90a; wgmma-ws-tma). expect_tx: this thread's arrival on bar,
 * which also makes the phase wait for `bytes` more to land through it; tma_load5: one
 * thread's copy of a box of the 5-d tensor map at param-space address `map`
 * (__grid_constant__; every map is 5-d) with its first element at coordinates c0..c4 (innermost first) into
 * shared memory at smem (1024-byte aligned: the 128-byte swizzle is of address bits),
 * elements outside the tensor zero-filled; its bytes (the whole box's) complete on bar. */
__device__ __forceinline__ void da_mbar_arrive_expect_tx(da_u64 *bar, da_u32 bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(da_smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
/* After mbarrier.init, before the CTA barrier, where TMA will complete transactions on
 * them: the inits made visible to the async proxy (CUDA programming guide's TMA example:
 * fence.proxy.async.shared::cta; CUTLASS's fence_barrier_init: fence.mbarrier_init) */
__device__ __forceinline__ void da_fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void da_tma_load5(void *smem, const void *map, int c0, int c1, int c2, int c3, int c4,
                                             da_u64 *bar) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
               "%5, %6}], [%7];\n" ::"r"(da_smem_addr(smem)),
               "l"((da_u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(da_smem_addr(bar))
               : "memory");
}
template <int N> __device__ __forceinline__ void da_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void da_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

/* 2^x with the SFU alone (ex2.approx.ftz: results below 2^-126 flush to 0; exp2f without
 * fast math wraps the same instruction in denormal scaling, 3 more FP32 instructions per
 * softmax element). In the online softmax the largest term of a row is 2^0, so a flushed
 * term changes nothing at fp32 precision. */
__device__ __forceinline__ float da_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
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
/* Ask for the 128-byte line of p in L2 (a hint: nothing waits for it, no register holds
 * it). It may run before da_grid_wait: it returns no value, and L2 is where every SM's
 * stores meet, so the launch before's later stores land in the line (a load, or a
 * prefetch into L1, before the wait would not be safe). The emulator checks p lies in a
 * buffer and notes the line for the CTA (DA_CHECK_PREFETCHED). */
__device__ __forceinline__ void da_prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
/* *p + 1 into *p, atomically over the device; the old value (a persistent grid's tiles) */
__device__ __forceinline__ unsigned da_atomic_inc(unsigned *p) {
  unsigned old;
  asm volatile("atom.global.add.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(p) : "memory");
  return old;
}
#define DA_CHECK_GLOBAL(p, bytes, write) ((void)0)
#define DA_NOTE_SMEM_WRITE(p, bytes) ((void)0)
#define DA_CHECK_ALIGNED(p, bytes) ((void)0)
#define DA_CHECK_PREFETCHED(p, bytes) ((void)0)
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
/* wgmma.mma_async.m64nNk16.f32 with f16 / bf16 operands: d += A B. A (64 x 16) from
 * shared memory through desc_a (K-major) or, when a_regs is not NULL, from the
 * warpgroup's registers (a_regs[t], the RS form); B (16 x n) through desc_b, MN-major when
 * b_mn_major (tnspB = 1). d[t] is thread t's n / 2 accumulators. */
static inline float da_ref_half(da_u16 h, int bf16) { return bf16 ? da_bf16_to_f32(h) : da_f16_to_f32(h); }
static inline void da_ref_wgmma(const unsigned char *smem, int n, int bf16, da_u64 desc_a, const da_u32 (*a_regs)[4],
                                da_u64 desc_b, int b_mn_major, float *const d[128]) {
  float A[64][16], B[16][256];
  for (int m = 0; m < 64 && !a_regs; m++)
    for (int k = 0; k < 16; k++) {
      da_u16 h;
      std::memcpy(&h, smem + da_wgmma_elem_addr(desc_a, 0, m, k), 2);
      A[m][k] = da_ref_half(h, bf16);
    }
  for (int t = 0; t < 128 && a_regs; t++)
    for (int i = 0; i < 4; i++)
      for (int e = 0; e < 2; e++)
        A[16 * (t >> 5) + da_frag_a_row(t & 31, i)][da_frag_a_col(t & 31, i, e)] =
            da_ref_half((da_u16)(a_regs[t][i] >> (16 * e)), bf16);
  for (int k = 0; k < 16; k++)
    for (int c = 0; c < n; c++) {
      da_u16 h;
      std::memcpy(&h, smem + da_wgmma_elem_addr(desc_b, b_mn_major, c, k), 2);
      B[k][c] = da_ref_half(h, bf16);
    }
  for (int t = 0; t < 128; t++)
    for (int v = 0; v < n / 2; v++) {
      float acc = 0;
      for (int k = 0; k < 16; k++) acc += A[da_wg_d_row(t, v)][k] * B[k][da_wg_d_col(t, v)];
      d[t][v] += acc;
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
/* Programmatic dependent launch (sm_90 and later; nothing elsewhere, and in the emulator,
 * which runs the launches one after the other): launch_dependents lets the next launch of
 * the stream start once every CTA of this one has called it; wait blocks until the launch
 * before this one has finished and its memory is visible. A kernel the runtime launches
 * as a dependent one (cuda_backend.c launch_on_driver) must wait before it touches global
 * memory that launch writes, or reads where this one writes. */
__device__ __forceinline__ void da_grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void da_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* 16 bytes to global memory; p must be 16-byte aligned. One st.global.v4: the plain
 * store of the aligned struct compiled to four 4-byte STG.E on sm_80 and sm_90a (NVRTC
 * 13.0; the out tiles of every tensor-core kernel: 4x the store instructions and LSU
 * requests of the epilogue), while the same struct's shared-memory load is one LDS.128. */
__device__ __forceinline__ void da_st_v16(void *p, const da_u32x4 &v) {
  DA_CHECK_GLOBAL(p, 16, 1);
  DA_CHECK_ALIGNED(p, 16);
#if defined(__CUDA_ARCH__)
  asm volatile("{\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n st.global.v4.b32 [g], {%1, %2, %3, %4};\n}\n" ::"l"(p),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#else
  *(da_u32x4 *)p = v;
#endif
}
/* 16 bytes (8 halves) to global memory with 2-byte stores: p need only be element-aligned */
__device__ __forceinline__ void da_st_v16_halves(da_u16 *p, const da_u32x4 &v) {
  DA_CHECK_GLOBAL(p, 16, 1);
  const da_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 8; e++) p[e] = (da_u16)(w[e >> 1] >> (16 * (e & 1)));
}
/* 8 halves global -> shared with 2-byte loads (any element-aligned source); zeros when
 * !valid. The fallback of da_cp_async16 for tensors that do not allow 16-byte accesses. */
__device__ __forceinline__ void da_copy16_sync(void *smem, const void *gmem, bool valid) {
  da_u16 *d = (da_u16 *)smem;
  const da_u16 *g = (const da_u16 *)gmem;
  if (valid) DA_CHECK_GLOBAL(g, 16, 0);
#pragma unroll
  for (int e = 0; e < 8; e++) d[e] = valid ? g[e] : (da_u16)0;
  DA_NOTE_SMEM_WRITE(d, 16);
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
