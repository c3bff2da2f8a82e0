/* tuning_db.c - the tuning database (DESIGN.md decision 9). Line 1 is the environment
 * header {"dilattn_tuning_db":1,"env":{...}}; every other line is one record. Writers
 * take an flock on <db>.lock, re-read the file, merge, write a temp file and rename it,
 * so two tuners writing at once lose no record. A file whose header names another
 * environment is ignored by readers and never overwritten. */
#define _GNU_SOURCE
#include "runtime/tuning_db.h"
#include "gen/render.h"

#include "runtime/cuda_driver.h"
#include "runtime/disk_cache.h"
#include "runtime/fileio.h"
#include "runtime/host_compiler.h"
#include "runtime/log.h"
#include "runtime/nvrtc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* the largest tuning database read (a record is about 300 bytes: some 900,000 of them);
 * a larger file is refused as unreadable (EFBIG), as a FIFO or device is (EINVAL) */
#define DA_TUNING_DB_MAX (256ll << 20)

int da__tuning_bucket(int64_t n) {
  int b = 0;
  while (n > 1) n >>= 1, b++;
  return b;
}

void da__tuning_db_path(char *out, size_t cap) {
  const char *e = getenv("DILATTN_TUNING_DB");
  if (e && *e) {
    snprintf(out, cap, "%s", e);
    return;
  }
  /* beside the cache's v1/; "" where no folder is set (no DILATTN_CACHE_DIR, XDG_CACHE_HOME
   * or HOME: no database then, rather than /v1/tuning.jsonl) */
  char base[DA_CACHE_BASE_MAX + 1];
  const size_t need = da__disk_cache_base(base, sizeof base);
  if (!base[0] || need > DA_CACHE_BASE_MAX) {
    if (cap) out[0] = '\0';
    return;
  }
  snprintf(out, cap, "%s/tuning.jsonl", base);
}

/* The environment but the GPU: made once a process */
static char env_cpu[256] = "unknown", env_cc[128], env_nvrtc[32] = "none";
static long env_cpus;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void make_env(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *c = strchr(line, ':');
      if (c) {
        snprintf(env_cpu, sizeof env_cpu, "%s", c + 2);
        env_cpu[strcspn(env_cpu, "\n\"\\")] = 0;
      }
      break;
    }
  if (f) fclose(f);
  env_cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int maj = 0, min = 0;
  if (da__nvrtc_version(NULL, &maj, &min) == DA_OK) snprintf(env_nvrtc, sizeof env_nvrtc, "%d.%d", maj, min);
  /* a CC past the field: its SHA-256 in its place (cut, "cc <130 spaces> -O0" and "... -O3"
   * were one compiler, and -O0 timings served -O3 plans) */
  const char *cc = da__host_cc();
  int plain = strlen(cc) < sizeof env_cc;
  for (const unsigned char *p = (const unsigned char *)cc; *p && plain; p++) /* (a tab: JSON no header could parse) */
    plain = *p >= 0x20 && *p != '"' && *p != '\\' && *p != 0x7f;
  if (plain) {
    snprintf(env_cc, sizeof env_cc, "%s", cc);
  } else {
    char hex[65];
    da__sha256_hex(cc, strlen(cc), hex);
    snprintf(env_cc, sizeof env_cc, "sha256:%s", hex);
  }
}

const char *da__tuning_env_for(const da_context *ctx) {
  pthread_once(&env_once, make_env);
  /* the GPU: ctx's device where it took one; else (no context, or one not used for CUDA
   * yet) the device current on this thread, else device 0, as before devices were per
   * context. (A worker thread has none current: the GPU of a context of device 1 was
   * device 0's, set up for it.) */
  int *slot = ctx ? da__context_cuda_device(ctx) : NULL;
  const int bound = slot && __atomic_load_n(slot, __ATOMIC_ACQUIRE) >= 0;
  char gpu[300] = "none";
  da__cuda *dev = NULL;
  if (da__cuda_get(bound ? ctx : NULL, &dev) == DA_OK)
    snprintf(gpu, sizeof gpu, "%.200s %s driver %d", da__cuda_device_name(dev), da__cuda_arch(dev),
             da__cuda_driver_version(dev));
  else if (bound)
    da__clear_error(ctx);
  gpu[strcspn(gpu, "\"\\")] = 0;
  static __thread char env_line[1024];
  snprintf(env_line, sizeof env_line,
           "{\"dilattn_tuning_db\":1,\"env\":{\"library\":\"%s\",\"cpu\":\"%s\",\"cpus\":%ld,\"cc\":\"%s\","
           "\"gpu\":\"%s\",\"nvrtc\":\"%s\"}}",
           DA_VERSION_STRING, env_cpu, env_cpus, env_cc, gpu, env_nvrtc);
  return env_line;
}

