/* plan.c - the context and the plan API (DESIGN.md decision 8): create a plan from a
 * spec (validate, render, compile or fetch from the context's kernel cache), query its
 * workspace size, execute on caller buffers with strides, destroy. The host backend
 * runs the kernel over (batch, head) pairs split across threads. */
#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "runtime/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/fileio.h"
#include "runtime/kernel_cache.h"
#include "runtime/log.h"
#include "runtime/pattern_cache.h"
#include "runtime/pool.h"
#include "runtime/tuning_db.h"

#include <ctype.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DA_MAX_SEQ_LEN ((int64_t)1 << 40)

/* Plan memo: what plan creation derived for a spec (rendered facts, source, key, host
 * module), keyed by the spec's exact bytes, so creating a plan for a spec seen before
 * costs a hash and a compare (DESIGN.md: warm plan from memory in microseconds). */
typedef struct memo_entry {
  struct memo_entry *next;
  uint64_t hash;
  size_t klen;
  unsigned char *kbytes;
  da__rendered r;
  const da__host_module *host;
} memo_entry;

#define MEMO_BUCKETS 256

struct da_context {
  da__kernel_cache kernels;
  da__pool *pool; /* host workspace and tile buffers */
  da__pattern_cache *patterns; /* block tables of sparse layouts */
  pthread_mutex_t memo_mu;
  memo_entry *memo[MEMO_BUCKETS];
  int cuda_device;            /* its CUDA device ordinal, -1 until the first CUDA call (cuda_driver.c) */
  int tuning_loaded;          /* the tuning database, read once (under memo_mu) */
  da__tune_record *tuning;
  int ntuning;
};

struct da_plan {
  da_context *ctx;
  da_spec spec;
  uint8_t *masks[DA_MAX_BRANCHES]; /* owned copies of explicit masks */
  da_backend backend;
  const da__rendered *r;       /* the context memo's, or own when the memo is bypassed */
  da__rendered own;
  const da__host_module *host; /* host backend (owned by the kernel cache) */
  da__cuda_plan *cuda;    /* CUDA backend */
  size_t ws_limit;        /* DILATTN_WORKSPACE_LIMIT when the plan was made: bytes, SIZE_MAX none */
};

/* DILATTN_WORKSPACE_LIMIT: bytes, with an optional K, M, G or T (powers of 1024, an "iB"
 * or "B" after them allowed); unset or empty: no limit (SIZE_MAX). */
da_status da__workspace_limit(const da_context *ctx, size_t *out) {
  *out = SIZE_MAX;
  const char *e = getenv("DILATTN_WORKSPACE_LIMIT");
  if (!e || !*e) return DA_OK;
  uint64_t v = 0;
  DA_RETURN_IF(!da__parse_bytes(e, &v) || v == 0 || v >= SIZE_MAX, DA_ERR_INVALID_ARGUMENT,
               "DILATTN_WORKSPACE_LIMIT=%s: not a number of bytes above 0 (e.g. 1073741824, 1024M, 8G)", e);
  *out = (size_t)v;
  return DA_OK;
}

da_status da_context_create(da_context **out) {
  const da_context *ctx = NULL;
  DA_RETURN_IF(!out, DA_ERR_INVALID_ARGUMENT, "out is NULL");
  da_context *c = calloc(1, sizeof *c);
  DA_RETURN_IF(!c, DA_ERR_NO_MEMORY, "context: out of memory");
  da__clear_error(c); /* the text of a destroyed context that had this address */
  if (da__kernel_cache_init(&c->kernels)) {
    free(c);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "context: cannot create its locks");
  }
  pthread_mutex_init(&c->memo_mu, NULL);
  c->cuda_device = -1;
  c->pool = da__pool_create();
  if (!c->pool || da__pattern_cache_create(0, &c->patterns) != DA_OK) {
    da__pool_destroy(c->pool);
    da__kernel_cache_destroy(&c->kernels);
    free(c);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "context: cannot create its memory pool");
  }
  /* bundles named by the environment */
  const char *env = getenv("DILATTN_BUNDLES");
  if (env && *env) {
    char *list = strdup(env), *save = NULL;
    for (char *m = list ? strtok_r(list, ":", &save) : NULL; m; m = strtok_r(NULL, ":", &save))
      if (da_context_register_bundle(c, m) != DA_OK)
        da__log(DA_LOG_WARN, "DILATTN_BUNDLES: %s", da_context_last_error(c));
    free(list);
  }
  da__log(DA_LOG_DEBUG, "context %p created", (void *)c);
  *out = c;
  return DA_OK;
}

da__kernel_cache *da__context_kernels(da_context *c) { return &c->kernels; }

da_status da_context_register_bundle(da_context *ctx, const char *manifest_path) {
  DA_RETURN_IF(!ctx || !manifest_path, DA_ERR_INVALID_ARGUMENT, "ctx and manifest_path must not be NULL");
  size_t len = 0;
  char *text = da__read_file(manifest_path, &len);
  DA_RETURN_IF(!text, errno == ENOMEM ? DA_ERR_NO_MEMORY : DA_ERR_IO, "bundle: cannot read %s: %s", manifest_path,
               da__read_error(errno));
  /* its artifacts: beside the manifest itself, else beside the link naming it, both found
   * now as absolute folders (a relative path read from another working directory later, a
   * daemon's after its chdir, found none of them; a "current" link to a release's manifest
   * has them beside its target, a manifest linked alone into a folder of artifacts beside
   * the link) */
  char dir[4096] = "", alt[4096] = "", given[4096];
  char *real = realpath(manifest_path, NULL);
  if (da__split_path(manifest_path, given, sizeof given)) {
    char *g = realpath(given, NULL);
    snprintf(alt, sizeof alt, "%s", g && strlen(g) < sizeof alt ? g : given);
    free(g);
  }
  if (!real || !da__split_path(real, dir, sizeof dir)) snprintf(dir, sizeof dir, "%s", alt);
  free(real);
  if (!dir[0]) {
    free(text);
    return da__set_error(ctx, DA_ERR_INVALID_ARGUMENT, "bundle: %s: its folder's path is too long", manifest_path);
  }
  da_status st = da__bundles_add(ctx, ctx->kernels.bundles, text, len, manifest_path, dir, strcmp(alt, dir) ? alt : NULL,
                                 NULL, NULL, NULL, 0);
  free(text);
  return st;
}

da_status da_context_register_bundle_data(da_context *ctx, const da_bundle_data *b) {
  DA_RETURN_IF(!ctx || !b || !b->manifest || b->count < 0 || (b->count > 0 && (!b->files || !b->data || !b->sizes)),
               DA_ERR_INVALID_ARGUMENT, "bundle data is incomplete");
  return da__bundles_add(ctx, ctx->kernels.bundles, b->manifest, b->manifest_len, b->name ? b->name : "(linked)",
                         NULL, NULL, b->files, b->data, b->sizes, b->count);
}

