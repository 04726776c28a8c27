/* solib.c: load a compiled model (.so) and run it, for the driver (run, bench, explain) and for
 * check and minify. Requires: a .so built by compile_model. Guarantees: tensors in and out as
 * safetensors records; a training model runs forward then backward (d loss = 1) and also returns
 * grad.<name>. */
#include "gg.h"

#include <dlfcn.h>
#include <string.h>


int load_lib(Ctx *c, const char *path, Lib *l) {
  memset(l, 0, sizeof *l);
  char *p = strchr(path, '/') ? (char *)path : arena_printf(c->arena, "./%s", path);
  l->h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!l->h) return gg_error(c, "%s: cannot load: %s", path, dlerror());
#define SYM(field, name) if (!(*(void **)&l->field = dlsym(l->h, name))) return gg_error(c, "%s: not a gcc-graph model (no %s)", path, name)
  SYM(metadata, "gg_metadata");
  SYM(num_inputs, "gg_num_inputs");
  SYM(num_outputs, "gg_num_outputs");
  SYM(num_mut, "gg_num_mutated_buffers");
  SYM(open, "gg_open");
  SYM(close, "gg_close");
  SYM(run_alloc, "gg_run_alloc");
  SYM(mutated, "gg_mutated_buffer");
  SYM(output_shape, "gg_output_shape");
  SYM(run, "gg_run");
  int (*device_type)(void);
  *(void **)&device_type = dlsym(l->h, "gg_device_type");   /* optional: older models are CPU models */
  l->device = device_type ? device_type() : kDLCPU;
  if (l->device != kDLCPU) {
    SYM(dalloc, "gg_device_alloc");
    SYM(dfree, "gg_device_free");
    SYM(dcopy, "gg_device_copy");
  }
#undef SYM
  *(void **)&l->num_grads = dlsym(l->h, "gg_num_gradients");   /* optional: older models have none */
  *(void **)&l->state_new = dlsym(l->h, "gg_train_state_new");
  *(void **)&l->state_free = dlsym(l->h, "gg_train_state_free");
  *(void **)&l->forward = dlsym(l->h, "gg_forward");
  *(void **)&l->backward = dlsym(l->h, "gg_backward");
  *(void **)&l->gradient = dlsym(l->h, "gg_gradient");
  *(void **)&l->train_step = dlsym(l->h, "gg_train_step");
  static const char key[] = "\"optimizer\":{\"kind\":\"";
  const char *opt = strstr(l->metadata(), key);
  l->has_optimizer = l->train_step && opt && strncmp(opt + sizeof key - 1, "none\"", 5);
  return 0;
}

void so_release(Lib *l) {
  for (int i = 0; i < l->ndbufs; i++) l->dfree(l->dbufs[i]);
  l->ndbufs = 0;
}

static size_t tensor_bytes(const DLTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return (size_t)n * (size_t)((t->dtype.bits + 7) / 8);
}

/* Memory for a tensor of `bytes` where the model wants it: the arena, or the GPU. */
static void *so_buffer(Ctx *c, Lib *l, size_t bytes) {
  if (l->device == kDLCPU) return arena_array(c->arena, bytes + 1, 1);
  void *p = l->dalloc(bytes);
  if (!p) { gg_error(c, "cannot allocate %zu bytes on the GPU", bytes); return NULL; }
  if (l->ndbufs == l->capdbufs) {
    l->capdbufs = l->capdbufs ? 2 * l->capdbufs : 16;
    void **n = arena_array(c->arena, (size_t)l->capdbufs, sizeof *n);
    if (l->ndbufs) memcpy(n, l->dbufs, sizeof *n * (size_t)l->ndbufs);
    l->dbufs = n;
  }
  l->dbufs[l->ndbufs++] = p;
  return p;
}

