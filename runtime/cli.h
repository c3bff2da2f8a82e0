/* cli.h - what the dilattn command shares between its commands (runtime/cli.c, and
 * runtime/tune.c for `dilattn tune`). */
#ifndef DA_CLI_H
#define DA_CLI_H

#include <stddef.h>

#include "dilattn.h"

/* Read and validate a config file into spec: 0, or the exit code, the error printed. */
int da__cli_load_config(const char *path, da_spec *spec);
/* JSON string literal of s (or null), escaped (quotes, backslashes, control characters),
 * whole however long: valid until the same slot (0..7) is used again. */
const char *da__cli_jstr(const char *s, int slot);
/* 1 when paths a and b name one file: the same device and inode where both exist, else the
 * same last component in the same folder (folders compared after realpath). */
int da__cli_same_file(const char *a, const char *b);

/* Record an option's value in *prev, or refuse a second one (the last was taken in
 * silence): 0, or 1 with "CMD: FLAG given twice (FIRST and VAL)" printed. */
int da__cli_once(const char *cmd, const char *flag, const char **prev, const char *val);

#endif
