/* bench_emu_work.c - tensor-core work the generated CUDA kernels issue, counted exactly
 * by running them in the CPU emulator (tests/emu): warp-level mma.m16n8k16 executed
 * (4096 FLOPs each) against the effective FLOPs of DESIGN.md ("Where we are measured":
 * 4 * B * D * attended (query, key) pairs). efficiency = effective / issued is the
 * fraction of tensor-core work that is not masked away or padding; it bounds what the
 * kernel can reach relative to a dense kernel at the same mma throughput. mma per
 * ldmatrix (each ldmatrix.x4 reads 512 bytes of shared memory) says whether the loop can
 * be fed from shared memory: about 2 cycles of mma.sync per 4 cycles of an SM's shared
 * memory bandwidth at 2 per ldmatrix on an H100, balanced at 4. Counts are
 * deterministic, so this measures on a machine without a GPU what the tiling and the
 * skipping decide; the GPU benchmark (bench_gpu.py) measures time.
 *
 * Each config runs under the fused and the split strategy, with the built-in templates
 * and, with --baseline DIR (a DILATTN_TEMPLATE_DIR layout: cuda/, host/, lua/), with a
 * baseline's templates in the same process.
 * --head-dim D (default 32) and --mma wgmma or wgmma-ws (the sm_90a paths, D = 64 or 128: their
 * wgmma.mma_async FLOPs count as issued work; ldmatrix does not apply there).
 * The groups of LongNet 5-branch (longnet5_g123, longnet5_g45) run only when --configs names them.
 * Run: build/bench/bench_emu_work tests/emu [--n N] [--head-dim D] [--mma sync|wgmma|wgmma-ws] [--baseline DIR]
 *      [--configs a,b] [--out FILE.json] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu/emu_plan.h"
#include "emu/emu_runtime.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Attended (query, key) pairs of head h, summed over branches and segments. */
static double attended_pairs(const da_spec *s, int64_t N) {
  double total = 0;
  for (int h = 0; h < s->num_heads; h++)
    for (int i = 0; i < s->num_branches; i++) {
      int64_t w = s->segment_lengths[i], r = s->dilation_rates[i];
      int64_t o = h % r; /* offsets "mod", longnet mode: the configs below */
      for (int64_t s0 = 0; s0 < N; s0 += w) {
        int64_t seg = w < N - s0 ? w : N - s0;
        if (o >= seg) continue;
        double L = (double)((seg - o + r - 1) / r);
        total += s->causal ? L * (L + 1) / 2 : L * L;
      }
    }
  return total;
}

/* Fraction of the attended pairs the sparsity layout keeps (1 without sparsity). */
static double layout_density(da_context *ctx, const da_spec *s, int64_t N) {
  if (s->sparsity.layout == DA_LAYOUT_NONE) return 1.0;
  da_plan *plan = NULL;
  double d = NAN;
  if (da_plan_create(ctx, s, DA_BACKEND_HOST, &plan) == DA_OK) da_plan_density(plan, N, &d);
  da_plan_destroy(plan);
  return d;
}

/* name is one of list's comma-separated items */
static int in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

