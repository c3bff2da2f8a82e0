/* fileio.c - whole-file reads and atomic writes (temp file in the same folder, fsync,
 * rename), shared by the disk cache, bundles, the tuning database and the CLI. A write
 * that fails leaves nothing behind; SIGXFSZ (a file size limit) is treated as the write
 * error it is. */
#define _GNU_SOURCE
#include "runtime/fileio.h"

#include "gen/render.h"

#include "runtime/internal.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path opened for reading where it is a regular file of at most max bytes: its descriptor
 * (blocking), its stat; else -1 with errno EISDIR, EINVAL (a FIFO, a device) or EFBIG. The
 * open does not wait: O_NONBLOCK, since an open of a FIFO waits for a writer (which would
 * hang a plan creation on DILATTN_BUNDLES or DILATTN_TUNING_DB naming one). */
static int open_regular(const char *path, long long max, struct stat *st) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return -1;
  int e = fstat(fd, st) != 0 ? errno : S_ISDIR(st->st_mode) ? EISDIR : !S_ISREG(st->st_mode) ? EINVAL
                                       : st->st_size > max ? EFBIG : 0;
  const int fl = e ? 0 : fcntl(fd, F_GETFL);
  if (!e && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) e = errno;
  if (e) {
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

const char *da__read_error(int e) { return e == EINVAL ? "not a regular file (a FIFO or a device)" : strerror(e); }

FILE *da__fopen_regular(const char *path, long long max) {
  struct stat st;
  const int fd = open_regular(path, max, &st);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
  if (fd >= 0 && !f) {
    const int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

char *da__read_file(const char *path, size_t *len) {
  struct stat st;
  const int fd = open_regular(path, 1ll << 31, &st);
  if (fd < 0) return NULL;
  char *buf = malloc((size_t)st.st_size + 1);
  size_t done = 0;
  while (buf && done < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += (size_t)n;
  }
  close(fd);
  if (!buf || done != (size_t)st.st_size) {
    free(buf);
    errno = buf ? EIO : ENOMEM;
    return NULL;
  }
  buf[done] = '\0';
  *len = done;
  return buf;
}

unsigned da__output_mode(const char *path) {
  struct stat st; /* (an existing regular file's own bits; never a link's target's) */
  if (path && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 0777;
  unsigned mask = 022;
  FILE *f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "Umask:", 6) == 0) {
        mask = (unsigned)(strtoul(line + 6, NULL, 8) & 0777);
        break;
      }
    fclose(f);
  }
  return 0666 & ~mask;
}

int da__tmp_name(const char *path, const char *tag, char *tmp, size_t cap) {
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  const size_t extra = strlen(tag) + 8; /* ".<tag>-XXXXXX" */
  const size_t keep =
      strlen(name) + extra > NAME_MAX && extra < NAME_MAX ? (size_t)(name - path) + NAME_MAX - extra : strlen(path);
  if (keep > INT_MAX || snprintf(tmp, cap, "%.*s.%s-XXXXXX", (int)keep, path, tag) >= (int)cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* "<path>.tmp-XXXXXX" made with mode (da__tmp_name): its descriptor, or -1 with errno set
 * and nothing left */
int da__tmp_beside(const char *path, char *tmp, size_t cap, unsigned mode) {
  if (da__tmp_name(path, "tmp", tmp, cap) != 0) return -1;
  int fd = mkstemp(tmp);
  if (fd >= 0 && fchmod(fd, (mode_t)mode) != 0) {
    const int e = errno;
    close(fd);
    unlink(tmp);
    errno = e;
    return -1;
  }
  return fd;
}

const char *da__split_path(const char *path, char *dir, size_t cap) {
  const char *slash = strrchr(path, '/');
  const size_t n = !slash || slash == path ? 1 : (size_t)(slash - path);
  if (n > INT_MAX || snprintf(dir, cap, "%.*s", (int)n, slash ? path : ".") >= (int)cap) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  return slash ? slash + 1 : path;
}

/* The descriptor a name of the process's own descriptors names (/dev/stdout, /dev/stderr,
 * /dev/fd/N, /proc/self/fd/N, spelt so), -1 for any other name */
static int own_fd(const char *path) {
  if (!strcmp(path, "/dev/stdout")) return 1;
  if (!strcmp(path, "/dev/stderr")) return 2;
  const char *n = !strncmp(path, "/dev/fd/", 8) ? path + 8 : !strncmp(path, "/proc/self/fd/", 14) ? path + 14 : NULL;
  if (!n || !*n || strspn(n, "0123456789") != strlen(n) || strlen(n) > 6) return -1;
  return atoi(n);
}

int da__output_resolve(const char *path, da__output *o) {
  o->stream = 0, o->fd = -1, o->own = 0;
  if (snprintf(o->name, sizeof o->name, "%s", path) >= (int)sizeof o->name) {
    errno = ENAMETOOLONG;
    return -1;
  }
  struct stat st;
  const int fd = own_fd(path);
  if (fd >= 0) { /* written to that descriptor as it stands (its offset, O_APPEND) */
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || fstat(fd, &st) != 0) { /* not open, or not for writing */
      errno = EBADF;
      return -1;
    }
    if (S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode)) {
      errno = EINVAL;
      return -1;
    }
    o->stream = 1, o->fd = fd, o->own = 1;
    return 0;
  }
  /* the name itself, never followed: a symlink is replaced as a file would be (root must
   * not write where another user's link in /tmp points) */
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) { /* /dev/null, a named pipe: opened at da__output_open */
    o->stream = 1;
    return 0;
  }
  if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) { /* never written */
    errno = EINVAL;
    return -1;
  }
  return 0; /* a file, a link, a folder (the caller refuses that) */
}

