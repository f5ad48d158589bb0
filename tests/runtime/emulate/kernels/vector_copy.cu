// A block's 16-byte copies of 8 f16 values each, from x + from to y + to (values): aligned
// where from and to are multiples of 8; else every copy is a misaligned 16-byte access,
// which faults on the GPU and must be an error in the emulator.
extern "C" __global__ void vector_copy(const __half* __restrict__ x, __half* __restrict__ y,
                                       int from, int to, int vectors) {
  const int e = (int)threadIdx.x;
  if (e < vectors) {
    const uint4* src = reinterpret_cast<const uint4*>(x + from);
    uint4* dst = reinterpret_cast<uint4*>(y + to);
    dst[e] = src[e];
  }
}
