"""gcc_graph.Model: a compiled model (.so) called from Python through its C entry points
(include/gcc_graph.h) with ctypes; tensors cross as DLTensors that point at the caller's memory."""
import ctypes
import functools
import json
import os
import sys
import threading

from . import _dlpack as D

ABI_VERSION = 1
_P = ctypes.POINTER
_vp, _int, _sz, _cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
_TENS = _P(D.DLTensor)
_SIGS = {
    "gg_metadata": (_cp, []), "gg_abi_version": (_int, []), "gg_num_inputs": (_int, []), "gg_num_outputs": (_int, []),
    "gg_device_type": (_int, []), "gg_num_gradients": (_int, []), "gg_num_weights": (_int, []),
    "gg_open": (_int, [_P(_vp), _cp, _cp, _sz]), "gg_close": (None, [_vp]),
    "gg_output_shape": (_int, [_vp, _TENS, _int, _int, _P(_int), _P(ctypes.c_int64), _P(D.DLDataType), _cp, _sz]),
    "gg_run": (_int, [_vp, _TENS, _int, _TENS, _int, _cp, _sz]),
    "gg_forward": (_int, [_vp, _vp, _TENS, _int, _TENS, _int, _cp, _sz]),
    "gg_train_step": (_int, [_vp, _vp, _TENS, _int, _TENS, _int, _cp, _sz]),
    "gg_backward": (_int, [_vp, _vp, _TENS, _cp, _sz]),
    "gg_gradient": (_int, [_vp, _int, _P(_cp), _TENS]),
    "gg_weight": (_int, [_vp, _int, _P(_cp), _P(_vp), _P(_sz)]),
    "gg_train_state_new": (_int, [_vp, _P(_vp), _cp, _sz]), "gg_train_state_free": (None, [_vp]),
    "gg_set_learning_rate": (_int, [_vp, ctypes.c_double]), "gg_set_grad_accumulation": (_int, [_vp, _int]),
    "gg_manual_seed": (None, [ctypes.c_uint64]),
    "gg_set_stream": (_int, [_vp, _vp]), "gg_device_copy": (_int, [_vp, _vp, _sz, _int]),
    "gg_nccl_unique_id": (_int, [_cp, _cp, _sz]), "gg_set_data_parallel_nccl": (_int, [_vp, _int, _int, _cp, _cp, _sz]),
}
_ALLREDUCE = ctypes.CFUNCTYPE(_int, _vp, _int, _TENS)
_CACHE_MAX = 64   # input signatures (dtypes, shapes, devices) remembered per thread


class GuardError(ValueError):
    """The inputs do not satisfy the model's guards (count, dtype, shape, device): the message names
    the input and says what the model expects."""


class ModelError(RuntimeError):
    """The model refused a call for another reason than its guards (its message says why)."""


def _fail(err):
    msg = err.value.decode(errors="replace")
    return GuardError(msg) if msg.startswith("guard failed") else ModelError(msg)


