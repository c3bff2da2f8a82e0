/* cuda_driver.c - the CUDA driver API through dlopen. cuda.h is never included and
 * nothing is linked: the handful of types and entry points used are declared here and
 * resolved by their real (versioned) symbol names, as cuda.h would map them
 * (cuMemAlloc -> cuMemAlloc_v2, cuCtxPushCurrent -> cuCtxPushCurrent_v2, ...). The driver
 * is opened once a process (pthread_once); each device once, when a context first needs
 * it: its arch string, SM count, retained primary context and memory pool. A da_context
 * takes the device of the CUDA context current on the thread that first uses it for CUDA
 * (a framework's current device: PyTorch's after torch.cuda.set_device), else device 0,
 * and keeps it. Every operation makes that device's primary context current on the
 * calling thread and restores what was: set and unset again when the thread has none,
 * pushed and popped again when the caller has another context current. A missing driver or GPU is
 * DA_ERR_UNSUPPORTED; every driver error is DA_ERR_DEVICE with the call and the driver's
 * error name and text. */
#define _GNU_SOURCE
#include "runtime/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The subset of cuda.h we use (64-bit ABI). */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_NO_DEVICE = 100,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
};

#define DA__DEFAULT_DYN_SMEM (48 * 1024)

struct da__cuda {
  void *dl;
  CUdevice device; /* its ordinal */
  CUcontext primary;
  char arch[16];
  char name[256];
  int driver_version;
  int sm_count;
  int smem_optin;
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*StreamGetCtx)(CUstream, CUcontext *); /* (CUDA 9.2+; optional) */
  /* a green context's stream (CUDA 12.4+): cuStreamGetCtx gives its cuCtxFromGreenCtx handle,
   * "a normal primary context but with the resources of the green context" (cuda.h), whose
   * modules and memory are the primary context's; cuStreamGetCtx_v2 (12.5+) gives the primary
   * context itself and the green one beside it, cuStreamGetGreenCtx (12.4+) the green one
   * alone (both optional) */
  CUresult (*StreamGetCtx2)(CUstream, CUcontext *, void **);
  CUresult (*StreamGetGreenCtx)(CUstream, void **);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxPushCurrent)(CUcontext);  /* cuCtxPushCurrent_v2 */
  CUresult (*CtxPopCurrent)(CUcontext *); /* cuCtxPopCurrent_v2 */
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  /* programmatic dependent launch (CUDA 12+; optional) */
  CUresult (*LaunchKernelEx)(const da__cu_launch_config *, CUfunction, void **, void **);
  da__tmap_encode_fn TensorMapEncodeTiled; /* (CUDA 12+; optional) */
  int cc_major;
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);                  /* cuMemAlloc_v2 */
  CUresult (*MemFree)(CUdeviceptr);                             /* cuMemFree_v2 */
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);    /* cuMemcpyHtoD_v2 */
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);          /* cuMemcpyDtoH_v2 */
  CUresult (*StreamSynchronize)(CUstream);
  /* stream-ordered allocations (CUDA 11.2+; optional): from a pool of the library's own
   * (cuMemPoolCreate) whose release threshold is raised, so steady-state executions do not
   * hit the driver's allocator (DESIGN.md); the device's default pool, which other
   * libraries in the process share (PyTorch's cudaMallocAsync backend), is left as it is */
  CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream); /* (optional: persistent grids' counters) */
  CUresult (*MemPoolCreate)(void **, const void *);
  CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, void *, CUstream);
  CUresult (*MemPoolSetAttribute)(void *, int, void *);
  CUresult (*MemPoolTrimTo)(void *, size_t);
  void *pool;     /* the library's pool (pool_setup), NULL where there is none */
  int pool_tried; /* pool_setup ran (under g_dev_mu) */
};

/* The driver: its entry points and version (the device fields unused), opened once */
static da__cuda g_cuda;
static da_status g_status = DA_ERR_INTERNAL; /* DA_OK once set up */
static char g_error[1024];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ndev; /* cuDeviceGetCount's */

/* The devices, each set up by the first context that takes it (under g_dev_mu); a copy of
 * the driver's entry points each, so every call below takes one da__cuda */
#define DA_MAX_DEVICES 64
static da__cuda g_dev[DA_MAX_DEVICES];
static int g_dev_state[DA_MAX_DEVICES]; /* 0 not set up, 1 ready (acquire), -1 failed */
static da_status g_dev_status[DA_MAX_DEVICES];
static char g_dev_error[DA_MAX_DEVICES][512];
static pthread_mutex_t g_dev_mu = PTHREAD_MUTEX_INITIALIZER;

