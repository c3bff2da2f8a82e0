#!/usr/bin/env python3
"""lpt_model.py - how full a causal grid keeps the SMs until its last tile ends (model).

A causal tile's work grows with its rows' positions (a row attends to the keys before it),
and the hardware starts a grid's blocks in order as SMs free up, so the grid ends early
only when its longest tiles start first. This models that with list scheduling: `--sms`
SMs run one CTA each (the warp-specialized kernels' occupancy); the blocks start in grid
order, each on the SM that frees first, and a tile costs `--c0` (its prologue and epilogue,
in key tiles) plus the key tiles it attends to, summed over the branches that cover it.
Where the kernel runs WS_TILES tiles a CTA (kernel.cu.tpl run_tiles), a CTA costs the sum
of its tiles, each after the first with `--c1` in place of c0 (its Q load and epilogue
stay exposed, its K / V pipeline fill does not: a guess, the GPU has to say).

The tiles and their order come from the kernel the generator writes (`dilattn gen
--target cuda --mma wgmma-ws`): TILES_PER_WINDOW, RES_TILE_START, LPT_TILE and the group
of the fused kernel, BR_TILES_PER_SEG and BR_LPT_GROUP of the branch launches, HEAD_OFF.
Each tile's key tiles are counted per head and window here, exactly (the planner orders a
window's tiles by their average over heads and windows). Three schedules are compared:

  window: the order before plan_lpt, a tile a CTA: grid x (a window's or segment's tiles
          latest first, windows in turn; without a causal mask in order), then heads, then
          the batch;
  lpt:    the kernel's order (kernel.cu.tpl da_lpt_unit: groups of units depth-major), a
          tile a CTA;
  kernel: that order with the kernel's tiles a CTA (WS_TILES, else 1; --ws-tiles: another
          count).
  (--pair-waves W, default 1 as the runtime does (cuda_backend.c launch_main): a launch runs
  WS_TILES a CTA only where that leaves it W waves of CTAs, else one; 0: every launch.)
  persistent: not built, for comparison: a CTA per SM taking the next tile of that order
          as it frees (a tile counter), each CTA's first tile at c0 and later ones at c1;
  ahead:  the same, each CTA claiming its next tile as it starts one (a kernel that finds
          tile k + 1 at tile k's start, to request its Q early);
  stride / snake: a CTA per SM (per launch) without a counter: CTA c takes tiles c, c + G,
          c + 2G, ... of the order (snake: every other round reversed).

Without a causal mask (fused plans of several branches: a head's residue classes are
covered by different branches, plan_lpt_heads) the tiles are ordered by LPT_TILE_H, each
head's own order, and `ideal` sorts the whole grid heaviest first.
A split plan's branch launches are modeled as one list in launch order (programmatic
dependent launches let the next start as SMs free). Prints one JSON object per config and
length: efficiency = work (at c0 a tile) / (SMs x the time the last tile ends), and each
schedule's speed-up over the window order.
Run: python3 bench/lpt_model.py bench/configs/longnet2_causal.json [--lengths 16384,65536] [--dilattn build/dilattn]
"""
import argparse
import glob
import heapq
import json
import os
import re
import subprocess
import sys
import tempfile


def render(dilattn, cfg_path):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([dilattn, "gen", cfg_path, "--target", "cuda", "--arch", "sm_90a", "--mma", "wgmma-ws-tma", "-o", d],
                       check=True, stdout=subprocess.DEVNULL)
        (path,) = glob.glob(os.path.join(d, "*.cu"))
        with open(path) as f:
            return f.read()


def table(src, name):
    m = re.search(r"\b" + name + r"\[[^\]]*\](?:\[[^\]]*\])? = \{ ([^;]*) \};", src)
    if not m:
        return None
    return [int(x) for x in re.findall(r"-?\d+", m.group(1))]


def define(src, name):
    return int(re.search(r"#define " + name + r" (\d+)", src).group(1))


