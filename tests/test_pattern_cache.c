/* test_pattern_cache.c - the pattern cache (runtime/pattern_cache.c) against independent
 * brute force: every layout's block tables against da_ref_block_allowed (tests/reference.c)
 * exhaustively on small shapes (ragged N, explicit masks, random), position-pair counts,
 * the LRU bound and stats, per-N keys, entries held across eviction, the environment
 * variables, concurrent use, density, and refusal of oversized tables.
 *
 * Run (plain, then under ASan+UBSan and TSan):
 *   S="/work/main/runtime/pattern_cache.c /work/main/runtime/status.c /work/main/gen/spec.c \
 *      /work/main/tests/reference.c /work/main/tests/test_pattern_cache.c"
 *   F="-std=gnu11 -Wall -Wextra -I/work/main/include -I/work/main -I/work/main/tests"
 *   L="-ljansson -lcrypto -lpthread -lm"
 *   gcc $F -O2 $S $L -o /tmp/tpc && /tmp/tpc
 *   gcc $F -g -fsanitize=address,undefined $S $L -o /tmp/tpc_asan && /tmp/tpc_asan
 *   gcc $F -g -O1 -fsanitize=thread $S $L -o /tmp/tpc_tsan && /tmp/tpc_tsan
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include "runtime/pattern_cache.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "test_util.h"

/* the shared check/report harness, under the name these tests use */
#define CHECK TU_CHECK

static uint64_t rng = 12345;
static uint64_t next_rand(void) { return da_ref_splitmix64(rng++); }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static da_spec two_branch(int64_t w0, int64_t r0, int64_t w1, int64_t r1) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = w0;
  s.dilation_rates[0] = r0;
  s.segment_lengths[1] = w1;
  s.dilation_rates[1] = r1;
  return s;
}

static int layout_sparse(const da_spec *s) {
  return s->sparsity.layout != DA_LAYOUT_NONE && s->sparsity.layout != DA_LAYOUT_DENSE;
}

/* Whether dilated query a may see dilated key c under the spec's layout (reference). */
static int allowed(const da_spec *s, int br, int64_t a, int64_t c) {
  if (!layout_sparse(s)) return 1;
  int64_t bs = s->sparsity.block;
  return da_ref_block_allowed(s, br, a / bs, c / bs);
}

/* One table against brute force: the rows, the pair counts in dilated coordinates. */
static void check_table(const da_spec *s, int br, const da__block_table *t, const char *tag) {
  int64_t bs = s->sparsity.layout == DA_LAYOUT_NONE ? t->L : s->sparsity.block;
  CHECK(t->L >= 1 && t->block == bs && t->nqb == cdiv(t->L, bs), "%s: L %lld block %lld nqb %lld",
        tag, (long long)t->L, (long long)t->block, (long long)t->nqb);
  if (t->nqb != cdiv(t->L, bs)) return;
  int rows_ok = t->row_start[0] == 0;
  for (int64_t qb = 0; qb < t->nqb && rows_ok; qb++) {
    int64_t j = t->row_start[qb], end = t->row_start[qb + 1];
    for (int64_t kb = 0; kb < t->nqb; kb++) {
      if (!da_ref_block_allowed(s, br, qb, kb) && layout_sparse(s)) continue;
      if (j >= end || t->kb[j] != kb) rows_ok = 0; /* expected kb next, ascending */
      j++;
    }
    if (j != end) rows_ok = 0;
  }
  CHECK(rows_ok, "%s: rows differ from da_ref_block_allowed", tag);
  CHECK(t->pairs == t->row_start[t->nqb], "%s: pairs %lld", tag, (long long)t->pairs);
  int64_t pp = 0, ppc = 0;
  for (int64_t a = 0; a < t->L; a++)
    for (int64_t c = 0; c < t->L; c++)
      if (allowed(s, br, a, c)) {
        pp++;
        ppc += c <= a;
      }
  CHECK(t->pos_pairs == pp && t->pos_pairs_causal == ppc,
        "%s: pos_pairs %lld/%lld want %lld/%lld", tag, (long long)t->pos_pairs,
        (long long)t->pos_pairs_causal, (long long)pp, (long long)ppc);
}

/* A whole pattern: segment structure from positions, each table, storage layout, and the
 * attended (p, t) pairs counted in original positions (the reference's own walk). */
