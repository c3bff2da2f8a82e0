/* Run (from the repository root): cc -std=c11 -Wall -Wextra -g -fsanitize=address,undefined -Iinclude -I. runtime/npy.c tests/test_npy.c -o /tmp/test_npy && /tmp/test_npy
 *
 * test_npy.c - tests of the .npy reader and writer (runtime/npy.c): files written by
 * numpy 2.4 (embedded below as C strings), round trips of every dtype, every class of
 * malformed header, truncation at every length, and the writer's atomic replace and
 * clean failure. Files go to a fresh folder under $TMPDIR (or /tmp), removed at the end.
 * Exits nonzero on any failure; the last line is "N passed, M failed". In the CMake
 * build: ctest --test-dir build -R test_npy
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/npy.h"

static int passed, failed;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (cond) {                                                          \
      passed++;                                                          \
    } else {                                                             \
      failed++;                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                    \
  } while (0)

#define CHECK_MSG(cond, m)                                                          \
  do {                                                                              \
    if (cond) {                                                                     \
      passed++;                                                                     \
    } else {                                                                        \
      failed++;                                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s (message: \"%s\")\n", __FILE__,      \
              __LINE__, #cond, m);                                                  \
    }                                                                               \
  } while (0)

/* Files written by numpy 2.4.6 (np.save, and numpy.lib.format.write_array with
 * version=(2, 0) / (3, 0)); generated with a Python one-off, bytes as C octal escapes.
 *   np_f32_v1:        (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3)
 *   np_f16_v1:        np.array([1, -2, 0.5, 65504, 0], np.float16)
 *   np_bf16_v1:       np.array([[0x3f80, 0xc000], [0x3f00, 0]], '<u2')  (bf16 1, -2, 0.5, 0)
 *   np_f64_scalar_v1: np.array(3.25)
 *   np_f32_v2:        np.array([1.5, 2.5, -3.5], np.float32), version 2.0
 *   np_f16_v3:        np.array([[1], [2]], np.float16), version 3.0 */
static const char np_f32_v1[] =
    "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': "
    "(2, 3), }                                                          \012"
    "\000\000\200\277\000\000\000\277\000\000\000\000\000\000\000\077\000\000"
    "\200\077\000\000\300\077";
static const char np_f16_v1[] =
    "\223NUMPY\001\000v\000{'descr': '<f2', 'fortran_order': False, 'shape': "
    "(5,), }                                                            \012"
    "\000<\000\300\0008\377{\000\000";
static const char np_bf16_v1[] =
    "\223NUMPY\001\000v\000{'descr': '<u2', 'fortran_order': False, 'shape': "
    "(2, 2), }                                                          \012"
    "\200\077\000\300\000\077\000\000";
static const char np_f64_scalar_v1[] =
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': False, 'shape': "
    "(), }                                                              \012"
    "\000\000\000\000\000\000\012@";
static const char np_f32_v2[] =
    "\223NUMPY\002\000t\000\000\000{'descr': '<f4', 'fortran_order': False, '"
    "shape': (3,), }                                                         "
    " \012\000\000\300\077\000\000 @\000\000`\300";
static const char np_f16_v3[] =
    "\223NUMPY\003\000t\000\000\000{'descr': '<f2', 'fortran_order': False, '"
    "shape': (2, 1), }                                                       "
    " \012\000<\000@";

#define LEN(lit) (sizeof(lit) - 1) /* the literal's bytes, without the NUL */

static const struct {
  const char *name;
  const char *bytes;
  size_t len;
} numpy_files[] = {
    {"np_f32_v1", np_f32_v1, LEN(np_f32_v1)},
    {"np_f16_v1", np_f16_v1, LEN(np_f16_v1)},
    {"np_bf16_v1", np_bf16_v1, LEN(np_bf16_v1)},
    {"np_f64_scalar_v1", np_f64_scalar_v1, LEN(np_f64_scalar_v1)},
    {"np_f32_v2", np_f32_v2, LEN(np_f32_v2)},
    {"np_f16_v3", np_f16_v3, LEN(np_f16_v3)},
};
#define NUM_NUMPY_FILES (int)(sizeof numpy_files / sizeof numpy_files[0])

