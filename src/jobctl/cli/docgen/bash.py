"""A bash completion script: commands, options, choices, paths and job ids.

The fixed part (``_BASH_MAIN``) parses the command line; the generated ``case``
tables tell it what the command tree holds.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from jobctl.cli.docgen.model import CommandDoc, ParamDoc
from jobctl.cli.docgen.shell import (
    Arm,
    ValueCompletion,
    interspersed_arms,
    nvalues_keys,
    positional_slots,
    script_head,
    subcommand_arms,
    value_options,
    wrap_keys,
)

_BASH_HEAD = r"""# bash completion for jobctl                                 -*- shell-script -*-
# @GENERATED@
#
# Install: copy to /usr/share/bash-completion/completions/jobctl (or
# ~/.local/share/bash-completion/completions/jobctl), or `source` it from ~/.bashrc.
# Job ids come from a running daemon (`jobctl list --json`); JOBCTL_COMPLETE_IDS=0
# turns that off.

# Job ids of the newest jobs, into _jobctl_r; none when the daemon is not there.
_jobctl_job_ids() {
    local out line re='^    "id": ([0-9]+),?$'
    _jobctl_r=()
    [[ ${JOBCTL_COMPLETE_IDS-1} == 0 ]] && return 0
    if command -v timeout >/dev/null 2>&1; then
        out=$(timeout 2 jobctl list --json --limit 50 2>/dev/null </dev/null)
    else
        out=$(jobctl list --json --limit 50 2>/dev/null </dev/null)
    fi
    # JSON indented by two: a job's own "id" is the only key four spaces in.
    while IFS= read -r line; do
        [[ $line =~ $re ]] && _jobctl_r+=("${BASH_REMATCH[1]}")
    done <<<"$out"
    return 0
}

# COMPREPLY: the arguments that start with $cur.
_jobctl_words() {
    local w
    for w in "$@"; do
        [[ $w == "$cur"* ]] && COMPREPLY+=("$w")
    done
}

