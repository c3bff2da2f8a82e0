/* da_emu.h - the CUDA surface of generated kernels, emulated on the CPU so the kernel
 * source NVRTC compiles can run here, unchanged, under g++ (tests/emu/emu_runtime.cpp
 * runs each CUDA thread as a fiber).
 *
 * Included by templates/cuda/da_device.cuh when DA_EMULATE is defined (never under
 * NVRTC). The warp-level primitives are collectives of the emulated warp computed with
 * the plain C++ references of the PTX semantics that sit in da_device.cuh, so a kernel
 * run here checks the whole chain kernel -> lane maps -> references; a GPU session
 * checks the references against the hardware once.
 *
 * What the emulation checks beyond the numbers (each failure stops the launch with a
 * message naming the thread):
 *   - barriers: __syncthreads variants must be reached by every live thread of the CTA,
 *     warp collectives (shuffles, ldmatrix, mma, __syncwarp) by every lane named in the
 *     mask, all with the same operation (a divergent barrier is a deadlock report);
 *   - cp.async: 16-byte aligned, the destination inside dynamic shared memory, a valid
 *     source inside a registered global buffer; data lands only at commit or at the
 *     wait that covers it (chosen at random), so a read before the wait sees stale bytes;
 *   - ldmatrix rows inside dynamic shared memory and 16-byte aligned;
 *   - wgmma (sm_90a): issued by all 128 threads of the warpgroup with the same
 *     descriptors, after a wgmma.fence since the thread's last wait; its result lands at
 *     the wait_group that covers it, and the wait fails if the thread touched the
 *     accumulator or A-fragment registers, or anyone changed the shared memory it reads,
 *     while it was in flight; shared memory it reads must not hold a generic-proxy write
 *     (cp.async, st.shared) its writer has not yet fenced with fence.proxy.async, nor
 *     data that arrived through an mbarrier (cp.async.mbarrier.arrive) after the last
 *     fence.proxy.async of any thread of the warpgroup;
 *   - mbarriers: used only after mbarrier.init; cp.async copies tracked by one land when
 *     its phase completes, so a consumer that reads before its wait sees stale bytes;
 *     named barriers: every user of an id in a phase names the same thread count;
 *   - loads and stores through da_ld_* / da_st_* inside registered buffers;
 *   - prefetches (da_prefetch_l2) inside registered buffers; a load marked
 *     DA_CHECK_PREFETCHED (a split epilogue's workspace rows) only from 128-byte lines the
 *     CTA prefetched before;
 *   - shared memory starts filled with NaN bytes, and threads run in a random order
 *     between barriers, so a missing barrier or a read of unwritten smem shows up;
 *   - the kernel is compiled with -fsanitize=undefined (signed overflow in index math,
 *     bad shifts, misaligned pointers abort the test with UBSan's report). */
#ifndef DA_EMU_H
#define DA_EMU_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "da_emu_abi.h"

#define threadIdx (da_emu_cur->tid)
#define blockIdx (da_emu_cur->bid)
#define blockDim (da_emu_cur->bdim)
#define gridDim (da_emu_cur->gdim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ static
#define __shared__ static /* CTAs run one at a time */
#define __align__(n) alignas(n)
#define __grid_constant__
#define DA_DYN_SMEM(T, name) T *name = (T *)da_emu_dyn_smem()

static inline void __syncthreads(void) { da_emu_syncthreads(0, 0); }
static inline int __syncthreads_or(int p) { return da_emu_syncthreads(1, p); }
static inline int __syncthreads_and(int p) { return da_emu_syncthreads(2, p); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { da_emu_syncwarp(mask); }
static inline float __shfl_xor_sync(unsigned mask, float v, int m) { return da_emu_shfl_xor(mask, v, m); }
static inline int __any_sync(unsigned mask, int pred) { return da_emu_vote_any(mask, pred); }
static inline unsigned __ballot_sync(unsigned mask, int pred) { return da_emu_vote_ballot(mask, pred); }
#define __expf expf /* after <math.h>, which declares its own __expf */
#define __logf logf
#define __log2f log2f
#define __fdividef(a, b) ((a) / (b))
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)((unsigned long long)a * b >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b) {
  return a < b ? a : b;
}
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b) {
  return a < b ? b : a;
}

