/* pattern_cache.c - block tables of sparse layouts (SEMANTICS.md "Block sparsity"), built
 * on demand and kept in a bounded, thread-safe, reference-counted LRU (DESIGN.md
 * decision 6), plus the spec's resulting density.
 *
 * Key: every layout parameter the rule reads (unused ones zeroed, strides sorted and
 * de-duplicated, density as its threshold floor(density * 2^53)), the branch index, its
 * (w, r), N, the offset, and for explicit layouts the SHA-256 of the mask bytes the tables
 * read. Lookup: FNV-1a of the key picks a bucket, then the whole key is compared.
 *
 * Locking: one mutex guards the map, the LRU list and the stats; tables are built outside
 * it (two threads missing the same key may both build; the second keeps the first's).
 * Entries evicted while in use move to a "detached" list and are freed on last release.
 */
#include "runtime/pattern_cache.h"

#include "runtime/log.h"

#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_ENTRIES 256

/* Everything a pattern depends on. Only 8-byte fields and a 32-byte digest: no padding,
 * so memcmp and a byte hash over the struct are exact. */
typedef struct {
  int64_t layout, block, window, global, num_strides;
  int64_t strides[DA_MAX_STRIDES];
  uint64_t seed, threshold;
  int64_t branch, w, r, seq_len, offset;
  int64_t mask_blocks; /* explicit: side of the hashed top-left part of the mask */
  unsigned char mask_sha256[32];
} pkey;

typedef struct entry {
  da__pattern pat; /* first member: release maps a pattern back to its entry */
  pkey key;
  uint64_t hash;
  struct entry *hnext;       /* bucket chain */
  struct entry *prev, *next; /* LRU list (head = most recent) or the detached list */
  int64_t refs;              /* users holding pat */
  int cached;                /* in the map and LRU list; 0: evicted, freed on last release */
} entry;

struct da__pattern_cache {
  pthread_mutex_t mu;
  entry **buckets;
  size_t nbuckets; /* power of two */
  entry *head, *tail;
  entry *detached;
  size_t size, max_size;
  uint64_t hits, misses, evictions;
};

/* The block rule of one (spec, branch): the key's fields (strides ascending and distinct)
 * and, for explicit layouts, the mask. */
typedef struct {
  pkey k;
  const uint8_t *mask; /* nb x nb */
  int64_t nb;
} rule;

/* Segment structure of one (w, r, N, offset): see da__pattern in the header. */
typedef struct {
  int count;
  int64_t L[2];
  int64_t n_full, n_last;
} shape;

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void seg_shape(int64_t w, int64_t r, int64_t N, int64_t o, shape *s) {
  memset(s, 0, sizeof *s);
  int64_t nseg = N / w, rem = N % w;
  int64_t lfull = ceil_div(w - o, r); /* >= 1: o < r <= w */
  int64_t lrem = rem > o ? ceil_div(rem - o, r) : 0;
  if (nseg > 0 && lrem == lfull) { /* a ragged last segment with the full L: one table */
    nseg++;
    lrem = 0;
  }
  if (nseg > 0) s->L[s->count++] = lfull, s->n_full = nseg;
  if (lrem > 0) s->L[s->count++] = lrem, s->n_last = 1;
}

/* ---- block rule ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Writes one run [lo, hi] to out (when given); returns its length. */
static int64_t put_run(int64_t lo, int64_t hi, int64_t *out) {
  if (out)
    for (int64_t k = lo; k <= hi; k++) *out++ = k;
  return hi - lo + 1;
}

/* Appends x to out (when given) as element n. */
#define EMIT(x)              \
  do {                       \
    if (out) out[n] = (x);   \
    n++;                     \
  } while (0)

/* Key blocks row qb of an nqb-block table may see, ascending; written to out when out is
 * not NULL. Returns how many. Distances are compared as differences, never sums, so
 * windows and strides up to 2^63 cannot overflow. */
