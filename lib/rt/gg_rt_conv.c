/* gg_rt_conv.c: convolutions and pooling, part of the runtime (gg_rt.c includes it: one translation
 * unit): depthwise convolutions over phase images, im2col + GEMM, packed float32 convolutions that
 * read the image's rows in place, weight gradients, pooling. */
/* ---------------------------------------------------------------- convolution */

/* The outputs o of a row of n whose input o*s + off falls inside [0, in): [*lo, *hi), found once
 * rather than tested per element (depthwise convolution, im2col, max pooling). */
static inline void row_inside(int64_t off, int64_t s, int64_t in, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1;
  if (*hi > n) *hi = n;
  if (*lo > *hi) *lo = *hi;
}


/* the kernels of each type (gg_rt_conv_t.h) */
#define S(name) CAT(name, _f32)
#define T float
#define GEMM_T gg_rt_sgemm
#include "gg_rt_conv_t.h"
#undef S
#undef T
#undef GEMM_T
#define S(name) CAT(name, _f64)
#define T double
#define GEMM_T gg_rt_dgemm
#include "gg_rt_conv_t.h"
#undef S
#undef T
#undef GEMM_T



/* im2col written straight into the B panels of gg_rt_gemm_packed (one pass, no plain column matrix):
 * row (ic, k0, k1, k2) of the column matrix holds, for every output position, the input it reads at
 * that tap (0 in the padding); a panel's columns are consecutive output positions. One task per
 * panel, which it writes from start to end; the panel's pieces of output rows are found once, and
 * each tap's in-bounds range along the row too (no division per row of the panel). */
static void im2col_pack(const gg_conv *c, const float *x, float *Bp) {
  int64_t osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2], K = c->Cin * ksp;
  int64_t pn = (osp + PK_NR - 1) / PK_NR, s2 = c->stride[2];
  enum { TAPS = 64 };
  int64_t lo[TAPS], hi[TAPS];
  for (int64_t k2 = 0; k2 < c->k[2] && k2 < TAPS; k2++) row_inside(k2 * c->dil[2] - c->pad[2], s2, c->in[2], c->out[2], &lo[k2], &hi[k2]);
  _Pragma("omp parallel for schedule(static)")
  for (int64_t jp = 0; jp < pn; jp++) {
    int64_t w = pk_width(osp, jp);
    struct { int64_t o0, o1, o2, n, j; } seg[PK_NR];   /* the panel's pieces of output rows */
    int ns = 0;
    int64_t o = jp * PK_NR, o2 = o % c->out[2], o1 = o / c->out[2] % c->out[1], o0 = o / (c->out[2] * c->out[1]), j = 0;
    while (j < w && o0 < c->out[0]) {
      int64_t n = c->out[2] - o2 < w - j ? c->out[2] - o2 : w - j;
      seg[ns].o0 = o0; seg[ns].o1 = o1; seg[ns].o2 = o2; seg[ns].n = n; seg[ns].j = j;
      ns++;
      j += n;
      o2 += n;
      if (o2 == c->out[2]) {
        o2 = 0;
        if (++o1 == c->out[1]) { o1 = 0; o0++; }
      }
    }
    int64_t used = j;
    float *d = Bp + jp * K * PK_NR;
    for (int64_t ic = 0; ic < c->Cin; ic++)
      for (int64_t k0 = 0; k0 < c->k[0]; k0++)
        for (int64_t k1 = 0; k1 < c->k[1]; k1++)
          for (int64_t k2 = 0; k2 < c->k[2]; k2++, d += w) {
            int64_t off = k2 * c->dil[2] - c->pad[2], l0, h0;
            if (k2 < TAPS) { l0 = lo[k2]; h0 = hi[k2]; }
            else row_inside(off, s2, c->in[2], c->out[2], &l0, &h0);
            for (int q = 0; q < ns; q++) {
              int64_t i0 = seg[q].o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0], i1 = seg[q].o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
              int64_t a = seg[q].o2, e = a + seg[q].n;
              float *dr = d + seg[q].j - a;   /* dr[t] is output position t of this output row */
              if (i0 < 0 || i0 >= c->in[0] || i1 < 0 || i1 >= c->in[1]) {
                for (int64_t t = a; t < e; t++) dr[t] = 0;
                continue;
              }
              const float *xr = x + (ic * c->in[0] * c->in[1] + i0 * c->in[1] + i1) * c->in[2] + off;
              int64_t l = l0 < a ? a : l0 > e ? e : l0, h = h0 > e ? e : h0 < l ? l : h0;
              for (int64_t t = a; t < l; t++) dr[t] = 0;
              if (s2 == 1) for (int64_t t = l; t < h; t++) dr[t] = xr[t];
              else for (int64_t t = l; t < h; t++) dr[t] = xr[t * s2];
              for (int64_t t = h; t < e; t++) dr[t] = 0;
            }
            for (int64_t t = used; t < w; t++) d[t] = 0;
          }
  }
}

