/* kernel_cache.h - the in-memory kernel cache of a context: cache key -> loaded module,
 * thread-safe, with in-flight de-duplication (threads asking for a key being compiled
 * wait for that compile instead of starting another). */
#ifndef DA_KERNEL_CACHE_H
#define DA_KERNEL_CACHE_H

#include "runtime/bundle.h"
#include "runtime/disk_cache.h"
#include "runtime/host_compiler.h"

#include <pthread.h>

typedef struct da__kentry da__kentry;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  da__kentry *head;
  long long hits, misses, compiles; /* memory hits, memory misses, artifacts produced */
  long long disk_hits, builds;      /* of the misses: found on disk, compiled here */
  long long bundle_hits;            /* of the misses: found in a registered AOT bundle */
  /* of the entries held (compiles): where each came from, the builds' time (under mu;
   * da_context_kernel_cache_stats. The counts above are of lookups: one whose module then
   * failed to load counts there, and again at the next try) */
  long long held_bundle, held_disk, held_built;
  double held_build_ms;
  da__disk_cache *disk;             /* memory-only when unusable */
  da__bundles *bundles;             /* registered AOT bundles */
} da__kernel_cache;

/* Where a payload came from (da__kernel_cache_find_or_build) */
typedef enum { DA__FROM_NONE, DA__FROM_BUNDLE, DA__FROM_DISK, DA__FROM_BUILD } da__korigin;
typedef struct {
  da__korigin origin;
  double build_ms; /* DA__FROM_BUILD: the compile's wall time */
} da__kfrom;

/* What an entry holds: a loaded host module, or an artifact (a cubin) as bytes. */
typedef struct {
  da__host_module host;
  void *blob;
  size_t blob_size;
  da__kfrom from; /* set by produce (find_or_build's) */
} da__kpayload;

/* Builds the payload of a missing key (a compile). */
typedef da_status (*da__kproduce)(const da_context *ctx, void *arg, da__kpayload *out);

DA_HIDDEN int da__kernel_cache_init(da__kernel_cache *c);
/* DILATTN_DISABLE_JIT is set (not empty, not 0): a kernel in no bundle and not on disk is
 * DA_ERR_UNSUPPORTED. */
DA_HIDDEN int da__jit_disabled(void);
DA_HIDDEN void da__kernel_cache_destroy(da__kernel_cache *c); /* unloads and frees all */

/* The payload for key: from memory, or produced now (once, however many threads ask at
 * the same time). *out is owned by the cache and lives as long as it. */
DA_HIDDEN da_status da__kernel_cache_get(const da_context *ctx, da__kernel_cache *c,
                                         const char *key, da__kproduce produce, void *arg,
                                         const da__kpayload **out);

/* Bundles, disk, then build (DESIGN.md's lookup order after memory): look (arch, key) up
 * in the registered AOT bundles, then on disk; then a bundle's artifact of the same
 * source_key for arch that another compiler built (another NVRTC or CC than the one key
 * names: a bundle must serve where its compiler is not), where accept (NULL: any) takes
 * it; on a miss take the key's cross-process lock, look again, else call build (which
 * returns malloc'ed bytes, or fails with *no_compiler set where there is no compiler here to
 * run: no NVRTC, one too old for the kernel, no CC) and store them with source_key. Where
 * nothing compiles (DILATTN_DISABLE_JIT, or *no_compiler) the disk cache's build of
 * source_key by another compiler is taken (accept, which sees the compiler it records). With
 * DILATTN_DISABLE_JIT set a kernel found nowhere is an error naming it. Returns the bytes (malloc'ed) and the entry's path on
 * disk ("" when not on disk), and in *from (NULL: not asked) where they came from. */
typedef da_status (*da__kbuild)(const da_context *ctx, void *arg, void **bytes, size_t *n, int *no_compiler);
DA_HIDDEN da_status da__kernel_cache_find_or_build(const da_context *ctx, da__kernel_cache *c,
                                                   const char *arch, const char *key, const char *source_key,
                                                   const char *kernel, da__kbuild build, void *arg,
                                                   da__artifact_accept accept, const char *meta, void **bytes,
                                                   size_t *n, char *path, size_t cap, da__kfrom *from);

/* Host kernels: compile source and resolve symbol on a miss. */
DA_HIDDEN da_status da__kernel_cache_get_host(const da_context *ctx, da__kernel_cache *c,
                                              const char *key, const char *source,
                                              const char *symbol, const da__host_module **mod);

/* The context's kernel cache (tests and tools read its counters). */
DA_HIDDEN da__kernel_cache *da__context_kernels(da_context *ctx);

#endif
