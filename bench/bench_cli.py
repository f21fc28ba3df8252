#!/usr/bin/env python
"""CLI start-up: how long `jobctl add/status/list/show` take, before and after a change.

Run ``python bench/bench_cli.py`` (about 2 min). It starts one real ``jobctl daemon`` on
temp paths (from the ``--after`` revision), fills it with 100 waiting jobs and one finished
job, and times each command line as a user's shell runs it: a fresh interpreter through a
console-script launcher, the socket in ``JOBCTL_SOCKET``, output to a pipe. The same
command lines run with the CLI of the ``--before`` revision (default: ``main``) and of the
``--after`` one (default: ``HEAD``; ``--worktree`` for the working tree), each a
``git archive`` snapshot of ``src/`` on ``PYTHONPATH`` in the same virtualenv.

Timing: hyperfine (``apt-get install hyperfine``) when it is on PATH (``-N``: no shell),
else a Python loop around ``subprocess.run``. Median and p95 of the wall times, and the
mean user+system CPU of one run (which other processes on the machine do not inflate).
Results are printed and written to docs/benchmarks.md between the bench_cli markers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from _common import log, spawn, stop_proc, wait_ready  # noqa: E402

MARK_START, MARK_END = "<!-- bench_cli:start -->", "<!-- bench_cli:end -->"
LAUNCHER = "import sys\nfrom jobctl.cli.main import entry\nsys.exit(entry())\n"
TARGET_MS = 100.0


def snapshot(rev: str, tmp: Path) -> tuple[str, str]:
    """``src/`` of ``rev`` extracted under ``tmp``: (its path, a short name)."""
    src, short = C.extract_src(rev, tmp)
    return str(src), f"{rev} ({short})"


def env_for(src: str, sock: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = src
    env["JOBCTL_SOCKET"] = str(sock)
    env.pop("JOBCTL_DB", None)
    return env


class Daemon:
    def __init__(self, tmp: Path, src: str) -> None:
        self.sock = tmp / "jobctl.sock"
        self.log_path = tmp / "daemon.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = spawn(
            [
                sys.executable,
                "-c",
                LAUNCHER,
                "daemon",
                "--db",
                str(tmp / "jobctl.db"),
                "--socket",
                str(self.sock),
            ],
            env=env_for(src, self.sock),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        wait_ready(self.proc, self.log_path, self.stop, timeout=60)

    def stop(self) -> None:
        stop_proc(self.proc)
        self._log.close()


def fill(sock: Path) -> int:
    """100 jobs waiting (so `list` draws 50 rows) and one finished job for `show`."""
    http = C.UdsHttp(str(sock))
    http.json(
        "POST",
        "/v1/jobs",
        [
            {"command": ["true"], "run_at": "2099-01-01T00:00:00Z", "queue": f"q{i % 4}"}
            for i in range(100)
        ],
    )
    job = http.json("POST", "/v1/jobs", {"command": ["echo", "hello"]})
    deadline = time.time() + 30
    while http.json("GET", f"/v1/jobs/{job['id']}")["status"] != "succeeded":
        if time.time() > deadline:
            raise RuntimeError("the job for `show` did not finish")
        time.sleep(0.05)
    http.close()
    return int(job["id"])


class CommandTiming(TypedDict):
    """One command line's timings, as the report shows them."""

    median_ms: float
    p95_ms: float
    cpu_ms: float
    runs: int


class CliRun(TypedDict):
    """One run of this bench: where and how it timed, and each command before and after."""

    date: str
    nproc: int
    python: str
    timer: str
    runs: int
    load_before: str
    load_after: str
    command: str
    before_rev: str
    after_rev: str
    before: dict[str, CommandTiming]
    after: dict[str, CommandTiming]


@dataclass(frozen=True)
class Timing:
    """One command's timed runs: wall seconds each, and CPU seconds per run."""

    times: list[float]
    cpu: float


def time_hyperfine(
    cmds: list[list[str]], env: dict[str, str], runs: int, out: Path
) -> list[Timing]:
    argv = [
        "hyperfine",
        "-N",
        "--warmup",
        "3",
        "--runs",
        str(runs),
        "--export-json",
        str(out),
        "--style",
        "none",
    ]
    argv += [" ".join(cmd) for cmd in cmds]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    return [Timing(list(r["times"]), r["user"] + r["system"]) for r in results]


def time_loop(cmds: list[list[str]], env: dict[str, str], runs: int) -> list[Timing]:
    found = []
    for cmd in cmds:
        times, cpu = [], []
        for i in range(runs + 3):
            before = os.times()
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
            wall = time.perf_counter() - t0
            after = os.times()
            if i >= 3:  # warm-up runs are not counted
                times.append(wall)
                cpu.append(
                    after.children_user
                    - before.children_user
                    + after.children_system
                    - before.children_system
                )
        found.append(Timing(times, sum(cpu) / len(cpu)))
    return found


