// An LM head's cross-entropy fused on tensor cores, written by hand: the kernel the lowering
// of compiler/epilogue_stats.py should emit (docs/tensor-cores.md, "row statistics in the
// epilogue"). H: [t][m], W: [v][m] (f16 or bf16), label: [t] int32.
//   Z[t v] = H * W;  L[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))
// Kernel 1 (lmhead_ce_parts_*): a block takes a BM x BN tile of (t, v), streams m through
// shared memory in chunks of BK and multiplies on mma.m16n8k16 into f32 C fragments (WM x WN
// warps, each a WTM x WTN warp tile). Z is never stored: in the epilogue each lane reduces
// its fragment values over the columns of its two rows per fragment (columns past v left
// out): a running max and sum of exp, and the label's logit (0 where the label is not in the
// tile); the 4 lanes of a quad merge theirs by shuffles (napkin_lanes_lse, napkin_lanes_sum
// over width 4), the WN warps side by side along v through shared memory, and the block's
// partial states of its BM rows go to global memory: lse[p][t] (the tile's logsumexp) and
// sel[p][t], p = the tile's position along v (P = ceil(v / BN) per row).
// Kernel 2 (lmhead_ce_merge): the split's merge, one thread a row:
//   L[t] = logsumexp[p](lse) - sum[p](sel)
#ifndef BM                  // (a test may define the tiling before this file)
#define BM 64
#define BN 64
#define BK 32
#define WM 2
#define WN 2
#endif
#define WTM (BM / WM)
#define WTN (BN / WN)
#define FM (WTM / 16)
#define FN (WTN / 8)
#define THREADS (32 * WM * WN)
#define LD (BK + 8)  // halves per shared row: 16-byte aligned rows for ldmatrix, banks staggered

__device__ __forceinline__ void lmhead_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], __half) {
  napkin_mma_m16n8k16_f16(d, a, b, d);
}
__device__ __forceinline__ void lmhead_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                           __nv_bfloat16) {
  napkin_mma_m16n8k16_bf16(d, a, b, d);
}

