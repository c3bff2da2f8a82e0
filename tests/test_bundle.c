/* test_bundle.c - AOT bundles (issue 5): the lookup order memory -> bundle -> disk ->
 * compile; DILATTN_DISABLE_JIT with and without the bundle (the error names the kernel);
 * a bundle of another library version skipped; an artifact for another arch not used,
 * one of another compiler used; a corrupt artifact skipped; a corrupt, incomplete or missing manifest is a
 * clear error, never a crash; bundles linked in as data.
 * Run: build/tests/test_bundle build/dilattn   (ctest -R bundle) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/render.h"
#include "runtime/bundle.h"
#include "runtime/fileio.h"
#include "runtime/host_compiler.h"
#include "runtime/kernel_cache.h"
#include "test_util.h"

static char base[] = "/tmp/dilattn-bundle-XXXXXX";
static char bdir[600], cfg[600];

static da_spec example(void) {
  da_spec s = tu_spec(2, (const int64_t[]){32, 64}, (const int64_t[]){1, 2}, 2, 2, 8, DA_DTYPE_FLOAT32);
  s.has_scale = 1, s.scale = 0.3125;
  return s;
}

static int runs(da_context *ctx) {
  da_spec s = example();
  da_plan *p = NULL;
  if (da_plan_create(ctx, &s, DA_BACKEND_HOST, &p) != DA_OK) return 0;
  float q[100 * 16], out[100 * 16];
  for (int i = 0; i < 1600; i++) q[i] = (float)(i % 7) * 0.1f;
  da_args a;
  da_args_init(&a, &s, 1, 100, q, q, q, out, NULL);
  int ok = da_plan_execute(p, &a) == DA_OK && out[17] == out[17];
  da_plan_destroy(p);
  return ok;
}

static void fresh_cache(const char *name) {
  char d[700];
  snprintf(d, sizeof d, "%s/cache-%s", base, name);
  setenv("DILATTN_CACHE_DIR", d, 1);
}

/* A context with manifest registered, in a fresh cache: the example runs, its kernel
 * compiled here and not taken from the bundle (a module that does not load here) */
static void compiled_not_bundled(const char *manifest, const char *cache, const char *what) {
  fresh_cache(cache);
  da_context *c;
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, manifest) == DA_OK, "register: %s", da_context_last_error(c));
  TU_CHECK(runs(c), "%s: %s", what, da_context_last_error(c));
  const da__kernel_cache *kc = da__context_kernels(c);
  TU_CHECK(kc->bundle_hits == 0 && kc->builds == 1, "%s: bundle %lld builds %lld", what, kc->bundle_hits, kc->builds);
  da_context_destroy(c);
}

/* Lines of stderr holding needle while three contexts, JIT off and an empty disk cache,
 * each register manifest and fail to run its kernel (its copy refused each time) */
static int refusal_lines(const char *manifest, const char *cache, const char *needle) {
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  fresh_cache(cache);
  char errf[700], *cmd = NULL;
  snprintf(errf, sizeof errf, "%s/%s-stderr", base, cache);
  fflush(stderr);
  const int saved = dup(2), fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  for (int k = 0; k < 3; k++) {
    da_context *c;
    da_context_create(&c);
    da_context_register_bundle(c, manifest);
    TU_CHECK(!runs(c), "%s: JIT off, a bundle whose copy is refused: no plan", cache);
    da_context_destroy(c);
  }
  fflush(stderr);
  dup2(saved, 2), close(saved), close(fd);
  unsetenv("DILATTN_DISABLE_JIT");
  int n = -1;
  FILE *p = asprintf(&cmd, "grep -c '%s' %s", needle, errf) > 0 ? popen(cmd, "r") : NULL;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  free(cmd);
  return n;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

/* Copy the bundle into a new folder with the manifest edited by sed expression expr. */
static void variant(const char *name, const char *expr, char *manifest_out, size_t cap) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd, "rm -rf %s/%s && cp -r %s %s/%s && sed -i '%s' %s/%s/manifest.json", base, name, bdir, base,
           name, expr, base, name);
  TU_CHECK(system(cmd) == 0, "variant %s", name);
  snprintf(manifest_out, cap, "%s/%s/manifest.json", base, name);
}

/* Record this process's CC as the compiler of the host artifacts of manifest (the text
 * a bundle built by it would hold): its module is then refused for what it is (it does not
 * load here), not for its CC's other options (accept_host's first check) */
static void record_this_cc(const char *manifest) {
  size_t len = 0;
  char *text = da__read_file(manifest, &len), *out = malloc(len + 4096), *o = out;
  TU_CHECK(text && out, "read %s", manifest);
  if (!text || !out) return;
  const char *p = text, *at;
  while ((at = strstr(p, "\"compiler\": \""))) {
    at += strlen("\"compiler\": \"");
    memcpy(o, p, (size_t)(at - p)), o += at - p;
    o += sprintf(o, "%s", da__host_cc());
    p = strchr(at, '"');
  }
  strcpy(o, p);
  write_text(manifest, out);
  free(text), free(out);
}

/* A manifest of one host artifact (key, source src) of size bytes with checksum sha, the
 * size member's JSON text as given. */
static void one_artifact(char *text, size_t cap, const char *key, const char *src, const char *size, const char *sha) {
  snprintf(text, cap,
           "{\"format\":\"dilattn-bundle\",\"library\":\"%s\",\"schema\":%d,\"kernels\":[{\"kernel\":\"K\","
           "\"source_key\":\"%s\",\"artifacts\":[{\"arch\":\"host\",\"key\":\"%s\",\"file\":\"k.so\"%s%s,"
           "\"sha256\":\"%s\"}]}]}",
           da_version(), DA_CACHE_SCHEMA_VERSION, src, key, size ? ",\"size\":" : "", size ? size : "", sha);
}

/* A manifest registered again after its artifacts were rebuilt (same origin, new manifest):
 * lookups take the newest registration, not the old entry whose checksum no longer holds. */
