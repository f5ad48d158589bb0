"""A row sum or maximum of a paired online softmax's probabilities on the CUDA cores
(compiler/row_state.of_probabilities: `sum[x](P)`, `max[x](P)` beside `P * V`): the pair
never normalises P per chunk, so each keeps a running max m and sum l of exp of the
softmax's scores (accum.py's logsumexp state) and finishes as l r (1 where l > 0) or r (the
maximum, exp(m - m) r), r = 1 / l with ir.empty_row's 0 or NaN on a row with no key, NaN
where the maximum is +inf (exp(inf - inf) in every probability). FlashAttention reads the
same from its own state (codegen/flash.py)."""

from __future__ import annotations

from ..compiler import ir, row_state
from . import program as P

KINDS = ("psum", "pmax")


def scores_of(lw, n: int) -> int:
    """The scores whose paired softmax's probabilities reduction n sums or maximises."""
    return ir.operands(lw.g, row_state.of_probabilities(lw.g, lw.st, n)[0])[0]


def finished(lw, n: int, st, reciprocal) -> str:
    """The register array holding reduction n's value at each entry of its state `st`."""
    b, a = lw.b, st.arrays
    soft = row_state.of_probabilities(lw.g, lw.st, n)[0]
    result = b.fresh("res")
    b.emit(P.Decl("float", result, None, st.extent))

    def one():
        m, s = a["m"] + "[z]", a["s"] + "[z]"
        inv = reciprocal(s, ir.op(lw.g, soft), lw.sizes)
        value = f"{s} * {inv}" if st.kind == "psum" else inv
        b.emit(P.Set(f"{result}[z]", f"({m} == NAPKIN_INF ? NAPKIN_NAN : {value})"))
    b.loop("z", "0", str(st.extent), "1", one)
    return result
