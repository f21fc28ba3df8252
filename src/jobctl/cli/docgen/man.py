"""The man page (section 1) in roff, for man-db/groff and mandoc alike."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Sequence

from jobctl.cli.docgen.model import CLI_REFERENCE, GENERATED, PROG, CommandDoc, ParamDoc


def _usage_words(cmd: CommandDoc) -> list[str]:
    """The synopsis after the command name: ``[OPTIONS]``, arguments, ``COMMAND``."""
    words = []
    if any(not p.is_help for p in cmd.options):
        words.append("[OPTIONS]")
    for arg in cmd.arguments:
        name = arg.metavar or arg.name.upper()
        word = name if arg.required else f"[{name}]"
        words.append(f"{word}..." if arg.nvalues < 0 else word)
    if cmd.is_group:
        words.append("COMMAND [ARGS]...")
    return words


def _roff_text(text: str) -> str:
    """Escape text for a roff line (not a macro argument)."""
    out = text.replace("\\", "\\e")
    # Options (every hyphen of a word that starts with one) and minus signs are \-
    # (searchable, and ASCII in UTF-8 output); hyphens inside words stay hyphens.
    out = re.sub(r"(?<![\w-])-[-\w]*", lambda m: m.group().replace("-", "\\-"), out)
    out = "".join(ch if ord(ch) < 128 else f"\\[u{ord(ch):04X}]" for ch in out)
    lines = [("\\&" + line if line.startswith((".", "'")) else line) for line in out.split("\n")]
    return "\n".join(lines)


def _roff_arg(text: str) -> str:
    """A quoted macro argument."""
    return '"' + _roff_text(text).replace('"', "\\(dq") + '"'


def _bold(text: str) -> str:
    return f"\\fB{_roff_text(text)}\\fR"


def _italic(text: str) -> str:
    return f"\\fI{_roff_text(text)}\\fR"


def _sentence(text: str) -> str:
    """Help text on one line, ending as a sentence so that notes can follow it."""
    text = " ".join(text.split())
    return text if not text or text.endswith((".", "!", "?", ":")) else text + "."


def _roff_wrap(lines: list[str], width: int = 78) -> list[str]:
    """Wrap filled text lines at spaces (roff joins them again); macros and .nf stay."""
    out: list[str] = []
    fill = True
    for line in lines:
        if line.startswith("."):
            fill = {".nf": False, ".fi": True}.get(line.split(" ")[0], fill)
            out.append(line)
            continue
        if not fill or len(line) <= width:
            out.append(line)
            continue
        for piece in textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False):
            out.append("\\&" + piece if piece.startswith((".", "'")) else piece)
    return out


def _roff_paragraphs(text: str) -> list[str]:
    """Help text as roff: blank lines split paragraphs; a ``\\b`` paragraph is kept as is."""
    lines: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        if not para.strip():
            continue
        if lines:
            lines.append(".PP")
        if para.startswith("\b"):
            lines += [".nf", _roff_text(para.lstrip("\b").strip("\n")), ".fi"]
        else:
            lines.append(_roff_text(" ".join(para.split())))
    return lines


def _roff_usage(cmd: CommandDoc) -> str:
    words = []
    for word in _usage_words(cmd):
        if word == "COMMAND [ARGS]...":
            words.append(f"{_italic('COMMAND')} [{_italic('ARGS')}]...")
            continue
        m = re.fullmatch(r"(\[?)([^\[\].]+)(\]?)(\.\.\.)?", word)
        if m:
            words.append(f"{m[1]}{_italic(m[2])}{m[3]}{m[4] or ''}")
        else:
            words.append(_roff_text(word))
    return " ".join([_bold(cmd.name), *words])


def _param_notes(param: ParamDoc) -> list[str]:
    notes = []
    if param.default is not None:
        notes.append(f"Default: {_bold(param.default)}.")
    if param.range:
        notes.append(f"Range: {_roff_text(param.range)}.")
    if param.choices and param.kind == "argument":
        notes.append("One of " + ", ".join(_bold(c) for c in param.choices) + ".")
    if param.multiple and param.kind == "option":
        notes.append("May be given more than once.")
    if param.required and param.kind == "option":
        notes.append("Required.")
    if param.envvars:
        names = ", ".join(_bold(e) for e in param.envvars)
        notes.append(f"Environment: {names}.")
    return notes


def _roff_param(param: ParamDoc) -> list[str]:
    if param.kind == "argument":
        tag = _italic(param.metavar or param.name.upper())
        if param.nvalues < 0:
            tag += "..."
    else:
        tag = ", ".join(_bold(o) for o in param.all_opts)
        if param.metavar:
            tag += " " + _italic(param.metavar)
    body = _roff_text(_sentence(param.help)) if param.help else ""
    notes = " ".join(_param_notes(param))
    return [".TP", tag, " ".join(x for x in (body, notes) if x) or "(no description)"]


def _roff_command(cmd: CommandDoc) -> list[str]:
    lines = [f".SS {_roff_arg(cmd.name)}", _roff_usage(cmd), ".PP"]
    lines += _roff_paragraphs(cmd.help) if cmd.help else ["(no description)"]
    if cmd.deprecated:
        lines += [".PP", "Deprecated."]
    for param in cmd.params:
        if not param.is_help:
            lines += _roff_param(param)
    if cmd.is_group:
        lines += [".PP", "Commands: " + ", ".join(_bold(s.name) for s in cmd.subcommands) + "."]
    return lines


def _exit_status_lines(
    exit_codes: Sequence[tuple[type[BaseException], int]],
    usage: int,
    root_error: type[BaseException],
) -> list[str]:
    """EXIT STATUS from the CLI's table of error classes to exit codes."""
    from jobctl import errors

    described = _error_descriptions(errors.__doc__ or "")
    by_code: dict[int, list[type[BaseException]]] = {}
    for cls, code in exit_codes:
        by_code.setdefault(code, []).append(cls)
    entries: dict[int, list[str]] = {0: ["Success."]}
    entries.setdefault(usage, []).append(
        "Usage error: an unknown command or option, or a missing or malformed argument "
        "or option value."
    )
    for code, classes in by_code.items():
        for cls in classes:
            if cls is root_error:
                text = f"Any other jobctl error ({_bold(cls.__name__)})."
            else:
                what = _own_doc(cls) or described.get(cls.__name__) or "see the message"
                text = f"{_bold(cls.__name__)}: {_roff_text(what.rstrip('.'))}."
            entries.setdefault(code, []).append(text)
    entries.setdefault(1, []).append(
        "An internal error (a bug in jobctl: please report it); JOBCTL_DEBUG=1 prints its "
        "traceback."
    )
    entries.setdefault(130, []).append("Interrupted (SIGINT) or aborted.")
    lines = []
    for code in sorted(entries):
        lines += [".TP", _bold(str(code)), " ".join(entries[code])]
    return lines


