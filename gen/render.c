/* render.c - spec -> source text. Validates the spec, opens a sandboxed Lua state, hands
 * the spec to gen/lua/generator.lua (planner + template), copies the results out after
 * the protected call returns, and stamps the cache key (SHA-256 over the source with a
 * placeholder, the target, the options and the versions) into the banner. */
#include "gen/render.h"

#include "gen/lua_sandbox.h"
#include "runtime/fileio.h"

#include <lauxlib.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_PLACEHOLDER "@DA_CACHE_KEY@"

void da__sha256_hex(const void *data, size_t len, char hex[65]) {
  unsigned char md[32];
  unsigned int mdlen = 0;
  EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  hex[64] = '\0';
}

int da__is_hex(const char *s, size_t n) {
  if (!s) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return s[n] == '\0';
}

static const char *const mode_s[] = {"longnet", "grouped"};
static const char *const offs_s[] = {"mod", "block"};
static const char *const dtype_s[] = {"float32", "float16", "bfloat16"};
static const char *const layout_s[] = {"none",           "dense",  "local_window", "global_local",
                                       "dilated_sparse", "random", "explicit"};

static void set_int_list(lua_State *L, const char *name, const int64_t *v, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)v[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, name);
}

typedef struct {
  const da_spec *spec;
  const char *spec_hash;
  const da__render_opts *opts;
} push_args;

/* Protected: push (spec table, opts table). */
static int push_spec(lua_State *L) {
  const push_args *a = lua_touserdata(L, 1);
  const da_spec *s = a->spec;
  lua_newtable(L); /* spec */
  set_int_list(L, "segment_lengths", s->segment_lengths, s->num_branches);
  set_int_list(L, "dilation_rates", s->dilation_rates, s->num_branches);
  lua_pushstring(L, mode_s[s->mode]);
  lua_setfield(L, -2, "mode");
  lua_pushstring(L, offs_s[s->offsets]);
  lua_setfield(L, -2, "offsets");
  lua_pushboolean(L, s->causal);
  lua_setfield(L, -2, "causal");
  if (s->has_scale) {
    lua_pushnumber(L, s->scale);
    lua_setfield(L, -2, "scale");
  }
  lua_pushinteger(L, s->num_heads);
  lua_setfield(L, -2, "num_heads");
  lua_pushinteger(L, s->num_kv_heads);
  lua_setfield(L, -2, "num_kv_heads");
  lua_pushinteger(L, s->head_dim);
  lua_setfield(L, -2, "head_dim");
  lua_pushstring(L, dtype_s[s->dtype]);
  lua_setfield(L, -2, "dtype");
  lua_pushstring(L, a->spec_hash);
  lua_setfield(L, -2, "spec_hash");
  const da_sparsity *sp = &s->sparsity;
  if (sp->layout != DA_LAYOUT_NONE) {
    lua_newtable(L); /* spec sp */
    lua_pushstring(L, layout_s[sp->layout]);
    lua_setfield(L, -2, "layout");
    lua_pushinteger(L, sp->layout == DA_LAYOUT_DENSE ? 1 : (lua_Integer)sp->block);
    lua_setfield(L, -2, "block");
    lua_pushinteger(L, (lua_Integer)sp->window);
    lua_setfield(L, -2, "window");
    lua_pushinteger(L, (lua_Integer)sp->global);
    lua_setfield(L, -2, "global");
    set_int_list(L, "strides", sp->strides, sp->layout == DA_LAYOUT_DILATED_SPARSE ? sp->num_strides : 0);
    lua_pushinteger(L, (lua_Integer)sp->seed); /* bit pattern of the uint64 */
    lua_setfield(L, -2, "seed");
    lua_pushnumber(L, sp->density);
    lua_setfield(L, -2, "density");
    lua_setfield(L, -2, "sparsity"); /* spec */
  }
  lua_newtable(L); /* spec opts */
  if (a->opts && a->opts->tile_q) {
    lua_pushinteger(L, a->opts->tile_q);
    lua_setfield(L, -2, "tile_q");
  }
  if (a->opts && a->opts->tile_k) {
    lua_pushinteger(L, a->opts->tile_k);
    lua_setfield(L, -2, "tile_k");
  }
  if (a->opts && a->opts->fused_min_queries) {
    lua_pushinteger(L, a->opts->fused_min_queries);
    lua_setfield(L, -2, "fused_min_queries");
  }
  if (a->opts && a->opts->cuda_mma) {
    lua_pushstring(L, da__cuda_mma_name(a->opts->cuda_mma));
    lua_setfield(L, -2, "mma");
  }
  return 2;
}