static char tmpdir[256];

static int is_zeroed(const da__npy_array *a) {
  static const da__npy_array zero;
  return memcmp(a, &zero, sizeof zero) == 0;
}

/* Parse from an exact-size heap copy, so a sanitizer sees any read past the end. */
static da_status parse_copy(const void *bytes, size_t len, da__npy_array *a, char *msg,
                            size_t cap) {
  void *copy = malloc(len ? len : 1);
  if (len) memcpy(copy, bytes, len);
  da_status st = da__npy_parse(copy, len, a, msg, cap);
  free(copy);
  return st;
}

/* A .npy file of the given version with header text (padded like numpy unless raw) and
 * data_len zero bytes of data. *len receives the size; free() the result. */
static unsigned char *make_npy(int major, const char *header, size_t data_len, int raw,
                               size_t *len) {
  size_t pre = major == 1 ? 10 : 12, hn = strlen(header), padded = hn;
  if (!raw) padded = (pre + hn + 1 + 63) / 64 * 64 - pre;
  unsigned char *b = calloc(pre + padded + data_len + 1, 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  b[8] = (unsigned char)(padded & 0xff);
  b[9] = (unsigned char)(padded >> 8);
  if (major > 1) {
    b[10] = (unsigned char)(padded >> 16);
    b[11] = (unsigned char)(padded >> 24);
  }
  memcpy(b + pre, header, hn);
  if (!raw) {
    memset(b + pre + hn, ' ', padded - hn - 1);
    b[pre + padded - 1] = '\n';
  }
  *len = pre + padded + data_len;
  return b;
}

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = malloc(1 << 20);
  *len = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}

