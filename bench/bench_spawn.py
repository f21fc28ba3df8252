#!/usr/bin/env python3
"""Raw spawn rates of this host: what starting `/bin/true` costs by each means, 16 in
flight (as `--concurrency 16`), so jobctl's end-to-end rate can be read against them
(bench_spawn_e2e.py prints both in the same run).

Rows (processes/s): asyncio create_subprocess_exec; Popen one at a time; Popen 16 in
flight reaped with os.wait; os.posix_spawn 16 in flight (vfork, the host's limit for
one starting thread). As root, the same for a command run as another uid (Popen with
user=: a full fork; posix_spawn of setpriv: vfork and one more exec), and the spawn
helper's own path (engine/spawner.py: posix_spawn, or fork of the small helper for
another uid). With --jobctl-rows, also Popen through jobctl's trampoline, with and
without a cgroup per attempt (the daemon's start-up path before the helper).

usage: python bench/bench_spawn.py [STARTS [ROUNDS]] [--jobctl-rows]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import cast

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {"PATH": "/usr/bin:/bin"}
TRUE = "/bin/true"
INFLIGHT = 16


def _devnull() -> int:
    return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)


def other_user() -> tuple[int, int, list[int]] | None:
    """nobody's uid, gid and groups when this runs as root (None otherwise)."""
    if os.geteuid() != 0:
        return None
    nb = pwd.getpwnam("nobody")
    return nb.pw_uid, nb.pw_gid, os.getgrouplist("nobody", nb.pw_gid)


def inflight(start: Callable[[], int], n: int, k: int = INFLIGHT) -> float:
    """Start ``n`` processes with at most ``k`` alive; processes/s. ``start`` returns a pid
    the caller reaps here with os.wait (any child: they are all ours)."""
    t0, live = time.perf_counter(), 0
    for _ in range(n):
        if live >= k:
            os.wait()
            live -= 1
        start()
        live += 1
    while live:
        os.wait()
        live -= 1
    return n / (time.perf_counter() - t0)


def popen_one_at_a_time(n: int, dn: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.Popen([TRUE], stdin=dn, stdout=dn, stderr=dn, env=ENV, close_fds=True,
                         start_new_session=True).wait()  # fmt: skip
    return n / (time.perf_counter() - t0)


def popen_start(dn: int, **kw: object) -> Callable[[], int]:
    # Keep every one: a Popen collected while its child runs is reaped by the next
    # Popen's cleanup, and os.wait below then finds no child (seen under load).
    kept: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        p = subprocess.Popen([TRUE], stdin=dn, stdout=dn, stderr=dn, env=ENV, close_fds=True,
                             start_new_session=True, **kw)  # type: ignore[call-overload]  # fmt: skip
        kept.append(p)
        pid: int = p.pid
        return pid

    return start


def spawn_start(dn: int, argv: list[str]) -> Callable[[], int]:
    actions = [(os.POSIX_SPAWN_DUP2, dn, 0), (os.POSIX_SPAWN_DUP2, dn, 1),
               (os.POSIX_SPAWN_DUP2, dn, 2)]  # fmt: skip
    return lambda: os.posix_spawn(argv[0], argv, ENV, file_actions=actions, setsid=True)


def asyncio_rate(n: int) -> float:
    async def run() -> float:
        sem = asyncio.Semaphore(INFLIGHT)

        async def one() -> None:
            async with sem:
                p = await asyncio.create_subprocess_exec(
                    TRUE, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, env=ENV, start_new_session=True,
                )  # fmt: skip
                await p.wait()

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t0)

    return asyncio.run(run())


def helper_start(
    creds: tuple[int, int, list[int]] | None, dn: int, via: str = "launcher"
) -> Callable[[], int]:
    """The spawn helper's own start path, called in this process (no socket); for
    another uid ``via`` the launcher's library (engine/launch.c run in a vfork child: no
    exec of the launcher), the launcher, ``setpriv`` + the trampoline (no launcher), or a
    fork of the helper (no setpriv either)."""
    sys.path.insert(0, str(SRC))
    from jobctl.engine import spawner

    shim = cast("spawner.Helper", _HelperShim())
    if creds is None:
        return lambda: spawner.Helper.start(shim, [TRUE], ENV, "/", dn, dn, None)
    argv = ["/bin/sh", "-c", 'cd -P -- "$1" || exit 125; shift; exec "$@"', "jobctl", "/", TRUE]
    if via == "fork":
        return lambda: spawner.fork_exec(argv, ENV, dn, dn, creds)
    if via == "setpriv":  # the helper prepends setpriv to the trampoline
        return lambda: spawner.Helper.start(shim, argv, ENV, None, dn, dn, creds)
    from jobctl.engine import launcher

    found = launcher.find_or_build()
    if found is None:
        raise LookupError("no launcher")
    prefix = launcher.argv(found, creds, "/", None, None, False)
    if via == "library":
        from jobctl.engine import spawnsys

        library = launcher.library(found)
        shim.native = None if library is None else spawnsys.load_native(library)
        if shim.native is None:
            raise LookupError("no launcher library")
    return lambda: spawner.Helper.start(shim, [*prefix, TRUE], ENV, None, dn, dn, None)


