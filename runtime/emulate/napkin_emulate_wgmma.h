// napkin CPU emulator: Hopper's warpgroup MMA (wgmma, sm_90a), the helpers that
// codegen/wgmma_ptx.py emits as inline PTX on a GPU, from the PTX ISA's semantics:
//
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}  D = A*B + (scale-d ? D : 0),
//     A (64 x 16) and B (16 x N) read from shared memory through matrix descriptors,
//     D (64 x N, f32) in the warpgroup's registers: warp w % 4 of the warpgroup holds rows
//     16w..16w+15, lane (g = lane / 4, q = lane % 4) register i at row 16w + g + 8 * ((i / 2) % 2)
//     and column 8 * (i / 4) + 2q + i % 2 (the layout of mma.m16n8 repeated every 8 columns).
//   wgmma.fence / commit_group / wait_group N; fence.proxy.async.shared::cta.
//
// The asynchrony is modelled at its most adversarial legal extreme: an mma_async only
// records the operation; the product runs when a wait_group completes its group, reading
// shared memory and the accumulator registers then, and writing the accumulator then.
// A kernel that reads the accumulator before the wait sees stale values; one that
// overwrites an operand's shared memory before the wait multiplies the new contents.
// Also refused: an mma_async with no wgmma.fence since the thread's last wait_group (a
// little stricter than the ISA, which asks for the fence only when the registers were
// touched in between: CUTLASS fences every batch too), a thread that exits with products
// not waited for, lanes of a warp that disagree on an operation (.sync.aligned), a
// descriptor outside dynamic shared memory, a nonzero base-offset field, and a read of shared
// memory that a cp.async landed while its thread has executed no fence.proxy.async since:
// wgmma reads through the async proxy, cp.async writes through the generic one, and the PTX
// ISA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions", step 2; "Async
// Proxy") asks for fence.proxy.async between them. The emulator asks it of the writing thread
// after its copies land (the CUDA Programming Guide's pattern: the writers fence, then the
// barrier); plain stores into shared memory are not tracked.
//
// Shared addresses are offsets in the block's dynamic shared memory, which stands for a
// 1024-byte aligned window (the swizzle patterns repeat every 1024 bytes of the address):
// on a GPU the kernel declares its dynamic shared memory so (NAPKIN_WGMMA_SMEM).
//
// Each warp completes its own 16 rows at its wait_group (a warp collective); the four warps of
// a warpgroup must issue the same operations in the same order (checked as they issue, and
// their counts at the block's end).
#pragma once

#include "napkin_emulate_warp.h"

#if defined(NAPKIN_EMULATE_RUNTIME)
#include <deque>
#endif

#define NAPKIN_WGMMA_SMEM(name) NAPKIN_DYNAMIC_SMEM(name)

