/* test_threads.c - thread safety and preloading on the host backend: 4 threads create
 * plans for overlapping specs and execute them at the same time, each checked against the
 * reference (CTest runs this binary built with ThreadSanitizer too: test_threads_tsan);
 * da_plan_preload compiles in parallel with progress reports, returns every plan, and
 * stops early when the progress callback cancels.
 * Given the fake CUDA driver (tests/fake_cuda.c), the same on the CUDA backend: 4 threads
 * create plans of overlapping fp16 specs (warp-specialized fused and split, a sparse
 * layout's device tables, mma.sync) on one context and execute them at once, each on a
 * stream of its own, with the workspace from the context's device pool. NVRTC compiles for
 * real; the fake runs no kernel, so what is checked is that every call succeeds and,
 * under ThreadSanitizer, that the backend's shared state (device setup, module cache,
 * pool, pattern cache) is touched without a race.
 * Then two fake devices: contexts bound and used from threads of either device at once.
 * Run: build/tests/test_threads [build/tests/libfake_cuda.so]   (ctest -R threads) */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reference.h"
#include "runtime/nvrtc.h"
#include "test_util.h"

#define NSPEC 5
static da_context *shared_ctx;
static da_spec specs[NSPEC];

/* The specs both parts start from: two branches (w0, w1 with rates 1, r1), 4 heads over 2
 * kv heads, a scale that makes the kernels new to each test run (tag) */
static void two_branch_spec(da_spec *s, int64_t w0, int64_t w1, int64_t r1, int head_dim, double scale) {
  da_spec_init(s);
  s->num_branches = 2;
  s->segment_lengths[0] = w0, s->segment_lengths[1] = w1;
  s->dilation_rates[0] = 1, s->dilation_rates[1] = r1;
  s->num_heads = 4;
  s->num_kv_heads = 2;
  s->head_dim = head_dim;
  s->has_scale = 1;
  s->scale = scale;
}

static void make_specs(double tag) {
  for (int i = 0; i < NSPEC; i++) {
    two_branch_spec(&specs[i], 16 << (i % 3), 64, 1 + i % 2, 16, tag + 0.01 * i);
    specs[i].causal = i % 2;
  }
}

typedef struct {
  int id, ok;
  char err[512];
} targ_t;

#define NTHREADS 4

/* fn on NTHREADS threads at once (ids 0..3); each must end ok */
static void run_threads(void *(*fn)(void *), const char *what) {
  pthread_t th[NTHREADS];
  targ_t args[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i].id = i;
    pthread_create(&th[i], NULL, fn, &args[i]);
  }
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    TU_CHECK(args[i].ok, "%s thread %d: %s", what, i, args[i].err);
  }
}

static void *thread_main(void *arg) {
  targ_t *t = arg;
  t->ok = 1;
  int64_t B = 1, N = 100 + t->id * 7;
  int64_t nq = B * N * 4 * 16, nk = B * N * 2 * 16;
  float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk);
  float *v = malloc(sizeof(float) * (size_t)nk), *out = malloc(sizeof(float) * (size_t)nq);
  float *lse = malloc(sizeof(float) * (size_t)(B * 4 * N));
  double *dq = malloc(8 * (size_t)nq), *dk = malloc(8 * (size_t)nk), *dv = malloc(8 * (size_t)nk);
  double *ro = malloc(8 * (size_t)nq), *rl = malloc(8 * (size_t)(B * 4 * N));
  uint64_t st = 100 + (uint64_t)t->id;
  for (int64_t i = 0; i < nq; i++) dq[i] = q[i] = (float)(2 * tu_uniform(&st) - 1);
  for (int64_t i = 0; i < nk; i++) dk[i] = k[i] = (float)(2 * tu_uniform(&st) - 1), dv[i] = v[i] = (float)(2 * tu_uniform(&st) - 1);
  for (int round = 0; round < 3 && t->ok; round++)
    for (int j = 0; j < NSPEC && t->ok; j++) {
      const da_spec *s = &specs[(j + t->id) % NSPEC]; /* overlapping specs, different order */
      da_plan *p = NULL;
      if (da_plan_create(shared_ctx, s, DA_BACKEND_HOST, &p) != DA_OK) {
        snprintf(t->err, sizeof t->err, "plan: %s", da_context_last_error(shared_ctx));
        t->ok = 0;
        break;
      }
      da_args a;
      da_args_init(&a, s, B, N, q, k, v, out, lse);
      if (da_plan_execute(p, &a) != DA_OK) {
        snprintf(t->err, sizeof t->err, "execute: %s", da_context_last_error(shared_ctx));
        t->ok = 0;
      }
      da_plan_destroy(p);
      da_ref_attention(s, B, N, dq, dk, dv, ro, rl);
      double eo, el;
      if (t->ok && !tu_compare(DA_DTYPE_FLOAT32, nq, out, ro, B * 4 * N, lse, rl, 1.0, &eo, &el)) {
        snprintf(t->err, sizeof t->err, "spec %d: out err %g lse err %g", (j + t->id) % NSPEC, eo, el);
        t->ok = 0;
      }
    }
  free(q), free(k), free(v), free(out), free(lse), free(dq), free(dk), free(dv), free(ro), free(rl);
  return NULL;
}

