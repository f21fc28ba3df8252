"""The parsers of raw setting values, one per kind of setting.

Each returns the typed value or raises ``ValueError("must be ..., got ...")``: the loader
prefixes where the value came from (:meth:`jobctl.config.files.Source.blame`). They take a
:class:`_Where` so one parser serves the file (typed TOML values) and the environment (text).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobctl.domain.durations import parse_duration
from jobctl.domain.netguard import parse_networks
from jobctl.domain.quota import QUOTA_KEYS, DiskFloor, parse_size
from jobctl.errors import InvalidInput


@dataclass(frozen=True)
class _Where:
    """What a parser needs to know about the layer a raw value came from."""

    base: Path  # relative paths are relative to this (the file's directory, or the cwd)
    home: Path  # what ``~`` means
    text: bool  # values arrive as text (environment), so "4" may spell an integer


Parser = Callable[[object, _Where], Any]


def show_value(value: object) -> str:
    """A raw value spelled as the user wrote it, TOML-like: "many", 0, true, a table."""
    if isinstance(value, str | bool | int | float):
        return json.dumps(value)
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return str(value)


def format_seconds(seconds: float) -> str:
    """Exact and short (``30s``, ``1h30m``, ``7d``, ``250ms``) so it parses back unchanged."""
    ms = round(seconds * 1000)
    if abs(ms - seconds * 1000) > 1e-6:
        return repr(seconds)  # finer than a millisecond: plain seconds stay exact
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


def _integer(lo: int, hi: int | None = None) -> Parser:
    bounds = f">= {lo}" if hi is None else f"from {lo} to {hi}"

    def parse(raw: object, where: _Where) -> int:
        value = raw
        if where.text and isinstance(raw, str) and re.fullmatch(r"\s*[+-]?\d+\s*", raw):
            value = int(raw)
        if type(value) is int and lo <= value and (hi is None or value <= hi):
            return value  # type() is not isinstance(): True is an int, but no count
        raise ValueError(f"must be an integer {bounds}, got {show_value(raw)}")

    return parse


def _seconds(raw: object) -> float | None:
    """A duration in seconds from a number or the duration syntax; None if it is neither."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return parse_duration(raw)
        except InvalidInput:
            return None
    return None


def _duration(lo: float, hi: float | None = None) -> Parser:
    low = format_seconds(lo)
    span = f"at least {low}" if hi is None else f"from {low} to {format_seconds(hi)}"

    def parse(raw: object, where: _Where) -> float:
        seconds = _seconds(raw)
        if seconds is None or not math.isfinite(seconds):
            raise ValueError(
                "must be a duration such as 90s, 5m, 1h30m or 7d, or a number of seconds, "
                f"got {show_value(raw)}"
            )
        if seconds < lo or (hi is not None and seconds > hi):
            raise ValueError(f"must be {span}, got {show_value(raw)}")
        return seconds

    return parse


def _choice(*options: str) -> Parser:
    listed = ", ".join(json.dumps(o) for o in options)

    def parse(raw: object, where: _Where) -> str:
        if isinstance(raw, str) and raw.strip().lower() in options:
            return raw.strip().lower()
        raise ValueError(f"must be one of {listed}, got {show_value(raw)}")

    return parse


def _path(raw: object, where: _Where) -> Path:
    text = str(raw) if isinstance(raw, Path) else raw
    if not isinstance(text, str) or not text or "\0" in text:
        raise ValueError(f"must be a path (a non-empty string), got {show_value(raw)}")
    if text == "~" or text.startswith("~/"):
        return where.home / text[2:]
    return where.base / text  # an absolute path stays itself


#: What makes ``db`` a PostgreSQL database rather than a SQLite file.
PG_SCHEMES = ("postgresql://", "postgres://")


def _db(raw: object, where: _Where) -> Path | str:
    """A SQLite file (a path), or a PostgreSQL database (a ``postgresql://`` URL, kept as
    given: libpq reads it)."""
    if isinstance(raw, str) and raw.startswith(PG_SCHEMES):
        return raw
    return _path(raw, where)


