"""A stand-in GPU for launch tests: device arrays with __cuda_array_interface__ and a
launcher that records launches instead of making them."""

from __future__ import annotations

import itertools

import numpy as np

_TYPESTR = {"f32": "<f4", "f16": "<f2", "bf16": "<V2"}
_ADDRESS = itertools.count(1 << 20, 1 << 20)


class DeviceArray:
    def __init__(self, shape, typestr, ptr=None, strides=None, device=0):
        self.shape = tuple(shape)
        self.typestr = typestr
        self.ptr = next(_ADDRESS) if ptr is None else ptr
        self.strides = strides
        self.device = type("Dev", (), {"id": device})()

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "strides": self.strides, "version": 3}

    @property
    def nbytes(self):
        return int(np.prod(self.shape)) * int(self.typestr[2:])


class FakeLauncher:
    def __init__(self, smem_limit=232448, arch="sm_90", device_name="NVIDIA H100 80GB HBM3"):
        from napkin.runtime.cuda import _TARGETS
        self.launches = []
        self.copies = []
        self._smem = smem_limit
        target = next((t for key, t in _TARGETS if key in device_name), "h100")
        self._device = (device_name, arch, target)

    def device(self):
        return self._device

    def smem_limit(self):
        return self._smem

    def empty(self, shape, dtype, template):
        return DeviceArray(shape, _TYPESTR[dtype])

    def copy(self, dst, src):
        self.copies.append((dst.ptr, src.ptr))

    def to_device(self, host):
        return DeviceArray(host.shape, {np.dtype(np.float32): "<f4", np.dtype(np.float16): "<f2"}
                           .get(host.dtype, "<V2"))

    def to_host(self, arr, dtype):
        return np.zeros(arr.shape, dtype={"f32": np.float32, "f16": np.float16}.get(dtype, np.float32))

    def stream_for(self, template, stream):
        return stream

    def launch(self, binary, name, grid, block, smem, args, stream):
        self.launches.append({"name": name, "grid": grid, "block": block, "smem": smem,
                              "args": tuple(args), "binary": binary})
