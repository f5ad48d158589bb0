"""What a block of a CUDA-core kernel runs, from its SASS with each loop weighted by its trips
(benchmarks/model_check.py's estimate for the CUDA-core kernels).

A CUDA-core kernel (codegen: the blocks' grid-stride loop, in it the chunk loops of each pass,
in them per-thread loops over elements: the copies `for (e = tid; e < N; e += threads)`, the
lanes over a row `for (j = lane; j < L; j += 32)`) runs most of its instructions in loops that
the main-loop rule (runtime/mainloop.py: the largest loop, counted once per chunk) counts once:
at rmsnorm 4096 a lane's loop over the row runs 128 times, at softmax 4096 the largest loop is
the blocks' loop itself, both passes' chunk loops in it. Here every instruction of the blocks'
loop counts the product of the weights of the loops around it inside it:

- a loop holding a barrier is a chunk loop: it runs once per chunk of the plan's stream
  (`chunks`, a pass's);
- a loop of stores to shared memory without a load is the zero fill of a tile past the arrays
  (nvcc's version of a copy loop for an empty row range): no block in range runs it, 0; of
  two copies of one copy loop nvcc specialised on the sizes, the longer counts, the other 0;
- every other loop is one of the emitted CUDA's element loops, in source order
  (`element_loops`): it runs `trip / unroll` times, `trip` the C loop's trips per thread (read
  off its header with the sizes) and `unroll` how many C iterations nvcc put in one trip of
  the SASS loop (its memory instructions over those of one C iteration: distinct array
  reads and writes in the loop's body).

Instructions outside every inner loop (a remainder peeled off an unrolled loop, the row
statistics' shuffles) count once per pass of what is around them, every path once, as the
main-loop rule counts them. None when the SASS's loops and the CUDA's do not pair up."""

from __future__ import annotations

import math
import re

_HEADER = re.compile(r"for \((?:int|long long) (\w+) = ([^;]+); \1 < ([^;]+); ([^)]+)\)")


def element_loops(cuda: str, sizes: dict, chunk: int | None, tail=None) -> list[dict]:
    """The per-thread loops of a kernel's CUDA in source order: `trip` (per thread, for thread
    0: a lane-strided loop over L runs ceil(L / 32)) and `accesses` (distinct array reads and
    writes one iteration makes: `smN[...]` and `pN[...]` expressions indexed by the loop's
    variable or a name the body derives from it; nvcc hoists the others). A loop nvcc unrolls
    fully (`#pragma unroll`, the lanes' shuffle reduction over `off`, a constant trip from a
    constant start, a constant bound within one stride: a copy of one element) and the chunk and blocks' loops are left out. `sizes`: the value of each size parameter (`n0`...), `chunk`: the
    stream's chunk (`clen` of a full chunk), `tail`: the chunks' number and the last one's
    length (`trips`)."""
    out = []
    skipped = _untaken(cuda, sizes)
    for m in _HEADER.finditer(cuda):
        var, start, end, step = m.groups()
        before = cuda[max(0, m.start() - 40):m.start()]
        rolled = "#pragma unroll 1\n" in before     # a loop kept rolled: its trips count
        if "#pragma unroll" in before and not rolled or var in ("blk", "off") or re.fullmatch(r"c\d+", var):
            continue
        if step.strip() == f"++{var}":
            stride = 1
        else:
            s = re.fullmatch(rf"{var} \+= \(?(\w+)\)?", step.strip())
            if s is None:
                return []
            stride = _value(s.group(1), sizes, chunk)
        first = _value(start, sizes, chunk)
        last = _value(end, sizes, chunk)
        if stride is None or first is None or last is None:
            return []
        trip = trips(start, end, stride, sizes, chunk, tail)
        constant = not re.search(r"[a-z]\w*", re.sub(r"\((?:int|long long)\)", "", end))
        if constant and not rolled and (first == 0 and last <= stride or
                                        not re.search(r"\b(tid|lane)\b", start)):
            continue          # a constant bound within one stride: nvcc compiles an `if`;
                              # a constant trip from a constant start: unrolled whole
        body = _body(cuda, m.end())
        # the names that vary with the loop (its variable, what the body derives from it):
        # an access indexed by none of them is the same every iteration, hoisted by nvcc
        varying = {var}
        for name, value in re.findall(r"const \w+ (\w+) = ([^;]+);", body):
            if set(re.findall(r"\w+", value)) & varying:
                varying.add(name)
        found = {a for a in re.findall(r"\b(?:sm\d+|p\d+|cp[sd])\[[^;]*?\](?=[ ;)=]|$)", body)
                 if set(re.findall(r"\w+", a[a.index("["):])) & varying}
        accesses = len(found)
        width = _widths(cuda)
        nbytes = sum(width.get(a[:a.index("[")], 4) for a in found)
        if any(lo <= m.start() < hi for lo, hi in skipped):
            trip = 0          # the branch of a size test the sizes do not take
        out.append({"trip": trip, "accesses": accesses, "bytes": nbytes})
    return out


