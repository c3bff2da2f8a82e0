/* test_generator.c - the generator: byte-identical output for the same spec, the banner
 * (spec and cache key), kernel names, template errors reported at the template's own
 * line, and the sandbox refusing escapes (os.execute, io, load, string.dump, globals),
 * runaway loops (instruction budget) and unbounded allocation (memory limit), also when
 * the template comes from DILATTN_TEMPLATE_DIR.
 * Run: build/tests/test_generator   (ctest -R generator) */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/render.h"
#include "test_util.h"

static da_spec base_spec(void) {
  da_spec s;
  da_spec_init(&s);
  s.num_branches = 3;
  int64_t w[3] = {16, 32, 64}, r[3] = {1, 2, 4};
  memcpy(s.segment_lengths, w, sizeof w);
  memcpy(s.dilation_rates, r, sizeof r);
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 32;
  return s;
}

static void test_determinism(void) {
  da_context *c1, *c2;
  da_context_create(&c1);
  da_context_create(&c2);
  da_spec s = base_spec();
  char *a = NULL, *b = NULL, *na = NULL, *nb = NULL;
  TU_CHECK(da_render(c1, &s, DA_TARGET_HOST, &a, &na) == DA_OK, "render: %s", da_context_last_error(c1));
  TU_CHECK(da_render(c2, &s, DA_TARGET_HOST, &b, &nb) == DA_OK, "render: %s", da_context_last_error(c2));
  if (a && b) {
    TU_CHECK(strcmp(a, b) == 0, "same spec rendered two different sources");
    TU_CHECK(strcmp(na, nb) == 0, "same spec, two kernel names");
    TU_CHECK(strncmp(a, "/* dilattn ", 11) == 0, "source does not open with the banner");
    char *js = da_spec_to_json(&s);
    const char *end_banner = strstr(a, "*/");
    const char *spec_at = strstr(a, js);
    TU_CHECK(spec_at && spec_at < end_banner, "banner lacks the spec JSON %s", js);
    const char *key = strstr(a, "cache key: ");
    TU_CHECK(key && key < end_banner, "banner lacks the cache key");
    if (key) {
      int hex = 1;
      for (int i = 0; i < 64; i++) hex &= !!strchr("0123456789abcdef", key[11 + i]);
      TU_CHECK(hex && key[75] == '\n', "cache key is not 64 hex digits");
    }
    TU_CHECK(strstr(na, "w16_32_64") && strstr(na, "r1_2_4") && strstr(na, "h4_2") && strstr(na, "d32"),
             "kernel name %s does not encode the spec", na);
    TU_CHECK(strstr(a, na) != NULL, "source lacks its entry point %s", na);
    free(js);
  }
  /* any change of the spec changes the source, the key and the name */
  da_spec t = s;
  t.has_scale = 1;
  t.scale = 0.125;
  char *c = NULL, *nc = NULL;
  TU_CHECK(da_render(c1, &t, DA_TARGET_HOST, &c, &nc) == DA_OK, "render");
  if (a && c) {
    TU_CHECK(strcmp(a, c) != 0, "scale change did not change the source");
    TU_CHECK(strcmp(na, nc) != 0, "scale change did not change the kernel name");
    TU_CHECK(strncmp(strstr(a, "cache key: "), strstr(c, "cache key: "), 75) != 0, "key unchanged");
  }
  free(a), free(b), free(c), free(na), free(nb), free(nc);
  /* the cuda target renders the same spec into a module of extern "C" kernels */
  char *x = NULL, *nx = NULL;
  TU_CHECK(da_render(c1, &s, DA_TARGET_CUDA, &x, &nx) == DA_OK, "cuda target: %s", da_context_last_error(c1));
  if (x && nx) {
    char want[300];
    snprintf(want, sizeof want, "extern \"C\" __global__ void __launch_bounds__(NTHREADS, 1) %s_", nx);
    TU_CHECK(strstr(x, want) != NULL, "cuda source lacks its kernel %s", want);
    TU_CHECK(strncmp(x, "/* dilattn ", 11) == 0 && strstr(x, "target: cuda"), "cuda banner");
  }
  free(x), free(nx);
  x = NULL;
  /* an invalid spec never reaches Lua */
  t = s;
  t.dilation_rates[1] = 99;
  TU_CHECK(da_render(c1, &t, DA_TARGET_HOST, &x, NULL) == DA_ERR_INVALID_SPEC, "invalid spec rendered");
  TU_CHECK(strstr(da_context_last_error(c1), "dilation_rates[1]") != NULL, "error lacks the field: %s",
           da_context_last_error(c1));
  da_context_destroy(c1);
  da_context_destroy(c2);
}

