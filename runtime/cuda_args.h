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
  int branch;                        /* branch launches */
  int vec16; /* q, k, v 16-byte aligned, strides multiples of 8: cp.async; else plain loads */
  int out16; /* out likewise: 16-byte stores of out (tensor-core paths); else 2-byte stores */
  /* branch launches run over the tokens [tok0, tok0 + ws_len) (a whole number of every
   * branch's segments): the workspace holds ws_len rows a (batch, head) */
  int64_t tok0, ws_len;
} da__cuda_args;

#endif
