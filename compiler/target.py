"""Targets: memory hierarchies as data (compiler/targets/*.toml), never branches in code.

A target lists its memory levels from the top (global) down, each with a
capacity per unit (a block's shared memory, a thread's registers) and the
bandwidth at which data enters it from the level above; its peak compute
rates; and its engines (tensor cores: fixed fragment shapes, where their
operands and results live). `--target two-level:M=49152` sets a parameter.
"""

from __future__ import annotations

import math
import re

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..diagrams.diagnostics import UsageError, did_you_mean, error

TARGETS_DIR = Path(__file__).with_name("targets")
DEFAULT = "h100"


@dataclass(frozen=True)
class Level:
    name: str
    capacity_bytes: float
    bandwidth: float | None      # bytes/s into this level from the one above (None: the top)
    unit: str | None             # what one unit of this level is: block, thread, processor
    computes: tuple[str, ...]    # elementwise, reduction, contraction


@dataclass(frozen=True)
class Engine:
    name: str
    computes: tuple[str, ...]
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int, int], ...]   # (m, n, k): m x k . k x n -> m x n
    operands_at: str
    results_at: str


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    arch: str
    processors: int              # 0: unbounded (the paper's model)
    clock_hz: float
    warp_size: int
    max_threads_per_block: int
    max_registers_per_thread: int
    registers_per_processor: int
    coalescing_bytes: int
    compute: tuple[tuple[str, float], ...]   # (rate name, FLOP/s)
    levels: tuple[Level, ...]
    engines: tuple[Engine, ...] = ()
    per_clock: tuple[tuple[str, float], ...] = ()   # [issue]: per SM per clock (instructions)
    l2_bytes: float = 0.0        # [l2]: capacity (0: no L2 modelled)
    l2_bandwidth: float = 0.0    # [l2]: bytes/s from L2 into the SMs
    l2_atomics: float = 0.0      # [l2]: 4-byte atomic adds per second (0: no scatter-add)

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def rate(self, name: str) -> float | None:
        return dict(self.compute).get(name)

    def per_second(self, name: str) -> float | None:
        """An [issue] throughput (per SM per clock) over the whole GPU, per second."""
        per = dict(self.per_clock).get(name)
        return per * self.processors * self.clock_hz if per and self.processors else None

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    def engine_for(self, op: str, dtype: str) -> Engine | None:
        for e in self.engines:
            if op in e.computes and dtype in e.dtypes:
                return e
        return None


def names() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml"))


@lru_cache(maxsize=32)
def load(spec: str | None = None) -> Target:
    """A target by name, optionally with parameters: `two-level:M=49152`."""
    if spec is not None and not spec.strip():      # `--target ""`: a mistake, not the default
        raise UsageError(error("N0605", "the target is empty",
                               help="targets: " + ", ".join(names())).diagnostics)
    spec = spec or DEFAULT
    name, _, params = spec.partition(":")
    if name not in names():
        raise UsageError(error("N0605", f"unknown target `{name}`",
                               help=did_you_mean(name, names(), "targets: " + ", ".join(names())))
                         .diagnostics)
    data = tomllib.loads((TARGETS_DIR / f"{name}.toml").read_text())
    levels = [Level(lv["name"], float(lv["capacity_bytes"]), lv.get("bandwidth"), lv.get("unit"),
                    tuple(lv.get("computes", ()))) for lv in data["levels"]]
    arch = data["arch"]
    for key, value in _params(spec, params):
        if key == "arch":
            arch = value
            continue
        if key != "M" or len(levels) < 2:
            raise UsageError(error("N0605", f"target `{name}` has no parameter `{key}`",
                                   help="two-level takes M=BYTES (two-level:M=49152); any "
                                        "target takes arch=sm_XX, the arch compiled for")
                             .diagnostics)
        fast = levels[1]
        levels[1] = Level(fast.name, float(value), fast.bandwidth, fast.unit, fast.computes)
    engines = tuple(Engine(e["name"], tuple(e["computes"]), tuple(e["dtypes"]),
                           tuple(tuple(s) for s in e["shapes"]), e["operands_at"], e["results_at"])
                    for e in data.get("engines", ()))
    return Target(
        name=spec if params else name, description=data["description"], arch=arch,
        processors=int(data["processors"]), clock_hz=float(data["clock_hz"]),
        warp_size=int(data["warp_size"]), max_threads_per_block=int(data["max_threads_per_block"]),
        max_registers_per_thread=int(data["max_registers_per_thread"]),
        registers_per_processor=int(data["registers_per_processor"]),
        coalescing_bytes=int(data["coalescing_bytes"]),
        compute=tuple(sorted((k, float(v)) for k, v in data["compute"].items())),
        levels=tuple(levels), engines=engines,
        per_clock=tuple(sorted((k, float(v)) for k, v in data.get("issue", {}).items())),
        l2_bytes=float(data.get("l2", {}).get("capacity_bytes", 0)),
        l2_bandwidth=float(data.get("l2", {}).get("bandwidth", 0)),
        l2_atomics=float(data.get("l2", {}).get("atomics", 0)))


def _params(spec: str, params: str):
    for part in filter(None, params.split(",")):
        key, eq, value = part.partition("=")
        if key.strip() == "arch":       # the arch compiled for (which instructions exist)
            if not re.fullmatch(r"sm_\d+[af]?", value.strip()):
                raise UsageError(error("N0804", f"target parameter {part!r} in {spec!r}: "
                                       "expected arch=sm_XX", help="for example h100:arch=sm_90")
                                 .diagnostics)
            yield "arch", value.strip()
            continue
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not eq or not math.isfinite(number) or number < 1:    # (inf and nan were taken)
            raise UsageError(error("N0804", f"target parameter {part!r} in {spec!r}: expected "
                                   "KEY=NUMBER, a finite number of at least 1",
                                   help="for example two-level:M=49152").diagnostics)
        yield key.strip(), number
