/* bundle.h - AOT bundles (issue 5): kernels compiled ahead of time, registered with a
 * context from a manifest on disk or from data linked into the program, and looked up
 * by artifact key before the disk cache and the compiler. */
#ifndef DA_BUNDLE_H
#define DA_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/internal.h"

typedef struct da__bundles da__bundles;

DA_HIDDEN da__bundles *da__bundles_create(void);
DA_HIDDEN void da__bundles_destroy(da__bundles *b);

/* Register from a manifest's text; files named in it are read relative to dir, else (one
 * not there) to alt_dir where not NULL (NULL dir for embedded data: blobs[i] holds the
 * artifact whose "file" is names[i]). A manifest of another library version or cache
 * schema is skipped with a warning (DA_OK, nothing registered); malformed JSON or missing
 * members are DA_ERR_PARSE. */
DA_HIDDEN da_status da__bundles_add(const da_context *ctx, da__bundles *b, const char *manifest_text,
                                    size_t len, const char *origin, const char *dir, const char *alt_dir,
                                    const char *const *names,
                                    const unsigned char *const *blobs, const size_t *sizes, int nblobs);

/* Find the artifact (arch, key): 1 with a malloc'ed verified copy, 0 when absent. A
 * checksum mismatch is logged and skipped. */
DA_HIDDEN int da__bundles_find(da__bundles *b, const char *arch, const char *key, void **bytes, size_t *n);
/* Where a bundle holds source_key for other arches only (no artifact for arch was found),
 * one warning names one of them (once an artifact). */
DA_HIDDEN void da__bundles_note_other_arch(da__bundles *b, const char *arch, const char *source_key);

/* An artifact of source_key for arch built by another compiler (another NVRTC, another
 * CC: a key other than key, the one computed here), newest first among those accept takes
 * (NULL: any; it sees the bundle's origin and the verified bytes), else one for an older
 * arch of arch's major (a cubin for sm_80 on an sm_86 device: binary compatible): 1 with a
 * malloc'ed verified copy, else 0. A bundle is made to run without the compiler that built it. */
DA_HIDDEN int da__bundles_find_source(da__bundles *b, const char *arch, const char *key, const char *source_key,
                                      da__artifact_accept accept, void *user, void **bytes, size_t *n);

/* Number of artifacts of source_key for arch registered (whatever built them). */
DA_HIDDEN size_t da__bundles_holding(da__bundles *b, const char *arch, const char *source_key);
/* Number of artifacts for arch of a kernel named kernel whose source is not source_key: the
 * same kernel with other tunables (a name does not say its tiles) */
DA_HIDDEN size_t da__bundles_holding_variant(da__bundles *b, const char *arch, const char *kernel,
                                             const char *source_key);

/* Number of artifacts registered. */
DA_HIDDEN size_t da__bundles_count(da__bundles *b);

/* Artifact keys, shared by the runtime and `dilattn gen --bundle`. */
DA_HIDDEN void da__host_artifact_key(const char *source_key, char key[65]);

#endif
