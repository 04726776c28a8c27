/* kernel.c: the runtime's own product kernels (lib/rt/gg_rt_gemm.c, included whole) against
 * float64 products, over every way a model calls it: both operands packed (linears; the row and
 * column biases), A read in place from an image (channels-last convolutions; stored as it is or
 * transposed, as mode 2 of conv_rows stores it), B read in place (conv_rows' mode 1); panels of 8 and
 * 14 rows (pk_mr), B panels of 32 columns and a last one of at most 16, K of 0, less than one slice,
 * and more than one. Operands are allocated to their exact sizes, so the sanitizer build catches a read
 * past a position table or a panel. Then float16 and bfloat16 products (gg_rt_hgemm), on AMX where the
 * CPU has it and on the float32 path; gg_rt_pack's layout at every stride; channels-last depthwise
 * convolutions (gg_rt_conv.c, included too); attention (gg_rt_attn.c, included too). Ends with "N
 * passed, N failed" (tests/run.sh). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gg_rt.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#include "gg_rt_gemm.c"
#include "gg_rt_conv.c"
#include "gg_rt_attn.c"

static int pass, fail, rows_seen[15];

static float *fill(int64_t n, unsigned seed) {
  float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return p;
}

static float *packed(int side, int64_t rows, int64_t cols, const float *src, int64_t srow) {
  float *p = NULL;
  if (posix_memalign((void **)&p, GG_RT_ALIGN, sizeof(float) * (size_t)(gg_rt_pack_floats(side, rows, cols) + 1))) abort();
  gg_rt_pack(side, rows, cols, src, srow, 1, p);
  return p;
}

/* y (M x N, element (i, j) at y[i * si + j * sj]) against A @ B + biases in float64; the bound is
 * float32 accumulation's over K + 2 terms */
static void check(const char *what, int64_t M, int64_t N, int64_t K, const float *A, const float *B, const float *rb, const float *cb, const float *y,
                  int64_t si, int64_t sj) {
  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; k++) {
        s += (double)A[i * K + k] * B[k * N + j];
        a += fabs((double)A[i * K + k] * B[k * N + j]);
      }
      if (rb) s += rb[i], a += fabs(rb[i]);
      if (cb) s += cb[j], a += fabs(cb[j]);
      double e = fabs(y[i * si + j * sj] - s), bound = (double)(K + 2) * 6e-8 * a + 1e-30;
      if (!(e <= bound)) {
        printf("FAIL %s M %lld N %lld K %lld (rows %d): element (%lld, %lld) is %.9g, float64 says %.9g\n", what, (long long)M, (long long)N, (long long)K,
               pk_mr(M), (long long)i, (long long)j, y[i * si + j * sj], s);
        fail++;
        return;
      }
      if (e > worst) worst = e;
    }
  pass++;
  rows_seen[pk_mr(M)]++;
}

static void one(int64_t M, int64_t N, int64_t K) {
  float *A = fill(M * K, 1), *B = fill(K * N, 2), *rb = fill(M, 3), *cb = fill(N, 4), *C = malloc(sizeof(float) * (size_t)(M * N));
  /* both packed, with the row bias and the column bias in turn */
  float *Ap = packed(0, M, K, A, K), *Bp = packed(1, K, N, B, N);
  gg_rt_gemm_packed(M, N, K, Ap, Bp, C, N, NULL, cb, NULL);
  check("packed, column bias", M, N, K, A, B, NULL, cb, C, N, 1);
  gg_rt_gemm_packed(M, N, K, Ap, Bp, C, N, rb, NULL, NULL);
  check("packed, row bias", M, N, K, A, B, rb, NULL, C, N, 1);
  /* A read in place: row i at k is A[po[i] + ro[k]], the table padded by PK_MR positions past M */
  int64_t *ro = malloc(sizeof(int64_t) * (size_t)(K ? K : 1)), *po = malloc(sizeof(int64_t) * (size_t)(M + PK_MR));
  for (int64_t k = 0; k < K; k++) ro[k] = k;
  for (int64_t i = 0; i < M + PK_MR; i++) po[i] = i < M ? i * K : 0;
  rows_src ar = {A, ro, po};
  gemm_run(M, N, K, NULL, &ar, Bp, NULL, C, N, NULL, cb, NULL, NULL, 0);
  check("A in place", M, N, K, A, B, NULL, cb, C, N, 1);
  float *T = malloc(sizeof(float) * (size_t)(M * N));
  gemm_run(M, N, K, NULL, &ar, Bp, NULL, C, N, NULL, cb, NULL, T, M);
  check("A in place, stored transposed", M, N, K, A, B, NULL, cb, T, 1, M);
  /* B read in place: row k is B + k * N */
  int64_t *bro = malloc(sizeof(int64_t) * (size_t)(K ? K : 1));
  for (int64_t k = 0; k < K; k++) bro[k] = k * N;
  rows_src br = {B, bro, NULL};
  gemm_run(M, N, K, Ap, NULL, NULL, &br, C, N, rb, NULL, NULL, NULL, 0);
  check("B in place, row bias", M, N, K, A, B, rb, NULL, C, N, 1);
  free(A), free(B), free(rb), free(cb), free(C), free(Ap), free(Bp), free(ro), free(po), free(T), free(bro);
}

