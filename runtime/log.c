/* log.c - the library's only stderr output: warnings and notes a user should see (a
 * corrupt cache entry rebuilt, a cache folder that degrades to memory-only), filtered by
 * DILATTN_LOG_LEVEL = error | warn (default) | info | debug | off. */
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int level_from_env(void) {
  const char *e = getenv("DILATTN_LOG_LEVEL");
  if (!e || !*e) return DA_LOG_WARN;
  if (!strcmp(e, "off")) return -1;
  if (!strcmp(e, "error")) return DA_LOG_ERROR;
  if (!strcmp(e, "info")) return DA_LOG_INFO;
  if (!strcmp(e, "debug")) return DA_LOG_DEBUG;
  return DA_LOG_WARN;
}

void da__log(int level, const char *fmt, ...) {
  if (level > level_from_env()) return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dilattn: %s: %s\n", names[level], line);
}
