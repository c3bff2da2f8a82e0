#!/usr/bin/env python3
"""plot_emu_work.py - draws bench_emu_work's JSON: tensor-core efficiency (effective FLOPs
/ issued mma FLOPs) per config, causal or not, for each strategy and template set.

Run: build/bench/bench_emu_work tests/emu --baseline DIR --out W.json && python3 bench/plot_emu_work.py W.json W.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

doc = json.load(open(sys.argv[1]))
rows = doc["results"]
groups = []
for r in rows:
    g = (r["config"], r["causal"])
    if g not in groups:
        groups.append(g)
series = []
for r in rows:
    s = (r["strategy"], r["templates"])
    if s not in series:
        series.append(s)
width = 0.8 / len(series)
colors = {"fused": "#4477aa", "split": "#228833"}
metrics = [("efficiency", "effective / issued mma FLOPs", 1.15)]
if all("mma_per_ldmatrix" in r for r in rows):
    metrics.append(("mma_per_ldmatrix", "mma per ldmatrix.x4 (smem read)", 5.0))
fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 4.2 * len(metrics)), squeeze=False)
for (key, ylabel, ymax), ax in zip(metrics, axes[:, 0]):
    for si, s in enumerate(series):
        xs, ys = [], []
        for gi, g in enumerate(groups):
            for r in rows:
                if (r["config"], r["causal"]) == g and (r["strategy"], r["templates"]) == s:
                    xs.append(gi + (si - (len(series) - 1) / 2) * width)
                    ys.append(r[key])
        ax.bar(xs, ys, width, color=colors.get(s[0], "#999999"), alpha=1.0 if s[1] == "built-in" else 0.45,
               hatch=None if s[1] == "built-in" else "//", label=f"{s[0]} ({s[1]} templates)")
        for x, y in zip(xs, ys):
            ax.text(x, y + ymax * 0.01, f"{y:.2f}", ha="center", fontsize=7, rotation=90)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{c}\n{'causal' if k else 'full'}" for c, k in groups], fontsize=8)
    ax.set_ylim(0, ymax)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="lower right")
axes[0, 0].set_title(f"CUDA kernels counted in the CPU emulator: N = {doc['seq_len']}, D = {doc['head_dim']}, fp16")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
