/* expr.c: symbolic sizes.
 * Sizes that torch.export left symbolic arrive as sympy text: srepr (`Mul(Integer(2), Symbol('s7',
 * positive=True, integer=True))`) or infix (`2*s7 + 1`). Both parse into the same small tree of
 * integer operations. Constructors fold constants, so a static model never carries a tree. Shapes are
 * compared by evaluation at several points of the symbols' ranges rather than by algebra. */
#include "gg.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const Expr *expr_const(Arena *a, int64_t v) {
  Expr *e = arena_alloc(a, sizeof *e);
  e->k = E_CONST;
  e->c = v;
  e->nodes = 1;
  return e;
}

const Expr *expr_sym(Arena *a, int index) {
  Expr *e = arena_alloc(a, sizeof *e);
  e->k = E_SYM;
  e->c = index;
  e->nodes = 1;
  return e;
}

bool expr_is_const(const Expr *e, int64_t *v) {
  if (e->k != E_CONST) return false;
  if (v) *v = e->c;
  return true;
}

static bool fold(ExprKind k, int64_t x, int64_t y, int64_t *r) {
  switch (k) {
  case E_ADD: return !__builtin_add_overflow(x, y, r);
  case E_MUL: return !__builtin_mul_overflow(x, y, r);
  case E_FLOORDIV:
  case E_MOD: {
    if (y == 0 || (x == INT64_MIN && y == -1)) return false;
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }  /* Python floor semantics */
    *r = k == E_FLOORDIV ? q : m;
    return true;
  }
  case E_MAX: *r = x > y ? x : y; return true;
  case E_MIN: *r = x < y ? x : y; return true;
  default: return false;
  }
}

const Expr *expr_bin(Arena *a, ExprKind k, const Expr *x, const Expr *y) {
  int64_t vx = 0, vy = 0, r;
  bool cx = expr_is_const(x, &vx), cy = expr_is_const(y, &vy);
  if (cx && cy && fold(k, vx, vy, &r)) return expr_const(a, r);
  if (k == E_ADD && cx && vx == 0) return y;
  if (k == E_ADD && cy && vy == 0) return x;
  if (k == E_MUL && cx && vx == 1) return y;
  if (k == E_MUL && cy && vy == 1) return x;
  if (k == E_MUL && ((cx && vx == 0) || (cy && vy == 0))) return expr_const(a, 0);
  if (k == E_FLOORDIV && cy && vy == 1) return x;
  Expr *e = arena_alloc(a, sizeof *e);
  e->k = k;
  e->a = x;
  e->b = y;
  /* shared subtrees count once per use: the cost of every walk (evaluation, printing) */
  if (__builtin_add_overflow(x->nodes, y->nodes, &e->nodes) || __builtin_add_overflow(e->nodes, 1, &e->nodes)) e->nodes = INT64_MAX;
  return e;
}

int expr_eval(Ctx *c, const Expr *e, const int64_t *env, int64_t *out) {
  switch (e->k) {
  case E_CONST: *out = e->c; return 0;
  case E_SYM: *out = env[e->c]; return 0;
  default: {
    int64_t x, y;
    if (expr_eval(c, e->a, env, &x) || expr_eval(c, e->b, env, &y)) return -1;
    if (!fold(e->k, x, y, out)) return gg_error(c, "symbolic size overflows or divides by zero");
    return 0;
  }
  }
}

static bool eval_quiet(const Expr *e, const int64_t *env, int64_t *out) {
  if (e->k == E_CONST) { *out = e->c; return true; }
  if (e->k == E_SYM) { *out = env[e->c]; return true; }
  int64_t x, y;
  return eval_quiet(e->a, env, &x) && eval_quiet(e->b, env, &y) && fold(e->k, x, y, out);
}

int64_t expr_hint(const Graph *g, const Expr *e) {
  int64_t env[256] = {0}, v = 0;
  for (int i = 0; i < g->nsyms && i < 256; i++) env[i] = g->syms[i].hint;
  return eval_quiet(e, env, &v) ? v : 0;
}

bool value_same_shape(const Graph *g, const Value *a, const Value *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (!expr_same(g, a->sizes[d], b->sizes[d])) return false;
  return true;
}

bool expr_same(const Graph *g, const Expr *x, const Expr *y) {
  if (x == y) return true;
  int64_t vx = 0, vy = 0;
  if (expr_is_const(x, &vx) && expr_is_const(y, &vy)) return vx == vy;
  /* Polynomial identity by sampling: the hints, then points spread over each symbol's range. */
  int64_t env[256];
  for (int trial = 0; trial < 4; trial++) {
    for (int i = 0; i < g->nsyms && i < 256; i++) {
      const Sym *s = &g->syms[i];
      int64_t lo = s->min < 2 ? 2 : s->min, hi = s->max < lo ? lo : s->max;   /* at most 1000 past lo, without overflow */
      if (hi - lo > 1000) hi = lo + 1000;
      int64_t v = trial == 0 ? s->hint : lo + (int64_t)((uint64_t)(i * 7919 + trial * 104729) % (uint64_t)(hi - lo + 1));
      env[i] = v;
    }
    bool okx = eval_quiet(x, env, &vx), oky = eval_quiet(y, env, &vy);
    if (okx != oky || (okx && vx != vy)) return false;
  }
  return true;
}

