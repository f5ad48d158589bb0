"""Intermediates stored in 16 bits because only tensor-core products read them (decided once).

An f32 intermediate that one kernel stores and other kernels read only as an operand of a
contraction beside a 16-bit partner enters those products rounded to 16 bits anyway, as it
is staged (tensorcore._rounded): stored in that dtype by the kernel that computes it, as if
the user had written `Q[b h t d]: f16 = ...`, it moves half the bytes, and attention reading
it is FlashAttention (which takes 16-bit loads). The decision is made once, between fusion
(which says what is stored) and tiling (which prices it), and recorded on the plan's graph
(`g.graph["stored16"]`: value node -> dtype) where `model.storage_dtype` reads it for every
stage after: the model's bytes and engines, the producer's store, the consumer's load, explain.

- candidates: a float array a kernel stores, with no declared storage dtype, not an output,
  whose every reader in another kernel is a contraction (through names and renaming views)
  or a copy that kernel stores, itself a candidate (`t22[b s m] = N1[b s m]`): linked, the
  two take one dtype (a rounded value copied into a 16-bit array is the same value);
- its dtype is the reading products' partner's when that is a 16-bit array (an input, a
  declared or output dtype). A partner that is itself a candidate (attention's Q and K) links
  the two; attention's probabilities (a softmax, rounded to 16 bits by FlashAttention) take
  any. A linked group with no 16-bit partner takes the one 16-bit dtype of the inputs it is
  computed from; none (an f32 input among them: the user's precision) or two keeps f32;
- fusion prices its candidates on the decision made as if every statement were a kernel
  (`anticipated`): a kernel loading such an array sees it in 16 bits;
- fall back: once tiled, an array that kernels read into products only off the tensor cores
  (the products stay on the CUDA cores for another reason) is stored in f32 after all, and
  the kernels are tiled again (the user's f32 inputs are never rounded: they are no
  candidates). One that a tensor-core kernel reads stays 16-bit for a CUDA-cores product
  reading it too: attention's backward recomputes the scores in FlashAttention and its
  chains and computes their logsumexp on the CUDA cores, from the same rounded Q and K (that
  kernel undid them, so the projected self-attention's gradient had no FlashAttention);
- a gradient's cotangents (`cotangents`: what is computed from the cotangent inputs a
  gradient names, compiler/cotangents.py), computed from inputs of one 16-bit dtype, qualify
  also where other kernels read them elementwise (`dR`, which `dWo = dR * A` and `dA = dR * Wo`
  read, and `dX = dR + ...` adds): those readers take it rounded, as PyTorch's autocast and
  FlashAttention's backward keep gradients in the inputs' dtype between kernels; a partner
  that stays f32 (a forward value) is staged rounded beside it (tensorcore._rounded) and
  does not keep it f32; and a forward value a product reads beside a cotangent the reading
  kernel computes (`dK = g15 * Q` in attention's backward chains) takes that partner as
  16-bit, staged rounded as FlashAttention's P is. This trades precision (one rounding of the cotangent, docs/
  gradients.md), so stored16_stages takes it only where the model predicts the kernels that
  store or load what it adds faster; `read_elementwise` records which (explain says so).
  An attention's output (`A = softmax[s](S) * V`) in a gradient qualifies so too: it is
  FlashAttention's O, which its backward reads in the inputs' dtype for the row term
  D = sum[d](dO * O) (the block's A, read by `R = X + A * Wo`, `dWo = dR * A` and D).
"""

from __future__ import annotations

from .graph import DiGraph, ancestors

from . import ir
from .canonical import through
from .reach import downstream, normalised

SIXTEEN = ("f16", "bf16")
KEY = "stored16"
COTANGENTS = "stored16_cotangents"


def decided(g: DiGraph) -> dict:
    """value node -> the 16-bit dtype it is stored in (empty when nothing was decided)."""
    return g.graph.get(KEY) or {}


def cotangents_decided(g: DiGraph) -> frozenset:
    """The decided nodes that are cotangents read elementwise too (module doc; explain)."""
    return frozenset(g.graph.get(COTANGENTS) or ())


def with_decision(g: DiGraph, chosen: dict, cotangents=()) -> DiGraph:
    """A copy of g carrying `chosen` (and which of them are `cotangents` some reader takes
    rounded, not only tensor-core products), none when it is empty (a new graph: planners
    memoise by its contents)."""
    out = g.copy()
    out.graph.pop(KEY, None)
    out.graph.pop(COTANGENTS, None)
    if chosen:
        out.graph[KEY] = dict(sorted(chosen.items()))
    if chosen and (mine := sorted(set(cotangents) & set(chosen))):
        out.graph[COTANGENTS] = tuple(mine)
    return out