/* gg_rt_pack against the layout element by element: A (side 0) and B (side 1) with rows in memory
 * order, columns in memory order (a matrix read as its transpose: the AVX-512 paths) and a general
 * stride (both 2), every panel shape (8 and 14 rows; 32 and 16 columns) with partial blocks of 16 */
static void pack_layout(int side, int64_t rows, int64_t cols) {
  float *src = fill(4 * rows * cols, 5);
  int64_t strides[3][2] = {{cols, 1}, {1, rows}, {2 * cols * 2, 2}};
  for (int v = 0; v < 3; v++) {
    int64_t sr = strides[v][0], sc = strides[v][1], n = gg_rt_pack_floats(side, rows, cols);
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = NAN;   /* every position must be written */
    gg_rt_pack(side, rows, cols, src, sr, sc, p);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
      float want;
      if (side == 0) {
        int64_t h = pk_mr(rows), ip = i / (cols * h), k = i % (cols * h) / h, r = ip * h + i % h;
        want = r < rows ? src[r * sr + k * sc] : 0;
      } else {
        int64_t jp = i / (rows * PK_NR), w = pk_width(cols, jp), o = i % (rows * PK_NR), k = o / w, j = jp * PK_NR + o % w;
        if (o >= rows * w) continue;   /* a 16-wide panel leaves the rest of its space unused */
        want = j < cols ? src[k * sr + j * sc] : 0;
      }
      if (!(p[i] == want)) bad = i;
    }
    if (bad >= 0) {
      printf("FAIL gg_rt_pack side %d, %lld x %lld, strides (%lld, %lld): position %lld is %g\n", side, (long long)rows, (long long)cols, (long long)sr,
             (long long)sc, (long long)bad, p[bad]);
      fail++;
    } else
      pass++;
    free(p);
  }
  free(src);
}

/* A float32 channels-last depthwise convolution (gg_rt_conv_nhwc_f32 with groups == C) against float64:
 * the AVX-512 rows (sums in registers, four positions at once where their taps are inside) and, with
 * the kernel off, the generic loop; kernels of 3 and 5, strides 1 and 2, dilation 2, channels past a
 * multiple of 16, rows narrower than four positions */
