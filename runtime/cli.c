/* cli.c - the `dilattn` command: gen | run | info (DESIGN.md "Command line").
 * Exit codes: 0 success, 2 bad input (arguments, config, NPY), 3 compile failure,
 * 4 device or runtime failure, 1 internal error. Output files are written whole (temp
 * file, then rename) or not at all. */
#define _GNU_SOURCE
#include "dilattn.h"
#include "gen/render.h"
#include "runtime/host_compiler.h"
#include "runtime/npy.h"
#include "runtime/tune.h"
#include "runtime/log.h"
#include "runtime/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/bundle.h"
#include "runtime/bundle_writer.h"
#include "runtime/cli.h"
#include "runtime/cuda_backend.h"
#include "runtime/disk_cache.h"
#include "runtime/fileio.h"
#include "runtime/internal.h"

#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <fcntl.h>
#include <limits.h>
#include <lua.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_INTERNAL = 1, EXIT_INPUT = 2, EXIT_COMPILE = 3, EXIT_RUNTIME = 4 };

static int exit_code(da_status st) {
  switch (st) {
  case DA_OK: return EXIT_OK;
  case DA_ERR_INVALID_ARGUMENT:
  case DA_ERR_INVALID_SPEC:
  case DA_ERR_PARSE:
  case DA_ERR_IO: return EXIT_INPUT;
  case DA_ERR_GENERATOR:
  case DA_ERR_COMPILE: return EXIT_COMPILE;
  case DA_ERR_UNSUPPORTED:
  case DA_ERR_DEVICE:
  case DA_ERR_NO_MEMORY: return EXIT_RUNTIME;
  default: return EXIT_INTERNAL;
  }
}

/* A plan's creation or execution once the inputs are read: a file it cannot make (the host
 * compiler's temporary folder under an unusable TMPDIR) is the environment's failure, not
 * bad input */
static int run_exit_code(da_status st) { return st == DA_ERR_IO ? EXIT_RUNTIME : exit_code(st); }

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dilattn: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

int da__cli_once(const char *cmd, const char *flag, const char **prev, const char *val) {
  if (!*prev) {
    *prev = val;
    return 0;
  }
  fail(EXIT_INPUT, "%s: %s given twice (%s and %s)", cmd, flag, *prev, val);
  return 1;
}

/* The usage text to f: stdout when asked for (-h, --help, help; after a command too, which
 * then does nothing else), stderr with exit 2 after a bad command line. */
static void usage_to(FILE *f) {
  fputs("usage:\n"
        "  dilattn gen   CONFIG.json... [--target host|cuda] [--arch sm_80,sm_90]\n"
        "                [--mma sync|auto|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-p2|wgmma-ws-tma]\n"
        "                [-o DIR]\n"
        "                [--report] [--compile] [--bundle NAME] [--threads T]\n"
        "  dilattn run   CONFIG.json --q Q.npy --k K.npy --v V.npy -o OUT.npy [--lse LSE.npy]\n"
        "                [--backend auto|host|cuda]\n"
        "  dilattn tune  CONFIG.json... --seq-len N [--batch B] [--backend auto|host|cuda] [-o RESULTS.csv]\n"
        "                [--plot PNG] [--reps R] [--threads T] [--db TUNING.jsonl]\n"
        "  dilattn cache stats|list|verify|clear\n"
        "  dilattn info\n"
        "  dilattn --help | CMD --help | --version\n"
        "exit codes: 0 ok, 2 bad input, 3 compile failure, 4 device/runtime failure, 1 internal\n",
        f);
}

static int usage(void) {
  usage_to(stderr);
  return EXIT_INPUT;
}

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help"); }

/* Read a whole file; NULL with a message on failure. */
static char *slurp(const char *path, size_t *len, char *msg, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(msg, cap, "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t size = 0, capb = 4096;
  char *buf = malloc(capb);
  while (buf) {
    size_t n = fread(buf + size, 1, capb - size - 1, f);
    size += n;
    if (n == 0) break;
    if (capb - size - 1 == 0) {
      char *nb = capb > (64u << 20) ? NULL : realloc(buf, capb * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        snprintf(msg, cap, "%s: larger than 128 MiB, not a config file", path);
        fclose(f);
        return NULL;
      }
      buf = nb;
      capb *= 2;
    }
  }
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (!buf || err) {
    free(buf);
    snprintf(msg, cap, "%s: %s", path, err == EISDIR ? "is a folder, not a config file" : err ? strerror(err) : "read error");
    return NULL;
  }
  buf[size] = '\0';
  *len = size;
  return buf;
}

static int load_config(const char *path, da_spec *spec) { return da__cli_load_config(path, spec); }

const char *da__cli_jstr(const char *s, int slot) {
  static char *buf[8];
  if (!s) return "null";
  slot &= 7;
  free(buf[slot]);
  size_t cap = strlen(s) * 6 + 3;
  char *o = buf[slot] = malloc(cap);
  if (!o) return "\"\""; /* out of memory: an empty string, still JSON */
  size_t n = 0;
  o[n++] = '"';
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') o[n++] = '\\', o[n++] = (char)c;
    else if (c == '\n') o[n++] = '\\', o[n++] = 'n';
    else if (c == '\t') o[n++] = '\\', o[n++] = 't';
    else if (c < 0x20 || c == 0x7f) n += (size_t)snprintf(o + n, 7, "\\u%04x", c);
    else if (c < 0x80) o[n++] = (char)c;
    else { /* UTF-8 as it is; a byte that starts no valid sequence (a Latin-1 path) as U+FFFD */
      const unsigned char *u = (const unsigned char *)s;
      const int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      int ok = len > 0;
      for (int i = 1; ok && i < len; i++) ok = u[i] >= 0x80 && u[i] <= 0xbf;
      if (ok && len >= 3) /* no overlong forms, surrogates or code points past U+10FFFF */
        ok = !(c == 0xe0 && u[1] < 0xa0) && !(c == 0xed && u[1] > 0x9f) && !(c == 0xf0 && u[1] < 0x90) &&
             !(c == 0xf4 && u[1] > 0x8f);
      if (ok) {
        memcpy(o + n, s, (size_t)len);
        n += (size_t)len, s += len - 1;
      } else {
        memcpy(o + n, "\\ufffd", 6);
        n += 6;
      }
    }
  }
  o[n++] = '"';
  o[n] = '\0';
  return o;
}
#define jstr da__cli_jstr

/* A malloc'ed, formatted string ("" when out of memory: never NULL, free() it). */
static char *da__cli_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *da__cli_sprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *o = NULL;
  if (vasprintf(&o, fmt, ap) < 0) o = calloc(1, 1);
  va_end(ap);
  return o;
}


int da__cli_load_config(const char *path, da_spec *spec) {
  char msg[1024];
  size_t len;
  char *text = slurp(path, &len, msg, sizeof msg);
  if (!text) return fail(EXIT_INPUT, "config %s", msg);
  char detail[1024];
  da_status st = da_spec_from_json(text, len, spec, detail, sizeof detail);
  free(text);
  if (st != DA_OK) return fail(exit_code(st), "config %s: %s", path, detail);
  return EXIT_OK;
}

/* Split "sm_80,sm_90" into archs[]; each item must be sm_ and two or more digits, the
 * first not 0, optionally followed by one 'a' from sm_90 on (sm_90a). -1 with why (cap bytes) for anything else: an
 * empty item (a leading, trailing or doubled comma), junk, more than cap items. Whether
 * NVRTC takes the arch is for the compile to say. */
static int parse_archs(const char *list, char archs[][16], int cap, char *why, size_t why_cap) {
  int n = 0, item = 0; /* arches kept, items read (a repeated arch is kept once) */
  const char *p = list;
  if (!*p) {
    snprintf(why, why_cap, "empty");
    return -1;
  }
  for (;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    size_t digits = 0;
    if (len >= 3 && !strncmp(p, "sm_", 3))
      while (3 + digits < len && p[3 + digits] >= '0' && p[3 + digits] <= '9') digits++;
    int ok = digits >= 2 && p[3] != '0' && (3 + digits == len || (3 + digits + 1 == len && p[len - 1] == 'a'));
    item++;
    if (!len) {
      snprintf(why, why_cap, "item %d is empty (a stray comma)", item);
      return -1;
    }
    if (!ok || len > 15) {
      snprintf(why, why_cap, "item %d '%.*s' is not sm_NN or sm_NNa (sm_ and digits, e.g. sm_80, sm_90a)", item,
               (int)(len > 40 ? 40 : len), p);
      return -1;
    }
    if (p[len - 1] == 'a' && atoi(p + 3) < 90) {
      snprintf(why, why_cap, "item %d '%.*s': arch-specific targets ('a') start at sm_90 (sm_90a)", item, (int)len, p);
      return -1;
    }
    if (n >= cap) {
      snprintf(why, why_cap, "more than %d arches", cap);
      return -1;
    }
    memcpy(archs[n], p, len);
    archs[n][len] = '\0';
    int seen = 0; /* sm_80,sm_80: compiled twice, two artifacts of one key in a bundle */
    for (int i = 0; i < n; i++) seen |= !strcmp(archs[i], archs[n]);
    n += !seen;
    if (!e) break;
    p = e + 1;
  }
  return n;
}

