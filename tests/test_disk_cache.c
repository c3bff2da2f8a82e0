/* test_disk_cache.c - the on-disk kernel cache (DESIGN.md decision 5): round trip; a
 * bit-flipped, truncated or half-written entry is detected, removed and rebuilt, never
 * loaded; the size budget evicts the least recently used; an unusable folder and a full
 * disk degrade to memory-only with a warning and plans still work; 8 processes asking
 * for the same 4 new kernels at once compile each kernel once and all succeed; a warm
 * plan in a new context comes from disk without compiling.
 * Run: build/tests/test_disk_cache   (ctest -R disk_cache) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/disk_cache.h"
#include "runtime/fileio.h"
#include "runtime/kernel_cache.h"
#include "test_util.h"

static char base[] = "/tmp/dilattn-dc-XXXXXX";

static void use_dir(const char *sub) {
  char d[512];
  snprintf(d, sizeof d, "%s/%s", base, sub);
  setenv("DILATTN_CACHE_DIR", d, 1);
}

static int count_files(const char *dir, const char *suffix) {
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "find %s -type f -name '*%s' 2>/dev/null | wc -l", dir, suffix);
  FILE *p = popen(cmd, "r");
  int n = 0;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

static void test_roundtrip_and_corruption(void) {
  use_dir("rt");
  da__disk_cache *dc = da__disk_cache_open();
  TU_CHECK(da__disk_cache_usable(dc), "fresh cache folder not usable");
  struct stat st;
  TU_CHECK(stat(da__disk_cache_root(dc), &st) == 0 && (st.st_mode & 0777) == 0700, "cache folder is not 0700");
  char data[5000], path[4400];
  for (int i = 0; i < 5000; i++) data[i] = (char)(i * 7);
  const char *key = "aa11111111111111111111111111111111111111111111111111111111111111";
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0, "hit on an empty cache");
  TU_CHECK(da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, "\"kernel\":\"k\"", path, sizeof path) == 0, "put");
  void *got = NULL;
  size_t n = 0;
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, &got, &n) == 1 && n == sizeof data &&
               memcmp(got, data, n) == 0,
           "round trip");
  free(got);
  TU_CHECK(strstr(path, "/v1/host/aa/") != NULL, "layout: %s", path);
  /* bit flip */
  int fd = open(path, O_WRONLY);
  TU_CHECK(pwrite(fd, "\x55", 1, 1234) == 1, "flip");
  close(fd);
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0, "bit-flipped entry was a hit");
  TU_CHECK(access(path, F_OK) != 0, "corrupt entry not removed");
  /* truncation */
  da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, NULL, path, sizeof path);
  TU_CHECK(truncate(path, 100) == 0, "truncate");
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0, "truncated entry was a hit");
  /* half-written: artifact without its .json commit marker, and garbage metadata */
  da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, NULL, path, sizeof path);
  char jp[4400];
  snprintf(jp, sizeof jp, "%.*s.json", (int)(strlen(path) - 4), path);
  unlink(jp);
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0, "entry without .json was a hit");
  da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, NULL, path, sizeof path);
  FILE *f = fopen(jp, "w");
  fputs("{not json", f);
  fclose(f);
  TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0, "garbage .json was a hit");
  /* names that could escape the folder are refused */
  TU_CHECK(da__disk_cache_put(dc, "../x", key, data, 10, NULL, NULL, path, sizeof path) != 0, "arch ../x accepted");
  TU_CHECK(da__disk_cache_put(dc, "host", "../../etc", data, 10, NULL, NULL, path, sizeof path) != 0, "key ../../etc accepted");
  da__disk_cache_close(dc);
}

/* An entry outside the folder its key names (a copy by hand, say): no lookup finds it,
 * stats and list leave it out, verify and clear remove it from where it is (they counted
 * it removed and left it, and clear then failed on every run). What is not laid out as
 * an entry (a folder not of two hex digits, a link out of the cache) the scan leaves
 * alone: through a link, clear deleted files outside the cache. */
