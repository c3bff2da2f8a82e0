/* Run (from the repository root): cc -std=gnu11 -Wall -Wextra -g -Iinclude -I. runtime/nvrtc.c runtime/cuda_driver.c runtime/status.c tests/test_nvrtc.c -ldl -lpthread -o /tmp/test_nvrtc && /tmp/test_nvrtc
 *
 * test_nvrtc.c - tests of the run-time CUDA layers: runtime/nvrtc.c (NVRTC through
 * dlopen: version, cubins for sm_80 and sm_90 with a parsed ptxas report, a forced spill,
 * a syntax error with its log and kept source, DILATTN_DUMP_DIR, concurrent compiles,
 * the ptxas parser on canned logs) and runtime/cuda_driver.c (without a GPU: a clear
 * DA_ERR_UNSUPPORTED; with one: malloc, copies, and an add-one kernel end to end). The
 * "absent" messages depend on once-per-process initialization, so the test re-runs its
 * own binary with DILATTN_NVRTC_LIB / DILATTN_CUDA_LIB set (--child-absent,
 * --child-stub). Without NVRTC the compile checks are skipped (DILATTN_TEST_REQUIRE_NVRTC=1
 * makes that a failure). Exits nonzero on any failure; the last line is
 * "N passed, M failed". In the CMake build: ctest --test-dir build -R test_nvrtc
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cuda_driver.h"
#include "runtime/nvrtc.h"
#include "test_util.h"

/* the shared check/report harness, under the name these tests use */
#define CHECK TU_CHECK

static const char *last(void) { return da_context_last_error(NULL); }

static const char *k_tiny =
    "extern \"C\" __global__ void tiny(float *x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] = x[i] * 2.0f + 1.0f;\n"
    "}\n";

/* A 64-float per-thread array indexed by data: lives on the stack, and spills under a
 * tight register limit. */
static const char *k_hungry =
    "extern \"C\" __global__ void hungry(const float *in, float *out, const int *idx, int n) {\n"
    "  float a[64];\n"
    "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  #pragma unroll\n"
    "  for (int i = 0; i < 64; i++) a[i] = in[t * 64 + i] * (float)(i + 1);\n"
    "  float acc = 0.f;\n"
    "  for (int j = 0; j < n; j++) {\n"
    "    int k = idx[j] & 63;\n"
    "    a[k] += acc;\n"
    "    acc = acc * 0.5f + a[(k * 7) & 63];\n"
    "  }\n"
    "  #pragma unroll\n"
    "  for (int i = 0; i < 64; i++) acc += a[i] * a[63 - i];\n"
    "  out[t] = acc;\n"
    "}\n";

static const char *k_add_one =
    "extern \"C\" __global__ void add_one(int *x, int n) {\n"
    "  extern __shared__ int pad[];\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (threadIdx.x == 0) pad[0] = 1;\n"
    "  __syncthreads();\n"
    "  if (i < n) x[i] += pad[0];\n"
    "}\n";

static int file_has(const char *path, const char *text) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strcmp(buf, text) == 0;
}

static void remove_tree1(const char *dir, const char *const *files) {
  char p[4400];
  for (int i = 0; files[i]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    unlink(p);
  }
  rmdir(dir);
}