static void check_pattern(const da_spec *s, int br, int64_t N, int64_t o, const da__pattern *p) {
  char tag[160];
  snprintf(tag, sizeof tag, "layout %d bs %lld br %d (w %lld r %lld) N %lld o %lld",
           (int)s->sparsity.layout, (long long)s->sparsity.block, br,
           (long long)s->segment_lengths[br], (long long)s->dilation_rates[br], (long long)N,
           (long long)o);
  int64_t w = s->segment_lengths[br], r = s->dilation_rates[br];
  int64_t used[2] = {0, 0}, want_pp = 0, want_ppc = 0, got_pp = 0, got_ppc = 0;
  int ok = p->count >= 0 && p->count <= 2;
  for (int64_t s0 = 0; s0 < N && ok; s0 += w) {
    int64_t end = s0 + w < N ? s0 + w : N, L = 0;
    for (int64_t q = s0; q < end; q++) L += (q - s0) % r == o;
    int64_t idx = (s0 / w) < p->n_full ? 0 : p->count - 1;
    if (L == 0) { /* only the last segment may lack positions; it uses no table */
      ok = end == N && s0 / w >= p->n_full;
      continue;
    }
    ok = idx >= 0 && p->seg[idx].L == L;
    if (!ok) break;
    used[idx]++;
    got_pp += p->seg[idx].pos_pairs;
    got_ppc += p->seg[idx].pos_pairs_causal;
    for (int64_t q = s0 + o; q < end; q += r)
      for (int64_t t = s0 + o; t < end; t += r)
        if (allowed(s, br, (q - s0 - o) / r, (t - s0 - o) / r)) {
          want_pp++;
          want_ppc += t <= q;
        }
  }
  CHECK(ok, "%s: segment L / table choice wrong (count %d n_full %lld n_last %lld)", tag,
        p->count, (long long)p->n_full, (long long)p->n_last);
  if (!ok) return;
  if (p->count == 2) {
    CHECK(used[0] == p->n_full && used[1] == p->n_last && p->n_last == 1 &&
              p->seg[0].L != p->seg[1].L,
          "%s: segment counts", tag);
  } else if (p->count == 1) {
    CHECK(used[0] == p->n_full + p->n_last && p->n_last <= 1 && (p->n_full == 0 || p->n_last == 0),
          "%s: segment counts (one table)", tag);
  }
  CHECK(want_pp == got_pp && want_ppc == got_ppc, "%s: attended pairs %lld/%lld want %lld/%lld",
        tag, (long long)got_pp, (long long)got_ppc, (long long)want_pp, (long long)want_ppc);
  int64_t elems = 0;
  for (int i = 0; i < p->count; i++) {
    check_table(s, br, &p->seg[i], tag);
    CHECK(p->seg[i].row_start == p->storage + elems, "%s: table %d not in storage", tag, i);
    elems += p->seg[i].nqb + 1 + p->seg[i].pairs;
  }
  CHECK(elems == p->storage_len, "%s: storage_len %lld want %lld", tag,
        (long long)p->storage_len, (long long)elems);
}

/* ---- every layout, exhaustively on small shapes ------------------------------------------ */

static void fill_mask(uint8_t *m, int64_t nb, unsigned pct) {
  for (int64_t i = 0; i < nb * nb; i++) m[i] = (next_rand() % 100) < pct;
}

static void exhaustive(void) {
  static const int64_t wr[][2] = {{1, 1}, {4, 1},  {6, 2},  {7, 3}, {8, 4},
                                  {9, 2}, {10, 3}, {12, 5}, {5, 5}};
  const int nwr = (int)(sizeof wr / sizeof wr[0]);
  da__pattern_cache *pc;
  CHECK(da__pattern_cache_create(100000, &pc) == DA_OK, "create");
  uint8_t masks[2][64];
  int nspec = 0;
  for (int lay = DA_LAYOUT_NONE; lay <= DA_LAYOUT_EXPLICIT; lay++)
    for (int variant = 0; variant < 3; variant++)
      for (int64_t bs = 1; bs <= 3; bs++)
        for (int a = 0; a < nwr; a++) {
          int b = (a * 5 + 3) % nwr; /* a different (w, r) in branch 1 */
          da_spec s = two_branch(wr[a][0], wr[a][1], wr[b][0], wr[b][1]);
          da_sparsity *sp = &s.sparsity;
          sp->layout = (da_layout)lay;
          sp->block = bs;
          sp->window = variant;
          sp->global = (variant + 1) % 3;
          static const int64_t strides[3][3] = {{2, 0, 0}, {1, 3, 3}, {5, 2, 0}};
          sp->num_strides = variant == 0 ? 1 : variant == 1 ? 3 : 2;
          memcpy(sp->strides, strides[variant], sizeof strides[variant]);
          sp->seed = next_rand();
          sp->density = variant == 0 ? 0.0 : variant == 1 ? 0.3 : 1.0;
          for (int i = 0; i < 2; i++) {
            int64_t nb = da_spec_explicit_blocks(&s, i);
            fill_mask(masks[i], nb, variant == 2 ? 100 : 45);
            sp->explicit_masks[i] = masks[i];
          }
          nspec++;
          for (int br = 0; br < 2; br++) {
            int64_t w = s.segment_lengths[br], r = s.dilation_rates[br];
            for (int64_t N = 0; N <= 2 * w + 3; N++)
              for (int64_t o = 0; o < r; o++) {
                const da__pattern *p = NULL;
                da_status st = da__pattern_cache_get(NULL, pc, &s, br, N, o, &p);
                CHECK(st == DA_OK, "get: %s", da_context_last_error(NULL));
                if (st == DA_OK) check_pattern(&s, br, N, o, p);
                da__pattern_cache_release(pc, p);
              }
          }
        }
  da_pattern_cache_stats ps;
  da__pattern_cache_stats(pc, &ps);
  CHECK(ps.evictions == 0 && ps.size == ps.misses, "exhaustive: size %zu misses %llu", ps.size,
        (unsigned long long)ps.misses);
  printf("exhaustive: %d specs, %zu patterns, %llu hits\n", nspec, ps.size,
         (unsigned long long)ps.hits);
  da__pattern_cache_destroy(pc);
}

