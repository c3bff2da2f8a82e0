/* test_util.c - helpers shared by the tests (see test_util.h). */
#include "test_util.h"
#include "runtime/internal.h" /* da__parallel_for */


#include <math.h>
#include <string.h>

int tu_passed, tu_failed;

int tu_report(void) {
  printf("%d passed, %d failed\n", tu_passed, tu_failed);
  return tu_failed ? 1 : 0;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t double_to_half(double x) {
  /* Round through float (exact for our test values' ranges), then RNE to half. */
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN stays NaN (it became Inf) */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    float v;
    memcpy(&v, &a, 4);
    return (uint16_t)(sign | (uint32_t)rintf(v * 16777216.0f));
  }
  return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}

double tu_load(da_dtype t, const void *p, int64_t i) {
  if (t == DA_DTYPE_FLOAT32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  if (t == DA_DTYPE_FLOAT16) return half_to_double(h);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void tu_store(da_dtype t, void *p, int64_t i, double x) {
  if (t == DA_DTYPE_FLOAT32) {
    ((float *)p)[i] = (float)x;
  } else if (t == DA_DTYPE_FLOAT16) {
    ((uint16_t *)p)[i] = double_to_half(x);
  } else {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

size_t tu_elem_size(da_dtype t) { return t == DA_DTYPE_FLOAT32 ? 4 : 2; }

void tu_tolerances(da_dtype t, double vmax, double *tol_out, double *tol_lse) {
  *tol_out = (t == DA_DTYPE_FLOAT32 ? 2e-5 : t == DA_DTYPE_FLOAT16 ? 1e-2 : 3e-2) * vmax;
  *tol_lse = t == DA_DTYPE_FLOAT32 ? 1e-4 : 1e-2;
}

int tu_compare(da_dtype t, int64_t count_out, const void *out, const double *ref_out,
               int64_t count_lse, const float *lse, const double *ref_lse, double vmax,
               double *err_out, double *err_lse) {
  double tol_out, tol_lse;
  tu_tolerances(t, vmax, &tol_out, &tol_lse);
  double eo = 0, el = 0;
  int ok = 1;
  for (int64_t i = 0; i < count_out; i++) {
    double x = tu_load(t, out, i);
    if (isnan(x)) {
      ok = 0;
      eo = INFINITY;
      continue;
    }
    double e = fabs(x - ref_out[i]);
    if (e > eo) eo = e;
  }
  for (int64_t i = 0; lse && i < count_lse; i++) {
    double x = lse[i], r = ref_lse[i];
    if (isinf(r) || isinf(x)) {
      if (!(isinf(r) && isinf(x) && (r < 0) == (x < 0))) {
        ok = 0;
        el = INFINITY;
      }
      continue;
    }
    double e = fabs(x - r);
    if (!(e <= el)) el = e;
  }
  if (err_out) *err_out = eo;
  if (err_lse) *err_lse = el;
  return ok && eo <= tol_out && el <= tol_lse;
}

uint64_t tu_rand(uint64_t *s) {
  uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double tu_uniform(uint64_t *s) { return (double)(tu_rand(s) >> 11) * 0x1.0p-53; }

typedef struct {
  void (*fn)(da_context *, int, void *);
  void *user;
  int no_context; /* a job could not create its context */
} tu_jobs;

static int tu_job(void *arg, int i) {
  tu_jobs *J = arg;
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) {
    __atomic_store_n(&J->no_context, 1, __ATOMIC_RELAXED);
    return 1;
  }
  J->fn(ctx, i, J->user);
  da_context_destroy(ctx);
  return 0;
}

void tu_parallel_jobs(int n, int threads, void (*fn)(da_context *ctx, int i, void *user), void *user) {
  tu_jobs J = {fn, user, 0};
  da__parallel_for(n, threads < 1 ? 1 : threads, tu_job, &J);
  TU_CHECK(!J.no_context, "tu_parallel_jobs: a job could not create its context (the rest did not run)");
}

da_spec tu_spec(int nb, const int64_t *w, const int64_t *r, int H, int Hkv, int D, da_dtype t) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = nb;
  for (int i = 0; i < nb; i++) s.segment_lengths[i] = w[i], s.dilation_rates[i] = r[i];
  s.num_heads = H, s.num_kv_heads = Hkv, s.head_dim = D, s.dtype = t;
  return s;
}
