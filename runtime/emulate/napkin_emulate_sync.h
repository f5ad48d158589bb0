// napkin CPU emulator: __syncthreads, cp.async bookkeeping, fences, atomics.
#pragma once

#include "napkin_emulate_fiber.h"

#include <time.h>

namespace napkin_emu {

// ---- cp.async (per-thread groups) ----------------------------------------------
// A copy reads global memory when it is issued (napkin_emulate_ptx.h) but writes
// shared memory only at the issuing thread's wait_group; copies never waited for
// never land. A kernel that reads before waiting sees the old contents.

// Defined in the runtime's translation unit only (as the warp collectives: napkin_emulate_warp.h).
#if defined(NAPKIN_EMULATE_RUNTIME)
// The shared-memory write, instrumented so that ThreadSanitizer sees it (at the wait).
__attribute__((noinline)) void cp_write(unsigned char* dst, const unsigned char* data, int size) {
  memcpy(dst, data, size_t(size));
}

NAPKIN_NO_TSAN void cp_push(Thread* t, const CpCopy& c) {
  if (t->ncp == t->cpcap) {
    t->cpcap = t->cpcap ? 2 * t->cpcap : 16;
    t->cp = static_cast<CpCopy*>(realloc(t->cp, sizeof(CpCopy) * size_t(t->cpcap)));
    if (!t->cp) fail("out of memory for cp.async copies");
  }
  t->cp[t->ncp++] = c;
}

// A landed copy into dynamic shared memory is marked as a generic-proxy write its thread
// has not yet fenced for the async proxy (Block::cp_marks; wgmma reads check it).
NAPKIN_NO_TSAN void cp_land(Thread* t, long long below_group) {
  Block* b = t->block;
  const uint64_t mark = (uint64_t(t->linear) + 1) << 32 | t->proxy_fences;
  int keep = 0;
  for (int i = 0; i < t->ncp; ++i) {
    const CpCopy c = t->cp[i];
    if (c.group >= below_group) {
      t->cp[keep++] = c;
      continue;
    }
    cp_write(c.dst, c.data, c.size);
    if (b->cp_marks && c.dst >= b->smem && c.dst < b->smem + b->smem_bytes)
      for (size_t w = size_t(c.dst - b->smem) / 4; w < size_t(c.dst - b->smem + c.size) / 4; ++w)
        b->cp_marks[w] = mark;
  }
  t->ncp = keep;
}

// ---- barriers -------------------------------------------------------------------
NAPKIN_NO_TSAN int barrier(int pred, const char* file, int line) {
  Thread* t = tl_thread;
  Block* b = tl_block;
  t->state = St::Barrier;
  t->file = file;
  t->line = line;
  t->pred = pred != 0;
  tsan_release(&t->tok_arrive);
  yield(t, b);
  tsan_acquire(&t->tok_resume);
  return b->bar_result;
}

#else
NAPKIN_NO_TSAN void cp_push(Thread* t, const CpCopy& c);
NAPKIN_NO_TSAN void cp_land(Thread* t, long long below_group);
NAPKIN_NO_TSAN int barrier(int pred, const char* file, int line);
#endif  // NAPKIN_EMULATE_RUNTIME

}  // namespace napkin_emu

