/* emu_runtime.h - run a generated CUDA kernel on the CPU (see da_emu.h for what is
 * emulated and checked). A kernel module is the rendered CUDA source compiled by g++
 * with -DDA_EMULATE into a shared object; its kernels are called per emulated thread.
 * Not thread-safe: one launch at a time per process. */
#ifndef DA_EMU_RUNTIME_H
#define DA_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Compile source (CUDA C++ as NVRTC gets it) into so_path. include_dir holds
 * da_emu.h. Returns 0, or -1 with the compiler's output in err. */
int da_emu_compile(const char *source, const char *work_dir, const char *name, const char *include_dir,
                   char *so_path, size_t so_len, char *err, size_t err_len);

/* Global buffers the kernel may touch through checked accesses (cp.async sources,
 * da_ld_* / da_st_*). Cleared by da_emu_reset_buffers. */
void da_emu_register_buffer(const void *p, size_t bytes, int writable);
void da_emu_reset_buffers(void);

/* Warp-level mma.m16n8k16 instructions executed since the process started (each is
 * 2 * 16 * 8 * 16 = 4096 FLOPs): the tensor-core work a kernel issues, counted exactly. */
unsigned long long da_emu_mma_count(void);
/* cp.async.bulk.tensor copies issued (wgmma-ws-tma), same counting. */
unsigned long long da_emu_tma_count(void);
/* Warp-level ldmatrix.x4 executed (512 bytes of shared memory each), same counting. */
unsigned long long da_emu_ldmatrix_count(void);
/* CTA-wide barriers completed (one per CTA per __syncthreads), same counting. */
unsigned long long da_emu_barrier_count(void);
/* Warpgroup-level wgmma.mma_async issued (m64nNk16: 2 * 64 * N * 16 FLOPs each). */
unsigned long long da_emu_wgmma_count(void);
double da_emu_wgmma_flops(void);

/* cuTensorMapEncodeTiled for emulated kernels (same parameters, enums as ints; returns 0
 * or 1, CUDA_ERROR_INVALID_VALUE, where the driver's documented rules refuse them or the
 * emulator models no such map: element strides other than 1, interleave, 32- and 64-byte
 * swizzles, NaN fill). The 128 bytes at map hold the emulator's own encoding. */
int da_emu_tensor_map_encode(void *map, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                             const uint64_t *strides, const uint32_t *box, const uint32_t *estrides, int interleave,
                             int swizzle, int l2, int oob);

/* Run only the CTAs for which keep returns nonzero (NULL: all), e.g. the last tiles of
 * a 2^24-token launch. */
void da_emu_set_block_filter(int (*keep)(void *user, unsigned x, unsigned y, unsigned z), void *user);

/* Launch kernel over grid x block with smem bytes of dynamic shared memory: each
 * emulated thread calls invoke(kernel, args), which calls the kernel with its argument
 * struct by value (the caller knows its type). seed picks the thread order and when
 * cp.async data lands. Returns 0 or -1 with the reason in err. */
int da_emu_launch(void (*invoke)(void *kernel, const void *args), void *kernel, const void *args, unsigned gx,
                  unsigned gy, unsigned gz, unsigned threads, size_t smem, unsigned long long seed, char *err,
                  size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
