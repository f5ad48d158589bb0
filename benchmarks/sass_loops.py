"""The main loop of a kernel's SASS as the model check reads it (benchmarks/model_check.py):
its instruction classes, the two score versions a chunk branches between, the copy loops and
their trips per thread (read off the emitted CUDA), and what a hidden chunk skips."""

from __future__ import annotations

import collections


def loop_counts(sass_text: str, function: str | None = None, trips: list | None = None,
                scalar: bool = False, split: bool = False) -> collections.Counter:
    """Instruction classes of the main loop, the loop over whole chunks (runtime/mainloop.py's
    rule, issue 14's): tensor (HMMA), fp32 (the FP32 pipe, with F2FP packing), mufu, every
    counted instruction (`all`, static: every path once), `hidden`: those a chunk the mask
    hides runs (all but the compute the kernel branches around, codegen/mma.py's
    `if (!skip)`), and, given `trips` (copies per thread of each copy statement, from the
    CUDA: copy_trips), `run` and `run_hidden`: the same with each copy loop counted as a trip
    of t copies runs it (setup + t x each, copy_loops) instead of its static code. `scalar`:
    the version of a loop specialised by a size test that copies a value at a time
    (mainloop.main_loop). `split`: the chunks the mask holds everywhere in run in a loop of
    their own (codegen/mma.py), the main loop, inside the chunk loop that runs the others
    masked: `run_inside` is the main loop's, `run_cut` the chunk loop's besides it
    (masked_chunk)."""
    from napkin.runtime import mainloop
    loop = mainloop.main_loop(sass_text, function, scalar)
    if loop is None:
        return collections.Counter()
    counts = loop.counts()
    packs = sum(1 for i in loop.instructions if i.opcode.startswith("F2FP"))
    out = collections.Counter({"tensor": counts["mma"], "fp32": counts["fp32"] + packs,
                               "mufu": counts["mufu"], "all": len(loop.instructions),
                               "hidden": len(loop.instructions) - len(skipped(loop))})
    # a chunk computes one of two versions of its scores (codegen/flash.py: without the mask
    # where it holds everywhere, with it where it cuts): each path counts its own version,
    # and of each if/else nvcc specialised within a version (ALiBi's slope tested once per
    # chunk) one side, the longer: `nested`, the instructions of the other sides
    small, large, nested = versions(loop, nested=True)
    out["inside_version"], out["cut_version"] = small, large
    found = copy_loops(loop)
    if trips is not None and found and len(found) == len(trips):
        # (paired in order within each kind: nvcc may place a size test's else branch, the
        # copies of a value, before the cp.async of its if branch)
        kinds = {v: iter(c for c in found if c["vector"] == v) for v in (True, False)}
        found = [next(kinds[v], None) for _, v in trips]
    if trips is not None and found and len(found) == len(trips) and None not in found:
        runs = [0 if t is None else c["setup"] + t * c["each"]
                for c, (t, _) in zip(found, trips)]
        delta = sum(r - c["static"] for c, r in zip(found, runs))
        out["run"], out["run_hidden"] = out["all"] - nested + delta, out["hidden"] + delta
        # a hidden chunk does not prefetch a hidden next one (codegen/mma.py): its copies
        # run where the next chunk is computed, which the computed chunks' count holds
        out["run_hidden"] -= sum(runs)
        out["copy_loops"] = len(found)
    else:                     # no copy loop told apart: the static count stands
        out["run"], out["run_hidden"] = out["all"] - nested, out["hidden"]
    out["run_cut"], out["run_inside"] = out["run"] - small, out["run"] - large
    if split and function is not None:
        cut = masked_chunk(sass_text, function, loop)
        if cut is not None:
            out["inside_version"], out["cut_version"] = out["all"], cut
            out["run_cut"], out["run_inside"] = cut, out["run"]
    return out


