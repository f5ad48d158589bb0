"""The `plot` extra (matplotlib for the roofline, resvg-py for PNG pictures): optional
imports that fail as BackendUnavailable (N0901, exit status 3) with the install line."""

from __future__ import annotations

from typing import Callable

from ..diagrams.diagnostics import BackendUnavailable, Diagnostic

INSTALL = "pip install 'napkin[plot]'"


def need(load: Callable, package: str, purpose: str, alternative: str = ""):
    """`load()`'s result, or N0901 naming the package and what needed it."""
    try:
        return load()
    except ImportError as exc:
        raise BackendUnavailable(Diagnostic(
            "N0901", f"{package} is not installed, and {purpose} needs it ({exc})",
            help=f"install the plot extra: {INSTALL}{alternative}")) from None
