"""The index width of a kernel: `int` where every offset and loop counter fits, else `long long`.

Decided once per kernel, in its schedule (`Schedule.index`, which the lowering declares
every index with), by range analysis: the largest value any offset expression can take
(every index at its maximum, sizes as planned) and any index past an axis's end before a
bound stops it (a tile's tail, a chunk loop's last step: the overshoot) must stay below
2^31 for `int`. A launch with larger sizes than planned is refused by the launcher rather
than overflowing. The cost model asks the same question of each candidate, since a kernel
that indexes in 64 bits issues more instructions per index (compiler/issue.py).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .choices import Choices
from .pitch import pitch_of

INT_MAX = 2**31 - 1
OVERSHOOT = 1024          # the least overshoot assumed (a loop's step past its bound)


def _steps(choice) -> dict:
    """axis -> its largest tile, chunk or split in the choice (per candidate of a set)."""
    c = Choices.of(choice)
    out: dict = {}
    for a, v in c.group + c.thread + c.split + ((c.stream,) if c.stream else ()):
        out[a] = np.maximum(out.get(a, 1.0), v)
    return out


def _past(steps: dict, axis: str, bound=max):
    """How far an index along `axis` may run past the axis's end: nothing when every tile of
    it is one position (a block or a thread per position), else its largest step, at least
    OVERSHOOT (a loop's step past its bound); OVERSHOOT for an axis the choice does not
    tile (a loop over it). `bound`: `max` for the largest over a set's candidates."""
    s = steps.get(axis)
    if s is None:
        return float(OVERSHOOT)
    if bound is max:
        s = float(np.max(s))
        return 0.0 if s <= 1 else max(s, float(OVERSHOOT))
    return np.where(s > 1, np.maximum(s, float(OVERSHOOT)), 0.0)


def wide(extents, sizes: dict, choice):
    """Whether the kernel indexes in 64 bits (per candidate of a set): `extents`, (the axes of
    every global array it reads or writes, in its layout order; the values its rows' pitch is
    a multiple of, 0 where they are dense: compiler/pitch.py) (Model.extents);
    `sizes`, every axis's size. An index past its axis's end moves an array's offset by
    that axis's stride, the product of the axes after it: a tile of rows past the last row
    of a [2^30 - 1, 2] array computes offsets past 2^31 before the bound test stops its
    loads."""
    arrays = _arrays(tuple(extents), tuple(sizes.items()))
    if arrays is None:
        return True
    steps = _steps(choice)

    def reach(bound):
        """The largest index or offset, every index as far past its axis as it may run."""
        past = {a: _past(steps, a, bound) for a in sizes}
        out = [float(sizes[a]) + past[a] for a in sizes]
        for axes, last, strides in arrays:
            out.append(last + sum(past[a] * stride for a, stride in zip(axes, strides)))
        # (the numbers' largest first, then the candidates' arrays: the same maximum)
        numbers = max((v for v in out if not isinstance(v, np.ndarray)), default=0.0)
        return functools.reduce(np.maximum, (v for v in out if isinstance(v, np.ndarray)),
                                np.maximum(0.0, numbers))
    # every candidate alike when even the largest steps cannot reach 2^31 (the usual case:
    # no candidate-sized array is built, and the cost model's terms are the same)
    if reach(max) <= INT_MAX:
        return False
    return reach(None) > INT_MAX


@functools.lru_cache(maxsize=4096)
def _arrays(extents: tuple, sizes: tuple):
    """What `wide` reads of the arrays, the same for every candidate: each array's (axes,
    its largest offset, each axis's stride: the product of the sizes after it, the last a
    padded row's pitch), or None when an array's size alone passes INT_MAX. Products of
    whole sizes: exact below 2^53, far past INT_MAX."""
    sized = dict(sizes)
    arrays = [(axes, [max(1.0, float(sized[a])) for a in axes]) for axes, _ in extents]
    for (axes, d), (_, values) in zip(arrays, extents):
        if axes and values:
            d[-1] = float(pitch_of(int(d[-1]), values))
    if any(math.prod(d) > INT_MAX for _, d in arrays):
        return None
    return tuple((axes, math.prod(d) - 1, tuple(math.prod(d[i + 1:]) for i in range(len(d))))
                 for axes, d in arrays)


def index_type(extents, sizes: dict, choice) -> str:
    """The C index type of one kernel plan ('int' or 'long long')."""
    return "long long" if bool(wide(extents, sizes, choice)) else "int"


def block_type(sizes: dict, tile, index: str = "int", tensor_cores: bool = False) -> str:
    """The C type of a kernel's block index (its grid-stride loop over the tiles of the woven
    axes, `tile`: axis -> block tile): `unsigned` where the kernel indexes in 32 bits
    (`index`) and the tiles number at most 2^31 - 1 (a block index and the grid's stride
    then stay below 2^32), so that the tile's origins are 32-bit divisions nvcc inlines
    (64-bit ones test the high word and call a routine per division, per block), else `long
    long` (a kernel indexing in 64 bits keeps its origins, which its 64-bit offsets start
    from, in one width: 32-bit origins there cost sliding-window attention's main loop 18
    instructions a chunk, nvcc's predicates spilled, static sm_90). A kernel on the tensor
    cores (`tensor_cores`) keeps `long long` too: its blocks' origins are a few divisions
    before a long main loop, and the reciprocals nvcc hoists out of inlined 32-bit ones stay
    live through it, at the register cap (causal attention's d = 128 backward, its dV chain:
    12 spill stores at 255 registers, ptxas sm_90)."""
    tiles = math.prod(-(-max(int(sizes[a]), 1) // int(t)) for a, t in tile)
    narrow = index == "int" and tiles <= INT_MAX and not tensor_cores
    return "unsigned" if narrow else "long long"
