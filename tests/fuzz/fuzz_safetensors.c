/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader (run's --inputs, --weights):
 * the header, dtypes, shapes and data offsets against the file, and every tensor's bytes read. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write(data, size, ".safetensors");
  Ctx *c = ctx_new();
  c->file = path;
  Graph *g = arena_alloc(c->arena, sizeof *g);
  g->ctx = c;
  g->path = path;
  SafeTensors st;
  if (!st_read(c, g, path, &st)) {
    st_check_input_names(c, &st, 4);
    volatile uint8_t sink = 0;
    for (int i = 0; i < st.n; i++) {
      const STensor *t = &st.t[i];
      if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
      st_find(&st, t->name);
    }
    (void)sink;
  }
  graph_release(g);
  ctx_free(c);
  return 0;
}
