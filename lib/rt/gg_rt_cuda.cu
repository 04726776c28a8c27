/* gg_rt_cuda.cu: the runtime inside every CUDA model (compile --target cuda): the entry points of
 * gcc_graph.h over the descriptor the generated model.cu provides, and the device kernels that are
 * the same for every model (matrix products through cuBLAS, convolution, pooling; attention's and
 * the depthwise convolutions' are in gg_rt_cuda_attn.cu and gg_rt_cuda_dw.cu, built beside it).
 *
 * Inputs and outputs are device DLTensors (kDLCUDA). The weights are uploaded once, at gg_open, into
 * one device allocation; the scratch of a run is one device allocation, kept between runs. The run's
 * launch sequence is captured once per input shape and input/output addresses into a CUDA graph and
 * replayed, so that a small model costs one launch. Work goes to the stream given by gg_set_stream
 * (else the model's own); gg_run returns when it is done. A model serializes its runs: its scratch
 * and graph are per model (open one model per thread to run concurrently). It needs the CUDA
 * runtime and cuBLAS; convolutions run on cuDNN where it can be loaded (dlopen, at the first one),
 * else on im2col + cuBLAS. */
#include "gg_rt.h"

#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


#define GG_BLAS_WS ((size_t)32 << 20)   /* cuBLAS's and cuBLASLt's workspace */

/* A captured launch sequence and what it was captured for: one per kind of call (gg_run, gg_forward,
 * gg_backward, gg_train_step), so that alternating calls replay rather than capture again. */
#define GG_KEY (1 + 64 + 2 * GG_MAX_IO + 3)
enum { SLOT_RUN, SLOT_FORWARD, SLOT_BACKWARD, SLOT_STEP, NSLOTS };
typedef struct gg_slot {
  cudaGraphExec_t exec;
  int64_t key[GG_KEY];
  int nkey;
  cudaStream_t stream;
  bool tuned;               /* a run was made uncaptured for the shapes tuned_syms (lt_fastest) */
  int64_t tuned_syms[64];
} gg_slot;

struct prof_tick { double *slot; cudaEvent_t ev, start; };   /* ev: the node before ends; start: the next begins */

struct gg_model {
  void *map;                /* external weights file, mapped while uploading */
  size_t maplen;
  unsigned char *wdev;      /* every weight, in one device allocation */
  void **w;                 /* each weight's device address */
  void **mut;               /* mutated buffers: their weights' device copies */
  cudaStream_t own, stream; /* the model's stream, and the one runs go to */
  cudaEvent_t legacy;       /* runs on the model's own stream first wait for the legacy default stream's work */
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void *blas_ws;            /* cuBLAS's workspace, given so that it allocates nothing while captured */
  struct lt_plan *plans;    /* cuBLASLt's descriptors and chosen algorithm, one per product shape */
  int nplans, cap_plans;
  unsigned char *scratch;   /* the intermediates of a run (the forward's and the backward's share it) */
  size_t scratch_size;
  pthread_mutex_t lock;
  bool graphs;              /* GCC_GRAPH_CUDA_GRAPHS=0 turns capture off */
  gg_slot slot[NSLOTS];
  cudaLibrary_t *lib;       /* the model's kernels, a library per part (gg_model_desc.kernels), loaded at gg_open */
  cudaKernel_t *kern;       /* by id; NULL where an id is no __global__ kernel */
  int *err_flag;            /* the kernels' index-error flag on the device, and its copy after a run */
  int *err_host;
  void *dnn;                /* cuDNN's handle (cudnnHandle_t), made at the first convolution */
  void *dnn_ws;             /* cuDNN's workspace, grown (outside captures) to its algorithms' largest need */
  size_t dnn_ws_size;
  void **dnn_old;           /* workspaces it outgrew, which graphs captured before may still name (ws_grow) */
  int ndnn_old;
  size_t x3_cap;            /* --precision tf32x3's products (gemm_x3): their split operands' cap, 0: float32's */
  void *x3_ws;              /* their split operands, grown (outside captures) to the largest need */
  size_t x3_size;
  void **x3_old;            /* workspaces it outgrew, which graphs captured before may still name */
  int nx3_old;
  struct dnn_plan *dnn_plans;   /* its descriptors and algorithms, one per convolution shape */
  int ndnn, cap_dnn;
  bool dnn_missing;         /* a float16/bfloat16 convolution found no cuDNN: the run fails */
  bool dnn_wanted;          /* a convolution met no cuDNN handle while captured: make one, capture again */
  /* training */
  gg_train_state *drop;     /* gg_run on a training model: where its forward's saved values go */
  void *one;                /* a 1 of the loss's dtype: the cotangent when none is given */
  double lr;                /* the learning rate now (--lr, or gg_set_learning_rate) */
  int accum;                /* micro-batches per update (gg_set_grad_accumulation) */
  int64_t step;             /* optimizer steps taken */
  float **opt_m, **opt_v;   /* the optimizer's state per gradient, on the device: each inside opt_block */
  void *opt_block;          /* one allocation for it all (zeroed at the first update) */
  gg_hyper *hp_dev, *hp_host;   /* the step's hyperparameters, read by the update kernel at replay */
  size_t wbytes;            /* wdev's size */
  /* data-parallel (gg_set_data_parallel_nccl) */
  void *dp_comm;            /* the NCCL communicator (ncclComm_t), NULL when off */
  void *dp_lean;            /* a second one over the same ranks that uses few SMs (GCC_GRAPH_DP_CTAS), for the
                               buckets that overlap the backward; NULL: dp_comm for every bucket */
  int dp_world;
  bool dp_overlap;          /* all-reduce each bucket when final (GCC_GRAPH_DP_OVERLAP=0: all after the backward) */
  cudaStream_t dp_stream;   /* where the all-reduces run */
  cudaEvent_t dp_fork, dp_join;
  gg_train_state *dp_st;    /* the state of the backward being issued, while its all-reduces may be issued */
  int dp_issued;            /* all-reduces issued on dp_stream since the backward began */
  int dp_err;               /* an NCCL call failed (its result), reported after the run */
  struct prof_tick *ticks;  /* GCC_GRAPH_PROFILE: the events the run's ticks recorded, and the slot of each */
  int nticks, cap_ticks;
  unsigned *gate;           /* GCC_GRAPH_PROFILE: the host's count of released gates (mapped), and its tick count */
  unsigned gate_seq;
};

#include "gg_rt_common.c"   /* after the model: its shared entry points read m->lock, m->lr, m->w */


/* The model whose run is being issued on this thread (the generated code asks for its stream). */
static __thread gg_model *gg_cur;

static int cuda_fail(char *err, size_t errlen, const char *what, cudaError_t e) {
  return gg_rt_fail(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void *gg_cu_stream(void) { return gg_cur ? (void *)gg_cur->stream : NULL; }

/* the name of kernel k<id> in its part's fatbinary */
static const char *kernel_name(int id) {
  static __thread char name[24];
  snprintf(name, sizeof name, "k%d", id);
  return name;
}

/* A failed launch leaves its error for cudaGetLastError, which the run reads at its end. */
void gg_cu_launch(int id, unsigned grid, unsigned block, void **args) {
  cudaLaunchKernel((const void *)gg_cur->kern[id], dim3(grid), dim3(block), args, 0, gg_cur->stream);
}

unsigned gg_cu_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return b < 1 ? 1 : b > (1 << 20) ? (1u << 20) : (unsigned)b;
}

static void lt_free(gg_model *m);
static void dnn_free(gg_model *m);
static void dp_free(gg_model *m);
static bool dnn_make_handle(gg_model *m);

static int rt_zero(void *p, size_t bytes) { return cudaMemset(p, 0, bytes) != cudaSuccess; }

static void *rt_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
  return p;
}
static void rt_free(void *p) {
  if (p) cudaFree(p);
}

/* ---------------------------------------------------------------- profile: GPU time per node
 * With GCC_GRAPH_PROFILE a model launches its kernels directly (no CUDA graph: a graph's kernels
 * cannot be told apart) and each tick, between two nodes, records an event where the node before
 * ends, then queues a gate (a one-thread kernel that waits until the host has passed the next tick),
 * then an event where the next node begins. So a node's kernels are all queued before the GPU starts
 * them, and the time between its two events is its kernels' own, back to back as a graph would run
 * them, without the gaps where the GPU waited for the host's launches. A gate gives up after 1 ms (a
 * node that waits for the GPU, such as cuBLASLt timing its candidates on the first run, releases the
 * gates first: gate_open). Without a mapped host word (cudaHostAlloc failed) ticks are events only. */
__global__ void prof_gate(const volatile unsigned *released, unsigned want) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while ((int)(*released - want) < 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 1000000ull) break;
  }
}

/* GCC_GRAPH_PROFILER_REPLAYS=1: cudaProfilerStart() before the first replay of a captured graph, so
 * that `ncu --profile-from-start off` profiles the replays only. A profiler that serializes and
 * times each kernel of the first, uncaptured run would make cuBLASLt's timing of its candidates
 * choose at random, and the products it then measures would not be the ones a run uses. */
static bool prof_replays, prof_replays_started;

/* let the GPU through every gate queued so far (before the host waits for the GPU, and after a run) */
static void gate_open(gg_model *m) {
  if (m->gate) __atomic_store_n(m->gate, m->gate_seq, __ATOMIC_SEQ_CST);
}

void gg_rt_tick(double *slot) {
  gg_model *m = gg_cur;
  if (!m) return;
  if (m->nticks == m->cap_ticks) {
    int cap = m->cap_ticks ? 2 * m->cap_ticks : 256;
    struct prof_tick *t = (struct prof_tick *)realloc(m->ticks, (size_t)cap * sizeof *t);
    if (!t) return;
    memset(t + m->cap_ticks, 0, (size_t)(cap - m->cap_ticks) * sizeof *t);
    m->ticks = t;
    m->cap_ticks = cap;
  }
  if (!m->gate && cudaHostAlloc((void **)&m->gate, sizeof *m->gate, cudaHostAllocMapped) != cudaSuccess) {
    m->gate = NULL;
    cudaGetLastError();
  }
  struct prof_tick *t = &m->ticks[m->nticks];
  if ((!t->ev && cudaEventCreate(&t->ev) != cudaSuccess) || (!t->start && cudaEventCreate(&t->start) != cudaSuccess) ||
      cudaEventRecord(t->ev, m->stream) != cudaSuccess)
    return;   /* the run reports it */
  if (m->gate) {
    unsigned want = ++m->gate_seq;
    prof_gate<<<1, 1, 0, m->stream>>>(m->gate, want);
  }
  if (cudaEventRecord(t->start, m->stream) != cudaSuccess) return;
  if (m->gate) __atomic_store_n(m->gate, m->gate_seq - 1, __ATOMIC_SEQ_CST);   /* the node before was all queued */
  t->slot = slot;
  m->nticks++;
}

/* after a run whose stream is synchronized: each node's time from the events (from the tick before's
 * start to its own end), into its slot and the trace (placed on the host's clock as the run's span
 * ending now) */
