// matmul_tiled.cu with one __syncthreads removed, in two ways (seeded races).
#define TILE 16

// No barrier between loading the tiles and reading them.
extern "C" __global__ void __launch_bounds__(256)
matmul_tiled_noload(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,
                    int K) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* As = reinterpret_cast<float*>(smem);
  float* Bs = As + TILE * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;  // WRITE_A1
    Bs[ty * TILE + tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;  // WRITE_B1
    for (int k = 0; k < TILE; ++k) acc += As[ty * TILE + k] * Bs[k * TILE + tx];  // READ1
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

// No barrier between reading the tiles and overwriting them in the next step.
extern "C" __global__ void __launch_bounds__(256)
matmul_tiled_noconsume(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                       int N, int K) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* As = reinterpret_cast<float*>(smem);
  float* Bs = As + TILE * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;  // WRITE_A2
    Bs[ty * TILE + tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;  // WRITE_B2
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[ty * TILE + k] * Bs[k * TILE + tx];  // READ2
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
