"""`napkin run --check` holds each output to the order its backend summed in: the plan's
longest sequential accumulation (runtime/bound.py) for interpret, emulate and cuda, float64 for
the reference backend; no longer every order of n terms (a sum of 2M values had a budget of
2.4e5 against an error of 3e-4, so --check could hardly fail on long sums)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from napkin.cli import main

ROWS = "axis r, n\nin X[r n]: f32\nY[r] = sum[n](X)\nout Y: f32\n"


def _run(capsys, tmp_path, backend: str, shape: str) -> tuple[int, str]:
    path = tmp_path / "rows.napkin"
    path.write_text(ROWS)
    capsys.readouterr()
    status = main(["run", str(path), "--shape", shape, "--check", "--backend", backend])
    return status, capsys.readouterr().out


def _budgets(out: str) -> list[float]:
    return [float(b) for b in re.findall(r"budget ([0-9.e+-]+)", out)]


@pytest.mark.parametrize("backend", ["interpret", "reference"])
def test_a_long_sum_is_held_to_its_backends_order(capsys, tmp_path, backend):
    # the old rule: (n - 1) u sum|x| = 20010 * 2^-24 * 0.8 * 20011 = 19 for each row
    status, out = _run(capsys, tmp_path, backend, "r=5,n=20011")
    assert status == 0, out
    [budget] = _budgets(out)
    assert budget < (0.5 if backend == "interpret" else 2e-4), out


def test_a_row_off_by_one_percent_is_caught(capsys, tmp_path, monkeypatch):
    """One element of a 20,011-term sum of standard normal values, 1e-2 relative off: caught
    against the plan's order (its budget about 1), not against every order (about 19)."""
    from napkin.kernel import Kernel
    real = Kernel.__call__

    def one_off(self, *args, **kw):
        (y,) = real(self, *args, **kw)
        y = y.copy()
        i = int(np.argmax(np.abs(y)))
        y[i] = np.float32(np.float64(y[i]) * 1.01)
        return (y,)
    monkeypatch.setattr(Kernel, "__call__", one_off)
    status, out = _run(capsys, tmp_path, "interpret", "r=5,n=20011")
    assert status == 101 and "DOES NOT MATCH" in out, out
