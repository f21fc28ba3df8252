"""A full disk under enqueue load, for real: a small tmpfs holds the database and the logs
of a real daemon while several clients enqueue (root only; skipped elsewhere).

Checked each time: every job answered 201 is in the store afterwards and runs to its end
(0 acknowledged lost), no job is left ``running``, every refusal is a JSON 503 with
``Retry-After`` (never a 500), and the daemon recovers without a restart once space is
freed. The figures (acknowledged, refused, lost, time to recover) are printed; run with
``-s`` to see them (docs/reliability.md quotes them).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobctl.client import Client
from jobctl.engine.process import log_cut_note
from jobctl.errors import JobctlError
from tests.integration.conftest import DaemonProc, daemon_env, wait_until

MiB = 1 << 20
#: Each job carries ~2 KB of environment so the database grows quickly under load.
PAYLOAD = {"command": ["true"], "env": {"PAD": "x" * 2000}}


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs mounted for the test (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@dataclass
class Load:
    """Clients enqueueing in a loop, each with its own connection."""

    socket: Path
    clients: int = 4
    acked: list[int] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    other: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Load:
        for _ in range(self.clients):
            t = threading.Thread(target=self._run, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self) -> None:
        with Client(self.socket) as client:
            while not self._stop.is_set():
                try:
                    job = client.enqueue(PAYLOAD)
                except JobctlError as exc:
                    with self._lock:
                        if exc.code in ("storage_full", "disk_low"):
                            self.refused[exc.code] += 1
                        else:
                            self.other.append(f"{exc.code}: {exc}")
                    time.sleep(0.005)
                    continue
                with self._lock:
                    self.acked.append(job["id"])
                    self.acked_at.append(time.monotonic())
                time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def first_ack_after(self, t: float) -> float:
        with self._lock:
            return next(a for a in self.acked_at if a >= t)


def fill(path: Path, leave: int = 0) -> int:
    """Write a file until only ``leave`` bytes are free (0: until the disk is full)."""
    written = 0
    chunk = b"\0" * MiB
    with open(path, "wb", buffering=0) as f:
        for size in (MiB, 4096, 512):
            while True:
                st = os.statvfs(path.parent)
                if leave and st.f_bavail * st.f_frsize - size < leave:
                    break
                try:
                    written += f.write(chunk[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def iter_queue(d: DaemonProc) -> Iterator[str]:
    """The daemon's log lines not read yet."""
    while not d.lines.empty():
        yield d.lines.get_nowait()


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def start_daemon(tmpfs: Path, tmp_path: Path) -> Iterator[Callable[[str], DaemonProc]]:
    """A daemon whose database and logs are on the tmpfs; stopped before it is unmounted."""
    made: list[DaemonProc] = []

    def start(config: str) -> DaemonProc:
        cfg = tmp_path / "jobctl.toml"
        cfg.write_text(config)
        d = DaemonProc(
            tmpfs,
            "--lease-ttl", "5", "--kill-grace", "2", "--shutdown-grace", "1",
            "--config", str(cfg),
        )  # fmt: skip
        made.append(d)
        return d.start()

    yield start
    for d in made:
        d.stop()


def settle(d: DaemonProc, load: Load) -> dict[str, int]:
    """Wait until every acknowledged job reached its end; return the figures."""
    client = d.client()

    def idle() -> bool:
        counts = client.status()["counts"]
        return bool(counts["running"] == 0 and counts["scheduled"] == 0)

    wait_until(idle, timeout=120, what="every acknowledged job to finish")
    stored: dict[int, str] = {}
    before = None
    while True:
        page = client.list_jobs(limit=10_000, before=before)
        stored.update({j["id"]: j["status"] for j in page})
        if len(page) < 10_000:
            break
        before = page[-1]["id"]
    lost = [i for i in load.acked if i not in stored]
    unfinished = [i for i in load.acked if stored.get(i) not in (None, "succeeded")]
    return {
        "acknowledged": len(load.acked),
        "lost": len(lost),
        "not_succeeded": len(unfinished),
        "running": client.status()["counts"]["running"],
    }


def test_a_full_disk_refuses_with_503_and_loses_nothing(
    tmpfs: Path, start_daemon: Callable[[str], DaemonProc]
) -> None:
    """No floor: the disk really fills. Writes meet ENOSPC (SQLITE_FULL) and answer 503
    ``storage_full`` JSON; jobs running then finish once space is back."""
    d = start_daemon("disk_floor = 0\n")
    filler = tmpfs / "filler"
    load = Load(d.socket).start()
    try:
        wait_until(lambda: len(load.acked) >= 200, what="200 acknowledged enqueues")
        d.client().enqueue_many([{"command": ["sleep", "1"]}] * 8)  # running when it fills
        fill(filler)
        wait_until(lambda: load.refused["storage_full"] >= 50, timeout=60, what="503s")
        assert d.client().status()["counts"]  # reads still answer on a full disk
        full_for = time.monotonic()
        wait_until(lambda: time.monotonic() - full_for > 2, what="two seconds full")
        freed = time.monotonic()
        filler.unlink()
        wait_until(lambda: load.acked_at[-1] > freed, timeout=30, what="an enqueue after")
        recovered = load.first_ack_after(freed) - freed
        wait_until(lambda: len([a for a in load.acked_at if a > freed]) >= 100, what="load")
    finally:
        load.stop()
    figures = settle(d, load)
    print(f"\nfull disk (no floor): {figures} refused={dict(load.refused)} "
          f"recovered_in={recovered:.3f}s", file=sys.stderr)  # fmt: skip
    assert load.other == []  # every refusal was a JSON 503 (a 500 would be listed here)
    assert figures["lost"] == 0 and figures["not_succeeded"] == 0 and figures["running"] == 0
    d.stop()
    log = "".join(d.log) + "".join(iter_queue(d))
    print(f"finish retries: {log.count('event=finish_retry')}, "
          f"abandoned: {log.count('event=finish_abandoned')}", file=sys.stderr)  # fmt: skip
    assert "Traceback" not in log and "event=finish_abandoned" not in log


