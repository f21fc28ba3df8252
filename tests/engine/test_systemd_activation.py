"""systemd integration, its start-up side: listening sockets handed over as fd 3 across a
real exec (socket activation), and the unit files the daemon ships (split from
test_systemd.py, which holds the notify socket, the watchdog and the status line)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobctl.daemon import DaemonConfig
from jobctl.paths import default_socket

# -- socket activation --------------------------------------------------------------------

#: What systemd does before exec'ing a socket-activated service: the passed sockets become
#: fds 3, 4, ...; LISTEN_FDS counts them; LISTEN_PID is the pid of the program it execs.
#: ``python -c SHIM FDS LISTEN_PID PROGRAM ARGS...`` (LISTEN_PID "self": this very pid).
SHIM = r"""
import fcntl, os, sys
sources = [int(fd) for fd in sys.argv[1].split(",") if fd]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in sources]
for fd in sources:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ["LISTEN_FDS"] = os.environ.pop("SHIM_LISTEN_FDS", str(len(sources)))
os.environ["LISTEN_PID"] = str(os.getpid()) if sys.argv[2] == "self" else sys.argv[2]
os.execv(sys.argv[3], sys.argv[3:])
"""


def activated(
    program: list[str], *fds: int, listen_pid: str = "self", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``program`` with ``fds`` passed as systemd would (see :data:`SHIM`)."""
    return subprocess.Popen(
        [sys.executable, "-c", SHIM, ",".join(map(str, fds)), listen_pid, *program],
        pass_fds=fds,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


#: Takes the socket, reports what it got, then serves one connection with "hello".
CHILD = r"""
import json, os, sys
from jobctl.engine.systemd import SocketActivationError, inherited_socket
try:
    sock = inherited_socket(name=sys.argv[1] if len(sys.argv) > 1 else None)
except SocketActivationError as exc:
    print(json.dumps({"error": exc.message}))
    raise SystemExit(0)
report = {"env": sorted(k for k in os.environ if k.startswith("LISTEN_")), "sock": None}
if sock is not None:
    report["sock"] = {
        "fd": sock.fileno(),
        "name": sock.getsockname(),
        "blocking": sock.getblocking(),
        "inheritable": sock.get_inheritable(),
    }
print(json.dumps(report), flush=True)
if sock is not None:
    sock.setblocking(True)
    conn, _ = sock.accept()
    conn.sendall(b"hello")
    conn.close()
"""


def run_child(*fds: int, name: str | None = None, **kw: Any) -> dict[str, Any]:
    proc = activated([sys.executable, "-c", CHILD, *([name] if name else [])], *fds, **kw)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def listener(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(8)
    return sock


def test_a_passed_listening_socket_is_served_on(tmp_path: Path) -> None:
    path = tmp_path / "jobctl.sock"
    with listener(path) as sock, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))  # waits in the backlog until the child accepts
        report = run_child(sock.fileno())
        assert client.recv(5) == b"hello"
    assert report == {
        "env": [],  # LISTEN_* are gone: nothing the daemon starts can take them for its own
        "sock": {"fd": 3, "name": str(path), "blocking": False, "inheritable": False},
    }


def test_listen_pid_of_another_process_means_no_socket(tmp_path: Path) -> None:
    with listener(tmp_path / "jobctl.sock") as sock:
        report = run_child(sock.fileno(), listen_pid="1")
    assert report == {"env": [], "sock": None}


def test_without_listen_fds_there_is_no_socket(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=30
    )
    assert json.loads(out.stdout) == {"env": [], "sock": None}


def test_a_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    with open(tmp_path / "not-a-socket", "w") as f:
        report = run_child(f.fileno())
    assert report == {
        "error": "socket activation: fd 3 is not a socket; check the .socket unit's ListenStream="
    }


@pytest.mark.parametrize(
    ("family", "kind", "problem"),
    [
        (socket.AF_INET, socket.SOCK_STREAM, "is an AF_INET socket, not AF_UNIX"),
        (socket.AF_UNIX, socket.SOCK_DGRAM, "is a SOCK_DGRAM socket, not SOCK_STREAM"),
        (socket.AF_UNIX, socket.SOCK_STREAM, "is not listening (the .socket unit must have"),
    ],
)
def test_a_wrong_socket_is_refused_with_a_clear_error(
    family: socket.AddressFamily, kind: socket.SocketKind, problem: str
) -> None:
    with socket.socket(family, kind) as sock:
        report = run_child(sock.fileno())
    assert report["error"].startswith(f"socket activation: fd 3 {problem}")