/* Render text as a template; return status and keep the error text. */
static da_status render_text(da_context *ctx, const char *text, long long budget, size_t mem, char **out) {
  da_spec s = base_spec();
  *out = NULL;
  return da__render_template_text(ctx, &s, text, "t.tpl", budget, mem, out);
}

static void expect_error(da_context *ctx, const char *text, da_status want, const char *needle) {
  char *out = NULL;
  da_status st = render_text(ctx, text, 20000000, 32u << 20, &out);
  const char *err = da_context_last_error(ctx);
  TU_CHECK(want == DA_OK ? st != DA_OK : st == want, "template %.40s...: status %s, want %s (%s)", text, da_status_name(st),
           da_status_name(want), err);
  TU_CHECK(strstr(err, needle) != NULL, "template %.40s...: error '%s' lacks '%s'", text, err, needle);
  free(out);
}

static void test_templates(void) {
  da_context *ctx;
  da_context_create(&ctx);
  char *out = NULL;
  /* the engine: expressions, statements, comments, line layout */
  const char *t = "a {{ p.D }} b\n{% for i = 1, 2 do %}\nx{{ i }}\n{% end %}\n{# gone #}\nend\n";
  TU_CHECK(render_text(ctx, t, 0, 0, &out) == DA_OK, "engine: %s", da_context_last_error(ctx));
  TU_CHECK(out && strcmp(out, "a 32 b\nx1\nx2\nend\n") == 0, "engine output: [%s]", out ? out : "(null)");
  free(out);
  /* the layout rules, each with its exact output: a tag after text on its line is not
   * alone; a statement alone with blanks around it (or at the text's end) leaves no line;
   * "{" of C is text, so is a last "{"; quotes, backslashes and control bytes pass as they
   * are; an empty template is empty */
  static const char *const layout[][2] = {
      {"int x; {% if true then %}y{% end %}\n", "int x; y\n"},
      {"  {% local z = 7 %}  \nA{{ z }}\n  {% z = 8 %}", "A7\n"},
      {"struct { int a; } s = {0}; {{ p.D }} {\n{", "struct { int a; } s = {0}; 32 {\n{"},
      {"a \"q\" \\n \\\" \r\n\t{{ p.D }}\x01 '%q' %% {#c#}|", "a \"q\" \\n \\\" \r\n\t32\x01 '%q' %% |"},
      {"{# one\ntwo #}\nx\n  {# alone #}  \ny", "x\ny"},
      {"{{ p.D }}{{ p.D }}\n{% for i = 1, 3 do %}{{ i }},{% end %}\n", "3232\n1,2,3,\n"},
      {"", ""},
  };
  for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
    TU_CHECK(render_text(ctx, layout[i][0], 0, 0, &out) == DA_OK, "layout %zu: %s", i, da_context_last_error(ctx));
    TU_CHECK(out && strcmp(out, layout[i][1]) == 0, "layout %zu: [%s], want [%s]", i, out ? out : "(null)",
             layout[i][1]);
    free(out);
  }
  { /* many tags on one long line (then more lines) stay linear: each newline is found once
     * and a tag looks back over blanks only (this took past the instruction budget) */
    enum { NT = 20000 };
    const char unit[] = "x{% do end %}";
    char *big = malloc(sizeof unit * NT + 16);
    if (big) {
      for (int i = 0; i < NT; i++) memcpy(big + i * (sizeof unit - 1), unit, sizeof unit - 1);
      strcpy(big + NT * (sizeof unit - 1), "\n{{ p.D }}\n");
      TU_CHECK(render_text(ctx, big, 0, 0, &out) == DA_OK, "long line of tags: %s", da_context_last_error(ctx));
      TU_CHECK(out && strlen(out) == NT + 4 && !strcmp(out + NT, "\n32\n"), "long line of tags: %.40s...",
               out ? out : "(null)");
      free(out);
      free(big);
    }
  }
  /* errors point at the template's own line */
  expect_error(ctx, "a\n{% local z = 1 %}\nb {\n{# c\nd #}\n  {% if z then %}\n{{ nil }}{% end %}\n", DA_ERR_GENERATOR, "t.tpl:7:");
  expect_error(ctx, "a\n\n{% local z = 1 %}{{ z }}\n{% if z then %} x {% end %}\n{% %}{{ nil }}", DA_ERR_GENERATOR,
               "t.tpl:5:");
  expect_error(ctx, "a\n{% local z = 1 %}\n  {% local y = 2 %}  \n{# c\nd #}\nb {{ z }}\n{% error('boom') %}\n", DA_ERR_GENERATOR,
               "t.tpl:7: boom");
  expect_error(ctx, "line 1\nline 2\n{{ p.nope.deeper }}\n", DA_ERR_GENERATOR, "t.tpl:3:");
  expect_error(ctx, "1\n2\n3\n4\n{% if then %}\n", DA_ERR_GENERATOR, "t.tpl:5:");
  expect_error(ctx, "ok\n{{ nil }}\n", DA_ERR_GENERATOR, "t.tpl:2");
  expect_error(ctx, "{{ 1.5 }}", DA_ERR_GENERATOR, "explicit format");
  expect_error(ctx, "{{ p.nope.deeper }}", DA_ERR_GENERATOR, "stack traceback"); /* a fault: where it came from */
  /* a refusal (planner.lua refuse) is the caller's input: its message alone; a table with
   * a metamethod that raises runs none of it while the error is read */
  expect_error(ctx, "{% error({ refused = 'tile_q 7: no' }) %}", DA_ERR_INVALID_ARGUMENT, "generator: tile_q 7: no");
  TU_CHECK(!strstr(da_context_last_error(ctx), "traceback"), "refusal with a traceback: %s", da_context_last_error(ctx));
  expect_error(ctx, "{% error(setmetatable({}, { __index = function() error('boom') end })) %}", DA_ERR_GENERATOR,
               "table value");
  expect_error(ctx, "a\n{% for i=1,2 do \n", DA_ERR_GENERATOR, "t.tpl:");
  expect_error(ctx, "a\nb {{ p.D ", DA_ERR_GENERATOR, "t.tpl:2: unclosed");
  /* sandbox escapes */
  expect_error(ctx, "{% os.execute('touch /tmp/dilattn_pwned') %}", DA_ERR_GENERATOR, "os");
  TU_CHECK(access("/tmp/dilattn_pwned", F_OK) != 0, "os.execute ran");
  expect_error(ctx, "{{ io.open('/etc/passwd'):read('a') }}", DA_ERR_GENERATOR, "io");
  expect_error(ctx, "{% load('return 1')() %}", DA_ERR_GENERATOR, "load");
  expect_error(ctx, "{% dofile('/etc/passwd') %}", DA_ERR_GENERATOR, "dofile");
  expect_error(ctx, "{% require('os') %}", DA_ERR_GENERATOR, "require");
  expect_error(ctx, "{{ string.dump(function() end) }}", DA_ERR_GENERATOR, "dump");
  expect_error(ctx, "{{ ('x'):dump() }}", DA_ERR_GENERATOR, "dump");
  expect_error(ctx, "{% collectgarbage() %}", DA_ERR_GENERATOR, "collectgarbage");
  expect_error(ctx, "{% debug.sethook() %}", DA_ERR_GENERATOR, "debug");
  expect_error(ctx, "{% leaked = 1 %}", DA_ERR_GENERATOR, "global 'leaked'");
  expect_error(ctx, "{% sandbox_load(string.char(27) .. 'Lua', 'x', {}) %}", DA_ERR_GENERATOR, "binary");
  /* runaway loops and allocation stop with a clear error */
  expect_error(ctx, "{% while true do end %}", DA_ERR_GENERATOR, "instruction budget exceeded");
  /* (the template past the generator's limit: a generator failure, CLI exit 3) */
  expect_error(ctx, "{% local t = {} for i = 1, 1e12 do t[i] = string.rep('x', 4096) .. i end %}",
               DA_ERR_GENERATOR, "memory limit");
  expect_error(ctx, "{{ string.rep('x', 1 << 30) }}", DA_ERR_GENERATOR, "memory limit");
  /* unbounded recursion: the Lua stack or the memory limit stops it, either way cleanly */
  expect_error(ctx, "{% local function f() return f() + 1 end f() %}", DA_OK, "generator");
  /* after all that, the same context still renders */
  da_spec s = base_spec();
  char *src = NULL;
  TU_CHECK(da_render(ctx, &s, DA_TARGET_HOST, &src, NULL) == DA_OK, "render after sandbox errors");
  free(src);
  da_context_destroy(ctx);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* A new folder for DILATTN_TEMPLATE_DIR (dir: a mkdtemp template) with a folder `kind`
 * (host, cuda) in it for `file`, whose path goes to path[256]; 0 where it cannot be made */
