"""The main loop of a kernel's SASS and its instruction mix (static counts, no GPU).

The rule (issue 14, the way napkin's and Triton's kernels are compared): the main
loop is, of the innermost backward-branch loops holding HMMA (HGMMA on sm_90a), the one
holding the most (of a loop specialised for 16-byte and for scalar copies, the first);
without tensor instructions, the innermost loop with the most instructions. Every
instruction in its address range counts once, both sides of its branches; NOPs and
never-executed `@!PT` instructions do not.
"""

from __future__ import annotations

import collections
import functools
import re
from dataclasses import dataclass

# `/*0a80*/  @P0 BRA `(.L_x_12) ;` or `BRA 0x1f0` ; cuobjdump or nvdisasm
_LINE = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+(?:\{\s*)?(@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
                   r"(.*)$")
_TARGET = re.compile(r"(?:0x)([0-9a-fA-F]+)|`?\(\.L_x_(\d+)\)`?")
_LABEL = re.compile(r"^\s*\.L_x_(\d+):")
_FUNCTION = re.compile(r"^\s*(?:Function : |\.text\.)(\S+?):?\s*$")

TENSOR = ("HMMA", "HGMMA", "IMMA", "BMMA")

# instruction classes, first match wins
CLASSES = (
    ("mma", TENSOR),
    ("ldsm", ("LDSM",)),
    ("ldgsts", ("LDGSTS", "LDGDEPBAR")),
    ("smem", ("LDS", "STS", "LDSU")),
    ("global", ("LDG", "STG", "LD", "ST", "RED", "ATOM", "ATOMG")),
    ("shfl", ("SHFL",)),
    ("mufu", ("MUFU",)),
    ("fp32", ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FCHK", "FSET", "FRND", "FMUL32I",
              "FADD32I", "FFMA32I", "HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "DADD", "DMUL", "DFMA",
              "DSETP")),
    ("convert", ("F2F", "F2FP", "F2I", "I2F", "I2FP", "F2IP")),
    ("barrier", ("BAR", "DEPBAR", "MEMBAR", "WARPSYNC", "ERRBAR", "ARRIVES", "SYNCS")),
    ("control", ("BRA", "BSSY", "BSYNC", "EXIT", "RET", "CALL", "JMP", "BREAK", "BPT", "YIELD", "WARPGROUP")),
)


@dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str          # with modifiers: "HMMA.16816.F32"
    predicate: str       # "" or "@P0", "@!PT"
    target: int | None   # a branch's target address


@dataclass(frozen=True)
class Loop:
    start: int
    end: int             # address of the backward branch
    instructions: tuple[Instruction, ...]

    def counts(self) -> "collections.Counter[str]":
        """Instructions per class (see CLASSES; "int" for integer/address arithmetic and moves)."""
        return collections.Counter(classify(i.opcode) for i in self.instructions)

    @property
    def mma(self) -> int:
        return sum(1 for i in self.instructions if i.opcode.split(".")[0] in TENSOR)

    @property
    def hmma_16816(self) -> float:
        """The tensor instructions as warp-level m16n8k16 HMMA equivalents: an HMMA.16816 is
        one, an HMMA.1688 a half, a warpgroup's HGMMA.64xNx16 (issued by each of its four
        warps) N / 8: one HMMA's multiply-adds per warp. Ratios per HMMA stay comparable
        between mma.sync and wgmma kernels."""
        total = 0.0
        for i in self.instructions:
            base, *mods = i.opcode.split(".")
            if base not in TENSOR:
                continue
            shape = re.fullmatch(r"(\d+)x(\d+)x(\d+)", mods[0]) if mods else None
            if base == "HGMMA" and shape:
                total += int(shape[2]) / 8 * int(shape[3]) / 16
            elif base == "HMMA" and mods and mods[0] == "1688":
                total += 0.5
            else:
                total += 1
        return total


def classify(opcode: str) -> str:
    base = opcode.split(".")[0]
    for name, ops in CLASSES:
        if base in ops:
            return name
    return "int"


