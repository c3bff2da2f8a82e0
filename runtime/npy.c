/* npy.c - strict reader and atomic writer of NumPy .npy files (see npy.h).
 *
 * File layout (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version
 * byte, the header length (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), the
 * header - a Python dict literal with exactly the keys 'descr', 'fortran_order' and
 * 'shape', padded with whitespace - and then the raw array data, nothing after it.
 *
 * The header is parsed by a small recursive-descent parser over a bounded buffer; every
 * read checks the position against the header length first. Dims and byte counts use
 * checked arithmetic, and the data is copied only after its exact size is known to be in
 * the buffer, so no input can make the reader read out of bounds or allocate more than
 * the input holds.
 */
#define _POSIX_C_SOURCE 200809L

#include "npy.h"
#include "runtime/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c copies array data without byte swapping: little-endian hosts only"
#endif

#if defined(__GNUC__)
#define DA__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DA__PRINTF(f, a)
#endif

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static const struct {
  const char *descr;
  size_t size;
} dtype_table[] = {
    [DA_NPY_F32] = {"<f4", 4},
    [DA_NPY_F16] = {"<f2", 2},
    [DA_NPY_BF16] = {"<u2", 2},
    [DA_NPY_F64] = {"<f8", 8},
};
#define NUM_DTYPES ((int)(sizeof dtype_table / sizeof dtype_table[0]))

DA__PRINTF(4, 5)
static da_status fail(char *msg, size_t cap, da_status st, const char *fmt, ...) {
  if (msg && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
  }
  return st;
}

/* a * b into *out; 0 on overflow of size_t. */
static int mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

/* Python repr of a shape tuple: "()", "(5,)", "(2, 3)". */
static void format_shape(char *buf, size_t cap, const int64_t *shape, int ndim) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "(");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
}

const char *da__npy_dtype_descr(da__npy_dtype t) {
  if ((int)t < 0 || (int)t >= NUM_DTYPES) return "?";
  return dtype_table[t].descr;
}