int da__output_open(da__output *o) {
  if (!o->stream || o->fd >= 0) return o->fd;
  /* not through a link, not waiting for a FIFO's reader (ENXIO: none), and only what was
   * resolved: a device or FIFO (swapped for a file meanwhile: refused) */
  const int fd = open(o->name, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  const int fl = fcntl(fd, F_GETFL);
  if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) || fl < 0 ||
      fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  return o->fd = fd;
}

void da__output_release(da__output *o) {
  if (o->fd >= 0 && !o->own) close(o->fd);
  if (!o->own) o->fd = -1;
}

int da__output_is_stdout(const da__output *o) {
  struct stat a, b;
  if (!o->stream) return 0;
  if (o->fd == 1) return 1;
  return fstat(1, &b) == 0 && (o->fd >= 0 ? fstat(o->fd, &a) : lstat(o->name, &a)) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino && !S_ISCHR(a.st_mode);
}

const char *da__output_error(int e) {
  return e == EINVAL ? "a block device, socket or folder, which is not written"
         : e == ENXIO ? "a FIFO with no reader"
                      : strerror(e);
}

int da__output_tmp(const char *path, char *tmp, size_t cap) {
  da__output o;
  if (da__output_resolve(path, &o) != 0) return -1;
  if (o.stream) { /* (callers of a temp file take files only: da__write_output writes a stream) */
    errno = EINVAL;
    return -1;
  }
  return da__tmp_beside(path, tmp, cap, (mode_t)da__output_mode(path));
}

/* data[0..len) written to fd whole; 0, or -1 with errno */
static int write_all_fd(int fd, const void *data, size_t len) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = write(fd, (const char *)data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? (errno = EIO, -1) : -1;
    done += (size_t)n;
  }
  return 0;
}

int da__write_output(const char *path, const void *data, size_t len) {
  da__output o;
  if (da__output_resolve(path, &o) != 0) return -1;
  if (!o.stream) return da__write_file_atomic(path, data, len, da__output_mode(path));
  const int fd = da__output_open(&o);
  if (fd < 0) return -1;
  const int rc = write_all_fd(fd, data, len), e = errno;
  da__output_release(&o);
  errno = e;
  return rc;
}

int da__output_write(da__output *o, const void *data, size_t len) { return write_all_fd(o->fd, data, len); }

