"""ptxas's `-v` report: registers, spills, stack, shared and constant memory per kernel."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Resources:
    """One kernel's resource use, from ptxas's `-v` report.

    `stack_bytes` is the larger of the kernel's own stack frame and the
    "cumulative stack size" ptxas reports when the kernel calls non-inlined
    functions. `cmem_bytes` sums all constant banks reported (cmem[0] holds the
    parameters; ptxas 13.5 omits cmem[0] for sm_90 and later, which then reads 0).
    """

    registers: int
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0
    cmem_bytes: int = 0
    barriers: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


_P_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_P_PROPS = re.compile(r"Function properties for (\S+)")
_P_FRAME = re.compile(r"(\d+) bytes stack frame")
_P_SPILL_ST = re.compile(r"(\d+) bytes spill stores")
_P_SPILL_LD = re.compile(r"(\d+) bytes spill loads")
_P_REGS = re.compile(r"Used (\d+) registers")
_P_BARRIERS = re.compile(r"used (\d+) barriers")
_P_CUMSTACK = re.compile(r"(\d+) bytes cumulative stack size")
_P_SMEM = re.compile(r"(\d+) bytes smem")
_P_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")


def parse_ptxas_report(log: str) -> dict[str, Resources]:
    """Per-kernel resources from the `ptxas -v` lines of an NVRTC log.

    Keys are entry (kernel) names as ptxas prints them. Non-entry functions'
    property blocks (non-inlined device functions) are read but not returned.
    """
    props: dict[str, dict[str, int]] = {}
    used: dict[str, dict[str, int]] = {}
    order: list[str] = []
    entry: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if not line.startswith("ptxas"):
            continue
        m = _P_COMPILING.search(line)
        if m:
            entry = m.group(1)
            if entry not in used:
                used[entry] = {}
                order.append(entry)
            continue
        m = _P_PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        if "stack frame" in line and props_for is not None:
            p = props.setdefault(props_for, {})
            for key, rx in (("frame", _P_FRAME), ("spill_stores", _P_SPILL_ST), ("spill_loads", _P_SPILL_LD)):
                mm = rx.search(line)
                if mm:
                    p[key] = int(mm.group(1))
            continue
        m = _P_REGS.search(line)
        if m and entry is not None:
            u = used[entry]
            u["registers"] = int(m.group(1))
            for key, rx in (("barriers", _P_BARRIERS), ("cumulative", _P_CUMSTACK), ("smem", _P_SMEM)):
                mm = rx.search(line)
                if mm:
                    u[key] = int(mm.group(1))
            u["cmem"] = sum(int(x) for x in _P_CMEM.findall(line))
    out: dict[str, Resources] = {}
    for name in order:
        u = used[name]
        if "registers" not in u:
            continue
        p = props.get(name, {})
        out[name] = Resources(
            registers=u["registers"],
            spill_stores=p.get("spill_stores", 0),
            spill_loads=p.get("spill_loads", 0),
            stack_bytes=max(p.get("frame", 0), u.get("cumulative", 0)),
            smem_bytes=u.get("smem", 0),
            cmem_bytes=u.get("cmem", 0),
            barriers=u.get("barriers", 0),
        )
    return out