typedef struct {
  int calls, last_done, cancel_after;
  int seen[NSPEC];
} prog_t;

static int on_progress(void *user, int done, int total, int index, da_status st) {
  prog_t *p = user;
  p->calls++;
  p->last_done = done;
  if (index >= 0 && index < NSPEC) p->seen[index] += st == DA_OK;
  (void)total;
  return p->cancel_after && done >= p->cancel_after;
}

#define NCUDA 4
static da_spec cuda_specs[NCUDA];

static void make_cuda_specs(double tag) {
  for (int i = 0; i < NCUDA; i++) two_branch_spec(&cuda_specs[i], 128, 256, 2, 64, tag + 0.01 * i);
  for (int i = 0; i < NCUDA; i++) cuda_specs[i].dtype = DA_DTYPE_FLOAT16;
  cuda_specs[0].segment_lengths[0] = 2048; /* fused: a tile holds 1024 / 2 queries */
  cuda_specs[0].segment_lengths[1] = 4096;
  cuda_specs[1].causal = 1; /* split: workspace from the pool */
  cuda_specs[1].segment_lengths[1] = 512;
  cuda_specs[1].dilation_rates[1] = 4;
  cuda_specs[2].sparsity.layout = DA_LAYOUT_LOCAL_WINDOW; /* block tables on the device */
  cuda_specs[2].sparsity.block = 16;
  cuda_specs[2].sparsity.window = 1;
  cuda_specs[3].head_dim = 32; /* mma.sync */
}

static void *thread_stream(int id) { return (void *)(uintptr_t)(0x5000 + 16 * id); } /* the fake takes any */

static da_plan *shared_plans[NCUDA]; /* set: the threads execute these, not their own */

static void *cuda_thread_main(void *arg) {
  targ_t *t = arg;
  t->ok = 1;
  const int64_t B = 1 + t->id % 2, N = 700 + 64 * t->id, H = 4, D = 64;
  const size_t nq = (size_t)(B * N * H * D), nk = nq / 2; /* fp16 elements; D 32 uses less */
  uint16_t *q = calloc(nq, 2), *k = calloc(nk, 2), *v = calloc(nk, 2), *out = calloc(nq, 2);
  float *lse = calloc((size_t)(B * H * N), sizeof(float));
  void *stream = thread_stream(t->id);
  for (int round = 0; round < 2 && t->ok && q && k && v && out && lse; round++)
    for (int j = 0; j < NCUDA && t->ok; j++) {
      const da_spec *s = &cuda_specs[(j + t->id) % NCUDA];
      da_plan *p = shared_plans[(j + t->id) % NCUDA];
      if (!p && da_plan_create(shared_ctx, s, DA_BACKEND_CUDA, &p) != DA_OK) {
        snprintf(t->err, sizeof t->err, "cuda plan %d: %s", (j + t->id) % NCUDA, da_context_last_error(shared_ctx));
        t->ok = 0;
        break;
      }
      da_args a;
      da_args_init(&a, s, B, N, q, k, v, out, lse);
      a.stream = stream;
      if (da_plan_execute(p, &a) != DA_OK) {
        snprintf(t->err, sizeof t->err, "cuda execute %d: %s", (j + t->id) % NCUDA, da_context_last_error(shared_ctx));
        t->ok = 0;
      }
      if (!shared_plans[(j + t->id) % NCUDA]) da_plan_destroy(p);
    }
  if (!q || !k || !v || !out || !lse) snprintf(t->err, sizeof t->err, "out of memory"), t->ok = 0;
  free(q), free(k), free(v), free(out), free(lse);
  return NULL;
}

/* Every launch in the fake driver's log (FAKE_CUDA_LOG) went on one of the threads'
 * streams, and each thread's on its own: the same number each (they ran the same plans). */
