#!/usr/bin/env python3
"""ab_templates.py - a template change measured end to end on the host backend: `dilattn
run` on one config and random inputs, alternating the built-in templates with a
baseline's (DILATTN_TEMPLATE_DIR layout: cuda/, host/, lua/; e.g. from `git archive REV
templates gen/lua`), so both see the same machine noise. Prints JSON: medians, spread,
ratio, and whether the outputs are identical.

Run: python3 bench/ab_templates.py build/dilattn CONFIG.json BASELINE_DIR [--n N] [--reps R] [--out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("cli")
ap.add_argument("config")
ap.add_argument("baseline")
ap.add_argument("--n", type=int, default=16384)
ap.add_argument("--reps", type=int, default=9)
ap.add_argument("--out")
a = ap.parse_args()
cfg = json.load(open(a.config))
H, D = cfg["num_heads"], cfg["head_dim"]
Hk = cfg.get("num_kv_heads", H)
dt = {"float16": np.float16, "float32": np.float32}.get(cfg["dtype"])
if dt is None:
    raise SystemExit("ab_templates.py: float16 or float32 configs only")
tmp = tempfile.mkdtemp(prefix="dilattn-ab-")
rng = np.random.default_rng(0)
for name, heads in (("q", H), ("k", Hk), ("v", Hk)):
    np.save(f"{tmp}/{name}.npy", rng.uniform(-1, 1, (1, a.n, heads, D)).astype(dt))


def run(which, out):
    env = dict(os.environ)
    env.pop("DILATTN_TEMPLATE_DIR", None)
    if which == "baseline":
        env["DILATTN_TEMPLATE_DIR"] = a.baseline
    cmd = [a.cli, "run", a.config, "--q", f"{tmp}/q.npy", "--k", f"{tmp}/k.npy", "--v", f"{tmp}/v.npy",
           "-o", out, "--backend", "host"]
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


times = {"built-in": [], "baseline": []}
for which in times:  # warm-up: compile both into the kernel cache
    run(which, f"{tmp}/{which}.npy")
for _ in range(a.reps):
    for which in times:
        times[which].append(run(which, f"{tmp}/{which}.npy"))
same = bool(np.array_equal(np.load(f"{tmp}/built-in.npy"), np.load(f"{tmp}/baseline.npy")))
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
doc = {"bench": "ab_templates", "config": a.config, "seq_len": a.n, "reps": a.reps, "backend": "host",
       "median_ms": med, "min_ms": {k: min(v) * 1e3 for k, v in times.items()},
       "max_ms": {k: max(v) * 1e3 for k, v in times.items()},
       "speedup": med["baseline"] / med["built-in"], "outputs_identical": same}
text = json.dumps(doc, indent=1)
print(text)
if a.out:
    open(a.out, "w").write(text + "\n")
