"""`napkin run --check` on inputs holding NaN: the kernels skip whole masked chunks (as
FlashAttention does), so a NaN value read only where a mask gives probability 0 may not reach
the output, while the float64 reference's 0 * NaN is NaN (docs/language.md, NaN). The check
says so and exits 1, not 101 (a bug in napkin); with finite inputs a NaN out of place is
still a bug."""

from __future__ import annotations

import numpy as np

from napkin.cli import main


def _inputs(tmp_path, n: int, d: int, nan_key: int | None):
    rng = np.random.default_rng(7)
    Q, K, V = (rng.standard_normal((1, 1, n, d)).astype(np.float16) for _ in range(3))
    if nan_key is not None:
        V[0, 0, nan_key, 3] = np.nan      # read with probability 0 by every earlier row
    path = tmp_path / "qkv.npz"
    np.savez(path, Q=Q, K=K, V=V)
    return str(path)


def test_a_nan_value_under_a_causal_mask_is_no_bug_report(capsys, tmp_path):
    path = _inputs(tmp_path, 70, 16, nan_key=66)
    status = main(["run", "causal_attention", "-D", "d=16", "--inputs", path,
                   "--backend", "emulate", "--check"])
    out, err = capsys.readouterr()
    assert "NaN in different places" in out, out           # rows < 64 skip key 66's chunk
    assert status == 1, (out, err)
    assert "`V` holds NaN or inf" in err and "bug" not in err, err


def test_a_nan_out_of_place_on_finite_inputs_is_still_a_bug(capsys, tmp_path, monkeypatch):
    from napkin.kernel import Kernel
    real = Kernel.__call__

    def nan_first(self, *args, **kw):       # a seeded wrong result: one NaN
        (o,) = real(self, *args, **kw)
        o = o.copy()
        o[0, 0, 0, 0] = np.nan
        return (o,)
    monkeypatch.setattr(Kernel, "__call__", nan_first)
    path = _inputs(tmp_path, 9, 16, nan_key=None)
    status = main(["run", "causal_attention", "-D", "d=16", "--inputs", path,
                   "--backend", "interpret", "--check"])
    out, err = capsys.readouterr()
    assert status == 101 and "bug in napkin" in err, (out, err)


def test_without_a_mask_a_nan_out_of_place_is_a_bug_whatever_the_inputs(capsys, tmp_path,
                                                                         monkeypatch):
    """The explanation above was given for any diagram once an input held NaN, so a real NaN
    out of place (here seeded: a NaN row of softmax's written as zeros) was excused as "a
    term a mask makes 0": it is given only where the plan leaves masked terms out."""
    from napkin.kernel import Kernel
    real = Kernel.__call__

    def nan_lost(self, *args, **kw):
        (o,) = real(self, *args, **kw)
        return (np.nan_to_num(o, nan=0.0),)
    monkeypatch.setattr(Kernel, "__call__", nan_lost)
    X = np.random.default_rng(3).standard_normal((5, 33)).astype(np.float16)
    X[2, 7] = np.nan                         # row 2 of the softmax is NaN in the reference
    path = tmp_path / "x.npz"
    np.savez(path, X=X)
    status = main(["run", "softmax", "--inputs", str(path), "--backend", "interpret", "--check"])
    out, err = capsys.readouterr()
    assert "NaN in different places (first at [[2, 0]" in out, out
    assert status == 101 and "bug in napkin" in err and "mask" not in err, (out, err)
