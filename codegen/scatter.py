"""A scatter-add (compiler/scatter.py, engine SCATTER) as two kernel programs.

The scatter: one thread per position of the site's axes (T, then the value's other axes K,
the innermost across a block's threads), grid-stride over the blocks:

    if (the position is inside every axis && every guard holds) {
      ix = index(position)                       // one per matched output axis
      if (0 <= ix && ix < size(v)) atomicAdd(&scratch[row ix, position's K], value(position));
    }

An index outside its axis adds nothing (the dense masked sum's `where` never matches there);
a value read at the matched row (a factor with the axis v) is read at `ix`, inside that test.
The scratch is f32 (`Program.zeroed`: zero before the first launch). The conversion kernel
then writes each element in the output's dtype and sets the scratch back to zero, ready for
the next launch (as a last-block merge's counters are, codegen/tail.py).
"""

from __future__ import annotations

from ..compiler import ir
from ..compiler.pitch import of as pitch_values
from . import cexpr
from . import program as P
from .builder import Builder, Ix
from .indexing import Layout, pitch
from .kernel import KernelLowering
from .scalar import Emitter

ITYPE = "long long"


def scratch_name(kp, store: int | None = None) -> str:
    """The scratch array's name in Program.buffers (no diagram name has a %): a scatter's,
    or that of a chain's product over its rows stored at node `store` (chain.Across)."""
    return f"%scatter_{kp.kernel.name}" if store is None else f"%added_{kp.kernel.name}_{store}"


class _Context:
    """What the scalar emitter asks of a kernel: every read from global memory, no staged
    tiles, no accumulators, no lanes sharing an axis."""

    def __init__(self, g, names: dict, sizes: dict, loads, model=None):
        self.g, self.names, self.sizes, self.model = g, names, sizes, model
        self.loads, self.stops = set(loads), set()
        self.views = self.serial = 0
        self.coherent: set[int] = set()
        self.online: frozenset = frozenset()    # (no row is reduced here)

    def size(self, axis: str) -> str:
        return self.sizes[axis]

    def walk(self, axis: str):
        return "0", "1"

    def shares(self, axis: str) -> bool:
        return False

    def lanes_over(self, axes) -> int:
        return 1

    def varies(self, expr: str) -> bool:
        return False

    def varying(self, name: str) -> None:
        pass

    def pinned(self, axes, row) -> bool:
        return False

    def unrolled(self, axis: str):
        return None

    def registered(self, n, scope):
        return None

    def softmax_stats(self, n, row):
        return None

    def load(self, n: int, scope) -> str:
        _, dtype = self.names[n]
        axes = ir.type_of(self.g, n).axes
        at = _layout(self.model, n, axes, self.sizes).offset(scope)
        value = f"{cexpr.LOAD[ir.kind_of_dtype(dtype)]}({KernelLowering.global_at(self, n, at)})"
        return KernelLowering._as_kind(self, n, dtype, value)


def _positions(b: Builder, axes, tiles: dict, sizes: dict, lanes: int, body) -> tuple:
    """Blocks grid-stride over the tiles of `axes` (the last fastest), one position per
    thread; body(scope) emits under the test that the position is inside every axis."""
    nb = {a: f"(((long long)({sizes[a]}) + {tiles[a] - 1}) / {tiles[a]})" for a in axes}
    b.emit(P.Decl("const int", "tid", "(int)threadIdx.x"))
    b.emit(P.Decl("const long long", "nblocks", " * ".join(nb[a] for a in axes) or "1LL"))

    def block():
        rest, within, scope, inside = "blk", "tid", {}, [f"tid < {lanes}"]
        for i, a in reversed(list(enumerate(axes))):
            b.emit(P.Decl(f"const {ITYPE}", f"org_{i}", f"(({rest}) % {nb[a]}) * {tiles[a]}"))
            b.emit(P.Decl(f"const {ITYPE}", f"base_{i}",
                          f"org_{i} + ({within}) % {tiles[a]}"))
            rest, within = f"({rest}) / {nb[a]}", f"({within}) / {tiles[a]}"
            scope[a] = Ix(f"base_{i}")
            inside.append(f"base_{i} < {sizes[a]}")
        b.open()
        body(scope)
        b.emit(P.If(" && ".join(inside), b.close()))
    b.loop("blk", "(long long)blockIdx.x", "nblocks", "(long long)gridDim.x", block,
           ctype="long long")
    return tuple((sizes[a], tiles[a]) for a in axes)


