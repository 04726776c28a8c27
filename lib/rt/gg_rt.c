/* gg_rt.c: the runtime inside every compiled model: the entry points of gcc_graph.h, implemented
 * over the descriptor the generated code provides (gg__desc), and the kernels that are the same for
 * every model (matrix products on its own AVX-512 kernel or BLAS, convolutions, pooling). It needs libc, libm,
 * libgomp and a CBLAS, nothing else. */
#include "gg_rt.h"

#include <cblas.h>
#include <omp.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gg_rt_common.c"

struct gg_model {
  void *map;                /* external weights file, mapped */
  size_t maplen;
  void **w;                 /* every weight's bytes */
  void **mut;               /* private copies of mutated buffers */
  void **own;               /* training: private copies of the parameters the optimizer updates */
  float **opt_m, **opt_v;   /* optimizer state per gradient: momentum / Adam moments */
  int64_t step;             /* optimizer steps taken */
  double lr;                /* the learning rate now (--lr, or gg_set_learning_rate) */
  pthread_mutex_t lock;     /* serializes runs of models that mutate buffers */
  pthread_mutex_t pool_lock;/* scratch buffers kept between runs: fresh pages cost page faults */
  void *pool[8];
  size_t pool_size[8];
};

static void *scratch_take(gg_model *m, size_t bytes) {
  void *p = NULL;
  pthread_mutex_lock(&m->pool_lock);
  for (int i = 0; i < 8 && !p; i++)
    if (m->pool[i] && m->pool_size[i] >= bytes) { p = m->pool[i]; m->pool[i] = NULL; }
  pthread_mutex_unlock(&m->pool_lock);
  if (!p && posix_memalign(&p, GG_RT_ALIGN, bytes ? bytes : 1)) p = NULL;
  return p;
}

static void scratch_give(gg_model *m, void *p, size_t bytes) {
  pthread_mutex_lock(&m->pool_lock);
  for (int i = 0; i < 8 && p; i++)
    if (!m->pool[i]) { m->pool[i] = p; m->pool_size[i] = bytes; p = NULL; }
  pthread_mutex_unlock(&m->pool_lock);
  free(p);
}

/* ---------------------------------------------------------------- profile */

bool gg_rt_prof_on;
static _Thread_local double prof_last __attribute__((tls_model("initial-exec")));   /* no __tls_get_addr: the .so needs no ld.so symbols */
static int64_t prof_runs[2];

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

void gg_rt_tick(double *slot) {
  double t = now_s();
  if (slot) *slot += t - prof_last;   /* concurrent runs of one model blur the figures; they never crash */
  prof_last = t;
}

/* The profile, on stderr: the nodes that took the most time, over every run since gg_open. */
static void prof_report(const char *what, int n, const double *prof, const char *const *names, int64_t runs) {
  if (!n || !runs) return;
  int order[64], k = 0;
  double total = 0;
  for (int i = 0; i < n; i++) total += prof[i];
  for (int i = 0; i < n; i++) {   /* the 20 largest, by insertion */
    int j;
    if (k < 20) j = k++;
    else if (prof[i] <= prof[order[19]]) continue;
    else j = 19;
    while (j > 0 && prof[order[j - 1]] < prof[i]) { order[j] = order[j - 1]; j--; }
    order[j] = i;
  }
  fprintf(stderr, "gcc-graph profile: %s, %lld runs, %.3f ms per run; the nodes that took the most:\n", what, (long long)runs, 1e3 * total / (double)runs);
  for (int i = 0; i < k; i++)
    fprintf(stderr, "  %9.3f ms %5.1f%%  %s\n", 1e3 * prof[order[i]] / (double)runs, total > 0 ? 100 * prof[order[i]] / total : 0, names[order[i]]);
}

/* ---------------------------------------------------------------- entry points */

GG_EXPORT void gg_close(gg_model *m) {
  if (!m) return;
  if (gg_rt_prof_on) {
    prof_report(gg__train.ngrads ? "forward" : "run", gg__desc.nprof, gg__desc.prof, gg__desc.prof_names, prof_runs[0]);
    prof_report("backward", gg__train.nprof, gg__train.prof, gg__train.prof_names, prof_runs[1]);
  }
  if (m->map) munmap(m->map, m->maplen);
  for (int i = 0; i < gg__desc.nmutable; i++) free(m->mut[i]);
  free(m->mut);
  for (int i = 0; m->own && i < gg__desc.nweights; i++) free(m->own[i]);
  for (int i = 0; m->opt_m && i < gg__train.ngrads; i++) { free(m->opt_m[i]); free(m->opt_v[i]); }
  free(m->own);
  free(m->opt_m);
  free(m->opt_v);
  for (int j = 0; m->w && j < gg__desc.npacks; j++) free(m->w[gg__desc.nweights + j]);
  free(m->w);
  for (int i = 0; i < 8; i++) free(m->pool[i]);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->pool_lock);
  free(m);
}

