"""Schedule hints (`group q by 128 [at LEVEL]`, `--group q=128 --stream x=64`) as fixed choices.

A hint fixes one decision of the tile search for every kernel where it is
legal: `group` for an axis the kernel weaves (it can be split across blocks or
threads), `stream` for one it reduces. A hint legal in no kernel, or naming a
level the target does not have, is an error at the hint.
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import DiGraph
import numpy as np

from ..diagrams.diagnostics import NapkinError, did_you_mean, error
from .ir import HintInfo
from .search import SPLITS
from .kernels import FusedKernel
from .target import Target


@dataclass(frozen=True)
class Hint:
    kind: str          # group | stream | split (splitting.py reads splits, not the search)
                       # | lanes (a reduced axis split over lanes: the search's "split")
    axis: str
    size: int
    level: int         # index into target.levels (1: blocks, 2: threads)
    info: HintInfo | None = None
    array: str | None = None   # a split of the kernel computing this array alone
                               # (`--split dg:r=8`, kernel_split.hinted), None: the diagram's

    def describe(self) -> str:
        of = f" in the kernel computing {self.array}" if self.array else ""
        return f"{self.kind} {self.axis} by {self.size}{of}"


def resolve(diagram_hints, overrides: dict, target: Target, axes) -> list[Hint]:
    """Diagram hints, replaced by command-line ones for the same (kind, axis)."""
    out: dict[tuple[str, str, int], Hint] = {}
    for h in diagram_hints:
        level = _level(target, h.level, h)
        out[(h.kind, h.axis, level)] = Hint(h.kind, h.axis, h.size, level, h)
    for kind in ("group", "stream", "split", "lanes"):
        for key, size in overrides.get(kind, {}).items():
            array, _, axis = key.rpartition(":") if kind == "split" else ("", "", key)
            if axis not in axes:
                raise error("N0201", f"--{kind} {key}={size}: the diagram has no axis `{axis}`",
                            help=did_you_mean(axis, list(axes), "axes: " + ", ".join(axes)))
            if array and not array.isidentifier():
                raise error("N0804", f"--split {key}={size}: expected ARRAY:AXIS=COUNT, "
                            "an array's name before the colon", help=f"for example --split "
                            f"dg:{axis}=8 (the kernel computing dg splits `{axis}` in 8)")
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise error("N0304", f"--{kind} {key}={size!r}: sizes are whole numbers of "
                            "at least 1", help=f"for example --{kind} {key}=8 ({kind}={{{key!r}: 8}} "
                                                            "in napkin.compile)")
            if kind == "lanes" and size not in SPLITS:
                raise error("N0304", f"--lanes {axis}={size}: a split's lanes merge by shuffles "
                            "in a warp, then across warps: they are one of "
                            + ", ".join(map(str, SPLITS)),
                            help=f"for example --lanes {axis}=256 (256 threads, 8 warps)")
            for old in [k for k in out if k[0] == kind and k[1] == key and k[2] == 1]:
                del out[old]
            out[(kind, key, 1)] = Hint(kind, axis, size, 1, array=array or None)
    hints = list(out.values())
    _split_or_lanes(hints)
    return hints


def _split_or_lanes(hints: list[Hint]) -> None:
    """An axis splits across blocks or over a block's lanes, not both (a split over blocks
    rewrites the axis into its parts, where the lanes hint found no axis: N0604 said `no
    kernel has axis`)."""
    lanes = {h.axis: h for h in hints if h.kind == "lanes"}
    for h in hints:
        if h.kind == "split" and h.size > 1 and h.axis in lanes:
            raise _hint_error(h, f"`{h.axis}` is split across {h.size} blocks and over "
                                 f"{lanes[h.axis].size} lanes: an axis splits one way",
                              f"keep one: `split {h.axis} by {h.size}` or --lanes "
                              f"{h.axis}={lanes[h.axis].size}")


def _level(target: Target, name: str | None, h: HintInfo) -> int:
    if name is None:
        return 1
    names = target.level_names
    if name in names[1:]:
        return names.index(name)
    raise error("N0602", f"target `{target.name}` has no memory level `{name}`", h.span,
                help=did_you_mean(name, names[1:], "levels: " + ", ".join(names[1:])))


def fixed_for(g: DiGraph, k: FusedKernel, hints: list[Hint],
              sizes: dict | None = None) -> tuple[dict, list[Hint]]:
    """The search's fixed decisions for kernel k, and the hints that applied. A size past
    the axis's (planning) size means the whole axis."""
    woven, reduced = set(k.woven(g)), set(k.reduced(g))
    fixed: dict = {}
    used = []
    for h in hints:
        size = min(h.size, sizes[h.axis]) if sizes and h.axis in sizes else h.size
        if h.kind == "group" and h.axis in woven:
            key = "group" if h.level == 1 else "thread"
            fixed.setdefault(key, {})[h.axis] = size
            used.append(h)
        elif h.kind == "stream" and h.axis in reduced:
            if h.level == 1:
                if "stream" in fixed and fixed["stream"][0] != h.axis:
                    raise _hint_error(h, f"`stream {h.axis}` and `stream {fixed['stream'][0]}` "
                                         "name two axes one statement reduces: a kernel "
                                         "streams one axis", "remove one of the stream hints")
                fixed["stream"] = (h.axis, size)
            else:
                fixed["inner"] = (h.axis, size)
            used.append(h)
        elif h.kind == "lanes" and h.axis in reduced:
            fixed["split"] = (h.axis, h.size)      # (one a kernel: lanes_clash)
            used.append(h)
    return fixed, used