/* A 2-D convolution without im2col. Stride 1: with the image padded to Hp x Wp, the column matrix's
 * row (ic, kh, kw) at column q = oh * Wp + ow is xpad[ic][kh * dh][kw * dw + q], a run of the padded
 * image starting at ro[row]. Stride (sh, sw): the padded image is split into sh * sw phase images of
 * Hq x Wq = ceil(Hp / sh) x ceil(Wp / sw), phase (ph, pw) holding xpad[i * sh + ph][j * sw + pw]; tap
 * (kh, kw) then reads phase (kh * dh % sh, kw * dw % sw) from (kh * dh / sh, kw * dw / sw) on, again
 * a run per row. Two ways to multiply (the emitter picks the one with less padding in the tiles):
 * - mode 1, weight as A (Cout x K): the image is B, read in place over the wide grid of Wq columns per
 *   output row (the last Wq - Wo unused: Nw = (Ho - 1) * Wq + Wo columns), the valid ones then copied
 *   out (where Wq == Wo the wide grid is the output);
 * - mode 2, image as A, weight as B (K x Cout): output position o reads at offset po[o] = oh * Wq + ow,
 *   so there are no unused columns (49 outputs of 7x7 fill 56 rows, not 64 columns); the product is
 *   the output transposed (positions x Cout), each finished tile stored transposed into y (the
 *   transposed buffer holds the partial sums of K beyond one slice).
 * Stride 1 without padding reads the image as it is. col: ro (2 * K floats, rounded up to 16), po (2 *
 * (positions + 14), rounded up to 16: at most 2 * (positions + 24)), the phase images, the wide or
 * transposed output (the emitter sizes it). */
static void conv_rows(const gg_conv *c, const float *x, const float *wp, const float *bias, float *y, float *col, const gg_epi *ep, int mode) {
  int64_t H = c->in[1], W = c->in[2], sh = c->stride[1], sw = c->stride[2], ph0 = c->pad[1], pw0 = c->pad[2];
  int64_t Hq = (H + 2 * ph0 + sh - 1) / sh, Wq = (W + 2 * pw0 + sw - 1) / sw, Ho = c->out[1], Wo = c->out[2];
  int64_t K = c->Cin * c->k[1] * c->k[2], Nw = (Ho - 1) * Wq + Wo, isp = H * W, osp = Ho * Wo, qsp = Hq * Wq;
  bool copy = sh > 1 || sw > 1 || ph0 || pw0;
  int64_t *ro = (int64_t *)col, *po = ro + (K + 7) / 8 * 8;
  float *xq = (float *)(po + (osp + PK_MR + 7) / 8 * 8), *out2 = xq + (copy ? sh * sw * c->Cin * qsp : 0);
  for (int64_t ic = 0, r = 0; ic < c->Cin; ic++)
    for (int64_t kh = 0; kh < c->k[1]; kh++)
      for (int64_t kw = 0; kw < c->k[2]; kw++) {
        int64_t th = kh * c->dil[1], tw = kw * c->dil[2];
        ro[r++] = ((th % sh * sw + tw % sw) * c->Cin + ic) * qsp + th / sh * Wq + tw / sw;
      }
  if (mode == 2)   /* past the last position: the first (a row of the tile that is not stored) */
    for (int64_t o = 0; o < osp + PK_MR; o++) po[o] = o < osp ? o / Wo * Wq + o % Wo : 0;
  for (int64_t n = 0; n < c->N; n++) {
    const float *xn = x + n * c->Cin * isp, *b = xn;
    float *yn = y + n * c->Cout * osp;
    if (copy) {   /* phase image (ph, pw) of channel ic, row i: xpad row i * sh + ph, every sw-th from pw */
      _Pragma("omp parallel for schedule(static) if(c->Cin * H * W > 32768)")
      for (int64_t t = 0; t < sh * sw * c->Cin; t++) {
        int64_t ph = t / (sw * c->Cin), pw = t / c->Cin % sw, ic = t % c->Cin;
        phase_f32(xn + ic * isp, H, W, sh, sw, ph0, pw0, Hq, Wq, ph, pw, xq + t * qsp);
      }
      b = xq;
    }
    if (mode == 2) {
      rows_src a = {b, ro, po};
      gemm_run(osp, c->Cout, K, NULL, &a, wp, NULL, out2, c->Cout, NULL, bias, ep, yn, osp);
      continue;
    }
    rows_src bsrc = {b, ro, NULL};
    float *out = Wq == Wo ? yn : out2;
    gemm_run(c->Cout, Nw, K, wp, NULL, NULL, &bsrc, out, Nw, bias, NULL, out == yn ? ep : NULL, NULL, 0);
    if (out != yn) {   /* the valid columns copied out, then the epilogue on each plane while it is in cache */
      _Pragma("omp parallel for schedule(static) if(c->Cout * osp > 32768)")
      for (int64_t oc = 0; oc < c->Cout; oc++) {
        for (int64_t oh = 0; oh < Ho; oh++) memcpy(yn + (oc * Ho + oh) * Wo, out2 + oc * Nw + oh * Wq, sizeof(float) * (size_t)Wo);
        epi_run(ep, yn + oc * osp, osp, 1, osp);
      }
    }
  }
}

