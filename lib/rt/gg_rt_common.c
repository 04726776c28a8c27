/* gg_rt_common.c: the part of the runtime that CPU and CUDA models share (included by gg_rt.c and
 * gg_rt_cuda.cu): guard messages and the entry points that only read the descriptor. C11 and C++. */

#define GG_EXPORT __attribute__((visibility("default")))

static const char *device_name(int d) {
  switch (d) {
  case kDLCPU: return "cpu";
  case kDLCUDA: return "cuda";
  case kDLCUDAHost: return "cuda host memory";
  case kDLCUDAManaged: return "cuda managed memory";
  default: return "another device";
  }
}

int gg_rt_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return 1;
}

const char *gg_rt_dtype_name(DLDataType t) {
  if (t.lanes != 1) return "vector";
  switch (t.code) {
  case kDLFloat: return t.bits == 16 ? "float16" : t.bits == 32 ? "float32" : t.bits == 64 ? "float64" : "float?";
  case kDLBfloat: return "bfloat16";
  case kDLInt: return t.bits == 8 ? "int8" : t.bits == 16 ? "int16" : t.bits == 32 ? "int32" : t.bits == 64 ? "int64" : "int?";
  case kDLUInt: return t.bits == 8 ? "uint8" : "uint?";
  case 6: return "bool";   /* kDLBool, DLPack >= 0.8 */
  default: return "unknown";
  }
}

static bool same_dtype(DLDataType a, DLDataType want) {
  if (a.code == want.code && a.bits == want.bits && a.lanes == want.lanes) return true;
  /* bool arrives as kDLBool from current exporters, as uint8 from older ones */
  return want.code == 6 && a.code == kDLUInt && a.bits == 8 && a.lanes == 1;
}

int gg_rt_check_tensor(const DLTensor *t, const char *name, DLDataType want, int ndim, int device, char *err, size_t errlen) {
  if (!t) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' is missing", name);
  if ((int)t->device.device_type != device)
    return gg_rt_fail(err, errlen, "guard failed: tensor '%s' device mismatch. expected %s, actual %s; move it (PyTorch: x.to(\"%s\"))%s", name, device_name(device),
                      device_name((int)t->device.device_type), device_name(device),
                      t->device.device_type == kDLCUDA ? " or compile the model with --target cuda" : t->device.device_type == kDLCPU ? " or compile the model for the CPU (--target cpu)" : "");
  if (!same_dtype(t->dtype, want))
    return gg_rt_fail(err, errlen, "guard failed: tensor '%s' dtype mismatch. expected %s, actual %s; convert it (PyTorch: x.to(torch.%s)) or export the model with %s inputs",
                      name, gg_rt_dtype_name(want), gg_rt_dtype_name(t->dtype), gg_rt_dtype_name(want), gg_rt_dtype_name(t->dtype));
  if (t->ndim != ndim) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' rank mismatch. expected %d, actual %d; gcc-graph explain MODEL shows each input's sizes", name, ndim, t->ndim);
  if (ndim > 0 && !t->shape) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' has no shape (a null pointer)", name);
  for (int d = 0; d < ndim; d++)
    if (t->shape[d] < 0) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' has a negative size %lld at index %d", name, (long long)t->shape[d], d);
  if (t->strides) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      if (t->shape[d] != 1 && t->strides[d] != s)
        return gg_rt_fail(err, errlen, "guard failed: tensor '%s' stride mismatch at index %d. expected %lld (row-major compact), actual %lld; pass a contiguous tensor (PyTorch: x.contiguous())", name, d,
                          (long long)s, (long long)t->strides[d]);
      if (__builtin_mul_overflow(s, t->shape[d], &s)) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' has more elements than 2^63", name);
    }
  }
  return 0;
}

/* The weights appended to this .so's file (compile's default), mapped read-only: the file the loader
 * mapped the model from, found in /proc/self/maps (else by dladdr) and checked to be the same file
 * (inode), not one written over that path since. 0, or 1 with a message. */
static int map_self(void **map, size_t *len, char *err, size_t errlen) {
  char path[4096] = "", line[4096 + 128];
  unsigned long ino = 0;
  bool known = false;
  FILE *maps = fopen("/proc/self/maps", "r");
  while (maps && !known && fgets(line, sizeof line, maps)) {
    unsigned long lo, hi, inode;
    int at = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %lu %n", &lo, &hi, &inode, &at) < 3 || !at) continue;
    if ((uintptr_t)&gg__desc < lo || (uintptr_t)&gg__desc >= hi) continue;
    snprintf(path, sizeof path, "%s", line + at);
    path[strcspn(path, "\n")] = 0;
    ino = inode;
    known = true;
  }
  if (maps) fclose(maps);
  Dl_info di;
  if (!known && dladdr((const void *)&gg__desc, &di) && di.dli_fname) snprintf(path, sizeof path, "%s", di.dli_fname);
  int fd = *path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || (known && (unsigned long)st.st_ino != ino)) {
    if (fd >= 0) close(fd);
    return gg_rt_fail(err, errlen, "%s: the model's file was removed or replaced since it was loaded: its weights are in it (load it again)",
                      *path ? path : "the model");
  }
  struct { char magic[8]; uint64_t offset, size; } tr;
  bool ok = st.st_size >= (off_t)sizeof tr && pread(fd, &tr, sizeof tr, st.st_size - (off_t)sizeof tr) == (ssize_t)sizeof tr &&
            !memcmp(tr.magic, GG_BLOB_MAGIC, 8) && tr.size == (uint64_t)gg__desc.blob_size && tr.offset % GG_BLOB_PAGE == 0 &&
            tr.offset <= (uint64_t)st.st_size && tr.size + sizeof tr <= (uint64_t)st.st_size - tr.offset;
  if (!ok) {
    close(fd);
    return gg_rt_fail(err, errlen, "%s: the weights appended to the model are missing or damaged (a stripped or truncated .so?)", path);
  }
  *len = (size_t)tr.size;
  *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, (off_t)tr.offset);
  close(fd);
  if (*map == MAP_FAILED) { *map = NULL; return gg_rt_fail(err, errlen, "%s: cannot map its weights", path); }
  return 0;
}

