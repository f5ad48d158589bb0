"""napkin's version: the one place it is written (pyproject.toml reads it, the CLI prints it,
the kernel cache keys on it). It lives in the lowest layer so that every layer can read it."""

VERSION = "0.1.0"
