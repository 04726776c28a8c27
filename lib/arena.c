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
