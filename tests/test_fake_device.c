/* test_fake_device.c - the CUDA backend's decisions and launches on a machine without a
 * GPU, through tests/fake_cuda.c (a driver that reports one sm_90 device with 132 SMs,
 * runs no kernel and logs every launch). NVRTC compiles for real.
 *  - the instruction a plan gets: the warp-specialized kernel with TMA by default on sm_90,
 *    also where the options set a tile or force the strategy but leave cuda_mma 0
 *    (dilattn.h); without TMA under a sparse layout or a driver before CUDA 12.1 (where a
 *    TMA plan past 4 KiB of parameters is refused); mma.sync where the warp-specialized
 *    kernel refuses the options; an explicit cuda_mma is never changed;
 *  - the launches of an execution: a split plan's branch launches, their grids against the
 *    tiles of each branch counted here from the spec, the first launch plain and the rest
 *    programmatic dependent ones (DILATTN_PDL=0: none), runs of tokens under
 *    DILATTN_WORKSPACE_LIMIT, a fused plan's one launch.
 *  - the fallback to mma.sync also where the warp-specialized kernel does not compile (a
 *    planted #error in a copy of the templates) or DILATTN_DISABLE_JIT finds it nowhere
 *    while the disk cache holds the mma.sync one;
 *  - a caller's workspace: too small or misaligned refused before any launch, the least
 *    one taken in runs; a batch past the grid refused;
 *  - a caller's own current context survives the library's calls (pushed and popped);
 *  - tuning records: the default candidate's (all 0) gives the default kernel, as
 *    the tuner timed it (it gave mma.sync); an older tuner's mma.sync record (tiles set,
 *    cuda_mma 0) still gives mma.sync.
 * Run: build/tests/test_fake_device build/tests/libfake_cuda.so templates */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gen/render.h"
#include "runtime/cuda_backend.h"
#include "runtime/fileio.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc.h"
#include "runtime/tuning_db.h"
#include "test_util.h"

static char log_path[256];

typedef struct {
  char name[256];
  unsigned g[3], b[3], smem;
  int dependent, tma;
  unsigned long long map0; /* tma: the first tensor map's global address */
  int dev;                 /* the device whose context was current */
  long long ctr;           /* a persistent grid's counter at the launch (-1: none) */
} launch_t;

typedef struct { /* a tensor map encoded (tests/fake_cuda.c cuTensorMapEncodeTiled) */
  unsigned long long addr, dims[5], strides[4];
  unsigned box[5];
  int rank, swizzle;
} tmap_t;

/* "tmap addr P dims D.. strides S.. box B.. swizzle W dtype T" (any rank) into *t */
static int parse_tmap(const char *line, tmap_t *t) {
  void *addr;
  int at = 0;
  if (sscanf(line, "tmap addr %p dims%n", &addr, &at) < 1 || !at) return 0;
  memset(t, 0, sizeof *t);
  t->addr = (unsigned long long)(uintptr_t)addr;
  const char *p = line + at;
  int n = 0, k;
  while (n < 5 && sscanf(p, " %llu%n", &t->dims[n], &k) == 1) p += k, n++;
  t->rank = n;
  if (sscanf(p, " strides%n", &k) != 0 || !k) return 0;
  p += k;
  for (int i = 0; i + 1 < n; i++, p += k)
    if (sscanf(p, " %llu%n", &t->strides[i], &k) != 1) return 0;
  if (sscanf(p, " box%n", &k) != 0 || !k) return 0;
  p += k;
  for (int i = 0; i < n; i++, p += k)
    if (sscanf(p, " %u%n", &t->box[i], &k) != 1) return 0;
  return sscanf(p, " swizzle %d", &t->swizzle) == 1;
}
static tmap_t tmaps[128];
static int ntmaps;

/* The launches logged since the last call (the log is emptied), the tensor maps encoded
 * since then into tmaps / ntmaps. */
static int read_launches(launch_t *out, int cap) {
  FILE *f = fopen(log_path, "r");
  int n = 0;
  char line[512];
  ntmaps = 0;
  while (f && fgets(line, sizeof line, f)) {
    launch_t L;
    tmap_t t;
    L.tma = 0, L.map0 = 0, L.dev = -1, L.ctr = -1;
    if (sscanf(line, "launch %255s grid %u %u %u block %u %u %u smem %u dependent %d stream %*s tma %d %llx dev %d ctr %lld",
               L.name, &L.g[0], &L.g[1], &L.g[2], &L.b[0], &L.b[1], &L.b[2], &L.smem, &L.dependent, &L.tma, &L.map0, &L.dev,
               &L.ctr) >= 9 &&
        n < cap)
      out[n++] = L;
    else if (parse_tmap(line, &t) && ntmaps < 128)
      tmaps[ntmaps++] = t;
  }
  if (f) fclose(f);
  unlink(log_path);
  return n;
}

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}

static da_spec longnet(int nb, int causal) {
  static const int64_t w[] = {2048, 4096, 8192, 16384, 32768}, r[] = {1, 2, 4, 6, 12};
  da_spec s = tu_spec(nb, w, r, 8, 8, 64, DA_DTYPE_FLOAT16);
  s.causal = causal;
  return s;
}

static da_plan *plan_tiles(da_context *ctx, const da_spec *s, int tile_q, int tile_k, int fmq, int mma,
                           da_status *st) {
  da_plan_options o;
  memset(&o, 0, sizeof o);
  o.tile_q = tile_q, o.tile_k = tile_k, o.fused_min_queries = fmq, o.cuda_mma = mma;
  da_plan *p = NULL;
  *st = da_plan_create_ex(ctx, s, DA_BACKEND_CUDA, &o, &p);
  return p;
}

static da_plan *plan_with(da_context *ctx, const da_spec *s, int tile_q, int fmq, int mma, da_status *st) {
  return plan_tiles(ctx, s, tile_q, 0, fmq, mma, st);
}

static int mma_of(const da_plan *p) {
  da_plan_options o;
  return p && da_plan_get_options(p, &o) == DA_OK ? o.cuda_mma : -1;
}

