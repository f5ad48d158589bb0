// napkin CPU emulator: CUDA keywords, vector types, __half / __nv_bfloat16, math.
//
// Part of the header that g++ force-includes (-include napkin_emulate.h) before
// a kernel's .cu text. Nothing here knows about threads; see napkin_emulate_fiber.h.
#pragma once

#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <bit>
#include <type_traits>

// ---- CUDA declaration specifiers -------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// __noinline__ is defined at the end of napkin_emulate.h: libstdc++ spells
// __attribute__((__noinline__)) and must be included first.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
#define __managed__
#define __grid_constant__
// Static shared memory: one copy per OS thread, and a block runs on one OS thread.
// (`extern __shared__` arrays are not supported: use NAPKIN_DYNAMIC_SMEM.)
#define __shared__ static thread_local constinit
// __restrict__ is already a g++ keyword.

constexpr int warpSize = 32;

// ---- vector types (CUDA alignments) ----------------------------------------
// A vector of 2 or 4 is read and written whole, as one LDG.64/.128 or STS.64/.128, which
// faults on the GPU at an address its alignment does not divide: its copies check that here
// (a misaligned 16-byte load is an error, not a silent unaligned read; napkin_emulate_ptx.h
// defines the failure).
[[noreturn]] inline void napkin_misaligned_vector(const void* p, int align);
inline void napkin_vector_at(const void* p, int align) {
  if (reinterpret_cast<uintptr_t>(p) % align) napkin_misaligned_vector(p, align);
}
#define NAPKIN_VEC_COPY(V, A, ...)                                                     \
  V() = default;                                                                       \
  V(const V& o) { napkin_vector_at(&o, A); __VA_ARGS__; }                              \
  V& operator=(const V& o) { napkin_vector_at(this, A); napkin_vector_at(&o, A);       \
                             __VA_ARGS__; return *this; }
#define NAPKIN_VEC(T, N, A1, A2, A3, A4)                                              \
  struct __align__(A1) N##1 { T x; };                                                  \
  struct __align__(A2) N##2 { T x, y;                                                  \
    constexpr N##2(T x_, T y_) : x(x_), y(y_) {}                                       \
    NAPKIN_VEC_COPY(N##2, A2, x = o.x; y = o.y) };                                     \
  struct __align__(A3) N##3 { T x, y, z; };                                            \
  struct __align__(A4) N##4 { T x, y, z, w;                                            \
    constexpr N##4(T x_, T y_, T z_, T w_) : x(x_), y(y_), z(z_), w(w_) {}             \
    NAPKIN_VEC_COPY(N##4, A4, x = o.x; y = o.y; z = o.z; w = o.w) };                   \
  inline N##1 make_##N##1(T x) { return N##1{x}; }                                     \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }                             \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }                     \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
NAPKIN_VEC(signed char, char, 1, 2, 1, 4)
NAPKIN_VEC(unsigned char, uchar, 1, 2, 1, 4)
NAPKIN_VEC(short, short, 2, 4, 2, 8)
NAPKIN_VEC(unsigned short, ushort, 2, 4, 2, 8)
NAPKIN_VEC(int, int, 4, 8, 4, 16)
NAPKIN_VEC(unsigned int, uint, 4, 8, 4, 16)
NAPKIN_VEC(long, long, 8, 16, 8, 16)
NAPKIN_VEC(unsigned long, ulong, 8, 16, 8, 16)
NAPKIN_VEC(long long, longlong, 8, 16, 8, 16)
NAPKIN_VEC(unsigned long long, ulonglong, 8, 16, 8, 16)
NAPKIN_VEC(float, float, 4, 8, 4, 16)
NAPKIN_VEC(double, double, 8, 16, 8, 16)
#undef NAPKIN_VEC
#undef NAPKIN_VEC_COPY

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- bit casts and float formats --------------------------------------------
namespace napkin_emu {

inline uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

// Round a double to float with round-to-odd, so that a later RNE rounding to a
// format with <= 22 significand bits is correctly rounded (no double rounding).
inline float f64_to_f32_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(f) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d))
    f = std::nextafter(f, 0.0f);
  uint32_t u = f32_bits(f) | 1u;
  return bits_f32(u);
}

// IEEE binary32 -> binary16, round to nearest even; NaN -> canonical 0x7fff.
inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return 0x7fffu;                // NaN
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x >= 0x38800000u) {                              // normal half
    uint32_t m = x - 0x38000000u;                      // rebias exponent 127 -> 15
    m += 0xfffu + ((m >> 13) & 1u);
    return uint16_t(sign | (m >> 13));
  }
  if (x <= 0x33000000u) return uint16_t(sign);         // <= 2^-25 rounds to zero
  uint32_t e = x >> 23;                                // 102..112
  uint32_t mant = (x & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e;                           // 14..24
  uint32_t k = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (k & 1u))) ++k;
  return uint16_t(sign | k);
}

inline float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = static_cast<float>(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

// binary32 -> bfloat16, round to nearest even; NaN -> canonical 0x7fff.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

}  // namespace napkin_emu

