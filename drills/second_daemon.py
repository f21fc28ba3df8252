"""Drill: a second daemon is refused however the database's path is spelled.

A first daemon runs long jobs (each writing to a journal). A second daemon is started on
the same database through every spelling the drill can make: the path itself, a
symlinked file, a symlinked directory, relative paths (plain and with ``./``, ``..`` and
``//``), a hard link, and a bind mount of the directory (root only). Each must exit 6
with one line, within the timeout, and the first daemon's jobs must be untouched: each
ran once, on its first attempt, and succeeded; they run until every attempt is over.
(The defect of issue 13: the second daemon's recovery took the first one's live jobs as
orphans and ran them again.)

    python drills/second_daemon.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402

LOCKED_EXIT = 6


def spellings(root: Path, db: Path) -> dict[str, tuple[str, Path]]:
    """name -> (the --db argument, the directory it is given from)."""
    (root / "link.db").symlink_to(db)
    (root / "linkdir").symlink_to(db.parent, target_is_directory=True)
    os.link(db, root / "hard.db")
    out = {
        "same_path": (str(db), root),
        "symlinked_file": (str(root / "link.db"), root),
        "symlinked_dir": (str(root / "linkdir" / db.name), root),
        "relative": (f"{db.parent.name}/{db.name}", root),
        "relative_dotted": (f"./{db.parent.name}/../{db.parent.name}//{db.name}", root),
        "hard_link": (str(root / "hard.db"), root),
    }
    bind = root / "bind"
    bind.mkdir()
    if os.geteuid() == 0 and _run(["mount", "--bind", str(db.parent), str(bind)]) == 0:
        out["bind_mount"] = (str(bind / db.name), root)
    return out


def _run(cmd: list[str]) -> int:
    return subprocess.run(cmd, capture_output=True, check=False).returncode


def second(d: _kit.Daemon, name: str, db: str, cwd: Path) -> tuple[int, str, float]:
    """Start a second daemon on ``db``: exit status, stderr (killed if not refused), time."""
    began = time.monotonic()
    cmd = d.command(db, d.root / f"second-{name}.sock")
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=_kit.clean_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -1, err, time.monotonic() - began
    return proc.returncode, err, time.monotonic() - began


def run(jobs: int = 8, only: list[str] | None = None) -> _kit.Result:
    root = _kit.workdir("second")
    (root / "state").mkdir()
    journal = root / "journal"
    d = _kit.Daemon(root, "--lease-ttl", "5", db=root / "state" / "jobctl.db").start()
    with d.client() as c:
        body = {
            "command": _kit.journal_command(journal, 0, until=root / "go"),
            "cwd": "/",
            "max_attempts": 1,
        }
        ids = [j["id"] for j in c.enqueue_many([body] * jobs)]
    _kit.until(lambda: len(_kit.Journal.read(journal).starts) == jobs, 60)
    r = _kit.Result("second_daemon")
    refused = 0
    ways = {k: v for k, v in spellings(root, d.db).items() if only is None or k in only}
    with ThreadPoolExecutor(2) as pool:  # side by side: each must still be refused
        tries = list(pool.map(lambda kv: second(d, kv[0], *kv[1]), ways.items()))
    for name, (code, err, took) in zip(ways, tries, strict=True):
        one_line = err.count("\n") == 1 and err.startswith("jobctl: error: database ")
        ok = code == LOCKED_EXIT and one_line and "in use by" in err
        refused += ok
        r.expect(ok, f"{name}: exit {code} after {took:.1f}s: {err.strip()[:200]}")
    (root / "go").touch()  # the first daemon's jobs ran through every attempt; now end them
    _kit.settled(d, 60)
    with d.client() as c:
        got = [c.get(i) for i in ids]
    d.stop()
    if "bind_mount" in ways:
        _run(["umount", str(root / "bind")])
    found = _kit.Journal.read(journal)
    rerun = sum(n > 1 for n in found.starts.values())
    clean = sum(j["status"] == "succeeded" and len(j["attempts"]) == 1 for j in got)
    r.figures = {
        "spellings": len(ways),
        "refused": refused,
        "first_daemon_jobs": jobs,
        "untouched": clean,
        "run_twice": rerun,
        "overlapping": found.overlaps,
        "dir": root,
    }
    r.expect(
        clean == jobs and rerun == 0 and found.overlaps == 0, "the first daemon's jobs were touched"
    )
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=8)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.jobs))


if __name__ == "__main__":
    sys.exit(main())