static int64_t row_blocks(const rule *ru, int64_t nqb, int64_t qb, int64_t *out) {
  const pkey *k = &ru->k;
  switch ((da_layout)k->layout) {
  case DA_LAYOUT_NONE:
  case DA_LAYOUT_DENSE:
    return put_run(0, nqb - 1, out);
  case DA_LAYOUT_LOCAL_WINDOW:
  case DA_LAYOUT_GLOBAL_LOCAL: {
    if (k->layout == DA_LAYOUT_GLOBAL_LOCAL && qb < k->global) return put_run(0, nqb - 1, out);
    int64_t lo = k->window >= qb ? 0 : qb - k->window;
    int64_t hi = k->window >= nqb - 1 - qb ? nqb - 1 : qb + k->window;
    if (k->layout == DA_LAYOUT_LOCAL_WINDOW) return put_run(lo, hi, out);
    int64_t g = min64(k->global, nqb); /* key blocks [0, g) are global */
    if (lo <= g) return put_run(0, hi, out);
    int64_t n = g > 0 ? put_run(0, g - 1, out) : 0;
    return n + put_run(lo, hi, out ? out + n : NULL);
  }
  case DA_LAYOUT_DILATED_SPARSE: {
    /* strides ascending and distinct: qb - s for descending s, qb, qb + s for ascending s
     * is already ascending and distinct. */
    int64_t n = 0;
    for (int j = (int)k->num_strides - 1; j >= 0; j--)
      if (k->strides[j] <= qb) EMIT(qb - k->strides[j]);
    EMIT(qb);
    for (int j = 0; j < k->num_strides; j++)
      if (k->strides[j] < nqb - qb) EMIT(qb + k->strides[j]);
    return n;
  }
  case DA_LAYOUT_RANDOM: {
    int64_t n = 0;
    for (int64_t kb = 0; kb < nqb; kb++) {
      uint64_t key = ((uint64_t)k->branch << 48) ^ ((uint64_t)qb << 24) ^ (uint64_t)kb;
      if (kb == qb || (splitmix64(k->seed ^ key) >> 11) < k->threshold) EMIT(kb);
    }
    return n;
  }
  case DA_LAYOUT_EXPLICIT: {
    int64_t n = 0;
    const uint8_t *m = ru->mask + qb * ru->nb; /* top-left nqb x nqb part: nqb <= nb */
    for (int64_t kb = 0; kb < nqb; kb++)
      if (m[kb]) EMIT(kb);
    return n;
  }
  }
  return 0;
}
#undef EMIT

/* ---- building a pattern ---------------------------------------------------------------- */

static int64_t table_block(const rule *ru, int64_t L) {
  return ru->k.layout == DA_LAYOUT_NONE ? L : ru->k.block;
}

/* Pass 1: the table's block count and pair count. `used` entries of the pattern's bound
 * are taken by its other table: refuses before any allocation, and counting stops as soon
 * as the bound is passed (rows are < 2^26 long: no overflow). */
static da_status table_size(const da_context *ctx, const rule *ru, int64_t L, int64_t used,
                            int64_t *nqb_out, int64_t *pairs_out) {
  const int64_t bs = table_block(ru, L), nqb = ceil_div(L, bs);
  const int64_t room = DA__PATTERN_MAX_ENTRIES - used;
  DA_RETURN_IF(nqb >= room, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: %lld query blocks (L = %lld, block %lld) exceed the bound of "
               "2^26 table entries; use a larger sparsity.block",
               (long long)nqb, (long long)L, (long long)bs);
  DA_RETURN_IF(ru->k.layout == DA_LAYOUT_RANDOM && nqb * nqb > DA__PATTERN_MAX_SCAN,
               DA_ERR_INVALID_ARGUMENT,
               "pattern cache: a random layout of %lld blocks per side needs %lld block tests, "
               "over the bound of 2^28; use a larger sparsity.block",
               (long long)nqb, (long long)(nqb * nqb));
  int64_t pairs = 0;
  for (int64_t qb = 0; qb < nqb; qb++) {
    pairs += row_blocks(ru, nqb, qb, NULL);
    DA_RETURN_IF(nqb + 1 + pairs > room, DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: the tables of L = %lld positions, block %lld exceed the bound "
                 "of 2^26 entries (row offsets plus allowed block pairs); use a larger "
                 "sparsity.block or a sparser layout",
                 (long long)L, (long long)bs);
  }
  *nqb_out = nqb;
  *pairs_out = pairs;
  return DA_OK;
}

/* Pass 2: rows into t->row_start / t->kb (already pointing into storage) and the exact
 * position-pair counts. Block b holds positions [b*bs, min((b+1)*bs, L)): all full but the
 * last. Blocks share one grid, so causal (c <= a) keeps every key of an earlier block, the
 * triangle of the diagonal block (nq == nk there) and nothing of a later block. Per row the
 * key sizes are summed first (each sum <= L <= 2^40), then multiplied with overflow checks. */