/* Named shapes the header promises, and explicit masks as part of the key. */
static void shapes_and_masks(void) {
  da__pattern_cache *pc;
  da__pattern_cache_create(64, &pc);
  da_spec s = two_branch(8, 2, 8, 4);
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.block = 1;
  const da__pattern *p;
  /* ragged, two distinct L: w 8 r 2 o 0, N 11: L 4 (one full) and 2 (last) */
  da__pattern_cache_get(NULL, pc, &s, 0, 11, 0, &p);
  CHECK(p->count == 2 && p->seg[0].L == 4 && p->seg[1].L == 2 && p->n_full == 1 && p->n_last == 1,
        "ragged two L");
  da__pattern_cache_release(pc, p);
  /* ragged, same L: w 8 r 4 o 0, N 15: the last 7 positions still hold 2 */
  da__pattern_cache_get(NULL, pc, &s, 1, 15, 0, &p);
  CHECK(p->count == 1 && p->seg[0].L == 2 && p->n_full == 2 && p->n_last == 0, "ragged same L");
  da__pattern_cache_release(pc, p);
  /* ragged, no position of offset 3 in the last 2 */
  da__pattern_cache_get(NULL, pc, &s, 1, 10, 3, &p);
  CHECK(p->count == 1 && p->n_full == 1 && p->n_last == 0, "ragged empty last");
  da__pattern_cache_release(pc, p);
  /* N < w: one table for the lone last segment */
  da__pattern_cache_get(NULL, pc, &s, 0, 5, 1, &p);
  CHECK(p->count == 1 && p->seg[0].L == 2 && p->n_full == 0 && p->n_last == 1, "N < w");
  da__pattern_cache_release(pc, p);
  da__pattern_cache_get(NULL, pc, &s, 0, 0, 1, &p);
  CHECK(p->count == 0 && p->storage_len == 0, "N = 0");
  da__pattern_cache_release(pc, p);

  /* explicit: w 16 r 1 bs 2 -> nb 8; at N 6 the tables read the top-left 3 x 3 only */
  da_spec e = two_branch(16, 1, 16, 1);
  e.sparsity.layout = DA_LAYOUT_EXPLICIT;
  e.sparsity.block = 2;
  uint8_t m[64], m2[64];
  fill_mask(m, 8, 50);
  e.sparsity.explicit_masks[0] = e.sparsity.explicit_masks[1] = m;
  const da__pattern *a, *b, *c;
  da_pattern_cache_stats st0, st1;
  da__pattern_cache_get(NULL, pc, &e, 0, 6, 0, &a);
  memcpy(m2, m, sizeof m);
  e.sparsity.explicit_masks[0] = m2; /* same bytes elsewhere: a hit */
  da__pattern_cache_stats(pc, &st0);
  da__pattern_cache_get(NULL, pc, &e, 0, 6, 0, &b);
  da__pattern_cache_stats(pc, &st1);
  CHECK(a == b && st1.hits == st0.hits + 1, "explicit: same bytes, other address, is a hit");
  da__pattern_cache_release(pc, b);
  m2[7 * 8 + 7] ^= 1; /* outside the part read at N 6: still the same tables */
  da__pattern_cache_get(NULL, pc, &e, 0, 6, 0, &b);
  CHECK(a == b, "explicit: a byte the tables never read does not change the key");
  da__pattern_cache_release(pc, b);
  m2[1 * 8 + 2] ^= 1; /* inside: a new key, and the table follows the new mask */
  da__pattern_cache_get(NULL, pc, &e, 0, 6, 0, &c);
  CHECK(c != a, "explicit: a changed mask byte is a new key (never a false hit)");
  check_pattern(&e, 0, 6, 0, c);
  check_pattern(&e, 1, 6, 0, a); /* branch 1 still points at m: a is its table */
  da__pattern_cache_release(pc, c);
  da__pattern_cache_release(pc, a);
  /* stride order and repeats do not matter; branch is part of the key */
  da_spec d1 = two_branch(32, 1, 32, 1), d2;
  d1.sparsity.layout = DA_LAYOUT_DILATED_SPARSE;
  d1.sparsity.block = 4;
  d1.sparsity.num_strides = 3;
  d1.sparsity.strides[0] = 3, d1.sparsity.strides[1] = 1, d1.sparsity.strides[2] = 3;
  d2 = d1;
  d2.sparsity.num_strides = 2;
  d2.sparsity.strides[0] = 1, d2.sparsity.strides[1] = 3;
  da__pattern_cache_get(NULL, pc, &d1, 0, 32, 0, &a);
  da__pattern_cache_get(NULL, pc, &d2, 0, 32, 0, &b);
  da__pattern_cache_get(NULL, pc, &d2, 1, 32, 0, &c);
  CHECK(a == b && c != a, "dilated_sparse: stride set canonical, branch in the key");
  check_pattern(&d1, 0, 32, 0, a);
  da__pattern_cache_release(pc, a);
  da__pattern_cache_release(pc, b);
  da__pattern_cache_release(pc, c);
  da__pattern_cache_destroy(pc);
}

