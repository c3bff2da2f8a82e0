/* test_spec.c - the spec validator and the config parser: every rule of SEMANTICS.md
 * rejected with a message naming the field and the value; malformed JSON, unknown
 * fields, wrong types, missing fields; canonical JSON round trip.
 * Run: build/tests/test_spec   (ctest -R spec) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static da_spec good(void) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 2;
  s.segment_lengths[0] = 8;
  s.segment_lengths[1] = 16;
  s.dilation_rates[0] = 1;
  s.dilation_rates[1] = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  return s;
}

#define BAD_SPEC(mutation, needle)                                                   \
  do {                                                                               \
    da_spec s = good();                                                              \
    mutation;                                                                        \
    char m[512];                                                                     \
    da_status st = da_spec_validate(&s, m, sizeof m);                                \
    TU_CHECK(st == DA_ERR_INVALID_SPEC && strstr(m, needle), "%s: got %s '%s'", #mutation, \
             da_status_name(st), m);                                                 \
  } while (0)

static void test_validate(void) {
  da_spec s = good();
  char m[512];
  TU_CHECK(da_spec_validate(&s, m, sizeof m) == DA_OK, "good spec rejected: %s", m);
  TU_CHECK(da_spec_validate(NULL, m, sizeof m) == DA_ERR_INVALID_ARGUMENT, "NULL spec");
  BAD_SPEC(s.num_branches = 0, "segment_lengths: 0 branches");
  BAD_SPEC(s.num_branches = 17, "17 branches");
  BAD_SPEC(s.segment_lengths[1] = 0, "segment_lengths[1]: 0");
  BAD_SPEC(s.dilation_rates[0] = 0, "dilation_rates[0]: 0");
  BAD_SPEC(s.dilation_rates[1] = 17, "dilation_rates[1]: 17 is larger than segment_lengths[1] = 16");
  BAD_SPEC(s.num_heads = 0, "num_heads: 0");
  BAD_SPEC(s.num_kv_heads = 3, "num_heads = 4 is not a multiple of num_kv_heads = 3");
  BAD_SPEC(s.num_kv_heads = 8, "num_kv_heads: 8");
  BAD_SPEC(s.head_dim = 0, "head_dim: 0");
  BAD_SPEC(s.head_dim = 4096, "head_dim: 4096");
  BAD_SPEC(s.mode = (da_mode)7, "mode: 7");
  BAD_SPEC(s.offsets = (da_offsets)3, "offsets: 3");
  BAD_SPEC(s.causal = 2, "causal: 2");
  BAD_SPEC((s.has_scale = 1, s.scale = NAN), "scale: nan");
  BAD_SPEC((s.has_scale = 1, s.scale = INFINITY), "scale: inf");
  BAD_SPEC((s.has_scale = 1, s.scale = 1e39), "beyond float32's range"); /* finite, but inf as the kernels' float */
  BAD_SPEC((s.has_scale = 1, s.scale = -1e39), "beyond float32's range");
  BAD_SPEC(s.dtype = (da_dtype)9, "dtype: 9");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, s.sparsity.block = 0), "sparsity.block: 0");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW, s.sparsity.window = -1), "sparsity.window: -1");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_GLOBAL_LOCAL, s.sparsity.global = -2), "sparsity.global: -2");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_DILATED_SPARSE, s.sparsity.num_strides = 1,
            s.sparsity.strides[0] = 0), "sparsity.strides[0]: 0");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_RANDOM, s.sparsity.density = 1.5), "sparsity.density: 1.5");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_RANDOM, s.sparsity.density = NAN), "sparsity.density");
  BAD_SPEC(s.sparsity.layout = DA_LAYOUT_EXPLICIT, "sparsity.explicit_masks[0]: NULL");
  BAD_SPEC(s.sparsity.layout = (da_layout)42, "sparsity.layout: 42");
  /* more strides than the struct holds (the JSON parser's own bound is test_json's) */
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_DILATED_SPARSE, s.sparsity.num_strides = DA_MAX_STRIDES + 1,
            s.sparsity.strides[0] = 1), "sparsity.strides: 17 strides given, at most 16");
  BAD_SPEC((s.sparsity.layout = DA_LAYOUT_DILATED_SPARSE, s.sparsity.num_strides = -1), "sparsity.strides: -1 strides");
  /* w not a multiple of r, r == w, H not divisible by r: all valid */
  s = good();
  s.segment_lengths[1] = 10;
  s.dilation_rates[1] = 3;
  s.num_heads = 5;
  s.num_kv_heads = 5;
  TU_CHECK(da_spec_validate(&s, m, sizeof m) == DA_OK, "valid uneven spec rejected: %s", m);
  s.dilation_rates[1] = 10;
  TU_CHECK(da_spec_validate(&s, m, sizeof m) == DA_OK, "r == w rejected: %s", m);
  TU_CHECK(da_spec_explicit_blocks(&s, 1) == 1 && da_spec_explicit_blocks(&s, 5) == -1, "explicit blocks");
}

