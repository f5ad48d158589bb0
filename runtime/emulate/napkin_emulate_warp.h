// napkin CPU emulator: warp collectives -- shuffles, votes, reductions, and the
// exchange behind mma.sync and ldmatrix (napkin_emulate_ptx.h).
#pragma once

#include "napkin_emulate_sync.h"

namespace napkin_emu {

// ---- warp collectives -------------------------------------------------------------
// Defined in the runtime's translation unit only (napkin_emulate_runtime.cpp defines
// NAPKIN_EMULATE_RUNTIME): a kernel's build declares them and links runtime.o, instead of
// compiling them again in every kernel's build.
#if defined(NAPKIN_EMULATE_RUNTIME)
NAPKIN_NO_TSAN Slot& warp_begin(Op op, unsigned mask, const char* file, int line) {
  Thread* t = tl_thread;
  if (((mask >> t->lane) & 1u) == 0)
    fail("%s:%d: %s with mask 0x%08x does not name the calling lane %d", file, line, op_name(op), mask, t->lane);
  Slot& s = t->slot;
  s.op = op;
  s.mask = mask;
  s.file = file;
  s.line = line;
  s.width = 32;
  s.arg = 0;
  return s;
}

NAPKIN_NO_TSAN void lane_src_check(const Slot& s, int lane, int src, Thread* const* lanes) {
  if (!lanes[src])
    fail("%s:%d: %s (mask 0x%08x): lane %d reads lane %d, which does not take part", s.file, s.line,
         op_name(s.op), s.mask, lane, src);
}

double tf32_value(uint32_t u) {
  float f = bits_f32(u);
  if (std::isnan(f)) return f;
  return bits_f32(u & 0xffffe000u);  // the tensor core reads 10 mantissa bits
}

// D = A*B + C for one warp: fragments as laid out in the PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type" and "for mma.m16n8k8"
// (.tf32). Products and sums in double, rounded once to float.
NAPKIN_NO_TSAN void mma_compute(Op op, Thread* const* lanes) {
  const int K = op == Op::MmaTF32 ? 8 : 16;
  double A[16][16] = {}, B[16][8] = {}, C[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    const Slot& s = lanes[l]->slot;
    const int g = l >> 2, q = l & 3;
    if (op == Op::MmaTF32) {
      for (int i = 0; i < 4; ++i) {
        int row = (i == 0 || i == 2) ? g : g + 8;
        int col = i < 2 ? q : q + 4;
        A[row][col] = tf32_value(s.in[i]);
      }
      for (int i = 0; i < 2; ++i) B[i == 0 ? q : q + 4][g] = tf32_value(s.in[4 + i]);
    } else {
      auto half = [&](uint32_t reg, int i) -> double {
        uint16_t h = uint16_t(reg >> (16 * (i & 1)));
        return op == Op::MmaF16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
      };
      for (int i = 0; i < 8; ++i) {
        int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
        int col = q * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        A[row][col] = half(s.in[i / 2], i);
      }
      for (int i = 0; i < 4; ++i) {
        int row = q * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        B[row][g] = half(s.in[4 + i / 2], i);
      }
    }
    for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][q * 2 + (i & 1)] = bits_f32(s.in[6 + i]);
  }
  for (int l = 0; l < 32; ++l) {
    Slot& s = lanes[l]->slot;
    const int g = l >> 2, q = l & 3;
    for (int i = 0; i < 4; ++i) {
      int row = g + (i >= 2 ? 8 : 0), col = q * 2 + (i & 1);
      double acc = C[row][col];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][col];
      s.out[i] = f32_bits(static_cast<float>(acc));
    }
  }
}

