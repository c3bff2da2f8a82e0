/* fake_cuda.c - a CUDA driver (libcuda.so.1's entry points, by their versioned names) that
 * pretends to be one GPU and runs nothing, so that the library's CUDA backend can be tested
 * on a machine without one (DILATTN_CUDA_LIB=libfake_cuda.so; tests/test_fake_device.c):
 * plan creation as on an sm_90 device (the instruction the planner picks, its fallbacks,
 * NVRTC compiles that really happen), and every launch's grid, block, shared memory and
 * programmatic dependence, which the driver checks as a real one would and logs. Memory is
 * the host's (cuMemAlloc is calloc, copies are memcpy), so a test may hand host pointers
 * to a CUDA plan; kernels do not run and outputs stay as they were.
 *
 * Environment: FAKE_CUDA_CC (compute capability, default 90), FAKE_CUDA_VERSION (the
 * driver's, cuDriverGetVersion: 13000), FAKE_CUDA_SMS (132), FAKE_CUDA_DEVICES (how many
 * devices, alike, each with its primary context: 1, at most 8; fake_cuda_retains(d) counts
 * cuDevicePrimaryCtxRetain calls for device d; fake_cuda_stream(d) gives
 * a stream handle of device d, which a launch takes only with d's context current,
 * fake_cuda_foreign_stream(d) one of a second, non-primary context of device d, which no
 * launch takes (the primary context's modules are not that context's: INVALID_HANDLE, as on
 * an H200), and fake_cuda_green_stream(d) one of a green context of device d, which a launch
 * with d's primary context current takes: cuStreamGetCtx gives its cuCtxFromGreenCtx handle,
 * cuStreamGetCtx_v2 the primary context and the green one (NOT_SUPPORTED below
 * FAKE_CUDA_VERSION 12050, as a driver without the entry point), cuStreamGetGreenCtx the
 * green one (below 12040, NOT_SUPPORTED)),
 * FAKE_CUDA_SMEM (opt-in shared memory per block, 232448), FAKE_CUDA_LOG (a file each
 * launch appends a line to: "launch NAME grid X Y Z block X Y Z smem S dependent D stream P
 * tma T ADDR dev D ctr C masks M", T the arguments' tma flag and, where it is set, the first tensor map's
 * address (runtime/cuda_args.h), D the device whose context was current, C the value of a
 * persistent grid's counter at the launch (-1: none; the launch then sets it nonzero), M the
 * arguments' explicit-mask table (runtime/cuda_args.h masks; 0: none), whose bytes a test
 * reads where it points (this driver's memory is the host's);
 * FAKE_CUDA_NO_MEMSET (cuMemsetD32Async refuses); FAKE_CUDA_POOL_LIMIT (bytes: a larger
 * cuMemAllocFromPoolAsync is out of memory); each cuTensorMapEncodeTiled one: "tmap addr P dims .. strides ..
 * box .. swizzle S", after checking cuda.h's rules for the parameters the runtime passes).
 * Stream capture (cuStreamBeginCapture_v2, cuStreamEndCapture: a test's own calls, one
 * capture at a time): while one is open in global mode, the calls a real driver prohibits
 * then (those that may synchronize: cuMemAlloc, cuMemFree, the synchronous copies,
 * cuCtxSynchronize, cuStreamSynchronize; work on the legacy stream) fail with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate it (cuStreamEndCapture:
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); work on the capturing stream is counted
 * (fake_cuda_captured) and, this driver running nothing anyway, done at once; a graph of it
 * instantiates and launches (running nothing). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_args.h"

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, NOT_FOUND = 500, INVALID_IMAGE = 200 };

typedef struct {
  char name[256];
  int max_dyn_smem; /* cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES), else 48 KiB */
} fake_func;

typedef struct {
  const unsigned char *image;
  size_t size;
  fake_func **funcs; /* a module owns its functions: freed with it */
  int nfuncs;
} fake_module;

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path || !*path) return;
  pthread_mutex_lock(&log_mu);
  FILE *f = fopen(path, "a");
  if (f) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
  }
  pthread_mutex_unlock(&log_mu);
}

