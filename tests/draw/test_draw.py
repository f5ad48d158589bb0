"""`napkin draw`: every library diagram as a well-formed, deterministic, complete, readable SVG."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import resvg_py  # the test extra's SVG renderer (self-contained wheels)

import napkin
from napkin.compiler import ir
from napkin.draw import Metrics, draw, layout, structure, text
from napkin.draw.model import foldable
from napkin.draw.scene import Scene, Text
from napkin.draw.svg import to_svg
from napkin.diagrams.sources import library_names


GOLDENS = Path(__file__).parents[2] / "docs" / "pictures" / "library"   # shown in docs/library.md
NS = "{http://www.w3.org/2000/svg}"
LIBRARY = library_names()


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def texts(root: ET.Element, role: str) -> list[str]:
    return [e.text or "" for e in root.iter(f"{NS}text") if e.get("class") == role]


def titles(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter(f"{NS}title")]


@pytest.fixture(scope="module")
def pictures() -> dict[str, str]:
    return {name: draw(napkin.load(name)) for name in LIBRARY}


def test_the_library_is_all_here():
    assert len(LIBRARY) >= 12 and "attention" in LIBRARY


@pytest.mark.parametrize("name", LIBRARY)
def test_svg_is_well_formed_and_deterministic(name, pictures, golden):
    svg = pictures[name]
    root = parse(svg)
    w, h = float(root.get("width")), float(root.get("height"))
    assert w == int(w) and h == int(h) and w > 100 and h > 50
    assert root.get("viewBox") == f"0 0 {int(w)} {int(h)}"
    assert root.find(f"{NS}title").text == name
    assert draw(napkin.load(name)) == svg              # same diagram, same bytes
    golden(GOLDENS / f"{name}.svg", svg)


@pytest.mark.parametrize("name", LIBRARY)
def test_every_wire_array_and_box_is_shown(name, pictures):
    d = napkin.load(name)
    g = d.ir
    root = parse(pictures[name])
    wire_labels = set(texts(root, "axis-label"))
    array_labels = {t.split(" : ")[0] for t in texts(root, "array-label")}
    box_labels = texts(root, "box-label")
    # every axis of every array, labelled with its size when it has one
    for n in g:
        for a in ir.type_of(g, n).axes:
            if ir.type_of(g, n).dtype not in ("index",) and ir.op(g, n).__class__ is not ir.Index:
                size = d.axes[a]
                assert (a if size is None else f"{a}={size}") in wire_labels, a
    # every input, equation and output by name; inputs and outputs with their dtype
    names = [s.name for s in d.inputs + d.outputs] + [e.name for e in d.equations]
    assert set(names) <= array_labels
    for s in d.inputs + d.outputs:
        assert f"{s.name} : {s.dtype}" in texts(root, "array-label")
    # every box: functions and reductions by name, softmax as a triangle, contractions as joins
    folded = foldable(g)
    for n in ir.order(g):
        o = ir.op(g, n)
        if isinstance(o, ir.Map) and n not in folded:
            shown = text.SYMBOLS.get(o.fn, o.fn)
            assert any(shown in label for label in box_labels), (o.fn, box_labels)
        if isinstance(o, ir.Reduce):
            assert o.fn in box_labels
    softmaxes = [n for n in g if isinstance(ir.op(g, n), ir.Softmax)]
    triangles = [e for e in root.iter(f"{NS}polygon") if e.get("class") == "softmax"]
    assert len(triangles) == sum(len(ir.op(g, n).axes) for n in softmaxes)
    joins = [e for e in root.iter(f"{NS}circle") if e.get("class") == "join"]
    contracted = [a for n in g if isinstance(ir.op(g, n), ir.Contract) for a in ir.op(g, n).axes]
    assert len(joins) == len(contracted)
    assert sum("contract" in t for t in titles(root)) >= len(contracted)


def test_attention_reads_like_the_paper(pictures):
    root = parse(pictures["attention"])
    assert texts(root, "array-label") == ["Q : f16", "K : f16", "V : f16", "S", "P", "O : f16"]
    assert texts(root, "box-label") == ["\u00b7 / sqrt(size(d))"]
    assert {"S: contract d", "O: contract x", "P: softmax along x"} <= set(titles(root))
    assert texts(root, "axis-label").count("d=64") == 4    # Q, K, V and O
    seps = [e for e in root.iter(f"{NS}line") if e.get("class") == "separator"]
    assert len(seps) == 2                                   # the inputs' tuple (Q | K | V)


@pytest.mark.parametrize("name", LIBRARY)
def test_no_two_labels_overlap_and_all_are_inside(name, readable):
    readable(layout(structure(napkin.load(name)), Metrics()))


@pytest.mark.parametrize("name", LIBRARY)
def test_renders_to_a_png_of_the_right_size_with_ink(name, pictures, decode_png):
    svg = pictures[name]
    root = parse(svg)
    png = bytes(resvg_py.svg_to_bytes(svg_string=svg))
    px = decode_png(png)
    assert px.shape == (int(root.get("height")), int(root.get("width")), 4)
    grey = px[..., :3].mean(axis=2)
    ink = (grey < 128).mean()
    assert (px[..., 3] == 255).all()                  # the paper is opaque
    assert 0.01 < ink < 0.25, ink                     # wires and boxes are there, not a smear
    assert (grey > 240).mean() > 0.6                   # mostly paper
    first = next(e for e in root.iter(f"{NS}line") if e.get("class") == "wire")
    x, y = (float(first.get("x1")) + float(first.get("x2"))) / 2, float(first.get("y1"))
    assert grey[int(y), int(x)] < 128                  # a wire is drawn where the SVG says
    assert grey[int(y) + 8, int(x)] > 200              # and it is a thin line


def test_names_are_escaped_everywhere(tmp_path):
    path = tmp_path / "a&b<c>'\".napkin"
    path.write_text("axis m, k, n\nin A[m k]: f16\nin B[k n]: f16\nC[m n] = A * B\nout C: f16\n")
    svg = draw(napkin.load(str(path)))
    root = parse(svg)
    assert root.find(f"{NS}title").text == "a&b<c>'\".napkin"
    scene = Scene(10, 10, "<t>", [Text("caption", 1, 5, "x < y & z > \"w\"")])
    root = parse(to_svg(scene, description="a < b"))
    assert texts(root, "caption") == ['x < y & z > "w"']
    assert root.find(f"{NS}desc").text == "a < b"


EDGE = """
axis a, b, c = 8
in A[a b]: f16
in s[]: f32
in U[a]: f16
in unused[c]: f16
T[] = sum[a b](A)
M[a b] = a <= b
W[a b] = where(M, A / T, 0) * s
V[a] = A[a a]
R[a b] = U
Z[b a] = A[b a]
dead[a] = max[b](A)
out W: f32, V: f32, T: f32, R: f32, Z: f16, A: f16
"""


def test_unusual_diagrams_draw_every_part():
    d = napkin.load(EDGE)
    s = structure(d)
    kinds = [c.box.kind for c in s.columns]
    assert kinds == ["reduce", "source", "map", "map", "map", "relabel", "copy", "relabel",
                     "reduce"]
    assert [c.box.label for c in s.columns if c.box.kind != "reduce"] == [
        "a <= b", "/", "where(\u00b7, \u00b7, 0)", "*", "b->a", "copy", "a->b b->a"]
    assert s.unused_inputs == (d.ir.graph["inputs"]["unused"],)
    assert s.columns[-1].ends == (s.columns[-1].box.result,)       # `dead`: its wires end
    root = parse(draw(d))
    assert {"c=8", "scalar", "a", "b"} <= set(texts(root, "axis-label"))
    caps = [e for e in root.iter(f"{NS}circle") if e.get("class") == "cap"]
    assert len(caps) == 2                                          # unused[c] and dead[a]
    assert [t for t in texts(root, "array-label") if ":" in t][-6:] == [
        "W : f32", "V : f32", "T : f32", "R : f32", "Z : f16", "A : f16"]


def test_sizes_from_the_command_line_show_on_the_wires():
    root = parse(draw(napkin.load("attention", d=128)))
    assert "d=128" in texts(root, "axis-label") and "d=64" not in texts(root, "axis-label")
    assert re.search(r"\bq\b", " ".join(texts(root, "axis-label")))


def test_jupyter_shows_the_picture():
    d = napkin.load("matmul")
    assert d._repr_svg_() == draw(d)


def test_the_hooks_for_the_planned_picture():
    """Relabelled wires are measured like any label; a style colours arrays by their value."""
    from dataclasses import replace

    from napkin.draw import Style

    d = napkin.load("attention")
    s = replace(structure(d), relabel={"q": "g_q", "x": "s_x"})
    scene = layout(s)
    labels = [t.text for t in scene.shapes if isinstance(t, Text) and t.role == "axis-label"]
    assert "g_q" in labels and "s_x" in labels and "q" not in labels
    q_node = d.ir.graph["inputs"]["Q"]

    class Levels(Style):
        def array_colour(self, shape):
            return "#e07b00" if shape.value == q_node else self.ink

    root = parse(to_svg(scene, Levels()))
    orange = [g for g in root.iter(f"{NS}g") if g.get("stroke") == "#e07b00"]
    assert orange and all(e.get("class") == "wire" for g in orange for e in g)


def test_docs_show_every_library_diagram_as_written_and_planned():
    page = (GOLDENS.parents[1] / "library.md").read_text()
    for name in LIBRARY:
        assert f"](pictures/library/{name}.svg)" in page, name
        assert f"](pictures/library/planned/{name}.h100.svg)" in page, name
        assert (GOLDENS / f"{name}.svg").exists() and (GOLDENS / "planned" / f"{name}.h100.svg").exists()
