"""A readable dump of a kernel program (`napkin compile --emit program`)."""

from __future__ import annotations

from . import program as P


def show(prog: P.Program) -> str:
    lines = []
    for name, axis in prog.size_params:
        lines.append(f"size {name} = size of axis {axis}")
    pitches = dict(prog.pitches)
    for array, dtype, axes in prog.buffers:
        padded = f", rows padded to a multiple of {pitches[array]} values" \
            if array in pitches else ""
        lines.append(f"buffer {array}[{' '.join(axes)}]: {dtype}{padded}")
    for k in prog.kernels:
        lines.append("")
        lines.append(f"kernel {k.name} ({k.kernel}): {k.threads} threads, {k.index_type} indices")
        lines.append("  blocks: " + " + ".join(" x ".join(f"ceil({s}/{t})" for s, t in b)
                                               for b in ([p[0] for p in k.parts] or [k.blocks])))
        for p in k.params:
            lines.append(f"  param {p.name}: {p.ctype} ({p.role} {p.array})")
        for buf in k.smem:
            lines.append(f"  shared {buf.name}: {buf.ctype}[{buf.count}] at byte {buf.offset}")
        _block(k.body, "  ", lines)
    return "\n".join(lines) + "\n"


def _block(body, indent, lines) -> None:
    for s in body:
        if isinstance(s, P.For):
            lines.append(f"{indent}for {s.var} = {s.start}; {s.cond}; {s.update}")
            _block(s.body, indent + "  ", lines)
        elif isinstance(s, P.If):
            lines.append(f"{indent}if {s.cond}")
            _block(s.body, indent + "  ", lines)
            if s.orelse:
                lines.append(f"{indent}else")
                _block(s.orelse, indent + "  ", lines)
        elif isinstance(s, P.Block):
            _block(s.body, indent, lines)
        elif isinstance(s, P.Decl):
            size = (f"[{s.count}]" if s.count is not None else "") + "".join(f"[{d}]" for d in s.shape)
            init = f" = {s.init}" if s.init is not None else ""
            lines.append(f"{indent}{s.ctype} {s.name}{size}{init}")
        elif isinstance(s, P.Set):
            lines.append(f"{indent}{s.target} = {s.value}")
        elif isinstance(s, P.Store):
            lines.append(f"{indent}store {s.ptr}[{s.index}] <- {s.value} as {s.ctype}")
        elif isinstance(s, P.Continue):
            lines.append(f"{indent}skip the chunk if {s.cond}")
        elif isinstance(s, P.Call):
            lines.append(f"{indent}{s.fn}({', '.join(s.args)})")
        elif isinstance(s, P.Barrier):
            lines.append(f"{indent}barrier")
        elif isinstance(s, P.Line):
            lines.append(f"{indent}# diagram line {s.line}")
