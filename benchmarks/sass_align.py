"""What a block of a CUDA-core kernel runs where its SASS's loops and its CUDA's do not pair one
to one (sass_simt.block_run's fallback): the two loop trees aligned, chunk loops by the share
of chunks a mask lets the kernel visit and compute.

block_run pairs the blocks' loop's inner loops with the CUDA's element loops in order, one to
one. Attention on the CUDA cores and paged attention defeat that: nvcc unrolls a lane's loop
over the head whole in one kernel (`for (j = lane; j < 64; j += 32)`: no SASS loop) and not in
another (`j += 16`), compiles a data-bounded prologue (codegen/masks.data_span: the block's
first and last chunk from the data) into loops of its own, unrolled by 16 with remainders,
and inlines the prelude's `napkin_block_range` with a loop over the warps. Here both sides
are trees (a loop's parent: the smallest loop around it) aligned level by level (the most
pairs in order, a C loop paired with a SASS loop of the same memory kinds: LDS, STS, LDG,
STG of what the loop's accesses that vary along it read and write; a chunk loop, the C's
`c0`, with one holding a barrier). A paired loop is weighted as block_run weights it (its
trips over nvcc's unroll); a C loop with no SASS loop is unrolled whole (its copies sit in
its parent, counted there); a SASS loop with no C loop (a remainder nvcc peeled, a loop of
the prelude) counts once per pass of its parent, as the main-loop rule counts it. A chunk
loop runs `chunks * visited` times its head (the data-bounded loop's share, Cost.visited)
and `chunks * computed` times what the hidden chunk's `continue` skips (Cost.computed).
None when the chunk loops do not pair."""

from __future__ import annotations

import math
import re

from sass_simt import _CTYPE_BYTES, _HEADER, _POINTER, _body, _untaken, _value, skipped, trips

KINDS = ("LDS", "STS", "LDG", "STG")
_HELPERS = {"napkin_block_range": 2, "napkin_block_sum": 1}     # LDS per trip over warps


def c_tree(cuda: str, sizes: dict, chunk, warps: int, tail=None) -> list[dict] | None:
    """Every loop of a kernel's CUDA inside the blocks' loop, nested: {"trip", "accesses",
    "kinds", "chunk", "children"}; the prelude's block reductions as loops of `warps` trips.
    None where a header reads what is not a size."""
    skipped = _untaken(cuda, sizes)
    found = []
    for m in _HEADER.finditer(cuda):
        var, start, end, step = m.groups()
        before = cuda[max(0, m.start() - 40):m.start()]
        body = _body(cuda, m.end())
        lo = cuda.find("{", m.end())
        span = (m.start(), lo + len(body) + 2)
        if var == "blk" or var == "off" or ("#pragma unroll" in before and
                                            "#pragma unroll 1\n" not in before):
            continue                      # the blocks' loop (the root), loops nvcc unrolls
        if re.fullmatch(r"c\d+", var):
            first, last = _value(start, sizes, chunk), _value(end, sizes, chunk)
            s = re.fullmatch(rf"{var} \+= \(?(\w+)\)?", step.strip())
            stride = _value(s.group(1), sizes, chunk) if s else None
            if None not in (first, last, stride) and first == 0 and 0 < last <= stride and \
                    not re.search(r"[a-z]\w*", re.sub(r"\((?:int|long long)\)", "", end)):
                continue                  # one chunk of a constant bound: no loop in the SASS
            found.append({"span": span, "chunk": True, "trip": None, "accesses": 0,
                          "kinds": frozenset(), "children": [],
                          "barrier": "__syncthreads" in body})
            continue
        if step.strip() == f"++{var}":
            stride = 1
        else:
            s = re.fullmatch(rf"{var} \+= \(?(\w+)\)?", step.strip())
            stride = _value(s.group(1), sizes, chunk) if s else None
        first, last = _value(start, sizes, chunk), _value(end, sizes, chunk)
        if stride is None or first is None or last is None:
            return None
        trip = trips(start, end, stride, sizes, chunk, tail)
        untaken = any(lo_ <= m.start() < hi for lo_, hi in skipped)
        accesses, kinds = _accesses(body, var)
        found.append({"span": span, "chunk": False, "trip": 0 if untaken else trip,
                      "untaken": untaken, "accesses": accesses,
                      "kinds": kinds, "children": [], "wide": _wide(cuda, m.start(), body),
                      "narrow": _narrow(cuda, m.start(), body)})
    for name, lds in _HELPERS.items():
        for m in re.finditer(rf"\b{name}\(", cuda):
            found.append({"span": (m.start(), m.start() + 1), "chunk": False, "trip": warps,
                          "accesses": lds, "kinds": frozenset({"LDS"}), "children": []})
    found.sort(key=lambda c: c["span"][0])
    return _nest(found, lambda c: c["span"])


