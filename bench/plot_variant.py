#!/usr/bin/env python3
"""plot_variant.py - one tile variant of bench_gpu.py against the default in the same rows.

  plot_variant.py VARIANT OUT.png RESULTS.json...

For every row (config, N, causal) of the bench_gpu.py JSON files given, the default's time
over VARIANT's (tile_variants[VARIANT].ms): above 1, the variant is faster. Rows of the same
(config, N, causal) in several files are drawn side by side (repeated runs: the spread is
the noise). Prints the ratios as JSON too."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    with open(path) as f:
        d = json.load(f)
    return d["rows"] if isinstance(d, dict) else d


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    variant, out, files = argv[1], argv[2], argv[3:]
    ratios = {}
    for path in files:
        for r in rows(path):
            v = r.get("tile_variants", {}).get(variant, {})
            if not v.get("ms") or not r.get("dilattn_ms"):
                continue
            key = (r["config"], r["seq_len"], bool(r["causal"]))
            ratios.setdefault(key, []).append(r["dilattn_ms"] / v["ms"])
    keys = sorted(ratios, key=lambda k: (k[2], k[0], k[1]))
    print(json.dumps([{"config": k[0], "seq_len": k[1], "causal": k[2], "default_over_variant": ratios[k]} for k in keys]))
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(keys)), 4))
    for i, k in enumerate(keys):
        xs = [i + 0.15 * (j - (len(ratios[k]) - 1) / 2) for j in range(len(ratios[k]))]
        ax.bar(xs, [x - 1 for x in ratios[k]], bottom=1, width=0.6 / max(1, len(ratios[k])),
               color="tab:orange" if k[2] else "tab:blue")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{c}\n{n // 1024}K{' c' if causal else ''}" for c, n, causal in keys], fontsize=7)
    ax.set_ylabel(f"default time / {variant} time")
    ax.set_title(f"{variant} against the default, same process (blue: no mask, orange: causal)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv)