static void test_instruction(da_context *ctx) {
  const da_spec s = longnet(2, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmat") && mma_of(p) == 6,
           "no options on sm_90 (a CUDA 13 driver): the warp-specialized kernel with TMA (%s, %s)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  /* a sparse layout: wgmma-ws (the TMA kernel has no sparse form) */
  da_spec sp = s;
  sp.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, sp.sparsity.block = 64, sp.sparsity.window = 2;
  p = plan_with(ctx, &sp, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw") && mma_of(p) == 4,
           "no options, a local-window layout: the warp-specialized kernel (%s, %s)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  /* the strategy forced, no instruction named: before, mma.sync (0.6x on an H200) */
  p = plan_with(ctx, &s, 0, 1 << 30, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmat") && !strcmp(da_plan_strategy(p), "split") &&
               mma_of(p) == 6,
           "fused_min_queries 2^30, cuda_mma 0: the warp-specialized split kernel with TMA (%s, %s, %s)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx), p ? da_plan_strategy(p) : "");
  da_plan_destroy(p);
  /* tiles the warp-specialized kernel refuses (64 rows run two CTAs an SM, whose shared
   * memory holds no two stages of 128 keys at head_dim 128) and mma.sync takes: mma.sync,
   * as such options always got */
  da_spec s128 = s;
  s128.head_dim = 128;
  p = plan_tiles(ctx, &s128, 64, 128, 0, 0, &st);
  TU_CHECK(st == DA_OK && !strstr(da_plan_kernel_name(p), "_wgmma") && mma_of(p) == 1 && !*da_context_last_error(ctx),
           "tile_q 64, tile_k 128 at D = 128, cuda_mma 0: mma.sync, no error left (%s, %s, mma %d)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx), mma_of(p));
  da_plan_destroy(p);
  /* named: kept, refused as asked */
  p = plan_tiles(ctx, &s128, 64, 128, 0, 4, &st);
  TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && !p && strstr(da_context_last_error(ctx), "tile_k 64"),
           "tile_q 64, tile_k 128 at D = 128 with cuda_mma 4: refused (%s: %s)", da_status_name(st),
           da_context_last_error(ctx));
  p = plan_with(ctx, &s, 0, 1 << 30, 1, &st);
  TU_CHECK(st == DA_OK && !strstr(da_plan_kernel_name(p), "_wgmma") && mma_of(p) == 1,
           "cuda_mma 1 with the strategy forced: mma.sync (%s)", p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  setenv("DILATTN_CUDA_MMA", "sync", 1);
  p = plan_with(ctx, &s, 0, 1 << 30, 0, &st);
  TU_CHECK(st == DA_OK && !strstr(da_plan_kernel_name(p), "_wgmma"), "DILATTN_CUDA_MMA=sync: mma.sync (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  setenv("DILATTN_CUDA_MMA", "wgmma-ws-p2", 1);
  p = plan_with(ctx, &s, 0, 1 << 30, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw2") && !strcmp(da_plan_strategy(p), "split"),
           "DILATTN_CUDA_MMA=wgmma-ws-p2 with the strategy forced: that variant, split (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  unsetenv("DILATTN_CUDA_MMA");
}

/* Query tiles of branch i over N tokens: every segment's dilated length in tiles of tq. */
static int64_t branch_tiles(const da_spec *s, int i, int64_t N, int tq) {
  /* (a whole segment's tiles each, as the grid has: those past a shorter sequence's end
   * hold no query) */
  const int64_t w = s->segment_lengths[i], r = s->dilation_rates[i], L = (w + r - 1) / r;
  return (N + w - 1) / w * ((L + tq - 1) / tq) * s->num_heads;
}

static void run_on(da_plan *p, const da_spec *s, int64_t N, void *stream, da_status *st) {
  const size_t nq = (size_t)N * s->num_heads * s->head_dim, nkv = (size_t)N * s->num_kv_heads * s->head_dim;
  uint16_t *q = calloc(nq, 2), *k = calloc(nkv, 2), *v = calloc(nkv, 2), *o = calloc(nq, 2);
  float *lse = calloc((size_t)N * s->num_heads, 4);
  da_args a;
  da_args_init(&a, s, 1, N, q, k, v, o, lse);
  a.stream = stream;
  *st = q && k && v && o && lse ? da_plan_execute(p, &a) : DA_ERR_NO_MEMORY;
  free(q), free(k), free(v), free(o), free(lse);
}

static void run(da_plan *p, const da_spec *s, int64_t N, da_status *st) { run_on(p, s, N, NULL, st); }

/* CTAs of a launch of `tiles` blocks of a two-tiles-a-CTA kernel on the fake device's 132
 * SMs: two a CTA where that leaves a wave of CTAs, else one (cuda_backend.c launch_main) */
static int64_t pair_ctas(int64_t tiles) { return tiles >= 2 * 132 ? (tiles + 1) / 2 : tiles; }
/* The same with persistent grids (the default): a CTA an SM from DA_CUDA_PERSIST_WAVES waves
 * of blocks (persist_waves; 0: none) */
static int persists(int64_t tiles, int persist_waves) { return persist_waves && tiles >= (int64_t)persist_waves * 132; }
/* The persistent launches of s's branches over N tokens in one run (the default rule) */
static int persistent_launches(const da_spec *s, int64_t N, int tq) {
  int n = 0;
  for (int i = 0; i < s->num_branches; i++) n += persists(branch_tiles(s, i, N, tq), DA_CUDA_PERSIST_WAVES);
  return n;
}

/* The grids of 5 launches of s's branches over runs of `tokens` tokens, two tiles a CTA
 * (pair_ctas; cta_tiles 1 or 2: that many in every launch, DILATTN_CTA_TILES), persistent
 * from persist_waves waves, whatever order the branches launch in: each branch's CTAs
 * once, and a counter, zero at the launch, where persistent (none elsewhere). */
static void check_grids_pw(const launch_t *L, const da_spec *s, int64_t tokens, int tq, int cta_tiles,
                           int persist_waves, const char *what) {
  int used[5] = {0};
  for (int i = 0; i < 5; i++) {
    const int64_t tiles = branch_tiles(s, i, tokens, tq);
    const int pers = cta_tiles == 0 && persists(tiles, persist_waves);
    const int64_t want = pers ? 132 : cta_tiles == 1 ? tiles : cta_tiles == 2 ? (tiles + 1) / 2 : pair_ctas(tiles);
    int found = -1;
    for (int j = 0; j < 5 && found < 0; j++)
      if (!used[j] && (int64_t)L[j].g[0] * L[j].g[1] * L[j].g[2] == want && (L[j].ctr == 0) == pers &&
          (pers || L[j].ctr == -1))
        found = j;
    if (found >= 0) used[found] = 1;
    TU_CHECK(found >= 0, "%s: branch %d (w %lld, r %lld) over %lld tokens: no launch of %lld CTAs %s", what, i,
             (long long)s->segment_lengths[i], (long long)s->dilation_rates[i], (long long)tokens, (long long)want,
             pers ? "with a counter zero at the launch" : "without a counter");
  }
}
static void check_grids(const launch_t *L, const da_spec *s, int64_t tokens, int tq, const char *what) {
  check_grids_pw(L, s, tokens, tq, 0, DA_CUDA_PERSIST_WAVES, what);
}

static void test_launches(da_context *ctx) {
  launch_t L[64];
  const int64_t N = 65536;
  read_launches(L, 64);
  /* LongNet 5-branch causal: split, two tiles a CTA */
  const da_spec s = longnet(5, 1);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && !strcmp(da_plan_strategy(p), "split"), "LongNet 5-branch causal: split (%s)",
           p ? da_plan_strategy(p) : da_context_last_error(ctx));
  if (!p) return;
  da_plan_options o;
  da_plan_get_options(p, &o);
  run(p, &s, N, &st);
  int n = read_launches(L, 64);
  TU_CHECK(st == DA_OK && n == 5, "5 branch launches: %d (%s: %s)", n, da_status_name(st), da_context_last_error(ctx));
  for (int i = 0; i < n; i++)
    TU_CHECK(ends_with(L[i].name, "_branch") && L[i].b[0] == 384 && L[i].dependent == (i > 0) &&
                 L[i].smem == L[0].smem && L[i].smem > 48 * 1024,
             "launch %d: %s block %u smem %u dependent %d", i, L[i].name, L[i].b[0], L[i].smem, L[i].dependent);
  if (n == 5) check_grids(L, &s, N, o.tile_q, "one run");
  da_plan_destroy(p);
  /* DILATTN_CTA_TILES (read at plan creation): one tile a CTA in every launch, then two; at
   * N = 16K, where the rule gives the launches of w = 8192, 16384 and 32768 (256, 176 and
   * 176 blocks) one a CTA, the others two */
  for (int ct = 1; ct <= 2; ct++) {
    setenv("DILATTN_CTA_TILES", ct == 1 ? "1" : "2", 1);
    p = plan_with(ctx, &s, 0, 0, 0, &st);
    unsetenv("DILATTN_CTA_TILES");
    run(p, &s, N / 4, &st);
    n = read_launches(L, 64);
    TU_CHECK(st == DA_OK && n == 5, "DILATTN_CTA_TILES=%d: 5 launches (%d, %s)", ct, n, da_context_last_error(ctx));
    if (n == 5) check_grids_pw(L, &s, N / 4, o.tile_q, ct, 0, ct == 1 ? "DILATTN_CTA_TILES=1" : "DILATTN_CTA_TILES=2");
    da_plan_destroy(p);
  }
  /* persistent grids (a CTA an SM drawing blocks from a counter) where a launch has
   * DA_CUDA_PERSIST_WAVES (16) waves of blocks: at N = 256K the launches of w = 2048 to
   * 16384 (16384, 8192, 4096 and 2816 blocks), not w = 32768's 1408 (pairs); their counters
   * zero at each launch, though the pool's memory holds 0xa5 bytes and each launch leaves
   * its counter nonzero (tests/fake_cuda.c), in two executions. DILATTN_CTA_TILES=pairs:
   * none (the rule before persistent grids); persistent: every launch of a wave of blocks
   * (at 16K all five, 1024 to 176 blocks). Without cuMemsetD32Async, the pairs. */
  static const struct {
    const char *env, *fake;
    int64_t n;
    int waves, persistent;
  } PC[] = {{NULL, NULL, 4 * N, DA_CUDA_PERSIST_WAVES, 4}, {"pairs", NULL, 4 * N, 0, 0},
            {"persistent", NULL, N / 4, 1, 5}, {NULL, "FAKE_CUDA_NO_MEMSET", 4 * N, 0, 0}};
  for (size_t c = 0; c < sizeof PC / sizeof PC[0]; c++) {
    if (PC[c].env) setenv("DILATTN_CTA_TILES", PC[c].env, 1);
    if (PC[c].fake) setenv(PC[c].fake, "1", 1);
    p = plan_with(ctx, &s, 0, 0, 0, &st);
    unsetenv("DILATTN_CTA_TILES");
    for (int rep = 0; rep < 2 && p; rep++) {
      run(p, &s, PC[c].n, &st);
      n = read_launches(L, 64);
      int pers = 0;
      for (int i = 0; i < n; i++) pers += L[i].ctr == 0;
      char what[128];
      snprintf(what, sizeof what, "%s%s, N = %lld, execution %d", PC[c].env ? "DILATTN_CTA_TILES=" : "",
               PC[c].env ? PC[c].env : PC[c].fake ? PC[c].fake : "default", (long long)PC[c].n, rep + 1);
      TU_CHECK(st == DA_OK && n == 5 && pers == PC[c].persistent, "%s: 5 launches, %d persistent (%d, %d: %s)", what,
               PC[c].persistent, n, pers, da_context_last_error(ctx));
      if (n == 5) check_grids_pw(L, &s, PC[c].n, o.tile_q, 0, PC[c].waves, what);
    }
    if (PC[c].fake) unsetenv(PC[c].fake);
    da_plan_destroy(p);
  }
  /* LongNet 5-branch without a causal mask: 192-row tiles (D = 64), two a CTA at most, so
   * no launch persistent, though w = 2048's has 11264 blocks at 256K */
  {
    const da_spec nc = longnet(5, 0);
    da_plan *q = plan_with(ctx, &nc, 0, 0, 0, &st);
    da_plan_options qo;
    da_plan_get_options(q, &qo);
    run(q, &nc, 4 * N, &st);
    n = read_launches(L, 64);
    int pers = 0;
    for (int i = 0; i < n; i++) pers += L[i].ctr != -1;
    TU_CHECK(st == DA_OK && qo.tile_q == 192 && n >= 5 && !pers && branch_tiles(&nc, 0, 4 * N, 192) >= 16 * 132,
             "LongNet 5-branch, 192-row tiles: no persistent launch (%d launches, %d persistent, tile_q %d: %s)", n, pers,
             qo.tile_q, da_context_last_error(ctx));
    da_plan_destroy(q);
  }
  /* runs of tokens: a workspace of 100 MiB holds runs of 32768 (the lcm of the w) */
  setenv("DILATTN_WORKSPACE_LIMIT", "100M", 1);
  setenv("DILATTN_PDL", "0", 1);
  p = plan_with(ctx, &s, 0, 0, 0, &st);
  run(p, &s, N, &st);
  n = read_launches(L, 64);
  int deps = 0;
  for (int i = 0; i < n; i++) deps += L[i].dependent;
  TU_CHECK(st == DA_OK && n == 10 && !deps, "two runs of 5 launches, none dependent under DILATTN_PDL=0: %d, %d (%s)",
           n, deps, da_context_last_error(ctx));
  if (n == 10) check_grids(L, &s, N / 2, o.tile_q, "first of two runs"), check_grids(L + 5, &s, N / 2, o.tile_q, "second run");
  unsetenv("DILATTN_WORKSPACE_LIMIT");
  unsetenv("DILATTN_PDL");
  da_plan_destroy(p);
  /* grouped LongNet 5-branch (groups of 2, 2, 2, 1 and 1 of 8 heads): _clear over every
   * head, then each branch over its group's heads alone, two tiles a CTA where a launch has
   * enough (the single plan's warp-specialized 192-row TMA kernel: a grid of CTAs in x
   * alone, kernel.cu.tpl run_tiles; two at most, never a persistent grid: planner.lua
   * plan_lpt); with 3 heads (groups of 1, 1, 1, 0, 0) the branches no head uses are not
   * launched */
  for (int heads = 8; heads >= 3; heads -= 5) {
    da_spec g = longnet(5, 0);
    g.mode = DA_MODE_GROUPED, g.num_heads = g.num_kv_heads = heads;
    p = plan_with(ctx, &g, 0, 0, 0, &st);
    da_plan_get_options(p, &o);
    run(p, &g, N, &st);
    n = read_launches(L, 64);
    const int nb = heads == 8 ? 5 : 3;
    TU_CHECK(st == DA_OK && n == 1 + nb && ends_with(L[0].name, "_clear") && L[0].g[1] == (unsigned)heads,
             "grouped, %d heads: _clear over every head and %d branch launches (%d launches, %s)", heads, nb, n,
             da_context_last_error(ctx));
    for (int i = 1; i < n && n == 1 + nb; i++) {
      const int64_t want = heads == 8 ? (i <= 3 ? 2 : 1) : 1, per_head = branch_tiles(&g, i - 1, N, o.tile_q) / heads;
      TU_CHECK(ends_with(L[i].name, "_branch") && L[i].g[0] == pair_ctas(per_head * want) && L[i].g[1] == 1 &&
                   L[i].g[2] == 1 && L[i].ctr == -1,
               "grouped, %d heads: branch launch %d of %u x %u CTAs, counter %lld (want %lld heads' %lld tiles, two a "
               "CTA where that leaves 132 CTAs, none persistent: 192-row tiles run no ring)", heads, i, L[i].g[0],
               L[i].g[1], L[i].ctr, (long long)want, (long long)(per_head * want));
    }
    da_plan_destroy(p);
  }
  /* LongNet 2-branch causal: fused, one launch */
  const da_spec s2 = longnet(2, 1);
  p = plan_with(ctx, &s2, 0, 0, 0, &st);
  run(p, &s2, N, &st);
  n = read_launches(L, 64);
  TU_CHECK(st == DA_OK && n == 1 && ends_with(L[0].name, "_fused") && !L[0].dependent,
           "LongNet 2-branch causal: one fused launch (%d, %s)", n, n ? L[0].name : da_context_last_error(ctx));
  da_plan_destroy(p);
}

/* The kernels number a launch's blocks in 32 bits (kernel.cu.tpl da_lpt_unit, da_unit_bih):
 * a grid of 2^32 blocks or more is refused by name, not launched to decode wrong tiles.
 * The causal mma.sync plan of one 2048 branch over N = 2^24 has 2^17 blocks a head; at 8
 * heads that is 2^20 a batch entry, so batch 4095 launches and 4096 does not. */
static da_status count_launch(void *user, int which, unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem,
                        da__cuda_args *a, int persistent) {
  (void)which, (void)gx, (void)gy, (void)gz, (void)threads, (void)smem, (void)a, (void)persistent;
  ++*(int *)user;
  return DA_OK;
}
static void test_block_limit(da_context *ctx) {
  static const int64_t w[1] = {2048}, r[1] = {1};
  da_spec s = tu_spec(1, w, r, 8, 8, 64, DA_DTYPE_FLOAT16);
  s.causal = 1;
  da_plan_options o;
  memset(&o, 0, sizeof o);
  o.cuda_mma = 1, o.tile_q = 128;
  da__rendered rd;
  da_status st = da__render_ex(ctx, &s, DA_TARGET_CUDA, &o, &rd);
  TU_CHECK(st == DA_OK && rd.ws_tiles == 1, "render: %s (%d tiles a CTA)", da_context_last_error(ctx), rd.ws_tiles);
  if (st != DA_OK) return;
  for (int64_t batch = 4095; batch <= 4096; batch++) {
    da__cuda_args a;
    memset(&a, 0, sizeof a);
    a.batch = batch, a.seq_len = (int64_t)1 << 24, a.ws_len = a.seq_len;
    int launches = 0;
    st = da__cuda_launch_sequence(ctx, &rd, 8, 64, 132, DA_CUDA_PERSIST_WAVES, &a, count_launch, &launches, NULL, NULL);
    if (batch == 4095)
      TU_CHECK(st == DA_OK && launches == 1, "batch 4095: %u blocks launched (%d, %s)", 4095u << 20, launches,
               da_context_last_error(ctx));
    else
      TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && !launches && strstr(da_context_last_error(ctx), "grid too large"),
               "batch 4096 (2^32 blocks): refused by name (%s, %d launches: %s)", da_status_name(st), launches,
               da_context_last_error(ctx));
  }
  da__rendered_free(&rd);
}

/* wgmma-ws-tma (cuda_mma 6) on the fake sm_90 device: the plan; the tensor maps the
 * runtime encodes before each launch, three per class x < r of each branch the launch runs
 * (5-d, boxes of 64 head dims x tile_k rows, 128-byte swizzle): K and V of the positions
 * x mod r (ceil((N - x) / r) rows r rows of the tensor apart from row x, one segment, kv
 * heads, batch) and V of the offset-x class of each whole segment (ceil((w - x) / r) rows,
 * N / w segments w rows apart); launches that carry them (tma 1, the first map's
 * address); none where DILATTN_TMA=0 or the tensors are not 16-byte aligned. */
static void check_tmaps(const tmap_t *t, int n, const da_spec *s, const int *branches, int nbr, const char *k,
                        const char *v, int64_t N, int tk, const char *what) {
  const int64_t row = (int64_t)s->num_kv_heads * s->head_dim * 2;
  int want = 0, at = 0;
  for (int i = 0; i < nbr; i++) /* (a branch with no whole segment: no map by segment) */
    want += (int)s->dilation_rates[branches[i]] * (N / s->segment_lengths[branches[i]] ? 3 : 2);
  TU_CHECK(n == want, "%s: %d tensor maps encoded (want %d)", what, n, want);
  for (int i = 0; i < nbr && n == want; i++) {
    const int64_t r = s->dilation_rates[branches[i]], w = s->segment_lengths[branches[i]];
    for (int64_t c = 0; c < r; c++)
      for (int kv = 0; kv < 3; kv++) {
        if (kv == 2 && N / w == 0) continue;
        const tmap_t *m = &t[at++];
        const char *tensor = kv ? v : k;
        const unsigned long long base = (unsigned long long)(uintptr_t)tensor + (unsigned long long)(c * row);
        const unsigned long long rows = kv < 2 ? (N - c + r - 1) / r : (w - c + r - 1) / r, segs = kv < 2 ? 1 : N / w;
        TU_CHECK(m->rank == 5 && m->addr == base && m->dims[0] == (unsigned long long)s->head_dim && m->dims[1] == rows &&
                     m->dims[2] == segs && m->dims[3] == (unsigned long long)s->num_kv_heads && m->dims[4] == 1 &&
                     m->strides[0] == (unsigned long long)(r * row) &&
                     m->strides[1] == (unsigned long long)((kv < 2 ? r : w) * row) &&
                     m->strides[2] == (unsigned long long)s->head_dim * 2 && m->strides[3] == (unsigned long long)(N * row) &&
                     m->box[0] == 64 && m->box[1] == (unsigned)tk && m->box[2] == 1 && m->box[3] == 1 && m->box[4] == 1 &&
                     m->swizzle == 3,
                 "%s: branch %d class %lld map %d (%s): rank %d addr +%lld dims %llu %llu %llu %llu %llu strides %llu %llu "
                 "%llu %llu box %u %u swizzle %d",
                 what, branches[i], (long long)c, kv, kv == 0 ? "K" : kv == 1 ? "V" : "V by segment", m->rank,
                 (long long)(m->addr - (unsigned long long)(uintptr_t)tensor), m->dims[0], m->dims[1], m->dims[2],
                 m->dims[3], m->dims[4], m->strides[0], m->strides[1], m->strides[2], m->strides[3], m->box[0], m->box[1],
                 m->swizzle);
      }
  }
}

static void test_tma(da_context *ctx) {
  launch_t L[64];
  read_launches(L, 64);
  const int64_t N = 8192;
  for (int nb = 2; nb <= 5; nb += 3) { /* LongNet 2-branch: fused; 5-branch: split */
    const da_spec s = longnet(nb, 0);
    da_status st;
    da_plan *p = plan_with(ctx, &s, 0, 0, 6, &st);
    TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmat") && mma_of(p) == 6,
             "LongNet %d-branch, cuda_mma 6: the TMA kernel (%s)", nb, p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
    if (!p) continue;
    da_plan_options o;
    da_plan_get_options(p, &o);
    const int fused = !strcmp(da_plan_strategy(p), "fused");
    TU_CHECK(fused == (nb == 2), "LongNet %d-branch, cuda_mma 6: %s", nb, da_plan_strategy(p));
    const size_t nq = (size_t)N * 8 * 64;
    uint16_t *q = calloc(nq + 8, 2), *k = calloc(nq + 8, 2), *v = calloc(nq + 8, 2), *out = calloc(nq, 2);
    float *lse = calloc((size_t)N * 8, 4);
    for (int pass = 0; pass < 3; pass++) { /* maps; DILATTN_TMA=0; k one element off 16 bytes */
      if (pass == 1) setenv("DILATTN_TMA", "0", 1);
      if (pass == 2) unsetenv("DILATTN_TMA");
      da_args a;
      da_args_init(&a, &s, 1, N, q, pass == 2 ? k + 1 : k, v, out, lse);
      unsigned long long with0, without0, with1, without1;
      const char *why;
      da__cuda_tma_stats(&with0, &without0, &why);
      st = da_plan_execute(p, &a);
      da__cuda_tma_stats(&with1, &without1, &why);
      TU_CHECK(with1 - with0 == !pass && without1 - without0 == !!pass &&
                   (!pass || (why && strstr(why, pass == 1 ? "DILATTN_TMA=0" : "16-byte aligned"))),
               "LongNet %d-branch, pass %d: the TMA counts (test_gpu's check that the maps were taken): %llu with, "
               "%llu without (%s)", nb, pass, with1 - with0, without1 - without0, why ? why : "-");
      const int n = read_launches(L, 64);
      TU_CHECK(st == DA_OK && n == (fused ? 1 : nb), "LongNet %d-branch, pass %d: %d launches (%s)", nb, pass, n,
               da_context_last_error(ctx));
      char what[64];
      snprintf(what, sizeof what, "LongNet %d-branch, pass %d", nb, pass);
      if (pass) {
        TU_CHECK(ntmaps == 0, "%s: %d tensor maps encoded (want none)", what, ntmaps);
        for (int i = 0; i < n; i++) TU_CHECK(!L[i].tma, "%s: launch %d has tma set", what, i);
        continue;
      }
      for (int i = 0; i < n; i++)
        TU_CHECK(L[i].tma && L[i].map0 == (unsigned long long)(uintptr_t)k, "%s: launch %d: tma %d, first map at %llx",
                 what, i, L[i].tma, L[i].map0);
      /* the fused kernel's maps: every branch's; a split plan's: each launch's branch's
       * (the launch order: planner.lua split_first, r = 1 first, then the rest in order) */
      int order[5] = {0, 1, 2, 3, 4};
      check_tmaps(tmaps, ntmaps, &s, order, nb, (const char *)k, (const char *)v, N, o.tile_k, what);
    }
    free(q), free(k), free(v), free(out), free(lse);
    da_plan_destroy(p);
  }
  /* runs of tokens (a workspace limit: two runs of 32768 at 64K): each branch's maps
   * encoded once an execution, every launch with them */
  setenv("DILATTN_WORKSPACE_LIMIT", "100M", 1);
  const da_spec s5 = longnet(5, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s5, 0, 0, 6, &st);
  if (p) {
    const int64_t N2 = 65536;
    const size_t nq = (size_t)N2 * 8 * 64;
    uint16_t *q = calloc(nq, 2), *k = calloc(nq, 2), *v = calloc(nq, 2), *out = calloc(nq, 2);
    float *lse = calloc((size_t)N2 * 8, 4);
    da_args a;
    da_args_init(&a, &s5, 1, N2, q, k, v, out, lse);
    st = da_plan_execute(p, &a);
    const int n = read_launches(L, 64);
    int with = 0;
    for (int i = 0; i < n; i++) with += L[i].tma && L[i].map0 == (unsigned long long)(uintptr_t)k;
    TU_CHECK(st == DA_OK && n == 10 && with == 10 && ntmaps == 75,
             "LongNet 5-branch TMA in two runs: %d launches, %d with the maps, %d maps encoded (want 10, 10, 75): %s", n,
             with, ntmaps, da_context_last_error(ctx));
    free(q), free(k), free(v), free(out), free(lse);
  }
  da_plan_destroy(p);
  unsetenv("DILATTN_WORKSPACE_LIMIT");
}

/* The plan's memo of tensor maps: an execution with the (k, v, strides, N, batch) of one of
 * the last 64 encodes none and launches with the maps of those arguments; a change of any
 * one of them encodes afresh (a memo hit on a stale key would point the TMA copies at the
 * wrong tensor); the least recently used arguments go first. */
static void test_tma_memo(da_context *ctx) {
  launch_t L[64];
  read_launches(L, 64);
  const da_spec s = longnet(5, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 6, &st);
  TU_CHECK(p != NULL, "LongNet 5-branch, cuda_mma 6: %s", da_context_last_error(ctx));
  if (!p) return;
  da_plan_options o;
  da_plan_get_options(p, &o);
  const int64_t N = 8192, spare = 8 * 70;
  const size_t nq = (size_t)2 * N * 8 * 64 + 2 * (size_t)spare; /* room for batch 2, wider rows, offsets */
  uint16_t *q = calloc(nq, 2), *k = calloc(nq, 2), *v = calloc(nq, 2), *out = calloc(nq, 2), *k2 = calloc(nq, 2),
           *v2 = calloc(nq, 2);
  float *lse = calloc((size_t)2 * N * 8, 4);
  const int order[5] = {0, 1, 2, 3, 4};
  /* the maps an encode gives at n tokens: three a class, two where no segment is whole */
#define MEMO_MAPS(n) (1 * 3 + 2 * 3 + 4 * 3 + 6 * ((n) >= 16384 ? 3 : 2) + 12 * ((n) >= 32768 ? 3 : 2) - ((n) < 8192 ? 4 : 0))
  /* what: the change; fresh: whether it must encode (75 maps) or hit (none) */
  struct {
    const char *what;
    int fresh;
  } step[] = {{"first", 1},    {"again", 0},      {"k", 1},     {"k back", 0}, {"v", 1},    {"k stride", 1},
              {"v stride", 1}, {"seq_len", 1},    {"batch", 1}, {"first again", 0}};
  for (int i = 0; i < (int)(sizeof step / sizeof *step); i++) {
    da_args a;
    const int64_t n = !strcmp(step[i].what, "seq_len") ? N / 2 : N, b = !strcmp(step[i].what, "batch") ? 2 : 1;
    const uint16_t *kk = !strcmp(step[i].what, "k") ? k2 : k, *vv = !strcmp(step[i].what, "v") ? v2 : v;
    da_args_init(&a, &s, b, n, q, kk, vv, out, lse);
    if (n < N) { /* the first n rows of the N-row tensors: only seq_len differs */
      da_args full;
      da_args_init(&full, &s, b, N, q, kk, vv, out, lse);
      memcpy(a.q_stride, full.q_stride, sizeof a.q_stride), memcpy(a.k_stride, full.k_stride, sizeof a.k_stride);
      memcpy(a.v_stride, full.v_stride, sizeof a.v_stride), memcpy(a.out_stride, full.out_stride, sizeof a.out_stride);
    }
    if (!strcmp(step[i].what, "k stride")) a.k_stride[1] += 8; /* rows of a wider tensor */
    if (!strcmp(step[i].what, "v stride")) a.v_stride[0] += 64;
    st = da_plan_execute(p, &a);
    const int nl = read_launches(L, 64);
    int with = 0;
    for (int j = 0; j < nl; j++) with += L[j].tma && L[j].map0 == (unsigned long long)(uintptr_t)kk;
    const int want = step[i].fresh ? MEMO_MAPS(n) : 0;
    TU_CHECK(st == DA_OK && nl == 5 && with == 5 && ntmaps == want,
             "tensor-map memo, %s: %d launches, %d with maps at k, %d maps encoded (want 5, 5, %d): %s", step[i].what, nl,
             with, ntmaps, want, st == DA_OK ? "ok" : da_context_last_error(ctx));
    if (i < 5 && step[i].fresh) /* (check_tmaps: the strides da_args_init gives) */
      check_tmaps(tmaps, ntmaps, &s, order, 5, (const char *)kk, (const char *)vv, N, o.tile_k, step[i].what);
  }
  /* 64 more argument sets (k 16 bytes further each time) fill the memo; the first of them
   * used again is a hit, then one more evicts the least recently used: the second */
  for (int i = 1; i <= 67; i++) {
    const int at = i <= 64 ? i : i == 65 ? 1 : i == 66 ? 65 : i == 67 ? 2 : 0, fresh = i <= 64 || i == 66 || i == 67;
    da_args a;
    da_args_init(&a, &s, 1, N, q, k + 8 * at, v, out, lse);
    st = da_plan_execute(p, &a);
    const int nl = read_launches(L, 64);
    int with = 0;
    for (int j = 0; j < nl; j++) with += L[j].tma && L[j].map0 == (unsigned long long)(uintptr_t)(k + 8 * at);
    if (st != DA_OK || with != 5 || ntmaps != (fresh ? MEMO_MAPS(N) : 0))
      TU_CHECK(0, "tensor-map memo, k + %d x 16 bytes (execution %d): %d launches with maps at k, %d maps encoded "
                  "(want 5, %d): %s", at, i, with, ntmaps, fresh ? MEMO_MAPS(N) : 0,
               st == DA_OK ? "ok" : da_context_last_error(ctx));
  }
#undef MEMO_MAPS
  free(q), free(k), free(v), free(out), free(k2), free(v2), free(lse);
  da_plan_destroy(p);
}

/* A copy of the templates in cache/name whose CUDA kernel has an #error where the planner's
 * fact `fact` holds, set as DILATTN_TEMPLATE_DIR. */
static void plant_error(const char *templates, const char *cache, const char *name, const char *fact) {
  char dir[600], cmd[4096];
  snprintf(dir, sizeof dir, "%s/%s", cache, name);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s/.' '%s/' && printf '%%s\\n' '{%% if %s then %%}' "
           "'#error planted where %s' '{%% end %%}' >> '%s/cuda/kernel.cu.tpl'",
           dir, templates, dir, fact, fact, dir);
  TU_CHECK(system(cmd) == 0, "%s", cmd);
  setenv("DILATTN_TEMPLATE_DIR", dir, 1);
}

static void test_fallbacks(const char *templates, const char *cache) {
  const da_spec s = longnet(2, 0);
  da_status st;
  /* JIT off: the warp-specialized kernel is nowhere, the mma.sync one of these tiles is on disk */
  da_context *a, *b;
  da_context_create(&a);
  da_plan *p = plan_tiles(a, &s, 128, 64, 0, 1, &st); /* compiles mma.sync 128 x 64 into the disk cache */
  TU_CHECK(st == DA_OK, "mma.sync 128 x 64: %s", da_context_last_error(a));
  da_plan_destroy(p);
  da_context_destroy(a);
  da_context_create(&b); /* (a new context: no plan memo) */
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  p = plan_tiles(b, &s, 128, 64, 0, 0, &st);
  TU_CHECK(st == DA_OK && !strstr(da_plan_kernel_name(p), "_wgmma"),
           "DILATTN_DISABLE_JIT, cuda_mma 0 with tiles whose mma.sync kernel is on disk: that kernel (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(b));
  da_plan_destroy(p);
  p = plan_tiles(b, &s, 64, 64, 0, 0, &st); /* neither kernel of these tiles anywhere: the error names one */
  TU_CHECK(st == DA_ERR_UNSUPPORTED && !p && strstr(da_context_last_error(b), "DILATTN_DISABLE_JIT"),
           "DILATTN_DISABLE_JIT, nothing on disk: DA_ERR_UNSUPPORTED (%s: %s)", da_status_name(st),
           da_context_last_error(b));
  unsetenv("DILATTN_DISABLE_JIT");
  da_context_destroy(b);
  /* JIT off, no options, a disk cache that holds wgmma-ws's kernel (the default before
   * wgmma-ws-tma) and not the TMA one: wgmma-ws's (a spec no test above planned) */
  da_spec s2 = s;
  s2.num_heads = s2.num_kv_heads = 2;
  da_context_create(&a);
  p = plan_with(a, &s2, 0, 0, 4, &st);
  TU_CHECK(st == DA_OK, "wgmma-ws: %s", da_context_last_error(a));
  da_plan_destroy(p);
  da_context_destroy(a);
  da_context_create(&b);
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  p = plan_with(b, &s2, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw"),
           "DILATTN_DISABLE_JIT, no options, wgmma-ws's kernel on disk: that kernel (%s: %s)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(b));
  da_plan_destroy(p);
  unsetenv("DILATTN_DISABLE_JIT");
  da_context_destroy(b);
  /* the warp-specialized kernel fails to compile: mma.sync */
  plant_error(templates, cache, "planted", "p.wg_ws");
  da_context_create(&a);
  p = plan_tiles(a, &s, 0, 0, 1 << 30, 0, &st);
  TU_CHECK(st == DA_OK && !strstr(da_plan_kernel_name(p), "_wgmma") && !strcmp(da_plan_strategy(p), "split"),
           "the strategy forced, the warp-specialized kernel not compiling: mma.sync split (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(a));
  da_plan_destroy(p);
  p = plan_tiles(a, &s, 0, 0, 0, 4, &st);
  TU_CHECK(st == DA_ERR_COMPILE && !p && strstr(da_context_last_error(a), "planted"),
           "cuda_mma 4 named: the compile error (%s)", da_status_name(st));
  da_context_destroy(a);
  /* the TMA kernel alone fails to compile: the default (no options at all) takes wgmma-ws */
  plant_error(templates, cache, "planted-tma", "p.tma");
  da_context_create(&a);
  p = plan_with(a, &s, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw"),
           "no options, the TMA kernel not compiling: wgmma-ws (%s: %s)", da_status_name(st),
           p ? da_plan_kernel_name(p) : da_context_last_error(a));
  da_plan_destroy(p);
  p = plan_with(a, &s, 0, 0, 6, &st);
  TU_CHECK(st == DA_ERR_COMPILE && !p && strstr(da_context_last_error(a), "planted"),
           "cuda_mma 6 named: the compile error (%s)", da_status_name(st));
  da_context_destroy(a);
  unsetenv("DILATTN_TEMPLATE_DIR");
}

/* Workspace comes from a pool of the library's own (created once, its allocations from
 * it), the device's default pool untouched (other libraries share it: it had its release
 * threshold raised), and destroying a context trims the pool. */
static void test_pool(const char *fake) {
  void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  void (*stats)(int *, int *, int *, int *) = lib ? (void (*)(int *, int *, int *, int *))dlsym(lib, "fake_cuda_pool_stats") : NULL;
  TU_CHECK(stats != NULL, "the fake driver's pool counts");
  if (!stats) return;
  da_context *ctx;
  da_context_create(&ctx);
  const da_spec s5 = longnet(5, 0); /* split: a workspace an execution */
  da_status st;
  da_plan *p = plan_with(ctx, &s5, 0, 0, 0, &st);
  int created0, allocs0, dflt0, trims0, created, allocs, dflt, trims;
  stats(&created0, &allocs0, &dflt0, &trims0);
  for (int i = 0; i < 2 && p; i++) run(p, &s5, 8192, &st);
  stats(&created, &allocs, &dflt, &trims);
  TU_CHECK(p && st == DA_OK && created == 1 && allocs - allocs0 == 2 && dflt == 0,
           "two split executions: %d pools created (want 1), %d allocations from it (want 2), the default pool changed "
           "%d times (want 0): %s", created, allocs - allocs0, dflt, da_context_last_error(ctx));
  da_plan_destroy(p);
  da_context_destroy(ctx);
  stats(&created, &allocs, &dflt, &trims);
  TU_CHECK(trims > trims0, "context destroyed: the pool not trimmed");
}

/* A caller with a context of its own current (a framework's, say) keeps it: the library
 * pushes its primary context for each call and pops it again. A caller with none keeps
 * none (the library's stayed current: the thread's current device, which the CUDA
 * runtime and the next context's binding read, became the library's). */
static void test_callers_context(da_context *ctx, const char *fake) {
  void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  int (*set)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : NULL;
  int (*get)(void **) = lib ? (int (*)(void **))dlsym(lib, "cuCtxGetCurrent") : NULL;
  TU_CHECK(set && get, "the fake driver's context calls");
  if (!set || !get) return;
  static int mine;
  set(&mine);
  const da_spec s = longnet(2, 1);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  if (p) run(p, &s, 4096, &st);
  void *cur = NULL;
  get(&cur);
  TU_CHECK(st == DA_OK && cur == &mine, "the caller's context is current again after a plan and a run (%s)",
           da_context_last_error(ctx));
  da_plan_destroy(p);
  set(NULL);
  p = plan_with(ctx, &s, 0, 0, 0, &st);
  if (p) run(p, &s, 4096, &st);
  da_plan_destroy(p);
  cur = (void *)1;
  get(&cur);
  TU_CHECK(st == DA_OK && cur == NULL, "no context current before a plan and a run: %p after (%s)", cur,
           da_context_last_error(ctx));
  if (lib) dlclose(lib);
}

/* Two devices (FAKE_CUDA_DEVICES=2, in a child that has not opened the driver yet): a
 * context takes the device current on the thread that first uses it for CUDA (a
 * framework's: PyTorch's after torch.cuda.set_device), else device 0, and keeps it; its
 * launches run there, and a stream of the other device is refused by name. Every context
 * took device 0: a process driving device 1 had its launches fail in the driver, or with
 * the default stream run on device 0 against device 1's memory. */
static void test_devices(const char *fake) {
  setenv("FAKE_CUDA_DEVICES", "2", 1);
  void *lib = dlopen(fake, RTLD_NOW);
  int (*retain)(void **, int) = lib ? (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain") : NULL;
  int (*set)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : NULL;
  int (*get)(void **) = lib ? (int (*)(void **))dlsym(lib, "cuCtxGetCurrent") : NULL;
  void *(*stream_of)(int) = lib ? (void *(*)(int))dlsym(lib, "fake_cuda_stream") : NULL;
  TU_CHECK(retain && set && get && stream_of, "the fake driver's device calls");
  if (!retain || !set || !get || !stream_of) return;
  void *dev1 = NULL, *cur = NULL;
  retain(&dev1, 1);
  set(dev1); /* the framework's current device: 1 */
  const da_spec s = longnet(2, 0);
  launch_t L[64];
  da_context *c1, *c0;
  da_context_create(&c1);
  da_status st;
  da_plan *p1 = plan_with(c1, &s, 0, 0, 0, &st);
  read_launches(L, 64);
  if (p1) run_on(p1, &s, 4096, stream_of(1), &st);
  int n = read_launches(L, 64), on1 = n > 0;
  for (int i = 0; i < n; i++) on1 &= L[i].dev == 1;
  TU_CHECK(p1 && st == DA_OK && on1, "device 1 current: the plan's %d launches on device 1 (first on %d): %s", n,
           n ? L[0].dev : -1, da_context_last_error(c1));
  if (p1) run_on(p1, &s, 4096, stream_of(0), &st);
  n = read_launches(L, 64);
  TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && n == 0 && strstr(da_context_last_error(c1), "belongs to device 0") &&
               strstr(da_context_last_error(c1), "on device 1"),
           "a stream of device 0 for a plan of device 1: refused by name before any launch (%s, %d launches: %s)",
           da_status_name(st), n, da_context_last_error(c1));
  /* a stream of another context of the plan's own device: refused by name, before any launch */
  void *(*foreign_of)(int) = (void *(*)(int))dlsym(lib, "fake_cuda_foreign_stream");
  if (p1 && foreign_of) run_on(p1, &s, 4096, foreign_of(1), &st);
  n = read_launches(L, 64);
  TU_CHECK(foreign_of && st == DA_ERR_INVALID_ARGUMENT && n == 0 && strstr(da_context_last_error(c1), "primary context"),
           "a stream of a non-primary context of device 1: refused by name before any launch (%s, %d launches: %s)",
           da_status_name(st), n, da_context_last_error(c1));
  /* a stream of a green context of the plan's device (cuGreenCtxStreamCreate's; flashinfer's
   * split_device_green_ctx hands PyTorch such streams): it runs in the primary context, on the
   * green context's SMs, so it is taken, asked by cuStreamGetCtx_v2 (CUDA 12.5+: the primary
   * context) or by cuStreamGetCtx and cuStreamGetGreenCtx (12.4: the cuCtxFromGreenCtx handle,
   * and the green context); a green context of another device is refused like its stream */
  void *(*green_of)(int) = (void *(*)(int))dlsym(lib, "fake_cuda_green_stream");
  const char *version = getenv("FAKE_CUDA_VERSION");
  char saved[32];
  snprintf(saved, sizeof saved, "%s", version ? version : "");
  for (int v = 0; v < 2; v++) {
    setenv("FAKE_CUDA_VERSION", v ? "12040" : "13000", 1);
    st = DA_ERR_INTERNAL;
    if (p1 && green_of) run_on(p1, &s, 4096, green_of(1), &st);
    n = read_launches(L, 64), on1 = n > 0;
    for (int i = 0; i < n; i++) on1 &= L[i].dev == 1;
    TU_CHECK(green_of && st == DA_OK && on1,
             "driver %s: a stream of a green context of device 1 for a plan of device 1: taken (%s, %d launches): %s",
             v ? "12.4" : "13.0", da_status_name(st), n, st ? da_context_last_error(c1) : "");
    if (p1 && green_of) run_on(p1, &s, 4096, green_of(0), &st);
    n = read_launches(L, 64);
    TU_CHECK(green_of && st == DA_ERR_INVALID_ARGUMENT && n == 0 && strstr(da_context_last_error(c1), "belongs to device 0"),
             "driver %s: a stream of a green context of device 0 for a plan of device 1: refused (%s, %d launches: %s)",
             v ? "12.4" : "13.0", da_status_name(st), n, da_context_last_error(c1));
  }
  if (saved[0]) setenv("FAKE_CUDA_VERSION", saved, 1);
  else unsetenv("FAKE_CUDA_VERSION");
  get(&cur);
  TU_CHECK(cur == dev1, "the caller's context is current again");
  /* no context current: device 0, kept when device 1 is current later */
  set(NULL);
  da_context_create(&c0);
  da_plan *p0 = plan_with(c0, &s, 0, 0, 0, &st);
  set(dev1);
  if (p0) run(p0, &s, 4096, &st);
  n = read_launches(L, 64);
  int on0 = n > 0;
  for (int i = 0; i < n; i++) on0 &= L[i].dev == 0;
  get(&cur);
  TU_CHECK(p0 && st == DA_OK && on0 && cur == dev1,
           "no device current at the first use: device 0, also with device 1 current later (%d launches, first on %d): "
           "%s", n, n ? L[0].dev : -1, da_context_last_error(c0));
  /* preloaded, on worker threads too (no context current there): the caller's device
   * (which of the two threads first reaches the driver varies, so this passed without
   * preload's own binding on most runs) */
  da_context *c2;
  da_context_create(&c2);
  da_plan *pp[2] = {NULL, NULL}, *p2;
  const da_spec two[2] = {longnet(1, 0), s};
  st = da_plan_preload(c2, two, 2, DA_BACKEND_CUDA, 2, NULL, NULL, pp);
  p2 = pp[1];
  da_plan_destroy(pp[0]);
  if (p2) run_on(p2, &s, 4096, stream_of(1), &st);
  n = read_launches(L, 64);
  on1 = n > 0;
  for (int i = 0; i < n; i++) on1 &= L[i].dev == 1;
  TU_CHECK(p2 && st == DA_OK && on1, "preloaded with device 1 current: launches on device 1 (%d, first on %d): %s", n,
           n ? L[0].dev : -1, da_context_last_error(c2));
  da_plan_destroy(p1), da_plan_destroy(p0), da_plan_destroy(p2);
  da_context_destroy(c1), da_context_destroy(c0), da_context_destroy(c2);
  set(NULL);
}

/* A plan made on a thread with no CUDA context current (a preload worker, a framework's
 * worker thread) for a context that took device 1: nothing of it sets device 0 up (retains
 * its primary context, which makes a context there: under torchrun, memory on GPU 0 in
 * every rank), the tuning database's environment check included. (In a child, as
 * test_devices.) */
static void *plan_on_thread(void *arg) {
  da_context *ctx = arg;
  const da_spec s = longnet(2, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  da_plan_destroy(p);
  return (void *)(intptr_t)st;
}

static void test_devices_worker(const char *fake, const char *cache) {
  setenv("FAKE_CUDA_DEVICES", "2", 1);
  void *lib = dlopen(fake, RTLD_NOW);
  int (*retain)(void **, int) = lib ? (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain") : NULL;
  int (*set)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : NULL;
  int (*retains)(int) = lib ? (int (*)(int))dlsym(lib, "fake_cuda_retains") : NULL;
  TU_CHECK(retain && set && retains, "the fake driver's device calls");
  if (!retain || !set || !retains) return;
  void *dev1 = NULL;
  retain(&dev1, 1);
  set(dev1);
  da_context *ctx;
  da_context_create(&ctx);
  const da_spec s = longnet(1, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st); /* takes device 1 (DILATTN_TUNING=0 here) */
  TU_CHECK(p && st == DA_OK, "a plan with device 1 current: %s", da_context_last_error(ctx));
  char db[4200];
  snprintf(db, sizeof db, "%s/devices-tuning.jsonl", cache);
  FILE *f = fopen(db, "w");
  if (f) fputs("{\"dilattn_tuning_db\":1,\"env\":{}}\n", f), fclose(f);
  setenv("DILATTN_TUNING_DB", db, 1);
  unsetenv("DILATTN_TUNING");
  pthread_t t;
  void *rv = (void *)(intptr_t)DA_ERR_INTERNAL;
  if (pthread_create(&t, NULL, plan_on_thread, ctx) == 0) pthread_join(t, &rv);
  TU_CHECK((da_status)(intptr_t)rv == DA_OK && retains(0) == 0,
           "a plan of a device-1 context on a thread with none current: %s, device 0 set up %d times (want 0)",
           da_status_name((da_status)(intptr_t)rv), retains(0));
  setenv("DILATTN_TUNING", "0", 1);
  unsetenv("DILATTN_TUNING_DB");
  da_plan_destroy(p);
  da_context_destroy(ctx);
  set(NULL);
}

/* A context used only for the host backend never opens the CUDA driver: DILATTN_BACKEND=host
 * with DA_BACKEND_AUTO, by plan creation and by preload alike. (In a child that has not
 * opened the driver.) */
static void test_host_only(const char *fake) {
  setenv("DILATTN_BACKEND", "host", 1);
  da_context *ctx;
  da_context_create(&ctx);
  const da_spec s = longnet(1, 0);
  da_plan *p = NULL;
  da_status st = da_plan_create(ctx, &s, DA_BACKEND_AUTO, &p);
  void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  TU_CHECK(st == DA_OK && p && da_plan_backend(p) == DA_BACKEND_HOST && !lib,
           "DILATTN_BACKEND=host, auto: a host plan (%s), the driver not opened (%s)", da_status_name(st),
           lib ? "opened" : "not opened");
  if (lib) dlclose(lib);
  da_plan_destroy(p);
  p = NULL;
  st = da_plan_preload(ctx, &s, 1, DA_BACKEND_AUTO, 1, NULL, NULL, &p);
  lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  TU_CHECK(st == DA_OK && p && da_plan_backend(p) == DA_BACKEND_HOST && !lib,
           "DILATTN_BACKEND=host, auto, preloaded: a host plan (%s), the driver not opened (%s)", da_status_name(st),
           lib ? "opened" : "not opened");
  if (lib) dlclose(lib);
  da_plan_destroy(p);
  da_context_destroy(ctx);
  unsetenv("DILATTN_BACKEND");
}

/* A CUDA bundle (`gen --mma MMA --compile --bundle`) of LongNet 2-branch for the fake
 * device's sm_90, in dir/SUB: 1 where the CLI made it */
static int make_cuda_bundle(const char *cli, const char *dir, const char *mma, const char *sub, int branches) {
  const da_spec s = longnet(branches, 0);
  char cfg[600], cmd[2000];
  snprintf(cfg, sizeof cfg, "%s/longnet%d.json", dir, branches);
  char *js = da_spec_to_json(&s);
  FILE *f = fopen(cfg, "w");
  if (!f || !js) return free(js), f && fclose(f), 0;
  fputs(js, f);
  fclose(f);
  free(js);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s' && '%s' gen --target cuda --arch sm_90 --mma %s --compile "
                            "--bundle fk -o '%s/%s' '%s' > /dev/null", dir, sub, cli, mma, dir, sub, cfg);
  return system(cmd) == 0;
}

/* A plan of LongNet (branches, AUTO, cuda_mma mma) in a new context with manifest registered
 * (none: NULL) and a fresh disk cache (dir/name); its bundle hits and builds */
static long long last_disk_hits; /* bundle_plan_mma's plan's disk cache hits */
static da_status bundle_plan_mma(const char *dir, const char *name, const char *manifest, int branches, int mma,
                                 da_backend *got,
                                 long long *hits, long long *builds, char *err, size_t cap) {
  char cache[700];
  snprintf(cache, sizeof cache, "%s/%s", dir, name);
  setenv("DILATTN_CACHE_DIR", cache, 1);
  da_context *ctx;
  da_context_create(&ctx);
  da_status st = manifest ? da_context_register_bundle(ctx, manifest) : DA_OK;
  da_plan *p = NULL;
  const da_spec s = longnet(branches, 0);
  da_plan_options o;
  memset(&o, 0, sizeof o);
  o.cuda_mma = mma;
  if (st == DA_OK) st = da_plan_create_ex(ctx, &s, DA_BACKEND_AUTO, &o, &p);
  *got = p ? da_plan_backend(p) : DA_BACKEND_AUTO;
  *hits = da__context_kernels(ctx)->bundle_hits, *builds = da__context_kernels(ctx)->builds;
  last_disk_hits = da__context_kernels(ctx)->disk_hits;
  snprintf(err, cap, "%s", st == DA_OK ? "" : da_context_last_error(ctx));
  da_plan_destroy(p);
  da_context_destroy(ctx);
  return st;
}
static da_status bundle_plan(const char *dir, const char *name, const char *manifest, da_backend *got,
                             long long *hits, long long *builds, char *err, size_t cap) {
  return bundle_plan_mma(dir, name, manifest, 2, 0, got, hits, builds, err, cap);
}

/* A copy of dir/bundle's manifest as another NVRTC's build would have it (each artifact key
 * changed): dir/bundle/manifest-other.json, its path into other */
static void write_other_nvrtc_manifest(const char *dir, char *other, size_t cap) {
  char manifest[700];
  snprintf(manifest, sizeof manifest, "%s/bundle/manifest.json", dir);
  snprintf(other, cap, "%s/bundle/manifest-other.json", dir);
  size_t len = 0;
  char *text = da__read_file(manifest, &len);
  TU_CHECK(text != NULL, "read %s", manifest);
  if (!text) return;
  int edited = 0;
  for (char *at = text; (at = strstr(at, "\"key\": \"")) != NULL; at += 8, edited++)
    at[8] = at[8] == '0' ? '1' : '0'; /* each artifact key's first hex digit */
  FILE *f = fopen(other, "w");
  if (f) fputs(text, f), fclose(f);
  free(text);
  TU_CHECK(f && edited > 0, "the manifest of another NVRTC (%d keys)", edited);
}

/* Without NVRTC (a child: NVRTC is opened once a process) a GPU is still the CUDA backend's:
 * AUTO gives a CUDA plan from a bundle, JIT off or not, and where no bundle holds the
 * kernel an error that says NVRTC is missing, never a host plan that would take a
 * program's device pointers for its own (it did both: a bundle was of no use without the
 * NVRTC that built it) */
static void test_bundle_without_nvrtc(const char *dir, const char *cli, const char *templates) {
  setenv("DILATTN_NVRTC_LIB", "/nonexistent/libnvrtc.so", 1);
  { /* the CLI: run (its own host arrays) takes the host backend with a warning; tune --backend
     * cuda is refused before anything is written (it tried every candidate, exit 3) */
    char ex[800], out[900], *cmd = NULL;
    snprintf(ex, sizeof ex, "%s/../tests/data/example", templates);
    snprintf(out, sizeof out, "%s/cli-no-nvrtc", dir);
    const int rc = asprintf(&cmd,
                            "mkdir -p %s && cd %s && DILATTN_CACHE_DIR=%s/cache '%s' run %s/longnet.json --q %s/q.npy "
                            "--k %s/k.npy --v %s/v.npy -o o.npy > run.out 2> run.err",
                            out, out, out, cli, ex, ex, ex, ex) < 0 ? -1 : system(cmd);
    free(cmd);
    char path[1000];
    snprintf(path, sizeof path, "%s/run.out", out);
    size_t len = 0;
    char *so = da__read_file(path, &len);
    snprintf(path, sizeof path, "%s/run.err", out);
    char *se = da__read_file(path, &len);
    TU_CHECK(rc == 0 && so && strstr(so, "\"backend\":\"host\"") && se && strstr(se, "running on the host backend"),
             "run without NVRTC, a GPU and no bundle: the host backend, with a warning (rc %d: %s %s)", rc,
             so ? so : "", se ? se : "");
    free(so), free(se);
    const int trc = asprintf(&cmd, "cd %s && '%s' tune %s/longnet.json --seq-len 256 --backend cuda --db tune.jsonl "
                                   "> tune.out 2> tune.err", out, cli, ex) < 0 ? -1 : system(cmd);
    free(cmd);
    snprintf(path, sizeof path, "%s/tune.err", out);
    se = da__read_file(path, &len);
    snprintf(path, sizeof path, "%s/tune.jsonl", out);
    TU_CHECK(WIFEXITED(trc) && WEXITSTATUS(trc) == 4 && se && strstr(se, "NVRTC") && access(path, F_OK) != 0,
             "tune --backend cuda without NVRTC: exit 4 before anything is written (%d: %s)",
             WIFEXITED(trc) ? WEXITSTATUS(trc) : -1, se ? se : "");
    free(se);
  }
  char manifest[700], err[2048];
  snprintf(manifest, sizeof manifest, "%s/bundle/manifest.json", dir);
  da_backend got;
  long long hits, builds;
  da_status st = bundle_plan(dir, "no-nvrtc-0", NULL, &got, &hits, &builds, err, sizeof err);
  TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(err, "NVRTC not available") && strstr(err, "no registered bundle"),
           "no NVRTC, no bundle: the kernel cannot be had, and the error says why (%s: %s)", da_status_name(st), err);
  /* a disk cache that NVRTC 13.0 filled (child_warm_cache: on another machine, or before
   * NVRTC went): its build serves, JIT on and off (its key names NVRTC 13.0, not 0.0 as
   * here: it was not looked up); one this driver refuses does not */
  for (int jit = 0; jit < 2; jit++) {
    if (!jit) setenv("DILATTN_DISABLE_JIT", "1", 1);
    st = bundle_plan(dir, "shipped", NULL, &got, &hits, &builds, err, sizeof err);
    TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && last_disk_hits >= 1 && hits == 0 && builds == 0,
             "no NVRTC, JIT %s, the disk cache's build by NVRTC 13.0: a CUDA plan from it (%s, backend %d, %lld disk "
             "hits, %lld builds: %s)",
             jit ? "on" : "off", da_status_name(st), (int)got, last_disk_hits, builds, err);
    unsetenv("DILATTN_DISABLE_JIT");
  }
  setenv("FAKE_CUDA_REFUSE_IMAGES", "all", 1);
  st = bundle_plan(dir, "shipped", NULL, &got, &hits, &builds, err, sizeof err);
  unsetenv("FAKE_CUDA_REFUSE_IMAGES");
  TU_CHECK(st == DA_ERR_UNSUPPORTED && last_disk_hits == 0 && strstr(err, "NVRTC not available"),
           "no NVRTC, the disk cache's build refused by the driver: the error says NVRTC is missing (%s: %s)",
           da_status_name(st), err);
  for (int jit = 0; jit < 2; jit++) {
    if (!jit) setenv("DILATTN_DISABLE_JIT", "1", 1);
    st = bundle_plan(dir, jit ? "no-nvrtc-2" : "no-nvrtc-1", manifest, &got, &hits, &builds, err, sizeof err);
    TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && hits >= 1 && builds == 0,
             "no NVRTC, JIT %s, a bundle: a CUDA plan from it (%s, backend %d, %lld bundle hits, %lld builds: %s)",
             jit ? "on" : "off", da_status_name(st), (int)got, hits, builds, err);
    unsetenv("DILATTN_DISABLE_JIT");
  }
  /* a bundle of wgmma-ws alone: the default (wgmma-ws-tma) is nowhere and cannot be
   * compiled, so the plan falls back to what the bundle holds, as with JIT off (it failed) */
  char ws_manifest[700];
  snprintf(ws_manifest, sizeof ws_manifest, "%s/bundle-ws/manifest.json", dir);
  st = bundle_plan(dir, "no-nvrtc-ws", ws_manifest, &got, &hits, &builds, err, sizeof err);
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && hits >= 1 && builds == 0,
           "no NVRTC, a bundle of the default's fallback alone: a CUDA plan from it (%s, %lld bundle hits: %s)",
           da_status_name(st), hits, err);
  /* another NVRTC's bundle whose cubin this driver refuses, and no NVRTC: the error says so */
  char other[700];
  write_other_nvrtc_manifest(dir, other, sizeof other);
  setenv("FAKE_CUDA_REFUSE_IMAGES", "1", 1);
  st = bundle_plan_mma(dir, "no-nvrtc-refused", other, 2, 6, &got, &hits, &builds, err, sizeof err); /* (named: no fallback) */
  unsetenv("FAKE_CUDA_REFUSE_IMAGES");
  TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(err, "refuses the build") && strstr(err, "bundle ") && strstr(err, "NVRTC not available"),
           "no NVRTC, another NVRTC's cubin refused: the error names both (%s: %s)", da_status_name(st), err);
  /* a tuning database of this GPU written where NVRTC 13.0 was: its CUDA records count here
   * (the kernels come built; it was "another environment", nvrtc "none" here) */
  char db[700];
  snprintf(db, sizeof db, "%s/no-nvrtc-tuning.jsonl", dir);
  unlink(db);
  da__tune_record r;
  memset(&r, 0, sizeof r);
  const da_spec s = longnet(2, 0);
  char *js = da_spec_to_json(&s);
  da__sha256_hex(js, strlen(js), r.spec_hash);
  free(js);
  snprintf(r.backend, sizeof r.backend, "cuda");
  snprintf(r.status, sizeof r.status, "ok");
  snprintf(r.strategy, sizeof r.strategy, "fused");
  r.seq_len = 65536, r.batch = 1, r.bucket = da__tuning_bucket(65536), r.params.cuda_mma = 4; /* wgmma-ws */
  r.median_ms = r.min_ms = r.max_ms = 1.0, r.reps = 1;
  da_context *ctx;
  da_context_create(&ctx);
  TU_CHECK(da__tuning_db_merge(ctx, db, &r, 1) == DA_OK, "tuning db: %s", da_context_last_error(ctx));
  da_context_destroy(ctx);
  size_t len = 0;
  char *text = da__read_file(db, &len), *at = text ? strstr(text, "\"nvrtc\":\"none\"") : NULL;
  TU_CHECK(at != NULL, "the header's nvrtc: %s", text ? text : "(no file)");
  if (at) {
    FILE *f = fopen(db, "w");
    fprintf(f, "%.*s\"nvrtc\":\"13.0\"%s", (int)(at - text), text, at + strlen("\"nvrtc\":\"none\""));
    fclose(f);
  }
  free(text);
  setenv("DILATTN_TUNING_DB", db, 1);
  unsetenv("DILATTN_TUNING");
  da_context_create(&ctx);
  TU_CHECK(da_context_register_bundle(ctx, manifest) == DA_OK, "register: %s", da_context_last_error(ctx));
  da_plan *p = NULL;
  st = da_plan_create(ctx, &s, DA_BACKEND_AUTO, &p);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw"),
           "no NVRTC, a tuning record of wgmma-ws from where NVRTC 13.0 was: its kernel (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  da_context_destroy(ctx);
  setenv("DILATTN_TUNING", "0", 1);
  unsetenv("DILATTN_TUNING_DB");
  unsetenv("DILATTN_NVRTC_LIB");
}

/* A bundle that another NVRTC built (its artifact keys differ from the ones computed here:
 * the manifest's edited) serves before anything compiles, unless the driver refuses its
 * cubin (as a driver older than that NVRTC does): then it compiles here */
static void test_bundle_other_nvrtc(const char *dir) {
  char other[700], err[2048];
  write_other_nvrtc_manifest(dir, other, sizeof other);
  da_backend got;
  long long hits, builds;
  da_status st = bundle_plan(dir, "other-nvrtc-0", other, &got, &hits, &builds, err, sizeof err);
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && hits >= 1 && builds == 0,
           "another NVRTC's bundle: used, nothing compiled (%s, %lld bundle hits, %lld builds: %s)", da_status_name(st),
           hits, builds, err);
  setenv("FAKE_CUDA_REFUSE_IMAGES", "1", 1);
  st = bundle_plan(dir, "other-nvrtc-1", other, &got, &hits, &builds, err, sizeof err);
  unsetenv("FAKE_CUDA_REFUSE_IMAGES");
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && hits == 0 && builds == 1,
           "another NVRTC's bundle the driver refuses: compiled here (%s, %lld bundle hits, %lld builds: %s)",
           da_status_name(st), hits, builds, err);
  /* JIT off: the error says a bundle holds the kernel, but its copy was not taken (it said
   * "in no registered bundle") */
  setenv("FAKE_CUDA_REFUSE_IMAGES", "all", 1);
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  st = bundle_plan_mma(dir, "other-nvrtc-2", other, 2, 6, &got, &hits, &builds, err, sizeof err); /* (named: no fallback) */
  unsetenv("DILATTN_DISABLE_JIT");
  TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(err, "held by a registered bundle, but no copy was taken"),
           "another NVRTC's bundle the driver refuses, JIT off: the error says the bundle's copy was not taken (%s: %s)",
           da_status_name(st), err);
  /* this NVRTC's own bundle, refused by the driver: the error names the kernel and the
   * likely cause (it was a bare "cuModuleLoadData failed: 222") */
  char own[700];
  snprintf(own, sizeof own, "%s/bundle/manifest.json", dir);
  st = bundle_plan_mma(dir, "own-refused", own, 2, 6, &got, &hits, &builds, err, sizeof err);
  unsetenv("FAKE_CUDA_REFUSE_IMAGES");
  TU_CHECK(st != DA_OK && strstr(err, "cuModuleLoadData failed on da_fwd_") && strstr(err, "newer CUDA than this driver"),
           "a bundle's own cubin the driver refuses: the error names the kernel (%s: %s)", da_status_name(st), err);
}