def _own_doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ") if doc else ""


def _error_descriptions(doc: str) -> dict[str, str]:
    """``Name   description`` lines of the class tree in jobctl.errors' docstring."""
    out = {}
    for line in doc.splitlines():
        m = re.match(r"^[\s\u2500-\u257f]*([A-Z]\w+)\s{2,}(\S.*)$", line)
        if m:
            out[m[1]] = m[2].strip()
    return out


_ENV_DESCRIPTIONS = {
    "JOBCTL_SOCKET": "The daemon's Unix socket, for the daemon and for every command "
    "that talks to it; see FILES for the default.",
    "JOBCTL_DB": "The SQLite database of the daemon; see FILES for the default.",
    "JOBCTL_CONFIG": "The configuration file; see FILES for the default.",
}

_EXTRA_ENV = [
    ("XDG_STATE_HOME", "Base of the per-user database path (default ~/.local/state)."),
    ("XDG_RUNTIME_DIR", "Base of the per-user socket path (default /run/user/UID)."),
    ("XDG_CONFIG_HOME", "Base of the per-user configuration file (default ~/.config)."),
    (
        "JOBCTL_*",
        "Every configuration key has a variable: JOBCTL_ and the key in capitals, dots as "
        "underscores (JOBCTL_CONCURRENCY, JOBCTL_RETENTION_DEAD); flags win over them, they "
        "win over the file. jobctl config show says where each value came from.",
    ),
    (
        "JOBCTL_DEBUG",
        "When set, an internal error (a bug) prints its Python traceback after the one-line error.",
    ),
    (
        "TZ",
        "Time zone of local times given on the command line (as to jobctl add --at "
        "without --tz); the system's zone when unset.",
    ),
]