void da__npy_free(da__npy_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---------------------------------------------------------------------------------
 * Header dict parser.
 * --------------------------------------------------------------------------------- */
typedef struct {
  const unsigned char *p; /* header bytes */
  size_t n;               /* header length */
  size_t i;               /* position in the header */
  size_t base;            /* file offset of the header's first byte */
  char *msg;
  size_t cap;
  /* results */
  int have_descr, have_fortran, have_shape;
  da__npy_dtype dtype;
  int ndim;
  int64_t shape[DA_NPY_MAX_DIMS];
} hdr_parser;

/* Formats "header, byte N: " + fmt; returns -1 so callers can `return herr(...)`. */
DA__PRINTF(3, 4)
static int herr(hdr_parser *h, size_t at, const char *fmt, ...) {
  if (h->msg && h->cap > 0) {
    int k = snprintf(h->msg, h->cap, "header, byte %zu: ", h->base + at);
    if (k > 0 && (size_t)k < h->cap) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(h->msg + k, h->cap - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

/* What is at the current position, for "found ..." in messages. */
static const char *found(const hdr_parser *h, char *buf, size_t cap) {
  if (h->i >= h->n) return "the end of the header";
  unsigned c = h->p[h->i];
  if (c >= 0x20 && c < 0x7f)
    snprintf(buf, cap, "'%c'", (char)c);
  else
    snprintf(buf, cap, "byte 0x%02x", c);
  return buf;
}

static int peek(const hdr_parser *h) { return h->i < h->n ? h->p[h->i] : -1; }

static void skip_ws(hdr_parser *h) {
  while (h->i < h->n) {
    unsigned char c = h->p[h->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') break;
    h->i++;
  }
}

static int expect(hdr_parser *h, char c, const char *what) {
  char b[16];
  skip_ws(h);
  if (peek(h) != (unsigned char)c)
    return herr(h, h->i, "expected '%c' %s, found %s", c, what, found(h, b, sizeof b));
  h->i++;
  return 0;
}

/* A quoted string ('...' or "...") of printable ASCII without escapes. On success *s,
 * *len point into the header (not NUL-terminated). */
static int parse_string(hdr_parser *h, const char **s, size_t *len, const char *what) {
  char b[16];
  int q = peek(h);
  if (q != '\'' && q != '"')
    return herr(h, h->i, "expected a quoted string for %s, found %s", what, found(h, b, sizeof b));
  size_t start = h->i++;
  while (h->i < h->n && h->p[h->i] != q && h->p[h->i] != '\n') {
    unsigned char c = h->p[h->i];
    if (c == '\\') return herr(h, h->i, "escape sequences in %s are not supported", what);
    if (c < 0x20 || c >= 0x7f)
      return herr(h, h->i, "byte 0x%02x in %s: only printable ASCII is allowed", c, what);
    h->i++;
  }
  if (h->i >= h->n || h->p[h->i] != q)
    return herr(h, start, "the string for %s is not terminated", what);
  *s = (const char *)h->p + start + 1;
  *len = h->i - start - 1;
  h->i++; /* closing quote */
  return 0;
}

static int str_is(const char *s, size_t len, const char *lit) {
  return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* Length of s shown in messages: long strings are cut (printed with "..."). */
#define SHOWN(len) ((int)((len) > 40 ? 40 : (len)))
#define ELLIPSIS(len) ((len) > 40 ? "..." : "")

static int parse_descr(hdr_parser *h) {
  size_t at = h->i, len;
  const char *s;
  if (parse_string(h, &s, &len, "'descr'") < 0) return -1;
  for (int t = 0; t < NUM_DTYPES; t++)
    if (str_is(s, len, dtype_table[t].descr)) {
      h->dtype = (da__npy_dtype)t;
      return 0;
    }
  if (len > 0 && s[0] == '>')
    return herr(h, at, "descr '%.*s%s' is big-endian; only little-endian ('<') arrays are "
                "supported (convert with arr.astype(arr.dtype.newbyteorder('<')))",
                SHOWN(len), s, ELLIPSIS(len));
  return herr(h, at, "unsupported dtype descr '%.*s%s' (supported: '<f4', '<f2', '<u2' for "
              "bfloat16, '<f8')", SHOWN(len), s, ELLIPSIS(len));
}

static int parse_fortran(hdr_parser *h) {
  size_t at = h->i, end = h->i;
  while (end < h->n && (h->p[end] == '_' || (h->p[end] >= 'a' && h->p[end] <= 'z') ||
                        (h->p[end] >= 'A' && h->p[end] <= 'Z') ||
                        (h->p[end] >= '0' && h->p[end] <= '9')))
    end++;
  const char *s = (const char *)h->p + at;
  size_t len = end - at;
  if (str_is(s, len, "False")) {
    h->i = end;
    return 0;
  }
  if (str_is(s, len, "True"))
    return herr(h, at, "fortran_order is True; only C-order arrays are supported (save "
                "np.ascontiguousarray(arr))");
  char b[16];
  if (len == 0)
    return herr(h, at, "expected True or False for 'fortran_order', found %s",
                found(h, b, sizeof b));
  return herr(h, at, "expected True or False for 'fortran_order', found '%.*s%s'", SHOWN(len),
              s, ELLIPSIS(len));
}

/* One non-negative decimal int as Python writes it (optional Python 2 'L' suffix). */
static int parse_dim(hdr_parser *h, int64_t *out) {
  char b[16];
  size_t at = h->i;
  int c = peek(h);
  if (c == '-') return herr(h, at, "negative dimension in 'shape'");
  if (c < '0' || c > '9')
    return herr(h, at, "expected a dimension (non-negative integer) in 'shape', found %s",
                found(h, b, sizeof b));
  uint64_t v = 0;
  while (h->i < h->n && h->p[h->i] >= '0' && h->p[h->i] <= '9') {
    unsigned d = h->p[h->i] - '0';
    if (v > ((uint64_t)INT64_MAX - d) / 10)
      return herr(h, at, "dimension in 'shape' is too large (more than %lld)",
                  (long long)INT64_MAX);
    v = v * 10 + d;
    h->i++;
  }
  if (h->i - at > 1 && h->p[at] == '0')
    return herr(h, at, "dimension in 'shape' has a leading zero");
  if (peek(h) == 'L' || peek(h) == 'l') h->i++;
  *out = (int64_t)v;
  return 0;
}

static int parse_shape(hdr_parser *h) {
  char b[16];
  size_t at = h->i;
  if (peek(h) != '(')
    return herr(h, at, "expected a tuple '(...)' for 'shape', found %s", found(h, b, sizeof b));
  h->i++;
  h->ndim = 0;
  int commas = 0;
  skip_ws(h);
  while (peek(h) != ')') {
    if (h->ndim == DA_NPY_MAX_DIMS)
      return herr(h, h->i, "'shape' has more than %d dimensions", DA_NPY_MAX_DIMS);
    if (parse_dim(h, &h->shape[h->ndim]) < 0) return -1;
    h->ndim++;
    skip_ws(h);
    if (peek(h) == ',') {
      h->i++;
      commas++;
      skip_ws(h);
    } else if (peek(h) != ')') {
      return herr(h, h->i, "expected ',' or ')' in 'shape', found %s", found(h, b, sizeof b));
    }
  }
  h->i++; /* ')' */
  if (h->ndim == 1 && commas == 0)
    return herr(h, at, "'shape' (%lld) is not a tuple; a one-dimensional shape is written "
                "(%lld,)", (long long)h->shape[0], (long long)h->shape[0]);
  return 0;
}

static int parse_dict(hdr_parser *h) {
  char b[16];
  if (expect(h, '{', "at the start of the header dict") < 0) return -1;
  for (;;) {
    skip_ws(h);
    if (peek(h) == '}') break; /* empty dict or trailing comma */
    size_t at = h->i, len;
    const char *key;
    if (parse_string(h, &key, &len, "a dict key") < 0) return -1;
    int *have;
    int (*value)(hdr_parser *);
    if (str_is(key, len, "descr")) {
      have = &h->have_descr;
      value = parse_descr;
    } else if (str_is(key, len, "fortran_order")) {
      have = &h->have_fortran;
      value = parse_fortran;
    } else if (str_is(key, len, "shape")) {
      have = &h->have_shape;
      value = parse_shape;
    } else {
      return herr(h, at, "unknown key '%.*s%s' (a .npy header has exactly 'descr', "
                  "'fortran_order' and 'shape')", SHOWN(len), key, ELLIPSIS(len));
    }
    if (*have) return herr(h, at, "duplicate key '%.*s'", (int)len, key);
    *have = 1;
    if (expect(h, ':', "after a dict key") < 0) return -1;
    skip_ws(h);
    if (value(h) < 0) return -1;
    skip_ws(h);
    if (peek(h) == ',') {
      h->i++;
    } else if (peek(h) != '}') {
      return herr(h, h->i, "expected ',' or '}' after a dict value, found %s",
                  found(h, b, sizeof b));
    }
  }
  h->i++; /* '}' */
  skip_ws(h);
  if (h->i < h->n)
    return herr(h, h->i, "unexpected %s after the header dict (only whitespace may follow)",
                found(h, b, sizeof b));
  const char *missing = !h->have_descr     ? "descr"
                        : !h->have_fortran ? "fortran_order"
                        : !h->have_shape   ? "shape"
                                           : NULL;
  if (missing) return herr(h, h->n, "the header dict has no '%s' key", missing);
  return 0;
}

/* ---------------------------------------------------------------------------------
 * Reader.
 * --------------------------------------------------------------------------------- */
/* The preamble and header of a .npy file whose first len bytes are at p (len may end
 * anywhere: the messages say what is missing): the header's facts in *h, where the data
 * begins (*data_at) and how many bytes they take (*bytes). DA_OK or DA_ERR_PARSE. */
static da_status parse_head(const unsigned char *p, size_t len, hdr_parser *h, size_t *data_at, size_t *bytes,
                            char *msg, size_t msg_cap) {
  /* Preamble: magic, version, header length. */
  if (len == 0) return fail(msg, msg_cap, DA_ERR_PARSE, "file is empty (not a .npy file)");
  size_t mlen = len < sizeof npy_magic ? len : sizeof npy_magic;
  if (memcmp(p, npy_magic, mlen) != 0)
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "bytes 0-5: bad magic, not a .npy file (expected \\x93NUMPY)");
  if (len < 8)
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "truncated: the file has %zu bytes, the .npy preamble needs at least 10", len);
  unsigned major = p[6], minor = p[7];
  if (major < 1 || major > 3 || minor != 0)
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "bytes 6-7: unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)",
                major, minor);
  size_t start = major == 1 ? 10 : 12;
  if (len < start)
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "truncated: the file has %zu bytes, the version %u.0 preamble needs %zu", len,
                major, start);
  size_t hlen = (size_t)p[8] | (size_t)p[9] << 8;
  if (major > 1) hlen |= (size_t)p[10] << 16 | (size_t)p[11] << 24;
  if (hlen > len - start)
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "truncated: the header length at bytes 8-%zu is %zu, but only %zu bytes follow "
                "the preamble", start - 1, hlen, len - start);

  /* Header dict. */
  memset(h, 0, sizeof *h);
  h->p = p + start;
  h->n = hlen;
  h->base = start;
  h->msg = msg;
  h->cap = msg_cap;
  if (parse_dict(h) < 0) return DA_ERR_PARSE;

  /* Data: exactly count * elem_size bytes. */
  char shp[256];
  format_shape(shp, sizeof shp, h->shape, h->ndim);
  /* (the product of the dimensions other than 0 too, as numpy checks it: an array of no
   * elements whose shape overflows is one no writer makes and numpy cannot load) */
  size_t elem = dtype_table[h->dtype].size, count = 1, nonzero = 1;
  for (int d = 0; d < h->ndim; d++) {
    if ((uint64_t)h->shape[d] > SIZE_MAX || !mul_size(count, (size_t)h->shape[d], &count) ||
        !mul_size(nonzero, h->shape[d] ? (size_t)h->shape[d] : 1, &nonzero) || nonzero > (size_t)INT64_MAX)
      return fail(msg, msg_cap, DA_ERR_PARSE,
                  "header: shape %s has more elements than this machine can address", shp);
  }
  if (!mul_size(count, elem, bytes))
    return fail(msg, msg_cap, DA_ERR_PARSE,
                "header: shape %s of '%s' needs more bytes than this machine can address", shp,
                dtype_table[h->dtype].descr);
  *data_at = start + hlen;
  return DA_OK;
}

/* The message of data of the wrong length: have bytes after the header (more: at least
 * that many, the rest not counted). */
static da_status bad_length(const hdr_parser *h, size_t bytes, size_t data_at, size_t have, int more, char *msg,
                            size_t msg_cap) {
  char shp[256];
  format_shape(shp, sizeof shp, h->shape, h->ndim);
  return fail(msg, msg_cap, DA_ERR_PARSE, "data: shape %s of '%s' needs %zu bytes from byte %zu on, the file has %s%zu%s",
              shp, dtype_table[h->dtype].descr, bytes, data_at, more ? "more than " : "", have,
              have > bytes || more ? " (trailing bytes after the array)" : " (truncated)");
}

static void fill(da__npy_array *out, const hdr_parser *h, size_t bytes, void *data) {
  out->dtype = h->dtype;
  out->ndim = h->ndim;
  memcpy(out->shape, h->shape, sizeof out->shape);
  out->elem_size = dtype_table[h->dtype].size;
  out->count = bytes / out->elem_size;
  out->data = data;
}

da_status da__npy_parse(const void *buf, size_t len, da__npy_array *out, char *msg,
                        size_t msg_cap) {
  if (msg && msg_cap > 0) msg[0] = '\0';
  if (out) memset(out, 0, sizeof *out);
  if (!out) return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "npy: output array is NULL");
  if (!buf && len > 0)
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "npy: buffer is NULL");
  const unsigned char *p = buf;
  hdr_parser h;
  size_t data_at, bytes;
  const da_status st = parse_head(p, len, &h, &data_at, &bytes, msg, msg_cap);
  if (st != DA_OK) return st;
  const size_t have = len - data_at;
  if (have != bytes) return bad_length(&h, bytes, data_at, have, 0, msg, msg_cap);
  void *data = malloc(bytes ? bytes : 1);
  if (!data)
    return fail(msg, msg_cap, DA_ERR_NO_MEMORY, "npy: out of memory for %zu bytes of data",
                bytes);
  if (bytes) memcpy(data, p + data_at, bytes);
  fill(out, &h, bytes, data);
  return DA_OK;
}

