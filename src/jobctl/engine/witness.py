"""The crash witness: a small process that sees which commands outlived their daemon.

A command that takes its daemon down is gone (or going) when the daemon dies; a healthy
command that happened to run at a ``kill -9`` is still running at that instant, but may
well have finished by the time the next daemon looks (a restart takes a second or more).
So the evidence is taken at the instant of death, by a witness the daemon starts before
its first command: it waits on a pipe whose only writer is the daemon (the write end is
not inherited by commands), so end-of-file means the daemon is gone. A clean stop says
``bye`` first and the witness leaves quietly; otherwise, after :data:`SETTLE` seconds,
it lists the job ids whose commands (found by ``JOBCTL_LEASE_OWNER`` in their
environment, as recovery finds survivors) are still alive, writes them to
``<db>.witness/<owner>.json`` and exits. Start-up recovery reads that file
(:func:`witnessed`): a job whose command was alive at the daemon's death is no suspect
of the crash (docs/guarantees.md#crashes-and-poison-jobs).

Run as ``python -m jobctl.engine.witness DIR OWNER`` with the pipe as stdin; it imports
nothing of jobctl, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: Seconds between the daemon's death and the look: a command that killed its daemon as
#: its last act has exited by then.
SETTLE = 0.05
BYE = b"bye"


def witness_dir(db: Path) -> Path:
    """``<db>.witness`` beside the database's real file (jobctl.files keeps it private)."""
    real = Path(os.path.realpath(db))
    return real.with_name(real.name + ".witness")


def _file(folder: Path, owner: str) -> Path:
    return folder / (owner.replace("/", "_") + ".json")


class Witness:
    """The daemon's end: the pipe's write end and the witness process."""

    def __init__(self, db: Path, owner: str) -> None:
        folder = witness_dir(db)
        folder.mkdir(mode=0o700, exist_ok=True)
        read, self._write = os.pipe()  # both non-inheritable: commands never hold the pipe
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "jobctl.engine.witness", str(folder), owner],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(read)

    def stop(self) -> None:
        """A clean stop: the witness leaves without writing anything."""
        try:
            os.write(self._write, BYE)
        except OSError:  # the witness is gone already (systemd stops the whole cgroup)
            pass
        finally:
            os.close(self._write)
        self._proc.wait()


def witnessed(db: Path, owner: str, wait: float = 2.0) -> set[int] | None:
    """Job ids whose commands were alive when daemon ``owner`` died; None: no witness.

    Waits up to ``wait`` seconds for a witness of ``owner`` that is still writing.
    """
    path = _file(witness_dir(db), owner)
    deadline = time.monotonic() + wait
    while not path.exists() and time.monotonic() < deadline and _witness_running(owner):
        time.sleep(0.01)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {int(i) for i in data.get("alive", [])}


def forget(db: Path) -> None:
    """Drop every witness file once recovery has put their evidence in the store."""
    folder = witness_dir(db)
    if folder.is_dir():
        for path in folder.glob("*.json"):
            path.unlink(missing_ok=True)


def _witness_running(owner: str) -> bool:
    want = b"jobctl.engine.witness"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if want in args and owner.encode() in args:
                return True
    return False


def alive_jobs(owner: str) -> set[int]:
    """Job ids of live processes whose environment names ``owner`` as lease owner."""
    marker = f"JOBCTL_LEASE_OWNER={owner}".encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, a zombie (no environment) or not ours to read
        if marker in env:
            for item in env:
                if item.startswith(b"JOBCTL_JOB_ID="):
                    found.add(int(item.split(b"=", 1)[1]))
    return found


def main(folder: str, owner: str) -> int:
    data = sys.stdin.buffer.read()  # returns at end-of-file: the daemon is gone
    if data.endswith(BYE):
        return 0
    time.sleep(SETTLE)
    alive = sorted(alive_jobs(owner))
    path = _file(Path(folder), owner)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"owner": owner, "alive": alive, "at": time.time()}))
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