static int valid_bundle_name(const char *n) {
  if (!n || !*n || strlen(n) > 64 || (n[0] >= '0' && n[0] <= '9')) return 0;
  for (; *n; n++)
    if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '_')) return 0;
  return 1;
}

/* Record an artifact written to dir/file in a bundle item. */
static void add_artifact(da__bundle_item *it, const char *arch, const char *key, const char *file, const void *data,
                         size_t size) {
  if (it->nart >= 16) return;
  snprintf(it->art[it->nart].arch, sizeof it->art[it->nart].arch, "%s", arch);
  snprintf(it->art[it->nart].key, sizeof it->art[it->nart].key, "%s", key);
  snprintf(it->art[it->nart].file, sizeof it->art[it->nart].file, "%s", file);
  da__sha256_hex(data, size, it->art[it->nart].sha256);
  it->art[it->nart].size = size;
  it->art[it->nart].data = data;
  it->nart++;
}

/* One compile of gen: a config's kernel for one arch (CUDA) or for the host. */
typedef struct {
  da_context *ctx;
  const da__rendered *r;
  const char *arch; /* as given (sm_90); NULL: the host */
  const char *const *opts;
  int nopts;
  int exit; /* EXIT_OK, or the failure's exit code with err */
  char err[DA_ERROR_MAX];
  int conf;              /* the config's index */
  int unit;              /* the kernel's index in gen's units */
  char carch[16];        /* the arch compiled for (wgmma: sm_90a) */
  da__nvrtc_result res;  /* CUDA */
  char *bytes;           /* the host's shared object */
  size_t size;
  double ms;
  int dup; /* -1, or an earlier job of the same kernel and arch (two configs of one kernel),
            * whose compile serves this one's config too */
} gen_job;

static int gen_compile(void *user, int j) {
  gen_job *J = &((gen_job *)user)[j];
  da_status st;
  if (J->exit != EXIT_OK) return 1; /* (no arch to compile for: gen_jobs_arch) */
  if (J->dup >= 0) return 0;
  if (J->arch) {
    char name[340];
    snprintf(name, sizeof name, "%s.cu", J->r->kernel_name);
    st = da__nvrtc_compile(J->ctx, J->r->source, name, J->carch, J->opts, J->nopts, &J->res);
    if (st == DA_OK && (st = da__cuda_check_regs(J->ctx, J->r->kernel_name, J->r->launch_regs, J->res.registers)) != DA_OK)
      da__nvrtc_result_free(&J->res);
  } else {
    char dir[4096], so[4200];
    st = da__host_build(J->ctx, J->r->source, dir, sizeof dir, so, sizeof so, &J->ms);
    if (st == DA_OK) {
      J->bytes = slurp(so, &J->size, J->err, sizeof J->err);
      da__host_build_cleanup(dir);
      if (!J->bytes) J->exit = EXIT_RUNTIME;
    }
  }
  if (st != DA_OK) {
    snprintf(J->err, sizeof J->err, "%s", da_context_last_error(J->ctx));
    J->exit = run_exit_code(st); /* (a build folder it cannot make: the environment's, exit 4, as run's) */
  }
  return J->exit != EXIT_OK; /* one failure fails gen: start no more */
}

/* A kernel gen renders: a config's source for one instruction (mma: da_plan_options.cuda_mma,
 * 0 the renderer's default, mma.sync or the host) and the arches it is compiled for
 * (indexes into gen's list). */
typedef struct {
  int conf, mma, narch;
  int arch[16];
} gen_unit;

/* Append spec's (config conf's) kernels to units[0 .. n), return the new count. One kernel
 * for every arch, with the instruction --mma named (mma), except under --mma auto
 * (auto_mma): per arch what a plan that names no instruction takes on a device of that
 * arch, and what that falls back to (plan.c da__default_mma, on an sm_90 device with a
 * CUDA 12.1 driver: wgmma-ws-tma and wgmma-ws, wgmma-ws alone under a sparse layout,
 * mma.sync where the wgmma paths do not serve the spec; mma.sync on every other arch),
 * so a bundle serves the default plan, JIT off, on each arch and on older drivers. The
 * wgmma kernels compile once for sm_90 and sm_90a (one cubin, sm_90a). */
static int gen_units(const da_spec *spec, int conf, int cuda, int auto_mma, int mma, char (*archs)[16], int narch,
                     gen_unit *units, int n) {
  const int first = n;
  for (int a = 0; a < (cuda ? narch : 1); a++) {
    int want[2] = {mma, 0}, nwant = 1;
    if (auto_mma && da__cuda_wgmma_arch(archs[a])) {
      da_plan_options eff;
      int fb = 0;
      const da_plan_options *o =
          da__default_mma(NULL, 0, da__wgmma_serves(spec) ? 2 : 0, da__spec_sparse(spec), &eff, &fb);
      if (o) want[0] = o->cuda_mma, want[1] = da__cuda_mma_parse("wgmma-ws"), nwant = (fb & DA__FALLBACK_WS) ? 2 : 1;
    }
    for (int w = 0; w < nwant; w++) {
      gen_unit *u = NULL;
      for (int k = first; k < n && !u; k++)
        if (units[k].mma == want[w]) u = &units[k];
      if (!u) {
        u = &units[n++];
        memset(u, 0, sizeof *u);
        u->conf = conf, u->mma = want[w];
      }
      int dup = 0; /* sm_90 and sm_90a: one wgmma cubin; under auto one cubin of any kernel (one device) */
      for (int k = 0; k < u->narch; k++)
        dup |= (u->mma >= 2 || auto_mma) && da__cuda_wgmma_arch(archs[a]) && da__cuda_wgmma_arch(archs[u->arch[k]]);
      if (cuda && !dup && u->narch < 16) u->arch[u->narch++] = a;
    }
  }
  return n;
}

static int gen_output_is_input(const char *path, const char *const *configs, int nconf) {
  for (int c = 0; c < nconf; c++)
    if (da__cli_same_file(path, configs[c]))
      return fail(EXIT_INPUT, "gen: %s would replace the config %s: an output may not replace an input (use another "
                              "-o folder)", path, configs[c]);
  return EXIT_OK;
}

/* gen's outputs in outdir that would replace an input (a config) or another bundle's
 * manifest: an error naming it (EXIT_INPUT), else EXIT_OK. Sources and artifacts of the
 * rendered units (every arch a cubin may be compiled as), and a bundle's three files.
 * `dilattn gen manifest.json --bundle B -o .` made the config the manifest; two bundles
 * written into one folder left the last one's manifest.json, the first's kernels missing
 * from DILATTN_BUNDLES=DIR/manifest.json. */
static int gen_check_outputs(const char *outdir, const char *const *configs, int nconf, const da__rendered *rendered,
                             int nunit, int cuda, int compile, const gen_job *jobs, int njobs, const char *bundle) {
  char path[4600];
  int rc = EXIT_OK;
  for (int u = 0; u < nunit && rc == EXIT_OK; u++) {
    const char *kn = rendered[u].kernel_name;
    snprintf(path, sizeof path, "%s/%s.%s", outdir, kn, cuda ? "cu" : "c");
    rc = gen_output_is_input(path, configs, nconf);
    if (compile && !cuda && rc == EXIT_OK) {
      snprintf(path, sizeof path, "%s/%s.host.so", outdir, kn);
      rc = gen_output_is_input(path, configs, nconf);
    }
  }
  for (int j = 0; compile && cuda && j < njobs && rc == EXIT_OK; j++) { /* the cubins, as the compiles name them */
    snprintf(path, sizeof path, "%s/%s.%s.cubin", outdir, jobs[j].r->kernel_name, jobs[j].carch);
    rc = gen_output_is_input(path, configs, nconf);
  }
  for (int b = 0; bundle && b < 3 && rc == EXIT_OK; b++) {
    if (b == 0) snprintf(path, sizeof path, "%s/manifest.json", outdir);
    else snprintf(path, sizeof path, "%s/%s%s", outdir, bundle, b == 1 ? ".h" : "_bundle.c");
    rc = gen_output_is_input(path, configs, nconf);
  }
  if (bundle && rc == EXIT_OK) { /* another bundle's manifest (another name): not replaced */
    snprintf(path, sizeof path, "%s/manifest.json", outdir);
    size_t len = 0;
    char *text = da__read_file(path, &len); /* (a regular file alone: a FIFO there is not waited on) */
    json_t *m = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    const char *fmt = json_string_value(json_object_get(m, "format")), *name = json_string_value(json_object_get(m, "name"));
    if (fmt && !strcmp(fmt, "dilattn-bundle") && name && strcmp(name, bundle))
      rc = fail(EXIT_INPUT, "gen --bundle %s: %s is bundle %s's; writing %s there would replace it (DILATTN_BUNDLES "
                            "naming it would lose %s's kernels): use another -o folder, or remove it first",
                bundle, path, name, bundle, name);
    json_decref(m);
  }
  return rc;
}

