"""``jobctl logs`` of a large attempt log (issue 12 item 5).

Starts a daemon on a temp socket, runs a job that prints SIZE MiB, then times
``jobctl logs ID > /dev/null`` (and ``curl`` of the same route) while a second client asks
for ``status`` every 50 ms; reports the time, the daemon's RSS before and its peak during
the read, and the other client's ``status`` latency. Run it against any tree with
PYTHONPATH=that/src to compare before and after.

    python bench/bench_logs.py [SIZE_MIB]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from jobctl.client import Client


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(
    name: str, cmd: list[str], pid: int, sock: Path, timeout: float, env: dict[str, str]
) -> None:
    before = rss_mib(pid)
    peak = [before]
    lat: list[float] = []
    done = threading.Event()

    def sample() -> None:  # its own thread: a status call blocked by the read must not
        while not done.is_set():  # stop the sampling
            peak[0] = max(peak[0], rss_mib(pid))
            done.wait(0.01)

    def other() -> None:
        with Client(sock) as c:
            while not done.is_set():
                t0 = time.perf_counter()
                c.status()
                lat.append(time.perf_counter() - t0)
                done.wait(0.05)

    t = threading.Thread(target=other)
    t.start()
    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.perf_counter()
    try:
        with open(os.devnull, "wb") as null:
            rc = subprocess.run(cmd, stdout=null, timeout=timeout, env=env, check=False).returncode
        took = f"{time.perf_counter() - t0:.2f} s (rc {rc})"
    except subprocess.TimeoutExpired:
        took = f"> {timeout:.0f} s (killed)"
    done.set()
    t.join()
    sampler.join()
    lat.sort()
    print(
        f"{name}: {took}; daemon RSS {before:.0f} MiB before, peak {peak[0]:.0f} MiB "
        f"(+{peak[0] - before:.0f}); other client's status: median "
        f"{statistics.median(lat) * 1000:.1f} ms, max {lat[-1] * 1000:.0f} ms over {len(lat)}"
    )


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    tmp = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    sock = tmp / "s.sock"
    env = dict(os.environ, JOBCTL_SOCKET=str(sock))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "daemon", "--db", str(tmp / "db"), "--socket", str(sock)],
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with Client(sock) as c:
            script = f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}M"
            job = c.enqueue({"command": ["sh", "-c", script]})["id"]
            while c.get(job)["status"] != "succeeded":
                time.sleep(0.2)
        size_out = (tmp / "logs" / "000000" / f"{job}.1.log").stat().st_size
        print(f"log of {size_out} bytes; daemon pid {daemon.pid}")
        jobctl = [sys.executable, "-m", "jobctl", "logs", str(job)]
        url = f"http://jobctl/v1/jobs/{job}/attempts/1/log"
        limit = float(os.environ.get("BENCH_TIMEOUT", "300"))
        measure(
            "curl", ["curl", "-s", "--unix-socket", str(sock), url], daemon.pid, sock, limit, env
        )
        measure("jobctl logs", jobctl, daemon.pid, sock, limit, env)
        if os.environ.get("BENCH_TAIL", "1") == "1":
            measure(
                "jobctl logs --tail 10", [*jobctl, "--tail", "10"], daemon.pid, sock, limit, env
            )
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