# the bytes one element of an array the CUDA names moves, by its C type (a kernel parameter
# `const __half* __restrict__ p0`, a buffer `float* sm0 = ...`, a copy's `const uint4* const
# cps`)
_CTYPE_BYTES = {"float": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "__half": 2,
                "__nv_bfloat16": 2, "long long": 8, "double": 8, "uint2": 8, "uint4": 16,
                "signed char": 1, "unsigned char": 1}
_POINTER = re.compile(r"\b(" + "|".join(sorted(_CTYPE_BYTES, key=len, reverse=True)) +
                      r")\* (?:__restrict__ |const )?((?:p|sm)\d+|cp[sd])\b")


def _widths(cuda: str) -> dict[str, int]:
    """array name -> the bytes of one of its elements (4 where its type is not found)."""
    return {name: _CTYPE_BYTES[ctype] for ctype, name in _POINTER.findall(cuda)}


def access_bytes(opcode: str) -> int:
    """The bytes one memory instruction moves a thread: LDS.64 two 32-bit values (nvcc's
    vector of two adjacent C accesses), LDG.E.128 four, LDS.U16 one 16-bit value."""
    parts = opcode.split(".")
    for width, nbytes in (("128", 16), ("64", 8), ("U16", 2), ("S16", 2), ("U8", 1), ("S8", 1)):
        if width in parts:
            return nbytes
    return 4


_SIZE_TEST = re.compile(r"if \(([^;{]*?) % (\d+) == 0\) \{")


def _untaken(cuda: str, sizes: dict) -> list[tuple[int, int]]:
    """(start, end) of the branches of the copies' size tests (`if (n % w == 0) {...} else
    {...}`, codegen/staging.py) that these sizes do not take."""
    out = []
    for m in _SIZE_TEST.finditer(cuda):
        size = _value(m.group(1), sizes, None)
        if size is None:
            continue
        then_end = m.end() + len(_body(cuda, m.end() - 1)) + 1
        taken = size % int(m.group(2)) == 0
        rest = cuda[then_end:then_end + 12]
        else_end = then_end
        if rest.lstrip().startswith("else {"):
            at = cuda.index("{", then_end)
            else_end = at + len(_body(cuda, at)) + 2
        out.append((then_end, else_end) if taken else (m.end(), then_end))
    return out


def _body(cuda: str, at: int) -> str:
    """The text of the loop body whose header ends at `at` (its braces)."""
    j = cuda.find("{", at)
    depth, k = 1, j + 1
    while depth and k < len(cuda):
        depth += {"{": 1, "}": -1}.get(cuda[k], 0)
        k += 1
    return cuda[j + 1:k - 1]


def _value(text: str, sizes: dict, chunk):
    """A header's integer expression with the sizes put in (C's integer division), the thread
    0's `tid` and `lane`; None when it reads anything else."""
    expr = re.sub(r"\((?:int|long long)\)", "", text)
    names = {"tid": 0, "lane": 0, "clen": chunk, **sizes}
    if any(n not in names or names[n] is None for n in re.findall(r"[A-Za-z_]\w*", expr)):
        return None
    try:
        return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, names))
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None


def trips(start: str, end: str, stride: int, sizes: dict, chunk, tail=None) -> float:
    """A loop's trips for thread 0, `ceil((end - start) / stride)`; where its bound reads the
    chunk's length `clen`, the mean over the stream's chunks (`tail`: their number and the
    last one's length; cross_entropy split over v at t = 1024, v = 50257: 7 chunks of the
    share s_v = 1571, 6 of 256 and 35, 56.1 trips of 4 lanes a chunk, where a full chunk's 64
    counted 14% more)."""
    def one(length):
        first, last = _value(start, sizes, length), _value(end, sizes, length)
        return max(math.ceil((last - first) / stride), 0)
    full = one(chunk)
    if tail is None or not chunk or not re.search(r"\bclen\b", end):
        return full
    count, length = tail
    return ((count - 1) * full + one(length)) / count


