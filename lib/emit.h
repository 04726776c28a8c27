/* emit.h: what the code emitters share. The schedule (schedule.c) says what is fused where; these
 * files turn it into code:
 *   emit.c      the dialect-free core: storage and views as the code sees them (TV), kernel framing,
 *               C text helpers, pointwise kernels and fused chains, views
 *   emit_ops.c  every other op's kernel, written once for both targets
 *   emit_c.c    the C/OpenMP target: C kernel functions, products and convolutions on the runtime's
 *               own packed kernel or BLAS, with their epilogues
 *   emit_cuda.c the CUDA target: __global__ kernels over grids, cuBLAS(Lt) products, its module parts
 *   module.c    the model file: each program's kernels, guard, scratch plan (memplan.c) and run
 *               function, then the descriptors the runtime reads
 * A kernel is written in a Dialect (kopen picks one per kernel: on the GPU, kernels that only call the
 * runtime are host C functions); a Target gives what differs per --target. */
#ifndef GG_EMIT_H
#define GG_EMIT_H
#include "gg.h"

#include <string.h>

#define R GG_MAX_RANK

enum { S_INPUT, S_WEIGHT, S_SCRATCH, S_OUTPUT, S_MUT };

typedef struct Stor {
  int kind, index;          /* input index / weight index / scratch id */
  DType dt;
  const Expr *nelem;        /* scratch: elements */
  int first, last;          /* scratch: the kernels that write it first and read it last */
  int64_t offset;           /* scratch: its place in the arena (planned when sizes are static) */
  int inplace;              /* scratch: 1 + the storage its first kernel reads only at the index it writes
                             * (it may take that one's memory if this kernel is its last reader), or 0 */
  bool aligned;             /* output: a saved value's buffer, which the runtime allocates aligned */
} Stor;

typedef struct TV {          /* a value as the generated code sees it: storage + strides */
  bool ok;
  Node *deferred;           /* a pointwise node computed inside its consumer's loop (fusion), no storage */
  const char *cexpr;        /* a value already in the kernel, as a C expression (double): an epilogue's product */
  int stor;
  DType dt;
  union {                   /* its layout (view.c), as a whole (l) or by field */
    Layout l;
    struct { int rank; const Expr *sizes[R], *strides[R], *offset; };
  };
} TV;

/* A weight matrix packed at gg_open (the runtime's gg_pack_desc) */
typedef struct PackDesc { int weight, side; int64_t offset, rows, cols, srow, scol; } PackDesc;

typedef struct Em Em;

/* How one kernel is written. C: a function called from the run function. CUDA: a __global__
 * function launched on the run's stream, its loops a grid-stride loop (a thread per element) or a
 * warp per row. */
typedef struct Dialect {
  void (*head)(Em *e, int id, bool checks);   /* the head up to the first parameter (checks: returns a flag) */
  void (*syms)(Em *e);                        /* the last parameter (the symbols) and the body's start */
  void (*call)(Em *e, int id);                /* the call in the run function, up to the first argument */
  void (*call_end)(Em *e);
  void (*return_bad)(Em *e, int id);          /* the end of a kernel that checks indices */
  void (*call_checked)(Em *e, int id);
  void (*call_checked_end)(Em *e, int id, Node *n);
  /* loops over a shape (parallel when asked and worth it): returns the braces to close */
  int (*loops)(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner);
  int (*rows)(Em *e, int rank, const Expr *const *sizes, const Expr *len);   /* a row per task */
  /* loops whose tasks are V consecutive elements of a static shape whose last size V divides: the
   * body computes element v of the task (at i<last> = i<last>b + v) into yv[v] of type T, then vstore
   * closes the loops, writing the task's V results at y + lin with one 16-byte store (NULL: none) */
  void (*vloops)(Em *e, int rank, const Expr *const *sizes, int V, const char *T);
  void (*vstore)(Em *e, int V, const char *T, const char *lin);
} Dialect;
extern const Dialect gg_dialect_c, gg_dialect_cuda;

