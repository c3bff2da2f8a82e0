/* dilattn.h - the one public header of dilattn.
 *
 * dilattn turns a dilated-attention configuration (segment lengths, dilation rates,
 * sparsity layout, head dim, dtype, causality, head mode) into a kernel specialized for
 * exactly that configuration, compiles it, and runs it. What the kernels compute is
 * fixed by spec/SEMANTICS.md.
 *
 * Tiers:
 *   1. Simple path: da_spec_init -> fill fields -> da_context_create -> da_plan_create
 *      -> da_args_init -> da_plan_execute -> da_plan_destroy -> da_context_destroy.
 *   2. Advanced: config JSON parsing, source rendering, workspace control.
 *   3. Experimental: may change between releases.
 *
 * Conventions: every function returning da_status writes nothing to its outputs on
 * failure (one exception, da_plan_preload: its plans array holds the plans that were
 * made, to destroy, beside NULL for the rest); a NULL pointer argument that a function
 * needs gives DA_ERR_INVALID_ARGUMENT; the detail of a failure is in
 * da_context_last_error() of the context the call was given (or in the msg buffer for
 * calls without a context). destroy(NULL) is a no-op.
 * Nothing in the library exits or aborts the process.
 */
#ifndef DILATTN_H
#define DILATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define DA_API
#else
#define DA_API __attribute__((visibility("default")))
#endif

#define DA_VERSION_MAJOR 0
#define DA_VERSION_MINOR 3
#define DA_VERSION_PATCH 0
#define DA_VERSION_STRING "0.3.0"

/* ---------------------------------------------------------------------------------
 * Status codes. X-macro: (NAME, message).
 * --------------------------------------------------------------------------------- */
#define DA_STATUS_MAP(X)                                                              \
  X(OK, "success")                                                                    \
  X(ERR_INVALID_ARGUMENT, "invalid argument")                                         \
  X(ERR_INVALID_SPEC, "invalid dilated-attention spec")                               \
  X(ERR_PARSE, "malformed input (config or array file)")                              \
  X(ERR_GENERATOR, "kernel generator (Lua template) failed")                          \
  X(ERR_COMPILE, "kernel compilation failed")                                         \
  X(ERR_UNSUPPORTED, "not supported by this build or backend")                        \
  X(ERR_DEVICE, "device or runtime failure")                                          \
  X(ERR_NO_MEMORY, "out of memory")                                                   \
  X(ERR_IO, "file input/output failed")                                               \
  X(ERR_INTERNAL, "internal error")                                                   \
  X(ERR_CANCELLED, "cancelled by the caller")

typedef enum {
#define DA__STATUS_ENUM(name, msg) DA_##name,
  DA_STATUS_MAP(DA__STATUS_ENUM)
#undef DA__STATUS_ENUM
  DA_STATUS_COUNT
} da_status;

/* Name ("DA_ERR_COMPILE") and one-line message of a status. Never NULL; thread-safe. */
DA_API const char *da_status_name(da_status s);
DA_API const char *da_status_message(da_status s);

/* ---------------------------------------------------------------------------------
 * The spec: a plain struct with a defaults initializer and a validator.
 * --------------------------------------------------------------------------------- */
#define DA_MAX_BRANCHES 16
#define DA_MAX_STRIDES 16
#define DA_MAX_HEAD_DIM 512
#define DA_MAX_HEADS 4096
#define DA_MAX_EXPLICIT_BLOCKS 65536 /* blocks a side of an explicit mask (4 GiB a branch) */

typedef enum { DA_MODE_LONGNET = 0, DA_MODE_GROUPED = 1 } da_mode;
typedef enum { DA_OFFSETS_MOD = 0, DA_OFFSETS_BLOCK = 1 } da_offsets;
typedef enum { DA_DTYPE_FLOAT32 = 0, DA_DTYPE_FLOAT16 = 1, DA_DTYPE_BFLOAT16 = 2 } da_dtype;

