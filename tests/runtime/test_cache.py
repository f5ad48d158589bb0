"""The disk cache: keys, damaged entries, concurrent writers, hostile directories, the CLI."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os

import pytest

from napkin.cli import main
from napkin.runtime import binaries
from napkin.runtime.cache import MAGIC, Cache, decode, encode

SOURCE = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = %d.0f; }\n'


def test_every_key_component_changes_the_key(monkeypatch):
    base = binaries.key(SOURCE % 1, "sm_90", (), (13, 5))
    variants = [
        binaries.key(SOURCE % 2, "sm_90", (), (13, 5)),
        binaries.key(SOURCE % 1, "sm_80", (), (13, 5)),
        binaries.key(SOURCE % 1, "sm_90a", (), (13, 5)),
        binaries.key(SOURCE % 1, "sm_90", ("--use_fast_math",), (13, 5)),
        binaries.key(SOURCE % 1, "sm_90", (), (13, 4)),
    ]
    monkeypatch.setattr(binaries, "VERSION", "9.9.9")
    variants.append(binaries.key(SOURCE % 1, "sm_90", (), (13, 5)))
    monkeypatch.setattr(binaries, "VERSION", "0.1.0")
    monkeypatch.setattr(binaries, "codegen_hash", lambda: "another generator")
    variants.append(binaries.key(SOURCE % 1, "sm_90", (), (13, 5)))
    from napkin.runtime.cache import key_digest
    digests = {key_digest(k) for k in variants}
    assert key_digest(base) not in digests and len(digests) == len(variants)


def test_the_codegen_hash_covers_templates_and_prelude():
    files = {p.name for p in binaries.CODEGEN.rglob("*") if p.suffix in (".py", ".j2", ".cuh")}
    assert {"kernels.cu.j2", "napkin.cuh", "kernel.py"} <= files


def test_compiles_once_then_hits(tmp_path):
    cache = Cache(tmp_path)
    first = binaries.get(SOURCE % 3, "sm_80", cache=cache)
    second = binaries.get(SOURCE % 3, "sm_80", cache=cache)
    assert not first.cached and second.cached
    assert first.cubin == second.cubin and first.ptx == second.ptx
    assert second.resources["k"]["registers"] > 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty", "header"])
def test_damaged_entries_are_detected_and_rebuilt(tmp_path, damage):
    cache = Cache(tmp_path)
    good = binaries.get(SOURCE % 4, "sm_80", cache=cache)
    (path,) = tmp_path.glob("*.entry")
    data = path.read_bytes()
    bad = {"truncate": data[:-7], "flip": data[:-1] + bytes([data[-1] ^ 1]),
           "magic": b"X" + data[1:], "empty": b"", "header": MAGIC + (10**9).to_bytes(8, "little")}[damage]
    path.write_bytes(bad)
    assert cache.get(binaries.key(SOURCE % 4, "sm_80")) is None
    again = binaries.get(SOURCE % 4, "sm_80", cache=cache)
    assert not again.cached and again.cubin == good.cubin
    assert decode(path.read_bytes()) is not None


def test_an_entry_under_another_key_is_not_loaded(tmp_path):
    cache = Cache(tmp_path)
    k1 = {"a": 1}
    cache.put(k1, {}, b"payload")
    other = {"a": 2}
    path = cache._file(k1)
    os.replace(path, cache._file(other))      # a file under the wrong name
    assert cache.get(other) is None


def _worker(args):
    path, wid = args
    cache = Cache(path)
    seen = 0
    for rep in range(3):
        for i in (0, 1, 2, wid % 3):
            b = binaries.get(SOURCE % (100 + i), "sm_80", cache=cache)
            assert b.cubin[:4] == b"\x7fELF" and ".entry k" in b.ptx
            for p, entry in cache.entries():
                if entry is not None:
                    assert entry.key["arch"] == "sm_80"
                    seen += 1
    return seen


def test_eight_processes_share_one_cache_without_torn_entries(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(8) as pool:
        results = pool.map(_worker, [(str(tmp_path), w) for w in range(8)])
    assert all(r > 0 for r in results)
    entries = Cache(tmp_path).entries()
    assert len(entries) == 3 and all(e is not None for _, e in entries)
    assert not list(tmp_path.glob(".tmp-*"))
    for _, e in entries:
        assert decode(encode(e)) == e


def test_world_writable_directory_is_refused(tmp_path, caplog):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    with caplog.at_level(logging.WARNING, logger="napkin"):
        cache = Cache(d)
    assert not cache.on_disk and "written by other users" in caplog.text
    cache.put({"a": 1}, {}, b"x")
    assert cache.get({"a": 1}).payload == b"x" and not list(d.iterdir())


def test_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    assert not Cache(tmp_path / "c").on_disk


def test_a_file_in_the_way_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    assert not Cache(tmp_path / "file").on_disk


def test_created_private(tmp_path):
    Cache(tmp_path / "new")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_cache_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "kc"))
    binaries.get(SOURCE % 7, "sm_80", cache=Cache(tmp_path / "kc"))
    assert main(["cache", "dir"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "kc")
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "sm_80" in out and "1 entry" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 file" in capsys.readouterr().out
    assert not list((tmp_path / "kc").glob("*.entry"))
