"""A PostgreSQL server of the test's own, to stop and start for real (issue 15's "the
database going away": a restart, a crash), without touching the machine's shared server
that other tests use.

``initdb`` into a temporary directory, then ``pg_ctl`` starts a postmaster on a free port
of 127.0.0.1 with its Unix socket in that directory too. Run as root, the binaries run as
the ``postgres`` user (``initdb`` refuses root) through ``runuser``; otherwise as the
test's own user. Trust authentication, superuser ``postgres``, as on the shared server.

The binaries are the newest ``/usr/lib/postgresql/*/bin`` (Debian's layout, which the
shared server comes from), or ``pg_ctl`` on ``PATH``. Without them the test skips, or
fails under ``JOBCTL_REQUIRE_POSTGRES=1`` (see tests/contract/conftest.py).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from tests.contract.conftest import no_postgres

#: Seconds ``pg_ctl`` waits for the server to start or stop (a loaded 2-core machine).
PG_CTL_WAIT = 60
StopMode = Literal["smart", "fast", "immediate"]


def bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are, the newest version first; None if nowhere."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """One postmaster on ``port`` over the data directory under ``root``."""

    def __init__(
        self, bins: Path, root: Path, run_as: str | None, netns: tuple[str, str] | None = None
    ) -> None:
        """``netns``: the network namespace to listen in and its address there (see
        tests/integration/netns.py); the host's 127.0.0.1 otherwise."""
        self.bins = bins
        self.root = root
        self.data = root / "data"
        self.logfile = root / "server.log"
        self.port = _free_port()
        self._run_as = run_as
        self._netns: str | None = netns[0] if netns else None
        self.host = netns[1] if netns else "127.0.0.1"

    def _run(self, *args: str, in_netns: bool = False) -> None:
        prefix = ["runuser", "-u", self._run_as, "--"] if self._run_as else []
        if in_netns and self._netns is not None:
            prefix = ["ip", "netns", "exec", self._netns, *prefix]
        done = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=PG_CTL_WAIT + 30
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return "\n" + "\n".join(self.logfile.read_text().splitlines()[-20:])
        except OSError:
            return ""

    def initdb(self) -> None:
        self._run(
            str(self.bins / "initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "-E", "UTF8", "--no-instructions", "--no-sync",
        )  # fmt: skip
        if self._netns is not None:  # the host reaches it from its end of the veth pair
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.host.rsplit('.', 1)[0]}.0/24 trust\n")

    def start(self) -> None:
        """Start the postmaster; returns once it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses={self.host}"
            f" -c unix_socket_directories={self.root} -c max_connections=60"
        )
        self._run(
            str(self.bins / "pg_ctl"), "start", "-D", str(self.data), "-l", str(self.logfile),
            "-w", "-t", str(PG_CTL_WAIT), "-o", options, in_netns=True,
        )  # fmt: skip

    def stop(self, mode: StopMode = "fast") -> None:
        """``fast``: a clean restart's stop (sessions ended, a checkpoint written);
        ``immediate``: a crash (no checkpoint: the next start replays the WAL)."""
        self._run(
            str(self.bins / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode,
            "-w", "-t", str(PG_CTL_WAIT),
        )  # fmt: skip

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{dbname}"

    def sql(self, dbname: str, text: str) -> list[tuple[Any, ...]]:
        """One statement (autocommit) on ``dbname``; its rows."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(text.encode())
            return cur.fetchall() if cur.description else []

    def database(self, prefix: str) -> Iterator[str]:
        """A fresh database on this server, dropped afterwards (the server running)."""
        name = prefix + secrets.token_hex(4)
        self.sql("postgres", f"CREATE DATABASE {name}")
        try:
            yield name
        finally:
            if not self.running():
                self.start()
            self.sql("postgres", f"DROP DATABASE {name} WITH (FORCE)")

    def close(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def private_server(netns: tuple[str, str] | None = None) -> Iterator[PrivateServer]:
    """A started private server for a module's tests; stopped and removed afterwards."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        no_postgres("psycopg is not installed (extra 'postgres')")
    bins = bindir()
    if bins is None or not (bins / "initdb").exists():
        no_postgres("no initdb/pg_ctl (PostgreSQL server binaries) for a private server")
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            no_postgres("running as root and there is no 'postgres' user to run initdb as")
    root = Path(tempfile.mkdtemp(prefix="jobctl-pgpriv-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    run_as = None if owner is None else owner.pw_name
    server = PrivateServer(bins, root, run_as, netns)
    try:
        server.initdb()
        server.start()
        yield server
    finally:
        server.close()