/* A plan of s with no options under a tuning database that holds one ok record of params
 * for rec_spec (this environment's) and DILATTN_CUDA_MMA=env (NULL: unset): its options into *got, its
 * kernel's name into name */
static da_status tuned_with_env(const da_spec *rec_spec, const da_spec *s, da_plan_options params, const char *db,
                                const char *env, da_plan_options *got, char *name, size_t cap) {
  if (env) setenv("DILATTN_CUDA_MMA", env, 1);
  da__tune_record r;
  memset(&r, 0, sizeof r);
  char *js = da_spec_to_json(rec_spec);
  da__sha256_hex(js, strlen(js), r.spec_hash);
  free(js);
  snprintf(r.backend, sizeof r.backend, "cuda");
  snprintf(r.status, sizeof r.status, "ok");
  snprintf(r.strategy, sizeof r.strategy, "fused");
  r.seq_len = 65536, r.batch = 1, r.bucket = da__tuning_bucket(65536), r.params = params;
  r.median_ms = r.min_ms = r.max_ms = 1.0, r.reps = 1;
  unlink(db);
  da_context *ctx; /* a new one: a context reads the database once */
  da_context_create(&ctx);
  da_status st = da__tuning_db_merge(ctx, db, &r, 1);
  TU_CHECK(st == DA_OK, "tuning database %s: %s", db, da_context_last_error(ctx));
  setenv("DILATTN_TUNING_DB", db, 1);
  unsetenv("DILATTN_TUNING");
  da_plan *p = NULL;
  st = da_plan_create(ctx, s, DA_BACKEND_CUDA, &p);
  memset(got, 0, sizeof *got);
  if (p) da_plan_get_options(p, got);
  snprintf(name, cap, "%s", p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  setenv("DILATTN_TUNING", "0", 1);
  unsetenv("DILATTN_TUNING_DB");
  unsetenv("DILATTN_CUDA_MMA");
  da_plan_destroy(p);
  da_context_destroy(ctx);
  return st;
}

/* The kernel of a plan of s with no options under a tuning database that holds one ok
 * record of params (written for this environment: the fake device's). */
static da_status kernel_tuned(const da_spec *s, da_plan_options params, const char *db, char *name, size_t cap) {
  da_plan_options got;
  return tuned_with_env(s, s, params, db, NULL, &got, name, cap);
}

/* A caller's workspace: below the least (one run) refused, misaligned refused, the least
 * taken in runs; a batch past the grid's z refused. */
static void test_workspace(da_context *ctx) {
  launch_t L[64];
  const da_spec s = longnet(5, 1);
  const int64_t N = 65536;
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  if (!p) return;
  size_t least = 0, all = 0;
  da_plan_workspace_min_size(p, 1, N, &least);
  da_plan_workspace_size(p, 1, N, &all);
  da_plan_options po;
  da_plan_get_options(p, &po);
  /* (one run of all the tokens: the rows, then a counter each persistent launch) */
  TU_CHECK(least > 0 && least * 2 + 4 * (size_t)persistent_launches(&s, N, po.tile_q) == all,
           "workspace: %zu bytes for one run of 32768 tokens, %zu for all", least, all);
  const size_t nq = (size_t)N * 8 * 64;
  uint16_t *q = calloc(nq, 2), *k = calloc(nq, 2), *v = calloc(nq, 2), *o = calloc(nq, 2);
  float *lse = calloc((size_t)N * 8, 4);
  char *ws = aligned_alloc(256, least + 256);
  da_args a;
  da_args_init(&a, &s, 1, N, q, k, v, o, lse);
  read_launches(L, 64);
  a.workspace = ws, a.workspace_bytes = least - 1;
  st = da_plan_execute(p, &a);
  TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "workspace") && !read_launches(L, 64),
           "a workspace a byte short of one run: refused before any launch (%s: %s)", da_status_name(st),
           da_context_last_error(ctx));
  a.workspace = ws + 8, a.workspace_bytes = least;
  st = da_plan_execute(p, &a);
  TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "aligned") && !read_launches(L, 64),
           "a workspace 8 bytes off 16: refused (%s: %s)", da_status_name(st), da_context_last_error(ctx));
  a.workspace = ws, a.workspace_bytes = least;
  st = da_plan_execute(p, &a);
  TU_CHECK(st == DA_OK && read_launches(L, 64) == 10, "the least workspace: two runs of five launches (%s)",
           da_context_last_error(ctx));
  /* 65536 x 1 token: the size of 65536 tokens, one per batch entry */
  da_args_init(&a, &s, 65536, 1, q, k, v, o, lse);
  st = da_plan_execute(p, &a);
  TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "65535") && !read_launches(L, 64),
           "batch 65536: refused (%s: %s)", da_status_name(st), da_context_last_error(ctx));
  free(q), free(k), free(v), free(o), free(lse), free(ws);
  da_plan_destroy(p);
}

