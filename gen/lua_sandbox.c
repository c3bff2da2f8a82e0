/* lua_sandbox.c - the sandboxed Lua state the generator runs in (after Redis's
 * script_lua.c): only base/string/table/math, with load/dofile/require/print and
 * string.dump removed; chunks loaded as text ("t") into explicit environments; globals
 * locked; a count hook enforcing an instruction budget; an allocator enforcing a memory
 * limit; every call through da__lua_pcall with a traceback.
 *
 * Functions the sandbox gives Lua code:
 *   sandbox_load(code, chunkname, env) -> function   (text chunks only)
 *   require_module(name) -> module table               (gen/lua/<name>.lua, cached)
 *   read_template(path) -> text                        (templates/<path>)
 *   _G_SAFE                                             (the allow-listed globals)
 * DILATTN_TEMPLATE_DIR=D reads templates from D/<path> and modules from D/lua/<name>.lua
 * or D/../gen/lua/<name>.lua when present, instead of the embedded copies. */
#include "gen/lua_sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MEM_LIMIT ((size_t)256 << 20)
#define DEFAULT_INSTR_BUDGET 2000000000LL
#define HOOK_EVERY 10000

struct da__lua {
  lua_State *L;
  const da_context *ctx;
  size_t used, limit;
  long long budget, spent;
  int oom; /* set when the allocator refused a request: 1 past the limit, 2 out of memory */
};

static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  da__lua *S = ud;
  if (nsize == 0) {
    if (ptr) S->used -= osize;
    free(ptr);
    return NULL;
  }
  size_t old = ptr ? osize : 0;
  if (nsize > old && S->used - old + nsize > S->limit) {
    S->oom = 1;
    return NULL;
  }
  void *np = realloc(ptr, nsize);
  if (!np) {
    S->oom = 2;
    return NULL;
  }
  S->used = S->used - old + nsize;
  return np;
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  da__lua *S;
  lua_getallocf(L, (void **)&S);
  S->spent += HOOK_EVERY;
  if (S->spent > S->budget)
    luaL_error(L, "instruction budget exceeded (%I VM instructions): a template or generator "
                  "module does not terminate", (lua_Integer)S->budget);
}

/* ---- resources: embedded, or from DILATTN_TEMPLATE_DIR --------------------------------- */

/* The FILE being read sits in a userdata whose __gc closes it: the buffer's growth can
 * raise (the memory limit) with the file open, and an error unwinds past any fclose here
 * (a descriptor lost a failed render). */
static int file_box_gc(lua_State *L) {
  FILE **pf = (FILE **)lua_touserdata(L, 1);
  if (pf && *pf) fclose(*pf), *pf = NULL;
  return 0;
}

static int read_file(lua_State *L, const char *path) {
  FILE **pf = (FILE **)lua_newuserdatauv(L, sizeof *pf, 0); /* (may raise: nothing is open yet) */
  *pf = NULL;
  if (luaL_newmetatable(L, "dilattn.file")) {
    lua_pushcfunction(L, file_box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (!(*pf = fopen(path, "rb"))) {
    lua_pop(L, 1);
    return 0;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, *pf)) > 0) luaL_addlstring(&b, chunk, n);
  const int err = ferror(*pf);
  fclose(*pf), *pf = NULL;
  if (err) return luaL_error(L, "read error on %s", path);
  luaL_pushresult(&b);
  lua_remove(L, -2); /* the box, under the text */
  return 1;
}

/* Push the text of a resource, or raise. kind: "templates" or "lua". */
static void push_resource(lua_State *L, const char *kind, const char *rel) {
  if (strstr(rel, "..") || rel[0] == '/') luaL_error(L, "resource name '%s' is not allowed", rel);
  const char *dir = getenv("DILATTN_TEMPLATE_DIR");
  if (dir && *dir) {
    char path[4096];
    if (!strcmp(kind, "templates")) {
      snprintf(path, sizeof path, "%s/%s", dir, rel);
      if (read_file(L, path)) return;
      luaL_error(L, "template '%s' not found at %s (DILATTN_TEMPLATE_DIR is set)", rel, path);
    }
    snprintf(path, sizeof path, "%s/lua/%s", dir, rel);
    if (read_file(L, path)) return;
    snprintf(path, sizeof path, "%s/../gen/lua/%s", dir, rel);
    if (read_file(L, path)) return;
  }
  char name[512];
  snprintf(name, sizeof name, "%s/%s", kind, rel);
  const da__resource *r = da__resource_find(name);
  if (!r) luaL_error(L, "no embedded resource '%s'", name);
  lua_pushlstring(L, (const char *)r->data, r->size);
}

