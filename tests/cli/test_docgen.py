"""The generated man page, shell completions and CLI reference: current, complete, working.

When a test here says a file is stale, run ``python -m jobctl.cli.docgen`` and commit the
result. The shell tests run the real shells (bash always; zsh, fish, groff, mandoc and
man when installed, skipped otherwise) on the checked-in files.
"""

from __future__ import annotations

import enum
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pytest
import typer

from jobctl.cli import docgen
from jobctl.cli.errors import EXIT_CODES

ROOT = Path(__file__).resolve().parents[2]
MAN = ROOT / docgen.MAN_PAGE
BASH = ROOT / docgen.BASH_COMPLETION
ZSH = ROOT / docgen.ZSH_COMPLETION
FISH = ROOT / docgen.FISH_COMPLETION
COMPLETIONS = {"bash": BASH, "zsh": ZSH, "fish": FISH}

FAKE_JOBS_JSON = """[
  {
    "id": 42,
    "status": "scheduled",
    "env": {
      "id": "999"
    },
    "attempts": [
      {
        "id": 7
      }
    ]
  },
  {
    "id": 41,
    "status": "dead"
  }
]"""


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return docgen.generate()


@pytest.fixture(scope="module")
def tree() -> docgen.CommandDoc:
    return docgen.build_tree()


def _words(tree: docgen.CommandDoc) -> tuple[set[str], set[str]]:
    commands = {c.path[-1] for c in tree.walk() if c.path}
    options = {o for c in tree.walk() for p in c.options for o in p.all_opts}
    return commands, options


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


# --------------------------------------------------------------------------- up to date


@pytest.mark.parametrize(
    "rel",
    [
        docgen.MAN_PAGE,
        docgen.BASH_COMPLETION,
        docgen.ZSH_COMPLETION,
        docgen.FISH_COMPLETION,
        docgen.CLI_REFERENCE,
        docgen.SCHEMA_DOC,
    ],
)
def test_checked_in_file_is_current(generated: dict[str, str], rel: str) -> None:
    path = ROOT / rel
    assert path.is_file(), f"{rel} is missing: run `python -m jobctl.cli.docgen`"
    assert path.read_text(encoding="utf-8") == generated[rel], (
        f"{rel} is stale (the CLI changed): run `python -m jobctl.cli.docgen` and commit it"
    )


def test_generation_is_deterministic(generated: dict[str, str]) -> None:
    assert docgen.generate() == generated
    th = next(line for line in generated[docgen.MAN_PAGE].splitlines() if line.startswith(".TH"))
    from jobctl import __version__

    assert f"jobctl {__version__}" in th
    assert not any(ch.isdigit() for ch in th.split('"')[1]), "no date in .TH"


def test_check_mode_names_stale_files_and_write_mode_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for rel in docgen.generate():
        assert f"stale: {rel}" in err
    assert "python -m jobctl.cli.docgen" in err

    assert docgen.main(["--root", str(tmp_path)]) == 0
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / docgen.BASH_COMPLETION).write_text("# edited by hand\n")
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.count("stale:") == 1


