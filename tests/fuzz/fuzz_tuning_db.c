/* fuzz_tuning_db.c - libFuzzer target for the tuning database reader (runtime/tuning_db.c):
 * da__tuning_db_read, da__tuning_best and the merge's round trip.
 *
 * Input: byte 0 is flags, the rest the file's text. Bit 0: this machine's environment
 * header (da__tuning_env()) goes first, so the records are read (without it the input's
 * first line is the header, which almost never matches). Bit 1: the records read are
 * merged into an empty database and read back: every one must come back, with its text.
 * Every record read must be one the tuner could have written (a 64-hex-digit spec hash,
 * a bucket in 0..63, tiles in da_plan_options' ranges): a damaged line is skipped, not
 * handed to the planner or to the nearest-bucket search (a bucket of INT_MIN overflowed
 * it). Each record then queries da__tuning_best at the buckets plans ask for (0..63).
 * A broken rule aborts (a finding), as do a crash or a sanitizer report. Files go to
 * /dev/shm (or $TMPDIR). Build and run: tests/fuzz/README.md; replayed over
 * corpus/tuning_db as an ordinary test with replay.c. (First written by a fuzzing
 * campaign in session 15, which found the INT_MIN bucket and the truncated hash.)
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/render.h"
#include "runtime/tuning_db.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char db[256], db2[256];

/* the scratch files go when the process ends (replay.c runs it as a test) */
static void cleanup(void) {
  char lock[300];
  unlink(db), unlink(db2);
  snprintf(lock, sizeof lock, "%s.lock", db2);
  unlink(lock);
}

static void paths(void) {
  if (db[0]) return;
  const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(db, sizeof db, "%s/fz_tdb_%d.jsonl", dir, (int)getpid());
  snprintf(db2, sizeof db2, "%s/fz_tdb_%d_m.jsonl", dir, (int)getpid());
  atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  paths();
  const int flags = data[0];
  FILE *f = fopen(db, "w");
  if (!f) abort();
  if (flags & 1) fprintf(f, "%s\n", da__tuning_env());
  fwrite(data + 1, 1, size - 1, f);
  fclose(f);
  da__tune_record *recs = NULL;
  int mismatch = 0;
  const int n = da__tuning_db_read(db, &recs, &mismatch);
  (void)mismatch; /* n < 0: another environment's database, or not one: nothing read */
  for (int i = 0; i < n; i++) {
    const da__tune_record *r = &recs[i];
    if (strlen(r->spec_hash) != 64 || strspn(r->spec_hash, "0123456789abcdef") != 64 || !r->backend[0]) abort();
    if (r->bucket < 0 || r->bucket > 63 || r->params.tile_q < 0 || r->params.tile_q > 256 || r->params.tile_k < 0 ||
        r->params.tile_k > 1024 || r->params.fused_min_queries < 0 || r->params.cuda_mma < 0 ||
        r->params.cuda_mma > DA__CUDA_MMA_MAX)
      abort();
    static const int buckets[] = {0, 1, 10, 16, 31, 62, 63};
    for (size_t b = 0; b < sizeof buckets / sizeof *buckets; b++) {
      const da__tune_record *b2 = da__tuning_best(recs, n, r->spec_hash, r->backend, buckets[b], b % 2);
      if (b2 && (b2 < recs || b2 >= recs + n || strcmp(b2->status, "ok"))) abort();
    }
  }
  if ((flags & 2) && n > 0) {
    unlink(db2);
    if (da__tuning_db_merge(NULL, db2, recs, n) == DA_OK) {
      da__tune_record *back = NULL;
      const int m = da__tuning_db_read(db2, &back, NULL);
      if (m != n) {
        fprintf(stderr, "tuning db round trip: %d records merged, %d read back\n", n, m);
        abort();
      }
      for (int i = 0; i < n; i++) /* and their text (a label cut inside a UTF-8 character was lost) */
        if (strcmp(back[i].label, recs[i].label) || strcmp(back[i].spec_hash, recs[i].spec_hash)) {
          fprintf(stderr, "tuning db round trip: record %d came back as '%s', was '%s'\n", i, back[i].label,
                  recs[i].label);
          abort();
        }
      free(back);
    }
    unlink(db2);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", db2);
    unlink(lock);
  }
  free(recs);
  return 0;
}