GG_EXPORT int gg_open(gg_model **out, const char *weights, char *err, size_t errlen) {
  const gg_model_desc *d = &gg__desc;
  *out = NULL;
  const char *pe = getenv("GCC_GRAPH_PROFILE");
  gg_rt_prof_on = pe && *pe && strcmp(pe, "0");
  gg_model *m = calloc(1, sizeof *m);
  if (!m) return gg_rt_fail(err, errlen, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_init(&m->pool_lock, NULL);
  m->w = calloc((size_t)d->nweights + (size_t)d->npacks + 1, sizeof *m->w);
  m->mut = calloc((size_t)d->nmutable + 1, sizeof *m->mut);
  m->own = calloc((size_t)d->nweights + 1, sizeof *m->own);
  m->opt_m = calloc((size_t)gg__train.ngrads + 1, sizeof *m->opt_m);
  m->opt_v = calloc((size_t)gg__train.ngrads + 1, sizeof *m->opt_v);
  if (!m->w || !m->mut || !m->own || !m->opt_m || !m->opt_v) { gg_close(m); return gg_rt_fail(err, errlen, "out of memory"); }
  const unsigned char *base = d->blob;
  if (!base && d->nweights) {
    if (map_weights(weights, &m->map, &m->maplen, err, errlen)) { gg_close(m); return 1; }
    base = m->map;
  }
  for (int i = 0; i < d->nweights; i++) {
    const gg_weight_desc *wd = &d->weights[i];
    m->w[i] = (void *)(base + wd->offset);
    if (wd->mutable_index >= 0) {
      void *p = NULL;
      if (posix_memalign(&p, GG_RT_ALIGN, (size_t)wd->nbytes + 1)) { gg_close(m); return gg_rt_fail(err, errlen, "out of memory"); }
      memcpy(p, m->w[i], (size_t)wd->nbytes);
      m->mut[wd->mutable_index] = p;
      m->w[i] = p;
    }
  }
  /* the weights of float32 products, packed for gg_rt_gemm_packed (inference models only) */
  for (int j = 0; j < d->npacks && gg_rt_packed_ok(); j++) {
    const gg_pack_desc *pd = &d->packs[j];
    void *p = NULL;
    if (posix_memalign(&p, GG_RT_ALIGN, sizeof(float) * (size_t)gg_rt_pack_floats(pd->side, pd->rows, pd->cols) + 1)) {
      gg_close(m);
      return gg_rt_fail(err, errlen, "out of memory");
    }
    gg_rt_pack(pd->side, pd->rows, pd->cols, (const float *)m->w[pd->weight] + pd->offset, pd->srow, pd->scol, p);
    m->w[d->nweights + j] = p;
  }
  m->lr = gg__train.lr;
  /* training: the parameters with gradients get private copies, which the optimizer updates */
  for (int k = 0; k < gg__train.ngrads; k++) {
    int i = gg__train.grad_weight[k];
    if (i < 0 || d->weights[i].mutable_index >= 0 || m->own[i]) continue;
    if (posix_memalign(&m->own[i], GG_RT_ALIGN, (size_t)d->weights[i].nbytes + 1)) { gg_close(m); return gg_rt_fail(err, errlen, "out of memory"); }
    memcpy(m->own[i], m->w[i], (size_t)d->weights[i].nbytes);
    m->w[i] = m->own[i];
  }
  *out = m;
  return 0;
}

/* Run the model. outs: its outputs, then (saved_given) the values a training model's forward saves;
 * without them, a training model saves into temporaries that are dropped (gg_run on a training .so). */
static int run_checked(gg_model *m, const DLTensor *in, bool saved_given, void *const *outs, const int64_t *sym, char *err, size_t errlen) {
  int ns = saved_given ? 0 : gg__train.nsaved, no = gg__desc.noutputs;
  void *all[256] = {0};
  if (ns) {
    if (no + ns > 256) return gg_rt_fail(err, errlen, "too many saved values");
    memcpy(all, outs, sizeof *all * (size_t)no);
    for (int k = 0; k < ns; k++) {
      int64_t shape[GG_RT_MAX_RANK], n = 1;
      gg__desc.output_shape(no + k, sym, shape);
      for (int d = 0; d < gg__desc.output_ndims[no + k]; d++) n *= shape[d];
      if (posix_memalign(&all[no + k], GG_RT_ALIGN, (size_t)n * (size_t)(gg__desc.output_dtypes[no + k].bits / 8) + 1)) all[no + k] = NULL;
      if (!all[no + k]) { for (int j = 0; j < k; j++) free(all[no + j]); return gg_rt_fail(err, errlen, "out of memory"); }
    }
    outs = all;
  }
  int64_t bytes = gg__desc.scratch_bytes(sym);
  unsigned char *scratch = scratch_take(m, (size_t)bytes);
  const char *why = "out of memory for scratch";
  if (scratch) {
    if (gg__desc.nmutable) pthread_mutex_lock(&m->lock);
    why = gg__desc.run(m->w, m->mut, in, outs, scratch, sym);
    prof_runs[0]++;
    if (gg__desc.nmutable) pthread_mutex_unlock(&m->lock);
    scratch_give(m, scratch, (size_t)bytes);
  }
  for (int k = 0; k < ns; k++) free(all[no + k]);
  return why ? gg_rt_fail(err, errlen, "%s", why) : 0;
}

GG_EXPORT int gg_run(gg_model *m, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  int64_t sym[64];
  if (check_call(m, in, nin, nout, sym, err, errlen)) return 1;
  void *outs[GG_MAX_IO];
  if (check_outputs(sym, out, nout, outs, err, errlen)) return 1;
  return run_checked(m, in, false, outs, sym, err, errlen);
}

typedef struct owned { DLManagedTensor mt; int64_t shape[GG_RT_MAX_RANK]; } owned;
static void owned_free(DLManagedTensor *t) { if (t) { free(t->dl_tensor.data); free(t); } }

GG_EXPORT int gg_run_alloc(gg_model *m, const DLTensor *in, int nin, DLManagedTensor **out, int nout, char *err, size_t errlen) {
  int64_t sym[64];
  if (check_call(m, in, nin, nout, sym, err, errlen)) return 1;
  void *outs[GG_MAX_IO];
  for (int i = 0; i < nout; i++) out[i] = NULL;
  for (int i = 0; i < nout; i++) {
    owned *o = calloc(1, sizeof *o);
    if (!o) goto oom;
    DLTensor *t = &o->mt.dl_tensor;
    t->ndim = gg__desc.output_ndims[i];
    t->dtype = gg__desc.output_dtypes[i];
    t->device.device_type = kDLCPU;
    t->shape = o->shape;
    gg__desc.output_shape(i, sym, o->shape);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= o->shape[d];
    if (posix_memalign(&t->data, GG_RT_ALIGN, (size_t)(n * (t->dtype.bits / 8)) + 1)) { free(o); goto oom; }
    o->mt.deleter = owned_free;
    out[i] = &o->mt;
    outs[i] = t->data;
  }
  if (run_checked(m, in, false, outs, sym, err, errlen)) goto fail;
  return 0;
oom:
  gg_rt_fail(err, errlen, "out of memory");
fail:
  for (int i = 0; i < nout; i++) { owned_free(out[i]); out[i] = NULL; }
  return 1;
}

GG_EXPORT int gg_mutated_buffer(const gg_model *m, int i, const char **name, DLTensor *v) { return m ? mutated_buffer(m->mut, i, name, v) : 1; }

/* ---------------------------------------------------------------- training */

struct gg_train_state {
  int64_t sym[64];
  bool ready;               /* a forward ran: the saved values are there */
  void **saved;             /* the values the forward saved, by index */
  size_t *saved_bytes;
  int64_t *saved_shapes;    /* GG_RT_MAX_RANK per saved value */
  void **grads;             /* gradients of the last backward */
  size_t *grad_bytes;
  int64_t *grad_shapes;
  bool has_grads;
};

GG_EXPORT int gg_num_gradients(void) { return gg__train.ngrads; }

GG_EXPORT void gg_train_state_free(gg_train_state *st) {
  if (!st) return;
  for (int i = 0; st->saved && i < gg__train.nsaved; i++) free(st->saved[i]);
  for (int i = 0; st->grads && i < gg__train.ngrads; i++) free(st->grads[i]);
  free(st->saved);
  free(st->saved_bytes);
  free(st->saved_shapes);
  free(st->grads);
  free(st->grad_bytes);
  free(st->grad_shapes);
  free(st);
}

GG_EXPORT int gg_train_state_new(const gg_model *m, gg_train_state **out, char *err, size_t errlen) {
  *out = NULL;
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (!gg__train.ngrads) return gg_rt_fail(err, errlen, "this model was not compiled for training (gcc-graph compile --train)");
  gg_train_state *st = calloc(1, sizeof *st);
  if (st) {
    st->saved = calloc((size_t)gg__train.nsaved + 1, sizeof *st->saved);
    st->saved_bytes = calloc((size_t)gg__train.nsaved + 1, sizeof *st->saved_bytes);
    st->saved_shapes = calloc((size_t)(gg__train.nsaved + 1) * GG_RT_MAX_RANK, sizeof *st->saved_shapes);
    st->grads = calloc((size_t)gg__train.ngrads + 1, sizeof *st->grads);
    st->grad_bytes = calloc((size_t)gg__train.ngrads + 1, sizeof *st->grad_bytes);
    st->grad_shapes = calloc((size_t)(gg__train.ngrads + 1) * GG_RT_MAX_RANK, sizeof *st->grad_shapes);
  }
  if (!st || !st->saved || !st->saved_bytes || !st->saved_shapes || !st->grads || !st->grad_bytes || !st->grad_shapes) {
    gg_train_state_free(st);
    return gg_rt_fail(err, errlen, "out of memory");
  }
  *out = st;
  return 0;
}

/* (re)size a buffer of the state for n elements of type t */
static int ensure(void **p, size_t *have, const int64_t *shape, int ndim, DLDataType t) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  size_t bytes = (size_t)n * (size_t)(t.bits / 8) + 1;
  if (*p && *have >= bytes) return 0;
  free(*p);
  *p = NULL;
  if (posix_memalign(p, GG_RT_ALIGN, bytes)) { *p = NULL; return -1; }
  *have = bytes;
  return 0;
}

GG_EXPORT int gg_forward(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  if (nin != gg__desc.ninputs) return gg_rt_fail(err, errlen, "guard failed: expected %d inputs, got %d", gg__desc.ninputs, nin);
  if (gg__desc.guard(in, st->sym, err, errlen)) return 1;
  void *outs[256];
  if (gg__desc.noutputs + gg__train.nsaved > 256) return gg_rt_fail(err, errlen, "too many saved values");
  if (check_outputs(st->sym, out, nout, outs, err, errlen)) return 1;
  for (int k = 0; k < gg__train.nsaved; k++) {
    int i = gg__desc.noutputs + k;
    int64_t *shape = &st->saved_shapes[k * GG_RT_MAX_RANK];
    gg__desc.output_shape(i, st->sym, shape);
    if (ensure(&st->saved[k], &st->saved_bytes[k], shape, gg__desc.output_ndims[i], gg__desc.output_dtypes[i])) return gg_rt_fail(err, errlen, "out of memory");
    outs[i] = st->saved[k];
  }
  st->ready = false;
  if (run_checked(m, in, true, outs, st->sym, err, errlen)) return 1;
  st->ready = true;
  return 0;
}

GG_EXPORT int gg_backward(gg_model *m, gg_train_state *st, const DLTensor *grad_loss, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  if (!st->ready) return gg_rt_fail(err, errlen, "gg_backward needs a gg_forward with this state first");
  int ns = gg__train.nsaved;
  DLTensor in[257];
  int64_t one_shape[GG_RT_MAX_RANK];
  double one64 = 1;
  float one32 = 1;
  memset(in, 0, sizeof in);
  if (ns + 1 > 257) return gg_rt_fail(err, errlen, "too many saved values");
  for (int k = 0; k < ns; k++) {
    int i = gg__desc.noutputs + k;
    in[k].data = st->saved[k];
    in[k].device.device_type = kDLCPU;
    in[k].ndim = gg__desc.output_ndims[i];
    in[k].dtype = gg__desc.output_dtypes[i];
    in[k].shape = &st->saved_shapes[k * GG_RT_MAX_RANK];
  }
  if (grad_loss) {
    if (gg_rt_check_tensor(grad_loss, "grad_loss", gg__train.loss_dtype, gg__train.loss_ndim, kDLCPU, err, errlen)) return 1;
    for (int d = 0; d < grad_loss->ndim; d++)
      if (grad_loss->shape[d] != 1) return gg_rt_fail(err, errlen, "grad_loss must have one element");
    in[ns] = *grad_loss;
  } else {
    if (gg__train.loss_dtype.code != kDLFloat || (gg__train.loss_dtype.bits != 32 && gg__train.loss_dtype.bits != 64))
      return gg_rt_fail(err, errlen, "give grad_loss: the loss is %s", gg_rt_dtype_name(gg__train.loss_dtype));
    for (int d = 0; d < GG_RT_MAX_RANK; d++) one_shape[d] = 1;
    in[ns].data = gg__train.loss_dtype.bits == 64 ? (void *)&one64 : (void *)&one32;
    in[ns].device.device_type = kDLCPU;
    in[ns].ndim = gg__train.loss_ndim;
    in[ns].dtype = gg__train.loss_dtype;
    in[ns].shape = one_shape;
  }
  void *outs[256];
  if (gg__train.ngrads > 256) return gg_rt_fail(err, errlen, "too many gradients");
  for (int k = 0; k < gg__train.ngrads; k++) {
    int64_t *shape = &st->grad_shapes[k * GG_RT_MAX_RANK];
    gg__train.grad_shape(k, st->sym, shape);
    if (ensure(&st->grads[k], &st->grad_bytes[k], shape, gg__train.grad_ndims[k], gg__train.grad_dtypes[k])) return gg_rt_fail(err, errlen, "out of memory");
    outs[k] = st->grads[k];
  }
  int64_t bytes = gg__train.scratch_bytes(st->sym);
  unsigned char *scratch = scratch_take(m, (size_t)bytes);
  if (!scratch) return gg_rt_fail(err, errlen, "out of memory (%lld bytes of scratch)", (long long)bytes);
  const char *why = gg__train.run(m->w, m->mut, in, outs, scratch, st->sym);
  prof_runs[1]++;
  scratch_give(m, scratch, (size_t)bytes);
  if (why) return gg_rt_fail(err, errlen, "%s", why);
  st->has_grads = true;
  return 0;
}