void gg_rt_conv_packed_f32(const gg_conv *c, const float *x, const float *wp, const float *bias, float *y, float *col, const gg_epi *ep, int mode) {
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2];
  if (mode) { conv_rows(c, x, wp, bias, y, col, ep, mode); return; }
  for (int64_t n = 0; n < c->N; n++) {
    im2col_pack(c, x + n * c->Cin * isp, col);
    gg_rt_gemm_packed(c->Cout, osp, c->Cin * ksp, wp, col, y + n * c->Cout * osp, osp, bias, NULL, ep);
  }
}



/* A 2-D convolution in channels-last (NHWC input [N, H, W, C], weight [Cout, R, S, C], output
 * [N, Ho, Wo, Cout]) as one product over every image's output positions: row o = (n, oh, ow) of the
 * column matrix at k = (r, s, ic) is xpad[n][oh * sh + r * dh][ow * sw + s * dw][ic], the element
 * at ro[k] + po[o] of the padded image (the image itself without padding), so the packed kernel reads
 * it in place (A, gemm_run's rows_src) against the weight packed as B (K x Cout); the output is the
 * product's row-major [positions, Cout], the bias a column bias, the epilogue on each finished tile.
 * A 1x1 convolution is a plain product of M = N * H * W rows. col: ro (2 * (K + 8) floats), po (2 *
 * (M + 16)), then the padded image when there is padding, then (without the packed kernel) an im2col
 * block of NHWC_ROWS rows. */