/* What a restore left of staged outputs that could not be put back, on stderr */
static void report_lost(const da__staged_file *f, const char *flag) {
  if (f->lost && f->kept && !f->placed) /* (moved aside for the commit, which then failed) */
    fprintf(stderr, "dilattn: error: %s %s was moved aside and could not be moved back: %s; it is kept as %s\n", flag,
            f->path, strerror(f->lost), f->bak);
  else if (f->lost && f->kept)
    fprintf(stderr, "dilattn: error: %s %s was replaced and could not be restored: %s; what it was is kept as %s\n",
            flag, f->path, strerror(f->lost), f->bak);
  else if (f->lost)
    fprintf(stderr, "dilattn: error: %s %s was written and could not be removed: %s\n", flag, f->path,
            strerror(f->lost));
}

/* A gen output that is a stream (a FIFO there): opened before the files are put in place
 * (one that cannot be: nothing replaced), written after them (a failure puts them back) */
typedef struct {
  char path[4200];
  da__output o;
  const void *data;
  size_t len;
} gen_stream;

/* One of gen's outputs staged (da__stage_bytes), or, a stream, kept for the commit, and its
 * line (path) printed to lf; a path staged already (two configs of one kernel: the same
 * bytes) is neither staged nor printed twice */
static int gen_stage(da__staged_file *stg, int *nstg, gen_stream *later, int *nlater, const char *path,
                     const void *data, size_t len, FILE *lf) {
  for (int i = 0; i < *nstg; i++)
    if (!strcmp(stg[i].path, path)) return EXIT_OK;
  for (int i = 0; i < *nlater; i++)
    if (!strcmp(later[i].path, path)) return EXIT_OK;
  if (lf) fprintf(lf, "%s\n", path);
  da__output o;
  if (da__output_resolve(path, &o) == 0 && o.stream) {
    gen_stream *g = &later[(*nlater)++];
    snprintf(g->path, sizeof g->path, "%s", path);
    g->o = o, g->data = data, g->len = len;
    return EXIT_OK;
  }
  if (da__stage_bytes(&stg[*nstg], path, data, len) != 0) /* (EINVAL: a socket or block device there) */
    return fail(EXIT_INPUT, "cannot write %s: %s", path, da__output_error(errno));
  (*nstg)++;
  return EXIT_OK;
}

