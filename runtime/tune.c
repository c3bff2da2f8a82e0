/* tune.c - `dilattn tune` (issue 6): for each config, enumerate the planner's tunables
 * (query and key tile sizes, fused versus per-branch tiling), prune statically (tile
 * buffer size; on CUDA shared memory and ptxas spills), compile the candidates in
 * parallel threads, check each against the float64 reference on a small input, time the
 * survivors (warm-up, median of --reps runs) and check each against the first one's (the
 * default's) result at the tuning length, label every failure (compile, runtime,
 * correctness, constraints) instead of stopping, and record everything in the tuning
 * database (plan creation then uses the best entry) plus a CSV and, with --plot, a PNG
 * (one bar per candidate: grey ok, blue the default, green the best, red failed). */
#define _GNU_SOURCE
#include "runtime/fileio.h"
#include "runtime/tune.h"
#include "runtime/cli.h"

#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "runtime/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/png.h"
#include "runtime/tuning_db.h"
#include "tests/reference.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CAND DA_TUNE_MAX_CANDIDATES
#define MAX_CONFIGS 64 /* configs in one tune run */

typedef struct {
  da_plan_options o;
  da_plan *plan;
  char plan_key[72]; /* its cache key once timed ("" before) */
  da__tune_record rec;
  da_status plan_st; /* its plan creation's status */
} cand_t;

typedef struct {
  da_context *ctx;
  const da_spec *spec;
  da_backend backend;
  cand_t *c;
  int n, done;
  pthread_mutex_t mu;
} compile_job;

static void progress(const char *what, int done, int total) {
  if (!isatty(2)) return;
  int w = 30, fill = total ? done * w / total : w;
  fprintf(stderr, "\r%-12s [", what);
  for (int i = 0; i < w; i++) fputc(i < fill ? '#' : ' ', stderr);
  fprintf(stderr, "] %d/%d", done, total);
  if (done == total) fputc('\n', stderr);
  fflush(stderr);
}

static void first_line(char *dst, size_t cap, const char *prefix, const char *text) {
  snprintf(dst, cap, "%s: %s", prefix, text);
  dst[strcspn(dst, "\n")] = '\0';
}

static int compile_one(void *arg, int i) {
  compile_job *j = arg;
  cand_t *c = &j->c[i];
  if (strcmp(c->rec.status, "constraints")) {
    da_status st = c->plan_st = da_plan_create_ex(j->ctx, j->spec, j->backend, &c->o, &c->plan);
    if (st != DA_OK) {
      snprintf(c->rec.status, sizeof c->rec.status, "%s", st == DA_ERR_INVALID_ARGUMENT ? "constraints" : "compile");
      first_line(c->rec.label, sizeof c->rec.label, da_status_name(st), da_context_last_error(j->ctx));
    } else {
      snprintf(c->rec.strategy, sizeof c->rec.strategy, "%s", da_plan_strategy(c->plan));
    }
  }
  pthread_mutex_lock(&j->mu);
  progress("compiling", ++j->done, j->n);
  pthread_mutex_unlock(&j->mu);
  return 0;
}

/* Host arrays in the spec's dtype with values in [-1, 1), and their float64 copies. */
typedef struct {
  void *q, *k, *v, *out;
  float *lse;
  double *dq, *dk, *dv;
  int64_t B, N, nq, nk;
} inputs_t;

static int make_inputs(const da_spec *s, int64_t B, int64_t N, int with_double, inputs_t *in) {
  memset(in, 0, sizeof *in);
  in->B = B, in->N = N;
  in->nq = B * N * s->num_heads * s->head_dim;
  in->nk = B * N * s->num_kv_heads * s->head_dim;
  size_t es = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  in->q = malloc((size_t)in->nq * es), in->out = malloc((size_t)in->nq * es);
  in->k = malloc((size_t)in->nk * es), in->v = malloc((size_t)in->nk * es);
  in->lse = malloc(sizeof(float) * (size_t)(B * s->num_heads * N));
  if (!in->q || !in->out || !in->k || !in->v || !in->lse) return -1;
  uint64_t st = 12345;
  void *arrs[3] = {in->q, in->k, in->v};
  int64_t counts[3] = {in->nq, in->nk, in->nk};
  double **dbl[3] = {&in->dq, &in->dk, &in->dv};
  for (int a = 0; a < 3; a++) {
    if (with_double && !(*dbl[a] = malloc(sizeof(double) * (size_t)counts[a]))) return -1;
    for (int64_t i = 0; i < counts[a]; i++) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      int k = (int)((st >> 33) % 2048) - 1024; /* x = k / 1024: exact in fp32 and fp16 */
      float x = (float)k / 1024.0f;
      double back = x;
      if (s->dtype == DA_DTYPE_FLOAT32) {
        ((float *)arrs[a])[i] = x;
      } else if (s->dtype == DA_DTYPE_BFLOAT16) {
        uint32_t u;
        memcpy(&u, &x, 4);
        uint16_t h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        ((uint16_t *)arrs[a])[i] = h;
        uint32_t w = (uint32_t)h << 16;
        float f;
        memcpy(&f, &w, 4);
        back = f;
      } else {
        int mag = k < 0 ? -k : k, e = 0;
        while ((mag >> (e + 1)) > 0) e++;
        uint16_t h = k == 0 ? 0 : (uint16_t)((k < 0 ? 0x8000u : 0) | ((uint32_t)(e + 5) << 10) |
                                             (((uint32_t)mag << (10 - e)) & 0x3ffu));
        ((uint16_t *)arrs[a])[i] = h;
      }
      if (with_double) (*dbl[a])[i] = back;
    }
  }
  return 0;
}

