"""The suite's processes load jobctl from bytecode (tests/conftest.py, ``_compile_once``):
under ``PYTHONDONTWRITEBYTECODE`` each daemon, helper and CLI process of the suite would
otherwise compile jobctl's sources again."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jobctl.daemon


def test_jobctl_has_up_to_date_bytecode_for_the_suites_processes() -> None:
    package = Path(jobctl.daemon.__file__).parent.parent
    stale = []
    for source in package.rglob("*.py"):
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.exists() or cached.stat().st_mtime < os.stat(source).st_mtime:
            stale.append(str(source.relative_to(package)))
    assert stale == []
