"""User mistakes from a sweep of unseen inputs (brief fuzz25) that napkin accepted, or answered
with something other than a clear error: each now renders a golden message with its code,
line, column and hint."""

from __future__ import annotations

import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.render import render_text

from .injection import cli


def _message(name: str, text: str) -> str:
    with pytest.raises(NapkinError) as exc:
        napkin.load(Source(name, text))
    return render_text(exc.value)


def test_an_input_declared_after_its_first_use():
    """`in X` below the equation that reads X was accepted (inputs entered the scope before
    any equation), while the language says an array is defined before an equation uses it."""
    text = "axis r, c\nY[r c] = X * 2\nin X[r c]: f32\nout Y: f32\n"
    assert _message("late.napkin", text) == """\
error[N0203]: input `X` is used before its `in` declaration
 --> late.napkin:2:10
  |
2 | Y[r c] = X * 2
  |          ^
3 | in X[r c]: f32
  |    - declared here, later
  |
  = help: move `in X` above the first equation that uses it
"""
    # the same input declared first, and `out` or hints before everything, stay legal
    napkin.load("out Y: f32\naxis r, c\nin X[r c]: f32\nY[r c] = X * 2\n")


@pytest.mark.parametrize("backend", ["reference", "interpret"])
def test_a_hint_at_a_level_the_target_lacks_points_into_the_file(backend):
    """`stream a by 64 at L9` run by `napkin run` (napkin.compile's Kernel checks hints on
    every backend) said `<input>:5:1` with no line shown: the error lost the diagram's
    source, where `napkin compile` showed it."""
    text = "axis a\nin X[a]: f32\nY[a] = X\nout Y: f32\nstream a by 64 at L9\n"
    d = napkin.load(Source("level.napkin", text))
    with pytest.raises(NapkinError) as exc:
        napkin.compile(d, target="h100", backend=backend)
    assert render_text(exc.value) == """\
error[N0602]: target `h100` has no memory level `L9`
 --> level.napkin:5:1
  |
5 | stream a by 64 at L9
  | ^^^^^^^^^^^^^^^^^^^^
  |
  = help: levels: smem, registers
"""


@pytest.mark.parametrize("args", [["run", "matmul", "--inputs", "{dir}"],
                                  ["explain", "matmul", "--plot", "{dir}/r.png", "--bench", "{dir}"]])
def test_a_directory_for_a_file_to_read_is_napkins_error(tmp_path, args):
    """`--inputs DIR` and `--bench DIR` were refused by click's own usage error (exit 2, no
    code, no hint); now N0806 like any unreadable file, and nothing is written."""
    status, _, err = cli([a.format(dir=tmp_path) for a in args])
    assert status == 1 and "error[N0806]" in err and "is a directory" in err.lower() and "help:" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, col", [
    ("axis a\nin X[a]: f32\nY[a] = X * size(Y)\nout Y: f32\n", 17),   # the array being defined
    ("axis a\nin X[a]: f32\nY[a] = X\nZ[Y] = X\nout Z: f32\n", 3),     # a left-hand side
])
def test_an_array_named_where_an_axis_goes_is_not_an_undeclared_axis(text, col):
    """`size(Y)` in Y's own equation, and an array in a left-hand side, said `undeclared axis
    Y` with the hint `declare it: axis Y`, which would make an axis shadow the array."""
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    (d,) = exc.value.diagnostics
    assert (d.code, d.message, d.span.col, d.help) == \
        ("N0208", "`Y` is an array, not an axis", col, "name an axis here")


def test_a_boolean_storage_dtype_names_the_array_not_an_output():
    """`M[a]: bool = X > 0` said 'an output cannot be stored as bool' for an array that is
    no output, with a hint to convert it to an integer (dropping the dtype is the fix)."""
    text = "axis a\nin X[a]: f32\nM[a]: bool = X > 0\nY[a] = where(M, X, 0)\nout Y: f32\n"
    assert _message("mask.napkin", text) == """\
error[N0401]: `M` cannot be stored as `bool`: storage dtypes are numbers
 --> mask.napkin:3:7
  |
3 | M[a]: bool = X > 0
  |       ^^^^
  |
  = help: drop the dtype: a mask is kept as it is
"""


@pytest.mark.parametrize("value", ["inf", "nan", "0.5"])
def test_a_target_capacity_must_be_a_finite_number_of_bytes(value):
    """`--target two-level:M=inf` crashed `napkin compile --emit plan` (OverflowError, exit
    101, int(inf) in the report); `M=nan` planned nothing ('no tiling fits'), `M=0.5` said
    the level holds 0 bytes."""
    status, out, err = cli(["compile", "matmul", "--target", f"two-level:M={value}", "--emit",
                            "plan", "--shape", "m=64,n=64,k=64"])
    assert status == 2 and out == "" and "error[N0804]" in err and "finite" in err, err


def test_a_negative_seed_is_a_usage_error():
    """`napkin run matmul --seed -1` crashed in NumPy's generator (exit 101)."""
    status, out, err = cli(["run", "matmul", "--shape", "m=3,n=3,k=3", "--seed", "-1"])
    assert status == 2 and out == "" and "error[N0804]" in err and "--seed -1" in err, err


@pytest.mark.parametrize("args, said", [
    (["compile", "softmax", "--emit", "plan", "--shape", "rr=3"], "--shape names `rr`"),
    (["explain", "softmax", "-D", "c=48", "--shape", "c=7"], "--shape c=7, but `c` is 48"),
    (["draw", "softmax", "--plan", "-D", "c=48", "--shape", "r=3,c=7"], "but `c` is 48"),
])
def test_a_planning_shape_that_names_no_dynamic_axis_is_refused(args, said):
    """compile, explain and draw planned at the default size for a misspelt `--shape rr=3`
    and at the static size for `--shape c=7` where c is 48, silently (run refused both)."""
    status, out, err = cli(args)
    assert status == 2 and out == "" and "error[N0804]" in err and said in err, err
