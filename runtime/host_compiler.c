/* host_compiler.c - compile a rendered host kernel with the system C compiler into a
 * shared object (posix_spawn, no shell), dlopen it and resolve its entry point. The
 * build happens in a private temporary folder that is removed afterwards; on a compile
 * failure the folder (with the source and the compiler log) is kept and named in the
 * error. */
#define _GNU_SOURCE
#include "runtime/host_compiler.h"

#include "gen/render.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* failed builds whose folder stays for inspection, a process */
#define KEEP_FAILED_BUILDS 4

extern char **environ;

const char *da__host_cc(void) {
  const char *cc = getenv("CC");
  return (cc && *cc) ? cc : "cc";
}

int da__host_cc_found(char *why, size_t why_cap) {
  char prog[1024];
  const char *cc = da__host_cc();
  cc += strspn(cc, " \t");
  const size_t n = strcspn(cc, " \t");
  if (why && why_cap) why[0] = '\0';
  if (n == 0 || n >= sizeof prog) {
    if (why && why_cap) snprintf(why, why_cap, "CC names no program (it is blank or its first word is too long)");
    return 0;
  }
  memcpy(prog, cc, n);
  prog[n] = '\0';
  if (strchr(prog, '/')) {
    struct stat st;
    const char *bad = stat(prog, &st) != 0      ? strerror(errno)
                      : !S_ISREG(st.st_mode)    ? "not a regular file"
                      : access(prog, X_OK) != 0 ? strerror(errno)
                                                : NULL;
    if (!bad) return 1;
    if (why && why_cap) snprintf(why, why_cap, "the C compiler %s (CC) cannot be run: %s", prog, bad);
    return 0;
  }
  const char *path = getenv("PATH");
  for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
    const size_t len = strcspn(p, ":");
    char file[4200];
    snprintf(file, sizeof file, "%.*s/%s", (int)(len ? len : 1), len ? p : ".", prog);
    struct stat st;
    if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0) return 1;
    p += len + (p[len] == ':');
  }
  if (why && why_cap)
    snprintf(why, why_cap, "the C compiler %s (%s) is not on PATH", prog, getenv("CC") && *getenv("CC") ? "CC" : "the default; set CC");
  return 0;
}

static int write_all(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)n;
  }
  return close(fd);
}

