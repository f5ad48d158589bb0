"""What a kernel holds and moves, independent of tile sizes: the input to the cost model.

For a kernel and the axis it streams (if any), a `Model` lists every array the kernel
touches with its axes, its bytes per value and its role:

- load:        read from global memory (passes: how many times it streams in)
- store:       written to global memory
- value:       an intermediate computed in the kernel (resident per chunk)
- accumulator: the running state of a reduction (one value per state slot)

and the arithmetic of each op (FLOPs = product of the op's axis sizes times a per-element
cost, on the engine that runs it). The cost model (`cost.py`) turns a model and tile sizes
into M, H and time per memory level."""

from __future__ import annotations

from dataclasses import dataclass

from . import bias_fold, gather_reads, held_values, ir, lanes, pitch, register_arrays, score_states
from .canonical import through
from .graph import DiGraph, ancestors
from .kernels import FusedKernel, is_free, relabelled
from .loop_reads import readers
from .operand_dtypes import operand_dtype
from .passes import Streaming, stream
from .row_runs import COPIED, RUN_BYTES
from .split_info import infos
from .arrays import BYTES, VIEWS, array_name, storage_dtype   # (the model's own vocabulary)

# FLOPs per element for ops other than contractions (which cost 2 per product term).
ELEMENT_FLOPS = {"exp": 4, "exp2": 4, "log": 4, "log2": 4, "sqrt": 4, "rsqrt": 4, "tanh": 8,
                 "sigmoid": 8, "gelu": 12, "silu": 8, "div": 4}


@dataclass(frozen=True)
class Array:
    node: int
    name: str                 # the diagram's name where it has one, else "%n"
    role: str                 # load | store | value | accumulator
    axes: tuple[str, ...]
    bytes: int                # per value (per state slot for accumulators)
    slots: int = 1            # accumulator state slots (online softmax: m, l + the output)
    passes: int = 1           # loads: how many passes stream it in
    streamed: bool = False    # has the streamed axis (resident one chunk at a time)
    used_over: tuple[str, ...] = ()   # loads: the axes the ops reading it iterate over (a
                                      # load is read again only along a walk of one of these)
    unstaged: bool = False    # loads read at other positions than the block's tile (a view
                              # or a gather): a CUDA-core block reads them from global memory
                              # (schedule._staged), so they hold no shared memory there
    table: tuple = ()         # a gather of a load: its table's axes, positions (gather_reads)

    @property
    def invariant(self) -> bool:
        """A load the streaming loop does not touch: loaded once, kept resident across it."""
        return self.role == "load" and not self.streamed


@dataclass(frozen=True)
class Work:
    node: int
    axes: tuple[str, ...]     # all axes the op iterates over
    flops_per_point: int
    engine: str               # "contraction" (may use tensor cores) or "simt"
    dtype: str                # operand storage dtype, for the engine's rate
    times: int = 1            # recomputed in several passes
    op: str = ""              # what it is, for the instruction table (compiler/issue.py):
                              # contract, softmax, a Map's fn, a Reduce's fn
    summand: str = ""         # a Reduce's: the fn of the Map the kernel computes its operand by
    prefix: tuple[str, ...] = ()   # a scan's axis: each point folds the positions up to it
                                   # along it, (size + 1) / 2 of them on average (_work)