#define NHWC_ROWS 256
static int64_t nhwc_tables(const gg_conv *c, const void *x, size_t es, void *colv, const void **base) {
  int64_t N = c->N, H = c->in[1], W = c->in[2], C = c->Cin, R = c->k[1], S = c->k[2], Ho = c->out[1], Wo = c->out[2];
  int64_t ph = c->pad[1], pw = c->pad[2], Hp = H + 2 * ph, Wp = W + 2 * pw, K = R * S * C, M = N * Ho * Wo;
  int64_t *ro = (int64_t *)colv, *po = ro + (K + 8), i;
  char *xp = (char *)(po + (M + 16));
  *base = x;
  if (ph || pw) {   /* the padded image: row (n, hp) of Wp * C elements, zeros outside the image */
    _Pragma("omp parallel for schedule(static) if(N * Hp * Wp * C > 32768)")
    for (int64_t t = 0; t < N * Hp; t++) {
      int64_t n = t / Hp, hp = t % Hp, h = hp - ph;
      char *d = xp + (size_t)(t * Wp * C) * es;
      if (h < 0 || h >= H) { memset(d, 0, es * (size_t)(Wp * C)); continue; }
      memset(d, 0, es * (size_t)(pw * C));
      memcpy(d + (size_t)(pw * C) * es, (const char *)x + (size_t)((n * H + h) * W * C) * es, es * (size_t)(W * C));
      memset(d + (size_t)((pw + W) * C) * es, 0, es * (size_t)(pw * C));
    }
    *base = xp;
  }
  i = 0;
  for (int64_t r = 0; r < R; r++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t ic = 0; ic < C; ic++) ro[i++] = (r * c->dil[1] * Wp + s * c->dil[2]) * C + ic;
  _Pragma("omp parallel for schedule(static) if(M > 32768)")
  for (int64_t t = 0; t < N * Ho; t++) {   /* an output row (n, oh) at a time: no division a position */
    int64_t *p = po + t * Wo, at = ((t / Ho * Hp + t % Ho * c->stride[1]) * Wp) * C, step = c->stride[2] * C;
    for (int64_t ow = 0; ow < Wo; ow++) p[ow] = at + ow * step;
  }
  for (int64_t o = M; o < M + PK_MR; o++) po[o] = 0;   /* past the last position: the first (rows of a tile that are not stored) */
  return (int64_t)(2 * (K + 8) + 2 * (M + 16) + (ph || pw ? N * Hp * Wp * C : 0));
}

/* A depthwise convolution in channels-last (groups == C, weight [C, R, S, 1]): each output pixel's
 * channels in vectors, 64 at a time accumulated in float32 over the taps inside the image; the weight
 * first transposed into col as float32 [R, S, C] so that a tap's weights are contiguous too (then the
 * bias in float32, for bfloat16). One task per output row, its epilogue run while the row is in cache.
 * float32 and bfloat16 (LOAD and STORE convert; a bfloat16 result is rounded once, as PyTorch's). */
#define DW_NHWC_ROW(NAME, T, LOAD, STORE)                                                                           \
  static GG_VEC void NAME(const gg_conv *c, const T *x, const float *wt, const float *bias, T *yr, int64_t n, int64_t oh) { \
    int64_t H = c->in[1], W = c->in[2], C = c->Cin, R = c->k[1], S = c->k[2], Wo = c->out[2];                         \
    for (int64_t ow = 0; ow < Wo; ow++)                                                                               \
      for (int64_t c0 = 0; c0 < C; c0 += 64) {                                                                        \
        int64_t cn = C - c0 < 64 ? C - c0 : 64;                                                                       \
        float acc[64];                                                                                                \
        for (int64_t j = 0; j < cn; j++) acc[j] = bias ? bias[c0 + j] : 0;                                           \
        for (int64_t r = 0; r < R; r++) {                                                                             \
          int64_t ih = oh * c->stride[1] - c->pad[1] + r * c->dil[1];                                                 \
          if (ih < 0 || ih >= H) continue;                                                                            \
          for (int64_t s = 0; s < S; s++) {                                                                           \
            int64_t iw = ow * c->stride[2] - c->pad[2] + s * c->dil[2];                                               \
            if (iw < 0 || iw >= W) continue;                                                                          \
            const T *xi = x + ((n * H + ih) * W + iw) * C + c0;                                                       \
            const float *wv = wt + (r * S + s) * C + c0;                                                              \
            for (int64_t j = 0; j < cn; j++) acc[j] += LOAD(xi[j]) * wv[j];                                           \
          }                                                                                                           \
        }                                                                                                             \
        T *yo = yr + ow * C + c0;                                                                                     \
        for (int64_t j = 0; j < cn; j++) yo[j] = STORE(acc[j]);                                                       \
      }                                                                                                               \
  }
DW_NHWC_ROW(dw_nhwc_row, float, , )
DW_NHWC_ROW(dw_nhwc_row_bf16, uint16_t, gg_bf2f, gg_f2bf)

