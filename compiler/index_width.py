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

INT_MAX = 2**31 - 1
OVERSHOOT = 1024          # the least overshoot assumed (a loop's step past its bound)


def overshoot(choice):
    """How far past an axis's size an index of this choice may run: its largest tile,
    chunk or split (per candidate of a set), at least OVERSHOOT."""
    c = Choices.of(choice)
    steps = [v for _, v in c.group + c.thread + c.split] + ([c.stream[1]] if c.stream else [])
    return functools.reduce(np.maximum, steps, float(OVERSHOOT))


def wide(extents, sizes: dict, choice):
    """Whether the kernel indexes in 64 bits (per candidate of a set): `extents`, the axes of
    every global array it reads or writes (Model.extents, each in its layout order);
    `sizes`, every axis's size. An index past its axis's end (by the overshoot) moves an
    array's offset by that axis's stride, the product of the axes after it: a tile of rows
    past the last row of a [2^30 - 1, 2] array computes offsets past 2^31 before the bound
    test stops its loads."""
    arrays = [[max(1.0, float(sizes[a])) for a in axes] for axes in extents]
    # (elements, the sum of the strides) per array: products of whole sizes, exact below
    # 2^53, far past INT_MAX
    spans = [(math.prod(d), sum(math.prod(d[i + 1:]) for i in range(len(d)))) for d in arrays]
    if any(elements > INT_MAX for elements, _ in spans):
        return True
    top = max((float(s) for s in sizes.values()), default=0.0)

    def reach(step):
        """The largest index or offset with every index at most `step` past its axis."""
        return functools.reduce(np.maximum, [top + step] + [e - 1 + step * strides
                                                           for e, strides in spans])
    # every candidate alike when even the largest step cannot reach 2^31 (the usual case:
    # no candidate-sized array is built, and the cost model's terms are the same)
    c = Choices.of(choice)
    step = float(OVERSHOOT)
    for _, v in c.group + c.thread + c.split + ((c.stream,) if c.stream else ()):
        step = max(step, float(v.max() if isinstance(v, np.ndarray) else v))
    if reach(step) <= INT_MAX:
        return False
    return reach(overshoot(choice)) > INT_MAX


def index_type(extents, sizes: dict, choice) -> str:
    """The C index type of one kernel plan ('int' or 'long long')."""
    return "long long" if bool(wide(extents, sizes, choice)) else "int"