def _wide(cuda: str, at: int, body: str) -> bool:
    """Whether a loop copies global memory 16 bytes an access (a copy's `cps`/`cpd` declared
    `uint4` in or before its body: the two versions of a size-tested copy name both pointers, the
    scalar one as `__half`), as its SASS loop's LDG.E.128 / STG.E.128 show: nvcc may lay out
    the branch the sizes do not take first, so loops pair by this too, not by order alone."""
    declared = dict((name, ctype) for ctype, name in _POINTER.findall(cuda[:at] + body))
    return any(declared.get(name) == "uint4" for name in set(re.findall(r"\b(cp[sd])\[", body)))


def _narrow(cuda: str, at: int, body: str) -> bool | None:
    """Whether a copy reads global memory 2 bytes an access (its `cps` declared `__half` or
    `__nv_bfloat16`: the scalar version of a size-tested copy, where the other reads pairs of
    halves as `unsigned int`), as its SASS loop's LDG.E.U16 show; None for a loop that is no
    copy (`cps` not read in it)."""
    if not re.search(r"\bcps\[", body):
        return None
    declared = dict((name, ctype) for ctype, name in _POINTER.findall(cuda[:at] + body))
    return _CTYPE_BYTES.get(declared.get("cps"), 4) == 2


def _accesses(body: str, var: str) -> tuple[int, frozenset]:
    """(distinct array accesses one iteration makes that vary along the loop, their memory
    kinds): shared memory (`smN`, `cpd`) read or written, global (`pN`, `cps`)."""
    varying = {var} | set(re.findall(r"for \((?:int|long long) (\w+) =", body))
    for name, value in re.findall(r"(\w+) = ([^;]+);", body):      # (declared or assigned)
        if set(re.findall(r"\w+", value)) & varying:
            varying.add(name)
    seen, kinds = {}, set()
    unrolled = _unrolled(body)
    for m in re.finditer(r"\b(sm\d+|p\d+|cp[sd])\[[^;]*?\](?=[ ;)=]|$)", body):
        text = m.group(0)       # (a copy's pointers, cps and cpd, may vary themselves)
        if not set(re.findall(r"\w+", text[text.index("["):])) & varying and \
                m.group(1) not in varying:
            continue
        # an access in a loop nvcc unrolls whole (`#pragma unroll`, a constant trip) is that
        # many accesses of the iteration
        seen[text] = max(seen.get(text, 1), math.prod(t for lo, hi, t in unrolled
                                                      if lo <= m.start() < hi))
        write = re.match(r"\s*=(?!=)", body[m.end():]) is not None
        shared = m.group(1).startswith("sm") or m.group(1) == "cpd"
        kinds.add(("ST" if write else "LD") + ("S" if shared else "G"))
    return sum(seen.values()), frozenset(kinds)


_UNROLLED = re.compile(r"#pragma unroll\n\s*for \(int (\w+) = (\d+); \1 < (\d+); \+\+\1\)")


