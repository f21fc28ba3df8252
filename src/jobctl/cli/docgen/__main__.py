"""``python -m jobctl.cli.docgen [--check] [--root DIR]``."""

from __future__ import annotations

import sys

from jobctl.cli.docgen.run import main

if __name__ == "__main__":
    sys.exit(main())
