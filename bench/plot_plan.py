#!/usr/bin/env python3
"""plot_plan.py - draws bench_plan's JSON (plan start-up times against their targets) as a
bar chart on a log scale.

Run: build/bench/bench_plan --out bench/results/plan.json && python3 bench/plot_plan.py bench/results/plan.json bench/results/plan.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = json.load(open(sys.argv[1]))
to_ms = {"ms": 1.0, "us": 1e-3}
names = [r["measure"] for r in rows]
med = [r["median"] * to_ms[r["unit"]] for r in rows]
lo = [m - r["min"] * to_ms[r["unit"]] for m, r in zip(med, rows)]
hi = [r["max"] * to_ms[r["unit"]] - m for m, r in zip(med, rows)]
fig, ax = plt.subplots(figsize=(9, 4.5))
ax.bar(range(len(rows)), med, yerr=[lo, hi], color="#4477aa", capsize=4, label="median (min..max)")
for i, r in enumerate(rows):
    if r["target"] < 1e6:
        t = r["target"] * to_ms[r["unit"]]
        ax.plot([i - 0.4, i + 0.4], [t, t], "r-", lw=2, label="target" if i == 0 else None)
ax.set_xticks(range(len(rows)))
ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("milliseconds (log)")
ax.set_title("dilattn plan start-up (" + (sys.argv[3] if len(sys.argv) > 3 else "host CPU") + ")")
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