def masked_chunk(sass_text: str, function: str, loop) -> int | None:
    """Instructions a chunk the mask cuts runs where the unmasked chunks have a loop of their
    own (`loop`, codegen/mma.py: `for (; c0 < cfull && whole; ...)`) inside the chunk loop:
    the innermost loop around it, less its instructions (the masked chunk's body and the
    loops' tests); None when no loop holds it."""
    from napkin.runtime import mainloop
    found = mainloop.loops(mainloop.functions(sass_text)[function])
    around = [lp for lp in found if lp.start <= loop.start and loop.end <= lp.end
              and (lp.start, lp.end) != (loop.start, loop.end)]
    if not around:
        return None
    outer = min(around, key=lambda lp: lp.end - lp.start)
    return len(outer.instructions) - len(loop.instructions)


def epilogue(sass_text: str, function: str | None = None) -> int:
    """Instructions a block runs once after its chunk loop (the epilogue over the fragments,
    the stores, a row statistic's merge): those after the last loop holding HMMA, up to the
    end of the loop around the main loop (the blocks' grid-stride loop) or of the function,
    static (every path once). 0 when there is no main loop of tensor instructions."""
    from napkin.runtime import mainloop
    funcs = mainloop.functions(sass_text)
    main = mainloop.main_loop(sass_text, function)
    if main is None or not main.mma:        # (a CUDA-core kernel's: not estimated here)
        return 0
    if function is None:
        function = next(f for f, ins in funcs.items() if any(i.address == main.start for i in ins))
    insns = funcs[function]
    found = mainloop.loops(insns)
    # the loops around the main loop (the blocks' grid-stride loop) hold its HMMA too: the
    # last chunk loop is the last loop holding HMMA that is not one of them
    around = [lp for lp in found if lp.start <= main.start and main.end <= lp.end
              and (lp.start, lp.end) != (main.start, main.end)]
    last = max(lp.end for lp in found if lp.mma and lp not in around)
    around = [lp.end for lp in around if lp.end > last]
    end = min(around) if around else insns[-1].address
    # the last chunk where the chunk loop stops short of it (codegen: `if (cfull < cend)`,
    # the partial chunk's body with its HMMA) is one of the chunks the estimate counts the
    # main loop for (ceil(size / chunk) of them): it runs instead of a trip of the loop, so
    # the block's own code starts after its last tensor instruction (static: counted once
    # per block, it was one chunk more than the kernel runs, sliding-window attention's
    # 450 of 995 a warp, 1.26 static SASS/model at the default sizes)
    tail = [i.address for i in insns if last < i.address <= end
            and i.opcode.split(".")[0] in mainloop.TENSOR]
    if tail:
        last = max(tail)
    return sum(1 for i in insns if last < i.address <= end)


def versions(loop, nested: bool = False) -> tuple:
    """(instructions of the smaller, of the larger) of two alternatives the loop branches
    between, `if (t) {A} else {B}` with no tensor instruction in either (a conditional
    forward branch to B, whose previous instruction branches forward past B), the largest
    such pair; (0, 0) when there is none. Each counts the instructions one pass through it
    issues (`path`: of an if/else nested in it, the longer side). `nested=True` adds a
    third figure, the instructions of the pair a chunk never issues besides the other
    alternative (the shorter sides nested in them)."""
    from napkin.runtime import mainloop
    body = loop.instructions
    best, pair = (0, 0), None
    for k, t, e in _diamonds(body):
        if any(i.opcode.split(".")[0] in mainloop.TENSOR for i in body[k + 1:e]):
            continue
        if pair is None or e - k - 1 > pair[2] - pair[0] - 1:
            pair = (k, t, e)
    if pair is not None:
        k, t, e = pair
        best = tuple(sorted((path(body, k + 1, t), path(body, t, e))))
        static = e - k - 1
    return (*best, static - sum(best) if pair else 0) if nested else best


