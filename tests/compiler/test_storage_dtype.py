"""Declared storage dtypes of intermediates (`H[t f]: f16 = ...`, docs/language.md): checked as
an output's dtype is, read by every decision through model.storage_dtype (bytes moved, the
kernels' pointer types, tensor-core eligibility), and stored rounded where H crosses kernels
(emulated against a NumPy formula that rounds H, and the one that does not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError

MLP = """\
axis t, m, f, o
in X[t m]: f16
in W1[m f]: f16
in W2[f o]: f16
H[t f]: f16 = gelu(X * W1)
Y[t o] = H * W2
out Y: f16
"""
BIG = {"t": 4096, "m": 4096, "f": 16384, "o": 4096}


def test_the_language_page_shows_this_example():
    page = (Path(__file__).parents[2] / "docs" / "language.md").read_text()
    assert f"```\n{MLP}```" in page


def test_an_f16_intermediate_halves_its_bytes_between_kernels():
    """Declared f16, or left to the planner (read only by a tensor-core product beside f16
    W2: compiler/stored16.py stores it f16 too), H moves half the bytes of H declared f32."""
    declared = plan(napkin.load(MLP), "h100", BIG)
    plain = plan(napkin.load(MLP.replace("H[t f]: f16", "H[t f]")), "h100", BIG)
    wide = plan(napkin.load(MLP.replace("H[t f]: f16", "H[t f]: f32")), "h100", BIG)
    assert len(declared.kernels) == len(plain.kernels) == len(wide.kernels) == 2
    for p, width in ((declared, 2), (plain, 2), (wide, 4)):
        (h,) = [a for a in p.kernels[1].model.arrays if a.name == "H" and a.role == "load"]
        assert h.bytes == width
        assert p.kernels[1].schedule.engine == "tensor-core product"
    assert declared.kernels[0].cost.levels[1].H < wide.kernels[0].cost.levels[1].H
    assert declared.time < wide.time and plain.time == declared.time
    from napkin.pipeline import lowered
    _, source = lowered(declared)
    assert "__half* __restrict__ p" in source.split("napkin_k1(")[0].split("napkin_k0(")[1]


def test_the_text_of_the_ir_and_the_gradient_keep_it():
    from napkin.compiler.printer import format_ir
    d = napkin.load(MLP)
    assert "assign H (stored f16) %4 : [t f] f32" in format_ir(d.ir)
    assert "H[t f]: f16 = gelu(" in napkin.grad(d).source.text


@pytest.mark.parametrize("line, code, words", [
    ("M[t f]: f16 = X * W1 > 0", "N0405", "boolean mask and cannot be stored as f16"),
    ("H[t f]: i32 = X * W1", "N0406", "holds floating-point values and cannot be stored as i32"),
    ("H[t f]: f8 = X * W1", "N0401", "unknown dtype `f8`"),
])
def test_a_declared_dtype_is_checked(line, code, words):
    text = f"axis t, m, f\nin X[t m]: f16\nin W1[m f]: f16\n{line}\nout {line[0]}: f32\n"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text.replace("out M: f32", "Y[t f] = where(M, 1.0, 0.0)\nout Y: f32"))
    assert exc.value.code == code and words in str(exc.value)


def test_an_output_takes_one_dtype():
    text = MLP.replace("Y[t o] = H * W2\nout Y: f16", "Y[t o] = H * W2\nout Y: f16, H: f32")
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    assert exc.value.code == "N0405" and "declared f16 but output as f32" in str(exc.value)
    napkin.load(text.replace("H: f32", "H: f16"))


def test_the_kernels_store_it_rounded(rng):
    """Unfused (H through global memory), with Y in f32: the emulated Y is the product of H
    rounded to f16, not of H as computed."""
    from napkin.pipeline import run_plan
    d = napkin.load(MLP.replace("gelu(X * W1)", "X * W1").replace("out Y: f16", "out Y: f32"))
    shape = {"t": 37, "m": 48, "f": 72, "o": 24}
    p = plan(d, "h100", shape, fusion=False)
    assert len(p.kernels) == 2
    X, W1, W2 = (rng.standard_normal(s).astype(np.float16) for s in ((37, 48), (48, 72), (72, 24)))
    out = run_plan(p, dict(X=X, W1=W1, W2=W2), p.sizes)["Y"].astype(np.float64)
    H = X.astype(np.float64) @ W1.astype(np.float64)
    rounded = H.astype(np.float16).astype(np.float64) @ W2.astype(np.float64)
    exact = H @ W2.astype(np.float64)
    # (a product lying near a rounding midpoint may round the other way: the median, not max)
    near, far = np.median(np.abs(out - rounded)), np.median(np.abs(out - exact))
    assert near < 0.01 * far, (near, far)