#define FAKE_MAX_DEVICES 8
static int context_tokens[FAKE_MAX_DEVICES]; /* device d's primary context: &context_tokens[d] */
static char stream_tokens[FAKE_MAX_DEVICES]; /* a stream of device d: &stream_tokens[d] */
static int foreign_tokens[FAKE_MAX_DEVICES];  /* a second context of device d (cuCtxCreate's) */
static char foreign_streams[FAKE_MAX_DEVICES]; /* a stream of that context */
static int green_ctxs[FAKE_MAX_DEVICES];      /* a green context of device d (a CUgreenCtx) */
static int green_tokens[FAKE_MAX_DEVICES];    /* its cuCtxFromGreenCtx handle */
static char green_streams[FAKE_MAX_DEVICES];  /* a stream of it (cuGreenCtxStreamCreate's) */
static __thread void *current, *below; /* the thread's current context, and one pushed under it */

static int ndevices(void) {
  const int n = env_int("FAKE_CUDA_DEVICES", 1);
  return n < 1 ? 1 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
}
/* the device of a context, -1 for one not the fake's (a test's own) */
static int device_of(const void *ctx) {
  for (int d = 0; d < FAKE_MAX_DEVICES; d++)
    if (ctx == &context_tokens[d] || ctx == &foreign_tokens[d] || ctx == &green_tokens[d]) return d;
  return -1;
}
void *fake_cuda_stream(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? &stream_tokens[dev] : NULL; }
void *fake_cuda_foreign_stream(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? &foreign_streams[dev] : NULL; }
void *fake_cuda_green_stream(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? &green_streams[dev] : NULL; }

CUresult cuInit(unsigned flags) { return flags ? INVALID_VALUE : OK; }
CUresult cuDriverGetVersion(int *v) {
  *v = env_int("FAKE_CUDA_VERSION", 13000);
  return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = r == INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : r == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND"
     : r == INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE" : r == 900 ? "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
     : r == 901 ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" : "CUDA_ERROR_UNKNOWN";
  return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == INVALID_VALUE ? "invalid argument (fake driver)" : r == NOT_FOUND ? "named symbol not found (fake driver)"
     : r == INVALID_IMAGE ? "device kernel image is invalid (fake driver)" : "unknown error (fake driver)";
  return OK;
}
CUresult cuDeviceGetCount(int *n) {
  *n = ndevices();
  return OK;
}
CUresult cuDeviceGet(int *d, int ordinal) {
  if (ordinal < 0 || ordinal >= ndevices()) return 101; /* INVALID_DEVICE */
  *d = ordinal;
  return OK;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  (void)dev;
  snprintf(name, (size_t)len, "Fake GPU sm_%d (dilattn tests)", env_int("FAKE_CUDA_CC", 90));
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  const int cc = env_int("FAKE_CUDA_CC", 90);
  switch (attr) {
  case 16: *v = env_int("FAKE_CUDA_SMS", 132); return OK;
  case 75: *v = cc / 10; return OK;
  case 76: *v = cc % 10; return OK;
  case 97: *v = env_int("FAKE_CUDA_SMEM", 232448); return OK;
  default: return INVALID_VALUE;
  }
}
static int retains[FAKE_MAX_DEVICES]; /* cuDevicePrimaryCtxRetain's calls a device (fake_cuda_retains) */
int fake_cuda_retains(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? __atomic_load_n(&retains[dev], __ATOMIC_RELAXED) : 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (dev < 0 || dev >= ndevices()) return 101;
  __atomic_add_fetch(&retains[dev], 1, __ATOMIC_RELAXED);
  *ctx = &context_tokens[dev];
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return dev < 0 || dev >= ndevices() ? 101 : OK; }
CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = current;
  return OK;
}
CUresult cuCtxGetDevice(int *dev) {
  if (device_of(current) < 0) return 201; /* INVALID_CONTEXT */
  *dev = device_of(current);
  return OK;
}
CUresult cuStreamGetCtx(void *stream, void **ctx) {
  for (int d = 0; d < FAKE_MAX_DEVICES; d++)
    if (stream == &stream_tokens[d] || stream == &foreign_streams[d] || stream == &green_streams[d]) {
      *ctx = stream == &stream_tokens[d] ? (void *)&context_tokens[d]
           : stream == &foreign_streams[d] ? (void *)&foreign_tokens[d] : (void *)&green_tokens[d];
      return OK;
    }
  return 400; /* INVALID_HANDLE: a stream the fake did not make */
}
CUresult cuStreamGetCtx_v2(void *stream, void **ctx, void **green) {
  if (env_int("FAKE_CUDA_VERSION", 13000) < 12050) return 801; /* NOT_SUPPORTED: no such entry point yet */
  const CUresult r = cuStreamGetCtx(stream, ctx);
  *green = NULL;
  for (int d = 0; r == OK && d < FAKE_MAX_DEVICES; d++)
    if (stream == &green_streams[d]) *ctx = &context_tokens[d], *green = &green_ctxs[d];
  return r;
}
CUresult cuStreamGetGreenCtx(void *stream, void **green) {
  if (env_int("FAKE_CUDA_VERSION", 13000) < 12040) return 801;
  void *ctx;
  const CUresult r = cuStreamGetCtx(stream, &ctx);
  *green = NULL;
  for (int d = 0; r == OK && d < FAKE_MAX_DEVICES; d++)
    if (stream == &green_streams[d]) *green = &green_ctxs[d];
  return r;
}
CUresult cuCtxSetCurrent(void *ctx) {
  current = ctx;
  return OK;
}
CUresult cuCtxPushCurrent_v2(void *ctx) {
  if (below) return INVALID_VALUE; /* (a stack of two is all the library needs) */
  below = current;
  current = ctx;
  return OK;
}
CUresult cuCtxPopCurrent_v2(void **ctx) {
  if (ctx) *ctx = current;
  current = below;
  below = NULL;
  return OK;
}
static CUresult need_context(void) { return device_of(current) >= 0 ? OK : 201 /* INVALID_CONTEXT */; }

