"""The one driver (napkin.pipeline): every entry point goes through it, with one Options.

Values are checked against the float64 reference (compare.against_reference) on odd sizes;
the structural tests (one caller, the options reaching every command) read the source."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
import pytest

import napkin
from napkin import pipeline
from napkin.cli import main
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import compare

ROOT = Path(__file__).parents[1]
PACKAGE = ("api", "compiler", "codegen", "runtime", "diagrams")


@functools.cache
def _imports() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(file, absolute module, names) of every `from ... import` in the package's modules,
    at any depth of the file (each file parsed once for every test that asks)."""
    out = []
    for top in PACKAGE:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT)
            package = ["napkin" if top == "api" else top, *rel.parts[1:-1]]
            if top != "api":
                package = ["napkin", *package]
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                out.append((rel.as_posix(), full, tuple(a.name for a in node.names)))
    return tuple(out)


def _importers(module: str, name: str) -> list[str]:
    """Package modules (outside `module` itself) that import `name` from napkin's `module`
    (a dotted path under the package, e.g. "codegen.lower")."""
    out = {f for f, full, names in _imports() if full == "napkin." + module and name in names}
    return sorted(out - {module.replace(".", "/") + ".py"})


def test_plan_lower_render_have_one_caller():
    """Only the driver sequences the stages: no other module lowers, renders, tiles or fuses."""
    assert _importers("codegen.lower", "lower") == ["api/pipeline.py"]
    assert _importers("codegen.render", "render") == ["api/pipeline.py"]
    assert _importers("compiler.plan", "tile") == ["api/pipeline.py"]
    assert _importers("compiler.plan", "fuse_kernels") == ["api/pipeline.py"]
    assert _importers("runtime.emulated", "run_program") == ["api/pipeline.py"]
    assert _importers("compiler.plan", "plan") == []       # plan() is for tests and scripts


def test_the_stages_are_data_and_every_emit_has_one():
    names = [s.name for s in pipeline.STAGES]
    assert names == ["ast", "ir", "kernels", "plan", "program", "cuda", "binary"]
    assert pipeline.emit_names() == ["ast", "ir", "kernels", "plan", "program", "cuda", "ptx",
                                     "cubin"]


def test_options_are_frozen_hashable_and_checked():
    o = pipeline.Options.make(target="a100", shape={"q": 77}, group={"q": 32}, engine="cuda-cores")
    assert hash(o) == hash(pipeline.Options.make(target="a100", shape={"q": 77}, group={"q": 32},
                                                 engine="cuda-cores"))
    with pytest.raises(Exception):
        o.target = "h100"
    with pytest.raises(NapkinError) as exc:
        pipeline.Options.make(engine="tensor_cores")
    assert exc.value.code == "N0804" and "tensor-cores" in exc.value.diagnostics[0].help
    with pytest.raises(NapkinError) as exc:
        pipeline.Options.make(target="tpu")
    assert exc.value.code == "N0605"


def test_emit_kernels_does_not_run_the_tile_search(monkeypatch):
    from napkin.compiler import plan as plans
    monkeypatch.setattr(plans, "tile", lambda fused: pytest.fail("--emit kernels tiled"))
    text, _ = pipeline.emit("attention", "kernels", pipeline.Options())
    assert text.startswith("k0: S, P, O")


def test_plans_compute_no_unfused_baseline_unless_explain_asks(monkeypatch):
    from napkin.compiler import plan as plans
    from napkin.explain import report
    called = []
    real = plans.baseline
    monkeypatch.setattr(plans, "baseline", lambda p: called.append(p) or real(p))
    import napkin.explain as explain_mod
    monkeypatch.setattr(explain_mod, "baseline", plans.baseline)
    p = pipeline.plan(napkin.load("mlp"), pipeline.Options())
    assert called == [] and not hasattr(p, "unfused")
    rep = report(p)
    assert len(called) == 1 and rep["unfused"]["kernels"] == 2
    assert "unfused" not in report(p, compare=False)


# -- the API: hints, engine, explain at the call's sizes, one return convention -----------------

def _check(d, inputs, outputs):
    named = dict(zip([s.name for s in d.outputs], outputs))
    for verdict in compare.against_reference(d, inputs, named).values():
        assert verdict.ok, verdict.message


def _inputs(d, shape, seed=0):
    from napkin.commands.run import random_inputs
    return random_inputs(d, shape, seed)


def test_kernel_takes_schedule_hints_and_runs_them():
    k = napkin.compile("attention", backend="interpret", group={"q": 16}, stream={"x": 32})
    inputs = _inputs(k.diagram, {"b": 1, "h": 2, "q": 37, "x": 45})
    outs = k(**inputs)
    assert isinstance(outs, tuple) and len(outs) == 1
    choice = k.plan.kernels[0].choice
    assert dict(choice.group)["q"] == 16 and choice.stream == ("x", 32)
    _check(k.diagram, inputs, outs)


