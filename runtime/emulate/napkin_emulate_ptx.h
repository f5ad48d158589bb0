// napkin CPU emulator: the prelude helpers that are inline PTX on a GPU.
//
// codegen/prelude/napkin.cuh defines these with inline PTX when NAPKIN_EMULATE is
// not defined; here they are implemented from the PTX ISA's per-lane semantics.
// Every mma/ldmatrix is a warp collective: all 32 lanes meet, one computes, each
// receives its own fragment.
#pragma once

#include "napkin_emulate_warp.h"

// unsigned char* name = the block's dynamic shared memory (128-byte aligned,
// filled with 0xff bytes -- NaN for f32/f16/bf16 -- at each block start).
#define NAPKIN_DYNAMIC_SMEM(name) unsigned char* name = ::napkin_emu::dynamic_smem()

namespace napkin_emu {

// Defined in the runtime's translation unit only (as the warp collectives: napkin_emulate_warp.h).
#if defined(NAPKIN_EMULATE_RUNTIME)
NAPKIN_NO_TSAN void mma(Op op, float (&d)[4], const unsigned* a, int na, const unsigned* b, int nb,
                               const float (&c)[4], const char* file, int line) {
  Slot& s = warp_begin(op, kFullMask, file, line);
  for (int i = 0; i < na; ++i) s.in[i] = a[i];
  for (int i = 0; i < nb; ++i) s.in[4 + i] = b[i];
  for (int i = 0; i < 4; ++i) s.in[6 + i] = f32_bits(c[i]);
  warp_end(s);
  for (int i = 0; i < 4; ++i) d[i] = bits_f32(s.out[i]);
}

// Exchange row addresses; returns this lane's slot, whose rows[] say where its halves are.
NAPKIN_NO_TSAN const Slot& ldmatrix_rows(int num, bool trans, const void* row, const char* file, int line) {
  Slot& s = warp_begin(Op::Ldm, kFullMask, file, line);
  s.addr = static_cast<const unsigned char*>(row);
  s.arg = num | (trans ? 16 : 0);
  return warp_end(s);
}

#else
NAPKIN_NO_TSAN void mma(Op op, float (&d)[4], const unsigned* a, int na, const unsigned* b, int nb,
                        const float (&c)[4], const char* file, int line);
NAPKIN_NO_TSAN const Slot& ldmatrix_rows(int num, bool trans, const void* row, const char* file, int line);
#endif  // NAPKIN_EMULATE_RUNTIME

// The shared-memory reads themselves happen here, in the calling lane, so that
// ThreadSanitizer sees them.
template <int N>
inline void ldmatrix(unsigned (&r)[N], const void* row, bool trans, const char* file, int line) {
  const Slot& s = ldmatrix_rows(N, trans, row, file, line);
  for (int m = 0; m < N; ++m) {
    if (!trans) {
      memcpy(&r[m], s.rows[m], 4);
    } else {
      uint16_t lo, hi;
      memcpy(&lo, s.rows[2 * m], 2);
      memcpy(&hi, s.rows[2 * m + 1], 2);
      r[m] = unsigned(lo) | (unsigned(hi) << 16);
    }
  }
}

template <int CP>
inline void cp_async(void* smem, const void* gmem, int src_bytes, const char* file, int line) {
  Thread* t = tl_thread;
  if (src_bytes < 0 || src_bytes > CP)
    fail("%s:%d: cp.async of %d bytes with src-size %d (must be 0..%d)", file, line, CP, src_bytes, CP);
  if (reinterpret_cast<uintptr_t>(smem) % CP || (src_bytes > 0 && reinterpret_cast<uintptr_t>(gmem) % CP))
    fail("%s:%d: cp.async of %d bytes: addresses %p (shared) and %p (global) must be %d-byte aligned", file, line,
         CP, smem, gmem, CP);
  Block* b = tl_block;
  unsigned char* dst = static_cast<unsigned char*>(smem);
  if (dst >= b->smem && dst < b->smem + b->smem_bytes && dst + CP > b->smem + b->smem_bytes)
    fail("%s:%d: cp.async writes past the end of dynamic shared memory (%zu bytes)", file, line, b->smem_bytes);
#if NAPKIN_ASAN
  if (__asan_region_is_poisoned(smem, CP))
    fail("%s:%d: cp.async destination %p..+%d is not addressable shared memory", file, line, smem, CP);
#endif
  CpCopy c;
  c.dst = dst;
  c.group = t->committed;
  c.size = CP;
  memset(c.data, 0, sizeof c.data);
  if (src_bytes > 0) memcpy(c.data, gmem, size_t(src_bytes));  // the global read happens now
  cp_push(t, c);
}

}  // namespace napkin_emu

