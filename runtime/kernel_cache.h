/* kernel_cache.h - the in-memory kernel cache of a context: cache key -> loaded module,
 * thread-safe, with in-flight de-duplication (threads asking for a key being compiled
 * wait for that compile instead of starting another). */
#ifndef DA_KERNEL_CACHE_H
#define DA_KERNEL_CACHE_H

#include "runtime/host_compiler.h"

#include <pthread.h>

typedef struct da__kentry da__kentry;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  da__kentry *head;
  long long hits, misses, compiles;
} da__kernel_cache;

DA_HIDDEN int da__kernel_cache_init(da__kernel_cache *c);
DA_HIDDEN void da__kernel_cache_destroy(da__kernel_cache *c); /* unloads every module */

/* The kernel for key: from memory, or compiled from source now. The module is owned by
 * the cache and lives as long as it. */
DA_HIDDEN da_status da__kernel_cache_get_host(const da_context *ctx, da__kernel_cache *c,
                                              const char *key, const char *source,
                                              const char *symbol, da__host_kernel_fn *fn);

#endif
