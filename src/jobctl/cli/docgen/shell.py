"""What the bash, zsh and fish completion generators share.

The scripts differ in syntax, not in what they look up: which subcommands a command
path has, how many words follow an option, where options may no longer follow a
positional argument, and how each kind of value completes. Those tables are built
here, once, from the command tree; each shell only spells them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from jobctl.cli.docgen.model import GENERATED, CommandDoc, ParamDoc

#: One arm of a ``case``/``switch`` table: the keys it matches and the body it runs.
Arm = tuple[list[str], str]

_Missing = TypeVar("_Missing")


def script_head(template: str) -> str:
    """A script's opening comments and fixed functions, with the generated-file notice."""
    return template.replace("@GENERATED@", GENERATED).rstrip("\n")


@dataclass(frozen=True)
class ValueCompletion(Generic[_Missing]):
    """How one shell completes each kind of value (:data:`~.model.ValueKind`)."""

    choice: Callable[[tuple[str, ...]], str]
    file: str  # a file, or any path: the shell's file completion serves both
    dir: str
    job_id: str
    none: _Missing  # nothing to offer

    def of(self, param: ParamDoc) -> str | _Missing:
        kind = param.value_kind
        if kind == "choice":
            return self.choice(param.choices)
        if kind in ("file", "path"):
            return self.file
        if kind == "dir":
            return self.dir
        if kind == "job_id":
            return self.job_id
        return self.none


def wrap_keys(keys: Iterable[str], sep: str, cont: str, indent: str, width: int = 80) -> list[str]:
    """Quoted keys joined by ``sep`` into rows; a full row ends in ``cont`` (a line
    continuation) and the next starts with ``indent``."""
    rows = [""]
    for key in keys:
        if rows[-1] and len(rows[-1]) + len(key) > width:
            rows[-1] += cont
            rows.append(indent)
        rows[-1] += (sep if rows[-1].strip() else "") + key
    return rows


def subcommand_arms(cmds: Sequence[CommandDoc], body: Callable[[list[str]], str]) -> list[Arm]:
    """Command path -> ``body`` of its subcommands' names, for commands that have any."""
    return [([c.key], body([s.path[-1] for s in c.subcommands])) for c in cmds if c.subcommands]


def value_options(cmd: CommandDoc) -> Iterator[tuple[str, ParamDoc]]:
    """Every option string of the command that takes a value, with its option."""
    for param in cmd.options:
        if param.takes_value:
            for opt in param.all_opts:
                yield opt, param


def nvalues_keys(cmds: Sequence[CommandDoc]) -> list[tuple[int, list[str]]]:
    """``"path --opt"`` keys of the options that take values, by how many words they take."""
    by_n: dict[int, list[str]] = {}
    for c in cmds:
        for opt, param in value_options(c):
            by_n.setdefault(param.nvalues, []).append(f"{c.key} {opt}")
    return sorted(by_n.items())


def interspersed_arms(cmds: Sequence[CommandDoc]) -> list[Arm]:
    """``return 1`` for the command paths where options may not follow a positional."""
    fixed_order = [c.key for c in cmds if not c.interspersed]
    return [(fixed_order, "return 1")] if fixed_order else []


def positional_slots(cmd: CommandDoc) -> Iterator[tuple[int, ParamDoc, bool]]:
    """(1-based position, argument, whether it takes that word and every later one)."""
    fixed, variadic = cmd.positional_layout()
    for i in range(fixed):
        arg = cmd.positional_at(i)
        if arg is not None:
            yield i + 1, arg, False
    if variadic is not None:
        yield fixed + 1, variadic, True
