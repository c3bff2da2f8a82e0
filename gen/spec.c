/* spec.c - the spec struct's defaults, its validator (every rule of SEMANTICS.md, the
 * message naming field and value), the config JSON parser (unknown fields rejected) and
 * the canonical JSON that banners and cache keys hold. */
#include "gen/render.h"
#include "runtime/internal.h"
#include "runtime/log.h"

#include <jansson.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest segment length / block / stride accepted: keeps every index product within
 * int64 for any N the runtime accepts (N <= 2^40). */
#define DA_MAX_EXTENT ((int64_t)1 << 40)

void da_spec_init(da_spec *spec) {
  memset(spec, 0, sizeof *spec);
  spec->mode = DA_MODE_LONGNET;
  spec->offsets = DA_OFFSETS_MOD;
  spec->num_heads = 1;
  spec->num_kv_heads = 0; /* unset: 1 with one head, else refused (da__spec_resolved) */
  spec->head_dim = 64;
  spec->dtype = DA_DTYPE_FLOAT32;
  spec->sparsity.layout = DA_LAYOUT_NONE;
  spec->sparsity.block = 1;
}

static da_status fail(char *msg, size_t cap, da_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static da_status fail(char *msg, size_t cap, da_status st, const char *fmt, ...) {
  if (msg && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
  }
  return st;
}

#define BAD(...) return fail(msg, cap, DA_ERR_INVALID_SPEC, __VA_ARGS__)

const da_spec *da__spec_resolved(const da_spec *s, da_spec *tmp) {
  if (!s || s->num_kv_heads != 0 || s->num_heads != 1) return s;
  *tmp = *s;
  tmp->num_kv_heads = 1;
  return tmp;
}

static const char *layout_names[] = {"none",           "dense",  "local_window", "global_local",
                                     "dilated_sparse", "random", "explicit"};

da_status da_spec_validate(const da_spec *s, char *msg, size_t cap) {
  if (msg && cap) msg[0] = '\0';
  if (!s) return fail(msg, cap, DA_ERR_INVALID_ARGUMENT, "spec is NULL");
  da_spec resolved;
  s = da__spec_resolved(s, &resolved);
  if (s->num_branches < 1 || s->num_branches > DA_MAX_BRANCHES)
    BAD("segment_lengths: %d branches given, need 1 to %d", s->num_branches, DA_MAX_BRANCHES);
  for (int i = 0; i < s->num_branches; i++) {
    int64_t w = s->segment_lengths[i], r = s->dilation_rates[i];
    if (w < 1 || w > DA_MAX_EXTENT)
      BAD("segment_lengths[%d]: %lld is out of range (1 to 2^40)", i, (long long)w);
    if (r < 1) BAD("dilation_rates[%d]: %lld must be at least 1", i, (long long)r);
    if (r > w)
      BAD("dilation_rates[%d]: %lld is larger than segment_lengths[%d] = %lld", i, (long long)r,
          i, (long long)w);
  }
  if (s->mode != DA_MODE_LONGNET && s->mode != DA_MODE_GROUPED)
    BAD("mode: %d is not longnet (0) or grouped (1)", (int)s->mode);
  if (s->offsets != DA_OFFSETS_MOD && s->offsets != DA_OFFSETS_BLOCK)
    BAD("offsets: %d is not mod (0) or block (1)", (int)s->offsets);
  if (s->causal != 0 && s->causal != 1) BAD("causal: %d is not 0 or 1", s->causal);
  if (s->has_scale && !isfinite(s->scale)) BAD("scale: %g is not a finite number", s->scale);
  /* the kernels hold it as a float32 (beyond, it was inf there and every output NaN) */
  /* beyond what rounds to FLT_MAX (numpy's float32 max, 3.4028235e38, does): a float32
   * infinity (compared as doubles: converting an out-of-range double to float is undefined) */
  if (s->has_scale && fabs(s->scale) >= (double)FLT_MAX + ldexp(1.0, 103))
    BAD("scale: %.9g is beyond float32's range (|scale| <= %.9g: the kernels compute the scores in float32)",
        s->scale, (double)FLT_MAX);
  if (s->num_heads < 1 || s->num_heads > DA_MAX_HEADS)
    BAD("num_heads: %d is out of range (1 to %d)", s->num_heads, DA_MAX_HEADS);
  /* (da_spec_init's 1 let `num_heads = 8` alone read 8-head k and v as one head's: a
   * silent wrong answer) */
  if (s->num_kv_heads == 0)
    BAD("num_kv_heads: unset (0, as da_spec_init leaves it) with num_heads = %d: set it to num_heads for "
        "multi-head attention, to the k and v heads' count for grouped-query or multi-query attention",
        s->num_heads);
  if (s->num_kv_heads < 1 || s->num_kv_heads > s->num_heads)
    BAD("num_kv_heads: %d is out of range (1 to num_heads = %d)", s->num_kv_heads, s->num_heads);
  if (s->num_heads % s->num_kv_heads != 0)
    BAD("num_kv_heads: num_heads = %d is not a multiple of num_kv_heads = %d", s->num_heads,
        s->num_kv_heads);
  if (s->head_dim < 1 || s->head_dim > DA_MAX_HEAD_DIM)
    BAD("head_dim: %d is out of range (1 to %d)", s->head_dim, DA_MAX_HEAD_DIM);
  if (s->dtype != DA_DTYPE_FLOAT32 && s->dtype != DA_DTYPE_FLOAT16 &&
      s->dtype != DA_DTYPE_BFLOAT16)
    BAD("dtype: %d is not float32 (0), float16 (1) or bfloat16 (2)", (int)s->dtype);

  const da_sparsity *sp = &s->sparsity;
  if ((int)sp->layout < DA_LAYOUT_NONE || sp->layout > DA_LAYOUT_EXPLICIT)
    BAD("sparsity.layout: %d is not a known layout", (int)sp->layout);
  if (sp->layout == DA_LAYOUT_NONE) return DA_OK;
  const char *ln = layout_names[sp->layout];
  if (sp->block < 1 || sp->block > DA_MAX_EXTENT)
    BAD("sparsity.block: %lld is out of range (1 to 2^40) for layout '%s'", (long long)sp->block,
        ln);
  if ((sp->layout == DA_LAYOUT_LOCAL_WINDOW || sp->layout == DA_LAYOUT_GLOBAL_LOCAL) &&
      (sp->window < 0 || sp->window > DA_MAX_EXTENT))
    BAD("sparsity.window: %lld is out of range (0 to 2^40)", (long long)sp->window);
  if (sp->layout == DA_LAYOUT_GLOBAL_LOCAL && (sp->global < 0 || sp->global > DA_MAX_EXTENT))
    BAD("sparsity.global: %lld is out of range (0 to 2^40)", (long long)sp->global);
  if (sp->layout == DA_LAYOUT_DILATED_SPARSE) {
    if (sp->num_strides < 0 || sp->num_strides > DA_MAX_STRIDES)
      BAD("sparsity.strides: %d strides given, at most %d", sp->num_strides, DA_MAX_STRIDES);
    for (int j = 0; j < sp->num_strides; j++)
      if (sp->strides[j] < 1 || sp->strides[j] > DA_MAX_EXTENT)
        BAD("sparsity.strides[%d]: %lld is out of range (1 to 2^40)", j, (long long)sp->strides[j]);
  }
  if (sp->layout == DA_LAYOUT_RANDOM && !(sp->density >= 0.0 && sp->density <= 1.0))
    BAD("sparsity.density: %g is not in [0, 1]", sp->density);
  if (sp->layout == DA_LAYOUT_EXPLICIT)
    for (int i = 0; i < s->num_branches; i++) {
      const int64_t nb = da_spec_explicit_blocks(s, i);
      if (!sp->explicit_masks[i])
        BAD("sparsity.explicit_masks[%d]: NULL; the explicit layout needs one %lld x %lld mask per "
            "branch",
            i, (long long)nb, (long long)nb);
      if (nb > DA_MAX_EXPLICIT_BLOCKS)
        BAD("sparsity.block: %lld makes branch %d's explicit mask %lld x %lld blocks (at most %d a side: "
            "take a larger block)",
            (long long)sp->block, i, (long long)nb, (long long)nb, DA_MAX_EXPLICIT_BLOCKS);
    }
  return DA_OK;
}

int64_t da_spec_explicit_blocks(const da_spec *s, int i) {
  if (!s || i < 0 || i >= s->num_branches || i >= DA_MAX_BRANCHES || s->sparsity.block < 1) return -1;
  int64_t w = s->segment_lengths[i], r = s->dilation_rates[i], b = s->sparsity.block;
  if (w < 1 || r < 1) return -1;
  int64_t len = w / r + (w % r != 0); /* ceilings without overflow, whatever the values */
  return len / b + (len % b != 0);
}

/* ---- JSON config -------------------------------------------------------------------- */

#define PARSE_BAD(...) return fail(msg, cap, DA_ERR_PARSE, __VA_ARGS__)

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number with a fraction";
  case JSON_TRUE: return "true";
  case JSON_FALSE: return "false";
  default: return "null";
  }
}

