/* wgmma_probe.h - one warpgroup's two wgmma chains in isolation, for a diagnosis the
 * end-to-end suites cannot give: a kernel appended to a rendered wgmma plan loads known
 * Q (64 x D), K and V (TK x D) tiles through the plan's own loader and swizzled layout,
 * runs S = Q K^T (da_wg_qk) and O = P V (da_wg_pv_tile, P given per thread) and writes
 * every thread's accumulators; the check maps them back through the documented fragment
 * layout and names the first wrong element. Values are small multiples of 1/8, so every
 * product and sum is exact in fp32 and the comparison is exact.
 * Shared by test_cuda_emu (emulator, here) and test_gpu (the hardware, sm_90). */
#ifndef DA_WGMMA_PROBE_H
#define DA_WGMMA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "dilattn.h"

#define WGP_KERNEL "da_wgmma_probe"

typedef struct {
  da_dtype dtype;
  int D, TK;
  char *source; /* rendered plan + probe kernel (malloc'ed) */
  int smem;     /* dynamic shared memory bytes */
  uint16_t *q, *k, *v; /* inputs: q [64][D], k and v [TK][D] */
  uint32_t *p;         /* packed P fragments: [128 threads][TK / 16][4] */
  float *s_out, *o_out; /* outputs: [128][TK / 2], [128][D / 2] */
  size_t q_bytes, kv_bytes, p_bytes, s_bytes, o_bytes;
} wgp_case;

/* The shapes both runners probe: fp16 / bf16 at D = 64 and 128, key tiles 32 to 128. */
typedef struct {
  da_dtype dtype;
  int D, TK;
} wgp_shape;
#define WGP_NSHAPES 4
extern const wgp_shape WGP_SHAPES[WGP_NSHAPES];

/* Build case (dtype, D, TK): source and inputs. Returns DA_OK or the render error. */
da_status wgp_init(da_context *ctx, wgp_case *c, da_dtype dtype, int D, int TK);
/* Compare the outputs with S = Q K^T and O = P V; 1 when exact, else 0 with the first
 * wrong element (which matrix, row, column, thread, value) in msg. */
int wgp_check(const wgp_case *c, char *msg, size_t cap);
void wgp_free(wgp_case *c);

#endif
