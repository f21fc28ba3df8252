"""Who may use jobctl at all, who is an admin, and whether a job's owner may still run.

Cron's rules (``cron.allow`` / ``cron.deny``), with jobctl's files (settings
``allow_file`` and ``deny_file``, default ``/etc/jobctl/jobctl.allow`` and
``/etc/jobctl/jobctl.deny``):

- if the allow file exists, only the users it lists may use jobctl;
- else if the deny file exists, the users it lists may not;
- if neither exists, everyone who can reach the socket may;
- root (and the daemon's own user) always may;
- a file that exists but cannot be read refuses everyone else (fail closed).

A file lists one user name per line; blank lines and ``#`` comments are ignored.

Admins are root, the daemon's own user, and the members of ``admin_group`` (the group's
member list, or the user's primary group).

The same rules are checked again when a job is about to run (:meth:`Access.run_refusal`),
together with whether the owner still exists and is not locked: see
:func:`locked_reason`. Every file is read again only when its (mtime, size, inode)
changed, so a check costs a few ``stat`` calls.
"""

from __future__ import annotations

import grp
import os
import pwd
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_ALLOW = Path("/etc/jobctl/jobctl.allow")
DEFAULT_DENY = Path("/etc/jobctl/jobctl.deny")
PASSWD = Path("/etc/passwd")
GROUP = Path("/etc/group")
SHADOW = Path("/etc/shadow")

#: A file's identity for the cache; None: it does not exist. Raises OSError otherwise.
Stamp = tuple[int, int, int] | None


def stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class _Memo(Generic[T]):
    """A value computed from files, computed again only when one of them changed."""

    def __init__(self, paths: tuple[Path, ...], compute: Callable[[], T]) -> None:
        self._paths = paths
        self._compute = compute
        self._stamps: tuple[Stamp, ...] | None = None
        self._value: T | None = None
        self._lock = threading.Lock()  # the executor's check runs on the loop, reads on threads

    def get(self) -> T:
        stamps = tuple(stamp(p) for p in self._paths)
        with self._lock:
            if stamps != self._stamps or self._value is None:
                self._value = self._compute()
                self._stamps = stamps
            return self._value


@dataclass(frozen=True)
class _Listing:
    """An allow or deny file: absent, unreadable (fail closed) or its set of names."""

    exists: bool
    names: frozenset[str] = frozenset()
    error: str | None = None


def _read_listing(path: Path) -> _Listing:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return _Listing(False)
    except OSError as exc:
        return _Listing(True, error=f"{path} cannot be read ({exc.strerror or exc})")
    names = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return _Listing(True, frozenset(n for n in names if n))


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


@dataclass
class Access:
    """The allow/deny files and the admin group, checked with cached reads."""

    allow_file: Path = DEFAULT_ALLOW
    deny_file: Path = DEFAULT_DENY
    admin_group: str | None = None
    daemon_euid: int = field(default_factory=os.geteuid)
    shadow_file: Path = SHADOW

    def __post_init__(self) -> None:
        self._allow = _Memo((self.allow_file,), lambda: _read_listing(self.allow_file))
        self._deny = _Memo((self.deny_file,), lambda: _read_listing(self.deny_file))
        self._names = _Memo((PASSWD,), dict[int, str | None])
        self._admins = _Memo((GROUP, PASSWD), dict[int, bool])
        self._shadow = _Memo((self.shadow_file,), lambda: _read_shadow(self.shadow_file))

    def privileged(self, uid: int) -> bool:
        """Root and the daemon's own user: always allowed, always admins."""
        return uid in (0, self.daemon_euid)

    def _name(self, uid: int) -> str | None:
        names = self._names.get()
        if uid not in names:
            names[uid] = user_name(uid)
        return names[uid]

    def refusal(self, uid: int) -> str | None:
        """Why ``uid`` may not use jobctl (allow/deny files), or None if it may."""
        if self.privileged(uid):
            return None
        allow = self._allow.get()
        if allow.exists:
            if allow.error:
                return f"access is refused to everyone but root: {allow.error}"
            if self._name(uid) in allow.names:
                return None
            return f"{self._who(uid)} is not listed in {self.allow_file}"
        deny = self._deny.get()
        if deny.error:
            return f"access is refused to everyone but root: {deny.error}"
        if deny.exists and self._name(uid) in deny.names:
            return f"{self._who(uid)} is listed in {self.deny_file}"
        return None

    def _who(self, uid: int) -> str:
        name = self._name(uid)
        return f"user {name} (uid {uid})" if name else f"uid {uid}"

    def is_admin(self, uid: int) -> bool:
        if self.privileged(uid):
            return True
        if self.admin_group is None:
            return False
        admins = self._admins.get()
        if uid not in admins:
            admins[uid] = _member(uid, self.admin_group)
        return admins[uid]

    def run_refusal(self, uid: int, now: datetime) -> str | None:
        """Why a job of ``uid`` must not start now: its owner is gone, locked, or refused
        by the allow/deny files since it was enqueued. None: it may run."""
        if self.privileged(uid):
            return None
        name = self._name(uid)
        if name is None:
            return f"owner uid {uid} no longer exists"
        locked = locked_reason(self._shadow.get().get(name), now)
        if locked:
            return f"owner {name} (uid {uid}) {locked}"
        return self.refusal(uid)


def _member(uid: int, group: str) -> bool:
    try:
        g = grp.getgrnam(group)
        pw = pwd.getpwuid(uid)
    except KeyError:
        return False
    return pw.pw_gid == g.gr_gid or pw.pw_name in g.gr_mem


#: A shadow entry's password field and account expiry (days since the epoch, or None).
ShadowEntry = tuple[str, int | None]


def _read_shadow(path: Path) -> dict[str, ShadowEntry]:
    """Name → (password field, expiry day); empty when the file is absent or unreadable
    (a daemon that is not root cannot read it: then only existence and the files count)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, ShadowEntry] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) < 8:
            continue
        expire = parts[7].strip()
        out[parts[0]] = (parts[1], int(expire) if expire.isdigit() else None)
    return out


def locked_reason(entry: ShadowEntry | None, now: datetime) -> str | None:
    """Whether a shadow entry says the account is locked or expired.

    Locked means a password that was locked (``!`` in front of a real hash, as
    ``passwd -l`` / ``usermod -L`` leave it) or an account whose expiry date has passed
    (``usermod -e``, ``chage -E``), which is what PAM's account check refuses. A field of
    only ``!`` or ``*`` characters is an account that never had a password: that is how
    ``useradd`` creates users and how service accounts look, and such accounts run jobs.
    """
    if entry is None:
        return None
    password, expire = entry
    if password.startswith("!") and password.strip("!*"):
        return "is locked (its password is locked)"
    if expire is not None and expire * 86400 <= now.timestamp():
        return "is locked (the account expired)"
    return None