[[noreturn]] inline void napkin_misaligned_vector(const void* p, int align) {
  napkin_emu::fail("a %d-byte vector read or written at %p, an address %d does not divide (the GPU faults: "
       "misaligned address)", align, p, align);
}


inline void napkin_mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                    const float (&c)[4], const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  napkin_emu::mma(napkin_emu::Op::MmaF16, d, a, 4, b, 2, c, file, line);
}
inline void napkin_mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                     const float (&c)[4], const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
  napkin_emu::mma(napkin_emu::Op::MmaBF16, d, a, 4, b, 2, c, file, line);
}
inline void napkin_mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                    const float (&c)[4], const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  napkin_emu::mma(napkin_emu::Op::MmaTF32, d, a, 4, b, 2, c, file, line);
}

#define NAPKIN_LDMATRIX(NAME, N, TRANS)                                                           \
  inline void NAME(unsigned (&r)[N], const void* smem_row, const char* file = __builtin_FILE(), \
                   int line = __builtin_LINE()) {                                                 \
    napkin_emu::ldmatrix<N>(r, smem_row, TRANS, file, line);                                      \
  }
NAPKIN_LDMATRIX(napkin_ldmatrix_x1, 1, false)
NAPKIN_LDMATRIX(napkin_ldmatrix_x2, 2, false)
NAPKIN_LDMATRIX(napkin_ldmatrix_x4, 4, false)
NAPKIN_LDMATRIX(napkin_ldmatrix_x1_trans, 1, true)
NAPKIN_LDMATRIX(napkin_ldmatrix_x2_trans, 2, true)
NAPKIN_LDMATRIX(napkin_ldmatrix_x4_trans, 4, true)
#undef NAPKIN_LDMATRIX
#define NAPKIN_LDMATRIX_PAIR(NAME, TRANS)                                                         \
  inline void NAME(unsigned (&a)[2], unsigned (&b)[2], const void* smem_row,                      \
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {            \
    unsigned r[4];                                                                                \
    napkin_emu::ldmatrix<4>(r, smem_row, TRANS, file, line);                                      \
    a[0] = r[0];                                                                                  \
    a[1] = r[1];                                                                                  \
    b[0] = r[2];                                                                                  \
    b[1] = r[3];                                                                                  \
  }
NAPKIN_LDMATRIX_PAIR(napkin_ldmatrix_x4_pair, false)
NAPKIN_LDMATRIX_PAIR(napkin_ldmatrix_x4_pair_trans, true)
#undef NAPKIN_LDMATRIX_PAIR


inline void napkin_cp_async_16(void* smem, const void* gmem, int src_bytes = 16,
                               const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::cp_async<16>(smem, gmem, src_bytes, file, line);
}
inline void napkin_cp_async_8(void* smem, const void* gmem, int src_bytes = 8,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::cp_async<8>(smem, gmem, src_bytes, file, line);
}
inline void napkin_cp_async_4(void* smem, const void* gmem, int src_bytes = 4,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::cp_async<4>(smem, gmem, src_bytes, file, line);
}
inline void napkin_cp_async_commit() { ++napkin_emu::tl_thread->committed; }
// cp.async.wait_group N: every group but the N most recent is complete.
template <int N>
inline void napkin_cp_async_wait() {
  static_assert(N >= 0, "wait_group takes a non-negative count");
  napkin_emu::Thread* t = napkin_emu::tl_thread;
  napkin_emu::cp_land(t, t->committed - N);
}
inline void napkin_cp_async_wait_all() {
  napkin_cp_async_commit();
  napkin_cp_async_wait<0>();
}

// ex2.approx.ftz.f32: 2^x with subnormal results flushed to 0
inline float napkin_ex2(float x) {
  const float y = exp2f(x);
  return y < FLT_MIN ? 0.0f : y;
}