/* Names of the results init can meet, for drivers (the stub) that cannot name them. */
static const char *fallback_name(CUresult r) {
  switch (r) {
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case 46: return "CUDA_ERROR_DEVICES_UNAVAILABLE";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
  default: return "unknown CUresult";
  }
}

static void error_text(const da__cuda *c, CUresult r, const char **name, const char **text) {
  *name = NULL;
  *text = NULL;
  if (c->GetErrorName && c->GetErrorName(r, name) != CUDA_SUCCESS) *name = NULL;
  if (c->GetErrorString && c->GetErrorString(r, text) != CUDA_SUCCESS) *text = NULL;
  if (!*name) *name = fallback_name(r);
  if (!*text) *text = "no description from the driver";
}

static da_status cu_fail(const da_context *ctx, const da__cuda *c, CUresult r, const char *call) {
  const char *name, *text;
  error_text(c, r, &name, &text);
  return da__set_error(ctx, DA_ERR_DEVICE, "CUDA: %s failed: %d (%s: %s)", call, r, name, text);
}

/* Record a device's set-up failure. */
static void init_fail(int ordinal, da_status st, const char *call, CUresult r) {
  const char *name, *text;
  error_text(&g_cuda, r, &name, &text);
  g_dev_status[ordinal] = st;
  snprintf(g_dev_error[ordinal], sizeof g_dev_error[ordinal], "CUDA device %d not usable: %s returned %d (%s: %s)",
           ordinal, call, r, name, text);
}

static int load_sym(void *dl, const char *name, void *slot, char *missing, size_t cap) {
  void *p = dlsym(dl, name);
  memcpy(slot, &p, sizeof p);
  if (p) return 1;
  size_t n = strlen(missing);
  snprintf(missing + n, cap - n, "%s%s", n ? ", " : "", name);
  return 0;
}

static void cuda_init(void) {
  da__cuda *c = &g_cuda;
  const char *env = getenv("DILATTN_CUDA_LIB");
  const char *lib = (env && *env) ? env : "libcuda.so.1";
  c->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!c->dl) {
    const char *e = dlerror();
    g_status = DA_ERR_UNSUPPORTED;
    if (env && *env)
      snprintf(g_error, sizeof g_error, "no CUDA driver: %s (from DILATTN_CUDA_LIB) not loaded: %s",
               lib, e ? e : "unknown error");
    else
      snprintf(g_error, sizeof g_error,
               "no CUDA driver: libcuda.so.1 not found (%s); the CUDA backend needs an NVIDIA "
               "driver and GPU", e ? e : "unknown error");
    return;
  }
  char missing[768] = "";
  int ok = 1;
#define SYM(field, name) ok &= load_sym(c->dl, name, &c->field, missing, sizeof missing)
  SYM(Init, "cuInit");
  SYM(DriverGetVersion, "cuDriverGetVersion");
  SYM(GetErrorName, "cuGetErrorName");
  SYM(GetErrorString, "cuGetErrorString");
  SYM(DeviceGet, "cuDeviceGet");
  SYM(DeviceGetName, "cuDeviceGetName");
  SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
  SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(CtxGetCurrent, "cuCtxGetCurrent");
  SYM(CtxGetDevice, "cuCtxGetDevice");
  SYM(DeviceGetCount, "cuDeviceGetCount");
  SYM(CtxSetCurrent, "cuCtxSetCurrent");
  SYM(CtxPushCurrent, "cuCtxPushCurrent_v2");
  SYM(CtxPopCurrent, "cuCtxPopCurrent_v2");
  SYM(CtxSynchronize, "cuCtxSynchronize");
  SYM(ModuleLoadData, "cuModuleLoadData");
  SYM(ModuleGetFunction, "cuModuleGetFunction");
  SYM(ModuleUnload, "cuModuleUnload");
  SYM(FuncSetAttribute, "cuFuncSetAttribute");
  SYM(LaunchKernel, "cuLaunchKernel");
  SYM(MemAlloc, "cuMemAlloc_v2");
  SYM(MemFree, "cuMemFree_v2");
  SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
  SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
  SYM(StreamSynchronize, "cuStreamSynchronize");
