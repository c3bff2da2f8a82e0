#!/usr/bin/env python3
"""host_overhead_gpu.py - the host time of one da_plan_execute on the CUDA backend, against
the real driver: argument checks, stream check, pool allocation, the tensor maps and the
launches, timed on the host while the GPU runs behind. bench_execute.c times the same on
the fake driver, which launches nothing; this one says what the real driver's calls cost
(cuLaunchKernel, cuTensorMapEncodeTiled), which the fake's do not.

Per config: calls with one k ("same": a wgmma-ws-tma plan's tensor maps come from its memo
after the first) and with k at 65 addresses in turn ("cycling": one more than the memo
keeps, so every call encodes its maps), median and min microseconds a call over REPS runs
of CALLS calls, each run after the GPU has drained (few enough calls that the launch queue
never fills: the host never waits for the GPU inside a run). The ctypes call itself is
timed too (da_plan_strategy, which does nothing) so it can be taken off.

    python3 bench/host_overhead_gpu.py --lib build/libdilattn.so bench/configs/*.json
    # without a GPU, with the fake driver and host buffers (a check of this script):
    DILATTN_CUDA_LIB=build/tests/libfake_cuda.so python3 bench/host_overhead_gpu.py --fake ...
Prints one JSON object a line.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dilattn import DaArgs, Dilattn  # noqa: E402

CYCLE = 65


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/libdilattn.so")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--fake", action="store_true", help="host buffers for the fake driver (no torch)")
    ap.add_argument("configs", nargs="+")
    a = ap.parse_args()
    lib = Dilattn(a.lib)
    L = lib.lib
    if a.fake:
        import numpy as np

        def alloc(n):
            buf = np.zeros(n + 64, dtype=np.uint16)
            base = buf.ctypes.data
            off = (-base) % 128 // 2
            return buf, base + 2 * off

        def drain():
            pass
    else:
        import torch

        def alloc(n):
            t = torch.zeros(n + 64, dtype=torch.float16, device="cuda")
            base = t.data_ptr()
            return t, base + ((-base) % 128)

        def drain():
            torch.cuda.synchronize()
    N = a.seq_len
    for path in a.configs:
        with open(path) as f:
            cfg = json.load(f)
        H, Hkv, D = cfg["num_heads"], cfg.get("num_kv_heads", cfg["num_heads"]), cfg["head_dim"]
        plan = lib.plan(cfg, backend="cuda")
        keep = []
        q = alloc(N * H * D); o = alloc(N * H * D); k = alloc(N * Hkv * D + 8 * CYCLE); v = alloc(N * Hkv * D)
        keep += [q, o, k, v]
        lse_buf = alloc(2 * N * H)
        keep.append(lse_buf)
        wsb = plan.workspace_size(1, N)
        ws = alloc(wsb // 2 + 1) if wsb else None
        keep.append(ws)
        st = lambda rows, h: (ctypes.c_int64 * 3)(rows * h * D, h * D, D)
        for caller in (0, 1):
            if caller and not wsb:
                continue
            for cycling in (0, 1):
                args = DaArgs(q[1], k[1], v[1], o[1], lse_buf[1], 1, N, st(N, H), st(N, Hkv), st(N, Hkv), st(N, H),
                              ws[1] if caller else None, wsb if caller else 0, None)
                ks = [k[1] + (16 * (i % CYCLE) if cycling else 0) for i in range(a.calls)]
                h, ref = plan.handle, ctypes.byref(args)
                times = []
                for rep in range(a.reps + 1):
                    drain()
                    t0 = time.perf_counter_ns()
                    for kp in ks:
                        args.k = kp
                        if L.da_plan_execute(h, ref) != 0:
                            raise SystemExit(f"{path}: {lib.error()}")
                    t1 = time.perf_counter_ns()
                    if rep:  # (the first: warm-up, its maps encoded)
                        times.append((t1 - t0) / a.calls / 1000)
                drain()
                print(json.dumps({"config": path, "seq_len": N, "strategy": plan.strategy, "kernel": plan.kernel,
                                  "workspace": "caller" if caller else "pool", "args": "cycling" if cycling else "same",
                                  "us_median": round(statistics.median(times), 3), "us_min": round(min(times), 3)}),
                      flush=True)
        t0 = time.perf_counter_ns()
        for _ in range(a.calls * a.reps):
            L.da_plan_strategy(plan.handle)
        print(json.dumps({"config": path, "ctypes_call_us": round((time.perf_counter_ns() - t0) / a.calls / a.reps / 1000, 3)}),
              flush=True)
        del plan


if __name__ == "__main__":
    main()
