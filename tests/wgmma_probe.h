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
#include <stdio.h>
#include <stdint.h>

#include "dilattn.h"

#define WGP_KERNEL "da_wgmma_probe"
/* The operand map: a second kernel in the same source loads Q, K and V tiles whose values
 * encode their own (row, column), five bits per pass over three passes, through the plan's
 * loader, and runs one wgmma per k16 step and operand with the other operand one-hot, so
 * every accumulator shows which tile element the hardware read for one operand element
 * (K and V as the B operand, from a one-hot A in registers; Q as the A operand, with a
 * one-hot K tile). Where the exact probe says "wrong", this says where the read went. */
#define WGP_MAP_KERNEL "da_wgmma_map"
#define WGP_MAP_PASSES 3
#define WGP_MAP_IDX 8192 /* tile elements a map can name (13 bits; the tile's tag above) */
enum { WGP_MAP_K, WGP_MAP_V, WGP_MAP_Q, WGP_MAP_OPS };

typedef struct {
  da_dtype dtype;
  int D, TK;
  char *source; /* rendered plan + probe kernel (malloc'ed) */
  int smem;     /* dynamic shared memory bytes */
  uint16_t *q, *k, *v; /* inputs: q [64][D], k and v [TK][D] */
  uint32_t *p;         /* packed P fragments: [128 threads][TK / 16][4] */
  float *s_out, *o_out; /* outputs: [128][TK / 2], [128][D / 2] */
  size_t q_bytes, kv_bytes, p_bytes, s_bytes, o_bytes;
  /* the map kernel: (q, k, v)[pass] encoded tiles, khot the one-hot K tile, map_out
   * [pass][operand][k16 step][thread][64] */
  uint16_t *mq, *mk, *mv, *khot;
  float *map_out;
  size_t mq_bytes, mkv_bytes, map_bytes;
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
/* Compare map_out with the reads each operand needs; 1 when every read is right, else 0
 * with the first wrong read and the count in msg. dump_path (may be NULL): written only
 * when a read is wrong, one line per wrong read (operand, step, row, col, wanted tile / row
 * / col, read tile / row / col), for a diagnosis after the session. */
int wgp_check_map(const wgp_case *c, char *msg, size_t cap, const char *dump_path);
void wgp_free(wgp_case *c);

#endif
