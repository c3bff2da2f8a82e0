/* nvrtc.c - compile CUDA C++ to a cubin with NVRTC. libnvrtc is opened once per process
 * with dlopen and the few entry points we use are declared here (nvrtc.h is never
 * included, nothing is linked), so the library builds and runs without CUDA; a missing
 * NVRTC is DA_ERR_UNSUPPORTED with the list of what was tried. Each compile asks ptxas
 * for its resource report (-v) and parses registers, spills, static shared memory and
 * stack out of the log. A failing source is dumped for inspection and named in the
 * error, as is every source when DILATTN_DUMP_DIR is set. */
#define _GNU_SOURCE
#include "runtime/nvrtc.h"

#include "runtime/fileio.h"
#include "runtime/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The subset of nvrtc.h we use; the ABI is plain C. */
typedef int nvrtcResult;
typedef struct da__nvrtc_program *nvrtcProgram;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };

static struct {
  int ok;
  int major, minor;
  char error[2048]; /* why NVRTC is unusable (when !ok) */
  char path[512];   /* what was opened */
  int n_archs;
  int archs[64]; /* nvrtcGetSupportedArchs, when the library has it */
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int *, int *);
  nvrtcResult (*GetNumSupportedArchs)(int *);
  nvrtcResult (*GetSupportedArchs)(int *);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*SetFlowCallback)(nvrtcProgram, int (*)(void *, void *), void *); /* 12.x+ */
} g;

/* Cancellation (da__nvrtc_set_cancel): NVRTC polls this through its flow callback. */
static _Thread_local volatile int *tl_cancel;

void da__nvrtc_set_cancel(volatile int *flag) { tl_cancel = flag; }

static int flow_callback(void *payload, void *reserved) {
  (void)reserved;
  volatile int *flag = payload;
  return flag && *flag ? 1 : 0;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void append(char *buf, size_t cap, const char *text) {
  size_t n = strlen(buf);
  if (n + 1 < cap) snprintf(buf + n, cap - n, "%s", text);
}

/* dlopen path, recording it in tried. */
static void *try_open(const char *path, char *tried, size_t cap, char *last_err, size_t err_cap) {
  if (tried[0]) append(tried, cap, ", ");
  append(tried, cap, path);
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    snprintf(last_err, err_cap, "%s", e ? e : "unknown dlopen error");
  } else {
    snprintf(g.path, sizeof g.path, "%s", path);
  }
  return dl;
}

/* libnvrtc.so* in dir, highest name first (libnvrtc.so.13 before libnvrtc.so). */
static void *try_dir(const char *dir, char *tried, size_t cap, char *last_err, size_t err_cap) {
  if (!dir || !*dir) return NULL;
  char pattern[600];
  snprintf(pattern, sizeof pattern, "%s/libnvrtc.so*", dir);
  glob_t gl;
  void *dl = NULL;
  if (glob(pattern, 0, NULL, &gl) == 0) {
    for (size_t i = gl.gl_pathc; i-- > 0 && !dl;)
      dl = try_open(gl.gl_pathv[i], tried, cap, last_err, err_cap);
    globfree(&gl);
  }
  return dl;
}

static int load_sym(void *dl, const char *name, void *slot, int required, char *missing,
                    size_t cap) {
  void *p = dlsym(dl, name);
  memcpy(slot, &p, sizeof p);
  if (!p && required) {
    if (missing[0]) append(missing, cap, ", ");
    append(missing, cap, name);
    return 0;
  }
  return 1;
}