/* sandbox_load(code, chunkname, env): text-only chunk with env as its _ENV. */
static int l_sandbox_load(lua_State *L) {
  size_t len;
  const char *code = luaL_checklstring(L, 1, &len);
  const char *name = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (luaL_loadbufferx(L, code, len, name, "t") != LUA_OK) return lua_error(L);
  lua_pushvalue(L, 3);
  if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1); /* chunk without upvalues */
  return 1;
}

static int l_no_new_global(lua_State *L) {
  return luaL_error(L, "assignment to undeclared global '%s'", luaL_tolstring(L, 2, NULL));
}

/* New locked environment: reads fall back to _G_SAFE, writes raise. */
static void push_locked_env(lua_State *L) {
  lua_newtable(L);                                  /* env */
  lua_newtable(L);                                  /* env mt */
  lua_getfield(L, LUA_REGISTRYINDEX, "da_safe_G"); /* env mt G */
  lua_setfield(L, -2, "__index");                   /* env mt */
  lua_pushcfunction(L, l_no_new_global);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, -2); /* env */
}

/* require_module(name): load gen/lua/<name>.lua once per state into its own env. */
static int l_require_module(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "da_modules"); /* mods */
  lua_getfield(L, -1, name);                        /* mods mod? */
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);                                    /* mods */
  char rel[256];
  snprintf(rel, sizeof rel, "%s.lua", name);
  push_resource(L, "lua", rel);                     /* mods text */
  char chunk[300];
  snprintf(chunk, sizeof chunk, "@gen/lua/%s.lua", name);
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  if (luaL_loadbufferx(L, text, len, chunk, "t") != LUA_OK) return lua_error(L); /* mods text fn */
  push_locked_env(L);                               /* mods text fn env */
  lua_setupvalue(L, -2, 1);                         /* mods text fn */
  lua_call(L, 0, 1);                                /* mods text mod */
  if (!lua_istable(L, -1)) luaL_error(L, "module '%s' did not return a table", name);
  lua_pushvalue(L, -1);
  lua_setfield(L, -4, name); /* mods text mod */
  return 1;
}

static int l_read_template(lua_State *L) {
  push_resource(L, "templates", luaL_checkstring(L, 1));
  return 1;
}

/* Build the allow-listed globals table and the registry entries. Runs protected. */
static int sandbox_setup(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},
                                  {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table},
                                  {LUA_MATHLIBNAME, luaopen_math},
                                  {NULL, NULL}};
  for (const luaL_Reg *l = libs; l->func; l++) {
    luaL_requiref(L, l->name, l->func, 1);
    lua_pop(L, 1);
  }
  /* string.dump makes binary chunks; drop it from the real table (strings' metatable
   * points there). math.random is not deterministic across runs. */
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
  lua_getglobal(L, "math");
  lua_pushnil(L);
  lua_setfield(L, -2, "random");
  lua_pushnil(L);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);

  static const char *const allowed[] = {"assert", "error",    "ipairs",    "next",     "pairs",
                                        "pcall",  "select",   "tonumber",  "tostring", "type",
                                        "xpcall", "rawequal", "rawget",    "rawlen",   "rawset",
                                        "setmetatable", "getmetatable", "string", "table", "math",
                                        "_VERSION", NULL};
  lua_newtable(L); /* safe */
  for (int i = 0; allowed[i]; i++) {
    lua_getglobal(L, allowed[i]);
    lua_setfield(L, -2, allowed[i]);
  }
  lua_pushcfunction(L, l_sandbox_load);
  lua_setfield(L, -2, "sandbox_load");
  lua_pushcfunction(L, l_require_module);
  lua_setfield(L, -2, "require_module");
  lua_pushcfunction(L, l_read_template);
  lua_setfield(L, -2, "read_template");
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "_G_SAFE");
  lua_setfield(L, LUA_REGISTRYINDEX, "da_safe_G"); /* (empty) */
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "da_modules");
  /* The real globals table is emptied: nothing outside the allow-list is reachable. */
  lua_pushglobaltable(L);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, -4);
  }
  lua_pop(L, 1);
  return 0;
}