# COMPREPLY: file names (or directories, with "dir") that start with $cur.
_jobctl_files() {
    local w flag=-f
    [[ $1 == dir ]] && flag=-d
    compopt -o filenames 2>/dev/null
    while IFS= read -r w; do
        COMPREPLY+=("$w")
    done < <(compgen "$flag" -- "$cur")
}
"""

_BASH_MAIN = r"""
_jobctl() {
    local cur=${COMP_WORDS[COMP_CWORD]} path='' w opt='' i=1 n npos=0 rest=0
    local -a _jobctl_r
    COMPREPLY=()
    while (( i < COMP_CWORD )); do
        w=${COMP_WORDS[i]}
        if (( rest )); then
            npos=$((npos + 1))
        elif [[ $w == -- ]]; then
            rest=1
        elif [[ $w == -?* ]]; then
            if [[ ${COMP_WORDS[i+1]} == = ]]; then  # --opt=value, split at "="
                if (( i + 2 >= COMP_CWORD )); then
                    opt=$w
                    [[ $cur == = ]] && cur=''
                    break
                fi
                i=$((i + 2))
            else
                _jobctl_nvalues "$path $w"
                n=${_jobctl_r[0]}
                if (( n > 0 && i + n >= COMP_CWORD )); then
                    opt=$w
                    break
                fi
                i=$((i + n))
            fi
        else
            _jobctl_subcommands "$path"
            if (( npos == 0 )) && _jobctl_in "$w" "${_jobctl_r[@]}"; then
                path=${path:+$path }$w
            else
                npos=$((npos + 1))
                _jobctl_interspersed "$path" || rest=1
            fi
        fi
        i=$((i + 1))
    done
    if [[ -n $opt ]]; then
        _jobctl_value "$path $opt"
        return 0
    fi
    if (( ! rest )) && [[ $cur == -* ]]; then
        _jobctl_options "$path"
        _jobctl_words "${_jobctl_r[@]}"
        return 0
    fi
    if (( npos == 0 && ! rest )); then
        _jobctl_subcommands "$path"
        if (( ${#_jobctl_r[@]} )); then
            _jobctl_words "${_jobctl_r[@]}"
            return 0
        fi
    fi
    _jobctl_positionals "$path"
    if (( npos < _jobctl_r[0] )); then
        _jobctl_value "$path #$((npos + 1))"
    elif (( _jobctl_r[1] )); then
        _jobctl_value "$path #*"
    fi
    return 0
}

_jobctl_in() {
    local w=$1
    shift
    local x
    for x in "$@"; do
        [[ $x == "$w" ]] && return 0
    done
    return 1
}

complete -F _jobctl jobctl
"""


def _sh(word: str) -> str:
    return shlex.quote(word)


def _array(words: Iterable[str]) -> str:
    """Set the result array ``_jobctl_r`` to the words."""
    return "_jobctl_r=(" + " ".join(_sh(w) for w in words) + ")"


_VALUES = ValueCompletion(
    choice=lambda choices: "_jobctl_words " + " ".join(_sh(c) for c in choices),
    file="_jobctl_files",
    dir="_jobctl_files dir",
    job_id='_jobctl_job_ids; _jobctl_words "${_jobctl_r[@]}"',
    none=None,
)


def _bash_case(name: str, doc: str, arms: list[Arm], default: str) -> str:
    lines = [f"# {doc}", f"{name}() {{", "    case $1 in"]
    for keys, body in arms:
        rows = wrap_keys((_sh(k) for k in keys), sep="|", cont="|\\", indent="")
        lines += [f"        {row}" for row in rows[:-1]]
        lines.append(f"        {rows[-1]}) {body} ;;")
    lines += [f"        *) {default} ;;", "    esac", "}"]
    return "\n".join(lines)


def _positional_arms(cmds: Sequence[CommandDoc]) -> list[Arm]:
    """Command paths by their single positionals and whether more may follow."""
    layouts: dict[str, list[str]] = {}
    for c in cmds:
        fixed, variadic = c.positional_layout()
        if fixed or variadic:
            layouts.setdefault(f"_jobctl_r=({fixed} {int(variadic is not None)})", []).append(c.key)
    return [(keys, body) for body, keys in layouts.items()]


def _value_arms(cmds: Sequence[CommandDoc]) -> list[Arm]:
    """Value slots (``"path --opt"``, ``"path #N"``, ``"path #*"``) that complete the same
    way, under one arm each."""
    slots: dict[str, ParamDoc] = {}
    for cmd in cmds:
        for opt, param in value_options(cmd):
            slots[f"{cmd.key} {opt}"] = param
        for n, arg, rest in positional_slots(cmd):
            slots[f"{cmd.key} {'#*' if rest else f'#{n}'}"] = arg
    grouped: dict[str, list[str]] = {}
    for key, param in slots.items():
        action = _VALUES.of(param)
        if action is not None:
            grouped.setdefault(action, []).append(key)
    return [(keys, action) for action, keys in grouped.items()]


def render_bash(root: CommandDoc) -> str:
    """A bash completion script: commands, options, choices, paths and job ids."""
    cmds = list(root.walk())
    tables = [
        _bash_case(
            "_jobctl_subcommands",
            "_jobctl_r: the subcommands of a command path.",
            subcommand_arms(cmds, _array),
            "_jobctl_r=()",
        ),
        _bash_case(
            "_jobctl_options",
            "_jobctl_r: the options of a command path.",
            [([c.key], _array(o for p in c.options for o in p.all_opts)) for c in cmds],
            "_jobctl_r=()",
        ),
        _bash_case(
            "_jobctl_nvalues",
            '_jobctl_r: how many words follow an option ("path --opt").',
            [(keys, f"_jobctl_r=({n})") for n, keys in nvalues_keys(cmds)],
            "_jobctl_r=(0)",
        ),
        _bash_case(
            "_jobctl_positionals",
            "_jobctl_r: single positional arguments of a command path, and 1 if more may follow.",
            _positional_arms(cmds),
            "_jobctl_r=(0 0)",
        ),
        _bash_case(
            "_jobctl_interspersed",
            "Whether options may follow a positional argument of a command path.",
            interspersed_arms(cmds),
            "return 0",
        ),
        _bash_case(
            "_jobctl_value",
            'COMPREPLY: the value of an option ("path --opt") or argument ("path #N", "path #*").',
            _value_arms(cmds),
            ":",
        ),
    ]
    return "\n\n".join([script_head(_BASH_HEAD), *tables]) + "\n" + _BASH_MAIN