static void nvrtc_init(void) {
  char tried[1024] = "", last_err[512] = "";
  void *dl = NULL;
  const char *env = getenv("DILATTN_NVRTC_LIB");
  if (env && *env) {
    dl = try_open(env, tried, sizeof tried, last_err, sizeof last_err);
  } else {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !dl; i++)
      dl = try_open(names[i], tried, sizeof tried, last_err, sizeof last_err);
    char dir[520];
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH")};
    for (int i = 0; i < 2 && !dl; i++) {
      if (!roots[i] || !*roots[i]) continue;
      snprintf(dir, sizeof dir, "%s/lib64", roots[i]);
      dl = try_dir(dir, tried, sizeof tried, last_err, sizeof last_err);
    }
    if (!dl) dl = try_dir("/usr/local/cuda/lib64", tried, sizeof tried, last_err, sizeof last_err);
  }
  if (!dl) {
    snprintf(g.error, sizeof g.error,
             "NVRTC not available: could not load libnvrtc (tried %s%s; last error: %s). "
             "Install the CUDA toolkit's NVRTC or set DILATTN_NVRTC_LIB to its path.",
             tried[0] ? tried : "nothing", env && *env ? " from DILATTN_NVRTC_LIB" : "",
             last_err[0] ? last_err : "none");
    return;
  }
  char missing[512] = "";
  int ok = 1;
  ok &= load_sym(dl, "nvrtcGetErrorString", &g.GetErrorString, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcVersion", &g.Version, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcCreateProgram", &g.CreateProgram, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcDestroyProgram", &g.DestroyProgram, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcCompileProgram", &g.CompileProgram, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcGetCUBINSize", &g.GetCUBINSize, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcGetCUBIN", &g.GetCUBIN, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcGetProgramLogSize", &g.GetProgramLogSize, 1, missing, sizeof missing);
  ok &= load_sym(dl, "nvrtcGetProgramLog", &g.GetProgramLog, 1, missing, sizeof missing);
  load_sym(dl, "nvrtcGetNumSupportedArchs", &g.GetNumSupportedArchs, 0, missing, sizeof missing);
  load_sym(dl, "nvrtcGetSupportedArchs", &g.GetSupportedArchs, 0, missing, sizeof missing);
  load_sym(dl, "nvrtcSetFlowCallback", &g.SetFlowCallback, 0, missing, sizeof missing);
  if (!ok) {
    snprintf(g.error, sizeof g.error,
             "NVRTC not usable: %s lacks %s (NVRTC 11.1 or newer is needed)", g.path, missing);
    dlclose(dl);
    return;
  }
  if (g.Version(&g.major, &g.minor) != NVRTC_SUCCESS) {
    snprintf(g.error, sizeof g.error, "NVRTC not usable: nvrtcVersion failed in %s", g.path);
    dlclose(dl);
    return;
  }
  int n = 0;
  if (g.GetNumSupportedArchs && g.GetSupportedArchs && g.GetNumSupportedArchs(&n) == NVRTC_SUCCESS &&
      n > 0 && n <= (int)(sizeof g.archs / sizeof g.archs[0]) &&
      g.GetSupportedArchs(g.archs) == NVRTC_SUCCESS)
    g.n_archs = n;
  g.ok = 1; /* dl stays open for the life of the process */
}

static da_status ensure(const da_context *ctx) {
  pthread_once(&g_once, nvrtc_init);
  DA_RETURN_IF(!g.ok, DA_ERR_UNSUPPORTED, "%s", g.error);
  return DA_OK;
}

int da__nvrtc_available(void) {
  pthread_once(&g_once, nvrtc_init);
  return g.ok;
}

da_status da__nvrtc_version(const da_context *ctx, int *major, int *minor) {
  DA_TRY(ensure(ctx));
  if (major) *major = g.major;
  if (minor) *minor = g.minor;
  return DA_OK;
}

/* ---- ptxas -v report ------------------------------------------------------------ */

/* The decimal number that ends just before at (spaces skipped), or -1. */
static long num_before(const char *begin, const char *at) {
  const char *p = at;
  while (p > begin && p[-1] == ' ') p--;
  const char *end = p;
  while (p > begin && p[-1] >= '0' && p[-1] <= '9') p--;
  if (p == end || end - p > 12) return -1;
  return strtol(p, NULL, 10);
}

static int max_int(int a, long b) { return b > a ? (int)b : a; }

