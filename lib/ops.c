/* ops.c: the op table (rows in ops.def) and the reader of its schema strings.
 * Requires: nothing. Guarantees: after ops_init, every OpDef has its arguments (names, types, defaults)
 * parsed from PyTorch's schema text, so the loader can match exported arguments by name and fill in
 * the defaults the JSON leaves out. The scalar functions of pointwise ops are here too. */
#include "gg.h"
#include "scalar.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the table */

#define OP(schema, shape, eval, emit, grad, decomp, red, pwf, pwi, pwout, doc) \
  int shape(struct ShapeCtx *); int eval(struct EvalCtx *); int emit(struct Em *, struct Node *); int grad(struct Ad *, struct Node *); \
  int decomp(struct Rw *, struct Node *);
#include "ops.def"
#undef OP

static OpDef table[] = {
#define OP(schema, shape, eval, emit, grad, decomp, red, pwf, pwi, pwout, doc) \
  {NULL, schema, shape, eval, emit, grad, decomp, red, pwf, pwi, pwout, #pwf, #pwi, doc, 0, NULL, 0, false, false, -1},
#include "ops.def"
#undef OP
};
#define NOPS ((int)(sizeof table / sizeof *table))

int ops_count(void) { return NOPS; }
const OpDef *ops_at(int i) { return &table[i]; }

/* ---------------------------------------------------------------- schema reader */

typedef struct SP { Ctx *c; Arena *a; const char *schema; } SP;

static int bad_schema(SP *p, const char *what) {
  return gg_error(p->c, "internal error: op table schema %s: %s", gg_quote(p->c, p->schema), what);
}

static char *dup_range(Arena *a, const char *s, const char *e) {
  while (s < e && isspace((unsigned char)*s)) s++;
  while (e > s && isspace((unsigned char)e[-1])) e--;
  char *r = arena_alloc(a, (size_t)(e - s) + 1);
  memcpy(r, s, (size_t)(e - s));
  return r;
}

static int parse_type(SP *p, const char *t, ArgSpec *as) {
  char base[64];
  size_t n = 0;
  as->mutated = strchr(t, '!') != NULL;
  /* drop alias annotations "(a!)", "(a -> *)" */
  for (const char *q = t; *q && n < sizeof base - 1; q++) {
    if (*q == '(') { while (*q && *q != ')') q++; if (!*q) break; continue; }
    base[n++] = *q;
  }
  base[n] = 0;
  bool list = false;
  char *br = strchr(base, '[');
  if (n && base[n - 1] == '?') { as->optional = true; base[--n] = 0; }
  if (br) {
    list = true;
    as->fixed_len = atoi(br + 1);
    if (br > base && br[-1] == '?') { br[-1] = 0; as->none_elems = true; }   /* Tensor?[]: elements may be None */
    *br = 0;
  }
  static const struct { const char *name; ArgType one, many; } types[] = {
    {"Tensor", T_TENSOR, T_TENSOR_LIST}, {"int", T_INT, T_INT_LIST}, {"SymInt", T_INT, T_INT_LIST},
    {"float", T_FLOAT, T_FLOAT_LIST}, {"bool", T_BOOL, T_BOOL_LIST}, {"Scalar", T_SCALAR, T_ANY},
    {"ScalarType", T_DTYPE, T_ANY}, {"Layout", T_LAYOUT, T_ANY}, {"Device", T_DEVICE, T_ANY},
    {"MemoryFormat", T_MEMFMT, T_ANY}, {"str", T_STR, T_ANY}, {"Generator", T_ANY, T_ANY},
  };
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    if (!strcmp(base, types[i].name)) { as->type = list ? types[i].many : types[i].one; return 0; }
  return bad_schema(p, "unknown type");
}

static int parse_number(SP *p, const char *s, Arg *out, ArgType type) {
  char *end;
  if (strpbrk(s, ".e") || type == T_FLOAT || type == T_FLOAT_LIST) {
    out->k = AK_FLOAT;
    out->u.f = strtod(s, &end);
  } else {
    out->k = AK_INT;
    out->u.i = expr_const(p->a, strtoll(s, &end, 10));
  }
  return *end ? bad_schema(p, "bad default") : 0;
}

static int parse_default(SP *p, const char *d, ArgSpec *as) {
  Arg *v = &as->def;
  as->has_default = true;
  if (!strcmp(d, "None")) { v->k = AK_NONE; return 0; }
  if (!strcmp(d, "True") || !strcmp(d, "False")) { v->k = AK_BOOL; v->u.b = d[0] == 'T'; return 0; }
  if (!strcmp(d, "contiguous_format")) { v->k = AK_MEMFMT; v->u.code = 1; return 0; }
  if (!strcmp(d, "long")) { v->k = AK_DTYPE; v->u.code = DT_I64; return 0; }   /* randperm's dtype */
  if (!strcmp(d, "Mean")) { v->k = AK_INT; v->u.i = expr_const(p->a, 1); return 0; }
  if (!strcmp(d, "Sum")) { v->k = AK_INT; v->u.i = expr_const(p->a, 2); return 0; }
  if (d[0] == '\'' || d[0] == '"') {
    v->k = AK_STR;
    v->u.s = dup_range(p->a, d + 1, d + strlen(d) - 1);
    return 0;
  }
  bool is_list = as->type == T_INT_LIST || as->type == T_FLOAT_LIST || as->type == T_BOOL_LIST;
  if (d[0] == '[') {
    /* [] or [0, 0] */
    int n = 0;
    const Expr **is = arena_array(p->a, 8, sizeof *is);
    const char *q = d + 1;
    while (*q && *q != ']') {
      char *end;
      long long x = strtoll(q, &end, 10);
      if (end == q || n >= 8) return bad_schema(p, "bad list default");
      is[n++] = expr_const(p->a, x);
      q = end;
      while (*q == ',' || *q == ' ') q++;
    }
    if (as->type != T_INT_LIST && n) return bad_schema(p, "non-int list default");
    v->k = as->type == T_TENSOR_LIST ? AK_TENSORS : AK_INTS;
    v->n = n;
    v->u.is = is;
    return 0;
  }
  Arg one;
  if (parse_number(p, d, &one, as->type)) return -1;
  if (is_list) {
    /* int[2] stride=1 means [1, 1] */
    int n = as->fixed_len ? as->fixed_len : 1;
    v->k = AK_INTS;
    v->n = n;
    v->u.is = arena_array(p->a, (size_t)n, sizeof *v->u.is);
    for (int i = 0; i < n; i++) v->u.is[i] = one.u.i;
    return 0;
  }
  *v = one;
  return 0;
}

static int parse_schema(SP *p, OpDef *op) {
  const char *s = op->schema, *lp = strchr(s, '(');
  if (!lp) return bad_schema(p, "no '('");
  op->name = dup_range(p->a, s, lp);
  /* find the matching ')' of the argument list */
  int depth = 0;
  const char *q = lp, *rp = NULL;
  for (; *q; q++) {
    if (*q == '(' || *q == '[') depth++;
    else if ((*q == ')' || *q == ']') && --depth == 0) { rp = q; break; }
  }
  if (!rp) return bad_schema(p, "unbalanced");
  ArgSpec specs[32];
  int n = 0;
  const char *start = lp + 1;
  depth = 0;
  for (q = lp + 1; q <= rp; q++) {
    if (*q == '(' || *q == '[') depth++;
    else if ((*q == ')' || *q == ']') && q != rp) depth--;
    if ((*q == ',' && depth == 0) || q == rp) {
      char *arg = dup_range(p->a, start, q);
      start = q + 1;
      if (!*arg || !strcmp(arg, "*")) continue;
      if (n == 32) return bad_schema(p, "too many arguments");
      ArgSpec *as = &specs[n++];
      memset(as, 0, sizeof *as);
      char *eq = NULL;
      /* the default follows the first '=' outside parentheses */
      int d = 0;
      for (char *r = arg; *r; r++) {
        if (*r == '(') d++;
        else if (*r == ')') d--;
        else if (*r == '=' && d == 0) { eq = r; break; }
      }
      if (eq) *eq = 0;
      char *sp = strrchr(arg, ' ');
      if (!sp) return bad_schema(p, "argument without a name");
      *sp = 0;
      as->name = sp + 1;
      if (parse_type(p, arg, as)) return -1;
      if (eq && parse_default(p, eq + 1, as)) return -1;
    }
  }
  op->nargs = n;
  op->args = arena_array(p->a, (size_t)(n ? n : 1), sizeof *op->args);
  memcpy(op->args, specs, sizeof *specs * (size_t)n);
  op->inplace = n > 0 && op->args[0].mutated;
  op->outarg = -1;
  for (int i = 1; i < n; i++)
    if (op->args[i].mutated && !strcmp(op->args[i].name, "out")) op->outarg = i;
  const char *ret = strstr(rp, "->");
  if (!ret) return bad_schema(p, "no return");
  ret += 2;
  while (*ret == ' ') ret++;
  op->view = strncmp(ret, "Tensor(a)", 9) == 0;
  if (!strcmp(ret, "()")) op->nrets = 0;
  else if (strstr(ret, "[]")) op->nrets = -1;
  else if (*ret == '(') {
    op->nrets = 1;
    for (const char *r = ret; *r; r++) op->nrets += *r == ',';
  } else op->nrets = 1;
  return 0;
}

int ops_init(Ctx *c) {
  static Arena *schema_arena;   /* the parsed table is read-only after this and shared by every Ctx */
  if (table[0].name) return 0;
  schema_arena = arena_new();
  SP p = {c, schema_arena, NULL};
  for (int i = 0; i < NOPS; i++) {
    p.schema = table[i].schema;
    if (parse_schema(&p, &table[i])) return -1;
  }
  return 0;
}

/* Core ATen ops that are refused on purpose, and why (gcc-graph ops lists them; a model that holds one
 * is refused with the reason). */
static const struct { const char *name, *why; } refused[] = {
  {"nonzero", "its output's size depends on the data; compiled programs have shapes fixed by the inputs' sizes (mask with where() instead)"},
  {"_local_scalar_dense", "Tensor.item(): a tensor's value turned into a number that sizes or steers the graph, which depends on the data"},
  {"resize_", "changes a tensor's shape in place, which functional graphs do not do"},
  {"_fft_r2c", "its result is complex, and complex dtypes are not represented"},
  {"_fft_c2r", "its input is complex, and complex dtypes are not represented"},
  {"sym_stride.int", "strides of views are not part of gcc-graph's functional graphs (values are dense tensors)"},
  {"sym_storage_offset", "storage offsets of views are not part of gcc-graph's functional graphs (values are dense tensors)"},
  {"sym_is_contiguous", "memory layouts of views are not part of gcc-graph's functional graphs (values are dense tensors)"},
};

int ops_refused_count(void) { return (int)(sizeof refused / sizeof *refused); }
const char *ops_refused_at(int i, const char **why) { *why = refused[i].why; return refused[i].name; }

/* Why an op that is not in the table is refused, or NULL (not supported yet) */
const char *ops_refusal(const char *target) {
  static const char prefix[] = "torch.ops.aten.";
  if (!strncmp(target, prefix, sizeof prefix - 1)) target += sizeof prefix - 1;
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    size_t n = strlen(refused[i].name);
    if (!strncmp(target, refused[i].name, n) && (!target[n] || !strcmp(target + n, ".default"))) return refused[i].why;
  }
  return NULL;
}