@dataclass(frozen=True)
class Model:
    kernel: FusedKernel
    streaming: Streaming
    arrays: tuple[Array, ...]
    work: tuple[Work, ...]
    woven: tuple[str, ...]
    reduced: tuple[str, ...]
    axes: tuple[str, ...]
    mask: tuple | None = None   # the condition hiding whole chunks from the streamed
                                # reductions (masking.py's expression), None: no such mask
    mask_nodes: frozenset = frozenset()   # attention: the ops of its softmax's mask condition
                                          # (evaluated only where the mask cuts a chunk)
    relabelled: frozenset = frozenset()   # axes a view reads at another's position
                                          # (kernels.relabelled: never split over lanes)
    scale: int | None = None    # attention: its softmax's positive scale `Q K / sqrt(d)`
                                # (masking.softmax_scale), in the exponent on tensor cores
    lse: tuple[int, ...] = ()   # attention: logsumexp[x], max[x] or sum[x] of exp of its
                                # softmax's scores, the softmax's final state per row
                                # (row_state.row_statistics)
    lse_ops: frozenset = frozenset()    # they and the ops only they read (row_state.state_ops)
    alone: int | None = None    # the scores S whose row statistics (`lse`) the kernel streams
                                # with no softmax nor P V (row_state.alone): FlashAttention's
                                # state alone on tensor cores
    folded: frozenset = frozenset()  # the scale, a bias's product: in the exponent (bias_fold)
    bias_positions: frozenset = frozenset()  # ALiBi's x - q: a folded product's (bias_fold)
    shared: tuple = ()          # CUDA cores: (reducer, the one whose running max and sum of exp
                                # it reads: itself where it keeps it), score_states.shared
    staged: tuple = ()          # a tensor-core product's operands computed from loads as they
                                # are staged, its reductions beside it (tensorcore.for_site):
                                # (node, its tile's axes, values a lane computes per run: 8 or
                                # 1, the loads it reads, whether it is an operand: rounded, stored)
    direct: frozenset = frozenset()   # ... the loads only those read, from global memory
    extents: tuple = ()         # (axes, pitch.pitched) of every global array the kernel reads or
                                # writes (index_width.py: its offsets' range)
    rows: tuple = ()            # CUDA cores: (store, axis, width) of stores copying a load's
                                # row, in runs where the thread's tile allows (row_runs)
    across: frozenset = frozenset()   # a chain's products over its rows (chain.Across): the
                                # stored arrays every block of rows adds its partial sum into,
                                # with atomics (tensorcore.for_site)
    sums: frozenset = frozenset()     # ... sums of a chain's chunk values (chain_sums.py)
    fixed: frozenset = frozenset()    # axes of sizes the diagram fixes (lanes.py unrolls them)
    gathered: frozenset = frozenset()   # attention on tensor cores: K, V tiles whose rows come
                                # through computed positions (a paged cache: tensorcore._gathered)
    positions: frozenset = frozenset()  # ... and the loads those positions read (the page
                                # table's gathers): read per row in the copies, never staged
    loop_reads: tuple = ()      # CUDA cores: (load, the reductions and softmaxes whose loops
                                # over the row read it, the stores along it) (loop_reads.py)
    online: frozenset = frozenset()   # CUDA cores: the logsumexps and softmaxes whose row
                                # reads a load from global memory (unstaged): their statistics
                                # fold in ONE loop (a running max and rescaled sum); over staged
                                # rows two (max, then the sum of exponentials) read shared memory
    scans: bool = False         # a scan's prefix loop in the kernel (a split stays within
                                # a warp: codegen/lane_merges.merge_warps)
    packed: tuple = ()          # attention on tensor cores: ((its rows' axis, the axes it
                                # packs),) where the fragment rows are packed (packing.py):
                                # the arrays name that one axis, of the axes' sizes' product
    padded: tuple = ()          # tensor cores: ((node, axis, extent),) of the heads padded
                                # in shared memory (headpad.py): a load's tile, a product's
                                # fragments cover `extent` of the axis (M and tensor work)
    summed: int = 1     # tensor cores: a sum's products (sums.py), pipelined one after another
    products: tuple = ()    # tensor cores: (products, distinct A, distinct B) of products each
                            # into accumulators of their own (duals.py), () for one
    held_values: tuple = ()     # CUDA cores: (reduction, pass) held before it (held_values.py)
    whole_walks: frozenset = frozenset()  # ... axes never split over lanes (lanes.whole_walks)
    held_axes: frozenset = frozenset()    # ... axes its per-thread arrays run over (register_arrays)
    pitches: tuple = ()     # (node, values): global arrays with rows padded to a multiple (pitch.py)
    columns: tuple = ()   # tensor cores: row statistics over a product's columns in its epilogue
                          # (row, col, state slots of each, ops per element): column_epilogue


