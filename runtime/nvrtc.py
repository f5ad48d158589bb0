"""Compiling CUDA C with NVRTC, without a GPU or a driver.

NVRTC, its Python binding and the CUDA headers come from PyPI
(`pip install 'napkin[nvrtc]'`: nvidia-cuda-nvrtc, nvidia-cuda-runtime,
nvidia-cuda-crt, cuda-bindings). Only `cuda.bindings.nvrtc` is used: no driver
API is ever called here (a failed driver call has deadlocked later ones in the
same process), and CuPy is never imported.

Importing this module is cheap and loads nothing; NVRTC is located and loaded
on the first `available()`, `version()` or `compile()` call, once per process
(thread-safe). Separate `compile()` calls may run concurrently: each uses its
own NVRTC program, which NVRTC supports, and the binding releases the GIL.

`compile()` validates the architecture and the options against fixed
allowlists before NVRTC is touched (NapkinError N0802 / N0803: a user may pick
them). A compile failure of the source is napkin's own bug (napkin generated
that source), so it raises `CudaCompileError`, a RuntimeError carrying the
whole NVRTC log.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from dataclasses import dataclass, field

from napkin.diagrams.diagnostics import BackendUnavailable, Diagnostic, NapkinError

from .ptxas import Resources, parse_ptxas_report

__all__ = [
    "ALLOWED_ARCHS",
    "ALLOWED_OPTIONS",
    "Compiled",
    "CudaCompileError",
    "Resources",
    "available",
    "compile",
    "parse_ptxas_report",
    "validate_arch",
    "validate_options",
    "version",
]

#: Targets napkin compiles for. `a` targets (sm_90a, sm_100a) enable
#: architecture-specific instructions (wgmma, tcgen05) that run only there.
ALLOWED_ARCHS: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120")

#: The options a caller may add; napkin's own flags are fixed (see `compile`).
ALLOWED_OPTIONS: tuple[str, ...] = (
    "--use_fast_math",
    "-lineinfo",
    "--fmad=true",
    "--fmad=false",
    "--maxrregcount=N (16 <= N <= 255)",
)

_MAXRREG_MIN, _MAXRREG_MAX = 16, 255
_INSTALL_HELP = "pip install 'napkin[nvrtc]'"


# ------------------------------------------------------------------ results


_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$][\w$]*)", re.MULTILINE)


@dataclass(frozen=True)
class Compiled:
    """NVRTC's output for one source.

    `cubin` is None when it was not asked for; `resources` is then empty too
    (ptxas did not run). `options` are the caller's validated options (deduplicated,
    in order), not napkin's fixed flags; `log` is NVRTC's full log, ptxas report
    and warnings included.
    """

    ptx: str
    cubin: bytes | None
    log: str
    arch: str
    options: tuple[str, ...]
    resources: dict[str, Resources] = field(default_factory=dict, hash=False)

    @property
    def kernels(self) -> tuple[str, ...]:
        """Names of the `.entry` functions in the PTX, in order."""
        return tuple(_ENTRY.findall(self.ptx))


class CudaCompileError(RuntimeError):
    """NVRTC rejected source that napkin generated: a bug in napkin, not in the diagram.

    `log` is NVRTC's whole log (front-end errors and ptxas's report).
    """

    def __init__(self, message: str, *, log: str = "", arch: str | None = None,
                 options: tuple[str, ...] = (), name: str | None = None,
                 source: str | None = None):
        self.log = log
        self.arch = arch
        self.options = tuple(options)
        self.name = name
        self.source = source
        text = message if not log else f"{message}\n{log}"
        super().__init__(text)


# --------------------------------------------------------------- validation


def validate_arch(arch: object) -> str:
    """Return `arch` if it is in ALLOWED_ARCHS, else raise NapkinError N0802."""
    if isinstance(arch, str) and arch in ALLOWED_ARCHS:
        return arch
    raise NapkinError(Diagnostic(
        "N0802",
        f"unsupported CUDA architecture {arch!r}",
        help=f"use one of: {', '.join(ALLOWED_ARCHS)}",
    ))


def validate_options(options) -> tuple[str, ...]:
    """Check caller options against ALLOWED_OPTIONS; return them deduplicated.

    Every rejected option becomes one N0803 diagnostic of a single NapkinError.
    """
    if isinstance(options, (str, bytes)) or not hasattr(options, "__iter__"):
        raise NapkinError(Diagnostic(
            "N0803", f"options must be a sequence of strings, got {type(options).__name__}",
            help=f"allowed options: {', '.join(ALLOWED_OPTIONS)}"))
    allowed = f"allowed options: {', '.join(ALLOWED_OPTIONS)}"
    problems: list[Diagnostic] = []
    kept: list[str] = []
    by_key: dict[str, str] = {}
    for opt in options:
        if not isinstance(opt, str):
            problems.append(Diagnostic("N0803", f"option {opt!r} is not a string", help=allowed))
            continue
        key = _option_key(opt)
        if key is None:
            problems.append(Diagnostic("N0803", f"option {opt!r} is not allowed", help=allowed))
            continue
        if key.startswith("!"):
            problems.append(Diagnostic("N0803", key[1:], help=allowed))
            continue
        if key in by_key:
            if by_key[key] != opt:
                problems.append(Diagnostic(
                    "N0803", f"conflicting options {by_key[key]!r} and {opt!r}", help="give only one"))
            continue
        by_key[key] = opt
        kept.append(opt)
    if problems:
        raise NapkinError(problems)
    return tuple(kept)


def _option_key(opt: str) -> str | None:
    """The setting an allowed option controls; "!message" if malformed; None if unknown."""
    if opt in ("--use_fast_math", "-lineinfo"):
        return opt
    if re.fullmatch(r"--fmad=(true|false)", opt):
        return "--fmad"
    m = re.fullmatch(r"--maxrregcount=(\d+)", opt)
    if m:
        n = int(m.group(1))
        if _MAXRREG_MIN <= n <= _MAXRREG_MAX and m.group(1) == str(n):
            return "--maxrregcount"
        return f"!option {opt!r}: the register limit must be an integer from {_MAXRREG_MIN} to {_MAXRREG_MAX}"
    return None


# -------------------------------------------------------------- the backend


@dataclass(frozen=True)
class _Backend:
    nvrtc: object  # the cuda.bindings.nvrtc module
    version: tuple[int, int]
    include_dirs: tuple[str, ...]


_lock = threading.Lock()
_backend: _Backend | None = None  # failures are not cached: a later call retries


def _unavailable(message: str) -> BackendUnavailable:
    return BackendUnavailable(Diagnostic("N0901", message, help=_INSTALL_HELP))


def _load() -> _Backend:
    global _backend
    backend = _backend
    if backend is not None:
        return backend
    with _lock:
        if _backend is None:
            _backend = _load_locked()
        return _backend


def _load_locked() -> _Backend:
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as exc:
        raise _unavailable(f"NVRTC is not available: the cuda-bindings package is missing ({exc})") from exc
    try:
        err, major, minor = nvrtc.nvrtcVersion()  # loads libnvrtc
    except Exception as exc:  # the binding raises RuntimeError when the library is absent
        raise _unavailable(f"NVRTC is not available: libnvrtc could not be loaded ({exc})") from exc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise _unavailable(f"NVRTC is not available: nvrtcVersion failed ({err!r})")
    return _Backend(nvrtc, (int(major), int(minor)), _include_dirs())


def _nvidia_roots() -> list[str]:
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError:
        return []
    return list(getattr(nvidia, "__path__", []))


def _include_dirs() -> tuple[str, ...]:
    """Directories holding cuda_fp16.h, cuda_bf16.h, mma.h and the crt/ headers they include."""
    found: str | None = None
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        pass
    else:
        try:
            found = find_nvidia_header_directory("cudart")
        except Exception:
            found = None
    if not found:
        for root in _nvidia_roots():
            for sub in sorted(os.listdir(root)) if os.path.isdir(root) else ():
                cand = os.path.join(root, sub, "include")
                if os.path.isfile(os.path.join(cand, "cuda_runtime.h")):
                    found = cand
                    break
            if found:
                break
    if not found:
        raise _unavailable("the CUDA runtime headers (cuda_fp16.h, cuda_bf16.h, mma.h) were not found; "
                           "nvidia-cuda-runtime is missing")
    dirs = [str(found)]
    # mma.h includes crt/mma.h (wheel nvidia-cuda-crt). In the 13.x wheels both
    # land in nvidia/cu13/include; look elsewhere only if they did not.
    if not os.path.isfile(os.path.join(found, "crt", "host_defines.h")):
        for root in _nvidia_roots():
            for sub in sorted(os.listdir(root)) if os.path.isdir(root) else ():
                cand = os.path.join(root, sub, "include")
                if os.path.isfile(os.path.join(cand, "crt", "host_defines.h")) and cand not in dirs:
                    dirs.append(cand)
    return tuple(dirs)


def available() -> bool:
    """Whether NVRTC and the CUDA headers are installed and load. Never raises."""
    try:
        _load()
    except BackendUnavailable:
        return False
    return True


def version() -> tuple[int, int]:
    """NVRTC's own (major, minor) version, e.g. (13, 5). BackendUnavailable if missing."""
    return _load().version