/* ---- LRU, stats, per-N keys, held entries --------------------------------------------------- */

static da_spec lw_spec(void) {
  da_spec s = two_branch(8, 2, 16, 4);
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.block = 2;
  s.sparsity.window = 1;
  return s;
}

/* get + release; returns 1 on a hit (from the stats). */
static int touch(da__pattern_cache *pc, const da_spec *s, int64_t N) {
  da_pattern_cache_stats a, b;
  const da__pattern *p;
  da__pattern_cache_stats(pc, &a);
  CHECK(da__pattern_cache_get(NULL, pc, s, 0, N, 0, &p) == DA_OK, "touch get");
  da__pattern_cache_stats(pc, &b);
  da__pattern_cache_release(pc, p);
  return b.hits == a.hits + 1;
}

static void expect_stats(da__pattern_cache *pc, size_t size, size_t max, uint64_t hits,
                         uint64_t misses, uint64_t ev, const char *tag) {
  da_pattern_cache_stats s;
  da__pattern_cache_stats(pc, &s);
  double rate = hits + misses ? (double)hits / (double)(hits + misses) : 0.0;
  CHECK(s.size == size && s.max_size == max && s.hits == hits && s.misses == misses &&
            s.evictions == ev && s.hit_rate == rate,
        "%s: stats size %zu/%zu hits %llu misses %llu evictions %llu rate %g", tag, s.size,
        s.max_size, (unsigned long long)s.hits, (unsigned long long)s.misses,
        (unsigned long long)s.evictions, s.hit_rate);
}

static void lru(void) {
  da__pattern_cache *pc;
  da__pattern_cache_create(3, &pc);
  da_spec s = lw_spec();
  expect_stats(pc, 0, 3, 0, 0, 0, "empty");
  /* keys A..D are N = 16..19 */
  CHECK(!touch(pc, &s, 16) && !touch(pc, &s, 17) && !touch(pc, &s, 18), "A B C miss");
  expect_stats(pc, 3, 3, 0, 3, 0, "A B C");
  CHECK(touch(pc, &s, 16), "A hits");           /* LRU order now B (oldest), C, A */
  CHECK(!touch(pc, &s, 19), "D misses");        /* evicts B */
  expect_stats(pc, 3, 3, 1, 4, 1, "D evicts");
  CHECK(touch(pc, &s, 18) && touch(pc, &s, 16) && touch(pc, &s, 19), "C A D still held");
  expect_stats(pc, 3, 3, 4, 4, 1, "after hits");
  CHECK(!touch(pc, &s, 17), "B was the one evicted"); /* evicts C (oldest: C, A, D) */
  CHECK(!touch(pc, &s, 18), "then C was evicted");    /* evicts A */
  CHECK(touch(pc, &s, 19) && touch(pc, &s, 17), "D and B remain");
  expect_stats(pc, 3, 3, 6, 6, 3, "final");

  /* same layout at a new N: a table of its own, never one built for another N */
  const da__pattern *p16, *p24, *p17;
  da__pattern_cache_get(NULL, pc, &s, 0, 16, 0, &p16);
  da__pattern_cache_get(NULL, pc, &s, 0, 24, 0, &p24);
  da__pattern_cache_get(NULL, pc, &s, 0, 17, 1, &p17);
  CHECK(p16 != p24 && p16 != p17 && p24 != p17, "distinct N: distinct patterns");
  CHECK(p16->n_full == 2 && p24->n_full == 3 && p17->n_full == 2 && p17->n_last == 0,
        "per-N segment counts");
  check_pattern(&s, 0, 16, 0, p16);
  check_pattern(&s, 0, 24, 0, p24);
  check_pattern(&s, 0, 17, 1, p17);
  da__pattern_cache_release(pc, p16);
  da__pattern_cache_release(pc, p24);
  da__pattern_cache_release(pc, p17);
  da__pattern_cache_destroy(pc);

  /* an entry in use survives its eviction until released (ASan: no use after free) */
  da__pattern_cache_create(1, &pc);
  const da__pattern *a, *b, *a2;
  da__pattern_cache_get(NULL, pc, &s, 0, 20, 0, &a);
  da__pattern_cache_get(NULL, pc, &s, 0, 21, 0, &b); /* evicts a's entry while in use */
  expect_stats(pc, 1, 1, 0, 2, 1, "held entry evicted");
  check_pattern(&s, 0, 20, 0, a); /* still readable */
  da__pattern_cache_get(NULL, pc, &s, 0, 20, 0, &a2); /* a miss: rebuilt, evicts b */
  CHECK(a2 != a, "an evicted entry is not found again");
  expect_stats(pc, 1, 1, 0, 3, 2, "rebuild");
  da__pattern_cache_release(pc, a);
  check_pattern(&s, 0, 21, 0, b);
  da__pattern_cache_release(pc, b);
  check_pattern(&s, 0, 20, 0, a2);
  da__pattern_cache_release(pc, a2);
  da__pattern_cache_release(pc, NULL);
  expect_stats(pc, 1, 1, 0, 3, 2, "after releases");
  da__pattern_cache_destroy(pc);
  da__pattern_cache_destroy(NULL);
}