/* A matrix product as emit_ops.c prepares it for a target: out[batch] = alpha * a @ b (+ beta * bias). */
typedef struct Product {
  Node *n;
  TV *out;                  /* the output (its batch rows folded into one product where they can be) */
  TV a, b;                  /* the operands broadcast to [batch..., M, K] and [batch..., K, N] */
  int nb;                   /* batch dims */
  const Expr *M, *K, *N;
  bool a_vec, b_vec;        /* an operand was a vector */
  bool blas;                /* float32 or float64 */
  Value *bias;
  double alpha, beta;
} Product;

/* A convolution's geometry, 1-3 spatial dims right-aligned in 3 (the others 1). */
typedef struct Conv {
  Node *n;
  TV *x, *w, *b, *out;      /* contiguous input, weight and bias (or NULL); the output */
  bool batched, tr;         /* a batch dim; transposed */
  const Expr *in[3], *k[3], *os[3], *st[3], *pd[3], *dl[3];
  const Expr *groups, *cin, *cout, *ksp, *cg, *sp;   /* kernel elements, channels per group, positions */
  bool nhwc;                /* _conv_nhwc: x, out and w channels-last ([N, H, W, C], [K, R, S, C/g]) */
} Conv;

/* A layer or RMS norm over the last dims as emit_norm prepares it for a target: rows of len elements. */
typedef struct Norm {
  Node *n;
  bool rms;
  TV *x, *w, *b;            /* contiguous input, weight and bias (or NULL) */
  TV *out, *mo, *ro;        /* the output (in the type the schedule stores), the mean and 1/std (or NULL) */
  TV *out2;                 /* the output's narrowed copy stored beside it (sched_norm_second), or NULL */
  const Expr *len, *rows;
  double eps;
} Norm;

/* An epilogue (schedule.c's chain after a product or convolution) as its kernel passes it on. */
#define EPI_MAX 8   /* gg_rt.h's GG_EPI_MAX */
typedef struct Params {
  int n;
  TV tv[64];
  Layout at[64];            /* the layout each is read at (broadcast to the kernel's shape) */
  bool seen[64], several[64];  /* read at all; read at more than one layout */
} Params;
typedef struct Epi {
  int n;
  Node *chain[SCHED_CHAIN_MAX];
  const char *fn;           /* the function written for it */
  Params P;                 /* the tensors it reads */
} Epi;

/* What differs per --target. */
typedef struct Target {
  const Dialect *device;    /* the dialect of kernels that run on the device */
  const char *vec;          /* before a kernel whose loops vectorize ("GG_VEC ": built for AVX-512 too) */
  bool float32_functions;   /* scalar.h's float32 exp, erf, ... for float32 operands */
  bool half_convs;          /* convolutions and pooling in float16 and bfloat16 (the CUDA runtime's cuDNN) */
  bool atomic_add;          /* float32/float64 accumulation into repeated indices as parallel atomic adds */
  int (*product)(Em *e, const Product *p);
  int (*conv)(Em *e, const Conv *cv);
  void (*pool)(Em *e, DType dt);              /* the runtime call of a pooling kernel (x, y, idx, p) */
  void (*conv_wgrad)(Em *e, DType dt);        /* the runtime call of a convolution's weight and bias gradients (c, x, dy, dw, db, col, tmp) */
  int (*attention)(Em *e, Node *n);           /* scaled_dot_product_attention whole (NULL: decomposed) */
  int (*norm)(Em *e, const Norm *nm);         /* a norm's kernel of the target's own; 1: the generic row kernel (NULL: always) */
  const char *run_start;    /* the run function's first statements */
  const char *device_code;  /* "kDLCPU" / "kDLCUDA" */
  void (*prelude)(Graph *g, FILE *out);       /* the model file's includes and definitions */
  void (*device_prelude)(Graph *g, FILE *out);   /* CUDA: the kernel file's (NULL: one file) */
  void (*finish)(FILE *out, const char *errs);   /* after the programs (errs: the index messages) */
} Target;
extern const Target gg_target_c, gg_target_cuda;

