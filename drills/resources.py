"""Drill: out of file descriptors, out of disk: refused cleanly, nothing lost, back unaided.

Descriptors: a daemon held to ``--nofile`` open files (prlimit) gets bursts of jobs at
twice its concurrency while this process holds idle connections to it until it can open
no more. Status must still answer once they are released, no job may die of EMFILE ("Too
many open files"): the jobs have ``--max-attempts 1`` and every one must succeed (a start
put off for want of a descriptor uses no budget; their number is a figure).

Disk (root; skipped where a tmpfs cannot be mounted): the database and logs live on a
small tmpfs; clients enqueue while a file fills the disk to the last byte, then the file
is removed. Every refusal must be a JSON 503 (``storage_full`` or ``disk_low``), never a
500 or a dropped connection; every acknowledged job must be in the store and succeed;
the daemon must accept work again without a restart; the store must pass
``integrity_check``.

    python drills/resources.py
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402
from jobctl.errors import JobctlError  # noqa: E402

MiB = 1 << 20
#: ``max_attempts`` 1: a start put off for want of a descriptor must not use the budget.
FD_JOB = {"command": ["sleep", "0.2"], "cwd": "/", "max_attempts": 1}
PAYLOAD = {"command": ["true"], "cwd": "/", "env": {"PAD": "x" * 2000}}


class Load(threading.Thread):
    """Enqueues one job at a time until stopped; counts answers by kind."""

    def __init__(self, d: _kit.Daemon, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.d, self.body = d, body
        self.acked: list[int] = []
        self.answers: Counter[str] = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                with self.d.client() as c:
                    while not self.halt.is_set():
                        self.acked.append(c.enqueue(self.body)["id"])
                        self.answers["201"] += 1
            except JobctlError as exc:
                self.answers[exc.code] += 1
                self.halt.wait(0.01)
            except OSError as exc:
                self.answers[type(exc).__name__] += 1
                self.halt.wait(0.01)


def held_back(jobs: list[dict[str, Any]]) -> int:
    """Starts put off for want of a descriptor ("cannot start for now", no attempt used)."""
    return sum(
        1 for j in jobs for a in j["attempts"] if "Too many open files" in (a["error"] or "")
    )


def descriptors(nofile: int, bursts: int) -> dict[str, Any]:
    root = _kit.workdir("fds")
    d = _kit.Daemon(
        root, "--concurrency", "16", prefix=["prlimit", f"--nofile={nofile}:{nofile}", "--"]
    )
    d.start()
    ids: list[int] = []
    held: list[socket.socket] = []
    resets = 0
    for _ in range(bursts):
        while True:  # the daemon may still be closing the last burst's connections
            try:
                with d.client() as c:
                    ids += [j["id"] for j in c.enqueue_many([FD_JOB] * 32)]
                break
            except JobctlError:
                resets += 1
                time.sleep(0.1)
        while len(held) < nofile + 32:  # the daemon's table is full well before this
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            try:
                s.connect(str(d.socket))
            except OSError:
                s.close()
                break
            held.append(s)
        time.sleep(0.5)
        hogged = len(held)
        for s in held:
            s.close()
        held.clear()
    answered = _kit.until(lambda: _status_ok(d), 30)
    _kit.settled(d, 120)
    with d.client() as c:
        got = [c.get(i) for i in ids]
    d.stop()
    return {
        "nofile": nofile,
        "fd_jobs": len(ids),
        "fd_held_conns": hogged,
        "fd_refused_requests": resets,
        "fd_status_after": answered,
        "fd_succeeded": sum(j["status"] == "succeeded" for j in got),
        "fd_starts_held_back": held_back(got),
        "fd_dead": sum(j["status"] == "dead" for j in got),
    }


def _status_ok(d: _kit.Daemon) -> bool:
    try:
        with d.client() as c:
            return bool(c.status())
    except Exception:
        return False


def tmpfs(root: Path, size_mib: int) -> Path | None:
    mnt = root / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        return None
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    return mnt if done.returncode == 0 else None


def fill(path: Path) -> int:
    """Write ``path`` until the disk is full; the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for size in (MiB, 4096, 512):
            try:
                while True:
                    written += f.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return written


