/* bench_plan.c - how fast a plan starts (issue 4): render time; cold plan creation
 * (render + host compile, and render + NVRTC compile where NVRTC exists: mma.sync for
 * sm_90 and sm_80, the warp-specialized wgmma kernel for sm_90a); warm
 * plan from the disk cache in a new process; warm plan from memory. Each figure is a
 * median with min and max over repetitions, validated first (the plan runs and its
 * output is finite). Prints one JSON object per measurement and a summary against the
 * targets (render < 5 ms, NVRTC cold < 0.5 s per kernel, disk < 5 ms, memory < 2 us).
 * Run: build/bench/bench_plan [--out FILE.json] [--base-templates DIR]   (uses a fresh
 * DILATTN_CACHE_DIR). --base-templates: the renders are timed beside the same renders
 * from a baseline's templates and generator modules (DIR as DILATTN_TEMPLATE_DIR takes
 * them: DIR/<target>/..., DIR/lua/<module>.lua), interleaved in this process, each reported with
 * its ratio to the baseline:
 *   mkdir B && git archive REV templates gen/lua | tar -x -C B && mv B/gen/lua B/lua
 *   && cp -r B/templates/. B/ */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "gen/render.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc.h"

static FILE *out_json;

static void report(const char *what, const char *unit, stat_t s, double target, const char *note) {
  char line[600];
  snprintf(line, sizeof line,
           "{\"measure\":\"%s\",\"unit\":\"%s\",\"median\":%.4g,\"min\":%.4g,\"max\":%.4g,\"reps\":%d,"
           "\"target\":%.4g,\"meets_target\":%s,\"note\":\"%s\"}",
           what, unit, s.median, s.min, s.max, s.n, target, s.median < target ? "true" : "false", note);
  puts(line);
  if (out_json) fprintf(out_json, "%s%s\n", ftell(out_json) > 2 ? "," : "", line);
}

static da_spec longnet(double scale) {
  da_spec s;
  da_spec_init(&s);
  int64_t w[5] = {2048, 4096, 8192, 16384, 32768}, r[5] = {1, 2, 4, 6, 12};
  s.num_branches = 5;
  memcpy(s.segment_lengths, w, sizeof w);
  memcpy(s.dilation_rates, r, sizeof r);
  s.num_heads = 16;
  s.num_kv_heads = 16;
  s.head_dim = 64;
  s.dtype = DA_DTYPE_FLOAT16;
  s.causal = 1;
  if (scale > 0) {
    s.has_scale = 1;
    s.scale = scale;
  }
  return s;
}

/* Plan runs and gives finite output on a short input. */
static int validate(da_context *ctx, da_plan *p, const da_spec *s) {
  int64_t N = 256;
  size_t n = (size_t)(N * s->num_heads * s->head_dim);
  uint16_t *q = calloc(n, 2), *o = calloc(n, 2);
  for (size_t i = 0; i < n; i++) q[i] = (uint16_t)(0x3000 + i % 512);
  da_args a;
  da_args_init(&a, s, 1, N, q, q, q, o, NULL);
  int ok = da_plan_execute(p, &a) == DA_OK;
  for (size_t i = 0; ok && i < n; i++) ok = (o[i] & 0x7c00) != 0x7c00; /* no inf/nan */
  free(q);
  free(o);
  (void)ctx;
  return ok;
}