static void check_streams(const char *log) {
  FILE *f = fopen(log, "r");
  TU_CHECK(f != NULL, "no launch log %s", log);
  if (!f) return;
  int per[NTHREADS] = {0}, other = 0;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "launch ", 7) != 0) continue; /* (the tensor maps a TMA plan encodes: "tmap ...") */
    const char *at = strstr(line, " stream ");
    void *sp = NULL;
    if (!at || sscanf(at, " stream %p", &sp) != 1) {
      other++;
      continue;
    }
    int i = 0;
    while (i < NTHREADS && sp != thread_stream(i)) i++;
    if (i < NTHREADS) per[i]++;
    else other++;
  }
  fclose(f);
  int same = per[0] > 0;
  for (int i = 1; i < NTHREADS; i++) same &= per[i] == per[0];
  TU_CHECK(!other && same, "launches by stream: %d %d %d %d, %d on no thread's stream", per[0], per[1], per[2], per[3],
           other);
}

/* Two fake devices (FAKE_CUDA_DEVICES=2): threads 0 and 2 with device 0 current, 1 and 3
 * with device 1, each first using the context of its device (two threads race for each
 * context's binding, device 1's set-up races device 0's use), then executing every plan on
 * a stream of its device; the odd threads also run device 0's plans on device 0's
 * streams with device 1 current (the library pushes device 0's context) */
static da_context *dev_ctx[2];
static int (*fake_retain)(void **, int);
static int (*fake_set)(void *);
static void *(*fake_stream)(int);

static void *device_thread_main(void *arg) {
  targ_t *t = arg;
  t->ok = 1;
  const int d = t->id % 2;
  void *primary = NULL;
  fake_retain(&primary, d);
  fake_set(primary);
  const int64_t B = 1, N = 700 + 64 * t->id, H = 4, D = 64;
  const size_t nq = (size_t)(B * N * H * D), nk = nq / 2;
  uint16_t *q = calloc(nq, 2), *k = calloc(nk, 2), *v = calloc(nk, 2), *out = calloc(nq, 2);
  float *lse = calloc((size_t)(B * H * N), sizeof(float));
  for (int c = d; c >= 0 && t->ok && q && k && v && out && lse; c--) /* its device's context, then 0's */
    for (int j = 0; j < NCUDA && t->ok; j++) {
      const da_spec *s = &cuda_specs[(j + t->id) % NCUDA];
      da_plan *p = NULL;
      if (da_plan_create(dev_ctx[c], s, DA_BACKEND_CUDA, &p) != DA_OK) {
        snprintf(t->err, sizeof t->err, "device %d plan %d: %s", c, (j + t->id) % NCUDA, da_context_last_error(dev_ctx[c]));
        t->ok = 0;
        break;
      }
      da_args a;
      da_args_init(&a, s, B, N, q, k, v, out, lse);
      a.stream = fake_stream(c);
      if (da_plan_execute(p, &a) != DA_OK) {
        snprintf(t->err, sizeof t->err, "device %d execute %d: %s", c, (j + t->id) % NCUDA,
                 da_context_last_error(dev_ctx[c]));
        t->ok = 0;
      }
      da_plan_destroy(p);
    }
  if (!q || !k || !v || !out || !lse) snprintf(t->err, sizeof t->err, "out of memory"), t->ok = 0;
  free(q), free(k), free(v), free(out), free(lse);
  fake_set(NULL);
  return NULL;
}

static void test_cuda_devices(const char *fake_driver, const char *log) {
  void *lib = dlopen(fake_driver, RTLD_NOW);
  fake_retain = lib ? (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain") : NULL;
  fake_set = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : NULL;
  fake_stream = lib ? (void *(*)(int))dlsym(lib, "fake_cuda_stream") : NULL;
  TU_CHECK(fake_retain && fake_set && fake_stream, "the fake driver's device calls");
  if (!fake_retain || !fake_set || !fake_stream) return;
  unlink(log);
  da_context_create(&dev_ctx[0]), da_context_create(&dev_ctx[1]);
  run_threads(device_thread_main, "two devices:");
  /* every launch on the device of its stream */
  FILE *f = fopen(log, "r");
  int n = 0, wrong = 0;
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "launch ", 7) != 0) continue;
    const char *at = strstr(line, " stream "), *dv = strstr(line, " dev ");
    void *sp = NULL;
    int dev = -1;
    n++;
    if (!at || !dv || sscanf(at, " stream %p", &sp) != 1 || sscanf(dv, " dev %d", &dev) != 1 || sp != fake_stream(dev))
      wrong++;
  }
  if (f) fclose(f);
  TU_CHECK(n > 0 && !wrong, "two devices: %d launches, %d not on their stream's device", n, wrong);
  da_context_destroy(dev_ctx[0]), da_context_destroy(dev_ctx[1]);
}

