#!/usr/bin/env bash
# run_sanitizer.sh - compute-sanitizer (memcheck or racecheck) over the small GPU suite.
# Exits 77 (CTest: skipped) when there is no GPU or no compute-sanitizer.
# Run: tests/run_sanitizer.sh build/tests/test_gpu memcheck ../shared/golden
set -u
bin=$1 tool=$2 golden=$3
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$san" ] || { echo "skipped: compute-sanitizer not found"; exit 77; }
"$bin" "$golden" probe >/dev/null || { "$bin" "$golden" probe; exit 77; }
exec "$san" --tool "$tool" --error-exitcode 1 "$bin" "$golden" small
