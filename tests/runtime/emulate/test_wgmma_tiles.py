"""The tensor-core operand tiles the planner lays out (compiler/tilelayout.py, staged through
codegen/tiles.offset as the mma.sync kernels stage them) read by wgmma through the
descriptors compiler/wgmma_layout.py gives them: the product on the CPU emulator against
float64, over every canonical case (K-major rows of 16/32/64 values, MN-major rows of
8/16/32/64, one and two warpgroups), and None where no canonical layout matches."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from napkin.codegen import wgmma_ptx
from napkin.codegen.tiles import offset
from napkin.compiler import tilelayout
from napkin.compiler.wgmma_layout import descriptor
from napkin.diagrams.diagnostics import BackendUnavailable
from napkin.runtime import nvrtc, sass
from napkin.runtime.emulate import Launch, Param, run

CASES = [  # name, warpgroups, chunk (K), N, A K-major, B K-major, dtype
    ("t_a16_b8", 1, 16, 8, True, False, "f16"),
    ("t_a32_b32", 2, 32, 32, True, False, "bf16"),
    ("t_a64_b64", 2, 64, 64, True, False, "f16"),
    ("t_a64_bk256", 1, 64, 256, True, True, "bf16"),
    ("t_a16_bk128", 2, 16, 128, True, True, "f16"),
    ("t_am_b16", 1, 32, 16, False, False, "f16"),
    ("t_a32_bk72", 1, 32, 72, True, True, "bf16"),
]
CTYPE = {"f16": "__half", "bf16": "__nv_bfloat16"}
DTYPE = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _shapes(wg, chunk, n, a_k, b_k):
    """(outer, inner) of each tile as staged: the contracted axis inner where K-major."""
    rows = 64 * wg
    return ((rows, chunk) if a_k else (chunk, rows)), ((n, chunk) if b_k else (chunk, n))


def _kernel(name, wg, chunk, n, a_k, b_k, dtype) -> str:
    (ao, ai), (bo, bi) = _shapes(wg, chunk, n, a_k, b_k)
    la, lb = tilelayout.layout(ao, ai), tilelayout.layout(bo, bi)
    da, db = descriptor(la, a_k), descriptor(lb, b_k)
    a_bytes = -(-la.count * 2 // 1024) * 1024
    v = wgmma_ptx.Variant(n, dtype, da.mn_major, db.mn_major)
    t = CTYPE[dtype]
    modes = wgmma_ptx.SWIZZLE
    return f"""
extern "C" __global__ void {name}(const {t}* A, const {t}* B, float* D) {{
  NAPKIN_WGMMA_SMEM(smem);
  {t}* ta = reinterpret_cast<{t}*>(smem);
  {t}* tb = reinterpret_cast<{t}*>(smem + {a_bytes});
  const int tid = threadIdx.x;
  for (int i = tid; i < {ao * ai}; i += blockDim.x) {{
    const int r = i / {ai}, c = i % {ai};
    ta[{offset(la, "r", "c")}] = A[i];
  }}
  for (int i = tid; i < {bo * bi}; i += blockDim.x) {{
    const int r = i / {bi}, c = i % {bi};
    tb[{offset(lb, "r", "c")}] = B[i];
  }}
  napkin_wgmma_proxy_fence();
  __syncthreads();
  float d[{n // 2}];
  const unsigned char* a0 = smem + (tid / 128) * {da.rows64};
  napkin_wgmma_fence();
  for (int s = 0; s < {chunk // 16}; ++s) {{
    const unsigned long long x = napkin_wgmma_desc(a0 + s * {da.step}, {da.lbo}, {da.sbo}, {modes[da.swizzle]});
    const unsigned long long y = napkin_wgmma_desc(smem + {a_bytes} + s * {db.step}, {db.lbo}, {db.sbo}, {modes[db.swizzle]});
    {v.name}(d, x, y, s > 0);
  }}
  napkin_wgmma_commit();
  napkin_wgmma_wait<0>();
  for (int i = 0; i < {n // 2}; ++i) D[tid * {n // 2} + i] = d[i];
}}
""", v, a_bytes + -(-lb.count * 2 // 1024) * 1024


@pytest.fixture(scope="module")
def built(prelude):
    kernels, variants, smem = [], [], {}
    for case in CASES:
        text, v, size = _kernel(*case)
        kernels.append(text)
        variants.append(v)
        smem[case[0]] = size
    return prelude + "\n" + wgmma_ptx.helpers(variants) + "".join(kernels), smem


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_planner_tiles_feed_wgmma(built, rng, case):
    source, smem = built
    name, wg, chunk, n, a_k, b_k, dtype = case
    (ao, ai), (bo, bi) = _shapes(wg, chunk, n, a_k, b_k)
    A = rng.standard_normal((ao, ai)).astype(DTYPE[dtype])
    B = rng.standard_normal((bo, bi)).astype(DTYPE[dtype])
    threads = 128 * wg
    sig = {name: (Param("ptr", CTYPE[dtype], const=True), Param("ptr", CTYPE[dtype], const=True),
                  Param("ptr", "float"))}
    out = run(source, sig, [Launch(name, (1, 1, 1), (threads, 1, 1), smem[name], ("A", "B", "D"))],
              {"A": A, "B": B, "D": np.full((threads, n // 2), np.nan, np.float32)})["D"]
    a = (A if a_k else A.T).astype(np.float64)           # rows x K
    b = (B if b_k else B.T).astype(np.float64)           # N x K
    t, j = np.arange(threads)[:, None], np.arange(n // 2)[None, :]
    lane = t % 32
    rows = 16 * (t // 32) + lane // 4 + 8 * ((j % 4) // 2)   # warp w of the block: rows 16w..
    cols = 8 * (j // 4) + 2 * (lane % 4) + j % 2
    want = (a @ b.T)[rows, cols]
    bound = (np.abs(a) @ np.abs(b).T)[rows, cols]
    assert not np.isnan(out).any()
    assert (np.abs(out - want) <= 2.0**-20 * bound + 1e-30).all(), np.abs(out - want).max()


@pytest.mark.parametrize("outer,inner,contracted_inner", [
    (64, 128, True),    # K-major rows of 256 bytes: two lines a row
    (16, 128, False),   # MN-major N = 128 in one row
    (64, 48, True),     # padded rows
    (64, 8, True),      # one chunk a row, K-major: rows are not 8 x 16-byte core matrices
    (64, 24, False),    # three chunks a row ("plain", not 8 x 16 bytes)
])
def test_no_descriptor_where_no_canonical_layout_matches(outer, inner, contracted_inner):
    assert descriptor(tilelayout.layout(outer, inner), contracted_inner) is None


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed (napkin[nvrtc])")
def test_the_same_kernels_compile_for_sm90a(built):
    """The GPU side of the same text: ptxas accepts it for sm_90a (static; with cuobjdump,
    the SASS holds one HGMMA shape per kernel's N)."""
    out = nvrtc.compile(built[0], arch="sm_90a")
    assert set(out.resources) == {case[0] for case in CASES}
    assert all(r.spill_stores == 0 for r in out.resources.values())
    # the accumulator is read only after the wait: ptxas serialises no wgmma (C7514)
    assert "C7514" not in out.log and "C7517" not in out.log
    try:
        ops = sass.opcodes(out.cubin, modifiers=True)
    except BackendUnavailable:
        return
    shapes = {int(op.split(".")[1].split("x")[1]) for op in ops if op.startswith("HGMMA.")}
    assert shapes == {case[3] for case in CASES}
