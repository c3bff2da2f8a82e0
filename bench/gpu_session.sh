#!/usr/bin/env bash
# gpu_session.sh - everything a GPU session runs on the device machine, in phases that
# each fit one device call (DESIGN: build here, carry the build folder; the device has no
# package registry).
#
# Here, first: bash bench/gpu_carry.sh (builds, then fills build-gpu/ with what the device
# needs, well under the 64 MiB the device tool carries).
# Then through the device tool (carry ["build-gpu"], commands prefixed with
# DILATTN_BUILD=build-gpu), one call per phase, each with a timeout
# that leaves room to rerun (device time is scarce: run `tests` first, it says whether the
# kernels are right at all):
#   bash bench/gpu_session.sh wgmma      # the sm_90a wgmma paths, first: probe (operand map, chains), suites of the 3 variants
#   bash bench/gpu_session.sh wgmma-bench # then a short bench of the wgmma variants beside mma.sync (16K, 64K; full, causal)
#   bash bench/gpu_session.sh ab         # the templates against the baseline's (gpu_carry.sh), same process, same card
#   bash bench/gpu_session.sh first      # THE FIRST CALL of a session (15 minutes of device time
#                                        # in all, start included): the open questions by value,
#                                        # each under its own limit, inside FIRST_BUDGET seconds
#                                        # (default 480); what does not fit is named as skipped
#   bash bench/gpu_session.sh second     # the second call, if time is left: the rest of suite,
#                                        # where the causal time goes (ncu: sections, and the
#                                        # executed instructions of the plain causal kernel and
#                                        # cuDNN's, per SASS instruction), the bench's plot
#                                        # (SECOND_BUDGET, default 500)
#   bash bench/gpu_session.sh suite      # a session's first call: small + wgmma-ws-tma (the default) and wgmma-ws full + N = 1M + q > 2^31, then both sanitizers
#   bash bench/gpu_session.sh check      # after a change: small + wgmma-ws-tma + wgmma-ws + memcheck, then the A/B against the
#                                        # baseline's library (@lib, gpu_carry.sh) at N = 65536 on six configs
#   bash bench/gpu_session.sh check-lpt  # then: causal defaults vs @lib at 16K (longest first, two tiles a CTA),
#                                        # the fused grids without a causal mask longest first (16K, 64K),
#                                        # and a split plan in runs of tokens (@ws100, @ws300) and from the
#                                        # baseline's templates (@base) at 256K
#   bash bench/gpu_session.sh ab-lib     # that A/B alone (BENCH_TILES: its variants)
#   bash bench/gpu_session.sh tests      # info, NVRTC on the device, test_gpu golden/random/unaligned/large/huge/wgmma
#   bash bench/gpu_session.sh sanitize   # compute-sanitizer memcheck + racecheck on the small suite
#   bash bench/gpu_session.sh bench      # bench_gpu.py: full and causal, tile variants
#   bash bench/gpu_session.sh profile    # where the time goes: each branch alone beside the whole plan, SDPA per
#                                        # backend (where_time_goes.py), then ncu's sections of every kernel
#   bash bench/gpu_session.sh tune       # dilattn tune on the LongNet configs of bench/configs (fused vs split, tiles)
#   bash bench/gpu_session.sh            # all four in one go (will not fit one call)
# Everything it prints also lands in files (logs, bench JSON, plots) under
# /tmp/dilattn-gpu-files; under the device tool (OUT set) they are packed, after every
# command, into $OUT/session.tar.gz beside a copy of session.log (and the ncu source CSV,
# gzipped beside them: it may be large): the tool brings back 8 files at most, 16 MiB
# each, and the 58e46dd session lost its session.log and two profiles to that limit.
# Unpack with tar -xzf session.tar.gz.
# The device's copy of the tree may carry a stale .git: put DILATTN_COMMIT=<short hash of
# the carried build> in front of the command so the bench records the right commit.
set -u
out=/tmp/dilattn-gpu-files
mkdir -p "$out"
pack() { # (nothing to do without the device tool's $OUT)
  [ -n "${OUT:-}" ] || return 0
  tar -czf "$OUT/session.tar.gz.tmp" --exclude=causal_src_sass.csv -C "$out" . &&
    mv "$OUT/session.tar.gz.tmp" "$OUT/session.tar.gz"
  cp "$out/session.log" "$OUT/" 2>/dev/null || true
  [ -f "$out/causal_src_sass.csv" ] && gzip -c "$out/causal_src_sass.csv" > "$OUT/causal_src_sass.csv.gz"
  return 0
}
B=${DILATTN_BUILD:-build} # the build folder: build-gpu when carried (bench/gpu_carry.sh)
golden=$B/golden
phase=${1:-all}
export DILATTN_CACHE_DIR=${DILATTN_CACHE_DIR:-/tmp/dilattn-kcache} # not under $OUT: nothing to bring back
export DILATTN_WGMMA_MAP_DIR=${DILATTN_WGMMA_MAP_DIR:-$out} # test_gpu wgmma: the probe's wrong reads, if any
last_rc=0
run() {
  echo "== $*" | tee -a "$out/session.log"
  "$@" 2>&1 | tee -a "$out/session.log"
  last_rc=${PIPESTATUS[0]}
  echo "rc=$last_rc" | tee -a "$out/session.log"
  pack
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git rev-parse HEAD 2>/dev/null; } | tee "$out/device.txt"
# first / second: step LIMIT CMD... runs CMD under LIMIT seconds if that much of the
# phase's budget is left, else logs it as skipped (a later call or session runs it)
t_start=$(date +%s)
budget=${FIRST_BUDGET:-480}
step() {
  local lim=$1; shift
  local left=$((budget - ($(date +%s) - t_start)))
  if [ "$left" -lt "$lim" ]; then
    echo "== skipped (${left} s left, needs ${lim}): $*" | tee -a "$out/session.log"
    last_rc=skipped
    pack
    return
  fi
  run timeout -k 10 "$lim" "$@" # (-k: a CUDA process that ignores TERM is killed 10 s later)
}
# where_time_goes.py for "CONFIG [--causal]" into WHERE (a command): each branch alone beside
# the whole plan, SDPA under each backend PyTorch has
where() {
  set -- $1
  WHERE=(python3 bench/where_time_goes.py --lib $B/libdilattn.so --configs "$@" --out "$out/where_$1${2:+_causal}.json")
}
# ncu (Firecracker machines only; --clock-control none, METHOD.md): every kernel of the
# causal plans and of SDPA on the same N, once each after a warm-up; first the metric names
# this ncu has for the tensor pipes, so a later call can ask for them by name
ncu_metrics() { timeout 30 ncu --query-metrics 2>/dev/null | grep -i -E 'tensor|gmma' > "$out/ncu_metrics.txt"; }
NCU=(ncu --clock-control none --profile-from-start off --section SpeedOfLight
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats
  --section SchedulerStats --section Occupancy --section LaunchStats --csv --page details
  --log-file "$out/ncu.csv" python3 bench/where_time_goes.py --lib $B/libdilattn.so --mode ncu
  --configs longnet5,longnet2 --causal)