static void depthwise(int64_t N, int64_t H, int64_t W, int64_t C, int64_t R, int64_t st, int64_t pad, int64_t dil, bool bf16) {
  int64_t Ho = (H + 2 * pad - dil * (R - 1) - 1) / st + 1, Wo = (W + 2 * pad - dil * (R - 1) - 1) / st + 1;
  gg_conv c = {N, C, C, C, {1, H, W}, {1, R, R}, {1, Ho, Wo}, {1, st, st}, {0, pad, pad}, {1, dil, dil}, false, true};
  float *x = fill(N * H * W * C, 7), *w = fill(C * R * R, 8), *b = fill(C, 9), *y = malloc(sizeof(float) * (size_t)(N * Ho * Wo * C)),
        *col = malloc(sizeof(float) * (size_t)(R * R * C + C));
  uint16_t *x16 = malloc(2 * (size_t)(N * H * W * C)), *w16 = malloc(2 * (size_t)(C * R * R)), *b16 = malloc(2 * (size_t)C),
           *y16 = malloc(2 * (size_t)(N * Ho * Wo * C));
  if (bf16) {   /* the operands rounded to bfloat16, the reference computed from those */
    for (int64_t i = 0; i < N * H * W * C; i++) x[i] = gg_bf2f(x16[i] = gg_f2bf(x[i]));
    for (int64_t i = 0; i < C * R * R; i++) w[i] = gg_bf2f(w16[i] = gg_f2bf(w[i]));
    for (int64_t i = 0; i < C; i++) b[i] = gg_bf2f(b16[i] = gg_f2bf(b[i]));
  }
  bool was = gg_rt_packed_ok();
  for (int v = was ? 0 : 1; v < 2; v++) {
    packed_on = v == 0;
    if (bf16) {
      gg_rt_conv_nhwc_bf16(&c, x16, w16, NULL, b16, y16, col, NULL);
      for (int64_t i = 0; i < N * Ho * Wo * C; i++) y[i] = gg_bf2f(y16[i]);
    } else
      gg_rt_conv_nhwc_f32(&c, x, w, NULL, b, y, col, NULL);
    int64_t bad = -1;
    double got = 0, want = 0;
    for (int64_t o = 0; o < N * Ho * Wo && bad < 0; o++)
      for (int64_t ch = 0; ch < C && bad < 0; ch++) {
        int64_t n = o / (Ho * Wo), oh = o / Wo % Ho, ow = o % Wo;
        double s = b[ch], a = fabs(b[ch]);
        for (int64_t r = 0; r < R; r++)
          for (int64_t q = 0; q < R; q++) {
            int64_t ih = oh * st - pad + r * dil, iw = ow * st - pad + q * dil;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double t = (double)x[((n * H + ih) * W + iw) * C + ch] * w[(ch * R + r) * R + q];
            s += t, a += fabs(t);
          }
        double bound = (double)(R * R + 1) * 6e-8 * a + (bf16 ? 0x1p-8 * fabs(s) : 0) + 1e-30;   /* bfloat16: its rounding once more */
        if (!(fabs(y[o * C + ch] - s) <= bound)) bad = o * C + ch, got = y[o * C + ch], want = s;
      }
    if (bad >= 0) {
      printf("FAIL depthwise %s%s N %lld H %lld W %lld C %lld k %lld stride %lld pad %lld dilation %lld: element %lld is %.9g, float64 says %.9g\n",
             bf16 ? "bfloat16 " : "", v ? "generic" : "AVX-512", (long long)N, (long long)H, (long long)W, (long long)C, (long long)R, (long long)st, (long long)pad, (long long)dil,
             (long long)bad, got, want);
      fail++;
    } else
      pass++;
  }
  packed_on = was;
  free(x), free(w), free(b), free(y), free(col), free(x16), free(w16), free(b16), free(y16);
}

/* ---------------------------------------------------------------- attention */

/* gg_rt_attention against float64, on the AVX-512 path and the portable one, in float32 (dt 0), float16
 * (2) and bfloat16 (3; the operands and mask rounded first, the reference computed from those): B
 * batches, H query heads sharing Hk key heads, L queries (blocks of 32 and a partial one), S keys (not a
 * multiple of the key block), head size D (a partial vector; past 64: two passes of P V); q, k and v
 * with rows wider than D, the output laid out [B, L, H, D]. mask 0 none, 1 bool (row 3 of each head all
 * false: zeros), 2 float [B, 1, L, S] (read through gathers in float32), 3 float [B, 1, 1, S] broadcast
 * along the queries, with -inf at key 1. The bound: float32's error in a row's scores (D + 8 terms) and
 * softmax (S terms), through the probabilities to the weighted values, and a 16-bit output's rounding. */
