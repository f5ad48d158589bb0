// napkin CPU emulator: block scheduler, launches and the host main.
//
// Its own translation unit, compiled once per flag set and linked with each kernel's
// main.cpp (see build.py); the declarations it shares with the kernel side are in
// napkin_emulate_fiber.h. Blocks of a launch are spread
// over a few OS threads ("workers"); each worker runs its blocks one at a time,
// the block's threads as fibers (see napkin_emulate_fiber.h).
// (the standard headers first: napkin_emulate.h ends by defining __noinline__)
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <sys/mman.h>

#define NAPKIN_EMULATE_RUNTIME 1   // the emulator functions a kernel's build only declares
#include "napkin_emulate.h"


namespace napkin_emu {

#if defined(__x86_64__)
// Saves callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer, and resumes the other context the same way.
asm(R"(
  .pushsection .text
  .globl napkin_emu_switch
  .type napkin_emu_switch,@function
  .p2align 4
napkin_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size napkin_emu_switch, .-napkin_emu_switch
  .globl napkin_emu_trampoline
  .type napkin_emu_trampoline,@function
  .p2align 4
napkin_emu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size napkin_emu_trampoline, .-napkin_emu_trampoline
  .popsection
)");
#endif


#if NAPKIN_ASAN || NAPKIN_TSAN
constexpr size_t kStackSize = size_t(1) << 20;
#else
constexpr size_t kStackSize = size_t(256) << 10;
#endif

// ---- fibers -------------------------------------------------------------------------
NAPKIN_NO_TSAN static void thread_body(Thread* t, Block* b) {
  tsan_acquire(&b->tok_start);
  b->fn(b->args);
  // Copies never waited for are dropped: no correct kernel can observe them (their
  // writes become visible only through the issuing thread's wait_group).
  t->ncp = 0;
  // A wgmma never waited for is a kernel bug: its accumulator would never be defined.
  if (t->nwg)
    fail("%s:%d: the thread exits with %d wgmma.mma_async not completed by a wgmma.wait_group%s", t->wg[0].file,
         t->wg[0].line, t->nwg, t->wg[t->nwg - 1].group == t->wg_committed ? " (the last not even committed)" : "");
  t->state = St::Exited;
  tsan_release(&b->tok_end);
}

// Entry of every fiber; a fiber is reused for the same thread slot of every block
// its worker runs, so it loops: run the kernel, report the exit, wait to be resumed.
[[noreturn]] NAPKIN_NO_TSAN static void fiber_main(Thread* t) {
#if NAPKIN_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &t->block->sched_stack, &t->block->sched_stack_size);
#endif
  for (;;) {
    Block* b = t->block;
    thread_body(t, b);
    yield(t, b);
  }
}

#if !defined(__x86_64__)
static void fiber_main_uc() { fiber_main(tl_thread); }
#endif

NAPKIN_NO_TSAN static Thread* new_fiber(Block* b) {
  Thread* t = new Thread();
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  t->map_size = kStackSize + page;
  void* m = mmap(nullptr, t->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                 -1, 0);
  if (m == MAP_FAILED) fail("cannot map a %zu-byte fiber stack", kStackSize);
  if (mprotect(m, page, PROT_NONE) != 0) fail("cannot protect a fiber stack guard page");
  t->map = m;
  t->stack = static_cast<unsigned char*>(m) + page;
  t->stack_size = kStackSize;
  t->block = b;
#if NAPKIN_TSAN
  t->tsan_fiber = __tsan_create_fiber(0);
#endif
#if defined(__x86_64__)
  // Initial frame for napkin_emu_switch: FP control words, r15 r14 r13 r12 rbx rbp,
  // return address. The trampoline calls r13(r12) with a 16-byte aligned stack.
  uint64_t* sp = reinterpret_cast<uint64_t*>(t->stack + kStackSize - 128);
  uint32_t mxcsr = __builtin_ia32_stmxcsr();
  uint16_t fpucw;
  asm volatile("fnstcw %0" : "=m"(fpucw));
  memcpy(sp, &mxcsr, 4);
  memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
  sp[1] = 0;
  sp[2] = 0;
  sp[3] = reinterpret_cast<uint64_t>(&fiber_main);
  sp[4] = reinterpret_cast<uint64_t>(t);
  sp[5] = 0;
  sp[6] = 0;
  sp[7] = reinterpret_cast<uint64_t>(&napkin_emu_trampoline);
  t->sp = sp;
#else
  getcontext(&t->uc);
  t->uc.uc_stack.ss_sp = t->stack;
  t->uc.uc_stack.ss_size = kStackSize;
  t->uc.uc_link = nullptr;
  makecontext(&t->uc, fiber_main_uc, 0);
#endif
  return t;
}

NAPKIN_NO_TSAN static void free_fiber(Thread* t) {
#if NAPKIN_TSAN
  __tsan_destroy_fiber(t->tsan_fiber);
#endif
#if NAPKIN_ASAN
  __asan_unpoison_memory_region(t->stack, t->stack_size);
#endif
  munmap(t->map, t->map_size);
  free(t->cp);
  free(t->wg);
  delete t;
}

// ---- the block scheduler ------------------------------------------------------------------
struct Where {
  char text[48];
};
static Where where_(const Thread* t) {
  Where w;
  snprintf(w.text, sizeof w.text, "thread (%u,%u,%u)", t->tid.x, t->tid.y, t->tid.z);
  return w;
}
#define NAPKIN_WHERE(t) (where_(t).text)

// Nothing can run: release the barrier if every thread waits at the same one,
// report the deadlock otherwise. Returns false when every thread has exited.
NAPKIN_NO_TSAN static bool release_barrier(Block* b) {
  const int n = b->nthreads;
  int exited = 0, at_bar = 0, at_other_site = 0;
  Thread *bar = nullptr, *other = nullptr, *gone = nullptr, *warp = nullptr;
  for (int i = 0; i < n; ++i) {
    Thread* t = b->threads[i];
    if (t->state == St::Exited) {
      ++exited;
      if (!gone) gone = t;
    } else if (t->state == St::Warp) {
      if (!warp) warp = t;
    } else if (t->state == St::Barrier) {
      ++at_bar;
      if (!bar) bar = t;
      else if (t->line != bar->line || strcmp(t->file, bar->file) != 0) {
        ++at_other_site;
        if (!other) other = t;
      }
    }
  }
  if (exited == n) return false;
  if (warp) {
    const Slot& s = warp->slot;
    for (int l = 0; l < 32; ++l) {
      int i = warp->warp * 32 + l;
      if (!((s.mask >> l) & 1u) || i >= n) continue;
      const Thread* o = b->threads[i];
      if (o->state == St::Exited)
        fail("%s:%d: %s with mask 0x%08x: lane %d (%s) has already exited", s.file, s.line, op_name(s.op), s.mask,
             l, NAPKIN_WHERE(o));
      if (o->state == St::Barrier)
        fail("%s:%d: %s (mask 0x%08x) in %s can never complete: lane %d (%s) waits at __syncthreads at %s:%d",
             s.file, s.line, op_name(s.op), s.mask, NAPKIN_WHERE(warp), l, NAPKIN_WHERE(o), o->file, o->line);
    }
    fail("%s:%d: %s (mask 0x%08x) in %s can never complete (deadlock)", s.file, s.line, op_name(s.op), s.mask,
         NAPKIN_WHERE(warp));
  }
  if (exited)
    fail("%s:%d: divergent __syncthreads: %d of %d threads wait here but %d have exited (first: %s)", bar->file,
         bar->line, at_bar, n, exited, NAPKIN_WHERE(gone));
  if (at_other_site)
    fail("%s:%d: mismatched __syncthreads: %d threads wait here while %d wait at %s:%d (first: %s)", bar->file,
         bar->line, at_bar - at_other_site, at_other_site, other->file, other->line, NAPKIN_WHERE(other));
  int count = 0;
  for (int i = 0; i < n; ++i) {
    count += b->threads[i]->pred;
    tsan_acquire(&b->threads[i]->tok_arrive);
  }
  b->bar_result = count;
  for (int i = 0; i < n; ++i) {
    tsan_release(&b->threads[i]->tok_resume);
    b->threads[i]->state = St::Ready;
  }
  return true;
}

NAPKIN_NO_TSAN static void run_block(Block* b) {
  const int n = b->nthreads;
  const unsigned bx = b->bdim.x, by = b->bdim.y;
  if (b->smem_bytes) {
    memset(b->smem, 0xff, b->smem_bytes);  // NaN in f32, f16 and bf16
    memset(b->cp_marks, 0, sizeof(uint64_t) * (b->smem_bytes / 4 + 1));
  }
  wg_log_reset(b, n);
  tsan_release(&b->tok_start);
  for (int i = 0; i < n; ++i) {
    Thread* t = b->threads[i];
    t->tid = uint3{unsigned(i) % bx, (unsigned(i) / bx) % by, unsigned(i) / (bx * by)};
    t->linear = i;
    t->warp = i / 32;
    t->lane = i % 32;
    t->state = St::Ready;
    t->ncp = 0;
    t->committed = 0;
    t->nwg = 0;
    t->wg_committed = 0;
    t->wg_fenced = false;
    t->proxy_fences = 0;
  }
  for (;;) {
    bool ran = false;
    for (int i = 0; i < n; ++i) {
      Thread* t = b->threads[i];
      if (t->state == St::Ready) {
        t->state = St::Running;
        resume(b, t);
        ran = true;
      }
    }
    if (!ran && !release_barrier(b)) break;
  }
  wg_log_check(b, n);
  tsan_acquire(&b->tok_end);
}

// ---- launches -------------------------------------------------------------------------------
struct Worker {
  Block block;
  std::vector<Thread*> pool;
  ~Worker() {
    for (Thread* t : pool) free_fiber(t);
  }
};

struct LaunchSpec {
  int kernel = 0;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  size_t smem = 0;
  std::vector<void*> args;
  std::vector<uint64_t> scalars;
};

NAPKIN_NO_TSAN static void worker_loop(Worker* w, const KernelEntry* k, const LaunchSpec* L, void* const* args,
                                       std::atomic<long long>* next, long long total) {
  Block* b = &w->block;
  tl_block = b;
#if NAPKIN_TSAN
  b->sched_tsan = __tsan_get_current_fiber();
#endif
  b->kernel = k->name;
  b->fn = k->call;
  b->args = args;
  b->bdim = dim3(L->block[0], L->block[1], L->block[2]);
  b->gdim = dim3(L->grid[0], L->grid[1], L->grid[2]);
  b->smem_bytes = L->smem;
  void* smem = nullptr;
  if (posix_memalign(&smem, 128, L->smem) != 0) fail("cannot allocate %zu bytes of dynamic shared memory", L->smem);
  b->smem = static_cast<unsigned char*>(smem);
  b->cp_marks = static_cast<uint64_t*>(malloc(sizeof(uint64_t) * (L->smem / 4 + 1)));
  if (!b->cp_marks) fail("cannot allocate the marks of %zu bytes of dynamic shared memory", L->smem);
  const int n = int(L->block[0] * L->block[1] * L->block[2]);
  b->wg_log = new WgLog[size_t((n + 127) / 128)];
  while (int(w->pool.size()) < n) w->pool.push_back(new_fiber(b));
  b->threads = w->pool.data();
  b->nthreads = n;
  const long long gx = L->grid[0], gy = L->grid[1];
  for (;;) {
    long long i = next->fetch_add(1);
    if (i >= total) break;
    b->bid = uint3{unsigned(i % gx), unsigned((i / gx) % gy), unsigned(i / (gx * gy))};
    run_block(b);
  }
  b->nthreads = 0;
  free(b->smem);
  free(b->cp_marks);
  b->cp_marks = nullptr;
  delete[] static_cast<WgLog*>(b->wg_log);
  b->wg_log = nullptr;
  tl_block = nullptr;
}

static void check_launch(const KernelEntry& k, const LaunchSpec& L, size_t smem_limit) {
  const unsigned* g = L.grid;
  const unsigned* t = L.block;
  const unsigned long long threads = 1ull * t[0] * t[1] * t[2];
  if (!g[0] || !g[1] || !g[2] || g[0] > 2147483647u || g[1] > 65535u || g[2] > 65535u)
    fail("invalid launch of %s: grid (%u,%u,%u) (each at least 1; at most 2^31-1, 65535, 65535)", k.name, g[0],
         g[1], g[2]);
  if (!t[0] || !t[1] || !t[2] || t[0] > 1024u || t[1] > 1024u || t[2] > 64u || threads > 1024u)
    fail("invalid launch of %s: block (%u,%u,%u) (at most 1024 threads, 1024 x 1024 x 64)", k.name, t[0], t[1], t[2]);
  if (L.smem > smem_limit)
    fail("invalid launch of %s: %zu bytes of dynamic shared memory exceed the limit of %zu", k.name, L.smem,
         smem_limit);
}

static void run_launch(const KernelEntry& k, const LaunchSpec& L, int workers, size_t smem_limit) {
  check_launch(k, L, smem_limit);
  const long long total = 1ll * L.grid[0] * L.grid[1] * L.grid[2];
  const int nw = int(std::max(1ll, std::min<long long>(workers, total)));
  std::atomic<long long> next{0};
  std::vector<std::unique_ptr<Worker>> ws;
  for (int i = 0; i < nw; ++i) ws.push_back(std::make_unique<Worker>());
  if (nw == 1) {
    worker_loop(ws[0].get(), &k, &L, L.args.data(), &next, total);
    return;
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < nw; ++i)
    threads.emplace_back(worker_loop, ws[i].get(), &k, &L, L.args.data(), &next, total);
  for (auto& th : threads) th.join();
}

// ---- host main ----------------------------------------------------------------------------------
// Spec file (written by napkin.runtime.emulate):
//   napkin-emulator 1
//   workers W smem_limit S
//   buffers N            then N lines: <nbytes> <path>
//   launches M           then M lines: <kernel> gx gy gz bx by bz smem nargs tok...
// where tok is b<buffer> | i<int32> | l<int64> | f<float bits, hex>.
// Every buffer is read from its file before the launches and written back after.
int host_main(int argc, char** argv, const KernelEntry* kernels, int nkernels) {
  if (argc != 2) fail("usage: %s SPEC", argv[0]);
  FILE* f = fopen(argv[1], "r");
  if (!f) fail("cannot open spec file %s", argv[1]);
  int version = 0, workers = 1, nbuf = 0, nlaunch = 0;
  size_t smem_limit = 0;
  if (fscanf(f, " napkin-emulator %d workers %d smem_limit %zu buffers %d", &version, &workers, &smem_limit,
             &nbuf) != 4 || version != 1)
    fail("malformed spec file header");
  std::vector<unsigned char*> bufs(static_cast<size_t>(nbuf), nullptr);
  std::vector<size_t> sizes(static_cast<size_t>(nbuf), 0);
  std::vector<std::string> paths(static_cast<size_t>(nbuf));
  for (int i = 0; i < nbuf; ++i) {
    char path[4096];
    if (fscanf(f, " %zu %4095s", &sizes[i], path) != 2) fail("malformed buffer line %d", i);
    paths[i] = path;
    bufs[i] = static_cast<unsigned char*>(malloc(sizes[i]));  // exact size: overreads are caught by ASan
    if (!bufs[i] && sizes[i]) fail("cannot allocate %zu bytes", sizes[i]);
    // kernels assume 16-byte-aligned pointer arguments (codegen Program.alignment), as on a GPU
    if (reinterpret_cast<uintptr_t>(bufs[i]) % 16) fail("buffer %d is not 16-byte aligned", i);
    FILE* bf = fopen(path, "rb");
    if (!bf || fread(bufs[i], 1, sizes[i], bf) != sizes[i]) fail("cannot read buffer file %s", path);
    fclose(bf);
  }
  if (fscanf(f, " launches %d", &nlaunch) != 1) fail("malformed spec file: launches");
  std::vector<LaunchSpec> launches(static_cast<size_t>(nlaunch));
  for (int i = 0; i < nlaunch; ++i) {
    LaunchSpec& L = launches[i];
    int nargs = 0;
    if (fscanf(f, " %d %u %u %u %u %u %u %zu %d", &L.kernel, &L.grid[0], &L.grid[1], &L.grid[2], &L.block[0],
               &L.block[1], &L.block[2], &L.smem, &nargs) != 9 || L.kernel < 0 || L.kernel >= nkernels || nargs < 0)
      fail("malformed launch line %d", i);
    L.scalars.assign(size_t(nargs), 0);
    L.args.assign(size_t(nargs), nullptr);
    for (int a = 0; a < nargs; ++a) {
      char tok[64];
      if (fscanf(f, " %63s", tok) != 1) fail("malformed argument %d of launch %d", a, i);
      char* end = nullptr;
      if (tok[0] == 'b') {
        long idx = strtol(tok + 1, &end, 10);
        if (idx < 0 || idx >= nbuf) fail("launch %d argument %d: no buffer %ld", i, a, idx);
        L.args[a] = bufs[size_t(idx)];
      } else if (tok[0] == 'i') {
        int32_t v = int32_t(strtol(tok + 1, &end, 10));
        memcpy(&L.scalars[a], &v, 4);
        L.args[a] = &L.scalars[a];
      } else if (tok[0] == 'l') {
        long long v = strtoll(tok + 1, &end, 10);
        memcpy(&L.scalars[a], &v, 8);
        L.args[a] = &L.scalars[a];
      } else if (tok[0] == 'f') {
        uint32_t v = uint32_t(strtoul(tok + 1, &end, 16));
        memcpy(&L.scalars[a], &v, 4);
        L.args[a] = &L.scalars[a];
      } else {
        fail("launch %d argument %d: bad token %s", i, a, tok);
      }
    }
  }
  fclose(f);
  for (const LaunchSpec& L : launches) run_launch(kernels[L.kernel], L, workers, smem_limit);
  for (int i = 0; i < nbuf; ++i) {
    FILE* bf = fopen(paths[i].c_str(), "wb");
    if (!bf || fwrite(bufs[i], 1, sizes[i], bf) != sizes[i]) fail("cannot write buffer file %s", paths[i].c_str());
    fclose(bf);
    free(bufs[i]);
  }
  fflush(stdout);
  return 0;
}

}  // namespace napkin_emu
