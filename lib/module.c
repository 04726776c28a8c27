/* module.c: the model file. Each program (the forward; a training model's backward too) as its
 * kernels in graph order (emit.c, emit_ops.c and the target's file write them), its guard, output
 * shapes, scratch layout (memplan.c) and run function, then the descriptors the runtime reads:
 * weights, outputs, buffer updates, packed weights, the training program and its optimizer.
 * Requires: verified graphs and their schedules. Guarantees: one C (or CUDA) file that, with the
 * runtime (lib/rt) and scalar.h, builds into a model .so; a guard that checks every input before
 * anything runs; deterministic output. */
#include "emit.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the model file */

static const char *dl_dtype(DType d) {
  switch (d) {
  case DT_F32: return "{kDLFloat, 32, 1}";
  case DT_F64: return "{kDLFloat, 64, 1}";
  case DT_F16: return "{kDLFloat, 16, 1}";
  case DT_BF16: return "{kDLBfloat, 16, 1}";
  case DT_I64: return "{kDLInt, 64, 1}";
  case DT_I32: return "{kDLInt, 32, 1}";
  case DT_I16: return "{kDLInt, 16, 1}";
  case DT_I8: return "{kDLInt, 8, 1}";
  case DT_U8: return "{kDLUInt, 8, 1}";
  default: return "{6, 8, 1}";   /* bool: kDLBool */
  }
}

/* The guard: every input's dtype, rank, strides and device, then its sizes: a symbol's first
 * appearance binds it (within its range), later ones must agree. */
static void emit_guard(Em *e, Value **users, int nusers) {
  FILE *f = e->k;
  Graph *g = e->g;
  bool *bound = arena_array(e->a, (size_t)g->nsyms + 1, sizeof *bound);
  fputs("\n/* Guards: checked before every run. */\nstatic int gg_m_guard(const DLTensor *in, int64_t *s, char *err, size_t errlen) {\n  (void)s;\n", f);
  for (int i = 0; i < nusers; i++) {
    Value *v = users[i];
    fprintf(f, "  if (gg_rt_check_tensor(&in[%d], gg_input_names[%d], (DLDataType)%s, %d, %s, err, errlen)) return 1;\n", i, i, dl_dtype(v->dtype), v->rank,
          e->t->device_code);
    if (GG_LOG_ON(e->c, LOG_GUARDS)) {
      char sz[512] = "";
      for (int d = 0; d < v->rank; d++) snprintf(sz + strlen(sz), sizeof sz - strlen(sz), "%s%s", d ? ", " : "", expr_str(e->a, g, v->sizes[d]));
      gg_log(e->c, LOG_GUARDS, "input %d %s: %s, rank %d, sizes [%s], row-major, cpu", i, gg_quote(e->c, v->name), dtype_name(v->dtype), v->rank, sz);
    }
  }
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < nusers; i++) {
      Value *v = users[i];
      for (int d = 0; d < v->rank; d++) {
        const Expr *x = v->sizes[d];
        if (pass == 0 && x->k == E_SYM && !bound[x->c]) {
          const Sym *sy = &g->syms[x->c];
          bound[x->c] = true;
          fprintf(f, "  s[%lld] = in[%d].shape[%d];\n", (long long)x->c, i, d);
          fprintf(f, "  if (s[%lld] < INT64_C(%lld) || s[%lld] > INT64_C(%lld)) return gg_rt_fail(err, errlen, \"guard failed: tensor '%%s' size mismatch at index %d. expected %s in [%lld, %lld], actual %%lld" GG_HINT_RANGE "\", gg_input_names[%d], (long long)s[%lld]);\n",
                  (long long)x->c, (long long)sy->min, (long long)x->c, (long long)sy->max, d, sy->name, (long long)sy->min, (long long)sy->max, i,
                  (long long)x->c);
        } else if (pass == 1) {
          fprintf(f, "  if (in[%d].shape[%d] != %s) return gg_rt_fail(err, errlen, \"guard failed: tensor '%%s' size mismatch at index %d. expected %%lld, actual %%lld%s\", gg_input_names[%d], (long long)(%s), (long long)in[%d].shape[%d]);\n",
                  i, d, cx(e, x), d, x->k == E_CONST ? GG_HINT_STATIC_SIZE : GG_HINT_SHARED, i, cx(e, x), i, d);
        }
      }
    }
  fputs("  return 0;\n}\n", f);
}

static void emit_output_shape(Em *e, const char *p, Value **outs, int n) {
  FILE *f = e->k;
  fprintf(f, "\nstatic void gg_%s_output_shape(int i, const int64_t *s, int64_t *shape) {\n  (void)s; (void)shape;\n  switch (i) {\n", p);
  for (int i = 0; i < n; i++) {
    fprintf(f, "  case %d:", i);
    for (int d = 0; d < outs[i]->rank; d++) fprintf(f, " shape[%d] = %s;", d, cx(e, outs[i]->sizes[d]));
    fputs(" break;\n", f);
  }
  fputs("  }\n}\n", f);
}

/* Memory planning (memplan.c) of the program's scratch tensors: their offsets, or -1 when sizes are
 * symbolic (then tensors are laid out one after another). */
static int64_t plan_memory(Em *e) {
  MemBuf *b = arena_array(e->a, (size_t)e->nst + 1, sizeof *b);
  int *at = arena_array(e->a, (size_t)e->nst + 1, sizeof *at), n = 0;
  bool symbolic = false;
  for (int i = 0; i < e->nst; i++) {
    const Stor *st = &e->st[i];
    if (st->kind != S_SCRATCH) continue;
    int64_t ne;
    if (!expr_is_const(st->nelem, &ne)) {
      if (!e->c->record) return -1;
      symbolic = true;   /* explain draws the plan at the symbols' example values */
      ne = expr_hint(e->g, st->nelem);
    }
    int p = st->inplace - 1;
    at[i] = n;
    b[n++] = (MemBuf){i, (ne * dtype_info(st->dt)->size + 63) & ~INT64_C(63), st->first, st->last, p >= 0 && e->st[p].kind == S_SCRATCH ? at[p] + 1 : 0, 0};
  }
  int64_t naive, total = memplan(e->c, b, n, &naive);
  if (e->c->record && !e->c->membufs) {   /* explain --html draws the plan (the first program's: the model's, or the forward) */
    e->c->membufs = arena_array(e->c->arena, (size_t)n + 1, sizeof *e->c->membufs);
    for (int i = 0; i < n; i++) e->c->membufs[i] = (MemBufRec){b[i].offset, b[i].bytes, b[i].first, b[i].last};
    e->c->nmembufs = n;
    e->c->membufs_symbolic = symbolic;
  }
  if (symbolic) return -1;
  e->scratch_naive = naive;
  for (int i = 0; i < e->nst; i++)
    if (e->st[i].kind == S_SCRATCH) e->st[i].offset = b[at[i]].offset;
  e->scratch_planned = total;
  return total;
}

/* What one program (the forward, or the backward of a training model) gives the descriptor. */
typedef struct Prog {
  Value **outs; int nouts;          /* outputs in order: user outputs, then saved values or gradients */
  Value **mut_vals; int *mut_w; int *mut_of; int nmut; /* buffer updates: value, weight index, and by weight */
  int nweights, nk, nfused, nnodes;
  int64_t planned, naive;
  int nprof;                        /* nodes with a profile slot */
  char *errs;                       /* CUDA: switch cases from kernel id to index message */
  int npacks;                       /* weights packed at gg_open (CPU inference) */
  PackDesc *packs;
  int nbuckets;                     /* gradient buckets, and the bucket of each output (-1: none) */
  int *bucket;
  bool random;                      /* draws random numbers (rand, randn, dropout in training) */
  int *in_last;                     /* by user input: the last kernel that reads it (-1: none) */
  int *out_first;                   /* by output slot: the first kernel that writes it */
} Prog;