/* Names in tmpdir other than "." and "..". */
static int count_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void tmp_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void test_numpy_files(void) {
  da__npy_array a;
  char msg[256];

  CHECK(da__npy_parse(np_f32_v1, LEN(np_f32_v1), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_F32 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3);
  CHECK(a.count == 6 && a.elem_size == 4 && a.shape[2] == 0);
  for (int i = 0; i < 6; i++) CHECK(((float *)a.data)[i] == (float)i * 0.5f - 1.0f);
  da__npy_free(&a);
  CHECK(is_zeroed(&a));

  static const uint16_t f16[5] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0000};
  CHECK(da__npy_parse(np_f16_v1, LEN(np_f16_v1), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_F16 && a.ndim == 1 && a.shape[0] == 5 && a.count == 5);
  CHECK(a.elem_size == 2 && memcmp(a.data, f16, sizeof f16) == 0);
  da__npy_free(&a);

  static const uint16_t bf16[4] = {0x3f80, 0xc000, 0x3f00, 0x0000};
  CHECK(da__npy_parse(np_bf16_v1, LEN(np_bf16_v1), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_BF16 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 2);
  CHECK(a.count == 4 && memcmp(a.data, bf16, sizeof bf16) == 0);
  da__npy_free(&a);

  CHECK(da__npy_parse(np_f64_scalar_v1, LEN(np_f64_scalar_v1), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_F64 && a.ndim == 0 && a.count == 1 && a.elem_size == 8);
  CHECK(*(double *)a.data == 3.25);
  da__npy_free(&a);

  CHECK(da__npy_parse(np_f32_v2, LEN(np_f32_v2), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_F32 && a.ndim == 1 && a.shape[0] == 3);
  CHECK(((float *)a.data)[0] == 1.5f && ((float *)a.data)[2] == -3.5f);
  da__npy_free(&a);

  static const uint16_t f16b[2] = {0x3c00, 0x4000};
  CHECK(da__npy_parse(np_f16_v3, LEN(np_f16_v3), &a, msg, sizeof msg) == DA_OK);
  CHECK(a.dtype == DA_NPY_F16 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 1);
  CHECK(memcmp(a.data, f16b, sizeof f16b) == 0);
  da__npy_free(&a);
  da__npy_free(NULL);
}

/* Our writer's bytes equal numpy's for the same array. */
static void test_writer_matches_numpy(void) {
  struct {
    da__npy_dtype t;
    int ndim;
    int64_t shape[2];
    const char *ref;
    size_t ref_len;
  } cases[] = {
      {DA_NPY_F32, 2, {2, 3}, np_f32_v1, LEN(np_f32_v1)},
      {DA_NPY_F16, 1, {5, 0}, np_f16_v1, LEN(np_f16_v1)},
      {DA_NPY_BF16, 2, {2, 2}, np_bf16_v1, LEN(np_bf16_v1)},
      {DA_NPY_F64, 0, {0, 0}, np_f64_scalar_v1, LEN(np_f64_scalar_v1)},
  };
  char path[512], msg[256];
  tmp_path(path, sizeof path, "same.npy");
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    da__npy_array a;
    CHECK(da__npy_parse(cases[c].ref, cases[c].ref_len, &a, msg, sizeof msg) == DA_OK);
    CHECK(da__npy_save(path, cases[c].t, cases[c].ndim, cases[c].shape, a.data, msg,
                       sizeof msg) == DA_OK);
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    CHECK(b && len == cases[c].ref_len && memcmp(b, cases[c].ref, len) == 0);
    free(b);
    da__npy_free(&a);
  }
  unlink(path);
}

static void test_round_trips(void) {
  static const int64_t shapes[][DA_NPY_MAX_DIMS] = {
      {0}, {7}, {2, 3}, {1, 4, 2, 2}, {0, 4}, {1, 2, 1, 2, 1, 2, 1, 2}};
  static const int ndims[] = {0, 1, 2, 4, 2, 8};
  char path[512], msg[256];
  tmp_path(path, sizeof path, "rt.npy");
  for (int t = DA_NPY_F32; t <= DA_NPY_F64; t++) {
    for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
      size_t count = 1, esz = t == DA_NPY_F32 ? 4 : t == DA_NPY_F64 ? 8 : 2;
      for (int d = 0; d < ndims[s]; d++) count *= (size_t)shapes[s][d];
      unsigned char *data = malloc(count * esz + 1);
      for (size_t i = 0; i < count * esz; i++) data[i] = (unsigned char)(i * 37 + (size_t)t);
      CHECK(da__npy_save(path, (da__npy_dtype)t, ndims[s], shapes[s], data, msg,
                         sizeof msg) == DA_OK);
      da__npy_array a;
      CHECK_MSG(da__npy_load(path, &a, msg, sizeof msg) == DA_OK, msg);
      CHECK(a.dtype == (da__npy_dtype)t && a.ndim == ndims[s] && a.count == count);
      CHECK(a.elem_size == esz && a.data != NULL);
      CHECK(memcmp(a.shape, shapes[s], sizeof a.shape) == 0);
      CHECK(count == 0 || memcmp(a.data, data, count * esz) == 0);
      da__npy_free(&a);
      free(data);
      size_t len = 0; /* data starts at a multiple of 64 after a '\n'-ended header */
      unsigned char *b = read_file(path, &len);
      CHECK(b && len >= 64 && (len - count * esz) % 64 == 0 && b[len - count * esz - 1] == '\n');
      free(b);
    }
  }
  CHECK(count_dir_entries(tmpdir) == 1);
  unlink(path);
  CHECK(strcmp(da__npy_dtype_descr(DA_NPY_F32), "<f4") == 0);
  CHECK(strcmp(da__npy_dtype_descr(DA_NPY_F16), "<f2") == 0);
  CHECK(strcmp(da__npy_dtype_descr(DA_NPY_BF16), "<u2") == 0);
  CHECK(strcmp(da__npy_dtype_descr(DA_NPY_F64), "<f8") == 0);
  CHECK(strcmp(da__npy_dtype_descr((da__npy_dtype)99), "?") == 0);
}

/* Header spellings numpy (Python's literal_eval) accepts and we must too. */
static void test_valid_variants(void) {
  static const struct {
    int major, raw;
    const char *header;
    int ndim;
    size_t data_len;
  } cases[] = {
      {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 2, 24},
      {1, 0, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f8\"}", 1, 24},
      {1, 1, "{'descr':'<f2','fortran_order':False,'shape':(4,)}", 1, 8},
      {1, 0, " {\t'descr' : '<u2' ,\n'fortran_order' : False , 'shape' : ( 2 , 2 , ) , } ", 2, 8},
      {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }", 2, 8},
      {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 0, 4},
      {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", 1, 0},
      {2, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1), }", 8, 4},
      {3, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", 1, 8},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t len;
    unsigned char *b = make_npy(cases[c].major, cases[c].header, cases[c].data_len,
                                cases[c].raw, &len);
    da__npy_array a;
    char msg[256];
    da_status st = parse_copy(b, len, &a, msg, sizeof msg);
    CHECK_MSG(st == DA_OK && a.ndim == cases[c].ndim, msg);
    CHECK(st == DA_OK && a.count * a.elem_size == cases[c].data_len && a.data != NULL);
    da__npy_free(&a);
    free(b);
  }
}

/* Every class of malformed header: DA_ERR_PARSE, *out zeroed, a message naming it. */
static void test_malformed(void) {
  static const struct {
    int major;
    const char *header;
    size_t data_len;
    const char *expect; /* substring of the message */
  } cases[] = {
      {1, "['<f4', False, (2, 3)]", 24, "expected '{'"},
      {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "big-endian"},
      {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
       "fortran_order is True"},
      {1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24, "'<i8'"},
      {1, "{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }", 12, "'|f4'"},
      {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12,
       "quoted string"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4,
       "more than 8"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 12, "negative"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4,
       "too large"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807, 3), }", 4,
       "more elements"},
      /* no elements, but numpy refuses the shape too: it was read, then not written back */
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 0, 2, 4), }", 0,
       "more elements"},
      {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 4,
       "needs more bytes"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5), }", 20, "not a tuple"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (05,), }", 20, "leading zero"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 24, "tuple"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24, "expected ',' or ')'"},
      {1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24, "True or False"},
      {1, "{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3), }", 24, "'false'"},
      {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
       "duplicate"},
      {1, "{'descr': '<f4', 'shape': (2, 3), }", 24, "no 'fortran_order'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, "unknown key 'x'"},
      {1, "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, "expected ',' or '}'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, "after the header"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "the end of the header"},
      {1, "{'descr': \"<f4', 'fortran_order': False, 'shape': (2,)}", 8, "not terminated"},
      {1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", 8, "escape"},
      {3, "{'descr': '<f4\xc3\xa9', 'fortran_order': False, 'shape': (2,)}", 8, "0xc3"},
      {1, "{'descr'\x01: '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "0x01"},
      {1, "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}", 8, "quoted string"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, "(truncated)"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, "trailing bytes"},
      {1, "", 0, "expected '{'"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t len;
    unsigned char *b = make_npy(cases[c].major, cases[c].header, cases[c].data_len, 0, &len);
    da__npy_array a;
    char msg[256];
    memset(&a, 0x5a, sizeof a);
    da_status st = parse_copy(b, len, &a, msg, sizeof msg);
    CHECK_MSG(st == DA_ERR_PARSE && is_zeroed(&a), msg);
    CHECK_MSG(strstr(msg, cases[c].expect) != NULL, msg);
    if (strstr(msg, cases[c].expect) == NULL)
      fprintf(stderr, "  expected \"%s\"\n", cases[c].expect);
    free(b);
  }

  /* Preamble errors, made from a valid file. */
  unsigned char f[sizeof np_f32_v1];
  da__npy_array a;
  char msg[256];
  memcpy(f, np_f32_v1, sizeof f);
  f[3] = 'X';
  CHECK(parse_copy(f, LEN(np_f32_v1), &a, msg, sizeof msg) == DA_ERR_PARSE && strstr(msg, "magic"));
  memcpy(f, np_f32_v1, sizeof f);
  f[6] = 4;
  CHECK(parse_copy(f, LEN(np_f32_v1), &a, msg, sizeof msg) == DA_ERR_PARSE && strstr(msg, "4.0"));
  memcpy(f, np_f32_v1, sizeof f);
  f[7] = 1;
  CHECK(parse_copy(f, LEN(np_f32_v1), &a, msg, sizeof msg) == DA_ERR_PARSE && strstr(msg, "1.1"));
  memcpy(f, np_f32_v2, LEN(np_f32_v2));
  f[11] = 0xff; /* header length 0xff000074 */
  CHECK(parse_copy(f, LEN(np_f32_v2), &a, msg, sizeof msg) == DA_ERR_PARSE &&
        strstr(msg, "header length"));
  CHECK(parse_copy("", 0, &a, msg, sizeof msg) == DA_ERR_PARSE && strstr(msg, "empty"));

  /* Arguments and message buffers. */
  CHECK(da__npy_parse(NULL, 10, &a, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT && msg[0]);
  CHECK(da__npy_parse(np_f32_v1, LEN(np_f32_v1), NULL, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_parse(np_f32_v1, 20, &a, NULL, 0) == DA_ERR_PARSE);
  memset(msg, 'z', sizeof msg);
  CHECK(da__npy_parse(np_f32_v1, 20, &a, msg, 8) == DA_ERR_PARSE && strlen(msg) == 7);
  CHECK(da__npy_parse(np_f32_v1, LEN(np_f32_v1), &a, msg, sizeof msg) == DA_OK && msg[0] == 0);
  da__npy_free(&a);
}

/* Every proper prefix of every valid file is an error, never a crash or a leak. */
static void test_truncation(void) {
  for (int f = 0; f < NUM_NUMPY_FILES; f++) {
    int ok = 1;
    for (size_t len = 0; len < numpy_files[f].len; len++) {
      da__npy_array a;
      char msg[256];
      da_status st = parse_copy(numpy_files[f].bytes, len, &a, msg, sizeof msg);
      if (st != DA_ERR_PARSE || !msg[0] || !is_zeroed(&a)) {
        fprintf(stderr, "%s cut to %zu bytes: status %d, \"%s\"\n", numpy_files[f].name, len,
                (int)st, msg);
        ok = 0;
      }
      da__npy_free(&a);
    }
    CHECK(ok);
  }
}

/* Random byte edits of valid files: any result, but consistent and no crash. */
static void test_mutations(void) {
  uint64_t s = 0x9e3779b97f4a7c15u;
  int ok = 1;
  for (int it = 0; it < 20000; it++) {
    const char *src = numpy_files[it % NUM_NUMPY_FILES].bytes;
    size_t len = numpy_files[it % NUM_NUMPY_FILES].len;
    unsigned char *b = malloc(len);
    memcpy(b, src, len);
    for (int k = 0; k < 1 + it % 4; k++) {
      s = s * 6364136223846793005u + 1442695040888963407u;
      b[(s >> 33) % len] = (unsigned char)(s >> 17);
    }
    da__npy_array a;
    char msg[256];
    da_status st = da__npy_parse(b, len, &a, msg, sizeof msg);
    if (st == DA_OK && (a.data == NULL || a.count * a.elem_size > len)) ok = 0;
    if (st != DA_OK && (st != DA_ERR_PARSE || !msg[0] || !is_zeroed(&a))) ok = 0;
    da__npy_free(&a);
    free(b);
  }
  CHECK(ok);
}

static void test_load_errors(void) {
  char path[512], msg[512];
  da__npy_array a;
  tmp_path(path, sizeof path, "missing.npy");
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_ERR_IO && is_zeroed(&a));
  CHECK(strncmp(msg, path, strlen(path)) == 0 && strstr(msg, "No such file"));
  CHECK(da__npy_load(tmpdir, &a, msg, sizeof msg) == DA_ERR_IO && strstr(msg, "directory"));
  tmp_path(path, sizeof path, "bad.npy");
  FILE *f = fopen(path, "wb");
  fwrite(np_f32_v1, 1, LEN(np_f32_v1) - 1, f);
  fclose(f);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_ERR_PARSE && is_zeroed(&a));
  CHECK(strncmp(msg, path, strlen(path)) == 0 && strstr(msg, "truncated"));
  /* trailing bytes: said, with the file's length */
  f = fopen(path, "wb");
  fwrite(np_f32_v1, 1, LEN(np_f32_v1), f);
  fwrite("xyz", 1, 3, f);
  fclose(f);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_ERR_PARSE && is_zeroed(&a));
  CHECK(strstr(msg, "trailing bytes") != NULL);
  char want[64];
  snprintf(want, sizeof want, "the file has %zu", (size_t)3 + 24); /* np_f32_v1: 2 x 3 floats after 128 bytes */
  CHECK_MSG(strstr(msg, want) != NULL, msg);
  /* A file that is no .npy is refused after its first bytes, not read whole first (it had
   * read /dev/zero until memory ran out): /dev/zero, and a header length of 16 MiB */
  CHECK(da__npy_load("/dev/zero", &a, msg, sizeof msg) == DA_ERR_PARSE && strstr(msg, "bad magic"));
  static const unsigned char long_head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0, 1};
  f = fopen(path, "wb");
  fwrite(long_head, 1, sizeof long_head, f);
  fclose(f);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_ERR_PARSE && is_zeroed(&a));
  CHECK_MSG(strstr(msg, "16777216 bytes long") != NULL, msg);
  /* a header claiming 2^40 floats on a file of a few bytes: truncated, not out of memory */
  size_t tlen;
  unsigned char *tb = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", 8, 0, &tlen);
  f = fopen(path, "wb");
  fwrite(tb, 1, tlen, f);
  fclose(f);
  free(tb);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_ERR_PARSE && is_zeroed(&a));
  CHECK_MSG(strstr(msg, "(truncated)") != NULL, msg);
  /* every prefix of a good file: load says what parse says */
  for (size_t cut = 0; cut <= LEN(np_f32_v1); cut++) {
    char pmsg[512];
    f = fopen(path, "wb");
    fwrite(np_f32_v1, 1, cut, f);
    fclose(f);
    const da_status ls = da__npy_load(path, &a, msg, sizeof msg);
    da__npy_free(&a);
    const da_status ps = da__npy_parse(np_f32_v1, cut, &a, pmsg, sizeof pmsg);
    da__npy_free(&a);
    CHECK_MSG(ls == ps && (ls == DA_OK || !strcmp(msg + strlen(path) + 2, pmsg)), msg);
  }
  unlink(path);
}