// ldmatrix (PTX ISA "Warp-level matrix load instruction: ldmatrix"): lanes 8m..8m+7
// give the row addresses of matrix m; lane t receives row t/4, columns 2(t%4) and
// 2(t%4)+1 (or, with .trans, column t/4 of rows 2(t%4) and 2(t%4)+1).
NAPKIN_NO_TSAN void ldm_compute(Thread* const* lanes, int num, bool trans) {
  const Slot& s0 = lanes[0]->slot;
  for (int r = 0; r < 8 * num; ++r) {
    const unsigned char* a = lanes[r]->slot.addr;
    if (!a || (reinterpret_cast<uintptr_t>(a) & 15u))
      fail("%s:%d: ldmatrix .x%d: row address %p given by lane %d is not 16-byte aligned", s0.file, s0.line,
           num, static_cast<const void*>(a), r);
  }
  for (int l = 0; l < 32; ++l) {
    Slot& s = lanes[l]->slot;
    const int g = l >> 2, q = l & 3;
    for (int m = 0; m < num; ++m) {
      if (!trans) {
        s.rows[m] = lanes[8 * m + g]->slot.addr + 4 * q;
      } else {
        s.rows[2 * m] = lanes[8 * m + 2 * q]->slot.addr + 2 * g;
        s.rows[2 * m + 1] = lanes[8 * m + 2 * q + 1]->slot.addr + 2 * g;
      }
    }
  }
}

NAPKIN_NO_TSAN void wgmma_complete(Thread* const* lanes, int pending);  // napkin_emulate_wgmma.h

NAPKIN_NO_TSAN void warp_compute(Thread* me, Thread* const* lanes) {
  const Slot& ms = me->slot;
  const Op op = ms.op;
  if (op == Op::WgWait) {
    for (int l = 0; l < 32; ++l)
      if (!lanes[l]) fail("%s:%d: %s needs all 32 lanes of the warp; lane %d does not exist", ms.file, ms.line, op_name(op), l);
    wgmma_complete(lanes, ms.arg);
    return;
  }
  if (op == Op::MmaF16 || op == Op::MmaBF16 || op == Op::MmaTF32 || op == Op::Ldm) {
    for (int l = 0; l < 32; ++l)
      if (!lanes[l]) fail("%s:%d: %s needs all 32 lanes of the warp; lane %d does not exist", ms.file, ms.line, op_name(op), l);
    if (op == Op::Ldm) ldm_compute(lanes, ms.arg & 7, (ms.arg >> 4) & 1);
    else mma_compute(op, lanes);
    return;
  }
  uint64_t ballot = 0, present = 0;
  for (int l = 0; l < 32; ++l)
    if (lanes[l]) {
      present |= 1ull << l;
      if (lanes[l]->slot.value) ballot |= 1ull << l;
    }
  switch (op) {
    case Op::Sync: return;
    case Op::Ballot:
    case Op::Any:
    case Op::All:
      for (int l = 0; l < 32; ++l)
        if (lanes[l])
          lanes[l]->slot.result = op == Op::Ballot ? ballot : op == Op::Any ? ballot != 0 : ballot == present;
      return;
    case Op::Idx:
    case Op::Up:
    case Op::Down:
    case Op::Xor:
      for (int l = 0; l < 32; ++l) {
        if (!lanes[l]) continue;
        Slot& s = lanes[l]->slot;
        const int w = s.width;
        if (w < 1 || w > 32 || (w & (w - 1)))
          fail("%s:%d: %s: width %d is not a power of two in [1, 32]", s.file, s.line, op_name(op), w);
        const int seg = l & ~(w - 1), last = seg + w - 1;
        int src = l;
        bool ok = true;
        if (op == Op::Idx) src = seg | (s.arg & (w - 1));
        else if (op == Op::Up) { src = l - int(unsigned(s.arg) & 31u); ok = src >= seg && unsigned(s.arg) < 32u; }
        else if (op == Op::Down) { src = l + int(unsigned(s.arg) & 31u); ok = src <= last && unsigned(s.arg) < 32u; }
        else { src = l ^ (s.arg & 31); ok = src <= last; }
        if (!ok) src = l;
        lane_src_check(s, l, src, lanes);
        s.result = lanes[src]->slot.value;
      }
      return;
    default: {
      uint64_t acc = 0;
      bool first = true;
      for (int l = 0; l < 32; ++l) {
        if (!lanes[l]) continue;
        uint32_t v = uint32_t(lanes[l]->slot.value);
        uint32_t a = uint32_t(acc);
        if (first) { a = v; first = false; }
        else switch (op) {
          case Op::RedAdd: a += v; break;
          case Op::RedMin: a = uint32_t(std::min(int32_t(a), int32_t(v))); break;
          case Op::RedMax: a = uint32_t(std::max(int32_t(a), int32_t(v))); break;
          case Op::RedUMin: a = std::min(a, v); break;
          case Op::RedUMax: a = std::max(a, v); break;
          case Op::RedAnd: a &= v; break;
          case Op::RedOr: a |= v; break;
          case Op::RedXor: a ^= v; break;
          default: break;
        }
        acc = a;
      }
      for (int l = 0; l < 32; ++l)
        if (lanes[l]) lanes[l]->slot.result = acc;
      return;
    }
  }
}