/* The weight index (among the graph's weight inputs) of the buffer a mutation output writes, or -1 */
static int mutated_weight(const Graph *g, const OutputSpec *o) {
  int w = -1;
  for (int j = 0, wi = 0; j < g->ninputs; j++) {
    if (g->inputs[j]->input == IN_USER) continue;
    if (g->inputs[j]->fqn && o->target_name && !strcmp(g->inputs[j]->fqn, o->target_name)) w = wi;
    wi++;
  }
  return w;
}

/* explain's figures for kernel r: its iteration space (the output it writes; a product's or
 * convolution's depth), the bytes of the tensors its node and the nodes fused into it read from
 * outside and of what it writes, and FLOPs (2 per multiply-add of a product or convolution, 1 per
 * output element of any other node), at the example sizes. mark: by value id, scratch. */
static void kernel_stats(Em *e, KernelRec *r, int *mark, int stamp) {
  const Node *n = r->n;
  const Graph *g = e->g;
  if (!n || !n->nouts) return;
  double rd = 0, wr = 0, fl = 0;
  for (int pass = 0; pass < 2; pass++)   /* the values made inside the kernel, then what it reads */
    for (int k = -1; k < r->nfused; k++) {   /* the node, then the nodes computed in its kernel */
      const Node *m = k < 0 ? n : r->fused[k];
      if (pass == 0) {
        for (int i = 0; i < m->nouts; i++) mark[m->outs[i]->id] = stamp;
        double mf = node_matrix_flops(g, m);
        fl += mf > 0 ? mf : m->nouts ? (double)value_nbytes(g, m->outs[0]) / dtype_info(m->outs[0]->dtype)->size : 0;
      } else
        FOR_TENSOR_ARGS(m, a, {
          if (mark[a->id] == stamp || mark[a->id] == -stamp) continue;
          mark[a->id] = -stamp;
          rd += (double)value_nbytes(g, a);
        })
    }
  for (int i = 0; i < n->nouts; i++)   /* an epilogue's result is written where the node's would be (a norm's cast: in its type) */
    wr += (double)value_nbytes(g, i == 0 ? sched_stored(e->s, n) : n->outs[i]);
  if (sched_norm_second(e->s, n)) wr += (double)value_nbytes(g, sched_norm_second(e->s, n));   /* and a norm's narrowed copy */
  double ne, mf = node_matrix_flops(g, n);
  r->space = hint_shape(e, n->outs[0]->rank, n->outs[0]->sizes, &ne);
  if (mf > 0 && ne > 0) r->space = arena_printf(e->a, "%s x %.0f deep", r->space, mf / (2 * ne));
  r->read = rd;
  r->written = wr;
  r->flops = fl;
}

/* explain's figures for a node's second kernel: a pass over the node's output, read and written in
 * place, a FLOP per element */
static void kernel_pass_stats(Em *e, KernelRec *r) {
  const Node *n = r->n;
  if (!n->nouts) return;
  double ne;
  r->space = hint_shape(e, n->outs[0]->rank, n->outs[0]->sizes, &ne);
  r->read = r->written = (double)value_nbytes(e->g, n->outs[0]);
  r->flops = ne;
}

/* ---------------------------------------------------------------- kernels that are the same code */

/* A function definition's first line: "[GG_VEC ]static [GG_VEC ][__global__ ]void|int k<N>(" or ep<N> */
static bool fn_head(const char *l, const char **name, size_t *len) {
  static const char *const pre[] = {"GG_VEC static ", "static "};
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(pre[i]);
    if (strncmp(l, pre[i], n)) continue;
    const char *p = l + n;
    if (!strncmp(p, "GG_VEC ", 7)) p += 7;
    if (!strncmp(p, "__global__ ", 11)) p += 11;
    if (!strncmp(p, "void ", 5)) p += 5;
    else if (!strncmp(p, "int ", 4)) p += 4;
    else return false;
    const char *q = p;
    if (*q == 'k') q++;
    else if (q[0] == 'e' && q[1] == 'p') q += 2;
    else return false;
    if (*q < '0' || *q > '9') return false;
    while (*q >= '0' && *q <= '9') q++;
    if (*q != '(') return false;
    *name = p;
    *len = (size_t)(q - p);
    return true;
  }
  return false;
}

typedef struct { char *norm; char *name; } Seen;
typedef struct { char **from, **to; int n, cap; } Aliases;

static const char *alias_of(const Aliases *al, const char *id, size_t len) {
  for (int i = 0; i < al->n; i++)
    if (strlen(al->from[i]) == len && !strncmp(al->from[i], id, len)) return al->to[i];
  return NULL;
}

/* A size in the text at t: "INT64_C(<integer>)"; its length, 0 if t is not one. */
static size_t size_literal(const char *t, size_t n, int64_t *v) {
  if (n < 10 || strncmp(t, "INT64_C(", 8)) return 0;
  size_t i = 8;
  if (t[i] == '-') i++;
  size_t d0 = i;
  while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  if (i == d0 || i >= n || t[i] != ')') return 0;
  *v = strtoll(t + 8, NULL, 10);
  return i + 1;
}

/* The function's text with its own name SELF, its locals a<N>/r<N>/p<N> numbered in order of appearance,
 * and the kernels and epilogues it names replaced by what they alias. With lift, sizes other than 0
 * and 1 (INT64_C(n)) become K and their values are appended to *lifted (malloc'd, *nlifted of them). */
