/* main.c - the consumer program: creates the plan through the generated typed entry
 * point (kernels linked in by dilattn_add_kernels), runs it on the host backend and
 * checks it against plain causal attention inside 64-token segments.
 * Run: tests/consumer/run.sh (builds it against an installed dilattn). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "demo.h"

enum { N = 150, H = 2, D = 16, W = 64 };

int main(void) {
  static float q[N * H * D], k[N * H * D], v[N * H * D], out[N * H * D], lse[H * N];
  for (int i = 0; i < N * H * D; i++) {
    q[i] = (float)sin(0.37 * i), k[i] = (float)cos(0.11 * i), v[i] = (float)sin(0.05 * i + 1);
  }
  da_context *ctx;
  da_plan *plan;
  if (da_context_create(&ctx) != DA_OK) return 1;
  if (demo_causal64_plan(ctx, DA_BACKEND_HOST, &plan) != DA_OK) {
    fprintf(stderr, "plan: %s\n", da_context_last_error(ctx));
    return 1;
  }
  if (demo_causal64_run(plan, 1, N, q, k, v, out, lse, NULL) != DA_OK) {
    fprintf(stderr, "run: %s\n", da_context_last_error(ctx));
    return 1;
  }
  double err = 0;
  for (int p = 0; p < N; p++)
    for (int h = 0; h < H; h++) {
      int s0 = p / W * W;
      double m = -INFINITY, l = 0, acc[D] = {0};
      for (int t = s0; t <= p; t++) {
        double z = 0;
        for (int d = 0; d < D; d++) z += q[(p * H + h) * D + d] * k[(t * H + h) * D + d];
        m = fmax(m, z / sqrt(D));
      }
      for (int t = s0; t <= p; t++) {
        double z = 0;
        for (int d = 0; d < D; d++) z += q[(p * H + h) * D + d] * k[(t * H + h) * D + d];
        double e = exp(z / sqrt(D) - m);
        l += e;
        for (int d = 0; d < D; d++) acc[d] += e * v[(t * H + h) * D + d];
      }
      for (int d = 0; d < D; d++) err = fmax(err, fabs(acc[d] / l - out[(p * H + h) * D + d]));
      err = fmax(err, fabs(m + log(l) - lse[h * N + p]));
    }
  printf("consumer: kernel %s, strategy %s, max error %.3g\n", da_plan_kernel_name(plan), da_plan_strategy(plan), err);
  da_plan_destroy(plan);
  da_context_destroy(ctx);
  return err < 1e-4 ? 0 : 1;
}
