/* kernel_cache.c - in-memory kernel cache: a mutex-protected list of entries keyed by
 * the SHA-256 cache key (host modules and cubins alike), with in-flight de-duplication
 * through a condition variable.
 * A failed compile is not remembered: the next request tries again. */
#include "runtime/kernel_cache.h"

#include <stdlib.h>
#include <string.h>

enum { ENTRY_COMPILING, ENTRY_READY };

struct da__kentry {
  char key[65];
  int state;
  da__kpayload payload;
  da__kentry *next;
};

int da__kernel_cache_init(da__kernel_cache *c) {
  memset(c, 0, sizeof *c);
  if (pthread_mutex_init(&c->mu, NULL)) return -1;
  if (pthread_cond_init(&c->cv, NULL)) {
    pthread_mutex_destroy(&c->mu);
    return -1;
  }
  return 0;
}

void da__kernel_cache_destroy(da__kernel_cache *c) {
  da__kentry *e = c->head;
  while (e) {
    da__kentry *n = e->next;
    da__host_module_unload(&e->payload.host);
    free(e->payload.blob);
    free(e);
    e = n;
  }
  c->head = NULL;
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
}

static da__kentry *find(da__kernel_cache *c, const char *key) {
  for (da__kentry *e = c->head; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  return NULL;
}

static void unlink_entry(da__kernel_cache *c, da__kentry *dead) {
  for (da__kentry **pp = &c->head; *pp; pp = &(*pp)->next)
    if (*pp == dead) {
      *pp = dead->next;
      return;
    }
}

da_status da__kernel_cache_get(const da_context *ctx, da__kernel_cache *c, const char *key,
                               da__kproduce produce, void *arg, const da__kpayload **out) {
  pthread_mutex_lock(&c->mu);
  for (;;) {
    da__kentry *e = find(c, key);
    if (!e) break;
    if (e->state == ENTRY_READY) {
      c->hits++;
      *out = &e->payload;
      pthread_mutex_unlock(&c->mu);
      return DA_OK;
    }
    pthread_cond_wait(&c->cv, &c->mu); /* someone is producing this key */
  }
  da__kentry *e = calloc(1, sizeof *e);
  if (!e) {
    pthread_mutex_unlock(&c->mu);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "kernel cache: out of memory");
  }
  memcpy(e->key, key, 64);
  e->state = ENTRY_COMPILING;
  e->next = c->head;
  c->head = e;
  c->misses++;
  pthread_mutex_unlock(&c->mu);

  da__kpayload pl;
  memset(&pl, 0, sizeof pl);
  da_status st = produce(ctx, arg, &pl);

  pthread_mutex_lock(&c->mu);
  if (st == DA_OK) {
    e->payload = pl;
    e->state = ENTRY_READY;
    c->compiles++;
    *out = &e->payload;
  } else {
    unlink_entry(c, e);
    free(e);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return st;
}

typedef struct {
  const char *source, *symbol;
} host_job;

static da_status produce_host(const da_context *ctx, void *arg, da__kpayload *out) {
  const host_job *j = arg;
  return da__host_compile(ctx, j->source, j->symbol, &out->host);
}

da_status da__kernel_cache_get_host(const da_context *ctx, da__kernel_cache *c, const char *key,
                                    const char *source, const char *symbol,
                                    da__host_kernel_fn *fn) {
  host_job j = {source, symbol};
  const da__kpayload *pl;
  DA_TRY(da__kernel_cache_get(ctx, c, key, produce_host, &j, &pl));
  *fn = pl->host.fn;
  return DA_OK;
}
