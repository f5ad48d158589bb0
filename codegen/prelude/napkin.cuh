// ---- napkin prelude: device helpers of every kernel napkin emits ----------------------------
// Pasted verbatim at the top of each generated .cu file. Compiles with NVRTC (sm_80, sm_90)
// and, with NAPKIN_EMULATE defined and napkin_emulate.h force-included, with g++ for the
// CPU emulator, which provides its own definitions of the inline-PTX helpers below.
#ifndef NAPKIN_PRELUDE_CUH
#define NAPKIN_PRELUDE_CUH

#ifndef NAPKIN_EMULATE
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

// NVRTC has no INFINITY/NAN macros.
#define NAPKIN_INF (__int_as_float(0x7f800000))
#define NAPKIN_NAN (__int_as_float(0x7fffffff))

// ---- conversions (round to nearest even) ------------------------------------------------------
__device__ __forceinline__ float napkin_to_float(float x) { return x; }
__device__ __forceinline__ float napkin_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float napkin_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T napkin_from_float(float x);
template <> __device__ __forceinline__ float napkin_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half napkin_from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 napkin_from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// (integer and boolean arrays are staged with napkin_from_float<T>(0.0f) as a zero fill too)
template <> __device__ __forceinline__ int napkin_from_float<int>(float x) { return (int)x; }
template <> __device__ __forceinline__ long long napkin_from_float<long long>(float x) { return (long long)x; }
template <> __device__ __forceinline__ bool napkin_from_float<bool>(float x) { return x != 0.0f; }

// Integers are computed in 64 bits; booleans load as they are.
__device__ __forceinline__ long long napkin_to_int(int x) { return x; }
__device__ __forceinline__ long long napkin_to_int(long long x) { return x; }
__device__ __forceinline__ long long napkin_to_int(bool x) { return x ? 1 : 0; }
// int(x) of a float: toward zero; NaN gives 0, values past the int64 range saturate.
__device__ __forceinline__ long long napkin_to_int(float x) {
  if (x != x) return 0;
  if (x >= 9.2233720368547758e18f) return 9223372036854775807LL;
  if (x <= -9.2233720368547758e18f) return (-9223372036854775807LL - 1);
  return (long long)x;
}
__device__ __forceinline__ bool napkin_to_bool(bool x) { return x; }
template <typename T> __device__ __forceinline__ T napkin_from_int(long long x) { return (T)x; }

// Two 16-bit values in one 32-bit register, `lo` in bits 0..15 (the mma fragment order).
__device__ __forceinline__ unsigned napkin_pack_half2(float lo, float hi) {
  return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned napkin_pack_bf162(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
__device__ __forceinline__ float2 napkin_unpack_half2(unsigned v) {
  return make_float2(__half2float(__ushort_as_half((unsigned short)(v & 0xffffu))),
                     __half2float(__ushort_as_half((unsigned short)(v >> 16))));
}
__device__ __forceinline__ float2 napkin_unpack_bf162(unsigned v) {
  return make_float2(__bfloat162float(__ushort_as_bfloat16((unsigned short)(v & 0xffffu))),
                     __bfloat162float(__ushort_as_bfloat16((unsigned short)(v >> 16))));
}

// The j-th (a constant) of the eight 16-bit values of one 16-byte load, as a float.
__device__ __forceinline__ unsigned napkin_word_at(const uint4& v, int j) {
  const unsigned w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
  return j % 2 ? w >> 16 : w & 0xffffu;
}
__device__ __forceinline__ float napkin_half_at(const uint4& v, int j) {
  return __half2float(__ushort_as_half((unsigned short)napkin_word_at(v, j)));
}
__device__ __forceinline__ float napkin_bf16_at(const uint4& v, int j) {
  return __bfloat162float(__ushort_as_bfloat16((unsigned short)napkin_word_at(v, j)));
}

#ifndef NAPKIN_EMULATE
// ---- dynamic shared memory: `unsigned char* name`, 128-byte aligned; use inside a function ----
#define NAPKIN_DYNAMIC_SMEM(name)                                            \
  extern __shared__ __align__(128) unsigned char napkin_dynamic_smem_[];     \
  unsigned char* name = napkin_dynamic_smem_

__device__ __forceinline__ unsigned napkin_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// ---- tensor cores: D = A*B + C, fragments as in the PTX ISA (mma.m16n8k16 / mma.m16n8k8) --------
__device__ __forceinline__ void napkin_mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4],
                                                        const unsigned (&b)[2], const float (&c)[4]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  __trap();
#endif
}

__device__ __forceinline__ void napkin_mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4],
                                                         const unsigned (&b)[2], const float (&c)[4]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  __trap();
#endif
}

// a, b hold tf32 values in .b32 registers (the low 13 mantissa bits are not used).
__device__ __forceinline__ void napkin_mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4],
                                                        const unsigned (&b)[2], const float (&c)[4]) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  __trap();
