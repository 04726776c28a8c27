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
  if (!t || (!t->data && t->ndim >= 0 && 0)) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' is missing", name);
  if ((int)t->device.device_type != device)
    return gg_rt_fail(err, errlen, "guard failed: tensor '%s' device mismatch. expected %s, actual %s", name, device_name(device),
                      device_name((int)t->device.device_type));
  if (!same_dtype(t->dtype, want))
    return gg_rt_fail(err, errlen, "guard failed: tensor '%s' dtype mismatch. expected %s, actual %s", name, gg_rt_dtype_name(want), gg_rt_dtype_name(t->dtype));
  if (t->ndim != ndim) return gg_rt_fail(err, errlen, "guard failed: tensor '%s' rank mismatch. expected %d, actual %d", name, ndim, t->ndim);
  if (t->strides) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      if (t->shape[d] != 1 && t->strides[d] != s)
        return gg_rt_fail(err, errlen, "guard failed: tensor '%s' stride mismatch at index %d. expected %lld (row-major compact), actual %lld", name, d,
                          (long long)s, (long long)t->strides[d]);
      s *= t->shape[d];
    }
  }
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
    return gg_rt_fail(err, errlen, "%s: not the weights file this model was compiled with (size %lld, expected %lld)", weights,
                      (long long)st.st_size, (long long)gg__desc.external_size);
  }
  *len = (size_t)st.st_size;
  *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (*map == MAP_FAILED) { *map = NULL; return gg_rt_fail(err, errlen, "%s: cannot map", weights); }
  return 0;
}

#define GG_MAX_IO 256

/* What every run checks first: an open model, the counts of inputs and outputs, the guards (which
 * bind the symbols' values in sym). */
static int check_call(const void *m, const DLTensor *in, int nin, int nout, int64_t *sym, char *err, size_t errlen) {
  if (!m) return gg_rt_fail(err, errlen, "model is not open");
  if (nin != gg__desc.ninputs) return gg_rt_fail(err, errlen, "guard failed: expected %d inputs, got %d", gg__desc.ninputs, nin);
  if (nout != gg__desc.noutputs) return gg_rt_fail(err, errlen, "expected %d outputs, got %d", gg__desc.noutputs, nout);
  if (nin > GG_MAX_IO || nout > GG_MAX_IO) return gg_rt_fail(err, errlen, "too many inputs or outputs");
  return gg__desc.guard(in, sym, err, errlen);
}

/* Caller-provided outputs: count, dtype, rank, device and the sizes these inputs give. */
static int check_outputs(const int64_t *sym, DLTensor *out, int nout, void **outs, char *err, size_t errlen) {
  int64_t shape[GG_RT_MAX_RANK];
  if (nout != gg__desc.noutputs) return gg_rt_fail(err, errlen, "expected %d outputs, got %d", gg__desc.noutputs, nout);
  for (int i = 0; i < nout; i++) {
    char name[32];
    snprintf(name, sizeof name, "out.%d", i);
    if (gg_rt_check_tensor(&out[i], name, gg__desc.output_dtypes[i], gg__desc.output_ndims[i], gg__desc.device, err, errlen)) return 1;
    gg__desc.output_shape(i, sym, shape);
    for (int d = 0; d < out[i].ndim; d++)
      if (out[i].shape[d] != shape[d])
        return gg_rt_fail(err, errlen, "output %d size mismatch at index %d. expected %lld, actual %lld", i, d, (long long)shape[d], (long long)out[i].shape[d]);
    outs[i] = (char *)out[i].data + out[i].byte_offset;
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
  if (nin != gg__desc.ninputs) return gg_rt_fail(err, errlen, "guard failed: expected %d inputs, got %d", gg__desc.ninputs, nin);
  return gg__desc.guard(in, sym, err, errlen);
}

GG_EXPORT int gg_output_shape(const gg_model *m, const DLTensor *in, int nin, int i, int *ndim, int64_t *shape, DLDataType *dtype, char *err,
                              size_t errlen) {
  int64_t sym[64];
  if (gg_check(m, in, nin, err, errlen)) return 1;
  if (i < 0 || i >= gg__desc.noutputs) return gg_rt_fail(err, errlen, "no output %d: the model has %d", i, gg__desc.noutputs);
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