#ifdef GG_X512
/* dw_nhwc_row on AVX-512: 16 channels a vector held in registers over the taps (the generic loop's
 * 64 sums live in memory, a load and a store a tap), four output positions at once where all their
 * taps along the row are inside the image (each tap's weights loaded once for the four); the sums in
 * the same order, the bias first, so the outputs are the generic loop's bit for bit. float32, and
 * bfloat16 (widened on loading, rounded once to nearest even on storing, as gg_f2bf). */
#define GG_X512BW __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
static inline __attribute__((always_inline)) GG_X512 __m512 dw_ld_f32(__mmask16 m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
static inline __attribute__((always_inline)) GG_X512 void dw_st_f32(float *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
static inline __attribute__((always_inline)) GG_X512BW __m512 dw_ld_bf16(__mmask16 m, const uint16_t *p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
static inline __attribute__((always_inline)) GG_X512BW void dw_st_bf16(uint16_t *p, __mmask16 m, __m512 v) {
  __m512i x = _mm512_castps_si512(v), hi = _mm512_srli_epi32(x, 16);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))), 16);
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));   /* NaN: quiet, as gg_f2bf */
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}
#define DW_ROW_X512(NAME, T, TARGET, LD, ST)                                                                            \
  static TARGET void NAME(const gg_conv *c, const T *x, const float *wt, const float *bias, T *yr, int64_t n, int64_t oh) { \
    int64_t H = c->in[1], W = c->in[2], C = c->Cin, R = c->k[1], S = c->k[2], Wo = c->out[2];                          \
    int64_t sw = c->stride[2], pw = c->pad[2], dw = c->dil[2], xs = sw * C;                                            \
    for (int64_t c0 = 0; c0 < C; c0 += 16) {                                                                           \
      __mmask16 m = C - c0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - c0)) - 1);                             \
      __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + c0) : _mm512_setzero_ps();                                     \
      for (int64_t ow = 0; ow < Wo;) {                                                                                 \
        int64_t iw0 = ow * sw - pw;                                                                                    \
        bool four = ow + 4 <= Wo && iw0 >= 0 && iw0 + 3 * sw + (S - 1) * dw < W;                                       \
        __m512 a0 = b, a1 = b, a2 = b, a3 = b;                                                                         \
        for (int64_t r = 0; r < R; r++) {                                                                              \
          int64_t ih = oh * c->stride[1] - c->pad[1] + r * c->dil[1];                                                  \
          if (ih < 0 || ih >= H) continue;                                                                             \
          const T *xr = x + (n * H + ih) * W * C + c0;                                                                 \
          const float *wr = wt + r * S * C + c0;                                                                       \
          for (int64_t s = 0; s < S; s++) {                                                                            \
            int64_t iw = iw0 + s * dw;                                                                                 \
            if (!four && (iw < 0 || iw >= W)) continue;                                                                \
            __m512 w = _mm512_maskz_loadu_ps(m, wr + s * C);                                                           \
            const T *xp = xr + iw * C;                                                                                 \
            a0 = _mm512_fmadd_ps(LD(m, xp), w, a0);                                                                    \
            if (!four) continue;                                                                                       \
            a1 = _mm512_fmadd_ps(LD(m, xp + xs), w, a1);                                                               \
            a2 = _mm512_fmadd_ps(LD(m, xp + 2 * xs), w, a2);                                                           \
            a3 = _mm512_fmadd_ps(LD(m, xp + 3 * xs), w, a3);                                                           \
          }                                                                                                            \
        }                                                                                                              \
        T *yo = yr + ow * C + c0;                                                                                      \
        ST(yo, m, a0);                                                                                                 \
        if (four) {                                                                                                    \
          ST(yo + C, m, a1);                                                                                           \
          ST(yo + 2 * C, m, a2);                                                                                       \
          ST(yo + 3 * C, m, a3);                                                                                       \
        }                                                                                                              \
        ow += four ? 4 : 1;                                                                                            \
      }                                                                                                                \
    }                                                                                                                  \
  }
DW_ROW_X512(dw_row_x512, float, GG_X512, dw_ld_f32, dw_st_f32)
DW_ROW_X512(dw_row_x512_bf16, uint16_t, GG_X512BW, dw_ld_bf16, dw_st_bf16)
#endif