/* An external weights file (compile --weights external), mapped read-only and checked against the
 * size the model was compiled with. 0, or 1 with a message. */
static int map_weights(const char *weights, void **map, size_t *len, char *err, size_t errlen) {
  if (!weights) return gg_rt_fail(err, errlen, "this model keeps its weights in a file: give its path to gg_open");
  int fd = open(weights, O_RDONLY);
  if (fd < 0) return gg_rt_fail(err, errlen, "%s: cannot open: %s", weights, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || st.st_size != gg__desc.external_size) {
    close(fd);
    return gg_rt_fail(err, errlen, "%s: not the weights file this model was compiled with (size %lld, expected %lld); give the .pt2 it was compiled from (gcc-graph explain MODEL.so names it)", weights,
                      (long long)st.st_size, (long long)gg__desc.external_size);
  }
  *len = (size_t)st.st_size;
  *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (*map == MAP_FAILED) { *map = NULL; return gg_rt_fail(err, errlen, "%s: cannot map", weights); }
  return 0;
}


/* What every run checks first: an open model, the counts of inputs and outputs, the guards (which
 * bind the symbols' values in sym). */
/* Tensors that have elements must have data (a zero-element one may have none), at an address
 * aligned to their element's size, as every PyTorch tensor's is (the compiled code loads whole
 * elements: a float32 at data + 5 bytes would be an unaligned load); after the guards, which checked
 * the ranks, shapes and dtypes. */
static int check_data(const DLTensor *t, int n, const char *kind, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    bool empty = false;
    for (int d = 0; d < t[i].ndim; d++) empty = empty || t[i].shape[d] == 0;
    if (!t[i].data && (!empty || t[i].byte_offset)) return gg_rt_fail(err, errlen, "%s %d has no data (a null pointer)", kind, i);
    uint64_t es = ((uint64_t)t[i].dtype.bits * t[i].dtype.lanes + 7) / 8, at = (uint64_t)(uintptr_t)t[i].data + t[i].byte_offset;
    if (t[i].data && es > 1 && es <= 16 && at % es)
      return gg_rt_fail(err, errlen, "%s %d is not aligned to its %llu-byte elements (data + byte_offset is %llu bytes past a multiple)", kind, i,
                        (unsigned long long)es, (unsigned long long)(at % es));
  }
  return 0;
}

static int bad_input_count(int nin, char *err, size_t errlen) {
  if (nin == gg__desc.ninputs) return 0;
  return gg_rt_fail(err, errlen, "guard failed: expected %d inputs, got %d (gcc-graph explain MODEL lists them)", gg__desc.ninputs, nin);
}

static int check_call(const void *m, const DLTensor *in, int nin, int nout, int64_t *sym, char *err, size_t errlen) {
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (bad_input_count(nin, err, errlen)) return 1;
  if (nout != gg__desc.noutputs) return gg_rt_fail(err, errlen, "expected %d outputs, got %d", gg__desc.noutputs, nout);
  if (nin > GG_MAX_IO || nout > GG_MAX_IO) return gg_rt_fail(err, errlen, "too many inputs or outputs");
  if (nin && !in) return gg_rt_fail(err, errlen, "the inputs are missing (a null pointer)");
  return gg__desc.guard(in, sym, err, errlen) || check_data(in, nin, "input", err, errlen);
}

/* Caller-provided outputs: count, dtype, rank, device and the sizes these inputs give. */
static int check_outputs(const int64_t *sym, DLTensor *out, int nout, void **outs, char *err, size_t errlen) {
  int64_t shape[GG_RT_MAX_RANK];
  if (nout != gg__desc.noutputs) return gg_rt_fail(err, errlen, "expected %d outputs, got %d", gg__desc.noutputs, nout);
  if (nout && !out) return gg_rt_fail(err, errlen, "the outputs are missing (a null pointer)");
  for (int i = 0; i < nout; i++) {
    char name[32];
    snprintf(name, sizeof name, "out.%d", i);
    if (gg_rt_check_tensor(&out[i], name, gg__desc.output_dtypes[i], gg__desc.output_ndims[i], gg__desc.device, err, errlen)) return 1;
    gg__desc.output_shape(i, sym, shape);
    for (int d = 0; d < out[i].ndim; d++)
      if (out[i].shape[d] != shape[d])
        return gg_rt_fail(err, errlen, "output %d size mismatch at index %d. expected %lld, actual %lld", i, d, (long long)shape[d], (long long)out[i].shape[d]);
    if (check_data(&out[i], 1, "output", err, errlen)) return 1;
    outs[i] = out[i].data ? (char *)out[i].data + out[i].byte_offset : NULL;
  }
  return 0;
}

