"""A fish completion script.

``__jobctl_state`` (in ``_FISH_HEAD``) follows the command line; the generated
``switch`` functions tell it what the command tree holds, and one ``complete`` line per
subcommand, option and positional argument says when it applies.
"""

from __future__ import annotations

import re

from jobctl.cli.docgen.model import CommandDoc, ParamDoc
from jobctl.cli.docgen.shell import (
    Arm,
    ValueCompletion,
    interspersed_arms,
    nvalues_keys,
    positional_slots,
    script_head,
    subcommand_arms,
    wrap_keys,
)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_switch(name: str, doc: str, args: str, arms: list[Arm], default: str | None) -> str:
    lines = [
        f"function {name} --argument-names {args} --description {_fish_quote(doc)}",
        f'    switch "{" ".join("$" + a for a in args.split())}"',
    ]
    for keys, body in arms:
        rows = wrap_keys((_fish_quote(k) for k in keys), sep=" ", cont=" \\", indent="    ")
        lines += [
            "        case " + rows[0],
            *(f"        {row}" for row in rows[1:]),
            f"            {body}",
        ]
    if default is not None:
        lines += ["        case '*'", f"            {default}"]
    lines += ["    end", "end"]
    return "\n".join(lines)


_FISH_HEAD = r"""# fish completion for jobctl
# @GENERATED@
#
# Install: copy to ~/.config/fish/completions/jobctl.fish (or a directory of
# $fish_complete_path). Job ids come from a running daemon (`jobctl list --json`);
# JOBCTL_COMPLETE_IDS=0 turns that off.

function __jobctl_job_ids --description 'Ids of the newest jobs, from a running daemon'
    test "$JOBCTL_COMPLETE_IDS" = 0; and return
    set -l cmd jobctl list --json --limit 50
    command -q timeout; and set cmd timeout 2 $cmd
    # JSON indented by two: a job's own "id" is the only key four spaces in.
    $cmd 2>/dev/null </dev/null | string replace -rf '^    "id": (\d+),?$' '$1'
end

function __jobctl_state --description 'Command path, positionals seen, options over, value due'
    set -l path
    set -l npos 0
    set -l rest 0
    set -l skip 0
    for tok in (commandline -opc)[2..-1]
        if test $skip -gt 0
            set skip (math $skip - 1)
        else if test $rest -eq 1
            set npos (math $npos + 1)
        else if test "$tok" = --
            set rest 1
        else if string match -qr -- '^-.' $tok
            string match -q -- '*=*' $tok; or set skip (__jobctl_nvalues "$path" $tok)
        else if test $npos -eq 0; and contains -- $tok (__jobctl_subcommands "$path")
            set path (string join ' ' $path $tok)
        else
            set npos (math $npos + 1)
            __jobctl_interspersed "$path"; or set rest 1
        end
    end
    printf '%s\n' "$path" $npos $rest $skip
end

# __jobctl_at PATH [WHAT]: the command line is at command PATH, and WHAT is due there:
# "sub" (a subcommand), "opt" (an option), "#N" (the Nth positional) or "#N+" (any from N).
function __jobctl_at --argument-names want what
    set -l st (__jobctl_state)
    test "$st[1]" = "$want"; or return 1
    switch "$what"
        case ''
            return 0
        case opt
            test $st[3] -eq 0
        case sub
            test $st[2] -eq 0 -a $st[3] -eq 0 -a $st[4] -eq 0
        case '#*+'
            test $st[4] -eq 0 -a $st[2] -ge (math (string sub -s 2 -- $what | string trim -c +) - 1)
        case '#*'
            test $st[4] -eq 0 -a $st[2] -eq (math (string sub -s 2 -- $what) - 1)
    end
end
"""


def _fish_names(param: ParamDoc) -> str:
    out = []
    for opt in param.all_opts:
        if opt.startswith("--"):
            out.append(f"-l {_fish_quote(opt[2:])}")
        elif len(opt) == 2:
            out.append(f"-s {_fish_quote(opt[1:])}")
        else:
            out.append(f"-o {_fish_quote(opt[1:])}")
    return " ".join(out)


def _fish_choices(choices: tuple[str, ...]) -> str:
    return "-a " + _fish_quote(
        " ".join(re.sub(r"([\\\s'\"$();&|<>*?~{}\[\]#])", r"\\\1", c) for c in choices)
    )


_DIRS = "-a '(__fish_complete_directories (commandline -ct))'"
_JOB_IDS = "-a '(__jobctl_job_ids)'"

#: An option's value: -x (a value, no file names) or -r (a value) and what completes it.
_OPTION_VALUES = ValueCompletion(
    choice=lambda choices: "-x " + _fish_choices(choices),
    file="-r -F",
    dir=f"-x {_DIRS}",
    job_id=f"-x {_JOB_IDS}",
    none="-x",
)

#: A positional argument: -F (file names) or -f (none) and what completes it instead.
_ARGUMENT_VALUES = ValueCompletion(
    choice=lambda choices: "-f " + _fish_choices(choices),
    file="-F",
    dir=f"-f {_DIRS}",
    job_id=f"-f {_JOB_IDS}",
    none=None,
)


def _fish_completions(cmd: CommandDoc) -> list[str]:
    """The ``complete`` lines of one command's subcommands, options and arguments."""

    def cond(what: str) -> str:
        return "-n " + _fish_quote(f"__jobctl_at {_fish_quote(cmd.key)} {_fish_quote(what)}")

    lines = [f"\n# {cmd.name}"]
    for sub in cmd.subcommands:
        lines.append(
            f"complete -c jobctl {cond('sub')} "
            f"-a {_fish_quote(sub.path[-1])} -d {_fish_quote(sub.short_help)}"
        )
    for p in cmd.options:
        value = f" {_OPTION_VALUES.of(p)}" if p.takes_value else ""
        lines.append(
            f"complete -c jobctl {cond('opt')} {_fish_names(p)}"
            f"{value} -d {_fish_quote(' '.join(p.help.split()))}"
        )
    for n, arg, rest in positional_slots(cmd):
        if (spec := _ARGUMENT_VALUES.of(arg)) is not None:
            where = f"#{n}+" if rest else f"#{n}"
            lines.append(f"complete -c jobctl {cond(where)} {spec} -d {_fish_quote(arg.help)}")
    return lines


def _subcommand_words(names: list[str]) -> str:
    return "printf '%s\\n' " + " ".join(_fish_quote(n) for n in names)


def render_fish(root: CommandDoc) -> str:
    """A fish completion script."""
    cmds = list(root.walk())
    parts = [
        script_head(_FISH_HEAD),
        _fish_switch(
            "__jobctl_subcommands",
            "Subcommands of a command path",
            "path",
            subcommand_arms(cmds, _subcommand_words),
            None,
        ),
        _fish_switch(
            "__jobctl_nvalues",
            "How many words follow an option",
            "path opt",
            [(keys, f"echo {n}") for n, keys in nvalues_keys(cmds)],
            "echo 0",
        ),
        _fish_switch(
            "__jobctl_interspersed",
            "Whether options may follow a positional argument",
            "path",
            interspersed_arms(cmds),
            "return 0",
        ),
        "\n".join(["complete -c jobctl -f", *(ln for c in cmds for ln in _fish_completions(c))]),
    ]
    return "\n\n".join(parts) + "\n"
