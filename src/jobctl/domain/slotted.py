"""Straight-line builders of frozen, slotted dataclasses that skip ``__init__``.

Why: the store hands back a :class:`jobctl.domain.records.Job` (and its
:class:`jobctl.domain.models.JobSpec`) per job it inserts, and a frozen dataclass's
``__init__`` stores each field through ``object.__setattr__``: for a ``Job`` about 5 µs,
a third of the PostgreSQL committer's CPU per job of a 500-job batch (issue 15). Here the
fields are stored into a plain twin class of the same slots (a store is then one bytecode,
not a call), and the object becomes the frozen class by ``__class__`` assignment, which
CPython allows between classes of the same slots: about 0.6 µs. The object is exactly what
``__init__`` gives (tests hold them equal, type and hash included); it is frozen from then
on. Only for values checked before: ``__post_init__`` does not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def compile_builder(
    cls: type[T],
    name: str,
    params: str,
    values: dict[str, str],
    scope: dict[str, Any] | None = None,
) -> Callable[..., T]:
    """A function ``name(params)`` that returns a ``cls`` whose every field ``f`` is the
    Python expression ``values[f]`` (of the parameters and of ``scope``'s names)."""
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if tuple(getattr(cls, "__slots__", ())) != tuple(fields) or set(values) != set(fields):
        raise TypeError(f"{cls.__name__}: a slotted dataclass, each field given once")
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": tuple(fields)})
    lines = [f"def {name}({params}):", "    obj = Draft()"]
    lines += [f"    obj.{field} = {values[field]}" for field in fields]
    lines += ["    obj.__class__ = Cls", "    return obj"]
    env: dict[str, Any] = dict(scope or {}) | {"Draft": draft, "Cls": cls}
    exec("\n".join(lines), env)  # the source is built above from the field names only
    fn: Callable[..., T] = env[name]
    return fn


__all__ = ["compile_builder"]