static void free_inputs(inputs_t *in) {
  free(in->q), free(in->k), free(in->v), free(in->out), free(in->lse), free(in->dq), free(in->dk), free(in->dv);
}

/* every float16 bit pattern's value (NaN patterns NaN), set once: the checks decode whole
 * outputs (64K x 8 x 64 values: 0.3 s through ldexp each, 0.05 s through the table) */
static double f16_value[65536];
static void f16_table(void) {
  for (uint32_t h = 0; h < 65536; h++) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    f16_value[h] = (h & 0x8000) ? -v : v;
  }
}

static double elem(const da_spec *s, const void *p, int64_t i) {
  if (s->dtype == DA_DTYPE_FLOAT32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  if (s->dtype == DA_DTYPE_BFLOAT16) {
    uint32_t w = (uint32_t)h << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, f16_table);
  return f16_value[h];
}

/* Run plan on in (device copies on CUDA). Returns 0 or -1 with label. */
static int run_plan(da_context *ctx, da_plan *plan, const da_spec *s, inputs_t *in, int reps, double *t,
                    char *label, size_t cap) {
  int cuda = da_plan_backend(plan) == DA_BACKEND_CUDA;
  da__cuda *dev = NULL;
  void *d[5] = {0};
  size_t es = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2, lb = sizeof(float) * (size_t)(in->B * s->num_heads * in->N);
  size_t sizes[5] = {(size_t)in->nq * es, (size_t)in->nk * es, (size_t)in->nk * es, (size_t)in->nq * es, lb};
  void *host[5] = {in->q, in->k, in->v, in->out, in->lse};
  int rc = 0;
  if (cuda) {
    rc = da__cuda_get(ctx, &dev) != DA_OK;
    for (int i = 0; i < 5 && !rc; i++) rc = da__cuda_malloc(ctx, dev, sizes[i], &d[i]) != DA_OK;
    for (int i = 0; i < 3 && !rc; i++) rc = da__cuda_memcpy_htod(ctx, dev, d[i], host[i], sizes[i]) != DA_OK;
  }
  da_args a;
  if (!rc) da_args_init(&a, s, in->B, in->N, cuda ? d[0] : in->q, cuda ? d[1] : in->k, cuda ? d[2] : in->v,
                        cuda ? d[3] : in->out, cuda ? d[4] : in->lse);
  for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
    double t0 = da__now_ms();
    rc = da_plan_execute(plan, &a) != DA_OK || (cuda && da__cuda_sync(ctx, dev, NULL) != DA_OK);
    if (r >= 0) t[r] = da__now_ms() - t0;
  }
  if (cuda && !rc) rc = da__cuda_memcpy_dtoh(ctx, dev, in->out, d[3], sizes[3]) != DA_OK ||
                        da__cuda_memcpy_dtoh(ctx, dev, in->lse, d[4], lb) != DA_OK;
  if (rc) first_line(label, cap, "runtime", da_context_last_error(ctx));
  for (int i = 0; i < 5 && cuda; i++) da__cuda_free(dev, d[i]);
  return rc ? -1 : 0;
}

/* *m = max(*m, d), where a NaN d (a kernel that wrote NaN) makes *m NaN for good, so the
 * tolerance test fails: fmax drops a NaN, and a kernel writing NaN everywhere passed */
static void worst(double *m, double d) {
  if (!(d <= *m) && !isnan(*m)) *m = d;
}

/* 1 (with label) when in's out and lse (a candidate's, at the tuning length) differ from
 * ref_out / ref_lse (candidate ref's) by more than tol / tol_lse; -inf lse only where both are. */

