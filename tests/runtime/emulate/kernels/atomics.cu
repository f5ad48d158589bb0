// Atomics from every block: a histogram, a float sum, int max/min, a counter, a float max by CAS.
extern "C" __global__ void atomics(const int* __restrict__ keys, const float* __restrict__ vals, int n,
                                   int* __restrict__ hist, float* __restrict__ total, int* __restrict__ extremes,
                                   unsigned int* __restrict__ count, float* __restrict__ fmax_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = keys[i];
  const float v = vals[i];
  atomicAdd(&hist[k], 1);
  atomicAdd(total, v);
  atomicMax(&extremes[0], k * 7 - 50);
  atomicMin(&extremes[1], k * 7 - 50);
  atomicExch(&extremes[2], 12345);
  atomicInc(count, 0xffffffffu);
  int* addr = reinterpret_cast<int*>(fmax_out);
  int old = atomicAdd(addr, 0);
  while (__int_as_float(old) < v) {
    const int seen = atomicCAS(addr, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
}
