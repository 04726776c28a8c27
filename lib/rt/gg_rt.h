/* gg_rt.h: what the generated code of a model and the runtime share: gg_rt.c for a CPU model,
 * gg_rt_cuda.cu for a CUDA one (compile --target cuda), both with gg_rt_common.c. They are compiled
 * into every model .so; gcc-graph embeds these files and writes them next to the generated model.c
 * (model.cu). Valid C11 and CUDA C++: helpers that kernels call are GG_HD (host and device). */
#ifndef GG_RT_H
#define GG_RT_H

#include "gcc_graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#ifdef __CUDACC__
#include <cuda_bf16.h>   /* the device's half and bfloat16 conversions (gg_f2bf, gg_f2h, gg_h2f) */
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define GG_HD static inline __host__ __device__
#else
#define GG_HD static inline
#endif

/* Kernels whose loops vectorize (pointwise chains, softmax rows) are built twice by GCC, for x86-64
 * and for x86-64-v4 (AVX-512), and the loader picks one for the CPU it runs on (an ifunc): a .so
 * still runs on any x86-64. Not with clang (its OpenMP-outlined loops lose the target) nor nvcc. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(GG_NO_CLONES)
#define GG_VEC __attribute__((target_clones("default", "arch=x86-64-v4")))
#else
#define GG_VEC
#endif

/* Compile time of large models: a C kernel is never inlined into the run function (a call per
 * kernel costs nothing, one function holding every kernel costs GCC seconds), and the run function,
 * a sequence of calls, is built at -O1 by GCC (-O3 bought it nothing and took a third of the time). */
#if defined(__GNUC__) && !defined(__CUDACC__)
#define GG_NOINLINE __attribute__((noinline))
#else
#define GG_NOINLINE
#endif
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define GG_RUNFN __attribute__((optimize("O1")))
#else
#define GG_RUNFN
#endif

#define GG_RT_MAX_RANK 16
#define GG_MAX_IO 256   /* inputs and outputs of a call */
#define GG_RT_ALIGN 64
/* The weights appended to a compiled .so: the file padded to GG_BLOB_PAGE, the blob (each weight
 * 64-byte aligned), then a trailer of 24 bytes: this magic, the blob's offset and its size (uint64,
 * the machine's byte order). The runtime maps them at gg_open. */
#define GG_BLOB_MAGIC "GGBLOB01"
#define GG_BLOB_PAGE 65536

typedef struct gg_weight_desc {
  const char *fqn;
  int64_t offset;           /* embedded: offset in the blob; external: byte offset in the file */
  int64_t nbytes;
  int mutable_index;        /* >= 0: a buffer the model mutates (kept in a private copy) */
} gg_weight_desc;

typedef struct gg_model_desc {
  int ninputs, noutputs, nsyms, nweights, nmutable;
  const char *const *input_names;
  const DLDataType *output_dtypes;
  const int *output_ndims;
  const gg_weight_desc *weights;
  const unsigned char *blob;     /* weights compiled in (gcc-graph compile -S), else NULL: appended to the
                                  * .so's file when blob_size > 0 (GG_BLOB_MAGIC), or in a file of their own */
  int64_t blob_size;
  int64_t external_size;         /* size of the external weights file, checked at open */
  const int *mutable_weight;     /* weight index of each mutated buffer */
  const DLDataType *mutable_dtypes;
  const int *mutable_ndims;
  const int64_t *mutable_shapes; /* GG_RT_MAX_RANK entries per buffer */
  int (*guard)(const DLTensor *in, int64_t *sym, char *err, size_t errlen);
  void (*output_shape)(int i, const int64_t *sym, int64_t *shape);
  int64_t (*scratch_bytes)(const int64_t *sym);
  /* NULL on success, else why the run stopped (an index out of range) */
  const char *(*run)(void *const *w, void *const *mut, const DLTensor *in, void *const *out, unsigned char *scratch, const int64_t *sym);
  int nprof;                     /* GCC_GRAPH_PROFILE: per node, accumulated seconds and names */
  double *prof;
  const char *const *prof_names;
  int device;                    /* kDLCPU, or kDLCUDA for compile --target cuda */
  /* CUDA: the kernels, in nparts fatbinaries (nvcc -fatbin of model.cu, model_1.cu, ...) that gg_open
   * loads; kernel_part[id]: the part of kernel k<id> (-1: an id that is no __global__ kernel).
   * Kernels cannot return: one that finds an index out of range sets the int at each part's
   * gg_dev_errp (which gg_open points at one flag) to its code, which device_error turns into a message */
  const unsigned char *const *kernels;
  int nparts;
  const int *kernel_part;
  int nkernels;
  const char *(*device_error)(int code);
  /* CPU inference: weights of matrix products and convolutions that gg_open packs for the runtime's
   * kernels (gg_rt_pack_weight: the float32 kernel's panels, or AMX's for bfloat16); the run finds
   * pack j at w[nweights + j], NULL where this machine runs neither (float32: no AVX-512 or
   * GCC_GRAPH_BLAS_ONLY=1; bfloat16: no AMX and no AVX-512 float32 kernel) */
  int npacks;
  const struct gg_pack_desc *packs;
  int random;                    /* the model draws random numbers (rand, randn, dropout in training): on the
                                  * GPU its runs are launched, not replayed from a CUDA graph, so each draws anew */
} gg_model_desc;

