#!/usr/bin/env python3
"""test_ctypes.py - bench/dilattn.py (the ctypes binding the GPU benchmark uses) against
libdilattn.so on the host backend: every golden case through it, and padded strides.
This is what keeps the binding's da_args mirror honest on machines without a GPU.

Run: python3 tests/test_ctypes.py build/libdilattn.so ../shared/golden   (ctest -R ctypes)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, report  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from dilattn import Dilattn  # noqa: E402

lib = Dilattn(os.path.abspath(sys.argv[1]))
golden = sys.argv[2]


for case in sorted(os.listdir(golden)):
    d = os.path.join(golden, case)
    cfg = json.load(open(os.path.join(d, "case.json")))
    q, k, v = (np.ascontiguousarray(np.load(os.path.join(d, f"{n}.npy"))) for n in "qkv")
    B, N, H, D = q.shape
    tol = {"float32": 2e-5, "float16": 1e-2, "bfloat16": 3e-2}[cfg["dtype"]] * np.abs(v.astype(np.float64)).max()
    plan = lib.plan(cfg, backend="host")
    for padded in (False, True):
        if padded:  # rows padded by 8 elements: strided views of bigger buffers
            def pad(x):
                big = np.zeros(x.shape[:-1] + (x.shape[-1] + 8,), x.dtype)
                big[..., :x.shape[-1]] = x
                return big
            qb, kb, vb = pad(q), pad(k), pad(v)
            ob = np.zeros(q.shape[:-1] + (D + 8,), q.dtype)
            hs = lambda a: (a.shape[1] * a.shape[2] * a.shape[3], a.shape[2] * a.shape[3], a.shape[3])
            strides = {"q": hs(qb), "k": hs(kb), "v": hs(vb), "out": hs(ob)}
        else:
            qb, kb, vb, ob, strides = q, k, v, np.zeros_like(q), None
        lse = np.zeros((B, H, N), np.float32)
        plan.execute(qb.ctypes.data, kb.ctypes.data, vb.ctypes.data, ob.ctypes.data, lse.ctypes.data,
                     B, N, strides=strides)
        out = ob[..., :D].astype(np.float64)
        want = np.load(os.path.join(d, "out.npy"))
        err = np.abs(out - want).max()
        check(err <= tol, f"{case} (padded={padded}): out error {err} > {tol}")
        wl = np.load(os.path.join(d, "lse.npy"))
        fin = np.isfinite(wl)
        check(np.array_equal(fin, np.isfinite(lse)), f"{case}: -inf pattern of lse")
        check(np.abs(lse[fin] - wl[fin]).max(initial=0) <= (1e-4 if cfg["dtype"] == "float32" else 1e-2),
              f"{case}: lse error")
    check(plan.backend == "host" and plan.kernel.startswith("da_fwd_"), f"{case}: plan facts {plan.backend} {plan.kernel}")

# a split plan's workspace through the binding: the least (one worker's rows on the host)
# and the most, and an execution in the least giving the same bits
cfg = {"segment_lengths": [16, 32], "dilation_rates": [1, 2], "num_heads": 2, "head_dim": 8, "dtype": "float32"}
plan = lib.plan(cfg, backend="host", fused_min_queries=1 << 30)
B, N = 2, 100
least, most = plan.workspace_min_size(B, N), plan.workspace_size(B, N)
check(plan.strategy == "split" and least == N * 9 * 4 and most >= least, f"workspace {least} .. {most}")
rng = np.random.default_rng(5)
q, k, v = (rng.standard_normal((B, N, 2, 8)).astype(np.float32) for _ in range(3))
outs = []
for ws_bytes in (0, least):
    ob, lse, ws = np.zeros_like(q), np.zeros((B, 2, N), np.float32), np.zeros(max(ws_bytes // 4, 1), np.float32)
    plan.execute(q.ctypes.data, k.ctypes.data, v.ctypes.data, ob.ctypes.data, lse.ctypes.data, B, N,
                 workspace=ws.ctypes.data if ws_bytes else 0, workspace_bytes=ws_bytes)
    outs.append((ob, lse))
check(np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1]),
      "the least workspace gave other results")

# seq_len_hint picks the tuning database's shape bucket (the binding passed 0: always the
# bucket of 65536). A database of two buckets whose best tiles differ, its header from a
# real sweep by the CLI beside the library.
cli = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "dilattn")
if os.path.exists(cli):
    import subprocess
    import tempfile
    tmp = tempfile.mkdtemp(prefix="dilattn-ctypes-")
    tcfg, db = os.path.join(tmp, "t.json"), os.path.join(tmp, "db.jsonl")
    small = {"segment_lengths": [32, 64], "dilation_rates": [1, 2], "num_heads": 2, "head_dim": 16}
    json.dump(small, open(tcfg, "w"))
    p = subprocess.run([cli, "tune", tcfg, "--seq-len", "256", "--reps", "1", "--backend", "host", "--db", db],
                       capture_output=True, text=True)
    lines = open(db).read().splitlines() if p.returncode == 0 else []
    rec = next((json.loads(x) for x in lines[1:] if json.loads(x)["status"] == "ok"), None)
    check(rec is not None, f"a tuning sweep for the seq_len_hint check: {p.returncode} {p.stderr[-300:]}")
    if rec:
        whole = dict(median_ms=1.0, min_ms=1.0, max_ms=1.0)  # (records the tuner could write: else skipped)
        recs = [dict(rec, seq_len=256, bucket=8, tile_q=8, tile_k=16, fused_min_queries=0, cuda_mma=0, **whole),
                dict(rec, seq_len=65536, bucket=16, tile_q=16, tile_k=32, fused_min_queries=0, cuda_mma=0, **whole)]
        open(db, "w").write("\n".join([lines[0]] + [json.dumps(r) for r in recs]) + "\n")
        os.environ["DILATTN_TUNING_DB"] = db
        tuned = Dilattn(os.path.abspath(sys.argv[1]))  # a context that reads this database
        for hint, tq, tk in ((256, 8, 16), (0, 16, 32), (1 << 16, 16, 32)):
            got, want = tuned.plan(small, backend="host", seq_len_hint=hint).cache_key, \
                lib.plan(small, backend="host", tile_q=tq, tile_k=tk).cache_key
            check(got == want, f"seq_len_hint {hint}: cache key {got}, want the {tq} x {tk} kernel's {want}")
        del os.environ["DILATTN_TUNING_DB"]
    subprocess.run(["rm", "-rf", tmp])

try:
    lib.plan({"segment_lengths": [4], "dilation_rates": [8], "num_heads": 1, "head_dim": 8})
    check(False, "invalid config accepted")
except RuntimeError as e:
    check("dilation_rates[0]" in str(e), f"error text: {e}")

report()