int da__can_write_beside(const char *path) {
  char probe[4500];
  da__output o;
  const char *slash = strrchr(path, '/');
  if (strlen(slash ? slash + 1 : path) > NAME_MAX) { /* (the probe's name is cut: the file's would not be) */
    errno = ENAMETOOLONG;
    return -1;
  }
  if (da__output_resolve(path, &o) != 0) return -1;
  if (o.fd >= 0) return 0;                      /* (the process's own, open for writing) */
  if (o.stream) return access(o.name, W_OK); /* (opened when written: never here, a FIFO's reader would see its end) */
  const int fd = da__tmp_beside(path, probe, sizeof probe, 0600);
  if (fd < 0) return -1;
  close(fd);
  unlink(probe);
  return 0;
}

/* data[0..len) written to fd, a file, whole, then fsync'ed; 0, or -1 with errno set.
 * A write past RLIMIT_FSIZE fails with EFBIG and raises SIGXFSZ, whose default action
 * ends the process: blocked in this thread while it writes (the signal is then pending
 * on the thread) and taken back after. The process-wide disposition stays the
 * application's: changed and restored here, two threads writing at once had interleaved
 * their saves and restores, leaving it SIG_IGN or restoring it during the other's write. */
static int write_file_fd(int fd, const void *data, size_t len) {
  sigset_t xfsz, old;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &xfsz, &old);
  size_t done = 0;
  int efbig = 0;
  while (done < len) {
    ssize_t n = write(fd, (const char *)data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EFBIG) efbig = 1;
    if (n <= 0) break;
    done += (size_t)n;
  }
  const int werr = errno;
  if (efbig) { /* the SIGXFSZ the write raised, pending on this thread */
    const struct timespec now = {0, 0};
    while (sigtimedwait(&xfsz, NULL, &now) == SIGXFSZ) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = werr;
  if (done != len) {
    if (!errno) errno = EIO;
    return -1;
  }
  return fsync(fd);
}