# --------------------------------------------------------------- compiling


def compile(source: str, *, arch: str = "sm_90", options: tuple[str, ...] = (),
            name: str = "napkin.cu", want_cubin: bool = True) -> Compiled:
    """Compile CUDA C++ `source` with NVRTC for `arch`.

    Always produces PTX. With `want_cubin` (the default) NVRTC targets the real
    architecture (`-arch=sm_XX`), so ptxas runs: `cubin` holds the SASS image and
    `resources` the per-kernel report (keyed by the names ptxas prints, i.e. the
    extern "C" names, or mangled names for C++ kernels). Without it NVRTC stops
    at PTX (`-arch=compute_XX`): no cubin, no resources, and errors only ptxas
    detects (too much static shared memory, wgmma outside sm_90a) go unnoticed.

    NVRTC flags always passed: `--std=c++17 -arch=<target> -Xptxas=-v
    -I<cuda headers>`, then the caller's `options`.

    Raises NapkinError N0802 (arch) / N0803 (option) before NVRTC is loaded,
    BackendUnavailable N0901 when NVRTC or the headers are missing, and
    CudaCompileError when NVRTC or ptxas rejects the source.
    """
    arch = validate_arch(arch)
    opts = validate_options(options)
    return _compile_unchecked(source, arch=arch, options=opts, name=name, want_cubin=want_cubin)


