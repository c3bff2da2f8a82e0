/* pool.c - the host memory pool (DESIGN.md decision 7): a small bucketed layer over
 * malloc. Requests round up to a power of two (at least 4 KiB); freed blocks wait in
 * their bucket's free list for the next request of that size, so a plan executed again
 * and again makes no raw allocation after its first run. DILATTN_POOL=0 turns pooling
 * off (every request is a raw malloc/free: what sanitizers want to see). Thread-safe. */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 48
#define MIN_SHIFT 12

typedef struct block {
  struct block *next;
} block_t;

struct da__pool {
  pthread_mutex_t mu;
  int enabled;
  block_t *free_list[NBUCKETS];
  size_t total, peak;
  uint64_t raw_allocs, requests, reused;
};

da__pool *da__pool_create(void) {
  da__pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  const char *e = getenv("DILATTN_POOL");
  p->enabled = !(e && !strcmp(e, "0"));
  return p;
}

void da__pool_destroy(da__pool *p) {
  if (!p) return;
  for (int b = 0; b < NBUCKETS; b++)
    for (block_t *x = p->free_list[b], *n; x; x = n) {
      n = x->next;
      free(x);
    }
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static int bucket_of(size_t bytes) {
  int b = 0;
  size_t sz = (size_t)1 << MIN_SHIFT;
  while (sz < bytes && b < NBUCKETS - 1) {
    sz <<= 1;
    b++;
  }
  return sz < bytes ? -1 : b;
}

void *da__pool_alloc(da__pool *p, size_t bytes) {
  if (bytes == 0) bytes = 1;
  int b = bucket_of(bytes);
  if (b < 0) return NULL;
  size_t sz = (size_t)1 << (MIN_SHIFT + b);
  pthread_mutex_lock(&p->mu);
  p->requests++;
  block_t *x = p->enabled ? p->free_list[b] : NULL;
  if (x) {
    p->free_list[b] = x->next;
    p->reused++;
    pthread_mutex_unlock(&p->mu);
    return x;
  }
  pthread_mutex_unlock(&p->mu);
  void *mem = malloc(p->enabled ? sz : bytes);
  if (!mem) return NULL;
  pthread_mutex_lock(&p->mu);
  p->raw_allocs++; /* (one made: a failed malloc is none) */
  p->total += p->enabled ? sz : bytes;
  if (p->total > p->peak) p->peak = p->total;
  pthread_mutex_unlock(&p->mu);
  return mem;
}

void da__pool_free(da__pool *p, void *mem, size_t bytes) {
  if (!mem) return;
  if (bytes == 0) bytes = 1;
  int b = bucket_of(bytes);
  pthread_mutex_lock(&p->mu);
  if (p->enabled && b >= 0) {
    block_t *x = mem;
    x->next = p->free_list[b];
    p->free_list[b] = x;
    pthread_mutex_unlock(&p->mu);
    return;
  }
  p->total -= bytes;
  pthread_mutex_unlock(&p->mu);
  free(mem);
}

void da__pool_stats(da__pool *p, da_pool_stats *out) {
  pthread_mutex_lock(&p->mu);
  out->total_allocated = p->total;
  out->peak_allocated = p->peak;
  out->allocation_count = p->raw_allocs;
  out->reuse_rate = p->requests ? (double)p->reused / (double)p->requests : 0.0;
  pthread_mutex_unlock(&p->mu);
}