static void prof_collect(gg_model *m) {
  float span = 0;
  if (m->nticks >= 2 && cudaEventElapsedTime(&span, m->ticks[0].ev, m->ticks[m->nticks - 1].ev) == cudaSuccess) {
    double t0 = now_s() - span * 1e-3;
    for (int i = 1; i < m->nticks; i++) {
      float ms = 0, at = 0;
      if (cudaEventElapsedTime(&ms, m->ticks[i - 1].start, m->ticks[i].ev) != cudaSuccess ||
          cudaEventElapsedTime(&at, m->ticks[0].ev, m->ticks[i - 1].start) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      double d = ms * 1e-3;
      if (m->ticks[i].slot) {
        prof_add(m->ticks[i].slot, d);
        if (trace_path) trace_add(m->ticks[i].slot, t0 + at * 1e-3, t0 + at * 1e-3 + d);
      }
    }
  }
  cudaGetLastError();
  m->nticks = 0;
}

/* ---------------------------------------------------------------- open, close */

static void drop_graphs(gg_model *m) {
  for (int i = 0; i < NSLOTS; i++)
    if (m->slot[i].exec) { cudaGraphExecDestroy(m->slot[i].exec); m->slot[i].exec = NULL; }
}

GG_EXPORT void gg_close(gg_model *m) {
  if (!m) return;
  prof_close();
  for (int i = 0; i < m->cap_ticks; i++) {
    if (m->ticks[i].ev) cudaEventDestroy(m->ticks[i].ev);
    if (m->ticks[i].start) cudaEventDestroy(m->ticks[i].start);
  }
  free(m->ticks);
  if (m->gate) cudaFreeHost(m->gate);
  drop_graphs(m);
  if (m->blas) cublasDestroy(m->blas);
  lt_free(m);
  dnn_free(m);
  if (m->lt) cublasLtDestroy(m->lt);
  dp_free(m);
  if (m->own) cudaStreamDestroy(m->own);
  if (m->legacy) cudaEventDestroy(m->legacy);
  if (m->err_host) cudaFreeHost(m->err_host);
  for (int q = 0; m->lib && q < gg__desc.nparts; q++) if (m->lib[q]) cudaLibraryUnload(m->lib[q]);
  free(m->lib);
  free(m->kern);
  rt_free(m->err_flag);
  if (m->hp_host) cudaFreeHost(m->hp_host);
  gg_train_state_free(m->drop);
  rt_free(m->opt_block);
  free(m->opt_m);
  free(m->opt_v);
  rt_free(m->hp_dev);
  rt_free(m->one);
  cudaFree(m->blas_ws);
  for (int i = 0; i < m->nx3_old; i++) cudaFree(m->x3_old[i]);
  free(m->x3_old);
  cudaFree(m->x3_ws);
  cudaFree(m->scratch);
  cudaFree(m->wdev);
  if (m->map) munmap(m->map, m->maplen);
  free(m->w);
  free(m->mut);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

GG_EXPORT int gg_open(gg_model **out, const char *weights, char *err, size_t errlen) {
  const gg_model_desc *d = &gg__desc;
  *out = NULL;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0)
    return gg_rt_fail(err, errlen, "this model runs on a CUDA GPU and none is usable: %s", ce != cudaSuccess ? cudaGetErrorString(ce) : "no device");
  gg_model *m = (gg_model *)calloc(1, sizeof *m);
  if (!m) return gg_rt_fail(err, errlen, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  const char *ge = getenv("GCC_GRAPH_CUDA_GRAPHS"), *pr = getenv("GCC_GRAPH_PROFILER_REPLAYS");
  pthread_once(&prof_once, prof_init);
  prof_replays = pr && *pr && strcmp(pr, "0");
  m->graphs = !(ge && !strcmp(ge, "0")) && !gg_rt_prof_on;   /* a profile times each node: no graph */
  const char *xe = getenv("GCC_GRAPH_TF32X3");   /* 0: off; N: a cap of N MiB (tests use a small one to take K in chunks) */
  long xmb = xe && *xe ? strtol(xe, NULL, 10) : 256;
  m->x3_cap = (size_t)(xmb < 0 ? 0 : xmb > 65536 ? 65536 : xmb) << 20;
  m->w = (void **)calloc((size_t)d->nweights + 1, sizeof *m->w);
  m->mut = (void **)calloc((size_t)d->nmutable + 1, sizeof *m->mut);
  m->opt_m = (float **)calloc((size_t)gg__train.ngrads + 1, sizeof *m->opt_m);
  m->opt_v = (float **)calloc((size_t)gg__train.ngrads + 1, sizeof *m->opt_v);
  if (!m->w || !m->mut || !m->opt_m || !m->opt_v) { gg_close(m); return gg_rt_fail(err, errlen, "out of memory"); }
  m->lr = gg__train.lr;
  m->accum = 1;
  const unsigned char *base = d->blob;
  if (!base && d->nweights) {
    if ((d->blob_size > 0 ? map_self(&m->map, &m->maplen, err, errlen) : map_weights(weights, &m->map, &m->maplen, err, errlen))) { gg_close(m); return 1; }
    base = (const unsigned char *)m->map;
  }
  /* the weights: one upload, each 256-byte aligned (tied ones once); the model's copies are its own (training updates them) */
  size_t total = 0;
  for (int i = 0; i < d->nweights; i++)
    if (weight_storage_of(i) < 0) total += ((size_t)d->weights[i].nbytes + 255) & ~(size_t)255;
  if ((ce = cudaMalloc((void **)&m->wdev, total + 256)) != cudaSuccess) { gg_close(m); return cuda_fail(err, errlen, "cannot allocate the weights on the GPU", ce); }
  size_t at = 0;
  for (int i = 0; i < d->nweights; i++) {
    const gg_weight_desc *wd = &d->weights[i];
    int j = weight_storage_of(i);   /* tied weights: one storage */
    if (j >= 0) { m->w[i] = m->w[j]; continue; }
    m->w[i] = m->wdev + at;
    if (wd->nbytes && (ce = cudaMemcpy(m->w[i], base + wd->offset, (size_t)wd->nbytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
      gg_close(m);
      return cuda_fail(err, errlen, "cannot upload the weights", ce);
    }
    if (wd->mutable_index >= 0) m->mut[wd->mutable_index] = m->w[i];
    at += ((size_t)wd->nbytes + 255) & ~(size_t)255;
  }
  m->wbytes = total;
  if (m->map) { munmap(m->map, m->maplen); m->map = NULL; }
  if ((ce = cudaStreamCreateWithFlags(&m->own, cudaStreamNonBlocking)) != cudaSuccess ||
      (ce = cudaEventCreateWithFlags(&m->legacy, cudaEventDisableTiming)) != cudaSuccess) {
    gg_close(m);
    return cuda_fail(err, errlen, "cannot create a stream", ce);
  }
  m->stream = m->own;
  if (cublasCreate(&m->blas) != CUBLAS_STATUS_SUCCESS) { m->blas = NULL; gg_close(m); return gg_rt_fail(err, errlen, "cannot start cuBLAS"); }
  if (cublasLtCreate(&m->lt) != CUBLAS_STATUS_SUCCESS) { m->lt = NULL; gg_close(m); return gg_rt_fail(err, errlen, "cannot start cuBLASLt"); }
  const size_t ws = GG_BLAS_WS;
  if ((ce = cudaMalloc(&m->blas_ws, ws)) != cudaSuccess) { gg_close(m); return cuda_fail(err, errlen, "cannot allocate cuBLAS's workspace", ce); }
  cublasSetWorkspace(m->blas, m->blas_ws, ws);
  cublasSetMathMode(m->blas, CUBLAS_DEFAULT_MATH);   /* float32 stays float32 (no TF32), as PyTorch's default */
  /* the kernels: nvcc's fatbinaries of model.cu's parts, loaded once for every device; each part's
   * gg_dev_errp points at the model's one error flag */
  m->lib = (cudaLibrary_t *)calloc((size_t)d->nparts + 1, sizeof *m->lib);
  m->kern = (cudaKernel_t *)calloc((size_t)d->nkernels + 1, sizeof *m->kern);
  if (!m->lib || !m->kern || !(m->err_flag = (int *)rt_alloc(sizeof(int))) || rt_zero(m->err_flag, sizeof(int))) {
    gg_close(m);
    return gg_rt_fail(err, errlen, "cannot set up the model's kernels: out of memory");
  }
  for (int q = 0; q < d->nparts; q++) {
    void *p = NULL;
    size_t bytes = 0;
    if ((ce = cudaLibraryLoadData(&m->lib[q], d->kernels[q], NULL, NULL, 0, NULL, NULL, 0)) != cudaSuccess) {
      m->lib[q] = NULL;
      gg_close(m);
      return cuda_fail(err, errlen, "cannot load the model's kernels (built for another GPU? compile with --cuda-arch)", ce);
    }
    if ((ce = cudaLibraryGetGlobal(&p, &bytes, m->lib[q], "gg_dev_errp")) != cudaSuccess || bytes != sizeof m->err_flag ||
        (ce = cudaMemcpy(p, &m->err_flag, sizeof m->err_flag, cudaMemcpyHostToDevice)) != cudaSuccess) {
      gg_close(m);
      return cuda_fail(err, errlen, "cannot set up the model's error flag", ce);
    }
  }
  for (int k = 0; k < d->nkernels; k++)
    if (d->kernel_part[k] >= 0 && (ce = cudaLibraryGetKernel(&m->kern[k], m->lib[d->kernel_part[k]], kernel_name(k))) != cudaSuccess) {
      gg_close(m);
      return cuda_fail(err, errlen, "cannot find a kernel of the model", ce);
    }
  if ((ce = cudaMallocHost((void **)&m->err_host, sizeof(int))) != cudaSuccess) {
    m->err_host = NULL;
    gg_close(m);
    return gg_rt_fail(err, errlen, "cannot set up the model's error flag");
  }
  *m->err_host = 0;
  if (gg__train.ngrads) {   /* training: the default cotangent, and the step's hyperparameters */
    double one64 = 1;
    float one32 = 1;
    bool wide = gg__train.loss_dtype.bits == 64;
    if (!(m->one = rt_alloc(8)) || !(m->hp_dev = (gg_hyper *)rt_alloc(sizeof(gg_hyper))) ||
        cudaMallocHost((void **)&m->hp_host, sizeof(gg_hyper)) != cudaSuccess ||
        cudaMemcpy(m->one, wide ? (const void *)&one64 : (const void *)&one32, wide ? 8 : 4, cudaMemcpyHostToDevice) != cudaSuccess) {
      if (!m->hp_host) cudaGetLastError();
      gg_close(m);
      return gg_rt_fail(err, errlen, "cannot set up training on the GPU");
    }
  }
  *out = m;
  return 0;
}

/* Work goes to `stream` (a cudaStream_t; NULL: the model's own). */
GG_EXPORT int gg_set_stream(gg_model *m, void *stream) {
  if (!m) return 1;
  pthread_mutex_lock(&m->lock);
  m->stream = stream ? (cudaStream_t)stream : m->own;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

/* ---------------------------------------------------------------- runs */

/* What one call issues: the forward (FWD), the backward (BWD), and the optimizer's update (UPD). */
enum { FWD = 1, BWD = 2, UPD = 4 };
typedef struct run_args {
  int what;
  const DLTensor *in;       /* the forward's inputs and outputs (user outputs, then saved values) */
  void *const *outs;
  const DLTensor *bin;      /* the backward's inputs (saved values, cotangent) and gradients */
  void *const *gouts;
  const int64_t *sym;
  gg_train_state *st;       /* UPD: its table of tensors */
} run_args;

static void launch_update(gg_model *m, gg_train_state *st);

/* The call's kernels, then the copy of the error flag to the host (all captured into the graph).
 * tuning: the run before a capture, which leaves out the update. */
static void dp_reduce(gg_model *m, int b);
static void enqueue(gg_model *m, const run_args *a) {
  if (a->what & FWD) gg__desc.run(m->w, m->mut, a->in, a->outs, m->scratch, a->sym);
  if (a->what & BWD) {
    /* data-parallel: the bucket all-reduces fork off to dp_stream as the backward finishes each and
     * join before what follows */
    m->dp_st = m->dp_comm ? a->st : NULL;
    m->dp_issued = 0;
    gg__train.run(m->w, m->mut, a->bin, a->gouts, m->scratch, a->sym);
    for (int b = 0; m->dp_st && !m->dp_overlap && b < gg__train.nbuckets; b++) dp_reduce(m, b);
    if (m->dp_issued) {
      cudaEventRecord(m->dp_join, m->dp_stream);
      cudaStreamWaitEvent(m->stream, m->dp_join, 0);
    }
    m->dp_st = NULL;
  }
  if (a->what & UPD) launch_update(m, a->st);
  cudaMemcpyAsync(m->err_host, m->err_flag, sizeof(int), cudaMemcpyDeviceToHost, m->stream);
}

/* Issue the call on m->stream: replay the slot's graph when the key (shapes, addresses) is the one it
 * was captured for, else capture it again (updating the executable graph in place when it can). */
static int issue(gg_model *m, gg_slot *s, const int64_t *key, int nk, const run_args *a, char *err, size_t errlen) {
  gg_cur = m;
  if (s->exec && s->stream == m->stream && nk == s->nkey && !memcmp(key, s->key, sizeof *key * (size_t)nk)) {
    if (prof_replays && !__atomic_exchange_n(&prof_replays_started, true, __ATOMIC_SEQ_CST)) cudaProfilerStart();
    cudaError_t ce = cudaGraphLaunch(s->exec, m->stream);
    return ce == cudaSuccess ? 0 : cuda_fail(err, errlen, "cannot launch the model's graph", ce);
  }
  cublasSetStream(m->blas, m->stream);
  if (!m->graphs || gg__desc.random) {   /* random ops take a fresh draw each launch: not replayed */
    enqueue(m, a);
    return 0;
  }
  /* a first run for new shapes, uncaptured, lets cuBLASLt time its candidates on the real operands
   * and makes cuDNN's handle. It is this call's run, and the graph captured after it (which captures
   * without running) serves the next calls: a call never runs twice, as a backward cannot (its
   * gradients take the memory of the saved values it reads) nor a buffer update */
  bool ran = false;
  size_t nsym = (size_t)(gg__desc.nsyms < 64 ? gg__desc.nsyms : 64);
  if (!s->tuned || memcmp(s->tuned_syms, a->sym, sizeof *a->sym * nsym)) {
    enqueue(m, a);
    ran = true;
    s->tuned = true;
    memcpy(s->tuned_syms, a->sym, sizeof *a->sym * nsym);
  }
  cudaGraph_t g = NULL;
  cudaError_t ce = cudaSuccess;
  for (int attempt = 0; attempt < 2; attempt++) {
    m->dnn_wanted = false;
    m->dnn_missing = false;
    ce = cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess) {   /* a stream that cannot be captured (the legacy default stream): launch directly */
      cudaGetLastError();
      if (!ran) enqueue(m, a);
      return 0;
    }
    enqueue(m, a);
    ce = cudaStreamEndCapture(m->stream, &g);
    if (ce != cudaSuccess) return cuda_fail(err, errlen, "cannot capture the model's launches", ce);
    /* a convolution met no cuDNN handle, which cannot be made while capturing: make it, capture again */
    if (!m->dnn_wanted || !dnn_make_handle(m)) break;
    cudaGraphDestroy(g);
    g = NULL;
  }
  bool updated = false;
  if (s->exec) {
    cudaGraphExecUpdateResultInfo info;
    updated = cudaGraphExecUpdate(s->exec, g, &info) == cudaSuccess;
    if (!updated) { cudaGetLastError(); cudaGraphExecDestroy(s->exec); s->exec = NULL; }
  }
  if (!updated && (ce = cudaGraphInstantiate(&s->exec, g, 0)) != cudaSuccess) {
    s->exec = NULL;
    cudaGraphDestroy(g);
    return cuda_fail(err, errlen, "cannot instantiate the model's graph", ce);
  }
  cudaGraphDestroy(g);
  memcpy(s->key, key, sizeof *key * (size_t)nk);
  s->nkey = nk;
  s->stream = m->stream;
  if (ran) return 0;
  ce = cudaGraphLaunch(s->exec, m->stream);
  return ce == cudaSuccess ? 0 : cuda_fail(err, errlen, "cannot launch the model's graph", ce);
}

/* Run a call with m->lock held: scratch for it, issue, wait, and the errors kernels left. */
static int run_locked(gg_model *m, int slot, const run_args *a, char *err, size_t errlen) {
  int rc = 0;
  size_t bytes = 0;
  if (a->what & FWD) bytes = (size_t)gg__desc.scratch_bytes(a->sym);
  if (a->what & BWD) {
    size_t b = (size_t)gg__train.scratch_bytes(a->sym);
    if (b > bytes) bytes = b;
  }
  if (bytes > m->scratch_size) {
    cudaStreamSynchronize(m->stream);
    cudaFree(m->scratch);
    m->scratch = NULL;
    m->scratch_size = 0;
    drop_graphs(m);
    cudaError_t ce = cudaMalloc((void **)&m->scratch, bytes);
    if (ce != cudaSuccess) rc = cuda_fail(err, errlen, "out of GPU memory for scratch", ce);
    else m->scratch_size = bytes;
  }
  /* the key: the call, the symbols, the tensors' addresses, the training state and its buffers' generation */
  int64_t key[GG_KEY];
  int nk = 0;
  key[nk++] = a->what;
  for (int i = 0; i < gg__desc.nsyms && i < 64; i++) key[nk++] = a->sym[i];
  if (a->what & FWD) {
    for (int i = 0; i < gg__desc.ninputs; i++) key[nk++] = (int64_t)(intptr_t)((const char *)a->in[i].data + a->in[i].byte_offset);
    for (int i = 0; i < gg__desc.noutputs; i++) key[nk++] = (int64_t)(intptr_t)a->outs[i];
  }
  if (a->st) {
    key[nk++] = (int64_t)(intptr_t)a->st;
    key[nk++] = a->st->gen;
  }
  if (a->what & BWD) key[nk++] = (int64_t)(intptr_t)((const char *)a->bin[gg__train.nsaved].data + a->bin[gg__train.nsaved].byte_offset);
  /* on the model's own stream (non-blocking), after what the legacy default stream has queued: inputs
   * written there (cudaMemcpy, PyTorch's default stream) are complete when the kernels read them */
  if (!rc && m->stream == m->own && (cudaEventRecord(m->legacy, cudaStreamLegacy) != cudaSuccess || cudaStreamWaitEvent(m->own, m->legacy, 0) != cudaSuccess))
    rc = gg_rt_fail(err, errlen, "cannot order the run after the default stream");
  if (!rc) rc = issue(m, &m->slot[slot], key, nk, a, err, errlen);
  gate_open(m);
  if (!rc) {
    cudaError_t ce = cudaStreamSynchronize(m->stream);
    if (ce == cudaSuccess) ce = cudaGetLastError();
    if (ce != cudaSuccess) rc = cuda_fail(err, errlen, "the model's kernels failed", ce);
  }
  if (gg_rt_prof_on) {
    if (!rc) {
      if (a->what & FWD) prof_count(0);
      if (a->what & BWD) prof_count(1);
      prof_collect(m);
    }
    m->nticks = 0;
  }
  if (!rc && m->dp_err) {
    rc = gg_rt_fail(err, errlen, "data-parallel: an NCCL all-reduce failed (ncclResult_t %d)", m->dp_err);
    m->dp_err = 0;
    drop_graphs(m);
  }
  if (!rc && m->dnn_missing) {   /* the call was issued without a convolution: not to be replayed */
    rc = gg_rt_fail(err, errlen, "float16, bfloat16 and channels-last convolutions need cuDNN (libcudnn.so.9 next to the CUDA toolkit's libraries), which could not be loaded (--no-channels-last runs --precision tf32 convolutions without it)");
    m->dnn_missing = false;
    drop_graphs(m);
  }
  if (!rc && *m->err_host) {   /* a kernel met an index out of range: say which, and clear the flag */
    rc = gg_rt_fail(err, errlen, "%s", gg__desc.device_error(*m->err_host));
    *m->err_host = 0;
    cudaMemsetAsync(m->err_flag, 0, sizeof(int), m->stream);
    cudaStreamSynchronize(m->stream);
  }
  gg_cur = NULL;
  return rc;
}

/* An inference run. A training model's forward also writes the values it saves: into m->drop's. */
static int run_checked(gg_model *m, const DLTensor *in, void **outs, const int64_t *sym, char *err, size_t errlen) {
  pthread_mutex_lock(&m->lock);
  int rc = 0;
  if (gg__train.nsaved) {
    if (!m->drop) rc = gg_train_state_new(m, &m->drop, err, errlen);
    if (!rc) {
      memcpy(m->drop->sym, sym, sizeof m->drop->sym);
      rc = train_saved_outs(m->drop, outs, err, errlen);
    }
  }
  run_args a = {FWD, in, outs, NULL, NULL, sym, m->drop};
  if (!rc) rc = run_locked(m, SLOT_RUN, &a, err, errlen);
  pthread_mutex_unlock(&m->lock);
  return rc;
}

GG_EXPORT int gg_run(gg_model *m, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  int64_t sym[64];
  void *outs[GG_MAX_IO + 256];
  if (check_call(m, in, nin, nout, sym, err, errlen) || check_outputs(sym, out, nout, outs, err, errlen)) return 1;
  return run_checked(m, in, outs, sym, err, errlen);
}

typedef struct owned { DLManagedTensor mt; int64_t shape[GG_RT_MAX_RANK]; } owned;
static void owned_free(DLManagedTensor *t) {
  if (t) { cudaFree(t->dl_tensor.data); free(t); }
}

GG_EXPORT int gg_run_alloc(gg_model *m, const DLTensor *in, int nin, DLManagedTensor **out, int nout, char *err, size_t errlen) {
  int64_t sym[64];
  void *outs[GG_MAX_IO + 256];
  if (check_call(m, in, nin, nout, sym, err, errlen)) return 1;
  for (int i = 0; i < nout; i++) out[i] = NULL;
  for (int i = 0; i < nout; i++) {
    owned *o = (owned *)calloc(1, sizeof *o);
    if (!o) goto oom;
    DLTensor *t = &o->mt.dl_tensor;
    t->ndim = gg__desc.output_ndims[i];
    t->dtype = gg__desc.output_dtypes[i];
    t->device.device_type = kDLCUDA;
    cudaGetDevice(&t->device.device_id);
    t->shape = o->shape;
    gg__desc.output_shape(i, sym, o->shape);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= o->shape[d];
    if (cudaMalloc(&t->data, (size_t)(n * (t->dtype.bits / 8)) + 1) != cudaSuccess) { free(o); goto oom; }
    o->mt.deleter = owned_free;
    out[i] = &o->mt;
    outs[i] = t->data;
  }
  if (run_checked(m, in, outs, sym, err, errlen)) goto fail;
  return 0;
oom:
  gg_rt_fail(err, errlen, "out of GPU memory for the outputs");
fail:
  for (int i = 0; i < nout; i++) { owned_free(out[i]); out[i] = NULL; }
  return 1;
}

GG_EXPORT int gg_mutated_buffer(const gg_model *m, int i, const char **name, DLTensor *v) { return m ? mutated_buffer(m->mut, i, name, v) : 1; }

/* Device memory for programs with no CUDA of their own (the gcc-graph driver moves tensors with
 * these): allocate, free, copy to (to_device) or from the GPU. */
GG_EXPORT void *gg_device_alloc(size_t bytes) {
  void *p = NULL;
  return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}
GG_EXPORT void gg_device_free(void *p) { cudaFree(p); }
GG_EXPORT int gg_device_copy(void *dst, const void *src, size_t bytes, int to_device) {
  return cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* ---------------------------------------------------------------- training */

/* The update of every parameter in one launch, in chunks of GG_OPT_CHUNK elements, a block each:
 * tensor t of the state's table has chunks [chunk0, chunk0 + its count), which a block finds by
 * binary search. (A block row per tensor, each as wide as the largest, started 1024 blocks for
 * every bias: BERT-base's update took 1.31 ms for 3.1 GB, half the copy rate.) */
#define GG_OPT_CHUNK 16384
typedef struct gg_opt_tensor {
  float *w;
  const float *g;
  float *acc, *b, *v;       /* the accumulated gradient, the optimizer's state (NULL where unused) */
  int64_t n;
  int64_t chunk0;           /* its first chunk */
} gg_opt_tensor;

__global__ void opt_step(int kind, const gg_opt_tensor *t, int nt, const gg_hyper *hp) {
  const int64_t c = blockIdx.x;
  int lo = 0, hi = nt - 1;
  while (lo < hi) {   /* the last tensor whose first chunk is at or before c */
    int mid = (lo + hi + 1) / 2;
    if (t[mid].chunk0 <= c) lo = mid;
    else hi = mid - 1;
  }
  const gg_opt_tensor T = t[lo];
  const gg_hyper h = *hp;
  const int64_t i0 = (c - T.chunk0) * GG_OPT_CHUNK, i1 = i0 + GG_OPT_CHUNK < T.n ? i0 + GG_OPT_CHUNK : T.n;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
    gg_step_one(kind, T.w + i, T.g + i, T.acc ? T.acc + i : NULL, T.b ? T.b + i : NULL, T.v ? T.v + i : NULL, &h);
}

static void launch_update(gg_model *m, gg_train_state *st) {
  int nt = (int)(st->table_bytes / sizeof(gg_opt_tensor));
  if (!nt || !st->opt_chunks) return;
  opt_step<<<(unsigned)st->opt_chunks, 256, 0, m->stream>>>(gg__train.optimizer, (const gg_opt_tensor *)st->table, nt, m->hp_dev);
}

/* Before a step: the optimizer's state on the device (zeroed at its first use), and the state's table
 * of tensors for the update kernel, written again when a buffer moved. */
static int update_table(gg_model *m, gg_train_state *st, char *err, size_t errlen) {
  int kind = gg__train.optimizer;
  bool moved = false;
  if (!m->opt_block) {   /* the moments (Adam) or momentum (SGD) of every parameter: one block, zeros */
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
      size_t at = 0;
      for (int k = 0; k < gg__train.ngrads; k++) {
        if (gg__train.grad_weight[k] < 0) continue;
        size_t bytes = ((size_t)numel_of(&st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k]) * sizeof(float) + 255) & ~(size_t)255;
        float **slot[2] = {kind != 1 || gg__train.momentum != 0 ? &m->opt_m[k] : NULL, kind != 1 ? &m->opt_v[k] : NULL};
        for (int j = 0; j < 2; j++)
          if (slot[j]) {
            if (pass) *slot[j] = (float *)((unsigned char *)m->opt_block + at);
            at += bytes;
          }
      }
      if (!pass) {
        total = at;
        if (!(m->opt_block = rt_alloc(total + 1)) || cudaMemset(m->opt_block, 0, total + 1) != cudaSuccess)
          return gg_rt_fail(err, errlen, "out of GPU memory for the optimizer's state");
      }
    }
    moved = true;
  }
  if (!moved && st->table && st->table_gen == st->gen) return 0;   /* the table on the device is current */
  gg_opt_tensor *t = (gg_opt_tensor *)calloc((size_t)gg__train.ngrads + 1, sizeof *t);
  if (!t) return gg_rt_fail(err, errlen, "out of memory");
  int nt = 0;
  int64_t chunks = 0;
  for (int k = 0; k < gg__train.ngrads; k++) {
    int i = gg__train.grad_weight[k];
    if (i < 0) continue;
    int64_t n = numel_of(&st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k]);
    if (!n) continue;
    t[nt++] = (gg_opt_tensor){(float *)m->w[i], (const float *)st->grads[k], (float *)st->acc[k], m->opt_m[k], m->opt_v[k], n, chunks};
    chunks += (n + GG_OPT_CHUNK - 1) / GG_OPT_CHUNK;
  }
  st->opt_chunks = chunks;
  size_t bytes = sizeof *t * (size_t)nt;
  rt_free(st->table);
  st->table = rt_alloc(bytes ? bytes : 1);
  st->table_bytes = st->table ? bytes : 0;
  st->gen++;   /* a captured step reads the table at its address */
  st->table_gen = st->gen;
  int rc = !st->table || (bytes && cudaMemcpy(st->table, t, bytes, cudaMemcpyHostToDevice) != cudaSuccess) ? gg_rt_fail(err, errlen, "cannot set up the update") : 0;
  free(t);
  return rc;
}

GG_EXPORT int gg_forward(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  void *outs[GG_MAX_IO + 256];
  pthread_mutex_lock(&m->lock);
  run_args a = {FWD, in, outs, NULL, NULL, st->sym, st};
  int rc = train_forward_args(st, in, nin, out, nout, outs, err, errlen) || run_locked(m, SLOT_FORWARD, &a, err, errlen);
  st->ready = !rc;
  pthread_mutex_unlock(&m->lock);
  return rc;
}

GG_EXPORT int gg_backward(gg_model *m, gg_train_state *st, const DLTensor *grad_loss, char *err, size_t errlen) {
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  DLTensor bin[257];
  int64_t one_shape[GG_RT_MAX_RANK];
  void *gouts[256];
  pthread_mutex_lock(&m->lock);
  run_args a = {BWD, NULL, NULL, bin, gouts, st->sym, st};
  int rc = train_backward_args(st, grad_loss, m->one, bin, one_shape, gouts, err, errlen) || run_locked(m, SLOT_BACKWARD, &a, err, errlen);
  if (!rc) st->has_grads = true;
  pthread_mutex_unlock(&m->lock);
  return rc;
}

/* The whole step (forward, backward, update or accumulation) as one captured graph; the learning
 * rate and the step's bias corrections reach it through m->hp_dev, written before each replay. */
GG_EXPORT int gg_train_step(gg_model *m, gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, char *err, size_t errlen) {
  if (!gg__train.optimizer) return gg_rt_fail(err, errlen, "this model has no optimizer: compile it with --train --optimizer sgd|adam|adamw");
  if (!m || !st) return gg_rt_fail(err, errlen, "model or training state is missing");
  void *outs[GG_MAX_IO + 256], *gouts[256];
  DLTensor bin[257];
  int64_t one_shape[GG_RT_MAX_RANK];
  pthread_mutex_lock(&m->lock);
  int rc = train_forward_args(st, in, nin, out, nout, outs, err, errlen);
  if (!rc) {
    st->ready = true;
    rc = train_backward_args(st, NULL, m->one, bin, one_shape, gouts, err, errlen) || train_update_args(st, m->accum, err, errlen) ||
         update_table(m, st, err, errlen);
  }
  gg_hyper h = train_hyper(m->lr, m->step + 1, m->accum, st);
  if (!rc) {
    *m->hp_host = h;
    cudaError_t ce = cudaMemcpyAsync(m->hp_dev, m->hp_host, sizeof h, cudaMemcpyHostToDevice, m->stream);
    if (ce != cudaSuccess) rc = cuda_fail(err, errlen, "cannot pass the step's learning rate", ce);
  }
  run_args a = {FWD | BWD | UPD, in, outs, bin, gouts, st->sym, st};
  if (!rc) rc = run_locked(m, SLOT_STEP, &a, err, errlen);
  st->ready = false;   /* the backward consumed the saved values (train_backward_args) */
  st->has_grads = !rc;
  if (!rc) {
    if (!h.accumulate) m->step++;
    st->micro = h.accumulate ? st->micro + 1 : 0;
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}


/* ---------------------------------------------------------------- data-parallel training through NCCL */

/* NCCL's entry points, loaded at the first use (libnccl.so.2 of the CUDA installation or of PyTorch's
 * wheels, found by the dynamic loader), so that a model that never runs data-parallel needs no NCCL.
 * The types are NCCL's stable C ABI (nccl.h): results and enums are ints, a communicator a pointer. */
typedef struct { char internal[128]; } gg_nccl_id;
static struct {
  bool tried, ok;
  char why[200];
  int (*get_unique_id)(gg_nccl_id *);
  int (*comm_init_rank)(void **, int, gg_nccl_id, int);
  int (*all_reduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
  int (*broadcast)(const void *, void *, size_t, int, int, void *, cudaStream_t);
  int (*comm_destroy)(void *);
  const char *(*error_string)(int);
  int (*comm_split)(void *, int, int, void **, void *);   /* ncclCommSplit (2.18), optional */
} nccl;
/* ncclConfig_t as NCCL 2.27 lays it out (its size and version tell a later NCCL which fields are set) */
typedef struct {
  size_t size;
  unsigned magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare, trafficClass;
  const char *commName;
  int collnetEnable, CTAPolicy;
} gg_nccl_config;
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;
enum { NCCL_UINT8 = 1, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9, NCCL_AVG = 4 };

static bool nccl_load(char *err, size_t errlen) {
  pthread_mutex_lock(&nccl_lock);
  if (!nccl.tried) {
    nccl.tried = true;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(nccl.why, sizeof nccl.why, "data-parallel training needs NCCL (libnccl.so.2), which could not be loaded: %s", dlerror());
    else {
      *(void **)&nccl.get_unique_id = dlsym(h, "ncclGetUniqueId");
      *(void **)&nccl.comm_init_rank = dlsym(h, "ncclCommInitRank");
      *(void **)&nccl.all_reduce = dlsym(h, "ncclAllReduce");
      *(void **)&nccl.broadcast = dlsym(h, "ncclBroadcast");
      *(void **)&nccl.comm_destroy = dlsym(h, "ncclCommDestroy");
      *(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString");
      *(void **)&nccl.comm_split = dlsym(h, "ncclCommSplit");
      nccl.ok = nccl.get_unique_id && nccl.comm_init_rank && nccl.all_reduce && nccl.broadcast && nccl.comm_destroy && nccl.error_string;
      if (!nccl.ok) snprintf(nccl.why, sizeof nccl.why, "libnccl.so.2 lacks an entry point gcc-graph needs (NCCL 2.10 or later)");
    }
  }
  pthread_mutex_unlock(&nccl_lock);
  if (!nccl.ok) gg_rt_fail(err, errlen, "%s", nccl.why);
  return nccl.ok;
}

static void dp_free(gg_model *m) {
  if (m->dp_lean) nccl.comm_destroy(m->dp_lean);
  if (m->dp_comm) nccl.comm_destroy(m->dp_comm);
  if (m->dp_stream) cudaStreamDestroy(m->dp_stream);
  if (m->dp_fork) cudaEventDestroy(m->dp_fork);
  if (m->dp_join) cudaEventDestroy(m->dp_join);
  m->dp_comm = m->dp_lean = NULL, m->dp_stream = NULL, m->dp_fork = m->dp_join = NULL;
}

/* The mean over the ranks of bucket b, in place, on dp_stream after what m->stream has issued so far. */
static void dp_reduce(gg_model *m, int b) {
  DLTensor t;
  if (bucket_tensor(m->dp_st, b, &t)) return;
  int dt = t.dtype.code == kDLBfloat ? NCCL_BFLOAT16 : t.dtype.bits == 64 ? NCCL_FLOAT64 : t.dtype.bits == 16 ? NCCL_FLOAT16 : NCCL_FLOAT32;
  cudaEventRecord(m->dp_fork, m->stream);
  cudaStreamWaitEvent(m->dp_stream, m->dp_fork, 0);
  /* the last bucket is final at the end of the backward, with nothing left to overlap: every SM NCCL wants */
  void *comm = m->dp_lean && m->dp_overlap && b + 1 < gg__train.nbuckets ? m->dp_lean : m->dp_comm;
  int r = nccl.all_reduce(t.data, t.data, (size_t)t.shape[0], dt, NCCL_AVG, comm, m->dp_stream);
  if (r && !m->dp_err) m->dp_err = r;
  m->dp_issued++;
}

const char *gg_rt_bucket(int b) {
  gg_model *m = gg_cur;
  if (m && m->dp_st && m->dp_overlap) dp_reduce(m, b);
  return NULL;
}

GG_EXPORT int gg_nccl_unique_id(void *id, char *err, size_t errlen) {
  if (!id) return gg_rt_fail(err, errlen, "no buffer for the unique id");
  if (!nccl_load(err, errlen)) return 1;
  int r = nccl.get_unique_id((gg_nccl_id *)id);
  return r ? gg_rt_fail(err, errlen, "ncclGetUniqueId: %s", nccl.error_string(r)) : 0;
}

/* Join the NCCL clique of world_size ranks, then take rank 0's weights (all of them, one broadcast). */
GG_EXPORT int gg_set_data_parallel_nccl(gg_model *m, int world, int rank, const void *id, char *err, size_t errlen) {
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (!gg__train.ngrads) return gg_rt_fail(err, errlen, "this model was not compiled for training (gcc-graph compile --train)");
  if (world < 1 || rank < 0 || rank >= world || !id) return gg_rt_fail(err, errlen, "data-parallel: bad world size %d, rank %d or no unique id", world, rank);
  if (!nccl_load(err, errlen)) return 1;
  pthread_mutex_lock(&m->lock);
  cudaStreamSynchronize(m->stream);
  drop_graphs(m);
  dp_free(m);
  int rc = 0, r;
  gg_nccl_id uid;
  memcpy(&uid, id, sizeof uid);
  if ((r = nccl.comm_init_rank(&m->dp_comm, world, uid, rank))) {
    m->dp_comm = NULL;
    rc = gg_rt_fail(err, errlen, "ncclCommInitRank (rank %d of %d): %s", rank, world, nccl.error_string(r));
  } else if (cudaStreamCreateWithFlags(&m->dp_stream, cudaStreamNonBlocking) != cudaSuccess ||
             cudaEventCreateWithFlags(&m->dp_fork, cudaEventDisableTiming) != cudaSuccess ||
             cudaEventCreateWithFlags(&m->dp_join, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    rc = gg_rt_fail(err, errlen, "data-parallel: cannot create a stream");
  } else if ((r = nccl.broadcast(m->wdev, m->wdev, m->wbytes, NCCL_UINT8, 0, m->dp_comm, m->stream)) ||
             cudaStreamSynchronize(m->stream) != cudaSuccess) {
    rc = gg_rt_fail(err, errlen, "data-parallel: the broadcast of the weights from rank 0 failed: %s", r ? nccl.error_string(r) : "CUDA error");
  }
  if (!rc && nccl.comm_split) {
    /* The buckets that overlap the backward all-reduce on GCC_GRAPH_DP_CTAS SMs at most (default 4;
     * "efficiency": NCCL's CTA policy of that name; 0: one communicator for all), so that the backward
     * keeps the others (BERT-base on 2 H200: scaling 0.955 -> 0.962-0.965, docs/distributed.md). Every rank
     * must see the same setting: the split is collective. */
    const char *ctas = getenv("GCC_GRAPH_DP_CTAS");
    int n = ctas ? atoi(ctas) : 4;
    bool eff = ctas && !strcmp(ctas, "efficiency");
    if (n > 0 || eff) {
      gg_nccl_config cfg = {sizeof cfg, 0xcafebeefu, 22700, INT_MIN, INT_MIN, INT_MIN, INT_MIN, NULL, INT_MIN, INT_MIN, "gcc-graph lean", INT_MIN, INT_MIN};
      if (n > 0) cfg.minCTAs = 1, cfg.maxCTAs = n;
      else cfg.CTAPolicy = 1;
      if (nccl.comm_split(m->dp_comm, 0, rank, &m->dp_lean, &cfg)) m->dp_lean = NULL;   /* then one communicator */
    }
  }
  if (rc) dp_free(m);
  else {
    const char *ov = getenv("GCC_GRAPH_DP_OVERLAP");
    m->dp_overlap = !(ov && !strcmp(ov, "0"));
    m->dp_world = world;
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

GG_EXPORT int gg_set_data_parallel(gg_model *m, int world, int rank, gg_allreduce_fn sum, void *ctx, char *err, size_t errlen) {
  (void)m, (void)world, (void)rank, (void)sum, (void)ctx;
  return gg_rt_fail(err, errlen, "a CUDA model all-reduces through NCCL: gg_nccl_unique_id and gg_set_data_parallel_nccl");
}

/* ---------------------------------------------------------------- matrix products */

template <typename T> __global__ void bias_rows(int64_t n, int64_t N, const T *bias, T *y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] = bias[i % N];
}

/* y = relu?(y + res) in float (double for float64), where cuBLASLt did not run the product */
__global__ void res_relu(int dt, int64_t n, const void *res, int relu, void *y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if (dt == 1) {
      double v = ((double *)y)[i] + (res ? ((const double *)res)[i] : 0.0);
      ((double *)y)[i] = relu && v < 0 ? 0.0 : v;
    } else {
      float v = dt_ld(dt, y, i) + (res ? dt_ld(dt, res, i) : 0.0f);
      dt_st(dt, y, i, relu && v < 0 ? 0.0f : v);
    }
  }
}

/* cuBLASLt, for single products in float32/16/bfloat16: its heuristic picks among more kernels than
 * the classic API (given the workspace and the operands' alignment), and adds a bias in the epilogue
 * instead of a pass of its own. Descriptors and the chosen algorithm are kept per shape. */
typedef struct lt_key {
  int dt, ta, tb, bias, align, relu, res;
  int64_t M, N, K, lda, ldb;
} lt_key;
struct lt_plan {
  lt_key k;
  bool ok;   /* false: cuBLASLt has no algorithm for it; use the classic API */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
};

static void lt_free(gg_model *m) {
  for (int i = 0; i < m->nplans; i++) {
    struct lt_plan *p = &m->plans[i];
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
  }
  free(m->plans);
  m->plans = NULL;
  m->nplans = m->cap_plans = 0;
}

static int align_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 2;
}

/* Bytes per element of the output of the runtime's dtype codes: 0 float32, 1 float64, 2 float16,
 * 3 bfloat16, 4 float32 with TF32 arithmetic (--precision tf32), 5 and 6 bfloat16 and float16
 * operands with a float32 output (C and D: a product cuBLASLt's epilogue widens), 7 float32 (tf32x3) */
static size_t dt_size(int dt) { return dt == 0 || dt >= 4 ? 4 : dt == 1 ? 8 : 2; }

/* the code of the output's element type (res_relu's) */
static int dt_out(int dt) { return dt >= 5 ? 0 : dt; }

/* the GPU held for `ns` nanoseconds: the launches queued meanwhile then run back to back */
__global__ void spin_ns(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}

/* Time cuBLASLt's candidate algorithms on the product's operands (the output goes to a buffer of
 * its own) and return the fastest; the first, the heuristic's choice, when timing is not possible.
 * Each candidate runs once untimed, then LT_REPS times behind a spin kernel that holds the GPU while
 * the host queues them, so the events time the kernels back to back as a graph runs them, not the
 * host's launches (a 5 us product launched from the host measured its launch cost, and the choice
 * among candidates within a few percent of each other came out differently from run to run). */
enum { LT_REPS = 10 };
static int lt_fastest(struct lt_plan *p, const cublasLtMatmulHeuristicResult_t *r, int n, const void *A, const void *B, const void *bias, const void *res) {
  gg_model *m = gg_cur;
  size_t es = dt_size(p->k.dt);
  void *tmp = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  int best = 0;
  float best_ms = 1e30f, al = 1, be = res ? 1.0f : 0.0f;   /* a residual read as C, as the product will */
  gate_open(m);   /* the timing below waits for the GPU */
  if (n > 1 && cudaMalloc(&tmp, (size_t)(p->k.M * p->k.N) * es) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
      cudaEventCreate(&e1) == cudaSuccess &&
      (!bias || cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) == CUBLAS_STATUS_SUCCESS)) {
    for (int i = 0; i < n; i++) {
      bool ok = true;
      for (int rep = 0; rep <= LT_REPS && ok; rep++) {
        if (rep == 1) {
          spin_ns<<<1, 1, 0, m->stream>>>(20000ull * LT_REPS);   /* 20 us a launch, more than one costs the host */
          cudaEventRecord(e0, m->stream);
        }
        ok = cublasLtMatmul(m->lt, p->op, &al, B, p->a, A, p->b, &be, res ? res : tmp, p->c, tmp, p->c, &r[i].algo, m->blas_ws, GG_BLAS_WS, m->stream) ==
             CUBLAS_STATUS_SUCCESS;
      }
      float ms = 0;
      if (ok && cudaEventRecord(e1, m->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
          cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best_ms) {
        best_ms = ms;
        best = i;
      }
    }
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (tmp) { cudaStreamSynchronize(m->stream); cudaFree(tmp); }
  cudaGetLastError();
  return best;
}

/* The plan for a product, made on first use. In the column-major view cuBLASLt's A is our B. Outside
 * a graph capture (the run before a capture) the heuristic's first candidates are timed. */
static struct lt_plan *lt_plan_for(const lt_key *k, const void *A, const void *B, const void *bias, const void *res) {
  gg_model *m = gg_cur;
  for (int i = 0; i < m->nplans; i++)
    if (!memcmp(&m->plans[i].k, k, sizeof *k)) return &m->plans[i];
  if (m->nplans == m->cap_plans) {
    int cap = m->cap_plans ? 2 * m->cap_plans : 16;
    struct lt_plan *np = (struct lt_plan *)realloc(m->plans, (size_t)cap * sizeof *np);
    if (!np) return NULL;
    m->plans = np;
    m->cap_plans = cap;
  }
  struct lt_plan *p = &m->plans[m->nplans++];
  memset(p, 0, sizeof *p);
  p->k = *k;
  cudaDataType t = k->dt == 0 || k->dt == 4 ? CUDA_R_32F : k->dt == 2 || k->dt == 6 ? CUDA_R_16F : CUDA_R_16BF, tc = k->dt >= 5 ? CUDA_R_32F : t;
  cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = k->bias ? (k->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS) : k->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  cublasLtMatmulPreference_t pref = NULL;
  size_t ws = GG_BLAS_WS;
  uint32_t al = (uint32_t)k->align;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  bool tune = cudaStreamIsCapturing(m->stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone;
  cublasLtMatmulHeuristicResult_t r[8];
  int found = 0;
  bool ok = cublasLtMatmulDescCreate(&p->op, k->dt == 4 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&p->a, t, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&p->b, t, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&p->c, tc, k->N, k->M, k->N) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoGetHeuristic(m->lt, p->op, p->a, p->b, p->c, p->c, pref, tune ? 8 : 1, r, &found) == CUBLAS_STATUS_SUCCESS &&
            found > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ok) p->algo = r[tune ? lt_fastest(p, r, found, A, B, bias, res) : 0].algo;
  p->ok = ok;
  return p;
}

/* A workspace (cuDNN's, gemm_x3's) grown to `need` bytes, in a run outside a capture (nothing can be
 * allocated inside one). The one it replaces is kept until gg_close if a captured graph may name it,
 * else freed once the work queued on the stream is done. False (nothing changed) if no memory. */
static bool ws_grow(gg_model *m, void **ws, size_t *size, void ***old, int *nold, size_t need) {
  gate_open(m);   /* cudaFree waits for the GPU */
  bool graphs = false;
  for (int i = 0; i < NSLOTS; i++) graphs |= m->slot[i].exec != NULL;
  if (*ws && graphs) {
    void **o = (void **)realloc(*old, sizeof *o * (size_t)(*nold + 1));
    if (!o) return false;
    *old = o;
  }
  void *nw = NULL;
  if (cudaMalloc(&nw, need) != cudaSuccess) { cudaGetLastError(); return false; }
  if (*ws && graphs) (*old)[(*nold)++] = *ws;
  else if (*ws) { cudaStreamSynchronize(m->stream); cudaFree(*ws); }
  *ws = nw;
  *size = need;
  return true;
}

/* ---------------------------------------------------------------- float32 products on TF32 tensor cores
 * --precision tf32x3 (code 7): each float32 operand element x is split into b = x rounded to TF32 (10
 * mantissa bits, to nearest) and s = (x - b) rounded to TF32, both exact TF32 values, and a @ b is
 * computed as a_b @ b_b + a_b @ b_s + a_s @ b_b ("3xTF32"): what is dropped (a_s @ b_s and s's
 * rounding) is about 2^-22 of each term, but the tensor cores' float32 accumulation truncates at each
 * step, which over a long K leaves about 2^-16 (measured on the H200: BERT-base's output 4.8e-5 from
 * float64, float32's 1.3e-6, TF32's 5.5e-4), at about twice the float32 FMA rate (TF32 ~400 TFLOP/s,
 * a third of it against 51 for cuBLAS's float32). One TF32 product over K' = 3K: A3 = [a_b | a_b |
 * a_s] and B3 = [b_b ; b_s ; b_b], in chunks of K where the split operands would pass the workspace's
 * cap (256 MiB; GCC_GRAPH_TF32X3=N: N MiB, 0: float32's products). An infinite element gives NaN
 * where float32 gives +-inf (inf * 0 in a cross term). */
__device__ static inline float tf32_rn(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;   /* inf, NaN */
  unsigned r = (u + 0x1000u) & 0xffffe000u;           /* to nearest, ties away from zero */
  if ((r & 0x7f800000u) == 0x7f800000u) r = u & 0xffffe000u;   /* rounding up would overflow: truncate */
  return __uint_as_float(r);
}

/* One operand's K-chunk (R x KC, element (r, k) at src[r * sr + k * sk]) as its three parts along K:
 * kin: dst is R x 3KC (K the fast dim), else 3KC x R; pat 0: [b, b, s] (the left operand), 1: [b, s, b] */
__global__ void x3_split(int64_t R, int64_t KC, const float *src, int64_t sr, int64_t sk, int kin, int pat, float *dst) {
  int64_t n = R * KC;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = kin ? i / KC : i % R, k = kin ? i % KC : i / R;
    float x = src[r * sr + k * sk], b = tf32_rn(x), s = isfinite(x) ? tf32_rn(x - b) : 0.0f;
    float p1 = pat ? s : b, p2 = pat ? b : s;
    if (kin) {
      float *d = dst + r * 3 * KC + k;
      d[0] = b, d[KC] = p1, d[2 * KC] = p2;
    } else {
      float *d = dst + k * R + r;
      d[0] = b, d[KC * R] = p1, d[2 * KC * R] = p2;
    }
  }
}

/* C = alpha * A @ B + beta * C (+ bias, + res, relu) of one float32 product by three TF32
 * products; false (nothing done) where it does not pay (small products) or cannot run (no workspace) */
static bool gemm_x3(int64_t M, int64_t N, int64_t K, double alpha, const float *A, int64_t sam, int64_t sak, const float *B, int64_t sbk, int64_t sbn,
                    double beta, void *C, const void *bias, const void *res, int relu) {
  gg_model *m = gg_cur;
  if (!m->x3_cap || M < 16 || N < 16 || K < 16 || (double)M * (double)N * (double)K < 67108864.0) return false;
  size_t per = 12 * (size_t)(M + N);   /* bytes of the split operands per column of K */
  int64_t KC = K;
  if (per * (size_t)KC > m->x3_cap) KC = (int64_t)(m->x3_cap / per) & ~(int64_t)3;
  if (KC < K && KC < 64) return false;   /* chunks too thin to pay */
  size_t abytes = ((size_t)12 * (size_t)M * (size_t)KC + 255) & ~(size_t)255, need = abytes + (size_t)12 * (size_t)N * (size_t)KC;
  if (need > m->x3_size) {   /* grow, outside a capture only */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
    if (cudaStreamIsCapturing(m->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone ||
        !ws_grow(m, &m->x3_ws, &m->x3_size, &m->x3_old, &m->nx3_old, need))
      return false;
  }
  float *A3 = (float *)m->x3_ws, *B3 = (float *)((char *)m->x3_ws + abytes);
  bool akin = sak == 1 || sam != 1, bkin = sbk == 1 && sbn != 1;   /* each part in its source's memory order */
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    int64_t kc = K - k0 < KC ? K - k0 : KC;
    bool first = k0 == 0, last = k0 + kc == K;
    x3_split<<<gg_cu_blocks(M * kc), 256, 0, m->stream>>>(M, kc, A + k0 * sak, sam, sak, akin, 0, A3);
    x3_split<<<gg_cu_blocks(N * kc), 256, 0, m->stream>>>(N, kc, B + k0 * sbk, sbn, sbk, bkin, 1, B3);
    gg_cu_gemm_ep(4, M, N, 3 * kc, alpha, A3, akin ? 3 * kc : 1, akin ? 1 : M, 0, B3, bkin ? 1 : N, bkin ? 3 * kc : 1, 0, first ? beta : 1.0, C, 1,
                  first ? bias : NULL, first ? res : NULL, last ? relu : 0);
  }
  return true;
}

/* Row-major C = A @ B is column-major C^T = B^T A^T. An operand with a unit stride along its columns
 * is row-major (op N in the column-major view), with a unit stride along its rows the transpose.
 * With `bias` (length N, beta 0): C = alpha * A @ B + bias on every row. dt: 0 float32, 1 float64,
 * 2 float16, 3 bfloat16, 4 float32 with TF32 tensor-core arithmetic (--precision tf32), 5 and 6 bfloat16 and float16 operands with a float32 C (and bias): dt_size;
 * 7 float32 as three TF32 products (--precision tf32x3: gemm_x3; float32's where it does not pay). */
void gg_cu_gemm(int dt, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t sam, int64_t sak, int64_t sba, const void *B,
                int64_t sbk, int64_t sbn, int64_t sbb, double beta, void *C, int64_t batch, const void *bias) {
  gg_cu_gemm_ep(dt, M, N, K, alpha, A, sam, sak, sba, B, sbk, sbn, sbb, beta, C, batch, bias, NULL, 0);
}

/* With `res` (beta 0) cuBLASLt reads it as its C (beta 1) and writes our C as its D; its epilogue
 * applies the bias, then the ReLU: relu(A @ B + bias + res), rounded once. */
void gg_cu_gemm_ep(int dt, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t sam, int64_t sak, int64_t sba, const void *B,
                   int64_t sbk, int64_t sbn, int64_t sbb, double beta, void *C, int64_t batch, const void *bias, const void *res, int relu) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (dt == 7) {   /* --precision tf32x3; where the split does not pay or cannot run, float32's product */
    if (batch == 1 && gemm_x3(M, N, K, alpha, (const float *)A, sam, sak, (const float *)B, sbk, sbn, beta, C, bias, res, relu)) return;
    dt = 0;
  }
  if (res && beta != 0) {   /* C already holds a term: the product first, then the pass */
    gg_cu_gemm_ep(dt, M, N, K, alpha, A, sam, sak, sba, B, sbk, sbn, sbb, beta, C, batch, bias, NULL, 0);
    res_relu<<<gg_cu_blocks(M * N * batch), 256, 0, gg_cur->stream>>>(dt_out(dt), M * N * batch, res, relu, C);
    return;
  }
  cudaStream_t st = gg_cur->stream;
  size_t es = dt_size(dt);
  bool ta = sak != 1 || (sam == 1 && K == 1 && M > 1), tb = sbn != 1 || (sbk == 1 && N == 1 && K > 1);
  int64_t lda = ta ? sak : sam, ldb = tb ? sbn : sbk;
  if (!ta && lda < K) lda = K;
  if (ta && lda < M) lda = M;
  if (!tb && ldb < N) ldb = N;
  if (tb && ldb < K) ldb = K;
  if (lda < 1) lda = 1;
  if (ldb < 1) ldb = 1;
  if (K == 0 && beta == 0 && !bias && !res) { cudaMemsetAsync(C, 0, (size_t)(M * N * batch) * es, st); return; }
  if (K > 0 && batch == 1 && dt != 1) {
    int al = align_of(A), ab = align_of(B), ac = align_of(C), ad = bias ? align_of(bias) : 16, ar = res ? align_of(res) : 16;
    lt_key k;
    memset(&k, 0, sizeof k);
    k.dt = dt, k.ta = ta, k.tb = tb, k.bias = bias != NULL, k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.relu = relu != 0, k.res = res != NULL;
    k.align = al < ab ? al : ab;
    if (ac < k.align) k.align = ac;
    if (ad < k.align) k.align = ad;
    if (ar < k.align) k.align = ar;
    struct lt_plan *p = lt_plan_for(&k, A, B, bias, res);
    if (p && p->ok && (!bias || cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) == CUBLAS_STATUS_SUCCESS)) {
      float al32 = (float)alpha, be32 = res ? 1.0f : (float)beta;
      const void *c = res ? res : C;
      if (cublasLtMatmul(gg_cur->lt, p->op, &al32, B, p->a, A, p->b, &be32, c, p->c, C, p->c, &p->algo, gg_cur->blas_ws, GG_BLAS_WS, st) ==
          CUBLAS_STATUS_SUCCESS)
        return;
    }
  }
  if (bias) {   /* the classic API has no epilogue: the bias first, then C += A @ B */
    if (dt == 0 || dt >= 4) bias_rows<float><<<gg_cu_blocks(M * N * batch), 256, 0, st>>>(M * N * batch, N, (const float *)bias, (float *)C);
    else if (dt == 1) bias_rows<double><<<gg_cu_blocks(M * N * batch), 256, 0, st>>>(M * N * batch, N, (const double *)bias, (double *)C);
    else bias_rows<unsigned short><<<gg_cu_blocks(M * N * batch), 256, 0, st>>>(M * N * batch, N, (const unsigned short *)bias, (unsigned short *)C);
    beta = 1;
  }
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dt == 4) {   /* float32 in and out, TF32 products, float32 accumulation */
    float al = (float)alpha, be = (float)beta;
    cublasGemmStridedBatchedEx(gg_cur->blas, opb, opa, (int)N, (int)M, (int)K, &al, B, CUDA_R_32F, (int)ldb, sbb, A, CUDA_R_32F, (int)lda, sba, &be, C,
                               CUDA_R_32F, (int)N, M * N, (int)batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
  } else if (dt >= 2) {   /* float16 / bfloat16 in, out too (or float32: 5, 6), float32 arithmetic */
    float al = (float)alpha, be = (float)beta;
    cudaDataType t = dt == 2 || dt == 6 ? CUDA_R_16F : CUDA_R_16BF, tc = dt >= 5 ? CUDA_R_32F : t;
    cublasGemmStridedBatchedEx(gg_cur->blas, opb, opa, (int)N, (int)M, (int)K, &al, B, t, (int)ldb, sbb, A, t, (int)lda, sba, &be, C, tc, (int)N, M * N,
                               (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else if (dt) {
    double al = alpha, be = beta;
    cublasDgemmStridedBatched(gg_cur->blas, opb, opa, (int)N, (int)M, (int)K, &al, (const double *)B, (int)ldb, sbb, (const double *)A, (int)lda, sba,
                              &be, (double *)C, (int)N, M * N, (int)batch);
  } else {
    float al = (float)alpha, be = (float)beta;
    cublasSgemmStridedBatched(gg_cur->blas, opb, opa, (int)N, (int)M, (int)K, &al, (const float *)B, (int)ldb, sbb, (const float *)A, (int)lda, sba,
                              &be, (float *)C, (int)N, M * N, (int)batch);
  }
  if (res || relu) res_relu<<<gg_cu_blocks(M * N * batch), 256, 0, st>>>(dt_out(dt), M * N * batch, res, relu, C);
}

/* ---------------------------------------------------------------- convolution */

/* col[(ic, k), o] of one image's group of icg channels */
template <typename T> __global__ void im2col(gg_conv c, const T *x, int64_t icg, T *col) {
  int64_t osp = c.out[0] * c.out[1] * c.out[2], ksp = c.k[0] * c.k[1] * c.k[2], n = icg * ksp * osp;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = i % osp, kk = i / osp % ksp, ic = i / (osp * ksp);
    int64_t o2 = o % c.out[2], o1 = o / c.out[2] % c.out[1], o0 = o / (c.out[1] * c.out[2]);
    int64_t k2 = kk % c.k[2], k1 = kk / c.k[2] % c.k[1], k0 = kk / (c.k[1] * c.k[2]);
    int64_t i0 = o0 * c.stride[0] - c.pad[0] + k0 * c.dil[0], i1 = o1 * c.stride[1] - c.pad[1] + k1 * c.dil[1],
            i2 = o2 * c.stride[2] - c.pad[2] + k2 * c.dil[2];
    bool in = i0 >= 0 && i0 < c.in[0] && i1 >= 0 && i1 < c.in[1] && i2 >= 0 && i2 < c.in[2];
    col[i] = in ? x[((ic * c.in[0] + i0) * c.in[1] + i1) * c.in[2] + i2] : (T)0;
  }
}

template <typename T> __global__ void bias_fill(int64_t planes, int64_t C, int64_t sp, const T *bias, T *y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < planes * sp; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = bias ? bias[i / sp % C] : (T)0;
}

/* Any convolution (groups, transposed, dilation), one output element per thread. */
template <typename T> __global__ void conv_direct(gg_conv c, const T *x, const T *w, const T *bias, T *y) {
  int64_t osp = c.out[0] * c.out[1] * c.out[2], ksp = c.k[0] * c.k[1] * c.k[2], n = c.N * c.Cout * osp;
  int64_t icg = c.Cin / c.groups, ocg = c.Cout / c.groups;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = i % osp, oc = i / osp % c.Cout, b = i / (osp * c.Cout), g = oc / ocg;
    int64_t o2 = o % c.out[2], o1 = o / c.out[2] % c.out[1], o0 = o / (c.out[1] * c.out[2]);
    T acc = bias ? bias[oc] : (T)0;
    for (int64_t ic = g * icg; ic < (g + 1) * icg; ic++) {
      const T *xp = x + (b * c.Cin + ic) * c.in[0] * c.in[1] * c.in[2];
      const T *wp = c.transposed ? w + (ic * ocg + (oc - g * ocg)) * ksp : w + (oc * icg + (ic - g * icg)) * ksp;
      for (int64_t k0 = 0; k0 < c.k[0]; k0++)
        for (int64_t k1 = 0; k1 < c.k[1]; k1++)
          for (int64_t k2 = 0; k2 < c.k[2]; k2++) {
            int64_t p[3], kk[3] = {k0, k1, k2}, oo[3] = {o0, o1, o2};
            bool ok = true;
            for (int d = 0; d < 3 && ok; d++) {
              if (!c.transposed) p[d] = oo[d] * c.stride[d] - c.pad[d] + kk[d] * c.dil[d];
              else {   /* output o reads input p where p*stride - pad + k*dil = o */
                int64_t t = oo[d] + c.pad[d] - kk[d] * c.dil[d];
                ok = t >= 0 && t % c.stride[d] == 0;
                p[d] = t / c.stride[d];
              }
              ok = ok && p[d] >= 0 && p[d] < c.in[d];
            }
            if (ok) acc += xp[(p[0] * c.in[1] + p[1]) * c.in[2] + p[2]] * wp[(k0 * c.k[1] + k1) * c.k[2] + k2];
          }
    }
    y[i] = acc;
  }
}

/* cuDNN, loaded at the first convolution: implicit-GEMM convolutions of every group count, on
 * tensor cores for float16/bfloat16 and in float32 arithmetic (no TF32, as PyTorch's default) for
 * float32, the algorithm from cuDNN's heuristics (PyTorch's choice without cudnn.benchmark) among
 * those whose workspace fits cuBLAS's (shared: the two run one after the other on the stream). No
 * device memory is allocated and nothing is timed, so a convolution first met inside a graph capture
 * is captured like any kernel; only the handle must exist before: where it does not, that run takes
 * the im2col path. */
#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define DNN_FN(X) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) \
  X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor) \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor) X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType) \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnConvolutionForward) X(cudnnAddTensor) \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnConvolutionBackwardData) X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
  X(cudnnConvolutionBackwardFilter)