/* ---------------------------------------------------------------- entry points that read the descriptor */

GG_EXPORT const char *gg_metadata(void) { return gg__metadata; }
GG_EXPORT int gg_abi_version(void) { return GG_ABI_VERSION; }
GG_EXPORT int gg_num_inputs(void) { return gg__desc.ninputs; }
GG_EXPORT int gg_num_outputs(void) { return gg__desc.noutputs; }
GG_EXPORT int gg_num_mutated_buffers(void) { return gg__desc.nmutable; }

GG_EXPORT int gg_check(const gg_model *m, const DLTensor *in, int nin, char *err, size_t errlen) {
  (void)m;
  int64_t sym[64];
  if (bad_input_count(nin, err, errlen)) return 1;
  if (nin && !in) return gg_rt_fail(err, errlen, "the inputs are missing (a null pointer)");
  return gg__desc.guard(in, sym, err, errlen);
}

GG_EXPORT int gg_output_shape(const gg_model *m, const DLTensor *in, int nin, int i, int *ndim, int64_t *shape, DLDataType *dtype, char *err,
                              size_t errlen) {
  int64_t sym[64];
  if (gg_check(m, in, nin, err, errlen)) return 1;
  if (i < 0 || i >= gg__desc.noutputs) return gg_rt_fail(err, errlen, "no output %d: the model has %d", i, gg__desc.noutputs);
  if (!ndim || !shape || !dtype) return gg_rt_fail(err, errlen, "no place for the shape (a null pointer)");
  *ndim = gg__desc.output_ndims[i];
  *dtype = gg__desc.output_dtypes[i];
  gg__desc.guard(in, sym, err, errlen);
  gg__desc.output_shape(i, sym, shape);
  return 0;
}


/* kDLCPU, or kDLCUDA for a model compiled with --target cuda: where its inputs and outputs live. */
GG_EXPORT int gg_device_type(void) { return gg__desc.device; }

/* Mutated buffer i of a model whose runtime keeps them at mut[]: its name and a tensor on the
 * model's device (the runtimes' gg_mutated_buffer). */
static int mutated_buffer(void *const *mut, int i, const char **name, DLTensor *v) {
  if (i < 0 || i >= gg__desc.nmutable) return 1;
  *name = gg__desc.weights[gg__desc.mutable_weight[i]].fqn;
  memset(v, 0, sizeof *v);
  v->data = mut[i];
  v->device.device_type = (DLDeviceType)gg__desc.device;
  v->ndim = gg__desc.mutable_ndims[i];
  v->dtype = gg__desc.mutable_dtypes[i];
  v->shape = (int64_t *)&gg__desc.mutable_shapes[i * GG_RT_MAX_RANK];
  return 0;
}

/* ---------------------------------------------------------------- training: the state (both runtimes) */

/* Memory where the model's tensors live (host memory for a CPU model, the GPU's for a CUDA one):
 * each runtime defines them. */
static void *rt_alloc(size_t bytes);
static void rt_free(void *p);

struct gg_train_state {
  int64_t sym[64];
  bool ready;               /* a forward ran: the saved values are there */
  bool has_grads;
  int64_t gen;              /* changes whenever a buffer below moves (a CUDA step's graph is keyed by it) */
  void **saved;             /* the values the forward saved, by index: each inside saved_block */
  size_t *saved_bytes;      /* their bytes (256-byte aligned) */
  void *saved_block;        /* one allocation for the saved values and the gradient buckets, which
                               take the memory of saved values already dead (train_saved_outs) */
  size_t saved_cap;
  int64_t *saved_shapes;    /* GG_RT_MAX_RANK per saved value */
  void **grads;             /* gradients of the last backward: each inside its bucket */
  int64_t *grad_shapes;
  void **bucket;            /* per gradient bucket: its gradients, one after another (256-byte aligned), in saved_block */
  size_t *bucket_cap;       /* its bytes */
  int64_t *bucket_numel;    /* elements in use, padding (zeros) included */
  void **acc;               /* gradient accumulation: the sums over the micro-batches since the last update */
  size_t *acc_bytes;
  int micro;                /* micro-batches in those sums */
  void *table;              /* CUDA: the update's table of tensors, on the device (rt_alloc) */
  size_t table_bytes;
  int64_t table_gen;        /* the generation it was written for */
  int64_t opt_chunks;       /* CUDA: the update's blocks (chunks of its tensors) */
};

GG_EXPORT int gg_num_gradients(void) { return gg__train.ngrads; }