/* ---- ptxas report parser on canned logs ------------------------------------------ */
static void test_parser(void) {
  da__nvrtc_result r;
  const char *cuda13 =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
      "ptxas info    : Function properties for k\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 384 bytes smem, 364 bytes cmem[0]\n"
      "ptxas info    : Compile time = 3.932 ms\n";
  da__nvrtc_parse_ptxas(cuda13, &r);
  CHECK(r.registers == 40 && r.spill_bytes == 20 && r.shared_bytes == 384 && r.stack_bytes == 16,
        "cuda13 log: regs %d spill %d smem %d stack %d", r.registers, r.spill_bytes, r.shared_bytes,
        r.stack_bytes);
  const char *old = /* older ptxas: no barrier count, no smem when 0, two functions */
      "ptxas info    : Compiling entry function 'a' for 'sm_80'\n"
      "ptxas info    : Function properties for a\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, 352 bytes cmem[0]\n"
      "ptxas info    : Function properties for helper\n"
      "    32 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'b' for 'sm_80'\n"
      "ptxas info    : Used 96 registers, 1024 bytes smem, 352 bytes cmem[0]";
  da__nvrtc_parse_ptxas(old, &r);
  CHECK(r.registers == 96 && r.spill_bytes == 8 && r.shared_bytes == 1024 && r.stack_bytes == 32,
        "old log: regs %d spill %d smem %d stack %d", r.registers, r.spill_bytes, r.shared_bytes,
        r.stack_bytes);
  CHECK(r.wgmma_serialized == 0, "old log: %d wgmma notes", r.wgmma_serialized);
  const char *serial = /* CUDA 13 ptxas on an sm_90a kernel whose accumulators are touched in flight */
      "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline "
      "stage in the function 'k'\n"
      "ptxas info    : (C7517) Potential Performance Loss: warpgroup.wait is injected in the function 'k'\n"
      "ptxas info    : Used 206 registers, used 1 barriers\n";
  da__nvrtc_parse_ptxas(serial, &r);
  CHECK(r.wgmma_serialized == 2 && r.registers == 206, "serialized log: %d notes, %d regs", r.wgmma_serialized,
        r.registers);
  da__nvrtc_parse_ptxas("", &r);
  CHECK(r.registers == -1 && r.spill_bytes == -1 && r.shared_bytes == -1 && r.stack_bytes == -1,
        "empty log: %d %d %d %d", r.registers, r.spill_bytes, r.shared_bytes, r.stack_bytes);
  da__nvrtc_parse_ptxas("bad.cu(1): error: expected a \";\"\nUsed registers\n", &r);
  CHECK(r.registers == -1 && r.spill_bytes == -1, "error log: %d %d", r.registers, r.spill_bytes);
}

/* ---- NVRTC ------------------------------------------------------------------------ */
static void check_cubin(const da__nvrtc_result *r, const char *arch) {
  CHECK(r->cubin && r->cubin_size > 64 && !memcmp(r->cubin, "\x7f" "ELF", 4),
        "%s: cubin of %zu bytes is not an ELF image", arch, r->cubin_size);
  CHECK(r->registers >= 1, "%s: registers %d", arch, r->registers);
  CHECK(r->spill_bytes == 0, "%s: spill_bytes %d", arch, r->spill_bytes);
  CHECK(r->shared_bytes >= 0 && r->stack_bytes >= 0, "%s: smem %d stack %d", arch,
        r->shared_bytes, r->stack_bytes);
  CHECK(!strcmp(r->arch, arch), "arch '%s' vs '%s'", r->arch, arch);
  CHECK(r->compile_ms > 0, "%s: compile_ms %f", arch, r->compile_ms);
  CHECK(r->log && strstr(r->log, "ptxas info"), "%s: log without ptxas report: %s", arch,
        r->log ? r->log : "(null)");
}