typedef struct {
  const char *name;
  int nb;
  int64_t w[5], r[5];
  da_layout layout;
  int64_t block, window, stride;
} config;

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_emu_work EMU_INCLUDE_DIR [--n N] [--head-dim D] [--mma sync|wgmma|wgmma-ws] [--baseline DIR] "
                    "[--configs a,b] [--out FILE]\n");
    return 2;
  }
  int64_t N = 8192;
  int D = 32, wgmma = 0; /* cuda_mma: 0 mma.sync, 2 wgmma, 4 warp-specialized */
  const char *baseline = NULL, *out_path = NULL, *only = NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) N = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--baseline")) baseline = argv[i + 1];
    else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
    else if (!strcmp(argv[i], "--configs")) only = argv[i + 1];
    else if (!strcmp(argv[i], "--head-dim")) D = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mma")) {
      wgmma = !strcmp(argv[i + 1], "wgmma") ? 2 : !strcmp(argv[i + 1], "wgmma-ws") ? 4 : 0;
      if (!wgmma && strcmp(argv[i + 1], "sync")) {
        fprintf(stderr, "--mma %s: sync, wgmma or wgmma-ws\n", argv[i + 1]);
        return 2;
      }
    }
  }
  if (D < 16 || D > 128 || D % 16) {
    fprintf(stderr, "--head-dim %d: a multiple of 16 up to 128 (the tensor-core path)\n", D);
    return 2;
  }
  if (da_emu_plan_init(argv[1])) return 1;
  static const config configs[] = {
      {"longnet5", 5, {2048, 4096, 8192, 16384, 32768}, {1, 2, 4, 6, 12}, DA_LAYOUT_NONE, 0, 0, 0},
      /* LongNet 5-branch as two fused groups (bench/results/model-fused-groups.md): the
       * branches whose rates divide 4 (g = 2048, R = 4: 512 rows a residue class, whole
       * tiles) and the two long ones (g = 16384, R = 12) */
      {"longnet5_g123", 3, {2048, 4096, 8192}, {1, 2, 4}, DA_LAYOUT_NONE, 0, 0, 0},
      {"longnet5_g45", 2, {16384, 32768}, {6, 12}, DA_LAYOUT_NONE, 0, 0, 0},
      {"longnet2", 2, {2048, 4096}, {1, 2}, DA_LAYOUT_NONE, 0, 0, 0},
      {"dense2048", 1, {2048}, {1}, DA_LAYOUT_NONE, 0, 0, 0},
      {"local_window", 1, {2048}, {1}, DA_LAYOUT_LOCAL_WINDOW, 32, 1, 0},
      {"dilated_sparse2", 2, {2048, 4096}, {1, 2}, DA_LAYOUT_DILATED_SPARSE, 32, 0, 4},
  };
  const char *templates[2] = {"built-in", baseline};
  da_context *ctx;
  da_context_create(&ctx);
  FILE *out = out_path ? fopen(out_path, "w") : stdout;
  if (!out) {
    perror(out_path);
    return 1;
  }
  fprintf(out, "{\"bench\": \"emu_work\", \"seq_len\": %lld, \"head_dim\": %d, \"heads\": 1, \"dtype\": \"float16\", "
               "\"mma\": \"%s\",\n \"results\": [\n", (long long)N, D, wgmma == 4 ? "wgmma-ws" : wgmma ? "wgmma" : "sync");
  int first = 1, rc = 0;
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
    for (int causal = 1; causal >= 0; causal--)
      for (int strat = 0; strat < 2; strat++)
        for (int t = 0; t < (baseline ? 2 : 1); t++) {
          if (only ? !in_list(only, configs[c].name) : !strncmp(configs[c].name, "longnet5_g", 10)) continue;
          da_spec s;
          da_spec_init(&s);
          s.num_branches = configs[c].nb;
          for (int b = 0; b < s.num_branches; b++)
            s.segment_lengths[b] = configs[c].w[b], s.dilation_rates[b] = configs[c].r[b];
          s.num_heads = s.num_kv_heads = 1;
          s.head_dim = D;
          s.dtype = DA_DTYPE_FLOAT16;
          s.causal = causal;
          s.sparsity.layout = configs[c].layout;
          s.sparsity.block = configs[c].block ? configs[c].block : 1;
          s.sparsity.window = configs[c].window;
          s.sparsity.num_strides = configs[c].stride ? 1 : 0;
          s.sparsity.strides[0] = configs[c].stride;
          da_plan_options o = {0, 0, strat ? 1 << 30 : 1, 0, wgmma}; /* split: no fused tile is big enough */
          if (t) setenv("DILATTN_TEMPLATE_DIR", templates[t], 1);
          else unsetenv("DILATTN_TEMPLATE_DIR");
          size_t bytes = (size_t)N * (size_t)D * 2;
          void *qkv = calloc(1, bytes), *o_ = malloc(bytes);
          float *lse = malloc((size_t)N * 4);
          for (size_t i = 0; i < bytes / 2; i++) ((unsigned short *)qkv)[i] = (unsigned short)(0x3000 + i % 977);
          da_args a;
          da_args_init(&a, &s, 1, N, qkv, qkv, qkv, o_, lse);
          unsigned long long m0 = da_emu_mma_count(), l0 = da_emu_ldmatrix_count(), b0 = da_emu_barrier_count();
          double w0 = da_emu_wgmma_flops();
          double t0 = now_s();
          da_status st = da_emu_execute(ctx, &s, &o, &a, bytes, bytes, bytes, (size_t)N * 4);
          double secs = now_s() - t0;
          unsigned long long mma = da_emu_mma_count() - m0, ldsm = da_emu_ldmatrix_count() - l0,
                             bars = da_emu_barrier_count() - b0;
          double eff_flops = 4.0 * D * attended_pairs(&s, N) * layout_density(ctx, &s, N),
                 issued = 4096.0 * (double)mma + (da_emu_wgmma_flops() - w0);
          if (st != DA_OK) {
            fprintf(stderr, "%s: %s\n", configs[c].name, da_context_last_error(ctx));
            rc = 1;
          }
          fprintf(out, "%s  {\"config\": \"%s\", \"causal\": %s, \"strategy\": \"%s\", \"templates\": \"%s\", "
                       "\"ok\": %s, \"effective_gflop\": %.4f, \"issued_mma\": %llu, \"issued_gflop\": %.4f, "
                       "\"efficiency\": %.4f, \"issued_ldmatrix\": %llu, \"mma_per_ldmatrix\": %.3f, "
                       "\"cta_barriers\": %llu, \"emulation_s\": %.1f}",
                  first ? "" : ",\n", configs[c].name, causal ? "true" : "false", strat ? "split" : "fused",
                  t ? "baseline" : "built-in", st == DA_OK ? "true" : "false", eff_flops / 1e9, mma, issued / 1e9,
                  issued > 0 ? eff_flops / issued : 0.0, ldsm, ldsm ? (double)mma / (double)ldsm : 0.0, bars, secs);
          fflush(out);
          first = 0;
          free(qkv), free(o_), free(lse);
        }
  fprintf(out, "\n]}\n");
  if (out != stdout) fclose(out);
  da_context_destroy(ctx);
  da_emu_plan_done(1);
  return rc;
}
