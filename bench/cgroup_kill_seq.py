#!/usr/bin/env python3
"""Which ``clone3`` starts into a cgroup does this kernel kill at birth, once
``cgroup.kill`` was written somewhere? (issue 17, branch cgprobe; the answers on 6.18 are
in docs/architecture.md, "Killed at birth, found out").

Each case: a child of this process moves itself into cgroup P, then starts ``/bin/true``
by ``clone3`` (``CLONE_INTO_CGROUP``, the launcher's library as the spawn helper uses
it) into cgroup T, and prints how it ended: ``0`` (ran), ``-9`` (SIGKILLed) or
``born killed`` (the child never ran: spawnnative.BornKilled). Re-run it on a new kernel
to see whether the spawn helper's probe still has anything to find. Needs root (or a
delegated cgroup v2) and the launcher's library; makes and removes ``cgexp-<pid>`` in the
cgroup v2 root.

usage: python bench/cgroup_kill_seq.py
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from jobctl.engine import cgroup, launcher, spawnnative


def _mk(path: str) -> str:
    os.mkdir(path)
    return path


def _kill(path: str) -> None:
    Path(path, "cgroup.kill").write_text("1")


def _in_child(native: spawnnative.Native, parent: str, target: str) -> str:
    """Run in a forked child: move into ``parent``, start ``/bin/true`` into ``target``."""
    Path(parent, "cgroup.procs").write_text(str(os.getpid()))
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    null = os.open(os.devnull, os.O_RDWR)
    words = [native.launcher, "-", "-", "-", "/", "", "", "", "--", "/bin/true"]
    try:
        pid = native.spawn(words, {"PATH": "/bin"}, null, null, fd)
    except spawnnative.BornKilled:
        return "born killed"
    return str(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def run(native: spawnnative.Native, parent: str, target: str) -> str:
    """How ``/bin/true`` started into ``target`` from a process in ``parent`` ended."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports and exits
        try:
            os.write(w, _in_child(native, parent, target).encode())
        except BaseException as exc:
            os.write(w, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def cases(native: spawnnative.Native, base: str) -> list[tuple[str, str]]:
    """(case, outcome) for each way the kill sequences of P and T can stand."""
    out: list[tuple[str, str]] = []

    def case(name: str, parent: str, target: str) -> None:
        out.append((name, run(native, parent, target)))

    p = _mk(f"{base}/p1")
    case("P fresh -> new child of P", p, _mk(f"{p}/c"))
    case("P fresh -> new sibling of P", p, _mk(f"{base}/s1"))
    p = _mk(f"{base}/p2")
    _kill(p)
    case("P killed (empty) -> child made after the kill", p, _mk(f"{p}/c"))
    case("P killed -> grandchild P/jobctl/slot made after", p, _mk(_mk(f"{p}/jobctl") + "/s"))
    case("P killed -> new sibling of P", p, _mk(f"{base}/s2"))
    case("P killed -> P itself", p, p)
    p = _mk(f"{base}/p3")
    c = _mk(f"{p}/c")
    _kill(p)
    case("P killed -> child that existed at the kill", p, c)
    p = _mk(f"{base}/p4")
    _kill(p)
    c = _mk(f"{p}/c")
    _kill(p)
    case("P killed, child made, P killed again -> that child", p, c)
    p = _mk(f"{base}/p5")
    j = _mk(f"{p}/jobctl")
    _kill(j)
    case("P fresh, P/jobctl killed -> slot made under it after", p, _mk(f"{j}/s"))
    case("P fresh, P/jobctl killed -> P/jobctl itself", p, j)
    g = _mk(f"{base}/g6")
    p = _mk(f"{g}/p")
    _kill(g)
    case("P's parent killed with P in it -> new child of P", p, _mk(f"{p}/c"))
    p = _mk(f"{base}/p7")
    held = subprocess.Popen(["sleep", "30"])
    Path(p, "cgroup.procs").write_text(str(held.pid))
    _kill(p)
    held.wait()
    case("P killed with a process in it -> new child of P", p, _mk(f"{p}/c"))
    return out


def main() -> None:
    library = launcher.library(launcher.default())
    root = cgroup.mount_point()
    native = None if library is None else spawnnative.Native(library)
    if native is None or native.into is None or root is None:
        raise SystemExit("needs the launcher's library with clone3 and cgroup v2")
    base = _mk(f"{root}/cgexp-{os.getpid()}")
    try:
        for name, outcome in cases(native, base):
            print(f"{name:55s} {outcome}")
    finally:
        for folder, _, _ in os.walk(base, topdown=False):  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
    print(f"kernel {os.uname().release}; -{signal.SIGKILL.value} or 'born killed': killed")


if __name__ == "__main__":
    main()
