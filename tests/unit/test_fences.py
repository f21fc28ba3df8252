"""Guards for the speed tricks that lean on a library's internals (issue 19, item 3).

Each trick has an equivalence test that proves it behaves like the plain way; these tests
add what that cannot: a loud failure, naming the trick, when the internal it relies on
moves (a class renamed, a method's signature changed, a switch that no longer switches),
instead of the trick silently doing nothing or the daemon failing at start-up.
The ledger in docs/architecture.md#tricks-that-lean-on-internals lists each trick with
its gain, these guards and when it could go.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import tomllib
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parents[2]
#: Packages whose internals a trick uses: each must have an upper bound in pyproject.toml.
FENCED = ("uvicorn", "fastapi", "typer")


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(text) for text in project["dependencies"]]
    return {r.name: r for r in reqs}


@pytest.mark.parametrize("name", FENCED)
def test_fenced_packages_have_an_upper_bound_and_the_installed_one_is_inside(name: str) -> None:
    req = _requirements()[name]
    assert any(spec.operator == "<" for spec in req.specifier), (
        f"{name}: a trick leans on its internals; pyproject.toml needs an upper bound"
    )
    installed = Version(version(name))
    assert req.specifier.contains(installed, prereleases=True), (
        f"{name} {installed} is outside {req.specifier}: run tests/unit/test_fences.py and "
        "the trick's equivalence test on it, then move the bound (docs/architecture.md)"
    )


def test_uvicorn_http_protocol_still_has_what_peer_cred_protocol_overrides() -> None:
    """``api/server.py``'s ``PeerCredProtocol`` subclasses uvicorn's internal
    ``HttpToolsProtocol`` and writes raw answers with its ``STATUS_LINE`` table."""
    from uvicorn.protocols.http import httptools_impl

    from jobctl.api.server import PeerCredProtocol

    base = httptools_impl.HttpToolsProtocol
    overridden = {
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "on_message_begin": ["self"],
        "on_headers_complete": ["self"],
        "on_message_complete": ["self"],
    }
    for name, params in overridden.items():
        assert name in vars(PeerCredProtocol), f"PeerCredProtocol no longer overrides {name}"
        theirs = list(inspect.signature(getattr(base, name)).parameters)
        assert theirs == params, f"uvicorn's HttpToolsProtocol.{name} is now {theirs}"
    init = inspect.signature(base.__init__).parameters
    assert {"config", "server_state", "app_state"} <= set(init), f"its __init__: {list(init)}"
    for status in (408, 431, 503):
        assert httptools_impl.STATUS_LINE[status].startswith(f"HTTP/1.1 {status} ".encode())


def test_uvicorn_request_cycle_still_has_what_the_fast_path_uses() -> None:
    """``api/fastproto.py``'s ``FastCycle`` subclasses uvicorn's ``RequestResponseCycle``
    (built as its protocol builds one, started with its ``_start_asgi_task``), and
    ``api/coalesce.py`` replaces a cycle's ``transport`` and ``send``."""
    from uvicorn.protocols.http import httptools_impl

    from jobctl.api.fastproto import FastCycle

    cycle = httptools_impl.RequestResponseCycle
    params = list(inspect.signature(cycle.__init__).parameters)
    assert params == [
        "self",
        "scope",
        "transport",
        "flow",
        "logger",
        "access_logger",
        "access_log",
        "default_headers",
        "message_event",
        "expect_100_continue",
        "keep_alive",
        "on_response",
    ], f"uvicorn's RequestResponseCycle.__init__ is now {params}"
    assert set(vars(FastCycle)) >= {"run_asgi"}
    for name in ("run_asgi", "send", "receive", "send_500_response"):
        assert inspect.iscoroutinefunction(getattr(cycle, name)), name
    start = list(inspect.signature(httptools_impl.HttpToolsProtocol._start_asgi_task).parameters)
    assert start == ["self", "cycle", "app"], f"its _start_asgi_task is now {start}"
    source = inspect.getsource(cycle)
    for used in (
        "self.body",
        "self.more_body",
        "self.disconnected",
        "self.response_complete",
        "self.default_headers",
        "self.transport.write",
        "self.send",
    ):
        assert used in source, f"RequestResponseCycle no longer uses {used}"


async def test_uvicorn_http_protocol_serves_peer_cred_protocol_on_a_real_socket() -> None:
    """Its ``__init__`` keeps ``app_state``, ``loop`` and ``transport``, and a connection
    made through it carries the peer's uid, as the daemon's requests rely on."""
    import asyncio
    import os
    import socket

    import uvicorn
    from uvicorn.server import ServerState

    from jobctl.api.server import PeerCredProtocol

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    config = uvicorn.Config(app, http="httptools", lifespan="off", log_config=None)
    config.load()
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        transport, proto = await loop.connect_accepted_socket(
            lambda: PeerCredProtocol(config=config, server_state=ServerState(), app_state={}),
            ours,
        )
        try:
            assert proto.loop is loop and proto.transport is not None
            assert proto.app_state["peer_uid"] == os.getuid()
            assert proto.app_state["peer_pid"] == os.getpid()
        finally:
            transport.close()
            await asyncio.sleep(0)