def test_below_the_floor_new_work_waits_and_resumes_without_a_restart(
    tmpfs: Path, start_daemon: Callable[[str], DaemonProc]
) -> None:
    """Floor 8 MiB: the disk is filled to 4 MiB free; new work gets 503 ``disk_low``,
    status and the CLI say why; freeing space resumes it without a restart."""
    d = start_daemon('disk_floor = "8MiB"\n[quota]\nlog_bytes = "1MiB"\n')
    client = d.client()
    # A job printing 10 MiB is cut at the 1 MiB log cap: the floor is not breached.
    before = free_bytes(tmpfs)
    loud = client.enqueue({"command": ["sh", "-c", "head -c 10485760 /dev/zero; exit 0"]})
    wait_until(lambda: client.get(loud["id"])["status"] == "succeeded", what="the loud job")
    attempt = client.get(loud["id"])["attempts"][0]
    log = d.db.parent / "logs" / f"{loud['id'] // 1000:06d}" / f"{loud['id']}.1.log"
    assert attempt["output_cut"] and log.stat().st_size == MiB + len(log_cut_note(MiB))
    assert before - free_bytes(tmpfs) < 2 * MiB
    filler = tmpfs / "filler"
    load = Load(d.socket).start()
    try:
        wait_until(lambda: len(load.acked) >= 200, what="200 acknowledged enqueues")
        fill(filler, leave=4 * MiB)
        wait_until(lambda: load.refused["disk_low"] >= 50, timeout=60, what="503 disk_low")
        status = client.status()["disk"]
        assert status["refusing"] is True and status["filesystems"][0]["low"] is True
        cli = subprocess.run(
            [sys.executable, "-m", "jobctl", "add", "--", "true"],
            env=daemon_env() | {"JOBCTL_SOCKET": str(d.socket)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert cli.returncode == 9, cli.stderr
        assert cli.stderr.startswith("jobctl: error: not accepting new work: ")
        assert " free on the filesystem of " in cli.stderr and cli.stderr.count("\n") == 1
        assert "below the floor of 8.0 MiB; running jobs go on" in cli.stderr
        freed = time.monotonic()
        filler.unlink()
        wait_until(lambda: load.acked_at[-1] > freed, timeout=30, what="an enqueue after")
        recovered = load.first_ack_after(freed) - freed
        assert client.status()["disk"]["refusing"] is False
    finally:
        load.stop()
    figures = settle(d, load)
    print(f"\nbelow the floor: {figures} refused={dict(load.refused)} "
          f"recovered_in={recovered:.3f}s", file=sys.stderr)  # fmt: skip
    # Every refusal was JSON. A write or two may still meet the full disk (503
    # storage_full): the floor is measured once a second, and the load fills 4 MiB in less.
    assert load.other == [] and load.refused["disk_low"] > load.refused["storage_full"]
    assert figures["lost"] == 0 and figures["not_succeeded"] == 0 and figures["running"] == 0
    assert recovered < 5


def test_the_reserve_lets_running_jobs_finish_while_the_disk_is_full(
    tmpfs: Path, start_daemon: Callable[[str], DaemonProc]
) -> None:
    """Floor 8 MiB, so a 4 MiB reserve file beside the database. Another program fills the
    disk to the last byte while jobs run: their finishes still land before any space is
    freed (the daemon gives up the reserve for them), and new work waits."""
    d = start_daemon('disk_floor = "8MiB"\n')
    reserve = d.db.with_name(d.db.name + ".reserve")
    assert reserve.stat().st_size == 4 * MiB
    client = d.client()
    filler = tmpfs / "filler"
    load = Load(d.socket).start()
    try:
        wait_until(lambda: len(load.acked) >= 200, what="200 acknowledged enqueues")
        sleepers = [j["id"] for j in client.enqueue_many([{"command": ["sleep", "1"]}] * 8)]

        def status_of(ids: list[int]) -> set[str]:
            return {client.get(i)["status"] for i in ids}

        wait_until(lambda: status_of(sleepers) == {"running"}, what="the sleepers to start")
        fill(filler)
        full_at = time.monotonic()
        wait_until(lambda: status_of(sleepers) == {"succeeded"}, timeout=30,
                   what="the sleepers to finish on the full disk")  # fmt: skip
        finished_in = time.monotonic() - full_at
        assert filler.exists() and client.status()["disk"]["refusing"] is True
        freed = time.monotonic()
        filler.unlink()
        wait_until(lambda: load.acked_at[-1] > freed, timeout=30, what="an enqueue after")
        recovered = load.first_ack_after(freed) - freed
    finally:
        load.stop()
    figures = settle(d, load)
    d.stop()
    assert not reserve.exists()  # handed back when the daemon stops
    log = "".join(d.log) + "".join(iter_queue(d))
    print(f"\nfull disk with a reserve: {figures} refused={dict(load.refused)} "
          f"sleepers_finished_in={finished_in:.2f}s recovered_in={recovered:.3f}s "
          f"reserve_released={log.count('event=disk_reserve_released')} "
          f"finish_retries={log.count('event=finish_retry')}", file=sys.stderr)  # fmt: skip
    assert load.other == []
    assert figures["lost"] == 0 and figures["not_succeeded"] == 0 and figures["running"] == 0
    assert "event=finish_abandoned" not in log
