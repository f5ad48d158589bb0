// Y[r, :] = softmax(X[r, :]); one warp per row, warp-shuffle reductions (max, then sum).
extern "C" __global__ void __launch_bounds__(128)
softmax_rows(const float* __restrict__ X, float* __restrict__ Y, int rows, int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int lane = threadIdx.x;
  if (row >= rows) return;  // a whole warp leaves: no barrier or shuffle is skipped by part of a warp
  const float* x = X + (long long)row * cols;
  float m = -NAPKIN_INF;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.0f;
  for (int c = lane; c < cols; c += 32) s += napkin_ex2((x[c] - m) * 1.4426950408889634f);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  s = __shfl_sync(0xffffffffu, s, 0);
  const float inv = 1.0f / s;
  for (int c = lane; c < cols; c += 32) Y[(long long)row * cols + c] = __expf(x[c] - m) * inv;
}
