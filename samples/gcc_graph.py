"""gcc_graph.py: load a model compiled by gcc-graph from Python, with ctypes and DLPack.

    from gcc_graph import Model
    m = Model("model.so")                 # Model("model.so", weights="model.pt2") for --weights external
    print(m.metadata["inputs"])
    y, = m(x)                             # x: NumPy arrays or torch tensors (CPU, row-major)

    t = Model("train.so")                 # compiled with --train (--optimizer sgd|adam for train_step)
    loss, = t.forward(x, y)               # keeps what the backward needs
    grads = t.backward()                  # {parameter name: gradient}, of the loss (d loss = 1)
    loss, = t.train_step(x, y)            # forward, backward and the optimizer's update

    # data-parallel, one process per GPU (or per CPU share) under torchrun (docs/distributed.md):
    torch.distributed.init_process_group("nccl")   # "gloo" for a CPU model
    t = Model("train_cuda.so", device=local_rank)
    t.data_parallel()                     # rank 0's weights everywhere; gradients averaged in buckets
    loss, = t.train_step(x_shard, y_shard)

A CUDA model (--target cuda) takes and gives torch CUDA tensors (NumPy inputs are copied to the
GPU); gradients and weights come back as NumPy arrays.
Inputs may be NumPy arrays or anything with __dlpack__ (torch, JAX, CuPy host arrays): the model
reads them in place, without a copy. Outputs come back as NumPy arrays that own their memory.
Needs only the standard library and NumPy."""
import ctypes
import json

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_CODES = {"f": 2, "i": 0, "u": 1, "b": 6}   # kDLFloat, kDLInt, kDLUInt, kDLBool


