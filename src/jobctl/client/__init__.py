"""Typed client of the jobctl daemon API (used by the CLI; usable from Python)."""

from jobctl.client.client import Client

__all__ = ["Client"]