static int template_dir(char *dir, char sub[256], const char *kind, const char *file, char path[256]) {
  if (!mkdtemp(dir)) return 0;
  snprintf(sub, 256, "%s/%s", dir, kind);
  mkdir(sub, 0700);
  snprintf(path, 256, "%s/%s", sub, file);
  return 1;
}

static void test_template_dir(void) {
  char dir[] = "/tmp/dilattn-tpl-XXXXXX", sub[256], path[256];
  if (!template_dir(dir, sub, "host", "kernel.c.tpl", path)) return;
  da_context *ctx;
  da_context_create(&ctx);
  da_spec s = base_spec();
  da_plan *plan = NULL;
  setenv("DILATTN_TEMPLATE_DIR", dir, 1);
  /* a template that tries to escape */
  write_file(path, "/* hi */\n{% os.execute('id') %}\n");
  da_status st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_ERR_GENERATOR && strstr(da_context_last_error(ctx), "kernel.c.tpl:2:"),
           "escaping template from DILATTN_TEMPLATE_DIR: %s / %s", da_status_name(st), da_context_last_error(ctx));
  /* a template that never ends */
  write_file(path, "{% local n = 0 while true do n = n + 1 end %}\n");
  st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_ERR_GENERATOR && strstr(da_context_last_error(ctx), "instruction budget"),
           "looping template: %s", da_context_last_error(ctx));
  /* a template that produces C that does not compile: compile error with the log */
  write_file(path, "this is not C;\n");
  st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_ERR_COMPILE && strstr(da_context_last_error(ctx), "kernel.c"),
           "bad C: %s / %s", da_status_name(st), da_context_last_error(ctx));
  { /* the failed build's folder is kept for inspection (" on DIR/kernel.c (kept"): not here */
    const char *on = strstr(da_context_last_error(ctx), " on "), *end = on ? strstr(on, "/kernel.c (kept") : NULL;
    const int n = on && end ? (int)(end - (on + 4)) : 0;
    if (n > 0 && n < 4000 && !memchr(on + 4, '\'', (size_t)n)) {
      char cmd[4200];
      snprintf(cmd, sizeof cmd, "rm -rf '%.*s'", n, on + 4);
      TU_CHECK(system(cmd) == 0, "%s", cmd);
    }
  }
  /* a missing template names the path */
  unlink(path);
  st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_ERR_GENERATOR && strstr(da_context_last_error(ctx), path),
           "missing template: %s", da_context_last_error(ctx));
  unsetenv("DILATTN_TEMPLATE_DIR");
  rmdir(sub);
  rmdir(dir);
  st = da_plan_create(ctx, &s, DA_BACKEND_HOST, &plan);
  TU_CHECK(st == DA_OK, "embedded templates after the env var is gone: %s", da_context_last_error(ctx));
  da_plan_destroy(plan);
  da_context_destroy(ctx);
}