NCU_SRC=(ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats
  --import-source no -f -o /tmp/dilattn-causal-src python3 bench/where_time_goes.py --lib $B/libdilattn.so
  --mode ncu --configs dense2048 --causal)
if [ "$phase" = first ]; then
  export DILATTN_BASE_LIB=$B/base/lib/libdilattn.so DILATTN_BASE_COMMIT=$(cat $B/base/commit 2>/dev/null)
  run $B/dilattn info
  # 1. correctness of everything untimed (bench/results/untimed-since-*.md): every default
  #    kernel on the golden cases and random specs (the per-head longest-first table too)
  step 170 $B/tests/test_gpu "$golden" small
  # 1a. an AOT bundle of `gen --mma auto` with JIT off: the default (TMA) kernel from it
  step 30 bash bench/aot_auto_check.sh $B "$golden"
  # 1c. start-up on the device machine (never timed there): the example config through
  #    run, cold (an empty disk cache: NVRTC) then warm (the disk cache), its kernel_from
  #    and plan_ms in startup.jsonl
  ex=tests/data/example
  step 30 sh -c "d=\$(mktemp -d); for i in 1 2; do DILATTN_CACHE_DIR=\$d $B/dilattn run $ex/longnet.json --q $ex/q.npy \
    --k $ex/k.npy --v $ex/v.npy -o /tmp/dilattn-startup-out.npy --backend cuda; done > '$out/startup.jsonl'; cat '$out/startup.jsonl'"
  # 2. the TMA default's own suite (passed at 1f78309, 2d7097e and 30da0bd), then the
  #    defaults against the last timed library (@lib: DILATTN_BASE_LIB of gpu_carry.sh,
  #    30da0bd), causal and not (gpu-h200-30da0bd.md: 1.01x to 1.13x 2d7097e's). Since
  #    30da0bd the kernels decode their tiles by multiplying and trim the epilogue
  #    (untimed-since-30da0bd.md): causal rows above 1.00x @lib are that, if any
  step 200 $B/tests/test_gpu "$golden" wgmma-ws-tma # (116 s on an H200 with an empty kernel cache)
  #    (0x0 against @lib: everything since 30da0bd; 0x0@pairs: the same library without
  #    persistent grids (two tiles a CTA where a launch keeps a wave of CTAs, ad6f6c0), so
  #    0x0 / @pairs is the persistent grids alone (launches of 16 waves of blocks and more:
  #    at 64K, not 16K); 0x0@tiles1: one tile a CTA; 128x0:wgmma-ws-tma: 128-row tiles, the
  #    ring's, where the default's 192-row ones run none)
  #    (the causal bench first: it says whether the persistent grids pay, the question of
  #    sessions 24 and 25; behind tune and the full bench it could miss FIRST_BUDGET)
  step 110 python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet5,longnet2,dense2048 \
    --causal --tiles 0x0@lib,0x0@pairs,0x0@tiles1,64x0:wgmma-ws-tma --reps 10 --out "$out/first_causal.json"
  step 150 python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet5,longnet2,dense2048 \
    --tiles 0x0@lib,0x0@pairs,0x0@tiles1,128x0:wgmma-ws-tma --reps 10 --out "$out/first_full.json"
  # 1b. `dilattn tune` on the GPU (untimed since 30da0bd, untimed-since-30da0bd.md): the
  #    64-row TMA candidate (1.02x to 1.05x the default for causal plans at D = 64 on an
  #    H200, a bucket's choice) and every candidate checked against the default's result at
  #    the tuning length: no candidate of a healthy library may fail that check
  step 120 $B/dilattn tune bench/configs/longnet2_causal.json --seq-len 65536 --backend cuda --reps 10 \
    -o "$out/first_tune_longnet2_causal.csv" --db "$out/first_tuning.jsonl"
  #    D = 128 without a causal mask: the split and single plans' two tiles a CTA (2d5e376,
  #    untimed-since-30da0bd.md) against @lib's one
  step 60 python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet5,dense2048 \
    --head-dim 128 --tiles 0x0@lib --reps 10 --out "$out/first_full_d128.json"
  # 3. the default kernels on the hardware's own checks (wgmma-ws: sparse layouts' default;
  #    the golden cases are mostly float32, so the TMA default's own part too), then sizes
  step 120 $B/tests/test_gpu "$golden" wgmma-ws
  step 40 tests/run_sanitizer.sh $B/tests/test_gpu memcheck "$golden" golden
  step 40 tests/run_sanitizer.sh $B/tests/test_gpu memcheck "$golden" default-tma
  #    the persistent ring (untimed-since-30da0bd.md, sessions 24 and 25): without TMA every
  #    producer thread finds a slot, each storing one word of it (7aa516d): 0 hazards wanted
  step 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" persistent-race
  step 100 $B/tests/test_gpu "$golden" huge