static char *normalize(const char *t, size_t n, const char *self, size_t selflen, const Aliases *al, int64_t **lifted, int *nlifted) {
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  int caplift = 0;
  const char *loc[512];
  size_t loclen[512];
  int nloc = 0;
  for (size_t i = 0; i < n;) {
    char ch = t[i];
    if (!(ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) { fputc(ch, f); i++; continue; }
    int64_t v;
    size_t sl = lifted ? size_literal(t + i, n - i, &v) : 0;
    if (sl && v != 0 && v != 1) {
      if (*nlifted == caplift) {
        caplift = caplift ? 2 * caplift : 16;
        int64_t *nl = realloc(*lifted, sizeof *nl * (size_t)caplift);
        if (!nl) abort();
        *lifted = nl;
      }
      (*lifted)[(*nlifted)++] = v;
      fputs("INT64_C(K)", f);
      i += sl;
      continue;
    }
    size_t j = i;
    while (j < n && (t[j] == '_' || (t[j] >= 'a' && t[j] <= 'z') || (t[j] >= 'A' && t[j] <= 'Z') || (t[j] >= '0' && t[j] <= '9'))) j++;
    const char *id = t + i;
    size_t len = j - i, pl = id[0] == 'e' && len > 2 && id[1] == 'p' ? 2 : 1;
    bool digits = len > pl;
    for (size_t q = pl; q < len && digits; q++) digits = id[q] >= '0' && id[q] <= '9';
    bool local = digits && pl == 1 && (id[0] == 'a' || id[0] == 'r' || id[0] == 'p'), callee = digits && (id[0] == 'k' || pl == 2);
    if (local) {
      int k = 0;
      while (k < nloc && !(loclen[k] == len && !strncmp(loc[k], id, len))) k++;
      if (k == nloc && nloc < 512) { loc[nloc] = id; loclen[nloc++] = len; }
      fprintf(f, "L%d", k);
    } else if (callee && len == selflen && !strncmp(id, self, len)) fputs("SELF", f);
    else if (callee && alias_of(al, id, len)) fputs(alias_of(al, id, len), f);
    else fwrite(id, 1, len, f);
    i = j;
  }
  fclose(f);
  return buf;
}

/* Kernels that are the same code (a transformer's layers, a network's repeated blocks): a function
 * whose normalized text (normalize) equals an earlier one's becomes `#define NEW EARLIER`, so that
 * the C compiler compiles each distinct kernel once. Kernels that name their own id (a CUDA kernel's
 * index-error flag) never match another. Returns a malloc'd text. */
static char *dedup_kernels(Ctx *c, const char *k, int *ndup) {
  char *out = NULL;
  size_t olen = 0;
  FILE *f = open_memstream(&out, &olen);
  Seen *seen = NULL;
  int nseen = 0, cap = 0;
  Aliases al = {0};
  *ndup = 0;
  for (const char *l = k; *l;) {
    const char *eol = strchr(l, '\n');
    size_t ll = eol ? (size_t)(eol - l) + 1 : strlen(l);
    const char *name;
    size_t nlen;
    const char *end = fn_head(l, &name, &nlen) ? strstr(l, "\n}\n") : NULL;
    if (!end) { fwrite(l, 1, ll, f); l += ll; continue; }
    end += 3;
    char *norm = normalize(l, (size_t)(end - l), name, nlen, &al, NULL, NULL);
    int hit = -1;
    for (int i = 0; i < nseen && hit < 0; i++) if (!strcmp(seen[i].norm, norm)) hit = i;
    char *nm = arena_printf(c->arena, "%.*s", (int)nlen, name);
    if (hit >= 0) {
      fprintf(f, "#define %s %s   /* the same code */\n", nm, seen[hit].name);
      if (al.n == al.cap) {
        al.cap = al.cap ? 2 * al.cap : 64;
        char **nf = arena_array(c->arena, (size_t)al.cap, sizeof *nf), **nt = arena_array(c->arena, (size_t)al.cap, sizeof *nt);
        if (al.n) { memcpy(nf, al.from, sizeof *nf * (size_t)al.n); memcpy(nt, al.to, sizeof *nt * (size_t)al.n); }
        al.from = nf;
        al.to = nt;
      }
      al.from[al.n] = nm;
      al.to[al.n++] = seen[hit].name;
      free(norm);
      (*ndup)++;
    } else {
      if (nseen == cap) {
        cap = cap ? 2 * cap : 64;
        Seen *ns = arena_array(c->arena, (size_t)cap, sizeof *ns);
        if (nseen) memcpy(ns, seen, sizeof *ns * (size_t)nseen);
        seen = ns;
      }
      seen[nseen++] = (Seen){norm, nm};
      fwrite(l, 1, (size_t)(end - l), f);
    }
    l = end;
  }
  for (int i = 0; i < nseen; i++) free(seen[i].norm);
  fclose(f);
  return out;
}

/* CUDA: the kernels of both programs, each with the comment before it (split_device), and the part
 * (translation unit, fatbinary) that each goes to (cuda_parts) */
typedef struct DevKernels {
  char **text;
  int *id, n, cap;
} DevKernels;

/* CUDA: the kernels' text split in two (after dedup_kernels). Each __global__ kernel goes to the
 * device code (model.cu and its parts), as extern "C" so that the runtime finds it by name in its
 * part's fatbinary; the host file (model.c, plain C) gets, under the same name, a function that
 * launches it by id on the run's stream (gg_cu_launch). Everything else (the functions that call
 * cuBLAS and cuDNN, the aliases of kernels that are the same code) is host code; comments go with
 * what follows them. nvcc then compiles device code only, in parts at once, and the C compiler the
 * host code, with no CUDA header in its translation unit. */
static void split_device(Ctx *c, const char *k, FILE *host, DevKernels *dk) {
  const char *pend = NULL;   /* comment and blank lines waiting for the definition they precede */
  for (const char *l = k; *l;) {
    const char *eol = strchr(l, '\n');
    size_t ll = eol ? (size_t)(eol - l) + 1 : strlen(l);
    const char *name;
    size_t nlen;
    bool fn = fn_head(l, &name, &nlen);
    const char *end = fn ? strstr(l, "\n}\n") : NULL;
    if (!end) {
      if (!pend) pend = l;
      if (strncmp(l, "/*", 2) && strncmp(l, " *", 2) && ll > 1) { fwrite(pend, 1, (size_t)(l + ll - pend), host); pend = NULL; }
      l += ll;
      continue;
    }
    end += 3;
    const char *g = strstr(l, "__global__ ");
    bool device = g && g < name;
    if (!device) {
      if (pend) fwrite(pend, 1, (size_t)(l - pend), host);
      pend = NULL;
      fwrite(l, 1, (size_t)(end - l), host);
      l = end;
      continue;
    }
    int id = atoi(name + 1);
    if (dk->n == dk->cap) {
      dk->cap = dk->cap ? 2 * dk->cap : 64;
      char **nt = arena_array(c->arena, (size_t)dk->cap, sizeof *nt);
      int *ni = arena_array(c->arena, (size_t)dk->cap, sizeof *ni);
      if (dk->n) { memcpy(nt, dk->text, sizeof *nt * (size_t)dk->n); memcpy(ni, dk->id, sizeof *ni * (size_t)dk->n); }
      dk->text = nt;
      dk->id = ni;
    }
    dk->id[dk->n] = id;
    dk->text[dk->n++] = arena_printf(c->arena, "%.*sextern \"C\" __global__ %.*s", pend ? (int)(l - pend) : 0, pend ? pend : "", (int)(end - g - 11), g + 11);
    pend = NULL;
    /* the launcher: the kernel's parameters, each passed by address */
    const char *open = name + nlen, *close = strstr(open, ") {\n");
    fprintf(host, "static void %.*s(unsigned gg_grid, unsigned gg_block, %.*s) {\n  void *gg_a[] = {", (int)nlen, name, (int)(close - open - 1), open + 1);
    int np = 0;
    for (const char *q = open + 1; q < close;) {
      const char *comma = q;
      while (comma < close && *comma != ',') comma++;
      const char *e = comma;
      while (e > q && e[-1] == ' ') e--;
      const char *b = e;
      while (b > q && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') || (b[-1] >= 'A' && b[-1] <= 'Z') || (b[-1] >= '0' && b[-1] <= '9'))) b--;
      fprintf(host, "%s(void *)&%.*s", np++ ? ", " : "", (int)(e - b), b);
      q = comma + 1;
    }
    fprintf(host, "};\n  gg_cu_launch(%d, gg_grid, gg_block, gg_a);\n}\n", id);
    l = end;
  }
  if (pend) fputs(pend, host);
}

/* Kernels that are the same code but for their sizes (DenseNet's layers, whose channels grow; a
 * model's blocks at each resolution): C kernels k<N> whose text differs only in size literals
 * (INT64_C(n), n other than 0 and 1, which keep unit strides and empty offsets visible to the
 * vectorizer) become one function that reads them from an array, `k<R>_k(..., gg_kc)`, and each
 * kernel a macro passing its own sizes: `#define k<N>(...) k<R>_k(__VA_ARGS__, gg_kc_k<N>)`. A
 * kernel alone in its group keeps its constants. Returns a malloc'd text; *nlifted: kernels merged. */
static char *lift_sizes(Ctx *c, const char *k, int *nmerged) {
  typedef struct Item { const char *at; size_t len; char *name; char *norm; int64_t *vals; int nvals; int rep; } Item;
  Item *it = NULL;
  int n = 0, cap = 0;
  Aliases none = {0};
  *nmerged = 0;
  for (const char *l = k; *l;) {   /* the text as items: functions k<N>, and everything else line by line */
    const char *eol = strchr(l, '\n');
    size_t ll = eol ? (size_t)(eol - l) + 1 : strlen(l);
    const char *name;
    size_t nlen;
    const char *end = fn_head(l, &name, &nlen) && name[0] == 'k' ? strstr(l, "\n}\n") : NULL;
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      Item *ni = arena_array(c->arena, (size_t)cap, sizeof *ni);
      if (n) memcpy(ni, it, sizeof *ni * (size_t)n);
      it = ni;
    }
    Item *x = &it[n++];
    *x = (Item){l, end ? (size_t)(end + 3 - l) : ll, NULL, NULL, NULL, 0, -1};
    if (end) {
      x->name = arena_printf(c->arena, "%.*s", (int)nlen, name);
      x->norm = normalize(l, x->len, name, nlen, &none, &x->vals, &x->nvals);
      for (int j = 0; j < n - 1 && x->rep < 0; j++)
        if (it[j].norm && !strcmp(it[j].norm, x->norm)) x->rep = it[j].rep >= 0 ? it[j].rep : j;
      if (x->rep >= 0) { it[x->rep].rep = it[x->rep].rep < 0 ? -2 : it[x->rep].rep; (*nmerged)++; }   /* -2: a representative */
    }
    l += x->len;
  }
  char *out = NULL;
  size_t olen = 0;
  FILE *f = open_memstream(&out, &olen);
  for (int i = 0; i < n; i++) {
    Item *x = &it[i];
    if (!x->norm) { fwrite(x->at, 1, x->len, f); continue; }
    const char *ty = strstr(x->at, "void k") && strstr(x->at, "void k") < strchr(x->at, '(') ? strstr(x->at, "void k") : strstr(x->at, "int k");
    if (x->rep == -1) {   /* kept as it is, never inlined */
      fwrite(x->at, 1, (size_t)(ty - x->at), f);
      fputs("GG_NOINLINE ", f);
      fwrite(ty, 1, x->len - (size_t)(ty - x->at), f);
      continue;
    }
    const char *rep = x->rep == -2 ? x->name : it[x->rep].name;
    if (x->rep == -2) {   /* the shared function: k<N>_k, its sizes read from gg_kc */
      const char *head_end = strstr(x->at, ") {\n"), *nm = strstr(x->at, x->name);
      fwrite(x->at, 1, (size_t)(ty - x->at), f);
      fputs("GG_NOINLINE ", f);
      fwrite(ty, 1, (size_t)(nm - ty) + strlen(x->name), f);
      fputs("_k", f);
      fwrite(nm + strlen(x->name), 1, (size_t)(head_end - nm) - strlen(x->name), f);
      fputs(", const int64_t *restrict gg_kc", f);
      int j = 0;
      for (const char *p = head_end; p < x->at + x->len;) {
        int64_t v;
        size_t sl = size_literal(p, (size_t)(x->at + x->len - p), &v);
        if (sl && v != 0 && v != 1) { fprintf(f, "gg_kc[%d]", j++); p += sl; }
        else fputc(*p++, f);
      }
    }
    fprintf(f, "static const int64_t gg_kc_%s[] = {", x->name);
    for (int j = 0; j < x->nvals; j++) fprintf(f, "%sINT64_C(%lld)", j ? ", " : "", (long long)x->vals[j]);
    fprintf(f, "%s};\n#define %s(...) %s_k(__VA_ARGS__, gg_kc_%s)%s\n", x->nvals ? "" : "0", x->name, rep, x->name,
            x->rep == -2 ? "" : "   /* the same code, other sizes */");
  }
  for (int i = 0; i < n; i++) { free(it[i].norm); free(it[i].vals); }
  fclose(f);
  return out;
}

/* Emit one graph as a program: its kernels, guard (with_guard), output shapes, scratch layout and run
 * function, named gg_<p>_*. Kernels are numbered from kbase so that programs share one file. packs:
 * float32 weights of products may be packed at gg_open (CPU inference). */
/* Gradient buckets (a training model's backward): the gradients in the order they become final, in
 * groups of one dtype of about bucket_bytes each; each gradient is computed into its place in its
 * bucket (or copied there as soon as it is computed, where another node reads it or it is a view of
 * another value), and GG_BUCKET(b) follows the kernel that completes bucket b, so that a data-parallel run
 * can all-reduce the bucket while the backward goes on (docs/distributed.md). */
typedef struct Buckets {
  int n;              /* buckets */
  int *of;            /* bucket of each output (-1: not a gradient) */
  int *left;          /* gradients of each bucket not yet copied out */
  int *ready;         /* the node index after which each output is final (-1: from the start) */
  bool *done;         /* output copied out */
} Buckets;

static void plan_buckets(Ctx *c, Graph *g, int64_t bucket_bytes, Buckets *B) {
  int no = g->noutputs;
  B->of = arena_array(c->arena, (size_t)no + 1, sizeof *B->of);
  B->left = arena_array(c->arena, (size_t)no + 1, sizeof *B->left);
  B->ready = arena_array(c->arena, (size_t)no + 1, sizeof *B->ready);
  B->done = arena_array(c->arena, (size_t)no + 1, sizeof *B->done);
  int *order = arena_array(c->arena, (size_t)no + 1, sizeof *order), n = 0, maxid = 0;
  for (int k = 0; k < g->nnodes; k++) if (g->nodes[k]->id > maxid) maxid = g->nodes[k]->id;
  int *pos = arena_array(c->arena, (size_t)maxid + 1, sizeof *pos);
  for (int k = 0; k < g->nnodes; k++) pos[g->nodes[k]->id] = k;
  for (int i = 0; i < no; i++) {
    B->of[i] = -1;
    B->ready[i] = g->outputs[i].v->def ? pos[g->outputs[i].v->def->id] : -1;
    if (g->outputs[i].kind != OUT_GRAD) continue;
    int j = n++;   /* insertion sort by the node that makes it (stable) */
    while (j > 0 && B->ready[order[j - 1]] > B->ready[i]) { order[j] = order[j - 1]; j--; }
    order[j] = i;
  }
  B->n = 0;
  int64_t have = 0;
  DType dt = DT_F32;
  for (int j = 0; j < n; j++) {
    Value *v = g->outputs[order[j]].v;
    int64_t ne = 1, bytes;
    for (int d = 0; d < v->rank && ne >= 0; d++) {
      int64_t s;
      ne = expr_is_const(v->sizes[d], &s) ? ne * s : -1;
    }
    bytes = ne < 0 ? bucket_bytes : ne * dtype_info(v->dtype)->size;
    if (!B->n || v->dtype != dt || (have > 0 && have + bytes > bucket_bytes)) { B->left[B->n++] = 0; have = 0; dt = v->dtype; }
    B->of[order[j]] = B->n - 1;
    B->left[B->n - 1]++;
    have += bytes;
  }
}

/* Copy out every gradient that is final after node index k (-1: before the first node) and whose value
 * has its storage, unless it was computed in its slot; then GG_BUCKET for each bucket this completes. */
static int copy_final_grads(Em *e, Graph *g, Buckets *B, int k, Value **outs, int *grad_slot) {
  for (int i = 0; i < g->noutputs; i++) {
    if (B->of[i] < 0 || B->done[i] || B->ready[i] > k || !e->tv[g->outputs[i].v->id].ok) continue;
    OutputSpec *o = &g->outputs[i];
    const TV *src = &e->tv[o->v->id];
    bool there = !src->deferred && e->st[src->stor].kind == S_OUTPUT && e->st[src->stor].index == grad_slot[i];
    int64_t off;
    if (there && (!is_contiguous(e, src) || !expr_is_const(src->offset, &off) || off)) {   /* never: a slot's value is contiguous */
      Node fake = {.name = o->v->name, .target = "output"};
      return efail(e, &fake, "gradient computed into its slot in another layout (internal error)");
    }
    if (!there) {   /* else computed there */
      int sd = new_stor(e, S_OUTPUT, grad_slot[i], o->v->dtype, C(e, 1));
      TV dst;
      contiguous_tv(e, &dst, sd, o->v->dtype, o->v->rank, o->v->sizes);
      Node fake = {.name = o->v->name, .target = "output"};
      copy_kernel(e, &fake, &dst, src);
    }
    outs[grad_slot[i]] = o->v;
    B->done[i] = true;
    if (!--B->left[B->of[i]]) fprintf(e->r, "  GG_BUCKET(%d);\n", B->of[i]);
  }
  return 0;
}

static int emit_program(Ctx *c, Graph *g, const Schedule *S, const char *p, int kbase, bool with_guard, bool packs, int64_t bucket_bytes, FILE *out,
                        DevKernels *dev, Prog *P) {
  Em E = {0}, *e = &E;
  int krec0 = c->nkernels;   /* this program's first kernel record */
  e->c = c;
  e->g = g;
  e->a = c->arena;
  e->s = S;
  e->nk = kbase;
  e->tv = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *e->tv);
  e->cuda = c->cuda;
  e->t = c->cuda ? &gg_target_cuda : &gg_target_c;
  e->d = &gg_dialect_c;
  char *kbuf = NULL, *rbuf = NULL, *ebuf = NULL;
  size_t klen = 0, rlen = 0, elen = 0;
  e->errs = open_memstream(&ebuf, &elen);
  e->k = open_memstream(&kbuf, &klen);
  e->r = open_memstream(&rbuf, &rlen);
  Value **users;
  int nusers = graph_user_inputs(g, &users);
  /* graph inputs: user inputs and weights have storage already */
  int nweights = 0, nmut = 0;
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    const Expr *one = C(e, 1);
    int s = v->input == IN_USER ? new_stor(e, S_INPUT, v->user_index, v->dtype, one) : new_stor(e, S_WEIGHT, nweights++, v->dtype, one);
    contiguous_tv(e, &e->tv[v->id], s, v->dtype, v->rank, v->sizes);
    if (v->weight && v->input != IN_USER) {
      /* a stored weight may itself be a strided view of its storage */
      TV *t = &e->tv[v->id];
      t->offset = C(e, v->weight->offset);
      for (int d = 0; d < v->rank; d++) t->strides[d] = C(e, v->weight->strides[d]);
    }
  }
  e->pack_ok = packs && !c->cuda;
  e->mutated = arena_array(c->arena, (size_t)nweights + 1, sizeof *e->mutated);
  for (int i = 0; i < g->noutputs; i++) {
    int w = g->outputs[i].kind == OUT_BUFFER_MUTATION ? mutated_weight(g, &g->outputs[i]) : -1;
    if (w >= 0) e->mutated[w] = true;
  }
  int rc = 0;
  /* GCC_GRAPH_PROFILE: a clock tick after each node that ran code gives that node's time */
  const char **prof = arena_array(c->arena, (size_t)g->nnodes + 2, sizeof *prof);
  int nprof = 0;
  fputs("  GG_TICK(NULL);\n", e->r);
  /* outputs in order (user outputs, then saved values or gradients): gradients go out as soon as final */
  Value **outs = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *outs);
  int *slot = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *slot), nouts = 0;
  for (int i = 0; i < g->noutputs; i++) {
    int kd = g->outputs[i].kind;
    slot[i] = kd == OUT_USER || kd == OUT_SAVED || kd == OUT_GRAD ? nouts++ : -1;
  }
  /* a saved value is computed straight into its slot (the state's buffer), where no other output
   * took that value first; so is a gradient that no node reads (its slot is in its bucket, which a
   * data-parallel run all-reduces once the bucket is final: nothing may read it after) */
  e->saved_slot = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *e->saved_slot);
  for (int i = 0; i <= g->nvalues; i++) e->saved_slot[i] = -1;
  for (int i = g->noutputs - 1; i >= 0; i--) {
    Value *v = g->outputs[i].v;
    bool into = g->outputs[i].kind == OUT_SAVED || (g->outputs[i].kind == OUT_GRAD && v->def && S->uses[v->id] == 2);
    if (slot[i] < 0) continue;
    e->saved_slot[v->id] = into ? slot[i] : -1;
    /* a gradient that reshapes a value read only there (a bias's sum kept 2-D): that value in the slot */
    Value *u = into && g->outputs[i].kind == OUT_GRAD && v->def->op && view_is_reshape(v->def->op) ? v->def->args[0].u.t : NULL;
    if (u && u->def && S->uses[u->id] == 1) e->saved_slot[u->id] = slot[i];
  }
  Buckets B = {0};
  plan_buckets(c, g, bucket_bytes, &B);
  rc = copy_final_grads(e, g, &B, -1, outs, slot);
  for (int k = 0; k < g->nnodes && !rc; k++) {
    Node *n = g->nodes[k];
    fflush(e->r);
    long before = ftell(e->r);
    if (!n->op) rc = gg_error(c, "%s: node %s: op %s is not supported", g->path, gg_quote(c, n->name), gg_quote(c, n->target));
    else rc = n->op->emit(e, n);
    if (!rc) rc = copy_final_grads(e, g, &B, k, outs, slot);
    fflush(e->r);
    if (!rc && ftell(e->r) != before) {
      fprintf(e->r, "  GG_TICK(&gg_%s_prof[%d]);\n", p, nprof);
      prof[nprof++] = arena_printf(c->arena, "%s (%s)", n->name, n->op->name);
    }
  }
  if (!rc) rc = copy_final_grads(e, g, &B, g->nnodes, outs, slot);
  /* the other outputs (user outputs, saved values) are copied out of their views at the end */
  for (int i = 0; !rc && i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (slot[i] < 0 || B.done[i]) continue;
    TV *src = &e->tv[o->v->id];
    if (!src->ok) { rc = gg_error(c, "%s: output %s has no storage (internal error)", g->path, gg_quote(c, o->v->name)); break; }
    if (!src->deferred && e->st[src->stor].kind == S_OUTPUT && e->st[src->stor].index == slot[i]) { outs[slot[i]] = o->v; continue; }   /* computed there */
    int sd = new_stor(e, S_OUTPUT, slot[i], o->v->dtype, C(e, 1));
    TV dst;
    contiguous_tv(e, &dst, sd, o->v->dtype, o->v->rank, o->v->sizes);
    Node fake = {.name = o->v->name, .target = "output"};
    copy_kernel(e, &fake, &dst, src);
    outs[slot[i]] = o->v;
  }
  /* mutated buffers: their new values go back into the model's copies */
  int *mut_of = arena_array(c->arena, (size_t)nweights + 1, sizeof *mut_of);
  for (int i = 0; i < nweights; i++) mut_of[i] = -1;
  Value **mut_vals = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *mut_vals);
  int *mut_w = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *mut_w);
  for (int i = 0; !rc && i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind != OUT_BUFFER_MUTATION) continue;
    int w = mutated_weight(g, o);
    if (w < 0) { rc = gg_error(c, "%s: mutated buffer %s is not an input", g->path, gg_quote(c, o->target_name)); break; }
    mut_of[w] = nmut;
    mut_w[nmut] = w;
    mut_vals[nmut] = o->v;
    TV dst;
    int sd = new_stor(e, S_MUT, nmut, o->v->dtype, C(e, 1));
    contiguous_tv(e, &dst, sd, o->v->dtype, o->v->rank, o->v->sizes);
    Node fake = {.name = o->target_name, .target = "buffer update"};
    copy_kernel(e, &fake, &dst, &e->tv[o->v->id]);
    nmut++;
  }
  fprintf(e->r, "  GG_TICK(&gg_%s_prof[%d]);\n", p, nprof);
  prof[nprof++] = "outputs and buffer updates (copies)";
  fclose(e->k);
  fclose(e->r);
  fclose(e->errs);
  char *errs = arena_strdup(c->arena, ebuf);
  free(ebuf);
  if (rc) { free(kbuf); free(rbuf); return -1; }
  int64_t planned = plan_memory(e);
  if (c->record) {   /* the schedule: each fused node under the kernel of the node it feeds (transitively) */
    c->scratch_naive += e->scratch_naive;
    c->scratch_planned += e->scratch_planned;
    /* by node id: the first kernel record of the node (linear: models of thousands of kernels) */
    int *rec = arena_array(c->arena, (size_t)g->nnodes + 1, sizeof *rec), *nf = arena_array(c->arena, (size_t)c->nkernels + 1, sizeof *nf);
    for (int k = 0; k < g->nnodes; k++) rec[k] = -1;
    for (int r = c->nkernels - 1; r >= krec0; r--)
      if (c->kernels[r].n && c->kernels[r].n->id >= 0 && c->kernels[r].n->id < g->nnodes && g->nodes[c->kernels[r].n->id] == c->kernels[r].n) rec[c->kernels[r].n->id] = r;
    for (int pass = 0; pass < 2; pass++) {   /* 0: count each kernel's fused nodes, 1: list them */
      for (int r = krec0; pass && r < c->nkernels; r++) {
        if (!nf[r]) continue;
        KernelRec *kr = &c->kernels[r];
        const Node **f = arena_array(c->arena, (size_t)(kr->nfused + nf[r]) + 1, sizeof *f);
        if (kr->nfused) memcpy(f, kr->fused, sizeof *f * (size_t)kr->nfused);
        kr->fused = f;
      }
      for (int k = 0; k < g->nnodes; k++) {
        Node *n = g->nodes[k];
        if (S->role[n->id] == SN_KERNEL) continue;
        int r = rec[sched_kernel_of(S, n)->id];
        if (r < 0) continue;
        if (!pass) nf[r]++;
        else c->kernels[r].fused[c->kernels[r].nfused++] = n;
      }
    }
    for (int k = 0; k < S->nrefused; k++) {
      if (c->nrefused == c->cap_refused) {
        c->cap_refused = c->cap_refused ? 2 * c->cap_refused : 64;
        Refusal *r = arena_array(c->arena, (size_t)c->cap_refused, sizeof *r);
        if (c->nrefused) memcpy(r, c->refused, sizeof *r * (size_t)c->nrefused);
        c->refused = r;
      }
      c->refused[c->nrefused++] = S->refused[k];
    }
    int *mark = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *mark);
    for (int r = krec0; r < c->nkernels; r++) {
      /* a node's second kernel (CUDA: a product's epilogue, a pass over its output) */
      const Node *kn = c->kernels[r].n;
      bool again = kn && kn->id >= 0 && kn->id < g->nnodes && g->nodes[kn->id] == kn && rec[kn->id] != r;
      if (again) kernel_pass_stats(e, &c->kernels[r]);
      else kernel_stats(e, &c->kernels[r], mark, r - krec0 + 1);
    }
  }
  fprintf(out, "\n/* GCC_GRAPH_PROFILE: the time of each node's kernels. */\nstatic double gg_%s_prof[%d];\nstatic const char *const gg_%s_prof_names[] = {\n", p, nprof, p);
  for (int i = 0; i < nprof; i++) { fputs("  ", out); emit_c_string(out, prof[i]); fputs(",\n", out); }
  fputs("};\n", out);
  P->nprof = nprof;
  *P = (Prog){outs, nouts, mut_vals, mut_w, mut_of, nmut, nweights, e->nk, S->nfused, g->nnodes, e->scratch_planned, e->scratch_naive, nprof, errs,
              e->npacks, e->packs, B.n, arena_array(c->arena, (size_t)nouts + 1, sizeof(int)), e->random,
              /* lifetimes of the inputs and outputs, for the runtime's block of saved values and gradients */
              arena_array(c->arena, (size_t)nusers + 1, sizeof(int)), arena_array(c->arena, (size_t)nouts + 1, sizeof(int))};
  for (int i = 0; i < g->noutputs; i++) if (slot[i] >= 0) P->bucket[slot[i]] = B.of[i];
  for (int i = 0; i < nusers; i++) P->in_last[i] = -1;
  for (int i = 0; i < nouts; i++) P->out_first[i] = e->nk;
  for (int i = 0; i < e->nst; i++) {
    const Stor *st = &e->st[i];
    if (st->kind == S_INPUT && st->index < nusers && st->last > P->in_last[st->index]) P->in_last[st->index] = st->last;
    if (st->kind == S_OUTPUT && st->index < nouts && st->first < P->out_first[st->index]) P->out_first[st->index] = st->first;
  }
  int ndup, nlift = 0;
  char *kd = dedup_kernels(c, kbuf, &ndup);
  if (ndup) gg_log(c, LOG_OUTPUT_CODE, "%d kernels are the same code as an earlier one: compiled once", ndup);
  if (!c->cuda) {
    char *kl = lift_sizes(c, kd, &nlift);
    free(kd);
    kd = kl;
    if (nlift) gg_log(c, LOG_OUTPUT_CODE, "%d kernels are the same code as an earlier one but for their sizes: compiled once, sizes passed", nlift);
  }
  if (dev) split_device(c, kd, out, dev);
  else fputs(kd, out);
  free(kd);
  /* guard, shapes, scratch, run */
  FILE *save = e->k;
  e->k = out;
  if (with_guard) emit_guard(e, users, nusers);
  emit_output_shape(e, p, outs, nouts);
  e->k = save;
  int nscratch = 0;
  if (planned >= 0) {
    fprintf(out, "\n/* Scratch: %lld bytes; intermediates whose lifetimes do not overlap share memory. */\n", (long long)planned);
    fprintf(out, "static int64_t gg_%s_scratch_layout(const int64_t *s, int64_t *off) {\n  (void)s; (void)off;\n", p);
    for (int i = 0; i < e->nst; i++) {
      if (e->st[i].kind != S_SCRATCH) continue;
      fprintf(out, "  off[%d] = INT64_C(%lld);\n", nscratch, (long long)e->st[i].offset);
      e->st[i].index = nscratch++;
    }
    fprintf(out, "  return INT64_C(%lld);\n}\n", (long long)planned);
  } else {
    fputs("\n/* Scratch: every intermediate tensor at its offset, 64-byte aligned (symbolic sizes: no reuse). */\n", out);
    fputs("#ifndef GG_A\n#define GG_A(n) (((n) + INT64_C(63)) & ~INT64_C(63))\n#endif\n", out);
    fprintf(out, "static int64_t gg_%s_scratch_layout(const int64_t *s, int64_t *off) {\n  (void)s;\n  int64_t at = 0;\n", p);
    for (int i = 0; i < e->nst; i++) {
      if (e->st[i].kind != S_SCRATCH) continue;
      fprintf(out, "  off[%d] = at; at += GG_A(%s * %d);\n", nscratch, cx(e, e->st[i].nelem), dtype_info(e->st[i].dt)->size);
      e->st[i].index = nscratch++;
    }
    fputs("  return at;\n}\n", out);
  }
  fprintf(out, "\nstatic int64_t gg_%s_scratch_bytes(const int64_t *s) { int64_t off[%d]; return gg_%s_scratch_layout(s, off); }\n", p, nscratch + 1, p);
  fprintf(out, "\nGG_RUNFN static const char *gg_%s_run(void *const *w, void *const *mut, const DLTensor *in, void *const *out, unsigned char *scratch, const int64_t *s) {\n", p);
  fputs("  (void)w; (void)mut; (void)in; (void)out; (void)scratch;\n", out);
  fputs(e->t->run_start, out);
  fprintf(out, "  int64_t off[%d];\n  gg_%s_scratch_layout(s, off);\n", nscratch + 1, p);
  for (int i = 0; i < e->nst; i++) {
    const Stor *st = &e->st[i];
    const char *T = ctype(st->dt);
    if (st->kind == S_SCRATCH) fprintf(out, "  %s *t%d = (%s *)(scratch + off[%d]);\n", T, i, T, st->index);
    else if (st->kind == S_WEIGHT) fprintf(out, "  %s *w%d = (%s *)w[%d]; (void)w%d;\n", T, st->index, T, st->index, st->index);
    else if (st->kind == S_INPUT) fprintf(out, "  const %s *in%d = (const %s *)((const char *)in[%d].data + in[%d].byte_offset);\n", T, st->index, T, st->index, st->index);
    else if (st->kind == S_OUTPUT) fprintf(out, "  %s *out%d = (%s *)out[%d];\n", T, st->index, T, st->index);
    else fprintf(out, "  %s *mut%d = (%s *)mut[%d];\n", T, st->index, T, st->index);
  }
  for (int j = 0; j < e->npacks; j++) fprintf(out, "  const float *pk%d = (const float *)w[%d];\n", j, nweights + j);
  fputs(rbuf, out);
  fputs("  return NULL;\n}\n", out);
  free(kbuf);
  free(rbuf);
  return 0;
}

