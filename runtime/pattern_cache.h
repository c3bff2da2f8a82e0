/* pattern_cache.h - the pattern cache (DESIGN.md decision 6): a sparse layout becomes
 * block tables, one pattern per (layout parameters, branch, N, offset), kept in a bounded,
 * thread-safe LRU with stats {size, max_size, hits, misses, evictions, hit_rate}.
 *
 * Tables live in host memory in one flat int64 buffer per pattern (da__pattern.storage),
 * so a device copy is one memcpy plus rebasing the row_start / kb pointers by their
 * offset from storage. The block rule is SEMANTICS.md "Block sparsity", in dilated
 * coordinates; causal masking is NOT applied to the tables (the kernel decides which
 * block pairs it makes partial), only counted in pos_pairs_causal.
 */
#ifndef DA_PATTERN_CACHE_H
#define DA_PATTERN_CACHE_H

#include "runtime/internal.h"

#include <stddef.h>
#include <stdint.h>

/* Most int64 entries (row offsets plus key blocks, both tables) one pattern may hold:
 * larger patterns are refused with DA_ERR_INVALID_ARGUMENT rather than allocated
 * (2^26 entries = 512 MiB; building one that size takes about a second). */
#define DA__PATTERN_MAX_ENTRIES ((int64_t)1 << 26)
/* The random layout tests every (qb, kb) pair (twice: count, then fill): most tests one
 * table may take, nqb^2 <= 2^28, i.e. nqb <= 16384 (about 1.7 s at the bound on a slow
 * 2-core VM). Explicit masks are scanned too, but their nb^2 bytes already exist. */
#define DA__PATTERN_MAX_SCAN ((int64_t)1 << 28)
/* Longest sequence accepted (the runtime's bound on N). */
#define DA__PATTERN_MAX_SEQ ((int64_t)1 << 40)

/* Block table of one (spec layout, branch, seq_len, offset): in branch `branch`'s dilated
 * coordinates, for the offset class `offset`, segments have L = ceil((seg_len - offset) / r)
 * positions (the last segment of a ragged N is shorter: its table is built for its own L;
 * the pattern holds one table per DISTINCT L needed at this N - at most two: full
 * segments and the last one). For each query block qb (0 .. ceil(L / block) - 1): the
 * ascending key blocks kb it may see (layout rule only; causal is NOT applied here);
 * whether the causal mask makes a block pair partial is left to the kernel. */
typedef struct {
  int64_t L;                /* dilated positions in the segment (>= 1) */
  int64_t block;            /* block size of this table: spec's sparsity.block, except
                               layout NONE, which has no block rule: one block of L */
  int64_t nqb;              /* ceil(L / block) */
  int64_t *row_start;       /* nqb + 1 offsets into kb[] */
  int64_t *kb;              /* key blocks, ascending within a row */
  int64_t pairs;            /* allowed (qb, kb) block pairs = row_start[nqb] */
  int64_t pos_pairs;        /* allowed (query position, key position) pairs, non-causal,
                               exact (edge blocks counted with their real sizes) */
  int64_t pos_pairs_causal; /* same with t <= p applied (c <= a) */
} da__block_table;

/* The tables of one key. Segment s (0-based, in position order) uses seg[0] when
 * s < n_full, and seg[count - 1] when s is the one last, shorter segment (n_last == 1).
 * So: N a multiple of w: count 1, n_last 0. Ragged N: count 2, n_full = N / w, n_last 1
 * (seg[1] is the last segment's table) - unless the last segment's L equals the full L
 * (then count 1 and n_full counts it) or is 0 (no position of this offset: the segment
 * needs no table and is in neither count). N < w: count 1, n_full 0, n_last 1, seg[0] is
 * the last (only) segment's. N == 0: count 0. */
typedef struct {
  int count;
  da__block_table seg[2];
  int64_t n_full, n_last; /* how many segments use each */
  int64_t *storage;       /* every table's row_start and kb, in one buffer */
  int64_t storage_len;    /* int64 elements in storage */
} da__pattern;

typedef struct da__pattern_cache da__pattern_cache;

/* max_entries 0: $DILATTN_PATTERN_CACHE_MAX, else $PATTERN_CACHE_MAX_SIZE, else 256. An
 * env value that is not a positive decimal integer is ignored (as if unset). Returns
 * DA_OK, DA_ERR_INVALID_ARGUMENT (out NULL) or DA_ERR_NO_MEMORY (no error text: there is
 * no context yet). */
DA_HIDDEN da_status da__pattern_cache_create(size_t max_entries, da__pattern_cache **out);
/* Frees the cache and every pattern; every pattern must have been released. NULL: no-op. */
DA_HIDDEN void da__pattern_cache_destroy(da__pattern_cache *pc);

/* The pattern for (spec's layout, branch, seq_len, offset), built on a miss. Thread-safe.
 * The returned pattern is reference-counted: call da__pattern_cache_release when done; an
 * entry in use is never freed by eviction (it is freed when its last user releases it
 * after eviction). Layout NONE/DENSE: still valid (every pair allowed). Explicit masks are
 * part of the key (SHA-256 of the part of the branch's mask the tables read: never a
 * false hit). Returns DA_OK, DA_ERR_INVALID_ARGUMENT (bad argument or spec field, a table
 * over DA__PATTERN_MAX_ENTRIES / DA__PATTERN_MAX_SCAN, an int64 pos_pairs overflow),
 * DA_ERR_NO_MEMORY, DA_ERR_INTERNAL (hashing failed); the detail is recorded for ctx. */
DA_HIDDEN da_status da__pattern_cache_get(const da_context *ctx, da__pattern_cache *pc,
                                          const da_spec *spec, int branch, int64_t seq_len,
                                          int64_t offset, const da__pattern **out);
/* Give back a pattern from da__pattern_cache_get. p NULL: no-op. */
DA_HIDDEN void da__pattern_cache_release(da__pattern_cache *pc, const da__pattern *p);
DA_HIDDEN void da__pattern_cache_stats(da__pattern_cache *pc, da_pattern_cache_stats *out);

/* Density of the spec at seq_len: attended (query, key) pairs over all branches and heads
 * (with causal when the spec is causal) divided by the same count with no sparsity -
 * "report the resulting density, never a nominal one". Uses the cache for sparse layouts
 * (one lookup per distinct (branch, offset)); NONE and DENSE are 1 without tables.
 * seq_len 0 gives 0. The spec must pass da_spec_validate. */
DA_HIDDEN da_status da__pattern_density(const da_context *ctx, da__pattern_cache *pc,
                                        const da_spec *spec, int64_t seq_len, double *density);

#endif /* DA_PATTERN_CACHE_H */