fi
if [ "$phase" = second ]; then
  budget=${SECOND_BUDGET:-500}
  # (the bench's @lib rows below: without these the 58e46dd session's had only an error)
  export DILATTN_BASE_LIB=$B/base/lib/libdilattn.so DILATTN_BASE_COMMIT=$(cat $B/base/commit 2>/dev/null)
  step 60 $B/tests/test_gpu "$golden" large
  # the host's time a da_plan_execute against the real driver (untimed-since-30da0bd.md,
  # session 28): tensor maps from the plan's memo ("same") against encoded every call
  # ("cycling"); bench_execute.c's fake-driver figures leave out what the driver's calls cost
  step 90 sh -c "python3 bench/host_overhead_gpu.py --lib $B/libdilattn.so bench/configs/longnet2_causal.json \
    bench/configs/longnet5_causal.json bench/configs/dense2048_causal.json > '$out/host_overhead.jsonl'"
  step 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" golden
  step 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" default-tma
  # where the plain causal kernel's instructions go (gpu-h200-58e46dd.md: dense 2048 causal
  # at 0.79 of cuDNN with 1.3x its instructions per FLOP): executed instructions and stall
  # samples per SASS instruction of ours and of cuDNN's kernel on the same 2048-token
  # causal segments, summed by opcode and by stretch here (bench/ncu_source_summary.py; read at
  # 30da0bd: the gap is outside the key loop, gpu-h200-30da0bd.md)
  step 150 "${NCU_SRC[@]}"
  if [ -f /tmp/dilattn-causal-src.ncu-rep ]; then
    step 120 ncu -i /tmp/dilattn-causal-src.ncu-rep --page source --csv --print-source sass \
      --log-file "$out/causal_src_sass.csv"
    rm -f /tmp/dilattn-causal-src.ncu-rep
  fi
  for c in "longnet2 --causal" "longnet5"; do
    where "$c"
    step 90 "${WHERE[@]}"
  done
  ncu_metrics
  step 200 "${NCU[@]}"
  step 120 python3 bench/bench_gpu.py --lib $B/libdilattn.so --configs longnet5,longnet2,dense2048 --tiles 0x0@lib \
    --reps 5 --out "$out/bench_full.json" --plot "$out/bench_full.png"
  step 120 python3 bench/bench_gpu.py --lib $B/libdilattn.so --configs longnet5,longnet2 --causal --tiles 0x0@lib \
    --reps 5 --out "$out/bench_causal.json" --plot "$out/bench_causal.png"
