/* gg_rt.c: the runtime inside every compiled model: the entry points of gcc_graph.h, implemented
 * over the descriptor the generated code provides (gg__desc), and the kernels that are the same for
 * every model: matrix products on its own AVX-512 kernel or BLAS (gg_rt_gemm.c), convolutions and
 * pooling (gg_rt_conv.c), included at the end so that the runtime is one translation unit. It needs
 * libc, libm, libgomp and a CBLAS, nothing else. This file: the ABI (open, run, outputs, buffers),
 * the profile, and training (forward, backward, the optimizer). */
#define _GNU_SOURCE   /* dladdr */
#include "gg_rt.h"

#include <cblas.h>
#include <dlfcn.h>
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


#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)   /* names made from a template's parameters (gg_rt_*_t.h) */

struct gg_model {
  void *map;                /* external weights file, mapped */
  size_t maplen;
  void **w;                 /* every weight's bytes */
  void **mut;               /* private copies of mutated buffers */
  void **own;               /* training: private copies of the parameters the optimizer updates */
  float **opt_m, **opt_v;   /* optimizer state per gradient: momentum / Adam moments */
  int64_t step;             /* optimizer steps taken */
  double lr;                /* the learning rate now (--lr, or gg_set_learning_rate) */
  int accum;                /* micro-batches per update (gg_set_grad_accumulation) */
  pthread_mutex_t lock;     /* serializes runs of models that mutate buffers */
  pthread_mutex_t pool_lock;/* scratch buffers kept between runs: fresh pages cost page faults */
  void *pool[8];
  size_t pool_size[8];
  int dp_world;             /* data-parallel (gg_set_data_parallel): ranks, 0 when off */
  gg_allreduce_fn dp_sum;
  void *dp_ctx;
};

#include "gg_rt_common.c"   /* after the model: its shared entry points read m->lock, m->lr, m->w */

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

/* ---------------------------------------------------------------- profile (the clock; the rest in gg_rt_common.c) */

static __thread double prof_last __attribute__((tls_model("initial-exec")));   /* no __tls_get_addr: the .so needs no ld.so symbols */

/* the time since the thread's last tick is the node's (slot NULL: a run begins) */
void gg_rt_tick(double *slot) {
  double t = now_s();
  if (slot) {
    prof_add(slot, t - prof_last);
    if (trace_path) trace_add(slot, prof_last, t);
  }
  prof_last = t;
}

/* ---------------------------------------------------------------- entry points */

GG_EXPORT void gg_close(gg_model *m) {
  if (!m) return;
  prof_close();
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
  pthread_once(&prof_once, prof_init);
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
    if ((d->blob_size > 0 ? map_self(&m->map, &m->maplen, err, errlen) : map_weights(weights, &m->map, &m->maplen, err, errlen))) { gg_close(m); return 1; }
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
  /* the weights of products, packed for the runtime's kernels (inference models only) */
  for (int j = 0; j < d->npacks; j++) {
    const gg_pack_desc *pd = &d->packs[j];
    if (gg_rt_pack_weight(pd->side, pd->rows, pd->cols, (const char *)m->w[pd->weight] + pd->offset * (pd->side >= 2 ? 2 : 4), pd->srow, pd->scol,
                          &m->w[d->nweights + j])) {
      gg_close(m);
      return gg_rt_fail(err, errlen, "out of memory");
    }
  }
  m->lr = gg__train.lr;
  m->accum = 1;
  /* training: the parameters with gradients get private copies, which the optimizer updates */
  for (int k = 0; k < gg__train.ngrads; k++) {
    int i = gg__train.grad_weight[k];
    if (i < 0 || d->weights[i].mutable_index >= 0 || m->own[i]) continue;
    if (posix_memalign(&m->own[i], GG_RT_ALIGN, (size_t)d->weights[i].nbytes + 1)) { gg_close(m); return gg_rt_fail(err, errlen, "out of memory"); }
    memcpy(m->own[i], m->w[i], (size_t)d->weights[i].nbytes);
    m->w[i] = m->own[i];
  }
  for (int i = 0; i < d->nweights; i++) {   /* tied weights: one storage (the optimizer's copy) */
    int j = weight_storage_of(i);
    if (j >= 0) m->w[i] = m->w[j];
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
    prof_count(0);
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

static void *rt_alloc(size_t bytes) {
  void *p = NULL;
  return posix_memalign(&p, GG_RT_ALIGN, bytes ? bytes : 1) ? NULL : p;
}
static void rt_free(void *p) { free(p); }

/* ---------------------------------------------------------------- data-parallel training */

/* The backward being run on this thread (gg_rt_bucket's model and state). */
static __thread gg_model *dp_model;
static __thread gg_train_state *dp_state;

/* t /= n, for the float types the gradients have */
static void dp_scale(DLTensor *t, int n) {
  int64_t ne = t->shape[0];
  if (t->dtype.code == kDLFloat && t->dtype.bits == 32) { float *p = (float *)t->data; for (int64_t i = 0; i < ne; i++) p[i] /= (float)n; }
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 64) { double *p = (double *)t->data; for (int64_t i = 0; i < ne; i++) p[i] /= n; }
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 16) { uint16_t *p = (uint16_t *)t->data; for (int64_t i = 0; i < ne; i++) p[i] = gg_f2h(gg_h2f(p[i]) / (float)n); }
  else if (t->dtype.code == kDLBfloat) { uint16_t *p = (uint16_t *)t->data; for (int64_t i = 0; i < ne; i++) p[i] = gg_f2bf(gg_bf2f(p[i]) / (float)n); }
}