namespace napkin_emu {

#if defined(NAPKIN_EMULATE_RUNTIME)
static bool wg_same(const WgOp& x, const WgOp& y) {
  return x.da == y.da && x.db == y.db && x.group == y.group && x.n == y.n && x.bf16 == y.bf16 && x.ta == y.ta &&
         x.tb == y.tb && x.scale_d == y.scale_d;
}

// A warpgroup's operations in issue order, each as the first of its four warps to issue it
// gave it (lane 0 of each warp stands for its warp: the lanes are compared at wait_group),
// until all four have: wgmma is .aligned over the warpgroup, one instruction with one pair of
// descriptors, so its warps must issue the same sequence.
struct WgIssued {
  WgOp op;
  int warp, seen;
};
struct WgLog {
  std::deque<WgIssued> ops;
  long long base = 0, issued[4] = {0, 0, 0, 0};
};

NAPKIN_NO_TSAN void wg_log_reset(Block* b, int nthreads) {
  auto* logs = static_cast<WgLog*>(b->wg_log);
  for (int g = 0; g < (nthreads + 127) / 128; ++g) logs[g] = WgLog();
}

NAPKIN_NO_TSAN static void wg_log_issue(Thread* t, const WgOp& op) {
  WgLog& g = static_cast<WgLog*>(tl_block->wg_log)[t->warp / 4];
  const long long i = g.issued[t->warp % 4]++;
  if (i == g.base + (long long)g.ops.size()) {
    g.ops.push_back(WgIssued{op, t->warp, 1});
    return;
  }
  WgIssued& first = g.ops[size_t(i - g.base)];
  if (!wg_same(first.op, op))
    fail("%s:%d: wgmma.mma_async: warp %d and warp %d of warpgroup %d issued different operations as their "
         "wgmma number %lld (descriptors 0x%016llx, 0x%016llx against 0x%016llx, 0x%016llx; commit groups %lld and "
         "%lld): the instruction is .aligned over the warpgroup, one product for its four warps", op.file, op.line,
         t->warp, first.warp, t->warp / 4, i, (unsigned long long)op.da, (unsigned long long)op.db,
         (unsigned long long)first.op.da, (unsigned long long)first.op.db, op.group, first.op.group);
  if (++first.seen == 4)
    while (!g.ops.empty() && g.ops.front().seen == 4) {
      g.ops.pop_front();
      ++g.base;
    }
}

// At the block's end: every warp of a warpgroup issued as many as the others.
NAPKIN_NO_TSAN void wg_log_check(Block* b, int nthreads) {
  auto* logs = static_cast<WgLog*>(b->wg_log);
  for (int g = 0; g < (nthreads + 127) / 128; ++g)
    if (!logs[g].ops.empty()) {
      const WgIssued& r = logs[g].ops.front();
      int fewest = 0;
      for (int w = 1; w < 4; ++w)
        if (logs[g].issued[w] < logs[g].issued[fewest]) fewest = w;
      fail("%s:%d: wgmma.mma_async: warp %d of warpgroup %d issued it as its wgmma number %lld, but warp %d issued "
           "only %lld in all: the instruction is .aligned over the warpgroup (its four warps issue the same ones)",
           r.op.file, r.op.line, r.warp, g, logs[g].base, 4 * g + fewest, logs[g].issued[fewest]);
    }
}

NAPKIN_NO_TSAN void wg_push(Thread* t, const WgOp& op) {
  if (t->lane == 0) wg_log_issue(t, op);
  if (t->nwg == t->wgcap) {
    t->wgcap = t->wgcap ? 2 * t->wgcap : 8;
    t->wg = static_cast<WgOp*>(realloc(t->wg, sizeof(WgOp) * size_t(t->wgcap)));
    if (!t->wg) fail("out of memory for wgmma operations");
  }
  t->wg[t->nwg++] = op;
}

// The byte offset in shared memory of element (row, k) of the operand a descriptor
// describes: row is M (A) or N (B); `mn_major` is the instruction's transpose flag
// (0: K-major, each row's k contiguous; 1: M/N-major). The canonical layouts of the PTX
// ISA ("Shared Memory Matrix Layout", "Matrix Descriptor Format"), in bytes, 2-byte
// elements, core matrices of 8 rows x 16 bytes:
//   K-major,  no swizzle:  (row / 8) SBO + (k / 8) LBO + (row % 8) 16 + (k % 8) 2
//   K-major,  W-byte swizzle (W = 32, 64, 128): (row / 8) SBO + (row % 8) W + 2k
//   MN-major, no swizzle:  (row / 8) SBO + (k / 8) LBO + (k % 8) 16 + (row % 8) 2
//   MN-major, W-byte swizzle: (row / (W/2)) LBO + (row % (W/2)) 2 + (k % 8) W + (k / 8) SBO
// then, swizzled, bits 4.. of the address (its 16-byte chunk) XOR bits 7.. (its 128-byte
// row within 1024 bytes): 3 bits for 128B, 2 for 64B, 1 for 32B.
NAPKIN_NO_TSAN long long wg_offset(uint64_t desc, bool mn_major, int row, int k) {
  const long long start = (long long)(desc & 0x3fffu) << 4;
  const long long lbo = (long long)((desc >> 16) & 0x3fffu) << 4;
  const long long sbo = (long long)((desc >> 32) & 0x3fffu) << 4;
  const int mode = int(desc >> 62);
  const int width = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  long long off;
  if (!width)
    off = start + (row / 8) * sbo + (k / 8) * lbo + (mn_major ? (k % 8) * 16 + (row % 8) * 2
                                                                : (row % 8) * 16 + (k % 8) * 2);
  else if (!mn_major)
    off = start + (row / 8) * sbo + (row % 8) * width + 2 * k;
  else
    off = start + (row / (width / 2)) * lbo + (row % (width / 2)) * 2 + (k % 8) * width + (k / 8) * sbo;
  if (width) {
    const int bits = mode == 1 ? 3 : mode == 2 ? 2 : 1;
    off ^= ((off >> 7) & ((1 << bits) - 1)) << 4;
  }
  return off;
}

// The shared-memory read, instrumented so that ThreadSanitizer sees it (in the lane that
// completes the wait_group: a copy another warp's thread landed with nothing ordering it
// before this read, a missing barrier, is a race it reports).
__attribute__((noinline)) uint16_t wg_read(const unsigned char* at) {
  uint16_t h;
  memcpy(&h, at, 2);
  return h;
}

NAPKIN_NO_TSAN static double wg_element(const WgOp& op, uint64_t desc, bool mn_major, int row, int k,
                                        const char* which) {
  Block* b = tl_block;
  const long long off = wg_offset(desc, mn_major, row, k);
  if (off < 0 || off + 2 > (long long)b->smem_bytes)
    fail("%s:%d: wgmma.mma_async: %s[%d][k=%d] is at shared byte %lld, outside the %zu bytes of dynamic shared "
         "memory (descriptor 0x%016llx)", op.file, op.line, which, row, k, off, b->smem_bytes,
         (unsigned long long)desc);
  const uint64_t mark = b->cp_marks[off / 4];
  if (mark && b->threads[(mark >> 32) - 1]->proxy_fences == uint32_t(mark))
    fail("%s:%d: wgmma.mma_async: %s[%d][k=%d] at shared byte %lld was written by thread %d's cp.async (the generic "
         "proxy), which has executed no fence.proxy.async (napkin_wgmma_proxy_fence) since: the async proxy "
         "wgmma reads through may not see it", op.file, op.line, which, row, k, off, int(mark >> 32) - 1);
  const uint16_t h = wg_read(b->smem + off);
  return op.bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
}

// wgmma.wait_group `pending` in one warp: every product of a group but the `pending` most
// recent runs now, in issue order (called by the lane completing the collective).
NAPKIN_NO_TSAN void wgmma_complete(Thread* const* lanes, int pending) {
  const Slot& s0 = lanes[0]->slot;
  const long long committed = lanes[0]->wg_committed, cut = committed - pending;
  int count = 0;
  while (count < lanes[0]->nwg && lanes[0]->wg[count].group < cut) ++count;
  for (int l = 1; l < 32; ++l) {
    const Thread* t = lanes[l];
    if (t->wg_committed != committed || t->nwg != lanes[0]->nwg)
      fail("%s:%d: wgmma.wait_group: lane %d has %d wgmma.mma_async in flight in %lld committed groups, lane 0 %d "
           "in %lld (the instructions are .sync.aligned: every lane issues the same ones)", s0.file, s0.line, l,
           t->nwg, t->wg_committed, lanes[0]->nwg, committed);
    for (int i = 0; i < t->nwg; ++i)
      if (!wg_same(t->wg[i], lanes[0]->wg[i]))
        fail("%s:%d: wgmma.mma_async: lane %d and lane 0 issued different operations (descriptors 0x%016llx, "
             "0x%016llx against 0x%016llx, 0x%016llx)", t->wg[i].file, t->wg[i].line, l,
             (unsigned long long)t->wg[i].da, (unsigned long long)t->wg[i].db,
             (unsigned long long)lanes[0]->wg[i].da, (unsigned long long)lanes[0]->wg[i].db);
  }
  const int w = lanes[0]->warp % 4;
  for (int i = 0; i < count; ++i) {
    const WgOp& op = lanes[0]->wg[i];
    if ((op.da >> 49) & 7u || (op.db >> 49) & 7u)
      fail("%s:%d: wgmma.mma_async: a descriptor's base offset (bits 49-51) is not 0; the emulator models "
           "1024-byte aligned swizzle patterns only", op.file, op.line);
    double A[16][16], B[256][16];
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) A[r][k] = wg_element(op, op.da, op.ta, 16 * w + r, k, "A");
    for (int n = 0; n < op.n; ++n)
      for (int k = 0; k < 16; ++k) B[n][k] = wg_element(op, op.db, op.tb, n, k, "B");
    for (int l = 0; l < 32; ++l) {
      float* d = lanes[l]->wg[i].d;
      const int g = l >> 2, q = l & 3;
      for (int j = 0; j < op.n / 2; ++j) {
        const int row = g + 8 * ((j >> 1) & 1), col = 8 * (j >> 2) + 2 * q + (j & 1);
        double acc = op.scale_d ? double(d[j]) : 0.0;
        for (int k = 0; k < 16; ++k) acc += A[row][k] * B[col][k];
        d[j] = static_cast<float>(acc);
      }
    }
  }
  for (int l = 0; l < 32; ++l) {
    Thread* t = lanes[l];
    memmove(t->wg, t->wg + count, sizeof(WgOp) * size_t(t->nwg - count));
    t->nwg -= count;
    t->wg_fenced = false;
  }
}
#else
NAPKIN_NO_TSAN void wg_push(Thread* t, const WgOp& op);
NAPKIN_NO_TSAN long long wg_offset(uint64_t desc, bool mn_major, int row, int k);
#endif  // NAPKIN_EMULATE_RUNTIME

