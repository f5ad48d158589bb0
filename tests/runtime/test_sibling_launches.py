"""Sibling products in one launch (compiler/siblings.py, codegen/launch.py): independent
tensor-core products reading one array run as one grid, the concatenation of their block
grids; emulated at odd sizes (partial tiles, a grid of 16 blocks walking more tiles) against
float64, with two and three siblings of different output sizes, f16 and bf16."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import napkin
from napkin.codegen import program as P
from napkin.codegen.lower import lower
from napkin.compiler import siblings
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime.launches import make_launches

from .close import assert_close

# the projections of attention: Q wider than K and V (h*d = 48 against 16)
THREE = """axis t, m, n, k
in X[t m]: f16
in Wq[m n]: f16, Wk[m k]: f16, Wv[m k]: f16
Q[t n] = X * Wq
K[t k] = X * Wk
V[t k] = X * Wv
out Q: f16, K: f16, V: f16
"""
# grouped-query attention's: g groups of h query heads, one key and value head per group
GQA = """axis t, m, g, h
axis d = 16
in X[t m]: bf16
in Wq[m g h d]: bf16, Wk[m g d]: bf16, Wv[m g d]: bf16
Q[g h t d] = X * Wq
K[g t d] = X * Wk
V[g t d] = X * Wv
out Q: bf16, K: bf16, V: bf16
"""
# two siblings over the block's batch, of different widths (n against k)
TWO = """axis b, s, m, n, k
in N1[b s m]: f16
in Wk[m n]: f16, Wv[m k]: f16
K[b s n] = N1 * Wk
V[b s k] = N1 * Wv
out K: f16, V: f16
"""


def _one_launch(p, members: int):
    """The plan's one shared launch, and the program's one kernel covering every member's
    tiles (its grid the sum of theirs)."""
    (la,) = p.launches
    assert la.members == tuple(range(members))
    prog = lower(p)
    (k,) = prog.kernels
    (spec,) = make_launches(prog, p.sizes)
    assert spec.blocks == sum(la.blocks) == sum(siblings.blocks(kp, p.sizes) for kp in p.kernels)
    # each member takes its own range of the summed tiles, one after another (each block one
    # tile of one product, not a tile of each)
    ranges = [s.cond for b in k.body if isinstance(b, P.Block) for f in b.body
              if isinstance(f, P.For) and f.var == "gblk" for s in f.body[:1]]
    offsets = ["0"] + [" + ".join(f"sib{j}" for j in range(i + 1)) for i in range(members - 1)]
    assert ranges == [f"gblk < {o} || gblk >= {o} + sib{i}" for i, o in enumerate(offsets)]
    return la


def test_three_siblings_of_different_widths_share_one_grid_emulated(rng):
    sizes = {"t": 37, "m": 29, "n": 48, "k": 16}
    p = plan(napkin.load(THREE), "h100", sizes, engine="tensor-cores")
    _one_launch(p, 3)
    x = rng.standard_normal((37, 29)).astype(np.float16)
    w = {name: (rng.standard_normal((29, c)) * 0.2).astype(np.float16)
         for name, c in (("Wq", 48), ("Wk", 16), ("Wv", 16))}
    out = run_plan(p, {"X": x, **w}, sizes)
    for o, name in (("Q", "Wq"), ("K", "Wk"), ("V", "Wv")):
        assert_close(out[o], x.astype(np.float64) @ w[name].astype(np.float64), "f16", slack=4.0)


def test_grouped_query_projections_share_one_grid_in_bf16_emulated(rng):
    sizes = {"t": 37, "m": 29, "g": 2, "h": 3}
    p = plan(napkin.load(GQA), "h100", sizes, engine="tensor-cores")
    la = _one_launch(p, 3)
    assert la.blocks[0] > la.blocks[1] == la.blocks[2]       # (Q's grid the widest)
    bf = ml_dtypes.bfloat16
    x = rng.standard_normal((37, 29)).astype(bf)
    wq = (rng.standard_normal((29, 2, 3, 16)) * 0.2).astype(bf)
    wk, wv = ((rng.standard_normal((29, 2, 16)) * 0.2).astype(bf) for _ in range(2))
    out = run_plan(p, {"X": x, "Wq": wq, "Wk": wk, "Wv": wv}, sizes)
    f = x.astype(np.float64)
    assert_close(out["Q"], np.einsum("tm,mghd->ghtd", f, wq.astype(np.float64)), "bf16", 4.0)
    assert_close(out["K"], np.einsum("tm,mgd->gtd", f, wk.astype(np.float64)), "bf16", 4.0)
    assert_close(out["V"], np.einsum("tm,mgd->gtd", f, wv.astype(np.float64)), "bf16", 4.0)


def test_two_siblings_over_a_batch_share_one_grid_emulated(rng):
    sizes = {"b": 2, "s": 37, "m": 29, "n": 24, "k": 40}
    p = plan(napkin.load(TWO), "h100", sizes, engine="tensor-cores")
    _one_launch(p, 2)
    n1 = rng.standard_normal((2, 37, 29)).astype(np.float16)
    wk = (rng.standard_normal((29, 24)) * 0.2).astype(np.float16)
    wv = (rng.standard_normal((29, 40)) * 0.2).astype(np.float16)
    out = run_plan(p, {"N1": n1, "Wk": wk, "Wv": wv}, sizes)
    f = n1.astype(np.float64)
    assert_close(out["K"], f @ wk.astype(np.float64), "f16", slack=4.0)
    assert_close(out["V"], f @ wv.astype(np.float64), "f16", slack=4.0)


def test_the_shared_launch_is_said_and_its_cuda_compiles():
    """explain names the kernels sharing the launch and why; the one kernel's CUDA compiles
    (NVRTC, sm_80, ptxas run) with no spills."""
    from napkin.codegen.render import render
    from napkin.explain import render_text, report
    from napkin.runtime import nvrtc
    sizes = {"t": 37, "m": 29, "n": 48, "k": 16}
    p = plan(napkin.load(THREE), "h100", sizes, engine="tensor-cores")
    said = render_text(report(p, compare=False))
    assert "shares one launch with kernels k1, k2: all read X and none reads what another " \
           "stores" in said, said
    assert said.count("launched with kernel k0, one grid") == 2
    if not nvrtc.available():
        pytest.skip("NVRTC wheels not installed")
    res = nvrtc.compile(render(lower(p)), arch="sm_80").resources
    assert list(res) == ["napkin_k0"] and res["napkin_k0"].spill_stores == 0, res


# H and G read X too, after Q and K: a second launch of siblings (each reader of X may start
# one), after the first
LATER = """axis t, m, n, k
in X[t m]: f16
in Wq[m n]: f16, Wk[m k]: f16
Q[t n] = X * Wq
K[t k] = X * Wk
H[n m] = Q[t n] * X[t m]
G[k m] = K[t k] * X[t m]
out H: f16, G: f16
"""


def test_later_readers_of_the_shared_array_share_a_launch_of_their_own_emulated(rng):
    sizes = {"t": 37, "m": 29, "n": 48, "k": 16}
    p = plan(napkin.load(LATER), "h100", sizes, engine="tensor-cores")
    assert [la.members for la in p.launches] == [(0, 1), (2, 3)]
    assert len(lower(p).kernels) == 2
    x = rng.standard_normal((37, 29)).astype(np.float16)
    wq = (rng.standard_normal((29, 48)) * 0.2).astype(np.float16)
    wk = (rng.standard_normal((29, 16)) * 0.2).astype(np.float16)
    out = run_plan(p, {"X": x, "Wq": wq, "Wk": wk}, sizes)
    f = x.astype(np.float64)
    assert_close(out["H"], (f @ wq.astype(np.float64)).T @ f, "f16", slack=8.0)
    assert_close(out["G"], (f @ wk.astype(np.float64)).T @ f, "f16", slack=8.0)