/* Persistent launches' counters in the caller's workspace, after the partial rows
 * (da_plan_workspace_size counts them): zeroed there, nothing allocated from the pool (a
 * stream capture gets one memset node), no byte outside them touched; a byte short of
 * them, the pairs; half the rows and room for the counters, runs of half the tokens each
 * with its own; without cuMemsetD32Async, the pairs. Without a caller's workspace, one
 * allocation of rows and counters together, and where the pool has room for the rows
 * alone (FAKE_CUDA_POOL_LIMIT), the rows and the pairs. A fused plan (no rows) takes the
 * counters alone, at a 4-byte (not 16) offset, and runs the pairs where the pool has
 * nothing. */
static void test_workspace_ctrs(da_context *ctx, const char *fake) {
  void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  void (*stats)(int *, int *, int *, int *) = lib ? (void (*)(int *, int *, int *, int *))dlsym(lib, "fake_cuda_pool_stats") : NULL;
  TU_CHECK(stats != NULL, "the fake driver's pool counts");
  if (!stats) return;
  launch_t L[64];
  const int64_t N = 262144;
  static const struct {
    int branches;
    const char *strategy;
  } P[] = {{5, "split"}, {2, "fused"}};
  enum { FULL, SHORT, HALF, NO_MEMSET, POOL, POOL_ROWS, NCASES };
  static const char *const what[NCASES] = {"a workspace of da_plan_workspace_size bytes",
                                           "a workspace a byte short of it",
                                           "half the rows and room for the counters (runs of half the tokens)",
                                           "a workspace of da_plan_workspace_size bytes, no cuMemsetD32Async",
                                           "the pool's workspace",
                                           "the pool's workspace, room for the rows alone"};
  for (size_t c = 0; c < sizeof P / sizeof P[0]; c++) {
    const da_spec s = longnet(P[c].branches, 1);
    const int split = !strcmp(P[c].strategy, "split");
    da_status st;
    setenv("DILATTN_CTA_TILES", "pairs", 1);
    da_plan *pairs = plan_with(ctx, &s, 0, 0, 0, &st);
    unsetenv("DILATTN_CTA_TILES");
    da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
    if (!p || !pairs) {
      TU_CHECK(0, "LongNet %d-branch causal plans: %s", P[c].branches, da_context_last_error(ctx));
      da_plan_destroy(p), da_plan_destroy(pairs);
      continue;
    }
    da_plan_options o;
    da_plan_get_options(p, &o);
    size_t rows = 0, all = 0;
    da_plan_workspace_size(pairs, 1, N, &rows);
    da_plan_workspace_size(p, 1, N, &all);
    const int npers = split ? persistent_launches(&s, N, o.tile_q) : 1;
    const int nhalf = split ? 2 * persistent_launches(&s, N / 2, o.tile_q) : 0; /* (two runs) */
    const size_t off = (rows + 15) & ~(size_t)15;
    TU_CHECK(!strcmp(da_plan_strategy(p), P[c].strategy) && o.tile_q == 128 && npers > 0 && (rows > 0) == split &&
                 all == off + 4 * (size_t)npers,
             "LongNet %d-branch causal (%s, tile_q %d) at N = %lld: workspace %zu = rows %zu, then %d counters",
             P[c].branches, da_plan_strategy(p), o.tile_q, (long long)N, all, rows, npers);
    const size_t nq = (size_t)N * s.num_heads * s.head_dim;
    uint16_t *q = calloc(nq, 2), *k = calloc(nq, 2), *v = calloc(nq, 2), *out = calloc(nq, 2);
    float *lse = calloc((size_t)N * s.num_heads, 4);
    char *ws = aligned_alloc(256, (all + 32 + 255) / 256 * 256);
    if (!q || !k || !v || !out || !lse || !ws) {
      TU_CHECK(0, "host memory for N = %lld", (long long)N);
      free(q), free(k), free(v), free(out), free(lse), free(ws);
      da_plan_destroy(p), da_plan_destroy(pairs);
      return;
    }
    da_args a;
    da_args_init(&a, &s, 1, N, q, k, v, out, lse);
    for (int cs = 0; cs < NCASES; cs++) {
      if (cs == HALF && !split) continue;
      const int caller = cs < POOL;
      /* (the counters' offset and count, the launches and the bytes given) */
      const size_t at = cs == HALF ? rows / 2 : off;
      const int want = cs == FULL ? npers : cs == HALF ? nhalf : cs == POOL ? npers : 0;
      const int launches = (cs == HALF ? 2 : 1) * (split ? 5 : 1);
      const size_t given = cs == SHORT ? all - 1 : cs == HALF ? at + 4 * (size_t)nhalf : all;
      char *w = ws + (split ? 0 : 4);
      /* canaries: 4 bytes before a fused plan's, 16 after the bytes given; the counters'
       * bytes as the pool leaves them */
      memset(ws, 0x5a, (size_t)(w - ws));
      memset(w + at, 0xa5, given - at);
      memset(w + given, 0x5a, 16);
      a.workspace = caller ? w : NULL, a.workspace_bytes = caller ? given : 0;
      if (cs == NO_MEMSET) setenv("FAKE_CUDA_NO_MEMSET", "1", 1);
      char limit[32];
      snprintf(limit, sizeof limit, "%zu", rows);
      if (cs == POOL_ROWS) setenv("FAKE_CUDA_POOL_LIMIT", limit, 1);
      int created0, allocs0, dflt0, trims0, created, allocs, dflt, trims;
      read_launches(L, 64);
      stats(&created0, &allocs0, &dflt0, &trims0);
      st = da_plan_execute(p, &a);
      stats(&created, &allocs, &dflt, &trims);
      unsetenv("FAKE_CUDA_NO_MEMSET"), unsetenv("FAKE_CUDA_POOL_LIMIT");
      const int n = read_launches(L, 64);
      int pers = 0, left = 0, canaries = 1;
      for (int i = 0; i < n; i++) pers += L[i].ctr == 0;
      /* (the fake driver leaves each launch's counter 0xd00d) */
      for (int i = 0; caller && i < want; i++) left += ((unsigned *)(void *)(w + at))[i] == 0xd00du;
      for (char *b = ws; b < w; b++) canaries &= *b == 0x5a;
      for (int i = 0; i < 16; i++) canaries &= w[given + (size_t)i] == 0x5a;
      const int want_allocs = caller ? 0 : cs == POOL_ROWS ? split : 1;
      TU_CHECK(st == DA_OK && n == launches && pers == want && (!caller || left == want) && canaries &&
                   allocs - allocs0 == want_allocs,
               "LongNet %d-branch causal, %s: %d launches (want %d), %d persistent (want %d), %d counters in the "
               "workspace, canaries %s, %d allocations from the pool (want %d): %s",
               P[c].branches, what[cs], n, launches, pers, want, left, canaries ? "intact" : "overwritten",
               allocs - allocs0, want_allocs, st ? da_context_last_error(ctx) : "");
      if (split && n == 5 && cs != HALF)
        check_grids_pw(L, &s, N, o.tile_q, 0, want ? DA_CUDA_PERSIST_WAVES : 0, what[cs]);
    }
    free(q), free(k), free(v), free(out), free(lse), free(ws);
    da_plan_destroy(p), da_plan_destroy(pairs);
  }
}

