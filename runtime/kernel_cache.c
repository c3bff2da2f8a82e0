/* kernel_cache.c - in-memory kernel cache: a mutex-protected list of entries keyed by
 * the SHA-256 cache key (host modules and cubins alike), with in-flight de-duplication
 * through a condition variable.
 * A failed compile is not remembered: the next request tries again. */
#include "runtime/kernel_cache.h"

#include "gen/render.h"
#include "runtime/fileio.h"
#include "runtime/internal.h"
#include "runtime/log.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum { ENTRY_COMPILING, ENTRY_READY };

struct da__kentry {
  char key[65];
  int state;
  pid_t producer; /* ENTRY_COMPILING: the process whose thread produces it */
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
  c->disk = da__disk_cache_open();
  c->bundles = da__bundles_create();
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
  da__disk_cache_close(c->disk);
  da__bundles_destroy(c->bundles);
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
  const pid_t self = getpid();
  da__kentry *e;
  for (;;) {
    e = find(c, key);
    if (!e) break;
    if (e->state == ENTRY_READY) {
      c->hits++;
      *out = &e->payload;
      pthread_mutex_unlock(&c->mu);
      return DA_OK;
    }
    /* a forked child's copy of an entry a thread of its parent was producing: that thread
     * is not in this process, nobody would ever finish it; this thread does */
    if (e->producer != self) break;
    pthread_cond_wait(&c->cv, &c->mu); /* someone is producing this key */
  }
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) {
      pthread_mutex_unlock(&c->mu);
      return da__set_error(ctx, DA_ERR_NO_MEMORY, "kernel cache: out of memory");
    }
    memcpy(e->key, key, 64);
    e->state = ENTRY_COMPILING;
    e->next = c->head;
    c->head = e;
  }
  e->producer = self;
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
    /* (where a kernel held came from: counted once it loaded, da_context_kernel_cache_stats) */
    if (pl.from.origin == DA__FROM_BUNDLE) c->held_bundle++;
    else if (pl.from.origin == DA__FROM_DISK) c->held_disk++;
    else if (pl.from.origin == DA__FROM_BUILD) c->held_built++, c->held_build_ms += pl.from.build_ms;
    *out = &e->payload;
  } else {
    unlink_entry(c, e);
    free(e);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* DILATTN_DISABLE_JIT: set, and not "", "0", "false", "no" or "off" (any case): "false"
 * turned compiling off */
int da__jit_disabled(void) {
  const char *e = getenv("DILATTN_DISABLE_JIT");
  static const char *const off[] = {"", "0", "false", "no", "off"};
  for (size_t i = 0; e && i < sizeof off / sizeof *off; i++)
    if (!strcasecmp(e, off[i])) return 0;
  return e != NULL;
}

/* The disk cache's build of source_key by another compiler (another NVRTC, none, another
 * CC's program), for a process that cannot compile the kernel (why): 1 where one was taken
 * (accept), -1 where one was there but refused, 0 where there is none */
static int disk_other_compiler(da__kernel_cache *c, const char *arch, const char *key, const char *source_key,
                               const char *kernel, da__artifact_accept accept, void *arg, const char *why, void **bytes,
                               size_t *n, char *path, size_t cap, da__kfrom *from) {
  const int r = da__disk_cache_find_source(c->disk, arch, key, source_key, accept, arg, path, cap, bytes, n);
  if (r <= 0) return r;
  __atomic_add_fetch(&c->disk_hits, 1, __ATOMIC_RELAXED);
  from->origin = DA__FROM_DISK;
  da__log(DA_LOG_INFO, "kernel %s for %s: the disk cache's build by another compiler (%s), as %s (artifact key %s here)",
          kernel, arch, path, why, key);
  return 1;
}

#define REFUSED_OTHER "the disk cache's build of it by another compiler is not taken here (see the warning)"

da_status da__kernel_cache_find_or_build(const da_context *ctx, da__kernel_cache *c, const char *arch,
                                         const char *key, const char *source_key, const char *kernel,
                                         da__kbuild build, void *arg, da__artifact_accept accept, const char *meta,
                                         void **bytes, size_t *n, char *path, size_t cap, da__kfrom *from) {
  path[0] = '\0';
  da__kfrom unasked;
  if (!from) from = &unasked;
  from->origin = DA__FROM_NONE, from->build_ms = 0;
  if (da__bundles_find(c->bundles, arch, key, bytes, n)) {
    __atomic_add_fetch(&c->bundle_hits, 1, __ATOMIC_RELAXED);
    from->origin = DA__FROM_BUNDLE;
    da__log(DA_LOG_DEBUG, "kernel %s for %s: from a registered bundle", kernel, arch);
    return DA_OK;
  }
  /* first look without the lock: an entry another process is rewriting may look corrupt
   * here, so it stays (the look under the lock removes what is still corrupt there) */
  const int seen = da__disk_cache_peek(c->disk, arch, key, path, cap, bytes, n);
  if (seen > 0) {
    __atomic_add_fetch(&c->disk_hits, 1, __ATOMIC_RELAXED);
    from->origin = DA__FROM_DISK;
    da__log(DA_LOG_DEBUG, "kernel %s for %s: from the disk cache (%s)", kernel, arch, path);
    return DA_OK;
  }
  /* a bundle's build of the same source by another compiler: taken before compiling here
   * (after this compiler's own, from a bundle or the disk) */
  if (da__bundles_find_source(c->bundles, arch, key, source_key, accept, arg, bytes, n)) {
    __atomic_add_fetch(&c->bundle_hits, 1, __ATOMIC_RELAXED);
    from->origin = DA__FROM_BUNDLE;
    da__log(DA_LOG_INFO, "kernel %s for %s: a bundle's artifact built by another compiler than this one's "
                         "(artifact key %s here)", kernel, arch, key);
    return DA_OK;
  }
  da__bundles_note_other_arch(c->bundles, arch, source_key);
  /* JIT off: no lock (nor its file) for a plain miss; a corrupt entry is looked at again
   * under it, removed with a warning where it still is, or taken where it was rewritten */
  const int jit_off = da__jit_disabled();
  int fd = jit_off && seen == 0 ? -1 : da__disk_cache_lock(c->disk, arch, key);
  /* second look: another process may have built it while we waited for the lock */
  if (fd >= 0 && da__disk_cache_get(c->disk, arch, key, path, cap, bytes, n)) {
    da__disk_cache_unlock(fd);
    __atomic_add_fetch(&c->disk_hits, 1, __ATOMIC_RELAXED);
    from->origin = DA__FROM_DISK;
    da__log(DA_LOG_DEBUG, "kernel %s for %s: from the disk cache, built meanwhile by another process (%s)", kernel,
            arch, path);
    return DA_OK;
  }
  if (jit_off) {
    da__disk_cache_unlock(fd); /* (the look for another compiler's build reads other keys' entries alone) */
    const int other = disk_other_compiler(c, arch, key, source_key, kernel, accept, arg, "DILATTN_DISABLE_JIT is set",
                                          bytes, n, path, cap, from);
    if (other > 0) return DA_OK;
    /* an entry that looked corrupt, and could not be looked at again under its lock (a
     * read-only cache folder, say): say so, not only "not in the disk cache" */
    /* a bundle that holds it, but whose copies were all passed over (each said why) */
    const size_t held = da__bundles_holding(c->bundles, arch, source_key);
    /* (a bundle's kernel of the same name but another source: the plan asked for other
     * tunables than the bundle was made with; "in no registered bundle" read as false) */
    const size_t variant = held ? 0 : da__bundles_holding_variant(c->bundles, arch, kernel, source_key);
    return da__set_error(ctx, DA_ERR_UNSUPPORTED,
                         "DILATTN_DISABLE_JIT is set and kernel %s for %s (artifact key %s) is %s (%zu artifacts) and not "
                         "in the disk cache%s%s",
                         kernel, arch, key,
                         held      ? "held by a registered bundle, but no copy was taken (unreadable, corrupt, another "
                                     "CC's options, or refused by the driver: see the warnings before this)"
                         : variant ? "in no registered bundle in this form: a bundle holds a kernel of that name "
                                     "from another source, made with other tunables (tile sizes, strategy or "
                                     "instruction: gen bundles the planner's defaults, and a tuning record or the "
                                     "plan's options asked for others) or by another dilattn build (regenerate it)"
                                   : "in no registered bundle",
                         da__bundles_count(c->bundles),
                         seen >= 0 ? ""
                         : fd < 0  ? " (its entry there is unreadable or corrupt, and its lock file could not be "
                                     "opened to look again: is the cache folder read-only?)"
                                   : " (its entry there was unreadable or corrupt, and is gone)",
                         other < 0 ? "; " REFUSED_OTHER : "");
  }
  int no_compiler = 0;
  const double t0 = da__now_ms();
  da_status st = build(ctx, arg, bytes, n, &no_compiler);
  if (st == DA_OK) {
    const double ms = da__now_ms() - t0;
    __atomic_add_fetch(&c->builds, 1, __ATOMIC_RELAXED);
    from->origin = DA__FROM_BUILD, from->build_ms = ms;
    if (da__disk_cache_put(c->disk, arch, key, *bytes, *n, source_key, meta, path, cap) != 0) path[0] = '\0';
    /* (a model's load that compiles: what DILATTN_LOG_LEVEL=info shows of its time) */
    da__log(DA_LOG_INFO, "kernel %s for %s: compiled in %.0f ms%s%s", kernel, arch, ms,
            path[0] ? ", kept in the disk cache as " : " (not kept in a disk cache)", path);
  }
  da__disk_cache_unlock(fd);
  if (st != DA_OK && no_compiler) { /* no compiler here (NVRTC, CC): what another one built */
    char why[1024];
    snprintf(why, sizeof why, "%s", da_context_last_error(ctx));
    const int other = disk_other_compiler(c, arch, key, source_key, kernel, accept, arg, why, bytes, n, path, cap, from);
    if (other > 0) {
      da__clear_error(ctx);
      st = DA_OK;
    } else {
      da__set_error(ctx, st, "%s%s", why, other < 0 ? "; " REFUSED_OTHER : ""); /* (accept may have set another) */
    }
  }
  return st;
}

typedef struct {
  da__kernel_cache *cache;
  const char *source, *symbol, *render_key;
  const da_context *ctx;
} host_job;


static da_status build_host(const da_context *ctx, void *arg, void **bytes, size_t *n, int *no_compiler) {
  const host_job *j = arg;
  *no_compiler = !da__host_cc_found(NULL, 0); /* (a CC that is there but misconfigured: its error stands) */
  char dir[4096], so[4200];
  /* (DILATTN_DUMP_DIR has the source: da__render_ex dumps every one it renders) */
  DA_TRY(da__host_build(ctx, j->source, dir, sizeof dir, so, sizeof so, NULL));
  *bytes = da__read_file(so, n);
  da__host_build_cleanup(dir);
  /* (a compiler that exits 0 without writing it: a compile failure, CLI exit 3) */
  DA_RETURN_IF(!*bytes, DA_ERR_COMPILE, "host compile: the compiler left no readable %s", so);
  return DA_OK;
}

/* Load a shared object held in memory (not on disk): through a private temp file. */
static da_status load_from_bytes(const da_context *ctx, const void *bytes, size_t n, const char *symbol,
                                 da__host_module *out) {
  const char *tmp = getenv("TMPDIR");
  char path[4200];
  snprintf(path, sizeof path, "%s/dilattn-kernel-XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  int fd = mkstemp(path);
  DA_RETURN_IF(fd < 0, DA_ERR_IO, "host kernel: cannot create %s: %s", path, strerror(errno));
  int ok = write(fd, bytes, n) == (ssize_t)n;
  close(fd);
  da_status st = ok ? da__host_load(ctx, path, symbol, out)
                    : da__set_error(ctx, DA_ERR_IO, "host kernel: cannot write %s", path);
  unlink(path);
  return st;
}

/* A bundle's host module that another C compiler built: taken where it loads here with its
 * symbol (a library its CC linked that is missing here, another CPU's build: compiled here
 * instead, as before such modules were taken) */
static int accept_host(void *user, const char *origin, const char *compiler, const void *bytes, size_t n) {
  const host_job *j = user;
  /* a bundle's or the disk cache's: only a build whose CC had this one's options (another
   * program: gcc for cc, clang); a debugging CC's -O0, -ffast-math or -fsanitize build is not
   * another compiler's equivalent (a bundle's served over this CC's exact build, and its
   * -ffast-math module lost the NaNs SEMANTICS.md keeps). "": the record names none */
  if (compiler && !da__host_cc_same_options(compiler, da__host_cc())) {
    /* (once: every plan of a model's layers meets it) */
    da__log_once(NULL, DA_LOG_WARN, "%s: host kernel %s was built by %s%s%s, whose options are not those of this process's "
                         "CC='%s': not taken",
            origin, j->symbol, *compiler ? "CC='" : "a compiler it does not record", compiler, *compiler ? "'" : "",
            da__host_cc());
    return 0;
  }
  da__host_module m;
  memset(&m, 0, sizeof m);
  if (load_from_bytes(j->ctx, bytes, n, j->symbol, &m) == DA_OK) {
    da__host_module_unload(&m);
    return 1;
  }
  char key[900]; /* (once a process: the error names a temp file of its own each time) */
  snprintf(key, sizeof key, "does not load here: %.600s: %.200s", origin, j->symbol);
  da__log_once(key, DA_LOG_WARN, "%s: host kernel %s, built by another C compiler, does not load here (%s)", origin,
                j->symbol, da_context_last_error(j->ctx));
  da__clear_error(j->ctx);
  return 0;
}

static da_status produce_host(const da_context *ctx, void *arg, da__kpayload *out) {
  const host_job *j = arg;
  /* artifact key: the source's key plus what turns it into a shared object here */
  char key[65], path[4400], meta[8192];
  da__host_artifact_key(j->render_key, key);
  json_t *cc = json_string(da__host_cc()); /* (CC's text, JSON-escaped: quotes and all) */
  char *cc_json = cc ? json_dumps(cc, JSON_ENCODE_ANY) : NULL;
  json_decref(cc);
  snprintf(meta, sizeof meta, "\"kernel\":\"%.200s\",\"compiler\":%s", j->symbol,
           cc_json && strlen(cc_json) < sizeof meta - 300 ? cc_json : "\"\"");
  free(cc_json);
  void *bytes = NULL;
  size_t n = 0;
  DA_TRY(da__kernel_cache_find_or_build(ctx, j->cache, "host", key, j->render_key, j->symbol, build_host, (void *)j,
                                        accept_host, meta, &bytes, &n, path, sizeof path, &out->from));
  /* the cache's file where there is one (no copy); where that cannot be loaded, the bytes
   * its lookup verified: another process may have evicted or cleared the entry since, or
   * the cache's folder may be mounted noexec */
  da_status st = path[0]  ? da__host_load(ctx, path, j->symbol, &out->host)
                 : !bytes ? da__set_error(ctx, DA_ERR_INTERNAL, "host kernel %s: the cache gave nothing", j->symbol)
                          : DA_ERR_IO;
  if (st != DA_OK && bytes) {
    if (path[0]) da__log(DA_LOG_DEBUG, "host kernel: %s; loading the verified bytes instead", da_context_last_error(ctx));
    st = load_from_bytes(ctx, bytes, n, j->symbol, &out->host);
    if (st == DA_OK) da__clear_error(ctx);
  }
  free(bytes);
  return st;
}

da_status da__kernel_cache_get_host(const da_context *ctx, da__kernel_cache *c, const char *key,
                                    const char *source, const char *symbol,
                                    const da__host_module **mod) {
  host_job j = {c, source, symbol, key, ctx};
  const da__kpayload *pl = NULL; /* set when get returns DA_OK (gcc cannot see it through DA_TRY) */
  DA_TRY(da__kernel_cache_get(ctx, c, key, produce_host, &j, &pl));
  *mod = &pl->host;
  return DA_OK;
}