/* The fused CUDA grid without a causal mask runs longest first where a head's tiles differ
 * (planner.lua plan_lpt_heads): LPT_TILE_H holds each head's order of a window's tiles, a
 * permutation, the class every branch covers first; absent where the tiles of a head cost
 * the same (one branch, grouped heads), under a sparse layout, and on causal plans (their
 * own order, LPT_TILE). */
static int lpt_rows(da_context *ctx, const da_spec *s, int rows[16][64], int *tpw) {
  da__render_opts o;
  memset(&o, 0, sizeof o);
  o.cuda_mma = 4; /* the sm_90 default instruction */
  /* the fused strategy kept (fused_min_queries set, at its default value): the default
   * sends LongNet 5-branch to split now (0.89 of its rows filled fused, 0.96 split) */
  o.fused_min_queries = 16;
  da__rendered r;
  if (da__render_ex(ctx, s, DA_TARGET_CUDA, &o, &r) != DA_OK) return -2;
  const char *src = r.source, *t = strstr(src, "LPT_TILE_H[");
  int h = -1;
  *tpw = 0;
  if (t) {
    int H = 0;
    sscanf(t, "LPT_TILE_H[%d][%d]", &H, tpw);
    const char *q = strstr(t, "= {");
    for (h = 0; q && h < H && h < 16; h++) {
      q = strchr(q + 1, '{');
      for (int i = 0; q && i < *tpw && i < 64; i++) {
        while (*q && (*q < '0' || *q > '9')) q++;
        rows[h][i] = (int)strtol(q, (char **)&q, 10);
      }
    }
  }
  da__rendered_free(&r);
  return h;
}

