"""Split reductions (compiler/split.py, splitting.py): a reduced axis grouped across blocks.

The rewrite is checked as meaning (the float64 reference of the split graph against the
reference of the diagram, for every library diagram and axis that splits, with split
counts that do not divide the axis and counts past it: empty splits), then as plans
(interpreter and emulator against the float64 oracle under the tolerance rule), then as
the planner's choice and what explain, the hints and the errors say.
"""

from __future__ import annotations

import numpy as np
import pytest

from ..sampling import sampled

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import split as sp
from napkin.compiler.canonical import canonicalize
from napkin.compiler.diagram import Diagram
from napkin.compiler.plan import plan
from napkin.compiler.verify import verify
from napkin.pipeline import run_plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import reference
from napkin.runtime.bind import bind_sizes
from napkin.runtime.interpret import interpret

ROOT = __import__("pathlib").Path(__file__).parents[2]
LIBRARY = ["attention", "attention_manual", "causal_attention", "gqa_attention",
           "alibi_attention", "softcap_attention", "sliding_window_attention",
           "varlen_attention", "softmax", "rmsnorm", "layernorm", "matmul", "batched_matmul",
           "mlp", "swiglu", "linear_gelu", "gelu_erf", "cross_entropy", "rmsnorm_linear"]
# and one whose split graph the float64 reference cannot evaluate at every count (paged
# attention fixes x = 4096: split 4,099 ways, its scores take GBs)
SPLITS = LIBRARY + ["paged_attention"]
SMALL = {"paged_attention": {"x": 160, "j": 10}}   # its keys fixed at 4096: 160 (-D) here
# paged_attention's split kernel alone takes g++ about 25 s to build for the emulator: in the
# default suite it is interpreted, and emulated with NAPKIN_FUZZ_SCALE>=2
THOROUGH = float(__import__("os").environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2
INTERPRETED_ONLY = () if THOROUGH else ("paged_attention",)


def _shape(d, rng, low=2, high=9):
    axes = d.ir.graph["axes"]
    by_rep: dict[str, int] = {}
    return {a: by_rep.setdefault(info.rep, int(rng.integers(low, high)))
            for a, info in axes.items() if info.size is None}


@pytest.mark.parametrize("name", LIBRARY)
def test_the_split_graph_means_what_the_diagram_means(name, rng):
    d = napkin.load(name)
    g = canonicalize(d.ir)
    inputs = random_inputs(d, _shape(d, rng, 3, 12), 7)
    want = reference.evaluate(d, inputs)
    sizes = bind_sizes(d, {k: np.shape(v) for k, v in inputs.items()})
    splittable = [a for a in g.graph["axes"] if sp.splittable(g, a) is None]
    assert splittable, f"{name}: no axis splits"
    for axis in splittable:
        for parts in (1, 2, 3, sizes[axis] + 3):          # past the axis: empty splits
            g2 = sp.split(g, axis, parts)
            verify(g2)
            info = g2.graph["split"]
            assert (info.axis, info.parts) == (axis, parts) and info.partials
            full = sp.complete_sizes(g2, sizes)
            assert full[info.share_axis] == -(-sizes[axis] // parts)
            got = reference.evaluate(Diagram(g2, d.source), inputs, sizes=full)
            for out in want:
                np.testing.assert_allclose(got[out], want[out], rtol=1e-9, atol=1e-9,
                                           err_msg=f"{name} split {axis} by {parts}")


def test_what_does_not_split_says_why():
    g = canonicalize(napkin.load("attention").ir)
    assert "no reduction over `q`" in sp.splittable(g, "q")
    scan = canonicalize(napkin.load("axis t, v\nin Z[t v]: f32\n"
                                    "s[t] = sum[v](cumsum[v](Z))\nout s: f32\n").ir)
    assert "scanned" in sp.splittable(scan, "v")
    best = canonicalize(napkin.load("axis t, v\nin Z[t v]: f32\nb[t] = argmax[v](Z)\n"
                                    "out b: i32\n").ir)
    assert sp.splittable(best, "v") is None     # (it merges: test_argmax_splits_... below)
    nested = canonicalize(napkin.load(
        (ROOT / "tests" / "regressions" / "fuzz-8850a0da1bb3.napkin").read_text()).ir)
    assert "reads another one's result" in sp.splittable(nested, "i")
    centred = canonicalize(napkin.load("axis t, v\nin Z[t v]: f32\n"
                                       "s[t] = sum[v](Z - max[v](Z))\nout s: f32\n").ir)
    assert "reads another one's result" in sp.splittable(centred, "v")
    with pytest.raises(sp.NotSplittable):
        sp.split(g, "x", 0)


MASKED_DECODE = """\
axis b, h, q, x
axis d = 16
in Q[b h q d], K[b h x d], V[b h x d]: f32
in start[b]: i32
S[b h q x] = where(x >= start, Q * K / sqrt(size(d)), -inf)
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f32
"""


def test_fully_masked_splits_weigh_nothing_and_masked_rows_give_zero(rng):
    """A decode step whose first splits see only masked keys (and one batch row masked
    everywhere): the merge never makes NaN, and matches the reference."""
    d = napkin.load(MASKED_DECODE)
    shape = {"b": 3, "h": 2, "q": 1, "x": 61}
    inputs = random_inputs(d, shape, 3)
    inputs["start"] = np.array([0, 40, 61], dtype=np.int32)     # row 2: no key at all
    p = plan(d, "h100", shape, {"split": {"x": 7}})
    assert p.split and p.split.parts == 7
    out = interpret(p, inputs)["O"]
    want = reference.evaluate(d, inputs)["O"]
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out[2], 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_nan_in_one_split_reaches_its_row_only(rng):
    d = napkin.load("attention", d=16)
    shape = {"b": 1, "h": 2, "q": 3, "x": 50}
    inputs = random_inputs(d, shape, 5)
    inputs["K"][0, 1, 33, 4] = np.nan
    p = plan(d, "h100", shape, {"split": {"x": 4}})
    out = interpret(p, inputs)["O"]
    assert np.isnan(out[0, 1]).all() and not np.isnan(out[0, 0]).any()


def test_a_softmax_over_another_axis_is_a_plain_operand_of_the_split_product(rng):
    """`Y[t] = V * softmax[t](A)` sums over j a softmax over t: split over j, each split's
    share is a plain partial sum (it was merged as an attention's pair by logsumexps over
    j, weighting the splits by a softmax they do not have: fuzz seed 45's case)."""
    d = napkin.load("axis j, t\nin V[j]: f32\nin A[j t]: f32\n"
                    "Y[t] = V * softmax[t](A)\nout Y: f32\n")
    shape = {"j": 37, "t": 5}
    inputs = random_inputs(d, shape, 7)
    p = plan(d, "h100", shape, {"split": {"j": 3}})
    assert p.split and p.split.parts == 3
    np.testing.assert_allclose(interpret(p, inputs)["Y"], reference.evaluate(d, inputs)["Y"],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, axis, parts", [
    ("attention", "x", 3), ("causal_attention", "x", 5), ("gqa_attention", "x", 40),
    ("sliding_window_attention", "x", 4), ("softmax", "c", 3), ("rmsnorm", "c", 7),
    ("layernorm", "c", 5), ("matmul", "k", 3), ("batched_matmul", "k", 2),
    ("cross_entropy", "v", 4), ("mlp", "f", 3), ("swiglu", "m", 2)])
def test_split_plans_interpret_within_the_tolerance_rule(name, axis, parts, rng, within_budget):
    d = napkin.load(name)
    shape = _shape(d, rng, 2, 6)       # the interpreter walks every block and chunk in Python
    shape[axis] = 37 if d.axes[axis] is None else shape.get(axis)
    shape = {a: v for a, v in shape.items() if v is not None}
    inputs = random_inputs(d, shape, 11)
    p = plan(d, "h100", shape, {"split": {axis: parts}})
    assert p.split is not None and p.split.forced
    g = p.graph
    partial = [kp.kernel.name for kp in p.kernels if p.split.share_axis in kp.kernel.reduced(g)]
    merging = [kp.kernel.name for kp in p.kernels if p.split.part_axis in kp.kernel.reduced(g)]
    assert partial and merging and not set(partial) & set(merging)
    within_budget(d, inputs, interpret(p, inputs))


@pytest.mark.parametrize("name, axis, parts", [
    ("causal_attention", "x", 6), ("layernorm", "c", 5), ("softmax", "c", 40)])
def test_split_plans_run_on_the_emulator_within_the_tolerance_rule(name, axis, parts, rng,
                                                                   within_budget):
    from napkin.pipeline import run_plan
    d = napkin.load(name)
    shape = _shape(d, rng, 3, 7)
    if d.axes[axis] is None:
        shape[axis] = 37
    inputs = random_inputs(d, shape, 13)
    p = plan(d, "h100", shape, {"split": {axis: parts}})
    within_budget(d, inputs, run_plan(p, inputs, p.sizes))


@pytest.mark.parametrize("name, shape, bound", [
    ("attention", {"b": 1, "h": 8, "q": 1, "x": 32768}, 1.5),
    # (the heads packed into the rows is paged_attention's too, in the default run)
    pytest.param("gqa_attention", {"b": 1, "g": 8, "r": 8, "q": 1, "x": 32768}, 1.5,
                 marks=pytest.mark.thorough),
    ("paged_attention", {"b": 1, "g": 8, "r": 8, "q": 1, "n": 2048}, 1.5)])
def test_the_planner_splits_decode_attention_near_the_cost_of_reading_k_and_v(name, shape,
                                                                                bound):
    """h200 (HBM 4.8 TB/s in the target): one query per head, 32k keys: the plan is one fused
    attention over split keys plus its merge, predicted within 1.5x of reading K and V
    once (a model figure). GQA with 8 query heads per key head packs the heads into the
    rows of FlashAttention-2's fragments (q is 1: the rows are r) on the tensor cores, its
    K and V read through a page table too (paged_attention: compiler/rowsource.py)."""
    from napkin.compiler.target import load
    hbm = load("h200").levels[1].bandwidth         # global memory -> the SMs
    paged = {"x": 32768, "j": 2048}         # (its keys fixed in the diagram: 32k here)
    d = napkin.load(name, d=128, **(paged if name == "paged_attention" else {}))
    p = plan(d, "h200", shape)
    assert p.split is not None and p.split.axis == "x" and not p.split.forced, name
    heads = shape.get("h", shape.get("g"))
    kv = 2 * shape["b"] * heads * shape.get("x", paged["x"]) * 128 * 2
    assert p.time <= bound * kv / hbm, (name, p.time, kv / hbm)
    assert p.split.unsplit_time is not None and p.time < p.split.unsplit_time
    fused = [kp for kp in p.kernels if p.split.share_axis in kp.kernel.reduced(p.graph)]
    assert len(fused) == 1 and len(p.kernels) == 2, name
    if name != "attention":      # the heads share K and V (paged: read through its pages)
        assert fused[0].schedule.engine == "attention" and fused[0].schedule.site.row == "r"
    # the partial logsumexp is a row's value: stored over O's rows, not along d
    g, (o_part, lse) = p.graph, p.split.partials
    axes = {array: g.nodes[g.graph["arrays"][array]]["type"].axes
            for array in (o_part, lse)}
    assert axes[lse] == tuple(a for a in axes[o_part] if a != "d"), axes


VALUE_AXIS = """axis b, h, q, x
axis d = 64{e}
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x {v}]: f16
S[b h q x] = Q * K / sqrt(size(d))
P[b h q x] = softmax[x](S)
O[b h q {v}] = P * V
out O: f16
"""


def test_decode_with_a_value_axis_of_its_own_splits_as_with_d():
    """V[b h x e] with e an axis of its own (as wide as d): a split's K and V are read through
    gathers (the split's rows of x), whose arrays had no `used_over`, so the model re-read V
    at every step of the walk over d that Q K contracts (registers H b h q x d e / t_q): the
    split's partial was predicted register-bound at 269 us and the planner kept three
    kernels at 133 us. Now the same plan and cost as with V[b h x d] (model, h100)."""
    shape = {"b": 1, "h": 32, "q": 1, "x": 32768}
    own, shared = (plan(napkin.load(VALUE_AXIS.format(v=v, e=e)), "h100", shape)
                   for v, e in (("e", "\naxis e = 64"), ("d", "")))
    assert own.split is not None and own.split.axis == "x"
    assert [kp.schedule.engine for kp in own.kernels] == \
        [kp.schedule.engine for kp in shared.kernels]
    assert own.kernels[0].schedule.engine == "attention"
    for a, b in zip(own.kernels[0].cost.levels, shared.kernels[0].cost.levels):
        assert a.H == pytest.approx(b.H), a.name
    assert own.time == pytest.approx(shared.time)


def test_full_gpus_do_not_split():
    p = plan(napkin.load("attention", d=64), "h100", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    assert p.split is None
    p = plan(napkin.load("matmul"), "h100", {"m": 4096, "n": 4096, "k": 4096})
    assert p.split is None


def test_a_split_the_final_plans_price_slower_is_not_taken():
    """The quick estimates (no 8-lane split of a row in their search) put a row sum of
    4096 x 131072 unsplit at 454 us and split by 8 at 341 us; the final plans price the
    unsplit kernel, 8 lanes to a row, at 334 us: the planner keeps it, and the split asked
    for by a hint is slower by the same final plans."""
    d = napkin.load("axis r, v\nin X[r v]: f16\nZ[r] = sum[v](X)\nout Z: f32")
    sizes = {"r": 4096, "v": 131072}
    p = plan(d, "h100", sizes)
    assert p.split is None
    forced = min((plan(d, "h100", sizes, overrides={"split": {"v": n}}) for n in (4, 8, 16)),
                 key=lambda q: q.time)
    assert p.time < forced.time


def test_a_split_of_a_sliver_of_the_plan_is_not_priced(monkeypatch):
    """A split fills the SMs of the kernels that ask for it: paged_attention's gradient at
    the default sizes has two under-filled kernels taking 1e-5 of its time, and pricing their
    split fused the whole gradient again three times (13 s of 15 s of CPU, for the same plan):
    it is not tried. Decode attention, whose one kernel asks, still splits (above)."""
    from napkin.compiler import splitting
    tried = []
    real = splitting.split_problem
    monkeypatch.setattr(splitting, "split_problem",
                        lambda *a, **k: tried.append(a[1]) or real(*a, **k))
    g = napkin.grad("paged_attention", saved=True)
    p = plan(g, "h100", {})
    assert tried == [] and p.split is None


def test_split_hints_in_the_diagram_on_the_command_line_and_in_the_api(capsys, rng):
    from napkin.cli import main
    hinted = napkin.load("axis r, c\nin X[r c]: f32\nsplit c by 6\nY[r] = logsumexp[c](X)\n"
                         "out Y: f32\n")
    p = plan(hinted, "h100", {"r": 3, "c": 50})
    assert p.split.forced and (p.split.axis, p.split.parts) == ("c", 6)
    assert main(["explain", "softmax", "--target", "h100", "--shape", "r=4,c=4096",
                 "--split", "c=8"]) == 0
    out = capsys.readouterr().out
    assert "split: c -> p_c = 8 splits x s_c = 512 (hinted)" in out
    assert "partial state  Y.part" in out and "merged by kernel" in out
    assert "for the best unsplit plan" in out
    k = napkin.compile("rmsnorm", backend="interpret", split={"c": 5})
    X = rng.standard_normal((3, 41)).astype(np.float16)
    g = rng.standard_normal(41).astype(np.float16)
    (Y,) = k(X, g)
    split = k.compiled_for({"r": 3, "c": 41})[0].split
    assert split is not None and split.parts == 5
    (want,) = napkin.run("rmsnorm", X, g)
    np.testing.assert_allclose(Y.astype(np.float64), want.astype(np.float64), atol=2e-2)


def test_a_split_count_past_the_axis_size_splits_it_into_its_positions(rng):
    """`--split c=100000` of a 5-long `c` planned 100000 partial blocks of nothing (40 s in
    the interpreter, the CLI timed out): one position per split, as a group past the size
    is the whole axis; the values stay the reference's."""
    d = napkin.load("axis r, c\nin X[r c]: f32\nsplit c by 100000\nY[r] = logsumexp[c](X)\n"
                    "out Y: f32\n")
    p = plan(d, "h100", {"r": 3, "c": 5})
    assert p.split.forced and (p.split.axis, p.split.parts, p.split.share) == ("c", 5, 1)
    X = rng.standard_normal((3, 5)).astype(np.float32)
    got = interpret(p, {"X": X})["Y"]
    np.testing.assert_allclose(got, np.log(np.exp(X.astype(np.float64)).sum(1)), rtol=1e-6)
    assert plan(d, "h100", {"r": 3, "c": 1}).split is None    # one position: no split


TRANSPOSED_SUM = "axis i, j\nin A[i j]: f32\nin b[i]: f32\ns[] = sum[i j](A[j i] * b[i])\n" \
    "tr[] = sum[i](A[i i] * b)\nout s: f32, tr: f32\n"


@pytest.mark.parametrize("axis, parts", [("i", 3), ("j", 4)])
def test_a_view_moving_the_split_axis_enters_the_split_as_an_array(rng, axis, parts):
    """`A[j i]` reads i from A's j: refused before (N0607, `i` is read at other positions),
    so `sum[i j](A[j i])` ran in one block (178 us against 22.7 us split, model, h100,
    i=j=1024); the view's values enter the region as an array, gathered at the split
    positions. A diagonal (`A[i i]`) too; interpreted against a NumPy float64 oracle."""
    d = napkin.load(TRANSPOSED_SUM)
    p = plan(d, "h100", {"i": 37}, overrides={"split": {axis: parts}})
    assert (p.split.axis, p.split.parts) == (axis, parts)
    A, b = rng.standard_normal((37, 37)).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    got = interpret(p, {"A": A, "b": b})
    A64, b64 = A.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(got["s"], np.sum(A64.T * b64[:, None]), rtol=1e-5)
    np.testing.assert_allclose(got["tr"], np.sum(np.diag(A64) * b64), rtol=1e-5)
    assert plan(d, "h100", {"i": 1024}).split is not None     # the planner splits it too


@pytest.mark.parametrize("text, code, where", [
    ("axis r, c\nin X[r c]: f32\nsplit r by 4\nY[r] = sum[c](X)\nout Y: f32\n", "N0607", "split r"),
    ("axis r, c\nin X[r c]: f32\nsplit c by 4 at smem\nY[r] = sum[c](X)\nout Y: f32\n", "N0602",
     "smem"),
    ("axis r, c\nin X[r c]: f32\nsplit c by 4\nsplit r by 2\nY[r] = sum[c](X)\nout Y: f32\n",
     "N0607", "split r"),
])
def test_split_hint_mistakes_point_at_the_hint(text, code, where):
    with pytest.raises(NapkinError) as exc:
        plan(napkin.load(text), "h100", {"r": 8, "c": 64})
    diag = exc.value.diagnostics[0]
    assert diag.code == code
    assert diag.span is not None and where in text[diag.span.start:diag.span.end]


def test_a_split_asked_for_that_leaves_a_kernel_without_tiles_says_so(monkeypatch, capsys):
    """N0603 (no tiling fits) under a split the user asked for names the split and how to do
    without it, at the hint when it is in the diagram and after --split on the command line
    (a kernel made infeasible by hand: the planner's own refusals of splits are bugs, as
    fuzz-293bd9bb7057 was)."""
    from napkin.cli import main
    from napkin.compiler.kernel_plan import KernelPlanner
    from napkin.diagrams.diagnostics import error
    real = KernelPlanner.plan

    def refuse(self, k, *args, **kwargs):
        if any(".part" in e.name for e in self.g.graph["equations"] if e.stmt in k.equations):
            raise error("N0603", f"kernel {k.name} needs 9,999 bytes of registers",
                        help="make a whole axis smaller")
        return real(self, k, *args, **kwargs)
    monkeypatch.setattr(KernelPlanner, "plan", refuse)
    text = "axis r, c\nin X[r c]: f32\nsplit c by 6\nY[r] = logsumexp[c](X)\nout Y: f32\n"
    with pytest.raises(NapkinError) as exc:
        plan(napkin.load(text), "h100", {"r": 3, "c": 50})
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0603" and "split `c` fewer ways" in diag.help
    assert "split c by 6" in text[diag.span.start:diag.span.end]
    assert any("split of `c` in 6" in n for n in diag.notes)
    assert main(["explain", "softmax", "--target", "h100", "--split", "c=8"]) == 1
    err = capsys.readouterr().err
    assert "N0603" in err and "split of `c` in 8" in err and "Traceback" not in err


@pytest.mark.parametrize("name, shape, parts", [
    ("gqa_attention", {"b": 1, "g": 2, "r": 5, "q": 1, "x": 77}, 3),     # rows: the heads r
    ("causal_attention", {"b": 1, "h": 1, "q": 40, "x": 100}, 4),
    ("attention", {"b": 1, "h": 1, "q": 16, "x": 33}, 8)])          # splits past the keys
def test_split_attention_on_tensor_cores_runs_on_the_emulator(name, shape, parts, within_budget):
    """FlashAttention-2 over a window of the keys per block (the K and V tiles copied from
    rows p_x * size(s_x) + s_x, zeros past x) that also stores its rows' logsumexp; the merge
    on the CUDA cores."""
    from napkin.pipeline import run_plan
    d = napkin.load(name, d=16)
    p = plan(d, "h100", shape, {"split": {"x": parts}}, engine="tensor-cores")
    assert [kp.schedule.engine for kp in p.kernels] == ["attention", "cuda cores"]
    assert p.kernels[0].schedule.site.lse
    inputs = random_inputs(d, shape, 3)
    within_budget(d, inputs, run_plan(p, inputs, p.sizes))
    within_budget(d, inputs, interpret(p, inputs))


def test_batch_one_long_attention_splits_on_tensor_cores():
    """b=1, h=1, q=x=4096, d=128 on h200: unsplit, FlashAttention-2 has 32 blocks of 128 rows
    (24% of the SMs busy); the planner splits the keys and stays on the tensor cores."""
    d = napkin.load("attention", d=128)
    p = plan(d, "h200", {"b": 1, "h": 1, "q": 4096, "x": 4096})
    assert p.split is not None and p.split.axis == "x"
    assert p.kernels[0].schedule.engine == "attention"
    assert p.time < p.split.unsplit_time


@pytest.mark.parametrize("name, parts", [("batched_matmul", 4)])
def test_split_k_on_tensor_cores_runs_on_the_emulator(name, parts, rng, within_budget):
    """Split-K: each block's k tiles copied from its window of A's and B's rows (zeros past
    k, so the masks the rewrite puts on the operands hold already), the partial products
    summed by the merge on the CUDA cores."""
    from napkin.pipeline import run_plan
    d = napkin.load(name)
    shape = {a: 33 for a, s in d.axes.items() if s is None}
    shape.update(m=40, k=301) if name == "matmul" else None
    p = plan(d, "h100", shape, {"split": {"k": parts}}, engine="tensor-cores")
    assert [kp.schedule.engine for kp in p.kernels] == ["tensor-core product", "cuda cores"]
    inputs = random_inputs(d, shape, 5)
    within_budget(d, inputs, run_plan(p, inputs, p.sizes))


def test_skinny_products_with_a_long_k_split_on_tensor_cores():
    d = napkin.load("matmul")
    for shape in ({"m": 128, "n": 128, "k": 65536}, {"m": 16, "n": 512, "k": 65536}):
        p = plan(d, "h200", shape)
        assert p.split is not None and p.split.axis == "k", shape
        assert p.kernels[0].schedule.engine == "tensor-core product", shape
        assert p.time < p.split.unsplit_time / 2, shape


@pytest.mark.parametrize("hints", [{"split": {"c": "8"}}, {"group": {"r": 2.5}},
                                   {"stream": {"c": True}}, {"split": {"c": 0}}])
def test_hint_values_from_python_are_checked(hints):
    """napkin.compile(split=..., group=..., stream=...) takes whole numbers of at least 1: a
    string, a float or a boolean is N0304, not a TypeError."""
    with pytest.raises(NapkinError) as exc:
        napkin.compile("softmax", backend="interpret", **hints).compiled_for({"r": 4, "c": 64})
    assert exc.value.diagnostics[0].code == "N0304"


def test_the_list_names_every_library_diagram_that_splits():
    """SPLITS (the split tests' diagrams) is every library diagram with an axis that splits:
    a diagram added to the library is split, interpreted and emulated in the default suite."""
    from napkin.diagrams.sources import library_names
    splits = set()
    for name in library_names():
        g = canonicalize(napkin.load(name).ir)
        if any(sp.splittable(g, a) is None for a in g.graph["axes"]):
            splits.add(name)
    assert splits == set(SPLITS)


@pytest.mark.parametrize("name", sampled(SPLITS))
def test_every_library_split_runs_on_the_interpreter_and_the_emulator(name, rng, within_budget):
    """Each library diagram split along its longest axis that splits (a dynamic one first),
    by 5 (which divides none of the sizes), interpreted and emulated and compared with the
    float64 oracle (issue 15: every library diagram whose reductions merge, in CI; paged
    attention emulated in the thorough tier, INTERPRETED_ONLY)."""
    from napkin.pipeline import run_plan
    d = napkin.load(name, **SMALL.get(name, {}))
    g = canonicalize(d.ir)
    axes = [a for a in g.graph["axes"] if sp.splittable(g, a) is None]
    axis = max(axes, key=lambda a: (d.axes[a] is None, a))
    shape = _shape(d, rng, 3, 7)
    if d.axes[axis] is None:
        rep = d.ir.graph["axes"][axis].rep
        shape = {a: 37 if d.ir.graph["axes"][a].rep == rep else v for a, v in shape.items()}
    p = plan(d, "h100", shape, {"split": {axis: 5}})
    assert p.split is not None and p.split.parts == 5
    inputs = random_inputs(d, shape, 7)
    within_budget(d, inputs, interpret(p, inputs))
    if name not in INTERPRETED_ONLY:
        within_budget(d, inputs, run_plan(p, inputs, p.sizes))


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_argmax_splits_and_keeps_the_first_best_position(fn, dtype):
    """argmax/argmin over a split axis: per split the best value and its first position, the
    merge takes the first split holding the best value (compiler/split_merges.Merges._arg). Ties
    everywhere (a few distinct values), NaN twice in a row (the first wins), a row of -inf,
    odd splits, splits past the chunks and an empty last split; on the interpreter and the
    emulator against NumPy."""
    from napkin.runtime.interpret import interpret
    d = napkin.load(f"axis b, v\nin Z[b v]: {dtype}\nA[b] = {fn}[v](Z)\nout A: i64\n")
    rng = np.random.default_rng(3)
    Z = rng.integers(-3, 3, (5, 97)).astype(np.float32 if dtype == "f32" else np.int32)
    if dtype == "f32":
        Z[1, 40] = Z[1, 90] = np.nan
        Z[2] = -np.inf
    want = (np.argmax if fn == "argmax" else np.argmin)(Z, 1)
    for parts in (2, 13, 50):
        p = plan(napkin.load(f"axis b, v\nin Z[b v]: {dtype}\nsplit v by {parts}\n"
                             f"A[b] = {fn}[v](Z)\nout A: i64\n"), "h100", {"b": 5, "v": 97})
        assert p.split is not None and p.split.partials == ("A.part", "A.at")
        np.testing.assert_array_equal(interpret(p, {"Z": Z})["A"], want)
        if parts != 13:
            continue
        np.testing.assert_array_equal(run_plan(p, {"Z": Z}, p.sizes)["A"], want)
    (out,) = napkin.run(d, Z)          # (the reference: a tuple of the outputs)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("name, split, shape, line", [
    ("linear_gelu", "i", {"t": 5, "i": 33, "o": 9}, 8),
    ("mlp", "m", {"t": 5, "m": 33, "f": 16, "o": 9}, 8),
])
def test_a_split_product_refused_on_tensor_cores_points_at_the_product(name, split, shape, line):
    """The partial kernel's product is the diagram's, rewritten over the split's parts: it had
    no span, and N0606 for a kernel of a split had no line:column (docs: every diagnostic of a
    diagram points into it)."""
    from napkin import pipeline
    with pytest.raises(NapkinError) as exc:
        pipeline.plan(napkin.load(name), pipeline.Options.make(
            target="h100", shape=shape, split={split: 2}, engine="tensor-cores", group={"t": 3}))
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0606" and diag.span is not None and diag.span.line == line
