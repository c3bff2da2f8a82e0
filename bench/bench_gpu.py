#!/usr/bin/env python3
"""bench_gpu.py - GPU benchmark of issue 3: TFLOP/s on effective FLOPs (DESIGN.md "Where we
are measured") for LongNet-style configs from N = 16K to 1M, beside, in the same process
on the same card and the same data:
  sdpa:   PyTorch scaled_dot_product_attention on dense attention of the same head dim
          (batched segments of the branch length: what FlashAttention does on that work)
  torch:  a PyTorch implementation of the same semantics (gather per branch, SDPA with
          lse per branch, exact LSE merge), also the correctness reference
  dilattn: our kernel through bench/dilattn.py (libdilattn.so) on torch's stream
Every variant is validated against the torch implementation before it is timed; timing
is CUDA events, warm-up, L2 flush, median of >= 10 runs.

Run (GPU machine, PyTorch installed, build carried):
  python3 bench/bench_gpu.py --lib build/libdilattn.so --out bench/results/gpu-$(git rev-parse --short HEAD).json
Prints one JSON object per measurement and writes them all (plus device and commit) to
--out; draws --plot (PNG) when matplotlib is there.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --replot needs only matplotlib
    torch = F = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dilattn import Dilattn  # noqa: E402

CONFIGS = {
    # the LongNet paper's schedule, truncated to segments that fit N
    "longnet5": dict(segment_lengths=[2048, 4096, 8192, 16384, 32768], dilation_rates=[1, 2, 4, 6, 12]),
    "longnet2": dict(segment_lengths=[2048, 4096], dilation_rates=[1, 2]),
    "dense2048": dict(segment_lengths=[2048], dilation_rates=[1]),
    # LongNet 5-branch as two fused groups (bench/results/model-fused-groups.md): the time of
    # each beside longnet5's says what the groups would gain before anyone builds them
    "longnet5_g123": dict(segment_lengths=[2048, 4096, 8192], dilation_rates=[1, 2, 4]),
    "longnet5_g45": dict(segment_lengths=[16384, 32768], dilation_rates=[6, 12]),
    # one dilated branch alone (a single plan whose heads leave rows uncovered: _clear, then
    # the branch; where_time_goes.py timed such plans 0.10 to 0.15 ms slower at 64K than
    # their share of the work, gpu-h200-58e46dd.md), and LongNet 5-branch in grouped mode
    # (each head one branch: every head of r > 1 leaves rows uncovered)
    "dilated2": dict(segment_lengths=[4096], dilation_rates=[2]),
    "longnet5_grouped": dict(segment_lengths=[2048, 4096, 8192, 16384, 32768], dilation_rates=[1, 2, 4, 6, 12],
                             mode="grouped"),
}


def longnet_offset(policy, h, r, H):
    """Offset of head h in a branch of rate r, LongNet mode (SEMANTICS.md "Modes")."""
    if policy == "mod":
        return h % r
    hp = -(-H // r) * r
    return h // (hp // r)


def effective_flops(cfg, B, N):
    """4 * B * D * sum over heads and branches of attended (query, key) pairs."""
    H, D = cfg["num_heads"], cfg["head_dim"]
    total = 0
    grouped = cfg.get("mode") == "grouped"
    k = len(cfg["segment_lengths"])
    for h in range(H):
        for i, (w, r) in enumerate(zip(cfg["segment_lengths"], cfg["dilation_rates"])):
            if grouped:
                sizes = [H // k + (1 if g < H % k else 0) for g in range(k)]
                g = next(g for g in range(k) if sum(sizes[:g + 1]) > h)
                if g != i:
                    continue
                o = g % r
            else:
                o = longnet_offset(cfg.get("offsets", "mod"), h, r, H)
            for s0 in range(0, N, w):
                seg = min(w, N - s0)
                if o >= seg:
                    continue
                L = -(-(seg - o) // r)
                total += L * (L + 1) // 2 if cfg.get("causal") else L * L
    return 4.0 * B * D * total


def torch_dilated(q, k, v, cfg):
    """Same semantics in PyTorch: per branch gather the offset class of each head, SDPA
    with lse per segment batch, then the exact LSE merge across branches. [B, N, H, D].
    Grouped mode (SEMANTICS.md "Modes"): group g of the heads takes branch g alone, offset
    g % r, and out is divided by the number of branches."""
    B, N, H, D = q.shape
    nb = len(cfg["segment_lengths"])
    grouped = cfg.get("mode") == "grouped"
    sizes = [H // nb + (1 if g < H % nb else 0) for g in range(nb)]
    starts = [sum(sizes[:g]) for g in range(nb)]
    Hkv = k.shape[2]
    rep = H // Hkv
    kx, vx = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scale = cfg.get("scale") or 1.0 / math.sqrt(D)
    outs, lses = [], []
    for i, (w, r) in enumerate(zip(cfg["segment_lengths"], cfg["dilation_rates"])):
        o_acc = torch.zeros(B, N, H, D, device=q.device, dtype=torch.float32)
        l_acc = torch.full((B, H, N), -math.inf, device=q.device, dtype=torch.float32)
        assert N % w == 0, "the torch baseline handles N multiple of w"
        nseg = N // w
        for off in range(r):
            if grouped:
                heads = list(range(starts[i], starts[i] + sizes[i])) if off == i % r else []
            else:
                heads = [h for h in range(H) if h % r == off]  # mod offsets
            if not heads or off >= w:
                continue
            hs = torch.tensor(heads, device=q.device)
            sel = lambda x: x.view(B, nseg, w, H, D)[:, :, off::r][:, :, :, hs]  # B, nseg, L, h, D
            qs, ks, vs = sel(q), sel(kx), sel(vx)
            L = qs.shape[2]
            t = lambda x: x.permute(0, 1, 3, 2, 4).reshape(B * nseg, len(heads), L, D)
            res = torch.ops.aten._scaled_dot_product_flash_attention(
                t(qs), t(ks), t(vs), 0.0, bool(cfg.get("causal")), False, scale=scale)
            out_b, lse_b = res[0], res[1]  # [B*nseg, h, L, D], [B*nseg, h, L]
            out_b = out_b.view(B, nseg, len(heads), L, D).permute(0, 1, 3, 2, 4)
            lse_b = lse_b.view(B, nseg, len(heads), L).permute(0, 2, 1, 3)
            pos = (torch.arange(nseg, device=q.device)[:, None] * w + off + r * torch.arange(L, device=q.device)[None, :]).reshape(-1)
            o_acc[:, pos[:, None], hs[None, :]] = out_b.reshape(B, nseg * L, len(heads), D).float()
            l_acc[:, hs[:, None], pos[None, :]] = lse_b.reshape(B, len(heads), nseg * L).float()
        outs.append(o_acc)
        lses.append(l_acc)
    lse = torch.logsumexp(torch.stack(lses), dim=0)
    out = torch.zeros_like(outs[0])
    for o_i, l_i in zip(outs, lses):
        wgt = torch.exp(l_i - lse).nan_to_num(0.0)  # [B, H, N]
        out += o_i * wgt.permute(0, 2, 1)[..., None]
    if grouped:  # (a head's other branches have lse -inf: the merge above kept its own)
        out /= nb
    return out.to(q.dtype), lse


def time_cuda(fn, reps=10, warmup=3):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def kernel_times(fn, reps=5):
    """The CUDA kernels fn launches, each with its launches and device time per call of fn
    (torch.profiler through CUPTI, which sees kernels launched through the driver API too):
    where the time goes (a split plan's _clear and _branch launches, say). One profiled warm-up
    step is dropped (CUPTI's start-up). Run it after the timings: a profiler session can
    slow what runs after it. An error is returned as such, not raised."""
    try:
        from torch.profiler import ProfilerActivity, profile, schedule
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=reps)) as prof:
            for _ in range(reps + 1):
                fn()
                torch.cuda.synchronize()
                prof.step()
        out = {}
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None)
            if t is None:
                t = getattr(e, "cuda_time_total", 0)
            if t > 0:
                out[e.key] = dict(launches=e.count / reps, us=t / reps)
        return out
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        return dict(error=str(e))


def _commit_beside(path):
    """The commit gpu_carry.sh wrote beside a baseline library (base/lib/commit), or None."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), "commit")) as f:
            return f.read().strip() or None
    except (OSError, TypeError):
        return None


def main():
    if torch is None:
        sys.exit("bench_gpu.py: needs PyTorch (only --replot RESULT.json OUT.png works without it)")
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libdilattn.so")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--lengths", default="16384,65536,262144,1048576")
    ap.add_argument("--configs", default="longnet5,longnet2,dense2048")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--profile", action="store_true",
                    help="also record each dilattn variant's kernels and their device time per call (torch.profiler)")
    ap.add_argument("--tiles", default="64x0:sync,128x0:sync,128x32:sync,0x0:wgmma,64x0:wgmma,128x64:wgmma,0x0:wgmma-overlap,"
                                       "128x0:wgmma-ws,128x64:wgmma-ws,192x0:wgmma-ws,0x0:wgmma-ws-p2",
                    help="extra dilattn variants timed beside the default: "
                         "TILE_QxTILE_K[:sync|:wgmma|:wgmma-overlap|:wgmma-ws|:wgmma-ws-p2|:wgmma-ws-tma][/fused|/split] (0: "
                         "planner's choice for that field; /fused, /split: that strategy where the spec allows it; "
                         "no instruction: the default one, which a library before the fix of da__default_mma "
                         "took as mma.sync once a tile or strategy was set (name it for an A/B with @lib); "
                         ":sync mma.sync, :wgmma the sm_90a wgmma path, :wgmma-overlap with the next tile's scores in flight "
                         "during the softmax, :wgmma-ws warp-specialized, :wgmma-ws-tma that with K and V copied by "
                         "TMA; a trailing @base renders it from "
                         "--base-templates instead, for an A/B of template changes in one process, @lib plans it "
                         "with --base-lib, @nopdl without programmatic dependent launches, @tiles1 / @tiles2 with "
                         "DILATTN_CTA_TILES=1 / 2 (one / two query tiles a CTA in every launch), @pairs / "
                         "@persistent with DILATTN_CTA_TILES=pairs / persistent (no persistent grid / one in every "
                         "launch of a wave of blocks), @wsM with "
                         "DILATTN_WORKSPACE_LIMIT=M MiB: a split plan in runs of tokens); one that "
                         "the planner or the device refuses is recorded as such")
    ap.add_argument("--base-lib", default=os.environ.get("DILATTN_BASE_LIB", ""),
                    help="libdilattn.so of a baseline commit for the @lib variants: the same variant planned, "
                         "rendered and compiled by that library in this process (bench/gpu_carry.sh builds "
                         "$DILATTN_BASE's into build-gpu/base/lib): an A/B of library changes, runtime included")
    ap.add_argument("--base-templates", default=os.environ.get("DILATTN_BASE_TEMPLATES", ""),
                    help="templates/ of a baseline commit for the @base variants (bench/gpu_carry.sh puts "
                         "those of $DILATTN_BASE into build-gpu/base/templates)")
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    # the device copy of the tree may carry a stale .git: DILATTN_COMMIT names the build's commit
    commit = os.environ.get("DILATTN_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lib = Dilattn(os.path.abspath(args.lib))
    base_lib = Dilattn(os.path.abspath(args.base_lib)) if args.base_lib else None
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype]
    rows = []
    for name in args.configs.split(","):
        for N in map(int, args.lengths.split(",")):
            base = CONFIGS[name]
            ws = [w for w in base["segment_lengths"] if w <= N]
            cfg = dict(segment_lengths=ws, dilation_rates=base["dilation_rates"][:len(ws)], num_heads=args.heads,
                       num_kv_heads=args.heads, head_dim=args.head_dim, dtype=args.dtype, causal=args.causal,
                       mode=base.get("mode", "longnet"))
            B = 1
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, N, args.heads, args.head_dim, device="cuda", dtype=dt) for _ in range(3))
            flops = effective_flops(cfg, B, N)
            t0 = time.perf_counter()
            plan = lib.plan(cfg, backend="cuda")
            plan_ms = (time.perf_counter() - t0) * 1e3
            out = torch.empty_like(q)
            lse = torch.empty(B, args.heads, N, device="cuda", dtype=torch.float32)
            stream = torch.cuda.current_stream().cuda_stream
            run_ours = lambda: plan.execute(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), B, N, stream=stream)
            # validate before timing
            run_ours()
            torch.cuda.synchronize()
            ref_out, ref_lse = torch_dilated(q, k, v, cfg)
            err = (out.float() - ref_out.float()).abs().max().item()
            lerr = (lse - ref_lse).abs().nan_to_num(0).max().item()
            ok = err <= 1e-2 * v.abs().max().item() and lerr <= 1e-2
            t_ours = time_cuda(run_ours, args.reps)
            t_torch = time_cuda(lambda: torch_dilated(q, k, v, cfg), max(3, args.reps // 3))
            # dense SDPA at the first branch's segment length: same head dim, same dtype
            w0 = ws[0]
            qd = q.view(B * N // w0, w0, args.heads, args.head_dim).transpose(1, 2)
            kd, vd = (x.view(B * N // w0, w0, args.heads, args.head_dim).transpose(1, 2) for x in (k, v))
            t_sdpa = time_cuda(lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=args.causal), args.reps)
            sdpa_flops = 4.0 * B * args.heads * args.head_dim * N * w0 * (0.5 if args.causal else 1.0)
            row = dict(config=name, seq_len=N, batch=B, heads=args.heads, head_dim=args.head_dim, dtype=args.dtype,
                       causal=args.causal, kernel=plan.kernel, strategy=plan.strategy, plan_create_ms=plan_ms,
                       valid=ok, max_err=err, lse_err=lerr, effective_gflop=flops / 1e9,
                       dilattn_ms=t_ours[0], dilattn_ms_min=t_ours[1], dilattn_ms_max=t_ours[2],
                       dilattn_tflops=flops / t_ours[0] / 1e9,
                       torch_ms=t_torch[0], torch_tflops=flops / t_torch[0] / 1e9,
                       sdpa_dense_ms=t_sdpa[0], sdpa_dense_tflops=sdpa_flops / t_sdpa[0] / 1e9,
                       speedup_vs_torch=t_torch[0] / t_ours[0])
            row["ratio_vs_sdpa"] = row["dilattn_tflops"] / row["sdpa_dense_tflops"]
            # the same kernel under other tile shapes, validated then timed like the default
            row["tile_variants"] = {}
            profiled = [(row, run_ours)]  # profiled after every timing of the row (--profile)
            for spec_t in filter(None, args.tiles.split(",")):
                variant, _, tag = spec_t.partition("@")
                variant, _, strat = variant.partition("/")  # /fused or /split: that strategy
                shape, _, path = variant.partition(":")
                tq, tk = (int(x) for x in shape.split("x"))
                saved = {name: os.environ.get(name)
                         for name in ("DILATTN_TEMPLATE_DIR", "DILATTN_PDL", "DILATTN_WORKSPACE_LIMIT", "DILATTN_CTA_TILES")}
                try:
                    mma = {"": 0, "sync": 1, "wgmma": 2, "wgmma-overlap": 3, "wgmma-ws": 4, "wgmma-ws-p2": 5,
                           "wgmma-ws-tma": 6}[path]
                    use = lib
                    if tag == "lib":  # @lib: the baseline's library (an A/B in one process)
                        if not base_lib:
                            raise ValueError("@lib: needs --base-lib or $DILATTN_BASE_LIB")
                        use = base_lib
                    elif tag == "nopdl":  # @nopdl: without programmatic dependent launches (read at plan creation)
                        os.environ["DILATTN_PDL"] = "0"
                    elif tag in ("tiles1", "tiles2"):  # @tiles1 / @tiles2: DILATTN_CTA_TILES (plan creation)
                        os.environ["DILATTN_CTA_TILES"] = tag[-1]
                    elif tag in ("pairs", "persistent"):  # likewise
                        os.environ["DILATTN_CTA_TILES"] = tag
                    elif tag.startswith("ws") and tag[2:].isdigit():  # @wsM: workspace limit, M MiB (plan creation)
                        os.environ["DILATTN_WORKSPACE_LIMIT"] = tag[2:] + "M"
                    elif tag:  # @base: rendered from the baseline's templates (an A/B in one process)
                        if tag != "base" or not args.base_templates:
                            raise ValueError(f"@{tag}: @base with --base-templates, @lib with --base-lib, @nopdl, "
                                             "@tiles1, @tiles2, @pairs, @persistent or @wsM")
                        os.environ["DILATTN_TEMPLATE_DIR"] = args.base_templates
                    fmq = {"": 0, "fused": 1, "split": 1 << 30}[strat]  # da_plan_options.fused_min_queries
                    vplan = use.plan(cfg, backend="cuda", tile_q=tq, tile_k=tk, fused_min_queries=fmq, cuda_mma=mma)
                except Exception as e:  # noqa: BLE001 - recorded, not fatal
                    row["tile_variants"][spec_t] = dict(error=str(e))
                    continue
                finally:
                    for var, value in saved.items():  # (not name: the config's; not k, v: the tensors)
                        if value is None:
                            os.environ.pop(var, None)
                        else:
                            os.environ[var] = value
                run_v = lambda p=vplan: p.execute(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), B, N, stream=stream)
                run_v()
                torch.cuda.synchronize()
                verr = (out.float() - ref_out.float()).abs().max().item()
                t_v = time_cuda(run_v, args.reps)
                row["tile_variants"][spec_t] = dict(kernel=vplan.kernel, strategy=vplan.strategy, valid=verr <= 1e-2 * v.abs().max().item(),
                                                    max_err=verr, ms=t_v[0], tflops=flops / t_v[0] / 1e9,
                                                    workspace_bytes=vplan.workspace_size(B, N))
                if args.profile:
                    profiled.append((row["tile_variants"][spec_t], run_v))
            for target, fn in profiled if args.profile else []:
                target["profile"] = kernel_times(fn)
            print(json.dumps(row), flush=True)
            rows.append(row)
            del q, k, v, out, lse, ref_out, ref_lse
            torch.cuda.empty_cache()
    result = dict(device=dev, commit=commit, torch=torch.__version__, cuda=torch.version.cuda, rows=rows,
                  base_templates=args.base_templates or None, base_lib=args.base_lib or None,
                  base_commit=os.environ.get("DILATTN_BASE_COMMIT") or None,
                  base_lib_commit=_commit_beside(args.base_lib))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        json.dump(result, open(args.out, "w"), indent=1)
    if args.plot:
        plot(result, args.plot)


def plot(result, path):
    """Draw a result (as written to --out) into path: TFLOP/s against N per config."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in sorted({r["config"] for r in rows}):
        rs = [r for r in rows if r["config"] == name]
        line, = ax.plot([r["seq_len"] for r in rs], [r["dilattn_tflops"] for r in rs], "o-", label=f"dilattn {name}")
        ax.plot([r["seq_len"] for r in rs], [r["torch_tflops"] for r in rs], "x--", color=line.get_color(),
                label=f"torch {name}")
        # the wgmma variants that ran and validated, in the config's colour
        for ki, key in enumerate(sorted({k for r in rs for k in r.get("tile_variants", {}) if ":wgmma" in k})):
            pts = [(r["seq_len"], r["tile_variants"][key]["tflops"]) for r in rs
                   if r["tile_variants"].get(key, {}).get("valid")]
            if pts:
                ax.plot(*zip(*pts), ("^-.", "v:", "s--")[ki % 3], color=line.get_color(),
                        label=f"dilattn {name} {key}")
    # SDPA runs once per row: one point per N (the median of the configs' runs)
    ns = sorted({r["seq_len"] for r in rows})
    ax.plot(ns, [statistics.median(r["sdpa_dense_tflops"] for r in rows if r["seq_len"] == n) for n in ns], "k:",
            label="SDPA dense (median of its runs)")
    r0 = rows[0]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (tokens)")
    ax.set_ylabel("TFLOP/s (effective)")
    ax.set_title(f"{result['device']}, {r0['dtype']}, H={r0['heads']}, D={r0['head_dim']}, "
                 f"{'causal' if r0['causal'] else 'full'}, commit {result['commit']}")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--replot":  # bench_gpu.py --replot RESULT.json OUT.png
        plot(json.load(open(sys.argv[2])), sys.argv[3])
    else:
        main()
