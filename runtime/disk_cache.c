/* disk_cache.c - on-disk kernel cache (DESIGN.md decision 5).
 * Layout: <root>/v1/<arch>/<first 2 hex of key>/<key>.bin  the artifact (.so or cubin)
 *                                              /<key>.json {"key","arch","size","sha256",...}
 *                                              /<key>.lock flock target for builders
 * Writes: temp file in the same folder, fsync, rename; the .json is written last and
 * commits the entry. Reads verify size and SHA-256 against the .json: a corrupt or
 * truncated entry is a miss (removed, logged), never an error. Eviction: least recently
 * used (mtime, refreshed on every hit) above DILATTN_CACHE_MAX_BYTES. Folders 0700.
 * Any write failure (unwritable folder, full disk) degrades to memory-only, once, with a
 * warning. Never paths, times or PTX in keys: keys come from gen/render.c. */
#define _GNU_SOURCE
#include "runtime/disk_cache.h"

#include "gen/render.h"
#include "runtime/fileio.h"
#include "runtime/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct da__disk_cache {
  char root[4096]; /* .../v1 */
  int usable;      /* set at open, then read only */
  int no_writes;   /* atomic: a put failed for a reason that lasts; lookups go on */
};

size_t da__disk_cache_base(char *base, size_t cap) {
  const char *env = getenv("DILATTN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n = 0;
  if (env && *env) n = snprintf(base, cap, "%s", env);
  else if (xdg && xdg[0] == '/') n = snprintf(base, cap, "%s/dilattn", xdg); /* a relative one is invalid (XDG spec) */
  else if (home && *home) n = snprintf(base, cap, "%s/.cache/dilattn", home);
  else if (cap) base[0] = '\0';
  return n < 0 ? SIZE_MAX : (size_t)n;
}

/* Whether this process has warned about the cache folder root already (once a folder:
 * every context opens the cache, and `dilattn run` makes two) */
static int warned_before(const char *root) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char last[sizeof ((da__disk_cache *)0)->root];
  pthread_mutex_lock(&mu);
  const int seen = !strcmp(last, root);
  if (!seen) snprintf(last, sizeof last, "%s", root);
  pthread_mutex_unlock(&mu);
  return seen;
}

da__disk_cache *da__disk_cache_open(void) {
  da__disk_cache *dc = calloc(1, sizeof *dc);
  if (!dc) return NULL;
  char base[DA_CACHE_BASE_MAX + 1];
  const size_t need = da__disk_cache_base(base, sizeof base);
  snprintf(dc->root, sizeof dc->root, "%s/v1", base);
  if (need > DA_CACHE_BASE_MAX) { /* (cut short, it named another folder, which was then made and filled) */
    if (!warned_before(dc->root))
      da__log(DA_LOG_WARN, "kernel cache: the folder's name is %zu characters long, past the %d its entries' paths "
            "allow (DILATTN_CACHE_DIR, XDG_CACHE_HOME or HOME); kernels are cached in memory only", need,
            DA_CACHE_BASE_MAX);
  } else if (!base[0]) {
    if (!warned_before(dc->root))
      da__log(DA_LOG_WARN, "kernel cache: no DILATTN_CACHE_DIR, XDG_CACHE_HOME or HOME; memory-only");
  } else if (da__mkdir_p(dc->root, 0700) != 0 || access(dc->root, W_OK | X_OK) != 0) {
    const int e = errno;
    if (!warned_before(dc->root))
      da__log(DA_LOG_WARN, "kernel cache: cannot use %s (%s); kernels are cached in memory only", dc->root,
              strerror(e));
  } else {
    dc->usable = 1;
  }
  return dc;
}

void da__disk_cache_close(da__disk_cache *dc) { free(dc); }
int da__disk_cache_usable(const da__disk_cache *dc) { return dc && dc->usable; }
int da__disk_cache_writable(const da__disk_cache *dc) {
  return da__disk_cache_usable(dc) && !__atomic_load_n(&dc->no_writes, __ATOMIC_RELAXED);
}
const char *da__disk_cache_root(const da__disk_cache *dc) { return dc ? dc->root : ""; }

