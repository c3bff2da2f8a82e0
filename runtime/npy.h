/* npy.h - internal reader and writer of NumPy .npy array files.
 *
 * The CLI's `run` command reads q/k/v and writes out/lse through these calls. Only the
 * little-endian, C-order float dtypes the kernels use are supported: '<f4', '<f2',
 * '<f8' and bf16 stored as raw '<u2'. The reader accepts format versions 1.0, 2.0 and
 * 3.0 and is strict: anything it does not understand is DA_ERR_PARSE with a message
 * saying what and where (byte offset, header field). It never reads outside the buffer
 * it is given, whatever the bytes (tests/fuzz/fuzz_npy.c checks that). The writer
 * produces version 1.0 files, whole or not at all (temp file + rename).
 *
 * Assumes a little-endian host: array data are copied, not byte-swapped.
 */
#ifndef DA_NPY_H
#define DA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "dilattn.h"

typedef enum {
  DA_NPY_F32 = 0, /* '<f4' */
  DA_NPY_F16,     /* '<f2' */
  DA_NPY_BF16,    /* '<u2': bfloat16 bit patterns */
  DA_NPY_F64      /* '<f8' */
} da__npy_dtype;

#define DA_NPY_MAX_DIMS 8

typedef struct {
  da__npy_dtype dtype;
  int ndim;                        /* 0 (scalar) .. DA_NPY_MAX_DIMS */
  int64_t shape[DA_NPY_MAX_DIMS];  /* entries past ndim are 0 */
  size_t elem_size;                /* bytes per element: 4, 2, 2, 8 */
  size_t count;                    /* product of shape (1 for a scalar) */
  void *data;                      /* count * elem_size bytes, malloc'ed, never NULL on DA_OK */
} da__npy_array;

/* Parse an in-memory .npy file. On DA_OK *out holds a malloc'ed copy of the data (free
 * it with da__npy_free). On error *out is zeroed and msg (NUL-terminated, truncated to
 * msg_cap; may be NULL) says exactly what is wrong and where, e.g. "header: shape (2, 3)
 * of '<f4' needs 24 bytes of data, the file has 20". Returns DA_OK, DA_ERR_PARSE
 * (malformed or unsupported file), DA_ERR_INVALID_ARGUMENT (out NULL, or buf NULL with
 * len > 0), DA_ERR_NO_MEMORY. Thread-safe. */
da_status da__npy_parse(const void *buf, size_t len, da__npy_array *out, char *msg,
                        size_t msg_cap);

/* Read the file at path and parse it as da__npy_parse does; the message starts with the
 * path. Returns DA_ERR_IO when the file cannot be read, DA_ERR_PARSE when malformed, and
 * the other codes of da__npy_parse. Thread-safe. */
da_status da__npy_load(const char *path, da__npy_array *out, char *msg, size_t msg_cap);

/* Free the data of *a and zero it. NULL-safe. */
void da__npy_free(da__npy_array *a);

/* The .npy descr of a dtype: "<f4", "<f2", "<u2", "<f8" ("?" for a value out of range). */
const char *da__npy_dtype_descr(da__npy_dtype t);

/* Write a version 1.0 .npy file at path holding ndim dims of shape and the data (C
 * order, count * elem_size bytes; may be NULL only when the count is 0). Atomic: the
 * file is written to a temp file in the same folder (mkstemp), fsync'ed and renamed over
 * path; on any failure the temp file is removed and path is untouched. An existing file
 * keeps its permission bits, a new one gets 0666 less the umask. Returns DA_OK,
 * DA_ERR_INVALID_ARGUMENT (bad dtype, ndim, negative dim, size overflow, NULL pointer),
 * DA_ERR_IO (msg: the path and strerror). Thread-safe for different paths. */
da_status da__npy_save(const char *path, da__npy_dtype dtype, int ndim, const int64_t *shape,
                       const void *data, char *msg, size_t msg_cap);
/* The same NPY written to an open descriptor as it stands (a stream: a pipe, a device, the
 * process's stdout), not atomically; name is its name in messages. */
da_status da__npy_save_fd(int fd, const char *name, da__npy_dtype dtype, int ndim, const int64_t *shape,
                          const void *data, char *msg, size_t msg_cap);

#endif /* DA_NPY_H */
