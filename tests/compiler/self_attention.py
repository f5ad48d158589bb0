"""Self-attention as people write it, for the gradient's tests (tests/runtime/test_flash_lse.py,
tests/compiler/test_planning_time.py): X projected by Wq, Wk, Wv, K and V computed along `t`
and read renamed along `s`; causal or not; the output projected by Wo or not."""

HEAD = """axis t, m, h, s
axis d = 64
in X[t m]: f16
in Wq[m h d]: f16
in Wk[m h d]: f16
in Wv[m h d]: f16
{wo}Q[h t d] = X * Wq
K[h t d] = X * Wk
V[h t d] = X * Wv
S[h t s] = Q * K[h s d]
"""
CAUSAL = "O[t h d] = softmax[s](where(s <= t, S, -inf)) * V[h s d]\n"
FULL = "O[t h d] = softmax[s](S) * V[h s d]\n"
VARIANTS = {
    "causal_proj": HEAD.format(wo="in Wo[h d m]: f16\n") + CAUSAL + "R[t m] = O * Wo\nout R: f16\n",
    "full_proj": HEAD.format(wo="in Wo[h d m]: f16\n") + FULL + "R[t m] = O * Wo\nout R: f16\n",
    "causal_bare": HEAD.format(wo="") + CAUSAL + "out O: f16\n",
}