const OpDef *ops_find(const char *target) {
  static const char prefix[] = "torch.ops.aten.";
  if (!strncmp(target, prefix, sizeof prefix - 1)) target += sizeof prefix - 1;
  else if (!strncmp(target, "aten::", 6)) target += 6;
  else if (strchr(target, ':') || !strncmp(target, "torch.", 6)) return NULL;
  char buf[128];
  size_t n = strlen(target);
  /* "relu.default" is the op "relu" */
  if (n > 8 && !strcmp(target + n - 8, ".default") && n - 8 < sizeof buf) {
    memcpy(buf, target, n - 8);
    buf[n - 8] = 0;
    target = buf;
  }
  for (int i = 0; i < NOPS; i++)
    if (table[i].name && !strcmp(table[i].name, target)) return &table[i];
  return NULL;
}

DType shape_promote(const Node *n);

int pw_plan(Ctx *c, const Node *n, PwPlan *p) {
  const OpDef *op = n->op;
  memset(p, 0, sizeof *p);
  p->f = op->pwf;
  p->fi = op->pwi;
  p->fname = op->pwf_name;
  p->iname = op->pwi_name;
  p->comp = shape_promote(n);
  int i = ops_arg_index(op, "approximate");
  if (i >= 0) {   /* gelu */
    bool tanh_mode = n->args[i].k == AK_STR && !strcmp(n->args[i].u.s, "tanh");
    if (n->args[i].k == AK_STR && !tanh_mode && strcmp(n->args[i].u.s, "none"))
      return gg_error(c, "node %s: unknown gelu approximation %s", gg_quote(c, n->name), gg_quote(c, n->args[i].u.s));
    p->f = tanh_mode ? f_gelu_tanh : f_gelu_erf;
    p->fname = tanh_mode ? "f_gelu_tanh" : "f_gelu_erf";
  }
  i = ops_arg_index(op, "rounding_mode");
  if (i >= 0) {   /* div.Tensor_mode */
    const char *m = n->args[i].k == AK_STR ? n->args[i].u.s : NULL;
    if (!m) { p->f = f_div; p->fname = "f_div"; p->fi = NULL; }
    else if (!strcmp(m, "trunc")) { p->f = f_div_trunc; p->fi = i_div_trunc; p->fname = "f_div_trunc"; p->iname = "i_div_trunc"; }
    else if (!strcmp(m, "floor")) { p->f = f_floordiv; p->fi = i_floordiv; p->fname = "f_floordiv"; p->iname = "i_floordiv"; }
    else return gg_error(c, "node %s: unknown rounding_mode %s", gg_quote(c, n->name), gg_quote(c, m));
  }
  if (!strncmp(op->name, "dropout", 7) || !strcmp(op->name, "native_dropout")) {
    p->f = f_ident; p->fi = i_ident; p->fname = "f_ident"; p->iname = "i_ident";
  }
  p->use_float = dtype_is_float(p->comp) || op->pwout == PW_FLOAT || !p->fi;
  if (p->comp == DT_BOOL && !strcmp(op->name, "bitwise_not")) {   /* on bool, bitwise not is logical not */
    p->f = f_logical_not; p->fname = "f_logical_not"; p->use_float = true;
  }
  /* the costly functions have float32 versions (scalar.h) that compiled CPU code uses on float32,
   * float16 and bfloat16 (which PyTorch's CPU kernels compute in float32 too) */
  static const char *const f32[][2] = {{"f_exp", "f32_exp"}, {"f_sigmoid", "f32_sigmoid"}, {"f_silu", "f32_silu"},
                                       {"f_erf", "f32_erf"}, {"f_gelu_erf", "f32_gelu_erf"}, {"f_tanh", "f32_tanh"},
                                       {"f_gelu_tanh", "f32_gelu_tanh"}};
  bool f32ok = p->comp == DT_F32 || p->comp == DT_F16 || p->comp == DT_BF16;
  for (size_t k = 0; p->use_float && f32ok && p->fname && k < sizeof f32 / sizeof *f32; k++)
    if (!strcmp(p->fname, f32[k][0])) p->f32name = f32[k][1];
  i = ops_arg_index(op, "exponent");
  double e = i >= 0 && n->args[i].k == AK_FLOAT ? n->args[i].u.f : 0;
  int64_t ei;
  if (i >= 0 && n->args[i].k == AK_INT && expr_is_const(n->args[i].u.i, &ei)) e = (double)ei;
  if (p->use_float && !strcmp(op->name, "pow.Tensor_Scalar") && (e == 2 || e == 3)) {   /* products, as PyTorch's pow kernels (not powf) */
    p->f = e == 2 ? f_pow2 : f_pow3;
    p->fname = e == 2 ? "f_pow2" : "f_pow3";
    if (f32ok) p->f32name = e == 2 ? "f32_pow2" : "f32_pow3";
  }
  if (p->use_float && !p->f) return gg_error(c, "node %s (%s): not defined for %s", gg_quote(c, n->name), gg_quote(c, n->target), dtype_name(p->comp));
  return 0;
}

int ops_arg_index(const OpDef *op, const char *name) {
  for (int i = 0; i < op->nargs; i++)
    if (!strcmp(op->args[i].name, name)) return i;
  return -1;
}