class _HelperShim:
    """Just enough of spawner.Helper for its ``start`` method."""

    native = None


def raw_rates(n: int) -> dict[str, float]:
    """Every raw rate once (processes/s), in a fixed order."""
    dn = _devnull()
    rates = {
        "asyncio create_subprocess_exec, 16 in flight": asyncio_rate(n),
        "Popen, one at a time": popen_one_at_a_time(n, dn),
        "Popen, 16 in flight, os.wait": inflight(popen_start(dn), n),
        "posix_spawn, 16 in flight": inflight(spawn_start(dn, [TRUE]), n),
        "spawn helper path (posix_spawn), 16 in flight": inflight(helper_start(None, dn), n),
    }
    creds = other_user()
    if creds is not None:
        uid, gid, groups = creds
        rates["other uid: Popen user=, 16 in flight"] = inflight(
            popen_start(dn, user=uid, group=gid, extra_groups=groups), n
        )
        setpriv = shutil.which("setpriv")
        if setpriv:
            argv = [setpriv, f"--reuid={uid}", f"--regid={gid}",
                    "--groups=" + ",".join(map(str, groups)), "--", TRUE]  # fmt: skip
            rates["other uid: posix_spawn of setpriv, 16 in flight"] = inflight(
                spawn_start(dn, argv), n
            )
        for via in ("library", "launcher", "setpriv", "fork"):
            with contextlib.suppress(LookupError):  # no launcher could be built here
                rates[f"other uid: spawn helper path ({via}), 16 in flight"] = inflight(
                    helper_start(creds, dn, via), n
                )
    os.close(dn)
    return rates


def jobctl_rows(n: int, rounds: int) -> None:
    """The daemon's Popen path through the trampoline, with and without a cgroup."""
    sys.path.insert(0, str(SRC))
    from jobctl.engine import cgroup
    from jobctl.engine.process import trampoline

    dn = _devnull()
    cg_base = cgroup.detect("auto")[0]
    mover = ThreadPoolExecutor(2)
    creds = other_user()

    def start(i: int, argv: list[str], cg: bool, kw: dict[str, object]) -> int:
        if not cg or cg_base is None:
            return popen_start(dn, **kw)()
        group = cg_base.create(f"bench-{os.getpid()}-{i}-{time.monotonic_ns()}")
        r, w = os.pipe2(os.O_CLOEXEC)
        p = subprocess.Popen(argv, stdin=r, stdout=dn, stderr=dn, env=ENV,
                             start_new_session=True, close_fds=True, **kw)  # type: ignore[call-overload]  # fmt: skip
        os.close(r)

        def move() -> None:
            try:
                group.add_pid(p.pid)
            finally:
                os.close(w)

        mover.submit(move).result()
        return int(p.pid)

    rows: dict[str, tuple[list[str], bool, dict[str, object]]] = {
        "same user, trampoline": ([*trampoline("/tmp", ENV, 1024), TRUE], False, {}),
    }
    if cg_base is not None:
        gate = [*trampoline("/tmp", ENV, 1024, None, True), TRUE]
        rows["same user, trampoline + cgroup"] = (gate, True, {})
    if creds is not None:
        drop = {"user": creds[0], "group": creds[1], "extra_groups": creds[2]}
        rows["other uid, trampoline"] = ([*trampoline("/tmp", ENV, 1024), TRUE], False, drop)
    for name, (argv, cg, kw) in rows.items():
        rates = sorted(inflight(partial(start, 0, argv, cg, kw), n) for _ in range(rounds))
        print(f"  {name:48s} {rates[len(rates) // 2]:8.0f}/s")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 1000
    rounds = int(args[1]) if len(args) > 1 else 3
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {os.cpu_count()} CPUs")
    runs = [raw_rates(n) for _ in range(rounds)]
    for name in runs[0]:
        rates = sorted(r[name] for r in runs)
        each = ", ".join(f"{r:.0f}" for r in rates)
        print(f"  {name:52s} median {rates[len(rates) // 2]:7.0f}/s  ({each})")
    if "--jobctl-rows" in sys.argv:
        jobctl_rows(n, rounds)


if __name__ == "__main__":
    main()
