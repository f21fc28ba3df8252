"""Generate jobctl's man page, shell completions and CLI reference from the command tree.

Everything here is a pure function of the Typer app (walked through
``typer.main.get_command``), :data:`jobctl.cli.errors.EXIT_CODES` and
``jobctl.__version__``: no dates, no terminal width, no environment, so regenerating
is deterministic and a test can tell when a checked-in file is stale.

Run ``python -m jobctl.cli.docgen`` from the repository to rewrite the files in place,
or ``python -m jobctl.cli.docgen --check`` to list the stale ones (exit status 1).

Conventions the generator follows, so new commands need nothing here:

* a value completes from its type: ``Literal``/``Enum`` choices, ``Path`` (files, or
  directories with ``file_okay=False``), ``typer.FileText`` and the like;
* a parameter whose Python name is in :data:`JOB_ID_PARAMS` (``job_id``, ``job_ids``)
  completes job ids from a running daemon (``jobctl list --json``), and nothing when
  the daemon is down or ``JOBCTL_COMPLETE_IDS=0``;
* positional string arguments complete file names (the shell's own default); string
  options complete nothing;
* hidden commands and options are left out everywhere.

The package: :mod:`.model` (the constants and the command-tree model), :mod:`.tree`
(walking the Typer app into it), one module a generated file (:mod:`.man`,
:mod:`.bash`, :mod:`.zsh`, :mod:`.fish`, :mod:`.markdown`), :mod:`.shell` (what the
three completion generators share) and :mod:`.run` (generating, checking, ``main``).
"""

from __future__ import annotations

from jobctl.cli.docgen.bash import render_bash
from jobctl.cli.docgen.fish import render_fish
from jobctl.cli.docgen.man import render_man
from jobctl.cli.docgen.markdown import render_markdown
from jobctl.cli.docgen.model import BASH_COMPLETION as BASH_COMPLETION
from jobctl.cli.docgen.model import CLI_REFERENCE as CLI_REFERENCE
from jobctl.cli.docgen.model import FISH_COMPLETION as FISH_COMPLETION
from jobctl.cli.docgen.model import HELP_WIDTH as HELP_WIDTH
from jobctl.cli.docgen.model import JOB_ID_PARAMS, CommandDoc, ParamDoc
from jobctl.cli.docgen.model import MAN_PAGE as MAN_PAGE
from jobctl.cli.docgen.model import PROG as PROG
from jobctl.cli.docgen.model import REGENERATE as REGENERATE
from jobctl.cli.docgen.model import ZSH_COMPLETION as ZSH_COMPLETION
from jobctl.cli.docgen.model import ValueKind as ValueKind
from jobctl.cli.docgen.run import SCHEMA_DOC as SCHEMA_DOC
from jobctl.cli.docgen.run import find_root, generate, main, schema_doc, stale_files
from jobctl.cli.docgen.tree import build_tree
from jobctl.cli.docgen.zsh import render_zsh

__all__ = [
    "JOB_ID_PARAMS",
    "CommandDoc",
    "ParamDoc",
    "build_tree",
    "find_root",
    "generate",
    "main",
    "render_bash",
    "render_fish",
    "render_man",
    "render_markdown",
    "render_zsh",
    "schema_doc",
    "stale_files",
]