/* Random ops: the seed (GCC_GRAPH_SEED, else 0, or gg_manual_seed's) and the next draw, a count of
 * random-op executions in this process; scalar.h's generator turns (seed, draw, element) into bits. */
uint64_t gg_rt_rng_seed(void);
uint64_t gg_rt_rng_draw(void);

/* A matrix read out of weight `weight`: element (r, c) at offset + r * srow + c * scol (float32
 * elements), packed as the left operand (side 0: rows x cols = M x K) or the right one (side 1:
 * K x N) of gg_rt_gemm_packed; side 2 (3): a bfloat16 (float16) weight as the right operand of
 * gg_rt_hgemm (its elements 16-bit). gg_rt_pack_weight packs it. */
typedef struct gg_pack_desc {
  int weight, side;
  int64_t offset, rows, cols, srow, scol;
} gg_pack_desc;

/* A training model (compile --train): the forward (gg__desc) also writes the values the backward
 * needs, as outputs after its user outputs; the backward takes them, then the loss's cotangent, and
 * writes one gradient per parameter (or input) that requires grad. ngrads == 0: inference only. */
typedef struct gg_train_desc {
  int nsaved, ngrads;
  const int *grad_weight;        /* weight index of each gradient's parameter, -1 for a user input */
  const char *const *grad_names;
  const DLDataType *grad_dtypes;
  const int *grad_ndims;
  DLDataType loss_dtype;
  int loss_ndim;
  void (*grad_shape)(int i, const int64_t *sym, int64_t *shape);
  int64_t (*scratch_bytes)(const int64_t *sym);
  const char *(*run)(void *const *w, void *const *mut, const DLTensor *in, void *const *out, unsigned char *scratch, const int64_t *sym);
  int optimizer;                 /* 0 none, 1 SGD, 2 Adam, 3 AdamW (gg_opt_one) */
  double lr, momentum, weight_decay, beta1, beta2, eps;
  int nprof;
  double *prof;
  const char *const *prof_names;
  int nbuckets;                  /* gradient buckets (data-parallel runs all-reduce one at a time) */
  const int *grad_bucket;        /* the bucket of each gradient */
  const int *saved_last;         /* the backward's last kernel reading each saved value */
  const int *bucket_first;       /* the backward's first kernel writing into each bucket */
} gg_train_desc;

extern const gg_model_desc gg__desc;
extern const gg_train_desc gg__train;
extern const char gg__metadata[];

/* Data-parallel training: the backward's gradient bucket b is final (each runtime all-reduces it when
 * the model runs data-parallel). A message stops the run. */
const char *gg_rt_bucket(int b);
#define GG_BUCKET(b) do { const char *gg_be_ = gg_rt_bucket(b); if (gg_be_) return gg_be_; } while (0)

/* Profiling (GCC_GRAPH_PROFILE=1 in the environment when the model is opened): the run body ticks a
 * clock after each node, adding the time since the last tick to the node's slot. */
extern bool gg_rt_prof_on;
void gg_rt_tick(double *slot);
#define GG_TICK(slot) do { if (gg_rt_prof_on) gg_rt_tick(slot); } while (0)

/* Guard messages. Returns 1. */
int gg_rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int gg_rt_check_tensor(const DLTensor *t, const char *name, DLDataType want, int ndim, int device, char *err, size_t errlen);
const char *gg_rt_dtype_name(DLDataType t);