GG_EXPORT int gg_gradient(const gg_train_state *st, int i, const char **name, DLTensor *v) {
  if (!st || !st->has_grads || i < 0 || i >= gg__train.ngrads) return 1;
  *name = gg__train.grad_names[i];
  memset(v, 0, sizeof *v);
  v->data = st->grads[i];
  v->device.device_type = kDLCPU;
  v->ndim = gg__train.grad_ndims[i];
  v->dtype = gg__train.grad_dtypes[i];
  v->shape = (int64_t *)&st->grad_shapes[i * GG_RT_MAX_RANK];
  return 0;
}

/* The optimizer's update of one float32 parameter, in one pass (PyTorch's SGD and Adam formulas). */
static int update(gg_model *m, int k, float *p, const float *g, int64_t n) {
  const gg_train_desc *t = &gg__train;
  float lr = (float)m->lr, wd = (float)t->weight_decay, mu = (float)t->momentum;
  if (t->optimizer == 1 && mu == 0) {
    #pragma omp parallel for schedule(static) if(n > 32768)
    for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    return 0;
  }
  bool fresh = !m->opt_m[k];
  if (fresh && posix_memalign((void **)&m->opt_m[k], GG_RT_ALIGN, (size_t)n * sizeof(float) + 1)) { m->opt_m[k] = NULL; return -1; }
  if (t->optimizer == 2 && !m->opt_v[k] && posix_memalign((void **)&m->opt_v[k], GG_RT_ALIGN, (size_t)n * sizeof(float) + 1)) { m->opt_v[k] = NULL; return -1; }
  float *b = m->opt_m[k], *v = m->opt_v[k];
  if (t->optimizer == 1) {   /* SGD with momentum: b = mu b + g (b = g at the first step); p -= lr b */
    #pragma omp parallel for schedule(static) if(n > 32768)
    for (int64_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      b[i] = fresh ? d : mu * b[i] + d;
      p[i] -= lr * b[i];
    }
    return 0;
  }
  if (fresh) { memset(b, 0, (size_t)n * sizeof(float)); memset(v, 0, (size_t)n * sizeof(float)); }
  double b1 = t->beta1, b2 = t->beta2;
  float c1 = (float)(1 - pow(b1, (double)m->step)), c2 = (float)sqrt(1 - pow(b2, (double)m->step)), eps = (float)t->eps;
  #pragma omp parallel for schedule(static) if(n > 32768)
  for (int64_t i = 0; i < n; i++) {   /* Adam: m, v moments, bias-corrected */
    float d = g[i] + wd * p[i];
    b[i] = (float)b1 * b[i] + (1 - (float)b1) * d;
    v[i] = (float)b2 * v[i] + (1 - (float)b2) * d * d;
    p[i] -= lr * (b[i] / c1) / (sqrtf(v[i]) / c2 + eps);
  }
  return 0;
}

GG_EXPORT int gg_train_step(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!gg__train.optimizer) return gg_rt_fail(err, errlen, "this model has no optimizer: compile it with --train --optimizer sgd|adam");
  if (gg_forward(m, st, in, nin, out, nout, err, errlen) || gg_backward(m, st, NULL, err, errlen)) return 1;
  pthread_mutex_lock(&m->lock);
  m->step++;
  int rc = 0;
  for (int k = 0; k < gg__train.ngrads && !rc; k++) {
    int i = gg__train.grad_weight[k];
    if (i < 0) continue;   /* an input's gradient: nothing to update */
    if (gg__train.grad_dtypes[k].code != kDLFloat || gg__train.grad_dtypes[k].bits != 32) { rc = gg_rt_fail(err, errlen, "the optimizer updates float32 parameters only"); break; }
    int64_t n = 1;
    for (int d = 0; d < gg__train.grad_ndims[k]; d++) n *= st->grad_shapes[k * GG_RT_MAX_RANK + d];
    if (update(m, k, (float *)m->w[i], (const float *)st->grads[k], n)) rc = gg_rt_fail(err, errlen, "out of memory");
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

GG_EXPORT int gg_set_learning_rate(gg_model *m, double lr) {
  if (!m || !gg__train.optimizer || !(lr >= 0)) return 1;
  pthread_mutex_lock(&m->lock);
  m->lr = lr;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

GG_EXPORT int gg_num_weights(void) { return gg__desc.nweights; }

GG_EXPORT int gg_weight(const gg_model *m, int i, const char **name, const void **data, size_t *nbytes) {
  if (!m || i < 0 || i >= gg__desc.nweights) return 1;
  *name = gg__desc.weights[i].fqn;
  *data = m->w[i];
  *nbytes = (size_t)gg__desc.weights[i].nbytes;
  return 0;
}

/* ---------------------------------------------------------------- matrix products */

/* Threads: with OpenBLAS built on OpenMP (what gcc-graph links when Debian's libopenblas0-openmp is
 * installed), BLAS parallelizes each product in the same OpenMP pool as the kernels: one pool, no
 * contention. With the pthread build there are two pools; on a few cores, the one that wins is
 * OpenMP's, with BLAS single-threaded per panel (two pools spinning against each other doubled the
 * time on 2 cores); on many cores concurrent calls into the pthread build serialize, so BLAS runs
 * its own threads. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static bool blas_panels;   /* split products into per-thread panels of single-threaded BLAS calls */
static void blas_setup(void) {
  blas_panels = openblas_get_parallel() != 2 && omp_get_max_threads() <= 4;
  if (blas_panels) openblas_set_num_threads(1);
}

/* The epilogue (the pointwise nodes fused after a product or convolution, gg_rt.h) on rows x cols
 * elements of the output at y, element (i, j) at y[i * ld + j]; none when ep is NULL */
static inline void epi_run(const gg_epi *ep, void *y, int64_t ld, int64_t rows, int64_t cols) {
  if (ep && rows > 0 && cols > 0) ep->fn(ep, y, ld, rows, cols);
}

/* ... as a pass over n elements of the output from y (BLAS paths), in spans of 4096, shared by threads */
void gg_rt_epi_pass(const gg_epi *ep, void *y, size_t esize, int64_t n) {
  if (!ep) return;
  _Pragma("omp parallel for schedule(static) if(n > 32768)")
  for (int64_t i = 0; i < n; i += 4096) ep->fn(ep, (char *)y + (size_t)i * esize, 4096, 1, n - i < 4096 ? n - i : 4096);
}

/* An operand with a unit stride along its rows is row-major with leading dimension = the other
 * stride; with a unit stride along its columns, it is the transpose of a row-major matrix. */
#define GEMM(NAME, T, CBLAS)                                                                          \
  static void NAME##_one(int64_t M, int64_t N, int64_t K, const T *A, int64_t sam, int64_t sak, const T *B, int64_t sbk, int64_t sbn, \
                         T *C, int64_t ldc) {                                                          \
    bool ta = sak != 1 || (sam == 1 && K == 1 && M > 1), tb = sbn != 1 || (sbk == 1 && N == 1 && K > 1); \
    int64_t lda = ta ? sak : sam, ldb = tb ? sbn : sbk;                                               \
    if (!ta && lda < K) lda = K;                                                                      \
    if (ta && lda < M) lda = M;                                                                       \
    if (!tb && ldb < N) ldb = N;                                                                      \
    if (tb && ldb < K) ldb = K;                                                                       \
    CBLAS(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1, A, (int)lda, B, \
          (int)ldb, 0, C, (int)ldc);                                                                  \
  }                                                                                                   \
  void NAME(int64_t M, int64_t N, int64_t K, const T *A, int64_t sam, int64_t sak, const T *B, int64_t sbk, int64_t sbn, T *C, \
            const gg_epi *ep) {                                                                       \
    if (M == 0 || N == 0) return;                                                                     \
    if (K == 0) { memset(C, 0, sizeof(T) * (size_t)(M * N)); epi_run(ep, C, N, M, N); return; }        \
    pthread_once(&blas_once, blas_setup);                                                             \
    int nt = omp_in_parallel() || !blas_panels ? 1 : omp_get_max_threads();                           \
    if (nt > 1 && (double)M * (double)N * (double)K < 4e6) nt = 1;                                    \
    if (nt <= 1) {                                                                                    \
      NAME##_one(M, N, K, A, sam, sak, B, sbk, sbn, C, N);                                            \
      epi_run(ep, C, N, M, N);                                                                        \
      return;                                                                                         \
    }                                                                                                 \
    /* panels of columns when N is wide, else of rows; multiples of 16 keep the kernels aligned */     \
    bool cols = N >= M;                                                                               \
    int64_t len = cols ? N : M, step = ((len + nt - 1) / nt + 15) / 16 * 16;                           \
    _Pragma("omp parallel for schedule(static)")                                                      \
    for (int64_t at = 0; at < len; at += step) {                                                      \
      int64_t n = len - at < step ? len - at : step;                                                  \
      if (cols) {                                                                                     \
        NAME##_one(M, n, K, A, sam, sak, B + at * sbn, sbk, sbn, C + at, N);                          \
        epi_run(ep, C + at, N, M, n);                                                                 \
      } else {                                                                                        \
        NAME##_one(n, N, K, A + at * sam, sam, sak, B, sbk, sbn, C + at * N, N);                      \
        epi_run(ep, C + at * N, N, n, N);                                                             \
      }                                                                                               \
    }                                                                                                 \
  }
GEMM(blas_sgemm, float, cblas_sgemm)
GEMM(gg_rt_dgemm, double, cblas_dgemm)

/* ---------------------------------------------------------------- float32 products on packed panels */

/* Our own float32 kernel, for the products whose one operand is a weight (inference on the CPU):
 * the weight is packed once, at gg_open, into the panels the kernel reads; the other operand is
 * packed per call (a 2-d convolution's image is read in place instead: conv_rows); the bias is added
 * while a tile is in registers, the epilogue (gg_epi) applied while it is in L1. OpenBLAS would pack the weight again on every call
 * (9.4 MB for each of resnet18's last convolutions, for 49 output columns). The kernel is AVX-512,
 * chosen at run time, so a .so built on one x86-64 machine runs on another; elsewhere (and with
 * GCC_GRAPH_BLAS_ONLY=1) no weight is packed and the products go to BLAS.
 *
 * Layout: A (M x K) in panels of PK_MR rows, each K x PK_MR with a row's PK_MR values together per k;
 * B (K x N) in panels of PK_NR columns, each K x width (PK_NR, or 16 for a last panel of at most
 * 16 columns). Padding rows and columns are zeros. A micro-tile of PK_MR x PK_NR outputs lives in 16
 * zmm registers; the loops over it follow BLIS: for each PK_KC slice of K, each B panel (its slice in
 * L1) against every A panel of the tile (their slices in L2). */
#define PK_MR 8
#define PK_NR 32
#ifndef PK_KC   /* tuning knobs (-D in --cflags): the depth of a slice of K, tiles per thread */
#define PK_KC 384
#endif
#ifndef PK_TILES_PER_THREAD
#define PK_TILES_PER_THREAD 2
#endif

static int64_t pk_width(int64_t N, int64_t jp) { return N - jp * PK_NR <= 16 ? 16 : PK_NR; }

int64_t gg_rt_pack_floats(int side, int64_t rows, int64_t cols) {
  return side == 0 ? (rows + PK_MR - 1) / PK_MR * PK_MR * cols : (cols + PK_NR - 1) / PK_NR * PK_NR * rows;
}

void gg_rt_pack(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst) {
  if (side == 0) {
    int64_t M = rows, K = cols;
    _Pragma("omp parallel for schedule(static) if(M * K > 65536 && !omp_in_parallel())")
    for (int64_t ip = 0; ip < (M + PK_MR - 1) / PK_MR; ip++) {
      float *d = dst + ip * K * PK_MR;
      for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < PK_MR; i++) {
          int64_t r = ip * PK_MR + i;
          d[k * PK_MR + i] = r < M ? src[r * srow + k * scol] : 0;
        }
    }
  } else {
    int64_t K = rows, N = cols;
    _Pragma("omp parallel for schedule(static) if(N * K > 65536 && !omp_in_parallel())")
    for (int64_t jp = 0; jp < (N + PK_NR - 1) / PK_NR; jp++) {
      int64_t w = pk_width(N, jp);
      float *d = dst + jp * K * PK_NR;
      if (scol == 1 && (jp + 1) * PK_NR <= N) {   /* a whole panel of a row-major matrix: row copies */
        for (int64_t k = 0; k < K; k++) memcpy(d + k * w, src + k * srow + jp * PK_NR, sizeof(float) * PK_NR);
        continue;
      }
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < w; j++) {
          int64_t n = jp * PK_NR + j;
          d[k * w + j] = n < N ? src[k * srow + n * scol] : 0;
        }
    }
  }
}