/* Protected: look up generator.render and leave it on the stack. */
static int push_render_fn(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "da_safe_G");
  lua_getfield(L, -1, "require_module");
  lua_pushstring(L, "generator");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "render");
  return 1;
}

static const char *const MMA_NAMES[DA__CUDA_MMA_MAX + 1] = {"",         "sync",        "wgmma",       "wgmma-overlap",
                                                            "wgmma-ws", "wgmma-ws-p2", "wgmma-ws-tma"};
const char *da__cuda_mma_name(int cuda_mma) {
  return cuda_mma >= 1 && cuda_mma <= DA__CUDA_MMA_MAX ? MMA_NAMES[cuda_mma] : "sync";
}
int da__cuda_mma_parse(const char *name) {
  for (int i = 1; i <= DA__CUDA_MMA_MAX; i++)
    if (name && !strcmp(name, MMA_NAMES[i])) return i;
  return 0;
}

int da__spec_sparse(const da_spec *spec) {
  return spec->sparsity.layout != DA_LAYOUT_NONE && spec->sparsity.layout != DA_LAYOUT_DENSE;
}

int da__wgmma_serves(const da_spec *spec) {
  return spec->dtype != DA_DTYPE_FLOAT32 && (spec->head_dim == 64 || spec->head_dim == 128);
}

static int check_opts(const da_context *ctx, const da__render_opts *o) {
  if (!o) return DA_OK;
  DA_RETURN_IF(o->tile_q < 0 || o->tile_q > 256, DA_ERR_INVALID_ARGUMENT, "tile_q: %d is out of range (1 to 256)", o->tile_q);
  DA_RETURN_IF(o->tile_k < 0 || o->tile_k > 1024, DA_ERR_INVALID_ARGUMENT, "tile_k: %d is out of range (1 to 1024)", o->tile_k);
  DA_RETURN_IF(o->fused_min_queries < 0, DA_ERR_INVALID_ARGUMENT, "fused_min_queries: %d is negative", o->fused_min_queries);
  DA_RETURN_IF(o->cuda_mma < 0 || o->cuda_mma > DA__CUDA_MMA_MAX, DA_ERR_INVALID_ARGUMENT,
               "cuda_mma: %d is not 0 (default), 1 (mma.sync), 2 (wgmma), 3 (wgmma, overlapped), 4 (wgmma, "
               "warp-specialized), 5 (warp-specialized, P double-buffered) or 6 (warp-specialized, TMA copies)",
               o->cuda_mma);
  return DA_OK;
}

/* Raw reads of the facts table on top of the stack (plain values; cannot raise). */
/* fact key, or dflt where the generator did not give it (templates from an older
 * DILATTN_TEMPLATE_DIR) */
static int64_t fact_int_or(lua_State *L, const char *key, int64_t dflt) {
  lua_pushstring(L, key);
  lua_rawget(L, -2);
  int64_t v = lua_isinteger(L, -1) ? (int64_t)lua_tointeger(L, -1) : dflt;
  lua_pop(L, 1);
  return v;
}
static int64_t fact_int(lua_State *L, const char *key) { return fact_int_or(L, key, 0); }

static void fact_str(lua_State *L, const char *key, char *dst, size_t cap) {
  lua_pushstring(L, key);
  lua_rawget(L, -2);
  snprintf(dst, cap, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "");
  lua_pop(L, 1);
}

