/* train_abi.c: the training entry points of a .so compiled with --train, checked against the
 * optimizer's formulas. Linked against the model: cc tests/train_abi.c MODEL.so -o t.
 * Usage: t INPUTS.safetensors sgd LR MOMENTUM WEIGHT_DECAY | adam LR BETA1 BETA2 EPS WEIGHT_DECAY
 * The inputs file holds in.0, in.1 as float32 / int64 row-major tensors (a corpus io.safetensors).
 * Checks: gradients scale with grad_loss; two SGD steps (with momentum and weight decay) or one Adam
 * step move every parameter exactly as PyTorch's formulas say (float32 arithmetic, so to 1e-5); and
 * 30 steps lower the loss. Prints "N passed, N failed". */
#include <gcc_graph.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pass, fail;
static void check(int ok, const char *what) {
  if (ok) pass++;
  else { fail++; printf("FAIL %s\n", what); }
}

/* a minimal safetensors reader: in.N tensors, F32 or I64 */
static DLTensor in[8];
static int64_t shapes[8][8];
static int nin;
static int read_inputs(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)len + 1);
  if (fread(b, 1, (size_t)len, f) != (size_t)len) { fclose(f); return -1; }
  fclose(f);
  uint64_t hl;
  memcpy(&hl, b, 8);
  char *h = b + 8, *data = b + 8 + hl;
  for (nin = 0; nin < 8; nin++) {
    char key[32];
    snprintf(key, sizeof key, "\"in.%d\"", nin);
    char *p = strstr(h, key);
    if (!p || p > data) break;
    DLTensor *t = &in[nin];
    t->device.device_type = kDLCPU;
    char *dt = strstr(p, "\"dtype\":\"") + 9;
    t->dtype = !strncmp(dt, "F32", 3) ? (DLDataType){kDLFloat, 32, 1} : (DLDataType){kDLInt, 64, 1};
    char *sh = strstr(p, "\"shape\":[") + 9;
    t->ndim = 0;
    while (*sh != ']') { shapes[nin][t->ndim++] = strtoll(sh, &sh, 10); if (*sh == ',') sh++; }
    t->shape = shapes[nin];
    long long o0 = strtoll(strstr(p, "\"data_offsets\":[") + 16, NULL, 10);
    t->data = data + o0;
  }
  return nin ? 0 : -1;
}

static float loss_value;
static DLTensor out;
static int64_t out_shape[8];
static char err[1024];

static float *copy_weight(gg_model *m, int i, size_t *n) {
  const char *name;
  const void *d;
  gg_weight(m, i, &name, &d, n);
  float *c = malloc(*n + 1);
  memcpy(c, d, *n);
  *n /= 4;
  return c;
}