/* an operand read in place from a convolution's image (conv_rows, gemm_run) */
typedef struct rows_src { const float *base; const int64_t *ro, *po; } rows_src;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GG_X512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

static bool packed_on;
static pthread_once_t packed_once = PTHREAD_ONCE_INIT;
static void packed_setup(void) {
  const char *off = getenv("GCC_GRAPH_BLAS_ONLY");
  __builtin_cpu_init();
  packed_on = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0"));
}
bool gg_rt_packed_ok(void) {
  pthread_once(&packed_once, packed_setup);
  return packed_on;
}

/* C[0:mr, 0:nr] = (acc ? C : 0) + A panel slice @ B panel slice (kc deep; nv vectors of 16 wide), then
 * the row and column biases when given (the last slice of K). Either operand may be read in
 * place from a convolution's image (conv_rows): with bro, row k of the B slice is the nr floats at
 * b + bro[k]; with aro, row i of the A slice at k is a[aro[k] + apo[i]]. With ty, the finished tile is
 * stored transposed there instead of in c (c then only holds partial sums of earlier slices). */
static inline __attribute__((always_inline)) GG_X512 void pk_tile(const int nv, int64_t kc, const float *a, const int64_t *aro, const int64_t *apo,
                                                                   const float *b, const int64_t *bro, float *c, int64_t ldc, int mr, int nr,
                                                                   bool acc, const float *rb, const float *cb, float *ty, int64_t tld) {
  __m512 c0[PK_MR], c1[PK_MR];
  __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
  int64_t po[PK_MR];
  for (int i = 0; i < PK_MR; i++) {
    c0[i] = c1[i] = _mm512_setzero_ps();
    po[i] = apo ? apo[i] : i;
  }
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0, b1;
    if (bro) {   /* masked: the columns past the last are not read (they may lie past the image) */
      const float *bk = b + bro[k];
      b0 = _mm512_maskz_loadu_ps(m0, bk);
      b1 = nv > 1 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
    } else {
      b0 = _mm512_loadu_ps(b);
      b1 = nv > 1 ? _mm512_loadu_ps(b + 16) : b0;
      b += 16 * nv;
    }
    const float *ak = aro ? a + aro[k] : a;
    for (int i = 0; i < PK_MR; i++) {
      __m512 av = _mm512_set1_ps(ak[po[i]]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      if (nv > 1) c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
    if (!aro) a += PK_MR;
  }
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
  float t[PK_MR][PK_NR];
  if (cb) {
    cb0 = _mm512_maskz_loadu_ps(m0, cb);
    if (nv > 1) cb1 = _mm512_maskz_loadu_ps(m1, cb + 16);
  }
  for (int i = 0; i < mr; i++) {
    float *ci = c + i * ldc;
    __m512 v0 = c0[i], v1 = c1[i];
    if (acc) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
      if (nv > 1) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    if (rb) {
      __m512 r = _mm512_set1_ps(rb[i]);
      v0 = _mm512_add_ps(v0, r);
      v1 = _mm512_add_ps(v1, r);
    }
    if (cb) {
      v0 = _mm512_add_ps(v0, cb0);
      v1 = _mm512_add_ps(v1, cb1);
    }
    if (ty) {
      _mm512_storeu_ps(t[i], v0);
      if (nv > 1) _mm512_storeu_ps(t[i] + 16, v1);
      continue;
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    if (nv > 1) _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
  if (ty)   /* stored transposed, through the tile in L1: element (i, j) at ty[j * tld + i] */
    for (int j = 0; j < nr; j++)
      for (int i = 0; i < mr; i++) ty[j * tld + i] = t[i][j];
}
#define PK_TILE(NAME, NV, ARO, APO, BRO, TY)                                                                                      \
  static GG_X512 void NAME(int64_t kc, const float *a, const int64_t *aro, const int64_t *apo, const float *b, const int64_t *bro, float *c, \
                           int64_t ldc, int mr, int nr, bool acc, const float *rb, const float *cb, float *ty, int64_t tld) {  \
    (void)aro; (void)apo; (void)bro; (void)ty;                                                                                \
    pk_tile(NV, kc, a, ARO, APO, b, BRO, c, ldc, mr, nr, acc, rb, cb, TY, tld);                                               \
  }
PK_TILE(pk_tile32, 2, NULL, NULL, NULL, NULL)
PK_TILE(pk_tile16, 1, NULL, NULL, NULL, NULL)
PK_TILE(pk_tile32_brows, 2, NULL, NULL, bro, NULL)
PK_TILE(pk_tile16_brows, 1, NULL, NULL, bro, NULL)
PK_TILE(pk_tile32_arows, 2, aro, apo, NULL, ty)
PK_TILE(pk_tile16_arows, 1, aro, apo, NULL, ty)

/* The product of packed panels (gg_rt_gemm_packed), or with one operand read in place from a
 * convolution's image (conv_rows): rows_src ar (A: row k at output position i is base[ro[k] + po[i]])
 * or br (B: row k is base[ro[k] + column]); the other operand is packed. With ty, the product is
 * stored transposed there (element (i, j) at ty[j * tld + i]), C holding only partial sums. The
 * epilogue ep goes to each finished tile where it is stored, in L1. */
static void gemm_run(int64_t M, int64_t N, int64_t K, const float *Ap, const rows_src *ar, const float *Bp, const rows_src *br, float *C,
                     int64_t ldc, const float *row_bias, const float *col_bias, const gg_epi *ep, float *ty, int64_t tld) {
  if (M <= 0 || N <= 0) return;
  int64_t pm = (M + PK_MR - 1) / PK_MR, pn = (N + PK_NR - 1) / PK_NR;
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* one thread for a product too small to share (a fork and join costs microseconds), unless its
   * operands are large: a product of one row (a linear layer at batch 1) is memory-bound, and many
   * threads read its weight faster than one (resnet18's 2 MB classifier: 0.27 ms on one thread of the
   * 16-core host) */
  if ((double)M * (double)N * (double)K < 2e5 && (double)(M + N) * (double)K < 65536) nt = 1;
  /* a grid of gm x gn tiles of at most 16 x 8 panels (128 rows x 256 columns), refined until there
   * are PK_TILES_PER_THREAD (2) per thread and a multiple of the threads; tile r spans panels [r * pm / gm, (r+1) * pm / gm)
   * so that tiles differ by at most one panel (an uneven split left one thread idle for a quarter of
   * resnet18's 784-column products). Each row of tiles reads all of B, each column all of A: refined
   * along the smaller operand's side (a 7x7 convolution's 9.4 MB of weights read twice had made it
   * memory-bound) */
  int64_t gm = (pm + 15) / 16, gn = (pn + 7) / 8;
  while (gm * gn < PK_TILES_PER_THREAD * nt && (gm < pm || gn < pn)) {
    if (gn < pn && (M <= N || gm == pm)) gn++;
    else gm++;
  }
  for (int tries = 0; nt > 1 && (gm * gn) % nt && tries < 8; tries++) {
    if (gn < pn) gn++;
    else if (gm < pm) gm++;
  }
  if (K == 0) {   /* no slice of K: the epilogue on zeros */
    static const float zeros[PK_MR * PK_NR];
    for (int64_t ip = 0; ip < pm; ip++)
      for (int64_t jp = 0; jp < pn; jp++) {
        int mr = (int)(M - ip * PK_MR < PK_MR ? M - ip * PK_MR : PK_MR), nr = (int)(N - jp * PK_NR < PK_NR ? N - jp * PK_NR : PK_NR);
        pk_tile32(0, zeros, NULL, NULL, zeros, NULL, C + ip * PK_MR * ldc + jp * PK_NR, ldc, mr, nr, false, row_bias ? row_bias + ip * PK_MR : NULL,
                  col_bias ? col_bias + jp * PK_NR : NULL, NULL, 0);
        if (ty) {
          for (int j = 0; j < nr; j++)
            for (int i = 0; i < mr; i++) ty[(jp * PK_NR + j) * tld + ip * PK_MR + i] = C[(ip * PK_MR + i) * ldc + jp * PK_NR + j];
          epi_run(ep, ty + jp * PK_NR * tld + ip * PK_MR, tld, nr, mr);
        } else epi_run(ep, C + ip * PK_MR * ldc + jp * PK_NR, ldc, mr, nr);
      }
    return;
  }
  _Pragma("omp parallel for schedule(dynamic) if(nt > 1)")
  for (int64_t t = 0; t < gm * gn; t++) {
    int64_t r = t / gn, q = t % gn, i0 = r * pm / gm, i1 = (r + 1) * pm / gm, j0 = q * pn / gn, j1 = (q + 1) * pn / gn;
    for (int64_t k0 = 0; k0 < K; k0 += PK_KC) {
      int64_t kc = K - k0 < PK_KC ? K - k0 : PK_KC;
      bool last = k0 + kc == K;
      for (int64_t jp = j0; jp < j1; jp++) {
        int64_t w = pk_width(N, jp);
        int nr = (int)(N - jp * PK_NR < PK_NR ? N - jp * PK_NR : PK_NR);
        const float *bp = br ? br->base + jp * PK_NR : Bp + jp * K * PK_NR + k0 * w, *cb = last && col_bias ? col_bias + jp * PK_NR : NULL;
        for (int64_t ip = i0; ip < i1; ip++) {
          int mr = (int)(M - ip * PK_MR < PK_MR ? M - ip * PK_MR : PK_MR);
          const float *ap = ar ? ar->base : Ap + ip * K * PK_MR + k0 * PK_MR, *rb = last && row_bias ? row_bias + ip * PK_MR : NULL;
          float *cc = C + ip * PK_MR * ldc + jp * PK_NR;
          bool acc = k0 > 0;
          float *tt = ty && last ? ty + jp * PK_NR * tld + ip * PK_MR : NULL;
          if (ar && w == PK_NR) pk_tile32_arows(kc, ap, ar->ro + k0, ar->po + ip * PK_MR, bp, NULL, cc, ldc, mr, nr, acc, rb, cb, tt, tld);
          else if (ar) pk_tile16_arows(kc, ap, ar->ro + k0, ar->po + ip * PK_MR, bp, NULL, cc, ldc, mr, nr, acc, rb, cb, tt, tld);
          else if (br && w == PK_NR) pk_tile32_brows(kc, ap, NULL, NULL, bp, br->ro + k0, cc, ldc, mr, nr, acc, rb, cb, NULL, 0);
          else if (br) pk_tile16_brows(kc, ap, NULL, NULL, bp, br->ro + k0, cc, ldc, mr, nr, acc, rb, cb, NULL, 0);
          else if (w == PK_NR) pk_tile32(kc, ap, NULL, NULL, bp, NULL, cc, ldc, mr, nr, acc, rb, cb, NULL, 0);
          else pk_tile16(kc, ap, NULL, NULL, bp, NULL, cc, ldc, mr, nr, acc, rb, cb, NULL, 0);
          if (last && tt) epi_run(ep, tt, tld, nr, mr);   /* the finished tile where it is stored, in L1 */
          else if (last) epi_run(ep, cc, ldc, mr, nr);
        }
      }
    }
  }
}

void gg_rt_gemm_packed(int64_t M, int64_t N, int64_t K, const float *Ap, const float *Bp, float *C, int64_t ldc, const float *row_bias,
                       const float *col_bias, const gg_epi *ep) {
  gemm_run(M, N, K, Ap, NULL, Bp, NULL, C, ldc, row_bias, col_bias, ep, NULL, 0);
}
#else
static void gemm_run(int64_t M, int64_t N, int64_t K, const float *Ap, const rows_src *ar, const float *Bp, const rows_src *br, float *C,
                     int64_t ldc, const float *row_bias, const float *col_bias, const gg_epi *ep, float *ty, int64_t tld) {
  (void)M; (void)N; (void)K; (void)Ap; (void)ar; (void)Bp; (void)br; (void)C; (void)ldc; (void)row_bias; (void)col_bias; (void)ep;
  (void)ty; (void)tld;
  abort();   /* nothing is packed where gg_rt_packed_ok() is false */
}
bool gg_rt_packed_ok(void) { return false; }
void gg_rt_gemm_packed(int64_t M, int64_t N, int64_t K, const float *Ap, const float *Bp, float *C, int64_t ldc, const float *row_bias,
                       const float *col_bias, const gg_epi *ep) {
  (void)M; (void)N; (void)K; (void)Ap; (void)Bp; (void)C; (void)ldc; (void)row_bias; (void)col_bias; (void)ep;
  abort();   /* nothing is packed where gg_rt_packed_ok() is false */
}
#endif

/* Any float32 product: on the packed kernel where it runs (both operands packed per call into the
 * calling thread's buffer, kept between calls: no allocation once it is large enough), else BLAS.
 * Products run by several threads at once (a batch of attention heads) each take one thread; under
 * OpenBLAS those calls serialize on its buffer pool. */
static __thread float *pack_buf;
static __thread size_t pack_cap;

void gg_rt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t sbk, int64_t sbn, float *C,
                 const gg_epi *ep) {
  if (M == 0 || N == 0) return;
  size_t na = (size_t)gg_rt_pack_floats(0, M, K), need = na + (size_t)gg_rt_pack_floats(1, K, N);
  if (gg_rt_packed_ok() && need > pack_cap) {
    void *p = NULL;
    if (!posix_memalign(&p, GG_RT_ALIGN, need * sizeof(float))) {
      free(pack_buf);
      pack_buf = p;
      pack_cap = need;
    }
  }
  if (!gg_rt_packed_ok() || need > pack_cap) { blas_sgemm(M, N, K, A, sam, sak, B, sbk, sbn, C, ep); return; }
  gg_rt_pack(0, M, K, A, sam, sak, pack_buf);
  gg_rt_pack(1, K, N, B, sbk, sbn, pack_buf + na);
  gg_rt_gemm_packed(M, N, K, pack_buf, pack_buf + na, C, N, NULL, NULL, ep);
}

/* ---------------------------------------------------------------- convolution */

/* The outputs o of a row of n whose input o*s + off falls inside [0, in): [*lo, *hi), found once
 * rather than tested per element (depthwise convolution, im2col, max pooling). */
static inline void row_inside(int64_t off, int64_t s, int64_t in, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / s + 1;
  if (*hi > n) *hi = n;
  if (*lo > *hi) *lo = *hi;
}


/* Phase image (ph, pw) of a plane of H x W padded by (ph0, pw0) for strides (sh, sw): row i is the
 * padded row i * sh + ph, every sw-th element from pw; Hq x Wq, zeros outside the plane. Tap (th, tw)
 * of output (oh, ow) reads phase (th % sh, tw % sw) at (oh + th / sh, ow + tw / sw), so a tap reads
 * the output rows of one phase image as one contiguous run (conv_rows, depthwise). */
#define PHASE(T)                                                                                      \
  static void phase_##T(const T *xc, int64_t H, int64_t W, int64_t sh, int64_t sw, int64_t ph0, int64_t pw0, int64_t Hq, \
                        int64_t Wq, int64_t ph, int64_t pw, T *d) {                                   \
    int64_t lo, hi;                                                                                   \
    row_inside(pw - pw0, sw, W, Wq, &lo, &hi);                                                        \
    for (int64_t i = 0; i < Hq; i++, d += Wq) {                                                       \
      int64_t h = i * sh + ph - ph0;                                                                  \
      if (h < 0 || h >= H) { memset(d, 0, sizeof(T) * (size_t)Wq); continue; }                       \
      const T *src = xc + h * W + pw - pw0;                                                           \
      for (int64_t j = 0; j < lo; j++) d[j] = 0;                                                      \
      if (sw == 1) memcpy(d + lo, src + lo, sizeof(T) * (size_t)(hi - lo));                           \
      else for (int64_t j = lo; j < hi; j++) d[j] = src[j * sw];                                      \
      for (int64_t j = hi; j < Wq; j++) d[j] = 0;                                                     \
    }                                                                                                 \
  }
PHASE(float)
PHASE(double)

/* Depthwise (one input channel per group), one output plane per task; im2col + GEMM would multiply a
 * 1-row matrix per channel. 2-d: the input channel's phase images (phase_T) go to the thread's buffer,
 * and each tap is one multiply-add along a run of (Ho - 1) * Wq + Wo outputs over the phase image's
 * width (as conv_rows reads the image), long and contiguous whatever the plane's width (mobilenet's
 * 7 x 7 planes: 77 per tap, where a row of 7 per tap and row had cost more in bounds than in
 * arithmetic); the valid columns are copied out. 3-d convolutions, or a buffer that cannot grow,
 * take direct loops along the output row. */
#define DEPTHWISE(NAME, T)                                                                            \
  static __thread T *NAME##_buf;                                                                      \
  static __thread size_t NAME##_cap;                                                                  \
  static void NAME##_direct(const gg_conv *c, const T *xp, const T *wp, T b0, T *yp) {                \
    for (int64_t o0 = 0; o0 < c->out[0]; o0++)                                                        \
      for (int64_t o1 = 0; o1 < c->out[1]; o1++) {                                                    \
        T *row = yp + (o0 * c->out[1] + o1) * c->out[2];                                              \
        for (int64_t o2 = 0; o2 < c->out[2]; o2++) row[o2] = b0;                                      \
        for (int64_t k0 = 0; k0 < c->k[0]; k0++) {                                                    \
          int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];                                \
          if (i0 < 0 || i0 >= c->in[0]) continue;                                                     \
          for (int64_t k1 = 0; k1 < c->k[1]; k1++) {                                                  \
            int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];                              \
            if (i1 < 0 || i1 >= c->in[1]) continue;                                                   \
            const T *xr = xp + (i0 * c->in[1] + i1) * c->in[2];                                       \
            for (int64_t k2 = 0; k2 < c->k[2]; k2++) {                                                \
              T wv = wp[(k0 * c->k[1] + k1) * c->k[2] + k2];                                          \
              int64_t off = k2 * c->dil[2] - c->pad[2], s = c->stride[2];                             \
              int64_t lo, hi;                                                                         \
              row_inside(off, s, c->in[2], c->out[2], &lo, &hi);                                      \
              for (int64_t o2 = lo; o2 < hi; o2++) row[o2] += wv * xr[o2 * s + off];                  \
            }                                                                                         \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }                                                                                                   \
  /* acc[0:Nw] = b0 + the taps over the phase images xq (built for AVX-512 too: GG_VEC). Tap       \
   * (th, tw) = (kh, kw) * dil is at phase (th % sh, tw % sw), offset (th / sh, tw / sw): both       \
   * stepped along, without a division per tap (they cost more than a small plane's tap). */         \
  static GG_VEC void NAME##_taps(const gg_conv *c, const T *xq, int64_t Wq, int64_t qsp, int64_t Nw, const T *wp, T b0, T *acc) { \
    int64_t sh = c->stride[1], sw = c->stride[2];                                                     \
    int64_t dqh = c->dil[1] / sh, drh = c->dil[1] % sh, dqw = c->dil[2] / sw, drw = c->dil[2] % sw;   \
    for (int64_t o = 0; o < Nw; o++) acc[o] = b0;                                                     \
    for (int64_t kh = 0, qh = 0, rh = 0; kh < c->k[1]; kh++) {                                        \
      for (int64_t kw = 0, qw = 0, rw = 0; kw < c->k[2]; kw++) {                                      \
        const T *src = xq + (rh * sw + rw) * qsp + qh * Wq + qw;                                      \
        T wv = wp[kh * c->k[2] + kw];                                                                 \
        for (int64_t o = 0; o < Nw; o++) acc[o] += wv * src[o];                                       \
        qw += dqw, rw += drw;                                                                         \
        if (rw >= sw) qw++, rw -= sw;                                                                 \
      }                                                                                               \
      qh += dqh, rh += drh;                                                                           \
      if (rh >= sh) qh++, rh -= sh;                                                                   \
    }                                                                                                 \
  }                                                                                                   \
  static void NAME(const gg_conv *c, const T *x, const T *w, const T *bias, T *y, const gg_epi *ep) { \
    int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];           \
    int64_t ksp = c->k[0] * c->k[1] * c->k[2], mult = c->Cout / c->groups;                           \
    int64_t H = c->in[1], W = c->in[2], sh = c->stride[1], sw = c->stride[2], Ho = c->out[1], Wo = c->out[2]; \
    int64_t Hq = (H + 2 * c->pad[1] + sh - 1) / sh, Wq = (W + 2 * c->pad[2] + sw - 1) / sw, qsp = Hq * Wq; \
    int64_t Nw = (Ho - 1) * Wq + Wo;                                                                  \
    bool plane = c->k[0] == 1 && c->in[0] == 1 && c->out[0] == 1 && Ho > 0 && Wo > 0;                 \
    size_t need = (size_t)(sh * sw * qsp + Nw);                                                       \
    _Pragma("omp parallel for schedule(static)")                                                      \
    for (int64_t p = 0; p < c->N * c->Cout; p++) {                                                    \
      int64_t n = p / c->Cout, oc = p % c->Cout, ic = oc / mult;                                      \
      const T *xp = x + (n * c->Cin + ic) * isp, *wp = w + oc * ksp;                                  \
      T *yp = y + p * osp, b0 = bias ? bias[oc] : (T)0;                                               \
      if (plane && need > NAME##_cap) {                                                               \
        void *m = NULL;                                                                               \
        if (!posix_memalign(&m, GG_RT_ALIGN, need * sizeof(T))) {                                    \
          free(NAME##_buf);                                                                           \
          NAME##_buf = m;                                                                             \
          NAME##_cap = need;                                                                          \
        }                                                                                             \
      }                                                                                               \
      if (!plane || need > NAME##_cap) {                                                              \
        NAME##_direct(c, xp, wp, b0, yp);                                                             \
        epi_run(ep, yp, osp, 1, osp);                                                                 \
        continue;                                                                                     \
      }                                                                                               \
      T *xq = NAME##_buf;                                                                             \
      for (int64_t ph = 0; ph < sh; ph++)                                                             \
        for (int64_t pw = 0; pw < sw; pw++)                                                           \
          phase_##T(xp, H, W, sh, sw, c->pad[1], c->pad[2], Hq, Wq, ph, pw, xq + (ph * sw + pw) * qsp); \
      NAME##_taps(c, xq, Wq, qsp, Nw, wp, b0, xq + sh * sw * qsp);                                   \
      for (int64_t oh = 0; oh < Ho; oh++) memcpy(yp + oh * Wo, xq + sh * sw * qsp + oh * Wq, sizeof(T) * (size_t)Wo); \
      epi_run(ep, yp, osp, 1, osp);                                                                   \
    }                                                                                                 \
  }
