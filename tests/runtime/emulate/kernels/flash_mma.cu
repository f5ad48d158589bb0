// FlashAttention-2 on tensor cores, written by hand: the kernel the tensor-core lowering of
// the attention diagram should emit (see docs/tensor-cores.md). Q, K, V, O: [bh][n][64] f16.
// A block of 4 warps takes 64 queries, each warp 16 of them as mma.m16n8k16 A fragments
// held in registers; key/value chunks of 64 are staged in shared memory; S = Q K^T comes out
// of the tensor cores in C fragments (rows g and g+8 of the warp's 16, two columns each),
// the online softmax runs on them (row max and sum across the 4 lanes of a quad), and the
// probabilities, packed to f16, are reused directly as the A fragments of O += P V (the C
// layout of two n8 tiles is the A layout of one k16 tile). causal != 0 masks x > q.
#define D 64
#define BR 64
#define BC 64
#define LD (D + 8)  // halves per shared row: 16-byte aligned rows for ldmatrix, banks staggered
extern "C" __global__ void __launch_bounds__(128, 1) flash_mma(const __half* __restrict__ Q,
    const __half* __restrict__ K, const __half* __restrict__ V, __half* __restrict__ O,
    long long nq, long long nx, long long bh, int causal) {
  NAPKIN_DYNAMIC_SMEM(smem);
  __half* Qs = reinterpret_cast<__half*>(smem);
  __half* Ks = Qs + BR * LD;
  __half* Vs = Ks + BC * LD;
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, g = lane >> 2, qd = lane & 3;
  const long long nqb = (nq + BR - 1) / BR;
  for (long long blk = blockIdx.x; blk < nqb * bh; blk += gridDim.x) {
    const long long b = blk / nqb, q0 = (blk % nqb) * BR;
    __syncthreads();
    for (int e = tid; e < BR * D; e += 128) {
      int r = e / D, c = e % D;
      Qs[r * LD + c] = (q0 + r < nq) ? Q[(b * nq + q0 + r) * D + c] : __float2half_rn(0.0f);
    }
    __syncthreads();
    unsigned qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      napkin_ldmatrix_x4(qa[kk], Qs + (w * 16 + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) for (int j = 0; j < 4; ++j) o[i][j] = 0.0f;
    float m[2] = {-NAPKIN_INF, -NAPKIN_INF}, l[2] = {0.0f, 0.0f};
    for (long long c0 = 0; c0 < nx; c0 += BC) {
      __syncthreads();
      for (int e = tid; e < BC * D; e += 128) {
        int r = e / D, c = e % D;
        bool ok = c0 + r < nx;
        Ks[r * LD + c] = ok ? K[(b * nx + c0 + r) * D + c] : __float2half_rn(0.0f);
        Vs[r * LD + c] = ok ? V[(b * nx + c0 + r) * D + c] : __float2half_rn(0.0f);
      }
      __syncthreads();
      float s[BC / 8][4];
#pragma unroll
      for (int nt = 0; nt < BC / 8; ++nt) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          unsigned kb[2];
          napkin_ldmatrix_x2(kb, Ks + (nt * 8 + lane % 8) * LD + kk * 16 + ((lane / 8) % 2) * 8);
          napkin_mma_m16n8k16_f16(acc, qa[kk], kb, acc);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          long long col = c0 + nt * 8 + 2 * qd + (i & 1);
          long long row = q0 + w * 16 + g + (i >= 2 ? 8 : 0);
          s[nt][i] = (col < nx && (!causal || col <= row)) ? acc[i] * 0.125f : -NAPKIN_INF;
        }
      }
      float scale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[r];
#pragma unroll
        for (int nt = 0; nt < BC / 8; ++nt) mx = napkin_max(mx, napkin_max(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = napkin_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = napkin_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float sh = napkin_shift(mx);
        scale[r] = expf(m[r] - sh);
        m[r] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < BC / 8; ++nt) {
          s[nt][2 * r] = expf(s[nt][2 * r] - sh);
          s[nt][2 * r + 1] = expf(s[nt][2 * r + 1] - sh);
          sum += s[nt][2 * r] + s[nt][2 * r + 1];
        }
        l[r] = l[r] * scale[r] + sum;
      }
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][0] *= scale[0]; o[dt][1] *= scale[0]; o[dt][2] *= scale[1]; o[dt][3] *= scale[1];
      }
#pragma unroll
      for (int kt = 0; kt < BC / 16; ++kt) {
        unsigned pa[4] = {napkin_pack_half2(s[2 * kt][0], s[2 * kt][1]), napkin_pack_half2(s[2 * kt][2], s[2 * kt][3]),
                          napkin_pack_half2(s[2 * kt + 1][0], s[2 * kt + 1][1]), napkin_pack_half2(s[2 * kt + 1][2], s[2 * kt + 1][3])};
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          unsigned vb[2];
          napkin_ldmatrix_x2_trans(vb, Vs + (kt * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD + dt * 8);
          napkin_mma_m16n8k16_f16(o[dt], pa, vb, o[dt]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      l[r] = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    }
    for (int dt = 0; dt < D / 8; ++dt)
      for (int i = 0; i < 4; ++i) {
        long long row = q0 + w * 16 + g + (i >= 2 ? 8 : 0);
        if (row < nq) O[(b * nq + row) * D + dt * 8 + 2 * qd + (i & 1)] = __float2half_rn(o[dt][i] * l[i >> 1]);
      }
  }
}
