// ldmatrix .x1/.x2/.x4 (and .trans) on a shared tile of 32 rows x 24 halves (48-byte rows).
// Lane l gives the address of smem row (5 * l) % 32 at column 8 * ((l / 8) % 2); with .xN,
// lanes 8m..8m+7 address matrix m. Lane l stores its registers to out[4 * l + m].
#define LD 24

template <int N, bool TRANS>
__device__ void ldmatrix_test(const __half* __restrict__ src, unsigned* __restrict__ out) {
  __shared__ __align__(16) __half tile[32 * LD];
  for (int i = threadIdx.x; i < 32 * LD; i += blockDim.x) tile[i] = src[i];
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const __half* row = tile + ((5 * lane) % 32) * LD + 8 * ((lane / 8) % 2);
  unsigned r[N];
  if constexpr (N == 1 && !TRANS) napkin_ldmatrix_x1(r, row);
  if constexpr (N == 2 && !TRANS) napkin_ldmatrix_x2(r, row);
  if constexpr (N == 4 && !TRANS) napkin_ldmatrix_x4(r, row);
  if constexpr (N == 1 && TRANS) napkin_ldmatrix_x1_trans(r, row);
  if constexpr (N == 2 && TRANS) napkin_ldmatrix_x2_trans(r, row);
  if constexpr (N == 4 && TRANS) napkin_ldmatrix_x4_trans(r, row);
  for (int m = 0; m < N; ++m) out[4 * lane + m] = r[m];
}

extern "C" __global__ void ldm_x1(const __half* src, unsigned* out) { ldmatrix_test<1, false>(src, out); }
extern "C" __global__ void ldm_x2(const __half* src, unsigned* out) { ldmatrix_test<2, false>(src, out); }
extern "C" __global__ void ldm_x4(const __half* src, unsigned* out) { ldmatrix_test<4, false>(src, out); }
extern "C" __global__ void ldm_x1_trans(const __half* src, unsigned* out) { ldmatrix_test<1, true>(src, out); }
extern "C" __global__ void ldm_x2_trans(const __half* src, unsigned* out) { ldmatrix_test<2, true>(src, out); }
extern "C" __global__ void ldm_x4_trans(const __half* src, unsigned* out) { ldmatrix_test<4, true>(src, out); }
