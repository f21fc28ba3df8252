"""The start-up launcher (engine/launch.c): built once with the machine's C compiler.

Why: a command of another user started through the spawn helper took three ``exec``s
(util-linux ``setpriv`` to drop to the owner, the ``/bin/sh`` trampoline to enter the
directory as the owner, then the command), and ``setpriv`` alone costs more than the
command's own start (it loads a locale on every run). The launcher does what both do in
one small static ``exec`` (issue 17; docs/benchmarks.md has the figures).

It is built from the package's own ``launch.c`` next to it, into the package directory
(``_launch-<hash of the source>``), the first time a daemon that may write there needs
it: where the package was installed by its user, the binary is trusted exactly as the
Python files beside it are. It is used only when it and its directory belong to this
process's user and nobody else may write them. No compiler, a failed build or a
read-only install: None, and the helper path keeps the trampoline (and ``setpriv``).

The same source built as a shared library (``_launch-<hash>.so``, :func:`library`) is the
spawn helper's own start path: it runs the launcher's work in a ``vfork`` child of the
helper, so a command that would go through the launcher costs no ``exec`` of it (issue
17, branch spawnc). It is trusted and built under the same rules; the helper loads it
only after one start through it worked (engine/spawnsys.py, ``Native``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

_log = logging.getLogger("jobctl.executor")
SOURCE = Path(__file__).with_name("launch.c")
FLAGS = ["-O2", "-s", "-Wall"]
#: Static first (no dynamic loader: a third less CPU per start here), else dynamic.
LINKS: tuple[list[str], ...] = (["-static"], [])
#: The spawn helper's library: the launcher's code behind ``jobctl_spawn``.
LIBRARY: tuple[list[str], ...] = (["-shared", "-fPIC", "-DJOBCTL_LIBRARY"],)
#: Seconds a build may take before it is given up (the daemon waits at start).
BUILD_LIMIT = 60.0


def binary_path(source: Path = SOURCE) -> Path:
    """Where the launcher of this source is (its name changes with the source)."""
    digest = hashlib.sha256(source.read_bytes() + " ".join(FLAGS).encode()).hexdigest()
    return source.with_name(f"_launch-{digest[:16]}")


def library_path(source: Path = SOURCE) -> Path:
    """Where the spawn helper's library of this source is (beside its launcher)."""
    launcher = binary_path(source)
    return launcher.with_name(launcher.name + ".so")


def trusted(path: Path) -> bool:
    """Whether ``path`` and its directory are root's or this user's, and writable by
    nobody else."""
    owners = {0, os.geteuid()}
    try:
        for st in (os.stat(path.parent), os.lstat(path)):
            if st.st_uid not in owners or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
        return stat.S_ISREG(os.lstat(path).st_mode) and os.access(path, os.X_OK)
    except OSError:
        return False


def default() -> str | None:
    """The launcher a daemon's spawn helper path uses: built if need be by a root daemon
    (the one it matters to: another user's commands); ``JOBCTL_SPAWN_LAUNCHER=off``
    (benchmarks, tests of the trampoline) or none: None."""
    if os.environ.get("JOBCTL_SPAWN_LAUNCHER") == "off":
        return None
    if os.geteuid() != 0:
        path = binary_path()
        found = str(path) if trusted(path) else None
    else:
        found = find_or_build()
    return found if found is not None and works(found) else None


def works(path: str) -> bool:
    """Whether the launcher runs here (a ``noexec`` mount, a foreign binary): one start
    of ``/bin/true`` through it, once per daemon."""
    try:
        done = subprocess.run([*argv(path, None, "/", None, None, False), "/bin/true"],
                              capture_output=True, timeout=BUILD_LIMIT, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        _log.info("event=launcher_unusable error=%s", exc)
        return False
    return done.returncode == 0


def library(launcher: str | None) -> str | None:
    """The spawn helper's library for ``launcher`` (the one :func:`default` gave), built
    if need be by a root daemon; None without a launcher or when it cannot be had. The
    helper tests it before use (one start through it)."""
    if launcher is None or os.environ.get("JOBCTL_SPAWN_LIBRARY") == "off":
        return None
    path = Path(launcher).with_name(Path(launcher).name + ".so")
    if path != library_path():
        return None
    if os.geteuid() != 0:
        return str(path) if trusted(path) else None
    return find_or_build(SOURCE, path, LIBRARY)


def find_or_build(
    source: Path = SOURCE, path: Path | None = None, variants: tuple[list[str], ...] = LINKS
) -> str | None:
    """The launcher's path (or, with ``path`` and ``variants``, the library's), built now
    if need be; None when there is none to use."""
    try:
        path = path or binary_path(source)
    except OSError:
        return None
    if trusted(path):
        return str(path)
    if path.exists() or not trusted_dir(path.parent):
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    return str(path) if build(cc, source, path, variants) and trusted(path) else None


def trusted_dir(folder: Path) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return False
    mine = st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return mine and os.access(folder, os.W_OK)


def build(cc: str, source: Path, path: Path, variants: tuple[list[str], ...] = LINKS) -> bool:
    """Compile into a private temporary name, then rename (daemons may race: the last
    rename wins, every one complete); the first of ``variants`` that builds."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        for link in variants:
            cmd = [cc, *FLAGS, *link, "-o", str(tmp), str(source)]
            done = subprocess.run(cmd, capture_output=True, timeout=BUILD_LIMIT, check=False)
            if done.returncode == 0:
                break
        else:
            _log.info("event=launcher_unbuilt error=%s", done.stderr.decode()[-300:].strip())
            return False
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        return True
    except (OSError, subprocess.SubprocessError) as exc:
        _log.info("event=launcher_unbuilt error=%s", exc)
        return False
    finally:
        tmp.unlink(missing_ok=True)


def argv(
    launcher: str,
    creds: tuple[int, int, list[int]] | None,
    cwd: str,
    nofile: int | None,
    blocks: int | None,
    gate: bool,
) -> list[str]:
    """The argv prefix that runs a command through the launcher (see launch.c)."""
    ids = ["-", "-", "-"]
    if creds is not None:
        ids = [str(creds[0]), str(creds[1]), ",".join(map(str, creds[2]))]
    limit = "" if nofile is None else str(nofile)
    fsize = "" if blocks is None else str(blocks)
    return [launcher, *ids, cwd, limit, fsize, "gate" if gate else "", "--"]