static void dtype_list(FILE *out, const char *name, Value **v, int n) {
  fprintf(out, "static const DLDataType %s[] = {", name);
  for (int i = 0; i < n; i++) fprintf(out, "%s%s", i ? ", " : "", dl_dtype(v[i]->dtype));
  fputs(n ? "};\n" : "{0, 0, 0}};\n", out);
}

static void ndim_list(FILE *out, const char *name, Value **v, int n) {
  fprintf(out, "static const int %s[] = {", name);
  for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", v[i]->rank);
  fputs(n ? "};\n" : "0};\n", out);
}

/* Write the model's C file: the forward program (the model itself), and for a training model (bwd
 * not NULL) the backward program, then the descriptors the runtime reads. weight_offsets[i]: where
 * weight i's bytes are (in the blob or the file). */
#define CUDA_PART_KERNELS 12
#define CUDA_MAX_PARTS 8

int emit_model(Ctx *c, Graph *g, const Schedule *sf, Graph *bwd, const Schedule *sb, const TrainOptions *tr, FILE *out, FILE *dev, const char *metadata,
               const int64_t *weight_offsets, int64_t blob_size, bool appended, bool external, int64_t external_size) {
  char *fbuf = NULL, *bbuf = NULL;
  size_t flen = 0, blen = 0;
  FILE *ff = open_memstream(&fbuf, &flen);
  Prog F, B = {0};
  DevKernels dk = {0}, *df = c->cuda ? &dk : NULL;   /* the kernels of both programs */
  int rc = emit_program(c, g, sf, "m", 0, true, !bwd, 0, ff, df, &F);
  fclose(ff);
  if (!rc && bwd) {
    FILE *bf = open_memstream(&bbuf, &blen);
    rc = emit_program(c, bwd, sb, "b", F.nk, false, false, (int64_t)((tr->bucket_mb > 0 ? tr->bucket_mb : 25) * 1048576.0), bf, df, &B);
    fclose(bf);
  }
  if (rc) { free(fbuf); free(bbuf); return -1; }
  Value **users;
  int nusers = graph_user_inputs(g, &users), nuser_out = 0;
  for (int i = 0; i < g->noutputs; i++) nuser_out += g->outputs[i].kind == OUT_USER;
  fprintf(out, "/* Generated by gcc-graph %s. Do not edit: recompile the model instead.\n", GG_VERSION);
  fprintf(out, " * %d nodes, %d kernels; %d pointwise nodes computed inside another kernel's loop.\n", F.nnodes, F.nk, F.nfused);
  if (F.planned > 0) fprintf(out, " * Scratch: %lld bytes with reuse, %lld without.\n", (long long)F.planned, (long long)F.naive);
  if (bwd) {
    fprintf(out, " * Backward: %d nodes, %d kernels; %d pointwise nodes fused; %d values saved by the forward.\n", B.nnodes, B.nk - F.nk, B.nfused, F.nouts - nuser_out);
    if (B.planned > 0) fprintf(out, " * Backward scratch: %lld bytes with reuse, %lld without.\n", (long long)B.planned, (long long)B.naive);
  }
  fputs(" */\n", out);
  const Target *t = c->cuda ? &gg_target_cuda : &gg_target_c;
  t->prelude(g, out);
  fputs("GG_HD int64_t gg_d2i(double v) { return v > -9.2e18 && v < 9.2e18 ? (int64_t)v : INT64_MIN; }\n", out);
  fputs("GG_HD uint16_t gg_d2h(double v) { return gg_f2h((float)v); }\n", out);
  /* CUDA: the kernels in parts of at least CUDA_PART_KERNELS each, as many as -j leaves processes
   * beside the host code's (a part costs nvcc half a second to start on a slow core), so that nvcc
   * compiles them at once; each goes to the part with the fewest bytes so far. The parts follow each
   * other in dev, each after a line GG_PART_MARK (build_sources writes them to model.cu, model_1.cu,
   * ...). The code is the same whatever the split; the .so's bytes are not (give -j for those). */
  int nkern = bwd ? B.nk : F.nk, nparts = 1, *part_of = arena_array(c->arena, (size_t)nkern + 1, sizeof *part_of);
  for (int i = 0; i < nkern; i++) part_of[i] = -1;
  if (dev) {
    nparts = (dk.n + CUDA_PART_KERNELS - 1) / CUDA_PART_KERNELS;
    int most = c->jobs - 1 < CUDA_MAX_PARTS ? c->jobs - 1 : CUDA_MAX_PARTS;
    nparts = nparts > most ? most : nparts;
    nparts = nparts < 1 ? 1 : nparts;
    size_t *bytes = arena_array(c->arena, (size_t)nparts, sizeof *bytes);
    for (int i = 0; i < dk.n; i++) {
      int best = 0;
      for (int q = 1; q < nparts; q++) if (bytes[q] < bytes[best]) best = q;
      part_of[dk.id[i]] = best;
      bytes[best] += strlen(dk.text[i]);
    }
    for (int q = 0; q < nparts; q++) {
      if (q) fputs(GG_PART_MARK "\n", dev);
      fprintf(dev, "/* Generated by gcc-graph %s: kernels of the model, part %d of %d (model.c launches them). Do not edit. */\n", GG_VERSION, q + 1, nparts);
      t->device_prelude(g, dev);
      fputs("GG_HD int64_t gg_d2i(double v) { return v > -9.2e18 && v < 9.2e18 ? (int64_t)v : INT64_MIN; }\n", dev);
      fputs("GG_HD uint16_t gg_d2h(double v) { return gg_f2h((float)v); }\n", dev);
      for (int i = 0; i < dk.n; i++) if (part_of[dk.id[i]] == q) fputs(dk.text[i], dev);
    }
  }
  fputs("\nconst char gg__metadata[] =\n  ", out);
  emit_c_string(out, metadata);
  fputs(";\n", out);
  fputs("\nstatic const char *const gg_input_names[] = {", out);
  for (int i = 0; i < nusers; i++) { fputs(i ? ", " : "", out); emit_c_string(out, users[i]->name); }
  fputs(nusers ? "};\n" : "NULL};\n", out);
  if (!external && !appended && blob_size > 0) {
    fputs("\n/* The weights, from weights.bin, aligned for vector loads. */\n", out);
    fputs("__asm__(\".section .rodata\\n.balign 64\\n.type gg_blob, @object\\ngg_blob:\\n.incbin \\\"weights.bin\\\"\\n.byte 0\\n.previous\\n\");\n", out);
    fputs("extern const unsigned char gg_blob[];\n", out);
  }
  fputs(fbuf, out);
  if (bbuf) { fputs("\n/* ================================================================ the backward */\n", out); fputs(bbuf, out); }
  free(fbuf);
  free(bbuf);
  t->finish(out, B.errs ? arena_printf(c->arena, "%s%s", F.errs, B.errs) : F.errs);   /* kernel ids run on through the backward */
  if (c->cuda) {   /* the runtime loads each part's fatbinary, and kernel k<id> from its part */
    fputs("\n/* the fatbinaries of model.cu's parts (nvcc -fatbin; kernels.c includes them), and the part of each kernel id */\nextern const unsigned char", out);
    for (int q = 0; q < nparts; q++) fprintf(out, "%s gg_kernels%d[]", q ? "," : "", q);
    fputs(";\nstatic const unsigned char *const gg_kernel_parts[] = {", out);
    for (int q = 0; q < nparts; q++) fprintf(out, "%sgg_kernels%d", q ? ", " : "", q);
    fputs("};\nstatic const int gg_kernel_part[] = {", out);
    for (int i = 0; i < nkern; i++) fprintf(out, "%s%s%d", i ? "," : "", i % 32 ? " " : "\n  ", part_of[i]);
    fputs(nkern ? "\n};\n" : "-1};\n", out);
  }
  /* the descriptor */
  int nweights = F.nweights, nmut = F.nmut;
  Value **wv = arena_array(c->arena, (size_t)nweights + 1, sizeof *wv);
  for (int i = 0, k = 0; i < g->ninputs; i++) if (g->inputs[i]->input != IN_USER) wv[k++] = g->inputs[i];
  fputs("\nstatic const gg_weight_desc gg_weights[] = {\n", out);
  for (int i = 0; i < nweights; i++) {
    Value *v = wv[i];
    int64_t nb = v->weight ? (int64_t)v->weight->nbytes : 0;
    fputs("  {", out);
    emit_c_string(out, v->fqn ? v->fqn : v->name);
    fprintf(out, ", INT64_C(%lld), INT64_C(%lld), %d},\n", (long long)weight_offsets[i], (long long)nb, F.mut_of[i]);
  }
  fputs(nweights ? "};\n" : "  {NULL, 0, 0, -1}};\n", out);
  dtype_list(out, "gg_out_dtypes", F.outs, F.nouts);
  ndim_list(out, "gg_out_ndims", F.outs, F.nouts);
  fputs("static const int gg_mut_weight[] = {", out);
  for (int i = 0; i < nmut; i++) fprintf(out, "%s%d", i ? ", " : "", F.mut_w[i]);
  fputs(nmut ? "};\n" : "-1};\n", out);
  dtype_list(out, "gg_mut_dtypes", F.mut_vals, nmut);
  ndim_list(out, "gg_mut_ndims", F.mut_vals, nmut);
  fputs("static const int64_t gg_mut_shapes[] = {", out);
  for (int i = 0; i < nmut; i++)
    for (int d = 0; d < GG_MAX_RANK; d++) {
      int64_t v = 0;
      if (d < F.mut_vals[i]->rank) expr_is_const(F.mut_vals[i]->sizes[d], &v);
      fprintf(out, "%s%lld", i || d ? ", " : "", (long long)v);
    }
  fputs(nmut ? "};\n" : "0};\n", out);
  if (F.npacks) {
    fputs("\n/* Weights packed at gg_open for the runtime's product kernels (gg_rt_pack_weight): weight, side, offset, rows, cols, strides. */\n", out);
    fputs("static const gg_pack_desc gg_packs[] = {\n", out);
    for (int j = 0; j < F.npacks; j++) {
      const PackDesc *d = &F.packs[j];
      fprintf(out, "  {%d, %d, INT64_C(%lld), INT64_C(%lld), INT64_C(%lld), INT64_C(%lld), INT64_C(%lld)},\n", d->weight, d->side, (long long)d->offset,
              (long long)d->rows, (long long)d->cols, (long long)d->srow, (long long)d->scol);
    }
    fputs("};\n", out);
  }
  fprintf(out, "\nconst gg_model_desc gg__desc = {\n  %d, %d, %d, %d, %d,\n  gg_input_names, gg_out_dtypes, gg_out_ndims, gg_weights,\n", nusers, nuser_out, g->nsyms,
          nweights, nmut);
  fprintf(out, "  %s, INT64_C(%lld), INT64_C(%lld),\n", !external && !appended && blob_size > 0 ? "gg_blob" : "NULL", (long long)blob_size, (long long)external_size);
  fputs("  gg_mut_weight, gg_mut_dtypes, gg_mut_ndims, gg_mut_shapes,\n  gg_m_guard, gg_m_output_shape, gg_m_scratch_bytes, gg_m_run,\n", out);
  fprintf(out, "  %d, gg_m_prof, gg_m_prof_names,\n  %s, %s, %d, %s, %d, %s,\n  %d, %s,\n  %d,\n};\n", F.nprof, t->device_code, c->cuda ? "gg_kernel_parts" : "NULL",
          c->cuda ? nparts : 0, c->cuda ? "gg_kernel_part" : "NULL", c->cuda ? nkern : 0, c->cuda ? "gg_m_error" : "NULL", F.npacks, F.npacks ? "gg_packs" : "NULL",
          F.random || (bwd && B.random));
  /* training: the backward's gradients (by weight index; -1 for a user input's) and the optimizer */
  fputs("\n/* Training: the backward program and the optimizer (none for an inference model). */\n", out);
  if (!bwd) {
    fputs("const gg_train_desc gg__train = {0};\n", out);
    return 0;
  }
  fputs("static const int gg_grad_weight[] = {", out);
  for (int i = 0; i < B.nouts; i++) {
    int w = -1;
    for (int k = 0; k < nweights; k++) if (wv[k]->fqn && bwd->outputs[i].target_name && !strcmp(wv[k]->fqn, bwd->outputs[i].target_name)) w = k;
    fprintf(out, "%s%d", i ? ", " : "", w);
  }
  fputs(B.nouts ? "};\n" : "-1};\n", out);
  fputs("static const char *const gg_grad_names[] = {", out);
  for (int i = 0; i < B.nouts; i++) { fputs(i ? ", " : "", out); emit_c_string(out, bwd->outputs[i].target_name); }
  fputs(B.nouts ? "};\n" : "NULL};\n", out);
  dtype_list(out, "gg_grad_dtypes", B.outs, B.nouts);
  ndim_list(out, "gg_grad_ndims", B.outs, B.nouts);
  fputs("static const int gg_grad_bucket[] = {", out);
  for (int i = 0; i < B.nouts; i++) fprintf(out, "%s%d", i ? ", " : "", B.bucket[i]);
  fputs(B.nouts ? "};\n" : "-1};\n", out);
  /* the lifetimes that let saved values and gradient buckets share one block (gg_rt_common.c): the
   * backward's last kernel reading each saved value, and its first kernel writing into each bucket */
  int nsaved = F.nouts - nuser_out;
  fputs("static const int gg_saved_last[] = {", out);
  for (int k = 0; k < nsaved; k++) fprintf(out, "%s%d", k ? ", " : "", B.in_last[k]);
  fputs(nsaved ? "};\n" : "-1};\n", out);
  fputs("static const int gg_bucket_first[] = {", out);
  for (int b = 0; b < B.nbuckets; b++) {
    int first = INT32_MAX;
    for (int i = 0; i < B.nouts; i++) if (B.bucket[i] == b && B.out_first[i] < first) first = B.out_first[i];
    fprintf(out, "%s%d", b ? ", " : "", first);
  }
  fputs(B.nbuckets ? "};\n" : "-1};\n", out);
  Value *tan = bwd->inputs[bwd->ninputs - 1];
  fprintf(out, "const gg_train_desc gg__train = {\n  %d, %d, gg_grad_weight, gg_grad_names, gg_grad_dtypes, gg_grad_ndims,\n", F.nouts - nuser_out, B.nouts);
  fprintf(out, "  %s, %d, gg_b_output_shape, gg_b_scratch_bytes, gg_b_run,\n", dl_dtype(tan->dtype), tan->rank);
  fprintf(out, "  %d, %.17g, %.17g, %.17g, %.17g, %.17g, %.17g,\n", tr->optimizer, tr->lr, tr->momentum, tr->weight_decay, tr->beta1, tr->beta2, tr->eps);
  fprintf(out, "  %d, gg_b_prof, gg_b_prof_names,\n  %d, gg_grad_bucket, gg_saved_last, gg_bucket_first,\n};\n", B.nprof, B.nbuckets);
  return 0;
}