const char *gg_rt_bucket(int b) {
  gg_model *m = dp_model;
  if (!m || !m->dp_world) return NULL;
  static __thread char why[96];
  DLTensor t;
  if (bucket_tensor(dp_state, b, &t) || m->dp_sum(m->dp_ctx, b, &t)) {
    snprintf(why, sizeof why, "the data-parallel all-reduce of gradient bucket %d failed", b);
    return why;
  }
  dp_scale(&t, m->dp_world);
  return NULL;
}

/* Rank 0's parameters (the ones the optimizer updates) and mutated buffers on every rank: the other
 * ranks zero theirs and all take the sum. */
GG_EXPORT int gg_set_data_parallel(gg_model *m, int world, int rank, gg_allreduce_fn sum, void *ctx, char *err, size_t errlen) {
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (!gg__train.ngrads) return gg_rt_fail(err, errlen, "this model was not compiled for training (gcc-graph compile --train)");
  if (world < 1 || rank < 0 || rank >= world || !sum) return gg_rt_fail(err, errlen, "data-parallel: bad world size %d, rank %d or no all-reduce", world, rank);
  pthread_mutex_lock(&m->lock);
  int rc = 0;
  for (int i = 0; i < gg__desc.nweights && !rc; i++) {
    bool own = gg__desc.weights[i].mutable_index >= 0;
    for (int k = 0; k < gg__train.ngrads; k++) own = own || gg__train.grad_weight[k] == i;
    if (!own || !gg__desc.weights[i].nbytes) continue;
    int64_t n = gg__desc.weights[i].nbytes;
    DLTensor t = {m->w[i], {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, &n, NULL, 0};
    if (rank) memset(m->w[i], 0, (size_t)n);
    if (sum(ctx, -1, &t)) rc = gg_rt_fail(err, errlen, "data-parallel: the broadcast of '%s' from rank 0 failed", gg__desc.weights[i].fqn);
  }
  if (!rc) { m->dp_world = world; m->dp_sum = sum; m->dp_ctx = ctx; }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

GG_EXPORT int gg_nccl_unique_id(void *id, char *err, size_t errlen) {
  (void)id;
  return gg_rt_fail(err, errlen, "NCCL is for CUDA models (--target cuda); a CPU model all-reduces through gg_set_data_parallel");
}

GG_EXPORT int gg_set_data_parallel_nccl(gg_model *m, int world, int rank, const void *id, char *err, size_t errlen) {
  (void)m, (void)world, (void)rank, (void)id;
  return gg_nccl_unique_id(NULL, err, errlen);
}

GG_EXPORT int gg_forward(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  void *outs[256];
  if (train_forward_args(st, in, nin, out, nout, outs, err, errlen) || run_checked(m, in, true, outs, st->sym, err, errlen)) return 1;
  st->ready = true;
  return 0;
}

GG_EXPORT int gg_backward(gg_model *m, gg_train_state *st, const DLTensor *grad_loss, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  DLTensor in[257];
  int64_t one_shape[GG_RT_MAX_RANK];
  void *outs[256];
  static const double one64 = 1;
  static const float one32 = 1;
  void *one = gg__train.loss_dtype.bits == 64 ? (void *)&one64 : (void *)&one32;
  if (train_backward_args(st, grad_loss, one, in, one_shape, outs, err, errlen)) return 1;
  int64_t bytes = gg__train.scratch_bytes(st->sym);
  unsigned char *scratch = scratch_take(m, (size_t)bytes);
  if (!scratch) return gg_rt_fail(err, errlen, "out of memory (%lld bytes of scratch)", (long long)bytes);
  dp_model = m, dp_state = st;
  const char *why = gg__train.run(m->w, m->mut, in, outs, scratch, st->sym);
  dp_model = NULL, dp_state = NULL;
  prof_count(1);
  scratch_give(m, scratch, (size_t)bytes);
  if (why) return gg_rt_fail(err, errlen, "%s", why);
  st->has_grads = true;
  return 0;
}

/* The update of gradient k's parameter p (n elements) from gradient g: gg_step_one on each element,
 * the optimizer state allocated (zeroed) at its first use. */
static int update(gg_model *m, gg_train_state *st, int k, float *p, const float *g, int64_t n, const gg_hyper *h) {
  int kind = gg__train.optimizer;
  if ((kind != 1 || gg__train.momentum != 0) && !m->opt_m[k]) {
    if (posix_memalign((void **)&m->opt_m[k], GG_RT_ALIGN, (size_t)n * sizeof(float) + 1)) { m->opt_m[k] = NULL; return -1; }
    memset(m->opt_m[k], 0, (size_t)n * sizeof(float));
  }
  if (kind != 1 && !m->opt_v[k]) {
    if (posix_memalign((void **)&m->opt_v[k], GG_RT_ALIGN, (size_t)n * sizeof(float) + 1)) { m->opt_v[k] = NULL; return -1; }
    memset(m->opt_v[k], 0, (size_t)n * sizeof(float));
  }
  float *b = m->opt_m[k], *v = m->opt_v[k], *acc = (float *)st->acc[k];
  #pragma omp parallel for schedule(static) if(n > 32768)
  for (int64_t i = 0; i < n; i++) gg_step_one(kind, p + i, g + i, acc ? acc + i : NULL, b ? b + i : NULL, v ? v + i : NULL, h);
  return 0;
}

GG_EXPORT int gg_train_step(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!gg__train.optimizer) return gg_rt_fail(err, errlen, "this model has no optimizer: compile it with --train --optimizer sgd|adam|adamw");
  if (gg_forward(m, st, in, nin, out, nout, err, errlen) || gg_backward(m, st, NULL, err, errlen)) return 1;
  pthread_mutex_lock(&m->lock);
  int rc = train_update_args(st, m->accum, err, errlen);
  gg_hyper h = train_hyper(m->lr, m->step + 1, m->accum, st);
  if (!h.accumulate && !rc) m->step++;
  for (int k = 0; k < gg__train.ngrads && !rc; k++) {
    int i = gg__train.grad_weight[k];
    if (i < 0) continue;   /* an input's gradient: nothing to update */
    int64_t n = numel_of(&st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k]);
    if (update(m, st, k, (float *)m->w[i], (const float *)st->grads[k], n, &h)) rc = gg_rt_fail(err, errlen, "out of memory");
  }
  if (!rc) st->micro = h.accumulate ? st->micro + 1 : 0;
  pthread_mutex_unlock(&m->lock);
  return rc;
}


#include "gg_rt_gemm.c"
#include "gg_rt_conv.c"
#include "gg_rt_attn.c"
