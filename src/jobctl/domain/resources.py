"""Resource limits of a job's command, like systemd's ``Nice=``, ``MemoryMax=`` and
``CPUQuota=``: what a job (or a schedule's template) asks for, checked and stored.

``nice`` is applied to the command's process before it runs (``setpriority``: honest
everywhere; lowering it below 0 needs a root daemon). ``memory_max`` (bytes) and
``cpu_quota`` (percent of one CPU, 200 = two CPUs) are written to the attempt's cgroup
(``memory.max``, ``cpu.max``) before the command is moved into it, so they need a cgroup
v2 with the ``memory`` / ``cpu`` controller the daemon may enable. No rlimit stands in for
them: ``RLIMIT_AS`` counts address space, not memory used, and ``RLIMIT_CPU`` total
seconds, not a share, so a job that asks for one where the daemon has no such controller
is refused, never run without it (engine/executor.py, docs/operations.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MIN_NICE, MAX_NICE = -20, 19
#: 1 MiB: less cannot hold a shell; 1 PiB: more is no limit.
MIN_MEMORY, MAX_MEMORY = 1 << 20, 1 << 50
#: Percent of one CPU: 1% to 100 CPUs.
MIN_CPU_QUOTA, MAX_CPU_QUOTA = 1.0, 10_000.0
#: ``cpu.max`` period in µs (the kernel's default).
CPU_PERIOD = 100_000


@dataclass(frozen=True, slots=True)
class Resources:
    nice: int | None = None
    memory_max: int | None = None
    cpu_quota: float | None = None

    def __bool__(self) -> bool:
        return not (self.nice is None and self.memory_max is None and self.cpu_quota is None)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self._items() if v is not None}

    def _items(self) -> list[tuple[str, Any]]:
        return [("nice", self.nice), ("memory_max", self.memory_max), ("cpu_quota", self.cpu_quota)]

    def controllers(self) -> set[str]:
        """The cgroup v2 controllers these limits need."""
        need = set()
        if self.memory_max is not None:
            need.add("memory")
        if self.cpu_quota is not None:
            need.add("cpu")
        return need

    def cgroup_files(self) -> dict[str, str]:
        """What to write into the attempt's cgroup, file by file."""
        out = {}
        if self.memory_max is not None:
            out["memory.max"] = str(self.memory_max)
        if self.cpu_quota is not None:
            out["cpu.max"] = f"{max(1000, round(self.cpu_quota / 100 * CPU_PERIOD))} {CPU_PERIOD}"
        return out


def to_text(res: Resources | None) -> str | None:
    """The stored form (a JSON object), None when there is nothing to store."""
    return json.dumps(res.to_json(), sort_keys=True) if res else None


def from_text(text: str | None) -> Resources | None:
    if not text:
        return None
    data = json.loads(text)
    return Resources(data.get("nice"), data.get("memory_max"), data.get("cpu_quota"))


def from_json(data: dict[str, Any] | None) -> Resources | None:
    if not data:
        return None
    res = Resources(data.get("nice"), data.get("memory_max"), data.get("cpu_quota"))
    return res or None


def describe(res: Resources | None) -> str:
    """One line for ``show``: ``nice 5, memory 512 MiB, cpu 50%``; ``none``."""
    if not res:
        return "none"
    parts = []
    if res.nice is not None:
        parts.append(f"nice {res.nice}")
    if res.memory_max is not None:
        parts.append(f"memory {_size(res.memory_max)}")
    if res.cpu_quota is not None:
        parts.append(f"cpu {res.cpu_quota:g}%")
    return ", ".join(parts)


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"