const char *da__tuning_env(void) { return da__tuning_env_for(NULL); }

/* The "env" objects of a database's header line (*there, NULL where it has none) and of
 * ctx's environment (*here); the caller decrefs *a and *b, their documents. */
static void env_pair(const da_context *ctx, const char *header, json_t **a, json_t **b, json_t **there, json_t **here) {
  *a = header ? json_loads(header, 0, NULL) : NULL;
  *b = json_loads(da__tuning_env_for(ctx), 0, NULL);
  *there = *a ? json_object_get(*a, "env") : NULL;
  *here = *b ? json_object_get(*b, "env") : NULL;
}

/* The header's fields a backend's timings depend on: host kernels on the CPU and the C
 * compiler, CUDA kernels on the GPU (its driver) and NVRTC; both on the library */
static const char *const ENV_KEYS[2][5] = {{"library", "cpu", "cpus", "cc", NULL}, {"library", "gpu", "nvrtc", NULL}};
enum { ENV_HOST = 1, ENV_CUDA = 2 };
static int backend_bit(const char *backend) {
  return !strcmp(backend, "host") ? ENV_HOST : !strcmp(backend, "cuda") ? ENV_CUDA : 0;
}

/* The backends (ENV_* bits) whose records the header's environment serves in ctx's: 0 for
 * none (another machine's, another library's), -1 for a line that is no header at all */
static int env_mask(const da_context *ctx, const char *header) {
  json_t *a, *b, *there, *here;
  env_pair(ctx, header, &a, &b, &there, &here);
  int mask = -1;
  if (json_is_object(there) && json_is_object(here)) {
    mask = 0;
    for (int k = 0; k < 2; k++) {
      int same = 1;
      for (const char *const *key = ENV_KEYS[k]; *key; key++) {
        json_t *x = json_object_get(there, *key), *y = json_object_get(here, *key);
        /* (no NVRTC here: the CUDA kernels come built, from bundles; the timings are the
         * GPU's) */
        const int any = k == 1 && !strcmp(*key, "nvrtc") && !strcmp(json_string_value(y) ? json_string_value(y) : "",
                                                                     "none");
        same &= any || (x && y && json_equal(x, y));
      }
      if (same) mask |= 1 << k;
    }
  }
  json_decref(a);
  json_decref(b);
  return mask;
}

void da__tuning_db_env_diff(const da_context *ctx, const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = da__fopen_regular(path, DA_TUNING_DB_MAX);
  char *line = NULL;
  size_t lcap = 0;
  const ssize_t len = f ? getline(&line, &lcap, f) : -1;
  if (f) fclose(f);
  json_t *a, *b, *there, *here;
  env_pair(ctx, len > 0 ? line : NULL, &a, &b, &there, &here);
  free(line);
  const char *key;
  json_t *v;
  size_t n = 0;
  if (json_is_object(there) && json_is_object(here))
    json_object_foreach(here, key, v) {
      json_t *w = json_object_get(there, key);
      if (w && json_equal(v, w)) continue;
      char *x = w ? json_dumps(w, JSON_ENCODE_ANY) : NULL, *y = json_dumps(v, JSON_ENCODE_ANY);
      if (n < cap)
        n += (size_t)snprintf(out + n, cap - n, "%s%s: %s there, %s here", n ? "; " : "", key, x ? x : "none",
                              y ? y : "?");
      free(x), free(y);
    }
  json_decref(a);
  json_decref(b);
}

/* s cut before a last UTF-8 character that a truncation left incomplete (JSON strings
 * are UTF-8: jansson writes no string for such a tail, and the field was lost) */
static void utf8_cut(char *s) {
  size_t n = strlen(s), i = n;
  while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--; /* continuation bytes */
  if (i == 0) return;
  const unsigned char lead = (unsigned char)s[i - 1];
  const size_t want = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (n - (i - 1) < want) s[i - 1] = '\0';
}