typedef enum {
  DA_LAYOUT_NONE = 0,       /* no sparsity (the config has no "sparsity" object) */
  DA_LAYOUT_DENSE,          /* every block pair allowed */
  DA_LAYOUT_LOCAL_WINDOW,   /* |qb - kb| <= window */
  DA_LAYOUT_GLOBAL_LOCAL,   /* |qb - kb| <= window or kb < global or qb < global */
  DA_LAYOUT_DILATED_SPARSE, /* kb == qb or |qb - kb| in strides */
  DA_LAYOUT_RANDOM,         /* qb == kb or splitmix64 test against density */
  DA_LAYOUT_EXPLICIT        /* per-branch nb x nb byte masks given through the API */
} da_layout;

typedef struct {
  da_layout layout;
  int64_t block;  /* bs >= 1, in dilated coordinates */
  int64_t window; /* local_window, global_local: >= 0 */
  int64_t global; /* global_local: >= 0 */
  int num_strides;
  int64_t strides[DA_MAX_STRIDES]; /* dilated_sparse: each >= 1 */
  uint64_t seed;                   /* random */
  double density;                  /* random: in [0, 1] */
  /* explicit: for branch i, nb_i * nb_i bytes, row-major [qb][kb], nonzero = allowed,
   * nb_i = da_spec_explicit_blocks(spec, i) <= DA_MAX_EXPLICIT_BLOCKS. Borrowed:
   * da_plan_create copies them (after validating the spec). */
  const uint8_t *explicit_masks[DA_MAX_BRANCHES];
} da_sparsity;

typedef struct {
  int num_branches;
  int64_t segment_lengths[DA_MAX_BRANCHES]; /* w_i >= 1 */
  int64_t dilation_rates[DA_MAX_BRANCHES];  /* 1 <= r_i <= w_i */
  da_mode mode;
  da_offsets offsets;
  int causal;     /* 0 or 1 */
  int has_scale;  /* 0: scale = 1/sqrt(head_dim) */
  double scale;   /* used when has_scale; finite */
  int num_heads;  /* H >= 1 */
  int num_kv_heads; /* Hkv >= 1, H % Hkv == 0 (0, da_spec_init's: unset, see there) */
  int head_dim;   /* 1 .. DA_MAX_HEAD_DIM */
  da_dtype dtype;
  da_sparsity sparsity;
} da_spec;

/* Fill *spec with the defaults: no branches, longnet, mod offsets, not causal, default
 * scale, 1 head, head_dim 64, float32, no sparsity, and num_kv_heads unset (0): set it
 * with num_heads (num_heads for multi-head attention, fewer for grouped-query, 1 for
 * multi-query). An unset num_kv_heads is 1 with one head; with more, da_spec_validate,
 * plan creation and da_render refuse it (DA_ERR_INVALID_SPEC), da_spec_to_json writes it
 * as 0 (which da_spec_from_json refuses) and da_args_init sets k's and v's strides to -1
 * (which da_plan_execute refuses). It was 1, which read a multi-head k and v as one
 * head's. spec may not be NULL. */
DA_API void da_spec_init(da_spec *spec);

/* Check every rule of SEMANTICS.md. Returns DA_OK, DA_ERR_INVALID_SPEC (spec NULL:
 * DA_ERR_INVALID_ARGUMENT); on error
 * writes a message naming the field and its value ("dilation_rates[1]: 9 is larger than
 * segment_lengths[1] = 4") into msg (NUL-terminated, truncated to msg_cap; msg may be
 * NULL). Thread-safe. */
DA_API da_status da_spec_validate(const da_spec *spec, char *msg, size_t msg_cap);

/* Number of blocks per side of branch i's explicit mask: ceil(ceil(w_i / r_i) / block).
 * Returns -1 for an out-of-range branch (below 0, at or past num_branches or
 * DA_MAX_BRANCHES) or a spec without a positive block, w_i or r_i. */
DA_API int64_t da_spec_explicit_blocks(const da_spec *spec, int branch);

