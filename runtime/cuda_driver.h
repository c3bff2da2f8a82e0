/* cuda_driver.h - a thin layer over the CUDA driver API, opened at run time with dlopen
 * (no link-time CUDA dependency, DESIGN.md decision 1): a context's device and its primary context,
 * cubin loading, kernel launch, device memory, copies and synchronization. Every driver
 * error becomes DA_ERR_DEVICE naming the call and the driver's error name and text. */
#ifndef DA_CUDA_DRIVER_H
#define DA_CUDA_DRIVER_H

#include <stddef.h>

#include "runtime/cuda_args.h"
#include "runtime/internal.h"

typedef struct da__cuda da__cuda; /* one a device, process-wide, never freed */

/* Open the driver once per process (thread-safe): $DILATTN_CUDA_LIB when set (and only
 * that), else libcuda.so.1; cuInit(0). Then ctx's device: on the context's first call,
 * the device of the CUDA context current on the calling thread (a framework's current
 * device), else device 0, kept for the context's life (ctx NULL: that choice each call);
 * set up once a process: its compute capability, SM count and retained primary context.
 * DA_ERR_UNSUPPORTED when unusable ("no CUDA driver: libcuda.so.1 not found", "CUDA
 * driver found but no GPU: cuInit returned 100 (CUDA_ERROR_NO_DEVICE: ...)"); the same
 * answer on every call. */
DA_HIDDEN da_status da__cuda_get(const da_context *ctx, da__cuda **out);
DA_HIDDEN int da__cuda_device_ordinal(const da__cuda *c);
/* DA_ERR_INVALID_ARGUMENT, saying why, where stream (a CUstream) belongs to another device
 * than c, or to a context of c's device other than its primary one (cuCtxCreate's): its
 * launches would fail in the driver with an unhelpful error. A green context's stream (its
 * context is the primary one), NULL, the legacy and per-thread default handles, and handles
 * the driver cannot place pass. */
DA_HIDDEN da_status da__cuda_check_stream(const da_context *ctx, da__cuda *c, void *stream);

DA_HIDDEN const char *da__cuda_arch(const da__cuda *c);        /* "sm_90" */
DA_HIDDEN const char *da__cuda_device_name(const da__cuda *c); /* "NVIDIA H100 80GB HBM3" */
DA_HIDDEN int da__cuda_driver_version(const da__cuda *c);      /* 13000 for 13.0 */
DA_HIDDEN int da__cuda_sm_count(const da__cuda *c);
DA_HIDDEN int da__cuda_max_smem_optin(const da__cuda *c); /* bytes of dynamic smem a block may opt into */

typedef struct {
  void *module;   /* CUmodule */
  void *function; /* CUfunction */
} da__cuda_kernel;

/* Load cubin (cuModuleLoadData) and get function_name; when dyn_smem > 48 KiB, raise the
 * function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to dyn_smem (more than the
 * device allows is DA_ERR_UNSUPPORTED). */
DA_HIDDEN da_status da__cuda_load(const da_context *ctx, da__cuda *c, const void *cubin,
                                  const char *function_name, int dyn_smem, da__cuda_kernel *out);
DA_HIDDEN void da__cuda_unload(da__cuda *c, da__cuda_kernel *k);
/* Whether this driver loads cubin (loaded, then unloaded): DA_OK, else the driver's refusal. */
DA_HIDDEN da_status da__cuda_probe(const da_context *ctx, da__cuda *c, const void *cubin);

/* cuLaunchKernel on stream (NULL: the default stream); params as cuLaunchKernel takes
 * them. Asynchronous: launch errors are reported here, execution errors at the next
 * synchronizing call. */
DA_HIDDEN da_status da__cuda_launch(const da_context *ctx, da__cuda *c, const da__cuda_kernel *k,
                                    unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned dyn_smem, void *stream,
                                    void **params);
/* The same, as a programmatic dependent launch when dependent (cuLaunchKernelEx with
 * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): the kernel may start while the
 * one before it on the stream finishes, and must run griddepcontrol.wait before it touches
 * what that one writes (or reads and it writes). Only where da__cuda_pdl says so. */
DA_HIDDEN da_status da__cuda_launch_ex(const da_context *ctx, da__cuda *c, const da__cuda_kernel *k,
                                       unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned dyn_smem, void *stream, void **params, int dependent);