/* the gradient of weight i from the last backward, or NULL */
static const float *grad_of(gg_model *m, gg_train_state *st, int wi) {
  const char *wname, *gname;
  const void *d;
  size_t nb;
  gg_weight(m, wi, &wname, &d, &nb);
  for (int k = 0; k < gg_num_gradients(); k++) {
    DLTensor g;
    if (!gg_gradient(st, k, &gname, &g) && !strcmp(gname, wname)) return g.data;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5 || read_inputs(argv[1])) { fprintf(stderr, "usage: see train_abi.c\n"); return 2; }
  bool adam = !strcmp(argv[2], "adam");
  double lr = atof(argv[3]);
  gg_model *m;
  gg_train_state *st;
  if (gg_open(&m, NULL, err, sizeof err) || gg_train_state_new(m, &st, err, sizeof err)) { printf("FAIL open: %s\n", err); return 1; }
  out.data = &loss_value;
  out.device.device_type = kDLCPU;
  out.dtype = (DLDataType){kDLFloat, 32, 1};
  out.shape = out_shape;
  check(gg_num_gradients() > 0, "a training model has gradients");
  /* d loss = 2 doubles every gradient */
  float two = 2;
  DLTensor gl = {.data = &two, .device = {kDLCPU, 0}, .ndim = 0, .dtype = {kDLFloat, 32, 1}};
  int nw = gg_num_weights();
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, NULL, err, sizeof err), "forward and backward run");
  float **g1 = calloc((size_t)nw, sizeof *g1);
  size_t *gn = calloc((size_t)nw, sizeof *gn);
  for (int i = 0; i < nw; i++) {
    const float *g = grad_of(m, st, i);
    if (!g) continue;
    g1[i] = copy_weight(m, i, &gn[i]);   /* right size; overwritten with the gradient */
    memcpy(g1[i], g, gn[i] * 4);
  }
  check(!gg_backward(m, st, &gl, err, sizeof err), "backward with grad_loss = 2");
  int scaled = 1;
  for (int i = 0; i < nw; i++)
    for (size_t k = 0; g1[i] && k < gn[i]; k++) scaled &= fabsf(grad_of(m, st, i)[k] - 2 * g1[i][k]) <= 1e-6f * fabsf(g1[i][k]) + 1e-30f;
  check(scaled, "gradients scale with grad_loss");
  /* the optimizer's steps against its formulas */
  int steps = adam ? 1 : 2, exact = 1;
  float **w = calloc((size_t)nw, sizeof *w), **buf = calloc((size_t)nw, sizeof *buf);
  for (int s = 0; s < steps; s++) {
    check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err) && !gg_backward(m, st, NULL, err, sizeof err), "forward and backward before a step");
    for (int i = 0; i < nw; i++) {
      size_t n;
      free(w[i]);
      w[i] = NULL;
      const float *g = grad_of(m, st, i);
      if (!g) continue;
      w[i] = copy_weight(m, i, &n);
      if (!buf[i]) buf[i] = calloc(n, sizeof **buf);
      float *gg = malloc(n * 4);
      memcpy(gg, g, n * 4);
      free(g1[i]);
      g1[i] = gg;
    }
    check(!gg_train_step(m, st, in, nin, &out, 1, err, sizeof err), "train step");
    for (int i = 0; i < nw; i++) {
      if (!w[i]) continue;
      size_t n;
      float *now = copy_weight(m, i, &n);
      for (size_t k = 0; k < n; k++) {
        float want;
        if (adam) {
          float wd = (float)atof(argv[7]), d = g1[i][k] + wd * w[i][k];
          want = w[i][k] - (float)lr * d / (fabsf(d) + (float)atof(argv[6]));   /* the first step: m / (1-b1) = d, sqrt(v / (1-b2)) = |d| */
        } else {
          float mu = (float)atof(argv[4]), wd = (float)atof(argv[5]), d = g1[i][k] + wd * w[i][k];
          buf[i][k] = s == 0 ? d : mu * buf[i][k] + d;
          want = w[i][k] - (float)lr * buf[i][k];
        }
        if (!(fabsf(now[k] - want) <= 1e-5f * fabsf(want) + 1e-6f)) {
          if (exact) printf("step %d weight %d element %zu: %.9g, expected %.9g\n", s + 1, i, k, now[k], want);
          exact = 0;
        }
      }
      free(now);
    }
  }
  check(exact, adam ? "one Adam step follows the formula" : "two SGD steps with momentum and weight decay follow the formula");
  /* a learning rate of 0 leaves the weights where they are */
  {
    size_t n0, n1;
    float *before = copy_weight(m, 0, &n0);
    check(gg_set_learning_rate(m, 0) == 0, "set the learning rate");
    gg_train_step(m, st, in, nin, &out, 1, err, sizeof err);
    float *after = copy_weight(m, 0, &n1);
    check(n0 == n1 && !memcmp(before, after, n0 * 4), "learning rate 0: no change");
    free(before);
    free(after);
    gg_set_learning_rate(m, lr);
  }
  /* training lowers the loss */
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err), "forward");
  float before = loss_value;
  for (int s = 0; s < 30; s++) gg_train_step(m, st, in, nin, &out, 1, err, sizeof err);
  check(!gg_forward(m, st, in, nin, &out, 1, err, sizeof err), "forward");
  printf("loss %.6g -> %.6g after 30 steps\n", before, loss_value);
  check(loss_value < before, "30 steps lower the loss");
  /* gg_backward without a forward is refused */
  gg_train_state *fresh;
  gg_train_state_new(m, &fresh, err, sizeof err);
  check(gg_backward(m, fresh, NULL, err, sizeof err) == 1 && strstr(err, "gg_forward"), "backward before forward is refused");
  gg_train_state_free(fresh);
  gg_train_state_free(st);
  gg_close(m);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