/* Parse a config (the JSON of DESIGN.md) into *spec. Unknown fields, wrong types and
 * invalid values are errors: DA_ERR_PARSE for malformed JSON, wrong types and a missing
 * required field, DA_ERR_INVALID_SPEC for invalid values; msg says which field and where. On error
 * *spec is untouched. */
DA_API da_status da_spec_from_json(const char *text, size_t len, da_spec *spec, char *msg,
                                   size_t msg_cap);

/* ---------------------------------------------------------------------------------
 * Context and plans.
 * --------------------------------------------------------------------------------- */
typedef struct da_context da_context;
typedef struct da_plan da_plan;

typedef enum { DA_BACKEND_AUTO = 0, DA_BACKEND_HOST = 1, DA_BACKEND_CUDA = 2 } da_backend;

/* Create a context: it owns compiled kernels and the last-error text. Returns DA_OK or
 * DA_ERR_NO_MEMORY. A context may be used from several threads; its last-error text is
 * per thread. On the CUDA backend a context works on one device: the device of the CUDA
 * context current on the thread that first uses it for CUDA (a plan creation, say; in a
 * PyTorch program the current device, torch.cuda.set_device), else device 0. It keeps that
 * device; a program driving several devices from one process makes one context per device,
 * each first used with its device current. Its kernels and memory live in that device's
 * primary context (the CUDA runtime's and PyTorch's): tensors must be usable there, and a
 * stream of another CUDA context (cuCtxCreate's) is refused with DA_ERR_INVALID_ARGUMENT;
 * a green context's stream (cuGreenCtxStreamCreate's) runs in the primary context and is
 * taken. After fork() (a data loader's workers), the child may go on using the context on
 * the host backend: a kernel a thread of the parent was compiling at the fork, the child
 * compiles itself. (A fork at the moment another thread holds one of the context's locks,
 * a few microseconds around each cache lookup, can still leave the child waiting on it:
 * POSIX promises a threaded process's child only async-signal-safe calls.) */
DA_API da_status da_context_create(da_context **out);
DA_API void da_context_destroy(da_context *ctx);

/* The detail of the last failure of a call made with ctx on this thread ("" if none).
 * Borrowed: valid until the next call on ctx from this thread. ctx NULL gives the text
 * of calls made without a context. A thread keeps the details of the 4 contexts (NULL
 * counts as one) that failed on it most recently: another context's failure does not
 * erase this one's unless 4 others failed since. */
DA_API const char *da_context_last_error(const da_context *ctx);

/* Validate, plan, render, compile (or fetch a compiled kernel) for backend. AUTO picks
 * CUDA when a driver and GPU are usable, else host (DILATTN_BACKEND=host forces host for AUTO;
 * a backend named here wins over the variable).
 * Returns DA_OK, DA_ERR_INVALID_SPEC (checked before anything else reads the spec),
 * DA_ERR_INVALID_ARGUMENT (NULL argument, unknown backend, an environment variable's
 * bad value), DA_ERR_GENERATOR, DA_ERR_COMPILE, DA_ERR_UNSUPPORTED (backend not
 * available; a kernel that no bundle or cache holds under DILATTN_DISABLE_JIT, or on the
 * CUDA backend where NVRTC is missing), DA_ERR_DEVICE (the driver refused the kernel or
 * its set-up), DA_ERR_IO (a temporary file the host compiler or a kernel's load needs
 * could not be made), DA_ERR_NO_MEMORY. The plan borrows ctx,
 * which must outlive it. Thread-safe. */
DA_API da_status da_plan_create(da_context *ctx, const da_spec *spec, da_backend backend,
                                da_plan **out);
DA_API void da_plan_destroy(da_plan *plan);

/* Progress of da_plan_preload: called (serialized) after each spec with how many are
 * done, the total, the index of the spec just finished and its status. Return nonzero to
 * cancel: specs not yet started are skipped, NVRTC compiles in flight stop. */
