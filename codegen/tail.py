"""A split's merge run by the partial kernel's last block of each output tile (compiler/last_block.py).

After the partial kernel's block body, for the tile it just computed:

    __threadfence(); __syncthreads();             // its partial states visible to all
    if (tid == 0) { __threadfence(); last = atomicAdd(&count[tile], 1) == blocks - 1; }
    __syncthreads();
    if (last) {                                   // every other split of the tile is stored
      __threadfence();
      { the merge kernel's block for this tile }  // one block per merge kernel, in order
      if (tid == 0) count[tile] = 0;              // ready for the next launch
    }
    __syncthreads();

The merge kernel's block is its own lowering (`KernelLowering`), its origins the partial
kernel's (`to_*`: copied before its scope opens, where its own names take over), its
threads the partial kernel's (lanes past its own count compute nothing it stores), its
shared buffers after the partial kernel's. It reads the partial states through L2
(`__ldcg`): another SM wrote them during this launch, and this SM's L1 may hold a stale line.
"""

from __future__ import annotations

from . import program as P
from . import staging
from .kernel import KernelLowering

FLAG = "napkin_last"       # a block's verdict, in the dynamic shared memory
FLAG_BYTES = 4
TILE = "napkin_tile"       # the output tile's counter index


class MergeLowering(KernelLowering):
    """One merge kernel's block, inside the partial kernel (no grid loop of its own)."""

    grid_origins = False    # (the partial's block origins, not this block's tiles)

    def __init__(self, plan, kp, names, sizes, index_type, partial: KernelLowering,
                 origins: dict[str, str], coherent: set[int]):
        super().__init__(plan, kp, names, sizes, index_type)
        self.smem, self.smem_terms = partial.smem, partial.smem_terms   # after the partial's
        self.smem_prefix = f"{partial.smem_prefix}m{len(partial.smem)}_"
        self.threads = partial.threads    # the staging loops stride by the launched threads
        self.origins = origins
        self.coherent = coherent

    def _grid(self, name: str):
        self._block_body()
        return None

    def _origins(self) -> None:
        for a in self.woven:
            self.b.emit(P.Decl(f"const {self.itype}", self._axis_var("org", a),
                               f"({self.itype})({self.origins.get(a, '0')})"))

    def statements(self) -> tuple:
        self.build("")
        return tuple(self.b.statements)


class Tail:
    """What the partial kernel's lowering emits after each block tile (`KernelLowering.tail`)."""

    def __init__(self, plan, tail, merges, counter: str, sizes: dict):
        self.plan, self.tail, self.merges = plan, tail, merges   # merges: (kp, names)
        self.counter, self.sizes = counter, sizes

    def emit(self, lw: KernelLowering) -> None:
        b = lw.b
        if not any(buf.name == FLAG for buf in lw.smem):   # after the partial kernel's buffers
            lw.smem.append(P.SharedBuffer(FLAG, "int", staging.next_offset(lw.smem), "1"))
            lw.smem_terms.append((FLAG_BYTES,))
        offset = next(buf.offset for buf in lw.smem if buf.name == FLAG)
        b.emit(P.Decl("int* const", FLAG, f"reinterpret_cast<int*>(smem + {offset})"))
        index = "0LL"
        for a in self.tail.axes:
            tiles = f"(((long long)({self.sizes[a]}) + {lw.tile[a] - 1}) / {lw.tile[a]})"
            index = f"({index}) * {tiles} + (long long)({lw._axis_var('org', a)}) / {lw.tile[a]}"
        b.emit(P.Decl("const long long", TILE, index))
        b.emit(P.Call("__threadfence", ()))
        b.emit(P.Barrier())
        b.emit(P.If("threadIdx.x == 0", (P.Call("__threadfence", ()), P.Set(
            f"{FLAG}[0]", f"atomicAdd(&{self.counter}[{TILE}], 1) == {self.tail.blocks - 1}"),)))
        b.emit(P.Barrier())
        body = [P.Call("__threadfence", ())]
        origins = {}
        for i, a in enumerate(self.tail.axes):
            body.append(P.Decl("const long long", f"to_{i}", lw._axis_var("org", a)))
            origins[a] = f"to_{i}"
        partials = set(lw.k.stores)
        for j, (kp, names) in enumerate(self.merges):
            # the merge's block tile is the partial's output tile clamped to the planning
            # sizes (last_block._merge_plan): where it is smaller (decode planned at q=1, the
            # partial's 16 fragment rows), its block runs once per piece of the output tile
            # (run at q=3: rows 1 and 2 merged too), a barrier between (its shared buffers)
            pieces = {a: f"tm{j}_{i}" for i, a in enumerate(self.tail.axes)
                      if kp.schedule.block_tile().get(a, lw.tile[a]) < lw.tile[a]}
            merge = MergeLowering(self.plan, kp, names, self.sizes, kp.schedule.index, lw,
                                  {**origins, **pieces}, partials)
            block = (P.Block(merge.statements()),)
            for i, a in reversed(list(enumerate(self.tail.axes))):
                if a in pieces:
                    step = kp.schedule.block_tile()[a]
                    end = f"to_{i} + {lw.tile[a]}"
                    block = (P.For(pieces[a], f"to_{i}", f"{pieces[a]} < {end} && "
                                   f"{pieces[a]} < (long long)({self.sizes[a]})",
                                   f"{pieces[a]} += {step}", block + (P.Barrier(),),
                                   ctype="long long"),)
            body.extend(block)
        body.append(P.If("threadIdx.x == 0", (P.Set(f"{self.counter}[{TILE}]", "0"),)))
        b.emit(P.If(f"{FLAG}[0]", tuple(body)))
        b.emit(P.Barrier())
