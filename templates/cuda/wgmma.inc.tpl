{# wgmma.inc.tpl - the two warpgroup MMAs of the wgmma path, for this plan's shapes:
     da_wg_scores: S (64 x TK, f32) += Q K^T, both operands in shared memory (K-major);
     da_wg_scores_first: S = Q K^T (scale-d 0: the accumulators' old values are ignored,
                   so the chain's first step needs no zeroed registers);
     da_wg_pv:     O (64 x HD, f32) += P V, P from registers (the RS form), V in shared
                   memory MN-major (tnspB = 1).
   Descriptors and layouts: da_device.cuh ("wgmma"). Under DA_EMULATE the same names call
   the emulator, which computes them with da_ref_wgmma. #}
{%
local t = p.dtype_name == "bfloat16" and "bf16" or "f16"
local function regs(from, count)
  local r = {}
  for i = 0, count - 1 do r[#r + 1] = "%" .. (from + i) end
  return "{" .. table.concat(r, ", ") .. "}"
end
local function outs(count, mode)
  local r = {}
  for i = 0, count - 1 do r[#r + 1] = '"' .. (mode or "+") .. 'f"(d[' .. i .. '])' end
  return table.concat(r, ", ")
end
local ns, no = p.tile_k // 2, p.D // 2
local ss = string.format('"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, %%%d, %%%d, 1, 1, 1, 0, 0;\\n"',
  p.tile_k, t, t, regs(0, ns), ns, ns + 1)
local ss0 = string.format('"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, %%%d, %%%d, 0, 1, 1, 0, 0;\\n"',
  p.tile_k, t, t, regs(0, ns), ns, ns + 1)
local rs = string.format('"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, %s, %%%d, 1, 1, 1, 1;\\n"',
  p.D, t, t, regs(0, no), regs(no, 4), no + 4)
%}
#if defined(__CUDACC__)
__device__ __forceinline__ void da_wg_scores(float *d, da_u64 a, da_u64 b) {
  asm volatile({{ ss }}
               : {{ outs(ns) }}
               : "l"(a), "l"(b));
}
__device__ __forceinline__ void da_wg_scores_first(float *d, da_u64 a, da_u64 b) {
  asm volatile({{ ss0 }}
               : {{ outs(ns, "=") }}
               : "l"(a), "l"(b));
}
__device__ __forceinline__ void da_wg_pv(float *d, const da_u32 a[4], da_u64 b) {
  asm volatile({{ rs }}
               : {{ outs(no) }}
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#else
static inline void da_wg_scores(float *d, da_u64 a, da_u64 b) { da_emu_wgmma(d, {{ p.tile_k }}, {{ t == "bf16" and 1 or 0 }}, a, nullptr, b, 0, 1); }
static inline void da_wg_scores_first(float *d, da_u64 a, da_u64 b) { da_emu_wgmma(d, {{ p.tile_k }}, {{ t == "bf16" and 1 or 0 }}, a, nullptr, b, 0, 0); }
static inline void da_wg_pv(float *d, const da_u32 a[4], da_u64 b) { da_emu_wgmma(d, {{ p.D }}, {{ t == "bf16" and 1 or 0 }}, 0, a, b, 1, 1); }
#endif