static void test_newest_first(void) {
  da_context *ctx;
  da_context_create(&ctx);
  da__bundles *b = da__bundles_create();
  const char *const key = "1111111111111111111111111111111111111111111111111111111111111111";
  const char *const src = "2222222222222222222222222222222222222222222222222222222222222222";
  static const unsigned char old_art[] = "old kernel", new_art[] = "rebuilt kernel";
  const unsigned char *blobs[2] = {old_art, new_art};
  const size_t sizes[2] = {sizeof old_art, sizeof new_art};
  for (int v = 0; v < 2; v++) {
    char sha[65], text[1024], size[32];
    da__sha256_hex(blobs[v], sizes[v], sha);
    snprintf(size, sizeof size, "%zu", sizes[v]);
    one_artifact(text, sizeof text, key, src, size, sha);
    const char *names[1] = {"k.so"};
    TU_CHECK(da__bundles_add(ctx, b, text, strlen(text), "bundle-x", NULL, NULL, names, &blobs[v], &sizes[v], 1) == DA_OK,
             "register version %d: %s", v, da_context_last_error(ctx));
  }
  void *bytes = NULL;
  size_t n = 0;
  TU_CHECK(da__bundles_find(b, "host", key, &bytes, &n) == 1 && n == sizeof new_art && !memcmp(bytes, new_art, n),
           "lookup after re-registration: %s", bytes ? (const char *)bytes : "(none)");
  free(bytes);
  da__bundles_destroy(b);
  da_context_destroy(ctx);
}

/* A device of an arch no artifact is for takes the nearest older arch of its major (sm_86's
 * before sm_80's on sm_89, whatever the order registered: it took the last registered), none
 * of another major or of an arch-specific target (sm_90a), and never for a three-digit arch */
static void test_compatible_nearest(void) {
  da__bundles *b = da__bundles_create();
  const char *const src = "3333333333333333333333333333333333333333333333333333333333333333";
  static const unsigned char a86[] = "sm_86 cubin", a80[] = "sm_80 cubin", a90a[] = "sm_90a cubin";
  const unsigned char *blobs[3] = {a86, a80, a90a};
  const size_t sizes[3] = {sizeof a86, sizeof a80, sizeof a90a};
  const char *const names[3] = {"k86", "k80", "k90a"}, *const archs[3] = {"sm_86", "sm_80", "sm_90a"};
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof text,
                              "{\"format\":\"dilattn-bundle\",\"library\":\"%s\",\"schema\":%d,\"kernels\":[{\"kernel\":"
                              "\"K\",\"source_key\":\"%s\",\"artifacts\":[",
                              da_version(), DA_CACHE_SCHEMA_VERSION, src);
  for (int i = 0; i < 3; i++) {
    char sha[65];
    da__sha256_hex(blobs[i], sizes[i], sha);
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "%s{\"arch\":\"%s\",\"key\":\"%064d\",\"file\":\"%s\",\"size\":%zu,\"sha256\":\"%s\"}",
                          i ? "," : "", archs[i], i + 1, names[i], sizes[i], sha);
  }
  snprintf(text + n, sizeof text - n, "]}]}");
  TU_CHECK(da__bundles_add(NULL, b, text, strlen(text), "compat", NULL, NULL, names, blobs, sizes, 3) == DA_OK,
           "register the sm_86, sm_80 and sm_90a artifacts");
  const char *const key = "9999999999999999999999999999999999999999999999999999999999999999";
  static const struct {
    const char *dev;
    const unsigned char *want;
  } cases[] = {{"sm_89", a86}, {"sm_87", a86}, {"sm_86", NULL /* its own key: looked up before, not here */},
               {"sm_85", a80}, {"sm_90", NULL}, {"sm_75", NULL}, {"sm_100", NULL}, {"sm_89a", NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    void *bytes = NULL;
    size_t len = 0;
    const int got = da__bundles_find_source(b, cases[i].dev, key, src, NULL, NULL, &bytes, &len);
    const int ok = cases[i].want ? got && len == strlen((const char *)cases[i].want) + 1 && !memcmp(bytes, cases[i].want, len)
                   : !strcmp(cases[i].dev, "sm_86") ? got && !memcmp(bytes, a86, sizeof a86) /* (another key: taken) */
                                                    : !got;
    TU_CHECK(ok, "a device of %s: %s (want %s)", cases[i].dev, got ? (const char *)bytes : "nothing",
             cases[i].want ? (const char *)cases[i].want : "nothing");
    free(bytes);
  }
  da__bundles_destroy(b);
}

/* Two bundles hold the same artifact and the newer one's bytes are damaged: the older,
 * sound copy is found (it was a miss: with DILATTN_DISABLE_JIT, a failed plan). An
 * artifact whose size is missing or not an integer is a parse error (it had read as 0 and
 * every lookup then failed its checksum). */
static void test_damaged_newer(void) {
  da_context *ctx;
  da_context_create(&ctx);
  da__bundles *b = da__bundles_create();
  const char *const key = "3333333333333333333333333333333333333333333333333333333333333333";
  const char *const src = "4444444444444444444444444444444444444444444444444444444444444444";
  static const unsigned char sound[] = "sound kernel", damaged[] = "sound kernex";
  const unsigned char *blobs[2] = {sound, damaged};
  const size_t sizes[2] = {sizeof sound, sizeof damaged};
  char sha[65], text[1024], size[32];
  da__sha256_hex(sound, sizeof sound, sha); /* both manifests name the sound bytes */
  snprintf(size, sizeof size, "%zu", sizeof sound);
  one_artifact(text, sizeof text, key, src, size, sha);
  const char *names[1] = {"k.so"}, *origins[2] = {"bundle-old", "bundle-new"};
  for (int v = 0; v < 2; v++)
    TU_CHECK(da__bundles_add(ctx, b, text, strlen(text), origins[v], NULL, NULL, names, &blobs[v], &sizes[v], 1) == DA_OK,
             "register %s: %s", origins[v], da_context_last_error(ctx));
  void *bytes = NULL;
  size_t n = 0;
  TU_CHECK(da__bundles_find(b, "host", key, &bytes, &n) == 1 && n == sizeof sound && !memcmp(bytes, sound, n),
           "a damaged newer copy hides the sound older one: %s", bytes ? (const char *)bytes : "(a miss)");
  free(bytes);
  static const char *const bad_sizes[4] = {NULL, "\"13\"", "13.0", "null"};
  for (int i = 0; i < 4; i++) {
    one_artifact(text, sizeof text, key, src, bad_sizes[i], sha);
    const da_status st = da__bundles_add(ctx, b, text, strlen(text), "bundle-bad-size", NULL, NULL, names, &blobs[0], &sizes[0], 1);
    TU_CHECK(st == DA_ERR_PARSE && strstr(da_context_last_error(ctx), "incomplete or invalid"),
             "an artifact with size %s: %s (%s)", bad_sizes[i] ? bad_sizes[i] : "missing", da_status_name(st),
             da_context_last_error(ctx));
  }
  da__bundles_destroy(b);
  da_context_destroy(ctx);
}

