{# control.inc.tpl - the config-specific control structure every target shares (DESIGN.md
   decision 3), rendered into each target's source by include_rendered(): the per-head
   (branch, offset) tables, the sparsity predicate of every branch, and the maps from a
   query tile to what a branch attends. Host and CUDA kernels call these, so the host
   backend runs exactly the decisions the CUDA kernels make.
   The including template defines first:
     DA_FN         function qualifiers (host: static inline; CUDA: __device__ __forceinline__)
     DA_CONST      table qualifiers (host: static const; CUDA: __constant__)
     DA_ARGS       the kernel argument struct; DA_MASKS(A) its explicit mask table
     DA_ABS(x)     absolute value of a da_idx
     da_i64, da_u64, da_idx (dilated indices; 32 bits where the plan allows) #}
/* ---- shared control structure (templates/common/control.inc.tpl) ------------------ */
/* (branch, offset) pairs of each query head */
DA_CONST int HEAD_NBR[NUM_HEADS] = { {{ head_counts }} };
DA_CONST int HEAD_BR[NUM_HEADS][{{ p.max_branches_per_head }}] = { {{ head_branches }} };
DA_CONST da_i64 HEAD_OFF[NUM_HEADS][{{ p.max_branches_per_head }}] = { {{ head_offsets }} };
DA_CONST da_i64 BR_W[{{ p.num_branches }}] = { {{ branch_w }} };
DA_CONST da_i64 BR_R[{{ p.num_branches }}] = { {{ branch_r }} };
/* x / d for 0 <= x < 2^62 by a multiply: f = fdiv(d) (generator.lua), (umulhi64(x, f.m) +
 * x) >> f.s. A division by a value from a table is a call of ~80 instructions on the GPU
 * (a 32-bit one ~20 behind a test of the high words), a dependent chain in every tile's
 * decode. */
typedef struct {
  da_u64 m;
  int s;
  unsigned m32; /* for 0 <= x < 2^32 (where d < 2^31): da_fq32 */
} da_fdiv;
DA_FN da_i64 da_fq(da_i64 x, da_fdiv f) { return (da_i64)((DA_UMULHI64((da_u64)x, f.m) + (da_u64)x) >> f.s); }
DA_FN da_i64 da_fq32(unsigned x, da_fdiv f) { return (da_i64)(((da_u64)DA_UMULHI32(x, f.m32) + x) >> f.s); }
DA_CONST da_fdiv BR_W_DIV[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(b.w) end) }} };
DA_CONST da_fdiv BR_R_DIV[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return fdiv(b.r) end) }} };
{% for _, br in ipairs(p.branches) do %}

/* branch {{ br.index }} (segment length {{ br.w }}, dilation rate {{ br.r }}): may dilated query block qb see key block kb? */
DA_FN bool da_allowed_b{{ br.index }}(const DA_ARGS *A, da_idx qb, da_idx kb) {
{% if p.layout == "none" or p.layout == "dense" then %}
  (void)A, (void)qb, (void)kb;
  return true;
{% elseif p.layout == "local_window" then %}
  (void)A;
  return DA_ABS(qb - kb) <= {{ p.window }};
{% elseif p.layout == "global_local" then %}
  (void)A;
  return DA_ABS(qb - kb) <= {{ p.window }} || kb < {{ p.global }} || qb < {{ p.global }};
{% elseif p.layout == "dilated_sparse" then %}
  (void)A;
  da_idx d = DA_ABS(qb - kb);
  return d == 0{% for _, st in ipairs(p.strides) do %} || d == {{ st }}{% end %};
{% elseif p.layout == "random" then %}
  (void)A;
  if (qb == kb) return true;
  da_u64 x = (da_u64){{ u64(p.seed) }} ^ (((da_u64){{ br.index }} << 48) ^ ((da_u64)qb << 24) ^ (da_u64)kb);
  return (da_splitmix64(x) >> 11) < {{ p.random_threshold }}ull; /* floor(density * 2^53) */
{% else %}
  return DA_MASKS(A)[{{ br.index }}][(da_i64)qb * {{ br.nblocks }} + kb] != 0; /* explicit {{ br.nblocks }} x {{ br.nblocks }} mask */
{% end %}
}
{% end %}

/* The same for branch br at run time (outside the per-branch inner loops). */
DA_FN bool da_allowed(int br, const DA_ARGS *A, da_idx qb, da_idx kb) {
  switch (br) {
{% for _, br in ipairs(p.branches) do %}
  case {{ br.index }}: return da_allowed_b{{ br.index }}(A, qb, kb);
{% end %}
  default: return false;
  }
}

/* The first key tile at or after c (a multiple of TK) that the layout may allow for some
 * query of dilated indices a_first..a_last, or a value >= every kend when none: exact
 * jumps for the parametric layouts, so a long segment's skipped tiles cost nothing; the
 * random and explicit layouts step tile by tile (their tables are data, not formulas). */