// Complete the collective `me` waits in if every lane of its mask has arrived.
NAPKIN_NO_TSAN bool warp_try_complete(Block* b, Thread* me) {
  const Slot& ms = me->slot;
  Thread* lanes[32] = {};
  const int base = me->warp * 32;
  for (int l = 0; l < 32; ++l) {
    if (!((ms.mask >> l) & 1u) || base + l >= b->nthreads) continue;
    Thread* o = b->threads[base + l];
    if (o->state == St::Exited)
      fail("%s:%d: %s with mask 0x%08x: lane %d (thread (%u,%u,%u)) has already exited", ms.file, ms.line,
           op_name(ms.op), ms.mask, l, o->tid.x, o->tid.y, o->tid.z);
    if (o->state != St::Warp) return false;
    if (o->slot.op != ms.op || o->slot.mask != ms.mask)
      fail("mismatched warp collectives: lane %d is in %s (mask 0x%08x) at %s:%d while lane %d is in %s "
           "(mask 0x%08x) at %s:%d", me->lane, op_name(ms.op), ms.mask, ms.file, ms.line, l,
           op_name(o->slot.op), o->slot.mask, o->slot.file, o->slot.line);
    lanes[l] = o;
  }
  for (int l = 0; l < 32; ++l)
    if (lanes[l]) tsan_acquire(&lanes[l]->tok_arrive);
  warp_compute(me, lanes);
  for (int l = 0; l < 32; ++l) {
    if (!lanes[l] || lanes[l] == me) continue;
    tsan_release(&lanes[l]->tok_resume);
    lanes[l]->state = St::Ready;
  }
  me->state = St::Running;
  return true;
}

NAPKIN_NO_TSAN Slot& warp_end(Slot& s) {
  Thread* t = tl_thread;
  Block* b = tl_block;
  t->state = St::Warp;
  tsan_release(&t->tok_arrive);
  if (!warp_try_complete(b, t)) {
    yield(t, b);
    tsan_acquire(&t->tok_resume);
  }
  return s;
}

// A shuffle's or vote's whole exchange: the kernel's build (often -O0) only calls it.
NAPKIN_NO_TSAN uint64_t exchange(Op op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                                 int line) {
  Slot& s = warp_begin(op, mask, file, line);
  s.value = value;
  s.arg = arg;
  s.width = width;
  return warp_end(s).result;
}

