"""Walk the Typer app's click command tree into the :class:`CommandDoc` model."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from enum import Enum
from pathlib import PurePath
from typing import Any, TypedDict, get_args, get_origin

import typer
import typer.core
import typer.main
from typer import _click

from jobctl.cli.docgen.model import (
    HELP_WIDTH,
    JOB_ID_PARAMS,
    PATH_OR_URL_PARAMS,
    PROG,
    CommandDoc,
    ParamDoc,
    ValueKind,
)


def build_tree(app: typer.Typer | None = None) -> CommandDoc:
    """Walk the app's click command tree (``jobctl.cli.main.app`` by default)."""
    if app is None:
        from jobctl.cli.main import app as main_app

        app = main_app
    command = typer.main.get_command(app)
    ctx = _click.Context(
        command, info_name=PROG, terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH
    )
    return _command_doc(command, ctx, ())


def _command_doc(command: _click.Command, ctx: _click.Context, path: tuple[str, ...]) -> CommandDoc:
    help_text = inspect.cleandoc(command.help or "").partition("\f")[0].strip()
    params = tuple(
        doc
        for param in command.get_params(ctx)
        if (doc := _param_doc(param, ctx, command)) is not None
    )
    subcommands: list[CommandDoc] = []
    is_group = isinstance(command, typer.core.TyperGroup)
    if isinstance(command, typer.core.TyperGroup):  # (repeated for mypy's narrowing)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = _click.Context(sub, parent=ctx, info_name=name)
            subcommands.append(_command_doc(sub, sub_ctx, (*path, name)))
    interspersed = bool(
        command.context_settings.get("allow_interspersed_args", command.allow_interspersed_args)
    )
    return CommandDoc(
        path=path,
        help=help_text,
        short_help=command.get_short_help_str(limit=80),
        help_page=_plain_help(command, ctx),
        params=params,
        subcommands=tuple(subcommands),
        is_group=is_group,
        interspersed=interspersed,
        deprecated=bool(command.deprecated),
    )


def _plain_help(command: _click.Command, ctx: _click.Context) -> str:
    """``--help`` as click formats it without rich: stable across terminals and rich."""
    formatter = ctx.make_formatter()
    _click.core.Command.format_help(command, ctx, formatter)
    return formatter.getvalue().rstrip("\n")


class _SharedFields(TypedDict):
    """The :class:`ParamDoc` fields that options and arguments fill alike."""

    name: str
    help: str
    required: bool
    envvars: tuple[str, ...]
    default: str | None
    range: str | None
    value_kind: ValueKind
    choices: tuple[str, ...]


def _shared_fields(
    param: typer.core.TyperOption | typer.core.TyperArgument,
    ctx: _click.Context,
    kind: tuple[ValueKind, tuple[str, ...]],
) -> _SharedFields:
    return _SharedFields(
        name=param.name,
        help=_clean(param.help),
        required=param.required,
        envvars=_envvars(param.envvar),
        default=_default_text(param, ctx),
        range=_range_text(param.min, param.max),
        value_kind=kind[0],
        choices=kind[1],
    )


def _param_doc(
    param: _click.Parameter, ctx: _click.Context, command: _click.Command
) -> ParamDoc | None:
    if isinstance(param, typer.core.TyperOption):
        return None if param.hidden else _option_doc(param, ctx, command)
    if isinstance(param, typer.core.TyperArgument):
        return None if param.hidden else _argument_doc(param, ctx)
    return None


def _option_doc(
    param: typer.core.TyperOption, ctx: _click.Context, command: _click.Command
) -> ParamDoc:
    is_flag = param.is_flag or param.count
    kind: tuple[ValueKind, tuple[str, ...]] = (
        ("none", ()) if is_flag else _value_kind(param, positional=False)
    )
    return ParamDoc(
        kind="option",
        opts=tuple(param.opts),
        secondary_opts=tuple(param.secondary_opts),
        metavar=None if is_flag else _metavar(param),
        nvalues=0 if is_flag else max(param.nargs, 1),
        multiple=param.multiple,
        is_help=param is command.get_help_option(ctx),
        is_eager=param.is_eager,
        **_shared_fields(param, ctx, kind),
    )


