#!/usr/bin/env python3
"""Popen of /bin/true as jobctl starts commands: direct (cwd=) vs through the trampoline,
as the daemon's own user and dropping to another uid. 16 in flight, like --concurrency 16.
The "+ cgroup" rows also make the attempt's cgroup, start the command at the gate, move it
in, open the gate, and remove the cgroup after the command ended (what the daemon does
where it may make cgroups; skipped where it may not)."""
import os, subprocess, sys, time, pwd
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src"))
from jobctl.engine.process import trampoline
from jobctl.engine import cgroup
# usage (as root, for the "other uid" rows): python bench/bench_spawn.py STARTS ROUNDS
N = int(sys.argv[1])
dn = os.open(os.devnull, os.O_RDWR)
env = {"PATH": "/usr/bin:/bin"}
nobody = pwd.getpwnam("nobody")
drop = dict(user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=os.getgrouplist("nobody", nobody.pw_gid))
CG = cgroup.detect("auto")[0]
from concurrent.futures import ThreadPoolExecutor
MOVER = ThreadPoolExecutor(2)
def start(i, argv, cg=False, **kw):
    if not cg:
        return subprocess.Popen(argv, stdin=dn, stdout=dn, stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True, umask=0o77, **kw), None
    group = CG.create(f"bench-{os.getpid()}-{i}")
    r, w = os.pipe2(os.O_CLOEXEC)
    p = subprocess.Popen(argv, stdin=r, stdout=dn, stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True, umask=0o77, **kw)
    os.close(r)
    def move():
        try: group.add_pid(p.pid)
        finally: os.close(w)
    return p, (group, MOVER.submit(move))  # on a thread, as the daemon does
def end(p, cg):
    p.wait()
    if cg is not None:
        group, moved = cg
        moved.result()
        t0 = time.perf_counter()
        while group.populated(): pass
        group.remove()
        return time.perf_counter() - t0
    return 0.0
def run(argv, **kw):
    t = time.perf_counter(); pt = 0.0; live = []
    for i in range(N):
        if len(live) >= 16: pt += end(*live.pop(0))
        t0 = time.perf_counter()
        live.append(start(i, argv, **kw))
        pt += time.perf_counter() - t0
    for p in live: pt += end(*p)
    return N / (time.perf_counter() - t), pt / N * 1e6
V = {
 "same user, cwd= (main)": (["/bin/true"], dict(cwd="/tmp")),
 "same user, trampoline": ([*trampoline("/tmp", env, 1024), "/bin/true"], {}),
 "other uid, cwd= (main)": (["/bin/true"], dict(cwd="/tmp", **drop)),
 "other uid, trampoline": ([*trampoline("/tmp", env, 1024), "/bin/true"], drop),
}
if CG is not None:
    V["same user, trampoline + cgroup"] = ([*trampoline("/tmp", env, 1024, None, True), "/bin/true"], dict(cg=True))
    V["other uid, trampoline + cgroup"] = ([*trampoline("/tmp", env, 1024, None, True), "/bin/true"], dict(cg=True, **drop))
res = {k: [] for k in V}
for _ in range(int(sys.argv[2])):
    for k, (a, kw) in V.items(): res[k].append(run(a, **kw))
for k, rs in res.items():
    rates = sorted(r for r, _ in rs); us = sorted(u for _, u in rs)
    print(f"{k:32s} median {rates[len(rates)//2]:6.0f}/s  Popen() in the daemon median {us[len(us)//2]:5.0f} us")