/* Stream capture: the stream capturing (NULL: none), its mode, whether a prohibited call
 * invalidated it, and the stream work captured */
static void *capturing;
static int capture_mode, capture_broken, captured_ops;
enum { CAPTURE_UNSUPPORTED = 900, CAPTURE_INVALIDATED = 901 };
CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
  if ((uintptr_t)stream <= 2 || capturing || mode < 0 || mode > 2) return INVALID_VALUE;
  capturing = stream, capture_mode = mode, capture_broken = 0, captured_ops = 0;
  return OK;
}
CUresult cuStreamEndCapture(void *stream, void **graph) {
  if (!capturing || stream != capturing || !graph) return INVALID_VALUE;
  capturing = NULL;
  *graph = capture_broken ? NULL : &captured_ops;
  return capture_broken ? CAPTURE_INVALIDATED : OK;
}
int fake_cuda_captured(void) { return captured_ops; }
/* a graph of the capture (runs nothing, as launches here do not) */
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
  if (!exec || graph != &captured_ops || flags) return INVALID_VALUE;
  *exec = graph;
  return OK;
}
CUresult cuGraphLaunch(void *exec, void *stream);
CUresult cuGraphExecDestroy(void *exec) { return exec == &captured_ops ? OK : INVALID_VALUE; }
CUresult cuGraphDestroy(void *graph) { return graph == &captured_ops ? OK : INVALID_VALUE; }
/* a call that may synchronize, under a global-mode capture */
static CUresult unsafe_call(void) {
  if (!capturing || capture_mode != 0) return OK;
  capture_broken = 1;
  return CAPTURE_UNSUPPORTED;
}
/* work on stream s: the legacy stream waits for a capturing (blocking) stream, which the
 * capture refuses; the capturing stream's is captured */
static CUresult stream_work(void *s) {
  if (!capturing) return OK;
  if ((uintptr_t)s <= 2) {
    capture_broken = 1;
    return CAPTURE_UNSUPPORTED;
  }
  captured_ops += s == capturing;
  return OK;
}

