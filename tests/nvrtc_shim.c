/* nvrtc_shim.c - an NVRTC that reports another version (FAKE_NVRTC_VERSION, "12.0") and
 * forwards every call it makes to the real one (FAKE_NVRTC_REAL, else the names the runtime
 * tries): the runtime's choices under an older NVRTC, tested without installing one
 * (DILATTN_NVRTC_LIB=libnvrtc_shim.so; test_fake_device). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef void *prog_t;
static void *real;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void open_real(void) {
  const char *env = getenv("FAKE_NVRTC_REAL");
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so"};
  real = env && *env ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !real; i++) real = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
}
static void *sym(const char *name) {
  pthread_once(&once, open_real);
  return real ? dlsym(real, name) : NULL;
}
#define FWD(ret, name, params, args)                                                                                   \
  ret name params {                                                                                                    \
    ret(*f) params = (ret(*) params)sym(#name);                                                                        \
    return f ? f args : (ret)7; /* NVRTC_ERROR_INTERNAL_ERROR */                                                       \
  }

int nvrtcVersion(int *major, int *minor) {
  const char *v = getenv("FAKE_NVRTC_VERSION");
  if (!sym("nvrtcVersion")) return 7;
  if (sscanf(v ? v : "12.0", "%d.%d", major, minor) != 2) return 7;
  return 0;
}
const char *nvrtcGetErrorString(int r) {
  const char *(*f)(int) = (const char *(*)(int))sym("nvrtcGetErrorString");
  return f ? f(r) : "nvrtc shim: no real NVRTC";
}
FWD(int, nvrtcCreateProgram, (prog_t * p, const char *src, const char *name, int n, const char *const *h,
                              const char *const *i), (p, src, name, n, h, i))
FWD(int, nvrtcDestroyProgram, (prog_t * p), (p))
FWD(int, nvrtcCompileProgram, (prog_t p, int n, const char *const *o), (p, n, o))
FWD(int, nvrtcGetCUBINSize, (prog_t p, size_t *n), (p, n))
FWD(int, nvrtcGetCUBIN, (prog_t p, char *c), (p, c))
FWD(int, nvrtcGetProgramLogSize, (prog_t p, size_t *n), (p, n))
FWD(int, nvrtcGetProgramLog, (prog_t p, char *c), (p, c))
FWD(int, nvrtcGetNumSupportedArchs, (int *n), (n))
FWD(int, nvrtcGetSupportedArchs, (int *a), (a))
FWD(int, nvrtcSetFlowCallback, (prog_t p, int (*cb)(void *, void *), void *payload), (p, cb, payload))
