"""docs/tutorial.md and README.md's "From Python" stay true: every command and code block runs.

The fenced blocks of the tutorial are read per section: ```sh lines starting with `napkin` run
through the CLI in-process, in a scratch directory where `docs/` is the repository's (so paths
written from the repository root work and written files land in the scratch directory);
```python blocks run with `exec`, one namespace per section; the ```napkin block must be the
library diagram it claims to be; the unlabelled blocks are the H formulas the text quotes. Each
test then checks what the text says of the output, so a broken command or a drifted output fails.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import sympy
from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr,
                                        standard_transformations)

import napkin
from napkin.cli import main
from napkin.runtime import compare, nvrtc, reference

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
README = ROOT / "README.md"
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)
SECTIONS = {"1": "A matrix product", "2": "Softmax, then a contraction",
            "3": "Attention: fusion and streaming find FlashAttention", "4": "The kernel",
            "5": "From Python"}


def sections(text: str) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Section number -> (title, [(language, body)]) for the page's `## N. Title` sections."""
    out = {}
    for chunk in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = chunk.partition("\n")
        number, _, title = heading.partition(". ")
        out[number] = (title.strip(), [(m.group(1), m.group(2)) for m in FENCE.finditer(body)])
    return out


def tutorial() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    return sections(TUTORIAL.read_text())


def blocks(section: str, language: str) -> list[str]:
    return [body for lang, body in tutorial()[section][1] if lang == language]


def commands(section: str) -> list[list[str]]:
    """The section's shell commands (continuations joined, comments dropped), without `napkin`."""
    out = []
    for body in blocks(section, "sh"):
        for line in body.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                assert argv[0] == "napkin", f"not a napkin command: {line!r}"
                out.append(argv[1:])
    return out


@pytest.fixture
def cli(capsys, tmp_path, monkeypatch):
    """Run `napkin ARGV` in-process from a scratch copy of the repository root; its stdout."""
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    monkeypatch.chdir(tmp_path)

    def run(argv: list[str]) -> str:
        capsys.readouterr()
        status = main(list(argv))
        out = capsys.readouterr()
        assert status == 0, (argv, out.err)
        return out.out

    run.dir = tmp_path
    return run


def kernel_sections(out: str) -> list[str]:
    """explain's text, one chunk per `kernel ...:` block."""
    return re.split(r"^(?=kernel )", out.split("\ntotal:")[0], flags=re.M)[1:]


def summary(out: str) -> dict[str, str]:
    """The `total:` / `unfused:` lines of explain's text."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(total|unfused): (.*)$", out, re.M)}


def h_values(kernel: str, level: str) -> str:
    """The symbolic H (values) of one level in one kernel's memory table."""
    m = re.search(rf"^    {level}\s+[\d,]+\s+[\d,]+\s+\S+   (.+)$", kernel, re.M)
    assert m, f"no {level} row in\n{kernel}"
    return m.group(1).strip()


def expr(text: str) -> sympy.Expr:
    return parse_expr(text, transformations=standard_transformations
                      + (implicit_multiplication_application,))


def formula(section: str) -> str:
    (f,) = [body for body in blocks(section, "") if body.startswith("H = ")]
    return f.strip()


def test_the_page_is_the_sections_these_tests_check():
    page = tutorial()
    assert {n: title for n, (title, _) in page.items()} == SECTIONS
    for number, (_, found) in page.items():
        for lang, _ in found:
            assert lang in ("sh", "python", "napkin", ""), (number, lang)
    assert "--no-tensor-cores" not in TUTORIAL.read_text()


# -- 1. A matrix product ---------------------------------------------------------------------

def test_1_the_diagram_is_the_library_matmul():
    (text,) = blocks("1", "napkin")
    mine, library = napkin.load(text), napkin.load("matmul")
    assert mine.axes == library.axes
    assert mine.inputs == library.inputs and mine.outputs == library.outputs
    assert [(e.name, e.axes, e.contracted) for e in mine.equations] == \
        [(e.name, e.axes, e.contracted) for e in library.equations] == [("C", ("m", "n"), ("k",))]