CUresult cuGraphLaunch(void *exec, void *stream) {
  if (need_context()) return need_context();
  if (stream_work(stream)) return CAPTURE_UNSUPPORTED;
  return exec == &captured_ops ? OK : INVALID_VALUE;
}
/* a stream of the current context's device (the primary context's: the device's stream) */
CUresult cuStreamCreate(void **stream, unsigned flags) {
  if (need_context()) return need_context();
  if (!stream || flags > 1) return INVALID_VALUE;
  *stream = fake_cuda_stream(device_of(current));
  return OK;
}
CUresult cuStreamDestroy_v2(void *stream) { return stream ? OK : INVALID_VALUE; }
CUresult cuCtxSynchronize(void) {
  const CUresult u = unsafe_call();
  return u ? u : need_context();
}
CUresult cuStreamSynchronize(void *s) {
  (void)s;
  const CUresult u = unsafe_call();
  return u ? u : need_context();
}

/* A cubin is an ELF64 image: its size from the section header table at its end. */
CUresult cuModuleLoadData(void **mod, const void *image) {
  if (need_context()) return need_context();
  const unsigned char *p = image;
  if (!p || memcmp(p, "\177ELF", 4) || p[4] != 2) return INVALID_IMAGE;
  /* FAKE_CUDA_REFUSE_IMAGES=N: the first N images of the process refused as a driver
   * refuses a cubin of a newer CUDA than its own; =all: every image while it is set */
  static int refused;
  const char *refuse = getenv("FAKE_CUDA_REFUSE_IMAGES");
  if (refuse && (!strcmp(refuse, "all") || __atomic_fetch_add(&refused, 1, __ATOMIC_RELAXED) < atoi(refuse)))
    return 222;
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, p + 0x28, 8);
  memcpy(&shentsize, p + 0x3a, 2);
  memcpy(&shnum, p + 0x3c, 2);
  fake_module *m = calloc(1, sizeof *m);
  if (!m) return 2;
  m->image = p, m->size = shoff + (uint64_t)shentsize * shnum;
  *mod = m;
  return OK;
}
/* Found where the image holds the name as a string (its symbol table). */
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  fake_module *m = mod;
  const size_t n = strlen(name) + 1;
  if (!m || n > sizeof ((fake_func *)0)->name || !memmem(m->image, m->size, name, n)) return NOT_FOUND;
  fake_func *f = calloc(1, sizeof *f);
  fake_func **more = realloc(m->funcs, sizeof *more * (size_t)(m->nfuncs + 1));
  if (!f || !more) {
    free(f);
    if (more) m->funcs = more;
    return 2;
  }
  memcpy(f->name, name, n);
  f->max_dyn_smem = 48 * 1024;
  m->funcs = more;
  m->funcs[m->nfuncs++] = f;
  *fn = f;
  return OK;
}
CUresult cuModuleUnload(void *mod) {
  fake_module *m = mod;
  for (int i = 0; m && i < m->nfuncs; i++) free(m->funcs[i]);
  if (m) free(m->funcs);
  free(m);
  return OK;
}
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
  fake_func *f = fn;
  if (attr == 8) {
    if (value < 0 || value > env_int("FAKE_CUDA_SMEM", 232448)) return INVALID_VALUE;
    f->max_dyn_smem = value;
  }
  return OK;
}

static CUresult launch(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void *stream, void **params, int dependent) {
  if (need_context()) return need_context();
  if (stream_work(stream)) return CAPTURE_UNSUPPORTED;
  const int dev = device_of(current);
  for (int d = 0; d < FAKE_MAX_DEVICES; d++) { /* a stream of another device than the current context's */
    if ((stream == &stream_tokens[d] || stream == &green_streams[d]) && d != dev) return 400; /* INVALID_HANDLE */
    if (stream == &foreign_streams[d]) return 400; /* another context's: not this module's */
  }
  fake_func *f = fn;
  if (!f || !params || !gx || !gy || !gz || !bx || !by || !bz || gx > 0x7fffffffu || gy > 65535 || gz > 65535 ||
      (unsigned long long)bx * by * bz > 1024 || smem > (unsigned)f->max_dyn_smem)
    return INVALID_VALUE;
  /* dilattn's kernels take a da__cuda_kargs (others, a test's own, their own parameters) */
  const da__cuda_kargs *k = strncmp(f->name, "da_fwd_", 7) ? NULL : params[0];
  uint64_t first_map = 0; /* what the encoder put at the start of the first map: its address */
  if (k && k->a.tma) memcpy(&first_map, k->m[0].bytes, sizeof first_map);
  /* a persistent grid's counter (runtime/cuda_args.h ctr): its value at the launch (-1: none),
   * which must be 0; then a kernel's draws, so a counter used again unzeroed shows */
  long long ctr = -1;
  if (k && k->a.ctr) ctr = *k->a.ctr, *k->a.ctr = 0xd00du;
  log_line("launch %s grid %u %u %u block %u %u %u smem %u dependent %d stream %p tma %d %llx dev %d ctr %lld masks %llx\n",
           f->name, gx, gy, gz, bx, by, bz, smem, dependent, stream, k ? k->a.tma : 0, (unsigned long long)first_map, dev,
           ctr, k ? (unsigned long long)(uintptr_t)k->a.masks : 0ull);
  return OK;
}

