"""The attacks of issue 17 on napkin's files and caches, rerunnable: each kind, how many
tries, and what came of them (the table in docs/reliability.md is this script's output).

    python benchmarks/attacks.py [--flips 3000] [--seed 0]

Runs in a private temporary folder (its caches included) and touches nothing else, except
`-o /dev/null`, which it writes only as root (the case that replaced the device). About a
minute on one core: one emulator build, one NVRTC compilation, the rest is file work.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import logging
import os
import random
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

ROWS: list[tuple[str, int, str]] = []
BROKEN = ("EXECUTED", "LINKED", "WRONG", "HUNG", "USED")


def row(kind: str, tried: int, outcome: str) -> None:
    """One line of the table; an outcome that counts accepted or foreign removals above zero,
    or says one of BROKEN, makes the run fail."""
    ROWS.append((kind, tried, outcome))
    print(f"{kind} | {tried} | {outcome}", flush=True)


def broken(outcome: str) -> bool:
    counted = re.findall(r"(\d+) (?:accepted|raised|foreign removed)", outcome)
    return any(word in outcome for word in BROKEN) or any(int(n) for n in counted)


@contextlib.contextmanager
def quiet():
    """The CLI's own output and napkin's warnings out of the table."""
    logging.getLogger("napkin").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        yield err


def cli(*args) -> tuple[int, str]:
    from napkin.cli import main
    with quiet() as err:
        code = main(list(args))
    return code, err.getvalue()


# --- the emulator's build cache ----------------------------------------------------------

def emulator(work: Path, rng: random.Random, tries: int) -> None:
    import napkin
    from napkin.runtime.emulate import store
    cache = Path(os.environ["NAPKIN_EMULATOR_CACHE"])
    marker = work / "planted-ran"
    x = np.random.default_rng(0).standard_normal((5, 33)).astype(np.float16)
    expected = napkin.run("softmax", x)[0]
    kernel = napkin.compile("softmax", backend="emulate")
    kernel(x)                                         # builds once: the name the plant takes
    (built,) = cache.glob("*" + store.SUFFIX)
    good = built.read_bytes()
    # the attack: a script in the build's place that copies the input to the output
    built.write_text(f"#!/bin/sh\ntouch {marker}\ncp buf0.bin buf1.bin\n")
    built.chmod(0o755)
    with quiet():
        out = kernel(x)[0]
    ok = np.array_equal(out, expected) and not marker.exists() and store.verified(built)
    row("emulator build replaced by a script (end to end: napkin.compile(..., backend='emulate'))",
        1, "rebuilt, never executed; result correct" if ok else "EXECUTED or wrong result")
    good = built.read_bytes()
    damages = {
        "truncated": lambda d: d[:rng.randrange(len(d))],
        "emptied": lambda d: b"",
        "a byte changed": lambda d: _flip(d, rng.randrange(len(d)), 1 << rng.randrange(8)),
        "seal removed": lambda d: d[:-len(store.SEAL)],
    }
    accepted = tried = 0
    probe = cache / ("0" * 64 + store.SUFFIX)
    for _ in range(tries):
        name = rng.choice(sorted(damages))
        probe.write_bytes(damages[name](good))
        probe.chmod(0o700)
        tried += 1
        accepted += store.verified(probe)
    row("emulator build truncated, emptied, one bit flipped or unsealed", tried,
        f"{accepted} accepted for execution")
    probe.write_bytes(good)
    attrs = {"group/world-writable": lambda: probe.chmod(0o722),
             "not executable": lambda: probe.chmod(0o600)}
    if os.getuid() == 0:
        attrs["owned by another user"] = lambda: os.chown(probe, 54321, 54321)
    accepted = 0
    for name, make in attrs.items():
        probe.write_bytes(good)
        probe.chmod(0o700)
        make()
        accepted += store.verified(probe)
    link = cache / ("1" * 64 + store.SUFFIX)
    link.symlink_to(built)
    accepted += store.verified(link)
    row("emulator build with a foreign owner, a loose mode, or a symlink to a good build",
        len(attrs) + 1, f"{accepted} accepted ({', '.join(attrs)}, symlink"
        + ("; foreign owner needs root: not tried" if os.getuid() else "") + ")")
    link.unlink()
    probe.unlink()
    (support,) = [f for f, _ in store.folders(cache)]
    planted = b"\x7fELF planted: linked into every build"
    (support / "runtime.o").write_bytes(planted)
    r = np.random.default_rng(1).standard_normal((3, 17)).astype(np.float16)
    g = np.random.default_rng(2).standard_normal(17).astype(np.float16)
    with quiet():
        got = napkin.compile("rmsnorm", backend="emulate")(r, g)[0].astype(np.float64)
    r64, g64 = r.astype(np.float64), g.astype(np.float64)
    want = r64 / np.sqrt((r64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * g64
    ok = (np.abs(got - want).max() < 1e-2 and (support / "runtime.o").read_bytes() != planted
          and store.verified_folder(support))
    row("emulator support folder (linked into every build): runtime object replaced (end to "
        "end, another kernel)", 1, "rebuilt, never linked; result correct" if ok
        else "LINKED or wrong result")
    beside = {"a header planted beside (cstdio)": lambda: (support / "cstdio").write_text("x"),
              "manifest edited": lambda: (support / store.MANIFEST).write_bytes(
                  (support / store.MANIFEST).read_bytes()[:-2] + b"}}"),
              "precompiled header truncated": lambda: os.truncate(support / "napkin_emulate.h.gch", 1000)}
    accepted = 0
    backup = work / "support-backup"
    shutil.copytree(support, backup)
    for name, make in beside.items():
        make()
        accepted += store.verified_folder(support)
        shutil.rmtree(support)
        shutil.copytree(backup, support)              # the intact folder again, for the next one
    shutil.rmtree(backup)
    row("emulator support folder: " + ", ".join(beside), len(beside), f"{accepted} accepted")
    shared = work / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    old = os.environ["NAPKIN_EMULATOR_CACHE"]
    os.environ["NAPKIN_EMULATOR_CACHE"] = str(shared / "napkin")
    with quiet():
        used = store.cache_dir()
    os.environ["NAPKIN_EMULATOR_CACHE"] = old
    row("emulator cache in a folder others can write (the old $TMPDIR fallback)", 1,
        "not used: a private 0700 folder instead, one warning" if not str(used).startswith(str(shared))
        else "USED")


def _flip(data: bytes, at: int, bit: int) -> bytes:
    return data[:at] + bytes([data[at] ^ bit]) + data[at + 1:]


# --- the kernel cache ---------------------------------------------------------------------

def kernel_cache(work: Path, rng: random.Random, flips: int) -> None:
    from napkin.runtime import binaries, nvrtc
    from napkin.runtime.cache import MAGIC, Cache, decode
    if not nvrtc.available():
        row("kernel cache entries", 0, "NVRTC not installed: not tried")
        return
    folder = work / "kc"
    cache = Cache(folder)
    source = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 3.0f; }\n'
    real = binaries.get(source, "sm_80", cache=cache)
    (path,) = folder.glob("*.entry")
    data = path.read_bytes()
    accepted = 0
    for _ in range(flips):
        accepted += decode(_flip(data, rng.randrange(len(data)), 1 << rng.randrange(8))) is not None
    row(f"kernel cache entry ({len(data):,} bytes): one random bit flipped", flips,
        f"{accepted} accepted")
    edits = [data.replace(b'"registers": ', b'"registers": 9'), data.replace(b".entry k", b".entry z")]
    row("kernel cache entry: registers or PTX edited", len(edits),
        f"{sum(decode(e) is not None for e in edits)} accepted")
    import hashlib
    headers = [b"[" * 200_000, b'{"key": [1], "meta": {}, "length": 0}', b'{"key": {}, "meta": 1}',
               b"\xff\xfe", b"null", b"1e999999", b'{"key": {}, "meta": {"ptx": 3}, "length": 0}']
    raised = 0
    for h in headers:
        body = len(h).to_bytes(8, "little") + h
        path.write_bytes(MAGIC + hashlib.sha256(body).digest() + body)
        try:
            again = binaries.get(source, "sm_80", cache=cache)
            raised += again.cubin != real.cubin
        except Exception:  # noqa: BLE001 - what this row counts
            raised += 1
    row("kernel cache entry with a valid checksum and a malformed header (deep nesting, a list "
        "key, bad types)", len(headers), f"{raised} raised or wrong; the rest rebuilt")
    for code in (errno.ENOSPC, errno.EROFS):
        real_replace = os.replace

        def refuse(*a, **k):
            raise OSError(code, os.strerror(code))
        os.replace = refuse
        try:
            with quiet():
                got = binaries.get(source, "sm_80", cache=Cache(work / f"full{code}"))
        finally:
            os.replace = real_replace
        row(f"kernel cache write fails ({errno.errorcode[code]})", 1,
            "warning, correct result" if got.cubin == real.cubin else "WRONG")


def cache_commands(work: Path, rng: random.Random, junk: int) -> None:
    from napkin.runtime import binaries, nvrtc
    from napkin.runtime.cache import MAGIC, Cache
    folder = work / "junk"
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / "fifo.entry")
    (folder / "dir.entry").mkdir()
    (folder / "link.entry").symlink_to("/etc/hostname")
    (folder / "ctl\x1b[2J\x07.entry").write_bytes(MAGIC + b"damaged")
    (folder / "meeting.entry").write_text("notes")
    (folder / ".tmp-draft.txt").write_text("draft")
    for i in range(junk):
        (folder / f"{i:05}{rng.choice(['.entry', '.emu', ''])}").write_bytes(
            bytes(rng.randrange(256) for _ in range(rng.randrange(200))))
    if nvrtc.available():
        binaries.get('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n', "sm_80",
                     cache=Cache(folder))
    os.environ["NAPKIN_CACHE_DIR"] = str(folder)
    result: list = []
    t0 = time.monotonic()
    worker = threading.Thread(target=lambda: result.append(cli("cache", "list")), daemon=True)
    worker.start()
    worker.join(timeout=30)
    seconds = time.monotonic() - t0
    shown = result and result[0][0] == 0
    row(f"napkin cache list on {junk + 6} junk files (FIFO, folder, symlink, control characters, "
        "random bytes)", 1, f"answered in {seconds:.2f} s" if shown else "HUNG or crashed")
    before = set(os.listdir(folder))
    cli("cache", "clear")
    removed = before - set(os.listdir(folder))
    foreign = {n for n in removed if n.startswith(("meeting", ".tmp-draft", "link", "fifo", "dir"))
               or n[:5].isdigit()}
    row("napkin cache clear beside foreign files", len(before),
        f"{len(removed)} of napkin's removed, {len(foreign)} foreign removed")


# --- output paths and inputs --------------------------------------------------------------

def outputs(work: Path) -> None:
    tried, bad = 0, []
    if os.getuid() == 0:
        tried += 1
        cli("compile", "softmax", "-o", "/dev/null")
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
            bad.append("/dev/null")
    target = work / "real.cu"
    target.write_text("old")
    (work / "link.cu").symlink_to(target)
    tried += 1
    cli("compile", "softmax", "-o", str(work / "link.cu"))
    if not ((work / "link.cu").is_symlink() and "__global__" in target.read_text()):
        bad.append("symlink")
    fifo = work / "pipe"
    os.mkfifo(fifo)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    tried += 1
    cli("draw", "softmax", "-o", str(fifo))
    reader.join(timeout=30)
    if not (got and got[0].startswith(b"<svg") and stat.S_ISFIFO(os.lstat(fifo).st_mode)):
        bad.append("FIFO")
    import subprocess
    tried += 1
    proc = subprocess.run([sys.executable, "-c", "from napkin.cli import main; main()", "draw",
                           "softmax", "-o", "/dev/stdout"], capture_output=True, text=True)
    if not (proc.returncode == 0 and proc.stdout.startswith("<svg")):
        bad.append("/dev/stdout")
    for path in (work / "missing" / "x.cu", work):
        tried += 1
        code, err = cli("compile", "softmax", "-o", str(path))
        if code == 0:
            bad.append(str(path))
    row("-o to /dev/null (as root" + ("" if os.getuid() == 0 else ": not root, not tried")
        + "), a symlink, a FIFO, /dev/stdout, a missing folder, a folder", tried,
        f"{tried - len(bad)} as specified" + (f"; WRONG: {bad}" if bad else ""))


def inputs(work: Path) -> None:
    import ml_dtypes

    import napkin
    from napkin.diagrams.diagnostics import NapkinError
    cases = []
    np.save(work / "x.npy", np.ones((3, 4), np.float16))
    cases.append(("--inputs x.npy (one input)", cli("run", "softmax", "--inputs", str(work / "x.npy"))[0] == 0))
    code, err = cli("run", "matmul", "--inputs", str(work / "x.npy"))
    cases.append(("--inputs x.npy (two inputs)", code == 1 and "N0806" in err))
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": (10**6, 10**6)})
    with zipfile.ZipFile(work / "huge.npz", "w") as z:
        z.writestr("X.npy", buf.getvalue() + b"\0" * 64)
    code, err = cli("run", "softmax", "--inputs", str(work / "huge.npz"))
    cases.append(("npz header declaring (1e6, 1e6)", code == 1 and "N0806" in err))
    code, err = cli("run", "softmax", "--shape", "r=100000000000,c=4")
    cases.append(("--shape r=1e11,c=4", code == 1 and "N0310" in err))
    code, err = cli("check", "softmax", "-D", "c=1099511627777")
    cases.append(("-D c=2^40+1", code == 2 and "1,099,511,627,776" in err))
    x = np.array([[2**62, 1]], np.int64)
    codes = []
    for call in (lambda: napkin.run("softmax", x), lambda: napkin.compile("softmax", backend="reference")(x)):
        try:
            call()
            codes.append(None)
        except NapkinError as exc:
            codes.append(exc.code)
    np.savez(work / "i.npz", X=x)
    code, err = cli("run", "softmax", "--inputs", str(work / "i.npz"))
    cases.append(("int64 2^62 on napkin.run, a compiled kernel, --inputs",
                  codes == ["N0405", "N0405"] and code == 1 and "N0405" in err))
    path = work / "bf.napkin"
    path.write_text("axis r, c\nin X[r c]: bf16\nY[r c] = X * 2\nout Y: bf16\n")
    cli("run", str(path), "--shape", "r=3,c=5", "--save", str(work / "bf.npz"))
    with np.load(work / "bf.npz") as z:
        np.savez(work / "bf_in.npz", X=z["Y"])
        y = z["Y"].view(ml_dtypes.bfloat16)
    cli("run", str(path), "--inputs", str(work / "bf_in.npz"), "--save", str(work / "bf2.npz"))
    with np.load(work / "bf2.npz") as z:
        twice = z["Y"].view(ml_dtypes.bfloat16)
    cases.append(("bf16 through --save then --inputs",
                  np.array_equal(twice.astype(np.float64), 2 * y.astype(np.float64))))
    empty = []
    for backend in ("reference", "interpret"):
        empty.append(napkin.compile("softmax", backend=backend)(np.zeros((0, 5), np.float16))[0].shape)
    cases.append(("empty (0, 5) array through compiled kernels", empty == [(0, 5)] * 2))
    bad = [name for name, ok in cases if not ok]
    row("inputs: .npy, a lying npz header, --shape past memory, -D past 2^40, int64 2^62, bf16 "
        "round trip, empty arrays", len(cases), f"{len(cases) - len(bad)} clean errors or correct"
        + (f"; WRONG: {bad}" if bad else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flips", type=int, default=3000)
    ap.add_argument("--damaged", type=int, default=200)
    ap.add_argument("--junk", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="napkin-attacks-") as tmp:
        work = Path(tmp)
        os.environ["NAPKIN_CACHE_DIR"] = str(work / "kernels")
        os.environ["NAPKIN_EMULATOR_CACHE"] = str(work / "emulator")
        os.chdir(work)
        print("kind | tried | outcome")
        emulator(work, rng, args.damaged)
        kernel_cache(work, rng, args.flips)
        cache_commands(work, rng, args.junk)
        outputs(work)
        inputs(work)
        os.chdir(ROOT)
    print(f"({time.time() - t0:.0f} s; uid {os.getuid()}; python benchmarks/attacks.py "
          + " ".join(sys.argv[1:]) + ")")
    if any(broken(o) for _, _, o in ROWS):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
