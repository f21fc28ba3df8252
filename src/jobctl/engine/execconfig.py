"""The executor's settings (engine/executor.py), apart from the code that runs attempts:
the daemon's wiring builds one, tests build their own, and neither needs the executor's
machinery to do so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jobctl.engine import process, spawnclient, webhook
from jobctl.engine.cgroup import Cgroups


@dataclass(frozen=True)
class ExecutorConfig:
    concurrency: int = 16
    lease_ttl: float = 30.0
    kill_grace: float = 10.0
    log_dir: Path = Path("logs")
    #: How commands start: their umask and open-file limit (engine/process.py).
    launch: process.Launch = field(default_factory=process.Launch)
    #: Bytes of output an attempt of this owner may write (the ``log_bytes`` quota).
    log_bytes: Callable[[int], int | None] = field(default=lambda uid: None)
    #: Where attempts' cgroups are made (engine/cgroup.py); None: trees found in /proc.
    cgroups: Cgroups | None = None
    #: The spawn helper that starts commands (engine/spawnclient.py); None: Popen here.
    helper: spawnclient.SpawnHelper | None = None
    #: How http jobs are sent (engine/webhook.py): allowed networks, per-target limit.
    webhooks: webhook.WebhookConfig = field(default_factory=webhook.WebhookConfig)
    #: Stop a command whose lease could not be renewed before it runs out (daemons
    #: sharing PostgreSQL: engine/leasewatch.py); off on SQLite, where no other daemon
    #: can reclaim it.
    give_up_leases: bool = False
    #: Jobs the timer may claim beyond the free slots, held until a slot frees
    #: (``claim_ahead``; engine/ahead.py). 0: none.
    claim_ahead: int = 0

    @property
    def heartbeat_every(self) -> float:
        return self.lease_ttl / 3


__all__ = ["ExecutorConfig"]