/* Symbolic size arithmetic with Python's floor semantics. */
GG_HD int64_t gg_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
GG_HD int64_t gg_mod(int64_t a, int64_t b) { int64_t m = a % b; return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }
GG_HD int64_t gg_max(int64_t a, int64_t b) { return a > b ? a : b; }
GG_HD int64_t gg_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* half and bfloat16 storage, converted through float (round to nearest even); on the device by its
 * own instructions (cuda_fp16.h, cuda_bf16.h: the same values; a NaN rounds to 0x7fff) */
GG_HD float gg_h2f(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
  if (exp == 0) {
    float f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 112) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}
GG_HD uint16_t gg_f2h(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  double d = f, a = fabs(d);
  uint16_t sign = signbit(d) ? 0x8000 : 0;
  if (isnan(d)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < ldexp(1.0, -25)) return sign;
  int e;
  frexp(a, &e);
  int exp = e - 1;
  double q = exp < -14 ? ldexp(a, 24) : ldexp(a, 10 - exp), r = nearbyint(q);
  if (exp < -14) return sign | (uint16_t)r;
  uint32_t m = (uint32_t)r;
  if (m == 2048) { m = 1024; exp++; }
  if (exp > 15) return sign | 0x7c00;
  return sign | (uint16_t)((exp + 15) << 10) | (uint16_t)(m - 1024);
#endif
}
GG_HD float gg_bf2f(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
GG_HD uint16_t gg_f2bf(float f) {
#ifdef __CUDA_ARCH__
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
#endif
}

/* The pointwise nodes the emitter fused after a product or convolution (its epilogue; the emitter
 * writes fn for each such kernel): fn applies them in place to rows x cols elements of the output,
 * element (i, j) at y[i * ld + j], which is element (y - y0) + i * ld + j of the output tensor (float32,
 * or float64 for a float64 output). x: the other tensors they read, indexed as the output; s: the
 * symbols. Products and convolutions apply it to each finished tile or span while it is in cache;
 * NULL: none. */
#define GG_EPI_MAX 8
typedef struct gg_epi {
  void (*fn)(const struct gg_epi *ep, void *y, int64_t ld, int64_t rows, int64_t cols);
  void *y0;
  const void *x[GG_EPI_MAX];
  const int64_t *s;
} gg_epi;
/* ep on n elements of the output from y (esize bytes each), as a pass shared by the threads */
void gg_rt_epi_pass(const gg_epi *ep, void *y, size_t esize, int64_t n);

/* Matrix products: C[b] = A[b] @ B[b] with element strides (a unit stride on one of the two matrix
 * dims of each operand), batched by the caller, then the epilogue ep (or NULL). Float types go to
 * BLAS (float32 to the packed kernel where it runs). */
void gg_rt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t sbk, int64_t sbn, float *C,
                 const gg_epi *ep);
void gg_rt_dgemm(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak, const double *B, int64_t sbk, int64_t sbn, double *C,
                 const gg_epi *ep);

/* A float16 (dt 2) or bfloat16 (dt 3) product: Y (M x N, element (i, j) at Y[i * ldy + j]) = alpha *
 * A @ B + beta * bias (element (i, j) at bias[i * sbm + j * sbj], of type bdt: 0 float32, 2 float16, 3
 * bfloat16; NULL for none), the products accumulated in float32 and the result rounded once to dt, as
 * PyTorch's CPU kernels do. bfloat16 runs on AMX where the CPU has it (gg_rt_amx_ok; GCC_GRAPH_NO_AMX=1
 * turns it off); otherwise both operands are widened to float32 and multiplied by gg_rt_sgemm. */
void gg_rt_hgemm(int dt, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t sam, int64_t sak, const uint16_t *B, int64_t sbk,
                 int64_t sbn, const void *pk, uint16_t *Y, int64_t ldy, float alpha, float beta, const void *bias, int bdt, int64_t sbm, int64_t sbj);
/* pk: B packed at gg_open (gg_rt_pack_weight, side 2 or 3), or NULL */
int gg_rt_pack_weight(int side, int64_t rows, int64_t cols, const void *src, int64_t srow, int64_t scol, void **out);
bool gg_rt_amx_ok(void);

