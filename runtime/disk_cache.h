/* disk_cache.h - the on-disk kernel cache (DESIGN.md decision 5), shared by host shared
 * objects and cubins: $DILATTN_CACHE_DIR/v1/<arch>/<2 hex>/<key>.{bin,json}. */
#ifndef DA_DISK_CACHE_H
#define DA_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/internal.h"

typedef struct da__disk_cache da__disk_cache;

/* Open the cache at $DILATTN_CACHE_DIR (default $XDG_CACHE_HOME/dilattn, else
 * ~/.cache/dilattn), creating it 0700. Never fails: an unusable folder gives a cache in
 * memory-only mode (every lookup misses, writes are dropped) and one warning. */
DA_HIDDEN da__disk_cache *da__disk_cache_open(void);
/* The folder the cache uses as DILATTN_CACHE_DIR, XDG_CACHE_HOME and HOME choose it (the
 * entries are in its v1/); "" when none is set. Creates nothing. Returns the length the
 * folder's name needs: at least cap, or past DA_CACHE_BASE_MAX, it is too long for the
 * cache (base then holds as much as fits; the cache is memory-only). */
#define DA_CACHE_BASE_MAX 3900
DA_HIDDEN size_t da__disk_cache_base(char *base, size_t cap);
DA_HIDDEN void da__disk_cache_close(da__disk_cache *dc);
DA_HIDDEN int da__disk_cache_usable(const da__disk_cache *dc);
/* Usable and taking writes: a put that failed (a full disk, a folder turned read-only)
 * stops the puts after it, for the cache's life, but not the lookups. */
DA_HIDDEN int da__disk_cache_writable(const da__disk_cache *dc);
DA_HIDDEN const char *da__disk_cache_root(const da__disk_cache *dc); /* ".../v1" */

/* Look key up, holding its lock (da__disk_cache_lock). A hit verifies the entry (size and
 * SHA-256 recorded in its .json) and returns 1 with the artifact's path in path (cap bytes)
 * and, when data is not NULL, a malloc'ed copy of its bytes. A corrupt or truncated entry
 * is removed, logged, and is a miss (0). A hit refreshes the entry's time for LRU
 * eviction. */
DA_HIDDEN int da__disk_cache_get(da__disk_cache *dc, const char *arch, const char *key, char *path,
                                 size_t cap, void **data, size_t *size);
/* da__disk_cache_get without the lock: a corrupt entry stays, and is -1 (a plain miss: 0).
 * Another process may be rewriting it (put renames the new .bin into place before its
 * .json), so only a look under the entry's lock may remove it. */
DA_HIDDEN int da__disk_cache_peek(da__disk_cache *dc, const char *arch, const char *key, char *path, size_t cap,
                                  void **data, size_t *size);

/* Another compiler's build of the same source: a verified entry of arch, under a key other
 * than key, that put recorded as source_key's (a marker in <arch>/src/), newest first among
 * those accept (NULL: any) takes; accept sees the entry's path, the compiler its metadata
 * names ("compiler"; "" where it names none) and its bytes. 1 with its path and a malloc'ed
 * copy of its bytes, as da__disk_cache_get (its time refreshed); -1 where such a build was
 * there but refused or unreadable; 0 where there is none. For a process that cannot compile
 * the kernel (DILATTN_DISABLE_JIT, no NVRTC, no CC); lists one folder of markers (a 256th of
 * the source keys'), removing those whose entry is gone. */
DA_HIDDEN int da__disk_cache_find_source(da__disk_cache *dc, const char *arch, const char *key, const char *source_key,
                                         da__artifact_accept accept, void *user, char *path, size_t cap, void **data,
                                         size_t *size);

/* Store an artifact atomically (temp file in the same folder, fsync, rename; the .json,
 * written last, commits the entry). source_key (NULL: none) is recorded in the .json and by a
 * marker for da__disk_cache_find_source; meta is extra JSON members ("\"kernel\":\"...\"")
 * or NULL. Then evicts least recently used entries above $DILATTN_CACHE_MAX_BYTES (default
 * 4 GiB). A failure (unwritable, full disk) switches the cache to memory-only with a
 * warning; returns 0 on success, -1 otherwise. path receives the artifact's path. */
DA_HIDDEN int da__disk_cache_put(da__disk_cache *dc, const char *arch, const char *key,
                                 const void *data, size_t size, const char *source_key, const char *meta,
                                 char *path, size_t cap);

/* Cross-process lock of one key (flock on <key>.lock): returns a descriptor >= 0, or -1
 * (no lock: the caller proceeds without, as in memory-only mode). */
DA_HIDDEN int da__disk_cache_lock(da__disk_cache *dc, const char *arch, const char *key);
DA_HIDDEN void da__disk_cache_unlock(int fd);

/* Maintenance (dilattn cache ...). Each entry visited once; callbacks get the entry's
 * arch, key, artifact size, mtime and the .json text. */
typedef struct {
  uint64_t entries, bytes, corrupt, removed, removed_bytes; /* removed_bytes: by a clear */
} da__disk_cache_summary;
typedef void (*da__disk_cache_visit)(void *user, const char *arch, const char *key, uint64_t size,
                                     int64_t mtime, const char *json);
DA_HIDDEN void da__disk_cache_scan(da__disk_cache *dc, int verify, int remove_all,
                                   da__disk_cache_visit visit, void *user, da__disk_cache_summary *sum);
DA_HIDDEN uint64_t da__disk_cache_max_bytes(void);

#endif
