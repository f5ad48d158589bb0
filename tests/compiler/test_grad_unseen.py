"""Gradients of diagrams that are not the library's, run as kernels (interpreter, emulator)
against float64 oracles written out in NumPy: the cases a sweep of new diagrams broke."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

SELF_ATTENTION = """
axis t, d, s
in X[t d]: f32
S[t s] = X * X[s d]
O[t d] = softmax[s](S) * X[s d]
out O: f32
"""


def _softmax(S, axis=-1):
    E = np.exp(S - S.max(axis, keepdims=True))
    return E / E.sum(axis, keepdims=True)


def _self_attention_grad(X, dO):
    """dX of O = softmax(X X^T) X, in float64: X is the queries, the keys and the values."""
    P = _softmax(X @ X.T)
    dP = dO @ X.T
    dS = P * (dP - np.sum(dP * P, -1, keepdims=True))
    return P.T @ dO + dS @ X + dS.T @ X


def _close(got, want, rtol=2e-5):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("backend", ["interpret", pytest.param("emulate", marks=pytest.mark.thorough)])
@pytest.mark.parametrize("t,d", [pytest.param(1, 17, marks=pytest.mark.thorough), (1, 1),
                                 pytest.param(3, 5, marks=pytest.mark.thorough)])
def test_self_attention_gradient_at_one_token(backend, t, d):
    """At t = 1 the whole gradient fused into one kernel that contracts t (g1[s d] = dS * X),
    so t is not woven there, and the online softmax paired with O kept one running max and
    sum for every row of t: the lowering failed (KeyError 't', a traceback from `napkin run`).
    A softmax pairs with its contraction only when its rows are woven (passes.softmax_pairs)."""
    rng = np.random.default_rng(t * 100 + d)
    X, dO = (rng.standard_normal((t, d)).astype(np.float32) for _ in range(2))
    (dX,) = napkin.run(napkin.grad(SELF_ATTENTION), X, dO, backend=backend)
    _close(dX, _self_attention_grad(X.astype(np.float64), dO.astype(np.float64)))


PER_COLUMN_SOFTMAX = """
axis t, d, s
in Q[t d]: f32
in K[s d]: f32
in V[s d]: f32
in dO[t d]: f32
O[t d] = softmax[s](Q * K) * V
D[t] = sum[d](dO * O)
out D: f32, O: f32
"""


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_softmax_whose_rows_a_later_sum_reduces_streams_in_two_passes(backend):
    """`softmax[s](Q * K)` keeps d (O has it), so each (t, d) is a row; D sums O over d in
    the same kernel, so d is not woven there, and the pair's one (m, l) per thread served
    every d (the same KeyError, at d = 4, 8, 32, 64, 128 but not 3 or 5: the plan split d
    over lanes). Not paired, the softmax's statistics take a pass of their own."""
    rng = np.random.default_rng(5)
    Q, dO = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(2))
    K, V = (rng.standard_normal((7, 4)).astype(np.float32) for _ in range(2))
    D, O = napkin.run(PER_COLUMN_SOFTMAX, Q, K, V, dO, backend=backend)
    P = _softmax(np.einsum("td,sd->tds", Q.astype(np.float64), K.astype(np.float64)))
    want_O = np.einsum("tds,sd->td", P, V.astype(np.float64))
    _close(O, want_O)
    _close(D, np.sum(dO * want_O, -1))


UNUSED = "axis r, c\nin X[r c]: f32\nin Z[r c]: f32\nY[r c] = X * 2.0\nout Y: f32\n"


