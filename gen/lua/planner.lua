-- planner.lua - spec -> plan: every constant a template uses is derived here, once, with
-- a note saying what it is. Templates only lay the plan out as code.
--
-- The spec table comes from C (gen/render.c) with the fields of the config file, plus
-- spec_hash (hex SHA-256 of the canonical spec JSON). opts: tile_q, tile_k,
-- fused_min_queries (tunables; the defaults suit the host target), mma ("sync" or
-- "wgmma": the CUDA tensor-core instruction; default mma.sync).
local M = {}

-- A plan the options cannot have (a tile shape, instruction or layout the kernels do not
-- serve): the caller's choice, not a generator fault. The error object is a table, so
-- the sandbox reports it without a traceback and as DA_ERR_INVALID_ARGUMENT (lua_sandbox.c).
local function refuse(msg) error({ refused = msg }) end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- Offset of head h in branch i (SEMANTICS.md "Modes"), both policies.
local function longnet_offset(policy, h, r, H)
  if policy == "mod" then return h % r end
  local hp = ((H + r - 1) // r) * r
  return h // (hp // r)
end

-- Heads of group g in grouped mode: groups are contiguous, group g has H // k heads
-- plus one if g < H % k.
local function grouped_branch_of_heads(H, k)
  local out, h = {}, 0
  for g = 0, k - 1 do
    local size = H // k + ((g < H % k) and 1 or 0)
    for _ = 1, size do
      out[h] = g
      h = h + 1
    end
  end
  return out
end

local dtype_info = {
  float32 = { c = "float", short = "f32", load = "da_ld_f32", store = "da_st_f32" },
  float16 = { c = "uint16_t", short = "f16", load = "da_ld_f16", store = "da_st_f16" },
  bfloat16 = { c = "uint16_t", short = "bf16", load = "da_ld_bf16", store = "da_st_bf16" },
}

-- Short tag of the sparsity layout for kernel names.
local function layout_tag(sp)
  if not sp then return "" end
  local l = sp.layout
  if l == "dense" then return "_spdense" end
  if l == "local_window" then return string.format("_splw_b%d_w%d", sp.block, sp.window) end
  if l == "global_local" then
    return string.format("_spgl_b%d_w%d_g%d", sp.block, sp.window, sp.global)
  end
  if l == "dilated_sparse" then return string.format("_spds_b%d_s%s", sp.block, table.concat(sp.strides, "_")) end
  if l == "random" then return string.format("_sprnd_b%d", sp.block) end
  return string.format("_spexp_b%d", sp.block)
end

function M.plan(spec, target, opts)
  opts = opts or {}
  local p = { target = target }
  local w, r = spec.segment_lengths, spec.dilation_rates
  local nb = #w
  p.num_branches = nb
  p.H, p.Hkv, p.D = spec.num_heads, spec.num_kv_heads, spec.head_dim
  p.group = p.H // p.Hkv -- query heads per kv head
  p.mode, p.offsets, p.causal = spec.mode, spec.offsets, spec.causal
  p.dtype = dtype_info[spec.dtype]
  p.dtype_name = spec.dtype
  p.scale = spec.scale or (1.0 / math.sqrt(spec.head_dim))
  p.scale_is_default = spec.scale == nil

  -- Branch table: segment length, rate, longest dilated segment.
  p.branches = {}
  for i = 1, nb do
    p.branches[i] = { index = i - 1, w = w[i], r = r[i], lmax = (w[i] + r[i] - 1) // r[i] }
  end

  -- Per head: the (branch, offset) pairs it attends with.
  p.heads = {}
  if spec.mode == "grouped" then
    local g_of = grouped_branch_of_heads(p.H, nb)
    for h = 0, p.H - 1 do
      local g = g_of[h]
      p.heads[h + 1] = { { branch = g, offset = g % r[g + 1] } }
    end
    p.out_divisor = nb -- grouped output is divided by the number of groups
  else
    for h = 0, p.H - 1 do
      local list = {}
      for i = 1, nb do
        list[i] = { branch = i - 1, offset = longnet_offset(spec.offsets, h, r[i], p.H) }
      end
      p.heads[h + 1] = list
    end
    p.out_divisor = 1
  end
  p.max_branches_per_head = (spec.mode == "grouped") and 1 or nb
  -- Per branch: the heads that use it, a contiguous range (every head in LongNet mode, its
  -- group in grouped mode), so a branch launch's grid holds only those (CUDA: its y is
  -- b.nheads from head b.head0; grouped LongNet 5-branch at H = 8 had launched 4 CTAs
  -- without a query for each one with, every CTA with a whole SM's shared memory). A
  -- branch no head uses is not launched (nheads 0).
  p.branch_heads_all = true -- (every branch every head: the kernels' head decode stays by a constant)
  for _, b in ipairs(p.branches) do
    local first, last, count = nil, nil, 0
    for h, list in ipairs(p.heads) do
      for _, e in ipairs(list) do
        if e.branch == b.index then first, last, count = first or h - 1, h - 1, count + 1 end
      end
    end
    assert(count == 0 or last - first + 1 == count, "planner: the heads of a branch are not contiguous")
    b.head0, b.nheads = first or 0, count
    -- (the CUDA branch kernels take a head's slot of the branch as the branch's index, or
    -- 0 in grouped mode: kernel.cu.tpl DA_HEAD_SLOT)
    for h = b.head0, b.head0 + b.nheads - 1 do
      local e = p.heads[h + 1][(spec.mode == "grouped") and 1 or (b.index + 1)]
      assert(e and e.branch == b.index, "planner: a head's slot of a branch is not the one the kernels take")
    end
    p.branch_heads_all = p.branch_heads_all and b.head0 == 0 and b.nheads == p.H
  end

  -- Sparsity.
  local sp = spec.sparsity
  p.sparse = sp ~= nil and sp.layout ~= "dense"
  p.layout = sp and sp.layout or "none"
  p.block = sp and sp.block or 1
  if sp then
    p.window, p.global, p.strides = sp.window or 0, sp.global or 0, sp.strides or {}
    p.seed = sp.seed or 0
    -- random: keep pairs whose top 53 hash bits fall below floor(density * 2^53)
    -- (exact: scaling by a power of two is exact in binary64).
    if sp.layout == "random" then
      p.random_threshold = math.tointeger(math.floor(sp.density * 9007199254740992.0))
    end
  end
  if p.layout == "explicit" then
    for _, b in ipairs(p.branches) do b.nblocks = (b.lmax + p.block - 1) // p.block end
  end

  -- Tiling (DESIGN.md decision 4). g = gcd of segment lengths; R = lcm of rates. A tile
  -- of positions c, c+R, ... inside one g-window shares its key set in every branch.
  local g = w[1]
  for i = 2, nb do g = gcd(g, w[i]) end
  local R = 1
  for i = 1, nb do
    local f = R // gcd(R, r[i])
    -- no fused tile can hold two queries past g: stop before the product can overflow
    -- (rates near 2^40 have lcms past 2^64, which wrapped to small ones)
    if f > g // r[i] then R = g + 1 break end
    R = f * r[i]
  end
  p.window_g, p.lcm_r = g, R
  p.tile_q = opts.tile_q or 32
  p.tile_k = opts.tile_k or 64
  local fused_min = opts.fused_min_queries or 16
  -- fused: one online softmax across all branches, one write of out and lse.
  -- split: per-branch tiles, partial (out, lse) merged exactly in a workspace.
  -- single: a head has one branch (grouped mode or one branch): per-branch tiles, no merge.
  if p.max_branches_per_head == 1 then
    p.strategy = "single"
  elseif R <= g and g // R >= fused_min then
    p.strategy = "fused"
  else
    p.strategy = "split"
  end
  if target == "cuda" then M.plan_cuda(p, opts) end -- (may turn fused into split)
  -- Workspace floats per token per concurrently processed (batch, head): the split
  -- strategy keeps a running (out[D], lse) per position.
  p.ws_floats_per_token = (p.strategy == "split") and (p.D + 1) or 0
  -- split: each branch launch merges its rows' partial (out, lse) into the fp32 workspace;
  -- a row's first covering launch writes the workspace instead of merging, and its last
  -- writes out and lse instead of the workspace (control.inc.tpl da_split_side): no pass
  -- clears the workspace and none copies it to out. A branch every head uses with r = 1
  -- covers every row, so it goes first (cuda_backend.c): its rows no other branch covers
  -- (half of LongNet 5-branch's) go straight to out.
  -- A split plan may run its branch launches over the tokens in runs (cuda_backend.c, a
  -- workspace of one run's rows) of a whole number of run_period tokens, the lcm of the
  -- w: no segment of any branch crosses a run. Past 2^40 (the longest sequence) 2^41,
  -- one run whatever N.
  p.run_period = 1
  for _, b in ipairs(p.branches) do
    local f = p.run_period // gcd(p.run_period, b.w)
    if f > (1 << 40) // b.w then p.run_period = 1 << 41 break end -- (before multiplying: no overflow)
    p.run_period = f * b.w
  end
  p.split_first = -1
  if p.strategy == "split" then
    assert(p.mode ~= "grouped") -- one branch per head: single
    for _, b in ipairs(p.branches) do
      if b.r == 1 then p.split_first = b.index break end
    end
    -- launch order: split_first, then the others in branch order
    for _, b in ipairs(p.branches) do
      local k = b.index
      b.split_rank = (k == p.split_first) and 0 or ((p.split_first >= 0 and k < p.split_first) and k + 1 or k)
    end
  end

  -- split and single: out = 0, lse = -inf where no branch of a row's head covers it (a
  -- _clear pass first). A branch with r = 1 covers every row of the heads that use it, so
  -- where every head has one, the branch launches write every row and nothing has to clear
  -- out first (a whole pass over out fewer)
  p.clear_rows = false
  if p.strategy ~= "fused" then
    for _, list in ipairs(p.heads) do
      local covered = false
      for _, e in ipairs(list) do
        if r[e.branch + 1] == 1 then covered = true end
      end
      if not covered then p.clear_rows = true end
    end
  end

  -- Kernel name: encodes the spec; the spec hash makes it unique for fields the
  -- readable part leaves out (scale, seed, density).
  local ws, rs = {}, {}
  for i = 1, nb do ws[i], rs[i] = tostring(w[i]), tostring(r[i]) end
  local mode = (spec.mode == "grouped") and "grp" or ("ln" .. spec.offsets)
  local readable = string.format("da_fwd_%s_w%s_r%s_h%d_%d_d%d_%s%s%s", mode, table.concat(ws, "_"),
    table.concat(rs, "_"), p.H, p.Hkv, p.D, p.dtype.short, spec.causal and "_causal" or "",
    layout_tag(sp))
  -- cut where many long w, r or strides would pass what symbols and file names hold (the
  -- runtime's symbol buffers of 300 and 400 bytes with suffixes, NAME_MAX): the hash keeps
  -- the name unique
  p.name = readable:sub(1, 160) .. "_" .. spec.spec_hash:sub(1, 12)
  if p.wgmma then
    p.name = p.name .. (p.wg_overlap and "_wgmmao" or p.ws_pbuf2 and "_wgmmaw2" or p.tma and "_wgmmat"
      or p.wg_ws and "_wgmmaw" or "_wgmma")
  end -- sources can share a folder
  return p
end

-- The query rows of the tiles a strategy forms, and those rows padded to whole tiles of tq:
-- fused tiles hold one residue class of a g-window, per-branch tiles one offset class of
-- a segment.
local function tile_rows(p, strategy, tq)
  local rows, padded = 0, 0
  local function add(count) rows, padded = rows + count, padded + (count + tq - 1) // tq * tq end
  if strategy == "fused" then
    for c = 0, p.lcm_r - 1 do add((p.window_g - c + p.lcm_r - 1) // p.lcm_r) end
  else
    for _, b in ipairs(p.branches) do add(b.lmax) end
  end
  return rows, padded
end

-- Fraction of the rows of those tiles that are real.
function M.tile_fill(p, strategy, tq)
  local rows, padded = tile_rows(p, strategy, tq)
  return padded > 0 and rows / padded or 1
end

-- Fraction of the consumer warpgroups (64 rows each, tq / 64 a tile) those tiles leave
-- without a query row: the 64-row blocks of the tiles, less those a query reaches.
function M.idle_share(p, strategy, tq)
  local _, padded = tile_rows(p, strategy, tq)
  local _, used = tile_rows(p, strategy, 64)
  return padded > 0 and (padded - used) / padded or 0
end

-- Default CUDA query tile of the mma path: 128 rows (32 per warp) for D <= 64 when the
-- tiles the strategy forms lose at most 1/8 of their rows to padding, else 64. With 16
-- rows per warp each ldmatrix of K or V (512 bytes of shared memory, ~4 cycles of an SM's
-- bandwidth) feeds 2 mma, so the loop is bound by shared memory; 32 rows feed 4. On an
-- H200 (bench/results/gpu-h200.md) 128-row tiles were 5 to 12% faster where they fill,
-- 15% slower on the padded fused LongNet 5-branch tiling (which plan_cuda sends to split).
-- (A fused plan past 4096 residue classes runs split, plan_cuda; its fill is not computed.)
function M.cuda_default_tile_q(p, strategy)
  strategy = strategy or p.strategy
  if p.D > 64 or (strategy == "fused" and p.lcm_r > 4096) then return 64 end
  return M.tile_fill(p, strategy, 128) >= 7 / 8 and 128 or 64
end

-- CUDA specifics (DESIGN.md decision 4). Three compute paths share the control structure:
--   mma:  fp16/bf16 with D % 16 == 0 and D <= 128: 4 warps x 16 query rows, mma.sync
--         m16n8k16 (fp32 accumulate), ldmatrix, cp.async double buffering; smem rows
--         padded by 8 halves so ldmatrix is free of bank conflicts.
--   wgmma (opts.mma = "wgmma"; sm_90a only, compiled for sm_90a by the runtime): fp16/bf16
--         with D = 64 or 128: one or two warpgroups (4 warps x 16 rows = 64 query rows each), S and
--         O by wgmma.mma_async from 128-byte-swizzled shared-memory tiles (da_device.cuh),
--         cp.async double buffering as on the mma path. Not the default until a GPU
--         session has run it (bench/results).
--   simt: everything else (float32 inputs, odd head dims): TPR threads per query row,
--         fp32 FMAs, K/V tiles converted to fp32 in shared memory.
-- The grid is (query tiles, heads, batch): a branch launch's heads are those that use the
-- branch (b.head0, b.nheads); the runtime sizes x from N with the facts here.
-- tensor maps a wgmma-ws-tma kernel takes as parameters (128 bytes each; runtime/cuda_args.h
-- DA_CUDA_TMAPS_MAX)
local TMA_MAPS_MAX = 96

function M.plan_cuda(p, opts)
  local D = p.D
  -- the fused kernel keeps a residue class's first tile for each of the lcm_r classes in
  -- constant memory (RES_TILE_START): past 4096 classes the plan runs split (every
  -- decision below sees that strategy)
  if p.strategy == "fused" and p.lcm_r > 4096 then p.strategy = "split" end
  local wg = opts.mma == "wgmma" or opts.mma == "wgmma-overlap" or opts.mma == "wgmma-ws" or opts.mma == "wgmma-ws-p2"
    or opts.mma == "wgmma-ws-tma"
  if opts.mma and not wg and opts.mma ~= "sync" then
    refuse("cuda: mma must be \"sync\", \"wgmma\", \"wgmma-overlap\", \"wgmma-ws\", \"wgmma-ws-p2\" or \"wgmma-ws-tma\"")
  end
  -- wgmma-overlap: the next key tile's S = Q K^T in flight during this tile's softmax
  -- (two score register sets, three K / V stages)
  p.wg_overlap = opts.mma == "wgmma-overlap"
  -- wgmma-ws: warp-specialized (a producer warpgroup loads, the consumer warpgroups take
  -- turns on the tensor cores); the key walk runs on both sides without a CTA barrier
  p.wg_ws = opts.mma == "wgmma-ws" or opts.mma == "wgmma-ws-p2" or opts.mma == "wgmma-ws-tma"
  -- wgmma-ws-p2: the same with P in two register sets, so a tile's exps run while the P V
  -- of the tile before still reads the other (FlashAttention-3 computes them under that
  -- P V too); 64 more registers of P, which the two- and three-warpgroup consumers at 216
  -- and 160 registers do not have: 128-row tiles only, not under a sparse layout
  p.ws_pbuf2 = opts.mma == "wgmma-ws-p2"
  -- wgmma-ws-tma: the same with the producer's K / V copies by the tensor memory
  -- accelerator (cp.async.bulk.tensor, one thread, a tensor map per branch, offset class
  -- and tensor, kernel.cu.tpl produce_tma) in place of 128 threads' cp.async; the maps are
  -- kernel parameters (p.tma_maps, set below once the strategy is final). Not under a
  -- sparse layout (its producer-side verdict reductions run over the producer warpgroup).
  p.tma = opts.mma == "wgmma-ws-tma"
  if p.tma and p.sparse then
    refuse("cuda wgmma-ws-tma: not under a sparse layout (use wgmma-ws)")
  end
  p.stages = (p.wg_overlap or p.wg_ws) and 3 or 2
  if wg and (p.dtype_name == "float32" or (D ~= 64 and D ~= 128)) then
    refuse("cuda wgmma path: needs float16 or bfloat16 with head_dim 64 or 128")
  end
  if (p.dtype_name ~= "float32") and D % 16 == 0 and D <= 128 then
    p.cuda_path = wg and "wgmma" or "mma"
    p.wgmma = wg
    p.threads = 128
    -- 4 warps x 16 or 32 query rows. 32 rows (two m16 tiles per warp, as FlashAttention-2
    -- does) let every K and V fragment read from shared memory feed 4 mma instead of 2;
    -- the default takes them up to D = 64 where the query tiles are rarely partial.
    -- wgmma: one or two warpgroups of 64 rows (m64 tiles) sharing the K / V tiles: 128 rows
    -- where the tiles fill as the mma rule has it (any head dim), since each K / V byte
    -- read from L2 then feeds twice the FLOPs: at 64 rows a CTA reads 1/64 byte per FLOP,
    -- 6 TB/s at 400 TFLOP/s, about what an H100's L2 delivers.
    local function default_tq(strategy)
      if not wg then return M.cuda_default_tile_q(p, strategy) end
      if (strategy or p.strategy) == "fused" and p.lcm_r > 4096 then return 64 end
      -- three consumer warpgroups at D = 64 without a causal mask: 1.03x to 1.17x the two
      -- at N = 65536 on an H200 (dense 2048, LongNet 2- and 5-branch); causal (64-key tiles
      -- there) 0.69x to 0.79x, D = 128 0.90x (bench/results/gpu-h200-ebf7fe1.md)
      if p.wg_ws and D == 64 and not p.causal and not p.sparse and not p.ws_pbuf2 then return 192 end
      if p.wg_ws then return 128 end -- two consumer warpgroups: the variant's point
      return M.tile_fill(p, strategy or p.strategy, 128) >= 7 / 8 and 128 or 64
    end
    p.tile_q = opts.tile_q or default_tq()
    -- Split is taken when its query tiles are fuller than the fused ones by more than 5
    -- points of rows (the strategy rule of M.plan knows no tile sizes). Measured on an
    -- H200 at N = 65536 (dilattn tune, bench/results/gpu-h200.md): the LongNet schedule
    -- w = 2048..32768, r = 1..12 (171 queries per residue class) took 2.31 / 3.41 ms split
    -- (128-row tiles) against 3.38 / 4.33 ms fused (64-row) causal / full at D = 64, and
    -- 7.04 against 7.91 ms at D = 128 (64-row tiles for both). Defaults only: an explicit
    -- tile_q or fused_min_queries keeps its strategy.
    -- Three consumer warpgroups (192-row tiles, warp-specialized, no sparse layout): each
    -- strategy's fill at the grain it runs at. Where at least 1 in 20 of its warpgroups
    -- would have no query row they leave their tiles (ws_skip_idle) and issue nothing, so
    -- the 64-row warpgroups count; else the whole tiles. Same 5 points. Timed on an H200 at
    -- 58e46dd (bench/results/gpu-h200-58e46dd.md): LongNet 5-branch (fused 0.89 of its
    -- warpgroups' rows, every tile's third warpgroup 43 of 64; split 0.96 of its tiles' rows,
    -- 3.7% of its warpgroups idle) ran split 1.06x to 1.12x faster than fused over N = 16K
    -- to 1M; LongNet 2-branch (fused 1.00: its padding is whole idle warpgroups; split
    -- 0.97) fused 1.04x to 1.06x faster than split, and the 5-branch's groups w = 2048..8192
    -- (1.00 against 0.97) and w = 16384, 32768 (0.97 against 0.95) fused 1.07x and 1.16x
    -- to 1.25x at 64K. The rule before compared whole 192-row tiles (0.89 against 0.96 to
    -- 0.97 for both LongNets) by 10 points, set while split plans still had _init / _finish
    -- passes (bench/results/gpu-h200-ebf7fe1.md), and kept all four fused. 128-row tiles
    -- keep the whole-tile rule: untimed there, and idle warpgroups would also cost a causal
    -- plan its two tiles a CTA (plan_lpt).
    if p.strategy == "fused" and not opts.tile_q and not opts.fused_min_queries then
      local split_tq = default_tq("split")
      local function fill(strategy, tq)
        if p.wg_ws and not p.sparse and tq == 192 and M.idle_share(p, strategy, tq) >= 0.05 then
          return M.tile_fill(p, strategy, 64)
        end
        return M.tile_fill(p, strategy, tq)
      end
      if fill("split", split_tq) - fill("fused", p.tile_q) > 0.05 then
        p.strategy = "split"
        p.tile_q = split_tq
      end
    end
    if p.ws_pbuf2 and (p.tile_q ~= 128 or p.sparse) then
      refuse("cuda wgmma-ws-p2: needs tile_q 128 and no sparse layout (its second register set of P)")
    end
    if p.tile_q == 192 and p.wg_ws and p.sparse then
      refuse("cuda wgmma-ws: tile_q 192 (three consumer warpgroups) is not available under a sparse layout "
        .. "(its reductions' named barriers and registers)")
    end
    if p.tile_q ~= 64 and p.tile_q ~= 128 and not (p.tile_q == 192 and p.wg_ws) then
      refuse(wg and "cuda wgmma path: tile_q must be 64 or 128 (one or two warpgroups of 64 rows; 192, three, "
        .. "with wgmma-ws)" or "cuda mma path: tile_q must be 64 or 128 (4 warps x 16 or 32 rows)")
    end
    if wg then p.threads = p.tile_q * 2 + (p.wg_ws and 128 or 0) end -- a warpgroup (128 threads) per 64 rows
    -- two consumer warpgroups and the producer: 168 registers each at launch (384 threads);
    -- the producer gives up all but 40 so each consumer may use 232 (128 x 40 + 256 x 232
    -- = 384 x 168: the consumers' setmaxnreg.inc would wait forever on a smaller pool, so
    -- the runtime refuses a compile with another count, launch)
    -- A sparse layout's predicate in the producer's key walk needs more: 88 and 208 there
    -- (40 spilled 252 bytes on a global-local layout, 72 up to 208 on dilated-sparse ones
    -- with 3 or 4 strides; at D = 128 the consumers then hold 64-key tiles: with 128 keys
    -- 216 registers spilled up to 128 bytes). Dozens of strides still spill.
    -- With 64 rows (one consumer warpgroup, 256 threads) two CTAs share an SM: 128
    -- registers each at launch, 40 + 216 after setmaxnreg, and the stages that fit half the
    -- shared memory (not under a sparse layout: 88 + 168 registers spilled 576 bytes at
    -- D = 64 with 128-key tiles, 108 at D = 128 with 64). One CTA's prologue (Q load, pipeline
    -- fill) and epilogue then overlap the other's key loop, which a CTA alone per SM leaves
    -- idle (about a quarter of a consumer warp's time at N = 65536 on dense 2048-token
    -- segments, ncu source counters on an H200, bench/results/gpu-h200-094e085.md)
    -- Three consumer warpgroups (tile_q 192, FlashAttention-3's shape at D <= 64; not under
    -- a sparse layout): 512 threads at 128 registers, 32 for the producer and 160 for each
    -- consumer (ptxas, sm_90a: 24 + 160 spilled 80 to 112 bytes in the producer, 40 + 152 96
    -- to 120 in the consumers), 128-key tiles at D = 64 but causal (48 bytes spilled there),
    -- 64 otherwise; a third warp per scheduler to issue a softmax while the others wait,
    -- and a CTA's fixed costs spread over half as many rows again.
    p.min_blocks = 1
    if p.wg_ws and p.tile_q == 192 then
      p.setmaxnreg = {32, 160, launch = 128}
    elseif p.wg_ws and p.tile_q == 128 then
      p.setmaxnreg = p.sparse and {88, 208, launch = 168} or {40, 232, launch = 168}
    elseif p.wg_ws and not p.sparse then
      p.min_blocks = 2
      p.setmaxnreg = {40, 216, launch = 128}
    end
    -- idle consumer warpgroups leave their tiles (kernel.cu.tpl DA_KEPT_WGS) where the full
    -- windows' tiles leave at least 1 in 20 of them idle (LongNet 2-branch in 192-row tiles:
    -- 1 in 9); elsewhere the key loop keeps its constant hand-over (7 to 25 SASS instructions
    -- a tile fewer). Not under a sparse layout: its reductions and verdicts stay as they are.
    p.ws_skip_idle = p.wg_ws and p.tile_q > 64 and not p.sparse and M.idle_share(p, p.strategy, p.tile_q) >= 0.05
    -- Tensor maps: three for each class x < r of each branch the kernel runs (all of them in
    -- the fused kernel, BR_TMAP0 a branch's first class; the launched branch's in a branch
    -- kernel): K and V of the positions x mod r, and V of the offset-x class of every whole
    -- segment, a segment a coordinate, so a tile's rows past its class's end read zeros
    -- there. At most TMA_MAPS_MAX (12 KiB of parameters a launch, which the runtime encodes
    -- per execution); past that the plan keeps wgmma-ws's copies.
    if p.tma then
      local sum_r, max_r = 0, 0
      for _, b in ipairs(p.branches) do
        b.tmap0 = p.strategy == "fused" and sum_r or 0
        sum_r, max_r = sum_r + b.r, math.max(max_r, b.r)
      end
      p.tma_maps = 3 * (p.strategy == "fused" and sum_r or max_r)
      if p.tma_maps > TMA_MAPS_MAX then p.tma, p.tma_maps = false, nil end
    end
    if p.setmaxnreg then
      -- the consumers' setmaxnreg.inc waits until the pool (threads x launch) has their registers
      assert(128 * p.setmaxnreg[1] + (p.threads - 128) * p.setmaxnreg[2] <= p.threads * p.setmaxnreg.launch)
    end
    if p.tile_q == 128 and D > 96 and not wg then
      refuse("cuda mma path: tile_q 128 needs head_dim <= 96 (the output and Q fragments of two m16 tiles would spill)")
    end
    -- keys per tile: what keeps scores + output + Q fragments in the register file
    -- (ptxas, sm_90: 16 rows per warp: 64 keys (226 registers at D = 128); 32 rows per warp:
    -- 64 keys up to D = 64 but under sparse layouts (207 registers at D = 32; at D = 64 227
    -- to 254 with Q from shared memory), 32 keys at D = 96 (254). At D = 64, 128 x 64 issues
    -- 711 instructions per 64 keys on the full-tile path against 2 x 395 for 128 x 32 (SASS,
    -- bench/results/issue-slots.md), and was 8 to 15% faster on an H200 while it spilled.
    -- D = 128 with 64 keys: 226 registers, 85 KiB of shared memory (opt-in above 48 KiB),
    -- 1.11x faster than 32 keys on an H200 (dilattn tune, LongNet 2-branch causal).
    if wg then
      -- scores (TK / 2 registers), packed P (TK / 4) and output (D / 2): 128 keys at D = 64
      -- (214 registers, 74 KiB of shared memory: 2 CTAs per SM by registers), 64 at D = 128
      -- (179 registers, 82 KiB: 2 per SM)
      -- warp-specialized: the consumers hold 232 registers (setmaxnreg), room for 128 keys
      -- at D = 128 too (three stages there: 225 KiB of shared memory); not under a sparse
      -- layout (208 registers, see setmaxnreg below)
      local k128
      if p.wg_overlap then
        k128 = false
      elseif p.tile_q == 192 then -- the three-warpgroup consumers' 160 registers
        k128 = D <= 64 and not p.causal
      else
        k128 = D <= 64 or (p.wg_ws and not p.sparse and p.tile_q == 128)
      end
      p.tile_k = opts.tile_k or (k128 and 128 or 64)
    elseif p.tile_q == 128 then
      -- not under a sparse layout above D = 32: the layout's predicate and verdicts leave no
      -- room (255 registers and 140 to 308 bytes spilled at D = 48 / 64 with 8 to 12
      -- dilated-sparse strides; 215 to 231 and none with 32 keys)
      p.tile_k = opts.tile_k or ((D <= 32 or (D <= 64 and not p.sparse)) and 64 or 32)
    else
      p.tile_k = opts.tile_k or 64
    end
    p.warp_mtiles = wg and 1 or p.tile_q // 64
    -- K / V / Q copies with one chunk column per thread and pointers stepped by constants
    -- (~9.5 instructions a copy against ~32, templates' load_rows), not under a sparse layout:
    -- its kernels sit at the register limit and ptxas keeps the pointers across the key loop
    -- (227 -> 240 registers at D = 64, 128 x 32; the warp-specialized producer spilled)
    p.stepped_copies = not p.sparse
    if wg and (D > 64 or p.wg_overlap) and p.tile_k > 64 and not p.wg_ws then
      refuse("cuda wgmma path: tile_k must be at most 64 at head_dim 128 and when overlapped (scores, P and "
        .. "output would spill)")
    end
    -- Q fragments from shared memory, read per key tile (as FlashAttention-2 does), where
    -- keeping them in registers would spill: 32-row warps with 64 or more keys at D >= 64
    -- (ptxas, sm_90: 128 x 64 at D = 64 spilled 112 bytes with Q in registers). Costs
    -- MT * D / 16 ldmatrix.x4 per warp per key tile.
    p.q_smem = not wg and p.tile_q == 128 and ((p.tile_k >= 64 and D >= 64) or D > 64)
    if p.tile_k % 16 ~= 0 or p.tile_k < 16 or p.tile_k > 128 then
      refuse("cuda mma path: tile_k must be a multiple of 16 in [16, 128]")
    end
    if wg then
      p.smem_row = D -- swizzled, unpadded; 1024 bytes more to align the tiles
      if p.wg_ws then -- as many stages as fit, up to 4 (227 KiB less the static shared memory:
        -- mbarriers, and under a sparse layout two buffers of partial-tile verdicts; with two
        -- CTAs per SM, half of the SM's 228 KiB less the 1 KiB the driver reserves per CTA)
        -- (768 where run_tiles may run, causal plans and those without a sparse layout: room
        -- for its ring of tile references and their mbarriers beside the stages')
        local static = ((p.causal or not p.sparse) and 768 or 256) + (p.sparse and 2 * p.tile_q * (p.tile_k // p.block + 2) or 0)
        local limit = p.min_blocks == 2 and 233472 // 2 - 1024 or 232448
        p.smem_room = limit - static -- dynamic shared memory a CTA may take (plan_lpt: a second Q tile)
        p.stages = 4
        while p.stages > 2 and 1024 + (p.tile_q + 2 * p.stages * p.tile_k) * D * 2 > limit - static do
          p.stages = p.stages - 1
        end
        if 1024 + (p.tile_q + 2 * p.stages * p.tile_k) * D * 2 > limit - static then
          refuse(string.format("cuda wgmma-ws: tile_q 64 runs two CTAs per SM, and two stages of %d-key tiles at "
            .. "head_dim %d do not fit half the shared memory (use tile_k 64)", p.tile_k, D))
        end
      end
      p.smem_bytes = 1024 + (p.tile_q + 2 * p.stages * p.tile_k) * D * 2
    else
      p.smem_row = D + 8 -- halves per shared-memory row (padding breaks bank conflicts)
      p.smem_bytes = (p.tile_q + 4 * p.tile_k) * p.smem_row * 2 -- Q + 2 stages of K and V
    end
  else
    p.cuda_path = "simt"
    local tpr = 1
    while tpr * 32 < D and tpr < 16 do tpr = tpr * 2 end
    p.tpr = tpr -- threads per query row
    p.dpt = (D + tpr - 1) // tpr -- head dims per thread
    p.threads = 128
    p.tile_q = 128 // tpr
    local tk = 64
    while tk > 8 and 2 * tk * D * 4 > 48 * 1024 do tk = tk // 2 end
    p.tile_k = opts.tile_k or tk
    p.smem_bytes = 2 * p.tile_k * D * 4 -- K and V tiles in fp32
  end
  -- fused grid: tiles of one g-window; residue c has ceil((g - c) / R) queries.
  if p.strategy == "fused" then
    local start, acc = {}, 0
    for c = 0, p.lcm_r - 1 do
      start[c + 1] = acc
      local count = (p.window_g - c + p.lcm_r - 1) // p.lcm_r
      acc = acc + (count + p.tile_q - 1) // p.tile_q
    end
    start[p.lcm_r + 1] = acc
    p.residue_tile_start = start -- first tile of each residue within a window
    p.tiles_per_window = acc
  end
  for _, b in ipairs(p.branches) do b.tiles_per_segment = (b.lmax + p.tile_q - 1) // p.tile_q end
  M.plan_lpt(p)
  -- dilated indices in 32 bits when every branch's segment allows (fewer registers)
  p.idx_bits = 32
  for _, b in ipairs(p.branches) do
    if b.lmax + p.tile_k >= 2 ^ 31 then p.idx_bits = 64 end
  end
end

-- Causal tiles differ in work (a row attends to the keys before it), so the grid's tail
-- is short only when the longest tiles start first. A unit is one (batch, head, window)
-- of the fused grid or (batch, head, segment) of a branch launch; the blocks of each group
-- of p.lpt_group (b.lpt_group) consecutive units run depth-major: every unit's heaviest
-- tile, then every unit's next, ... (kernel.cu.tpl da_lpt_unit; the last group takes the
-- units left over). A group spans about 264 tiles (two waves of one-tile CTAs of a 132-SM
-- H100 / H200, one wave of the two-tile CTAs of p.ws_tiles), so the
-- waves draw from one group's tiles (longest first within it) while its K / V stay in L2
-- (17 LongNet 2-branch windows: about 17 MiB at D = 64). Modeled (bench/lpt_model.py: list
-- scheduling on 132 SMs, a tile = 2 + its key tiles, 128-row tiles, H = 8), the grid's
-- SMs stay busy 0.839 / 0.954 / 0.988 of the time to its last tile at N = 16K / 64K / 256K
-- for LongNet 2-branch causal in the window-by-window order before, 0.932 / 0.984 / 0.996
-- this way (1.11x / 1.03x / 1.01x); 5-branch causal 1.06x / 1.02x / 1.00x. Not measured
-- on a GPU yet. Groups of 9 to 1000 units model the same within 1%.
-- A fused window's tiles go heaviest first by p.lpt_order (tile of each depth), their
-- expected key tiles over the heads and the windows of a period of the segments (up to
-- 16); past 4096 tiles a window, latest first.
-- Warp-specialized causal kernels run several consecutive tiles of that order a CTA
-- (kernel.cu.tpl run_tiles: p.ws_tiles > 1): the producer loads the next tile's K / V
-- while the consumers write this one's out. So do the split and single plans' without a
-- causal mask in 128-row tiles, and in `wgmma-ws-tma`'s 192-row ones: a tile a CTA paid
-- its cold start (the decode, Q and the first K from memory with the tensor cores idle)
-- and left its epilogue without loads in flight at every tile (the non-causal LongNet
-- 5-branch plan is split: 0.86 of SDPA at 1M on the H200 at 30da0bd). Not where
-- warpgroups leave their tiles (ws_skip_idle: the empty barriers count the kept ones),
-- under a sparse layout (its verdict buffers), in the fused kernels without a causal mask
-- (their grid order is plan_lpt_heads'), nor without one in 64-row tiles (two CTAs an SM
-- overlap there already).
-- In 128-row tiles (p.ws_ring; not wgmma-ws-p2) the tiles go through a ring of slots
-- without end, so a launch of many waves runs as a persistent grid (a CTA an SM drawing
-- tiles from a counter: cuda_backend.c launch_main), else a->tpc a CTA; its producer
-- finds the tiles after the first two itself: 56 registers, the consumers 224 (with 40,
-- 40 to 108 bytes spilled). Elsewhere two tiles a CTA at most, the loops unrolled: over
-- a ring, the 192-row consumers spilled 168 to 260 bytes for the loop's count (160
-- registers; the producer 32), wgmma-ws-p2's 48 to 56 with 224 registers, 64-row tiles 16
-- at D = 128. In 192-row tiles the split epilogue merges a row at a time (kernel.cu.tpl
-- tile_end's BATCH: with two, the 160-register consumers spilled 948 bytes); with
-- wgmma-ws's copies they spilled 160 bytes with one: not without a causal mask. Untimed.
-- Where shared memory holds a second Q tile beside the stages (p.q_bufs = 2: the D = 64
-- defaults; not the D = 128 defaults, whose three stages of 128-key tiles leave no 32 KiB)
-- the tiles alternate between the two and the consumers request the next tile's Q as a
-- tile starts, so it lands during this one's key loop instead of stalling its start.
-- Untimed.
local LPT_CTAS = 2 * 132
-- Without a causal mask a fused tile still costs what the branches covering its residue
-- class attend: class c of a window is in branch j for head h where its position in j's
-- segment falls on the head's offset, so a head's classes differ (LongNet 5-branch, mod
-- offsets: the class on a head's offsets in all five branches attends 10240 keys at
-- N = 16K, most others 2048). In grid order the heavy tiles land in the last wave too.
-- Where a head's tiles differ, the fused grid runs longest first as the causal one does
-- (groups of units depth-major, da_lpt_unit), with each head's own order of a window's
-- tiles (p.lpt_order_h: LPT_TILE_H, heaviest first by their key tiles over a period of
-- windows). One tile a CTA (the pairs of run_tiles are the causal kernels'). Not under a
-- sparse layout (its skipped blocks are not weighed), nor past LPT_HEAD_ENTRIES heads x
-- tiles (the table's constant memory). Modeled (bench/lpt_model.py, 132 SMs, a tile = 2 +
-- its key tiles, H = 8, 192-row tiles): the SMs busy 0.777 / 0.945 / 0.986 of the time to
-- the last tile at N = 16K / 64K / 256K in grid order, 0.967 / 0.988 / 0.997 this way
-- (LongNet 5-branch: 1.25x / 1.05x / 1.01x; 2-branch 1.10x / 1.03x / 1.01x). The H200
-- measured LongNet 5-branch at 308 / 362 / 386 TFLOP/s over those lengths (117dd5d). Untimed.
local LPT_HEAD_ENTRIES = 8192

-- The windows after which every branch's segments line up again (at most 16): the tiles'
-- weights are averaged over them.
local function window_period(p)
  local period = 1
  for _, b in ipairs(p.branches) do
    period = period // gcd(period, b.w // p.window_g) * (b.w // p.window_g)
    if period >= 16 then return 16 end
  end
  return period
end

local function plan_lpt_heads(p, group)
  if p.strategy ~= "fused" or p.sparse or #p.branches < 2 or p.H * p.tiles_per_window > LPT_HEAD_ENTRIES then
    return
  end
  local period = window_period(p)
  local R, TK, orders, varies = p.lcm_r, p.tile_k, {}, false
  for h = 1, p.H do
    local weight, order = {}, {}
    for c = 0, R - 1 do
      local w = 0
      for win = 0, period - 1 do
        for _, e in ipairs(p.heads[h]) do
          local b = p.branches[e.branch + 1]
          local rel = (win * p.window_g) % b.w + c -- the class's first position in the segment
          if rel % b.r == e.offset then w = w + (b.w - e.offset + b.r - 1) // b.r // TK + 1 end
        end
      end
      for t = p.residue_tile_start[c + 1], p.residue_tile_start[c + 2] - 1 do
        weight[t] = w
        order[#order + 1] = t
        varies = varies or w ~= weight[0]
      end
    end
    table.sort(order, function(a, b2)
      if weight[a] ~= weight[b2] then return weight[a] > weight[b2] end
      return a < b2
    end)
    orders[h] = order
  end
  if not varies then return end
  p.lpt = true
  p.lpt_group = group(p.tiles_per_window)
  for _, b in ipairs(p.branches) do b.lpt_group = group(b.tiles_per_segment) end
  p.lpt_order_h = orders
end

function M.plan_lpt(p)
  -- (warp-specialized branch kernels without a causal mask too, in 128-row tiles: their
  -- grid in this order is what run_tiles decodes; a segment's tiles weigh the same there,
  -- but its last. Not in 192-row tiles: run_tiles' loop over a ring of tiles holds its
  -- count across the key loop, and those consumers' 160 registers have none to spare: 168
  -- to 260 bytes spilled)
  local ws_pairs = p.wg_ws and not p.sparse and not p.ws_skip_idle
  p.lpt = p.causal or (ws_pairs and p.strategy ~= "fused" and (p.tile_q == 128 or p.tile_q == 192 and p.tma))
  p.ws_tiles = 1
  p.q_bufs = 1
  local per_sm = p.min_blocks or 1
  local function group(tiles) return math.max(1, (LPT_CTAS * per_sm + tiles - 1) // tiles) end
  if not p.lpt then return plan_lpt_heads(p, group) end
  if ws_pairs then
    p.ws_tiles = 2
    p.ws_ring = p.tile_q == 128 and not p.ws_pbuf2
    -- (the producer finds the tiles after the first two: see above)
    if p.ws_ring and p.setmaxnreg and p.setmaxnreg[1] == 40 and p.setmaxnreg[2] == 232 then
      p.setmaxnreg = {56, 224, launch = p.setmaxnreg.launch}
    end
    local q_bytes = p.tile_q * p.D * 2
    if p.smem_bytes + q_bytes <= p.smem_room then
      p.q_bufs = 2
      p.smem_bytes = p.smem_bytes + q_bytes
    end
  end
  for _, b in ipairs(p.branches) do b.lpt_group = group(b.tiles_per_segment) end
  if p.strategy ~= "fused" then return end
  p.lpt_group = group(p.tiles_per_window)
  if p.tiles_per_window > 4096 then return end
  -- heads per (branch, class of the segment position mod r) they cover
  local cover = {}
  for i, b in ipairs(p.branches) do
    cover[i] = {}
    for x = 0, b.r - 1 do cover[i][x] = 0 end
    for _, list in ipairs(p.heads) do
      for _, e in ipairs(list) do
        if e.branch == b.index then cover[i][e.offset] = cover[i][e.offset] + 1 end
      end
    end
  end
  local period = window_period(p)
  local R, TQ, TK = p.lcm_r, p.tile_q, p.tile_k
  local weight, order = {}, {}
  for c = 0, R - 1 do
    local count = (p.window_g - c + R - 1) // R
    for t = p.residue_tile_start[c + 1], p.residue_tile_start[c + 2] - 1 do
      local j0 = (t - p.residue_tile_start[c + 1]) * TQ
      local last = j0 + math.min(TQ, count - j0) - 1 -- the tile's last row in the class
      local wsum = 0
      for win = 0, period - 1 do
        for i, b in ipairs(p.branches) do
          local rel = (win * p.window_g) % b.w + c -- the class's first position in the segment
          local n = cover[i][rel % b.r]
          -- its dilated index, plus that of the tile's last row; keys up to it (causal)
          if n > 0 then wsum = wsum + n * ((rel // b.r + last * (R // b.r) + TK) // TK) end
        end
      end
      weight[t] = wsum
      order[#order + 1] = t
    end
  end
  -- heaviest first; among equals the later tile (the order before weights)
  table.sort(order, function(a, b2)
    if weight[a] ~= weight[b2] then return weight[a] > weight[b2] end
    return a > b2
  end)
  p.lpt_order = order
end

return M
