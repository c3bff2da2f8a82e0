/* parallel.c - the one job queue of the library and the CLI: items claimed in order by
 * up to `threads` threads, the caller one of them (preload's plans, gen's compiles). */
#include "runtime/internal.h"

#include <pthread.h>
#include <unistd.h>

typedef struct {
  int n, next, stop;
  int (*fn)(void *user, int i);
  void *user;
  pthread_mutex_t mu;
} queue_t;

static void *drain(void *arg) {
  queue_t *q = arg;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    const int i = q->stop ? q->n : q->next++;
    pthread_mutex_unlock(&q->mu);
    if (i >= q->n) return NULL;
    if (q->fn(q->user, i)) {
      pthread_mutex_lock(&q->mu);
      q->stop = 1;
      pthread_mutex_unlock(&q->mu);
    }
  }
}

int da__online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

int da__compile_threads(int requested) {
  const int cpus = da__online_cpus();
  return requested > 0 ? requested : cpus < 16 ? cpus : 16;
}

int da__parallel_for(int n, int threads, int (*fn)(void *user, int i), void *user) {
  if (n <= 0) return 0;
  queue_t q = {n, 0, 0, fn, user, PTHREAD_MUTEX_INITIALIZER};
  int nt = threads > 0 ? threads : da__online_cpus();
  if (nt > n) nt = n;
  if (nt > DA_MAX_THREADS) nt = DA_MAX_THREADS;
  pthread_t th[DA_MAX_THREADS];
  int started = 0;
  for (int t = 1; t < nt; t++) started += pthread_create(&th[started], NULL, drain, &q) == 0;
  drain(&q); /* the caller too (and alone where no thread could start) */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&q.mu);
  return q.next < n ? q.next : n;
}
