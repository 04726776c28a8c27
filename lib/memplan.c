/* memplan.c: where each intermediate tensor lives in the run's scratch arena.
 * Requires: the scratch buffers of one program, each with its size and lifetime (the first kernel
 * that writes it, the last that reads it) and, for a pointwise kernel's output, the input it may be
 * written in place of: one of the same size that the kernel reads only at the index it writes
 * (decided on layouts by the emitter, layout_same) and that dies there. Guarantees: offsets, 64-byte
 * aligned, such that no two buffers alive at the same time overlap; a buffer written in place shares
 * its input's offset (the two placed as one, living from the input's first kernel to the output's
 * last, so nothing else takes the memory between them). Largest first, ties in creation order, so
 * the plan is deterministic. */
#include "gg.h"

int64_t memplan(Ctx *c, MemBuf *b, int n, int64_t *naive_out) {
  Arena *a = c->arena;
  int *order = arena_array(a, (size_t)n + 1, sizeof *order), *root = arena_array(a, (size_t)n + 1, sizeof *root);
  int *last = arena_array(a, (size_t)n + 1, sizeof *last);
  bool *hosts = arena_array(a, (size_t)n + 1, sizeof *hosts);
  int64_t naive = 0;
  int m = 0, ninplace = 0;
  for (int i = 0; i < n; i++) {
    naive += b[i].bytes;
    root[i] = i;
    last[i] = b[i].last;
    int p = b[i].inplace - 1;   /* created earlier, so already grouped */
    if (p >= 0 && p < i && !hosts[p] && b[p].bytes == b[i].bytes && b[p].last == b[i].first) {
      hosts[p] = true;
      root[i] = root[p];
      if (b[i].last > last[root[i]]) last[root[i]] = b[i].last;
      ninplace++;
      gg_log(c, LOG_MEMORY, "t%d written in place of t%d (kernel k%d is the last to read it)", b[i].id, b[p].id, b[i].first);
      continue;
    }
    order[m++] = i;
  }
  for (int x = 1; x < m; x++)
    for (int y = x; y > 0 && b[order[y]].bytes > b[order[y - 1]].bytes; y--) { int t = order[y]; order[y] = order[y - 1]; order[y - 1] = t; }
  int64_t total = 0;
  for (int k = 0; k < m; k++) {
    MemBuf *s = &b[order[k]];
    int64_t at = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < k; j++) {
        const MemBuf *o = &b[order[j]];
        bool live = !(last[order[j]] < s->first || last[order[k]] < o->first);
        bool mem = !(o->offset + o->bytes <= at || at + s->bytes <= o->offset);
        if (live && mem) { at = o->offset + o->bytes; moved = true; }
      }
    }
    s->offset = at;
    if (at + s->bytes > total) total = at + s->bytes;
  }
  for (int i = 0; i < n; i++) if (root[i] != i) b[i].offset = b[root[i]].offset;
  if (c->logs & LOG_MEMORY) {   /* the bound no placement beats: the most bytes alive at one kernel */
    int64_t peak = 0;
    int at = 0;
    for (int k = 0; k < m; k++) {
      int t = b[order[k]].first;
      int64_t live = 0;
      for (int j = 0; j < m; j++) live += b[order[j]].first <= t && t <= last[order[j]] ? b[order[j]].bytes : 0;
      if (live > peak) { peak = live; at = t; }
    }
    gg_log(c, LOG_MEMORY, "the most bytes alive at once: %lld, at kernel k%d", (long long)peak, at);
    for (int k = 0; k < m && k < 12; k++)
      if (b[order[k]].first <= at && at <= last[order[k]])
        gg_log(c, LOG_MEMORY, "  alive there: t%d, %lld bytes, kernels k%d..k%d", b[order[k]].id, (long long)b[order[k]].bytes, b[order[k]].first, last[order[k]]);
  }
  gg_log(c, LOG_MEMORY, "%d intermediate tensors: %lld bytes one after another, %lld bytes when those whose lifetimes do not overlap share memory (%d written in place of a dying input)",
         m + ninplace, (long long)naive, (long long)total, ninplace);
  *naive_out = naive;
  return total;
}
