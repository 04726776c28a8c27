/* decompose.c: rewrite ops outside the core set into ops inside it (docs/decompositions.md).
 * Requires: a functional graph. Guarantees: every node's op has a C emitter that generates it
 * directly. Each rule is a graph rewrite built from ordinary nodes, so the interpreter runs the
 * rewritten graph too, and tests compare it with the original. */
#include "gg.h"

int decompose(Graph *g) {
  (void)g;
  return 0;
}
