/* status.c - status names and messages (from the X-macro in dilattn.h), the per-thread
 * last-error text of a context, and the DA_RETURN_IF / DA_TRY helpers' error sink. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *da_status_name(da_status s) {
  switch (s) {
#define DA__STATUS_NAME(name, msg) \
  case DA_##name:                  \
    return "DA_" #name;
    DA_STATUS_MAP(DA__STATUS_NAME)
#undef DA__STATUS_NAME
  default:
    return "DA_UNKNOWN_STATUS";
  }
}

const char *da_status_message(da_status s) {
  switch (s) {
#define DA__STATUS_MSG(name, msg) \
  case DA_##name:                 \
    return msg;
    DA_STATUS_MAP(DA__STATUS_MSG)
#undef DA__STATUS_MSG
  default:
    return "unknown status";
  }
}

/* The last-error text is per thread: a context shared by threads must not let one
 * thread's failure overwrite the detail another thread is about to read. Each thread
 * keeps the text of the last failure of its ERR_SLOTS most recently failed contexts
 * (NULL, the calls without one, among them), so one context's failure does not erase
 * another's detail before its caller reads it. */
#define ERR_SLOTS 4
static _Thread_local struct {
  const da_context *ctx;
  unsigned long long used; /* the failure's number on this thread; 0: free */
  char text[DA_ERROR_MAX];
} tls_err[ERR_SLOTS];
static _Thread_local unsigned long long tls_failures;

static int slot_of(const da_context *ctx) {
  for (int i = 0; i < ERR_SLOTS; i++)
    if (tls_err[i].used && tls_err[i].ctx == ctx) return i;
  return -1;
}

da_status da__set_error(const da_context *ctx, da_status st, const char *fmt, ...) {
  int i = slot_of(ctx);
  if (i < 0) { /* a free slot, else the one failed longest ago */
    i = 0;
    for (int j = 1; j < ERR_SLOTS; j++)
      if (tls_err[j].used < tls_err[i].used) i = j;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_err[i].text, sizeof tls_err[i].text, fmt, ap);
  va_end(ap);
  tls_err[i].ctx = ctx;
  tls_err[i].used = ++tls_failures;
  return st;
}

void da__clear_error(const da_context *ctx) {
  const int i = slot_of(ctx);
  if (i >= 0) tls_err[i].used = 0, tls_err[i].text[0] = '\0';
}

const char *da_context_last_error(const da_context *ctx) {
  const int i = slot_of(ctx);
  return i < 0 ? "" : tls_err[i].text;
}

const char *da_version(void) { return DA_VERSION_STRING; }