DEPTHWISE(depthwise_f32, float)
DEPTHWISE(depthwise_f64, double)

/* im2col: col[(ic, k0, k1, k2), (o0, o1, o2)] = x[ic, o*stride - pad + k*dil] or 0 outside, for icg
 * channels of one image (x points at the group's first channel) */
#define IM2COL(T)                                                                                     \
  static void im2col_##T(const gg_conv *c, const T *xg, int64_t icg, T *col) {                        \
    int64_t osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2];               \
    _Pragma("omp parallel for collapse(2) schedule(static)")                                          \
    for (int64_t ic = 0; ic < icg; ic++)                                                              \
      for (int64_t kk = 0; kk < ksp; kk++) {                                                          \
        int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];        \
        T *row = col + (ic * ksp + kk) * osp;                                                         \
        int64_t s2 = c->stride[2], off = k2 * c->dil[2] - c->pad[2], lo, hi;                          \
        row_inside(off, s2, c->in[2], c->out[2], &lo, &hi);                                           \
        for (int64_t o0 = 0; o0 < c->out[0]; o0++) {                                                  \
          int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];                                \
          for (int64_t o1 = 0; o1 < c->out[1]; o1++) {                                                \
            int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];                              \
            T *r = row + (o0 * c->out[1] + o1) * c->out[2];                                           \
            /* rows are short (7 to 112): plain loops, which vectorize, cost less than memcpy calls */ \
            if (i0 < 0 || i0 >= c->in[0] || i1 < 0 || i1 >= c->in[1]) {                               \
              for (int64_t o2 = 0; o2 < c->out[2]; o2++) r[o2] = 0;                                   \
              continue;                                                                               \
            }                                                                                         \
            const T *xr = xg + (ic * c->in[0] * c->in[1] + i0 * c->in[1] + i1) * c->in[2] + off;      \
            for (int64_t o2 = 0; o2 < lo; o2++) r[o2] = 0;                                            \
            if (s2 == 1) for (int64_t o2 = lo; o2 < hi; o2++) r[o2] = xr[o2];                         \
            else for (int64_t o2 = lo; o2 < hi; o2++) r[o2] = xr[o2 * s2];                            \
            for (int64_t o2 = hi; o2 < c->out[2]; o2++) r[o2] = 0;                                    \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }
