"""jobctl: a durable job scheduler for one host or a small team."""

__version__ = "0.1.0"