GG_EXPORT void gg_train_state_free(gg_train_state *st) {
  if (!st) return;
  rt_free(st->saved_block);
  for (int i = 0; st->acc && i < gg__train.ngrads; i++) rt_free(st->acc[i]);
  rt_free(st->table);
  free(st->saved);
  free(st->saved_bytes);
  free(st->saved_shapes);
  free(st->grads);
  free(st->grad_shapes);
  free(st->bucket);
  free(st->bucket_cap);
  free(st->bucket_numel);
  free(st->acc);
  free(st->acc_bytes);
  free(st);
}

GG_EXPORT int gg_train_state_new(const gg_model *m, gg_train_state **out, char *err, size_t errlen) {
  *out = NULL;
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (!gg__train.ngrads) return gg_rt_fail(err, errlen, "this model was not compiled for training (gcc-graph compile --train)");
  gg_train_state *st = (gg_train_state *)calloc(1, sizeof *st);
  size_t ns = (size_t)gg__train.nsaved + 1, ng = (size_t)gg__train.ngrads + 1, nb = (size_t)gg__train.nbuckets + 1;
  if (st) {
    st->saved = (void **)calloc(ns, sizeof *st->saved);
    st->saved_bytes = (size_t *)calloc(ns, sizeof *st->saved_bytes);
    st->saved_shapes = (int64_t *)calloc(ns * GG_RT_MAX_RANK, sizeof *st->saved_shapes);
    st->grads = (void **)calloc(ng, sizeof *st->grads);
    st->bucket = (void **)calloc(nb, sizeof *st->bucket);
    st->bucket_cap = (size_t *)calloc(nb, sizeof *st->bucket_cap);
    st->bucket_numel = (int64_t *)calloc(nb, sizeof *st->bucket_numel);
    st->grad_shapes = (int64_t *)calloc(ng * GG_RT_MAX_RANK, sizeof *st->grad_shapes);
    st->acc = (void **)calloc(ng, sizeof *st->acc);
    st->acc_bytes = (size_t *)calloc(ng, sizeof *st->acc_bytes);
  }
  if (!st || !st->saved || !st->saved_bytes || !st->saved_shapes || !st->grads || !st->grad_shapes || !st->bucket || !st->bucket_cap || !st->bucket_numel || !st->acc || !st->acc_bytes) {
    gg_train_state_free(st);
    return gg_rt_fail(err, errlen, "out of memory");
  }
  *out = st;
  return 0;
}

static int64_t numel_of(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

/* (Re)size a buffer of the state for a tensor of `shape` and type t. */
static int state_buffer(gg_train_state *st, void **p, size_t *have, const int64_t *shape, int ndim, DLDataType t) {
  size_t bytes = (size_t)numel_of(shape, ndim) * (size_t)(t.bits / 8) + 1;
  if (*p && *have >= bytes) return 0;
  rt_free(*p);
  *p = rt_alloc(bytes);
  *have = *p ? bytes : 0;
  st->gen++;
  return *p ? 0 : -1;
}

/* One block holds a training state's saved values and its gradient buckets, as PyTorch's allocator
 * gives a gradient the memory of saved values already dead: a saved value lives from the forward to
 * the backward's last kernel that reads it (gg__train.saved_last), a bucket from the backward's first
 * kernel that writes into it (bucket_first) to the next forward. Two that are never alive at once may
 * share bytes: largest first, each at the lowest offset clear of those placed that overlap it in time
 * (as memplan.c plans a program's scratch). Sizes are those at st->sym; the layout is made again when
 * one changes. Items 0..nsaved-1 are the saved values, then the buckets. */
static size_t train_block_layout(const size_t *bytes, const int *from, const int *to, int n, size_t *off) {
  int *order = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  if (!order) return 0;
  for (int i = 0; i < n; i++) order[i] = i;
  for (int x = 1; x < n; x++)   /* by size, largest first; ties in index order */
    for (int y = x; y > 0 && bytes[order[y]] > bytes[order[y - 1]]; y--) { int t = order[y]; order[y] = order[y - 1]; order[y - 1] = t; }
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    int a = order[k];
    size_t at = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < k; j++) {
        int b = order[j];
        bool live = !(to[b] < from[a] || to[a] < from[b]), mem = !(off[b] + bytes[b] <= at || at + bytes[a] <= off[b]);
        if (live && mem) { at = off[b] + bytes[b]; moved = true; }
      }
    }
    off[a] = at;
    if (at + bytes[a] > total) total = at + bytes[a];
  }
  free(order);
  return total;
}

/* The state's block for the values a training model's forward saves (in outs[] after the user
 * outputs) and for the gradients its backward writes, at the sizes of st->sym. */