/* float32 products on packed panels (x86-64 with AVX-512, checked at run time): C = A @ B (+ row_bias
 * per row, + col_bias per column, then the epilogue ep), A packed by gg_rt_pack side 0, B side 1, C with
 * leading dimension ldc. gg_rt_packed_ok() says whether this machine runs them. Pack sizes are in
 * floats. */
bool gg_rt_packed_ok(void);
int64_t gg_rt_pack_floats(int side, int64_t rows, int64_t cols);
void gg_rt_pack(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst);
void gg_rt_gemm_packed(int64_t M, int64_t N, int64_t K, const float *Ap, const float *Bp, float *C, int64_t ldc, const float *row_bias,
                       const float *col_bias, const gg_epi *ep);

/* Convolution of contiguous NC[D]HW input with contiguous weight, as 3-d with unit dims; with nhwc
 * (the GPU's cuDNN path only) input, output and weight are channels-last: NHWC and KRSC. */
typedef struct gg_conv {
  int64_t N, Cin, Cout, groups;
  int64_t in[3], k[3], out[3], stride[3], pad[3], dil[3];
  bool transposed, nhwc;
} gg_conv;
void gg_rt_conv_f32(const gg_conv *c, const float *x, const float *w, const float *bias, float *y, float *scratch, const gg_epi *ep);
void gg_rt_conv_f64(const gg_conv *c, const double *x, const double *w, const double *bias, double *y, double *scratch, const gg_epi *ep);
/* col (the im2col buffer) holds (C/groups) * kernel * spatial elements, (spatial + 32) for the packed one: the emitter sizes it.
 * ep: the epilogue applied to the output (or NULL). gg_rt_conv_packed_f32: the same with
 * the weight packed (groups == 1, not transposed). mode 0: im2col into panels, the weight packed as
 * side 0 (Cout x Cin*kernel). mode 1 and 2: a 2-D convolution (in[0] == k[0] == stride[0] == 1,
 * pad[0] == 0) that reads the padded image, split into stride[1] x stride[2] phases of Hq x Wq =
 * ceil(Hp / stride[1]) x ceil(Wp / stride[2]), in place of im2col; the weight packed as side 0 (mode 1)
 * or side 1, Cin*kernel x Cout (mode 2); col holds 2 * (Cin * kernel + 8) + 2 * (spatial + 16) +
 * stride[1] * stride[2] * Cin * Hq * Wq + Cout * Ho * Wq floats. */
void gg_rt_conv_packed_f32(const gg_conv *c, const float *x, const float *wp, const float *bias, float *y, float *col, const gg_epi *ep, int mode);
/* A 2-D convolution in channels-last (nhwc: x [N, H, W, C], w [Cout, R, S, C], y [N, Ho, Wo, Cout];
 * one group) as one product over every image's positions, with the weight packed (wp, side 1: K x
 * Cout) or, where wp is NULL, w read as it is. col holds 2 * (R*S*C + 8) + 2 * (N*Ho*Wo + 16)
 * floats, then N*Hp*Wp*C for the padded image when there is padding, then 256 * R*S*C without wp.
 * Depthwise (groups == C == Cout, w [C, R, S, 1], wp NULL): col holds R*S*C floats. */
void gg_rt_conv_nhwc_f32(const gg_conv *c, const float *x, const float *w, const float *wp, const float *bias, float *y, float *col,
                         const gg_epi *ep);
/* The same in bfloat16 (bias bfloat16 or NULL): float32 sums, the bias added in float32 and the result
 * rounded once, as PyTorch's; depthwise: col holds R*S*C + C floats. On AMX where it runs (wp: the weight packed as side 2, K x
 * Cout, or NULL: packed here), the image read in place; elsewhere image, weight and bias widened to float32 (exactly) and
 * gg_rt_conv_nhwc_f32's path run on them (wp there: side 2's float32 panels, or NULL). col: what
 * gg_rt_conv_nhwc_f32's holds, in floats. */
void gg_rt_conv_nhwc_bf16(const gg_conv *c, const uint16_t *x, const uint16_t *w, const void *wp, const uint16_t *bias, uint16_t *y, void *col,
                          const gg_epi *ep);
/* The gradients of the weight (dw) and bias (db) of the plain convolution c, either may be NULL;
 * tmp holds (Cout/groups) * (Cin/groups) * kernel elements. */