static int cmd_gen(int argc, char **argv) {
  const char *outdir = ".", *target = "host", *arch = NULL, *bundle = NULL, *mma = NULL;
  int report = 0, compile = 0, nconf = 0;
  long threads = 0; /* compile threads (0: the online CPUs, at most 16) */
  const char *configs[256];
  const char *given[6] = {0}; /* each value option's value: one each */
  static const char *const valued[6] = {"-o", "--target", "--arch", "--bundle", "--mma", "--threads"};
  for (int i = 0; i < argc; i++) {
    for (int o = 0; o < 6 && i + 1 < argc; o++)
      if (!strcmp(argv[i], valued[o]) && da__cli_once("gen", valued[o], &given[o], argv[i + 1])) return EXIT_INPUT;
    if (!strcmp(argv[i], "--threads")) {
      if (i + 1 >= argc) return fail(EXIT_INPUT, "--threads needs a value");
      if (!da__parse_count(argv[++i], DA_MAX_THREADS, &threads))
        return fail(EXIT_INPUT, "gen: --threads '%s': not a whole number in 0..%d (0: the online CPUs, at most 16)",
                    argv[i], DA_MAX_THREADS);
    } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--target") || !strcmp(argv[i], "--arch") ||
        !strcmp(argv[i], "--bundle") || !strcmp(argv[i], "--mma")) {
      if (i + 1 >= argc) return fail(EXIT_INPUT, "%s needs a value", argv[i]);
      const char **dst = !strcmp(argv[i], "-o") ? &outdir : !strcmp(argv[i], "--target") ? &target
                                                         : !strcmp(argv[i], "--arch")     ? &arch
                                                         : !strcmp(argv[i], "--mma")      ? &mma
                                                                                          : &bundle;
      *dst = argv[++i];
    } else if (!strcmp(argv[i], "--report")) {
      report = 1;
    } else if (!strcmp(argv[i], "--compile")) {
      compile = 1;
    } else if (argv[i][0] == '-') {
      return fail(EXIT_INPUT, "gen: unknown option %s", argv[i]);
    } else if (nconf < 256) {
      configs[nconf++] = argv[i];
    } else {
      return fail(EXIT_INPUT, "gen: more than 256 configs");
    }
  }
  if (nconf == 0) return fail(EXIT_INPUT, "gen: no CONFIG.json given");
  /* a bundle is the compiled kernels as data: without them its programs could only fail
   * under DILATTN_DISABLE_JIT ("in no registered bundle") */
  if (bundle) compile = 1;
  if (strcmp(target, "host") && strcmp(target, "cuda"))
    return fail(EXIT_INPUT, "--target: '%s' is not host or cuda", target);
  if (bundle && !valid_bundle_name(bundle))
    return fail(EXIT_INPUT, "--bundle %s: the name must be a C identifier (letters, digits, _), at most 64", bundle);
  int cuda = !strcmp(target, "cuda");
  da_plan_options gopts;
  memset(&gopts, 0, sizeof gopts);
  const int auto_mma = mma && !strcmp(mma, "auto");
  if (mma && !auto_mma && !da__cuda_mma_parse(mma))
    return fail(EXIT_INPUT,
                "--mma %s: expected sync (mma.sync, the default), wgmma, wgmma-overlap, wgmma-ws, wgmma-ws-p2 or wgmma-ws-tma "
                "(sm_90 only), or auto (each arch's default)",
                mma);
  if (mma && !cuda) return fail(EXIT_INPUT, "--mma %s: only the cuda target has tensor-core paths", mma);
  gopts.cuda_mma = mma && !auto_mma ? da__cuda_mma_parse(mma) : 0;
  char archs[16][16];
  int narch = 0;
  if (cuda) {
    /* the wgmma path has one arch: sm_90 (compiled as sm_90a), the default with --mma wgmma */
    char why[200];
    narch = parse_archs(arch ? arch : gopts.cuda_mma >= 2 ? "sm_90" : "sm_80,sm_90", archs, 16, why, sizeof why);
    if (narch <= 0)
      return fail(EXIT_INPUT, "--arch '%s': %s; expected a comma-separated list like sm_80,sm_90", arch, why);
    if (gopts.cuda_mma >= 2) {
      for (int a = 0; a < narch; a++)
        if (!da__cuda_wgmma_arch(archs[a]))
          return fail(EXIT_INPUT, "--mma %s --arch %s: the wgmma path runs on sm_90 only (compiled as sm_90a), not %s",
                      mma, arch, archs[a]);
      narch = 1; /* sm_90 and sm_90a name the same cubin */
    }
  } else if (arch && strcmp(arch, "host")) {
    return fail(EXIT_INPUT, "--arch %s: the host target has no arch (use --target cuda)", arch);
  }
  struct stat sb;
  if (stat(outdir, &sb) != 0) return fail(EXIT_INPUT, "-o %s: %s", outdir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return fail(EXIT_INPUT, "-o %s: not a folder", outdir);
  /* Validate every config before writing anything. */
  da__bundle_item *items = calloc((size_t)nconf, sizeof *items);
  if (!items) return fail(EXIT_RUNTIME, "out of memory");
  int rc = EXIT_OK;
  for (int i = 0; i < nconf && rc == EXIT_OK; i++) {
    rc = load_config(configs[i], &items[i].spec);
    items[i].config_path = configs[i];
  }
  /* a bundle's entry points are NAME_<config>_*, <config> the file name up to its first '.':
   * two configs giving one identifier would define them twice */
  for (int i = 0; bundle && i < nconf && rc == EXIT_OK; i++) {
    char a[200], b[200];
    da__bundle_ident(configs[i], a, sizeof a);
    for (int j = 0; j < i && rc == EXIT_OK; j++) {
      da__bundle_ident(configs[j], b, sizeof b);
      if (!strcmp(a, b))
        rc = fail(EXIT_INPUT,
                  "--bundle %s: configs %s and %s both give the entry points %s_%s_* (the identifier is the "
                  "file name up to its first '.', characters other than letters and digits as '_', a 'k' before "
                  "one that starts with a digit or is empty); rename one",
                  bundle, configs[j], configs[i], bundle, a);
    }
  }
  da_context *ctx = NULL;
  if (rc == EXIT_OK && da_context_create(&ctx) != DA_OK) rc = fail(EXIT_RUNTIME, "out of memory");
  int maj = 0, min = 0, nopts = 0;
  const char *const *opts = da__cuda_nvrtc_opts(&nopts);
  char nvrtc_ver[32] = "";
  if (rc == EXIT_OK && cuda && (compile || report)) {
    da_status st = da__nvrtc_version(ctx, &maj, &min);
    if (st != DA_OK) rc = fail(exit_code(st), "%s", da_context_last_error(ctx));
    snprintf(nvrtc_ver, sizeof nvrtc_ver, "%d.%d", maj, min);
    /* an arch this NVRTC does not target is a bad argument (exit 2), named before any compile */
    for (int a = 0; a < narch && rc == EXIT_OK; a++)
      if (da__nvrtc_check_arch(ctx, archs[a]) != DA_OK)
        rc = fail(EXIT_INPUT, "--arch %s: %s", archs[a], da_context_last_error(ctx));
  }
  /* the kernels to render: one a config, or under --mma auto one a config and instruction
   * (gen_units), each with the arches it is compiled for */
  gen_unit *units = calloc((size_t)nconf * 3 + 1, sizeof *units);
  int nunit = 0;
  if (rc == EXIT_OK && !units) rc = fail(EXIT_RUNTIME, "out of memory");
  for (int i = 0; i < nconf && rc == EXIT_OK; i++)
    nunit = gen_units(&items[i].spec, i, cuda, auto_mma, gopts.cuda_mma, archs, narch, units, nunit);
  /* render every kernel (the planner refuses what a path does not serve) before writing any */
  da__rendered *rendered = calloc((size_t)nunit + 1, sizeof *rendered);
  if (rc == EXIT_OK && !rendered) rc = fail(EXIT_RUNTIME, "out of memory");
  for (int u = 0; u < nunit && rc == EXIT_OK; u++) {
    da_plan_options uo;
    memset(&uo, 0, sizeof uo);
    uo.cuda_mma = units[u].mma;
    da_status st = da__render_ex(ctx, &items[units[u].conf].spec, cuda ? DA_TARGET_CUDA : DA_TARGET_HOST,
                                 units[u].mma ? &uo : NULL, &rendered[u]);
    if (st != DA_OK) rc = fail(exit_code(st), "%s: %s", configs[units[u].conf], da_context_last_error(ctx));
  }
  /* two instructions may render one kernel (wgmma-ws-tma past its tensor maps keeps
   * wgmma-ws's copies, and is wgmma-ws): one unit a kernel, its arches joined (it was
   * compiled and bundled twice) */
  for (int u = 1; u < nunit && rc == EXIT_OK; u++)
    for (int v = 0; v < u; v++) {
      if (units[v].conf != units[u].conf || strcmp(rendered[v].key, rendered[u].key)) continue;
      for (int k = 0; k < units[u].narch; k++) {
        int have = 0;
        for (int m = 0; m < units[v].narch; m++) have |= units[v].arch[m] == units[u].arch[k];
        if (!have && units[v].narch < 16) units[v].arch[units[v].narch++] = units[u].arch[k];
      }
      da__rendered_free(&rendered[u]);
      memmove(&units[u], &units[u + 1], (size_t)(nunit - u - 1) * sizeof *units);
      memmove(&rendered[u], &rendered[u + 1], (size_t)(nunit - u - 1) * sizeof *rendered);
      nunit--, u--;
      break;
    }
  /* compile every (kernel, arch) in parallel, then write: a compile that fails leaves
   * nothing written, not the configs before it. The jobs in config order, then --arch
   * order (under --mma auto a config's kernels do not follow it), and so its lines. */
  int njobs = 0;
  for (int u = 0; u < nunit && (compile || report); u++) njobs += cuda ? units[u].narch : 1;
  gen_job *jobs = njobs ? calloc((size_t)njobs, sizeof *jobs) : NULL;
  if (rc == EXIT_OK && njobs && !jobs) rc = fail(EXIT_RUNTIME, "out of memory");
  if (rc == EXIT_OK && njobs) {
    int j = 0;
    for (int i = 0; i < nconf; i++)
      for (int a = 0; a < (cuda ? narch : 1); a++)
        for (int u = 0; u < nunit; u++)
          for (int k = 0; units[u].conf == i && k < (cuda ? units[u].narch : 1); k++)
            if (!cuda || units[u].arch[k] == a)
              jobs[j++] = (gen_job){.ctx = ctx, .r = &rendered[u], .conf = i, .unit = u,
                                    .arch = cuda ? archs[a] : NULL, .opts = opts, .nopts = nopts, .dup = -1};
    /* under auto, and in a bundle, an sm_90a arch names an sm_90 device: its mma.sync
     * kernels are compiled for sm_90, the arch such a device's plan looks them up for (a
     * bundle's sm_90a mma.sync cubin was looked up by no plan) */
    for (int j = 0; cuda && (auto_mma || bundle) && j < njobs; j++)
      if (!strcmp(jobs[j].arch, "sm_90a") && strcmp(jobs[j].r->cuda_path, "wgmma")) jobs[j].arch = "sm_90";
    /* the arch each compiles for (wgmma: sm_90 -> sm_90a), once: the cubins' names, checked
     * below, and one compile a (kernel, arch) (--arch sm_90,sm_90a: one sm_90 cubin, not two) */
    for (int j = 0; cuda && j < njobs; j++) {
      const da_status st = da__cuda_compile_arch(ctx, jobs[j].arch, jobs[j].r->cuda_path, jobs[j].carch);
      if (st != DA_OK) { /* (reported as a compile's failure, in order) */
        snprintf(jobs[j].err, sizeof jobs[j].err, "%s", da_context_last_error(ctx));
        jobs[j].exit = run_exit_code(st);
      }
    }
  }
  /* one compile a (kernel, compile arch): a unit's second job of one goes (--arch
   * sm_90,sm_90a: one sm_90 cubin); another unit's (two configs of one kernel) takes the
   * first's compile, its file and report line (dup), and still its bundle item's artifact */
  for (int j = 1; j < njobs; j++) {
    int same = -1, other = -1;
    for (int i = 0; i < j; i++)
      if (!strcmp(jobs[i].r->key, jobs[j].r->key) && !strcmp(jobs[i].carch, jobs[j].carch)) {
        if (jobs[i].unit == jobs[j].unit) same = i;
        else if (other < 0 && jobs[i].dup < 0) other = i;
      }
    if (same >= 0) {
      memmove(&jobs[j], &jobs[j + 1], (size_t)(njobs - j - 1) * sizeof *jobs);
      njobs--, j--;
    } else {
      jobs[j].dup = other;
    }
  }
  if (rc == EXIT_OK)
    rc = gen_check_outputs(outdir, configs, nconf, rendered, nunit, cuda, compile, jobs, njobs, bundle);
  if (rc == EXIT_OK && njobs) {
    da__parallel_for(njobs, da__compile_threads((int)threads), gen_compile, jobs);
    for (int j = 0; j < njobs && rc == EXIT_OK; j++) /* the first failure in order, as one thread would */
      if (jobs[j].exit != EXIT_OK) {
        if (cuda) rc = fail(jobs[j].exit, "%s (%s): %s", configs[jobs[j].conf], jobs[j].arch, jobs[j].err);
        else rc = fail(jobs[j].exit, "%s: %s", configs[jobs[j].conf], jobs[j].err);
      }
  }
  /* Every output staged (a temp file beside it, whole), then all put in place together, and
   * the lines naming them printed: a failure leaves the folder as it was (a later file that
   * could not be written had left the earlier ones replaced, a partial set a build takes
   * as up to date). An output that is a stream (a FIFO) is written after the files. */
  const int cap = rc == EXIT_OK ? nunit + njobs + 3 : 0;
  da__staged_file *stg = cap ? calloc((size_t)cap, sizeof *stg) : NULL;
  gen_stream *later = cap ? calloc((size_t)cap, sizeof *later) : NULL;
  int nstg = 0, nlater = 0;
  char *lines = NULL;
  size_t lines_len = 0;
  FILE *lf = cap ? open_memstream(&lines, &lines_len) : NULL;
  if (cap && (!stg || !later || !lf)) rc = fail(EXIT_RUNTIME, "out of memory");
  /* a bundle item a kernel (a config's first also writes the config's typed entry points) */
  da__bundle_item *bitems = calloc((size_t)nunit + 1, sizeof *bitems);
  if (rc == EXIT_OK && !bitems) rc = fail(EXIT_RUNTIME, "out of memory");
  for (int u = 0; u < nunit && rc == EXIT_OK; u++) {
    da__bundle_item *it = &bitems[u];
    const da__rendered r = rendered[u];
    *it = items[units[u].conf];
    it->entry = u == 0 || units[u - 1].conf != units[u].conf;
    it->spec_json = da_spec_to_json(&it->spec);
    snprintf(it->kernel, sizeof it->kernel, "%s", r.kernel_name);
    snprintf(it->source_key, sizeof it->source_key, "%s", r.key);
    snprintf(it->target, sizeof it->target, "%s", target);
    /* a CUDA bundle names its instruction (1: mma.sync); under auto none: the plan takes the
     * device's default, which the bundle holds with its fallback */
    it->cuda_mma = cuda && !auto_mma ? (gopts.cuda_mma ? gopts.cuda_mma : 1) : 0;
    snprintf(it->source_file, sizeof it->source_file, "%s.%s", r.kernel_name, cuda ? "cu" : "c");
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", outdir, it->source_file);
    rc = gen_stage(stg, &nstg, later, &nlater, path, r.source, strlen(r.source), !report && !compile ? lf : NULL);
  }
  for (int j = 0; j < njobs && rc == EXIT_OK; j++) { /* the compiled kernels, in config and arch order */
    const gen_job *J = jobs[j].dup < 0 ? &jobs[j] : &jobs[jobs[j].dup]; /* the compile */
    const da__rendered r = *J->r;
    da__bundle_item *it = &bitems[jobs[j].unit];
    const int first = jobs[j].dup < 0; /* (a kernel's report line: once) */
    if (!cuda) {
      char key[65], file[340], out[4500], src[4600];
      da__host_artifact_key(r.key, key);
      snprintf(src, sizeof src, "%s/%s", outdir, it->source_file);
      snprintf(file, sizeof file, "%s.host.so", r.kernel_name);
      snprintf(out, sizeof out, "%s/%s", outdir, file);
      if (compile) rc = gen_stage(stg, &nstg, later, &nlater, out, J->bytes, J->size, report ? NULL : lf);
      if (rc == EXIT_OK && compile) add_artifact(it, "host", key, file, J->bytes, J->size);
      if (rc == EXIT_OK && report && first)
        fprintf(lf, "{\"kernel\":%s,\"arch\":\"host\",\"cc\":%s,\"strategy\":%s,"
                "\"cache_key\":%s,\"source\":%s,\"compile_ms\":%.1f}\n",
                jstr(r.kernel_name, 0), jstr(da__host_cc(), 1), jstr(r.strategy, 2), jstr(r.key, 3), jstr(src, 4),
                J->ms);
      continue;
    }
    const da__nvrtc_result *res = &J->res;
    char file[340], bin[4600], key[65];
    snprintf(file, sizeof file, "%s.%s.cubin", r.kernel_name, J->carch);
    snprintf(bin, sizeof bin, "%s/%s", outdir, file);
    da__cuda_artifact_key(r.key, J->carch, maj, min, key);
    if (compile) rc = gen_stage(stg, &nstg, later, &nlater, bin, res->cubin, res->cubin_size, report ? NULL : lf);
    if (rc == EXIT_OK && compile) add_artifact(it, J->carch, key, file, res->cubin, res->cubin_size);
    if (rc == EXIT_OK && report && first)
      fprintf(lf, "{\"kernel\":%s,\"arch\":%s,\"registers\":%d,\"spill_bytes\":%d,"
              "\"shared_bytes\":%d,\"static_shared_bytes\":%d,\"stack_bytes\":%d,\"wgmma_serialized\":%d,"
              "\"compile_ms\":%.1f,\"strategy\":%s,\"path\":%s,\"mma\":\"%s\",\"threads\":%d,\"cache_key\":%s}\n",
              jstr(r.kernel_name, 0), jstr(J->carch, 1), res->registers, res->spill_bytes,
              r.smem_bytes + (res->shared_bytes > 0 ? res->shared_bytes : 0), res->shared_bytes, res->stack_bytes,
              res->wgmma_serialized, res->compile_ms, jstr(r.strategy, 2), jstr(r.cuda_path, 3),
              da__cuda_mma_name(units[J->unit].mma ? units[J->unit].mma : 1), r.threads, jstr(r.key, 4));
  }
  if (rc == EXIT_OK && bundle) {
    if (da__bundle_write(outdir, bundle, bitems, nunit, nvrtc_ver[0] ? nvrtc_ver : NULL, &stg[nstg]) != 0)
      rc = fail(EXIT_INPUT, "cannot write bundle %s into %s: %s", bundle, outdir, da__output_error(errno));
    else
      nstg += 3, fprintf(lf, "%s/manifest.json\n%s/%s.h\n%s/%s_bundle.c\n", outdir, outdir, bundle, outdir, bundle);
  }
  for (int i = 0; i < nlater && rc == EXIT_OK; i++)
    if (da__output_open(&later[i].o) < 0)
      rc = fail(EXIT_INPUT, "cannot write %s: %s", later[i].path, da__output_error(errno));
  int placed = 0;
  if (rc == EXIT_OK) {
    int bad;
    const char *what;
    placed = da__staged_commit(stg, nstg, &bad, &what) == 0; /* (one that failed has put back its own) */
    if (!placed) rc = fail(EXIT_INPUT, "cannot write %s: %s: %s", stg[bad].path, what, strerror(errno));
  }
  for (int i = 0; i < nlater && rc == EXIT_OK; i++)
    if (da__output_write(&later[i].o, later[i].data, later[i].len) != 0)
      rc = fail(EXIT_INPUT, "cannot write %s: %s", later[i].path, da__output_error(errno));
  for (int i = 0; i < nlater; i++) da__output_release(&later[i].o);
  if (placed && rc != EXIT_OK) da__staged_restore(stg, nstg);
  for (int i = 0; i < nstg; i++) report_lost(&stg[i], "gen:");
  if (lf && fclose(lf) == 0 && rc == EXIT_OK) fwrite(lines, 1, lines_len, stdout);
  free(lines);
  da__staged_cleanup(stg, nstg);
  free(stg);
  free(later);
  for (int j = 0; j < njobs && jobs; j++) {
    da__nvrtc_result_free(&jobs[j].res);
    free(jobs[j].bytes);
  }
  free(jobs);
  for (int u = 0; rendered && u < nunit; u++) da__rendered_free(&rendered[u]);
  free(rendered);
  free(units);
  for (int u = 0; bitems && u < nunit; u++) free(bitems[u].spec_json);
  free(bitems);
  free(items);
  da_context_destroy(ctx);
  return rc;
}

