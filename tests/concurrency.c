/* concurrency.c: one compiled model run from many threads at once. Linked against the model:
 * cc tests/concurrency.c MODEL.so -lpthread -o t (tests/run.sh builds the model and this program
 * with -fsanitize=thread, so that a data race in the runtime is a report). Usage:
 *   t IO.safetensors [THREADS [RUNS]]
 * One thread first runs the model alone: gg_run (an inference model) or gg_forward + gg_backward
 * with a training state of its own (a training model). Then THREADS threads (default 8) each make
 * RUNS calls (default 4) at once, every thread with its own outputs (and training state), and every
 * output and gradient must equal the lone run's bit for bit. CUDA models too (several host threads
 * on one model). Prints "N passed, N failed". */
#include <gcc_graph.h>

#include <pthread.h>

#include "abi_common.h"

typedef struct Res {
  void *out[16];           /* host copies of the outputs, then of the gradients */
  size_t bytes[16];
  int n;
  char err[512];
} Res;

static gg_model *model;
static int runs = 4;
static bool train;

/* One call (or a forward and a backward), its outputs copied to the host into r. */
static int call(Res *r) {
  int no = gg_num_outputs();
  DLTensor out[16];
  int64_t oshape[16][16];
  r->n = 0;
  if (no > 16) { snprintf(r->err, sizeof r->err, "too many outputs"); return 1; }
  for (int i = 0; i < no; i++) {
    int nd;
    DLDataType dt;
    if (gg_output_shape(model, in, nin, i, &nd, oshape[i], &dt, r->err, sizeof r->err)) return 1;
    size_t ne = 1;
    for (int d = 0; d < nd; d++) ne *= (size_t)oshape[i][d];
    r->bytes[i] = ne * (dt.bits / 8);
    void *host = calloc(1, r->bytes[i] + 1);
    out[i] = (DLTensor){.data = to_model(host, r->bytes[i]), .device = {dev ? kDLCUDA : kDLCPU, 0}, .ndim = nd, .dtype = dt, .shape = oshape[i]};
    if (dev) free(host);
  }
  int rc;
  gg_train_state *st = NULL;
  if (train) {
    rc = gg_train_state_new(model, &st, r->err, sizeof r->err) || gg_forward(model, st, in, nin, out, no, r->err, sizeof r->err) ||
         gg_backward(model, st, NULL, r->err, sizeof r->err);
  } else {
    rc = gg_run(model, in, nin, out, no, r->err, sizeof r->err);
  }
  for (int i = 0; i < no; i++) {
    r->out[r->n] = rc ? NULL : from_model(out[i].data, r->bytes[i]);
    r->bytes[r->n++] = r->bytes[i];
    if (dev) gg_device_free(out[i].data); else free(out[i].data);
  }
  for (int k = 0; !rc && train && k < gg_num_gradients() && r->n < 16; k++) {
    const char *name;
    DLTensor g;
    if (gg_gradient(st, k, &name, &g)) { snprintf(r->err, sizeof r->err, "no gradient %d", k); rc = 1; break; }
    size_t ne = 1;
    for (int d = 0; d < g.ndim; d++) ne *= (size_t)g.shape[d];
    r->bytes[r->n] = ne * (g.dtype.bits / 8);
    r->out[r->n] = from_model(g.data, r->bytes[r->n]);
    r->n++;
  }
  gg_train_state_free(st);
  return rc;
}

static Res lone;
static int mismatches, failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
  (void)arg;
  for (int k = 0; k < runs; k++) {
    Res r;
    memset(&r, 0, sizeof r);
    int rc = call(&r);
    pthread_mutex_lock(&lock);
    if (rc) { failures++; printf("FAIL a concurrent call: %s\n", r.err); }
    else
      for (int i = 0; i < r.n; i++)
        if (r.bytes[i] != lone.bytes[i] || memcmp(r.out[i], lone.out[i], r.bytes[i])) { mismatches++; break; }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < r.n; i++) free(r.out[i]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2 || read_inputs(argv[1])) { fprintf(stderr, "usage: t IO.safetensors [THREADS [RUNS]]\n"); return 2; }
  int nthreads = argc > 2 ? atoi(argv[2]) : 8;
  if (argc > 3) runs = atoi(argv[3]);
  if (nthreads < 1 || nthreads > 256 || runs < 1) { fprintf(stderr, "bad THREADS or RUNS\n"); return 2; }
  dev = gg_device_type() == kDLCUDA;
  train = gg_num_gradients() > 0;
  inputs_to_model();
  char err[512];
  if (gg_open(&model, NULL, err, sizeof err)) { printf("FAIL open: %s\n0 passed, 1 failed\n", err); return 1; }
  if (call(&lone)) { printf("FAIL the lone run: %s\n0 passed, 1 failed\n", lone.err); return 1; }
  pthread_t th[256];
  for (int t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, NULL);
  for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  gg_close(model);
  int pass = 0, fail = failures + mismatches;
  if (mismatches) printf("FAIL %d of %d concurrent calls gave other outputs than the lone run\n", mismatches, nthreads * runs);
  else if (!failures) pass++;
  printf("%d threads x %d %s, %d outputs each\n", nthreads, runs, train ? "forward+backward" : "runs", lone.n);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