class Model:
    """A model compiled by gcc-graph (gcc-graph compile model.pt2 -o model.so), opened.

    model(x) or model(x, mask) or model(input_ids=x): torch tensors in, torch tensors out (on the
    model's device, with no copy of inputs or outputs); NumPy arrays in, NumPy arrays out. One output
    comes back bare, several as a tuple. A CUDA model runs on torch's current stream."""

    def __init__(self, path, weights=None, device=None):
        """path: the .so (relative to the working directory, or absolute). weights: the .pt2 or
        .safetensors file of a model compiled with --weights external. device: a CUDA model's GPU (an
        index; default: torch's current device)."""
        p = os.fspath(path)
        if not os.path.isfile(p):
            raise FileNotFoundError(f"{p}: no such file (compile one with: gcc-graph compile MODEL.pt2 -o {p})")
        self.path = os.path.abspath(p)   # a bare name would make ctypes search the library path
        try:
            lib = ctypes.CDLL(self.path, mode=getattr(ctypes, "RTLD_LOCAL", 0))
        except OSError as e:
            raise OSError(f"{p}: cannot load it: {e}") from None
        if not hasattr(lib, "gg_abi_version"):
            raise ValueError(f"{p}: not a model compiled by gcc-graph (it has no gg_abi_version)")
        for name, (res, args) in _SIGS.items():
            if hasattr(lib, name):
                f = getattr(lib, name)
                f.restype, f.argtypes = res, args
        if lib.gg_abi_version() != ABI_VERSION:
            raise ValueError(f"{p}: compiled for the model ABI {lib.gg_abi_version()}; this package reads ABI {ABI_VERSION}")
        self._lib = lib
        self._fast = ctypes.CDLL(self.path, mode=getattr(ctypes, "RTLD_LOCAL", 0))   # the run entries, no argtypes to convert through
        self.metadata = json.loads(lib.gg_metadata().decode())
        self.input_names = [i["name"] for i in self.metadata["inputs"]]
        self.output_names = [o["name"] for o in self.metadata["outputs"]]
        self._index = {n: i for i, n in enumerate(self.input_names)}
        self._nin, self._nout = lib.gg_num_inputs(), lib.gg_num_outputs()
        self.cuda = lib.gg_device_type() == D.KDL_CUDA
        self.training = lib.gg_num_gradients() > 0
        opt = (self.metadata.get("training") or {}).get("optimizer") or {}
        self._lr = opt.get("lr")
        self._tls = threading.local()
        self._stream = -1
        self._cuda_lock = threading.Lock()
        self._state = None
        self._handle = None
        self.device_index = 0
        if self.cuda:
            import torch
            if device is not None:
                torch.cuda.set_device(device)
            self.device_index = torch.cuda.current_device()
            torch.zeros(1, device=f"cuda:{self.device_index}")   # the device's context, made current for the runtime
        h, err = _vp(), ctypes.create_string_buffer(1024)
        if lib.gg_open(ctypes.byref(h), os.fsencode(weights) if weights else None, err, len(err)):
            raise ModelError(f"{p}: {err.value.decode(errors='replace')}")
        self._handle = h

    def __repr__(self):
        return (f"gcc_graph.Model({self.path!r}: {self.metadata['device']}, inputs {self.input_names}, "
                f"outputs {self.output_names}{', training' if self.training else ''})")

    @property
    def device(self):
        """Where the model's inputs and outputs live: "cpu" or "cuda:N" (a torch.device when torch is loaded)."""
        s = f"cuda:{self.device_index}" if self.cuda else "cpu"
        t = sys.modules.get("torch")
        return t.device(s) if t else s

    # ---------------------------------------------------------------- calls

    def __call__(self, *inputs, **named):
        """Run the model: outputs for these inputs (by position, or by the export's input names)."""
        return self._call("gg_run", inputs, named)

    def forward(self, *inputs, **named):
        """A training model's forward: its outputs (the loss first), keeping what backward() needs."""
        return self._call("gg_forward", inputs, named)

    def train_step(self, *inputs, **named):
        """A training model's forward, backward and optimizer update of the weights it holds (compile
        --train --optimizer ...); returns the forward's outputs."""
        return self._call("gg_train_step", inputs, named)

    def _bind(self, inputs, named):
        n = self._nin
        if not named and len(inputs) == n:
            return inputs
        if len(inputs) > n:
            raise TypeError(f"the model takes {n} input{'s' if n != 1 else ''} ({', '.join(self.input_names)}), got {len(inputs)}")
        xs = list(inputs) + [None] * (n - len(inputs))
        for k, v in named.items():
            i = self._index.get(k)
            if i is None:
                raise TypeError(f"the model has no input named {k!r}; its inputs are {', '.join(self.input_names)}")
            if i < len(inputs):
                raise TypeError(f"input {k!r} given by position and by name")
            xs[i] = v
        missing = [self.input_names[i] for i, x in enumerate(xs) if x is None]
        if missing:
            raise TypeError(f"missing input{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        return xs

    def _invoke(self, entry, din, dout):
        """(function, arguments, error buffer) of one call of entry on these DLTensor arrays, the
        arguments made as ctypes objects once (a call converts nothing)."""
        if entry != "gg_run" and not self.training:
            raise ModelError("this model was not compiled for training (gcc-graph compile --train)")
        err = ctypes.create_string_buffer(1024)
        lead = (self._handle,) if entry == "gg_run" else (self._handle, self._train_state())
        return getattr(self._fast, entry), lead + (din, _int(self._nin), dout, _int(self._nout), err, _sz(len(err))), err

    def _call(self, entry, inputs, named):
        xs = self._bind(inputs, named)
        torch = sys.modules.get("torch")
        outs = None
        if torch is not None:
            T = torch.Tensor
            for x in xs:
                if not isinstance(x, T):
                    break
            else:
                outs = self._run_torch(entry, xs, torch)
        if outs is None:
            outs = self._run_numpy(entry, xs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _cache(self):
        try:
            return self._tls.cache
        except AttributeError:   # first call on this thread: each thread its own DLTensors
            self._tls.cache = {}
            return self._tls.cache

    def _plan(self, entry, ins, addrs, make_out):
        """What a call with a new input signature needs, made once: the inputs' and outputs'
        DLTensors (ins: their dtype names and shapes; addrs: data to ask the outputs' shapes with),
        a maker per output (make_out(shape, dtype name)), and the call with its ctypes arguments."""
        kind = D.KDL_CUDA if self.cuda else D.KDL_CPU
        din, dout, keep = (D.DLTensor * max(self._nin, 1))(), (D.DLTensor * max(self._nout, 1))(), []
        for i, ((n, shape), a) in enumerate(zip(ins, addrs)):
            din[i], sa = D.tensor(a, kind, self.device_index, n, shape)
            keep.append(sa)
        shapes = self._output_shapes(din)
        makers = [make_out(s, n) for s, n in shapes]
        for i, (s, n) in enumerate(shapes):
            dout[i], sa = D.tensor(None, kind, self.device_index, n, s)
            keep.append(sa)
        din._keep = keep   # the shape arrays live as long as the DLTensors that point at them
        return (_items(din, self._nin), _items(dout, self._nout), makers) + self._invoke(entry, din, dout)

    def _remember(self, key, plan):
        cache = self._cache()
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = plan
        return plan

    def _run_torch(self, entry, xs, torch):
        xs = [x if x.is_contiguous() else x.contiguous() for x in xs]
        key = (entry,) + tuple([(x.dtype, x.shape, x.get_device()) for x in xs])
        plan = self._cache().get(key) or self._remember(key, self._plan_torch(entry, xs, torch))
        din, dout, makers, call, argv, err = plan
        for t, x in zip(din, xs):
            t.data = x.data_ptr()
        outs = [make() for make in makers]
        for t, o in zip(dout, outs):
            t.data = o.data_ptr()
        if not self.cuda:
            rc = call(*argv)
        else:
            with self._cuda_lock:   # the stream and the run together: another thread may use another stream
                s = _current_stream(torch, self.device_index)   # 0: the legacy default stream, which the
                if s != self._stream:                           # model's own stream waits for (gg_set_stream)
                    self._lib.gg_set_stream(self._handle, s or None)
                    self._stream = s
                rc = call(*argv)
        if rc:
            raise _fail(err)
        return outs

    def _plan_torch(self, entry, xs, torch):
        names, back = D.torch_names(torch)
        want = "cuda" if self.cuda else "cpu"
        for i, x in enumerate(xs):
            label = f"input {i} ({self.input_names[i]!r})"
            if x.device.type != want or (self.cuda and x.get_device() != self.device_index):
                raise GuardError(f"{label} is on {x.device}; the model runs on {self.device} (move it with .to({str(self.device)!r}))")
            if x.dtype not in names:
                raise GuardError(f"{label} is {x.dtype}, which gcc-graph models do not take; the model takes "
                                 f"{self.metadata['inputs'][i]['dtype']}")
        dev = torch.device(self._cuda_name() if self.cuda else "cpu")
        return self._plan(entry, [(names[x.dtype], tuple(x.shape)) for x in xs], [x.data_ptr() for x in xs],
                          lambda s, n: functools.partial(torch.empty, s, dtype=back[n], device=dev))

    def _output_shapes(self, din):
        err, shape, ndim, dt = ctypes.create_string_buffer(1024), (ctypes.c_int64 * 16)(), _int(), D.DLDataType()
        out = []
        for i in range(self._nout):
            if self._lib.gg_output_shape(self._handle, din, self._nin, i, ctypes.byref(ndim), shape, ctypes.byref(dt), err, len(err)):
                raise _fail(err)
            out.append((tuple(shape[:ndim.value]), D.NAME[(dt.code, dt.bits)]))
        return out

    def _run_numpy(self, entry, xs):
        import numpy as np
        arrays = [_c_array(np, x) for x in xs]
        for i, a in enumerate(arrays):
            if D.numpy_name(a.dtype) is None:
                raise GuardError(f"input {i} ({self.input_names[i]!r}) is a NumPy {a.dtype} array, which gcc-graph models "
                                 f"do not take; the model takes {self.metadata['inputs'][i]['dtype']}")
        if self.cuda:   # through torch: copied to the GPU, and the outputs back
            import torch
            outs = self._run_torch(entry, [torch.from_numpy(a).to(self._cuda_name()) for a in arrays], torch)
            return [_to_numpy(o, self.output_names[i]) for i, o in enumerate(outs)]
        key = (entry, "numpy") + tuple([(a.dtype, a.shape) for a in arrays])
        plan = self._cache().get(key)
        if plan is None:
            def make_out(s, n):
                if n == "bfloat16":
                    raise ModelError("an output is bfloat16, which NumPy lacks: call the model with torch tensors")
                return functools.partial(np.empty, s, dtype=np.dtype(n))
            plan = self._remember(key, self._plan(entry, [(D.numpy_name(a.dtype), a.shape) for a in arrays],
                                                  [a.__array_interface__["data"][0] for a in arrays], make_out))
        din, dout, makers, call, argv, err = plan
        for t, a in zip(din, arrays):
            t.data = a.__array_interface__["data"][0]
        outs = [make() for make in makers]
        for t, o in zip(dout, outs):
            t.data = o.__array_interface__["data"][0]
        if call(*argv):
            raise _fail(err)
        return outs

    def _cuda_name(self):
        return f"cuda:{self.device_index}"

    # ---------------------------------------------------------------- training

    def _train_state(self):
        if self._state is None:
            st, err = _vp(), ctypes.create_string_buffer(1024)
            if self._lib.gg_train_state_new(self._handle, ctypes.byref(st), err, len(err)):
                raise _fail(err)
            self._state = st
        return self._state

    def backward(self, grad_loss=None):
        """The gradients of the loss (after forward()) for every parameter: {name: tensor} (torch
        tensors on the model's device when torch is loaded, else NumPy arrays), copies."""
        if not self.training:
            raise ModelError("this model was not compiled for training (gcc-graph compile --train)")
        err = ctypes.create_string_buffer(1024)
        gl, keep = None, None
        if grad_loss is not None:
            keep = _host_or_device(self, grad_loss, self.metadata["outputs"][self.metadata["training"]["loss_output"]]["dtype"])
            gl, _ = D.tensor(keep[0], D.KDL_CUDA if self.cuda else D.KDL_CPU, self.device_index, keep[1], ())
        if self._lib.gg_backward(self._handle, self._train_state(), ctypes.byref(gl) if gl is not None else None, err, len(err)):
            raise _fail(err)
        grads, name, t = {}, _cp(), D.DLTensor()
        for i in range(self._lib.gg_num_gradients()):
            self._lib.gg_gradient(self._state, i, ctypes.byref(name), ctypes.byref(t))
            shape = tuple(t.shape[d] for d in range(t.ndim))
            grads[name.value.decode()] = self._copy_out(t.data, D.NAME[(t.dtype.code, t.dtype.bits)], shape)
        return grads

    @property
    def learning_rate(self):
        """The optimizer's learning rate (compile --lr); set it for a schedule."""
        return self._lr

    @learning_rate.setter
    def learning_rate(self, lr):
        if self._lib.gg_set_learning_rate(self._handle, float(lr)):
            raise ModelError("the model has no optimizer (compile --train --optimizer ...), or the rate is negative")
        self._lr = float(lr)

    def manual_seed(self, seed):
        """Random ops (rand, randn, randperm, dropout in training) start over from seed, in this
        process (every model), like torch.manual_seed; the numbers are not PyTorch's."""
        if not hasattr(self._lib, "gg_manual_seed"):
            raise ModelError("the model was compiled by a gcc-graph without random ops")
        self._lib.gg_manual_seed(int(seed))

    def set_learning_rate(self, lr):
        self.learning_rate = lr

    def set_grad_accumulation(self, micro_batches):
        """train_step updates at every micro_batches-th call, with the mean of their gradients."""
        if self._lib.gg_set_grad_accumulation(self._handle, int(micro_batches)):
            raise ModelError("the model has no optimizer, or micro_batches < 1")

    # ---------------------------------------------------------------- weights

    def _weights(self):
        """[(index, name, address, bytes, metadata entry)] of the weights the model holds."""
        meta = {w["name"]: w for w in self.metadata.get("weights", {}).get("tensors", [])}
        out, name, data, nbytes = [], _cp(), _vp(), _sz()
        for i in range(self._lib.gg_num_weights()):
            self._lib.gg_weight(self._handle, i, ctypes.byref(name), ctypes.byref(data), ctypes.byref(nbytes))
            n = name.value.decode()
            out.append((i, n, data.value, nbytes.value, meta.get(n)))
        return out

    def state_dict(self):
        """The parameters and buffers as the model holds them now ({name: tensor}, copies on the CPU:
        torch tensors when torch is loaded, else NumPy arrays), under the PyTorch module's names, so
        that module.load_state_dict(model.state_dict()) takes a trained model's weights back. Weights
        that compilation transformed (inference models: folded or re-laid-out) are left out."""
        out = {}
        for _, n, addr, nbytes, w in self._weights():
            if not w or w.get("kind") not in ("parameter", "buffer"):
                continue
            shape = tuple(int(d) for d in w["shape"])
            if _numel(shape) * D.SIZE[w["dtype"]] != nbytes:
                continue
            out[n] = self._copy_out(addr, w["dtype"], shape, host=True)
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Write weights into a training model (torch tensors, NumPy arrays, on any device), by the
        PyTorch module's names: the parameters it trains and the buffers it updates. Other weights
        are constants of the compiled code: a value equal to the model's is accepted, a different one
        refused. strict: every trained parameter and updated buffer must be given, and no unknown name.
        The optimizer's state (momentum, Adam's moments) is kept."""
        if not self.training:
            raise ModelError("only a training model's weights can be written (compile --train); an inference model's "
                             "weights are constants of its code: compile the new weights instead")
        t = self.metadata["training"]
        writable = set(t.get("gradients", [])) | set(self.metadata.get("mutated_buffers", []))
        held = {n: (addr, nbytes, w) for _, n, addr, nbytes, w in self._weights() if w}
        unknown = [k for k in state_dict if k not in held]
        missing = [k for k in sorted(writable) if k in held and k not in state_dict]
        if strict and (unknown or missing):
            raise KeyError("load_state_dict: " + "; ".join(
                (["unexpected: " + ", ".join(unknown)] if unknown else []) + (["missing: " + ", ".join(missing)] if missing else [])))
        for k, v in state_dict.items():
            if k not in held:
                continue
            addr, nbytes, w = held[k]
            data, name = _host_bytes(v)
            shape = tuple(int(d) for d in w["shape"])
            if name != w["dtype"] or tuple(v.shape) != shape:
                raise ValueError(f"load_state_dict: {k!r} is {name} {tuple(v.shape)}; the model holds {w['dtype']} {shape}")
            if len(data) != nbytes:
                raise ValueError(f"load_state_dict: {k!r} is held transformed ({nbytes} bytes): it cannot be written")
            if w.get("tied") in writable and w["tied"] in state_dict:
                continue   # one storage with the parameter it is tied to, which state_dict also gives
            if k in writable:
                if not nbytes:
                    continue
                buf = ctypes.create_string_buffer(bytes(data), nbytes)
                if self.cuda:
                    self._lib.gg_device_copy(addr, buf, len(data), 1)
                else:
                    ctypes.memmove(addr, buf, len(data))
            elif bytes(data) != self._raw(addr, nbytes):
                raise ValueError(f"load_state_dict: {k!r} is a constant of the compiled model (neither trained nor "
                                 f"updated) and the value given differs from it: compile the model with it instead")

    def _raw(self, addr, nbytes):
        if not nbytes:
            return b""
        if self.cuda:
            buf = ctypes.create_string_buffer(nbytes)
            self._lib.gg_device_copy(buf, addr, nbytes, 0)
            return buf.raw
        return ctypes.string_at(addr, nbytes)

    def _copy_out(self, addr, name, shape, host=False):
        """A copy of a tensor the model holds: torch (on the model's device unless host) when torch is
        loaded, else NumPy."""
        raw = self._raw(addr, _numel(shape) * D.SIZE[name])
        torch = sys.modules.get("torch")
        if torch is not None:
            names, back = D.torch_names(torch)
            t = torch.frombuffer(bytearray(raw), dtype=back[name]).reshape(shape) if raw else torch.empty(shape, dtype=back[name])
            return t.to(self._cuda_name()) if self.cuda and not host else t
        import numpy as np
        if name == "bfloat16":
            return np.frombuffer(raw, dtype=np.uint16).reshape(shape).copy()   # the raw bits: NumPy has no bfloat16
        return np.frombuffer(raw, dtype=np.dtype(name)).reshape(shape).copy()

    # ---------------------------------------------------------------- data-parallel training

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
        src = dist.get_global_rank(group, 0) if group else 0
        if self.cuda:
            uid = ctypes.create_string_buffer(128)
            if rank == 0 and self._lib.gg_nccl_unique_id(uid, err, len(err)):
                raise _fail(err)
            box = [uid.raw]
            dist.broadcast_object_list(box, src=src, group=group,
                                       device=torch.device(self._cuda_name()) if dist.get_backend(group) == "nccl" else None)
            if self._lib.gg_set_data_parallel_nccl(self._handle, world, rank, box[0], err, len(err)):
                raise _fail(err)
            return self
        names, back = D.torch_names(torch)

        def allreduce(ctx, bucket, tp):
            try:
                t = tp.contents
                n, dt = t.shape[0], back[D.NAME[(t.dtype.code, t.dtype.bits)]]
                buf = (ctypes.c_uint8 * (n * D.SIZE[D.NAME[(t.dtype.code, t.dtype.bits)]])).from_address(t.data)
                ten = torch.frombuffer(buf, dtype=dt)
                if bucket < 0:   # the first call: rank 0's weights
                    dist.broadcast(ten, src=src, group=group)
                else:
                    dist.all_reduce(ten, group=group)
                return 0
            except Exception:   # an exception cannot cross the C frames: print it, and fail the step
                import traceback
                traceback.print_exc()
                return 1
        self._allreduce = _ALLREDUCE(allreduce)   # kept alive as long as the model
        f = self._lib.gg_set_data_parallel
        f.restype, f.argtypes = _int, [_vp, _int, _int, _ALLREDUCE, _vp, _cp, _sz]
        if f(self._handle, world, rank, self._allreduce, None, err, len(err)):
            raise _fail(err)
        return self

    def close(self):
        """Free the model (also done when it is garbage-collected)."""
        if self._state is not None:
            self._lib.gg_train_state_free(self._state)
            self._state = None
        if self._handle is not None:
            self._lib.gg_close(self._handle)
            self._handle = None

    def __del__(self):
        if getattr(self, "_lib", None) is not None:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load(path, weights=None, device=None):
    """Open a compiled model: gcc_graph.load("model.so")."""
    return Model(path, weights=weights, device=device)


def _c_array(np, x):
    """x as a row-major NumPy array, copied only when it is not one (0-d arrays stay 0-d)."""
    a = np.asarray(x)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _items(arr, n):
    """The DLTensors of a ctypes array as objects made once (they share the array's memory)."""
    return [arr[i] for i in range(n)]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _current_stream(torch, index):
    """torch's current CUDA stream on the device, as an integer (0: the legacy default stream)."""
    f = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return f(index) if f else torch.cuda.current_stream(index).cuda_stream


def _host_bytes(v):
    """(bytes-like, metadata dtype name) of a torch tensor or NumPy array, on the host."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        names, _ = D.torch_names(torch)
        if v.dtype not in names:
            raise ValueError(f"{v.dtype} is not a dtype gcc-graph models hold")
        t = v.detach().contiguous().cpu()
        return (t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""), names[v.dtype]
    import numpy as np
    a = np.ascontiguousarray(v)
    return a.tobytes(), D.numpy_name(a.dtype)


def _host_or_device(model, v, want):
    """(address, name) of a one-element value for grad_loss, kept alive on the model."""
    torch = sys.modules.get("torch")
    if model.cuda:
        t = torch.as_tensor(v).to(model._cuda_name(), dtype=D.torch_names(torch)[1][want]).reshape(())
        model._grad_loss = t
        return t.data_ptr(), want
    import numpy as np
    a = np.asarray(v.detach().cpu().numpy() if torch is not None and isinstance(v, torch.Tensor) else v, dtype=np.dtype(want)).reshape(())
    model._grad_loss = a
    return a.__array_interface__["data"][0], want


def _to_numpy(t, name):
    import torch
    if t.dtype == torch.bfloat16:
        raise ModelError(f"output {name!r} is bfloat16, which NumPy lacks: call the model with torch tensors")
    return t.cpu().numpy()