def makespan(costs, sms, later=0.0):
    """When the last of `costs` ends, each started on the SM that frees first. later > 0: a
    persistent grid (a CTA per SM taking the next tile as it frees, a tile counter), each
    SM's tiles after its first `later` cheaper (c0 - c1); tiles of cost 0 (none) skipped."""
    free = [(0.0, 0)] * sms  # (time free, tiles run)
    end = 0.0
    for c in costs:
        if later and c <= 0:
            continue
        t, n = heapq.heappop(free)
        t += c - (later if n else 0.0)
        end = max(end, t)
        heapq.heappush(free, (t, n + 1))
    return end


def makespan_ahead(costs, sms, later):
    """A persistent grid whose CTAs claim their next tile as they start one (the decode one
    tile ahead: a ring of tiles, the next one's Q requested at this one's start): the
    first sms tiles start at once, each claiming the next in order; a CTA then runs its
    claimed tile when it frees, claiming another as it starts it."""
    costs = [c for c in costs if c > 0]
    q = []  # (start time, tiles run, cost of the tile it starts)
    nxt = 0
    for i in range(min(sms, len(costs))):
        heapq.heappush(q, (0.0, 0, costs[i]))
    nxt = min(sms, len(costs))
    end = 0.0
    while q:
        t, n, c = heapq.heappop(q)
        t_end = t + c - (later if n else 0.0)
        end = max(end, t_end)
        if nxt < len(costs):  # claimed at t, run at t_end
            heapq.heappush(q, (t_end, n + 1, costs[nxt]))
            nxt += 1
    return end