DLTensor so_to_host(Ctx *c, Lib *l, const DLTensor *t) {
  DLTensor h = *t;
  if (t->device.device_type == kDLCPU) return h;
  size_t n = tensor_bytes(t);
  h.data = arena_array(c->arena, n + 1, 1);
  h.byte_offset = 0;
  h.device.device_type = kDLCPU;
  if (l->dcopy(h.data, (const char *)t->data + t->byte_offset, n, 0)) gg_error(c, "cannot copy a tensor back from the GPU");
  return h;
}

DLDataType to_dl(DType d) {
  DLDataType t = {kDLFloat, (uint8_t)(dtype_info(d)->size * 8), 1};
  if (d == DT_BF16) t.code = kDLBfloat;
  else if (d == DT_BOOL) t.code = 6;
  else if (d == DT_U8) t.code = kDLUInt;
  else if (!dtype_is_float(d)) t.code = kDLInt;
  return t;
}

DType from_dl(DLDataType t) {
  for (int code = 0; code < 14; code++) {
    const DTypeInfo *i = dtype_info(code);
    if (i && !memcmp(&(DLDataType){to_dl((DType)code).code, to_dl((DType)code).bits, 1}, &t, sizeof t)) return (DType)code;
  }
  return DT_UNKNOWN;
}

/* Inputs for a compiled model: in.N, or by the names its metadata lists. */
int so_inputs(Ctx *c, Lib *l, const SafeTensors *st, const char *path, DLTensor **out, int *n) {
  int ni = l->num_inputs();
  DLTensor *ts = arena_array(c->arena, (size_t)ni + 1, sizeof *ts);
  const char *meta = l->metadata();
  for (int i = 0; i < ni; i++) {
    const STensor *s = st_find(st, arena_printf(c->arena, "in.%d", i));
    if (!s) {
      /* the input's own name, from the metadata's inputs list */
      const char *p = strstr(meta, "\"inputs\":[");
      for (int k = 0; p && k <= i; k++) p = strstr(p + 1, "{\"name\":\"");
      if (p) {
        p += 9;
        const char *q = strchr(p, '"');
        if (q) s = st_find(st, arena_printf(c->arena, "%.*s", (int)(q - p), p));
      }
    }
    if (!s) return gg_error(c, "%s: no tensor for input %d: name it in.%d", path, i, i);
    ts[i].data = (void *)s->data;
    size_t es = (size_t)dtype_info(s->dtype)->size;
    if (l->device == kDLCPU && es > 1 && (uintptr_t)s->data % es) {   /* a safetensors file's tensors need not be aligned; the model's guards want them so */
      void *a = arena_alloc(c->arena, s->nbytes + 1);
      if (s->nbytes) memcpy(a, s->data, s->nbytes);
      ts[i].data = a;
    }
    ts[i].device.device_type = kDLCPU;
    ts[i].ndim = s->rank;
    ts[i].dtype = to_dl(s->dtype);
    ts[i].shape = (int64_t *)s->sizes;
    if (l->device != kDLCPU) {   /* the model's device gets a copy */
      void *d = so_buffer(c, l, s->nbytes);
      if (!d) return -1;
      if (s->nbytes && l->dcopy(d, s->data, s->nbytes, 1)) return gg_error(c, "%s: cannot copy input %d to the GPU", path, i);
      ts[i].data = d;
      ts[i].device.device_type = (DLDeviceType)l->device;
    }
  }
  if (st_check_input_names(c, st, ni)) return -1;
  *out = ts;
  *n = ni;
  return 0;
}

STensor st_of(Ctx *c, const char *name, const DLTensor *t) {
  STensor s = {name, from_dl(t->dtype), t->ndim, {0}, t->data, 0};
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) { s.sizes[d] = t->shape[d]; n *= t->shape[d]; }
  s.nbytes = (size_t)n * (size_t)dtype_info(s.dtype)->size;
  (void)c;
  return s;
}

bool so_is_training(const Lib *l) { return l->num_grads && l->state_new && l->forward && l->backward && l->gradient && l->num_grads() > 0; }