def _environment_lines(root: CommandDoc) -> list[str]:
    uses: dict[str, dict[str, list[str]]] = {}  # env -> option -> commands
    for cmd in root.walk():
        for param in cmd.params:
            for env in param.envvars:
                label = param.opts[0] if param.opts else param.metavar or param.name
                uses.setdefault(env, {}).setdefault(label, []).append(cmd.name)
    lines = []
    for env in sorted(uses):
        targets = []
        for opt, cmds in uses[env].items():
            where = f" of {_bold(cmds[0])}" if len(cmds) == 1 else ""
            targets.append(_bold(opt) + where)
        text = _roff_text(_ENV_DESCRIPTIONS.get(env, ""))
        lines += [
            ".TP",
            _bold(env),
            " ".join(x for x in (text, f"Default for {' and '.join(targets)}.") if x),
        ]
    for env, text in _EXTRA_ENV:
        lines += [".TP", _bold(env), _roff_text(text)]
    return lines


_FILES = [
    ("/etc/jobctl/jobctl.toml", "The configuration file when the daemon runs as root."),
    (
        "$XDG_CONFIG_HOME/jobctl/jobctl.toml",
        "The configuration file for any other user (~/.config/jobctl/jobctl.toml).",
    ),
    ("/var/lib/jobctl/jobctl.db", "The job database when the daemon runs as root."),
    (
        "$XDG_STATE_HOME/jobctl/jobctl.db",
        "The job database for any other user (~/.local/state/jobctl/jobctl.db when "
        "XDG_STATE_HOME is unset).",
    ),
    (
        "/run/jobctl/jobctl.sock",
        "The daemon's socket when it runs as root. Other users reach that daemon with "
        "JOBCTL_SOCKET=/run/jobctl/jobctl.sock when its --socket-group lets them.",
    ),
    (
        "$XDG_RUNTIME_DIR/jobctl/jobctl.sock",
        "The socket for any other user (/run/user/UID/jobctl/jobctl.sock when "
        "XDG_RUNTIME_DIR is unset, or /tmp/jobctl-UID/jobctl.sock where /run/user/UID "
        "does not exist).",
    ),
]


def render_man(root: CommandDoc, version: str | None = None) -> str:
    """The man page (section 1) in roff, for man-db/groff and mandoc alike."""
    from jobctl import __version__

    lines = _intro_lines(root, version or __version__)
    lines += [".SH OPTIONS"]
    for param in root.params:
        lines += _roff_param(param)
    lines += [".SH COMMANDS"]
    for cmd in root.walk():
        if cmd.path:
            lines += _roff_command(cmd)
    lines += [".SH ENVIRONMENT", *_environment_lines(root)]
    lines += [".SH FILES"]
    for path, text in _FILES:
        lines += [".TP", _italic(path), _roff_text(text)]
    lines += _closing_lines()
    return "\n".join(_roff_wrap(lines)) + "\n"


def _intro_lines(root: CommandDoc, version: str) -> list[str]:
    """The title and NAME, SYNOPSIS and DESCRIPTION."""
    summary = re.sub(r"^\s*" + PROG + r"\s*[:\-]\s*", "", root.short_help).rstrip(".")
    lines = [
        f'.\\" {GENERATED}',
        f'.TH {PROG.upper()} 1 "" {_roff_arg(f"{PROG} {version}")} "User Commands"',
        ".nh",
        ".ad l",
        ".SH NAME",
        f"{PROG} \\- {_roff_text(summary)}",
        ".SH SYNOPSIS",
        _roff_usage(root),
    ]
    for cmd in root.walk():
        if cmd.path and not cmd.is_group:
            lines += [".br", _roff_usage(cmd)]
    lines += [
        ".SH DESCRIPTION",
        *_roff_paragraphs(root.help),
        ".PP",
        f"Every command prints its own help with {_bold('--help')}; "
        f"{_bold(f'{PROG} COMMAND --help')} shows the options of a command.",
    ]
    return lines


def _closing_lines() -> list[str]:
    """EXIT STATUS and SEE ALSO."""
    from jobctl.cli.errors import EXIT_CODES, USAGE
    from jobctl.errors import JobctlError

    return [
        ".SH EXIT STATUS",
        f"{_bold(PROG)} prints errors as one line on standard error, "
        f"{_bold(f'{PROG}: error:')} followed by the message, and exits with:",
        *_exit_status_lines(EXIT_CODES, USAGE, JobctlError),
        ".SH SEE ALSO",
        ".BR crontab (5),",
        ".BR at (1),",
        ".BR systemd.timer (5)",
        ".PP",
        f"The command reference {_italic(CLI_REFERENCE)} in the jobctl sources, "
        f"generated with the shell completions in {_italic('completions/')}.",
    ]