/* The CUDA part: driver the fake one (its path), NVRTC real, into a cache of its own (a
 * cache that already held the kernels would leave nothing to compile). */
static void test_cuda_threads(const char *fake_driver, double tag) {
  char dir[] = "/tmp/dilattn-threads-XXXXXX", log[64], cmd[128];
  if (!mkdtemp(dir)) {
    TU_CHECK(0, "mkdtemp");
    return;
  }
  const char *old_cache = getenv("DILATTN_CACHE_DIR");
  char *saved = old_cache ? strdup(old_cache) : NULL;
  setenv("DILATTN_CACHE_DIR", dir, 1);
  snprintf(log, sizeof log, "%s/launches.log", dir);
  setenv("FAKE_CUDA_LOG", log, 1);
  setenv("DILATTN_CUDA_LIB", fake_driver, 1);
  setenv("FAKE_CUDA_DEVICES", "2", 1); /* (device 0 for all but test_cuda_devices) */
  make_cuda_specs(tag);
  TU_CHECK(da_context_create(&shared_ctx) == DA_OK, "context");
  int maj, min; /* without NVRTC there is nothing to compile with (the driver's set-up, the
                  * context's first CUDA plan, is left to the threads: they race for it) */
  if (da__nvrtc_version(shared_ctx, &maj, &min) != DA_OK) {
    printf("SKIP cuda threads: %s\n", da_context_last_error(shared_ctx));
  } else {
    run_threads(cuda_thread_main, "cuda");
    check_streams(log);
    unlink(log);
    /* then each plan made once and executed by all four threads at once */
    for (int i = 0; i < NCUDA; i++)
      TU_CHECK(da_plan_create(shared_ctx, &cuda_specs[i], DA_BACKEND_CUDA, &shared_plans[i]) == DA_OK,
               "shared plan %d: %s", i, da_context_last_error(shared_ctx));
    run_threads(cuda_thread_main, "cuda, shared plans:");
    check_streams(log);
    printf("cuda threads: 4 x %d plans of their own, then 4 plans shared by all, executed on one context\n", 2 * NCUDA);
    test_cuda_devices(fake_driver, log);
  }
  for (int i = 0; i < NCUDA; i++) da_plan_destroy(shared_plans[i]), shared_plans[i] = NULL;
  da_context_destroy(shared_ctx);
  unsetenv("DILATTN_CUDA_LIB");
  unsetenv("FAKE_CUDA_LOG");
  if (saved) setenv("DILATTN_CACHE_DIR", saved, 1);
  else unsetenv("DILATTN_CACHE_DIR");
  free(saved);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  TU_CHECK(system(cmd) == 0, "%s", cmd);
}

/* fork while a thread of the process compiles a kernel (Python's DataLoader workers fork
 * a process whose model loads): the child's plan of the same spec used to wait forever
 * for the compile, whose thread the child does not have (helper-54). The compile made
 * slow (CC a script that sleeps 1 s first) so that it is in flight at the fork; the child
 * must make its plan within 20 s. */
static da_context *fork_ctx;
static da_spec fork_spec;
static void *fork_compile(void *arg) {
  da_plan *p = NULL;
  *(da_status *)arg = da_plan_create(fork_ctx, &fork_spec, DA_BACKEND_HOST, &p);
  da_plan_destroy(p);
  return NULL;
}