static bool dw_bw_ok(void) {
#ifdef GG_X512
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

/* h: x, w, bias and y bfloat16 (col then holds R*S*C + C floats) */
static void dw_nhwc(const gg_conv *c, const void *x, const void *w, const void *bias, void *y, float *wt, const gg_epi *ep, bool h) {
  int64_t C = c->Cin, RS = c->k[1] * c->k[2], Ho = c->out[1], Wo = c->out[2];
  const float *bf = h && bias ? wt + RS * C : (const float *)bias;
  for (int64_t ch = 0; ch < C; ch++)
    for (int64_t t = 0; t < RS; t++) wt[t * C + ch] = h ? gg_bf2f(((const uint16_t *)w)[ch * RS + t]) : ((const float *)w)[ch * RS + t];
  if (h && bias)
    for (int64_t ch = 0; ch < C; ch++) wt[RS * C + ch] = gg_bf2f(((const uint16_t *)bias)[ch]);
  bool x512 = gg_rt_packed_ok() && (!h || dw_bw_ok());   /* AVX-512 (and not GCC_GRAPH_BLAS_ONLY); its BW and VL for bfloat16 */
  (void)x512;
  _Pragma("omp parallel for schedule(static) if(c->N * Ho * Wo * C * RS > 32768)")
  for (int64_t t = 0; t < c->N * Ho; t++) {
    void *yr = (char *)y + (size_t)(t * Wo * C) * (h ? 2 : 4);
#ifdef GG_X512
    if (x512 && h) dw_row_x512_bf16(c, x, wt, bf, yr, t / Ho, t % Ho);
    else if (x512) dw_row_x512(c, x, wt, bf, yr, t / Ho, t % Ho);
    else
#endif
    if (h) dw_nhwc_row_bf16(c, x, wt, bf, yr, t / Ho, t % Ho);
    else dw_nhwc_row(c, x, wt, bf, yr, t / Ho, t % Ho);
    epi_run(ep, yr, C, Wo, C);
  }
}

void gg_rt_conv_nhwc_f32(const gg_conv *c, const float *x, const float *w, const float *wp, const float *bias, float *y, float *col,
                         const gg_epi *ep) {
  if (c->groups != 1) { dw_nhwc(c, x, w, bias, y, col, ep, false); return; }   /* depthwise (the only grouped one the layout stage makes) */
  const void *bv;
  int64_t used = nhwc_tables(c, x, sizeof(float), col, &bv), K = c->k[1] * c->k[2] * c->Cin, M = c->N * c->out[1] * c->out[2], Co = c->Cout;
  const int64_t *ro = (const int64_t *)col, *po = ro + (K + 8);
  const float *base = bv;
  if (wp) {
    rows_src a = {base, ro, po};
    gemm_run(M, Co, K, NULL, &a, wp, NULL, y, Co, NULL, bias, ep, NULL, 0);
    return;
  }
  /* without the packed kernel: blocks of NHWC_ROWS rows gathered (im2col), each a product with the
   * weight read as B[k][oc] = w[oc * K + k], then the bias and the epilogue */
  float *blk = col + used;
  for (int64_t m0 = 0; m0 < M; m0 += NHWC_ROWS) {
    int64_t rows = M - m0 < NHWC_ROWS ? M - m0 : NHWC_ROWS;
    _Pragma("omp parallel for schedule(static) if(rows * K > 32768)")
    for (int64_t i = 0; i < rows; i++)
      for (int64_t k = 0; k < K; k++) blk[i * K + k] = base[ro[k] + po[m0 + i]];
    float *ym = y + m0 * Co;
    gg_rt_sgemm(rows, Co, K, blk, K, 1, w, 1, K, ym, NULL);
    if (bias) {
      _Pragma("omp parallel for schedule(static) if(rows * Co > 32768)")
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < Co; j++) ym[i * Co + j] += bias[j];
    }
    if (ep) gg_rt_epi_pass(ep, ym, sizeof(float), rows * Co);
  }
}

/* A bfloat16 channels-last convolution (gg_rt.h). Without AMX (or memory for its panels), in float32:
 * the widened copies in the calling thread's scratch, the float32 result rounded once. */
