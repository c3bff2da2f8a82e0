/* bundle_writer.h - what `dilattn gen --bundle` writes (manifest, typed header, linked data). */
#ifndef DA_BUNDLE_WRITER_H
#define DA_BUNDLE_WRITER_H

#include <stddef.h>

#include "dilattn.h"
#include "runtime/fileio.h"

typedef struct {
  const char *config_path;
  da_spec spec;
  char *spec_json;
  char kernel[256], source_key[65], source_file[320], target[8];
  int cuda_mma; /* the instruction the typed _plan asks for (da_plan_options.cuda_mma the kernels were
                   rendered with; 0: none, the host target or gen --mma auto) */
  int entry;    /* 1: the config's typed entry points come with this item (its first kernel) */
  int nart;
  struct {
    char arch[32], key[65], file[340], sha256[65];
    size_t size;
    const unsigned char *data; /* its bytes (gen's, until the bundle is written) */
  } art[16];
} da__bundle_item;

/* The identifier of a config in the bundle's entry points (NAME_<ident>_spec/_plan/_run):
 * its file name up to the first '.', other characters than letters and digits as '_', a
 * leading 'k' where it would start with a digit or be empty. Two configs with one identifier
 * cannot share a bundle (gen refuses them). */
void da__bundle_ident(const char *path, char *out, size_t cap);

/* manifest.json, <name>.h and <name>_bundle.c for dir, staged in out[0..3) (da__stage_file:
 * temp files beside them, whole), which the caller commits with its other outputs. 0, or -1
 * with errno and nothing staged. */
int da__bundle_write(const char *dir, const char *name, const da__bundle_item *items, int n, const char *nvrtc,
                     da__staged_file out[3]);

#endif
