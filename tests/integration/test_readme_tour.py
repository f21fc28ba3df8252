"""The README's tour, extracted from README.md and run line by line against a real
daemon (issue 12, defect 8): as the current user (root here) and, where the tests run
as root, as a normal user with a daemon of their own on the default paths (a user
without a per-user runtime directory, as under ``su``).

Every ``sh`` block of the "A five-minute tour" section runs, in order, in one bash with
the README's own words; the scripts it names (``./backup.sh`` ...) are made first. Two
liberties, both stated here: the ``export PATH=$PWD/.venv/bin:$PATH`` line is replaced by
the test's own PATH (jobctl is already on it), and ``jobctl top`` gets ``--once`` (the
live view runs until Ctrl-C). Each line must exit 0 without a traceback or a
``jobctl: error:`` line, except a line whose comment says ``admins``, which a normal
user may see refused (exit 77, one error line).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import DaemonProc, daemon_env
from tests.integration.hostusers import SYSTEM_PYTHON, Users, host_users  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SCRIPTS = ("backup.sh", "report.sh", "might-hang.sh", "sync.sh", "send.sh")
MARK = "@@tour"


def tour_lines(text: str) -> list[str]:
    """The command lines of the tour section's ``sh`` blocks, in order."""
    section = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line)
    return lines


LINES = tour_lines(README.read_text())


def test_the_tour_is_found() -> None:
    joined = "\n".join(LINES)
    for word in ("jobctl add", "jobctl cancel", "jobctl schedules edit", "curl --unix-socket"):
        assert word in joined
    assert not re.search(r"jobctl (show|logs|cancel) \d", joined)  # ids come from add


def script(lines: list[str]) -> str:
    """One bash script: each line, then a marker with its index and exit status."""
    out = ["exec 2>&1"]
    for i, line in enumerate(lines):
        if line.startswith("export PATH=$PWD/.venv/bin"):
            out.append(":")
        elif line.split("#")[0].strip() == "jobctl top":
            out.append("jobctl top --once")
        else:
            out.append(line)
        out.append(f'printf "\\n{MARK} {i} %s %s\\n" "$?" "$(date +%s.%N)"')
    return "\n".join(out) + "\n"


def check_output(output: str, lines: list[str], normal_user: bool) -> None:
    parts = re.split(rf"\n{MARK} (\d+) (\d+) ([\d.]+)\n", "\n" + output)
    seen = 0
    for n in range(1, len(parts) - 1, 4):
        text, index, code = parts[n - 1], int(parts[n]), int(parts[n + 1])
        line = lines[index]
        shown = f"README line {line!r} exited {code}:\n{text}"
        assert "Traceback" not in text, shown
        if normal_user and "admins" in line and code == 77:
            assert text.strip().startswith("jobctl: error: "), shown
            assert text.count("jobctl: error:") == 1, shown
        else:
            assert code == 0 and "jobctl: error:" not in text, shown
        seen += 1
    assert seen == len(lines), output[-3000:]


def prepare(cwd: Path) -> None:
    for name in SCRIPTS:
        path = cwd / name
        body = "exec sleep 300" if name == "might-hang.sh" else 'echo "$0 $*"'
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)


def pg_dump_fails() -> bool:
    if shutil.which("pg_dump") is None:
        return True
    done = subprocess.run(
        "pg_dump app > /dev/null", shell=True, capture_output=True, timeout=30,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.returncode != 0


def wait_done(run_jobctl: object, job_id: int) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, object] = run_jobctl("show", str(job_id), "--json")  # type: ignore[operator]
        if job["status"] != "running" and job["attempts"]:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def assert_pipeline_failure_is_seen(jobs: list[dict[str, object]], fetch: object) -> None:
    """The pg_dump line: with pg_dump failing here, the job must not have succeeded."""
    shell = next(j for j in jobs if "pg_dump app" in " ".join(j["command"]))  # type: ignore[arg-type]
    command = shell["command"]
    assert command[:3] == ["/bin/bash", "-o", "pipefail"], command  # type: ignore[index]
    if pg_dump_fails():
        job = wait_done(fetch, int(shell["id"]))  # type: ignore[call-overload]
        attempt = job["attempts"][0]  # type: ignore[index]
        assert attempt["exit_code"] != 0, job  # was 0: dash reported gzip's status


