"""Differential checks shared by the fuzz tests and `benchmarks/fuzz.py`.

A case is compiled (`plan` on a target, lowered, rendered), interpreted and
emulated, and every output is compared with the float64 reference under the
tolerance rule (`compare.check`: NaN and infinities in the same places).
Failures are classified:

    load     the generated diagram was rejected (a generator bug, or a front-end one)
    compile  planning, lowering, rendering or g++ failed
    run      the interpreter or the emulated kernel raised, crashed or timed out
    compare  an output broke the tolerance rule
"""

from __future__ import annotations

import hashlib
import json
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import napkin
from napkin import pipeline
from napkin.compiler.cost import Choice
from napkin.compiler.variants import with_choices, with_merge
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.runtime import compare
from napkin.runtime.checks import check_inputs
from napkin.runtime.emulate.errors import BUILD, EmulatorError
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret

from .gen import Case, inputs_for

REGRESSIONS = Path(__file__).resolve().parent.parent / "regressions"
KINDS = ("load", "compile", "run", "compare")


@dataclass(frozen=True)
class Failure:
    kind: str          # load | compile | run | compare
    backend: str       # interpret | emulate | plan | ...
    message: str

    def __str__(self) -> str:
        return f"{self.kind} error ({self.backend}): {self.message}"


class Checked(Exception):
    """A case failed; carries the Failure."""

    def __init__(self, failure: Failure):
        super().__init__(str(failure))
        self.failure = failure


def _trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-3000:]


def load_case(case: Case, defines: dict | None = None):
    try:
        return napkin.load(Source("<fuzz>", case.text), **(defines or {}))
    except Exception as exc:  # noqa: BLE001 - generated diagrams are well typed: any error
        raise Checked(Failure("load", "front end", _trace(exc))) from None


def compare_outputs(d, got: dict, ref: dict, low: dict, backend: str,
                    order: dict | None = None) -> None:
    for s in d.outputs:
        out = got.get(s.name)
        if out is None:
            raise Checked(Failure("compare", backend, f"{s.name}: missing"))
        verdict = compare.check(out, ref[s.name], low[s.name], s.dtype, s.name,
                                None if order is None else order[s.name])
        if not verdict.ok:
            raise Checked(Failure("compare", backend, verdict.message))


def run_backends(d, p, inputs: dict, sizes: dict, ref: dict, low: dict, *,
                 emulate: bool = True, interp: bool = True, sanitize: str = "none",
                 timeout_s: float = 120.0, order: dict | None = None) -> dict | None:
    """Interpret and emulate one plan; raise Checked on the first failure (`order`: the
    order-aware bound by output, compare.references). The interpreter's outputs (None
    without `interp`), for callers that compare them with another plan's."""
    try:
        pipeline.lowered(p)
    except Exception as exc:  # noqa: BLE001 - any exception here is a compile error
        raise Checked(Failure("compile", "codegen", _trace(exc))) from None
    if interp:
        try:
            got = interpret(p, inputs)
        except Exception as exc:  # noqa: BLE001
            raise Checked(Failure("run", "interpret", _trace(exc))) from None
        compare_outputs(d, got, ref, low, "interpret", order)
    interpreted = got if interp else None
    if emulate:
        try:
            got = run_plan(p, inputs, sizes, sanitize=sanitize, timeout_s=timeout_s)
        except EmulatorError as exc:
            kind = "compile" if exc.kind == BUILD else "run"
            raise Checked(Failure(kind, "emulate", _trace(exc)[:3000])) from None
        except Exception as exc:  # noqa: BLE001
            raise Checked(Failure("run", "emulate", _trace(exc))) from None
        compare_outputs(d, got, ref, low, "emulate", order)
    return interpreted


def check_case(case: Case, *, target: str = "h100", emulate: bool = True,
               sanitize: str = "none", choices=None, fusion: bool = True,
               defines: dict | None = None, split: dict | None = None,
               merge: str = "auto") -> None:
    """Load (with -D `defines`), plan (with `choices`: Choice per kernel, else the
    planner's; a split's merge as `merge` asks, in a kernel where the plan cannot merge in
    the last blocks), interpret, emulate and compare a case (raises Checked)."""
    d = load_case(case, defines)
    inputs = inputs_for(d, case.shape, case.seed)
    try:
        p = _plan(d, target, case.shape, fusion, split, merge)
        if choices is not None:
            p = with_choices(p, choices)
    except Exception as exc:  # noqa: BLE001 - a NapkinError here is a planning bug too
        raise Checked(Failure("compile", "plan", _trace(exc))) from None
    ref, low, order = compare.references(d, inputs, p)
    # the inputs' sizes, not the plan's: a plan for an empty axis plans it as 1 (napkin run
    # launches with 0, as Kernel does), and emulating with 1 read past the empty inputs
    _, sizes = check_inputs(d, {k: np.asarray(v) for k, v in inputs.items()},
                            device_required=False)      # (a scalar input: a NumPy scalar)
    run_backends(d, p, inputs, sizes, ref, low, emulate=emulate, sanitize=sanitize,
                 order=order)


