"""A graph copied with another 16-bit storage decision gets its fingerprint token derived from
its base's (stored16.decision_token, fingerprint.derived) rather than frozen again: equal
decisions of one base share a token, different ones never do, and the plans made with derived
tokens are the plans made with frozen ones."""

from __future__ import annotations

import napkin
from napkin.compiler import fingerprint, stored16, stored16_stages
from napkin.compiler.target import load
from napkin.compiler.fuse import unfused_kernels
from napkin.compiler.kernel_plan import KernelPlanner
from napkin.compiler.plan import prepare

from ..runtime.test_stored16 import PROJECTED as PROJECTED_TEXT

PROJECTED = PROJECTED_TEXT.format(d=64, x="f16")
SHAPE = {"b": 2, "t": 1024, "s": 1024, "m": 1024, "h": 8}


def _graph():
    return prepare(napkin.load(PROJECTED), "h100", SHAPE).graph


def test_a_decision_derives_one_token_per_decision():
    g = _graph()
    base = fingerprint.token(g)
    nodes = sorted(stored16.anticipated(g, load("h100")).graph[stored16.KEY])
    assert len(nodes) >= 2
    one = {nodes[0]: "f16"}
    both = {n: "f16" for n in nodes}

    def token(chosen, cot=()):
        return stored16.decision_token(base, g, stored16.with_decision(g, chosen, cot))
    assert token(one) == token(dict(one)) != base
    assert token(both) not in (token(one), base)
    assert token(both, nodes[:1]) not in (token(both), token(one))   # cotangents too
    assert token({}) == base                 # no decision: the graph's own contents
    assert token(both) != fingerprint.token(stored16.with_decision(g, one))
    # a graph decided already is frozen again (its copy without a decision is another graph)
    decided = stored16.with_decision(g, both)
    assert stored16.decision_token(fingerprint.token(decided), decided,
                                   stored16.with_decision(decided, {})) is None


def test_a_decided_planner_never_takes_the_undecided_graphs_answers():
    """Fusion's planner on the anticipated decision (stored16_stages.fusion_planner, its token
    derived) answers as a planner that freezes the decided graph, not as the undecided
    graph's planner it is derived from, whose answers are memoised already (Q, K, V in f16:
    attention's kernel is FlashAttention; in f32 it is not)."""
    pr = prepare(napkin.load(PROJECTED), "h100", SHAPE)
    base = KernelPlanner(pr.graph, pr.target, pr.sizes, pr.hints)
    ks = unfused_kernels(pr.graph)
    undecided = [repr(base.estimate(k)) for k in ks]
    derived = stored16_stages.fusion_planner(pr, base)
    assert derived is not base and derived._graph not in (None, base._graph)
    # a planner made on the decided graph alone takes the derived token (explain's baseline)
    assert KernelPlanner(derived.g, pr.target, pr.sizes, pr.hints)._graph == derived._graph
    frozen = KernelPlanner(derived.g, pr.target, pr.sizes, pr.hints,
                           token=fingerprint.token(derived.g))
    assert frozen._graph != derived._graph
    answers = [repr(derived.estimate(k)) for k in ks]
    assert answers == [repr(frozen.estimate(k)) for k in ks]
    assert answers != undecided
