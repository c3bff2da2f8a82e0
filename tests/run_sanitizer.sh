#!/usr/bin/env bash
# run_sanitizer.sh - compute-sanitizer (memcheck or racecheck) over the small GPU suite.
# Exits 77 (CTest: skipped) when there is no GPU or no compute-sanitizer.
# Run: tests/run_sanitizer.sh build/tests/test_gpu memcheck ../shared/golden [PART]
# PART: a test_gpu part (default small); racecheck over all of small takes more than 170 s
# on an H200 (its pdl part alone more than 110 s), over golden 10 s.
set -u
bin=$1 tool=$2 golden=$3 part=${4:-small}
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$san" ] || { echo "skipped: compute-sanitizer not found"; exit 77; }
"$bin" "$golden" probe >/dev/null || { "$bin" "$golden" probe; exit 77; }
exec "$san" --tool "$tool" --error-exitcode 1 "$bin" "$golden" "$part"