static void test_misplaced(void) {
  use_dir("mp");
  da__disk_cache *dc = da__disk_cache_open();
  const char *key = "ab00000000000000000000000000000000000000000000000000000000000000";
  char dir[4400], jp[4600], bp[4600], cmd[14000];
  /* outside the cache: a folder of files named like entries, linked in three ways */
  char outside[600], keep[4800];
  snprintf(outside, sizeof outside, "%s/outside", base);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/ab %s/sm_90/cd && touch %s/package.json %s/ab/%s.json %s/ab/%s.bin && "
           "mkdir -p %s/sm_90 && ln -s %s %s/sm_90/zz && ln -s %s/ab %s/sm_90/ab && ln -s %s %s/arch2",
           outside, da__disk_cache_root(dc), outside, outside, key, outside, key, da__disk_cache_root(dc), outside,
           da__disk_cache_root(dc), outside, da__disk_cache_root(dc), outside, da__disk_cache_root(dc));
  TU_CHECK(system(cmd) == 0, "setting up links");
  for (int pass = 0; pass < 2; pass++) { /* verify, then clear */
    snprintf(dir, sizeof dir, "%s/sm_90/cd", da__disk_cache_root(dc));
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    TU_CHECK(system(cmd) == 0, "mkdir");
    snprintf(jp, sizeof jp, "%s/%s.json", dir, key);
    snprintf(bp, sizeof bp, "%s/%s.bin", dir, key);
    FILE *f = fopen(jp, "w");
    fputs("{}\n", f);
    fclose(f);
    f = fopen(bp, "w");
    fputs("x", f);
    fclose(f);
    da__disk_cache_summary sum;
    da__disk_cache_scan(dc, 0, 0, NULL, NULL, &sum);
    TU_CHECK(sum.entries == 0, "stats counted a misplaced entry: %llu", (unsigned long long)sum.entries);
    da__disk_cache_scan(dc, pass == 0, pass == 1, NULL, NULL, &sum);
    TU_CHECK(sum.removed == 1 && (pass == 1 || sum.corrupt == 1), "%s: removed %llu corrupt %llu",
             pass ? "clear" : "verify", (unsigned long long)sum.removed, (unsigned long long)sum.corrupt);
    TU_CHECK(access(jp, F_OK) != 0 && access(bp, F_OK) != 0, "%s left the misplaced entry", pass ? "clear" : "verify");
    da__disk_cache_scan(dc, 0, 0, NULL, NULL, &sum);
    TU_CHECK(sum.entries == 0, "entries after %s: %llu", pass ? "clear" : "verify", (unsigned long long)sum.entries);
  }
  const char *names[] = {"package.json", "ab/ab00000000000000000000000000000000000000000000000000000000000000.json",
                         "ab/ab00000000000000000000000000000000000000000000000000000000000000.bin"};
  for (int i = 0; i < 3; i++) {
    snprintf(keep, sizeof keep, "%s/%s", outside, names[i]);
    TU_CHECK(access(keep, F_OK) == 0, "a file outside the cache, behind a link, was removed: %s", keep);
  }
  /* an empty folder where an entry's .bin goes: verify takes the entry, folder and all, and a
   * put of that key then works (the folder stayed, "could not be removed", and every put of
   * the key turned the cache memory-only) */
  snprintf(dir, sizeof dir, "%s/sm_90/ab", da__disk_cache_root(dc));
  snprintf(jp, sizeof jp, "%s/%s.json", dir, key);
  snprintf(bp, sizeof bp, "%s/%s.bin", dir, key);
  snprintf(cmd, sizeof cmd, "rm -f %s/sm_90/ab && mkdir -p %s && echo '{}' > %s", da__disk_cache_root(dc), bp, jp);
  TU_CHECK(system(cmd) == 0, "a folder at the .bin's path");
  da__disk_cache_summary sum;
  da__disk_cache_scan(dc, 1, 0, NULL, NULL, &sum);
  TU_CHECK(sum.corrupt == 1 && sum.removed == 1 && access(bp, F_OK) != 0 && access(jp, F_OK) != 0,
           "verify of an entry whose .bin is a folder: corrupt %llu removed %llu", (unsigned long long)sum.corrupt,
           (unsigned long long)sum.removed);
  char path[4400];
  TU_CHECK(da__disk_cache_put(dc, "sm_90", key, "x", 1, NULL, NULL, path, sizeof path) == 0 && da__disk_cache_usable(dc),
           "a put where the folder was");
  /* the lock file of a key that never had an entry (a process that could not compile it):
   * a clear takes it (they stayed) */
  const char *lk = "cd00000000000000000000000000000000000000000000000000000000000000";
  da__disk_cache_unlock(da__disk_cache_lock(dc, "sm_90", lk));
  snprintf(path, sizeof path, "%s/sm_90/cd/%s.lock", da__disk_cache_root(dc), lk);
  TU_CHECK(access(path, F_OK) == 0, "the lock file");
  da__disk_cache_scan(dc, 0, 1, NULL, NULL, &sum);
  TU_CHECK(access(path, F_OK) != 0, "clear left the lock file of a key without an entry");
  da__disk_cache_close(dc);
}

/* DILATTN_CACHE_MAX_BYTES: bytes with K / M / G / T as DILATTN_WORKSPACE_LIMIT takes them;
 * anything else (a sign, spaces, junk, 2^64 bytes and more) the default, 4 GiB */
static void test_budget_text(void) {
  static const struct {
    const char *text;
    uint64_t bytes;
  } cases[] = {{"3500", 3500},       {"0", 0},          {"512M", 512ull << 20}, {"2GiB", 2ull << 30}, {"7kb", 7168},
               {"-5", 4ull << 30},   {" 5", 4ull << 30}, {"+5", 4ull << 30},     {"5 ", 4ull << 30},  {"12X", 4ull << 30},
               {"18446744073709551616", 4ull << 30},    {"0x10", 4ull << 30},    {"", 4ull << 30}};
  /* (stderr into a file: a malformed value is said once a process, not at every store) */
  char errf[600];
  snprintf(errf, sizeof errf, "%s/budget-stderr", base);
  fflush(stderr);
  const int saved = dup(2), fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    setenv("DILATTN_CACHE_MAX_BYTES", cases[i].text, 1);
    const uint64_t got = da__disk_cache_max_bytes();
    TU_CHECK(got == cases[i].bytes, "DILATTN_CACHE_MAX_BYTES=\"%s\": %llu bytes, %llu expected", cases[i].text,
             (unsigned long long)got, (unsigned long long)cases[i].bytes);
  }
  fflush(stderr);
  dup2(saved, 2), close(saved), close(fd);
  unsetenv("DILATTN_CACHE_MAX_BYTES");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "test $(grep -c 'is not a number of bytes' %s) -eq 1", errf);
  TU_CHECK(system(cmd) == 0, "a malformed DILATTN_CACHE_MAX_BYTES is said more than once a process (%s)", errf);
}

