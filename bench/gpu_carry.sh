#!/usr/bin/env bash
# gpu_carry.sh - prepare, on this machine, the folder a GPU session carries to the device
# (the device has no package registry and the device tool carries at most 64 MiB):
# build-gpu/ with the CLI, libdilattn.so and the two libraries copied beside it, the GPU
# tests and the golden cases, and the templates of a baseline commit (DILATTN_BASE, default
# a533c25: the last before the issue-slot changes of bench/results/issue-slots.md) in
# build-gpu/base/templates, for bench_gpu.py's @base variants (an A/B in one process), and
# that commit's libdilattn.so in build-gpu/base/lib for its @lib variants.
# Everything in it is linked statically or found by $ORIGIN.
# Then, through the device tool: carry ["build-gpu"], and run
#   DILATTN_BUILD=build-gpu DILATTN_COMMIT=<short hash> bash bench/gpu_session.sh PHASE
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target dilattn_cli dilattn_shared test_gpu test_nvrtc >/dev/null
rm -rf build-gpu
mkdir -p build-gpu/tests
cp build/dilattn build-gpu/
# the library as files, not links: libdilattn.so (ctypes) and its soname (the CLI's and
# the tests' DT_NEEDED, libdilattn.so.MAJOR.MINOR)
soname=$(objdump -p build/libdilattn.so | awk '/SONAME/ {print $2}')
cp -L build/libdilattn.so build-gpu/
[ -z "$soname" ] || [ "$soname" = libdilattn.so ] || cp -L "build/$soname" build-gpu/
cp -L build/libjansson.so.4 build/liblua5.4.so.0 build-gpu/ 2>/dev/null || true
cp build/tests/test_gpu build/tests/test_nvrtc build-gpu/tests/
cp -r ../shared/golden build-gpu/golden && chmod -R u+w build-gpu/golden
base=${DILATTN_BASE:-a533c25}
mkdir -p build-gpu/base && git archive "$base" templates | tar -x -C build-gpu/base
git rev-parse --short "$base" > build-gpu/base/commit
# and a baseline's whole library (bench_gpu.py --base-lib: the @lib variants), built here
# from a clean export of commit $DILATTN_BASE_LIB (default: $DILATTN_BASE; 0 skips it)
libbase=${DILATTN_BASE_LIB:-$base}
if [ "$libbase" != 0 ]; then
  src=$(mktemp -d)
  git archive "$libbase" | tar -x -C "$src"
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$src/build" -j2 --target dilattn_shared >/dev/null
  mkdir -p build-gpu/base/lib
  cp "$src/build/libdilattn.so" build-gpu/base/lib/
  cp -L "$src/build/libjansson.so.4" "$src/build/liblua5.4.so.0" build-gpu/base/lib/ 2>/dev/null || true
  git rev-parse --short "$libbase" > build-gpu/base/lib/commit
  rm -rf "$src"
fi
echo "build-gpu: $(du -sh build-gpu | cut -f1) at $(git rev-parse --short HEAD), base templates $(cat build-gpu/base/commit)"