static void attention(int dt, int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S, int64_t D, int mask, bool causal) {
  int64_t Dq = D + 3, nq = B * H * L * Dq, nk = B * Hk * S * Dq, ny = B * L * H * D;   /* Dq: the rows' stride */
  float *q = fill(nq, 21), *k = fill(nk, 22), *v = fill(nk, 23), *mf = fill(B * L * S, 24), *y = malloc(sizeof(float) * (size_t)ny);
  uint16_t *q16 = malloc(2 * (size_t)nq), *k16 = malloc(2 * (size_t)nk), *v16 = malloc(2 * (size_t)nk), *m16 = malloc(2 * (size_t)(B * L * S)), *y16 = malloc(2 * (size_t)ny);
  uint8_t *mb = malloc((size_t)(B * L * S));
  double *sc = malloc(sizeof(double) * (size_t)S);
  for (int64_t i = 0; i < B * L * S; i++) mb[i] = (i / S) % L != 3 && (i * 7) % 5 != 0;
  for (int64_t b = 0; b < B && L * S > 1; b++) mf[b * L * S + 1] = -INFINITY;
  float *ops[4] = {q, k, v, mf};
  uint16_t *o16[4] = {q16, k16, v16, m16};
  int64_t on[4] = {nq, nk, nk, B * L * S};
  for (int o = 0; dt && o < 4; o++)   /* rounded to the 16-bit type, the reference computed from those */
    for (int64_t i = 0; i < on[o]; i++) ops[o][i] = dt == 3 ? gg_bf2f(o16[o][i] = gg_f2bf(ops[o][i])) : gg_h2f(o16[o][i] = gg_f2h(ops[o][i]));
  gg_attn a = {B, H, Hk, L, S, D, {H * L * Dq, L * Dq, Dq}, {Hk * S * Dq, S * Dq, Dq}, {Hk * S * Dq, S * Dq, Dq}, {L * H * D, D, H * D},
               {L * S, 0, mask == 3 ? 0 : S, 1}, mask == 0 ? 0 : mask == 1 ? 1 : 2, causal, 1.0 / sqrt((double)D), NULL, {0, 0, 0}};
  const void *m = mask == 1 ? (const void *)mb : mask ? (dt ? (const void *)m16 : (const void *)mf) : NULL;
  double half = dt == 3 ? 0x1p-8 : dt == 2 ? 0x1p-11 : 0;   /* the output's rounding, relative */
  bool was = gg_rt_packed_ok();
  for (int path = was ? 0 : 1; path < 2; path++) {
    packed_on = path == 0;
    for (int64_t i = 0; i < ny; i++) y[i] = NAN, y16[i] = 0x7fc1;
    if (dt) {
      gg_rt_attention(dt, &a, q16, k16, v16, m, y16);
      for (int64_t i = 0; i < ny; i++) y[i] = dt == 3 ? gg_bf2f(y16[i]) : gg_h2f(y16[i]);
    } else
      gg_rt_attention(0, &a, q, k, v, m, y);
    int64_t bad = -1;
    double got = 0, want = 0;
    for (int64_t b = 0; b < B && bad < 0; b++)
      for (int64_t h = 0; h < H && bad < 0; h++)
        for (int64_t i = 0; i < L && bad < 0; i++) {
          int64_t hk = h / (H / Hk);
          const float *qi = q + b * a.qs[0] + h * a.qs[1] + i * Dq;
          double mx = -INFINITY, z = 0, amax = 0;
          for (int64_t j = 0; j < S; j++) {
            double s = 0, t = 0;
            for (int64_t d = 0; d < D; d++) s += (double)qi[d] * k[b * a.ks[0] + hk * a.ks[1] + j * Dq + d], t += fabs((double)qi[d] * k[b * a.ks[0] + hk * a.ks[1] + j * Dq + d]);
            s *= a.scale, t *= a.scale;
            if (causal && j > i) s = -INFINITY;
            if (mask == 1 && !mb[(b * L + i) * S + j]) s = -INFINITY;
            if (mask == 2) s += mf[(b * L + i) * S + j];
            if (mask == 3) s += mf[b * L * S + j];
            sc[j] = s;
            mx = s > mx ? s : mx;
            amax = t > amax ? t : amax;
          }
          for (int64_t j = 0; j < S; j++) z += sc[j] = mx == -INFINITY ? 0 : exp(sc[j] - mx);
          for (int64_t d = 0; d < D && bad < 0; d++) {
            double o = 0, ao = 0;
            for (int64_t j = 0; j < S; j++) o += sc[j] * v[b * a.vs[0] + hk * a.vs[1] + j * Dq + d], ao += sc[j] * fabs(v[b * a.vs[0] + hk * a.vs[1] + j * Dq + d]);
            o = z > 0 ? o / z : 0, ao = z > 0 ? ao / z : 0;
            double bound = 2 * (double)(D + S + 16) * 6e-8 * (1 + amax) * ao * (1 + half) + half * fabs(o) + 1e-30;
            float g = y[b * a.ys[0] + h * a.ys[1] + i * a.ys[2] + d];
            if (!(fabs(g - o) <= bound)) bad = ((b * H + h) * L + i) * D + d, got = g, want = o;
          }
        }
    if (bad >= 0) {
      printf("FAIL attention %s %s B %lld H %lld Hk %lld L %lld S %lld D %lld mask %d%s: element %lld is %.9g, float64 says %.9g\n",
             dt == 3 ? "bfloat16" : dt == 2 ? "float16" : "float32", path ? "portable" : "AVX-512", (long long)B, (long long)H, (long long)Hk, (long long)L,
             (long long)S, (long long)D, mask, causal ? " causal" : "", (long long)bad, got, want);
      fail++;
    } else
      pass++;
  }
  packed_on = was;
  free(q), free(k), free(v), free(mf), free(y), free(q16), free(k16), free(v16), free(m16), free(y16), free(mb), free(sc);
}