static struct {
#define X(f) decltype(&::f) f;
  DNN_FN(X)
#undef X
  bool ok;
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;

static void dnn_load(void) {
  if (getenv("GCC_GRAPH_NO_CUDNN") && strcmp(getenv("GCC_GRAPH_NO_CUDNN"), "0")) return;
  void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  Dl_info di;
  if (!h && dladdr((void *)&cublasCreate_v2, &di) && di.dli_fname) {   /* next to the cuBLAS the model links */
    char path[4096];
    snprintf(path, sizeof path, "%s", di.dli_fname);
    char *slash = strrchr(path, '/');
    if (slash) { snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libcudnn.so.9"); h = dlopen(path, RTLD_NOW | RTLD_LOCAL); }
  }
  if (!h) h = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  bool ok = true;
#define X(f) ok = ok && (*(void **)&dnn.f = dlsym(h, #f)) != NULL;
  DNN_FN(X)
#undef X
  dnn.ok = ok;
}

/* A convolution's descriptors and, per direction (0 forward, 1 backward data, 2 backward filter), the
 * algorithm chosen at its first use (state 1; -1: none fits). */
struct dnn_plan {
  int64_t key[21];
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  int state[3], algo[3];
  bool captured[3];         /* chosen inside a capture (within the workspace there was): chosen again after */
  cudnnMathType_t math[3];
  size_t ws[3];
};

static void dnn_plan_destroy(struct dnn_plan *p) {
  if (p->x) dnn.cudnnDestroyTensorDescriptor(p->x);
  if (p->y) dnn.cudnnDestroyTensorDescriptor(p->y);
  if (p->b) dnn.cudnnDestroyTensorDescriptor(p->b);
  if (p->w) dnn.cudnnDestroyFilterDescriptor(p->w);
  if (p->c) dnn.cudnnDestroyConvolutionDescriptor(p->c);
}

static void dnn_free(gg_model *m) {
  for (int i = 0; dnn.ok && i < m->ndnn; i++) dnn_plan_destroy(&m->dnn_plans[i]);
  free(m->dnn_plans);
  for (int i = 0; i < m->ndnn_old; i++) cudaFree(m->dnn_old[i]);
  free(m->dnn_old);
  cudaFree(m->dnn_ws);
  if (m->dnn) dnn.cudnnDestroy((cudnnHandle_t)m->dnn);
}

/* cuDNN's handle, made outside a capture (it allocates); false when cuDNN is not to be had */
static bool dnn_make_handle(gg_model *m) {
  pthread_once(&dnn_once, dnn_load);
  if (!dnn.ok) return false;
  if (m->dnn) return true;
  gate_open(m);   /* cudnnCreate may wait for the GPU */
  cudnnHandle_t h;
  if (dnn.cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return false;
  m->dnn = (void *)h;
  return true;
}

/* The handle for a convolution about to be issued: while a capture is under way none can be made, so
 * the capture is marked to be made again once it exists (issue). */
static bool dnn_begin(gg_model *m) {
  pthread_once(&dnn_once, dnn_load);
  if (!dnn.ok) return false;
  if (m->dnn) return true;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(m->stream, &cs);
  if (cs != cudaStreamCaptureStatusNone) { m->dnn_wanted = true; return false; }
  return dnn_make_handle(m);
}

/* The descriptors of convolution c (not transposed) in dtype code dt (0 float32, 1 float64, 2 float16,
 * 3 bfloat16, 4 float32 with TF32 arithmetic: cuDNN's default math, which allows it), or NULL. */
static struct dnn_plan *dnn_plan_for(gg_model *m, int dt, const gg_conv *c) {
  int64_t key[21] = {dt, c->N, c->Cin, c->Cout, c->groups};
  for (int d = 0; d < 3; d++) key[5 + d] = c->in[d], key[8 + d] = c->k[d], key[11 + d] = c->stride[d], key[14 + d] = c->pad[d], key[17 + d] = c->dil[d];
  key[20] = c->nhwc;
  for (int i = 0; i < m->ndnn; i++)
    if (!memcmp(m->dnn_plans[i].key, key, sizeof key)) return &m->dnn_plans[i];
  /* 2-d (and 1-d) convolutions as 4-d tensors, 3-d ones as 5-d */
  bool three = c->in[0] != 1 || c->k[0] != 1 || c->pad[0] != 0 || c->stride[0] != 1 || c->dil[0] != 1;
  int nd = three ? 5 : 4, sp = nd - 2, first = three ? 0 : 1;
  static const cudnnDataType_t types[] = {CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
  cudnnDataType_t t = types[dt], comp = dt == 1 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  int xd[5] = {(int)c->N, (int)c->Cin}, yd[5] = {(int)c->N, (int)c->Cout}, wd[5] = {(int)c->Cout, (int)(c->Cin / c->groups)}, bd[5] = {1, (int)c->Cout};
  int pad[3], str[3], dil[3];
  for (int d = 0; d < sp; d++) {
    xd[2 + d] = (int)c->in[first + d], yd[2 + d] = (int)c->out[first + d], wd[2 + d] = (int)c->k[first + d], bd[2 + d] = 1;
    pad[d] = (int)c->pad[first + d], str[d] = (int)c->stride[first + d], dil[d] = (int)c->dil[first + d];
  }
  int xs[5], ys[5], bs[5];
  xs[nd - 1] = ys[nd - 1] = bs[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; d--) xs[d] = xs[d + 1] * xd[d + 1], ys[d] = ys[d + 1] * yd[d + 1], bs[d] = bs[d + 1] * bd[d + 1];
  if (c->nhwc) {   /* channels-last: the channel stride 1, the spatial dims' strides multiples of the channels */
    xs[1] = ys[1] = 1;
    xs[nd - 1] = xd[1], ys[nd - 1] = yd[1];
    for (int d = nd - 2; d >= 2; d--) xs[d] = xs[d + 1] * xd[d + 1], ys[d] = ys[d + 1] * yd[d + 1];
    xs[0] = xs[2] * xd[2], ys[0] = ys[2] * yd[2];
  }
  struct dnn_plan p;
  memset(&p, 0, sizeof p);
  memcpy(p.key, key, sizeof key);
  bool ok = dnn.cudnnCreateTensorDescriptor(&p.x) == CUDNN_STATUS_SUCCESS && dnn.cudnnCreateTensorDescriptor(&p.y) == CUDNN_STATUS_SUCCESS &&
            dnn.cudnnCreateTensorDescriptor(&p.b) == CUDNN_STATUS_SUCCESS && dnn.cudnnCreateFilterDescriptor(&p.w) == CUDNN_STATUS_SUCCESS &&
            dnn.cudnnCreateConvolutionDescriptor(&p.c) == CUDNN_STATUS_SUCCESS;
  ok = ok && dnn.cudnnSetTensorNdDescriptor(p.x, t, nd, xd, xs) == CUDNN_STATUS_SUCCESS && dnn.cudnnSetTensorNdDescriptor(p.y, t, nd, yd, ys) == CUDNN_STATUS_SUCCESS &&
       dnn.cudnnSetTensorNdDescriptor(p.b, t, nd, bd, bs) == CUDNN_STATUS_SUCCESS &&
       dnn.cudnnSetFilterNdDescriptor(p.w, t, c->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd, wd) == CUDNN_STATUS_SUCCESS &&
       dnn.cudnnSetConvolutionNdDescriptor(p.c, sp, pad, str, dil, CUDNN_CROSS_CORRELATION, comp) == CUDNN_STATUS_SUCCESS &&
       dnn.cudnnSetConvolutionGroupCount(p.c, (int)c->groups) == CUDNN_STATUS_SUCCESS;
  if (!ok) { dnn_plan_destroy(&p); return NULL; }
  if (m->ndnn == m->cap_dnn) {
    int cap = m->cap_dnn ? 2 * m->cap_dnn : 16;
    struct dnn_plan *n = (struct dnn_plan *)realloc(m->dnn_plans, sizeof *n * (size_t)cap);
    if (!n) { dnn_plan_destroy(&p); return NULL; }
    m->dnn_plans = n;
    m->cap_dnn = cap;
  }
  m->dnn_plans[m->ndnn] = p;
  return &m->dnn_plans[m->ndnn++];
}

/* The algorithm of direction dir: the first of cuDNN's heuristic order (PyTorch's choice without
 * cudnn.benchmark) whose workspace fits the limit: outside a capture (the run before it) up to
 * GCC_GRAPH_CUDNN_WORKSPACE_MB (default 512), the workspace growing to that need; inside one, what
 * the workspace already has, as nothing can be allocated there. Float32 runs in FMA math whatever the
 * entry says, as PyTorch does with TF32 off: an entry of CUDNN_DEFAULT_MATH would let cuDNN use TF32
 * on sm_80 and later. Nothing is timed, so a convolution first met inside a capture is captured like
 * any kernel. (Timing cuDNN's algorithms on the real operands, cudnnFind*AlgorithmEx in the run
 * before the capture, was tried: slower on every model measured, docs/BENCHMARKS.md.) */
#define DNN_PICK(PERF, COUNT, CALL)                                                                                              \
  do {                                                                                                                           \
    PERF perf[COUNT];                                                                                                            \
    int got = 0;                                                                                                                 \
    if (CALL == CUDNN_STATUS_SUCCESS)                                                                                            \
      for (int i = 0; i < got && p->state[dir] < 1; i++)                                                                         \
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit && (dt != 0 || perf[i].mathType != CUDNN_TENSOR_OP_MATH)) { \
          p->state[dir] = 1, p->algo[dir] = (int)perf[i].algo, p->ws[dir] = perf[i].memory;                                      \
          p->math[dir] = dt == 0 ? CUDNN_FMA_MATH : perf[i].mathType;                                                          \
        }                                                                                                                        \
  } while (0)
static bool dnn_algo(gg_model *m, int dt, struct dnn_plan *p, int dir) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  bool grow = cudaStreamIsCapturing(m->stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone;
  if (p->state[dir] && !(grow && p->captured[dir])) return p->state[dir] > 0;
  cudnnHandle_t h = (cudnnHandle_t)m->dnn;
  p->state[dir] = -1;
  p->captured[dir] = !grow;
  if (dnn.cudnnSetConvolutionMathType(p->c, dt == 0 ? CUDNN_FMA_MATH : dt == 1 || dt == 4 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH) != CUDNN_STATUS_SUCCESS) return false;
  const char *we = getenv("GCC_GRAPH_CUDNN_WORKSPACE_MB");
  long mb = we ? strtol(we, NULL, 10) : 512;
  size_t limit = grow ? (size_t)(mb < 0 ? 0 : mb > 65536 ? 65536 : mb) << 20 : m->dnn_ws_size;
  for (int attempt = 0; attempt < 2 && p->state[dir] < 1; attempt++, limit = m->dnn_ws_size) {   /* 1: the growth failed */
    if (dir == 0)
      DNN_PICK(cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
               dnn.cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->c, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    else if (dir == 1)
      DNN_PICK(cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
               dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->c, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    else
      DNN_PICK(cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
               dnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->c, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    if (p->state[dir] < 1 || p->ws[dir] <= m->dnn_ws_size) break;
    if (!ws_grow(m, &m->dnn_ws, &m->dnn_ws_size, &m->dnn_old, &m->ndnn_old, p->ws[dir])) {
      p->state[dir] = -1;
      continue;
    }
  }
  return p->state[dir] > 0;
}

/* The plan and algorithm of direction dir for convolution c, the handle on the run's stream and the
 * direction's math type set: NULL when cuDNN cannot take it. */
static struct dnn_plan *dnn_ready(int dt, const gg_conv *c, int dir) {
  gg_model *m = gg_cur;
  if (!dnn_begin(m)) return NULL;
  struct dnn_plan *p = dnn_plan_for(m, dt, c);
  if (!p || !dnn_algo(m, dt, p, dir) || dnn.cudnnSetConvolutionMathType(p->c, p->math[dir]) != CUDNN_STATUS_SUCCESS) return NULL;
  dnn.cudnnSetStream((cudnnHandle_t)m->dnn, m->stream);
  return p;
}

template <int DT> __global__ void chan_add(int64_t n, int64_t C, int64_t sp, const void *bias, void *y);

/* y = conv(x, w) (+ bias per channel) through cuDNN; false when it is not to be had for c. A
 * transposed convolution is the backward-data pass of the convolution it transposes. */
static bool dnn_conv(int dt, const gg_conv *c, const void *x, const void *w, const void *bias, void *y) {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void *one = dt == 1 ? (const void *)&one64 : (const void *)&one32, *zero = dt == 1 ? (const void *)&zero64 : (const void *)&zero32;
  gg_model *m = gg_cur;
  if (!c->transposed) {
    struct dnn_plan *p = dnn_ready(dt, c, 0);
    if (!p || dnn.cudnnConvolutionForward((cudnnHandle_t)m->dnn, one, p->x, x, p->w, w, p->c, (cudnnConvolutionFwdAlgo_t)p->algo[0], m->dnn_ws, p->ws[0],
                                          zero, p->y, y) != CUDNN_STATUS_SUCCESS)
      return false;
    if (bias) dnn.cudnnAddTensor((cudnnHandle_t)m->dnn, one, p->b, bias, one, p->y, y);
    return true;
  }
  gg_conv f = *c;   /* the convolution from y's shape to x's, whose weight is w as it stands */
  f.Cin = c->Cout, f.Cout = c->Cin, f.transposed = false;
  for (int d = 0; d < 3; d++) f.in[d] = c->out[d], f.out[d] = c->in[d];
  struct dnn_plan *p = dnn_ready(dt, &f, 1);
  if (!p || dnn.cudnnConvolutionBackwardData((cudnnHandle_t)m->dnn, one, p->w, w, p->y, x, p->c, (cudnnConvolutionBwdDataAlgo_t)p->algo[1], m->dnn_ws,
                                             p->ws[1], zero, p->x, y) != CUDNN_STATUS_SUCCESS)
    return false;
  if (bias) {
    int64_t sp = c->out[0] * c->out[1] * c->out[2], n = c->N * c->Cout * sp;
    unsigned b = gg_cu_blocks(n);
    if (dt == 1) chan_add<1><<<b, 256, 0, m->stream>>>(n, c->Cout, sp, bias, y);
    else if (dt == 2) chan_add<2><<<b, 256, 0, m->stream>>>(n, c->Cout, sp, bias, y);
    else if (dt == 3) chan_add<3><<<b, 256, 0, m->stream>>>(n, c->Cout, sp, bias, y);
    else chan_add<0><<<b, 256, 0, m->stream>>>(n, c->Cout, sp, bias, y);
  }
  return true;
}

/* dw = the weight gradient of convolution c (not transposed) through cuDNN's backward-filter pass */
static bool dnn_wgrad(int dt, const gg_conv *c, const void *x, const void *dy, void *dw) {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void *one = dt == 1 ? (const void *)&one64 : (const void *)&one32, *zero = dt == 1 ? (const void *)&zero64 : (const void *)&zero32;
  gg_model *m = gg_cur;
  struct dnn_plan *p = dnn_ready(dt, c, 2);
  return p && dnn.cudnnConvolutionBackwardFilter((cudnnHandle_t)m->dnn, one, p->x, x, p->y, dy, p->c, (cudnnConvolutionBwdFilterAlgo_t)p->algo[2],
                                                 m->dnn_ws, p->ws[2], zero, p->w, dw) == CUDNN_STATUS_SUCCESS;
}
#else
struct dnn_plan { int unused; };
static void dnn_free(gg_model *m) { (void)m; }
static bool dnn_make_handle(gg_model *m) { (void)m; return false; }
static bool dnn_conv(int, const gg_conv *, const void *, const void *, const void *, void *) { return false; }
static bool dnn_wgrad(int, const gg_conv *, const void *, const void *, void *) { return false; }
#endif


/* y[., c, .] += bias[c] over planes of sp elements */
template <int DT> __global__ void chan_add(int64_t n, int64_t C, int64_t sp, const void *bias, void *y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i / sp % C;
    if (DT == 1) ((double *)y)[i] += ((const double *)bias)[c];
    else dt_st(DT, y, i, dt_ld(DT, y, i) + dt_ld(DT, bias, c));
  }
}

/* db[c] = the sum of dy[n, c, .] over the batch and the sp positions: a block per channel, summed in
 * double, rounded once */
template <int DT> __global__ void chan_sum(int64_t N, int64_t C, int64_t sp, const void *dy, void *db) {
  __shared__ double part[256];
  const int64_t c = blockIdx.x;
  double a = 0;
  for (int64_t i = threadIdx.x; i < N * sp; i += blockDim.x) {
    int64_t j = (i / sp * C + c) * sp + i % sp;
    a += DT == 1 ? ((const double *)dy)[j] : (double)dt_ld(DT, dy, j);
  }
  part[threadIdx.x] = a;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (DT == 1) ((double *)db)[c] = part[0];
    else dt_st(DT, db, c, (float)part[0]);
  }
}

/* A depthwise convolution's weight gradient without cuDNN: a thread per weight element */
template <typename T> __global__ void wgrad_depthwise(gg_conv c, const T *x, const T *dy, T *dw) {
  int64_t ksp = c.k[0] * c.k[1] * c.k[2], isp = c.in[0] * c.in[1] * c.in[2], osp = c.out[0] * c.out[1] * c.out[2];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.Cout * ksp; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t ch = i / ksp, kk = i % ksp, k0 = kk / (c.k[1] * c.k[2]), k1 = kk / c.k[2] % c.k[1], k2 = kk % c.k[2];
    double a = 0;
    for (int64_t n = 0; n < c.N; n++)
      for (int64_t o = 0; o < osp; o++) {
        int64_t o2 = o % c.out[2], o1 = o / c.out[2] % c.out[1], o0 = o / (c.out[1] * c.out[2]);
        int64_t i0 = o0 * c.stride[0] - c.pad[0] + k0 * c.dil[0], i1 = o1 * c.stride[1] - c.pad[1] + k1 * c.dil[1], i2 = o2 * c.stride[2] - c.pad[2] + k2 * c.dil[2];
        if (i0 >= 0 && i0 < c.in[0] && i1 >= 0 && i1 < c.in[1] && i2 >= 0 && i2 < c.in[2])
          a += (double)dy[(n * c.Cout + ch) * osp + o] * x[(n * c.Cin + ch) * isp + (i0 * c.in[1] + i1) * c.in[2] + i2];
      }
    dw[i] = (T)a;
  }
}

template <typename T> static void conv(int dt, const gg_conv *c, const T *x, const T *w, const T *bias, T *y, T *col) {
  cudaStream_t st = gg_cur->stream;
  int64_t osp = c->out[0] * c->out[1] * c->out[2], isp = c->in[0] * c->in[1] * c->in[2], ksp = c->k[0] * c->k[1] * c->k[2];
  if (dnn_conv(dt, c, x, w, bias, y)) return;
  if (c->transposed || c->groups != 1) {
    conv_direct<T><<<gg_cu_blocks(c->N * c->Cout * osp), 256, 0, st>>>(*c, x, w, bias, y);
    return;
  }
  /* im2col + GEMM per image: y[n] (Cout x osp) = w (Cout x Cin*ksp) @ col (Cin*ksp x osp), added to the bias */
  bool pointwise = ksp == 1 && c->stride[0] == 1 && c->stride[1] == 1 && c->stride[2] == 1 && c->pad[0] == 0 && c->pad[1] == 0 && c->pad[2] == 0;
  if (bias) bias_fill<T><<<gg_cu_blocks(c->N * c->Cout * osp), 256, 0, st>>>(c->N * c->Cout, c->Cout, osp, bias, y);
  if (pointwise) {   /* a 1x1 convolution is a product with the image itself, every image in one call */
    gg_cu_gemm(dt, c->Cout, osp, c->Cin, 1, w, c->Cin, 1, 0, x, isp, 1, c->Cin * isp, bias ? 1 : 0, y, c->N, NULL);
    return;
  }
  for (int64_t n = 0; n < c->N; n++) {
    im2col<T><<<gg_cu_blocks(c->Cin * ksp * osp), 256, 0, st>>>(*c, x + n * c->Cin * isp, c->Cin, col);
    gg_cu_gemm(dt, c->Cout, osp, c->Cin * ksp, 1, w, c->Cin * ksp, 1, 0, col, osp, 1, 0, bias ? 1 : 0, y + n * c->Cout * osp, 1, NULL);
  }
}

void gg_cu_conv(int dt, const gg_conv *c, const void *x, const void *w, const void *bias, void *y, void *col) {
  if (c->nhwc && !c->transposed && c->groups == c->Cin && c->Cout == c->Cin && c->in[0] == 1 && c->k[0] == 1 && dt != 1) {   /* depthwise */
    gg_cu_dw_nhwc(dt, c, x, w, bias, y);
    return;
  }
  if (dt == 2 || dt == 3 || c->nhwc) {   /* float16 / bfloat16 and channels-last: cuDNN only */
    if (!dnn_conv(dt, c, x, w, bias, y)) gg_cur->dnn_missing = true;
    return;
  }
  if (dt == 1) conv<double>(dt, c, (const double *)x, (const double *)w, (const double *)bias, (double *)y, (double *)col);
  else conv<float>(dt, c, (const float *)x, (const float *)w, (const float *)bias, (float *)y, (float *)col);
}

/* The weight (dw) and bias (db) gradients of convolution c, either may be NULL: cuDNN's backward-filter
 * pass, else (float32, float64) im2col + a product per image and group accumulated into dw, depthwise
 * ones directly; the bias's by a reduction of our own. */
template <typename T> static void wgrad(int dt, const gg_conv *c, const T *x, const T *dy, T *dw, T *col) {
  cudaStream_t st = gg_cur->stream;
  int64_t isp = c->in[0] * c->in[1] * c->in[2], osp = c->out[0] * c->out[1] * c->out[2], ksp = c->k[0] * c->k[1] * c->k[2];
  int64_t G = c->groups, icg = c->Cin / G, ocg = c->Cout / G;
  if (icg == 1 && ocg == 1 && G > 1) {
    wgrad_depthwise<T><<<gg_cu_blocks(c->Cout * ksp), 256, 0, st>>>(*c, x, dy, dw);
    return;
  }
  cudaMemsetAsync(dw, 0, sizeof(T) * (size_t)(c->Cout * icg * ksp), st);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t g = 0; g < G; g++) {   /* dw[g] (ocg x icg*k) += dy[n, g] (ocg x osp) @ col^T (osp x icg*k) */
      im2col<T><<<gg_cu_blocks(icg * ksp * osp), 256, 0, st>>>(*c, x + (n * c->Cin + g * icg) * isp, icg, col);
      gg_cu_gemm(dt, ocg, icg * ksp, osp, 1, dy + (n * c->Cout + g * ocg) * osp, osp, 1, 0, col, 1, osp, 0, 1, dw + g * ocg * icg * ksp, 1, NULL);
    }
}

void gg_cu_conv_wgrad(int dt, const gg_conv *c, const void *x, const void *dy, void *dw, void *db, void *col, void *tmp) {
  (void)tmp;
  cudaStream_t st = gg_cur->stream;
  int64_t osp = c->out[0] * c->out[1] * c->out[2];
  if (db) {
    unsigned b = (unsigned)c->Cout;
    if (dt == 1) chan_sum<1><<<b, 256, 0, st>>>(c->N, c->Cout, osp, dy, db);
    else if (dt == 2) chan_sum<2><<<b, 256, 0, st>>>(c->N, c->Cout, osp, dy, db);
    else if (dt == 3) chan_sum<3><<<b, 256, 0, st>>>(c->N, c->Cout, osp, dy, db);
    else chan_sum<0><<<b, 256, 0, st>>>(c->N, c->Cout, osp, dy, db);
  }
  if (!dw || dnn_wgrad(dt, c, x, dy, dw)) return;
  if (dt == 2 || dt == 3) gg_cur->dnn_missing = true;
  else if (dt == 1) wgrad<double>(dt, c, (const double *)x, (const double *)dy, (double *)dw, (double *)col);
  else wgrad<float>(dt, c, (const float *)x, (const float *)dy, (float *)dw, (float *)col);
}

/* ---------------------------------------------------------------- pooling */

/* dt: 0 float32, 1 float64, 2 float16, 3 bfloat16 (gg_rt.h's GG_POOL_ONE instances) */
template <int DT> __global__ void pool(gg_pool p, const void *x, void *y, int64_t *idx) {
  int64_t n = p.planes * p.OH * p.OW;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t pl = i / (p.OH * p.OW), oh = i / p.OW % p.OH, ow = i % p.OW;
    if (DT == 1) gg_pool_one_double(&p, (const double *)x, (double *)y, idx, pl, oh, ow);
    else if (DT == 2) gg_pool_one_f16(&p, (const uint16_t *)x, (uint16_t *)y, idx, pl, oh, ow);
    else if (DT == 3) gg_pool_one_bf16(&p, (const uint16_t *)x, (uint16_t *)y, idx, pl, oh, ow);
    else gg_pool_one_float(&p, (const float *)x, (float *)y, idx, pl, oh, ow);
  }
}

void gg_cu_pool(int dt, const gg_pool *p, const void *x, void *y, int64_t *idx) {
  unsigned b = gg_cu_blocks(p->planes * p->OH * p->OW);
  cudaStream_t st = gg_cur->stream;
  if (dt == 1) pool<1><<<b, 256, 0, st>>>(*p, x, y, idx);
  else if (dt == 2) pool<2><<<b, 256, 0, st>>>(*p, x, y, idx);
  else if (dt == 3) pool<3><<<b, 256, 0, st>>>(*p, x, y, idx);
  else pool<0><<<b, 256, 0, st>>>(*p, x, y, idx);
}