def _unrolled(body: str) -> list[tuple[int, int, int]]:
    """(start, end, trips) of the loops in `body` nvcc unrolls whole: `#pragma unroll` over
    a constant range."""
    out = []
    for m in _UNROLLED.finditer(body):
        inner = _body(body, m.end())
        lo = body.find("{", m.end())
        out.append((lo, lo + len(inner) + 2, int(m.group(3)) - int(m.group(2))))
    return out


def _nest(items: list, span) -> list:
    """Items as a forest: each a child of the smallest item whose span holds its own."""
    roots = []
    for it in items:
        lo, hi = span(it)
        around = [o for o in items if o is not it and span(o)[0] <= lo and hi <= span(o)[1]
                  and span(o) != (lo, hi)]
        if around:
            min(around, key=lambda o: span(o)[1] - span(o)[0])["children"].append(it)
        else:
            roots.append(it)
    return roots


def s_tree(outer, inner: list) -> list[dict]:
    """The SASS loops inside the blocks' loop, nested: {"loop", "kinds", "chunk", "fill",
    "children"} (a loop crossing another's bounds, nvcc's out-of-line path of a divergent
    shuffle jumping back, is not inside the blocks' loop: mainloop.loops' caller drops it)."""
    from napkin.runtime import mainloop
    items, seen = [], set()
    for lp in sorted(inner, key=lambda lp: (lp.start, -lp.end)):
        if (lp.start, lp.end) in seen:
            continue
        seen.add((lp.start, lp.end))
        ops = {i.opcode.split(".")[0] for i in lp.instructions}
        kinds = frozenset(k for k in KINDS if k in ops)
        wide = any(i.opcode.split(".")[0] in ("LDG", "STG") and "128" in i.opcode.split(".")
                   for i in lp.instructions)
        narrow = any(i.opcode.split(".")[0] == "LDG" and "U16" in i.opcode.split(".")
                     for i in lp.instructions)
        items.append({"loop": lp, "kinds": kinds, "children": [], "wide": wide,
                      "narrow": narrow,
                      "chunk": any(o.startswith("BAR") for o in ops),
                      "fill": kinds == {"STS"},
                      "memory": sum(1 for i in lp.instructions
                                    if mainloop.classify(i.opcode) in ("smem", "global"))})
    return _nest(items, lambda s: (s["loop"].start, s["loop"].end))


def _align(cs: list, ss: list) -> list[tuple[dict, dict]] | None:
    """The most pairs (c, s) in order with c and s alike (a chunk loop with a chunk loop, an
    element loop with a loop of its memory kinds), each pair's children aligned in turn;
    None where a chunk loop is left unpaired. The version of a size-tested copy the sizes do
    not take stays out of the order (nvcc may lay it out before the one they take, or its
    in-order place may hold the next copy's loop: swiglu's), paired after with a loop left
    over alike it."""
    every = cs
    cs = [c for c in cs if not c.get("untaken")]
    n, m = len(cs), len(ss)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = max(best[i + 1][j], best[i][j + 1],
                             best[i + 1][j + 1] + 1 if _alike(cs[i], ss[j]) else -1)
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if _alike(cs[i], ss[j]) and best[i][j] == best[i + 1][j + 1] + 1:
            pairs.append((cs[i], ss[j]))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i][j + 1]:     # (a SASS loop left over, a remainder nvcc
            j += 1                              # peeled, before a C loop left over)
        else:
            i += 1
    if sum(c["chunk"] for c, _ in pairs) != sum(c["chunk"] for c in cs) or \
            sum(s["chunk"] for _, s in pairs) != sum(s["chunk"] for s in ss):
        return None
    # the version of a size-tested copy the sizes do not take (trip 0), which nvcc may lay out
    # before the one they take, out of order: paired with a loop left over alike it
    for c in every:
        if not c["chunk"] and c["trip"] == 0 and all(c is not p for p, _ in pairs):
            left = [s for s in ss if all(s is not q for _, q in pairs) and _alike(c, s)]
            if left:
                pairs.append((c, left[0]))
    out = list(pairs)
    for c, s in pairs:
        inside = _align(c["children"], s["children"])
        if inside is None:
            return None
        out += inside
    return out


