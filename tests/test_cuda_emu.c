/* test_cuda_emu.c - the generated CUDA kernels, unchanged, run on the CPU: each spec is
 * rendered for the CUDA target, compiled by g++ with -DDA_EMULATE (tests/emu/da_emu.h
 * stands in for the warp-level primitives, on top of the PTX references of
 * templates/cuda/da_device.cuh) and launched in the order the CUDA backend launches them
 * (da__cuda_launch_sequence) by the fiber emulator of tests/emu/emu_runtime.cpp, which
 * also checks barriers, cp.async, ldmatrix and global accesses (see da_emu.h).
 *
 * This is how a machine without a GPU tests what the CUDA kernels compute: the tile
 * classification, the fused residue mapping, the mma fragment plumbing, the -inf
 * handling of the online softmax, the split merge and the grids. What it cannot test is
 * whether the hardware agrees with the references (test_gpu does that on a device).
 *
 * Run: build/tests/test_cuda_emu INCLUDE_DIR GOLDEN_DIR [golden|random|edge|all] [FIRST COUNT]
 * (ctest runs the golden cases and shards of the random specs). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_suite.h"
#include "emu/emu_runtime.h"
#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "test_util.h"

static const char *include_dir;
static char work_dir[256];
static int launches;

typedef struct {
  const da_context *ctx;
  void *fn[DA_CUDA_K_COUNT];
  unsigned long long seed;
} emu_launch_ctx;

static void invoke(void *kernel, const void *args) {
  ((void (*)(da__cuda_args))kernel)(*(const da__cuda_args *)args);
}

static da_status emu_launch(void *user, int which, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                            unsigned smem, da__cuda_args *a) {
  emu_launch_ctx *L = user;
  char err[2048];
  launches++;
  if (da_emu_launch(invoke, L->fn[which], a, gx, gy, gz, threads, smem, L->seed++, err, sizeof err))
    return da__set_error(L->ctx, DA_ERR_DEVICE, "emulated launch (%u,%u,%u)x%u: %s", gx, gy, gz, threads, err);
  return DA_OK;
}

/* The runner: render, compile for the emulator, launch over host arrays. */
static da_status run_emu(void *user, da_context *ctx, const da_spec *s, int64_t B, int64_t N, const void *q,
                         const void *k, const void *v, void *out, float *lse) {
  (void)user;
  da__rendered r;
  DA_TRY(da__render_ex(ctx, s, DA_TARGET_CUDA, NULL, &r));
  char so[512], err[8192];
  da_status st = DA_OK;
  void *lib = NULL, *ws = NULL;
  const unsigned char *mask_table[DA_MAX_BRANCHES];
  if (da_emu_compile(r.source, work_dir, r.key, include_dir, so, sizeof so, err, sizeof err)) {
    st = da__set_error(ctx, DA_ERR_COMPILE, "%s: %s", r.kernel_name, err);
    goto out;
  }
  lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    st = da__set_error(ctx, DA_ERR_COMPILE, "dlopen %s: %s", so, dlerror());
    goto out;
  }
  emu_launch_ctx L = {ctx, {NULL}, 0x5eedull ^ (unsigned long long)N};
  for (int i = 0; i < DA_CUDA_K_COUNT; i++) {
    const char *suffix = da__cuda_kernel_suffix(r.strategy, i);
    if (!suffix) continue;
    char name[300];
    snprintf(name, sizeof name, "%s%s", r.kernel_name, suffix);
    L.fn[i] = dlsym(lib, name);
    if (!L.fn[i]) {
      st = da__set_error(ctx, DA_ERR_COMPILE, "kernel %s missing from the module", name);
      goto out;
    }
  }
  da_args args;
  da_args_init(&args, s, B, N, q, k, v, out, lse);
  da__cuda_args a;
  da__cuda_args_fill(&a, &args);
  size_t es = s->dtype == DA_DTYPE_FLOAT32 ? 4 : 2;
  size_t qb = (size_t)(B * N * s->num_heads * s->head_dim) * es, kb = (size_t)(B * N * s->num_kv_heads * s->head_dim) * es;
  da_emu_reset_buffers();
  da_emu_register_buffer(q, qb, 0);
  da_emu_register_buffer(k, kb, 0);
  da_emu_register_buffer(v, kb, 0);
  da_emu_register_buffer(out, qb, 1);
  da_emu_register_buffer(lse, (size_t)(B * s->num_heads * N) * 4, 1);
  if (s->sparsity.layout == DA_LAYOUT_EXPLICIT) {
    for (int b = 0; b < s->num_branches; b++) mask_table[b] = s->sparsity.explicit_masks[b];
    a.masks = mask_table;
  }
  size_t wsb = da__cuda_workspace_bytes(&r, s->num_heads, B, N);
  if (wsb) {
    ws = malloc(wsb);
    a.ws = ws;
    da_emu_register_buffer(ws, wsb, 1);
  }
  memset(out, 0xff, qb); /* NaN: every position must be written */
  memset(lse, 0xff, (size_t)(B * s->num_heads * N) * 4);
  st = da__cuda_launch_sequence(ctx, &r, s->num_heads, s->head_dim, &a, emu_launch, &L);
