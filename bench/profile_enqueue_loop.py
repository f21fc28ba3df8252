"""A py-spy profile of the daemon under 8 lean clients posting enqueues (``--per N`` jobs a
request): where the event loop's (MainThread's) Python goes, self time per function.

    flock /tmp/bench.lock .venv/bin/python bench/profile_enqueue_loop.py --per 500 --backend pg
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import threading
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
from ab_enqueue_cpu import body
from pg_harness import database


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--per", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--backend", choices=("sqlite", "pg"), default="pg")
    ap.add_argument("--thread", default="MainThread")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="prof-enq-") as tmpdir:
        wd = Path(tmpdir)
        with database() if args.backend == "pg" else nullcontext("") as dsn:
            sock, log_path = wd / "jobctl.sock", wd / "daemon.log"
            cmd = [C.JOBCTL_BIN, "daemon", "--db", dsn or str(wd / "j.db"), "--socket", str(sock)]
            cmd += ["--state-dir", str(wd / "state")] if dsn else []
            with open(log_path, "wb") as log:
                proc = C.spawn(cmd, stdout=subprocess.DEVNULL, stderr=log, env=C.clean_env(wd))
                try:
                    C.wait_ready(proc, log_path, lambda: C.stop_proc(proc))
                    raw = wd / "prof.txt"
                    spy = [sys.prefix + "/bin/py-spy", "record", "--format", "raw", "--threads"]
                    spy += ["-r", "250", "-d", str(int(args.seconds)), "-o", str(raw)]
                    spy += ["-p", str(proc.pid)]
                    prof = threading.Thread(
                        target=subprocess.run, args=(spy,), kwargs={"capture_output": True}
                    )
                    prof.start()
                    job = (str(sock), body(args.per), args.per, 2, args.seconds)
                    C.run_clients(C.jobctl_enqueue_client, [job] * 8)
                    prof.join()
                finally:
                    C.stop_proc(proc)
        report(raw.read_text(), args.thread, args.top)


def report(text: str, thread: str, top: int) -> None:
    """Self and total samples per function of ``thread``'s stacks."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    n = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or thread not in frames[0]:
            continue
        c = int(count)
        n += c
        own[frames[-1]] += c
        for f in set(frames[1:]):
            total[f] += c
    print(f"{thread}: {n} samples")
    for name, c in own.most_common(top):
        print(f"self {100 * c / n:5.1f}%  {name}")
    for name, c in total.most_common(top):
        print(f"total {100 * c / n:5.1f}%  {name}")


if __name__ == "__main__":
    main()