def decision_token(base: int | None, g: DiGraph, out: DiGraph) -> int | None:
    """fingerprint.token of `out`, a with_decision copy of `g` whose token is `base`, without
    freezing it: derived from `base` and the decision `out` carries (None: not known, the
    planner freezes `out`). Only from a graph that carries no decision (a decided graph
    decided again is frozen), so that a copy with none is `g` itself, as frozen."""
    from .fingerprint import derived
    if base is None or KEY in g.graph or COTANGENTS in g.graph:
        return None
    chosen, cot = out.graph.get(KEY), out.graph.get(COTANGENTS)
    if chosen is None and cot is None:
        return base
    return derived(base, KEY, chosen, cot)


def planning_token(g: DiGraph) -> int | None:
    """fingerprint.token of g as planners take it: a graph carrying a decision gets the token
    decision_token derives from its undecided copy's, as the planners tiling made on it did
    (a planner made on the plan's graph alone, explain's baseline, shares their answers)."""
    from .fingerprint import token
    if KEY not in g.graph and COTANGENTS not in g.graph:
        return token(g)
    base = g.copy()
    base.graph.pop(KEY, None)
    base.graph.pop(COTANGENTS, None)
    return decision_token(token(base), base, g)


def decide(g: DiGraph, kernels, target, cotangents: frozenset = frozenset()) -> dict:
    """value node -> 16-bit dtype of every stored intermediate that qualifies (module doc);
    `cotangents`: the nodes computed from a gradient's cotangents, which qualify also where
    other readers read them elementwise (the backward's cotangents, module doc)."""
    from .model import storage_dtype
    stored = {}
    for k in kernels:
        for s in k.stores:
            if _candidate(g, s):
                stored[through(g, s)] = s
    links: dict = {v: set() for v in stored}
    concrete: dict = {v: set() for v in stored}
    bad = set()
    loose = {v for v in stored if (v in cotangents or cotangents and _attention_output(g, v))
             and _computed_from(g, v) in SIXTEEN}
    loose_computed = {v for v in cotangents if v not in stored and
                      _computed_from(g, v) in SIXTEEN} if cotangents else set()
    for v, s in stored.items():
        readers = [r for k in kernels if s in k.loads for r in (_readers(g, k, s),)]
        if v in loose:
            readers = [r for r in readers if r]     # its other readers take it rounded
        if not readers or any(r is None for r in readers):
            bad.add(v)
            continue
        for c, u in (x for r in readers for x in r):
            if c is None:       # a copy another kernel reads: its dtype (exact when 16-bit)
                if through(g, u) not in stored:
                    bad.add(v)
                    break
                links[v].add(through(g, u))
                continue
            x, y = ir.operands(g, c)
            if x == y:
                bad.add(v)
                break
            p = _source(g, y if x == u else x, stored)
            op = ir.op(g, p)
            if p in stored:
                links[v].add(p)
            elif isinstance(op, ir.Softmax) or p in loose_computed:
                continue                        # attention's probabilities: rounded by FA2;
                                                # a cotangent the kernel computes: staged rounded
            elif (isinstance(op, ir.Input) or not _candidate(g, p)) and \
                    storage_dtype(g, p) in SIXTEEN:
                concrete[v].add(storage_dtype(g, p))
            elif v in loose and not isinstance(op, ir.Input):
                concrete[v].add(_computed_from(g, v))   # an f32 forward value: staged rounded
            else:
                bad.add(v)
                break
    changed = True
    while changed:                              # a partner that stays f32 keeps its partners f32
        changed = False                         # (a cotangent's is staged rounded beside it)
        for v in stored:
            if v not in bad and v not in loose and links[v] & bad:
                bad.add(v)
                changed = True
    chosen, seen = {}, set()
    for v in stored:
        if v in bad or v in seen:
            continue
        group, stack = set(), [v]
        while stack:
            m = stack.pop()
            if m not in group:
                group.add(m)
                stack.extend((links[m] | {o for o in stored if m in links[o]}) - bad)
        seen |= group
        dtypes = set().union(*(concrete[m] for m in group)) or \
            {_computed_from(g, m) for m in group}
        if len(dtypes) == 1 and (dt := next(iter(dtypes))) in SIXTEEN and \
                target.engine_for("contraction", dt):
            chosen.update(dict.fromkeys(group, dt))
    return chosen


