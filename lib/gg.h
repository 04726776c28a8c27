/* gg.h: the one internal header of the gcc-graph library.
 *
 * Everything a stage needs to know about the others lives here: the arena and diagnostics, the dtype
 * table, symbolic sizes (Expr), the graph IR (Graph, Value, Node, Arg), the op table (OpDef, built from
 * lib/ops.def), views (view.c), the schedule (schedule.c), memory planning (memplan.c), the stage
 * table (pipeline.c), the reference interpreter's tensors and the build (build.c). Stages are one file
 * each under lib/; the emitters share lib/emit.h. */
#ifndef GG_H
#define GG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GG_VERSION "0.1.0"
#define GG_MAX_OUTS 256     /* outputs of one node (split, unbind): the shape rules refuse more */
#define GG_MAX_RANK 16      /* PyTorch allows more; nothing real comes close. Refused with a message. */
#define GG_MAX_ELEMS (INT64_C(1) << 40)  /* refuse tensors past 1 Ti elements before allocating */
#define GG_MAX_FAKE_BYTES (INT64_C(1) << 30)  /* a weight stored as a zero-length file (zeros) */
#define GG_MAX_EXPR_NODES 4096  /* a symbolic size's tree, counted as a tree (shared subtrees each time) */

/* ---------------------------------------------------------------- arena and diagnostics (arena.c) */

typedef struct Arena Arena;
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);          /* zeroed; aborts on out-of-memory */
void *arena_array(Arena *a, size_t n, size_t size); /* n*size with overflow check */
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One compilation: its arena, the file being read, and the first error. Nothing global is mutable. */
/* Log categories (GCC_GRAPH_LOGS=decomp,autograd,... or +all): one line per event on stderr. */
enum {
  LOG_FUNCTIONALIZE = 1 << 0, LOG_DECOMP = 1 << 1, LOG_AUTOGRAD = 1 << 2, LOG_PARTITION = 1 << 3, LOG_FUSION = 1 << 4,
  LOG_SCHEDULE = 1 << 5, LOG_MEMORY = 1 << 6, LOG_GUARDS = 1 << 7, LOG_OUTPUT_CODE = 1 << 8, LOG_CACHE = 1 << 9,
};

/* A kernel of the generated code, as explain reports the schedule. */
typedef struct KernelRec {
  int id;
  const char *what, *node, *target;   /* its kind, and the node it computes */
  const struct Node **fused; int nfused;   /* the nodes computed inside it (fused or in its epilogue) */
  const struct Node *n;               /* the node (NULL for the copies of outputs) */
  const char *space;                  /* its iteration space: the output it writes, and the depth of a product */
  double read, written, flops;        /* bytes of the tensors it reads and writes, FLOPs (at the example sizes) */
} KernelRec;

typedef struct Refusal { const char *node, *reader, *why; } Refusal;   /* a fusion the emitter refused */
typedef struct MemBufRec { int64_t offset, bytes; int first, last; } MemBufRec;   /* a scratch tensor's place and lifetime (kernel ids) */

typedef struct Ctx {
  Arena *arena;
  const char *file;      /* the file being read, named in messages */
  char err[4096];        /* first error, without the "error: " prefix */
  bool has_err;
  unsigned logs;         /* LOG_* categories on */
  /* the schedule, recorded when `record` is set (explain) */
  bool record;
  KernelRec *kernels; int nkernels, cap_kernels;
  Refusal *refused; int nrefused, cap_refused;
  int64_t scratch_naive, scratch_planned;
  MemBufRec *membufs; int nmembufs;   /* the planned scratch tensors (at the symbols' example values when */
  bool membufs_symbolic;              /* membufs_symbolic: then the code lays them out one after another) */
  bool cuda;             /* generating for --target cuda (emit_cuda.c's target) */
  bool train;            /* the pipeline runs for --train (pipeline_run sets it) */
  int cuda_sm;           /* and its --cuda-arch as a number (90 for sm_90) */
  int jobs;              /* compile -j: CUDA kernels go to as many parts as the other processes leave (module.c) */
  const char *cuda_arch; /* the installed GPU's architecture, once asked (build.c) */
  int precision;         /* --precision (PREC_*): what emit_cuda.c gives float32 products */
} Ctx;

/* --precision: float32 models' products, convolutions and attention in a lower precision (precision.c) */
enum { PREC_FP32 = 0, PREC_TF32, PREC_BF16, PREC_FP16, PREC_TF32X3 };
#define PREC_CUDA_ONLY(p) ((p) == PREC_TF32 || (p) == PREC_TF32X3)   /* TF32 tensor cores: no CPU has them */
int precision_parse(const char *s);            /* PREC_*, or -1 */
const char *precision_name(int p);             /* "fp32", "tf32", "bf16", "fp16", "tf32x3" */