static int fact_int_list(lua_State *L, const char *key, int64_t *dst, int cap) {
  lua_pushstring(L, key);
  lua_rawget(L, -2);
  int n = 0;
  if (lua_istable(L, -1)) {
    for (; n < cap; n++) {
      lua_rawgeti(L, -1, n + 1);
      int ok = lua_isinteger(L, -1);
      if (ok) dst[n] = (int64_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
      if (!ok) break;
    }
  }
  lua_pop(L, 1);
  return n;
}

static void copy_facts(lua_State *L, const da_spec *spec, da__rendered *f) {
  fact_str(L, "strategy", f->strategy, sizeof f->strategy);
  fact_str(L, "cuda_path", f->cuda_path, sizeof f->cuda_path);
  f->ws_floats_per_token = fact_int(L, "ws_floats_per_token");
  f->tile_q = (int)fact_int(L, "tile_q");
  f->tile_k = (int)fact_int(L, "tile_k");
  f->cuda_mma = (int)fact_int(L, "cuda_mma");
  f->threads = (int)fact_int(L, "threads");
  f->launch_regs = (int)fact_int(L, "launch_regs");
  f->split_first = (int)fact_int_or(L, "split_first", -1); /* absent: branch order */
  f->clear_rows = (int)fact_int_or(L, "clear_rows", 1);     /* absent: _clear runs */
  f->smem_bytes = (int)fact_int(L, "smem_bytes");
  f->tiles_per_window = fact_int(L, "tiles_per_window");
  f->window_g = fact_int(L, "window_g");
  f->run_period = fact_int_or(L, "run_period", 0);
  f->lpt_group = fact_int(L, "lpt_group");
  f->ws_tiles = (int)fact_int_or(L, "ws_tiles", 1);
  f->ctas_per_sm = (int)fact_int_or(L, "ctas_per_sm", 1);
  f->ws_ring = (int)fact_int_or(L, "ws_ring", 0);
  f->num_branches = fact_int_list(L, "branch_w", f->branch_w, DA_MAX_BRANCHES);
  fact_int_list(L, "branch_tiles", f->branch_tiles, DA_MAX_BRANCHES);
  f->tma_maps = (int)fact_int_or(L, "tma_maps", 0);
  f->kv_heads = fact_int_or(L, "kv_heads", spec->num_kv_heads);
  if (fact_int_list(L, "branch_r", f->branch_r, DA_MAX_BRANCHES) < f->num_branches) f->tma_maps = 0;
  /* (a generator without these, DILATTN_TEMPLATE_DIR's from before them: every head) */
  if (fact_int_list(L, "branch_head0", f->branch_head0, DA_MAX_BRANCHES) < f->num_branches ||
      fact_int_list(L, "branch_heads", f->branch_heads, DA_MAX_BRANCHES) < f->num_branches)
    for (int i = 0; i < f->num_branches; i++) f->branch_head0[i] = 0, f->branch_heads[i] = spec->num_heads;
}

/* Run the generator. text NULL: the target's kernel template. On success the returned
 * strings are copied out: *src (malloc'ed, placeholder not yet replaced), *name, facts. */
static da_status run_generator(da_context *ctx, const da_spec *spec, da_target target,
                               const da__render_opts *opts, const char *text,
                               const char *chunkname, long long budget, size_t mem,
                               char **src_out, char **name_out, da__rendered *facts) {
  char msg[512];
  DA_RETURN_IF(!spec, DA_ERR_INVALID_ARGUMENT, "spec is NULL");
  if (da_spec_validate(spec, msg, sizeof msg) != DA_OK)
    return da__set_error(ctx, DA_ERR_INVALID_SPEC, "%s", msg);
  da_spec resolved;
  spec = da__spec_resolved(spec, &resolved);
  DA_TRY(check_opts(ctx, opts));
  DA_RETURN_IF(opts && opts->cuda_mma >= 2 && target == DA_TARGET_CUDA && !da__wgmma_serves(spec),
               DA_ERR_INVALID_ARGUMENT,
               "cuda_mma = %d (%s: a wgmma path) needs float16 or bfloat16 with head_dim 64 or 128 (this spec: %s, "
               "head_dim %d)",
               opts->cuda_mma, da__cuda_mma_name(opts->cuda_mma),
               spec->dtype == DA_DTYPE_FLOAT32 ? "float32" : spec->dtype == DA_DTYPE_FLOAT16 ? "float16" : "bfloat16",
               spec->head_dim);
  char *spec_json = da_spec_to_json(spec);
  DA_RETURN_IF(!spec_json, DA_ERR_NO_MEMORY, "spec JSON: out of memory");
  char spec_hash[65];
  da__sha256_hex(spec_json, strlen(spec_json), spec_hash);

  da__lua_limits lim = {mem, budget};
  da__lua *S = NULL;
  da_status st = da__lua_open(ctx, &lim, &S);
  if (st != DA_OK) {
    free(spec_json);
    return st;
  }
  lua_State *L = da__lua_state(S);
  /* stack: (empty) */
  lua_pushcfunction(L, push_render_fn);
  st = da__lua_pcall(S, 0, 1, "generator");                     /* render */
  push_args pa = {spec, spec_hash, opts};
  if (st == DA_OK) {
    lua_pushcfunction(L, push_spec);
    lua_pushlightuserdata(L, &pa);
    st = da__lua_pcall(S, 1, 2, "generator: spec");             /* render spec opts */
  }
  if (st == DA_OK) {
    lua_pushstring(L, target == DA_TARGET_CUDA ? "cuda" : "host"); /* render spec opts target */
    lua_insert(L, -2);                                             /* render spec target opts */
    lua_pushstring(L, spec_json);
    lua_pushstring(L, DA_VERSION_STRING);
    int nargs = 5;
    if (text) {
      lua_pushstring(L, text);
      lua_pushstring(L, chunkname);
      nargs = 7;
    }
    st = da__lua_pcall(S, nargs, 3, "generator");               /* src name facts */
  }
  free(spec_json);
  if (st == DA_OK) {
    /* Copy results out; only raw accesses on plain values (cannot raise). */
    size_t len = 0;
    const char *src = lua_type(L, -3) == LUA_TSTRING ? lua_tolstring(L, -3, &len) : NULL;
    const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (!src || !name || !lua_istable(L, -1)) {
      st = da__set_error(ctx, DA_ERR_GENERATOR, "generator: render returned no source");
    } else {
      *src_out = malloc(len + 1);
      *name_out = strdup(name);
      if (*src_out) memcpy(*src_out, src, len + 1);
      if (facts) copy_facts(L, spec, facts);
      if (!*src_out || !*name_out) {
        free(*src_out);
        free(*name_out);
        *src_out = *name_out = NULL;
        st = da__set_error(ctx, DA_ERR_NO_MEMORY, "generator: out of memory copying the source");
      }
    }
  }
  da__lua_close(S);
  return st;
}

/* Cache key: SHA-256 over everything that decides the compiled artifact. */
static void compute_key(const char *src, da_target target, char key[65]) {
  char head[256];
  int n = snprintf(head, sizeof head, "dilattn-key schema=%d lib=%s target=%s\n",
                   DA_CACHE_SCHEMA_VERSION, DA_VERSION_STRING,
                   target == DA_TARGET_CUDA ? "cuda" : "host");
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  unsigned char md[32];
  unsigned int mdlen = 0;
  if (c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, head, (size_t)n) &&
      EVP_DigestUpdate(c, src, strlen(src)) && EVP_DigestFinal_ex(c, md, &mdlen)) {
    for (int i = 0; i < 32; i++) snprintf(key + 2 * i, 3, "%02x", md[i]);
  } else {
    da__sha256_hex(src, strlen(src), key); /* EVP context allocation failed */
  }
  key[64] = '\0';
  EVP_MD_CTX_free(c);
}

