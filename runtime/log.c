/* log.c - the library's only stderr output: warnings and notes a user should see (a
 * corrupt cache entry rebuilt, a cache folder that degrades to memory-only), filtered by
 * DILATTN_LOG_LEVEL = error | warn (default) | info | debug | off; to the program's
 * callback instead where it set one (da_set_log_callback). */
#include "runtime/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
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

/* The program's callback (da_set_log_callback) and its argument, under sink_mu: lines go
 * there instead of stderr */
static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static da_log_fn sink_fn;
static void *sink_user;

void da_set_log_callback(da_log_fn fn, void *user) {
  pthread_mutex_lock(&sink_mu);
  sink_fn = fn, sink_user = user;
  pthread_mutex_unlock(&sink_mu);
}

/* A made line to the callback, else stderr */
static void emit(int level, const char *line) {
  static const char *const names[] = {"error", "warning", "info", "debug"};
  pthread_mutex_lock(&sink_mu);
  da_log_fn fn = sink_fn;
  void *user = sink_user;
  pthread_mutex_unlock(&sink_mu);
  if (fn) fn(level, line, user);
  else fprintf(stderr, "dilattn: %s: %s\n", names[level], line);
}

/* Whether the level is off; once a process, the warning for a junk DILATTN_LOG_LEVEL */
static int level_off(int level) {
  int junk;
  const int max = level_from_env(&junk);
  static int told; /* once a process (every context's creation logs at debug: it is seen) */
  if (junk && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED)) {
    char line[300];
    snprintf(line, sizeof line, "DILATTN_LOG_LEVEL=%.200s is not off, error, warn, info or debug; using warn",
             getenv("DILATTN_LOG_LEVEL"));
    emit(DA_LOG_WARN, line);
  }
  return level > max;
}

/* Whether line was said before in this process: a set of 1024 64-bit hashes of the lines
 * said (FNV-1a); past that, never */
static int said_before(const char *line) {
  static uint64_t seen[1024];
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  uint64_t h = 1469598103934665603ull;
  for (const char *c = line; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  h |= 1; /* (0 marks an empty slot) */
  int again = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = h % 1024, k = 0; k < 1024; i = (i + 1) % 1024, k++) {
    if (seen[i] == h) again = 1;
    if (seen[i] == h || !seen[i]) {
      seen[i] = h;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return again;
}

/* once: said only the first time key (NULL: the line itself) is */
static void vlog(int level, int once, const char *key, const char *fmt, va_list ap) {
  if (level_off(level)) return;
  char line[2048];
  vsnprintf(line, sizeof line, fmt, ap);
  if (!once || !said_before(key ? key : line)) emit(level, line);
}

void da__log(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, 0, NULL, fmt, ap);
  va_end(ap);
}

void da__log_once(const char *key, int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, 1, key, fmt, ap);
  va_end(ap);
}
