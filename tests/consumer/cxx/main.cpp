// A C++ user of the typed entry points of its bundle (my_engine_kernels.h), run with JIT
// off and an empty kernel cache (run.sh): the kernel can only come from the linked bundle.
#include <cstdio>
#include <vector>

#include "my_engine_kernels.h"

int main() {
  da_context *ctx = nullptr;
  da_plan *plan = nullptr;
  if (da_context_create(&ctx) != DA_OK) return 1;
  if (my_engine_kernels_causal64_plan(ctx, DA_BACKEND_HOST, &plan) != DA_OK) {
    std::fprintf(stderr, "plan: %s\n", da_context_last_error(ctx));
    return 1;
  }
  const int64_t n = 100;
  std::vector<float> x(n * 2 * 16), out(x.size());
  for (size_t i = 0; i < x.size(); i++) x[i] = (float)(i % 13) / 13.0f;
  const da_status st = my_engine_kernels_causal64_run(plan, 1, n, x.data(), x.data(), x.data(), out.data(), nullptr, nullptr);
  std::printf("C++ consumer: %s\n", st == DA_OK ? "ok" : da_context_last_error(ctx));
  da_plan_destroy(plan);
  da_context_destroy(ctx);
  return st == DA_OK ? 0 : 1;
}
