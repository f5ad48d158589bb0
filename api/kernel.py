"""`Kernel`: a diagram compiled once, called on arrays many times (what `napkin.compile` returns).

A kernel plans for the sizes of each call (plans take milliseconds; equal
sources share one compiled binary through the cache; a dynamic head axis the plan
specialises, compiler/specialise.py, compiles one kernel per head size), checks
every argument before launching, and returns outputs in the caller's own array type: NumPy
for NumPy, CuPy for CuPy, PyTorch tensors (on PyTorch's current stream) for
PyTorch. Backends: `cuda` (CuPy), `reference`, `interpret`, `emulate`;
`auto` picks `cuda` when CuPy sees a GPU, else `reference`, and says so once.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from .compiler import hints as hint_mod
from .compiler import target as targets
from .compiler.diagram import Diagram
from .compiler.plan import in_diagram
from .compiler.split import complete_sizes
from .explain import render_text, report
from .diagrams.diagnostics import did_you_mean, error
from . import pipeline
from .backends import check_backend
from .pipeline import Options
from .runtime import binaries, dtypes
from .runtime.arrays import describe, host_copy, is_device, like
from .runtime.bind import match_inputs, stored
from .runtime.checks import check_fits, check_inputs, check_outputs
from .runtime.launches import make_launches

log = logging.getLogger("napkin")
_SAID_AUTO = []


class Kernel:
    """A diagram compiled for `options` (napkin.pipeline.Options), run on `backend`."""

    def __init__(self, diagram: Diagram, options: Options | None = None, backend: str = "auto",
                 launcher=None, cache=None):
        check_backend(backend)
        options = options or Options()
        self.diagram = diagram
        self._launcher = launcher
        self._cache = cache
        if backend == "auto":
            backend = "cuda" if launcher is not None or _gpu() else "reference"
            if backend == "reference" and not _SAID_AUTO:
                _SAID_AUTO.append(True)
                log.warning("napkin: no GPU found; running kernels with the reference backend")
        self.backend = backend
        if backend == "cuda" and (options.target is None or options.arch is None):
            _, device_arch, device_target = self.launcher.device()   # plan for the GPU at hand
            options = replace(options, target=options.target or device_target,
                              arch=options.arch or device_arch)
        self.options = options
        self.target = targets.load(options.target_name)
        self.arch = options.arch_for(self.target)
        # hints are checked on every backend: the reference plans nothing, and ran a misspelt
        # or impossible one (`--split z=4`, `--lanes c=3`) without a word
        in_diagram(diagram, lambda: hint_mod.resolve(diagram.hints, options.overrides,
                                                     self.target, diagram.axes))
        self._compiled: dict = {}
        self._zeroed: dict = {}            # (array, shape, stream) -> counters kept at zero
        self._last: dict | None = None     # the sizes of the last call (explain() reads them)

    @property
    def tensor_cores(self) -> bool:
        return self.options.engine != "cuda-cores"

    @property
    def launcher(self):
        if self._launcher is None:
            from .runtime.cuda import CupyLauncher
            self._launcher = CupyLauncher()
        return self._launcher

    # -- what the kernel is -----------------------------------------------------------
    def compiled_for(self, sizes: dict[str, int] | None = None):
        """(plan, program, CUDA source) for these sizes (planning sizes when None)."""
        key = tuple(sorted((sizes or {}).items()))
        if key not in self._compiled:
            dynamic = {a: s for a, s in (sizes or {}).items() if self.diagram.axes.get(a) is None}
            options = replace(self.options, shape=tuple(sorted(
                {**dict(self.options.shape), **dynamic}.items())))
            self._compiled[key] = pipeline.source(self.diagram, options)
        return self._compiled[key]

    @property
    def plan(self):
        return self.compiled_for(self._last)[0]

    @property
    def source(self) -> str:
        return self.compiled_for(self._last)[2]

    def binary(self, sizes: dict[str, int] | None = None):
        return binaries.get(self.compiled_for(sizes)[2], self.arch,
                            self.options.nvrtc_options, cache=self._cache)

    @property
    def ptx(self) -> str:
        return self.binary(self._last).ptx

    @property
    def resources(self) -> dict:
        """Per kernel: registers, spills, stack and shared memory (ptxas and the launch)."""
        p, prog, _ = self.compiled_for(self._last)
        out = {}
        res = self.binary(self._last).resources
        sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
        for k in prog.kernels:
            entry = dict(res[k.name])
            entry["smem_bytes"] = entry["smem_bytes"] + k.smem_bytes(sizes)
            out[k.name] = entry
        return out

    def explain(self, **sizes: int) -> str:
        """The plan for these sizes of the dynamic axes; without them, for the sizes of the last
        call (before any call: the planning default, as the text says)."""
        unknown = [a for a in sizes if a not in self.diagram.axes]
        if unknown:
            raise error("N0309", f"`{unknown[0]}` is not an axis of the diagram",
                        help=did_you_mean(unknown[0], list(self.diagram.axes),
                                          "axes: " + ", ".join(self.diagram.axes)))
        chosen = {**(self._last or {}), **sizes} if (sizes or self._last) else None
        return render_text(report(self.compiled_for(chosen)[0]))

    def _repr_svg_(self) -> str:
        """The planned picture (arrays coloured by memory level, the M/H table), for Jupyter."""
        from .draw import draw_plan
        return draw_plan(self.plan)

    def __repr__(self) -> str:
        return f"<napkin.Kernel {self.diagram.name} on {self.target.name} ({self.backend}, {self.arch})>"

    # -- calling ------------------------------------------------------------------------
    def __call__(self, *arrays, out=None, stream=None, **named) -> tuple:
        """The outputs, a tuple in declaration order (as napkin.run returns them)."""
        given = match_inputs(self.diagram, arrays, named)
        declared = {s.name: s.dtype for s in self.diagram.inputs}
        # a NumPy array of another dtype is converted when that is exact, as napkin.run does
        given = {n: stored(n, x, declared[n]) if isinstance(x, np.ndarray) else x
                 for n, x in given.items()}
        if self.backend == "cuda":
            outs = self._cuda(given, out, stream)
        else:
            outs = self._host(given, out)
        return tuple(outs)

    def _host(self, given: dict, out) -> list:
        infos, sizes = check_inputs(self.diagram, given, device_required=False)
        check_fits("the outputs", [(s.name, s.axes, tuple(sizes[a] for a in s.axes),
                                    dtypes.numpy_dtype(s.dtype).itemsize)
                                   for s in self.diagram.outputs])
        template = next(iter(given.values()), None)
        inputs = {n: host_copy(x) for n, x in given.items()}
        self._last = sizes
        if self.backend == "reference":
            from .runtime import reference
            result = reference.evaluate(self.diagram, inputs, sizes=sizes)
        else:
            p = self.compiled_for(sizes)[0]
            if self.backend == "interpret":
                from .runtime.interpret import interpret
                result = interpret(p, inputs)
            else:
                result = pipeline.run_plan(p, inputs, sizes)
        outs = _stored(result, self.diagram.outputs)
        if out is not None:
            shapes = {s.name: o.shape for s, o in zip(self.diagram.outputs, outs)}
            targets_ = check_outputs(self.diagram, out, shapes, infos)
            for t, o in zip(targets_, outs):
                t[...] = like(t, o) if not isinstance(t, np.ndarray) else o
            return targets_
        return [like(template, o) for o in outs]

    def _cuda(self, given: dict, out, stream) -> list:
        launcher = self.launcher
        infos, sizes = check_inputs(self.diagram, given, device_required=False)
        template = next((x for x in given.values() if is_device(x)), None)
        on_device = {n: (x if is_device(x) else launcher.to_device(host_copy(x)))
                     for n, x in given.items()}
        shapes = {s.name: tuple(sizes[a] for a in s.axes) for s in self.diagram.outputs}
        outs = check_outputs(self.diagram, out, shapes, infos) if out is not None else \
            [launcher.empty(shapes[s.name], s.dtype, template) for s in self.diagram.outputs]
        self._last = sizes
        if any(0 in shape for shape in shapes.values()):
            return self._finish(outs, given, template)
        p, prog, source = self.compiled_for(sizes)
        launches = make_launches(prog, complete_sizes(p.graph, sizes),
                                 smem_limit=launcher.smem_limit())
        binary = self._loadable(sizes, source)
        st = launcher.stream_for(template, stream)
        pointers, copy_back = self._buffers(p, prog, on_device, outs, shapes, template, st)
        for spec, kprog in zip(launches, prog.kernels):
            if spec.blocks == 0:
                continue
            args = []
            for param, value in zip(kprog.params, spec.args):
                args.append(np.int64(value) if param.role == "size" else np.uint64(pointers[value]))
            launcher.launch(binary, spec.kernel, spec.grid, spec.block, spec.smem_bytes, args, st)
        for dst, staged in copy_back:        # out= arrays the kernels wrote through aligned copies
            launcher.copy(dst, staged)
        return self._finish(outs, given, template)

    def _loadable(self, sizes: dict, source: str):
        """The cubin (napkin's NVRTC, through the cache), or a module CuPy compiles itself."""
        from .runtime import nvrtc
        if nvrtc.available():
            return self.binary(sizes).cubin
        return self.launcher.module_from_source(source, self.arch)

    def _buffers(self, p, prog, inputs: dict, outs: list, shapes, template,
                 stream=None) -> tuple[dict, list]:
        """(buffer name -> device pointer, [(out= array, its aligned copy)]): inputs, outputs and
        the intermediates kernels share. A last-block merge's counters (codegen/tail.py) are
        zeroed once per stream and kept: each launch leaves them at zero for the next one on
        its stream."""
        from .runtime.launches import buffer_names, buffer_shape
        names = buffer_names(prog)
        by_array = {s.name: o for s, o in zip(self.diagram.outputs, outs)}
        self._keep, copy_back = [], []
        pointers = {}
        for array, dtype, axes in prog.buffers:
            if array in inputs:
                arr = inputs[array]
            elif array in by_array:
                arr = by_array[array]
            elif array in prog.zeroed:
                shape = tuple(p.sizes[a] for a in axes)
                key = (array, shape, getattr(stream, "ptr", stream))
                if key not in self._zeroed:     # (and a scatter-add's f32 scratch, which
                    from .runtime.dtypes import numpy_dtype   # its conversion clears)
                    self._zeroed[key] = self.launcher.to_device(np.zeros(shape, numpy_dtype(dtype)))
                arr = self._zeroed[key]
            else:
                arr = self.launcher.empty(buffer_shape(prog, array, axes, p.sizes), dtype,
                                          template)
                self._keep.append(arr)
            if describe(arr).ptr % prog.alignment:
                # the kernels read and write at aligned addresses only (Program.alignment):
                # an array the caller placed elsewhere goes through an aligned copy
                # (the caller's shape: an input or output over merged axes, compiler/merge.py,
                # is the same row-major memory)
                staged = self.launcher.empty(tuple(arr.shape), dtype, template)
                if array in by_array:
                    copy_back.append((arr, staged))
                else:
                    self.launcher.copy(staged, arr)
                self._keep.append(staged)
                arr = staged
            pointers[names[array]] = describe(arr).ptr
        return pointers, copy_back

    def _finish(self, outs: list, given: dict, template) -> list:
        if template is not None:
            return outs
        # NumPy callers get NumPy back
        return [self.launcher.to_host(o, s.dtype) for o, s in zip(outs, self.diagram.outputs)]


def _stored(result: dict, outputs) -> list:
    """The host backends' outputs in their storage dtypes; one warning names those whose finite
    values overflowed to inf there (a GPU kernel stores the same inf, uncounted)."""
    outs, overflowed = [], []
    for s in outputs:
        o, n = dtypes.stored(result[s.name], s.dtype)
        outs.append(o)
        if n:
            overflowed.append(f"`{s.name}` ({s.dtype}): {n:,} of {o.size:,} values")
    if overflowed:
        many = len(overflowed) > 1
        log.warning("napkin: %s %s overflowed to inf: finite values past the dtype's largest "
                    "(65504 for f16) round to inf when stored; declare %s f32 or bf16 to keep "
                    "them", "outputs" if many else "output", "; ".join(overflowed),
                    "them" if many else "it")
    return outs


def _gpu() -> bool:
    from .runtime.cuda import gpu_present
    return gpu_present()