def test_1_matmul_groups_m_and_n_and_streams_k(cli):
    (argv,) = commands("1")
    assert argv[:2] == ["explain", "matmul"]
    out = cli(argv)
    (k,) = kernel_sections(out)
    assert summary(out)["total"].startswith("1 kernel(s)")
    assert "streams k through: running sum of products" in k
    smem = re.search(r"^  smem .*$", k, re.M).group(0)
    for relabel in ("m -> g_m", "n -> g_n", "k -> s_k"):
        assert relabel in smem
    assert re.search(r"^  registers .*t_m.*t_n.*\(per warp\)$", k, re.M)
    assert "on tensor cores: mma.sync" in k
    assert re.search(r"^    A +input tile .* smem ", k, re.M)
    assert re.search(r"^    B +input tile .* smem ", k, re.M)
    assert re.search(r"^    C +accumulator +\[t_m=\d+ t_n=\d+\] +registers ", k, re.M)
    # the H quoted in the text is explain's, and its expansion is right
    left, right = formula("1").removeprefix("H = ").split("  =  ")
    assert h_values(k, "smem") == left.strip()
    assert sympy.simplify(expr(left) - expr(right)) == 0


# -- 2. Softmax, then a contraction ----------------------------------------------------------

def test_2_figure9_unfused_is_two_kernels_with_the_papers_transfers(cli):
    unfused, fused = commands("2")
    assert "--no-fusion" in unfused and "--no-fusion" not in fused
    out = cli(unfused)
    softmax, product = kernel_sections(out)
    assert "computes P" in softmax and "computes O" in product
    assert "streams" not in softmax                      # softmax alone cannot stream along x
    q, x, d = sympy.symbols("q x d")
    assert expr(h_values(softmax, "fast")) == 2 * q * x                  # q x, q x
    assert expr(h_values(product, "fast")) == q * x + x * d + q * d      # q x + x d, q d
    # the unit model: no seconds, model time units equal to the bytes moved
    assert not re.search(r"predicted [\d.e+]+ (s|ms|us)\b", out)
    predicted = float(re.search(r"predicted (\S+) model time units", softmax).group(1))
    h_bytes = float(re.search(r"^    fast\s+[\d,]+\s+[\d,]+\s+(\S+)", softmax, re.M).group(1))
    assert predicted == pytest.approx(h_bytes, rel=1e-2)
    assert "predicted 4.19e+06 model time units" in softmax and "4.194e+06" in softmax
    assert "not seconds" in out.splitlines()[-1] and "1 byte per unit" in out.splitlines()[-1]


def test_2_figure9_fused_keeps_p_in_fast_memory(cli):
    _, fused = commands("2")
    out = cli(fused)
    (k,) = kernel_sections(out)
    assert "computes P, O" in k
    q, x, d = sympy.symbols("q x d")
    assert expr(h_values(k, "fast")) == q * x + x * d + q * d
    assert summary(out)["unfused"].startswith("2 kernel(s)")
    assert "fusion moves 63% fewer bytes" in out
    assert "model time units" in summary(out)["total"]


# -- 3. Attention ------------------------------------------------------------------------------

def test_3_attention_fuses_into_flashattention(cli):
    plain, manual = commands("3")
    assert plain[:2] == ["explain", "attention"] and manual[:2] == ["explain", "attention_manual"]
    assert plain[2:] == manual[2:]
    out = cli(plain)
    (k,) = kernel_sections(out)
    assert "computes S, P, O" in k
    assert summary(out)["total"].startswith("1 kernel(s)")
    assert summary(out)["unfused"].startswith("3 kernel(s)")
    assert "streams x through: online softmax (running max m, running sum l, rescaled output o)" in k
    smem = re.search(r"^  smem .*$", k, re.M).group(0)
    assert "q -> g_q" in smem and "x -> s_x" in smem
    left, per_head = formula("3").removeprefix("H = ").split("per head:")
    assert h_values(k, "smem") == left.strip()
    b, h = sympy.symbols("b h")
    assert sympy.simplify(expr(left) / (b * h) - expr(per_head)) == 0
    # with the softmax written out: the same plan
    out_manual = cli(manual)
    (k_manual,) = kernel_sections(out_manual)
    assert k_manual.split("\n", 1)[1] == k.split("\n", 1)[1]
    assert summary(out_manual)["total"] == summary(out)["total"]


# -- 4. The kernel -----------------------------------------------------------------------------

def _body(cuda: str) -> str:
    """The kernels of a CUDA source, after the prelude's helpers."""
    return cuda[cuda.index("__global__"):]


