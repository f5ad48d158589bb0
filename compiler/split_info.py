"""The splits recorded on a graph (compiler/split.py): each split's axes, partial states,
merges and windows, for the passes that read them, explain and draw. A module of its own,
importing nothing of napkin's, so that any pass may read the splits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SplitInfo:
    """A split recorded on the graph (``g.graph["splits"]``, each in the order made;
    ``g.graph["split"]``, the latest)."""
    axis: str          # x
    parts: int         # P
    part_axis: str     # p_x
    share_axis: str    # s_x
    partials: tuple[str, ...]     # the partial-state arrays (O.part, O.lse, ...)
    apart: tuple[tuple[int, int], ...] = ()   # (partial statement, its merge's): never fused
    windows: tuple[int, ...] = ()    # the gathers through which arrays enter the split: each
                                     # reads its base at p_x * size(s_x) + s_x (clamped), a
                                     # window of rows a lowering may copy as a tile instead
    within: frozenset | None = None  # the statements split (one kernel's), None: the diagram

    def each(self) -> tuple:
        """This split (as SplitChoice.each: the splits a merge is decided for)."""
        return (self,)


def infos(g) -> tuple:
    """The splits of the graph (SplitInfo), in the order made: none, one across the diagram,
    or several of some kernels alone (compiler/kernel_split.py), each over its own axis."""
    return tuple(g.graph.get("splits", ()))


__all__ = ["SplitInfo", "infos"]