IM2COL(float)
IM2COL(double)

/* im2col written straight into the B panels of gg_rt_gemm_packed (one pass, no plain column matrix):
 * row (ic, k0, k1, k2) of the column matrix holds, for every output position, the input it reads at
 * that tap (0 in the padding); a panel's columns are consecutive output positions. One task per
 * panel, which it writes from start to end; the panel's pieces of output rows are found once, and
 * each tap's in-bounds range along the row too (no division per row of the panel). */
static void im2col_pack(const gg_conv *c, const float *x, float *Bp) {
  int64_t osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2], K = c->Cin * ksp;
  int64_t pn = (osp + PK_NR - 1) / PK_NR, s2 = c->stride[2];
  enum { TAPS = 64 };
  int64_t lo[TAPS], hi[TAPS];
  for (int64_t k2 = 0; k2 < c->k[2] && k2 < TAPS; k2++) row_inside(k2 * c->dil[2] - c->pad[2], s2, c->in[2], c->out[2], &lo[k2], &hi[k2]);
  _Pragma("omp parallel for schedule(static)")
  for (int64_t jp = 0; jp < pn; jp++) {
    int64_t w = pk_width(osp, jp);
    struct { int64_t o0, o1, o2, n, j; } seg[PK_NR];   /* the panel's pieces of output rows */
    int ns = 0;
    int64_t o = jp * PK_NR, o2 = o % c->out[2], o1 = o / c->out[2] % c->out[1], o0 = o / (c->out[2] * c->out[1]), j = 0;
    while (j < w && o0 < c->out[0]) {
      int64_t n = c->out[2] - o2 < w - j ? c->out[2] - o2 : w - j;
      seg[ns].o0 = o0; seg[ns].o1 = o1; seg[ns].o2 = o2; seg[ns].n = n; seg[ns].j = j;
      ns++;
      j += n;
      o2 += n;
      if (o2 == c->out[2]) {
        o2 = 0;
        if (++o1 == c->out[1]) { o1 = 0; o0++; }
      }
    }
    int64_t used = j;
    float *d = Bp + jp * K * PK_NR;
    for (int64_t ic = 0; ic < c->Cin; ic++)
      for (int64_t k0 = 0; k0 < c->k[0]; k0++)
        for (int64_t k1 = 0; k1 < c->k[1]; k1++)
          for (int64_t k2 = 0; k2 < c->k[2]; k2++, d += w) {
            int64_t off = k2 * c->dil[2] - c->pad[2], l0, h0;
            if (k2 < TAPS) { l0 = lo[k2]; h0 = hi[k2]; }
            else row_inside(off, s2, c->in[2], c->out[2], &l0, &h0);
            for (int q = 0; q < ns; q++) {
              int64_t i0 = seg[q].o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0], i1 = seg[q].o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];
              int64_t a = seg[q].o2, e = a + seg[q].n;
              float *dr = d + seg[q].j - a;   /* dr[t] is output position t of this output row */
              if (i0 < 0 || i0 >= c->in[0] || i1 < 0 || i1 >= c->in[1]) {
                for (int64_t t = a; t < e; t++) dr[t] = 0;
                continue;
              }
              const float *xr = x + (ic * c->in[0] * c->in[1] + i0 * c->in[1] + i1) * c->in[2] + off;
              int64_t l = l0 < a ? a : l0 > e ? e : l0, h = h0 > e ? e : h0 < l ? l : h0;
              for (int64_t t = a; t < l; t++) dr[t] = 0;
              if (s2 == 1) for (int64_t t = l; t < h; t++) dr[t] = xr[t];
              else for (int64_t t = l; t < h; t++) dr[t] = xr[t * s2];
              for (int64_t t = h; t < e; t++) dr[t] = 0;
            }
            for (int64_t t = used; t < w; t++) d[t] = 0;
          }
  }
}