static void read_log(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void remove_dir(const char *dir, const char *const *names) {
  char p[4400];
  for (int i = 0; names[i]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

static const char *const build_files[] = {"kernel.c", "kernel.so", "compile.log", NULL};

/* The compiler command line (argv[0] is the compiler); so and src are filled in.
 * -fno-strict-aliasing: gcc 12.2 at -O2 miscompiled a kernel of 1 x 1 tiles at head_dim 2
 * (the online softmax's running maximum read as its reset value on every key tile: out
 * was the last key's v); without type-based alias analysis, or at -O0, it is right, and
 * the kernels (no type punning) ran 1.02x slower at most (LongNet 2-branch causal, fp32,
 * 16K tokens). test_api test_unit_tiles. */
#define HOST_CFLAGS "-O2", "-std=c11", "-fPIC", "-shared", "-fno-math-errno", "-fno-strict-aliasing", "-w"

/* -fno-math-errno lets expf/logf inline; no -ffast-math: infinities carry meaning. */
static const char *const host_cflags[] = {HOST_CFLAGS};
#define NHOST_CFLAGS ((int)(sizeof host_cflags / sizeof *host_cflags))

/* The flags as one string, with the -lm the command line ends in (the host artifact key) */
static char host_flags_text[256];
static pthread_once_t host_flags_once = PTHREAD_ONCE_INIT;
static void join_host_flags(void) {
  size_t n = 0;
  for (int i = 0; i < NHOST_CFLAGS; i++)
    n += (size_t)snprintf(host_flags_text + n, sizeof host_flags_text - n, "%s ", host_cflags[i]);
  snprintf(host_flags_text + n, sizeof host_flags_text - n, "-lm");
}
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
/* What CPUID says of each extension a module may name (templates/host/prims.h's words):
 * leaf, subleaf, register, bit, and the register state the OS must enable for it (XCR0):
 * 1 AVX's (bits 1, 2), 2 AVX-512's (and 5, 6, 7), 3 AMX's (17, 18), 4 APX's (19) */
typedef struct {
  const char *name;
  unsigned leaf, sub;
  char reg;
  unsigned char bit, state;
} isa_bit;
static const isa_bit ISA[] = {
    {"sse3", 1, 0, 'c', 0, 0},          {"pclmul", 1, 0, 'c', 1, 0},       {"ssse3", 1, 0, 'c', 9, 0},
    {"fma", 1, 0, 'c', 12, 1},          {"sse4.1", 1, 0, 'c', 19, 0},      {"sse4.2", 1, 0, 'c', 20, 0},
    {"movbe", 1, 0, 'c', 22, 0},        {"popcnt", 1, 0, 'c', 23, 0},      {"aes", 1, 0, 'c', 25, 0},
    {"avx", 1, 0, 'c', 28, 1},          {"f16c", 1, 0, 'c', 29, 1},        {"bmi", 7, 0, 'b', 3, 0},
    {"avx2", 7, 0, 'b', 5, 1},          {"bmi2", 7, 0, 'b', 8, 0},         {"avx512f", 7, 0, 'b', 16, 2},
    {"avx512dq", 7, 0, 'b', 17, 2},     {"adx", 7, 0, 'b', 19, 0},         {"avx512ifma", 7, 0, 'b', 21, 2},
    {"avx512cd", 7, 0, 'b', 28, 2},     {"sha", 7, 0, 'b', 29, 0},         {"avx512bw", 7, 0, 'b', 30, 2},
    {"avx512vl", 7, 0, 'b', 31, 2},     {"avx512vbmi", 7, 0, 'c', 1, 2},   {"avx512vbmi2", 7, 0, 'c', 6, 2},
    {"gfni", 7, 0, 'c', 8, 0},          {"vaes", 7, 0, 'c', 9, 1},         {"vpclmulqdq", 7, 0, 'c', 10, 1},
    {"avx512vnni", 7, 0, 'c', 11, 2},   {"avx512bitalg", 7, 0, 'c', 12, 2}, {"avx512vpopcntdq", 7, 0, 'c', 14, 2},
    {"avx512vp2intersect", 7, 0, 'd', 8, 2}, {"avx512fp16", 7, 0, 'd', 23, 2}, {"amx-tile", 7, 0, 'd', 24, 3},
    {"avxvnni", 7, 1, 'a', 4, 1},       {"avx512bf16", 7, 1, 'a', 5, 2},   {"lzcnt", 0x80000001u, 0, 'c', 5, 0},
    {"sse4a", 0x80000001u, 0, 'c', 6, 0}, {"xop", 0x80000001u, 0, 'c', 11, 1}, {"fma4", 0x80000001u, 0, 'c', 16, 1},
    {"tbm", 0x80000001u, 0, 'c', 21, 0}, {"avx512er", 7, 0, 'b', 27, 2}, {"avx512pf", 7, 0, 'b', 26, 2},
    {"apxf", 7, 1, 'd', 21, 4},
};
#define NISA (sizeof ISA / sizeof ISA[0])

static int isa_present(const isa_bit *e) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(e->leaf, e->sub, &a, &b, &c, &d)) return 0; /* (a leaf past the CPU's) */
  const unsigned r = e->reg == 'a' ? a : e->reg == 'b' ? b : e->reg == 'c' ? c : d;
  if (!((r >> e->bit) & 1u)) return 0;
  if (!e->state) return 1;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !((c1 >> 27) & 1u)) return 0; /* no OSXSAVE: no XGETBV */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const unsigned long long xcr0 = ((unsigned long long)hi << 32) | lo;
  const unsigned long long need = e->state == 1 ? 0x6ull : e->state == 2 ? 0xe6ull : e->state == 3 ? 0x60000ull : 0x80000ull;
  return (xcr0 & need) == need;
}
#endif

int da__host_isa_has(const char *name) {
#if defined(__x86_64__) && defined(__GNUC__)
  for (size_t i = 0; i < NISA; i++)
    if (!strcmp(ISA[i].name, name)) return isa_present(&ISA[i]);
#endif
  (void)name;
  return -1;
}