out:
  free(ws);
  if (lib) dlclose(lib);
  da__rendered_free(&r);
  return st;
}

static void test_random(da_context *ctx, int first, int count) {
  for (int i = first; i < first + count; i++) {
    da_spec s;
    int64_t B, N;
    bs_random_spec(i, 400, &s, &B, &N);
    char what[64];
    snprintf(what, sizeof what, "random spec %d", i);
    bs_check(ctx, &s, B, N, 1000 + (uint64_t)i, what, run_emu, NULL);
  }
}

/* Shapes the random family rarely reaches: the LongNet tiling with several branches and
 * a ragged tail on the tensor-core path, each dtype; fused with lcm(r) > 1; split and
 * single forced; D = 128 (the largest mma tile); fp32 on the SIMT path. */
static void test_edge(da_context *ctx) {
  struct {
    int nb;
    int64_t w[3], r[3];
    int d, causal, mode, heads, kv;
    da_dtype t;
    da_layout lay;
    int64_t n;
  } cases[] = {
      {3, {64, 128, 256}, {1, 2, 4}, 64, 1, DA_MODE_LONGNET, 4, 2, DA_DTYPE_FLOAT16, DA_LAYOUT_NONE, 700},
      {3, {64, 128, 256}, {1, 2, 4}, 64, 0, DA_MODE_LONGNET, 4, 4, DA_DTYPE_BFLOAT16, DA_LAYOUT_NONE, 520},
      {2, {128, 256}, {2, 4}, 128, 1, DA_MODE_LONGNET, 2, 1, DA_DTYPE_FLOAT16, DA_LAYOUT_NONE, 300},
      {2, {256, 512}, {1, 2}, 32, 1, DA_MODE_GROUPED, 4, 2, DA_DTYPE_BFLOAT16, DA_LAYOUT_LOCAL_WINDOW, 600},
      {1, {512, 0, 0}, {1, 0, 0}, 96, 1, DA_MODE_LONGNET, 2, 2, DA_DTYPE_FLOAT16, DA_LAYOUT_GLOBAL_LOCAL, 512},
      {2, {64, 128}, {1, 2}, 64, 1, DA_MODE_LONGNET, 2, 2, DA_DTYPE_FLOAT32, DA_LAYOUT_NONE, 333},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    da_spec s;
    da_spec_init(&s);
    s.num_branches = cases[i].nb;
    for (int b = 0; b < s.num_branches; b++) s.segment_lengths[b] = cases[i].w[b], s.dilation_rates[b] = cases[i].r[b];
    s.head_dim = cases[i].d;
    s.causal = cases[i].causal;
    s.mode = (da_mode)cases[i].mode;
    s.num_heads = cases[i].heads;
    s.num_kv_heads = cases[i].kv;
    s.dtype = cases[i].t;
    s.sparsity.layout = cases[i].lay;
    s.sparsity.block = 16;
    s.sparsity.window = 2;
    s.sparsity.global = 1;
    char what[64];
    snprintf(what, sizeof what, "edge case %zu", i);
    bs_check(ctx, &s, 1, cases[i].n, 77 + i, what, run_emu, NULL);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_cuda_emu INCLUDE_DIR GOLDEN_DIR [golden|random|edge|all] [FIRST COUNT]\n");
    return 2;
  }
  include_dir = argv[1];
  const char *which = argc > 3 ? argv[3] : "all";
  int first = argc > 4 ? atoi(argv[4]) : 0, count = argc > 5 ? atoi(argv[5]) : 24;
  snprintf(work_dir, sizeof work_dir, "%s/dilattn-emu-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(work_dir)) {
    perror("mkdtemp");
    return 1;
  }
  da_context *ctx;
  da_context_create(&ctx);
  int all = !strcmp(which, "all");
  if (all || !strcmp(which, "golden")) bs_golden(ctx, argv[2], "cuda-emu", run_emu, NULL);
  if (all || !strcmp(which, "edge")) test_edge(ctx);
  if (all || !strcmp(which, "random")) test_random(ctx, first, count);
  printf("%d emulated launches\n", launches);
  da_context_destroy(ctx);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work_dir);
  if (!tu_failed && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work_dir);
  return tu_report();
}
