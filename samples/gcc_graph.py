"""gcc_graph.py: load a model compiled by gcc-graph from Python, with ctypes and DLPack.

    from gcc_graph import Model
    m = Model("model.so")                 # Model("model.so", weights="model.pt2") for --weights external
    print(m.metadata["inputs"])
    y, = m(x)                             # x: NumPy arrays or torch tensors (CPU, row-major)

    t = Model("train.so")                 # compiled with --train (--optimizer sgd|adam for train_step)
    loss, = t.forward(x, y)               # keeps what the backward needs
    grads = t.backward()                  # {parameter name: gradient}, of the loss (d loss = 1)
    loss, = t.train_step(x, y)            # forward, backward and the optimizer's update

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


class Model:
    def __init__(self, path, weights=None):
        self.lib = ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_LOCAL", 0))
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
            shape = tuple(t.shape[d] for d in range(t.ndim))
            n = int(np.prod(shape)) if shape else 1
            buf = (ctypes.c_float * n).from_address(t.data) if t.dtype.bits == 32 else (ctypes.c_double * n).from_address(t.data)
            grads[name.value.decode()] = np.array(buf, copy=True).reshape(shape)
        return grads

    def train_step(self, *inputs):
        """Forward, backward and the optimizer's update of the weights the model holds."""
        return self._run(inputs, "gg_train_step")

    def _run(self, inputs, entry):
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
