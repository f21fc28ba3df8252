"""Drill: a graceful stop (SIGTERM) while long jobs run costs no budget and leaves nothing.

A daemon runs ``--jobs`` long jobs with ``--max-attempts 1`` (any attempt that used budget
would make its job ``dead``). Each job starts a helper with ``setsid`` that leaves its
process group, and every other job ignores SIGTERM. Once all of them and their helpers run,
the daemon gets SIGTERM. Then:

- the daemon exits 0, within shutdown grace + kill grace (2 s) and a slack of 28 s for a
  loaded machine (``stop_s`` is the figure);
- no process of any job is left alive, helpers included (``escaped``);
- after a restart every job runs again and succeeds: its stopped attempt ended
  ``interrupted`` and used no budget.

    python drills/sigterm_long.py --jobs 16
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402

GRACE = ["--shutdown-grace", "1", "--kill-grace", "1"]


def job(root: Path, tag: str, i: int) -> dict[str, Any]:
    """Long unless ``root/go`` exists; a setsid helper; odd ones ignore SIGTERM."""
    trap = "trap '' TERM; " if i % 2 else ""
    script = (
        f'[ -e "{root}/go" ] && exit 0; {trap}'
        f'setsid sleep 300 & echo $! > "{root}/helper.$JOBCTL_JOB_ID"; sleep 300'
    )
    return {
        "command": ["sh", "-c", script],
        "cwd": "/",
        "max_attempts": 1,
        "env": {"DRILL_TAG": tag},
        "key": f"long-{i}",
    }


def run(jobs: int = 16) -> _kit.Result:
    root = _kit.workdir("sigterm")
    tag = uuid.uuid4().hex
    d = _kit.Daemon(root, "--concurrency", str(jobs), *GRACE).start()
    with d.client() as c:
        ids = [j["id"] for j in c.enqueue_many([job(root, tag, i) for i in range(jobs)])]
    ready = _kit.until(lambda: len(list(root.glob("helper.*"))) == jobs, 120)
    before = len(_kit.proc_environ_has(f"DRILL_TAG={tag}"))
    began = time.monotonic()
    status = d.stop()
    took = time.monotonic() - began
    escaped = _kit.proc_environ_has(f"DRILL_TAG={tag}")
    (root / "go").touch()
    d.start()
    _kit.settled(d, 120)
    with d.client() as c:
        got = [c.get(i) for i in ids]
    d.stop()
    for pid in escaped:  # leave the host clean even when the drill fails
        _kit.kill_quietly(pid)
    attempts = [a for j in got for a in j["attempts"]]
    r = _kit.Result("sigterm_long")
    r.figures = {
        "jobs": jobs,
        "processes_at_stop": before,
        "stop_exit": status,
        "stop_s": f"{took:.1f}",
        "escaped": len(escaped),
        "interrupted": sum(a["outcome"] == "interrupted" for a in attempts),
        "budget_used": sum(
            a["outcome"] in ("failed", "timeout", "lease_expired") for a in attempts
        ),
        "succeeded": sum(j["status"] == "succeeded" for j in got),
        "dead": sum(j["status"] == "dead" for j in got),
        "dir": root,
    }
    r.expect(ready, "the jobs' helpers did not all start")
    r.expect(status == 0, f"the daemon exited {status} on SIGTERM")
    # 2 s of graces; the rest is slack for a loaded machine (the figure is stop_s)
    r.expect(took < 2 + 28, f"the stop took {took:.1f}s")
    r.expect(not escaped, f"{len(escaped)} processes of stopped jobs still alive")
    r.expect(r.figures["budget_used"] == 0, "a stopped attempt used budget")
    r.expect(r.figures["succeeded"] == jobs, "not every job succeeded after the restart")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=16)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.jobs))


if __name__ == "__main__":
    sys.exit(main())
