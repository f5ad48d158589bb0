// napkin CPU emulator: a block's threads as fibers; errors; the built-in variables.
//
// Execution model. A block runs on one OS thread; each CUDA thread of the block is
// a fiber with its own stack. A fiber runs until it reaches __syncthreads, a warp
// collective or its end, then switches back to the block's scheduler
// (napkin_emulate_runtime.cpp). A warp collective completes when every lane named
// in its mask has arrived; the last lane to arrive computes every lane's result.
// A barrier releases when every thread of the block waits at the same
// __syncthreads; anything else (some threads exited, two different barrier sites,
// a warp collective that can never complete) is reported with its source line.
//
// Sanitizers. Fiber switches are announced to AddressSanitizer
// (__sanitizer_{start,finish}_switch_fiber) and ThreadSanitizer (one TSan fiber per
// CUDA thread, switched with no_sync so that switching implies no ordering). Only
// the CUDA semantics order threads for TSan: a thread releases its own token when it
// arrives at a barrier or warp collective; whoever completes it (the scheduler, or
// the last lane) acquires every participant's token and releases each one's resume
// token, which the participant acquires when it resumes. Per-thread tokens keep a
// fast thread's work after the barrier out of a slow thread's view of it. The
// block's start and end are ordered the same way. The emulator's own bookkeeping
// is compiled without TSan instrumentation (NAPKIN_NO_TSAN).
#pragma once

#include "napkin_emulate_types.h"

// Only what the kernel side needs: every kernel's build loads these headers (precompiled),
// and each standard header makes that load slower (<atomic>, <thread>, <chrono> and the
// containers were 2/3 of the 65 MB precompiled header); the runtime's own includes are in
// napkin_emulate_runtime.cpp.
#include <cstdarg>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define NAPKIN_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define NAPKIN_TSAN 1
#define NAPKIN_NO_TSAN __attribute__((no_sanitize_thread, noinline))
#else
#define NAPKIN_NO_TSAN
#endif

