/* prims.h - host-target tile primitives, pasted into every generated host kernel: the
 * kernel ABI struct, dtype loads and stores (fp16 and bf16 converted exactly, stores
 * round to nearest even), the splitmix64 finaliser, and the online-softmax row update.
 * Plain C99; no includes beyond libc and libm. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Must match da__host_args in runtime/host_compiler.h. */
typedef struct {
  const void *q, *k, *v;
  void *out;
  float *lse;
  int64_t batch, seq_len;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3];
  const uint8_t *const *masks; /* explicit layout: per-branch nb x nb bytes */
} da_host_args;

static inline float da_bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t da_f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* IEEE binary16 -> float, exact for every input including subnormals, inf and NaN. */
static inline float da_half_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    float f = (float)man * 5.9604644775390625e-8f; /* man * 2^-24 */
    return sign ? -f : f;
  }
  if (exp == 31) return da_bits_to_f32(sign | 0x7f800000u | (man << 13));
  return da_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float -> binary16, round to nearest even; overflow to inf, NaN kept quiet. */
static inline uint16_t da_f32_to_half(float f) {
  uint32_t u = da_f32_to_bits(f), sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (a < 0x38800000u) { /* below 2^-14: subnormal half */
    float v = da_bits_to_f32(a) * 16777216.0f; /* exact: scale by 2^24 */
    /* v < 2^10; rint in the default rounding mode is nearest even */
    return (uint16_t)(sign | (uint32_t)rintf(v));
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

static inline float da_bf16_to_f32(uint16_t h) { return da_bits_to_f32((uint32_t)h << 16); }
static inline uint16_t da_f32_to_bf16(float f) {
  uint32_t u = da_f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float da_ld_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline float da_ld_f16(const void *p, int64_t i) { return da_half_to_f32(((const uint16_t *)p)[i]); }
static inline float da_ld_bf16(const void *p, int64_t i) { return da_bf16_to_f32(((const uint16_t *)p)[i]); }
static inline void da_st_f32(void *p, int64_t i, float x) { ((float *)p)[i] = x; }
static inline void da_st_f16(void *p, int64_t i, float x) { ((uint16_t *)p)[i] = da_f32_to_half(x); }
static inline void da_st_bf16(void *p, int64_t i, float x) { ((uint16_t *)p)[i] = da_f32_to_bf16(x); }

static inline uint64_t da_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline int64_t da_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t da_abs64(int64_t a) { return a < 0 ? -a : a; }

/* One key of score sc (a masked key, -inf, adds nothing) into a row's (acc, lsum) */
static inline void da_add_key(float *restrict acc, float *restrict lsum, float sc, float m_new,
                              const float *restrict vr, int d) {
  if (sc == -INFINITY) return;
  const float pr = expf(sc - m_new);
  *lsum += pr;
  for (int x = 0; x < d; x++) acc[x] += pr * vr[x];
}

/* Online softmax for one query row over nk scores s[] (already scaled; -INFINITY where
 * masked): folds them and the matching value rows into (m, l, acc[d]). */
static inline void da_row_update(float *restrict m, float *restrict l, float *restrict acc,
                                 const float *restrict s, const float *restrict vt, int nk,
                                 int d) {
  float mx = -INFINITY;
  /* a NaN score (NaN in q or k) makes the maximum NaN, and with it the row: NaN out, as
   * the reference gives it (a maximum that dropped it left a row of NaN scores "attending
   * nothing") */
  for (int c = 0; c < nk; c++) mx = s[c] > mx || s[c] != s[c] ? s[c] : mx;
  if (mx == -INFINITY) return; /* nothing attended in this tile */
  float m_new = *m > mx ? *m : mx;
  float corr = expf(*m - m_new); /* exp(-inf) = 0 on the first tile */
  float lsum = *l * corr;
  for (int x = 0; x < d; x++) acc[x] *= corr;
  int c = 0;
  /* four keys at a time, acc read and written once for them (it was once a key); a group
   * with a masked key (-inf: weight 0, its v never read, an Inf there stays out) goes key
   * by key, as the last keys do */
  for (; c + 4 <= nk; c += 4) {
    if (s[c] == -INFINITY || s[c + 1] == -INFINITY || s[c + 2] == -INFINITY || s[c + 3] == -INFINITY) {
      for (int e = c; e < c + 4; e++) da_add_key(acc, &lsum, s[e], m_new, vt + (int64_t)e * d, d);
      continue;
    }
    const float p0 = expf(s[c] - m_new), p1 = expf(s[c + 1] - m_new), p2 = expf(s[c + 2] - m_new),
                p3 = expf(s[c + 3] - m_new);
    lsum += (p0 + p1) + (p2 + p3);
    const float *v0 = vt + (int64_t)c * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
    for (int x = 0; x < d; x++) acc[x] += (p0 * v0[x] + p1 * v1[x]) + (p2 * v2[x] + p3 * v3[x]);
  }
  for (; c < nk; c++) da_add_key(acc, &lsum, s[c], m_new, vt + (int64_t)c * d, d);
  *l = lsum;
  *m = m_new;
}

/* Merge a finished partial (o[d], lse_p) into a running (acc[d], *lse) exactly:
 * out = sum_i e^{lse_i} o_i / sum_i e^{lse_i}. */
static inline void da_merge_partial(float *restrict acc, float *restrict lse,
                                    const float *restrict o, float lse_p, int d) {
  if (lse_p == -INFINITY) return;
  float mx = *lse > lse_p ? *lse : lse_p;
  float wa = expf(*lse - mx), wb = expf(lse_p - mx);
  float inv = 1.0f / (wa + wb);
  for (int x = 0; x < d; x++) acc[x] = (acc[x] * wa + o[x] * wb) * inv;
  *lse = mx + logf(wa + wb);
}

/* The x86 instruction-set extensions beyond x86-64's baseline this module was compiled for
 * (CC's -march or -m flags) that a compiler emits from plain C (not those it uses only for
 * intrinsics: AES, SHA, VP2INTERSECT, which compilers enable for CPUs that lack it, AMX...),
 * as words. Data, not code: the runtime checks them against the CPU (runtime/host_compiler.c,
 * by CPUID) after dlopen and before it calls anything here (the module has no constructors),
 * so that a module built for another CPU (a bundle, a shared cache folder) is refused by name
 * instead of killing the process with SIGILL. */
static const char da_isa_words[] = ""
#if defined(__x86_64__)
#ifdef __SSE3__
    " sse3"
#endif
#ifdef __SSSE3__
    " ssse3"
#endif
#ifdef __SSE4_1__
    " sse4.1"
#endif
#ifdef __SSE4_2__
    " sse4.2"
#endif
#ifdef __POPCNT__
    " popcnt"
#endif
#ifdef __LZCNT__
    " lzcnt"
#endif
#ifdef __MOVBE__
    " movbe"
#endif
#ifdef __AVX__
    " avx"
#endif
#ifdef __AVX2__
    " avx2"
#endif
#ifdef __FMA__
    " fma"
#endif
#ifdef __FMA4__
    " fma4"
#endif
#ifdef __XOP__
    " xop"
#endif
#ifdef __TBM__
    " tbm"
#endif
#ifdef __F16C__
    " f16c"
#endif
#ifdef __BMI__
    " bmi"
#endif
#ifdef __BMI2__
    " bmi2"
#endif
#ifdef __GFNI__
    " gfni"
#endif
#ifdef __AVXVNNI__
    " avxvnni"
#endif
#ifdef __AVX512F__
    " avx512f"
#endif
#ifdef __AVX512VL__
    " avx512vl"
#endif
#ifdef __AVX512BW__
    " avx512bw"
#endif
#ifdef __AVX512DQ__
    " avx512dq"
#endif
#ifdef __AVX512CD__
    " avx512cd"
#endif
#ifdef __AVX512VBMI__
    " avx512vbmi"
#endif
#ifdef __AVX512IFMA__
    " avx512ifma"
#endif
#ifdef __AVX512VBMI2__
    " avx512vbmi2"
#endif
#ifdef __AVX512VNNI__
    " avx512vnni"
#endif
#ifdef __AVX512BITALG__
    " avx512bitalg"
#endif
#ifdef __AVX512VPOPCNTDQ__
    " avx512vpopcntdq"
#endif
#ifdef __AVX512BF16__
    " avx512bf16"
#endif
#ifdef __AVX512FP16__
    " avx512fp16"
#endif
#ifdef __AVX512ER__
    " avx512er"
#endif
#ifdef __APX_F__
    " apxf"
#endif
#endif
    ;
