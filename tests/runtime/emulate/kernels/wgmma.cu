// Warpgroup MMA through the helpers of codegen/wgmma_ptx.py (the test puts them between the
// prelude and this file). The test gives the shared memory image byte for byte -- the
// operands already in the layout the descriptors describe, from the test's own model of the
// PTX ISA's canonical layouts -- and the descriptors' fields; each thread's accumulator
// registers come in (C) and go out (D) raw, [thread][N / 2], so that the test checks the
// accumulator layout lane by lane.
//
// p: [0] image bytes, [1] k16 steps, [2] scale-d of the first step,
//    [3..5] A's leading byte offset, stride byte offset, swizzle mode; [6..8] B's;
//    [9] bytes between consecutive warpgroups' A operands;
//    then per step s: A's and B's start offsets in the image at [10 + 2s], [11 + 2s];
//    a kernel STAGED by cp.async: [10 + 2 * steps] whether its threads fence the copies.

// The image into shared memory: stored byte by byte (generic proxy), or STAGED by cp.async
// (generic proxy too), landed by each thread's wait_group; each writer then executes
// fence.proxy.async (for the async proxy wgmma reads through), unless p says not to.
__device__ void wg_stage(unsigned char* smem, const unsigned char* image, const unsigned* p, bool staged) {
  const unsigned tid = threadIdx.x;
  if (!staged) {
    for (unsigned i = tid; i < p[0]; i += blockDim.x) smem[i] = image[i];
  } else {
    for (unsigned i = 16 * tid; i < p[0]; i += 16 * blockDim.x) napkin_cp_async_16(smem + i, image + i);
    napkin_cp_async_wait_all();
  }
  if (!staged || p[10 + 2 * p[1]]) napkin_wgmma_proxy_fence();
  __syncthreads();
}

#define WG_PRODUCT(NAME, N, MMA, STAGED)                                                    \
  extern "C" __global__ void NAME(const unsigned char* image, const unsigned* p, const float* C, \
                                  float* D) {                                                 \
    NAPKIN_WGMMA_SMEM(smem);                                                                  \
    const int tid = threadIdx.x;                                                              \
    wg_stage(smem, image, p, STAGED);                                                         \
    float d[N / 2];                                                                           \
    for (int i = 0; i < N / 2; ++i) d[i] = C[tid * (N / 2) + i];                              \
    const unsigned group_a = (tid / 128) * p[9];                                              \
    napkin_wgmma_fence();                                                                     \
    for (unsigned s = 0; s < p[1]; ++s) {                                                     \
      const unsigned long long da = napkin_wgmma_desc(smem + group_a + p[10 + 2 * s], p[3], p[4], p[5]); \
      const unsigned long long db = napkin_wgmma_desc(smem + p[11 + 2 * s], p[6], p[7], p[8]); \
      MMA(d, da, db, s > 0 || p[2]);                                                          \
    }                                                                                         \
    napkin_wgmma_commit();                                                                    \
    napkin_wgmma_wait<0>();                                                                   \
    for (int i = 0; i < N / 2; ++i) D[tid * (N / 2) + i] = d[i];                              \
  }

WG_PRODUCT(wg_n8_f16, 8, napkin_wgmma_m64n8k16_f16, false)
WG_PRODUCT(wg_n64_f16_tb, 64, napkin_wgmma_m64n64k16_f16_tb, false)
WG_PRODUCT(wg_n64_f16_ta_tb, 64, napkin_wgmma_m64n64k16_f16_ta_tb, false)
WG_PRODUCT(wg_n136_bf16, 136, napkin_wgmma_m64n136k16_bf16, false)
WG_PRODUCT(wg_n256_bf16_tb, 256, napkin_wgmma_m64n256k16_bf16_tb, false)
WG_PRODUCT(wg_n128_f16, 128, napkin_wgmma_m64n128k16_f16, false)
WG_PRODUCT(wg_n64_f16_tb_staged, 64, napkin_wgmma_m64n64k16_f16_tb, true)

// Two groups in flight: wait_group 1 completes the first only; the second's operand B is then
// zeroed in shared memory before wait_group 0, which is when the emulator reads it.
// D: [0] acc0 after wait 1, [1] acc1 after wait 1, [2] acc1 after wait 0; each [thread][32].
// p[14]: the bytes of step 1's B (zeroed from p[13]).
extern "C" __global__ void wg_groups(const unsigned char* image, const unsigned* p, const float* C, float* D) {
  NAPKIN_WGMMA_SMEM(smem);
  const int tid = threadIdx.x;
  wg_stage(smem, image, p, false);
  float acc0[32], acc1[32];
  for (int i = 0; i < 32; ++i) acc0[i] = acc1[i] = C[tid * 32 + i];
  napkin_wgmma_fence();
  napkin_wgmma_m64n64k16_f16_tb(acc0, napkin_wgmma_desc(smem + p[10], p[3], p[4], p[5]),
                                napkin_wgmma_desc(smem + p[11], p[6], p[7], p[8]), 1);
  napkin_wgmma_commit();
  napkin_wgmma_m64n64k16_f16_tb(acc1, napkin_wgmma_desc(smem + p[12], p[3], p[4], p[5]),
                                napkin_wgmma_desc(smem + p[13], p[6], p[7], p[8]), 1);
  napkin_wgmma_commit();
  napkin_wgmma_wait<1>();
  for (int i = 0; i < 32; ++i) D[tid * 32 + i] = acc0[i];
  for (int i = 0; i < 32; ++i) D[128 * 32 + tid * 32 + i] = acc1[i];
  __syncthreads();
  for (unsigned i = tid; i < p[14]; i += blockDim.x) smem[p[13] + i] = 0;
  __syncthreads();
  napkin_wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) D[2 * 128 * 32 + tid * 32 + i] = acc1[i];
}

// Mistakes the emulator refuses: mode 0 no fence, 1 no wait_group, 2 a descriptor outside
// dynamic shared memory, 3 lanes disagreeing on a descriptor, 5 no fence after a wait_group,
// 6 warp 1 of the warpgroup giving another descriptor than warps 0, 2, 3 (each warp's lanes
// agreeing), 7 warp 2 not issuing the product (mode 4 is right, for a block that is not a
// whole warpgroup).
extern "C" __global__ void wg_misuse(const unsigned* p, float* D) {
  NAPKIN_WGMMA_SMEM(smem);
  __shared__ unsigned char fixed[2048];
  float d[4] = {0, 0, 0, 0};
  const unsigned mode = p[0];
  if (mode != 0) napkin_wgmma_fence();
  const unsigned char* a = mode == 2 ? fixed : smem;
  const unsigned lane_part = mode == 3 ? (threadIdx.x % 32 == 5 ? 16 : 0) : mode == 6 ? (threadIdx.x / 32 == 1 ? 16 : 0) : 0;
  if (mode != 7 || threadIdx.x / 32 != 2)
    napkin_wgmma_m64n8k16_f16(d, napkin_wgmma_desc(a + lane_part, 128, 256, 0), napkin_wgmma_desc(smem, 128, 256, 0), 0);
  napkin_wgmma_commit();
  if (mode != 1) napkin_wgmma_wait<0>();
  if (mode == 5) {
    napkin_wgmma_m64n8k16_f16(d, napkin_wgmma_desc(smem, 128, 256, 0), napkin_wgmma_desc(smem, 128, 256, 0), 1);
    napkin_wgmma_commit();
    napkin_wgmma_wait<0>();
  }
  D[threadIdx.x] = d[0];
}
