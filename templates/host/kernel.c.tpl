{# kernel.c.tpl - host target: the plan laid out as plain C. Every constant comes from
   the plan (gen/lua/planner.lua); the algorithm's pieces live in host/prims.h.
   Three strategies (plan.strategy): fused (one online softmax across all branches per
   query tile), split (per-branch tiles merged exactly into a workspace), single (a head
   has one branch). #}
{{ banner }}
{{ include("host/prims.h") }}

/* ---- constants of this spec ---------------------------------------------------- */
#define HD {{ p.D }}              /* head_dim */
#define NUM_HEADS {{ p.H }}       /* query heads */
#define NUM_KV_HEADS {{ p.Hkv }}  /* kv heads */
#define HEADS_PER_KV {{ p.group }} /* query heads reading one kv head */
#define TQ {{ p.tile_q }}         /* queries per tile */
#define TK {{ p.tile_k }}         /* keys per tile */
#define CAUSAL {{ p.causal }}     /* key t is attended only when t <= p */
#define BLOCK {{ p.block }}       /* sparsity block, in dilated coordinates */
{% if p.strategy == "fused" then %}
#define WIN_G {{ p.window_g }}    /* gcd of segment lengths: every g-window lies in one segment of each branch */
#define LCM_R {{ p.lcm_r }}       /* lcm of dilation rates: queries c, c+R, ... share key sets */
{% end %}
static const float SCALE = (float){{ f64(p.scale) }}; /* {{ p.scale_is_default and "1/sqrt(head_dim)" or "from the config" }} */
static const float OUT_DIVISOR = {{ p.out_divisor }}.0f; /* grouped mode divides by the number of groups */
{{ dtype_c }}
#include <stdbool.h>
typedef int64_t da_i64;
typedef uint64_t da_u64;
typedef int64_t da_idx;
#define DA_FN static inline
#define DA_CONST static const
#define DA_ARGS da_host_args
#define DA_MASKS(A) ((A)->masks)
#define DA_ABS(x) da_abs64(x)
#define DA_UMULHI64(a, b) ((da_u64)(((unsigned __int128)(a) * (b)) >> 64)) /* GCC and Clang, 64-bit targets */
#define DA_UMULHI32(a, b) ((unsigned)(((da_u64)(a) * (b)) >> 32))
{{ include_rendered("common/control.inc.tpl") }}

typedef struct {
  int nq;                 /* queries in this tile */
  int64_t pos[TQ];        /* their positions */
  float q[TQ][HD];        /* their rows, in fp32 */
  float m[TQ], l[TQ];     /* online softmax max and denominator */
  float acc[TQ][HD];      /* unnormalised output */
  float k[TK][HD], v[TK][HD], s[TQ][TK]; /* key tile, value tile, scores */
} tile_t;

static void tile_reset(tile_t *T) {
  for (int j = 0; j < T->nq; j++) {
    T->m[j] = -INFINITY;
    T->l[j] = 0.0f;
    for (int x = 0; x < HD; x++) T->acc[j][x] = 0.0f;
  }
}

static void tile_load_q(tile_t *T, const da_host_args *A, int64_t b, int64_t h) {
  for (int j = 0; j < T->nq; j++) {
    int64_t base = b * A->q_stride[0] + T->pos[j] * A->q_stride[1] + h * A->q_stride[2];
    for (int x = 0; x < HD; x++) T->q[j][x] = LD(A->q, base + x);
  }
}

/* Finished tile row j: its (out, lse). */
static void tile_row_result(const tile_t *T, int j, float *o, float *lse) {
  if (T->l[j] == 0.0f) { /* attended nothing */
    for (int x = 0; x < HD; x++) o[x] = 0.0f;
    *lse = -INFINITY;
    return;
  }
  float inv = 1.0f / T->l[j];
  for (int x = 0; x < HD; x++) o[x] = T->acc[j][x] * inv;
  *lse = T->m[j] + logf(T->l[j]);
}

static void store_row(const da_host_args *A, int64_t b, int64_t h, int64_t pos, const float *o, float lse) {
  int64_t base = b * A->out_stride[0] + pos * A->out_stride[1] + h * A->out_stride[2];
  for (int x = 0; x < HD; x++) ST(A->out, base + x, o[x] / OUT_DIVISOR);
  if (A->lse) A->lse[(b * NUM_HEADS + h) * A->seq_len + pos] = lse;
}
{% for _, br in ipairs(p.branches) do %}

/* ---- branch {{ br.index }}: segment length {{ br.w }}, dilation rate {{ br.r }} ---------------- */
/* Attend tile T to branch {{ br.index }}'s keys in the segment at s0, offset class o: keys
 * t = s0 + o + c*{{ br.r }}, c in [0, L). Query j has dilated index a0 + j*astride. */
static void attend_b{{ br.index }}(tile_t *T, const da_host_args *A, int64_t b, int64_t hkv, int64_t s0, int64_t o,
                       int64_t a0, int64_t astride) {
  const int64_t L = da_class_len({{ br.index }}, s0, o, A->seq_len);
  const int64_t a_last = a0 + (int64_t)(T->nq - 1) * astride; /* of the tile's last row */
  const int64_t kend = CAUSAL ? da_min64(L, a_last + 1) : L;
  /* key tiles in order; the layout's exact jumps pass over the ones it rejects */
  for (int64_t c0 = da_next_key_tile(0, a0, a_last); c0 < kend; c0 = da_next_key_tile(c0 + TK, a0, a_last)) {
    const int nk = (int)da_min64(TK, kend - c0);
{% if p.sparse then %}
    /* Tile class: skip (no block pair allowed), full (every block pair allowed), partial. */
    int full = 1;
    {
      int64_t qb0 = a0 / BLOCK, qb1 = a_last / BLOCK, kb0 = c0 / BLOCK, kb1 = (c0 + nk - 1) / BLOCK;
      if ((qb1 - qb0 + 1) * (kb1 - kb0 + 1) <= (int64_t)T->nq * nk) {
        int any = 0, all = 1;
        for (int64_t qb = qb0; qb <= qb1; qb++)
          for (int64_t kb = kb0; kb <= kb1; kb++) {
            int ok = da_allowed_b{{ br.index }}(A, qb, kb);
            any |= ok;
            all &= ok;
          }
        if (!any) continue;
        full &= all;
      } else {
        full = 0;
      }
    }
{% end %}
    for (int c = 0; c < nk; c++) {
      int64_t t = s0 + o + (c0 + c) * {{ br.r }};
      int64_t kbase = b * A->k_stride[0] + t * A->k_stride[1] + hkv * A->k_stride[2];
      int64_t vbase = b * A->v_stride[0] + t * A->v_stride[1] + hkv * A->v_stride[2];
      for (int x = 0; x < HD; x++) {
        T->k[c][x] = LD(A->k, kbase + x);
        T->v[c][x] = LD(A->v, vbase + x);
      }
    }
    for (int j = 0; j < T->nq; j++) {
      const int64_t a = a0 + j * astride;
      /* causal: row j sees keys c0 .. a of this tile; the rest is neither scored nor masked
       * (a fused tile's rows are LCM_R positions apart, so this is most of the diagonal) */
      const int nkr = CAUSAL ? (int)da_min64(nk, a - c0 + 1) : nk;
      if (nkr <= 0) continue;
      for (int c = 0; c < nkr; c++) {
        /* eight partial sums, independent chains the compiler vectorizes (one sum was a
         * chain of HD dependent adds), added pairwise; the tail alone */
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, dot = 0.0f;
        for (int x = 0; x + 8 <= HD; x += 8)
          for (int u = 0; u < 8; u++) part[u] += T->q[j][x + u] * T->k[c][x + u];
        for (int x = HD - HD % 8; x < HD; x++) dot += T->q[j][x] * T->k[c][x];
        dot += ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
        T->s[j][c] = dot * SCALE;
      }
{% if p.sparse then %}
      if (!full)
        for (int c = 0; c < nkr; c++)
          if (!da_allowed_b{{ br.index }}(A, a / BLOCK, (c0 + c) / BLOCK)) T->s[j][c] = -INFINITY;
{% end %}
      da_row_update(&T->m[j], &T->l[j], T->acc[j], T->s[j], &T->v[0][0], nkr, HD);
    }
  }
}
{% end %}

/* Dispatch to the branch's specialised attend. */
static void attend(int br, tile_t *T, const da_host_args *A, int64_t b, int64_t hkv, int64_t s0, int64_t o,
                   int64_t a0, int64_t astride) {
  switch (br) {
{% for _, br in ipairs(p.branches) do %}
  case {{ br.index }}: attend_b{{ br.index }}(T, A, b, hkv, s0, o, a0, astride); break;
{% end %}
  default: break;
  }
}

{% if p.strategy == "fused" then %}
/* Fused: for each g-window and residue c mod R, tiles of positions c, c+R, ... ; every
 * branch that covers the residue contributes to one online softmax. */
static void run_head(tile_t *T, const da_host_args *A, int64_t b, int64_t h, float *ws) {
  (void)ws;
  const int64_t N = A->seq_len, hkv = h / HEADS_PER_KV;
  float o[HD], lse;
  for (int64_t gs = 0; gs < N; gs += WIN_G) {
    const int64_t ge = da_min64(gs + WIN_G, N);
    for (int64_t c = 0; c < LCM_R && gs + c < ge; c++) {
      const int64_t first = gs + c, count = (ge - first + LCM_R - 1) / LCM_R;
      for (int64_t j0 = 0; j0 < count; j0 += TQ) {
        T->nq = (int)da_min64(TQ, count - j0);
        for (int j = 0; j < T->nq; j++) T->pos[j] = first + (j0 + j) * LCM_R;
        tile_reset(T);
        tile_load_q(T, A, b, h);
        for (int k = 0; k < HEAD_NBR[h]; k++) {
          int br;
          int64_t s0, off, a0, astride;
          if (da_fused_branch((int)h, k, gs, first, j0, &br, &s0, &off, &a0, &astride))
            attend(br, T, A, b, hkv, s0, off, a0, astride);
        }
        for (int j = 0; j < T->nq; j++) {
          tile_row_result(T, j, o, &lse);
          store_row(A, b, h, T->pos[j], o, lse);
        }
      }
    }
  }
}
{% else %}
/* {{ p.strategy == "split" and "Split: per-branch tiles; partial results merged exactly into ws ([N][HD+1] per head), a row's last covering launch writes out." or "Single: each head has one branch; per-branch tiles write out directly." }} */
static void run_head(tile_t *T, const da_host_args *A, int64_t b, int64_t h, float *ws) {
  const int64_t N = A->seq_len, hkv = h / HEADS_PER_KV;
  float o[HD], lse;
{% if p.strategy ~= "split" then %}
  (void)ws;
{% end %}
{% if p.clear_rows then %}
  for (int x = 0; x < HD; x++) o[x] = 0.0f;
  for (int64_t p = 0; p < N; p++) store_row(A, b, h, p, o, -INFINITY); /* positions no branch covers */
{% else %}
  /* every head has a branch with r = 1: the branch launches write every row */
{% end %}
  for (int kk = 0; kk < HEAD_NBR[h]; kk++) {
{% if p.strategy == "split" and p.split_first >= 0 then %}
    /* branch {{ p.split_first }} (r = 1) first, as the CUDA launches go */
    const int k = kk == 0 ? {{ p.split_first }} : kk <= {{ p.split_first }} ? kk - 1 : kk;
{% else %}
    const int k = kk;
{% end %}
    const int br = HEAD_BR[h][k];
    const int64_t w = BR_W[br], r = BR_R[br], off = HEAD_OFF[h][k];
    for (int64_t s0 = 0; s0 < N; s0 += w) {
      const int64_t L = da_class_len(br, s0, off, N);
      for (int64_t a0 = 0; a0 < L; a0 += TQ) {
        T->nq = (int)da_min64(TQ, L - a0);
        for (int j = 0; j < T->nq; j++) T->pos[j] = s0 + off + (a0 + j) * r;
        tile_reset(T);
        tile_load_q(T, A, b, h);
        attend(br, T, A, b, hkv, s0, off, a0, 1);
        for (int j = 0; j < T->nq; j++) {
          tile_row_result(T, j, o, &lse);
{% if p.strategy == "split" then %}
          /* merged into the earlier covering launches' partial in the workspace, or written
           * there first; the row's last covering launch writes out and lse (da_split_side) */
          const int side = da_split_side((int)h, k, T->pos[j]);
          float *row = ws + T->pos[j] * (HD + 1);
          if (side & 1) {
            da_merge_partial(row, row + HD, o, lse, HD);
          } else if (side & 2) {
            for (int x = 0; x < HD; x++) row[x] = o[x];
            row[HD] = lse;
          }
          if (side & 2) continue; /* a later launch covers the row */
          if (side & 1) {
            for (int x = 0; x < HD; x++) o[x] = row[x];
            lse = row[HD];
          }
{% end %}
          store_row(A, b, h, T->pos[j], o, lse);
        }
      }
    }
  }
}
{% end %}

/* The instruction-set extensions this module needs (prims.h): the runtime reads them first. */
const char *const {{ p.name }}_isa = da_isa_words;

/* Bytes of tile buffer one worker needs (the runtime hands it in from its pool). */
size_t {{ p.name }}_scratch_bytes(void) { return sizeof(tile_t); }

/* Entry: (batch, head) pairs [bh_begin, bh_end). ws: {{ p.ws_floats_per_token }} floats per token (may be NULL when 0).
 * scratch: {{ p.name }}_scratch_bytes() bytes, or NULL to allocate here.
 * Returns 0, or -1 when the tile buffer cannot be allocated. */
int {{ p.name }}(const da_host_args *A, int64_t bh_begin, int64_t bh_end, float *ws, void *scratch) {
  tile_t *T = scratch ? (tile_t *)scratch : (tile_t *)malloc(sizeof(tile_t));
  if (!T) return -1;
  for (int64_t bh = bh_begin; bh < bh_end; bh++)
    run_head(T, A, bh / NUM_HEADS, bh % NUM_HEADS, ws);
  if (!scratch) free(T);
  return 0;
}
