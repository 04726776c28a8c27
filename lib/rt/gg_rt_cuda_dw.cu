/* gg_rt_cuda_dw.cu: the CUDA runtime's depthwise convolutions in channels-last (gg_cu_dw_nhwc,
 * gg_rt.h), a translation unit of their own so that nvcc builds them beside the rest of the runtime
 * (gg_rt_cuda.cu, gg_rt_cuda_attn.cu): a new machine's first CUDA compile waits for the longest of
 * them. Launched on the stream of the model that runs (gg_cu_stream). */
#include "gg_rt.h"

#include <cuda_runtime.h>

/* A depthwise 2-d convolution in channels-last (groups == channels, one filter each): a thread per
 * output, the channels fastest so that a warp's loads of each tap are contiguous, the taps summed in
 * float in the filter's order and rounded once (as PyTorch's own depthwise kernel and cuDNN's). cuDNN's
 * grouped kernels took 4-5x the time of the rest of MobileNetV3 and ConvNeXt in NHWC
 * (docs/BENCHMARKS.md). Indices in 32 bits where the tensors allow (I; the grid-stride step, up to 2^28,
 * added to an index below 2^30, stays in range). */
template <int DT, typename I> __global__ void dw_nhwc(gg_conv c, const void *x, const void *w, const void *bias, void *y) {
  const I C = (I)c.Cout, OH = (I)c.out[1], OW = (I)c.out[2], H = (I)c.in[1], W = (I)c.in[2], R = (I)c.k[1], S = (I)c.k[2];
  const I sh = (I)c.stride[1], sw = (I)c.stride[2], ph = (I)c.pad[1], pw = (I)c.pad[2], dh = (I)c.dil[1], dw = (I)c.dil[2];
  const I n_out = (I)c.N * OH * OW * C;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n_out; i += (I)gridDim.x * blockDim.x) {
    I ch = i % C, p = i / C, ow = p % OW;
    p /= OW;
    I oh = p % OH, n = p / OH;
    float acc = 0;
    for (I r = 0; r < R; r++) {
      I ih = oh * sh - ph + r * dh;
      if (ih < 0 || ih >= H) continue;
      for (I t = 0; t < S; t++) {
        I iw = ow * sw - pw + t * dw;
        if (iw < 0 || iw >= W) continue;
        acc += dt_ld(DT, x, ((n * H + ih) * W + iw) * C + ch) * dt_ld(DT, w, (ch * R + r) * S + t);
      }
    }
    if (bias) acc += dt_ld(DT, bias, ch);
    dt_st(DT, y, i, acc);
  }
}

/* The same for 16-bit types with the channels a multiple of 8, 8 channels a thread: one 16-byte load
 * of the image per tap, the filter taps of the block's 32 channels in shared memory as float
 * [tap][channel] (two 16-byte reads per tap), 8 outputs rounded and stored as one 16-byte store. A
 * block is 4 channel groups x 64 output pixels, looping over the pixels. The same sums in the same
 * order: the same results as dw_nhwc. (The scalar kernel read each tap's weight 49 elements apart
 * across a warp's channels: ConvNeXt-T's 7x7 convolutions took 0.11-0.49 ms each at batch 32,
 * 25-50x their bytes' time; docs/BENCHMARKS.md.) */
#define DW_CT 32   /* channels a block covers */
#define DW_PIX 64  /* output pixels a block covers per pass */
/* The block's filter taps into shared memory as float [tap][channel] (0 past the channels), by all
 * its threads; then whether this thread's 8 channels (from cl in the block's) exist */
template <int DT> __device__ bool dw_taps(float *dw_w, const void *w, int c0, int C, int RS, int cl) {
  const int ct = min(DW_CT, C - c0);
  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < RS * DW_CT; i += blockDim.x * blockDim.y)
    dw_w[i] = i % DW_CT < ct ? dt_ld(DT, w, (int64_t)(c0 + i % DW_CT) * RS + i / DW_CT) : 0.f;
  __syncthreads();
  return cl < ct;
}

