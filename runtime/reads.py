"""The interpreter's reads at other positions than the block's (a mixin of
runtime/interpret._Block): a renaming view, a gather at computed positions, and a scan's
prefix, each taking what it reads over the ranges it needs, then cut to the region."""

from __future__ import annotations

import numpy as np

from ..compiler import accumulators as acc
from ..compiler import ir, local_merge
from . import elementwise, labelled
from .region import Region, _align, _floats


class OtherPositions:
    def _gather(self, n: int, op, region: Region) -> np.ndarray:
        """The array at computed positions, indexed by the positions' values over the region.
        An input is read whole (any row may be asked for). An array this kernel computes is
        taken over the whole of each axis read at a computed position, and over the region's
        range of the axis a labelled position names: the block has only its own tile of
        that (a reduction streamed here finished for the block's rows alone)."""
        from .gathers import gathered, positions
        g = self.g
        base, *index = ir.operands(g, n)
        axes = ir.type_of(g, n).axes
        declared = ir.type_of(g, base).axes
        starts = [0] * len(declared)
        if base not in self.k.nodes or isinstance(ir.op(g, base), ir.Input):
            data = self.memory[base]
        else:
            slices = {}
            for k, (d, lab) in enumerate(zip(declared, op.labels)):
                slices[d] = slice(0, region.sizes[d]) if lab is None else region.of(lab)
                starts[k] = slices[d].start
            data = self.value(base, Region(region.sizes, {**region.slices, **slices}))[0]
        values = [elementwise.as_kind(_align(self.value(m, region), axes), "int") for m in index]
        ranges = [_align((np.arange(region.of(lab).start, region.of(lab).stop) - start, (lab,)), axes)
                  for lab, start in zip(op.labels, starts) if lab is not None]
        where = positions(op.labels, values, ranges)
        if any(elementwise.outside(ix, data.shape[k]).any() for k, ix in enumerate(where)):
            self.outside.add(n)     # clamped: the reference says whether the value is used
        out = gathered(g, n, data, op.labels, values, ranges, clamp=True)
        return np.broadcast_to(out, tuple(region.extent(a) for a in axes))

    def _scan(self, n: int, op, region: Region):
        """A prefix at a position reads every position before it: the operand from the axis's
        start (as a view reads it, whatever the block's tile or chunk), scanned, then cut."""
        (axis,) = op.axes
        cut = region.of(axis)
        operand = ir.operands(self.g, n)[0]
        x, axes = _floats(self.value(operand, region.with_(axis, slice(0, cut.stop))))
        scan, dim = acc.SCAN[op.fn], axes.index(axis)
        shape = tuple(s for i, s in enumerate(x.shape) if i != dim)
        prefixes = scan.step(np.full(shape, scan.identity), x, dim)[0]
        return np.take(prefixes, np.arange(cut.start, cut.stop), axis=dim), axes

    def _view(self, n: int, op, region: Region) -> np.ndarray:
        """Declared axis k of the base at label k's slice. A base computed here is computed
        over whole declared axes (a softmax along one needs all of it), then cut; a load is
        read at the labels' slices directly."""
        base = ir.operands(self.g, n)[0]
        declared = ir.type_of(self.g, base).axes
        loaded = base not in self.k.nodes or isinstance(ir.op(self.g, base), ir.Input)
        inner = {}
        for d, lab in zip(declared, op.labels):
            direct = loaded or d == lab
            inner[d] = region.of(lab) if direct else slice(0, region.sizes[d])
        data = self.value(base, Region(region.sizes, {**region.slices, **inner}))[0]
        cut = tuple(slice(region.of(lab).start - inner[d].start, region.of(lab).stop - inner[d].start)
                    for d, lab in zip(declared, op.labels))
        return labelled.relabel(data[cut], op.labels)

    def _reshape(self, n: int, region: Region) -> np.ndarray:
        """A reshape (compiler/local_merge.py): the base over the whole of each merged axis's
        parts, reshaped row-major, then cut to the region's slice of the merged axis."""
        base = ir.operands(self.g, n)[0]
        pieces = local_merge.decomposed(self.g, n)
        inner = {p: slice(0, region.sizes[p]) for _, parts in pieces if len(parts) > 1
                 for p in parts}
        read = Region(region.sizes, {**region.slices, **inner})
        axes = ir.type_of(self.g, base).axes
        data = np.broadcast_to(_align(self.value(base, read), axes),
                               tuple(read.extent(a) for a in axes))
        whole = tuple(region.extent(a) if len(parts) == 1 else
                      int(np.prod([region.sizes[p] for p in parts])) for a, parts in pieces)
        cut = tuple(slice(None) if len(parts) == 1 else region.of(a) for a, parts in pieces)
        return data.reshape(whole)[cut]
