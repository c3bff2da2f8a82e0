/* nvrtc.h - CUDA C++ to cubin with NVRTC, opened at run time with dlopen (no link-time
 * CUDA dependency, DESIGN.md decision 1), with the ptxas resource report (registers,
 * spills, static shared memory, stack) parsed out of the compile log. */
#ifndef DA_NVRTC_H
#define DA_NVRTC_H

#include <stddef.h>

#include "runtime/internal.h"

typedef struct {
  void *cubin;       /* malloc'ed ELF image */
  size_t cubin_size;
  char *log;         /* malloc'ed NUL-terminated NVRTC log ("" when empty) */
  int registers;     /* max over the functions reported by ptxas; -1 if not reported */
  int spill_bytes;   /* spill stores + spill loads, summed over functions; -1 if not reported */
  int shared_bytes;  /* static smem, max over entries; -1 if not reported */
  int stack_bytes;   /* stack frame, max over functions; -1 if not reported */
  int wgmma_serialized; /* ptxas notes that it serialized wgmma or injected a wait (C75xx "wgmma ...
                           serialized" / "warpgroup.wait is injected"): the overlap is lost */
  double compile_ms; /* wall time of nvrtcCompileProgram */
  char arch[16];     /* the arch compiled for ("sm_90") */
} da__nvrtc_result;

/* NVRTC's version. The library is opened once per process (thread-safe): from
 * $DILATTN_NVRTC_LIB when set (and only from there), else libnvrtc.so.13,
 * libnvrtc.so.12, libnvrtc.so, then libnvrtc.so* under $CUDA_HOME/lib64, $CUDA_PATH/lib64
 * and /usr/local/cuda/lib64. DA_ERR_UNSUPPORTED, naming what was tried, when absent. */
/* Whether NVRTC can be used (loaded once a process); no error recorded. */
DA_HIDDEN int da__nvrtc_available(void);
DA_HIDDEN da_status da__nvrtc_version(const da_context *ctx, int *major, int *minor);

/* DA_OK when this NVRTC can compile for arch ("sm_90", "sm_90a"); else
 * DA_ERR_INVALID_ARGUMENT (not of the form sm_XY) or DA_ERR_UNSUPPORTED (NVRTC does not
 * target it: the message lists what it does), with the message in ctx. Loads NVRTC. */
DA_HIDDEN da_status da__nvrtc_check_arch(const da_context *ctx, const char *arch);

/* Compile one self-contained source to a cubin for arch ("sm_80", "sm_90a", ...).
 * name is the file name used in messages and dumps ("<kernel>.cu"). Options:
 * --gpu-architecture=<arch> -std=c++17 -default-device --ptxas-options=-v (and --no-cache
 * from NVRTC 12.9, whose own cache skips ptxas and its report), then the n_extra
 * extra_opts. Returns DA_OK; DA_ERR_COMPILE with the NVRTC log and the path of the dumped
 * source ($DILATTN_DUMP_DIR, else a fresh folder under $TMPDIR or /tmp);
 * DA_ERR_UNSUPPORTED when NVRTC is absent or cannot target arch;
 * DA_ERR_INVALID_ARGUMENT for a bad argument; DA_ERR_NO_MEMORY. With $DILATTN_DUMP_DIR
 * set the source is written there on success too. Thread-safe. *out is written only on
 * success; release it with da__nvrtc_result_free. */
DA_HIDDEN da_status da__nvrtc_compile(const da_context *ctx, const char *source,
                                      const char *name, const char *arch,
                                      const char *const *extra_opts, int n_extra,
                                      da__nvrtc_result *out);
DA_HIDDEN void da__nvrtc_result_free(da__nvrtc_result *r);

/* Compiles started on this thread poll *flag (NVRTC's flow callback, CUDA 12+) and stop
 * with DA_ERR_CANCELLED once it is nonzero. NULL: no cancellation. */
DA_HIDDEN void da__nvrtc_set_cancel(volatile int *flag);

/* Parse a ptxas -v report out of log into r's registers/spill/shared/stack fields (-1
 * where absent). Exposed for the tests. */
DA_HIDDEN void da__nvrtc_parse_ptxas(const char *log, da__nvrtc_result *r);

#endif
