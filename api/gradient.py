"""`napkin.grad`: the backward diagram of a diagram, itself a checked Diagram.

`compiler/grad.py` derives its text (reverse mode on the checked IR); the ordinary
front end parses and checks it, so the result compiles, explains and runs like any
diagram: `napkin.compile(napkin.grad("attention"))`.
"""

from __future__ import annotations

from .compiler import front
from .compiler.diagram import Diagram
from .compiler.grad import gradient_text
from .diagrams.diagnostics import Source


def grad(diagram, wrt=None, saved: bool = False, **sizes: int) -> Diagram:
    """The gradient of a diagram: inputs are its inputs, then `d<OUT>` per output; outputs are
    `d<IN>` for each input in `wrt` (a name, a comma-separated string or a sequence; default:
    every floating-point input an output depends on).

    With `saved=True` the backward also takes each softmax's row logsumexp (`P_lse`, an extra
    output of `napkin.statistics(diagram)`) and, where a softmax feeds one contraction whose
    result is an output, that output (`O_saved`): it recomputes the probabilities elementwise
    instead of normalising rows again, as FlashAttention's backward does.
    """
    d = front.load(diagram, **sizes)
    names = tuple(w.strip() for w in wrt.split(",") if w.strip()) if isinstance(wrt, str) else \
        tuple(wrt) if wrt is not None else None
    g = _checked(f"grad:{_short(d.name)}", gradient_text(d, names, saved))
    # the gradient of a sum is a broadcast (`dA[r x] = dY`): N0703's "if that is a typo"
    # points into text the user did not write
    return Diagram(g.ir, g.source, tuple(w for w in g.warnings if w.code != "N0703"), g.overrides)


def statistics(diagram, **sizes: int) -> Diagram:
    """The forward diagram with the statistics `grad(..., saved=True)` reads as extra outputs."""
    from .compiler.statistics import statistics_text
    d = front.load(diagram, **sizes)
    return _checked(f"stats:{_short(d.name)}", statistics_text(d))


def _checked(name: str, text: str) -> Diagram:
    d = front.check(front.parse(Source(f"<{name}>", text)))
    # the backward takes every forward input by contract, whether or not its rules read it
    kept = tuple(w for w in d.warnings if w.code != "N0701")
    return Diagram(d.ir, d.source, kept, d.overrides)


def _short(name: str) -> str:
    return name[len("<library:"):-1] if name.startswith("<library:") else name