def _diamonds(body) -> list[tuple[int, int, int]]:
    """Every `if (t) {A} else {B}` of `body` as (the index of its conditional branch, of B's
    first instruction, of the first instruction after B: where A's last one jumps)."""
    at = {i.address: k for k, i in enumerate(body)}
    out = []
    for k, b in enumerate(body):
        if b.target is None or b.target <= b.address or not b.predicate or b.target not in at:
            continue
        t = at[b.target]
        jump = body[t - 1] if t > k + 1 else None
        if jump is None or jump.target is None or jump.target <= jump.address or jump.predicate \
                or jump.target not in at:
            continue
        out.append((k, t, at[jump.target]))
    return out


def path(body, lo: int, hi: int) -> int:
    """Instructions on the longest path from body[lo] to the end of body[lo:hi], through
    its forward branches (an unconditional one does not fall through; one leaving the range
    ends the path there): what one pass issues when each branch inside goes the longer way
    (ALiBi's cut version holds two, specialised on the slope)."""
    import bisect
    addresses = [i.address for i in body]
    longest = [0] * (hi - lo + 1)
    for k in range(hi - 1, lo - 1, -1):
        i, nexts = body[k], []
        if not (i.target is not None and not i.predicate) or i.target <= i.address:
            nexts.append(k + 1)
        if i.target is not None and i.target > i.address:
            # (the first counted instruction at or past the target: a NOP is not counted)
            nexts.append(bisect.bisect_left(addresses, i.target))
        longest[k - lo] = 1 + max((longest[n - lo] for n in nexts if n <= hi), default=0)
    return longest[0]


def copy_loops(loop) -> list[dict]:
    """The copies into shared memory in `loop` that nvcc keeps as loops (codegen/tiles.py's
    rounds past UNROLLED, `#pragma unroll 1`: cp.async, or a value at a time, LDG and STS),
    one per copy statement. Per statement: `static`, the instructions of its code (from the
    end of the one before, or the loop's start, to its loop's backward branch), `each`,
    those of one copy (the loop's body over its LDGSTS, or STS), and `setup`, the rest
    (static less one `each` per copy)."""
    from napkin.runtime import mainloop
    body = loop.instructions
    inner = [i for i in body if i.target is not None and i.target <= i.address
             and i.address < loop.end and i.predicate != "@!PT"]
    out, start = [], loop.start
    for br in sorted(inner, key=lambda i: i.address):
        unrolled = [i for i in body if br.target <= i.address <= br.address]
        vector = any(i.opcode.startswith("LDGSTS") for i in unrolled)
        n = sum(1 for i in unrolled if i.opcode.startswith("LDGSTS")) or \
            sum(1 for i in unrolled if i.opcode.startswith("STS"))
        if not n or any(i.opcode.split(".")[0] in mainloop.TENSOR for i in unrolled):
            continue
        code = [i for i in body if start <= i.address <= br.address]
        if any(i.opcode.split(".")[0] in mainloop.TENSOR for i in code):
            code = [i for i in code if i.address >= max(
                j.address for j in code if j.opcode.split(".")[0] in mainloop.TENSOR)]
        ldgsts = sum(1 for i in code if i.opcode.startswith("LDGSTS")) or \
            sum(1 for i in code if i.opcode.startswith("STS"))
        each = len(unrolled) / n
        out.append({"static": len(code), "each": each, "setup": len(code) - ldgsts * each,
                    "ldgsts": ldgsts, "vector": vector})
        start = br.address + 1
    return out


def kernel_source(cuda: str, name: str) -> str:
    """The text of kernel `name` in a .cu file of several: from its `__global__` to the next."""
    import re
    at = re.search(r"__global__[^{;]*?\b" + re.escape(name) + r"\(", cuda)
    if at is None:
        return ""
    end = cuda.find("__global__", at.end())
    return cuda[at.start():end if end >= 0 else len(cuda)]


