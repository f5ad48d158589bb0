// napkin CPU emulator header: force-included (g++ -include) before a kernel's .cu
// text so that g++ compiles the very source NVRTC compiles.
//
//   napkin_emulate_types.h  CUDA keywords, vector types, __half/__nv_bfloat16, math
//   napkin_emulate_fiber.h  threads of a block as fibers, errors, threadIdx & co.
//   napkin_emulate_sync.h   __syncthreads, cp.async bookkeeping, fences, atomics
//   napkin_emulate_warp.h   shuffles, votes, reductions, the mma/ldmatrix exchange
//   napkin_emulate_ptx.h    the prelude's inline-PTX helpers (mma, ldmatrix, cp.async)
//   napkin_emulate_wgmma.h  Hopper's warpgroup MMA (codegen/wgmma_ptx.py's helpers)
//   napkin_emulate_runtime.cpp  block scheduler, launches, host main (included by
//                           the generated main, after the kernel source)
#pragma once
#ifndef NAPKIN_EMULATE
#define NAPKIN_EMULATE 1
#endif
#include "napkin_emulate_ptx.h"
#include "napkin_emulate_wgmma.h"

// Defined last: the standard headers above use the __noinline__ attribute spelling.
#define __noinline__ __attribute__((noinline))