inline void wgmma_issue(float* d, int n, bool bf16, bool ta, bool tb, uint64_t da, uint64_t db, int scale_d,
                        const char* file, int line) {
  Thread* t = tl_thread;
  Block* b = tl_block;
  if (!t->wg_fenced)
    fail("%s:%d: wgmma.mma_async with no wgmma.fence since the thread's last wgmma.wait_group (or its start): the "
         "accumulator registers may still be written by other instructions", file, line);
  if ((t->warp / 4 + 1) * 128 > b->nthreads)
    fail("%s:%d: wgmma.mma_async needs a whole warpgroup (128 threads from a multiple of 128); the block has %d "
         "threads", file, line, b->nthreads);
  WgOp op;
  op.d = d;
  op.da = da;
  op.db = db;
  op.group = t->wg_committed;
  op.file = file;
  op.line = line;
  op.n = short(n);
  op.bf16 = bf16;
  op.ta = ta;
  op.tb = tb;
  op.scale_d = scale_d != 0;
  wg_push(t, op);
}

}  // namespace napkin_emu

// The 64-bit matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address,
// leading and stride byte offsets (each >> 4, 14 bits), base offset 0, swizzle mode
// (0 none, 1 128-byte, 2 64-byte, 3 32-byte) in bits 62-63. `smem` must lie in the
// block's dynamic shared memory, 16-byte aligned.
inline unsigned long long napkin_wgmma_desc(const void* smem, unsigned lbo, unsigned sbo, unsigned swizzle,
                                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  napkin_emu::Block* b = napkin_emu::tl_block;
  const unsigned char* p = static_cast<const unsigned char*>(smem);
  if (p < b->smem || p >= b->smem + b->smem_bytes)
    napkin_emu::fail("%s:%d: wgmma descriptor of %p: not in the block's dynamic shared memory", file, line, smem);
  const unsigned long long off = (unsigned long long)(p - b->smem);
  if (off % 16 || lbo % 16 || sbo % 16 || lbo >= (1u << 18) || sbo >= (1u << 18) || swizzle > 3)
    napkin_emu::fail("%s:%d: wgmma descriptor: start %llu, leading offset %u and stride offset %u must be multiples "
                     "of 16 below 2^18, swizzle mode %u at most 3", file, line, off, lbo, sbo, swizzle);
  return ((off & 0x3ffffu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)swizzle << 62);
}

