/* env.c - numbers from the environment, read one way everywhere: digits only (strtoull
 * alone takes a sign, leading spaces and "0x"), each variable's own default or error where
 * the text is not one. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "runtime/internal.h"

int da__parse_bytes(const char *s, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return 0; /* no sign, no space, not empty */
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno) return 0;
  int shift = 0;
  const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
  if (u) shift = 10 * (int)(u - units + 1), end++;
  if (u && (!strcasecmp(end, "iB") || !strcasecmp(end, "B"))) end += strlen(end);
  /* 2^64 - 1 bytes and more are refused (callers read UINT64_MAX as "none") */
  if (*end || (shift ? v > (UINT64_MAX >> shift) : v == UINT64_MAX)) return 0;
  *out = (uint64_t)v << shift;
  return 1;
}

double da__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int da__parse_count(const char *s, long max, long *out) {
  if (!s || !isdigit((unsigned char)*s)) return 0;
  char *end;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno || *end || v > max) return 0;
  *out = v;
  return 1;
}
