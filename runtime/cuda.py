"""Launching on a GPU through CuPy: the only module that touches the CUDA driver.

CuPy is imported when a launcher is made, never by `import napkin`. Modules
are loaded from cubins (compiled by NVRTC for the device's exact arch; a
cubin from a newer NVRTC runs on an older driver, PTX may not). Pointers and
sizes are passed as explicit 64-bit NumPy scalars (CuPy checks no argument).
Kernels that need more than 48 KiB of dynamic shared memory get their limit
raised before the launch.
"""

from __future__ import annotations

import numpy as np

from ..diagrams.diagnostics import BackendUnavailable, Diagnostic
from . import dtypes

DEFAULT_SMEM = 48 * 1024
_TARGETS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"))


def unavailable(why: str) -> BackendUnavailable:
    return BackendUnavailable(Diagnostic("N0901", f"the cuda backend is unavailable: {why}",
                                         help="install napkin[cuda] on a machine with an NVIDIA GPU, "
                                              "or use backend='reference', 'interpret' or 'emulate'"))


def gpu_present() -> bool:
    """Whether CuPy imports and sees a GPU (never raises)."""
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


class CupyLauncher:
    def __init__(self):
        try:
            import cupy
        except ImportError as exc:
            raise unavailable(f"CuPy is not installed ({exc})") from None
        if not cupy.cuda.is_available():
            raise unavailable("CuPy sees no GPU")
        self.cupy = cupy
        self._modules: dict[bytes, object] = {}

    # -- the device -----------------------------------------------------------------
    def device(self) -> tuple[str, str, str]:
        """(device name, arch like sm_90, napkin target name)."""
        cupy = self.cupy
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        major, minor = dev.compute_capability[0], dev.compute_capability[1:]
        # (a compute capability 9.0 GPU runs sm_90a code: wgmma, compiler/wgmma.py)
        arch = f"sm_{major}{minor}" + ("a" if f"{major}{minor}" == "90" else "")
        target = next((t for key, t in _TARGETS if key in name), "h100" if major >= 9 else "a100")
        return name, arch, target

    def smem_limit(self) -> int:
        cupy = self.cupy
        attr = cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin
        return int(cupy.cuda.runtime.deviceGetAttribute(attr, cupy.cuda.Device().id))

    # -- memory ---------------------------------------------------------------------
    def empty(self, shape, dtype: str, template):
        """An uninitialised device array of the caller's kind (torch stays torch)."""
        from .arrays import is_torch
        if template is not None and is_torch(template):
            import torch
            tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                      "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}[dtype]
            return torch.empty(tuple(shape), dtype=tdtype, device=template.device)
        if dtype == "bf16":   # CuPy has no bfloat16: raw 16-bit storage
            return self.cupy.empty(tuple(shape), dtype=np.uint16)
        return self.cupy.empty(tuple(shape), dtype=dtypes.numpy_dtype(dtype))

    def copy(self, dst, src) -> None:
        """dst[...] = src on the device (the same shape and dtype; CuPy or torch)."""
        from .arrays import is_torch
        if is_torch(dst):
            dst.copy_(src)
        else:
            dst[...] = src

    def to_device(self, host: np.ndarray):
        if host.dtype == dtypes.numpy_dtype("bf16"):
            return self.cupy.asarray(host.view(np.uint16))
        return self.cupy.asarray(host)

    def to_host(self, arr, dtype: str) -> np.ndarray:
        from .arrays import host_copy
        data = host_copy(arr)
        if dtype == "bf16" and data.dtype == np.uint16:
            return data.view(dtypes.numpy_dtype("bf16"))
        return data

    # -- launching ------------------------------------------------------------------
    def module(self, cubin: bytes):
        if cubin not in self._modules:
            import tempfile
            import os
            fd, path = tempfile.mkstemp(suffix=".cubin")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(cubin)
                self._modules[cubin] = self.cupy.RawModule(path=path)
            finally:
                os.unlink(path)
        return self._modules[cubin]

    def module_from_source(self, source: str, arch: str):
        """Compile with CuPy's own NVRTC (on a machine without napkin's NVRTC wheels)."""
        key = (source, arch)
        if key not in self._modules:
            self._modules[key] = self.cupy.RawModule(
                code=source, options=("--std=c++17", f"-arch={arch}"), backend="nvrtc")
        return self._modules[key]

    def stream_for(self, template, stream):
        from .arrays import is_torch
        if stream is not None:
            return stream
        if template is not None and is_torch(template):
            import torch
            return self.cupy.cuda.ExternalStream(torch.cuda.current_stream(template.device).cuda_stream)
        return self.cupy.cuda.get_current_stream()

    def launch(self, binary, name: str, grid: int, block: int, smem: int, args, stream) -> None:
        """Launch `name` from a cubin (bytes) or a module compiled from source."""
        module = self.module(binary) if isinstance(binary, bytes) else binary
        fn = module.get_function(name)
        if smem > DEFAULT_SMEM:
            fn.max_dynamic_shared_size_bytes = smem
        fn((grid,), (block,), tuple(args), shared_mem=smem, stream=stream)
