/* replay.c - runs a fuzz target over saved inputs, as an ordinary test.
 *
 * Link with one fuzz target (fuzz_npy.c or fuzz_config.c) and the code it tests, without
 * -fsanitize=fuzzer; then `replay corpus/npy [more files or folders...]` feeds every
 * file (folders: their regular files, not recursively, in name order) to
 * LLVMFuzzerTestOneInput, each in an exact-size heap buffer so a sanitizer catches any
 * read past the end. Prints "replayed N inputs" and returns 0; a crash or sanitizer
 * abort fails the test, and so does an argument that cannot be read or a run that finds
 * no inputs at all (a misnamed corpus folder must not pass silently).
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t len = 0, cap = 4096;
  uint8_t *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + len, 1, cap - len, f)) > 0;) {
    len += r;
    if (len == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    fprintf(stderr, "%s: cannot read\n", path);
    free(buf);
    return -1;
  }
  /* Exact-size copy: the target must not read past size. */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays the regular files of dir in name order; returns how many, or -1. */
static int replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
      if (!nn) break;
      names = nn;
    }
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (!names[n]) break;
    snprintf(names[n], len, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_names);
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
      count = replay_file(names[i]) < 0 ? -1 : count + 1;
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  long total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      return 1;
    }
    int n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) < 0 ? -1 : 1;
    if (n < 0) return 1;
    total += n;
  }
  printf("replayed %ld inputs\n", total);
  if (total == 0) {
    fprintf(stderr, "no inputs found\n");
    return 1;
  }
  return 0;
}