/* A 2-D convolution without im2col. Stride 1: with the image padded to Hp x Wp, the column matrix's
 * row (ic, kh, kw) at column q = oh * Wp + ow is xpad[ic][kh * dh][kw * dw + q], a run of the padded
 * image starting at ro[row]. Stride (sh, sw): the padded image is split into sh * sw phase images of
 * Hq x Wq = ceil(Hp / sh) x ceil(Wp / sw), phase (ph, pw) holding xpad[i * sh + ph][j * sw + pw]; tap
 * (kh, kw) then reads phase (kh * dh % sh, kw * dw % sw) from (kh * dh / sh, kw * dw / sw) on, again
 * a run per row. Two ways to multiply (the emitter picks the one with less padding in the tiles):
 * - mode 1, weight as A (Cout x K): the image is B, read in place over the wide grid of Wq columns per
 *   output row (the last Wq - Wo unused: Nw = (Ho - 1) * Wq + Wo columns), the valid ones then copied
 *   out (where Wq == Wo the wide grid is the output);
 * - mode 2, image as A, weight as B (K x Cout): output position o reads at offset po[o] = oh * Wq + ow,
 *   so there are no unused columns (49 outputs of 7x7 fill 56 rows, not 64 columns); the product is
 *   the output transposed (positions x Cout), each finished tile stored transposed into y (the
 *   transposed buffer holds the partial sums of K beyond one slice).
 * Stride 1 without padding reads the image as it is. col: ro (2 * K floats, rounded up to 16), po (2 *
 * (positions + 8)), the phase images, the wide or transposed output (the emitter sizes it). */
static void conv_rows(const gg_conv *c, const float *x, const float *wp, const float *bias, float *y, float *col, const gg_epi *ep, int mode) {
  int64_t H = c->in[1], W = c->in[2], sh = c->stride[1], sw = c->stride[2], ph0 = c->pad[1], pw0 = c->pad[2];
  int64_t Hq = (H + 2 * ph0 + sh - 1) / sh, Wq = (W + 2 * pw0 + sw - 1) / sw, Ho = c->out[1], Wo = c->out[2];
  int64_t K = c->Cin * c->k[1] * c->k[2], Nw = (Ho - 1) * Wq + Wo, isp = H * W, osp = Ho * Wo, qsp = Hq * Wq;
  bool copy = sh > 1 || sw > 1 || ph0 || pw0;
  int64_t *ro = (int64_t *)col, *po = ro + (K + 7) / 8 * 8;
  float *xq = (float *)(po + (osp + PK_MR + 7) / 8 * 8), *out2 = xq + (copy ? sh * sw * c->Cin * qsp : 0);
  for (int64_t ic = 0, r = 0; ic < c->Cin; ic++)
    for (int64_t kh = 0; kh < c->k[1]; kh++)
      for (int64_t kw = 0; kw < c->k[2]; kw++) {
        int64_t th = kh * c->dil[1], tw = kw * c->dil[2];
        ro[r++] = ((th % sh * sw + tw % sw) * c->Cin + ic) * qsp + th / sh * Wq + tw / sw;
      }
  if (mode == 2)   /* past the last position: the first (a row of the tile that is not stored) */
    for (int64_t o = 0; o < osp + PK_MR; o++) po[o] = o < osp ? o / Wo * Wq + o % Wo : 0;
  for (int64_t n = 0; n < c->N; n++) {
    const float *xn = x + n * c->Cin * isp, *b = xn;
    float *yn = y + n * c->Cout * osp;
    if (copy) {   /* phase image (ph, pw) of channel ic, row i: xpad row i * sh + ph, every sw-th from pw */
      _Pragma("omp parallel for schedule(static) if(c->Cin * H * W > 32768)")
      for (int64_t t = 0; t < sh * sw * c->Cin; t++) {
        int64_t ph = t / (sw * c->Cin), pw = t / c->Cin % sw, ic = t % c->Cin;
        phase_float(xn + ic * isp, H, W, sh, sw, ph0, pw0, Hq, Wq, ph, pw, xq + t * qsp);
      }
      b = xq;
    }
    if (mode == 2) {
      rows_src a = {b, ro, po};
      gemm_run(osp, c->Cout, K, NULL, &a, wp, NULL, out2, c->Cout, NULL, bias, ep, yn, osp);
      continue;
    }
    rows_src bsrc = {b, ro, NULL};
    float *out = Wq == Wo ? yn : out2;
    gemm_run(c->Cout, Nw, K, wp, NULL, NULL, &bsrc, out, Nw, bias, NULL, out == yn ? ep : NULL, NULL, 0);
    if (out != yn) {   /* the valid columns copied out, then the epilogue on each plane while it is in cache */
      _Pragma("omp parallel for schedule(static) if(c->Cout * osp > 32768)")
      for (int64_t oc = 0; oc < c->Cout; oc++) {
        for (int64_t oh = 0; oh < Ho; oh++) memcpy(yn + (oc * Ho + oh) * Wo, out2 + oc * Nw + oh * Wq, sizeof(float) * (size_t)Wo);
        epi_run(ep, yn + oc * osp, osp, 1, osp);
      }
    }
  }
}

void gg_rt_conv_packed_f32(const gg_conv *c, const float *x, const float *wp, const float *bias, float *y, float *col, const gg_epi *ep, int mode) {
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2];
  if (mode) { conv_rows(c, x, wp, bias, y, col, ep, mode); return; }
  for (int64_t n = 0; n < c->N; n++) {
    im2col_pack(c, x + n * c->Cin * isp, col);
    gg_rt_gemm_packed(c->Cout, osp, c->Cin * ksp, wp, col, y + n * c->Cout * osp, osp, bias, NULL, ep);
  }
}

