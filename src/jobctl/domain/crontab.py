"""Reading a user crontab (``crontab -l``) as what cron would run. Pure: no clock, no I/O.

``jobctl import-crontab`` turns each entry into a schedule. This module decides what an
entry *means*, following cronie / Vixie cron line by line, so that an imported entry runs
the same command, in the same shell, directory and environment, at the same times:

* Comments (first non-blank character ``#``) and blank lines are skipped. There are no
  trailing comments and no line continuations, as in cron.
* ``NAME=value`` lines (spaces around ``=`` allowed; the name or the value may be quoted
  with matching ``'`` or ``"`` to keep blanks) set a variable for the entries **after**
  them, as in cron. ``SHELL`` is the shell entries run with (default ``/bin/sh``),
  ``HOME`` their working directory (default: the importing user's home). ``CRON_TZ``
  (cronie) is the time zone of the entries after it; ``CRON_TZ=`` resets it. ``TZ``, as
  in cron, only reaches the commands' environment. ``MAILTO`` goes into the entries'
  environment, where jobctl's failure notification reads it: a run that ends dead is
  mailed there (cron mails every run's output; jobctl keeps output in ``jobctl logs``),
  and ``MAILTO=""`` mails nothing. It is left out of the schedule's name, so a crontab
  imported before this keeps its names. ``MAILFROM`` with a value is reported as
  unsupported; everything else, ``SHELL``, ``HOME`` and ``PATH`` included, goes into
  the commands' environment.
* Entries are five time fields or a macro (``@daily`` ...), then the command. ``@reboot``
  is unsupported: schedules fire at clock times, not at boot.
* ``%`` in a command (cron's stdin feature): the first unescaped ``%`` ends the command,
  the rest is the command's standard input with each further ``%`` a newline, and ``\\%``
  is a literal ``%``. jobctl commands read ``/dev/null``, so the input is fed explicitly:
  the shell runs ``printf '%s' '<input>' | { <command>\\n}`` (see :func:`shell_script`).
  That needs a POSIX shell; with any other ``SHELL`` such an entry is an error.

A line that cannot be honoured becomes a :class:`Problem` with its line number; a line
with an error changes nothing (an invalid ``CRON_TZ`` does not apply to later entries).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from jobctl.domain.cron import load_zone, parse_cron
from jobctl.domain.cron_parse import MACROS
from jobctl.errors import InvalidSchedule

__all__ = [
    "DEFAULT_SHELL",
    "Entry",
    "Problem",
    "parse_crontab",
    "schedule_name",
    "shell_script",
    "split_input",
]

DEFAULT_SHELL = "/bin/sh"
#: Shells that understand the ``printf ... | { ...; }`` wrapper used for ``%`` input.
POSIX_SHELLS = frozenset(
    {"sh", "ash", "dash", "bash", "ksh", "ksh93", "mksh", "lksh", "oksh", "pdksh", "posh",
     "yash", "zsh", "busybox"}
)  # fmt: skip
#: Variables that configure cron itself rather than the commands: never put in the env.
_CRON_ONLY = frozenset({"CRON_TZ", "MAILFROM"})
#: Variables left out of an imported schedule's name (older imports had none of them).
_NOT_NAMED = frozenset({"MAILTO"})
_NAME = re.compile(r"""\s*(?:"(?P<dq>[^"=]*)"|'(?P<sq>[^'=]*)'|(?P<bare>[^\s="'][^\s=]*))\s*=\s*""")
_FIELDS = re.compile(r"(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?:\s(.*))?$", re.DOTALL)
_MACRO = re.compile(r"(@\S*)(?:\s(.*))?$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Entry:
    """One crontab entry, with everything in effect at its line.

    ``expression`` is the schedule as written (fields joined by one space, or the macro);
    ``command`` is the command text as written, ``%`` input included; ``script`` is what
    ``shell -c`` must run to behave like cron (see :func:`shell_script`).
    """

    line: int
    expression: str
    command: str
    shell: str
    script: str
    env: tuple[tuple[str, str], ...]
    zone: str | None
    home: str | None

    @property
    def argv(self) -> list[str]:
        """The command jobctl runs: cron runs every entry as ``$SHELL -c COMMAND``."""
        return [self.shell, "-c", self.script]


@dataclass(frozen=True, slots=True)
class Problem:
    """A line jobctl does not import: ``unsupported`` (a known cron feature) or ``error``."""

    line: int
    kind: Literal["unsupported", "error"]
    message: str
    text: str
    expression: str | None = None
    command: str | None = None


@dataclass
class _State:
    """What earlier lines set: the variables, in definition order (a redefinition wins)."""

    env: dict[str, str] = field(default_factory=dict)
    zone: str | None = None


def parse_crontab(text: str) -> list[Entry | Problem]:
    """Every entry and every problem line of a crontab, in line order (numbers from 1)."""
    state = _State()
    out: list[Entry | Problem] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")  # a file saved with CRLF means the same thing
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        head = _NAME.match(line)
        if head:
            problem = _assign(state, number, line, head)
        else:
            problem = None
            out.append(_entry(state, number, line))
        if problem is not None:
            out.append(problem)
    return out


def _assign(state: _State, number: int, line: str, head: re.Match[str]) -> Problem | None:
    """Apply a ``NAME=value`` line (cronie's ``load_env`` rules); a Problem if it can't."""
    name = head.group("dq") if head.group("dq") is not None else head.group("sq")
    name = head.group("bare") if name is None else name
    rest = line[head.end() :]

    def error(message: str) -> Problem:
        return Problem(number, "error", message, line.strip())

    value = rest.rstrip()
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:
            return error(f"unterminated quote in the value of {name}")
        if rest[end + 1 :].strip():
            return error(f"text after the closing quote of {name}'s value")
        value = rest[1:end]
    if not name:
        return error("empty variable name")
    if name.startswith("JOBCTL_"):
        return error(f"{name}: JOBCTL_* variables are set by jobctl for each run")
    if name == "CRON_TZ":
        return _set_zone(state, value, error)
    if name == "MAILFROM":
        if not value:
            return None  # "mail nothing" is what jobctl does anyway
        return Problem(
            number,
            "unsupported",
            f"{name} ignored: jobctl mails a failure as jobctl@HOST, and keeps output "
            "(jobctl logs)",
            line.strip(),
        )
    if name == "HOME" and not value.startswith("/"):
        return error("HOME must be an absolute path (it is the commands' working directory)")
    if name == "SHELL" and not value:
        return error("SHELL is empty")
    state.env.pop(name, None)  # re-insert: the order of definition is kept for display
    state.env[name] = value
    return None


def _set_zone(state: _State, value: str, error: Callable[[str], Problem]) -> Problem | None:
    """``CRON_TZ``: the zone of the entries that follow; empty resets to the default."""
    if value:
        try:
            load_zone(value)
        except InvalidSchedule as exc:
            return error(f"CRON_TZ: {exc.message}")
    state.zone = value or None
    return None


def _entry(state: _State, number: int, line: str) -> Entry | Problem:
    """One schedule line: the timing (five fields or a macro), then the command."""
    body = line.lstrip()
    macro = _MACRO.match(body) if body.startswith("@") else None
    fields = None if macro else _FIELDS.match(body)
    if macro:
        expression, command = macro.group(1), (macro.group(2) or "").lstrip()
    elif fields:
        expression = " ".join(fields.group(1, 2, 3, 4, 5))
        command = (fields.group(6) or "").lstrip()
    else:
        found = len(body.split())
        return Problem(
            number,
            "error",
            f"expected 5 time fields (or a macro such as @daily) and a command, "
            f"got {found} word{'s' if found != 1 else ''}",
            line.strip(),
        )
    problem = _check_timing(number, line, expression, command)
    if problem is not None:
        return problem
    return _with_command(state, number, line, expression, command)


def _check_timing(number: int, line: str, expression: str, command: str) -> Problem | None:
    if expression.lower() == "@reboot":
        return Problem(
            number,
            "unsupported",
            "@reboot is not supported: schedules fire at clock times, not at boot",
            line.strip(),
            expression,
            command.strip(),
        )
    if expression.startswith("@") and expression.lower() not in MACROS:
        known = ", ".join(MACROS)
        message = f"unknown macro {expression!r} (expected one of {known}, or 5 fields)"
    else:
        try:
            message = parse_cron(expression).never_reason or ""
        except InvalidSchedule as exc:
            message = exc.message
    if message:
        return Problem(number, "error", message, line.strip(), expression, command.strip())
    return None


def _with_command(
    state: _State, number: int, line: str, expression: str, command: str
) -> Entry | Problem:
    """The entry, once its command (and ``%`` input, if any) is known to be runnable."""

    def error(message: str) -> Problem:
        return Problem(number, "error", message, line.strip(), expression, command.strip())

    if not command.strip():
        return error("no command after the schedule")
    head, data = split_input(command)
    if not head.strip():
        return error("no command before the first '%' (the text after it is standard input)")
    shell = state.env.get("SHELL", DEFAULT_SHELL)
    if data and posixpath.basename(shell) not in POSIX_SHELLS:
        return error(
            f"'%' standard input needs a POSIX shell to be fed to the command; SHELL is "
            f"{shell} (escape the % as \\% if it is meant literally)"
        )
    env = tuple((k, v) for k, v in state.env.items() if k not in _CRON_ONLY)
    return Entry(
        line=number,
        expression=expression,
        command=command,
        shell=shell,
        script=shell_script(head, data),
        env=env,
        zone=state.zone,
        home=state.env.get("HOME"),
    )


def split_input(command: str) -> tuple[str, str | None]:
    """Split a cron command at its first unescaped ``%`` into (command, standard input).

    A port of cronie's ``do_command``: in the command, ``\\%`` becomes ``%`` and other
    backslashes stay; in the input, each ``%`` is a newline, ``\\%`` a literal ``%``, and
    other backslashes stay. ``None`` means there was no ``%`` (no input at all).
    """
    out: list[str] = []
    escaped = False
    for index, ch in enumerate(command):
        if escaped:
            escaped = False
            if ch == "%":
                out[-1] = "%"  # the backslash is replaced, not kept
            else:
                out.append(ch)
        elif ch == "\\":
            escaped = True
            out.append(ch)
        elif ch == "%":
            return "".join(out), _input_text(command[index + 1 :])
        else:
            out.append(ch)
    return "".join(out), None


def _input_text(data: str) -> str:
    """cronie's translation of the text after the first ``%`` (see :func:`split_input`)."""
    out: list[str] = []
    escaped = False
    for ch in data:
        char = ch
        if escaped:
            if char != "%":
                out.append("\\")
        elif char == "%":
            char = "\n"
        escaped = char == "\\"
        if not escaped:
            out.append(char)
    if escaped:
        out.append("\\")
    return "".join(out)


def shell_script(command: str, data: str | None) -> str:
    """What ``SHELL -c`` runs so that ``command`` reads ``data`` on stdin, as under cron.

    The braces make the whole command list read the input (``a; b`` under cron shares
    one stdin); the newline before ``}`` keeps a trailing ``# comment`` or ``&`` from
    swallowing it. ``printf '%s'`` writes the input byte for byte, with no added newline,
    exactly as cron does. Empty input is the same as jobctl's ``/dev/null``.
    """
    if not data:
        return command
    return f"printf '%s' {shlex.quote(data)} | {{ {command}\n}}"


def schedule_name(
    expression: str, tz: str, argv: Iterable[str], env: Mapping[str, str], cwd: str
) -> str:
    """A stable name for an imported entry: ``crontab-`` and 8 hex digits of its content.

    The same entry imported again gets the same name, so the daemon's unique-name rule
    makes re-imports create nothing twice. Changing the entry's timing, zone, command,
    environment or directory makes it a different schedule. The directory is in the hash
    so that two users importing the same line (into their own homes) do not collide.
    """
    blob = json.dumps(
        {"cron": expression, "tz": tz, "command": list(argv),
         "env": sorted((k, v) for k, v in env.items() if k not in _NOT_NAMED), "cwd": cwd},
        sort_keys=True,
        separators=(",", ":"),
    )  # fmt: skip
    return "crontab-" + hashlib.sha256(blob.encode()).hexdigest()[:8]
