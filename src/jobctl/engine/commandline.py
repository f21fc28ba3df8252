"""What an attempt runs: its command line, environment and credentials.

Split from engine/process.py (which starts, watches and stops the process) because the
spawn helper's client (engine/spawnclient.py) builds the same command line for another
process to start: both take it from here, so a job starts the same way on either path.

A root daemon runs each command as its owner, and the directory is entered after the
privilege drop, as the owner, by a tiny ``/bin/sh`` trampoline (:data:`TRAMPOLINE`) or
by the spawn helper's launcher (engine/launcher.py); :func:`cwd_failure` and
:func:`gate_shut` read what the trampoline leaves when it stopped before the command.
engine/process.py re-exports every public name here (callers know them as process.*).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from jobctl.domain import jobenv
from jobctl.domain.models import Claim
from jobctl.domain.schedule import nominal_text
from jobctl.engine.launcher import argv as launcher_argv
from jobctl.engine.turnmemo import TurnMemo

__all__ = [
    "CWD_FAILED",
    "GATE_SHUT",
    "TRAMPOLINE",
    "CommandLine",
    "attempt_markers",
    "command_env",
    "command_line",
    "cwd_failure",
    "gate_shut",
    "trampoline",
]

#: Run by ``/bin/sh -c`` *after* the privilege drop: ``$6`` non-empty: first wait at the
#: gate (stdin, a pipe) for the line the daemon or the spawn helper writes once the shell
#: is in its cgroup (a gate closed without it: whoever held it died, so the command does
#: not run, see :data:`GATE_SHUT`), and take ``/dev/null`` as stdin; ``$1`` the open-file
#: soft limit to
#: give back (empty: leave it), ``$2`` the working directory, ``$3``/``$4`` ``=VALUE`` of
#: the job's own ``OLDPWD``/``PWD`` or empty (the shell sets both on ``cd``; they are put
#: back as the job gave them, so the command's environment is exactly the job's), then
#: ``$5`` the output cap in 512-byte blocks or empty (``RLIMIT_FSIZE``, with SIGXFSZ
#: ignored so a write past it fails with EFBIG instead of killing the command: the
#: ``log_bytes`` quota), then the command. A directory the owner cannot enter ends it with
#: :data:`CWD_FAILED`.
TRAMPOLINE = (
    '[ -z "$6" ] || { read -r _ || { echo "jobctl: the gate was never opened" >&2; '
    "exit 125; }; exec </dev/null; }; "
    '[ -z "$1" ] || ulimit -S -n "$1" 2>/dev/null; '
    'cd -P -- "$2" 2>/dev/null || { echo "jobctl: cannot enter the working directory" >&2; '
    "exit 125; }; "
    "case $3 in =*) OLDPWD=${3#=} ;; *) unset OLDPWD ;; esac; "
    "case $4 in =*) PWD=${4#=} ;; *) unset PWD ;; esac; "
    '[ -z "$5" ] || { ulimit -f "$5" 2>/dev/null; trap "" XFSZ; }; '
    'shift 6; exec "$@"'
)
#: What the trampoline leaves in the log (and its exit status) when ``cd`` failed.
CWD_FAILED = (125, b"jobctl: cannot enter the working directory\n")
#: What it leaves when its gate was closed without the line that lets it go: the helper
#: (or the inline daemon) died before the command was in its cgroup with its limits set;
#: the command never ran, so the attempt is retried for free (:func:`gate_shut`).
GATE_SHUT = (125, b"jobctl: the gate was never opened\n")


def _account(uid: int) -> tuple[str, str, str, int]:
    """The owner's name, home, shell and group; a failed lookup is not remembered (it may
    have failed for want of descriptors), a found one is."""
    found = _ACCOUNTS.get(uid)
    if found is not None:
        return found
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return (str(uid), "/", "/bin/sh", uid)
    found = (pw.pw_name, pw.pw_dir or "/", pw.pw_shell or "/bin/sh", pw.pw_gid)
    _ACCOUNTS[uid] = found
    return found


_ACCOUNTS: dict[int, tuple[str, str, str, int]] = {}


def _grouplist(account: tuple[str, int]) -> tuple[int, ...]:
    return tuple(os.getgrouplist(*account))


#: An owner's groups (name, primary group → groups), asked of the system once per loop
#: turn: the starts of one turn share it (engine/turnmemo.py; ~10 µs a lookup, issue 17).
_GROUPS: TurnMemo[tuple[str, int], tuple[int, ...]] = TurnMemo(_grouplist)


def attempt_markers(job_id: int, lease_owner: str, generation: int | None = None) -> dict[str, str]:
    """The environment entries that mark a process as the attempt's (the job's, of that
    daemon, at that generation when given), wherever it went: see :func:`find_by_env`."""
    markers = {"JOBCTL_JOB_ID": str(job_id), "JOBCTL_LEASE_OWNER": lease_owner}
    if generation is not None:
        markers["JOBCTL_GENERATION"] = str(generation)
    return markers


def command_env(claim: Claim, lease_owner: str) -> dict[str, str]:
    """The small clean environment a command gets (never the daemon's own).

    Documented in docs/guarantees.md; the ``JOBCTL_*`` names let commands make their side
    effects idempotent and let a restarted daemon find a survivor by its environment.
    """
    job = claim.job
    name, home, shell, _ = _account(job.spec.owner_uid)
    env = {
        "PATH": jobenv.default_path(job.spec.owner_uid),
        "HOME": home,
        "USER": name,
        "LOGNAME": name,
        "SHELL": shell,
        "LANG": "C.UTF-8",
    }
    env.update(job.spec.env)  # its pairs as they are: no dict made of them first
    env["JOBCTL_JOB_ID"] = str(job.id)
    env["JOBCTL_JOB_KEY"] = job.key
    env["JOBCTL_ATTEMPT"] = str(claim.attempt)
    env["JOBCTL_GENERATION"] = str(claim.generation)
    env["JOBCTL_QUEUE"] = job.spec.queue
    env["JOBCTL_LEASE_OWNER"] = lease_owner
    if job.spec.schedule_id is not None:
        env["JOBCTL_SCHEDULE_ID"] = job.spec.schedule_id
        if job.spec.scheduled_for is not None:
            env["JOBCTL_SCHEDULED_FOR"] = nominal_text(job.spec.scheduled_for)
    return env


#: How a command is started: argv, environment, the directory to enter before the exec
#: (None: the trampoline enters it, as the owner) and the credentials to drop to (uid,
#: gid, groups; None: the daemon's own).
CommandLine = tuple[list[str], dict[str, str], str | None, tuple[int, int, list[int]] | None]


def command_line(
    claim: Claim,
    lease_owner: str,
    nofile: int | None,
    blocks: int | None,
    gate: bool,
    launcher: str | None = None,
) -> CommandLine:
    """What starting the claim's command takes, the same for Popen and the spawn helper;
    ``launcher`` (the spawn helper's, engine/launcher.py): it drops to the owner and does
    the trampoline's work in one ``exec`` (no credentials left for the starter to drop)."""
    spec = claim.job.spec
    creds = None
    if os.geteuid() == 0 and spec.owner_uid != 0:
        # A root daemon runs each command as the user who submitted it, never as root:
        # the groups (exactly the owner's: gh-94632), then the group, then uid.
        name, _, _, gid = _account(spec.owner_uid)
        creds = (spec.owner_uid, gid, list(_GROUPS.get((name, gid))))
    env = command_env(claim, lease_owner)
    argv = list(spec.command)
    cwd: str | None = spec.cwd
    if not (creds or nofile is not None or blocks is not None or gate):
        return argv, env, cwd, creds
    # Enter the directory after the drop (Popen's cwd= would enter it as root).
    if launcher is not None:
        return (
            [*launcher_argv(launcher, creds, spec.cwd, nofile, blocks, gate), *argv],
            env,
            None,
            None,
        )
    return [*trampoline(spec.cwd, env, nofile, blocks, gate), *argv], env, None, creds


def trampoline(
    cwd: str, env: dict[str, str], nofile: int | None, blocks: int | None = None, gate: bool = False
) -> list[str]:
    """The argv prefix that runs a command through :data:`TRAMPOLINE`."""

    def given(name: str) -> str:
        return "=" + env[name] if name in env else ""

    limit = "" if nofile is None else str(nofile)
    fsize = "" if blocks is None else str(blocks)
    return [
        "/bin/sh", "-c", TRAMPOLINE, "jobctl", limit, cwd, given("OLDPWD"), given("PWD"), fsize,
        "gate" if gate else "",
    ]  # fmt: skip


def gate_shut(code: int, tail: str) -> bool:
    """Whether the trampoline ended at its gate, never let go (:data:`GATE_SHUT`)."""
    return code == GATE_SHUT[0] and tail.encode() == GATE_SHUT[1]


def cwd_failure(code: int, tail: str, claim: Claim) -> tuple[int, str] | None:
    """(exit code, error) if the trampoline could not enter the job's directory: it
    exited 125 and the log holds its one line only (the command never ran)."""
    if code != CWD_FAILED[0] or tail.encode() != CWD_FAILED[1]:
        return None
    cwd, uid = claim.job.spec.cwd, claim.job.spec.owner_uid
    try:
        is_dir = Path(cwd).is_dir()
        why = "permission denied" if is_dir else "not a directory"
    except OSError:
        is_dir, why = False, "cannot be read"
    if not is_dir and not os.path.lexists(cwd):
        return 127, f"cannot start: no such working directory {cwd}"
    who = f"uid {uid} ({_account(uid)[0]})"
    return 126, f"cannot start: {who} cannot enter the working directory {cwd}: {why}"
