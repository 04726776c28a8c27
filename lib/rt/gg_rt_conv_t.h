/* gg_rt_conv_t.h: the convolution and pooling kernels of one element type. Included by gg_rt_conv.c
 * once per type, with T (float or double), S(name) (name_f32 or name_f64) and GEMM_T (its BLAS
 * product) defined: functions a debugger steps through line by line, where they were macros. */

/* Phase image (ph, pw) of a plane of H x W padded by (ph0, pw0) for strides (sh, sw): row i is the
 * padded row i * sh + ph, every sw-th element from pw; Hq x Wq, zeros outside the plane. Tap (th, tw)
 * of output (oh, ow) reads phase (th % sh, tw % sw) at (oh + th / sh, ow + tw / sw), so a tap reads
 * the output rows of one phase image as one contiguous run (conv_rows, depthwise). */
static void S(phase)(const T *xc, int64_t H, int64_t W, int64_t sh, int64_t sw, int64_t ph0, int64_t pw0, int64_t Hq,
                      int64_t Wq, int64_t ph, int64_t pw, T *d) {
  int64_t lo, hi;
  row_inside(pw - pw0, sw, W, Wq, &lo, &hi);
  for (int64_t i = 0; i < Hq; i++, d += Wq) {
    int64_t h = i * sh + ph - ph0;
    if (h < 0 || h >= H) { memset(d, 0, sizeof(T) * (size_t)Wq); continue; }
    const T *src = xc + h * W + pw - pw0;
    for (int64_t j = 0; j < lo; j++) d[j] = 0;
    if (sw == 1) memcpy(d + lo, src + lo, sizeof(T) * (size_t)(hi - lo));
    else for (int64_t j = lo; j < hi; j++) d[j] = src[j * sw];
    for (int64_t j = hi; j < Wq; j++) d[j] = 0;
  }
}

/* Depthwise (one input channel per group), one output plane per task; im2col + GEMM would multiply a
 * 1-row matrix per channel. 2-d: the input channel's phase images (phase_T) go to the thread's buffer,
 * and each tap is one multiply-add along a run of (Ho - 1) * Wq + Wo outputs over the phase image's
 * width (as conv_rows reads the image), long and contiguous whatever the plane's width (mobilenet's
 * 7 x 7 planes: 77 per tap, where a row of 7 per tap and row had cost more in bounds than in
 * arithmetic); the valid columns are copied out. 3-d convolutions, or a buffer that cannot grow,
 * take direct loops along the output row. */
static __thread T *S(depthwise_buf);
static __thread size_t S(depthwise_cap);
static void S(depthwise_direct)(const gg_conv *c, const T *xp, const T *wp, T b0, T *yp) {
  for (int64_t o0 = 0; o0 < c->out[0]; o0++)
    for (int64_t o1 = 0; o1 < c->out[1]; o1++) {
      T *row = yp + (o0 * c->out[1] + o1) * c->out[2];
      for (int64_t o2 = 0; o2 < c->out[2]; o2++) row[o2] = b0;
      for (int64_t k0 = 0; k0 < c->k[0]; k0++) {
        int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];
        if (i0 < 0 || i0 >= c->in[0]) continue;
        for (int64_t k1 = 0; k1 < c->k[1]; k1++) {
          int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
          if (i1 < 0 || i1 >= c->in[1]) continue;
          const T *xr = xp + (i0 * c->in[1] + i1) * c->in[2];
          for (int64_t k2 = 0; k2 < c->k[2]; k2++) {
            T wv = wp[(k0 * c->k[1] + k1) * c->k[2] + k2];
            int64_t off = k2 * c->dil[2] - c->pad[2], s = c->stride[2];
            int64_t lo, hi;
            row_inside(off, s, c->in[2], c->out[2], &lo, &hi);
            for (int64_t o2 = lo; o2 < hi; o2++) row[o2] += wv * xr[o2 * s + off];
          }
        }
      }
    }
}
/* acc[0:Nw] = b0 + the taps over the phase images xq (built for AVX-512 too: GG_VEC). Tap
 * (th, tw) = (kh, kw) * dil is at phase (th % sh, tw % sw), offset (th / sh, tw / sw): both
 * stepped along, without a division per tap (they cost more than a small plane's tap). */