da_status da_context_pattern_cache_stats(const da_context *ctx, da_pattern_cache_stats *out) {
  DA_RETURN_IF(!ctx || !out, DA_ERR_INVALID_ARGUMENT, "ctx and out must not be NULL");
  da__pattern_cache_stats(ctx->patterns, out);
  return DA_OK;
}

da_status da_plan_density(da_plan *p, int64_t seq_len, double *density) {
  const da_context *ctx = p ? p->ctx : NULL;
  DA_RETURN_IF(!p || !density, DA_ERR_INVALID_ARGUMENT, "plan and density must not be NULL");
  return da__pattern_density(ctx, p->ctx->patterns, &p->spec, seq_len, density);
}

da_status da_context_pool_stats(const da_context *ctx, da_pool_stats *out) {
  DA_RETURN_IF(!ctx || !out, DA_ERR_INVALID_ARGUMENT, "ctx and out must not be NULL");
  da__pool_stats(ctx->pool, out);
  return DA_OK;
}

da_status da_context_kernel_cache_stats(const da_context *ctx, da_kernel_cache_stats *out) {
  DA_RETURN_IF(!ctx || !out, DA_ERR_INVALID_ARGUMENT, "ctx and out must not be NULL");
  da__kernel_cache *c = &((da_context *)ctx)->kernels;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&c->mu);
  out->loaded = (uint64_t)c->compiles;
  out->bundle_hits = (uint64_t)c->held_bundle;
  out->disk_hits = (uint64_t)c->held_disk;
  out->builds = (uint64_t)c->held_built;
  out->build_ms = c->held_build_ms;
  pthread_mutex_unlock(&c->mu);
  return DA_OK;
}

int *da__context_cuda_device(const da_context *ctx) { return &((da_context *)ctx)->cuda_device; }

void da_context_destroy(da_context *c) {
  if (!c) return;
  for (int b = 0; b < MEMO_BUCKETS; b++)
    for (memo_entry *e = c->memo[b], *n; e; e = n) {
      n = e->next;
      da__rendered_free(&e->r);
      free(e->kbytes);
      free(e);
    }
  pthread_mutex_destroy(&c->memo_mu);
  free(c->tuning);
  da__kernel_cache_destroy(&c->kernels);
  da__pool_destroy(c->pool);
  da__pattern_cache_destroy(c->patterns);
  da__cuda_trim_pool(c); /* the device pool's unused memory back to the driver */
  free(c);
}

/* The backend of a plan: the caller's, or for AUTO the environment's (DILATTN_BACKEND),
 * else CUDA where it is usable, else host. The environment does not override a backend the
 * caller names: a program that asked for CUDA passes device pointers, which a host plan
 * would read as host memory (and the reverse); it is ignored then, with a warning. */
da_backend da__backend_env(void) {
  const char *env = getenv("DILATTN_BACKEND");
  if (!env || !*env) return DA_BACKEND_AUTO;
  return !strcmp(env, "host") ? DA_BACKEND_HOST : !strcmp(env, "cuda") ? DA_BACKEND_CUDA
       : !strcmp(env, "auto") ? DA_BACKEND_AUTO : (da_backend)-1;
}

da_status da__pick_backend(const da_context *ctx, da_backend want, da_backend *got) {
  DA_RETURN_IF(want != DA_BACKEND_AUTO && want != DA_BACKEND_HOST && want != DA_BACKEND_CUDA,
               DA_ERR_INVALID_ARGUMENT, "backend: %d is not auto, host or cuda", (int)want);
  const char *env = getenv("DILATTN_BACKEND");
  if (env && *env) {
    const da_backend e = da__backend_env();
    DA_RETURN_IF((int)e < 0, DA_ERR_INVALID_ARGUMENT, "DILATTN_BACKEND: '%s' is not auto, host or cuda", env);
    if (want == DA_BACKEND_AUTO) want = e;
    else if (e != DA_BACKEND_AUTO && e != want) {
      static int warned;
      if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        da__log(DA_LOG_WARN, "DILATTN_BACKEND=%s ignored: the caller asked for the %s backend (the variable picks the "
                             "backend of DA_BACKEND_AUTO, the CLI's --backend auto)",
                env, want == DA_BACKEND_HOST ? "host" : "cuda");
    }
  }
  if (want == DA_BACKEND_HOST) {
    *got = DA_BACKEND_HOST;
    return DA_OK;
  }
  da_status st = da__cuda_backend_available(ctx);
  if (st == DA_OK) {
    *got = DA_BACKEND_CUDA;
    return DA_OK;
  }
  if (want == DA_BACKEND_CUDA) return st; /* the reason is recorded */
  da__clear_error(ctx);
  *got = DA_BACKEND_HOST;
  return DA_OK;
}

da_status da_plan_create(da_context *ctx, const da_spec *spec, da_backend backend,
                         da_plan **out) {
  return da_plan_create_ex(ctx, spec, backend, NULL, out);
}

/* Exact bytes of everything plan creation depends on: backend, tunables, every spec
 * field that matters for its layout, explicit mask contents. */
typedef struct {
  unsigned char *buf;
  size_t len, cap;
} bytes_t;

static int put(bytes_t *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 512;
    while (cap < b->len + n) cap *= 2;
    unsigned char *nb = realloc(b->buf, cap);
    if (!nb) return -1;
    b->buf = nb;
    b->cap = cap;
  }
  memcpy(b->buf + b->len, p, n);
  b->len += n;
  return 0;
}

