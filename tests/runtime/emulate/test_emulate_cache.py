"""The emulator's build cache as an attacker or bad luck meets it: planted, truncated, emptied,
foreign-owned, writable-by-others or linked builds are never executed; an untrusted folder is
not used; a folder that cannot be written costs a private build and a warning, not a result."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from napkin.runtime import trusted
from napkin.runtime.emulate import Launch, build as emulate_build, run, store
from napkin.runtime.emulate.hostgen import host_main_source

from .test_emulate_api import TAIL_SIG

N = 131                      # two blocks of 64 and a ragged third


def _run(kernel, x):
    launch = Launch("scale_guarded", (-(-N // 64), 1, 1), (64, 1, 1), 0, ("x", "y", N))
    return run(kernel("tail_read.cu"), TAIL_SIG, [launch], {"x": x, "y": np.zeros_like(x)})["y"]


def _expected(x):
    """y[i] = x[i] + x[i ^ 1] within each block of 64 (the partner past n reads 0)."""
    padded = np.zeros(3 * 64, np.float64)
    padded[:N] = x
    return (padded + padded[np.arange(3 * 64) ^ 1])[:N].astype(np.float32)


def _target(kernel) -> str:
    """The cache file name the build of tail_read.cu gets."""
    flags = emulate_build.flags_for("none", optimize=False)
    key = emulate_build.build_key(kernel("tail_read.cu"), host_main_source(TAIL_SIG), flags, "none",
                                  emulate_build.CXX)
    return key + store.SUFFIX


def _foreign(path, monkeypatch):
    """Make `path` belong to another user: chown as root, else the owner check is told so."""
    if os.getuid() == 0:
        os.chown(path, 54321, 54321, follow_symlinks=False)
    else:
        monkeypatch.setattr(trusted, "_uid", lambda: os.lstat(path).st_uid + 1)


def test_a_planted_build_is_never_executed(kernel, tmp_path, monkeypatch, rng, seed_support):
    cache = tmp_path / "emu"
    cache.mkdir(mode=0o700)
    seed_support(cache)
    monkeypatch.setenv("NAPKIN_EMULATOR_CACHE", str(cache))
    marker = tmp_path / "planted-ran"
    planted = cache / _target(kernel)
    # the attack of the issue: a script that copies the input buffer to the output and exits 0
    planted.write_text(f"#!/bin/sh\ntouch {marker}\ncp buf0.bin buf1.bin\n")
    planted.chmod(0o700)
    x = rng.standard_normal(N).astype(np.float32)
    np.testing.assert_array_equal(_run(kernel, x), _expected(x))
    assert not marker.exists()
    assert store.verified(planted)                      # replaced by napkin's own sealed build
    assert stat.S_IMODE(planted.stat().st_mode) == 0o700


@pytest.fixture(scope="module")
def sealed_build(kernel, tmp_path_factory, seed_support):
    """A real, sealed build (made by the planted test's run or anew) to damage in copies."""
    folder = tmp_path_factory.mktemp("emu")
    os.chmod(folder, 0o700)
    seed_support(folder)
    old = os.environ.get("NAPKIN_EMULATOR_CACHE")
    os.environ["NAPKIN_EMULATOR_CACHE"] = str(folder)
    try:
        _run(kernel, np.ones(N, np.float32))
    finally:
        if old is None:
            del os.environ["NAPKIN_EMULATOR_CACHE"]
        else:
            os.environ["NAPKIN_EMULATOR_CACHE"] = old
    (path,) = folder.glob("*" + store.SUFFIX)
    return path


DAMAGE = {
    "truncated": lambda p, mp: p.write_bytes(p.read_bytes()[:-1000]),
    "emptied": lambda p, mp: p.write_bytes(b""),
    "one byte changed": lambda p, mp: p.write_bytes(_flip(p.read_bytes(), 4000)),
    "seal cut off": lambda p, mp: p.write_bytes(p.read_bytes()[:-len(store.SEAL)]),
    "not executable": lambda p, mp: p.chmod(0o600),
    "writable by others": lambda p, mp: p.chmod(0o722),
    "foreign-owned": _foreign,
}


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_build_is_built_anew_not_executed(sealed_build, tmp_path, monkeypatch, damage,
                                                   seed_support):
    seed_support(tmp_path)
    copy = tmp_path / sealed_build.name
    shutil.copy2(sealed_build, copy)
    assert store.verified(copy)
    DAMAGE[damage](copy, monkeypatch)
    assert not store.verified(copy)
    rebuilt = []
    monkeypatch.setattr(emulate_build, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(emulate_build, "build_key", lambda *a: copy.name[:-len(store.SUFFIX)])
    monkeypatch.setattr(emulate_build, "_build_in", lambda *a: rebuilt.append(a) or a[1])
    assert emulate_build.build("source", TAIL_SIG, "none") == copy and len(rebuilt) == 1


def test_a_link_to_a_good_build_is_not_followed(sealed_build, tmp_path):
    link = tmp_path / sealed_build.name
    link.symlink_to(sealed_build)
    assert store.verified(sealed_build) and not store.verified(link)


def test_an_untrusted_folder_is_not_used(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)                                   # a /tmp-like folder without the sticky bit
    monkeypatch.setenv("NAPKIN_EMULATOR_CACHE", str(shared / "napkin"))
    with caplog.at_level(logging.WARNING, logger="napkin"):
        where = store.cache_dir()
    assert where == trusted.private_dir("emulator") and where != shared / "napkin"
    assert stat.S_IMODE(where.stat().st_mode) == 0o700 and where.stat().st_uid == os.getuid()
    assert "can be written by other users" in caplog.text


def test_a_full_folder_warns_and_answers(kernel, tmp_path, monkeypatch, caplog, rng):
    cache = tmp_path / "emu"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("NAPKIN_EMULATOR_CACHE", str(cache))
    real = tempfile.mkdtemp

    def full(suffix=None, prefix=None, dir=None):   # what a full (or read-only) disk does to
        if dir is not None and str(dir).startswith(str(cache)):   # the build folder (callers
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # pass dir by position too:
        return real(suffix, prefix, dir)                  # TemporaryDirectory, link_flags' probe)
    monkeypatch.setattr(tempfile, "mkdtemp", full)
    x = rng.standard_normal(N).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="napkin"):
        np.testing.assert_array_equal(_run(kernel, x), _expected(x))
    assert os.strerror(errno.ENOSPC) in caplog.text and "for this process only" in caplog.text
    assert not list(cache.iterdir())                        # nothing half-written left behind


def test_the_compiler_reads_the_headers_the_key_was_made_of(tmp_path, monkeypatch):
    # headers edited while a build runs (a checkout being worked on) must not reach a binary
    # cached under the old headers' key: g++ reads a private copy of the texts that were hashed
    # (here they differ from the files on disk, as after such an edit)
    texts = {name: text + "\n// as hashed\n" for name, text in emulate_build._emulator_texts().items()}
    monkeypatch.setattr(emulate_build, "_emulator_texts", lambda: dict(texts))
    monkeypatch.setattr(emulate_build, "cache_dir", lambda: tmp_path)
    read = []

    def gxx(cmd, cwd, **kw):
        """Records the header and runtime texts each g++ call would read, and writes its output."""
        dirs = [Path(cwd)] + [Path(cwd) / a[2:] for a in cmd if a.startswith("-I")]
        assert not any(d.resolve() == emulate_build.HERE for d in dirs), cmd
        for name in (emulate_build.HEADER.name, emulate_build.RUNTIME.name):
            found = next((d / name for d in dirs if (d / name).exists()), None)
            if found is not None and (name in cmd or "-include" in cmd):
                read.append((name, found.read_text()))
        (Path(cwd) / cmd[cmd.index("-o") + 1]).write_bytes(b"\x7fELF built")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(subprocess, "run", gxx)
    monkeypatch.setattr(emulate_build, "compiler_version", lambda cxx: "g++ (test)")
    target = emulate_build.build("source", TAIL_SIG, "none")
    assert store.verified(target)
    assert len(read) >= 3 and all(text == texts[name] for name, text in read)


def _support_folder(root: Path) -> Path:
    """A sealed folder shaped like build.py's support folder (without running g++)."""
    folder = root / "support-x"
    work = root / "work"
    work.mkdir(mode=0o700)
    for name, data in (("napkin_emulate.h", b"// header\n"), ("napkin_emulate.h.gch", b"gch" * 1000),
                       ("runtime.o", b"\x7fELF runtime")):
        (work / name).write_bytes(data)
    store.seal_folder(work)
    os.rename(work, folder)
    return folder


SUPPORT_DAMAGE = {
    "runtime object replaced": lambda f: (f / "runtime.o").write_bytes(b"\x7fELF planted"),
    "header truncated": lambda f: (f / "napkin_emulate.h").write_bytes(b"// hea"),
    "file planted beside (an include g++ would find first)": lambda f: (f / "cstdio").write_text("x"),
    "file removed": lambda f: (f / "napkin_emulate.h.gch").unlink(),
    "manifest edited": lambda f: (f / store.MANIFEST).write_bytes(
        (f / store.MANIFEST).read_bytes().replace(b"runtime.o", b"runtime.O")),
    "writable by others": lambda f: (f / "runtime.o").chmod(0o666),
    "a FIFO beside": lambda f: os.mkfifo(f / "pipe"),
}


@pytest.mark.parametrize("damage", sorted(SUPPORT_DAMAGE))
def test_a_damaged_support_folder_is_never_linked(tmp_path, damage):
    folder = _support_folder(tmp_path)
    assert store.verified_folder(folder)
    SUPPORT_DAMAGE[damage](folder)
    assert not store.verified_folder(folder)


def test_a_linked_or_foreign_support_folder_is_refused(tmp_path, monkeypatch):
    folder = _support_folder(tmp_path)
    link = tmp_path / "support-link"
    link.symlink_to(folder)
    assert store.verified_folder(folder) and not store.verified_folder(link)
    store._CHECKED.clear()
    _foreign(folder / "runtime.o", monkeypatch)
    assert not store.verified_folder(folder)


def test_a_planted_support_folder_is_replaced_by_a_fresh_one(tmp_path, monkeypatch):
    texts = emulate_build._emulator_texts()
    monkeypatch.setattr(emulate_build, "compiler_version", lambda cxx: "g++ (test)")
    flags = emulate_build.flags_for("none")
    compiled = []

    def gxx(cmd, cwd, cxx, what):               # build.py's g++ runner, without g++
        compiled.append(what)
        (Path(cwd) / cmd[cmd.index("-o") + 1]).write_bytes(b"\x7fELF " + what.encode())
    monkeypatch.setattr(emulate_build, "_compile", gxx)
    first = emulate_build._support(tmp_path, flags, "g++", texts)
    assert store.verified_folder(first) and len(compiled) == 2
    assert emulate_build._support(tmp_path, flags, "g++", texts) == first and len(compiled) == 2
    (first / "runtime.o").write_bytes(b"\x7fELF planted: would be linked into every build")
    again = emulate_build._support(tmp_path, flags, "g++", texts)
    assert again == first and len(compiled) == 4 and store.verified_folder(again)
    assert (again / "runtime.o").read_bytes() == b"\x7fELF the emulator runtime"
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]    # nothing left aside


def test_processes_that_need_the_same_support_folder_build_it_once(tmp_path, monkeypatch):
    # pytest's workers all start by needing the support folder of -O0 (about 2.5 CPU-s of g++
    # each): one builds it while the cache folder is locked, the others wait and use it. Here
    # two threads (each opens its own descriptor, so flock excludes them as it does processes)
    # and a g++ slow enough that, without the lock, both would compile.
    texts = emulate_build._emulator_texts()
    monkeypatch.setattr(emulate_build, "compiler_version", lambda cxx: "g++ (test)")
    flags = emulate_build.flags_for("none", optimize=False)
    compiled, started = [], threading.Barrier(2)

    def gxx(cmd, cwd, cxx, what):
        compiled.append(what)
        time.sleep(0.3)
        (Path(cwd) / cmd[cmd.index("-o") + 1]).write_bytes(b"\x7fELF " + what.encode())

    def support():
        started.wait()
        return emulate_build._support(tmp_path, flags, "g++", texts)
    monkeypatch.setattr(emulate_build, "_compile", gxx)
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: support(), range(2)))
    assert folders[0] == folders[1] and store.verified_folder(folders[0])
    assert sorted(compiled) == ["the emulator header", "the emulator runtime"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folders[0].name]  # no lock file left
