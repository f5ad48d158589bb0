"""Head axes of any size on the tensor cores: tiles padded with zeros in shared memory.

FlashAttention (flash.py) and the chains of products (chain.py) hold their head axes whole
in a block: Q K reads the contracted head in 16-wide slices (m16n8k16's k), P V and a
chain's outputs keep their head in 8-wide fragments (its n). A head of another size (Stable
Diffusion's 40, 24, 72, 200) is padded, as FlashAttention-2 does for every d <= 256:

- each shared tile holding the axis is `extent` wide, the next multiple of 16 where any
  product of the site contracts the axis over that tile's operand, else of 8 (an array read
  both ways, a chain's Q as a score's B and an output's C, takes the wider); the copies
  write the real columns and zeros past them (codegen/tiles.py: the tile axis's bound, so
  a 16-byte cp.async where the rows allow, src-size 0 past the head; a head whose rows are
  not 16-byte multiples, d = 36's 72 bytes, by 8- or 4-byte ones where they are multiples
  of those, copies.vector_values, else one value at a time);
- the fragments cover the padded width: the zeros add nothing to Q K, and P V's padded
  columns come out 0 and are never stored (every store tests its column against the size);
- the model charges the padded tensor work and shared memory and the real bytes of HBM.

Decided once, in `examine` of the sites, and recorded on the site (`padded`: (node, axis,
extent) for each operand tile and each product whose extent differs from the axis's size);
the schedule's tile layouts, codegen, the model (Model.padded, tensorcore.for_site) and
explain read it. Specialisation (specialise.py) takes such sizes as it takes 64.
"""

from __future__ import annotations

from .choices import NUMBERS
from .copies import vector_values

CONTRACTED, KEPT = 16, 8     # m16n8k16: k (a contracted head), n (a kept one)
VECTOR = 8                   # 16-bit values of a 16-byte cp.async (codegen/tiles.VECTOR)


def up(size: int, multiple: int) -> int:
    """`size` rounded up to a multiple of `multiple`."""
    return -(-size // multiple) * multiple


def extent(site, node: int, axis: str, size: int) -> int:
    """What node's tile (or a product's fragments) covers of `axis` (recorded on the site's
    `padded`), `size` where it is not padded."""
    return padded_extent(getattr(site, "padded", ()), node, axis, size)


def padded_extent(padded, node: int, axis: str, size):
    """`extent` from a model's `padded` (Model.padded): node's tile's extent along axis."""
    return next((e for n, a, e in padded if n == node and a == axis), size)


def head_tile(site) -> int:
    """An attention's dk as Q K's fragments cover it (a multiple of 16; flash.FlashSite)."""
    return extent(site, site.scores, site.dk, site.head)


def width_tile(site) -> int:
    """An attention's dv as P V's fragments cover it (a multiple of 8; flash.FlashSite)."""
    return extent(site, site.out, site.dv, site.width)


def decide(tiles, products, sizes: dict) -> tuple[tuple[int, str, int], ...]:
    """The site's `padded`: `tiles` (operand node, axis, contracted?) for every tile holding
    a head axis whole, `products` (contraction node, axis, contracted?) for every product
    over one; each padded to 16 contracted or 8 kept (a tile to the widest of its roles),
    only those whose extent differs from the size."""
    def multiple(contracted: bool) -> int:
        return CONTRACTED if contracted else KEPT
    wide: dict = {}
    for n, a, contracted in tiles:
        wide[(n, a)] = max(wide.get((n, a), 1), multiple(contracted))
    out = [(n, a, up(sizes[a], m)) for (n, a), m in wide.items()]
    out += [(n, a, up(sizes[a], multiple(c))) for n, a, c in products]
    return tuple(dict.fromkeys((n, a, e) for n, a, e in out if e != sizes[a]))


def ratio(padded, node: int, sizes: dict):
    """The tensor work of contraction `node` padded over the real: the product of its padded
    axes' extent / size (Model.padded; 1 where none is padded)."""
    out = 1.0
    for n, a, e in padded:
        if n == node:
            out = out * e / sizes[a]
    return out


def fragments(width, multiple: int = KEPT):
    """8-wide (or `multiple`) fragments covering `width` values (numbers or arrays)."""
    return NUMBERS.ceil(width / multiple)


def describe(site, axis_sizes: dict, work: dict) -> list[str]:
    """explain's lines: each padded head, its tiles' widths and the tensor work it adds
    (`work`: contraction node -> its real FLOPs)."""
    padded = [(n, a, e) for n, a, e in getattr(site, "padded", ()) if n in work]
    if not padded:
        return []
    real = sum(work.values())
    more = sum(work[n] * (ratio(padded, n, axis_sizes) - 1) for n in {n for n, _, _ in padded})
    tiles = {}
    for n, a, e in getattr(site, "padded", ()):
        if n not in work:
            tiles.setdefault(a, set()).add(e)
    heads = ", ".join(f"{a} = {axis_sizes[a]} padded to "
                      f"{' and '.join(str(e) for e in sorted(es))}"
                      for a, es in sorted(tiles.items()))
    out = [f"{heads} in shared memory (zeros past the head, only its real columns stored): "
           f"{more / real:.0%} more tensor work"]
    for a in sorted(tiles):     # (codegen/tiles: no copy straddles a row's end)
        if axis_sizes[a] % VECTOR:
            width = vector_values(axis_sizes[a], up(axis_sizes[a], KEPT), 16 // VECTOR)
            how = f"{width * 16 // VECTOR} bytes" if width > 1 else "one value"
            out.append(f"rows of {a} = {axis_sizes[a]} are no 16-byte multiple: its tiles "
                       f"are copied {how} at a time")
    return out


__all__ = ["CONTRACTED", "KEPT", "up", "extent", "padded_extent", "head_tile", "width_tile", "decide", "ratio", "fragments", "describe"]
