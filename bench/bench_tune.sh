#!/usr/bin/env bash
# bench_tune.sh - what tuning gains over the default parameters, per config (host backend
# here; pass --backend cuda on a GPU machine). Prints one JSON line per config (default_ms,
# best_ms, speedup) and keeps the CSV and plots next to the output.
# Run: bench/bench_tune.sh build/dilattn OUT_PREFIX [extra dilattn tune args]
set -eu
bin=$1 out=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
db=$(mktemp /tmp/dilattn-tune-db-XXXXXX.jsonl); rm -f "$db"
"$bin" tune "$here/tests/data/example/longnet.json" "$here/../shared/golden/longnet_three_branches/case.json" \
  "$here/../shared/golden/sparse_random/case.json" --seq-len 4096 --reps 7 --db "$db" \
  -o "$out.csv" --plot "$out.png" "$@" | tee "$out.jsonl"
rm -f "$db" "$db.lock"