/* ---- the primitives of da_device.cuh, same names and signatures ----------------------- */
static inline void da_cp_async16(void *smem, const void *gmem, bool valid) { da_emu_cp_async16(smem, gmem, valid); }
static inline void da_cp_async_commit() { da_emu_cp_async_commit(); }
template <int N> static inline void da_cp_async_wait() { da_emu_cp_async_wait(N); }
static inline void da_ldmatrix_x4(da_u32 r[4], const void *smem) { da_emu_ldmatrix_x4(r, smem, 0); }
static inline void da_ldmatrix_x4_trans(da_u32 r[4], const void *smem) { da_emu_ldmatrix_x4(r, smem, 1); }
static inline void da_mma_f16(float d[4], const da_u32 a[4], da_u32 b0, da_u32 b1) { da_emu_mma(d, a, b0, b1, 0); }
static inline void da_mma_bf16(float d[4], const da_u32 a[4], da_u32 b0, da_u32 b1) { da_emu_mma(d, a, b0, b1, 1); }

static inline da_u32 da_smem_addr(const void *p) { return da_emu_smem_offset(p); }
static inline float da_exp2(float x) { /* ex2.approx.ftz: subnormal results flush to 0 */
  float r = exp2f(x);
  return r < 1.17549435e-38f ? 0.f : r;
}
static inline void da_wgmma_fence() { da_emu_wgmma_fence(); }
static inline void da_wgmma_commit() { da_emu_wgmma_commit(); }
template <int N> static inline void da_wgmma_wait() { da_emu_wgmma_wait(N); }
static inline void da_fence_proxy_async() { da_emu_fence_proxy_async(); }
template <int N> static inline void da_wgmma_fence_operand(float *) {}
static inline void da_mbar_init(da_u64 *bar, int count) { da_emu_mbar_init(bar, count); }
static inline void da_mbar_arrive(da_u64 *bar) { da_emu_mbar_arrive(bar, 0); }
static inline void da_cp_async_mbar_arrive(da_u64 *bar) { da_emu_mbar_arrive(bar, 1); }
static inline void da_mbar_wait(da_u64 *bar, da_u32 parity) { da_emu_mbar_wait(bar, parity); }
static inline void da_mbar_arrive_expect_tx(da_u64 *bar, da_u32 bytes) {
  da_emu_mbar_expect_tx(bar, bytes);
  da_emu_mbar_arrive(bar, 0);
}
static inline void da_fence_mbar_init() { da_emu_fence_proxy_async(); }
static inline void da_tma_load5(void *smem, const void *map, int c0, int c1, int c2, int c3, int c4, da_u64 *bar) {
  const int c[5] = {c0, c1, c2, c3, c4};
  da_emu_tma_load(smem, map, c, 5, bar);
}
static inline void da_named_sync(int id, int count) { da_emu_named_bar(id, count, 1); }
static inline void da_named_arrive(int id, int count) { da_emu_named_bar(id, count, 0); }
static inline int da_bar_red(int id, int count, int p, int and_) { return da_emu_named_red(id, count, p, and_); }
template <int N> static inline void da_setmaxnreg_inc() {}
template <int N> static inline void da_setmaxnreg_dec() {}

static inline da_u32 da_pack_f16x2(float lo, float hi) { return da_f32_to_f16(lo) | ((da_u32)da_f32_to_f16(hi) << 16); }
static inline da_u32 da_pack_bf16x2(float lo, float hi) {
  return da_f32_to_bf16(lo) | ((da_u32)da_f32_to_bf16(hi) << 16);
}
#define DA_CHECK_GLOBAL(p, bytes, write) da_emu_check_global((p), (bytes), (write))
#define DA_NOTE_SMEM_WRITE(p, bytes) da_emu_smem_write((p), (bytes))
#define DA_CHECK_ALIGNED(p, bytes) da_emu_check_aligned((p), (bytes))
static inline void da_prefetch_l2(const void *p) { da_emu_prefetch_l2(p); }
static inline unsigned da_atomic_inc(unsigned *p) { /* (CTAs run one at a time) */
  da_emu_check_global(p, 4, 1);
  return (*p)++;
}
#define DA_CHECK_PREFETCHED(p, bytes) da_emu_check_prefetched((p), (bytes))

#endif
