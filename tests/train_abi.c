/* train_abi.c: the training entry points of a .so compiled with --train (CPU, or CUDA with --target
 * cuda: then every tensor crosses to the GPU and back through the model's gg_device_* calls), checked
 * against the optimizer's formulas. Linked against the model: cc tests/train_abi.c MODEL.so -o t.
 * Usage: t INPUTS.safetensors sgd LR MOMENTUM WEIGHT_DECAY
 *        t INPUTS.safetensors adam|adamw LR BETA1 BETA2 EPS WEIGHT_DECAY
 * The inputs file holds in.0, in.1 as float32 / int64 row-major tensors (a corpus io.safetensors).
 * Checks: gradients scale with grad_loss; two SGD steps (with momentum and weight decay) or one
 * Adam/AdamW step move every parameter exactly as PyTorch's formulas say (float32 arithmetic, so to
 * 1e-5); gradient accumulation over two micro-batches updates once, with their mean; a learning rate
 * changed between steps is the one applied; and 30 steps lower the loss. Prints "N passed, N failed". */
#include <gcc_graph.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_common.h"

static int pass, fail;
static void check(int ok, const char *what) {
  if (ok) pass++;
  else { fail++; printf("FAIL %s\n", what); }
}

static DLTensor out;
static int64_t out_shape[8];
static char err[1024];

static float loss_of(void) {
  float *l = from_model(out.data, 4), v = *l;
  free(l);
  return v;
}

static float *copy_weight(gg_model *m, int i, size_t *n) {
  const char *name;
  const void *d;
  gg_weight(m, i, &name, &d, n);
  float *c = from_model(d, *n);
  *n /= 4;
  return c;
}

/* the gradient of weight i from the last backward (a host copy, n floats), or NULL */
static float *grad_of(gg_model *m, gg_train_state *st, int wi) {
  const char *wname, *gname;
  const void *d;
  size_t nb;
  gg_weight(m, wi, &wname, &d, &nb);
  for (int k = 0; k < gg_num_gradients(); k++) {
    DLTensor g;
    if (!gg_gradient(st, k, &gname, &g) && !strcmp(gname, wname)) return from_model(g.data, nb);
  }
  return NULL;
}

typedef struct { int kind; double lr, mu, wd, b1, b2, eps; } Opt;   /* kind 1 sgd, 2 adam, 3 adamw */

/* The first update of weight w (n floats) with gradient g: SGD (momentum buffer b = d), Adam, AdamW */
static float first_step(const Opt *o, float w, float g) {
  if (o->kind == 1) return w - (float)o->lr * (g + (float)o->wd * w);
  float d = o->kind == 2 ? g + (float)o->wd * w : g, p = o->kind == 3 ? w * (1 - (float)o->lr * (float)o->wd) : w;
  return p - (float)o->lr * d / (fabsf(d) + (float)o->eps);   /* m / (1-b1) = d, sqrt(v / (1-b2)) = |d| */
}

static bool close_to(float got, float want) { return fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-6f; }

/* Open a fresh model and its state */
static void open_model(gg_model **m, gg_train_state **st) {
  if (gg_open(m, NULL, err, sizeof err) || gg_train_state_new(*m, st, err, sizeof err)) { printf("FAIL open: %s\n", err); exit(1); }
}

/* With accumulation over two micro-batches (the same batch twice), the first step leaves the weights
 * as they are and the second applies one update with the mean gradient, which equals the batch's. */
static void check_accumulation(const Opt *o, int nw) {
  gg_model *m;
  gg_train_state *st;
  open_model(&m, &st);
  check(gg_set_grad_accumulation(m, 0) == 1, "accumulation over 0 micro-batches is refused");
  check(gg_set_grad_accumulation(m, 2) == 0, "set gradient accumulation");
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, NULL, err, sizeof err), "forward and backward");
  float **w0 = calloc((size_t)nw, sizeof *w0), **g = calloc((size_t)nw, sizeof *g);
  size_t *n = calloc((size_t)nw, sizeof *n);
  for (int i = 0; i < nw; i++)
    if ((g[i] = grad_of(m, st, i))) w0[i] = copy_weight(m, i, &n[i]);
  check(!gg_train_step(m, st, in, nin, &out, 1, err, sizeof err), "micro-batch 1");
  bool same = true, exact = true;
  for (int i = 0; i < nw; i++) {
    if (!g[i]) continue;
    size_t k;
    float *now = copy_weight(m, i, &k);
    same &= !memcmp(now, w0[i], k * 4);
    free(now);
  }
  check(same, "the first micro-batch of two leaves the weights");
  check(!gg_train_step(m, st, in, nin, &out, 1, err, sizeof err), "micro-batch 2");
  for (int i = 0; i < nw; i++) {
    if (!g[i]) continue;
    size_t k;
    float *now = copy_weight(m, i, &k);
    for (size_t j = 0; j < k; j++)
      if (!close_to(now[j], first_step(o, w0[i][j], g[i][j]))) {
        if (exact) printf("accumulated step: weight %d element %zu: %.9g, expected %.9g\n", i, j, now[j], first_step(o, w0[i][j], g[i][j]));
        exact = false;
      }
    free(now);
    free(w0[i]);
    free(g[i]);
  }
  check(exact, "two micro-batches update once, with their mean gradient");
  free(w0);
  free(g);
  free(n);
  gg_train_state_free(st);
  gg_close(m);
}