int main(int argc, char **argv) {
  const char *out_path = NULL, *base = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!strcmp(argv[i], "--base-templates") && i + 1 < argc) base = argv[++i];
    else {
      fprintf(stderr, "usage: bench_plan [--out FILE.json] [--base-templates DIR]\n");
      return 2;
    }
  }
  const char *own_dir = getenv("DILATTN_TEMPLATE_DIR"); /* the templates timed: these, or the embedded ones */
  if (own_dir && *own_dir)
    fprintf(stderr, "bench_plan: DILATTN_TEMPLATE_DIR is set: plans skip the memo (templates on disk may change), "
                    "so warm_plan_memory times a render, not a memo hit\n");
  char dir[] = "/tmp/dilattn-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("DILATTN_CACHE_DIR", dir, 1);
  if (out_path) {
    out_json = fopen(out_path, "w");
    if (out_json) fprintf(out_json, "[\n");
  }
  da_context *ctx;
  da_context_create(&ctx);
  double v[20000];

  /* render; with a baseline, each rep renders from both, alternately */
  for (int tgt = 0; tgt < 2; tgt++) {
    da_spec s = longnet(0);
    double vb[30];
    for (int i = 0; i < 30; i++)
      for (int side = 0; side < (base ? 2 : 1); side++) {
        if (side) setenv("DILATTN_TEMPLATE_DIR", base, 1);
        else if (own_dir) setenv("DILATTN_TEMPLATE_DIR", own_dir, 1);
        else unsetenv("DILATTN_TEMPLATE_DIR");
        da__rendered r;
        double t0 = now_us();
        if (da__render_ex(ctx, &s, tgt ? DA_TARGET_CUDA : DA_TARGET_HOST, NULL, &r) != DA_OK) {
          fprintf(stderr, "render%s: %s\n", side ? " (baseline)" : "", da_context_last_error(ctx));
          return 1;
        }
        (side ? vb : v)[i] = (now_us() - t0) / 1e3;
        da__rendered_free(&r);
      }
    const char *name = tgt ? "render_cuda" : "render_host";
    const stat_t own = stats(v, 30);
    if (!base) {
      report(name, "ms", own, 5, "LongNet 5 branches, D=64, fp16, causal");
      continue;
    }
    const stat_t b = stats(vb, 30);
    char note[300], bname[40];
    snprintf(note, sizeof note, "LongNet 5 branches, D=64, fp16, causal; %.2fx the baseline's %.3g ms (interleaved)",
             b.median / own.median, b.median);
    report(name, "ms", own, 5, note);
    snprintf(bname, sizeof bname, "%s_baseline", name);
    report(bname, "ms", b, 5, "the same renders from --base-templates");
  }
  if (own_dir) setenv("DILATTN_TEMPLATE_DIR", own_dir, 1);
  else unsetenv("DILATTN_TEMPLATE_DIR");

  /* cold host plan: distinct specs, fresh cache */
  for (int i = 0; i < 6; i++) {
    da_spec s = longnet(0.1 + 0.01 * i);
    da_plan *p = NULL;
    double t0 = now_us();
    if (da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) != DA_OK) return 1;
    v[i] = (now_us() - t0) / 1e3;
    if (!validate(ctx, p, &s)) return 2;
    da_plan_destroy(p);
  }
  report("cold_plan_host", "ms", stats(v, 6), 1e9, "render + cc -O2 + disk store; no target set");

  /* cold NVRTC per variant: mma.sync for sm_80 and sm_90, and the kernel an sm_90 device
   * takes by default (warp-specialized wgmma with K and V by TMA, sm_90a; without TMA
   * under a sparse layout or a driver before CUDA 12.1) */
  int maj, min;
  if (da__nvrtc_version(ctx, &maj, &min) == DA_OK) {
    static const struct {
      const char *measure, *arch, *note;
      int mma;
    } variants[] = {
        {"cold_plan_nvrtc_sm90", "sm_90", "render + NVRTC to cubin for sm_90, mma.sync (module load excluded)", 0},
        {"cold_plan_nvrtc_sm80", "sm_80", "render + NVRTC to cubin for sm_80, mma.sync (module load excluded)", 0},
        {"cold_plan_nvrtc_sm90a_ws", "sm_90a",
         "render + NVRTC to cubin for sm_90a, warp-specialized wgmma (module load excluded)", 4},
        {"cold_plan_nvrtc_sm90a_tma", "sm_90a",
         "render + NVRTC to cubin for sm_90a, warp-specialized wgmma with TMA: an sm_90 device's default (module "
         "load excluded)",
         6},
    };
    for (int k = 0; k < 4; k++) {
      for (int i = 0; i < 5; i++) {
        da_spec s = longnet(0.2 + 0.01 * i + 0.1 * k);
        da_plan_options o = {0};
        o.cuda_mma = variants[k].mma;
        da__rendered r;
        double t0 = now_us();
        if (da__render_ex(ctx, &s, DA_TARGET_CUDA, &o, &r) != DA_OK) return 1;
        da__nvrtc_result res;
        if (da__nvrtc_compile(ctx, r.source, "bench.cu", variants[k].arch, NULL, 0, &res) != DA_OK) return 3;
        v[i] = (now_us() - t0) / 1e3;
        da__nvrtc_result_free(&res);
        da__rendered_free(&r);
      }
      report(variants[k].measure, "ms", stats(v, 5), 500, variants[k].note);
    }
  }

  /* warm from disk in a new process: each child creates a context and the plan */
  for (int i = 0; i < 10; i++) {
    int fd[2];
    if (pipe(fd)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      double t0 = now_us();
      da_context *c;
      da_context_create(&c);
      da_spec s = longnet(0.1);
      da_plan *p = NULL;
      int ok = da_plan_create(c, &s, DA_BACKEND_HOST, &p) == DA_OK;
      double ms = (now_us() - t0) / 1e3;
      ok = ok && validate(c, p, &s) && da__context_kernels(c)->builds == 0;
      if (!ok) ms = -1;
      if (write(fd[1], &ms, sizeof ms) != sizeof ms) _exit(1);
      _exit(0);
    }
    close(fd[1]);
    double ms = -1;
    if (read(fd[0], &ms, sizeof ms) != sizeof ms) ms = -1;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    if (ms < 0) return 4;
    v[i] = ms;
  }
  report("warm_plan_disk_new_process", "ms", stats(v, 10), 5, "context create + plan from the disk cache (dlopen included)");

  /* warm from memory */
  {
    da_spec s = longnet(0.1);
    da_plan *p = NULL;
    da_plan_create(ctx, &s, DA_BACKEND_HOST, &p);
    da_plan_destroy(p);
    for (int i = 0; i < 20000; i++) {
      double t0 = now_us();
      da_plan_create(ctx, &s, DA_BACKEND_HOST, &p);
      v[i] = now_us() - t0;
      da_plan_destroy(p);
    }
    report("warm_plan_memory", "us", stats(v, 20000), 2, "da_plan_create on a spec the context has seen");
  }
  da_context_destroy(ctx);
  if (out_json) {
    fprintf(out_json, "]\n");
    fclose(out_json);
  }
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : 0;
}
