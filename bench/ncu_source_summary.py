#!/usr/bin/env python3
"""ncu_source_summary.py - where a kernel's instructions and stall samples go, per SASS
opcode and per stretch of code, from ncu's source page (one CSV of several kernels):

  ncu ... --section SourceCounters --section WarpStateStats -o REP python3 ...   (the device)
  ncu -i REP.ncu-rep --page source --csv --print-source sass --log-file SASS.csv (the device)
  python3 bench/ncu_source_summary.py SASS.csv [--min-share 0.01] > summary.json (here)

gpu_session.sh second does the first two for dense 2048 causal (ours and cuDNN's kernel on
the same segments) and brings back causal_src_sass.csv.gz. A stretch is a run of
consecutive SASS instructions executed equally often (a basic block, or several in a row):
its count per warp and its length say whether it is once per CTA, once per row block or
once per key tile, so the key loop, the prologue and the epilogue of two kernels can be set
side by side. Prints JSON: per kernel, the totals, the opcodes (share of executed
instructions and of stall samples) and the stretches holding at least --min-share of
either, with their leading stall reasons."""
import argparse
import collections
import csv
import json
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def num(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def read_kernels(path):
    """{kernel name: [row dict per SASS instruction, in address order]}"""
    kernels, name, header = {}, None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                name, header = row[1], None
                launch = 1
                while name in kernels:  # a second launch of the same kernel: its own entry
                    launch += 1
                    name = f"{row[1]} #{launch}"
                kernels[name] = []
            elif row[0] == "Address":
                header = row
            elif name is not None and header is not None:
                kernels[name].append(dict(zip(header, row)))
    return kernels


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate guard
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def stretches(rows):
    """[(first, last)] runs of instructions executed the same number of times"""
    out, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or num(rows[i][EXECUTED]) != num(rows[start][EXECUTED]):
            out.append((start, i - 1))
            start = i
    return out


def summarize(rows, min_share):
    stall_cols = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c] if rows else []
    total_inst = sum(num(r[EXECUTED]) for r in rows) or 1.0
    total_samp = sum(num(r[SAMPLES]) for r in rows) or 1.0
    ops_inst, ops_samp = collections.Counter(), collections.Counter()
    for r in rows:
        op = opcode(r["Source"])
        ops_inst[op] += num(r[EXECUTED])
        ops_samp[op] += num(r[SAMPLES])
    parts = []
    for a, b in stretches(rows):
        seg = rows[a:b + 1]
        inst = sum(num(r[EXECUTED]) for r in seg) / total_inst
        samp = sum(num(r[SAMPLES]) for r in seg) / total_samp
        if inst < min_share and samp < min_share:
            continue
        stalls = collections.Counter()
        for r in seg:
            for c in stall_cols:
                stalls[c[len("stall_"):]] += num(r[c])
        ops = collections.Counter(opcode(r["Source"]) for r in seg)
        parts.append({"first": a, "last": b, "length": b - a + 1, "executed_per_instruction": num(seg[0][EXECUTED]),
                      "share_of_instructions": round(inst, 4), "share_of_samples": round(samp, 4),
                      "opcodes": dict(ops.most_common(8)),
                      "stalls": {k: round(v / total_samp, 4) for k, v in stalls.most_common(4) if v > 0}})
    return {"sass_instructions": len(rows), "instructions_executed": total_inst, "stall_samples": total_samp,
            "opcodes": [{"opcode": op, "share_of_instructions": round(n / total_inst, 4),
                         "share_of_samples": round(ops_samp[op] / total_samp, 4)}
                        for op, n in ops_inst.most_common(24)],
            "stretches": parts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--min-share", type=float, default=0.01,
                    help="stretches holding at least this share of the kernel's instructions or samples")
    args = ap.parse_args()
    kernels = read_kernels(args.csv)
    if not kernels:
        sys.exit(f"{args.csv}: no kernel in it (ncu -i REP --page source --csv --print-source sass)")
    json.dump({"csv": args.csv, "kernels": {k: summarize(rows, args.min_share) for k, rows in kernels.items() if rows}},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