void gg_rt_conv_nhwc_bf16(const gg_conv *c, const uint16_t *x, const uint16_t *w, const void *wp, const uint16_t *bias, uint16_t *y, void *col,
                          const gg_epi *ep) {
  if (c->groups != 1) { dw_nhwc(c, x, w, bias, y, col, ep, true); return; }   /* depthwise */
  int64_t K = c->k[1] * c->k[2] * c->Cin, M = c->N * c->out[1] * c->out[2], Co = c->Cout;
  bool amx = amx_ok();
  if (amx) {
    void *own = NULL;   /* a weight computed or mapped at run time (--weights external): packed for this call */
    if (!wp && !gg_rt_pack_weight(2, K, Co, w, 1, K, &own)) wp = own;
    const void *base;
    nhwc_tables(c, x, sizeof(uint16_t), col, &base);
    const int64_t *ro = (const int64_t *)col, *po = ro + (K + 8);
    bool done = wp && amx_rows_gemm(M, Co, K, base, ro, po, wp, y, bias, ep);
    free(own);
    if (done) return;
    wp = NULL;   /* AMX's panels: the float32 path reads the weight as it is */
  }
  int64_t nx = c->N * c->in[1] * c->in[2] * c->Cin, nw = wp ? 0 : Co * K, nb = bias ? Co : 0;
  float *xf = half_scratch(sizeof(float) * (size_t)(nx + nw + nb + M * Co) + 1), *wf = xf + nx, *bf = wf + nw, *yf = bf + nb;
  if (!xf) {   /* no memory for the float32 copies: one output at a time */
    int64_t H = c->in[1], W = c->in[2], C = c->Cin, S = c->k[2], Ho = c->out[1], Wo = c->out[2];
    _Pragma("omp parallel for schedule(static)")
    for (int64_t o = 0; o < M; o++)
      for (int64_t oc = 0; oc < Co; oc++) {
        int64_t ow = o % Wo, oh = o / Wo % Ho, n = o / (Wo * Ho);
        float acc = bias ? gg_bf2f(bias[oc]) : 0.0f;
        for (int64_t k = 0; k < K; k++) {
          int64_t ic = k % C, s = k / C % S, r = k / (C * S);
          int64_t ih = oh * c->stride[1] - c->pad[1] + r * c->dil[1], iw = ow * c->stride[2] - c->pad[2] + s * c->dil[2];
          if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc += gg_bf2f(x[((n * H + ih) * W + iw) * C + ic]) * gg_bf2f(w[oc * K + k]);
        }
        y[o * Co + oc] = gg_f2bf(acc);
      }
    gg_rt_epi_pass(ep, y, sizeof(uint16_t), M * Co);
    return;
  }
  bool par = !omp_in_parallel() && nx + nw + M * Co > 32768;
  _Pragma("omp parallel if(par)")
  {
    _Pragma("omp for schedule(static) nowait")
    for (int64_t i = 0; i < nx; i++) xf[i] = gg_bf2f(x[i]);
    _Pragma("omp for schedule(static) nowait")
    for (int64_t i = 0; i < nw; i++) wf[i] = gg_bf2f(w[i]);
    _Pragma("omp for schedule(static)")
    for (int64_t i = 0; i < nb; i++) bf[i] = gg_bf2f(bias[i]);
  }
  gg_rt_conv_nhwc_f32(c, xf, wp ? NULL : wf, wp, bias ? bf : NULL, yf, col, NULL);
  _Pragma("omp parallel for schedule(static) if(par)")
  for (int64_t i = 0; i < M * Co; i++) y[i] = gg_f2bf(yf[i]);
  gg_rt_epi_pass(ep, y, sizeof(uint16_t), M * Co);
}

/* ---------------------------------------------------------------- pooling */

#define POOL_HALF(NAME)                                                                                  \
  void gg_rt_pool_##NAME(const gg_pool *p, const uint16_t *x, uint16_t *y, int64_t *idx) {               \
    _Pragma("omp parallel for collapse(2) schedule(static) if(p->planes * p->OH * p->OW > 4096)")        \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                           \
      for (int64_t oh = 0; oh < p->OH; oh++)                                                             \
        for (int64_t ow = 0; ow < p->OW; ow++) gg_pool_one_##NAME(p, x, y, idx, pl, oh, ow);             \
  }
POOL_HALF(bf16)
POOL_HALF(f16)