uint64_t da__disk_cache_max_bytes(void) {
  const char *e = getenv("DILATTN_CACHE_MAX_BYTES");
  uint64_t v;
  if (e && *e) {
    if (da__parse_bytes(e, &v)) return v;
    static int told; /* once a process: it is read at every store */
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
      da__log(DA_LOG_WARN, "DILATTN_CACHE_MAX_BYTES=%s is not a number of bytes (e.g. 4294967296, 512M, 8G); using 4 GiB",
              e);
  }
  return 4ull << 30;
}

static int safe_name(const char *s) {
  if (!s || !*s || strlen(s) > 100) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

static void entry_path(const da__disk_cache *dc, const char *arch, const char *key, const char *ext, char *out,
                       size_t cap) {
  snprintf(out, cap, "%s/%s/%.2s/%s%s", dc->root, arch, key, key, ext);
}


/* Remove an entry's file p: 0 when it is gone (now or already). An empty folder in its place
 * goes too (a put could never rename the artifact onto it); anything else there stays. */
static int remove_file(const char *p) {
  if (unlink(p) == 0 || errno == ENOENT) return 0;
  return (errno == EISDIR || errno == EPERM) && rmdir(p) == 0 ? 0 : -1;
}

/* 0 when both files are gone (removed now or already), -1 when one stays. */
static int remove_entry(const da__disk_cache *dc, const char *arch, const char *key) {
  char p[4400];
  int rc = 0;
  entry_path(dc, arch, key, ".json", p, sizeof p);
  if (remove_file(p) != 0) rc = -1;
  entry_path(dc, arch, key, ".bin", p, sizeof p);
  if (remove_file(p) != 0) rc = -1;
  return rc;
}

/* Verify an entry: returns the artifact bytes (malloc'ed) or NULL with why set; on success
 * its .json's text (json_text) and parsed metadata (meta: the caller's to json_decref),
 * where asked for. */
static char *load_verified(const da__disk_cache *dc, const char *arch, const char *key, size_t *size,
                           const char **why, char **json_text, json_t **meta) {
  char jp[4400], bp[4400];
  entry_path(dc, arch, key, ".json", jp, sizeof jp);
  entry_path(dc, arch, key, ".bin", bp, sizeof bp);
  size_t jlen = 0, blen = 0;
  char *jt = da__read_file(jp, &jlen);
  *why = NULL;
  if (!jt) return NULL; /* no entry: a plain miss */
  json_t *j = json_loadb(jt, jlen, 0, NULL);
  const char *sum = j ? json_string_value(json_object_get(j, "sha256")) : NULL;
  json_int_t want = j ? json_integer_value(json_object_get(j, "size")) : -1;
  const char *jkey = j ? json_string_value(json_object_get(j, "key")) : NULL;
  char *bin = NULL;
  if (!sum || !jkey || strcmp(jkey, key) || want < 0) {
    *why = "unreadable metadata";
  } else if (!(bin = da__read_file(bp, &blen))) {
    *why = "artifact missing";
  } else if ((json_int_t)blen != want) {
    *why = "artifact truncated";
  } else {
    char hex[65];
    da__sha256_hex(bin, blen, hex);
    if (strcmp(hex, sum)) *why = "checksum mismatch";
  }
  if (*why || !meta) json_decref(j);
  else *meta = j;
  if (*why) {
    free(bin);
    free(jt);
    return NULL;
  }
  if (json_text) *json_text = jt;
  else free(jt);
  *size = blen;
  return bin;
}

/* <root>/<arch>/src/<2 hex>/<source_key>.<key>: an empty file that says entry key holds a
 * build of source_key (da__disk_cache_find_source lists the folder instead of every entry) */
static void marker_path(const da__disk_cache *dc, const char *arch, const char *source_key, const char *key, char *out,
                        size_t cap) {
  snprintf(out, cap, "%s/%s/src/%.2s/%s.%s", dc->root, arch, source_key, source_key, key);
}

/* Create the marker of (source_key, key): its folder again where a concurrent verify or
 * clear took it between the two (best effort: without it, only this compiler's own key
 * finds the entry, until a lookup of it puts it back) */
static void touch_marker(const da__disk_cache *dc, const char *arch, const char *source_key, const char *key) {
  char mp[4600], md[4600];
  marker_path(dc, arch, source_key, key, mp, sizeof mp);
  snprintf(md, sizeof md, "%s/%s/src/%.2s", dc->root, arch, source_key);
  for (int attempt = 0; attempt < 2; attempt++) {
    if (da__mkdir_p(md, 0700) != 0) return;
    const int fd = open(mp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      close(fd);
      return;
    }
    if (errno != ENOENT) return;
  }
}

/* Remove the marker of (source_key, key) where its entry is gone (what says so: its file at
 * path): only where that file is not there (ENOENT), and put back where a put wrote the
 * entry again meanwhile */
static void unmark_if_gone(const da__disk_cache *dc, const char *arch, const char *source_key, const char *key,
                           const char *path) {
  if (access(path, F_OK) == 0 || errno != ENOENT) return;
  char mp[4600];
  marker_path(dc, arch, source_key, key, mp, sizeof mp);
  unlink(mp);
  if (access(path, F_OK) == 0) touch_marker(dc, arch, source_key, key);
}

static int lookup(da__disk_cache *dc, const char *arch, const char *key, char *path, size_t cap, void **data,
                  size_t *size, int remove_corrupt) {
  if (!da__disk_cache_usable(dc) || !safe_name(arch) || !safe_name(key)) return 0;
  const char *why;
  size_t n = 0;
  json_t *j = NULL;
  char *bin = load_verified(dc, arch, key, &n, &why, NULL, &j);
  if (bin) { /* the marker of its source, where a race with verify or eviction lost it */
    const char *sk = json_string_value(json_object_get(j, "source_key"));
    char mp[4600];
    if (sk && da__is_hex(sk, 64)) {
      marker_path(dc, arch, sk, key, mp, sizeof mp);
      if (access(mp, F_OK) != 0) touch_marker(dc, arch, sk, key);
    }
    json_decref(j);
  }
  if (!bin) {
    if (why && !remove_corrupt) return -1;
    if (why) {
      da__log(DA_LOG_WARN, "kernel cache: entry %s/%s is corrupt (%s); removed, it will be rebuilt", arch, key, why);
      remove_entry(dc, arch, key);
    }
    return 0;
  }
  char bp[4400];
  entry_path(dc, arch, key, ".bin", bp, sizeof bp);
  utimensat(AT_FDCWD, bp, NULL, 0); /* LRU: refresh */
  if (path) snprintf(path, cap, "%s", bp);
  if (data) {
    *data = bin;
    if (size) *size = n;
  } else {
    free(bin);
  }
  return 1;
}


int da__disk_cache_get(da__disk_cache *dc, const char *arch, const char *key, char *path, size_t cap,
                       void **data, size_t *size) {
  return lookup(dc, arch, key, path, cap, data, size, 1);
}

int da__disk_cache_peek(da__disk_cache *dc, const char *arch, const char *key, char *path, size_t cap,
                        void **data, size_t *size) {
  return lookup(dc, arch, key, path, cap, data, size, 0);
}

static void evict(da__disk_cache *dc, const char *keep_key);

int da__disk_cache_put(da__disk_cache *dc, const char *arch, const char *key, const void *data, size_t size,
                       const char *source_key, const char *meta, char *path, size_t cap) {
  if (!da__disk_cache_writable(dc) || !safe_name(arch) || !safe_name(key)) return -1;
  if (source_key && !da__is_hex(source_key, 64)) source_key = NULL;
  char dir[4300], bp[4400], jp[4400];
  snprintf(dir, sizeof dir, "%s/%s/%.2s", dc->root, arch, key);
  entry_path(dc, arch, key, ".bin", bp, sizeof bp);
  entry_path(dc, arch, key, ".json", jp, sizeof jp);
  char hex[65];
  da__sha256_hex(data, size, hex);
  char *json = NULL;
  int n = asprintf(&json, "{\"key\":\"%s\",\"arch\":\"%s\",\"size\":%zu,\"sha256\":\"%s\",\"created\":%lld,"
                          "\"library\":\"%s\",\"schema\":%d%s%s%s%s%s}\n",
                   key, arch, size, hex, (long long)time(NULL), DA_VERSION_STRING, DA_CACHE_SCHEMA_VERSION,
                   source_key ? ",\"source_key\":\"" : "", source_key ? source_key : "", source_key ? "\"" : "",
                   meta ? "," : "", meta ? meta : "");
  if (n < 0) return -1;
  int rc = -1, e = 0;
  const char *failed = dir; /* (the warning names what could not be written) */
  /* ENOENT: the folder went meanwhile (`dilattn cache clear` in another process): once more */
  for (int attempt = 0; attempt < 2 && rc != 0 && (attempt == 0 || e == ENOENT); attempt++) {
    failed = dir;
    if (da__mkdir_p(dir, 0700) == 0 && (failed = bp, da__write_file_atomic(bp, data, size, 0600) == 0) &&
        (failed = jp, da__write_file_atomic(jp, json, strlen(json), 0600) == 0))
      rc = 0;
    else
      e = errno;
  }
  free(json);
  if (rc != 0) {
    unlink(bp);
    /* no more writes (each would fail and warn the same), but the entries there still serve */
    if (!__atomic_exchange_n(&dc->no_writes, 1, __ATOMIC_RELAXED))
      da__log(DA_LOG_WARN, "kernel cache: cannot write %s (%s); new kernels are cached in memory only (those on disk "
              "still load)", failed, strerror(e));
    return -1;
  }
  if (path) snprintf(path, cap, "%s", bp);
  if (source_key) touch_marker(dc, arch, source_key, key);
  evict(dc, key);
  return 0;
}

int da__disk_cache_lock(da__disk_cache *dc, const char *arch, const char *key) {
  if (!da__disk_cache_usable(dc) || !safe_name(arch) || !safe_name(key)) return -1;
  char dir[4300], lp[4400];
  snprintf(dir, sizeof dir, "%s/%s/%.2s", dc->root, arch, key);
  if (da__mkdir_p(dir, 0700) != 0) return -1;
  entry_path(dc, arch, key, ".lock", lp, sizeof lp);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  return fd;
}

void da__disk_cache_unlock(int fd) {
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
}

/* ---- scanning, eviction, maintenance ---------------------------------------------- */

typedef struct {
  char arch[128], key[128];
  char sub[4]; /* the folder it was found in: the key's first two characters, unless misplaced */
  uint64_t size;
  int64_t mtime, mtime_ns;
} entry_t;

/* Where a collected entry's file with extension ext is: the folder it was found in */
static void found_path(const da__disk_cache *dc, const entry_t *e, const char *ext, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s/%s/%s%s", dc->root, e->arch, e->sub, e->key, ext);
}

/* remove_entry for a collected entry, where it was found (a misplaced one too) */
static int remove_found(const da__disk_cache *dc, const entry_t *e) {
  char p[4700];
  int rc = 0;
  found_path(dc, e, ".json", p, sizeof p);
  if (remove_file(p) != 0) rc = -1;
  found_path(dc, e, ".bin", p, sizeof p);
  if (remove_file(p) != 0) rc = -1;
  return rc;
}

/* An entry outside the folder its key names (da__disk_cache_get never looks there) */
static int misplaced(const entry_t *e) { return strncmp(e->sub, e->key, 2) != 0; }

/* a folder itself, not a link to one (the scan removes what it finds: never through a
 * link out of the cache) */
static int real_dir(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Collect every committed entry (a .json) under root: <arch>/<2 hex>/<64 hex>.json, real
 * folders and files only (what da__disk_cache_put writes; anything else is not ours). */
static entry_t *collect(const da__disk_cache *dc, size_t *count) {
  size_t n = 0, capn = 64;
  entry_t *v = malloc(capn * sizeof *v);
  DIR *d0 = v ? opendir(dc->root) : NULL;
  struct dirent *a;
  while (d0 && (a = readdir(d0))) {
    if (a->d_name[0] == '.' || !safe_name(a->d_name)) continue;
    char p1[4400];
    if (snprintf(p1, sizeof p1, "%s/%s", dc->root, a->d_name) >= (int)sizeof p1 || !real_dir(p1)) continue;
    DIR *d1 = opendir(p1);
    struct dirent *b;
    while (d1 && (b = readdir(d1))) {
      if (!da__is_hex(b->d_name, 2)) continue;
      char p2[4500];
      if (snprintf(p2, sizeof p2, "%s/%s", p1, b->d_name) >= (int)sizeof p2 || !real_dir(p2)) continue;
      DIR *d2 = opendir(p2);
      struct dirent *c;
      while (d2 && (c = readdir(d2))) {
        size_t len = strlen(c->d_name);
        char keyname[65];
        if (len != 69 || strcmp(c->d_name + 64, ".json")) continue;
        memcpy(keyname, c->d_name, 64);
        keyname[64] = '\0';
        char jpath[4700];
        struct stat jst;
        snprintf(jpath, sizeof jpath, "%s/%.69s", p2, c->d_name);
        if (!da__is_hex(keyname, 64) || lstat(jpath, &jst) != 0 || !S_ISREG(jst.st_mode)) continue;
        if (n == capn) {
          entry_t *nv = realloc(v, 2 * capn * sizeof *v);
          if (!nv) break;
          v = nv;
          capn *= 2;
        }
        entry_t *e = &v[n];
        snprintf(e->arch, sizeof e->arch, "%.100s", a->d_name);
        memcpy(e->sub, b->d_name, 2);
        e->sub[2] = '\0';
        memcpy(e->key, c->d_name, len - 5);
        e->key[len - 5] = '\0';
        char bp[4700];
        snprintf(bp, sizeof bp, "%s/%.127s.bin", p2, e->key);
        struct stat st;
        int have = stat(bp, &st) == 0;
        e->size = have ? (uint64_t)st.st_size : 0;
        e->mtime = have ? (int64_t)st.st_mtim.tv_sec : 0;
        e->mtime_ns = have ? (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec : 0;
        n++;
      }
      if (d2) closedir(d2);
    }
    if (d1) closedir(d1);
  }
  if (d0) closedir(d0);
  *count = n;
  return v;
}

static int by_mtime(const void *x, const void *y) {
  const entry_t *a = x, *b = y;
  return a->mtime_ns < b->mtime_ns ? -1 : a->mtime_ns > b->mtime_ns;
}

/* The marker of a collected entry's source (where its .json names one) */
static void remove_marker(const da__disk_cache *dc, const entry_t *e) {
  char jp[4700], mp[4700];
  size_t jl = 0;
  found_path(dc, e, ".json", jp, sizeof jp);
  char *jt = da__read_file(jp, &jl);
  json_t *j = jt ? json_loadb(jt, jl, 0, NULL) : NULL;
  const char *sk = j ? json_string_value(json_object_get(j, "source_key")) : NULL;
  if (sk && da__is_hex(sk, 64) && !misplaced(e)) {
    marker_path(dc, e->arch, sk, e->key, mp, sizeof mp);
    unlink(mp);
  }
  json_decref(j);
  free(jt);
}

static void evict(da__disk_cache *dc, const char *keep_key) {
  uint64_t max = da__disk_cache_max_bytes();
  size_t n = 0;
  entry_t *v = collect(dc, &n);
  if (!v) return;
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += v[i].size;
  if (total > max) {
    qsort(v, n, sizeof *v, by_mtime);
    for (size_t i = 0; i < n && total > max; i++) {
      if (!strcmp(v[i].key, keep_key)) continue;
      remove_marker(dc, &v[i]);
      remove_found(dc, &v[i]);
      total -= v[i].size;
      da__log(DA_LOG_INFO, "kernel cache: evicted %s/%s (%llu bytes) to stay within %llu bytes", v[i].arch,
              v[i].key, (unsigned long long)v[i].size, (unsigned long long)max);
    }
  }
  free(v);
}

typedef struct {
  char key[65];
  int64_t mtime_ns;
} source_hit;

static int by_mtime_desc(const void *x, const void *y) {
  const source_hit *a = x, *b = y;
  return a->mtime_ns > b->mtime_ns ? -1 : a->mtime_ns < b->mtime_ns;
}

int da__disk_cache_find_source(da__disk_cache *dc, const char *arch, const char *key, const char *source_key,
                               da__artifact_accept accept, void *user, char *path, size_t cap, void **data,
                               size_t *size) {
  if (!da__disk_cache_usable(dc) || !safe_name(arch) || !source_key || !da__is_hex(source_key, 64)) return 0;
  char md[4400];
  snprintf(md, sizeof md, "%s/%s/src/%.2s", dc->root, arch, source_key);
  DIR *d = opendir(md);
  if (!d) return 0;
  size_t n = 0, capn = 0;
  source_hit *v = NULL;
  struct dirent *e;
  while ((e = readdir(d))) { /* <source_key>.<key> */
    if (strlen(e->d_name) != 129 || strncmp(e->d_name, source_key, 64) || e->d_name[64] != '.' ||
        !da__is_hex(e->d_name + 65, 64) || !strcmp(e->d_name + 65, key))
      continue;
    char bp[4400];
    struct stat st;
    entry_path(dc, arch, e->d_name + 65, ".bin", bp, sizeof bp);
    if (stat(bp, &st) != 0) { /* the entry is gone (evicted, cleared): so goes its marker */
      unmark_if_gone(dc, arch, source_key, e->d_name + 65, bp);
      continue;
    }
    if (n == capn) {
      source_hit *nv = realloc(v, (capn = capn ? 2 * capn : 8) * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    snprintf(v[n].key, sizeof v[n].key, "%s", e->d_name + 65);
    v[n++].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  }
  closedir(d);
  if (n) qsort(v, n, sizeof *v, by_mtime_desc);
  int found = 0;
  for (size_t i = 0; i < n && found <= 0; i++) { /* newest first */
    const char *why;
    size_t sz = 0;
    json_t *j = NULL;
    char *bin = load_verified(dc, arch, v[i].key, &sz, &why, NULL, &j);
    const char *sk = j ? json_string_value(json_object_get(j, "source_key")) : NULL;
    const char *cc = j ? json_string_value(json_object_get(j, "compiler")) : NULL;
    char bp[4400];
    entry_path(dc, arch, v[i].key, ".bin", bp, sizeof bp);
    char jp[4400];
    entry_path(dc, arch, v[i].key, ".json", jp, sizeof jp);
    if (!bin && why && access(jp, F_OK) != 0 && errno == ENOENT) {
      /* evicted meanwhile (its .json goes first): a plain miss, not a corrupt build */
    } else if (!bin) { /* corrupt: left to its own lookups (under its lock) */
      if (why) {
        da__log(DA_LOG_WARN, "kernel cache: entry %s/%s, a build of the same source by another compiler, is corrupt "
                             "(%s): not taken", arch, v[i].key, why);
        found = -1;
      }
    } else if (!sk || strcmp(sk, source_key)) { /* (a marker that does not say what the entry does) */
      char mp[4600];
      marker_path(dc, arch, source_key, v[i].key, mp, sizeof mp);
      unlink(mp);
    } else if (!accept || accept(user, bp, cc ? cc : "", bin, sz)) {
      found = 1;
      utimensat(AT_FDCWD, bp, NULL, 0); /* LRU: refresh */
      if (path) snprintf(path, cap, "%s", bp);
      if (data) {
        *data = bin, bin = NULL;
        if (size) *size = sz;
      }
    } else {
      found = -1;
    }
    json_decref(j);
    free(bin);
  }
  free(v);
  return found;
}

/* fn(dc, arch, folder, name, user) for every name in the folders <root>/<arch>/<sub><2 hex>
 * (sub: "" for the entries' folders, "src/" for the markers'), real folders only; each such
 * folder, and <root>/<arch>/<sub>, removed after where it is left empty */
typedef void (*file_fn)(const da__disk_cache *dc, const char *arch, const char *dir, const char *name, void *user);
static void walk_files(const da__disk_cache *dc, const char *sub, file_fn fn, void *user) {
  DIR *d0 = opendir(dc->root);
  struct dirent *a;
  while (d0 && (a = readdir(d0))) {
    char p1[4400];
    if (a->d_name[0] == '.' || !safe_name(a->d_name) ||
        snprintf(p1, sizeof p1, "%s/%s/%s", dc->root, a->d_name, sub) >= (int)sizeof p1 || !real_dir(p1))
      continue;
    DIR *d1 = opendir(p1);
    struct dirent *b;
    while (d1 && (b = readdir(d1))) {
      char p2[4500];
      if (!da__is_hex(b->d_name, 2) || snprintf(p2, sizeof p2, "%s/%s", p1, b->d_name) >= (int)sizeof p2 ||
          !real_dir(p2))
        continue;
      DIR *d2 = opendir(p2);
      struct dirent *c;
      while (d2 && (c = readdir(d2))) fn(dc, a->d_name, p2, c->d_name, user);
      if (d2) closedir(d2);
      rmdir(p2); /* (where empty) */
    }
    if (d1) closedir(d1);
    if (*sub) rmdir(p1);
  }
  if (d0) closedir(d0);
}

/* A marker (marker_path) whose entry is gone, or any where *all */
static void prune_marker(const da__disk_cache *dc, const char *arch, const char *dir, const char *name, void *all) {
  if (strlen(name) != 129 || name[64] != '.' || !da__is_hex(name + 65, 64)) return;
  char jp[4400], mp[4800];
  entry_path(dc, arch, name + 65, ".json", jp, sizeof jp);
  snprintf(mp, sizeof mp, "%s/%s", dir, name);
  if (*(const int *)all) {
    unlink(mp);
  } else { /* (its entry gone: ENOENT alone; put back where a put wrote it again meanwhile) */
    char sk[65];
    snprintf(sk, sizeof sk, "%.64s", name);
    unmark_if_gone(dc, arch, sk, name + 65, jp);
  }
}

/* The lock file of a key without an entry (a process that could not compile leaves one), for
 * a clear: a process holding one keeps its lock on the file it opened */
static void remove_orphan_lock(const da__disk_cache *dc, const char *arch, const char *dir, const char *name,
                               void *user) {
  (void)dc, (void)arch, (void)user;
  char k[65];
  snprintf(k, sizeof k, "%.64s", name);
  if (strlen(name) != 69 || strcmp(name + 64, ".lock") || !da__is_hex(k, 64)) return;
  char jp[4800], lp[4800];
  snprintf(jp, sizeof jp, "%s/%s.json", dir, k);
  snprintf(lp, sizeof lp, "%s/%s", dir, name);
  if (access(jp, F_OK) != 0 && errno == ENOENT) unlink(lp);
}

void da__disk_cache_scan(da__disk_cache *dc, int verify, int remove_all, da__disk_cache_visit visit, void *user,
                         da__disk_cache_summary *sum) {
  memset(sum, 0, sizeof *sum);
  if (!dc || !dc->root[0]) return;
  size_t n = 0;
  entry_t *v = collect(dc, &n);
  if (!v) return;
  for (size_t i = 0; i < n; i++) {
    entry_t *e = &v[i];
    char *json = NULL;
    if (misplaced(e)) { /* no lookup finds it: not an entry; verify and clear take it away */
      if (verify || remove_all) {
        if (verify) sum->corrupt++;
        const int gone = remove_found(dc, e) == 0;
        da__log(DA_LOG_WARN, "kernel cache: %s/%s/%s.json lies outside the folder its key names; %s", e->arch, e->sub,
                e->key, gone ? "removed" : "could not be removed");
        if (gone) sum->removed++, sum->removed_bytes += remove_all ? e->size : 0;
      }
      continue;
    }
    if (verify) {
      const char *why = NULL;
      size_t sz;
      char *bin = load_verified(dc, e->arch, e->key, &sz, &why, &json, NULL);
      int fd = -1;
      if (!bin) { /* again under the entry's lock: a process rewriting it holds that, and its
                     new .bin comes before its .json */
        fd = da__disk_cache_lock(dc, e->arch, e->key);
        bin = load_verified(dc, e->arch, e->key, &sz, &why, &json, NULL);
      }
      free(bin);
      if (!bin && !why) { /* no .json now: removed meanwhile (evicted by another process), not corrupt */
        da__disk_cache_unlock(fd);
        continue;
      }
      if (!bin) {
        sum->corrupt++;
        const int gone = remove_entry(dc, e->arch, e->key) == 0;
        da__disk_cache_unlock(fd);
        da__log(DA_LOG_WARN, "kernel cache: entry %s/%s is corrupt (%s); %s", e->arch, e->key, why ? why : "unreadable",
                gone ? "removed" : "could not be removed");
        if (gone) sum->removed++;
        continue;
      }
      da__disk_cache_unlock(fd);
    } else {
      char jp[4400];
      size_t jl;
      entry_path(dc, e->arch, e->key, ".json", jp, sizeof jp);
      json = da__read_file(jp, &jl);
    }
    sum->entries++;
    sum->bytes += e->size;
    if (visit) visit(user, e->arch, e->key, e->size, e->mtime, json ? json : "{}");
    free(json);
    if (remove_all && remove_entry(dc, e->arch, e->key) == 0) { /* counted where it went */
      char lp[4400];
      entry_path(dc, e->arch, e->key, ".lock", lp, sizeof lp);
      unlink(lp);
      sum->removed++;
      sum->removed_bytes += e->size;
    }
  }
  free(v);
  if (verify || remove_all) walk_files(dc, "src/", prune_marker, &remove_all);
  if (remove_all) walk_files(dc, "", remove_orphan_lock, NULL);
}