struct Em {
  Ctx *c;
  Graph *g;
  Arena *a;
  const Target *t;
  const Dialect *d;         /* the kernel being written's (kopen) */
  FILE *k;                  /* kernel functions */
  FILE *r;                  /* the body of run() */
  TV *tv;                   /* by value id */
  Stor *st;
  int nst, capst;
  int nk;                   /* kernels so far */
  const Schedule *s;        /* what is fused where (schedule.c) */
  int64_t scratch_naive, scratch_planned; /* bytes without and with reuse */
  bool cuda;                /* --target cuda */
  bool kdev;                /* the kernel being written runs on the GPU */
  const char *launch;       /* its grid-stride loop's length in threads (NULL: one thread) */
  bool rowwarp;             /* its rows are each taken by a warp (open_rows) */
  FILE *errs;               /* CUDA: the message of each kernel that checks indices, by kernel id */
  bool pack_ok;             /* CPU inference: float32 weights of products may be packed at gg_open */
  bool *mutated;            /* by weight index: a buffer the model updates (never packed) */
  int npacks;
  PackDesc *packs;
  bool random;              /* a kernel draws random numbers (rand, randn): CUDA runs are not captured as graphs */          /* the weights packed at gg_open, in the order of w[nweights + j] */
  const char *lin_index;    /* fused_value inside a reduction: the element's linear index (a C variable), */
  const Layout *lin_layout; /* which loads of operands laid out as lin_layout use instead of their strides */
  const Expr *const *shift; /* fused_value inside a concatenation's input: added to each loop index (NULL: none) */
  int nfv;                  /* fused_value's evaluations so far: their C variables' numbers */
  int vec;                  /* a pointwise kernel with V elements a thread (vloops): V, else 0 */
  FILE *vpre;               /* its operands' 16-byte loads, once per thread before the V elements (vloops writes them) */
  char *vpre_text;
  int *saved_slot;          /* by value id: the output slot of a value the forward saves for the backward
                             * (-1: none), which alloc_value gives that slot's memory instead of scratch: the
                             * runtime's own aligned buffer, so no copy at the end */
};

typedef struct Operand { bool is_tensor; TV t; double f; int64_t i; bool none; } Operand;