def test_no_fds_passed_means_no_socket() -> None:
    assert run_child(env={"LISTEN_FDNAMES": ""}) == {"env": [], "sock": None}  # LISTEN_FDS=0


def test_a_missing_fd_is_refused_with_a_clear_error() -> None:
    report = run_child(env={"SHIM_LISTEN_FDS": "1"})  # claims one socket, passes none
    assert report["error"].startswith("socket activation: fd 3 is not")


def test_a_garbled_listen_fds_is_refused() -> None:
    report = run_child(env={"SHIM_LISTEN_FDS": "one"})
    assert report == {"error": "LISTEN_FDS='one' is not a number"}


def test_several_sockets_need_a_name_to_pick_one(tmp_path: Path) -> None:
    with listener(tmp_path / "a.sock") as a, listener(tmp_path / "b.sock") as b:
        names = {"LISTEN_FDNAMES": "other:jobctl.socket"}
        unnamed = run_child(a.fileno(), b.fileno(), env=names)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(tmp_path / "b.sock"))
            named = run_child(a.fileno(), b.fileno(), name="jobctl.socket", env=names)
            assert client.recv(5) == b"hello"
    assert unnamed["error"].startswith("systemd passed 2 sockets")
    assert named["sock"]["fd"] == 4 and named["sock"]["name"] == str(tmp_path / "b.sock")


# -- the unit files -----------------------------------------------------------------------

UNITS = Path(__file__).resolve().parents[2] / "contrib" / "systemd"


def unit(path: Path) -> dict[str, str]:
    """``Key=value`` settings of a unit file (the last one wins, as in systemd)."""
    settings = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def seconds(value: str) -> float:
    return float(value.removesuffix("s"))


@pytest.mark.parametrize("where", ["", "user"])
def test_units_stop_later_than_the_daemon_does(where: str) -> None:
    """systemd must not SIGKILL jobs the daemon is still stopping gracefully itself."""
    service = unit(UNITS / where / "jobctl.service")
    defaults = {f.name: f.default for f in dataclasses.fields(DaemonConfig)}
    graceful = float(str(defaults["shutdown_grace"])) + float(str(defaults["kill_grace"]))
    assert "--shutdown-grace" not in service["ExecStart"]
    assert "--kill-grace" not in service["ExecStart"]
    assert seconds(service["TimeoutStopSec"]) >= graceful + 10
    assert service["KillMode"] == "mixed" and service["Type"] == "notify"
    assert service["RuntimeDirectoryPreserve"] == "yes"


def test_units_listen_where_the_cli_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBCTL_SOCKET", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert unit(UNITS / "jobctl.socket")["ListenStream"] == str(default_socket())
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "%t")
    assert unit(UNITS / "user" / "jobctl.socket")["ListenStream"] == str(default_socket())


@pytest.mark.parametrize("where", ["", "user"])
def test_units_pass_systemd_analyze_verify(where: str, tmp_path: Path) -> None:
    """``systemd-analyze verify`` on copies whose ExecStart names this venv's ``jobctl``:
    verify insists the binary exists, and /usr/local/bin/jobctl or ~/.local/bin/jobctl may
    not on a test machine. ``--man=no``: the man page need not be installed here."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    jobctl = shutil.which("jobctl", path=str(Path(sys.executable).parent)) or "/bin/true"
    for name in ("jobctl.service", "jobctl.socket"):
        text = (UNITS / where / name).read_text()
        text = re.sub(r"^ExecStart=\S+", f"ExecStart={jobctl}", text, flags=re.MULTILINE)
        (tmp_path / name).write_text(text)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    mode = ["--user"] if where == "user" else []
    out = subprocess.run(
        [analyze, *mode, "verify", "--man=no", "jobctl.service", "jobctl.socket"],
        cwd=tmp_path,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_LEVEL": "warning"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [line for line in (out.stdout + out.stderr).splitlines() if "jobctl" in line]
    assert out.returncode == 0 and not complaints, out.stdout + out.stderr