static void test_budget(void) {
  use_dir("budget");
  setenv("DILATTN_CACHE_MAX_BYTES", "3500", 1);
  da__disk_cache *dc = da__disk_cache_open();
  char data[1000] = {0}, path[4400], key[65];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "%02d%062d", i, 0);
    TU_CHECK(da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, NULL, path, sizeof path) == 0, "put %d", i);
    if (i == 2) { /* use entry 0: it becomes the most recently used */
      snprintf(key, sizeof key, "%02d%062d", 0, 0);
      usleep(20000);
      TU_CHECK(da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 1, "entry 0 evicted early");
    }
    usleep(20000);
  }
  int present[5];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "%02d%062d", i, 0);
    present[i] = da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL);
  }
  TU_CHECK(present[0] && !present[1] && !present[2] && present[3] && present[4],
           "LRU eviction kept %d%d%d%d%d, want 10011", present[0], present[1], present[2], present[3], present[4]);
  unsetenv("DILATTN_CACHE_MAX_BYTES");
  da__disk_cache_close(dc);
}

static da_spec spec_n(int i) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 16 + 8 * i;
  s.segment_lengths[1] = 64;
  s.dilation_rates[0] = 1;
  s.dilation_rates[1] = 2;
  s.num_heads = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  return s;
}

/* Create a plan for spec_n(i) and run it on a tiny input; returns 1 on success. */
static int plan_works(da_context *ctx, int i) {
  da_spec s = spec_n(i);
  da_plan *p = NULL;
  if (da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) != DA_OK) return 0;
  float q[64 * 2 * 8], out[64 * 2 * 8], lse[2 * 64];
  for (int j = 0; j < 64 * 16; j++) q[j] = (float)(j % 13) / 13.0f;
  da_args a;
  da_args_init(&a, &s, 1, 64, q, q, q, out, lse);
  int ok = da_plan_execute(p, &a) == DA_OK && out[5] == out[5];
  da_plan_destroy(p);
  return ok;
}

static void test_plan_level(void) {
  use_dir("plans");
  da_context *c1, *c2, *c3;
  da_context_create(&c1);
  da_kernel_cache_stats ks;
  TU_CHECK(da_context_kernel_cache_stats(c1, &ks) == DA_OK && ks.loaded == 0 && ks.builds == 0 && ks.build_ms == 0,
           "a new context's kernel stats: %llu loaded, %llu builds", (unsigned long long)ks.loaded,
           (unsigned long long)ks.builds);
  TU_CHECK(plan_works(c1, 0), "cold plan");
  TU_CHECK(da__context_kernels(c1)->builds == 1, "cold plan did not compile");
  /* the public counters say the same (a program checks builds == 0 after loading) */
  TU_CHECK(da_context_kernel_cache_stats(c1, &ks) == DA_OK && ks.loaded == 1 && ks.builds == 1 && ks.disk_hits == 0 &&
               ks.bundle_hits == 0 && ks.build_ms > 0,
           "cold plan's stats: %llu loaded, %llu builds (%.1f ms), %llu disk hits", (unsigned long long)ks.loaded,
           (unsigned long long)ks.builds, ks.build_ms, (unsigned long long)ks.disk_hits);
  TU_CHECK(plan_works(c1, 0), "the same plan again");
  TU_CHECK(da_context_kernel_cache_stats(c1, &ks) == DA_OK && ks.loaded == 1 && ks.builds == 1,
           "a second plan of one spec had its kernel again: %llu loaded, %llu builds", (unsigned long long)ks.loaded,
           (unsigned long long)ks.builds);
  TU_CHECK(da_context_kernel_cache_stats(NULL, &ks) == DA_ERR_INVALID_ARGUMENT &&
               da_context_kernel_cache_stats(c1, NULL) == DA_ERR_INVALID_ARGUMENT,
           "NULL arguments to da_context_kernel_cache_stats");
  da_context_destroy(c1);
  da_context_create(&c2);
  TU_CHECK(plan_works(c2, 0), "warm plan");
  TU_CHECK(da__context_kernels(c2)->builds == 0 && da__context_kernels(c2)->disk_hits == 1,
           "warm plan in a new context compiled (builds %lld, disk hits %lld)", da__context_kernels(c2)->builds,
           da__context_kernels(c2)->disk_hits);
  TU_CHECK(da_context_kernel_cache_stats(c2, &ks) == DA_OK && ks.loaded == 1 && ks.builds == 0 && ks.disk_hits == 1 &&
               ks.build_ms == 0,
           "warm plan's stats: %llu loaded, %llu builds, %llu disk hits", (unsigned long long)ks.loaded,
           (unsigned long long)ks.builds, (unsigned long long)ks.disk_hits);
  da_context_destroy(c2);
  /* flip a byte of the stored shared object: the next context rebuilds, never loads it */
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "f=$(find %s/plans -name '*.bin' | head -1); printf 'Z' | dd of=$f bs=1 seek=4000 conv=notrunc 2>/dev/null", base);
  TU_CHECK(system(cmd) == 0, "corrupting");
  da_context_create(&c3);
  TU_CHECK(plan_works(c3, 0), "plan after corruption");
  TU_CHECK(da__context_kernels(c3)->builds == 1, "corrupt entry was not rebuilt");
  da_context_destroy(c3);
}

/* dlopen as the library calls it (linked in statically, it takes this one): where
 * evict_before_load is set, a shared object inside the cache's folder is deleted first,
 * as another process's eviction or `dilattn cache clear` may do between the lookup that
 * verified the entry and the load (or the folder is mounted noexec: dlopen fails too) */