def _alike(c: dict, s: dict) -> bool:
    if c["chunk"] and not c["barrier"]:     # a chunk staging nothing (paged attention's
        return not s["chunk"] and not s["fill"] and bool(s["children"])   # gathers): no BAR
    if c["chunk"] or s["chunk"]:
        return c["chunk"] and s["chunk"]
    # (a copy's width: `narrow` None where unknown, a loop that is no copy)
    narrow = c.get("narrow"), s.get("narrow")
    return not s["fill"] and c["kinds"] == s["kinds"] and c.get("wide") == s.get("wide") \
        and (None in narrow or narrow[0] == narrow[1])


def aligned_run(outer, inner: list, cuda: str, sizes: dict, chunk, chunks: int,
                warps: int, visited: float = 1.0, computed: float = 1.0,
                tail=None) -> dict | None:
    """block_run's figures (`run`, `static`, `opcodes`, `loops`) with the trees aligned (see
    the module docstring), or None."""
    cs, ss = c_tree(cuda, sizes, chunk, warps, tail), s_tree(outer, inner)
    if cs is None:
        return None
    pairs = _align(cs, ss)
    if pairs is None or not any(c["chunk"] for c, _ in pairs) and any(s["chunk"] for s in ss):
        return None
    weight, skip, loops = {}, {}, []
    for c, s in pairs:
        lp = s["loop"]
        if c["chunk"]:
            weight[id(lp)] = chunks * visited
            skip[id(lp)] = (_skipped(lp), computed / visited if visited else 0.0)
            continue
        # nvcc unrolls an innermost loop (its memory instructions over one iteration's
        # accesses), not one around another
        unroll = max(round(s["memory"] / c["accesses"]), 1) \
            if c["accesses"] and not s["children"] else 1
        weight[id(lp)] = c["trip"] / unroll
        loops.append({"start": lp.start, "instructions": len(lp.instructions),
                      "trip": c["trip"], "unroll": unroll})

    def every(items):
        for it in items:
            yield it
            yield from every(it["children"])
    for s in every(ss):
        weight.setdefault(id(s["loop"]), 0.0 if s["fill"] else 1.0)
    everyone = [s["loop"] for s in every(ss)]
    unrun = skipped(outer, everyone, weight)
    run, classes = 0.0, {}
    for i in outer.instructions:
        w = 0.0 if any(lo < i.address < hi for lo, hi in unrun) else 1.0
        for lp in everyone:
            if lp.start <= i.address <= lp.end:
                w *= weight[id(lp)]
                if id(lp) in skip and skip[id(lp)][0][0] < i.address < skip[id(lp)][0][1]:
                    w *= skip[id(lp)][1]
        run += w
        op = i.opcode.split(".")[0]
        classes[op] = classes.get(op, 0.0) + w
    return {"run": run, "static": len(outer.instructions), "loops": loops, "opcodes": classes,
            "aligned": True}


def _skipped(loop) -> tuple[int, int]:
    """(branch, target) of the chunk loop's `continue` past a chunk the mask hides: of its
    forward branches before its first inner backward branch that jump past the last one, the
    widest; (0, 0) when there is none."""
    back = [i for i in loop.instructions if i.target is not None and i.target <= i.address
            and i.address < loop.end]
    if not back:
        return (0, 0)
    first, last = min(b.target for b in back), max(b.address for b in back)
    around = [(i.address, i.target) for i in loop.instructions if i.target is not None
              and i.predicate and i.address < first and last < i.target <= loop.end]
    return max(around, key=lambda r: r[1] - r[0]) if around else (0, 0)
