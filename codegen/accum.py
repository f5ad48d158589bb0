"""The accumulators of streamed reductions, in C: declare, update per position, merge, finish.

These are the C forms of `compiler/accumulators.py` (which the interpreter
runs): sum, max, min, mean, Welford's variance, logsumexp, softmax statistics,
a contraction's running sum, and the online softmax of a softmax contracted
over its axis (running max m and sum l per row, the output o rescaled).
A state holds one value per position of the result's axes that the thread's
point does not fix (a register array, length 1 when there are none). Lanes
that split the streamed axis merge their states with butterfly shuffles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..compiler import ir, row_state, score_states
from ..compiler.canonical import through
from ..diagrams.diagnostics import error
from . import cexpr, held, lane_merges, probability_rows
from . import program as P
from .lane_merges import SLOT_CTYPE, finished

# kind -> (per-row slots, per-position slots) and their initial values
SLOTS = {
    "sum": ((), ("s",)), "max": ((), ("s",)), "min": ((), ("s",)), "mean": ((), ("s", "c")),
    "var": ((), ("n", "m", "q")), "logsumexp": ((), ("m", "s")), "stats": ((), ("m", "s")),
    "contract": ((), ("a",)), "pair": (("m", "s"), ("o",)),
    "psum": ((), ("m", "s")), "pmax": ((), ("m", "s")),     # (probability_rows.py)
    "argmax": ((), ("s", "i")), "argmin": ((), ("s", "i")),
}
# ... a streamed mean on the CUDA cores keeps its sum only: its count is the sizes of the axes
# it reduces (whole in a kernel: a split's mean is its split sum over the size,
# compiler/split.py); codegen/rowstats.py (beside a tensor-core product) still counts
STREAMED = {**SLOTS, "mean": ((), ("s",))}
INIT = {"s": "0.0f", "c": "0.0f", "n": "0.0f", "q": "0.0f", "a": "0.0f", "o": "0.0f"}
INIT_BY_KIND = {("max", "s"): "-NAPKIN_INF", ("min", "s"): "NAPKIN_INF",
                ("logsumexp", "m"): "-NAPKIN_INF", ("stats", "m"): "-NAPKIN_INF",
                ("pair", "m"): "-NAPKIN_INF", ("var", "m"): "0.0f",
                ("psum", "m"): "-NAPKIN_INF", ("pmax", "m"): "-NAPKIN_INF",
                ("argmax", "s"): "-NAPKIN_INF", ("argmin", "s"): "NAPKIN_INF",
                ("argmax", "i"): "NAPKIN_NO_POSITION", ("argmin", "i"): "NAPKIN_NO_POSITION"}


@dataclass
class State:
    kind: str
    rows: dict          # slot -> scalar variable
    arrays: dict        # slot -> register array variable
    extent: int         # length of the arrays
    extra: list         # the axes the arrays run over
    # a paired online softmax's points of one row share (m, l) (row_key): the row's first
    # point (its leader) computes them and the factors each point's o takes, the others
    # (its peers: leader set) reuse them
    leader: "State | None" = None
    peers: list = field(default_factory=list)
    factors: tuple = ()     # the leader's (scale, exps) at the current position(s)
    inv: str = ""           # the leader's 1 / l, after the merge
    # a row statistic of the scores another reducer keeps the running max and sum of
    # (compiler/score_states.py): its arrays are that one's, never folded nor merged here
    source: "State | None" = None


def kind_of(lw, n: int, stats: bool) -> str:
    if stats:
        return "stats"
    op = ir.op(lw.g, n)
    if isinstance(op, ir.Reduce):
        found = row_state.of_probabilities(lw.g, lw.st, n)
        return found[1] if found else op.fn
    return "pair" if lw.paired_softmax(n) is not None else "contract"


def _extra(lw, n: int, kind: str) -> list[str]:
    if kind == "stats":
        op = ir.op(lw.g, n)
        rows = [a for a in ir.type_of(lw.g, n).axes if a not in op.axes]
        return [a for a in rows if a not in lw.woven]
    return [a for a in ir.type_of(lw.g, n).axes if a not in lw.woven]   # (not the point's)


def extent_of(lw, axis: str) -> int:
    bound = lw.plan.sizes[axis]
    return -(-bound // lw.ways) if lw.split and lw.split[0] == axis else bound


def row_key(lw, n: int, pt: dict) -> tuple:
    """The row of a paired softmax's point: its offsets along the woven axes of the softmax's
    rows (its axes but the streamed one; those of `O.stats`, compiler/model.py)."""
    rows = [a for a in ir.type_of(lw.g, lw.paired_softmax(n)).axes if a != lw.st.axis]
    return (n,) + tuple(pt["at"][a] for a in lw.woven if a in rows)


def declare(lw, n: int, pt: dict, stats: bool = False, leaders: dict | None = None) -> State:
    """A state for node n at the thread's point `pt`. `leaders` (row_key -> State, filled
    here): a paired softmax's point whose row an earlier point holds shares that one's (m, l);
    a statistic of the scores whose running state another reducer keeps at the point reads
    that one's (compiler/score_states.shared)."""
    b = lw.b
    kind = kind_of(lw, n, stats)
    extra = _extra(lw, n, kind)
    extent = 1
    for a in extra:
        extent *= extent_of(lw, a)
    point = ("scores",) + tuple(pt["at"].get(a) for a in lw.woven)
    kept = {} if stats else score_states.shared(lw.g, lw.st)
    keeper = kept.get(n, n)
    if keeper != n and leaders is not None:
        source = leaders[(keeper,) + point]
        return State(kind, {}, source.arrays, extent, extra, source=source)
    rows_slots, array_slots = STREAMED[kind]
    rows, arrays = {}, {}
    leader = None
    if kind == "pair" and leaders is not None:
        key = row_key(lw, n, pt)
        leader = leaders.get(key)
        if leader is not None:
            rows_slots, rows = (), leader.rows
    for slot in rows_slots:
        rows[slot] = b.fresh("st")
        b.emit(P.Decl("float", rows[slot], INIT_BY_KIND.get((kind, slot), INIT.get(slot, "0.0f"))))
    for slot in array_slots:
        arrays[slot] = b.fresh("st")
        b.emit(P.Decl(SLOT_CTYPE.get(slot, "float"), arrays[slot], None, extent))
        init = INIT_BY_KIND.get((kind, slot), INIT.get(slot, "0.0f"))
        b.loop("z", "0", str(extent), "1", lambda v=arrays[slot], i=init: b.emit(P.Set(f"{v}[z]", i)))
    st = State(kind, rows, arrays, extent, extra, leader)
    if leader is not None:
        leader.peers.append(st)
    elif kind == "pair" and leaders is not None:
        leaders[key] = st
    elif leaders is not None and n in kept:
        leaders[(n,) + point] = st        # (its followers' source: score_states.shared)
    return st


