/* tune.h - `dilattn tune` (runtime/tune.c), part of the CLI. */
#ifndef DA_TUNE_H
#define DA_TUNE_H

int da__cmd_tune(int argc, char **argv);

#endif
