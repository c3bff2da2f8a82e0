#!/usr/bin/env bash
# gpu_carry.sh - prepare, on this machine, the folder a GPU session carries to the device
# (the device has no package registry and the device tool carries at most 64 MiB):
# build-gpu/ with the CLI, libdilattn.so and the two libraries copied beside it, the GPU
# tests and the golden cases, and the templates of a baseline commit (DILATTN_BASE, default
# a533c25: the last before the issue-slot changes of bench/results/issue-slots.md) in
# build-gpu/base/templates, for bench_gpu.py's @base variants (an A/B in one process).
# Everything in it is linked statically or found by $ORIGIN.
# Then, through the device tool: carry ["build-gpu"], and run
#   DILATTN_BUILD=build-gpu DILATTN_COMMIT=<short hash> bash bench/gpu_session.sh PHASE
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target dilattn_cli dilattn_shared test_gpu test_nvrtc >/dev/null
rm -rf build-gpu
mkdir -p build-gpu/tests
cp build/dilattn build/libdilattn.so build-gpu/
cp -L build/libjansson.so.4 build/liblua5.4.so.0 build-gpu/ 2>/dev/null || true
cp build/tests/test_gpu build/tests/test_nvrtc build-gpu/tests/
cp -r ../shared/golden build-gpu/golden && chmod -R u+w build-gpu/golden
base=${DILATTN_BASE:-a533c25}
mkdir -p build-gpu/base && git archive "$base" templates | tar -x -C build-gpu/base
git rev-parse --short "$base" > build-gpu/base/commit
echo "build-gpu: $(du -sh build-gpu | cut -f1) at $(git rev-parse --short HEAD), base templates $(cat build-gpu/base/commit)"