static void test_compile(void) {
  const char *archs[] = {"sm_80", "sm_90", "sm_90a"};
  for (int i = 0; i < 3; i++) {
    da__nvrtc_result r;
    da_status st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", archs[i], NULL, 0, &r);
    CHECK(st == DA_OK, "tiny for %s: %s: %s", archs[i], da_status_name(st), last());
    if (st != DA_OK) continue;
    check_cubin(&r, archs[i]);
    printf("tiny %s: %d registers, %d spill, %d smem, %d stack, %zu bytes, %.1f ms\n", archs[i],
           r.registers, r.spill_bytes, r.shared_bytes, r.stack_bytes, r.cubin_size, r.compile_ms);
    da__nvrtc_result_free(&r);
    CHECK(!r.cubin && !r.log, "free leaves pointers");
  }

  /* The same source again: a compile NVRTC could serve from its own cache (12.9 and later,
   * where a driver is installed) must still carry ptxas's report, which the register check of
   * the warp-specialized kernels and gen --report read (on a GPU machine, without --no-cache,
   * this one had no report: registers -1). */
  for (int again = 0; again < 2; again++) {
    da__nvrtc_result r;
    da_status st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", "sm_90a", NULL, 0, &r);
    CHECK(st == DA_OK, "tiny for sm_90a again: %s", last());
    if (st != DA_OK) continue;
    check_cubin(&r, "sm_90a");
    da__nvrtc_result_free(&r);
  }

  /* Local array: a stack frame; under --maxrregcount=16 it also spills. */
  da__nvrtc_result r;
  da_status st = da__nvrtc_compile(NULL, k_hungry, "hungry.cu", "sm_80", NULL, 0, &r);
  CHECK(st == DA_OK, "hungry: %s", last());
  if (st == DA_OK) {
    CHECK(r.stack_bytes > 0, "hungry: stack_bytes %d", r.stack_bytes);
    da__nvrtc_result_free(&r);
  }
  const char *tight[] = {"--maxrregcount=16"};
  st = da__nvrtc_compile(NULL, k_hungry, "hungry.cu", "sm_80", tight, 1, &r);
  CHECK(st == DA_OK, "hungry tight: %s", last());
  if (st == DA_OK) {
    CHECK(r.spill_bytes > 0 && r.stack_bytes > 0, "hungry tight: spill %d stack %d\n%s",
          r.spill_bytes, r.stack_bytes, r.log);
    printf("hungry --maxrregcount=16: %d registers, %d spill, %d stack\n", r.registers,
           r.spill_bytes, r.stack_bytes);
    da__nvrtc_result_free(&r);
  }

  /* Syntax error: DA_ERR_COMPILE, NVRTC's text, and the kept source. */
  const char *bad = "extern \"C\" __global__ void k(int *x) { x[0] = 1 }\n";
  memset(&r, 0x5a, sizeof r);
  st = da__nvrtc_compile(NULL, bad, "bad_kernel.cu", "sm_80", NULL, 0, &r);
  CHECK(st == DA_ERR_COMPILE, "syntax error gave %s: %s", da_status_name(st), last());
  CHECK(((unsigned char *)&r)[0] == 0x5a, "output written on failure");
  const char *msg = last();
  CHECK(strstr(msg, "error: expected a \";\"") && strstr(msg, "bad_kernel.cu"),
        "message lacks NVRTC's text: %s", msg);
  const char *kept = strstr(msg, "source kept at ");
  CHECK(kept != NULL, "no dump path in: %s", msg);
  if (kept) {
    char path[4096];
    kept += strlen("source kept at ");
    size_t n = strcspn(kept, "\n");
    if (n > 0 && kept[n - 1] == ':') n--;
    snprintf(path, sizeof path, "%.*s", (int)n, kept);
    CHECK(file_has(path, bad), "kept source %s missing or different", path);
    char logp[4200];
    snprintf(logp, sizeof logp, "%s.log", path);
    struct stat sb;
    CHECK(stat(logp, &sb) == 0 && sb.st_size > 0, "no log beside %s", path);
    char *slash = strrchr(path, '/');
    if (slash) {
      *slash = '\0';
      const char *files[] = {"bad_kernel.cu", "bad_kernel.cu.log", NULL};
      remove_tree1(path, files);
    }
  }

  /* Bad arguments and arches. */
  st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", "compute_80", NULL, 0, &r);
  CHECK(st == DA_ERR_INVALID_ARGUMENT, "compute_80: %s", da_status_name(st));
  st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", "sm_10", NULL, 0, &r);
  CHECK(st == DA_ERR_UNSUPPORTED || st == DA_ERR_COMPILE, "sm_10: %s", da_status_name(st));
  CHECK(strstr(last(), "sm_10") != NULL, "sm_10 message: %s", last());
  st = da__nvrtc_compile(NULL, NULL, "tiny.cu", "sm_80", NULL, 0, &r);
  CHECK(st == DA_ERR_INVALID_ARGUMENT, "NULL source: %s", da_status_name(st));
  const char *bogus[] = {"--no-such-option"};
  st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", "sm_80", bogus, 1, &r);
  CHECK(st == DA_ERR_COMPILE, "bogus option: %s: %s", da_status_name(st), last());
  if (st == DA_ERR_COMPILE) { /* clean the kept folder */
    const char *k2 = strstr(last(), "source kept at ");
    if (k2) {
      char path[4096];
      k2 += strlen("source kept at ");
      size_t n = strcspn(k2, "\n");
      if (n > 0 && k2[n - 1] == ':') n--;
      snprintf(path, sizeof path, "%.*s", (int)n, k2);
      char *slash = strrchr(path, '/');
      if (slash) {
        *slash = '\0';
        const char *files[] = {"tiny.cu", "tiny.cu.log", NULL};
        remove_tree1(path, files);
      }
    }
  }

  /* DILATTN_DUMP_DIR: sources written on success too. */
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/test_nvrtc-XXXXXX", (tmp && *tmp) ? tmp : "/tmp");
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("DILATTN_DUMP_DIR", dir, 1);
  st = da__nvrtc_compile(NULL, k_tiny, "dumped/tiny.cu", "sm_80", NULL, 0, &r);
  CHECK(st == DA_OK, "dump compile: %s", last());
  if (st == DA_OK) da__nvrtc_result_free(&r);
  char p[4200];
  snprintf(p, sizeof p, "%s/dumped_tiny.cu", dir);
  CHECK(file_has(p, k_tiny), "DILATTN_DUMP_DIR: %s missing or different", p);
  st = da__nvrtc_compile(NULL, bad, "bad_kernel.cu", "sm_80", NULL, 0, &r);
  snprintf(p, sizeof p, "%s/bad_kernel.cu", dir);
  CHECK(st == DA_ERR_COMPILE && strstr(last(), p), "dump dir on failure: %s", last());
  unsetenv("DILATTN_DUMP_DIR");
  const char *files[] = {"dumped_tiny.cu", "bad_kernel.cu", "bad_kernel.cu.log", NULL};
  remove_tree1(dir, files);
  CHECK(rmdir(dir) != 0, "dump folder %s not removed (stray files)", dir);
}

