"""DLPack's C structures (dlpack.h, v0.8 layout) and the dtype tables between the model's metadata,
DLPack, torch and NumPy."""
import ctypes

KDL_CPU, KDL_CUDA = 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# the metadata's dtype names (schemas/metadata.schema.json) as DLPack (code, bits)
DL = {"float32": (2, 32), "float64": (2, 64), "float16": (2, 16), "bfloat16": (4, 16), "int64": (0, 64),
      "int32": (0, 32), "int16": (0, 16), "int8": (0, 8), "uint8": (1, 8), "bool": (6, 8)}
NAME = {v: k for k, v in DL.items()}
SIZE = {k: v[1] // 8 for k, v in DL.items()}

_torch_names = None


def torch_names(torch):
    """{torch dtype: metadata name} and back."""
    global _torch_names
    if _torch_names is None:
        fwd = {getattr(torch, n): n for n in DL}
        _torch_names = (fwd, {n: t for t, n in fwd.items()})
    return _torch_names


def numpy_name(dtype):
    """The metadata name of a NumPy dtype, or None."""
    n = dtype.name
    return n if n in DL and n != "bfloat16" else None


def tensor(data, device_type, device_id, name, shape):
    """A DLTensor of a compact row-major tensor, and the shape array it points to (keep it alive)."""
    s = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = DL[name]
    return DLTensor(data, DLDevice(device_type, device_id), len(shape), DLDataType(code, bits, 1), s, None, 0), s
