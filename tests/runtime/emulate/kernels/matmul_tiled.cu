// C[M,N] = A[M,K] @ B[K,N], 16x16 tiles staged in dynamic shared memory; tails masked.
#define TILE 16

extern "C" __global__ void __launch_bounds__(256)
matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* As = reinterpret_cast<float*>(smem);
  float* Bs = As + TILE * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty * TILE + tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
    __syncthreads();  // LOADED
    for (int k = 0; k < TILE; ++k) acc += As[ty * TILE + k] * Bs[k * TILE + tx];
    __syncthreads();  // CONSUMED
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
