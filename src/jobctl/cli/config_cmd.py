"""``jobctl config show``: every effective daemon setting and where it came from.

It answers "why is the daemon using X?" without reading the code: the value, and whether it
is the default, from the file (which one), from an environment variable (which one) or
from a flag. When a daemon answers on the socket it describes that daemon: the daemon
keeps what it loaded at start (:func:`served_view`) and serves it to admins at
GET /v1/config. Otherwise, or with ``--local``/``--config``, it loads exactly as
``jobctl daemon`` would here, so it doubles as a check of a config file before a
restart: a bad file is the same one-line error, exit 2.

Nothing heavy is imported at module level: every ``jobctl`` command loads this module.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.cli.options import JsonOpt, SocketOpt, command_group, print_json

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


LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Do not ask the daemon: show what jobctl daemon would load here (checks the file)",
    ),
]
#: Settings whose key names one of these hold a secret: the daemon serves them hidden.
SECRET_WORDS = ("password", "secret", "token", "credential")
HIDDEN = "(hidden)"


@app.command("show")
def show(
    ctx: typer.Context,
    config: ConfigOpt = None,
    json_: JsonOpt = False,
    local: LocalOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Print every effective daemon setting and where it came from.

    When a daemon answers on the socket, these are its settings as it loaded them at start (admins only; anyone else gets this machine's view with a note). Otherwise, and with --local or --config, they are what jobctl daemon would load here. Sources, strongest first: flag, environment variable (JOBCTL_<KEY>), config file, default. The output is valid TOML, each line commented with its source. A bad config file is an error (exit 2), so --local also checks a file before a restart.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    path = config if from_command_line(ctx, "config") else None
    view, note = (None, "") if local or path is not None else daemon_view(socket)
    if view is None:
        view = local_view(path)
    view = {**view, "from": "local" if "daemon" not in view else "daemon", "note": note or None}
    if json_:
        print_json(view)
    else:
        sys.stdout.write(as_toml(view))


@app.command("get")
def get(
    ctx: typer.Context,
    key: Annotated[
        str, typer.Argument(metavar="KEY", help="A setting, e.g. socket, retry.max_attempts")
    ],
    config: ConfigOpt = None,
    local: LocalOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Print one effective setting's value alone, for scripts: sock=$(jobctl config get socket).

    The same value jobctl config show prints (the running daemon's when one answers, else what jobctl daemon would load here), without quotes; durations in seconds. A setting that is not set prints nothing and exits 1.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.errors import InvalidInput

    path = config if from_command_line(ctx, "config") else None
    view = None if local or path is not None else daemon_view(socket)[0]
    settings = (view or local_view(path))["settings"]
    if key not in settings:
        raise InvalidInput(f"no setting {key!r}; jobctl config show lists them")
    value = settings[key]["value"]
    if value is None:
        raise typer.Exit(1)
    print(json.dumps(value) if isinstance(value, dict) else value)


def local_view(path: Path | None) -> dict[str, Any]:
    """What ``jobctl daemon`` would load here, in the form of :func:`as_json`."""
    from jobctl.config import Host, load, locate

    host = Host.current()
    settings, sources = load(path, os.environ, {}, host=host)
    return as_json(settings, sources, locate(path, os.environ, host))


def daemon_view(socket: Path | None) -> tuple[dict[str, Any] | None, str]:
    """The running daemon's settings (GET /v1/config), or None and why not."""
    from jobctl.cli.job_actions import client
    from jobctl.errors import DaemonUnavailable, Forbidden, NotFound
    from jobctl.paths import default_socket

    where = socket or default_socket()
    fallback = "showing what jobctl daemon would load here"
    try:
        with client(socket) as c:
            view: dict[str, Any] = c.config()
    except DaemonUnavailable:
        return None, f"no daemon answered on {where}; {fallback}"
    except Forbidden:
        return None, f"the daemon on {where} shows its settings to admins only; {fallback}"
    except NotFound:
        return None, f"the daemon on {where} does not serve its settings (older); {fallback}"
    if not view.get("settings"):
        return None, f"the daemon on {where} did not record its settings; {fallback}"
    return view, ""


def served_view(
    settings: Settings, sources: dict[str, Source], path: Path | None
) -> dict[str, Any]:
    """What the daemon serves at GET /v1/config: :func:`as_json` of what it loaded, with
    the value of any setting whose key names a secret (:data:`SECRET_WORDS`) hidden."""
    from jobctl.config import Host, locate

    view = as_json(settings, sources, locate(path, os.environ, Host.current()))
    for key, entry in view["settings"].items():
        if entry["value"] is not None and any(word in key for word in SECRET_WORDS):
            entry["value"] = HIDDEN
    return view


def _file_note(where: dict[str, Any]) -> str:
    source = " ".join(filter(None, (where["source"], where["origin"])))
    origin = "default location" if where["source"] == "default" else f"from {source}"
    present = "" if where["loaded"] else "; not present, so defaults apply"
    return f"# config file: {where['path']} ({origin}{present})"


def _head(view: dict[str, Any]) -> list[str]:
    daemon = view.get("daemon")
    if daemon:
        head = [
            f"# the running daemon's settings (jobctl {daemon['version']}, pid {daemon['pid']}, "
            f"started {daemon['started_at']})"
        ]
    else:
        head = [f"# {view['note']}"] if view.get("note") else []
    return [*head, _file_note(view["config_file"])]


def as_toml(view: dict[str, Any]) -> str:
    """The settings of :func:`as_json`'s form as a config file, each line commented with
    the value's source."""
    rows: list[tuple[str, str]] = []
    table = ""
    for full_key, entry in view["settings"].items():
        section, _, key = full_key.rpartition(".")
        if section != table:
            rows.append(("", ""))
            rows.append((f"[{section}]", ""))
            table = section
        value = entry["value"]
        line = f"# {key} is not set" if value is None else f"{key} = {_toml_value(value)}"
        note = " ".join(filter(None, (entry["source"], entry["origin"])))
        if full_key == "lease_ttl":
            beat = _toml_value(float(view["derived"]["heartbeat"]))[1:-1]
            note += f"; heartbeat every {beat} (lease_ttl / 3)"
        if full_key == "state_dir":
            note += _state_dir_note(view["settings"]["db"]["value"], value)
        rows.append((line, note))
    width = max(len(line) for line, note in rows if note)
    out = [*_head(view), "# precedence: flag > environment > file > default"]
    out += [f"{line:<{width}}  # {note}" if note else line for line, note in rows]
    return "\n".join(out) + "\n"


def _state_dir_note(db: object, state_dir: object) -> str:
    """state_dir holds a PostgreSQL daemon's own files; a SQLite daemon keeps them beside
    its database, so a value elsewhere is not where they are: say so and say where."""
    if not isinstance(db, str) or db.startswith(("postgres://", "postgresql://")):
        return ""
    if state_dir is not None and Path(str(state_dir)) == Path(db).parent:
        return ""
    return f"; unused with a SQLite db: its files are beside it, in {Path(db).parent}"


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
    """Machine form: values in plain units (seconds, path strings), sources split in two;
    a PostgreSQL ``db`` URL's password masked (``***``), as status and the logs show it."""
    from jobctl.config import SPECS, shown_db

    def plain(value: object) -> object:
        if isinstance(value, str) and "://" in value:  # a database URL: never its password
            return shown_db(value)
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