Ctx *ctx_new(void);
void ctx_free(Ctx *c);
int gg_error(Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3))); /* returns -1 */
/* GCC_GRAPH_LOGS: parse the list (unknown names: a message, -1), and log one line of a category */
int gg_logs_parse(Ctx *c, const char *spec);
void gg_log(Ctx *c, unsigned cat, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define GG_LOG_ON(c, cat) (((c)->logs & (cat)) != 0)
#define GG_INTERNAL(c) gg_error((c), "internal error at %s:%d", __FILE__, __LINE__)
/* A string from a model, made printable for a message: quotes and control characters escaped. */
const char *gg_quote(Ctx *c, const char *s);

/* What a failed guard's message says to do: the interpreter's guards and the compiled model's (module.c
 * writes them into its code) alike. No '%' or '"' in them. */
#define GG_HINT_STATIC_SIZE "; the model was exported with this size fixed: to vary it, export with dynamic_shapes (torch.export.Dim) and compile again"
#define GG_HINT_RANGE "; to allow it, export with a wider torch.export.Dim range (min=, max=) and compile again"
#define GG_HINT_SHARED "; sizes named by one symbol must agree (gcc-graph explain MODEL shows each input's sizes)"
#define GG_HINT_RANK "; gcc-graph explain MODEL shows each input's sizes"

/* ---------------------------------------------------------------- dtypes (dtype.c) */

/* Values are the ExportedProgram ScalarType codes (not c10's). */
typedef enum {
  DT_UNKNOWN = 0, DT_U8 = 1, DT_I8 = 2, DT_I16 = 3, DT_I32 = 4, DT_I64 = 5, DT_F16 = 6, DT_F32 = 7,
  DT_F64 = 8, DT_BOOL = 12, DT_BF16 = 13,
} DType;

typedef struct DTypeInfo {
  DType code;
  const char *name;       /* torch name: "float32" */
  const char *st_name;    /* safetensors name: "F32" */
  int size;
  bool is_float, is_signed;
} DTypeInfo;

const DTypeInfo *dtype_info(int code);          /* NULL when not a supported code */
const DTypeInfo *dtype_by_st_name(const char *s);
const char *dtype_name(DType d);
DType dtype_promote(DType a, DType b);          /* torch.promote_types */
double dtype_load_f64(DType d, const void *p);
int64_t dtype_load_i64(DType d, const void *p);
void dtype_store_f64(DType d, void *p, double v); /* rounds to nearest even, as PyTorch casts */
void dtype_store_i64(DType d, void *p, int64_t v);
/* A double converted to int64 with defined results: in range it truncates; NaN, infinities and
 * magnitudes past 2^63 give INT64_MIN (what x86 gives, and C leaves undefined). */
static inline bool gg_f64_fits_i64(double v) { return v >= -0x1p63 && v < 0x1p63; }
static inline int64_t gg_f64_to_i64(double v) { return gg_f64_fits_i64(v) ? (int64_t)v : INT64_MIN; }
static inline bool dtype_is_float(DType d) { return d == DT_F16 || d == DT_F32 || d == DT_F64 || d == DT_BF16; }

/* ---------------------------------------------------------------- symbolic sizes (expr.c) */

typedef enum { E_CONST, E_SYM, E_ADD, E_MUL, E_FLOORDIV, E_MOD, E_MAX, E_MIN } ExprKind;
typedef struct Expr {
  ExprKind k;
  int64_t c;              /* E_CONST value, E_SYM index */
  int64_t nodes;          /* its size as a tree (saturating): what walking it costs */
  const struct Expr *a, *b;
} Expr;

typedef struct Sym {
  const char *name;       /* "s77" */
  int64_t min, max;       /* from range_constraints; [0, INT64_MAX] unless given */
  int64_t hint;           /* the example value, used to compare shapes at compile time */
} Sym;

typedef struct Graph Graph;
const Expr *expr_const(Arena *a, int64_t v);
const Expr *expr_sym(Arena *a, int index);
const Expr *expr_bin(Arena *a, ExprKind k, const Expr *x, const Expr *y); /* folds constants */
bool expr_is_const(const Expr *e, int64_t *v);
/* Evaluate with symbol values env[]; -1 with a message on overflow or division by zero. */
int expr_eval(Ctx *c, const Expr *e, const int64_t *env, int64_t *out);
/* True when x == y at the hints and at further points in the symbols' ranges. */
bool expr_same(const Graph *g, const Expr *x, const Expr *y);
int64_t expr_hint(const Graph *g, const Expr *e); /* value at the hints (0 on overflow) */
/* Parse exported sympy text (srepr or infix) into an Expr, adding new symbols to g. */
const Expr *expr_parse(Ctx *c, Graph *g, const char *text, const char *where);
void expr_print(FILE *f, const Graph *g, const Expr *e);
char *expr_str(Arena *a, const Graph *g, const Expr *e);

/* ---------------------------------------------------------------- the op table (ops.c, ops.def) */

typedef enum {
  T_TENSOR, T_TENSOR_LIST, T_INT, T_INT_LIST, T_FLOAT, T_FLOAT_LIST, T_BOOL, T_BOOL_LIST, T_SCALAR,
  T_DTYPE, T_LAYOUT, T_DEVICE, T_MEMFMT, T_STR, T_GRAPH, T_ANY,
} ArgType;

typedef enum {
  AK_NONE, AK_TENSOR, AK_TENSORS, AK_INT, AK_INTS, AK_FLOAT, AK_FLOATS, AK_BOOL, AK_BOOLS, AK_STR,
  AK_DTYPE, AK_LAYOUT, AK_DEVICE, AK_MEMFMT, AK_GRAPH,
} ArgKind;

typedef struct Value Value;
typedef struct Arg {
  ArgKind k;
  int n;                  /* list length */
  union {
    Value *t;             /* AK_TENSOR */
    Value **ts;           /* AK_TENSORS; an element may be NULL (Tensor?[]) */
    const Expr *i;        /* AK_INT (also symbolic ints) */
    const Expr **is;      /* AK_INTS */
    double f;             /* AK_FLOAT */
    double *fs;
    bool b;
    bool *bs;
    const char *s;        /* AK_STR, AK_DEVICE ("cpu") */
    int code;             /* AK_DTYPE, AK_LAYOUT, AK_MEMFMT */
    struct Graph *g;      /* AK_GRAPH */
  } u;
} Arg;

typedef struct ArgSpec {
  const char *name;
  ArgType type;
  bool optional;          /* Type? */
  bool none_elems;        /* Type?[]: a list whose elements may be None */
  bool mutated;           /* Tensor(a!) */
  int fixed_len;          /* int[2]: 2; 0 otherwise */
  bool has_default;
  Arg def;                /* the default value */
} ArgSpec;

struct Node;
struct ShapeCtx;
struct EvalCtx;
typedef int (*ShapeFn)(struct ShapeCtx *);
typedef int (*EvalFn)(struct EvalCtx *);
struct Em;
typedef int (*EmitFn)(struct Em *, struct Node *);
struct Ad;
struct Rw;
typedef int (*GradFn)(struct Ad *, struct Node *);    /* appends the node's backward (autograd.c) */
typedef int (*DecompFn)(struct Rw *, struct Node *);  /* replaces the node by core ops (decompose.c) */

/* What a reduction or scan computes (the op table's reduction column; R_NONE: not one). *_DIM: the
 * value and its index along a dim; VAR_MEAN: both; LSE: log-sum-exp; NORM: a vector p-norm. */
typedef enum {
  R_NONE, R_SUM, R_MEAN, R_PROD, R_AMAX, R_AMIN, R_MAX, R_MIN, R_MAX_DIM, R_MIN_DIM, R_ARGMAX, R_ARGMIN, R_ANY, R_ALL,
  R_VAR, R_STD, R_VAR_MEAN, R_LSE, R_NORM, R_CUMSUM, R_CUMPROD, R_SOFTMAX, R_LOG_SOFTMAX,
} Reduction;
static inline bool red_is_max(int r) { return r == R_AMAX || r == R_MAX || r == R_MAX_DIM || r == R_ARGMAX; }
static inline bool red_is_min(int r) { return r == R_AMIN || r == R_MIN || r == R_MIN_DIM || r == R_ARGMIN; }
static inline bool red_is_var(int r) { return r == R_VAR || r == R_STD || r == R_VAR_MEAN; }

/* Result dtype of a pointwise op: the promoted operand dtype (SAME), that made floating (FLOAT:
 * integers become float32), or bool after comparing in the promoted dtype (CMP) or as truth values (BOOL). */
typedef enum { PW_SAME, PW_FLOAT, PW_CMP, PW_BOOL } PwOut;

typedef struct OpDef {
  const char *name;       /* "add.Tensor", the target without "torch.ops.aten." */
  const char *schema;     /* PyTorch's own schema text, which gives names, types and defaults */
  ShapeFn shape;
  EvalFn eval;
  EmitFn emit;            /* writes the node's code (emit.c, emit_ops.c) */
  GradFn grad;            /* its derivative rule (autograd.c), or grad_none */
  DecompFn decomp;        /* its decomposition into other ops (decompose.c), or decomp_none */
  int red;                /* Reduction: what a reduction or scan computes, or R_NONE */
  double (*pwf)(const double *x);   /* pointwise ops: the scalar function on float operands */
  int64_t (*pwi)(const int64_t *x); /* ... and on integer/bool operands (NULL: promote to float) */
  int pwout;              /* PwOut: how the result dtype follows from the operands */
  const char *pwf_name, *pwi_name; /* their names in scalar.h, for generated code */
  const char *doc;        /* one line: what it does or what it is rewritten into */
  /* Parsed from schema by ops_init: */
  int nargs;
  ArgSpec *args;
  int nrets;              /* -1: returns Tensor[] of variable length */
  bool inplace;           /* first argument is Tensor(a!): the op writes into it */
  bool view;              /* returns an alias of its first argument: Tensor(a) */
  int outarg;             /* out= variants (atan2.out): the argument written with the result, else -1 */
} OpDef;

/* einsum's equation: each operand's dims as letter ids (repeated ids: a diagonal), the output's;
 * "..." becomes ids of their own, aligned from the right across operands (broadcast). shape.c. */
#define GG_EINSUM_MAX_OPS 8
#define GG_EINSUM_MAX_LETTERS (52 + GG_MAX_RANK)   /* a-z, A-Z and the dims of one "..." */
typedef struct Einsum {
  int nops, nout, nletters;
  int rank[GG_EINSUM_MAX_OPS];
  int letters[GG_EINSUM_MAX_OPS][GG_MAX_RANK];
  int out[GG_MAX_RANK];
} Einsum;
const char *einsum_parse(const char *eq, int nops, const int *ranks, Einsum *es);   /* NULL, or why not */

int ops_init(Ctx *c);                 /* parse every schema; fails only on a bug in ops.def */
const OpDef *ops_find(const char *target); /* by full target "torch.ops.aten.add.Tensor" or "add.Tensor" */
const char *ops_refusal(const char *target);   /* why a Core ATen op is refused on purpose, or NULL */
int ops_refused_count(void);
const char *ops_refused_at(int i, const char **why);
int ops_count(void);
const OpDef *ops_at(int i);
int ops_arg_index(const OpDef *op, const char *name);
/* body runs with VAR bound to each tensor argument of node NODE (in lists too; None skipped) */
#define FOR_TENSOR_ARGS(NODE, VAR, body)                                                     \
  for (int ai_ = 0; (NODE)->op && ai_ < (NODE)->op->nargs; ai_++) {                          \
    const Arg *a_ = &(NODE)->args[ai_];                                                      \
    int cnt_ = a_->k == AK_TENSOR ? 1 : a_->k == AK_TENSORS ? a_->n : 0;                     \
    for (int j_ = 0; j_ < cnt_; j_++) {                                                      \
      Value *VAR = a_->k == AK_TENSOR ? a_->u.t : a_->u.ts[j_];                              \
      if (VAR) { body; }                                                                     \
    }                                                                                        \
  }

/* How a pointwise node computes: in float64 or int64, with which scalar.h functions. Settles the
 * choices an argument makes (gelu's approximation, division's rounding mode) for the interpreter
 * and the code generator alike. Returns -1 with a message when no function applies. */
typedef struct PwPlan {
  double (*f)(const double *);
  int64_t (*fi)(const int64_t *);
  const char *fname, *iname;
  const char *f32name;    /* scalar.h's float32 version of fname for float32 operands, or NULL */
  bool use_float;
  DType comp;             /* the promoted operand dtype */
} PwPlan;
struct Node;
int pw_plan(Ctx *c, const struct Node *n, PwPlan *p);

/* ---------------------------------------------------------------- views (view.c) */

/* Where a tensor's elements are in its storage: sizes, strides and offset in elements. */
typedef struct Layout {
  int rank;
  const Expr *sizes[GG_MAX_RANK], *strides[GG_MAX_RANK], *offset;
} Layout;
void layout_contiguous(Arena *a, Layout *l, int rank, const Expr *const *sizes);   /* row-major, offset 0 */
const Expr *layout_numel(Arena *a, const Layout *l);
bool layout_is_contiguous(const Graph *g, Arena *a, const Layout *l);
Layout layout_broadcast(Arena *a, const Layout *l, int rank, const Expr *const *sizes);  /* stride 0 where broadcast */
bool layout_same(const Graph *g, const Layout *x, const Layout *y);   /* the same elements at the same indices */
/* Strides that view l as `sizes` without a copy (PyTorch's computeStride; static sizes only). */
bool layout_reshape_strides(Arena *a, const Layout *l, int rank, const Expr *const *sizes, const Expr **strides);
/* The layouts of view node n's outputs (ops whose emitter is emit_view) from its input's layout in:
 * VIEW_ALIAS (outs[0..nouts) set, views of the input's storage), VIEW_COPY (the output is a fresh
 * contiguous tensor: PyTorch copies here too), or -1 with a message naming the node. */
enum { VIEW_ALIAS = 0, VIEW_COPY = 1 };
int view_layouts(struct Graph *g, const struct Node *n, const Layout *in, Layout *outs);
bool view_is_reshape(const struct OpDef *op);
/* n permutes the dims of its rank-`rank` input (permute, transpose, t, movedim): *perm, dim i of its
 * output is dim perm[i] of the input */
bool view_perm(const struct Node *n, int rank, int *perm);
int64_t node_int_arg(const struct Node *n, const char *name, int64_t dflt);   /* a static int argument, else dflt */
int dim_wrap(int64_t d, int rank);              /* a negative dim counted from the end */
int64_t const_numel(const Value *v);            /* elements at static sizes; -1 when symbolic */
const Expr *view_diagonal_len(Arena *a, const Expr *n1, const Expr *n2, int64_t off);   /* diagonal's length */   /* view, reshape, flatten...: a copy keeps the input's order */
int emit_view(struct Em *e, struct Node *n);
/* whether --target cuda runs this scaled_dot_product_attention as one fused kernel (emit_cuda.c); the
 * CPU's (emit_ops.c); this target's; the shapes both take (*D: the head size) */
bool cuda_attention_fits(const struct Graph *g, const struct Node *n);
bool cpu_attention_fits(const struct Graph *g, const struct Node *n);
bool attention_fits(const struct Graph *g, const struct Node *n);
bool attention_shape_fits(const struct Graph *g, const struct Node *n, int64_t *D);
/* whether the runtime has a fused attention backward for this dtype and head size (--train keeps attention whole for it) */
bool cuda_attention_backward_fits(DType dt, int64_t D);
int pad_mode(const struct Node *n);   /* padding mode of a pad op: 0 constant, 1 reflect, 2 replicate, 3 circular, -1 unknown (decompose.c) */

/* ---------------------------------------------------------------- the schedule (schedule.c) */

/* What becomes of a node in the compiled code: its own kernel, computed inside its only reader's
 * loop (pointwise into pointwise), or applied in the epilogue of the product or convolution before
 * it (Schedule.into says which node). */
typedef enum { SN_KERNEL, SN_FUSED, SN_EPILOGUE } SchedRole;
#define SCHED_CHAIN_MAX 8   /* nodes in one epilogue */
#define SCHED_EPI_MAX 8     /* tensors an epilogue reads (gg_rt.h's GG_EPI_MAX) */
#define SCHED_BCAST_NODES 4 /* nodes a broadcast fusion computes per element of its reader */
#define SCHED_CAT_MAX 8     /* inputs of a concatenation computed in its reader's loop */
#define SCHED_MULTI_READS 4 /* readers that each recompute a value of one operand (schedule.c's recomputed) */
typedef struct Schedule {
  struct Graph *g;
  /* by value id */
  int *uses;                /* reads by nodes, +2 for an output of the model */
  struct Node **reader;     /* its last reader: its only one when uses is 1 */
  bool *pw_read;            /* a pointwise node reads it */
  int *rd_start; struct Node **rd;   /* every reader of value v: rd[rd_start[v] .. rd_start[v + 1]) */
  Layout *layout;           /* where its elements are: a view's, or a fresh tensor's (contiguous) */
  int *storage;             /* the value whose storage holds it (itself, unless a view or in an epilogue) */
  bool *has_layout;         /* computed so far (the walk is in graph order); fused values have none */
  /* by node id */
  unsigned char *role;      /* SchedRole */
  struct Node **into;       /* SN_FUSED: its reader; SN_EPILOGUE: the product or convolution */
  struct Node ***chain; int *nchain;   /* a product's or convolution's epilogue, in order */
  bool *rows_permuted;      /* a product over its input's rows in memory order (sched_rows_permuted) */
  Refusal *refused; int nrefused, cap_refused;   /* fusions refused, with why */
  int nfused;               /* SN_FUSED nodes */
} Schedule;
Schedule *schedule_graph(struct Graph *g);   /* NULL with a message */
/* On the GPU, reduction u computes its input v (pointwise, read only by u) in its own loop */
bool sched_takes_prologue(const struct Graph *g, const struct Node *u, const struct Value *v);
const struct Node *sched_kernel_of(const Schedule *s, const struct Node *n);   /* the node whose kernel computes n */
bool sched_is_pointwise(const struct Node *n);
bool sched_lt_epilogue(const struct Graph *g, const struct Node *p, struct Node *const *chain, int n, struct Value **bias, struct Value **res, bool *relu);
/* the value whose type and storage node n's kernel writes: its epilogue's last where that changes the
 * type (a narrowing cast a norm stores, a widening cast cuBLASLt applies), else its output */
struct Value *sched_stored(const Schedule *s, const struct Node *n);
struct Value *sched_norm_second(const Schedule *s, const struct Node *n);   /* the narrowed copy a GPU norm stores beside its value */
bool sched_is_float_cast(const struct Node *n);   /* a _to_copy between float dtypes: fused as pointwise */
struct Value *sched_added_to(const struct Node *u, const struct Value *y);   /* u is add.Tensor, alpha 1, of y and that tensor */
bool sched_fusible_cat(const Schedule *s, const struct Node *n);   /* a cat computed in its pointwise reader's loop */
bool sched_attention_order(const Schedule *s, const struct Node *n, int perm[4]);   /* a fused attention's output laid out in its reader's order */
void sched_order_strides(Arena *a, const struct Value *y, const int perm[4], const Expr **st);
bool sched_rows_permuted(const struct Node *n, const Layout *a, const struct Value *w, const struct Value *y, const Expr **ostrides, Arena *ar);
bool op_is_pointwise(const struct OpDef *op);   /* elementwise: its emitter is emit_pointwise's family */
void schedule_print(const Schedule *s, FILE *f);
struct TrainOptions;
/* The model file (module.c and the emitters): the forward (and a training model's backward) from its
 * schedule, then the descriptors; weight_offsets: where each weight's bytes are (build.c). CUDA: the
 * host code to out (C), the kernels to dev (model.cu). */
int emit_model(Ctx *c, struct Graph *g, const Schedule *sf, struct Graph *bwd, const Schedule *sb, const struct TrainOptions *tr, FILE *out,
               FILE *dev, const char *metadata, const int64_t *weight_offsets, int64_t blob_size, bool appended, bool external, int64_t external_size);   /* a line per node: its kernel, fused, or in an epilogue */
bool sched_test_miscompiled(const struct Node *n);   /* GCC_GRAPH_TEST_MISCOMPILE names its op (tests only) */

/* ---------------------------------------------------------------- memory planning (memplan.c) */

typedef struct MemBuf {     /* one intermediate tensor of a program */
  int id;                   /* its name in the generated code (t<id>), for the log */
  int64_t bytes;            /* 64-byte aligned */
  int first, last;          /* the kernels that write it first and read it last */
  int inplace;              /* 1 + the index of an earlier buffer it may be written in place of, or 0 */
  int64_t offset;           /* out: its place in the scratch arena */
} MemBuf;
/* Offsets for b[0..n): the arena's size; *naive: the bytes without reuse. */
int64_t memplan(Ctx *c, MemBuf *b, int n, int64_t *naive);

/* ---------------------------------------------------------------- the graph IR (load.c) */

typedef enum { VK_TENSOR, VK_SYMINT, VK_SYMFLOAT, VK_SYMBOOL, VK_NONE } ValueKind;
typedef enum { IN_NONE, IN_USER, IN_PARAM, IN_BUFFER, IN_CONST } InputKind;

typedef struct Weight Weight;

struct Value {
  const char *name;
  ValueKind kind;
  DType dtype;
  int rank;
  const Expr **sizes;     /* rank entries */
  const Expr **strides;   /* as exported (may be NULL for values we create) */
  bool requires_grad;
  struct Node *def;       /* defining node; NULL for graph inputs */
  int id;                 /* index in Graph.values */
  InputKind input;        /* for graph inputs */
  int input_index;        /* position among graph inputs */
  int user_index;         /* position among user inputs, or -1 */
  const char *fqn;        /* parameter/buffer/constant name: "fc.weight" */
  Weight *weight;         /* its bytes, when the file has them */
  struct Value *tied;     /* a parameter stored as the same view of the same bytes as this earlier one
                             (tied weights: PyTorch's one Parameter under two names); its uses are
                             that one's and it has no gradient of its own (load.c tie_parameters) */
  const Expr *sym;        /* VK_SYMINT: its value as an expression */
  bool declared;          /* shape and dtype came from tensor_values */
};

typedef struct Node {
  const char *name;
  const char *target;     /* as written: "torch.ops.aten.add.Tensor" */
  const OpDef *op;        /* NULL: not supported (kept so explain can list it) */
  Arg *args;              /* op->nargs, defaults filled in, schema order */
  Value **outs;
  int nouts;
  const char *stack_trace;   /* from metadata, may be NULL */
  const char *module_stack;  /* nn_module_stack, may be NULL */
  int id;
} Node;

struct Weight {             /* bytes of a parameter, buffer or constant, mapped from a file */
  const char *fqn;
  DType dtype;
  int rank;
  int64_t sizes[GG_MAX_RANK], strides[GG_MAX_RANK], offset;  /* elements */
  const uint8_t *data;    /* start of its storage */
  size_t nbytes;          /* bytes available from data */
};

typedef struct OutputSpec {
  enum { OUT_USER, OUT_BUFFER_MUTATION, OUT_OTHER, OUT_GRAD, OUT_SAVED } kind;
  Value *v;
  const char *target_name;  /* buffer name for mutations; parameter or input name for gradients */
} OutputSpec;

struct Graph {
  Ctx *ctx;
  bool unverified;         /* the last verify_graph failed: shapes unchecked (explain skips its FLOPs) */
  const char *path;
  int schema_major, schema_minor;
  const char *ir;          /* "TRAINING" or "ATEN" */
  const char *torch_version;
  Value **values; int nvalues, cap_values;
  Node **nodes; int nnodes, cap_nodes;
  Value **inputs; int ninputs;      /* graph placeholders in order */
  OutputSpec *outputs; int noutputs;
  Sym *syms; int nsyms, cap_syms;
  int nunsupported;
  struct Mapping *mappings;         /* files kept mapped for weights */
  struct { const char *key; Value *v; } *names; int names_cap, names_n; /* name -> value */
};

/* Load a .pt2 archive or a model.json. weights: a .safetensors path or NULL. */
Graph *graph_load(Ctx *c, const char *path, const char *weights);
void graph_release(Graph *g);       /* unmaps files; the arena frees the rest */
Value *graph_find_value(const Graph *g, const char *name);
Value *graph_new_value(Graph *g, const char *name);   /* NULL (with a message) if defined twice */
bool value_same_shape(const Graph *g, const Value *a, const Value *b);   /* the same rank and sizes */
int graph_bind_name(Graph *g, const char *name, Value *v); /* another name for v */
int graph_user_inputs(const Graph *g, Value ***out); /* user input values in order */
int verify_graph(Graph *g);
int graph_check_supported(Graph *g); /* error naming the first node of an unknown op */         /* topological order, single definition, shapes (shape.c rules) */

/* ---------------------------------------------------------------- files (archive.c, safetensors.c) */

typedef struct Mapping { void *base; size_t len; struct Mapping *next; } Mapping;

typedef struct ZipEntry { const char *name; uint64_t size; const uint8_t *data; } ZipEntry;
typedef struct Zip { const uint8_t *base; size_t len; ZipEntry *entries; int n; } Zip;
/* Open a zip of stored entries (what torch.export.save writes), mapped; entries point into the map. */
int zip_open(Ctx *c, Graph *g, const char *path, Zip *z);
const ZipEntry *zip_find(const Zip *z, const char *name);
const uint8_t *map_file(Ctx *c, Graph *g, const char *path, size_t *len);

typedef struct STensor {
  const char *name;
  DType dtype;
  int rank;
  int64_t sizes[GG_MAX_RANK];
  const uint8_t *data;
  size_t nbytes;
} STensor;
typedef struct SafeTensors { STensor *t; int n; } SafeTensors;
int st_read(Ctx *c, Graph *g, const char *path, SafeTensors *out);
const STensor *st_find(const SafeTensors *s, const char *name);
int st_check_input_names(Ctx *c, const SafeTensors *st, int n);   /* no in.N beyond the n inputs */
/* Write tensors (name, dtype, sizes, contiguous data) to path. */
int st_write(Ctx *c, const char *path, const STensor *t, int n);

/* ---------------------------------------------------------------- shape rules (shape.c) */

typedef struct ShapeCtx {
  Graph *g;
  Node *n;
  Arena *a;
  /* results, filled by the rule: */
  int nouts;
  struct { DType dtype; int rank; const Expr *sizes[GG_MAX_RANK]; bool is_sym; const Expr *sym; } out[GG_MAX_OUTS];
} ShapeCtx;
int shape_infer(Graph *g, Node *n, ShapeCtx *sc); /* runs n->op->shape */
int shape_alias(ShapeCtx *sc);   /* the shape column of aliases the loader rewrites (load.c) */
bool loss_is_elementwise(const char *name);       /* mse, l1, smooth l1, huber, binary cross entropy */

/* ---------------------------------------------------------------- reference interpreter (interp.c) */

typedef struct Storage { uint8_t *data; size_t nbytes; bool owned; } Storage;
typedef struct Tensor {
  DType dtype;
  int rank;
  int64_t sizes[GG_MAX_RANK], strides[GG_MAX_RANK], offset;
  Storage *st;
} Tensor;

typedef struct RVal {      /* a run-time value of the graph */
  enum { RV_NONE, RV_TENSOR, RV_INT } k;
  Tensor *t;
  int64_t i;
} RVal;

typedef struct RArg {      /* an evaluated argument */
  ArgKind k;
  int n;
  Tensor *t;
  Tensor **ts;
  int64_t i;
  int64_t *is;
  double f;
  double *fs;
  bool b;
  bool *bs;
  const char *s;
  int code;
} RArg;

typedef struct Interp {
  Ctx *c;
  Graph *g;
  RVal *vals;             /* by Value id */
  int64_t *env;           /* symbol values */
  bool *mutated;          /* by graph input position: written by an in-place op */
  Storage **storages; int nstorages, cap_storages;
} Interp;

typedef struct EvalCtx {
  Interp *I;
  Node *n;
  RArg *args;             /* schema order */
  Tensor **outs;          /* allocated contiguous by the interpreter, or NULL for views (the op sets them) */
  int64_t (*osizes)[GG_MAX_RANK]; /* each output's expected sizes */
  RVal *symout;           /* sym_size's result */
} EvalCtx;

typedef struct RunResult {
  Tensor **outs; int nouts;            /* user outputs in order */
  Tensor **buffers; const char **buffer_names; int nbuffers; /* mutated buffers, new values */
  Tensor **grads; const char **grad_names; int ngrads;      /* gradients (OUT_GRAD), after autograd */
  Tensor **saved; int nsaved;                                /* saved for the backward (OUT_SAVED) */
} RunResult;

/* Run the graph on user inputs (in order; named parameters may be supplied in extra when the file
 * carries no weights). The interpreter owns the tensors until interp_free. */
Interp *interp_new(Ctx *c, Graph *g);
int interp_run(Interp *I, Tensor **inputs, int ninputs, const STensor *extra, int nextra, RunResult *res);
void interp_free(Interp *I);
bool graph_mutates(const struct Graph *g, const struct Value *v);   /* a buffer the model writes (fold.c) */
/* A value computed at compile time from the weights alone (interp.c), or NULL */
Tensor *interp_constant(Interp *I, struct Value *v, int64_t max_elems);
double tensor_f64_at(const Tensor *t, int64_t i);   /* the element at a logical (row-major) index */
Tensor *tensor_new(Interp *I, DType dt, int rank, const int64_t *sizes); /* NULL with a message if too big */
Tensor *tensor_from_st(Interp *I, const STensor *s);  /* borrows the bytes */
int64_t tensor_numel(const Tensor *t);
bool tensor_is_contiguous(const Tensor *t);
void *tensor_contiguous_bytes(Interp *I, Tensor *t, size_t *nbytes);

/* ---------------------------------------------------------------- SHA-256 (sha256.c), for the compile cache */
typedef struct Sha256 { uint32_t h[8]; uint64_t len; uint8_t buf[64]; size_t n; } Sha256;
void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_hex(Sha256 *s, char out[65]);

/* ---------------------------------------------------------------- compile (compile.c) */

typedef struct TrainOptions {
  bool on;                   /* --train: forward + backward (+ optimizer step) */
  int loss;                  /* --loss N: the user output differentiated (default 0) */
  bool save_all;             /* --partition default: save everything the backward uses */
  int optimizer;             /* 0 none, 1 sgd, 2 adam, 3 adamw (--optimizer) */
  double lr, momentum, weight_decay, beta1, beta2, eps;
  double bucket_mb;          /* --bucket-mb: gradient bucket size for data-parallel runs (MiB) */
} TrainOptions;

typedef struct CompileOptions {
  const char *model, *output;
  const char *weights_file;  /* safetensors for a bare .json */
  bool external_weights;     /* leave weights in the .pt2, mapped at open */
  const char *cc, *cflags;
  bool sources_only;         /* -S: write the C sources into output (a folder) */
  bool keep, verbose;
  bool time_report;          /* time and peak memory of each stage, on stderr */
  const char *debug_dir;     /* --debug-dir: the graph after each stage, the code, the timings */
  TrainOptions tr;           /* --train and its options */
  const char *deps_file;     /* -MD / -MF: a make rule naming the files the output depends on */
  int jobs;                  /* -j N: C compiler processes at once */
  bool cuda;                 /* --target cuda: CUDA C built by nvcc, device tensors in and out */
  const char *cuda_arch;     /* --cuda-arch sm_XY (default: the installed GPU's, else sm_90) */
  const char *nvcc;          /* NVCC from the environment, else nvcc */
  int precision;             /* --precision (PREC_*) */
  bool nchw;                 /* --no-channels-last: convolutions stay NCHW on the GPU */
} CompileOptions;
int compile_model(Ctx *c, const CompileOptions *o);
int training_graph(Graph *g, const TrainOptions *t); /* functionalize, decompose, autograd (run --train) */
struct Pipeline;
/* functionalize, fold weights, decompose (as compile does for inference); how: the target and precision
 * (its cuda, precision and nchw; NULL: the CPU in float32) */
struct Stage;
int inference_graph(Graph *g, const struct Pipeline *how, void (*each)(void *arg, const struct Stage *s), void *arg);   /* each: as pipeline_run's */
/* Batch norm folded into convolutions, sibling linears stacked, into new weights: fold.c */
int fold_weights(Graph *g, bool exact, bool cl);   /* cl: the channels-last stage runs after */
/* Attention's masks and repeated key/value heads as the fused kernels read them best (a causal mask
 * computable now as is_causal, one that masks nothing dropped): weights not touched, so --train
 * runs it too (decompose); returns the count of rewrites */
int fold_attention_inputs(Graph *g);
/* v rounded to dt now, as a new weight, when v is a constant float weight whose bytes are here
 * (else NULL: the caller converts it at run time); fold_drop_unused drops the weights of before[]
 * that no node reads any more */
Value *fold_weight_cast(Graph *g, Value *v, DType dt);
/* v with its dims reordered (the result's dim d is v's dim perm[d]) now, as a new weight, likewise */
Value *fold_weight_permute(Graph *g, Value *v, int rank, const int *perm);
/* An evaluation-mode batch norm's per-channel float32 scale w / sqrt(var + eps) and shift b - mean *
 * scale, now, as new weights (*scale NULL when its parameters are not all constant); -1 on error */
int fold_bn_affine(Graph *g, Value *w, Value *b, Value *mean, Value *var, double eps, Value **scale, Value **shift);
void fold_drop_unused(Graph *g, Value **before, int nbefore);
/* --precision bf16|fp16: products, convolutions and attention of float32 in the lower type (precision.c) */
int precision_lower(Graph *g, int precision, bool fold);
/* The CPU: float16 and bfloat16 convolutions and pooling computed in float32 (their operands widened,
 * exactly; the result rounded once, as PyTorch's CPU kernels accumulate in float32); needed: the graph
 * has one. */
int precision_widen(Graph *g, bool fold, bool cl);
bool precision_widen_needed(const Graph *g, bool cl);
/* --target cuda: tensor-core convolutions and the nodes after them channels-last (layout.c) */
int channels_last(Graph *g, bool fold);
bool layout_cpu_bf16_conv(const Graph *g, const Node *n);
bool layout_gpu_keeps_bias(const Graph *g, const Node *n);
/* The schedule of a functional, decomposed graph: generate its code (no cc) with c->record set. */
int compile_schedule(Ctx *c, Graph *g);
int functionalize(Graph *g);
int decompose(Graph *g, bool training, bool fold, bool cl);   /* fold: constant weights may become new ones (fold.c); cl: the channels-last stage runs after */
int decompose_after_autograd(Graph *g);   /* --train: the ops decompose kept whole for their derivative rules */
bool decompose_has_rule(const OpDef *op);   /* rewritten into the core set before code generation */
bool decompose_has_training_rule(const OpDef *op); /* rewritten further with --train (into differentiable ops) */
/* Append the backward of output `loss` (every float user output when -1) w.r.t. the parameters
 * that require grad (and every float user input when wrt_inputs): autograd.c. */
int autograd(Graph *g, int loss, bool wrt_inputs);
bool autograd_has_rule(const OpDef *op);
const char *const *autograd_rules(int *n);   /* the ops with a derivative rule */
typedef struct PartitionStats {
  int saved; int64_t saved_bytes;        /* what this partition saves for the backward */
  int saved_default; int64_t default_bytes; /* what saving everything the backward reads would */
  int recomputed, backward_nodes, forward_nodes;
} PartitionStats;
/* Split the joint graph: g keeps the forward (saved values as OUT_SAVED outputs), *bwd gets the
 * backward (inputs: weights, saved, cotangents; outputs: OUT_GRAD). partition.c */
int partition(Graph *g, bool save_all, Graph **bwd, PartitionStats *stats);   /* rewritten into the core set before code generation */

/* ---------------------------------------------------------------- the stages (pipeline.c) */

/* What the stages work on: the graph, and what they make of it. */
typedef struct Pipeline {
  Graph *g;
  const TrainOptions *tr;    /* --train when tr && tr->on */
  bool fold;                 /* fold weights into new ones (inference, weights inside the .so) */
  int precision;             /* --precision (PREC_*): bf16 and fp16 rewrite the graph */
  bool cuda, nchw;           /* --target cuda; --no-channels-last */
  bool exact;                /* only rewrites that keep values: no norm folded into 16-bit weights (golden's rewrite check) */
  Graph *bwd;                /* training: the backward, after partition */
  PartitionStats ps;
  Schedule *sf, *sb;         /* the forward's (or the model's) schedule; the backward's */
} Pipeline;
typedef enum { STAGE_ALWAYS, STAGE_FOLD, STAGE_TRAINING, STAGE_PRECISION, STAGE_CHANNELS_LAST } StageWhen;
typedef struct Stage {
  const char *name;          /* as --time-report and --debug-dir call it */
  const char *after;         /* the graph it leaves, as check calls it */
  StageWhen when;
  bool rewrites;             /* changes the graph (check interprets the result) */
  int (*run)(Pipeline *p);   /* -1 with a message */
} Stage;
extern const Stage gg_stages[];   /* in order, ending with a NULL name */
bool stage_applies(const Stage *s, const Pipeline *p);
int stage_index(const char *name);
/* Run the stages [from, to) that apply, in order; each(arg, stage) after each one. */
int pipeline_run(Pipeline *p, int from, int to, void (*each)(void *arg, const Stage *s), void *arg);

/* ---------------------------------------------------------------- the build (build.c) */

typedef struct BuildFiles {
  const char *dir;           /* the folder the .so is built in (-S: the output folder) */
  int64_t *offsets;          /* by weight: where its bytes are, in the blob or in the model file */
  int64_t blob, file_size, bytes;   /* the blob's size, the model file's, the weights' */
  bool external;             /* --weights external */
  bool appended;             /* the blob goes after the linked .so (build_so), not into the code (-S) */
  struct BlobWriter *writer; /* large weights being written while cc runs (build_output_begin) */
} BuildFiles;
int build_prepare(Ctx *c, const CompileOptions *o, Graph *g, BuildFiles *b);   /* weights laid out, the folder, weights.bin */
/* the model's (CUDA: its host code in model.c, its kernels dsrc in model.cu, model_1.cu, ..., the parts
 * that follow lines GG_PART_MARK in dsrc) and the runtime's */
#define GG_PART_MARK "/* gcc-graph: next part */"
int build_sources(Ctx *c, const CompileOptions *o, const char *dir, const char *src, size_t len, const char *dsrc, size_t dlen);
int build_so(Ctx *c, const CompileOptions *o, const BuildFiles *b);   /* cc or nvcc: b->dir/model.so */
int build_output_begin(Ctx *c, const CompileOptions *o, const Graph *g, BuildFiles *b);   /* large weights start being written (before build_so) */
void build_output_abort(BuildFiles *b);   /* that writing stopped and its file removed (build_so failed) */
int build_output(Ctx *c, const CompileOptions *o, const Graph *g, BuildFiles *b);   /* that .so written to o->output, weights appended */
int build_cuda_sm(Ctx *c, const CompileOptions *o);   /* --cuda-arch as a number (90 for sm_90) */
void build_finish(const CompileOptions *o, const char *dir);     /* the folder removed, unless --keep or -S */
int build_cache_lookup(Ctx *c, const CompileOptions *o, const char **store);   /* 1: copied from the model cache */
void build_cache_store(Ctx *c, const CompileOptions *o, const char *store);
int write_deps(Ctx *c, const CompileOptions *o);   /* -MD / -MF */
int write_file(Ctx *c, const char *path, const void *data, size_t n);
int copy_file(Ctx *c, const char *from, const char *to);

/* ---------------------------------------------------------------- compiled models (solib.c) */
#include "../include/gcc_graph.h"
typedef struct Lib {
  void *h;
  const char *(*metadata)(void);
  int (*num_inputs)(void), (*num_outputs)(void), (*num_mut)(void);
  int (*open)(gg_model **, const char *, char *, size_t);
  void (*close)(gg_model *);
  int (*run_alloc)(gg_model *, const DLTensor *, int, DLManagedTensor **, int, char *, size_t);
  int (*mutated)(const gg_model *, int, const char **, DLTensor *);
  /* training models */
  int (*num_grads)(void);
  int (*output_shape)(const gg_model *, const DLTensor *, int, int, int *, int64_t *, DLDataType *, char *, size_t);
  int (*state_new)(const gg_model *, gg_train_state **, char *, size_t);
  void (*state_free)(gg_train_state *);
  int (*forward)(gg_model *, gg_train_state *, const DLTensor *, int, DLTensor *, int, char *, size_t);
  int (*backward)(gg_model *, gg_train_state *, const DLTensor *, char *, size_t);
  int (*gradient)(const gg_train_state *, int, const char **, DLTensor *);
  int (*train_step)(gg_model *, gg_train_state *, const DLTensor *, int, DLTensor *, int, char *, size_t);
  bool has_optimizer;                     /* its metadata names an optimizer: gg_train_step updates */
  int (*run)(gg_model *, const DLTensor *, int, DLTensor *, int, char *, size_t);
  /* device models (--target cuda): tensors are copied to and from the GPU through the model */
  int device;                             /* kDLCPU or kDLCUDA */
  void *(*dalloc)(size_t);
  void (*dfree)(void *);
  int (*dcopy)(void *, const void *, size_t, int);
  void **dbufs; int ndbufs, capdbufs;     /* device buffers to free (so_release) */
} Lib;
int load_lib(Ctx *c, const char *path, Lib *l);
void so_release(Lib *l);                 /* frees the device buffers made for a device model */
/* t's elements on the host: t itself for a CPU model, else a copy in the arena */
DLTensor so_to_host(Ctx *c, Lib *l, const DLTensor *t);
bool so_is_training(const Lib *l);
/* the model's inputs from a safetensors file (in.N or the inputs' names), and outputs to fill */
int so_inputs(Ctx *c, Lib *l, const SafeTensors *st, const char *path, DLTensor **out, int *n);
int so_alloc_outputs(Ctx *c, Lib *l, gg_model *m, const DLTensor *ts, int ni, DLTensor **out);
DLDataType to_dl(DType d);
DType from_dl(DLDataType t);
STensor st_of(Ctx *c, const char *name, const DLTensor *t);
/* Run a compiled model on the tensors of the safetensors file `inputs`; write out.N, buffer_after.*
 * (and grad.* for a training model) to `output`. weights: the .pt2 of an external-weights model. */
int so_run(Ctx *c, const char *model, const char *weights, const char *inputs, const char *output);

/* ---------------------------------------------------------------- check and minify (check.c) */
typedef struct CheckOptions {
  const char *model, *weights, *inputs;   /* inputs NULL: random, seeded */
  double tol;                             /* relative L2 error allowed (integers: exact) */
  TrainOptions tr;
  int precision;                          /* --precision (PREC_*) */
  bool cuda, nchw;                        /* --target cuda (the stages it adds; the compiled code runs on the GPU), --no-channels-last */
  bool tol_set;                           /* --tol given: it holds the compiled stage under --precision bf16|fp16 too */
} CheckOptions;
/* 0: every stage agrees; 1: a stage departs (reported on out); -1: error */
int check_model(Ctx *c, const CheckOptions *o, FILE *out);
/* 1: reduced to a repro in outdir (reported on out); 0: nothing fails; -1: error */
int minify_model(Ctx *c, const CheckOptions *o, const char *outdir, FILE *out);
/* Every tensor of the safetensors file `want` against the one of the same name in `got`, by the
 * relative L2 rule (tol < 0: by dtype, 1e-4 for float32); 0: all agree, 1: one departs or is
 * missing (reported on out), -1: error */
int compare_outputs(Ctx *c, const char *got, const char *want, double tol, FILE *out);

/* ---------------------------------------------------------------- explain (explain.c) */
int explain_graph(Graph *g, FILE *f);
void graph_print(Graph *g, FILE *f);
void node_print(Graph *g, const struct Node *n, FILE *f);   /* one node as graph_print writes it, no newline */
char *model_metadata(Graph *g, Graph *bwd, const TrainOptions *tr, const PartitionStats *ps, bool external, int64_t weight_bytes);   /* compile.c */
double node_matrix_flops(const Graph *g, const struct Node *n);   /* a product's or convolution's FLOPs, else 0 */
int64_t value_nbytes(const Graph *g, const Value *v);              /* at the example sizes */
double graph_matrix_flops(const Graph *g);
void explain_training(Graph *fwd, Graph *bwd, const PartitionStats *st, FILE *f);
void explain_schedule(Ctx *c, FILE *f);
const char *op_compiled_as(const OpDef *op);   /* "kernel", "view" or "rewritten" */
const char *op_gradient(const OpDef *op);      /* "rule", "rewritten" or "none" */
/* JSON pieces shared by explain --json and the compiled model's metadata (cJSON objects) */
struct cJSON *shape_json(const Graph *g, const Value *v);
struct cJSON *symbols_json(const Graph *g, bool examples);       /* the kernels compile_schedule recorded */
/* explain --json: the same facts as JSON (schemas/explain.schema.json); fwd/bwd/st for --train, or
 * NULL; scheduled: whether c holds a schedule. Returns a malloc'd string. */
char *explain_json(Graph *g, Graph *fwd, Graph *bwd, const PartitionStats *st, bool scheduled);
struct cJSON *explain_obj(Graph *g, Graph *fwd, Graph *bwd, const PartitionStats *st, bool scheduled);   /* the same, as cJSON */
/* Where a node came from: the module path and class its nn_module_stack names, and the user's line of
 * its stack trace (the innermost frame outside PyTorch); false when the export carries none */
bool node_module(Arena *a, const struct Node *n, const char **path, const char **cls);
bool node_source(Arena *a, const struct Node *n, const char **file, int *line, const char **code);
void node_origin_json(Arena *a, const struct Node *n, struct cJSON *o);   /* both, as fields of o */
/* explain --html: one self-contained page (report.c) of report (explain_obj's, with the stages' graphs
 * and the memory plan added here), and the Chrome trace profile when given; written to path */
int report_stage_graphs(Graph *g, const struct Pipeline *how, struct cJSON *report);   /* inference_graph's stages on g, keeping each one's graph */
int report_add_graph(struct cJSON *report, Graph *g, const char *stage);   /* g as it is now, as the graph after stage */
int report_write(Graph *g, struct cJSON *report, const char *profile, const char *path);   /* g: the model (its context; the trace is mapped with it) */

#endif