def anticipated(g: DiGraph, target, cotangents: frozenset = frozenset()) -> DiGraph:
    """The graph fusion prices its candidates on: the decision as if every statement were a
    kernel of its own (each intermediate stored, read by the products that read it), so that
    a kernel loading an intermediate the decision will store in 16 bits is priced so (a
    query computed before attention, `Qr = Q * g`, is FlashAttention's 16-bit load, where
    priced in f32 it was no attention at all). `cotangents`: a gradient's (decide), taken
    where they decide an engine too. The decision on the kernels fusion chose is made again
    after it (`decide`, then `fallen_back`)."""
    from .fuse import unfused_kernels
    from .model import storage_dtype
    chosen = decide(g, unfused_kernels(g), target, cotangents)
    # only where 16 bits decide the engine: attention's operands (FlashAttention or not), and
    # a product's operand whose partner is f32 undecided (`dW1_b = g52 * N2`, `dWq_b = dQ *
    # N1` of the block's gradient: f32 beside f32 stays on the CUDA cores, where fusion then
    # joins it with anything); beside a 16-bit partner a plain product reads an f32 operand
    # rounded as it stages it anyway (tensorcore._rounded)
    chosen = {v: dt for v, dt in chosen.items() if _attention_operand(g, v) or any(
        storage_dtype(g, p) == "f32" for p in _partners(g, v, chosen))}
    return with_decision(g, chosen, cotangents) if chosen else g


def _partners(g: DiGraph, v: int, chosen: dict):
    """The other operands of the contractions reading v (through names and views), each the
    array it reads (stopping at a decided one)."""
    for w in downstream(g, v, (ir.Assign, ir.View, ir.Reshape)):
        if isinstance(ir.op(g, w), ir.Contract):
            x, y = (_source(g, u, chosen) for u in ir.operands(g, w))
            if x != y and v in (x, y):
                yield y if x == v else x


def _attention_output(g: DiGraph, v: int) -> bool:
    """Whether v is an attention's output, a softmax's product with V (in a gradient,
    FlashAttention's O: stored in the inputs' dtype, its row term D = sum(dO * O) reads it
    rounded)."""
    while isinstance(ir.op(g, v), ir.Assign):
        v = ir.operands(g, v)[0]
    return isinstance(ir.op(g, v), ir.Contract) and any(
        isinstance(ir.op(g, _source(g, u)), ir.Softmax) for u in ir.operands(g, v))


def _attention_operand(g: DiGraph, v: int) -> bool:
    """Whether a contraction reading v (through names and views) is attention's: its scores
    normalised by a softmax, or a softmax's product with V."""
    return any(isinstance(ir.op(g, w), ir.Contract) and (normalised(g, w) or any(
        isinstance(ir.op(g, _source(g, m)), ir.Softmax) for m in ir.operands(g, w)))
        for w in downstream(g, v, (ir.Assign, ir.View, ir.Reshape)))


def read_elementwise(g: DiGraph, kernels, chosen) -> frozenset:
    """The decided arrays some kernel reads other than into products (a gradient's cotangents
    the decision took with `cotangents`: their other readers take them rounded)."""
    return frozenset(through(g, s) for k in kernels for s in k.loads
                     if through(g, s) in chosen and _readers(g, k, s) is None)


def fallen_back(g: DiGraph, plans, tensor_engines) -> set:
    """Decided arrays a kernel off the tensor cores reads into a product and no kernel on them
    does (to store in f32 after all). One a tensor-core kernel reads stays 16-bit for its
    other readers too (attention's backward: the logsumexp kernel's scores on the CUDA cores
    are then those attention and its chains recompute from the same rounded Q and K); a
    cotangent's elementwise readers take it rounded wherever they run."""
    mine = decided(g)
    into = [(kp.schedule.engine in tensor_engines, through(g, n)) for kp in plans
            for n in kp.kernel.loads if through(g, n) in mine and _into_product(g, kp.kernel, n)]
    return {n for on, n in into if not on} - {n for on, n in into if on}