da_status da__lua_open(const da_context *ctx, const da__lua_limits *limits, da__lua **out) {
  da__lua *S = calloc(1, sizeof *S);
  if (!S) return da__set_error(ctx, DA_ERR_NO_MEMORY, "lua: cannot allocate the sandbox");
  S->ctx = ctx;
  S->limit = limits && limits->mem_limit ? limits->mem_limit : DEFAULT_MEM_LIMIT;
  S->budget = limits && limits->instr_budget ? limits->instr_budget : DEFAULT_INSTR_BUDGET;
  S->L = lua_newstate(sandbox_alloc, S);
  if (!S->L) {
    free(S);
    return da__set_error(ctx, DA_ERR_NO_MEMORY, "lua: cannot create a state");
  }
  lua_pushcfunction(S->L, sandbox_setup);
  da_status st = da__lua_pcall(S, 0, 0, "lua sandbox setup");
  if (st != DA_OK) {
    da__lua_close(S);
    return st;
  }
  *out = S;
  return DA_OK;
}

void da__lua_close(da__lua *S) {
  if (!S) return;
  if (S->L) lua_close(S->L);
  free(S);
}

lua_State *da__lua_state(da__lua *S) { return S->L; }

/* The planner's refusals (planner.lua refuse: a table { refused = message }) pass through
 * as they are: the caller's options, not a fault to trace. Everything else gets the stack. */
static const char *refusal(lua_State *L, int idx) {
  if (!lua_istable(L, idx)) return NULL;
  idx = lua_absindex(L, idx);
  lua_pushliteral(L, "refused");
  lua_rawget(L, idx); /* raw: a template's table with metamethods runs none of them here */
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  lua_pop(L, 1); /* the string stays alive in the table */
  return msg;
}

static int msghandler(lua_State *L) {
  if (refusal(L, 1)) return 1;
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

da_status da__lua_pcall(da__lua *S, int nargs, int nresults, const char *what) {
  lua_State *L = S->L;
  const da_context *ctx = S->ctx;
  int base = lua_gettop(L) - nargs; /* index of the function */
  if (!lua_checkstack(L, 2)) return da__set_error(ctx, DA_ERR_NO_MEMORY, "%s: Lua stack", what);
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base); /* handler below the function */
  S->spent = 0;
  S->oom = 0;
  lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
  int rc = lua_pcall(L, nargs, nresults, base);
  lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base); /* handler */
  if (rc == LUA_OK) return DA_OK;
  const char *refused = rc == LUA_ERRRUN ? refusal(L, -1) : NULL;
  if (refused) {
    da__set_error(ctx, DA_ERR_INVALID_ARGUMENT, "%s: %s", what, refused);
    lua_pop(L, 1);
    return DA_ERR_INVALID_ARGUMENT;
  }
  const char *msg = lua_tostring(L, -1);
  /* the template past the sandbox's limit: a generator failure (CLI exit 3); the process
   * out of memory below it: DA_ERR_NO_MEMORY */
  const int limit = S->oom == 1, oom = rc == LUA_ERRMEM || S->oom;
  da_status st = oom && !limit ? DA_ERR_NO_MEMORY : DA_ERR_GENERATOR;
  if (rc == LUA_ERRMEM || !msg) msg = "not enough memory";
  if (limit)
    da__set_error(ctx, st, "%s: memory limit of %zu bytes exceeded (%s)", what, S->limit, msg);
  else if (oom)
    da__set_error(ctx, st, "%s: out of memory below the limit of %zu bytes (%s)", what, S->limit, msg);
  else
    da__set_error(ctx, st, "%s: %s", what, msg);
  lua_pop(L, 1);
  return st;
}