#undef SYM
  {
    char unused[256] = "";
    load_sym(c->dl, "cuMemAllocAsync", &c->MemAllocAsync, unused, sizeof unused);
    load_sym(c->dl, "cuMemFreeAsync", &c->MemFreeAsync, unused, sizeof unused);
    load_sym(c->dl, "cuMemsetD32Async", &c->MemsetD32Async, unused, sizeof unused);
    load_sym(c->dl, "cuMemPoolCreate", &c->MemPoolCreate, unused, sizeof unused);
    load_sym(c->dl, "cuMemAllocFromPoolAsync", &c->MemAllocFromPoolAsync, unused, sizeof unused);
    load_sym(c->dl, "cuMemPoolSetAttribute", &c->MemPoolSetAttribute, unused, sizeof unused);
    load_sym(c->dl, "cuMemPoolTrimTo", &c->MemPoolTrimTo, unused, sizeof unused);
    load_sym(c->dl, "cuLaunchKernelEx", &c->LaunchKernelEx, unused, sizeof unused);
    load_sym(c->dl, "cuTensorMapEncodeTiled", &c->TensorMapEncodeTiled, unused, sizeof unused);
    load_sym(c->dl, "cuStreamGetCtx", &c->StreamGetCtx, unused, sizeof unused);
    load_sym(c->dl, "cuStreamGetCtx_v2", &c->StreamGetCtx2, unused, sizeof unused);
    load_sym(c->dl, "cuStreamGetGreenCtx", &c->StreamGetGreenCtx, unused, sizeof unused);
  }
  if (!ok) {
    g_status = DA_ERR_UNSUPPORTED;
    snprintf(g_error, sizeof g_error, "CUDA driver %s too old: it lacks %s", lib, missing);
    return;
  }
  if (c->DriverGetVersion(&c->driver_version) != CUDA_SUCCESS) c->driver_version = 0;
  CUresult r = c->Init(0);
  if (r != CUDA_SUCCESS) {
    const char *name, *text;
    error_text(c, r, &name, &text);
    g_status = DA_ERR_UNSUPPORTED;
    snprintf(g_error, sizeof g_error,
             "CUDA driver found but no %sGPU: cuInit returned %d (%s: %s)",
             r == CUDA_ERROR_NO_DEVICE ? "" : "usable ", r, name, text);
    return;
  }
  if ((r = c->DeviceGetCount(&g_ndev)) != CUDA_SUCCESS || g_ndev < 1) {
    const char *name, *text;
    error_text(c, r, &name, &text);
    g_status = DA_ERR_UNSUPPORTED;
    snprintf(g_error, sizeof g_error, "CUDA driver found but no GPU: cuDeviceGetCount returned %d (%s: %s), %d devices",
             r, name, text, g_ndev);
    return;
  }
  g_status = DA_OK;
}

/* Set device ordinal up (under g_dev_mu): the driver's entry points, its compute
 * capability, SM count, name and retained primary context. */
static void device_init(int ordinal) {
  da__cuda *c = &g_dev[ordinal];
  *c = g_cuda;
  CUresult r;
  if ((r = c->DeviceGet(&c->device, ordinal)) != CUDA_SUCCESS) {
    init_fail(ordinal, r == CUDA_ERROR_NO_DEVICE ? DA_ERR_UNSUPPORTED : DA_ERR_DEVICE, "cuDeviceGet", r);
    return;
  }
  int major = 0, minor = 0;
  if ((r = c->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->device)) ||
      (r = c->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->device)) ||
      (r = c->DeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->device))) {
    init_fail(ordinal, DA_ERR_DEVICE, "cuDeviceGetAttribute", r);
    return;
  }
  if (c->DeviceGetAttribute(&c->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                            c->device) != CUDA_SUCCESS)
    c->smem_optin = DA__DEFAULT_DYN_SMEM;
  snprintf(c->arch, sizeof c->arch, "sm_%d%d", major, minor);
  c->cc_major = major;
  if (c->DeviceGetName(c->name, (int)sizeof c->name, c->device) != CUDA_SUCCESS)
    snprintf(c->name, sizeof c->name, "CUDA device %d", ordinal);
  c->name[sizeof c->name - 1] = '\0';
  if ((r = c->DevicePrimaryCtxRetain(&c->primary, c->device)) != CUDA_SUCCESS) {
    init_fail(ordinal, DA_ERR_DEVICE, "cuDevicePrimaryCtxRetain", r);
    return;
  }
  /* The retained primary context and the library stay until the process ends. */
  g_dev_status[ordinal] = DA_OK;
}

