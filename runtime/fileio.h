/* fileio.h - whole-file reads and atomic writes, shared by the caches, bundles and CLI. */
#ifndef DA_FILEIO_H
#define DA_FILEIO_H

#include <limits.h>
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

/* Write data to path whole or not at all: a temp file in the same folder, fsync, rename
 * (path itself: a link there is replaced; the caches' own files). mode is the new file's
 * permission bits. 0 on success, -1 with errno set. */
DA_HIDDEN int da__write_file_atomic(const char *path, const void *data, size_t len, unsigned mode);

/* A user's output: a file (da__output_resolve) by da__write_file_atomic with its own mode
 * (da__output_mode), a stream written into. */
DA_HIDDEN int da__write_output(const char *path, const void *data, size_t len);

/* Permission bits for an output file written over path: an existing regular file's own
 * (not a link's target's), else 0666 less the process umask (read without changing it:
 * umask(2) would race threads). */
DA_HIDDEN unsigned da__output_mode(const char *path);

/* "<path>.<tag>-XXXXXX" into tmp (a mkstemp template), path's name cut short where the
 * whole would pass NAME_MAX. 0, or -1 with errno ENAMETOOLONG. */
DA_HIDDEN int da__tmp_name(const char *path, const char *tag, char *tmp, size_t cap);
/* A file "<path>.tmp-XXXXXX" (da__tmp_name) made with mode: its descriptor, or -1 with errno
 * set and nothing left. */
DA_HIDDEN int da__tmp_beside(const char *path, char *tmp, size_t cap, unsigned mode);

/* What an output named path is (da__output_resolve), never following a link at its end:
 * stream 0, a file to write whole or not at all (a new name, a regular file, a symlink:
 * replaced, never written through, so that root cannot be made to write where another
 * user's link in /tmp points; a folder, which the caller refuses); stream 1, written into:
 * own (fd >= 0 at once) for a name of the process's own descriptors spelt /dev/stdout,
 * /dev/stderr, /dev/fd/N or /proc/self/fd/N (written to that descriptor as it stands: its
 * offset, O_APPEND), else a character device or FIFO, opened by da__output_open. 0, or -1
 * with errno (EINVAL: a block device or socket, never written; EBADF: a descriptor not
 * open for writing; ENAMETOOLONG). */
typedef struct {
  char name[PATH_MAX]; /* path (the name written, never a resolved one) */
  int stream, fd, own;
} da__output;
DA_HIDDEN int da__output_resolve(const char *path, da__output *o);
/* A stream's descriptor: opened now for a device or FIFO (not through a link, and only
 * if it still is one; ENXIO: a FIFO with no reader, not waited for). -1 with errno. */
DA_HIDDEN int da__output_open(da__output *o);
/* data[0..len) written whole into a stream da__output_open opened: 0, or -1 with errno */
DA_HIDDEN int da__output_write(da__output *o, const void *data, size_t len);
/* Closes what da__output_open opened (never the process's own descriptors) */
DA_HIDDEN void da__output_release(da__output *o);
/* Whether the stream o is the process's standard output (fd 1, or the pipe or file it is;
 * not a character device such as a terminal shared with stderr) */
DA_HIDDEN int da__output_is_stdout(const da__output *o);
/* The message of da__output_resolve's or da__output_open's errno */
DA_HIDDEN const char *da__output_error(int e);

/* A new empty file for an output to path, a file (da__output_resolve; EINVAL for a stream:
 * da__write_output writes those): "<path>.tmp-XXXXXX" with the permission bits path is to
 * have (da__output_mode: mkstemp's are 0600), its name into tmp. Its descriptor, or -1
 * with errno set and nothing left behind. The caller writes it, then renames it over path
 * (or unlinks it). */
DA_HIDDEN int da__output_tmp(const char *path, char *tmp, size_t cap);

/* Outputs written whole or not at all, together: each to a temp file beside it
 * (da__stage_file, da__stage_bytes), then da__staged_commit puts all of them in place, or
 * none (the files they replace are kept as backups meanwhile, and put back on a failure),
 * and da__staged_cleanup removes the temps and backups left. */
typedef struct {
  char path[4400];  /* the output */
  char tmp[4500];   /* its content, whole (have_tmp); renamed over path at the commit */
  char bak[4500];   /* what path was, during and after a commit (have_bak) */
  int have_tmp, have_bak;
  int move;   /* no hard link could be made: path is moved aside to bak at the commit */
  int placed; /* the commit put it in place (da__staged_restore undoes it) */
  int lost;   /* da__staged_restore could not put back what it replaced: the errno */
  int kept;   /* ... and what path was is left at bak (not removed by da__staged_cleanup) */
} da__staged_file;
/* A temp file for the output path (a file: da__output_tmp's; EINVAL for a stream), staged
 * in f: its descriptor, which the caller writes whole and closes, or -1 with errno set
 * (nothing staged). The caller's failure to write it: da__staged_cleanup(f, 1). */
DA_HIDDEN int da__stage_file(da__staged_file *f, const char *path);
/* data[0..len) staged for path, fsync'ed: 0, or -1 with errno and nothing staged */
DA_HIDDEN int da__stage_bytes(da__staged_file *f, const char *path, const void *data, size_t len);
/* Every staged file of f[0..n) (those with have_tmp) put in place, or none: 0, or -1 with
 * errno, *bad the file's index and *what the step that failed ("cannot keep a backup of
 * it while it is replaced", ...); the files before it are then put back (a file that
 * cannot be: its lost field). A folder at a path fails before anything is replaced. */
DA_HIDDEN int da__staged_commit(da__staged_file *f, int n, int *bad, const char **what);
/* After a commit, what the placed files of f[0..n) replaced put back (a later step
 * failed): how many could not be (their lost field says why). */
DA_HIDDEN int da__staged_restore(da__staged_file *f, int n);
/* The temps and backups of f[0..n) removed */
DA_HIDDEN void da__staged_cleanup(da__staged_file *f, int n);

/* 0 when a file can be made beside path (a temp file made there and removed: checked
 * before long work whose result goes there), or path is a stream that looks writable
 * (da__output_resolve; a device or FIFO is not opened here), else -1 with errno set. */
DA_HIDDEN int da__can_write_beside(const char *path);

/* A file's path split at its last '/': the folder into dir ("." where there is no '/',
 * "/" where the only one comes first), and the name, returned (a pointer into path).
 * NULL with errno ENAMETOOLONG where the folder does not fit cap. */
DA_HIDDEN const char *da__split_path(const char *path, char *dir, size_t cap);

/* mkdir -p: path and its missing parents (mode for those made). 0 when path is a folder
 * then, -1 with errno set. */
DA_HIDDEN int da__mkdir_p(const char *path, unsigned mode);

/* The name a dump of text takes in dir: file, where no other text holds that name there,
 * else file with the first 12 hex digits of text's SHA-256 before its extension
 * (<kernel>.<12 hex>.c): a kernel's variants (tiles, strategies, another arch) share its
 * name and each keeps its own dump. */
DA_HIDDEN void da__dump_file_name(const char *dir, const char *file, const char *text, char *out, size_t cap);

/* Where DILATTN_DUMP_DIR is set: write text there as file (da__dump_file_name; the folder
 * made as needed). 0 when written or unset; -1 when it cannot be written (a warning, once
 * a process). */
DA_HIDDEN int da__dump_source(const char *file, const char *text);

#endif