static void test_fork_inflight(double tag) {
  char dir[] = "/tmp/dilattn-fork-XXXXXX", cc[300], old_cc[300];
  TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(cc, sizeof cc, "%s/slowcc", dir);
  FILE *f = fopen(cc, "w");
  const char *base = getenv("CC");
  snprintf(old_cc, sizeof old_cc, "%s", base ? base : "");
  if (f) fprintf(f, "#!/bin/sh\nsleep 1\nexec %s \"$@\"\n", base && *base ? base : "cc"), fclose(f);
  chmod(cc, 0755);
  setenv("CC", cc, 1);
  two_branch_spec(&fork_spec, 64, 128, 2, 16, tag + 1e-4 * (getpid() % 997)); /* (a kernel no cache holds) */
  da_context_create(&fork_ctx);
  pthread_t t;
  da_status parent = DA_ERR_INTERNAL;
  pthread_create(&t, NULL, fork_compile, &parent);
  usleep(300000); /* the compile in flight (the script's sleep) */
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    da_plan *p = NULL;
    const da_status st = da_plan_create(fork_ctx, &fork_spec, DA_BACKEND_HOST, &p);
    _exit(st == DA_OK && p ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  pthread_join(t, NULL);
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "fork during a compile: the child's plan of the same spec %s (status %d)",
           WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung" : "failed", status);
  TU_CHECK(parent == DA_OK, "fork during a compile: the parent's plan: %s", da_status_name(parent));
  da_context_destroy(fork_ctx);
  if (old_cc[0]) setenv("CC", old_cc, 1);
  else unsetenv("CC");
  unlink(cc);
  rmdir(dir);
}

int main(int argc, char **argv) {
  const char *tag = getenv("DILATTN_TEST_TAG"); /* lets the TSan build use fresh kernels */
  make_specs(tag ? atof(tag) : 0.5);
  da_context_create(&shared_ctx);
  run_threads(thread_main, "host");
  da_context_destroy(shared_ctx);

  /* preload: every plan back, progress once per spec */
  make_specs(tag ? atof(tag) + 0.3 : 0.8);
  da_context *ctx;
  da_context_create(&ctx);
  da_plan *plans[NSPEC];
  prog_t pr;
  memset(&pr, 0, sizeof pr);
  TU_CHECK(da_plan_preload(ctx, specs, NSPEC, DA_BACKEND_HOST, 2, on_progress, &pr, plans) == DA_OK, "preload: %s",
           da_context_last_error(ctx));
  TU_CHECK(pr.calls == NSPEC && pr.last_done == NSPEC, "progress called %d times, last done %d", pr.calls, pr.last_done);
  for (int i = 0; i < NSPEC; i++) {
    TU_CHECK(plans[i] != NULL && pr.seen[i] == 1, "preloaded plan %d", i);
    da_plan_destroy(plans[i]);
  }
  /* cancellation after the first finished spec: the rest are skipped */
  da_context_destroy(ctx);
  make_specs(tag ? atof(tag) + 0.6 : 1.1);
  da_context_create(&ctx);
  memset(&pr, 0, sizeof pr);
  pr.cancel_after = 1;
  da_status st = da_plan_preload(ctx, specs, NSPEC, DA_BACKEND_HOST, 1, on_progress, &pr, plans);
  int got = 0;
  for (int i = 0; i < NSPEC; i++) {
    got += plans[i] != NULL;
    da_plan_destroy(plans[i]);
  }
  TU_CHECK(st == DA_ERR_CANCELLED && got == 1 && pr.calls == 1, "cancel: status %s, %d plans, %d progress calls",
           da_status_name(st), got, pr.calls);
  TU_CHECK(strstr(da_context_last_error(ctx), "cancelled") != NULL, "cancel message: %s", da_context_last_error(ctx));
  /* cancelled by the progress call of the last spec: nothing was left to skip, every plan
   * is made (it said DA_ERR_CANCELLED, "0 of N specs not loaded") */
  memset(&pr, 0, sizeof pr);
  pr.cancel_after = NSPEC;
  st = da_plan_preload(ctx, specs, NSPEC, DA_BACKEND_HOST, 2, on_progress, &pr, plans);
  got = 0;
  for (int i = 0; i < NSPEC; i++) {
    got += plans[i] != NULL;
    da_plan_destroy(plans[i]);
  }
  TU_CHECK(st == DA_OK && got == NSPEC, "cancel after the last spec: status %s, %d of %d plans (%s)", da_status_name(st),
           got, NSPEC, da_context_last_error(ctx));
  /* a failing spec is reported by index */
  da_spec bad[2] = {specs[0], specs[1]};
  bad[1].dilation_rates[0] = 99;
  st = da_plan_preload(ctx, bad, 2, DA_BACKEND_HOST, 2, NULL, NULL, NULL);
  TU_CHECK(st == DA_ERR_INVALID_SPEC && strstr(da_context_last_error(ctx), "spec 1"), "bad spec: %s %s",
           da_status_name(st), da_context_last_error(ctx));
  da_context_destroy(ctx);
  test_fork_inflight(tag ? atof(tag) + 0.7 : 1.2);
  if (argc > 1) test_cuda_threads(argv[1], tag ? atof(tag) + 0.9 : 1.4);
  return tu_report();
}
