"""The ``PATH`` a job's command is looked up on, and the submitter's environment for
``jobctl add --env-from-shell``: one definition for the daemon (which builds the
environment, engine/commandline.py), ``jobctl show`` (which prints the resolved ``PATH``) and
``jobctl add`` (which warns when the command is not on it).

Pure: the caller passes the environment and the owner's uid.
"""

from __future__ import annotations

from collections.abc import Mapping

#: A job's ``PATH`` unless its own environment sets one: cron's, not the daemon's.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: Variables of an interactive shell that mean nothing to a job run later (``at`` drops
#: the same kind): the terminal, the display, the session, the shell's own state.
SESSION_ONLY = frozenset(
    {"_", "PWD", "OLDPWD", "SHLVL", "TERM", "COLUMNS", "LINES", "DISPLAY", "XAUTHORITY"}
    | {"WAYLAND_DISPLAY", "SHELLOPTS", "BASHOPTS", "PS1", "PS2", "PS4", "PROMPT_COMMAND"}
    | {"TMUX", "TMUX_PANE", "STY", "WINDOW", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_TTY"}
    | {"SSH_CONNECTION", "SSH_CLIENT", "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_ID"}
    | {"XDG_SESSION_TYPE", "XDG_VTNR", "XDG_SEAT", "MAIL", "OLDPWD", "HISTFILE"}
)


def default_path(owner_uid: int) -> str:
    return ROOT_PATH if owner_uid == 0 else DEFAULT_PATH


def resolved_path(env: Mapping[str, str], owner_uid: int) -> str:
    """The ``PATH`` the command runs with: the job's own, else the default."""
    return env.get("PATH") or default_path(owner_uid)


def from_shell(environ: Mapping[str, str]) -> dict[str, str]:
    """The submitter's environment as a job's ``env``, like ``at``: everything but the
    interactive session's variables, jobctl's own (``JOBCTL_*``, the daemon sets them)
    and exported shell functions."""
    return {
        name: value
        for name, value in environ.items()
        if name not in SESSION_ONLY
        and not name.startswith(("JOBCTL_", "BASH_FUNC_"))
        and "=" not in name
        and "\0" not in name + value
    }
