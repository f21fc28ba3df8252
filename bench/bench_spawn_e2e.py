#!/usr/bin/env python3
# usage: python bench/bench_spawn_e2e.py SRC_DIR JOBS [PREFIX...]
# e.g.   python bench/bench_spawn_e2e.py src 3000 prlimit --nofile=1024:20000 --
"""End-to-end: N `true` jobs due at once; jobs/s from due to all succeeded."""
import os, subprocess, sys, time, tempfile, shutil
from datetime import datetime, timedelta, timezone
src, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sys.path.insert(0, src)
from jobctl.client import Client
tmp = tempfile.mkdtemp(prefix="hb-")
sock = f"{tmp}/j.sock"
env = dict(os.environ, PYTHONPATH=src)
p = subprocess.Popen([*prefix, sys.executable, "-m", "jobctl", "daemon", "--db", f"{tmp}/s/j.db", "--socket", sock, "--concurrency", "16", "--log-level", "warning"], env=env, stderr=subprocess.DEVNULL)
for _ in range(200):
    if os.path.exists(sock): break
    time.sleep(0.05)
time.sleep(0.3)
c = Client(sock)
due = datetime.now(timezone.utc) + timedelta(seconds=2)
for i in range(0, n, 1000):
    c.enqueue_many([{"command": ["true"], "cwd": "/", "run_at": due.isoformat()}] * min(1000, n - i))
while datetime.now(timezone.utc) < due: time.sleep(0.01)
t0 = time.time()
while c.status()["counts"]["succeeded"] < n: time.sleep(0.05)
el = time.time() - due.timestamp()
print(f"{n / el:.0f} jobs/s")
c.close(); p.terminate(); p.wait(); shutil.rmtree(tmp)
