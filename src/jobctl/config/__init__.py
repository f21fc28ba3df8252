"""The daemon's settings: a TOML file, ``JOBCTL_*`` environment variables and flags, merged.

Every setting is declared once, as a :class:`Settings` field whose metadata is a
:class:`Spec` (TOML key, environment variable, parser, doc). The file reader, the
environment reader, the flag layer, ``jobctl config show`` and the error messages all
walk that one declaration, so no key can be loadable but unvalidated, or shown but not
loadable.

Precedence, highest first: flags > environment > file > defaults. Every layer is
validated in full and the daemon starts only from a complete, valid :class:`Settings`,
so a typo cannot leave it half-configured. :func:`load` is pure given its inputs (the
file aside): the environment and the facts about this process (:class:`Host`) are
parameters, which is what lets tests drive every layer without touching the real ones.

The parts: :mod:`~jobctl.config.settings` declares every setting, :mod:`~jobctl.config.parsers`
turns raw values into typed ones, :mod:`~jobctl.config.files` finds and reads the file; this
module merges the layers. Every public name is importable from ``jobctl.config``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jobctl.config.files import (
    CONFIG_ENV,
    DERIVED,
    SYSTEM_CONFIG,
    ConfigError,
    ConfigFile,
    Source,
    _file_values,
    default_config_path,
    locate,
    read_file,
)
from jobctl.config.parsers import PG_SCHEMES, Parser, _Where, format_seconds, show_value, shown_db
from jobctl.config.settings import SPECS, Default, Host, Settings, Spec

__all__ = [
    "CONFIG_ENV",
    "DERIVED",
    "PG_SCHEMES",
    "SPECS",
    "SYSTEM_CONFIG",
    "ConfigError",
    "ConfigFile",
    "Default",
    "Host",
    "Parser",
    "Settings",
    "Source",
    "Spec",
    "default_config_path",
    "format_seconds",
    "load",
    "locate",
    "read_file",
    "show_value",
    "shown_db",
]


def load(
    config_path: Path | None,
    env: Mapping[str, str],
    flags: Mapping[str, object],
    *,
    host: Host | None = None,
) -> tuple[Settings, dict[str, Source]]:
    """The effective settings and where each came from: flags > env > file > defaults.

    ``flags`` maps field names to values given on the command line (None: not given).
    Every layer is checked in full, even values a higher layer overrides, so a broken file
    is reported now rather than on the day the flag that hid it is dropped. All problems are
    gathered; the :class:`ConfigError` names the first and counts the rest.
    """
    host = host or Host.current()
    unknown = set(flags) - set(SPECS)
    if unknown:
        raise TypeError(f"not settings: {sorted(unknown)}")  # a bug in the caller
    config = locate(config_path, env, host)
    raw_file, problems = _file_values(read_file(config) or {}, config.path)
    values = {name: spec.default(host, env) for name, spec in SPECS.items()}
    sources = dict.fromkeys(SPECS, Source("default"))
    in_file = Source("file", str(config.path))
    layers: list[tuple[Mapping[str, object], _Where, Callable[[Spec], Source]]] = [
        (raw_file, _Where(config.path.parent, host.home, False), lambda _spec: in_file),
        (_env_values(env), _Where(host.cwd, host.home, True), lambda s: Source("env", s.env)),
        (flags, _Where(host.cwd, host.home, False), _flag_source),
    ]
    for raw_values, where, source_of in layers:
        for name, raw in raw_values.items():
            if raw is None:
                continue
            spec = SPECS[name]
            source = source_of(spec)
            try:
                values[name] = spec.parse(raw, where)
            except ValueError as exc:
                problems.append(f"{source.blame(spec.key)}: {exc}")
                continue
            sources[name] = source
    problems += _cross_checks(values, sources)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more, problems=problems)
    return Settings(**values), sources


def _env_values(env: Mapping[str, str]) -> dict[str, object]:
    """Raw values from ``JOBCTL_<KEY>`` variables; an empty variable counts as unset."""
    return {name: env[spec.env] for name, spec in SPECS.items() if env.get(spec.env)}


def _flag_source(spec: Spec) -> Source:
    return Source("flag", spec.flag or "--" + spec.key.replace(".", "-").replace("_", "-"))


def _cross_checks(values: Mapping[str, Any], sources: Mapping[str, Source]) -> list[str]:
    """Rules between settings, checked on the merged values (each may come from a layer)."""
    problems = []
    total, per_uid = values["max_connections"], values["max_connections_per_uid"]
    if per_uid > total:
        problems.append(
            f"max_connections_per_uid = {per_uid} ({sources['max_connections_per_uid']}) is "
            f"more than max_connections = {total} ({sources['max_connections']}): one user "
            "could take every connection"
        )
    base, cap = values["retry_backoff_base"], values["retry_backoff_cap"]
    if cap < base:
        problems.append(
            f"retry.backoff_cap = {format_seconds(cap)} ({sources['retry_backoff_cap']}) is "
            f"less than retry.backoff_base = {format_seconds(base)} "
            f"({sources['retry_backoff_base']}): the cap must be at least the base"
        )
    return problems
