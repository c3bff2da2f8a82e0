#!/usr/bin/env bash
# run.sh - install the dilattn build into a temporary prefix, build tests/consumer against
# it with find_package + dilattn_add_kernels, run the program with JIT disabled and an
# empty kernel cache (so its kernels can only come from the linked bundle), and build and
# run a pkg-config user. With nvcc, the CUDA consumer is compiled and linked too and run
# (it skips itself without a GPU).
# Run: tests/consumer/run.sh BUILD_DIR   (ctest -R consumer)
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/dilattn-consumer-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cuda=OFF
command -v nvcc >/dev/null 2>&1 && cuda=ON
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DDILATTN_CONSUMER_CUDA=$cuda >/dev/null
cmake --build "$tmp/build" -j2 >/dev/null
# linked by its ABI version (libdilattn.so.MAJOR.MINOR), not the bare libdilattn.so
objdump -p "$tmp/build/consumer" | grep -Eq 'NEEDED +libdilattn\.so\.[0-9]+\.[0-9]+$' ||
  { echo "consumer: not linked to a versioned libdilattn"; exit 1; }
export DILATTN_CACHE_DIR="$tmp/empty-cache" DILATTN_DISABLE_JIT=1
"$tmp/build/consumer"
if [ -x "$tmp/build/consumer_cuda" ]; then
  set +e; "$tmp/build/consumer_cuda"; rc=$?; set -e
  [ $rc = 0 ] || [ $rc = 77 ] || exit $rc
fi
# arguments dilattn_add_kernels refuses at configure time, each with its reason (they were
# dropped without a word, or failed at build time as "No rule to make target .../ARCH")
bad="$tmp/bad"
mkdir -p "$bad"
cp "$src/causal64.json" "$bad/"
echo 'int main(void) { return 0; }' > "$bad/main.c"
for case in "TARGET host ARCHS sm_90|ARCHS and MMA are for TARGET cuda" \
            "TARGET host MMA wgmma-ws|ARCHS and MMA are for TARGET cuda" \
            "TARGET Cuda|TARGET Cuda: expected host or cuda" \
            "TARGET cuda MMA bogus|MMA bogus: expected" \
            "ARCH sm_80|ARCH is not a keyword" \
            "NAME twice|NAME twice is another"; do
  args=${case%%|*} want=${case#*|}
  extra=""
  [ "$args" = "NAME twice" ] && extra="dilattn_add_kernels(app2 CONFIGS causal64.json NAME twice)"
  cat > "$bad/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(bad LANGUAGES C)
find_package(dilattn 0.3 CONFIG REQUIRED)
add_executable(app main.c)
add_executable(app2 main.c)
dilattn_add_kernels(app CONFIGS causal64.json $args)
$extra
CM
  rm -rf "$bad/build"
  if out=$(cmake -S "$bad" -B "$bad/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" 2>&1); then
    echo "dilattn_add_kernels($args): configured, expected a refusal"; exit 1
  fi
  echo "$out" | tr -s ' \n' ' ' | grep -qF "$want" || { echo "dilattn_add_kernels($args): $out"; exit 1; }
done
# a C++ project (no C): the bundle compiled as C++, a target named my-engine, the plain
# target_link_libraries signature
cmake -S "$src/cxx" -B "$tmp/build-cxx" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build-cxx" >/dev/null
"$tmp/build-cxx/my-engine"
# another dilattn installed (here: the CLI touched): the bundle is generated again
sleep 1
touch "$tmp/prefix/bin/dilattn"
cmake --build "$tmp/build-cxx" | grep -q "dilattn: generating" || { echo "the bundle was not regenerated"; exit 1; }
# dilattn inside the user's project (add_subdirectory): its library and CLI built there
# (in-tree: the targets the program needs, not dilattn's tests)
cmake -S "$src/intree" -B "$tmp/build-intree" -DDILATTN_SOURCE="$src/../.." -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/build-intree" -j2 --target intree >/dev/null
DILATTN_DISABLE_JIT=1 DILATTN_CACHE_DIR="$tmp/empty-cache-intree" "$tmp/build-intree/intree"
# pkg-config user: JIT on, host backend
unset DILATTN_DISABLE_JIT
cat > "$tmp/pc.c" <<'C'
#include <dilattn.h>
#include <stdio.h>
int main(void) {
  da_spec s; da_spec_init(&s);
  s.num_branches = 1; s.segment_lengths[0] = 8; s.dilation_rates[0] = 2; s.head_dim = 4;
  da_context *c; da_plan *p; da_context_create(&c);
  if (da_plan_create(c, &s, DA_BACKEND_HOST, &p) != DA_OK) { fprintf(stderr, "%s\n", da_context_last_error(c)); return 1; }
  float x[16 * 4], o[16 * 4]; for (int i = 0; i < 64; i++) x[i] = (float)i / 64;
  da_args a; da_args_init(&a, &s, 1, 16, x, x, x, o, NULL);
  int rc = da_plan_execute(p, &a) != DA_OK;
  printf("pkg-config user: %s (dilattn %s)\n", rc ? "failed" : "ok", da_version());
  da_plan_destroy(p); da_context_destroy(c); return rc;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc "$tmp/pc.c" $(pkg-config --cflags --libs dilattn) -o "$tmp/pc"
"$tmp/pc"
# the same from a Debian-style tree (libdir lib/x86_64-linux-gnu: the .pc one folder deeper,
# whose prefix was two ".." up and then named <prefix>/lib/include)
ma="$tmp/multiarch"
mkdir -p "$ma/lib/x86_64-linux-gnu"
cp -a "$tmp/prefix/include" "$ma/"
cp -a "$tmp/prefix/lib/." "$ma/lib/x86_64-linux-gnu/"
cmake -DPC_IN="$src/../../gen/dilattn.pc.in" -DPC_OUT="$ma/lib/x86_64-linux-gnu/pkgconfig/dilattn.pc" \
  -DLIBDIR=lib/x86_64-linux-gnu -DINCLUDEDIR=include -DPREFIX=/usr -DVERSION=0 -P "$src/../../gen/dilattn_pc.cmake"
export PKG_CONFIG_PATH="$ma/lib/x86_64-linux-gnu/pkgconfig"
cc "$tmp/pc.c" $(pkg-config --cflags --libs dilattn) -o "$tmp/pc-multiarch"
"$tmp/pc-multiarch"
echo "1 passed, 0 failed"