static da_status get_int(const json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                         char *msg, size_t cap) {
  if (json_is_real(v)) { /* 16.0 or 1e1 (a float from a script, say): a JSON real, not an integer */
    char num[40];
    snprintf(num, sizeof num, "%.17g", json_real_value(v));
    if (!strpbrk(num, ".eEin")) strcat(num, ".0"); /* 2.0 printed as 2 would hide what was wrong */
    PARSE_BAD("%s: expected an integer, got the real number %s (write it without a decimal point or exponent)", field,
              num);
  }
  if (!json_is_integer(v)) PARSE_BAD("%s: expected an integer, got %s", field, json_kind(v));
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return fail(msg, cap, DA_ERR_INVALID_SPEC, "%s: %lld is out of range (%lld to %lld)", field,
                (long long)x, (long long)lo, (long long)hi);
  *out = (int64_t)x;
  return DA_OK;
}

static da_status get_int_list(const json_t *v, const char *field, int max_len, int64_t lo,
                              int64_t hi, int64_t *out, int *n, char *msg, size_t cap) {
  if (!json_is_array(v)) PARSE_BAD("%s: expected an array of integers, got %s", field, json_kind(v));
  size_t len = json_array_size(v);
  if ((int64_t)len > max_len)
    return fail(msg, cap, DA_ERR_INVALID_SPEC, "%s: %zu entries, at most %d", field, len, max_len);
  for (size_t i = 0; i < len; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s[%zu]", field, i);
    da_status st = get_int(json_array_get(v, i), name, lo, hi, &out[i], msg, cap);
    if (st != DA_OK) return st;
  }
  *n = (int)len;
  return DA_OK;
}