def shown_db(db: Path | str) -> str:
    """``db`` as logs show it: a PostgreSQL URL's password replaced by ``***``."""
    if isinstance(db, Path):
        return str(db)
    url = urlsplit(db)
    if url.password is None:
        return db
    return urlunsplit(url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@", 1)))


def _umask(raw: object, where: _Where) -> str:
    """Octal digits, as a string (``"027"``) or a TOML octal integer (``0o027``)."""
    value: int | None = None
    if isinstance(raw, str) and re.fullmatch(r"\s*(0o)?[0-7]{1,4}\s*", raw):
        value = int(raw.strip().removeprefix("0o"), 8)
    elif type(raw) is int:
        value = raw
    if value is None or not 0 <= value <= 0o777:
        raise ValueError(f'must be an octal umask from "000" to "777", got {show_value(raw)}')
    return f"{value:03o}"


def _group(raw: object, where: _Where) -> str:
    if isinstance(raw, str) and re.fullmatch(r"[^\s:]+", raw):
        return raw
    raise ValueError(f"must be a group name, got {show_value(raw)}")


def _listen(raw: object, where: _Where) -> str:
    if isinstance(raw, str):
        m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", raw.strip())
        if m and 1 <= int(m[2]) <= 65535:
            return f"{m[1]}:{int(m[2])}"
    raise ValueError(
        'must be "HOST:PORT" with a port from 1 to 65535, such as "127.0.0.1:9464", '
        f"got {show_value(raw)}"
    )


def _networks(raw: object, where: _Where) -> str:
    """CIDRs as a list or a comma-separated string, kept as that string, normalized."""
    items = raw if isinstance(raw, list) else raw if isinstance(raw, str) else None
    if items is not None and all(isinstance(i, str) for i in items):
        try:
            return ",".join(str(n) for n in parse_networks(items))
        except ValueError:
            pass
    raise ValueError(
        'must be networks such as "10.0.0.0/8,127.0.0.0/8" (or a list of them), '
        f"got {show_value(raw)}"
    )


def _size(raw: object, where: _Where) -> int:
    """Bytes from an integer or a size such as "256MiB" or "1G"; 0 means no limit."""
    if type(raw) is int and raw >= 0:
        return raw
    if isinstance(raw, str):
        try:
            return parse_size(raw)
        except ValueError:
            pass
    raise ValueError(f'must be a size such as "512MiB" or "1GiB", or bytes, got {show_value(raw)}')


def _disk_floor(raw: object, where: _Where) -> DiskFloor:
    if type(raw) is int and raw >= 0:
        return DiskFloor(raw or None)
    if isinstance(raw, str):
        try:
            return DiskFloor.parse(raw)
        except ValueError:
            pass
    raise ValueError(
        'must be a size ("256MiB"), a share of the filesystem ("5%"), both ("256MiB,5%": '
        f"the smaller applies) or 0 (no floor), got {show_value(raw)}"
    )


def _command(raw: object, where: _Where) -> str:
    """A shell command line (``notify.on_failure``)."""
    if isinstance(raw, str) and raw.strip() and "\0" not in raw and len(raw) <= 4096:
        return raw
    raise ValueError(f"must be a shell command line, got {show_value(raw)}")


def _mailto(raw: object, where: _Where) -> str:
    if isinstance(raw, str) and "\0" not in raw and "\n" not in raw and len(raw) <= 1024:
        return raw.strip()
    raise ValueError(f"must be mail addresses (one line), got {show_value(raw)}")


def _commands(raw: object, where: _Where) -> dict[str, str]:
    """``[notify.queues]``: queue name -> command line (JSON from the environment)."""
    if where.text and isinstance(raw, str) and raw.lstrip().startswith("{"):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"must be a JSON table of command lines per queue: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"must be a table of command lines per queue, got {show_value(raw)}")
    out = {}
    for name, line in raw.items():
        try:
            out[name] = _command(line, where)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out


_QUOTA_PARSERS: dict[str, Parser] = {}  # filled by jobctl.config.settings, from the quota fields


def _overrides(raw: object, where: _Where) -> dict[str, dict[str, int]]:
    """``[quota.user.NAME]`` / ``[quota.group.NAME]`` tables: name -> quota key -> value.
    From the environment, the same as JSON: ``{"alice": {"running": 2}}``."""
    if where.text and isinstance(raw, str) and raw.lstrip().startswith("{"):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"must be JSON tables of quotas per name: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"must be tables of quotas per name, got {show_value(raw)}")
    out: dict[str, dict[str, int]] = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise ValueError(f"{name}: must be a table of quotas, got {show_value(table)}")
        out[name] = {}
        for key, value in table.items():
            if key not in _QUOTA_PARSERS:
                raise ValueError(f"{name}.{key}: unknown quota (known: {', '.join(QUOTA_KEYS)})")
            try:
                out[name][key] = _QUOTA_PARSERS[key](value, where)
            except ValueError as exc:
                raise ValueError(f"{name}.{key}: {exc}") from None
    return out