/* Outputs for these inputs, in the arena (gg_forward takes caller outputs). */
int so_alloc_outputs(Ctx *c, Lib *l, gg_model *m, const DLTensor *ts, int ni, DLTensor **out) {
  int no = l->num_outputs();
  char err[1024];
  DLTensor *ot = arena_array(c->arena, (size_t)no + 1, sizeof *ot);
  for (int i = 0; i < no; i++) {
    int64_t *shape = arena_array(c->arena, 16, sizeof *shape), n = 1;
    if (l->output_shape(m, ts, ni, i, &ot[i].ndim, shape, &ot[i].dtype, err, sizeof err)) return gg_error(c, "%s", err);
    for (int d = 0; d < ot[i].ndim; d++) n *= shape[d];
    ot[i].shape = shape;
    ot[i].device.device_type = (DLDeviceType)l->device;
    if (!(ot[i].data = so_buffer(c, l, (size_t)(n * (ot[i].dtype.bits / 8))))) return -1;
  }
  *out = ot;
  return 0;
}

int so_run(Ctx *c, const char *model, const char *weights, const char *inputs, const char *output) {
  Lib l;
  Graph dummy = {.ctx = c};
  SafeTensors in;
  DLTensor *ts;
  int ni, rc = -1;
  gg_model *m = NULL;
  gg_train_state *state = NULL;
  char err[1024] = "";
  if (load_lib(c, model, &l) || st_read(c, &dummy, inputs, &in)) goto out;
  if (l.open(&m, weights, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
  if (so_inputs(c, &l, &in, inputs, &ts, &ni)) goto out;
  int no = l.num_outputs(), nm = l.num_mut(), ng = so_is_training(&l) ? l.num_grads() : 0;
  DLManagedTensor **outs = arena_array(c->arena, (size_t)no + 1, sizeof *outs);
  STensor *st = arena_array(c->arena, (size_t)(no + nm + ng) + 1, sizeof *st);
  if (ng) {   /* a training model: forward, then backward with d loss = 1 */
    DLTensor *ot;
    if (so_alloc_outputs(c, &l, m, ts, ni, &ot)) goto out;
    if (l.state_new(m, &state, err, sizeof err) || l.forward(m, state, ts, ni, ot, no, err, sizeof err) || l.backward(m, state, NULL, err, sizeof err)) {
      gg_error(c, "%s", err);
      goto out;
    }
    for (int i = 0; i < no; i++) {
      DLTensor h = so_to_host(c, &l, &ot[i]);
      st[i] = st_of(c, arena_printf(c->arena, "out.%d", i), &h);
    }
    for (int i = 0; i < ng; i++) {
      const char *name;
      DLTensor v;
      l.gradient(state, i, &name, &v);
      DLTensor h = so_to_host(c, &l, &v);
      st[no + nm + i] = st_of(c, arena_printf(c->arena, "grad.%s", name), &h);
    }
  } else {
    if (l.run_alloc(m, ts, ni, outs, no, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
    for (int i = 0; i < no; i++) {
      DLTensor h = so_to_host(c, &l, &outs[i]->dl_tensor);
      st[i] = st_of(c, arena_printf(c->arena, "out.%d", i), &h);
    }
  }
  for (int i = 0; i < nm; i++) {
    const char *name;
    DLTensor v;
    l.mutated(m, i, &name, &v);
    DLTensor h = so_to_host(c, &l, &v);
    st[no + i] = st_of(c, arena_printf(c->arena, "buffer_after.%s", name), &h);
  }
  if (c->has_err) goto out;
  rc = st_write(c, output, st, no + nm + ng);
  if (!ng)
    for (int i = 0; i < no; i++) outs[i]->deleter(outs[i]);
out:
  if (state) l.state_free(state);
  so_release(&l);
  if (m) l.close(m);
  graph_release(&dummy);
  return rc;
}
