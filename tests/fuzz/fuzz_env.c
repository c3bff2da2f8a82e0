/* fuzz_env.c - libFuzzer target for the environment's number readers (runtime/env.c):
 * da__parse_bytes (DILATTN_WORKSPACE_LIMIT, DILATTN_CACHE_MAX_BYTES) and da__parse_count
 * (DILATTN_NUM_THREADS, the pattern cache's size).
 *
 * Each input, as a string, goes to both, and each answer is checked against an oracle
 * written from the README's grammar, not from the parser: bytes are digits with an
 * optional K, M, G or T (any case) and an optional iB or B after it, worth digits x
 * 1024^unit, accepted below 2^64 - 1; a count is digits only, up to the maximum. A
 * disagreement aborts (a finding), as do a crash or a sanitizer report. Build and run:
 * tests/fuzz/README.md; replayed over corpus/env as an ordinary test with replay.c.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The value digits[0..n) times mul, or -1 where it is 2^64 or more. */
static __int128 value_of(const char *d, size_t n, __int128 mul) {
  __int128 v = 0;
  for (size_t i = 0; i < n; i++) {
    v = v * 10 + (d[i] - '0');
    if (v * mul >= ((__int128)1 << 64)) return -1;
  }
  return v * mul;
}

static void oracle_bytes(const char *s) {
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) n++;
  const char *rest = s + n;
  int unit = 0;
  const char *units = "KMGT";
  if (n > 0 && *rest && strchr(units, toupper((unsigned char)*rest))) {
    unit = (int)(strchr(units, toupper((unsigned char)*rest)) - units) + 1;
    rest++;
    if ((rest[0] == 'i' || rest[0] == 'I') && (rest[1] == 'b' || rest[1] == 'B') && !rest[2]) rest += 2;
    else if ((rest[0] == 'b' || rest[0] == 'B') && !rest[1]) rest += 1;
  }
  const __int128 want = n > 0 && !*rest ? value_of(s, n, (__int128)1 << (10 * unit)) : -1;
  const int accept = want >= 0 && want < (__int128)UINT64_MAX; /* 2^64 - 1: "none" to callers */
  uint64_t got = 0;
  const int ok = da__parse_bytes(s, &got);
  if (ok != accept || (ok && (__int128)got != want)) {
    fprintf(stderr, "da__parse_bytes(\"%s\"): %s %llu, the grammar says %s\n", s, ok ? "took" : "refused",
            (unsigned long long)got, accept ? "take it" : "refuse it");
    abort();
  }
}

static void oracle_count(const char *s, long max) {
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) n++;
  const __int128 v = n > 0 && !s[n] ? value_of(s, n, 1) : -1;
  const int accept = v >= 0 && v <= max;
  long got = -1;
  const int ok = da__parse_count(s, max, &got);
  if (ok != accept || (ok && got != (long)v)) {
    fprintf(stderr, "da__parse_count(\"%s\", %ld): %s %ld, the grammar says %s\n", s, max, ok ? "took" : "refused", got,
            accept ? "take it" : "refuse it");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64) return 0; /* a number and its unit; longer inputs say nothing new */
  char s[65];
  memcpy(s, data, size);
  s[size] = '\0'; /* an embedded NUL ends the string, as getenv's would */
  oracle_bytes(s);
  oracle_count(s, 1000);
  oracle_count(s, 1L << 20);
  oracle_count(s, 0x7fffffffffffffffL);
  return 0;
}
