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
 * remembers the text of its last failure together with the context it was for. */
static _Thread_local char tls_error[DA_ERROR_MAX];
static _Thread_local const da_context *tls_error_ctx;

da_status da__set_error(const da_context *ctx, da_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  va_end(ap);
  tls_error_ctx = ctx;
  return st;
}

void da__clear_error(const da_context *ctx) {
  if (tls_error_ctx == ctx) tls_error[0] = '\0';
}

const char *da_context_last_error(const da_context *ctx) {
  if (tls_error_ctx != ctx) return "";
  return tls_error;
}

const char *da_version(void) { return DA_VERSION_STRING; }
