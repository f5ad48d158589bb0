"""Hostile names and numeric literals: what an attacker (or a careless generator) might put
in any field that carries a name or a number."""

from __future__ import annotations

_C_WORDS = [
    # C/C++/CUDA keywords and built-ins that are valid napkin identifiers
    "int", "float", "double", "long", "void", "bool", "char", "unsigned", "signed", "short",
    "return", "goto", "if", "else", "for", "while", "do", "switch", "case", "break",
    "continue", "default", "const", "volatile", "static", "extern", "inline", "register",
    "struct", "union", "enum", "typedef", "sizeof", "alignof", "asm", "__asm__", "template",
    "typename", "namespace", "using", "class", "new", "delete", "this", "true", "false",
    "nullptr", "NULL", "operator", "reinterpret_cast", "static_cast", "__global__",
    "__device__", "__host__", "__shared__", "__constant__", "__restrict__", "__launch_bounds__",
    "__forceinline__", "__syncthreads", "__shfl_xor_sync", "__trap", "__half", "__nv_bfloat16",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "main", "printf", "system",
    "exit", "abort", "malloc", "free", "memcpy", "expf", "logf", "std", "define", "include",
    "pragma", "line", "error", "ifdef", "endif", "undef", "_Pragma", "__FILE__", "__LINE__",
    "__CUDA_ARCH__", "INFINITY", "NAN", "float4", "int2",
    # napkin's generated and prelude names
    "p0", "p1", "p99", "n0", "n1", "v0", "v12", "st0", "st3", "sm0", "acc0", "acc4", "j0", "j7",
    "k0", "k2", "cnt0", "res0", "tid", "lane", "tvalid", "nblocks", "blk", "smem", "off", "e",
    "z", "xl", "xg", "c0", "clen", "tc_0", "org_0", "base_0", "napkin_k0", "napkin_to_float",
    "napkin_from_float", "napkin_max", "NAPKIN_INF", "NAPKIN_NAN", "NAPKIN_DYNAMIC_SMEM",
    "NAPKIN_EMULATE", "napkin_dynamic_smem_",
    # long valid names
    "a" * 128, "_" * 128, "A" + "9" * 127,
]

_SYNTAX = [
    '"', "'", "`", '\\"', "\\", '";', "\";system(\"id\");//", "');--", "a\"b", "a'b",
    "\n", "\r", "\r\n", "a\nb", "a\rb", "\n#include <stdio.h>\n", "\u2028", "\u2029", "\u0085",
    "*/", "/*", "//", "a*/b", "/* x */", "*/ asm(\"trap;\"); /*", "// comment",
    "#include", "#include <cstdlib>", "#define int float", "#pragma once", "#line 1 \"x\"",
    "#", "##", "#undef NAPKIN_INF", "_Pragma(\"unroll\")", "??=", "%:", "<%", "%>",
    "asm(", "asm(\"trap;\")", "asm volatile(\"exit;\")", "__asm__(\"\")", "a;b", "a{b}",
    "}", "{", ";", "a) { return; } (", "__global__ void k(){}", "extern \"C\"", "x[0]", "a->b",
    "a::b", "a.b", "a,b", "a b", "a=b", "a+b", "a(b)", "$", "@", "?", "~", "!", "&", "|", "^",
    "%", "a$", "a@b", "-a", "0a", "9", "a-b",
]

_CONTROL = [chr(c) for c in range(0, 32)] + ["\x7f", "a\x00b", "\x00" * 8, "a\x1bb",
                                               "\x1b[31mred\x1b[0m", "\x08\x08"]

_UNICODE = [
    "\u202e", "a\u202eb", "\u202dx", "\u2066a\u2069", "\u200b", "a\u200bb", "\u200c", "\u200d",
    "\ufeff", "a\ufeff", "\u00a0", "a\u00a0b", "\u3000", "\u0430", "\u0430xis", "\u0391",
    "\u03bf", "X\u0338", "\uff21", "\uff58", "\uff16\uff14", "\u0663", "\u0969\u096a",
    "\U0001d41a", "a\u0301", "\u00e9", "\u00df", "\u0131", "\u212a", "\u2163", "\U0001f600",
    "\ud800", "a\udfffb", "\ufffd", "\uffff", "\U0010ffff", "\u0000\u0301", "\u2044",
    "\u2215", "\u2010", "\u2212", "\u00b7", "\u0660", "\u2024", "\ufe4d", "\u02bc", "\u2019",
    "\u201c", "\uff02", "\u037e", "\u0589", "\u00ad", "a\u00adb",
]

_LONG = ["a" * 129, "a" * 1024, "a" * 10_240, "x" * 100_000, "9" * 10_240, "ab" * 5_120,
         "\u0430" * 10_240, "a" + "\u200b" * 5_000, "é" * 5_000]

NUMBERS = [
    "1e999", "-1e999", "1e309", "1.8e308", "-1.8e308", "3.5e38", "3.4028236e38", "1e38",
    "1e-999", "1e-46", "4.9e-324", "1e-310", "nan", "NaN", "NAN", "-nan", "inf", "-inf", "+inf",
    "Infinity", "-Infinity", "infinity", "0x10", "0X1p3", "0b101", "0o17", "017", "1_000",
    "1,000", "1.", ".5", "5.", "00001", "1e+5", "1E5", "1e5f", "1.0f", "1f", "1d", "1L", "1ul",
    "1e", "1e+", "1e-", ".", "..5", "1.2.3", "0e0", "-0", "+0", "-0.0", "0.0", "0", "+1", "-1",
    "--1", "2147483647", "2147483648", "4294967296", "9223372036854775807",
    "9223372036854775808", "18446744073709551616", "1099511627776", "1099511627777", "1e12",
    "1e13", "1e40", "9" * 400, "1" + "0" * 400, "0." + "0" * 400 + "1", "1e-5", "0.125",
    "3.14159", "6.02214076e23", "1e10", "2e9", "65504", "65505", "65536", "1.5", "-1.5",
    "1e0", "10e-1", "\uff11", "\u0661", "1\u200b", "1 2", "1e\u2212" + "5", "\u22121",
    "1;", "1)", "(1", "1/0", "0/0", "1e9999999999999999999", "1" * 20, "0x7fffffff",
    "NaN(0x1)", "1.#INF", "1.#QNAN", "$1", "1$", "1#", "1*/", "1\n", "1\x00",
]

FIELDS_PER_PAYLOAD = None   # filled by injection.py


def _variants(base: list[str]) -> list[str]:
    out = []
    for p in base:
        out.extend([p, "a" + p, p + "a", "a" + p + "b"])
    return out


def corpus() -> list[str]:
    """Every hostile string (names and numbers), deduplicated, in a fixed order."""
    base = _C_WORDS + _variants(_SYNTAX) + _variants(_CONTROL) + _variants(_UNICODE) + _LONG
    return list(dict.fromkeys(base + NUMBERS))
