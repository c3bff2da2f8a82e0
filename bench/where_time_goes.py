#!/usr/bin/env python3
"""where_time_goes.py - where a config's time goes on the GPU, against what SDPA does on the
same shape of work (issue 3's open gaps: LongNet 5-branch, causal or not, and causal
LongNet 2-branch, at 0.65 to 0.86 of SDPA on an H200 at 117dd5d).

--mode time (default), one process, one card, CUDA events, medians:
  * the config's default plan, end to end;
  * each branch alone: a one-branch config (w_i, r_i) of the same heads, N and mask, so
    the sum of the branches against the whole says what the merge and the launches cost,
    and each branch's TFLOP/s says which branches run slow (a short grid, ragged
    segments of w / r = 2730.67);
  * SDPA on batched segments of 2048 (what bench_gpu.py compares against) under each
    backend PyTorch has (flash, cuDNN, efficient), so the comparison names its kernel.
  Prints and writes (--out) one JSON object.
--mode ncu: each target once after a warm-up, between torch.cuda.profiler start and stop,
  for `ncu --profile-from-start off ...` (gpu_session.sh profile): the plan's kernels, then
  SDPA's on the same N.

Run (device): python3 bench/where_time_goes.py --lib build-gpu/libdilattn.so --configs longnet5 --causal
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import CONFIGS, effective_flops, time_cuda  # noqa: E402
from dilattn import Dilattn  # noqa: E402


def make_cfg(args, segs, rates):
    return dict(segment_lengths=segs, dilation_rates=rates, mode="longnet", offsets="mod", causal=args.causal,
                num_heads=args.heads, num_kv_heads=args.heads, head_dim=args.head_dim, dtype=args.dtype)


def sdpa_backends():
    """(name, context manager factory) for each SDPA backend this PyTorch has."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("default", None)]
    out = [("default", None)]
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        be = getattr(SDPBackend, name, None)
        if be is not None:
            out.append((name.lower(), lambda be=be: sdpa_kernel([be])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libdilattn.so")
    ap.add_argument("--mode", choices=("time", "ncu"), default="time")
    ap.add_argument("--configs", default="longnet5")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seq-len", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lib = Dilattn(args.lib)
    B, N, H, D = 1, args.seq_len, args.heads, args.head_dim
    dt = getattr(torch, args.dtype)
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, H, D, device="cuda", dtype=dt) for _ in range(3))
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    w0 = 2048
    qd, kd, vd = (x.view(B * N // w0, w0, H, D).transpose(1, 2) for x in (q, k, v))
    sdpa = lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=args.causal)  # noqa: E731
    sdpa_flops = 4.0 * B * H * D * N * w0 * (0.5 if args.causal else 1.0)
    result = dict(bench="where_time_goes", device=torch.cuda.get_device_name(), seq_len=N, heads=H, head_dim=D,
                  dtype=args.dtype, causal=args.causal, commit=os.environ.get("DILATTN_COMMIT"), configs=[])

    def run_of(cfg):
        plan = lib.plan(cfg, backend="cuda")
        fn = lambda: plan.execute(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),  # noqa: E731
                                  lse.data_ptr(), B, N, stream=stream)
        fn()  # compiles
        torch.cuda.synchronize()
        return plan, fn

    if args.mode == "ncu":
        targets = []
        for name in filter(None, args.configs.split(",")):
            c = CONFIGS[name]
            targets.append(run_of(make_cfg(args, c["segment_lengths"], c["dilation_rates"]))[1])
        targets.append(sdpa)
        for fn in targets:  # warm
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for fn in targets:
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return

    for name in filter(None, args.configs.split(",")):
        c = CONFIGS[name]
        cfg = make_cfg(args, c["segment_lengths"], c["dilation_rates"])
        plan, fn = run_of(cfg)
        whole = time_cuda(fn, args.reps)[0]
        row = dict(config=name, kernel=plan.kernel, strategy=plan.strategy, ms=whole,
                   tflops=effective_flops(cfg, B, N) / whole / 1e9, branches=[])
        total = 0.0
        for w, r in zip(c["segment_lengths"], c["dilation_rates"]):
            bcfg = make_cfg(args, [w], [r])
            bplan, bfn = run_of(bcfg)
            t = time_cuda(bfn, args.reps)[0]
            total += t
            fl = effective_flops(bcfg, B, N)
            row["branches"].append(dict(w=w, r=r, segment=-(-min(w, N) // r), kernel=bplan.kernel,
                                        strategy=bplan.strategy, ms=t, tflops=fl / t / 1e9,
                                        share_of_flops=fl / effective_flops(cfg, B, N)))
        row["branches_sum_ms"] = total
        row["whole_over_sum"] = whole / total
        result["configs"].append(row)
    result["sdpa"] = []
    for name, ctx in sdpa_backends():
        try:
            if ctx is None:
                t = time_cuda(sdpa, args.reps)[0]
            else:
                with ctx():
                    t = time_cuda(sdpa, args.reps)[0]
            result["sdpa"].append(dict(backend=name, ms=t, tflops=sdpa_flops / t / 1e9))
        except Exception as e:  # noqa: BLE001 - a backend this shape or card does not take
            result["sdpa"].append(dict(backend=name, error=str(e).splitlines()[0][:200]))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
