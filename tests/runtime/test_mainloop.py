"""runtime/mainloop.py: the main loop of a kernel's SASS and its instruction classes."""

from __future__ import annotations

import pytest

from napkin.diagrams.diagnostics import BackendUnavailable
from napkin.runtime import mainloop

SASS = """
        Function : k
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IMAD R2, R0, 0x4, R1 ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R3], [R4.64] ;
        /*0030*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0040*/                   NOP ;
        /*0050*/              @!PT LDS RZ, [RZ] ;
        /*0060*/                   MUFU.EX2 R5, R6 ;
        /*0070*/                   FFMA R5, R5, R7, R9 ;
        /*0080*/               @P0 BRA 0x30 ;
        /*0090*/                   LDSM.16.M88.4 R20, [R21] ;
        /*00a0*/               @P1 BRA 0x0 ;
        /*00b0*/                   EXIT ;
        /*00c0*/                   BRA 0xc0;
"""


def test_the_innermost_loop_with_the_most_hmma_is_the_main_loop():
    loop = mainloop.main_loop(SASS)
    assert (loop.start, loop.end) == (0x30, 0x80)          # not the outer loop from 0x0
    assert loop.mma == 1
    # NOP and the never-executed @!PT instruction are not counted
    assert dict(loop.counts()) == {"mma": 1, "mufu": 1, "fp32": 1, "control": 1}
    assert mainloop.classify("LDGSTS.E.BYPASS.128") == "ldgsts"
    assert mainloop.classify("IMAD.WIDE.U32") == "int"


def test_tensor_instructions_count_as_m16n8k16_hmma_equivalents():
    """An HGMMA.64x128x16 is issued by each warp of its warpgroup and does 16 x 128 x 16
    multiply-adds per warp: 16 HMMA.16816's; an HMMA.1688 is half of one."""
    ops = ["HMMA.16816.F32", "HMMA.1688.F32", "HGMMA.64x128x16.F32", "HGMMA.64x64x16.F32", "FFMA"]
    loop = mainloop.Loop(0, 0x40, tuple(mainloop.Instruction(16 * i, op, "", None)
                                       for i, op in enumerate(ops)))
    assert loop.mma == 4
    assert loop.hmma_16816 == 1 + 0.5 + 16 + 8


def test_a_real_tensor_core_product_loop():
    from napkin.pipeline import Options, through
    from napkin.runtime import sass
    made = through("matmul", None, "binary", Options.make(target="a100", arch="sm_80",
                                                            shape={"m": 4096, "n": 4096, "k": 4096}))
    try:
        text = sass.disassemble(made["binary"].cubin)
    except BackendUnavailable as exc:       # no disassembler wheel installed (napkin[test] has it)
        pytest.skip(str(exc))
    loop = mainloop.main_loop(text)
    counts = loop.counts()
    # whole m16n8k16 fragments per 16-wide k-step, fed by ldmatrix and cp.async, one barrier
    assert loop.mma == counts["mma"] and loop.mma % 16 == 0 and counts["ldsm"] > 0
    assert counts["ldgsts"] > 0 and counts["barrier"] > 0


def test_a_text_parsed_again_gives_new_lists_of_the_same_instructions():
    """The parse of a SASS text is kept (mainloop._parsed): a caller changing the lists it got
    does not change what the next caller gets."""
    first = mainloop.functions(SASS)
    first["k"].pop()
    first["k"].clear()
    again = mainloop.functions(SASS)
    assert len(again["k"]) == 13 and again["k"][8].target == 0x30 and again["k"] is not first["k"]
    assert mainloop.functions(SASS.replace("MUFU.EX2", "MUFU.RSQ"))["k"][6].opcode == "MUFU.RSQ"
