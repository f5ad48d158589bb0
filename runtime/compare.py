"""The tolerance rule every backend is held to (testing.md, as FlashAttention's tests do).

    |out - ref64| <= 2 * max|naive_lowp - ref64| + floor(dtype) + order   (each element)

where `ref64` is the float64 reference on inputs already rounded to their
storage dtypes, `naive_lowp` is the reference computed naively in low
precision, and `order` (optional, per element) is the bound `bound.evaluate`
gives for any f32 evaluation order: NumPy's pairwise sum is one order, a
kernel's lanes summing sequentially another (Higham's gamma_{n-1} * sum|x_i|).
NaN and infinities must appear in exactly the same places, the reference's as stored: a finite
value past the dtype's largest is inf of its sign there (language.md), within the budget of it
either may be.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import EPS, round_to


@dataclass(frozen=True)
class Verdict:
    ok: bool
    error: float          # max |out - ref| over finite positions
    budget: float
    message: str

    def __bool__(self) -> bool:
        return self.ok


def floor(dtype: str, scale: float) -> float:
    """Absolute slack for one rounding to `dtype` of values of magnitude `scale`."""
    return 2.0 * EPS[dtype] * max(1.0, scale)


def check(out: np.ndarray, ref64: np.ndarray, naive: np.ndarray, dtype: str,
          name: str = "output", order: np.ndarray | None = None) -> Verdict:
    """The verdict on one output; `order`: the order-aware bound of each element (or None)."""
    if dtype in ("i32", "i64"):       # integers are exact on every backend
        return _exact(np.asarray(out), np.asarray(ref64), name)
    out = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref64, dtype=np.float64)
    naive = np.asarray(naive).astype(np.float64)
    if out.shape != ref.shape:
        return Verdict(False, np.inf, 0.0, f"{name}: shape {out.shape} != reference {ref.shape}")
    # storing rounds to the dtype, a finite value past its largest to inf (language.md): where
    # the reference does, or the output did, the infinity is checked against the budget below
    edge = np.isfinite(ref) & (np.isinf(round_to(ref, dtype)) | np.isinf(out))
    for what, mask_out, mask_ref in (("NaN", np.isnan(out), np.isnan(ref)),
                                     ("+inf", out == np.inf, ref == np.inf),
                                     ("-inf", out == -np.inf, ref == -np.inf)):
        if not np.array_equal(mask_out & ~edge, mask_ref & ~edge):
            where = np.argwhere((mask_out != mask_ref) & ~edge)[:3].tolist()
            return Verdict(False, np.inf, 0.0,
                           f"{name}: {what} in different places (first at {where})")
    finite = np.isfinite(ref)
    if not finite.any():
        return Verdict(True, 0.0, 0.0, f"{name}: no finite values; special values match")
    with np.errstate(invalid="ignore"):
        diff = np.where(finite, np.abs(out - np.where(finite, ref, 0)), 0.0)
    err = float(np.max(diff[finite]))
    fair = finite & np.isfinite(naive)       # (the naive evaluation overflows where ref does)
    naive_err = float(np.max(np.abs(naive[fair] - ref[fair]), initial=0.0))
    scale = float(np.max(np.abs(ref[finite & ~edge]), initial=0.0))   # (the dtype's values)
    allowed = np.full(ref.shape, 2.0 * naive_err + floor(dtype, scale))
    if order is not None:
        allowed = allowed + np.broadcast_to(np.asarray(order, dtype=np.float64), ref.shape)
    if edge.any():      # an infinity of the reference's sign that the budget could reach
        reach = np.isinf(round_to(ref + np.sign(ref) * allowed, dtype))
        stored_inf = np.isinf(out) & (np.sign(out) == np.sign(ref)) & reach
        diff = np.where(edge & stored_inf, 0.0, diff)
        err = float(np.max(diff[finite]))
    excess = np.where(finite, diff - allowed, -np.inf)
    idx = np.unravel_index(int(np.argmax(excess)), ref.shape)
    ok = bool(excess[idx] <= 0)
    if ok:      # the largest error, and the budget where it is
        idx = np.unravel_index(int(np.argmax(diff)), ref.shape)
    shown, budget = float(diff[idx]), float(allowed[idx])
    extra = f"; order bound {float(order_at(order, ref.shape, idx)):.3g}" if order is not None \
        else ""
    message = (f"{name}: max error {shown:.3g} {'<=' if ok else '>'} budget {budget:.3g} "
               f"(naive {dtype} error {naive_err:.3g}{extra}; worst at "
               f"{tuple(int(i) for i in idx)})")
    return Verdict(ok, err, budget, message)


def order_at(order, shape, idx) -> float:
    return float(np.broadcast_to(np.asarray(order, dtype=np.float64), shape)[idx])


def _exact(out: np.ndarray, ref: np.ndarray, name: str) -> Verdict:
    if out.shape != ref.shape:
        return Verdict(False, np.inf, 0.0, f"{name}: shape {out.shape} != reference {ref.shape}")
    wrong = np.argwhere(out.astype(np.int64) != ref.astype(np.int64))
    if len(wrong):
        first = tuple(int(i) for i in wrong[0])
        return Verdict(False, np.inf, 0.0, f"{name}: {len(wrong)} integers differ (first at "
                       f"{first}: {out[first]} != {ref[first]})")
    return Verdict(True, 0.0, 0.0, f"{name}: every integer equal")


def against_reference(diagram, inputs: dict, outputs: dict, plan=None,
                      longest: int | None = None,
                      confidence: float | None = None) -> dict[str, Verdict]:
    """Each output's verdict against the float64 reference of `inputs` (by output name),
    with the order-aware bound (tighter when the `plan` that computed them is given, or the
    `longest` sequential accumulation of whatever did: 0 for the float64 reference backend;
    probabilistic, failing a right result with probability at most `confidence`, when given)."""
    ref, low, order = references(diagram, inputs, plan, longest=longest, confidence=confidence)
    return {s.name: check(np.asarray(outputs[s.name]), ref[s.name], low[s.name], s.dtype,
                          s.name, order[s.name]) for s in diagram.outputs}


def references(diagram, inputs: dict, plan=None, bounded: bool = True,
               longest: int | None = None, confidence: float | None = None
               ) -> tuple[dict, dict, dict | None]:
    """What `check` compares with, by output name: the float64 reference, the naive
    low-precision one and the order-aware bound (`bound.evaluate`; with a `plan`, its longest
    sequential accumulation caps each reduction's, or `longest` when given; None when not
    `bounded`), plus, where an array another statement reads may cross global memory in 16
    bits (its output's or declared dtype, or the plan's stored16 choice), the exact effect of
    that rounding on each element (`stored_rounding`)."""
    from . import bound, reference
    if longest is None and plan is not None:
        longest = bound.longest_accumulation(plan)
    ref = reference.evaluate(diagram, inputs)
    order = bound.evaluate(diagram, inputs, longest, confidence) if bounded else None
    if order is not None:
        extra = stored_rounding(diagram, inputs, ref, plan)
        order = {k: v + extra[k] if k in extra else v for k, v in order.items()}
    return ref, reference.evaluate(diagram, inputs, precision="lowp"), order


def stored_rounding(diagram, inputs: dict, ref: dict, plan=None) -> dict:
    """By output name, |ref_stored - ref| per element, where ref_stored is the float64
    reference with every array that global memory may hold in 16 bits between kernels rounded
    as read (reference.stored_16bit): a kernel boundary there rounds it (docs/language.md,
    "computed in f32 all the same"), which the naive rule's one low-precision evaluation may
    miss where its own roundings cancel (fuzz seed 909: `E5 = E1 * E1` of an f16 output E1).
    Empty when no such array is read."""
    from . import reference
    stored = reference.stored_16bit(diagram.ir)
    if plan is not None:
        stored.update(reference.stored_16bit(plan.graph))
    if not stored:
        return {}
    rounded = reference.evaluate(diagram, inputs, precision="stored", stored=stored)
    with np.errstate(invalid="ignore"):
        return {k: np.where(np.isnan(d := np.abs(rounded[k] - ref[k])) & ~np.isnan(ref[k]),
                            np.inf, np.nan_to_num(d, nan=0.0)) for k in ref}
