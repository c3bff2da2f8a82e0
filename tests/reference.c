/* reference.c - naive float64 dilated attention, straight from spec/SEMANTICS.md.
 *
 * For each (batch, query position p, head h) we walk every branch the head uses, list
 * that branch's key set for p (same segment, same offset residue, causal, block
 * sparsity in dilated coordinates) and take one softmax over the multiset union of
 * those keys with a two-pass, max-subtracted log-sum-exp in double. Readable over fast:
 * O(B * N * H * keys * D).
 *
 * Run its test:
 *   gcc -std=c11 -O2 -Wall -Wextra -I/work/main/include -I/work/main/tests \
 *     /work/main/tests/reference.c /work/main/tests/test_reference.c -lm \
 *     -o /tmp/test_reference && /tmp/test_reference /work/shared/golden
 */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t da_ref_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t abs_i64(int64_t x) { return x < 0 ? -x : x; }

int da_ref_block_allowed(const da_spec *spec, int branch, int64_t qb, int64_t kb) {
  const da_sparsity *sp = &spec->sparsity;
  int64_t dist = abs_i64(qb - kb);
  switch (sp->layout) {
  case DA_LAYOUT_NONE:
  case DA_LAYOUT_DENSE:
    return 1;
  case DA_LAYOUT_LOCAL_WINDOW:
    return dist <= sp->window;
  case DA_LAYOUT_GLOBAL_LOCAL:
    return dist <= sp->window || kb < sp->global || qb < sp->global;
  case DA_LAYOUT_DILATED_SPARSE:
    if (kb == qb) return 1;
    for (int s = 0; s < sp->num_strides; s++)
      if (dist == sp->strides[s]) return 1;
    return 0;
  case DA_LAYOUT_RANDOM: {
    if (qb == kb) return 1;
    uint64_t key = ((uint64_t)branch << 48) ^ ((uint64_t)qb << 24) ^ (uint64_t)kb;
    uint64_t draw = da_ref_splitmix64(sp->seed ^ key) >> 11;
    /* floor(density * 2^53): exact, density * 2^53 is a power-of-two scaling. */
    uint64_t threshold = (uint64_t)floor(sp->density * 9007199254740992.0);
    return draw < threshold;
  }
  case DA_LAYOUT_EXPLICIT: {
    if (branch < 0 || branch >= spec->num_branches || sp->block < 1) return 0;
    const uint8_t *mask = sp->explicit_masks[branch];
    int64_t w = spec->segment_lengths[branch], r = spec->dilation_rates[branch];
    int64_t nb = ceil_div(ceil_div(w, r), sp->block);
    if (mask == NULL || qb < 0 || kb < 0 || qb >= nb || kb >= nb) return 0;
    return mask[qb * nb + kb] != 0;
  }
  }
  return 0;
}

/* The checks the reference relies on; da_spec_validate is not ours to call. */
static int spec_ok(const da_spec *spec) {
  if (spec->num_branches < 1 || spec->num_branches > DA_MAX_BRANCHES) return 0;
  for (int i = 0; i < spec->num_branches; i++) {
    int64_t w = spec->segment_lengths[i], r = spec->dilation_rates[i];
    if (w < 1 || r < 1 || r > w) return 0;
  }
  if (spec->mode != DA_MODE_LONGNET && spec->mode != DA_MODE_GROUPED) return 0;
  if (spec->offsets != DA_OFFSETS_MOD && spec->offsets != DA_OFFSETS_BLOCK) return 0;
  if (spec->num_heads < 1 || spec->num_kv_heads < 1) return 0;
  if (spec->num_heads % spec->num_kv_heads != 0) return 0;
  if (spec->head_dim < 1 || spec->head_dim > DA_MAX_HEAD_DIM) return 0;
  if (spec->has_scale && !isfinite(spec->scale)) return 0;
  const da_sparsity *sp = &spec->sparsity;
  switch (sp->layout) {
  case DA_LAYOUT_NONE:
  case DA_LAYOUT_DENSE: /* no block rule: block is never read */
    return 1;
  case DA_LAYOUT_LOCAL_WINDOW:
    return sp->block >= 1 && sp->window >= 0;
  case DA_LAYOUT_GLOBAL_LOCAL:
    return sp->block >= 1 && sp->window >= 0 && sp->global >= 0;
  case DA_LAYOUT_DILATED_SPARSE:
    return sp->block >= 1 && sp->num_strides >= 0 && sp->num_strides <= DA_MAX_STRIDES;
  case DA_LAYOUT_RANDOM:
    return sp->block >= 1 && sp->density >= 0.0 && sp->density <= 1.0;
  case DA_LAYOUT_EXPLICIT:
    if (sp->block < 1) return 0;
    for (int i = 0; i < spec->num_branches; i++)
      if (sp->explicit_masks[i] == NULL) return 0;
    return 1;
  }
  return 0;
}

