/* reference.h - the naive float64 dilated-attention reference used by the tests.
 *
 * Written straight from spec/SEMANTICS.md, independently of the generator, templates and
 * runtime: every backend is checked against it. Simple loops, no tiling, no tricks.
 *
 * Its own test (golden vectors plus self-checks):
 *   gcc -std=c11 -O2 -Wall -Wextra -I/work/main/include -I/work/main/tests \
 *     /work/main/tests/reference.c /work/main/tests/test_reference.c -lm \
 *     -o /tmp/test_reference && /tmp/test_reference /work/shared/golden
 */
#ifndef DA_TESTS_REFERENCE_H
#define DA_TESTS_REFERENCE_H

#include <stdint.h>

#include "dilattn.h"

/* Naive float64 dilated attention per SEMANTICS.md.
 * q: [B, N, H, D], k, v: [B, N, Hkv, D] contiguous doubles; out: [B, N, H, D];
 * lse: [B, H, N] (may be NULL). H, Hkv, D come from spec. A query that attends nothing
 * gets out = 0 and lse = -inf. Explicit layouts are read from
 * spec->sparsity.explicit_masks[i], nb_i x nb_i bytes row-major [qb][kb],
 * nb_i = ceil(ceil(w_i / r_i) / block).
 * Returns 0 on success, -1 on a spec or argument it cannot handle (nothing written). */
int da_ref_attention(const da_spec *spec, int64_t B, int64_t N, const double *q,
                     const double *k, const double *v, double *out, double *lse);

/* The splitmix64 finaliser of SEMANTICS.md (splitmix64(0) == 0xE220A8397B1DCDAF). */
uint64_t da_ref_splitmix64(uint64_t x);

/* Whether branch `branch` lets query block qb see key block kb under spec's layout
 * (dilated coordinates). Always 1 for DA_LAYOUT_NONE and DA_LAYOUT_DENSE; 0 for an
 * explicit layout without a mask for that branch or out-of-range blocks. */
int da_ref_block_allowed(const da_spec *spec, int branch, int64_t qb, int64_t kb);

#endif /* DA_TESTS_REFERENCE_H */
