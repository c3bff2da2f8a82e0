/* emu_plan.c - see emu_plan.h. */
#include "emu_plan.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_runtime.h"
#include "runtime/cuda_backend.h"

static char include_dir[1024], work_dir[256];

int da_emu_plan_init(const char *inc) {
  snprintf(include_dir, sizeof include_dir, "%s", inc);
  snprintf(work_dir, sizeof work_dir, "%s/dilattn-emu-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(work_dir)) {
    perror("mkdtemp");
    return -1;
  }
  return 0;
}

void da_emu_plan_done(int remove) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work_dir);
  if (remove && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work_dir);
  if (!remove) fprintf(stderr, "emulated kernels kept in %s\n", work_dir);
}

static int launches, tma_off, emu_sms = 1, emu_persist, persistent_launches;

void da_emu_plan_set_tma(int on) { tma_off = !on; }
void da_emu_plan_set_sms(int sms) { emu_sms = sms; }
void da_emu_plan_set_persist(int waves) { emu_persist = waves; }
int da_emu_plan_persistent_launches(void) { return persistent_launches; }

int da_emu_plan_launches(void) { return launches; }

/* (a persistent launch's counter: DA_EMU_CTRS a sequence at most) */
#define DA_EMU_CTRS 64
typedef struct {
  const da_context *ctx;
  void *fn[DA_CUDA_K_COUNT];
  unsigned long long seed;
  unsigned *ctrs; /* zeroed, DA_EMU_CTRS */
  int used;
} emu_launch_ctx;

/* emulated kernels take their parameter by reference (kernel.cu.tpl DA_KPARAM): the
 * arguments, or a wgmma-ws-tma kernel's arguments and tensor maps, whose size only the
 * plan knows */
static void invoke(void *kernel, const void *args) { ((void (*)(const void *))kernel)(args); }

static da_status emu_launch(void *user, int which, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                            unsigned smem, da__cuda_args *a, int persistent) {
  emu_launch_ctx *L = user;
  char err[2048];
  launches++;
  if (persistent && L->used >= DA_EMU_CTRS) return da__set_error(L->ctx, DA_ERR_INTERNAL, "emulator: counters used up");
  a->ctr = persistent ? L->ctrs + L->used++ : NULL;
  persistent_launches += persistent;
  if (da_emu_launch(invoke, L->fn[which], a, gx, gy, gz, threads, smem, L->seed++, err, sizeof err))
    return da__set_error(L->ctx, DA_ERR_DEVICE, "emulated launch (%u,%u,%u)x%u: %s", gx, gy, gz, threads, err);
  return DA_OK;
}

da_status da_emu_execute(da_context *ctx, const da_spec *s, const da__render_opts *opts, const da_args *args,
                         size_t q_bytes, size_t kv_bytes, size_t out_bytes, size_t lse_bytes) {
  da__rendered r;
  DA_TRY(da__render_ex(ctx, s, DA_TARGET_CUDA, opts, &r));
  char so[512], err[8192];
  da_status st = DA_OK;
  void *lib = NULL, *ws = NULL;
  const unsigned char *mask_table[DA_MAX_BRANCHES];
  /* a module compiled already in this work folder (the file is named by its cache key, a
   * hash of the source; a suite renders some specs more than once, a fifth of the wgmma-ws
   * part's compiles; the compiler leaves no output where it fails) */
  snprintf(so, sizeof so, "%s/%s.so", work_dir, r.key);
  if (access(so, R_OK) != 0 && da_emu_compile(r.source, work_dir, r.key, include_dir, so, sizeof so, err, sizeof err)) {
    st = da__set_error(ctx, DA_ERR_COMPILE, "%s: %s", r.kernel_name, err);
    goto out;
  }
  lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    st = da__set_error(ctx, DA_ERR_COMPILE, "dlopen %s: %s", so, dlerror());
    goto out;
  }
  unsigned ctrs[DA_EMU_CTRS] = {0};
  emu_launch_ctx L = {ctx, {NULL}, 0x5eedull ^ (unsigned long long)args->seq_len, ctrs, 0};
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
  da__cuda_args a;
  da__cuda_args_fill(&a, args);
  da_emu_reset_buffers();
  da_emu_register_buffer(args->q, q_bytes, 0);
  da_emu_register_buffer(args->k, kv_bytes, 0);
  da_emu_register_buffer(args->v, kv_bytes, 0);
  da_emu_register_buffer(args->out, out_bytes, 1);
  if (args->lse) da_emu_register_buffer(args->lse, lse_bytes, 1);
  if (s->sparsity.layout == DA_LAYOUT_EXPLICIT) {
    for (int b = 0; b < s->num_branches; b++) mask_table[b] = s->sparsity.explicit_masks[b];
    a.masks = mask_table;
  }
  /* args->workspace_bytes: a budget (0: none), so the launches run over the tokens in the
   * runs da__cuda_plan_execute would take with that much */
  const int64_t run = da__cuda_ws_tokens(&r, s->num_heads, args->batch, args->seq_len,
                                         args->workspace_bytes ? args->workspace_bytes : SIZE_MAX);
  if (!run) {
    st = da__set_error(ctx, DA_ERR_INVALID_ARGUMENT, "workspace: %zu bytes hold no run of %lld tokens",
                       args->workspace_bytes, (long long)da__cuda_ws_min_tokens(&r, args->seq_len));
    goto out;
  }
  a.ws_len = run;
  size_t wsb = da__cuda_workspace_bytes(&r, s->num_heads, args->batch, run);
  if (wsb) {
    ws = malloc(wsb);
    if (ws) memset(ws, 0xff, wsb); /* NaN: a read before the first write shows */
    a.ws = ws;
    da_emu_register_buffer(ws, wsb, 1);
  }
  da_emu_register_buffer(ctrs, sizeof ctrs, 1);
  st = da__cuda_launch_sequence(ctx, &r, s->num_heads, s->head_dim, emu_sms, emu_persist, &a, emu_launch, &L,
                                tma_off ? NULL : da_emu_tensor_map_encode, NULL);
out:
  free(ws);
  if (lib) dlclose(lib);
  da__rendered_free(&r);
  return st;
}