def local_index(lw, extra, scope) -> str:
    """Index into a per-point register array over `extra` (row-major over local indices),
    each a constant once nvcc unrolls the loops around it: the plan keeps every per-thread
    array in registers (compiler/register_arrays.py); N0604 where one would be indexed at
    run time (placed in local memory, unpriced)."""
    expr = None
    for a in extra:
        local = scope[a].local
        names = set(re.findall(r"[A-Za-z_]\w*", local)) - lw.b.unrolled
        if names:
            raise error("N0604", f"kernel {lw.k.name} indexes a register array over `{a}` with "
                        f"`{local}`, a position known at run time only (local memory), where "
                        "the plan keeps it in registers (compiler/register_arrays.py)",
                        help="plan it again (napkin explain); this is a napkin bug")
        expr = local if expr is None else f"({expr}) * {extent_of(lw, a)} + ({local})"
    return expr or "0"


def update(lw, n: int, st: State, scopes: list, stats: bool = False) -> None:
    """Fold the value(s) at each scope of `scopes` (consecutive positions of the streamed
    axis, Schedule.fold of them) into the state: a paired online softmax all of them at
    once (_online_softmax), any other state one position after the other."""
    g, b, em = lw.g, lw.b, lw.emitter
    op = ir.op(g, n)
    r = lw.st.axis
    if st.kind == "pair":
        _online_softmax(lw, n, st, scopes)
        return
    if st.source is not None:      # (its source folds the scores)
        return
    args = ir.operands(g, n)
    if st.kind in probability_rows.KINDS:    # (the scores the paired softmax normalises)
        args = (probability_rows.scores_of(lw, n),)
    others = [a for a in op.axes if a != r]

    def at(s):
        idx = local_index(lw, st.extra, s)
        lv = {slot: f"{var}[{idx}]" for slot, var in st.arrays.items()}

        def fold(s2):
            if st.kind == "contract":
                x, y = (em.number(a, s2) for a in args)
                b.emit(P.Set(lv["a"], f"{lv['a']} + {x} * {y}"))
            elif st.kind in ir.INDEX_REDUCTIONS:
                b.emit(P.Call(f"napkin_{st.kind}_fold", (lv["s"], lv["i"], em.number(args[0], s2),
                                                         f"((long long)({s2[r].expr}))")))
            else:
                fold_value(b, st.kind, lv, em.number(args[0], s2))
        em._walk(others, s, fold, args)
    for scope in scopes:
        # what the folded values need that does not vary along the state's own axes, before
        # its loops over them (once, not at each trip; a reduction over the split axis whose
        # row is at the lane's own position would run per lane there: KernelLowering.pinned)
        if st.extra:
            em._hoist(args, st.extra, scope)
        # (and what they reduce over the split axis, before the lanes walk it: held.loops)
        held.loops(lw, st.extra, scope, at, tuple(args))