/* a NaN in a query gives NaN in its row's outputs and nowhere else, on both paths */
static void attention_nan(void) {
  int64_t L = 40, S = 30, D = 16;
  float *q = fill(L * D, 31), *k = fill(S * D, 32), *v = fill(S * D, 33), *y = malloc(sizeof(float) * (size_t)(L * D));
  q[5 * D + 3] = NAN;
  gg_attn a = {1, 1, 1, L, S, D, {0, 0, D}, {0, 0, D}, {0, 0, D}, {0, 0, D}, {0, 0, 0, 0}, 0, 0, 0.25, NULL, {0, 0, 0}};
  bool was = gg_rt_packed_ok();
  for (int path = was ? 0 : 1; path < 2; path++) {
    packed_on = path == 0;
    gg_rt_attention(0, &a, q, k, v, NULL, y);
    int64_t bad = 0;
    for (int64_t i = 0; i < L * D; i++) bad += (i / D == 5) != (y[i] != y[i]);
    if (bad) {
      printf("FAIL attention %s: a NaN in query 5 gave %lld outputs wrong (NaN outside its row, or a number in it)\n", path ? "portable" : "AVX-512", (long long)bad);
      fail++;
    } else
      pass++;
  }
  packed_on = was;
  free(q), free(k), free(v), free(y);
}

/* ---------------------------------------------------------------- float16 and bfloat16 products */

static uint16_t to_half(int dt, float f) { return dt == 3 ? gg_f2bf(f) : gg_f2h(f); }

/* gg_rt_hgemm (dt 2 float16, 3 bfloat16): Y = alpha * A @ B + beta * bias rounded once, against
 * float64: within float32 accumulation's bound over K + 2 terms plus half a unit in the last place of
 * dt (and that of the sum's own error). B as a linear's weight stores it (column-major, bcol) or
 * row-major; packed at open (pk) or per call; the bias none (0), a row of N in bfloat16 (1), a float32
 * matrix (2), a transposed float16 matrix (3), or (4) NaN with beta 0, which must not reach Y. Y has
 * 3 columns of padding per row that must stay as they were. */
