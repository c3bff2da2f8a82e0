/* bench_util.h - what the C benchmarks share: a monotonic clock in microseconds and the
 * median, minimum and maximum of a sample (sorted in place). */
#ifndef DA_BENCH_UTIL_H
#define DA_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double median, min, max;
  int n;
} stat_t;

static inline stat_t stats(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  stat_t s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1], n};
  return s;
}

#endif
