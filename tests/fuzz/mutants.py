"""Ten seeded code generation bugs and the differential suite that must catch them.

Each mutant is an edit of the generated CUDA text or a monkeypatch of a code
generation function, switched on one at a time. The suite is a fixed set of
emulated checks (library diagrams, plans that stream, split and tile with
tails) compared with the float64 reference under the tolerance rule, some
built with AddressSanitizer or ThreadSanitizer. A mutant is caught when a
check fails: a tolerance breach, NaN/inf in other places, or an emulator
error (sanitizer report, divergent barrier, crash, timeout).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable

from napkin.codegen import accum, cexpr
from napkin.codegen import indexing, scalar
from napkin.codegen import kernel as kernel_mod
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan as make_plan
from napkin.compiler.variants import with_choices
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import compare, emulate
from napkin.runtime.emulated import signatures
from napkin.runtime.launches import buffer_names, make_buffers, make_launches

from .gen import inputs_for
from .plans import library


@dataclass(frozen=True)
class Check:
    name: str
    diagram: str
    dtype: str
    shape: dict
    choices: tuple | None = None    # Choice per kernel, else the planner's
    sanitize: str = "none"
    sizes: tuple = ()               # -D sizes

    def load(self):
        return library(self.diagram, self.dtype, **dict(self.sizes))


SUITE = [
    Check("attention f32", "attention", "f32", {"b": 1, "h": 2, "q": 19, "x": 45},
          sizes=(("d", 16),)),
    Check("causal attention, chunks skipped", "causal_attention", "f32",
          {"b": 1, "h": 1, "q": 37, "x": 50},
          (Choice((("b", 1), ("h", 1), ("q", 8)), ("x", 8), (("q", 1),), None),),
          sizes=(("d", 8),)),
    # (unstreamed: the planner now streams k in one chunk of 65, whose lanes merge as a
    # streamed accumulator's, not by napkin_lanes_sum)
    Check("matmul f32, k split over 32 lanes", "matmul", "f32", {"m": 33, "n": 17, "k": 65},
          (Choice((("m", 2), ("n", 2)), None, (("m", 1), ("n", 1)), ("k", 32)),)),
    Check("layernorm f32, c streamed and split", "layernorm", "f32", {"r": 7, "c": 129},
          (Choice((("r", 2),), ("c", 8), (("r", 1),), ("c", 4)),)),
    Check("softmax f32, two passes", "softmax", "f32", {"r": 7, "c": 129},
          (Choice((("r", 3),), ("c", 16), (("r", 1),), ("c", 8)),)),
    Check("attention f16, ThreadSanitizer", "attention", "f16", {"b": 1, "h": 2, "q": 19, "x": 45},
          sanitize="thread", sizes=(("d", 16),)),
    Check("attention f16, AddressSanitizer", "attention", "f16",
          {"b": 1, "h": 2, "q": 19, "x": 45}, sanitize="address", sizes=(("d", 16),)),
    Check("matmul f16, AddressSanitizer", "matmul", "f16", {"m": 33, "n": 17, "k": 65},
          sanitize="address"),
]


@dataclass(frozen=True)
class Mutant:
    name: str
    edit: Callable[[str], str] | None = None          # applied to the rendered CUDA
    patch: Callable[[], contextlib.AbstractContextManager] | None = None   # during lowering
    caught_by: str = ""     # the check that caught it in the last long run (score's try_first)


_UNMUTATED: dict = {}


def source_of(check: Check, mutant: Mutant | None = None):
    """(diagram, plan, program, CUDA) of a check, with a mutant switched on; the unmutated
    ones are computed once per process (score compares every mutant's source with them)."""
    if mutant is None:
        key = repr(check)            # (a Check holds a dict: not hashable)
        if key not in _UNMUTATED:
            _UNMUTATED[key] = _source_of(check, None)
        return _UNMUTATED[key]
    return _source_of(check, mutant)


def _source_of(check: Check, mutant: Mutant | None):
    d = check.load()
    p = make_plan(d, "h100", check.shape)
    if check.choices is not None:
        p = with_choices(p, list(check.choices))
    with (mutant.patch() if mutant and mutant.patch else contextlib.nullcontext()):
        program = lower(p)
        source = render(program)
    if mutant and mutant.edit:
        source = mutant.edit(source)
    return d, p, program, source


def run_check(check: Check, mutant: Mutant | None = None, timeout_s: float = 120.0,
              built=None) -> str:
    """'' when the check passes, else why it failed (`built`: source_of's answer, if known)."""
    d, p, program, source = built or source_of(check, mutant)
    inputs = inputs_for(d, check.shape, 7)
    buffers = make_buffers(program, inputs, p.sizes, set(p.graph.graph["inputs"]))
    launches = [emulate.Launch(s.kernel, (min(s.grid, 8), 1, 1), (s.block, 1, 1), s.smem_bytes,
                               s.args) for s in make_launches(program, p.sizes)]
    try:
        out = emulate.run(source, signatures(program), launches, buffers,
                          sanitize=check.sanitize, timeout_s=timeout_s)
    except NapkinError as exc:
        return f"emulator: {str(exc).splitlines()[0][:200]}"
    names = buffer_names(program)
    ref, low, order = compare.references(d, inputs, p)
    for s in d.outputs:
        verdict = compare.check(out[names[s.name]].reshape(ref[s.name].shape), ref[s.name],
                                low[s.name], s.dtype, s.name, order[s.name])
        if not verdict.ok:
            return verdict.message
    return ""


# --- the mutants -------------------------------------------------------------------------------

def _sub(pattern: str, repl: str, count: int = 0) -> Callable[[str], str]:
    return lambda src: re.sub(pattern, repl, src, count=count)


def _drop_chunk_barrier(src: str) -> str:
    """The barrier between staging a chunk and reading it (the second of each pair)."""
    out, n = [], 0
    for line in src.split("\n"):
        if line.strip() == "__syncthreads();":
            n += 1
            if n % 2 == 0 and "clen" in "".join(out[-40:]):
                out.append(line.replace("__syncthreads();", "/* barrier dropped */"))
                continue
        out.append(line)
    return "\n".join(out)


@contextlib.contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _wrong_stride():
    """Global row-major offsets multiply by the extent plus one (a stride off by one)."""
    old = indexing.Layout.offset

    def offset(self, scope, local=False):
        text = old(self, scope, local)
        if local or len(self.axes) < 2:
            return text
        return text.replace(f") * ({self.sizes[self.axes[1]]}) + (",
                            f") * ({self.sizes[self.axes[1]]} + 1) + (", 1)
    return _patched(indexing.Layout, "offset", offset)


def _f16_accumulation():
    """Sums and contractions accumulate in f16 (rounded at every step)."""
    old_fold, old_contract = accum.fold_value, scalar.Emitter._contract

    def fold(b, kind, v, x):
        if kind in ("sum", "contract", "mean"):
            b.emit(accum.P.Set(v["s"], f"napkin_to_float(napkin_from_float<__half>({v['s']} + {x}))"))
            if kind == "mean":
                b.emit(accum.P.Set(v["c"], f"{v['c']} + 1.0f"))
            return
        old_fold(b, kind, v, x)

    def contract(self, n, op, args, scope):
        acc = self.b.fresh("acc")
        self.b.emit(accum.P.Decl("float", acc, "0.0f"))

        def body(s):
            x, y = (self.value(a, s) for a in args)
            self.b.emit(accum.P.Set(acc, f"napkin_to_float(napkin_from_float<__half>({acc} + {x} * {y}))"))
        self._walk(op.axes, scope, body, args)
        self._merge(op.axes, "sum", acc)
        return acc

    stack = contextlib.ExitStack()
    stack.enter_context(_patched(accum, "fold_value", fold))
    stack.enter_context(_patched(scalar.Emitter, "_contract", contract))
    return stack


def _wrong_split_merge():
    """Lanes that split a reduced axis merge partial sums with max instead of +."""
    lanes = dict(cexpr.LANES, sum="napkin_lanes_max")
    return _patched(cexpr, "LANES", lanes)


def _wrong_welford_merge(src: str) -> str:
    """Chan's merge of (n, mean, M2) without the n_a n_b / n * delta^2 term."""
    return re.sub(r"(st\d+\[z\]) = \1 \+ (v\d+) \+ (v\d+) \* \3 \* \(.*?\);", r"\1 = \1 + \2;", src)


def _skip_guard():
    """The chunk-skip guard tests only the chunk's last position (its start is dropped):
    chunks the diagonal crosses are skipped."""
    old = kernel_mod.KernelLowering._box

    def box(self, r, start="c0", length="clen"):
        out = old(self, r, start, length)
        out[r] = (f"{start} + {length} - 1", f"{start} + {length} - 1")
        return out
    return _patched(kernel_mod.KernelLowering, "_box", box)


MUTANTS = [
    Mutant("off-by-one tail (the last chunk one short)",
           edit=_sub(r"const int clen = \(int\)\((.*?) - c0 < (\d+) \? (.*?) - c0 : (\d+)\);",
                     r"const int clen = (int)(\1 - c0 - 1 < \2 ? \3 - c0 - 1 : \4);"),
           caught_by="attention f32"),
    Mutant("dropped barrier (after staging a chunk)", edit=_drop_chunk_barrier,
           caught_by="attention f32"),
    Mutant("wrong stride (row stride + 1)", patch=_wrong_stride,
           caught_by="matmul f32, k split over 32 lanes"),
    Mutant("dropped mask (staging reads past the tail)",
           edit=_sub(r"(sm\d+)\[e\] = \((.*?)\) \? (p\d+\[.*?\]) : napkin_from_float<(\w+)>\(0\.0f\);",
                     r"\1[e] = \3;"),
           caught_by="attention f16, AddressSanitizer"),
    Mutant("missing rescale in online softmax",
           edit=_sub(r"(st\d+\[k\d+\]) = \1 \* (v\d+) \+", r"\1 = \1 +"),
           caught_by="attention f32"),
    Mutant("f16 accumulation", patch=_f16_accumulation,
           caught_by="attention f32"),
    Mutant("wrong split merge (max instead of sum)", patch=_wrong_split_merge,
           caught_by="matmul f32, k split over 32 lanes"),
    Mutant("wrong Welford merge (no cross term)", edit=_wrong_welford_merge,
           caught_by="layernorm f32, c streamed and split"),
    Mutant("dropped chunk-skip guard (start of chunk)", patch=_skip_guard,
           caught_by="causal attention, chunks skipped"),
    Mutant("wrong clamp (to the size, not size - 1)",
           # (a runtime size in a 32-bit index: `(int)(((int)(n0)) - 1)`)
           edit=_sub(r"\? \(base_(\d+) \+ (\d+)\) : \((int|long long)\)"
                     r"\((\w+|\(\(int\)\(\w+\)\)) - 1\)\)",
                     r"? (base_\1 + \2) : (\3)(\4))"),
           caught_by="attention f32"),
]


def score(mutant: Mutant, checks=SUITE, try_first: str = "") -> tuple[str, bool]:
    """(the first check that caught it or why not, whether it changed any source).

    `try_first` names a check to run before the others (CI passes the mutant's caught_by,
    saving the emulator builds of the checks it passes); whether a mutant is caught does not
    depend on the order, only which check is named and how many are built."""
    changed = False
    for c in sorted(checks, key=lambda c: c.name != try_first):
        built = source_of(c, mutant)
        if built[3] == source_of(c)[3]:
            continue
        changed = True
        why = run_check(c, mutant, built=built)
        if why:
            return f"{c.name}: {why}", True
    return "not caught", changed
