// A 16x8x16 product through shared memory: A fragments by ldmatrix.x4, B fragments by
// ldmatrix.x2.trans from B stored k-major (B[k][n]), then mma.m16n8k16. One tile per block.
#define LDA 24  // halves per A row in shared memory (16 + 8 padding; rows stay 16-byte aligned)
#define LDB 16  // halves per B row (8 + 8 padding)

extern "C" __global__ void ldmatrix_mma(const __half* __restrict__ A, const __half* __restrict__ B,
                                        float* __restrict__ D) {
  __shared__ __align__(16) __half As[16 * LDA];
  __shared__ __align__(16) __half Bs[16 * LDB];
  const int lane = threadIdx.x, p = blockIdx.x;
  for (int i = lane; i < 16 * 16; i += 32) As[(i / 16) * LDA + i % 16] = A[p * 256 + i];
  for (int i = lane; i < 16 * 8; i += 32) Bs[(i / 8) * LDB + i % 8] = B[p * 128 + i];
  __syncthreads();
  unsigned a[4], b[2];
  napkin_ldmatrix_x4(a, As + (lane % 16) * LDA + (lane / 16) * 8);
  napkin_ldmatrix_x2_trans(b, Bs + (lane % 16) * LDB);
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4];
  napkin_mma_m16n8k16_f16(d, a, b, c);
  const int g = lane >> 2, q = lane & 3;
  for (int i = 0; i < 4; ++i) D[p * 128 + (g + (i >= 2 ? 8 : 0)) * 8 + q * 2 + (i & 1)] = d[i];
}