#else
NAPKIN_NO_TSAN uint64_t exchange(Op op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                                 int line);
NAPKIN_NO_TSAN Slot& warp_begin(Op op, unsigned mask, const char* file, int line);
NAPKIN_NO_TSAN void lane_src_check(const Slot& s, int lane, int src, Thread* const* lanes);
double tf32_value(uint32_t u);
NAPKIN_NO_TSAN void mma_compute(Op op, Thread* const* lanes);
NAPKIN_NO_TSAN void ldm_compute(Thread* const* lanes, int num, bool trans);
NAPKIN_NO_TSAN void warp_compute(Thread* me, Thread* const* lanes);
NAPKIN_NO_TSAN bool warp_try_complete(Block* b, Thread* me);
NAPKIN_NO_TSAN Slot& warp_end(Slot& s);
#endif  // NAPKIN_EMULATE_RUNTIME
// (inlined even at -O0: a kernel's shuffles are most of what its build leaves unoptimised)
template <class T>
__attribute__((always_inline)) inline uint64_t to_u64(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t u = 0;
  __builtin_memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
__attribute__((always_inline)) inline T from_u64(uint64_t u) {
  T v;
  __builtin_memcpy(&v, &u, sizeof(T));
  return v;
}

template <class T>
__attribute__((always_inline)) inline T shuffle(Op op, unsigned mask, T var, int arg, int width,
                                                const char* file, int line) {
  return from_u64<T>(exchange(op, mask, to_u64(var), arg, width, file, line));
}

__attribute__((always_inline)) inline uint64_t vote(Op op, unsigned mask, uint64_t value, const char* file,
                                                    int line) {
  return exchange(op, mask, value, 0, 32, file, line);
}

// Lanes run one after another here, so which lanes are "active" (converged) at a
// point is not observable; __activemask() reports every lane the warp has, which
// is right for converged code (its common use).
NAPKIN_NO_TSAN inline unsigned active_mask() {
  const int first = tl_thread->warp * 32, lanes = std::min(32, tl_block->nthreads - first);
  return lanes >= 32 ? kFullMask : (1u << lanes) - 1u;
}

}  // namespace napkin_emu

inline void __syncwarp(unsigned mask = napkin_emu::kFullMask, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  napkin_emu::vote(napkin_emu::Op::Sync, mask, 0, file, line);
}

// ---- warp shuffles and votes ---------------------------------------------------------------
// (always inlined, at -O0 too: the call left is the runtime's exchange)
template <class T>
__attribute__((always_inline)) inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
                                                    const char* file = __builtin_FILE(),
                                                    int line = __builtin_LINE()) {
  return napkin_emu::shuffle(napkin_emu::Op::Idx, mask, var, srcLane, width, file, line);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta,
                                                       int width = warpSize, const char* file = __builtin_FILE(),
                                                       int line = __builtin_LINE()) {
  return napkin_emu::shuffle(napkin_emu::Op::Up, mask, var, int(delta), width, file, line);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta,
                                                         int width = warpSize, const char* file = __builtin_FILE(),
                                                         int line = __builtin_LINE()) {
  return napkin_emu::shuffle(napkin_emu::Op::Down, mask, var, int(delta), width, file, line);
}
template <class T>
__attribute__((always_inline)) inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                                                        const char* file = __builtin_FILE(),
                                                        int line = __builtin_LINE()) {
  return napkin_emu::shuffle(napkin_emu::Op::Xor, mask, var, laneMask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return unsigned(napkin_emu::vote(napkin_emu::Op::Ballot, mask, pred != 0, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return int(napkin_emu::vote(napkin_emu::Op::Any, mask, pred != 0, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return int(napkin_emu::vote(napkin_emu::Op::All, mask, pred != 0, file, line));
}
inline unsigned __activemask() { return napkin_emu::active_mask(); }
#define NAPKIN_REDUCE(NAME, T, OP)                                                                 \
  inline T NAME(unsigned mask, T v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) { \
    return T(uint32_t(napkin_emu::vote(napkin_emu::Op::OP, mask, uint32_t(v), file, line)));     \
  }
NAPKIN_REDUCE(__reduce_add_sync, unsigned, RedAdd)
NAPKIN_REDUCE(__reduce_add_sync, int, RedAdd)
NAPKIN_REDUCE(__reduce_min_sync, unsigned, RedUMin)
NAPKIN_REDUCE(__reduce_min_sync, int, RedMin)
NAPKIN_REDUCE(__reduce_max_sync, unsigned, RedUMax)
NAPKIN_REDUCE(__reduce_max_sync, int, RedMax)
NAPKIN_REDUCE(__reduce_and_sync, unsigned, RedAnd)
NAPKIN_REDUCE(__reduce_or_sync, unsigned, RedOr)
NAPKIN_REDUCE(__reduce_xor_sync, unsigned, RedXor)
#undef NAPKIN_REDUCE