def _online_softmax(lw, n: int, st: State, scopes: list) -> None:
    """Fold the scores at `scopes` (one or a group of keys, compiler/fold.py): the running
    max over them all, ONE rescale of the running sum and of the output row by
    exp(m_old - m_new), one exponential per score, each score's product with the other
    operand added to the rescaled row."""
    g, b, em = lw.g, lw.b, lw.emitter
    soft = lw.paired_softmax(n)
    r = lw.st.axis
    if st.leader is not None:       # the row's leader folded these keys: its factors
        scale, ps = st.leader.factors
    else:
        m, l = st.rows["m"], st.rows["s"]
        scores = [em.number(ir.operands(g, soft)[0], scope) for scope in scopes]
        m_new = m
        for score in scores:
            m_new = b.value("float", f"napkin_max({m_new}, {score})")
        shift = b.value("float", f"napkin_shift({m_new})")
        # of the old m: every o reads these values, never m itself
        scale = b.value("float", cexpr.shifted_exp(f"{m} - {shift}"))
        ps = [b.value("float", cexpr.shifted_exp(f"{score} - {shift}")) for score in scores]
        b.emit(P.Set(l, " + ".join([f"{l} * {scale}"] + ps)))
        b.emit(P.Set(m, m_new))
        st.factors = (scale, ps)
    other = _other_operand(lw, n, soft)

    def add(s):
        o = f"{st.arrays['o']}[{local_index(lw, st.extra, s)}]"
        terms = [f"{p} * {em.number(other, {**s, r: scope[r]})}" for p, scope in zip(ps, scopes)]
        b.emit(P.Set(o, " + ".join([f"{o} * {scale}"] + terms)))
    held.loops(lw, st.extra, scopes[0], add)


def reciprocal(total: str, soft: ir.Softmax, sizes: dict | None = None) -> str:
    """1 / a softmax's sum; where the sum is 0, ir.empty_row's: 0 (each probability 0) or
    NaN (written out, exp(-inf - -inf)) on a fully masked row, and where the row has no
    position (the C `sizes` of its axes given: a contraction's) the empty row's."""
    masked, none = (cexpr.float_literal(v) for v in ir.empty_row(soft))
    if sizes is not None and masked != none:
        empty = " || ".join(f"{sizes[a]} == 0" for a in soft.axes)
        masked = f"({empty} ? {none} : {masked})"
    return f"({total} == 0.0f ? {masked} : 1.0f / {total})"


