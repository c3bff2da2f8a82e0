/* bundle.c - AOT bundle registry (issue 5). A manifest lists kernels and their compiled
 * artifacts (host shared objects, cubins per arch) with artifact keys and SHA-256 sums:
 * {"format":"dilattn-bundle","schema":1,"library":"0.3.0","nvrtc":"13.0","name":...,
 *  "kernels":[{"kernel":...,"config":{...},"source_key":...,"source":"x.cu",
 *              "artifacts":[{"arch":"sm_90","key":...,"file":...,"size":N,"sha256":...}]}]}
 * Registration records where each artifact is (a file next to the manifest, or bytes
 * linked into the program); lookups verify the checksum before handing bytes out. */
#define _GNU_SOURCE
#include "runtime/bundle.h"

#include "gen/render.h"
#include "runtime/host_compiler.h"
#include "runtime/fileio.h"
#include "runtime/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

typedef struct {
  char arch[32], key[65], source_key[65], sha256[65];
  char manifest[65];            /* SHA-256 of the bundle's manifest text */
  char *kernel, *origin, *path; /* path: file artifact, NULL when embedded */
  char *compiler;               /* a host artifact's CC as the manifest records it; NULL: none recorded */
  char *alt_path;               /* where a file artifact is when not at path (beside a link to the manifest) */
  const unsigned char *data;    /* embedded artifact (lives as long as the program) */
  size_t size;
  int warned;
} art_t;

struct da__bundles {
  pthread_mutex_t mu;
  art_t *arts;
  size_t n, cap;
};

void da__host_artifact_key(const char *source_key, char key[65]) {
  char text[700], cpu[160] = "";
  const char *cc = da__host_cc();
  /* -march=native (or -mcpu=, -mtune=): the module is this CPU's, and so is its key (a
   * cache folder shared by machines of other CPUs kept one module for all of them) */
  if (strstr(cc, "native")) {
    char hex[65];
    da__host_cpu_features(hex);
    snprintf(cpu, sizeof cpu, " cpu=%s", hex);
  }
  /* the machine's: x86-64 and arm64 hosts sharing a cache folder had one key for the two
   * modules (the other's did not load) */
  struct utsname u;
  if (uname(&u) != 0) snprintf(u.machine, sizeof u.machine, "unknown");
  snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), " machine=%.40s", u.machine);
  const int n = snprintf(text, sizeof text, "dilattn-host schema=%d source=%s cc=%s flags=%s%s",
                         DA_CACHE_SCHEMA_VERSION, source_key, cc, da__host_flags(), cpu);
  if (n < 0 || (size_t)n >= sizeof text) { /* a CC past the text: its hash in its place (cut, two CCs had one key) */
    char cc_hash[65];
    da__sha256_hex(cc, strlen(cc), cc_hash);
    snprintf(text, sizeof text, "dilattn-host schema=%d source=%s cc-sha256=%s flags=%s%s", DA_CACHE_SCHEMA_VERSION,
             source_key, cc_hash, da__host_flags(), cpu);
  }
  da__sha256_hex(text, strlen(text), key);
}

da__bundles *da__bundles_create(void) {
  da__bundles *b = calloc(1, sizeof *b);
  if (b) pthread_mutex_init(&b->mu, NULL);
  return b;
}