def flash_state(model) -> bool:
    """Whether the kernel's state is an online softmax's running (m, l) over scores it
    computes, which on tensor cores is FlashAttention-2: a softmax paired with P V, or row
    statistics of scores alone (Model.alone: the same kernel without P V)."""
    return bool(model.streaming.pairs) or model.alone is not None


def axis_free(g: DiGraph, k: FusedKernel) -> tuple:
    """What no streamed axis changes in kernel k's model (model_memo keeps it per kernel)."""
    return k.woven(g), k.reduced(g), k.axes(g), copied_rows(g, k), readers(g, k, k.reduced(g))


def kernel_model(g: DiGraph, k: FusedKernel, axis: str | None, shared=None) -> Model:
    """The model of kernel `k` streaming `axis` (None: nothing streams; `shared`: axis_free)."""
    shared = shared or axis_free(g, k)      # (its woven axes: stream's and held's too)
    st = stream(g, k, axis, shared[0])
    arrays: list[Array] = []
    load_passes = {n: sum(n in p for p in st.loads) for n in k.loads}
    members = set(k.nodes)
    for n in k.loads:
        t = ir.type_of(g, n)
        users = [v for v in g.successors(n) if v in members]
        if users and all(isinstance(ir.op(g, v), VIEWS) or _gathers_from(g, v, n) for v in users):
            continue  # only seen through views or gathered: counted there
        streamed = axis is not None and axis in t.axes
        # positions read only by gathers (embedding's tok[t]) are read where used, from
        # global memory, as schedule._staged leaves them: not copied into shared memory
        positions = bool(users) and all(isinstance(ir.op(g, v), ir.Gather) for v in users)
        arrays.append(Array(n, array_name(g, n), "load", t.axes, BYTES[storage_dtype(g, n)],
                            passes=max(1, load_passes[n]) if streamed else 1, streamed=streamed,
                            used_over=_used_over(g, n, members), unstaged=positions))
    reducers = st.reducer_pass()
    kept = score_states.shared(g, st) if axis is not None else {}    # (one running state)
    free: dict = {}       # is_free's answers (the graph does not change while modelled)
    pairs = dict(st.pairs)
    stats = dict(st.stats)
    for n in k.nodes:
        op = ir.op(g, n)
        if is_free(g, n, free) or n in pairs:
            continue
        t = ir.type_of(g, n)
        if isinstance(op, ir.Assign) and through(g, n) != n:
            continue  # a name for a value already counted
        if isinstance(op, VIEWS):
            base = _view_base(g, n)
            seen = [v for v in g.successors(n) if v in members]
            if seen and all(isinstance(ir.op(g, v), VIEWS) or _gathers_from(g, v, n)
                            for v in seen):
                pass  # (seen only through another view, `dV[b s (h*d)]` renamed, or gathered)
            elif base in k.loads:   # the same global array seen along other axes: loaded again
                shown = " ".join(getattr(op, "labels", t.axes))     # (a reshape: its axes)
                arrays.append(Array(n, f"{array_name(g, base)}[{shown}]",
                                    "load", t.axes, BYTES[storage_dtype(g, base)],
                                    streamed=axis is not None and axis in t.axes,
                                    used_over=_used_over(g, n, members), unstaged=True))
            continue
        if isinstance(op, ir.Gather):
            # (from a load, or a view of one: a split's window of `I1[m]`, I1 declared [i])
            base = _view_base(g, ir.operands(g, n)[0])
            if base in k.loads:   # the rows the positions ask for, each read from global memory
                window = next((i for i in infos(g) if n in i.windows), None)  # rows of x
                shown = " ".join(lab or (f"({window.part_axis} {window.share_axis})" if window
                                         else "*") for lab in op.labels)
                arrays.append(Array(n, f"{array_name(g, base)}[{shown}]", "load", t.axes,
                                    BYTES[storage_dtype(g, base)],
                                    streamed=axis is not None and axis in t.axes, unstaged=True,
                                    # a split's window, its load's share: re-read as a load is
                                    used_over=_used_over(g, n, members) if window else (),
                                    table=() if window else gather_reads.table(g, n, base)))
                continue
        streamed = axis is not None and axis in t.axes
        if n in pairs.values():   # online softmax: the rescaled output, and (m, l) per row
            arrays.append(Array(n, array_name(g, n), "accumulator", t.axes, 4))
            soft = next(s for s, c in pairs.items() if c == n)
            rows = tuple(a for a in t.axes if a in ir.type_of(g, soft).axes)
            arrays.append(Array(n, array_name(g, n) + ".stats", "accumulator", rows, 4, slots=2))
        elif n in reducers or (axis is None and _reduces(op)):
            arrays.append(Array(n, array_name(g, n), "accumulator", t.axes, 4,  # (a state
                                slots=0 if kept.get(n, n) != n else 2 if n in kept  # keeper:
                                else _slots(op)))             # m and l, score_states.py)
        else:
            arrays.append(Array(n, array_name(g, n), "value", t.axes, BYTES.get(t.dtype, 4),
                                streamed=streamed))
        if n in stats:
            rows = tuple(a for a in t.axes if a != axis)
            arrays.append(Array(n, array_name(g, n) + ".stats", "accumulator", rows, 4, slots=2))
    for n in k.stores:
        t = ir.type_of(g, n)
        arrays.append(Array(through(g, n), array_name(g, n), "store", t.axes,
                            BYTES[storage_dtype(g, n)],
                            streamed=axis is not None and axis in t.axes))
    times = {n: max(1, sum(n in p for p in st.per_chunk)) for n in k.nodes}
    work = [w for n in k.nodes for w in _work(g, n, times.get(n, 1) if axis else 1, k.loads)]
    from .masking import chunk_mask, condition_nodes, scores_bias, scores_scale, softmax_scale
    from .row_state import alone, row_statistics, scores_of, state_ops
    direct = {a.node for a in arrays if a.unstaged}
    online = frozenset(w.node for w in work if direct and w.op in ("logsumexp", "softmax")
                       and direct & ancestors(g, w.node))
    lse = row_statistics(g, st) if axis is not None else ()
    scores, lse = alone(g, st) or (None, lse)      # (statistics of scores alone: their state)
    held = held_values.held(g, k, st, shared[0])
    woven, reduced, axes, rows, loop_reads = shared
    mask = chunk_mask(g, st, k.loads, k.nodes) if axis is not None else None
    scale = softmax_scale(g, st.pairs[0][0]) if len(st.pairs) == 1 else \
        scores_scale(g, scores) if scores is not None else None
    found = scale is not None and scores_bias(g, scores_of(g, st)) or None
    return Model(k, st, tuple(arrays), tuple(work), woven, reduced, axes, mask,
                 # (evaluated at every score where no chunk mask skips: charged as any op)
                 condition_nodes(g, st, k.loads, k.nodes) if mask is not None else frozenset(),
                 relabelled(g, k, (n for n, _ in st.reducers)),
                 scale, lse, state_ops(g, st, lse), scores, shared=tuple(kept.items()),
                 folded=bias_fold.folded(g, scale, found, axis),
                 bias_positions=bias_fold.positions(g, scale, found, axis),
                 extents=pitch.extents(g, k.loads + k.stores),
                 rows=rows, online=online, loop_reads=loop_reads,
                 fixed=frozenset(a for a, info in g.graph["axes"].items()
                                 if info.size is not None),
                 scans=any(isinstance(ir.op(g, n), ir.Scan) for n in k.nodes),
                 held_values=held, whole_walks=lanes.whole_walks(g, k, st, [n for n, _ in held]),
                 held_axes=register_arrays.held_axes(g, k, st, woven, [n for n, _ in held]),
                 pitches=pitch.kernel_pitches(g, k.loads + k.stores))


