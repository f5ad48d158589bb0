"""Reading cubins: SASS disassembly and opcode counts.

Tests use this to check that the instructions a plan relies on (HMMA/HGMMA,
LDGSTS, SHFL, ...) really appear in the machine code NVRTC produced. The
disassemblers come from the PyPI wheels `nvidia-cuda-cuobjdump` and
`nvidia-cuda-nvdisasm` (`pip install 'napkin[test]'`); no GPU or driver is
touched.

Importing this module is cheap: standard library only, and nothing is located
until a function is called.
"""

from __future__ import annotations

import collections
import functools
import glob
import os
import re
import shutil
import struct
import subprocess
import tempfile

from napkin.diagrams.diagnostics import BackendUnavailable, Diagnostic

__all__ = ["disassemble", "opcodes", "count_opcodes", "find_tool", "repair_cubin", "cubin_extent"]

_TOOLS = ("cuobjdump", "nvdisasm")
_TIMEOUT_S = 120

# `/*0080*/   @!P0 LDGSTS.E.BYPASS.128 [R7], [R2.64] ;` -> "LDGSTS.E.BYPASS.128"
# cuobjdump's second line per instruction (`/* 0x000fe4... */`) does not match.
_INSN = re.compile(
    r"^\s*/\*[0-9a-fA-F]{4,}\*/\s+(?:\{\s*)?(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
)


# --------------------------------------------------------------------------- ELF


def cubin_extent(cubin: bytes) -> int:
    """Bytes an ELF64 cubin must have: the end of its furthest table or section.

    Raises ValueError when `cubin` is not a little-endian ELF64 image.
    """
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        raise ValueError("not a cubin: missing ELF header")
    if cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a cubin: expected a little-endian ELF64 image")
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(64, phoff + phentsize * phnum, shoff + shentsize * shnum)
    # Section contents (SHT_NOBITS, type 8, occupies no file space).
    if shoff and shentsize >= 64 and shoff + shentsize * shnum <= len(cubin):
        for i in range(shnum):
            base = shoff + i * shentsize
            sh_type = struct.unpack_from("<I", cubin, base + 4)[0]
            offset, size = struct.unpack_from("<QQ", cubin, base + 0x18)
            if sh_type != 8:
                end = max(end, offset + size)
    return end


def repair_cubin(cubin: bytes, *, max_missing: int = 16) -> bytes:
    """Return `cubin`, zero-padded if it is a few bytes short of its ELF extent.

    CuPy's `getCUBIN` has returned images one byte short (the last byte of the
    trailing table is zero, so padding restores it exactly); disassemblers
    reject those. NVRTC's own `nvrtcGetCUBIN` has not been seen to do this.
    An image more than `max_missing` bytes short is a ValueError.
    """
    cubin = bytes(cubin)
    need = cubin_extent(cubin)
    missing = need - len(cubin)
    if missing <= 0:
        return cubin
    if missing > max_missing:
        raise ValueError(f"cubin truncated: {len(cubin)} bytes, ELF headers need {need}")
    return cubin + b"\0" * missing


# ------------------------------------------------------------------------- tools


def _wheel_dirs() -> list[str]:
    try:
        import nvidia  # namespace package shared by the NVIDIA wheels
    except ImportError:
        return []
    return list(getattr(nvidia, "__path__", []))


@functools.cache
def _locate(tool: str) -> str | None:
    # 1. Inside the installed `nvidia` wheels (nvidia/cu13/bin/<tool>, or an
    #    older per-component layout nvidia/cuda_cuobjdump/bin/<tool>).
    for root in _wheel_dirs():
        for path in sorted(glob.glob(os.path.join(root, "*", "bin", tool))):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    # 2. cuda.pathfinder (wheels first, then conda, CUDA_PATH/CUDA_HOME).
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:
        pass
    else:
        try:
            found = find_nvidia_binary_utility(tool)
        except Exception:  # pathfinder raises on unsupported layouts
            found = None
        if found:
            return found
    # 3. PATH.
    return shutil.which(tool)


def find_tool(tool: str | None = None) -> tuple[str, str]:
    """(name, path) of a disassembler: `tool` if given, else cuobjdump, else nvdisasm.

    Raises BackendUnavailable (N0901) when none is installed.
    """
    names = _TOOLS if tool is None else (tool,)
    if tool is not None and tool not in _TOOLS:
        raise ValueError(f"unknown disassembler {tool!r}; expected one of {', '.join(_TOOLS)}")
    for name in names:
        path = _locate(name)
        if path:
            return name, path
    raise BackendUnavailable(Diagnostic(
        "N0901",
        f"no SASS disassembler found ({' or '.join(names)})",
        help="pip install 'napkin[test]' (brings nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm)",
    ))


# ------------------------------------------------------------------------ public


def disassemble(cubin: bytes, *, tool: str | None = None) -> str:
    """SASS text of a cubin, from `cuobjdump -sass` (or `nvdisasm` when asked or
    when cuobjdump is missing). A cubin a few bytes short is zero-padded first
    (see `repair_cubin`). Raises BackendUnavailable if no disassembler is
    installed, ValueError if the input is not a cubin, RuntimeError if the
    disassembler fails.
    """
    image = repair_cubin(cubin)
    name, path = find_tool(tool)
    return _disassembled(image, name, path)


@functools.lru_cache(maxsize=32)
def _disassembled(image: bytes, name: str, path: str) -> str:
    """`disassemble`'s text, kept for the last few images (a failure is not kept): a
    disassembler's run costs about 0.4 CPU-s whatever the cubin (cuobjdump and nvdisasm
    alike), and the model checks read one plan's cubin once per kernel (benchmarks/
    model_check.kernel_sass; 4 of the 16 runs of test_cost_truth and test_sass_align)."""
    with tempfile.TemporaryDirectory(prefix="napkin-sass-") as tmp:
        file = os.path.join(tmp, "kernel.cubin")
        with open(file, "wb") as fh:
            fh.write(image)
        argv = [path, "-sass", file] if name == "cuobjdump" else [path, file]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{name} did not finish within {_TIMEOUT_S} s") from exc
    out = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise RuntimeError(f"{name} failed (exit {proc.returncode}): {err or out.strip()}")
    return out


def opcodes(cubin: bytes, *, modifiers: bool = False,
            tool: str | None = None) -> "collections.Counter[str]":
    """How often each SASS opcode occurs in a cubin, over all its kernels.

    Keys are base opcodes ("HMMA", "LDGSTS", "SHFL") unless `modifiers` is true,
    in which case they are whole mnemonics ("HMMA.16816.F32"). Predicates
    (`@P0`, `@!PT`) are not part of the key.
    """
    return count_opcodes(disassemble(cubin, tool=tool), modifiers=modifiers)


def count_opcodes(sass: str, *, modifiers: bool = False) -> "collections.Counter[str]":
    """Opcode counts of SASS text as printed by cuobjdump -sass or nvdisasm."""
    counts: collections.Counter[str] = collections.Counter()
    for line in sass.splitlines():
        m = _INSN.match(line)
        if m:
            op = m.group(1)
            counts[op if modifiers else op.split(".", 1)[0]] += 1
    return counts