void da__nvrtc_parse_ptxas(const char *log, da__nvrtc_result *r) {
  int regs = -1, smem = -1, stack = -1, spill = -1, serialized = 0;
  const char *line = log ? log : "";
  while (*line) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char buf[1024];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, line, n);
    buf[n] = '\0';
    /* "ptxas info    : Used 40 registers, used 0 barriers, 384 bytes smem, 400 bytes cmem[0]" */
    const char *used = strstr(buf, "Used ");
    const char *reg = used ? strstr(used, " registers") : NULL;
    if (reg) {
      long v = num_before(buf, reg);
      if (v >= 0) {
        regs = max_int(regs, v);
        const char *sm = strstr(buf, " bytes smem");
        smem = max_int(smem, sm ? num_before(buf, sm) : 0);
      }
    }
    /* "(C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized ...",
     * "(C7517) ... warpgroup.wait is injected ..." */
    if ((strstr(buf, "wgmma") && strstr(buf, "serialized")) || strstr(buf, "warpgroup.wait is injected")) serialized++;
    /* "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads" */
    const char *sf = strstr(buf, " bytes stack frame");
    if (sf) {
      long v = num_before(buf, sf);
      if (v >= 0) stack = max_int(stack, v);
      const char *ss = strstr(buf, " bytes spill stores");
      const char *sl = strstr(buf, " bytes spill loads");
      long a = ss ? num_before(buf, ss) : 0, b = sl ? num_before(buf, sl) : 0;
      if (spill < 0) spill = 0;
      if (a > 0) spill += (int)a;
      if (b > 0) spill += (int)b;
    }
    line += len;
    if (*line == '\n') line++;
  }
  r->registers = regs;
  r->shared_bytes = smem;
  r->stack_bytes = stack;
  r->spill_bytes = spill;
  r->wgmma_serialized = serialized;
}

/* ---- dumps ---------------------------------------------------------------------- */

/* A file name from name: '/' and control characters replaced, never empty or dots. */
static void safe_name(const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s", name);
  for (char *p = out; *p; p++)
    if (*p == '/' || (unsigned char)*p < 0x20) *p = '_';
  if (!out[0] || !strcmp(out, ".") || !strcmp(out, "..")) snprintf(out, cap, "kernel.cu");
}

/* Write data to dir/file atomically (temp file in dir, then rename). 0 or errno. */
static int write_file(const char *dir, const char *file, const char *data, size_t len) {
  char tmp[4400], path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, file);
  int fd = mkstemp(tmp);
  if (fd < 0) return errno;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      unlink(tmp);
      return e;
    }
    done += (size_t)w;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return e;
  }
  return 0;
}

/* Dump source (and log, when given) as <name> and <name>.log into $DILATTN_DUMP_DIR, or
 * into a fresh folder under $TMPDIR or /tmp when fresh_if_unset. On success path holds
 * the source's path; on failure why holds the reason. Returns 0 on success. */
static int dump(const char *name, const char *source, const char *log, int fresh_if_unset,
                char *path, size_t path_cap, char *why, size_t why_cap) {
  char file[256], dir[4096];
  safe_name(name, file, sizeof file);
  const char *env = getenv("DILATTN_DUMP_DIR");
  if (env && *env) {
    snprintf(dir, sizeof dir, "%s", env);
    if (da__mkdir_p(dir, 0700) != 0) {
      snprintf(why, why_cap, "cannot create %s: %s", dir, strerror(errno));
      return -1;
    }
  } else {
    if (!fresh_if_unset) return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dilattn-nvrtc-XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
      snprintf(why, why_cap, "cannot create a folder %s: %s", dir, strerror(errno));
      return -1;
    }
  }
  char named[sizeof file]; /* (a variant of the kernel dumped before keeps its file) */
  da__dump_file_name(dir, file, source, named, sizeof named);
  memcpy(file, named, sizeof file);
  int e = write_file(dir, file, source, strlen(source));
  if (e == 0 && log) {
    char lname[300];
    snprintf(lname, sizeof lname, "%s.log", file);
    e = write_file(dir, lname, log, strlen(log));
  }
  if (e != 0) {
    snprintf(why, why_cap, "cannot write %s/%s: %s", dir, file, strerror(e));
    return -1;
  }
  snprintf(path, path_cap, "%s/%s", dir, file);
  return 0;
}

/* ---- compile -------------------------------------------------------------------- */