static size_t max_with_env(const char *d, const char *p, size_t arg) {
  if (d) setenv("DILATTN_PATTERN_CACHE_MAX", d, 1);
  else unsetenv("DILATTN_PATTERN_CACHE_MAX");
  if (p) setenv("PATTERN_CACHE_MAX_SIZE", p, 1);
  else unsetenv("PATTERN_CACHE_MAX_SIZE");
  da__pattern_cache *pc;
  if (da__pattern_cache_create(arg, &pc) != DA_OK) return 0;
  da_pattern_cache_stats s;
  da__pattern_cache_stats(pc, &s);
  da__pattern_cache_destroy(pc);
  return s.max_size;
}

static void env(void) {
  CHECK(max_with_env(NULL, NULL, 0) == 256, "default 256");
  CHECK(max_with_env("7", NULL, 0) == 7, "DILATTN_PATTERN_CACHE_MAX");
  CHECK(max_with_env(NULL, "9", 0) == 9, "PATTERN_CACHE_MAX_SIZE");
  CHECK(max_with_env("7", "9", 0) == 7, "DILATTN_ name wins");
  CHECK(max_with_env("abc", "9", 0) == 9, "invalid first falls to the second");
  CHECK(max_with_env("0", NULL, 0) == 256, "0 is invalid");
  CHECK(max_with_env("-3", NULL, 0) == 256, "negative is invalid");
  CHECK(max_with_env("12x", "", 0) == 256, "trailing junk, empty: invalid");
  CHECK(max_with_env("99999999999999999999999", NULL, 0) == 256, "overflow is invalid");
  CHECK(max_with_env("7", "9", 5) == 5, "argument beats env");
  unsetenv("DILATTN_PATTERN_CACHE_MAX");
  unsetenv("PATTERN_CACHE_MAX_SIZE");
}

/* ---- threads ------------------------------------------------------------------------------ */

enum { NTHREADS = 4, NKEYS = 8, ITERS = 4000 };
static da__pattern_cache *tpc;
static da_spec tspec;
static int64_t twant[NKEYS][3]; /* per key N = 16 + i: n_full, pairs, pos_pairs of seg[0] */

static void *hammer(void *arg) {
  uint64_t st = (uint64_t)(uintptr_t)arg * 7919;
  int bad = 0;
  const da__pattern *held = NULL;
  for (int it = 0; it < ITERS; it++) {
    int k = (int)(da_ref_splitmix64(st++) % NKEYS);
    const da__pattern *p;
    if (da__pattern_cache_get(NULL, tpc, &tspec, 0, 16 + k, 0, &p) != DA_OK) {
      bad++;
      continue;
    }
    const da__block_table *t = &p->seg[0];
    if (p->n_full != twant[k][0] || t->pairs != twant[k][1] || t->pos_pairs != twant[k][2] ||
        t->kb[t->pairs - 1] != t->nqb - 1)
      bad++;
    /* hold every other pattern across the next get: evictions of entries in use */
    if (held) da__pattern_cache_release(tpc, held);
    held = it % 2 ? p : NULL;
    if (!held) da__pattern_cache_release(tpc, p);
  }
  if (held) da__pattern_cache_release(tpc, held);
  return (void *)(intptr_t)bad;
}

