"""Triton kernels for `sass_report.py` to compare napkin's machine code with: an online-softmax
attention forward and a pipelined matmul, written for this benchmark after the structure of
Triton's tutorials (06-fused-attention, 03-matrix-multiplication). Benchmark-only: Triton is
never imported by napkin."""

import triton
import triton.language as tl


@triton.jit
def attention_forward(Q, K, V, O, sm_scale, N_CTX, stride_h, HEAD: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    q = tl.load(Q + base + offs_m[:, None] * HEAD + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
    qk_scale = sm_scale * 1.44269504          # exp(x) = exp2(x * log2(e)), folded into one FMA
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        k = tl.load(K + base + (start_n + offs_n)[None, :] * HEAD + offs_d[:, None])
        qk = tl.dot(q, k)
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + (start_n + offs_n)[:, None] * HEAD + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * HEAD + offs_d[None, :], acc.to(tl.float16))


@triton.jit
def matmul(A, B, C, M, N, K, stride_am, stride_bk, stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16))


_ATT = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "sm_scale": "fp32", "N_CTX": "i32",
        "stride_h": "i32", "HEAD": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
        "CAUSAL": "constexpr"}
_MM = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
       "stride_bk": "i32", "stride_cm": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
       "BLOCK_K": "constexpr"}

# label, kernel, signature, constexprs, warps, stages, scores per iteration per block
CASES = [
    ("attention d=64 128x128 4w 2st", attention_forward, _ATT,
     {"HEAD": 64, "BLOCK_M": 128, "BLOCK_N": 128, "CAUSAL": False}, 4, 2, 128 * 128),
    ("attention d=128 128x64 8w 3st", attention_forward, _ATT,
     {"HEAD": 128, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": False}, 8, 3, 128 * 64),
    ("causal d=64 128x128 4w 2st", attention_forward, _ATT,
     {"HEAD": 64, "BLOCK_M": 128, "BLOCK_N": 128, "CAUSAL": True}, 4, 2, 128 * 128),
    ("matmul 128x128x32 4w 4st", matmul, _MM, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, 4, 4, None),
]
