"""benchmarks/gpu_check.py's device-time estimate, from its --dry-run report (no GPU needed).

A device session has 15 minutes in all (/work/.library/device/README.md), the machine's
start, the wheels' install and a rerun's margin included: gpu_check.py's whole run must stay
well inside it. The dry run does on the host what the GPU run does there (plans, NVRTC
compiles, the float64 references) and so measures that part; the launches are estimated
from the model's predicted times.
"""

from __future__ import annotations


STARTUP_SECONDS = 30      # PyTorch's import and CUDA context, CuPy's, the cuDNN/SDPA first calls
RUNS = 3 + 15             # Timer's warm-up and reps
FLUSH_SECONDS = 256 * 2 ** 20 * 2 / 4.0e12   # Timer's 256 MiB L2 flush (read and write) per run


def estimate(report) -> float:
    """Device seconds of the GPU run of this selection, from its dry run: the host's work
    (everything the dry run did: plans, NVRTC, references) as measured here, plus each timed
    section's launches from the model's predictions (napkin's and, as an upper guess, twice
    that for each baseline), plus STARTUP_SECONDS. The sections the dry run only plans
    (decode, varlen, ranking, stages, merges, scatter, backward) are counted at their
    predicted seconds times their launches the same way."""
    launches = 0.0
    for t in report["timings"]:
        p = float(t.get("predicted_seconds") or 0)
        runs = 1 + (2 if t["diagram"] in ("attention", "causal_attention") else
                    1 if t["diagram"] == "matmul" else 0)
        launches += runs * RUNS * (p * (2 if runs > 1 else 1) + FLUSH_SECONDS)
    for name in ("decode", "varlen", "stages", "merges", "scatter", "backward"):
        for e in report.get(name, []):
            p = float(e.get("predicted_seconds") or 0)
            launches += 4 * RUNS * (2 * p + FLUSH_SECONDS)      # napkin and baselines, 2x
    for r in report.get("ranking", []):
        for c in r.get("candidates", []):
            launches += RUNS * (float(c["predicted_seconds"]) + FLUSH_SECONDS)
    return report["seconds"] + launches + STARTUP_SECONDS
