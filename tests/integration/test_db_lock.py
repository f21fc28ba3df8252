"""A second daemon is refused whatever path it reaches the database by (issue 13, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobctl.domain.clock import SystemClock
from jobctl.domain.models import JobSpec
from jobctl.errors import DaemonLocked
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0
from tests.integration.conftest import DaemonProc, daemon_env


def _second_daemon(db: str, tmp: Path, cwd: Path | None = None) -> tuple[int, str]:
    """Start a daemon on ``db``; its exit code and stderr (killed if it is not refused)."""
    cmd = [sys.executable, "-m", "jobctl", "daemon", "--db", db]
    cmd += ["--socket", str(tmp / "second.sock")]
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=daemon_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -1, "second daemon was not refused: " + err
    return proc.returncode, err


@pytest.fixture
def first(make_daemon: Callable[..., DaemonProc]) -> DaemonProc:
    return make_daemon()


def _assert_refused(code: int, err: str, first: DaemonProc) -> None:
    assert code == 6, err
    assert err.startswith("jobctl: error: database ") and "in use by" in err, err
    assert f"pid {first.proc.pid if first.proc else '?'}" in err, err
    assert first.client().status()  # the first daemon is untouched


def test_symlinked_file_is_refused(first: DaemonProc, tmp_path: Path) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(first.db)
    _assert_refused(*_second_daemon(str(link), tmp_path), first)


def test_symlinked_directory_is_refused(first: DaemonProc, tmp_path: Path) -> None:
    linkdir = tmp_path / "linkdir"
    linkdir.symlink_to(first.db.parent, target_is_directory=True)
    _assert_refused(*_second_daemon(str(linkdir / first.db.name), tmp_path), first)


@pytest.mark.parametrize("spelling", ["state/jobctl.db", "./state/../state//jobctl.db"])
def test_relative_path_is_refused(first: DaemonProc, tmp_path: Path, spelling: str) -> None:
    _assert_refused(*_second_daemon(spelling, tmp_path, cwd=tmp_path), first)


def test_hard_link_is_refused(first: DaemonProc, tmp_path: Path) -> None:
    hard = tmp_path / "hard.db"
    os.link(first.db, hard)
    _assert_refused(*_second_daemon(str(hard), tmp_path), first)


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[Path]:
    """``tmp/bind`` showing ``tmp/state`` (root, where mounts are allowed)."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    (tmp_path / "state").mkdir(exist_ok=True)
    target = tmp_path / "bind"
    target.mkdir()
    done = subprocess.run(
        ["mount", "--bind", str(tmp_path / "state"), str(target)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"mount --bind not allowed here: {done.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_bind_mount_is_refused(bind_mount: Path, first: DaemonProc, tmp_path: Path) -> None:
    _assert_refused(*_second_daemon(str(bind_mount / first.db.name), tmp_path), first)


def test_the_lock_is_released_with_the_store(tmp_path: Path) -> None:
    """In one process too: an alias is refused, and after close the database is free."""
    db = tmp_path / "a" / "jobctl.db"
    store = SqliteStore(db, SystemClock())
    store.insert([JobSpec(command=("true",), run_at=T0, owner_uid=0)])
    os.link(db, tmp_path / "hard.db")
    (tmp_path / "sym.db").symlink_to(db)
    for alias in (tmp_path / "hard.db", tmp_path / "sym.db", db):
        with pytest.raises(DaemonLocked, match="in use"):
            SqliteStore(alias, SystemClock())
    # the refused attempts took nothing from the live store: it still writes
    [ins] = store.insert([JobSpec(command=("true",), run_at=T0, owner_uid=0)])
    assert ins.job.id == 2
    store.close()
    again = SqliteStore(tmp_path / "hard.db", SystemClock())
    again.close()