/* Check arch is "sm_<digits>[a]" (no leading zero; "a", the arch-specific features, from
 * sm_90 on: sm_80a is no target) and one NVRTC can target. */
static da_status check_arch(const da_context *ctx, const char *arch) {
  DA_RETURN_IF(strlen(arch) >= sizeof(((da__nvrtc_result *)0)->arch) || strncmp(arch, "sm_", 3) != 0 ||
                   arch[3] < '1' || arch[3] > '9',
               DA_ERR_INVALID_ARGUMENT, "nvrtc: arch '%s' is not of the form sm_XY (a cubin target)",
               arch);
  char *end;
  const long cc = strtol(arch + 3, &end, 10);
  DA_RETURN_IF(*end && strcmp(end, "a"), DA_ERR_INVALID_ARGUMENT,
               "nvrtc: arch '%s' is not of the form sm_XY or sm_XYa (a cubin target)", arch);
  DA_RETURN_IF(*end && cc < 90, DA_ERR_UNSUPPORTED,
               "nvrtc: %s: arch-specific targets ('a') start at sm_90 (sm_90a); use sm_%ld", arch, cc);
  if (g.n_archs == 0) return DA_OK; /* the library cannot tell us; let NVRTC decide */
  char list[512] = "";
  for (int i = 0; i < g.n_archs; i++) {
    if (g.archs[i] == cc) return DA_OK;
    char item[16];
    snprintf(item, sizeof item, "%ssm_%d", i ? ", " : "", g.archs[i]);
    append(list, sizeof list, item);
  }
  return da__set_error(ctx, DA_ERR_UNSUPPORTED, "nvrtc: NVRTC %d.%d cannot target %s (it supports %s)",
                       g.major, g.minor, arch, list);
}

da_status da__nvrtc_check_arch(const da_context *ctx, const char *arch) {
  DA_RETURN_IF(!arch, DA_ERR_INVALID_ARGUMENT, "nvrtc: NULL arch");
  DA_TRY(ensure(ctx));
  return check_arch(ctx, arch);
}

