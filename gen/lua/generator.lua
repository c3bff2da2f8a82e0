-- generator.lua - entry point of the Lua side: spec -> plan (planner.lua) -> source text
-- (template.lua over templates/<target>/kernel.*.tpl). Called from gen/render.c.
-- Returns the source (with the cache-key placeholder in its banner), the kernel name
-- and the plan facts the C runtime needs.
local planner = require_module("planner")
local template = require_module("template")

local M = {}

M.KEY_PLACEHOLDER = "@DA_CACHE_KEY@"

-- Float literal that round-trips the binary64 value exactly.
local function f64(x)
  if x ~= x or x == math.huge or x == -math.huge then error("non-finite float in plan", 2) end
  local s = string.format("%.17g", x)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

-- uint64 literal of a Lua integer holding the value's bit pattern.
local function u64(x)
  return (string.format("0x%016x", x))
end

-- Division by the constant d > 0 as a multiply, an add and a shift, for dividends
-- 0 <= x < 2^62 (positions, indices and block numbers: N and every extent are at most
-- 2^40): the initializer {m, s} of control.inc.tpl's da_fdiv, da_fq(x, f) =
-- (umulhi64(x, m) + x) >> s. With s = ceil(log2 d) and M = floor(2^(64 + s) / d) + 1,
-- M * d lies in (2^(64 + s), 2^(64 + s) + 2^s], so floor(M * x / 2^(64 + s)) = floor(x / d)
-- for every x < 2^64 (Hacker's Delight, 2nd ed., 10-9); M is in (2^64, 2^65), and
-- M * x / 2^64 = x + (M - 2^64) * x / 2^64, so m = M - 2^64 and the add (x < 2^63: no
-- carry out) make it exact with 64-bit words, powers of two and d = 1 (m = 1) included,
-- with no branch. A 64-bit division on the GPU is a call of ~80 instructions (a 32-bit
-- one ~20, after a test of the high words).
-- The same with 32-bit words (m32) for 0 <= x < 2^32 where d < 2^31: (umulhi32(x, m32) + x)
-- >> s, the add in 64 bits; one multiply where the 64-bit form takes four, for the
-- divisions made where registers are scarcest (control.inc.tpl da_fq32). m32 is 0 for a
-- larger d (never used).
local function fdiv_magic(d, bits)
  local s = 0
  while (1 << s) < d do s = s + 1 end
  -- the low `bits` bits of floor(2^(bits + s) / d), bit by bit (r < d < 2^62: 2r + 1
  -- fits; the quotient's bit `bits`, always set, falls off)
  local q, r = 0, 0
  for i = bits + s, 0, -1 do
    r = 2 * r + (i == bits + s and 1 or 0)
    q = q << 1
    if r >= d then r, q = r - d, q | 1 end
  end
  if bits == 32 then q = q & 0xffffffff end
  return q + 1, s
end
local function fdiv(d)
  if math.type(d) ~= "integer" or d < 1 or d >= (1 << 62) then error("fdiv: divisor " .. tostring(d) .. " out of range", 2) end
  local m, s = fdiv_magic(d, 64)
  local m32 = d < (1 << 31) and fdiv_magic(d, 32) or 0
  return string.format("{0x%016xull, %d, 0x%08xu}", m, s, m32)
end

local function join(list, fn, sep)
  local out = {}
  for i, v in ipairs(list) do out[i] = fn and fn(v, i) or tostring(v) end
  return table.concat(out, sep or ", ")
end

-- Tables of per-head (branch, offset) pairs, padded to max_branches_per_head.
local function head_tables(p)
  local counts, brs, offs = {}, {}, {}
  for h, list in ipairs(p.heads) do
    counts[h] = #list
    local b, o = {}, {}
    for k = 1, p.max_branches_per_head do
      b[k] = list[k] and list[k].branch or 0
      o[k] = list[k] and list[k].offset or 0
    end
    brs[h] = "{" .. join(b) .. "}"
    offs[h] = "{" .. join(o) .. "}"
  end
  return join(counts), join(brs), join(offs)
end

-- The names a template sees: the plan and the formatting helpers.
local function make_env(p, target, spec_json, version)
  local env = { p = p, f64 = f64, u64 = u64, join = join, fdiv = fdiv }
  env.include = function(name) return read_template(name) end
  env.banner = table.concat({
    "/* dilattn " .. version .. " generated kernel: do not edit, regenerate with `dilattn gen`.",
    " * target: " .. target .. ", kernel: " .. p.name .. ", strategy: " .. p.strategy,
    " * spec: " .. spec_json,
    " * cache key: " .. M.KEY_PLACEHOLDER,
    " */",
  }, "\n")
  env.dtype_c = string.format("#define LD(p, i) %s((p), (i)) /* %s in, fp32 compute */\n#define ST(p, i, x) %s((p), (i), (x))",
    p.dtype.load, p.dtype_name, p.dtype.store)
  if target == "cuda" and (p.cuda_path == "mma" or p.cuda_path == "wgmma") then
    local bf = p.dtype_name == "bfloat16"
    env.dtype_c = env.dtype_c .. string.format("\n#define DA_MMA %s\n#define DA_PACK %s",
      bf and "da_mma_bf16" or "da_mma_f16", bf and "da_pack_bf16x2" or "da_pack_f16x2")
  end
  -- a template rendered with the same names, in place (shared pieces: templates/common)
  env.include_rendered = function(name) return template.render(read_template(name), name, env) end
  env.head_counts, env.head_branches, env.head_offsets = head_tables(p)
  env.branch_w = join(p.branches, function(b) return tostring(b.w) end)
  env.branch_r = join(p.branches, function(b) return tostring(b.r) end)
  return setmetatable(env, {
    __index = _G_SAFE,
    __newindex = function(_, k) error("template assigns to global '" .. tostring(k) .. "'", 2) end,
  })
end

-- Render spec for target. text/chunkname: a template to use instead of the target's
-- kernel template (tests). Returns source, kernel name, plan facts for the runtime.
function M.render(spec, target, opts, spec_json, version, text, chunkname)
  local p = planner.plan(spec, target, opts)
  local env = make_env(p, target, spec_json, version)
  if not text then
    chunkname = target .. "/kernel." .. ((target == "cuda") and "cu" or "c") .. ".tpl"
    text = read_template(chunkname)
  end
  local src = template.render(text, chunkname, env)
  local facts = {
    strategy = p.strategy,
    ws_floats_per_token = p.ws_floats_per_token,
    tile_q = p.tile_q,
    tile_k = p.tile_k,
    threads = p.threads or 0,
    launch_regs = p.setmaxnreg and p.setmaxnreg.launch or 0,
    split_first = p.split_first or -1,
    clear_rows = p.clear_rows and 1 or 0,
    smem_bytes = p.smem_bytes or 0,
    tiles_per_window = p.tiles_per_window or 0,
    lpt_group = p.lpt_group or 0,
    ws_tiles = p.ws_tiles or 1,
    ctas_per_sm = p.min_blocks or 1,
    ws_ring = p.ws_ring and 1 or 0,
    window_g = p.window_g,
    run_period = p.run_period,
    cuda_path = p.cuda_path or "",
    cuda_mma = (p.wg_ws and (p.ws_pbuf2 and 5 or p.tma and 6 or 4)) or (p.wg_overlap and 3) or (p.cuda_path == "wgmma" and 2) or (p.cuda_path == "mma" and 1) or 0,
    branch_w = {},
    branch_tiles = {},
    branch_head0 = {},
    branch_heads = {},
    tma_maps = p.tma and p.tma_maps or 0,
    kv_heads = p.Hkv,
    branch_r = {},
  }
  for i, b in ipairs(p.branches) do
    facts.branch_w[i] = b.w
    facts.branch_tiles[i] = b.tiles_per_segment or 0
    facts.branch_head0[i] = b.head0
    facts.branch_heads[i] = b.nheads
    facts.branch_r[i] = b.r
  end
  return src, p.name, facts
end

return M
