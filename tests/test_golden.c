/* test_golden.c - every case in ../shared/golden/ on the host backend, within the
 * SEMANTICS.md tolerances, under each tiling strategy the planner can pick (default,
 * split forced, and small odd tiles), with the config read by the library's parser
 * (tests/backend_suite.c bs_golden), and on rising-score inputs (bs_ramp).
 * Run: build/tests/test_golden ../shared/golden   (ctest -R golden) */
#include <dirent.h>
#include <stdio.h>

#include "backend_suite.h"
#include "test_util.h"

/* The host backend as a bs_runner (user: da_plan_options or NULL). */
static da_status run_host(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                          const void *k, const void *v, void *out, float *lse) {
  da_plan *plan = NULL;
  da_status st = da_plan_create_ex(ctx, s, DA_BACKEND_HOST, user, &plan);
  if (st != DA_OK) return st;
  da_args args;
  da_args_init(&args, s, B, N, q, k, v, out, lse);
  st = da_plan_execute(plan, &args);
  da_plan_destroy(plan);
  return st;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/golden";
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open golden folder %s\n", dir);
    return 1;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  TU_CHECK(n >= 15, "expected at least 15 golden cases in %s, found %d", dir, n);
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) return 1;
  /* every case under the default plan, split forced (fused_min_queries huge) and tiny odd
   * tiles, through the shared suite's golden runner */
  da_plan_options variants[3] = {{0, 0, 0, 0, 0}, {0, 0, 1 << 30, 0, 0}, {3, 5, 1, 0, 0}};
  const char *labels[3] = {"host", "host split", "host tiles 3x5"};
  for (int vi = 0; vi < 3; vi++) bs_golden(ctx, dir, labels[vi], run_host, &variants[vi]);
  /* running maxima that grow tile after tile (the golden inputs are uniform), default
   * tiles and tiny odd ones */
  bs_ramp(ctx, run_host, NULL);
  bs_ramp(ctx, run_host, &variants[2]);
  /* NaN in q and in k: NaN out where the reference has it, the rest untouched */
  for (int vi = 0; vi < 3; vi++) bs_nan_inputs(ctx, run_host, &variants[vi], labels[vi], 1);
  /* scores far above or below the usual range: scales up to 1e20, -inf scores */
  for (int vi = 0; vi < 3; vi++) bs_extreme_scores(ctx, run_host, &variants[vi], labels[vi], 1, 1);
  da_context_destroy(ctx);
  return tu_report();
}