int da__host_isa_missing(const char *words, char *missing, size_t cap) {
  char w[64];
  for (const char *p = words; *p;) {
    while (*p == ' ') p++;
    size_t n = strcspn(p, " ");
    if (!n) break;
    snprintf(w, sizeof w, "%.*s", (int)(n < sizeof w - 1 ? n : sizeof w - 1), p);
    p += n;
    if (da__host_isa_has(w) != 1) { /* absent, or a word this runtime cannot check */
      snprintf(missing, cap, "%s", w);
      return 1;
    }
  }
  return 0;
}

void da__host_cpu_features(char hex[65]) {
#if defined(__x86_64__) && defined(__GNUC__)
  char have[1024] = "x86-64";
  size_t n = strlen(have);
  for (size_t i = 0; i < NISA; i++)
    if (isa_present(&ISA[i])) n += (size_t)snprintf(have + n, sizeof have - n, " %s", ISA[i].name);
  da__sha256_hex(have, strlen(have), hex);
  return;
#endif
  char line[8192], found[8192] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  int have_flags = 0;
  while (f && !have_flags && fgets(line, sizeof line, f)) {
    /* x86: "flags"; arm64: "Features"; else the first "model name" */
    if (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) {
      snprintf(found, sizeof found, "%s", line);
      have_flags = 1;
    } else if (!strncmp(line, "model name", 10) && !strcmp(found, "unknown")) {
      snprintf(found, sizeof found, "%s", line);
    }
  }
  if (f) fclose(f);
  da__sha256_hex(found, strlen(found), hex);
}

const char *da__host_flags(void) {
  pthread_once(&host_flags_once, join_host_flags);
  return host_flags_text;
}

/* The build folders of processes that were killed mid-compile (SIGINT during `dilattn
 * tune`: hundreds pile up in /tmp): this user's dilattn-build-* in tmp untouched for a day
 * or more, holding nothing but a build's files, removed, once a process */
static void sweep_stale_builds(void) {
  const char *tmp = getenv("TMPDIR"), *sweep_tmp = tmp && *tmp ? tmp : "/tmp";
  DIR *d = opendir(sweep_tmp);
  if (!d) return;
  const time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "dilattn-build-", 14) || strlen(e->d_name) != 20) continue;
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", sweep_tmp, e->d_name);
    if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || now - st.st_mtime <= 24 * 3600) continue;
    DIR *b = opendir(p); /* only a build's files in it, or it stays whole */
    int only = b != NULL;
    struct dirent *f;
    while (only && (f = readdir(b)) != NULL) {
      int known = !strcmp(f->d_name, ".") || !strcmp(f->d_name, "..");
      char q[4800];
      struct stat fs;
      snprintf(q, sizeof q, "%s/%s", p, f->d_name);
      for (int i = 0; build_files[i] && !known; i++) /* (a build's name, a regular file) */
        known = !strcmp(f->d_name, build_files[i]) && lstat(q, &fs) == 0 && S_ISREG(fs.st_mode);
      only = known;
    }
    if (b) closedir(b);
    if (only) remove_dir(p, build_files);
  }
  closedir(d);
}