def _used_over(g: DiGraph, n: int, members: set) -> tuple[str, ...]:
    """The axes the kernel's ops reading load `n` iterate over (through names): a contraction
    its operands' axes, a reduction its input's, anything else its result's."""
    out: dict = {}
    todo, seen = [n], set()
    while todo:
        m = todo.pop()
        for v in g.successors(m):
            if v not in members or v in seen:
                continue
            seen.add(v)
            op = ir.op(g, v)
            if isinstance(op, ir.Assign):
                todo.append(v)
                continue
            if isinstance(op, ir.Contract):
                axes = [a for x in ir.operands(g, v) for a in ir.type_of(g, x).axes]
            elif isinstance(op, (ir.Reduce, ir.Softmax)):
                axes = list(ir.type_of(g, m).axes)
            else:
                axes = list(ir.type_of(g, v).axes)
            out.update(dict.fromkeys(axes))
    return tuple(out)


def _gathers_from(g: DiGraph, v: int, n: int) -> bool:
    """Whether v gathers from array n (n is its operand 0, not one of its positions)."""
    return isinstance(ir.op(g, v), ir.Gather) and ir.operands(g, v)[0] == n \
        and n not in ir.operands(g, v)[1:]


def _view_base(g: DiGraph, n: int) -> int:
    while isinstance(ir.op(g, n), VIEWS):
        n = ir.operands(g, n)[0]
    return n


