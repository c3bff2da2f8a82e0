#!/usr/bin/env python3
"""sass_walk.py - issue slots on one path through a kernel's key loop, from its SASS.

The CUDA kernels are bound by instruction issue about as much as by the tensor cores (a
key tile's masking, softmax and copies against its mma), and no GPU is needed to count
what a key tile issues: ptxas's SASS has it. This walks one path through the SASS and
counts the instructions on it, by opcode, so a template change can be judged on this
machine before a GPU session times it (bench/results/issue-slots.md).

  sass_walk.py KERNEL.cubin|KERNEL.sass --loops
      the loops that contain mma (HMMA / HGMMA): start..end, static size
  sass_walk.py KERNEL.cubin|KERNEL.sass START END [ADDR=T|N|K ...]
      walks from START to END (hex SASS addresses, e.g. a loop's start and its backward
      branch) and prints one JSON object: instructions on the path and the opcodes.
      Unconditional branches are followed. A conditional branch is not taken unless
      ADDR=T says so (ADDR=K: taken the first K times, for a loop inside the path);
      every conditional branch left to that default is listed on stderr with the number
      of instructions it would skip, so the path can be chosen (for a full key tile: the
      partial-tile mask skipped, the 16-byte copies taken, each copy loop's trip count).
      SASS_WALK_TRACE=1 in the environment lists the path's instructions on stderr.

A .cubin is disassembled with cuobjdump (CUDA toolkit, or PyPI's nvidia-cuda-cuobjdump
wheel: bin/cuobjdump inside it); $CUOBJDUMP overrides the command. The counts are
static: a predicated-off instruction (@!PT) still takes its slot, latencies and
dual issue are not modelled, and what a path costs on a GPU is for a GPU to say.
"""
import collections
import json
import os
import re
import subprocess
import sys

INS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRA = re.compile(r"(@!?U?P[0-9T]\s+)?BRA(\.\w+)*\s+(\w+\s*,\s*)?0x([0-9a-f]+)")


def sass_lines(path):
    if path.endswith(".sass") or path.endswith(".txt"):
        with open(path) as f:
            return f.read().splitlines()
    tool = os.environ.get("CUOBJDUMP", "cuobjdump")
    try:
        out = subprocess.run([tool, "-sass", path], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"sass_walk: {tool} -sass {path} failed ({e}); set CUOBJDUMP or pass a .sass file")
    return out.splitlines()


def parse(lines):
    """[(address, text)] of every function in the listing, in order (one kernel expected)."""
    ins = []
    for line in lines:
        m = INS.match(line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins


def opcode(text):
    return re.sub(r"^@!?U?P[0-9T]\s+", "", text).split()[0].split(".")[0]


def loops(ins):
    out = []
    for a, s in ins:
        m = BRA.match(s)
        if m and "DIV" not in s:
            t = int(m.group(4), 16)
            if t < a:
                mma = sum(1 for b, x in ins if t <= b <= a and opcode(x) in ("HMMA", "HGMMA"))
                if mma:
                    out.append({"start": hex(t), "end": hex(a), "static_instructions": (a - t) // 16 + 1,
                                "mma": mma, "branch": s})
    return out


def walk(ins, start, end, decisions, trace=None):
    text = dict(ins)
    if start not in text or end not in text:
        sys.exit("sass_walk: START and END must be instruction addresses of the listing")
    pc, n, ops, taken, defaults = start, 0, collections.Counter(), collections.Counter(), []
    while n < 1_000_000:
        s = text[pc]
        n += 1
        ops[opcode(s)] += 1
        if trace:
            print(f"{pc:#06x} {s}", file=trace)
        if pc == end:
            break
        m = BRA.match(s)
        if m and "DIV" not in s:
            tgt = int(m.group(4), 16)
            if not m.group(1):
                pc = tgt
                continue
            d = decisions.get(pc)
            if d is None:
                defaults.append(pc)
                print(f"  not taken (default): {pc:#x} {s}" +
                      (f" (would skip {(tgt - pc) // 16 - 1})" if tgt > pc else " (backward)"), file=sys.stderr)
            elif d == "T" or (d.isdigit() and taken[pc] < int(d)):
                taken[pc] += 1
                pc = tgt
                continue
        elif opcode(s) == "EXIT" and not s.startswith("@"):
            break
        pc += 16
        while pc not in text and pc < end:
            pc += 16
    return n, ops


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    ins = parse(sass_lines(argv[1]))
    if argv[2] == "--loops":
        print(json.dumps(loops(ins), indent=1))
        return
    start, end = int(argv[2], 16), int(argv[3], 16)
    decisions = {}
    for d in argv[4:]:
        k, v = d.split("=")
        decisions[int(k, 16)] = v.upper()
    n, ops = walk(ins, start, end, decisions, sys.stderr if os.environ.get("SASS_WALK_TRACE") else None)
    print(json.dumps({"file": os.path.basename(argv[1]), "start": hex(start), "end": hex(end),
                      "decisions": {hex(k): v for k, v in sorted(decisions.items())},
                      "instructions": n, "mma": ops["HMMA"] + ops["HGMMA"], "opcodes": dict(ops.most_common())}))


if __name__ == "__main__":
    main(sys.argv)