#define CONV(NAME, T, GEMMF, DW)                                                                      \
  void NAME(const gg_conv *c, const T *x, const T *w, const T *bias, T *y, T *col, const gg_epi *ep) { \
    int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];           \
    int64_t ksp = c->k[0] * c->k[1] * c->k[2], G = c->groups;                                        \
    int64_t icg = c->Cin / G, ocg = c->Cout / G;                                                      \
    if (!c->transposed && icg == 1 && G > 1) {                                                        \
      DW(c, x, w, bias, y, ep);                                                                       \
      return;                                                                                         \
    }                                                                                                 \
    for (int64_t n = 0; n < c->N; n++)                                                                \
      for (int64_t g = 0; g < G; g++) {                                                               \
        const T *xg = x + (n * c->Cin + g * icg) * isp;                                               \
        T *yg = y + (n * c->Cout + g * ocg) * osp;                                                    \
        if (!c->transposed) {                                                                         \
          /* y[oc, o] = w[oc, (ic,k)] @ col[(ic,k), o]; a 1x1 convolution of stride 1 without padding \
           * multiplies the image itself */                                                          \
          bool same = ksp == 1 && c->stride[0] == 1 && c->stride[1] == 1 && c->stride[2] == 1 &&      \
                      c->pad[0] == 0 && c->pad[1] == 0 && c->pad[2] == 0;                             \
          if (!same) im2col_##T(c, xg, icg, col);                                                     \
          GEMMF(ocg, osp, icg * ksp, w + g * ocg * icg * ksp, icg * ksp, 1, same ? xg : col, osp, 1, yg, NULL); \
        } else {                                                                                      \
          /* col[(oc,k), i] = w[ic, (oc,k)]^T @ x[ic, i], then scatter-add into y (col2im) */         \
          GEMMF(ocg * ksp, isp, icg, w + g * icg * ocg * ksp, 1, ocg * ksp, xg, isp, 1, col, NULL);   \
          memset(yg, 0, sizeof(T) * (size_t)(ocg * osp));                                             \
          _Pragma("omp parallel for schedule(static)")                                                \
          for (int64_t oc = 0; oc < ocg; oc++)                                                        \
            for (int64_t kk = 0; kk < ksp; kk++) {                                                    \
              int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];  \
              const T *row = col + (oc * ksp + kk) * isp;                                             \
              for (int64_t i0 = 0; i0 < c->in[0]; i0++) {                                             \
                int64_t o0 = i0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];                          \
                if (o0 < 0 || o0 >= c->out[0]) continue;                                              \
                for (int64_t i1 = 0; i1 < c->in[1]; i1++) {                                           \
                  int64_t o1 = i1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];                        \
                  if (o1 < 0 || o1 >= c->out[1]) continue;                                            \
                  for (int64_t i2 = 0; i2 < c->in[2]; i2++) {                                         \
                    int64_t o2 = i2 * c->stride[2] - c->pad[2] + k2 * c->dil[2];                      \
                    if (o2 < 0 || o2 >= c->out[2]) continue;                                          \
                    yg[oc * osp + (o0 * c->out[1] + o1) * c->out[2] + o2] += row[(i0 * c->in[1] + i1) * c->in[2] + i2]; \
                  }                                                                                   \
                }                                                                                     \
              }                                                                                       \
            }                                                                                         \
        }                                                                                             \
        if (bias || ep) {   /* the bias, then the epilogue, per output plane while it is in cache */  \
          _Pragma("omp parallel for schedule(static) if(ocg * osp > 32768)")                          \
          for (int64_t oc = 0; oc < ocg; oc++) {                                                      \
            if (bias)                                                                                 \
              for (int64_t o = 0; o < osp; o++) yg[oc * osp + o] += bias[g * ocg + oc];               \
            epi_run(ep, yg + oc * osp, osp, 1, osp);                                                  \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }
CONV(gg_rt_conv_f32, float, gg_rt_sgemm, depthwise_f32)
CONV(gg_rt_conv_f64, double, gg_rt_dgemm, depthwise_f64)

/* The weight's (and bias's) gradient of a plain convolution: per image and group, dw += dy (ocg x osp)
 * @ col(x)^T (osp x icg*k), col the forward's im2col; depthwise convolutions sum directly. */
#define CONV_WGRAD(NAME, T, GEMMF)                                                                    \
  void NAME(const gg_conv *c, const T *x, const T *dy, T *dw, T *db, T *col, T *tmp) {               \
    int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2];           \
    int64_t ksp = c->k[0] * c->k[1] * c->k[2], G = c->groups, icg = c->Cin / G, ocg = c->Cout / G;   \
    if (db) {                                                                                         \
      _Pragma("omp parallel for schedule(static)")                                                    \
      for (int64_t oc = 0; oc < c->Cout; oc++) {                                                      \
        double a = 0;                                                                                 \
        for (int64_t n = 0; n < c->N; n++)                                                            \
          for (int64_t o = 0; o < osp; o++) a += dy[(n * c->Cout + oc) * osp + o];                    \
        db[oc] = (T)a;                                                                                \
      }                                                                                               \
    }                                                                                                 \
    if (!dw) return;                                                                                  \
    if (icg == 1 && ocg == 1 && G > 1) {                                                              \
      _Pragma("omp parallel for schedule(static)")                                                    \
      for (int64_t ch = 0; ch < c->Cout; ch++)                                                        \
        for (int64_t kk = 0; kk < ksp; kk++) {                                                        \
          int64_t k0 = kk / (c->k[1] * c->k[2]), k1 = kk / c->k[2] % c->k[1], k2 = kk % c->k[2];      \
          double a = 0;                                                                               \
          for (int64_t n = 0; n < c->N; n++) {                                                        \
            const T *xp = x + (n * c->Cin + ch) * isp, *gp = dy + (n * c->Cout + ch) * osp;           \
            for (int64_t o0 = 0; o0 < c->out[0]; o0++) {                                              \
              int64_t i0 = o0 * c->stride[0] - c->pad[0] + k0 * c->dil[0];                            \
              if (i0 < 0 || i0 >= c->in[0]) continue;                                                 \
              for (int64_t o1 = 0; o1 < c->out[1]; o1++) {                                            \
                int64_t i1 = o1 * c->stride[1] - c->pad[1] + k1 * c->dil[1];                          \
                if (i1 < 0 || i1 >= c->in[1]) continue;                                               \
                const T *xr = xp + (i0 * c->in[1] + i1) * c->in[2], *gr = gp + (o0 * c->out[1] + o1) * c->out[2]; \
                for (int64_t o2 = 0; o2 < c->out[2]; o2++) {                                          \
                  int64_t i2 = o2 * c->stride[2] - c->pad[2] + k2 * c->dil[2];                        \
                  if (i2 >= 0 && i2 < c->in[2]) a += (double)gr[o2] * xr[i2];                         \
                }                                                                                     \
              }                                                                                       \
            }                                                                                         \
          }                                                                                           \
          dw[ch * ksp + kk] = (T)a;                                                                   \
        }                                                                                             \
      return;                                                                                         \
    }                                                                                                 \
    int64_t wn = ocg * icg * ksp;                                                                     \
    memset(dw, 0, sizeof(T) * (size_t)(c->Cout * icg * ksp));                                         \
    for (int64_t n = 0; n < c->N; n++)                                                                \
      for (int64_t g = 0; g < G; g++) {                                                               \
        im2col_##T(c, x + (n * c->Cin + g * icg) * isp, icg, col);                                    \
        GEMMF(ocg, icg * ksp, osp, dy + (n * c->Cout + g * ocg) * osp, osp, 1, col, 1, osp, tmp, NULL); \
        T *d = dw + g * wn;                                                                           \
        _Pragma("omp parallel for schedule(static) if(wn > 32768)")                                   \
        for (int64_t i = 0; i < wn; i++) d[i] += tmp[i];                                              \
      }                                                                                               \
  }
CONV_WGRAD(gg_rt_conv_wgrad_f32, float, gg_rt_sgemm)
CONV_WGRAD(gg_rt_conv_wgrad_f64, double, gg_rt_dgemm)

/* ---------------------------------------------------------------- pooling */

/* Max pooling without indices (inference): a row of outputs at a time, each tap a pass along the
 * row over the columns whose input falls inside the plane (as the depthwise convolution), so the
 * inner loop vectorizes. NaN wins, as in PyTorch. */
#define MAX_POOL_ROWS(NAME, T)                                                                        \
  static void NAME(const gg_pool *p, const T *x, T *y) {                                             \
    _Pragma("omp parallel for schedule(static)")                                                      \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                        \
      for (int64_t oh = 0; oh < p->OH; oh++) {                                                        \
        T *row = y + (pl * p->OH + oh) * p->OW;                                                       \
        for (int64_t ow = 0; ow < p->OW; ow++) row[ow] = (T)-INFINITY;                                \
        for (int64_t kh = 0; kh < p->k[0]; kh++) {                                                    \
          int64_t h = oh * p->stride[0] - p->pad[0] + kh * p->dil[0];                                 \
          if (h < 0 || h >= p->H) continue;                                                           \
          const T *xr = x + (pl * p->H + h) * p->W;                                                   \
          for (int64_t kw = 0; kw < p->k[1]; kw++) {                                                  \
            int64_t off = kw * p->dil[1] - p->pad[1], s = p->stride[1];                               \
            int64_t lo, hi;                                                                           \
            row_inside(off, s, p->W, p->OW, &lo, &hi);                                                \
            for (int64_t ow = lo; ow < hi; ow++) {                                                    \
              T v = xr[ow * s + off];                                                                 \
              row[ow] = v > row[ow] || v != v ? v : row[ow];                                          \
            }                                                                                         \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }
MAX_POOL_ROWS(max_pool_rows_f32, float)
MAX_POOL_ROWS(max_pool_rows_f64, double)

#define POOL(NAME, T, ROWS)                                                                           \
  void NAME(const gg_pool *p, const T *x, T *y, int64_t *idx) {                                      \
    if (p->kind == 0 && !idx) { ROWS(p, x, y); return; }                                              \
    _Pragma("omp parallel for schedule(static)")                                                      \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                        \
      for (int64_t oh = 0; oh < p->OH; oh++)                                                          \
        for (int64_t ow = 0; ow < p->OW; ow++) gg_pool_one_##T(p, x, y, idx, pl, oh, ow);             \
  }
POOL(gg_rt_pool_f32, float, max_pool_rows_f32)
POOL(gg_rt_pool_f64, double, max_pool_rows_f64)
