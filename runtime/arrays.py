"""What a caller's array is: NumPy, CuPy (or any `__cuda_array_interface__`), or a PyTorch tensor.

`describe` reads shape, dtype, element strides, data pointer and device
without importing CuPy or PyTorch (it looks at the object), so launch checks
run on any machine; outputs are made in the caller's own array type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes

_TYPESTR = {"<f4": "f32", "<f2": "f16", "|V2": None, "<i4": "i32", "<i8": "i64", "|b1": "bool"}
_TORCH = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16",
          "torch.int32": "i32", "torch.int64": "i64", "torch.bool": "bool"}
_NUMPY_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "bool": 1}


@dataclass(frozen=True)
class ArrayInfo:
    kind: str                       # numpy | cuda (an __cuda_array_interface__ object) | torch
    shape: tuple[int, ...]
    dtype: str | None               # f32 f16 bf16 i32 i64 bool, or None (something else)
    dtype_text: str                 # what the caller's dtype is called, for messages
    strides: tuple[int, ...] | None  # in elements; None when C-contiguous
    ptr: int
    device: int | None              # None: host memory
    itemsize: int

    @property
    def contiguous(self) -> bool:
        if self.strides is None or 0 in self.shape:    # an empty array has no layout to break
            return True
        expected, step = [], 1
        for n in reversed(self.shape):
            expected.append(step)
            step *= max(n, 1)
        return all(s == e or n <= 1 for s, e, n in zip(self.strides, reversed(expected), self.shape))

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.itemsize


def is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def is_device(x) -> bool:
    if is_torch(x):
        return bool(getattr(x, "is_cuda", False))
    return hasattr(x, "__cuda_array_interface__")


def describe(x) -> ArrayInfo | None:
    """The facts of an array-like, or None if it is not one napkin can pass to a kernel."""
    if is_torch(x):
        dtype = _TORCH.get(str(x.dtype))
        itemsize = x.element_size()
        strides = tuple(int(s) for s in x.stride())
        device = x.device.index if x.is_cuda else None
        return ArrayInfo("torch", tuple(int(s) for s in x.shape), dtype, str(x.dtype),
                         strides, int(x.data_ptr()), device, itemsize)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        typestr = cai.get("typestr", "")
        dtype = _TYPESTR.get(typestr)
        itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
        shape = tuple(int(s) for s in cai.get("shape", ()))
        raw = cai.get("strides")
        strides = tuple(int(s) // itemsize for s in raw) if raw is not None and itemsize else None
        device = getattr(getattr(x, "device", None), "id", 0)
        return ArrayInfo("cuda", shape, dtype, typestr, strides, int(cai["data"][0]), device, itemsize)
    if isinstance(x, np.ndarray):
        name = dtypes.name_of(x.dtype)
        strides = tuple(s // x.itemsize for s in x.strides) if x.itemsize else None
        return ArrayInfo("numpy", x.shape, name, str(x.dtype), strides, x.ctypes.data, None,
                         x.itemsize)
    return None


def host_copy(x) -> np.ndarray:
    """A NumPy copy of any supported array (what the CPU backends compute on)."""
    if is_torch(x):
        if str(x.dtype) == "torch.bfloat16":
            import ml_dtypes
            return x.detach().float().cpu().numpy().astype(ml_dtypes.bfloat16)
        return x.detach().cpu().numpy()
    if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):
        return x.get()
    return np.asarray(x)


def like(template, data: np.ndarray):
    """`data` (NumPy) as the caller's array type: a torch tensor stays torch, CuPy stays CuPy."""
    if is_torch(template):
        import torch
        if data.dtype == dtypes.numpy_dtype("bf16"):
            t = torch.from_numpy(data.astype(np.float32)).to(torch.bfloat16)
        else:
            t = torch.from_numpy(np.asarray(data, order="C"))
        return t.to(template.device)
    if hasattr(template, "__cuda_array_interface__") and type(template).__module__.startswith("cupy"):
        import cupy
        return cupy.asarray(data)
    return data