static int memo_key(const da_spec *s, da_backend be, const da_plan_options *o, int env_mma, bytes_t *b) {
  int64_t v[20];
  int n = 0;
  v[n++] = be;
  v[n++] = env_mma; /* DILATTN_CUDA_MMA decides the instruction of cuda_mma 0 (da__default_mma) */
  v[n++] = o ? o->tile_q : 0;
  v[n++] = o ? o->tile_k : 0;
  v[n++] = o ? o->fused_min_queries : 0;
  v[n++] = o ? o->cuda_mma : 0;
  v[n++] = (o && o->seq_len_hint > 0) ? da__tuning_bucket(o->seq_len_hint) : -1;
  v[n++] = s->num_branches;
  v[n++] = s->mode;
  v[n++] = s->offsets;
  v[n++] = s->causal;
  v[n++] = s->num_heads;
  v[n++] = s->num_kv_heads;
  v[n++] = s->head_dim;
  v[n++] = s->dtype;
  v[n++] = s->has_scale;
  v[n++] = s->sparsity.layout;
  int rc = put(b, v, (size_t)n * sizeof v[0]);
  rc |= put(b, s->segment_lengths, (size_t)s->num_branches * 8);
  rc |= put(b, s->dilation_rates, (size_t)s->num_branches * 8);
  if (s->has_scale) rc |= put(b, &s->scale, sizeof s->scale);
  const da_sparsity *sp = &s->sparsity;
  if (sp->layout != DA_LAYOUT_NONE) {
    int64_t w[4] = {sp->block, sp->window, sp->global, sp->num_strides};
    rc |= put(b, w, sizeof w);
    /* (num_strides is validated under dilated_sparse only: other layouts may hold anything) */
    if (sp->layout == DA_LAYOUT_DILATED_SPARSE) rc |= put(b, sp->strides, (size_t)sp->num_strides * 8);
    rc |= put(b, &sp->seed, sizeof sp->seed);
    rc |= put(b, &sp->density, sizeof sp->density);
    if (sp->layout == DA_LAYOUT_EXPLICIT)
      for (int i = 0; i < s->num_branches; i++) {
        int64_t nb = da_spec_explicit_blocks(s, i);
        rc |= put(b, sp->explicit_masks[i], (size_t)(nb * nb));
      }
  }
  return rc;
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static memo_entry *memo_find(da_context *ctx, const bytes_t *k, uint64_t h) {
  for (memo_entry *e = ctx->memo[h % MEMO_BUCKETS]; e; e = e->next)
    if (e->hash == h && e->klen == k->len && !memcmp(e->kbytes, k->buf, k->len)) return e;
  return NULL;
}

static da_status copy_masks(da_context *ctx, da_plan *p, const da_spec *spec) {
  if (spec->sparsity.layout != DA_LAYOUT_EXPLICIT) return DA_OK;
  for (int i = 0; i < spec->num_branches; i++) {
    int64_t nb = da_spec_explicit_blocks(spec, i);
    size_t bytes = (size_t)nb * (size_t)nb;
    if (nb > 0 && bytes / (size_t)nb != (size_t)nb) bytes = SIZE_MAX;
    p->masks[i] = bytes == SIZE_MAX ? NULL : malloc(bytes ? bytes : 1);
    DA_RETURN_IF(!p->masks[i], DA_ERR_NO_MEMORY, "plan: explicit mask %d (%lld x %lld) does not fit in memory", i,
                 (long long)nb, (long long)nb);
    memcpy(p->masks[i], spec->sparsity.explicit_masks[i], bytes);
    p->spec.sparsity.explicit_masks[i] = p->masks[i];
  }
  return DA_OK;
}

/* Best database parameters for spec (1) or none (0). */
static int tuned_options(da_context *ctx, const da_spec *spec, da_backend be, int64_t hint, da_plan_options *out) {
  const char *off = getenv("DILATTN_TUNING");
  if (off && !strcmp(off, "0")) return 0;
  pthread_mutex_lock(&ctx->memo_mu);
  if (!ctx->tuning_loaded) {
    char path[4200];
    da__tuning_db_path(path, sizeof path);
    int mismatch = 0, skipped = 0;
    ctx->ntuning = da__tuning_db_read_for(ctx, path, &ctx->tuning, &mismatch, &skipped);
    const int read_errno = errno;
    if (ctx->ntuning < 0 && !mismatch) { /* unreadable (a folder, a FIFO: not waited on), or no database */
      static int warned_unread;
      if (!__atomic_exchange_n(&warned_unread, 1, __ATOMIC_RELAXED))
        da__log(DA_LOG_WARN, "tuning db %s: not read: %s; the planner's defaults", path,
                read_errno ? da__read_error(read_errno) : "not a dilattn tuning database: its first line is no header");
    }
    if (ctx->ntuning < 0 || skipped) {
      /* a sweep the user ran, now unused (whole, or one backend's records: the host's under
       * another C compiler, say): said once a process (it was an info line) */
      static int warned;
      if ((mismatch || skipped) && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
        char diff[1024];
        da__tuning_db_env_diff(ctx, path, diff, sizeof diff);
        if (skipped && ctx->ntuning > 0)
          da__log(DA_LOG_WARN, "tuning db %s: %d records of a backend whose environment differs here (%s) ignored; "
                  "tune that backend again here, or point DILATTN_TUNING_DB elsewhere", path, skipped,
                  diff[0] ? diff : "its header differs");
        else
          da__log(DA_LOG_WARN, "tuning db %s was written in another environment (%s): ignored; tune again here, or "
                  "point DILATTN_TUNING_DB elsewhere", path, diff[0] ? diff : "its header differs");
      }
      if (ctx->ntuning < 0) ctx->ntuning = 0;
    }
    ctx->tuning_loaded = 1;
  }
  int n = ctx->ntuning;
  pthread_mutex_unlock(&ctx->memo_mu);
  if (n == 0) return 0;
  char *js = da_spec_to_json(spec), hash[65];
  if (!js) return 0;
  da__sha256_hex(js, strlen(js), hash);
  free(js);
  /* mma.sync forced: the best of its records (the wgmma ones skipped; a wgmma best made the
   * plan take the planner's defaults) */
  const char *env = getenv("DILATTN_CUDA_MMA");
  const da__tune_record *r = da__tuning_best(ctx->tuning, n, hash, be == DA_BACKEND_CUDA ? "cuda" : "host",
                                             da__tuning_bucket(hint > 0 ? hint : 65536),
                                             be == DA_BACKEND_CUDA && env && !strcmp(env, "sync"));
  if (!r) return 0;
  *out = r->params;
  out->seq_len_hint = hint;
  /* older tuners gave their mma.sync candidates cuda_mma 0 with tunables set
   * (0 is now the default instruction: da__default_mma); theirs name it */
  if (be == DA_BACKEND_CUDA && !out->cuda_mma && (out->tile_q || out->tile_k || out->fused_min_queries))
    out->cuda_mma = 1;
  return 1;
}

/* The instruction path of a CUDA plan whose options name none (cuda_mma 0, tunables set or
 * not; a tuning record's included) under no DILATTN_CUDA_MMA, where the wgmma paths serve
 * its spec on the device (an sm_90 GPU): the warp-specialized kernel with K and V copied
 * by TMA (wgmma-ws-tma), where the driver and NVRTC take its kernels' parameters (CUDA
 * 12.1 or later: its tensor maps pass 4 KiB) and the spec has no sparse layout (it has no
 * sparse form), else the warp-specialized kernel (wgmma-ws).
 * On an H200 wgmma-ws ran 1.26x to 2.07x faster than mma.sync on every LongNet and dense
 * config measured, causal or not, D = 64 and 128 (bench/results/gpu-h200-c30ba13.md);
 * wgmma-ws-tma 1.00x to 1.07x faster than wgmma-ws, 0.99x to 1.01x on dense attention
 * (bench/results/gpu-h200-1f78309.md); elsewhere plans keep mma.sync. Like a tuning
 * record, chosen when a spec's plan is first created (the plan memo keeps it). */
#define DEFAULT_WGMMA 6
#define DEFAULT_WGMMA_OLD 4 /* drivers or NVRTC before CUDA 12.1; sparse layouts */

/* The variant a plan takes for mma under a sparse layout or not: wgmma-ws-p2 and -tma
 * have no sparse form (planner.lua), wgmma-ws does */
static int sparse_form(int mma, int sparse) { return (mma == 5 || mma == 6) && sparse ? DEFAULT_WGMMA_OLD : mma; }

const da_plan_options *da__default_mma(const da_plan_options *opts, int env_mma, int serves, int sparse,
                                       da_plan_options *eff, int *fallbacks) {
  *fallbacks = 0;
  if (opts && opts->cuda_mma) return opts;
  /* DILATTN_CUDA_MMA's variant; sync (1): none */
  const int m = env_mma != 0 ? env_mma : serves >= 2 ? DEFAULT_WGMMA : DEFAULT_WGMMA_OLD;
  if (m < 2 || !serves) return opts;
  if (opts) *eff = *opts;
  else memset(eff, 0, sizeof *eff);
  eff->cuda_mma = sparse_form(m, sparse);
  *fallbacks = (!env_mma && eff->cuda_mma == DEFAULT_WGMMA ? DA__FALLBACK_WS : 0) |
               (eff->tile_q || eff->tile_k || eff->fused_min_queries ? DA__FALLBACK_SYNC : 0);
  return eff;
}

/* DILATTN_CUDA_MMA=wgmma (or wgmma-overlap, wgmma-ws, wgmma-ws-p2, wgmma-ws-tma: its variants): CUDA plans the wgmma
 * path serves (fp16 / bf16 at head_dim 64 or 128, on an sm_90 device) that set no tunable
 * take it here, before the tuning database is consulted (a caller or the tuner that chose
 * an instruction gets what it chose; options with tunables and cuda_mma 0 get it through
 * da__default_mma, with mma.sync where it refuses them). Returns opts or *eff. Any other
 * value than those, "sync", "auto" or empty is an error. (sync: the tuning database's wgmma records are skipped, see
 * tuned_options.) Unset, empty or "auto": *auto_mma = 1, the default of da_plan_create_ex
 * (DEFAULT_WGMMA). */
static da_status env_cuda_mma(const da_context *ctx, da_backend be, const da_spec *spec,
                              const da_plan_options *opts, da_plan_options *eff, const da_plan_options **res,
                              int *auto_mma) {
  *res = opts;
  const char *env = getenv("DILATTN_CUDA_MMA");
  *auto_mma = !env || !*env || !strcmp(env, "auto");
  if (*auto_mma || !strcmp(env, "sync")) return DA_OK;
  const int mma = da__cuda_mma_parse(env); /* sync (1) returned above */
  DA_RETURN_IF(mma < 2, DA_ERR_INVALID_ARGUMENT,
               "DILATTN_CUDA_MMA=%s: expected wgmma, wgmma-overlap, wgmma-ws, wgmma-ws-p2, wgmma-ws-tma, sync or auto "
               "(the default)",
               env);
  if (be != DA_BACKEND_CUDA || (opts && (opts->cuda_mma || opts->tile_q || opts->tile_k || opts->fused_min_queries)))
    return DA_OK;
  if (!da__cuda_wgmma_device_serves(ctx, spec)) return DA_OK;
  if (opts) *eff = *opts;
  else memset(eff, 0, sizeof *eff);
  eff->cuda_mma = sparse_form(mma, da__spec_sparse(spec));
  *res = eff;
  return DA_OK;
}

da_status da_plan_create_ex(da_context *ctx, const da_spec *spec, da_backend backend,
                            const da_plan_options *opts, da_plan **out) {
  DA_RETURN_IF(!ctx || !spec || !out, DA_ERR_INVALID_ARGUMENT, "ctx, spec and out must not be NULL");
  /* before anything reads the spec's arrays (the memo key and the mask copies take their
   * sizes from its fields) */
  char msg[512];
  if (da_spec_validate(spec, msg, sizeof msg) != DA_OK) return da__set_error(ctx, DA_ERR_INVALID_SPEC, "%s", msg);
  da_spec resolved;
  spec = da__spec_resolved(spec, &resolved);
  da_backend be = DA_BACKEND_HOST;
  DA_TRY(da__pick_backend(ctx, backend, &be));
  da_plan_options eff;
  int auto_mma = 0;
  DA_TRY(env_cuda_mma(ctx, be, spec, opts, &eff, &opts, &auto_mma));
  const int env_mma = auto_mma ? 0 : da__cuda_mma_parse(getenv("DILATTN_CUDA_MMA"));
  /* templates read from disk may change between calls: no memo then */
  const char *tdir = getenv("DILATTN_TEMPLATE_DIR");
  int use_memo = !(tdir && *tdir);
  bytes_t key = {0};
  uint64_t h = 0;
  memo_entry *hit = NULL;
  if (use_memo) {
    DA_RETURN_IF(memo_key(spec, be, opts, env_mma, &key) != 0, DA_ERR_NO_MEMORY, "plan: out of memory");
    h = fnv1a(key.buf, key.len);
    pthread_mutex_lock(&ctx->memo_mu);
    hit = memo_find(ctx, &key, h);
    pthread_mutex_unlock(&ctx->memo_mu);
  }
  da_plan *p = calloc(1, sizeof *p);
  if (!p) {
    free(key.buf);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "plan: out of memory");
  }
  p->ctx = ctx;
  p->spec = *spec;
  p->backend = be;
  da_status st = da__workspace_limit(ctx, &p->ws_limit);
  if (st == DA_OK) st = copy_masks(ctx, p, spec);
  /* untuned request: the tuning database may have better parameters (looked up on a
   * memo miss only, so a warm plan stays a hash and a compare) */
  da_plan_options tuned;
  const da_plan_options *asked = opts;
  const int untuned = !opts || (!opts->tile_q && !opts->tile_k && !opts->fused_min_queries && !opts->cuda_mma);
  int from_tuning = 0; /* a tuning record's options: the planner's defaults where they fail */
  if (st == DA_OK && !hit && untuned && tuned_options(ctx, spec, be, opts ? opts->seq_len_hint : 0, &tuned))
    opts = &tuned, from_tuning = 1;
  int fallbacks = 0; /* DA__FALLBACK_*: what the default instruction may fall back to (below) */
  const int serves = be == DA_BACKEND_CUDA && st == DA_OK && !hit ? da__cuda_wgmma_device_serves(ctx, spec) : 0;
  const int sparse = da__spec_sparse(spec);
  if (st == DA_OK && !hit && be == DA_BACKEND_CUDA) opts = da__default_mma(opts, env_mma, serves, sparse, &eff, &fallbacks);
  /* Build, and where that fails softly, the fallbacks in turn: the default instruction
   * refused the caller's tunables, its kernel did not compile, or JIT is off and no bundle
   * or disk cache holds it: wgmma-ws where the default was wgmma-ws-tma (the default
   * before it: a bundle or cache made then holds its kernels), then mma.sync where tunables
   * are set, what such options always had (and what a bundle or cache made for them
   * holds); then a tuning record's options that fail so, or that the planner or the device
   * refuses (a database edited by hand, written by another planner or on another device,
   * or tuned where the kernels were then not shipped): the caller's own, the database
   * being advice. */
  for (;;) {
    if (st == DA_OK && hit) {
      p->r = &hit->r;
      p->host = hit->host;
    } else if (st == DA_OK) {
      st = da__render_ex(ctx, spec, be == DA_BACKEND_CUDA ? DA_TARGET_CUDA : DA_TARGET_HOST, opts, &p->own);
      if (st == DA_OK) {
        p->r = &p->own;
        if (be == DA_BACKEND_HOST)
          st = da__kernel_cache_get_host(ctx, &ctx->kernels, p->r->key, p->r->source, p->r->kernel_name, &p->host);
      }
    }
    if (st == DA_OK && be == DA_BACKEND_CUDA) st = da__cuda_plan_create(ctx, &ctx->kernels, p->r, &p->spec, &p->cuda);
    /* (a kernel found nowhere where nothing can compile it: JIT off, or a CUDA plan without
     * NVRTC, which runs what bundles hold: the fallbacks may be there) */
    const int soft = st == DA_ERR_INVALID_ARGUMENT || st == DA_ERR_COMPILE ||
                     (st == DA_ERR_UNSUPPORTED && (da__jit_disabled() || (be == DA_BACKEND_CUDA && !da__nvrtc_available())));
    if (st == DA_OK ||
        !((soft && fallbacks) || ((soft || st == DA_ERR_GENERATOR || st == DA_ERR_UNSUPPORTED) && from_tuning)))
      break;
    if (soft && (fallbacks & DA__FALLBACK_WS)) {
      da__log(DA_LOG_INFO, "plan: wgmma-ws-tma with tile_q %d, tile_k %d, fused_min_queries %d: %s; wgmma-ws instead",
              opts->tile_q, opts->tile_k, opts->fused_min_queries, da_context_last_error(ctx));
      eff.cuda_mma = DEFAULT_WGMMA_OLD;
      fallbacks &= ~DA__FALLBACK_WS;
    } else if (soft && (fallbacks & DA__FALLBACK_SYNC)) {
      da__log(DA_LOG_INFO, "plan: %s with tile_q %d, tile_k %d, fused_min_queries %d: %s; mma.sync instead",
              da__cuda_mma_name(opts->cuda_mma), opts->tile_q, opts->tile_k, opts->fused_min_queries,
              da_context_last_error(ctx));
      eff.cuda_mma = 0;
      fallbacks = 0;
    } else {
      da__log(DA_LOG_WARN, "plan: the tuning database's tile_q %d, tile_k %d, fused_min_queries %d, cuda_mma %d for "
              "this spec failed (%s); the planner's defaults instead",
              tuned.tile_q, tuned.tile_k, tuned.fused_min_queries, tuned.cuda_mma, da_context_last_error(ctx));
      from_tuning = 0;
      opts = asked;
      if (be == DA_BACKEND_CUDA) opts = da__default_mma(opts, env_mma, serves, sparse, &eff, &fallbacks);
    }
    da__cuda_plan_destroy(p->cuda); /* what the failed attempt built */
    p->cuda = NULL;
    da__rendered_free(&p->own);
    memset(&p->own, 0, sizeof p->own);
    p->r = NULL;
    p->host = NULL; /* (the kernel cache's) */
    st = DA_OK;
    da__clear_error(ctx);
  }
  if (st == DA_OK && use_memo && !hit) {
    /* remember: the rendered facts move into the memo (first writer wins) */
    memo_entry *e = calloc(1, sizeof *e);
    if (e) {
      pthread_mutex_lock(&ctx->memo_mu);
      memo_entry *again = memo_find(ctx, &key, h);
      if (!again) {
        e->hash = h;
        e->klen = key.len;
        e->kbytes = key.buf;
        key.buf = NULL;
        e->r = p->own;
        memset(&p->own, 0, sizeof p->own);
        e->host = p->host;
        e->next = ctx->memo[h % MEMO_BUCKETS];
        ctx->memo[h % MEMO_BUCKETS] = e;
        p->r = &e->r;
      } else {
        free(e);
      }
      pthread_mutex_unlock(&ctx->memo_mu);
    }
  }
  free(key.buf);
  if (st != DA_OK) {
    da_plan_destroy(p);
    return st;
  }
  *out = p;
  return DA_OK;
}

