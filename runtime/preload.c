/* preload.c - JIT at model load: create the plans for a list of specs with compiles
 * running in parallel threads, report progress after each, and stop early when the
 * progress callback asks to (NVRTC compiles in flight are cancelled through NVRTC's flow
 * callback; a host compile in flight finishes, and nothing new starts). The kernel cache
 * makes specs that share a kernel compile it once. */
#include "runtime/internal.h"
#include "runtime/nvrtc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  da_context *ctx;
  const da_spec *specs;
  int count, done;
  da_backend backend;
  da_preload_progress progress;
  void *user;
  da_plan **plans;
  da_status *status;
  char (*errors)[512];
  volatile int cancel;
  pthread_mutex_t mu;
} job_t;

static int load_one(void *arg, int i) {
  job_t *j = arg;
  pthread_mutex_lock(&j->mu); /* cancelled between this thread's claim and now: not started */
  const int cancelled = j->cancel;
  pthread_mutex_unlock(&j->mu);
  if (cancelled) return 1;
  da__nvrtc_set_cancel(&j->cancel);
  da_plan *p = NULL;
  da_status st = da_plan_create(j->ctx, &j->specs[i], j->backend, &p);
  if (st != DA_OK) snprintf(j->errors[i], sizeof j->errors[i], "%s", da_context_last_error(j->ctx));
  da__nvrtc_set_cancel(NULL);
  pthread_mutex_lock(&j->mu);
  j->status[i] = st;
  j->plans[i] = p;
  j->done++;
  if (j->progress && j->progress(j->user, j->done, j->count, i, st)) j->cancel = 1;
  const int stop = j->cancel;
  pthread_mutex_unlock(&j->mu);
  return stop;
}

da_status da_plan_preload(da_context *ctx, const da_spec *specs, int count, da_backend backend,
                          int num_threads, da_preload_progress progress, void *user, da_plan **plans) {
  DA_RETURN_IF(!ctx || (!specs && count > 0) || count < 0, DA_ERR_INVALID_ARGUMENT,
               "ctx and specs must not be NULL; count must not be negative");
  DA_RETURN_IF(num_threads < 0, DA_ERR_INVALID_ARGUMENT, "num_threads %d: must be 0 (the online CPUs) or more",
               num_threads);
  if (count == 0) return DA_OK;
  job_t j;
  memset(&j, 0, sizeof j);
  j.ctx = ctx, j.specs = specs, j.count = count, j.backend = backend, j.progress = progress, j.user = user;
  j.plans = calloc((size_t)count, sizeof *j.plans);
  j.status = calloc((size_t)count, sizeof *j.status);
  j.errors = calloc((size_t)count, sizeof *j.errors);
  if (!j.plans || !j.status || !j.errors) {
    free(j.plans), free(j.status), free(j.errors);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "preload: out of memory");
  }
  for (int i = 0; i < count; i++) j.status[i] = DA_ERR_CANCELLED;
  /* a context takes the CUDA device current on the first thread that uses it for CUDA:
   * this caller's, not a worker's (which has none current); the backend picked as plan
   * creation picks it (DILATTN_BACKEND=host with auto: the driver not opened) */
  da_backend be;
  if (da__pick_backend(ctx, backend, &be) != DA_OK) da__clear_error(ctx); /* each spec says why */
  pthread_mutex_init(&j.mu, NULL);
  da__parallel_for(count, num_threads, load_one, &j);
  pthread_mutex_destroy(&j.mu);
  da_status result = DA_OK;
  for (int i = 0; i < count && result == DA_OK; i++)
    if (j.status[i] != DA_OK && j.status[i] != DA_ERR_CANCELLED)
      result = da__set_error(ctx, j.status[i], "preload: spec %d: %s", i, j.errors[i]);
  if (result == DA_OK && j.cancel) { /* (after the last spec: nothing left out, DA_OK) */
    int left = 0;
    for (int i = 0; i < count; i++) left += j.status[i] == DA_ERR_CANCELLED;
    if (left) result = da__set_error(ctx, DA_ERR_CANCELLED, "preload: cancelled with %d of %d specs not loaded", left, count);
  }
  for (int i = 0; i < count; i++) {
    if (plans) plans[i] = j.plans[i];
    else da_plan_destroy(j.plans[i]);
  }
  free(j.plans), free(j.status), free(j.errors);
  return result;
}
