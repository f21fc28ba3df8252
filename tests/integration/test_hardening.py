"""The daemon's own hardening, as any user: private files whatever the umask, symlinks
refused, the commands' umask, transient start failures, and the connection bounds
(header size and time, idle time, connections per uid), each against a real daemon."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobctl.client import Client
from jobctl.errors import Unavailable
from tests.integration.conftest import DaemonProc, wait_until

UMASK_000 = ["/bin/sh", "-c", 'umask 000 && exec "$@"', "sh"]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def run_job(client: Client, job: dict[str, object], timeout: float = 20) -> dict[str, object]:
    job_id = client.enqueue({"cwd": "/", **job})["id"]
    final = {"succeeded", "dead", "cancelled"}
    wait_until(lambda: client.get(job_id)["status"] in final, timeout, f"job {job_id} to end")
    return client.get(job_id)


def test_files_are_private_whatever_the_umask(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(start=False)
    d.prefix = UMASK_000
    d.start()
    job = run_job(d.client(), {"command": ["/bin/sh", "-c", "echo out; echo x > made-by-job"]})
    assert job["status"] == "succeeded"
    state = d.db.parent
    assert mode(state) == 0o700
    for name in ("jobctl.db", "jobctl.db-wal", "jobctl.db-shm", "jobctl.db.lock"):
        assert mode(state / name) == 0o600, name
    logs = state / "logs"
    assert mode(logs) == 0o700 and mode(logs / "000000") == 0o700
    assert mode(logs / "000000" / f"{job['id']}.1.log") == 0o600


def test_too_open_files_of_an_earlier_run_are_tightened(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon()
    run_job(d.client(), {"command": ["true"]})
    d.stop()
    state = d.db.parent
    os.chmod(state, 0o755)
    os.chmod(state / "jobctl.db", 0o644)
    os.chmod(state / "logs", 0o755)
    os.chmod(state / "logs" / "000000", 0o777)
    d.start()
    line = d.wait_for_line("event=permissions_tightened")
    assert "from=" in line and "to=" in line
    assert mode(state) == 0o700 and mode(state / "jobctl.db") == 0o600
    assert mode(state / "logs") == 0o700 and mode(state / "logs" / "000000") == 0o700


def test_a_shared_state_directory_is_left_alone_but_its_files_are_private(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    shared = tmp_path / "state"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    (shared / "someone-elses-file").write_text("x")
    d = make_daemon()
    d.wait_for_line("event=state_dir_open")
    assert mode(shared) == 0o755 and mode(shared / "jobctl.db") == 0o600


def test_a_symlinked_log_directory_is_refused(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "logs").symlink_to(elsewhere)
    d = make_daemon(start=False)
    d.start(wait=False)
    assert d.wait() != 0
    line = d.wait_for_line("symbolic link")
    assert "logs" in line and not list(elsewhere.iterdir())


def test_a_symlink_planted_as_a_log_file_is_not_followed(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    d = make_daemon()
    target = tmp_path / "target"
    target.write_text("")
    client = d.client()
    probe = client.enqueue({"command": ["true"], "cwd": "/", "run_at": "2099-01-01T00:00Z"})
    client.cancel(probe["id"])
    (d.db.parent / "logs" / "000000").mkdir(exist_ok=True)
    (d.db.parent / "logs" / "000000" / f"{probe['id'] + 1}.1.log").symlink_to(target)
    job = run_job(client, {"command": ["/bin/echo", "secret"]})
    assert job["id"] == probe["id"] + 1 and job["status"] == "dead"
    assert "symbolic links" in job["attempts"][0]["error"]  # type: ignore[index]
    assert target.read_text() == ""


def _umask_of_job(d: DaemonProc) -> str:
    job = run_job(d.client(), {"command": ["grep", "^Umask", "/proc/self/status"]})
    attempt = job["attempts"][0]  # type: ignore[index]
    return str(attempt["output_tail"]).split()[1]


def test_commands_start_with_umask_077(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(start=False)
    d.prefix = UMASK_000
    d.start()
    assert _umask_of_job(d) == "0077"


def test_job_umask_is_configurable(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_JOB_UMASK": "027"})
    assert _umask_of_job(d) == "0027"


def test_commands_get_the_usual_open_file_limit_back(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon("--log-level", "debug", start=False)
    d.prefix = ["prlimit", "--nofile=200:4000", "--"]
    d.start()
    d.wait_for_line("event=nofile_limit soft_was=200 soft=4000 for_commands=200")
    job = run_job(d.client(), {"command": ["/bin/sh", "-c", "ulimit -Sn; ulimit -Hn; pwd"]})
    assert job["attempts"][0]["output_tail"].split() == ["200", "4000", "/"]  # type: ignore[index]


def test_running_out_of_descriptors_at_start_is_retried_for_free(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """A daemon held to 64 descriptors runs 60 commands at once: some meet EMFILE when
    they start. They wait and run later; none is dead, none used its one attempt.

    Inline spawner: with the spawn helper the daemon holds no descriptor per running
    command any more (the helper makes the gate and the cgroup, and reports exits), so
    60 commands no longer exhaust 64 descriptors there."""
    d = make_daemon("--concurrency", "200", start=False, env={"JOBCTL_JOB_SPAWNER": "inline"})
    d.prefix = ["prlimit", "--nofile=64:64", "--"]
    d.start()
    client = d.client()
    body = {
        "command": ["sleep", "0.5"],
        "cwd": "/",
        "max_attempts": 1,
        "backoff": {"base": 0.1, "cap": 0.5},
    }
    ids = [j["id"] for j in client.enqueue_many([body] * 60)]

    def all_final() -> bool:
        try:
            jobs = client.list_jobs(limit=100)
        except Unavailable:  # a read out of descriptors too: 503, try again (as told)
            return False
        return all(j["status"] in {"succeeded", "dead"} for j in jobs)

    try:
        wait_until(all_final, 60, "every job to end")
        jobs = [client.get(i) for i in ids]
    except Exception:
        print("\n".join(d.log)[-6000:])
        raise
    assert [j["id"] for j in jobs if j["status"] != "succeeded"] == []
    errors = [a["error"] or "" for j in jobs for a in j["attempts"]]
    assert any("Too many open files" in e and "retried later" in e for e in errors), errors


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_raw_sockets() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _raw(d: DaemonProc) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _OPEN.append(sock)
    sock.settimeout(10)
    sock.connect(str(d.socket))
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, object], float]:
    """Read until the daemon closes: (status, JSON body, seconds it took)."""
    t0 = time.monotonic()
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body), time.monotonic() - t0


def test_an_endless_header_is_cut_off(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_MAX_HEADER_BYTES": "4096"})
    sock = _raw(d)
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 16384)
    status, body, _ = _answer(sock)
    assert status == 431 and body["error"]["code"] == "header_too_large"  # type: ignore[index]
    assert d.client().status()["pid"]  # others are served as before


def test_headers_under_the_limit_are_served(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_MAX_HEADER_BYTES": "4096"})
    sock = _raw(d)
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX: " + b"a" * 3000)
    sock.sendall(b"\r\n\r\n")
    status, body, _ = _answer(sock)
    assert status == 200 and "pid" in body


def test_a_large_body_is_no_header(make_daemon: Callable[..., DaemonProc]) -> None:
    """Bytes after a request's headers (its body, on a kept-alive connection) do not
    count against the header limit: 1,000 jobs in one request, then more on it."""
    d = make_daemon(env={"JOBCTL_MAX_HEADER_BYTES": "4096"})
    client = d.client()
    body = {"command": ["true"], "cwd": "/", "run_at": "2099-01-01T00:00Z"}
    for _ in range(3):
        assert len(client.enqueue_many([body] * 1000)) == 1000
        assert client.status()["counts"]["scheduled"] >= 1000


def test_slow_headers_time_out(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_HEADER_TIMEOUT": "300ms"})
    silent, slow = _raw(d), _raw(d)
    slow.sendall(b"GET /v1/sta")
    for sock in (silent, slow):
        status, body, took = _answer(sock)
        assert status == 408 and body["error"]["code"] == "header_timeout"  # type: ignore[index]
        assert took < 5


def _kept_alive_status(sock: socket.socket) -> int:
    """One answer on a kept-alive connection (read by its Content-Length): its status."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1])