static const char *dtype_name(da_dtype t) {
  return t == DA_DTYPE_FLOAT16 ? "float16" : t == DA_DTYPE_BFLOAT16 ? "bfloat16" : "float32";
}

static da__npy_dtype npy_dtype_of(da_dtype t) {
  return t == DA_DTYPE_FLOAT16 ? DA_NPY_F16 : t == DA_DTYPE_BFLOAT16 ? DA_NPY_BF16 : DA_NPY_F32;
}

static void shape_text(const da__npy_array *a, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < a->ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, ")");
}

/* Check one input array against the config: dtype and [B, N, heads, D]. */
static int check_array(const char *flag, const char *path, const da__npy_array *a,
                       const da_spec *s, int64_t B, int64_t N, int heads, const char *heads_name) {
  char shp[256];
  shape_text(a, shp, sizeof shp);
  if (a->dtype != npy_dtype_of(s->dtype))
    return fail(EXIT_INPUT, "%s %s: dtype '%s' does not match the config's dtype %s (needs '%s')",
                flag, path, da__npy_dtype_descr(a->dtype), dtype_name(s->dtype),
                da__npy_dtype_descr(npy_dtype_of(s->dtype)));
  if (a->ndim != 4)
    return fail(EXIT_INPUT, "%s %s: shape %s has %d dimensions, needs 4: [batch, seq_len, %s, head_dim]",
                flag, path, shp, a->ndim, heads_name);
  if ((B >= 0 && a->shape[0] != B) || (N >= 0 && a->shape[1] != N) || a->shape[2] != heads ||
      a->shape[3] != s->head_dim) {
    char bn[96] = "batch, seq_len";
    if (B >= 0) snprintf(bn, sizeof bn, "batch = %lld, seq_len = %lld", (long long)B, (long long)N);
    return fail(EXIT_INPUT, "%s %s: shape %s does not match [%s, %s = %d, head_dim = %d]%s", flag, path, shp, bn,
                heads_name, heads, s->head_dim, B >= 0 ? " (batch and seq_len from --q)" : "");
  }
  return EXIT_OK;
}

/* Run plan on host arrays: directly on the host backend; through device copies on CUDA
 * (exec_ms then counts the kernels, not the copies). */
static da_status execute_plan(da_context *ctx, da_plan *plan, const da_spec *spec, int64_t B, int64_t N,
                              const da__npy_array *q, const da__npy_array *k, const da__npy_array *v,
                              void *out, float *lse, double *exec_ms) {
  da_args a;
  double t0;
  if (da_plan_backend(plan) != DA_BACKEND_CUDA) {
    da_args_init(&a, spec, B, N, q->data, k->data, v->data, out, lse);
    t0 = da__now_ms();
    da_status st = da_plan_execute(plan, &a);
    *exec_ms = da__now_ms() - t0;
    return st;
  }
  da__cuda *dev;
  da_status st = da__cuda_get(ctx, &dev);
  if (st != DA_OK) return st;
  size_t qb = q->count * q->elem_size, kb = k->count * k->elem_size, lb = (size_t)(B * spec->num_heads * N) * 4;
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
  if ((st = da__cuda_malloc(ctx, dev, qb, &dq)) == DA_OK && (st = da__cuda_malloc(ctx, dev, kb, &dk)) == DA_OK &&
      (st = da__cuda_malloc(ctx, dev, kb, &dv)) == DA_OK && (st = da__cuda_malloc(ctx, dev, qb, &dout)) == DA_OK &&
      (!lse || (st = da__cuda_malloc(ctx, dev, lb, &dlse)) == DA_OK) &&
      (st = da__cuda_memcpy_htod(ctx, dev, dq, q->data, qb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, dk, k->data, kb)) == DA_OK &&
      (st = da__cuda_memcpy_htod(ctx, dev, dv, v->data, kb)) == DA_OK) {
    da_args_init(&a, spec, B, N, dq, dk, dv, dout, dlse);
    t0 = da__now_ms();
    st = da_plan_execute(plan, &a);
    if (st == DA_OK) st = da__cuda_sync(ctx, dev, NULL);
    *exec_ms = da__now_ms() - t0;
    if (st == DA_OK) st = da__cuda_memcpy_dtoh(ctx, dev, out, dout, qb);
    if (st == DA_OK && lse) st = da__cuda_memcpy_dtoh(ctx, dev, lse, dlse, lb);
  }
  da__cuda_free(dev, dq);
  da__cuda_free(dev, dk);
  da__cuda_free(dev, dv);
  da__cuda_free(dev, dout);
  da__cuda_free(dev, dlse);
  return st;
}