int da__write_file_atomic(const char *path, const void *data, size_t len, unsigned mode) {
  char tmp[4500];
  int fd = da__tmp_beside(path, tmp, sizeof tmp, (mode_t)mode);
  if (fd < 0) return -1;
  int ok = write_file_fd(fd, data, len) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno ? errno : EIO;
    unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

int da__stage_file(da__staged_file *f, const char *path) {
  memset(f, 0, sizeof *f);
  if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = da__output_tmp(path, f->tmp, sizeof f->tmp);
  f->have_tmp = fd >= 0;
  return fd;
}

int da__stage_bytes(da__staged_file *f, const char *path, const void *data, size_t len) {
  const int fd = da__stage_file(f, path);
  if (fd < 0) return -1;
  int ok = write_file_fd(fd, data, len) == 0;
  ok = close(fd) == 0 && ok;
  if (ok) return 0;
  const int e = errno ? errno : EIO;
  da__staged_cleanup(f, 1);
  errno = e;
  return -1;
}

/* A hard link to f->path as its backup (f->bak), where one can be made: 1 made, 0 none
 * can be here (the file is to be moved aside instead), -1 a failure (errno) */
static int link_backup(da__staged_file *f) {
  for (int t = 0; t < 8; t++) {
    if (da__tmp_name(f->path, "tmp-old", f->bak, sizeof f->bak) != 0) return -1; /* (cut near NAME_MAX) */
    int fd = mkstemp(f->bak);
    if (fd < 0) return -1;
    close(fd);
    unlink(f->bak);
    if (link(f->path, f->bak) == 0) return 1;
    if (errno != EEXIST) return 0; /* (no hard link here: protected_hardlinks, a file system without) */
  }
  errno = EEXIST;
  return -1;
}

int da__staged_commit(da__staged_file *f, int n, int *bad, const char **what) {
  *bad = -1, *what = "";
  for (int i = 0; i < n; i++) { /* backups of the files (or links) about to be replaced */
    struct stat st;
    f[i].move = f[i].have_bak = f[i].placed = f[i].kept = 0;
    if (!f[i].have_tmp || lstat(f[i].path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) { /* (a rename over a folder fails: found before anything is replaced) */
      *bad = i, *what = "cannot replace it";
      errno = EISDIR;
      return -1;
    }
    const int b = link_backup(&f[i]);
    f[i].have_bak = b == 1, f[i].move = b == 0;
    if (b < 0) {
      *bad = i, *what = "cannot keep a backup of it while it is replaced";
      return -1;
    }
  }
  for (int i = 0; i < n; i++) {
    if (!f[i].have_tmp) continue;
    if (f[i].move && rename(f[i].path, f[i].bak) == 0) f[i].have_bak = 1;
    if (f[i].move && !f[i].have_bak) {
      *bad = i, *what = "cannot move it aside while it is replaced";
    } else if (rename(f[i].tmp, f[i].path) != 0) {
      *bad = i, *what = "cannot rename the temporary file over it";
      const int e = errno;
      if (f[i].move && rename(f[i].bak, f[i].path) == 0) f[i].have_bak = 0;
      else if (f[i].move) /* (what path was is only at bak now: kept, and said) */
        f[i].lost = errno ? errno : EIO, f[i].kept = 1, f[i].have_bak = 0;
      errno = e;
    } else {
      f[i].have_tmp = 0, f[i].placed = 1;
      continue;
    }
    const int e = errno;
    da__staged_restore(f, i);
    errno = e;
    return -1;
  }
  return 0;
}

int da__staged_restore(da__staged_file *f, int n) {
  int lost = 0;
  for (int i = n - 1; i >= 0; i--) { /* (last first: one path staged twice gets its first backup back) */
    f[i].lost = 0;
    if (!f[i].placed) continue;
    if (f[i].have_bak ? rename(f[i].bak, f[i].path) == 0 : unlink(f[i].path) == 0 || errno == ENOENT) {
      /* (a rename between two links of one file does nothing and succeeds: one path staged
       * twice leaves its first backup a link of what is back in place, removed here) */
      struct stat st;
      if (f[i].have_bak && lstat(f[i].bak, &st) == 0) unlink(f[i].bak);
      f[i].have_bak = f[i].placed = 0;
      continue;
    }
    f[i].lost = errno ? errno : EIO, lost++;
    f[i].kept = f[i].have_bak, f[i].have_bak = 0; /* (not removed: what path was, at bak) */
  }
  return lost;
}

void da__staged_cleanup(da__staged_file *f, int n) {
  for (int i = 0; i < n; i++) {
    if (f[i].have_tmp) unlink(f[i].tmp);
    if (f[i].have_bak) unlink(f[i].bak);
    f[i].have_tmp = f[i].have_bak = 0;
  }
}

int da__mkdir_p(const char *path, unsigned mode) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(tmp, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

void da__dump_file_name(const char *dir, const char *file, const char *text, char *out, size_t cap) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  size_t n = 0;
  char *old = da__read_file(path, &n);
  const int taken = old && (n != strlen(text) || memcmp(old, text, n) != 0);
  free(old);
  if (!taken) {
    snprintf(out, cap, "%s", file);
    return;
  }
  char hex[65];
  da__sha256_hex(text, strlen(text), hex);
  const char *dot = strrchr(file, '.');
  const int stem = dot ? (int)(dot - file) : (int)strlen(file);
  snprintf(out, cap, "%.*s.%.12s%s", stem, file, hex, dot ? dot : "");
}

int da__dump_source(const char *file, const char *text) {
  const char *dir = getenv("DILATTN_DUMP_DIR");
  if (!dir || !*dir) return 0;
  char path[4400], name[400];
  da__dump_file_name(dir, file, text, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (da__mkdir_p(dir, 0700) == 0 && da__write_file_atomic(path, text, strlen(text), 0600) == 0) return 0;
  static int warned; /* once a process */
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    da__log(DA_LOG_WARN, "DILATTN_DUMP_DIR: cannot write %s: %s (sources are not dumped)", path, strerror(errno));
  return -1;
}