static da_status table_fill(const da_context *ctx, const rule *ru, da__block_table *t) {
  const int64_t bs = t->block, L = t->L, last = t->nqb - 1, last_size = L - last * bs;
  int64_t n = 0, pp = 0, ppc = 0, both, earlier, diag;
  int ovf = 0;
  for (int64_t qb = 0; qb < t->nqb; qb++) {
    t->row_start[qb] = n;
    int64_t cnt = row_blocks(ru, t->nqb, qb, t->kb + n);
    int64_t nq = qb == last ? last_size : bs, keys = 0, before = 0, has_diag = 0;
    for (const int64_t *kb = t->kb + n, *end = kb + cnt; kb < end; kb++) {
      int64_t nk = *kb == last ? last_size : bs;
      keys += nk;
      before += *kb < qb ? nk : 0;
      has_diag |= *kb == qb;
    }
    n += cnt;
    ovf |= __builtin_mul_overflow(nq, keys, &both);
    ovf |= __builtin_mul_overflow(nq, before, &earlier);
    ovf |= __builtin_add_overflow(pp, both, &pp);
    ovf |= __builtin_add_overflow(ppc, earlier, &ppc);
    if (has_diag) { /* nq (nq + 1) / 2, halving the even factor first */
      ovf |= __builtin_mul_overflow(nq % 2 ? nq : nq / 2, nq % 2 ? (nq + 1) / 2 : nq + 1, &diag);
      ovf |= __builtin_add_overflow(ppc, diag, &ppc);
    }
  }
  t->row_start[t->nqb] = n;
  t->pairs = n;
  t->pos_pairs = pp;
  t->pos_pairs_causal = ppc;
  DA_RETURN_IF(ovf, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: the position-pair count of a segment of L = %lld positions "
               "overflows int64",
               (long long)L);
  return DA_OK;
}

static da_status build_pattern(const da_context *ctx, const rule *ru, const shape *sh,
                               da__pattern *pat) {
  memset(pat, 0, sizeof *pat);
  int64_t nqb[2] = {0, 0}, pairs[2] = {0, 0}, total = 0;
  for (int i = 0; i < sh->count; i++) {
    DA_TRY(table_size(ctx, ru, sh->L[i], total, &nqb[i], &pairs[i]));
    total += nqb[i] + 1 + pairs[i];
  }
  if (total > 0) {
    pat->storage = malloc(sizeof(int64_t) * (size_t)total);
    DA_RETURN_IF(!pat->storage, DA_ERR_NO_MEMORY, "pattern cache: no memory for %lld table "
                 "entries", (long long)total);
  }
  pat->storage_len = total;
  pat->count = sh->count;
  pat->n_full = sh->n_full;
  pat->n_last = sh->n_last;
  int64_t at = 0;
  for (int i = 0; i < sh->count; i++) {
    da__block_table *t = &pat->seg[i];
    t->L = sh->L[i];
    t->block = table_block(ru, t->L);
    t->nqb = nqb[i];
    t->row_start = pat->storage + at;
    t->kb = t->row_start + nqb[i] + 1;
    at += nqb[i] + 1 + pairs[i];
    da_status st = table_fill(ctx, ru, t);
    if (st != DA_OK) {
      free(pat->storage);
      memset(pat, 0, sizeof *pat);
      return st;
    }
  }
  return DA_OK;
}

/* ---- keys ------------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Checks the spec fields the pattern reads and fills the rule, whose key is complete but
 * for the mask digest. Fields the layout does not read stay 0 in the key. */
