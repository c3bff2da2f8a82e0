/* test_golden.c - every case in ../shared/golden/ on the host backend, within the
 * SEMANTICS.md tolerances, under each tiling strategy the planner can pick (default,
 * split forced, and small odd tiles), with the config read by the library's parser.
 * Run: build/tests/test_golden ../shared/golden   (ctest -R golden) */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_suite.h"
#include "runtime/fileio.h"
#include "runtime/npy.h"
#include "test_util.h"

static void run_case(da_context *ctx, const char *dir, const char *name) {
  char path[4096], msg[1024];
  snprintf(path, sizeof path, "%s/%s/case.json", dir, name);
  size_t len;
  char *text = da__read_file(path, &len);
  TU_CHECK(text != NULL, "%s: cannot read", path);
  if (!text) return;
  da_spec spec;
  da_status st = da_spec_from_json(text, len, &spec, msg, sizeof msg);
  free(text);
  TU_CHECK(st == DA_OK, "%s: config rejected: %s", name, msg);
  if (st != DA_OK) return;
  da__npy_array a[5];
  const char *files[5] = {"q", "k", "v", "out", "lse"};
  memset(a, 0, sizeof a);
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s/%s.npy", dir, name, files[i]);
    st = da__npy_load(path, &a[i], msg, sizeof msg);
    TU_CHECK(st == DA_OK, "%s", msg);
    if (st != DA_OK) goto done;
  }
  int64_t B = a[0].shape[0], N = a[0].shape[1];
  double vmax = 0;
  for (size_t i = 0; i < a[2].count; i++) {
    double x = fabs(tu_load(spec.dtype, a[2].data, (int64_t)i));
    if (x > vmax) vmax = x;
  }
  /* default plan; split forced (fused_min_queries huge); tiny odd tiles */
  da_plan_options variants[3] = {{0, 0, 0, 0, 0}, {0, 0, 1 << 30, 0, 0}, {3, 5, 1, 0, 0}};
  for (int vi = 0; vi < 3; vi++) {
    da_plan *plan = NULL;
    st = da_plan_create_ex(ctx, &spec, DA_BACKEND_HOST, &variants[vi], &plan);
    TU_CHECK(st == DA_OK, "%s: plan: %s", name, da_context_last_error(ctx));
    if (st != DA_OK) continue;
    void *out = calloc(a[0].count, a[0].elem_size);
    float *lse = calloc(a[4].count, sizeof(float));
    da_args args;
    da_args_init(&args, &spec, B, N, a[0].data, a[1].data, a[2].data, out, lse);
    st = da_plan_execute(plan, &args);
    TU_CHECK(st == DA_OK, "%s: execute: %s", name, da_context_last_error(ctx));
    double eo, el;
    int ok = tu_compare(spec.dtype, (int64_t)a[3].count, out, a[3].data, (int64_t)a[4].count, lse,
                        a[4].data, vmax, &eo, &el);
    TU_CHECK(ok, "%s [%s, tiles %d/%d]: out err %.3g (vmax %.3g), lse err %.3g", name,
             da_plan_strategy(plan), variants[vi].tile_q, variants[vi].tile_k, eo, vmax, el);
    printf("%-30s %-6s tq=%-2d tk=%-2d out_err=%.2e lse_err=%.2e\n", name, da_plan_strategy(plan),
           variants[vi].tile_q, variants[vi].tile_k, eo, el);
    free(out);
    free(lse);
    da_plan_destroy(plan);
  }
done:
  for (int i = 0; i < 5; i++) da__npy_free(&a[i]);
}

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
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(d);
  TU_CHECK(n >= 15, "expected at least 15 golden cases in %s, found %d", dir, n);
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) return 1;
  for (int i = 0; i < n; i++) {
    run_case(ctx, dir, names[i]);
    free(names[i]);
  }
  /* running maxima that grow tile after tile (the golden inputs are uniform), default
   * tiles and tiny odd ones */
  da_plan_options tiny = {3, 5, 1, 0, 0};
  bs_ramp(ctx, run_host, NULL);
  bs_ramp(ctx, run_host, &tiny);
  da_context_destroy(ctx);
  return tu_report();
}
