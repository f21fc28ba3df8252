"""The config file and the sources of values: which file is read, parsing it, and the
problems of keys that are not settings (with the likeliest intended key)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jobctl.config.parsers import show_value
from jobctl.config.settings import _BY_KEY, _TABLES, Host
from jobctl.errors import InvalidInput

CONFIG_ENV = "JOBCTL_CONFIG"
SYSTEM_CONFIG = Path("/etc/jobctl/jobctl.toml")

#: Keys people look for that are computed, not set: a file naming one gets this reason.
DERIVED = {
    "heartbeat": "not configurable: leases are renewed every lease_ttl / 3; set lease_ttl",
}


class ConfigError(InvalidInput):
    """A setting is malformed. The message says where (file and key, variable or option)
    and what is wrong; as an :class:`InvalidInput` the CLI exits 2 like any usage error."""

    code = "invalid_config"


@dataclass(frozen=True)
class Source:
    """Where an effective value came from: shown by ``jobctl config show``, named in errors."""

    kind: Literal["default", "file", "env", "flag"]
    origin: str = ""  # the file path, variable name or option; empty for a default

    def __str__(self) -> str:
        return f"{self.kind} {self.origin}" if self.origin else self.kind

    def blame(self, key: str) -> str:
        """The prefix of an error about ``key`` from this source."""
        if self.kind == "file":
            return f"{self.origin}: {key}"
        if self.kind == "env":
            return f"environment variable {self.origin}"
        if self.kind == "flag":
            return f"option {self.origin}"
        return f"{key} (default)"


@dataclass(frozen=True)
class ConfigFile:
    """Which file is read, and why: a file named explicitly must exist, the default may not."""

    path: Path
    source: Source

    @property
    def required(self) -> bool:
        return self.source.kind != "default"


def default_config_path(env: Mapping[str, str], host: Host) -> Path:
    if host.euid == 0:
        return SYSTEM_CONFIG
    base = env.get("XDG_CONFIG_HOME") or str(host.home / ".config")
    return host.cwd / base / "jobctl" / "jobctl.toml"


def locate(config_path: Path | None, env: Mapping[str, str], host: Host) -> ConfigFile:
    """``--config``, else ``JOBCTL_CONFIG``, else the default location for this user."""
    if config_path is not None:
        return ConfigFile(host.cwd / config_path, Source("flag", "--config"))
    if named := env.get(CONFIG_ENV):
        return ConfigFile(host.cwd / named, Source("env", CONFIG_ENV))
    return ConfigFile(default_config_path(env, host), Source("default"))


def read_file(config: ConfigFile) -> dict[str, Any] | None:
    """The parsed file; None if the default one is absent. Unreadable or not TOML: an error,
    because nothing in a file that cannot be parsed can be trusted to be what was meant."""
    try:
        data = config.path.read_bytes()
    except FileNotFoundError:
        if not config.required:
            return None
        raise ConfigError(f"{config.path}: no such config file (from {config.source})") from None
    except OSError as exc:
        raise ConfigError(f"{config.path}: cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{config.path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        m = re.fullmatch(r"(.*) \((at (?:line \d+, column \d+|end of document))\)", str(exc))
        what = f"{m[2]}: {m[1].lower()}" if m else str(exc)
        raise ConfigError(f"{config.path}: invalid TOML {what}") from None


def _unknown(key: str) -> str:
    """The problem text for a key nobody declared, with the likeliest intended key: a near
    spelling in the same table, else the same name in another place."""
    import difflib

    table, _, leaf = key.rpartition(".")
    near = {k.rpartition(".")[2]: k for k in [*_BY_KEY, *_TABLES, *DERIVED]}
    near = {n: k for n, k in near.items() if k.rpartition(".")[0] == table}
    guesses = [near[g] for g in difflib.get_close_matches(leaf, near, 1, 0.6)]
    guesses = guesses or [k for k in _BY_KEY if k.rpartition(".")[2] == leaf]
    if guesses and table and "." not in guesses[0]:  # a top-level key after a [table]
        return f"unknown key (did you mean {guesses[0]}? it must come before any [table])"
    if guesses:
        return f"unknown key (did you mean {guesses[0]}?)"
    return "unknown key (`jobctl config show` lists every key)"


def _file_values(data: Mapping[str, Any], path: Path) -> tuple[dict[str, object], list[str]]:
    """The file's raw values by field name, and one problem per key that is not a setting."""
    flat: list[tuple[str, object]] = []
    problems: list[str] = []
    for name, value in data.items():
        if name in _TABLES and isinstance(value, dict):
            flat += [(f"{name}.{sub}", v) for sub, v in value.items()]
        elif name in _TABLES:
            problems.append(f"{path}: {name}: must be a table ([{name}]), got {show_value(value)}")
        else:
            flat.append((name, value))
    values: dict[str, object] = {}
    for key, value in flat:
        if key in _BY_KEY:
            values[_BY_KEY[key]] = value
        else:
            problems.append(f"{path}: {key}: {DERIVED.get(key) or _unknown(key)}")
    return values, problems