/* A pipe reports no size: the reader must grow its buffer (80 KiB > its first 64 KiB). */
static void test_load_fifo(void) {
  char path[512], fifo[512], msg[512];
  static float x[20000];
  int64_t shape[1] = {20000};
  for (int i = 0; i < 20000; i++) x[i] = (float)i;
  tmp_path(path, sizeof path, "big.npy");
  tmp_path(fifo, sizeof fifo, "fifo");
  CHECK(da__npy_save(path, DA_NPY_F32, 1, shape, x, msg, sizeof msg) == DA_OK);
  size_t len = 0;
  unsigned char *b = read_file(path, &len);
  CHECK(b && len == 128 + sizeof x);
  CHECK(mkfifo(fifo, 0600) == 0);
  pid_t pid = fork();
  if (pid == 0) { /* child: write the file into the pipe */
    FILE *f = fopen(fifo, "wb");
    _exit(f && fwrite(b, 1, len, f) == len && fclose(f) == 0 ? 0 : 1);
  }
  da__npy_array a;
  CHECK(pid > 0 && da__npy_load(fifo, &a, msg, sizeof msg) == DA_OK);
  CHECK(a.count == 20000 && memcmp(a.data, x, sizeof x) == 0);
  da__npy_free(&a);
  int status = 1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && status == 0);
  free(b);
  unlink(fifo);
  unlink(path);
}