void da_plan_destroy(da_plan *p) {
  if (!p) return;
  da__cuda_plan_destroy(p->cuda);
  for (int i = 0; i < DA_MAX_BRANCHES; i++) free(p->masks[i]);
  da__rendered_free(&p->own);
  free(p);
}

da_backend da_plan_backend(const da_plan *p) { return p ? p->backend : DA_BACKEND_AUTO; }
const char *da_plan_kernel_name(const da_plan *p) { return p ? p->r->kernel_name : ""; }
const char *da_plan_cache_key(const da_plan *p) { return p ? p->r->key : ""; }
da_status da_plan_get_options(const da_plan *p, da_plan_options *out) {
  const da_context *ctx = p ? p->ctx : NULL;
  DA_RETURN_IF(!p || !out, DA_ERR_INVALID_ARGUMENT, "plan and out must not be NULL");
  memset(out, 0, sizeof *out);
  out->tile_q = p->r->tile_q;
  out->tile_k = p->r->tile_k;
  out->cuda_mma = p->r->cuda_mma;
  return DA_OK;
}

const char *da_plan_strategy(const da_plan *p) { return p ? p->r->strategy : ""; }

static int num_threads(int64_t work) {
  const char *env = getenv("DILATTN_NUM_THREADS");
  long n = 0; /* unset, empty, 0 or junk: the online CPUs */
  if (env && *env && env[strspn(env, "0123456789")] == '\0' && !da__parse_count(env, LONG_MAX, &n))
    n = 256; /* digits past a long: a larger number than 256 (README) */
  else if (env && *env && !da__parse_count(env, LONG_MAX, &n)) {
    static int warned; /* (read at every execution: said once a process) */
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      da__log(DA_LOG_WARN, "DILATTN_NUM_THREADS=%s is not a number of threads; using the online CPUs", env);
    n = 0;
  }
  if (n == 0) n = da__online_cpus();
  if (n < 1) n = 1;
  if (n > 256) n = 256; /* (README: at most 256) */
  if (n > work) n = (long)work;
  return (int)(n < 1 ? 1 : n);
}