static void get_str(json_t *o, const char *k, char *dst, size_t cap) {
  const char *v = json_string_value(json_object_get(o, k));
  snprintf(dst, cap, "%s", v ? v : "");
  utf8_cut(dst);
}

/* An integer field in [lo, hi] (absent: 0, when 0 is in range) */
static int int_field(json_t *o, const char *k, json_int_t lo, json_int_t hi, int64_t *out) {
  json_t *v = json_object_get(o, k);
  const json_int_t x = v ? json_integer_value(v) : 0;
  *out = x;
  return (!v || json_is_integer(v)) && x >= lo && x <= hi;
}

/* A record, or -1 for a damaged one (skipped): fields out of what the tuner writes (a
 * bucket past 63, tiles past da_plan_options' ranges, a spec hash that is not one) would
 * otherwise reach the planner or overflow the nearest-bucket search. */
static int parse_record(const char *line, size_t len, da__tune_record *r) {
  json_t *o = json_loadb(line, len, 0, NULL); /* (every byte: a record before a NUL was read, the rest dropped) */
  if (!json_is_object(o)) {
    json_decref(o);
    return -1;
  }
  int64_t bucket, tq, tk, fmq, mma, reps, seq_len;
  /* and what the tuner writes of a run: its length (the bucket is its log2), a status it
   * knows, and for an ok one whole timings (a missing median read as 0 ms, the fastest of
   * all, and won) */
  static const char *const statuses[] = {"ok", "compile", "runtime", "correctness", "constraints"};
  const char *status = json_string_value(json_object_get(o, "status"));
  int known = 0;
  for (size_t i = 0; status && i < sizeof statuses / sizeof *statuses; i++) known |= !strcmp(status, statuses[i]);
  json_t *med = json_object_get(o, "median_ms"), *mn = json_object_get(o, "min_ms"), *mx = json_object_get(o, "max_ms");
  const double m = json_number_value(med), lo = json_number_value(mn), hi = json_number_value(mx);
  int ok = da__is_hex(json_string_value(json_object_get(o, "spec_hash")), 64) &&
           int_field(o, "bucket", 0, 63, &bucket) && int_field(o, "tile_q", 0, 256, &tq) &&
           int_field(o, "tile_k", 0, 1024, &tk) && int_field(o, "fused_min_queries", 0, INT_MAX, &fmq) &&
           int_field(o, "cuda_mma", 0, DA__CUDA_MMA_MAX, &mma) && int_field(o, "reps", 0, INT_MAX, &reps) &&
           int_field(o, "seq_len", 1, INT64_MAX, &seq_len) && da__tuning_bucket(seq_len) == bucket && known;
  if (ok && !strcmp(status, "ok"))
    ok = json_is_number(med) && json_is_number(mn) && json_is_number(mx) && isfinite(m) && isfinite(lo) &&
         isfinite(hi) && lo > 0 && lo <= m && m <= hi && reps >= 1;
  if (!ok) {
    json_decref(o);
    return -1;
  }
  memset(r, 0, sizeof *r);
  get_str(o, "spec_hash", r->spec_hash, sizeof r->spec_hash);
  get_str(o, "backend", r->backend, sizeof r->backend);
  get_str(o, "strategy", r->strategy, sizeof r->strategy);
  get_str(o, "status", r->status, sizeof r->status);
  get_str(o, "label", r->label, sizeof r->label);
  r->seq_len = json_integer_value(json_object_get(o, "seq_len"));
  r->batch = json_integer_value(json_object_get(o, "batch"));
  r->bucket = (int)bucket;
  r->params.tile_q = (int)tq;
  r->params.tile_k = (int)tk;
  r->params.fused_min_queries = (int)fmq;
  r->params.cuda_mma = (int)mma; /* absent in older databases: 0 */
  r->median_ms = json_number_value(json_object_get(o, "median_ms"));
  r->min_ms = json_number_value(json_object_get(o, "min_ms"));
  r->max_ms = json_number_value(json_object_get(o, "max_ms"));
  r->reps = (int)reps;
  r->is_default = json_is_true(json_object_get(o, "default"));
  json_decref(o);
  return r->backend[0] ? 0 : -1; /* (the spec hash was checked above) */
}