static void test_save_atomic(void) {
  char path[512], msg[512];
  static const float x[4] = {1, 2, 3, 4};
  int64_t shape[2] = {4, 0};
  da__npy_array a;

  /* Replace an existing file: new content, its permission bits kept, no temp file. */
  tmp_path(path, sizeof path, "out.npy");
  CHECK(da__npy_save(path, DA_NPY_F32, 1, shape, x, msg, sizeof msg) == DA_OK && !msg[0]);
  chmod(path, 0640);
  shape[0] = 2;
  shape[1] = 2;
  CHECK(da__npy_save(path, DA_NPY_F32, 2, shape, x, msg, sizeof msg) == DA_OK);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_OK && a.ndim == 2 && a.shape[1] == 2);
  da__npy_free(&a);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
  CHECK(count_dir_entries(tmpdir) == 1);

  /* Into a folder that does not exist: DA_ERR_IO naming the path, nothing created. */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/no/such/dir/x.npy", tmpdir);
  CHECK(da__npy_save(bad, DA_NPY_F32, 2, shape, x, msg, sizeof msg) == DA_ERR_IO);
  CHECK(strncmp(msg, bad, strlen(bad)) == 0 && strstr(msg, "No such file"));
  CHECK(count_dir_entries(tmpdir) == 1);

  /* Over a folder: the rename fails after the temp file was written; it must go. */
  char sub[600];
  snprintf(sub, sizeof sub, "%s/subdir", tmpdir);
  CHECK(mkdir(sub, 0755) == 0);
  CHECK(da__npy_save(sub, DA_NPY_F32, 2, shape, x, msg, sizeof msg) == DA_ERR_IO);
  CHECK(strncmp(msg, sub, strlen(sub)) == 0 && strstr(msg, "rename"));
  CHECK(count_dir_entries(tmpdir) == 2);
  rmdir(sub);

  /* Bad arguments write nothing. */
  int64_t neg[1] = {-1}, huge[2] = {INT64_MAX, 4};
  CHECK(da__npy_save(path, DA_NPY_F32, 1, neg, x, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_save(path, DA_NPY_F32, 2, huge, x, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_save(path, DA_NPY_F32, 9, huge, x, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_save(path, (da__npy_dtype)7, 1, shape, x, msg, sizeof msg) ==
        DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_save(path, DA_NPY_F32, 1, shape, NULL, msg, sizeof msg) ==
        DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_save(NULL, DA_NPY_F32, 1, shape, x, msg, sizeof msg) == DA_ERR_INVALID_ARGUMENT);
  CHECK(da__npy_load(path, &a, msg, sizeof msg) == DA_OK && a.ndim == 2);
  da__npy_free(&a);
  CHECK(count_dir_entries(tmpdir) == 1);
  unlink(path);

  /* A new file gets 0666 less the umask (not mkstemp's 0600). */
  mode_t old = umask(022);
  CHECK(da__npy_save(path, DA_NPY_F32, 1, shape, x, msg, sizeof msg) == DA_OK);
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);
  umask(old);
  unlink(path);
}

int main(void) {
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/test_npy.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_numpy_files();
  test_writer_matches_numpy();
  test_round_trips();
  test_valid_variants();
  test_malformed();
  test_truncation();
  test_mutations();
  test_load_errors();
  test_load_fifo();
  test_save_atomic();
  CHECK(count_dir_entries(tmpdir) == 0);
  rmdir(tmpdir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