static int disagrees(const da_spec *s, const inputs_t *in, const void *ref_out, const float *ref_lse, double tol,
                     double tol_lse, char *label, size_t cap, int ref) {
  double err = 0, lerr = 0;
  for (int64_t x = 0; x < in->nq; x++) worst(&err, fabs(elem(s, in->out, x) - elem(s, ref_out, x)));
  for (int64_t x = 0; x < in->B * s->num_heads * in->N; x++) {
    const float a = in->lse[x], b = ref_lse[x];
    worst(&lerr, a == b ? 0 : fabs((double)a - b)); /* (-inf against -inf: 0) */
  }
  if (err <= tol && lerr <= tol_lse) return 0;
  snprintf(label, cap, "correctness: at seq_len %lld differs from candidate %d%s by %.3g (out, > %.3g) or %.3g (lse, > %.3g)",
           (long long)in->N, ref, ref == 0 ? " (the default)" : "", err, tol, lerr, tol_lse);
  return 1;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* 0 when the chart was written to path, -1 (with a message) when not. */
static int draw_plot(const char *path, cand_t *c, int n, int best) {
  const int W = 40 + n * 24, H = 300;
  unsigned char *img = malloc((size_t)W * H * 3);
  if (!img) {
    fprintf(stderr, "dilattn: error: cannot write %s: out of memory\n", path);
    return -1;
  }
  memset(img, 255, (size_t)W * H * 3);
  double mx = 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(c[i].rec.status, "ok") && c[i].rec.median_ms > mx) mx = c[i].rec.median_ms;
  da__png_rect(img, W, H, 20, H - 20, W - 20, H - 19, 0x000000); /* axis */
  for (int i = 0; i < n; i++) {
    int x0 = 24 + i * 24, ok = !strcmp(c[i].rec.status, "ok");
    int hbar = ok && mx > 0 ? (int)((H - 40) * c[i].rec.median_ms / mx) : 6;
    uint32_t col = !ok ? 0xcc3333 : i == best ? 0x33aa33 : c[i].rec.is_default ? 0x3366cc : 0x999999;
    da__png_rect(img, W, H, x0, H - 20 - hbar, x0 + 18, H - 20, col);
  }
  errno = 0;
  int rc = da__png_write(path, W, H, img) != 0 ? -1 : 0;
  if (rc) fprintf(stderr, "dilattn: error: cannot write %s%s%s\n", path, errno ? ": " : "", errno ? strerror(errno) : "");
  free(img);
  return rc;
}


/* A CSV field (RFC 4180): quoted, its quotes doubled (a path with a comma or a quote, a
 * label with a compiler's message); valid until the same slot (0, 1) is used again. */
static const char *csv_field(const char *s, int slot) {
  static char buf[2][2 * 4200 + 3];
  char *o = buf[slot & 1];
  size_t n = 0;
  o[n++] = '"';
  for (; *s && n < sizeof buf[0] - 3; s++) {
    if (*s == '"') o[n++] = '"';
    o[n++] = *s == '\n' || *s == '\r' ? ' ' : *s;
  }
  o[n++] = '"';
  o[n] = '\0';
  return o;
}

/* where each config's summary line goes: stdout, or stderr where -o or --plot is stdout */
static FILE *summary_to;

/* Tune one config (its spec loaded already): 0, or 3 when every candidate tried failed to
 * compile, 4 when no candidate ran otherwise or the database could not be merged;
 * *plot_failed set when the chart could not be written. */
/* The CSV: its rows in memory (f, an open_memstream of text / len), written whole to path
 * after each config but the last (checkpoint) and at the end */
typedef struct {
  FILE *f;
  const char *path;
  char **text;
  size_t *len;
} csv_out;

/* The rows so far into a CSV file, before the config's summary line: a sweep interrupted
 * later keeps the finished configs' rows, as the database keeps their records (it kept
 * none); not into a stream, which would get them again each time. A failure is said by
 * the last write. */
static void csv_checkpoint(const csv_out *c) {
  da__output o;
  if (c->f && fflush(c->f) == 0 && da__output_resolve(c->path, &o) == 0 && !o.stream)
    (void)da__write_output(c->path, *c->text, *c->len);
}