def said(plan) -> list[str]:
    """One line per array stored in 16 bits by this decision (explain)."""
    from .model import array_name
    g = plan.graph
    cot = cotangents_decided(g)
    copies = _copies(g, [kp.kernel for kp in plan.kernels])
    return [f"{array_name(g, n)} stored as {dt}: " + (
        "an attention's output, as FlashAttention's O (its row term D reads it rounded)"
        if n in cot and _attention_output(g, n) else
        "a cotangent that tensor-core products read (its other readers take it rounded, "
        "as frameworks keep gradients in the inputs' dtype)" if n in cot else
        "read only by tensor-core products (rounded to it there anyway)" + (
            " and copied into " + ", ".join(sorted(copies[n])) + " (stored so: the same values)"
            if copies.get(n) else ""))
        for n, dt in decided(g).items()]


def _copies(g: DiGraph, kernels) -> dict:
    """value node -> names of the arrays a kernel stores it into again (a renamed copy)."""
    from .model import array_name
    out: dict = {}
    for k in kernels:
        for s in k.loads:
            for c, u in _readers(g, k, s) or ():
                if c is None:
                    out.setdefault(through(g, s), set()).add(array_name(g, u))
    return out


def declare(g: DiGraph, k) -> str:
    """N0606's fix where kernel k's products read f32 intermediates this decision left f32
    (a partner of theirs is read elementwise, or computed from an f32 input: a saved
    statistic): declaring them 16-bit (`Q[b h t d]: f16 = ...`) puts them on the tensor cores;
    empty where none."""
    from .model import array_name, storage_dtype
    found, loads = {}, {through(g, n) for n in k.loads}
    for c in k.nodes:
        if isinstance(ir.op(g, c), ir.Contract):
            for u in ir.operands(g, c):
                p = _source(g, u)
                if p in loads and _candidate(g, p) and storage_dtype(g, p) == "f32" and \
                        array_name(g, p).isidentifier():
                    found[array_name(g, p)] = ir.type_of(g, p).axes
    if not found:
        return ""
    (name, axes), *_ = found.items()
    return (f"declare {', '.join(f'`{n}`' for n in found)} 16-bit (`{name}[{' '.join(axes)}]: "
            "f16 = ...`: the tensor cores read it); ")


def _candidate(g: DiGraph, s: int) -> bool:
    """A stored float intermediate the user gave no storage dtype, not an output."""
    if isinstance(ir.op(g, s), (ir.Input, ir.Output)) or ir.type_of(g, s).dtype != "f32":
        return False
    for m in [s, *g.successors(s)]:
        op = ir.op(g, m)
        if isinstance(op, ir.Output) or (isinstance(op, ir.Assign) and op.dtype is not None):
            return False
    return True


def _readers(g: DiGraph, k, n: int):
    """(contraction, operand it reads n as) of everything kernel k computes from its load n,
    through names and views, and (None, the copy) where k stores it again (renamed: `t22[b s
    m] = N1[b s m]`); None when anything else reads it."""
    members, stores = set(k.nodes), set(k.stores)
    out, stack = [], [n]
    while stack:
        u = stack.pop()
        if u != n and u in stores:
            out.append((None, u))
            continue
        for v in g.successors(u):
            if v not in members:
                continue
            op = ir.op(g, v)
            if isinstance(op, (ir.Assign, ir.View, ir.Reshape)):
                stack.append(v)
            elif isinstance(op, ir.Contract):
                out.append((v, u))
            else:
                return None
    return out


def _into_product(g: DiGraph, k, n: int) -> bool:
    """Whether kernel k reads its load n (through names and views) as a product's operand."""
    members, stack, seen = set(k.nodes), [n], set()
    while stack:
        u = stack.pop()
        for v in g.successors(u):
            if v in members and v not in seen:
                seen.add(v)
                op = ir.op(g, v)
                if isinstance(op, ir.Contract):
                    return True
                if isinstance(op, (ir.Assign, ir.View, ir.Reshape)):
                    stack.append(v)
    return False


def _source(g: DiGraph, n: int, stored=()) -> int:
    """What n reads through names and renaming views, stopping at an array in `stored` (a
    renamed copy another kernel stores, `t50[b t m2] = N2[b t m2]`, is what is loaded)."""
    n = through(g, n)
    while n not in stored and isinstance(ir.op(g, n), (ir.View, ir.Reshape)):
        n = through(g, ir.operands(g, n)[0])
    return n


def _computed_from(g: DiGraph, n: int) -> str | None:
    """The one float dtype of the inputs n is computed from, or None."""
    found = {ir.op(g, m).dtype for m in ancestors(g, n) if isinstance(ir.op(g, m), ir.Input)
             and ir.kind_of_dtype(ir.op(g, m).dtype) == "float"}
    return found.pop() if len(found) == 1 else None
