#!/usr/bin/env bash
# gpu_session.sh - everything a GPU session runs, in one go, on the device machine
# (DESIGN: build here, carry the build folder; the device has no package registry).
#
# Here, first:
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 && rm -rf build/golden && cp -r ../shared/golden build/golden
# Then through the device tool (carry ["build"]), with a timeout that leaves room to rerun:
#   bash bench/gpu_session.sh
# Everything it prints also lands in $OUT (or /tmp/dilattn-gpu): logs, bench JSON, plot.
set -u
out=${OUT:-/tmp/dilattn-gpu}
mkdir -p "$out"
golden=build/golden
run() { echo "== $*"; "$@" 2>&1 | tee -a "$out/session.log"; echo "rc=${PIPESTATUS[0]}" | tee -a "$out/session.log"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git rev-parse HEAD 2>/dev/null; } | tee "$out/device.txt"
run build/dilattn info
run build/tests/test_nvrtc
run build/tests/test_gpu "$golden" golden
run build/tests/test_gpu "$golden" random
run build/tests/test_gpu "$golden" unaligned
run build/tests/test_gpu "$golden" large
run build/tests/test_gpu "$golden" huge
run tests/run_sanitizer.sh build/tests/test_gpu memcheck "$golden"
run tests/run_sanitizer.sh build/tests/test_gpu racecheck "$golden"
run python3 bench/bench_gpu.py --lib build/libdilattn.so --out "$out/bench_gpu.json" --plot "$out/bench_gpu.png"
run python3 bench/bench_gpu.py --lib build/libdilattn.so --causal --configs longnet5 --out "$out/bench_gpu_causal.json"