static int train_saved_outs(gg_train_state *st, void **outs, char *err, size_t errlen) {
  if (gg__desc.noutputs + gg__train.nsaved > 256) return gg_rt_fail(err, errlen, "too many saved values");
  int ns = gg__train.nsaved, nb = gg__train.nbuckets, n = ns + nb;
  size_t *bytes = (size_t *)calloc((size_t)n + 1, sizeof *bytes), *off = (size_t *)calloc((size_t)n + 1, sizeof *off);
  int *from = (int *)calloc((size_t)n + 1, sizeof *from), *to = (int *)calloc((size_t)n + 1, sizeof *to);
  if (!bytes || !off || !from || !to) { free(bytes); free(off); free(from); free(to); return gg_rt_fail(err, errlen, "out of memory"); }
  bool same = st->saved_block != NULL;
  for (int k = 0; k < ns; k++) {
    int i = gg__desc.noutputs + k;
    int64_t *shape = &st->saved_shapes[k * GG_RT_MAX_RANK];
    gg__desc.output_shape(i, st->sym, shape);
    bytes[k] = ((size_t)numel_of(shape, gg__desc.output_ndims[i]) * (size_t)(gg__desc.output_dtypes[i].bits / 8) + 255) & ~(size_t)255;
    from[k] = -1, to[k] = gg__train.saved_last[k];
    same = same && bytes[k] == st->saved_bytes[k];
    st->saved_bytes[k] = bytes[k];
  }
  /* each bucket's gradients one after another, 256-byte aligned, so that a data-parallel run
   * all-reduces a bucket at once */
  for (int k = 0; k < gg__train.ngrads; k++) gg__train.grad_shape(k, st->sym, &st->grad_shapes[k * GG_RT_MAX_RANK]);
  for (int b = 0; b < nb; b++) {
    size_t at = 0, esize = 1;
    for (int k = 0; k < gg__train.ngrads; k++) {
      if (gg__train.grad_bucket[k] != b) continue;
      esize = gg__train.grad_dtypes[k].bits / 8;
      at += ((size_t)numel_of(&st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k]) * esize + 255) & ~(size_t)255;
    }
    bytes[ns + b] = at;
    from[ns + b] = gg__train.bucket_first[b], to[ns + b] = INT32_MAX;
    same = same && at == st->bucket_cap[b];
    st->bucket_cap[b] = at;
    st->bucket_numel[b] = (int64_t)(at / esize);
  }
  int rc = 0;
  if (!same) {   /* laid out again */
    size_t total = train_block_layout(bytes, from, to, n, off);
    if (total > st->saved_cap || !st->saved_block) {
      rt_free(st->saved_block);
      st->saved_cap = 0;
      st->saved_block = rt_alloc(total + 1);
      if (st->saved_block) st->saved_cap = total;
    }
    if (!st->saved_block) rc = gg_rt_fail(err, errlen, "out of memory for the values the forward saves and the gradients");
    for (int k = 0; !rc && k < ns; k++) st->saved[k] = (unsigned char *)st->saved_block + off[k];
    for (int b = 0; !rc && b < nb; b++) {
      st->bucket[b] = (unsigned char *)st->saved_block + off[ns + b];
      size_t at = 0;
      for (int k = 0; k < gg__train.ngrads; k++) {
        if (gg__train.grad_bucket[k] != b) continue;
        st->grads[k] = (unsigned char *)st->bucket[b] + at;
        at += ((size_t)numel_of(&st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k]) * (gg__train.grad_dtypes[k].bits / 8) + 255) & ~(size_t)255;
      }
    }
    st->gen++;
  }
  free(bytes), free(off), free(from), free(to);
  if (rc) return rc;
  for (int k = 0; k < ns; k++) outs[gg__desc.noutputs + k] = st->saved[k];
  return 0;
}

/* The forward of a training model: the guards (binding st->sym), the caller's outputs, and the
 * state's buffers for the values it saves; outs[] gets the user outputs, then the saved values. */
static int train_forward_args(gg_train_state *st, const DLTensor *in, int nin, DLTensor *out, int nout, void **outs, char *err, size_t errlen) {
  st->ready = false;
  st->has_grads = false;   /* the last backward's gradients share the block the forward now writes */
  if (bad_input_count(nin, err, errlen)) return 1;
  if (nin && !in) return gg_rt_fail(err, errlen, "the inputs are missing (a null pointer)");
  if (gg__desc.guard(in, st->sym, err, errlen) || check_data(in, nin, "input", err, errlen) || check_outputs(st->sym, out, nout, outs, err, errlen)) return 1;
  return train_saved_outs(st, outs, err, errlen);
}

/* The backward's inputs (the saved values, then the loss's cotangent: grad_loss, or `one`, a 1 of the
 * loss's dtype where the model's tensors live) in bin[], and the state's gradient buffers in gouts[]. */
