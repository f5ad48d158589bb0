"""The paper's formulas for a plan: M, H and FLOPs as sympy expressions of sizes and tiles.

Axis sizes become symbols named after the axes; each chosen tile becomes a
symbol in the paper's notation: `g_q` (group of q at the block level), `s_x`
(stream chunk of x), `t_q` (a thread's tile of q), `w_d` (threads sharing d).
A tile of 1 or of the whole axis is written as such, as the paper does.
"""

from __future__ import annotations

from dataclasses import replace

from dataclasses import dataclass

from .cost import Choice, Cost, evaluate


@dataclass(frozen=True)
class Relabel:
    """One axis at one level: how it is partitioned, in the paper's notation."""

    axis: str
    level: str
    kind: str           # group | stream | whole | split
    symbol: str | None  # g_q, s_x, t_q, w_d (None when whole)
    size: int | None    # the chosen size (None: symbolic whole)

    def text(self) -> str:
        if self.kind == "whole":
            return f"{self.axis} whole"
        if self.kind == "split":
            warps = f" ({self.size // 32} warps)" if self.size and self.size > 32 else ""
            return f"{self.axis} split over {self.symbol} = {self.size} threads{warps}"
        return f"{self.axis} -> {self.symbol} = {self.size}"


def axis_symbols(axes) -> dict:
    import sympy        # (sympy loads only where formulas are made: explain, draw's table)
    return {a: sympy.Symbol(a, positive=True, integer=True) for a in axes}


def relabelling(choice: Choice, model, sizes: dict, level_names) -> list[Relabel]:
    out = []
    group = dict(choice.group)
    level1 = level_names[1]
    # (an axis no array or op of the kernel has, such as the axes a product reads merged into
    # one, `(h*d)`, or a renamed view's source axis, is not part of the kernel: not listed)
    used = {a for x in (*model.arrays, *model.work) for a in x.axes}
    for a in model.axes:
        if a in group:
            out.append(Relabel(a, level1, "group", f"g_{a}", group[a]))
        elif choice.stream and choice.stream[0] == a:
            out.append(Relabel(a, level1, "stream", f"s_{a}", choice.stream[1]))
        elif a in used:
            out.append(Relabel(a, level1, "whole", None, sizes[a]))
    if len(level_names) > 2:
        level2 = level_names[2]
        for a, t in choice.thread:
            if t > 1:
                out.append(Relabel(a, level2, "group", f"t_{a}", t))
        if choice.split:
            a, w = choice.split
            out.append(Relabel(a, level2, "split", f"w_{a}", w))
        if choice.inner:
            a, u = choice.inner
            out.append(Relabel(a, level2, "stream", f"u_{a}", u))
    return out


def tile_values(choice: Choice) -> dict[str, int]:
    """Tile symbol name -> chosen value, in the order symbolic_choice makes them (no sympy)."""
    out = {f"g_{a}": g for a, g in choice.group if g > 1}
    if choice.stream:
        out[f"s_{choice.stream[0]}"] = choice.stream[1]
    out.update({f"t_{a}": t for a, t in choice.thread if t > 1})
    if choice.split:
        out[f"w_{choice.split[0]}"] = choice.split[1]
    if choice.inner:
        out[f"u_{choice.inner[0]}"] = choice.inner[1]
    return out


def skeleton(choice: Choice) -> tuple:
    """What the symbolic formulas of a choice depend on: which tiles are symbols (tiles of 1
    are written as 1) and the warps; not the tile values."""
    return (tuple((a, g > 1) for a, g in choice.group),
            choice.stream[0] if choice.stream else None,
            tuple((a, t > 1) for a, t in choice.thread),
            choice.split[0] if choice.split else None,
            choice.inner[0] if choice.inner else None, tuple(choice.warps))


def symbolic_choice(choice: Choice) -> tuple[Choice, dict]:
    """The choice with every non-trivial tile replaced by its symbol; symbol -> value."""
    import sympy
    values = {}

    def sym(name, v):
        s = sympy.Symbol(name, positive=True, integer=True)
        values[s] = v
        return s

    group = tuple((a, sym(f"g_{a}", g) if g > 1 else 1) for a, g in choice.group)
    stream = (choice.stream[0], sym(f"s_{choice.stream[0]}", choice.stream[1])) \
        if choice.stream else None
    thread = tuple((a, sym(f"t_{a}", t) if t > 1 else 1) for a, t in choice.thread)
    split = (choice.split[0], sym(f"w_{choice.split[0]}", choice.split[1])) \
        if choice.split else None
    inner = (choice.inner[0], sym(f"u_{choice.inner[0]}", choice.inner[1])) \
        if choice.inner else None
    return Choice(group, stream, thread, split, inner, choice.warps,
                  instruction=choice.instruction), values


def symbolic_cost(plan_kernel, target, values: bool = True) -> tuple[Cost, dict]:
    """(symbolic Cost in values or bytes, tile symbol -> chosen value)."""
    model = plan_kernel.model
    sizes = axis_symbols(model.axes)
    choice, tile_values = symbolic_choice(plan_kernel.choice)
    sched = plan_kernel.schedule
    if sched is not None and sched.resident:     # the one chunk is the whole axis (the
        axis = choice.stream[0]                  # schedule's decision: passes.staged_once)
        tile_values.pop(choice.stream[1], None)
        choice = replace(choice, stream=(axis, sizes[axis]))
    cost = evaluate(model, plan_kernel.columns, choice, sizes, target, symbolic=True,
                    values=values)
    return cost, tile_values


def simplify(expr):
    """The printed form of a formula: factored. (sympy.factor alone gives the same text as
    factor(simplify(.)) on every formula of the library, 978 of them on four targets at two
    sizes, eleven times faster, and without simplify's import of sympy.physics.units.)"""
    import sympy
    try:
        return sympy.factor(expr)
    except Exception:  # sympy can fail on Max of many terms; keep it as is
        return expr
