"""Seeded bugs the emulator must catch: a missing __syncthreads (ThreadSanitizer), an
unguarded tail read (AddressSanitizer), divergent and mismatched barriers, warp
collectives that cannot complete, and a hang. Each is reported as an EmulatorError
naming the source line, in seconds, never as a hang."""

from __future__ import annotations

import time

import numpy as np
import pytest

from napkin.runtime.emulate import EmulatorError, Launch, Param, run

F32, CF32 = Param("ptr", "float"), Param("ptr", "float", const=True)
I32 = Param("i32", "")


def _matmul_launch(name, M, N, K):
    return Launch(name, (-(-N // 16), -(-M // 16), 1), (16, 16, 1), 2 * 16 * 16 * 4, ("A", "B", "C", M, N, K))


def _matmul_buffers(rng, M, N, K):
    return {"A": rng.standard_normal((M, K)).astype(np.float32), "B": rng.standard_normal((K, N)).astype(np.float32),
            "C": np.full((M, N), np.nan, np.float32)}


def test_thread_sanitizer_accepts_the_correct_matmul(kernel, rng):
    M, N, K = 33, 17, 40
    bufs = _matmul_buffers(rng, M, N, K)
    out = run(kernel("matmul_tiled.cu"), {"matmul_tiled": (CF32, CF32, F32, I32, I32, I32)},
              [_matmul_launch("matmul_tiled", M, N, K)], bufs, sanitize="thread")
    np.testing.assert_allclose(out["C"], bufs["A"].astype(np.float64) @ bufs["B"], rtol=1e-5, atol=1e-5)


NOSYNC_SIG = {name: (CF32, CF32, F32, I32, I32, I32) for name in ("matmul_tiled_noload", "matmul_tiled_noconsume")}


@pytest.mark.parametrize("name,step", [("matmul_tiled_noload", "1"), ("matmul_tiled_noconsume", "2")])
def test_thread_sanitizer_catches_a_removed_syncthreads(kernel, rng, line_of, name, step):
    """Either barrier of the tiled matmul removed: ThreadSanitizer reports the race."""
    M, N, K = 33, 17, 40
    source = kernel("matmul_tiled_nosync.cu")
    with pytest.raises(EmulatorError) as exc:
        run(source, NOSYNC_SIG, [_matmul_launch(name, M, N, K)], _matmul_buffers(rng, M, N, K), sanitize="thread")
    err = exc.value
    assert err.code == "N0902" and err.kind == "sanitizer"
    assert "ThreadSanitizer: data race" in err.headline
    racy = {line_of(source, f"// {marker}{step}") for marker in ("WRITE_A", "WRITE_B", "READ")}
    assert any(f"kernel.cu:{n}" in err.headline for n in racy), err.headline


def test_thread_sanitizer_accepts_warp_collectives(kernel, rng):
    """ldmatrix and mma exchange data between lanes without false reports."""
    A = rng.standard_normal((2, 16, 16)).astype(np.float16)
    B = rng.standard_normal((2, 16, 8)).astype(np.float16)
    out = run(kernel("ldmatrix_mma.cu"), {"ldmatrix_mma": (Param("ptr", "__half", True),) * 2 + (F32,)},
              [Launch("ldmatrix_mma", (2, 1, 1), (32, 1, 1), 0, ("A", "B", "D"))],
              {"A": A, "B": B, "D": np.zeros((2, 16, 8), np.float32)}, sanitize="thread")
    np.testing.assert_allclose(out["D"], A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_thread_sanitizer_sees_cp_async_writes_at_the_wait(kernel, rng, line_of):
    """Each thread waits for its own copy but reads a neighbour's without a barrier."""
    source = kernel("cp_async.cu")
    sig = {"cp_async_nobarrier": (CF32, F32)}
    with pytest.raises(EmulatorError) as exc:
        run(source, sig, [Launch("cp_async_nobarrier", (1, 1, 1), (32, 1, 1), 32 * 16, ("x", "out"))],
            {"x": rng.standard_normal(128).astype(np.float32), "out": np.zeros(128, np.float32)},
            sanitize="thread")
    assert exc.value.kind == "sanitizer" and "data race" in exc.value.headline
    assert f"kernel.cu:{line_of(source, '// NEIGHBOUR')}" in exc.value.headline


TAIL_SIG = {"scale_guarded": (CF32, F32, I32), "scale_unguarded": (CF32, F32, I32)}


def test_address_sanitizer_catches_an_unguarded_tail_read(kernel, rng, line_of):
    n = 999  # 16 blocks of 64 threads: threads 999..1023 read past x
    source = kernel("tail_read.cu")
    x = rng.standard_normal(n).astype(np.float32)
    out = run(source, TAIL_SIG, [Launch("scale_guarded", (16, 1, 1), (64, 1, 1), 0, ("x", "y", n))],
              {"x": x, "y": np.zeros(n, np.float32)}, sanitize="address")
    pairs = np.append(x, np.float32(0))[np.arange(n) ^ 1]  # partner of the last odd element is the masked 0
    np.testing.assert_array_equal(out["y"], x + pairs)
    with pytest.raises(EmulatorError) as exc:
        run(source, TAIL_SIG, [Launch("scale_unguarded", (16, 1, 1), (64, 1, 1), 0, ("x", "y", n))],
            {"x": x, "y": np.zeros(n, np.float32)}, sanitize="address")
    err = exc.value
    assert err.kind == "sanitizer"
    assert "AddressSanitizer: heap-buffer-overflow" in str(err)
    assert f"kernel.cu:{line_of(source, 'TAIL READ')}" in err.headline


BUGS_SIG = {"divergent_barrier": (CF32, F32, I32), "mismatched_barrier": (F32,),
            "shuffle_after_exit": (CF32, F32, I32), "warp_vs_barrier": (F32,),
            "spin_forever": (Param("ptr", "int"),)}


def _fault(kernel, launch, bufs, timeout_s=20.0) -> tuple[str, float]:
    start = time.perf_counter()
    with pytest.raises(EmulatorError) as exc:
        run(kernel("barrier_bugs.cu"), BUGS_SIG, [launch], bufs, timeout_s=timeout_s)
    assert exc.value.kind == "fault", str(exc.value)
    return exc.value.headline, time.perf_counter() - start


def test_divergent_barrier_is_reported_not_hung(kernel, line_of):
    bufs = {"x": np.arange(100, dtype=np.float32), "y": np.zeros(100, np.float32)}
    launch = Launch("divergent_barrier", (1, 1, 1), (128, 1, 1), 0, ("x", "y", 100))
    _fault(kernel, launch, bufs)  # build
    message, elapsed = _fault(kernel, launch, bufs)
    line = line_of(kernel("barrier_bugs.cu"), "// DIVERGENT")
    assert f"kernel.cu:{line}: divergent __syncthreads: 100 of 128 threads wait here but 28 have exited" in message
    # reported when it happens, not when the 20 s timeout fires (that would be kind "timeout"):
    # ~0.1 s normally; the wall-clock bound is generous for a loaded machine
    assert elapsed < 15.0


def test_mismatched_barriers_are_reported(kernel, line_of):
    message, _ = _fault(kernel, Launch("mismatched_barrier", (1, 1, 1), (64, 1, 1), 0, ("y",)),
                        {"y": np.zeros(64, np.float32)})
    source = kernel("barrier_bugs.cu")
    assert "mismatched __syncthreads" in message
    assert f"kernel.cu:{line_of(source, '// FIRST')}" in message
    assert f"kernel.cu:{line_of(source, '// SECOND')}" in message


def test_shuffle_naming_an_exited_lane_is_reported(kernel, line_of):
    bufs = {"x": np.ones(40, np.float32), "y": np.zeros(40, np.float32)}
    message, _ = _fault(kernel, Launch("shuffle_after_exit", (1, 1, 1), (64, 1, 1), 0, ("x", "y", 40)), bufs)
    line = line_of(kernel("barrier_bugs.cu"), "// SHUFFLE")
    assert message.startswith(f"kernel.cu:{line}: __shfl_xor_sync with mask 0xffffffff: lane ")
    assert "has already exited" in message


def test_warp_collective_against_barrier_deadlock_is_reported(kernel, line_of):
    message, _ = _fault(kernel, Launch("warp_vs_barrier", (1, 1, 1), (32, 1, 1), 0, ("y",)),
                        {"y": np.zeros(32, np.float32)})
    line = line_of(kernel("barrier_bugs.cu"), "// HALF")
    assert message.startswith(f"kernel.cu:{line}: __shfl_xor_sync (mask 0xffffffff)")
    assert "can never complete: lane 16 (thread (16,0,0)) waits at __syncthreads" in message


def test_a_hang_is_killed_at_the_timeout(kernel):
    run(kernel("barrier_bugs.cu"), BUGS_SIG, [], {})  # build outside the timed run
    start = time.perf_counter()
    with pytest.raises(EmulatorError) as exc:
        run(kernel("barrier_bugs.cu"), BUGS_SIG, [Launch("spin_forever", (1, 1, 1), (1, 1, 1), 0, ("flag",))],
            {"flag": np.zeros(1, np.int32)}, timeout_s=1.5)
    assert exc.value.kind == "timeout"
    assert "did not finish within 1.5 s" in str(exc.value)
    # killed at the timeout rather than left running: ~1.6 s normally; the wall-clock bound
    # (20x) only has to tell a kill from a hang on a loaded machine
    assert time.perf_counter() - start < 30.0


VECTOR_SIG = {"vector_copy": (Param("ptr", "__half", const=True), Param("ptr", "__half"),
                              I32, I32, I32)}


@pytest.mark.parametrize("start, end", [(0, 0), (1, 0), (0, 3), (8, 8)])
def test_a_misaligned_16_byte_access_is_an_error(kernel, rng, start, end):
    """A uint4 read or written at an address 16 does not divide (a misaligned LDG.128 or
    STS.128 faults on the GPU) stops the run with an error naming the access, without a
    sanitizer; aligned ones copy (codegen/peeled.py's copies rely on it being checked)."""
    x = rng.standard_normal(64).astype(np.float16)
    launch = Launch("vector_copy", (1, 1, 1), (32, 1, 1), 0, ("x", "y", start, end, 4))
    bufs = {"x": x, "y": np.zeros(64, np.float16)}
    if start % 8 or end % 8:
        with pytest.raises(EmulatorError, match="16-byte vector .* address 16 does not divide"):
            run(kernel("vector_copy.cu"), VECTOR_SIG, [launch], bufs)
        return
    out = run(kernel("vector_copy.cu"), VECTOR_SIG, [launch], bufs)
    np.testing.assert_array_equal(out["y"][end:end + 32], x[start:start + 32])
