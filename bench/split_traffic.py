#!/usr/bin/env python3
"""split_traffic.py - global-memory bytes a split plan's epilogues move per call (model).

A split plan runs one launch per branch. Row `pos` of head h is covered by branch j when
(pos mod w_j) mod r_j equals the head's offset in branch j (SEMANTICS.md, planner.lua
longnet_offset); k = the number of branches covering it. Per (row, head), with a
workspace row of D + 1 fp32 and an out row of D halves plus an fp32 lse:

  passes (before 207d86d): the branch with r = 1 writes the workspace first and every
      later covering launch reads and writes it (without such a branch _init writes every
      row and every covering launch merges), then _finish reads it and writes out:
      ws + 2 ws (k - 1) + ws + out   (no r = 1: ws + 2 ws k + ws + out)
  epilogue (207d86d): the first covering launch writes the workspace, later ones merge,
      the last reads it and writes out itself; a row with k = 1 goes straight to out:
      k = 1: out;  else ws + 2 ws (k - 2) + ws + out   (no r = 1: plus _clear's out)

Counts the loads and stores of the epilogues and row kernels only (not q / k / v), exactly,
by walking every row; prints one JSON object per config.
Run: python3 bench/split_traffic.py bench/configs/longnet5_causal.json [--seq-len N] [--batch B]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import longnet_offset  # noqa: E402


def traffic(cfg, N, B):
    w, r = cfg["segment_lengths"], cfg["dilation_rates"]
    H, D = cfg["num_heads"], cfg["head_dim"]
    esize = 4 if cfg.get("dtype") == "float32" else 2
    if cfg.get("mode", "longnet") != "longnet":
        raise ValueError("grouped mode plans are single, not split")
    ws, out = 4 * (D + 1), esize * D + 4
    counts = {}
    for h in range(H):
        offs = [longnet_offset(cfg.get("offsets", "mod"), h, r[j], H) for j in range(len(w))]
        for pos in range(N):
            k = sum((pos % w[j]) % r[j] == offs[j] for j in range(len(w)))
            counts[k] = counts.get(k, 0) + 1
    # without a branch of r = 1: before, _init wrote every workspace row and each covering
    # launch merged into it; now _clear writes every out row first
    r1 = any(x == 1 for x in r)
    old = new = 0
    for k, n in counts.items():
        old += n * (ws + 2 * ws * (k - (1 if r1 else 0)) + ws + out)
        new += n * ((0 if r1 else out) + (0 if k == 0 else out if k == 1 else ws + 2 * ws * (k - 2) + ws + out))
    rows = H * N
    return dict(seq_len=N, batch=B, heads=H, head_dim=D, rows_by_coverage={str(k): B * n for k, n in sorted(counts.items())},
                bytes_passes=B * old, bytes_epilogue=B * new, per_row_passes=old / rows, per_row_epilogue=new / rows,
                ratio=new / old)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--seq-len", type=int, default=65536)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    for path in args.configs:
        with open(path) as f:
            cfg = json.load(f)
        row = dict(config=path, **traffic(cfg, args.seq_len, args.batch))
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