static void hone(int dt, int64_t M, int64_t N, int64_t K, bool bcol, bool pk, int bmode) {
  float *af = fill(M * K, 11u + (unsigned)M), *bf = fill(K * N, 17u + (unsigned)N), *mf = fill(M * N, 5u);
  uint16_t *A = malloc(2 * (size_t)(M * K) + 2), *B = malloc(2 * (size_t)(K * N) + 2), *Y = malloc(2 * (size_t)(M * (N + 3)));
  for (int64_t i = 0; i < M * K; i++) A[i] = to_half(dt, af[i]);
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) B[bcol ? j * K + k : k * N + j] = to_half(dt, bf[k * N + j]);
  for (int64_t i = 0; i < M * (N + 3); i++) Y[i] = 0x7e7e;
  int64_t sbk = bcol ? 1 : N, sbn = bcol ? K : 1;
  uint16_t *brow = malloc(2 * (size_t)N), *btr = malloc(2 * (size_t)(M * N));
  float *bnan = malloc(sizeof(float) * (size_t)N);
  for (int64_t j = 0; j < N; j++) brow[j] = gg_f2bf(mf[j]), bnan[j] = NAN;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) btr[j * M + i] = gg_f2h(mf[i * N + j]);
  const void *bias = bmode == 1 ? (const void *)brow : bmode == 2 ? (const void *)mf : bmode == 3 ? (const void *)btr : bmode == 4 ? (const void *)bnan : NULL;
  int bdt = bmode == 1 ? 3 : bmode == 3 ? 2 : 0;
  int64_t sbm = bmode == 2 ? N : bmode == 3 ? 1 : 0, sbj = bmode == 3 ? M : 1;
  float alpha = bmode == 2 ? 0.5f : 1.0f, beta = bmode == 4 ? 0.0f : bmode == 3 ? 2.0f : 1.0f;
  void *p = NULL;
  if (pk && gg_rt_pack_weight(dt == 3 ? 2 : 3, K, N, B, sbk, sbn, &p)) abort();
  gg_rt_hgemm(dt, M, N, K, A, K, 1, B, sbk, sbn, p, Y, N + 3, alpha, beta, bias, bdt, sbm, sbj);
  double worst = 0, half_ulp = dt == 3 ? 1.0 / 256 : 1.0 / 2048;
  bool bad = false;
  for (int64_t i = 0; i < M && !bad; i++)
    for (int64_t j = 0; j < N + 3 && !bad; j++) {
      if (j >= N) {
        if (Y[i * (N + 3) + j] != 0x7e7e) {
          printf("FAIL half dt %d M %lld N %lld K %lld: padding at (%lld, %lld) written\n", dt, (long long)M, (long long)N, (long long)K, (long long)i, (long long)j);
          bad = true;
        }
        continue;
      }
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)half_at(dt, A, i * K + k) * half_at(dt, B, k * sbk + j * sbn);
        s += t, a += fabs(t);
      }
      s *= alpha, a *= fabs(alpha);
      if (bias && beta != 0) {
        double b = beta * (double)half_at(bdt, bias, i * sbm + j * sbj);
        s += b, a += fabs(b);
      }
      double y = half_at(dt, Y, i * (N + 3) + j), err = (double)(K + 2) * 6e-8 * a, e = fabs(y - s);
      if (!(e <= err * (1 + half_ulp) + half_ulp * fabs(s) + 1e-30)) {
        printf("FAIL half dt %d M %lld N %lld K %lld B %s%s bias %d (amx %d): element (%lld, %lld) is %.6g, float64 says %.6g\n", dt, (long long)M,
               (long long)N, (long long)K, bcol ? "column-major" : "row-major", p ? ", packed" : "", bmode, amx_ok(), (long long)i, (long long)j, y, s);
        bad = true;
      }
      worst = fmax(worst, e);
    }
  if (bad) fail++;
  else pass++;
  free(af), free(bf), free(mf), free(A), free(B), free(Y), free(brow), free(btr), free(bnan), free(p);
}