int da__cli_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return 0;
  char da[4096], db[4096], ra[PATH_MAX], rb[PATH_MAX];
  const char *na = da__split_path(a, da, sizeof da), *nb = da__split_path(b, db, sizeof db);
  if (!na || !nb) return !strcmp(a, b);
  if (strcmp(na, nb)) return 0;
  if (!realpath(da, ra) || !realpath(db, rb)) return !strcmp(da, db);
  return !strcmp(ra, rb);
}

/* One output of `run`: written to a temp file beside its target, put in place only when
 * every output was written (da__staged_commit). */
typedef struct {
  const char *flag, *path;
  da__output *out;         /* out->stream: written into after the files are in place, never replaced */
  da__staged_file f;
  da__npy_dtype dt; /* a stream's array, written at commit */
  int ndim;
  const int64_t *shape;
  const void *data;
} out_file;

static int stage_output(out_file *o, da__npy_dtype dt, int ndim, const int64_t *shape, const void *data) {
  o->dt = dt, o->ndim = ndim, o->shape = shape, o->data = data;
  if (o->out->stream) return EXIT_OK;
  int fd = da__stage_file(&o->f, o->path); /* (a file: resolved) */
  if (fd < 0) return fail(EXIT_INPUT, "%s %s: cannot create a temporary file beside it: %s", o->flag, o->path,
                          strerror(errno));
  if (close(fd) != 0)
    return fail(EXIT_INPUT, "%s %s: cannot prepare a temporary file beside it: %s", o->flag, o->path, strerror(errno));
  char msg[1024];
  if (da__npy_save(o->f.tmp, dt, ndim, shape, data, msg, sizeof msg) != DA_OK) {
    size_t n = strlen(o->f.tmp);
    const char *why = !strncmp(msg, o->f.tmp, n) && msg[n] == ':' ? msg + n + 2 : msg; /* the message names the temp */
    return fail(EXIT_INPUT, "%s %s: %s", o->flag, o->path, why);
  }
  return EXIT_OK;
}

/* Put the staged outputs in place: all of them, or none. The streams are opened first (one
 * that cannot be: nothing replaced), then the files (da__staged_commit), then the streams
 * written; a failure puts the files before back. */
static int commit_outputs(out_file *o, int n) {
  for (int i = 0; i < n; i++)
    if (o[i].out->stream && da__output_open(o[i].out) < 0)
      return fail(EXIT_INPUT, "%s %s: cannot write into it: %s", o[i].flag, o[i].path, da__output_error(errno));
  da__staged_file f[2];
  for (int i = 0; i < n; i++) f[i] = o[i].f;
  int bad, rc = EXIT_OK;
  const char *what;
  const int placed = da__staged_commit(f, n, &bad, &what) == 0; /* (one that failed has put back its own) */
  if (!placed) rc = fail(EXIT_INPUT, "%s %s: %s: %s", o[bad].flag, o[bad].path, what, strerror(errno));
  for (int i = 0; i < n && rc == EXIT_OK; i++)
    if (o[i].out->stream) {
      char msg[1024];
      if (da__npy_save_fd(o[i].out->fd, o[i].path, o[i].dt, o[i].ndim, o[i].shape, o[i].data, msg, sizeof msg) !=
          DA_OK)
        rc = fail(EXIT_INPUT, "%s %s", o[i].flag, msg);
    }
  for (int i = 0; i < n; i++)
    if (o[i].out->stream) da__output_release(o[i].out);
  if (placed && rc != EXIT_OK) da__staged_restore(f, n);
  for (int i = 0; i < n; i++) report_lost(&f[i], o[i].flag);
  for (int i = 0; i < n; i++) o[i].f = f[i];
  return rc;
}

/* Remove whatever staging left: temp files, backups no longer needed. */
static void cleanup_outputs(out_file *o, int n) {
  for (int i = 0; i < n; i++) da__staged_cleanup(&o[i].f, 1);
}

/* The object a stream output is (its own descriptor's, or the name's, not followed) */
static int stream_stat(const da__output *o, struct stat *st) {
  return o->fd >= 0 ? fstat(o->fd, st) : lstat(o->name, st);
}

/* Whether two outputs, one a stream at least, are one (the null device written twice is
 * not; a terminal written twice is) */
static int same_stream(const da__output *a, const da__output *b) {
  struct stat sa, sb;
  if (stream_stat(a, &sa) != 0 || stream_stat(b, &sb) != 0) return a->fd >= 0 && a->fd == b->fd;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !(S_ISCHR(sa.st_mode) && sa.st_rdev == makedev(1, 3));
}

/* Whether output o is input path's file (a stream too: stdout opened onto q.npy) */
static int output_is(const da__output *o, const char *path) {
  struct stat so, si;
  if (!o->stream) return da__cli_same_file(o->name, path);
  return stream_stat(o, &so) == 0 && S_ISREG(so.st_mode) && stat(path, &si) == 0 && so.st_dev == si.st_dev &&
         so.st_ino == si.st_ino;
}