fi
if [ "$phase" = tests ] || [ "$phase" = all ]; then
  run $B/dilattn info
  run $B/tests/test_nvrtc
  run $B/tests/test_gpu "$golden" golden
  run $B/tests/test_gpu "$golden" random
  run $B/tests/test_gpu "$golden" unaligned
  run $B/tests/test_gpu "$golden" large
  run $B/tests/test_gpu "$golden" huge
  run $B/tests/test_gpu "$golden" wgmma
fi
if [ "$phase" = suite ]; then
  # each under a time limit, so that one slow part leaves the rest of the call its time
  run $B/dilattn info
  run timeout 180 $B/tests/test_gpu "$golden" small
  run timeout 200 $B/tests/test_gpu "$golden" wgmma-ws-tma
  run timeout 120 $B/tests/test_gpu "$golden" wgmma-ws
  run timeout 60 $B/tests/test_gpu "$golden" large
  run timeout 180 $B/tests/test_gpu "$golden" huge # ~60 s on an H200 host, most of it the float64 reference
  run timeout 120 tests/run_sanitizer.sh $B/tests/test_gpu memcheck "$golden"
  # racecheck over all of small does not finish in 170 s (117dd5d, H200): the golden part
  # (every default kernel on every golden case) in 10 s, then pdl as time allows
  run timeout 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" golden
  run timeout 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" default-tma
  run timeout 60 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" persistent-race
  run timeout 240 tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" pdl