def _compile_unchecked(source: str, *, arch: str, options: tuple[str, ...] = (),
                       name: str = "napkin.cu", want_cubin: bool = True) -> Compiled:
    """`compile` without the arch/option allowlists (tests use it for sm_75 guards)."""
    if not isinstance(source, str) or "\0" in source:
        raise ValueError("CUDA source must be a str without NUL characters")
    if not name or any(c in name for c in "\0\n\r"):
        raise ValueError(f"invalid program name {name!r}")
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"malformed architecture {arch!r}")
    backend = _load()
    nv = backend.nvrtc
    ok = nv.nvrtcResult.NVRTC_SUCCESS
    target = arch if want_cubin else "compute_" + arch[3:]
    flags = ["--std=c++17", f"-arch={target}", "-Xptxas=-v",
             *(f"-I{d}" for d in backend.include_dirs), *options]

    def fail(message: str, log: str = "") -> CudaCompileError:
        return CudaCompileError(message, log=log, arch=arch, options=options, name=name, source=source)

    err, prog = nv.nvrtcCreateProgram(source.encode("utf-8"), name.encode("utf-8"), 0, [], [])
    if err != ok:
        raise fail(f"nvrtcCreateProgram failed for {name}: {err!r}")
    try:
        (res,) = nv.nvrtcCompileProgram(prog, len(flags), [f.encode("utf-8") for f in flags])
        log = _text(nv, prog, nv.nvrtcGetProgramLogSize, nv.nvrtcGetProgramLog)
        if res != ok:
            raise fail(f"NVRTC {backend.version[0]}.{backend.version[1]} could not compile {name} "
                       f"for {target} ({res.name}); napkin generated this source, so this is a "
                       f"napkin bug. NVRTC log:", log)
        ptx = _text(nv, prog, nv.nvrtcGetPTXSize, nv.nvrtcGetPTX)
        cubin = _cubin(nv, prog, fail) if want_cubin else None
    finally:
        nv.nvrtcDestroyProgram(prog)

    resources: dict[str, Resources] = {}
    if want_cubin:
        resources = parse_ptxas_report(log)
        missing = [k for k in _ENTRY.findall(ptx) if k not in resources]
        if missing:
            raise fail(f"no ptxas resource report for kernel(s) {', '.join(missing)}; "
                       f"the report format may have changed. NVRTC log:", log)
    return Compiled(ptx=ptx, cubin=cubin, log=log, arch=arch, options=tuple(options),
                    resources=resources)


def _text(nv, prog, size_fn, get_fn) -> str:
    err, size = size_fn(prog)
    if err != nv.nvrtcResult.NVRTC_SUCCESS or size <= 0:
        return ""
    buf = bytearray(size)
    (err,) = get_fn(prog, buf)
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        return ""
    return bytes(buf).rstrip(b"\0").decode("utf-8", errors="replace").rstrip()


def _cubin(nv, prog, fail) -> bytes:
    from napkin.runtime.sass import cubin_extent

    err, size = nv.nvrtcGetCUBINSize(prog)
    if err != nv.nvrtcResult.NVRTC_SUCCESS or size <= 0:
        raise fail(f"nvrtcGetCUBINSize failed ({err!r}, size {size})")
    buf = bytearray(size)
    (err,) = nv.nvrtcGetCUBIN(prog, buf)
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        raise fail(f"nvrtcGetCUBIN failed ({err!r})")
    cubin = bytes(buf)
    # NVRTC returns exactly the ELF image (checked: its size equals the ELF
    # extent); CuPy's wrapper once lost a byte, so verify rather than assume.
    try:
        need = cubin_extent(cubin)
    except ValueError as exc:
        raise fail(f"NVRTC returned a malformed cubin: {exc}") from exc
    if need > len(cubin):
        raise fail(f"NVRTC returned a truncated cubin ({len(cubin)} bytes, ELF headers need {need})")
    return cubin


# ------------------------------------------------------------ ptxas report
