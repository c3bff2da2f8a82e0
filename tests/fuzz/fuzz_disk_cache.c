/* fuzz_disk_cache.c - libFuzzer target for the disk-cache entry reader (runtime/disk_cache.c):
 * an entry's <key>.json metadata and <key>.bin artifact as da__disk_cache_get and the
 * maintenance scan (`dilattn cache list`, `cache verify`, `cache clear`) read them.
 *
 * Input: byte 0 flags, bytes 1-2 the length J of the .json text (little endian, clamped),
 * then J bytes of .json, the rest the .bin. Flags: bit 0 write no .bin; bit 1 also drop
 * the same pair under a mismatched folder name and an over-long key (stray entries the
 * scan must survive); bit 2 store a fresh entry with da__disk_cache_put (then eviction
 * runs, DILATTN_CACHE_MAX_BYTES=1); bit 3 also mark the entry (and one that is not there) as
 * builds of a source key and look that source up (da__disk_cache_find_source: a hit must
 * return the .bin's bytes). The cache lives in a scratch folder under /dev/shm.
 * Sequence: get (verify, remove when corrupt), write again, scan verify=1 with a visitor,
 * write again, scan verify=0 with the visitor (`cache list`), scan remove_all (`clear`).
 * Any crash, sanitizer report or leak is a finding. Build: as fuzz_tuning_db.c.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ftw.h>

#include "runtime/disk_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static da__disk_cache *dc;
static char root[512];
static const char *arch = "sm_90";
static const char *key = "ab00000000000000000000000000000000000000000000000000000000000000";

static void put_file(const char *dir, const char *name, const void *d, size_t n) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) return;
  if (n) fwrite(d, 1, n, f);
  fclose(f);
}

static void write_entry(const uint8_t *js, size_t jn, const uint8_t *bin, size_t bn, int flags) {
  char dir[700], name[300];
  snprintf(dir, sizeof dir, "%s/%s", root, arch);
  mkdir(dir, 0700);
  snprintf(dir, sizeof dir, "%s/%s/ab", root, arch);
  mkdir(dir, 0700);
  snprintf(name, sizeof name, "%s.json", key);
  put_file(dir, name, js, jn);
  if (!(flags & 1)) {
    snprintf(name, sizeof name, "%s.bin", key);
    put_file(dir, name, bin, bn);
  }
  if (flags & 2) {
    snprintf(dir, sizeof dir, "%s/%s/zz", root, arch); /* folder does not match the key */
    mkdir(dir, 0700);
    snprintf(name, sizeof name, "%s.json", key);
    put_file(dir, name, js, jn);
    char longkey[200];
    memset(longkey, 'c', 126);
    longkey[126] = 0;
    snprintf(name, sizeof name, "%s.json", longkey);
    put_file(dir, name, js, jn);
  }
}

static void visit(void *user, const char *a, const char *k, uint64_t sz, int64_t mt, const char *json) {
  (void)sz, (void)mt;
  *(size_t *)user += strlen(a) + strlen(k) + strlen(json);
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(p) == 0 ? 0 : 0;
}

static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* the scratch cache goes when the process ends (replay.c runs it as a test) */
static void cleanup(void) {
  char base[600];
  snprintf(base, sizeof base, "%s", root);
  char *v1 = strrchr(base, '/'); /* root is <base>/v1 */
  if (v1) *v1 = '\0';
  rm_rf(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  if (!dc) {
    char base[300];
    snprintf(base, sizeof base, "%s/fz_dc_%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    setenv("DILATTN_CACHE_DIR", base, 1);
    setenv("DILATTN_CACHE_MAX_BYTES", "1", 1);
    dc = da__disk_cache_open();
    if (!dc || !da__disk_cache_usable(dc)) abort();
    snprintf(root, sizeof root, "%s", da__disk_cache_root(dc));
    atexit(cleanup);
  }
  const int flags = data[0];
  size_t jn = (size_t)data[1] | (size_t)data[2] << 8;
  if (jn > size - 3) jn = size - 3;
  const uint8_t *js = data + 3, *bin = js + jn;
  const size_t bn = size - 3 - jn;
  write_entry(js, jn, bin, bn, flags);
  char path[4400];
  void *got = NULL;
  size_t gn = 0;
  if (da__disk_cache_get(dc, arch, key, path, sizeof path, &got, &gn)) {
    if (gn != bn || (gn && memcmp(got, bin, gn))) abort(); /* a hit must return the .bin's bytes */
    free(got);
  }
  if (flags & 8) { /* markers: the entry's, and a stray one (no entry) */
    static const char *sk = "5500000000000000000000000000000000000000000000000000000000000000";
    char d[700], name[300];
    snprintf(d, sizeof d, "%s/%s/src", root, arch);
    mkdir(d, 0700);
    snprintf(d, sizeof d, "%s/%s/src/55", root, arch);
    mkdir(d, 0700);
    snprintf(name, sizeof name, "%s.%s", sk, key);
    put_file(d, name, "", 0);
    snprintf(name, sizeof name, "%s.cd%.62s", sk, key + 2);
    put_file(d, name, "", 0);
    got = NULL;
    const char *other = "ef00000000000000000000000000000000000000000000000000000000000000";
    if (da__disk_cache_find_source(dc, arch, other, sk, NULL, NULL, path, sizeof path, &got, &gn) == 1) {
      if (gn != bn || (gn && memcmp(got, bin, gn))) abort();
      free(got);
    }
  }
  size_t acc = 0;
  da__disk_cache_summary sum;
  write_entry(js, jn, bin, bn, flags);
  da__disk_cache_scan(dc, 1, 0, visit, &acc, &sum);
  write_entry(js, jn, bin, bn, flags);
  da__disk_cache_scan(dc, 0, 0, visit, &acc, &sum);
  if (flags & 4) da__disk_cache_put(dc, arch, key, bin, bn, NULL, "\"kernel\":\"fuzz\"", path, sizeof path);
  da__disk_cache_scan(dc, 0, 1, NULL, NULL, &sum);
  char a[700];
  snprintf(a, sizeof a, "%s/%s", root, arch);
  rm_rf(a); /* what the clear left (stray entries) */
  if (!da__disk_cache_usable(dc)) abort(); /* a put into a writable folder must not degrade */
  return 0;
}
