"""click's own usage errors in napkin's form: a value click's types refuse (`--seed abc`), a
missing required option or argument (`napkin bench` without `--shape`), an option a command
does not have, an option without its value, an unknown command. Each becomes N0804 with a
message naming the option and a help line (the option's own help, or what napkin's options
are), exit status 2: one conversion in `cli.main` for every option of every command, so that
no option's check is written twice."""

from __future__ import annotations

import click

from .diagrams.diagnostics import UsageError, error


def from_click(exc: click.UsageError, fallback: click.Context | None = None) -> UsageError:
    """napkin's N0804 for click's usage error `exc`; `fallback`: the context of the command
    the arguments name, for an error click raises without one (a value missing at the end)."""
    ctx = exc.ctx if exc.ctx is not None else fallback
    command = ctx.command_path if ctx is not None else "napkin"
    listing = f"`{command} --help` lists its options"
    reason = _sentence(exc.message)
    if ctx is not None and isinstance(ctx.command, click.Group):     # `napkin chek`
        listing = "commands: " + ", ".join(ctx.command.list_commands(ctx))
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        what = "argument" if isinstance(exc.param, click.Argument) else "option"
        message, help = f"missing {what} {_shown(exc.param, ctx)}", _help(exc.param, ctx)
    elif isinstance(exc, click.BadParameter) and exc.param is not None:
        message, help = f"{_shown(exc.param, ctx)}: {reason}", _help(exc.param, ctx)
    elif isinstance(exc, click.NoSuchOption):
        message = f"{command} has no option {exc.option_name}"
        help = _nearest(exc) or listing
    elif isinstance(exc, click.BadOptionUsage):
        param = _option(ctx, exc.option_name)
        message = reason
        help = _help(param, ctx) if param is not None else listing
    else:       # an unknown command (click's NoSuchCommand has the nearest), extra arguments
        message, help = reason, _nearest(exc) or listing
    return UsageError(error("N0804", message, help=help).diagnostics)


def _nearest(exc) -> str | None:
    """click's suggestions, napkin's way: "did you mean `check`?"."""
    near = [f"`{n}`" for n in getattr(exc, "possibilities", None) or []]   # nearest first
    if not near:
        return None
    return "did you mean " + (", ".join(near[:-1]) + " or " if near[1:] else "") + near[-1] + "?"


def _sentence(text: str) -> str:
    """click's message worded as napkin's: no capital (but an acronym's), no final period."""
    text = text.strip().rstrip(".")
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]


def _option(ctx, name: str):
    if ctx is None:
        return None
    return next((p for p in ctx.command.params if name in getattr(p, "opts", ())), None)


def _shown(param, ctx) -> str:
    if isinstance(param, click.Argument):
        return param.make_metavar(ctx) if _takes_ctx(param) else param.make_metavar()
    return max(param.opts, key=len)


def _help(param, ctx) -> str:
    """`--seed INTEGER: Seed of the random inputs.`: how the option is written, and its help."""
    if isinstance(param, click.Argument):
        return f"give it: {ctx.command_path} {_shown(param, ctx)} (`{ctx.command_path} --help`)"
    record = param.get_help_record(ctx)
    written, said = record if record is not None else (_shown(param, ctx), "")
    said = said.split("  [", 1)[0]     # (click's "[default: 0]" after two spaces)
    return f"{written}: {said}" if said else f"{written} (`{ctx.command_path} --help`)"


def _takes_ctx(param) -> bool:
    import inspect
    return "ctx" in inspect.signature(param.make_metavar).parameters
