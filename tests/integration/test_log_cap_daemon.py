"""The log cap keeps the head and the latest output (issue 12, defect 5): a real job
prints well past its ``log_bytes`` quota; its log keeps the first lines, a note where the
middle was cut, and the last lines; ``show`` says it was cut. Real daemon, real command,
on the filesystem the tests run on (skipped where it cannot cut a file's middle)."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from jobctl.engine.logcap import COLLAPSE_RANGE
from tests.integration.conftest import DaemonProc, wait_until

CAP = 1024 * 1024
#: Prints HEAD, ~1.6 MB of numbered lines at about 1 MB/s, then TAIL. A write the cap
#: refuses (EFBIG, between two cuts) is tried again after 10 ms, for at most 5 s, as a
#: careful writer would: without cuts it never gets past the cap and TAIL is never written.
WRITER = r"""
import os, sys, time
def out(data):
    deadline = time.monotonic() + 5
    while True:
        try:
            os.write(1, data); return
        except OSError:
            if time.monotonic() > deadline: sys.exit(9)
            time.sleep(0.01)
out(b"HEAD first line\n")
for i in range(14000):
    out(b"line %06d %s\n" % (i, b"x" * 100))
    if i % 100 == 0: time.sleep(0.01)
out(b"TAIL last line\n")
sys.exit(3)
"""


def can_collapse(where: Path) -> bool:
    path = where / "probe"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.write(fd, b"x" * 3 * os.fstat(fd).st_blksize)
        block = os.fstat(fd).st_blksize
        libc = ctypes.CDLL(None, use_errno=True)
        done: int = libc.fallocate(fd, COLLAPSE_RANGE, ctypes.c_long(0), ctypes.c_long(block))
        return done == 0
    finally:
        os.close(fd)
        path.unlink()


def test_a_capped_log_keeps_head_and_tail_and_says_it_was_cut(
    make_daemon: Any, tmp_path: Path
) -> None:
    if not can_collapse(tmp_path):
        pytest.skip("this filesystem cannot cut the middle of a file (the head is kept)")
    daemon: DaemonProc = make_daemon(env={"JOBCTL_QUOTA_LOG_BYTES": str(CAP)})
    c = daemon.client()
    job_id = int(c.enqueue({
        "command": [sys.executable, "-c", WRITER], "cwd": "/", "max_attempts": 1,
    })["id"])  # fmt: skip
    wait_until(lambda: c.get(job_id)["status"] == "dead", 60, "the verbose job")
    job = c.get(job_id)
    [attempt] = job["attempts"]
    assert attempt["exit_code"] == 3, attempt  # not 9: no write was refused for good
    assert attempt["output_cut"] and "bytes from the middle dropped" in attempt["output_tail"]
    assert attempt["output_tail"].endswith("TAIL last line\n")
    assert "output cut at" in job["last_error"]
    log = (daemon.db.parent / "logs" / "000000" / f"{job_id}.1.log").read_bytes()
    assert len(log) <= CAP
    assert log.startswith(b"HEAD first line\nline 000000 ")
    assert log.endswith(b"line 013999 " + b"x" * 100 + b"\nTAIL last line\n")
    assert b"line 007000 " not in log  # the middle is gone
    assert b"bytes dropped here; the latest output follows]\n" in log
    assert log.count(b"[jobctl: output cut at") == 1  # one note, at the seam