void gg_rt_conv_wgrad_f32(const gg_conv *c, const float *x, const float *dy, float *dw, float *db, float *col, float *tmp);
void gg_rt_conv_wgrad_f64(const gg_conv *c, const double *x, const double *dy, double *dw, double *db, double *col, double *tmp);

/* Pooling over the last two dims of contiguous planes (1-d pooling has H = 1). */
typedef struct gg_pool {
  int64_t planes, H, W, OH, OW, k[2], stride[2], pad[2], dil[2];
  int kind;                 /* 0 max, 1 avg, 2 adaptive avg, 3 adaptive max */
  bool count_include_pad;
  int64_t divisor;          /* avg: 0 unless divisor_override */
} gg_pool;
void gg_rt_pool_f32(const gg_pool *p, const float *x, float *y, int64_t *idx);
void gg_rt_pool_f64(const gg_pool *p, const double *x, double *y, int64_t *idx);
/* bfloat16 and float16: each output from its window in double, rounded to float32 and then to the
 * 16-bit type (PyTorch sums and divides in float32, then rounds) */
void gg_rt_pool_bf16(const gg_pool *p, const uint16_t *x, uint16_t *y, int64_t *idx);
void gg_rt_pool_f16(const gg_pool *p, const uint16_t *x, uint16_t *y, int64_t *idx);
/* One output of pooling (plane pl, row oh, column ow): the CPU loops over these, a CUDA thread
 * computes one. */
#define GG_POOL_ONE(NAME, T, LOAD, STORE)                                                   \
  GG_HD void gg_pool_one_##NAME(const gg_pool *p, const T *x, T *y, int64_t *idx, int64_t pl, int64_t oh, int64_t ow) { \
    const T *xp = x + pl * p->H * p->W;                                                     \
    int64_t o = (pl * p->OH + oh) * p->OW + ow, h0, h1, w0, w1;                             \
    if (p->kind >= 2) {                                                                     \
      h0 = oh * p->H / p->OH; h1 = ((oh + 1) * p->H + p->OH - 1) / p->OH;                   \
      w0 = ow * p->W / p->OW; w1 = ((ow + 1) * p->W + p->OW - 1) / p->OW;                   \
    } else {                                                                                \
      h0 = oh * p->stride[0] - p->pad[0]; w0 = ow * p->stride[1] - p->pad[1];               \
      h1 = h0 + (p->k[0] - 1) * p->dil[0] + 1; w1 = w0 + (p->k[1] - 1) * p->dil[1] + 1;     \
    }                                                                                       \
    if (p->kind == 0 || p->kind == 3) {                                                     \
      double m = -INFINITY;                                                                 \
      int64_t mi = -1;                                                                      \
      int64_t dh = p->kind == 0 ? p->dil[0] : 1, dw = p->kind == 0 ? p->dil[1] : 1;         \
      /* the window's taps inside the plane, found once rather than tested per tap */       \
      while (h0 < 0) h0 += dh;                                                              \
      while (w0 < 0) w0 += dw;                                                              \
      if (h1 > p->H) h1 = p->H;                                                             \
      if (w1 > p->W) w1 = p->W;                                                             \
      for (int64_t h = h0; h < h1; h += dh)                                                 \
        for (int64_t w = w0; w < w1; w += dw) {                                             \
          double v = LOAD(xp[h * p->W + w]);                                                \
          if (mi < 0 || v > m || (isnan(v) && !isnan(m))) { m = v; mi = h * p->W + w; }     \
        }                                                                                   \
      y[o] = STORE(m);                                                                      \
      if (idx) idx[o] = mi;                                                                 \
    } else {                                                                                \
      int64_t count;                                                                        \
      if (p->kind == 2) count = (h1 - h0) * (w1 - w0);                                      \
      else {                                                                                \
        h1 = h0 + p->k[0]; w1 = w0 + p->k[1];                                               \
        if (h1 > p->H + p->pad[0]) h1 = p->H + p->pad[0];                                   \
        if (w1 > p->W + p->pad[1]) w1 = p->W + p->pad[1];                                   \
        count = (h1 - h0) * (w1 - w0);                                                      \
        if (h0 < 0) h0 = 0;                                                                 \
        if (w0 < 0) w0 = 0;                                                                 \
        if (h1 > p->H) h1 = p->H;                                                           \
        if (w1 > p->W) w1 = p->W;                                                           \
        if (!p->count_include_pad) count = (h1 - h0) * (w1 - w0);                           \
        if (p->divisor) count = p->divisor;                                                 \
      }                                                                                     \
      double s = 0;                                                                         \
      for (int64_t h = h0; h < h1; h++)                                                     \
        for (int64_t w = w0; w < w1; w++) s += LOAD(xp[h * p->W + w]);                      \
      y[o] = STORE(s / (double)count);                                                      \
    }                                                                                       \
  }