/* The device of the CUDA context current on this thread, or -1 (none, or one the driver
 * cannot place) */
static int current_device(void) {
  CUcontext cur = NULL;
  CUdevice d = -1;
  if (g_cuda.CtxGetCurrent(&cur) != CUDA_SUCCESS || !cur || g_cuda.CtxGetDevice(&d) != CUDA_SUCCESS) return -1;
  return d;
}

da_status da__cuda_get(const da_context *ctx, da__cuda **out) {
  DA_RETURN_IF(!out, DA_ERR_INVALID_ARGUMENT, "cuda: NULL output");
  pthread_once(&g_once, cuda_init);
  DA_RETURN_IF(g_status != DA_OK, g_status, "%s", g_error);
  /* the context's device: taken once, from the first thread that needs it */
  int *slot = ctx ? da__context_cuda_device(ctx) : NULL;
  int ordinal = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : -1;
  if (ordinal < 0) {
    ordinal = current_device();
    if (ordinal < 0) ordinal = 0;
    int unset = -1;
    if (slot && !__atomic_compare_exchange_n(slot, &unset, ordinal, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      ordinal = unset; /* another thread's first use took it */
  }
  DA_RETURN_IF(ordinal >= g_ndev || ordinal >= DA_MAX_DEVICES, DA_ERR_UNSUPPORTED,
               "CUDA: device %d is current on this thread, but the library handles devices 0 to %d", ordinal,
               (g_ndev < DA_MAX_DEVICES ? g_ndev : DA_MAX_DEVICES) - 1);
  if (__atomic_load_n(&g_dev_state[ordinal], __ATOMIC_ACQUIRE) == 0) {
    pthread_mutex_lock(&g_dev_mu);
    if (g_dev_state[ordinal] == 0) {
      g_dev_status[ordinal] = DA_ERR_INTERNAL;
      device_init(ordinal);
      __atomic_store_n(&g_dev_state[ordinal], g_dev_status[ordinal] == DA_OK ? 1 : -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_dev_mu);
  }
  DA_RETURN_IF(g_dev_status[ordinal] != DA_OK, g_dev_status[ordinal], "%s", g_dev_error[ordinal]);
  *out = &g_dev[ordinal];
  return DA_OK;
}

int da__cuda_device_ordinal(const da__cuda *c) { return c->device; }

da_status da__cuda_check_stream(const da_context *ctx, da__cuda *c, void *stream) {
  /* NULL and the legacy and per-thread handles (CU_STREAM_LEGACY 0x1, CU_STREAM_PER_THREAD
   * 0x2) name the stream of whatever context is current at the launch: this device's */
  if ((uintptr_t)stream <= 2 || (!c->StreamGetCtx && !c->StreamGetCtx2)) return DA_OK;
  CUcontext sctx = NULL, popped;
  void *green = NULL; /* the stream's green context, if it has one: it runs in the primary context */
  if (!c->StreamGetCtx2 || c->StreamGetCtx2((CUstream)stream, &sctx, &green) != CUDA_SUCCESS) {
    sctx = NULL, green = NULL;
    if (!c->StreamGetCtx || c->StreamGetCtx((CUstream)stream, &sctx) != CUDA_SUCCESS) return DA_OK;
    if (!c->StreamGetGreenCtx || c->StreamGetGreenCtx((CUstream)stream, &green) != CUDA_SUCCESS) green = NULL;
  }
  if (!sctx || sctx == c->primary) return DA_OK; /* a handle the driver does not know: the launch says so */
  CUdevice d = -1;
  if (c->CtxPushCurrent(sctx) != CUDA_SUCCESS) return DA_OK;
  const CUresult r = c->CtxGetDevice(&d);
  c->CtxPopCurrent(&popped);
  DA_RETURN_IF(r == CUDA_SUCCESS && d != c->device, DA_ERR_INVALID_ARGUMENT,
               "CUDA: the stream belongs to device %d, but this context runs its plans on device %d (the device "
               "current on the thread that first used the context for CUDA): use one context per device, created "
               "and first used with that device current",
               d, c->device);
  /* the plans' modules, workspace and pool live in the device's primary context, which a
   * green context's stream runs in too (its own SMs; cuda.h's cuCtxFromGreenCtx) */
  DA_RETURN_IF(r == CUDA_SUCCESS && !green, DA_ERR_INVALID_ARGUMENT,
               "CUDA: the stream belongs to a CUDA context of device %d other than its primary context (one made "
               "by cuCtxCreate, say); dilattn's kernels and memory live in the primary context, the one the CUDA "
               "runtime and PyTorch use: pass a stream of that context (cuDevicePrimaryCtxRetain) or NULL",
               d);
  return DA_OK;
}

const char *da__cuda_arch(const da__cuda *c) { return c->arch; }
const char *da__cuda_device_name(const da__cuda *c) { return c->name; }
int da__cuda_driver_version(const da__cuda *c) { return c->driver_version; }
int da__cuda_sm_count(const da__cuda *c) { return c->sm_count; }
int da__cuda_max_smem_optin(const da__cuda *c) { return c->smem_optin; }

/* Make the primary context current on this thread. *pushed says what leave() restores: 1
 * pop it (another context was current), 2 none current again (none was: the thread's
 * current device, which the CUDA runtime reads, stays the caller's). On failure *call
 * names the failing call. */
static CUresult enter_raw(da__cuda *c, int *pushed, const char **call) {
  *pushed = 0;
  CUcontext cur = NULL;
  CUresult r = c->CtxGetCurrent(&cur);
  *call = "cuCtxGetCurrent";
  if (r != CUDA_SUCCESS || cur == c->primary) return r;
  if (!cur) {
    *call = "cuCtxSetCurrent";
    r = c->CtxSetCurrent(c->primary);
    *pushed = r == CUDA_SUCCESS ? 2 : 0;
    return r;
  }
  *call = "cuCtxPushCurrent";
  r = c->CtxPushCurrent(c->primary);
  *pushed = r == CUDA_SUCCESS;
  return r;
}

static da_status enter(const da_context *ctx, da__cuda *c, int *pushed) {
  const char *call;
  CUresult r = enter_raw(c, pushed, &call);
  return r == CUDA_SUCCESS ? DA_OK : cu_fail(ctx, c, r, call);
}

static void leave(da__cuda *c, int pushed) {
  CUcontext popped;
  if (pushed == 1) c->CtxPopCurrent(&popped);
  else if (pushed == 2) c->CtxSetCurrent(NULL);
}

static CUdeviceptr dptr_of(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

da_status da__cuda_load(const da_context *ctx, da__cuda *c, const void *cubin,
                        const char *function_name, int dyn_smem, da__cuda_kernel *out) {
  DA_RETURN_IF(!c || !cubin || !function_name || !out || dyn_smem < 0, DA_ERR_INVALID_ARGUMENT,
               "cuda: bad argument to load (NULL or negative shared memory)");
  DA_RETURN_IF(dyn_smem > c->smem_optin, DA_ERR_UNSUPPORTED,
               "cuda: %s needs %d bytes of dynamic shared memory; %s allows at most %d per block",
               function_name, dyn_smem, c->name, c->smem_optin);
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUmodule mod = NULL;
  CUfunction fn = NULL;
  da_status st = DA_OK;
  CUresult r = c->ModuleLoadData(&mod, cubin);
  if (r != CUDA_SUCCESS) {
    /* (which kernel's, and the likeliest cause where a compiled kernel is refused: a
     * bundle's or a cache's cubin of a newer CUDA than this driver) */
    const char *name, *text;
    error_text(c, r, &name, &text);
    st = da__set_error(ctx, DA_ERR_DEVICE,
                       "CUDA: cuModuleLoadData failed on %s's module for %s: %d (%s: %s); a cubin built by a newer CUDA "
                       "than this driver (%d.%d) is refused", function_name, c->arch, r, name, text,
                       c->driver_version / 1000, c->driver_version % 1000 / 10);
  } else if ((r = c->ModuleGetFunction(&fn, mod, function_name)) != CUDA_SUCCESS) {
    const char *name, *text;
    error_text(c, r, &name, &text);
    st = da__set_error(ctx, DA_ERR_DEVICE, "CUDA: cuModuleGetFunction(%s) failed: %d (%s: %s)",
                       function_name, r, name, text);
  } else if (dyn_smem > DA__DEFAULT_DYN_SMEM &&
             (r = c->FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      dyn_smem)) != CUDA_SUCCESS) {
    st = cu_fail(ctx, c, r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  } else if (dyn_smem > DA__DEFAULT_DYN_SMEM) {
    /* a hint: the most shared memory the SM's carveout allows, so the CTAs that fit by
     * shared memory (two of the 64-row warp-specialized kernel) are resident together */
    (void)c->FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100);
  }
  if (st != DA_OK && mod) c->ModuleUnload(mod);
  leave(c, pushed);
  if (st == DA_OK) {
    out->module = mod;
    out->function = fn;
  }
  return st;
}

da_status da__cuda_probe(const da_context *ctx, da__cuda *c, const void *cubin) {
  DA_RETURN_IF(!c || !cubin, DA_ERR_INVALID_ARGUMENT, "cuda: bad argument to probe");
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUmodule mod = NULL;
  const CUresult r = c->ModuleLoadData(&mod, cubin);
  const da_status st = r == CUDA_SUCCESS ? DA_OK : cu_fail(ctx, c, r, "cuModuleLoadData");
  if (mod) c->ModuleUnload(mod);
  leave(c, pushed);
  return st;
}

void da__cuda_unload(da__cuda *c, da__cuda_kernel *k) {
  if (!c || !k) return;
  int pushed;
  const char *call;
  if (k->module && enter_raw(c, &pushed, &call) == CUDA_SUCCESS) {
    c->ModuleUnload(k->module);
    leave(c, pushed);
  }
  k->module = NULL;
  k->function = NULL;
}

da_status da__cuda_launch(const da_context *ctx, da__cuda *c, const da__cuda_kernel *k,
                          unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned dyn_smem, void *stream, void **params) {
  return da__cuda_launch_ex(ctx, c, k, gx, gy, gz, bx, by, bz, dyn_smem, stream, params, 0);
}

int da__cuda_pdl(const da__cuda *c) {
  const char *env = getenv("DILATTN_PDL");
  return c && c->LaunchKernelEx && c->cc_major >= 9 && !(env && !strcmp(env, "0"));
}

/* cuTensorMapEncodeTiled with the device's primary context current: cuda.h lists
 * CUDA_ERROR_INVALID_CONTEXT among its results, and the runtime encodes before its first
 * launch, where a caller's thread may have no context yet. The device: the one whose
 * encoder this thread asked for last (da__cuda_tmap_encoder; the runtime encodes right
 * after, on the same thread). */
static __thread da__cuda *tl_encoder;
static int encode_in_context(void *map, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                             const uint64_t *strides, const uint32_t *box, const uint32_t *elem_strides, int interleave,
                             int swizzle, int l2_promotion, int oob_fill) {
  int pushed;
  const char *call;
  da__cuda *c = tl_encoder;
  if (!c) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  CUresult r = enter_raw(c, &pushed, &call);
  if (r != CUDA_SUCCESS) return (int)r;
  r = c->TensorMapEncodeTiled(map, dtype, rank, addr, dims, strides, box, elem_strides, interleave, swizzle,
                              l2_promotion, oob_fill);
  leave(c, pushed);
  return (int)r;
}

da__tmap_encode_fn da__cuda_tmap_encoder(const da__cuda *c) {
  const char *env = getenv("DILATTN_TMA");
  const int ok = c && c >= g_dev && c < g_dev + DA_MAX_DEVICES && c->TensorMapEncodeTiled && c->cc_major >= 9 &&
                 !(env && !strcmp(env, "0"));
  tl_encoder = ok ? (da__cuda *)c : NULL;
  return ok ? encode_in_context : NULL;
}

da_status da__cuda_launch_ex(const da_context *ctx, da__cuda *c, const da__cuda_kernel *k, unsigned gx,
                             unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned dyn_smem,
                             void *stream, void **params, int dependent) {
  DA_RETURN_IF(!c || !k || !k->function, DA_ERR_INVALID_ARGUMENT, "cuda: launch of no kernel");
  DA_RETURN_IF(!gx || !gy || !gz || !bx || !by || !bz, DA_ERR_INVALID_ARGUMENT,
               "cuda: empty launch grid %ux%ux%u block %ux%ux%u", gx, gy, gz, bx, by, bz);
  dependent = dependent && c->LaunchKernelEx;
  da__cu_launch_attribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = DA__CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmatic_stream_serialization_allowed = 1;
  const da__cu_launch_config cfg = {gx, gy, gz, bx, by, bz, dyn_smem, stream, &attr, 1};
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUresult r = dependent ? c->LaunchKernelEx(&cfg, k->function, params, NULL)
                         : c->LaunchKernel(k->function, gx, gy, gz, bx, by, bz, dyn_smem, stream, params, NULL);
  leave(c, pushed);
  if (r == CUDA_SUCCESS) return DA_OK;
  const char *name, *text;
  error_text(c, r, &name, &text);
  return da__set_error(ctx, DA_ERR_DEVICE, "CUDA: %s(grid %ux%ux%u, block %ux%ux%u, %u bytes smem%s) failed: %d (%s: %s)",
                       dependent ? "cuLaunchKernelEx" : "cuLaunchKernel", gx, gy, gz, bx, by, bz, dyn_smem,
                       dependent ? ", programmatic stream serialization; DILATTN_PDL=0 turns it off" : "", r, name,
                       text);
}

da_status da__cuda_malloc(const da_context *ctx, da__cuda *c, size_t bytes, void **dptr) {
  DA_RETURN_IF(!c || !dptr, DA_ERR_INVALID_ARGUMENT, "cuda: NULL argument to malloc");
  if (!bytes) {
    *dptr = NULL;
    return DA_OK;
  }
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUdeviceptr d = 0;
  CUresult r = c->MemAlloc(&d, bytes);
  leave(c, pushed);
  if (r != CUDA_SUCCESS) {
    const char *name, *text;
    error_text(c, r, &name, &text);
    return da__set_error(ctx, r == CUDA_ERROR_OUT_OF_MEMORY ? DA_ERR_NO_MEMORY : DA_ERR_DEVICE,
                         "CUDA: cuMemAlloc(%zu bytes) failed: %d (%s: %s)", bytes, r, name, text);
  }
  *dptr = (void *)(uintptr_t)d;
  return DA_OK;
}

/* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (cuda.h: 4) */
#define DA_MEMPOOL_ATTR_RELEASE_THRESHOLD 4

/* The library's memory pool on a device: it keeps what it holds between executions (no
 * release threshold; da__cuda_trim_pool gives it back). Set up once a device, under
 * g_dev_mu, with its primary context current (the caller's enter()): several threads'
 * first executions used to race on a flag here. It had raised the threshold of the device's default pool, which
 * every library in the process allocating stream-ordered shares. Without the calls (a
 * driver before CUDA 11.2) or where creating it fails, cuMemAllocAsync's default pool as
 * it is. */
static void pool_setup(da__cuda *c) {
  if (!c->MemPoolCreate || !c->MemAllocFromPoolAsync || !c->MemPoolSetAttribute) return;
  da__cu_mempool_props props;
  memset(&props, 0, sizeof props);
  props.alloc_type = DA__CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location_type = DA__CU_MEM_LOCATION_TYPE_DEVICE;
  props.location_id = c->device;
  void *pool = NULL;
  if (c->MemPoolCreate(&pool, &props) != CUDA_SUCCESS || !pool) return;
  uint64_t keep = UINT64_MAX; /* never give memory back between executions */
  c->MemPoolSetAttribute(pool, DA_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  __atomic_store_n(&c->pool, pool, __ATOMIC_RELEASE);
}

void da__cuda_trim_pool(const da_context *ctx) {
  int *slot = ctx ? da__context_cuda_device(ctx) : NULL;
  const int ordinal = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : -1;
  if (ordinal < 0 || ordinal >= DA_MAX_DEVICES || __atomic_load_n(&g_dev_state[ordinal], __ATOMIC_ACQUIRE) != 1)
    return; /* the context never used a device */
  da__cuda *c = &g_dev[ordinal];
  void *pool = __atomic_load_n(&c->pool, __ATOMIC_ACQUIRE);
  if (pool && c->MemPoolTrimTo) c->MemPoolTrimTo(pool, 0);
}

/* pool_setup once a device, by whichever thread comes first (its context current) */
static void pool_once(da__cuda *c) {
  if (__atomic_load_n(&c->pool_tried, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&g_dev_mu);
  if (!c->pool_tried) pool_setup(c);
  __atomic_store_n(&c->pool_tried, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_dev_mu);
}

da_status da__cuda_pool_prepare(const da_context *ctx, da__cuda *c) {
  if (!c || !c->MemAllocAsync) return DA_OK;
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  pool_once(c);
  leave(c, pushed);
  return DA_OK;
}

da_status da__cuda_malloc_async(const da_context *ctx, da__cuda *c, size_t bytes, void *stream, void **dptr) {
  DA_RETURN_IF(!c || !dptr, DA_ERR_INVALID_ARGUMENT, "cuda: NULL argument to malloc");
  if (!c->MemAllocAsync || !c->MemFreeAsync) return da__cuda_malloc(ctx, c, bytes, dptr);
  if (!bytes) {
    *dptr = NULL;
    return DA_OK;
  }
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  pool_once(c);
  CUdeviceptr d = 0;
  void *pool = __atomic_load_n(&c->pool, __ATOMIC_ACQUIRE);
  CUresult r = pool ? c->MemAllocFromPoolAsync(&d, bytes, pool, (CUstream)stream) : CUDA_ERROR_NOT_SUPPORTED;
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) /* no pool of our own, or one that refused */
    r = c->MemAllocAsync(&d, bytes, (CUstream)stream);
  leave(c, pushed);
  if (r != CUDA_SUCCESS) {
    const char *name, *text;
    error_text(c, r, &name, &text);
    return da__set_error(ctx, r == CUDA_ERROR_OUT_OF_MEMORY ? DA_ERR_NO_MEMORY : DA_ERR_DEVICE,
                         "CUDA: cuMemAllocAsync(%zu bytes) failed: %d (%s: %s)", bytes, r, name, text);
  }
  *dptr = (void *)(uintptr_t)d;
  return DA_OK;
}

int da__cuda_free_async(da__cuda *c, void *dptr, void *stream) {
  if (!c || !dptr) return 1;
  if (!c->MemFreeAsync) return 0; /* caller must synchronize and da__cuda_free */
  int pushed;
  const char *call;
  if (enter_raw(c, &pushed, &call) != CUDA_SUCCESS) return 0;
  c->MemFreeAsync(dptr_of(dptr), (CUstream)stream);
  leave(c, pushed);
  return 1;
}

void da__cuda_free(da__cuda *c, void *dptr) {
  if (!c || !dptr) return;
  int pushed;
  const char *call;
  if (enter_raw(c, &pushed, &call) != CUDA_SUCCESS) return;
  c->MemFree(dptr_of(dptr));
  leave(c, pushed);
}

da_status da__cuda_memcpy_htod(const da_context *ctx, da__cuda *c, void *dst, const void *src,
                               size_t bytes) {
  DA_RETURN_IF(!c || ((!dst || !src) && bytes), DA_ERR_INVALID_ARGUMENT,
               "cuda: NULL argument to memcpy host to device");
  if (!bytes) return DA_OK;
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUresult r = c->MemcpyHtoD(dptr_of(dst), src, bytes);
  leave(c, pushed);
  return r == CUDA_SUCCESS ? DA_OK : cu_fail(ctx, c, r, "cuMemcpyHtoD");
}

da_status da__cuda_memcpy_dtoh(const da_context *ctx, da__cuda *c, void *dst, const void *src,
                               size_t bytes) {
  DA_RETURN_IF(!c || ((!dst || !src) && bytes), DA_ERR_INVALID_ARGUMENT,
               "cuda: NULL argument to memcpy device to host");
  if (!bytes) return DA_OK;
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUresult r = c->MemcpyDtoH(dst, dptr_of(src), bytes);
  leave(c, pushed);
  return r == CUDA_SUCCESS ? DA_OK : cu_fail(ctx, c, r, "cuMemcpyDtoH");
}

int da__cuda_stream_ordered(const da__cuda *c) { return c && c->MemAllocAsync && c->MemFreeAsync && c->MemsetD32Async; }

da_status da__cuda_zero_async(const da_context *ctx, da__cuda *c, void *dptr, size_t words, void *stream) {
  DA_RETURN_IF(!c || !dptr, DA_ERR_INVALID_ARGUMENT, "cuda: NULL argument to memset");
  DA_RETURN_IF(!c->MemsetD32Async, DA_ERR_UNSUPPORTED, "cuda: the driver has no cuMemsetD32Async");
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUresult r = c->MemsetD32Async(dptr_of(dptr), 0u, words, (CUstream)stream);
  leave(c, pushed);
  return r == CUDA_SUCCESS ? DA_OK : cu_fail(ctx, c, r, "cuMemsetD32Async");
}

da_status da__cuda_sync(const da_context *ctx, da__cuda *c, void *stream) {
  DA_RETURN_IF(!c, DA_ERR_INVALID_ARGUMENT, "cuda: NULL driver state");
  int pushed;
  DA_TRY(enter(ctx, c, &pushed));
  CUresult r = stream ? c->StreamSynchronize(stream) : c->CtxSynchronize();
  leave(c, pushed);
  if (r == CUDA_SUCCESS) return DA_OK;
  return cu_fail(ctx, c, r, stream ? "cuStreamSynchronize" : "cuCtxSynchronize");
}
