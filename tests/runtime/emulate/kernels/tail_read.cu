// y[i] = x[i] + x[i ^ 1] over n elements, staging a 64-element tile in shared memory.
// One kernel masks the tail of the tile load; the other reads past the end of x.
extern "C" __global__ void scale_guarded(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float tile[64];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = tile[threadIdx.x] + tile[threadIdx.x ^ 1];
}

extern "C" __global__ void scale_unguarded(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float tile[64];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = x[i];  // TAIL READ: seeded bug, x has only n elements
  __syncthreads();
  if (i < n) y[i] = tile[threadIdx.x] + tile[threadIdx.x ^ 1];
}