def disk(size_mib: int, full_for: float, acks: int) -> dict[str, Any] | str:
    root = _kit.workdir("disk")
    mnt = tmpfs(root, size_mib)
    if mnt is None:
        return "cannot mount a tmpfs here (needs root)"
    try:
        return _disk_on(mnt, root, full_for, acks)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _disk_on(mnt: Path, root: Path, full_for: float, acks: int) -> dict[str, Any]:
    (root / "jobctl.toml").write_text("disk_floor = 0\n")
    (mnt / "state").mkdir(mode=0o700)
    d = _kit.Daemon(
        mnt,
        "--lease-ttl",
        "5",
        "--config",
        str(root / "jobctl.toml"),
        db=mnt / "state" / "jobctl.db",
    )
    d.log = root / "daemon.log"
    d.start()
    loads = [Load(d, PAYLOAD) for _ in range(3)]
    for load in loads:
        load.start()
    _kit.until(lambda: sum(len(x.acked) for x in loads) >= acks, 60)
    filled = fill(mnt / "filler")
    _kit.until(lambda: _refused(loads) >= 30, 60)
    time.sleep(full_for)
    (mnt / "filler").unlink()
    freed = time.monotonic()
    before = sum(len(x.acked) for x in loads)
    back = _kit.until(lambda: sum(len(x.acked) for x in loads) > before + 20, 60)
    back_s = time.monotonic() - freed
    for load in loads:
        load.halt.set()
        load.join()
    _kit.settled(d, 120)
    with d.client() as c:
        stored = {j["id"]: j["status"] for j in _kit.all_jobs(c)}
    d.stop()
    acked = [i for x in loads for i in x.acked]
    answers = sum((x.answers for x in loads), Counter[str]())
    return {
        "disk_acknowledged": len(acked),
        "disk_refused_503": answers["storage_full"] + answers["disk_low"],
        "disk_other_answers": sum(
            n for k, n in answers.items() if k not in ("201", "storage_full", "disk_low")
        ),
        "disk_lost": sum(i not in stored for i in acked),
        "disk_not_succeeded": sum(stored.get(i) not in (None, "succeeded") for i in acked),
        "disk_back_s": f"{back_s:.1f}" if back else "never",
        "disk_filled_mib": filled // MiB,
        "disk_integrity": _kit.integrity(d.db),
    }


def _refused(loads: list[Load]) -> int:
    return sum(x.answers["storage_full"] + x.answers["disk_low"] for x in loads)


def run(
    nofile: int = 64, bursts: int = 5, size_mib: int = 32, full_for: float = 5, acks: int = 200
) -> _kit.Result:
    r = _kit.Result("resources")
    fd = descriptors(nofile, bursts)
    r.figures |= fd
    r.expect(fd["fd_status_after"], "status did not answer after the descriptors came back")
    r.expect(fd["fd_dead"] == 0, "jobs died of EMFILE")
    r.expect(fd["fd_succeeded"] == fd["fd_jobs"], "not every job succeeded")
    got = disk(size_mib, full_for, acks)
    if isinstance(got, str):
        r.figures["disk"] = f"skipped ({got})"
        return r
    r.figures |= {"disk_mib": size_mib} | got
    r.expect(got["disk_refused_503"] > 0, "the disk never filled")
    r.expect(got["disk_other_answers"] == 0, "a refusal that was not a JSON 503")
    r.expect(got["disk_lost"] == 0 and got["disk_not_succeeded"] == 0, "acknowledged jobs lost")
    r.expect(got["disk_back_s"] != "never", "no new work accepted after space came back")
    r.expect(got["disk_integrity"] == "ok", "integrity_check failed")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nofile", type=int, default=64)
    ap.add_argument("--bursts", type=int, default=5)
    ap.add_argument("--disk-mib", type=int, default=32)
    ap.add_argument("--full-for", type=float, default=5)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.nofile, args.bursts, args.disk_mib, args.full_for))


if __name__ == "__main__":
    sys.exit(main())
