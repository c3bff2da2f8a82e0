/* cuda_args.h - the argument struct every generated CUDA kernel takes by value. Must
 * match struct da_cuda_args in templates/cuda/kernel.cu.tpl (the kernels' side of it). */
#ifndef DA_CUDA_ARGS_H
#define DA_CUDA_ARGS_H

#include <stdint.h>

typedef struct {
  const void *q, *k, *v;
  void *out;
  float *lse;
  int64_t batch, seq_len;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  const unsigned char *const *masks; /* device array of per-branch device masks */
  float *ws;                         /* split: partial out [B][H][ws_len][HD], then lse [B][H][ws_len] */
  unsigned *ctr; /* kernels of several tiles a CTA: this launch's tile counter, zero before it (a
                    persistent grid: cuda_backend.c launch_main); NULL: a->tpc tiles a CTA */
  int branch;                        /* branch launches */
  int vec16; /* q, k, v 16-byte aligned, strides multiples of 8: cp.async; else plain loads */
  int out16; /* out likewise: 16-byte stores of out (tensor-core paths); else 2-byte stores */
  int tma;   /* wgmma-ws-tma kernels: the tensor maps after these arguments are encoded (the
                producer copies K / V by TMA); else cp.async as without them */
  int tpc;   /* kernels of several tiles a CTA (da__rendered.ws_tiles > 1): this launch's, 1 ..
                ws_tiles (cuda_backend.c launch_main); else 1 */
  /* branch launches run over the tokens [tok0, tok0 + ws_len) (a whole number of every
   * branch's segments): the workspace holds ws_len rows a (batch, head) */
  int64_t tok0, ws_len;
} da__cuda_args;

/* A wgmma-ws-tma kernel's parameter (kernel.cu.tpl da_cuda_kargs): the arguments, then
 * its tensor maps (CUtensorMap: 128 bytes, 128-byte aligned as in CUDA 13's cuda.h), as many as the plan says
 * (da__rendered.tma_maps, at most DA_CUDA_TMAPS_MAX; planner.lua TMA_MAPS_MAX). Other
 * kernels take the arguments alone, a prefix of this. */
/* cuTensorMapEncodeTiled (CUDA 12+), its enums as ints and its CUresult as an int (0:
 * success); the runtime encodes the maps through the driver's (cuda_driver.c), the
 * emulator through its own (tests/emu). */
typedef int (*da__tmap_encode_fn)(void *map, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                                  const uint64_t *strides, const uint32_t *box, const uint32_t *elem_strides,
                                  int interleave, int swizzle, int l2_promotion, int oob_fill);
/* the values of cuda.h's enums the runtime passes (tests/test_cuda_abi.c checks them) */
#define DA__TMAP_UINT16 1        /* CU_TENSOR_MAP_DATA_TYPE_UINT16 */
#define DA__TMAP_SWIZZLE_128B 3  /* CU_TENSOR_MAP_SWIZZLE_128B */
#define DA__TMAP_L2_128B 2       /* CU_TENSOR_MAP_L2_PROMOTION_L2_128B */
#define DA_CUDA_TMAPS_MAX 96
typedef struct {
  _Alignas(128) unsigned char bytes[128];
} da__cuda_tmap;
typedef struct {
  da__cuda_args a;
  da__cuda_tmap m[DA_CUDA_TMAPS_MAX];
} da__cuda_kargs;

#endif