static void half_products(void) {
  static const int64_t Ms[] = {1, 31, 33, 70}, Ns[] = {1, 17, 32, 45}, Ks[] = {0, 1, 31, 33, 100};
  int v = 0;
  for (int dt = 2; dt <= 3; dt++)
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++, v++) hone(dt, Ms[a], Ns[b], Ks[c], v % 2, v / 2 % 2, v % 5);
  hone(3, 200, 300, 200, true, true, 1);   /* threads share it (a grid of tiles) */
  hone(3, 200, 300, 200, false, false, 2);
}

/* amx_rows_gemm (a bfloat16 channels-last convolution on AMX): A read through row tables from a
 * bfloat16 image (runs of 32 channels side by side where c32 is 32, a stem's runs of 21 where 21, else
 * scattered), B the bfloat16 weight
 * packed at open (side 2), the bfloat16 column bias added in float32 and the result rounded once to
 * bfloat16, against float64 rounded the same way (within one unit of bfloat16's last place) */
static void rows_amx(int64_t M, int64_t N, int64_t K, int c32, bool with_bias) {
  int64_t img = M * 3 + K * 5 + 64;
  float *xf = fill(img, 3u), *wf = fill(K * N, 7u), *bf = fill(N, 9u);
  uint16_t *x = malloc(sizeof(uint16_t) * (size_t)img), *w = malloc(sizeof(uint16_t) * (size_t)(K * N)), *bias = malloc(sizeof(uint16_t) * (size_t)N);
  uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(M * N));
  for (int64_t i = 0; i < img; i++) x[i] = gg_f2bf(xf[i]);
  for (int64_t i = 0; i < K * N; i++) w[i] = gg_f2bf(wf[i]);
  for (int64_t i = 0; i < N; i++) bias[i] = gg_f2bf(bf[i]);
  int64_t *ro = malloc(sizeof(int64_t) * (size_t)(K + 8)), *po = malloc(sizeof(int64_t) * (size_t)M);
  for (int64_t k = 0; k < K; k++) ro[k] = c32 == 32 ? k : c32 ? k / c32 * 100 + k % c32 : (k * 7) % (K * 2);
  for (int64_t i = 0; i < M; i++) po[i] = i * 3;
  void *p = NULL;
  if (gg_rt_pack_weight(2, K, N, w, N, 1, &p) || !amx_rows_gemm(M, N, K, x, ro, po, p, y, with_bias ? bias : NULL, NULL)) abort();
  bool bad = false;
  for (int64_t i = 0; i < M && !bad; i++)
    for (int64_t j = 0; j < N && !bad; j++) {
      double s = with_bias ? gg_bf2f(bias[j]) : 0, a = fabs(s);
      for (int64_t k = 0; k < K; k++) {
        double t = (double)gg_bf2f(x[ro[k] + po[i]]) * gg_bf2f(w[k * N + j]);
        s += t, a += fabs(t);
      }
      double got = gg_bf2f(y[i * N + j]);   /* float32 sums (error (K + 2) * 6e-8 * a) rounded once: half a bfloat16 unit */
      if (!(fabs(got - s) <= (double)(K + 2) * 6e-8 * a + fabs(s) * (1.0 / 256) + 1e-30)) {
        printf("FAIL AMX rows M %lld N %lld K %lld: element (%lld, %lld) is %.9g, float64 says %.9g\n", (long long)M, (long long)N, (long long)K, (long long)i,
               (long long)j, got, s);
        bad = true;
      }
    }
  if (bad) fail++;
  else pass++;
  free(xf), free(wf), free(bf), free(x), free(w), free(bias), free(y), free(ro), free(po), free(p);
}