/* Concurrent compiles: programs are per call. Each thread compiles its own source (a
 * comment apart). An NVRTC with a compile cache (seen on the H200 machines' CUDA 13,
 * persistent across processes) answers a source it has seen without running ptxas: a
 * valid cubin and no resource report. */
typedef struct {
  const char *arch;
  int index;
} compile_arg;

static void *compile_thread(void *arg) {
  const compile_arg *c = arg;
  char src[4096];
  snprintf(src, sizeof src, "// thread %d\n%s", c->index, k_tiny);
  da__nvrtc_result r;
  da_status st = da__nvrtc_compile(NULL, src, "tiny.cu", c->arch, NULL, 0, &r);
  /* registers -1 with an empty log: NVRTC answered from its compile cache (seen on the
   * H200 machines: no ptxas run, so no resource report) */
  int ok = st == DA_OK && !memcmp(r.cubin, "\x7f" "ELF", 4) &&
           (r.registers >= 1 || (r.registers == -1 && (!r.log || !r.log[0])));
  if (!ok)
    fprintf(stderr, "thread %d (%s): status %s, registers %d, log: %.300s\n", c->index, c->arch, da_status_name(st),
            st == DA_OK ? r.registers : -1, st == DA_OK ? (r.log ? r.log : "(none)") : da_context_last_error(NULL));
  if (st == DA_OK) da__nvrtc_result_free(&r);
  return ok ? (void *)1 : NULL;
}

static void test_threads(void) {
  pthread_t t[6];
  const char *archs[] = {"sm_80", "sm_90", "sm_86", "sm_80", "sm_90", "sm_89"};
  compile_arg args[6];
  for (int i = 0; i < 6; i++) {
    args[i].arch = archs[i], args[i].index = i;
    pthread_create(&t[i], NULL, compile_thread, &args[i]);
  }
  for (int i = 0; i < 6; i++) {
    void *ok = NULL;
    pthread_join(t[i], &ok);
    CHECK(ok != NULL, "thread %d (%s) failed", i, archs[i]);
  }
}

/* ---- driver ----------------------------------------------------------------------- */
typedef struct {
  da__cuda *c;
  int ok;
} thread_arg;

static void *driver_thread(void *arg) { /* a fresh thread has no current context */
  thread_arg *a = arg;
  int host[4] = {1, 2, 3, 4}, back[4] = {0};
  void *d = NULL;
  a->ok = da__cuda_malloc(NULL, a->c, sizeof host, &d) == DA_OK &&
          da__cuda_memcpy_htod(NULL, a->c, d, host, sizeof host) == DA_OK &&
          da__cuda_memcpy_dtoh(NULL, a->c, back, d, sizeof back) == DA_OK &&
          !memcmp(host, back, sizeof host) && da__cuda_sync(NULL, a->c, NULL) == DA_OK;
  da__cuda_free(a->c, d);
  return NULL;
}