static int train_backward_args(gg_train_state *st, const DLTensor *grad_loss, void *one, DLTensor *bin, int64_t *one_shape, void **gouts, char *err,
                               size_t errlen) {
  if (!st->ready)
    return gg_rt_fail(err, errlen, "gg_backward needs a gg_forward with this state first (each forward's saved values serve one backward, "
                                    "whose gradients take their memory, as PyTorch frees a graph after its backward)");
  st->ready = false;
  int ns = gg__train.nsaved;
  if (ns + 1 > 257 || gg__train.ngrads > 256) return gg_rt_fail(err, errlen, "too many saved values or gradients");
  memset(bin, 0, sizeof *bin * (size_t)(ns + 1));
  for (int k = 0; k < ns; k++) {
    int i = gg__desc.noutputs + k;
    bin[k].data = st->saved[k];
    bin[k].device.device_type = (DLDeviceType)gg__desc.device;
    bin[k].ndim = gg__desc.output_ndims[i];
    bin[k].dtype = gg__desc.output_dtypes[i];
    bin[k].shape = &st->saved_shapes[k * GG_RT_MAX_RANK];
  }
  if (grad_loss) {
    if (gg_rt_check_tensor(grad_loss, "grad_loss", gg__train.loss_dtype, gg__train.loss_ndim, gg__desc.device, err, errlen)) return 1;
    for (int d = 0; d < grad_loss->ndim; d++)
      if (grad_loss->shape[d] != 1) return gg_rt_fail(err, errlen, "grad_loss must have one element");
    bin[ns] = *grad_loss;
  } else {
    if (gg__train.loss_dtype.code != kDLFloat || (gg__train.loss_dtype.bits != 32 && gg__train.loss_dtype.bits != 64))
      return gg_rt_fail(err, errlen, "give grad_loss: the loss is %s", gg_rt_dtype_name(gg__train.loss_dtype));
    for (int d = 0; d < GG_RT_MAX_RANK; d++) one_shape[d] = 1;
    bin[ns].data = one;
    bin[ns].device.device_type = (DLDeviceType)gg__desc.device;
    bin[ns].ndim = gg__train.loss_ndim;
    bin[ns].dtype = gg__train.loss_dtype;
    bin[ns].shape = one_shape;
  }
  /* the gradients' places in the state's block (train_saved_outs, at the forward) */
  for (int k = 0; k < gg__train.ngrads; k++) gouts[k] = st->grads[k];
  return 0;
}

/* ---------------------------------------------------------------- data-parallel training (both runtimes)
 *
 * The backward calls GG_BUCKET(b) when the last gradient of bucket b is final; each runtime's
 * gg_rt_bucket hands the bucket to the all-reduce (docs/distributed.md). */

GG_EXPORT int gg_num_buckets(void) { return gg__train.nbuckets; }

/* Bucket b of st's gradients as one 1-D tensor (its padding between gradients unspecified). */
static int bucket_tensor(const gg_train_state *st, int b, DLTensor *v) {
  if (!st || b < 0 || b >= gg__train.nbuckets || !st->bucket[b]) return 1;
  memset(v, 0, sizeof *v);
  v->data = st->bucket[b];
  v->device.device_type = (DLDeviceType)gg__desc.device;
  v->ndim = 1;
  for (int k = 0; k < gg__train.ngrads; k++)
    if (gg__train.grad_bucket[k] == b) v->dtype = gg__train.grad_dtypes[k];
  v->shape = (int64_t *)&st->bucket_numel[b];
  return 0;
}

GG_EXPORT int gg_bucket(const gg_train_state *st, int b, DLTensor *value) { return bucket_tensor(st, b, value); }

/* Before an update: every gradient the optimizer applies is float32, and the state has its
 * accumulation buffers where micro-batches are summed (accum > 1). */
static int train_update_args(gg_train_state *st, int accum, char *err, size_t errlen) {
  for (int k = 0; k < gg__train.ngrads; k++) {
    if (gg__train.grad_weight[k] < 0) continue;   /* an input's gradient: nothing to update */
    if (gg__train.grad_dtypes[k].code != kDLFloat || gg__train.grad_dtypes[k].bits != 32)
      return gg_rt_fail(err, errlen, "the optimizer updates float32 parameters only ('%s' is %s)", gg__train.grad_names[k],
                        gg_rt_dtype_name(gg__train.grad_dtypes[k]));
    if (accum > 1 && state_buffer(st, &st->acc[k], &st->acc_bytes[k], &st->grad_shapes[k * GG_RT_MAX_RANK], gg__train.grad_ndims[k], gg__train.grad_dtypes[k]))
      return gg_rt_fail(err, errlen, "out of memory for gradient accumulation");
  }
  return 0;
}

/* The hyperparameters of this call of gg_train_step: the optimizer's (lr, the bias corrections of
 * step t) and the accumulation's (this call adds micro-batch st->micro of accum, or updates). */
static gg_hyper train_hyper(double lr, int64_t t, int accum, const gg_train_state *st) {
  const gg_train_desc *d = &gg__train;
  gg_hyper h;
  memset(&h, 0, sizeof h);
  h.lr = (float)lr, h.wd = (float)d->weight_decay, h.mu = (float)d->momentum, h.b1 = (float)d->beta1, h.b2 = (float)d->beta2, h.eps = (float)d->eps;
  h.c1 = (float)(1 - pow(d->beta1, (double)t));
  h.c2 = (float)sqrt(1 - pow(d->beta2, (double)t));
  h.fresh = t == 1;
  h.accumulate = st->micro + 1 < accum;
  h.first_micro = st->micro == 0;
  h.summed = accum > 1;
  h.scale = (float)(1.0 / accum);
  return h;
}

