/* host_compiler.h - host target: build a rendered C source into a shared object with the
 * system C compiler and load its entry point; the kernel ABI the runtime calls. */
#ifndef DA_HOST_COMPILER_H
#define DA_HOST_COMPILER_H

#include "runtime/internal.h"

/* Must match the struct in templates/host/prims.h. */
typedef struct {
  const void *q, *k, *v;
  void *out;
  float *lse;
  int64_t batch, seq_len;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  const uint8_t *const *masks;
} da__host_args;

/* Entry point of a host kernel: (batch, head) pairs [bh_begin, bh_end). */
typedef int (*da__host_kernel_fn)(const da__host_args *a, int64_t bh_begin, int64_t bh_end,
                                  float *ws, void *scratch);

typedef struct {
  void *dl;               /* dlopen handle */
  da__host_kernel_fn fn;
  size_t scratch_bytes;   /* tile buffer per worker (<symbol>_scratch_bytes()) */
  double compile_ms;
} da__host_module;

/* Compile source (C) and resolve symbol. The compiler is $CC or cc; on failure the
 * status is DA_ERR_COMPILE and the detail holds the compiler's output and the path where
 * the failing source was kept (a process's first 4 failures; later ones are removed). DA_ERR_UNSUPPORTED when no C compiler can be run. */
DA_HIDDEN da_status da__host_compile(const da_context *ctx, const char *source,
                                     const char *symbol, da__host_module *out);
DA_HIDDEN void da__host_module_unload(da__host_module *m);

/* The pieces: build source into <dir>/kernel.so (a fresh temporary folder; remove it
 * with da__host_build_cleanup), and load a shared object's entry point. */
DA_HIDDEN da_status da__host_build(const da_context *ctx, const char *source, char *dir, size_t dcap,
                                   char *so, size_t scap, double *ms);
DA_HIDDEN void da__host_build_cleanup(const char *dir);
DA_HIDDEN da_status da__host_load(const da_context *ctx, const char *so, const char *symbol,
                                  da__host_module *out);
/* Compiler flags (part of the host artifact key). */
DA_HIDDEN const char *da__host_flags(void);

/* SHA-256 (hex) of this CPU's instruction-set extensions (x86-64: those of
 * da__host_isa_has, by CPUID; elsewhere /proc/cpuinfo's Features line, or its model name, or
 * "unknown"): a host key's part where CC builds for the CPU it runs on (-march=native). */
DA_HIDDEN void da__host_cpu_features(char hex[65]);
/* Whether this CPU (and its OS: AVX and AVX-512 register state) has the x86 extension name
 * (templates/host/prims.h's words: "avx2", "avx512f", "sse4.1", ...): 1, 0, or -1 for a
 * name this runtime cannot check (any name off x86-64). */
DA_HIDDEN int da__host_isa_has(const char *name);
/* Of words (space-separated extension names a module was compiled for), the first this CPU
 * lacks or that cannot be checked, into missing (cap bytes): 1, else 0. */
DA_HIDDEN int da__host_isa_missing(const char *words, char *missing, size_t cap);

/* Whether two CCs give the same options (the words after the command's: "cc -O3" and
 * "gcc-12 -O3" do, "cc" and "cc -ffast-math" do not); "" gives none that matches. */
DA_HIDDEN int da__host_cc_same_options(const char *a, const char *b);

/* Name of the C compiler the host backend uses. */
DA_HIDDEN const char *da__host_cc(void);

/* 1 when CC's program (its first word) is an executable file: a path, or found on PATH;
 * else 0 with why it is not in why (NUL-terminated, why may be NULL). */
DA_HIDDEN int da__host_cc_found(char *why, size_t why_cap);

#endif