static GG_VEC void S(depthwise_taps)(const gg_conv *c, const T *xq, int64_t Wq, int64_t qsp, int64_t Nw, const T *wp, T b0, T *acc) {
  int64_t sh = c->stride[1], sw = c->stride[2];
  int64_t dqh = c->dil[1] / sh, drh = c->dil[1] % sh, dqw = c->dil[2] / sw, drw = c->dil[2] % sw;
  for (int64_t o = 0; o < Nw; o++) acc[o] = b0;
  for (int64_t kh = 0, qh = 0, rh = 0; kh < c->k[1]; kh++) {
    for (int64_t kw = 0, qw = 0, rw = 0; kw < c->k[2]; kw++) {
      const T *src = xq + (rh * sw + rw) * qsp + qh * Wq + qw;
      T wv = wp[kh * c->k[2] + kw];
      for (int64_t o = 0; o < Nw; o++) acc[o] += wv * src[o];
      qw += dqw, rw += drw;
      if (rw >= sw) qw++, rw -= sw;
    }
    qh += dqh, rh += drh;
    if (rh >= sh) qh++, rh -= sh;
  }
}
static void S(depthwise)(const gg_conv *c, const T *x, const T *w, const T *bias, T *y, const gg_epi *ep) {
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];
  int64_t ksp = c->k[0] * c->k[1] * c->k[2], mult = c->Cout / c->groups;
  int64_t H = c->in[1], W = c->in[2], sh = c->stride[1], sw = c->stride[2], Ho = c->out[1], Wo = c->out[2];
  int64_t Hq = (H + 2 * c->pad[1] + sh - 1) / sh, Wq = (W + 2 * c->pad[2] + sw - 1) / sw, qsp = Hq * Wq;
  int64_t Nw = (Ho - 1) * Wq + Wo;
  bool plane = c->k[0] == 1 && c->in[0] == 1 && c->out[0] == 1 && Ho > 0 && Wo > 0;
  size_t need = (size_t)(sh * sw * qsp + Nw);
  _Pragma("omp parallel for schedule(static)")
  for (int64_t p = 0; p < c->N * c->Cout; p++) {
    int64_t n = p / c->Cout, oc = p % c->Cout, ic = oc / mult;
    const T *xp = x + (n * c->Cin + ic) * isp, *wp = w + oc * ksp;
    T *yp = y + p * osp, b0 = bias ? bias[oc] : (T)0;
    if (plane && need > S(depthwise_cap)) {
      void *m = NULL;
      if (!posix_memalign(&m, GG_RT_ALIGN, need * sizeof(T))) {
        free(S(depthwise_buf));
        S(depthwise_buf) = m;
        S(depthwise_cap) = need;
      }
    }
    if (!plane || need > S(depthwise_cap)) {
      S(depthwise_direct)(c, xp, wp, b0, yp);
      epi_run(ep, yp, osp, 1, osp);
      continue;
    }
    T *xq = S(depthwise_buf);
    for (int64_t ph = 0; ph < sh; ph++)
      for (int64_t pw = 0; pw < sw; pw++)
        S(phase)(xp, H, W, sh, sw, c->pad[1], c->pad[2], Hq, Wq, ph, pw, xq + (ph * sw + pw) * qsp);
    S(depthwise_taps)(c, xq, Wq, qsp, Nw, wp, b0, xq + sh * sw * qsp);
    for (int64_t oh = 0; oh < Ho; oh++) memcpy(yp + oh * Wo, xq + sh * sw * qsp + oh * Wq, sizeof(T) * (size_t)Wo);
    epi_run(ep, yp, osp, 1, osp);
  }
}

/* im2col: col[(ic, k0, k1, k2), (o0, o1, o2)] = x[ic, o*stride - pad + k*dil] or 0 outside, for icg
 * channels of one image (x points at the group's first channel) */