static void test_lpt_heads(void) {
  da_context *ctx;
  da_context_create(&ctx);
  static const int64_t w[5] = {2048, 4096, 8192, 16384, 32768}, r[5] = {1, 2, 4, 6, 12};
  da_spec s = tu_spec(5, w, r, 8, 8, 64, DA_DTYPE_FLOAT16);
  int rows[16][64], tpw = 0;
  int H = lpt_rows(ctx, &s, rows, &tpw);
  TU_CHECK(H == 8 && tpw >= 12, "LongNet 5-branch: LPT_TILE_H of 8 heads (%d, %d tiles a window)", H, tpw);
  for (int h = 0; h < H && tpw <= 64; h++) {
    int seen[64] = {0}, ok = 1;
    for (int i = 0; i < tpw; i++) ok &= rows[h][i] >= 0 && rows[h][i] < tpw && !seen[rows[h][i]]++;
    TU_CHECK(ok, "head %d: its order is a permutation of the window's %d tiles", h, tpw);
  }
  /* head 0 (offset 0 in every branch): residue class 0, the window's first tiles, is in all five */
  TU_CHECK(H > 0 && rows[0][0] == 0, "head 0 runs class 0 first (%d)", H > 0 ? rows[0][0] : -1);
  TU_CHECK(H > 1 && rows[1][0] != 0, "head 1 (offsets 1) runs another class first (%d)", H > 1 ? rows[1][0] : -1);
  da_spec t = s;
  t.causal = 1;
  TU_CHECK(lpt_rows(ctx, &t, rows, &tpw) == -1, "causal: no LPT_TILE_H (its own order)");
  t = s;
  t.num_branches = 1;
  TU_CHECK(lpt_rows(ctx, &t, rows, &tpw) == -1, "one branch: no LPT_TILE_H");
  t = s;
  t.mode = DA_MODE_GROUPED;
  TU_CHECK(lpt_rows(ctx, &t, rows, &tpw) == -1, "grouped heads (a branch each): no LPT_TILE_H");
  t = s;
  t.sparsity.layout = DA_LAYOUT_LOCAL_WINDOW;
  t.sparsity.block = 64, t.sparsity.window = 4;
  TU_CHECK(lpt_rows(ctx, &t, rows, &tpw) == -1, "a sparse layout: no LPT_TILE_H");
  da_context_destroy(ctx);
}

/* run_period (CUDA split plans run their tokens in whole numbers of it, so that no segment
 * crosses a run) is a multiple of every w, or 2^41 past 2^40 (one run): segment lengths
 * whose lcm passes 2^64 (77158673929 * 239075442 = 2^64 + 2) must not wrap to 2. */
static void test_run_period(void) {
  da_context *ctx;
  da_context_create(&ctx);
  const int64_t w[2] = {77158673929LL, 239075442LL}, r[2] = {1, 2};
  da_spec s = tu_spec(2, w, r, 2, 2, 64, DA_DTYPE_FLOAT16);
  da__rendered rd;
  da_status st = da__render_ex(ctx, &s, DA_TARGET_CUDA, NULL, &rd);
  TU_CHECK(st == DA_OK, "render: %s", da_context_last_error(ctx));
  if (st == DA_OK) {
    const int64_t p = rd.run_period;
    TU_CHECK(p == (int64_t)1 << 41 || (p > 0 && p % w[0] == 0 && p % w[1] == 0),
             "run_period %lld is no multiple of w = {%lld, %lld} (and not 2^41)", (long long)p, (long long)w[0],
             (long long)w[1]);
    da__rendered_free(&rd);
  }
  da_context_destroy(ctx);
}

