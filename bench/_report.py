"""The report helpers that write a script's section of docs/benchmarks.md: tables of
targets met or missed, the machine and load lines, the header and the saved results."""

import datetime as dt
import json
import math
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from _base import DOC, RESULTS, ROOT, UTC, Result, log, median
from _daemons import BACKGROUND


class Rows:
    """A results table's rows, and each target met or missed, in table order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.checks: list[tuple[str, bool]] = []

    def add(self, num: str, name: str, value: str, target: str, ok: bool | None) -> None:
        self.lines.append(f"| {num} | {name} | {value} | {target} | {verdict(ok)} |")
        if ok is not None:
            self.checks.append((f"{num} {name}", ok))


def section(
    marks: tuple[str, str],
    title: str,
    info: dict[str, str],
    elapsed: float,
    cmd: str,
    rows: Rows,
    notes: list[str],
) -> str:
    """A bench's section of docs/benchmarks.md: between its markers, the heading, the run's
    header, the command, the results table and the notes."""
    lines = [
        marks[0],
        "",
        f"## {title}",
        "",
        header(info, elapsed),
        "",
        f"Command: `{cmd}`",
        "",
        "| # | workload | result | target | verdict |",
        "|---|---|---:|---|---|",
        *rows.lines,
        "",
        *notes,
        "",
        marks[1],
    ]
    return "\n".join(lines)


def git_state() -> str | None:
    """``working tree at REV`` (and whether src/ has uncommitted changes), or None
    where git cannot say."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:
        return None
    return f"working tree at {rev}" + (" with uncommitted changes in src/" if dirty else "")


def source_info() -> str:
    """What was measured: the working tree the venv's editable install points at."""
    import jobctl

    where = Path(jobctl.__file__).resolve().parent
    state = git_state()
    if state is None:
        return f"working tree ({where})"
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    return state + f" (jobctl {jobctl.__version__} imported from {shown})"


def machine() -> dict[str, str]:
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1024 / 1024
    versions = []
    for mod in ("uvicorn", "fastapi", "uvloop"):
        try:
            from importlib.metadata import version

            versions.append(f"{mod} {version(mod)}")
        except Exception:
            pass
    return {
        "date": dt.datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": model,
        "mem": f"{mem:.0f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "libs": ", ".join(versions),
        "jobctl": source_info(),
    }


def machine_line(info: dict[str, str]) -> str:
    return (
        f"Run on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['mem']} RAM, "
        f"Linux {info['kernel']}, Python {info['python']}, SQLite {info['sqlite']}, "
        f"{info['libs']}; jobctl: {info['jobctl']}. Temp files on the root disk (real "
        f"fsync)."
        + (f" PostgreSQL on this machine: {info['postgres']}." if "postgres" in info else "")
    )


def background_line() -> str:
    if not BACKGROUND:
        return ""
    return (
        f"CPU used by other processes just before each measurement (other engineers' "
        f"tests and benchmarks share this machine): median {median(BACKGROUND):.2f}, "
        f"max {max(BACKGROUND):.2f} cores."
    )


def header(info: dict[str, str], elapsed: float) -> str:
    return " ".join(
        x
        for x in (
            machine_line(info),
            background_line(),
            f"Total bench time {elapsed / 60:.1f} min.",
        )
        if x
    )


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**PASS**" if ok else "**MISS**")


def write_section(marks: tuple[str, str], section: str) -> None:
    """Replace this script's marked section of docs/benchmarks.md, keeping the rest.

    One read-modify-write right away (other scripts write their own sections)."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = (
        DOC.read_text()
        if DOC.exists()
        else (
            "# Benchmarks\n\nHow fast jobctl is, measured by the scripts in `bench/`; each "
            "script rewrites only its own section (between its markers).\n"
        )
    )
    start, end = marks
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


#: A script's report: (results, sizes, command, machine, elapsed) -> (section, checks).
SizesT = TypeVar("SizesT")
#: A script's one renderer: (typed results, sizes, command, machine, elapsed) ->
#: (its section of docs/benchmarks.md, each target with whether it was met).
Report = Callable[[Result, SizesT, str, dict[str, str], float], tuple[str, list[tuple[str, bool]]]]


def render_saved(
    path: str,
    report: Report[Result, SizesT],
    sizes: Callable[..., SizesT],
    marks: tuple[str, str],
    write: bool,
) -> None:
    """``--from-json``: print (and unless ``write`` is false, write) the report of a saved
    result file again, without running anything."""
    saved = json.loads(Path(path).read_text())
    BACKGROUND[:] = saved["background"]
    section, _ = report(
        saved["results"],
        sizes(**saved["sizes"]),
        saved["command"],
        saved["machine"],
        saved["elapsed"],
    )
    print(section)
    if write:
        write_section(marks, section)


def conclude(
    script: str,
    R: Result,
    sz: SizesT,
    info: dict[str, str],
    elapsed: float,
    report: Report[Result, SizesT],
    marks: tuple[str, str],
    write: bool,
) -> None:
    """After the runs: keep the raw results, print the report and each target met or
    missed, and (unless ``write`` is false) write the script's section of the doc."""
    cmd = f"python bench/{script}.py" + "".join(f" {a}" for a in sys.argv[1:])
    saved = save_json(
        script,
        {
            "results": R,
            "sizes": sz.__dict__,
            "command": cmd,
            "machine": info,
            "elapsed": elapsed,
            "background": BACKGROUND,
        },
    )
    log(f"raw results in {saved}")
    section, checks = report(R, sz, cmd, info, elapsed)
    print(section)
    print("\nTargets:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    bad = [k for k, v in R.items() if isinstance(v, dict) and v.get("verified") is False]
    if bad:
        print("  WARNING: verification failed for " + ", ".join(bad))
    if write:
        write_section(marks, section)
        log(f"wrote {DOC}")


def save_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(payload, default=str, indent=1))
    return path


def fmt(x: Any, digits: int = 0) -> str:
    """A number for a report table: thousands separated; missing or NaN as "n/a", text as is."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"
