"""api/wording.py: pydantic's refusals in jobctl's words, with what was sent."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobctl.api.wording import readable, shown


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    key: str = Field("k", min_length=1, max_length=5)
    code: str = Field("abc", min_length=3)
    priority: int = Field(0, ge=-10, le=10)
    weight: float = Field(1.0, gt=0, lt=100)
    tags: list[str] = Field(default_factory=list, max_length=2)
    flag: bool = False
    need: int


def _first(**data: Any) -> dict[str, Any]:
    with pytest.raises(ValidationError) as info:
        _M.model_validate({"need": 1} | data)
    return dict(info.value.errors()[0])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"key": "k" * 9}, "at most 5 characters (got 9)"),
        ({"key": ""}, "must not be empty"),
        ({"code": "ab"}, "at least 3 characters (got 2)"),
        ({"priority": 99}, "must be at most 10 (got 99)"),
        ({"priority": -99}, "must be at least -10 (got -99)"),
        ({"weight": 0.0}, "must be more than 0.0 (got 0.0)"),
        ({"weight": 100.0}, "must be less than 100.0 (got 100.0)"),
        ({"tags": ["a", "b", "c"]}, "at most 2 items (got 3)"),
        ({"priority": "high"}, 'must be a whole number (got "high")'),
        ({"key": 7}, "must be a string (got 7)"),
        ({"flag": "yes"}, 'must be true or false (got "yes")'),
        ({"bogus": 1}, "not a field jobctl knows"),
    ],
)
def test_common_kinds_in_jobctl_words(data: dict[str, Any], words: str) -> None:
    assert readable(_first(**data)) == words


def test_a_missing_field_is_required() -> None:
    with pytest.raises(ValidationError) as info:
        _M.model_validate({})
    assert readable(dict(info.value.errors()[0])) == "required"


def test_an_unworded_kind_is_left_to_pydantic() -> None:
    assert readable({"type": "url_parsing", "msg": "whatever"}) is None


def test_long_values_are_shown_by_length_or_cut() -> None:
    assert shown("x" * 100) == "a string of 100 characters"
    assert shown('say "hi"') == '"say \\"hi\\""'
    cut = shown(list(range(100)))
    assert len(cut) == 40 and cut.endswith("…")
