"""Plan to kernel program: names, parameters and sizes for every kernel of a plan.

Global arrays are the inputs (in their storage dtypes), the intermediates one
kernel stores for another (f32, as intermediates are computed), and the
outputs (their storage dtypes). Runtime sizes are one `long long` parameter
per class of dynamic axes; static sizes are constants in the code.
"""

from __future__ import annotations

import math

from ..compiler import ir, register_arrays
from ..compiler.model import storage_dtype
from ..compiler.pitch import of as pitch_of_model
from ..compiler.plan import Plan
from . import cexpr, launch
from . import program as P
from ..compiler import schedule as schedules
from .chain import ChainLowering
from .flash import FlashLowering
from .kernel import KernelLowering
from .mma import MmaLowering
from .wgmma import WgmmaLowering
from .tail import Tail
from . import scatter as scatters

COUNTER = "%tiles"    # the counters of a last-block merge (tail.py): no diagram name has a %


def lower(plan: Plan) -> P.Program:
    """The kernel program of every kernel of the plan, in launch order."""
    g = plan.graph
    axes = g.graph["axes"]
    size_params: dict[str, str] = {}
    sizes: dict[str, str] = {}
    # a dynamic axis no input has is one no array uses (else N0305): it has no size at run time
    bound = {axes[a].rep for n in g.graph["inputs"].values() for a in ir.type_of(g, n).axes}
    # (an axis merged for one product, compiler/local_merge.py: the product of its parts')
    bound |= {info.rep for info in axes.values()
              if info.merged and all(axes[a].rep in bound for a in info.merged)}
    for name, info in axes.items():
        if info.size is not None:
            sizes[name] = cexpr.int_literal(info.size)
        elif info.derived is None and info.rep not in bound:
            sizes[name] = cexpr.int_literal(1)     # nothing reads it; no parameter to pass
        else:
            if info.rep not in size_params:
                size_params[info.rep] = f"n{len(size_params)}"
            sizes[name] = size_params[info.rep]
    dtypes = {}
    for n in g.graph["inputs"].values():
        dtypes[n] = ir.op(g, n).dtype
    for kp in plan.kernels:
        for n in kp.kernel.stores:
            dtypes[n] = storage_dtype(g, n)
    tails = {t.partial: (t, COUNTER + (str(j) if j else ""))     # compiler/last_block.py:
             for j, t in enumerate(plan.tails)}      # merges run by partial kernels' last blocks
    run_by_partial = {i for t in plan.tails for i in t.merges}   # (each its counters)
    kernels, scratches = [], []
    shared = {i: la for la in plan.launches for i in la.members}   # (compiler/siblings.py)
    for i, kp in enumerate(plan.kernels):
        if i in run_by_partial or i in shared and i != shared[i].members[0]:
            continue
        if i in shared:         # sibling products in one launch (codegen/launch.py)
            kernels.append(_siblings(plan, [plan.kernels[j] for j in shared[i].members],
                                     dtypes, sizes, size_params))
            continue
        if kp.schedule.engine == schedules.SCATTER:    # atomics into an f32 scratch, then
            names = {n: (f"p{j}", dtypes[n])          # its conversion (codegen/scatter.py)
                     for j, n in enumerate(kp.kernel.loads + kp.kernel.stores)}
            j = len(names)
            kernels.extend(scatters.programs(plan, kp, names, sizes, f"p{j}", f"p{j - 1}",
                                             size_params))
            scratches.append((scatters.scratch_name(kp), "f32",
                              ir.type_of(g, kp.kernel.stores[0]).axes))
            continue
        names: dict = {}
        params: list = []

        def add(n: int, role: str) -> None:
            name = f"p{len(params)}"
            names[n] = (name, dtypes[n])
            const = "const " if role == "load" else ""
            params.append(P.Param(name, f"{const}{cexpr.CTYPE[dtypes[n]]}* __restrict__", role,
                                  _array(g, n), ir.type_of(g, n).axes))
        for n in kp.kernel.loads:
            add(n, "load")
        added = {a.store for a in kp.schedule.across + kp.schedule.sums}
        for n in kp.kernel.stores:
            if n in added:          # a chain's product over its rows: atomics into f32 sums
                names[n] = (f"p{len(params)}", "f32")
                params.append(P.Param(names[n][0], "float* __restrict__", "store",
                                      scatters.scratch_name(kp, n), ir.type_of(g, n).axes))
            else:
                add(n, "store")
        merges = []
        if i in tails:
            tail, array = tails[i]
            for j in tail.merges:
                m = plan.kernels[j]
                for n in m.kernel.loads:
                    if n not in names:
                        add(n, "load")
                for n in m.kernel.stores:
                    add(n, "store")
                merges.append((m, {n: names[n] for n in m.kernel.loads + m.kernel.stores}))
            counter = f"p{len(params)}"
            params.append(P.Param(counter, "int* __restrict__", "store", array, tail.axes))
        for rep, name in size_params.items():
            params.append(P.Param(name, "long long", "size", rep))
        itype = kp.schedule.index          # compiler/index_width.py, decided in the schedule
        lowering = _lowering(plan, kp, names, sizes, itype)
        if merges:
            lowering.tail = Tail(plan, tails[i][0], merges, counter, sizes)
        body = lowering.build(f"napkin_{kp.kernel.name}")
        kernels.append(P.KernelProgram(body.name, tuple(params), body.threads, body.blocks,
                                       body.smem_bytes_formula, body.smem, body.body, itype,
                                       kp.kernel.name, body.wgmma))
        sizes_p = [q for q in params if q.role == "size"]
        for j, n in enumerate(sorted(added)):   # each sum converted into its array (scatter.py)
            scratch_p = next(q for q in params if q.name == names[n][0])
            out = f"p{len(params)}"
            kernels.append(scatters.conversion(g, kp, n, dtypes[n], kp.schedule.finish_of(n),
                                               sizes, scratch_p, out, sizes_p,
                                               f"f{j}" if j else "f"))
            scratches.append((scratch_p.array, "f32", ir.type_of(g, n).axes))
    buffers = tuple((_array(g, n), dtypes[n], ir.type_of(g, n).axes) for n in sorted(dtypes))
    # the counters: an int per position of the tiles' axes (>= a tile), for each tail
    counters = tuple((array, "i32", tail.axes) for tail, array in tails.values())
    buffers += counters
    zeroed = tuple(name for name, _, _ in counters)
    buffers += tuple(scratches)         # a scatter-add's f32 sums, zero between launches
    zeroed += tuple(name for name, _, _ in scratches)
    order = list(plan.diagram.axes)       # (the diagram's declaration order)
    return P.Program(tuple(kernels), tuple((v, k) for k, v in size_params.items()), buffers,
                     zeroed=zeroed, specialised=tuple(sorted(
                         plan.specialised.items(), key=lambda kv: order.index(kv[0]))),
                     held=register_arrays.held_sizes(plan), pitches=_pitches(plan))