static void threads(void) {
  tspec = lw_spec();
  da__pattern_cache_create(3, &tpc);
  for (int k = 0; k < NKEYS; k++) {
    const da__pattern *p;
    da__pattern_cache_get(NULL, tpc, &tspec, 0, 16 + k, 0, &p);
    twant[k][0] = p->n_full;
    twant[k][1] = p->seg[0].pairs;
    twant[k][2] = p->seg[0].pos_pairs;
    da__pattern_cache_release(tpc, p);
  }
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    pthread_create(&th[i], NULL, hammer, (void *)(uintptr_t)(i + 1));
  intptr_t bad = 0;
  for (int i = 0; i < NTHREADS; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += (intptr_t)r;
  }
  da_pattern_cache_stats s;
  da__pattern_cache_stats(tpc, &s);
  CHECK(bad == 0, "threads: %ld bad patterns", (long)bad);
  CHECK(s.hits + s.misses == NTHREADS * ITERS + NKEYS && s.size <= 3 && s.evictions > 0,
        "threads: hits %llu misses %llu size %zu", (unsigned long long)s.hits,
        (unsigned long long)s.misses, s.size);
  da__pattern_cache_destroy(tpc);
}

/* ---- density ------------------------------------------------------------------------------ */

/* Independent brute force over positions (SEMANTICS.md "Branch key sets" and "Modes"). */
static double brute_density(const da_spec *s, int64_t N) {
  double num = 0, den = 0;
  int64_t H = s->num_heads, k = s->num_branches;
  for (int64_t h = 0; h < H; h++)
    for (int i = 0; i < k; i++) {
      int64_t w = s->segment_lengths[i], r = s->dilation_rates[i], o;
      if (s->mode == DA_MODE_GROUPED) {
        int64_t g = 0, start = 0;
        while (h >= start + H / k + (g < H % k)) start += H / k + (g < H % k), g++;
        if (g != i) continue;
        o = g % r;
      } else {
        o = s->offsets == DA_OFFSETS_MOD ? h % r : h / cdiv(H, r);
      }
      for (int64_t q = 0; q < N; q++)
        for (int64_t t = 0; t < N; t++) {
          int64_t s0 = q / w * w;
          if (t / w * w != s0 || (q - s0) % r != o || (t - s0) % r != o) continue;
          if (s->causal && t > q) continue;
          den++;
          num += allowed(s, i, (q - s0 - o) / r, (t - s0 - o) / r);
        }
    }
  return den > 0 ? num / den : 1.0; /* (no pair at all: none dropped) */
}