def test_the_logging_switches_still_skip_the_caller_lookup() -> None:
    """``daemon.py`` sets ``logging._srcfile = None`` (documented in the logging
    HOWTO, but a private name): each record then skips a stack walk."""
    assert hasattr(logging, "_srcfile"), "logging._srcfile is gone: setup_logging is a no-op"
    saved = logging._srcfile
    logger = logging.getLogger("jobctl.test_fences")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    try:
        logging._srcfile = None
        logger.warning("skipped")
        # what logging sets at import (an earlier test may have run the daemon's setup)
        logging._srcfile = os.path.normcase(logging.addLevelName.__code__.co_filename)
        logger.warning("looked up")
    finally:
        logging._srcfile = saved
        logger.removeHandler(handler)
    assert records[0].pathname == "(unknown file)", "the switch no longer skips the lookup"
    assert records[1].pathname == __file__


def test_generated_spec_builders_set_exactly_the_dataclass_fields() -> None:
    """``domain/models.py`` builds ``trusted_spec`` with ``exec`` from
    ``JobSpec.__dataclass_fields__`` and stores them into a twin class of its slots
    (``domain/slotted.py``): that
    holds only while every field is an init field with no computed state beside it."""
    from jobctl.domain import models

    fields = dataclasses.fields(models.JobSpec)
    assert all(f.init for f in fields), "a field that __init__ does not take"
    assert tuple(f.name for f in fields) == models._SPEC_FIELDS
    spec = models.JobSpec(("echo", "hi"), datetime(2030, 1, 1, tzinfo=UTC), 1000, key="k")
    built = models.trusted_spec(**{f.name: getattr(spec, f.name) for f in fields})
    assert built == spec and type(built) is models.JobSpec
    assert getattr(built, "__dict__", {}) == getattr(spec, "__dict__", {})


def test_the_generated_finished_job_copy_sets_exactly_the_dataclass_fields() -> None:
    """``engine/results.py`` copies a claimed :class:`Job` with ``exec``-built code from
    ``Job.__dataclass_fields__``, stored slot by slot (issue 17, ``domain/slotted.py``):
    that holds only while every field is an init field with no computed state beside it,
    and the fields it changes are fields."""
    from jobctl.domain import models
    from jobctl.engine import results

    fields = dataclasses.fields(models.Job)
    assert all(f.init for f in fields), "a field that __init__ does not take"
    assert set(results._AFTER) <= {f.name for f in fields}
    assert not hasattr(models.Job, "__post_init__"), "Job now checks itself: copy with replace"


async def test_fastapi_still_leaves_the_matched_route_in_the_scope() -> None:
    """The audit trail (``api/middleware.py``) reads the route template from
    ``scope["route"]``, which FastAPI's router sets (the enqueue fast path in
    ``api/fast.py`` sets a stand-in the same way). Were it gone, audit records would
    lose their route silently."""
    import httpx
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/v1/things/{thing_id}")
    async def thing(thing_id: int) -> dict[str, int]:
        return {"id": thing_id}

    seen: dict[str, object] = {}

    async def outer(scope: dict[str, object], receive: object, send: object) -> None:
        await app(scope, receive, send)  # type: ignore[arg-type]
        seen["path"] = getattr(scope.get("route"), "path", None)

    transport = httpx.ASGITransport(app=outer)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/v1/things/7")).json() == {"id": 7}
    assert seen["path"] == "/v1/things/{thing_id}", "FastAPI no longer sets scope['route']"


def test_the_spawn_helpers_launcher_library_still_loads_and_starts_into_a_cgroup() -> None:
    """Trick: engine/launch.c as the spawn helper's library (a vfork child; clone3 into a
    cgroup on x86-64). Where it could be had (root, a C compiler, x86-64, a writable
    cgroup v2), it must load and pass its start tests: a build that breaks, or a kernel or
    C library that refuses it, would otherwise silently put the launcher's exec back."""
    import platform

    from jobctl.engine import cgroup, launcher, spawnsys

    if os.geteuid() != 0 or platform.machine() != "x86_64" or cgroup.detect("auto")[0] is None:
        pytest.skip("the trick is not expected here")
    library = launcher.library(launcher.default())
    assert library is not None, "launch.c no longer builds as the helper's library"
    home = spawnsys.own_cgroup_procs()
    native = spawnsys.load_native(library, home and os.path.dirname(home))
    assert native is not None, "the launcher's library fails its start test"
    assert native.into is not None, "clone3 into a cgroup fails its start test"