/* cuda.h's rules for tiled tensor maps, those the runtime's parameters could break; the
 * map holds the global address (the launch log shows it) */
CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box, const uint32_t *es, int interleave,
                                int swizzle, int l2, int oob) {
  if (!map || (uintptr_t)map % 64 || dtype < 0 || dtype > 12 || rank < 1 || rank > 5 || (uintptr_t)addr % 16 ||
      interleave < 0 || interleave > 2 || swizzle < 0 || swizzle > 6 || l2 < 0 || l2 > 3 || oob < 0 || oob > 1)
    return INVALID_VALUE;
  const unsigned esize = dtype == 0 ? 1 : dtype == 1 || dtype == 6 || dtype == 9 ? 2 : dtype == 4 || dtype == 5 || dtype == 8 ? 8 : 4;
  for (unsigned i = 0; i < rank; i++)
    if (!dims[i] || dims[i] > (1ull << 32) || !box[i] || box[i] > 256 || !es[i] || es[i] > 8 ||
        (i && (strides[i - 1] % 16 || strides[i - 1] >= (1ull << 40))))
      return INVALID_VALUE;
  if (box[0] * esize % 16 || (swizzle == 3 && box[0] * esize > 128)) return INVALID_VALUE;
  memset(map, 0, 128);
  memcpy(map, &addr, sizeof addr);
  if (!getenv("FAKE_CUDA_LOG")) return OK; /* (the line is most of this call's time) */
  char line[512];
  int n = snprintf(line, sizeof line, "tmap addr %p dims", addr);
  for (unsigned i = 0; i < rank; i++) n += snprintf(line + n, sizeof line - (size_t)n, " %llu", (unsigned long long)dims[i]);
  n += snprintf(line + n, sizeof line - (size_t)n, " strides");
  for (unsigned i = 0; i + 1 < rank; i++)
    n += snprintf(line + n, sizeof line - (size_t)n, " %llu", (unsigned long long)strides[i]);
  n += snprintf(line + n, sizeof line - (size_t)n, " box");
  for (unsigned i = 0; i < rank; i++) n += snprintf(line + n, sizeof line - (size_t)n, " %u", box[i]);
  log_line("%s swizzle %d dtype %d\n", line, swizzle, dtype);
  return OK;
}
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
  if (extra) return INVALID_VALUE;
  return launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, 0);
}

/* cuda.h's CUlaunchConfig and CUlaunchAttribute (64-byte value union) */
typedef struct {
  int id;
  char pad[4];
  union {
    char bytes[64];
    unsigned long long align;
    int programmatic_stream_serialization_allowed;
  } value;
} fake_attr;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, smem;
  void *stream;
  fake_attr *attrs;
  unsigned nattrs;
} fake_config;

static CUresult launch_ex(const fake_config *c, void *fn, void **params, void **extra) {
  if (!c || extra) return INVALID_VALUE;
  int dependent = 0;
  for (unsigned i = 0; i < c->nattrs; i++)
    if (c->attrs[i].id == 6 /* PROGRAMMATIC_STREAM_SERIALIZATION */)
      dependent = c->attrs[i].value.programmatic_stream_serialization_allowed;
  return launch(fn, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->stream, params, dependent);
}