template <int DT> __global__ void __launch_bounds__(256) dw_nhwc_v8(gg_conv c, const uint16_t *x, const void *w, const void *bias, uint16_t *y) {
  extern __shared__ float dw_w[];   /* [R * S][DW_CT] */
  const int C = (int)c.Cout, R = (int)c.k[1], S = (int)c.k[2], c0 = blockIdx.x * DW_CT, cl = threadIdx.x * 8;
  if (!dw_taps<DT>(dw_w, w, c0, C, R * S, cl)) return;
  const int64_t OH = c.out[1], OW = c.out[2], H = c.in[1], W = c.in[2], npix = c.N * OH * OW;
  const int64_t sh = c.stride[1], sw = c.stride[2], ph = c.pad[1], pw = c.pad[2], dh = c.dil[1], dwl = c.dil[2];
  float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; bias && k < 8; k++) b[k] = dt_ld(DT, bias, c0 + cl + k);
  for (int64_t p = (int64_t)blockIdx.y * DW_PIX + threadIdx.y; p < npix; p += (int64_t)gridDim.y * DW_PIX) {
    const int64_t ow = p % OW, q = p / OW, oh = q % OH, n = q / OH;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int r = 0; r < R; r++) {
      const int64_t ih = oh * sh - ph + r * dh;
      if (ih < 0 || ih >= H) continue;
      const uint16_t *row = x + (n * H + ih) * W * C + c0 + cl;
      for (int t = 0; t < S; t++) {
        const int64_t iw = ow * sw - pw + t * dwl;
        if (iw < 0 || iw >= W) continue;
        const uint4 v = *(const uint4 *)(row + iw * C);
        const float4 w0 = *(const float4 *)&dw_w[(r * S + t) * DW_CT + cl], w1 = *(const float4 *)&dw_w[(r * S + t) * DW_CT + cl + 4];
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        const float wk[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        for (int k = 0; k < 8; k++) {
          const uint16_t h = (uint16_t)(u[k / 2] >> (16 * (k % 2)));
          acc[k] += (DT == 2 ? gg_h2f(h) : gg_bf2f(h)) * wk[k];
        }
      }
    }
    uint32_t o[4];
    for (int k = 0; k < 4; k++) {
      const float a = bias ? acc[2 * k] + b[2 * k] : acc[2 * k], e = bias ? acc[2 * k + 1] + b[2 * k + 1] : acc[2 * k + 1];
      o[k] = (uint32_t)(DT == 2 ? gg_f2h(a) : gg_f2bf(a)) | (uint32_t)(DT == 2 ? gg_f2h(e) : gg_f2bf(e)) << 16;
    }
    *(uint4 *)(y + p * C + c0 + cl) = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

/* dw_nhwc_v8 for stride 1 and dilation 1 along the width, KW taps wide: a thread computes DW_OWT
 * outputs along the width, so that a row's KW + DW_OWT - 1 input columns are loaded once for all of
 * them (7x7: 10 loads for 4 outputs, not 28), converted to float once. Each output's taps in the
 * same order; a tap outside the image adds 0 * w (the zero padding itself: x + 0 is x, the same sums
 * but for an infinite or NaN weight at the border). */
#define DW_OWT 4
template <int DT, int KW> __global__ void __launch_bounds__(256, 2) dw_nhwc_v8w(gg_conv c, const uint16_t *x, const void *w, const void *bias, uint16_t *y) {
  extern __shared__ float dw_w[];   /* [R * KW][DW_CT] */
  const int C = (int)c.Cout, R = (int)c.k[1], c0 = blockIdx.x * DW_CT, cl = threadIdx.x * 8;
  if (!dw_taps<DT>(dw_w, w, c0, C, R * KW, cl)) return;
  const int64_t OH = c.out[1], OW = c.out[2], H = c.in[1], W = c.in[2], OWQ = (OW + DW_OWT - 1) / DW_OWT, nq = c.N * OH * OWQ;
  const int64_t sh = c.stride[1], ph = c.pad[1], pw = c.pad[2], dh = c.dil[1];
  float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; bias && k < 8; k++) b[k] = dt_ld(DT, bias, c0 + cl + k);
  for (int64_t q = (int64_t)blockIdx.y * DW_PIX + threadIdx.y; q < nq; q += (int64_t)gridDim.y * DW_PIX) {
    const int64_t ow0 = q % OWQ * DW_OWT, q2 = q / OWQ, oh = q2 % OH, n = q2 / OH;
    float acc[DW_OWT][8];
    for (int j = 0; j < DW_OWT; j++)
      for (int k = 0; k < 8; k++) acc[j][k] = 0;
    for (int r = 0; r < R; r++) {
      const int64_t ih = oh * sh - ph + r * dh;
      if (ih < 0 || ih >= H) continue;
      const uint16_t *row = x + (n * H + ih) * W * C + c0 + cl;
      float cf[DW_OWT + KW - 1][8];   /* the row's columns in float, converted once (zeros outside the image) */
      for (int m = 0; m < DW_OWT + KW - 1; m++) {
        const int64_t iw = ow0 - pw + m;
        const uint4 v = iw >= 0 && iw < W ? *(const uint4 *)(row + iw * C) : make_uint4(0, 0, 0, 0);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 8; k++) cf[m][k] = DT == 2 ? gg_h2f((uint16_t)(u[k / 2] >> (16 * (k % 2)))) : __uint_as_float(k % 2 ? u[k / 2] & 0xffff0000u : u[k / 2] << 16);
      }
      for (int t = 0; t < KW; t++) {
        const float4 w0 = *(const float4 *)&dw_w[(r * KW + t) * DW_CT + cl], w1 = *(const float4 *)&dw_w[(r * KW + t) * DW_CT + cl + 4];
        const float wk[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        for (int j = 0; j < DW_OWT; j++)
          for (int k = 0; k < 8; k++) acc[j][k] += cf[j + t][k] * wk[k];
      }
    }
    for (int j = 0; j < DW_OWT && ow0 + j < OW; j++) {
      uint32_t o[4];
      for (int k = 0; k < 4; k++) {
        const float a = bias ? acc[j][2 * k] + b[2 * k] : acc[j][2 * k], e = bias ? acc[j][2 * k + 1] + b[2 * k + 1] : acc[j][2 * k + 1];
        o[k] = (uint32_t)(DT == 2 ? gg_f2h(a) : gg_f2bf(a)) | (uint32_t)(DT == 2 ? gg_f2h(e) : gg_f2bf(e)) << 16;
      }
      *(uint4 *)(y + ((n * OH + oh) * OW + ow0 + j) * C + c0 + cl) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

template <int DT> static void dw_nhwc_launch(const gg_conv *c, const void *x, const void *w, const void *bias, void *y) {
  cudaStream_t st = (cudaStream_t)gg_cu_stream();
  int64_t n = c->N * c->out[1] * c->out[2] * c->Cout, in = c->N * c->in[1] * c->in[2] * c->Cin, rs = c->k[1] * c->k[2];
  if (n == 0) return;
  if (DT != 0 && c->Cout % 8 == 0 && rs <= 256 && ((uintptr_t)x | (uintptr_t)y) % 16 == 0) {
    const int kw = (int)c->k[2];
    const bool wide = c->stride[2] == 1 && c->dil[2] == 1 && (kw == 3 || kw == 5 || kw == 7);
    int64_t npix = c->N * c->out[1] * (wide ? (c->out[2] + DW_OWT - 1) / DW_OWT : c->out[2]), tiles = (c->Cout + DW_CT - 1) / DW_CT, py = (npix + DW_PIX - 1) / DW_PIX;
    int64_t cap = 4096 / tiles > 0 ? 4096 / tiles : 1;   /* about 30 blocks an SM: the rest loop */
    dim3 grid((unsigned)tiles, (unsigned)(py < cap ? py : cap < 65535 ? cap : 65535)), block(DW_CT / 8, DW_PIX);
    size_t smem = (size_t)rs * DW_CT * sizeof(float);
    const uint16_t *xs = (const uint16_t *)x;
    uint16_t *ys = (uint16_t *)y;
    if (!wide) dw_nhwc_v8<DT><<<grid, block, smem, st>>>(*c, xs, w, bias, ys);
    else if (kw == 3) dw_nhwc_v8w<DT, 3><<<grid, block, smem, st>>>(*c, xs, w, bias, ys);
    else if (kw == 5) dw_nhwc_v8w<DT, 5><<<grid, block, smem, st>>>(*c, xs, w, bias, ys);
    else dw_nhwc_v8w<DT, 7><<<grid, block, smem, st>>>(*c, xs, w, bias, ys);
    return;
  }
  if (n < (INT32_MAX >> 1) && in < INT32_MAX) dw_nhwc<DT, int32_t><<<gg_cu_blocks(n), 256, 0, st>>>(*c, x, w, bias, y);
  else dw_nhwc<DT, int64_t><<<gg_cu_blocks(n), 256, 0, st>>>(*c, x, w, bias, y);
}

void gg_cu_dw_nhwc(int dt, const gg_conv *c, const void *x, const void *w, const void *bias, void *y) {
  if (dt == 2) dw_nhwc_launch<2>(c, x, w, bias, y);
  else if (dt == 3) dw_nhwc_launch<3>(c, x, w, bias, y);
  else dw_nhwc_launch<0>(c, x, w, bias, y);
}
