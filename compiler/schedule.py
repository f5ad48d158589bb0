"""The schedule of one kernel: the one artifact between planning and code generation.

A `Schedule` holds every decision the lowering, the interpreter, the emulator,
explain and draw need, made once by the planner (or by `variants.with_choices`)
and checked when it is built: the engine (CUDA cores, a matrix product on
tensor cores, attention as FlashAttention-2) and its site, each woven axis's
block tile (whole axes included), the streamed axis and its chunk, each
thread's (or, on tensor cores, each warp's) tile, a reduced axis split across
threads, the warps, and the threads a block is launched with. `build` refuses
a choice the lowering cannot honour with a NapkinError (N0604) that says which
rule it breaks; nothing downstream derives any of these again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import copies, fold, ir, packing, row_runs
from .cost import Choice
from .extents import covered, resident
from .fractions import later_is_heavier
from .index_width import block_type, index_type
from .memory import PIPELINE, in_place
from .model import Model
from .passes import staged_once
from .target import Target
from .search import SPLITS
from .scatter import ScatterSite, blocks as scatter_blocks, site as scatter_site
from .tensorcore import ChainSite, FlashSite, Site, examine
from . import headpad, wgmma
from .staged_tiles import operand_layouts
from .tilelayout import TileLayout
from .warps import FRAGMENT

WARP = 32
SPLIT_WAYS = SPLITS     # lanes whose partial states merge by shuffles, then across warps
WARP_COUNTS = (1, 2, 4, 8)

SIMT, PRODUCT, ATTENTION, CHAIN = "cuda cores", "tensor-core product", "attention", \
    "chain of products"
TENSOR_ENGINES = (PRODUCT, ATTENTION, CHAIN)     # the engines that run on the tensor cores
SCATTER = "scatter-add"        # a masked sum as atomics at the gathered rows (scatter.py)


@dataclass(frozen=True)
class Placement:
    """One of the kernel's arrays at one memory level (extents.resident's rule, the cost
    model's own): what one unit of the level holds at once and what it covers over its
    life. Input tiles live at every level they pass through, values and accumulators at the
    lowest; stores go straight to global memory."""
    node: int
    name: str
    role: str                                 # load | value | accumulator
    level: int                                # index into the target's levels (1, 2, ...)
    held: tuple[tuple[str, float], ...]       # axis -> extent held at once
    covered: tuple[tuple[str, float], ...]    # axis -> extent covered (the unit's share)
    bytes: int                                # per value (per state slot)
    slots: int                                # accumulator state slots


@dataclass(frozen=True)
class Schedule:
    engine: str                               # SIMT, PRODUCT, ATTENTION or CHAIN
    site: Site | FlashSite | ChainSite | None  # the tensor-core site (None: CUDA cores)
    tile: tuple[tuple[str, int], ...]         # woven axis -> block tile (whole: the axis size)
    stream: tuple[str, int] | None            # streamed axis and chunk
    thread: tuple[tuple[str, int], ...]       # woven axis -> a thread's (a warp's) tile
    split: tuple[str, int] | None             # reduced axis split over `ways` lanes
    inner: tuple[str, int] | None             # reduced axis each thread streams
    warps: tuple[tuple[str, int], ...]        # tensor cores: warps per block along axes
                                              # (wgmma: warpgroups, compiler/wgmma.py)
    threads: int                              # threads per block, as launched
    lanes: int                                # threads doing distinct work (<= threads)
    choice: Choice                            # what it was built from (KernelPlan checks)
    staged: frozenset[int] = frozenset()      # loads a SIMT block copies to shared memory
                                              # (tensor cores: the site's operand tiles instead)
    stages: int = 1                           # pipeline depth of streamed shared tiles
    placements: tuple[Placement, ...] = ()    # every array at every level it lives at
    index: str = "int"                        # the C type of every index (index_width.py)
    blocks: str = "unsigned"                  # the C type of the block index (index_width.py)
    reversed: tuple[str, ...] = ()            # axes whose block tiles launch last first,
                                              # the slowest-varying: the heaviest blocks first
                                              # (fractions.later_is_heavier)
    layouts: tuple[tuple[int, TileLayout], ...] = ()   # tensor cores: each staged operand
                                              # tile's shared layout, swizzled or padded
                                              # (compiler/tilelayout.py)
    reread: bool = False                      # attention: Q's A fragments re-read from shared
                                              # memory every chunk, not held in registers
    vectors: tuple[tuple[int, int], ...] = ()  # CUDA cores: values one copy of each staged
                                              # input moves into shared memory (copies.py)
    peels: tuple[int, ...] = ()               # CUDA cores: staged inputs whose rows are
                                              # copied peeled, 16 bytes a copy (copies.py)
    scatter: ScatterSite | None = None        # SCATTER: what it adds where; `tile` is then
                                              # over the scatter's positions (T and K)
    finish: tuple[tuple[str, int], ...] = ()  # SCATTER (and a chain's product over its rows,
                                              # chain.Across): the conversion kernel's block
                                              # tile over the output's axes
    finishes: tuple = ()                      # CHAIN: (store, its `finish`) of each array
                                              # added across blocks (Across, chain_sums)
    runs: tuple[tuple[int, int], ...] = ()    # CUDA cores: stores each thread writes as
                                              # runs of its consecutive points (row_runs.py)
    fold: int = 1                             # CUDA cores: keys a paired online softmax
                                              # folds per update (compiler/fold.py)
    resident: bool = False                    # CUDA cores, several passes: the one chunk
                                              # holds the streamed axis at the planned size,
                                              # so later passes read the chunk the first
                                              # staged (passes.staged_once; the lowering
                                              # restages it if a launch's axis is longer)

    def vector(self, node: int) -> int:
        """Values one copy of staged input `node` moves (1 where not decided: one)."""
        return dict(self.vectors).get(node, 1)

    def peeled(self, node: int) -> int:
        """Values of the 16-byte vector staged input `node`'s rows are peeled to, or 0 where
        they are not (copies.peeled)."""
        return self.vector(node) if node in self.peels else 0

    @property
    def tensor_cores(self) -> bool:
        return self.site is not None

    @property
    def instruction(self) -> str:
        """Tensor cores: the MMA instruction, mma.sync or wgmma (compiler/wgmma.py)."""
        return self.choice.instruction

    @property
    def across(self) -> tuple:
        """A chain's products over its rows, added across blocks (chain.Across); () else."""
        return self.site.across if isinstance(self.site, ChainSite) else ()

    @property
    def sums(self) -> tuple:
        """A chain's stored sums of its chunk values, added across blocks (chain_sums.py)."""
        return self.site.sums if isinstance(self.site, ChainSite) else ()

    def finish_of(self, store: int) -> tuple:
        """The conversion kernel's block tile of added array `store` (`finish` for the first)."""
        return dict(self.finishes).get(store, self.finish)

    def block_tile(self) -> dict[str, int]:
        """Every woven axis's block tile (a whole axis: its size)."""
        return dict(self.tile)

    def grouped(self) -> dict[str, int]:
        """The axes blocks are tiled along, as chosen (the other woven axes are whole)."""
        return dict(self.choice.group)

    def thread_tile(self) -> dict[str, int]:
        return dict(self.thread)

    def warp_layout(self) -> tuple[int, int, int, int]:
        """Tensor cores: (warps along row, along col, warp tile rows, warp tile cols); an
        attention's warps stack along the rows, each covering the block's value columns (a
        chain's: every output's whole width, 0 here)."""
        w, t, s = dict(self.warps), dict(self.thread), self.site
        if isinstance(s, FlashSite):
            cols = dict(self.tile).get(s.dv, s.width)       # the block's (flash.COLUMNS)
            return w[s.row], 1, t[s.row], cols if cols < s.width else headpad.width_tile(s)
        if isinstance(s, ChainSite):
            return w[s.row], 1, t[s.row], 0
        return w[s.row], w[s.col], t[s.row], t[s.col]

    def layout(self, node: int, axes: tuple[str, str]) -> TileLayout:
        """The shared layout of operand `node`'s tile over `axes` (rows, contiguous)."""
        for n, found in self.layouts:
            if n == node and found.axes == axes:
                return found
        raise KeyError(f"no staged tile of node {node} over {axes}")


