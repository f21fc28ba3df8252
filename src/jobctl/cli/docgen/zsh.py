"""A zsh completion function (``#compdef jobctl``) built on _arguments."""

from __future__ import annotations

import re

from jobctl.cli.docgen.model import CommandDoc, ParamDoc
from jobctl.cli.docgen.shell import ValueCompletion, script_head


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_desc(text: str) -> str:
    """Text for inside ``[...]`` of an _arguments spec."""
    first = " ".join(text.split())
    return re.sub(r"([\\\[\]:])", r"\\\1", first)


def _zsh_message(text: str) -> str:
    return re.sub(r"([\\:])", r"\\\1", text) or " "


def _zsh_func(cmd: CommandDoc) -> str:
    return "_jobctl" + "".join("_" + re.sub(r"\W", "_", p) for p in cmd.path)


_VALUES = ValueCompletion(
    choice=lambda choices: (
        "(" + " ".join(re.sub(r"([\\\s():'\"])", r"\\\1", c) for c in choices) + ")"
    ),
    file="_files",
    dir="_files -/",
    job_id="_jobctl_job_ids",
    none=" ",
)


def _zsh_option_specs(param: ParamDoc) -> list[str]:
    names = param.all_opts
    if param.is_help or param.is_eager:
        exclude = "(- *)"
    elif param.multiple:
        exclude = "*"
    elif len(names) > 1:
        exclude = "(" + " ".join(names) + ")"
    else:
        exclude = ""
    desc = _zsh_desc(param.help)
    specs = []
    for opt in names:
        spec = exclude + opt
        if param.takes_value and opt in param.opts:
            spec += "=" if opt.startswith("--") else "+"
            spec += f"[{desc}]"
            message = _zsh_message(param.metavar or "value")
            spec += "".join(f":{message}:{_VALUES.of(param)}" for _ in range(param.nvalues))
        else:
            spec += f"[{desc}]"
        specs.append(spec)
    return specs


def _zsh_argument_specs(cmd: CommandDoc) -> list[str]:
    specs = []
    for arg in cmd.arguments:
        message = _zsh_message(arg.metavar or arg.name)
        if arg.nvalues < 0:
            specs.append(f"*:{message}:{_VALUES.of(arg)}")
        else:
            lead = ":" if arg.required else "::"
            specs += [f"{lead}{message}:{_VALUES.of(arg)}"] * arg.nvalues
    return specs


def _zsh_command(cmd: CommandDoc) -> list[str]:
    func = _zsh_func(cmd)
    flags = "-s -S" + ("" if cmd.interspersed else " -A '-*'")
    specs = [s for p in cmd.options for s in _zsh_option_specs(p)]
    lines = [f"{func}() {{"]
    if cmd.is_group:
        lines += ["    local curcontext=$curcontext state line ret=1", "    local -a commands=("]
        lines += [
            f"        {_zsh_quote(_zsh_message(s.path[-1]) + ':' + s.short_help)}"
            for s in cmd.subcommands
        ]
        lines += ["    )", f"    _arguments -C {flags} \\"]
        lines += [f"        {_zsh_quote(s)} \\" for s in specs]
        lines += [
            "        ': :->command' \\",
            "        '*:: :->args' && ret=0",
            "    case $state in",
            "        (command)",
            f"            _describe -t commands {_zsh_quote(cmd.name + ' command')} "
            "commands && ret=0 ;;",
            "        (args)",
            f"            curcontext=${{curcontext%:*:*}}:{cmd.name.replace(' ', '-')}-$words[1]:",
            "            case $words[1] in",
        ]
        lines += [
            f"                ({_zsh_quote(s.path[-1])}) {_zsh_func(s)} && ret=0 ;;"
            for s in cmd.subcommands
        ]
        lines += ["            esac ;;", "    esac", "    return ret", "}"]
        return lines
    all_specs = specs + _zsh_argument_specs(cmd)
    if not all_specs:
        return [*lines, "    _message 'no arguments'", "}"]
    lines.append(f"    _arguments {flags} \\")
    lines += [f"        {_zsh_quote(s)} \\" for s in all_specs[:-1]]
    lines += [f"        {_zsh_quote(all_specs[-1])}", "}"]
    return lines


_ZSH_HEAD = r"""#compdef jobctl
# zsh completion for jobctl
# @GENERATED@
#
# Install: put this file, named _jobctl, in a directory of $fpath before compinit runs,
# or `source` it after compinit. Job ids come from a running daemon
# (`jobctl list --json`); JOBCTL_COMPLETE_IDS=0 turns that off.

_jobctl_job_ids() {
    local out line
    local -a ids
    if [[ ${JOBCTL_COMPLETE_IDS-1} != 0 ]]; then
        if (( $+commands[timeout] )); then
            out=$(timeout 2 jobctl list --json --limit 50 2>/dev/null </dev/null)
        else
            out=$(jobctl list --json --limit 50 2>/dev/null </dev/null)
        fi
        # JSON indented by two: a job's own "id" is the only key four spaces in.
        for line in ${(f)out}; do
            [[ $line =~ '^    "id": ([0-9]+),?$' ]] && ids+=($match[1])
        done
    fi
    _wanted job-ids expl 'job id' compadd -a ids
}
"""

_ZSH_TAIL = """
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _jobctl "$@"
else
    compdef _jobctl jobctl
fi
"""


def render_zsh(root: CommandDoc) -> str:
    """A zsh completion function (``#compdef jobctl``) built on _arguments."""
    parts = [script_head(_ZSH_HEAD)]
    parts += ["\n".join(_zsh_command(cmd)) for cmd in root.walk()]
    return "\n\n".join(parts) + "\n" + _ZSH_TAIL