static void S(im2col)(const gg_conv *c, const T *xg, int64_t icg, T *col) {
  int64_t osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2];
  _Pragma("omp parallel for collapse(2) schedule(static)")
  for (int64_t ic = 0; ic < icg; ic++)
    for (int64_t kk = 0; kk < ksp; kk++) {
      int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];
      T *row = col + (ic * ksp + kk) * osp;
      int64_t s2 = c->stride[2], off = k2 * c->dil[2] - c->pad[2], lo, hi;
      row_inside(off, s2, c->in[2], c->out[2], &lo, &hi);
      for (int64_t o0 = 0; o0 < c->out[0]; o0++) {
        int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];
        for (int64_t o1 = 0; o1 < c->out[1]; o1++) {
          int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
          T *r = row + (o0 * c->out[1] + o1) * c->out[2];
          /* rows are short (7 to 112): plain loops, which vectorize, cost less than memcpy calls */
          if (i0 < 0 || i0 >= c->in[0] || i1 < 0 || i1 >= c->in[1]) {
            for (int64_t o2 = 0; o2 < c->out[2]; o2++) r[o2] = 0;
            continue;
          }
          const T *xr = xg + (ic * c->in[0] * c->in[1] + i0 * c->in[1] + i1) * c->in[2] + off;
          for (int64_t o2 = 0; o2 < lo; o2++) r[o2] = 0;
          if (s2 == 1) for (int64_t o2 = lo; o2 < hi; o2++) r[o2] = xr[o2];
          else for (int64_t o2 = lo; o2 < hi; o2++) r[o2] = xr[o2 * s2];
          for (int64_t o2 = hi; o2 < c->out[2]; o2++) r[o2] = 0;
        }
      }
    }
}

void S(gg_rt_conv)(const gg_conv *c, const T *x, const T *w, const T *bias, T *y, T *col, const gg_epi *ep) {
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];
  int64_t ksp = c->k[0] * c->k[1] * c->k[2], G = c->groups;
  int64_t icg = c->Cin / G, ocg = c->Cout / G;
  if (!c->transposed && icg == 1 && G > 1) {
    S(depthwise)(c, x, w, bias, y, ep);
    return;
  }
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t g = 0; g < G; g++) {
      const T *xg = x + (n * c->Cin + g * icg) * isp;
      T *yg = y + (n * c->Cout + g * ocg) * osp;
      if (!c->transposed) {
        /* y[oc, o] = w[oc, (ic,k)] @ col[(ic,k), o]; a 1x1 convolution of stride 1 without padding
         * multiplies the image itself */
        bool same = ksp == 1 && c->stride[0] == 1 && c->stride[1] == 1 && c->stride[2] == 1 &&
                    c->pad[0] == 0 && c->pad[1] == 0 && c->pad[2] == 0;
        if (!same) S(im2col)(c, xg, icg, col);
        GEMM_T(ocg, osp, icg * ksp, w + g * ocg * icg * ksp, icg * ksp, 1, same ? xg : col, osp, 1, yg, NULL);
      } else {
        /* col[(oc,k), i] = w[ic, (oc,k)]^T @ x[ic, i], then scatter-add into y (col2im) */
        GEMM_T(ocg * ksp, isp, icg, w + g * icg * ocg * ksp, 1, ocg * ksp, xg, isp, 1, col, NULL);
        memset(yg, 0, sizeof(T) * (size_t)(ocg * osp));
        _Pragma("omp parallel for schedule(static)")
        for (int64_t oc = 0; oc < ocg; oc++)
          for (int64_t kk = 0; kk < ksp; kk++) {
            int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];
            const T *row = col + (oc * ksp + kk) * isp;
            for (int64_t i0 = 0; i0 < c->in[0]; i0++) {
              int64_t o0 = i0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];
              if (o0 < 0 || o0 >= c->out[0]) continue;
              for (int64_t i1 = 0; i1 < c->in[1]; i1++) {
                int64_t o1 = i1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
                if (o1 < 0 || o1 >= c->out[1]) continue;
                for (int64_t i2 = 0; i2 < c->in[2]; i2++) {
                  int64_t o2 = i2 * c->stride[2] - c->pad[2] + k2 * c->dil[2];
                  if (o2 < 0 || o2 >= c->out[2]) continue;
                  yg[oc * osp + (o0 * c->out[1] + o1) * c->out[2] + o2] += row[(i0 * c->in[1] + i1) * c->in[2] + i2];
                }
              }
            }
          }
      }
      if (bias || ep) {   /* the bias, then the epilogue, per output plane while it is in cache */
        _Pragma("omp parallel for schedule(static) if(ocg * osp > 32768)")
        for (int64_t oc = 0; oc < ocg; oc++) {
          if (bias)
            for (int64_t o = 0; o < osp; o++) yg[oc * osp + o] += bias[g * ocg + oc];
          epi_run(ep, yg + oc * osp, osp, 1, osp);
        }
      }
    }
}

/* The weight's (and bias's) gradient of a plain convolution: per image and group, dw += dy (ocg x osp)
 * @ col(x)^T (osp x icg*k), col the forward's im2col; depthwise convolutions sum directly. */
