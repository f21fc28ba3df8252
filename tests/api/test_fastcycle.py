"""The fast path's request cycle (api/fastproto.py) is uvicorn's, built without its
keywords: the same attributes with the same values, so uvicorn's own methods (the 500
answer, the protocol's callbacks) find what they read; and its body signal behaves as the
``asyncio.Event`` it stands for."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from unittest import mock

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from jobctl.api.fastproto import BodySignal, FastCycle


def _attributes(cycle: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(cycle).items() if k != "message_event"}


def test_the_fast_cycle_has_uvicorns_attributes_and_values() -> None:
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/jobs"}
    transport, flow, on_response = mock.Mock(), mock.Mock(), mock.Mock()
    logger = logging.getLogger("uvicorn.error")
    headers = [(b"server", b"uvicorn")]
    for keep_alive in (True, False):
        theirs = RequestResponseCycle(
            scope=scope,  # type: ignore[arg-type]
            transport=transport,
            flow=flow,
            logger=logger,
            access_logger=logging.getLogger("uvicorn.access"),
            access_log=False,
            default_headers=headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=keep_alive,
            on_response=on_response,
        )
        ours = FastCycle(
            scope,  # type: ignore[arg-type]
            transport,
            flow,
            logger,
            headers,
            keep_alive,
            on_response,
        )
        assert _attributes(ours) == _attributes(theirs)
        assert set(vars(ours)) == set(vars(theirs))
        assert not ours.message_event.is_set()


def test_the_body_signal_wakes_its_waiter_and_is_cleared() -> None:
    async def scenario() -> list[str]:
        seen: list[str] = []
        signal = BodySignal()

        async def reader() -> None:
            await signal.wait()
            seen.append("woken")

        task = asyncio.create_task(reader())
        await asyncio.sleep(0)
        seen.append("waiting" if not task.done() else "not waiting")
        signal.set()
        signal.set()  # again, as the protocol does (body, then its end): harmless
        await task
        assert signal.is_set()
        signal.clear()
        assert not signal.is_set()
        signal.set()
        await asyncio.wait_for(signal.wait(), 1)  # already set: returns at once
        seen.append("done")
        return seen

    assert asyncio.run(scenario()) == ["waiting", "woken", "done"]
