"""``jobctl config show``: every effective daemon setting and where it came from.

It answers "why is the daemon using X?" without reading the code: the value, and whether it
is the default, from the file (which one), from an environment variable (which one) or
from a flag. It loads exactly as ``jobctl daemon`` does, so it doubles as a check of a
config file before a restart: a bad file is the same one-line error, exit 2.

Nothing heavy is imported at module level: every ``jobctl`` command loads this module.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.cli.options import JsonOpt, command_group, print_json

if TYPE_CHECKING:
    from jobctl.config import ConfigFile, Settings, Source

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="JOBCTL_CONFIG",
        show_envvar=True,
        dir_okay=False,
        help="Config file (TOML); must exist when given",
        show_default="per-user config dir",
    ),
]

app = command_group("The daemon's configuration.")


def from_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was typed, not filled in by click from its envvar.

    Options keep ``envvar=`` so --help and the man page document the variable, but the
    config layer reads the environment itself; counting click's copy as a flag would
    report an environment value as "flag".
    """
    source = ctx.get_parameter_source(name)  # typer's vendored click: compare by name
    return source is not None and source.name == "COMMANDLINE"


@app.command("show")
def show(ctx: typer.Context, config: ConfigOpt = None, json_: JsonOpt = False) -> None:
    """Print every effective daemon setting and where it came from.

    Sources, strongest first: flag, environment variable (JOBCTL_<KEY>), config file, default. The output is valid TOML, each line commented with its source. A bad config file is an error (exit 2), so this also checks a file before a restart.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.config import Host, load, locate

    host = Host.current()
    path = config if from_command_line(ctx, "config") else None
    settings, sources = load(path, os.environ, {}, host=host)
    where = locate(path, os.environ, host)
    if json_:
        print_json(as_json(settings, sources, where))
    else:
        sys.stdout.write(as_toml(settings, sources, where))


def _file_note(where: ConfigFile) -> str:
    origin = "default location" if where.source.kind == "default" else f"from {where.source}"
    present = "" if where.path.is_file() else "; not present, so defaults apply"
    return f"# config file: {where.path} ({origin}{present})"


def as_toml(settings: Settings, sources: dict[str, Source], where: ConfigFile) -> str:
    """The settings as a config file, each line commented with the value's source."""
    from jobctl.config import SPECS

    rows: list[tuple[str, str]] = []
    table = ""
    for name, spec in SPECS.items():
        section, _, key = spec.key.rpartition(".")
        if section != table:
            rows.append(("", ""))
            rows.append((f"[{section}]", ""))
            table = section
        value = getattr(settings, name)
        line = f"# {key} is not set" if value is None else f"{key} = {_toml_value(value)}"
        note = str(sources[name])
        if name == "lease_ttl":
            note += f"; heartbeat every {_toml_value(settings.heartbeat)[1:-1]} (lease_ttl / 3)"
        rows.append((line, note))
    width = max(len(line) for line, note in rows if note)
    out = [_file_note(where), "# precedence: flag > environment > file > default"]
    out += [f"{line:<{width}}  # {note}" if note else line for line, note in rows]
    return "\n".join(out) + "\n"


def _toml_value(value: object) -> str:
    from jobctl.config import format_seconds

    if isinstance(value, float):  # every float setting is a duration
        return json.dumps(format_seconds(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):  # quota overrides: an inline table of inline tables
        items = (f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return json.dumps(str(value))


def as_json(settings: Settings, sources: dict[str, Source], where: ConfigFile) -> dict[str, Any]:
    """Machine form: values in plain units (seconds, path strings), sources split in two."""
    from jobctl.config import SPECS

    def plain(value: object) -> object:
        if isinstance(value, Path | dict | int | float | str | None):
            return str(value) if isinstance(value, Path) else value
        return str(value)  # the disk floor: as written

    return {
        "config_file": {
            "path": str(where.path),
            "source": where.source.kind,
            "origin": where.source.origin or None,
            "loaded": where.path.is_file(),
        },
        "settings": {
            spec.key: {
                "value": plain(getattr(settings, name)),
                "source": sources[name].kind,
                "origin": sources[name].origin or None,
                "env": spec.env,
            }
            for name, spec in SPECS.items()
        },
        "derived": {"heartbeat": settings.heartbeat},
    }