#endif
}

// ---- ldmatrix: smem_row is this lane's row address (lanes 8m..8m+7 address matrix m) -------------
__device__ __forceinline__ void napkin_ldmatrix_x1(unsigned (&r)[1], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x2(unsigned (&r)[2], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x4(unsigned (&r)[4], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x1_trans(unsigned (&r)[1], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x2_trans(unsigned (&r)[2], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
// two B fragments (m16n8k16) by one ldmatrix.x4: matrices 0, 1 into a, 2, 3 into b
__device__ __forceinline__ void napkin_ldmatrix_x4_pair(unsigned (&a)[2], unsigned (&b)[2], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(b[0]), "=r"(b[1]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_ldmatrix_x4_pair_trans(unsigned (&a)[2], unsigned (&b)[2], const void* smem_row) {
#if __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(b[0]), "=r"(b[1]) : "r"(napkin_smem_addr(smem_row)) : "memory");
#else
  __trap();
#endif
}

// ---- cp.async: global -> shared, asynchronous; bytes past src_bytes are zero-filled -------------
__device__ __forceinline__ void napkin_cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(napkin_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_cp_async_8(void* smem, const void* gmem, int src_bytes = 8) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
               :: "r"(napkin_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_cp_async_4(void* smem, const void* gmem, int src_bytes = 4) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(napkin_smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Wait until at most N of this thread's most recent cp.async groups are still in flight.
template <int N> __device__ __forceinline__ void napkin_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}
__device__ __forceinline__ void napkin_cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// ---- 2^x, approximate (ex2.approx.ftz.f32: one MUFU.EX2; results below 2^-126 are 0) -------
__device__ __forceinline__ float napkin_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif  // !NAPKIN_EMULATE

// ---- the language's elementwise functions, with its NaN semantics (docs/language.md) ---------
// maximum/minimum propagate NaN (IEEE 754-2019 maximum), unlike fmaxf/fminf.
__device__ __forceinline__ float napkin_max(float a, float b) {
  return (a != a || b != b) ? NAPKIN_NAN : (a > b ? a : b);
}
__device__ __forceinline__ float napkin_min(float a, float b) {
  return (a != a || b != b) ? NAPKIN_NAN : (a < b ? a : b);
}
// The same maximum in one instruction where the GPU has it (max.NaN.f32, sm_80: one FMNMX, as
// fmaxf, which skips a NaN): a running row maximum that a NaN score makes NaN.
__device__ __forceinline__ float napkin_max_nan(float a, float b) {
#if !defined(NAPKIN_EMULATE) && __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return napkin_max(a, b);
#endif
}
__device__ __forceinline__ float napkin_relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
__device__ __forceinline__ float napkin_sigmoid(float x) {
  float z = expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + z) : z / (1.0f + z);
}
__device__ __forceinline__ float napkin_silu(float x) { return x * napkin_sigmoid(x); }
__device__ __forceinline__ float napkin_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
// Integer versions (no NaN), and the functions of language 1.1.
__device__ __forceinline__ long long napkin_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long napkin_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long napkin_relu(long long x) { return x > 0 ? x : 0; }
// Integer + - * and negation wrap around past the 64-bit range (docs/language.md), computed
// unsigned: signed overflow is undefined in C++ (UBSan's report, a compiler's assumption).
__device__ __forceinline__ long long napkin_iadd(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}
__device__ __forceinline__ long long napkin_isub(long long a, long long b) {
  return (long long)((unsigned long long)a - (unsigned long long)b);
}
__device__ __forceinline__ long long napkin_imul(long long a, long long b) {
  return (long long)((unsigned long long)a * (unsigned long long)b);
}
__device__ __forceinline__ long long napkin_ineg(long long a) { return napkin_isub(0, a); }
__device__ __forceinline__ long long napkin_abs(long long x) { return x < 0 ? napkin_ineg(x) : x; }
__device__ __forceinline__ float napkin_abs(float x) { return fabsf(x); }
// mod(a, b) takes the sign of b (Python's %); an integer mod 0 is 0, a float mod 0 NaN.
__device__ __forceinline__ long long napkin_mod(long long a, long long b) {
  if (b == 0 || b == -1) return 0;     // (-2^63 % -1 overflows: x86 traps, SIGFPE)
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ float napkin_mod(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : (r == 0.0f ? copysignf(0.0f, b) : r);
}
// argmax/argmin: fold (w, j) into the best value v and its position i. Ties go to the smaller
// position, a NaN beats every number (the first NaN wins); nothing seen: i is NAPKIN_NO_POSITION.
#define NAPKIN_NO_POSITION 9223372036854775807LL
__device__ __forceinline__ void napkin_argmax_fold(float& v, long long& i, float w, long long j) {
  if (w != w ? (v == v || j < i) : (v == v && (w > v || (w == v && j < i)))) { v = w; i = j; }
}
__device__ __forceinline__ void napkin_argmin_fold(float& v, long long& i, float w, long long j) {
  if (w != w ? (v == v || j < i) : (v == v && (w < v || (w == v && j < i)))) { v = w; i = j; }
}
// a // b rounds toward -inf (Python's //); an integer // 0 is 0.
__device__ __forceinline__ long long napkin_floordiv(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return napkin_ineg(a);  // (-2^63 / -1 overflows: x86 traps; it wraps to -2^63)
  long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ float napkin_floordiv(float a, float b) { return floorf(a / b); }
// A gathered position outside its axis reads the nearest row (the CPU backends raise an error).
__device__ __forceinline__ long long napkin_clamp_index(long long i, long long n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}
// A running maximum usable as a shift: -inf (nothing seen yet, or a fully masked row) gives 0.
__device__ __forceinline__ float napkin_shift(float m) { return m == -NAPKIN_INF ? 0.0f : m; }

// ---- merging partial states across the `width` lanes of a split (butterfly, width <= 32) -----
// The lanes of the caller's group of `width` (aligned, as a shuffle's width divides the
// warp): the mask of a merge inside a scan's prefix loop, which runs to each thread's own
// position: the group shares the trip count, the rest of the warp may not, and a full-warp
// mask would wait on lanes that never come (a hang on a GPU, undefined behaviour). Elsewhere
// the full mask (a computed mask costs the hot loops of attention: WARPSYNC and the mask).
__device__ __forceinline__ unsigned napkin_group_mask(int width) {
  return width >= 32 ? 0xffffffffu : ((1u << width) - 1u) << ((threadIdx.x % 32u) / width * width);
}
__device__ __forceinline__ float napkin_lanes_sum(float v, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o, width);
  return v;
}
__device__ __forceinline__ float napkin_lanes_max(float v, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) v = napkin_max(v, __shfl_xor_sync(mask, v, o, width));
  return v;
}
__device__ __forceinline__ float napkin_lanes_min(float v, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) v = napkin_min(v, __shfl_xor_sync(mask, v, o, width));
  return v;
}
// A running max and rescaled sum of exponentials (a logsumexp's, a softmax's statistics).
__device__ __forceinline__ void napkin_lanes_lse(float& m, float& s, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) {
    const float mo = __shfl_xor_sync(mask, m, o, width), so = __shfl_xor_sync(mask, s, o, width);
    const float mm = napkin_max(m, mo), sh = napkin_shift(mm);
    s = s * napkin_ex2((m - sh) * 1.442695f) + so * napkin_ex2((mo - sh) * 1.442695f);
    m = mm;
  }
}
// The block's least `lo` and greatest `hi` (each thread's own first): across each warp by
// shuffles, then across the warps through `red` (two per warp, shared memory); every thread
// of the block (whole warps, all of them here) gets both (codegen/masks.data_span).
__device__ __forceinline__ void napkin_block_range(long long& lo, long long& hi, long long* red) {
  for (int o = 16; o > 0; o /= 2) {
    lo = napkin_min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = napkin_max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const int w = (int)threadIdx.x / 32, warps = ((int)blockDim.x + 31) / 32;
  __syncthreads();                       // every warp has read an earlier call's values
  if (threadIdx.x % 32 == 0) { red[2 * w] = lo; red[2 * w + 1] = hi; }
  __syncthreads();
  for (int i = 0; i < warps; ++i) {
    lo = napkin_min(lo, red[2 * i]);
    hi = napkin_max(hi, red[2 * i + 1]);
  }
}
// The block's sum of one long long per thread, through `red` as napkin_block_range does.
__device__ __forceinline__ long long napkin_block_sum(long long v, long long* red) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = (int)threadIdx.x / 32, warps = ((int)blockDim.x + 31) / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[2 * w] = v;
  __syncthreads();
  long long total = 0;
  for (int i = 0; i < warps; ++i) total += red[2 * i];
  return total;
}
__device__ __forceinline__ void napkin_lanes_argmax(float& v, long long& i, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) {
    float w = __shfl_xor_sync(mask, v, o, width);
    long long j = __shfl_xor_sync(mask, i, o, width);
    napkin_argmax_fold(v, i, w, j);
  }
}
__device__ __forceinline__ void napkin_lanes_argmin(float& v, long long& i, int width, unsigned mask = 0xffffffffu) {
  for (int o = width / 2; o > 0; o /= 2) {
    float w = __shfl_xor_sync(mask, v, o, width);
    long long j = __shfl_xor_sync(mask, i, o, width);
    napkin_argmin_fold(v, i, w, j);
  }
}
__device__ __forceinline__ float napkin_lanes_get(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, 32);
}

#endif  // NAPKIN_PRELUDE_CUH
// ---- end of napkin prelude ---------------------------------------------------------------------
