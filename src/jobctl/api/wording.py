"""A refused field's problem in jobctl's words, with what was sent.

pydantic's own messages ("Input should be less than or equal to 1000", "String should
have at most 512 characters") name neither the value that was sent nor, for a string,
how long it was; users met them through ``jobctl add`` as ``--priority: Input should be
…``. The common kinds are put here the way the rest of jobctl speaks ("must be at most
1000 (got 5000)"); any other kind keeps pydantic's message, which is still right.
Pure: no I/O, used by the API's error answers (api/errors.py, api/schedule_edit.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

#: A value shown in a message is cut to this many characters.
SHOWN = 40


def shown(value: object) -> str:
    """``value`` as JSON (what the caller sent), a long string by its length only."""
    if isinstance(value, str) and len(value) > SHOWN:
        return f"a string of {len(value)} characters"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _count(n: object, one: str) -> str:
    return f"{n} {one}" if n == 1 else f"{n} {one}s"


def _length(err: Mapping[str, Any]) -> object:
    value = err.get("input")
    return len(value) if isinstance(value, str | list | dict) else "?"


def _too_long(ctx: Mapping[str, Any], err: Mapping[str, Any]) -> str:
    return f"at most {_count(ctx.get('max_length'), 'character')} (got {_length(err)})"


def _too_short(ctx: Mapping[str, Any], err: Mapping[str, Any]) -> str:
    if ctx.get("min_length") == 1:
        return "must not be empty"
    return f"at least {_count(ctx.get('min_length'), 'character')} (got {_length(err)})"


def _items(word: str, key: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    def say(ctx: Mapping[str, Any], err: Mapping[str, Any]) -> str:
        got = ctx.get("actual_length", _length(err))
        return f"{word} {_count(ctx.get(key), 'item')} (got {got})"

    return say


def _bound(word: str, key: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    def say(ctx: Mapping[str, Any], err: Mapping[str, Any]) -> str:
        return f"must be {word} {ctx.get(key)} (got {shown(err.get('input'))})"

    return say


def _kind(what: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    def say(_: Mapping[str, Any], err: Mapping[str, Any]) -> str:
        return f"must be {what} (got {shown(err.get('input'))})"

    return say


def _one_of(ctx: Mapping[str, Any], err: Mapping[str, Any]) -> str:
    return f"must be {ctx.get('expected')} (got {shown(err.get('input'))})"


_SAY: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str]] = {
    "string_too_long": _too_long,
    "string_too_short": _too_short,
    "too_long": _items("at most", "max_length"),
    "too_short": _items("at least", "min_length"),
    "less_than_equal": _bound("at most", "le"),
    "greater_than_equal": _bound("at least", "ge"),
    "less_than": _bound("less than", "lt"),
    "greater_than": _bound("more than", "gt"),
    "int_type": _kind("a whole number"),
    "int_parsing": _kind("a whole number"),
    "int_from_float": _kind("a whole number"),
    "float_type": _kind("a number"),
    "float_parsing": _kind("a number"),
    "string_type": _kind("a string"),
    "bool_type": _kind("true or false"),
    "bool_parsing": _kind("true or false"),
    "list_type": _kind("a list"),
    "dict_type": _kind("an object"),
    "model_type": _kind("an object"),
    "model_attributes_type": _kind("an object"),
    "literal_error": _one_of,
    "enum": _one_of,
    "missing": lambda _c, _e: "required",
    "extra_forbidden": lambda _c, _e: "not a field jobctl knows",
}


def readable(err: Mapping[str, Any]) -> str | None:
    """The problem of one pydantic error in jobctl's words; None: a kind not worded here."""
    say = _SAY.get(str(err.get("type")))
    return None if say is None else say(err.get("ctx") or {}, err)
