"""Kernel programs to CUDA C through Jinja (StrictUndefined; the templates only print).

The output is deterministic; it starts with the prelude (`prelude/napkin.cuh`)
so that one file compiles with NVRTC and with the CPU emulator as it is.
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from pathlib import Path

from . import program as P
from . import wgmma_ptx
from ..diagrams.version import VERSION

HERE = Path(__file__).parent
PRELUDE = HERE / "prelude" / "napkin.cuh"

_KIND = {P.Line: "line", P.Decl: "decl", P.Set: "set", P.For: "for", P.If: "if",
         P.Barrier: "barrier", P.Store: "store", P.Block: "block", P.Continue: "continue",
         P.Call: "call"}


@lru_cache(maxsize=1)
def _env():
    import jinja2   # when CUDA is rendered, not when the module is imported (napkin explain)
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                              undefined=jinja2.StrictUndefined, autoescape=False,
                              keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False)


_FIELDS = {kind: tuple(f.name for f in fields(kind)) for kind in _KIND}


def _plain(x):
    """Statements as dicts with a `kind` (what the template switches on)."""
    if isinstance(x, tuple):
        return [_plain(s) for s in x]
    names = _FIELDS.get(type(x))        # (the statement dataclasses' fields, listed once)
    if names is not None:
        out = {name: _plain(getattr(x, name)) for name in names}
        out["kind"] = _KIND[type(x)]
        return out
    return x


def render(program: P.Program) -> str:
    kernels = []
    for k in program.kernels:
        kernels.append({"name": k.name, "threads": k.threads, "index_type": k.index_type,
                        "params": [{"name": p.name, "ctype": p.ctype} for p in k.params],
                        "body": _plain(k.body), "wgmma": bool(k.wgmma)})
    variants = [v for k in program.kernels for v in k.wgmma]
    text = _env().get_template("kernels.cu.j2").render(
        version=VERSION, prelude=PRELUDE.read_text().rstrip("\n"), kernels=kernels,
        specialised=", ".join(str(v) for _, v in program.specialised),
        helpers=wgmma_ptx.helpers(variants).rstrip("\n") if variants else "")
    return text


