"""A Python task API over jobctl's pull workers (docs/workers.md).

    from jobctl.tasks import periodic, task

    @task(queue="emails", max_attempts=5, backoff=(2, 300))
    def send_email(to: str, subject: str) -> None: ...

    send_email.defer(to="a@example.com", subject="hi", key="welcome-a")  # -> Deferred
    send_email.defer_at(tomorrow_9am, to="b@example.com", subject="later")
    await send_email.defer_async(to="c@example.com", subject="from asyncio")

    @periodic(cron="0 6 * * *", tz="Asia/Tokyo", queue="reports")
    def daily_report() -> None: ...

``jobctl worker --app myapp.tasks --queue emails`` runs them. A deferred call is a
payload job ``{"task": "module:name", "kwargs": {...}}`` in the task's queue (a worker
queue), durable, retried with the task's backoff and dead-lettered like any job. Keyword
arguments must be JSON; a worker looks the task up by name in the app it was given.

Every decorator registers into an :class:`App` (``app`` below unless you make your own:
``app = App(socket=...)``, ``@app.task(...)``); ``@periodic`` schedules are created or
updated when a worker of the app starts, or on ``app.register()``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar, overload

from jobctl.errors import Conflict, InvalidInput

P = ParamSpec("P")
R = TypeVar("R")
DEFAULT_TASK_QUEUE = "tasks"


class Deferred(NamedTuple):
    """What ``defer`` returns: the job's id and key (the same job for a repeated key)."""

    job_id: int
    key: str | None


def _backoff(value: float | tuple[float, float] | None) -> dict[str, float] | None:
    if value is None:
        return None
    base, cap = (value, max(value, 3600.0)) if isinstance(value, (int, float)) else value
    return {"base": float(base), "cap": float(cap)}


@dataclass
class Task(Generic[P, R]):
    """A function that may also be deferred to a worker (``fn(...)`` still calls it)."""

    fn: Callable[P, R]
    app: App
    queue: str
    max_attempts: int | None = None
    backoff: float | tuple[float, float] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or task_name(self.fn)
        functools.update_wrapper(self, self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def job(self, kwargs: dict[str, Any], when: datetime | None = None) -> dict[str, Any]:
        """The API body of a deferred call (``key``: ``kwargs.pop("key")``)."""
        key = kwargs.pop("key", None)
        body: dict[str, Any] = {
            "payload": {"task": self.name, "kwargs": kwargs},
            "queue": self.queue,
        }
        if key is not None:
            body["key"] = key
        if when is not None:
            if when.tzinfo is None:
                raise InvalidInput("defer_at: give a time with a timezone")
            body["run_at"] = when.isoformat()
        if self.max_attempts is not None:
            body["max_attempts"] = self.max_attempts
        if (backoff := _backoff(self.backoff)) is not None:
            body["backoff"] = backoff
        return body

    def defer(self, **kwargs: Any) -> Deferred:
        """Run later, in a worker: enqueue the call (``key=`` makes it idempotent)."""
        return self.app.enqueue(self.job(kwargs))

    def defer_at(self, when: datetime, **kwargs: Any) -> Deferred:
        """As :meth:`defer`, not before ``when`` (an aware datetime)."""
        return self.app.enqueue(self.job(kwargs, when))

    async def defer_async(self, **kwargs: Any) -> Deferred:
        """:meth:`defer` for asyncio code (the request runs on a thread)."""
        return await asyncio.to_thread(self.app.enqueue, self.job(kwargs))

    async def defer_at_async(self, when: datetime, **kwargs: Any) -> Deferred:
        return await asyncio.to_thread(self.app.enqueue, self.job(kwargs, when))


@dataclass(frozen=True)
class Periodic:
    """A schedule that defers a task: created or updated by :meth:`App.register`."""

    task: Task[..., Any]
    cron: str
    tz: str | None = None
    name: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        job = self.task.job(dict(self.kwargs))
        body: dict[str, Any] = {"name": self.name, "cron": self.cron, "job": job}
        if self.tz is not None:
            body["tz"] = self.tz
        return body


def task_name(fn: Callable[..., Any]) -> str:
    """How a payload names a function: ``module:qualname``."""
    return f"{fn.__module__}:{fn.__qualname__}"


class App:
    """A registry of tasks and schedules, and the daemon they are sent to."""

    def __init__(self, socket: Path | str | None = None) -> None:
        self.socket = None if socket is None else Path(socket)
        self.tasks: dict[str, Task[..., Any]] = {}
        self.schedules: list[Periodic] = []

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        queue: str = DEFAULT_TASK_QUEUE,
        max_attempts: int | None = None,
        backoff: float | tuple[float, float] | None = None,
        name: str | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        queue: str = DEFAULT_TASK_QUEUE,
        max_attempts: int | None = None,
        backoff: float | tuple[float, float] | None = None,
        name: str | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """``@task`` or ``@task(queue=…, max_attempts=…, backoff=seconds|(base, cap))``."""

        def wrap(f: Callable[P, R]) -> Task[P, R]:
            t = Task(f, self, queue, max_attempts, backoff, name or "")
            self.tasks[t.name] = t
            return t

        return wrap if fn is None else wrap(fn)

    def periodic(
        self,
        *,
        cron: str,
        tz: str | None = None,
        queue: str = DEFAULT_TASK_QUEUE,
        name: str | None = None,
        max_attempts: int | None = None,
        backoff: float | tuple[float, float] | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """A task deferred on a cron schedule (``tz``: its time zone)."""

        def wrap(f: Callable[P, R]) -> Task[P, R]:
            t: Task[P, R] = self.task(queue=queue, max_attempts=max_attempts, backoff=backoff)(f)
            sched = name or t.name.replace(":", ".").replace("<", "").replace(">", "")
            self.schedules.append(Periodic(t, cron, tz, sched[:100]))
            return t

        return wrap

    def find(self, name: str) -> Task[..., Any]:
        """The task a payload names (registered here, else imported by its name)."""
        if name in self.tasks:
            return self.tasks[name]
        module, _, qual = name.partition(":")
        import importlib

        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, Task):
            return obj
        raise LookupError(f"{name} is not a task")

    def client(self, timeout: float = 30.0) -> Any:
        from jobctl.client import Client
        from jobctl.paths import default_socket

        return Client(self.socket or default_socket(), timeout=timeout)

    def enqueue(self, body: dict[str, Any]) -> Deferred:
        with self.client() as c:
            job = c.enqueue(body)
        return Deferred(int(job["id"]), job.get("key"))

    def register(self) -> list[str]:
        """Create each ``@periodic`` schedule, or update it if one of its name exists;
        returns their names."""
        with self.client() as c:
            for p in self.schedules:
                body = p.body()
                try:
                    c.create_schedule(body)
                except Conflict:
                    patch = {k: v for k, v in body.items() if k != "name"}
                    c.edit_schedule(p.name, patch)
        return [p.name for p in self.schedules]


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn)


#: The default app: ``from jobctl.tasks import task, periodic``.
app = App()
task = app.task
periodic = app.periodic

__all__ = ["App", "Deferred", "Periodic", "Task", "app", "is_async", "periodic", "task"]
