"""benchmarks/gpu_check.py's checks and timings of the kernels no GPU has run yet: packed GQA
rows (compiler/packing.py: r x q in one fragment's rows, q = 2..8, r * q <= 16, unmasked and
under causal speculative decoding's `x <= q + size(x) - size(q)`, split over x and not),
heads of 192 and 256 (FlashAttention-2 with Q re-read: compiler/flash.py's budget), a softmax
over three axes (written out into nested reductions: compiler/canonical.py), paged
attention on tensor cores (K and V rows through the page table: compiler/rowsource.py), an
output projection over two adjacent axes merged into one (compiler/merge.py), and attention
fed by its projections in one diagram (Q, K, V stored in 16 bits by the kernels computing
them: compiler/stored16.py; K and V read X renamed along the keys: compiler/operand_reads.py),
heads of 40, 72 and 36 (padded to whole fragments in shared memory: compiler/headpad.py; 36's
rows copied 8 bytes at a time: compiler/copies.py).

Each check runs at odd sizes, every dynamic axis at most bench.CHECK_LIMIT (so the GPU's
check plans and launches at the very sizes --dry-run planned), f16 and bf16, against the
float64 reference with the project's tolerance rule (napkin.bench.check:
compare.against_reference). Each case names the path it exists to exercise (`expect`: the
engine, packed rows, Q re-read, the split): --dry-run records the plan's and ptxas' answer
(`path_ok`), and so does the GPU run, whose target (h100 or h200) may plan otherwise.

The tensor-core ones are timed at scale beside the model's predicted time (napkin.bench.bench:
SDPA's flash and cuDNN backends beside attention's). --quick times the first of each feature.
"""

from __future__ import annotations

import traceback

DECODE = "x <= q + size(x) - size(q)"      # speculative decoding: the last q keys causal


def _gqa(dtype: str, d: int = 128, mask: str | None = None):
    """gqa_attention, or (mask) the same with the scores masked (not a library diagram)."""
    from napkin.bench import variant
    if mask is None:
        return variant("gqa_attention", dtype, d=d)
    import napkin
    score = f"where({mask}, Q * K / sqrt(size(d)), -inf)"
    return napkin.load(f"axis b, g, r, q, x\naxis d = {d}\n"
                       f"in Q[b g r q d]: {dtype}\nin K[b g x d]: {dtype}\n"
                       f"in V[b g x d]: {dtype}\nS[b g r q x] = {score}\n"
                       "P[b g r q x] = softmax[x](S)\nO[b g r q d] = P * V\n"
                       f"out O: {dtype}")


def _softmax3(dtype: str):
    import napkin
    return napkin.load(f"axis b, x, y, z\nin X[b x y z]: {dtype}\n"
                       f"Y[b x y z] = softmax[x y z](X)\nout Y: {dtype}")


def _projection(dtype: str):
    """The output projection: a contraction over h and d, adjacent in both operands."""
    import napkin
    return napkin.load(f"axis t, h, d, m\nin A[t h d]: {dtype}\nin W[h d m]: {dtype}\n"
                       f"Y[t m] = A * W\nout Y: {dtype}")


def _projected(dtype: str):
    """Q, K, V projected from X, then causal attention, in one diagram."""
    import napkin
    return napkin.load(f"axis b, t, s, m, h\naxis d = 64\nin X[b t m]: {dtype}\n"
                       f"in Wq[m h d]: {dtype}, Wk[m h d]: {dtype}, Wv[m h d]: {dtype}\n"
                       "Q[b h t d] = X * Wq\nK[b h s d] = X[b s m] * Wk\n"
                       "V[b h s d] = X[b s m] * Wv\n"
                       "S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)\n"
                       f"A[b t h d] = softmax[s](S) * V\nout A: {dtype}")


def _library(name: str, **sizes):
    from napkin.bench import variant
    return lambda dtype: variant(name, dtype, **sizes)


def _ce_gradient(dtype: str):
    """The LM head's cross-entropy gradient: dZ[t v] stored in 16 bits, rows padded to 16
    bytes (compiler/pitch.py), read by the products dH = dZ * W and dW = dZ * H."""
    import napkin
    return napkin.grad(napkin.load(
        f"axis t, m, v\nin H[t m]: {dtype}\nin W[v m]: {dtype}\nin label[t]: i32\n"
        "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\n"
        "out L: f32"))