da_status da__host_build(const da_context *ctx, const char *source, char *dir, size_t dcap, char *so, size_t scap,
                         double *ms) {
  double t0 = da__now_ms();
  const char *tmp = getenv("TMPDIR");
  static pthread_once_t swept = PTHREAD_ONCE_INIT;
  pthread_once(&swept, sweep_stale_builds);
  snprintf(dir, dcap, "%s/dilattn-build-XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  DA_RETURN_IF(!mkdtemp(dir), DA_ERR_IO, "host compile: cannot create a build folder %s: %s", dir,
               strerror(errno));
  char src[4200], log[4200];
  snprintf(src, sizeof src, "%s/kernel.c", dir);
  snprintf(so, scap, "%s/kernel.so", dir);
  snprintf(log, sizeof log, "%s/compile.log", dir);
  if (write_all(src, source, strlen(source)) != 0) {
    int e = errno;
    remove_dir(dir, build_files);
    return da__set_error(ctx, DA_ERR_IO, "host compile: cannot write %s: %s", src, strerror(e));
  }
  const char *cc = da__host_cc();
  /* CC is words, as make takes it (no quoting): the words up to the first option are the
   * command ("ccache cc", "gcc"), the options follow ours, so that they win ("cc -O3") */
  char words[4096], *w[64];
  int nw = 0, ncmd = 0;
  if (strlen(cc) >= sizeof words) {
    remove_dir(dir, build_files);
    return da__set_error(ctx, DA_ERR_UNSUPPORTED, "host compile: CC is %zu bytes long (at most %zu)", strlen(cc),
                         sizeof words - 1);
  }
  snprintf(words, sizeof words, "%s", cc);
  for (char *save = NULL, *t = strtok_r(words, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
    if (nw == 64) {
      remove_dir(dir, build_files);
      return da__set_error(ctx, DA_ERR_UNSUPPORTED, "host compile: CC has more than 64 words");
    }
    if (t[0] != '-' && ncmd == nw) ncmd++;
    w[nw++] = t;
  }
  if (ncmd == 0) {
    remove_dir(dir, build_files);
    return da__set_error(ctx, DA_ERR_UNSUPPORTED, "host compile: CC='%.200s' names no C compiler (set CC to one)", cc);
  }
  char *argv[64 + NHOST_CFLAGS + 5];
  int na = 0;
  for (int i = 0; i < ncmd; i++) argv[na++] = w[i];
  for (int i = 0; i < NHOST_CFLAGS; i++) argv[na++] = (char *)host_cflags[i];
  for (int i = ncmd; i < nw; i++) argv[na++] = w[i];
  argv[na++] = "-o", argv[na++] = so, argv[na++] = src, argv[na++] = "-lm", argv[na] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  /* the compiler with SIGPIPE's and SIGXFSZ's default actions, whatever the program
   * ignores (Python and the CLI ignore SIGPIPE, the CLI SIGXFSZ; a compiler driver's
   * pipes expect them) */
  posix_spawnattr_t at;
  sigset_t dflt;
  posix_spawnattr_init(&at);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  sigaddset(&dflt, SIGXFSZ);
  posix_spawnattr_setsigdefault(&at, &dflt);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int rc = posix_spawnp(&pid, w[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    remove_dir(dir, build_files);
    return da__set_error(ctx, DA_ERR_UNSUPPORTED,
                         "host compile: cannot run the C compiler '%s': %s (set CC to a C compiler)",
                         cc, strerror(rc));
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  /* a program that ignores SIGCHLD has its children reaped for it (waitpid: ECHILD) and
   * the exit status is lost: the compiler's output tells (it leaves none on failure) */
  struct stat so_st;
  const int known = waited == pid,
            ok = known ? WIFEXITED(status) && WEXITSTATUS(status) == 0
                       : stat(so, &so_st) == 0 && S_ISREG(so_st.st_mode) && so_st.st_size > 0;
  if (!ok) {
    char text[6000];
    read_log(log, text, sizeof text);
    if (known && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      remove_dir(dir, build_files);
      return da__set_error(ctx, DA_ERR_UNSUPPORTED, "host compile: C compiler '%s' not found: %s", cc, text);
    }
    /* the first few failures' folders stay for inspection; past them (a tuner's sweep
     * under a broken compiler failed 33 times, leaving 33 folders) each goes */
    static int kept; /* this process's, so far */
    const int keep = __atomic_fetch_add(&kept, 1, __ATOMIC_RELAXED) < KEEP_FAILED_BUILDS;
    da_status st = da__set_error(ctx, DA_ERR_COMPILE, "host compile: %s failed (status %d) on %s (%s):\n%s", cc,
                                 known && WIFEXITED(status) ? WEXITSTATUS(status) : -1, src,
                                 keep ? "kept for inspection" : "removed: the first failures' sources are kept", text);
    if (!keep) remove_dir(dir, build_files);
    return st;
  }
  /* a "compiler" that exits 0 without writing the module (CC=true): a compile failure */
  if (known && (stat(so, &so_st) != 0 || !S_ISREG(so_st.st_mode) || so_st.st_size == 0)) {
    char text[6000];
    read_log(log, text, sizeof text);
    remove_dir(dir, build_files);
    return da__set_error(ctx, DA_ERR_COMPILE, "host compile: %s exited 0 but left no module %s (is CC a C compiler?):\n%s",
                         cc, so, text);
  }
  if (ms) *ms = da__now_ms() - t0;
  return DA_OK;
}

/* The options of CC text cc (its words from the first one that starts with '-', as
 * da__host_build takes them), one space between words, into out; 0 where cc names no command */
static int cc_options(const char *cc, char *out, size_t cap) {
  size_t n = 0;
  int command = 0, options = 0;
  out[0] = '\0';
  for (const char *p = cc; *p;) {
    while (*p == ' ' || *p == '\t') p++;
    const size_t len = strcspn(p, " \t");
    if (!len) break;
    if (p[0] == '-') options = 1;
    if (!options) command = 1;
    else if (n + len + 1 < cap) n += (size_t)snprintf(out + n, cap - n, "%s%.*s", n ? " " : "", (int)len, p);
    else return 0; /* (cannot happen: the options are shorter than cc) */
    p += len;
  }
  return command;
}

int da__host_cc_same_options(const char *a, const char *b) {
  const size_t ca = strlen(a) + 1, cb = strlen(b) + 1;
  char *oa = malloc(ca), *ob = malloc(cb);
  const int same = oa && ob && cc_options(a, oa, ca) && cc_options(b, ob, cb) && !strcmp(oa, ob);
  free(oa), free(ob);
  return same;
}

void da__host_build_cleanup(const char *dir) { remove_dir(dir, build_files); }

da_status da__host_load(const da_context *ctx, const char *so, const char *symbol, da__host_module *out) {
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    return da__set_error(ctx, DA_ERR_COMPILE, "host kernel: cannot load %s: %s", so, e ? e : "unknown error");
  }
  void *fn = dlsym(dl, symbol);
  if (!fn) {
    dlclose(dl);
    return da__set_error(ctx, DA_ERR_COMPILE, "host kernel: symbol %s missing from %s", symbol, so);
  }
  char sname[400];
  snprintf(sname, sizeof sname, "%s_isa", symbol);
  const char *const *isa = dlsym(dl, sname); /* (modules of templates before 0.2.0 have none) */
  char missing[64];
  if (isa && *isa && da__host_isa_missing(*isa, missing, sizeof missing)) {
    dlclose(dl);
    return da__set_error(ctx, DA_ERR_COMPILE,
                         "host kernel %s was compiled for the %s instructions, which this CPU %s: a C compiler told "
                         "to target another CPU built it (-march or -m flags in the CC that built it); build it for "
                         "this one",
                         symbol, missing, da__host_isa_has(missing) < 0 ? "may lack (dilattn cannot check them)" : "lacks");
  }
  snprintf(sname, sizeof sname, "%s_scratch_bytes", symbol);
  void *sfn = dlsym(dl, sname);
  if (!sfn) {
    dlclose(dl);
    return da__set_error(ctx, DA_ERR_COMPILE, "host kernel: symbol %s missing from %s", sname, so);
  }
  size_t (*scratch)(void);
  memcpy(&scratch, &sfn, sizeof sfn);
  out->dl = dl;
  memcpy(&out->fn, &fn, sizeof fn);
  out->scratch_bytes = scratch();
  return DA_OK;
}

da_status da__host_compile(const da_context *ctx, const char *source, const char *symbol,
                           da__host_module *out) {
  char dir[4096], so[4200];
  double ms = 0;
  DA_TRY(da__host_build(ctx, source, dir, sizeof dir, so, sizeof so, &ms));
  da_status st = da__host_load(ctx, so, symbol, out); /* stays mapped after the file goes */
  da__host_build_cleanup(dir);
  if (st == DA_OK) out->compile_ms = ms;
  return st;
}

void da__host_module_unload(da__host_module *m) {
  if (m && m->dl) dlclose(m->dl);
  if (m) memset(m, 0, sizeof *m);
}
