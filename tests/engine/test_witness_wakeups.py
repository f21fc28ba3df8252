"""The crash witness sleeps through the daemon's lines and wakes at its death (issue 17)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jobctl.engine import witness


def _switches(pid: int) -> int:
    """Times ``pid`` gave up its CPU to wait (each wake-up from a wait is one)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_the_witness_is_not_woken_by_each_write_yet_sees_the_death(tmp_path: Path) -> None:
    """A write of the feed used to wake the witness (a switch to it and its reads, for
    every loop turn's lines); now it reads them every DRAIN seconds, and the daemon's
    end (the pipe's hang-up) still wakes it at once."""
    db, owner = tmp_path / "j.db", f"testhost:4244:wake{os.getpid():x}"
    w = witness.Witness(db, owner)
    for _ in range(500):  # past its exec and its imports, waiting on the pipe
        if witness._witness_running(owner):
            break
        time.sleep(0.01)
    w.starting(1, 1, tmp_path / "1.1.log")
    w.flush()
    time.sleep(2 * witness.DRAIN)  # its first read of the pipe is done
    before = _switches(w._proc.pid)
    began = time.monotonic()
    writes = 100
    for i in range(2, 2 + writes):
        w.starting(i, 1, tmp_path / f"{i}.1.log")
        w.flush()  # one write each, as one loop turn's lines
        time.sleep(0.001)
    periodic = (time.monotonic() - began) / witness.DRAIN + 2
    assert _switches(w._proc.pid) - before < periodic + 10 < writes
    time.sleep(3 * witness.DRAIN)  # lines stopped: it reads once more, finds none
    idle = _switches(w._proc.pid)
    time.sleep(10 * witness.DRAIN)  # woken every DRAIN, it would be ~10 times
    assert _switches(w._proc.pid) - idle <= 2  # an idle daemon's witness sleeps
    w.done(1, 1)
    w.flush()
    os.close(w._write)  # the daemon's death
    seen = witness.witnessed(db, owner, wait=10)
    assert seen is not None and seen.complete
    assert sorted(seen.attempts) == [(i, 1) for i in range(2, 2 + writes)]
    w._proc.wait(5)
