/* rewrite.h: building nodes inside a pass (decompose.c, functionalize.c).
 * A pass makes a new node list: rw_push keeps a node, rw_call makes one from an op name and named
 * arguments (the rest take their defaults), runs its shape rule, and gives its first output (or
 * writes it into `into`, an output of the node being replaced, so nothing downstream changes). */
#ifndef GG_REWRITE_H
#define GG_REWRITE_H
#include "gg.h"

typedef struct Rw {
  Graph *g;
  Node *orig;               /* the node being rewritten: names and stack traces come from it */
  Node **nodes; int n, cap; /* the new node list */
  int k;                    /* nodes made for orig so far */
  const char *tag;          /* names are orig.<tag>k ("grad"), or orig.k when NULL */
  bool fold;                /* constant weights may be replaced by new ones computed now (fold.c's rule) */
  bool training;            /* --train: ops with a derivative rule of their own stay whole for autograd */
} Rw;

static inline Arg T(Value *v) { return (Arg){.k = v ? AK_TENSOR : AK_NONE, .u.t = v}; }
static inline Arg NONE(void) { return (Arg){.k = AK_NONE}; }
static inline Arg FL(double f) { return (Arg){.k = AK_FLOAT, .u.f = f}; }
static inline Arg BO(bool b) { return (Arg){.k = AK_BOOL, .u.b = b}; }
static inline Arg DT(DType d) { return (Arg){.k = AK_DTYPE, .u.code = d}; }
static inline Arg INT(Rw *r, int64_t v) { return (Arg){.k = AK_INT, .u.i = expr_const(r->g->ctx->arena, v)}; }
Arg INTS(Rw *r, int n, const int64_t *v);
Arg EXPRS(Rw *r, int n, const Expr *const *v);

void rw_push(Rw *r, Node *n);
Value *rw_call(Rw *r, Value *into, const char *opname, ...);
/* A node of op with its arguments given in schema order (a copy of another node's, say). */
Value *rw_node(Rw *r, Value *into, const OpDef *op, const Arg *args);
/* A node's arguments by schema name: NULL / the tensor / the number (dflt when absent or symbolic). */
const Arg *rw_arg(const Node *n, const char *name);
Value *rw_targ(const Node *n, const char *name);
double rw_farg(const Node *n, const char *name, double dflt);
bool rw_arg_one(const Node *n, const char *name);   /* scalar argument `name` is 1, or absent (alpha, beta) */
/* A node that only computes its outputs (no write into an argument, no randomness): one whose
 * results nothing reads may go */
bool rw_pure(const Node *n);
/* Drop the nodes `droppable` accepts (pure: views, casts) whose results nothing reads, last first. */
void graph_drop_dead(Graph *g, bool (*droppable)(const Node *));
/* by value id: the nodes that read it, 2 more for an output of the graph (so that "read once" means
 * by one node and nothing else); reader (may be NULL): filled with each value's last reader */
int *graph_uses(Graph *g, Node ***reader);
/* Pooling gradients (decompose.c), shared by autograd's rules and the exported backward ops. */
Value *avg_pool_grad(Rw *r, Value *g, Value *x, const int64_t *k, const int64_t *st, const int64_t *pd, bool cip, const Arg *dov, Value *into);
Value *adaptive_avg_pool_grad(Rw *r, Value *g, Value *x, Value *into);
/* Attention's backward as primitives (decompose.c), shared by _attention_train's derivative rule (for
 * a mask that needs a gradient) and _attention_train_backward's decomposition; returns dS. */
Value *attention_backward_primitives(Rw *r, Value *go, Value *q, Value *k, Value *v, Value *mask, Value *out, Value *lse, bool causal, double scale, Value *const into[3],
                                     Value *grads[3]);
#define CALL(r, into, op, ...) rw_call(r, into, op, __VA_ARGS__, (const char *)NULL)
#endif
