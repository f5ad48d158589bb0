"""Lanes' and warps' accumulator states merged (codegen/accum.py's states): the butterfly
shuffles within a warp after the chunk loop, and a split over several warps merged through
shared memory with the same step (codegen/across_warps.py); the result of a state whose slots
are not the result itself."""

from __future__ import annotations

from ..compiler import ir
from ..diagrams.diagnostics import error
from . import across_warps, cexpr
from . import program as P

SLOT_CTYPE = {"i": "long long"}     # a position; every other slot is a float

# the result of a state whose slots are not the result itself (C, of the slots' values)
FINISHED = {"mean": "({c} > 0.0f ? {s} / {c} : NAPKIN_NAN)",
            "var": "({n} > 0.0f ? {q} / {n} : NAPKIN_NAN)",
            "logsumexp": "({m} == NAPKIN_INF ? NAPKIN_INF : logf({s}) + napkin_shift({m}))"}


def finished(kind: str, v: dict) -> str:
    """The reduction's value from its state's slots (`v`: slot -> C expression), for the
    kinds whose result is not the running value itself (sum, max, min: slot s)."""
    return FINISHED[kind].format(**v) if kind in FINISHED else v["s"]


def merge(lw, st) -> None:
    """Butterfly merge of the `ways` lanes' states (all lanes run it: after the chunk loop),
    within each warp; a split over several warps then merges the warps' states through
    shared memory with the same step (codegen/across_warps.py)."""
    b, w = lw.b, lw.ways
    width = across_warps.width(w)

    def shfl(v, ctype="float"):
        return b.value(ctype, f"__shfl_xor_sync(0xffffffffu, {v}, off, {width})")

    b.open()
    merge_step(b, st, shfl)
    b.emit(P.For("off", str(width // 2), "off > 0", "off /= 2", b.close()))
    if st.kind == "pair":
        cells = [(v, "float", 0) for v in (st.rows["m"], st.rows["s"])] + \
            [(p.arrays["o"], "float", st.extent) for p in [st] + st.peers]
    else:
        cells = [(v, SLOT_CTYPE.get(slot, "float"), st.extent) for slot, v in st.arrays.items()]
    across_warps.merge(lw, w, cells, lambda other: merge_step(b, st, other))


def merge_step(b, st, shfl) -> None:
    """Merge into the state `st` the one `shfl(lvalue, ctype)` reads of each of its variables
    (another lane's, another warp's)."""
    if st.kind == "pair":
        m, l = st.rows["m"], st.rows["s"]     # once per row; each point's o with them
        mo, lo = shfl(m), shfl(l)
        mm = b.value("float", f"napkin_max({m}, {mo})")
        sh = b.value("float", f"napkin_shift({mm})")
        sa = b.value("float", cexpr.shifted_exp(f"{m} - {sh}"))
        sb = b.value("float", cexpr.shifted_exp(f"{mo} - {sh}"))
        b.emit(P.Set(l, f"{l} * {sa} + {lo} * {sb}"))
        b.emit(P.Set(m, mm))
        for o in [st.arrays["o"]] + [peer.arrays["o"] for peer in st.peers]:
            b.loop("z", "0", str(st.extent), "1", lambda o=o: b.emit(
                P.Set(f"{o}[z]", f"{o}[z] * {sa} + {shfl(f'{o}[z]')} * {sb}")))
        return
    b.loop("z", "0", str(st.extent), "1", lambda: merge_one(
        b, st.kind, {slot: f"{var}[z]" for slot, var in st.arrays.items()}, shfl))


def merge_one(b, kind: str, v: dict, shfl) -> None:
    """Merge into a `kind` state's slots (`v`: slot -> C lvalue) the state `shfl` reads of
    each (another lane's)."""
    o = {slot: shfl(lv, SLOT_CTYPE.get(slot, "float")) for slot, lv in v.items()}
    if kind in ("sum", "mean", "contract"):
        for slot in v:
            b.emit(P.Set(v[slot], f"{v[slot]} + {o[slot]}"))
    elif kind in ("max", "min"):
        b.emit(P.Set(v["s"], f"napkin_{kind}({v['s']}, {o['s']})"))
    elif kind in ir.INDEX_REDUCTIONS:
        b.emit(P.Call(f"napkin_{kind}_fold", (v["s"], v["i"], o["s"], o["i"])))
    elif kind == "var":   # Chan et al.
        n2 = b.value("float", f"{v['n']} + {o['n']}")
        safe = b.value("float", f"({n2} > 0.0f ? {n2} : 1.0f)")
        d = b.value("float", f"{o['m']} - {v['m']}")
        b.emit(P.Set(v["q"], f"{v['q']} + {o['q']} + {d} * {d} * ({v['n']} * {o['n']} / {safe})"))
        b.emit(P.Set(v["m"], f"{v['m']} + {d} * ({o['n']} / {safe})"))
        b.emit(P.Set(v["n"], n2))
    else:                    # running max and rescaled sum
        mm = b.value("float", f"napkin_max({v['m']}, {o['m']})")
        sh = b.value("float", f"napkin_shift({mm})")
        b.emit(P.Set(v["s"], f"{v['s']} * {cexpr.shifted_exp(v['m'] + ' - ' + sh)} + "
                     f"{o['s']} * {cexpr.shifted_exp(o['m'] + ' - ' + sh)}"))
        b.emit(P.Set(v["m"], mm))


def merge_warps(lw, lanes: int, kind: str, state: dict, in_scan: bool = False) -> None:
    """A split over several warps: their `kind` states (`state`: slot -> variable, each warp's
    lanes merged by shuffles) merged through shared memory by merge_one (across_warps.py);
    nothing within a warp. Not inside a scan's prefix loop, whose trips differ between the
    block's threads: the warps merge after a barrier every thread must reach (N0604)."""
    if lanes <= across_warps.WARP:
        return
    if in_scan:
        raise error("N0604", f"a reduction over {lanes} lanes inside a scan's prefix loop: "
                    "the warps of a split merge after a barrier, which every thread of "
                    "the block must reach", help="split the axis over at most 32 lanes")
    cells = [(v, SLOT_CTYPE.get(slot, "float"), 0) for slot, v in state.items()]
    across_warps.merge(lw, lanes, cells, lambda other: merge_one(lw.b, kind, state, other))
