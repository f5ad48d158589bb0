"""runtime/files.py: output files are written whole, with the permissions open() would give;
devices, FIFOs and symlinks are written through, never replaced."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

from napkin.cli import main
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime.files import check_output, save_npz, write_atomic


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


def test_a_device_is_written_not_replaced():
    # as root the old os.replace turned /dev/null into a regular file; as anyone it now writes
    before = os.stat("/dev/null")
    write_atomic("/dev/null", "kernel text")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_dev_null_as_root_through_the_cli(capsys):
    if os.getuid() != 0:
        pytest.skip("only root could replace /dev/null; as another user the write is refused "
                    "by the system, and test_a_device_is_written_not_replaced covers the rule")
    assert main(["compile", "softmax", "-o", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_is_written_through(tmp_path):
    target = tmp_path / "real.cu"
    target.write_text("old")
    link = tmp_path / "link.cu"
    link.symlink_to(target)
    assert main(["compile", "softmax", "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("// ") and "__global__" in target.read_text()
    dangling = tmp_path / "dangling.cu"
    dangling.symlink_to(tmp_path / "new.cu")
    write_atomic(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "new.cu").read_text() == "made"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.cu", "link.cu", "new.cu", "real.cu"]


def test_a_fifo_is_written_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_draw_to_dev_stdout():
    proc = subprocess.run([sys.executable, "-c", "from napkin.cli import main; main()", "draw", "softmax", "-o", "/dev/stdout"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<svg") and proc.stdout.rstrip().endswith("</svg>")


def test_a_path_that_cannot_be_written_fails_before_any_work(tmp_path, monkeypatch, capsys):
    import napkin.commands.compile_ as compile_
    monkeypatch.setattr(compile_, "emit", lambda *a, **k: pytest.fail("compiled before checking -o"))
    for path, why in [(tmp_path / "missing" / "out.cu", "does not exist"),
                      (tmp_path, "is a directory")]:
        assert main(["compile", "softmax", "-o", str(path)]) in (1, 2)
        err = capsys.readouterr().err
        assert why in err or "directory" in err
    (tmp_path / "sub").mkdir()
    with pytest.raises(NapkinError) as exc:
        check_output(tmp_path / "sub")
    assert exc.value.diagnostics[0].code == "N0807" and "is a directory" in str(exc.value)


def test_an_unwritable_directory_fails_before_any_work(tmp_path):
    if os.getuid() == 0:
        pytest.skip("root may write into a 0500 directory")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(NapkinError) as exc:
        check_output(ro / "out.cu")
    assert "permission denied" in str(exc.value)


def test_nothing_half_written_when_the_disk_fills(tmp_path, monkeypatch):
    path = tmp_path / "out.cu"
    path.write_text("the old file")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(NapkinError) as exc:
        write_atomic(path, "x" * 100_000)
    assert exc.value.diagnostics[0].code == "N0807" and "No space left" in str(exc.value)
    assert path.read_text() == "the old file" and [p.name for p in tmp_path.iterdir()] == ["out.cu"]


def test_a_read_only_file_is_not_replaced(tmp_path, monkeypatch, capsys):
    """A file with no write permission is refused before any work and by the write itself
    (the directory being writable would let an atomic rename replace it): as root too."""
    import napkin.commands.compile_ as compile_
    path = tmp_path / "out.cu"
    path.write_text("the user's file")
    path.chmod(0o444)
    monkeypatch.setattr(compile_, "emit", lambda *a, **k: pytest.fail("compiled before checking -o"))
    assert main(["compile", "softmax", "-o", str(path)]) in (1, 2)
    assert "read-only" in capsys.readouterr().err
    with pytest.raises(NapkinError) as exc:
        write_atomic(path, "new text")
    assert exc.value.diagnostics[0].code == "N0807" and "chmod" in exc.value.diagnostics[0].help
    assert path.read_text() == "the user's file" and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert [p.name for p in tmp_path.iterdir()] == ["out.cu"]
    link = tmp_path / "link.cu"                 # through a link to it: refused the same way
    link.symlink_to(path)
    with pytest.raises(NapkinError):
        write_atomic(link, "new text")
    assert path.read_text() == "the user's file"


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("old")
    path.chmod(0o751)
    write_atomic(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o751
