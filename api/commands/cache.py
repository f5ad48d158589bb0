"""`napkin cache dir|list|clear`: the disk cache of compiled kernels."""

from __future__ import annotations

import click


@click.group("cache")
def command() -> None:
    """The disk cache of compiled kernels (NAPKIN_CACHE_DIR or the user cache directory)."""


@command.command("dir")
def where() -> None:
    """Print the cache directory."""
    from ..runtime.cache import Cache
    c = Cache()
    click.echo(str(c.path) if c.on_disk else f"(in memory: {c.problem})")


@command.command("list")
def listing() -> None:
    """List the entries: arch, size, whether intact."""
    from ..runtime.cache import Cache
    c = Cache()
    rows = c.entries()
    for path, entry in rows:
        if entry is None:
            click.echo(f"{path.name}  damaged (will be rebuilt)")
        else:
            key = entry.key if isinstance(entry.key, dict) else {}
            if key.get("kind") == "explain-figures":      # explain's formulas (api/figures.py)
                click.echo(f"{path.name[:16]}  {'formulas':<8} {len(entry.payload):>9,} bytes  "
                           f"napkin {key.get('napkin', '?')}  (explain)")
                continue
            click.echo(f"{path.name[:16]}  {key.get('arch', '?'):<8} {len(entry.payload):>9,} bytes  "
                       f"napkin {key.get('napkin', '?')}  nvrtc {'.'.join(map(str, key.get('nvrtc', [])))}")
    click.echo(f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")


@command.command("clear")
def clear() -> None:
    """Delete every entry."""
    from ..runtime.cache import Cache
    n = Cache().clear()
    click.echo(f"removed {n} file{'s' if n != 1 else ''}")
