"""What the model charges per lane of attention on the CUDA cores (compiler/issue_pair.py,
issue_simt.unrolled_reads) against the key loop the lowering emits: K's and V's values read
once a key for the thread's rows in an unrolled walk of d, every lane of d's split running
each score's scale and online-softmax update, the lanes' sum of each score, one rescaling
exponential per group of Schedule.fold keys."""

from __future__ import annotations

import math

import pytest

import napkin
from napkin.compiler.plan import plan

from .test_simt_sass import _balanced, _key_loop

CASES = [("attention", {}), ("causal_attention", {}),
         ("attention", {"b": 3, "h": 5, "q": 1031, "x": 1029})]


def _planned(name, shape):
    from napkin import pipeline
    p = plan(napkin.load(name), "h100", shape, engine="cuda-cores")
    kp = p.kernels[0]
    assert kp.schedule.engine == "cuda cores" and kp.schedule.split[0] == "d"
    cuda = pipeline.through(p, "plan", "cuda",
                            pipeline.Options.make(target="h100", engine="cuda-cores"))["cuda"]
    body = _key_loop(cuda.split("napkin_k0(", 1)[1])
    return p, kp, body


def _lanes(p, kp):
    from napkin.compiler.choices import prod
    s, sched = p.sizes, kp.schedule
    return prod(s[a] for a in kp.model.woven) / prod(sched.thread_tile().values()) * \
        sched.split[1]


@pytest.mark.parametrize("name, shape", CASES)
def test_the_model_reads_an_unrolled_walks_values_once_a_key_for_the_threads_rows(
        name, shape, monkeypatch):
    """issue_simt.unrolled_reads against the key loop: each staged value of K and V a
    thread reads at a group of keys is named once (held.py) for all its rows; the model
    counts as many per lane and key, at READ_UNROLLED + READ_CONVERT each (LDS and HADD2.F32
    in the SASS), where it charged READ_NARROW and INDEX_WIDE (8.5) before."""
    import re
    from napkin.compiler import issue_simt
    from napkin.compiler.cost import evaluate
    p, kp, body = _planned(name, shape)
    seen = {}
    real = issue_simt.warp_instructions

    def spy(*args):
        seen["reads"] = args[10]
        return real(*args)
    monkeypatch.setattr(issue_simt, "warp_instructions", spy)
    evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
    streamed = [(a, vol) for a, vol in seen["reads"] if a.streamed]
    assert {a.name for a, _ in streamed} == {"K", "V"}
    from napkin.compiler.cost import Choices
    values = sum(vol / a.bytes for a, vol in streamed
                 if issue_simt.unrolled(kp.model, Choices.of(kp.choice), p.sizes, a))
    reads = set(re.findall(r"napkin_to_float\(sm[12]\[[^;]*\]\)", body))
    keys = p.sizes[kp.schedule.stream[0]] * kp.cost.computed    # (chunks a mask hides: none)
    assert values / (_lanes(p, kp) * keys) == pytest.approx(len(reads) / kp.schedule.fold)
    assert kp.schedule.split[1] * len(reads) == 2 * 64 * kp.schedule.fold    # K, V: d = 64


@pytest.mark.parametrize("name, shape", CASES)
def test_every_lane_of_the_split_runs_each_scores_ops(name, shape):
    """issue_pair against the key loop: a thread sums each of its rows' scores over the
    lanes (napkin_lanes_sum: log2(w) SHFL and FADD), scales it and updates the online
    softmax with one exponential per score and one rescale per group of keys, on every lane
    of d's split: the model charges the sums log2(w) steps per score and lane, the score's
    ops w times, and 1 + 1/fold MUFU per score and lane."""
    from napkin.compiler import fold, issue, issue_pair
    from napkin.compiler.cost import Choices
    from napkin.compiler.choices import prod
    p, kp, body = _planned(name, shape)
    s, sched, model = p.sizes, kp.schedule, kp.model
    choice = Choices.of(kp.choice)
    rows = prod(sched.thread_tile().values())
    ways, group = sched.split[1], sched.fold
    assert group == fold.FOLD
    assert body.count("napkin_lanes_sum(") == rows * group
    assert body.count("napkin_ex2(") == rows * (group + 1)
    qk = next(w for w in model.work if w.op == "contract" and "d" in w.axes and
              w.node not in {c for _, c in model.streaming.pairs})
    points = prod(s[a] for a in qk.axes)
    scores = points / s["d"]
    sums = issue_pair.merges(model, choice, s, qk, points)
    assert sums[0] == pytest.approx(scores * ways * math.log2(ways))
    soft = next(w for w in model.work if w.op == "softmax")
    assert issue_pair.replicated(model, choice, soft) == ways
    assert issue_pair.replicated(model, choice, qk) == 1
    per = issue_pair.softmax(model, choice, s, soft, fold.keys(model, choice),
                             issue.INSTRUCTIONS["softmax"])
    assert float(per[1]) == pytest.approx(1 + 1 / group)
