"""``python -m jobctl`` is the ``jobctl`` command."""

from jobctl.cli.main import entry

entry()