static da_status get_choice(const json_t *v, const char *field, const char *const *names, int count,
                            int *out, char *msg, size_t cap) {
  if (!json_is_string(v)) PARSE_BAD("%s: expected a string, got %s", field, json_kind(v));
  const char *s = json_string_value(v);
  for (int i = 0; i < count; i++)
    if (names[i] && strcmp(s, names[i]) == 0) {
      *out = i;
      return DA_OK;
    }
  char opts[256] = "";
  for (int i = 0; i < count; i++)
    if (names[i]) {
      strncat(opts, opts[0] ? "|" : "", sizeof opts - strlen(opts) - 1);
      strncat(opts, names[i], sizeof opts - strlen(opts) - 1);
    }
  return fail(msg, cap, DA_ERR_INVALID_SPEC, "%s: \"%.64s\" is not one of %s", field, s, opts);
}

static da_status parse_sparsity(const json_t *o, da_spec *s, char *msg, size_t cap) {
  if (!json_is_object(o)) PARSE_BAD("sparsity: expected an object, got %s", json_kind(o));
  da_sparsity *sp = &s->sparsity;
  const json_t *lay = json_object_get(o, "layout");
  if (!lay) PARSE_BAD("sparsity.layout: missing (one of dense|local_window|global_local|"
                      "dilated_sparse|random|explicit)");
  static const char *const names[] = {NULL,           "dense",  "local_window", "global_local",
                                      "dilated_sparse", "random", "explicit"};
  int layout = 0;
  da_status st = get_choice(lay, "sparsity.layout", names, 7, &layout, msg, cap);
  if (st != DA_OK) return st;
  sp->layout = (da_layout)layout;
  /* Which fields each layout takes; a field the layout does not use is an error rather
   * than silently ignored. */
  int wants_block = layout != DA_LAYOUT_DENSE, wants_window = layout == DA_LAYOUT_LOCAL_WINDOW ||
                                                             layout == DA_LAYOUT_GLOBAL_LOCAL;
  int wants_global = layout == DA_LAYOUT_GLOBAL_LOCAL, wants_strides = layout == DA_LAYOUT_DILATED_SPARSE;
  int wants_random = layout == DA_LAYOUT_RANDOM;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)o, key, v) {
    int allowed = !strcmp(key, "layout") || (!strcmp(key, "block") && (wants_block || layout == DA_LAYOUT_DENSE)) ||
                  (!strcmp(key, "window") && wants_window) ||
                  (!strcmp(key, "global") && wants_global) ||
                  (!strcmp(key, "strides") && wants_strides) ||
                  ((!strcmp(key, "seed") || !strcmp(key, "density")) && wants_random);
    if (allowed) continue;
    int known = !strcmp(key, "block") || !strcmp(key, "window") || !strcmp(key, "global") ||
                !strcmp(key, "strides") || !strcmp(key, "seed") || !strcmp(key, "density");
    if (known)
      PARSE_BAD("sparsity.%.64s: not used by layout '%s'", key, names[layout]);
    PARSE_BAD("sparsity.%.64s: unknown field (known: layout, block, window, global, strides, "
              "seed, density)",
              key);
  }
  if ((v = json_object_get(o, "block"))) {
    if ((st = get_int(v, "sparsity.block", 1, DA_MAX_EXTENT, &sp->block, msg, cap))) return st;
  } else if (wants_block) {
    PARSE_BAD("sparsity.block: missing (layout '%s' needs a block size)", names[layout]);
  }
  if (wants_window) {
    if (!(v = json_object_get(o, "window"))) PARSE_BAD("sparsity.window: missing");
    if ((st = get_int(v, "sparsity.window", 0, DA_MAX_EXTENT, &sp->window, msg, cap))) return st;
  }
  if (wants_global) {
    if (!(v = json_object_get(o, "global"))) PARSE_BAD("sparsity.global: missing");
    if ((st = get_int(v, "sparsity.global", 0, DA_MAX_EXTENT, &sp->global, msg, cap))) return st;
  }
  if (wants_strides) {
    if (!(v = json_object_get(o, "strides"))) PARSE_BAD("sparsity.strides: missing");
    if ((st = get_int_list(v, "sparsity.strides", DA_MAX_STRIDES, 1, DA_MAX_EXTENT, sp->strides,
                           &sp->num_strides, msg, cap)))
      return st;
  }
  if (wants_random) {
    int64_t seed;
    if (!(v = json_object_get(o, "seed"))) PARSE_BAD("sparsity.seed: missing");
    /* a uint64: 0 .. 2^63 - 1 as written, and negative numbers as the bit pattern of the
     * seeds above (what da_spec_to_json writes for them, so its JSON reads back) */
    if ((st = get_int(v, "sparsity.seed", INT64_MIN, INT64_MAX, &seed, msg, cap))) return st;
    sp->seed = (uint64_t)seed;
    if (!(v = json_object_get(o, "density"))) PARSE_BAD("sparsity.density: missing");
    if (!json_is_number(v))
      PARSE_BAD("sparsity.density: expected a number, got %s", json_kind(v));
    sp->density = json_number_value(v);
  }
  if (layout == DA_LAYOUT_EXPLICIT)
    return fail(msg, cap, DA_ERR_INVALID_SPEC,
                "sparsity.layout: 'explicit' masks are given through the C API "
                "(da_sparsity.explicit_masks), not a config file");
  return DA_OK;
}