@pytest.mark.timeout(300)  # ~25 s here; its shell gets 240 s: a loaded machine needs it
def test_the_tour_as_the_current_user(daemon: DaemonProc, tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    prepare(cwd)
    bin_dir = Path(sys.executable).parent
    env = daemon_env() | {
        "JOBCTL_SOCKET": str(daemon.socket),
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    done = subprocess.run(
        ["bash", "-c", script(LINES)], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    check_output(done.stdout, LINES, normal_user=False)
    client = daemon.client()

    def fetch(*argv: str) -> dict[str, object]:
        return client.get(int(argv[1]))

    assert_pipeline_failure_is_seen(client.list_jobs(limit=1000), fetch)


# --------------------------------------------------------------------- a normal user


WRAPPER = """#!/bin/sh
PYTHONPATH={paths} exec {python} -m jobctl "$@"
"""


@pytest.fixture
def user_setup(host_users: Users) -> Iterator[tuple[Path, dict[str, str]]]:  # noqa: F811
    """A bin directory with ``jobctl`` the test user can run (the system Python with this
    checkout and the venv's packages: the venv's own Python lives under /root), and the
    user's login environment without a runtime directory."""
    base = Path(tempfile.mkdtemp(prefix="jcth-tour-"))
    os.chmod(base, 0o755)
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    (base / "bin").mkdir()
    wrapper = base / "bin" / "jobctl"
    wrapper.write_text(WRAPPER.format(paths=f"{ROOT / 'src'}:{site}", python=SYSTEM_PYTHON))
    wrapper.chmod(0o755)
    user = host_users.owner
    pw = pwd.getpwuid(user.uid)
    env = {
        "PATH": f"{base / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": pw.pw_dir,
        "USER": pw.pw_name,
        "LOGNAME": pw.pw_name,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
    }
    try:
        yield base, env
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(f"/tmp/jobctl-{user.uid}", ignore_errors=True)


def as_user(users: Users, argv: list[str], env: dict[str, str], **kw: Any) -> object:
    user = users.owner
    return subprocess.Popen(
        argv, user=user.uid, group=user.gid, extra_groups=user.groups(), env=env,
        **kw,
    )  # fmt: skip


@pytest.mark.timeout(300)
def test_the_tour_as_a_normal_user_with_their_own_daemon(
    host_users: Users,  # noqa: F811
    user_setup: tuple[Path, dict[str, str]],
) -> None:
    _, env = user_setup
    user = host_users.owner
    down = as_user(host_users, ["jobctl", "status"], env, stderr=subprocess.PIPE, text=True,
                   cwd="/")  # fmt: skip
    _, err = down.communicate(timeout=60)  # type: ignore[attr-defined]
    sock = f"/tmp/jobctl-{user.uid}/jobctl.sock"  # no /run/user/UID: the fallback
    assert down.returncode == 5 and sock in err, err  # type: ignore[attr-defined]
    assert "systemctl --user" not in err and "jobctl daemon" in err, err

    daemon = as_user(
        host_users, ["jobctl", "daemon", "--kill-grace", "1", "--shutdown-grace", "1"], env,
        stderr=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip
    try:
        ready = daemon.stderr.readline()  # type: ignore[attr-defined]
        while "event=ready" not in ready:
            assert ready, "the user's daemon ended before it was ready"
            ready = daemon.stderr.readline()  # type: ignore[attr-defined]
        cwd = user.home / "tour"
        cwd.mkdir()
        prepare(cwd)
        os.chown(cwd, user.uid, user.gid)
        for p in cwd.iterdir():
            os.chown(p, user.uid, user.gid)
        tour = as_user(
            host_users, ["bash", "-c", script(LINES)], env, cwd=cwd, stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        out, _ = tour.communicate(timeout=240)  # type: ignore[attr-defined]
        check_output(out, LINES, normal_user=True)

        def fetch(*argv: str) -> dict[str, object]:
            run = as_user(host_users, ["jobctl", *argv], env, stdout=subprocess.PIPE,
                          text=True, cwd="/")  # fmt: skip
            text, _ = run.communicate(timeout=60)  # type: ignore[attr-defined]
            result: dict[str, object] = json.loads(text)
            return result

        listed = as_user(host_users, ["jobctl", "list", "--json", "--limit", "1000"], env,
                         stdout=subprocess.PIPE, text=True, cwd="/")  # fmt: skip
        text, _ = listed.communicate(timeout=60)  # type: ignore[attr-defined]
        assert_pipeline_failure_is_seen(json.loads(text)["items"], fetch)
    finally:
        daemon.terminate()  # type: ignore[attr-defined]
        daemon.communicate(timeout=30)  # type: ignore[attr-defined]
