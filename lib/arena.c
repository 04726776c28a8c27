/* arena.c: the per-compilation arena, and diagnostics.
 * Requires nothing. Guarantees: every allocation is zeroed and lives until arena_free; an allocation
 * that cannot be satisfied aborts with a message (a size from a model is checked before it gets here). */
#include "gg.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Block { struct Block *next; size_t used, cap; max_align_t data[]; } Block;
struct Arena { Block *head; };

Arena *arena_new(void) {
  Arena *a = calloc(1, sizeof *a);
  if (!a) { fputs("gcc-graph: out of memory\n", stderr); exit(1); }
  return a;
}

void arena_free(Arena *a) {
  if (!a) return;
  for (Block *b = a->head, *n; b; b = n) { n = b->next; free(b); }
  free(a);
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Block *b = a->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > (1u << 16) ? n : (1u << 16);
    b = calloc(1, sizeof(Block) + cap);
    if (!b) { fputs("gcc-graph: out of memory\n", stderr); exit(1); }
    b->cap = cap;
    /* Big blocks go behind the head so that the head keeps serving small allocations. */
    if (a->head && n > (1u << 15)) { b->next = a->head->next; a->head->next = b; }
    else { b->next = a->head; a->head = b; }
  }
  void *p = (char *)b->data + b->used;
  b->used += n;
  return p;
}

void *arena_array(Arena *a, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size / 2) { fputs("gcc-graph: allocation too large\n", stderr); exit(1); }
  return arena_alloc(a, (n * size) != 0 ? n * size : 1);
}

char *arena_strdup(Arena *a, const char *s) {
  size_t n = strlen(s);
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  return p;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

Ctx *ctx_new(void) {
  Ctx *c = calloc(1, sizeof *c);
  if (!c) { fputs("gcc-graph: out of memory\n", stderr); exit(1); }
  c->arena = arena_new();
  const char *logs = getenv("GCC_GRAPH_LOGS");   /* checked once by the driver; here, unknown names are ignored */
  if (logs && gg_logs_parse(c, logs)) { c->has_err = false; c->err[0] = 0; }
  return c;
}

void ctx_free(Ctx *c) {
  if (!c) return;
  arena_free(c->arena);
  free(c);
}

int gg_error(Ctx *c, const char *fmt, ...) {
  if (c->has_err) return -1;   /* the first error is the one that explains the rest */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  c->has_err = true;
  return -1;
}

/* ---------------------------------------------------------------- logs */

static const struct { const char *name; unsigned bit; } log_names[] = {
  {"functionalize", LOG_FUNCTIONALIZE}, {"decomp", LOG_DECOMP}, {"autograd", LOG_AUTOGRAD}, {"partition", LOG_PARTITION},
  {"fusion", LOG_FUSION}, {"schedule", LOG_SCHEDULE}, {"memory", LOG_MEMORY}, {"guards", LOG_GUARDS},
  {"output_code", LOG_OUTPUT_CODE}, {"cache", LOG_CACHE},
};

int gg_logs_parse(Ctx *c, const char *spec) {
  c->logs = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec ? spec : "");
  for (char *t = strtok(buf, ", "); t; t = strtok(NULL, ", ")) {
    if (*t == '+') t++;
    if (!strcmp(t, "all")) { c->logs = ~0u; continue; }
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof log_names / sizeof *log_names; i++)
      if (!strcmp(log_names[i].name, t)) bit = log_names[i].bit;
    if (!bit) {
      char known[256] = "";
      for (size_t i = 0; i < sizeof log_names / sizeof *log_names; i++) { strcat(known, log_names[i].name); strcat(known, ", "); }
      return gg_error(c, "GCC_GRAPH_LOGS: unknown category '%s' (known: %sall)", t, known);
    }
    c->logs |= bit;
  }
  return 0;
}

void gg_log(Ctx *c, unsigned cat, const char *fmt, ...) {
  if (!(c->logs & cat)) return;
  const char *name = "log";
  for (size_t i = 0; i < sizeof log_names / sizeof *log_names; i++)
    if (log_names[i].bit == cat) name = log_names[i].name;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s] %s\n", name, line);
}

const char *gg_quote(Ctx *c, const char *s) {
  if (!s) return "(null)";
  size_t n = strlen(s);
  if (n > 200) n = 200;           /* a name in a message needs no more */
  char *out = arena_alloc(c->arena, n * 4 + 8), *o = out;
  *o++ = '\'';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '\'' || ch == '\\') { *o++ = '\\'; *o++ = (char)ch; }
    else if (ch == '\n') { *o++ = '\\'; *o++ = 'n'; }
    else if (ch < 32 || ch == 127) o += sprintf(o, "\\x%02x", ch);
    else *o++ = (char)ch;
  }
  if (strlen(s) > n) { memcpy(o, "...", 3); o += 3; }
  *o++ = '\'';
  *o = 0;
  return out;
}
