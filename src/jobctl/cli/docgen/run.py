"""Generate every file, compare with the checked-in ones, and the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import typer

from jobctl.cli.docgen.bash import render_bash
from jobctl.cli.docgen.fish import render_fish
from jobctl.cli.docgen.man import render_man
from jobctl.cli.docgen.markdown import render_markdown
from jobctl.cli.docgen.model import (
    BASH_COMPLETION,
    CLI_REFERENCE,
    FISH_COMPLETION,
    MAN_PAGE,
    REGENERATE,
    ZSH_COMPLETION,
)
from jobctl.cli.docgen.tree import build_tree
from jobctl.cli.docgen.zsh import render_zsh


def generate(app: typer.Typer | None = None) -> dict[str, str]:
    """Every generated file's text, by path relative to the repository root."""
    root = build_tree(app)
    return {
        MAN_PAGE: render_man(root),
        BASH_COMPLETION: render_bash(root),
        ZSH_COMPLETION: render_zsh(root),
        FISH_COMPLETION: render_fish(root),
        CLI_REFERENCE: render_markdown(root),
        SCHEMA_DOC: schema_doc(),
    }


#: The database schema as the migrations build it (sqlite-utils introspection).
SCHEMA_DOC = "docs/schema.md"


def schema_doc() -> str:
    """docs/schema.md from a fresh in-memory database migrated to the latest version."""
    import sqlite3

    from jobctl.store.export import render_schema
    from jobctl.store.migrate import migrate

    conn = sqlite3.connect(":memory:")
    try:
        migrate(conn)
        return render_schema(conn)
    finally:
        conn.close()


def _is_root(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() and (path / "src" / "jobctl").is_dir()


def find_root(start: Path | None = None) -> Path:
    """The repository root: above this package (src layout), or above ``start``/cwd."""
    here = Path(__file__).resolve()
    candidates = [here.parents[4]] if len(here.parents) > 4 else []
    base = (start or Path.cwd()).resolve()
    candidates += [base, *base.parents]
    for candidate in candidates:
        if _is_root(candidate):
            return candidate
    raise FileNotFoundError(
        "cannot find the jobctl repository (pyproject.toml and "
        "src/jobctl); run from inside it or pass --root"
    )


def stale_files(root: Path, files: dict[str, str]) -> list[str]:
    """The generated files that are missing or differ on disk under ``root``."""
    stale = []
    for rel, text in files.items():
        path = root / rel
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current != text:
            stale.append(rel)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{sys.executable.rsplit('/', 1)[-1]} -m jobctl.cli.docgen",
        description="Regenerate jobctl's man page, shell completions and CLI reference.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 and name the stale files if any"
    )
    parser.add_argument("--root", type=Path, help="the repository root [default: found]")
    args = parser.parse_args(argv)
    try:
        root = args.root.resolve() if args.root else find_root()
    except FileNotFoundError as exc:
        print(f"docgen: {exc}", file=sys.stderr)
        return 2
    files = generate()
    stale = stale_files(root, files)
    if args.check:
        for rel in stale:
            print(f"docgen: stale: {rel}", file=sys.stderr)
        if stale:
            print(f"docgen: run `{REGENERATE}` to regenerate", file=sys.stderr)
        return 1 if stale else 0
    for rel in stale:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[rel], encoding="utf-8")
        print(f"docgen: wrote {rel}")
    return 0