/* Stream capture (a CUDA graph, as an inference engine records its step): an execution
 * under a global-mode capture of its stream makes no call that capture prohibits
 * (tests/fake_cuda.c: nothing that may synchronize, no legacy-stream work), whether it
 * takes its workspace from the pool (split rows, persistent counters: allocation, memset,
 * launches, free on the stream), from the caller (memset and launches) or in runs
 * (DILATTN_WORKSPACE_LIMIT); and the same plan on the legacy stream during another
 * stream's capture is refused by the driver (the check can fail). */
static void test_capture(da_context *ctx, const char *fake) {
  void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  int (*begin)(void *, int) = lib ? (int (*)(void *, int))dlsym(lib, "cuStreamBeginCapture_v2") : NULL;
  int (*end)(void *, void **) = lib ? (int (*)(void *, void **))dlsym(lib, "cuStreamEndCapture") : NULL;
  int (*captured)(void) = lib ? (int (*)(void))dlsym(lib, "fake_cuda_captured") : NULL;
  void *(*stream_of)(int) = lib ? (void *(*)(int))dlsym(lib, "fake_cuda_stream") : NULL;
  TU_CHECK(begin && end && captured && stream_of, "the fake driver's capture calls");
  if (!begin || !end || !captured || !stream_of) return;
  launch_t L[64];
  static const struct {
    int causal, caller_ws, legacy;
    const char *limit, *what;
    int64_t n;
    int launches, ops; /* stream work captured: allocations, memsets, launches, frees */
  } C[] = {{1, 0, 0, NULL, "causal, persistent, the pool's workspace", 262144, 5, 1 + 1 + 5 + 1},
           {1, 1, 0, NULL, "causal, persistent, a caller's workspace", 262144, 5, 1 + 5},
           {0, 0, 0, "100M", "runs of tokens (DILATTN_WORKSPACE_LIMIT)", 65536, 10, 1 + 10 + 1},
           {0, 0, 1, NULL, "the legacy stream during another stream's capture", 16384, 0, 0}};
  for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
    const da_spec s = longnet(5, C[c].causal);
    if (C[c].limit) setenv("DILATTN_WORKSPACE_LIMIT", C[c].limit, 1);
    da_status st;
    da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
    unsetenv("DILATTN_WORKSPACE_LIMIT");
    if (!p) {
      TU_CHECK(0, "capture, %s: plan: %s", C[c].what, da_context_last_error(ctx));
      continue;
    }
    const int64_t N = C[c].n;
    const size_t nq = (size_t)N * s.num_heads * s.head_dim;
    size_t wsb = 0;
    da_plan_workspace_size(p, 1, N, &wsb);
    uint16_t *q = calloc(nq, 2), *k = calloc(nq, 2), *v = calloc(nq, 2), *o = calloc(nq, 2);
    float *lse = calloc((size_t)N * s.num_heads, 4);
    char *ws = C[c].caller_ws ? aligned_alloc(256, (wsb + 255) / 256 * 256) : NULL;
    da_args a;
    da_args_init(&a, &s, 1, N, q, k, v, o, lse);
    a.stream = C[c].legacy ? NULL : stream_of(0);
    if (ws) a.workspace = ws, a.workspace_bytes = wsb;
    read_launches(L, 64);
    const int bs = begin(stream_of(0), 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */);
    st = q && k && v && o && lse && (ws || !C[c].caller_ws) ? da_plan_execute(p, &a) : DA_ERR_NO_MEMORY;
    void *graph = NULL;
    const int es = end(stream_of(0), &graph);
    const int n = read_launches(L, 64), ops = captured();
    if (C[c].legacy)
      TU_CHECK(bs == 0 && st == DA_ERR_DEVICE && es == 901, "capture, %s: refused (%s: %s; end of capture %d)",
               C[c].what, da_status_name(st), da_context_last_error(ctx), es);
    else
      TU_CHECK(bs == 0 && st == DA_OK && es == 0 && graph && ops == C[c].ops && n == C[c].launches,
               "capture, %s: %s, end of capture %d, %d operations captured (want %d), %d launches: %s", C[c].what,
               da_status_name(st), es, ops, C[c].ops, n, da_context_last_error(ctx));
    free(q), free(k), free(v), free(o), free(lse), free(ws);
    da_plan_destroy(p);
  }
}