/* ---- parser: primary := INT | NAME | NAME '(' args ')' | '(' expr ')'; infix + - * // % */

typedef struct P { Ctx *c; Graph *g; const char *s, *where; int depth; bool bad; } P;

static void skip_ws(P *p) { while (*p->s == ' ' || *p->s == '\t') p->s++; }

static const Expr *perr(P *p, const char *what) {
  if (!p->bad) gg_error(p->c, "%s: cannot read symbolic size %s: %s", p->where, gg_quote(p->c, p->s), what);
  p->bad = true;
  return NULL;
}

static int sym_index(P *p, const char *name, size_t len) {
  Graph *g = p->g;
  for (int i = 0; i < g->nsyms; i++)
    if (strlen(g->syms[i].name) == len && !strncmp(g->syms[i].name, name, len)) return i;
  if (g->nsyms >= 256) return -1;
  if (g->nsyms == g->cap_syms) {
    int cap = g->cap_syms ? g->cap_syms * 2 : 8;
    Sym *n = arena_array(g->ctx->arena, (size_t)cap, sizeof *n);
    if (g->nsyms) memcpy(n, g->syms, sizeof *n * (size_t)g->nsyms);
    g->syms = n;
    g->cap_syms = cap;
  }
  Sym *s = &g->syms[g->nsyms];
  char *nm = arena_alloc(g->ctx->arena, len + 1);
  memcpy(nm, name, len);
  s->name = nm;
  s->min = 0;
  s->max = INT64_MAX;
  s->hint = 2;
  return g->nsyms++;
}

static const Expr *parse_sum(P *p);

static const Expr *parse_call(P *p, const char *name, size_t len) {
  Arena *a = p->c->arena;
  const Expr *args[64];
  int n = 0;
  for (;;) {
    skip_ws(p);
    if (*p->s == ')') { p->s++; break; }
    /* keyword arguments such as positive=True carry nothing we need */
    const char *q = p->s;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    if (*q == '=' && q[1] != '=') {
      p->s = q + 1;
      while (*p->s && *p->s != ',' && *p->s != ')') p->s++;
    } else if (*p->s == '\'' || *p->s == '"') {
      char quote = *p->s++;
      const char *start = p->s;
      while (*p->s && *p->s != quote) p->s++;
      if (!*p->s) return perr(p, "unterminated string");
      size_t l = (size_t)(p->s - start);
      p->s++;
      if (n >= 64) return perr(p, "too many arguments");
      if (len == 6 && !strncmp(name, "Symbol", 6)) {
        int i = sym_index(p, start, l);
        if (i < 0) return perr(p, "too many symbols");
        args[n++] = expr_sym(a, i);
      } else return perr(p, "unexpected string");
    } else {
      if (n >= 64) return perr(p, "too many arguments");
      const Expr *e = parse_sum(p);
      if (!e) return NULL;
      args[n++] = e;
    }
    skip_ws(p);
    if (*p->s == ',') p->s++;
    else if (*p->s != ')') return perr(p, "expected ',' or ')'");
  }
#define IS(lit) (len == sizeof(lit) - 1 && !strncmp(name, lit, len))
  if (IS("Symbol") || IS("Integer") || IS("int")) {
    if (n != 1) return perr(p, "expected one argument");
    return args[0];
  }
  ExprKind k;
  if (IS("Add")) k = E_ADD;
  else if (IS("Mul")) k = E_MUL;
  else if (IS("FloorDiv") || IS("CleanDiv")) k = E_FLOORDIV;
  else if (IS("Mod") || IS("PythonMod")) k = E_MOD;
  else if (IS("Max")) k = E_MAX;
  else if (IS("Min")) k = E_MIN;
  else if (IS("Pow")) {
    int64_t ex;
    if (n != 2 || !expr_is_const(args[1], &ex) || ex < 0 || ex > 8) return perr(p, "unsupported power");
    const Expr *r = expr_const(a, 1);
    for (int i = 0; i < ex; i++) r = expr_bin(a, E_MUL, r, args[0]);
    if (r->nodes > GG_MAX_EXPR_NODES) return perr(p, "expression too large");
    return r;
  } else return perr(p, "unsupported function");
#undef IS
  if (n < 2) return n == 1 ? args[0] : perr(p, "expected arguments");
  const Expr *r = args[0];
  for (int i = 1; i < n; i++) r = expr_bin(a, k, r, args[i]);
  if (r->nodes > GG_MAX_EXPR_NODES) return perr(p, "expression too large");
  return r;
}

