/* fuzz_config.c - libFuzzer target for the config JSON parser (da_spec_from_json).
 *
 * Parses the input as a config; when it is accepted, validates the spec and renders its
 * canonical JSON, so the validator and the printer see every spec the parser can
 * produce. Any outcome is fine except a crash, a sanitizer report or a leak. Build and
 * run: see tests/fuzz/README.md; replayed over corpus/config as an ordinary test by
 * linking with replay.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dilattn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  da_spec spec;
  char msg[512];
  da_spec_init(&spec);
  if (da_spec_from_json((const char *)data, size, &spec, msg, sizeof msg) == DA_OK) {
    da_spec_validate(&spec, msg, sizeof msg);
    free(da_spec_to_json(&spec));
  }
  return 0;
}
