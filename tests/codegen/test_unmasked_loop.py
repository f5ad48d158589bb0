"""The chunks a mask holds everywhere in run a loop of their own, without the mask
(codegen/mma.py `_pipeline`, flash.py `whole_chunk`): causal attention's main loop is
attention's, and the cut chunks' body (the loop around it) holds the mask. Values are
checked by the emulator tests (test_tensor_cores.py's seeded causal bug drops the loop's
test); here the loop structure, in the CUDA and in the SASS."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from napkin.runtime import mainloop

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# an outer chunk loop (0x00 .. 0xa0) around the unmasked one (0x10 .. 0x50): the cut chunk's
# body (0x60 .. 0x90) holds its FSEL and its own HMMA
SASS = """
        Function : k
        /*0000*/                   IADD3 R1, R1, 0x80, RZ ;
        /*0010*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0020*/                   FFMA R5, R5, R7, R9 ;
        /*0030*/                   MUFU.EX2 R5, R6 ;
        /*0040*/                   IADD3 R1, R1, 0x80, RZ ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0070*/                   ISETP.GE.AND P1, PT, R2, R3, PT ;
        /*0080*/                   FSEL R5, R5, -INF , P1 ;
        /*0090*/                   FFMA R5, R5, R7, R9 ;
        /*00a0*/               @P2 BRA 0x0 ;
        /*00b0*/                   EXIT ;
"""


def _sass_loops():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("sass_loops", BENCHMARKS / "sass_loops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cut_chunk_is_counted_off_the_loop_around_the_unmasked_one():
    loops = _sass_loops()
    inner = mainloop.main_loop(SASS, "k")
    assert (inner.start, inner.end) == (0x10, 0x50)    # the innermost: the unmasked loop
    assert loops.masked_chunk(SASS, "k", inner) == 6    # 0x00 and 0x60 .. 0xa0
    counts = loops.loop_counts(SASS, "k", split=True)
    assert (counts["run_inside"], counts["run_cut"]) == (5, 6)
    assert loops.loop_counts(SASS, "k")["run_cut"] == 5   # (no split: the loop's own)


@pytest.mark.thorough       # (planning and lowering at q = x = 300: some 4 CPU-s)
def test_the_unmasked_loop_runs_while_its_chunk_is_below_the_diagonal():
    """The CUDA: inside the chunk loop, `for (; c0 < cfull && whole; c0 += chunk)` over the
    unmasked body (its condition `true`: nvcc folds the select away), then the masked body,
    which compares each score's positions."""
    from napkin.pipeline import Options, through
    cuda = through("causal_attention", None, "cuda", Options.make(
        target="h100", shape={"b": 2, "h": 2, "q": 300, "x": 300}, defines={"d": 64}))["cuda"]
    m = re.search(r"for \(; c0 < cfull && \((.*)\); c0 \+= (\d+)\) \{", cuda)
    assert m and "c0 + " in m.group(1) and "org_" in m.group(1)
    body = cuda[m.end():cuda.index("if (c0 < cfull) {", m.end())]
    assert "(true ? sc[" in body and "<=" not in body and "napkin_mma" in body
    masked = cuda[cuda.index("if (c0 < cfull) {", m.end()):]
    masked = masked[:masked.index("if (cfull <")]       # (the partial last chunk after)
    assert "(true ? sc[" not in masked and "<=" in masked and "napkin_mma" in masked


@pytest.mark.thorough       # (two NVRTC compiles and disassemblies)
def test_causal_attentions_main_loop_issues_attentions_fp32_and_the_cut_chunk_its_selects():
    """sm_90, b = 4, h = 16, q = x = 4096, d = 64 (both 128 x 128 tiles, 8 warps): causal
    attention's main loop has attention's FP32, MUFU and conversions (795 instructions a
    warp when it held both versions of the scores, 625 now), and the cut chunks' body the
    mask's FSEL for each of its 64 scores a lane."""
    from napkin.diagrams.diagnostics import BackendUnavailable
    from napkin.pipeline import Options, through
    from napkin.runtime import sass
    shape = {"b": 4, "h": 16, "q": 4096, "x": 4096}
    found = {}
    for name in ("attention", "causal_attention"):
        made = through(name, None, "binary", Options.make(target="h100", arch="sm_90",
                                                            shape=shape, defines={"d": 64}))
        try:
            text = sass.disassemble(made["binary"].cubin)
        except BackendUnavailable as exc:
            pytest.skip(str(exc))
        kname = made["program"].kernels[0].name
        found[name] = (text, kname, mainloop.main_loop(text, kname))
    plain, causal = found["attention"][2].counts(), found["causal_attention"][2].counts()
    for cls in ("mma", "fp32", "mufu", "convert"):
        assert causal[cls] == plain[cls], cls
    text, kname, loop = found["causal_attention"]
    cut = _sass_loops().masked_chunk(text, kname, loop)
    outer = min((lp for lp in mainloop.loops(mainloop.functions(text)[kname])
                 if lp.start <= loop.start and loop.end <= lp.end and lp.end - lp.start >
                 loop.end - loop.start), key=lambda lp: lp.end - lp.start)
    selects = sum(1 for i in outer.instructions if i.opcode.startswith("FSEL")
                  and not loop.start <= i.address <= loop.end)
    assert cut > len(loop.instructions) and selects >= 64