// ---- __half and __nv_bfloat16 -----------------------------------------------
#define NAPKIN_HALF_TYPE(H, TO, FROM)                                                  \
  struct __align__(2) H {                                                              \
    unsigned short __x;                                                                \
    H() = default;                                                                     \
    H(float f) : __x(napkin_emu::TO(f)) {}                                             \
    H(double d) : __x(napkin_emu::TO(napkin_emu::f64_to_f32_odd(d))) {}                \
    H(int i) : H(static_cast<double>(i)) {}                                            \
    H(unsigned int i) : H(static_cast<double>(i)) {}                                   \
    H(long i) : H(static_cast<double>(i)) {}                                           \
    H(unsigned long i) : H(static_cast<double>(i)) {}                                  \
    H(long long i) : H(static_cast<double>(i)) {}                                      \
    H(unsigned long long i) : H(static_cast<double>(i)) {}                             \
    H(short i) : H(static_cast<double>(i)) {}                                          \
    H(unsigned short i) : H(static_cast<double>(i)) {}                                 \
    operator float() const { return napkin_emu::FROM(__x); }                           \
    H& operator+=(H o) { return *this = H(float(*this) + float(o)); }                  \
    H& operator-=(H o) { return *this = H(float(*this) - float(o)); }                  \
    H& operator*=(H o) { return *this = H(float(*this) * float(o)); }                  \
    H& operator/=(H o) { return *this = H(float(*this) / float(o)); }                  \
  };                                                                                   \
  inline H operator+(H a, H b) { return H(float(a) + float(b)); }                      \
  inline H operator-(H a, H b) { return H(float(a) - float(b)); }                      \
  inline H operator*(H a, H b) { return H(float(a) * float(b)); }                      \
  inline H operator/(H a, H b) { return H(float(a) / float(b)); }                      \
  inline H operator-(H a) { H r; r.__x = uint16_t(a.__x ^ 0x8000u); return r; }       \
  inline H operator+(H a) { return a; }                                                \
  inline bool operator==(H a, H b) { return float(a) == float(b); }                    \
  inline bool operator!=(H a, H b) { return float(a) != float(b); }                    \
  inline bool operator<(H a, H b) { return float(a) < float(b); }                      \
  inline bool operator>(H a, H b) { return float(a) > float(b); }                      \
  inline bool operator<=(H a, H b) { return float(a) <= float(b); }                    \
  inline bool operator>=(H a, H b) { return float(a) >= float(b); }
NAPKIN_HALF_TYPE(__half, f32_to_f16_bits, f16_bits_to_f32)
NAPKIN_HALF_TYPE(__nv_bfloat16, f32_to_bf16_bits, bf16_bits_to_f32)
#undef NAPKIN_HALF_TYPE

struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
using half = __half;
using half2 = __half2;
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2 && sizeof(__half2) == 4);

inline float __half2float(__half h) { return napkin_emu::f16_bits_to_f32(h.__x); }
inline __half __float2half_rn(float f) { __half h; h.__x = napkin_emu::f32_to_f16_bits(f); return h; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half __double2half(double d) { return __half(d); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline __half __short_as_half(short u) { __half h; h.__x = static_cast<unsigned short>(u); return h; }
inline float __bfloat162float(__nv_bfloat16 h) { return napkin_emu::bf16_bits_to_f32(h.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16 h; h.__x = napkin_emu::f32_to_bf16_bits(f); return h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return static_cast<short>(h.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
inline __nv_bfloat16 __short_as_bfloat16(short u) { __nv_bfloat16 h; h.__x = static_cast<unsigned short>(u); return h; }

inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
inline __half2 __float2half2_rn(float a) { return __floats2half2_rn(a, a); }
inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hdiv(__half a, __half b) { return a / b; }
inline __half __hneg(__half a) { return -a; }
inline __half __hfma(__half a, __half b, __half c) {
  return __half(static_cast<double>(float(a)) * float(b) + float(c));
}
inline __half __hmax(__half a, __half b) { return __float2half_rn(fmaxf(float(a), float(b))); }
inline __half __hmin(__half a, __half b) { return __float2half_rn(fminf(float(a), float(b))); }
inline bool __hisnan(__half a) { return std::isnan(float(a)); }
inline bool __hisinf(__half a) { return std::isinf(float(a)); }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16_rn(fmaxf(float(a), float(b))); }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16_rn(fminf(float(a), float(b))); }
inline bool __hisnan(__nv_bfloat16 a) { return std::isnan(float(a)); }

// ---- reinterpretation and conversion intrinsics ------------------------------
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __uint_as_float(unsigned int i) { return std::bit_cast<float>(i); }
inline unsigned int __float_as_uint(float f) { return std::bit_cast<unsigned int>(f); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline int __float2int_rn(float f) { return static_cast<int>(nearbyintf(f)); }
inline int __float2int_rz(float f) { return static_cast<int>(truncf(f)); }
inline int __float2int_rd(float f) { return static_cast<int>(floorf(f)); }
inline int __float2int_ru(float f) { return static_cast<int>(ceilf(f)); }
inline unsigned int __float2uint_rn(float f) { return static_cast<unsigned int>(nearbyintf(f)); }
inline unsigned int __float2uint_rz(float f) { return static_cast<unsigned int>(truncf(f)); }
inline float __int2float_rn(int i) { return static_cast<float>(i); }
inline float __uint2float_rn(unsigned int i) { return static_cast<float>(i); }

// ---- math the host lacks ------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return std::fmax(C(a), C(b));
  else return C(a) > C(b) ? C(a) : C(b);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return std::fmin(C(a), C(b));
  else return C(a) < C(b) ? C(a) : C(b);
}
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }

// ---- integer intrinsics ---------------------------------------------------------
inline int __popc(unsigned int x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) { return std::countl_zero(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return x ? std::countr_zero(static_cast<unsigned int>(x)) + 1 : 0; }
inline int __ffsll(long long x) { return x ? std::countr_zero(static_cast<unsigned long long>(x)) + 1 : 0; }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32); }
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64); }
inline int __mul24(int a, int b) {
  long long x = ((a & 0xffffff) ^ 0x800000) - 0x800000, y = ((b & 0xffffff) ^ 0x800000) - 0x800000;
  return static_cast<int>(static_cast<unsigned int>(x * y));
}
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned int>((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s) {
  unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (s & 31u)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s) {
  unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (s & 31u));
}

// ---- cache-hinted loads and stores: plain memory accesses here -------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