typedef int (*da_preload_progress)(void *user, int done, int total, int index, da_status status);

/* JIT at model load: create plans for specs[0..count) with compiles in num_threads
 * parallel threads (0 = online CPUs; negative: DA_ERR_INVALID_ARGUMENT); specs sharing a kernel compile it once. plans
 * (optional, count entries) receives each plan (NULL for a failed or skipped spec; the
 * caller destroys them, on failure too: the specs that did not fail keep theirs);
 * without it the plans only warm the caches. Returns DA_OK, the first failing spec's
 * status (detail names the spec index), or DA_ERR_CANCELLED where a spec was skipped (a
 * cancel from the last spec's progress call skips none: DA_OK). */
DA_API da_status da_plan_preload(da_context *ctx, const da_spec *specs, int count,
                                 da_backend backend, int num_threads,
                                 da_preload_progress progress, void *user, da_plan **plans);

/* ---- AOT bundles (`dilattn gen --bundle`, CMake dilattn_add_kernels) ------------------
 * Kernels compiled ahead of time are looked up after the context's memory and before the
 * disk cache and the compiler. A bundle built by another library version is skipped with
 * a warning (DA_OK); one compiled for another arch simply does not match, with a warning
 * at lookup. With DILATTN_DISABLE_JIT set, a kernel found in no bundle and not on disk is
 * an error naming it. Bundles listed in DILATTN_BUNDLES (manifest paths separated by ':')
 * are registered when a context is created. */

/* Register the bundle whose manifest.json is at manifest_path (artifacts next to it).
 * Returns DA_OK, DA_ERR_IO (unreadable, not a regular file), DA_ERR_PARSE (not a bundle
 * manifest). Registering a bundle again (same path or name, same manifest) is a no-op. */
DA_API da_status da_context_register_bundle(da_context *ctx, const char *manifest_path);

/* A bundle linked into the program (what the generated <name>_bundle.c defines). The
 * data must outlive the context. */
typedef struct {
  const char *name;
  const char *manifest;     /* manifest.json text */
  size_t manifest_len;
  int count;                /* artifacts */
  const char *const *files; /* their "file" names in the manifest */
  const unsigned char *const *data;
  const size_t *sizes;
} da_bundle_data;

DA_API da_status da_context_register_bundle_data(da_context *ctx, const da_bundle_data *bundle);

/* The backend a plan runs on (never AUTO for a plan; AUTO for NULL). */
DA_API da_backend da_plan_backend(const da_plan *plan);

/* Kernel name (it encodes the spec) and cache key (64 hex digits). Borrowed from plan. */
DA_API const char *da_plan_kernel_name(const da_plan *plan);
DA_API const char *da_plan_cache_key(const da_plan *plan);

/* Bytes of workspace an execution with this batch and sequence length takes when the
 * caller supplies it (0 is possible): the most it uses, enough to run in one piece; where
 * DILATTN_WORKSPACE_LIMIT was set when the plan was made, the most that limit allows (the
 * least, da_plan_workspace_min_size, where the limit is below it). Split plans need
 * workspace (da_plan_strategy) for their partial rows; on CUDA, an execution with
 * persistent launches (README, DILATTN_CTA_TILES) takes 4 bytes a launch for their tile
 * counters after the rows (from the next 16 bytes), which it zeroes on the stream. Given
 * a workspace without that room, those launches run two tiles a CTA instead, with the same
 * results; given none, the plan allocates the counters with the rows from the stream's
 * pool and frees them on the stream. */
DA_API da_status da_plan_workspace_size(const da_plan *plan, int64_t batch, int64_t seq_len,
                                        size_t *bytes);
