/* pipeline.c: the stages of compilation, as one table.
 * Requires: a loaded graph. Guarantees: the stages in order, each followed by the graph checker,
 * those that apply (inference or training) only: compile runs them all, check runs them one prefix at
 * a time and interprets each prefix's graph, explain and the tests run a prefix. A new stage is one
 * row here. */
#include "gg.h"

#include <string.h>

static int st_verify(Pipeline *p) { return verify_graph(p->g) || graph_check_supported(p->g) ? -1 : 0; }
static int st_functionalize(Pipeline *p) { return functionalize(p->g) || verify_graph(p->g) ? -1 : 0; }
/* the channels-last stage runs (inference, not --no-channels-last): the stages before it shape their work for it */
static bool cl_runs(const Pipeline *p) { return !(p->tr && p->tr->on) && !p->nchw; }

static int st_fold(Pipeline *p) { return fold_weights(p->g, p->exact, cl_runs(p)) || verify_graph(p->g) ? -1 : 0; }
static int st_precision(Pipeline *p) {   /* weights rounded at compile time only where fold runs (not --train: its weights change) */
  bool fold = p->fold && !(p->tr && p->tr->on);
  return precision_lower(p->g, p->precision, fold) || (!p->cuda && precision_widen(p->g, fold, cl_runs(p))) || verify_graph(p->g) ? -1 : 0;
}
static int st_decompose(Pipeline *p) {
  bool train = p->tr && p->tr->on;
  return decompose(p->g, train, p->fold && !train, cl_runs(p)) || verify_graph(p->g) ? -1 : 0;
}
static int st_channels_last(Pipeline *p) { return channels_last(p->g, p->fold) || verify_graph(p->g) ? -1 : 0; }
static int st_autograd(Pipeline *p) { return autograd(p->g, p->tr->loss, false) || decompose_after_autograd(p->g) || verify_graph(p->g) ? -1 : 0; }

static int st_partition(Pipeline *p) {
  return partition(p->g, p->tr->save_all, &p->bwd, &p->ps) || verify_graph(p->g) || verify_graph(p->bwd) ? -1 : 0;
}

static int st_schedule(Pipeline *p) {
  p->sf = schedule_graph(p->g);
  p->sb = p->sf && p->bwd ? schedule_graph(p->bwd) : NULL;
  return !p->sf || (p->bwd && !p->sb) ? -1 : 0;
}

/* name: as --time-report and --debug-dir call the stage; after: the graph it leaves, as check says */
const Stage gg_stages[] = {
  {"verify", "loaded", STAGE_ALWAYS, true, st_verify},
  {"functionalize", "functionalized", STAGE_ALWAYS, true, st_functionalize},
  {"fold weights", "weights folded", STAGE_FOLD, true, st_fold},
  {"precision", "precision (--precision, CPU half convs)", STAGE_PRECISION, true, st_precision},
  {"decompose", "decomposed", STAGE_ALWAYS, true, st_decompose},
  {"channels last", "channels-last convolutions", STAGE_CHANNELS_LAST, true, st_channels_last},
  {"autograd", "autograd (joint graph)", STAGE_TRAINING, true, st_autograd},
  {"backward (partition)", "partitioned (forward, then backward)", STAGE_TRAINING, true, st_partition},
  {"schedule", "scheduled", STAGE_ALWAYS, false, st_schedule},
  {NULL, NULL, 0, false, NULL},
};

bool stage_applies(const Stage *s, const Pipeline *p) {
  bool train = p->tr && p->tr->on;
  switch (s->when) {
  case STAGE_TRAINING: return train;
  case STAGE_FOLD: return !train && p->fold;
  case STAGE_PRECISION: return p->precision == PREC_BF16 || p->precision == PREC_FP16 || (!p->cuda && p->g && precision_widen_needed(p->g, cl_runs(p)));
  case STAGE_CHANNELS_LAST: return cl_runs(p);
  default: return true;
  }
}

int stage_index(const char *name) {
  for (int i = 0; gg_stages[i].name; i++)
    if (!strcmp(gg_stages[i].name, name)) return i;
  return -1;
}

int pipeline_run(Pipeline *p, int from, int to, void (*each)(void *arg, const Stage *s), void *arg) {
  if (p->g) p->g->ctx->train = p->tr && p->tr->on;   /* the stages' rules that differ for training read it */
  for (int i = from; gg_stages[i].name && i < to; i++) {
    const Stage *s = &gg_stages[i];
    if (!stage_applies(s, p)) continue;
    if (s->run(p)) return -1;
    if (each) each(arg, s);
  }
  return 0;
}

/* The joint graph of --train: functional, decomposed for differentiation, the backward appended. */
int training_graph(Graph *g, const TrainOptions *t) {
  Pipeline p = {.g = g, .tr = t};
  return pipeline_run(&p, stage_index("functionalize"), stage_index("backward (partition)"), NULL, NULL);
}

/* The graph explain shows the schedule of: the one compile builds for inference. */
int inference_graph(Graph *g, const Pipeline *how, void (*each)(void *arg, const Stage *s), void *arg) {
  Pipeline p = {.g = g, .fold = true};
  if (how) p.precision = how->precision, p.cuda = how->cuda, p.nchw = how->nchw, p.exact = how->exact;
  return pipeline_run(&p, stage_index("functionalize"), stage_index("autograd"), each, arg);
}
