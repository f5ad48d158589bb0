"""Hopper's warpgroup MMA (wgmma, sm_90a) as C helpers: the text a kernel that uses it
carries after the prelude.

`helpers(variants)` gives, for a GPU build (`#ifndef NAPKIN_EMULATE`), the descriptor
builder, `wgmma.fence` / `commit_group` / `wait_group N`, `fence.proxy.async.shared::cta`
(shared memory written through the generic proxy, as cp.async and st.shared write it, made
visible to wgmma, which reads through the async proxy: PTX ISA, "Async Proxy"), a dynamic shared memory
declaration aligned to 1024 bytes (the swizzle patterns repeat every 1024 bytes of the
shared address), and one inline-PTX wrapper per `Variant` of
`wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}` (A and B from shared memory through
descriptors, scale-d a runtime predicate, both immediates' scales 1). The CPU emulator
(runtime/emulate/napkin_emulate_wgmma.h) implements the same names for every N from the
PTX ISA's semantics, so the text is the same for both builds.

A wrapper's operand list has N / 2 accumulator registers, so it is printed here (one per
variant a kernel uses) rather than written out in the prelude for all 32 values of N.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the N of m64nNk16 (f16/bf16 inputs, f32 accumulator)
SHAPES = tuple(range(8, 257, 8))
DTYPES = ("f16", "bf16")
#: the descriptor's swizzle field (bits 62-63)
SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}


@dataclass(frozen=True)
class Variant:
    n: int
    dtype: str = "f16"
    ta: bool = False     # A stored M-major (imm-trans-a 1); else K-major
    tb: bool = False     # B stored N-major (imm-trans-b 1); else K-major

    def __post_init__(self):
        if self.n not in SHAPES or self.dtype not in DTYPES:
            raise ValueError(f"no wgmma m64n{self.n}k16 for {self.dtype}")

    @property
    def name(self) -> str:
        return (f"napkin_wgmma_m64n{self.n}k16_{self.dtype}" + ("_ta" if self.ta else "")
                + ("_tb" if self.tb else ""))


COMMON = r"""// ---- Hopper warpgroup MMA (sm_90a): codegen/wgmma_ptx.py ------------------------------------
#define NAPKIN_WGMMA_SMEM(name)                                              \
  extern __shared__ __align__(1024) unsigned char napkin_wgmma_smem_[];      \
  unsigned char* name = napkin_wgmma_smem_
// the 64-bit matrix descriptor: start address, leading and stride byte offsets (>> 4), swizzle mode
__device__ __forceinline__ unsigned long long napkin_wgmma_desc(const void* smem, unsigned lbo, unsigned sbo,
                                                                unsigned swizzle) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
  return (unsigned long long)((a & 0x3ffffu) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3fffu) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3fffu) << 32) | ((unsigned long long)(swizzle & 3u) << 62);
}
__device__ __forceinline__ void napkin_wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// shared memory written through the generic proxy (st.shared, cp.async) made visible to wgmma's
// reads through the async proxy: each writer, after its copies land and before the barrier
__device__ __forceinline__ void napkin_wgmma_proxy_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void napkin_wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int N> __device__ __forceinline__ void napkin_wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
#else
  __trap();
#endif
}
"""


def wrapper(v: Variant) -> str:
    """The C of one mma_async wrapper: `v.name(float (&d)[n / 2], desc_a, desc_b, scale_d)`."""
    regs = v.n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    ptx = (f"wgmma.mma_async.sync.aligned.m64n{v.n}k16.f32.{v.dtype}.{v.dtype} "
           f"{{{dlist}}}, %{regs}, %{regs + 1}, p, 1, 1, {int(v.ta)}, {int(v.tb)};")
    return (f"__device__ __forceinline__ void {v.name}(float (&d)[{regs}], unsigned long long da,\n"
            f"    unsigned long long db, int scale_d) {{\n"
            f"#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
            f"  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n\"\n"
            f"      \"{ptx}\\n}}\\n\"\n"
            f"      : {outs}\n"
            f"      : \"l\"(da), \"l\"(db), \"r\"(scale_d) : \"memory\");\n"
            f"#else\n"
            f"  __trap();\n"
            f"#endif\n"
            f"}}\n")


def helpers(variants) -> str:
    """The helpers' text for a kernel using `variants` (each printed once, in a stable order)."""
    body = "".join(wrapper(v) for v in sorted(set(variants), key=lambda v: (v.n, v.dtype, v.ta, v.tb)))
    return "#ifndef NAPKIN_EMULATE\n" + COMMON + body + "#endif  // !NAPKIN_EMULATE\n"