/* The least workspace an execution accepts (<= da_plan_workspace_size). Given less than
 * da_plan_workspace_size but at least this, a split plan on CUDA runs its branch launches
 * over the tokens in runs whose partial rows fit (each run a whole number of the lcm of
 * the branches' w; results bit for bit the same), and the host backend runs fewer worker
 * threads (a worker holds one sequence's rows). DILATTN_WORKSPACE_LIMIT bounds the
 * workspace a plan allocates itself likewise; where the device has too little free memory
 * for one run of all the tokens, a CUDA plan takes shorter runs. */
DA_API da_status da_plan_workspace_min_size(const da_plan *plan, int64_t batch, int64_t seq_len,
                                            size_t *bytes);

/* Tensors of one execution. Strides are in elements, for the batch, sequence and head
 * dimensions; the last (head_dim) dimension is contiguous. lse is [B, H, N] fp32,
 * contiguous, optional (NULL). Data are in the spec's dtype (bf16 as raw uint16). */
typedef struct {
  const void *q, *k, *v;
  void *out;
  float *lse;
  int64_t batch, seq_len;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  void *workspace;        /* NULL: the plan allocates what it needs */
  size_t workspace_bytes; /* size of workspace when given */
  void *stream;           /* CUDA stream (CUstream); ignored by the host backend */
} da_args;

/* Fill args for contiguous [B, N, H, D] q/out and [B, N, Hkv, D] k/v tensors. args NULL:
 * nothing; spec NULL: pointers and sizes only, strides 0. */
DA_API void da_args_init(da_args *args, const da_spec *spec, int64_t batch, int64_t seq_len,
                         const void *q, const void *k, const void *v, void *out, float *lse);

/* Run the plan. Returns DA_OK, DA_ERR_INVALID_ARGUMENT (NULL pointer, bad shape or
 * stride, a tensor spanning more than 2^63 bytes, elements of out that overlap, out,
 * lse or the workspace sharing memory with an input or each other (no computation in
 * place; tensors of one dtype with the same strides, packed in one buffer, are compared
 * element by element, others by the byte ranges they span), a pointer
 * not aligned to its element size (lse and the workspace: 4 bytes), workspace below
 * da_plan_workspace_min_size, on CUDA a workspace not 16-byte aligned: cudaMalloc's and
 * the pool's always are), DA_ERR_NO_MEMORY (also: DILATTN_WORKSPACE_LIMIT below the least
 * workspace), DA_ERR_DEVICE. On the host backend the call is synchronous and may be
 * made from several threads on one plan at once. On the CUDA backend the launches go on
 * args->stream, and several threads may execute one plan at once, each on a stream of
 * its own (tests/test_threads.c runs that under ThreadSanitizer); q, k and v that are
 * 16-byte aligned with strides that are multiples of 8 elements are loaded with cp.async;
 * any other layout works through plain loads, a little slower. A stream of another device
 * than the context's is DA_ERR_INVALID_ARGUMENT, naming both. An empty batch (batch or
 * seq_len 0) does nothing and returns DA_OK whatever its pointers (NULL included, as an
 * empty framework tensor's may be). */
DA_API da_status da_plan_execute(da_plan *plan, const da_args *args);

/* ---------------------------------------------------------------------------------
 * Advanced: source generation.
 * --------------------------------------------------------------------------------- */
typedef enum { DA_TARGET_HOST = 0, DA_TARGET_CUDA = 1 } da_target;

/* Render the specialized source for spec and target (ctx: for the error text; NULL
 * allowed: the text is then da_context_last_error(NULL)'s). On success *source is a
 * malloc'ed NUL-terminated string the caller frees with free(); *kernel_name (optional,
 * may be NULL) likewise. Same spec -> byte-identical source. Returns DA_OK,
 * DA_ERR_INVALID_SPEC, DA_ERR_GENERATOR, DA_ERR_NO_MEMORY. */
DA_API da_status da_render(da_context *ctx, const da_spec *spec, da_target target,
                           char **source, char **kernel_name);

/* Canonical JSON of a spec (sorted, fixed format; what banners and keys hold).
 * malloc'ed; NULL on out of memory, and for a spec JSON cannot say as it is (an enum
 * value out of range, num_branches or num_strides past their maximum, a NaN or infinite
 * scale or density). A spec that is only invalid (da_spec_validate) is written as it is. */