def _paged(x: int, P: int):
    return _library("paged_attention", x=x, j=-(-x // P), P=P)


PACKED = {"engine": "attention", "packed": ["r", "q"]}
REREAD = {"engine": "attention", "reread": True}
PAGED = {"engine": "attention"}
PRODUCT = {"engine": "tensor-core product", "kernels": 1}
WGMMA = {"engine": "tensor-core product", "instruction": "wgmma"}

# (case, feature, diagram(dtype), dtype, shape, options (Options.make), expected path)
CHECKS = [
    ("gqa r=8 q=2", "packed-gqa", lambda t: _gqa(t), "f16",
     {"b": 2, "g": 3, "r": 8, "q": 2, "x": 191}, {}, PACKED),
    ("gqa r=3 q=5 split", "packed-gqa", lambda t: _gqa(t), "bf16",
     {"b": 2, "g": 3, "r": 3, "q": 5, "x": 190}, {"split": {"x": 3}}, {**PACKED, "split": "x"}),
    ("gqa causal decode r=4 q=4 split", "packed-gqa", lambda t: _gqa(t, mask=DECODE), "f16",
     {"b": 2, "g": 2, "r": 4, "q": 4, "x": 189}, {"split": {"x": 4}}, {**PACKED, "split": "x"}),
    ("gqa causal decode r=2 q=7", "packed-gqa", lambda t: _gqa(t, mask=DECODE), "bf16",
     {"b": 3, "g": 2, "r": 2, "q": 7, "x": 131}, {}, PACKED),
    ("attention d=256", "wide-head", _library("attention", d=256), "f16",
     {"b": 2, "h": 3, "q": 77, "x": 130}, {}, REREAD),
    ("causal_attention d=256", "wide-head", _library("causal_attention", d=256), "bf16",
     {"b": 1, "h": 2, "q": 131, "x": 131}, {}, REREAD),
    ("attention d=192", "wide-head", _library("attention", d=192), "bf16",
     {"b": 2, "h": 3, "q": 130, "x": 191}, {}, REREAD),
    ("causal_attention d=192", "wide-head", _library("causal_attention", d=192), "f16",
     {"b": 2, "h": 3, "q": 97, "x": 97}, {}, REREAD),
    ("softmax[x y z] 17x33x65", "softmax-3-axes", _softmax3, "f16",
     {"b": 3, "x": 17, "y": 33, "z": 65}, {}, {"kernels_at_least": 2}),
    ("softmax[x y z] 128x128x129", "softmax-3-axes", _softmax3, "bf16",
     {"b": 1, "x": 128, "y": 128, "z": 129}, {}, {"kernels_at_least": 2}),
    ("paged P=8 x=777 q=3 split", "paged-tensor-cores", _paged(777, 8), "bf16",
     {"b": 1, "g": 2, "r": 4, "q": 3, "n": 101}, {"engine": "tensor-cores", "split": {"x": 5}},
     {**PAGED, **PACKED, "split": "x"}),
    ("paged P=16 x=1000", "paged-tensor-cores", _paged(1000, 16), "f16",
     {"b": 3, "g": 2, "r": 4, "q": 1, "n": 192}, {"engine": "tensor-cores"}, PAGED),
    ("output projection (h*d)", "merged-axes", _projection, "f16",
     {"t": 77, "h": 3, "d": 40, "m": 72}, {"engine": "tensor-cores"}, PRODUCT),
    ("projections then attention", "stored-16-bit", _projected, "bf16",
     {"b": 2, "t": 97, "s": 97, "m": 72, "h": 3}, {}, {"engine": "attention"}),
    # heads padded in shared memory (compiler/headpad.py), rows copied 8 bytes at a time (d=36)
    ("attention d=40", "padded-head", _library("attention", d=40), "f16",
     {"b": 2, "h": 3, "q": 77, "x": 130}, {}, {"engine": "attention"}),
    ("causal_attention d=72", "padded-head", _library("causal_attention", d=72), "bf16",
     {"b": 2, "h": 3, "q": 131, "x": 131}, {}, {"engine": "attention"}),
    ("attention d=36", "padded-head", _library("attention", d=36), "f16",
     {"b": 2, "h": 3, "q": 97, "x": 190}, {}, {"engine": "attention"}),
    # 16-bit intermediates' rows padded to 16 bytes (compiler/pitch.py): v not a multiple of 8
    ("cross-entropy gradient v=61", "padded-rows", _ce_gradient, "f16",
     {"t": 37, "m": 40, "v": 61}, {}, {"pitched": True}),
    ("cross-entropy gradient v=130", "padded-rows", _ce_gradient, "bf16",
     {"t": 77, "m": 72, "v": 130}, {}, {"pitched": True}),
    # wgmma (opt-in with arch sm_90a until these pass on a GPU: docs/tensor-cores.md), at
    # sizes the check launches unclamped (bench.CHECK_LIMIT) where the model takes wgmma
    ("batched_matmul on wgmma 129^4", "wgmma", _library("batched_matmul"), "f16",
     {"b": 129, "m": 129, "k": 129, "n": 129}, {"arch": "sm_90a"}, WGMMA),
    ("batched_matmul on wgmma 177^4", "wgmma", _library("batched_matmul"), "bf16",
     {"b": 177, "m": 177, "k": 177, "n": 177}, {"arch": "sm_90a"}, WGMMA),
    # multiples of 8: the operands staged by cp.async (16-byte copies), which the proxy
    # fence orders before wgmma's reads (the two above stage with plain stores)
    ("batched_matmul on wgmma 96x184x136x128", "wgmma", _library("batched_matmul"), "f16",
     {"b": 96, "m": 184, "k": 136, "n": 128}, {"arch": "sm_90a"}, WGMMA),
]

# the tensor-core ones at scale: (case, feature, diagram(dtype), dtype, shape, bench name
# (its baselines: napkin.bench.baselines), expected path)
TIMINGS = [
    ("gqa decode r=4 q=4", "packed-gqa", lambda t: _gqa(t), "f16",
     {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096}, "gqa_attention", PACKED),
    ("gqa causal decode r=4 q=4", "packed-gqa", lambda t: _gqa(t, mask=DECODE), "f16",
     {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096}, "gqa_causal_decode", PACKED),
    ("attention d=256", "wide-head", _library("attention", d=256), "f16",
     {"b": 4, "h": 16, "q": 4096, "x": 4096}, "attention", REREAD),
    ("attention d=192", "wide-head", _library("attention", d=192), "bf16",
     {"b": 4, "h": 16, "q": 4096, "x": 4096}, "attention", REREAD),
    ("causal_attention d=256", "wide-head", _library("causal_attention", d=256), "f16",
     {"b": 4, "h": 16, "q": 4096, "x": 4096}, "causal_attention", REREAD),
    ("attention d=40", "padded-head", _library("attention", d=40), "f16",
     {"b": 4, "h": 16, "q": 4096, "x": 4096}, "attention", {"engine": "attention"}),
    ("attention d=72", "padded-head", _library("attention", d=72), "bf16",
     {"b": 4, "h": 16, "q": 4096, "x": 4096}, "attention", {"engine": "attention"}),
    ("paged decode x=32768", "paged-tensor-cores", _paged(32768, 16), "f16",
     {"b": 8, "g": 8, "r": 4, "q": 1, "n": 8 * 2048}, "paged_attention", PAGED),
]


def firsts(cases) -> list:
    """The first case of each feature (--sample's checks, --quick's timings)."""
    seen, out = set(), []
    for case in cases:
        if case[1] not in seen:
            seen.add(case[1])
            out.append(case)
    return out


def path(p) -> dict:
    """What the plan chose, in `expect`'s terms."""
    from napkin.compiler import pitch
    from napkin.compiler.flash import FlashSite
    out = {"engines": [kp.schedule.engine for kp in p.kernels], "kernels": len(p.kernels),
           "split": None if p.split is None else p.split.axis,
           "instructions": [kp.choice.instruction for kp in p.kernels if kp.choice.warps],
           "pitched": bool(pitch.said(p))}     # (rows padded at these sizes)
    for kp in p.kernels:
        if isinstance(kp.schedule.site, FlashSite):
            out.update(packed=list(kp.schedule.site.packed), reread=bool(kp.schedule.reread))
    return out


def path_ok(got: dict, expect: dict) -> bool:
    for key, want in expect.items():
        if key == "engine":
            ok = want in got["engines"]
        elif key == "instruction":
            ok = want in got["instructions"]
        elif key == "kernels_at_least":
            ok = got["kernels"] >= want
        else:
            ok = got.get(key) == want
        if not ok:
            return False
    return True


def chosen(cases, features=None) -> list:
    """The cases of these features (all without `features`; a feature checked but not timed,
    the three-axis softmax, has no timing case)."""
    unknown = sorted(set(features or ()) - {c[1] for c in CHECKS})
    if unknown:
        raise SystemExit(f"--features: no feature {', '.join(unknown)}")
    return [c for c in cases if not features or c[1] in features]


def feature_checks(dry_run: bool, sample: bool = False, features=None):
    """Each case at odd sizes: planned and compiled (--dry-run: for h200, sm_90, its reference
    evaluated), or run on the GPU against the float64 reference."""
    import napkin.commands.run
    import napkin.runtime.reference
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    cases = chosen(CHECKS, features)
    for case, feature, make, dtype, shape, options, expect in firsts(cases) if sample else cases:
        entry = {"case": case, "feature": feature, "dtype": dtype, "shape": shape,
                 "expect": expect}
        try:
            d = make(dtype)
            if dry_run:
                k = Kernel(d, Options.make(**{"target": "h200", "arch": "sm_90", **options}),
                           backend="reference")
                entry["path"] = path(k.compiled_for(shape)[0])
                entry.update(status="compiled", resources=_resources(k, shape))
                napkin.runtime.reference.evaluate(
                    d, napkin.commands.run.random_inputs(d, shape, 1))
            else:
                import torch
                from napkin.bench import check
                k = Kernel(d, Options.make(**options), backend="cuda")
                verdicts = check(k, torch, d, shape)
                entry["path"] = path(k.plan)
                ok = all(v["ok"] for v in verdicts.values())
                entry.update(status="ok" if ok else "wrong", verdicts=verdicts)
            entry["path_ok"] = path_ok(entry["path"], expect)
        except Exception as exc:   # keep going: one broken kernel must not hide the rest
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def feature_timings(dry_run: bool, quick: bool, features=None):
    """The tensor-core cases at scale: planned and compiled (--dry-run), or checked and timed
    beside the model's prediction and the baselines napkin.bench has for them."""
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    cases = chosen(TIMINGS, features)
    for case, feature, make, dtype, shape, name, expect in firsts(cases) if quick else cases:
        entry = {"diagram": name, "case": case, "feature": feature, "shape": shape,
                 "dtype": dtype, "expect": expect}
        try:
            d = make(dtype)
            k = Kernel(d, Options(target="h200", arch="sm_90"), backend="reference")
            p = k.compiled_for(shape)[0]
            entry.update(path=path(p), engines=path(p)["engines"], predicted_seconds=p.time,
                         flops=sum(float(sum(kp.cost.flops.values())) for kp in p.kernels))
            entry["path_ok"] = path_ok(entry["path"], expect)
            if dry_run:
                entry.update(status="planned", resources=_resources(k, shape))
            else:
                from napkin.bench import bench
                result = bench(d, shape, name=name)
                entry.update(status="ok", correct=result["correct"], records=result["records"],
                             target=result["target"])
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _resources(kernel, shape) -> dict:
    """NVRTC's ptxas report per kernel for these sizes (no launch)."""
    from napkin.runtime import nvrtc
    if not nvrtc.available():
        return {"nvrtc": "unavailable"}
    return kernel.binary(shape).resources


def print_feature_check(e) -> None:
    how = "" if e.get("path_ok", True) else "  (not the path it exists for: " + \
        f"{e.get('path')} against {e['expect']})"
    print(f"check {e['case']:<32} {e['dtype']:<5} {e.get('status')}{how}"
          + (f"  {e.get('error', '')[:120]}" if e.get("status") == "error" else ""), flush=True)