static void format_record(const da__tune_record *r, FILE *f) {
  json_t *o = json_object();
  json_object_set_new(o, "spec_hash", json_string(r->spec_hash));
  json_object_set_new(o, "backend", json_string(r->backend));
  json_object_set_new(o, "seq_len", json_integer(r->seq_len));
  json_object_set_new(o, "batch", json_integer(r->batch));
  json_object_set_new(o, "bucket", json_integer(r->bucket));
  json_object_set_new(o, "tile_q", json_integer(r->params.tile_q));
  json_object_set_new(o, "tile_k", json_integer(r->params.tile_k));
  json_object_set_new(o, "fused_min_queries", json_integer(r->params.fused_min_queries));
  json_object_set_new(o, "cuda_mma", json_integer(r->params.cuda_mma));
  json_object_set_new(o, "strategy", json_string(r->strategy));
  json_object_set_new(o, "status", json_string(r->status));
  char label[sizeof r->label];
  snprintf(label, sizeof label, "%s", r->label);
  utf8_cut(label); /* a message cut at the label's size (tune.c) */
  json_object_set_new(o, "label", json_string(label));
  json_object_set_new(o, "median_ms", json_real(isfinite(r->median_ms) ? r->median_ms : -1));
  json_object_set_new(o, "min_ms", json_real(isfinite(r->min_ms) ? r->min_ms : -1));
  json_object_set_new(o, "max_ms", json_real(isfinite(r->max_ms) ? r->max_ms : -1));
  json_object_set_new(o, "reps", json_integer(r->reps));
  json_object_set_new(o, "default", json_boolean(r->is_default));
  char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  if (s) fprintf(f, "%s\n", s);
  free(s);
  json_decref(o);
}

/* Every record of the database at path (malloc'ed into *out: all backends'), the header's
 * env_mask in *mask and its line in *header (malloc'ed; NULL for a missing file: then 0
 * records and mask both backends). -1 for a file that is not a tuning database, or
 * unreadable. */
