// Seeded synchronization bugs the emulator must report (never hang on).

// Tail threads return before a __syncthreads that the others reach.
extern "C" __global__ void divergent_barrier(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float buf[128];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  buf[threadIdx.x] = x[i];
  __syncthreads();  // DIVERGENT
  y[i] = buf[threadIdx.x] + buf[threadIdx.x ^ 1];
}

// Two warps wait at two different __syncthreads.
extern "C" __global__ void mismatched_barrier(float* __restrict__ y) {
  if (threadIdx.x < 32) {
    y[threadIdx.x] = 1.0f;
    __syncthreads();  // FIRST
  } else {
    __syncthreads();  // SECOND
    y[threadIdx.x] = 2.0f;
  }
}

// A full-warp shuffle after some lanes of the warp returned.
extern "C" __global__ void shuffle_after_exit(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  v += __shfl_xor_sync(0xffffffffu, v, 1);  // SHUFFLE
  y[i] = v;
}

// Half a warp waits in a shuffle that names the other half, which waits at the barrier.
extern "C" __global__ void warp_vs_barrier(float* __restrict__ y) {
  float v = (float)threadIdx.x;
  if (threadIdx.x < 16) v += __shfl_xor_sync(0xffffffffu, v, 16);  // HALF
  __syncthreads();
  y[threadIdx.x] = v;
}

// Never finishes while flag[0] == 0.
extern "C" __global__ void spin_forever(volatile int* flag) {
  while (flag[0] == 0) {
  }
}