int main(int argc, char **argv) {
  if (argc < 5 || read_inputs(argv[1])) { fprintf(stderr, "usage: see train_abi.c\n"); return 2; }
  Opt o = {0};
  o.kind = !strcmp(argv[2], "sgd") ? 1 : !strcmp(argv[2], "adam") ? 2 : 3;
  o.lr = atof(argv[3]);
  if (o.kind == 1) o.mu = atof(argv[4]), o.wd = atof(argv[5]);
  else if (argc >= 8) o.b1 = atof(argv[4]), o.b2 = atof(argv[5]), o.eps = atof(argv[6]), o.wd = atof(argv[7]);
  dev = gg_device_type() == kDLCUDA;
  if (dev && (!gg_device_alloc || !gg_device_copy)) { printf("FAIL a CUDA model without gg_device_copy\n"); return 1; }
  inputs_to_model();
  gg_model *m;
  gg_train_state *st;
  open_model(&m, &st);
  float zero = 0;
  out.data = to_model(&zero, 4);
  out.device.device_type = dev ? kDLCUDA : kDLCPU;
  out.dtype = (DLDataType){kDLFloat, 32, 1};
  out.shape = out_shape;
  check(gg_num_gradients() > 0, "a training model has gradients");
  /* d loss = 2 doubles every gradient */
  float two = 2;
  DLTensor gl = {.data = to_model(&two, 4), .device = {dev ? kDLCUDA : kDLCPU, 0}, .ndim = 0, .dtype = {kDLFloat, 32, 1}};
  int nw = gg_num_weights();
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, NULL, err, sizeof err), "forward and backward run");
  float **g1 = calloc((size_t)nw, sizeof *g1);
  for (int i = 0; i < nw; i++) g1[i] = grad_of(m, st, i);
  /* one backward per forward (the gradients take the saved values' memory, as PyTorch frees a graph
   * after its backward): a second is refused with a message, a new forward makes it possible */
  check(gg_backward(m, st, &gl, err, sizeof err) == 1 && strstr(err, "each forward's saved values serve one backward"), "a second backward is refused");
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, &gl, err, sizeof err), "forward, then backward with grad_loss = 2");
  int scaled = 1;
  for (int i = 0; i < nw; i++) {
    if (!g1[i]) continue;
    size_t n;
    free(copy_weight(m, i, &n));
    float *g2 = grad_of(m, st, i);
    for (size_t k = 0; k < n; k++) scaled &= fabsf(g2[k] - 2 * g1[i][k]) <= 1e-6f * fabsf(g1[i][k]) + 1e-30f;
    free(g2);
  }
  check(scaled, "gradients scale with grad_loss");
  /* the optimizer's steps against its formulas */
  int steps = o.kind == 1 ? 2 : 1, exact = 1;
  float **w = calloc((size_t)nw, sizeof *w), **buf = calloc((size_t)nw, sizeof *buf);
  for (int s = 0; s < steps; s++) {
    check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, NULL, err, sizeof err), "forward and backward before a step");
    for (int i = 0; i < nw; i++) {
      size_t n;
      free(w[i]);
      w[i] = NULL;
      free(g1[i]);
      if (!(g1[i] = grad_of(m, st, i))) continue;
      w[i] = copy_weight(m, i, &n);
      if (!buf[i]) buf[i] = calloc(n, sizeof **buf);
    }
    check(!gg_train_step(m, st, in, nin, &out, 1, err, sizeof err), "train step");
    for (int i = 0; i < nw; i++) {
      if (!w[i]) continue;
      size_t n;
      float *now = copy_weight(m, i, &n);
      for (size_t k = 0; k < n; k++) {
        float want;
        if (o.kind == 1) {
          float d = g1[i][k] + (float)o.wd * w[i][k];
          buf[i][k] = s == 0 ? d : (float)o.mu * buf[i][k] + d;
          want = w[i][k] - (float)o.lr * buf[i][k];
        } else
          want = first_step(&o, w[i][k], g1[i][k]);
        if (!close_to(now[k], want)) {
          if (exact) printf("step %d weight %d element %zu: %.9g, expected %.9g\n", s + 1, i, k, now[k], want);
          exact = 0;
        }
      }
      free(now);
    }
  }
  check(exact, o.kind == 1 ? "two SGD steps with momentum and weight decay follow the formula"
                           : o.kind == 2 ? "one Adam step follows the formula" : "one AdamW step follows the formula");
  /* a learning rate of 0 leaves the weights where they are: a changed rate reaches the next step
   * (a CUDA model replays its captured step, which reads the rate on the device) */
  {
    size_t n0, n1;
    float *before = copy_weight(m, 0, &n0);
    check(gg_set_learning_rate(m, 0) == 0, "set the learning rate");
    check(!gg_train_step(m, st, in, nin, &out, 1, err, sizeof err), "a step at learning rate 0");
    float *after = copy_weight(m, 0, &n1);
    check(n0 == n1 && !memcmp(before, after, n0 * 4), "learning rate 0: no change");
    free(before);
    free(after);
    gg_set_learning_rate(m, o.lr);
  }
  /* training lowers the loss */
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err), "forward");
  float before = loss_of();
  for (int s = 0; s < 30; s++) gg_train_step(m, st, in, nin, &out, 1, err, sizeof err);
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err), "forward");
  float after = loss_of();
  printf("loss %.6g -> %.6g after 30 steps\n", before, after);
  check(after < before, "30 steps lower the loss");
  /* gg_backward without a forward is refused */
  gg_train_state *fresh;
  gg_train_state_new(m, &fresh, err, sizeof err);
  check(gg_backward(m, fresh, NULL, err, sizeof err) == 1 && strstr(err, "gg_forward"), "backward before forward is refused");
  gg_train_state_free(fresh);
  gg_train_state_free(st);
  gg_close(m);
  check_accumulation(&o, nw);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