/* The generator's fdiv(d) (generator.lua): {m, s} such that the kernels' da_fq(x, f),
 * (umulhi64(x, m) + x) >> s, is x / d for every 0 <= x < 2^62. Each divisor against the
 * dividends where a wrong magic number shows first: around the multiples of d, the top of
 * the range, and random ones. */
static uint64_t fq(uint64_t x, uint64_t m, int s) { return ((uint64_t)(((unsigned __int128)x * m) >> 64) + x) >> s; }
static uint64_t fq32(uint32_t x, uint32_t m, int s) { return (((uint64_t)x * m >> 32) + x) >> s; }
static void test_fdiv(void) {
  da_context *ctx;
  da_context_create(&ctx);
  const uint64_t top = ((uint64_t)1 << 62) - 1;
  uint64_t ds[96] = {1, 2, 3, 5, 6, 7, 12, 24, 64, 96, 128, 192, 2048, 2731, 4095, 4097, 10923, 16384, 1000000007ull,
                     ((uint64_t)1 << 40) - 1, (uint64_t)1 << 40, ((uint64_t)1 << 40) + 1, ((uint64_t)1 << 61) + 1, top,
                     top - 1, ((uint64_t)1 << 31) + 1, ((uint64_t)1 << 32) - 1, ((uint64_t)1 << 32) + 1};
  int nd = 28;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  while (nd < 96) { /* random divisors of every size */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t d = (rng >> 2) >> (rng % 61);
    if (d) ds[nd++] = d;
  }
  char tpl[64];
  for (int i = 0; i < nd; i++) {
    snprintf(tpl, sizeof tpl, "{{ fdiv(%llu) }}", (unsigned long long)ds[i]);
    char *out = NULL;
    unsigned long long m = 0;
    unsigned m32 = 0;
    int sh = -1;
    TU_CHECK(render_text(ctx, tpl, 0, 0, &out) == DA_OK && out && sscanf(out, "{%llxull, %d, %xu}", &m, &sh, &m32) == 3,
             "fdiv(%llu): [%s] %s", (unsigned long long)ds[i], out ? out : "", da_context_last_error(ctx));
    free(out);
    if (sh < 0) continue;
    const uint64_t d = ds[i];
    int bad = 0;
    uint64_t xs[16] = {0, 1, d - 1, d, d + 1, top, top - 1, top - d, top / d * d, top / d * d - 1};
    for (int k = 0; k < 4000 && !bad; k++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t r = (rng >> 2) >> (rng % 62), near = r / d * d; /* a multiple of d, and around it */
      xs[10] = r, xs[11] = near, xs[12] = near ? near - 1 : 0, xs[13] = near + d - 1 <= top ? near + d - 1 : top;
      xs[14] = r & (((uint64_t)1 << 31) - 1), xs[15] = (uint64_t)k * d <= top ? (uint64_t)k * d : 0;
      for (int j = 0; j < 16 && !bad; j++) {
        const uint64_t x = xs[j] > top ? top : xs[j];
        if (fq(x, m, sh) != x / d) {
          bad = 1;
          TU_CHECK(0, "fdiv(%llu) = {%#llx, %d}: %llu / d gives %llu, want %llu", (unsigned long long)d, m, sh,
                   (unsigned long long)x, (unsigned long long)fq(x, m, sh), (unsigned long long)(x / d));
        }
        /* the 32-bit form, for d < 2^31 and x < 2^32 (x's low word, and the top of the range) */
        const uint32_t x32 = j == 6 ? UINT32_MAX : (uint32_t)x;
        if (d < ((uint64_t)1 << 31) && fq32(x32, m32, sh) != x32 / d) {
          bad = 1;
          TU_CHECK(0, "fdiv(%llu): m32 %#x: %u / d gives %llu, want %llu", (unsigned long long)d, m32, x32,
                   (unsigned long long)fq32(x32, m32, sh), (unsigned long long)(x32 / d));
        }
      }
    }
    {
      const uint64_t d = ds[i];
      TU_CHECK(d < ((uint64_t)1 << 31) || m32 == 0, "fdiv(%llu): an m32 (%#x) past 2^31", (unsigned long long)d, m32);
    }
  }
  /* a divisor out of its range is the generator's error, not a wrong table */
  expect_error(ctx, "{{ fdiv(0) }}", DA_ERR_GENERATOR, "fdiv: divisor 0 out of range");
  expect_error(ctx, "{{ fdiv(1 << 62) }}", DA_ERR_GENERATOR, "out of range");
  da_context_destroy(ctx);
}