static void test_tuned(const char *cache) {
  const da_spec s = longnet(2, 0);
  char db[600], name[512];
  snprintf(db, sizeof db, "%s/tuning.jsonl", cache);
  da_plan_options none, old_sync;
  memset(&none, 0, sizeof none);
  memset(&old_sync, 0, sizeof old_sync);
  old_sync.tile_q = 128, old_sync.tile_k = 64; /* an mma.sync candidate of an older tuner: cuda_mma 0 */
  da_status st = kernel_tuned(&s, none, db, name, sizeof name);
  TU_CHECK(st == DA_OK && ends_with(name, "_wgmmat"),
           "a tuning record of the default candidate: the default kernel (%s)", name);
  st = kernel_tuned(&s, old_sync, db, name, sizeof name);
  TU_CHECK(st == DA_OK && !strstr(name, "_wgmma"), "an older tuner's mma.sync record: mma.sync (%s)", name);
  /* a record the planner refuses (mma.sync takes tile_q 64 or 128): the defaults, not a
   * failed plan (a database edited by hand, or written by another planner) */
  da_plan_options refused;
  memset(&refused, 0, sizeof refused);
  refused.tile_q = 48, refused.tile_k = 64, refused.cuda_mma = 1;
  st = kernel_tuned(&s, refused, db, name, sizeof name);
  TU_CHECK(st == DA_OK && ends_with(name, "_wgmmat"), "a tuning record the planner refuses: the defaults (%s: %s)",
           da_status_name(st), name);
  /* JIT off: a record whose kernel no cache holds gives the defaults (cached above) too */
  da_plan_options uncached;
  memset(&uncached, 0, sizeof uncached);
  uncached.tile_q = 64, uncached.tile_k = 64, uncached.cuda_mma = 4;
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  st = kernel_tuned(&s, uncached, db, name, sizeof name);
  unsetenv("DILATTN_DISABLE_JIT");
  TU_CHECK(st == DA_OK && ends_with(name, "_wgmmat"), "JIT off, a tuning record of an uncached kernel: the defaults "
           "(%s: %s)", da_status_name(st), name);
}

/* A driver before CUDA 12.1 (FAKE_CUDA_VERSION 12000; the driver is opened once a
 * process: each version runs in a child of its own): kernel parameters stop at 4 KiB
 * there, so the default is wgmma-ws, and a wgmma-ws-tma plan whose tensor maps pass 4 KiB
 * (LongNet 5-branch split: 36 maps) is refused with the reason; one within them (2-branch
 * fused: 9) is planned. From 12.1 (12010) the default and both plans are TMA's. */
static da_status kernel_tuned(const da_spec *s, da_plan_options params, const char *db, char *name, size_t cap);

static void test_driver_version(int version, const char *cache) {
  char v[16];
  snprintf(v, sizeof v, "%d", version);
  setenv("FAKE_CUDA_VERSION", v, 1);
  const int old = version < 12010;
  da_context *ctx;
  TU_CHECK(da_context_create(&ctx) == DA_OK, "context");
  const da_spec s2 = longnet(2, 0), s5 = longnet(5, 0);
  da_status st;
  da_plan *p = plan_with(ctx, &s2, 0, 0, 0, &st);
  if (st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(ctx), "NVRTC")) { /* main says SKIP */
    da_context_destroy(ctx);
    return;
  }
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), old ? "_wgmmaw" : "_wgmmat") && mma_of(p) == (old ? 4 : 6),
           "driver %d, no options: the warp-specialized kernel %s TMA (%s, %s)", version, old ? "without" : "with",
           da_status_name(st), p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  p = plan_with(ctx, &s2, 0, 0, 6, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmat"),
           "driver %d, LongNet 2-branch with cuda_mma 6 (9 maps, 1408 bytes of parameters): planned (%s, %s)", version,
           da_status_name(st), p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  p = plan_with(ctx, &s5, 0, 0, 6, &st);
  if (old)
    TU_CHECK(st == DA_ERR_UNSUPPORTED && !p && strstr(da_context_last_error(ctx), "4864 bytes of parameters") &&
                 strstr(da_context_last_error(ctx), "12.0") && strstr(da_context_last_error(ctx), "12.1"),
             "driver %d, LongNet 5-branch with cuda_mma 6: refused with the reason (%s: %s)", version, da_status_name(st),
             da_context_last_error(ctx));
  else
    TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmat"),
             "driver %d, LongNet 5-branch with cuda_mma 6 (4864 bytes of parameters): planned (%s, %s)", version,
             da_status_name(st), p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  /* a tuning record of that plan (tuned under another driver): advice, the defaults where
   * this driver refuses it */
  char db[600], name[512];
  snprintf(db, sizeof db, "%s/tuning-%d.jsonl", cache, version);
  const da_plan_options tma = {0, 0, 0, 0, 6};
  st = kernel_tuned(&s5, tma, db, name, sizeof name);
  TU_CHECK(st == DA_OK && ends_with(name, old ? "_wgmmaw" : "_wgmmat"),
           "driver %d, a tuning record of cuda_mma 6 for LongNet 5-branch: %s (%s: %s)", version,
           old ? "the defaults" : "taken", da_status_name(st), name);
  da_context_destroy(ctx);
}

/* Run fn(arg) in a child process forked now, its checks counted there alone (not the
 * parent's so far): 1 where they passed */
static int run_in_child(void (*fn)(void *), void *arg) {
  fflush(NULL);
  const pid_t child = fork();
  if (child == 0) {
    tu_passed = tu_failed = 0;
    fn(arg);
    const int rc = tu_report();
    fflush(NULL);
    _exit(rc);
  }
  int wst = 0;
  return child > 0 && waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
}

typedef struct {
  int version;
  const char *cache;
} driver_args;
static void child_driver_version(void *a) {
  const driver_args *d = a;
  test_driver_version(d->version, d->cache);
}
typedef struct {
  const char *cache, *cli, *templates;
} no_nvrtc_args;
static void child_without_nvrtc(void *a) {
  const no_nvrtc_args *n = a;
  test_bundle_without_nvrtc(n->cache, n->cli, n->templates);
}
static void child_devices(void *fake) { test_devices(fake); }
/* A disk cache (dir/shipped) that this NVRTC (13.0) fills with LongNet 2-branch's default
 * kernel, as on the machine a cache folder is copied from (a child: NVRTC is opened once a
 * process, and the children after this one go without it) */
static void child_warm_cache(void *dir) {
  da_backend got;
  long long hits, builds;
  char err[2048];
  const da_status st = bundle_plan(dir, "shipped", NULL, &got, &hits, &builds, err, sizeof err);
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && builds == 1, "LongNet 2-branch compiled into dir/shipped (%s: %s)",
           da_status_name(st), err);
}
typedef struct {
  const char *cache, *shim;
} old_nvrtc_args;
/* NVRTC 12.0 (tests/nvrtc_shim.c) and a 13.0 driver: the default is wgmma-ws (the TMA
 * kernel's maps need NVRTC 12.1 to compile); LongNet 5-branch's TMA kernel (4864 bytes of
 * parameters) named is refused by NVRTC's version where nothing holds it, and served where a
 * bundle does (it was refused by the lesser of the two versions, bundle or not) */
static void child_old_nvrtc(void *a) {
  const old_nvrtc_args *o = a;
  setenv("DILATTN_NVRTC_LIB", o->shim, 1);
  setenv("FAKE_NVRTC_VERSION", "12.0", 1);
  char manifest[700], err[2048];
  da_backend got;
  long long hits, builds;
  snprintf(manifest, sizeof manifest, "%s/bundle5/manifest.json", o->cache);
  char empty[700]; /* (a disk cache that holds no build of the TMA kernel by another NVRTC) */
  snprintf(empty, sizeof empty, "%s/old-nvrtc-empty", o->cache);
  setenv("DILATTN_CACHE_DIR", empty, 1);
  da_context *ctx;
  da_context_create(&ctx);
  int maj = 0, min = 0;
  TU_CHECK(da__nvrtc_version(ctx, &maj, &min) == DA_OK && maj == 12 && min == 0, "the shim's NVRTC: %d.%d (%s)", maj,
           min, da_context_last_error(ctx));
  da_status st;
  const da_spec s5 = longnet(5, 0);
  da_plan *p = plan_with(ctx, &s5, 0, 0, 0, &st);
  TU_CHECK(st == DA_OK && ends_with(da_plan_kernel_name(p), "_wgmmaw"), "NVRTC 12.0, no options: wgmma-ws (%s)",
           p ? da_plan_kernel_name(p) : da_context_last_error(ctx));
  da_plan_destroy(p);
  p = plan_with(ctx, &s5, 0, 0, 6, &st);
  TU_CHECK(st == DA_ERR_UNSUPPORTED && !p && strstr(da_context_last_error(ctx), "NVRTC before CUDA 12.1") &&
               strstr(da_context_last_error(ctx), "12.0"),
           "NVRTC 12.0, LongNet 5-branch's TMA kernel named, no bundle: refused by NVRTC's version (%s: %s)",
           da_status_name(st), da_context_last_error(ctx));
  da_context_destroy(ctx);
  st = bundle_plan_mma(o->cache, "old-nvrtc-bundle", manifest, 5, 6, &got, &hits, &builds, err, sizeof err);
  (void)got;
  TU_CHECK(st == DA_OK && hits >= 1 && builds == 0,
           "NVRTC 12.0, the TMA kernel named, a bundle holds it: served (%s, %lld bundle hits, %lld builds: %s)",
           da_status_name(st), hits, builds, err);
  /* JIT off, and the disk cache that NVRTC 13.0 filled: its build serves (the keys here
   * name 12.0); JIT on, a compile here (a compiler is here: the keys say what to build) */
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  st = bundle_plan_mma(o->cache, "shipped", NULL, 2, 6, &got, &hits, &builds, err, sizeof err);
  unsetenv("DILATTN_DISABLE_JIT");
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && last_disk_hits >= 1 && builds == 0,
           "NVRTC 12.0, JIT off, the disk cache's build by 13.0: served (%s, %lld disk hits, %lld builds: %s)",
           da_status_name(st), last_disk_hits, builds, err);
  st = bundle_plan_mma(o->cache, "shipped", NULL, 2, 6, &got, &hits, &builds, err, sizeof err);
  TU_CHECK(st == DA_OK && got == DA_BACKEND_CUDA && builds == 1,
           "NVRTC 12.0, JIT on, the disk cache's build by 13.0: compiled here all the same (%s, %lld disk hits, %lld "
           "builds: %s)",
           da_status_name(st), last_disk_hits, builds, err);
}

