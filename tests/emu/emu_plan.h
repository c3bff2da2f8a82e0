/* emu_plan.h - the CUDA backend's execution path with the emulator as the device: a
 * spec rendered for the CUDA target, compiled by g++ for tests/emu, launched in the
 * order da__cuda_launch_sequence gives, over host memory. Shared by test_cuda_emu and
 * bench/bench_emu_work. */
#ifndef DA_EMU_PLAN_H
#define DA_EMU_PLAN_H

#include <stddef.h>

#include "gen/render.h"

/* include_dir holds da_emu.h; a private work folder is made under $TMPDIR. */
int da_emu_plan_init(const char *include_dir);
/* Remove the work folder (or keep it and say where, for a failing run). */
void da_emu_plan_done(int remove);
int da_emu_plan_launches(void);
/* Whether the launches get the emulator's tensor-map encoder (default 1); 0: as under a
 * driver without one, wgmma-ws-tma kernels copy without TMA (produce_tma's fallback). */
void da_emu_plan_set_tma(int on);
/* The SM count the launches are sized for (da__cuda_launch_sequence's sms; default 1: a
 * plan of several tiles a CTA runs them wherever a launch has two blocks or more). */
void da_emu_plan_set_sms(int sms);
/* Launches of at least this many waves of blocks (on the SMs above) run as persistent
 * grids, each with a counter of its own (0, the default: none; da__cuda_launch_sequence's
 * persist_waves); how many did so far. */
void da_emu_plan_set_persist(int waves);
int da_emu_plan_persistent_launches(void);

/* Run spec (render options opts, may be NULL) over args: host pointers; the q/k/v/out/
 * lse regions have the byte sizes given and are the only global memory the kernels may
 * touch besides the workspace and the explicit masks. args->workspace_bytes, when not 0,
 * bounds the workspace (its pointer is ignored: the runs of tokens the CUDA backend would
 * take with that much). */
da_status da_emu_execute(da_context *ctx, const da_spec *s, const da__render_opts *opts, const da_args *args,
                         size_t q_bytes, size_t kv_bytes, size_t out_bytes, size_t lse_bytes);

#endif