def _refuse(kernel: str, rule: str) -> NapkinError:
    return error("N0604", f"schedule of kernel {kernel} is not legal: {rule}",
                 help="choose tiles within these rules, or let the planner choose")


def build(g, kernel, model: Model, choice: Choice, sizes: dict, target: Target,
          stages: int = PIPELINE) -> Schedule:
    """The checked schedule of `choice` for `kernel` (see the module docstring); `stages`:
    the pipeline depth the cost model chose for a tensor-core kernel (Cost.stages)."""
    if choice.scatter:
        return _scatter(g, kernel, choice, sizes)
    sizes = packing.sized(model.packed, sizes)      # packed fragment rows: one axis
    sched = _build(g, kernel, model, choice, sizes, target)
    if sched.stages > 1:
        sched = replace(sched, stages=stages)
    if sched.site is not None and choice.stream and later_is_heavier(
            model.mask, sizes, {**dict(choice.group), choice.stream[0]: choice.stream[1]},
            choice.stream[0], sched.site.row):
        sched = replace(sched, reversed=(sched.site.row,))
    index = index_type(model.extents, sizes, choice)
    return replace(sched, placements=placements(model, choice, sizes, target), index=index,
                   blocks=block_type(sizes, sched.tile, index, sched.site is not None))


def _scatter(g, kernel, choice: Choice, sizes: dict) -> Schedule:
    """A scatter-add's schedule: its site, and blocks over its positions (scatter.py)."""
    found = scatter_site(g, kernel)
    if found is None:
        raise _refuse(kernel.name, "it asks for a scatter-add, but the kernel is not a masked "
                      "sum matching an integer index to an output axis (compiler/scatter.py)")
    if choice != Choice(scatter=True):
        raise _refuse(kernel.name, "a scatter-add takes no tiles, streams, splits or warps")
    tile = scatter_blocks(found.axes, sizes)
    lanes = math.prod(t for _, t in tile)
    return Schedule(SCATTER, None, tile, None, (), None, None, (), -(-lanes // WARP) * WARP,
                    lanes, choice, index="long long", blocks="long long",
                    scatter=found,
                    finish=scatter_blocks(ir.type_of(g, found.store).axes, sizes))


def placements(model: Model, choice: Choice, sizes: dict, target: Target) -> tuple:
    """Where each array lives, level by level (see Placement)."""
    nlevels = len(target.levels)
    covs = covered(model, choice, sizes, nlevels)
    reduced = set(model.reduced)
    out = []
    for li in range(1, nlevels):
        cov = covs[li - 1]
        for arr in model.arrays:
            if arr.role == "store" or (arr.role != "load" and li != nlevels - 1):
                continue
            if in_place(arr, model, choice) and arr.node not in model.positions \
                    and target.processors and li != nlevels - 1:
                continue    # read from global memory where used (_staged, memory.in_place)
            res = resident(arr, li, cov, choice, reduced)
            out.append(Placement(arr.node, arr.name, arr.role, li,
                                 tuple((a, res[a]) for a in arr.axes),
                                 tuple((a, cov[a]) for a in arr.axes), arr.bytes, arr.slots))
    return tuple(out)


def _build(g, kernel, model: Model, choice: Choice, sizes: dict, target: Target) -> Schedule:
    name = kernel.name
    woven, reduced = list(model.woven), list(model.reduced)
    for field_name, pairs in (("group", choice.group), ("thread", choice.thread),
                              ("warps", choice.warps)):
        axes = [a for a, _ in pairs]
        if len(set(axes)) != len(axes):
            raise _refuse(name, f"{field_name} names an axis twice ({', '.join(axes)})")
        for a, v in pairs:
            if a not in woven:
                raise _refuse(name, f"{field_name} tiles `{a}`, which is not a woven axis of "
                              f"the kernel (woven: {', '.join(woven) or 'none'})")
            _positive(name, f"{field_name} {a}", v)
    tile = {a: int(dict(choice.group).get(a, sizes[a])) for a in woven}
    thread = {a: int(v) for a, v in choice.thread}
    for a, t in thread.items():
        if t > tile[a]:
            raise _refuse(name, f"the thread tile of `{a}` ({t}) exceeds its block tile "
                          f"({tile[a]}): a thread's tile is at most its block's")
    stream_axis = model.streaming.axis
    if choice.stream is not None:
        a, chunk = choice.stream
        if a != stream_axis:
            raise _refuse(name, f"it streams `{a}` but the kernel's model streams "
                          f"{'`' + str(stream_axis) + '`' if stream_axis else 'nothing'}")
        _positive(name, f"the chunk of `{a}`", chunk)
    elif stream_axis is not None:
        raise _refuse(name, f"the model streams `{stream_axis}` but the choice gives no chunk")
    for field_name, pair in (("split", choice.split), ("inner", choice.inner)):
        if pair is None:
            continue
        a, v = pair
        if a not in reduced:
            raise _refuse(name, f"{field_name} `{a}` is not a reduced axis of the kernel "
                          f"(reduced: {', '.join(reduced) or 'none'})")
        _positive(name, f"{field_name} {a}", v)
    if choice.split is not None and choice.split[0] in model.relabelled:
        raise _refuse(name, f"split `{choice.split[0]}` over lanes: a view reads the kernel's "
                      f"values at another axis's position of `{choice.split[0]}`, which another "
                      "lane holds")
    if choice.split is not None and choice.split[0] in model.whole_walks:
        raise _refuse(name, f"split `{choice.split[0]}` over lanes: a reduction over it nested "
                      f"in another walks all of `{choice.split[0]}` in each lane, reading a "
                      "value the thread holds in registers, of which each lane holds its share")
    if choice.split is not None and choice.split[1] not in SPLIT_WAYS:
        raise _refuse(name, f"split `{choice.split[0]}` over {choice.split[1]} lanes: the lanes "
                      f"of a split merge by warp shuffles (then across warps), so they are one of "
                      f"{', '.join(map(str, SPLIT_WAYS))}")
    if choice.warps:
        return _tensor_cores(g, kernel, model, choice, sizes, target, tile, thread)
    if choice.reread:
        raise _refuse(name, "it re-reads Q from shared memory, a choice of attention on the "
                      "tensor cores (FlashAttention-2), but gives no warps")
    ways = choice.split[1] if choice.split else 1
    lanes = math.prod(-(-tile[a] // min(thread.get(a, 1), tile[a])) for a in woven) * ways
    threads = max(WARP, -(-lanes // WARP) * WARP)
    _threads(name, threads, target)
    staged = _staged(g, kernel)
    vectors, peels = copies.vectors(g, staged, tile, choice.stream, sizes, threads,
                                    model.fixed)
    return Schedule(SIMT, None, tuple(sorted(tile.items())), choice.stream,
                    tuple(sorted((a, min(thread.get(a, 1), tile[a])) for a in woven)),
                    choice.split, choice.inner, (), threads, lanes, choice, staged,
                    vectors=vectors, peels=peels,
                    runs=row_runs.runs(model.rows, sizes, tile, {a: min(thread.get(a, 1), tile[a])
                                                    for a in woven}, woven, choice.stream,
                                       choice.split),
                    fold=int(fold.keys(model, choice)),
                    resident=bool(staged_once(model, choice.warps, sizes,
                                              choice.stream)))


def _staged(g, kernel) -> frozenset[int]:
    """The loads a SIMT block stages in shared memory: all but those read only through
    renaming views or gathers (they read at other positions than the block's tile: from
    global memory)."""
    members = set(kernel.nodes)
    return frozenset(n for n in kernel.loads if not all(
        isinstance(ir.op(g, v), (ir.View, ir.Gather)) for v in g.successors(n) if v in members))


def _tensor_cores(g, kernel, model, choice, sizes, target, tile, thread) -> Schedule:
    name = kernel.name
    # (an attention's rows packed as the planner chose: the model's, packing.py)
    found = examine(g, kernel, model, target, sizes, bool(model.packed))
    if isinstance(found, str):
        raise _refuse(name, f"it gives warps (tensor cores) but {found}")
    if choice.split is not None or choice.inner is not None:
        raise _refuse(name, "a tensor-core schedule neither splits nor streams a reduced axis "
                      "within a warp")
    fm, fn, fk = FRAGMENT
    warps = dict(choice.warps)
    tiled = (found.row,) if isinstance(found, (FlashSite, ChainSite)) else (found.row, found.col)
    if set(warps) != set(tiled):
        raise _refuse(name, f"warps are laid along {', '.join(warps)}; this site needs "
                      f"{', '.join(tiled)}")
    count = math.prod(warps.values())
    if count not in WARP_COUNTS:
        raise _refuse(name, f"{count} warps per block: one of {WARP_COUNTS}")
    for a, frag in zip(tiled, (fm, fn)):
        t = thread.get(a)
        if t is None or t % frag or tile[a] != warps[a] * t:
            raise _refuse(name, f"along `{a}` the block tile ({tile[a]}) must be its "
                          f"{warps[a]} warp(s) times a warp tile of whole {frag}-wide "
                          f"fragments (warp tile {t})")
    for a in found.batch:
        if tile[a] != 1:
            raise _refuse(name, f"batch axis `{a}` is one position per block (tile {tile[a]})")
    if choice.stream is None or choice.stream[1] % fk:
        raise _refuse(name, f"the streamed chunk must be a multiple of {fk} (the mma's k)")
    engine = ATTENTION if isinstance(found, FlashSite) else CHAIN \
        if isinstance(found, ChainSite) else PRODUCT
    if choice.reread and engine != ATTENTION:
        raise _refuse(name, f"it re-reads Q from shared memory, a choice of attention "
                      f"(FlashAttention-2); this kernel is a {engine}")
    threads = count * (wgmma.WARPGROUP if choice.instruction == "wgmma" else WARP)
    _threads(name, threads, target)
    # a warp's tile along each woven axis (1 where the choice gives none: batch, value width)
    per_warp = {a: thread.get(a, 1) for a in tile}
    across = getattr(found, "across", ())
    layouts = operand_layouts(g, found, tile, choice.stream[1], choice.instruction)
    if choice.instruction not in wgmma.INSTRUCTIONS:
        raise _refuse(name, f"instruction {choice.instruction!r}: one of "
                      f"{', '.join(wgmma.INSTRUCTIONS)}")
    if choice.instruction == "wgmma":
        why = ("wgmma runs plain products here, not attention or chains" if engine != PRODUCT
               else wgmma.why_not(g, kernel, model, found, target)) or wgmma.check(
            g, found, tile, per_warp, warps, choice.stream[1], dict(layouts))
        if why:
            raise _refuse(name, f"it asks for wgmma, but {why}")
    return Schedule(engine, found, tuple(sorted(tile.items())), choice.stream,
                    tuple(sorted(per_warp.items())), None, None, tuple(sorted(warps.items())),
                    threads, threads, choice, stages=PIPELINE,
                    layouts=layouts,
                    reread=choice.reread,
                    finish=scatter_blocks(ir.type_of(g, across[0].store).axes, sizes)
                    if across else (),
                    finishes=tuple((m.store, scatter_blocks(ir.type_of(g, m.store).axes, sizes))
                                   for m in across + getattr(found, "sums", ())))


def _positive(kernel: str, what: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _refuse(kernel, f"{what} is {value!r}: tiles, chunks and counts are whole "
                      "numbers of at least 1")


def _threads(kernel: str, threads: int, target: Target) -> None:
    cap = target.max_threads_per_block
    if target.processors and threads > cap:
        raise _refuse(kernel, f"a block of {threads} threads; {target.name} allows {cap}")


__all__ = ["Schedule", "build", "SIMT", "PRODUCT", "ATTENTION", "CHAIN", "SCATTER"]
