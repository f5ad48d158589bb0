"""What every CLI command shares: the diagram argument, -D sizes, diagnostics output."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click

from .diagrams.diagnostics import Diagnostic, NapkinError, UsageError, error
from .diagrams.limits import MAX_SIZE
from .diagrams.render import render, to_json

if TYPE_CHECKING:   # rich loads only when there is something to print (see cli._Stderr)
    from rich.console import Console

REPORT_URL = "https://github.com/napkin-compiler/napkin/issues"


class _Output:
    """Collects warnings and errors; prints them once, as text or JSON, to stderr."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.format = "human"
        self.items: list[Diagnostic] = []

    def warn(self, diagnostics) -> None:
        self.items.extend(diagnostics)

    def fail(self, exc: NapkinError) -> None:
        self.items.extend(exc.diagnostics)

    def flush(self, console: Console) -> None:
        items, self.items = self.items, []
        if self.format == "json":
            console.file.write(to_json(items) + "\n")
            return
        render(items, console)


OUTPUT = _Output()


def parse_assignments(values, option: str) -> dict[str, int]:
    """`d=128` or `q=128,x=96` (repeatable) to {"d": 128, ...}; --split's names may be
    ARRAY:AXIS (`dg:r=8`, a split of the kernel computing dg alone)."""
    out: dict[str, int] = {}
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            name, eq, num = part.partition("=")
            name, num = name.strip(), num.strip()
            # ASCII digits only: str.isdigit() also admits '²' and other digits int() refuses
            names = name.split(":", 1) if option == "--split" else [name]
            if not eq or not all(n.isidentifier() for n in names) or \
                    not (num.isascii() and num.isdigit()):
                raise UsageError(error(
                    "N0804", f"{option} {part!r}: expected "
                    f"{'[ARRAY:]AXIS=COUNT' if option == '--split' else 'NAME=SIZE'} with a "
                    "whole number", help=f"for example {option} d=128" + (
                        ",q=256" if option == "--shape" else " or --split dg:r=8 (the kernel "
                        "computing dg alone)" if option == "--split" else "")).diagnostics)
            # (a whole number of 20 digits is past the limit too, said so; the length is
            # checked before int() reads the digits: a million of them is no size either)
            if len(num.lstrip("0")) > len(str(MAX_SIZE)) or int(num) > MAX_SIZE:
                shown = part if len(part) <= 40 else f"{part[:30]}... ({len(num)} digits)"
                raise UsageError(error(
                    "N0804", f"{option} {shown!r}: larger than the limit {MAX_SIZE:,} (2^40)",
                    help="sizes must fit in 64-bit index arithmetic").diagnostics)
            if name in out and out[name] != int(num):
                raise UsageError(error("N0804", f"{option}: `{name}` is given twice",
                                       help="give each axis one size").diagnostics)
            out[name] = int(num)
    return out


def _set_format(ctx, param, value):
    if value is not None:
        OUTPUT.format = value
    return value


def diagram_options(fn):
    """Adds DIAGRAM, -D NAME=SIZE and --diagnostics to a command."""
    @click.argument("diagram", metavar="FILE|NAME")
    @click.option("-D", "--define", "defines", multiple=True, metavar="NAME=SIZE",
                  help="Fix or override an axis size (repeatable): -D d=128.")
    @click.option("--diagnostics", type=click.Choice(["human", "json"]), default=None,
                  expose_value=False, callback=_set_format, is_eager=True,
                  help="How to print errors and warnings (to stderr).")
    @functools.wraps(fn)
    def wrapper(diagram, defines, **kwargs):
        return fn(diagram=diagram, sizes=parse_assignments(defines, "-D"), **kwargs)
    return wrapper


ENGINE_HELP = ("Where contractions run: auto (the planner chooses per kernel), tensor-cores "
               "(every kernel with a contraction on mma.sync, or an error saying why one "
               "cannot), cuda-cores.")
# --engine, as every command that plans takes it
engine_option = click.option("--engine", type=click.Choice(["auto", "tensor-cores",
                                                            "cuda-cores"]),
                             default="auto", show_default=True, help=ENGINE_HELP)


SPLIT_HELP = ("Split a reduced axis across blocks and merge their partial states: "
              "--split x=8 across the diagram, or --split dg:r=8 in the kernel computing dg "
              "alone, the other kernels unchanged (repeatable, one axis each; default: the "
              "planner splits when it predicts a gain).")
LANES_HELP = ("Split a reduced axis over a block's lanes, whose partial states merge by "
              "shuffles within a warp and across warps through shared memory: --lanes c=256 "
              "(2 to 1024, a power of two; default: the planner's).")
MERGE_HELP = ("Where a split's partial states merge: kernel (a kernel of their own), "
              "last-block (the partial kernel's last block of each output tile), auto (the "
              "faster by the model).")