/* Whether the number that ends at byte end of a JSON text is the value of a "seed" member
 * (a too-big integer's hint is the seed's only there) */
static int value_of_seed(const char *text, size_t end) {
  size_t i = end;
  while (i > 0 && text[i - 1] != ':' && text[i - 1] != ',' && text[i - 1] != '{' && text[i - 1] != '[') i--;
  if (i == 0 || text[i - 1] != ':') return 0;
  i--;
  while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n' || text[i - 1] == '\r')) i--;
  return i >= 6 && !memcmp(text + i - 6, "\"seed\"", 6);
}

da_status da_spec_from_json(const char *text, size_t len, da_spec *out, char *msg, size_t cap) {
  if (msg && cap) msg[0] = '\0';
  if (!text || !out) return fail(msg, cap, DA_ERR_INVALID_ARGUMENT, "text or spec is NULL");
  json_error_t jerr;
  if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) text += 3, len -= 3; /* a UTF-8 byte-order mark (RFC 8259: may be ignored) */
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return fail(msg, cap, DA_ERR_PARSE, "line %d, column %d: %s%s", jerr.line, jerr.column,
                strstr(jerr.text, "JSON_ALLOW_NUL") ? "a \\u0000 (NUL) character in a string" : jerr.text,
                !strstr(jerr.text, "too big integer") ? ""
                : value_of_seed(text, (size_t)jerr.position < len ? (size_t)jerr.position : len)
                    ? " (integers are 64-bit signed: a sparsity.seed from 2^63 is written as its negative int64 "
                      "pattern, seed - 2^64)"
                    : " (integers are 64-bit signed)");
  da_spec s;
  da_spec_init(&s);
  da_status st = DA_OK;
  int64_t x;
  int n_w = -1, n_r = -1;
  const char *key;
  json_t *v;
  static const char *const modes[] = {"longnet", "grouped"};
  static const char *const offs[] = {"mod", "block"};
  static const char *const dtypes[] = {"float32", "float16", "bfloat16"};
  int have_heads = 0, have_kv = 0, have_dim = 0, choice;
  if (!json_is_object(root)) {
    st = fail(msg, cap, DA_ERR_PARSE, "config: expected a JSON object, got %s", json_kind(root));
    goto done;
  }