/* The driver's encoder where the device takes tensor maps (sm_90 or later) and the driver
 * has it, unless DILATTN_TMA=0; else NULL (wgmma-ws-tma kernels then copy by cp.async). */
DA_HIDDEN da__tmap_encode_fn da__cuda_tmap_encoder(const da__cuda *c);
/* Whether programmatic dependent launches are available: an sm_90 or later device whose
 * driver has cuLaunchKernelEx, unless DILATTN_PDL=0. */
DA_HIDDEN int da__cuda_pdl(const da__cuda *c);

/* cuda.h's CUlaunchAttribute and CUlaunchConfig (64-bit ABI), mirrored: cuda.h is never
 * included here (test_cuda_abi compares the two where the toolkit is installed). */
#define DA__CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef struct {
  int id;
  char pad[4];
  union {
    char pad[64];
    unsigned long long align;
    int programmatic_stream_serialization_allowed;
  } value;
} da__cu_launch_attribute;
typedef struct {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes;
  void *stream;
  da__cu_launch_attribute *attrs;
  unsigned num_attrs;
} da__cu_launch_config;

/* cuda.h's CUmemPoolProps (64-bit ABI), mirrored likewise, and the values the library's
 * pool takes */
#define DA__CU_MEM_ALLOCATION_TYPE_PINNED 1
#define DA__CU_MEM_LOCATION_TYPE_DEVICE 1
typedef struct {
  int alloc_type;            /* CUmemAllocationType */
  int handle_types;          /* CUmemAllocationHandleType: none */
  int location_type, location_id; /* CUmemLocation */
  void *win32_security_attributes;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
} da__cu_mempool_props;

/* Device memory; the device pointer (CUdeviceptr) is carried as void*. 0 bytes gives
 * NULL and DA_OK; freeing NULL does nothing. */
DA_HIDDEN da_status da__cuda_malloc(const da_context *ctx, da__cuda *c, size_t bytes, void **dptr);
DA_HIDDEN void da__cuda_free(da__cuda *c, void *dptr);
/* Stream-ordered workspace from the library's own memory pool (release threshold raised:
 * after warm-up no allocation reaches the driver; the device's default pool is left to the
 * other libraries in the process), else the default pool as it is, else cuMemAlloc where
 * the driver lacks cuMemAllocAsync. da__cuda_free_async returns 0 when the caller must
 * synchronize stream and call da__cuda_free instead. da__cuda_trim_pool gives the pool's
 * unused memory back (da_context_destroy). */
DA_HIDDEN da_status da__cuda_malloc_async(const da_context *ctx, da__cuda *c, size_t bytes, void *stream,
                                          void **dptr);
DA_HIDDEN int da__cuda_free_async(da__cuda *c, void *dptr, void *stream);
DA_HIDDEN void da__cuda_trim_pool(const da_context *ctx); /* ctx's device's, where it took one */
/* Whether the driver has stream-ordered allocation and cuMemsetD32Async (a persistent
 * grid's counters are allocated, zeroed and freed on the stream); zero `words` 32-bit words
 * at dptr on stream (DA_ERR_UNSUPPORTED without the entry point). */
DA_HIDDEN int da__cuda_stream_ordered(const da__cuda *c);
/* The library's pool set up now (it is made at the first stream-ordered allocation
 * otherwise): plans that allocate at every execution (persistent grids' counters) make it
 * when they are created, not inside a caller's stream capture. */
DA_HIDDEN da_status da__cuda_pool_prepare(const da_context *ctx, da__cuda *c);
DA_HIDDEN da_status da__cuda_zero_async(const da_context *ctx, da__cuda *c, void *dptr, size_t words, void *stream);
DA_HIDDEN da_status da__cuda_memcpy_htod(const da_context *ctx, da__cuda *c, void *dst,
                                         const void *src, size_t bytes);
DA_HIDDEN da_status da__cuda_memcpy_dtoh(const da_context *ctx, da__cuda *c, void *dst,
                                         const void *src, size_t bytes);

/* Wait for stream (NULL: the whole context, cuCtxSynchronize). */
DA_HIDDEN da_status da__cuda_sync(const da_context *ctx, da__cuda *c, void *stream);

#endif