template <typename T>
__device__ __forceinline__ void lmhead_ce_parts(const T* __restrict__ H, const T* __restrict__ W,
    const int* __restrict__ label, float* __restrict__ lse, float* __restrict__ sel,
    long long t, long long m, long long v) {
  NAPKIN_DYNAMIC_SMEM(smem);
  T* Hs = reinterpret_cast<T*>(smem);
  T* Ws = Hs + BM * LD;
  float* red = reinterpret_cast<float*>(Ws + BN * LD);   // [3][WN][BM]: max, sum of exp, label's
  const int tid = threadIdx.x, lane = tid % 32, wr = (tid / 32) / WN, wc = (tid / 32) % WN;
  const int g = lane / 4, qd = lane % 4;
  const T zero = napkin_from_float<T>(0.0f);
  const long long parts = (v + BN - 1) / BN, tiles = (t + BM - 1) / BM * parts;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long p = tile % parts, t0 = (tile / parts) * BM, v0 = p * BN;
    float acc[FM][FN][4];
#pragma unroll
    for (int i0 = 0; i0 < FM; ++i0)
#pragma unroll
      for (int i1 = 0; i1 < FN; ++i1)
#pragma unroll
        for (int i2 = 0; i2 < 4; ++i2) acc[i0][i1][i2] = 0.0f;
    for (long long k0 = 0; k0 < m; k0 += BK) {
      __syncthreads();           // every warp is done with the previous chunk (and tile)
      for (int e = tid; e < BM * BK; e += THREADS) {
        const int r = e / BK, c = e % BK;
        Hs[r * LD + c] = (t0 + r < t && k0 + c < m) ? H[(t0 + r) * m + k0 + c] : zero;
      }
      for (int e = tid; e < BN * BK; e += THREADS) {
        const int r = e / BK, c = e % BK;
        Ws[r * LD + c] = (v0 + r < v && k0 + c < m) ? W[(v0 + r) * m + k0 + c] : zero;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        unsigned fa[FM][4], fb[FN][2];
#pragma unroll
        for (int i0 = 0; i0 < FM; ++i0)
          napkin_ldmatrix_x4(fa[i0], Hs + (wr * WTM + i0 * 16 + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int i1 = 0; i1 < FN; ++i1)
          napkin_ldmatrix_x2(fb[i1], Ws + (wc * WTN + i1 * 8 + lane % 8) * LD + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int i0 = 0; i0 < FM; ++i0)
#pragma unroll
          for (int i1 = 0; i1 < FN; ++i1) lmhead_mma(acc[i0][i1], fa[i0], fb[i1], zero);
      }
    }
    // the epilogue: each lane's rows (g and g + 8 of each fragment) reduced over its columns
#pragma unroll
    for (int i0 = 0; i0 < FM; ++i0)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wr * WTM + i0 * 16 + g + h * 8;
        const long long row = t0 + r;
        const long long want = row < t ? (long long)label[row] : -1;
        float mx = -NAPKIN_INF, s = 0.0f, hit = 0.0f;
#pragma unroll
        for (int i1 = 0; i1 < FN; ++i1)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            if (v0 + wc * WTN + i1 * 8 + 2 * qd + j < v) mx = napkin_max(mx, acc[i0][i1][2 * h + j]);
        const float sh = napkin_shift(mx);
#pragma unroll
        for (int i1 = 0; i1 < FN; ++i1)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const long long col = v0 + wc * WTN + i1 * 8 + 2 * qd + j;
            const float z = acc[i0][i1][2 * h + j];
            if (col < v) s += expf(z - sh);
            if (col == want) hit += z;
          }
        napkin_lanes_lse(mx, s, 4);          // the quad's 4 lanes hold the row's columns
        hit = napkin_lanes_sum(hit, 4);
        if (qd == 0) {
          red[(0 * WN + wc) * BM + r] = mx;
          red[(1 * WN + wc) * BM + r] = s;
          red[(2 * WN + wc) * BM + r] = hit;
        }
      }
    __syncthreads();
    for (int r = tid; r < BM; r += THREADS) {   // the WN warps along v, in order
      float mx = red[r], s = red[WN * BM + r], hit = red[2 * WN * BM + r];
      for (int w = 1; w < WN; ++w) {
        const float mo = red[w * BM + r], so = red[(WN + w) * BM + r];
        const float mm = napkin_max(mx, mo), sh = napkin_shift(mm);
        s = s * expf(mx - sh) + so * expf(mo - sh);
        mx = mm;
        hit += red[(2 * WN + w) * BM + r];
      }
      if (t0 + r < t) {
        lse[p * t + t0 + r] = mx == -NAPKIN_INF ? -NAPKIN_INF : logf(s) + mx;
        sel[p * t + t0 + r] = hit;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) lmhead_ce_parts_f16(const __half* __restrict__ H,
    const __half* __restrict__ W, const int* __restrict__ label, float* __restrict__ lse,
    float* __restrict__ sel, long long t, long long m, long long v) {
  lmhead_ce_parts<__half>(H, W, label, lse, sel, t, m, v);
}
extern "C" __global__ void __launch_bounds__(THREADS) lmhead_ce_parts_bf16(const __nv_bfloat16* __restrict__ H,
    const __nv_bfloat16* __restrict__ W, const int* __restrict__ label, float* __restrict__ lse,
    float* __restrict__ sel, long long t, long long m, long long v) {
  lmhead_ce_parts<__nv_bfloat16>(H, W, label, lse, sel, t, m, v);
}

// the merge of the P = ceil(v / BN) partial states of each row (a split of v's merge)
extern "C" __global__ void lmhead_ce_merge(const float* __restrict__ lse, const float* __restrict__ sel,
    float* __restrict__ L, long long t, long long parts) {
  for (long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x; row < t;
       row += (long long)gridDim.x * blockDim.x) {
    float mx = -NAPKIN_INF, s = 0.0f, hit = 0.0f;
    for (long long p = 0; p < parts; ++p) mx = napkin_max(mx, lse[p * t + row]);
    const float sh = napkin_shift(mx);
    for (long long p = 0; p < parts; ++p) {
      s += expf(lse[p * t + row] - sh);
      hit += sel[p * t + row];
    }
    L[row] = (mx == -NAPKIN_INF ? -NAPKIN_INF : logf(s) + mx) - hit;
  }
}
