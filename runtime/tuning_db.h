/* tuning_db.h - the tuning database (DESIGN.md decision 9): JSON lines, an environment
 * header then one record per (spec, backend, shape bucket, tile parameters) with its
 * timings and status; merged by re-read and atomic replace under a lock; a file written
 * for another environment is ignored and never overwritten. Plan creation asks it for
 * the best parameters of a spec. */
#ifndef DA_TUNING_DB_H
#define DA_TUNING_DB_H

#include <stdint.h>

#include "runtime/internal.h"

typedef struct {
  char spec_hash[65];
  char backend[8];       /* host | cuda */
  int64_t seq_len, batch;
  int bucket;            /* floor(log2(seq_len)) */
  da_plan_options params;
  char strategy[16];
  char status[16];       /* ok | compile | runtime | correctness | constraints */
  char label[200];       /* why, for failures */
  double median_ms, min_ms, max_ms;
  int reps, is_default;
  int env_mask; /* read: the backends (bits: 1 host, 2 cuda) its section's header serves here */
} da__tune_record;

/* Path of the database: $DILATTN_TUNING_DB, else <cache dir>/tuning.jsonl. */
DA_HIDDEN void da__tuning_db_path(char *out, size_t cap);

/* This machine's environment header line (JSON, no newline): library, CPU, compiler,
 * GPU, driver and NVRTC versions. */
DA_HIDDEN const char *da__tuning_env(void);
/* The same for ctx's CUDA device (where it took one; else, as da__tuning_env, the device
 * current on this thread, else device 0). In a buffer of this thread's, until its next call. */
DA_HIDDEN const char *da__tuning_env_for(const da_context *ctx);

/* Read every record of a database written for this environment. Returns the count
 * (records malloc'ed into *out), 0 for a missing file, -1 for one of another
 * environment (*mismatch set) or unreadable. */
DA_HIDDEN int da__tuning_db_read(const char *path, da__tune_record **out, int *mismatch);
/* What differs between the environment header of the database at path and ctx's
 * (da__tuning_env_for): "cc: \"cc\" there, \"clang\" here; ..." into out (empty: none, or
 * no header). */
DA_HIDDEN void da__tuning_db_env_diff(const da_context *ctx, const char *path, char *out, size_t cap);
/* The same against ctx's environment (da__tuning_env_for). A record counts where its
 * backend's fields of the header are the same here (host: library, CPU, C compiler; CUDA:
 * library, GPU with its driver, NVRTC): the others are left out (*skipped, where given, counts
 * them), and a file of neither backend is -1 with *mismatch set. */
DA_HIDDEN int da__tuning_db_read_for(const da_context *ctx, const char *path, da__tune_record **out, int *mismatch,
                                     int *skipped);

/* Merge records into the database under its lock (re-read, replace records with the same
 * spec, backend, bucket and parameters whatever their batch, so that a bucket's times are
 * one sweep's; append the rest, atomic rename; the header kept). Refuses (DA_ERR_IO,
 * nothing written) a file whose environment differs here in a field the records' backend
 * depends on (see da__tuning_db_read_for). */
/* Whether a merge of backend's ("host", "cuda") records into path could succeed, checked
 * before a sweep: DA_ERR_IO with the reason (a database written for another environment,
 * unreadable, or a folder that cannot be written) in ctx. */
DA_HIDDEN da_status da__tuning_db_check(const da_context *ctx, const char *path, const char *backend);
DA_HIDDEN da_status da__tuning_db_merge(const da_context *ctx, const char *path, const da__tune_record *recs, int n);

/* Best ok record for spec_hash/backend whose bucket is nearest to want_bucket (of two as
 * near, the larger), never of tunables that failed their correctness check at any bucket;
 * with sync_only, of the mma.sync records alone (cuda_mma 1, or 0 with tunables set: an
 * older tuner's; not a CUDA sweep's default, timed as the device's default instruction). */
DA_HIDDEN const da__tune_record *da__tuning_best(const da__tune_record *recs, int n, const char *spec_hash,
                                                 const char *backend, int want_bucket, int sync_only);

DA_HIDDEN int da__tuning_bucket(int64_t seq_len);

/* the most candidates `dilattn tune` takes for one config: da__tune_candidates(.., cap) */
#define DA_TUNE_MAX_CANDIDATES 48

/* The plan options `dilattn tune` sweeps for a spec, the defaults (all zero) first: on
 * the host or CUDA backend (cuda), on a device that serves the wgmma paths (wgmma: 0 no,
 * 1 sm_90, 2 sm_90 whose default is wgmma-ws-tma, plan.c da__default_mma's serves).
 * Writes at most cap and returns the count. */
DA_HIDDEN int da__tune_candidates(const da_spec *s, int cuda, int wgmma, da_plan_options *out, int cap);

#endif