// ---- synchronization ------------------------------------------------------------------
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::barrier(1, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return napkin_emu::barrier(pred, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return napkin_emu::barrier(pred, file, line) == napkin_emu::tl_block->nthreads;
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return napkin_emu::barrier(pred, file, line) != 0;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::fail("%s:%d: __trap() called", file, line);
}
inline void __nanosleep(unsigned) {}
inline long long clock64() {
  timespec t;   // (steady_clock's source, without <chrono>)
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

// ---- atomics: real atomics, shared by every OS thread -------------------------------------
namespace napkin_emu {
// std::atomic_ref's operations on GCC's __atomic builtins (what libstdc++ implements it with,
// and what ThreadSanitizer intercepts): <atomic> alone made every kernel's build load a
// precompiled header twice as large.
constexpr int kOrder = __ATOMIC_ACQ_REL;
constexpr int kRelaxed = __ATOMIC_RELAXED;
template <class T> struct AtomicRef {
  T* p;
  T load(int order) const { T v; __atomic_load(p, &v, order); return v; }
  bool compare_exchange_weak(T& expected, T desired, int ok, int failed) {
    return __atomic_compare_exchange(p, &expected, &desired, true, ok, failed);
  }
  bool compare_exchange_strong(T& expected, T desired, int ok, int failed) {
    return __atomic_compare_exchange(p, &expected, &desired, false, ok, failed);
  }
  T exchange(T v, int order) { T old; __atomic_exchange(p, &v, &old, order); return old; }
  T fetch_add(T v, int order) {
    if constexpr (std::is_integral_v<T>) {
      return __atomic_fetch_add(p, v, order);
    } else {    // floating point: a compare-and-swap loop, as libstdc++'s atomic_ref<float>
      T old = load(kRelaxed);
      while (!compare_exchange_weak(old, T(old + v), order, kRelaxed)) {}
      return old;
    }
  }
  T fetch_sub(T v, int order) { return __atomic_fetch_sub(p, v, order); }
  T fetch_and(T v, int order) { return __atomic_fetch_and(p, v, order); }
  T fetch_or(T v, int order) { return __atomic_fetch_or(p, v, order); }
  T fetch_xor(T v, int order) { return __atomic_fetch_xor(p, v, order); }
};
template <class T> inline AtomicRef<T> aref(T* p) { return AtomicRef<T>{p}; }
template <class T, class F> inline T atomic_update(T* p, F f) {
  auto a = aref(p);
  T old = a.load(kRelaxed);
  while (!a.compare_exchange_weak(old, f(old), kOrder, kRelaxed)) {}
  return old;
}
}  // namespace napkin_emu

#define NAPKIN_ATOMIC_ADD(T)                                                                     \
  inline T atomicAdd(T* p, T v) { return napkin_emu::aref(p).fetch_add(v, napkin_emu::kOrder); } \
  inline T atomicAdd_block(T* p, T v) { return atomicAdd(p, v); }                               \
  inline T atomicAdd_system(T* p, T v) { return atomicAdd(p, v); }
NAPKIN_ATOMIC_ADD(int)
NAPKIN_ATOMIC_ADD(unsigned int)
NAPKIN_ATOMIC_ADD(unsigned long long)
NAPKIN_ATOMIC_ADD(float)
NAPKIN_ATOMIC_ADD(double)
#undef NAPKIN_ATOMIC_ADD
inline int atomicSub(int* p, int v) { return napkin_emu::aref(p).fetch_sub(v, napkin_emu::kOrder); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return napkin_emu::aref(p).fetch_sub(v, napkin_emu::kOrder); }
#define NAPKIN_ATOMIC_BITS(T)                                                                               \
  inline T atomicExch(T* p, T v) { return napkin_emu::aref(p).exchange(v, napkin_emu::kOrder); }            \
  inline T atomicAnd(T* p, T v) { return napkin_emu::aref(p).fetch_and(v, napkin_emu::kOrder); }            \
  inline T atomicOr(T* p, T v) { return napkin_emu::aref(p).fetch_or(v, napkin_emu::kOrder); }              \
  inline T atomicXor(T* p, T v) { return napkin_emu::aref(p).fetch_xor(v, napkin_emu::kOrder); }            \
  inline T atomicCAS(T* p, T cmp, T v) {                                                                    \
    napkin_emu::aref(p).compare_exchange_strong(cmp, v, napkin_emu::kOrder, napkin_emu::kRelaxed);          \
    return cmp;                                                                                             \
  }
NAPKIN_ATOMIC_BITS(int)
NAPKIN_ATOMIC_BITS(unsigned int)
NAPKIN_ATOMIC_BITS(unsigned long long)
#undef NAPKIN_ATOMIC_BITS
inline float atomicExch(float* p, float v) { return napkin_emu::aref(p).exchange(v, napkin_emu::kOrder); }
#define NAPKIN_ATOMIC_MINMAX(T)                                                                         \
  inline T atomicMax(T* p, T v) { return napkin_emu::atomic_update(p, [v](T o) { return o > v ? o : v; }); } \
  inline T atomicMin(T* p, T v) { return napkin_emu::atomic_update(p, [v](T o) { return o < v ? o : v; }); }
NAPKIN_ATOMIC_MINMAX(int)
NAPKIN_ATOMIC_MINMAX(unsigned int)
NAPKIN_ATOMIC_MINMAX(long long)
NAPKIN_ATOMIC_MINMAX(unsigned long long)
#undef NAPKIN_ATOMIC_MINMAX
inline unsigned atomicInc(unsigned* p, unsigned v) {
  return napkin_emu::atomic_update(p, [v](unsigned o) { return o >= v ? 0u : o + 1u; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
  return napkin_emu::atomic_update(p, [v](unsigned o) { return (o == 0 || o > v) ? v : o - 1u; });
}