static void parse_expect(const char *json, da_status want, const char *needle) {
  da_spec s;
  da_spec_init(&s);
  s.head_dim = 77; /* must stay untouched on error */
  char m[512];
  da_status st = da_spec_from_json(json, strlen(json), &s, m, sizeof m);
  TU_CHECK(st == want && (want == DA_OK || (strstr(m, needle) && s.head_dim == 77)),
           "config %s: got %s '%s', want %s '%s'", json, da_status_name(st), m, da_status_name(want), needle);
}

#define BASE "\"segment_lengths\":[8,16],\"dilation_rates\":[1,2],\"num_heads\":4,\"head_dim\":16"

static void test_json(void) {
  parse_expect("{" BASE "}", DA_OK, "");
  parse_expect("{" BASE ",\"sparsity\":null}", DA_OK, "");
  parse_expect("", DA_ERR_PARSE, "line 1");
  parse_expect("{" BASE ",}", DA_ERR_PARSE, "line 1, column");
  parse_expect("{\n" BASE ",\n\"causal\": tru}", DA_ERR_PARSE, "line 3");
  parse_expect("[1,2]", DA_ERR_PARSE, "expected a JSON object");
  parse_expect("{" BASE ",\"heads\":4}", DA_ERR_PARSE, "heads: unknown field");
  parse_expect("{" BASE ",\"num_heads\":4}", DA_ERR_PARSE, "duplicate");
  parse_expect("{\"dilation_rates\":[1],\"num_heads\":4,\"head_dim\":16}", DA_ERR_PARSE, "segment_lengths: missing");
  parse_expect("{\"segment_lengths\":[8],\"num_heads\":4,\"head_dim\":16}", DA_ERR_PARSE, "dilation_rates: missing");
  parse_expect("{\"segment_lengths\":[8],\"dilation_rates\":[1],\"head_dim\":16}", DA_ERR_PARSE, "num_heads: missing");
  parse_expect("{\"segment_lengths\":[8,16],\"dilation_rates\":[1],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_INVALID_SPEC, "dilation_rates: 1 entry but segment_lengths has 2");
  parse_expect("{\"segment_lengths\":[],\"dilation_rates\":[],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_INVALID_SPEC, "0 branches");
  parse_expect("{\"segment_lengths\":\"8\",\"dilation_rates\":[1],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_PARSE, "segment_lengths: expected an array of integers, got a string");
  parse_expect("{\"segment_lengths\":[8.0],\"dilation_rates\":[1],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_PARSE, "segment_lengths[0]: expected an integer");
  parse_expect("{\"segment_lengths\":[8,-16],\"dilation_rates\":[1,2],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_INVALID_SPEC, "segment_lengths[1]: -16 is out of range");
  parse_expect("{\"segment_lengths\":[8,16],\"dilation_rates\":[1,32],\"num_heads\":4,\"head_dim\":16}",
               DA_ERR_INVALID_SPEC, "dilation_rates[1]: 32 is larger than segment_lengths[1] = 16");
  parse_expect("{" BASE ",\"num_kv_heads\":3}", DA_ERR_INVALID_SPEC, "num_kv_heads");
  parse_expect("{" BASE ",\"head_dim\":true}", DA_ERR_PARSE, "duplicate");
  parse_expect("{\"segment_lengths\":[8],\"dilation_rates\":[1],\"num_heads\":4,\"head_dim\":true}", DA_ERR_PARSE,
               "head_dim: expected an integer, got true");
  parse_expect("{" BASE ",\"mode\":\"dilated\"}", DA_ERR_INVALID_SPEC, "mode: \"dilated\" is not one of longnet|grouped");
  parse_expect("{" BASE ",\"offsets\":1}", DA_ERR_PARSE, "offsets: expected a string");
  parse_expect("{" BASE ",\"causal\":1}", DA_ERR_PARSE, "causal: expected true or false");
  parse_expect("{" BASE ",\"scale\":\"0.1\"}", DA_ERR_PARSE, "scale: expected a number or null");
  parse_expect("{" BASE ",\"dtype\":\"float64\"}", DA_ERR_INVALID_SPEC, "dtype: \"float64\" is not one of");
  parse_expect("{" BASE ",\"num_heads\":99999999999999999999}", DA_ERR_PARSE, "line 1");
  parse_expect("{" BASE ",\"sparsity\":[]}", DA_ERR_PARSE, "sparsity: expected an object");
  parse_expect("{" BASE ",\"sparsity\":{}}", DA_ERR_PARSE, "sparsity.layout: missing");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"stripes\"}}", DA_ERR_INVALID_SPEC, "sparsity.layout: \"stripes\"");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"local_window\",\"block\":8}}", DA_ERR_PARSE, "sparsity.window: missing");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"local_window\",\"window\":1}}", DA_ERR_PARSE, "sparsity.block: missing");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"local_window\",\"block\":8,\"window\":1,\"strides\":[2]}}",
               DA_ERR_PARSE, "sparsity.strides: not used by layout 'local_window'");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"dense\",\"colour\":1}}", DA_ERR_PARSE, "sparsity.colour: unknown field");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":1,\"density\":2}}",
               DA_ERR_INVALID_SPEC, "sparsity.density: 2");
  /* (a negative seed is the bit pattern of one from 2^63: test_json) */
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"dilated_sparse\",\"block\":8,\"strides\":[0]}}",
               DA_ERR_INVALID_SPEC, "sparsity.strides[0]: 0");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"explicit\",\"block\":8}}", DA_ERR_INVALID_SPEC, "C API");
  /* a density that is no number, and every JSON kind named as what was found */
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":1,\"density\":\"0.5\"}}",
               DA_ERR_PARSE, "sparsity.density: expected a number, got a string");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":1,\"density\":null}}",
               DA_ERR_PARSE, "sparsity.density: expected a number, got null");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":1,\"density\":[0.5]}}",
               DA_ERR_PARSE, "sparsity.density: expected a number, got an array");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":1}}", DA_ERR_PARSE,
               "sparsity.density: missing");
  parse_expect("{" BASE ",\"mode\":false}", DA_ERR_PARSE, "mode: expected a string, got false");
  parse_expect("{" BASE ",\"offsets\":1.5}", DA_ERR_PARSE, "offsets: expected a string, got a number with a fraction");
  parse_expect("{" BASE ",\"dtype\":{}}", DA_ERR_PARSE, "dtype: expected a string, got an object");
  parse_expect("{" BASE ",\"causal\":null}", DA_ERR_PARSE, "causal: expected true or false, got null");
  parse_expect("{" BASE ",\"sparsity\":{\"layout\":\"global_local\",\"block\":8,\"window\":1,\"global\":2}}", DA_OK, "");
  /* defaults: kv heads = heads, longnet, mod, float32 */
  da_spec s;
  char m[256];
  const char *j = "{" BASE "}";
  TU_CHECK(da_spec_from_json(j, strlen(j), &s, m, sizeof m) == DA_OK && s.num_kv_heads == 4 &&
               s.mode == DA_MODE_LONGNET && s.offsets == DA_OFFSETS_MOD && s.dtype == DA_DTYPE_FLOAT32 &&
               !s.has_scale && !s.causal,
           "defaults");
  /* canonical JSON parses back to the same canonical JSON */
  const char *full = "{" BASE ",\"num_kv_heads\":2,\"mode\":\"grouped\",\"offsets\":\"block\",\"causal\":true,"
                     "\"scale\":0.1,\"dtype\":\"bfloat16\",\"sparsity\":{\"layout\":\"random\",\"block\":4,"
                     "\"seed\":123456789012,\"density\":0.3}}";
  TU_CHECK(da_spec_from_json(full, strlen(full), &s, m, sizeof m) == DA_OK, "full config: %s", m);
  char *c1 = da_spec_to_json(&s);
  da_spec s2;
  TU_CHECK(c1 && da_spec_from_json(c1, strlen(c1), &s2, m, sizeof m) == DA_OK, "canonical JSON reparse: %s", m);
  char *c2 = da_spec_to_json(&s2);
  TU_CHECK(c1 && c2 && strcmp(c1, c2) == 0, "canonical JSON round trip: %s vs %s", c1, c2);
  TU_CHECK(s2.sparsity.seed == 123456789012ull && s2.scale == 0.1, "seed/scale round trip");
  free(c1);
  free(c2);
  /* seeds are uint64: canonical JSON writes those from 2^63 as negative int64 (JSON
   * integers are int64 to jansson), and a config's negative seed reads as that pattern */
  const char *neg = "{" BASE ",\"sparsity\":{\"layout\":\"random\",\"block\":8,\"seed\":-1,\"density\":0.5}}";
  TU_CHECK(da_spec_from_json(neg, strlen(neg), &s, m, sizeof m) == DA_OK && s.sparsity.seed == UINT64_MAX,
           "seed -1: %s", m);
  c1 = da_spec_to_json(&s);
  TU_CHECK(c1 && strstr(c1, "\"seed\":-1") && da_spec_from_json(c1, strlen(c1), &s2, m, sizeof m) == DA_OK &&
               s2.sparsity.seed == UINT64_MAX,
           "seed 2^64 - 1 round trip: %s", c1 ? c1 : "");
  free(c1);
}

