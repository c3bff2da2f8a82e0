/* pool.h - host memory pool: bucketed reuse of workspace and tile buffers. */
#ifndef DA_POOL_H
#define DA_POOL_H

#include <stddef.h>

#include "runtime/internal.h"

typedef struct da__pool da__pool;

DA_HIDDEN da__pool *da__pool_create(void); /* NULL on out of memory; reads DILATTN_POOL */
DA_HIDDEN void da__pool_destroy(da__pool *p);
/* At least bytes (aligned like malloc); NULL on out of memory. */
DA_HIDDEN void *da__pool_alloc(da__pool *p, size_t bytes);
/* Give back a block from da__pool_alloc with the same bytes. */
DA_HIDDEN void da__pool_free(da__pool *p, void *mem, size_t bytes);
DA_HIDDEN void da__pool_stats(da__pool *p, da_pool_stats *out);

#endif