/* The host artifact key holds all of CC, however long (it was cut at 512 characters of
 * text: two compiler commands differing past that shared one key, so a kernel built by one
 * was taken for the other). */
static void test_host_key_cc(void) {
  const char *const src = "5555555555555555555555555555555555555555555555555555555555555555";
  char a[700], b[700], ka[65], kb[65], ks[65], ks2[65];
  memset(a, 'A', sizeof a - 1), a[sizeof a - 1] = 0;
  memcpy(a, "cc -DX=", 7);
  memcpy(b, a, sizeof b);
  b[sizeof b - 2] = 'B'; /* differs in its last character */
  const char *was = getenv("CC");
  char saved[256] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  setenv("CC", a, 1), da__host_artifact_key(src, ka);
  setenv("CC", b, 1), da__host_artifact_key(src, kb);
  setenv("CC", "cc", 1), da__host_artifact_key(src, ks);
  setenv("CC", "cc -O1", 1), da__host_artifact_key(src, ks2);
  if (was) setenv("CC", saved, 1);
  else unsetenv("CC");
  TU_CHECK(strcmp(ka, kb) != 0, "two CCs differing in their 699th character share a host key");
  TU_CHECK(strcmp(ks, ks2) != 0 && strcmp(ks, ka) != 0, "short CCs' keys");
}

/* da__split_path, which finds a manifest's folder (its artifacts' names are relative to
 * it), and the folders the CLI's outputs and npy's fsync go to */
static void test_split_path(void) {
  static const struct {
    const char *path, *dir, *name;
  } cases[] = {{"a/b.npy", "a", "b.npy"},     {"b.npy", ".", "b.npy"},         {"/b.npy", "/", "b.npy"},
               {"/x/y/z.json", "/x/y", "z.json"}, {"x//y", "x/", "y"},          {"dir/", "dir", ""}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[64] = "unset";
    const char *name = da__split_path(cases[i].path, dir, sizeof dir);
    TU_CHECK(name && !strcmp(dir, cases[i].dir) && !strcmp(name, cases[i].name), "split %s: %s, %s (want %s, %s)",
             cases[i].path, dir, name ? name : "(null)", cases[i].dir, cases[i].name);
  }
  char small[4];
  errno = 0;
  TU_CHECK(!da__split_path("abcd/e", small, sizeof small) && errno == ENAMETOOLONG, "a folder past cap: refused");
  TU_CHECK(da__split_path("abc/e", small, sizeof small) && !strcmp(small, "abc"), "a folder that just fits");
}

/* The extensions a host module may name (the da_isa_words of its source, rendered into
 * dir) are all ones the runtime checks; and its CPUID table agrees with the kernel's view of
 * this CPU (/proc/cpuinfo's flags, which Linux clears where the OS does not enable a state) */