/* da_spec_init leaves num_kv_heads unset (0): 1 with one head; with more every function
 * that takes the spec refuses it by name. It was 1, so `num_heads = 8` alone read 8-head
 * k and v as one head's (a silent wrong answer). */
static void test_unset_kv_heads(void) {
  da_spec s;
  da_spec_init(&s);
  TU_CHECK(s.num_kv_heads == 0, "da_spec_init's num_kv_heads: %d, want 0 (unset)", s.num_kv_heads);
  s.num_branches = 1, s.segment_lengths[0] = 8, s.dilation_rates[0] = 1, s.head_dim = 16;
  char m[512];
  TU_CHECK(da_spec_validate(&s, m, sizeof m) == DA_OK, "one head, num_kv_heads unset: %s", m);
  char *js = da_spec_to_json(&s);
  TU_CHECK(js && strstr(js, "\"num_kv_heads\":1"), "one head unset as JSON: %s", js ? js : "NULL");
  free(js);
  da_args a;
  da_args_init(&a, &s, 2, 8, NULL, NULL, NULL, NULL, NULL);
  TU_CHECK(a.k_stride[1] == 16 && a.k_stride[0] == 8 * 16, "one head unset: k strides %lld %lld",
           (long long)a.k_stride[0], (long long)a.k_stride[1]);
  s.num_heads = 8;
  da_status st = da_spec_validate(&s, m, sizeof m);
  TU_CHECK(st == DA_ERR_INVALID_SPEC && strstr(m, "num_kv_heads: unset") && strstr(m, "num_heads = 8"),
           "8 heads, num_kv_heads unset: %s '%s'", da_status_name(st), m);
  da_args_init(&a, &s, 2, 8, NULL, NULL, NULL, NULL, NULL);
  TU_CHECK(a.k_stride[0] == -1 && a.k_stride[1] == -1 && a.k_stride[2] == -1 && a.v_stride[1] == -1 &&
               a.q_stride[1] == 8 * 16,
           "8 heads unset: k's strides %lld %lld %lld (-1: refused at execution)", (long long)a.k_stride[0],
           (long long)a.k_stride[1], (long long)a.k_stride[2]);
  da_context *ctx = NULL;
  TU_CHECK(da_context_create(&ctx) == DA_OK, "context");
  { /* executed with a plan of the spec set: refused, not k and v broadcast from token 0 */
    da_spec set = s;
    set.num_kv_heads = 8;
    da_plan *ok = NULL;
    TU_CHECK(da_plan_create(ctx, &set, DA_BACKEND_HOST, &ok) == DA_OK, "plan of 8 heads: %s", da_context_last_error(ctx));
    float *buf = calloc(2 * 8 * 8 * 16, sizeof *buf), *out = calloc(2 * 8 * 8 * 16, sizeof *out);
    da_args_init(&a, &s, 2, 8, buf, buf, buf, out, NULL);
    const da_status st = ok ? da_plan_execute(ok, &a) : DA_ERR_INVALID_ARGUMENT;
    TU_CHECK(st == DA_ERR_INVALID_ARGUMENT && strstr(da_context_last_error(ctx), "k_stride"),
             "args of an unset num_kv_heads executed: %s '%s'", da_status_name(st), da_context_last_error(ctx));
    free(buf), free(out);
    da_plan_destroy(ok);
  }
  da_plan *plan = NULL;
  st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_ERR_INVALID_SPEC && !plan && strstr(da_context_last_error(ctx), "num_kv_heads: unset"),
           "plan of 8 heads, num_kv_heads unset: %s '%s'", da_status_name(st), da_context_last_error(ctx));
  char *src = NULL;
  st = da_render(ctx, &s, DA_TARGET_HOST, &src, NULL);
  TU_CHECK(st == DA_ERR_INVALID_SPEC && !src, "render of 8 heads, num_kv_heads unset: %s", da_status_name(st));
  s.num_kv_heads = 8; /* set: fine */
  TU_CHECK(da_spec_validate(&s, m, sizeof m) == DA_OK, "8 heads, num_kv_heads 8: %s", m);
  da_context_destroy(ctx);
}

int main(void) {
  test_validate();
  test_json();
  test_unset_kv_heads();
  return tu_report();
}
