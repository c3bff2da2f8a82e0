/* bundle_writer.c - the files `dilattn gen --bundle NAME` writes next to the kernels:
 *   manifest.json    kernels, configs, source and artifact keys, arches, versions, sums
 *   NAME.h           one typed entry point per config (spec, plan, run)
 *   NAME_bundle.c    the compiled artifacts as arrays + NAME_register(ctx)
 * Part of the CLI, not of the library. */
#define _GNU_SOURCE
#include "runtime/fileio.h"
#include "runtime/bundle_writer.h"
#include "runtime/host_compiler.h"

#include "gen/render.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The bundle's files staged so far (their temps whole), for the caller to commit */
typedef struct {
  da__staged_file *f;
  int n;
} staged_t;

/* A bundle file's temp beside path, staged in st (with the bits gen's other outputs get:
 * da__output_mode), opened to write */
static FILE *open_tmp(const char *path, staged_t *st) {
  da__staged_file *sf = &st->f[st->n];
  int fd = da__stage_file(sf, path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) close(fd), da__staged_cleanup(sf, 1);
  if (f) st->n++;
  return f;
}

/* Close the last temp file open_tmp made, written whole; -1 if it is not (the caller
 * removes what is staged) */
static int finish_file(FILE *f) {
  int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* C identifier from a config's file name: "configs/long-net.json" -> "long_net". */
void da__bundle_ident(const char *path, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = 0;
  for (const char *p = base; *p && *p != '.' && n + 1 < cap; p++)
    out[n++] = (char)(isalnum((unsigned char)*p) ? *p : '_');
  out[n] = '\0';
  if (!n || isdigit((unsigned char)out[0])) {
    memmove(out + 1, out, n + 1 < cap ? n + 1 : cap - 1);
    out[0] = 'k';
  }
}

static int write_manifest(const char *dir, const char *name, const da__bundle_item *items, int n, const char *nvrtc,
                          staged_t *st) {
  json_t *root = json_object(), *ks = json_array();
  json_object_set_new(root, "format", json_string("dilattn-bundle"));
  json_object_set_new(root, "schema", json_integer(DA_CACHE_SCHEMA_VERSION));
  json_object_set_new(root, "library", json_string(DA_VERSION_STRING));
  json_object_set_new(root, "nvrtc", nvrtc ? json_string(nvrtc) : json_null());
  json_object_set_new(root, "name", json_string(name));
  for (int i = 0; i < n; i++) {
    const da__bundle_item *it = &items[i];
    json_t *k = json_object(), *arts = json_array();
    json_object_set_new(k, "kernel", json_string(it->kernel));
    json_object_set_new(k, "config_file", json_string(it->config_path));
    json_object_set_new(k, "config", json_loads(it->spec_json, 0, NULL));
    json_object_set_new(k, "source_key", json_string(it->source_key));
    json_object_set_new(k, "source", json_string(it->source_file));
    json_object_set_new(k, "target", json_string(it->target));
    for (int a = 0; a < it->nart; a++) {
      json_t *o = json_object();
      json_object_set_new(o, "arch", json_string(it->art[a].arch));
      json_object_set_new(o, "key", json_string(it->art[a].key));
      json_object_set_new(o, "file", json_string(it->art[a].file));
      json_object_set_new(o, "size", json_integer((json_int_t)it->art[a].size));
      json_object_set_new(o, "sha256", json_string(it->art[a].sha256));
      /* a host module's C compiler (CC, options and all): a process whose CC has other
       * options does not take it for its own build (kernel_cache.c accept_host) */
      if (!strcmp(it->art[a].arch, "host")) json_object_set_new(o, "compiler", json_string(da__host_cc()));
      json_array_append_new(arts, o);
    }
    json_object_set_new(k, "artifacts", arts);
    json_array_append_new(ks, k);
  }
  json_object_set_new(root, "kernels", ks);
  char path[4400];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = open_tmp(path, st);
  int rc = -1;
  if (f) {
    rc = json_dumpf(root, f, JSON_INDENT(1) | JSON_SORT_KEYS) == 0 ? 0 : -1;
    fputc('\n', f);
    rc |= finish_file(f);
  }
  json_decref(root);
  return rc;
}

static const char *elem_type(da_dtype t) { return t == DA_DTYPE_FLOAT32 ? "float" : "uint16_t"; }

/* x as a C double literal that reads back exactly: %.17g, with ".0" where that reads as
 * an integer ("-0" is the int 0, and the spec's -0.0 scale became +0.0) */
static const char *dbl(char buf[40], double x) {
  snprintf(buf, 40, "%.17g", x);
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  return buf;
}

static void write_spec_init(FILE *f, const da_spec *s) {
  char num[40];
  fprintf(f, "  da_spec_init(s);\n  s->num_branches = %d;\n", s->num_branches);
  for (int i = 0; i < s->num_branches; i++)
    fprintf(f, "  s->segment_lengths[%d] = %lld; s->dilation_rates[%d] = %lld;\n", i, (long long)s->segment_lengths[i],
            i, (long long)s->dilation_rates[i]);
  fprintf(f, "  s->mode = (da_mode)%d; s->offsets = (da_offsets)%d; s->causal = %d;\n", s->mode, s->offsets, s->causal);
  if (s->has_scale) fprintf(f, "  s->has_scale = 1; s->scale = %s;\n", dbl(num, s->scale));
  fprintf(f, "  s->num_heads = %d; s->num_kv_heads = %d; s->head_dim = %d; s->dtype = (da_dtype)%d;\n", s->num_heads,
          s->num_kv_heads, s->head_dim, s->dtype);
  const da_sparsity *sp = &s->sparsity;
  if (sp->layout != DA_LAYOUT_NONE) {
    fprintf(f, "  s->sparsity.layout = (da_layout)%d; s->sparsity.block = %lld; s->sparsity.window = %lld;\n",
            sp->layout, (long long)sp->block, (long long)sp->window);
    fprintf(f, "  s->sparsity.global = %lld; s->sparsity.num_strides = %d; s->sparsity.seed = %lluull;\n",
            (long long)sp->global, sp->num_strides, (unsigned long long)sp->seed);
    fprintf(f, "  s->sparsity.density = %s;\n", dbl(num, sp->density));
    for (int j = 0; j < sp->num_strides; j++) fprintf(f, "  s->sparsity.strides[%d] = %lld;\n", j, (long long)sp->strides[j]);
  }
}

static int write_header(const char *dir, const char *name, const da__bundle_item *items, int n, staged_t *st) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s.h", dir, name);
  FILE *f = open_tmp(path, st);
  if (!f) return -1;
  fprintf(f, "/* %s.h - generated by dilattn %s (`dilattn gen --bundle %s`): one typed entry point per\n"
             " * config. %s_<config>_plan registers the bundle's compiled kernels with the context (once)\n"
             " * and creates the plan; %s_<config>_run executes it on contiguous tensors. Do not edit. */\n",
          name, DA_VERSION_STRING, name, name, name);
  fprintf(f, "#ifndef %s_DILATTN_BUNDLE_H\n#define %s_DILATTN_BUNDLE_H\n\n#include <dilattn.h>\n#include <stdint.h>\n#include <string.h>\n\n", name, name);
  fprintf(f, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(f, "/* Register this bundle's compiled kernels with ctx (idempotent). Defined in %s_bundle.c. */\n", name);
  fprintf(f, "da_status %s_register(da_context *ctx);\n\n", name);
  for (int i = 0; i < n; i++) {
    const da__bundle_item *it = &items[i];
    if (!it->entry) continue; /* another kernel of the config before it (gen --mma auto) */
    char id[200];
    da__bundle_ident(it->config_path, id, sizeof id);
    const char *T = elem_type(it->spec.dtype);
    fprintf(f, "/* %s: %s\n * kernel %s", it->config_path, it->spec_json, it->kernel);
    for (int j = i + 1; j < n && !items[j].entry; j++) fprintf(f, ",\n *        %s", items[j].kernel);
    fprintf(f, " */\n");
    fprintf(f, "static inline void %s_%s_spec(da_spec *s) {\n", name, id);
    write_spec_init(f, &it->spec);
    fprintf(f, "}\n\n");
    const int host = !strcmp(it->target, "host");
    if (host) /* (AUTO took the GPU on a machine with one: a JIT-compiled CUDA plan handed the
                 host arrays _run takes, an illegal address) */
      fprintf(f, "/* A host bundle: DA_BACKEND_AUTO is the host backend here (_run takes host arrays) */\n");
    fprintf(f, "static inline da_status %s_%s_plan(da_context *ctx, da_backend backend, da_plan **out) {\n"
               "  da_status st = %s_register(ctx);\n  if (st != DA_OK) return st;\n  da_spec s;\n  %s_%s_spec(&s);\n",
            name, id, name, name, id);
    if (host) fprintf(f, "  if (backend == DA_BACKEND_AUTO) backend = DA_BACKEND_HOST;\n");
    if (it->cuda_mma) /* the instruction the bundled CUDA kernels were rendered for (gen --mma; 1: mma.sync), so
                         DILATTN_CUDA_MMA or the tuning database cannot send the plan past them */
      fprintf(f, "  da_plan_options o;\n  memset(&o, 0, sizeof o);\n  o.cuda_mma = %d;\n"
                 "  return da_plan_create_ex(ctx, &s, backend, &o, out);\n}\n\n", it->cuda_mma);
    else
      fprintf(f, "  return da_plan_create(ctx, &s, backend, out);\n}\n\n");
    fprintf(f, "/* q, out: [batch, seq_len, %d, %d]; k, v: [batch, seq_len, %d, %d]; lse: [batch, %d, seq_len] or NULL */\n",
            it->spec.num_heads, it->spec.head_dim, it->spec.num_kv_heads, it->spec.head_dim, it->spec.num_heads);
    fprintf(f, "static inline da_status %s_%s_run(da_plan *plan, int64_t batch, int64_t seq_len, const %s *q,\n"
               "    const %s *k, const %s *v, %s *out, float *lse, void *stream) {\n"
               "  da_spec s;\n  %s_%s_spec(&s);\n  da_args a;\n  da_args_init(&a, &s, batch, seq_len, q, k, v, out, lse);\n"
               "  a.stream = stream;\n  return da_plan_execute(plan, &a);\n}\n\n",
            name, id, T, T, T, T, name, id);
  }
  fprintf(f, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
  return finish_file(f);
}

/* mpath: the manifest's staged temp file (embedded as text) */
static int write_data(const char *dir, const char *name, const da__bundle_item *items, int n, const char *mpath,
                      staged_t *st) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s_bundle.c", dir, name);
  FILE *m = fopen(mpath, "rb");
  if (!m) return -1;
  FILE *f = open_tmp(path, st);
  if (!f) {
    fclose(m);
    return -1;
  }
  fprintf(f, "/* %s_bundle.c - generated by dilattn %s: the compiled kernels of bundle %s and its\n"
             " * manifest, linked into the program; %s_register() hands them to a context. */\n",
          name, DA_VERSION_STRING, name, name);
  /* the manifest as character codes, not a string literal: one past the 4095 characters a
   * C99 compiler must take (-Woverlength-strings under -pedantic: -Werror projects failed) */
  fprintf(f, "#include <dilattn.h>\n#include <stddef.h>\n\nstatic const unsigned char manifest[] = {");
  int c;
  size_t mlen = 0;
  for (; (c = fgetc(m)) != EOF; mlen++) fprintf(f, "%s%d", mlen == 0 ? "\n  " : (mlen % 24) ? "," : ",\n  ", c);
  fclose(m);
  fprintf(f, "%s0};\n\n", mlen ? "," : "");
  int count = 0;
  for (int i = 0; i < n; i++)
    for (int a = 0; a < items[i].nart; a++) {
      fprintf(f, "static const unsigned char art_%d[] = {", count);
      const size_t size = items[i].art[a].size;
      for (size_t k = 0; k < size; k++)
        fprintf(f, "%s%d", k == 0 ? "\n  " : (k % 24) ? "," : ",\n  ", items[i].art[a].data[k]);
      fprintf(f, "%s0}; /* %zu bytes and a terminator */\n", size ? "," : "", size);
      count++;
    }
  fprintf(f, "\nstatic const char *const files[] = {");
  for (int i = 0; i < n; i++)
    for (int a = 0; a < items[i].nart; a++) fprintf(f, "\"%s\", ", items[i].art[a].file);
  fprintf(f, "NULL};\nstatic const unsigned char *const data[] = {");
  for (int i = 0; i < count; i++) fprintf(f, "art_%d, ", i);
  fprintf(f, "NULL};\nstatic const size_t sizes[] = {");
  for (int i = 0; i < n; i++)
    for (int a = 0; a < items[i].nart; a++) fprintf(f, "%zu, ", items[i].art[a].size);
  fprintf(f, "0};\n\n");
  /* (C linkage where the file is compiled as C++ or CUDA: a project without C,
   * dilattn_add_kernels) */
  fprintf(f, "#ifdef __cplusplus\nextern \"C\"\n#endif\n"
             "da_status %s_register(da_context *ctx); /* (NAME.h's; -Wmissing-prototypes) */\n"
             "#ifdef __cplusplus\nextern \"C\"\n#endif\n"
             "da_status %s_register(da_context *ctx) {\n"
             "  static const da_bundle_data bundle = {\"%s\", (const char *)manifest, %zu, %d, files, data, sizes};\n"
             "  return da_context_register_bundle_data(ctx, &bundle);\n}\n",
          name, name, name, mlen, count);
  return finish_file(f);
}

int da__bundle_write(const char *dir, const char *name, const da__bundle_item *items, int n, const char *nvrtc,
                     da__staged_file out[3]) {
  staged_t st = {.f = out, .n = 0};
  int rc = write_manifest(dir, name, items, n, nvrtc, &st);
  if (rc == 0) rc = write_header(dir, name, items, n, &st);
  if (rc == 0) rc = write_data(dir, name, items, n, out[0].tmp, &st);
  if (rc != 0) {
    const int e = errno ? errno : EIO;
    da__staged_cleanup(out, st.n);
    errno = e;
  }
  return rc;
}