/* Open file descriptors of this process. */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* CUDA templates of an older version (DILATTN_TEMPLATE_DIR: a bench baseline's) whose
 * kernels' argument struct lacks this runtime's newest field (ctr, runtime/cuda_args.h):
 * refused by name, not rendered to read the arguments at shifted offsets. (The stub
 * template stands for such a kernel; it mentions da_split_side, which split plans need
 * first.) With the field the same stub renders. */
static void test_old_cuda_args(void) {
  char dir[] = "/tmp/dilattn-tpl-XXXXXX", sub[256], path[256];
  if (!template_dir(dir, sub, "cuda", "kernel.cu.tpl", path)) return;
  da_context *ctx;
  da_context_create(&ctx);
  const da_spec s = base_spec();
  setenv("DILATTN_TEMPLATE_DIR", dir, 1);
  for (int with = 0; with < 2; with++) {
    write_file(path, with ? "struct da_cuda_args {\n  float *ws;\n  unsigned *ctr;\n  int tpc;\n}; /* da_split_side( */\n"
                          : "struct da_cuda_args {\n  float *ws;\n  int tpc;\n}; /* da_split_side( */\n");
    char *src = NULL, *name = NULL;
    const da_status st = da_render(ctx, &s, DA_TARGET_CUDA, &src, &name);
    if (with)
      TU_CHECK(st == DA_OK, "CUDA templates with ctr: %s (%s)", da_status_name(st), da_context_last_error(ctx));
    else
      TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(ctx), "predate this runtime's kernel arguments"),
               "CUDA templates without ctr refused: %s (%s)", da_status_name(st), da_context_last_error(ctx));
    free(src), free(name);
  }
  unsetenv("DILATTN_TEMPLATE_DIR");
  da_context_destroy(ctx);
  unlink(path);
  rmdir(sub);
  rmdir(dir);
}

/* A template from DILATTN_TEMPLATE_DIR larger than the generator's memory limit: the
 * render fails with the memory error, and the file it was reading is closed (the read
 * raised a Lua error with the FILE open: one descriptor lost a render). */
static void test_template_dir_oom(void) {
  char dir[] = "/tmp/dilattn-tpl-XXXXXX";
  if (!mkdtemp(dir)) return;
  char path[256];
  snprintf(path, sizeof path, "%s/big.tpl", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  for (int i = 0; i < 1 << 16; i++) fputs("/* filler line of a template far larger than the limit */\n", f);
  fclose(f);
  setenv("DILATTN_TEMPLATE_DIR", dir, 1);
  da_context *ctx;
  da_context_create(&ctx);
  char *out = NULL;
  const int before = open_fds();
  int failed = 0;
  for (int i = 0; i < 20; i++) {
    const da_status st = render_text(ctx, "{{ include('big.tpl') }}", 20000000, 2u << 20, &out);
    failed += st != DA_OK;
    free(out), out = NULL;
  }
  const int after = open_fds();
  TU_CHECK(failed == 20, "a 3.8 MB template under a 2 MiB limit: %d of 20 renders failed (%s)", failed,
           da_context_last_error(ctx));
  TU_CHECK(before >= 0 && after == before, "file descriptors: %d before 20 failed renders, %d after", before, after);
  da_context_destroy(ctx);
  unsetenv("DILATTN_TEMPLATE_DIR");
  unlink(path);
  rmdir(dir);
}

int main(void) {
  test_template_dir_oom();
  test_old_cuda_args();
  test_fdiv();
  test_lpt_heads();
  test_run_period();
  test_determinism();
  test_templates();
  test_template_dir();
  return tu_report();
}