def lanes_clash(g: DiGraph, k: FusedKernel, hints: list[Hint]) -> NapkinError | None:
    """The error when lanes hints name two axes kernel k reduces (its search splits one
    reduced axis over lanes; the second hint was silently dropped): a kernel of one statement
    (`sum[c e]`) is refused, fusion keeps two statements apart (KernelPlanner)."""
    reduced = set(k.reduced(g))
    mine = [h for h in hints if h.kind == "lanes" and h.axis in reduced]
    if len(mine) < 2:
        return None
    a, b = mine[:2]
    return _hint_error(b, f"`lanes {b.axis} by {b.size}` and `lanes {a.axis} by {a.size}` name "
                          "two axes one statement reduces: a kernel splits one reduced axis "
                          "over its lanes", f"keep one: --lanes {a.axis}={a.size} or --lanes "
                                            f"{b.axis}={b.size}")


def check_all_used(hints: list[Hint], used: set, g: DiGraph, kernels) -> None:
    for h in hints:
        if h in used:
            continue
        roles = []
        for k in kernels:
            if h.axis in k.woven(g):
                roles.append(f"woven in {k.name}")
            elif h.axis in k.reduced(g):
                roles.append(f"reduced in {k.name}")
        if not roles:
            why, fix = f"no kernel has axis `{h.axis}`", "remove the hint"
        elif h.kind == "lanes":
            why = f"`{h.axis}` is " + ", ".join(roles) + ": only reduced axes split over lanes"
            fix = f"split a reduced axis instead, or remove --lanes {h.axis}={h.size}"
        elif h.kind == "group":
            why = f"`{h.axis}` is " + ", ".join(roles) + ": only woven axes can be grouped"
            fix = f"stream it instead: `stream {h.axis} by {h.size}`"
        else:
            why = f"`{h.axis}` is " + ", ".join(roles) + ": only reduced axes can be streamed"
            fix = f"group it instead: `group {h.axis} by {h.size}`"
        raise _hint_error(h, f"`{h.describe()}` applies to no kernel: {why}", fix)


def _hint_error(h: Hint, message: str, fix: str) -> NapkinError:
    return error("N0604", message, h.info.span if h.info else None, help=fix)