/* Replace the placeholder with the key. Returns a new string or NULL. */
static char *stamp_key(const char *src, const char *key) {
  const char *at = strstr(src, KEY_PLACEHOLDER);
  size_t len = strlen(src), pl = strlen(KEY_PLACEHOLDER);
  if (!at) return strdup(src);
  char *out = malloc(len - pl + 64 + 1);
  if (!out) return NULL;
  size_t pre = (size_t)(at - src);
  memcpy(out, src, pre);
  memcpy(out + pre, key, 64);
  memcpy(out + pre + 64, at + pl, len - pre - pl + 1);
  return out;
}

da_status da__render_ex(da_context *ctx, const da_spec *spec, da_target target,
                        const da__render_opts *opts, da__rendered *out) {
  da__rendered r;
  memset(&r, 0, sizeof r);
  char *src = NULL;
  DA_TRY(run_generator(ctx, spec, target, opts, NULL, NULL, 0, 0, &src, &r.kernel_name, &r));
  /* CUDA split plans launch no _init / _finish (cuda_backend.c): their branch launches must
   * write out themselves (kernel.cu.tpl tile_end via da_split_side). Templates from before
   * that (a DILATTN_TEMPLATE_DIR of an older version, a bench baseline) would leave out
   * unwritten: refuse them rather than compute nothing. */
  if (target == DA_TARGET_CUDA && !strcmp(r.strategy, "split") && !strstr(src, "da_split_side(")) {
    free(src);
    da_status st = da__set_error(ctx, DA_ERR_UNSUPPORTED,
                                 "%s: the CUDA templates predate split plans whose branch launches write out "
                                 "(da_split_side); this runtime launches no _init / _finish for them (is "
                                 "DILATTN_TEMPLATE_DIR an older version's?)",
                                 r.kernel_name);
    free(r.kernel_name);
    return st;
  }
  /* The kernels' argument struct (runtime/cuda_args.h) has grown fields in its middle (tpc,
   * then ctr): a kernel of older templates would read this runtime's arguments at the wrong
   * offsets, silently. Its newest field tells. */
  if (target == DA_TARGET_CUDA && !strstr(src, "\n  unsigned *ctr;")) {
    free(src);
    da_status st = da__set_error(ctx, DA_ERR_UNSUPPORTED,
                                 "%s: the CUDA templates predate this runtime's kernel arguments (da_cuda_args "
                                 "without ctr: runtime/cuda_args.h); is DILATTN_TEMPLATE_DIR an older version's?",
                                 r.kernel_name);
    free(r.kernel_name);
    return st;
  }
  /* Likewise a plan of several tiles a CTA (ws_tiles: the runtime launches its blocks that
   * many a CTA, in x) from templates whose kernel runs one (kernel.cu.tpl run_tiles). */
  if (target == DA_TARGET_CUDA && r.ws_tiles > 1 && !strstr(src, "\n#define WS_TILES ")) {
    free(src);
    da_status st = da__set_error(ctx, DA_ERR_UNSUPPORTED,
                                 "%s: the CUDA templates predate kernels that run %d tiles a CTA (run_tiles), "
                                 "which this plan's grid needs (is DILATTN_TEMPLATE_DIR an older version's?)",
                                 r.kernel_name, r.ws_tiles);
    free(r.kernel_name);
    return st;
  }
  /* templates from before runs of tokens (a DILATTN_TEMPLATE_DIR of an older version, a
   * bench baseline) index the workspace by position: such a plan runs in one piece */
  r.ws_runs = target == DA_TARGET_CUDA && r.run_period > 0 && strstr(src, "A.tok0") != NULL;
  compute_key(src, target, r.key);
  r.source = stamp_key(src, r.key);
  free(src);
  if (!r.source) {
    free(r.kernel_name);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "render: out of memory");
  }
  /* DILATTN_DUMP_DIR: every rendered source (DESIGN.md), compiled here or found in a cache
   * (it got the compiled ones only) */
  char file[300];
  snprintf(file, sizeof file, "%s.%s", r.kernel_name, target == DA_TARGET_CUDA ? "cu" : "c");
  (void)da__dump_source(file, r.source);
  *out = r;
  return DA_OK;
}

