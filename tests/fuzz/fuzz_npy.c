/* fuzz_npy.c - libFuzzer target for the .npy reader (runtime/npy.c).
 *
 * Parses the input as a whole .npy file and frees the result. Any outcome is fine except
 * a crash, a sanitizer report, a leak, or an inconsistent success (data NULL or larger
 * than the input). Build and run: see tests/fuzz/README.md; replayed over corpus/npy as
 * an ordinary test by linking with replay.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  da__npy_array a;
  char msg[256];
  da_status st = da__npy_parse(data, size, &a, msg, sizeof msg);
  if (st == DA_OK && (!a.data || a.count * a.elem_size > size)) abort();
  if (st != DA_OK && (a.data || !msg[0])) abort();
  da__npy_free(&a);
  return 0;
}