/* A host bundle's typed _plan with DA_BACKEND_AUTO on a machine with a GPU: a host plan, as
 * its _run takes host arrays (it was a JIT-compiled CUDA plan, handed them: an illegal
 * address on a GPU); DA_BACKEND_CUDA asked for by name stays a CUDA plan. A program built
 * against the typed header (cc), run with the fake driver. */
static void test_host_bundle_typed(const char *cli, const char *templates, const char *dir) {
  char b[700], *cmd = NULL, lib[800];
  snprintf(b, sizeof b, "%s/host-typed", dir);
  snprintf(lib, sizeof lib, "%s", cli);
  *strrchr(lib, '/') = '\0'; /* (libdilattn.so beside the CLI) */
  int rc = asprintf(&cmd,
                    "mkdir -p %s && cd %s && echo '{\"segment_lengths\":[32],\"dilation_rates\":[1],\"num_heads\":1,"
                    "\"head_dim\":8}' > cfg.json && '%s' gen cfg.json --compile --bundle hb -o . > /dev/null && "
                    "printf '%%s\\n' '#include <stdio.h>' '#include \"hb.h\"' 'int main(int c, char **v) {' "
                    "'  da_context *ctx; da_plan *p; (void)v; da_context_create(&ctx);' "
                    "'  if (hb_cfg_plan(ctx, c > 1 ? DA_BACKEND_CUDA : DA_BACKEND_AUTO, &p) != DA_OK) return 2;' "
                    "'  printf(\"%%d\\\\n\", (int)da_plan_backend(p)); return 0; }' > prog.c && "
                    "cc -o prog prog.c hb_bundle.c -I'%s/../include' -I. -L'%s' -Wl,-rpath,'%s' -ldilattn && "
                    "./prog > auto.out && ./prog cuda > cuda.out",
                    b, b, cli, templates, lib, lib) < 0 ? -1 : system(cmd);
  free(cmd);
  char path[900];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/auto.out", b);
  char *a = da__read_file(path, &len);
  snprintf(path, sizeof path, "%s/cuda.out", b);
  char *c = da__read_file(path, &len);
  TU_CHECK(rc == 0 && a && atoi(a) == DA_BACKEND_HOST && c && atoi(c) == DA_BACKEND_CUDA,
           "a host bundle's typed _plan: AUTO is the host backend (%s), CUDA by name a CUDA plan (%s) (rc %d)",
           a ? a : "-", c ? c : "-", rc);
  free(a), free(c);
}

/* Cubins of another arch of the device's major: a bundle built for sm_80 (and sm_90a,
 * which names an sm_90 device: its mma.sync kernel compiled as sm_90) serves an sm_86 or
 * sm_89 device (A10, L4, RTX 4090) with JIT off, nothing compiled (sm_80's SASS runs there;
 * it failed, and recompiled with JIT on); not an sm_75 device (another major). In a child:
 * FAKE_CUDA_CC is read as the driver starts. */
static void child_compatible_arch(void *a) {
  const no_nvrtc_args *na = a;
  char dir[700], *cmd = NULL;
  snprintf(dir, sizeof dir, "%s/bundle-sm80", na->cache);
  const da_spec s = longnet(2, 0);
  char *js = da_spec_to_json(&s);
  const int rc = asprintf(&cmd, "mkdir -p '%s' && echo '%s' > '%s/ln2.json' && '%s' gen --target cuda --arch sm_80,sm_90a "
                                "--compile --bundle c80 -o '%s' '%s/ln2.json' > /dev/null",
                          dir, js, dir, na->cli, dir, dir) < 0 ? -1 : system(cmd);
  free(cmd), free(js);
  char manifest[800];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
  size_t len = 0;
  char *m = da__read_file(manifest, &len);
  TU_CHECK(rc == 0 && m && strstr(m, "\"arch\": \"sm_80\"") && strstr(m, "\"arch\": \"sm_90\"") &&
               !strstr(m, "\"arch\": \"sm_90a\""),
           "gen --arch sm_80,sm_90a --bundle (mma.sync): cubins for sm_80 and sm_90 (rc %d)", rc);
  free(m);
  static const struct {
    const char *cc;
    int taken;
  } devs[] = {{"86", 1}, {"89", 1}, {"80", 1}, {"75", 0}};
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  const char *cc = getenv("FAKE_CUDA_CC");
  for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
    if (!cc || strcmp(cc, devs[i].cc)) continue;
    da_backend got;
    long long hits, builds;
    char err[2048], name[40];
    snprintf(name, sizeof name, "compat-%s", devs[i].cc);
    const da_status st = bundle_plan_mma(na->cache, name, manifest, 2, 1, &got, &hits, &builds, err, sizeof err);
    TU_CHECK(devs[i].taken ? st == DA_OK && got == DA_BACKEND_CUDA && hits == 1 && builds == 0
                           : st == DA_ERR_UNSUPPORTED && hits == 0,
             "an sm_%s device, JIT off, a bundle of sm_80 and sm_90: %s (%s, %lld bundle hits, %lld builds: %s)",
             devs[i].cc, devs[i].taken ? "served" : "not served", da_status_name(st), hits, builds, err);
  }
  unsetenv("DILATTN_DISABLE_JIT");
}

/* ---- explicit masks, DILATTN_CTA_TILES, DILATTN_CUDA_MMA=sync with a tuning database,
 * a preload cancelled during a compile ---- */

/* The explicit-mask tables (runtime/cuda_args.h masks) of the launches logged since the
 * last call, in order (the log is emptied): how many launches */
static int read_mask_tables(unsigned long long *out, int cap) {
  FILE *f = fopen(log_path, "r");
  int n = 0;
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    const char *m = strncmp(line, "launch ", 7) ? NULL : strstr(line, " masks ");
    unsigned long long v = ~0ull;
    if (m && n < cap) {
      if (sscanf(m, " masks %llx", &v) != 1) v = ~0ull;
      out[n++] = v;
    }
  }
  if (f) fclose(f);
  unlink(log_path);
  return n;
}

/* The device masks of a plan of s at table (the fake driver's memory is the host's): a
 * pointer a branch, then each branch's nb x nb bytes, the first right after the table, each
 * next one at the next multiple of 16 bytes past the one before (cuda_backend.c load_masks),
 * all inside the allocation; each equal to want[i]. 1 where they are. */
static int check_device_masks(unsigned long long table, const da_spec *s, uint8_t *const *want, const char *what) {
  if (!table || table == ~0ull) {
    TU_CHECK(0, "%s: the launches carry no mask table (%llx)", what, table);
    return 0;
  }
  const unsigned char *base = (const unsigned char *)(uintptr_t)table;
  const unsigned char *const *ptrs = (const unsigned char *const *)(const void *)base;
  size_t off = (size_t)s->num_branches * sizeof(void *);
  int ok = 1;
  for (int i = 0; i < s->num_branches; i++) {
    const int64_t nb = da_spec_explicit_blocks(s, i);
    const int at = ptrs[i] == base + off;
    const int same = at && !memcmp(ptrs[i], want[i], (size_t)(nb * nb));
    int first = -1;
    for (int64_t b = 0; at && !same && b < nb * nb && first < 0; b++)
      if (ptrs[i][b] != want[i][b]) first = (int)b;
    TU_CHECK(at && same,
             "%s: branch %d's mask (%lld x %lld blocks): table entry %p, want table + %zu (%p); %s (first difference at "
             "byte %d: %d, want %d)",
             what, i, (long long)nb, (long long)nb, (const void *)ptrs[i], off, (const void *)(base + off),
             !at ? "not there" : same ? "the caller's bytes" : "other bytes", first,
             first >= 0 ? ptrs[i][first] : -1, first >= 0 ? want[i][first] : -1);
    ok &= at && same;
    off += (size_t)(nb * nb + 15) & ~(size_t)15;
  }
  /* (cuMemAlloc is calloc here: the allocation holds the table and every mask) */
  TU_CHECK(malloc_usable_size((void *)(uintptr_t)table) >= off, "%s: the mask allocation holds %zu bytes, the layout %zu",
           what, malloc_usable_size((void *)(uintptr_t)table), off);
  return ok;
}

/* DA_LAYOUT_EXPLICIT on CUDA (cuda_backend.c load_masks): plans of one branch and of three
 * with different block counts (13: 169 bytes, 16-byte padding; 3, 5 and 8) are made and
 * run; every launch carries the plan's mask table, whose masks are the caller's bytes in
 * the layout above; the caller's masks overwritten (every block allowed) and then freed
 * after da_plan_create change nothing: not the device bytes, nor da_plan_density (the
 * plan copied them, dilattn.h); a second plan of the same shape with other masks (the
 * same kernel) has its own table and bytes, the first plan's untouched; a plan without a
 * mask launches with no table. The first mask starts right after the table: at 8 bytes
 * past a 16-byte boundary where the branches are odd in number (the kernels read the masks
 * a byte at a time). */
static void test_explicit_masks(da_context *ctx) {
  launch_t L[64];
  read_launches(L, 64);
  static const struct {
    int nb;
    int64_t w[3], r[3], block, blocks[3];
  } C[] = {{1, {200}, {1}, 16, {13}}, {3, {96, 160, 512}, {1, 1, 2}, 32, {3, 5, 8}}};
  const int64_t N = 1024;
  uint64_t rng = 0x5eed;
  for (size_t c = 0; c < sizeof C / sizeof *C; c++) {
    da_spec s = tu_spec(C[c].nb, C[c].w, C[c].r, 2, 2, 64, DA_DTYPE_FLOAT16);
    s.sparsity.layout = DA_LAYOUT_EXPLICIT, s.sparsity.block = C[c].block;
    uint8_t *user[3] = {NULL}, *orig[3] = {NULL}, *other[3] = {NULL};
    int blocks_ok = 1;
    for (int i = 0; i < C[c].nb; i++) {
      const int64_t nb = da_spec_explicit_blocks(&s, i);
      blocks_ok &= nb == C[c].blocks[i];
      user[i] = malloc((size_t)(nb * nb)), orig[i] = malloc((size_t)(nb * nb)), other[i] = malloc((size_t)(nb * nb));
      for (int64_t b = 0; b < nb * nb; b++) {
        const int diag = b / nb == b % nb;
        orig[i][b] = user[i][b] = (uint8_t)(diag || (tu_rand(&rng) & 1));
        other[i][b] = (uint8_t)(diag || !orig[i][b]); /* (off the diagonal, the complement) */
      }
      s.sparsity.explicit_masks[i] = user[i];
    }
    char what[96];
    snprintf(what, sizeof what, "explicit masks, %d branch%s", C[c].nb, C[c].nb > 1 ? "es" : "");
    TU_CHECK(blocks_ok, "%s: the block counts of the spec", what);
    da_status st;
    da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
    TU_CHECK(st == DA_OK && p && da_plan_backend(p) == DA_BACKEND_CUDA, "%s: a CUDA plan (%s: %s)", what,
             da_status_name(st), da_context_last_error(ctx));
    if (!p) {
      for (int i = 0; i < C[c].nb; i++) free(user[i]), free(orig[i]), free(other[i]);
      continue;
    }
    double d0 = -1, d1 = -2;
    da_plan_density(p, N, &d0);
    unsigned long long tables[64];
    read_mask_tables(tables, 64);
    /* the caller's masks overwritten (every block allowed): nothing of the plan changes */
    for (int i = 0; i < C[c].nb; i++) {
      const int64_t nb = da_spec_explicit_blocks(&s, i);
      memset(user[i], 1, (size_t)(nb * nb));
    }
    const da_status ds = da_plan_density(p, N, &d1);
    TU_CHECK(ds == DA_OK && d0 > 0 && d0 < 1 && d1 == d0,
             "%s: the plan's density %.6f, %.6f after the caller's masks were overwritten (want the same, below 1): %s",
             what, d0, d1, ds == DA_OK ? "" : da_context_last_error(ctx));
    unsigned long long table = 0;
    for (int pass = 0; pass < 2; pass++) { /* overwritten; then freed */
      if (pass == 1)
        for (int i = 0; i < C[c].nb; i++) free(user[i]), user[i] = NULL;
      run(p, &s, N, &st);
      const int n = read_mask_tables(tables, 64);
      int same = n > 0;
      for (int j = 1; j < n; j++) same &= tables[j] == tables[0];
      char w2[160];
      snprintf(w2, sizeof w2, "%s, the caller's masks %s after da_plan_create", what, pass ? "freed" : "overwritten");
      TU_CHECK(st == DA_OK && n > 0 && same, "%s: executed (%s: %s), %d launches, %s", w2, da_status_name(st),
               st ? da_context_last_error(ctx) : "", n, same ? "one mask table" : "not all with the same mask table");
      if (n > 0) check_device_masks(tables[0], &s, orig, w2);
      if (pass == 0) table = n > 0 ? tables[0] : 0;
      else TU_CHECK(n > 0 && tables[0] == table, "%s: the same table in both executions", w2);
    }
    /* a second plan of the same shape with other masks: its own */
    da_spec s2 = s;
    for (int i = 0; i < C[c].nb; i++) s2.sparsity.explicit_masks[i] = other[i];
    da_plan *p2 = plan_with(ctx, &s2, 0, 0, 0, &st);
    TU_CHECK(st == DA_OK && p2, "%s, other masks: a plan (%s)", what, da_context_last_error(ctx));
    if (p2) {
      run(p2, &s2, N, &st);
      const int n = read_mask_tables(tables, 64);
      snprintf(what + strlen(what), sizeof what - strlen(what), ", a second plan");
      TU_CHECK(st == DA_OK && n > 0 && tables[0] != table, "%s: executed with a table of its own (%s; %llx, the first "
               "plan's %llx)", what, st ? da_context_last_error(ctx) : "ok", n > 0 ? tables[0] : 0ull, table);
      if (n > 0) check_device_masks(tables[0], &s2, other, what);
      check_device_masks(table, &s, orig, "explicit masks, the first plan's after a second plan's");
      da_plan_destroy(p2);
    }
    da_plan_destroy(p);
    for (int i = 0; i < C[c].nb; i++) free(user[i]), free(orig[i]), free(other[i]);
  }
  /* no mask: no table */
  const da_spec s = longnet(2, 1);
  da_status st;
  da_plan *p = plan_with(ctx, &s, 0, 0, 0, &st);
  if (p) run(p, &s, 4096, &st);
  unsigned long long tables[64];
  const int n = read_mask_tables(tables, 64);
  TU_CHECK(p && st == DA_OK && n == 1 && tables[0] == 0, "LongNet 2-branch (no sparsity): %d launches, mask table %llx "
           "(want 1, none)", n, n ? tables[0] : 0ull);
  da_plan_destroy(p);
}

/* A CUDA plan of s (no options) made with stderr in a file: its text into err */
static da_plan *plan_stderr(da_context *ctx, const da_spec *s, da_status *st, char *err, size_t cap) {
  char path[300];
  snprintf(path, sizeof path, "%s.stderr", log_path);
  fflush(stderr);
  const int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) dup2(fd, 2), close(fd);
  da_plan *p = plan_with(ctx, s, 0, 0, 0, st);
  fflush(stderr);
  if (saved >= 0) dup2(saved, 2), close(saved);
  size_t len = 0;
  char *text = da__read_file(path, &len);
  snprintf(err, cap, "%s", text ? text : "");
  free(text);
  unlink(path);
  return p;
}

/* DILATTN_CTA_TILES at plan creation: a value that is none of 1, 2, pairs and persistent
 * (wrong case, a number, trailing space) warns, naming it, and the plan launches what the
 * default launches (LongNet 5-branch causal at N = 256K: 4 persistent grids, the fifth
 * launch in pairs); empty is the default without a warning; each valid value, without a
 * warning, launches otherwise: 1 and 2 tiles a CTA everywhere, pairs no persistent grid,
 * persistent all five. */