DA_FN da_i64 da_next_key_tile(da_i64 c, da_i64 a_first, da_i64 a_last) {
{% if p.layout == "local_window" or p.layout == "global_local" or p.layout == "dilated_sparse" then %}
  const da_i64 qb0 = a_first / BLOCK, qb1 = a_last / BLOCK, kb = c / BLOCK;
  da_i64 nk;
{% if p.layout == "local_window" then %}
  nk = kb < qb0 - {{ p.window }} ? qb0 - {{ p.window }} : kb;
  if (nk > qb1 + {{ p.window }}) return (da_i64)1 << 62;
{% elseif p.layout == "global_local" then %}
  if (qb0 < {{ p.global }} || kb < {{ p.global }}) return c; /* global rows see every key; global keys are seen by all */
  nk = kb < qb0 - {{ p.window }} ? qb0 - {{ p.window }} : kb;
  if (nk > qb1 + {{ p.window }}) return (da_i64)1 << 62;
{% else %}
  /* |qb - kb| in {0, strides}: key blocks [qb0 - d, qb1 - d] and [qb0 + d, qb1 + d] */
  const da_i64 dists[{{ #p.strides + 1 }}] = {0{% for _, st in ipairs(p.strides) do %}, {{ st }}{% end %}};
  nk = (da_i64)1 << 62;
  for (int i = 0; i < {{ #p.strides + 1 }}; i++)
    for (int side = -1; side <= 1; side += 2) {
      const da_i64 lo = qb0 + side * dists[i], hi = qb1 + side * dists[i], cand = kb > lo ? kb : lo;
      if (kb <= hi && cand < nk) nk = cand;
    }
  if (nk == (da_i64)1 << 62) return nk;
{% end %}
  /* a block past every key (window or stride x BLOCK up to 2^80): nk * BLOCK would overflow */
  if (nk > ((da_i64)1 << 62) / BLOCK) return (da_i64)1 << 62;
  return nk == kb ? c : (nk * BLOCK) / TK * TK;
{% else %}
  (void)a_first, (void)a_last;
  return c;
{% end %}
}

/* Keys of branch br's offset class off in the segment starting at s0 (keys s0 + off +
 * c * r, c in [0, L)): L, or 0 when the segment is shorter than off. */
{% local w_r_32 = true %}
{% for _, b in ipairs(p.branches) do if b.w + b.r >= (1 << 32) or b.r >= (1 << 31) then w_r_32 = false end end %}
DA_FN da_i64 da_class_len(int br, da_i64 s0, da_i64 off, da_i64 seq_len) {
  const da_i64 w = BR_W[br], r = BR_R[br];
  const da_i64 seg_len = seq_len - s0 < w ? seq_len - s0 : w;
{% if p.cuda_path == "mma" then %}
  /* (a division: mma.sync's attend() calls this at its registers' peak, where the
   * multiplier's table loads spilled 32 bytes of 255-register kernels at 128 x 64) */
  return off < seg_len ? (seg_len - off + r - 1) / r : 0;
{% elseif w_r_32 then %}
  /* (every w + r < 2^32: the 32-bit form, one multiply) */
  return off < seg_len ? da_fq32((unsigned)(seg_len - off + r - 1), BR_R_DIV[br]) : 0;
{% else %}
  return off < seg_len ? da_fq(seg_len - off + r - 1, BR_R_DIV[br]) : 0;
{% end %}
}
{% if p.strategy == "fused" then %}

/* Fused tiling: the tile of positions first + j * LCM_R, j >= j0, inside the g-window at
 * gs. Branch slot k of head h covers it when first lies in the head's offset class; then
 * the tile's row j is dilated index *a0 + j * *astride of the segment at *s0. */
DA_CONST da_i64 BR_LCM_STRIDE[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(p.lcm_r // b.r) end) }} }; /* LCM_R / r */
DA_FN bool da_fused_branch(int h, int k, da_i64 gs, da_i64 first, da_i64 j0, int *br, da_i64 *s0, da_i64 *off,
                           da_i64 *a0, da_i64 *astride) {
  *br = HEAD_BR[h][k];
  const da_i64 w = BR_W[*br], r = BR_R[*br];
  *off = HEAD_OFF[h][k];
  *s0 = da_fq(gs, BR_W_DIV[*br]) * w;
  const da_i64 rel = first - *s0, a = da_fq(rel, BR_R_DIV[*br]);
  if (rel - a * r != *off) return false; /* residue not covered by this branch */
  *astride = BR_LCM_STRIDE[*br];
  *a0 = a + j0 * *astride; /* (rel - off) / r */
  return true;
}
{% end %}
{% if p.strategy == "split" then %}

/* Split: where the launch of branch slot k stands among the launches that cover position
 * pos of head h (slot j is branch j: split plans are LongNet mode; launch order
 * split_first first, then branch order): bit 0 set when an earlier launch covers pos (the
 * workspace row holds their merged partial: merge into it), bit 1 when a later one does
 * (write the workspace row; else this launch is the row's last: write out and lse). */
DA_CONST int SPLIT_RANK[{{ p.num_branches }}] = { {{ join(p.branches, function(b) return tostring(b.split_rank) end) }} }; /* launch of slot k */
DA_FN int da_split_side(int h, int k, da_i64 pos) {
  const int rk = SPLIT_RANK[k];
  int side = 0;
{% for _, br in ipairs(p.branches) do %}
  if (k != {{ br.index }} && (da_i64)((da_u64)pos % {{ br.w }}u % {{ br.r }}u) == HEAD_OFF[h][{{ br.index }}])
    side |= {{ br.split_rank }} < rk ? 1 : 2;
{% end %}
  return side;
}
{% end %}