def test_napkin_grad_prints_each_warning_once(tmp_path, capsys, monkeypatch):
    """`napkin grad` printed the diagram's warnings twice (load_diagram, then the command)."""
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "u.napkin").write_text(UNUSED)
    assert main(["grad", "u.napkin"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning[N0701]: input `Z` is never used") == 1, err


def test_a_gradient_read_back_from_its_file_warns_nothing(tmp_path, capsys, monkeypatch):
    """A gradient takes every forward input by contract (a bias the backward never reads):
    `napkin grad -o g.napkin` then `napkin check g.napkin` warned N0701 for it, though
    napkin.grad drops that warning as it derives the text; the file's first line (`# The
    gradient of ...`) says it is one. Any other diagram still warns (the forward here)."""
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lin.napkin").write_text("axis b, i, o\nin X[b i]: f32\nin W[i o]: f32\n"
                                         "in c[o]: f32\nY[b o] = X * W + c\nout Y: f32\n")
    assert main(["grad", "lin.napkin", "--wrt", "X,W", "-o", "g.napkin"]) == 0
    capsys.readouterr()
    assert main(["check", "g.napkin"]) == 0
    assert "warning[" not in capsys.readouterr().err
    text = (tmp_path / "g.napkin").read_text()
    (tmp_path / "plain.napkin").write_text(text.split("\n", 1)[1])   # the title edited away
    assert main(["check", "plain.napkin"]) == 0
    assert "warning[N0701]: input `c` is never used" in capsys.readouterr().err


def test_wrt_naming_an_input_twice_or_none(tmp_path, capsys, monkeypatch):
    """`--wrt X,X` failed with N0202 pointing into the generated text (`<grad:...>:14:14`),
    then was read as X silently (a slip such as `--wrt Q,Q` for `Q,K` went unsaid): it is
    N0810 with the list named once. `--wrt ""` said no output depends on a float input; it
    names none."""
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "u.napkin").write_text(UNUSED)
    assert main(["grad", "u.napkin", "--wrt", "X,X", "-o", "g.napkin"]) == 1
    err = capsys.readouterr().err
    assert "error[N0810]: --wrt names `X` twice" in err, err
    assert "help: name each input once: --wrt X (inputs: X, Z)" in err, err
    assert not (tmp_path / "g.napkin").exists()
    with pytest.raises(NapkinError, match="names `X` twice"):
        napkin.grad(UNUSED, wrt=["X", "Z", "X"])
    assert main(["grad", "u.napkin", "--wrt", "Y"]) == 1          # unknown: an error already
    assert "error[N0810]: `Y` is not an input" in capsys.readouterr().err
    for wrt in ("", ","):
        assert main(["grad", "u.napkin", "--wrt", wrt, "-o", "g.napkin"]) == 1
        err = capsys.readouterr().err
        assert "error[N0810]: --wrt names no input" in err and "help: inputs: X, Z" in err, err
        assert "Traceback" not in err and not (tmp_path / "g.napkin").exists()


def test_bad_planning_options_are_clear(capsys):
    """`--target ""` planned for h100 without a word; a hint of size 0 offered the Python
    API's spelling (`group={'q': 8}`) on the command line."""
    from napkin.cli import main
    assert main(["explain", "softmax", "--target", ""]) == 2
    assert "error[N0605]: the target is empty" in capsys.readouterr().err
    assert main(["run", "softmax", "--shape", "r=3,c=5", "--group", "r=0",
                 "--backend", "interpret"]) == 1
    err = capsys.readouterr().err
    assert "--group r=0: sizes are whole numbers of at least 1" in err
    assert "help: for example --group r=8 (group={'r': 8} in napkin.compile)" in err


def test_the_gradient_keeps_the_forwards_size_equations():
    """`y[i] = A[i i] * 3.0` refuses A of 3 x 4 (N0308); its gradient took it and returned a
    3 x 4 dA, the gradient of a function that does not exist: its text reads no A, so it
    declares the equation itself (`axis i, j = size(i)`, docs/language.md)."""
    from napkin.diagrams.diagnostics import NapkinError
    text = "axis i, j\nin A[i j]: f32\ny[i] = A[i i] * 3.0\nout y: f32\n"
    A, dy = np.ones((3, 4), np.float32), np.arange(3, dtype=np.float32)
    with pytest.raises(NapkinError, match="N0308"):
        napkin.run(text, A)
    g = napkin.grad(text)
    assert "axis i, j = size(i)\n" in g.source.text
    with pytest.raises(NapkinError, match="N0308"):
        napkin.run(g, A, dy)
    A3 = np.random.default_rng(5).standard_normal((3, 3)).astype(np.float32)
    (dA,) = napkin.run(g, A3, dy)                 # the gradient of 3 * diag(A): 3 dy on it
    np.testing.assert_allclose(dA, np.diag(3.0 * dy), rtol=1e-6)


