"""Drill: a damaged database is refused at start in one line, and degrades a running daemon.

A store of ``--jobs`` jobs is built and damaged in every way the drill knows: random bytes
of the same size, the first half of the file, a text file, ``--copies`` copies with
random pages overwritten (each with its own seed), page 1 overwritten after its header,
and a sound file with a garbage write-ahead log beside it (SQLite ignores a WAL whose
checksums fail: that one must start, with every job). The daemon must refuse each damaged
one with exit 11 and one line on stderr. Then a daemon runs on a sound store, every page
after the second is overwritten under it, and it must answer 503 JSON
``store_corrupt``, say ``degraded`` in status and log the damage once.

    python drills/corrupt_store.py --copies 20
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402
from jobctl.domain.clock import SystemClock  # noqa: E402
from jobctl.domain.models import JobSpec  # noqa: E402
from jobctl.errors import StoreCorrupt  # noqa: E402
from jobctl.store.sqlite import SqliteStore  # noqa: E402

CORRUPT_EXIT = 11
PAGE = 4096
Damage = Callable[[Path, bytes, random.Random], object]


def make_store(path: Path, jobs: int) -> None:
    """A store of ``jobs`` jobs due tomorrow, closed (checkpointed into the file)."""
    clock = SystemClock()
    store = SqliteStore(path, clock, random.Random(1))
    tomorrow = clock.now() + timedelta(days=1)
    store.insert(
        [
            JobSpec(command=("true", str(i)), run_at=tomorrow, owner_uid=0, cwd="/")
            for i in range(jobs)
        ]
    )
    store.close()


def pages(db: Path, good: bytes, rng: random.Random) -> None:
    db.write_bytes(good)
    with db.open("r+b") as f:
        for page in rng.sample(range(1, len(good) // PAGE), 4):
            f.seek(page * PAGE)
            f.write(rng.randbytes(PAGE))


KINDS: dict[str, Damage] = {
    "random_bytes": lambda db, good, rng: db.write_bytes(rng.randbytes(len(good))),
    "truncated": lambda db, good, rng: db.write_bytes(good[: len(good) // 2]),
    "text_file": lambda db, good, rng: db.write_text("this is not a database\n" * 200),
    "header_page": lambda db, good, rng: db.write_bytes(
        good[:100] + rng.randbytes(PAGE - 100) + good[PAGE:]
    ),
}


def start_on(db: Path) -> tuple[int, str]:
    d = _kit.Daemon(db.parent, db=db)
    cmd = d.command()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_kit.clean_env(), timeout=120)
    return done.returncode, done.stderr


def refused(db: Path) -> tuple[bool, str]:
    """Start a daemon on a damaged ``db``: refused with exit 11 and one line?"""
    try:
        code, err = start_on(db)
    except subprocess.TimeoutExpired:
        return False, "not refused: still running after 120 s"
    one = err.count("\n") == 1 and err.startswith("jobctl: error: database ") and "corrupt" in err
    return code == CORRUPT_EXIT and one, f"exit {code}: {err.strip()[-300:]}"


def garbage_wal(root: Path, good: bytes, jobs: int) -> tuple[bool, str]:
    """A sound file beside a garbage WAL: starts, and every job is there."""
    where = root / "wal"
    where.mkdir(mode=0o700)
    (where / "jobctl.db").write_bytes(good)
    (where / "jobctl.db-wal").write_bytes(os.urandom(64 * 1024))
    d = _kit.Daemon(where).start()
    try:
        with d.client() as c:
            counts = c.status()["counts"]
    finally:
        d.stop()
    return counts["scheduled"] == jobs, f"counts {counts}"


def while_running(root: Path, good: bytes) -> tuple[bool, str]:
    """Damage under a running daemon: 503 JSON store_corrupt, degraded, one log line."""
    where = root / "live"
    where.mkdir(mode=0o700)
    (where / "jobctl.db").write_bytes(good)
    d = _kit.Daemon(where).start()
    size = d.db.stat().st_size
    with d.db.open("r+b") as f:
        for page in range(2, size // PAGE):
            f.seek(page * PAGE)
            f.write(os.urandom(PAGE))
    answers = []
    with d.client() as c:
        for _ in range(5):
            try:
                c.list_jobs(limit=500)
                answers.append("200")
            except StoreCorrupt as exc:
                answers.append(f"503 {exc.code}")  # the client read a JSON store_corrupt
            except Exception as exc:  # a plain 500 or a dropped connection: the old defect
                answers.append(type(exc).__name__)
        time.sleep(2)  # the background loops meet the damage too; they must stay quiet
        state = c.status()["state"]
    d.stop()
    lines = d.log.read_text().count("event=store_corrupt")
    ok = state == "degraded" and lines == 1 and all(a.startswith("503") for a in answers[1:])
    return ok, f"state={state} log_lines={lines} answers={answers}"


def run(
    jobs: int = 10_000, copies: int = 20, seed: int = 1, kinds: list[str] | None = None
) -> _kit.Result:
    rng = random.Random(seed)
    root = _kit.workdir("corrupt")
    good_db = root / "good.db"
    make_store(good_db, jobs)
    good = good_db.read_bytes()
    r = _kit.Result("corrupt_store")
    cases = [(k, v) for k, v in KINDS.items() if kinds is None or k in kinds]
    cases += [(f"pages_{i}", pages) for i in range(copies)]
    dbs = []
    for name, damage in cases:
        (root / name).mkdir(mode=0o700)  # private, as the daemon wants: no warning line
        db = root / name / "jobctl.db"
        damage(db, good, rng)
        db.chmod(0o600)
        dbs.append(db)
    with ThreadPoolExecutor(4) as pool:  # independent starts: side by side
        verdicts = list(pool.map(refused, dbs))
    for (name, _), (ok, why) in zip(cases, verdicts, strict=True):
        r.expect(ok, f"{name}: {why}")
    n_refused = sum(ok for ok, _ in verdicts)
    wal_ok, wal_why = garbage_wal(root, good, jobs)
    r.expect(wal_ok, f"garbage WAL: {wal_why}")
    live_ok, live_why = while_running(root, good)
    r.expect(live_ok, f"damage while running: {live_why}")
    r.figures = {
        "store_jobs": jobs,
        "damaged_copies": len(cases),
        "refused_one_line": n_refused,
        "garbage_wal_started": wal_ok,
        "degraded_once": live_ok,
        "dir": root,
    }
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.jobs, args.copies, args.seed))


if __name__ == "__main__":
    sys.exit(main())