void da__rendered_free(da__rendered *r) {
  if (!r) return;
  free(r->source);
  free(r->kernel_name);
  memset(r, 0, sizeof *r);
}

da_status da__render_template_text(da_context *ctx, const da_spec *spec, const char *text,
                                   const char *chunkname, long long instr_budget,
                                   size_t mem_limit, char **out) {
  char *src = NULL, *name = NULL;
  DA_RETURN_IF(!text || !chunkname || !out, DA_ERR_INVALID_ARGUMENT, "template text is NULL");
  DA_TRY(run_generator(ctx, spec, DA_TARGET_HOST, NULL, text, chunkname, instr_budget, mem_limit,
                       &src, &name, NULL));
  free(name);
  *out = src;
  return DA_OK;
}

da_status da_render(da_context *ctx, const da_spec *spec, da_target target, char **source,
                    char **kernel_name) {
  DA_RETURN_IF(!source, DA_ERR_INVALID_ARGUMENT, "source is NULL");
  DA_RETURN_IF(target != DA_TARGET_HOST && target != DA_TARGET_CUDA, DA_ERR_INVALID_ARGUMENT,
               "target: %d is not host (0) or cuda (1)", (int)target);
  da__rendered r;
  DA_TRY(da__render_ex(ctx, spec, target, NULL, &r));
  *source = r.source;
  if (kernel_name) *kernel_name = r.kernel_name;
  else free(r.kernel_name);
  return DA_OK;
}
