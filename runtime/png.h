/* png.h - minimal PNG output for plots (RGB, zlib). */
#ifndef DA_PNG_H
#define DA_PNG_H

#include <stdint.h>

/* Write a w x h RGB image (3 bytes per pixel, rows top to bottom). 0 on success. */
int da__png_write(const char *path, int w, int h, const unsigned char *rgb);
/* Fill [x0, x1) x [y0, y1) with 0xRRGGBB, clipped. */
void da__png_rect(unsigned char *rgb, int w, int h, int x0, int y0, int x1, int y1, uint32_t color);

#endif
