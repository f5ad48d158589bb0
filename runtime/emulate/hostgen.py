"""The generated host `main`: one launcher per kernel signature, then a call of the
runtime's `host_main` (napkin_emulate_runtime.cpp, linked in), which reads the spec file."""

from __future__ import annotations

from .spec import Param

KERNEL_FILE = "kernel.cu"

_SCALAR_CTYPES = {"i32": "int", "i64": "long long", "f32": "float"}


def _argument(i: int, p: Param) -> str:
    if p.kind == "ptr":
        const = "const " if p.const else ""
        return f"static_cast<{const}{p.ctype}*>(a[{i}])"
    return f"*static_cast<const {_SCALAR_CTYPES[p.kind]}*>(a[{i}])"


def host_main_source(signatures: dict[str, tuple[Param, ...]]) -> str:
    """C++ text of main.cpp for kernels with these (already checked) signatures."""
    lines = [f'#include "{KERNEL_FILE}"', ""]
    entries = []
    for k, (name, params) in enumerate(signatures.items()):
        args = ", ".join(_argument(i, p) for i, p in enumerate(params))
        lines.append(f"static void napkin_launch_{k}(void* const* a) {{ (void)a; {name}({args}); }}")
        entries.append(f'  {{"{name}", napkin_launch_{k}}},')
    if not entries:
        entries.append('  {"<none>", nullptr},')
    lines += ["", "static const napkin_emu::KernelEntry napkin_kernels[] = {", *entries, "};",
              "int main(int argc, char** argv) {",
              f"  return napkin_emu::host_main(argc, argv, napkin_kernels, {len(signatures)});",
              "}", ""]
    return "\n".join(lines)
