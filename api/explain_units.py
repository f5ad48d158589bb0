"""How `napkin explain` prints a predicted time: seconds on a GPU, the paper's model time units
on a target without a clock."""

from __future__ import annotations


def model_units(rep: dict) -> str | None:
    """What a predicted time means on a target that is not a GPU (no processors: the paper's
    two-level model), read from the target's data; None on a GPU, where times are seconds."""
    if rep["gpu"]:
        return None
    from .compiler import target as targets
    from .diagrams.diagnostics import UsageError
    try:
        tgt = targets.load(rep["target"])
    except UsageError:
        bandwidths = set()
    else:
        bandwidths = {lv.bandwidth for lv in tgt.levels if lv.bandwidth is not None}
    if len(bandwidths) == 1:
        (bw,) = bandwidths
        per = "1 byte" if bw == 1 else f"{bw:g} bytes"
        moved = f"bytes moved / a bandwidth of {per} per unit"
    else:
        moved = "bytes moved / each level's bandwidth"
    return f"times are in model time units ({moved}), not seconds: {rep['target']} has no clock"


def seconds_text(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
