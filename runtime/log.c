/* log.c - the library's only stderr output: warnings and notes a user should see (a
 * corrupt cache entry rebuilt, a cache folder that degrades to memory-only), filtered by
 * DILATTN_LOG_LEVEL = error | warn (default) | info | debug | off. */
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The level, and 1 in *junk for a value that is none of the names (warn then). */
static int level_from_env(int *junk) {
  const char *e = getenv("DILATTN_LOG_LEVEL");
  *junk = 0;
  if (!e || !*e || !strcmp(e, "warn")) return DA_LOG_WARN;
  if (!strcmp(e, "off")) return -1;
  if (!strcmp(e, "error")) return DA_LOG_ERROR;
  if (!strcmp(e, "info")) return DA_LOG_INFO;
  if (!strcmp(e, "debug")) return DA_LOG_DEBUG;
  *junk = 1;
  return DA_LOG_WARN;
}

void da__log(int level, const char *fmt, ...) {
  int junk;
  const int max = level_from_env(&junk);
  static int told; /* once a process (every context's creation logs at debug: it is seen) */
  if (junk && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
    fprintf(stderr, "dilattn: warning: DILATTN_LOG_LEVEL=%s is not off, error, warn, info or debug; using warn\n",
            getenv("DILATTN_LOG_LEVEL"));
  if (level > max) return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dilattn: %s: %s\n", names[level], line);
}
