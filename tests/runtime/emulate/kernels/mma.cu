// One D = A*B + C per warp through the prelude's mma wrappers. Fragments are loaded from
// and stored to global memory exactly as the PTX ISA's layout tables say
// ("Matrix Fragments for mma.m16n8k16 with floating point type", "... for mma.m16n8k8"),
// with groupID = lane >> 2 and threadID_in_group = lane % 4.
// Per problem p: A[p] is 16 x K row-major, B[p] is K x 8 row-major (B[k][n]),
// C[p] and D[p] are 16 x 8 row-major.

__device__ __forceinline__ unsigned bits16(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ unsigned bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

template <typename T>
__device__ void mma_k16(const T* A, const T* B, const float* C, float* D, bool bf16) {
  const int lane = threadIdx.x & 31;
  const int p = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const T* a = A + p * 16 * 16;
  const T* b = B + p * 16 * 8;
  const float* c = C + p * 16 * 8;
  float* d = D + p * 16 * 8;
  const int groupID = lane >> 2, tig = lane % 4;
  unsigned ra[4] = {0, 0, 0, 0}, rb[2] = {0, 0};
  float rc[4], rd[4];
  for (int i = 0; i < 8; ++i) {  // a_i: register i/2, low half for even i
    const int row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
    const int col = (i < 4) ? (tig * 2) + (i & 0x1) : (tig * 2) + (i & 0x1) + 8;
    ra[i / 2] |= bits16(a[row * 16 + col]) << (16 * (i & 1));
  }
  for (int i = 0; i < 4; ++i) {  // b_i
    const int row = (i < 2) ? (tig * 2) + (i & 0x1) : (tig * 2) + (i & 0x1) + 8;
    const int col = groupID;
    rb[i / 2] |= bits16(b[row * 8 + col]) << (16 * (i & 1));
  }
  for (int i = 0; i < 4; ++i) {  // c_i
    const int row = (i < 2) ? groupID : groupID + 8;
    const int col = (tig * 2) + (i & 0x1);
    rc[i] = c[row * 8 + col];
  }
  if (bf16) napkin_mma_m16n8k16_bf16(rd, ra, rb, rc);
  else napkin_mma_m16n8k16_f16(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) {
    const int row = (i < 2) ? groupID : groupID + 8;
    const int col = (tig * 2) + (i & 0x1);
    d[row * 8 + col] = rd[i];
  }
}

extern "C" __global__ void mma_f16(const __half* A, const __half* B, const float* C, float* D) {
  mma_k16<__half>(A, B, C, D, false);
}

extern "C" __global__ void mma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  mma_k16<__nv_bfloat16>(A, B, C, D, true);
}

// tf32: A[p] is 16 x 8, B[p] is 8 x 8; values already representable in tf32.
extern "C" __global__ void mma_tf32(const float* A, const float* B, const float* C, float* D) {
  const int lane = threadIdx.x & 31;
  const int p = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const float* a = A + p * 16 * 8;
  const float* b = B + p * 8 * 8;
  const float* c = C + p * 16 * 8;
  float* d = D + p * 16 * 8;
  const int groupID = lane >> 2, tig = lane % 4;
  unsigned ra[4], rb[2];
  float rc[4], rd[4];
  for (int i = 0; i < 4; ++i) {
    const int row = (i == 0 || i == 2) ? groupID : groupID + 8;
    const int col = (i < 2) ? tig : tig + 4;
    ra[i] = __float_as_uint(a[row * 8 + col]);
  }
  for (int i = 0; i < 2; ++i) {
    const int row = (i == 0) ? tig : tig + 4;
    rb[i] = __float_as_uint(b[row * 8 + groupID]);
  }
  for (int i = 0; i < 4; ++i) rc[i] = c[(i < 2 ? groupID : groupID + 8) * 8 + tig * 2 + (i & 1)];
  napkin_mma_m16n8k8_tf32(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[(i < 2 ? groupID : groupID + 8) * 8 + tig * 2 + (i & 1)] = rd[i];
}