def block_run(sass_text: str, function: str, cuda: str, sizes: dict, chunk: int | None,
              chunks: int, warps: int = 1, visited: float = 1.0,
              computed: float = 1.0, tail=None) -> dict | None:
    """Warp instructions one warp runs per block (`run`; `opcodes`: the same per opcode, LDG,
    STS...), its blocks' loop counted once (`static`), and the inner loops as paired (`loops`:
    start, instructions, trip, unroll). `chunks`: the chunks each chunk loop runs, `visited`
    and `computed` the shares of them a mask lets it visit and compute (Cost.visited,
    Cost.computed), `warps` the block's. Where the loops do not pair one to one, the two
    loop trees aligned (sass_align.aligned_run: attention on the CUDA cores, paged
    attention)."""
    from napkin.runtime import mainloop
    insns = mainloop.functions(sass_text)[function]
    found = mainloop.loops(insns)
    if not found:
        return None
    c_loops = element_loops(cuda, sizes, chunk, tail)
    outer, c_loops = blocks_loop(found, c_loops)               # the blocks' grid-stride loop
    entry = entry_path(insns, found, outer)
    inner = [lp for lp in found if lp is not outer and outer.start <= lp.start
             and lp.end <= outer.end]
    chunked = [lp for lp in inner if any(i.opcode.startswith("BAR") for i in lp.instructions)]
    rest = [lp for lp in inner if lp not in chunked]
    fills = [lp for lp in rest if _memory(lp, "STS") and not _memory(lp, "LDS", "LDG")]
    paired = sorted((lp for lp in rest if lp not in fills), key=lambda lp: lp.start)
    weight, loops = {}, []
    # nvcc may compile a copy loop twice, specialised on a test of the sizes made once: two
    # copy loops (global loads, shared stores) one after the other, where the CUDA has one;
    # a pass runs one of them, counted as the longer (as sass_loops.versions counts an
    # if/else), the other not
    k = 1
    while len(paired) > len(c_loops) and k < len(paired):
        a, b = paired[k - 1], paired[k]
        if _copy(a) and _copy(b) and _signature(a) == _signature(b):
            short = min(a, b, key=lambda lp: len(lp.instructions))
            weight[id(short)] = 0
            paired.remove(short)
        else:
            k += 1
    # a loop around another (a chain's key loop around its inner product's, which nvcc may
    # split in two where it fully unrolls a short copy loop: the counts agree, the loops do
    # not pair one to one) is paired as trees
    nested = any(a is not b and a.start <= b.start and b.end <= a.end
                 for a in paired for b in paired)
    if len(paired) != len(c_loops) or visited != computed or nested:
        from sass_align import aligned_run
        out = aligned_run(outer, inner, cuda, sizes, chunk, chunks, warps, visited, computed,
                          tail)
        return out and {**out, "run": out["run"] + entry, "entry": entry}
    for lp in chunked:
        weight[id(lp)] = chunks
    for lp in fills:
        weight[id(lp)] = 0
    for lp, c in zip(paired, c_loops):
        memory = sum(access_bytes(i.opcode) for i in lp.instructions
                     if mainloop.classify(i.opcode) in ("smem", "global"))
        unroll = max(round(memory / c["bytes"]), 1) if c["bytes"] else 1
        weight[id(lp)] = c["trip"] / unroll
        loops.append({"start": lp.start, "instructions": len(lp.instructions),
                      "trip": c["trip"], "unroll": unroll})
    run, classes = 0.0, {}
    unrun = skipped(outer, inner, weight)
    for i in outer.instructions:
        w = 0.0 if any(lo < i.address < hi for lo, hi in unrun) else 1.0
        for lp in inner:
            if lp.start <= i.address <= lp.end:
                w *= weight[id(lp)]
        run += w
        op = i.opcode.split(".")[0]
        classes[op] = classes.get(op, 0.0) + w
    return {"run": run + entry, "static": len(outer.instructions), "loops": loops,
            "opcodes": classes, "entry": entry}


