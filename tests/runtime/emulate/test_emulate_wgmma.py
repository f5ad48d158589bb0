"""Hopper's warpgroup MMA (wgmma) on the CPU emulator, lane by lane.

The kernels (kernels/wgmma.cu) copy a shared-memory image that this file builds byte by
byte from its own model of the PTX ISA's canonical operand layouts ("Shared Memory Matrix
Layout": core matrices of 8 rows x 16 bytes, leading/stride byte offsets, 32/64/128-byte
swizzles) and read every thread's accumulator registers raw; the expected registers come
from this file's model of the warpgroup's accumulator layout. Neither model shares code
with the emulator's (runtime/emulate/napkin_emulate_wgmma.h). A seeded wrong layout (a
missing swizzle, swapped byte offsets, a wrong register map) must fail the same checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import ml_dtypes

from napkin.codegen import wgmma_ptx
from napkin.runtime.emulate import EmulatorError, Launch, Param, run

from .conftest import KERNELS

U8, U32 = Param("ptr", "unsigned char", const=True), Param("ptr", "unsigned int", const=True)
CF32, F32 = Param("ptr", "float", const=True), Param("ptr", "float")
PRODUCTS = {  # kernel -> (N, dtype, A M-major, B N-major)
    "wg_n8_f16": (8, "f16", False, False), "wg_n64_f16_tb": (64, "f16", False, True),
    "wg_n64_f16_ta_tb": (64, "f16", True, True), "wg_n136_bf16": (136, "bf16", False, False),
    "wg_n256_bf16_tb": (256, "bf16", False, True), "wg_n128_f16": (128, "f16", False, False),
    "wg_n64_f16_tb_staged": (64, "f16", False, True)}   # its image staged by cp.async
SIG = {**{k: (U8, U32, CF32, F32) for k in PRODUCTS}, "wg_groups": (U8, U32, CF32, F32),
       "wg_misuse": (U32, F32)}
DTYPE = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
WIDTH = {"none": 0, "32B": 32, "64B": 64, "128B": 128}


@pytest.fixture(scope="module")
def source(prelude):
    variants = [wgmma_ptx.Variant(n, dt, ta, tb) for n, dt, ta, tb in PRODUCTS.values()]
    return prelude + "\n" + wgmma_ptx.helpers(variants) + (KERNELS / "wgmma.cu").read_text()


# ---- the model: canonical layouts (PTX ISA), written independently of the emulator -------------

def tile_offsets(rows: int, depth: int, mn_major: bool, swizzle: str, lbo: int, sbo: int) -> np.ndarray:
    """Byte offset (before swizzling) of element (row, k) of an operand of `rows` (M or N) x
    `depth` (K) 2-byte elements. No swizzle: 8x8 core matrices, 128 contiguous bytes each
    (8 lines of 16 bytes: a row's 8 k, or with MN-major a k's 8 rows), the core matrix of rows
    8i.. and k 8j.. at i * SBO + j * LBO. A W-byte swizzle: lines of W bytes, 8 lines to an
    atom; K-major, line = a row (its W/2 k), rows 8i.. at i * SBO, the next W/2 of k in the
    next atom column (after all rows); MN-major, line = a k (W/2 rows), the atom of rows
    (W/2) i.. and k 8j.. at i * LBO + j * SBO."""
    r, k = np.arange(rows)[:, None], np.arange(depth)[None, :]
    if swizzle == "none":
        inner = (k % 8) * 16 + (r % 8) * 2 if mn_major else (r % 8) * 16 + (k % 8) * 2
        return (r // 8) * sbo + (k // 8) * lbo + inner
    w, e = WIDTH[swizzle], WIDTH[swizzle] // 2
    if mn_major:
        return (r // e) * lbo + (k // 8) * sbo + (k % 8) * w + (r % e) * 2
    column = -(-rows // 8) * sbo
    return (k // e) * column + (r // 8) * sbo + (r % 8) * w + (k % e) * 2


def swizzled(address: np.ndarray, swizzle: str) -> np.ndarray:
    """The PTX ISA's swizzle of a shared address: in each 128-byte line, the 16-byte chunk c
    moves to c XOR (line mod W/16) -- the pattern repeats every 8, 4, 2 lines (1024 bytes)."""
    if swizzle == "none":
        return address
    line, chunk = address // 128, (address // 16) % 8
    return address - chunk * 16 + (chunk ^ (line % (WIDTH[swizzle] // 16))) * 16


def accumulator_map(n: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the product tile of thread t's accumulator register j: warp w % 4 of
    the warpgroup holds rows 16w.., lane (g, q) = (lane / 4, lane % 4) rows g, g + 8 and
    columns 2q, 2q + 1 of each 8 columns, registers 4c..4c+3 = (g, 2q), (g, 2q+1), (g+8, 2q),
    (g+8, 2q+1) of columns 8c.."""
    t, j = np.arange(threads)[:, None], np.arange(n // 2)[None, :]
    warp, lane = (t // 32) % 4, t % 32
    return 16 * warp + lane // 4 + 8 * ((j % 4) // 2), 8 * (j // 4) + 2 * (lane % 4) + j % 2


class Operand:
    """One operand tile in the image: values (rows x depth), where it starts, its layout."""

    def __init__(self, values, start, mn_major, swizzle, lbo, sbo):
        self.values, self.start, self.mn_major = values, start, mn_major
        self.swizzle, self.lbo, self.sbo = swizzle, lbo, sbo
        self.offsets = tile_offsets(*values.shape, mn_major, swizzle, lbo, sbo)

    def place(self, image: np.ndarray, seeded: str | None = None) -> None:
        """Write the values' bytes where the layout says; `seeded`, a wrong layout: "unswizzled"
        (the swizzle left out) or "swapped" (LBO and SBO exchanged), the descriptor unchanged."""
        offsets, swizzle = self.offsets, self.swizzle
        if seeded == "unswizzled":
            swizzle = "none"
        elif seeded == "swapped":
            offsets = tile_offsets(*self.values.shape, self.mn_major, swizzle, self.sbo, self.lbo)
        at = swizzled(self.start + offsets, swizzle)
        bits = self.values.view(np.uint16)
        image[at] = (bits & 0xFF).astype(np.uint8)
        image[at + 1] = (bits >> 8).astype(np.uint8)

    def step(self, s: int) -> int:
        """The start of k16 step s (the unswizzled offset of element (0, 16 s))."""
        return self.start + int(self.offsets[0, 16 * s])

    def end(self) -> int:
        return self.start + int(self.offsets.max()) + 2


def layout(mn_major: bool, swizzle: str, rows: int, depth: int, fast_rows: bool) -> tuple[int, int]:
    """(LBO, SBO) of a compact tile: `fast_rows` puts row-adjacent core matrices (atoms)
    next to each other, else k-adjacent ones."""
    if swizzle == "none":
        along_rows, along_k = (128, -(-rows // 8) * 128) if fast_rows else (-(-depth // 8) * 128, 128)
        return (along_k, along_rows)  # LBO: k-adjacent, SBO: row-adjacent
    w = WIDTH[swizzle]
    if not mn_major:
        return 16, 8 * w               # LBO unused by K-major swizzles; SBO: the next 8 rows
    atoms_k, atoms_r = -(-depth // 8), -(-rows // (w // 2))
    if fast_rows:
        return 8 * w, atoms_r * 8 * w  # LBO: the next W/2 rows, SBO: the next 8 of k
    return atoms_k * 8 * w, 8 * w


def build(rng, name, swizzle_a, swizzle_b, depth, groups, fast_rows=True):
    n, dt, ta, tb = PRODUCTS[name]
    dtype = DTYPE[dt]
    A = rng.standard_normal((groups, 64, depth)).astype(dtype)
    B = rng.standard_normal((n, depth)).astype(dtype)
    lbo_a, sbo_a = layout(ta, swizzle_a, 64, depth, fast_rows)
    lbo_b, sbo_b = layout(tb, swizzle_b, n, depth, not fast_rows)
    a_ops = [Operand(A[0], 0, ta, swizzle_a, lbo_a, sbo_a)]
    span = -(-a_ops[0].end() // 1024) * 1024
    a_ops += [Operand(A[g], g * span, ta, swizzle_a, lbo_a, sbo_a) for g in range(1, groups)]
    b_op = Operand(B, groups * span, tb, swizzle_b, lbo_b, sbo_b)
    return A, B, a_ops, b_op, span


def params(a_ops, b_op, span, steps, scale_first, image_bytes, extra=()):
    a = a_ops[0]
    p = [image_bytes, steps, scale_first, a.lbo, a.sbo, wgmma_ptx.SWIZZLE[a.swizzle],
         b_op.lbo, b_op.sbo, wgmma_ptx.SWIZZLE[b_op.swizzle], span]
    for s in range(steps):
        p += [a.step(s), b_op.step(s)]
    return np.array(p + list(extra), np.uint32)


def expected(A, B, C, n, threads, scale_first):
    rows, cols = accumulator_map(n, threads)
    group = np.arange(threads)[:, None] // 128
    prod = np.einsum("gmk,nk->gmn", A.astype(np.float64), B.astype(np.float64))
    bound = np.einsum("gmk,nk->gmn", np.abs(A.astype(np.float64)), np.abs(B.astype(np.float64)))
    base = C.astype(np.float64) if scale_first else 0.0
    return prod[group, rows, cols] + base, bound[group, rows, cols] + np.abs(C)


def matches(D, want, bound) -> bool:
    return bool(not np.isnan(D).any() and (np.abs(D - want) <= 2.0**-20 * bound + 1e-30).all())


def run_product(source, rng, name, swizzle_a, swizzle_b, depth, groups, scale_first=1, seeded=None,
                extra=()):
    n = PRODUCTS[name][0]
    A, B, a_ops, b_op, span = build(rng, name, swizzle_a, swizzle_b, depth, groups)
    image = np.zeros(-(-b_op.end() // 1024) * 1024, np.uint8)
    for op in a_ops:
        op.place(image, seeded)
    b_op.place(image, seeded)
    steps, threads = depth // 16, 128 * groups
    C = rng.standard_normal((threads, n // 2)).astype(np.float32)
    out = run(source, SIG, [Launch(name, (1, 1, 1), (threads, 1, 1), image.size, ("image", "p", "C", "D"))],
              {"image": image, "p": params(a_ops, b_op, span, steps, scale_first, image.size, extra), "C": C,
               "D": np.full((threads, n // 2), np.nan, np.float32)})
    want, bound = expected(A, B, C, n, threads, scale_first)
    return out["D"], want, bound


CASES = [  # kernel, A's swizzle, B's swizzle, K, warpgroups
    ("wg_n8_f16", "none", "none", 32, 1),
    ("wg_n64_f16_tb", "128B", "128B", 64, 2),
    ("wg_n64_f16_ta_tb", "64B", "none", 32, 1),
    ("wg_n136_bf16", "128B", "32B", 32, 1),
    ("wg_n256_bf16_tb", "none", "128B", 16, 2),
    ("wg_n128_f16", "64B", "128B", 64, 1),
]


@pytest.mark.parametrize("name,swizzle_a,swizzle_b,depth,groups", CASES)
def test_wgmma_lane_by_lane(source, rng, name, swizzle_a, swizzle_b, depth, groups):
    D, want, bound = run_product(source, rng, name, swizzle_a, swizzle_b, depth, groups)
    assert matches(D, want, bound), np.nanmax(np.abs(D - want))


def test_wgmma_scale_d_zero_ignores_the_accumulator(source, rng):
    D, want, bound = run_product(source, rng, "wg_n64_f16_tb", "128B", "none", 32, 1, scale_first=0)
    assert matches(D, want, bound)


@pytest.mark.parametrize("seeded", ["unswizzled", "swapped", "registers"])
def test_seeded_wrong_layout_is_caught(source, rng, seeded):
    """The same check fails when the image is built with a wrong layout (128B data placed
    unswizzled; LBO and SBO exchanged) or the registers are read with a wrong map (g and
    g + 8 exchanged): the layouts above are what the emulator reads, not just any layout."""
    if seeded == "unswizzled":
        D, want, bound = run_product(source, rng, "wg_n64_f16_tb", "128B", "128B", 64, 1, seeded=seeded)
    elif seeded == "swapped":
        D, want, bound = run_product(source, rng, "wg_n136_bf16", "none", "none", 32, 1, seeded=seeded)
    else:
        D, want, bound = run_product(source, rng, "wg_n136_bf16", "none", "none", 32, 1)
        assert matches(D, want, bound)
        D = D.reshape(128, -1, 2, 2)[:, :, ::-1, :].reshape(128, -1)
    assert not matches(D, want, bound)


def test_cp_async_staged_operands_need_the_proxy_fence(source, rng):
    """cp.async writes shared memory through the generic proxy, wgmma reads it through the
    async proxy (PTX ISA, "Async Proxy"): with each writer's fence.proxy.async after its copies
    land, the product is right (two warpgroups: every warp reads other threads' copies);
    without it, the read is refused."""
    args = ("wg_n64_f16_tb_staged", "128B", "128B", 64, 2)
    D, want, bound = run_product(source, rng, *args, extra=(1,))
    assert matches(D, want, bound)
    with pytest.raises(EmulatorError, match="thread .*'s cp.async .* no fence.proxy.async"):
        run_product(source, rng, *args, extra=(0,))


def test_wait_group_completes_older_groups_and_reads_shared_memory_then(source, rng):
    """wait_group 1 leaves the newest group in flight: its accumulator keeps the old values.
    Its operand B zeroed before wait_group 0 gives C unchanged: the emulator reads shared
    memory at the wait, the latest a GPU may."""
    n, depth = 64, 32
    A = rng.standard_normal((64, depth)).astype(np.float16)
    B = rng.standard_normal((n, depth)).astype(np.float16)
    a = Operand(A, 0, False, "128B", *layout(False, "128B", 64, depth, True))
    b = Operand(B, 8192, True, "none", 1024, 128)   # k 0-15 in bytes 0-2047, k 16-31 in 2048-4095
    image = np.zeros(8192 + 4096, np.uint8)
    a.place(image)
    b.place(image)
    C = rng.standard_normal((128, n // 2)).astype(np.float32)
    p = params([a], b, 0, 2, 1, image.size, extra=())
    p = np.concatenate([p, np.array([2048], np.uint32)])
    out = run(source, SIG, [Launch("wg_groups", (1, 1, 1), (128, 1, 1), image.size, ("image", "p", "C", "D"))],
              {"image": image, "p": p, "C": C, "D": np.full((3, 128, n // 2), np.nan, np.float32)})
    D = out["D"]
    want0, bound0 = expected(A[None, :, :16], B[:, :16], C, n, 128, 1)
    assert matches(D[0], want0, bound0)
    np.testing.assert_array_equal(D[1], C)      # still in flight at wait_group 1
    np.testing.assert_array_equal(D[2], C)      # its B was zeros by the time it ran


@pytest.mark.parametrize("mode,message", [
    (0, "no wgmma.fence"), (1, "not completed by a wgmma.wait_group"),
    (2, "not in the block's dynamic shared memory"), (3, "issued different operations"),
    (5, "no wgmma.fence since the thread's last wgmma.wait_group"),
    (6, "warp 1 and warp 0 of warpgroup 0 issued different operations"),
    (7, "warp 2 issued only 0 in all")])
def test_wgmma_misuse_is_refused(source, mode, message):
    with pytest.raises(EmulatorError, match=message):
        run(source, SIG, [Launch("wg_misuse", (1, 1, 1), (128, 1, 1), 4096, ("p", "D"))],
            {"p": np.array([mode], np.uint32), "D": np.zeros(128, np.float32)})


def test_wgmma_needs_a_whole_warpgroup(source):
    with pytest.raises(EmulatorError, match="whole warpgroup"):
        run(source, SIG, [Launch("wg_misuse", (1, 1, 1), (64, 1, 1), 4096, ("p", "D"))],
            {"p": np.array([4], np.uint32), "D": np.zeros(64, np.float32)})