void da__bundles_destroy(da__bundles *b) {
  if (!b) return;
  for (size_t i = 0; i < b->n; i++)
    free(b->arts[i].kernel), free(b->arts[i].origin), free(b->arts[i].path), free(b->arts[i].compiler),
        free(b->arts[i].alt_path);
  free(b->arts);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

size_t da__bundles_count(da__bundles *b) { return b ? b->n : 0; }

size_t da__bundles_holding(da__bundles *b, const char *arch, const char *source_key) {
  size_t k = 0;
  if (!b || !source_key) return 0;
  pthread_mutex_lock(&b->mu);
  for (size_t i = 0; i < b->n; i++) k += !strcmp(b->arts[i].arch, arch) && !strcmp(b->arts[i].source_key, source_key);
  pthread_mutex_unlock(&b->mu);
  return k;
}

size_t da__bundles_holding_variant(da__bundles *b, const char *arch, const char *kernel, const char *source_key) {
  size_t k = 0;
  if (!b || !kernel || !source_key) return 0;
  pthread_mutex_lock(&b->mu);
  for (size_t i = 0; i < b->n; i++)
    k += !strcmp(b->arts[i].arch, arch) && b->arts[i].kernel && !strcmp(b->arts[i].kernel, kernel) &&
         strcmp(b->arts[i].source_key, source_key);
  pthread_mutex_unlock(&b->mu);
  return k;
}

static const char *str_member(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

da_status da__bundles_add(const da_context *ctx, da__bundles *b, const char *text, size_t len, const char *origin,
                          const char *dir, const char *alt_dir, const char *const *names, const unsigned char *const *blobs,
                          const size_t *sizes, int nblobs) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  DA_RETURN_IF(!root, DA_ERR_PARSE, "bundle %s: manifest is not JSON: line %d, column %d: %s", origin, err.line,
               err.column, err.text);
  da_status st = DA_OK;
  const char *fmt = str_member(root, "format"), *lib = str_member(root, "library");
  json_t *kernels = json_object_get(root, "kernels");
  json_int_t schema = json_integer_value(json_object_get(root, "schema"));
  if (!json_is_object(root) || !fmt || strcmp(fmt, "dilattn-bundle") || !lib || !json_is_array(kernels)) {
    st = da__set_error(ctx, DA_ERR_PARSE,
                       "bundle %s: not a dilattn bundle manifest (needs format \"dilattn-bundle\", library, kernels)",
                       origin);
    goto done;
  }
  if (strcmp(lib, DA_VERSION_STRING) || schema != DA_CACHE_SCHEMA_VERSION) {
    da__log(DA_LOG_WARN, "bundle %s was built by dilattn %s (cache schema %lld); this is %s (schema %d): skipped, "
                         "its kernels will be compiled at run time",
            origin, lib, (long long)schema, DA_VERSION_STRING, DA_CACHE_SCHEMA_VERSION);
    goto done;
  }
  /* registering the same bundle again is a no-op: the same origin (path or name) with the
   * same manifest (every unnamed linked bundle's origin is "(linked)") */
  char mhash[65];
  da__sha256_hex(text, len, mhash);
  pthread_mutex_lock(&b->mu);
  for (size_t i = 0; i < b->n; i++)
    if (!strcmp(b->arts[i].origin, origin) && !strcmp(b->arts[i].manifest, mhash)) {
      pthread_mutex_unlock(&b->mu);
      goto done;
    }
  pthread_mutex_unlock(&b->mu);
  /* validate everything before registering anything */
  size_t total = 0, ki;
  json_t *k;
  json_array_foreach(kernels, ki, k) {
    json_t *arts = json_object_get(k, "artifacts");
    if (!str_member(k, "kernel") || !da__is_hex(str_member(k, "source_key"), 64) || !json_is_array(arts)) {
      st = da__set_error(ctx, DA_ERR_PARSE, "bundle %s: kernels[%zu] lacks kernel, source_key or artifacts", origin, ki);
      goto done;
    }
    size_t ai;
    json_t *a;
    json_array_foreach(arts, ai, a) {
      const char *arch = str_member(a, "arch"), *file = str_member(a, "file");
      json_t *jsize = json_object_get(a, "size"); /* an integer: a string or a real is no size */
      json_int_t size = json_integer_value(jsize);
      json_t *jcc = json_object_get(a, "compiler"); /* (optional: a host artifact's CC) */
      if (!arch || strlen(arch) >= 32 || !da__is_hex(str_member(a, "key"), 64) ||
          !da__is_hex(str_member(a, "sha256"), 64) || !file || strchr(file, '/') || !json_is_integer(jsize) ||
          size < 0 || (jcc && !json_is_string(jcc))) {
        st = da__set_error(ctx, DA_ERR_PARSE, "bundle %s: kernels[%zu].artifacts[%zu] is incomplete or invalid", origin,
                           ki, ai);
        goto done;
      }
      total++;
    }
  }
  pthread_mutex_lock(&b->mu);
  if (b->n + total > b->cap) {
    size_t cap = b->cap ? b->cap : 16;
    while (cap < b->n + total) cap *= 2;
    art_t *na = realloc(b->arts, cap * sizeof *na);
    if (!na) {
      pthread_mutex_unlock(&b->mu);
      st = da__set_error(ctx, DA_ERR_NO_MEMORY, "bundle %s: out of memory", origin);
      goto done;
    }
    b->arts = na;
    b->cap = cap;
  }
  json_array_foreach(kernels, ki, k) {
    size_t ai;
    json_t *a;
    json_array_foreach(json_object_get(k, "artifacts"), ai, a) {
      art_t *t = &b->arts[b->n];
      memset(t, 0, sizeof *t);
      snprintf(t->arch, sizeof t->arch, "%s", str_member(a, "arch"));
      snprintf(t->key, sizeof t->key, "%s", str_member(a, "key"));
      snprintf(t->sha256, sizeof t->sha256, "%s", str_member(a, "sha256"));
      snprintf(t->source_key, sizeof t->source_key, "%s", str_member(k, "source_key"));
      memcpy(t->manifest, mhash, sizeof mhash);
      t->size = (size_t)json_integer_value(json_object_get(a, "size"));
      t->kernel = strdup(str_member(k, "kernel"));
      t->origin = strdup(origin);
      const char *file = str_member(a, "file"), *cc = str_member(a, "compiler");
      if (cc) t->compiler = strdup(cc);
      if (dir) {
        if (asprintf(&t->path, "%s/%s", dir, file) < 0) t->path = NULL;
        if (alt_dir && asprintf(&t->alt_path, "%s/%s", alt_dir, file) < 0) t->alt_path = NULL;
      } else {
        for (int i = 0; i < nblobs; i++)
          if (!strcmp(names[i], file)) t->data = blobs[i], t->size = sizes[i];
      }
      if (t->kernel && t->origin && (t->path || t->data) && (t->compiler || !cc) && (t->alt_path || !alt_dir)) b->n++;
      else free(t->kernel), free(t->origin), free(t->path), free(t->compiler), free(t->alt_path);
    }
  }
  pthread_mutex_unlock(&b->mu);
done:
  json_decref(root);
  return st;
}


/* Whether artifact t is the one looked up: (arch, key), or where source_key is given the
 * same source for arch built by another compiler than key's (key's own: looked up before) */
static int matches(const art_t *t, const char *arch, const char *key, const char *source_key) {
  return !strcmp(t->arch, arch) && (source_key ? !strcmp(t->source_key, source_key) && strcmp(t->key, key)
                                               : !strcmp(t->key, key));
}

/* The newest match's verified bytes (and that accept takes), else 0. Newest first: a
 * manifest registered again after a rebuild wins. One whose bytes are missing or fail
 * their checksum is skipped for the next older copy (another bundle's, or the registration
 * before a rebuild): a damaged bundle must not hide a sound one. */
static int find_verified(da__bundles *b, const char *arch, const char *key, const char *source_key, int compat,
                         da__artifact_accept accept, void *user, void **bytes, size_t *n) {
  /* (compat: arch is an older one of the device's major; said in the origin) */
  for (size_t below = SIZE_MAX;;) {
    art_t copy;
    int found = 0;
    pthread_mutex_lock(&b->mu); /* (registrations append: the indices below stay) */
    for (size_t i = below < b->n ? below : b->n; i-- > 0;)
      if (matches(&b->arts[i], arch, key, source_key)) {
        copy = b->arts[i], found = 1, below = i;
        break;
      }
    pthread_mutex_unlock(&b->mu);
    if (!found) return 0;
    size_t len = 0;
    unsigned char *data = NULL;
    int err = 0;
    if (copy.path) {
      data = (unsigned char *)da__read_file(copy.path, &len);
      err = errno;
      if (!data && err == ENOENT && copy.alt_path) { /* (not beside the manifest: beside its link) */
        data = (unsigned char *)da__read_file(copy.alt_path, &len);
        err = errno;
      }
    } else {
      data = malloc(copy.size ? copy.size : 1);
      if (data) memcpy(data, copy.data, copy.size), len = copy.size;
    }
    char hex[65] = "";
    if (data) da__sha256_hex(data, len, hex);
    if (data && len == copy.size && !strcmp(hex, copy.sha256)) {
      char where[700];
      snprintf(where, sizeof where, "bundle %.560s%s%s", copy.origin, compat ? ", built for " : "", compat ? copy.arch : "");
      /* a host module's CC as recorded ("" where the manifest records none: manifests written
       * before they recorded it), checked as the disk cache's are; a cubin's: NULL */
      const char *cc = strcmp(copy.arch, "host") ? NULL : copy.compiler ? copy.compiler : "";
      if (!accept || accept(user, where, cc, data, len)) {
        *bytes = data;
        *n = len;
        return 1;
      }
    } else {
      if (data)
        da__log(DA_LOG_WARN, "bundle %s: artifact of %s for %s is corrupt (checksum mismatch)%s%s; skipped",
                copy.origin, copy.kernel, arch, copy.path ? ": " : "", copy.path ? copy.path : "");
      else
        da__log(DA_LOG_WARN, "bundle %s: artifact of %s for %s cannot be read%s%s (%s); skipped", copy.origin,
                copy.kernel, arch, copy.path ? ": " : "", copy.path ? copy.path : "",
                copy.path ? da__read_error(err) : "out of memory");
    }
    free(data);
  }
}

int da__bundles_find(da__bundles *b, const char *arch, const char *key, void **bytes, size_t *n) {
  return b && find_verified(b, arch, key, NULL, 0, NULL, NULL, bytes, n);
}

void da__bundles_note_other_arch(da__bundles *b, const char *arch, const char *source_key) {
  if (!b || !source_key) return;
  pthread_mutex_lock(&b->mu);
  art_t *other = NULL;
  for (size_t i = b->n; i-- > 0 && !other;)
    if (!strcmp(b->arts[i].source_key, source_key) && strcmp(b->arts[i].arch, arch)) other = &b->arts[i];
  if (other && !other->warned) {
    other->warned = 1;
    da__log(DA_LOG_WARN, "bundle %s has kernel %s for %s, not for %s", other->origin, other->kernel, other->arch,
            arch);
  }
  pthread_mutex_unlock(&b->mu);
}

int da__bundles_find_source(da__bundles *b, const char *arch, const char *key, const char *source_key,
                            da__artifact_accept accept, void *user, void **bytes, size_t *n) {
  if (!b || !source_key) return 0;
  if (find_verified(b, arch, key, source_key, 0, accept, user, bytes, n)) return 1;
  /* a cubin of an older arch of the device's major, the nearest first: sm_80's SASS runs on
   * sm_86 and sm_89 (an A10, L4 or RTX 4090 with an sm_80,sm_90 bundle recompiled, or failed
   * with JIT off); never for an arch-specific target (sm_90a) nor a three-digit one */
  int maj, min, end = 0;
  if (sscanf(arch, "sm_%1d%1d%n", &maj, &min, &end) != 2 || arch[end]) return 0;
  for (int m = min - 1; m >= 0; m--) {
    char older[16];
    snprintf(older, sizeof older, "sm_%d%d", maj, m);
    if (find_verified(b, older, key, source_key, 1, accept, user, bytes, n)) {
      da__log(DA_LOG_INFO, "bundle: kernel of source %.12s for %s taken from its %s build (binary compatible)",
              source_key, arch, older);
      return 1;
    }
  }
  return 0;
}
