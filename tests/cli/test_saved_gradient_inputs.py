"""`napkin run GRAD --check` on a saved gradient (`napkin grad --saved`): its saved statistics
(`P_lse`, `O_saved`) are computed from the forward on the random inputs, so they are consistent
with them; random ones made exp(S - P_lse) overflow f16 and napkin called that its own bug.
Where the forward cannot be found, napkin says the inputs are inconsistent instead."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.cli import main
from napkin.saved_inputs import forward_of, statistics_for

# unscaled scores: S ~ N(0, 64), so a random P_lse overflows exp(S - P_lse) in f16
FORWARD = ("axis q, x, d = 64\nin Q[q d]: f16, K[x d]: f16, V[x d]: f16\nS[q x] = Q * K\n"
           "O[q d] = softmax[x](S) * V\nout O: f16\n")


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(args))
    got = capsys.readouterr()
    return status, got.out, got.err


@pytest.fixture
def saved_gradient(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "att.napkin").write_text(FORWARD)
    assert _cli(capsys, "grad", "att.napkin", "--saved", "-o", "g.napkin")[0] == 0
    return tmp_path / "g.napkin"


def test_the_saved_statistics_are_the_forwards(saved_gradient, rng):
    g = napkin.load(str(saved_gradient))
    fwd, wrt = forward_of(g)
    assert [s.name for s in fwd.inputs] == ["Q", "K", "V"] and wrt is None
    q, x = 5, 7
    inputs = {n: rng.standard_normal(s).astype(np.float16) for n, s in
              (("Q", (q, 64)), ("K", (x, 64)), ("V", (x, 64)), ("dO", (q, 64)))}
    stats = statistics_for(g, inputs)
    lse_name = next(n for n in stats if n.endswith("_lse"))
    assert set(stats) == {lse_name, "O_saved"}
    S = inputs["Q"].astype(np.float64) @ inputs["K"].astype(np.float64).T      # NumPy oracle
    lse = np.log(np.sum(np.exp(S - S.max(1, keepdims=True)), 1)) + S.max(1)
    np.testing.assert_allclose(stats[lse_name], lse, rtol=1e-6)
    assert stats[lse_name].dtype == np.float32 and stats["O_saved"].dtype == np.float16
    O = (np.exp(S - lse[:, None]) @ inputs["V"].astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(stats["O_saved"].astype(np.float64), O.astype(np.float64),
                               rtol=2e-3, atol=2e-3)


def test_run_check_of_a_saved_gradient_passes(saved_gradient, capsys):
    status, out, err = _cli(capsys, "run", str(saved_gradient), "--shape", "q=9,x=13", "--check")
    assert status == 0, err
    assert out.count("matches the float64 reference") == 3 and "bug" not in err


def test_a_saved_gradient_of_a_library_diagram_and_of_some_inputs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _cli(capsys, "grad", "attention", "--saved", "--wrt", "K", "-o", "gk.napkin")[0] == 0
    fwd, wrt = forward_of(napkin.load(str(tmp_path / "gk.napkin")))
    assert fwd.name == "<library:attention>" and wrt == ("K",)


def test_without_its_forward_the_inputs_are_called_inconsistent_not_a_bug(saved_gradient,
                                                                         capsys, monkeypatch):
    (saved_gradient.parent / "att.napkin").unlink()
    status, out, err = _cli(capsys, "run", str(saved_gradient), "--shape", "q=9,x=13", "--check")
    # random statistics overflow f16 in the gradient: the reference as stored overflows alike
    # (inf is what the diagram means there), so the verdict is a match, with the warning
    assert status == 0 and "`O_saved` are random" in err, err
    assert "DOES NOT MATCH" not in out and "bug in napkin" not in err
    from napkin.commands import run
    from napkin.runtime.compare import Verdict
    monkeypatch.setattr(run.compare, "against_reference", lambda d, inputs, named, **kw: {
        name: Verdict(False, 1.0, 0.0, f"{name}: max error 1 > budget 0") for name in named})
    status, out, err = _cli(capsys, "run", str(saved_gradient), "--shape", "q=9,x=13", "--check")
    assert status == 1, (status, err)
    assert "`O_saved` are random" in err and "inconsistent inputs" in err
    assert "bug in napkin" not in err and "DOES NOT MATCH" in out