MEAN_LOSS = """
axis t, v
in Z[t v]: f32
in label[t]: i32
L[t] = where(label > 0, logsumexp[v](Z) - Z[t label[t]], 0.0)
M[] = sum[t](L) / sum[t](where(label > 0, 1.0, 0.0))
out M: f32
"""


def test_a_cotangent_repeated_along_an_axis_is_named_without_it(tmp_path, capsys, monkeypatch):
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loss.napkin").write_text(MEAN_LOSS)
    assert main(["grad", "loss.napkin", "-o", "g.napkin"]) == 0
    capsys.readouterr()
    assert main(["check", "g.napkin"]) == 0
    assert "warning[" not in capsys.readouterr().err
    assert "dL[] = " in (tmp_path / "g.napkin").read_text()


# New diagrams beyond the library's (norms over other axes, cross-entropy through a gather,
# broadcasting, inputs used twice, several outputs, attention variants): the gradient's
# reference against central differences of the forward in float64; in the thorough tier
# also its kernels (interpreter and emulator) against the gradient's float64 reference.
UNSEEN = {
    "layernorm_over_rows": ({"r": 17, "c": 3}, """
axis r, c
in X[r c]: f32
in g[r]: f32
mu[c] = mean[r](X)
D[r c] = X - mu
Y[r c] = D * rsqrt(mean[r](D * D) + 1e-5) * g
out Y: f32
"""),
    "nll_of_log_softmax": ({"t": 3, "v": 33}, """
axis t, v
in Z[t v]: f32
in W[t]: f32
in label[t]: i32
LP[t v] = Z - logsumexp[v](Z)
L[] = sum[t](-W * LP[t label[t]])
out L: f32
"""),
    "attention_bias_gqa_dv": ({"g": 2, "r": 3, "q": 5, "x": 17, "d": 3, "e": 4}, """
axis g, r, q, x, d, e
in Q[g r q d]: f32
in K[g x d]: f32
in V[g x e]: f32
in Bi[q x]: f32
S[g r q x] = where(x <= q + size(x) - size(q), Q * K * 0.5 + Bi, -inf)
O[g r q e] = softmax[x](S) * V
L[g r q] = logsumexp[x](S)
out O: f32, L: f32
"""),
    # a mean over the counted rows (label 0 ignored): L's cotangent is one value repeated
    # along t, which the gradient names as a scalar (it wrote `dL[t] = dM / c`, N0703)
    "mean_loss_over_counted_rows": ({"t": 7, "v": 5}, MEAN_LOSS),
    "broadcast_twice_two_outputs": ({"a": 3, "b": 17, "c": 1}, """
axis a, b, c
in X[a b c]: f32
in u[b]: f32
in s[]: f32
H[a b c] = tanh(X * u + s) * X + erf(X) * expm1(u) + pow(u * u + 1.0, X)
Y[a] = sum[b c](H)
Z[a b c] = H * H - X / (u * u + 1.0)
out Y: f32, Z: f32
"""),
}


def _unseen_case(name, rng):
    sizes, text = UNSEEN[name]
    d = napkin.load(text)
    inputs = {s.name: rng.integers(0, sizes["v"], [sizes[a] for a in s.axes]).astype(np.int32)
              if s.dtype == "i32" else rng.standard_normal([sizes[a] for a in s.axes])
              for s in d.inputs}
    cot = {f"d{s.name}": rng.standard_normal([sizes[a] for a in s.axes]) for s in d.outputs}
    return d, inputs, cot