/* Workspace bytes for nthreads workers at seq_len, or SIZE_MAX on overflow. */
static size_t ws_bytes(const da_plan *p, int64_t seq_len, int nthreads) {
  int64_t per = p->r->ws_floats_per_token;
  if (per == 0) return 0;
  if (seq_len > (int64_t)(SIZE_MAX / 4 / (size_t)per / (size_t)nthreads)) return SIZE_MAX;
  return (size_t)seq_len * (size_t)per * 4u * (size_t)nthreads;
}

/* Host workers at seq_len: DILATTN_NUM_THREADS (or the CPUs) for work (batch x heads), fewer
 * where a worker's workspace times that many passes budget (bytes, SIZE_MAX: none), 0 where
 * budget holds not one worker's. */
static int host_workers(const da_plan *p, int64_t work, int64_t seq_len, size_t budget) {
  int nt = num_threads(work);
  const size_t one = ws_bytes(p, seq_len, 1);
  if (budget < SIZE_MAX && one && one != SIZE_MAX && budget / one < (size_t)nt) nt = (int)(budget / one);
  return nt;
}

static da_status workspace_size(const da_plan *p, int64_t batch, int64_t seq_len, int least, size_t *bytes) {
  const da_context *ctx = p ? p->ctx : NULL;
  DA_RETURN_IF(!p || !bytes, DA_ERR_INVALID_ARGUMENT, "plan and bytes must not be NULL");
  DA_RETURN_IF(batch < 0 || seq_len < 0 || seq_len > DA_MAX_SEQ_LEN, DA_ERR_INVALID_ARGUMENT,
               "batch %lld / seq_len %lld out of range", (long long)batch, (long long)seq_len);
  int64_t t; /* q's bytes at the least: a shape whose q does not fit 64 bits is no shape */
  DA_RETURN_IF(__builtin_mul_overflow(batch, (int64_t)p->spec.num_heads, &t) || __builtin_mul_overflow(t, seq_len, &t) ||
                   __builtin_mul_overflow(t, (int64_t)p->spec.head_dim * 2, &t),
               DA_ERR_INVALID_ARGUMENT, "batch %lld x seq_len %lld x %d heads x head_dim %d overflows 64 bits",
               (long long)batch, (long long)seq_len, p->spec.num_heads, p->spec.head_dim);
  size_t b;
  if (batch == 0 || seq_len == 0) /* (an execution of no rows returns at once) */
    b = 0;
  else if (p->cuda)
    b = least ? da__cuda_plan_workspace_min(p->cuda, batch, seq_len)
              : da__cuda_plan_workspace(ctx, p->cuda, batch, seq_len, p->ws_limit);
  else {
    const int nt = least ? 1 : host_workers(p, batch * p->spec.num_heads, seq_len, p->ws_limit);
    b = ws_bytes(p, seq_len, nt > 0 ? nt : 1); /* a limit below one worker's: the least */
  }
  DA_RETURN_IF(b == SIZE_MAX, DA_ERR_INVALID_ARGUMENT, "workspace size overflows");
  *bytes = b;
  return DA_OK;
}

