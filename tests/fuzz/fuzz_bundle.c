/* fuzz_bundle.c - libFuzzer target for the AOT bundle manifest reader (runtime/bundle.c):
 * da__bundles_add, then da__bundles_find for every artifact the manifest names.
 *
 * Input: byte 0 is flags, the rest the manifest text (not NUL-terminated). Flag bit 0:
 * register as linked data (blobs named "a.so" = "hello" and "b.cubin" = "" (empty),
 * as da_context_register_bundle_data does), else as a manifest on disk whose files are
 * read relative to a scratch folder holding a.so and b.cubin (da_context_register_bundle).
 * Bit 1: register the same text twice (the second is a no-op by contract: the count
 * must not change). The seeds carry the right SHA-256 sums so the verified-hit path is
 * reachable. Any crash, sanitizer report or leak is a finding; so is a count that moved
 * on re-registration. Build: as fuzz_tuning_db.c.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];
static const char *const names[] = {"a.so", "b.cubin"};
static const unsigned char blob_a[] = "hello", blob_b[] = "";
static const unsigned char *const blobs[] = {blob_a, blob_b};
static const size_t sizes[] = {5, 0};

/* the scratch folder goes when the process ends (replay.c runs it as a test) */
static void cleanup(void) {
  char p[400];
  snprintf(p, sizeof p, "%s/a.so", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/b.cubin", dir);
  unlink(p);
  rmdir(dir);
}

static void setup(void) {
  if (dir[0]) return;
  atexit(cleanup);
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(dir, sizeof dir, "%s/fz_bundle_%d", base, (int)getpid());
  mkdir(dir, 0700);
  char p[400];
  snprintf(p, sizeof p, "%s/a.so", dir);
  FILE *f = fopen(p, "w");
  if (f) fwrite("hello", 1, 5, f), fclose(f);
  snprintf(p, sizeof p, "%s/b.cubin", dir);
  f = fopen(p, "w");
  if (f) fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  setup();
  const int flags = data[0];
  const char *text = (const char *)data + 1;
  const size_t len = size - 1;
  da__bundles *b = da__bundles_create();
  if (!b) return 0;
  const int linked = flags & 1;
  da_status st = linked ? da__bundles_add(NULL, b, text, len, "(linked)", NULL, NULL, (const char *const *)names,
                                          blobs, sizes, 2)
                        : da__bundles_add(NULL, b, text, len, "fuzz/manifest.json", dir, NULL, NULL, NULL, NULL, 0);
  if (st == DA_OK && (flags & 2)) {
    const size_t before = da__bundles_count(b);
    st = linked ? da__bundles_add(NULL, b, text, len, "(linked)", NULL, NULL, (const char *const *)names, blobs, sizes, 2)
                : da__bundles_add(NULL, b, text, len, "fuzz/manifest.json", dir, NULL, NULL, NULL, NULL, 0);
    if (st != DA_OK || da__bundles_count(b) != before) {
      fprintf(stderr, "re-registering the same manifest changed the registry (%zu -> %zu, status %d)\n", before,
              da__bundles_count(b), (int)st);
      abort();
    }
  }
  /* look up every artifact the manifest names (as the kernel cache would), and each
   * under another arch (the "other arches only" warning path) */
  json_t *root = json_loadb(text, len, 0, NULL);
  size_t ki, ai;
  json_t *k, *a;
  json_array_foreach(json_object_get(root, "kernels"), ki, k) {
    const char *sk = json_string_value(json_object_get(k, "source_key"));
    json_array_foreach(json_object_get(k, "artifacts"), ai, a) {
      const char *arch = json_string_value(json_object_get(a, "arch"));
      const char *key = json_string_value(json_object_get(a, "key"));
      if (!arch || !key) continue;
      void *bytes = NULL;
      size_t n = 0;
      if (da__bundles_find(b, arch, key, &bytes, &n)) {
        if (!bytes) abort();
        free(bytes);
      }
      bytes = NULL;
      if (da__bundles_find(b, "sm_00", key, &bytes, &n)) free(bytes);
      da__bundles_note_other_arch(b, "sm_00", sk);
      bytes = NULL; /* another compiler's build of the source: any artifact of it */
      if (da__bundles_find_source(b, arch, "0000000000000000000000000000000000000000000000000000000000000000", sk, NULL,
                                  NULL, &bytes, &n)) {
        if (!bytes) abort();
        free(bytes);
      }
    }
  }
  json_decref(root);
  da__bundles_destroy(b);
  return 0;
}