static char *program_log(nvrtcProgram prog) {
  size_t n = 0;
  if (g.GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
  char *log = malloc(n + 1);
  if (!log) return NULL;
  log[0] = '\0';
  if (n > 0 && g.GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
  log[n] = '\0';
  return log;
}

da_status da__nvrtc_compile(const da_context *ctx, const char *source, const char *name,
                            const char *arch, const char *const *extra_opts, int n_extra,
                            da__nvrtc_result *out) {
  DA_RETURN_IF(!source || !name || !arch || !out || n_extra < 0 || (n_extra > 0 && !extra_opts),
               DA_ERR_INVALID_ARGUMENT, "nvrtc: NULL argument or negative option count");
  DA_TRY(ensure(ctx));
  DA_TRY(check_arch(ctx, arch));
  for (int i = 0; i < n_extra; i++)
    DA_RETURN_IF(!extra_opts[i], DA_ERR_INVALID_ARGUMENT, "nvrtc: extra option %d is NULL", i);

  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  /* NVRTC 12.9 and later keep their own cache of compiled code (in the driver's compute
   * cache, so only where a driver is installed) and on a hit run no ptxas, so the log has no
   * ptxas report: no registers, no spills, and a warp-specialized kernel's register check
   * fails. Our own caches already keep every cubin; --no-cache makes each compile report. */
  int no_cache = g.major > 12 || (g.major == 12 && g.minor >= 9);
  int n_base = 4 + no_cache, n_opts = n_base + n_extra;
  const char **opts = malloc(sizeof *opts * (size_t)n_opts);
  DA_RETURN_IF(!opts, DA_ERR_NO_MEMORY, "nvrtc: out of memory");
  opts[0] = arch_opt;
  opts[1] = "-std=c++17";
  opts[2] = "-default-device";
  opts[3] = "--ptxas-options=-v";
  if (no_cache) opts[4] = "--no-cache";
  for (int i = 0; i < n_extra; i++) opts[n_base + i] = extra_opts[i];

  nvrtcProgram prog = NULL;
  nvrtcResult rc = g.CreateProgram(&prog, source, name, 0, NULL, NULL);
  if (rc != NVRTC_SUCCESS) {
    free(opts);
    return da__set_error(ctx, rc == NVRTC_ERROR_OUT_OF_MEMORY ? DA_ERR_NO_MEMORY : DA_ERR_INTERNAL,
                         "nvrtc: nvrtcCreateProgram(%s) failed: %s", name, g.GetErrorString(rc));
  }
  volatile int *cancel = tl_cancel;
  if (cancel && g.SetFlowCallback) g.SetFlowCallback(prog, flow_callback, (void *)cancel);
  if (cancel && *cancel) {
    free(opts);
    g.DestroyProgram(&prog);
    return da__set_error(ctx, DA_ERR_CANCELLED, "nvrtc: compiling %s cancelled", name);
  }
  double t0 = da__now_ms();
  rc = g.CompileProgram(prog, n_opts, opts);
  double ms = da__now_ms() - t0;
  free(opts);
  if (rc == 16 /* NVRTC_ERROR_CANCELLED */) {
    g.DestroyProgram(&prog);
    return da__set_error(ctx, DA_ERR_CANCELLED, "nvrtc: compiling %s cancelled", name);
  }
  char *log = program_log(prog);
  if (!log) {
    g.DestroyProgram(&prog);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "nvrtc: out of memory reading the log of %s", name);
  }

  if (rc != NVRTC_SUCCESS) {
    g.DestroyProgram(&prog);
    char path[4400] = "", why[4400] = "";
    int dumped = dump(name, source, log, 1, path, sizeof path, why, sizeof why) == 0;
    da_status st = da__set_error(
        ctx, rc == NVRTC_ERROR_OUT_OF_MEMORY ? DA_ERR_NO_MEMORY : DA_ERR_COMPILE,
        "nvrtc: compiling %s for %s failed (%s); %s%s:\n%s", name, arch, g.GetErrorString(rc),
        dumped ? "source kept at " : "source not kept: ", dumped ? path : why,
        log[0] ? log : "(empty NVRTC log)");
    free(log);
    return st;
  }

  size_t size = 0;
  void *cubin = NULL;
  rc = g.GetCUBINSize(prog, &size);
  if (rc == NVRTC_SUCCESS && size > 0) {
    cubin = malloc(size);
    if (cubin && g.GetCUBIN(prog, cubin) != NVRTC_SUCCESS) {
      free(cubin);
      cubin = NULL;
      rc = -1;
    }
  }
  g.DestroyProgram(&prog);
  if (!cubin) {
    free(log);
    if (rc == NVRTC_SUCCESS && size > 0)
      return da__set_error(ctx, DA_ERR_NO_MEMORY, "nvrtc: out of memory for the cubin of %s", name);
    return da__set_error(ctx, DA_ERR_INTERNAL, "nvrtc: no cubin for %s (%s)", name,
                         rc == NVRTC_SUCCESS ? "empty" : (rc < 0 ? "nvrtcGetCUBIN failed" : g.GetErrorString(rc)));
  }

  char path[4400], why[4400];
  /* DILATTN_DUMP_DIR: best effort, a warning (once) where it cannot be written */
  static int dump_warned;
  if (dump(name, source, NULL, 0, path, sizeof path, why, sizeof why) != 0 && getenv("DILATTN_DUMP_DIR") &&
      *getenv("DILATTN_DUMP_DIR") && !__atomic_exchange_n(&dump_warned, 1, __ATOMIC_RELAXED))
    da__log(DA_LOG_WARN, "DILATTN_DUMP_DIR: %s (sources are not dumped)", why);

  memset(out, 0, sizeof *out);
  out->cubin = cubin;
  out->cubin_size = size;
  out->log = log;
  out->compile_ms = ms;
  snprintf(out->arch, sizeof out->arch, "%s", arch);
  da__nvrtc_parse_ptxas(log, out);
  return DA_OK;
}

void da__nvrtc_result_free(da__nvrtc_result *r) {
  if (!r) return;
  free(r->cubin);
  free(r->log);
  memset(r, 0, sizeof *r);
}