static da_status make_rule(const da_context *ctx, const da_spec *spec, int branch, int64_t N,
                           int64_t o, rule *ru) {
  DA_RETURN_IF(spec->num_branches < 1 || spec->num_branches > DA_MAX_BRANCHES,
               DA_ERR_INVALID_ARGUMENT, "pattern cache: spec has %d branches (1 to %d)",
               spec->num_branches, DA_MAX_BRANCHES);
  DA_RETURN_IF(branch < 0 || branch >= spec->num_branches, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: branch %d is out of range (spec has %d)", branch,
               spec->num_branches);
  int64_t w = spec->segment_lengths[branch], r = spec->dilation_rates[branch];
  DA_RETURN_IF(w < 1 || w > DA__PATTERN_MAX_SEQ || r < 1 || r > w, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: branch %d has w = %lld, r = %lld (need 1 <= r <= w <= 2^40)",
               branch, (long long)w, (long long)r);
  DA_RETURN_IF(N < 0 || N > DA__PATTERN_MAX_SEQ, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: seq_len %lld is out of range (0 to 2^40)", (long long)N);
  DA_RETURN_IF(o < 0 || o >= r, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: offset %lld is out of range for branch %d (0 to %lld)",
               (long long)o, branch, (long long)(r - 1));
  const da_sparsity *sp = &spec->sparsity;
  DA_RETURN_IF((int)sp->layout < DA_LAYOUT_NONE || sp->layout > DA_LAYOUT_EXPLICIT,
               DA_ERR_INVALID_ARGUMENT, "pattern cache: sparsity.layout %d is unknown",
               (int)sp->layout);
  DA_RETURN_IF(sp->layout != DA_LAYOUT_NONE && sp->block < 1, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: sparsity.block %lld must be at least 1", (long long)sp->block);
  memset(ru, 0, sizeof *ru);
  pkey *k = &ru->k;
  k->layout = sp->layout;
  k->block = sp->layout == DA_LAYOUT_NONE ? 0 : sp->block; /* NONE has no block rule */
  k->branch = branch;
  k->w = w;
  k->r = r;
  k->seq_len = N;
  k->offset = o;
  switch (sp->layout) {
  case DA_LAYOUT_NONE:
  case DA_LAYOUT_DENSE:
    break;
  case DA_LAYOUT_GLOBAL_LOCAL:
    DA_RETURN_IF(sp->global < 0, DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: sparsity.global %lld is negative", (long long)sp->global);
    k->global = sp->global;
    /* fall through */
  case DA_LAYOUT_LOCAL_WINDOW:
    DA_RETURN_IF(sp->window < 0, DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: sparsity.window %lld is negative", (long long)sp->window);
    k->window = sp->window;
    break;
  case DA_LAYOUT_DILATED_SPARSE: {
    int n = sp->num_strides;
    DA_RETURN_IF(n < 0 || n > DA_MAX_STRIDES, DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: %d strides (0 to %d)", n, DA_MAX_STRIDES);
    for (int j = 0; j < n; j++) {
      DA_RETURN_IF(sp->strides[j] < 1, DA_ERR_INVALID_ARGUMENT,
                   "pattern cache: sparsity.strides[%d] = %lld must be at least 1", j,
                   (long long)sp->strides[j]);
      k->strides[j] = sp->strides[j];
    }
    /* The rule reads the stride set: sort, drop repeats, zero the rest (a canonical key). */
    qsort(k->strides, (size_t)n, sizeof(int64_t), cmp_i64);
    for (int j = 0; j < n; j++)
      if (k->num_strides == 0 || k->strides[k->num_strides - 1] != k->strides[j])
        k->strides[k->num_strides++] = k->strides[j];
    for (int j = (int)k->num_strides; j < DA_MAX_STRIDES; j++) k->strides[j] = 0;
    break;
  }
  case DA_LAYOUT_RANDOM:
    DA_RETURN_IF(!(sp->density >= 0.0 && sp->density <= 1.0), DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: sparsity.density %g is not in [0, 1]", sp->density);
    k->seed = sp->seed;
    /* floor(density * 2^53) is exact (scaling by a power of two); densities with the same
     * threshold give the same tables. */
    k->threshold = (uint64_t)floor(sp->density * 9007199254740992.0);
    break;
  case DA_LAYOUT_EXPLICIT:
    DA_RETURN_IF(!sp->explicit_masks[branch], DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: sparsity.explicit_masks[%d] is NULL", branch);
    ru->mask = sp->explicit_masks[branch];
    ru->nb = da_spec_explicit_blocks(spec, branch);
    break;
  }
  return DA_OK;
}

/* Explicit layouts: SHA-256 of the top-left side x side part of the mask (all the tables
 * read: the longest segment's L decides side), row by row. */
static da_status hash_mask(const da_context *ctx, rule *ru, int64_t side) {
  pkey *k = &ru->k;
  k->mask_blocks = side;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL);
  for (int64_t qb = 0; ok && qb < side; qb++)
    ok = EVP_DigestUpdate(md, ru->mask + qb * ru->nb, (size_t)side);
  unsigned int len = 0;
  ok = ok && EVP_DigestFinal_ex(md, k->mask_sha256, &len) && len == sizeof k->mask_sha256;
  EVP_MD_CTX_free(md);
  DA_RETURN_IF(!ok, DA_ERR_INTERNAL, "pattern cache: SHA-256 of an explicit mask failed");
  return DA_OK;
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* ---- the LRU map (callers hold pc->mu) ------------------------------------------------- */

static entry *map_find(da__pattern_cache *pc, const pkey *k, uint64_t h) {
  for (entry *e = pc->buckets[h & (pc->nbuckets - 1)]; e; e = e->hnext)
    if (e->hash == h && memcmp(&e->key, k, sizeof *k) == 0) return e;
  return NULL;
}

static void map_remove(da__pattern_cache *pc, entry *e) {
  entry **pp = &pc->buckets[e->hash & (pc->nbuckets - 1)];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  e->hnext = NULL;
}

/* Unlinks e from the list at *head (the LRU list with its tail, or the detached list,
 * tail NULL). */
static void list_unlink(entry **head, entry **tail, entry *e) {
  if (e->prev) e->prev->next = e->next;
  else *head = e->next;
  if (e->next) e->next->prev = e->prev;
  else if (tail) *tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_unlink(da__pattern_cache *pc, entry *e) { list_unlink(&pc->head, &pc->tail, e); }

static void lru_push_front(da__pattern_cache *pc, entry *e) {
  e->prev = NULL;
  e->next = pc->head;
  if (pc->head) pc->head->prev = e;
  pc->head = e;
  if (!pc->tail) pc->tail = e;
}

/* A new user of a cached entry: it becomes the most recently used. */
static const da__pattern *lru_take(da__pattern_cache *pc, entry *e) {
  e->refs++;
  lru_unlink(pc, e);
  lru_push_front(pc, e);
  return &e->pat;
}

/* Frees e and the entries after it (linked by next). */
static void free_chain(entry *e) {
  for (entry *n; e; e = n) {
    n = e->next;
    free(e->pat.storage);
    free(e);
  }
}

/* ---- public (library-internal) API ----------------------------------------------------- */

/* A positive decimal integer from the environment, else 0 (the default; a value that is
 * no such number says so). */
static size_t env_size(const char *name) {
  long v = 0;
  const char *e = getenv(name);
  if (da__parse_count(e, LONG_MAX, &v)) return (size_t)v;
  /* (ignored as if unset: the other name's value may follow, else the default) */
  if (e && *e) da__log(DA_LOG_WARN, "%s=%s is not a whole number of patterns; ignored", name, e);
  return 0;
}

da_status da__pattern_cache_create(size_t max_entries, da__pattern_cache **out) {
  if (!out) return DA_ERR_INVALID_ARGUMENT;
  if (max_entries == 0) max_entries = env_size("DILATTN_PATTERN_CACHE_MAX");
  if (max_entries == 0) max_entries = env_size("PATTERN_CACHE_MAX_SIZE");
  if (max_entries == 0) max_entries = DEFAULT_MAX_ENTRIES;
  da__pattern_cache *pc = calloc(1, sizeof *pc);
  if (!pc) return DA_ERR_NO_MEMORY;
  /* About two buckets per entry, capped: a huge bound must not allocate up front. */
  size_t want = max_entries < 32768 ? max_entries * 2 : 65536;
  pc->nbuckets = 16;
  while (pc->nbuckets < want) pc->nbuckets *= 2;
  pc->buckets = calloc(pc->nbuckets, sizeof *pc->buckets);
  if (!pc->buckets || pthread_mutex_init(&pc->mu, NULL) != 0) {
    free(pc->buckets);
    free(pc);
    return DA_ERR_NO_MEMORY;
  }
  pc->max_size = max_entries;
  *out = pc;
  return DA_OK;
}

void da__pattern_cache_destroy(da__pattern_cache *pc) {
  if (!pc) return;
  free_chain(pc->head);
  free_chain(pc->detached);
  free(pc->buckets);
  pthread_mutex_destroy(&pc->mu);
  free(pc);
}

da_status da__pattern_cache_get(const da_context *ctx, da__pattern_cache *pc,
                                const da_spec *spec, int branch, int64_t seq_len,
                                int64_t offset, const da__pattern **out) {
  DA_RETURN_IF(!pc || !spec || !out, DA_ERR_INVALID_ARGUMENT,
               "pattern cache: NULL %s", !pc ? "cache" : !spec ? "spec" : "out");
  rule ru;
  DA_TRY(make_rule(ctx, spec, branch, seq_len, offset, &ru));
  const pkey *key = &ru.k;
  shape sh;
  seg_shape(key->w, key->r, seq_len, offset, &sh);
  if (ru.k.layout == DA_LAYOUT_EXPLICIT && sh.count > 0) {
    /* seg[0]'s L is the larger one; its blocks cover every block the tables read. */
    int64_t side = ceil_div(sh.L[0], ru.k.block);
    DA_RETURN_IF(side > ru.nb, DA_ERR_INTERNAL, "pattern cache: %lld blocks exceed the mask's %lld",
                 (long long)side, (long long)ru.nb);
    DA_RETURN_IF(side >= DA__PATTERN_MAX_ENTRIES, DA_ERR_INVALID_ARGUMENT,
                 "pattern cache: explicit mask of %lld blocks per side exceeds the table bound "
                 "of 2^26 entries", (long long)side);
    DA_TRY(hash_mask(ctx, &ru, side));
  }
  uint64_t h = fnv1a(key, sizeof *key);

  pthread_mutex_lock(&pc->mu);
  entry *e = map_find(pc, key, h);
  if (e) {
    pc->hits++;
    *out = lru_take(pc, e);
    pthread_mutex_unlock(&pc->mu);
    return DA_OK;
  }
  pthread_mutex_unlock(&pc->mu);

  /* Miss: build outside the lock. */
  entry *ne = calloc(1, sizeof *ne);
  DA_RETURN_IF(!ne, DA_ERR_NO_MEMORY, "pattern cache: no memory for an entry");
  da_status st = build_pattern(ctx, &ru, &sh, &ne->pat);
  if (st != DA_OK) {
    free(ne);
    return st;
  }
  ne->key = *key;
  ne->hash = h;
  ne->refs = 1;

  pthread_mutex_lock(&pc->mu);
  pc->misses++; /* counted when a built pattern is handed out: hits + misses = gets served */
  e = map_find(pc, key, h);
  if (e) { /* another thread built it meanwhile: use theirs */
    *out = lru_take(pc, e);
    pthread_mutex_unlock(&pc->mu);
    free_chain(ne); /* ne->next is NULL: never linked */
    return DA_OK;
  }
  ne->cached = 1;
  ne->hnext = pc->buckets[h & (pc->nbuckets - 1)];
  pc->buckets[h & (pc->nbuckets - 1)] = ne;
  lru_push_front(pc, ne);
  pc->size++;
  entry *dead = NULL; /* evicted and unused: freed after unlocking */
  while (pc->size > pc->max_size) {
    entry *v = pc->tail; /* never ne: ne is the head and max_size >= 1 */
    lru_unlink(pc, v);
    map_remove(pc, v);
    v->cached = 0;
    pc->size--;
    pc->evictions++;
    if (v->refs == 0) {
      v->next = dead;
      dead = v;
    } else { /* still in use: detached until its last release */
      v->next = pc->detached;
      if (pc->detached) pc->detached->prev = v;
      pc->detached = v;
    }
  }
  pthread_mutex_unlock(&pc->mu);
  free_chain(dead);
  *out = &ne->pat;
  return DA_OK;
}

void da__pattern_cache_release(da__pattern_cache *pc, const da__pattern *p) {
  if (!pc || !p) return;
  entry *e = (entry *)(void *)p; /* pat is the first member of entry */
  pthread_mutex_lock(&pc->mu);
  int last = --e->refs == 0 && !e->cached;
  if (last) list_unlink(&pc->detached, NULL, e);
  pthread_mutex_unlock(&pc->mu);
  if (last) {
    e->next = NULL;
    free_chain(e);
  }
}

void da__pattern_cache_stats(da__pattern_cache *pc, da_pattern_cache_stats *out) {
  if (!pc || !out) return;
  pthread_mutex_lock(&pc->mu);
  out->size = pc->size;
  out->max_size = pc->max_size;
  out->hits = pc->hits;
  out->misses = pc->misses;
  out->evictions = pc->evictions;
  uint64_t n = pc->hits + pc->misses;
  out->hit_rate = n ? (double)pc->hits / (double)n : 0.0;
  pthread_mutex_unlock(&pc->mu);
}

/* ---- density --------------------------------------------------------------------------- */

/* Pairs of a segment of L positions with every pair allowed (causal: c <= a). */
static double all_pairs(int64_t L, int causal) {
  double l = (double)L;
  return causal ? l * (l + 1.0) / 2.0 : l * l;
}

/* How many segments use table s (see da__pattern): seg[0] serves the full segments, or
 * the lone last one when there are none; seg[1] the last one. */
static int64_t segs_using(int64_t n_full, int64_t n_last, int s) {
  return s == 0 && n_full > 0 ? n_full : n_last;
}

/* Adds to *num and *den `mult` heads' worth of branch `i` with offset o. */
static da_status add_branch(const da_context *ctx, da__pattern_cache *pc, const da_spec *spec,
                            int i, int64_t N, int64_t o, double mult, double *num, double *den) {
  shape sh;
  seg_shape(spec->segment_lengths[i], spec->dilation_rates[i], N, o, &sh);
  double d = 0.0;
  for (int s = 0; s < sh.count; s++)
    d += (double)segs_using(sh.n_full, sh.n_last, s) * all_pairs(sh.L[s], spec->causal);
  *den += mult * d;
  if (spec->sparsity.layout == DA_LAYOUT_NONE || spec->sparsity.layout == DA_LAYOUT_DENSE) {
    *num += mult * d; /* every pair allowed: no table needed */
    return DA_OK;
  }
  const da__pattern *p;
  DA_TRY(da__pattern_cache_get(ctx, pc, spec, i, N, o, &p));
  double a = 0.0;
  for (int s = 0; s < p->count; s++) {
    const da__block_table *t = &p->seg[s];
    int64_t pp = spec->causal ? t->pos_pairs_causal : t->pos_pairs;
    a += (double)segs_using(p->n_full, p->n_last, s) * (double)pp;
  }
  da__pattern_cache_release(pc, p);
  *num += mult * a;
  return DA_OK;
}

da_status da__pattern_density(const da_context *ctx, da__pattern_cache *pc, const da_spec *spec,
                              int64_t seq_len, double *density) {
  DA_RETURN_IF(!pc || !spec || !density, DA_ERR_INVALID_ARGUMENT,
               "pattern density: NULL argument");
  char msg[512];
  da_status vst = da_spec_validate(spec, msg, sizeof msg);
  DA_RETURN_IF(vst != DA_OK, vst, "pattern density: %s", msg);
  DA_RETURN_IF(seq_len < 0 || seq_len > DA__PATTERN_MAX_SEQ, DA_ERR_INVALID_ARGUMENT,
               "pattern density: seq_len %lld is out of range (0 to 2^40)", (long long)seq_len);
  const int64_t H = spec->num_heads, k = spec->num_branches;
  double num = 0.0, den = 0.0;
  if (spec->mode == DA_MODE_GROUPED) {
    /* Group g: H/k heads plus one if g < H % k, branch g, o = g % r_g. */
    for (int g = 0; g < k; g++) {
      int64_t heads = H / k + (g < H % k ? 1 : 0);
      if (heads > 0)
        DA_TRY(add_branch(ctx, pc, spec, g, seq_len, g % spec->dilation_rates[g], (double)heads,
                          &num, &den));
    }
  } else {
    /* Every head uses every branch; heads sharing an offset share a pattern. */
    int64_t offs[DA_MAX_HEADS];
    for (int i = 0; i < k; i++) {
      int64_t r = spec->dilation_rates[i];
      int64_t per = (H + r - 1) / r; /* block offsets: Hp / r = ceil(H / r) */
      for (int64_t h = 0; h < H; h++)
        offs[h] = spec->offsets == DA_OFFSETS_MOD ? h % r : h / per;
      qsort(offs, (size_t)H, sizeof offs[0], cmp_i64);
      for (int64_t h = 0, run; h < H; h += run) {
        for (run = 1; h + run < H && offs[h + run] == offs[h]; run++) {
        }
        DA_TRY(add_branch(ctx, pc, spec, i, seq_len, offs[h], (double)run, &num, &den));
      }
    }
  }
  *density = den > 0.0 ? num / den : 1.0; /* (no pair at all, seq_len 0: none dropped) */
  return DA_OK;
}
