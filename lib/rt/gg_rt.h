/* gg_rt.h: what the generated code of a model and the runtime (gg_rt.c) share. Both are compiled
 * into every model .so; gcc-graph embeds these files and writes them next to the generated model.c. */
#ifndef GG_RT_H
#define GG_RT_H

#include "gcc_graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GG_RT_MAX_RANK 16
#define GG_RT_ALIGN 64

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
  const unsigned char *blob;     /* embedded weights, or NULL when they stay in a file */
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
} gg_model_desc;

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
  int optimizer;                 /* 0 none, 1 SGD, 2 Adam */
  double lr, momentum, weight_decay, beta1, beta2, eps;
  int nprof;
  double *prof;
  const char *const *prof_names;
} gg_train_desc;

extern const gg_model_desc gg__desc;
extern const gg_train_desc gg__train;
extern const char gg__metadata[];

/* Profiling (GCC_GRAPH_PROFILE=1 in the environment when the model is opened): the run body ticks a
 * clock after each node, adding the time since the last tick to the node's slot. */
extern bool gg_rt_prof_on;
void gg_rt_tick(double *slot);
#define GG_TICK(slot) do { if (gg_rt_prof_on) gg_rt_tick(slot); } while (0)

/* Guard messages. Returns 1. */
int gg_rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int gg_rt_check_tensor(const DLTensor *t, const char *name, DLDataType want, int ndim, char *err, size_t errlen);
const char *gg_rt_dtype_name(DLDataType t);

/* Symbolic size arithmetic with Python's floor semantics. */
static inline int64_t gg_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t gg_mod(int64_t a, int64_t b) { int64_t m = a % b; return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }
static inline int64_t gg_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t gg_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* half and bfloat16 storage, converted through float (round to nearest even) */
float gg_h2f(uint16_t h);
uint16_t gg_f2h(float f);
static inline float gg_bf2f(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static inline uint16_t gg_f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* Matrix products: C[b] = A[b] @ B[b] with element strides (a unit stride on one of the two matrix
 * dims of each operand), batched by the caller. Float types go to BLAS. */
void gg_rt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t sbk, int64_t sbn, float *C);
void gg_rt_dgemm(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak, const double *B, int64_t sbk, int64_t sbn, double *C);

/* Convolution of contiguous NC[D]HW input with contiguous weight, as 3-d with unit dims. */
typedef struct gg_conv {
  int64_t N, Cin, Cout, groups;
  int64_t in[3], k[3], out[3], stride[3], pad[3], dil[3];
  bool transposed;
} gg_conv;
void gg_rt_conv_f32(const gg_conv *c, const float *x, const float *w, const float *bias, float *y, float *scratch);
void gg_rt_conv_f64(const gg_conv *c, const double *x, const double *w, const double *bias, double *y, double *scratch);
/* col (the im2col buffer) holds (C/groups) * kernel * spatial elements: the emitter sizes it. */
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

#endif
