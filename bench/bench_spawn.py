#!/usr/bin/env python3
"""Popen of /bin/true as jobctl starts commands: direct (cwd=) vs through the trampoline,
as the daemon's own user and dropping to another uid. 16 in flight, like --concurrency 16."""
import os, subprocess, sys, time, pwd
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src"))
from jobctl.engine.process import trampoline
# usage (as root, for the "other uid" rows): python bench/bench_spawn.py STARTS ROUNDS
N = int(sys.argv[1])
dn = os.open(os.devnull, os.O_RDWR)
env = {"PATH": "/usr/bin:/bin"}
nobody = pwd.getpwnam("nobody")
drop = dict(user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=os.getgrouplist("nobody", nobody.pw_gid))
def run(argv, **kw):
    t = time.perf_counter(); pt = 0.0; live = []
    for _ in range(N):
        if len(live) >= 16: live.pop(0).wait()
        t0 = time.perf_counter()
        live.append(subprocess.Popen(argv, stdin=dn, stdout=dn, stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True, umask=0o77, **kw))
        pt += time.perf_counter() - t0
    for p in live: p.wait()
    return N / (time.perf_counter() - t), pt / N * 1e6
V = {
 "same user, cwd= (main)": (["/bin/true"], dict(cwd="/tmp")),
 "same user, trampoline": ([*trampoline("/tmp", env, 1024), "/bin/true"], {}),
 "other uid, cwd= (main)": (["/bin/true"], dict(cwd="/tmp", **drop)),
 "other uid, trampoline": ([*trampoline("/tmp", env, 1024), "/bin/true"], drop),
}
res = {k: [] for k in V}
for _ in range(int(sys.argv[2])):
    for k, (a, kw) in V.items(): res[k].append(run(a, **kw))
for k, rs in res.items():
    rates = sorted(r for r, _ in rs); us = sorted(u for _, u in rs)
    print(f"{k:28s} median {rates[len(rates)//2]:6.0f}/s  Popen() in the daemon median {us[len(us)//2]:5.0f} us")
