"""runtime/files.py: output files are written whole, with the permissions open() would give."""

from __future__ import annotations

import os

import numpy as np
import pytest

from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime.files import save_npz, write_atomic


def test_written_whole_with_umask_permissions(tmp_path, monkeypatch):
    import napkin.runtime.files as files
    assert files._UMASK == _current_umask()
    monkeypatch.setattr(files, "_UMASK", 0o022)
    write_atomic(tmp_path / "out.cu", "kernel text")
    path = tmp_path / "out.cu"
    assert path.read_text() == "kernel text"
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.cu"]   # no temporary left behind


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_replaces_existing_file_and_writes_bytes(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"old")
    write_atomic(path, b"\x00\x01new")
    assert path.read_bytes() == b"\x00\x01new"


def test_unwritable_directory_is_a_user_error(tmp_path):
    with pytest.raises(NapkinError) as exc:
        write_atomic(tmp_path / "missing" / "out.cu", "x")
    assert exc.value.diagnostics[0].code == "N0807"
    assert not (tmp_path / "missing").exists()


def test_save_npz_round_trips(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_npz(tmp_path / "a.npz", {"A": a})
    with np.load(tmp_path / "a.npz") as z:
        np.testing.assert_array_equal(z["A"], a)