da_status da_plan_workspace_size(const da_plan *p, int64_t batch, int64_t seq_len, size_t *bytes) {
  return workspace_size(p, batch, seq_len, 0, bytes);
}

da_status da_plan_workspace_min_size(const da_plan *p, int64_t batch, int64_t seq_len, size_t *bytes) {
  return workspace_size(p, batch, seq_len, 1, bytes);
}

void da_args_init(da_args *a, const da_spec *s, int64_t batch, int64_t seq_len, const void *q,
                  const void *k, const void *v, void *out, float *lse) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->q = q;
  a->k = k;
  a->v = v;
  a->out = out;
  a->lse = lse;
  a->batch = batch;
  a->seq_len = seq_len;
  if (!s) return; /* strides 0: da_plan_execute refuses them for any shape above one element */
  da_spec resolved;
  s = da__spec_resolved(s, &resolved);
  int64_t H = s->num_heads, Hkv = s->num_kv_heads, D = s->head_dim;
  int64_t qs[3] = {0, H * D, D}, ks[3] = {0, Hkv * D, D};
  /* a batch stride past 64 bits: INT64_MAX, which da_plan_execute refuses by name */
  if (__builtin_mul_overflow(seq_len, H * D, &qs[0])) qs[0] = INT64_MAX;
  if (__builtin_mul_overflow(seq_len, Hkv * D, &ks[0])) ks[0] = INT64_MAX;
  /* num_kv_heads still unset (0, more than one head): k's and v's strides -1, which
   * da_plan_execute refuses (0 is a broadcast it takes: every token read token 0's k, v) */
  if (Hkv == 0) ks[0] = ks[1] = ks[2] = -1;
  memcpy(a->q_stride, qs, sizeof qs);
  memcpy(a->out_stride, qs, sizeof qs);
  memcpy(a->k_stride, ks, sizeof ks);
  memcpy(a->v_stride, ks, sizeof ks);
}

typedef struct {
  da__host_kernel_fn fn;
  const da__host_args *ha;
  int64_t begin, end;
  float *ws;
  void *scratch;
  int rc;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  w->rc = w->fn(w->ha, w->begin, w->end, w->ws, w->scratch);
  return NULL;
}

/* A tensor as the execution checks see it: its first byte, its dimensions (head_dim,
 * heads, tokens, batch: extent and stride in elements), its element size and the bytes
 * it spans from base ([0, span)). */
typedef struct {
  const char *name;
  uintptr_t base;
  int64_t ext[4], str[4];
  int esize;
  int64_t span;
} tview;

/* tv's span; 0 on overflow of int64 (or of the address space from base). */
/* Whether tv's bytes [base, base + span) end within the address space */
static int span_fits(const tview *tv) { return (uintptr_t)tv->span <= UINTPTR_MAX - tv->base; }

static int tensor_span(tview *tv) {
  int64_t last = 0, t;
  for (int i = 0; i < 4; i++)
    if (__builtin_mul_overflow(tv->ext[i] - 1, tv->str[i], &t) || __builtin_add_overflow(last, t, &last)) return 0;
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, (int64_t)tv->esize, &tv->span)) return 0;
  return span_fits(tv);
}

/* Dimension order by stride (ascending) of those with an extent above 1 in a or b; the
 * count. Nested: each stride steps past the whole of the ones below (for a and b's larger
 * extents), the layouts of permuted contiguous tensors, padded or not; 0 where not. */
