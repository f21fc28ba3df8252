"""croniter as jobctl's cron front-end, measured against jobctl's own parser.

Prints, for the decision recorded in docs/dependencies.md:
* import cost (best of N fresh interpreters, -X importtime's cumulative figure);
* parse cost per expression, uncached (jobctl's parse_cron without its LRU cache,
  croniter.expand) over a corpus of everyday and extended expressions;
* how each reads the extended items, and the error message each gives.

Run: .venv/bin/python bench/bench_cron_frontend.py [--runs N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import timeit

CORPUS = [
    "0 6 * * *", "*/15 * * * *", "30 2 * * 1-5", "0 9 1,15 * MON", "0 0 */2 * 1",
    "5/10 3/7 2/9 2/5 1/2", "0 0 L * *", "0 9 * * 1#1", "0 9 * * FRI#2", "H H * * *",
    "H(0-29)/10 * * * *",
]  # fmt: skip
READINGS = ["0 0 L * *", "0 0 LW * *", "0 0 15W * *", "0 9 * * 5L", "0 9 * * 1#1",
            "H/15 * * * *", "5-5/2 * * * *", "0 0 30 2 *"]  # fmt: skip
ERRORS = ["61 * * * *", "0 0 * * 1#6", "0 0 L * * *", "0 0 ? * 1", "0 0 1-0 * *"]


def import_ms(module: str, runs: int) -> float:
    """Best cumulative import time of ``module`` in a fresh interpreter, in ms."""
    best = float("inf")
    for _ in range(runs):
        out = (
            subprocess.run(
                [sys.executable, "-X", "importtime", "-c", f"import {module}"],
                capture_output=True,
                text=True,
                check=True,
            )
            .stderr.strip()
            .splitlines()[-1]
        )
        best = min(best, int(out.split("|")[1]) / 1000)
    return best


def parse_us(runs: int) -> tuple[float, float]:
    from croniter import croniter

    from jobctl.domain import cron_parse

    def ours() -> None:
        for text in CORPUS:
            cron_parse._parse_cached.__wrapped__(text, "sch-1" if "H" in text else None)

    def theirs() -> None:
        for text in CORPUS:
            croniter.expand(text, hash_id=b"sch-1")

    per = len(CORPUS)
    a = min(timeit.repeat(ours, number=runs, repeat=5)) / runs / per * 1e6
    b = min(timeit.repeat(theirs, number=runs, repeat=5)) / runs / per * 1e6
    return a, b


def readings() -> None:
    from croniter import croniter

    from jobctl.domain.cron import describe, parse_cron

    for text in READINGS:
        try:
            ours = describe(parse_cron(text, "sch-1"))
        except Exception as exc:
            ours = f"error: {exc}"
        try:
            theirs = str(croniter.expand(text, hash_id=b"sch-1")[0])
        except Exception as exc:
            theirs = f"error: {exc}"
        print(f"  {text!r:18} jobctl: {ours}\n  {'':18} croniter: {theirs}")


def errors() -> None:
    from croniter import croniter

    from jobctl.domain.cron import parse_cron

    for text in ERRORS:
        try:
            parse_cron(text)
            ours = "accepted"
        except Exception as exc:
            ours = str(exc)
        try:
            croniter.expand(text)
            theirs = "accepted"
        except Exception as exc:
            theirs = f"{type(exc).__name__}: {exc}"
        print(f"  {text!r:16} jobctl: {ours}\n  {'':16} croniter: {theirs}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print("import, best of 5 (ms):")
    for module in ("jobctl.domain.cron", "croniter", "cronsim"):
        print(f"  {module:20} {import_ms(module, 5):7.1f}")
    ours, theirs = parse_us(args.runs)
    print(f"parse, uncached, per expression: jobctl {ours:.1f} us, croniter.expand {theirs:.1f} us")
    print("readings:")
    readings()
    print("error messages:")
    errors()


if __name__ == "__main__":
    main()
