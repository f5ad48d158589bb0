"""The `emulate` backend: the emitted CUDA, run by the CPU emulator, on NumPy arrays."""

from __future__ import annotations

import numpy as np

from ..codegen import program as P
from ..compiler.plan import Plan
from ..compiler.split import complete_sizes
from . import emulate
from .checks import check_gathers
from .launches import buffer_names, make_buffers, make_launches

EMULATOR_GRID = 16   # blocks the emulator launches; kernels loop over the rest


def signatures(program: P.Program) -> dict:
    out = {}
    for k in program.kernels:
        params = []
        for p in k.params:
            if p.role == "size":
                params.append(emulate.Param("i64"))
            else:
                ctype = p.ctype.replace("const ", "").replace("* __restrict__", "").strip()
                params.append(emulate.Param("ptr", ctype, p.role == "load"))
        out[k.name] = tuple(params)
    return out


def run_program(plan: Plan, program: P.Program, source: str, inputs: dict[str, np.ndarray],
                sizes: dict[str, int], sanitize: str = "none",
                timeout_s: float = 300.0) -> dict[str, np.ndarray]:
    """Outputs by name, as the emitted kernels compute them (in storage dtypes): `program` and
    `source` are the plan's, lowered and rendered by the driver (napkin.pipeline.run_plan)."""
    input_names = set(plan.graph.graph["inputs"])
    check_gathers(plan.diagram, sizes)            # (no row to clamp a position to)
    sizes = complete_sizes(plan.graph, sizes)     # a split's axes too
    buffers = make_buffers(program, inputs, sizes, input_names)
    launches = [emulate.Launch(s.kernel, (s.grid if s.grid < EMULATOR_GRID else EMULATOR_GRID, 1, 1),
                               (s.block, 1, 1), s.smem_bytes, s.args)
                for s in make_launches(program, sizes, smem_limit=plan.target.levels[1].capacity_bytes
                                       if plan.target.processors else None)]
    result = emulate.run(source, signatures(program), launches, buffers, sanitize=sanitize,
                         timeout_s=timeout_s, smem_limit=int(plan.target.levels[1].capacity_bytes)
                         if plan.target.processors else 232448)
    names = buffer_names(program)
    # (an output that is an input comes back in its buffer, which make_buffers made >= 1-d)
    return {s.name: result[names[s.name]].reshape(tuple(int(sizes[a]) for a in s.axes))
            for s in plan.diagram.outputs}
