"""The fixed parts of a robustness run (`benchmarks/fuzz.py`), each a dict of figures: the
injection corpus through every field, the seeded code generation bugs, the numeric edge
cases of softmax and attention, index widths at 2^31 and huge front-end inputs."""

from __future__ import annotations


def injection() -> dict:
    from .injection import FIELDS, attack
    from .payloads import corpus
    payloads = corpus()
    outcomes = attack(payloads)
    return {"payloads": len(payloads), "fields": len(FIELDS), "cases": len(outcomes),
            "rejected": sum(o.rejected for o in outcomes),
            "accepted": sum(not o.rejected for o in outcomes),
            "leaks": sum(bool(o.problem) for o in outcomes),
            "examples": [f"{o.field}: {o.problem}" for o in outcomes if o.problem][:10]}


def mutation() -> dict:
    from .mutants import MUTANTS, SUITE, run_check, score
    base = {c.name: run_check(c) for c in SUITE}
    rows = {m.name: score(m)[0] for m in MUTANTS}
    return {"suite passes unmutated": all(v == "" for v in base.values()),
            "caught": sum(v != "not caught" for v in rows.values()), "mutants": len(rows),
            "by mutant": rows}


def edge_cases() -> dict:
    from napkin.compiler.cost import Choice
    from . import edges
    passed = failed = 0
    notes = []
    for dtype in ("f32", "f16", "bf16"):
        runs = []
        for cols in (37, 1):
            inputs = edges.softmax_inputs(cols, dtype)
            streamed = Choice((("r", 3),), ("c", 8), (("r", 1),), ("c", 4)) if cols > 1 else None
            runs.append((edges.diagram(edges.SOFTMAX, dtype), inputs,
                         {"r": inputs["X"].shape[0], "c": cols}, streamed,
                         lambda out, c=cols: edges.softmax_expectations(out, c)))
        for nq, nx in ((6, 23), (4, 1)):
            inputs = edges.attention_inputs(nq, nx, dtype)
            streamed = Choice((("b", 1), ("q", 2)), ("x", 4), (("q", 1),), ("x", 2)) \
                if nx > 1 else None
            runs.append((edges.diagram(edges.ATTENTION, dtype), inputs, {"b": 1, "q": nq, "x": nx},
                         streamed, lambda out, i=inputs, q=nq, x=nx:
                         edges.attention_expectations(out, i, q, x)))
        for d, inputs, shape, streamed, expect in runs:
            try:
                results = edges.run_all(d, inputs, shape, streamed)
            except AssertionError as exc:
                failed += 1
                notes.append(f"{d.name} {dtype} {shape}: {exc}")
                continue
            for name, out in results.items():
                try:
                    expect(out)
                    passed += 1
                except AssertionError as exc:
                    failed += 1
                    notes.append(f"{d.name} {dtype} {shape} {name}: {exc}")
    return {"passed": passed, "failed": failed, "notes": notes[:10],
            "what": "(diagram, dtype, shape, backend) runs; each checks every scenario row"}


def index_width() -> dict:
    import napkin
    from .test_index_width import CASES, problems_of
    problems = []
    for text, shape in CASES:
        found, _ = problems_of(napkin.load(text), shape)
        problems += found
    return {"cases": len(CASES), "overflows": len(problems), "examples": problems[:5]}


def huge_inputs() -> dict:
    from .frontend import TIME_BOUND_S, huge_inputs as inputs, timed_escape
    escapes, slow, slowest = [], [], ("", 0.0)
    cases = inputs()
    for name, data in cases.items():
        found, seconds = timed_escape(data)
        if found:
            escapes.append(f"{name}: {found}")
        elif seconds > TIME_BOUND_S:                 # a clean error, but slow: not an escape
            slow.append(f"{name}: {seconds:.1f} s")
        slowest = max(slowest, (name, seconds), key=lambda x: x[1])
    return {"cases": len(cases), "escapes": len(escapes), "slow": len(slow),
            "examples": escapes + slow, "slowest": f"{slowest[0]} ({slowest[1]:.2f} s)"}