static int tune_one(const char *config, const da_spec *spec, int64_t N, int64_t B, da_backend backend, int reps,
                    int threads, const csv_out *co, int last, const char *plot, const char *db, int *plot_failed) {
  FILE *csv = co ? co->f : NULL;
  da_spec s = *spec;
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) return 4;
  int cuda = backend == DA_BACKEND_CUDA; /* (resolved by da__cmd_tune) */
  char *js = da_spec_to_json(&s), hash[65];
  if (!js) {
    da_context_destroy(ctx);
    fprintf(stderr, "dilattn: error: out of memory\n");
    return 4;
  }
  da__sha256_hex(js, strlen(js), hash);
  /* candidates: the default first, then the grid */
  cand_t c[MAX_CAND];
  memset(c, 0, sizeof c);
  da_plan_options opts[MAX_CAND];
  const int wgmma = cuda ? da__cuda_wgmma_device_serves(ctx, &s) : 0;
  int n = da__tune_candidates(&s, cuda, wgmma, opts, MAX_CAND);
  for (int i = 0; i < n; i++) c[i].o = opts[i];
  for (int i = 0; i < n; i++) {
    da__tune_record *r = &c[i].rec;
    snprintf(r->spec_hash, sizeof r->spec_hash, "%s", hash);
    snprintf(r->backend, sizeof r->backend, "%s", cuda ? "cuda" : "host");
    snprintf(r->status, sizeof r->status, "ok");
    r->seq_len = N, r->batch = B, r->bucket = da__tuning_bucket(N), r->params = c[i].o, r->is_default = i == 0;
    r->median_ms = r->min_ms = r->max_ms = -1;
    /* static pruning: the host tile buffer (q, acc, k, v, scores in fp32) */
    int tq = c[i].o.tile_q ? c[i].o.tile_q : 32, tk = c[i].o.tile_k ? c[i].o.tile_k : 64;
    double bytes = 4.0 * (2.0 * tq * s.head_dim + 2.0 * tk * s.head_dim + (double)tq * tk);
    if (!cuda && bytes > 512.0 * 1024) { /* must stay in a core's L2 */
      snprintf(r->status, sizeof r->status, "constraints");
      snprintf(r->label, sizeof r->label, "constraints: tile buffer %.0f KiB > 512 KiB", bytes / 1024);
    }
  }
  /* the inputs, the reference's and the first candidate's results, before anything
   * compiles: a length that does not fit fails at once, not after every candidate's
   * compile (minutes at the largest) */
  inputs_t small, big;
  int64_t Ns = N < 384 ? N : 384;
  double *ro = NULL, *rl = NULL;
  void *first_out = NULL;
  float *first_lse = NULL;
  size_t out_bytes = 0, lse_count = (size_t)(B * s.num_heads * N);
  memset(&small, 0, sizeof small), memset(&big, 0, sizeof big);
  if (make_inputs(&s, 1, Ns, 1, &small) || make_inputs(&s, B, N, 0, &big) ||
      !(ro = malloc(sizeof(double) * (size_t)small.nq)) ||
      !(rl = malloc(sizeof(double) * (size_t)(s.num_heads * Ns))) ||
      !(first_out = malloc((out_bytes = (size_t)big.nq * (s.dtype == DA_DTYPE_FLOAT32 ? 4 : 2)) ? out_bytes : 1)) ||
      !(first_lse = malloc(sizeof(float) * (lse_count ? lse_count : 1)))) {
    fprintf(stderr, "dilattn: error: out of memory for the tuning inputs (batch %lld x seq_len %lld)\n", (long long)B,
            (long long)N);
    free(ro), free(rl), free(first_out), free(first_lse);
    free_inputs(&small), free_inputs(&big);
    free(js);
    da_context_destroy(ctx);
    return 4;
  }
  /* compile in parallel; the default spec is the kernel the tuner would replace, so the
   * database is not consulted for it (DILATTN_TUNING=0 for this process) */
  setenv("DILATTN_TUNING", "0", 1);
  /* each candidate names its instruction (1: mma.sync); the default one,
   * no options, gets what da_plan_create gives such a plan (on sm_90 devices the
   * warp-specialized kernel, with K and V by TMA from CUDA 12.1 without a sparse layout) */
  unsetenv("DILATTN_CUDA_MMA");
  compile_job j = {ctx, &s, backend, c, n, 0, PTHREAD_MUTEX_INITIALIZER};
  da__parallel_for(n, da__compile_threads(threads), compile_one, &j);
  pthread_mutex_destroy(&j.mu);
  da_ref_attention(&s, 1, Ns, small.dq, small.dk, small.dv, ro, rl);
  double vmax = 0;
  for (int64_t i = 0; i < small.nk; i++) vmax = fmax(vmax, fabs(small.dv[i]));
  double tol = (s.dtype == DA_DTYPE_FLOAT32 ? 2e-5 : s.dtype == DA_DTYPE_FLOAT16 ? 1e-2 : 3e-2) * vmax;
  const double tol_lse = s.dtype == DA_DTYPE_FLOAT32 ? 1e-4 : 1e-2; /* as the tests take it (tu_compare) */
  int best = -1;
  double *times = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
  /* the first candidate's result at the tuning length (the default's, where it ran): every
   * later one must agree with it there, where the float64 check above sees at most 384
   * positions, less than one segment of a long branch. A candidate that disagrees is not
   * chosen, so tuning never trades the untuned plan's answer for another. */
  int first = -1;
  for (int i = 0; i < n; i++) {
    da__tune_record *r = &c[i].rec;
    /* a candidate whose options render the kernel another one already ran (the same cache
     * key: source, target, schema, version), the default's own shape say, takes its timing */
    int same = -1;
    for (int j = 0; c[i].plan && !strcmp(r->status, "ok") && j < i && same < 0; j++)
      if (c[j].plan_key[0] && !strcmp(c[j].plan_key, da_plan_cache_key(c[i].plan)) && c[j].rec.median_ms >= 0) same = j;
    if (same >= 0) {
      r->median_ms = c[same].rec.median_ms, r->min_ms = c[same].rec.min_ms, r->max_ms = c[same].rec.max_ms;
      r->reps = c[same].rec.reps;
      snprintf(r->label, sizeof r->label, "the kernel of candidate %d, timed once", same);
      snprintf(c[i].plan_key, sizeof c[i].plan_key, "%s", da_plan_cache_key(c[i].plan));
    } else if (c[i].plan && !strcmp(r->status, "ok")) {
      double t1;
      if (run_plan(ctx, c[i].plan, &s, &small, 0, &t1, r->label, sizeof r->label) != 0) {
        snprintf(r->status, sizeof r->status, "runtime");
      } else {
        double err = 0, lerr = 0;
        for (int64_t x = 0; x < small.nq; x++) worst(&err, fabs(elem(&s, small.out, x) - ro[x]));
        /* lse too (the merge of a caller's own partial results reads it): -inf where the
         * reference has a row that attends nothing */
        for (int64_t x = 0; x < s.num_heads * Ns; x++)
          worst(&lerr, isinf(rl[x]) ? (small.lse[x] == -INFINITY ? 0 : INFINITY) : fabs(small.lse[x] - rl[x]));
        if (!(err <= tol) || !(lerr <= tol_lse)) {
          snprintf(r->status, sizeof r->status, "correctness");
          snprintf(r->label, sizeof r->label, "correctness: max error %.3g > %.3g (out) or %.3g > %.3g (lse)", err,
                   tol, lerr, tol_lse);
        } else if (run_plan(ctx, c[i].plan, &s, &big, reps, times, r->label, sizeof r->label) != 0) {
          snprintf(r->status, sizeof r->status, "runtime");
        } else if (first >= 0 && disagrees(&s, &big, first_out, first_lse, 2 * tol, 2 * tol_lse, r->label,
                                           sizeof r->label, first)) {
          snprintf(r->status, sizeof r->status, "correctness");
        } else {
          qsort(times, (size_t)reps, sizeof *times, cmp_d);
          r->median_ms = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
          r->min_ms = times[0], r->max_ms = times[reps - 1], r->reps = reps;
          snprintf(c[i].plan_key, sizeof c[i].plan_key, "%s", da_plan_cache_key(c[i].plan));
          if (best < 0 || r->median_ms < c[best].rec.median_ms) best = i;
          if (first < 0) {
            memcpy(first_out, big.out, out_bytes);
            memcpy(first_lse, big.lse, sizeof(float) * lse_count);
            first = i;
          }
        }
      }
    }
    progress("timing", i + 1, n);
    da_plan_destroy(c[i].plan);
  }
  free(times), free(ro), free(rl), free(first_out), free(first_lse);
  free_inputs(&small), free_inputs(&big);
  unsetenv("DILATTN_TUNING");
  /* results */
  da__tune_record recs[MAX_CAND];
  for (int i = 0; i < n; i++) {
    recs[i] = c[i].rec;
    const da__tune_record *r = &c[i].rec;
    if (csv)
      fprintf(csv, "%s,%s,%lld,%lld,%d,%d,%d,%s,%s,%.4f,%.4f,%.4f,%d,%s,%s,%d\n", csv_field(config, 0), r->backend,
              (long long)N, (long long)B, r->params.tile_q, r->params.tile_k, r->params.fused_min_queries, r->strategy,
              r->status, r->median_ms, r->min_ms, r->max_ms, r->is_default, i == best ? "best" : "",
              csv_field(r->label, 1), r->params.cuda_mma);
  }
  da_status st = da__tuning_db_merge(ctx, db, recs, n);
  if (st != DA_OK) fprintf(stderr, "dilattn: error: %s\n", da_context_last_error(ctx));
  int failed = 0;
  for (int i = 0; i < n; i++) failed += strcmp(c[i].rec.status, "ok") != 0;
  if (co && !last) csv_checkpoint(co);
  fprintf(summary_to, "{\"config\":%s,\"backend\":\"%s\",\"seq_len\":%lld,\"batch\":%lld,\"candidates\":%d,\"failed\":%d,"
         "\"default_ms\":%.4f,\"best_ms\":%.4f,\"speedup\":%.3f,\"best\":{\"tile_q\":%d,\"tile_k\":%d,"
         "\"fused_min_queries\":%d,\"cuda_mma\":%d,\"strategy\":%s},\"db\":%s}\n",
         da__cli_jstr(config, 0), cuda ? "cuda" : "host", (long long)N, (long long)B, n, failed, c[0].rec.median_ms,
         best >= 0 ? c[best].rec.median_ms : -1.0,
         best >= 0 && c[0].rec.median_ms > 0 ? c[0].rec.median_ms / c[best].rec.median_ms : 0.0,
         best >= 0 ? c[best].rec.params.tile_q : 0, best >= 0 ? c[best].rec.params.tile_k : 0,
         best >= 0 ? c[best].rec.params.fused_min_queries : 0, best >= 0 ? c[best].rec.params.cuda_mma : 0,
         da__cli_jstr(best >= 0 ? c[best].rec.strategy : "", 1), da__cli_jstr(st == DA_OK ? db : NULL, 2));
  /* now, not at exit: a sweep of several configs stopped by a signal kept the lines of those
   * done (their records were merged) */
  fflush(summary_to);
  if (plot && draw_plot(plot, c, n, best) != 0) *plot_failed = 1;
  /* every candidate tried failed to compile (those pruned before, "constraints", were not
   * tried): exit 3, as gen's compile failures; where the compiler could not run at all (no
   * CC, an unusable TMPDIR: the environment's) exit 4, as run's and gen's */
  int compile_only = 0;
  for (int i = 0; i < n; i++) compile_only |= !strcmp(c[i].rec.status, "compile");
  for (int i = 0; i < n; i++)
    compile_only &= (!strcmp(c[i].rec.status, "compile") &&
                     (c[i].plan_st == DA_ERR_COMPILE || c[i].plan_st == DA_ERR_GENERATOR)) ||
                    !strcmp(c[i].rec.status, "constraints");
  if (best < 0) {
    int first = 0;
    while (first < n - 1 && !c[first].rec.label[0]) first++;
    fprintf(stderr, "dilattn: error: tune: %s: no candidate ran (%d of %d failed; candidate %d: %s: %s)\n", config, failed,
            n, first, c[first].rec.status, c[first].rec.label[0] ? c[first].rec.label : "no detail");
  }
  free(js);
  da_context_destroy(ctx);
  return st == DA_OK ? (best >= 0 ? 0 : compile_only ? 3 : 4) : 4;
}