def test_a_hint_no_kernel_can_follow_is_an_error_at_compile_time_options():
    k = napkin.compile("softmax", backend="interpret", stream={"r": 8})
    with pytest.raises(NapkinError) as exc:
        k(X=np.ones((3, 5), np.float16))
    assert exc.value.code == "N0604"


# (matmul: auto stays on the CUDA cores at these sizes. attention: auto takes the tensor cores
# at every f16 size since a tiling's padding is counted once (issue.padding): at 3 queries and
# one key, 3.05 us against 3.11 on the CUDA cores, model, both the launch; its forced plan is
# the auto one there, checked against the float64 reference all the same)
@pytest.mark.parametrize("name,shape,auto_simt", [
    ("matmul", {"m": 37, "k": 50, "n": 29}, True),
    ("attention", {"b": 1, "h": 2, "q": 19, "x": 33}, False)])
def test_engine_tensor_cores_forces_the_tensor_core_lowering_at_small_sizes(name, shape,
                                                                           auto_simt):
    k = napkin.compile(name, backend="emulate", engine="tensor-cores")
    inputs = _inputs(k.diagram, shape, seed=3)
    outs = k(**inputs)
    assert all(kp.schedule.tensor_cores for kp in k.plan.kernels)
    assert "mma.sync" in k.source
    _check(k.diagram, inputs, outs)
    auto = napkin.compile(name, backend="interpret")
    auto(**inputs)
    assert any(kp.schedule.tensor_cores for kp in auto.plan.kernels) is not auto_simt


def test_engine_cuda_cores_keeps_products_off_the_tensor_cores():
    d = napkin.load("matmul")
    big = pipeline.Options.make(shape={"m": 4096, "k": 4096, "n": 4096})
    assert pipeline.plan(d, big).kernels[0].schedule.tensor_cores
    off = pipeline.Options.make(shape={"m": 4096, "k": 4096, "n": 4096}, engine="cuda-cores")
    assert not pipeline.plan(d, off).kernels[0].schedule.tensor_cores


def test_engine_tensor_cores_says_why_a_kernel_cannot():
    with pytest.raises(NapkinError) as exc:
        # an f32 input times an f16 weight: the user's f32 is not rounded for the tensor cores
        pipeline.plan(napkin.load("axis t, m, o\nin X[t m]: f32\nin W[m o]: f16\n"
                                  "Y[t o] = X * W\nout Y: f32\n"),
                      pipeline.Options.make(engine="tensor-cores"))
    assert exc.value.code == "N0606"
    assert "cannot run on tensor cores" in exc.value.diagnostics[0].message and "k0" in exc.value.diagnostics[0].message
    # a kernel with no contraction has nothing for tensor cores: it runs on CUDA cores
    p = pipeline.plan(napkin.load("softmax"), pipeline.Options.make(engine="tensor-cores"))
    assert not p.kernels[0].schedule.tensor_cores


def test_kernel_explains_the_sizes_of_its_last_call():
    k = napkin.compile("softmax", backend="reference")
    assert "at the default planning size" in k.explain()
    k(X=np.ones((3, 77), np.float16))
    text = k.explain()
    assert "r=3  c=77" in text and "default planning size" not in text
    assert "r=5  c=4096" in k.explain(r=5, c=4096)
    with pytest.raises(NapkinError):
        k.explain(q=3)


def test_run_and_kernels_return_a_tuple_for_one_output_too():
    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float16)
    ran = napkin.run("softmax", x)
    called = napkin.compile("softmax", backend="reference")(x)
    assert isinstance(ran, tuple) and isinstance(called, tuple)
    assert np.array_equal(ran[0], called[0])


def test_run_plans_the_cpu_backends_for_a_target():
    k = napkin.compile("softmax", backend="interpret", target="a100")
    k(X=np.ones((3, 5), np.float16))
    assert k.plan.target.name == "a100"


# -- the command line: one registry, the engine everywhere -----------------------------------

def test_run_backend_cuda_is_known_and_says_the_gpu_is_missing(capsys):
    assert main(["run", "softmax", "--backend", "cuda", "--shape", "r=3,c=5"]) == 3
    err = capsys.readouterr().err
    assert "unknown backend" not in err and "cuda backend is unavailable" in err


def test_run_backend_typo_lists_every_backend(capsys):
    assert main(["run", "softmax", "--backend", "cdua", "--shape", "r=3,c=5"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend" in err and "cuda" in err


@pytest.mark.parametrize("command", [["explain"], ["compile", "--emit", "plan"],
                                     ["draw"], ["run", "--backend", "interpret"]])
def test_every_command_takes_the_engine(command, capsys):
    args = [command[0], "matmul", *command[1:], "--engine", "cuda-cores"]
    if command[0] == "run":
        args += ["--shape", "m=5,k=6,n=7"]
    assert main(args) == 0, capsys.readouterr().err


def test_explain_without_ptxas_never_loads_nvrtc(monkeypatch, capsys):
    from napkin.runtime import nvrtc
    monkeypatch.setattr(nvrtc, "compile", lambda *a, **k: pytest.fail("explain called NVRTC"))
    assert main(["explain", "attention"]) == 0
    assert "ptxas" not in capsys.readouterr().out