def programs(plan, kp, names: dict, sizes: dict, scratch: str, out: str,
             size_params) -> tuple[P.KernelProgram, P.KernelProgram]:
    """(the scatter, the conversion) of scatter kernel kp; `names`: node -> (param, dtype)
    of its loads and its store, `scratch`/`out`: the scratch's and the store's params."""
    g, site, sched = plan.graph, kp.schedule.scatter, kp.schedule
    tiles = dict(sched.tile)
    b = Builder()
    ctx = _Context(g, names, sizes, kp.kernel.loads, kp.model)
    em = Emitter(b, g, ctx)
    store_axes = ir.type_of(g, site.store).axes

    def scatter(scope):
        checks = [em.value(c, scope) for c in site.guards]
        rows = {}
        for v, idx in site.matched:
            ix = b.value("long long", f"(long long)({em.value(idx, scope)})", "ix")
            rows[v] = Ix(ix)
            checks.append(f"{ix} >= 0 && {ix} < (long long)({sizes[v]})")
        b.open()
        at = {**scope, **rows}
        value = " * ".join(em.number(f, at) for f in site.factors)
        offset = Layout(store_axes, sizes, ITYPE).offset(at)
        b.emit(P.Call("atomicAdd", (f"&{scratch}[{offset}]", value)))
        b.emit(P.If(" && ".join(f"({c})" for c in checks), b.close()))
    blocks = _positions(b, site.axes, tiles, sizes, sched.lanes, scatter)
    params = [P.Param(p, f"const {cexpr.CTYPE[d]}* __restrict__", "load", _array(g, n),
                      ir.type_of(g, n).axes) for n, (p, d) in names.items()
              if n in kp.kernel.loads]
    sizes_p = [P.Param(name, "long long", "size", rep) for rep, name in size_params.items()]
    scratch_p = P.Param(scratch, "float* __restrict__", "store", scratch_name(kp), store_axes)
    first = P.KernelProgram(f"napkin_{kp.kernel.name}", tuple(params + [scratch_p] + sizes_p),
                            sched.threads, blocks, (), (), b.statements, ITYPE, kp.kernel.name)

    _, dtype = names[site.store]
    return first, conversion(g, kp, site.store, dtype, sched.finish, sizes, scratch_p, out,
                             sizes_p)


def conversion(g, kp, store: int, dtype: str, tiles, sizes: dict, scratch_p: P.Param,
               out: str, sizes_p, suffix: str = "f") -> P.KernelProgram:
    """The kernel converting an f32 scratch of sums (a scatter's, or a chain's products
    over its rows) into `store`'s array of `dtype` (param `out`), setting the scratch back to
    zero for the next launch; `tiles`: its block tile over the store's axes (Schedule.finish)."""
    b = Builder()
    scratch = scratch_p.name
    store_axes = ir.type_of(g, store).axes
    finish_tiles = dict(tiles)
    lanes = 1
    for t in finish_tiles.values():
        lanes *= t

    def convert(scope):
        off = b.value(ITYPE, Layout(store_axes, sizes, ITYPE).offset(scope), "ix")
        at = _layout(kp.model, store, store_axes, sizes)    # (the scratch's rows are dense)
        to = off if at.pitch is None else b.value(ITYPE, at.offset(scope), "ix")
        b.emit(P.Store(out, to, f"{scratch}[{off}]", cexpr.CTYPE[dtype],
                       cexpr.STORE["float"]))
        b.emit(P.Set(f"{scratch}[{off}]", "0.0f"))
    blocks = _positions(b, store_axes, finish_tiles, sizes, lanes, convert)
    out_p = P.Param(out, f"{cexpr.CTYPE[dtype]}* __restrict__", "store", _array(g, store),
                    store_axes)
    return P.KernelProgram(f"napkin_{kp.kernel.name}{suffix}", (scratch_p, out_p, *sizes_p),
                           -(-lanes // 32) * 32, blocks, (), (), b.statements, ITYPE,
                           kp.kernel.name)


def _layout(model, n: int, axes, sizes: dict) -> Layout:
    """Offsets into global array n, its rows at the plan's pitch (compiler/pitch.py)."""
    values = pitch_values(model, n) if model is not None and axes else 0
    return Layout(axes, sizes, ITYPE, pitch=pitch(sizes[axes[-1]], values) if values else None)


def _array(g, n: int) -> str:
    return getattr(ir.op(g, n), "name", f"%{n}")