static void density(void) {
  da__pattern_cache *pc;
  da__pattern_cache_create(16, &pc);
  double d = -1;
  /* hand count: w 8 r 1 N 8, blocks of 2, window 0: 4 diagonal 2x2 blocks = 16 of 64;
   * causal: 4 x 3 = 12 of 36. */
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 1;
  s.segment_lengths[0] = 8;
  s.dilation_rates[0] = 1;
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.block = 2;
  CHECK(da__pattern_density(NULL, pc, &s, 8, &d) == DA_OK && d == 0.25, "density %g want 0.25", d);
  s.causal = 1;
  CHECK(da__pattern_density(NULL, pc, &s, 8, &d) == DA_OK && d == 12.0 / 36.0, "causal %g", d);
  CHECK(da__pattern_density(NULL, pc, &s, 0, &d) == DA_OK && d == 1.0, "N 0: %g (want 1: no pair dropped)", d);
  s.sparsity.layout = DA_LAYOUT_NONE;
  CHECK(da__pattern_density(NULL, pc, &s, 8, &d) == DA_OK && d == 1.0, "none: %g", d);
  s.num_heads = 0;
  CHECK(da__pattern_density(NULL, pc, &s, 8, &d) == DA_ERR_INVALID_SPEC, "invalid spec refused");

  /* random specs against brute force: modes, offsets, causal, ragged N, every layout */
  uint8_t masks[3][256];
  for (int trial = 0; trial < 120; trial++) {
    da_spec t;
    da_spec_init(&t);
    t.num_branches = 1 + (int)(next_rand() % 3);
    for (int i = 0; i < t.num_branches; i++) {
      t.segment_lengths[i] = 1 + (int64_t)(next_rand() % 12);
      t.dilation_rates[i] = 1 + (int64_t)(next_rand() % (uint64_t)t.segment_lengths[i]);
    }
    t.mode = next_rand() % 2 ? DA_MODE_GROUPED : DA_MODE_LONGNET;
    t.offsets = next_rand() % 2 ? DA_OFFSETS_BLOCK : DA_OFFSETS_MOD;
    t.causal = (int)(next_rand() % 2);
    t.num_heads = 1 + (int)(next_rand() % 7);
    t.num_kv_heads = 1; /* (multi-query: the density does not depend on it) */
    t.sparsity.layout = (da_layout)(trial % 7);
    t.sparsity.block = 1 + (int64_t)(next_rand() % 3);
    t.sparsity.window = (int64_t)(next_rand() % 2);
    t.sparsity.global = (int64_t)(next_rand() % 2);
    t.sparsity.num_strides = 2;
    t.sparsity.strides[0] = 2, t.sparsity.strides[1] = 3;
    t.sparsity.seed = next_rand();
    t.sparsity.density = 0.4;
    for (int i = 0; i < t.num_branches; i++) {
      fill_mask(masks[i], da_spec_explicit_blocks(&t, i), 40);
      t.sparsity.explicit_masks[i] = masks[i];
    }
    int64_t N = (int64_t)(next_rand() % 30);
    double want = brute_density(&t, N);
    da_status st = da__pattern_density(NULL, pc, &t, N, &d);
    CHECK(st == DA_OK && fabs(d - want) < 1e-12, "density trial %d: %g want %g (%s)", trial, d,
          want, da_context_last_error(NULL));
  }
  da__pattern_cache_destroy(pc);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void refusals(void) {
  da__pattern_cache *pc;
  da__pattern_cache_create(8, &pc);
  const da__pattern *p = NULL;
  da_spec s = two_branch((int64_t)1 << 14, 1, (int64_t)1 << 30, 1);
  s.sparsity.layout = DA_LAYOUT_DENSE;
  s.sparsity.block = 1;
  /* 2^14 blocks per side, dense: 2^28 pairs */
  da_status st = da__pattern_cache_get(NULL, pc, &s, 0, (int64_t)1 << 14, 0, &p);
  CHECK(st == DA_ERR_INVALID_ARGUMENT && p == NULL && strstr(da_context_last_error(NULL), "2^26"),
        "dense 2^28 pairs refused: %d %s", (int)st, da_context_last_error(NULL));
  /* 2^30 query blocks: refused before any work */
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  st = da__pattern_cache_get(NULL, pc, &s, 1, (int64_t)1 << 30, 0, &p);
  CHECK(st == DA_ERR_INVALID_ARGUMENT && p == NULL, "2^30 blocks refused");
  /* random needs nqb^2 tests: 2^15 blocks per side is over the scan bound */
  s.segment_lengths[0] = (int64_t)1 << 15;
  s.sparsity.layout = DA_LAYOUT_RANDOM;
  s.sparsity.density = 0.0;
  st = da__pattern_cache_get(NULL, pc, &s, 0, (int64_t)1 << 15, 0, &p);
  CHECK(st == DA_ERR_INVALID_ARGUMENT && p == NULL, "random scan bound");
  /* no sparsity on a 2^40 segment: L^2 overflows int64 */
  s.segment_lengths[1] = (int64_t)1 << 40;
  s.sparsity.layout = DA_LAYOUT_NONE;
  st = da__pattern_cache_get(NULL, pc, &s, 1, (int64_t)1 << 40, 0, &p);
  CHECK(st == DA_ERR_INVALID_ARGUMENT && p == NULL, "pos_pairs overflow refused");
  /* the bound is exact: local_window 0, block 1 needs 2 L + 1 entries (offsets and pairs) */
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.window = 0;
  s.segment_lengths[1] = ((int64_t)1 << 25) - 1;
  st = da__pattern_cache_get(NULL, pc, &s, 1, s.segment_lengths[1], 0, &p);
  CHECK(st == DA_OK && p->storage_len == ((int64_t)1 << 26) - 1, "2^26 - 1 entries accepted");
  da__pattern_cache_release(pc, p);
  p = NULL;
  s.segment_lengths[1] = (int64_t)1 << 25;
  st = da__pattern_cache_get(NULL, pc, &s, 1, s.segment_lengths[1], 0, &p);
  CHECK(st == DA_ERR_INVALID_ARGUMENT && p == NULL, "2^26 + 1 entries refused");
  /* but a large well-formed table is fine: 2^20 positions, blocks of 64, window 1 */
  s.segment_lengths[1] = (int64_t)1 << 20;
  s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  s.sparsity.block = 64;
  s.sparsity.window = 1;
  st = da__pattern_cache_get(NULL, pc, &s, 1, (int64_t)1 << 20, 0, &p);
  int64_t nqb = 16384;
  CHECK(st == DA_OK && p->seg[0].nqb == nqb && p->seg[0].pairs == 3 * nqb - 2 &&
            p->seg[0].pos_pairs == (3 * nqb - 2) * 64 * 64 &&
            p->seg[0].pos_pairs_causal == (nqb - 1) * 64 * 64 + nqb * 64 * 65 / 2,
        "large local_window table");
  da__pattern_cache_release(pc, p);
  /* bad arguments */
  p = NULL;
  CHECK(da__pattern_cache_get(NULL, pc, &s, 2, 16, 0, &p) == DA_ERR_INVALID_ARGUMENT, "branch 2");
  CHECK(da__pattern_cache_get(NULL, pc, &s, -1, 16, 0, &p) == DA_ERR_INVALID_ARGUMENT, "branch -1");
  CHECK(da__pattern_cache_get(NULL, pc, &s, 0, -1, 0, &p) == DA_ERR_INVALID_ARGUMENT, "N -1");
  CHECK(da__pattern_cache_get(NULL, pc, &s, 0, 16, 1, &p) == DA_ERR_INVALID_ARGUMENT, "o >= r");
  CHECK(da__pattern_cache_get(NULL, pc, &s, 0, 16, 0, NULL) == DA_ERR_INVALID_ARGUMENT, "out NULL");
  s.sparsity.layout = DA_LAYOUT_EXPLICIT;
  CHECK(da__pattern_cache_get(NULL, pc, &s, 0, 16, 0, &p) == DA_ERR_INVALID_ARGUMENT && p == NULL,
        "explicit without a mask");
  expect_stats(pc, 2, 8, 0, 2, 0, "refusals leave the cache alone");
  da__pattern_cache_destroy(pc);
}

/* ---- a context's cache, through the public API ---------------------------------------------- */

/* da_context_pattern_cache_stats (never called by any test): the context's own cache, its
 * bound from DILATTN_PATTERN_CACHE_MAX, and the lookups da_plan_density makes through it */
static void context_stats(void) {
  char dir[] = "/tmp/dilattn-test-pc-XXXXXX", cmd[200];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("DILATTN_CACHE_DIR", dir, 1); /* (a host kernel is compiled: not into the user's cache) */
  setenv("DILATTN_PATTERN_CACHE_MAX", "5", 1);
  da_context *ctx = NULL;
  CHECK(da_context_create(&ctx) == DA_OK, "context");
  unsetenv("DILATTN_PATTERN_CACHE_MAX");
  da_pattern_cache_stats s;
  memset(&s, 0xff, sizeof s);
  CHECK(da_context_pattern_cache_stats(ctx, &s) == DA_OK && s.size == 0 && s.max_size == 5 && s.hits == 0 &&
            s.misses == 0 && s.evictions == 0 && s.hit_rate == 0.0,
        "a new context's pattern cache: size %zu, max %zu (want 5), hits %llu, misses %llu", s.size, s.max_size,
        (unsigned long long)s.hits, (unsigned long long)s.misses);
  CHECK(da_context_pattern_cache_stats(NULL, &s) == DA_ERR_INVALID_ARGUMENT &&
            da_context_pattern_cache_stats(ctx, NULL) == DA_ERR_INVALID_ARGUMENT,
        "NULL context or out accepted");
  da_spec sp = two_branch(16, 1, 32, 2);
  sp.num_heads = 2, sp.num_kv_heads = 2, sp.head_dim = 8;
  sp.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, sp.sparsity.block = 4, sp.sparsity.window = 1;
  da_plan *p = NULL;
  CHECK(da_plan_create(ctx, &sp, DA_BACKEND_HOST, &p) == DA_OK, "plan: %s", da_context_last_error(ctx));
  double d1 = -1, d2 = -1;
  da_pattern_cache_stats a, b;
  memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
  CHECK(p && da_plan_density(p, 64, &d1) == DA_OK && d1 > 0 && d1 < 1, "density %g", d1);
  da_context_pattern_cache_stats(ctx, &a);
  CHECK(a.misses > 0 && a.size == (a.misses < 5 ? a.misses : 5) && a.max_size == 5 && a.hits + a.misses > 0,
        "after one density: size %zu, hits %llu, misses %llu", a.size, (unsigned long long)a.hits,
        (unsigned long long)a.misses);
  CHECK(p && da_plan_density(p, 64, &d2) == DA_OK && d2 == d1, "density again %g, %g", d2, d1);
  da_context_pattern_cache_stats(ctx, &b);
  CHECK(b.misses == a.misses && b.hits > a.hits && b.size == a.size &&
            fabs(b.hit_rate - (double)b.hits / (double)(b.hits + b.misses)) < 1e-12,
        "the same density again: hits %llu -> %llu, misses %llu -> %llu, hit rate %g",
        (unsigned long long)a.hits, (unsigned long long)b.hits, (unsigned long long)a.misses,
        (unsigned long long)b.misses, b.hit_rate);
  da_plan_destroy(p);
  da_context_destroy(ctx);
  unsetenv("DILATTN_CACHE_DIR");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "rm %s", dir);
}

int main(void) {
  exhaustive();
  shapes_and_masks();
  lru();
  env();
  threads();
  density();
  refusals();
  context_stats();
  return tu_report();
}