inline void napkin_wgmma_fence() { napkin_emu::tl_thread->wg_fenced = true; }
// fence.proxy.async.shared::cta: this thread's generic-proxy writes so far (its landed
// cp.async copies) are ordered before later async-proxy (wgmma) reads.
inline void napkin_wgmma_proxy_fence() { ++napkin_emu::tl_thread->proxy_fences; }
inline void napkin_wgmma_commit() { ++napkin_emu::tl_thread->wg_committed; }
// wgmma.wait_group N: every committed group but the N most recent is complete.
template <int N>
inline void napkin_wgmma_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  napkin_emu::Slot& s = napkin_emu::warp_begin(napkin_emu::Op::WgWait, napkin_emu::kFullMask, file, line);
  s.arg = N;
  napkin_emu::warp_end(s);
}

// napkin_wgmma_m64n<N>k16_<f16|bf16>[_ta][_tb](float (&d)[N / 2], desc_a, desc_b, scale_d):
// codegen/wgmma_ptx.py names them; _ta: A M-major, _tb: B N-major (else K-major).
#define NAPKIN_WGMMA_ONE(N, DT, BF, SUFFIX, TA, TB)                                                       \
  inline void napkin_wgmma_m64n##N##k16_##DT##SUFFIX(float (&d)[N / 2], unsigned long long da,           \
                                                     unsigned long long db, int scale_d,                 \
                                                     const char* file = __builtin_FILE(),                \
                                                     int line = __builtin_LINE()) {                      \
    napkin_emu::wgmma_issue(d, N, BF, TA, TB, da, db, scale_d, file, line);                              \
  }