def _plan(d, target, shape, fusion, split, merge):
    p = pipeline.plan(d, pipeline.Options.make(target=target, shape=shape, fusion=fusion,
                                               split=split))
    if merge == "auto" or p.split is None:
        return p
    try:
        return with_merge(p, merge)
    except NapkinError as exc:
        if "cannot merge in the last block" not in str(exc):
            raise
        return p


def save_regression(case: Case, failure: Failure, folder: Path = REGRESSIONS,
                    **options) -> Path:
    """Write the (shrunk) case as `<hash>.napkin` + `<hash>.json` (shape, seed, what failed,
    and options: `choices`, `fusion`, `defines`, `split`)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256((case.text + json.dumps(options, default=str)).encode()).hexdigest()[:12]
    path = folder / f"fuzz-{key}.napkin"
    path.write_text(case.text)
    if "choices" in options:
        options["choices"] = [{"group": c.group, "stream": c.stream, "thread": c.thread,
                               "split": c.split} for c in options["choices"]]
    meta = {"shape": case.shape, "seed": case.seed, "target": "h100", **options,
            "failure": str(failure)[:2000]}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    return path


def load_regression(path: Path) -> tuple[Case, dict]:
    """A saved case and its options: target, fusion, sanitize, emulate (a slow case of an
    interpreted batch is saved without), and optionally `choices`
    (per kernel: group/thread lists of [axis, size], stream/split [axis, size] or null)."""
    meta = json.loads(path.with_suffix(".json").read_text())
    case = Case(path.read_text(), {k: int(v) for k, v in meta.get("shape", {}).items()},
                int(meta.get("seed", 0)))
    options = {"target": meta.get("target", "h100"), "fusion": meta.get("fusion", True),
               "sanitize": meta.get("sanitize", "none"), "defines": meta.get("defines"),
               "split": meta.get("split"), "merge": meta.get("merge", "auto"),
               "emulate": meta.get("emulate", True)}
    if meta.get("choices") is not None:
        options["choices"] = [_choice(c) for c in meta["choices"]]
    return case, options


def _choice(c: dict) -> Choice:
    pairs = lambda v: tuple((a, int(n)) for a, n in v or ())     # noqa: E731
    one = lambda v: (v[0], int(v[1])) if v else None             # noqa: E731
    return Choice(pairs(c.get("group")), one(c.get("stream")), pairs(c.get("thread")),
                  one(c.get("split")))


def drawn_split(case: Case) -> dict | None:
    """For one case in three (by its seed), a split of one of the diagram's reduced axes that
    merge, by 1 to 7 (docs/splits.md); else None. (`drawn_merge`: half of them ask for the
    merge in the last blocks.)"""
    if case.seed % 3:
        return None
    try:
        d = load_case(case)
    except Exception:      # noqa: BLE001 - check_case reports a diagram that does not load
        return None
    from napkin.compiler.canonical import canonicalize
    from napkin.compiler.split import splittable
    # (each axis as a hint keeps it: canonicalized with it kept, as plan does; a merged axis
    # such as `(i*j)` of `max[i j]` is no axis a hint may name)
    axes = sorted(a for a in d.axes if splittable(canonicalize(d.ir, {a}), a) is None)
    if not axes:
        return None
    return {axes[case.seed // 3 % len(axes)]: 1 + case.seed // 7 % 7}


class Recorder:
    """Remembers the last failing case (Hypothesis replays the shrunk one last)."""

    def __init__(self):
        self.last: tuple[Case, Failure, dict] | None = None

    def check(self, case: Case, splits: bool = False, **kw) -> None:
        """check_case; with `splits`, one case in three plans a split of a reduced axis
        across blocks (drawn from the case's seed: `drawn_split`)."""
        if splits:
            kw.update(self.drawn(case))
        try:
            check_case(case, **kw)
        except Checked as exc:
            options = {k: kw[k] for k in ("target", "split", "merge") if kw.get(k) is not None}
            self.last = (case, exc.failure, options)
            raise

    @staticmethod
    def drawn(case: Case) -> dict:
        """The split and merge `check(case, splits=True)` plans with (none, one or both), as
        saved with the case."""
        split = drawn_split(case)
        if not split:
            return {}
        return {"split": split, **({"merge": "last-block"} if case.seed // 21 % 2 else {})}

    def save(self, folder: Path = REGRESSIONS) -> Path | None:
        if self.last is None:
            return None
        case, failure, options = self.last
        return save_regression(case, failure, folder, **options)