static void test_isa_table(const char *dir) {
#if defined(__x86_64__)
  char cmd[800];
  snprintf(cmd, sizeof cmd, "cat %s/*.c", dir);
  FILE *f = popen(cmd, "r");
  char line[512], listed[4096] = " ";
  int in = 0, words = 0;
  while (f && fgets(line, sizeof line, f)) {
    char w[64];
    if (strstr(line, "da_isa_words[] =")) in = 1;
    else if (in && strchr(line, ';')) in = 0;
    else if (in && sscanf(line, "#ifdef %63s", w) == 1 && strlen(listed) + strlen(w) + 2 < sizeof listed)
      strcat(strcat(listed, w), " ");
    else if (in && sscanf(line, " \" %63[^\"]\"", w) == 1) {
      words++;
      TU_CHECK(da__host_isa_has(w) >= 0, "a host module may name %s, which the runtime does not check", w);
    }
  }
  if (f) pclose(f);
  TU_CHECK(words >= 30, "the host source's da_isa_words: %d words", words);
  /* every feature macro cc defines for these CPUs beyond its default is listed there, or is
   * known not to be emitted from plain C: a new compiler's fails here until it is sorted,
   * rather than run into SIGILL. (AVX10 comes with the AVX-512 macros, which are listed;
   * AVX-IFMA, AVX-VNNI-INT8 / INT16 and AVX-NE-CONVERT serve integer dot products and bf16
   * conversions, which these kernels do not do; GCC 13 and 14 define them for their newer
   * Intel CPUs) */
  static const char *const not_emitted =
      " __ABM__ __ADX__ __AES__ __AMX_BF16__ __AMX_INT8__ __AMX_TILE__ __AMX_FP16__ __AMX_COMPLEX__ __AVX512PF__"
      " __AVX512VP2INTERSECT__ __CLDEMOTE__ __CLFLUSHOPT__ __CLWB__ __CLZERO__ __CRC32__ __ENQCMD__ __FSGSBASE__"
      " __FXSR__ __HRESET__ __KL__ __WIDEKL__ __LAHF_SAHF__ __LWP__ __MWAITX__ __MOVDIR64B__ __MOVDIRI__ __PCLMUL__"
      " __PCONFIG__ __PKU__ __PREFETCHWT1__ __PRFCHW__ __PTWRITE__ __RDPID__ __RDRND__ __RDSEED__ __RTM__ __SERIALIZE__"
      " __SGX__ __SHA__ __SHSTK__ __SSE4A__ __TSXLDTRK__ __UINTR__ __VAES__ __VPCLMULQDQ__ __WAITPKG__ __WBNOINVD__"
      " __XSAVEC__ __XSAVEOPT__ __XSAVES__ __XSAVE__ __MMX_WITH_SSE__ __CMPCCXADD__ __RAOINT__ __PREFETCHI__"
      " __AVX10_1__ __AVX10_1_256__ __AVX10_1_512__ __AVX10_2__ __AVX10_2_256__ __AVX10_2_512__ __EVEX512__"
      " __AVXIFMA__ __AVXVNNIINT8__ __AVXVNNIINT16__ __AVXNECONVERT__ __SHA512__ __SM3__ __SM4__ __USER_MSR__ ";
  static const char *const arches[] = {"x86-64-v4", "sapphirerapids", "graniterapids", "alderlake", "tigerlake",
                                       "icelake-server", "knl", "znver3", "znver4", "bdver4"};
  int sorted = 0;
  for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) {
    char diff[600];
    snprintf(diff, sizeof diff, "echo | cc -march=%s -dM -E - 2>/dev/null | grep -oE '^#define __[A-Z0-9_]+__ 1$' | "
                                "grep -vxF -f <(echo | cc -dM -E - | grep -oE '^#define __[A-Z0-9_]+__ 1$')", arches[i]);
    char *bash = NULL;
    if (asprintf(&bash, "bash -c \"%s\"", diff) < 0) continue;
    FILE *m = popen(bash, "r");
    free(bash);
    while (m && fgets(line, sizeof line, m)) {
      char mac[80], pad[90];
      if (sscanf(line, "#define %79s", mac) != 1) continue;
      snprintf(pad, sizeof pad, " %s ", mac);
      sorted++;
      TU_CHECK(strstr(listed, pad) || strstr(not_emitted, pad),
               "cc -march=%s defines %s, which prims.h's da_isa_words neither lists nor is known not to need", arches[i],
               mac);
    }
    if (m) pclose(m);
  }
  TU_CHECK(sorted > 40, "feature macros of cc's -march CPUs: %d", sorted);
  static const char *const map[][2] = {
      {"sse3", "pni"},         {"ssse3", "ssse3"},     {"sse4.1", "sse4_1"},     {"sse4.2", "sse4_2"},
      {"popcnt", "popcnt"},    {"sse4a", "sse4a"},     {"lzcnt", "abm"},         {"movbe", "movbe"},
      {"avx", "avx"},          {"avx2", "avx2"},       {"fma", "fma"},           {"fma4", "fma4"},
      {"xop", "xop"},          {"f16c", "f16c"},       {"bmi", "bmi1"},          {"bmi2", "bmi2"},
      {"adx", "adx"},          {"aes", "aes"},         {"pclmul", "pclmulqdq"},  {"vpclmulqdq", "vpclmulqdq"},
      {"gfni", "gfni"},        {"vaes", "vaes"},       {"sha", "sha_ni"},        {"avxvnni", "avx_vnni"},
      {"avx512f", "avx512f"},  {"avx512vl", "avx512vl"}, {"avx512bw", "avx512bw"}, {"avx512dq", "avx512dq"},
      {"avx512cd", "avx512cd"}, {"avx512vbmi", "avx512vbmi"}, {"avx512ifma", "avx512ifma"},
      {"avx512vbmi2", "avx512_vbmi2"}, {"avx512vnni", "avx512_vnni"}, {"avx512bitalg", "avx512_bitalg"},
      {"avx512vpopcntdq", "avx512_vpopcntdq"}, {"avx512bf16", "avx512_bf16"}, {"avx512fp16", "avx512_fp16"},
      {"avx512vp2intersect", "avx512_vp2intersect"}, {"amx-tile", "amx_tile"}, {"tbm", "tbm"},
      {"avx512er", "avx512er"}, {"avx512pf", "avx512pf"}};
  static char flags[16384]; /* the first CPU's flags line (a /proc file's size is 0: read as lines) */
  FILE *ci = fopen("/proc/cpuinfo", "r");
  int have = 0;
  while (ci && !have && fgets(flags, sizeof flags, ci)) have = !strncmp(flags, "flags", 5);
  if (ci) fclose(ci);
  if (!have) {
    printf("SKIP: no flags line in /proc/cpuinfo\n");
    return;
  }
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    char w[80];
    snprintf(w, sizeof w, " %s", map[i][1]);
    const char *at = strstr(flags, w);
    while (at && at[strlen(w)] != ' ' && at[strlen(w)] != '\n') at = strstr(at + 1, w);
    TU_CHECK(da__host_isa_has(map[i][0]) == (at != NULL), "%s: CPUID says %d, /proc/cpuinfo's %s %s", map[i][0],
             da__host_isa_has(map[i][0]), map[i][1], at ? "is there" : "is not");
  }
#else
  (void)dir;
#endif
}