def functions(sass: str) -> dict[str, list[Instruction]]:
    """Each kernel's instructions, by function name, in address order (a new dict of new lists
    at every call: the parse of a text is kept, `_parsed`)."""
    return {name: list(insns) for name, insns in _parsed(sass).items()}


@functools.lru_cache(maxsize=8)
def _parsed(sass: str) -> dict[str, tuple[Instruction, ...]]:
    """`functions`, kept for the last few texts: a kernel's model check reads one SASS text
    three times (its main loop's counts, its epilogue and the main loop again: sass_loops.py),
    and the parse, line by line, was most of the check's own CPU time."""
    out: dict[str, list[Instruction]] = {}
    labels: dict[str, dict[str, int]] = {}
    current = None
    pending: list[str] = []
    for line in sass.splitlines():
        f = _FUNCTION.match(line)
        if f:
            current = f.group(1)
            out.setdefault(current, [])
            labels.setdefault(current, {})
            continue
        lab = _LABEL.match(line)
        if lab and current is not None:
            pending.append(lab.group(1))
            continue
        m = _LINE.match(line)
        if not m or current is None:
            continue
        address = int(m.group(1), 16)
        for name in pending:
            labels[current][name] = address
        pending = []
        opcode, rest = m.group(3), m.group(4)
        target = None
        if opcode.split(".")[0] == "BRA":
            t = _TARGET.search(rest)
            if t:
                target = int(t.group(1), 16) if t.group(1) else -int(t.group(2)) - 1   # label: resolved below
        out[current].append(Instruction(address, opcode, (m.group(2) or "").strip(), target))
    parsed: dict[str, tuple[Instruction, ...]] = {}
    for name, insns in out.items():     # nvdisasm's labels to addresses
        resolved = []
        for i in insns:
            if i.target is not None and i.target < 0:
                i = Instruction(i.address, i.opcode, i.predicate, labels[name].get(str(-i.target - 1)))
            resolved.append(i)
        parsed[name] = tuple(resolved)
    return parsed


def loops(insns: list[Instruction]) -> list[Loop]:
    """Every backward branch's loop: from its target to the branch, counted instructions only."""
    found = []
    for i in insns:
        if i.target is not None and i.target <= i.address and i.predicate != "@!PT":
            body = tuple(j for j in insns if i.target <= j.address <= i.address
                         and not j.opcode.startswith("NOP") and j.predicate != "@!PT")
            found.append(Loop(i.target, i.address, body))
    return found


def main_loop(sass: str, function: str | None = None, scalar: bool = False) -> Loop | None:
    """The main loop of `function` (default: the kernel with the most tensor instructions);
    `scalar`: of a loop specialised two ways by a size test, the one copying a value at a
    time (the sizes fail the test), else the one with the cp.async copies."""
    funcs = functions(sass)
    if not funcs:
        return None
    if function is None:
        function = max(funcs, key=lambda f: (sum(1 for i in funcs[f] if i.opcode.split(".")[0] in TENSOR),
                                             len(funcs[f])))
    candidates = loops(funcs[function])
    if not candidates:
        return None
    with_mma = [lp for lp in candidates if lp.mma]
    if with_mma:
        # innermost: no other loop with tensor instructions inside it (a loop over blocks
        # around the chunk loop, and a peeled last chunk, are not the main loop)
        inner = [lp for lp in with_mma if not any(o is not lp and lp.start <= o.start and o.end <= lp.end
                                                   for o in with_mma)]
        # a tie is one loop specialised two ways (16-byte or scalar copies, chosen once by a
        # size test): the one with the cp.async copies is the fast path; `scalar`: the other
        # (nvcc may unroll the two differently: the fewest LDGSTS first, then the most mma)
        if scalar:
            return max(inner, key=lambda lp: (-lp.counts()["ldgsts"], lp.mma,
                                              -(lp.end - lp.start)))
        return max(inner, key=lambda lp: (lp.mma, lp.counts()["ldgsts"], -(lp.end - lp.start)))
    return max(candidates, key=lambda lp: (len(lp.instructions), -(lp.end - lp.start)))