def test_each_request_gets_the_whole_header_time(make_daemon: Callable[..., DaemonProc]) -> None:
    """One header timer per connection, checked when it fires: prompt requests on a
    connection kept busy past the timeout are served; a slow header after them, begun
    after the timer was armed, is still cut off, once its own time is up."""
    d = make_daemon(env={"JOBCTL_HEADER_TIMEOUT": "400ms"})
    sock = _raw(d)
    began = time.monotonic()
    while time.monotonic() - began < 1.0:  # 2.5 timeouts of prompt requests
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _kept_alive_status(sock) == 200
        time.sleep(0.05)
    slow_began = time.monotonic()
    sock.sendall(b"GET /v1/sta")
    status, body, _ = _answer(sock)
    took = time.monotonic() - slow_began
    assert status == 408 and body["error"]["code"] == "header_timeout"  # type: ignore[index]
    assert 0.35 <= took < 5  # its own 400 ms, not what was left of an earlier timer


def test_an_idle_kept_alive_connection_is_closed(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_IDLE_TIMEOUT": "1s"})
    sock = _raw(d)
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.monotonic()
    data = b""
    while chunk := sock.recv(65536):  # the answer, then EOF when the idle time is up
        data += chunk
    assert data.startswith(b"HTTP/1.1 200") and 0.9 < time.monotonic() - t0 < 5


def test_the_idle_time_counts_from_the_last_answer(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """The keep-alive timer is armed once per connection (server.py): a request sent
    while it runs moves the close to the idle time after that request's answer."""
    d = make_daemon(env={"JOBCTL_IDLE_TIMEOUT": "1s"})
    sock = _raw(d)
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    time.sleep(0.6)  # the first answer's timer still runs
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.monotonic()
    data = b""
    while chunk := sock.recv(65536):  # the second answer, then EOF when its idle time is up
        data += chunk
    assert data.startswith(b"HTTP/1.1 200") and 0.9 < time.monotonic() - t0 < 5


def test_connections_over_the_per_uid_limit_are_refused_at_once(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon(env={"JOBCTL_MAX_CONNECTIONS_PER_UID": "4"})
    for _ in range(4):
        _raw(d)
    extra = _raw(d)
    status, body, took = _answer(extra)
    assert status == 503 and body["error"]["code"] == "too_many_connections"  # type: ignore[index]
    assert took < 2
    d.wait_for_line("event=connection_refused")
    while _OPEN:
        _OPEN.pop().close()
    wait_until(lambda: _status_ok(d), 10, "a connection slot to free up")


def _status_ok(d: DaemonProc) -> bool:
    with Client(d.socket) as client:
        try:
            return bool(client.status()["pid"])
        except Exception:
            return False


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_four_unfinished_64mb_headers_do_not_raise_memory(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """Today's main kept every byte of an unfinished header: 151 -> 400 MB for four."""
    d = make_daemon()
    assert d.proc is not None and d.client().status()["pid"]
    before = _rss_kb(d.proc.pid)
    chunk = b"a" * (1 << 20)
    socks = [_raw(d) for _ in range(4)]
    for sock in socks:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent = [0] * 4
    for _ in range(64):
        for i, sock in enumerate(socks):
            try:
                sock.sendall(chunk)
                sent[i] += len(chunk)
            except OSError:  # the daemon answered 431 and closed
                pass
    for sock in socks:
        with contextlib.suppress(OSError):
            status, _, _ = _answer(sock)
            assert status == 431
    after = _rss_kb(d.proc.pid)
    print(f"RSS {before / 1024:.0f} -> {after / 1024:.0f} MB; sent at most {max(sent) >> 20} MB")
    assert max(sent) < 8 << 20  # cut off early: nowhere near the 64 MB
    assert after - before < 20_000, (before, after)


def test_a_database_reached_through_a_symlink_is_made_private_where_it_is(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o755)
    (tmp_path / "state").mkdir()
    link = tmp_path / "state" / "jobctl.db"
    link.symlink_to(real / "jobs.db")
    d = make_daemon(start=False)
    d.db = link
    d.start()
    assert run_job(d.client(), {"command": ["true"]})["status"] == "succeeded"
    assert mode(real) == 0o700 and mode(real / "jobs.db") == 0o600
    assert mode(real / "jobs.db-wal") == 0o600 and link.is_symlink()