def measure(
    src: str, sock: Path, job_id: int, tmp: Path, runs: int, use_hyperfine: bool
) -> dict[str, CommandTiming]:
    launcher = tmp / "jobctl"
    launcher.write_text(LAUNCHER)
    base = [sys.executable, str(launcher)]
    lines = {
        "add -- true": ["add", "--", "true"],
        "status": ["status"],
        "list": ["list"],
        f"show {job_id}": ["show", str(job_id)],
    }
    cmds = [[*base, *args] for args in lines.values()]
    env = env_for(src, sock)
    for cmd in cmds:  # each must work, or the timings mean nothing
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    if use_hyperfine:
        raw = time_hyperfine(cmds, env, runs, tmp / "hyperfine.json")
    else:
        raw = time_loop(cmds, env, runs)
    out: dict[str, CommandTiming] = {}
    for name, r in zip(lines, raw, strict=True):
        out[name] = {
            "median_ms": C.median(r.times) * 1000,
            "p95_ms": C.pct(r.times, 95) * 1000,
            "cpu_ms": r.cpu * 1000,
            "runs": len(r.times),
        }
    return out


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def report(res: CliRun) -> str:
    before, after = res["before"], res["after"]
    lines = [
        MARK_START,
        "",
        "## CLI start-up (`bench/bench_cli.py`)",
        "",
        f"Run on {res['date']}: {res['nproc']} CPUs, Python {res['python']}; timer: "
        f"{res['timer']}, {res['runs']} runs per command after 3 warm-up runs. One daemon "
        f"(from {res['after_rev']}) with 100 waiting jobs and one finished job; each command "
        f"runs in a fresh interpreter through a console-script launcher, output to a pipe. "
        f"Before: the CLI of {res['before_rev']}; after: {res['after_rev']}. Load average "
        f"(1/5/15 min) {res['load_before']} at the start and {res['load_after']} at the end: "
        f"other engineers' tests share these 2 cores, which stretches wall times (CPU is "
        f"the process's own user+system time, which the load does not inflate).",
        "",
        f"Command: `{res['command']}`",
        "",
        "| command | before median (ms) | before p95 | after median (ms) | after p95 "
        "| after CPU (ms) | target median | after |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in after:
        b, a = before[name], after[name]
        ok = "**PASS**" if a["median_ms"] <= TARGET_MS else "**MISS**"
        lines.append(
            f"| `jobctl {name}` | {b['median_ms']:.0f} | {b['p95_ms']:.0f} | "
            f"{a['median_ms']:.0f} | {a['p95_ms']:.0f} | {a['cpu_ms']:.0f} | "
            f"≤ {TARGET_MS:.0f} ms | {ok} |"
        )
    lines += [
        "",
        "Before, every command imported Typer, Click, pydantic and rich and built the "
        "whole command tree (~0.4 s of CPU on this machine); after, `jobctl.cli.fast` serves "
        "these command lines without Typer, the client speaks HTTP/1.1 on the socket without "
        "`http.client`, and rich is imported only to draw a table (`status`, `list`, `show`; "
        "`--json` skips it). See docs/architecture.md.",
        "",
        MARK_END,
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="main", help="revision of the 'before' CLI")
    ap.add_argument("--after", default="HEAD", help="revision of the 'after' CLI and daemon")
    ap.add_argument("--worktree", action="store_true", help="'after' is the working tree")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per command")
    ap.add_argument("--no-hyperfine", action="store_true", help="time with a Python loop")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = ap.parse_args()
    use_hyperfine = shutil.which("hyperfine") is not None and not args.no_hyperfine
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-cli-"))
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = loadavg()
    timed: dict[str, dict[str, CommandTiming]] = {}
    daemon = None
    try:
        before_src, before_rev = snapshot(args.before, tmp)
        if args.worktree:
            after_src, after_rev = str(ROOT / "src"), "the working tree"
        else:
            after_src, after_rev = snapshot(args.after, tmp)
        daemon = Daemon(tmp, after_src)
        job_id = fill(daemon.sock)
        for which, src in (("before", before_src), ("after", after_src)):
            log(f"timing the {which} CLI ({src})")
            timed[which] = measure(src, daemon.sock, job_id, tmp, args.runs, use_hyperfine)
            log(json.dumps(timed[which]))
        load_after = loadavg()
    finally:
        if daemon is not None:
            daemon.stop()
        C.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    res: CliRun = {
        "date": date,
        "nproc": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "timer": "hyperfine -N" if use_hyperfine else "Python loop (subprocess.run)",
        "runs": args.runs,
        "load_before": load_before,
        "load_after": load_after,
        "command": "python bench/bench_cli.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "before_rev": before_rev,
        "after_rev": after_rev,
        "before": timed["before"],
        "after": timed["after"],
    }
    section = report(res)
    print(section)
    if not args.no_write:
        C.write_section((MARK_START, MARK_END), section)
        log(f"wrote {C.DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
