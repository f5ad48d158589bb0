"""How fast the compiler answers: plan time, diagram -> CUDA, and the CLI's wall time.

    python benchmarks/compile_time.py [--runs 5] [--cli-runs 3] [--targets a100,h100,h200]
                                      [--diagrams attention,matmul] [--no-cli] [--json OUT]
                                      [--bytecode installed|as-is]

For every library diagram on each target it prints, in this process:

  plan ms    the median of --runs plans of the checked diagram (fuse and tile, default sizes)
  cuda ms    the median of --runs diagram -> CUDA compiles from the source text: parse,
             check, fuse, tile, lower, render (no NVRTC)

each in wall time and, in the last two columns, in this process's CPU time (which other
work on a busy machine disturbs less),

and, in fresh processes started from a temporary directory, the median wall time of
--cli-runs runs of `napkin check NAME`, `napkin explain NAME --target T` and `napkin compile
NAME --emit cuda --target T`, each beside the median wall time of `python -c "import numpy"`
measured in the same run (interleaved with them, so a busy machine slows both alike) and
the ratio, and the same ratio in CPU time (user + system of the command's process), which a
machine busy with other work disturbs less than wall time. The last lines compare the
figures with the goals:

  plan median < 20 ms and worst < 100 ms;  diagram -> CUDA worst < 150 ms;
  napkin check attention < 2x and napkin explain attention < 4x the numpy import.

napkin is timed as installed: `--bytecode installed` (the default) first compiles the
bytecode of napkin's own modules, as `pip install` does (numpy's is compiled at its
install), so a PYTHONDONTWRITEBYTECODE environment with an editable install does not time
napkin's source being compiled on every run; `--bytecode as-is` times the environment as
it is.

A benchmark, not a test: nothing asserts a wall time. Exit status 1 only when a command
fails. No GPU needed.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

GOALS = {"plan_median_ms": 20.0, "plan_worst_ms": 100.0, "cuda_worst_ms": 150.0,
         "check_ratio": 2.0, "explain_ratio": 4.0}
TARGETS = ("a100", "h100", "h200")


def compiler() -> SimpleNamespace:
    """The public in-process calls this benchmark times, in one place (repoint them here when
    the driver's API changes): napkin.pipeline, the driver every command goes through."""
    from napkin import pipeline
    from napkin.diagrams import sources

    def options(target):
        return pipeline.Options.make(target=target)

    def load(name):
        """Parse and check."""
        return pipeline.through(name, None, "ir", pipeline.Options())["ir"]

    def plan(diagram, target):
        """Fuse and tile (default sizes)."""
        return pipeline.plan(diagram, options(target))

    def cuda(name, target):
        """Diagram -> CUDA C: parse, check, fuse, tile, lower, render."""
        return pipeline.through(name, None, "cuda", options(target))["cuda"]

    return SimpleNamespace(load=load, plan=plan, cuda=cuda, names=sources.library_names)


def median_ms(fn, runs: int) -> tuple[float, float]:
    """(median wall milliseconds, median CPU milliseconds of this process) of `runs` calls."""
    times, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(times) * 1e3, statistics.median(cpus) * 1e3


def in_process(c, names, target_names, runs: int) -> list[dict]:
    rows = []
    for name in names:
        diagram = c.load(name)
        for t in target_names:
            plan_ms, plan_cpu = median_ms(lambda: c.plan(diagram, t), runs)
            cuda_ms, cuda_cpu = median_ms(lambda: c.cuda(name, t), runs)
            rows.append({"diagram": name, "target": t, "plan_ms": plan_ms, "cuda_ms": cuda_ms,
                         "plan_cpu_ms": plan_cpu, "cuda_cpu_ms": cuda_cpu})
    return rows


PACKAGES = ("napkin", "napkin.diagrams", "napkin.compiler", "napkin.codegen", "napkin.runtime")


def compile_bytecode() -> int:
    """Compile the bytecode of napkin's modules in place (as pip install does); the number of
    package folders compiled."""
    folders = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            folders += list(spec.submodule_search_locations)
    for folder in folders:
        compileall.compile_dir(folder, quiet=1)
    return len(folders)


class Wall:
    """Wall (and CPU) times of commands in fresh processes, each run beside an `import numpy`
    run."""

    def __init__(self, runs: int):
        self.runs, self.numpy, self.numpy_cpu, self.failures = runs, [], [], []
        self.cpu: dict = {}
        self.cwd = tempfile.mkdtemp(prefix="napkin-compile-time-")
        script = shutil.which("napkin", path=os.path.dirname(sys.executable))
        self.napkin = [script] if script else [sys.executable, "-m", "napkin"]
        env = dict(os.environ)
        for var in ("PYTHONPROFILEIMPORTTIME", "PYTHONSTARTUP", "PYTHONDEVMODE"):
            env.pop(var, None)
        self.env = env

    def _once(self, argv) -> tuple[float, subprocess.CompletedProcess, float]:
        """(wall seconds, the process, its CPU seconds: user + system)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=self.cwd, env=self.env, capture_output=True,
                              timeout=600)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, done, cpu

    def time(self, *args: str) -> float | None:
        """Median milliseconds of `napkin ARGS`, or None when it fails."""
        times, cpus = [], []
        for _ in range(self.runs):
            wall, _, cpu = self._once([sys.executable, "-c", "import numpy"])
            self.numpy.append(wall)
            self.numpy_cpu.append(cpu)
            seconds, done, cpu = self._once(self.napkin + list(args))
            if done.returncode != 0:
                tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
                self.failures.append(f"napkin {' '.join(args)}: exit {done.returncode}: "
                                     + " | ".join(tail))
                return None
            times.append(seconds)
            cpus.append(cpu)
        self.cpu[args] = statistics.median(cpus) * 1e3
        return statistics.median(times) * 1e3

    @property
    def numpy_ms(self) -> float:
        return statistics.median(self.numpy) * 1e3

    @property
    def numpy_cpu_ms(self) -> float:
        return statistics.median(self.numpy_cpu) * 1e3

    def close(self) -> None:
        shutil.rmtree(self.cwd, ignore_errors=True)


def cli(names, target_names, runs: int) -> tuple[list[dict], float, float, list[str]]:
    wall = Wall(runs)
    rows = []
    try:
        for name in names:
            args = ("check", name)
            rows.append({"diagram": name, "target": None, "command": "check",
                         "ms": wall.time(*args), "cpu_ms": wall.cpu.get(args)})
            for t in target_names:
                for command, args in (("explain", ("explain", name, "--target", t)),
                                      ("compile", ("compile", name, "--emit", "cuda",
                                                   "--target", t))):
                    rows.append({"diagram": name, "target": t, "command": command,
                                 "ms": wall.time(*args), "cpu_ms": wall.cpu.get(args)})
        numpy_ms, numpy_cpu_ms = wall.numpy_ms, wall.numpy_cpu_ms
    finally:
        wall.close()
    for r in rows:
        r["ratio"] = None if r["ms"] is None else r["ms"] / numpy_ms
        r["cpu_ratio"] = None if r["cpu_ms"] is None else r["cpu_ms"] / numpy_cpu_ms
    return rows, numpy_ms, numpy_cpu_ms, wall.failures


def _ms(v) -> str:
    return "failed" if v is None else f"{v:.1f}"


def _ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="in-process runs per figure (median)")
    ap.add_argument("--cli-runs", type=int, default=3, help="runs per command (median)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--diagrams", default="", help="comma-separated (default: the library)")
    ap.add_argument("--no-cli", action="store_true", help="skip the command-line timings")
    ap.add_argument("--json", dest="json_path", default=None, help="also write the figures here")
    ap.add_argument("--bytecode", choices=("installed", "as-is"), default="installed",
                    help="installed: compile napkin's bytecode first, as pip install does")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    c = compiler()
    names = [n for n in args.diagrams.split(",") if n] or c.names()
    target_names = [t for t in args.targets.split(",") if t]

    rows = in_process(c, names, target_names, args.runs)
    print(f"in process, median of {args.runs} runs (default sizes):")
    print(f"  {'diagram':<18} {'target':<6} {'plan ms':>8} {'cuda ms':>8} {'plan cpu':>9} "
          f"{'cuda cpu':>9}")
    for r in rows:
        print(f"  {r['diagram']:<18} {r['target']:<6} {r['plan_ms']:8.1f} {r['cuda_ms']:8.1f} "
              f"{r['plan_cpu_ms']:9.1f} {r['cuda_cpu_ms']:9.1f}")
    plans = [r["plan_ms"] for r in rows]
    cudas = [r["cuda_ms"] for r in rows]
    figures = {"plan_median_ms": statistics.median(plans), "plan_worst_ms": max(plans),
               "cuda_worst_ms": max(cudas),
               "plan_median_cpu_ms": statistics.median(r["plan_cpu_ms"] for r in rows),
               "plan_worst_cpu_ms": max(r["plan_cpu_ms"] for r in rows),
               "cuda_worst_cpu_ms": max(r["cuda_cpu_ms"] for r in rows)}

    cli_rows, numpy_ms, failures = [], None, []
    if not args.no_cli:
        folders = compile_bytecode() if args.bytecode == "installed" else 0
        cli_rows, numpy_ms, numpy_cpu_ms, failures = cli(names, target_names, args.cli_runs)
        print(f"\ncommand line, median of {args.cli_runs} runs each; python -c \"import numpy\": "
              f"{numpy_ms:.1f} ms (median of {args.cli_runs * len(cli_rows)}, interleaved), "
              f"{numpy_cpu_ms:.1f} ms CPU")
        print(f"  bytecode: {args.bytecode}" + (f" (compiled in {folders} package folders)"
              if folders else "") + "; PYTHONDONTWRITEBYTECODE "
              + ("set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "not set"))
        print(f"  {'diagram':<18} {'target':<6} {'check':>14} {'explain':>14} {'compile cuda':>14}")
        by = {(r["diagram"], r["target"], r["command"]): r for r in cli_rows}
        for name in names:
            chk = by[(name, None, "check")]
            for i, t in enumerate(target_names):
                ex, co = by[(name, t, "explain")], by[(name, t, "compile")]
                first = f"{_ms(chk['ms'])} {_ratio(chk['ratio']):>6}" if i == 0 else ""
                print(f"  {name:<18} {t:<6} {first:>14} "
                      f"{_ms(ex['ms']) + ' ' + _ratio(ex['ratio']).rjust(6):>14} "
                      f"{_ms(co['ms']) + ' ' + _ratio(co['ratio']).rjust(6):>14}")

        def ratios(command, diagram=None, key="ratio"):
            return [r[key] for r in cli_rows if r["command"] == command
                    and (diagram is None or r["diagram"] == diagram) and r[key] is not None]
        for command in ("check", "explain", "compile"):
            for key, suffix in (("ratio", "ratio"), ("cpu_ratio", "cpu_ratio")):
                if ratios(command, key=key):
                    figures[f"{command}_worst_{suffix}"] = max(ratios(command, key=key))
                if ratios(command, "attention", key):
                    figures[f"{command}_attention_{suffix}"] = max(ratios(command, "attention",
                                                                          key))
        figures["numpy_import_ms"] = numpy_ms
        figures["numpy_import_cpu_ms"] = numpy_cpu_ms

    print("\nsummary against the goals:")
    verdicts = [("plan median", figures["plan_median_ms"], GOALS["plan_median_ms"], "ms"),
                ("plan worst", figures["plan_worst_ms"], GOALS["plan_worst_ms"], "ms"),
                ("diagram -> CUDA worst", figures["cuda_worst_ms"], GOALS["cuda_worst_ms"], "ms")]
    for command, key in (("check", "check_ratio"), ("explain", "explain_ratio")):
        for which in ("attention", "worst"):
            value = figures.get(f"{command}_{which}_ratio")
            if value is not None:
                label = (f"napkin {command} attention" if which == "attention"
                         else f"napkin {command}, worst diagram")
                verdicts.append((label, value, GOALS[key], "x numpy"))
    for label, value, goal, unit in verdicts:
        shown = f"{value:.1f} ms" if unit == "ms" else f"{value:.2f}x"
        goal_shown = f"{goal:.0f} ms" if unit == "ms" else f"{goal:.0f}x"
        print(f"  {label:<32} {shown:>10}   goal < {goal_shown:<7} "
              f"{'met' if value < goal else 'NOT MET'}")
    met = sum(value < goal for _, value, goal, _ in verdicts)
    print(f"  {met} of {len(verdicts)} goals met ({time.perf_counter() - start:.0f} s)")
    print(f"  in CPU time (less disturbed by a busy machine): plan median "
          f"{figures['plan_median_cpu_ms']:.1f} ms, plan worst {figures['plan_worst_cpu_ms']:.1f} "
          f"ms, diagram -> CUDA worst {figures['cuda_worst_cpu_ms']:.1f} ms")
    cpu = [(f"napkin {command} {which}", figures.get(f"{command}_{which}_cpu_ratio"))
           for command in ("check", "explain") for which in ("attention", "worst")]
    if any(v is not None for _, v in cpu):
        print("    " + ", ".join(f"{label} {v:.2f}x" for label, v in cpu if v is not None))
    for f in failures:
        print(f"  FAILED: {f}")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"in_process": rows, "cli": cli_rows, "figures": figures,
                       "goals": GOALS, "failures": failures}, fh, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
