"""docs/cli.md: every command's plain ``--help`` page, in the order of ``jobctl --help``."""

from __future__ import annotations

import re

from jobctl.cli.docgen.model import GENERATED, MAN_PAGE, REGENERATE, CommandDoc


def _anchor(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def render_markdown(root: CommandDoc) -> str:
    """docs/cli.md: every command's --help, in the order of ``jobctl --help``."""
    cmds = list(root.walk())
    lines = [
        "# jobctl command reference",
        "",
        f"<!-- {GENERATED} -->",
        "",
        f"This page is generated from the command tree by `{REGENERATE}`, like the man page "
        f"(`{MAN_PAGE}`) and the shell completions (`completions/`). Every command also "
        "prints its help with `--help`.",
        "",
    ]
    lines += [
        f"{'  ' * (len(c.path) - 1 if c.path else 0)}- [{c.name}](#{_anchor(c.name)})" for c in cmds
    ]
    for cmd in cmds:
        lines += ["", f"{'#' * min(len(cmd.path) + 2, 4)} {cmd.name}", ""]
        if cmd.short_help and cmd.path:
            lines += [cmd.short_help, ""]
        lines += ["```", cmd.help_page.replace("```", "'''"), "```"]
    return "\n".join(lines) + "\n"