def fold_value(b, kind: str, v: dict, x: str, two_exps: bool = False) -> None:
    """Fold value `x` into a `kind` state's slots (`v`: slot -> C lvalue). A running max and
    sum takes one exponential per value, of the smaller of the max and the value shifted by
    the larger: the sum rescaled (s e + 1) when the value is the new max, else added to (s +
    e); `x - max` adds the NaN of a +inf value (inf - inf) as `exp(x - shift)` did.
    `two_exps`: the rescale and the value's own exponential, both per value (rowstats's,
    beside a tensor-core product: kept as issue.py's STAGED_* were fitted to it)."""
    if kind == "sum":
        b.emit(P.Set(v["s"], f"{v['s']} + {x}"))
    elif kind in ("max", "min"):
        b.emit(P.Set(v["s"], f"napkin_{kind}({v['s']}, {x})"))
    elif kind == "mean":
        b.emit(P.Set(v["s"], f"{v['s']} + {x}"))
        if "c" in v:          # (a count kept: rowstats's; a streamed mean knows its count)
            b.emit(P.Set(v["c"], f"{v['c']} + 1.0f"))
    elif kind == "var":   # Welford
        d = b.value("float", f"{x} - {v['m']}")
        b.emit(P.Set(v["n"], f"{v['n']} + 1.0f"))
        b.emit(P.Set(v["m"], f"{v['m']} + {d} / {v['n']}"))
        b.emit(P.Set(v["q"], f"{v['q']} + {d} * ({x} - {v['m']})"))
    elif two_exps:        # logsumexp, softmax statistics: running max and rescaled sum
        m_new = b.value("float", f"napkin_max({v['m']}, {x})")
        shift = b.value("float", f"napkin_shift({m_new})")
        rescale, own = cexpr.shifted_exp(f"{v['m']} - {shift}"), cexpr.shifted_exp(f"{x} - {shift}")
        b.emit(P.Set(v["s"], f"{v['s']} * {rescale} + {own}"))
        b.emit(P.Set(v["m"], m_new))
    else:
        m_new = b.value("float", f"napkin_max({v['m']}, {x})")
        e = b.value("float",
                    cexpr.shifted_exp(f"napkin_min({v['m']}, {x}) - napkin_shift({m_new})"))
        b.emit(P.Set(v["s"], f"({x} > {v['m']} ? {v['s']} * {e} + 1.0f + ({x} - {m_new}) : "
                             f"{v['s']} + {e})"))
        b.emit(P.Set(v["m"], m_new))


def finish(lw, n: int, st: State, pt: dict, merge: bool) -> None:
    """Merge the lanes' states (when they split the streamed axis) and register the result."""
    b = lw.b
    if merge and lw.ways > 1 and st.leader is None and st.source is None:
        # (a leader merges its peers' o; a source, finished first, the state read here)
        lane_merges.merge(lw, st)
    point = pt["scope"]
    a = st.arrays
    if st.kind == "stats":          # the row's max and the reciprocal of its sum
        inv = b.fresh("res")
        b.emit(P.Decl("float", inv, None, st.extent))
        b.loop("z", "0", str(st.extent), "1", lambda: b.emit(P.Set(
            f"{inv}[z]", reciprocal(f"{a['s']}[z]", ir.op(lw.g, n)))))
        lw.register_stats(n, point, a["m"], inv, st.extra)
        return
    if st.kind in ("sum", "max", "min"):
        result = a["s"]
    elif st.kind in ir.INDEX_REDUCTIONS:
        result = b.fresh("res")
        b.emit(P.Decl("long long", result, None, st.extent))
        b.loop("z", "0", str(st.extent), "1", lambda: b.emit(P.Set(
            f"{result}[z]", f"({a['i']}[z] == NAPKIN_NO_POSITION ? -1LL : {a['i']}[z])")))
    elif st.kind == "contract":
        result = a["a"]
    elif st.kind in probability_rows.KINDS:
        result = probability_rows.finished(lw, n, st, reciprocal)
    elif st.kind == "pair":
        if st.leader is not None:       # once per row: the leader's reciprocal
            inv = st.leader.inv
        else:
            l = st.rows["s"]
            inv = st.inv = b.value("float", reciprocal(l, ir.op(lw.g, lw.paired_softmax(n)),
                                                       lw.sizes))
        b.loop("z", "0", str(st.extent), "1", lambda: b.emit(P.Set(f"{a['o']}[z]", f"{a['o']}[z] * {inv}")))
        result = a["o"]
    else:
        slots = {slot: f"{v}[z]" for slot, v in a.items()}
        if st.kind == "mean":        # its sum over its positions, counted by the sizes
            slots["c"] = "(" + " * ".join(f"(float)({lw.sizes[x]})"
                                          for x in ir.op(lw.g, n).axes) + ")"
        result = b.fresh("res")
        b.emit(P.Decl("float", result, None, st.extent))
        b.loop("z", "0", str(st.extent), "1", lambda: b.emit(P.Set(
            f"{result}[z]", finished(st.kind, slots))))
    lw.register(n, point, result, st.extra)


def _other_operand(lw, n: int, soft: int) -> int:
    """The operand of paired contraction `n` that is not its softmax `soft`."""
    a, b_ = ir.operands(lw.g, n)
    return b_ if through(lw.g, a) == soft else a