def lpt_blocks(units, tpu, group):
    """(unit, depth) of each block in grid order, as da_lpt_unit decodes them."""
    last = max(units // group, 1) - 1  # the last group takes the remainder too
    for l in range(units * tpu):
        g0 = min(l // (group * tpu), last) * group
        rem = l - g0 * tpu
        n = group if g0 < last * group else units - g0
        yield g0 + rem % n, rem // n


def ctas(costs, per, c0, c1):
    """CTA costs of tile costs (c0 + key tiles each; 0: no tile) run `per` a CTA."""
    out = []
    for i in range(0, len(costs), per):
        real = [c for c in costs[i:i + per] if c > 0]
        out.append(sum(real) - (len(real) - 1) * (c0 - c1) if real else 0.0)
    return out


def static_ctas(costs, sms, c0, c1, snake):
    """CTA costs of a launch's tiles on min(n, sms) CTAs that each walk the grid order with
    a stride of the CTA count (no tile counter): CTA c takes tiles c, c + G, c + 2G, ...;
    snake: every other round in reverse (G - 1 - c), so no CTA takes the heaviest of each."""
    G = min(len(costs), sms)
    out = [0.0] * G
    seen = [0] * G
    for i, c in enumerate(costs):
        rnd, k = divmod(i, G)
        if snake and rnd % 2:
            k = G - 1 - k
        if c > 0:
            out[k] += c - ((c0 - c1) if seen[k] else 0.0)
            seen[k] += 1
    return out


def model(cfg, src, N, B, sms, c0, c1, ws_tiles=0, pair_waves=0.0, persist_waves=0.0):
    w, r = cfg["segment_lengths"], cfg["dilation_rates"]
    H = cfg["num_heads"]
    TQ, TK = define(src, "TQ"), define(src, "TK")
    nb = len(w)
    offs = table(src, "HEAD_OFF")
    off = [[offs[h * nb + j] for j in range(nb)] for h in range(H)]
    order = {}
    if "_fused(" in src:
        R, G, TPW = define(src, "LCM_R"), define(src, "WIN_G"), define(src, "TILES_PER_WINDOW")
        start = table(src, "RES_TILE_START")
        lpt = table(src, "LPT_TILE")
        m = re.search(r"da_lpt_unit\(l, units, TILES_PER_WINDOW, (\d+),", src)
        group = int(m.group(1)) if m else 1
        nwin = N // G

        causal = bool(cfg.get("causal"))

        def cost(h, win, tt):
            c = max(i for i in range(R) if start[i] <= tt)
            count = (G - c + R - 1) // R
            j0 = (tt - start[c]) * TQ
            nq = min(TQ, count - j0)
            keys = 0
            for j in range(nb):
                rel = (win * G) % w[j] + c
                if rel % r[j] == off[h][j]:
                    if causal:
                        a_last = (rel - off[h][j]) // r[j] + (j0 + nq - 1) * (R // r[j])
                    else:  # every key of the row's dilated segment
                        s0 = win * G - (win * G) % w[j]
                        a_last = (min(w[j], N - s0) - off[h][j] + r[j] - 1) // r[j] - 1
                    keys += (a_last + 1 + TK - 1) // TK
            return c0 + keys

        if causal:
            order["window"] = [cost(h, x // TPW, TPW - 1 - x % TPW) for b in range(B) for h in range(H)
                               for x in range(nwin * TPW)]
            order["lpt"] = [cost(u % H, u // H % nwin, lpt[d] if lpt else TPW - 1 - d)
                            for u, d in lpt_blocks(B * H * nwin, TPW, group)]
        else:
            # window: the grid in order (x window-major, then heads). lpt: the kernel's order,
            # the causal kernels' unit groups (da_lpt_unit), each head's tiles of a window by
            # LPT_TILE_H
            order["window"] = [cost(h, x // TPW, x % TPW) for b in range(B) for h in range(H) for x in range(nwin * TPW)]
            tab = table(src, "LPT_TILE_H")  # the kernel's order (plan_lpt_heads); none: grid order
            order["lpt"] = ([cost(u % H, u // H % nwin, tab[u % H * TPW + d]) for u, d in lpt_blocks(B * H * nwin, TPW, group)]
                            if tab else order["window"])
            order["ideal"] = sorted(order["window"], reverse=True)
        launch_lists = [order["lpt"]]
    else:
        tps, groups = table(src, "BR_TILES_PER_SEG"), table(src, "BR_LPT_GROUP")
        first = next((j for j in range(nb) if r[j] == 1), None)
        launches = ([first] if first is not None else []) + [j for j in range(nb) if j != first]
        order["window"], order["lpt"], launch_lists = [], [], []
        for br in launches:
            nseg = N // w[br]

            def cost(h, a0):
                L = (w[br] - off[h][br] + r[br] - 1) // r[br]
                if a0 >= L:
                    return 0.0
                a_last = min(a0 + TQ, L) - 1 if cfg.get("causal") else L - 1  # without a mask: the whole segment
                return c0 + (a_last + TK) // TK

            mine = [cost(h, (tps[br] - 1 - x % tps[br]) * TQ) for b in range(B) for h in range(H) for x in range(nseg * tps[br])]
            order["window"] += mine
            launch_lists.append([cost(u % H, (tps[br] - 1 - d) * TQ) for u, d in lpt_blocks(B * H * nseg, tps[br], groups[br])]
                                if groups else mine)  # no LPT table: grid order
            order["lpt"] += launch_lists[-1]
    work = sum(order["window"])
    assert abs(work - sum(order["lpt"])) < 1e-6, "the two orders hold different tiles"
    m = re.search(r"#define WS_TILES (\d+)", src)
    per = ws_tiles or (int(m.group(1)) if m else 1)
    # a CTA's tiles are one launch's; --pair-waves W: a launch runs `per` a CTA only where
    # that leaves it W waves of CTAs or more (else one tile a CTA)
    kernel = [c for lst in launch_lists
              for c in ctas(lst, per if len(lst) >= pair_waves * per * sms else 1, c0, c1)]
    ends = {k: makespan(v, sms) for k, v in (("window", order["window"]), ("lpt", order["lpt"]), ("kernel", kernel))}
    ends["persistent"] = makespan(order["lpt"], sms, later=c0 - c1)
    ends["ahead"] = makespan_ahead(order["lpt"], sms, c0 - c1)
    # the runtime's rule (cuda_backend.c launch_main): a launch of persist_waves waves of
    # tiles or more runs persistent (`ahead`) where the kernel has the ring (DA_RING), the
    # others as the kernel schedule; launches in order, each starting as the one before ends
    ring = re.search(r"#define DA_RING 1", src) is not None  # run_tiles' ring: persistent grids allowed
    if persist_waves:
        t = 0.0
        for lst in launch_lists:
            if ring and len(lst) >= persist_waves * sms:
                t += makespan_ahead(lst, sms, c0 - c1)
            else:
                t += makespan(ctas(lst, per if len(lst) >= pair_waves * per * sms else 1, c0, c1), sms)
        ends["rule"] = t
        t = 0.0
        for lst in launch_lists:
            t += makespan(ctas(lst, per if len(lst) >= pair_waves * per * sms else 1, c0, c1), sms)
        ends["kernel_seq"] = t
    for k, snake in (("stride", False), ("snake", True)):
        ends[k] = makespan([c for lst in launch_lists for c in static_ctas(lst, sms, c0, c1, snake)], sms)
    if "ideal" in order:  # every tile of the grid heaviest first: list scheduling's best order
        ends["ideal"] = makespan(order["ideal"], sms)
    eff = {k: work / (sms * t) for k, t in ends.items()}
    return dict(seq_len=N, batch=B, heads=H, tiles=len(order["lpt"]), ws_tiles=per, sms=sms, c0=c0, c1=c1,
                efficiency_window=round(eff["window"], 4), efficiency_lpt=round(eff["lpt"], 4),
                efficiency_kernel=round(eff["kernel"], 4), speedup_lpt=round(ends["window"] / ends["lpt"], 4),
                speedup_kernel=round(ends["window"] / ends["kernel"], 4),
                efficiency_persistent=round(eff["persistent"], 4),
                speedup_persistent_over_kernel=round(ends["kernel"] / ends["persistent"], 4),
                speedup_ahead_over_kernel=round(ends["kernel"] / ends["ahead"], 4),
                **({"speedup_rule_over_kernel": round(ends["kernel_seq"] / ends["rule"], 4)} if "rule" in ends else {}),
                speedup_stride_over_kernel=round(ends["kernel"] / ends["stride"], 4),
                speedup_snake_over_kernel=round(ends["kernel"] / ends["snake"], 4),
                **({"efficiency_ideal": round(work / (sms * ends["ideal"]), 4)} if "ideal" in ends else {}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--lengths", default="16384,65536,262144")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--c0", type=float, default=2.0)
    ap.add_argument("--c1", type=float, default=1.0)
    ap.add_argument("--ws-tiles", type=int, default=0, help="tiles a CTA in the kernel schedule (default: the kernel's WS_TILES)")
    ap.add_argument("--pair-waves", type=float, default=1.0,
                    help="a launch runs several tiles a CTA only where that leaves it this many waves of CTAs")
    ap.add_argument("--persist-waves", type=float, default=0.0,
                    help="also model the runtime's rule: launches of this many waves of tiles or more persistent "
                         "(speedup_rule_over_kernel, launch by launch)")
    ap.add_argument("--dilattn", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "dilattn"))
    a = ap.parse_args()
    for path in a.configs:
        with open(path) as f:
            cfg = json.load(f)
        if not cfg.get("causal") and len(cfg["segment_lengths"]) == 1:
            sys.exit(f"{path}: one branch, not causal: every tile costs the same")
        src = render(a.dilattn, path)
        for N in (int(x) for x in a.lengths.split(",")):
            print(json.dumps(dict(config=os.path.basename(path), **model(cfg, src, N, a.batch, a.sms, a.c0, a.c1, a.ws_tiles, a.pair_waves, a.persist_waves))))


if __name__ == "__main__":
    main()