def skipped(outer, loops: list, weight: dict) -> list[tuple[int, int]]:
    """(branch, target) of the spans of the blocks' loop no block runs: around each loop no
    block runs (weight 0: the version of a size-tested copy the sizes do not take, a loop of
    no trips, a zero fill), the widest span a forward branch before it jumps over to past it
    that holds no loop a block runs, crosses none, and is entered by no branch from outside
    it (a guard past both versions of a copy holds the taken one, which the size test's
    branch enters: softmax's 16-byte copy, one round, no loop). nvcc peels up to three (or fifteen)
    bodies off a copy loop and sets it up before it, all inside the branch of the size test:
    counted once with the loop at 0, the one-value version cross_entropy's sizes do not take
    (v = 130, even: the 4-byte copy) added some 50 a row; layernorm's second pass at the
    small shape re-stages its row only where the row is longer than the chunk (`if (n > 77)`),
    some 120. Instructions strictly between branch and target count 0."""
    out = []
    for lp in loops:
        if weight.get(id(lp), 1.0) != 0:
            continue
        best = None
        for i in outer.instructions:
            if i.target is None or not (i.address < lp.start and lp.end < i.target
                                        <= outer.end + 16):
                continue
            first, last = i.address + 16, i.target - 16
            entered = any(j.target is not None and first <= j.target <= last and
                          not first <= j.address <= last for j in outer.instructions)
            if not entered and all(
                    m.end < first or m.start > last or m.start <= first and last <= m.end or
                    first <= m.start and m.end <= last and weight.get(id(m), 1.0) == 0
                    for m in loops):
                if best is None or i.target - i.address > best[1] - best[0]:
                    best = (i.address, i.target)
        if best is not None:
            out.append(best)
    return out


def blocks_loop(found: list, c_loops: list) -> tuple:
    """(the blocks' grid-stride loop the sizes run, the element loops in it). nvcc may unswitch
    the blocks' loop on a test of the sizes made once (embedding's `if (n % 8 == 0)`: a run of
    16-byte copies, else a rolled loop of one value a copy): two copies of it, one after the
    other, neither inside the other. The sizes take the copy without the loops of the branch
    they do not take (`element_loops`' trip 0): of the outermost loops, the one holding as many
    loops as the element loops the sizes take, where one does; else the longest (one copy)."""
    top = [lp for lp in found if lp.start < lp.end and       # (not the final `BRA` to itself)
           not any(o is not lp and o.start <= lp.start and lp.end <= o.end for o in found)]
    longest = max(found, key=lambda lp: lp.end - lp.start)
    taken = [c for c in c_loops if c["trip"] > 0]
    if len(top) < 2 or len(taken) == len(c_loops):
        return longest, c_loops
    fits = [lp for lp in top if sum(1 for o in found if o is not lp and lp.start <= o.start
                                    and o.end <= lp.end) == len(taken)]
    return (fits[0], taken) if len(fits) == 1 else (longest, c_loops)


def entry_path(insns: list, found: list, outer) -> int:
    """The instructions a block runs once before its blocks' loop (the kernel's parameters, the
    thread's coordinates, the reciprocals of the tiles' divisors nvcc hoists out of the loop):
    every launched block runs one trip of the loop (runtime/launches.py: a grid of every
    block), so this is per block as the loop is. The path from the entry to the loop: a branch
    over another outermost loop (the other copy of an unswitched loop) is taken, every other
    instruction counted once."""
    top = [lp for lp in found if lp is not outer and lp.end < outer.start]
    count, k = 0, 0
    while k < len(insns) and insns[k].address < outer.start:
        i = insns[k]
        count += not i.opcode.startswith("NOP") and i.predicate != "@!PT"
        if i.target is not None and i.address < i.target <= outer.start and \
                any(i.address < lp.start < i.target for lp in top):
            k = next(j for j, x in enumerate(insns) if x.address >= i.target)
            continue
        k += 1
    return count


def _memory(loop, *prefixes: str) -> int:
    return sum(1 for i in loop.instructions if i.opcode.split(".")[0] in prefixes)


def _copy(loop) -> bool:
    return bool(_memory(loop, "LDG") and _memory(loop, "STS"))


def _signature(loop) -> tuple:
    return tuple(_memory(loop, op) for op in ("LDG", "STG", "LDS", "STS"))
