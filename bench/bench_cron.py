#!/usr/bin/env python
"""How long one ``next_fire`` takes (microseconds), for a few expressions and zones.

Moved here from the end of ``jobctl/domain/cron.py`` (issue 19): a manual benchmark is
bench code, not product code. Best of 5 repeats, to see through noise from other
processes. Run ``python bench/bench_cron.py [--runs N]``; it prints one line a case.
"""

from __future__ import annotations

import argparse
import timeit
from dataclasses import dataclass
from datetime import UTC, datetime

from jobctl.domain.cron import load_zone, next_fire, parse_cron

CASES = (
    ("0 6 * * *", "Asia/Tokyo"),
    ("*/15 * * * *", "UTC"),
    ("30 2 * * 1-5", "America/New_York"),
)


@dataclass(frozen=True)
class CronTiming:
    expression: str
    zone: str
    micros: float  # per next_fire call, best of 5 repeats


def measure(expression: str, zone: str, runs: int) -> CronTiming:
    """Microseconds per ``next_fire`` call for one expression and zone."""
    parsed, zone_info = parse_cron(expression), load_zone(zone)
    moment = datetime(2027, 3, 1, 12, 34, 56, tzinfo=UTC)
    timer = timeit.Timer(lambda: next_fire(parsed, zone_info, moment))
    return CronTiming(expression, zone, min(timer.repeat(repeat=5, number=runs)) / runs * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000, help="calls per repeat")
    args = parser.parse_args()
    for expression, zone in CASES:
        t = measure(expression, zone, args.runs)
        print(f"{t.expression!r:>18} {t.zone:<18} {t.micros:6.2f} us/next_fire")


if __name__ == "__main__":
    main()