def test_module_runs_from_a_clean_checkout() -> None:
    """`python -m jobctl.cli.docgen --check` from the repository, as CI would run it."""
    proc = subprocess.run(
        [sys.executable, "-m", "jobctl.cli.docgen", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert docgen.find_root() == ROOT


# --------------------------------------------------------------------------- complete


def test_man_page_has_every_command_option_and_section(
    generated: dict[str, str], tree: docgen.CommandDoc
) -> None:
    man = generated[docgen.MAN_PAGE]
    for section in (
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "COMMANDS",
        "ENVIRONMENT",
        "FILES",
        '"EXIT STATUS"',
        '"SEE ALSO"',
    ):
        assert f".SH {section.strip(chr(34))}" in man.replace('"', "")
    for cmd in tree.walk():
        if cmd.path:
            assert f'.SS "{cmd.name}"' in man
        for param in cmd.params:
            for opt in param.all_opts:
                assert opt.replace("-", "\\-") in man, (cmd.name, opt)
            if param.help and not param.is_help:
                first = param.help.split()[0].replace("-", "\\-")
                assert first in man, (cmd.name, param.name)
    for env in ("JOBCTL_SOCKET", "JOBCTL_DB", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        assert f"\\fB{env}\\fR" in man
    for path in (
        "/var/lib/jobctl/jobctl.db",
        "/run/jobctl/jobctl.sock",
        "$XDG_STATE_HOME/jobctl/jobctl.db",
        "$XDG_RUNTIME_DIR/jobctl/jobctl.sock",
    ):
        assert path in man


def test_man_page_exit_status_follows_the_exit_code_table(generated: dict[str, str]) -> None:
    man = generated[docgen.MAN_PAGE]
    exit_status = man.split(".SH EXIT STATUS", 1)[1].split(".SH", 1)[0]
    for cls, code in EXIT_CODES:
        assert f".TP\n\\fB{code}\\fR\n" in exit_status
        assert cls.__name__ in exit_status
    for code in (0, 2, 130):
        assert f".TP\n\\fB{code}\\fR\n" in exit_status


@pytest.mark.parametrize("shell", sorted(COMPLETIONS))
def test_completion_has_every_command_and_option(
    generated: dict[str, str], tree: docgen.CommandDoc, shell: str
) -> None:
    text = COMPLETIONS[shell].read_text()
    commands, options = _words(tree)
    for name in commands:
        assert name in text, (shell, name)
    for opt in options:
        spelled = opt[2:] if shell == "fish" else opt
        assert spelled in text, (shell, opt)


def test_markdown_has_every_commands_help(
    generated: dict[str, str], tree: docgen.CommandDoc
) -> None:
    md = generated[docgen.CLI_REFERENCE]
    for cmd in tree.walk():
        assert f"# {cmd.name}\n" in md
        assert cmd.help_page in md
        assert cmd.help_page.startswith(f"Usage: {cmd.name} ")
        for param in cmd.options:
            assert param.opts[0] in cmd.help_page


# --------------------------------------------------------------------------- bash


def _bash_complete(
    script: Path, line: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> list[str]:
    """COMPREPLY for the command line `line` (completing its last word) in a real bash."""
    words = line.split(" ")
    prog = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(_bash_quote(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={_bash_quote(line)}\n"
        "COMP_POINT=${#COMP_LINE}\n"
        '_jobctl jobctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", prog],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    return [w for w in proc.stdout.split("\n") if w]


def _bash_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


@pytest.fixture
def fake_jobctl(tmp_path: Path) -> dict[str, str]:
    """A `jobctl` on PATH that answers `list --json` as a running daemon would."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "jobctl"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{FAKE_JOBS_JSON}\nEOF\n")
    fake.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def daemon_down(tmp_path: Path) -> dict[str, str]:
    """A `jobctl` on PATH that fails as it does with no daemon."""
    bindir = tmp_path / "down"
    bindir.mkdir()
    fake = bindir / "jobctl"
    fake.write_text("#!/bin/sh\necho 'jobctl: error: no daemon' >&2\nexit 5\n")
    fake.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def test_bash_syntax() -> None:
    proc = subprocess.run(["bash", "-n", str(BASH)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("jobctl ad", ["add"]),
        ("jobctl add --max", ["--max-attempts"]),
        ("jobctl dlq re", ["replay"]),
        ("jobctl dlq replay --l", ["--limit"]),
        ("jobctl --v", ["--version"]),
        ("jobctl add --queue q --pri", ["--priority"]),
        ("jobctl add --shell --no-s", ["--no-shell"]),
        ("jobctl add --queue --m", []),  # the value of --queue, not an option
        ("jobctl add echo --m", []),  # after the command, words are the command's
        ("jobctl add -- --m", []),
        ("jobctl dlq --h", ["--help"]),
        ("jobctl nosuch --", []),
    ],
)
def test_bash_completes(line: str, expected: list[str]) -> None:
    assert _bash_complete(BASH, line, {"JOBCTL_COMPLETE_IDS": "0"}) == expected


def test_bash_completes_every_command(tree: docgen.CommandDoc) -> None:
    assert _bash_complete(BASH, "jobctl ") == [c.path[-1] for c in tree.subcommands]
    dlq = next(c for c in tree.subcommands if c.path == ("dlq",))
    assert _bash_complete(BASH, "jobctl dlq ") == [c.path[-1] for c in dlq.subcommands]


def test_bash_completes_paths(tmp_path: Path) -> None:
    (tmp_path / "data.db").touch()
    (tmp_path / "dir").mkdir()
    assert _bash_complete(BASH, "jobctl daemon --db da", cwd=tmp_path) == ["data.db"]
    assert _bash_complete(BASH, "jobctl daemon --db = da", cwd=tmp_path) == ["data.db"]
    assert _bash_complete(BASH, "jobctl daemon --db =", cwd=tmp_path) == ["data.db", "dir"]
    assert _bash_complete(BASH, "jobctl list --socket d", cwd=tmp_path) == ["data.db", "dir"]
    assert _bash_complete(BASH, "jobctl add -- ./d", cwd=tmp_path) == ["./data.db", "./dir"]


def test_bash_completes_job_ids_from_the_daemon(
    fake_jobctl: dict[str, str], daemon_down: dict[str, str]
) -> None:
    assert _bash_complete(BASH, "jobctl show ", fake_jobctl) == ["42", "41"]
    assert _bash_complete(BASH, "jobctl cancel --json 4", fake_jobctl) == ["42", "41"]
    assert _bash_complete(BASH, "jobctl logs 42 ", fake_jobctl) == []
    assert _bash_complete(BASH, "jobctl show ", {**fake_jobctl, "JOBCTL_COMPLETE_IDS": "0"}) == []
    assert _bash_complete(BASH, "jobctl show ", daemon_down) == []


# --------------------------------------------------------------------------- zsh, fish


def test_zsh_syntax() -> None:
    zsh = _need("zsh")
    proc = subprocess.run([zsh, "-n", str(ZSH)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_fish_syntax() -> None:
    fish = _need("fish")
    proc = subprocess.run(
        [fish, "--no-execute", str(FISH)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def _fish_complete(
    script: Path,
    lines: list[str],
    env: dict[str, str] | None = None,
) -> list[list[str]]:
    fish = _need("fish")
    prog = [f"source {script}"]
    for line in lines:
        prog += [f"complete -C {_bash_quote(line)} | string replace -r '\\t.*' ''", "echo '<end>'"]
    proc = subprocess.run(
        [fish, "--no-config", "-c", "\n".join(prog)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [[w for w in chunk.split("\n") if w] for chunk in proc.stdout.split("<end>\n")[:-1]]


def test_fish_completes(fake_jobctl: dict[str, str]) -> None:
    got = _fish_complete(
        FISH,
        [
            "jobctl ad",
            "jobctl add --max",
            "jobctl dlq re",
            "jobctl show ",
            "jobctl show 42 ",
            "jobctl add echo --m",
        ],
        fake_jobctl,
    )
    assert got == [["add"], ["--max-attempts"], ["replay"], ["41", "42"], [], []]


# --------------------------------------------------------------------------- man


def test_man_page_renders_without_groff_warnings() -> None:
    groff = _need("groff")
    proc = subprocess.run(
        [groff, "-man", "-Tutf8", "-ww", "-z", str(MAN)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stderr == ""


def test_man_page_lints_clean_with_mandoc() -> None:
    mandoc = _need("mandoc")
    proc = subprocess.run([mandoc, "-Tlint", str(MAN)], capture_output=True, text=True, check=False)
    # The date is left empty on purpose: a date would change on every regeneration.
    messages = [
        m for m in (proc.stdout + proc.stderr).splitlines() if m and "missing date" not in m
    ]
    assert messages == []


def test_man_shows_the_page() -> None:
    man = _need("man")
    if shutil.which("groff") is None and shutil.which("nroff") is None:
        pytest.skip("man has no formatter")
    proc = subprocess.run(
        [man, "-l", str(MAN)],
        capture_output=True,
        text=True,
        env={**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat"},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for heading in ("NAME", "SYNOPSIS", "COMMANDS", "EXIT STATUS", "FILES"):
        assert f"\n{heading}\n" in out
    assert "jobctl dlq replay" in out
    assert "--max-attempts" in out


# --------------------------------------------------------------------------- generic walk


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def _sample_app() -> typer.Typer:
    """Commands that jobctl does not have (yet): choices, directories, nested groups."""
    app = typer.Typer(add_completion=False)
    queues = typer.Typer(help="Queues.")
    pause_group = typer.Typer(help="Pausing.")

    @app.callback()
    def main() -> None:
        """A sample."""

    @queues.command("set")
    def set_(
        name: Annotated[str, typer.Argument(help="Queue name")],
        color: Annotated[Color, typer.Argument(help="Its color")],
        level: Annotated[Literal["low", "high"], typer.Option(help="How loud")] = "low",
        workdir: Annotated[Path | None, typer.Option(file_okay=False, help="A directory")] = None,
        tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Tags")] = None,
        secret: Annotated[bool, typer.Option(hidden=True)] = False,
    ) -> None:
        """Set a queue's color."""

    @pause_group.command("now")
    def now(job_id: Annotated[int, typer.Argument(help="Job")]) -> None:
        """Pause one job now."""

    queues.add_typer(pause_group, name="pause")
    app.add_typer(queues, name="queues")
    return app


@pytest.fixture(scope="module")
def sample_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tree = docgen.build_tree(_sample_app())
    out = tmp_path_factory.mktemp("sample")
    files = {
        "bash": docgen.render_bash(tree),
        "zsh": docgen.render_zsh(tree),
        "fish": docgen.render_fish(tree),
        "man": docgen.render_man(tree),
        "md": docgen.render_markdown(tree),
    }
    paths = {}
    for name, text in files.items():
        paths[name] = out / f"sample.{name}"
        paths[name].write_text(text)
    return paths


def test_walk_reads_types_choices_and_hidden_options() -> None:
    tree = docgen.build_tree(_sample_app())
    assert [c.name for c in tree.walk()] == [
        "jobctl",
        "jobctl queues",
        "jobctl queues set",
        "jobctl queues pause",
        "jobctl queues pause now",
    ]
    set_cmd = next(c for c in tree.walk() if c.path == ("queues", "set"))
    params = {p.name: p for p in set_cmd.params}
    assert "secret" not in params
    assert params["level"].choices == ("low", "high")
    assert params["level"].default == "low"
    assert params["color"].choices == ("red", "blue")
    assert params["workdir"].value_kind == "dir"
    assert params["tag"].multiple and params["tag"].opts == ("--tag", "-t")
    now = next(c for c in tree.walk() if c.path[-1:] == ("now",))
    assert now.arguments[0].value_kind == "job_id"


def test_generic_bash_completion(
    sample_files: dict[str, Path], tmp_path: Path, fake_jobctl: dict[str, str]
) -> None:
    bash = sample_files["bash"]
    work = tmp_path / "work"
    (work / "dir1").mkdir(parents=True)
    (work / "file1").touch()
    assert _bash_complete(bash, "jobctl queues pause n") == ["now"]
    assert _bash_complete(bash, "jobctl queues set --level h") == ["high"]
    assert _bash_complete(bash, "jobctl queues set --level=") == []  # unsplit: an option
    assert _bash_complete(bash, "jobctl queues set --level = ") == ["low", "high"]
    assert _bash_complete(bash, "jobctl queues set q ") == ["red", "blue"]
    assert _bash_complete(bash, "jobctl queues set --workdir ", cwd=work) == ["dir1"]
    assert _bash_complete(bash, "jobctl queues set -t x --s") == []  # hidden --secret
    assert _bash_complete(bash, "jobctl queues pause now ", fake_jobctl) == ["42", "41"]


def test_generic_scripts_pass_syntax_checks(sample_files: dict[str, Path]) -> None:
    assert subprocess.run(["bash", "-n", str(sample_files["bash"])], check=False).returncode == 0
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n", str(sample_files["zsh"])], check=False).returncode == 0
    if shutil.which("fish"):
        assert (
            subprocess.run(
                ["fish", "--no-execute", str(sample_files["fish"])], check=False
            ).returncode
            == 0
        )
        got = _fish_complete(
            sample_files["fish"], ["jobctl queues set --level ", "jobctl queues set q "]
        )
        assert got == [["high", "low"], ["blue", "red"]]
    if shutil.which("groff"):
        proc = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(sample_files["man"])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.stderr == ""
    man = sample_files["man"].read_text()
    assert "\\fB\\-\\-level\\fR \\fI{low|high}\\fR" in man
    assert "\\fB\\-\\-tag\\fR, \\fB\\-t\\fR" in man
    assert "One of \\fBred\\fR, \\fBblue\\fR." in man
