/* fileio.h - whole-file reads and atomic writes, shared by the caches, bundles and CLI. */
#ifndef DA_FILEIO_H
#define DA_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/internal.h"

/* Read a whole regular file (up to 2 GiB) into a malloc'ed, NUL-terminated buffer; NULL
 * with errno set on failure (EINVAL: not a regular file; a FIFO is not waited on). */
DA_HIDDEN char *da__read_file(const char *path, size_t *len);

/* Why da__read_file or da__fopen_regular failed, from its errno: strerror's text, but
 * "not a regular file (a FIFO or a device)" for EINVAL. */
DA_HIDDEN const char *da__read_error(int e);

/* path opened to read (fopen "r") where it is a regular file of at most max bytes; else
 * NULL with errno set (EISDIR; EINVAL: a FIFO or device, opened without waiting for a
 * writer; EFBIG). */
DA_HIDDEN FILE *da__fopen_regular(const char *path, long long max);

/* Write data to path whole or not at all: a temp file in the same folder, fsync, rename.
 * mode is the new file's permission bits. 0 on success, -1 with errno set. */
DA_HIDDEN int da__write_file_atomic(const char *path, const void *data, size_t len, unsigned mode);

/* Permission bits for an output file written over path: an existing file's own, else
 * 0666 less the process umask (read without changing it: umask(2) would race threads). */
DA_HIDDEN unsigned da__output_mode(const char *path);

/* A new empty file beside path, "<path>.tmp-XXXXXX" (its name into tmp), with the
 * permission bits path is to have (da__output_mode: mkstemp's are 0600): its descriptor,
 * or -1 with errno set and nothing left behind. The caller writes it and renames it over
 * path (or unlinks it). */
DA_HIDDEN int da__output_tmp(const char *path, char *tmp, size_t cap);

/* 0 when a file can be made beside path (a temp file made there and removed: checked
 * before long work whose result goes there), else -1 with errno set. */
DA_HIDDEN int da__can_write_beside(const char *path);

/* A file's path split at its last '/': the folder into dir ("." where there is no '/',
 * "/" where the only one comes first), and the name, returned (a pointer into path).
 * NULL with errno ENAMETOOLONG where the folder does not fit cap. */
DA_HIDDEN const char *da__split_path(const char *path, char *dir, size_t cap);

/* mkdir -p: path and its missing parents (mode for those made). 0 when path is a folder
 * then, -1 with errno set. */
DA_HIDDEN int da__mkdir_p(const char *path, unsigned mode);

/* Where DILATTN_DUMP_DIR is set: write text there as file (the folder made as needed).
 * 0 when written or unset; -1 when it cannot be written (a warning, once a process). */
DA_HIDDEN int da__dump_source(const char *file, const char *text);

#endif