/* Up to n bytes from fd into buf (fewer only at the end of the file): the count, or -1
 * with errno set. */
static ssize_t read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (unsigned char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* The preamble and header of an .npy file are read first, then exactly the data they
 * announce: a file that is no .npy (a disk image, /dev/zero) is refused after its first
 * bytes, not read whole into memory first. */
#define NPY_HEAD_MAX (1u << 20) /* a header of at most 8 dimensions needs far less */

da_status da__npy_load(const char *path, da__npy_array *out, char *msg, size_t msg_cap) {
  if (msg && msg_cap > 0) msg[0] = '\0';
  if (out) memset(out, 0, sizeof *out);
  if (!path || !out)
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "npy: path or output array is NULL");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(msg, msg_cap, DA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return fail(msg, msg_cap, DA_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return fail(msg, msg_cap, DA_ERR_IO, "%s: is a directory", path);
  }
  char inner[512];
  da_status res = DA_OK;
  unsigned char pre[12], *head = NULL, *data = NULL;
  hdr_parser h;
  size_t data_at = 0, bytes = 0, hlen = 0, have = 0;
  ssize_t got = read_full(fd, pre, sizeof pre);
  if (got < 0) goto io_error;
  /* the header's length, where the preamble says it (else parse_head says what is wrong) */
  if (got >= 10 && !memcmp(pre, npy_magic, sizeof npy_magic) && pre[6] >= 1 && pre[6] <= 3 && !pre[7]) {
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (pre[6] > 1 && got >= 12) hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  }
  if (hlen > NPY_HEAD_MAX) {
    res = fail(inner, sizeof inner, DA_ERR_PARSE, "header: %zu bytes long, more than %u (no array of at most %d "
               "dimensions needs that)", hlen, NPY_HEAD_MAX, DA_NPY_MAX_DIMS);
    goto done;
  }
  const size_t start = pre[6] == 1 ? 10 : 12, want = got >= 10 ? start + hlen : (size_t)got;
  head = malloc(want > (size_t)got ? want : (size_t)got);
  if (!head) {
    res = fail(inner, sizeof inner, DA_ERR_NO_MEMORY, "out of memory for the header");
    goto done;
  }
  memcpy(head, pre, (size_t)got);
  size_t hgot = (size_t)got;
  if (want > hgot) { /* (a version 1.0 header starts inside pre: its first bytes came with it) */
    const ssize_t r = read_full(fd, head + hgot, want - hgot);
    if (r < 0) goto io_error;
    hgot += (size_t)r;
  }
  res = parse_head(head, hgot < want ? hgot : want, &h, &data_at, &bytes, inner, sizeof inner);
  if (res != DA_OK) goto done;
  have = hgot - data_at; /* (bytes of data read with the preamble) */
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= data_at && (uint64_t)st.st_size - data_at != bytes) {
    /* a file of another length than its header says: said before allocating what the
     * header claims (a few bytes claiming a terabyte) */
    res = bad_length(&h, bytes, data_at, (size_t)((uint64_t)st.st_size - data_at), 0, inner, sizeof inner);
    goto done;
  }
  data = malloc(bytes ? bytes : 1);
  if (!data) {
    res = fail(inner, sizeof inner, DA_ERR_NO_MEMORY, "out of memory for %zu bytes of data", bytes);
    goto done;
  }
  if (have > bytes) { /* a v1.0 file whose data is shorter than the preamble's 12 bytes */
    res = bad_length(&h, bytes, data_at, S_ISREG(st.st_mode) ? (size_t)st.st_size - data_at : have,
                     !S_ISREG(st.st_mode), inner, sizeof inner);
    goto done;
  }
  memcpy(data, head + data_at, have);
  {
    const ssize_t r = read_full(fd, data + have, bytes - have);
    if (r < 0) goto io_error;
    have += (size_t)r;
  }
  unsigned char extra;
  got = have < bytes ? 0 : read_full(fd, &extra, 1);
  if (got < 0) goto io_error;
  if (have != bytes || got > 0) {
    const int regular = S_ISREG(st.st_mode) && (size_t)st.st_size >= data_at;
    res = bad_length(&h, bytes, data_at, regular && got > 0 ? (size_t)st.st_size - data_at : have + (size_t)got,
                     got > 0 && !regular, inner, sizeof inner);
    goto done;
  }
  fill(out, &h, bytes, data);
  data = NULL;
  goto done;
io_error: {
  const int e = errno;
  res = fail(inner, sizeof inner, DA_ERR_IO, "cannot read: %s", strerror(e));
}
done:
  close(fd);
  free(head);
  free(data);
  if (res != DA_OK) return fail(msg, msg_cap, res, "%s: %s", path, inner);
  return DA_OK;
}