#define GG_POOL_AS(T) (T)
#define GG_POOL_LOAD_BF16(v) (double)gg_bf2f(v)
#define GG_POOL_STORE_BF16(v) gg_f2bf((float)(v))
#define GG_POOL_LOAD_F16(v) (double)gg_h2f(v)
#define GG_POOL_STORE_F16(v) gg_f2h((float)(v))
GG_POOL_ONE(float, float, GG_POOL_AS(double), GG_POOL_AS(float))
GG_POOL_ONE(double, double, GG_POOL_AS(double), GG_POOL_AS(double))
GG_POOL_ONE(bf16, uint16_t, GG_POOL_LOAD_BF16, GG_POOL_STORE_BF16)
GG_POOL_ONE(f16, uint16_t, GG_POOL_LOAD_F16, GG_POOL_STORE_F16)

/* The optimizer's update of one float32 parameter element w with gradient g (PyTorch's torch.optim
 * formulas; one function for both runtimes): kind 1 SGD (L2 weight decay added to the gradient,
 * momentum buffer b or NULL, b = d at the first step), 2 Adam (L2 decay in the gradient), 3 AdamW
 * (decoupled decay: w *= 1 - lr wd first); b, v Adam's moments, zero before the first step; c1 and c2
 * the bias corrections 1 - beta1^t and sqrt(1 - beta2^t). */
typedef struct gg_hyper {
  float lr, wd, mu, b1, b2, eps, c1, c2;
  float scale;              /* the gradient's factor: 1 / the micro-batches accumulated */
  int fresh;                /* the optimizer's first step (SGD's momentum buffer starts at d) */
  int accumulate;           /* this call only adds its gradient into the sum (gradient accumulation) */
  int first_micro;          /* the sum starts at this gradient */
  int summed;               /* the sum holds earlier micro-batches' gradients: add it */
} gg_hyper;
GG_HD void gg_opt_one(int kind, float *w, float g, float *b, float *v, const gg_hyper *h) {
  float p = *w;
  if (kind == 1) {
    float d = g + h->wd * p;
    if (b) { d = h->fresh ? d : h->mu * *b + d; *b = d; }
    *w = p - h->lr * d;
    return;
  }
  float d = kind == 2 ? g + h->wd * p : g;
  if (kind == 3) p *= 1 - h->lr * h->wd;
  float m1 = h->b1 * *b + (1 - h->b1) * d, m2 = h->b2 * *v + (1 - h->b2) * d * d;
  *b = m1;
  *v = m2;
  *w = p - h->lr * (m1 / h->c1) / (sqrtf(m2) / h->c2 + h->eps);
}
/* One element of a training step's update: gradient accumulation (acc: the sum over micro-batches),
 * then the optimizer. */
GG_HD void gg_step_one(int kind, float *w, const float *g, float *acc, float *b, float *v, const gg_hyper *h) {
  float d = *g;
  if (h->accumulate) { *acc = h->first_micro ? d : *acc + d; return; }
  if (h->summed) d += *acc;
  gg_opt_one(kind, w, d * h->scale, b, v, h);
}

/* CUDA models (gg_rt_cuda.cu): device pointers, work queued on the run's stream. dt: 0 float32,
 * 1 float64 (gg_cu_gemm also 2 float16, 3 bfloat16, and the codes of gg_rt_cuda.cu's dt_size: 4
 * TF32, 5 and 6 16-bit operands with a float32 result, 7 float32 as three TF32 products). Matrix products: `batch` products, operand
 * i's batch stride sb*; C is compact; `bias` (or NULL; with beta 0) is added to every row of C. */