static void test_driver(int have_nvrtc) {
  da__cuda *c = NULL;
  da_status st = da__cuda_get(NULL, &c);
  if (st != DA_OK) {
    CHECK(st == DA_ERR_UNSUPPORTED, "da__cuda_get: %s: %s", da_status_name(st), last());
    CHECK(strstr(last(), "libcuda") || strstr(last(), "GPU"), "unclear message: %s", last());
    printf("driver: %s (%s)\n", da_status_name(st), last());
    st = da__cuda_get(NULL, &c);
    CHECK(st == DA_ERR_UNSUPPORTED && (strstr(last(), "libcuda") || strstr(last(), "GPU")),
          "second call: %s", last());
    return;
  }
  printf("driver %d, device %s, %s, %d SMs, %d bytes smem opt-in\n", da__cuda_driver_version(c),
         da__cuda_device_name(c), da__cuda_arch(c), da__cuda_sm_count(c), da__cuda_max_smem_optin(c));
  CHECK(!strncmp(da__cuda_arch(c), "sm_", 3) && da__cuda_sm_count(c) > 0, "arch %s, %d SMs",
        da__cuda_arch(c), da__cuda_sm_count(c));

  thread_arg ta = {c, 0};
  pthread_t th;
  pthread_create(&th, NULL, driver_thread, &ta);
  pthread_join(th, NULL);
  CHECK(ta.ok, "copies from a second thread failed: %s", last());
  void *z = (void *)1;
  CHECK(da__cuda_malloc(NULL, c, 0, &z) == DA_OK && z == NULL, "malloc of 0 bytes");

  if (!have_nvrtc) return;
  da__nvrtc_result r;
  st = da__nvrtc_compile(NULL, k_add_one, "add_one.cu", da__cuda_arch(c), NULL, 0, &r);
  if (st == DA_ERR_UNSUPPORTED) {
    printf("skip end-to-end: %s\n", last());
    return;
  }
  CHECK(st == DA_OK, "add_one for %s: %s", da__cuda_arch(c), last());
  if (st != DA_OK) return;
  enum { N = 1000 };
  int host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = i * 3 - 7;
  int smem_sizes[2] = {16, 64 * 1024}; /* the second needs the opt-in attribute */
  for (int s = 0; s < 2; s++) {
    int smem = smem_sizes[s];
    if (smem > da__cuda_max_smem_optin(c)) continue;
    da__cuda_kernel k = {0};
    st = da__cuda_load(NULL, c, r.cubin, "add_one", smem, &k);
    CHECK(st == DA_OK && k.function, "load (%d smem): %s", smem, last());
    if (st != DA_OK) continue;
    void *d = NULL;
    st = da__cuda_malloc(NULL, c, sizeof host, &d);
    CHECK(st == DA_OK, "malloc: %s", last());
    if (st != DA_OK) {
      da__cuda_unload(c, &k);
      continue;
    }
    CHECK(da__cuda_memcpy_htod(NULL, c, d, host, sizeof host) == DA_OK, "htod: %s", last());
    int n = N;
    void *params[] = {&d, &n};
    st = da__cuda_launch(NULL, c, &k, (N + 127) / 128, 1, 1, 128, 1, 1, (unsigned)smem, NULL, params);
    CHECK(st == DA_OK, "launch (%d smem): %s", smem, last());
    CHECK(da__cuda_sync(NULL, c, NULL) == DA_OK, "sync: %s", last());
    memset(back, 0, sizeof back);
    CHECK(da__cuda_memcpy_dtoh(NULL, c, back, d, sizeof back) == DA_OK, "dtoh: %s", last());
    int bad = 0;
    for (int i = 0; i < N; i++) bad += back[i] != host[i] + 1;
    CHECK(bad == 0, "add_one (%d smem): %d wrong elements (back[0] = %d)", smem, bad, back[0]);
    /* A launch the device refuses: DA_ERR_DEVICE naming the call. */
    st = da__cuda_launch(NULL, c, &k, 1, 1, 1, 4096, 1, 1, 16, NULL, params);
    CHECK(st == DA_ERR_DEVICE && strstr(last(), "cuLaunchKernel") && strstr(last(), "CUDA_ERROR_"),
          "oversized block: %s: %s", da_status_name(st), last());
    da__cuda_free(c, d);
    da__cuda_unload(c, &k);
    CHECK(k.module == NULL, "unload clears");
  }
  da__cuda_kernel k = {0};
  st = da__cuda_load(NULL, c, r.cubin, "no_such_kernel", 0, &k);
  CHECK(st == DA_ERR_DEVICE && strstr(last(), "no_such_kernel"), "missing function: %s", last());
  st = da__cuda_load(NULL, c, r.cubin, "add_one", da__cuda_max_smem_optin(c) + 1, &k);
  CHECK(st == DA_ERR_UNSUPPORTED, "too much smem: %s", da_status_name(st));
  da__nvrtc_result_free(&r);
}

