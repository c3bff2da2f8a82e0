/* bench_execute.c - the library's own host-side cost of one da_plan_execute on the CUDA
 * backend: argument checks, the stream check, launch set-up, pool allocations and memsets,
 * timed against the fake driver (tests/fake_cuda.c), which launches nothing, so that only
 * dilattn's work is on the clock. Configs: bench/configs/ files given on the command line.
 * Prints one JSON object a config, workspace mode (the pool's, or the caller's) and argument
 * mode: median and min microseconds a call over 7 runs of 2000 calls. Arguments "same":
 * every call with one k (a plan's tensor maps then come from its memo after the first);
 * "cycling": k at 65 addresses in turn, one more than the memo keeps (every call encodes).
 * Run: DILATTN_CUDA_LIB=build/tests/libfake_cuda.so build/bench/bench_execute [--seq-len N] CONFIG.json... */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "dilattn.h"

int main(int argc, char **argv) {
  int64_t N = 16384;
  int first = 1;
  if (argc > 2 && !strcmp(argv[1], "--seq-len")) N = atoll(argv[2]), first = 3;
  const char *lib = getenv("DILATTN_CUDA_LIB");
  if (first >= argc || N <= 0 || !lib || !strstr(lib, "fake")) {
    fprintf(stderr, "usage: DILATTN_CUDA_LIB=build/tests/libfake_cuda.so bench_execute [--seq-len N] CONFIG.json...\n"
                    "(the fake driver takes host memory for device memory and launches nothing)\n");
    return 2;
  }
  setenv("DILATTN_TUNING", "0", 1);
  da_context *ctx;
  if (da_context_create(&ctx) != DA_OK) return 1;
  for (int c = first; c < argc; c++) {
    FILE *f = fopen(argv[c], "r");
    char text[16384], msg[512];
    const size_t len = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    da_spec s;
    da_plan *p = NULL;
    if (!len || da_spec_from_json(text, len, &s, msg, sizeof msg) != DA_OK ||
        da_plan_create(ctx, &s, DA_BACKEND_CUDA, &p) != DA_OK) {
      fprintf(stderr, "%s: %s\n", argv[c], len ? (msg[0] ? msg : da_context_last_error(ctx)) : "unreadable");
      return 1;
    }
    const size_t nq = (size_t)N * s.num_heads * s.head_dim, nkv = (size_t)N * s.num_kv_heads * s.head_dim;
    const size_t es = s.dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
    enum { CYCLE = 65 };
    void *q = calloc(nq, es), *k = calloc(nkv + 8 * CYCLE, es), *v = calloc(nkv, es), *o = calloc(nq, es);
    float *lse = calloc((size_t)N * s.num_heads, 4);
    size_t wsb = 0;
    da_plan_workspace_size(p, 1, N, &wsb);
    void *ws = calloc(wsb ? wsb : 1, 1);
    for (int mode = 0; mode < 4; mode++) {
      const int caller = mode & 1, cycling = mode >> 1;
      da_args a;
      da_args_init(&a, &s, 1, N, q, k, v, o, lse);
      if (caller) a.workspace = ws, a.workspace_bytes = wsb;
      if (!caller && wsb > ((size_t)1 << 24)) continue; /* (the fake pool fills what it hands out: not ours) */
      double t[7];
      for (int r = 0; r < 7; r++) {
        const double t0 = now_us();
        for (int i = 0; i < 2000; i++) {
          a.k = (char *)k + (cycling ? (size_t)(i % CYCLE) * 8 * es : 0); /* (16 bytes apart) */
          if (da_plan_execute(p, &a) != DA_OK) {
            fprintf(stderr, "%s: %s\n", argv[c], da_context_last_error(ctx));
            return 1;
          }
        }
        t[r] = (now_us() - t0) / 2000;
      }
      const stat_t st = stats(t, 7);
      printf("{\"config\": \"%s\", \"seq_len\": %lld, \"strategy\": \"%s\", \"workspace\": \"%s\", "
             "\"workspace_bytes\": %zu, \"args\": \"%s\", \"us_median\": %.3f, \"us_min\": %.3f}\n",
             argv[c], (long long)N, da_plan_strategy(p), caller ? "caller" : "pool", wsb, cycling ? "cycling" : "same",
             st.median, st.min);
    }
    free(q), free(k), free(v), free(o), free(lse), free(ws);
    da_plan_destroy(p);
  }
  da_context_destroy(ctx);
  return 0;
}