void S(gg_rt_conv_wgrad)(const gg_conv *c, const T *x, const T *dy, T *dw, T *db, T *col, T *tmp) {
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];
  int64_t ksp = c->k[0] * c->k[1] * c->k[2], G = c->groups, icg = c->Cin / G, ocg = c->Cout / G;
  if (db) {
    _Pragma("omp parallel for schedule(static)")
    for (int64_t oc = 0; oc < c->Cout; oc++) {
      double a = 0;
      for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < osp; o++) a += dy[(n * c->Cout + oc) * osp + o];
      db[oc] = (T)a;
    }
  }
  if (!dw) return;
  if (icg == 1 && ocg == 1 && G > 1) {
    _Pragma("omp parallel for schedule(static)")
    for (int64_t ch = 0; ch < c->Cout; ch++)
      for (int64_t kk = 0; kk < ksp; kk++) {
        int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];
        double a = 0;
        for (int64_t n = 0; n < c->N; n++) {
          const T *xp = x + (n * c->Cin + ch) * isp, *gp = dy + (n * c->Cout + ch) * osp;
          for (int64_t o0 = 0; o0 < c->out[0]; o0++) {
            int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];
            if (i0 < 0 || i0 >= c->in[0]) continue;
            for (int64_t o1 = 0; o1 < c->out[1]; o1++) {
              int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
              if (i1 < 0 || i1 >= c->in[1]) continue;
              const T *xr = xp + (i0 * c->in[1] + i1) * c->in[2], *gr = gp + (o0 * c->out[1] + o1) * c->out[2];
              for (int64_t o2 = 0; o2 < c->out[2]; o2++) {
                int64_t i2 = o2 * c->stride[2] - c->pad[2] + k2 * c->dil[2];
                if (i2 >= 0 && i2 < c->in[2]) a += (double)gr[o2] * xr[i2];
              }
            }
          }
        }
        dw[ch * ksp + kk] = (T)a;
      }
    return;
  }
  int64_t wn = ocg * icg * ksp;
  memset(dw, 0, sizeof(T) * (size_t)(c->Cout * icg * ksp));
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t g = 0; g < G; g++) {
      S(im2col)(c, x + (n * c->Cin + g * icg) * isp, icg, col);
      GEMM_T(ocg, icg * ksp, osp, dy + (n * c->Cout + g * ocg) * osp, osp, 1, col, 1, osp, tmp, NULL);
      T *d = dw + g * wn;
      _Pragma("omp parallel for schedule(static) if(wn > 32768)")
      for (int64_t i = 0; i < wn; i++) d[i] += tmp[i];
    }
}

/* Max pooling without indices (inference): a row of outputs at a time, each tap a pass along the
 * row over the columns whose input falls inside the plane (as the depthwise convolution), so the
 * inner loop vectorizes. NaN wins, as in PyTorch. */
static void S(max_pool_rows)(const gg_pool *p, const T *x, T *y) {
  _Pragma("omp parallel for schedule(static)")
  for (int64_t pl = 0; pl < p->planes; pl++)
    for (int64_t oh = 0; oh < p->OH; oh++) {
      T *row = y + (pl * p->OH + oh) * p->OW;
      for (int64_t ow = 0; ow < p->OW; ow++) row[ow] = (T)-INFINITY;
      for (int64_t kh = 0; kh < p->k[0]; kh++) {
        int64_t h = oh * p->stride[0] - p->pad[0] + kh * p->dil[0];
        if (h < 0 || h >= p->H) continue;
        const T *xr = x + (pl * p->H + h) * p->W;
        for (int64_t kw = 0; kw < p->k[1]; kw++) {
          int64_t off = kw * p->dil[1] - p->pad[1], s = p->stride[1];
          int64_t lo, hi;
          row_inside(off, s, p->W, p->OW, &lo, &hi);
          for (int64_t ow = lo; ow < hi; ow++) {
            T v = xr[ow * s + off];
            row[ow] = v > row[ow] || v != v ? v : row[ow];
          }
        }
      }
    }
}

void S(gg_rt_pool)(const gg_pool *p, const T *x, T *y, int64_t *idx) {
  if (p->kind == 0 && !idx) { S(max_pool_rows)(p, x, y); return; }
  _Pragma("omp parallel for schedule(static)")
  for (int64_t pl = 0; pl < p->planes; pl++)
    for (int64_t oh = 0; oh < p->OH; oh++)
      for (int64_t ow = 0; ow < p->OW; ow++) CAT(gg_pool_one_, T)(p, x, y, idx, pl, oh, ow);
}
