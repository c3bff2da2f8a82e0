/* internal.h - what every part of the library shares and users never see: the error
 * macros (DA_RETURN_IF, DA_TRY), the error sink, and hidden visibility for da__ names. */
#ifndef DA_INTERNAL_H
#define DA_INTERNAL_H

#include <stdint.h>

#include "dilattn.h"

#define DA_HIDDEN __attribute__((visibility("hidden")))
#define DA_ERROR_MAX 8192

/* Record the detail of a failure for ctx (may be NULL) on this thread; returns st. */
DA_HIDDEN da_status da__set_error(const da_context *ctx, da_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
DA_HIDDEN void da__clear_error(const da_context *ctx);
/* A number of bytes from the environment (env.c): decimal digits only (no sign, no space),
 * then optionally K, M, G or T (powers of 1024; "iB" or "B" after it allowed). 1 with *out
 * set (0 included), or 0 where malformed or 2^64 - 1 bytes or more. */
DA_HIDDEN int da__parse_bytes(const char *s, uint64_t *out);
/* A count from the environment: decimal digits only, at most max. 1 with *out set, or 0. */
DA_HIDDEN int da__parse_count(const char *s, long max, long *out);
/* Milliseconds of the monotonic clock (differences time compiles, executions, sweeps) */
DA_HIDDEN double da__now_ms(void);

/* The backend a plan created with `want` runs on (runtime/plan.c): want itself, or for
 * DA_BACKEND_AUTO the DILATTN_BACKEND's choice, else CUDA where a driver, a GPU and NVRTC
 * are usable, else host. DA_ERR_INVALID_ARGUMENT for a bad value; CUDA asked for and not
 * usable: the reason. */
DA_HIDDEN da_status da__pick_backend(const da_context *ctx, da_backend want, da_backend *got);
/* DILATTN_BACKEND as a backend: AUTO where unset or empty, (da_backend)-1 where invalid */
DA_HIDDEN da_backend da__backend_env(void);
/* The instruction of a CUDA plan whose options leave cuda_mma 0 (runtime/plan.c): opts
 * itself where it names one or no wgmma path applies (env_mma: DILATTN_CUDA_MMA parsed, 0
 * unset or auto, 1 sync; serves: da__cuda_wgmma_device_serves, 0 the wgmma paths do not
 * serve the spec on this device, 1 they do, 2 they do and the driver and NVRTC take kernel
 * parameters past 4 KiB, the tensor maps'), else *eff, a copy with DILATTN_CUDA_MMA's wgmma
 * variant or the default one (serves 2: wgmma-ws-tma, 1: wgmma-ws; sparse: wgmma-ws).
 * *fallbacks: what the plan may fall back to where *eff's kernel fails softly, in order:
 * DA__FALLBACK_WS where the default (not DILATTN_CUDA_MMA) chose wgmma-ws-tma, the default
 * before it; DA__FALLBACK_SYNC where opts sets a tunable (mma.sync, what such options had). */
#define DA__FALLBACK_SYNC 1
#define DA__FALLBACK_WS 2
DA_HIDDEN const da_plan_options *da__default_mma(const da_plan_options *opts, int env_mma, int serves, int sparse,
                                                 da_plan_options *eff, int *fallbacks);
/* DILATTN_WORKSPACE_LIMIT in bytes (SIZE_MAX: unset); DA_ERR_INVALID_ARGUMENT where malformed. */
DA_HIDDEN da_status da__workspace_limit(const da_context *ctx, size_t *bytes);
/* The context's CUDA device ordinal, -1 until da__cuda_get takes one (atomically) */
DA_HIDDEN int *da__context_cuda_device(const da_context *ctx);

/* The online CPUs (at least 1). */
DA_HIDDEN int da__online_cpus(void);
/* Threads for NVRTC compiles (gen, tune; ~120 MB each): requested where > 0, else the
 * online CPUs, at most 16. */
DA_HIDDEN int da__compile_threads(int requested);
/* The most threads da__parallel_for runs (gen and tune's --threads: at most this) */
#define DA_MAX_THREADS 64
/* fn(user, i) for every i in [0, n), claimed in order by up to `threads` threads (0: the
 * online CPUs; at most DA_MAX_THREADS), the caller one of them (runtime/parallel.c). fn returning
 * nonzero: no item not yet claimed starts. Returns the number of items started. */
DA_HIDDEN int da__parallel_for(int n, int threads, int (*fn)(void *user, int i), void *user);

/* Whether a build of a kernel by another compiler than this process's (a bundle's, the
 * disk cache's) is taken: it sees where the artifact is from (a bundle's origin, a file),
 * the compiler recorded with it (a host module's CC; "" where the record names none; NULL
 * for a bundle's cubin) and its verified bytes; 1 takes it (bundle.h, disk_cache.h). */
typedef int (*da__artifact_accept)(void *user, const char *origin, const char *compiler, const void *bytes, size_t n);

/* Return status st with a formatted detail when cond holds. Needs a `ctx` in scope. */
#define DA_RETURN_IF(cond, st, ...)                  \
  do {                                               \
    if (cond) return da__set_error(ctx, (st), __VA_ARGS__); \
  } while (0)

/* Forward a failed status (its detail is already recorded). */
#define DA_TRY(expr)                    \
  do {                                  \
    da_status da__st = (expr);          \
    if (da__st != DA_OK) return da__st; \
  } while (0)

#endif