#define CHECK(expr)                  \
  if ((st = (expr)) != DA_OK) goto done
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "segment_lengths")) {
      CHECK(get_int_list(v, "segment_lengths", DA_MAX_BRANCHES, 1, DA_MAX_EXTENT, s.segment_lengths,
                         &n_w, msg, cap));
    } else if (!strcmp(key, "dilation_rates")) {
      CHECK(get_int_list(v, "dilation_rates", DA_MAX_BRANCHES, 1, DA_MAX_EXTENT, s.dilation_rates,
                         &n_r, msg, cap));
    } else if (!strcmp(key, "mode")) {
      CHECK(get_choice(v, "mode", modes, 2, &choice, msg, cap));
      s.mode = (da_mode)choice;
    } else if (!strcmp(key, "offsets")) {
      CHECK(get_choice(v, "offsets", offs, 2, &choice, msg, cap));
      s.offsets = (da_offsets)choice;
    } else if (!strcmp(key, "causal")) {
      if (!json_is_boolean(v)) {
        st = fail(msg, cap, DA_ERR_PARSE, "causal: expected true or false, got %s", json_kind(v));
        goto done;
      }
      s.causal = json_is_true(v);
    } else if (!strcmp(key, "scale")) {
      if (json_is_null(v)) {
        s.has_scale = 0;
      } else if (json_is_number(v)) {
        s.has_scale = 1;
        s.scale = json_number_value(v);
      } else {
        st = fail(msg, cap, DA_ERR_PARSE, "scale: expected a number or null, got %s", json_kind(v));
        goto done;
      }
    } else if (!strcmp(key, "num_heads")) {
      CHECK(get_int(v, "num_heads", 1, DA_MAX_HEADS, &x, msg, cap));
      s.num_heads = (int)x;
      have_heads = 1;
    } else if (!strcmp(key, "num_kv_heads")) {
      CHECK(get_int(v, "num_kv_heads", 1, DA_MAX_HEADS, &x, msg, cap));
      s.num_kv_heads = (int)x;
      have_kv = 1;
    } else if (!strcmp(key, "head_dim")) {
      CHECK(get_int(v, "head_dim", 1, DA_MAX_HEAD_DIM, &x, msg, cap));
      s.head_dim = (int)x;
      have_dim = 1;
    } else if (!strcmp(key, "dtype")) {
      CHECK(get_choice(v, "dtype", dtypes, 3, &choice, msg, cap));
      s.dtype = (da_dtype)choice;
    } else if (!strcmp(key, "sparsity")) {
      if (!json_is_null(v)) CHECK(parse_sparsity(v, &s, msg, cap));
    } else {
      st = fail(msg, cap, DA_ERR_PARSE,
                "%.64s: unknown field (known: segment_lengths, dilation_rates, mode, offsets, "
                "causal, scale, num_heads, num_kv_heads, head_dim, dtype, sparsity)",
                key);
      goto done;
    }
  }
#undef CHECK
  if (n_w < 0) st = fail(msg, cap, DA_ERR_PARSE, "segment_lengths: missing");
  else if (n_r < 0) st = fail(msg, cap, DA_ERR_PARSE, "dilation_rates: missing");
  else if (!have_heads) st = fail(msg, cap, DA_ERR_PARSE, "num_heads: missing");
  else if (!have_dim) st = fail(msg, cap, DA_ERR_PARSE, "head_dim: missing");
  else if (n_w != n_r)
    st = fail(msg, cap, DA_ERR_INVALID_SPEC,
              "dilation_rates: %d entr%s but segment_lengths has %d; one rate per segment length",
              n_r, n_r == 1 ? "y" : "ies", n_w);
  if (st != DA_OK) goto done;
  s.num_branches = n_w;
  if (!have_kv) s.num_kv_heads = s.num_heads;
  st = da_spec_validate(&s, msg, cap);
  if (st == DA_OK) *out = s;
  /* valid, but not what a config that asks for it may expect (SEMANTICS: grouped mode takes
   * no offsets field; group g's offset is g % r_g) */
  if (st == DA_OK && s.mode == DA_MODE_GROUPED && s.offsets == DA_OFFSETS_BLOCK)
    da__log(DA_LOG_WARN, "offsets \"block\" has no effect in grouped mode: group g takes offset g %% r_g");