/* ---- emit.c: text, storage, framing, pointwise */
int efail(Em *e, Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pexpr(FILE *f, const Expr *x);
const char *cx(Em *e, const Expr *x);          /* an Expr as C text */
static inline const Expr *C(Em *e, int64_t v) { return expr_const(e->a, v); }
static inline const Expr *ADD(Em *e, const Expr *x, const Expr *y) { return expr_bin(e->a, E_ADD, x, y); }
static inline const Expr *MUL(Em *e, const Expr *x, const Expr *y) { return expr_bin(e->a, E_MUL, x, y); }
void comment(FILE *f, const char *s);          /* model text made safe inside a comment */
void emit_c_string(FILE *f, const char *s);    /* a C string literal, every unusual byte escaped */
const char *ctype(DType d);
void load_f(FILE *f, DType d, const char *ptr, const char *idx);
const char *real_type(const Em *e, DType comp);   /* the C type reductions, norms and softmax accumulate in */
const char *pw_type(const Em *e, DType comp);     /* the C type pointwise arithmetic runs in */
void load_r(FILE *f, DType d, const char *ptr, const char *idx, const char *rt);   /* an element as real type rt */
void load_i(FILE *f, DType d, const char *ptr, const char *idx);
void store(FILE *f, DType d, bool from_float, const char *ptr, const char *idx, const char *val);
void fmt_double(FILE *f, double v);
double round_to(DType dt, double v);
int new_stor(Em *e, int kind, int index, DType dt, const Expr *nelem);
const char *sname(Em *e, int s);               /* a storage's name in the run body (a use) */
void contiguous_tv(Em *e, TV *t, int stor, DType dt, int rank, const Expr *const *sizes);
const Expr *numel(Em *e, const TV *t);
const char *hint_shape(Em *e, int rank, const Expr *const *sizes, double *ne);
bool is_contiguous(Em *e, const TV *t);
TV *alloc_value(Em *e, Value *v);
TV *tv_of(Em *e, Node *n, Value *v);
TV broadcast_tv(Em *e, const TV *t, int rank, const Expr *const *sizes);
const char *index_of(Em *e, const TV *t, int loop_rank);
const char *linear_index(Em *e, const Expr *const *sizes, int n, int first);
void kernel_begin(Em *e, Node *n, const char *what);
void kopen(Em *e, int id, bool checks, bool host);   /* host: a kernel that calls the runtime */
void kopen_vec(Em *e, int id);
void ksyms(Em *e);
void kcall(Em *e, int id);
void kcall_end(Em *e);
void kreturn_bad(Em *e, int id);
void kcall_checked(Em *e, int id);
void kcall_checked_end(Em *e, int id, Node *n);
int open_loops_work(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner);
int open_loops(Em *e, int rank, const Expr *const *sizes, bool parallel);
int open_rows(Em *e, int rank, const Expr *const *sizes, const Expr *len);
const char *row_for(Em *e);
const char *row_sum_for(Em *e, const char *var);
void row_combine(Em *e, const char *var, bool max);
void close_loops(Em *e, int n);
void pointwise_kernel(Em *e, Node *n, const char *what, const TV *dst, Operand *ops, int nops, const char *fname, bool use_float, DType comp);
void copy_kernel(Em *e, Node *n, const TV *dst, const TV *src);
TV *contiguous_of(Em *e, Node *n, Value *v);
int operands_of(Em *e, Node *n, Operand *ops, int *nops);
/* node n's value at the loop indices (deferred operands inline): the C variable holding it, rounded to
 * n's dtype where exact (a value stored next may skip that: the store rounds) */
const char *fused_value(Em *e, FILE *f, Node *n, int rank, const Expr *const *sizes, Params *P, bool *as_float, bool exact);
int epilogue_body(Em *e, Node *n, const TV *out, Epi *ep, char **body, const char **val, bool *fl);
/* attention kept whole (emit_ops.c): its operands, the gg_attn the host function fills, its forward */
typedef struct AttnIn { TV *t[3]; TV mb; bool masked; const Expr *bhls[4]; int64_t D; double scale; } AttnIn;
int attn_in(Em *e, Node *n, AttnIn *in);
void attn_struct(Em *e, Node *n, TV *const t[3], const TV *y, const TV *mb, const Expr *const bhls[4], int64_t D, double scale, const char *lse, const TV *gy);
int attn_forward(Em *e, Node *n, const AttnIn *in, const char *what, const char *et, const char *call);

/* ---- emit_ops.c: shared by the targets' products and convolutions */
void epi_params(Em *e, const Epi *ep);   /* the epilogue's tensors as kernel parameters */
void epi_decl(Em *e, const Epi *ep);     /* its gg_epi in the kernel body */
void epi_args(Em *e, const Epi *ep);     /* its storages in the call */
const char *epi_ref(const Epi *ep);      /* what the runtime is given: "&ep" or "NULL" */
/* The convolution kernel: scratch `col` of `scratch` elements; body: the runtime call(s) */
int conv_kernel(Em *e, const Conv *cv, const char *what, const Expr *scratch, const char *pk, const Epi *ep, const char *body);
bool const_is(const Expr *x, int64_t v);

/* ---- emit_c.c */
int epilogue(Em *e, Node *n, const TV *out, Epi *ep);   /* writes the function of n's epilogue */

#endif