/* ---------------------------------------------------------------------------------
 * Writer.
 * --------------------------------------------------------------------------------- */
static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* fsync the folder holding path so the rename survives a crash; best effort. */
static void sync_parent_dir(const char *path) {
  char dir[4096];
  if (!da__split_path(path, dir, sizeof dir)) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static da_status npy_write(int fd, const char *path, da__npy_dtype dtype, int ndim, const int64_t *shape,
                           const void *data, char *msg, size_t msg_cap);

da_status da__npy_save_fd(int fd, const char *name, da__npy_dtype dtype, int ndim, const int64_t *shape,
                          const void *data, char *msg, size_t msg_cap) {
  if (msg && msg_cap > 0) msg[0] = '\0';
  return npy_write(fd, name ? name : "npy", dtype, ndim, shape, data, msg, msg_cap);
}

da_status da__npy_save(const char *path, da__npy_dtype dtype, int ndim, const int64_t *shape,
                       const void *data, char *msg, size_t msg_cap) {
  if (msg && msg_cap > 0) msg[0] = '\0';
  if (!path || !*path) return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "npy: empty path");
  return npy_write(-1, path, dtype, ndim, shape, data, msg, msg_cap);
}

/* fd >= 0: the NPY written there (path: its name in messages); -1: to path atomically */
static da_status npy_write(int out_fd, const char *path, da__npy_dtype dtype, int ndim, const int64_t *shape,
                           const void *data, char *msg, size_t msg_cap) {
  if ((int)dtype < 0 || (int)dtype >= NUM_DTYPES)
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", path, (int)dtype);
  if (ndim < 0 || ndim > DA_NPY_MAX_DIMS || (ndim > 0 && !shape))
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: bad ndim %d (0..%d, shape not NULL)",
                path, ndim, DA_NPY_MAX_DIMS);
  size_t count = 1, bytes;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: shape[%d] = %lld is negative",
                  path, d, (long long)shape[d]);
    if ((uint64_t)shape[d] > SIZE_MAX || !mul_size(count, (size_t)shape[d], &count))
      return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: element count overflows", path);
  }
  if (!mul_size(count, dtype_table[dtype].size, &bytes))
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: byte count overflows", path);
  if (bytes > 0 && !data)
    return fail(msg, msg_cap, DA_ERR_INVALID_ARGUMENT, "%s: data is NULL", path);

  /* Preamble + header, padded with spaces so the data starts at a multiple of 64 and the
   * header ends with '\n' (what numpy writes). ndim <= 8 keeps it far below 64 KiB. */
  char shp[256], head[512];
  format_shape(shp, sizeof shp, shape, ndim);
  int hn = snprintf(head + 10, sizeof head - 10,
                    "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                    dtype_table[dtype].descr, shp);
  size_t total = 10 + (size_t)hn + 1;
  total = (total + 63) / 64 * 64;
  memcpy(head, npy_magic, sizeof npy_magic);
  head[6] = 1;
  head[7] = 0;
  head[8] = (char)((total - 10) & 0xff);
  head[9] = (char)((total - 10) >> 8);
  memset(head + 10 + hn, ' ', total - 10 - (size_t)hn - 1);
  head[total - 1] = '\n';
  if (out_fd >= 0) {
    if (write_all(out_fd, head, total) == 0 && write_all(out_fd, data, bytes) == 0) return DA_OK;
    return fail(msg, msg_cap, DA_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  }

  const mode_t mode = (mode_t)da__output_mode(path);

  char *tmp = malloc(strlen(path) + 32);
  if (!tmp) return fail(msg, msg_cap, DA_ERR_NO_MEMORY, "%s: out of memory", path);
  int fd = da__tmp_beside(path, tmp, strlen(path) + 32, mode);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    return fail(msg, msg_cap, DA_ERR_IO, "%s: cannot create a temporary file beside it: %s",
                path, strerror(e));
  }
  const char *step = "cannot write";
  if (write_all(fd, head, total) == 0 && write_all(fd, data, bytes) == 0) {
    step = "cannot sync";
    if (fsync(fd) == 0) {
      step = "cannot close";
      int rc = close(fd);
      fd = -1;
      if (rc == 0) {
        step = "cannot rename the temporary file over it";
        if (rename(tmp, path) == 0) {
          free(tmp);
          sync_parent_dir(path);
          return DA_OK;
        }
      }
    }
  }
  int e = errno;
  if (fd >= 0) close(fd);
  unlink(tmp);
  free(tmp);
  return fail(msg, msg_cap, DA_ERR_IO, "%s: %s: %s", path, step, strerror(e));
}
