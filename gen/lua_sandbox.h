/* lua_sandbox.h - the generator's sandboxed Lua 5.4 state: allow-listed libraries,
 * text-only chunks with explicit environments, an instruction budget, a memory limit,
 * and one pcall helper that turns any error into a status with a traceback. */
#ifndef DA_LUA_SANDBOX_H
#define DA_LUA_SANDBOX_H

#include "runtime/internal.h"

#include <lua.h>

typedef struct da__lua da__lua;

typedef struct {
  size_t mem_limit;        /* bytes the state may hold; 0 = default (256 MiB) */
  long long instr_budget;  /* VM instructions per protected call; 0 = default (2e9) */
} da__lua_limits;

/* Open a sandboxed state. Returns DA_OK or DA_ERR_NO_MEMORY (detail recorded on ctx). */
DA_HIDDEN da_status da__lua_open(const da_context *ctx, const da__lua_limits *limits,
                                 da__lua **out);
DA_HIDDEN void da__lua_close(da__lua *S);
DA_HIDDEN lua_State *da__lua_state(da__lua *S);

/* Call the function below nargs arguments on the stack, like lua_pcall, with a fresh
 * instruction budget and a traceback handler. On error the message (with traceback) is
 * recorded on ctx prefixed by `what`, the stack is restored and DA_ERR_GENERATOR
 * (DA_ERR_NO_MEMORY for an allocation failure) is returned. */
DA_HIDDEN da_status da__lua_pcall(da__lua *S, int nargs, int nresults, const char *what);

/* Embedded resources (gen/embed.cmake): name -> bytes. Names: "templates/<path>" and
 * "lua/<module>.lua". Returns NULL when absent. */
typedef struct {
  const char *name;
  const unsigned char *data;
  size_t size;
} da__resource;
DA_HIDDEN const da__resource *da__resource_find(const char *name);

#endif
