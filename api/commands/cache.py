"""`napkin cache dir|list|clear`: napkin's caches, the compiled kernels (and explain's figures)
and the CPU emulator's builds. Only files napkin wrote (its magic) are listed or removed;
links are never followed and anything else in the folders is left alone."""

from __future__ import annotations

import click


def shown(text: str) -> str:
    """A file name as printable text: control and other unprintable characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _caches():
    from ..runtime.cache import Cache
    from ..runtime.emulate import store
    return Cache(), store.cache_dir()


@click.group("cache")
def command() -> None:
    """napkin's caches: compiled kernels (NAPKIN_CACHE_DIR or the user cache directory) and
    emulator builds (NAPKIN_EMULATOR_CACHE or the user cache directory)."""


@command.command("dir")
def where() -> None:
    """Print the cache directories."""
    kernels, emulator = _caches()
    click.echo("kernels   " + (shown(str(kernels.path)) if kernels.on_disk
                               else f"(in memory: {shown(kernels.problem)})"))
    click.echo("emulator  " + shown(str(emulator)))


@command.command("list")
def listing() -> None:
    """List napkin's entries: what, size, whether intact."""
    from ..runtime.emulate import store
    kernels, emulator = _caches()
    rows = kernels.entries()
    for path, entry in rows:
        name = shown(path.name[:16])
        if entry is None:
            click.echo(f"{name:<16}  damaged (will be rebuilt)")
            continue
        key = entry.key
        if key.get("kind") == "explain-figures":      # explain's formulas (api/figures.py)
            click.echo(f"{name:<16}  {'formulas':<8} {len(entry.payload):>9,} bytes  "
                       f"napkin {shown(str(key.get('napkin', '?')))}  (explain)")
            continue
        nvrtc = key.get("nvrtc")
        nvrtc = ".".join(map(str, nvrtc)) if isinstance(nvrtc, list) else "?"
        click.echo(f"{name:<16}  {shown(str(key.get('arch', '?'))):<8} {len(entry.payload):>9,} "
                   f"bytes  napkin {shown(str(key.get('napkin', '?')))}  nvrtc {shown(nvrtc)}")
    builds = store.entries(emulator)
    for path, intact, size in builds:
        state = "emulator" if intact else "damaged (will be rebuilt)"
        click.echo(f"{shown(path.name[:16]):<16}  {state:<8} {size:>9,} bytes")
    for path, intact in store.folders(emulator):       # what builds of one flag set share
        click.echo(f"{shown(path.name[:16]):<16}  {'support' if intact else 'damaged (will be rebuilt)'}")
        builds.append(path)
    n = len(rows) + len(builds)
    click.echo(f"{n} entr{'y' if n == 1 else 'ies'} ({len(rows)} kernel cache, {len(builds)} "
               "emulator)")


@command.command("clear")
def clear() -> None:
    """Delete napkin's entries (nothing else) from both caches."""
    from ..runtime.emulate import store
    kernels, emulator = _caches()
    n = kernels.clear() + store.clear(emulator)
    click.echo(f"removed {n} file{'s' if n != 1 else ''}")