DA_API char *da_spec_to_json(const da_spec *spec);

/* ---------------------------------------------------------------------------------
 * Experimental: plan tunables (the autotuner's knobs). May change between releases.
 * --------------------------------------------------------------------------------- */
typedef struct {
  int tile_q;            /* queries per tile; 0 = default (host 32), 1..256 */
  int tile_k;            /* keys per tile; 0 = default (host 64), 1..1024 */
  int fused_min_queries; /* the fused tiling is used only when a tile can hold at least
                            this many queries (gcd(w)/lcm(r)); 0 = default (16) */
  int64_t seq_len_hint;  /* expected N: picks the tuning database's nearest shape bucket
                            (0 or negative = 65536) when the three tunables above are 0 */
  int cuda_mma;          /* CUDA tensor-core instruction: 0 = default (the tuning database's
                            choice, else on sm_90 devices where the wgmma paths serve the
                            spec 6, or 4 under a sparse layout or where the driver or NVRTC
                            predates CUDA 12.1, else mma.sync; DILATTN_CUDA_MMA
                            overrides), with the tunables above
                            too: where they are set and that instruction refuses them (or
                            its kernel does not compile with them), mma.sync; 1 = mma.sync,
                            2 = wgmma (float16/bfloat16, head_dim 64 or 128; sm_90 devices
                            only, compiled for sm_90a), 3 = wgmma with the next key tile's
                            scores issued before this tile's softmax (same conditions;
                            experimental), 4 = wgmma warp-specialized: a producer warpgroup
                            loads K / V, the consumer warpgroups (tile_q 64: one, two CTAs
                            per SM; 128: two, the default with a causal mask, a sparse
                            layout or head_dim 128; 192: three, the default otherwise, not
                            under a sparse layout) take turns on the tensor cores (same
                            conditions);
                            5 = 4 with P in two register sets, a tile's exps under the P V of
                            the tile before (tile_q 128, not under a sparse layout;
                            experimental); 6 = 4 with K and V copied by the tensor memory
                            accelerator (one producer thread, a tensor map per branch,
                            offset class and tensor, encoded per execution; not under a
                            sparse layout, which takes 4; where the tensors are not 16-byte
                            aligned, or the driver has no cuTensorMapEncodeTiled, or
                            DILATTN_TMA=0, the copies are 4's; its kernels' parameters pass
                            4 KiB with many dilation classes, which a driver or NVRTC
                            before CUDA 12.1 refuses: DA_ERR_UNSUPPORTED, README).
                            Ignored by the host backend. */
} da_plan_options;

/* da_plan_create with tunables (opts may be NULL). When opts is NULL or its tunables are
 * all 0, the best entry of the tuning database (`dilattn tune`; $DILATTN_TUNING_DB, else
 * <cache dir>/tuning.jsonl; DILATTN_TUNING=0 ignores it) for this spec, backend and the
 * nearest shape bucket is used, else the planner's defaults. Same contract otherwise.
 * A context reads the database once, at its first plan that consults it, and gives the
 * plans it already made (a spec and options) from memory: a sweep finished later, or
 * DILATTN_TUNING_DB changed, counts for contexts created after; DILATTN_TUNING=0 set later,
 * for plans it has not made yet. */
DA_API da_status da_plan_create_ex(da_context *ctx, const da_spec *spec, da_backend backend,
                                   const da_plan_options *opts, da_plan **out);

/* The tunables the plan was built with (tuned or default, as resolved): tile_q, tile_k and,
 * on CUDA, cuda_mma (1 mma.sync, 2 wgmma, 3 wgmma overlapped, 4 wgmma warp-specialized, 5 and 6 its
 * variants; 0 on the host
 * and the SIMT path). The struct
 * grew cuda_mma in 0.2.0: code built against an older header must be rebuilt. */
