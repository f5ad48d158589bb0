"""explain's words for sibling products launched as one grid (compiler/siblings.py), and for
members tiled at the launch's block shape to share it (compiler/sibling_tiles.py)."""

from __future__ import annotations

from .compiler.siblings import launch_of


def launch_report(plan, i: int) -> dict:
    """The launch kernel `i` shares with its siblings, as --json prints it."""
    la = launch_of(plan.launches, i)
    names = [plan.kernels[j].kernel.name for j in la.members]
    out = {"kernels": names, "shared": la.shared,
           "blocks": list(la.blocks), "waves": la.waves, "apart_seconds": la.apart,
           "together_seconds": la.together, "from_l2_bytes": la.from_l2}
    alone = dict(la.retiled)
    if i in alone:       # (tiled otherwise than its own best: sibling_tiles.py)
        like = [plan.kernels[j].kernel.name for j in la.members if j not in alone]
        out["retiled"] = {"threads": plan.kernels[i].schedule.threads,
                          "threads_alone": alone[i], "like": like[:1],
                          "alone_seconds": la.alone}
    return out


def launch_lines(name: str, la: dict, fmt) -> list[str]:
    """A kernel's launch shared with sibling products, and why (the first member says it);
    a member tiled to share it says so, and what the plan was with each tiled alone."""
    retiled = []
    if "retiled" in la:
        r = la["retiled"]
        like = "".join(f" as kernel {k}" for k in r["like"])
        retiled = [f"  tiled{like} ({r['threads']} threads a block, not its own best of "
                   f"{r['threads_alone']}) to share the launch: predicted "
                   f"{fmt(la['together_seconds'])} for the launch against "
                   f"{fmt(r['alone_seconds'])} for its kernels each tiled alone"]
    if la["kernels"][0] != name:
        return [f"  launched with kernel {la['kernels'][0]}, one grid (see there)"] + retiled
    others = la["kernels"][1:]
    l2 = (f"; {la['shared']} read from HBM once, from L2 by the others"
          if la["from_l2_bytes"] else "")
    waves = f"{la['waves']} wave{'s' if la['waves'] > 1 else ''}"
    return [f"  shares one launch with kernel{'s' if len(others) > 1 else ''} "
            f"{', '.join(others)}: all read {la['shared']} and none reads what another "
            f"stores; one grid of their blocks ({' + '.join(map(str, la['blocks']))} in "
            f"{waves}, each block one tile of one product): one launch instead of "
            f"{len(la['kernels'])}, the waves of the summed blocks{l2}: predicted "
            f"{fmt(la['together_seconds'])} together, {fmt(la['apart_seconds'])} apart"] + retiled