static void test_cta_tiles_env(da_context *ctx) {
  const da_spec s = longnet(5, 1);
  const int64_t N = 262144;
  static const struct {
    const char *env;
    int junk, cta_tiles, waves, persistent;
  } V[] = {{NULL, 0, 0, DA_CUDA_PERSIST_WAVES, 4},  {"", 0, 0, DA_CUDA_PERSIST_WAVES, 4},
           {"bogus", 1, 0, DA_CUDA_PERSIST_WAVES, 4}, {"PAIRS", 1, 0, DA_CUDA_PERSIST_WAVES, 4},
           {"3", 1, 0, DA_CUDA_PERSIST_WAVES, 4},     {"1 ", 1, 0, DA_CUDA_PERSIST_WAVES, 4},
           {"1", 0, 1, 0, 0},                         {"2", 0, 2, 0, 0},
           {"pairs", 0, 0, 0, 0},                     {"persistent", 0, 0, 1, 5}};
  const char *lvl = getenv("DILATTN_LOG_LEVEL");
  char saved_lvl[32];
  snprintf(saved_lvl, sizeof saved_lvl, "%s", lvl ? lvl : "");
  setenv("DILATTN_LOG_LEVEL", "warn", 1);
  launch_t L[64];
  read_launches(L, 64);
  unsigned long long dflt_ctas = 0;
  for (size_t c = 0; c < sizeof V / sizeof *V; c++) {
    char what[64], err[4096];
    snprintf(what, sizeof what, "DILATTN_CTA_TILES=%s%s%s", V[c].env ? "'" : "(unset)", V[c].env ? V[c].env : "",
             V[c].env ? "'" : "");
    if (V[c].env) setenv("DILATTN_CTA_TILES", V[c].env, 1);
    da_status st;
    da_plan *p = plan_stderr(ctx, &s, &st, err, sizeof err);
    unsetenv("DILATTN_CTA_TILES");
    char want[64];
    snprintf(want, sizeof want, "DILATTN_CTA_TILES=%s: not 1, 2, pairs or persistent", V[c].env ? V[c].env : "");
    const char *warned = strstr(err, want);
    TU_CHECK(st == DA_OK && p && (V[c].junk ? warned && strstr(warned, "the runtime's choice") && strstr(err, "warning")
                                            : !strstr(err, "DILATTN_CTA_TILES")),
             "%s: plan %s, %s (stderr: %s)", what, da_status_name(st), V[c].junk ? "a warning naming it" : "no warning",
             err);
    if (!p) continue;
    da_plan_options o;
    da_plan_get_options(p, &o);
    run(p, &s, N, &st);
    const int n = read_launches(L, 64);
    int pers = 0;
    unsigned long long ctas = 0;
    for (int i = 0; i < n; i++) pers += L[i].ctr == 0, ctas += (unsigned long long)L[i].g[0] * L[i].g[1] * L[i].g[2];
    if (!V[c].env) dflt_ctas = ctas;
    const int dflt = V[c].cta_tiles == 0 && V[c].waves == DA_CUDA_PERSIST_WAVES;
    TU_CHECK(st == DA_OK && n == 5 && pers == V[c].persistent && (dflt ? ctas == dflt_ctas : ctas != dflt_ctas),
             "%s: 5 launches (%d), %d persistent (want %d), %llu CTAs in all (the default's %llu: want %s): %s", what, n,
             pers, V[c].persistent, ctas, dflt_ctas, dflt ? "the same" : "another count",
             st ? da_context_last_error(ctx) : "");
    if (n == 5) check_grids_pw(L, &s, N, o.tile_q, V[c].cta_tiles, V[c].waves, what);
    da_plan_destroy(p);
  }
  if (saved_lvl[0]) setenv("DILATTN_LOG_LEVEL", saved_lvl, 1);
  else unsetenv("DILATTN_LOG_LEVEL");
}


/* DILATTN_CUDA_MMA=sync (README: mma.sync, tuning records for wgmma skipped): a record of
 * wgmma-ws or wgmma-ws-tma gives the mma.sync plan that no record gives (the planner's
 * tiles), where without the variable the record is taken; a record of mma.sync with other
 * tiles than those is taken under sync. */
static void test_sync_skips_wgmma_records(const char *cache) {
  const da_spec s = longnet(2, 0);
  char db[600], name[512];
  snprintf(db, sizeof db, "%s/sync-tuning.jsonl", cache);
  da_plan_options none, ws, tma, got, base;
  memset(&none, 0, sizeof none);
  ws = tma = none;
  ws.cuda_mma = 4, tma.cuda_mma = 6;
  /* the mma.sync plan under sync with a record of another spec's (none for this one) */
  const da_spec other = longnet(1, 0);
  da_status st = tuned_with_env(&other, &s, ws, db, "sync", &base, name, sizeof name);
  TU_CHECK(st == DA_OK && base.cuda_mma == 1 && !strstr(name, "_wgmma"),
           "DILATTN_CUDA_MMA=sync, no record for the spec: mma.sync (%s, cuda_mma %d)", name, base.cuda_mma);
  st = tuned_with_env(&s, &s, ws, db, NULL, &got, name, sizeof name);
  TU_CHECK(st == DA_OK && got.cuda_mma == 4 && ends_with(name, "_wgmmaw"),
           "a wgmma-ws record, DILATTN_CUDA_MMA unset: taken (%s, cuda_mma %d)", name, got.cuda_mma);
  const da_plan_options recs[2] = {ws, tma};
  for (int i = 0; i < 2; i++) {
    st = tuned_with_env(&s, &s, recs[i], db, "sync", &got, name, sizeof name);
    TU_CHECK(st == DA_OK && got.cuda_mma == 1 && !strstr(name, "_wgmma") && got.tile_q == base.tile_q &&
                 got.tile_k == base.tile_k,
             "a %s record, DILATTN_CUDA_MMA=sync: skipped, the planner's mma.sync (%s, cuda_mma %d, tiles %d x %d, "
             "want %d x %d)", i ? "wgmma-ws-tma" : "wgmma-ws", name, got.cuda_mma, got.tile_q, got.tile_k, base.tile_q,
             base.tile_k);
  }
  /* an mma.sync record (tiles the planner does not pick): not skipped */
  da_plan_options sync_rec = none;
  sync_rec.cuda_mma = 1, sync_rec.tile_q = base.tile_q == 64 ? 128 : 64, sync_rec.tile_k = 64;
  st = tuned_with_env(&s, &s, sync_rec, db, "sync", &got, name, sizeof name);
  TU_CHECK(st == DA_OK && got.cuda_mma == 1 && got.tile_q == sync_rec.tile_q && got.tile_k == sync_rec.tile_k &&
               (got.tile_q != base.tile_q || got.tile_k != base.tile_k),
           "an mma.sync record of tiles %d x %d, DILATTN_CUDA_MMA=sync: taken (%s, cuda_mma %d, tiles %d x %d; the "
           "planner's %d x %d)", sync_rec.tile_q, sync_rec.tile_k, name, got.cuda_mma, got.tile_q, got.tile_k,
           base.tile_q, base.tile_k);
}

/* da_plan_preload's progress callback cancels while another spec's NVRTC compile is in
 * flight (dilattn.h: "NVRTC compiles in flight stop"): two threads, spec 0 a kernel no
 * cache holds, spec 1 one the context has planned before; at spec 1's progress call the
 * callback waits for spec 0's kernel to miss the kernel cache (its compile starting), gives
 * NVRTC 0.3 s into it (the compile takes 1.4 s here) and cancels. The preload returns DA_ERR_CANCELLED, spec 0 without
 * a plan and spec 1 with one, well before spec 0's compile could have finished (a plan of it
 * made afterwards, which compiles it: nothing of the cancelled compile was kept) */
typedef struct {
  da_context *ctx;
  long long misses0;
  int calls, seen, cancel_index;
  double cancel_ms;
} cancel_probe;

static int cancel_in_compile(void *user, int done, int total, int index, da_status st) {
  cancel_probe *c = user;
  (void)done, (void)total, (void)st;
  c->calls++;
  if (index != 1) return 0;
  da__kernel_cache *kc = da__context_kernels(c->ctx);
  for (int i = 0; i < 3000 && __atomic_load_n(&kc->misses, __ATOMIC_RELAXED) == c->misses0; i++) usleep(10000);
  c->seen = __atomic_load_n(&kc->misses, __ATOMIC_RELAXED) != c->misses0;
  if (c->seen) usleep(300000); /* (into nvrtcCompileProgram: it takes over a second) */
  c->cancel_index = index;
  c->cancel_ms = da__now_ms();
  return 1;
}

static void test_preload_cancel(void) {
  da_context *ctx;
  da_context_create(&ctx);
  /* spec 0: a shape no other check plans (its kernel in no cache); spec 1: planned now */
  static const int64_t w[5] = {1024, 2048, 4096, 8192, 16384}, r[5] = {1, 2, 4, 8, 16};
  const da_spec specs[2] = {tu_spec(5, w, r, 6, 6, 128, DA_DTYPE_BFLOAT16), longnet(2, 1)};
  da_status st;
  da_plan *warm = plan_with(ctx, &specs[1], 0, 0, 0, &st);
  TU_CHECK(st == DA_OK, "preload cancel: the warm spec's plan (%s)", da_context_last_error(ctx));
  da_plan_destroy(warm);
  cancel_probe c = {ctx, da__context_kernels(ctx)->misses, 0, 0, -1, 0};
  da_plan *plans[2] = {NULL, NULL};
  st = da_plan_preload(ctx, specs, 2, DA_BACKEND_CUDA, 2, cancel_in_compile, &c, plans);
  const double back = da__now_ms() - c.cancel_ms;
  TU_CHECK(st == DA_ERR_CANCELLED && c.seen && c.cancel_index == 1 && c.calls == 2 && !plans[0] && plans[1] &&
               strstr(da_context_last_error(ctx), "1 of 2"),
           "preload cancelled during spec 0's compile: %s (want DA_ERR_CANCELLED), compile %s, %d progress calls (want "
           "2), plans %s / %s (want none / one): %s",
           da_status_name(st), c.seen ? "seen" : "never seen to start", c.calls, plans[0] ? "made" : "none",
           plans[1] ? "made" : "none", da_context_last_error(ctx));
  da_plan_destroy(plans[0]), da_plan_destroy(plans[1]);
  /* the compile, uncancelled: the plan made, the kernel built here */
  const long long builds0 = da__context_kernels(ctx)->builds;
  const double t0 = da__now_ms();
  da_plan *p = plan_with(ctx, &specs[0], 0, 0, 0, &st);
  const double full = da__now_ms() - t0;
  TU_CHECK(st == DA_OK && p && da__context_kernels(ctx)->builds == builds0 + 1,
           "after the cancelled preload, spec 0's plan: %s, %lld kernels built (want 1): %s", da_status_name(st),
           da__context_kernels(ctx)->builds - builds0, st ? da_context_last_error(ctx) : "");
  TU_CHECK(back < full / 2, "preload cancelled: returned %.0f ms after the cancel; spec 0's compile takes %.0f ms", back,
           full);
  da_plan_destroy(p);
  da_context_destroy(ctx);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBFAKE_CUDA.so TEMPLATE_DIR [DILATTN_CLI [LIBNVRTC_SHIM.so]]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc && i <= 4; i++) { /* absolute: the CLI's checks run it from another folder */
    char *abs_path = realpath(argv[i], NULL);
    if (abs_path) argv[i] = abs_path; /* (kept for the process) */
  }
  char cache[] = "/tmp/dilattn-fake-XXXXXX";
  if (!mkdtemp(cache)) return 2;
  snprintf(log_path, sizeof log_path, "%s/launches.log", cache);
  int child_failed = 0;
  setenv("DILATTN_CUDA_LIB", argv[1], 1);
  setenv("DILATTN_CACHE_DIR", cache, 1);
  setenv("FAKE_CUDA_LOG", log_path, 1);
  setenv("DILATTN_TUNING", "0", 1);
  unsetenv("DILATTN_CUDA_MMA"), unsetenv("DILATTN_BACKEND"), unsetenv("DILATTN_PDL");
  unsetenv("DILATTN_WORKSPACE_LIMIT"), unsetenv("FAKE_CUDA_VERSION");
  /* the driver versions, each in a child forked before this process opens the driver (and
   * before any check here: a child inherits the counts), one after the other */
  for (int version = 12000; version <= 12010; version += 10) {
    driver_args da = {version, cache};
    if (!run_in_child(child_driver_version, &da)) child_failed = version;
  }
  TU_CHECK(!child_failed, "the checks under driver %d (a child process) failed", child_failed);
  /* a CUDA bundle without NVRTC, likewise in a child */
  TU_CHECK(argc > 3 && make_cuda_bundle(argv[3], cache, "auto", "bundle", 2) &&
               make_cuda_bundle(argv[3], cache, "wgmma-ws", "bundle-ws", 2) &&
               make_cuda_bundle(argv[3], cache, "auto", "bundle5", 5),
           "CUDA bundles from %s", argc > 3 ? argv[3] : "(no CLI)");
  TU_CHECK(run_in_child(child_warm_cache, cache), "a disk cache filled by NVRTC 13.0 (a child process) failed");
  no_nvrtc_args na = {cache, argc > 3 ? argv[3] : "", argv[2]};
  TU_CHECK(run_in_child(child_without_nvrtc, &na), "the checks without NVRTC (a child process) failed");
  for (int i = 0; i < 4 && argc > 3; i++) { /* an sm_86, sm_89, sm_80, sm_75 device, each a child */
    static const char *const ccs[] = {"86", "89", "80", "75"};
    setenv("FAKE_CUDA_CC", ccs[i], 1);
    TU_CHECK(run_in_child(child_compatible_arch, &na), "the checks on an sm_%s device (a child process) failed", ccs[i]);
    unsetenv("FAKE_CUDA_CC");
  }
  if (argc > 4) { /* an NVRTC that says 12.0, likewise */
    old_nvrtc_args oa = {cache, argv[4]};
    TU_CHECK(run_in_child(child_old_nvrtc, &oa), "the checks under NVRTC 12.0 (a child process) failed");
  }
  /* two devices, likewise in a child */
  TU_CHECK(run_in_child(child_devices, argv[1]), "the checks on two devices (a child process) failed");
  { /* likewise, both forked before either's result is counted here: a worker thread of a
     * device-1 context; a host-only context */
    pid_t child[2];
    for (int which = 0; which < 2; which++) {
      fflush(NULL);
      if ((child[which] = fork()) == 0) {
        tu_passed = tu_failed = 0; /* its own checks alone: not the parent's counts so far */
        if (which == 0) test_devices_worker(argv[1], cache);
        else test_host_only(argv[1]);
        const int rc = tu_report();
        fflush(NULL);
        _exit(rc);
      }
    }
    for (int which = 0; which < 2; which++) {
      int wst = 0;
      TU_CHECK(child[which] > 0 && waitpid(child[which], &wst, 0) == child[which] && WIFEXITED(wst) &&
                   WEXITSTATUS(wst) == 0,
               "the checks of %s (a child process) failed", which ? "a host-only context" : "a worker thread on device 1");
    }
  }
  da_context *ctx;
  TU_CHECK(da_context_create(&ctx) == DA_OK, "context");
  da_plan *probe = NULL;
  const da_spec s = longnet(1, 0);
  da_status st = da_plan_create(ctx, &s, DA_BACKEND_CUDA, &probe);
  if (st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(ctx), "NVRTC")) {
    printf("SKIP: no NVRTC (%s)\n", da_context_last_error(ctx));
    da_context_destroy(ctx);
    return 0;
  }
  TU_CHECK(st == DA_OK, "a CUDA plan on the fake device: %s", da_context_last_error(ctx));
  da_plan_destroy(probe);
  test_instruction(ctx);
  test_launches(ctx);
  test_block_limit(ctx);
  test_tma(ctx);
  test_tma_memo(ctx);
  test_callers_context(ctx, argv[1]);
  test_pool(argv[1]);
  test_workspace(ctx);
  test_workspace_ctrs(ctx, argv[1]);
  test_capture(ctx, argv[1]);
  test_explicit_masks(ctx);
  test_cta_tiles_env(ctx);
  da_context_destroy(ctx);
  test_bundle_other_nvrtc(cache);
  if (argc > 3) test_host_bundle_typed(argv[3], argv[2], cache);
  test_fallbacks(argv[2], cache);
  test_tuned(cache);
  test_sync_skips_wgmma_records(cache);
  test_preload_cancel();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cache);
  return tu_report();
}