DA_API da_status da_plan_get_options(const da_plan *plan, da_plan_options *out);

/* The tiling strategy the plan chose: "fused" (one online softmax across branches),
 * "split" (per-branch tiles merged exactly through workspace) or "single" (one branch
 * per head). Borrowed from plan. */
DA_API const char *da_plan_strategy(const da_plan *plan);

/* ---------------------------------------------------------------------------------
 * Caches and memory: statistics (DESIGN.md decisions 5-7).
 * --------------------------------------------------------------------------------- */
typedef struct {
  size_t size, max_size;          /* entries held, bound (DILATTN_PATTERN_CACHE_MAX) */
  uint64_t hits, misses, evictions;
  double hit_rate;                /* hits / (hits + misses), 0 when unused */
} da_pattern_cache_stats;

typedef struct {
  size_t total_allocated;  /* bytes the pool holds from the system now */
  size_t peak_allocated;   /* most bytes it ever held */
  uint64_t allocation_count; /* raw allocations it made from the system */
  double reuse_rate;       /* share of requests served without a raw allocation */
} da_pool_stats;

/* Where the context's kernels came from (a process forked after creating the context
 * starts with its parent's counts: read them before and after what you measure): each
 * kernel (a module: one a host plan, one or
 * more a CUDA plan, for each arch) is had once a context, from a registered AOT bundle, the
 * disk cache or a compile, and then held in memory (another plan of it takes it from
 * there; a plan made before of the same spec and options may not look at all). A program
 * that must not compile at load can check builds == 0 after creating its plans
 * (DILATTN_DISABLE_JIT makes a compile an error instead). */
typedef struct {
  uint64_t loaded;      /* kernels held: the sum of the three below (one found or compiled but
                         * refused before it was held, a host module built for instructions
                         * this CPU lacks, is in none of them) */
  uint64_t bundle_hits; /* taken from a registered AOT bundle */
  uint64_t disk_hits;   /* taken from the disk cache (DILATTN_CACHE_DIR) */
  uint64_t builds;      /* compiled in this context (NVRTC, or CC for the host backend) */
  double build_ms;      /* those compiles' wall time, summed (da_plan_preload runs several at once) */
} da_kernel_cache_stats;

/* Density of plan's spec at seq_len: the attended (query, key) pairs of every head and
 * branch, causal and sparsity applied, over the same count with no sparsity (1.0 for a
 * spec without sparsity, and at a seq_len with no pair at all, 0 say). Built from the block
 * tables of the context's pattern cache.
 * DA_ERR_INVALID_ARGUMENT when a table would be too large (more than 2^26 entries). */
DA_API da_status da_plan_density(da_plan *plan, int64_t seq_len, double *density);

/* Snapshot of the context's pattern cache and host memory pool. Thread-safe. */
DA_API da_status da_context_pattern_cache_stats(const da_context *ctx, da_pattern_cache_stats *out);
DA_API da_status da_context_pool_stats(const da_context *ctx, da_pool_stats *out);
DA_API da_status da_context_kernel_cache_stats(const da_context *ctx, da_kernel_cache_stats *out);

/* Library version string. */
DA_API const char *da_version(void);

/* ---------------------------------------------------------------------------------
 * Log lines (DILATTN_LOG_LEVEL): to stderr as "dilattn: LEVEL: text", or, with a callback
 * set, to fn(level, text, user) instead, from whichever thread logs (fn must be
 * thread-safe and must not call into dilattn). level: 0 error, 1 warning, 2 info, 3 debug;
 * text has no prefix and no newline, and lives only during the call. DILATTN_LOG_LEVEL
 * still decides which lines are made (set it to debug to see everything). Process-wide;
 * NULL fn: stderr again. A line being delivered when the callback is replaced may still
 * reach the old one.
 * --------------------------------------------------------------------------------- */
typedef void (*da_log_fn)(int level, const char *text, void *user);
DA_API void da_set_log_callback(da_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* DILATTN_H */
