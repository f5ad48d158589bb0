// Every warp shuffle, vote and reduction, for widths 8, 16 and 32; one output row per case.
#define NT 128  // threads in the grid: 2 blocks of 64 (two warps each)

extern "C" __global__ void shuffles(const int* __restrict__ vi, const float* __restrict__ vf,
                                    const double* __restrict__ vd, const long long* __restrict__ vl,
                                    int* __restrict__ oi, float* __restrict__ of, double* __restrict__ od,
                                    long long* __restrict__ ol) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
  const unsigned full = 0xffffffffu;
  const int x = vi[t];
  const float f = vf[t];
  const double d = vd[t];
  const long long l = vl[t];
  int ci = 0, cf = 0, cd = 0, cl = 0;
  for (int w = 8; w <= 32; w *= 2) {
    oi[(ci++) * NT + t] = __shfl_sync(full, x, lane * 3 + 1, w);
    oi[(ci++) * NT + t] = __shfl_sync(full, x, 0, w);
    oi[(ci++) * NT + t] = __shfl_up_sync(full, x, 3, w);
    oi[(ci++) * NT + t] = __shfl_down_sync(full, x, 5, w);
    oi[(ci++) * NT + t] = __shfl_xor_sync(full, x, 6, w);
    oi[(ci++) * NT + t] = __shfl_xor_sync(full, x, 9, w);
    of[(cf++) * NT + t] = __shfl_xor_sync(full, f, 1, w);
    of[(cf++) * NT + t] = __shfl_down_sync(full, f, 1, w);
    od[(cd++) * NT + t] = __shfl_up_sync(full, d, 1, w);
    ol[(cl++) * NT + t] = __shfl_xor_sync(full, l, 3, w);
  }
  oi[(ci++) * NT + t] = (int)__ballot_sync(full, x & 1);
  oi[(ci++) * NT + t] = __any_sync(full, x > 990);
  oi[(ci++) * NT + t] = __all_sync(full, x > -1001);
  oi[(ci++) * NT + t] = __all_sync(full, x > 0);
  if (lane < 16) oi[ci * NT + t] = (int)__ballot_sync(0x0000ffffu, x > 0);
  else oi[ci * NT + t] = -1;
  ci++;
  oi[(ci++) * NT + t] = __reduce_add_sync(full, x);
  oi[(ci++) * NT + t] = __reduce_min_sync(full, x);
  oi[(ci++) * NT + t] = __reduce_max_sync(full, x);
  __syncwarp();
  oi[(ci++) * NT + t] = (int)__activemask();
}
