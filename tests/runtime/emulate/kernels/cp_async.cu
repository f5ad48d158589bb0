// cp.async global -> shared: 16-byte copies with zero-filled tails, two groups, wait_group.
// Block b stages x[8 * nt * b ...] (nt = blockDim.x): the first 4 * nt floats as group 0,
// the next 4 * nt as group 1.
extern "C" __global__ void cp_async_stage(const float* __restrict__ x, int n, float* __restrict__ early,
                                          float* __restrict__ late, float* __restrict__ out) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* s = reinterpret_cast<float*>(smem);
  const int t = threadIdx.x, nt = blockDim.x;
  const int base = blockIdx.x * nt * 8;
  for (int g = 0; g < 2; ++g) {
    const int local = g * nt * 4 + t * 4, i = base + local;
    const int bytes = n - i >= 4 ? 16 : (n - i > 0 ? (n - i) * 4 : 0);
    napkin_cp_async_16(s + local, bytes > 0 ? x + i : x, bytes);
    napkin_cp_async_commit();
  }
  napkin_cp_async_wait<1>();  // group 0 is complete; group 1 may still be in flight
  const int me = blockIdx.x * nt + t;
  for (int j = 0; j < 4; ++j) early[me * 4 + j] = s[t * 4 + j];          // own group-0 chunk
  for (int j = 0; j < 4; ++j) late[me * 4 + j] = s[nt * 4 + t * 4 + j];  // own group-1 chunk, not waited for
  napkin_cp_async_wait<0>();
  __syncthreads();
  for (int k = t; k < nt * 8; k += nt) out[base + k] = s[k];
}

// Seeded bug: the copy is committed but never waited for before the barrier.
extern "C" __global__ void cp_async_nowait(const float* __restrict__ x, float* __restrict__ out) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* s = reinterpret_cast<float*>(smem);
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x * 4 + t * 4;
  napkin_cp_async_16(s + t * 4, x + i, 16);
  napkin_cp_async_commit();
  __syncthreads();
  for (int j = 0; j < 4; ++j) out[i + j] = s[((t + 1) % blockDim.x) * 4 + j];  // a neighbour's chunk
}

// 8- and 4-byte copies (.ca) with partial sources; 64 threads.
extern "C" __global__ void cp_async_small(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ __align__(16) float s[64 * 4];
  const int t = threadIdx.x;
  napkin_cp_async_8(s + 4 * t, x + 4 * t, (t % 3) * 4);          // 0, 4 or 8 source bytes
  napkin_cp_async_4(s + 4 * t + 2, x + 4 * t + 2, (t % 2) * 4);  // 0 or 4 source bytes
  napkin_cp_async_commit();
  s[4 * t + 3] = -1.0f;
  napkin_cp_async_wait_all();
  __syncthreads();
  for (int j = 0; j < 4; ++j) out[4 * t + j] = s[4 * t + j];
}

// Seeded bug: each thread waits for its own copy, but the barrier before reading a
// neighbour's chunk is missing (a race ThreadSanitizer must see).
extern "C" __global__ void cp_async_nobarrier(const float* __restrict__ x, float* __restrict__ out) {
  NAPKIN_DYNAMIC_SMEM(smem);
  float* s = reinterpret_cast<float*>(smem);
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x * 4 + t * 4;
  napkin_cp_async_16(s + t * 4, x + i, 16);
  napkin_cp_async_commit();
  napkin_cp_async_wait<0>();
  for (int j = 0; j < 4; ++j) out[i + j] = s[((t + 1) % blockDim.x) * 4 + j];  // NEIGHBOUR
}