void *gg_cu_stream(void);
unsigned gg_cu_blocks(int64_t n);
#ifdef __CUDACC__
/* elements of the runtime's dtype codes as float (0 and 4 float32, 2 float16, 3 bfloat16) */
static __device__ __forceinline__ float dt_ld(int dt, const void *p, int64_t i) {
  return dt == 2 ? gg_h2f(((const uint16_t *)p)[i]) : dt == 3 ? gg_bf2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static __device__ __forceinline__ void dt_st(int dt, void *p, int64_t i, float v) {
  if (dt == 2) ((uint16_t *)p)[i] = gg_f2h(v);
  else if (dt == 3) ((uint16_t *)p)[i] = gg_f2bf(v);
  else ((float *)p)[i] = v;
}
#endif
/* launch the model's kernel `id` (gg_model_desc.kernel_names) on the run's stream, 1-d, args as
 * cudaLaunchKernel takes them */
void gg_cu_launch(int id, unsigned grid, unsigned block, void **args);
void gg_cu_gemm(int dt, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t sam, int64_t sak, int64_t sba, const void *B,
                int64_t sbk, int64_t sbn, int64_t sbb, double beta, void *C, int64_t batch, const void *bias);
/* ... and then C = relu?(C + res): `res` (or NULL; with beta 0) a tensor of C's layout, `relu` 0 or 1,
 * in cuBLASLt's epilogue where it runs the product (rounded once), else a pass after it */
void gg_cu_gemm_ep(int dt, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t sam, int64_t sak, int64_t sba, const void *B,
                   int64_t sbk, int64_t sbn, int64_t sbb, double beta, void *C, int64_t batch, const void *bias, const void *res, int relu);
void gg_cu_conv(int dt, const gg_conv *c, const void *x, const void *w, const void *bias, void *y, void *col);
/* a depthwise convolution in channels-last (gg_rt_cuda_dw.cu; gg_cu_conv's, for dtype codes 0, 2, 3) */
void gg_cu_dw_nhwc(int dt, const gg_conv *c, const void *x, const void *w, const void *bias, void *y);
/* the weight and bias gradients of plain convolution c (gg_rt_conv_wgrad's arguments) */
void gg_cu_conv_wgrad(int dt, const gg_conv *c, const void *x, const void *dy, void *dw, void *db, void *col, void *tmp);
void gg_cu_pool(int dt, const gg_pool *p, const void *x, void *y, int64_t *idx);
/* Fused attention (scaled_dot_product_attention) in float16 (dt 2) or bfloat16 (dt 3) on tensor cores
 * (sm_80 and later), or float32 (dt 0, or 4 where TF32 is allowed) on the FMA units, never
 * materializing the score matrix: y[b, h] = softmax(q k^T * scale + mask) v, y laid out by ys. q, k
 * and v have a unit stride along their last dim. Head sizes D: 32, 64, 96, 128 (emit_cuda.c's
 * cuda_attention_fits). */
typedef struct gg_attn {
  int64_t B, H, Hk, L, S, D;   /* batch, query heads, key/value heads (dividing H), query and key lengths, head size */
  int64_t qs[3], ks[3], vs[3]; /* each operand's strides along batch, head and row */
  int64_t ys[3];               /* the output's ([B, H, L, D], or laid out [B, L, H, D] for the transpose after it) */
  int64_t ms[4];               /* the mask's strides along [B, H, L, S] (0 where it broadcasts) */
  int mask;                    /* 0 none, 1 bool (false: left out), 2 added, in the operands' dtype */
  int causal;                  /* key j > query i left out */
  double scale;
  float *lse;                  /* --train (16-bit operands): each query row's log-sum-exp of its scores, [B, H, L] (-inf: every key left out); or NULL */
  int64_t gs[3];               /* the backward: grad_out's strides along batch, head and row (ys: the forward's output's) */
} gg_attn;
void gg_cu_attention(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, void *y);
/* The same on the CPU (gg_rt_attn.c) in float32 (dt 0), float16 (2) or bfloat16 (3), computed in float
 * and rounded once: head sizes up to 256 (D of the values too), q, k and v with a unit stride along their
 * last dim, a float mask in their dtype; a->lse unused. */
void gg_rt_attention(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, void *y);
/* The backward of a 16-bit attention (a->Hk == a->H) from its output y, grad_out gy and a->lse: dq, dk
 * and dv contiguous [B, H, rows, D]; work: B H L (D + 1) floats of scratch. */
void gg_cu_attention_backward(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, const void *y, const void *gy, void *dq,
                              void *dk, void *dv, float *work);

#ifdef __cplusplus
}
#endif
#endif
