"""``jobctl logs`` against a real daemon: streamed in bounded memory, --tail, --follow,
resuming at an offset (issue 12 item 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.integration.conftest import DaemonProc, daemon_env
from tests.integration.test_daemon import cli

MB = 1024 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def add(d: DaemonProc, script: str) -> int:
    out = cli(d, "add", "--", "sh", "-c", script)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_a_50_mb_log_streams_in_bounded_memory_while_status_stays_fast(
    daemon: DaemonProc,
) -> None:
    job = add(daemon, "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 52428800")
    daemon.wait_for_line(f"event=succeeded job={job} ")
    pid = daemon.proc.pid  # type: ignore[union-attr]
    cli(daemon, "logs", str(job), "--tail", "1")  # warm the route's code paths
    before = rss_kib(pid)
    peak = [before]
    latencies: list[float] = []
    done = threading.Event()

    def watch() -> None:
        c = daemon.client()
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            t0 = time.perf_counter()
            c.status()
            latencies.append(time.perf_counter() - t0)
            done.wait(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    env = daemon_env() | {"JOBCTL_SOCKET": str(daemon.socket)}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "jobctl", "logs", str(job)],
            capture_output=True,
            env=env,
            timeout=120,
        )
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) == 50 * MB
    assert proc.stdout.startswith(b"0123456789abcdefghijklmnopqrstuvwxyz\n")
    peak[0] = max(peak[0], rss_kib(pid))
    # reading the whole log grew the daemon by more than the log (>50 MB); streaming
    # holds a chunk at a time: a generous bound
    assert (peak[0] - before) < 25 * 1024, (before, peak[0])
    assert latencies and max(latencies) < 1.0, max(latencies)


def test_tail_lines_and_offset_resume(daemon: DaemonProc) -> None:
    long = "y" * 200_000
    job = add(
        daemon, "seq 1 1000; head -c 200000 /dev/zero | tr '\\0' y; echo; printf 'no newline'"
    )
    daemon.wait_for_line(f"event=succeeded job={job} ")
    out = cli(daemon, "logs", str(job), "--tail", "3")
    assert out.stdout == f"1000\n{long}\nno newline"
    assert cli(daemon, "logs", str(job), "-n", "1").stdout == "no newline"
    everything = cli(daemon, "logs", str(job)).stdout
    assert cli(daemon, "logs", str(job), "--tail", "100000").stdout == everything
    assert cli(daemon, "logs", str(job), "--tail", "0").stdout == ""
    got: list[bytes] = []
    c = daemon.client()
    fields = c.stream_log(job, 1, got.append, offset=10)
    assert b"".join(got) == everything.encode()[10:]
    assert fields["x-log-start"] == "10"
    assert fields["x-log-size"] == str(len(everything))
    assert fields["x-attempt-running"] == "0"
    got.clear()
    fields = c.stream_log(job, 1, got.append, offset=10**9)  # past the end: nothing
    assert got in ([], [b""]) and fields["x-log-start"] == str(len(everything))


def test_tail_of_a_bad_value_is_a_usage_error(daemon: DaemonProc) -> None:
    job = add(daemon, "echo hi")
    out = cli(daemon, "logs", str(job), "--tail", "-1")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def _follow(d: DaemonProc, *args: str) -> subprocess.Popen[bytes]:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", "logs", *args, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # a suite started in the background (an asynchronous list of a shell without job
        # control) inherits SIGINT ignored, and Python then installs no Ctrl-C handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )


def _read_until(proc: subprocess.Popen[bytes], want: bytes, seen: bytearray) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while want not in seen:
        assert time.monotonic() < deadline, bytes(seen)
        chunk = os.read(proc.stdout.fileno(), 65536)
        assert chunk, bytes(seen)
        seen += chunk


def test_follow_prints_lines_as_a_running_job_writes_them_and_ends_with_it(
    daemon: DaemonProc, tmp_path: Path
) -> None:
    fifo = tmp_path / "feed"
    os.mkfifo(fifo)
    job = add(daemon, f'echo ready; while read l; do echo "got $l"; done < {fifo}; echo bye')
    daemon.wait_for_line(f"event=started job={job} ")
    proc = _follow(daemon, str(job))
    seen = bytearray()
    _read_until(proc, b"ready\n", seen)
    with open(fifo, "w") as feed:
        for n in range(3):
            feed.write(f"{n}\n")
            feed.flush()
            _read_until(proc, f"got {n}\n".encode(), seen)  # printed while it runs
    out, err = proc.communicate(timeout=20)  # ends by itself once the job is done
    assert proc.returncode == 0, err
    assert bytes(seen) + out == b"ready\ngot 0\ngot 1\ngot 2\nbye\n"


def test_ctrl_c_ends_follow_without_a_traceback(daemon: DaemonProc, tmp_path: Path) -> None:
    fifo = tmp_path / "feed"
    os.mkfifo(fifo)
    job = add(daemon, f"echo ready; cat {fifo}")
    daemon.wait_for_line(f"event=started job={job} ")
    with _follow(daemon, str(job), "--tail", "5") as proc:
        try:
            _read_until(proc, b"ready\n", bytearray())
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=20)
        finally:
            proc.kill()  # a no-op once it ended; else no process or pipe outlives the test
    assert proc.returncode == 130 and b"Traceback" not in err, err
    with open(fifo, "w"):
        pass
    daemon.wait_for_line(f"event=succeeded job={job} ")


def test_log_bytes_are_accounted_in_status_and_metrics(daemon: DaemonProc) -> None:
    before = daemon.client().status()["logs"]
    job = add(daemon, "head -c 12345 /dev/zero")
    daemon.wait_for_line(f"event=succeeded job={job} ")
    logs = daemon.client().status()["logs"]
    assert logs["bytes"] - before["bytes"] == 12345
    assert logs["owner_bytes"] - before["owner_bytes"] == 12345
    metrics = cli(daemon, "metrics").stdout
    assert f"jobctl_log_bytes {float(logs['bytes'])}" in metrics
    assert "logs: " in cli(daemon, "status").stdout