int da__cmd_tune(int argc, char **argv) {
  const char *configs[MAX_CONFIGS], *csv_path = NULL, *plot = NULL, *backend_s = "auto", *db_arg = NULL;
  int nconf = 0, reps = 10, threads = 0;
  int64_t N = 0, B = 1;
  const char *given[8] = {0}; /* each option's value: one each */
  static const char *const valued[8] = {"--seq-len", "--batch", "--reps", "--threads",
                                        "--backend", "-o",      "--plot", "--db"};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    for (int o = 0; o < 8 && more; o++)
      if (!strcmp(a, valued[o]) && da__cli_once("tune", a, &given[o], argv[i + 1])) return 2;
    /* numbers: digits only, in range (else "16k" read as 16, "2x" as 2) */
    long *num = NULL, max = 0, v;
    if (!strcmp(a, "--seq-len") && more) num = &v, max = 1L << 32;
    else if (!strcmp(a, "--batch") && more) num = &v, max = 65535;
    else if (!strcmp(a, "--reps") && more) num = &v, max = 1000;
    else if (!strcmp(a, "--threads") && more) num = &v, max = DA_MAX_THREADS;
    if (num) {
      if (!da__parse_count(argv[i + 1], max, num) || (*num < 1 && strcmp(a, "--threads"))) {
        fprintf(stderr, "dilattn: error: tune: %s '%s': not a whole number in %d..%ld\n", a, argv[i + 1],
                strcmp(a, "--threads") ? 1 : 0, max);
        return 2;
      }
      if (!strcmp(a, "--seq-len")) N = v;
      else if (!strcmp(a, "--batch")) B = v;
      else if (!strcmp(a, "--reps")) reps = (int)v;
      else threads = (int)v;
      i++;
    } else if (!strcmp(a, "--backend") && more) backend_s = argv[++i];
    else if (!strcmp(a, "-o") && more) csv_path = argv[++i];
    else if (!strcmp(a, "--plot") && more) plot = argv[++i];
    else if (!strcmp(a, "--db") && more) db_arg = argv[++i];
    else if (a[0] == '-') {
      fprintf(stderr, "dilattn: error: tune: unknown option or missing value: %s\n", a);
      return 2;
    } else {
      if (nconf < MAX_CONFIGS) configs[nconf] = a;
      nconf++;
    }
  }
  if (nconf > MAX_CONFIGS) {
    fprintf(stderr, "dilattn: error: tune: at most %d configs in one run (got %d); split them over several runs\n",
            MAX_CONFIGS, nconf);
    return 2;
  }
  if (!nconf || N < 1 || N > ((int64_t)1 << 32) || B < 1 || B > 65535 || reps < 1 || reps > 1000) {
    fprintf(stderr, "dilattn: error: tune: needs CONFIG.json... --seq-len N (1..2^32), --batch 1..65535, "
                    "--reps 1..1000\n");
    return 2;
  }
  da_backend backend = !strcmp(backend_s, "host") ? DA_BACKEND_HOST : !strcmp(backend_s, "cuda") ? DA_BACKEND_CUDA
                       : !strcmp(backend_s, "auto") ? DA_BACKEND_AUTO : (da_backend)-1;
  if ((int)backend < 0) {
    fprintf(stderr, "dilattn: error: --backend: '%s' is not auto, host or cuda\n", backend_s);
    return 2;
  }
  { /* the backend as a plan would take it (DILATTN_BACKEND for auto), before anything compiles */
    da_context *bctx;
    if (da_context_create(&bctx) != DA_OK) return 4;
    const da_status st = da__pick_backend(bctx, backend, &backend);
    if (st != DA_OK)
      fprintf(stderr, "dilattn: error: tune: %s%s\n", st == DA_ERR_INVALID_ARGUMENT ? "" : "the CUDA backend: ",
              da_context_last_error(bctx));
    int maj, min; /* (a GPU without NVRTC runs bundled kernels; a sweep compiles its candidates) */
    const int no_nvrtc = st == DA_OK && backend == DA_BACKEND_CUDA && da__nvrtc_version(bctx, &maj, &min) != DA_OK;
    if (no_nvrtc)
      fprintf(stderr, "dilattn: error: tune: the CUDA backend's sweep compiles every candidate: %s (--backend host "
                      "tunes the host backend)\n", da_context_last_error(bctx));
    da_context_destroy(bctx);
    if (st != DA_OK) return st == DA_ERR_INVALID_ARGUMENT ? 2 : 4;
    if (no_nvrtc) return 4;
  }
  /* every config loaded and validated before anything is tuned or written */
  da_spec *specs = calloc((size_t)nconf, sizeof *specs);
  if (!specs) {
    fprintf(stderr, "dilattn: error: out of memory\n");
    return 4;
  }
  int bad = 0;
  for (int i = 0; i < nconf; i++) bad |= da__cli_load_config(configs[i], &specs[i]) != 0;
  /* where the plot and the CSV go: an existing folder, not a folder themselves; several
   * configs' plots are PLOT.N.png, files beside PLOT (checked each, and never beside a
   * stream: /dev/null.0.png) */
  const char *outs[2] = {csv_path, plot}, *flags[2] = {"-o", "--plot"};
  if (plot && nconf > 1 && !bad) {
    da__output po;
    if (da__output_resolve(plot, &po) == 0 && po.stream) {
      fprintf(stderr, "dilattn: error: tune: --plot %s: a stream takes one config's plot (%d configs: PLOT.N.png "
                      "files)\n", plot, nconf);
      bad = 1;
    }
    for (int i = 0; i < nconf && !bad; i++) {
      char pl[4300];
      snprintf(pl, sizeof pl, "%s.%d.png", plot, i);
      if (da__can_write_beside(pl) != 0) {
        fprintf(stderr, "dilattn: error: tune: --plot %s: cannot write %s: %s\n", plot, pl, da__output_error(errno));
        bad = 1;
      }
    }
  }
  for (int i = 0; i < 2 && !bad; i++) {
    if (!outs[i]) continue;
    char dir[4200];
    struct stat st;
    if (!da__split_path(outs[i], dir, sizeof dir)) {
      fprintf(stderr, "dilattn: error: tune: %s %s: %s\n", flags[i], outs[i], strerror(errno));
      bad = 1;
    } else if (stat(outs[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      fprintf(stderr, "dilattn: error: tune: %s %s: is a folder\n", flags[i], outs[i]);
      bad = 1;
    } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { /* (a folder that is not there: said so) */
      fprintf(stderr, "dilattn: error: tune: %s %s: %s %s\n", flags[i], outs[i], dir,
              errno == ENOENT ? "does not exist" : "is not a folder");
      bad = 1;
    } else if (da__can_write_beside(outs[i]) != 0) { /* found now, not after the sweep and the merge */
      fprintf(stderr, "dilattn: error: tune: %s %s: cannot write into %s: %s\n", flags[i], outs[i], dir,
              da__output_error(errno));
      bad = 1;
    }
  }
  char db[4200];
  if (db_arg) snprintf(db, sizeof db, "%s", db_arg);
  else da__tuning_db_path(db, sizeof db);
  if (!bad && !db[0]) { /* (it ran the sweep, then failed to write "") */
    fprintf(stderr, "dilattn: error: tune: %s\n",
            db_arg ? "--db: an empty path"
                   : "no tuning database: no cache folder to keep it beside (DILATTN_CACHE_DIR, XDG_CACHE_HOME and "
                     "HOME unset, or the folder's name too long); set DILATTN_TUNING_DB or give --db");
    bad = 1;
  }
  /* the CSV, the plot and the database: three files (one would overwrite another) */
  const char *files[3] = {csv_path, plot, db}, *names[3] = {"-o", "--plot", "the tuning database"};
  for (int i = 0; i < 3 && !bad; i++)
    for (int j = 0; j < i && !bad; j++)
      if (files[i] && files[j] && da__cli_same_file(files[i], files[j])) {
        fprintf(stderr, "dilattn: error: tune: %s %s and %s %s name the same file\n", names[j], files[j], names[i],
                files[i]);
        bad = 1;
      }
  for (int i = 0; i < 3 && !bad; i++) /* and none is a config (an output may not replace an input) */
    for (int c = 0; c < nconf && !bad; c++)
      if (files[i] && da__cli_same_file(files[i], configs[c])) {
        fprintf(stderr, "dilattn: error: tune: %s %s is the config %s: an output may not replace an input\n",
                names[i], files[i], configs[c]);
        bad = 1;
      }
  if (!bad) { /* a database the sweep could not be merged into: before the sweep, not after it */
    da_context *dctx = NULL;
    if (da_context_create(&dctx) != DA_OK) {
      fprintf(stderr, "dilattn: error: out of memory\n");
      bad = 1;
    } else if (da__tuning_db_check(dctx, db, backend == DA_BACKEND_CUDA ? "cuda" : "host") != DA_OK) {
      fprintf(stderr, "dilattn: error: tune: %s\n", da_context_last_error(dctx));
      bad = 1;
    }
    if (dctx) da_context_destroy(dctx);
  }
  if (bad) {
    free(specs);
    return 2;
  }
  summary_to = stdout;
  for (int i = 0; i < 2; i++) {
    da__output o;
    if (outs[i] && da__output_resolve(outs[i], &o) == 0 && da__output_is_stdout(&o)) summary_to = stderr;
  }
  /* the CSV's rows in memory, written whole (a temp file renamed) after each config and at
   * the end: a sweep interrupted (SIGINT) leaves no temp file beside it but in the
   * milliseconds of a write (rows appended to a temp file left one each time) */
  FILE *csv = NULL;
  char *csv_text = NULL;
  size_t csv_len = 0;
  if (csv_path) {
    csv = open_memstream(&csv_text, &csv_len);
    if (!csv) {
      fprintf(stderr, "dilattn: error: -o %s: %s\n", csv_path, strerror(errno));
      free(specs);
      return 2;
    }
    fprintf(csv, "config,backend,seq_len,batch,tile_q,tile_k,fused_min_queries,strategy,status,median_ms,min_ms,"
                 "max_ms,default,best,label,cuda_mma\n");
  }
  int rc = 0, plot_failed = 0, stopped = 0;
  for (int i = 0; i < nconf; i++) {
    char pl[4300];
    if (plot && nconf > 1) snprintf(pl, sizeof pl, "%s.%d.png", plot, i);
    const csv_out co = {csv, csv_path, &csv_text, &csv_len};
    int r = tune_one(configs[i], &specs[i], N, B, backend, reps, threads, csv ? &co : NULL, i + 1 == nconf,
                     plot ? (nconf > 1 ? pl : plot) : NULL, db, &plot_failed);
    if (r && !rc) rc = r;
    if (r == 2) { /* bad input: stop, and keep the CSV there was (its rows would be partial) */
      stopped = 1;
      break;
    }
  }
  free(specs);
  if (plot_failed && !rc) rc = 2; /* a plot that cannot be written fails the run, like the CSV */
  if (csv) {
    const int ok = !ferror(csv) && fclose(csv) == 0;
    if (!stopped && (!ok || da__write_output(csv_path, csv_text, csv_len) != 0)) {
      fprintf(stderr, "dilattn: error: cannot write %s: %s\n", csv_path, ok ? strerror(errno) : "out of memory");
      if (!rc) rc = 2;
    }
    free(csv_text);
  }
  return rc;
}