def _reduces(op) -> bool:
    return isinstance(op, (ir.Contract, ir.Reduce))


def _slots(op) -> int:
    if isinstance(op, ir.Reduce):
        return {"mean": 2, "var": 3, "logsumexp": 2, "argmax": 2, "argmin": 2}.get(op.fn, 1)
    return 1


def _work(g: DiGraph, n: int, times: int, loads=()) -> list[Work]:
    op = ir.op(g, n)
    args = ir.operands(g, n)
    if isinstance(op, ir.Contract):
        axes = tuple(dict.fromkeys(a for m in args for a in ir.type_of(g, m).axes))
        dtype = operand_dtype(g, args)
        return [Work(n, axes, 2, "contraction", dtype, times, "contract")]
    if isinstance(op, (ir.Reduce, ir.Softmax)):
        per = 5 if isinstance(op, ir.Softmax) or op.fn in ("logsumexp", "var") else 1
        what = "softmax" if isinstance(op, ir.Softmax) else op.fn
        by = ir.op(g, args[0])
        summand = by.fn if isinstance(by, ir.Map) and args[0] not in loads else ""
        return [Work(n, ir.type_of(g, args[0]).axes, per, "simt", "f32", times, what, summand)]
    if isinstance(op, ir.Scan):
        # each position folds every position before it, reading the operand where it lies
        # (codegen's prefix loop: work quadratic in the axis's length, docs/language.md), not
        # one fold a point: at c = 4096 a cumsum's kernel was priced at 65 us, HBM-bound
        return [Work(n, ir.type_of(g, n).axes, 1, "simt", "f32", times, op.fn,
                     prefix=tuple(op.axes))]
    if isinstance(op, ir.Map):
        fn = op.fn
        if fn == "div" and is_free(g, args[1]) and not ir.type_of(g, args[1]).axes:
            fn = "mul"        # by a constant (a scale): the compiler multiplies by its inverse
        return [Work(n, ir.type_of(g, n).axes, ELEMENT_FLOPS.get(fn, 1), "simt", "f32", times,
                     fn)]
    return []


def copied_rows(g: DiGraph, kernel: FusedKernel) -> tuple[tuple[int, str, int], ...]:
    """(store, its contiguous axis, values per run) of each store of `kernel` that copies a
    row of a load (compiler/row_runs.py), whatever the thread's tile."""
    out = []
    if len(kernel.stores) != 1:          # (the threads' fastest axis: the store's last)
        return ()
    for n in kernel.stores:
        value = through(g, n)
        op = ir.op(g, value)
        if not isinstance(op, (ir.Gather, ir.View)):
            continue
        base = ir.operands(g, value)[0]
        if base not in kernel.loads or not ir.type_of(g, n).axes:
            continue
        axis = ir.type_of(g, n).axes[-1]
        dtype = storage_dtype(g, n)
        if op.labels[-1] != axis or dtype != storage_dtype(g, base) or dtype not in COPIED:
            continue
        if any(axis in ir.type_of(g, i).axes for i in ir.operands(g, value)[1:]):
            continue          # a position read along the axis: not one row
        out.append((n, axis, RUN_BYTES // BYTES[dtype]))
    return tuple(out)
