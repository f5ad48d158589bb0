"""One kernel of a plan as a kernel program: threads, blocks, chunks, passes, accumulators.

The block covers a tile of the grouped (woven) axes; each thread a small tile of it (unrolled
points), and with a split, a share of one reduced axis walked with stride `w` by `w` adjacent
lanes that merge their partial states by warp shuffles. Blocks loop grid-stride over all tiles,
so any batch size fits the grid. When the plan streams an axis, each pass walks it chunk by
chunk: the block stages every streamed input's chunk in shared memory (coalesced, tails
zero-filled, barriers around; `staging.py`), then each thread folds the chunk's positions into
its accumulators (online softmax: running max, running sum, rescaled output); after the pass
the lanes merge and the states finish. Stores are masked to the points inside the arrays.
"""

from __future__ import annotations

import itertools

from ..compiler import ir
from ..compiler.pitch import of as pitch_values
from ..compiler.schedule import SIMT
from . import accum, cexpr, held, masks, runs, staging
from . import program as P
from .builder import Builder, Ix
from .indexing import Layout, pitch, tile_count, tiles_along
from .lane_walks import LaneWalks
from .registers import Registers
from .scalar import Emitter


class KernelLowering(Registers, LaneWalks):
    grid_origins = True     # org_i from the block index (_origins): a tile inside the array

    def __init__(self, plan, kp, names: dict, sizes: dict[str, str], index_type: str):
        self.plan, self.kp = plan, kp
        self.g = plan.graph
        self.k = kp.kernel
        self.model = kp.model
        self.online = kp.model.online     # reductions folded in one loop (Model.online)
        self.st = kp.model.streaming
        self.names = names            # node -> (param name, storage dtype) of global arrays
        self.params = sizes           # axis -> its size parameter or constant (host formulas)
        self.sizes = sizes            # axis -> C expression of its size
        if index_type == "int" and kp.schedule.engine == SIMT:
            # every index fits 32 bits (index_width.py): a CUDA-core kernel reads its `long
            # long` size parameters as int, so no offset, compare or bound is 64-bit
            self.sizes = {a: s if s.isdigit() else f"((int)({s}))" for a, s in sizes.items()}
        self.itype = index_type
        self.b = Builder()
        self.emitter = Emitter(self.b, self.g, self)
        self.loads = set(self.k.loads)
        self.staging = set(kp.schedule.staged)   # loads the block copies to shared memory
        self.woven = self._order(self.model.woven)
        sched = kp.schedule           # compiler/schedule.py: every decision, checked once
        self.tile = {a: sched.block_tile()[a] for a in self.woven}
        self.ttile = {a: sched.thread_tile()[a] for a in self.woven}
        self.split = sched.split
        self.ways = self.split[1] if self.split else 1
        self.tcount = {a: -(-self.tile[a] // self.ttile[a]) for a in self.woven}
        self.threads = sched.threads
        self.registered_values: dict = {}    # Registers: finished reductions' values,
        self.stats: dict = {}                # and streamed softmaxes' statistics
        self.staged: dict[int, tuple] = {}
        self.smem: list[P.SharedBuffer] = []
        self.smem_terms: list[tuple] = []
        self.in_chunk = False
        self.loop_guards: list = []   # in-range conditions of the split loops around a store
        self.views = 0                # > 0 while the emitter evaluates inside a renaming view
        self.serial = 0               # > 0 inside a loop the lanes share with ragged trips
        self.lane_at: list[str] = []  # C names of the positions lanes stand at in a uniform walk
        self.lane_read: set[str] = set()   # positions read at them (gathers: scalar._gather)
        # streamed reductions: their values come from accumulators, never recomputed
        self.stops = {n for n, _ in self.st.reducers} | {n for n, _ in self.st.pairs} | \
            {n for n, _ in self.st.stats}
        self.smem_prefix = "sm"       # names of the staged buffers
        self.coherent: set[int] = set()   # read through L2 (another block wrote them: tail.py)
        self.tail = None              # a split's merge after each block tile (tail.py)
        self.held: dict[tuple, str] = {}  # values held across the streamed loop (held.py)
        self.pass_loads: frozenset = frozenset()   # streamed loads this pass stages a chunk
        self.shifted = False          # a pass's chunks start past 0 or may be skipped

    def _order(self, woven) -> list[str]:
        """Woven axes, the contiguous axis of the first store last (fastest across threads)."""
        layout = ir.type_of(self.g, self.k.stores[0]).axes if self.k.stores else ()
        return sorted(woven, key=lambda a: (layout.index(a) if a in layout else -1, a))

    # -- context for the emitter ----------------------------------------------------------
    def size(self, axis: str) -> str:
        return self.sizes[axis]

    def walk(self, axis: str) -> tuple[str, str]:
        """Lanes share the split axis, except in a loop they already share (ragged trips)."""
        if self.split and self.split[0] == axis and not self.serial:
            return "lane", str(self.ways)
        return "0", "1"

    def shares(self, axis: str) -> bool:    # (a thread's register arrays hold its share)
        return bool(self.split) and self.split[0] == axis and self.ways > 1

    def lanes_over(self, axes) -> int:
        return self.ways if self.split and self.split[0] in axes and not self.serial else 1

    def load(self, n: int, scope: dict[str, Ix]) -> str:
        """From the registers holding it (held.py), its staged tile, or (inside a view, or not
        staged) from global memory. A streamed value read at a position is named once there,
        for every point of the thread (held.py); in a chunk of several points a thread, a
        staged streamed value and one read from global memory are named once a point (the
        latter's index is clamped: read unconditionally, not a predicated LDG in each select
        reading it: cross_entropy split over v, 2 a value)."""
        param, dtype = self.names[n]
        axes = ir.type_of(self.g, n).axes
        load = cexpr.LOAD[ir.kind_of_dtype(dtype)]
        if not self.views and self.held:
            found = self.held.get(held.key(n, axes, scope))
            if found is not None:
                return found
        streamed = self.st.axis in axes      # (its chunk staged in this pass only)
        once = self.in_chunk and len(self.points) > 1
        if n in self.staged and not self.views and \
                (not streamed or (self.in_chunk and n in self.pass_loads)):
            buf, layout = self.staged[n]
            value = self._as_kind(n, dtype, f"{load}({buf}[{layout.offset(scope, local=True)}])")
        else:
            at = self.global_at(n, self.global_layout(n, axes).offset(scope))
            value, streamed = self._as_kind(n, dtype, f"{load}({at})"), True
        if once and streamed:
            ctype = cexpr.CKIND[ir.kind_of_dtype(ir.type_of(self.g, n).dtype)]
            return self.b.value(ctype, value, "ld")
        return value

    def global_layout(self, n: int, axes=None) -> Layout:
        """Offsets into global array n (over `axes`: its own where None), its rows at the
        pitch the plan gave it (compiler/pitch.py)."""
        axes = ir.type_of(self.g, n).axes if axes is None else axes
        return Layout(axes, self.sizes, self.itype, pitch=self.row_pitch(n))

    def row_pitch(self, n: int) -> str | None:
        """Global array n's row pitch (C), None where its rows are dense (pitch.py)."""
        axes = ir.type_of(self.g, n).axes
        return pitch(self.sizes[axes[-1]], pitch_values(self.model, n)) if axes else None

    def global_at(self, n: int, index: str) -> str:
        """The element of global array n at `index`, as a read."""
        param, _ = self.names[n]
        return f"__ldcg(&{param}[{index}])" if n in self.coherent else f"{param}[{index}]"

    def _as_kind(self, n: int, dtype: str, value: str) -> str:
        """An integer result an earlier kernel stored in a float output (`out E: f16`) is read
        back as the integer the IR computes with (the store was of a whole number)."""
        if ir.kind_of_dtype(ir.type_of(self.g, n).dtype) == "int" and \
                ir.kind_of_dtype(dtype) == "float":
            return f"((long long)rintf({value}))"
        return value

    # -- the kernel ---------------------------------------------------------------------
    def build(self, name: str) -> P.KernelProgram:
        b = self.b
        b.emit(P.Decl("const int", "tid", "(int)threadIdx.x"))
        b.emit(P.Decl("const int", "lane", f"tid % {self.ways}"))
        rest = "tid / " + str(self.ways)
        for a in reversed(self.woven):
            c = self._axis_var("tc", a)
            b.emit(P.Decl("const int", c, f"({rest}) % {self.tcount[a]}"))
            rest = f"({rest}) / {self.tcount[a]}"
        b.emit(P.Decl("const bool", "tvalid", f"tid < {self.kp.schedule.lanes}"))
        return self._grid(name)

    def _grid(self, name: str) -> P.KernelProgram:
        """Blocks walk every tile of the woven axes grid-stride (any batch fits the grid)."""
        b = self.b
        bt = self.kp.schedule.blocks      # (index_width.block_type)
        nblocks = tile_count([tiles_along(self.params[a], self.tile[a], bt) for a in self.woven], bt)
        b.emit(P.Decl(f"const {bt}", "nblocks", nblocks))

        def tile():
            self._block_body()
            if self.tail is not None:
                self.tail.emit(self)
        b.loop("blk", f"({bt})blockIdx.x", "nblocks", f"({bt})gridDim.x", tile, ctype=bt)
        return P.KernelProgram(name, (), self.threads, tuple(
            (self.params[a], self.tile[a]) for a in self.woven), tuple(self.smem_terms),
            tuple(self.smem), b.statements, self.itype, self.k.name)

    def _axis_var(self, prefix: str, axis: str) -> str:
        return f"{prefix}_{self.woven.index(axis)}"

    def _origins(self) -> None:
        """org_i: where this block's tile starts along each woven axis (the last fastest); an
        axis the schedule reverses (heaviest blocks first) varies slowest, tiles last to first."""
        rest = "blk"
        back = self.kp.schedule.reversed
        for a in reversed([a for a in self.woven if a in back] +
                          [a for a in self.woven if a not in back]):
            nb = tiles_along(self.params[a], self.tile[a], self.kp.schedule.blocks)
            o = self._axis_var("org", a)
            index = f"(({rest}) % {nb})" if a not in back else f"({nb} - 1 - ({rest}) % {nb})"
            self.b.emit(P.Decl(f"const {self.itype}", o,
                               f"({self.itype}){index} * {self.tile[a]}"))
            rest = f"({rest}) / {nb}"

    def _block_body(self) -> None:
        b = self.b
        self._origins()
        for a in self.woven:
            base = self._axis_var("base", a)
            b.emit(P.Decl(f"const {self.itype}", base,
                          f"{self._axis_var('org', a)} + {self._axis_var('tc', a)} * {self.ttile[a]}"))
        self.points = self._points()
        invariant = sorted(n for n in self.staging
                           if self.st.axis is None or self.st.axis not in ir.type_of(self.g, n).axes)
        if invariant:
            b.emit(P.Barrier())
            for n in invariant:
                staging.stage(self, n)
            b.emit(P.Barrier())
        if self.st.axis is None:
            self._epilogue()
            return
        held.hold(self)
        for p in range(self.st.passes):
            self._pass(p)
        self._epilogue()

    def _points(self) -> list[dict]:
        """The thread's tile points: index expressions (clamped inside the arrays for reading)
        and whether each point is in range (for stores)."""
        ranges = [range(self.ttile[a]) for a in self.woven]
        return [self.point(dict(zip(self.woven, combo))) for combo in itertools.product(*ranges)]

    def point(self, at: dict) -> dict:
        """The thread's point `at[a]` positions past its base along each woven axis (a number
        or a C expression): its clamped index expressions and its in-range test."""
        scope, checks = {}, ["tvalid"]
        for a in self.woven:
            raw = f"({self._axis_var('base', a)} + {at[a]})"
            top = f"({self.itype})({self.sizes[a]} - 1)"
            scope[a] = Ix(f"({raw} < {top} ? {raw} : {top})")
            within = f"{self._axis_var('tc', a)} * {self.ttile[a]} + {at[a]}"
            checks.append(f"({within} < {self.tile[a]})")
            checks.append(f"({raw} < {self.sizes[a]})")
        return {"scope": scope, "valid": " && ".join(checks), "at": at}

    # -- streaming passes ------------------------------------------------------------------
    def _pass(self, p: int) -> None:
        b, st, r = self.b, self.st, self.st.axis
        self.compute_held(p)      # (what the plan holds from this pass on: Model.held_values)
        reducers = [n for n, q in st.reducers if q == p]
        stats = [n for n, q in st.stats if q == p]
        states, leaders = {}, {}     # (a paired softmax's points of one row share m, l)
        for pt_i, pt in enumerate(self.points):
            for n in reducers + stats:
                states[(n, pt_i)] = accum.declare(self, n, pt, n in stats, leaders)
        chunk = self.kp.schedule.stream[1]
        split_r = self.split and self.split[0] == r
        loads = sorted(n for n in st.loads[p] if n in self.staging)
        self.pass_loads = frozenset(loads)     # (another pass's chunk is out of scope here)
        kept = [n for n in loads if self.kp.schedule.resident
                and any(n in st.loads[q] for q in range(p))]

        kinds = {n: accum.kind_of(self, n, n in stats) for n in reducers + stats}
        per_chunk_stores = any(n in st.per_chunk[p] and r in ir.type_of(self.g, n).axes
                               for n in self.k.stores)
        span = None if per_chunk_stores else masks.data_span(
            self, reducers + stats, kinds, self.threads, r,
            [a for a in self.woven if self.tile[a] == 1])
        known = {"#data": span.bounds} if span else {}
        skip = None if per_chunk_stores else masks.skip_test(self, reducers + stats, kinds,
                                                                 dict(self._box(r), **known))
        if span is not None or skip is not None:   # (staged_once excludes masks: a chunk
            self.shifted = True                      # moved or skipped is not kept)
        if self.shifted:
            kept = []

        def chunk_body():
            left = f"({self.itype})({self.sizes[r]}) - c0"
            b.emit(P.Decl("const int", "clen", f"(int)({left} < {chunk} ? {left} : {chunk})"))
            if skip is not None:   # the mask hides this whole chunk from the block: skip it
                b.emit(P.Continue(skip))
            fresh = [n for n in loads if n not in kept]
            for n in kept:        # staged by an earlier pass, its one chunk the whole axis
                staging.pointer(self, n)
            if kept:              # (restaged where a launch's axis is longer than planned)
                b.emit(P.If(f"({self.itype})({self.sizes[r]}) > {chunk}",
                            self._scoped(lambda: self._copy(kept))))
            if fresh:      # (nothing staged a chunk, as paged attention's gathers: no barrier)
                self._copy(fresh)
            start, step = ("lane", str(self.ways)) if split_r else ("0", "1")
            fold = self.kp.schedule.fold
            if fold > 1:      # groups of `fold` keys, then the chunk's last keys one by one
                whole = f"clen / {fold} * {fold}"
                b.loop("xl", "0", whole, str(fold), lambda: position_body(fold))
                b.loop("xl", whole, "clen", "1", lambda: position_body(1))
            else:
                b.loop("xl", start, "clen", step, lambda: position_body(1))

        def position_body(fold):
            """The keys xg .. xg + fold - 1 (Schedule.fold: a group the online softmax folds
            at once, compiler/fold.py), for every point of the thread."""
            b.emit(P.Decl(f"const {self.itype}", "xg", "c0 + xl"))
            self.in_chunk, self.serial = True, self.serial + bool(split_r)
            at = [Ix("xg")] + [Ix(f"(xg + {u})") for u in range(1, fold)]
            for pt_i, pt in enumerate(self.points):
                scopes = [{**pt["scope"], r: x} for x in at]
                for n in reducers + stats:
                    self.line(n)
                    accum.update(self, n, states[(n, pt_i)], scopes, n in stats)
                for n in self.k.stores:
                    if n in st.per_chunk[p] and r in ir.type_of(self.g, n).axes:
                        for scope in scopes:
                            self._store(n, scope, pt)
            self.in_chunk, self.serial = False, self.serial - bool(split_r)

        first, end = (span.first, span.end) if span else (f"({self.itype})0",
                                                          f"({self.itype})({self.sizes[r]})")
        b.loop("c0", first, end, str(chunk), chunk_body, ctype=self.itype)
        for pt_i, pt in enumerate(self.points):
            for n in reducers + stats:   # lanes that split any axis the reducer reduces merge
                merge = bool(self.split) and self.split[0] in ir.op(self.g, n).axes
                accum.finish(self, n, states[(n, pt_i)], pt, merge)

    def _copy(self, loads) -> None:
        """Stage each load's chunk between barriers (last chunk's readers before, copies after)."""
        self.b.emit(P.Barrier())
        for n in loads:
            staging.stage(self, n)
        self.b.emit(P.Barrier())

    def _scoped(self, fn) -> tuple:
        self.b.open()
        fn()
        return self.b.close()

    def _box(self, r: str, start: str = "c0", length: str = "clen") -> dict:
        """Index ranges the block covers (inclusive), the chunk along r (the current one, or
        the one at `start` of `length`), sizes."""
        box = {"#size": self.size}
        for a in self.g.graph["axes"]:
            if a in self.tile:
                org = self._axis_var("org", a)
                hi = f"{org} + {self.tile[a] - 1}"
                top = f"({self.sizes[a]} - 1)"
                box[a] = (org, f"({hi} < {top} ? {hi} : {top})")
            elif a == r:
                box[a] = (start, f"{start} + {length} - 1")
            else:
                box[a] = ("0", f"({self.sizes[a]} - 1)")
        return box

    # -- epilogue and stores ---------------------------------------------------------------
    def _epilogue(self) -> None:
        r = self.st.axis
        if self.kp.schedule.runs:         # (no stream: compiler/row_runs.py)
            for n, width in self.kp.schedule.runs:
                runs.copy(self, n, width)
            return
        for pt in self.points:
            for n in self.k.stores:
                if r is None or r not in ir.type_of(self.g, n).axes:
                    self._store(n, dict(pt["scope"]), pt)

    def _store(self, n: int, scope: dict, pt: dict) -> None:
        """Write node n at the point (looping over its axes beyond the thread's scope)."""
        b = self.b
        axes = ir.type_of(self.g, n).axes
        free = [a for a in axes if a not in scope]
        param, dtype = self.names[n]
        layout = self.global_layout(n, axes)

        # lanes splitting an axis the array lacks all hold its merged value: one writes it
        valid = pt["valid"] + (" && lane == 0" if self.split and self.split[0] not in axes else "")

        kind = ir.kind_of_dtype(dtype)

        def write(s):
            v = self.emitter.value(n, s)
            if kind == "float" and self.emitter.kind(n) == "int":
                v = f"((float)({v}))"
            cond = " && ".join([valid] + [g for g in self.loop_guards if g])
            b.emit(P.If(cond, (P.Store(param, layout.offset(s), v, cexpr.CTYPE[dtype],
                                       cexpr.STORE[kind]),)))

        self.line(n)
        if free:
            self.emitter._hoist([n], free, scope)
        held.loops(self, free, scope, write, (n,))

    def line(self, n: int) -> None:
        """`#line` back to the diagram line of node n (its equation)."""
        span = self.g.nodes[n].get("span")
        if span is not None:
            self.b.emit(P.Line(span.line))

    def paired_softmax(self, n: int):
        return next((s for s, c in self.st.pairs if c == n), None)