def _argument_doc(param: typer.core.TyperArgument, ctx: _click.Context) -> ParamDoc:
    return ParamDoc(
        kind="argument",
        opts=(),
        secondary_opts=(),
        metavar=_metavar(param),
        nvalues=param.nargs,
        multiple=param.nargs < 0,
        **_shared_fields(param, ctx, _value_kind(param, positional=True)),
    )


def _clean(text: str | None) -> str:
    return inspect.cleandoc(text or "").strip()


def _envvars(envvar: str | Sequence[str] | None) -> tuple[str, ...]:
    if envvar is None:
        return ()
    if isinstance(envvar, str):
        return (envvar,)
    return tuple(envvar)


def _element_type(annotation: Any) -> Any:
    """``list[Path]`` -> ``Path``; ``Path | None`` is already unwrapped by Typer."""
    if get_origin(annotation) in (list, tuple, set, frozenset):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_subclass(value: Any, cls: type) -> bool:
    return isinstance(value, type) and issubclass(value, cls)


def _choice_text(choice: Any) -> str:
    return str(choice.value) if isinstance(choice, Enum) else str(choice)


def _value_kind(
    param: typer.core.TyperOption | typer.core.TyperArgument, *, positional: bool
) -> tuple[ValueKind, tuple[str, ...]]:
    if param.name in JOB_ID_PARAMS:
        return "job_id", ()
    if param.name in PATH_OR_URL_PARAMS:
        return "path", ()
    desc = param.type_descriptor
    if desc.choices is not None:
        return "choice", tuple(_choice_text(c) for c in desc.choices)
    info = desc.parameter_info
    element = _element_type(desc.annotation)
    if desc.is_path or _is_subclass(element, PurePath):
        if info.dir_okay and not info.file_okay:
            return "dir", ()
        return ("file", ()) if info.file_okay and not info.dir_okay else ("path", ())
    if desc.is_file:
        return "file", ()
    if positional and element is str:
        return "path", ()  # what a shell offers for a word it knows nothing about
    return "none", ()


_TYPE_METAVARS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


def _metavar(param: typer.core.TyperOption | typer.core.TyperArgument) -> str:
    if param.metavar:
        return param.metavar
    if isinstance(param, typer.core.TyperArgument):
        return param.name.upper()
    desc = param.type_descriptor
    if desc.choices is not None:
        return "{" + "|".join(_choice_text(c) for c in desc.choices) + "}"
    element = _element_type(desc.annotation)
    if desc.is_path or _is_subclass(element, PurePath):
        return {"file": "FILE", "dir": "DIR"}.get(desc.path_type, "PATH")
    if desc.is_file:
        return "FILE"
    if element in _TYPE_METAVARS:
        return _TYPE_METAVARS[element]
    return str(getattr(element, "__name__", "VALUE")).upper()


def _default_text(
    param: typer.core.TyperOption | typer.core.TyperArgument, ctx: _click.Context
) -> str | None:
    """The default as --help shows it, or None where --help shows none."""
    if isinstance(param.show_default, str):
        return param.show_default
    if not (param.show_default or ctx.show_default):
        return None
    value = param.default
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    if callable(value):
        return "(dynamic)"
    if isinstance(param, typer.core.TyperOption) and param.is_bool_flag:
        if param.secondary_opts:
            name = param.opts[0] if value else param.secondary_opts[0]
            return name.lstrip("-/")
        return "true" if value else None
    if isinstance(value, (list, tuple)):
        return ", ".join(_choice_text(v) for v in value)
    return _choice_text(value)


def _range_text(low: float | None, high: float | None) -> str | None:
    if low is None and high is None:
        return None
    if low is None:
        return f"x<={high}"
    if high is None:
        return f"x>={low}"
    return f"{low}<=x<={high}"