static int read_db(const da_context *ctx, const char *path, da__tune_record **out, int *mask, char **header,
                   int *sections, char **unread, size_t *unread_len) {
  *out = NULL, *header = NULL, *mask = ENV_HOST | ENV_CUDA, *sections = 0;
  if (unread) *unread = NULL, *unread_len = 0;
  FILE *f = da__fopen_regular(path, DA_TUNING_DB_MAX);
  if (!f) return errno == ENOENT ? 0 : -1; /* (errno: why) */
  FILE *u = unread ? open_memstream(unread, unread_len) : NULL; /* (the lines skipped, as they are) */
  if (unread && !u) { /* (they would be lost at the merge) */
    fclose(f);
    errno = ENOMEM;
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int n = 0, ncap = 0, first = 1, cur = 0;
  da__tune_record *v = NULL;
  while ((len = getline(&line, &cap, f)) >= 0) {
    if (first) {
      first = 0;
      *mask = cur = env_mask(ctx, line);
      if (*mask < 0) { /* not a tuning database */
        n = -1;
        break;
      }
      *sections = 1;
      line[strcspn(line, "\n")] = '\0';
      *header = strdup(line);
      continue;
    }
    /* another header (databases concatenated: `cat a.jsonl b.jsonl`): the records after it
     * are its environment's, served here only where it matches (they were read as the first
     * header's: another machine's timings taken, and merged in as this one's) */
    if (strstr(line, "\"dilattn_tuning_db\"")) {
      const int m = env_mask(ctx, line);
      if (m >= 0) {
        cur = m;
        ++*sections;
        continue;
      }
    }
    if (n == ncap) {
      da__tune_record *nv = realloc(v, (size_t)(ncap = ncap ? 2 * ncap : 64) * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    if (parse_record(line, (size_t)len, &v[n]) == 0) v[n++].env_mask = cur; /* a damaged line is skipped */
    else if (u && line[strspn(line, " \t\r\n")]) { /* (whole: a NUL in it ended a %s) */
      fwrite(line, 1, (size_t)len, u);
      if (line[len - 1] != '\n') fputc('\n', u);
    }
  }
  free(line);
  fclose(f);
  if (u) fclose(u);
  if (n < 0) {
    free(v);
    errno = 0; /* (not a tuning database: no errno) */
    return -1;
  }
  *out = v;
  return n;
}

int da__tuning_db_read_for(const da_context *ctx, const char *path, da__tune_record **out, int *mismatch,
                           int *skipped) {
  int mask, n, sections;
  char *header;
  if (mismatch) *mismatch = 0;
  n = read_db(ctx, path, out, &mask, &header, &sections, NULL, NULL);
  free(header);
  if (skipped) *skipped = 0;
  int any = mask; /* (a section of a later header that serves here) */
  for (int i = 0; i < n; i++) any |= (*out)[i].env_mask;
  if (n >= 0 && any == 0) { /* another machine's or library's: nothing of it counts */
    free(*out);
    *out = NULL;
    if (mismatch) *mismatch = 1;
    return -1;
  }
  int kept = 0;
  for (int i = 0; i < n; i++) /* the records of a backend whose environment differs here: not used */
    if (backend_bit((*out)[i].backend) & (*out)[i].env_mask) (*out)[kept++] = (*out)[i];
    else if (skipped) ++*skipped;
  return n < 0 ? n : kept;
}

int da__tuning_db_read(const char *path, da__tune_record **out, int *mismatch) {
  return da__tuning_db_read_for(NULL, path, out, mismatch, NULL);
}

static int same_params(const da_plan_options *a, const da_plan_options *b) {
  return a->tile_q == b->tile_q && a->tile_k == b->tile_k && a->fused_min_queries == b->fused_min_queries &&
         a->cuda_mma == b->cuda_mma;
}

static int same_slot(const da__tune_record *a, const da__tune_record *b) {
  /* not the batch: da__tuning_best compares the times of one bucket's records, which must
   * come from one sweep (a batch-1 sweep's beside a batch-8 one's always won) */
  return !strcmp(a->spec_hash, b->spec_hash) && !strcmp(a->backend, b->backend) && a->bucket == b->bucket &&
         same_params(&a->params, &b->params);
}

/* The error of a database that cannot be merged into (nold < 0 from da__tuning_db_read) */
static da_status unmergeable(const da_context *ctx, const char *path, int mismatch, int sections) {
  if (mismatch && sections > 1)
    return da__set_error(ctx, DA_ERR_IO,
                         "tuning db %s holds %d environment headers (databases concatenated?): plans read each "
                         "header's records under it, but a merge would write them all under one; it is left as it is "
                         "(split it into a file a header, or give tune --db another file)",
                         path, sections);
  if (mismatch) { /* what differs, as a plan's warning says it */
    char diff[1024];
    da__tuning_db_env_diff(ctx, path, diff, sizeof diff);
    return da__set_error(ctx, DA_ERR_IO,
                         "tuning db %s was written for another environment (%s); it is left as it is (give tune --db "
                         "or set DILATTN_TUNING_DB to another file)",
                         path, diff[0] ? diff : "its header differs");
  }
  return da__set_error(ctx, DA_ERR_IO,
                       "tuning db %s cannot be read as a tuning database (JSON lines under an environment header); it "
                       "is left as it is (give tune --db or set DILATTN_TUNING_DB to another file)",
                       path);
}

static int listed(const char *const *keys, const char *key) {
  for (; *keys; keys++)
    if (!strcmp(*keys, key)) return 1;
  return 0;
}

/* The header a merge of backend bit's records into a file of header old (NULL: a new file),
 * env_mask mask and records recs writes: the file's own where its fields of that backend are
 * this environment's; where no record depends on the fields that differ (none of that
 * backend, none of the other on a field they share: the library), the file's with them made
 * this environment's; NULL where records were timed elsewhere (malloc'ed) */
static char *merge_header(const da_context *ctx, const char *old, int mask, const da__tune_record *recs, int n,
                          int bit) {
  if (!old) return strdup(da__tuning_env_for(ctx));
  if (mask & bit) return strdup(old);
  int has[3] = {0, 0, 0}; /* by ENV_* bit */
  for (int i = 0; i < n; i++) has[backend_bit(recs[i].backend)] = 1;
  if (has[bit]) return NULL;
  json_t *a, *b, *there, *here;
  env_pair(ctx, old, &a, &b, &there, &here);
  char *out = NULL;
  if (json_is_object(there) && json_is_object(here)) {
    const int k = bit == ENV_HOST ? 0 : 1, obit = bit == ENV_HOST ? ENV_CUDA : ENV_HOST;
    int ok = 1;
    for (const char *const *key = ENV_KEYS[k]; *key && ok; key++) {
      json_t *x = json_object_get(there, *key), *y = json_object_get(here, *key);
      if (!y || (x && json_equal(x, y))) continue;
      if (has[obit] && listed(ENV_KEYS[1 - k], *key)) ok = 0; /* the other backend's records depend on it */
      else json_object_set(there, *key, y);
    }
    if (ok) out = json_dumps(a, JSON_COMPACT);
  }
  json_decref(a);
  json_decref(b);
  return out;
}

/* path's <db>.lock opened (created) as every merge takes it: not through a link (another
 * user's <db>.lock -> /etc/nologin made root create it); -1 with the error in ctx */
static int open_lock(const da_context *ctx, const char *path, char *lock, size_t cap) {
  snprintf(lock, cap, "%s.lock", path);
  const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    da__set_error(ctx, DA_ERR_IO, "tuning db: cannot open %s: %s", lock,
                  errno == ELOOP ? "a symbolic link, not followed" : strerror(errno));
  return fd;
}

da_status da__tuning_db_check(const da_context *ctx, const char *path, const char *backend) {
  struct stat st;
  if (stat(path, &st) == 0) { /* a folder or a FIFO read as no records (or hung) */
    DA_RETURN_IF(!S_ISREG(st.st_mode), DA_ERR_IO, "tuning db %s: not a regular file", path);
    FILE *f = da__fopen_regular(path, DA_TUNING_DB_MAX);
    DA_RETURN_IF(!f, DA_ERR_IO, "tuning db %s: %s", path, strerror(errno));
    fclose(f);
  } else {
    DA_RETURN_IF(errno != ENOENT, DA_ERR_IO, "tuning db %s: %s", path, strerror(errno));
  }
  da__tune_record *old = NULL;
  char *header;
  int mask, sections, nold = read_db(ctx, path, &old, &mask, &header, &sections, NULL, NULL);
  char *next = nold < 0 || sections > 1 ? NULL : merge_header(ctx, header, mask, old, nold, backend_bit(backend));
  free(old), free(header);
  if (!next) return unmergeable(ctx, path, nold >= 0, sections); /* another GPU's records, say, for a CUDA sweep */
  free(next);
  DA_RETURN_IF(da__can_write_beside(path) != 0, DA_ERR_IO, "tuning db %s: cannot write beside it: %s", path,
               strerror(errno));
  /* its lock, as the merge will open it (a folder or a link there was found after the sweep,
   * its records lost) */
  char lock[4200];
  const int lfd = open_lock(ctx, path, lock, sizeof lock);
  if (lfd < 0) return DA_ERR_IO;
  close(lfd);
  return DA_OK;
}

da_status da__tuning_db_merge(const da_context *ctx, const char *path, const da__tune_record *recs, int n) {
  char lock[4200];
  const int fd = open_lock(ctx, path, lock, sizeof lock);
  if (fd < 0) return DA_ERR_IO;
  /* held by another tune's merge (one stopped with Ctrl-Z holds it until it goes on): said,
   * then waited for (it waited without a word) */
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    da__log(DA_LOG_WARN, "tuning db: waiting for %s (another process is merging into %s)", lock, path);
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  da__tune_record *old = NULL;
  char *header = NULL, *next = NULL, *unread = NULL;
  size_t unread_len = 0;
  int mask, sections, nold = read_db(ctx, path, &old, &mask, &header, &sections, &unread, &unread_len);
  /* (a sweep's records are one backend's: the first one's) */
  if (nold >= 0 && sections <= 1)
    next = n > 0 ? merge_header(ctx, header, mask, old, nold, backend_bit(recs[0].backend))
                 : strdup(header ? header : da__tuning_env_for(ctx));
  for (int j = 1; j < n && next; j++)
    if (strcmp(recs[j].backend, recs[0].backend)) free(next), next = NULL;
  da_status st = DA_OK;
  if (!next) {
    st = unmergeable(ctx, path, nold >= 0, sections);
  } else {
    /* the temp beside it with the database's own mode (mkstemp's 0600 made a shared 0644
     * file private at the first merge) */
    char tmp[4500];
    const int tfd = da__output_tmp(path, tmp, sizeof tmp);
    FILE *f = tfd >= 0 ? fdopen(tfd, "w") : NULL;
    if (!f) {
      const int e = errno;
      if (tfd >= 0) close(tfd), unlink(tmp);
      st = da__set_error(ctx, DA_ERR_IO, "tuning db: cannot write next to %s: %s", path, strerror(e));
    } else {
      /* the header merge_header made (the records' timings and its fields agree) */
      fprintf(f, "%s\n", next);
      for (int i = 0; i < nold; i++) {
        int replaced = 0;
        for (int j = 0; j < n && !replaced; j++) replaced = same_slot(&old[i], &recs[j]);
        if (!replaced) format_record(&old[i], f);
      }
      for (int j = 0; j < n; j++) format_record(&recs[j], f);
      /* the lines no record was read from (damaged, hand-edited, a newer tuner's), kept as
       * they are: still skipped by plans, never deleted by a merge (they were) */
      if (unread) fwrite(unread, 1, unread_len, f); /* (a NUL in a line ended an fputs) */
      int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
      ok = fclose(f) == 0 && ok;
      if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        st = da__set_error(ctx, DA_ERR_IO, "tuning db: cannot replace %s: %s", path, strerror(errno));
      }
    }
  }
  free(old), free(header), free(next), free(unread);
  flock(fd, LOCK_UN);
  close(fd);
  return st;
}

const da__tune_record *da__tuning_best(const da__tune_record *recs, int n, const char *spec_hash, const char *backend,
                                       int want_bucket, int sync_only) {
  /* the spec's records: its correctness failures (a kernel wrong at one length is suspect at
   * every length; a runtime failure, out of memory at 2^24 say, is that length's), then the
   * ok ones of the instruction allowed that are not among them. Under sync_only not the
   * default's record of a CUDA sweep either (no tunables, cuda_mma 0: timed as the device's
   * default instruction, wgmma on sm_90, whose timing beat every mma.sync record) */
  const da__tune_record **mine = malloc(((size_t)n + 1) * sizeof *mine);
  if (!mine) return NULL;
  int m = 0, nfail = 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(recs[i].spec_hash, spec_hash) && !strcmp(recs[i].backend, backend) &&
        !strcmp(recs[i].status, "correctness"))
      mine[m++] = &recs[i];
  nfail = m;
  for (int i = 0; i < n; i++) {
    const da__tune_record *r = &recs[i];
    const int untuned = !r->params.tile_q && !r->params.tile_k && !r->params.fused_min_queries && !r->params.cuda_mma;
    if (strcmp(r->spec_hash, spec_hash) || strcmp(r->backend, backend) || strcmp(r->status, "ok") ||
        (sync_only && (r->params.cuda_mma >= 2 || (untuned && !strcmp(backend, "cuda")))))
      continue;
    int failed = 0;
    for (int j = 0; j < nfail && !failed; j++) failed = same_params(&mine[j]->params, &r->params);
    if (!failed) mine[m++] = r;
  }
  int best_bucket = -1;
  for (int i = nfail; i < m; i++) { /* nearest bucket; of two as near, the larger (it was file order) */
    const int d = abs(mine[i]->bucket - want_bucket), bd = abs(best_bucket - want_bucket);
    if (best_bucket < 0 || d < bd || (d == bd && mine[i]->bucket > best_bucket)) best_bucket = mine[i]->bucket;
  }
  const da__tune_record *best = NULL;
  for (int i = nfail; i < m; i++)
    if (mine[i]->bucket == best_bucket && (!best || mine[i]->median_ms < best->median_ms)) best = mine[i];
  free(mine);
  return best;
}

/* The options `dilattn tune` sweeps for spec s, the defaults first (all zero); at most cap. */
int da__tune_candidates(const da_spec *sp, int cuda, int wgmma, da_plan_options *c, int cap) {
  const da_spec s = *sp;
  int n = 0;
  static const int tqs[] = {8, 16, 32, 64}, tks[] = {16, 32, 64, 128};
  int multi = s.mode == DA_MODE_LONGNET && s.num_branches > 1;
  int fmins[2] = {1, 1 << 30};
  int sparse = da__spec_sparse(&s);
  memset(c, 0, sizeof *c * (size_t)cap);
  if (cap < 1) return 0;
  /* CUDA: the tensor-core path takes 16 or 32 query rows per warp (tile_q 64, 128; 128
   * up to D = 96); the SIMT path fixes its own */
  static const int tqs_mma[] = {64, 128};
  int mma = s.dtype != DA_DTYPE_FLOAT32 && s.head_dim % 16 == 0 && s.head_dim <= 128;
  int ntq = !cuda ? 4 : !mma ? 1 : s.head_dim <= 96 ? 2 : 1;
  n = 1; /* c[0]: all defaults */
  for (int a = 0; a < ntq; a++)
    for (int b = 0; b < 4; b++)
      for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++) {
        c[n].tile_q = !cuda ? tqs[a] : mma ? tqs_mma[a] : 0;
        c[n].tile_k = tks[b];
        c[n].fused_min_queries = multi ? fmins[f] : 0;
        c[n].cuda_mma = cuda; /* mma.sync by name (0 is the default instruction: wgmma-ws-tma on sm_90) */
        n++;
      }
  /* the wgmma paths (cuda_mma = 2, 3, 4) on sm_90 devices: one or two warpgroups of 64 rows;
   * plain: 64 or 128 keys at D = 64, 32 or 64 at D = 128 (the planner refuses more there) */
  if (cuda && wgmma)
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 2; b++)
        for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++) {
          c[n].tile_q = 64 << a;
          c[n].tile_k = (s.head_dim == 64 ? 64 : 32) << b;
          c[n].fused_min_queries = multi ? fmins[f] : 0;
          c[n].cuda_mma = 2;
          n++;
        }
      for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++) { /* overlapped: 64-key tiles */
        c[n].tile_q = 64 << a;
        c[n].tile_k = 64;
        c[n].fused_min_queries = multi ? fmins[f] : 0;
        c[n].cuda_mma = 3;
        n++;
      }
      /* warp-specialized (4), the default under sparse layouts, one or two consumer warpgroups,
       * 64 and 128 keys (the planner picks one by head_dim, mask and layout); at D = 128 no
       * 128-key tiles with one warpgroup (two CTAs per SM: their shared memory holds none)
       * nor under a sparse layout (504 bytes spilled, test_tune_candidates) */
      for (int b = 0; b < (s.head_dim > 64 && (a == 0 || sparse) ? 1 : 2); b++)
        for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++) {
          c[n].tile_q = 64 << a;
          c[n].tile_k = 64 << b;
          c[n].fused_min_queries = multi ? fmins[f] : 0;
          c[n].cuda_mma = 4;
          n++;
        }
    }
  /* ... with three consumer warpgroups (tile_q 192, 64 or 128 keys: D = 64 without a causal
   * mask, where the planner takes it; its 160-register consumers spilled 24 to 348 bytes
   * under a causal mask or at D = 128, test_tune_candidates), and with P double-buffered
   * (cuda_mma 5, 128 rows, the planner's key tile); neither under a sparse layout (the
   * planner refuses both there) */
  if (cuda && wgmma && !sparse)
    for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++)
      for (int v = 0; v < 3 && n < cap; v++) {
        if (v < 2 && (s.causal || s.head_dim != 64)) continue;
        c[n].tile_q = v == 2 ? 128 : 192;
        c[n].tile_k = v == 2 ? 0 : 64 << v;
        c[n].fused_min_queries = multi ? fmins[f] : 0;
        c[n].cuda_mma = v == 2 ? 5 : 4;
        n++;
      }
  /* ... and with K and V copied by TMA (cuda_mma 6, the planner's tiles: the default on
   * these devices with a driver of CUDA 12.1 or later, c[0], where a single-strategy spec's
   * one TMA candidate would time c[0]'s kernel again; named here for the strategy forced
   * each way, and for older drivers, where c[0] is 4); not under a sparse layout */
  if (cuda && wgmma && !sparse && (multi || wgmma < 2))
    for (int f = 0; f < (multi ? 2 : 1) && n < cap; f++) {
      c[n].fused_min_queries = multi ? fmins[f] : 0;
      c[n].cuda_mma = 6;
      n++;
    }
  /* ... and with one consumer warpgroup (tile_q 64: two CTAs share an SM, one's prologue and
   * epilogue under the other's key loop): on an H200 1.02x to 1.05x the default's 128 rows
   * for causal plans at D = 64 from 16K to 256K, 0.95x at 1M, 0.88x at D = 128, 0.90x to
   * 0.96x without a causal mask (bench/results/gpu-h200-30da0bd.md): a bucket's choice.
   * Fused (or single) only: split, 0.99x to 1.01x there, and its causal merge epilogue at
   * D = 64 spills 8 bytes with 128 registers (test_tune_candidates). (A spec whose rates'
   * lcm passes its segments' gcd cannot fuse: there this candidate plans split, and is
   * timed as such.) */
  if (cuda && wgmma && !sparse && n < cap) {
    c[n].tile_q = 64;
    c[n].fused_min_queries = multi ? fmins[0] : 0;
    c[n].cuda_mma = 6;
    n++;
  }
  return n;
}