# --merge, as every command that plans takes it
merge_option = click.option("--merge", type=click.Choice(["auto", "kernel", "last-block"]),
                            default="auto", show_default=True, help=MERGE_HELP)


def planning_options(default_target: str | None = None, arch: str | None = None):
    """Adds --target, --shape, --group, --stream, --split, --lanes, --merge, --engine, --no-fusion,
    --data (and --arch when `arch`
    is the help of its default) to a command, which receives them as one checked
    `options: napkin.pipeline.Options` and `planned: bool` (whether any was given)."""
    from .compiler import target as targets

    def decorate(fn):
        @click.option("--target", "target_name", default=default_target,
                      show_default=default_target is not None,
                      help="Target to plan for: " + ", ".join(targets.names())
                      + " (two-level:M=BYTES sets M)" + ("" if default_target else
                                                         f"; default {targets.DEFAULT}") + ".")
        @click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
                      help="Sizes of dynamic axes to plan for (default: 1024 each).")
        @click.option("--group", "groups", multiple=True, metavar="AXIS=SIZE,...",
                      help="Fix group sizes at the block level: --group q=128.")
        @click.option("--stream", "streams", multiple=True, metavar="AXIS=SIZE,...",
                      help="Fix the streamed axis and its chunk: --stream x=64.")
        @click.option("--split", "splits", multiple=True, metavar="[ARRAY:]AXIS=COUNT",
                      help=SPLIT_HELP)
        @click.option("--lanes", "lanes", multiple=True, metavar="AXIS=COUNT", help=LANES_HELP)
        @merge_option
        @engine_option
        @click.option("--no-fusion", is_flag=True, help="Plan one kernel per equation.")
        @click.option("--data", "data", multiple=True, metavar="NAME=FILE",
                      help="Values of an integer or boolean input to plan on (.npy, or .npz "
                           "with the key NAME): the model counts the chunks a mask read from "
                           "it skips (varlen's document ids): --data doc=docs.npy.")
        @functools.wraps(fn)
        def wrapper(target_name, shapes, groups, streams, splits, lanes, merge, engine,
                    no_fusion, data, **kwargs):
            from .pipeline import Options
            planned = bool(target_name != default_target or shapes or groups or streams
                           or splits or lanes or merge != "auto" or engine != "auto" or no_fusion
                           or data)
            options = Options.make(
                target=target_name, arch=kwargs.pop("arch", None),
                shape=parse_assignments(shapes, "--shape"),
                defines=kwargs.get("sizes"),
                group=parse_assignments(groups, "--group"),
                stream=parse_assignments(streams, "--stream"), engine=engine,
                fusion=not no_fusion, split=parse_assignments(splits, "--split"),
                data=read_planning_data(data), merge=merge,
                lanes=parse_assignments(lanes, "--lanes"))
            return fn(options=options, planned=planned, **kwargs)
        if arch is not None:
            wrapper = click.option("--arch", default=None, help=arch)(wrapper)
        return wrapper
    return decorate


def read_planning_data(values) -> dict:
    """`--data NAME=FILE` (repeatable) to {name: array}: an .npy file, or the key NAME of an
    .npz file (N0804 for a malformed value, N0806 for a file that cannot be read)."""
    out = {}
    for value in values:
        name, eq, path = value.partition("=")
        name, path = name.strip(), path.strip()
        if not eq or not name.isidentifier() or not path:
            raise UsageError(error("N0804", f"--data {value!r}: expected NAME=FILE",
                                   help="for example --data doc=docs.npy").diagnostics)
        from .runtime.npyfiles import load_arrays
        arrays = load_arrays(path, [name])
        if name not in arrays:
            raise error("N0806", f"{path} has no array `{name}`",
                        help=f"its keys: {', '.join(sorted(arrays)) or 'none'}")
        out[name] = arrays[name]
    return out


def load_diagram(arg: str, sizes: dict[str, int]):
    # napkin.load of a name, path or text, without napkin.api (which imports NumPy for
    # napkin.run): `napkin check` needs the front end only
    from .compiler.front import load
    d = load(arg, **sizes)
    OUTPUT.warn(d.warnings)
    return d


def picture_format(path: str | None, option: str, default: str) -> str | None:
    """'svg' or 'png' from the suffix of the file given to `option` (`default` without one,
    or for a device such as /dev/stdout); any other suffix is N0804."""
    if path is None:
        return None
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name.strip(".") else ""
    if path.startswith("/dev/") or not suffix:
        return default
    if suffix in ("svg", "png"):
        return suffix
    raise UsageError(error("N0804", f"{option} {path!r:.80}: pictures are written as .svg or .png",
                           help=f"for example {option} picture.svg (or .png)").diagnostics)