done:
  json_decref(root);
  return st;
}

/* ---- canonical JSON ------------------------------------------------------------------ */

static json_t *int_list(const int64_t *v, int n) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
  return a;
}

char *da_spec_to_json(const da_spec *s) {
  da_spec resolved;
  s = da__spec_resolved(s, &resolved);
  /* what JSON cannot say of it: NULL, not the JSON of another spec */
  if (!s || s->num_branches < 0 || s->num_branches > DA_MAX_BRANCHES || (unsigned)s->mode > 1u ||
      (unsigned)s->offsets > 1u || (unsigned)s->dtype > 2u || (unsigned)s->sparsity.layout > DA_LAYOUT_EXPLICIT ||
      (s->has_scale && !isfinite(s->scale)) ||
      (s->sparsity.layout == DA_LAYOUT_DILATED_SPARSE &&
       (s->sparsity.num_strides < 0 || s->sparsity.num_strides > DA_MAX_STRIDES)) ||
      (s->sparsity.layout == DA_LAYOUT_RANDOM && !isfinite(s->sparsity.density)))
    return NULL;
  static const char *const modes[] = {"longnet", "grouped"};
  static const char *const offs[] = {"mod", "block"};
  static const char *const dtypes[] = {"float32", "float16", "bfloat16"};
  int nb = s->num_branches < 0 ? 0 : s->num_branches > DA_MAX_BRANCHES ? DA_MAX_BRANCHES : s->num_branches;
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "segment_lengths", int_list(s->segment_lengths, nb));
  json_object_set_new(o, "dilation_rates", int_list(s->dilation_rates, nb));
  json_object_set_new(o, "mode", json_string(modes[s->mode == DA_MODE_GROUPED]));
  json_object_set_new(o, "offsets", json_string(offs[s->offsets == DA_OFFSETS_BLOCK]));
  json_object_set_new(o, "causal", json_boolean(s->causal));
  json_object_set_new(o, "scale", s->has_scale ? json_real(s->scale) : json_null());
  json_object_set_new(o, "num_heads", json_integer(s->num_heads));
  json_object_set_new(o, "num_kv_heads", json_integer(s->num_kv_heads));
  json_object_set_new(o, "head_dim", json_integer(s->head_dim));
  json_object_set_new(o, "dtype", json_string(dtypes[(unsigned)s->dtype < 3 ? s->dtype : 0]));
  const da_sparsity *sp = &s->sparsity;
  if (sp->layout > DA_LAYOUT_NONE && sp->layout <= DA_LAYOUT_EXPLICIT) {
    json_t *so = json_object();
    json_object_set_new(so, "layout", json_string(layout_names[sp->layout]));
    if (sp->layout != DA_LAYOUT_DENSE) json_object_set_new(so, "block", json_integer(sp->block));
    if (sp->layout == DA_LAYOUT_LOCAL_WINDOW || sp->layout == DA_LAYOUT_GLOBAL_LOCAL)
      json_object_set_new(so, "window", json_integer(sp->window));
    if (sp->layout == DA_LAYOUT_GLOBAL_LOCAL) json_object_set_new(so, "global", json_integer(sp->global));
    if (sp->layout == DA_LAYOUT_DILATED_SPARSE) {
      int ns = sp->num_strides < 0 ? 0 : sp->num_strides > DA_MAX_STRIDES ? DA_MAX_STRIDES : sp->num_strides;
      json_object_set_new(so, "strides", int_list(sp->strides, ns));
    }
    if (sp->layout == DA_LAYOUT_RANDOM) {
      /* seeds above 2^63 are written as their int64 bit pattern */
      json_object_set_new(so, "seed", json_integer((json_int_t)sp->seed));
      json_object_set_new(so, "density", json_real(sp->density));
    }
    json_object_set_new(o, "sparsity", so);
  }
  char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(o);
  return text;
}
