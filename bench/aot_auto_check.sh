#!/usr/bin/env bash
# aot_auto_check.sh - an AOT bundle built with `gen --mma auto` serves a default plan with
# JIT off on this machine's GPU: the kernel comes from the bundle (empty kernel cache,
# DILATTN_DISABLE_JIT=1), is the device's default (on an sm_90 device with a CUDA 12.1+
# driver, wgmma-ws-tma: a kernel name ending in _wgmmat), and its out and lse match the
# golden case's. The same with NVRTC missing (DILATTN_NVRTC_LIB=/nonexistent, JIT on: a GPU
# without NVRTC runs bundled kernels), and with the manifest's artifact keys changed (the
# bundle of another NVRTC: taken by its source once the driver loads it). And without a
# bundle, NVRTC missing, from a disk cache that NVRTC filled (disk_no_nvrtc: a cache folder
# warmed where NVRTC was). Prints one JSON line a check; exit 0 when all of that holds.
# Run: bash bench/aot_auto_check.sh BUILD_DIR GOLDEN_DIR [tma|any]   (gpu_session.sh first; any: the
# kernel need not be wgmma-ws-tma, as on an sm_80 device)
set -euo pipefail
B=$1
case_dir=$2/half_inputs # float16, head_dim 64: the wgmma paths serve it
d=$(mktemp -d /tmp/dilattn-aot-XXXXXX)
trap 'rm -rf "$d"' EXIT
"$B/dilattn" gen "$case_dir/case.json" --target cuda --mma auto --bundle aot -o "$d" >/dev/null
# the same bundle as another NVRTC's build would be (its artifact keys changed): served by
# its source, the cubin first loaded by the driver (no compile: JIT off)
sed 's/"key": "\(.\)/"key": "x\1/' "$d/manifest.json" | sed 's/"key": "x0/"key": "1/; s/"key": "x\(.\)/"key": "0/' \
  > "$d/manifest-other.json"
rc=0
run_case() { # env assignments: the plan's JSON line
  env "$@" DILATTN_TUNING=0 "$B/dilattn" run "$case_dir/case.json" --q "$case_dir/q.npy" --k "$case_dir/k.npy" \
    --v "$case_dir/v.npy" -o "$d/out.npy" --lse "$d/lse.npy" --backend cuda
}
run_case DILATTN_CACHE_DIR="$d/warm-cache" >/dev/null || rc=1 # (JIT: fills the cache disk_no_nvrtc reads)
for mode in jit_off no_nvrtc other_nvrtc disk_no_nvrtc; do
  manifest=$d/manifest.json env=(DILATTN_DISABLE_JIT=1) cache=$d/empty-cache-$mode
  [ $mode = no_nvrtc ] && env=(DILATTN_NVRTC_LIB=/nonexistent)  # a GPU without NVRTC: bundled kernels only
  [ $mode = other_nvrtc ] && manifest=$d/manifest-other.json
  [ $mode = disk_no_nvrtc ] && env=(DILATTN_NVRTC_LIB=/nonexistent) manifest= cache=$d/warm-cache
  json=$(run_case "${env[@]}" DILATTN_BUNDLES="$manifest" DILATTN_CACHE_DIR="$cache") ||
    { echo "{\"check\": \"aot_auto_$mode\", \"ok\": false}"; rc=1; continue; }
  python3 - "$json" "$d" "$case_dir" "${3:-tma}" "$mode" <<'PY' || rc=1
import json, sys
import numpy as np
info, d, g = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
out, lse = np.load(f"{d}/out.npy").astype(np.float64), np.load(f"{d}/lse.npy").astype(np.float64)
ref_out, ref_lse = np.load(f"{g}/out.npy").astype(np.float64), np.load(f"{g}/lse.npy").astype(np.float64)
vmax = np.abs(np.load(f"{g}/v.npy").astype(np.float64)).max()
want_tma = len(sys.argv) > 4 and sys.argv[4] == "tma"
eo, el = float(np.abs(out - ref_out).max()), float(np.abs(lse - ref_lse).max())
ok = bool(eo <= 1e-2 * vmax and el <= 1e-2) and (not want_tma or info["kernel"].endswith("_wgmmat"))
print(json.dumps({"check": "aot_auto_" + sys.argv[5], "kernel": info["kernel"], "cuda_mma": info["cuda_mma"],
                  "out_err": eo, "lse_err": el, "ok": ok}))
sys.exit(0 if ok else 1)
PY
done
exit $rc
