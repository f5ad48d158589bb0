"""`--shape NAME=SIZE,...` checked against a diagram's axes, once for every command that
takes it (run's random inputs; compile, explain and draw's planning sizes): a name that is
no axis, a size for a static axis other than its own, and two sizes for axes the diagram
makes one (each N0804). Unchecked, compile and explain planned at the default sizes for a
misspelt axis and at the static size for `--shape c=7` where `axis c = 48`, without a word."""

from __future__ import annotations

from ..diagrams.diagnostics import UsageError, did_you_mean, error


def by_size_class(axes: dict, shape: dict[str, int]) -> dict:
    """{size class representative: (size, the axis named)} of `shape` (N0804 as above)."""
    for name in shape:
        if name not in axes:
            raise UsageError(error("N0804", f"--shape names `{name}`, which is not an axis",
                                   help=did_you_mean(name, axes, "axes: " + ", ".join(axes)))
                             .diagnostics)
    by_class: dict = {}
    for name, size in shape.items():
        info = axes[name]
        if info.size is not None and info.size != size:
            raise UsageError(error("N0804", f"--shape {name}={size}, but `{name}` is {info.size} "
                                   "in the diagram", help=f"use -D {name}={size} to change it")
                             .diagnostics)
        if info.rep in by_class and by_class[info.rep][0] != size:
            other = by_class[info.rep][1]
            raise UsageError(error("N0804", f"--shape {other}={by_class[info.rep][0]} and "
                                   f"{name}={size}, but the diagram makes `{other}` and "
                                   f"`{name}` one size", help=f"give `{other}` and `{name}` "
                                   "one size (or only one of them)").diagnostics)
        by_class[info.rep] = (size, name)
    return by_class