int main(int argc, char **argv) {
  test_split_path();
  test_newest_first();
  test_compatible_nearest();
  test_damaged_newer();
  test_host_key_cc();
  if (argc < 2 || !mkdtemp(base)) return 1;
  snprintf(bdir, sizeof bdir, "%s/bundle", base);
  snprintf(cfg, sizeof cfg, "%s/example.json", base);
  write_text(cfg, "{\"segment_lengths\":[32,64],\"dilation_rates\":[1,2],\"num_heads\":2,\"head_dim\":8,\"scale\":0.3125}");
  char cmd[2000], manifest[700];
  snprintf(cmd, sizeof cmd, "mkdir -p %s && %s gen %s --compile --bundle example -o %s > /dev/null", bdir, argv[1], cfg, bdir);
  TU_CHECK(system(cmd) == 0, "dilattn gen --bundle failed");
  snprintf(manifest, sizeof manifest, "%s/manifest.json", bdir);
  test_isa_table(bdir);

  /* 0. the typed header's spec is the config's: a scale of -0.0 was written "-0", the int
   * 0, so the header's spec (+0.0) was not the bundle's and its _plan found no kernel */
  {
    char zdir[700], zcfg[700], hdr[800], zcmd[3000];
    snprintf(zdir, sizeof zdir, "%s/negzero", base);
    snprintf(zcfg, sizeof zcfg, "%s/negzero.json", base);
    write_text(zcfg, "{\"segment_lengths\":[32],\"dilation_rates\":[1],\"num_heads\":2,\"head_dim\":8,\"scale\":-0.0}");
    snprintf(zcmd, sizeof zcmd, "mkdir -p %s && %s gen %s --compile --bundle nz -o %s > /dev/null", zdir, argv[1],
             zcfg, zdir);
    TU_CHECK(system(zcmd) == 0, "dilattn gen --bundle nz failed");
    snprintf(hdr, sizeof hdr, "%s/nz.h", zdir);
    size_t hlen = 0;
    char *h = da__read_file(hdr, &hlen);
    const char *at = h ? strstr(h, "s->scale = ") : NULL;
    char lit[64] = "";
    if (at) sscanf(at + 11, "%63[^;]", lit);
    const double v = strtod(lit, NULL);
    TU_CHECK(at && strpbrk(lit, ".eE") && v == 0.0 && signbit(v), "the typed header's scale of -0.0: '%s'", lit);
    free(h);
  }

  /* 1. bundle only, JIT disabled: the kernel comes from the bundle, nothing compiles */
  fresh_cache("1");
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  da_context *c;
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, manifest) == DA_OK, "register: %s", da_context_last_error(c));
  const size_t arts = da__bundles_count(da__context_kernels(c)->bundles);
  TU_CHECK(da_context_register_bundle(c, manifest) == DA_OK, "registering twice");
  TU_CHECK(arts > 0 && da__bundles_count(da__context_kernels(c)->bundles) == arts,
           "registering twice added artifacts: %zu, then %zu", arts, da__bundles_count(da__context_kernels(c)->bundles));
  TU_CHECK(runs(c), "plan from the bundle: %s", da_context_last_error(c));
  da__kernel_cache *kc = da__context_kernels(c);
  TU_CHECK(kc->bundle_hits == 1 && kc->builds == 0 && kc->disk_hits == 0, "order: bundle %lld disk %lld builds %lld",
           kc->bundle_hits, kc->disk_hits, kc->builds);
  TU_CHECK(runs(c) && kc->bundle_hits == 1, "memory comes before the bundle");
  da_context_destroy(c);

  /* 1b. a manifest registered by a relative path, then the program changes its working
   * directory (a daemon does), and one registered through a link from another folder (a
   * "current" link to a release's): its artifacts are beside the manifest itself, found at
   * registration (every lookup said "missing", and JIT compiled or the plan failed) */
  {
    char cwd[4096], ldir[700], link[800];
    TU_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    snprintf(ldir, sizeof ldir, "%s/linked", base);
    snprintf(link, sizeof link, "%s/manifest.json", ldir);
    TU_CHECK(mkdir(ldir, 0700) == 0 && symlink(manifest, link) == 0, "a link to the manifest");
    /* and the manifest alone linked into a folder of the artifacts (they are beside the
     * link, not beside its target: found so before, and after the fix above too) */
    char alone[700], lone_link[800], *cmd = NULL;
    snprintf(alone, sizeof alone, "%s/alone", base);
    snprintf(lone_link, sizeof lone_link, "%s/manifest.json", alone);
    TU_CHECK(asprintf(&cmd, "mkdir -p %s/manifest-only %s && cp %s %s/manifest-only/ && cp %s/*.so %s/ && ln -s "
                            "%s/manifest-only/manifest.json %s", base, alone, manifest, base, bdir, alone, base,
                      lone_link) > 0 && system(cmd) == 0, "a manifest linked alone beside the artifacts");
    free(cmd);
    static const char *const hows[] = {"by a relative path, then chdir", "through a link",
                                       "through a link beside the artifacts"};
    for (int how = 0; how < 3; how++) {
      fresh_cache(how == 2 ? "1b-alone" : how ? "1b-link" : "1b-rel");
      da_context_create(&c);
      TU_CHECK(chdir(base) == 0, "chdir %s", base);
      TU_CHECK(da_context_register_bundle(c, how == 2 ? lone_link : how ? link : "bundle/manifest.json") == DA_OK,
               "register: %s", da_context_last_error(c));
      TU_CHECK(chdir("/") == 0, "chdir /");
      TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 1, "1b: a manifest registered %s, JIT off: %s",
               hows[how], da_context_last_error(c));
      da_context_destroy(c);
    }
    TU_CHECK(chdir(cwd) == 0, "chdir back");
  }

  /* 2. JIT disabled and no bundle: an error naming the kernel */
  fresh_cache("2");
  da_context_create(&c);
  da_spec s = example();
  da_plan *p = NULL;
  da_status st = da_plan_create(c, &s, DA_BACKEND_HOST, &p);
  TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(c), "DILATTN_DISABLE_JIT") &&
               strstr(da_context_last_error(c), "da_fwd_lnmod_w32_64_r1_2_h2_2_d8_f32") &&
               strstr(da_context_last_error(c), "in no registered bundle"),
           "no bundle, no JIT: %s %s", da_status_name(st), da_context_last_error(c));
  da_context_destroy(c);
  /* 2b. the bundle's kernel asked for with other tunables (another source under the same
   * name, as a tuning record asks): the error says the bundle holds another variant (it
   * said "in no registered bundle" of a kernel the bundle's header names) */
  fresh_cache("2b");
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, manifest) == DA_OK, "2b: register: %s", da_context_last_error(c));
  da_plan_options other = {.tile_q = 16, .tile_k = 32};
  st = da_plan_create_ex(c, &s, DA_BACKEND_HOST, &other, &p);
  TU_CHECK(st == DA_ERR_UNSUPPORTED && strstr(da_context_last_error(c), "in no registered bundle in this form") &&
               strstr(da_context_last_error(c), "other tunables"),
           "2b: a bundled kernel with other tiles, JIT off: %s %s", da_status_name(st), da_context_last_error(c));
  da_context_destroy(c);
  unsetenv("DILATTN_DISABLE_JIT");

  /* 3. the disk cache comes after bundles: with both, the bundle answers */
  fresh_cache("3");
  da_context_create(&c);
  TU_CHECK(runs(c) && da__context_kernels(c)->builds == 1, "JIT fills the disk cache");
  da_context_destroy(c);
  da_context_create(&c);
  da_context_register_bundle(c, manifest);
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 1 && da__context_kernels(c)->disk_hits == 0,
           "bundle before disk");
  da_kernel_cache_stats ks; /* (the public counters) */
  TU_CHECK(da_context_kernel_cache_stats(c, &ks) == DA_OK && ks.bundle_hits == 1 && ks.loaded == 1 && ks.builds == 0 &&
               ks.disk_hits == 0,
           "a bundle's kernel in the stats: %llu bundle hits, %llu loaded", (unsigned long long)ks.bundle_hits,
           (unsigned long long)ks.loaded);
  da_context_destroy(c);
  da_context_create(&c);
  TU_CHECK(runs(c) && da__context_kernels(c)->disk_hits == 1, "disk before compile");
  da_context_destroy(c);

  /* 4. another library version: skipped (DA_OK), JIT takes over */
  char m2[700];
  variant("oldver", "s/\"library\": \"[^\"]*\"/\"library\": \"0.0.1\"/", m2, sizeof m2);
  fresh_cache("4");
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, m2) == DA_OK, "old version registration: %s", da_context_last_error(c));
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 0 && da__context_kernels(c)->builds == 1,
           "old-version bundle used");
  da_context_destroy(c);

  /* 5. an artifact for another arch: not used, JIT */
  variant("otherarch", "s/\"arch\": \"host\"/\"arch\": \"sm_80\"/", m2, sizeof m2);
  fresh_cache("5");
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, m2) == DA_OK, "other arch registration");
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 0 && da__context_kernels(c)->builds == 1,
           "other-arch artifact used");
  da_context_destroy(c);

  /* 5b. built by another compiler (CC here is not the one gen ran with, so the artifact
   * key computed here differs): the bundle's build of the same source serves, with JIT off
   * and with JIT on (no compile: a bundle is made to run without its compiler), where the
   * CC that built it had this one's options (gcc for cc), as the disk cache's (5d). Where
   * they differ, or the manifest does not say (one written before it recorded its CC), it
   * is not taken: compiled here, or with JIT off an error saying so. A bundle built with
   * CC='cc -ffast-math' was served over this CC's exact build, its NaNs lost. */
  {
    const char *was = getenv("CC");
    char saved[512] = "", m_nocc[700], fdir[700], fmanifest[800], *fcmd = NULL;
    if (was) snprintf(saved, sizeof saved, "%s", was);
    variant("nocc", "/\"compiler\": /d", m_nocc, sizeof m_nocc);
    snprintf(fdir, sizeof fdir, "%s/fastmath", base);
    snprintf(fmanifest, sizeof fmanifest, "%s/manifest.json", fdir);
    TU_CHECK(asprintf(&fcmd, "mkdir -p %s && CC='cc -ffast-math' DILATTN_CACHE_DIR=%s/fm-cache %s gen %s --compile "
                             "--bundle fm -o %s > /dev/null", fdir, base, argv[1], cfg, fdir) > 0 && system(fcmd) == 0,
             "a bundle built with CC='cc -ffast-math'");
    free(fcmd);
    const struct {
      const char *manifest, *cc;
      int taken;
    } cases[] = {
        {manifest, "gcc", 1},                               /* another program, the same options */
        {manifest, "cc -DDILATTN_ANOTHER_COMPILER=1", 0},   /* other options here */
        {fmanifest, "cc", 0},                               /* other options in the bundle */
        {m_nocc, "gcc", 0},                                 /* no record */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      for (int jit = 0; jit < 2; jit++) {
        setenv("CC", cases[i].cc, 1);
        char cname[40];
        snprintf(cname, sizeof cname, "5b-%zu-%d", i, jit);
        fresh_cache(cname);
        if (!jit) setenv("DILATTN_DISABLE_JIT", "1", 1);
        da_context_create(&c);
        TU_CHECK(da_context_register_bundle(c, cases[i].manifest) == DA_OK, "register: %s", da_context_last_error(c));
        const int ok = runs(c);
        kc = da__context_kernels(c);
        TU_CHECK(cases[i].taken ? ok && kc->bundle_hits == 1 && kc->builds == 0
                 : jit        ? ok && kc->bundle_hits == 0 && kc->builds == 1
                              : !ok && strstr(da_context_last_error(c), "DILATTN_DISABLE_JIT") &&
                                    strstr(da_context_last_error(c), "held by a registered bundle, but no copy was taken"),
                 "5b: case %zu (CC='%s'), JIT %s: ran %d, bundle %lld builds %lld (%s)", i, cases[i].cc,
                 jit ? "on" : "off", ok, kc->bundle_hits, kc->builds, ok ? "" : da_context_last_error(c));
        da_context_destroy(c);
        unsetenv("DILATTN_DISABLE_JIT");
      }
    /* the refusal is said once a process, not once a plan: an engine's layers each asked
     * and each printed it (helper-70: 7 lines for 2 kernels) */
    setenv("CC", "cc -DDILATTN_ONCE=1", 1);
    TU_CHECK(refusal_lines(manifest, "5b-once", "whose options are not those of this process") == 1,
             "5b-once: the refusal of a bundle's module is said more than once a process");
    if (was) setenv("CC", saved, 1);
    else unsetenv("CC");
  }

  /* 5c. another compiler's module that does not load here (its CC linked a library this
   * machine lacks): not taken, compiled here (it failed the plan) */
  {
    char ldir[700], lbundle[700], lmanifest[800], cc[900], *lcmd = NULL;
    snprintf(ldir, sizeof ldir, "%s/libx", base);
    snprintf(lbundle, sizeof lbundle, "%s/libx-bundle", base);
    snprintf(cc, sizeof cc, "cc -L%s -Wl,--no-as-needed -ldilattnx", ldir);
    TU_CHECK(asprintf(&lcmd,
             "mkdir -p %s %s && echo 'int dilattnx(void) { return 1; }' > %s/x.c && cc -shared -fPIC -o "
             "%s/libdilattnx.so %s/x.c && CC='%s' DILATTN_CACHE_DIR=%s/libx-cache %s gen %s --compile --bundle lx -o %s "
             "> /dev/null && rm %s/libdilattnx.so",
             ldir, lbundle, ldir, ldir, ldir, cc, base, argv[1], cfg, lbundle, ldir) > 0 && system(lcmd) == 0,
             "a bundle whose CC links libdilattnx");
    free(lcmd);
    snprintf(lmanifest, sizeof lmanifest, "%s/manifest.json", lbundle);
    record_this_cc(lmanifest);
    /* said once a process, though each try's error names a temp file of its own (first:
     * the compile below meets the refusal too) */
    TU_CHECK(refusal_lines(lmanifest, "5c-once", "does not load here") == 1,
             "5c-once: a bundle's module that does not load here is said more than once a process");
    compiled_not_bundled(lmanifest, "5c", "a bundle's module that does not load here");
  }

  /* 5d. the disk cache's build by another C compiler (no bundle): taken where nothing
   * compiles here (JIT off; CC not found) and the build's CC had this one's options, not
   * where CC compiles (the keys say what to build) nor where its options differ (-O0,
   * -ffast-math: not an equivalent); a cache folder copied to a machine without its compiler
   * was of no use. A CC that is there but misconfigured is its own error. */
  {
    const char *was = getenv("CC");
    char saved[512] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    fresh_cache("5d");
    unsetenv("CC");
    da_context_create(&c);
    TU_CHECK(runs(c) && da__context_kernels(c)->builds == 1, "5d: compiled into the disk cache: %s",
             da_context_last_error(c));
    da_context_destroy(c);
    char many[600] = "cc";
    for (int i = 0; i < 65; i++) strcat(many, " -DX");
    const struct {
      const char *cc;
      int jit_off, ok, disk, builds;
      const char *err;
    } cases[] = {
        {"gcc", 1, 1, 1, 0, NULL},                           /* another program, the same options */
        {"/nonexistent/dilattn-cc", 0, 1, 1, 0, NULL},       /* no compiler */
        {"/nonexistent/dilattn-cc -O0", 0, 0, 0, 0, "not taken here"}, /* no compiler, other options */
        {"gcc -ffast-math", 1, 0, 0, 0, "not taken here"},   /* JIT off, other options */
        {"cc -DDILATTN_THIRD=1", 0, 1, 0, 1, NULL},          /* a compiler: its own build */
        {many, 0, 0, 0, 0, "more than 64 words"},            /* a compiler misconfigured: its error */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      setenv("CC", cases[i].cc, 1);
      if (cases[i].jit_off) setenv("DILATTN_DISABLE_JIT", "1", 1);
      da_context_create(&c);
      const int ok = runs(c);
      kc = da__context_kernels(c);
      TU_CHECK(ok == cases[i].ok && kc->disk_hits == cases[i].disk && kc->builds == cases[i].builds &&
                   (ok || strstr(da_context_last_error(c), cases[i].err)),
               "5d, CC=%.40s, JIT %s: ran %d, disk %lld builds %lld (%s)", cases[i].cc, cases[i].jit_off ? "off" : "on",
               ok, kc->disk_hits, kc->builds, ok ? "" : da_context_last_error(c));
      da_context_destroy(c);
      unsetenv("DILATTN_DISABLE_JIT");
    }
    if (was) setenv("CC", saved, 1);
    else unsetenv("CC");
  }

  /* 5e. a module built for instructions this CPU lacks (CC's -m flags, as a -march of another
   * CPU): refused by name where it is loaded, never run into SIGILL; another compiler's
   * bundle of such a module is not taken (compiled here instead). Needs an extension the
   * compiler knows and this CPU lacks: AMD's fma4 or xop (gone since Zen), Intel's
   * avx512fp16 */
  {
    static const char *const cand[][2] = {{"-mfma4", "fma4"}, {"-mxop", "xop"}, {"-mavx512fp16", "avx512_fp16"}};
    const char *flag = NULL, *ext = NULL;
    size_t cl = 0;
    char *cpuinfo = da__read_file("/proc/cpuinfo", &cl);
    for (int i = 0; i < 3 && !flag && cpuinfo; i++) {
      char word[40];
      snprintf(word, sizeof word, " %s", cand[i][1]);
      const char *at = strstr(cpuinfo, word);
      char test[300];
      snprintf(test, sizeof test, "echo 'int x;' | cc %s -x c -c -o /dev/null - 2>/dev/null", cand[i][0]);
      if ((!at || (at[strlen(word)] != ' ' && at[strlen(word)] != '\n')) && system(test) == 0)
        flag = cand[i][0], ext = cand[i][1];
    }
    free(cpuinfo);
    if (!flag) {
      printf("SKIP 5e: this CPU has fma4, xop and avx512_fp16, or cc knows none of them\n");
    } else {
      const char *was = getenv("CC");
      char saved[512] = "", cc[100], want[40];
      if (was) snprintf(saved, sizeof saved, "%s", was);
      snprintf(cc, sizeof cc, "cc %s", flag);
      /* (the first extension of the module's that this CPU lacks: -mfma4 brings sse4a too) */
      snprintf(want, sizeof want, "was compiled for the ");
      setenv("CC", cc, 1);
      fresh_cache("5e");
      da_context_create(&c);
      da_plan *p = NULL;
      const da_spec es = example();
      const da_status st = da_plan_create(c, &es, DA_BACKEND_HOST, &p);
      TU_CHECK(st == DA_ERR_COMPILE && !p && strstr(da_context_last_error(c), want) &&
                   strstr(da_context_last_error(c), "this CPU lacks"),
               "5e: CC='%s' (%s): refused by name (%s: %s)", cc, ext, da_status_name(st), da_context_last_error(c));
      /* a kernel compiled (then found on disk) but refused at its load is not one the context
       * holds: the public counters count none of it, however often it is asked for (they
       * counted each lookup: 1 build, then a disk hit a try, with 0 loaded) */
      TU_CHECK(da_plan_create(c, &es, DA_BACKEND_HOST, &p) == DA_ERR_COMPILE, "5e: refused again");
      da_kernel_cache_stats ks;
      TU_CHECK(da_context_kernel_cache_stats(c, &ks) == DA_OK && ks.loaded == 0 && ks.builds == 0 && ks.disk_hits == 0 &&
                   ks.build_ms == 0 && da__context_kernels(c)->builds == 1,
               "5e: a refused module in the stats: %llu loaded, %llu builds, %llu disk hits",
               (unsigned long long)ks.loaded, (unsigned long long)ks.builds, (unsigned long long)ks.disk_hits);
      da_plan_destroy(p);
      da_context_destroy(c);
      char ebundle[700], emanifest[800], *ecmd = NULL;
      snprintf(ebundle, sizeof ebundle, "%s/isa-bundle", base);
      TU_CHECK(asprintf(&ecmd, "mkdir -p %s && CC='%s' DILATTN_CACHE_DIR=%s/isa-cache %s gen %s --compile --bundle isa -o %s "
                               "> /dev/null", ebundle, cc, base, argv[1], cfg, ebundle) > 0 && system(ecmd) == 0,
               "5e: a bundle built by CC='%s'", cc);
      free(ecmd);
      if (was) setenv("CC", saved, 1);
      else unsetenv("CC");
      snprintf(emanifest, sizeof emanifest, "%s/manifest.json", ebundle);
      record_this_cc(emanifest);
      compiled_not_bundled(emanifest, "5e-bundle", "5e: a bundle's module for another CPU");
    }
  }

  /* 6. a corrupt artifact: skipped with a warning, JIT */
  char so[900];
  snprintf(cmd, sizeof cmd, "rm -rf %s/corrupt && cp -r %s %s/corrupt && f=$(ls %s/corrupt/*.host.so) && printf 'Q' | dd of=$f bs=1 seek=3000 conv=notrunc 2>/dev/null",
           base, bdir, base, base);
  TU_CHECK(system(cmd) == 0, "corrupting");
  snprintf(so, sizeof so, "%s/corrupt/manifest.json", base);
  fresh_cache("6");
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle(c, so) == DA_OK, "corrupt artifact registration");
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 0 && da__context_kernels(c)->builds == 1,
           "corrupt artifact used");
  da_context_destroy(c);

  /* 7. manifests that are broken: clear errors */
  da_context_create(&c);
  char bad[700];
  snprintf(bad, sizeof bad, "%s/garbage.json", base);
  write_text(bad, "{\"format\": \"dilattn-bundle\", \"kernels\": [");
  TU_CHECK(da_context_register_bundle(c, bad) == DA_ERR_PARSE && strstr(da_context_last_error(c), "not JSON"),
           "truncated manifest: %s", da_context_last_error(c));
  write_text(bad, "{\"format\": \"something-else\", \"library\": \"0.1.0\", \"kernels\": []}");
  TU_CHECK(da_context_register_bundle(c, bad) == DA_ERR_PARSE, "foreign manifest");
  write_text(bad, "{\"format\":\"dilattn-bundle\",\"schema\":1,\"library\":\"" DA_VERSION_STRING "\","
                  "\"kernels\":[{\"kernel\":\"k\",\"source_key\":\"zz\",\"artifacts\":[]}]}");
  TU_CHECK(da_context_register_bundle(c, bad) == DA_ERR_PARSE && strstr(da_context_last_error(c), "kernels[0]"),
           "incomplete manifest: %s", da_context_last_error(c));
  snprintf(bad, sizeof bad, "%s/absent/manifest.json", base);
  TU_CHECK(da_context_register_bundle(c, bad) == DA_ERR_IO && strstr(da_context_last_error(c), "absent"),
           "missing manifest: %s", da_context_last_error(c));
  TU_CHECK(da_context_register_bundle(c, NULL) == DA_ERR_INVALID_ARGUMENT, "NULL manifest");
  da_context_destroy(c);

  /* 8. a bundle linked in as data */
  fresh_cache("8");
  setenv("DILATTN_DISABLE_JIT", "1", 1);
  size_t mlen = 0, slen = 0;
  char *mtext = da__read_file(manifest, &mlen);
  snprintf(cmd, sizeof cmd, "%s/%s", bdir, "");
  char sofile[300] = "";
  {
    const char *at = strstr(mtext, "\"file\": \"");
    if (at) sscanf(at + 9, "%299[^\"]", sofile);
  }
  char sopath[1000];
  snprintf(sopath, sizeof sopath, "%s/%s", bdir, sofile);
  char *sobytes = da__read_file(sopath, &slen);
  const char *files[1] = {sofile};
  const unsigned char *data[1] = {(const unsigned char *)sobytes};
  size_t sizes[1] = {slen};
  da_bundle_data bd = {"linked", mtext, mlen, 1, files, data, sizes};
  da_context_create(&c);
  TU_CHECK(da_context_register_bundle_data(c, &bd) == DA_OK, "register data: %s", da_context_last_error(c));
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 1, "plan from linked data: %s", da_context_last_error(c));
  da_context_destroy(c);
  /* DILATTN_BUNDLES registers at context creation */
  setenv("DILATTN_BUNDLES", manifest, 1);
  da_context_create(&c);
  TU_CHECK(runs(c) && da__context_kernels(c)->bundle_hits == 1, "DILATTN_BUNDLES: %s", da_context_last_error(c));
  da_context_destroy(c);
  unsetenv("DILATTN_BUNDLES");
  unsetenv("DILATTN_DISABLE_JIT");
  free(mtext);
  free(sobytes);

  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
  return tu_report();
}