#define NAPKIN_WGMMA_N(N)                       \
  NAPKIN_WGMMA_ONE(N, f16, false, , 0, 0)       \
  NAPKIN_WGMMA_ONE(N, f16, false, _tb, 0, 1)    \
  NAPKIN_WGMMA_ONE(N, f16, false, _ta, 1, 0)    \
  NAPKIN_WGMMA_ONE(N, f16, false, _ta_tb, 1, 1) \
  NAPKIN_WGMMA_ONE(N, bf16, true, , 0, 0)       \
  NAPKIN_WGMMA_ONE(N, bf16, true, _tb, 0, 1)    \
  NAPKIN_WGMMA_ONE(N, bf16, true, _ta, 1, 0)    \
  NAPKIN_WGMMA_ONE(N, bf16, true, _ta_tb, 1, 1)
NAPKIN_WGMMA_N(8) NAPKIN_WGMMA_N(16) NAPKIN_WGMMA_N(24) NAPKIN_WGMMA_N(32)
NAPKIN_WGMMA_N(40) NAPKIN_WGMMA_N(48) NAPKIN_WGMMA_N(56) NAPKIN_WGMMA_N(64)
NAPKIN_WGMMA_N(72) NAPKIN_WGMMA_N(80) NAPKIN_WGMMA_N(88) NAPKIN_WGMMA_N(96)
NAPKIN_WGMMA_N(104) NAPKIN_WGMMA_N(112) NAPKIN_WGMMA_N(120) NAPKIN_WGMMA_N(128)
NAPKIN_WGMMA_N(136) NAPKIN_WGMMA_N(144) NAPKIN_WGMMA_N(152) NAPKIN_WGMMA_N(160)
NAPKIN_WGMMA_N(168) NAPKIN_WGMMA_N(176) NAPKIN_WGMMA_N(184) NAPKIN_WGMMA_N(192)
NAPKIN_WGMMA_N(200) NAPKIN_WGMMA_N(208) NAPKIN_WGMMA_N(216) NAPKIN_WGMMA_N(224)
NAPKIN_WGMMA_N(232) NAPKIN_WGMMA_N(240) NAPKIN_WGMMA_N(248) NAPKIN_WGMMA_N(256)
#undef NAPKIN_WGMMA_N
#undef NAPKIN_WGMMA_ONE