def _pitches(plan: Plan) -> tuple[tuple[str, int], ...]:
    """(array name, values its row pitch is a multiple of) of the global arrays whose rows
    are padded (compiler/pitch.py), as every kernel storing or loading them has it."""
    g, found = plan.graph, {}
    for kp in plan.kernels:
        for n in kp.kernel.loads + kp.kernel.stores:
            values = pitch_of_model(kp.model, n)
            if found.setdefault(_array(g, n), values) != values:
                raise AssertionError(f"kernels disagree on the row pitch of {_array(g, n)}")
    return tuple(sorted((a, v) for a, v in found.items() if v > 1))


def _siblings(plan: Plan, kps: list, dtypes: dict, sizes: dict,
              size_params: dict) -> P.KernelProgram:
    """Kernels launched as one grid: one parameter per array any of them loads or stores (the
    array they share one pointer), each lowered with those names (codegen/launch.py)."""
    g = plan.graph
    names: dict = {}
    params: list = []
    for role, attr in (("load", "loads"), ("store", "stores")):
        for kp in kps:
            for n in getattr(kp.kernel, attr):
                if n in names:
                    continue
                names[n] = (f"p{len(params)}", dtypes[n])
                const = "const " if role == "load" else ""
                params.append(P.Param(names[n][0], f"{const}{cexpr.CTYPE[dtypes[n]]}* __restrict__",
                                      role, _array(g, n), ir.type_of(g, n).axes))
    for rep, name in size_params.items():
        params.append(P.Param(name, "long long", "size", rep))
    members = []
    for kp in kps:
        mine = {n: names[n] for n in kp.kernel.loads + kp.kernel.stores}
        members.append(_lowering(plan, kp, mine, sizes, kp.schedule.index).build(
            f"napkin_{kp.kernel.name}"))
    return launch.together(members[0].name, tuple(params), members)


def _lowering(plan: Plan, kp, names: dict, sizes: dict, itype: str) -> KernelLowering:
    """SIMT, a matrix product on tensor cores, or attention on tensor cores: the engine the
    kernel's schedule names."""
    lowering = {schedules.SIMT: KernelLowering, schedules.PRODUCT: MmaLowering,
                schedules.ATTENTION: FlashLowering, schedules.CHAIN: ChainLowering}[kp.schedule.engine]
    if kp.schedule.tensor_cores and kp.schedule.instruction == "wgmma":
        lowering = WgmmaLowering        # (compiler/wgmma.py: plain products only)
    return lowering(plan, kp, names, packed_sizes(kp.model.packed, sizes), itype)


def packed_sizes(packed, sizes: dict) -> dict:
    """`sizes` with each packed axis's (compiler/packing.py): its axes' sizes' product, a
    constant where they all are, else `n2*n3` (a C product the host's launch reads too)."""
    for axis, axes in packed:
        parts = [sizes[a] for a in axes]
        static = all(p.isdigit() for p in parts)
        sizes = {**sizes, axis: cexpr.int_literal(math.prod(int(p) for p in parts)) if static
                 else "*".join(parts)}
    return sizes


def _array(g, n: int) -> str:
    op = ir.op(g, n)
    return getattr(op, "name", f"%{n}")