GG_EXPORT int gg_set_learning_rate(gg_model *m, double lr) {
  if (!m || !gg__train.optimizer || !(lr >= 0)) return 1;
  pthread_mutex_lock(&m->lock);
  m->lr = lr;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

GG_EXPORT int gg_set_grad_accumulation(gg_model *m, int micro_batches) {
  if (!m || !gg__train.optimizer || micro_batches < 1) return 1;
  pthread_mutex_lock(&m->lock);
  m->accum = micro_batches;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

/* Weight i's storage is weight j's (j < i) when both sit at the same offset with the same size:
 * the compiler stores the same bytes of the model file once (tied parameters: one Parameter under
 * two names), and training must update them as one. -1: a storage of its own. */
static int weight_storage_of(int i) {
  const gg_weight_desc *w = gg__desc.weights;
  if (w[i].mutable_index >= 0) return -1;
  for (int j = 0; j < i; j++)
    if (w[j].offset == w[i].offset && w[j].nbytes == w[i].nbytes && w[j].mutable_index < 0) return j;
  return -1;
}

GG_EXPORT int gg_num_weights(void) { return gg__desc.nweights; }

/* data: the weight's address on the model's device (a CUDA model's is a device address) */
GG_EXPORT int gg_weight(const gg_model *m, int i, const char **name, const void **data, size_t *nbytes) {
  if (!m || i < 0 || i >= gg__desc.nweights) return 1;
  *name = gg__desc.weights[i].fqn;
  *data = m->w[i];
  *nbytes = (size_t)gg__desc.weights[i].nbytes;
  return 0;
}

GG_EXPORT int gg_gradient(const gg_train_state *st, int i, const char **name, DLTensor *v) {
  if (!st || !st->has_grads || i < 0 || i >= gg__train.ngrads) return 1;
  *name = gg__train.grad_names[i];
  memset(v, 0, sizeof *v);
  v->data = st->grads[i];
  v->device.device_type = (DLDeviceType)gg__desc.device;
  v->ndim = gg__train.grad_ndims[i];
  v->dtype = gg__train.grad_dtypes[i];
  v->shape = (int64_t *)&st->grad_shapes[i * GG_RT_MAX_RANK];
  return 0;
}

/* ---------------------------------------------------------------- profile
 * GCC_GRAPH_PROFILE: the run body ticks after each node that ran code (GG_TICK); each runtime's
 * gg_rt_tick measures the time since the last tick (the CPU's clock; CUDA events on the run's
 * stream, read after the run) and gives it to prof_add and trace_add here. */

bool gg_rt_prof_on;
static int64_t prof_runs[2];

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

/* Concurrent runs of one model blur the figures (each thread's ticks add up its own time), so the
 * sums are atomic: a data race would be undefined behaviour, not just a blur. */
static void prof_add(double *slot, double v) {
  double cur, next;
  __atomic_load(slot, &cur, __ATOMIC_RELAXED);
  do next = cur + v;
  while (!__atomic_compare_exchange(slot, &cur, &next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* GCC_GRAPH_PROFILE=FILE.json: every node of every run as a Chrome trace event ("X": a start and a
 * duration, on the thread that ran the node), kept in memory and written to FILE when the model is
 * closed (and when the process exits, for callers that never close it). */
typedef struct trace_ev { const char *name, *cat; double t, dur; int tid; } trace_ev;
#define TRACE_MAX_EVENTS ((size_t)1 << 22)   /* 4M events, ~160 MB: later ones are dropped, and the file says so */
static const char *trace_path;
static trace_ev *trace_evs;
static size_t trace_n, trace_cap, trace_dropped, trace_written = (size_t)-1;
static double trace_t0;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
#ifdef __CUDACC__
static __thread int trace_tid;   /* a CUDA model's libraries leave no static TLS to spare (dlopen would fail) */
#else
static __thread int trace_tid __attribute__((tls_model("initial-exec")));   /* no __tls_get_addr: the .so needs no ld.so symbols */
#endif
static int trace_next_tid;

static void trace_add(const double *slot, double t0, double t1) {
  const char *name = NULL, *cat = NULL;
  if (gg__desc.prof && slot >= gg__desc.prof && slot < gg__desc.prof + gg__desc.nprof)
    name = gg__desc.prof_names[slot - gg__desc.prof], cat = gg__train.ngrads ? "forward" : "run";
  else if (gg__train.prof && slot >= gg__train.prof && slot < gg__train.prof + gg__train.nprof)
    name = gg__train.prof_names[slot - gg__train.prof], cat = "backward";
  if (!name) return;
  pthread_mutex_lock(&trace_lock);
  if (!trace_tid) trace_tid = ++trace_next_tid;
  if (trace_n == trace_cap && trace_cap < TRACE_MAX_EVENTS) {
    size_t cap = trace_cap ? 2 * trace_cap : 4096;
    trace_ev *e = (trace_ev *)realloc(trace_evs, cap * sizeof *e);
    if (e) trace_evs = e, trace_cap = cap;
  }
  if (trace_n < trace_cap) {
    trace_ev *e = &trace_evs[trace_n++];
    e->name = name, e->cat = cat, e->t = t0 - trace_t0, e->dur = t1 - t0, e->tid = trace_tid;
  } else trace_dropped++;
  pthread_mutex_unlock(&trace_lock);
}

/* s as a JSON string: quotes, backslashes and control characters escaped, a byte that is not part of
 * valid UTF-8 (a model's names are bytes) written as U+FFFD, so that the file stays JSON */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    unsigned char ch = *p;
    int n = ch < 0x80 ? 1 : ch >= 0xc2 && ch <= 0xdf ? 2 : ch >= 0xe0 && ch <= 0xef ? 3 : ch >= 0xf0 && ch <= 0xf4 ? 4 : 0;
    for (int k = 1; k < n; k++)
      if ((p[k] & 0xc0) != 0x80) n = 0;   /* a continuation byte missing (or the string's end) */
    if (n == 3 && ((ch == 0xe0 && p[1] < 0xa0) || (ch == 0xed && p[1] >= 0xa0))) n = 0;   /* overlong, or a surrogate */
    if (n == 4 && ((ch == 0xf0 && p[1] < 0x90) || (ch == 0xf4 && p[1] >= 0x90))) n = 0;   /* overlong, or past U+10FFFF */
    if (!n) { fputs("\\ufffd", f); p++; continue; }
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fwrite(p, 1, (size_t)n, f);
    p += n;
  }
  fputc('"', f);
}

/* The trace so far, as a whole file (written again at each close: the last one has every event). */
static void trace_write(void) {
  if (!trace_path) return;
  pthread_mutex_lock(&trace_lock);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", trace_path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    trace_written = trace_n;
    fprintf(stderr, "gcc-graph profile: cannot write %s: %s\n", trace_path, strerror(errno));
  } else {
    fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"model\": ", f);
    Dl_info di;
    json_str(f, dladdr((void *)&trace_write, &di) && di.dli_fname ? di.dli_fname : "?");
#ifdef __CUDACC__
    fputs(", \"device\": \"cuda: GPU time per node, launched without the CUDA graph\"", f);
#else
    fputs(", \"device\": \"cpu\"", f);
#endif
    fprintf(f, ", \"events_dropped\": %zu}, \"traceEvents\": [\n", trace_dropped);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"gcc-graph model\"}}", (int)getpid());
    for (size_t i = 0; i < trace_n; i++) {
      const trace_ev *e = &trace_evs[i];
      fputs(",\n{\"name\": ", f);
      json_str(f, e->name);
      fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d}", e->cat, 1e6 * e->t, 1e6 * e->dur,
              (int)getpid(), e->tid);
    }
    fputs("\n]}\n", f);
    trace_written = trace_n;   /* written, or failed with a message: not again at exit for these */
    if (fclose(f) || rename(tmp, trace_path)) fprintf(stderr, "gcc-graph profile: cannot write %s: %s\n", trace_path, strerror(errno));
    else {
      fprintf(stderr, "gcc-graph profile: %zu events in %s (a Chrome trace: Perfetto, chrome://tracing)\n", trace_n, trace_path);
    }
  }
  pthread_mutex_unlock(&trace_lock);
}