def _as_array(x):
    """NumPy view of x without a copy when possible (torch tensors through DLPack)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    if hasattr(x, "__dlpack__"):
        return np.ascontiguousarray(np.from_dlpack(x))
    return np.ascontiguousarray(np.asarray(x))


def _dtype_of(meta):
    return {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int64": np.int64, "int32": np.int32,
            "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}[meta]


_SUM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(DLTensor))
_CTYPES = {(2, 32): ctypes.c_float, (2, 64): ctypes.c_double, (2, 16): ctypes.c_uint16, (4, 16): ctypes.c_uint16,
           (1, 8): ctypes.c_uint8, (0, 64): ctypes.c_int64}


def _host_copy(lib, t):
    """A NumPy copy of the tensor t (host memory, or a CUDA model's device memory)."""
    shape = tuple(t.shape[d] for d in range(t.ndim))
    n = int(np.prod(shape)) if shape else 1
    ct = _CTYPES[(t.dtype.code, t.dtype.bits)]
    if t.device.device_type == 2:
        buf = (ct * n)()
        lib.gg_device_copy(ctypes.cast(buf, ctypes.c_void_p), ctypes.c_void_p(t.data), ctypes.c_size_t(n * ctypes.sizeof(ct)), 0)
    else:
        buf = (ct * n).from_address(t.data)
    return np.array(buf, copy=True).reshape(shape)


class Model:
    def __init__(self, path, weights=None, device=None):
        """device: a CUDA model's GPU (an index; default: the current one), made current before it opens."""
        self.lib = ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_LOCAL", 0))
        self.cuda = self.lib.gg_device_type() == 2
        if self.cuda:
            import torch
            if device is not None:
                torch.cuda.set_device(device)
            self.device = torch.device("cuda", torch.cuda.current_device())
            torch.zeros(1, device=self.device)   # the device's context, made current for the runtime
        self.lib.gg_metadata.restype = ctypes.c_char_p
        self.metadata = json.loads(self.lib.gg_metadata().decode())
        self.handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        w = weights.encode() if weights else None
        if self.lib.gg_open(ctypes.byref(self.handle), w, err, len(err)):
            raise RuntimeError(err.value.decode())

    def __call__(self, *inputs):
        return self._run(inputs, "gg_run")

    # ---- training models (gcc-graph compile --train)
    def _state(self):
        if not getattr(self, "state", None):
            self.state = ctypes.c_void_p()
            err = ctypes.create_string_buffer(1024)
            if self.lib.gg_train_state_new(self.handle, ctypes.byref(self.state), err, len(err)):
                self.state = None
                raise RuntimeError(err.value.decode())
        return self.state

    def forward(self, *inputs):
        """The forward of a training model; keeps the values the backward needs."""
        return self._run(inputs, "gg_forward")

    def backward(self):
        """The gradient of the loss (after forward) for every parameter: {name: NumPy array}."""
        err = ctypes.create_string_buffer(1024)
        if self.lib.gg_backward(self.handle, self._state(), None, err, len(err)):
            raise RuntimeError(err.value.decode())
        grads, name, t = {}, ctypes.c_char_p(), DLTensor()
        for i in range(self.lib.gg_num_gradients()):
            self.lib.gg_gradient(self.state, i, ctypes.byref(name), ctypes.byref(t))
            grads[name.value.decode()] = _host_copy(self.lib, t)
        return grads

    def train_step(self, *inputs):
        """Forward, backward and the optimizer's update of the weights the model holds."""
        return self._run(inputs, "gg_train_step")

    def set_learning_rate(self, lr):
        if self.lib.gg_set_learning_rate(self.handle, ctypes.c_double(lr)):
            raise ValueError("the model has no optimizer, or the rate is negative")

    def set_grad_accumulation(self, micro_batches):
        if self.lib.gg_set_grad_accumulation(self.handle, int(micro_batches)):
            raise ValueError("the model has no optimizer, or micro_batches < 1")

    def weights(self):
        """The parameters and buffers as the model holds them now: {name: NumPy array of bytes}."""
        out, name, data, nbytes = {}, ctypes.c_char_p(), ctypes.c_void_p(), ctypes.c_size_t()
        for i in range(self.lib.gg_num_weights()):
            self.lib.gg_weight(self.handle, i, ctypes.byref(name), ctypes.byref(data), ctypes.byref(nbytes))
            n = nbytes.value
            t = DLTensor(data.value, DLDevice(2 if self.cuda else 1, 0), 1, DLDataType(1, 8, 1), (ctypes.c_int64 * 1)(n), None, 0)
            out[name.value.decode()] = _host_copy(self.lib, t) if n else np.zeros(0, np.uint8)
        return out

    def data_parallel(self, group=None):
        """Train data-parallel with the other ranks of torch.distributed's group (init_process_group
        first; torchrun sets the environment). Every rank's weights become rank 0's; from then on each
        train_step (and backward) averages the gradients over the ranks, bucket by bucket as the
        backward finishes them. CUDA models: NCCL, its unique id sent from rank 0 through the group.
        CPU models: the group's all_reduce (gloo), called for each bucket."""
        import torch
        import torch.distributed as dist
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        err = ctypes.create_string_buffer(1024)
        if self.cuda:
            uid = ctypes.create_string_buffer(128)
            if rank == 0 and self.lib.gg_nccl_unique_id(uid, err, len(err)):
                raise RuntimeError(err.value.decode())
            box = [uid.raw]
            dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group else 0, group=group,
                                       device=self.device if dist.get_backend(group) == "nccl" else None)
            if self.lib.gg_set_data_parallel_nccl(self.handle, world, rank, ctypes.c_char_p(box[0]), err, len(err)):
                raise RuntimeError(err.value.decode())
            return self
        dtypes = {(2, 32): torch.float32, (2, 64): torch.float64, (2, 16): torch.float16, (4, 16): torch.bfloat16, (1, 8): torch.uint8}

        def allreduce(ctx, bucket, tp):
            try:
                t = tp.contents
                n = t.shape[0]
                arr = np.ctypeslib.as_array((_CTYPES[(t.dtype.code, t.dtype.bits)] * n).from_address(t.data))
                ten = torch.from_numpy(arr).view(dtypes[(t.dtype.code, t.dtype.bits)])
                if bucket < 0:   # the first call: rank 0's weights
                    dist.broadcast(ten, src=dist.get_global_rank(group, 0) if group else 0, group=group)
                else:
                    dist.all_reduce(ten, group=group)
                return 0
            except Exception:   # an exception cannot cross the C frames: print it, and fail the step
                import traceback
                traceback.print_exc()
                return 1
        self._allreduce = _SUM(allreduce)   # kept alive as long as the model
        if self.lib.gg_set_data_parallel(self.handle, world, rank, self._allreduce, None, err, len(err)):
            raise RuntimeError(err.value.decode())
        return self

    def _run(self, inputs, entry):
        if self.cuda:
            return self._run_cuda(inputs, entry)
        arrays = [_as_array(x) for x in inputs]
        n_in, n_out = self.lib.gg_num_inputs(), self.lib.gg_num_outputs()
        if len(arrays) != n_in:
            raise ValueError(f"the model takes {n_in} inputs, got {len(arrays)}")
        keep = []
        dl_in = (DLTensor * n_in)()
        for t, a in zip(dl_in, arrays):
            shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            keep.append(shape)
            t.data = a.ctypes.data
            t.device = DLDevice(1, 0)
            t.ndim = a.ndim
            t.dtype = DLDataType(_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1)
            t.shape = shape
        outs = []
        err = ctypes.create_string_buffer(1024)
        shape = (ctypes.c_int64 * 16)()
        ndim, dtype = ctypes.c_int(), DLDataType()
        for i, meta in enumerate(self.metadata["outputs"]):
            if self.lib.gg_output_shape(self.handle, dl_in, n_in, i, ctypes.byref(ndim), shape, ctypes.byref(dtype), err, len(err)):
                raise RuntimeError(err.value.decode())
            outs.append(np.empty(tuple(shape[:ndim.value]), dtype=_dtype_of(meta["dtype"])))
        dl_out = (DLTensor * n_out)()
        for t, a in zip(dl_out, outs):
            s = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            keep.append(s)
            t.data, t.device, t.ndim, t.shape = a.ctypes.data, DLDevice(1, 0), a.ndim, s
            t.dtype = DLDataType(_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1)
        call = getattr(self.lib, entry)
        args = (self.handle, dl_in, n_in, dl_out, n_out, err, len(err)) if entry == "gg_run" else (self.handle, self._state(), dl_in, n_in, dl_out, n_out, err, len(err))
        if call(*args):
            raise RuntimeError(err.value.decode())
        return outs

    def _run_cuda(self, inputs, entry):
        """The same on torch's CUDA tensors: outputs are torch tensors on the model's GPU."""
        import torch
        DL = {torch.float32: (2, 32), torch.float64: (2, 64), torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.int64: (0, 64),
              torch.int32: (0, 32), torch.bool: (6, 8), torch.uint8: (1, 8), torch.int8: (0, 8)}
        xs = [(x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))).to(self.device).contiguous() for x in inputs]
        n_in, n_out = self.lib.gg_num_inputs(), self.lib.gg_num_outputs()
        if len(xs) != n_in:
            raise ValueError(f"the model takes {n_in} inputs, got {len(xs)}")
        keep = []

        def dl(ts):
            arr = (DLTensor * max(len(ts), 1))()
            for i, t in enumerate(ts):
                shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
                keep.append(shape)
                code, bits = DL[t.dtype]
                arr[i] = DLTensor(t.data_ptr(), DLDevice(2, self.device.index), t.dim(), DLDataType(code, bits, 1), shape, None, 0)
            return arr
        dl_in = dl(xs)
        err = ctypes.create_string_buffer(1024)
        shape = (ctypes.c_int64 * 16)()
        ndim, dtype = ctypes.c_int(), DLDataType()
        back = {v: k for k, v in DL.items()}
        outs = []
        for i in range(n_out):
            if self.lib.gg_output_shape(self.handle, dl_in, n_in, i, ctypes.byref(ndim), shape, ctypes.byref(dtype), err, len(err)):
                raise RuntimeError(err.value.decode())
            outs.append(torch.empty(tuple(shape[:ndim.value]), dtype=back[(dtype.code, dtype.bits)], device=self.device))
        dl_out = dl(outs)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        if not stream:   # torch's legacy default stream, which the model's own does not wait for
            torch.cuda.synchronize(self.device)
        self.lib.gg_set_stream(self.handle, ctypes.c_void_p(stream or None))   # else ordered on torch's stream
        call = getattr(self.lib, entry)
        args = (self.handle, dl_in, n_in, dl_out, n_out, err, len(err)) if entry == "gg_run" else (self.handle, self._state(), dl_in, n_in, dl_out, n_out, err, len(err))
        if call(*args):
            raise RuntimeError(err.value.decode())
        return outs

    def __del__(self):
        if getattr(self, "state", None):
            self.lib.gg_train_state_free(self.state)
            self.state = None
        if getattr(self, "handle", None):
            self.lib.gg_close(self.handle)
            self.handle = None


if __name__ == "__main__":
    import sys
    m = Model(sys.argv[1])
    xs = [np.random.default_rng(0).standard_normal([int(d) for d in i["shape"]]).astype(_dtype_of(i["dtype"]))
          for i in m.metadata["inputs"]]
    for i, y in enumerate(m(*xs)):
        print(f"out.{i}", y.shape, y.dtype, y.ravel()[:4])