/* Offset o(i, h) of branch i for head h in longnet mode. */
static int64_t longnet_offset(const da_spec *spec, int i, int64_t h) {
  int64_t r = spec->dilation_rates[i];
  if (spec->offsets == DA_OFFSETS_MOD) return h % r;
  int64_t hp = ceil_div(spec->num_heads, r) * r; /* Hp = ceil(H / r) * r */
  return h / (hp / r);
}

/* Grouped mode: the group of head h. k contiguous groups, group g holds H/k heads plus
 * one if g < H % k. */
static int grouped_group(const da_spec *spec, int64_t h) {
  int64_t k = spec->num_branches, H = spec->num_heads;
  int64_t start = 0;
  for (int g = 0; g < k; g++) {
    int64_t size = H / k + (g < H % k ? 1 : 0);
    if (h < start + size) return g;
    start += size;
  }
  return -1; /* unreachable for 0 <= h < H */
}

/* Append to keys[] the key set of query p in branch i with offset o (SEMANTICS.md
 * "Branch key sets"); returns the new count. Nothing is appended if p is not covered. */
static int64_t branch_keys(const da_spec *spec, int i, int64_t o, int64_t N, int64_t p,
                           int64_t *keys, int64_t count) {
  int64_t w = spec->segment_lengths[i], r = spec->dilation_rates[i];
  int64_t s0 = (p / w) * w;
  int64_t end = s0 + w < N ? s0 + w : N;
  if ((p - s0) % r != o) return count;
  int64_t bs = spec->sparsity.block;
  int64_t a = (p - s0 - o) / r; /* dilated index of the query in its segment */
  for (int64_t t = s0 + o; t < end; t += r) {
    if (spec->causal && t > p) continue;
    if (spec->sparsity.layout != DA_LAYOUT_NONE && spec->sparsity.layout != DA_LAYOUT_DENSE) {
      int64_t c = (t - s0 - o) / r; /* dilated index of the key */
      if (!da_ref_block_allowed(spec, i, a / bs, c / bs)) continue;
    }
    keys[count++] = t;
  }
  return count;
}

int da_ref_attention(const da_spec *spec, int64_t B, int64_t N, const double *q,
                     const double *k, const double *v, double *out, double *lse) {
  if (spec == NULL || q == NULL || k == NULL || v == NULL || out == NULL) return -1;
  if (B < 0 || N < 0 || !spec_ok(spec)) return -1;
  const int64_t H = spec->num_heads, Hkv = spec->num_kv_heads, D = spec->head_dim;
  const int64_t group = H / Hkv; /* query heads per kv head */
  const double scale = spec->has_scale ? spec->scale : 1.0 / sqrt((double)D);
  const int nbr = spec->num_branches;

  /* Every branch holds at most N keys for a query: the multiset union holds <= nbr*N. */
  int64_t *keys = malloc(sizeof(int64_t) * (size_t)(nbr * N + 1));
  double *z = malloc(sizeof(double) * (size_t)(nbr * N + 1));
  if (keys == NULL || z == NULL) {
    free(keys);
    free(z);
    return -1;
  }

  for (int64_t b = 0; b < B; b++) {
    for (int64_t p = 0; p < N; p++) {
      for (int64_t h = 0; h < H; h++) {
        const int64_t hk = h / group;
        const double *qp = q + ((b * N + p) * H + h) * D;
        double *op = out + ((b * N + p) * H + h) * D;

        /* 1. The multiset union of the key sets of every branch this head uses. */
        int64_t n = 0;
        double divisor = 1.0;
        if (spec->mode == DA_MODE_LONGNET) {
          for (int i = 0; i < nbr; i++)
            n = branch_keys(spec, i, longnet_offset(spec, i, h), N, p, keys, n);
        } else {
          int g = grouped_group(spec, h);
          n = branch_keys(spec, g, g % spec->dilation_rates[g], N, p, keys, n);
          divisor = (double)nbr;
        }

        /* 2. Scores and their maximum. */
        double zmax = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
          const double *kt = k + ((b * N + keys[j]) * Hkv + hk) * D;
          double dot = 0.0;
          for (int64_t d = 0; d < D; d++) dot += qp[d] * kt[d];
          z[j] = scale * dot;
          if (z[j] > zmax) zmax = z[j];
        }

        /* 3. Stable softmax: out = sum e^(z-zmax) v / sum e^(z-zmax). */
        for (int64_t d = 0; d < D; d++) op[d] = 0.0;
        double denom = 0.0;
        for (int64_t j = 0; j < n; j++) {
          const double *vt = v + ((b * N + keys[j]) * Hkv + hk) * D;
          double e = exp(z[j] - zmax);
          denom += e;
          for (int64_t d = 0; d < D; d++) op[d] += e * vt[d];
        }
        if (n > 0) {
          for (int64_t d = 0; d < D; d++) op[d] = op[d] / denom / divisor;
        }
        if (lse != NULL) lse[(b * H + h) * N + p] = n > 0 ? zmax + log(denom) : -INFINITY;
      }
    }
  }
  free(keys);
  free(z);
  return 0;
}