static const Expr *parse_primary(P *p) {
  skip_ws(p);
  if (++p->depth > 200) return perr(p, "nested too deeply");
  const Expr *r = NULL;
  if (*p->s == '(') {
    p->s++;
    r = parse_sum(p);
    skip_ws(p);
    if (r && *p->s != ')') r = perr(p, "expected ')'");
    else if (r) p->s++;
  } else if (*p->s == '-') {
    p->s++;
    const Expr *e = parse_primary(p);
    r = e ? expr_bin(p->c->arena, E_MUL, expr_const(p->c->arena, -1), e) : NULL;
  } else if (isdigit((unsigned char)*p->s)) {
    int64_t v = 0;
    while (isdigit((unsigned char)*p->s)) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p->s - '0', &v)) return perr(p, "number too large");
      p->s++;
    }
    r = expr_const(p->c->arena, v);
  } else if (isalpha((unsigned char)*p->s) || *p->s == '_') {
    const char *start = p->s;
    while (isalnum((unsigned char)*p->s) || *p->s == '_') p->s++;
    size_t len = (size_t)(p->s - start);
    skip_ws(p);
    if (*p->s == '(') { p->s++; r = parse_call(p, start, len); }
    else {
      int i = sym_index(p, start, len);
      r = i < 0 ? perr(p, "too many symbols") : expr_sym(p->c->arena, i);
    }
  } else r = perr(p, "unexpected character");
  p->depth--;
  return r;
}

static const Expr *parse_product(P *p) {
  const Expr *l = parse_primary(p);
  for (;;) {
    if (!l) return NULL;
    skip_ws(p);
    ExprKind k;
    if (p->s[0] == '/' && p->s[1] == '/') { k = E_FLOORDIV; p->s += 2; }
    else if (*p->s == '*' && p->s[1] != '*') { k = E_MUL; p->s++; }
    else if (*p->s == '%') { k = E_MOD; p->s++; }
    else return l;
    const Expr *r = parse_primary(p);
    if (!r) return NULL;
    l = expr_bin(p->c->arena, k, l, r);
    if (l->nodes > GG_MAX_EXPR_NODES) return perr(p, "expression too large");
  }
}

static const Expr *parse_sum(P *p) {
  const Expr *l = parse_product(p);
  for (;;) {
    if (!l) return NULL;
    skip_ws(p);
    if (*p->s != '+' && *p->s != '-') return l;
    bool neg = *p->s++ == '-';
    const Expr *r = parse_product(p);
    if (!r) return NULL;
    if (neg) r = expr_bin(p->c->arena, E_MUL, expr_const(p->c->arena, -1), r);
    l = expr_bin(p->c->arena, E_ADD, l, r);
    if (l->nodes > GG_MAX_EXPR_NODES) return perr(p, "expression too large");
  }
}

const Expr *expr_parse(Ctx *c, Graph *g, const char *text, const char *where) {
  P p = {c, g, text, where, 0, false};
  const Expr *e = parse_sum(&p);
  if (!e) return NULL;
  skip_ws(&p);
  if (*p.s) return perr(&p, "unexpected text after the expression");
  return e;
}

static void print_rec(FILE *f, const Graph *g, const Expr *e, int prec) {
  static const char *ops[] = {[E_ADD] = " + ", [E_MUL] = "*", [E_FLOORDIV] = "//", [E_MOD] = "%"};
  static const int prc[] = {[E_ADD] = 1, [E_MUL] = 2, [E_FLOORDIV] = 2, [E_MOD] = 2};
  switch (e->k) {
  case E_CONST: fprintf(f, "%lld", (long long)e->c); return;
  case E_SYM: fputs(g->syms[e->c].name, f); return;
  case E_MAX: case E_MIN:
    fputs(e->k == E_MAX ? "max(" : "min(", f);
    print_rec(f, g, e->a, 0); fputs(", ", f); print_rec(f, g, e->b, 0); fputc(')', f);
    return;
  default:
    if (prc[e->k] < prec) fputc('(', f);
    print_rec(f, g, e->a, prc[e->k]);
    fputs(ops[e->k], f);
    print_rec(f, g, e->b, prc[e->k] + 1);
    if (prc[e->k] < prec) fputc(')', f);
  }
}

void expr_print(FILE *f, const Graph *g, const Expr *e) { print_rec(f, g, e, 0); }

char *expr_str(Arena *a, const Graph *g, const Expr *e) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return arena_strdup(a, "?");
  expr_print(f, g, e);
  fclose(f);
  char *r = arena_strdup(a, buf);
  free(buf);
  return r;
}
