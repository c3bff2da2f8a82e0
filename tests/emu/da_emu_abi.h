/* da_emu_abi.h - what an emulated kernel (da_emu.h) and the emulator (emu_runtime.cpp)
 * share: the thread coordinates and the hooks the emulated primitives call. */
#ifndef DA_EMU_ABI_H
#define DA_EMU_ABI_H

#include <stddef.h>

struct dim3 {
  unsigned x, y, z;
};
struct da_emu_thread {
  dim3 tid, bid, bdim, gdim;
};

extern "C" {
extern da_emu_thread *da_emu_cur;
void *da_emu_dyn_smem(void);
int da_emu_syncthreads(int kind, int pred); /* kind 0 plain, 1 or, 2 and */
void da_emu_syncwarp(unsigned mask);
float da_emu_shfl_xor(unsigned mask, float v, int lane_mask);
int da_emu_vote_any(unsigned mask, int pred);
unsigned da_emu_vote_ballot(unsigned mask, int pred);
void da_emu_ldmatrix_x4(unsigned r[4], const void *smem, int trans);
void da_emu_mma(float d[4], const unsigned a[4], unsigned b0, unsigned b1, int bf16);
void da_emu_cp_async16(void *smem, const void *gmem, int valid);
void da_emu_cp_async_commit(void);
void da_emu_cp_async_wait(int n);
void da_emu_check_global(const void *p, size_t bytes, int write);
/* prefetch.global.L2 of p (inside a registered buffer): the CTA has its line */
void da_emu_prefetch_l2(const void *p);
/* the bytes [p, p + bytes) lie in lines the CTA prefetched */
void da_emu_check_prefetched(const void *p, size_t bytes);
/* a vector access of `bytes` bytes at p: p must be aligned to them */
void da_emu_check_aligned(const void *p, size_t bytes);
unsigned da_emu_smem_offset(const void *p);
void da_emu_wgmma(float *d, int n, int bf16, unsigned long long desc_a, const unsigned *a_regs,
                  unsigned long long desc_b, int b_mn_major, int scale_d);
void da_emu_wgmma_fence(void);
void da_emu_fence_proxy_async(void);
void da_emu_smem_write(const void *p, size_t n);
void da_emu_wgmma_commit(void);
void da_emu_wgmma_wait(int n);
void da_emu_mbar_init(void *bar, int count);
void da_emu_mbar_arrive(void *bar, int cp_async);
void da_emu_mbar_wait(void *bar, unsigned parity);
void da_emu_mbar_expect_tx(void *bar, unsigned bytes);
/* cp.async.bulk.tensor.<rank>d of the box at coordinates c (innermost first) of map */
void da_emu_tma_load(void *smem, const void *map, const int *c, int rank, void *bar);
void da_emu_named_bar(int id, int count, int wait);
int da_emu_named_red(int id, int count, int pred, int and_);
}

#endif