namespace napkin_emu {

#if NAPKIN_TSAN
inline void tsan_release(void* p) { __tsan_release(p); }
inline void tsan_acquire(void* p) { __tsan_acquire(p); }
#else
inline void tsan_release(void*) {}
inline void tsan_acquire(void*) {}
#endif

constexpr unsigned kFullMask = 0xffffffffu;

enum class St : uint8_t { Ready, Running, Barrier, Warp, Exited };

enum class Op : uint8_t {
  Sync, Idx, Up, Down, Xor, Ballot, Any, All,
  RedAdd, RedMin, RedMax, RedUMin, RedUMax, RedAnd, RedOr, RedXor,
  MmaF16, MmaBF16, MmaTF32, Ldm, WgWait,
};

const char* op_name(Op op);
#if defined(NAPKIN_EMULATE_RUNTIME)   // (defined in the runtime's translation unit only)
const char* op_name(Op op) {
  switch (op) {
    case Op::Sync: return "__syncwarp";
    case Op::Idx: return "__shfl_sync";
    case Op::Up: return "__shfl_up_sync";
    case Op::Down: return "__shfl_down_sync";
    case Op::Xor: return "__shfl_xor_sync";
    case Op::Ballot: return "__ballot_sync";
    case Op::Any: return "__any_sync";
    case Op::All: return "__all_sync";
    case Op::RedAdd: return "__reduce_add_sync";
    case Op::RedMin: case Op::RedUMin: return "__reduce_min_sync";
    case Op::RedMax: case Op::RedUMax: return "__reduce_max_sync";
    case Op::RedAnd: return "__reduce_and_sync";
    case Op::RedOr: return "__reduce_or_sync";
    case Op::RedXor: return "__reduce_xor_sync";
    case Op::MmaF16: return "mma.sync.m16n8k16.f16";
    case Op::MmaBF16: return "mma.sync.m16n8k16.bf16";
    case Op::MmaTF32: return "mma.sync.m16n8k8.tf32";
    case Op::Ldm: return "ldmatrix";
    case Op::WgWait: return "wgmma.wait_group";
  }
  return "?";
}
#endif

// One lane's part in a warp collective: inputs posted on arrival, outputs
// written by the lane that completes the collective.
struct Slot {
  Op op = Op::Sync;
  unsigned mask = 0;
  int width = 32;
  int arg = 0;
  const char* file = "";
  int line = 0;
  uint64_t value = 0, result = 0;
  uint32_t in[10] = {};   // mma: a[0..3], b[4..5], c[6..9]
  uint32_t out[4] = {};   // mma: d
  const unsigned char* addr = nullptr;   // ldmatrix: this lane's row address
  const unsigned char* rows[8] = {};     // ldmatrix: where this lane's halves come from
};

struct CpCopy {
  unsigned char* dst;
  long long group;
  int size;
  unsigned char data[16];
};

// One wgmma.mma_async a thread issued and no wgmma.wait_group has completed yet
// (napkin_emulate_wgmma.h): the product runs, reading shared memory and the
// accumulator, when a wait_group completes its group.
struct WgOp {
  float* d;                 // this lane's accumulator registers (n / 2 floats)
  uint64_t da, db;          // the matrix descriptors
  long long group;          // the commit group it belongs to
  const char* file;
  int line;
  short n;
  uint8_t bf16, ta, tb, scale_d;
};

struct Block;

struct Thread {
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  St state = St::Exited;
  const char* file = "";   // barrier the thread waits at
  int line = 0;
  int pred = 0;
  Slot slot;
  CpCopy* cp = nullptr;    // cp.async copies in flight (malloc'd; ncp of cpcap used)
  int ncp = 0, cpcap = 0;
  long long committed = 0; // cp.async groups committed so far
  WgOp* wg = nullptr;      // wgmma.mma_async in flight (malloc'd; nwg of wgcap used)
  int nwg = 0, wgcap = 0;
  long long wg_committed = 0;  // wgmma groups committed so far
  bool wg_fenced = false;  // a wgmma.fence since the last wgmma.wait_group
  unsigned proxy_fences = 0;  // fence.proxy.async executed (napkin_emulate_wgmma.h)
  Block* block = nullptr;
  // TSan synchronization objects (only their addresses matter): released when the
  // thread arrives at a barrier or collective, acquired when it resumes from one.
  char tok_arrive = 0, tok_resume = 0;
  // fiber
  void* sp = nullptr;
  unsigned char* stack = nullptr;
  size_t stack_size = 0;
  void* map = nullptr;
  size_t map_size = 0;
  void* tsan_fiber = nullptr;
  void* asan_fake = nullptr;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct Block {
  const char* kernel = "";
  uint3 bid{};
  dim3 bdim, gdim;
  int nthreads = 0;
  Thread** threads = nullptr;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
  // per 4-byte word of smem: the cp.async that last landed there, while its thread has not
  // executed fence.proxy.async since ((thread + 1) << 32 | the thread's proxy_fences then;
  // 0: none): wgmma (the async proxy) must not read it (napkin_emulate_wgmma.h)
  uint64_t* cp_marks = nullptr;
  // one record of issued wgmma per warpgroup (napkin_emulate_wgmma.h's WgLog)
  void* wg_log = nullptr;
  void (*fn)(void* const*) = nullptr;
  void* const* args = nullptr;
  int bar_result = 0;
  // scheduler context (the OS thread's own stack)
  void* sched_sp = nullptr;
  void* sched_tsan = nullptr;
  void* sched_asan_fake = nullptr;
  const void* sched_stack = nullptr;
  size_t sched_stack_size = 0;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
  // TSan synchronization objects for the start and the end of a block
  char tok_start = 0, tok_end = 0;
};

inline thread_local Thread* tl_thread = nullptr;
inline thread_local Block* tl_block = nullptr;

// ---- errors -----------------------------------------------------------------
constexpr int kErrorExit = 86;

[[noreturn]] NAPKIN_NO_TSAN void vfail(const char* fmt, va_list ap);
#if defined(NAPKIN_EMULATE_RUNTIME)   // (defined in the runtime's translation unit only)
[[noreturn]] NAPKIN_NO_TSAN void vfail(const char* fmt, va_list ap) {
  char msg[4096];
  int n = snprintf(msg, sizeof msg, "napkin-emulator: error: ");
  n += vsnprintf(msg + n, sizeof msg - n, fmt, ap);
  if (Block* b = tl_block; b && b->nthreads && n < int(sizeof msg))
    n += snprintf(msg + n, sizeof msg - n, " [kernel %s, block (%u,%u,%u)", b->kernel, b->bid.x, b->bid.y, b->bid.z);
  if (Thread* t = tl_thread; t && n < int(sizeof msg))
    n += snprintf(msg + n, sizeof msg - n, ", thread (%u,%u,%u)", t->tid.x, t->tid.y, t->tid.z);
  if (tl_block && tl_block->nthreads && n < int(sizeof msg)) n += snprintf(msg + n, sizeof msg - n, "]");
  if (n > int(sizeof msg) - 2) n = int(sizeof msg) - 2;
  msg[n++] = '\n';
  fflush(stdout);
  ssize_t ignored = write(2, msg, size_t(n));
  (void)ignored;
  _exit(kErrorExit);
}
#endif

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(fmt, ap);
}

inline unsigned char* dynamic_smem() { return tl_block->smem; }

// ---- the host side (napkin_emulate_runtime.cpp, compiled once per flag set) --------
// The generated main.cpp lists its kernels in a KernelEntry table and calls host_main.
struct KernelEntry {
  const char* name;
  void (*call)(void* const* args);
};
int host_main(int argc, char** argv, const KernelEntry* kernels, int nkernels);

// ---- fiber switching -----------------------------------------------------------
#if defined(__x86_64__)
extern "C" void napkin_emu_switch(void** save_sp, void* to_sp);
extern "C" void napkin_emu_trampoline();
// Defined once, in napkin_emulate_runtime.cpp (its own translation unit).
#endif

// Scheduler -> fiber t; returns when t switches back.
NAPKIN_NO_TSAN inline void resume(Block* b, Thread* t) {
  tl_thread = t;
#if NAPKIN_ASAN
  __sanitizer_start_switch_fiber(&b->sched_asan_fake, t->stack, t->stack_size);
#endif
#if NAPKIN_TSAN
  __tsan_switch_to_fiber(t->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__x86_64__)
  napkin_emu_switch(&b->sched_sp, t->sp);
#else
  swapcontext(&b->sched_uc, &t->uc);
#endif
#if NAPKIN_ASAN
  __sanitizer_finish_switch_fiber(b->sched_asan_fake, nullptr, nullptr);
#endif
  tl_thread = nullptr;
}

// Fiber t -> its block's scheduler; returns when the scheduler resumes t.
NAPKIN_NO_TSAN inline void yield(Thread* t, Block* b) {
#if NAPKIN_ASAN
  __sanitizer_start_switch_fiber(&t->asan_fake, b->sched_stack, b->sched_stack_size);
#endif
#if NAPKIN_TSAN
  __tsan_switch_to_fiber(b->sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__x86_64__)
  napkin_emu_switch(&t->sp, b->sched_sp);
#else
  swapcontext(&t->uc, &b->sched_uc);
#endif
#if NAPKIN_ASAN
  __sanitizer_finish_switch_fiber(t->asan_fake, &b->sched_stack, &b->sched_stack_size);
#endif
}

}  // namespace napkin_emu

// ---- CUDA built-in variables -------------------------------------------------------
#define threadIdx (::napkin_emu::tl_thread->tid)
#define blockIdx (::napkin_emu::tl_block->bid)
#define blockDim (::napkin_emu::tl_block->bdim)
#define gridDim (::napkin_emu::tl_block->gdim)
