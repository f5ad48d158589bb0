"""benchmarks/gpu_check.py's varlen section: packed documents planned on their document ids,
against causal attention over the documents one by one (napkin's and SDPA's), timed on a GPU;
without one (--dry-run) planned only. The model's side alone is benchmarks/varlen_check.py."""

from __future__ import annotations

import traceback

import numpy as np


def varlen(dry_run: bool, quick: bool):
    """Packed documents (varlen_attention, 16k tokens, h=16, d=64, f16) planned on their
    document ids, against causal attention over the documents one by one (napkin's and
    SDPA's is_causal): the measured ratio beside the model's (benchmarks/varlen_check.py)."""
    from varlen_check import mixes
    from napkin.bench import variant
    from napkin.compiler.plan import plan
    tokens, heads = 16384, 16
    for name, lengths in list(mixes(tokens).items())[:1 if quick else None]:
        entry = {"diagram": "varlen_attention", "documents": name, "tokens": tokens,
                 "h": heads, "d": 64, "dtype": "f16"}
        try:
            doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
            shape = {"h": heads, "q": tokens, "x": tokens}
            d = variant("varlen_attention", "f16")
            packed = plan(d, "h200", shape, data={"doc": doc})
            causal = variant("causal_attention", "f16", d=64)
            alone = sum(plan(causal, "h200", {"b": 1, "h": heads, "q": n, "x": n}).time
                        for n in lengths)
            entry.update(predicted_seconds=packed.time, predicted_one_by_one=alone,
                         computed=float(packed.kernels[0].cost.computed))
            if dry_run:
                entry["status"] = "planned"
            else:
                entry.update(_varlen_times(d, causal, doc, lengths, shape))
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _varlen_times(d, causal, doc, lengths, shape) -> dict:
    import torch
    from napkin.bench import Timer, random_inputs
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    options = Options.make(target="h200", arch="sm_90", data={"doc": doc})
    k = Kernel(d, options, backend="cuda")
    inputs = random_inputs(torch, d, shape)
    inputs["doc"] = torch.tensor(doc, device="cuda")
    timer = Timer(torch)
    out = {"napkin_packed": timer(lambda: k(**inputs))}
    q, kk, v = (inputs[n] for n in ("Q", "K", "V"))
    pieces, at = [], 0
    for n in lengths:
        pieces.append((at, n))
        at += n
    ck = Kernel(causal, Options(target="h200", arch="sm_90"), backend="cuda")
    views = [(q[None, :, a:a + n].contiguous(), kk[None, :, a:a + n].contiguous(),
              v[None, :, a:a + n].contiguous()) for a, n in pieces if n]
    for qq, kq, vq in views:      # compile each length once before timing
        ck(Q=qq, K=kq, V=vq)
    out["napkin_one_by_one"] = timer(lambda: [ck(Q=a, K=b, V=c) for a, b, c in views])
    out["sdpa_one_by_one"] = timer(lambda: [sdpa(a, b, c, is_causal=True) for a, b, c in views])
    # the packed result against the documents one by one (the same inputs)
    got = k(**inputs)
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = torch.cat([sdpa(a, b, c, is_causal=True)[0] for a, b, c in views], dim=1)
    error = float((got.float() - want.float()).abs().max())
    return {"records": out, "max_abs_error_vs_sdpa": error, "status": "ok"}


def _print_varlen(e) -> None:
    head = f"varlen {e.get('documents')}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    line = (f"{head}: predicted {e['predicted_seconds'] * 1e6:.1f} us packed, "
            f"{e['predicted_one_by_one'] * 1e6:.1f} us one by one "
            f"({e['predicted_seconds'] / e['predicted_one_by_one']:.2f}x), "
            f"{e['computed']:.1%} of (block, chunk) pairs")
    for name, sec in (e.get("records") or {}).items():
        line += f"; {name} {sec * 1e6:.1f} us"
    if "max_abs_error_vs_sdpa" in e:
        line += f"; packed vs SDPA per document: max error {e['max_abs_error_vs_sdpa']:.3g}"
    print(line)