int main(void) {
  /* a bfloat16 model's convolutions on AMX, where this CPU has it */
  if (amx_ok()) {
    rows_amx(45, 40, 70, 0, true);
    rows_amx(50, 33, 70, 32, true);
    rows_amx(77, 64, 147, 21, false);
    rows_amx(100, 64, 96, 32, false);
    rows_amx(300, 130, 288, 32, true);   /* threads share it */
  }
  /* float16 and bfloat16 products: on AMX where this CPU has it, and then on the float32 path */
  half_products();
#ifdef GG_XAMX
  if (amx_ok()) {
    amx_on = false;
    half_products();
  } else
    puts("(no AMX on this machine: bfloat16 products checked on the float32 path only)");
#endif
  /* attention's exp against exp(), every 1/64 over its range, within 2 units in the last place; -inf and
   * what would be a denormal give 0 */
#ifdef GG_X512
  if (gg_rt_packed_ok()) {
    int64_t bad = 0;
    float worst = 0;
    for (int64_t t = -87 * 64; t <= 88 * 64; t += 16) {
      float x[16], e[16];
      for (int u = 0; u < 16; u++) x[u] = (float)(t + u) / 64.0f;
      att_exp16(x, e);
      for (int u = 0; u < 16; u++) {
        double want = exp((double)x[u]), err = fabs(e[u] - want) / (nextafterf((float)want, INFINITY) - (float)want);
        worst = err > worst ? (float)err : worst;
        if (!(err <= 2) || (x[u] < -87.3f && e[u] != 0)) bad++;
      }
    }
    float sp[16] = {-INFINITY, -100, -87.5f, 0, 1}, se[16];
    att_exp16(sp, se);
    if (bad || se[0] != 0 || se[1] != 0 || se[2] != 0 || se[3] != 1 || fabsf(se[4] - 2.71828183f) > 3e-7f) {
      printf("FAIL attention's exp: %lld values past 2 ulp (worst %.2f), exp(-inf) %g, exp(-100) %g, exp(0) %g, exp(1) %.9g\n", (long long)bad, worst, se[0], se[1], se[3], se[4]);
      fail++;
    } else
      pass++;
  }
#endif
  /* attention in float32, float16 and bfloat16: shapes of real models and odd ones, every mask kind, causal (L = S, L < S) */
  for (int dt = 0; dt <= 3; dt++) {
    if (dt == 1) continue;
    attention(dt, 2, 4, 4, 45, 37, 64, 0, false);
    attention(dt, 1, 4, 2, 70, 70, 16, 0, true);
    attention(dt, 2, 2, 1, 33, 50, 8, 1, false);
    attention(dt, 2, 3, 3, 40, 29, 80, 2, false);
    attention(dt, 1, 2, 2, 20, 100, 130, 3, true);
    attention(dt, 1, 2, 2, 5, 7, 64, 2, true);
    attention(dt, 1, 1, 1, 1, 1, 3, 0, false);
  }
  attention_nan();
  if (!gg_rt_packed_ok()) {   /* no AVX-512: the kernel never runs here */
    printf("(no AVX-512 on this machine: the runtime's float32 product kernel is not used; not run)\n%d passed, %d failed\n", pass, fail);
    return fail != 0;
  }
  for (int h = 0; h < 2; h++) {
    depthwise(2, 9, 11, 20, 3, 1, 1, 1, h);
    depthwise(1, 14, 13, 16, 3, 2, 1, 1, h);
    depthwise(2, 12, 15, 40, 5, 1, 2, 1, h);
    depthwise(1, 11, 17, 72, 5, 2, 2, 1, h);
    depthwise(1, 10, 12, 24, 3, 1, 2, 2, h);
    depthwise(1, 5, 3, 8, 3, 1, 1, 1, h);
  }
  static const int64_t Pr[] = {1, 9, 14, 15, 126, 127}, Pc[] = {1, 15, 16, 17, 40, 70};
  for (size_t a = 0; a < sizeof Pr / sizeof *Pr; a++)
    for (size_t b = 0; b < sizeof Pc / sizeof *Pc; b++) {
      pack_layout(0, Pr[a], Pc[b]);
      pack_layout(1, Pr[a], Pc[b]);
    }
  /* M: one row, a short panel, 8 rows where 14 would pad more (127), 14 rows (126, 250) */
  static const int64_t Ms[] = {1, 9, 126, 127, 250}, Ns[] = {5, 16, 17, 40, 64}, Ks[] = {0, 3, 400};
  for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
    for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
      for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) one(Ms[a], Ns[b], Ks[c]);
  if (!rows_seen[8] || !rows_seen[14]) {
    printf("FAIL panels of 8 rows checked %d times, of 14 rows %d times: both must be\n", rows_seen[8], rows_seen[14]);
    fail++;
  }
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