static int cmd_run(int argc, char **argv) {
  const char *config = NULL, *qp = NULL, *kp = NULL, *vp = NULL, *outp = NULL, *lsep = NULL;
  const char *backend_s = "auto", *backend_given = NULL;
  for (int i = 0; i < argc; i++) {
    const char **dst = NULL;
    if (!strcmp(argv[i], "--q")) dst = &qp;
    else if (!strcmp(argv[i], "--k")) dst = &kp;
    else if (!strcmp(argv[i], "--v")) dst = &vp;
    else if (!strcmp(argv[i], "-o")) dst = &outp;
    else if (!strcmp(argv[i], "--lse")) dst = &lsep;
    else if (!strcmp(argv[i], "--backend")) dst = &backend_s;
    if (dst) {
      if (i + 1 >= argc) return fail(EXIT_INPUT, "%s needs a value", argv[i]);
      if (da__cli_once("run", argv[i], dst == &backend_s ? &backend_given : dst, argv[i + 1])) return EXIT_INPUT;
      if (dst == &backend_s) backend_s = argv[i + 1];
      i++;
    } else if (argv[i][0] == '-') {
      return fail(EXIT_INPUT, "run: unknown option %s", argv[i]);
    } else if (!config) {
      config = argv[i];
    } else {
      return fail(EXIT_INPUT, "run: one CONFIG.json only (got %s and %s)", config, argv[i]);
    }
  }
  if (!config) return fail(EXIT_INPUT, "run: no CONFIG.json given");
  if (!qp || !kp || !vp || !outp) return fail(EXIT_INPUT, "run: --q, --k, --v and -o are required");
  /* (an empty path: refused now, not after the kernel ran) */
  if (!*outp || (lsep && !*lsep)) return fail(EXIT_INPUT, "run: %s is an empty path", !*outp ? "-o" : "--lse");
  da_backend backend;
  if (!strcmp(backend_s, "auto")) backend = DA_BACKEND_AUTO;
  else if (!strcmp(backend_s, "host")) backend = DA_BACKEND_HOST;
  else if (!strcmp(backend_s, "cuda")) backend = DA_BACKEND_CUDA;
  else return fail(EXIT_INPUT, "--backend: '%s' is not auto, host or cuda", backend_s);
  /* the outputs: files, written whole (a symlink among them replaced, never written
   * through), or streams written into (a device, a FIFO, the process's own descriptor such
   * as /dev/stdout): da__output_resolve */
  da__output oo, lo;
  if (da__output_resolve(outp, &oo) != 0) return fail(EXIT_INPUT, "-o %s: %s", outp, da__output_error(errno));
  if (lsep && da__output_resolve(lsep, &lo) != 0)
    return fail(EXIT_INPUT, "--lse %s: %s", lsep, da__output_error(errno));
  /* two distinct outputs (the null device may be both), neither a folder nor an input
   * (checked before anything runs) */
  if (lsep && (oo.stream || lo.stream ? same_stream(&oo, &lo) : da__cli_same_file(outp, lsep)))
    return fail(EXIT_INPUT, "-o %s and --lse %s name the same file", outp, lsep);
  const char *ins[4] = {config, qp, kp, vp}, *inflags[4] = {"the config", "--q", "--k", "--v"};
  for (int o = 0; o < 2; o++) {
    const da__output *t = o ? (lsep ? &lo : NULL) : &oo;
    for (int i = 0; t && i < 4; i++)
      if (ins[i] && output_is(t, ins[i]))
        return fail(EXIT_INPUT, "%s %s is %s (%s): an output may not replace an input", o ? "--lse" : "-o",
                    o ? lsep : outp, inflags[i], ins[i]);
  }
  struct stat ost;
  if (stat(outp, &ost) == 0 && S_ISDIR(ost.st_mode)) return fail(EXIT_INPUT, "-o %s: is a folder", outp);
  if (lsep && stat(lsep, &ost) == 0 && S_ISDIR(ost.st_mode)) return fail(EXIT_INPUT, "--lse %s: is a folder", lsep);
  /* and their folders writable (a stream: itself): found now, not after the inputs were
   * read and the kernel ran */
  if (da__can_write_beside(outp) != 0)
    return fail(EXIT_INPUT, "-o %s: cannot write there: %s", outp, strerror(errno));
  if (lsep && da__can_write_beside(lsep) != 0)
    return fail(EXIT_INPUT, "--lse %s: cannot write there: %s", lsep, strerror(errno));

  da_spec spec;
  int rc = load_config(config, &spec);
  if (rc) return rc;
  da__npy_array q = {0}, k = {0}, v = {0};
  char msg[1024];
  const char *paths[3] = {qp, kp, vp}, *flags[3] = {"--q", "--k", "--v"};
  da__npy_array *arrs[3] = {&q, &k, &v};
  for (int i = 0; i < 3 && rc == EXIT_OK; i++) {
    da_status st = da__npy_load(paths[i], arrs[i], msg, sizeof msg);
    if (st != DA_OK) rc = fail(EXIT_INPUT, "%s %s", flags[i], msg);
  }
  if (rc == EXIT_OK) rc = check_array("--q", qp, &q, &spec, -1, -1, spec.num_heads, "num_heads");
  int64_t B = q.shape[0], N = q.shape[1];
  if (rc == EXIT_OK) rc = check_array("--k", kp, &k, &spec, B, N, spec.num_kv_heads, "num_kv_heads");
  if (rc == EXIT_OK) rc = check_array("--v", vp, &v, &spec, B, N, spec.num_kv_heads, "num_kv_heads");
  da_context *ctx = NULL;
  da_plan *plan = NULL;
  void *out = NULL;
  float *lse = NULL;
  double exec_ms = 0, plan_ms = 0;
  if (rc == EXIT_OK && da_context_create(&ctx) != DA_OK) rc = fail(EXIT_RUNTIME, "out of memory");
  if (rc == EXIT_OK) {
    plan_ms = da__now_ms();
    da_plan_options hint = {0, 0, 0, N, 0}; /* tuned parameters for this shape, if any */
    da_status st = da_plan_create_ex(ctx, &spec, backend, &hint, &plan);
    if (st == DA_ERR_UNSUPPORTED && backend == DA_BACKEND_AUTO && da__backend_env() == DA_BACKEND_AUTO &&
        !da__nvrtc_available()) {
      /* a GPU without NVRTC and a kernel no bundle holds: run owns its (host) arrays, so the
       * host backend may take them, as auto did before a GPU alone made CUDA available */
      da__log(DA_LOG_WARN, "%s; running on the host backend", da_context_last_error(ctx));
      st = da_plan_create_ex(ctx, &spec, DA_BACKEND_HOST, &hint, &plan);
    }
    if (st != DA_OK) rc = fail(run_exit_code(st), "%s: %s", config, da_context_last_error(ctx));
    plan_ms = da__now_ms() - plan_ms;
  }
  if (rc == EXIT_OK) {
    out = malloc(q.count * q.elem_size + 1);
    /* (B * H * N fits: the NPY reader refuses a shape whose nonzero dimensions' product
     * passes INT64_MAX, whatever its zeros) */
    lse = lsep ? malloc((size_t)B * (size_t)spec.num_heads * (size_t)N * sizeof(float) + 1) : NULL;
    if (!out || (lsep && !lse)) rc = fail(EXIT_RUNTIME, "out of memory for the output");
  }
  if (rc == EXIT_OK) {
    da_status st = execute_plan(ctx, plan, &spec, B, N, &q, &k, &v, out, lse, &exec_ms);
    if (st != DA_OK) rc = fail(run_exit_code(st), "run: %s", da_context_last_error(ctx));
  }
  if (rc == EXIT_OK) { /* both outputs or neither; an existing file is replaced only by a whole new one */
    out_file of[2] = {{.flag = "-o", .path = outp, .out = &oo},
                      {.flag = "--lse", .path = lsep, .out = &lo}};
    int nof = lsep ? 2 : 1;
    int64_t shp[3] = {B, spec.num_heads, N};
    rc = stage_output(&of[0], q.dtype, 4, q.shape, out);
    if (rc == EXIT_OK && lsep) rc = stage_output(&of[1], DA_NPY_F32, 3, shp, lse);
    if (rc == EXIT_OK) rc = commit_outputs(of, nof);
    cleanup_outputs(of, nof);
  }
  double density = -1;
  if (rc == EXIT_OK && da_plan_density(plan, N, &density) != DA_OK) density = -1;
  /* the summary line on stderr where an output went to stdout (-o /dev/stdout) */
  FILE *summary = da__output_is_stdout(&oo) || (lsep && da__output_is_stdout(&lo)) ? stderr : stdout;
  da_plan_options used = {0, 0, 0, 0, 0};
  if (rc == EXIT_OK) da_plan_get_options(plan, &used);
  /* where the kernel came from (a compile where any was made: a fallback's too) */
  da_kernel_cache_stats ks = {0};
  if (rc == EXIT_OK) da_context_kernel_cache_stats(ctx, &ks);
  const char *from = ks.builds ? "compiled" : ks.disk_hits ? "disk_cache" : ks.bundle_hits ? "bundle" : "memory";
  if (rc == EXIT_OK)
    fprintf(summary, "{\"kernel\":%s,\"backend\":\"%s\",\"strategy\":%s,\"batch\":%lld,"
           "\"seq_len\":%lld,\"num_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\",\"density\":%.6g,\"tile_q\":%d,\"tile_k\":%d,\"cuda_mma\":%d,"
           "\"kernel_from\":\"%s\",\"plan_ms\":%.1f,\"execute_ms\":%.2f,\"out\":%s,\"lse\":%s}\n",
           jstr(da_plan_kernel_name(plan), 0), da_plan_backend(plan) == DA_BACKEND_CUDA ? "cuda" : "host",
           jstr(da_plan_strategy(plan), 1), (long long)B, (long long)N, spec.num_heads, spec.head_dim,
           dtype_name(spec.dtype), density, used.tile_q, used.tile_k, used.cuda_mma, from, plan_ms, exec_ms, jstr(outp, 2),
           jstr(lsep, 3));
  da_plan_destroy(plan);
  da_context_destroy(ctx);
  da__npy_free(&q);
  da__npy_free(&k);
  da__npy_free(&v);
  free(out);
  free(lse);
  return rc;
}

static int cmd_info(void) {
  char cc_why[1200];
  const int cc_ok = da__host_cc_found(cc_why, sizeof cc_why); /* CC's first word, on PATH or a path */
  da_context *ctx = NULL;
  da_context_create(&ctx);
  int maj = 0, min = 0;
  char *nvrtc = NULL, *cuda = NULL, *limit = NULL; /* whole, however long the reasons */
  if (da__nvrtc_version(ctx, &maj, &min) == DA_OK)
    nvrtc = da__cli_sprintf("{\"available\":true,\"version\":\"%d.%d\"}", maj, min);
  else
    nvrtc = da__cli_sprintf("{\"available\":false,\"reason\":%s}", jstr(da_context_last_error(ctx), 4));
  da__cuda *dev = NULL;
  if (da__cuda_get(ctx, &dev) == DA_OK) {
    /* the instruction a plan takes by default (cuda_mma 0, no DILATTN_CUDA_MMA, no tuning
     * record) for the specs the wgmma path serves without a sparse layout (plan.c
     * da__default_mma, asked): others and sparse layouts may take another, README */
    da_plan_options eff;
    int fallbacks;
    const da_plan_options *dflt = da__default_mma(NULL, 0, da__cuda_wgmma_level(ctx), 0, &eff, &fallbacks);
    cuda = da__cli_sprintf("{\"available\":true,\"device\":%s,\"ordinal\":%d,\"arch\":%s,\"driver\":%d,"
                           "\"default_mma\":\"%s\",\"tma\":%s}",
                           jstr(da__cuda_device_name(dev), 5), da__cuda_device_ordinal(dev), jstr(da__cuda_arch(dev), 6),
                           da__cuda_driver_version(dev),
                           da__cuda_mma_name(dflt ? dflt->cuda_mma : 1), da__cuda_tmap_encoder(dev) ? "true" : "false");
  }
  else
    cuda = da__cli_sprintf("{\"available\":false,\"reason\":%s}", jstr(da_context_last_error(ctx), 5));
  /* the kernel cache's folder as the library chose it (null: none), and whether it is usable
   * (the context just opened it, creating it if it could) */
  char base[DA_CACHE_BASE_MAX + 1], root[DA_CACHE_BASE_MAX + 8];
  const size_t need = da__disk_cache_base(base, sizeof base);
  const int too_long = need > DA_CACHE_BASE_MAX; /* (then memory-only; cache_dir names it whole) */
  char *whole = too_long && need < SIZE_MAX ? malloc(need + 1) : NULL;
  if (whole) da__disk_cache_base(whole, need + 1);
  snprintf(root, sizeof root, "%s/v1", base);
  struct stat cst;
  int cache_usable =
      !too_long && base[0] && stat(root, &cst) == 0 && S_ISDIR(cst.st_mode) && access(root, W_OK | X_OK) == 0;
  const char *cache_dir = jstr(whole ? whole : base[0] ? base : NULL, 7);
  free(whole);
  /* the workspace limit plans would take: bytes, null (none), or why it is refused */
  size_t limit_bytes = SIZE_MAX;
  if (da__workspace_limit(ctx, &limit_bytes) != DA_OK)
    limit = da__cli_sprintf("{\"error\":%s}", jstr(da_context_last_error(ctx), 6));
  else if (limit_bytes < SIZE_MAX)
    limit = da__cli_sprintf("%zu", limit_bytes);
  else
    limit = da__cli_sprintf("null");
  printf("{\"version\":%s,\"lua\":%s,\"cache_schema\":%d,"
         "\"backends\":{\"host\":{\"available\":%s,\"cc\":%s%s%s},\"cuda\":%s},\"nvrtc\":%s,"
         "\"template_dir\":%s,\"cache_dir\":%s,\"cache_usable\":%s,\"cache_max_bytes\":%llu,\"workspace_limit\":%s,"
         "\"jit_disabled\":%s,\"bundle_artifacts\":%zu}\n",
         jstr(da_version(), 0), jstr(LUA_RELEASE, 1), DA_CACHE_SCHEMA_VERSION, cc_ok ? "true" : "false",
         jstr(da__host_cc(), 2), cc_ok ? "" : ",\"reason\":", cc_ok ? "" : jstr(cc_why, 4), cuda, nvrtc, jstr(getenv("DILATTN_TEMPLATE_DIR"), 3),
         cache_dir, cache_usable ? "true" : "false", (unsigned long long)da__disk_cache_max_bytes(), limit,
         da__jit_disabled() ? "true" : "false", da__bundles_count(da__context_kernels(ctx)->bundles));
  free(nvrtc), free(cuda), free(limit);
  da_context_destroy(ctx);
  return EXIT_OK;
}