fi
if [ "$phase" = check ]; then
  run timeout 150 $B/tests/test_gpu "$golden" small
  run timeout 200 $B/tests/test_gpu "$golden" wgmma-ws-tma
  run timeout 120 $B/tests/test_gpu "$golden" wgmma-ws
  run timeout 150 tests/run_sanitizer.sh $B/tests/test_gpu memcheck "$golden"
fi
if [ "$phase" = check ] || [ "$phase" = ab-lib ]; then
  export DILATTN_BASE_LIB=$B/base/lib/libdilattn.so DILATTN_BASE_COMMIT=$(cat $B/base/commit 2>/dev/null)
  export DILATTN_BASE_TEMPLATES=$B/base/templates
  # the warp-specialized kernel fused and split (its epilogue writes out, no _finish), the
  # split against the baseline's, on the configs whose default is fused too. The instruction
  # is named: a library before da__default_mma rendered a variant that sets a tile or the
  # strategy but no instruction as mma.sync (117dd5d's 0x0/split rows were mma.sync)
  ab=${BENCH_TILES:-0x0@lib,0x0@nopdl,0x0:wgmma-ws,0x0:wgmma-ws-tma/fused,0x0:wgmma-ws-tma/split,0x0:wgmma-ws/fused,0x0:wgmma-ws/split,0x0:wgmma-ws/split@lib,128x0:wgmma-ws,0x0:wgmma-ws-p2,64x0:wgmma-ws,128x64:sync}
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 65536 --configs dense2048,longnet2,longnet5 \
    --tiles $ab --reps 10 --out "$out/check_full.json"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 65536 --configs longnet2,longnet5 --causal \
    --tiles $ab --reps 10 --out "$out/check_causal.json"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 65536 --configs longnet2 --head-dim 128 \
    --tiles $ab --reps 10 --out "$out/check_d128.json"
fi
if [ "$phase" = check-lpt ]; then
  # (a phase of its own: with check's it would pass one device call's 600 s)
  export DILATTN_BASE_LIB=$B/base/lib/libdilattn.so DILATTN_BASE_COMMIT=$(cat $B/base/commit 2>/dev/null)
  # causal grids longest first, two tiles a CTA on the fused kernel (bench/lpt_model.py: the
  # most at short lengths): the defaults against the baseline's at 16K, dense (single) too
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384 --configs dense2048,longnet2,longnet5 --causal \
    --tiles 0x0@lib --reps 10 --out "$out/check_causal16k.json"
  # without a causal mask the fused multi-branch grids run longest first too (plan_lpt_heads,
  # each head's own tile order; bench/lpt_model.py: LongNet 5-branch 1.25x at 16K, 1.05x at 64K)
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet2,longnet5 \
    --tiles 0x0@lib --reps 10 --out "$out/check_full_lpt.json"
  # split plans in runs of tokens (a workspace limit): LongNet 5-branch causal (split) at
  # 256K, 520 MiB of workspace in one run, against runs of 32768 tokens (@ws100: 65 MiB)
  # and of 131072 (@ws300: two runs); @base: the same plan from the baseline commit's
  # templates (gpu_carry.sh DILATTN_BASE; a6873ad: before the split epilogue's workspace
  # prefetch)
  export DILATTN_BASE_TEMPLATES=$B/base/templates
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 262144 --configs longnet5 --causal \
    --tiles 0x0@base,0x0@ws100,0x0@ws300 --reps 10 --out "$out/check_runs.json"
