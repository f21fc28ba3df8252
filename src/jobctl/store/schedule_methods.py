"""The schedule methods of the store contract, once for every backend.

Both stores hold their schedule part as ``schedule_ops`` (a
:class:`jobctl.store.schedules.ScheduleOps` over their own
:class:`jobctl.store.schedconn.SchedConn`) and take these methods from
:class:`ScheduleMethods`, which only forwards; a backend overrides the few it adds to
(PostgreSQL wakes the other daemons after a materialization or a manual occurrence).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobctl.domain.models import Job
from jobctl.domain.schedule import (
    Materialized,
    Schedule,
    ScheduleEdit,
    ScheduleSpec,
    SkipRecord,
    Skips,
)
from jobctl.errors import JobctlError
from jobctl.store.schedules import ScheduleOps


class ScheduleMethods:
    """See :class:`jobctl.store.base.Store` for the contract of each method."""

    schedule_ops: ScheduleOps

    def create_schedule(self, spec: ScheduleSpec) -> Schedule:
        return self.schedule_ops.create_schedule(spec)

    def create_schedules(self, specs: Sequence[ScheduleSpec]) -> list[Schedule | JobctlError]:
        return self.schedule_ops.create_schedules(specs)

    def get_schedule(self, ref: str, owner: int | None = None) -> Schedule:
        return self.schedule_ops.get_schedule(ref, owner)

    def list_schedules(
        self,
        include_deleted: bool = False,
        limit: int = 1000,
        after: str | None = None,
        owner: int | None = None,
    ) -> list[Schedule]:
        return self.schedule_ops.list_schedules(include_deleted, limit, after, owner)

    def pause_schedule(self, ref: str) -> Schedule:
        return self.schedule_ops.pause_schedule(ref)

    def resume_schedule(self, ref: str) -> tuple[Schedule, Skips]:
        return self.schedule_ops.resume_schedule(ref)

    def delete_schedule(self, ref: str) -> Schedule:
        return self.schedule_ops.delete_schedule(ref)

    def edit_schedule(
        self, ref: str, spec: ScheduleSpec, base: ScheduleSpec, editor_uid: int
    ) -> tuple[Schedule, ScheduleEdit]:
        return self.schedule_ops.edit_schedule(ref, spec, base, editor_uid)

    def schedule_edits(self, ref: str, limit: int) -> list[ScheduleEdit]:
        return self.schedule_ops.schedule_edits(ref, limit)

    def trigger_schedule(self, ref: str) -> Job:
        return self.schedule_ops.trigger_schedule(ref)

    def schedule_history(self, ref: str, limit: int) -> tuple[list[Job], list[SkipRecord]]:
        return self.schedule_ops.schedule_history(ref, limit)

    def schedule_totals(self) -> dict[str, Any]:
        return self.schedule_ops.schedule_totals()

    def schedule_wakeup(self) -> datetime | None:
        return self.schedule_ops.schedule_wakeup()

    def materialize(self, limit: int) -> Materialized:
        return self.schedule_ops.materialize(limit)


__all__ = ["ScheduleMethods"]