/* ---- children: once-per-process initialization under other environments ------- */
static int child_absent(void) {
  int maj = 0, min = 0;
  da_status st = da__nvrtc_version(NULL, &maj, &min);
  CHECK(st == DA_ERR_UNSUPPORTED, "nvrtc absent: %s", da_status_name(st));
  CHECK(strstr(last(), "libnvrtc") && strstr(last(), "/nonexistent") &&
            strstr(last(), "DILATTN_NVRTC_LIB"),
        "nvrtc absent message: %s", last());
  da__nvrtc_result r;
  st = da__nvrtc_compile(NULL, k_tiny, "tiny.cu", "sm_80", NULL, 0, &r);
  CHECK(st == DA_ERR_UNSUPPORTED && strstr(last(), "libnvrtc"), "compile without nvrtc: %s",
        last());
  da__cuda *c = NULL;
  st = da__cuda_get(NULL, &c);
  CHECK(st == DA_ERR_UNSUPPORTED && strstr(last(), "no CUDA driver") && strstr(last(), "/nonexistent"),
        "cuda absent: %s: %s", da_status_name(st), last());
  printf("absent: %s\n", last());
  return tu_failed != 0;
}

static int child_stub(void) { /* the toolkit's stub libcuda: cuInit fails */
  da__cuda *c = NULL;
  da_status st = da__cuda_get(NULL, &c);
  CHECK(st == DA_ERR_UNSUPPORTED && strstr(last(), "cuInit returned") && strstr(last(), "GPU"),
        "stub driver: %s: %s", da_status_name(st), last());
  printf("stub: %s\n", last());
  return tu_failed != 0;
}

static void run_child(const char *mode, const char *nvrtc_lib, const char *cuda_lib) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    if (nvrtc_lib) setenv("DILATTN_NVRTC_LIB", nvrtc_lib, 1);
    if (cuda_lib) setenv("DILATTN_CUDA_LIB", cuda_lib, 1);
    char *argv[] = {(char *)"test_nvrtc", (char *)mode, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0,
        "child %s failed (status %d)", mode, status);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child-absent")) return child_absent();
  if (argc > 1 && !strcmp(argv[1], "--child-stub")) return child_stub();
  unsetenv("DILATTN_DUMP_DIR");

  test_parser();
  int maj = 0, min = 0;
  da_status st = da__nvrtc_version(NULL, &maj, &min);
  const char *req = getenv("DILATTN_TEST_REQUIRE_NVRTC");
  int have_nvrtc = st == DA_OK;
  if (have_nvrtc) {
    printf("NVRTC %d.%d\n", maj, min);
    CHECK(maj >= 11 && min >= 0, "NVRTC version %d.%d", maj, min);
    test_compile();
    test_threads();
  } else {
    CHECK(st == DA_ERR_UNSUPPORTED && strstr(last(), "libnvrtc"), "nvrtc: %s: %s",
          da_status_name(st), last());
    CHECK(!(req && *req && strcmp(req, "0")), "NVRTC required but absent: %s", last());
    printf("skip NVRTC compile checks: %s\n", last());
  }
  test_driver(have_nvrtc);

  run_child("--child-absent", "/nonexistent/libnvrtc.so", "/nonexistent/libcuda.so.1");
  const char *stubs[] = {"/usr/local/cuda/lib64/stubs/libcuda.so",
                         "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"};
  for (int i = 0; i < 2; i++) {
    if (access(stubs[i], R_OK) == 0) {
      run_child("--child-stub", NULL, stubs[i]);
      break;
    }
  }

  return tu_report();
}