def test_4_the_kernel_compiles_and_emulates(cli):
    argvs = commands("4")
    assert [a[0] for a in argvs] == ["compile", "compile", "compile", "explain", "run", "run"]
    outputs = {}
    for argv in argvs:
        if "ptx" in argv and not nvrtc.available():
            continue                     # NVRTC is in napkin[test]; without it, the rest still runs
        outputs[" ".join(argv)] = cli(argv)
    tc, ptx, cc, small, run_tc, run_cc = (" ".join(a) for a in argvs)
    cuda = (cli.dir / "attention.cu").read_text()
    assert cuda.count("__global__") == 1
    body = _body(cuda)
    # S = Q K and O = P V, in the loop over whole chunks and again in the partial last chunk,
    # each twice: the products of the two B fragments one ldmatrix.x4 loads
    assert body.count("napkin_mma_m16n8k16_f16") == 8
    assert "napkin_lanes_max" in body and "napkin_lanes_sum" in body   # per-row, across lanes
    assert "__syncthreads" in body
    if ptx in outputs:
        assert ".target sm_90" in outputs[ptx] and ".entry napkin_k0" in outputs[ptx]
        assert "mma.sync.aligned.m16n8k16" in outputs[ptx]
    cuda_cores = _body((cli.dir / "attention_cuda_cores.cu").read_text())
    assert cuda_cores.count("__global__") == 1 and "mma" not in cuda_cores
    assert "napkin_lanes_sum" in cuda_cores                   # partial dot products, by shuffles
    assert "on CUDA cores: predicted faster on the CUDA cores at these sizes" in outputs[small]
    assert "matmul" in small
    for run in (run_tc, run_cc):
        assert "O  shape=(1, 2, 37, 64)  dtype=f16" in outputs[run]
        assert "matches the float64 reference" in outputs[run]


# -- 5. From Python ----------------------------------------------------------------------------

def within_tolerance(diagram, inputs: dict, name: str, value) -> None:
    exact = reference.evaluate(diagram, inputs)[name]
    naive = reference.evaluate(diagram, inputs, precision="lowp")[name]
    dtype = next(s.dtype for s in diagram.outputs if s.name == name)
    verdict = compare.check(np.asarray(value), exact, naive, dtype, name)
    assert verdict.ok, verdict.message


def test_5_from_python(capsys):
    first, second = blocks("5", "python")
    ns: dict = {}
    capsys.readouterr()
    exec(compile(first, "tutorial.md §5 (1)", "exec"), ns)
    out = capsys.readouterr().out
    Q, K, V, O = ns["Q"], ns["K"], ns["V"], ns["O"]
    assert out.startswith("(1, 2, 37, 64) float16\n")
    assert isinstance(O, np.ndarray) and O.shape == (1, 2, 37, 64)
    d = napkin.load("attention")
    inputs = {"Q": Q, "K": K, "V": V}
    within_tolerance(d, inputs, "O", O)
    last_call, given = out.split("napkin explain <library:attention>")[1:]
    assert "sizes: b=1  h=2  q=37  x=53  d=64" in last_call
    assert "sizes: b=4  h=16  q=4096  x=4096  d=64" in given
    assert "FlashAttention-2" in given and "q -> g_q" in given

    exec(compile(second, "tutorial.md §5 (2)", "exec"), ns)
    out = capsys.readouterr().out
    assert ns["emulated"].backend == "emulate"
    assert "on CUDA cores: tensor cores are off" in out
    assert "q -> g_q = 16" in out and "x -> s_x = 16" in out
    within_tolerance(d, inputs, "O", ns["O_emulated"])
    error = float(re.search(r"^max error (\S+)$", out, re.M).group(1))
    assert error == pytest.approx(float(np.abs(ns["O_emulated"] - ns["exact"]).max()), rel=0.05)
    assert error < 1e-3                                          # "about 4e-4: f16 rounding"


# -- README.md: From Python --------------------------------------------------------------------

def test_readme_from_python(capsys):
    part = README.read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    (code,) = [body for lang, body in FENCE.findall(part) if lang == "python"]
    ns: dict = {}
    exec(compile(code, "README.md From Python", "exec"), ns)
    d, O = ns["d"], ns["O"]
    inputs = {"Q": ns["Q"], "K": ns["K"], "V": ns["V"]}
    assert O.shape == ns["Q"].shape and O.dtype == np.float16     # declared storage dtype
    within_tolerance(d, inputs, "O", O)
    assert np.array_equal(ns["exact"], reference.evaluate(d, inputs)["O"])   # the float64 oracle
    assert ns["exact"].dtype == np.float64


def test_the_readme_names_every_library_diagram():
    from napkin.diagrams.sources import library_names
    text = README.read_text().split("`NAME` is one of", 1)[1].split("\n\n", 1)[0]
    assert sorted(set(library_names()) - set(re.findall(r"`(\w+)`", text))) == []