static int evict_before_load;
void *dlopen(const char *file, int mode) {
  static void *(*real)(const char *, int);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dlopen");
  if (evict_before_load && file && strstr(file, base) && strstr(file, ".bin")) unlink(file);
  return real(file, mode);
}

/* Atomic writes from two threads at once, one of them past RLIMIT_FSIZE (in a child: the
 * limit is the process's): the oversized writes fail cleanly, the process lives, and the
 * application's own SIGXFSZ handler is still installed and never called. The writes had
 * set the disposition to SIG_IGN and back around each write: interleaved across threads,
 * that left SIG_IGN in place, or restored the default during the other's write, which then
 * ended the process (found by a review: 3 runs in 3). */
static volatile sig_atomic_t xfsz_seen;
static void on_xfsz(int sig) { (void)sig, xfsz_seen++; }
typedef struct {
  int big, fails, rounds;
  char dir[512];
} writer_t;
static void *writer(void *arg) {
  writer_t *w = arg;
  static char data[2 << 20];
  char path[700];
  for (int i = 0; i < w->rounds; i++) {
    snprintf(path, sizeof path, "%s/%s-%d", w->dir, w->big ? "big" : "small", i % 8);
    w->fails += da__write_file_atomic(path, data, w->big ? sizeof data : 64, 0600) != 0;
  }
  return NULL;
}
static volatile int writing;
static void *watch_disposition(void *arg) { /* counts the moments SIGXFSZ's handler is not the application's */
  long *changed = arg;
  struct sigaction now;
  while (__atomic_load_n(&writing, __ATOMIC_ACQUIRE))
    if (sigaction(SIGXFSZ, NULL, &now) == 0 && now.sa_handler != on_xfsz) (*changed)++;
  return NULL;
}
static void test_write_signals(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/xfsz", base);
  mkdir(dir, 0700);
  pid_t pid = fork();
  if (pid == 0) {
    struct sigaction mine = {.sa_handler = on_xfsz}, now;
    sigaction(SIGXFSZ, &mine, NULL);
    /* small writes from both threads (the saves and restores crossed within a few hundred),
     * then, past a 1 MiB limit, 2 MiB ones beside small ones */
    int ok = 1;
    for (int phase = 0; phase < 2; phase++) {
      if (phase) {
        struct rlimit rl = {1 << 20, 1 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
      }
      writer_t w[2] = {{phase, 0, phase ? 200 : 2000, ""}, {0, 0, 2000, ""}};
      pthread_t t[2], watcher;
      long changed = 0; /* (the disposition was swapped around every write: seen within a few) */
      __atomic_store_n(&writing, 1, __ATOMIC_RELEASE);
      pthread_create(&watcher, NULL, watch_disposition, &changed);
      for (int i = 0; i < 2; i++)
        snprintf(w[i].dir, sizeof w[i].dir, "%s", dir), pthread_create(&t[i], NULL, writer, &w[i]);
      for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
      __atomic_store_n(&writing, 0, __ATOMIC_RELEASE);
      pthread_join(watcher, NULL);
      ok &= w[0].fails == (phase ? 200 : 0) && w[1].fails == 0 && changed == 0;
    }
    sigaction(SIGXFSZ, NULL, &now);
    _exit(ok && now.sa_handler == on_xfsz && !xfsz_seen ? 0 : 10 + (now.sa_handler != on_xfsz) + 2 * !!xfsz_seen);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "two threads writing, one past RLIMIT_FSIZE: %s %d (10: a write's outcome or the disposition changed while "
           "writing, +1 the handler replaced, +2 it ran)",
           WIFSIGNALED(status) ? "killed by signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* a warm plan whose entry vanished after its lookup verified it: loaded from the verified
 * bytes, not a failed plan */
static void test_evicted_before_load(void) {
  use_dir("evicted");
  da_context *c1, *c2;
  da_context_create(&c1);
  TU_CHECK(plan_works(c1, 0), "cold plan");
  da_context_destroy(c1);
  da_context_create(&c2);
  evict_before_load = 1;
  TU_CHECK(plan_works(c2, 0), "warm plan whose file was evicted between the lookup and the load: %s",
           da_context_last_error(c2));
  evict_before_load = 0;
  TU_CHECK(da__context_kernels(c2)->builds == 0 && da__context_kernels(c2)->disk_hits == 1,
           "the evicted entry's verified bytes were not used (builds %lld, disk hits %lld)",
           da__context_kernels(c2)->builds, da__context_kernels(c2)->disk_hits);
  da_context_destroy(c2);
}

/* A lookup that meets an entry in the middle of another process's rebuild (its new .bin
 * renamed into place, its .json still the old one: a checksum mismatch) must not remove
 * it: the writer holds the entry's lock, and only a look under that lock may remove. The
 * unlocked first look removed both files; this lookup then waited for the lock, found the
 * writer's .json without its .bin and compiled the kernel again (a spurious warning, a
 * rebuild, and the other process's entry lost). */
static int race_builds;
static da_status race_build(const da_context *ctx, void *arg, void **bytes, size_t *n, int *no_compiler) {
  (void)no_compiler;
  (void)ctx, (void)arg;
  race_builds++;
  *bytes = malloc(16);
  memset(*bytes, 7, 16);
  *n = 16;
  return DA_OK;
}

typedef struct {
  da__kernel_cache *kc;
  const char *key;
  void *bytes;
  size_t n;
  da_status st;
} race_reader;

static void *race_read(void *arg) {
  race_reader *r = arg;
  char path[4400];
  r->st = da__kernel_cache_find_or_build(NULL, r->kc, "host", r->key, r->key, "k", race_build, NULL, NULL, NULL, &r->bytes,
                                         &r->n, path, sizeof path, NULL);
  return NULL;
}

static da__disk_cache_summary race_sum;
static void *race_verify(void *dc) {
  da__disk_cache_scan(dc, 1, 0, NULL, NULL, &race_sum);
  return NULL;
}

static void test_rebuild_race(void) {
  use_dir("race");
  da__kernel_cache kc;
  TU_CHECK(da__kernel_cache_init(&kc) == 0, "kernel cache init");
  const char *key = "bb22222222222222222222222222222222222222222222222222222222222222";
  char old_data[3000], new_data[3000], path[4400], bp[4400], jp[4400];
  memset(old_data, 1, sizeof old_data);
  memset(new_data, 2, sizeof new_data);
  TU_CHECK(da__disk_cache_put(kc.disk, "host", key, old_data, sizeof old_data, NULL, NULL, path, sizeof path) == 0, "put");
  snprintf(bp, sizeof bp, "%s", path);
  snprintf(jp, sizeof jp, "%.*s.json", (int)(strlen(bp) - 4), bp);
  /* the writer: the entry's lock, the new artifact in place, the old metadata */
  int fd = da__disk_cache_lock(kc.disk, "host", key);
  TU_CHECK(fd >= 0, "lock");
  TU_CHECK(da__write_file_atomic(bp, new_data, sizeof new_data, 0600) == 0, "new .bin");
  race_reader r = {&kc, key, NULL, 0, DA_ERR_INTERNAL};
  pthread_t t;
  pthread_create(&t, NULL, race_read, &r);
  usleep(300 * 1000); /* the reader's first look, then it waits for the lock */
  TU_CHECK(access(bp, F_OK) == 0 && access(jp, F_OK) == 0, "a lookup without the lock removed an entry being rebuilt");
  /* the writer finishes: put writes the .bin again and commits the .json */
  TU_CHECK(da__disk_cache_put(kc.disk, "host", key, new_data, sizeof new_data, NULL, NULL, path, sizeof path) == 0, "put new");
  da__disk_cache_unlock(fd);
  pthread_join(t, NULL);
  TU_CHECK(r.st == DA_OK && race_builds == 0 && r.n == sizeof new_data && r.bytes &&
               memcmp(r.bytes, new_data, r.n) == 0,
           "the reader did not take the rebuilt entry (status %d, builds %d, %zu bytes)", r.st, race_builds, r.n);
  free(r.bytes);
  /* cache verify in the middle of the same rewrite: it waits for the lock and counts the
   * rewritten entry (it removed it as corrupt) */
  fd = da__disk_cache_lock(kc.disk, "host", key);
  TU_CHECK(da__write_file_atomic(bp, old_data, sizeof old_data, 0600) == 0, "old .bin");
  pthread_create(&t, NULL, race_verify, kc.disk);
  usleep(300 * 1000);
  TU_CHECK(access(bp, F_OK) == 0 && access(jp, F_OK) == 0, "cache verify removed an entry being rebuilt");
  TU_CHECK(da__disk_cache_put(kc.disk, "host", key, old_data, sizeof old_data, NULL, NULL, path, sizeof path) == 0, "put old");
  da__disk_cache_unlock(fd);
  pthread_join(t, NULL);
  TU_CHECK(race_sum.entries == 1 && race_sum.corrupt == 0 && race_sum.removed == 0,
           "cache verify during a rewrite: %llu entries, %llu corrupt, %llu removed", (unsigned long long)race_sum.entries,
           (unsigned long long)race_sum.corrupt, (unsigned long long)race_sum.removed);
  /* ... and one another process removes (evicts) meanwhile: gone, not corrupt (it counted
   * "corrupt (unreadable); removed") */
  fd = da__disk_cache_lock(kc.disk, "host", key);
  TU_CHECK(da__write_file_atomic(bp, new_data, sizeof new_data, 0600) == 0, "new .bin");
  pthread_create(&t, NULL, race_verify, kc.disk);
  usleep(300 * 1000);
  unlink(bp), unlink(jp);
  da__disk_cache_unlock(fd);
  pthread_join(t, NULL);
  TU_CHECK(race_sum.entries == 0 && race_sum.corrupt == 0 && race_sum.removed == 0,
           "cache verify of an entry removed meanwhile: %llu entries, %llu corrupt, %llu removed",
           (unsigned long long)race_sum.entries, (unsigned long long)race_sum.corrupt,
           (unsigned long long)race_sum.removed);
  TU_CHECK(da__disk_cache_put(kc.disk, "host", key, old_data, sizeof old_data, NULL, NULL, path, sizeof path) == 0, "put");
  /* a corrupt entry nobody is writing is still removed (under the lock) and rebuilt */
  int f2 = open(bp, O_WRONLY);
  TU_CHECK(f2 >= 0 && pwrite(f2, "\x55", 1, 10) == 1, "flip");
  if (f2 >= 0) close(f2);
  r.bytes = NULL;
  race_read(&r);
  TU_CHECK(r.st == DA_OK && race_builds == 1 && r.n == 16, "a corrupt entry was not rebuilt (builds %d)", race_builds);
  free(r.bytes);
  /* JIT off, a corrupt entry, and its lock file cannot be opened (a folder in its place
   * here; a read-only cache folder for a user): the error says the entry is corrupt, not
   * only that the kernel is not in the disk cache */
  f2 = open(bp, O_WRONLY);
  TU_CHECK(f2 >= 0 && pwrite(f2, "\x55", 1, 10) == 1, "flip again");
  if (f2 >= 0) close(f2);
  char lp[4400];
  snprintf(lp, sizeof lp, "%.*s.lock", (int)(strlen(bp) - 4), bp);
  unlink(lp);
  TU_CHECK(mkdir(lp, 0700) == 0, "a folder where the lock file goes");
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  da_context *ectx;
  da_context_create(&ectx);
  r.bytes = NULL;
  r.st = da__kernel_cache_find_or_build(ectx, &kc, "host", key, key, "k", race_build, NULL, NULL, NULL, &r.bytes, &r.n, path,
                                        sizeof path, NULL);
  TU_CHECK(r.st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(ectx), "corrupt") &&
               strstr(da_context_last_error(ectx), "read-only"),
           "JIT off, a corrupt entry that cannot be locked: %s (%s)", da_status_name(r.st), da_context_last_error(ectx));
  free(r.bytes);
  da_context_destroy(ectx);
  unsetenv("DILATTN_DISABLE_JIT");
  rmdir(lp);
  da__kernel_cache_destroy(&kc);
}

static void test_memory_only(void) {
  setenv("DILATTN_CACHE_DIR", "/dev/null/cache", 1); /* cannot exist */
  da_context *c;
  da_context_create(&c);
  TU_CHECK(!da__disk_cache_usable(da__context_kernels(c)->disk), "impossible folder reported usable");
  TU_CHECK(plan_works(c, 1), "memory-only plan");
  TU_CHECK(plan_works(c, 1) && da__context_kernels(c)->builds == 1, "memory-only cache did not keep the kernel");
  da_context_destroy(c);
  /* full disk: a child whose file size limit is below the artifact's size */
  use_dir("full");
  pid_t pid = fork();
  if (pid == 0) {
    da__disk_cache *dc = da__disk_cache_open();
    struct rlimit rl = {2048, 2048};
    setrlimit(RLIMIT_FSIZE, &rl);
    char data[8192] = {1}, path[4400];
    const char *key = "bb22222222222222222222222222222222222222222222222222222222222222",
               *small = "cc33333333333333333333333333333333333333333333333333333333333333";
    int before = da__disk_cache_put(dc, "host", small, data, 16, NULL, NULL, path, sizeof path) == 0;
    int failed = da__disk_cache_put(dc, "host", key, data, sizeof data, NULL, NULL, path, sizeof path) != 0;
    int degraded = !da__disk_cache_writable(dc) && da__disk_cache_usable(dc);
    int miss = da__disk_cache_get(dc, "host", key, path, sizeof path, NULL, NULL) == 0;
    /* the entries there still serve; no put after the failure */
    int still = da__disk_cache_get(dc, "host", small, path, sizeof path, NULL, NULL) == 1;
    int later = da__disk_cache_put(dc, "host", "dd" "44444444444444444444444444444444444444444444444444444444444444",
                                   data, 16, NULL, NULL, path, sizeof path) != 0;
    da__disk_cache_close(dc);
    _exit(before && failed && degraded && miss && still && later ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "full disk: put did not fail cleanly (status %d)", status);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/full", base);
  TU_CHECK(count_files(dir, ".tmp-*") == 0 && count_files(dir, ".json") == 1 && count_files(dir, ".bin") == 1,
           "full disk left files behind, or lost the one written before");
  /* a folder that turns unwritable after opening: the plan still works, memory-only */
  use_dir("turns");
  da_context_create(&c);
  char hostdir[600];
  snprintf(hostdir, sizeof hostdir, "%s/turns/v1/host", base);
  FILE *blocker = fopen(hostdir, "w"); /* a file where the arch folder should go */
  if (blocker) fclose(blocker);
  TU_CHECK(plan_works(c, 3), "plan with a cache that cannot be written");
  TU_CHECK(!da__disk_cache_writable(da__context_kernels(c)->disk), "failed write did not degrade the cache");
  TU_CHECK(plan_works(c, 3) && da__context_kernels(c)->builds == 1, "kernel not kept in memory after degrading");
  da_context_destroy(c);
}

static void test_processes(void) {
  use_dir("procs");
  enum { NPROC = 8, NKERN = 4 };
  int fds[NPROC][2];
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    if (pipe(fds[i]) != 0) return;
    pids[i] = fork();
    if (pids[i] == 0) {
      da_context *c;
      da_context_create(&c);
      int ok = 1;
      for (int k = 0; k < NKERN; k++) ok &= plan_works(c, 10 + (k + i) % NKERN);
      long long builds = da__context_kernels(c)->builds;
      da_context_destroy(c);
      if (write(fds[i][1], &builds, sizeof builds) != sizeof builds) ok = 0;
      _exit(ok ? 0 : 1);
    }
    close(fds[i][1]);
  }
  long long total = 0;
  int all_ok = 1;
  for (int i = 0; i < NPROC; i++) {
    long long b = 0;
    if (read(fds[i][0], &b, sizeof b) != sizeof b) all_ok = 0;
    close(fds[i][0]);
    total += b;
    int status;
    waitpid(pids[i], &status, 0);
    all_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  TU_CHECK(all_ok, "a process failed");
  TU_CHECK(total == NKERN, "%d processes x %d kernels compiled %lld times, want %d", NPROC, NKERN, total, NKERN);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/procs", base);
  TU_CHECK(count_files(dir, ".json") == NKERN, "entries on disk: %d", count_files(dir, ".json"));
}

/* Another compiler's build of the same source (da__disk_cache_find_source): the newest
 * entry of the arch stored as the source's, under another key than the one asked for, that
 * accept takes (it sees the compiler the entry records); a corrupt one skipped for the
 * next; the markers of entries gone are removed (by the look, by verify, all by clear) */
static char seen_compiler[64];
static int refuse_data(void *user, const char *origin, const char *compiler, const void *bytes, size_t n) {
  (void)origin;
  snprintf(seen_compiler, sizeof seen_compiler, "%s", compiler ? compiler : "(null)");
  return !(n == 100 && strchr((const char *)user, ((const char *)bytes)[0]));
}
static int count_markers(const da__disk_cache *dc) {
  char d[4200];
  snprintf(d, sizeof d, "%s/sm_90/src", da__disk_cache_root(dc));
  return count_files(d, "");
}
static void test_find_source(void) {
  use_dir("source");
  da__disk_cache *dc = da__disk_cache_open();
  const char *S = "5555555555555555555555555555555555555555555555555555555555555555",
             *T = "7777777777777777777777777777777777777777777777777777777777777777";
  const struct {
    const char *arch, *key, *source;
    char fill;
  } e[] = {
      {"sm_90", "a1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", S, 'A'}, /* oldest */
      {"sm_90", "b2bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", S, 'B'},
      {"sm_90", "c3cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", T, 'C'},
      {"sm_80", "d4dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd", S, 'D'},
      {"sm_90", "e5eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", S, 'E'}, /* the key asked for */
      {"sm_90", "f6ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", NULL, 'F'}, /* no source recorded */
  };
  char data[100], path[4400], meta[200];
  for (int i = 0; i < 6; i++) {
    memset(data, e[i].fill, sizeof data);
    snprintf(meta, sizeof meta, "\"kernel\":\"k\",\"compiler\":\"cc -O%d\"", i);
    TU_CHECK(da__disk_cache_put(dc, e[i].arch, e[i].key, data, sizeof data, e[i].source, meta, path, sizeof path) == 0,
             "put %d", i);
    const struct timespec t[2] = {{1000000 + i, 0}, {1000000 + i, 0}}; /* (distinct times: LRU order) */
    utimensat(AT_FDCWD, path, t, 0);
  }
  TU_CHECK(count_markers(dc) == 4, "a marker an sm_90 entry with a source: %d", count_markers(dc));
  const char *ask = e[4].key;
  void *got = NULL;
  size_t n = 0;
  int r = da__disk_cache_find_source(dc, "sm_90", ask, S, refuse_data, "", path, sizeof path, &got, &n);
  TU_CHECK(r == 1 && n == 100 && got && ((char *)got)[0] == 'B' && strstr(path, e[1].key) &&
               !strcmp(seen_compiler, "cc -O1"),
           "the newest build of the source, not the key asked for, its compiler seen (%d, %c, %s)", r,
           got ? ((char *)got)[0] : '-', seen_compiler);
  free(got), got = NULL;
  r = da__disk_cache_find_source(dc, "sm_90", ask, S, refuse_data, "B", path, sizeof path, &got, &n);
  TU_CHECK(r == 1 && got && ((char *)got)[0] == 'A', "one accept refuses: the next older (%d)", r);
  free(got), got = NULL;
  r = da__disk_cache_find_source(dc, "sm_90", ask, S, refuse_data, "AB", path, sizeof path, &got, &n);
  TU_CHECK(r == -1 && !got, "accept refuses every one: -1 (%d)", r);
  r = da__disk_cache_find_source(dc, "sm_80", ask, S, NULL, NULL, path, sizeof path, &got, &n);
  TU_CHECK(r == 1 && got && ((char *)got)[0] == 'D', "another arch's (%d)", r);
  free(got), got = NULL;
  r = da__disk_cache_find_source(dc, "sm_90", e[2].key, T, NULL, NULL, path, sizeof path, &got, &n);
  TU_CHECK(r == 0 && !got, "the key asked for is not another compiler's build (%d)", r);
  TU_CHECK(da__disk_cache_find_source(dc, "sm_90", ask, "../x", NULL, NULL, path, sizeof path, &got, &n) == 0,
           "a source key that is not one");
  /* B's artifact damaged: skipped (left where it is), A served */
  snprintf(path, sizeof path, "%s/sm_90/b2/%s.bin", da__disk_cache_root(dc), e[1].key);
  FILE *f = fopen(path, "r+b");
  if (f) fputc('X', f), fclose(f);
  r = da__disk_cache_find_source(dc, "sm_90", ask, S, NULL, NULL, path, sizeof path, &got, &n);
  TU_CHECK(r == 1 && got && ((char *)got)[0] == 'A', "a corrupt build skipped for the next (%d)", r);
  free(got), got = NULL;
  /* A gone (evicted, say): its marker goes with the next look; verify takes B's (corrupt) */
  snprintf(path, sizeof path, "%s/sm_90/a1/%s.bin", da__disk_cache_root(dc), e[0].key);
  unlink(path);
  path[strlen(path) - 4] = '\0';
  strcat(path, ".json");
  unlink(path);
  r = da__disk_cache_find_source(dc, "sm_90", ask, S, NULL, NULL, path, sizeof path, &got, &n);
  TU_CHECK(r == -1 && count_markers(dc) == 3, "A gone: none served (B is corrupt), A's marker gone (%d, %d markers)",
           r, count_markers(dc));
  da__disk_cache_summary sum;
  da__disk_cache_scan(dc, 1, 0, NULL, NULL, &sum);
  TU_CHECK(count_markers(dc) == 2, "verify removes B (corrupt) and its marker: %d markers", count_markers(dc));
  da__disk_cache_scan(dc, 0, 1, NULL, NULL, &sum);
  snprintf(path, sizeof path, "%s/sm_90/src", da__disk_cache_root(dc));
  TU_CHECK(count_markers(dc) == 0 && access(path, F_OK) != 0, "clear removes every marker and src/");
  /* eviction takes an entry's marker with it (they piled up, a file a kernel ever compiled) */
  setenv("DILATTN_CACHE_MAX_BYTES", "150", 1);
  for (int i = 0; i < 2; i++) {
    memset(data, e[i].fill, sizeof data);
    da__disk_cache_put(dc, "sm_90", e[i].key, data, sizeof data, S, NULL, path, sizeof path);
  }
  unsetenv("DILATTN_CACHE_MAX_BYTES");
  TU_CHECK(count_markers(dc) == 1, "the evicted entry's marker: %d markers", count_markers(dc));
  /* a marker lost (a verify's prune raced a put, say): the entry's next lookup puts it back */
  snprintf(path, sizeof path, "%s/sm_90/src", da__disk_cache_root(dc));
  snprintf(meta, sizeof meta, "rm -rf %s", path);
  TU_CHECK(system(meta) == 0 && count_markers(dc) <= 0, "markers removed");
  TU_CHECK(da__disk_cache_get(dc, "sm_90", e[1].key, path, sizeof path, NULL, NULL) == 1 && count_markers(dc) == 1,
           "a lookup puts its entry's marker back: %d markers", count_markers(dc));
  da__disk_cache_close(dc);
}

/* DILATTN_DISABLE_JIT (README, Environment: "never compile"): any value but "", "0",
 * "false", "no" or "off" (any case) turns compiling off; those leave it on ("false" turned it
 * off). Only "1" was ever tested. Each case in a cache folder of its own, so the kernel is
 * in no cache. */
static void test_disable_jit_values(void) {
  static const struct {
    const char *value;
    int jit;
  } cases[] = {{"0", 1}, {"", 1}, {"false", 1}, {"No", 1}, {"OFF", 1}, {"1", 0}, {"yes", 0}, {"true", 0}, {"00", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char sub[64];
    snprintf(sub, sizeof sub, "jit-%zu", i);
    use_dir(sub);
    setenv("DILATTN_DISABLE_JIT", cases[i].value, 1);
    da_context *c = NULL;
    da_context_create(&c);
    da_spec s = spec_n(40); /* a kernel no other test here makes */
    da_plan *p = NULL;
    const da_status st = da_plan_create(c, &s, DA_BACKEND_HOST, &p);
    if (cases[i].jit)
      TU_CHECK(st == DA_OK && p, "DILATTN_DISABLE_JIT='%s' turned compiling off: %s (%s)", cases[i].value,
               da_status_name(st), da_context_last_error(c));
    else
      TU_CHECK(st == DA_ERR_UNSUPPORTED && !p && strstr(da_context_last_error(c), "da_fwd_"),
               "DILATTN_DISABLE_JIT='%s' compiled a kernel in no cache: %s (%s)", cases[i].value, da_status_name(st),
               da_context_last_error(c));
    da_plan_destroy(p);
    da_context_destroy(c);
  }
  unsetenv("DILATTN_DISABLE_JIT");
}

/* Outputs staged together (da__stage_bytes, da__staged_commit) and put back
 * (da__staged_restore): one path staged twice gets its first content back and leaves no
 * backup beside it (a rename between two links of one file does nothing: the first backup
 * was left, helper-66) */
static void test_staged_twice(void) {
  char dir[512], path[600], cmd[700];
  snprintf(dir, sizeof dir, "%s/staged", base);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/out", dir);
  TU_CHECK(da__write_file_atomic(path, "orig", 4, 0644) == 0, "write %s", path);
  da__staged_file f[2];
  TU_CHECK(da__stage_bytes(&f[0], path, "first", 5) == 0 && da__stage_bytes(&f[1], path, "second", 6) == 0,
           "stage %s twice: %s", path, strerror(errno));
  int bad = -2;
  const char *what = NULL;
  TU_CHECK(da__staged_commit(f, 2, &bad, &what) == 0, "commit: %d %s", bad, what ? what : "");
  size_t n = 0;
  char *got = da__read_file(path, &n);
  TU_CHECK(got && n == 6 && !memcmp(got, "second", 6), "committed: %s", got ? got : "(none)");
  free(got);
  TU_CHECK(da__staged_restore(f, 2) == 0 && !f[0].lost && !f[1].lost, "restore");
  da__staged_cleanup(f, 2);
  got = da__read_file(path, &n);
  TU_CHECK(got && n == 4 && !memcmp(got, "orig", 4), "restored: %s", got ? got : "(none)");
  free(got);
  snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = out", dir);
  TU_CHECK(system(cmd) == 0, "only the output left in %s (no backup, no temp)", dir);
}

int main(void) {
  if (!mkdtemp(base)) return 1;
  test_roundtrip_and_corruption();
  test_misplaced();
  test_find_source();
  test_budget_text();
  test_budget();
  test_plan_level();
  test_evicted_before_load();
  test_rebuild_race();
  test_write_signals();
  test_staged_twice();
  test_memory_only();
  test_processes();
  test_disable_jit_values();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
  return tu_report();
}
