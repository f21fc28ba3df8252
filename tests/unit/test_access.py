"""Who may use jobctl (cron's allow/deny rules), who is an admin, who may still run jobs."""

from __future__ import annotations

import grp
import os
import pwd
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobctl.access import Access, locked_reason

NOW = datetime(2027, 3, 14, tzinfo=UTC)
DAY = int(NOW.timestamp() // 86400)


def _user() -> pwd.struct_passwd:
    """A real account that is neither root nor this process's user."""
    for pw in pwd.getpwall():
        if pw.pw_uid not in (0, os.geteuid()):
            return pw
    pytest.skip("no second account on this system")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "allow", tmp_path / "deny"


def test_neither_file_lets_everyone_in(files: tuple[Path, Path]) -> None:
    access = Access(*files)
    assert access.refusal(_user().pw_uid) is None
    assert access.refusal(123_456_789) is None  # even a uid without an account


def test_the_deny_file_refuses_the_users_it_lists(files: tuple[Path, Path]) -> None:
    allow, deny = files
    user = _user()
    access = Access(allow, deny)
    deny.write_text(f"# comment\n  {user.pw_name}  \n")
    assert f"listed in {deny}" in (access.refusal(user.pw_uid) or "")
    deny.write_text("someone-else\n")  # read again when it changes
    assert access.refusal(user.pw_uid) is None


def test_the_allow_file_wins_over_the_deny_file(files: tuple[Path, Path]) -> None:
    allow, deny = files
    user = _user()
    access = Access(allow, deny)
    deny.write_text(f"{user.pw_name}\n")
    allow.write_text(f"{user.pw_name}\n")
    assert access.refusal(user.pw_uid) is None
    allow.write_text("")
    assert f"not listed in {allow}" in (access.refusal(user.pw_uid) or "")
    assert access.refusal(123_456_789) is not None  # no account: cannot be listed


def test_root_and_the_daemons_user_always_may(files: tuple[Path, Path]) -> None:
    allow, deny = files
    allow.write_text("")
    access = Access(allow, deny)
    assert access.refusal(0) is None and access.refusal(os.geteuid()) is None
    assert access.is_admin(0) and access.is_admin(os.geteuid())


@pytest.mark.parametrize("which", [0, 1])
def test_an_unreadable_file_fails_closed(files: tuple[Path, Path], which: int) -> None:
    files[which].mkdir()  # exists, cannot be read (a mode would not stop root)
    reason = Access(*files).refusal(_user().pw_uid)
    assert reason is not None and "cannot be read" in reason and "everyone but root" in reason


def test_admins_are_the_groups_members_and_primary_members(files: tuple[Path, Path]) -> None:
    user = _user()
    primary = grp.getgrgid(user.pw_gid).gr_name
    assert Access(*files, admin_group=primary).is_admin(user.pw_uid)
    assert not Access(*files).is_admin(user.pw_uid)
    others = [g for g in grp.getgrall() if g.gr_gid != user.pw_gid and user.pw_name not in g.gr_mem]
    assert not Access(*files, admin_group=others[0].gr_name).is_admin(user.pw_uid)
    member = [g for g in grp.getgrall() if g.gr_mem and g.gr_gid != 0]
    if member:
        uid = pwd.getpwnam(member[0].gr_mem[0]).pw_uid
        assert Access(*files, admin_group=member[0].gr_name).is_admin(uid)
    assert not Access(*files, admin_group="no-such-group-jct").is_admin(user.pw_uid)


@pytest.mark.parametrize(
    ("password", "expire", "locked"),
    [
        ("$6$salt$hash", None, False),
        ("!", None, False),  # never had a password: how useradd makes users
        ("!!", None, False),
        ("*", None, False),
        ("!*", None, False),
        ("!$6$salt$hash", None, True),  # passwd -l / usermod -L
        ("$6$salt$hash", DAY, True),  # expired today (usermod -e, chage -E)
        ("$6$salt$hash", DAY - 1, True),
        ("$6$salt$hash", DAY + 1, False),
    ],
)
def test_locked_accounts(password: str, expire: int | None, locked: bool) -> None:
    assert (locked_reason((password, expire), NOW) is not None) is locked


def test_run_refusal_sees_removed_locked_and_denied_owners(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    user = _user()
    shadow = tmp_path / "shadow"
    shadow.write_text(f"{user.pw_name}:$6$x$y:19000:0:99999:7:::\n")
    access = Access(*files, shadow_file=shadow)
    assert access.run_refusal(user.pw_uid, NOW) is None
    assert access.run_refusal(0, NOW) is None
    assert "no longer exists" in (access.run_refusal(123_456_789, NOW) or "")
    shadow.write_text(f"{user.pw_name}:!$6$x$y:19000:0:99999:7:::\n")
    assert "is locked" in (access.run_refusal(user.pw_uid, NOW) or "")
    shadow.write_text(f"{user.pw_name}:$6$x$y:19000:0:99999:7::{DAY - 3}:\n")
    assert "expired" in (access.run_refusal(user.pw_uid, NOW) or "")
    shadow.write_text("")
    files[1].write_text(f"{user.pw_name}\n")
    assert "listed in" in (access.run_refusal(user.pw_uid, NOW) or "")
