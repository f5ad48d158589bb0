// The prelude's conversions: f32 -> f16/bf16 (round to nearest even), back, and packing.
extern "C" __global__ void narrow(const float* __restrict__ x, int n, __half* __restrict__ h,
                                  __nv_bfloat16* __restrict__ b, unsigned int* __restrict__ packed,
                                  float* __restrict__ unpacked) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i], w = x[n - 1 - i];
  h[i] = napkin_from_float<__half>(v);
  b[i] = napkin_from_float<__nv_bfloat16>(v);
  packed[2 * i] = napkin_pack_half2(v, w);
  packed[2 * i + 1] = napkin_pack_bf162(v, w);
  const float2 uh = napkin_unpack_half2(packed[2 * i]);
  const float2 ub = napkin_unpack_bf162(packed[2 * i + 1]);
  unpacked[4 * i] = uh.x;
  unpacked[4 * i + 1] = uh.y;
  unpacked[4 * i + 2] = ub.x;
  unpacked[4 * i + 3] = ub.y;
}

extern "C" __global__ void widen(const __half* __restrict__ h, const __nv_bfloat16* __restrict__ b, int n,
                                 float* __restrict__ hf, float* __restrict__ bf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  hf[i] = napkin_to_float(h[i]);
  bf[i] = napkin_to_float(b[i]);
}

extern "C" __global__ void constants(const float* __restrict__ x, float* __restrict__ out) {
  if (threadIdx.x == 0) {
    out[0] = NAPKIN_INF;
    out[1] = -NAPKIN_INF;
    out[2] = NAPKIN_NAN;
    out[3] = napkin_from_float<float>(napkin_to_float(x[0]));
  }
  out[4 + threadIdx.x] = napkin_ex2(x[threadIdx.x]);
}
