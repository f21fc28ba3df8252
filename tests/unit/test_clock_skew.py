"""``JOBCTL_CLOCK_SKEW`` (tests and drills move a daemon's clock with it): a value that is
not a finite number of seconds within a year is one clear error, never an internal one."""

from __future__ import annotations

import pytest

from jobctl.domain.clock import SkewedClock, SystemClock, skewed_clock
from jobctl.errors import InvalidInput


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "-inf", "1e12", ""])
def test_a_skew_is_a_finite_number_of_seconds_within_a_year(text: str) -> None:
    if not text:
        assert isinstance(skewed_clock(text), SystemClock)
        return
    with pytest.raises(InvalidInput, match="JOBCTL_CLOCK_SKEW"):
        skewed_clock(text)


def test_a_skew_moves_the_clock() -> None:
    assert isinstance(skewed_clock("-120"), SkewedClock)
