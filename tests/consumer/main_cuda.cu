// main_cuda.cu - the consumer as CUDA C++: AOT cubins for sm_80/sm_90 linked in; on a GPU
// it runs the plan with DILATTN_DISABLE_JIT=1 and checks it against the host backend.
// Without a GPU it exits 77 (skipped). Built by tests/consumer/CMakeLists.txt.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "demo_cuda.h"

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const int N = 300, H = 2, D = 64;
  std::vector<uint16_t> q(N * H * D), out(N * H * D), ref(N * H * D);
  for (int i = 0; i < N * H * D; i++) q[i] = (uint16_t)(0x3000 + (i * 37) % 1024);  // fp16 in [0.125, 0.25)
  da_context *ctx;
  da_context_create(&ctx);
  da_plan *gpu = nullptr, *host = nullptr;
  if (demo_cuda_causal64_f16_plan(ctx, DA_BACKEND_CUDA, &gpu) != DA_OK) {
    fprintf(stderr, "cuda plan: %s\n", da_context_last_error(ctx));
    return 1;
  }
  uint16_t *dq, *dout;
  cudaMalloc(&dq, q.size() * 2);
  cudaMalloc(&dout, q.size() * 2);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  if (demo_cuda_causal64_f16_run(gpu, 1, N, dq, dq, dq, dout, nullptr, nullptr) != DA_OK) {
    fprintf(stderr, "cuda run: %s\n", da_context_last_error(ctx));
    return 1;
  }
  cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost);
  unsetenv("DILATTN_DISABLE_JIT");
  if (demo_cuda_causal64_f16_plan(ctx, DA_BACKEND_HOST, &host) != DA_OK ||
      demo_cuda_causal64_f16_run(host, 1, N, q.data(), q.data(), q.data(), ref.data(), nullptr, nullptr) != DA_OK) {
    fprintf(stderr, "host: %s\n", da_context_last_error(ctx));
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < out.size(); i++) bad += abs((int)out[i] - (int)ref[i]) > 8;  // a few fp16 ulps
  printf("consumer_cuda: %d of %zu outputs differ from the host backend\n", bad, out.size());
  return bad ? 1 : 0;
}
