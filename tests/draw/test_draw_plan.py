"""`napkin draw --plan`: every library diagram's plan on h100 and on the paper's two-level model,
coloured by the levels the explain report puts its arrays at, with the report's M and H."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import resvg_py

import napkin
from napkin.draw import LEVEL_COLOURS, draw_plan, plan_scene
from napkin.draw.table import column_costs, number
from napkin.explain import report
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

GOLDENS = Path(__file__).parents[2] / "docs" / "pictures" / "library" / "planned"
NS = "{http://www.w3.org/2000/svg}"
LIBRARY = library_names()
TARGETS = ("h100", "two-level")
CASES = [(n, t) for t in TARGETS for n in LIBRARY]
THOROUGH = float(__import__("os").environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2
FIGURE9 = Path(__file__).parents[2] / "docs" / "examples" / "figure9.napkin"


@pytest.fixture(scope="module")
def planned() -> dict:
    out = {}
    for name, tgt in CASES:
        p = plan(napkin.load(name), tgt)
        rep = report(p)
        out[name, tgt] = (p, rep, draw_plan(p, report=rep))
    return out


def elements(svg: str):
    """(element, paint of its group) for every shape in the SVG."""
    root = ET.fromstring(svg)
    for g in root.iter(f"{NS}g"):
        for e in g:
            yield e, g.attrib


def cells(svg: str) -> dict[tuple[str, str], str]:
    return {(e.get("data-row"), e.get("data-col")): e.text for e, _ in elements(svg)
            if e.get("data-col")}


@pytest.mark.parametrize("name,tgt", CASES)
def test_planned_svg_is_well_formed_and_deterministic(name, tgt, planned, golden):
    p, rep, svg = planned[name, tgt]
    root = ET.fromstring(svg)
    w, h = float(root.get("width")), float(root.get("height"))
    assert w == int(w) and h == int(h) and w > 300 and h > 150
    assert root.get("viewBox") == f"0 0 {int(w)} {int(h)}"
    assert root.find(f"{NS}title").text == f"{name} on {tgt}"
    assert draw_plan(p, report=rep) == svg
    golden(GOLDENS / f"{name}.{tgt}.svg", svg)


# Known drawing bugs, kept visible (none at present: the one recorded here, an intermediate
# drawn in global memory inside the kernel that loads it, showed in varlen_attention's
# two-kernel plan, which is now one FlashAttention kernel; no library plan loads an
# intermediate on these targets any more)
KNOWN: dict = {}


@pytest.mark.parametrize("name,tgt", [pytest.param(n, t, marks=pytest.mark.xfail(
    reason=KNOWN[n, t], strict=True)) if (n, t) in KNOWN else (n, t) for n, t in CASES])
def test_every_array_is_coloured_by_a_level_the_plan_puts_it_at(name, tgt, planned):
    p, rep, svg = planned[name, tgt]
    names = p.target.level_names
    colour = {c: i for i, c in enumerate(LEVEL_COLOURS[:len(names)])}
    kernels = {k["name"]: k for k in rep["kernels"]}
    seen = set()
    tagged = 0
    for e, paint in elements(svg):
        array, kernel, level = e.get("data-array"), e.get("data-kernel"), e.get("data-level")
        if array is None:
            continue
        tagged += 1
        key = "stroke" if e.get("class") == "wire" else "fill"
        assert colour[paint[key]] == names.index(level), (e.attrib, paint)
        if not kernel or e.get("class") == "store":
            assert level == names[0], e.attrib          # outside kernels: global memory
            continue
        held = {b["level"] for b in kernels[kernel]["buffers"] if b["name"] == array}
        if held:
            assert level in held, (array, level, held)
        else:   # not in the report: global (untouched here), or a value folded into another
            assert level in (names[0], names[-1]), (array, level)
        seen.add((kernel, array, level))
    assert tagged >= 10
    for k in rep["kernels"]:      # every input tile shows, in its kernel, at its level
        for b in k["buffers"]:
            if b["role"] == "input tile":
                assert (k["name"], b["name"], b["level"]) in seen, b


@pytest.mark.parametrize("name,tgt", CASES)
def test_relabelled_axes_appear(name, tgt, planned):
    _, rep, svg = planned[name, tgt]
    words = " ".join(e.text or "" for e, _ in elements(svg) if e.tag == f"{NS}text")
    for k in rep["kernels"]:
        for lv in k["levels"]:
            for a, info in lv["axes"].items():
                if info["symbol"]:
                    assert info["symbol"] in words, (k["name"], lv["level"], a)


def test_attention_wires_are_relabelled_where_they_live(planned):
    _, rep, svg = planned["attention", "h100"]
    labels = {}
    for e, _ in elements(svg):
        if e.get("class") == "axis-label" and e.get("data-kernel") == "k0":
            labels.setdefault(e.get("data-array"), []).append(e.text)
    stream = rep["kernels"][0]["levels"][0]["axes"]["x"]["size"]
    threads = rep["kernels"][0]["levels"][1]["axes"]["q"]["size"]
    assert labels["S"] == ["g_b=1", "g_h=1", f"t_q={threads}", f"s_x={stream}"]
    root = ET.fromstring(svg)
    inputs = [e.text for e in root.iter(f"{NS}text") if e.get("class") == "axis-label"
              and e.get("data-array") == "Q" and not e.get("data-kernel")]
    assert inputs == ["b=1024", "h=1024", "q=1024", "d=64"]   # in global memory: whole


@pytest.mark.parametrize("name,tgt", CASES)
def test_the_table_totals_are_the_reports(name, tgt, planned):
    p, rep, svg = planned[name, tgt]
    table = cells(svg)
    for kp, k in zip(p.kernels, rep["kernels"]):
        rows = [r for (r, c) in table if r.startswith(f"column:{k['name']}:") and c == "column"]
        assert len(rows) == len(kp.columns)
        for lv in k["levels"]:
            m, hh = f"M {lv['level']}", f"H {lv['level']}"
            assert table[f"total:{k['name']}", m] == f"{lv['M_bytes']:,}"
            assert table[f"total:{k['name']}", hh] == number(lv["H_bytes"])
            ms = [int(table[r, m].replace(",", "")) for r in rows]
            hs = [int(table[r, hh].replace(",", "")) for r in rows]
            assert max(ms) == lv["M_bytes"]
            assert abs(sum(hs) - lv["H_bytes"]) <= len(hs) + 1e-9 * lv["H_bytes"]
    first = p.target.level_names[1]
    assert table["all:", f"H {first}"] == number(rep["H_bytes"])


def test_figure9_columns_are_the_papers():
    """Figure 9 with every transfer explicit: per column q x, q x, q x + x d, q d values
    (4 bytes each); the paper prints the last as q x (see the design notes)."""
    q, x, d = 512, 1024, 64
    p = plan(napkin.load(str(FIGURE9)), "two-level:M=1e12", {"q": q, "x": x, "d": d},
             {"group": {"q": q}}, fusion=False)
    costs = [c for kp in p.kernels for c in column_costs(p, kp)]
    labels = [c.label for kp in p.kernels for c in kp.columns]
    assert labels == ["load S", "compute P", "store P", "load V, P", "compute O", "store O"]
    assert [c["H fast"] for c in costs] == [4 * v for v in (q * x, 0, q * x, q * x + x * d, 0,
                                                            q * d)]
    assert max(c["M fast"] for c in costs) == 4 * (q * x + x * d)
    assert sum(c["H fast"] for c in costs) == 4 * (3 * q * x + x * d + q * d)
    svg = draw_plan(p)
    assert cells(svg)["all:", "H fast"] == f"{4 * (3 * q * x + x * d + q * d):,}"


def test_every_planned_picture_is_readable(planned, readable):
    for p, rep, _ in planned.values():
        readable(plan_scene(p, rep))


@pytest.mark.parametrize("name,tgt", [("attention", "h100"), ("mlp", "two-level")])
def test_renders_to_a_png_with_colour(name, tgt, planned, decode_png):
    _, _, svg = planned[name, tgt]
    root = ET.fromstring(svg)
    px = decode_png(bytes(resvg_py.svg_to_bytes(svg_string=svg)))
    assert px.shape == (int(root.get("height")), int(root.get("width")), 4)
    rgb = px[..., :3].astype(int)
    grey = rgb.mean(axis=2)
    assert 0.01 < (grey < 128).mean() < 0.3
    orange = (abs(rgb[..., 0] - 0xe0) < 30) & (abs(rgb[..., 1] - 0x7b) < 30) & (rgb[..., 2] < 60)
    assert orange.mean() > 0.001                         # level 1 is there, in orange


def test_hopper_toy_and_dropped_arrays_draw():
    """Engine buffers (`K/V`) and an array no output needs (drawn, not coloured by a level)."""
    p = plan(napkin.load("attention"), "hopper-toy")
    root = ET.fromstring(draw_plan(p))
    levels = {(e.get("data-array"), e.get("data-level")) for e in root.iter()
              if e.get("data-kernel") == "k0"}
    assert ("K/V", "smem") in levels and ("Q", "registers") in levels
    src = "axis a, b\nin X[a b]: f32\nY[a] = sum[b](X)\nZ[b] = max[a](X)\nout Y: f32\n"
    root = ET.fromstring(draw_plan(plan(napkin.load(src), "h100")))
    dropped = {e.get("data-level") for e in root.iter() if e.get("data-array") == "Z"}
    assert dropped == {"none"}


def test_every_planned_picture_renders(planned):
    """resvg renders each to a PNG of the SVG's size with something on it (a blank PNG of this
    size compresses to well under a kilobyte). Each diagram's picture on one target, the two
    in turn (a render is some 0.15 CPU-s); both with NAPKIN_FUZZ_SCALE >= 2."""
    import struct
    import zlib
    rendered = [((name, tgt), v) for (name, tgt), v in planned.items()
                if THOROUGH or TARGETS.index(tgt) == LIBRARY.index(name) % 2]
    assert {name for (name, _), _ in rendered} == set(LIBRARY)
    for (name, tgt), (_, _, svg) in rendered:
        root = ET.fromstring(svg)
        png = bytes(resvg_py.svg_to_bytes(svg_string=svg))
        w, h = struct.unpack(">II", png[16:24])
        assert (h, w) == (int(root.get("height")), int(root.get("width"))), name
        assert len(png) > 20_000 and len(zlib.compress(png)) > 0.9 * len(png), (name, tgt)
