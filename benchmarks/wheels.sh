#!/usr/bin/env bash
# Wheels for the device machine, which has Python 3.12, CuPy, PyTorch and Triton but not
# napkin's pure-Python dependencies: napkin's own wheel and theirs, into .whl/ (git-ignored;
# pass it to the device tool's `carry`). On the device:
#
#   pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   PYTHONPATH=/tmp/site python benchmarks/gpu_check.py --out "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
mkdir .whl
python -m pip wheel -q --no-deps -w .whl .
# the dependencies of pyproject.toml the device lacks, and theirs (numpy it has)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d .whl \
    lark networkx jinja2 markupsafe sympy mpmath click rich markdown-it-py mdurl pygments \
    ml_dtypes platformdirs
du -sh .whl
ls .whl