static CUresult mem_alloc(unsigned long long *d, size_t bytes) {
  if (need_context()) return need_context();
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) return 2;
  *d = (uintptr_t)p;
  return OK;
}
CUresult cuMemAlloc_v2(unsigned long long *d, size_t bytes) {
  const CUresult u = unsafe_call();
  return u ? u : mem_alloc(d, bytes);
}
CUresult cuMemFree_v2(unsigned long long d) {
  const CUresult u = unsafe_call();
  if (u) return u;
  free((void *)(uintptr_t)d);
  return OK;
}
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *src, size_t n) {
  const CUresult u = unsafe_call();
  if (u) return u;
  memcpy((void *)(uintptr_t)d, src, n);
  return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long d, size_t n) {
  const CUresult u = unsafe_call();
  if (u) return u;
  memcpy(dst, (const void *)(uintptr_t)d, n);
  return OK;
}
/* Stream-ordered allocations hold what the pool's last user left: bytes 0xa5 here (a
 * counter the runtime forgot to zero shows) */
static CUresult alloc_async(unsigned long long *d, size_t bytes, void *stream) {
  if (stream_work(stream)) return CAPTURE_UNSUPPORTED;
  CUresult r = mem_alloc(d, bytes);
  if (r == OK) memset((void *)(uintptr_t)*d, 0xa5, bytes);
  return r;
}
CUresult cuMemAllocAsync(unsigned long long *d, size_t bytes, void *stream) { return alloc_async(d, bytes, stream); }
CUresult cuMemFreeAsync(unsigned long long d, void *stream) {
  if (stream_work(stream)) return CAPTURE_UNSUPPORTED;
  free((void *)(uintptr_t)d);
  return OK;
}
/* (FAKE_CUDA_NO_MEMSET: refused, as a driver that cannot would) */
CUresult cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, void *stream) {
  if (need_context()) return need_context();
  if (stream_work(stream)) return CAPTURE_UNSUPPORTED;
  if (getenv("FAKE_CUDA_NO_MEMSET")) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  unsigned *p = (unsigned *)(uintptr_t)d;
  for (size_t i = 0; i < n; i++) p[i] = v;
  return OK;
}
/* Memory pools: the device's default one (&context_tokens[0]) and those cuMemPoolCreate makes
 * (&own_pool); what the library did with each, for tests (fake_cuda_pool_stats). */
static int own_pool, pools_created, pool_allocs, default_pool_changes, pool_trims;
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev) {
  (void)dev;
  *pool = &context_tokens[0];
  return OK;
}
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
  (void)attr, (void)value;
  if (pool == &context_tokens[0]) __atomic_add_fetch(&default_pool_changes, 1, __ATOMIC_RELAXED);
  return pool == &context_tokens[0] || pool == &own_pool ? OK : INVALID_VALUE;
}
CUresult cuMemPoolCreate(void **pool, const void *props) {
  const int *p = props; /* CUmemPoolProps: allocType, handleTypes, location {type, id}, ... */
  if (!pool || !p || p[0] != 1 || p[1] != 0 || p[2] != 1 || p[3] != 0) return INVALID_VALUE;
  *pool = &own_pool;
  __atomic_add_fetch(&pools_created, 1, __ATOMIC_RELAXED);
  return OK;
}
CUresult cuMemAllocFromPoolAsync(unsigned long long *d, size_t bytes, void *pool, void *stream) {
  if (pool != &own_pool) return INVALID_VALUE;
  const char *limit = getenv("FAKE_CUDA_POOL_LIMIT"); /* (bytes the pool has free) */
  if (limit && *limit && bytes > strtoull(limit, NULL, 10)) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  __atomic_add_fetch(&pool_allocs, 1, __ATOMIC_RELAXED);
  return alloc_async(d, bytes, stream);
}
CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
  (void)keep;
  if (pool != &own_pool) return INVALID_VALUE;
  __atomic_add_fetch(&pool_trims, 1, __ATOMIC_RELAXED);
  return OK;
}
void fake_cuda_pool_stats(int *created, int *allocs, int *default_changes, int *trims) {
  *created = pools_created, *allocs = pool_allocs, *default_changes = default_pool_changes, *trims = pool_trims;
}

CUresult cuLaunchKernelEx(const fake_config *c, void *fn, void **params, void **extra) {
  return launch_ex(c, fn, params, extra);
}