fi
if [ "$phase" = wgmma ]; then
  # each under a time limit: a kernel that hangs on the hardware (a barrier protocol the
  # emulator accepted) must not take the whole device call with it
  run timeout 240 $B/tests/test_gpu "$golden" wgmma
  run timeout 120 $B/tests/test_gpu "$golden" wgmma-overlap
  run timeout 120 $B/tests/test_gpu "$golden" wgmma-ws
  run timeout 120 env DILATTN_CUDA_MMA=wgmma $B/tests/test_gpu "$golden" huge # q > 2^31 elements, D = 128
fi
if [ "$phase" = wgmma-bench ]; then
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet5,longnet2,dense2048 \
    --tiles 128x64:sync,0x0:wgmma,64x0:wgmma,128x64:wgmma,0x0:wgmma-overlap,0x0:wgmma-ws,128x64:wgmma-ws --reps 10 --profile --out "$out/bench_wgmma.json"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet5,longnet2 --causal \
    --tiles 128x64:sync,0x0:wgmma,64x0:wgmma,128x64:wgmma,0x0:wgmma-overlap,0x0:wgmma-ws,128x64:wgmma-ws --reps 10 --profile --out "$out/bench_wgmma_causal.json"
fi
if [ "$phase" = ab ]; then
  # @base: the same variant rendered from build-gpu/base/templates (the issue-slot changes
  # of bench/results/issue-slots.md against the commit before them), timed in one process
  export DILATTN_BASE_TEMPLATES=$B/base/templates DILATTN_BASE_COMMIT=$(cat $B/base/commit 2>/dev/null)
  ab=128x64:sync,128x64:sync@base,128x32:sync@base,0x0:wgmma,0x0:wgmma@base,0x0:wgmma-ws,0x0:wgmma-ws@base
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 16384,65536 --configs longnet2,dense2048 \
    --tiles $ab --reps 10 --out "$out/bench_ab.json"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 65536 --configs longnet2 --causal \
    --tiles $ab --reps 10 --out "$out/bench_ab_causal.json"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so --lengths 65536 --configs longnet2 --head-dim 128 \
    --tiles 0x0@base,0x0:wgmma,0x0:wgmma@base --reps 10 --out "$out/bench_ab_d128.json"
fi
if [ "$phase" = sanitize ] || [ "$phase" = all ]; then
  run tests/run_sanitizer.sh $B/tests/test_gpu memcheck "$golden"
  run tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" golden
  run tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" persistent-race
  run tests/run_sanitizer.sh $B/tests/test_gpu racecheck "$golden" pdl
fi
if [ "$phase" = bench ] || [ "$phase" = all ]; then
  # BENCH_TILES: the variants timed beside the default (bench_gpu.py's own list when unset)
  tiles=${BENCH_TILES:+--tiles $BENCH_TILES}
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so $tiles --out "$out/bench_gpu.json" --plot "$out/bench_gpu.png"
  run python3 bench/bench_gpu.py --lib $B/libdilattn.so $tiles --causal --configs longnet5,longnet2 --out "$out/bench_gpu_causal.json" --plot "$out/bench_gpu_causal.png"
fi
if [ "$phase" = profile ]; then
  # issue 3's open gaps (LongNet 5-branch, causal or not; causal LongNet 2-branch): the
  # branches one at a time against the whole plan, and which SDPA kernel we are compared with
  for c in "longnet5 --causal" "longnet2 --causal" "longnet5"; do
    where "$c"
    run timeout 120 "${WHERE[@]}"
  done
  ncu_metrics
  run timeout 300 "${NCU[@]}"
fi
if [ "$phase" = tune ] || [ "$phase" = all ]; then
  for c in longnet5_causal longnet5 longnet2_causal; do
    run $B/dilattn tune "bench/configs/$c.json" --seq-len 65536 --backend cuda --reps 10 \
      -o "$out/tune_$c.csv" --plot "$out/tune_$c.png" --db "$out/tuning.jsonl"
  done
fi