static int nested_dims(const tview *a, const tview *b, int order[4], int *nested) {
  int n = 0;
  for (int i = 0; i < 4; i++)
    if (a->ext[i] > 1 || b->ext[i] > 1) order[n++] = i;
  for (int i = 1; i < n; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && a->str[order[j]] < a->str[order[j - 1]]; j--) {
      const int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  int64_t reach = 1; /* elements the dimensions below span */
  *nested = 1;
  for (int i = 0; i < n && *nested; i++) {
    const int d = order[i];
    const int64_t e = a->ext[d] > b->ext[d] ? a->ext[d] : b->ext[d];
    int64_t step;
    if (a->str[d] < reach || __builtin_mul_overflow(a->str[d], e - 1, &step) ||
        __builtin_add_overflow(step, reach, &reach))
      *nested = 0;
  }
  return n;
}

/* Whether some i in a's index box and j in b's meet: sum over dims order[0..k] of
 * (i - j) * str == delta, c = i - j in [-(b.ext - 1), a.ext - 1]. On nested strides the
 * dimensions below k reach less than one step of k, so at most two or three c are
 * possible at each level. */
static int lattice_meet(const tview *a, const tview *b, const int *order, int k, __int128 delta) {
  if (k < 0) return delta == 0;
  __int128 below_a = 0, below_b = 0; /* what the dimensions below k reach, up and down */
  for (int i = 0; i < k; i++) {
    const int d = order[i];
    below_a += (__int128)a->str[d] * (a->ext[d] - 1), below_b += (__int128)a->str[d] * (b->ext[d] - 1);
  }
  const int d = order[k];
  const __int128 st = a->str[d];
  /* c * st in [delta - below_a, delta + below_b] */
  __int128 lo = delta - below_a, hi = delta + below_b;
  __int128 clo = lo >= 0 ? (lo + st - 1) / st : -((-lo) / st), chi = hi >= 0 ? hi / st : -((-hi + st - 1) / st);
  if (clo < -(__int128)(b->ext[d] - 1)) clo = -(__int128)(b->ext[d] - 1);
  if (chi > (__int128)(a->ext[d] - 1)) chi = a->ext[d] - 1;
  for (__int128 c = clo; c <= chi; c++)
    if (lattice_meet(a, b, order, k - 1, delta - c * st)) return 1;
  return 0;
}

/* Whether tensors a and b share a byte: their spans intersect and, where both have one
 * element size and the same strides on nested dimensions (q, k, v and out packed in one
 * buffer, [B, N, 4, H, D] say), some element of one is an element of the other (1); where
 * not, intersecting spans count as shared (2). 0: no byte shared. */
static int tensors_meet(const tview *a, const tview *b) {
  if (!a->span || !b->span || !(a->base < b->base + (uintptr_t)b->span && b->base < a->base + (uintptr_t)a->span))
    return 0;
  if (a->esize != b->esize) return 2;
  const intptr_t bytes = (intptr_t)(b->base - a->base); /* |bytes| < a span: no overflow */
  if (bytes % a->esize) return 2;
  /* a dimension of extent 1 picks no element by its stride: it takes the other's (k of one
   * kv head with head stride 0 beside an out of two heads, packed) */
  tview x = *a, y = *b;
  for (int i = 0; i < 4; i++) {
    if (x.ext[i] == 1) x.str[i] = y.str[i];
    if (y.ext[i] == 1) y.str[i] = x.str[i];
    if ((x.ext[i] > 1 || y.ext[i] > 1) && x.str[i] != y.str[i]) return 2;
  }
  int order[4], nested;
  const int n = nested_dims(&x, &y, order, &nested);
  return !nested ? 2 : lattice_meet(&x, &y, order, n - 1, (__int128)(bytes / a->esize));
}

/* What every backend checks of an execution's tensors: pointers, strides, alignment to
 * the element, sizes that fit 64 bits, and outputs that share no byte with themselves, the
 * inputs or a caller's workspace (a kernel reads q, k and v after it has written rows of
 * out: an alias gives wrong results, not an error). */
static da_status check_tensors(const da_context *ctx, const da_spec *s, const da_args *a) {
  DA_RETURN_IF(!a->q || !a->k || !a->v || !a->out, DA_ERR_INVALID_ARGUMENT, "q, k, v and out must not be NULL");
  const int esize = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  const int64_t B = a->batch, N = a->seq_len, H = s->num_heads, Hkv = s->num_kv_heads, D = s->head_dim;
  tview t[6] = {{"q", (uintptr_t)a->q, {D, H, N, B}, {1, a->q_stride[2], a->q_stride[1], a->q_stride[0]}, esize, 0},
                {"k", (uintptr_t)a->k, {D, Hkv, N, B}, {1, a->k_stride[2], a->k_stride[1], a->k_stride[0]}, esize, 0},
                {"v", (uintptr_t)a->v, {D, Hkv, N, B}, {1, a->v_stride[2], a->v_stride[1], a->v_stride[0]}, esize, 0},
                {"out", (uintptr_t)a->out, {D, H, N, B}, {1, a->out_stride[2], a->out_stride[1], a->out_stride[0]},
                 esize, 0},
                /* lse [B, H, N] fp32: its tokens are its contiguous dimension */
                {"lse", (uintptr_t)a->lse, {1, H, N, B}, {1, N, 1, 0}, 4, 0},
                /* a caller's workspace: bytes */
                {"workspace", (uintptr_t)a->workspace, {1, 1, 1, 1}, {1, 1, 1, 1}, 1, 0}};
  for (int i = 0; i < 4; i++) {
    tview *v = &t[i];
    DA_RETURN_IF(v->str[1] < 0 || v->str[2] < 0 || v->str[3] < 0, DA_ERR_INVALID_ARGUMENT,
                 "%s_stride {%lld, %lld, %lld}: strides must not be negative", v->name, (long long)v->str[3],
                 (long long)v->str[2], (long long)v->str[1]);
    DA_RETURN_IF(v->base % (uintptr_t)esize, DA_ERR_INVALID_ARGUMENT,
                 "%s (%p) is not aligned to its element size (%d bytes)", v->name, (void *)v->base, esize);
    DA_RETURN_IF(!tensor_span(v), DA_ERR_INVALID_ARGUMENT,
                 "%s: batch %lld x seq_len %lld x %lld heads x head_dim %lld with strides {%lld, %lld, %lld} spans "
                 "more than 2^63 bytes",
                 v->name, (long long)B, (long long)N, (long long)v->ext[1], (long long)D, (long long)v->str[3],
                 (long long)v->str[2], (long long)v->str[1]);
  }
  /* out's own elements are distinct: its nested order (as against itself) */
  int order[4], nested;
  nested_dims(&t[3], &t[3], order, &nested);
  DA_RETURN_IF(!nested, DA_ERR_INVALID_ARGUMENT,
               "out_stride {%lld, %lld, %lld}: elements of out overlap (batch %lld, seq_len %lld, %lld heads, head_dim "
               "%lld)",
               (long long)a->out_stride[0], (long long)a->out_stride[1], (long long)a->out_stride[2], (long long)B,
               (long long)N, (long long)H, (long long)D);
  t[4].str[3] = H * N; /* below out's distinct elements: no overflow */
  DA_RETURN_IF(a->lse && !tensor_span(&t[4]), DA_ERR_INVALID_ARGUMENT,
               "lse: batch %lld x %lld heads x seq_len %lld floats span more than 2^63 bytes", (long long)B,
               (long long)H, (long long)N);
  DA_RETURN_IF(a->lse && t[4].base % 4, DA_ERR_INVALID_ARGUMENT, "lse (%p) is not aligned to 4 bytes", (void *)a->lse);
  t[5].span = a->workspace ? (int64_t)(a->workspace_bytes > INT64_MAX ? INT64_MAX : a->workspace_bytes) : 0;
  DA_RETURN_IF(a->workspace && t[5].base % 4, DA_ERR_INVALID_ARGUMENT, "workspace (%p) is not aligned to 4 bytes",
               a->workspace);
  DA_RETURN_IF(a->workspace && !span_fits(&t[5]), DA_ERR_INVALID_ARGUMENT,
               "workspace: %p + %zu bytes passes the end of the address space", a->workspace, a->workspace_bytes);
  /* out, lse and the workspace: none shares a byte with another or an input */
  for (int i = 3; i < 6; i++)
    for (int j = 0; j < i; j++) {
      const int meet = t[i].base && t[j].base ? tensors_meet(&t[i], &t[j]) : 0;
      DA_RETURN_IF(meet, DA_ERR_INVALID_ARGUMENT,
                   "%s overlaps %s (%s; bytes [%p, +%lld) and [%p, +%lld)): outputs and the workspace may share no "
                   "memory with the inputs or each other (no computation in place)",
                   t[i].name, t[j].name,
                   meet == 1 ? "they share elements"
                             : "their byte ranges intersect; layouts with different strides or dtypes are not compared "
                               "element by element",
                   (void *)t[i].base, (long long)t[i].span, (void *)t[j].base, (long long)t[j].span);
    }
  return DA_OK;
}

da_status da_plan_execute(da_plan *p, const da_args *a) {
  const da_context *ctx = p ? p->ctx : NULL;
  DA_RETURN_IF(!p || !a, DA_ERR_INVALID_ARGUMENT, "plan and args must not be NULL");
  DA_RETURN_IF(a->batch < 0 || a->seq_len < 0 || a->seq_len > DA_MAX_SEQ_LEN, DA_ERR_INVALID_ARGUMENT,
               "batch = %lld, seq_len = %lld: out of range (seq_len <= 2^40)", (long long)a->batch,
               (long long)a->seq_len);
  if (a->batch == 0 || a->seq_len == 0) return DA_OK;
  DA_TRY(check_tensors(ctx, &p->spec, a));
  if (p->cuda) return da__cuda_plan_execute(ctx, p->cuda, a, p->ws_limit);
  int64_t work = a->batch * p->spec.num_heads;
  /* a worker's workspace holds a (batch, head)'s rows: fewer workers where the caller's
   * workspace or the limit holds fewer */
  float *ws = a->workspace;
  int nt = host_workers(p, work, a->seq_len, ws ? a->workspace_bytes : p->ws_limit);
  size_t need = ws_bytes(p, a->seq_len, nt ? nt : 1);
  DA_RETURN_IF(need == SIZE_MAX, DA_ERR_INVALID_ARGUMENT, "workspace size overflows");
  DA_RETURN_IF(!nt, ws ? DA_ERR_INVALID_ARGUMENT : DA_ERR_NO_MEMORY,
               "workspace: %zu bytes %s, %zu needed (da_plan_workspace_min_size)",
               ws ? a->workspace_bytes : p->ws_limit, ws ? "given" : "allowed by DILATTN_WORKSPACE_LIMIT", need);
  void *owned = NULL;
  if (need) {
    if (!ws) {
      owned = da__pool_alloc(p->ctx->pool, need);
      DA_RETURN_IF(!owned, DA_ERR_NO_MEMORY, "workspace: cannot allocate %zu bytes", need);
      ws = owned;
    }
  }
  /* tile buffers, one per worker, from the pool: none of this is a raw allocation once
   * the plan has run */
  size_t sb = (p->host->scratch_bytes + 63) & ~(size_t)63;
  char *scratch = da__pool_alloc(p->ctx->pool, sb * (size_t)nt);
  if (!scratch) {
    da__pool_free(p->ctx->pool, owned, need);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "tile buffers: cannot allocate %zu bytes", sb * (size_t)nt);
  }
  da__host_args ha;
  ha.q = a->q;
  ha.k = a->k;
  ha.v = a->v;
  ha.out = a->out;
  ha.lse = a->lse;
  ha.batch = a->batch;
  ha.seq_len = a->seq_len;
  memcpy(ha.q_stride, a->q_stride, sizeof ha.q_stride);
  memcpy(ha.k_stride, a->k_stride, sizeof ha.k_stride);
  memcpy(ha.v_stride, a->v_stride, sizeof ha.v_stride);
  memcpy(ha.out_stride, a->out_stride, sizeof ha.out_stride);
  ha.masks = (const uint8_t *const *)p->masks;

  worker_t w[256];
  pthread_t th[256];
  int started[256] = {0};
  size_t per_ws = need / (size_t)nt / sizeof(float);
  for (int i = 0; i < nt; i++) {
    w[i].fn = p->host->fn;
    w[i].scratch = scratch + sb * (size_t)i;
    w[i].ha = &ha;
    w[i].begin = work * i / nt;
    w[i].end = work * (i + 1) / nt;
    w[i].ws = ws ? ws + per_ws * (size_t)i : NULL;
    w[i].rc = 0;
  }
  for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
  for (int i = 1; i < nt; i++)
    if (!started[i]) worker_main(&w[i]); /* no thread: run it here */
  worker_main(&w[0]);
  int rc = w[0].rc;
  for (int i = 1; i < nt; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    rc |= w[i].rc;
  }
  da__pool_free(p->ctx->pool, owned, need);
  da__pool_free(p->ctx->pool, scratch, sb * (size_t)nt);
  DA_RETURN_IF(rc != 0, DA_ERR_NO_MEMORY, "host kernel %s: cannot allocate its tile buffer", p->r->kernel_name);
  return DA_OK;
}
