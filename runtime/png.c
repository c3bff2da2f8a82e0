/* png.c - a minimal PNG writer (8-bit RGB, zlib from the system) for `dilattn tune --plot`:
 * bar charts need no more. Made in memory, written whole (da__write_output). */
#define _GNU_SOURCE
#include "runtime/fileio.h"
#include "runtime/png.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static int chunk(FILE *f, const char *type, const unsigned char *data, uint32_t len) {
  unsigned char hdr[8];
  put32(hdr, len);
  memcpy(hdr + 4, type, 4);
  uLong crc = crc32(0, hdr + 4, 4);
  if (len) crc = crc32(crc, data, len);
  unsigned char c[4];
  put32(c, (uint32_t)crc);
  return fwrite(hdr, 1, 8, f) == 8 && (len == 0 || fwrite(data, 1, len, f) == len) && fwrite(c, 1, 4, f) == 4;
}

int da__png_write(const char *path, int w, int h, const unsigned char *rgb) {
  size_t raw_len = (size_t)h * (size_t)(1 + 3 * w);
  unsigned char *raw = malloc(raw_len);
  uLongf zlen = compressBound((uLong)raw_len);
  unsigned char *z = malloc(zlen);
  if (!raw || !z) {
    free(raw), free(z);
    return -1;
  }
  for (int y = 0; y < h; y++) {
    raw[(size_t)y * (1 + 3 * (size_t)w)] = 0; /* filter: none */
    memcpy(raw + (size_t)y * (1 + 3 * (size_t)w) + 1, rgb + (size_t)y * 3 * (size_t)w, 3 * (size_t)w);
  }
  int ok = compress2(z, &zlen, raw, (uLong)raw_len, 6) == Z_OK;
  /* the file in memory, then written whole (da__write_output: a file atomically, a stream
   * such as /dev/stdout into) */
  char *png = NULL;
  size_t len = 0;
  FILE *f = ok ? open_memstream(&png, &len) : NULL;
  if (f) {
    static const unsigned char sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    unsigned char ihdr[13];
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0;
    ok = fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) && chunk(f, "IDAT", z, (uint32_t)zlen) &&
         chunk(f, "IEND", NULL, 0);
    ok = fclose(f) == 0 && ok;
    ok = ok && da__write_output(path, png, len) == 0;
  } else {
    ok = 0;
  }
  free(png), free(raw), free(z);
  return ok ? 0 : -1;
}

void da__png_rect(unsigned char *rgb, int w, int h, int x0, int y0, int x1, int y1, uint32_t color) {
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x1 > w) x1 = w;
  if (y1 > h) y1 = h;
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) {
      unsigned char *p = rgb + 3 * ((size_t)y * (size_t)w + (size_t)x);
      p[0] = (unsigned char)(color >> 16), p[1] = (unsigned char)(color >> 8), p[2] = (unsigned char)color;
    }
}