@pytest.mark.parametrize("name", list(UNSEEN))
def test_unseen_gradients_match_finite_differences(name):
    from napkin.runtime.reference import evaluate
    rng = np.random.default_rng(len(name))
    d, inputs, cot = _unseen_case(name, rng)
    got = evaluate(napkin.grad(d), {**inputs, **cot}, exact=True)

    def loss(ins):
        out = evaluate(d, ins, exact=True)
        return sum(float(np.sum(out[k] * cot[f"d{k}"])) for k in out)
    assert set(got) == {f"d{s.name}" for s in d.inputs if s.dtype == "f32"}
    for key, grad in got.items():
        x, v = inputs[key[1:]], rng.standard_normal(inputs[key[1:]].shape)
        fd = (loss({**inputs, key[1:]: x + 1e-6 * v}) - loss({**inputs, key[1:]: x - 1e-6 * v})) / 2e-6
        assert abs(fd - float(np.sum(grad * v))) <= 1e-6 * max(1.0, abs(fd)), (key, fd)


@pytest.mark.thorough
@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("name", list(UNSEEN))
def test_unseen_gradient_kernels_match_the_reference(name, backend, within_budget):
    rng = np.random.default_rng(len(name) + 1)
    d, inputs, cot = _unseen_case(name, rng)
    grad = napkin.grad(d)
    args = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in {**inputs, **cot}.items()}
    outs = napkin.run(grad, **args, backend=backend)
    within_budget(grad, args, dict(zip([s.name for s in grad.outputs], outs)))


RESIDUAL_RMSNORM = """
axis t, c
in X[t c]: f32
in R[t c]: f32
in g[c]: f32
H[t c] = X + R
Y[t c] = H * rsqrt(mean[c](H * H) + 1e-6) * g
out Y: f32, H: f32
"""


@pytest.mark.parametrize("t,c", [(1, 1), (3, 31), (2, 33)])
def test_inputs_with_one_cotangent_get_outputs_of_their_own(t, c):
    """X and R of a residual add have the same cotangent (dH's total): the sweep named the
    first output dX, remembered that name for the expression, and gave R's output the same
    one, so the backward listed `out dX, dX` and did not check (N0202 from `napkin grad`)."""
    g = napkin.grad(RESIDUAL_RMSNORM)
    assert [s.name for s in g.outputs] == ["dX", "dR", "dg"]
    rng = np.random.default_rng(t * 100 + c)
    X, R, dY, dH = (rng.uniform(-1, 1, (t, c)).astype(np.float32) for _ in range(4))
    gain = rng.uniform(-1, 1, c).astype(np.float32)
    dX, dR, dg = napkin.run(g, X, R, gain, dY, dH, backend="interpret")
    H = X.astype(np.float64) + R
    r = 1 / np.sqrt(np.mean(H * H, -1, keepdims=True) + 1e-6)
    a = dY * gain.astype(np.float64)
    want = dH + a * r - r ** 3 * H / c * np.sum(a * H, -1, keepdims=True)
    _close(dX, want)
    _close(dR, want)
    _close(dg, np.sum(dY * H * r, 0))


VIEWS_IN_FULL_SUMS = """
axis i, j
in A[i j]: f32
in b[i]: f32
s[] = sum[i j](A[j i])
tr[] = sum[i](A[i i] * b)
out s: f32, tr: f32
"""


@pytest.mark.parametrize("i", [1, 7])
def test_a_transpose_and_a_diagonal_under_a_full_sum_have_gradients(i):
    """A view (`A[j i]`, `A[i i]`) whose cotangent is a scalar repeated along its axes (the
    cotangent of a sum over all of them) failed an assertion in `napkin grad` (a traceback:
    `unview` read the view's cotangent as a named array). dA = ds + diag(dtr * b),
    db = dtr * diag(A), interpreted."""
    rng = np.random.default_rng(i)
    A, b = rng.standard_normal((i, i)).astype(np.float32), rng.standard_normal(i).astype(np.float32)
    ds, dtr = np.float32(0.75), np.float32(-1.5)
    dA, db = napkin.run(napkin.grad(VIEWS_IN_FULL_SUMS), A, b, ds, dtr, backend="interpret")
    _close(dA, ds + np.diag(dtr * b.astype(np.float64)))
    _close(db, dtr * np.diag(A.astype(np.float64)))