def copy_trips(cuda: str, version: int = 0, sizes: dict | None = None) -> list[tuple]:
    """Copies each thread makes per chunk, per copy statement of the chunk loop that nvcc
    keeps as a loop, read off the emitted CUDA: `#pragma unroll 1` then `for (int r = 0; r <
    R; ++r) { ... }` holding a cp.async or a copy of one value (codegen/tiles.py): (R,
    whether it is cp.async) (the loops unrolled whole are straight code, counted as they
    stand). `version`: of a chunk
    loop specialised by a size test (16-byte or one-value copies), which one (0: the
    first); `sizes` (the size parameters' values): a copy inside the branch of a tile's own
    size test (`if (n1 % 8 == 0) {...} else {...}`: FlashAttention's, a chain's) that the
    sizes do not take runs no trip (None)."""
    import re
    starts = list(re.finditer(r"for \((?:int|long long) c0 = ", cuda))
    if len(starts) <= version:
        return []
    start = starts[version]
    end = cuda.find("napkin_cp_async_commit", start.end())
    text, out = cuda[start.end():end], []
    untaken = _untaken(text, sizes) if sizes else []
    for m in re.finditer(r"#pragma unroll 1\s*for \(int r = 0; r < (\d+); \+\+r\) \{", text):
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        vector = "napkin_cp_async_" in text[m.end():j]
        if vector or ")[0] = " in text[m.end():j]:
            out.append((None if any(a <= m.start() < b for a, b in untaken) else int(m[1]),
                        vector))
    return out


def _untaken(text: str, sizes: dict) -> list[tuple[int, int]]:
    """(start, end) in `text` of each branch of a size test `if (nX % W == 0 ...) {...} else
    {...}` that `sizes` do not take."""
    import re
    out = []
    for m in re.finditer(r"if \(((?:n\d+ % \d+ == 0(?: && )?)+)\) \{", text):
        taken = all(sizes[n] % int(w) == 0 for n, w in re.findall(r"(n\d+) % (\d+) == 0", m[1])
                    if n in sizes)
        close = _close(text, m.end())
        other = re.match(r"\s*else \{", text[close:])
        if taken and other:
            out.append((close, _close(text, close + other.end())))
        elif not taken:
            out.append((m.end(), close))
    return out


def _close(text: str, j: int) -> int:
    """The position past the brace closing the block opened just before `j`."""
    depth = 1
    while depth and j < len(text):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return j


def scalar_version(cuda: str, sizes: dict) -> bool:
    """Whether the plan's sizes fail the size test that picks a chunk loop's version
    (codegen/mma.py: `if (n1 % 8 == 0 && ...)` around the pipeline, 16-byte copies, else
    one value at a time); `sizes`: the kernel's size parameters' values."""
    import re
    found = re.search(r"if \(((?:n\d+ % \d+ == 0(?: && )?)+)\) \{", cuda)
    loops = [m.start() for m in re.finditer(r"for \((?:int|long long) c0 = ", cuda)]
    if found is None or len(loops) < 2 or found.start() > loops[0]:
        return False        # (no test around the chunk loop: a tile's own, inside it)
    tests = re.findall(r"(n\d+) % (\d+) == 0", found[1])
    return not all(sizes[n] % int(m) == 0 for n, m in tests if n in sizes)


def skipped(loop) -> list:
    """The instructions of `loop` inside the innermost forward branch that jumps over all its
    tensor instructions (a hidden chunk's skip), or none when no branch does."""
    from napkin.runtime import mainloop
    mma = [i.address for i in loop.instructions if i.opcode.split(".")[0] in mainloop.TENSOR]
    if not mma:
        return []
    around = [(i.address, i.target) for i in loop.instructions
              if i.target is not None and i.target > i.address and i.address < min(mma)
              and i.target > max(mma) and i.target <= loop.end]
    if not around:
        return []
    start, end = min(around, key=lambda r: r[1] - r[0])
    return [i for i in loop.instructions if start < i.address < end]