__attribute__((destructor)) static void trace_at_exit(void) {
  if (trace_path && trace_n != trace_written) trace_write();
}

static void prof_count(int which) {
  if (gg_rt_prof_on) __atomic_fetch_add(&prof_runs[which], 1, __ATOMIC_RELAXED);
}

/* GCC_GRAPH_PROFILE, read once per process (at the first gg_open), so that opening a second model
 * never writes the flag that running ones read: 1 prints the nodes that took the most time at
 * gg_close; a name ending in .json also writes the Chrome trace there */
static void prof_init(void) {
  const char *pe = getenv("GCC_GRAPH_PROFILE");
  gg_rt_prof_on = pe && *pe && strcmp(pe, "0");
  size_t n = pe ? strlen(pe) : 0;
  if (gg_rt_prof_on && n > 5 && !strcmp(pe + n - 5, ".json")) {
    trace_path = strdup(pe);
    trace_t0 = now_s();
  }
}
static pthread_once_t prof_once = PTHREAD_ONCE_INIT;

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

/* at gg_close: the summary on stderr, and the trace so far written */
static void prof_close(void) {
  if (!gg_rt_prof_on) return;
  prof_report(gg__train.ngrads ? "forward" : "run", gg__desc.nprof, gg__desc.prof, gg__desc.prof_names, prof_runs[0]);
  prof_report("backward", gg__train.nprof, gg__train.prof, gg__train.prof_names, prof_runs[1]);
  trace_write();
}

/* ---------------------------------------------------------------- random ops */

static uint64_t rng_seed_v, rng_draws;
static pthread_once_t rng_once = PTHREAD_ONCE_INIT;

static void rng_init(void) {
  const char *s = getenv("GCC_GRAPH_SEED");
  rng_seed_v = s && *s ? strtoull(s, NULL, 0) : 0;
}

uint64_t gg_rt_rng_seed(void) {
  pthread_once(&rng_once, rng_init);
  return __atomic_load_n(&rng_seed_v, __ATOMIC_RELAXED);
}

uint64_t gg_rt_rng_draw(void) { return __atomic_fetch_add(&rng_draws, 1, __ATOMIC_RELAXED); }

GG_EXPORT void gg_manual_seed(uint64_t seed) {
  pthread_once(&rng_once, rng_init);
  __atomic_store_n(&rng_seed_v, seed, __ATOMIC_RELAXED);
  __atomic_store_n(&rng_draws, 0, __ATOMIC_RELAXED);
}