static void print_entry(void *user, const char *arch, const char *key, uint64_t size, int64_t mtime,
                        const char *json) {
  (void)user;
  /* the entry's own metadata (parsed: a damaged or multi-line .json stays one line of
   * valid JSON) plus where it is, as its file names say, and how big it is on disk */
  json_t *o = json ? json_loads(json, 0, NULL) : NULL;
  if (!json_is_object(o)) {
    json_decref(o);
    o = json_object();
  }
  if (!o) return;
  json_object_set_new(o, "arch", json_string(arch));
  json_object_set_new(o, "key", json_string(key));
  json_object_set_new(o, "disk_bytes", json_integer((json_int_t)size));
  json_object_set_new(o, "last_used", json_integer((json_int_t)mtime));
  char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (line) printf("%s\n", line);
  free(line);
  json_decref(o);
}

/* Why the cache folder root (".../v1") cannot be used, for the error message. */
static const char *cache_unusable_why(const char *base, size_t need, const char *root) {
  struct stat st;
  if (need > DA_CACHE_BASE_MAX) return "its name is too long for the cache's entries";
  if (!base[0]) return "no DILATTN_CACHE_DIR, XDG_CACHE_HOME or HOME is set";
  if (stat(root, &st) != 0) return strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a folder";
  if (access(root, W_OK | X_OK) != 0) return strerror(errno);
  return "not usable";
}

static int cmd_cache(int argc, char **argv) {
  if (argc < 1) return fail(EXIT_INPUT, "cache: expected stats, list, verify or clear");
  const char *sub = argv[0];
  int stats = !strcmp(sub, "stats"), list = !strcmp(sub, "list"), verify = !strcmp(sub, "verify"),
      clear = !strcmp(sub, "clear");
  if (!(stats || list || verify || clear)) return fail(EXIT_INPUT, "cache: unknown command '%s' (stats|list|verify|clear)", sub);
  if (argc > 1) return fail(EXIT_INPUT, "cache %s: unexpected argument %s", sub, argv[1]);
  da__disk_cache *dc = da__disk_cache_open();
  if (!dc) return fail(EXIT_RUNTIME, "out of memory");
  if (!da__disk_cache_usable(dc)) { /* a cache the library cannot use: nothing to report, nothing done */
    char base[DA_CACHE_BASE_MAX + 1];
    const size_t need = da__disk_cache_base(base, sizeof base);
    int rc = fail(EXIT_RUNTIME, "cache %s: the kernel cache folder %s cannot be used: %s (DILATTN_CACHE_DIR)", sub,
                  base[0] ? da__disk_cache_root(dc) : "(none)", cache_unusable_why(base, need, da__disk_cache_root(dc)));
    da__disk_cache_close(dc);
    return rc;
  }
  /* list: one object per entry and nothing else (the totals are `stats`); clear: what it
   * removed (removed, removed_bytes) and what is left (entries, bytes), read again after */
  da__disk_cache_summary sum, after;
  da__disk_cache_scan(dc, verify, clear, list ? print_entry : NULL, NULL, &sum);
  int rc = EXIT_OK;
  if (verify && sum.removed < sum.corrupt)
    rc = fail(EXIT_RUNTIME, "cache verify: %llu corrupt entries in %s could not be removed",
              (unsigned long long)(sum.corrupt - sum.removed), da__disk_cache_root(dc));
  if (clear) {
    da__disk_cache_scan(dc, 0, 0, NULL, NULL, &after);
    if (after.entries)
      rc = fail(EXIT_RUNTIME, "cache clear: %llu entries are in %s after the clear (not removable, or added meanwhile)",
                (unsigned long long)after.entries, da__disk_cache_root(dc));
  }
  if (!list) {
    const da__disk_cache_summary *now = clear ? &after : &sum;
    printf("{\"cache_dir\":%s,\"usable\":true,\"entries\":%llu,\"bytes\":%llu,\"max_bytes\":%llu",
           jstr(da__disk_cache_root(dc), 0), (unsigned long long)now->entries, (unsigned long long)now->bytes,
           (unsigned long long)da__disk_cache_max_bytes());
    if (verify) printf(",\"corrupt\":%llu,\"removed\":%llu", (unsigned long long)sum.corrupt, (unsigned long long)sum.removed);
    if (clear)
      printf(",\"removed\":%llu,\"removed_bytes\":%llu", (unsigned long long)sum.removed, /* the clear's own count */
             (unsigned long long)sum.removed_bytes);
    printf("}\n");
  }
  da__disk_cache_close(dc);
  return rc;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) return usage();
  const char *cmd = argv[1];
  for (int i = 1; i < argc; i++) {
    /* `dilattn gen --help`; not the value of an option (`-o -h`: a folder), and a file
     * named help is still one */
    const char *prev = argv[i - 1];
    const int value = i > 1 && prev[0] == '-' && strcmp(prev, "--report") && strcmp(prev, "--compile") &&
                      strcmp(prev, "--version") && !is_help(prev);
    if (is_help(argv[i]) && !value && (i == 1 || strcmp(argv[i], "help"))) {
      usage_to(stdout);
      return EXIT_OK;
    }
  }
  if (!strcmp(cmd, "gen")) return cmd_gen(argc - 2, argv + 2);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if ((!strcmp(cmd, "info") || !strcmp(cmd, "--version") || !strcmp(cmd, "version")) && argc > 2)
    return fail(EXIT_INPUT, "%s: unexpected argument %s", cmd, argv[2]);
  if (!strcmp(cmd, "info")) return cmd_info();
  if (!strcmp(cmd, "cache")) return cmd_cache(argc - 2, argv + 2);
  if (!strcmp(cmd, "tune")) return da__cmd_tune(argc - 2, argv + 2);
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("dilattn %s\n", da_version());
    return EXIT_OK;
  }
  fprintf(stderr, "dilattn: error: unknown command '%s'\n", cmd);
  return usage();
}

/* A command whose standard output could not be written (a full disk, /dev/full, a closed
 * descriptor) failed, whatever it did: exit 2 like any output that cannot be written. */
int main(int argc, char **argv) {
  /* a pipe's reader gone (`dilattn run -o /dev/stdout | head -c 10`, a FIFO's): EPIPE from
   * the write, said and rolled back, not a silent death by SIGPIPE half-way through */
  signal(SIGPIPE, SIG_IGN);
  /* the file size limit (ulimit -f) reached: EFBIG from the write, said, and nothing
   * replaced, not a death by SIGXFSZ that left the temp files */
  signal(SIGXFSZ, SIG_IGN);
  int rc = dispatch(argc, argv);
  errno = 0;
  int bad = fflush(stdout) != 0;
  bad = ferror(stdout) || bad;
  if (bad) {
    int e = errno;
    fprintf(stderr, "dilattn: error: cannot write to standard output%s%s\n", e ? ": " : "", e ? strerror(e) : "");
    if (rc == EXIT_OK) rc = EXIT_INPUT;
  }
  return rc;
}
