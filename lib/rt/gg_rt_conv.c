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
 * (positions + 8)), the phase images, the wide or transposed output (the emitter sizes it). */
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



/* ---------------------------------------------------------------- pooling */


