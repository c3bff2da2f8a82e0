/* test_device_ref.cpp - on the host, the lane maps of templates/cuda/da_device.cuh
 * against the plain C++ references of ldmatrix and mma.m16n8k16 written beside them:
 * the smem addresses the kernels compute deliver exactly the fragments mma expects for
 * Q (A operand), K (B operand of Q K^T), V (.trans, B operand of P V), and the score
 * accumulators reused as the A operand of P V; a whole 16 x 16 attention tile computed
 * through fragments equals the direct matrix products.
 * Run: build/tests/test_device_ref   (ctest -R device_ref) */
#include <cmath>
#include <cstdio>
#include <cstring>

#include "../templates/cuda/da_device.cuh"

static int passed, failed;
#define CHECK(c, ...)                    \
  do {                                   \
    if (c) {                             \
      passed++;                          \
    } else {                             \
      failed++;                          \
      std::fprintf(stderr, __VA_ARGS__); \
      std::fputc('\n', stderr);          \
    }                                    \
  } while (0)

static const int DP = 24; /* padded row (halves), as the kernels pad by 8 */

/* A 16 x 16 tile of distinct 16-bit values in smem with row stride DP. */
struct Tile {
  unsigned char bytes[16 * DP * 2];
  da_u16 at(int r, int c) const {
    da_u16 v;
    std::memcpy(&v, bytes + (r * DP + c) * 2, 2);
    return v;
  }
  void fill(int seed) {
    std::memset(bytes, 0xff, sizeof bytes);
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < 16; c++) {
        da_u16 v = (da_u16)(seed * 1000 + r * 16 + c);
        std::memcpy(bytes + (r * DP + c) * 2, &v, 2);
      }
  }
};

static da_u16 half(da_u32 reg, int e) { return (da_u16)(e ? reg >> 16 : reg & 0xffff); }

int main() {
  Tile Q, K, V;
  Q.fill(1);
  K.fill(2);
  V.fill(3);
  da_u32 addr[32], qf[32][4], kf[32][4], vf[32][4];
  for (int l = 0; l < 32; l++) addr[l] = (da_u32)((da_ldsm_a_row(l) * DP + da_ldsm_a_col(l)) * 2);
  da_ref_ldmatrix_x4(Q.bytes, addr, false, qf);
  for (int l = 0; l < 32; l++) addr[l] = (da_u32)((da_ldsm_k_row(l) * DP + da_ldsm_k_col(l)) * 2);
  da_ref_ldmatrix_x4(K.bytes, addr, false, kf);
  for (int l = 0; l < 32; l++) addr[l] = (da_u32)((da_ldsm_v_row(l) * DP + da_ldsm_v_col(l)) * 2);
  da_ref_ldmatrix_x4(V.bytes, addr, true, vf);

  for (int l = 0; l < 32; l++)
    for (int e = 0; e < 2; e++) {
      for (int i = 0; i < 4; i++)
        CHECK(half(qf[l][i], e) == Q.at(da_frag_a_row(l, i), da_frag_a_col(l, i, e)),
              "Q fragment lane %d reg %d half %d", l, i, e);
      /* K stored [key][d]: B(k = d, n = key). kf[0..1]: keys 0-7, kf[2..3]: keys 8-15 */
      for (int t = 0; t < 2; t++)
        for (int i = 0; i < 2; i++)
          CHECK(half(kf[l][2 * t + i], e) == K.at(8 * t + da_frag_b_n(l), da_frag_b_k(l, i, e)),
                "K fragment lane %d tile %d reg %d half %d", l, t, i, e);
      /* V stored [key][d]: B(k = key, n = d). vf[0..1]: d 0-7, vf[2..3]: d 8-15 */
      for (int t = 0; t < 2; t++)
        for (int i = 0; i < 2; i++)
          CHECK(half(vf[l][2 * t + i], e) == V.at(da_frag_b_k(l, i, e), 8 * t + da_frag_b_n(l)),
                "V fragment lane %d tile %d reg %d half %d", l, t, i, e);
    }

  /* S = Q K^T through fragments (values as small floats), then O = P V with the score
   * accumulators repacked as the A operand exactly as the kernel does. */
  float a[32][4][2], b[32][2][2], s[2][32][4];
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++)
      for (int e = 0; e < 2; e++) a[l][i][e] = (float)(half(qf[l][i], e) % 7) - 3;
  std::memset(s, 0, sizeof s);
  for (int t = 0; t < 2; t++) {
    for (int l = 0; l < 32; l++)
      for (int i = 0; i < 2; i++)
        for (int e = 0; e < 2; e++) b[l][i][e] = (float)(half(kf[l][2 * t + i], e) % 5) - 2;
    da_ref_mma(a, b, s[t]);
  }
  float Sd[16][16];
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 16; n++) {
      float acc = 0;
      for (int k = 0; k < 16; k++) acc += (float)(Q.at(r, k) % 7 - 3) * (float)(K.at(n, k) % 5 - 2);
      Sd[r][n] = acc;
    }
  for (int t = 0; t < 2; t++)
    for (int l = 0; l < 32; l++)
      for (int j = 0; j < 4; j++)
        CHECK(s[t][l][j] == Sd[da_frag_c_row(l, j)][8 * t + da_frag_c_col(l, j)], "S tile %d lane %d idx %d", t, l, j);
  /* P as A: pa = {s[0][0..1], s[0][2..3], s[1][0..1], s[1][2..3]} */
  float pa[32][4][2], o[2][32][4];
  for (int l = 0; l < 32; l++) {
    pa[l][0][0] = s[0][l][0], pa[l][0][1] = s[0][l][1];
    pa[l][1][0] = s[0][l][2], pa[l][1][1] = s[0][l][3];
    pa[l][2][0] = s[1][l][0], pa[l][2][1] = s[1][l][1];
    pa[l][3][0] = s[1][l][2], pa[l][3][1] = s[1][l][3];
  }
  std::memset(o, 0, sizeof o);
  for (int t = 0; t < 2; t++) {
    for (int l = 0; l < 32; l++)
      for (int i = 0; i < 2; i++)
        for (int e = 0; e < 2; e++) b[l][i][e] = (float)(half(vf[l][2 * t + i], e) % 3) - 1;
    da_ref_mma(pa, b, o[t]);
  }
  for (int t = 0; t < 2; t++)
    for (int l = 0; l < 32; l++)
      for (int j = 0; j < 4; j++) {
        int r = da_frag_c_row(l, j), d = 8 * t + da_frag_c_col(l, j);
        float acc = 0;
        for (int k = 0; k < 16; k++) acc += Sd[r][k] * (float)(V.at(k, d) % 3 - 1);
        CHECK(o[t][l][j] == acc, "O tile %d lane %d idx %d: %g vs %g", t, l, j, o[t][l][j], acc);
      }
  CHECK(da_splitmix64(0) == 0xE220A8397B1DCDAFull, "splitmix64(0)");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
